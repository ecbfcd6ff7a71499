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
    let rest = rest.trim_start_matches(['/', '\\']);
    let end = rest.find(['/', '\\', '?', '#']).unwrap_or(rest.len());
    let authority = &rest[..end];
    let host_port = match authority.rfind('@') {
        Some(at) => &authority[at + 1..],
        None => authority,
    };
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

/// `scheme` as quoted in a refusal: escaped, and cut to [`MAX_SHOWN_SCHEME`] bytes.
fn shown(scheme: &str) -> String {
    let mut out: String = scheme.chars().take(MAX_SHOWN_SCHEME).collect();
    if out.len() < scheme.len() {
        out.push('…');
    }
    out
}

/// Check one URL a tool would open. `Err` holds the refusal the caller answers with.
pub fn check(raw: &str) -> Result<(), String> {
    let text = browser_view(raw);
    let (scheme, rest) = match split_scheme(&text) {
        Some(split) => split,
        // No scheme: Playwright MCP prefixes one of its own (see the module doc).
        None => {
            return if has_host(&text) {
                Ok(())
            } else {
                Err(format!("{REFUSAL} a URL without a host"))
            };
        }
    };
    match scheme.as_str() {
        "http" | "https" if has_host(rest) => Ok(()),
        "http" | "https" => Err(format!("{REFUSAL} {scheme}: without a host")),
        "about" if rest == "blank" => Ok(()),
        _ => Err(format!("{REFUSAL} {}:", shown(&scheme))),
    }
}

/// Check every URL-bearing field `fields` names in a tool call's `arguments`. A field
/// that is present but not a string is refused too: the browser must never be handed
/// something this check did not read.
pub fn check_arguments(fields: &[&str], arguments: &Value) -> Result<(), String> {
    for field in fields {
        match arguments.get(field) {
            None | Some(Value::Null) => {}
            Some(Value::String(url)) => check(url)?,
            Some(_) => return Err(format!("{field} must be a string (a URL)")),
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

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
        assert_eq!(check_arguments(&fields, &serde_json::json!({})), Ok(()));
        assert_eq!(
            check_arguments(&fields, &serde_json::json!({"url": null})),
            Ok(())
        );
        assert!(check_arguments(&fields, &serde_json::json!({"url": "file:///x"})).is_err());
        assert_eq!(
            check_arguments(&fields, &serde_json::json!({"url": ["file:///x"]})),
            Err("url must be a string (a URL)".into())
        );
    }
}
