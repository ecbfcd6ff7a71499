//! Graphical tools: `screenshot`, `mouse`, `key` over X11 or wlroots Wayland.

use serde_json::{json, Value};

use super::{CallContext, ToolSpec};
use crate::jobs::Completion;
use crate::mcp::ToolOutput;

pub static SCREENSHOT: ToolSpec = ToolSpec {
    name: "screenshot",
    description: "Take a screenshot of a display.",
    input_schema: empty_schema,
};
pub static MOUSE: ToolSpec = ToolSpec {
    name: "mouse",
    description: "Move, click, drag or scroll the pointer.",
    input_schema: empty_schema,
};
pub static KEY: ToolSpec = ToolSpec {
    name: "key",
    description: "Type text or press key combinations.",
    input_schema: empty_schema,
};

fn empty_schema() -> Value {
    json!({"type": "object", "properties": {}})
}

fn not_yet(done: Completion) {
    done.complete(ToolOutput::tool_error(
        "no display backend yet: graphical tools are not implemented in this build",
    ));
}

pub fn screenshot(_args: Value, _cx: CallContext, done: Completion) {
    not_yet(done)
}
pub fn mouse(_args: Value, _cx: CallContext, done: Completion) {
    not_yet(done)
}
pub fn key(_args: Value, _cx: CallContext, done: Completion) {
    not_yet(done)
}
