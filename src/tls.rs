//! The rustls client configuration for `wss://` dials and `https://` mints: webpki roots
//! plus the operator's private CA (`--ca-file`), with the ring provider.

use std::path::Path;
use std::sync::Arc;

use rustls::{ClientConfig, RootCertStore};

use crate::error::Error;

pub fn client_config(ca_file: Option<&Path>) -> Result<Arc<ClientConfig>, Error> {
    let mut roots = RootCertStore::empty();
    roots.extend(webpki_roots::TLS_SERVER_ROOTS.iter().cloned());
    if let Some(path) = ca_file {
        let pem = std::fs::read(path)
            .map_err(|e| Error::Config(format!("--ca-file {}: {e}", path.display())))?;
        let mut added = 0;
        for cert in rustls_pemfile::certs(&mut pem.as_slice()) {
            let cert = cert.map_err(|e| {
                Error::Config(format!(
                    "--ca-file {}: not PEM certificates: {e}",
                    path.display()
                ))
            })?;
            roots.add(cert).map_err(|e| {
                Error::Config(format!(
                    "--ca-file {}: unusable certificate: {e}",
                    path.display()
                ))
            })?;
            added += 1;
        }
        if added == 0 {
            return Err(Error::Config(format!(
                "--ca-file {}: no PEM certificate found (expected -----BEGIN CERTIFICATE-----)",
                path.display()
            )));
        }
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| Error::Config(format!("TLS setup: {e}")))?
        .with_root_certificates(roots)
        .with_no_client_auth();
    Ok(Arc::new(config))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_ca_file_without_certificates_is_a_config_error() {
        let dir = std::env::temp_dir().join(format!("hn-tls-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("empty.pem");
        std::fs::write(&path, "nothing here").unwrap();
        let err = client_config(Some(&path)).unwrap_err();
        assert!(err.to_string().contains("no PEM certificate"), "{err}");
        assert!(client_config(None).is_ok());
        let missing = client_config(Some(&dir.join("missing.pem"))).unwrap_err();
        assert!(matches!(missing, Error::Config(_)));
    }
}
