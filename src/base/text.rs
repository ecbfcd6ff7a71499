//! Two small text helpers every writer of peer-chosen text uses: the longest prefix of at
//! most N bytes that ends on a character boundary, and escaping text for an HTML page
//! (the console's page, `journal.html`), and a list written as a sentence says it; and
//! the length of a JSON value's text without writing it.

/// The longest prefix of `text` of at most `max_bytes` bytes that ends on a character
/// boundary (`text` itself when it is short enough).
pub fn head(text: &str, max_bytes: usize) -> &str {
    if text.len() <= max_bytes {
        return text;
    }
    let mut end = max_bytes;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    &text[..end]
}

/// `text` as HTML text or a double-quoted attribute value: `& < > "` escaped (every
/// attribute these pages write is double-quoted, so an apostrophe stays as it is).
pub fn escape_html(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            c => out.push(c),
        }
    }
    out
}

/// `items` as an English list: `a`, `a and b`, `a, b and c` (with `conj` for "and").
pub fn sentence_list<S: AsRef<str>>(items: &[S], conj: &str) -> String {
    match items {
        [] => String::new(),
        [one] => one.as_ref().to_string(),
        [rest @ .., last] => {
            let rest: Vec<&str> = rest.iter().map(AsRef::as_ref).collect();
            format!("{} {conj} {}", rest.join(", "), last.as_ref())
        }
    }
}

/// How many bytes `serde_json::to_vec(value)` would write, counted without writing them: a
/// bound on arguments that may hold megabytes (a `file_put` chunk) costs one counting pass
/// over each string instead of a copy of it with its escapes.
pub fn json_len(value: &serde_json::Value) -> usize {
    use serde_json::Value;
    // The bytes serde_json escapes: two characters for the named escapes, six (`\u00XX`)
    // for the other control characters; everything else is written as it is.
    fn string_len(s: &str) -> usize {
        let extra: usize = s
            .bytes()
            .map(|b| match b {
                b'"' | b'\\' | 0x08 | 0x09 | 0x0a | 0x0c | 0x0d => 1,
                0x00..=0x1f => 5,
                _ => 0,
            })
            .sum();
        s.len() + extra + 2
    }
    match value {
        Value::Null => 4,
        Value::Bool(b) => 4 + usize::from(!*b),
        Value::Number(n) => n.to_string().len(),
        Value::String(s) => string_len(s),
        Value::Array(items) => {
            2 + items.iter().map(json_len).sum::<usize>() + items.len().saturating_sub(1)
        }
        Value::Object(map) => {
            2 + map
                .iter()
                .map(|(k, v)| string_len(k) + 1 + json_len(v))
                .sum::<usize>()
                + map.len().saturating_sub(1)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_len_is_the_length_serde_json_writes() {
        let mut every_byte = String::new();
        for b in 0u8..0x80 {
            every_byte.push(char::from(b));
        }
        let values = [
            serde_json::json!(null),
            serde_json::json!(true),
            serde_json::json!(false),
            serde_json::json!(0),
            serde_json::json!(-17),
            serde_json::json!(u64::MAX),
            serde_json::json!(1.5e300),
            serde_json::json!(0.1),
            serde_json::json!(""),
            serde_json::json!(every_byte),
            serde_json::json!("é ✓ \u{1F600} \"q\" \\ \n"),
            serde_json::json!([]),
            serde_json::json!({}),
            serde_json::json!([1, "a", null, [], {}]),
            serde_json::json!({"k\n": {"a": [1, 2, {"b": "\u{7}"}]}, "": false}),
        ];
        for v in values {
            assert_eq!(json_len(&v), serde_json::to_vec(&v).unwrap().len(), "{v}");
        }
    }

    #[test]
    fn sentence_list_joins_like_prose() {
        assert_eq!(sentence_list::<&str>(&[], "and"), "");
        assert_eq!(sentence_list(&["a"], "and"), "a");
        assert_eq!(sentence_list(&["a", "b"], "or"), "a or b");
        assert_eq!(sentence_list(&["a", "b", "c"], "and"), "a, b and c");
    }

    #[test]
    fn head_ends_on_a_character_boundary() {
        assert_eq!(head("abc", 3), "abc");
        assert_eq!(head("abc", 9), "abc");
        assert_eq!(head("abc", 2), "ab");
        // "é" is two bytes: a cut inside it keeps what is before it.
        assert_eq!(head("aé", 2), "a");
        assert_eq!(head("aé", 3), "aé");
        assert_eq!(head("é", 0), "");
    }

    #[test]
    fn escape_html_escapes_every_markup_character() {
        assert_eq!(
            escape_html(r#"<a href="x">'&'</a>"#),
            "&lt;a href=&quot;x&quot;&gt;'&amp;'&lt;/a&gt;"
        );
        assert_eq!(escape_html("plain é"), "plain é");
    }
}
