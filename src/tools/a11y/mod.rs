//! The screen as text (contract §17): `desktop_snapshot` reads the desktop's accessibility
//! tree (AT-SPI2, on the session's accessibility bus) into a compact, capped tree of
//! elements with refs; `desktop_act` performs an element's own accessible action by ref.
//! Owns the tools' descriptors, the per-grant refs (kept until the grant's next snapshot)
//! and the gate an `apps` grant's check plugs into ([`act::may_act`]).

pub mod act;
pub mod bus;
pub mod tree;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use serde_json::{json, Value};

use super::args::{self, Naming};
use super::display::Gui;
use super::{CallContext, Needs, Tool};
use crate::pool::Completion;
use crate::profiles::{Class, Profile};
use crate::wire::mcp::ToolOutput;

/// `max_nodes`: default and largest.
pub const DEFAULT_MAX_NODES: usize = 400;
pub const MAX_MAX_NODES: usize = 4000;
/// Longest `app` name (characters) and `text` of `set_text` (characters).
pub const MAX_APP_CHARS: usize = 256;
pub const MAX_TEXT_CHARS: usize = 100_000;

pub static SNAPSHOT: Tool = Tool {
    name: "desktop_snapshot",
    class: Class::Observe,
    class_reason: "reads the desktop's accessibility tree and changes nothing",
    description: "The desktop's windows as text, from its accessibility tree (AT-SPI2): one \
        line per element, indented by depth, such as `[e12] push button \"Save\" (focused)`. \
        structuredContent has each element's ref, role, name, value, states, bounds (x,y,w,h \
        in screenshot pixels) and application. `app` limits it to one application (by name); \
        only shown elements unless offscreen is true; at most max_nodes (default 400, at most \
        4000), and it says when it was cut. Refs (e12) are for desktop_act and last until your \
        next desktop_snapshot. Toolkits that need it: start Chromium with \
        --force-renderer-accessibility, Qt apps with QT_LINUX_ACCESSIBILITY_ALWAYS_ON=1.",
    input_schema: snapshot_schema,
    output_schema: Some(snapshot_output_schema),
    start: act::snapshot,
    inline: None,
    needs: Needs::Display(Gui::A11ySnapshot),
    reach: crate::tools::Reach::Nothing,
    changes_screen: false,
    profiles: &[
        Profile::Owner,
        Profile::Desktop,
        Profile::Observe,
        Profile::Apps,
    ],
};

pub static ACT: Tool = Tool {
    name: "desktop_act",
    class: Class::Shell,
    class_reason: "presses and types into any application on the desktop, a terminal included, \
        so it reaches a shell",
    description: "Act on an element of your last desktop_snapshot by its ref, through the \
        element's own accessible action (no pointer moves, so a window over it does not \
        matter): press (its click/press/activate action), focus, set_text (replace its text \
        with `text`, then read it back), toggle (and report the new state), select (in its \
        list or tab row), scroll_to (scroll it into view). Answers the element's line as it is \
        afterwards. A ref whose element changed or went away is an error: take a new snapshot.",
    input_schema: act_schema,
    output_schema: Some(act_output_schema),
    start: act::act,
    inline: None,
    needs: Needs::Display(Gui::A11yAct),
    reach: crate::tools::Reach::Nothing,
    changes_screen: true,
    // Under `apps` it is `act`: `act::may_act` holds it to the apps that grant started
    // (`tools::apps::may_drive`; `ToolPolicy::class_of` makes it `act` there).
    profiles: &[Profile::Owner, Profile::Desktop, Profile::Apps],
};

fn snapshot_schema() -> Value {
    json!({
        "type": "object",
        "properties": {
            "app": {"type": "string", "minLength": 1, "maxLength": MAX_APP_CHARS,
                    "description": "Only this application (its accessible name, e.g. \"zenity\"; case does not matter)."},
            "max_nodes": {"type": "integer", "minimum": 1, "maximum": MAX_MAX_NODES,
                          "default": DEFAULT_MAX_NODES, "description": "Most elements listed."},
            "offscreen": {"type": "boolean", "default": false,
                          "description": "Also list elements that are not shown (scrolled away, hidden tabs)."}
        }
    })
}

fn snapshot_output_schema() -> Value {
    json!({
        "type": "object",
        "properties": {
            "nodes": {"type": "array", "items": node_schema()},
            "truncated": {"type": "boolean"},
            "skipped": {"type": "array", "items": {"type": "string"},
                        "description": "Applications left out because they did not answer in time."}
        },
        "required": ["nodes", "truncated"]
    })
}

fn node_schema() -> Value {
    json!({
        "type": "object",
        "properties": {
            "ref": {"type": "string"},
            "role": {"type": "string"},
            "name": {"type": "string"},
            "value": {"type": "string"},
            "states": {"type": "array", "items": {"type": "string"}},
            "bounds": {"type": "object", "properties": {
                "x": {"type": "integer"}, "y": {"type": "integer"},
                "w": {"type": "integer"}, "h": {"type": "integer"}
            }, "required": ["x", "y", "w", "h"]},
            "app": {"type": "string"},
            "pid": {"type": "integer"},
            "depth": {"type": "integer", "minimum": 0}
        },
        "required": ["ref", "role", "name", "states", "app", "depth"]
    })
}

fn act_schema() -> Value {
    json!({
        "type": "object",
        "properties": {
            "ref": {"type": "string", "pattern": "^e[0-9]+$", "description": "An element's ref from your last desktop_snapshot, e.g. \"e12\"."},
            "action": {"type": "string", "enum": act::ACTIONS},
            "text": {"type": "string", "maxLength": MAX_TEXT_CHARS, "description": "set_text: the element's new text."}
        },
        "required": ["ref", "action"]
    })
}

fn act_output_schema() -> Value {
    json!({
        "type": "object",
        "properties": {
            "ref": {"type": "string"},
            "action": {"type": "string"},
            "element": {"oneOf": [node_schema(), {"type": "null"}],
                        "description": "The element as it is afterwards; null when it went away (its window closed)."}
        },
        "required": ["ref", "action", "element"]
    })
}

/// How to get applications onto the accessibility bus, for `doctor` and the tools' texts.
pub const TURN_ON: &str = "applications join the accessibility bus when they start inside \
    this session; GTK does so by itself, Chromium needs --force-renderer-accessibility, Qt \
    needs QT_LINUX_ACCESSIBILITY_ALWAYS_ON=1 in its environment";

/// Whether the accessibility bus answers, for `doctor`: where it is and how many
/// applications are on it, or why not.
pub fn bus_status(
    env: &super::display::DisplayEnv,
    timeout: std::time::Duration,
) -> Result<String, String> {
    let mut bus = bus::Bus::open(env, timeout)?;
    let apps = bus
        .call(bus::Req::new(
            bus::REGISTRY,
            bus::ROOT_PATH,
            bus::ACCESSIBLE,
            "GetChildren",
        ))
        .map_err(|e| {
            format!("the accessibility bus is up, but its registry did not answer: {e}")
        })?;
    let n = apps.first().map_or(0, |a| a.items().len());
    Ok(format!("up; {n} application(s) on it"))
}

/// The application an element belongs to: its accessible name and its process (from the
/// accessibility bus's `GetConnectionUnixProcessID`), which the `apps` profile's check
/// compares with the applications a grant may drive.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ElementApp {
    pub name: String,
    pub pid: Option<u32>,
}

/// What a ref remembers of its element: where it is on the bus, what it was, and whose.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ElementRef {
    pub bus: String,
    pub path: String,
    pub role: String,
    pub name: String,
    pub app: ElementApp,
}

/// Each scope's (a grant's, or the owner's `/mcp`) refs of its last snapshot. Bounded: at
/// most `MAX_MAX_NODES` refs per scope, one set per scope, emptied at the grant's end.
#[derive(Debug, Default)]
pub struct Refs {
    by_scope: Mutex<HashMap<String, Arc<Vec<ElementRef>>>>,
}

impl Refs {
    fn put(&self, scope: &str, refs: Vec<ElementRef>) {
        let mut map = self.by_scope.lock().unwrap_or_else(|e| e.into_inner());
        map.insert(scope.to_string(), Arc::new(refs));
    }

    /// The element of `reference` (`e12`) in the scope's last snapshot.
    fn get(&self, scope: &str, reference: &str) -> Option<ElementRef> {
        let index: usize = reference.strip_prefix('e')?.parse().ok()?;
        let map = self.by_scope.lock().unwrap_or_else(|e| e.into_inner());
        map.get(scope)?.get(index.checked_sub(1)?).cloned()
    }

    /// Forget a scope's refs (its grant ended).
    pub fn end_scope(&self, scope: &str) {
        let mut map = self.by_scope.lock().unwrap_or_else(|e| e.into_inner());
        map.remove(scope);
    }

    /// How many scopes hold refs (tests).
    pub fn scopes(&self) -> usize {
        self.by_scope
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .len()
    }
}

/// The scope of a call's refs: its grant, or the owner's `/mcp`.
fn scope(cx: &CallContext) -> String {
    cx.grant
        .as_ref()
        .map_or_else(|| "owner".to_string(), |g| g.id.clone())
}

/// A snapshot's arguments.
fn snapshot_args(args: &Value) -> Result<tree::Opts, String> {
    let map = args::object(args)?;
    let max_nodes = args::int(
        map,
        "max_nodes",
        1..=MAX_MAX_NODES as i64,
        Naming::Code,
        Some("elements listed"),
    )?
    .map_or(DEFAULT_MAX_NODES, |n| n as usize);
    let app = match map.get("app") {
        None | Some(Value::Null) => None,
        Some(Value::String(s)) if !s.is_empty() && s.chars().count() <= MAX_APP_CHARS => {
            Some(s.clone())
        }
        Some(_) => {
            return Err(format!(
                "`app` must be an application's name: a string of 1..={MAX_APP_CHARS} characters"
            ))
        }
    };
    let offscreen = match map.get("offscreen") {
        None | Some(Value::Null) => false,
        Some(Value::Bool(b)) => *b,
        Some(_) => return Err("`offscreen` must be true or false".into()),
    };
    Ok(tree::Opts {
        app,
        max_nodes,
        offscreen,
    })
}

fn bad(why: String) -> ToolOutput {
    ToolOutput::tool_error(why)
}

#[cfg(test)]
mod tests;

/// Run `work` on the display thread (accessibility calls go in order with clicks and keys).
fn on_display(
    cx: CallContext,
    done: Completion,
    gui: Gui,
    work: impl FnOnce(&super::display::Probe, &CallContext) -> ToolOutput + Send + 'static,
) {
    super::display::dispatch(cx, done, gui, work);
}
