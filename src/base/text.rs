//! Two small text helpers every writer of peer-chosen text uses: the longest prefix of at
//! most N bytes that ends on a character boundary, and escaping text for an HTML page
//! (the console's page, `journal.html`), and a list written as a sentence says it.

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

#[cfg(test)]
mod tests {
    use super::*;

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
