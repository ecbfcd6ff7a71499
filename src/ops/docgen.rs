//! Every generated span of the docs and the console (contract §26): the registry's lists
//! ([`super::lists`]) and two tables, named by a key, so a tool added to the registry shows
//! up in all of them with nothing else edited. The files carry *spans*:
//! `<!-- gen:KEY -->…<!-- /gen -->` in Markdown and HTML (a marker right after a backtick
//! is quoted prose, not a span), `/*gen:KEY*/…/*/gen*/` in
//! JavaScript. `tests/generated.rs` checks every span of every file against [`render`] and
//! rewrites them under `HANDNODE_BLESS=1 cargo test`; it also fails on a list of three or
//! more tool names written by hand outside a span. The tables: `tools-table` (tool, class,
//! a ✓ per fixed profile) and `flags` (every flag of every subcommand,
//! [`crate::ops::cli::help_table_markdown`]).

use std::fmt::Write as _;

use crate::profiles::Profile;
use crate::tools;

/// A span's text for `spec`: a table's, or a list's ([`super::lists::render`]).
pub fn render(spec: &str) -> Result<String, String> {
    match spec.trim() {
        "tools-table" => Ok(tools_table()),
        "flags" => Ok(crate::ops::cli::help_table_markdown()),
        _ => super::lists::render(spec),
    }
}

/// The protocol doc's tools table: every local tool, its class and a ✓ for each fixed
/// profile that allows it.
fn tools_table() -> String {
    let fixed: Vec<Profile> = Profile::ALL
        .into_iter()
        .filter(|p| !p.is_custom())
        .collect();
    let mut out = String::from("| tool | class |");
    for p in &fixed {
        let _ = write!(out, " {p} |");
    }
    out.push_str("\n|---|---|");
    out.push_str(&"---|".repeat(fixed.len()));
    out.push('\n');
    for t in tools::registered() {
        let _ = write!(out, "| `{}` | {} |", t.name, t.class.as_str());
        for p in &fixed {
            out.push_str(if t.allowed_in(*p) { " ✓ |" } else { " |" });
        }
        out.push('\n');
    }
    out
}

/// One span found in a file: where its text lies and the spec it names.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Span {
    pub spec: String,
    /// Byte range of the text between the opening and the closing marker.
    pub text: std::ops::Range<usize>,
}

/// The markers of a file kind: `(open prefix, open suffix, close)`.
fn markers(path: &str) -> (&'static str, &'static str, &'static str) {
    if path.ends_with(".js") {
        ("/*gen:", "*/", "/*/gen*/")
    } else {
        ("<!-- gen:", " -->", "<!-- /gen -->")
    }
}

/// Every span of `content` (a file at `path`), or the first malformed marker.
pub fn spans(path: &str, content: &str) -> Result<Vec<Span>, String> {
    let (open, open_end, close) = markers(path);
    let mut found = Vec::new();
    let mut at = 0;
    while let Some(rel) = content[at..].find(open) {
        let start = at + rel;
        // A marker quoted as code (`` `<!-- gen:KEY -->` `` in prose about the markers)
        // is text, not a span.
        if content[..start].ends_with('`') {
            at = start + open.len();
            continue;
        }
        let spec_start = start + open.len();
        let line = content[..start].lines().count().max(1);
        let spec_end = content[spec_start..]
            .find(open_end)
            .map(|e| spec_start + e)
            .ok_or_else(|| format!("{path}:{line}: a gen marker that never closes"))?;
        let text_start = spec_end + open_end.len();
        let text_end = content[text_start..]
            .find(close)
            .map(|e| text_start + e)
            .ok_or_else(|| format!("{path}:{line}: a gen span without {close}"))?;
        if content[text_start..text_end].contains(open) {
            return Err(format!("{path}:{line}: a gen span inside another"));
        }
        found.push(Span {
            spec: content[spec_start..spec_end].trim().to_string(),
            text: text_start..text_end,
        });
        at = text_end + close.len();
    }
    Ok(found)
}

/// `content` with every span's text rendered anew, or what is wrong. A table's text keeps a
/// newline on each side, so the Markdown around it stays a block.
pub fn regenerate(path: &str, content: &str) -> Result<String, String> {
    let mut out = String::with_capacity(content.len());
    let mut at = 0;
    for span in spans(path, content)? {
        out.push_str(&content[at..span.text.start]);
        let text = render(&span.spec).map_err(|e| format!("{path}: {e}"))?;
        if text.ends_with('\n') {
            out.push('\n');
        }
        out.push_str(&text);
        at = span.text.end;
    }
    out.push_str(&content[at..]);
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tools::Tool;

    #[test]
    fn spans_are_found_and_regenerated_in_place() {
        let paths = render("paths").unwrap();
        let plain = render("paths plain").unwrap();
        let md = "a <!-- gen:paths -->old<!-- /gen --> b <!-- gen:paths plain -->x<!-- /gen -->";
        let got = regenerate("x.md", md).unwrap();
        assert_eq!(
            got,
            format!(
                "a <!-- gen:paths -->{paths}<!-- /gen --> b <!-- gen:paths plain -->{plain}<!-- /gen -->"
            )
        );
        assert_eq!(regenerate("x.md", &got).unwrap(), got);
        let js = "t = /*gen:paths js*/'a'/*/gen*/;";
        assert_eq!(
            regenerate("x.js", js).unwrap(),
            format!("t = /*gen:paths js*/'{plain}'/*/gen*/;")
        );
        assert!(regenerate("x.md", "<!-- gen:paths -->never closed").is_err());
        assert!(regenerate("x.md", "<!-- gen:nope --><!-- /gen -->").is_err());
        let quoted = "write `<!-- gen:KEY -->…<!-- /gen -->` to make one";
        assert_eq!(regenerate("x.md", quoted).unwrap(), quoted);
        let table = regenerate("x.md", "<!-- gen:tools-table -->\n<!-- /gen -->").unwrap();
        assert!(table.contains("\n| `sys_info` | observe |"), "{table}");
        assert_eq!(regenerate("x.md", &table).unwrap(), table);
    }

    #[test]
    fn a_scratch_tool_joins_every_list_it_belongs_to() {
        let disk_free: &'static Tool = Box::leak(Box::new(Tool {
            name: "disk_free_scratch",
            profiles: &[Profile::Owner, Profile::Desktop, Profile::Observe],
            ..tools::files::GET
        }));
        tools::with_scratch_tools(&[disk_free], || {
            assert!(render("paths").unwrap().contains("`disk_free_scratch`"));
            assert!(render("profile:observe")
                .unwrap()
                .contains("`disk_free_scratch`"));
            assert!(tools_table().contains("| `disk_free_scratch` |"));
        });
    }
}
