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

/// The result object of an output that must be a `CallToolResult`.
pub fn result(out: ToolOutput) -> Value {
    match out {
        ToolOutput::Result(v) => v,
        other => panic!("expected a result, got {other:?}"),
    }
}
