//! What a browser may open under a grant (contract §14): every URL-bearing argument of a
//! browser tool ([`crate::profiles::BROWSER_URL_FIELDS`]) must be an `http:`/`https:` URL
//! with a host, or exactly `about:blank`. The check parses the text the way a browser's
//! URL parser (WHATWG) does before it looks at the scheme — leading and trailing C0
//! controls and spaces stripped, every tab and newline removed, the scheme case-folded —
//! so ` JaVa\tScript:` is `javascript:`. It is an allow-list: `file:`, `view-source:`,
//! `javascript:`, `data:`, `blob:` and every scheme not yet invented are refused.
//!
//! A text without a scheme (`example.com/x`) is what Playwright MCP turns into
//! `https://example.com/x` (`http://` for `localhost…`) before navigating: the check
//! judges it as that URL, so it passes when that URL has a host.

use serde_json::Value;

/// The start of every refusal; the scheme follows (`refused file:`).
pub const REFUSAL: &str = "only http and https pages (and about:blank) may be opened here; refused";

/// Longest scheme quoted back in a refusal (bytes); a longer one is cut and marked `…`.
const MAX_SHOWN_SCHEME: usize = 32;

/// The text a browser's URL parser actually reads: leading and trailing C0 controls and
/// spaces stripped, ASCII tab, LF and CR removed anywhere.
pub fn browser_view(raw: &str) -> String {
    let trimmed = raw.trim_matches(|c: char| c <= ' ');
    trimmed
        .chars()
        .filter(|c| !matches!(c, '\t' | '\n' | '\r'))
        .collect()
}

/// The scheme of `text` (already [`browser_view`]ed), lowercased, and the rest after its
/// `:`; `None` when the text has no scheme (a browser would read it as relative).
fn split_scheme(text: &str) -> Option<(String, &str)> {
    let mut chars = text.char_indices();
    let (_, first) = chars.next()?;
    if !first.is_ascii_alphabetic() {
        return None;
    }
    for (i, c) in chars {
        if c == ':' {
            return Some((text[..i].to_ascii_lowercase(), &text[i + 1..]));
        }
        if !(c.is_ascii_alphanumeric() || matches!(c, '+' | '-' | '.')) {
            return None;
        }
    }
    None
}

/// Whether the part after `http:`/`https:` names a host, as a browser reads a special
/// URL: any run of `/` and `\` skipped, the authority up to the next `/`, `\`, `?` or
/// `#`, userinfo (up to the last `@`) dropped, the port dropped.
fn has_host(rest: &str) -> bool {
    let host_port = host_port(rest);
    let host = if host_port.starts_with('[') {
        match host_port.find(']') {
            Some(close) => &host_port[..=close],
            None => return false,
        }
    } else {
        host_port.split(':').next().unwrap_or("")
    };
    !host.is_empty() && host != "[]"
}

/// The `host[:port]` of the part after `http:`/`https:`, as a browser reads a special URL:
/// any run of `/` and `\\` skipped, the authority up to the next `/`, `\\`, `?` or `#`,
/// userinfo (up to the last `@`) dropped.
fn host_port(rest: &str) -> &str {
    let rest = rest.trim_start_matches(['/', '\\']);
    let end = rest.find(['/', '\\', '?', '#']).unwrap_or(rest.len());
    let authority = &rest[..end];
    match authority.rfind('@') {
        Some(at) => &authority[at + 1..],
        None => authority,
    }
}

/// `scheme` as quoted in a refusal: escaped, and cut to [`MAX_SHOWN_SCHEME`] bytes.
fn shown(scheme: &str) -> String {
    let mut out: String = scheme.chars().take(MAX_SHOWN_SCHEME).collect();
    if out.len() < scheme.len() {
        out.push('…');
    }
    out
}

/// The refusal of a URL that reaches the daemon's own admin listener.
pub const ADMIN_REFUSAL: &str =
    "refused: that URL reaches this box's handnode admin API, which no grant's browser may open";

/// Where the daemon's admin listener is, as the URL check must recognise it (contract §21):
/// its port on every loopback spelling, on the unspecified address, and on the names the
/// owner let in (`--allow-host`); with a listener on the unspecified address, the port on
/// any host.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct AdminOrigin {
    /// `None`: no admin listener to protect (unit tests of other modules).
    pub port: Option<u16>,
    /// `--allow-host` names (lowercase, no port), refused on that port too.
    pub hosts: Vec<String>,
    /// The listener takes every address of the box: the port is refused on any host.
    pub any_host: bool,
}

impl AdminOrigin {
    pub fn new(listen: std::net::SocketAddr, allow_hosts: &[String]) -> AdminOrigin {
        AdminOrigin {
            port: Some(listen.port()),
            hosts: allow_hosts
                .iter()
                .map(|h| h.trim().trim_end_matches('.').to_ascii_lowercase())
                .filter(|h| !h.is_empty())
                .collect(),
            any_host: listen.ip().is_unspecified(),
        }
    }

    /// Whether `host` (as [`host_of`] gives it) on `port` is the admin listener.
    fn is_admin(&self, host: &Host, port: u16) -> bool {
        let Some(admin) = self.port else { return false };
        if port != admin {
            return false;
        }
        match host {
            Host::Ip(ip) => self.any_host || ip.is_loopback() || ip.is_unspecified(),
            Host::Name(name) => {
                self.any_host
                    || name == "localhost"
                    || name.ends_with(".localhost")
                    || self.hosts.iter().any(|h| h == name)
            }
        }
    }
}

/// A URL's host as a browser resolves its spelling: an IP address (every IPv4 form the
/// WHATWG parser takes, IPv4-mapped IPv6 as its IPv4), or a lowercase name without a
/// trailing dot.
#[derive(Debug, PartialEq, Eq)]
enum Host {
    Ip(std::net::IpAddr),
    Name(String),
}

/// The host and port of the part after `http:`/`https:` (`default_port` when none is
/// written), read as a browser reads a special URL; `None` when the authority is not one
/// a browser would open (it then fails there too, or [`has_host`] refuses it).
fn host_of(rest: &str, default_port: u16) -> Option<(Host, u16)> {
    let host_port = host_port(rest);
    let (host, port) = if let Some(inner) = host_port.strip_prefix('[') {
        let close = inner.find(']')?;
        (&host_port[..close + 2], &inner[close + 1..])
    } else {
        match host_port.rfind(':') {
            Some(colon) => (&host_port[..colon], &host_port[colon..]),
            None => (host_port, ""),
        }
    };
    let port = match port {
        "" | ":" => default_port,
        written => {
            let digits = written.strip_prefix(':')?;
            if !digits.bytes().all(|b| b.is_ascii_digit()) {
                return None;
            }
            // Leading zeros are allowed (`:08795`); more than 65535 opens nothing.
            let significant = digits.trim_start_matches('0');
            if significant.len() > 5 {
                return None;
            }
            u16::try_from(significant.parse::<u32>().unwrap_or(0)).ok()?
        }
    };
    let host = percent_decode(host)?.to_ascii_lowercase();
    if let Some(v6) = host.strip_prefix('[').and_then(|h| h.strip_suffix(']')) {
        let ip: std::net::Ipv6Addr = v6.parse().ok()?;
        return Some((
            Host::Ip(match ip.to_ipv4_mapped() {
                Some(v4) => std::net::IpAddr::V4(v4),
                None => std::net::IpAddr::V6(ip),
            }),
            port,
        ));
    }
    let host = host.strip_suffix('.').unwrap_or(&host).to_string();
    match ipv4_of(&host) {
        Ipv4Parse::Address(v4) => Some((Host::Ip(std::net::IpAddr::V4(v4)), port)),
        Ipv4Parse::NotNumeric => Some((Host::Name(host), port)),
        Ipv4Parse::Invalid => None,
    }
}

/// `%XX` decoded, as a browser does to a host before reading it; `None` for a decoded host
/// that is not UTF-8.
fn percent_decode(text: &str) -> Option<String> {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = |b: u8| (b as char).to_digit(16);
        if bytes[i] == b'%' && i + 2 < bytes.len() {
            if let (Some(h), Some(l)) = (hex(bytes[i + 1]), hex(bytes[i + 2])) {
                out.push((h * 16 + l) as u8);
                i += 3;
                continue;
            }
        }
        out.push(bytes[i]);
        i += 1;
    }
    String::from_utf8(out).ok()
}

enum Ipv4Parse {
    Address(std::net::Ipv4Addr),
    /// A name: its last label is not a number.
    NotNumeric,
    /// Its last label is a number but the whole is no address: a browser refuses it.
    Invalid,
}

/// The WHATWG IPv4 parser: up to four dot-separated parts, each decimal, `0x` hex or
/// `0`-led octal, the last filling the bytes that remain (`127.1`, `2130706433`,
/// `0x7f.1`, `0177.0.0.1`).
fn ipv4_of(host: &str) -> Ipv4Parse {
    let parts: Vec<&str> = host.split('.').collect();
    let number = |part: &str| -> Option<u64> {
        let (digits, radix) = if let Some(h) = part.strip_prefix("0x").or(part.strip_prefix("0X")) {
            (h, 16)
        } else if part.len() > 1 && part.starts_with('0') {
            (&part[1..], 8)
        } else {
            (part, 10)
        };
        if digits.is_empty() {
            return Some(0);
        }
        if !digits.chars().all(|c| c.is_digit(radix)) {
            return None;
        }
        // Longer than any u32 in any radix: not an address, and no overflow here.
        if digits.len() > 32 {
            return Some(u64::MAX);
        }
        u64::from_str_radix(digits, radix).ok()
    };
    let last = parts.last().copied().unwrap_or("");
    if last.is_empty() || number(last).is_none() {
        return Ipv4Parse::NotNumeric;
    }
    if parts.len() > 4 || parts.iter().any(|p| p.is_empty()) {
        return Ipv4Parse::Invalid;
    }
    let mut numbers = Vec::with_capacity(parts.len());
    for part in &parts {
        match number(part) {
            Some(n) => numbers.push(n),
            None => return Ipv4Parse::Invalid,
        }
    }
    let (head, tail) = numbers.split_at(numbers.len() - 1);
    if head.iter().any(|&n| n > 255) {
        return Ipv4Parse::Invalid;
    }
    let room = 8 * (5 - numbers.len() as u32);
    if room < 64 && tail[0] >= 1u64 << room {
        return Ipv4Parse::Invalid;
    }
    let mut address = tail[0];
    for (i, &n) in head.iter().enumerate() {
        address += n << (8 * (3 - i as u32));
    }
    Ipv4Parse::Address(std::net::Ipv4Addr::from(address as u32))
}

/// Check one URL a tool would open, the admin listener refused however its host is spelled
/// (contract §21). `Err` holds the refusal the caller answers with.
pub fn check_for(raw: &str, admin: &AdminOrigin) -> Result<(), String> {
    let text = browser_view(raw);
    let (scheme, rest) = match split_scheme(&text) {
        Some((scheme, rest)) => (scheme, rest),
        // No scheme: Playwright MCP prefixes one of its own (see the module doc), http for
        // localhost, else https.
        None if !has_host(&text) => return Err(format!("{REFUSAL} a URL without a host")),
        None if text.to_ascii_lowercase().starts_with("localhost") => ("http".into(), &*text),
        None => ("https".into(), &*text),
    };
    let default_port = match scheme.as_str() {
        "http" | "https" if !has_host(rest) => {
            return Err(format!("{REFUSAL} {scheme}: without a host"))
        }
        "http" => 80,
        "https" => 443,
        "about" if rest == "blank" => return Ok(()),
        _ => return Err(format!("{REFUSAL} {}:", shown(&scheme))),
    };
    match host_of(rest, default_port) {
        Some((host, port)) if admin.is_admin(&host, port) => Err(ADMIN_REFUSAL.to_string()),
        _ => Ok(()),
    }
}

/// [`check_for`] with no admin listener to protect.
pub fn check(raw: &str) -> Result<(), String> {
    check_for(raw, &AdminOrigin::default())
}

/// Check every URL-bearing field `fields` names in a tool call's `arguments`. A field
/// that is present but not a string is refused too: the browser must never be handed
/// something this check did not read.
pub fn check_arguments(
    fields: &[&str],
    arguments: &Value,
    admin: &AdminOrigin,
) -> Result<(), String> {
    for field in fields {
        match arguments.get(field) {
            None | Some(Value::Null) => {}
            Some(Value::String(url)) => check_for(url, admin)?,
            Some(_) => return Err(format!("{field} must be a string (a URL)")),
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Issue 35 #5 and contract §21: every spelling of the admin origin a browser opens.
    #[test]
    fn the_admin_listener_is_refused_however_it_is_spelled() {
        let admin = AdminOrigin::new("127.0.0.1:8795".parse().unwrap(), &["hands.lan".into()]);
        for url in [
            "http://127.0.0.1:8795/",
            "http://x@127.0.0.1:8795/healthz",
            "http://x:y@127.0.0.1:8795/",
            "http://x@localhost:8795/readyz",
            "http://[::ffff:7f00:1]:8795/healthz",
            "http://[::ffff:127.0.0.1]:8795/",
            "http://[::1]:8795/",
            "http://2130706433:8795/",
            "http://0x7f.1:8795/",
            "http://0x7F000001:8795/",
            "http://0177.0.0.1:8795/",
            "http://127.1:8795/",
            "http://127.0.0.1.:8795/",
            "http://localhost.:8795/",
            "http://LOCALHOST:8795/",
            "http://a.b.localhost:8795/",
            "http://0.0.0.0:8795/",
            "http://0:8795/",
            "http://[::]:8795/",
            "http://%31%32%37.0.0.1:8795/",
            "http://127.0.0.1:08795/",
            "http:\\\\127.0.0.1:8795",
            "http://hands.lan:8795/",
            "http://HANDS.LAN.:8795/",
            "127.0.0.1:8795/",
            " http://127.0.0.2:8795/ ",
        ] {
            assert_eq!(check_for(url, &admin), Err(ADMIN_REFUSAL.into()), "{url}");
        }
        for url in [
            "http://127.0.0.1:8796/",
            "http://127.0.0.1/",
            "https://example.com:8795/",
            "http://192.0.2.1:8795/",
            "http://1.2.3.4.5:8795/",
            "about:blank",
            "http://localhost:3000/",
        ] {
            assert_eq!(check_for(url, &admin), Ok(()), "{url}");
        }
        // A listener on every address: the port on any host.
        let any = AdminOrigin::new("0.0.0.0:8795".parse().unwrap(), &[]);
        assert!(check_for("http://192.0.2.1:8795/", &any).is_err());
        assert!(check_for("http://192.0.2.1:8796/", &any).is_ok());
        // On port 80 the port need not be written.
        let on_80 = AdminOrigin::new("127.0.0.1:80".parse().unwrap(), &[]);
        assert!(check_for("http://x@127.1/", &on_80).is_err());
        assert!(check_for("https://127.1/", &on_80).is_ok());
        assert_eq!(
            check_for("http://127.0.0.1:8795/", &AdminOrigin::default()),
            Ok(())
        );
    }

    fn refused(url: &str) -> String {
        check(url).expect_err(url)
    }

    #[test]
    fn web_pages_and_about_blank_pass() {
        for url in [
            "http://127.0.0.1:8080/",
            "https://example.com/a?b#c",
            "HTTPS://EXAMPLE.COM",
            " \t https://example.com \n",
            "ht\ttp://example.com",
            "http:\\\\example.com\\x",
            "http://user:pw@example.com:99/",
            "http://[::1]:8080/",
            "about:blank",
            "ABOUT:blank",
            "example.com/path",
        ] {
            assert_eq!(check(url), Ok(()), "{url:?}");
        }
    }

    #[test]
    fn every_other_scheme_is_refused_however_it_is_spelt() {
        let cases = [
            ("view-source:file:///etc/passwd", "view-source"),
            ("file:///etc/passwd", "file"),
            ("FILE:///etc/passwd", "file"),
            (" \u{1}\u{1f}file:///etc/passwd", "file"),
            ("javascript:alert(1)", "javascript"),
            (" JaVa\tScript:alert(1)", "javascript"),
            ("java\nscript:alert(1)", "javascript"),
            ("java\r\nscript:alert(1)", "javascript"),
            ("\u{0}javascript:alert(1)\u{0}", "javascript"),
            ("vIeW-SoUrCe:http://x/", "view-source"),
            ("data:text/html,<script>1</script>", "data"),
            ("blob:http://x/1", "blob"),
            ("filesystem:http://x/temporary/a", "filesystem"),
            ("chrome://settings", "chrome"),
            ("chrome-extension://abc/x", "chrome-extension"),
            ("devtools://devtools/bundled/x.html", "devtools"),
            ("about:srcdoc", "about"),
            ("about:blank#x", "about"),
            ("x-not-invented-yet:1", "x-not-invented-yet"),
            ("ws://127.0.0.1/", "ws"),
            ("ftp://example.com/", "ftp"),
            // A browser reads this as the scheme `localhost:`, and so does the check.
            ("localhost:8080", "localhost"),
        ];
        for (url, scheme) in cases {
            assert_eq!(refused(url), format!("{REFUSAL} {scheme}:"), "{url:?}");
        }
    }

    #[test]
    fn http_without_a_host_is_refused() {
        for url in [
            "http:",
            "http://",
            "https:///",
            "http://@/",
            "http://:80/",
            "http://[]/",
        ] {
            assert!(refused(url).starts_with(REFUSAL), "{url:?}");
        }
        assert!(refused("").starts_with(REFUSAL));
        assert!(refused(" \t").starts_with(REFUSAL));
    }

    #[test]
    fn a_long_scheme_is_quoted_short() {
        let long = format!("{}:x", "a".repeat(5000));
        let why = refused(&long);
        assert!(why.len() < REFUSAL.len() + MAX_SHOWN_SCHEME + 8, "{why}");
        assert!(why.ends_with("…:"), "{why}");
    }

    #[test]
    fn arguments_are_checked_field_by_field() {
        let fields = ["url"];
        assert_eq!(
            check_arguments(&fields, &serde_json::json!({}), &AdminOrigin::default()),
            Ok(())
        );
        assert_eq!(
            check_arguments(
                &fields,
                &serde_json::json!({"url": null}),
                &AdminOrigin::default()
            ),
            Ok(())
        );
        assert!(check_arguments(
            &fields,
            &serde_json::json!({"url": "file:///x"}),
            &AdminOrigin::default()
        )
        .is_err());
        assert_eq!(
            check_arguments(
                &fields,
                &serde_json::json!({"url": ["file:///x"]}),
                &AdminOrigin::default()
            ),
            Err("url must be a string (a URL)".into())
        );
    }
}
