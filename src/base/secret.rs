//! A string that must never be printed: admin token, attach secret, pod admin credential.
//! `Debug` and `Display` mask it; comparison is constant-time over SHA-256 digests, so
//! neither content nor length leaks through timing.

use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

#[derive(Clone, PartialEq, Eq)]
pub struct Secret(String);

impl Secret {
    pub fn new(value: impl Into<String>) -> Self {
        Secret(value.into())
    }

    /// The raw value, for the one place that must send it (a header, a file).
    pub fn expose(&self) -> &str {
        &self.0
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Constant-time comparison that also hides a length difference.
    pub fn matches(&self, candidate: &str) -> bool {
        let a = Sha256::digest(self.0.as_bytes());
        let b = Sha256::digest(candidate.as_bytes());
        a.ct_eq(&b).into()
    }

    /// Can this value travel in an HTTP header (`Authorization: Bearer …`)? Only printable
    /// ASCII can: the WebSocket client refuses anything else, so a grant holding such a
    /// secret could never dial.
    pub fn is_header_safe(value: &str) -> bool {
        value.bytes().all(|b| (0x20..0x7f).contains(&b))
    }

    /// A fresh random 256-bit secret, hex-encoded.
    pub fn random() -> std::io::Result<Self> {
        let mut bytes = [0u8; 32];
        getrandom::fill(&mut bytes).map_err(std::io::Error::other)?;
        Ok(Secret(bytes.iter().map(|b| format!("{b:02x}")).collect()))
    }
}

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Secret(***)")
    }
}

impl std::fmt::Display for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("***")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn never_printed() {
        let s = Secret::new("hunter2");
        assert!(!format!("{s:?} {s}").contains("hunter2"));
        assert!(!format!("{:?}", Some(vec![s])).contains("hunter2"));
    }

    #[test]
    fn matches_exactly() {
        let s = Secret::new("s3cret");
        assert!(s.matches("s3cret"));
        assert!(!s.matches("s3"));
        assert!(!s.matches("s3cret "));
        assert!(!s.matches(""));
    }

    #[test]
    fn random_is_256_bits_hex_and_fresh() {
        let a = Secret::random().unwrap();
        assert_eq!(a.expose().len(), 64);
        assert_ne!(a, Secret::random().unwrap());
    }
}
