//! Minting an attach secret at the pod with its admin credential (contract §4). The
//! credential is used for this one request and then dropped; it is never stored, logged
//! or returned.
//!
//! One HTTP/1.1 POST ([`crate::wire::httpc`]) over the same rustls configuration the dial uses, so a
//! `--ca-file` private CA and the webpki roots apply to both alike.

use std::io::BufRead;
use std::sync::Arc;
use std::time::Duration;

use serde_json::Value;

use crate::base::error::Error;
use crate::base::secret::Secret;
use crate::base::url::strip_prefix_ci;
use crate::wire::httpc::{self, Request, Target};

/// Largest mint response we read; a secret and a TTL fit in far less.
const MAX_RESPONSE_BYTES: u64 = 64 << 10;
/// How much of a refusal's body we quote back to the operator.
const QUOTED_BODY_BYTES: usize = 200;

/// What the pod gave us.
#[derive(Debug)]
pub struct Minted {
    pub secret: Secret,
    /// The pod's own TTL for the secret, when it said.
    pub expires_in_secs: Option<u64>,
}

/// `POST <http|https>://host[:port]<path>/admin/sessions/<session>/tools-attach`.
pub fn mint_url(runtime: &str, session: &str) -> Result<String, String> {
    let base = runtime.strip_suffix('/').unwrap_or(runtime);
    let rest = if let Some(r) = strip_prefix_ci(base, "wss://") {
        format!("https://{r}")
    } else if let Some(r) = strip_prefix_ci(base, "ws://") {
        format!("http://{r}")
    } else {
        return Err("runtime must be a ws:// or wss:// URL".into());
    };
    Ok(format!("{rest}/admin/sessions/{session}/tools-attach"))
}

fn refused(status: u16, body: &[u8]) -> Error {
    let cut = &body[..body.len().min(QUOTED_BODY_BYTES)];
    Error::Mint {
        status,
        body: String::from_utf8_lossy(cut).into_owned(),
    }
}

/// Ask the pod for an attach secret valid for `ttl_secs`.
pub fn mint(
    runtime: &str,
    session: &str,
    credential: &Secret,
    ttl_secs: u64,
    timeout: Duration,
    tls: &Arc<rustls::ClientConfig>,
) -> Result<Minted, Error> {
    let url = mint_url(runtime, session).map_err(|e| refused(0, e.as_bytes()))?;
    let target = Target::parse(&url).map_err(|e| refused(0, e.as_bytes()))?;
    let body = serde_json::json!({ "ttl_secs": ttl_secs }).to_string();
    let authorization = format!("Bearer {}", credential.expose());
    let request = Request {
        method: "POST",
        target: &target,
        headers: &[
            ("Authorization", &authorization),
            ("Content-Type", "application/json"),
            ("Accept", "application/json"),
        ],
        body: Some(body.as_bytes()),
    };
    let response = httpc::send(&request, timeout, Some(tls))
        .map_err(|e| refused(0, e.to_string().as_bytes()))?;
    reply(response)
}

/// Parse a complete HTTP/1.1 response and pull the secret out of a 2xx body.
pub fn parse_response(raw: &[u8]) -> Result<Minted, Error> {
    let response = httpc::read_head(raw).map_err(|e| refused(0, e.to_string().as_bytes()))?;
    reply(response)
}

fn reply<R: BufRead>(response: httpc::Response<R>) -> Result<Minted, Error> {
    let status = response.status;
    let body =
        response
            .read_body(MAX_RESPONSE_BYTES)
            .map_err(|e| match httpc::is_too_large(&e) {
                true => refused(status, b"response larger than 64 KiB"),
                false => refused(status, e.to_string().as_bytes()),
            })?;
    if !(200..300).contains(&status) {
        return Err(refused(status, &body));
    }
    let v: Value = serde_json::from_slice(&body).map_err(|_| refused(status, &body))?;
    let secret = match v.get("secret") {
        // It goes in the Authorization header of every dial.
        Some(Value::String(s)) if !s.is_empty() && Secret::is_header_safe(s) => {
            Secret::new(s.clone())
        }
        _ => return Err(refused(status, b"response has no usable \"secret\" string")),
    };
    Ok(Minted {
        secret,
        expires_in_secs: v.get("expires_in_secs").and_then(Value::as_u64),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mint_urls() {
        assert_eq!(
            mint_url("ws://h:1/", "s").unwrap(),
            "http://h:1/admin/sessions/s/tools-attach"
        );
        assert_eq!(
            mint_url("wss://h/base", "s").unwrap(),
            "https://h/base/admin/sessions/s/tools-attach"
        );
        assert!(mint_url("http://h", "s").is_err());
    }

    #[test]
    fn responses() {
        let ok = b"HTTP/1.1 201 Created\r\nContent-Length: 38\r\n\r\n{\"secret\":\"abc\",\"expires_in_secs\":120}";
        let m = parse_response(ok).unwrap();
        assert_eq!(m.secret.expose(), "abc");
        assert_eq!(m.expires_in_secs, Some(120));
        let chunked = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\n{\"sec\r\nb\r\nret\":\"xyz\"}\r\n0\r\n\r\n";
        assert_eq!(parse_response(chunked).unwrap().secret.expose(), "xyz");
        let denied = b"HTTP/1.1 403 Forbidden\r\nContent-Length: 6\r\n\r\nnope!!";
        let err = parse_response(denied).unwrap_err();
        assert_eq!(
            err.to_string(),
            "runtime refused to mint (HTTP 403): nope!!"
        );
        let long = format!("HTTP/1.1 500 X\r\n\r\n{}", "e".repeat(500));
        match parse_response(long.as_bytes()).unwrap_err() {
            Error::Mint { status, body } => {
                assert_eq!(status, 500);
                assert_eq!(body.len(), 200);
            }
            other => panic!("{other:?}"),
        }
        let no_secret = b"HTTP/1.1 201 Created\r\n\r\n{\"token\":\"x\"}";
        assert!(matches!(
            parse_response(no_secret),
            Err(Error::Mint { status: 201, .. })
        ));
        // A chunk size near usize::MAX is malformed, not a panic (fuzz regression).
        for size in ["ffffffffffffffff", "fffffffffffffffe"] {
            let huge = format!(
                "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\n{{\"sec\r\n{size}\r\n0\r\n\r\n"
            );
            assert!(matches!(
                parse_response(huge.as_bytes()),
                Err(Error::Mint { status: 200, .. })
            ));
        }
        // A secret the dial could not send as a header is no secret (fuzz regression).
        let ctl = b"HTTP/1.1 201 Created\r\n\r\n{\"secret\":\"a\\nb\"}";
        assert!(matches!(
            parse_response(ctl),
            Err(Error::Mint { status: 201, .. })
        ));
        assert!(matches!(
            parse_response(b"garbage"),
            Err(Error::Mint { status: 0, .. })
        ));
    }
}
