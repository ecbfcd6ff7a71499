//! `docs/protocol.md` stays true to the code, and the docs stay inside the repository.
//!
//! The names are read from the code's own tables (`admin::ROUTES`, `dial::SENT_CLOSES` and
//! `STOPPING_CLOSES`, `Profile::ALL`, `tools::TOOLS`, `DESKTOP_BROWSER_TOOLS`, the
//! `POST /attach` error constants), never from a list kept here, so a route, close code,
//! profile or tool added to the code fails this test until the doc describes it.

mod common;

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::{Component, Path, PathBuf};

use common::{TestDaemon, WATCHDOG};
use handnode::admin::ROUTES;
use handnode::grants::dial::{SENT_CLOSES, STOPPING_CLOSES};
use handnode::profiles::{Class, Profile, DESKTOP_BROWSER_TOOLS};

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

fn read(relative: &str) -> String {
    let path = root().join(relative);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

fn protocol_doc() -> String {
    read("docs/protocol.md")
}

/// A Markdown table line split into trimmed cells.
fn cells(line: &str) -> Vec<String> {
    line.trim()
        .trim_matches('|')
        .split('|')
        .map(|c| c.trim().to_string())
        .collect()
}

/// The body rows of the table whose header row is exactly `header`.
fn table(doc: &str, header: &[&str]) -> Vec<Vec<String>> {
    let mut lines = doc
        .lines()
        .skip_while(|l| !(l.starts_with('|') && cells(l) == header));
    assert!(
        lines.next().is_some(),
        "docs/protocol.md has no table with the header | {} |",
        header.join(" | ")
    );
    lines
        .skip(1) // the |---| line
        .take_while(|l| l.starts_with('|'))
        .map(cells)
        .collect()
}

#[test]
fn every_admin_route_is_in_the_routes_table() {
    let doc = protocol_doc();
    let documented: Vec<String> = table(&doc, &["route", "auth", "answer"])
        .into_iter()
        .map(|r| r[0].clone())
        .collect();
    for (method, path) in ROUTES {
        let name = format!("`{method} {path}`");
        assert!(
            documented.contains(&name),
            "docs/protocol.md's route table lacks {name}"
        );
    }
    // And it names no route the code does not serve.
    for name in &documented {
        assert!(
            ROUTES.iter().any(|(m, p)| *name == format!("`{m} {p}`")),
            "docs/protocol.md documents {name}, which admin::ROUTES does not serve"
        );
    }
}

/// One raw request with the test token; `(status, body)`. Raw, because a `HEAD` answer
/// declares a length it does not send.
fn request(d: &TestDaemon, method: &str, path: &str, body: Option<&str>) -> (u16, String) {
    let mut s = TcpStream::connect(d.addr).unwrap();
    s.set_read_timeout(Some(WATCHDOG)).unwrap();
    let mut head = format!(
        "{method} {path} HTTP/1.1\r\nHost: {}\r\nConnection: close\r\nAuthorization: Bearer {}\r\n",
        d.addr, d.token
    );
    if let Some(b) = body {
        head.push_str(&format!(
            "Content-Type: application/json\r\nContent-Length: {}\r\n",
            b.len()
        ));
    }
    head.push_str("\r\n");
    s.write_all(head.as_bytes()).unwrap();
    if let Some(b) = body {
        s.write_all(b.as_bytes()).unwrap();
    }
    let mut raw = Vec::new();
    s.read_to_end(&mut raw)
        .unwrap_or_else(|e| panic!("watchdog or error reading {method} {path}: {e}"));
    let text = String::from_utf8_lossy(&raw).into_owned();
    let status = text
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("{method} {path}: no status line in {text:?}"));
    let body = text
        .split_once("\r\n\r\n")
        .map_or("", |(_, b)| b)
        .to_string();
    (status, body)
}

#[test]
fn every_route_in_the_table_is_served() {
    let d = TestDaemon::new("protocol-doc-routes");
    for (method, path) in ROUTES {
        let path = path.replace("{id}", "00000000-0000-4000-8000-000000000000");
        let body = (*method == "POST").then_some("{}");
        let (status, text) = request(&d, method, &path, body);
        assert_ne!(status, 405, "{method} {path}: {text}");
        assert!(
            !(status == 404 && text.contains(r#""not found""#)),
            "{method} {path} is in ROUTES but answered as an unknown path"
        );
        assert!(
            !(status == 500 && text.contains("no handler")),
            "{method} {path} is in ROUTES but has no handler"
        );
    }
}

#[test]
fn every_close_code_is_documented_with_what_it_does() {
    let doc = protocol_doc();
    let sent = table(&doc, &["code", "reason text", "when", "then"]);
    for close in SENT_CLOSES {
        assert!(
            sent.iter()
                .any(|r| r[0] == format!("`{}`", close.code)
                    && r[1] == format!("`{}`", close.reason)),
            "docs/protocol.md's table of closes we send lacks {} {:?}",
            close.code,
            close.reason
        );
    }
    let received = table(&doc, &["code", "then"]);
    for (code, reason) in &STOPPING_CLOSES {
        let (code, reason) = (format!("`{code}`"), format!("`{}`", reason.as_string()));
        assert!(
            received
                .iter()
                .any(|r| r[0] == code && r[1].contains(&reason)),
            "docs/protocol.md's table of pod closes lacks {code} ending the grant {reason}"
        );
        assert!(
            table(&doc, &["reason", "cause"])
                .iter()
                .any(|r| r[0] == reason && r[1].contains(&code)),
            "docs/protocol.md's table of end reasons lacks {reason} for {code}"
        );
    }
}

fn class_name(class: Class) -> String {
    class.as_str().to_string()
}

#[test]
fn every_profile_and_local_tool_is_in_the_tools_table() {
    let doc = protocol_doc();
    // One column per profile with a list of its own (`custom` has none: its allow list
    // is its list).
    let fixed: Vec<Profile> = Profile::ALL
        .into_iter()
        .filter(|p| !p.is_custom())
        .collect();
    let mut header = vec!["tool", "class"];
    header.extend(fixed.iter().map(|p| p.as_str()));
    let documented: BTreeMap<String, Vec<String>> = table(&doc, &header)
        .into_iter()
        .map(|r| (r[0].clone(), r[1..].to_vec()))
        .collect();
    let served = handnode::tools::TOOLS;
    assert!(!served.is_empty());
    for spec in served {
        let name = format!("`{}`", spec.name);
        let row = documented
            .get(&name)
            .unwrap_or_else(|| panic!("docs/protocol.md's tools table lacks {name}"));
        assert_eq!(row[0], class_name(spec.class), "class of {name}");
        for (i, profile) in fixed.iter().enumerate() {
            let marked = row.get(i + 1).is_some_and(|c| *c == "✓");
            assert_eq!(
                marked,
                spec.allowed_in(*profile),
                "docs/protocol.md says {name} is {}in {profile}",
                if marked { "" } else { "not " }
            );
        }
    }
    for name in documented.keys() {
        assert!(
            served.iter().any(|s| *name == format!("`{}`", s.name)),
            "docs/protocol.md's tools table lists {name}, which is not served"
        );
    }
    for profile in Profile::ALL {
        assert!(
            doc.contains(&format!("`{profile}`")),
            "docs/protocol.md never names the profile `{profile}`"
        );
    }
}

#[test]
fn every_desktop_browser_tool_is_named() {
    let doc = protocol_doc();
    for tool in DESKTOP_BROWSER_TOOLS {
        assert!(
            doc.contains(&format!("`{tool}`")),
            "docs/protocol.md does not name the desktop browser tool {tool}"
        );
    }
}

#[test]
fn the_annotation_table_follows_the_classes() {
    let doc = protocol_doc();
    let documented = table(
        &doc,
        &[
            "class",
            "`readOnlyHint`",
            "`destructiveHint`",
            "`idempotentHint`",
            "`openWorldHint`",
        ],
    );
    for class in [Class::Observe, Class::Act, Class::Shell] {
        let a = class.annotations();
        let want: Vec<String> = [a.read_only, a.destructive, a.idempotent, a.open_world]
            .iter()
            .map(bool::to_string)
            .collect();
        let name = format!("`{}`", class_name(class));
        let row = documented
            .iter()
            .find(|r| r[0] == name)
            .unwrap_or_else(|| panic!("docs/protocol.md's annotation table lacks {name}"));
        assert_eq!(row[1..], want, "annotations of {name}");
    }
}

#[test]
fn attach_errors_versions_and_states_are_quoted_as_served() {
    let doc = protocol_doc();
    for message in [
        handnode::grants::BODY_ERROR,
        handnode::grants::RUNTIME_ERROR,
        handnode::grants::SESSION_ERROR,
        handnode::grants::TTL_ERROR,
        handnode::grants::SECRET_CHOICE_ERROR,
        handnode::profiles::profile_error(),
        handnode::tools::policy::ALLOW_NEEDS_CUSTOM_ERROR,
        handnode::tools::policy::CUSTOM_NEEDS_ALLOW_ERROR,
        handnode::tools::policy::NO_TOOLS_ERROR,
    ] {
        assert!(
            doc.contains(&format!("`{message}`")),
            "docs/protocol.md does not quote the POST /attach error `{message}`"
        );
    }
    for version in handnode::wire::mcp::PROTOCOL_VERSIONS {
        assert!(doc.contains(&format!("`{version}`")), "{version}");
    }
    for state in handnode::metrics::GRANT_STATES {
        assert!(doc.contains(&format!("`{state}`")), "grant state {state}");
    }
}

#[test]
fn the_readme_links_to_the_protocol_doc() {
    assert!(
        read("README.md").contains("](docs/protocol.md)"),
        "README.md must link to docs/protocol.md"
    );
}

/// README.md, ARCHITECTURE.md and every Markdown file under docs/.
fn docs() -> Vec<PathBuf> {
    fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                walk(&path, out);
            } else if path.extension().is_some_and(|e| e == "md") {
                out.push(path);
            }
        }
    }
    let mut out = vec![root().join("README.md"), root().join("ARCHITECTURE.md")];
    walk(&root().join("docs"), &mut out);
    out
}

/// `target` taken from the dir of `file`, with `.` and `..` resolved by hand (the target
/// may not exist); `None` when it climbs out of the repository.
fn inside_repo(file: &Path, target: &str) -> Option<PathBuf> {
    let base = file.parent().unwrap().strip_prefix(root()).unwrap();
    let mut parts: Vec<Component> = base.components().collect();
    for c in Path::new(target).components() {
        match c {
            Component::CurDir => {}
            Component::ParentDir => {
                parts.pop()?;
            }
            Component::Normal(_) => parts.push(c),
            Component::RootDir | Component::Prefix(_) => return None,
        }
    }
    Some(root().join(parts.iter().collect::<PathBuf>()))
}

/// Markdown link targets of `text`: what follows `](` up to `)`.
fn link_targets(text: &str) -> Vec<&str> {
    text.match_indices("](")
        .filter_map(|(at, _)| {
            let rest = &text[at + 2..];
            rest.find(')').map(|end| rest[..end].trim())
        })
        .collect()
}

/// Inline code spans of `text` (between single backticks, on one line).
fn code_spans(text: &str) -> Vec<&str> {
    text.lines()
        .filter(|l| !l.trim_start().starts_with("```"))
        .flat_map(|l| l.split('`').skip(1).step_by(2))
        .collect()
}

/// GitHub's anchor for a heading: lowercase, punctuation dropped, spaces to hyphens.
fn anchor(heading: &str) -> String {
    heading
        .trim()
        .to_lowercase()
        .chars()
        .filter(|c| c.is_alphanumeric() || matches!(c, ' ' | '-' | '_'))
        .map(|c| if c == ' ' { '-' } else { c })
        .collect()
}

fn anchors(markdown: &str) -> Vec<String> {
    markdown
        .lines()
        .filter(|l| l.starts_with('#'))
        .map(|l| anchor(l.trim_start_matches('#')))
        .collect()
}

#[test]
fn the_docs_point_only_inside_the_repository() {
    let files = docs();
    assert!(files.len() >= 3, "{files:?}");
    let mut problems = Vec::new();
    for file in &files {
        let name = file.strip_prefix(root()).unwrap().display().to_string();
        let text = std::fs::read_to_string(file).unwrap();
        for outside in ["../shared", "shared/CONTRACT", "CONTRACT.md"] {
            if text.contains(outside) {
                problems.push(format!(
                    "{name} mentions {outside}, which is not in the repository"
                ));
            }
        }
        for target in link_targets(&text) {
            if target.contains("://") || target.starts_with("mailto:") {
                continue; // A web page, not a file of ours.
            }
            let (path, fragment) = target.split_once('#').unwrap_or((target, ""));
            let linked = if path.is_empty() {
                Some(file.clone())
            } else {
                inside_repo(file, path)
            };
            let Some(linked) = linked else {
                problems.push(format!("{name} links to {target}, outside the repository"));
                continue;
            };
            if !linked.exists() {
                problems.push(format!("{name} links to {target}, which does not exist"));
                continue;
            }
            if !fragment.is_empty() && linked.extension().is_some_and(|e| e == "md") {
                let headings = anchors(&std::fs::read_to_string(&linked).unwrap());
                if !headings.iter().any(|h| h == fragment) {
                    problems.push(format!("{name} links to {target}: no such heading"));
                }
            }
        }
        for span in code_spans(&text) {
            if span.starts_with("../") && inside_repo(file, span).is_none() {
                problems.push(format!("{name} names `{span}`, outside the repository"));
            }
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

#[test]
fn the_link_checker_sees_what_it_must() {
    let readme = root().join("README.md");
    let doc = root().join("docs/protocol.md");
    assert_eq!(inside_repo(&readme, "../shared/CONTRACT.md"), None);
    assert_eq!(inside_repo(&doc, "../../x"), None);
    assert_eq!(inside_repo(&doc, "/etc/passwd"), None);
    assert_eq!(
        inside_repo(&doc, "../ARCHITECTURE.md"),
        Some(root().join("ARCHITECTURE.md"))
    );
    assert_eq!(
        link_targets("see [a](docs/x.md#y) and [b](https://e.example)"),
        ["docs/x.md#y", "https://e.example"]
    );
    assert_eq!(
        code_spans("a `../shared/C.md` b `x`"),
        ["../shared/C.md", "x"]
    );
    assert_eq!(
        anchor(" The owner's `/mcp` endpoint"),
        "the-owners-mcp-endpoint"
    );
    assert_eq!(anchor(" Part two (in progress)"), "part-two-in-progress");
}
