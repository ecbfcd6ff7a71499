//! STUB (replaced by the `store` branch): audit.jsonl writer.
use std::path::Path;

use crate::config::{Limits, Timing};
use crate::error::Error;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LifecycleEvent {
    Created,
    Renewed,
    Replaced,
    Revoked,
    Expired,
    Ended,
}

#[derive(Clone, Debug)]
pub enum Record {
    Lifecycle {
        event: LifecycleEvent,
        grant_id: String,
        principal: String,
        previous_principal: Option<String>,
        profile: String,
        runtime: String,
        session: String,
        ttl_secs: Option<u64>,
        reason: Option<String>,
    },
    ToolCall {
        grant_id: Option<String>,
        principal: String,
        session: Option<String>,
        tool: String,
        outcome: &'static str,
        duration_ms: u64,
        args: Option<serde_json::Value>,
    },
}

#[derive(Clone, Debug)]
pub struct Audit {}

impl Audit {
    pub fn start(_state_dir: &Path, _timing: &Timing, _limits: &Limits) -> Result<Audit, Error> {
        Ok(Audit {})
    }
    pub fn record(&self, _rec: Record) {}
    pub fn record_durable(&self, _rec: Record) -> Result<(), Error> {
        Ok(())
    }
}
