//! `bash`: run a command in its own process group with caps, timeout and cancellation.
//! Also owns the process watcher that waits on children so no worker ever does.

use serde_json::{json, Value};

use super::{CallContext, ToolSpec};
use crate::jobs::Completion;
use crate::mcp::ToolOutput;

pub static SPEC: ToolSpec = ToolSpec {
    name: "bash",
    description: "Run a bash command on this box.",
    input_schema: schema,
};

fn schema() -> Value {
    json!({"type": "object", "properties": {"command": {"type": "string"}}, "required": ["command"]})
}

/// Waits on child processes for every tool call (placeholder until implemented).
#[derive(Debug)]
pub struct ProcessWatcher {}

impl ProcessWatcher {
    pub fn start() -> std::io::Result<Self> {
        Ok(ProcessWatcher {})
    }
}

pub fn start(_args: Value, _cx: CallContext, done: Completion) {
    done.complete(ToolOutput::tool_error("bash is not implemented yet"));
}
