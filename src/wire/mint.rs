//! Minting an attach secret at the pod with its admin credential (contract §4). The
//! credential is used for this one request and then dropped; it is never stored, logged
//! or returned.
//!
//! One HTTP/1.1 POST ([`crate::wire::http`]) over the same rustls configuration the dial
//! uses, so a `--ca-file` private CA and the webpki roots apply to both alike. The HTTP
//! framing is ureq's; what is ours, and fuzzed, is [`parse_reply`]: a status and a body
//! to a secret or a refusal that quotes a bounded part of the body.

use std::sync::Arc;
use std::time::Duration;

use serde_json::Value;

use crate::base::error::Error;
use crate::base::secret::Secret;
use crate::base::url::strip_prefix_ci;
use crate::wire::http::{self, Client, Request, Target};

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
    let response = Client::new(timeout, Some(Arc::clone(tls)))
        .send(&request)
        .map_err(|e| refused(0, e.to_string().as_bytes()))?;
    let status = response.status;
    let body =
        response
            .read_body(MAX_RESPONSE_BYTES)
            .map_err(|e| match http::is_too_large(&e) {
                true => refused(status, b"response larger than 64 KiB"),
                false => refused(status, e.to_string().as_bytes()),
            })?;
    parse_reply(status, &body)
}

/// The pod's answer, once its body is read: the secret of a 2xx JSON body, or a refusal
/// that quotes the start of the body.
pub fn parse_reply(status: u16, body: &[u8]) -> Result<Minted, Error> {
    if body.len() as u64 > MAX_RESPONSE_BYTES {
        return Err(refused(status, b"response larger than 64 KiB"));
    }
    if !(200..300).contains(&status) {
        return Err(refused(status, body));
    }
    let v: Value = serde_json::from_slice(body).map_err(|_| refused(status, body))?;
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
    fn replies() {
        let ok = b"{\"secret\":\"abc\",\"expires_in_secs\":120}";
        let m = parse_reply(201, ok).unwrap();
        assert_eq!(m.secret.expose(), "abc");
        assert_eq!(m.expires_in_secs, Some(120));
        let err = parse_reply(403, b"nope!!").unwrap_err();
        assert_eq!(
            err.to_string(),
            "runtime refused to mint (HTTP 403): nope!!"
        );
        match parse_reply(500, "e".repeat(500).as_bytes()).unwrap_err() {
            Error::Mint { status, body } => {
                assert_eq!(status, 500);
                assert_eq!(body.len(), 200);
            }
            other => panic!("{other:?}"),
        }
        assert!(matches!(
            parse_reply(201, b"{\"token\":\"x\"}"),
            Err(Error::Mint { status: 201, .. })
        ));
        // A secret the dial could not send as a header is no secret (fuzz regression).
        assert!(matches!(
            parse_reply(201, b"{\"secret\":\"a\\nb\"}"),
            Err(Error::Mint { status: 201, .. })
        ));
        assert!(matches!(
            parse_reply(200, b"garbage"),
            Err(Error::Mint { status: 200, .. })
        ));
        let over = vec![b' '; MAX_RESPONSE_BYTES as usize + 1];
        assert!(parse_reply(200, &over)
            .unwrap_err()
            .to_string()
            .contains("larger than 64 KiB"));
    }

    /// A one-shot HTTP server on loopback that answers `raw` and hands back the request.
    fn serve(raw: Vec<u8>) -> (String, std::thread::JoinHandle<String>) {
        use std::io::{Read, Write};
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let url = format!("ws://{}", listener.local_addr().unwrap());
        let server = std::thread::spawn(move || {
            let (mut s, _) = listener.accept().unwrap();
            s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
            let mut request = Vec::new();
            let mut buf = [0u8; 4096];
            while !request.ends_with(b"{\"ttl_secs\":60}") {
                let n = s.read(&mut buf).unwrap();
                assert!(n > 0, "the request was cut");
                request.extend_from_slice(&buf[..n]);
            }
            let _ = s.write_all(&raw);
            String::from_utf8_lossy(&request).into_owned()
        });
        (url, server)
    }

    fn mint_from(raw: &[u8]) -> (Result<Minted, Error>, String) {
        let (url, server) = serve(raw.to_vec());
        let tls = crate::wire::tls::client_config(None).unwrap();
        let credential = Secret::new("pod-credential".to_string());
        let got = mint(&url, "s1", &credential, 60, Duration::from_secs(10), &tls);
        (got, server.join().unwrap())
    }

    #[test]
    fn minting_over_http_sized_chunked_and_refused() {
        let (got, request) =
            mint_from(b"HTTP/1.1 201 Created\r\nContent-Length: 16\r\n\r\n{\"secret\":\"abc\"}");
        assert_eq!(got.unwrap().secret.expose(), "abc");
        let head = request.to_ascii_lowercase();
        assert!(head.starts_with("post /admin/sessions/s1/tools-attach http/1.1\r\n"));
        assert!(head.contains("\r\nauthorization: bearer pod-credential\r\n"));
        assert!(head.contains("\r\ncontent-length: 15\r\n"));
        let chunked = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\n{\"sec\r\nb\r\nret\":\"xyz\"}\r\n0\r\n\r\n";
        assert_eq!(mint_from(chunked).0.unwrap().secret.expose(), "xyz");
        let denied = b"HTTP/1.1 403 Forbidden\r\nContent-Length: 6\r\n\r\nnope!!";
        assert_eq!(
            mint_from(denied).0.unwrap_err().to_string(),
            "runtime refused to mint (HTTP 403): nope!!"
        );
        // A redirect is not followed: it is the pod's answer.
        let moved =
            b"HTTP/1.1 302 Found\r\nLocation: http://127.0.0.1:1/\r\nContent-Length: 0\r\n\r\n";
        assert!(matches!(
            mint_from(moved).0,
            Err(Error::Mint { status: 302, .. })
        ));
        // A chunk size near u64::MAX is malformed, not a panic (fuzz regression).
        let huge = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\n{\"sec\r\nffffffffffffffff\r\n0\r\n\r\n";
        assert!(mint_from(huge).0.is_err());
        assert!(matches!(
            mint_from(b"garbage\r\n\r\n").0,
            Err(Error::Mint { status: 0, .. })
        ));
    }

    #[test]
    fn a_mint_body_one_byte_over_the_cap_is_refused_and_at_the_cap_is_not() {
        let reply = |len: usize| {
            let json = "{\"secret\":\"abc\"}";
            let body = format!("{json}{}", " ".repeat(len - json.len()));
            format!("HTTP/1.1 201 Created\r\nContent-Length: {len}\r\n\r\n{body}").into_bytes()
        };
        let at = MAX_RESPONSE_BYTES as usize;
        assert_eq!(mint_from(&reply(at)).0.unwrap().secret.expose(), "abc");
        let err = mint_from(&reply(at + 1)).0.unwrap_err().to_string();
        assert!(err.contains("larger than 64 KiB"), "{err}");
    }
}
