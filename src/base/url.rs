//! URL and authority parsing shared by everything that dials or requests: `ws`/`wss`
//! endpoints (the dial, grant validation, `grants.json` drop rules), `http`/`https`
//! targets (`http`, `mint`), and the longest runtime URL accepted. No I/O.

/// Longest runtime URL we accept (bytes).
pub const MAX_RUNTIME_URL_BYTES: usize = 2_048;

/// The admin API's check of a runtime URL (length, no whitespace or control bytes, a
/// `ws`/`wss` endpoint that can be dialled), shared with `grants.json`'s drop rules so a
/// grant the API accepted always resumes and a hand-edited one that never could is dropped.
pub fn is_runtime_url(s: &str) -> bool {
    s.len() <= MAX_RUNTIME_URL_BYTES
        && !s
            .bytes()
            .any(|b| b.is_ascii_whitespace() || b.is_ascii_control())
        && endpoint(s).is_ok()
}

/// Scheme, host and port of a `ws://` / `wss://` URL.
#[derive(Debug, PartialEq, Eq)]
pub struct Endpoint {
    pub tls: bool,
    pub host: String,
    pub port: u16,
}

/// Parse the authority of a `ws`/`wss` URL (userinfo refused, IPv6 in brackets).
pub fn endpoint(url: &str) -> Result<Endpoint, String> {
    let (tls, rest) = if let Some(rest) = strip_prefix_ci(url, "wss://") {
        (true, rest)
    } else if let Some(rest) = strip_prefix_ci(url, "ws://") {
        (false, rest)
    } else {
        return Err("not a ws:// or wss:// URL".into());
    };
    let authority = rest.split(['/', '?', '#']).next().unwrap_or("");
    let (host, port) = authority_parts(authority, if tls { 443 } else { 80 })?;
    // The attach path is appended to the URL, so a query or fragment would swallow it.
    if rest.contains(['?', '#']) {
        return Err("a query or fragment is not allowed".into());
    }
    if url.parse::<tungstenite::http::Uri>().is_err() {
        return Err("not a valid URL".into());
    }
    Ok(Endpoint { tls, host, port })
}

/// Host (lower-case, IPv6 without brackets) and port of a URL authority; userinfo refused.
pub fn authority_parts(authority: &str, default_port: u16) -> Result<(String, u16), String> {
    if authority.contains('@') {
        return Err("credentials in the URL are not supported".into());
    }
    let (host, port) = if let Some(after) = authority.strip_prefix('[') {
        let (host, tail) = after.split_once(']').ok_or("unclosed [ in host")?;
        let port = match tail.strip_prefix(':') {
            Some(p) => port_number(p)?,
            None if tail.is_empty() => default_port,
            None => return Err("junk after ]".into()),
        };
        (host.to_string(), port)
    } else {
        match authority.rsplit_once(':') {
            Some((h, p)) => (h.to_string(), port_number(p)?),
            None => (authority.to_string(), default_port),
        }
    };
    if host.is_empty() {
        return Err("no host".into());
    }
    if port == 0 {
        return Err("port 0".into());
    }
    // A host the resolver and the WebSocket client both take: a DNS name or IPv4 address,
    // or an IPv6 address in brackets. Anything else passed here once and then redialled
    // forever ("invalid authority"), e.g. `pod.example::090` or `:1]`.
    let host_ok = if authority.starts_with('[') {
        host.parse::<std::net::Ipv6Addr>().is_ok()
    } else {
        host.bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_'))
    };
    if !host_ok {
        return Err(format!("bad host {host:?}"));
    }
    Ok((host.to_ascii_lowercase(), port))
}

/// Decimal digits only: `u16::from_str` also takes `+80`, which no URL parser does.
fn port_number(p: &str) -> Result<u16, String> {
    if p.is_empty() || !p.bytes().all(|b| b.is_ascii_digit()) {
        return Err(format!("bad port {p:?}"));
    }
    p.parse().map_err(|_| format!("bad port {p:?}"))
}

/// `s` without `prefix`, the prefix matched ASCII-case-insensitively.
pub fn strip_prefix_ci<'a>(s: &'a str, prefix: &str) -> Option<&'a str> {
    // `get`, not slicing: the cut may fall inside a multi-byte character (a panic before).
    match (s.get(..prefix.len()), s.get(prefix.len()..)) {
        (Some(head), Some(rest)) if head.eq_ignore_ascii_case(prefix) => Some(rest),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn endpoints() {
        assert_eq!(
            endpoint("ws://Host:9/x").unwrap(),
            Endpoint {
                tls: false,
                host: "host".into(),
                port: 9
            }
        );
        assert_eq!(
            endpoint("wss://pod.tail.ts.net").unwrap(),
            Endpoint {
                tls: true,
                host: "pod.tail.ts.net".into(),
                port: 443
            }
        );
        assert_eq!(
            endpoint("ws://[::1]:8090/").unwrap(),
            Endpoint {
                tls: false,
                host: "::1".into(),
                port: 8090
            }
        );
        assert_eq!(endpoint("WS://h").unwrap().port, 80);
        for bad in [
            "http://h",
            "ws://",
            "ws://:80",
            "ws://u:p@h",
            "ws://h:x",
            "ws://h:0",
            "ws://[::1",
            // Fuzz regressions: accepted once, then never dialable.
            "wss://pod.example::090/",
            "WSS://:1]:44343/x",
            "wss://pod%ee.example/",
            "ws://h:+80",
            "ws://[not-v6]:80",
            "ws://bücher.example",
            "ws://h/base?x=1",
            "ws://h/#frag",
            "ws://h/a b",
            "kSS:ۦz",
            "wé://x",
            "ws:/ۦ",
        ] {
            assert!(endpoint(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn runtime_urls_are_bounded_and_clean() {
        let long = format!("ws://h/{}", "a".repeat(MAX_RUNTIME_URL_BYTES - 7));
        assert_eq!(long.len(), MAX_RUNTIME_URL_BYTES);
        assert!(is_runtime_url(&long));
        assert!(!is_runtime_url(&format!("{long}a")));
        for bad in ["ws://h/\n", "ws://h /x", "http://h", ""] {
            assert!(!is_runtime_url(bad), "{bad:?}");
        }
        assert_eq!(strip_prefix_ci("WsS://x", "wss://"), Some("x"));
        assert_eq!(strip_prefix_ci("é", "w"), None);
    }
}
