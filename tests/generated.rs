//! Every generated span of the docs, the console and the help texts is what the registry
//! says now (contract §26, `handnode::ops::docgen`): `HANDNODE_BLESS=1 cargo test` rewrites
//! them, and without it a stale span fails here naming the file. A list of three or more
//! tool names written by hand in the docs fails too: it is the list a new tool would be
//! missing from.

use std::path::{Path, PathBuf};

use handnode::ops::docgen;

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// Every file that may carry spans: the Markdown docs and the console's page and script.
fn files() -> Vec<PathBuf> {
    let mut files = vec![root().join("README.md"), root().join("ARCHITECTURE.md")];
    let mut docs: Vec<PathBuf> = std::fs::read_dir(root().join("docs"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "md"))
        .collect();
    docs.sort();
    files.extend(docs);
    files.push(root().join("src/admin/console/index.html"));
    files.push(root().join("src/admin/console/app.js"));
    files
}

fn bless() -> bool {
    std::env::var_os("HANDNODE_BLESS").is_some_and(|v| v == "1")
}

#[test]
fn every_generated_span_is_what_the_registry_says() {
    let mut stale = Vec::new();
    let mut spans = 0;
    for path in files() {
        let name = path.strip_prefix(root()).unwrap().display().to_string();
        let have = std::fs::read_to_string(&path).unwrap();
        spans += docgen::spans(&name, &have).unwrap().len();
        let want = docgen::regenerate(&name, &have).unwrap_or_else(|e| panic!("{e}"));
        if have == want {
            continue;
        }
        if bless() {
            std::fs::write(&path, &want).unwrap();
            continue;
        }
        let line = have
            .lines()
            .zip(want.lines())
            .position(|(a, b)| a != b)
            .unwrap_or(0);
        stale.push(format!("{name}:{}", line + 1));
    }
    assert!(
        stale.is_empty(),
        "generated spans are stale at {stale:?}; HANDNODE_BLESS=1 cargo test rewrites them"
    );
    // The docs this test guards do carry spans (a renamed marker would pass vacuously).
    assert!(spans >= 10, "only {spans} generated spans found");
}

/// Runs of backticked local tool names joined as a list (`a`, `b` and `c`), with at least
/// three names, in `text`: each is `(byte offset, the names)`.
fn hand_lists(text: &str, tools: &[&str]) -> Vec<(usize, Vec<String>)> {
    let mut found = Vec::new();
    let mut run: Vec<String> = Vec::new();
    let mut run_start = 0;
    let mut at = 0;
    let flush = |run: &mut Vec<String>, start: usize, found: &mut Vec<(usize, Vec<String>)>| {
        if run.len() >= 3 {
            found.push((start, std::mem::take(run)));
        }
        run.clear();
    };
    while at < text.len() {
        let rest = &text[at..];
        let name = rest.strip_prefix('`').and_then(|r| {
            let end = r.find('`')?;
            tools.contains(&&r[..end]).then(|| r[..end].to_string())
        });
        let Some(name) = name else {
            flush(&mut run, run_start, &mut found);
            at += rest.chars().next().map_or(1, char::len_utf8);
            continue;
        };
        if run.is_empty() {
            run_start = at;
        }
        run.push(name.clone());
        at += name.len() + 2;
        // What joins it to the next name keeps the run going; anything else ends it.
        let rest = &text[at..];
        let joined = [", ", " and ", " or ", ",\n", " and\n", " or\n", "/"]
            .iter()
            .find_map(|sep| {
                let after = rest.strip_prefix(sep)?;
                let after = after.trim_start_matches([' ', '\n']);
                after.starts_with('`').then_some(rest.len() - after.len())
            });
        match joined {
            Some(skip) => at += skip,
            // "`a`, `b`, `c`, …" names some, by way of example: not a list to keep whole.
            None if rest.starts_with(", …") || rest.starts_with("…") => run.clear(),
            None => flush(&mut run, run_start, &mut found),
        }
    }
    flush(&mut run, run_start, &mut found);
    found
}

#[test]
fn no_doc_lists_tools_by_hand() {
    let tools = handnode::ops::lists::list("all").unwrap();
    let mut found = Vec::new();
    // docs/classes.md is generated whole (tests/classes_doc.rs).
    let by_hand =
        |p: &PathBuf| p.extension().is_some_and(|e| e == "md") && !p.ends_with("docs/classes.md");
    for path in files().into_iter().filter(by_hand) {
        let name = path.strip_prefix(root()).unwrap().display().to_string();
        let text = std::fs::read_to_string(&path).unwrap();
        // Blank out the generated spans: what is inside them is not by hand.
        let mut outside = text.clone().into_bytes();
        for span in docgen::spans(&name, &text).unwrap() {
            outside[span.text].fill(b' ');
        }
        let outside = String::from_utf8(outside).unwrap();
        for (offset, names) in hand_lists(&outside, &tools) {
            let line = text[..offset].lines().count();
            found.push(format!("{name}:{line}: {}", names.join(", ")));
        }
    }
    assert!(
        found.is_empty(),
        "tool lists written by hand (wrap each in a <!-- gen:KEY --> span, keys in \
         src/ops/lists.rs, then HANDNODE_BLESS=1 cargo test):\n{}",
        found.join("\n")
    );
}

#[test]
fn the_hand_list_finder_finds_lists_and_spares_examples() {
    let tools = ["bash", "mouse", "key", "sys_info"];
    let lists = |t: &str| -> Vec<Vec<String>> {
        hand_lists(t, &tools).into_iter().map(|(_, n)| n).collect()
    };
    assert_eq!(
        lists("use `bash`, `mouse` and `key` now"),
        [["bash", "mouse", "key"]]
    );
    assert_eq!(lists("`bash`/`mouse`/`key`"), [["bash", "mouse", "key"]]);
    assert_eq!(
        lists("(`bash`,\n`mouse` or `key`)"),
        [["bash", "mouse", "key"]]
    );
    assert!(lists("`bash` and `mouse`").is_empty());
    assert!(lists("`bash`, `mouse`, `key`, …").is_empty());
    assert!(lists("`bash`, `nope`, `key`").is_empty());
}

/// Help texts fill their `{gen:…}` placeholders: none is printed raw.
#[test]
fn no_help_prints_a_placeholder() {
    let table = handnode::ops::cli::help_table_markdown();
    assert!(
        !table.contains("{gen:"),
        "the flag table kept a placeholder"
    );
    for sub in [
        "serve",
        "doctor",
        "tools",
        "grant",
        "grants",
        "revoke",
        "approvals",
        "approve",
        "deny",
    ] {
        let help = handnode::ops::cli::help_text(sub).unwrap();
        assert!(!help.contains("{gen:"), "{sub} --help kept a placeholder");
    }
    let grant = handnode::ops::cli::help_text("grant").unwrap();
    let paths = docgen::render("paths plain").unwrap();
    assert!(
        grant.replace('\n', " ").contains(&paths.replace('\n', " "))
            || grant
                .split_whitespace()
                .collect::<Vec<_>>()
                .join(" ")
                .contains(&paths),
        "grant --help names the path tools: {paths}"
    );
}
