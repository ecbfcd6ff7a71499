//! Reading the accessibility tree into a snapshot: the applications on the registry, then
//! breadth first, one pipelined batch per level (states first, so hidden elements cost one
//! call; then role, name, extents, children and interfaces of the shown ones; then the value
//! of the few that have one), bounded by `max_nodes` and a budget of elements examined;
//! then the compact text (one line per element, indented by depth) and the structured form.

use serde_json::{json, Value};

use super::bus::{Bus, Req, A, ACCESSIBLE, COMPONENT, DBUS, REGISTRY, ROOT_PATH, TEXT, VALUE};
use super::{ElementApp, ElementRef};
use crate::wire::dbus::{DbusError, Val};

/// Deepest level read; deeper elements are left out (and the snapshot says truncated).
pub const MAX_DEPTH: u32 = 64;
/// Longest name or value kept (characters); the text line cuts names shorter still.
pub const MAX_NAME_CHARS: usize = 400;
/// Longest name in a text line (characters).
pub const LINE_NAME_CHARS: usize = 100;
/// Longest value read from a text field (characters).
pub const MAX_VALUE_CHARS: i32 = 200;

/// AT-SPI state bits (`AtspiStateType`) this module reads.
pub mod state {
    pub const ACTIVE: u32 = 1;
    pub const CHECKED: u32 = 4;
    pub const COLLAPSED: u32 = 5;
    pub const DEFUNCT: u32 = 6;
    pub const EDITABLE: u32 = 7;
    pub const EXPANDABLE: u32 = 9;
    pub const EXPANDED: u32 = 10;
    pub const FOCUSED: u32 = 12;
    pub const MODAL: u32 = 16;
    pub const PRESSED: u32 = 20;
    pub const SELECTED: u32 = 23;
    pub const SENSITIVE: u32 = 24;
    pub const SHOWING: u32 = 25;
    pub const VISIBLE: u32 = 30;
    pub const INDETERMINATE: u32 = 32;
    pub const REQUIRED: u32 = 33;
    pub const INVALID_ENTRY: u32 = 36;
    pub const IS_DEFAULT: u32 = 39;
    pub const READ_ONLY: u32 = 43;
}

/// The states a snapshot shows, in this order: the ones an agent acts on. The rest
/// (enabled, visible, focusable, …) would be on nearly every line.
const SHOWN_STATES: &[(u32, &str)] = &[
    (state::FOCUSED, "focused"),
    (state::CHECKED, "checked"),
    (state::INDETERMINATE, "mixed"),
    (state::PRESSED, "pressed"),
    (state::SELECTED, "selected"),
    (state::EXPANDED, "expanded"),
    (state::EDITABLE, "editable"),
    (state::READ_ONLY, "read-only"),
    (state::REQUIRED, "required"),
    (state::INVALID_ENTRY, "invalid"),
    (state::IS_DEFAULT, "default"),
    (state::MODAL, "modal"),
    (state::ACTIVE, "active"),
];

/// States as one bit set.
pub fn state_bits(answer: &[Val]) -> u64 {
    let words = answer.first().map(Val::items).unwrap_or_default();
    let lo = words.first().and_then(Val::as_u64).unwrap_or(0) & 0xffff_ffff;
    let hi = words.get(1).and_then(Val::as_u64).unwrap_or(0) & 0xffff_ffff;
    lo | (hi << 32)
}

pub fn has(states: u64, bit: u32) -> bool {
    states & (1u64 << bit) != 0
}

/// The states a line shows.
pub fn state_names(states: u64, showing_checked: bool) -> Vec<&'static str> {
    let mut out: Vec<&'static str> = SHOWN_STATES
        .iter()
        .filter(|(bit, _)| has(states, *bit))
        .map(|(_, n)| *n)
        .collect();
    if has(states, state::EXPANDABLE) && has(states, state::COLLAPSED) {
        out.push("collapsed");
    }
    if has(states, state::VISIBLE) && !has(states, state::SENSITIVE) {
        out.push("disabled");
    }
    if showing_checked && !has(states, state::SHOWING) {
        out.push("offscreen");
    }
    out
}

/// What the caller asked for.
#[derive(Clone, Debug)]
pub struct Opts {
    pub app: Option<String>,
    pub max_nodes: usize,
    pub offscreen: bool,
}

/// One element read.
#[derive(Clone, Debug)]
pub struct Node {
    pub el: ElementRef,
    pub states: u64,
    pub bounds: Option<[i64; 4]>,
    pub value: Option<String>,
    pub depth: u32,
    children: Vec<usize>,
}

impl Node {
    /// One element read on its own (after an action).
    pub fn alone(el: ElementRef, states: u64) -> Node {
        Node {
            el,
            states,
            bounds: None,
            value: None,
            depth: 1,
            children: Vec::new(),
        }
    }
}

/// A snapshot: the elements in tree order (depth first), and what was left out.
#[derive(Debug, Default)]
pub struct Snapshot {
    pub nodes: Vec<Node>,
    pub truncated: bool,
    /// Applications that did not answer in time.
    pub skipped: Vec<String>,
    pub max_nodes: usize,
}

pub fn cut(s: &str, max: usize) -> String {
    match s.char_indices().nth(max) {
        Some((i, _)) => format!("{}…", &s[..i]),
        None => s.to_string(),
    }
}

fn string_of(answer: &Result<Vec<Val>, DbusError>) -> Option<String> {
    answer
        .as_ref()
        .ok()?
        .first()
        .and_then(Val::as_str)
        .map(|s| cut(s, MAX_NAME_CHARS))
}

/// The (bus name, path) pairs of an `a(so)` answer, at most `cap`.
fn refs_of(answer: &Result<Vec<Val>, DbusError>, cap: usize) -> (Vec<(String, String)>, bool) {
    let Ok(vals) = answer else {
        return (Vec::new(), false);
    };
    let items = vals.first().map(Val::items).unwrap_or_default();
    let out = items
        .iter()
        .take(cap)
        .filter_map(|i| match i.items() {
            [b, p] => Some((b.as_str()?.to_string(), p.as_str()?.to_string())),
            _ => None,
        })
        .filter(|(b, p)| !b.is_empty() && p != "/org/a11y/atspi/null")
        .collect();
    (out, items.len() > cap)
}

/// A candidate for the next level: where it is, its application, and its parent.
struct Cand {
    bus: String,
    path: String,
    app: usize,
    parent: Option<usize>,
    depth: u32,
}

/// Read the tree. `cancelled` is asked between levels.
pub fn read(bus: &mut Bus, opts: &Opts, cancelled: &dyn Fn() -> bool) -> Result<Snapshot, String> {
    let timeout_ms = bus.timeout.as_millis();
    let apps_answer = bus.call(Req::new(REGISTRY, ROOT_PATH, ACCESSIBLE, "GetChildren"));
    if let Err(e) = &apps_answer {
        return Err(format!(
            "the accessibility registry did not list the applications: {e}"
        ));
    }
    // Budget of elements examined (shown or not): hidden rows of a long list cost a state
    // call each, so they are bounded too.
    let budget = opts.max_nodes.saturating_mul(8).saturating_add(256);
    let (app_refs, _) = refs_of(&apps_answer, budget);
    // Each application's name (to filter by `app`) and process id.
    let mut reqs = Vec::new();
    for (b, p) in &app_refs {
        reqs.push(Req::prop(b, p, ACCESSIBLE, "Name"));
        reqs.push(
            Req::new(
                DBUS,
                "/org/freedesktop/DBus",
                DBUS,
                "GetConnectionUnixProcessID",
            )
            .arg(A::S(b.clone())),
        );
    }
    let answers = bus.batch(&reqs);
    let mut apps: Vec<ElementApp> = Vec::new();
    let mut cands: Vec<Cand> = Vec::new();
    let mut skipped = Vec::new();
    for (k, (b, p)) in app_refs.iter().enumerate() {
        let name = string_of(&answers[2 * k]);
        let pid = answers[2 * k + 1]
            .as_ref()
            .ok()
            .and_then(|v| v.first()?.as_u64())
            .and_then(|p| u32::try_from(p).ok());
        let Some(name) = name else {
            if matches!(answers[2 * k], Err(DbusError::Timeout)) {
                skipped.push(format!(
                    "an application ({b}{}) did not answer within {timeout_ms} ms and was left out",
                    pid.map(|p| format!(", pid {p}")).unwrap_or_default()
                ));
            }
            continue;
        };
        if let Some(want) = &opts.app {
            if !name.eq_ignore_ascii_case(want) {
                continue;
            }
        }
        apps.push(ElementApp { name, pid });
        cands.push(Cand {
            bus: b.clone(),
            path: p.clone(),
            app: apps.len() - 1,
            parent: None,
            depth: 0,
        });
    }
    if let Some(want) = &opts.app {
        if apps.is_empty() {
            let mut names: Vec<String> = app_refs
                .iter()
                .enumerate()
                .filter_map(|(k, _)| string_of(&answers[2 * k]))
                .filter(|n| !n.is_empty())
                .collect();
            names.sort();
            names.dedup();
            return Err(format!(
                "no application named {want:?} is on the accessibility bus; there are: {}",
                if names.is_empty() {
                    "none".to_string()
                } else {
                    names.join(", ")
                }
            ));
        }
    }

    let mut arena: Vec<Node> = Vec::new();
    let mut roots: Vec<usize> = Vec::new();
    let mut truncated = false;
    let mut examined = 0usize;
    while !cands.is_empty() {
        if cancelled() {
            return Err("cancelled".into());
        }
        // Phase A: which of them are shown (applications always are).
        let states: Vec<Option<u64>> = if opts.offscreen {
            vec![None; cands.len()]
        } else {
            let reqs: Vec<Req> = cands
                .iter()
                .map(|c| Req::new(&c.bus, &c.path, ACCESSIBLE, "GetState"))
                .collect();
            bus.batch(&reqs)
                .iter()
                .map(|a| a.as_ref().ok().map(|v| state_bits(v)))
                .collect()
        };
        let mut kept: Vec<(Cand, Option<u64>)> = Vec::new();
        for (c, s) in cands.drain(..).zip(states) {
            let shown = match s {
                _ if c.depth == 0 => true,
                Some(bits) => has(bits, state::SHOWING) && !has(bits, state::DEFUNCT),
                None => false,
            };
            if shown || opts.offscreen {
                kept.push((c, s));
            }
        }
        let room = opts.max_nodes.saturating_sub(arena.len());
        if kept.len() > room {
            kept.truncate(room);
            truncated = true;
        }
        if kept.is_empty() {
            break;
        }
        // Phase B: what each shown element is.
        const PER: usize = 5;
        let mut reqs = Vec::with_capacity(kept.len() * PER);
        for (c, _) in &kept {
            reqs.push(Req::new(&c.bus, &c.path, ACCESSIBLE, "GetRoleName"));
            reqs.push(Req::prop(&c.bus, &c.path, ACCESSIBLE, "Name"));
            reqs.push(Req::new(&c.bus, &c.path, ACCESSIBLE, "GetState"));
            reqs.push(Req::new(&c.bus, &c.path, COMPONENT, "GetExtents").arg(A::U(0)));
            reqs.push(Req::new(&c.bus, &c.path, ACCESSIBLE, "GetChildren"));
        }
        let answers = bus.batch(&reqs);
        let mut next: Vec<Cand> = Vec::new();
        let mut want_value: Vec<usize> = Vec::new();
        for (k, (c, _)) in kept.into_iter().enumerate() {
            let a = &answers[k * PER..(k + 1) * PER];
            let Some(role) = string_of(&a[0]) else {
                continue; // gone, or not answering
            };
            let name = string_of(&a[1]).unwrap_or_default();
            let states = a[2].as_ref().map(|v| state_bits(v)).unwrap_or(0);
            if has(states, state::DEFUNCT) {
                continue;
            }
            let bounds = a[3].as_ref().ok().and_then(|v| {
                let f = v.first()?.items();
                let n: Vec<i64> = f.iter().filter_map(Val::as_i64).collect();
                (n.len() == 4 && n[2] > 0 && n[3] > 0 && n[0] > -100_000 && n[1] > -100_000)
                    .then(|| [n[0], n[1], n[2], n[3]])
            });
            let index = arena.len();
            let app = apps[c.app].clone();
            arena.push(Node {
                el: ElementRef {
                    bus: c.bus.clone(),
                    path: c.path.clone(),
                    role: role.clone(),
                    name,
                    app,
                },
                states,
                bounds,
                value: None,
                depth: c.depth,
                children: Vec::new(),
            });
            match c.parent {
                Some(p) => arena[p].children.push(index),
                None => roots.push(index),
            }
            if (has(states, state::EDITABLE) && role != "password text")
                || matches!(
                    role.as_str(),
                    "slider" | "spin button" | "progress bar" | "scroll bar" | "level bar"
                )
            {
                want_value.push(index);
            }
            let (kids, cut_short) = refs_of(&a[4], budget);
            truncated |= cut_short;
            if c.depth + 1 > MAX_DEPTH {
                truncated |= !kids.is_empty();
                continue;
            }
            for (b, p) in kids {
                if examined >= budget {
                    truncated = true;
                    break;
                }
                examined += 1;
                next.push(Cand {
                    bus: b,
                    path: p,
                    app: c.app,
                    parent: Some(index),
                    depth: c.depth + 1,
                });
            }
        }
        // Phase C: values (text of editable fields, the number of ranges).
        if !want_value.is_empty() {
            let reqs: Vec<Req> = want_value
                .iter()
                .map(|&i| {
                    let el = &arena[i].el;
                    if has(arena[i].states, state::EDITABLE) {
                        Req::new(&el.bus, &el.path, TEXT, "GetText")
                            .arg(A::I(0))
                            .arg(A::I(MAX_VALUE_CHARS))
                    } else {
                        Req::prop(&el.bus, &el.path, VALUE, "CurrentValue")
                    }
                })
                .collect();
            for (&i, answer) in want_value.iter().zip(bus.batch(&reqs)) {
                let Ok(v) = answer else { continue };
                arena[i].value = match v.first() {
                    Some(Val::Variant(inner)) => inner.as_f64().map(number),
                    Some(other) => other.as_str().map(|s| cut(s, MAX_NAME_CHARS)),
                    None => None,
                };
            }
        }
        cands = next;
    }
    for b in &bus.hung {
        if !skipped.iter().any(|s| s.contains(b.as_str())) {
            let app = arena
                .iter()
                .find(|n| &n.el.bus == b)
                .map(|n| n.el.app.name.clone());
            skipped.push(format!(
                "an application ({b}{}) stopped answering within {timeout_ms} ms: its part of the tree is incomplete",
                app.map(|a| format!(" {a:?}")).unwrap_or_default()
            ));
        }
    }
    // Depth-first order.
    let mut order = Vec::with_capacity(arena.len());
    let mut stack: Vec<usize> = roots.iter().rev().copied().collect();
    while let Some(i) = stack.pop() {
        order.push(i);
        stack.extend(arena[i].children.iter().rev().copied());
    }
    let mut slots: Vec<Option<Node>> = arena.into_iter().map(Some).collect();
    let nodes = order.into_iter().filter_map(|i| slots[i].take()).collect();
    Ok(Snapshot {
        nodes,
        truncated,
        skipped,
        max_nodes: opts.max_nodes,
    })
}

fn number(f: f64) -> String {
    if f.fract() == 0.0 && f.abs() < 1e15 {
        format!("{}", f as i64)
    } else {
        format!("{f}")
    }
}

/// `"…"` with quotes and line breaks escaped, cut for a line.
pub fn quoted(s: &str, max: usize) -> String {
    let mut out = String::from("\"");
    for c in cut(s, max).chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            c if c.is_control() => out.push_str(&format!("\\u{{{:x}}}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// One element's line, without indentation: `[e12] push button "Save" (focused)`.
pub fn line(reference: &str, node: &Node, offscreen_checked: bool) -> String {
    let mut out = format!("[{reference}] {}", node.el.role);
    if !node.el.name.is_empty() {
        out.push(' ');
        out.push_str(&quoted(&node.el.name, LINE_NAME_CHARS));
    }
    let states = state_names(node.states, offscreen_checked);
    if !states.is_empty() {
        out.push_str(&format!(" ({})", states.join(", ")));
    }
    if let Some(v) = &node.value {
        out.push_str(&format!(" = {}", quoted(v, LINE_NAME_CHARS)));
    }
    if node.depth == 0 {
        if let Some(pid) = node.el.app.pid {
            out.push_str(&format!(" pid {pid}"));
        }
    }
    out
}

/// One element as `structuredContent` shows it.
pub fn node_json(reference: &str, node: &Node, offscreen_checked: bool) -> Value {
    let mut v = json!({
        "ref": reference,
        "role": node.el.role,
        "name": node.el.name,
        "states": state_names(node.states, offscreen_checked),
        "app": node.el.app.name,
        "depth": node.depth,
    });
    if let Some(value) = &node.value {
        v["value"] = json!(value);
    }
    if let Some([x, y, w, h]) = node.bounds {
        v["bounds"] = json!({"x": x, "y": y, "w": w, "h": h});
    }
    if node.depth == 0 {
        if let Some(pid) = node.el.app.pid {
            v["pid"] = json!(pid);
        }
    }
    v
}
