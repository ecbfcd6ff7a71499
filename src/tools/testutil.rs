//! Helpers shared by the unit tests of the tool modules.
use std::sync::Arc;
use std::time::Duration;

use serde_json::Value;

use crate::pool::{Completion, JobCtl};
use crate::tools::policy::ToolPolicy;
use crate::tools::{CallContext, CallLimits, ToolConfig, ToolHost};
use crate::wire::mcp::ToolOutput;

/// Every blocking wait in these tests fails after this long instead of hanging.
pub const WATCHDOG: Duration = Duration::from_secs(30);

pub fn host() -> Arc<ToolHost> {
    // An empty display environment: unit tests never reach a real display.
    ToolHost::new(ToolConfig {
        display_env: Some(Default::default()),
        ..ToolConfig::default()
    })
    .unwrap()
}

pub fn cx(host: &Arc<ToolHost>, limits: CallLimits, ctl: Arc<JobCtl>) -> CallContext {
    CallContext {
        policy: ToolPolicy::owner(),
        grant: None,
        limits,
        ctl,
        host: Arc::clone(host),
        principal: "test".into(),
    }
}

/// A completion and the channel its output arrives on.
pub fn completion() -> (Completion, crossbeam_channel::Receiver<ToolOutput>) {
    let (tx, rx) = crossbeam_channel::bounded(1);
    (Completion::new(move |out| tx.send(out).unwrap()), rx)
}

/// The result object of an output that must be a `CallToolResult` (produced now if it
/// was to be produced later, parsed if it was already encoded), with the streams of its
/// text block also in `structuredContent.stdout`/`stderr`, sliced by their ranges as a
/// structured client would (on the wire they are in the text only, §15).
pub fn result(out: ToolOutput) -> Value {
    let mut v = match out {
        ToolOutput::Result(v) => v,
        ToolOutput::Later(later) => return result(later.run()),
        ToolOutput::Encoded { json, .. } => serde_json::from_str(&json).unwrap(),
        ToolOutput::Json { json, .. } => serde_json::from_str(&json).unwrap(),
        other => panic!("expected a result, got {other:?}"),
    };
    let text = v["content"][0]["text"].as_str().unwrap_or("").to_string();
    if let Some(sc) = v
        .get_mut("structuredContent")
        .and_then(Value::as_object_mut)
    {
        for name in ["stdout", "stderr"] {
            let range = sc.get(&format!("{name}_range")).and_then(Value::as_array);
            if let Some([a, b]) = range.map(Vec::as_slice) {
                let (a, b) = (a.as_u64().unwrap() as usize, b.as_u64().unwrap() as usize);
                sc.insert(name.to_string(), Value::String(text[a..b].to_string()));
            }
        }
    }
    v
}
