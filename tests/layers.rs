//! Imports go one way: no module under `src/` imports a module that imports it back,
//! directly or around a longer loop. Checked at every level, not just the top: sibling
//! modules (`tools::bash` and `tools::sysinfo`, `grants::dial` and `grants::persist`) and the
//! folders under `src/` (`base`, `wire`, `grants`, `admin`, `ops`, …) must form layers, and
//! `base` names nothing of the crate outside itself.
//! A parent and its own submodule may use each other (the parent declares and registers
//! the child; the child uses the parent's shared types), so that pair is not an edge.
//!
//! The scan reads `crate::…`, `super::…` and `self::…` paths in code (comments and string
//! literals are skipped; `#[cfg(test)]` modules count like any other code) and resolves
//! each to the longest module path that exists as a file under `src/`.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

type ModPath = Vec<String>;

/// The module a file under `src/` defines: `a.rs` and `a/mod.rs` are `a`, `a/b.rs` is
/// `a::b`. `lib.rs` is the crate root (empty); `main.rs` is another crate.
fn module_of(rel: &str) -> Option<ModPath> {
    let rel = rel.strip_suffix(".rs")?;
    if rel == "main" {
        return None;
    }
    if rel == "lib" {
        return Some(Vec::new());
    }
    let mut parts: ModPath = rel.split('/').map(str::to_string).collect();
    if parts.last().map(String::as_str) == Some("mod") {
        parts.pop();
    }
    Some(parts)
}

/// `text` with comments, string and char literals blanked to spaces (newlines kept), so
/// only code remains.
fn code_only(text: &str) -> String {
    let b: Vec<char> = text.chars().collect();
    let mut out = String::with_capacity(text.len());
    let mut i = 0;
    let blank = |out: &mut String, c: char| out.push(if c == '\n' { '\n' } else { ' ' });
    while i < b.len() {
        let c = b[i];
        let next = b.get(i + 1).copied();
        if c == '/' && next == Some('/') {
            while i < b.len() && b[i] != '\n' {
                blank(&mut out, b[i]);
                i += 1;
            }
        } else if c == '/' && next == Some('*') {
            let mut depth = 0;
            while i < b.len() {
                if b[i] == '/' && b.get(i + 1) == Some(&'*') {
                    depth += 1;
                    out.push_str("  ");
                    i += 2;
                } else if b[i] == '*' && b.get(i + 1) == Some(&'/') {
                    depth -= 1;
                    out.push_str("  ");
                    i += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    blank(&mut out, b[i]);
                    i += 1;
                }
            }
        } else if c == 'r'
            && (next == Some('"') || next == Some('#'))
            && !b
                .get(i.wrapping_sub(1))
                .is_some_and(|p| p.is_alphanumeric() || *p == '_')
        {
            // A raw string r"…" or r#"…"#; `r#ident` (a raw identifier) is code.
            let mut j = i + 1;
            let mut hashes = 0;
            while b.get(j) == Some(&'#') {
                hashes += 1;
                j += 1;
            }
            if b.get(j) != Some(&'"') {
                out.push(c);
                i += 1;
                continue;
            }
            let close: Vec<char> = std::iter::once('"')
                .chain(std::iter::repeat_n('#', hashes))
                .collect();
            j += 1;
            while j < b.len() && b[j..].iter().take(close.len()).ne(close.iter()) {
                j += 1;
            }
            j = (j + close.len()).min(b.len());
            for &ch in &b[i..j] {
                blank(&mut out, ch);
            }
            i = j;
        } else if c == '"' {
            blank(&mut out, c);
            i += 1;
            while i < b.len() && b[i] != '"' {
                if b[i] == '\\' {
                    blank(&mut out, b[i]);
                    i += 1;
                }
                if i < b.len() {
                    blank(&mut out, b[i]);
                    i += 1;
                }
            }
            if i < b.len() {
                blank(&mut out, b[i]);
                i += 1;
            }
        } else if c == '\'' {
            // A char literal ('x', '\n', '\u{1F600}') or a lifetime ('a).
            let end = if next == Some('\\') {
                b[i + 2..]
                    .iter()
                    .position(|&ch| ch == '\'')
                    .map(|p| i + 2 + p)
            } else if b.get(i + 2) == Some(&'\'') {
                Some(i + 2)
            } else {
                None
            };
            match end {
                Some(end) => {
                    for &ch in &b[i..=end] {
                        blank(&mut out, ch);
                    }
                    i = end + 1;
                }
                None => {
                    out.push(c);
                    i += 1;
                }
            }
        } else {
            out.push(c);
            i += 1;
        }
    }
    out
}

fn is_ident(c: char) -> bool {
    c.is_alphanumeric() || c == '_'
}

/// Every module path one file's code names, resolved against `known` modules.
fn references(file_mod: &ModPath, code: &str, known: &BTreeSet<ModPath>) -> BTreeSet<ModPath> {
    let chars: Vec<char> = code.chars().collect();
    let mut refs = BTreeSet::new();
    // Inline `mod name {` blocks: (name, brace depth inside it).
    let mut inline: Vec<(String, usize)> = Vec::new();
    let mut depth = 0usize;
    let mut i = 0;
    let word_at = |i: usize| -> String {
        chars[i..]
            .iter()
            .take_while(|c| is_ident(**c))
            .collect::<String>()
    };
    let skip_ws = |mut i: usize| {
        while i < chars.len() && chars[i].is_whitespace() {
            i += 1;
        }
        i
    };
    while i < chars.len() {
        let c = chars[i];
        if c == '{' {
            depth += 1;
            i += 1;
            continue;
        }
        if c == '}' {
            if inline.last().is_some_and(|(_, d)| *d == depth) {
                inline.pop();
            }
            depth = depth.saturating_sub(1);
            i += 1;
            continue;
        }
        if !is_ident(c) || (i > 0 && (is_ident(chars[i - 1]) || chars[i - 1] == ':')) {
            i += 1;
            continue;
        }
        let word = word_at(i);
        let after = i + word.chars().count();
        if word == "mod" {
            let name_at = skip_ws(after);
            let name = word_at(name_at);
            let brace = skip_ws(name_at + name.chars().count());
            if !name.is_empty() && chars.get(brace) == Some(&'{') {
                inline.push((name, depth + 1));
            }
            i = after;
            continue;
        }
        if !matches!(word.as_str(), "crate" | "super" | "self") {
            i = after;
            continue;
        }
        // Read `seg::seg::…`, then an optional `::{a, b::c, …}` group.
        let mut here: ModPath = file_mod.clone();
        here.extend(inline.iter().map(|(n, _)| n.clone()));
        let mut path: ModPath = match word.as_str() {
            "crate" => Vec::new(),
            "self" => here.clone(),
            _ => {
                let mut p = here.clone();
                p.pop();
                p
            }
        };
        let mut j = after;
        let mut group = Vec::new();
        loop {
            if chars.get(j) != Some(&':') || chars.get(j + 1) != Some(&':') {
                break;
            }
            j += 2;
            if chars.get(j) == Some(&'{') {
                let close = chars[j..]
                    .iter()
                    .position(|&c| c == '}')
                    .map_or(chars.len(), |p| j + p);
                let inner: String = chars[j + 1..close].iter().collect();
                group = inner
                    .split(',')
                    .filter_map(|item| item.trim().split("::").next().map(str::to_string))
                    .filter(|s| !s.is_empty())
                    .collect();
                break;
            }
            let seg = word_at(j);
            if seg.is_empty() {
                break;
            }
            j += seg.chars().count();
            match seg.as_str() {
                "super" => {
                    path.pop();
                }
                "self" => {}
                _ => path.push(seg),
            }
        }
        let resolve = |p: &ModPath| -> ModPath {
            (0..=p.len())
                .rev()
                .map(|n| p[..n].to_vec())
                .find(|prefix| known.contains(prefix))
                .unwrap_or_default()
        };
        refs.insert(resolve(&path));
        for item in group {
            let mut p = path.clone();
            p.push(item);
            refs.insert(resolve(&p));
        }
        i = j.max(after);
    }
    refs
}

/// Sibling edges `(parent, from child, to child)`: the dependency of `from` on `to`
/// seen at the level where they part. Parent↔child pairs are not edges.
fn sibling_edges(
    deps: &BTreeMap<ModPath, BTreeSet<ModPath>>,
) -> BTreeSet<(ModPath, String, String)> {
    let mut edges = BTreeSet::new();
    for (from, tos) in deps {
        for to in tos {
            let common = from.iter().zip(to).take_while(|(a, b)| a == b).count();
            if common == from.len() || common == to.len() {
                continue; // the same module, or an ancestor and its descendant
            }
            edges.insert((
                from[..common].to_vec(),
                from[common].clone(),
                to[common].clone(),
            ));
        }
    }
    edges
}

/// Loops among siblings, each as `parent: a -> b -> … -> a`.
fn loops(edges: &BTreeSet<(ModPath, String, String)>) -> Vec<String> {
    let mut by_parent: BTreeMap<&ModPath, BTreeMap<&str, BTreeSet<&str>>> = BTreeMap::new();
    for (parent, a, b) in edges {
        by_parent
            .entry(parent)
            .or_default()
            .entry(a)
            .or_default()
            .insert(b);
    }
    let mut found = Vec::new();
    for (parent, graph) in by_parent {
        let where_ = if parent.is_empty() {
            "crate".to_string()
        } else {
            parent.join("::")
        };
        // A loop through `start` using only nodes after it, so each is reported once.
        for &start in graph.keys() {
            let mut stack = vec![(start, vec![start])];
            while let Some((node, path)) = stack.pop() {
                for &next in graph.get(node).into_iter().flatten() {
                    if next == start {
                        found.push(format!("{where_}: {} -> {start}", path.join(" -> ")));
                    } else if next > start && !path.contains(&next) {
                        let mut p = path.clone();
                        p.push(next);
                        stack.push((next, p));
                    }
                }
            }
        }
    }
    found
}

/// Each module of a crate given as `(path under src/, text)`, with the modules it names.
fn dependencies(files: &[(String, String)]) -> BTreeMap<ModPath, BTreeSet<ModPath>> {
    let mods: Vec<(ModPath, &str)> = files
        .iter()
        .filter_map(|(rel, text)| Some((module_of(rel)?, text.as_str())))
        .collect();
    let known: BTreeSet<ModPath> = mods.iter().map(|(m, _)| m.clone()).collect();
    mods.iter()
        .map(|(m, text)| (m.clone(), references(m, &code_only(text), &known)))
        .collect()
}

/// Loops in a crate given as `(path under src/, text)`.
fn analyse(files: &[(String, String)]) -> Vec<String> {
    let deps = dependencies(files);
    let mut found = loops(&sibling_edges(&deps));
    found.sort();
    found
}

fn rust_files(dir: &Path, root: &Path, out: &mut Vec<(String, String)>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            rust_files(&path, root, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            let rel = path
                .strip_prefix(root)
                .unwrap()
                .to_string_lossy()
                .into_owned();
            out.push((rel, std::fs::read_to_string(&path).unwrap()));
        }
    }
}

#[test]
fn no_two_modules_import_each_other() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    rust_files(&src, &src, &mut files);
    assert!(files.len() > 20, "scanned only {} files", files.len());
    let found = analyse(&files);
    assert!(
        found.is_empty(),
        "modules that import each other (move what both need to the lower one, or to a \
         small module of its own):\n  {}",
        found.join("\n  ")
    );
}

/// `base` is the bottom layer: what it names of the crate is inside `base` (the crate root
/// counts as nothing: a path that resolves to no module, like `crate::Error`, is the root).
#[test]
fn base_names_nothing_above_it() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    rust_files(&src, &src, &mut files);
    let base = vec!["base".to_string()];
    assert!(
        files.iter().any(|(rel, _)| rel.starts_with("base/")),
        "no src/base/"
    );
    let mut above = Vec::new();
    for (from, tos) in dependencies(&files) {
        if !from.starts_with(&base) {
            continue;
        }
        for to in tos {
            if !to.is_empty() && !to.starts_with(&base) {
                above.push(format!("{} -> {}", from.join("::"), to.join("::")));
            }
        }
    }
    assert!(
        above.is_empty(),
        "base modules that name a module above base (move it up, or what it needs down):\n  {}",
        above.join("\n  ")
    );
}

fn crate_of(files: &[(&str, &str)]) -> Vec<(String, String)> {
    files
        .iter()
        .map(|(p, t)| (p.to_string(), t.to_string()))
        .collect()
}

#[test]
fn the_scan_finds_pairs_loops_and_submodule_cycles() {
    let pair = crate_of(&[
        ("lib.rs", "pub mod a; pub mod b;"),
        ("a.rs", "use crate::b::Thing;"),
        ("b.rs", "fn f() { crate::a::g() }"),
    ]);
    assert_eq!(analyse(&pair), ["crate: a -> b -> a"]);

    let longer = crate_of(&[
        ("a.rs", "use crate::{b, c};"),
        ("b.rs", "use crate::c::X;"),
        (
            "c.rs",
            "#[cfg(test)]\nmod tests {\n    use crate::a::Y;\n}\n",
        ),
    ]);
    assert_eq!(
        analyse(&longer),
        ["crate: a -> b -> c -> a", "crate: a -> c -> a"]
    );

    // Siblings inside a directory module, through `super::` from a test module.
    let nested = crate_of(&[
        ("t/mod.rs", "pub mod x; pub mod y; use x::A;"),
        (
            "t/x.rs",
            "use super::Shared;\nmod tests { fn f() { super::super::y::f() } }",
        ),
        ("t/y.rs", "use super::x::A;"),
    ]);
    assert_eq!(analyse(&nested), ["t: x -> y -> x"]);

    // Parent and child, comments and strings are not edges.
    let fine = crate_of(&[
        (
            "t/mod.rs",
            "pub mod x; static S: &str = \"crate::u::no\"; // crate::u::no",
        ),
        (
            "t/x.rs",
            "use super::Shared; /* crate::u */ fn f() { let _ = r#\"crate::u\"#; }",
        ),
        (
            "u.rs",
            "use crate::t::x::Thing; fn g<'a>(c: char) -> bool { c == '{' }",
        ),
    ]);
    assert_eq!(analyse(&fine), Vec::<String>::new());
}
