//! The browser tier's URL allow-list (contract §14). Whatever the bytes, the check never
//! panics; what it admits is `about:blank`, an `http(s)` URL or a scheme-less text (which
//! Playwright MCP prefixes with `https://`), never a known-dangerous scheme however it is
//! spelt; and the spellings a browser reads alike (surrounding controls and spaces,
//! tabs and newlines inside, case) get the same answer.
#![no_main]

use handnode::rules::browser_url::{browser_view, check};
use libfuzzer_sys::fuzz_target;

const NEVER: &[&str] = &[
    "javascript:",
    "file:",
    "view-source:",
    "data:",
    "blob:",
    "filesystem:",
    "chrome:",
    "chrome-extension:",
    "devtools:",
    "about:srcdoc",
];

fuzz_target!(|data: &[u8]| {
    let Ok(raw) = std::str::from_utf8(data) else {
        return;
    };
    let verdict = check(raw);
    let view = browser_view(raw);
    assert_eq!(verdict, check(&view), "{raw:?} and its browser view differ");
    let lower = view.to_ascii_lowercase();
    if verdict.is_ok() {
        for scheme in NEVER {
            assert!(!lower.starts_with(scheme), "{raw:?} admitted as {scheme}");
        }
        assert!(
            lower == "about:blank"
                || lower.starts_with("http:")
                || lower.starts_with("https:")
                || !lower.split(['/', '?', '#', '\\']).next().unwrap_or("").contains(':')
                || lower.split(':').next().is_some_and(|s| {
                    !s.starts_with(|c: char| c.is_ascii_alphabetic())
                        || s.contains(|c: char| !(c.is_ascii_alphanumeric() || "+-.".contains(c)))
                }),
            "{raw:?} admitted with a scheme that is not http(s)"
        );
    }
    // Dressed the way a browser strips, the answer is the same.
    let dressed = format!(" \u{1}\t{}\n\u{1f} ", raw.replacen(':', "\t:", 1));
    assert_eq!(verdict.is_ok(), check(&dressed).is_ok(), "{raw:?} vs {dressed:?}");
    // `about:blank` is matched exactly after the browser's stripping, so an upper-cased
    // `ABOUT:BLANK` is refused: only texts whose browser view holds no `about:blank` must
    // keep their answer (a fuzz run found `about:` + CRs + `blank`, which the raw text hides).
    let upper = raw.to_ascii_uppercase();
    if !view.to_ascii_lowercase().contains("about:blank") {
        assert_eq!(verdict.is_ok(), check(&upper).is_ok(), "{raw:?} vs {upper:?}");
    }
});
