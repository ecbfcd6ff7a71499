//! Short, safe stand-ins for strings a peer chooses (tool names, request ids, login headers)
//! wherever they are written down: the audit log, the daemon's log and `/metrics`. A hostile
//! pod picks these strings, so what is written is cut to a bound, never carries a control or
//! invisible character raw, and keeps a hash of the whole so two long names stay apart.

use std::borrow::Cow;

use sha2::{Digest, Sha256};

/// Longest tool name written as it is (bytes); longer ones are cut to this and hashed.
pub const MAX_NAME_BYTES: usize = 64;
/// Hex digits of the whole string's SHA-256 that a cut label carries.
const HASH_HEX_DIGITS: usize = 12;

/// Characters that are never written raw: C0/C1 controls, and the zero-width and
/// bidirectional formatting characters that make a log line read differently from its bytes.
fn is_unsafe(c: char) -> bool {
    c.is_control()
        || matches!(c, '\u{200b}'..='\u{200f}' | '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}' | '\u{feff}')
}

/// `name` if it has no unsafe character and is no longer than a label can be
/// ([`max_len`]), else a label: its first bytes with unsafe characters escaped (`\u{1b}`),
/// cut at a character boundary to [`MAX_NAME_BYTES`], then `…[sha256 <12 hex>, <n> bytes]`.
/// A label is its own label, so a name labelled once (and hashed once) passes every later
/// sink unchanged.
pub fn name(name: &str) -> Cow<'_, str> {
    cut(name, MAX_NAME_BYTES)
}

/// [`name`] with another bound on the kept prefix (bytes), for longer free text such as a
/// refusal reason in the log.
pub fn cut(text: &str, max_bytes: usize) -> Cow<'_, str> {
    if text.len() <= max_len(max_bytes) && !text.chars().any(is_unsafe) {
        return Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(max_bytes + 48);
    for c in text.chars() {
        let before = out.len();
        if is_unsafe(c) {
            out.push_str(&format!("\\u{{{:x}}}", c as u32));
        } else {
            out.push(c);
        }
        if out.len() > max_bytes {
            out.truncate(before);
            break;
        }
    }
    let digest = Sha256::digest(text.as_bytes());
    let hex: String = digest
        .iter()
        .flat_map(|b| [b >> 4, b & 0xf])
        .take(HASH_HEX_DIGITS)
        .map(|n| char::from_digit(n as u32, 16).expect("a nibble"))
        .collect();
    out.push_str(&format!("…[sha256 {hex}, {} bytes]", text.len()));
    Cow::Owned(out)
}

/// Longest a label made by [`cut`] with `max_bytes` can be (bytes): the prefix, the marker's
/// fixed text, the hash and a length of up to 20 digits.
pub const fn max_len(max_bytes: usize) -> usize {
    max_bytes + "…[sha256 , 00000000000000000000 bytes]".len() + HASH_HEX_DIGITS
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn short_clean_names_are_kept() {
        for ok in [
            "bash",
            "browser_click",
            "sys_info",
            "ünïcödé",
            &"a".repeat(64),
        ] {
            assert!(matches!(name(ok), Cow::Borrowed(s) if s == ok), "{ok}");
        }
    }

    #[test]
    fn the_bound_plus_one_is_cut_and_hashed() {
        let bound = max_len(MAX_NAME_BYTES);
        let at_bound = "a".repeat(bound);
        assert_eq!(name(&at_bound), at_bound.as_str());
        let long = "a".repeat(bound + 1);
        let label = name(&long);
        assert!(label.starts_with(&"a".repeat(64)), "{label}");
        assert!(!label.starts_with(&"a".repeat(65)), "{label}");
        assert!(
            label.ends_with(&format!(", {} bytes]", bound + 1)),
            "{label}"
        );
        assert!(label.len() <= bound);
        // Two long names that share their first 64 bytes stay apart.
        let other = format!("{}b", "a".repeat(bound));
        assert_ne!(name(&other), label);
        // A label is its own label.
        assert!(matches!(name(&label), Cow::Borrowed(_)));
    }

    #[test]
    fn huge_names_cost_a_bounded_label() {
        let huge = "x".repeat(4 << 20);
        let label = name(&huge);
        assert!(label.len() <= max_len(MAX_NAME_BYTES), "{}", label.len());
        assert!(label.ends_with(", 4194304 bytes]"), "{label}");
    }

    #[test]
    fn unsafe_characters_are_escaped_and_cuts_respect_char_boundaries() {
        let label = name("evil\u{1b}[2J\nname\u{202e}");
        assert!(!label.chars().any(is_unsafe), "{label:?}");
        assert!(
            label.starts_with("evil\\u{1b}[2J\\u{a}name\\u{202e}…[sha256 "),
            "{label}"
        );
        // 63 ASCII bytes then a 2-byte character: cut before it, never inside it.
        let text = format!("{}é{}", "a".repeat(63), "b".repeat(100));
        let label = name(&text);
        assert!(
            label.starts_with(&format!("{}…", "a".repeat(63))),
            "{label}"
        );
        // An escape that would cross the bound is left out whole.
        let text = format!("{}\u{7}", "a".repeat(60));
        assert!(name(&text).starts_with(&format!("{}…", "a".repeat(60))));
        assert!(matches!(name(&name(&text)), Cow::Borrowed(_)));
    }
}
