//! Imports go one way: no module under `src/` imports a module that imports it back,
//! directly or around a longer loop. Checked at every level, not just the top: sibling
//! modules (`tools::bash` and `tools::sysinfo`, `grants::dial` and `grants::persist`) and the
//! folders under `src/` (`base`, `wire`, `grants`, `admin`, `ops`, …) must form layers, and
//! `base` names nothing of the crate outside itself.
//!
//! And the order ARCHITECTURE.md states holds: its module map (the layer table of the
//! top-level modules and folders, the table of each folder's modules, the "Inside `tools`,
//! lower first" list) is read from the Markdown, the one place the order is written, and a
//! module that uses one stated at its own layer or above fails with both named.
//! A parent and its own submodule may use each other (the parent declares and registers
//! the child; the child uses the parent's shared types), so that pair is not an edge.
//!
//! The scan reads `crate::…`, `super::…` and `self::…` paths in code (comments and string
//! literals are skipped; `#[cfg(test)]` modules count like any other code, and a `tests.rs`
//! beside its module as that module's) and resolves
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
    let known: BTreeSet<ModPath> = mods
        .iter()
        .map(|(m, _)| m.clone())
        .filter(|m| !is_unit_tests(m))
        .collect();
    // A `tests.rs` beside its module is that module's `#[cfg(test)] mod tests`, moved out
    // of the file (issue 40): its paths resolve from where it is, and count as its parent's.
    let mut deps: BTreeMap<ModPath, BTreeSet<ModPath>> = BTreeMap::new();
    for (m, text) in &mods {
        let owner = if is_unit_tests(m) {
            m[..m.len() - 1].to_vec()
        } else {
            m.clone()
        };
        let refs = references(m, &code_only(text), &known);
        let entry = deps.entry(owner.clone()).or_default();
        entry.extend(refs.into_iter().filter(|r| *r != owner));
    }
    deps
}

/// A module's unit tests in a file of their own (`a/tests.rs` of module `a`).
fn is_unit_tests(m: &ModPath) -> bool {
    m.len() > 1 && m.last().is_some_and(|last| last == "tests")
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

/// Longest an inline `#[cfg(test)] mod tests { … }` block may be (lines): past it, the
/// tests move to a `tests.rs` beside their module (issue 40), so the module reads as code.
const MAX_INLINE_TEST_LINES: usize = 300;

/// Inline test modules longer than [`MAX_INLINE_TEST_LINES`], as `(file, lines)`.
fn long_inline_tests(files: &[(String, String)]) -> Vec<(String, usize)> {
    let mut long = Vec::new();
    for (rel, text) in files {
        let lines: Vec<&str> = text.lines().collect();
        for (i, line) in lines.iter().enumerate() {
            let Some(name) = line.strip_prefix("mod ").and_then(|l| l.strip_suffix(" {")) else {
                continue;
            };
            if i == 0 || lines[i - 1].trim() != "#[cfg(test)]" {
                continue;
            }
            let end = lines[i + 1..].iter().position(|l| *l == "}");
            let len = end.map_or(lines.len() - i, |e| e + 1);
            if len > MAX_INLINE_TEST_LINES {
                long.push((format!("{rel} (mod {name})"), len));
            }
        }
    }
    long
}

#[test]
fn long_unit_test_blocks_live_in_a_tests_rs_beside_their_module() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    rust_files(&src, &src, &mut files);
    let long = long_inline_tests(&files);
    assert!(
        long.is_empty(),
        "inline test modules over {MAX_INLINE_TEST_LINES} lines: {long:?}; move each block's \
         body into a tests.rs beside its module and leave `#[cfg(test)] mod tests;`"
    );
    // The check itself finds a long block.
    let body = "    #[test]\n    fn t() {}\n".repeat(MAX_INLINE_TEST_LINES);
    let made = vec![(
        "x.rs".to_string(),
        format!("fn f() {{}}\n#[cfg(test)]\nmod tests {{\n{body}}}\n"),
    )];
    assert_eq!(long_inline_tests(&made).len(), 1);
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

/// One stated order: the modules under `parent`, each with its layer (lower first).
#[derive(Debug)]
struct Order {
    parent: ModPath,
    /// Where it is stated, for the message.
    source: &'static str,
    layers: Vec<(ModPath, usize)>,
}

/// `` `a::b/` `` → `["a", "b"]`; `None` for what is not one module (`mod.rs`, `lib.rs`).
fn stated_module(cell: &str) -> Option<ModPath> {
    let name = cell.trim().strip_prefix('`')?.strip_suffix('`')?;
    let name = name.trim_end_matches('/');
    if name.ends_with(".rs") || name.is_empty() {
        return None;
    }
    Some(name.split("::").map(str::to_string).collect())
}

/// The orders ARCHITECTURE.md's module map states: the top table (`| layer | module or
/// folder | owns |`), the folders' table (`| folder | layer | module | owns |`) and the
/// prose list after "Inside `tools`, lower first:" (the backticked names outside
/// parentheses, each a layer above the one before).
fn stated_orders(doc: &str) -> Vec<Order> {
    let mut orders: Vec<Order> = Vec::new();
    let mut table = None;
    for line in doc.lines() {
        if line.starts_with("| layer | module or folder |") {
            table = Some(0);
            continue;
        }
        if line.starts_with("| folder | layer | module |") {
            table = Some(1);
            continue;
        }
        if !line.starts_with('|') {
            table = None;
            continue;
        }
        let cells: Vec<&str> = line.split('|').skip(1).collect();
        let (parent, layer, module) = match table {
            Some(0) => (Some(Vec::new()), cells[0], cells[1]),
            Some(1) => (stated_module(cells[0]), cells[1], cells[2]),
            _ => continue,
        };
        let (Some(parent), Ok(layer), Some(module)) =
            (parent, layer.trim().parse(), stated_module(module))
        else {
            continue;
        };
        let source = if parent.is_empty() {
            "the module map's layer table"
        } else {
            "the module map's table of each folder's modules"
        };
        match orders.iter_mut().find(|o| o.parent == parent) {
            Some(o) => o.layers.push((module, layer)),
            None => orders.push(Order {
                parent,
                source,
                layers: vec![(module, layer)],
            }),
        }
    }
    const TOOLS: &str = "Inside `tools`, lower first";
    if let Some(at) = doc.find(TOOLS) {
        let rest = &doc[at + TOOLS.len()..];
        let para = rest.split("\n\n").next().unwrap_or("");
        let mut layers = Vec::new();
        let (mut depth, mut tick) = (0usize, None);
        for (i, c) in para.char_indices() {
            match c {
                '(' if tick.is_none() => depth += 1,
                ')' if tick.is_none() => depth = depth.saturating_sub(1),
                '`' => match tick.take() {
                    None => tick = Some(i + 1),
                    Some(start) if depth == 0 => {
                        if let Some(m) = stated_module(&format!("`{}`", &para[start..i])) {
                            layers.push((m, layers.len()));
                        }
                    }
                    Some(_) => {}
                },
                _ => {}
            }
        }
        orders.push(Order {
            parent: vec!["tools".to_string()],
            source: "the module map's \"Inside `tools`, lower first\" list",
            layers,
        });
    }
    orders
}

/// Where a module stands in `order`: the longest stated module that is it or holds it.
fn placed<'o>(order: &'o Order, module: &ModPath) -> Option<&'o (ModPath, usize)> {
    let rel = module.strip_prefix(order.parent.as_slice())?;
    order
        .layers
        .iter()
        .filter(|(m, _)| rel.starts_with(m))
        .max_by_key(|(m, _)| m.len())
}

/// Every use that breaks a stated order, and every module an order leaves out.
fn order_breaks(deps: &BTreeMap<ModPath, BTreeSet<ModPath>>, orders: &[Order]) -> Vec<String> {
    let show = |m: &ModPath| {
        if m.is_empty() {
            "crate".to_string()
        } else {
            m.join("::")
        }
    };
    let mut found = Vec::new();
    for order in orders {
        for (from, tos) in deps {
            if from.len() <= order.parent.len() || !from.starts_with(&order.parent) {
                continue;
            }
            let Some((from_at, from_layer)) = placed(order, from) else {
                // A folder's `mod.rs` that only declares stated modules stands nowhere.
                let holds_stated = order.layers.iter().any(|(m, _)| {
                    m.len() > from.len() - order.parent.len()
                        && m.starts_with(&from[order.parent.len()..])
                });
                // A tool's own module, which only `tools/mod.rs` names (to register it),
                // stands above every stated one: a new tool is its module plus one line
                // (§26), with no place in the list to find for it.
                let own_module = &from[..order.parent.len() + 1];
                let a_top_tool = order.parent == ["tools"]
                    && !deps.iter().any(|(user, uses)| {
                        user.as_slice() != order.parent.as_slice()
                            && !user.starts_with(own_module)
                            && uses.iter().any(|u| u.starts_with(own_module))
                    });
                if !holds_stated && !a_top_tool {
                    found.push(format!(
                        "{} is not in {} (under {}): add it to ARCHITECTURE.md at the layer \
                         it belongs to",
                        show(from),
                        order.source,
                        show(&order.parent)
                    ));
                }
                continue;
            };
            for to in tos {
                let Some((to_at, to_layer)) = placed(order, to) else {
                    continue;
                };
                if from_at.starts_with(to_at) || to_at.starts_with(from_at) {
                    continue; // the same stated module, or a parent and its child
                }
                if to_layer >= from_layer {
                    found.push(format!(
                        "{} uses {}, but {} puts {} at layer {from_layer} and {} at layer \
                         {to_layer} (under {}): a module uses only modules in layers below \
                         its own. Move what {} needs down (into {} or a lower module), or, \
                         if the layering is meant, put {} below {} in ARCHITECTURE.md",
                        show(from),
                        show(to),
                        order.source,
                        from_at.join("::"),
                        to_at.join("::"),
                        show(&order.parent),
                        show(from),
                        to_at.join("::"),
                        to_at.join("::"),
                        from_at.join("::"),
                    ));
                }
            }
        }
    }
    found.sort();
    found.dedup();
    found
}

#[test]
fn the_layer_order_architecture_md_states_holds() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let src = root.join("src");
    let mut files = Vec::new();
    rust_files(&src, &src, &mut files);
    let doc = std::fs::read_to_string(root.join("ARCHITECTURE.md")).unwrap();
    let orders = stated_orders(&doc);
    // The three kinds of statement are all read: a changed heading must not turn the
    // check off.
    for parent in [&[][..], &["tools"][..], &["grants"][..], &["base"][..]] {
        let o = orders
            .iter()
            .find(|o| o.parent == parent)
            .unwrap_or_else(|| panic!("ARCHITECTURE.md states no order under {parent:?}"));
        assert!(o.layers.len() > 4, "{o:?}");
    }
    let found = order_breaks(&dependencies(&files), &orders);
    assert!(
        found.is_empty(),
        "the layer order ARCHITECTURE.md states is broken:\n  {}",
        found.join("\n  ")
    );
}

#[test]
fn the_order_check_reads_the_doc_and_names_what_breaks_it() {
    let doc = "\
| layer | module or folder | owns |\n|---|---|---|\n| 0 | `low` | x |\n| 1 | `t/` | y |\n\
| 2 | `tools/` | w |\n| 3 | `lib.rs` | z |\n\n\
| folder | layer | module | owns |\n|---|---|---|---|\n| `t/` | 0 | `a` | . |\n\
| `t/` | 1 | `b` | . |\n| `t/` | 1 | `mod.rs` | . |\n\n\
Inside `tools`, lower first: `x` (its `own` (nested) words), `j::lo`, then `y` and `j::hi`.\n";
    let orders = stated_orders(doc);
    let layers = |p: &[&str]| -> Vec<(String, usize)> {
        orders
            .iter()
            .find(|o| o.parent == p)
            .unwrap()
            .layers
            .iter()
            .map(|(m, l)| (m.join("::"), *l))
            .collect()
    };
    let s = |v: &[(&str, usize)]| -> Vec<(String, usize)> {
        v.iter().map(|(m, l)| (m.to_string(), *l)).collect()
    };
    assert_eq!(layers(&[]), s(&[("low", 0), ("t", 1), ("tools", 2)]));
    assert_eq!(layers(&["t"]), s(&[("a", 0), ("b", 1)]));
    assert_eq!(
        layers(&["tools"]),
        s(&[("x", 0), ("j::lo", 1), ("y", 2), ("j::hi", 3)])
    );

    let fine = crate_of(&[
        ("t/mod.rs", "pub mod a; pub mod b; use crate::low::L;"),
        ("t/b.rs", "use super::a::A;"),
        // A tool's own module, named only by tools/mod.rs, needs no place in the list.
        (
            "tools/mod.rs",
            "pub mod x; pub mod new_tool; use new_tool::TOOL;",
        ),
        (
            "tools/new_tool.rs",
            "use crate::tools::y::Y; use crate::tools::j::hi::H;",
        ),
        ("tools/j/mod.rs", "pub mod lo; pub mod hi;"),
        ("tools/j/hi.rs", "use crate::tools::y::Y; use super::lo::L;"),
        ("tools/y.rs", "use crate::tools::j::lo::L;"),
        ("low.rs", ""),
    ]);
    assert_eq!(
        order_breaks(&dependencies(&fine), &orders),
        Vec::<String>::new()
    );

    let broken = crate_of(&[
        ("t/a.rs", "use super::b::B;"),
        ("low.rs", "use crate::t::a::A;"),
        ("tools/j/lo.rs", "use crate::tools::y::Y;"),
        // One a sibling uses does.
        ("tools/stray.rs", ""),
        ("t/b.rs", ""),
        ("tools/y.rs", "use crate::tools::stray::S;"),
    ]);
    let found = order_breaks(&dependencies(&broken), &orders);
    assert_eq!(found.len(), 4, "{found:#?}");
    assert!(
        found[0].starts_with(
            "low uses t::a, but the module map's layer table puts low at layer 0 and t at layer 1"
        ),
        "{found:#?}"
    );
    assert!(
        found[0].contains("put t below low in ARCHITECTURE.md"),
        "{found:#?}"
    );
    assert!(found[1].starts_with("t::a uses t::b, but"), "{found:#?}");
    assert!(
        found[2].starts_with("tools::j::lo uses tools::y"),
        "{found:#?}"
    );
    assert!(found[3].starts_with("tools::stray is not in"), "{found:#?}");
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
