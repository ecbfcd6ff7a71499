//! Minting an attach secret at the pod with its admin credential (contract §4). The
//! credential is used for this one request and then dropped; it is never stored, logged
//! or returned.
//!
//! A hand-rolled HTTP/1.1 POST over the same rustls configuration the dial uses, so a
//! `--ca-file` private CA and the webpki roots apply to both alike.

use std::io::{Read, Write};
use std::net::{TcpStream, ToSocketAddrs};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::dial::{endpoint, strip_prefix_ci};
use crate::error::Error;
use crate::secret::Secret;

/// Largest mint response we read; a secret and a TTL fit in far less.
const MAX_RESPONSE_BYTES: usize = 64 << 10;
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
    let deadline = Instant::now() + timeout;
    let ep = endpoint(runtime).map_err(|e| refused(0, e.as_bytes()))?;
    let base = runtime.strip_suffix('/').unwrap_or(runtime);
    let after_scheme = &base[if ep.tls { 6 } else { 5 }..];
    let path_start = after_scheme.find('/').unwrap_or(after_scheme.len());
    let base_path = &after_scheme[path_start..];
    let path = format!("{base_path}/admin/sessions/{session}/tools-attach");
    let body = serde_json::json!({ "ttl_secs": ttl_secs }).to_string();
    let host_header = if ep.host.contains(':') {
        format!("[{}]:{}", ep.host, ep.port)
    } else {
        format!("{}:{}", ep.host, ep.port)
    };
    let request = format!(
        "POST {path} HTTP/1.1\r\nHost: {host_header}\r\nAuthorization: Bearer {}\r\n\
         Content-Type: application/json\r\nAccept: application/json\r\n\
         Content-Length: {}\r\nConnection: close\r\nUser-Agent: handnode/{}\r\n\r\n{body}",
        credential.expose(),
        body.len(),
        env!("CARGO_PKG_VERSION"),
    );
    let transport = |e: std::io::Error| refused(0, format!("{e}").as_bytes());
    let addrs: Vec<_> = (ep.host.as_str(), ep.port)
        .to_socket_addrs()
        .map_err(transport)?
        .collect();
    let mut tcp = None;
    let mut last = std::io::Error::other("no address");
    for addr in addrs {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            break;
        }
        match TcpStream::connect_timeout(&addr, left) {
            Ok(s) => {
                tcp = Some(s);
                break;
            }
            Err(e) => last = e,
        }
    }
    let tcp = tcp.ok_or_else(|| transport(last))?;
    let mut raw = Vec::new();
    let io = |tcp: &TcpStream| -> std::io::Result<()> {
        let left = deadline
            .saturating_duration_since(Instant::now())
            .max(Duration::from_millis(1));
        tcp.set_read_timeout(Some(left))?;
        tcp.set_write_timeout(Some(left))
    };
    io(&tcp).map_err(transport)?;
    if ep.tls {
        let name = rustls::pki_types::ServerName::try_from(ep.host.clone())
            .map_err(|e| refused(0, e.to_string().as_bytes()))?;
        let conn = rustls::ClientConnection::new(Arc::clone(tls), name)
            .map_err(|e| refused(0, e.to_string().as_bytes()))?;
        let mut stream = rustls::StreamOwned::new(conn, tcp);
        stream.write_all(request.as_bytes()).map_err(transport)?;
        read_capped(&mut stream, &mut raw, deadline, |s| io(&s.sock)).map_err(transport)?;
    } else {
        let mut stream = tcp;
        stream.write_all(request.as_bytes()).map_err(transport)?;
        read_capped(&mut stream, &mut raw, deadline, |s| io(s)).map_err(transport)?;
    }
    parse_response(&raw)
}

/// Read until EOF, the cap, or the deadline.
fn read_capped<S: Read>(
    stream: &mut S,
    out: &mut Vec<u8>,
    deadline: Instant,
    mut refresh_timeout: impl FnMut(&S) -> std::io::Result<()>,
) -> std::io::Result<()> {
    let mut buf = [0u8; 8192];
    loop {
        if Instant::now() >= deadline {
            return Err(std::io::Error::new(
                std::io::ErrorKind::TimedOut,
                "mint timeout",
            ));
        }
        refresh_timeout(stream)?;
        match stream.read(&mut buf) {
            Ok(0) => return Ok(()),
            Ok(n) => {
                out.extend_from_slice(&buf[..n]);
                if out.len() > MAX_RESPONSE_BYTES {
                    return Err(std::io::Error::other("response larger than 64 KiB"));
                }
            }
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            // A TLS peer that closes without close_notify after a complete response.
            Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof && !out.is_empty() => {
                return Ok(())
            }
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) =>
            {
                return Err(std::io::Error::new(
                    std::io::ErrorKind::TimedOut,
                    "mint timeout",
                ))
            }
            Err(e) => return Err(e),
        }
    }
}

/// Parse a complete HTTP/1.1 response and pull the secret out of a 2xx body.
pub fn parse_response(raw: &[u8]) -> Result<Minted, Error> {
    let mut headers = [httparse::EMPTY_HEADER; 64];
    let mut resp = httparse::Response::new(&mut headers);
    let head_len = match resp.parse(raw) {
        Ok(httparse::Status::Complete(n)) => n,
        Ok(httparse::Status::Partial) => return Err(refused(0, b"incomplete HTTP response")),
        Err(e) => return Err(refused(0, format!("bad HTTP response: {e}").as_bytes())),
    };
    let status = resp.code.unwrap_or(0);
    let chunked = resp.headers.iter().any(|h| {
        h.name.eq_ignore_ascii_case("transfer-encoding")
            && String::from_utf8_lossy(h.value)
                .to_ascii_lowercase()
                .contains("chunked")
    });
    let content_length = resp
        .headers
        .iter()
        .find(|h| h.name.eq_ignore_ascii_case("content-length"))
        .and_then(|h| {
            std::str::from_utf8(h.value)
                .ok()?
                .trim()
                .parse::<usize>()
                .ok()
        });
    let rest = &raw[head_len..];
    let body = if chunked {
        dechunk(rest).ok_or_else(|| refused(status, b"malformed chunked body"))?
    } else if let Some(n) = content_length {
        rest[..n.min(rest.len())].to_vec()
    } else {
        rest.to_vec()
    };
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

fn dechunk(mut data: &[u8]) -> Option<Vec<u8>> {
    let mut out = Vec::new();
    loop {
        let line_end = data.windows(2).position(|w| w == b"\r\n")?;
        let size_text = std::str::from_utf8(&data[..line_end]).ok()?;
        let size = usize::from_str_radix(size_text.split(';').next()?.trim(), 16).ok()?;
        data = &data[line_end + 2..];
        if size == 0 {
            return Some(out);
        }
        // A pod may claim any size: `size + 2` must not wrap (it panicked the handler).
        if data.len() < size.checked_add(2)? {
            return None;
        }
        out.extend_from_slice(&data[..size]);
        data = &data[size + 2..];
    }
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
        let ok = b"HTTP/1.1 201 Created\r\nContent-Length: 39\r\n\r\n{\"secret\":\"abc\",\"expires_in_secs\":120}";
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
