//! `sys_info`: facts about the box, static ones gathered once and cached.

use serde_json::{json, Value};

use super::{CallContext, ToolSpec};
use crate::jobs::Completion;
use crate::mcp::ToolOutput;

pub static SPEC: ToolSpec = ToolSpec {
    name: "sys_info",
    description: "Describe this box.",
    input_schema: schema,
};

fn schema() -> Value {
    json!({"type": "object", "properties": {}})
}

/// Facts that do not change while the daemon runs (placeholder).
#[derive(Debug, Default)]
pub struct StaticFacts {}

impl StaticFacts {
    pub fn gather() -> Self {
        StaticFacts {}
    }
}

pub fn start(_args: Value, _cx: CallContext, done: Completion) {
    done.complete(ToolOutput::text("sys_info is not implemented yet"));
}
