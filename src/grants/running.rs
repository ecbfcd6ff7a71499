//! What runs now (§22): every tool call in flight, over every grant and the owner's `/mcp`,
//! so the person who lent the box can list them (`GET /calls`) and stop one
//! (`DELETE /calls/{id}`). A call is tracked from the moment its transport starts it (so a
//! call held for approval is listed) until its output is delivered; running jobs are not
//! kept here but read from the job table when listed.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use serde_json::{json, Value};

use crate::pool::{CallCtl, Completion};
use crate::wire::mcp::ToolOutput;

/// What a lender's stop tells the agent (contract §22).
pub const STOPPED_BY_LENDER: &str = "stopped by the person who lent the box";

/// Arguments kept for the list, serialized, at most; bigger ones are listed by size only.
/// The calls in flight are bounded per connection (`--max-in-flight`), so this bounds the
/// registry too.
pub const MAX_LISTED_ARGS_BYTES: usize = 64 * 1024;

/// A call id in the list: `c` and a number, distinct from a job id.
const CALL_PREFIX: char = 'c';

struct Entry {
    grant: Option<String>,
    tool: String,
    arguments: Value,
    started_at: SystemTime,
    started: Instant,
    ctl: Arc<CallCtl>,
}

/// Every call in flight in this daemon.
#[derive(Default)]
pub struct Running {
    next: AtomicU64,
    calls: Mutex<BTreeMap<u64, Entry>>,
}

impl std::fmt::Debug for Running {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Running").finish_non_exhaustive()
    }
}

/// One listed call, before the caller adds its state.
#[derive(Debug, Clone)]
pub struct Listed {
    pub id: String,
    pub grant: Option<String>,
    pub tool: String,
    pub arguments: Value,
    pub started_at: SystemTime,
    pub elapsed_ms: u64,
    pub ctl: Arc<CallCtl>,
}

impl Listed {
    /// The row of `GET /calls` (`state` is the caller's: the approvals hub knows which wait).
    pub fn to_json(&self, state: &str) -> Value {
        let unix = self
            .started_at
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_secs());
        json!({
            "id": self.id,
            "grant": self.grant,
            "tool": self.tool,
            "arguments": self.arguments,
            "state": state,
            "started_at": crate::base::timefmt::rfc3339(unix),
            "elapsed_ms": self.elapsed_ms,
        })
    }
}

impl Running {
    pub fn new() -> Arc<Running> {
        Arc::new(Running::default())
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeMap<u64, Entry>> {
        self.calls.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Track a call until `done` is delivered; returns the completion to hand on. A call
    /// the lender stopped is answered [`STOPPED_BY_LENDER`] whatever its tool produced.
    pub fn track(
        self: &Arc<Self>,
        grant: Option<&str>,
        tool: &str,
        arguments: &Value,
        ctl: &Arc<CallCtl>,
        done: Completion,
    ) -> Completion {
        let n = self.next.fetch_add(1, Ordering::Relaxed) + 1;
        // Counted, not written: a `file_put` chunk is a megabyte of arguments.
        let size = crate::base::text::json_len(arguments);
        let arguments = if size <= MAX_LISTED_ARGS_BYTES {
            arguments.clone()
        } else {
            json!(format!("[{size} bytes of arguments, not listed]"))
        };
        self.lock().insert(
            n,
            Entry {
                grant: grant.map(String::from),
                tool: tool.to_string(),
                arguments,
                started_at: SystemTime::now(),
                started: Instant::now(),
                ctl: Arc::clone(ctl),
            },
        );
        let me = Arc::clone(self);
        let ctl = Arc::clone(ctl);
        Completion::new(move |output| {
            me.lock().remove(&n);
            let output = match ctl.stop_reason() {
                Some(reason) => ToolOutput::tool_error(reason),
                None => output,
            };
            done.complete(output);
        })
    }

    /// Every call in flight, oldest first.
    pub fn list(&self) -> Vec<Listed> {
        let now = Instant::now();
        self.lock()
            .iter()
            .map(|(n, e)| Listed {
                id: format!("{CALL_PREFIX}{n}"),
                grant: e.grant.clone(),
                tool: e.tool.clone(),
                arguments: e.arguments.clone(),
                started_at: e.started_at,
                elapsed_ms: now.saturating_duration_since(e.started).as_millis() as u64,
                ctl: Arc::clone(&e.ctl),
            })
            .collect()
    }

    /// The call `id` (as listed), if it is still in flight.
    pub fn find(&self, id: &str) -> Option<Arc<CallCtl>> {
        let n: u64 = id.strip_prefix(CALL_PREFIX)?.parse().ok()?;
        self.lock().get(&n).map(|e| Arc::clone(&e.ctl))
    }

    /// Whether `id` has the shape of a call id (else it may name a job).
    pub fn is_call_id(id: &str) -> bool {
        id.strip_prefix(CALL_PREFIX)
            .is_some_and(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::mpsc;

    fn tracked(
        running: &Arc<Running>,
        args: Value,
    ) -> (Arc<CallCtl>, Completion, mpsc::Receiver<ToolOutput>) {
        let (tx, rx) = mpsc::channel();
        let ctl = CallCtl::new();
        let done = running.track(
            Some("g1"),
            "bash",
            &args,
            &ctl,
            Completion::new(move |o| {
                let _ = tx.send(o);
            }),
        );
        (ctl, done, rx)
    }

    #[test]
    fn a_call_is_listed_until_its_output_is_delivered() {
        let running = Running::new();
        let (_, done, rx) = tracked(&running, json!({"command": "sleep 9"}));
        let list = running.list();
        assert_eq!(list.len(), 1);
        assert_eq!(list[0].tool, "bash");
        assert!(Running::is_call_id(&list[0].id), "{}", list[0].id);
        let row = list[0].to_json("running");
        assert_eq!(row["arguments"]["command"], "sleep 9");
        assert_eq!(row["grant"], "g1");
        assert!(running.find(&list[0].id).is_some());
        done.complete(ToolOutput::text("ok"));
        assert!(running.list().is_empty());
        assert!(running.find(&list[0].id).is_none());
        assert_eq!(rx.recv().unwrap().outcome(), crate::wire::mcp::Outcome::Ok);
    }

    #[test]
    fn a_stopped_call_is_answered_with_the_lenders_reason() {
        let running = Running::new();
        let (ctl, done, rx) = tracked(&running, json!({}));
        ctl.stop(STOPPED_BY_LENDER.into());
        assert!(ctl.is_cancelled());
        done.complete(ToolOutput::text("killed by signal 9"));
        let out = rx.recv().unwrap();
        assert_eq!(out.outcome(), crate::wire::mcp::Outcome::ToolError);
        assert!(format!("{out:?}").contains(STOPPED_BY_LENDER), "{out:?}");
    }

    #[test]
    fn arguments_past_the_bound_are_listed_by_size() {
        let running = Running::new();
        let at = "x".repeat(MAX_LISTED_ARGS_BYTES - 2); // the quotes make it the bound
        let (_, _a, _) = tracked(&running, json!(at));
        let (_, _b, _) = tracked(&running, json!(format!("{at}x")));
        let list = running.list();
        assert_eq!(list[0].arguments, json!(at));
        assert_eq!(
            list[1].arguments,
            json!(format!(
                "[{} bytes of arguments, not listed]",
                MAX_LISTED_ARGS_BYTES + 1
            ))
        );
    }

    #[test]
    fn ids_that_are_not_calls_are_told_apart() {
        assert!(Running::is_call_id("c12"));
        for id in ["c", "cx", "12", "j12", "c1 ", ""] {
            assert!(!Running::is_call_id(id), "{id:?}");
        }
    }
}
