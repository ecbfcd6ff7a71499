//! Reading the accessibility tree into a snapshot: the applications on the registry, then
//! breadth first, one pipelined batch per level (states first, so hidden elements cost one
//! call; then role, name, extents, children and interfaces of the shown ones; then the value
//! of the few that have one), bounded by `max_nodes` and a budget of elements examined;
//! then the compact text (one line per element, indented by depth) and the structured form.

use serde_json::{json, Value};

use super::bus::{
    Bus, Req, A, ACCESSIBLE, COMPONENT, DBUS, PROPERTIES, REGISTRY, ROOT_PATH, TEXT, VALUE,
};
use super::{ElementApp, ElementRef};
use crate::wire::dbus::{DbusError, Val};

/// The longest a whole snapshot may take, in call timeouts: applications that answer each
/// call just in time must not hold the display thread for minutes.
pub const SNAPSHOT_TIMEOUTS: u32 = 4;

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
    /// The rect its scrolled ancestors show (screen pixels), if any.
    clip: Option<[i64; 4]>,
    /// Its extents and (unless it is clipped: see [`shown`]) its states, when [`shown`]
    /// read them.
    pre: Option<(Option<u64>, Option<[i64; 4]>)>,
}

/// Roles whose children show only inside their own rect (scrolled areas and lists, whose
/// rows GTK reports as showing even when scrolled away).
const CLIPS: &[&str] = &[
    "scroll pane",
    "viewport",
    "table",
    "tree table",
    "tree",
    "list",
    "list box",
];

/// Children of one parent asked about at a time, at most. Children are laid out in
/// order, so once the shown ones fill their scrolled ancestor's rect down to its bottom
/// edge, a whole chunk of hidden ones means the rest are scrolled away too and are not
/// asked about (a list of thousands of rows costs a few chunks, not a call a row); so does
/// a chunk whose last child lies below the rect ([`past`]). Until the rect is filled, a
/// hidden chunk may be rows scrolled away above the view (a table's headers are shown
/// before them), so the walk goes on.
const CHUNK: usize = 64;
/// The smallest chunk asked once the shown children seem to fill their rect: enough for
/// the rest of a table's last row, few enough that the hidden rows after it cost little.
const TAIL_CHUNK: usize = 8;

/// Whether an element at `bounds` lies wholly below `clip`: in a list laid out in reading
/// order, so do the children after it (a table scrolled sideways still has its rows below
/// one another, so only the vertical edge is trusted).
fn past(bounds: Option<[i64; 4]>, clip: Option<[i64; 4]>) -> bool {
    matches!((bounds, clip), (Some(b), Some(c)) if b[1] >= c[1] + c[3])
}

/// The children of one parent, examined a chunk at a time (see [`CHUNK`]).
struct Siblings {
    cands: Vec<Cand>,
    /// Whether each was found shown.
    keep: Vec<bool>,
    /// The next one to ask about.
    pos: usize,
    done: bool,
    /// How many were found shown, the top and bottom of the rows they cover, and the
    /// tallest of them.
    shown: usize,
    top: i64,
    bottom: i64,
    tallest: i64,
}

impl Siblings {
    fn new(first: Cand) -> Siblings {
        Siblings {
            cands: vec![first],
            keep: vec![false],
            pos: 0,
            done: false,
            shown: 0,
            top: i64::MAX,
            bottom: i64::MIN,
            tallest: 0,
        }
    }

    fn push(&mut self, c: Cand) {
        self.cands.push(c);
        self.keep.push(false);
    }

    /// The rect its scrolled ancestor shows, the same for every sibling.
    fn clip(&self) -> Option<[i64; 4]> {
        self.cands[0].clip
    }

    /// How many to ask about next. Under a scrolled ancestor, once some were shown: as
    /// many as the rows they cover say fit in the rect's height left, and a few more
    /// ([`TAIL_CHUNK`]); a guess that only sizes the chunk, since the walk goes on for as
    /// long as a chunk shows one.
    fn chunk(&self) -> usize {
        match self.clip() {
            Some(c) if self.shown > 0 && self.bottom > self.top => {
                let left = (c[1] + c[3] - self.bottom).max(0);
                let fit = usize::try_from(
                    left.saturating_mul(self.shown as i64) / (self.bottom - self.top),
                )
                .unwrap_or(CHUNK);
                fit.saturating_add(TAIL_CHUNK).min(CHUNK)
            }
            _ => CHUNK,
        }
    }

    /// Whether the shown ones reach the bottom of their rect (less than a row short of it),
    /// or have no rect to fill: hidden ones after them are then below it.
    fn filled(&self) -> bool {
        match self.clip() {
            Some(c) => self.shown > 0 && self.bottom + self.tallest > c[1] + c[3],
            None => self.shown > 0,
        }
    }
}

fn intersect(a: [i64; 4], b: [i64; 4]) -> [i64; 4] {
    let x = a[0].max(b[0]);
    let y = a[1].max(b[1]);
    let r = (a[0] + a[2]).min(b[0] + b[2]);
    let bt = (a[1] + a[3]).min(b[1] + b[3]);
    [x, y, (r - x).max(0), (bt - y).max(0)]
}

fn overlaps(a: [i64; 4], clip: [i64; 4]) -> bool {
    a[0] < clip[0] + clip[2]
        && clip[0] < a[0] + a[2]
        && a[1] < clip[1] + clip[3]
        && clip[1] < a[1] + a[3]
}

/// Extents of a `GetExtents` answer, when it has a size.
fn bounds_of(answer: &Result<Vec<Val>, DbusError>) -> Option<[i64; 4]> {
    let v = answer.as_ref().ok()?;
    let n: Vec<i64> = v.first()?.items().iter().filter_map(Val::as_i64).collect();
    (n.len() == 4 && n[2] > 0 && n[3] > 0 && n[0] > -100_000 && n[1] > -100_000)
        .then(|| [n[0], n[1], n[2], n[3]])
}

/// The candidates that are shown: state `SHOWING` (not `DEFUNCT`) and, under a scrolled
/// ancestor, inside its rect. Asked per parent a [`CHUNK`] at a time (see there).
/// Stops asking (and says it cut the tree) once `examined` reaches `budget`.
///
/// Under a scrolled ancestor only the extents are asked here: the rect decides (GTK reports
/// rows scrolled away as showing), and the states of the few inside it are asked with what
/// they are ([`read`]'s phase B), so a hidden row costs one call, not two.
fn shown(
    bus: &mut Bus,
    cands: Vec<Cand>,
    budget: usize,
    examined: &mut usize,
) -> (Vec<Cand>, bool) {
    let mut cut = false;
    // Runs of siblings (candidates come parent by parent).
    let mut groups: Vec<Siblings> = Vec::new();
    for c in cands {
        match groups.last_mut() {
            Some(g) if g.cands[0].parent == c.parent && c.parent.is_some() => g.push(c),
            _ => groups.push(Siblings::new(c)),
        }
    }
    loop {
        let mut reqs = Vec::new();
        let mut asked: Vec<(usize, usize, Option<usize>, usize)> = Vec::new();
        for (gi, g) in groups.iter_mut().enumerate() {
            if g.done {
                continue;
            }
            if *examined + asked.len() >= budget {
                g.done = true;
                cut = true;
                continue;
            }
            let chunk = g.chunk();
            for (i, c) in g.cands.iter().enumerate().skip(g.pos).take(chunk) {
                // (index of its state answer, if asked; of its extents answer)
                let state = c.clip.is_none().then(|| {
                    reqs.push(Req::new(&c.bus, &c.path, ACCESSIBLE, "GetState"));
                    reqs.len() - 1
                });
                reqs.push(Req::new(&c.bus, &c.path, COMPONENT, "GetExtents").arg(A::U(0)));
                asked.push((gi, i, state, reqs.len() - 1));
            }
            g.pos = (g.pos + chunk).min(g.cands.len());
        }
        if asked.is_empty() {
            break;
        }
        *examined += asked.len();
        let answers = bus.batch(&reqs);
        // Per group: whether this chunk showed one, and whether its last child lies below
        // the clip.
        let mut any: Vec<bool> = vec![false; groups.len()];
        let mut beyond: Vec<bool> = vec![false; groups.len()];
        for &(gi, i, state, extents) in &asked {
            let g = &mut groups[gi];
            let c = &mut g.cands[i];
            let bounds = bounds_of(&answers[extents]);
            let states = match state {
                Some(k) => match &answers[k] {
                    Ok(v) => Some(state_bits(v)),
                    Err(_) => None,
                },
                None => None,
            };
            if state.is_none() || states.is_some() {
                c.pre = Some((states, bounds));
            }
            let ok = c.depth == 0
                || match (c.clip, bounds) {
                    (Some(clip), Some(b)) => overlaps(b, clip),
                    // GTK gives a row scrolled out of a list no size.
                    (Some(_), None) => false,
                    (None, _) => states.is_some_and(is_shown),
                };
            beyond[gi] = past(bounds, c.clip);
            g.keep[i] = ok;
            if ok {
                g.shown += 1;
                if let Some(b) = bounds {
                    g.top = g.top.min(b[1]);
                    g.bottom = g.bottom.max(b[1] + b[3]);
                    g.tallest = g.tallest.max(b[3]);
                }
            }
            any[gi] |= ok;
        }
        for (gi, g) in groups.iter_mut().enumerate() {
            if g.done {
                continue;
            }
            let stop = g.shown > 0 && (beyond[gi] || (!any[gi] && g.filled()));
            if stop || g.pos >= g.cands.len() {
                g.done = true;
            }
        }
    }
    let kept = groups
        .into_iter()
        .flat_map(|g| {
            g.cands
                .into_iter()
                .zip(g.keep)
                .filter(|(_, k)| *k)
                .map(|(c, _)| c)
        })
        .collect();
    (kept, cut)
}

/// Where in phase B's batch one element's answers are.
#[derive(Clone, Copy)]
struct Asked {
    role: usize,
    /// `Properties.GetAll` of the accessible: its name and child count.
    all: usize,
    /// Asked when phase A did not read them.
    states: Option<usize>,
    extents: Option<usize>,
}

/// Where phase B's second round put one element's answers.
struct More {
    name: Name,
    /// Its `GetChildren`, unless it has none.
    children: Option<usize>,
}

/// An element's name: read already, or asked in the second round.
enum Name {
    Read(String),
    At(usize),
}

/// The `Name` and `ChildCount` of a `Properties.GetAll` answer (`a{sv}`), when it has them.
fn name_and_count(answer: &Result<Vec<Val>, DbusError>) -> (Option<String>, Option<u64>) {
    let Ok(v) = answer else {
        return (None, None);
    };
    let (mut name, mut count) = (None, None);
    for entry in v.first().map(Val::items).unwrap_or_default() {
        match entry.items() {
            [key, value] if key.as_str() == Some("Name") => {
                name = value.as_str().map(|s| cut(s, MAX_NAME_CHARS));
            }
            [key, value] if key.as_str() == Some("ChildCount") => count = value.as_u64(),
            _ => {}
        }
    }
    (name, count)
}

/// Whether an element in these states is shown.
fn is_shown(states: u64) -> bool {
    has(states, state::SHOWING) && !has(states, state::DEFUNCT)
}

/// Read the tree. `cancelled` is asked between levels. The applications walked are asked
/// directly where they can be ([`Bus::go_direct`]), until the read ends.
pub fn read(bus: &mut Bus, opts: &Opts, cancelled: &dyn Fn() -> bool) -> Result<Snapshot, String> {
    let out = read_tree(bus, opts, cancelled);
    bus.end_direct();
    out
}

fn read_tree(bus: &mut Bus, opts: &Opts, cancelled: &dyn Fn() -> bool) -> Result<Snapshot, String> {
    let timeout_ms = bus.timeout.as_millis();
    let mut apps_answer = bus.call(Req::new(REGISTRY, ROOT_PATH, ACCESSIBLE, "GetChildren"));
    // The registry can quit as it starts (its call then ends "NoReply"); the bus starts it
    // again for the next call.
    if matches!(&apps_answer, Err(DbusError::Remote { name, .. }) if name.ends_with("NoReply")) {
        apps_answer = bus.call(Req::new(REGISTRY, ROOT_PATH, ACCESSIBLE, "GetChildren"));
    }
    if let Err(e) = &apps_answer {
        return Err(format!(
            "the accessibility registry did not list the applications: {e}"
        ));
    }
    // Budget of elements examined (asked whether they are shown): hidden rows of a long
    // list cost calls too, so they are bounded as well. Candidates waiting to be examined
    // are bounded separately (memory), as are the children taken from one answer.
    let budget = opts.max_nodes.saturating_mul(8).saturating_add(256);
    let max_cands = budget.saturating_mul(4);
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
            clip: None,
            pre: None,
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

    let walked: Vec<(String, String, Option<u32>)> = cands
        .iter()
        .map(|c| (c.bus.clone(), c.path.clone(), apps[c.app].pid))
        .collect();
    bus.go_direct(&walked);
    let mut arena: Vec<Node> = Vec::new();
    let mut roots: Vec<usize> = Vec::new();
    let mut truncated = false;
    let mut examined = 0usize;
    let until = std::time::Instant::now() + bus.timeout * SNAPSHOT_TIMEOUTS;
    bus.until = Some(until);
    let mut slow = false;
    while !cands.is_empty() {
        if cancelled() {
            return Err("cancelled".into());
        }
        if std::time::Instant::now() >= until {
            slow = true;
            truncated = true;
            break;
        }
        // Phase A: which of them are shown (applications always are).
        let mut kept: Vec<Cand> = if opts.offscreen {
            std::mem::take(&mut cands)
        } else {
            let (kept, cut) = shown(bus, std::mem::take(&mut cands), budget, &mut examined);
            truncated |= cut;
            kept
        };
        let room = opts.max_nodes.saturating_sub(arena.len());
        if kept.len() > room {
            kept.truncate(room);
            truncated = true;
        }
        if kept.is_empty() {
            break;
        }
        // Phase B: what each shown element is (its states and extents too, unless phase
        // A read them already): its role, and one `GetAll` for its name and child count.
        // A leaf then costs no `GetChildren` (on GTK a `GetAll` costs less than a third
        // of `Name` and `GetChildren` together; most shown elements are leaves).
        let mut reqs = Vec::with_capacity(kept.len() * 4);
        let mut at: Vec<Asked> = Vec::with_capacity(kept.len());
        for c in &kept {
            let mut ask = |req: Req| {
                reqs.push(req);
                reqs.len() - 1
            };
            let role = ask(Req::new(&c.bus, &c.path, ACCESSIBLE, "GetRoleName"));
            let all =
                ask(Req::new(&c.bus, &c.path, PROPERTIES, "GetAll").arg(A::S(ACCESSIBLE.into())));
            let (states, extents) = match c.pre {
                Some((Some(_), _)) => (None, None),
                Some((None, _)) => (
                    Some(ask(Req::new(&c.bus, &c.path, ACCESSIBLE, "GetState"))),
                    None,
                ),
                None => (
                    Some(ask(Req::new(&c.bus, &c.path, ACCESSIBLE, "GetState"))),
                    Some(ask(
                        Req::new(&c.bus, &c.path, COMPONENT, "GetExtents").arg(A::U(0))
                    )),
                ),
            };
            at.push(Asked {
                role,
                all,
                states,
                extents,
            });
        }
        let answers = bus.batch(&reqs);
        // Phase B, second round: the children of those that have any, and the name of
        // those whose `GetAll` failed (a toolkit without it is asked as before).
        let mut reqs = Vec::new();
        let mut more: Vec<More> = Vec::with_capacity(kept.len());
        for (c, a) in kept.iter().zip(&at) {
            let (name, count) = name_and_count(&answers[a.all]);
            let name = match name {
                Some(name) => Name::Read(name),
                None => {
                    reqs.push(Req::prop(&c.bus, &c.path, ACCESSIBLE, "Name"));
                    Name::At(reqs.len() - 1)
                }
            };
            let children = (count != Some(0)).then(|| {
                reqs.push(Req::new(&c.bus, &c.path, ACCESSIBLE, "GetChildren"));
                reqs.len() - 1
            });
            more.push(More { name, children });
        }
        let second = if reqs.is_empty() {
            Vec::new()
        } else {
            bus.batch(&reqs)
        };
        let mut next: Vec<Cand> = Vec::new();
        let mut want_value: Vec<usize> = Vec::new();
        for (k, mut c) in kept.into_iter().enumerate() {
            let Asked {
                role: role_at,
                states: states_at,
                extents: extents_at,
                ..
            } = at[k];
            let Some(role) = string_of(&answers[role_at]) else {
                continue; // gone, or not answering
            };
            let name = match &more[k].name {
                Name::Read(name) => name.clone(),
                Name::At(i) => string_of(&second[*i]).unwrap_or_default(),
            };
            let asked_states =
                states_at.map(|i| answers[i].as_ref().map(|v| state_bits(v)).unwrap_or(0));
            let (states, bounds) = match c.pre.take() {
                Some((Some(states), bounds)) => (states, bounds),
                Some((None, bounds)) => (asked_states.unwrap_or(0), bounds),
                None => (
                    asked_states.unwrap_or(0),
                    extents_at.and_then(|i| bounds_of(&answers[i])),
                ),
            };
            if has(states, state::DEFUNCT) {
                continue;
            }
            // A clipped element whose states phase A did not read must be showing too.
            if c.clip.is_some() && c.depth > 0 && !opts.offscreen && !is_shown(states) {
                continue;
            }
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
            // What its children are clipped to: a scrolled area shows only its own rect.
            let clip = match (CLIPS.contains(&role.as_str()), bounds) {
                (true, Some(b)) => Some(c.clip.map_or(b, |cl| intersect(cl, b))),
                _ => c.clip,
            };
            let (kids, cut_short) = match more[k].children {
                Some(i) => refs_of(&second[i], max_cands),
                None => (Vec::new(), false),
            };
            truncated |= cut_short;
            if c.depth + 1 > MAX_DEPTH {
                truncated |= !kids.is_empty();
                continue;
            }
            for (b, p) in kids {
                if next.len() >= max_cands {
                    truncated = true;
                    break;
                }
                next.push(Cand {
                    bus: b,
                    path: p,
                    app: c.app,
                    parent: Some(index),
                    depth: c.depth + 1,
                    clip,
                    pre: None,
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
    if slow {
        skipped.push(format!(
            "the snapshot stopped after {} ms (applications answered slowly): the tree is incomplete",
            timeout_ms * u128::from(SNAPSHOT_TIMEOUTS)
        ));
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
    // An application has no SHOWING state of its own.
    let states = state_names(node.states, offscreen_checked && node.depth > 0);
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
        "states": state_names(node.states, offscreen_checked && node.depth > 0),
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
