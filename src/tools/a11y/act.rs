//! The two tools' calls: `desktop_snapshot` (read the tree, keep its refs for the scope)
//! and `desktop_act` (check the ref's element is still what it was, ask the gate, perform
//! the element's own accessible action, answer its line as it is afterwards).

use serde_json::{json, Value};

use super::bus::{Bus, Req, A, ACCESSIBLE, ACTION, COMPONENT, EDITABLE_TEXT, SELECTION, TEXT};
use super::tree::{self, has, state, state_bits, Node};
use super::{bad, on_display, scope, snapshot_args, ElementApp, ElementRef, MAX_TEXT_CHARS};
use crate::pool::Completion;
use crate::tools::args;
use crate::tools::display::Gui;
use crate::tools::CallContext;
use crate::wire::dbus::{DbusError, Val};
use crate::wire::mcp::ToolOutput;

/// `desktop_act`'s actions, as the schema lists them.
pub const ACTIONS: [&str; 6] = [
    "press",
    "focus",
    "set_text",
    "toggle",
    "select",
    "scroll_to",
];

/// Accessible action names that press, in the order they are preferred.
const PRESS_NAMES: &[&str] = &["click", "press", "activate", "jump", "open"];
/// … and that toggle.
const TOGGLE_NAMES: &[&str] = &["toggle", "click", "press", "activate"];
/// `Component.ScrollTo`'s ATSPI_SCROLL_ANYWHERE.
const SCROLL_ANYWHERE: u32 = 6;

/// Whether this call may act on an element of `app`. Every grant that can call
/// Whether this grant may act on an element of `app`: under the `apps` profile only on
/// the processes of apps it started with `app_open` (by the pid the bus daemon reports for
/// the application's connection, never its self-chosen name), else
/// `<app> is not an app this grant may drive`; elsewhere anywhere
/// ([`crate::tools::apps::may_drive`]).
pub fn may_act(cx: &CallContext, app: &ElementApp) -> Result<(), String> {
    crate::tools::apps::may_drive(cx, &app.name, app.pid)
}

pub(super) fn snapshot(args: Value, cx: CallContext, done: Completion) {
    let opts = match snapshot_args(&args) {
        Ok(o) => o,
        Err(why) => return done.complete(bad(why)),
    };
    on_display(cx, done, Gui::A11ySnapshot, move |probe, cx| {
        let read = super::bus::with_bus(&probe.env, cx.host.config.a11y_call_timeout, |bus| {
            tree::read(bus, &opts, &|| cx.ctl.is_cancelled())
        });
        let snap = match read {
            Ok(s) => s,
            Err(why) => return ToolOutput::tool_error(format!("desktop_snapshot: {why}")),
        };
        render(&snap, &opts, &scope(cx), cx)
    });
}

fn render(snap: &tree::Snapshot, opts: &tree::Opts, scope: &str, cx: &CallContext) -> ToolOutput {
    let mut text = String::new();
    let mut nodes = Vec::with_capacity(snap.nodes.len());
    let mut refs = Vec::with_capacity(snap.nodes.len());
    for (i, node) in snap.nodes.iter().enumerate() {
        let reference = format!("e{}", i + 1);
        for _ in 0..node.depth {
            text.push_str("  ");
        }
        text.push_str(&tree::line(&reference, node, opts.offscreen));
        text.push('\n');
        nodes.push(tree::node_json(&reference, node, opts.offscreen));
        refs.push(node.el.clone());
    }
    if snap.nodes.is_empty() {
        text.push_str(
            "no application is on the accessibility bus: applications join it when they start \
             inside this session (Chromium needs --force-renderer-accessibility, Qt \
             QT_LINUX_ACCESSIBILITY_ALWAYS_ON=1)\n",
        );
    }
    if snap.truncated {
        text.push_str(&format!(
            "… truncated at {} elements (max_nodes {}): pass app to read one application, or a \
             larger max_nodes (at most {})\n",
            snap.nodes.len(),
            snap.max_nodes,
            super::MAX_MAX_NODES
        ));
    }
    for s in &snap.skipped {
        text.push_str(&format!("skipped: {s}\n"));
    }
    cx.host.a11y.put(scope, refs);
    let mut structured = json!({"nodes": nodes, "truncated": snap.truncated});
    if !snap.skipped.is_empty() {
        structured["skipped"] = json!(snap.skipped);
    }
    ToolOutput::Result(json!({
        "content": [{"type": "text", "text": text}],
        "structuredContent": structured,
    }))
}

/// `desktop_act`'s arguments.
struct ActArgs {
    reference: String,
    action: &'static str,
    text: Option<String>,
}

fn act_args(args: &Value) -> Result<ActArgs, String> {
    let map = args::object(args)?;
    let reference = match map.get("ref") {
        Some(Value::String(r))
            if r.len() <= 8
                && r.strip_prefix('e')
                    .is_some_and(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit())) =>
        {
            r.clone()
        }
        None | Some(Value::Null) => {
            return Err(
                "`ref` is required: an element's ref from desktop_snapshot, e.g. \"e12\"".into(),
            )
        }
        Some(_) => {
            return Err("`ref` must be an element's ref from desktop_snapshot, e.g. \"e12\"".into())
        }
    };
    let action = match map.get("action") {
        Some(Value::String(a)) => ACTIONS
            .iter()
            .find(|x| **x == a.as_str())
            .copied()
            .ok_or_else(|| format!("`action` must be one of {}", ACTIONS.join(", ")))?,
        _ => {
            return Err(format!(
                "`action` is required: one of {}",
                ACTIONS.join(", ")
            ))
        }
    };
    let text = match map.get("text") {
        None | Some(Value::Null) => None,
        Some(Value::String(t)) if t.chars().count() <= MAX_TEXT_CHARS => Some(t.clone()),
        Some(Value::String(_)) => {
            return Err(format!(
                "`text` must be at most {MAX_TEXT_CHARS} characters"
            ))
        }
        Some(_) => return Err("`text` must be a string".into()),
    };
    if action == "set_text" && text.is_none() {
        return Err("set_text needs `text`: the element's new text".into());
    }
    if action != "set_text" && text.is_some() {
        return Err(format!("`text` goes with set_text only, not {action}"));
    }
    Ok(ActArgs {
        reference,
        action,
        text,
    })
}

pub(super) fn act(args: Value, cx: CallContext, done: Completion) {
    let a = match act_args(&args) {
        Ok(a) => a,
        Err(why) => return done.complete(bad(why)),
    };
    let Some(el) = cx.host.a11y.get(&scope(&cx), &a.reference) else {
        return done.complete(bad(format!(
            "{} is not a ref of your last desktop_snapshot: take a new snapshot",
            a.reference
        )));
    };
    if let Err(why) = may_act(&cx, &el.app) {
        return done.complete(bad(why));
    }
    on_display(cx, done, Gui::A11yAct, move |probe, cx| {
        let mut bus = match Bus::open(&probe.env, cx.host.config.a11y_call_timeout) {
            Ok(b) => b,
            Err(why) => return ToolOutput::tool_error(format!("desktop_act: {why}")),
        };
        match perform(&mut bus, &a, &el) {
            Ok(note) => answer(&mut bus, &a, &el, note),
            Err(why) => ToolOutput::tool_error(why),
        }
    });
}

fn describe(el: &ElementRef) -> String {
    if el.name.is_empty() {
        el.role.clone()
    } else {
        format!(
            "{} {}",
            el.role,
            tree::quoted(&el.name, tree::LINE_NAME_CHARS)
        )
    }
}

fn stale(reference: &str, el: &ElementRef) -> String {
    format!(
        "{reference} is no longer {}: take a new snapshot",
        describe(el)
    )
}

/// The element as it is now, or `None` when it is gone; `Err` when its application does
/// not answer in time.
fn read_now(bus: &mut Bus, el: &ElementRef) -> Result<Option<(String, String, u64)>, String> {
    let answers = bus.batch(&[
        Req::new(&el.bus, &el.path, ACCESSIBLE, "GetRoleName"),
        Req::prop(&el.bus, &el.path, ACCESSIBLE, "Name"),
        Req::new(&el.bus, &el.path, ACCESSIBLE, "GetState"),
    ]);
    if answers.iter().any(|a| matches!(a, Err(DbusError::Timeout))) {
        return Err(format!(
            "its application ({}) did not answer within {} ms: it may be busy or hung",
            el.app.name,
            bus.timeout.as_millis()
        ));
    }
    let s = |a: &Result<Vec<Val>, DbusError>| -> Option<String> {
        a.as_ref()
            .ok()?
            .first()?
            .as_str()
            .map(|s| tree::cut(s, tree::MAX_NAME_CHARS))
    };
    let (Some(role), Some(name), Ok(st)) = (s(&answers[0]), s(&answers[1]), &answers[2]) else {
        return Ok(None);
    };
    let states = state_bits(st);
    Ok((!has(states, state::DEFUNCT)).then_some((role, name, states)))
}

/// The names of the element's accessible actions.
fn action_names(bus: &mut Bus, el: &ElementRef) -> Result<Vec<String>, String> {
    let v = bus
        .call(Req::new(&el.bus, &el.path, ACTION, "GetActions"))
        .map_err(|e| format!("{} has no accessible actions ({e})", describe(el)))?;
    Ok(v.first()
        .map(Val::items)
        .unwrap_or_default()
        .iter()
        .map(|a| {
            a.items()
                .first()
                .and_then(Val::as_str)
                .unwrap_or_default()
                .to_string()
        })
        .collect())
}

fn do_named(
    bus: &mut Bus,
    a: &ActArgs,
    el: &ElementRef,
    prefer: &[&str],
) -> Result<String, String> {
    let names = action_names(bus, el)?;
    let Some((index, name)) = prefer.iter().find_map(|p| {
        names
            .iter()
            .position(|n| n.eq_ignore_ascii_case(p))
            .map(|i| (i, names[i].clone()))
    }) else {
        return Err(format!(
            "{} ({}) has no {} action; its actions are: {}",
            a.reference,
            describe(el),
            a.action,
            if names.is_empty() {
                "none".into()
            } else {
                names.join(", ")
            }
        ));
    };
    let ok = bus
        .call(Req::new(&el.bus, &el.path, ACTION, "DoAction").arg(A::I(index as i32)))
        .map_err(|e| format!("{} {name} failed: {e}", a.reference))?;
    if ok.first().and_then(Val::as_bool) == Some(false) {
        return Err(format!("{} refused its {name} action", a.reference));
    }
    Ok(format!("did its {name:?} action"))
}

fn yes(answer: Result<Vec<Val>, DbusError>, what: &str, a: &ActArgs) -> Result<(), String> {
    match answer {
        Ok(v) if v.first().and_then(Val::as_bool) != Some(false) => Ok(()),
        Ok(_) => Err(format!("{} refused {what}", a.reference)),
        Err(e) => Err(format!("{} cannot {what}: {e}", a.reference)),
    }
}

/// Check the element is what the ref says, then act. Its note for the answer.
fn perform(bus: &mut Bus, a: &ActArgs, el: &ElementRef) -> Result<String, String> {
    match read_now(bus, el) {
        Ok(Some((role, name, _))) if role == el.role && name == el.name => {}
        Ok(_) => return Err(stale(&a.reference, el)),
        Err(why) => return Err(format!("{} ({}): {why}", a.reference, describe(el))),
    }
    match a.action {
        "press" => do_named(bus, a, el, PRESS_NAMES),
        "toggle" => do_named(bus, a, el, TOGGLE_NAMES),
        "focus" => {
            yes(
                bus.call(Req::new(&el.bus, &el.path, COMPONENT, "GrabFocus")),
                "focus",
                a,
            )?;
            Ok("focused".into())
        }
        "scroll_to" => {
            let scrolled = bus.call(
                Req::new(&el.bus, &el.path, COMPONENT, "ScrollTo").arg(A::U(SCROLL_ANYWHERE)),
            );
            if yes(scrolled, "scroll into view", a).is_ok() {
                return Ok("scrolled into view".into());
            }
            // GTK 3 does not scroll on request (ScrollTo answers false); a list scrolls to
            // the row that takes the focus.
            yes(
                bus.call(Req::new(&el.bus, &el.path, COMPONENT, "GrabFocus")),
                "scroll into view (its application neither scrolls on request nor takes focus there)",
                a,
            )?;
            Ok(
                "scrolled into view by focusing it (its application does not scroll on request)"
                    .into(),
            )
        }
        "set_text" => {
            let text = a.text.as_deref().unwrap_or_default();
            yes(
                bus.call(
                    Req::new(&el.bus, &el.path, EDITABLE_TEXT, "SetTextContents")
                        .arg(A::S(text.to_string())),
                ),
                "take text (it is not an editable text field)",
                a,
            )?;
            let now = bus
                .call(
                    Req::new(&el.bus, &el.path, TEXT, "GetText")
                        .arg(A::I(0))
                        .arg(A::I(-1)),
                )
                .map_err(|e| {
                    format!("{} took the text but cannot be read back: {e}", a.reference)
                })?;
            let now = now
                .first()
                .and_then(Val::as_str)
                .unwrap_or_default()
                .to_string();
            if now != text {
                return Err(format!(
                    "{} now holds {} instead of the text sent (the field changed it: a length limit, a filter or a mask)",
                    a.reference,
                    tree::quoted(&now, 200)
                ));
            }
            Ok(format!(
                "holds the text ({} characters)",
                text.chars().count()
            ))
        }
        "select" => {
            let index = bus
                .call(Req::new(&el.bus, &el.path, ACCESSIBLE, "GetIndexInParent"))
                .ok()
                .and_then(|v| v.first()?.as_i64())
                .filter(|i| *i >= 0)
                .ok_or_else(|| {
                    format!("{} has no place in a parent to be selected in", a.reference)
                })?;
            let parent = bus
                .call(Req::prop(&el.bus, &el.path, ACCESSIBLE, "Parent"))
                .ok()
                .and_then(|v| {
                    let p = v.first()?.items().to_vec();
                    match p.as_slice() {
                        [b, o] => Some((b.as_str()?.to_string(), o.as_str()?.to_string())),
                        _ => None,
                    }
                })
                .ok_or_else(|| format!("{} has no parent to be selected in", a.reference))?;
            yes(
                bus.call(
                    Req::new(&parent.0, &parent.1, SELECTION, "SelectChild")
                        .arg(A::I(index as i32)),
                ),
                "be selected (its parent is not a selection)",
                a,
            )?;
            Ok("selected".into())
        }
        other => Err(format!("unknown action {other}")),
    }
}

/// The element's line afterwards.
fn answer(bus: &mut Bus, a: &ActArgs, el: &ElementRef, note: String) -> ToolOutput {
    let now = read_now(bus, el);
    let (text, element) = match now {
        Err(why) => (
            format!("{} {note}; afterwards {why}", a.reference),
            Value::Null,
        ),
        Ok(Some((role, name, states))) => {
            let mut node = Node::alone(
                ElementRef {
                    role,
                    name,
                    ..el.clone()
                },
                states,
            );
            if a.action == "set_text" {
                node.value = a.text.as_ref().map(|t| tree::cut(t, tree::MAX_NAME_CHARS));
            }
            let mut line = tree::line(&a.reference, &node, true);
            if a.action == "toggle" {
                let on = has(states, state::CHECKED) || has(states, state::PRESSED);
                line.push_str(if on { " — now on" } else { " — now off" });
            }
            (
                format!("{} {note}; now: {line}", a.reference),
                tree::node_json(&a.reference, &node, true),
            )
        }
        Ok(None) => (
            format!(
                "{} {note}; the element is gone now (its window closed or changed)",
                a.reference
            ),
            Value::Null,
        ),
    };
    ToolOutput::Result(json!({
        "content": [{"type": "text", "text": text}],
        "structuredContent": {"ref": a.reference, "action": a.action, "element": element},
    }))
}
