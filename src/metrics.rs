//! Counters for `GET /metrics` and their Prometheus text (exposition format 0.0.4).
//! Owns every metric name, its help text, and the bounds on label values: a hostile pod or
//! agent chooses close codes and tool names, so distinct values are capped, and tool names
//! are cut to a bounded label: the whole text stays small whatever the traffic.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

use crate::base::label;
use crate::faults::{self, Site};
use crate::wire::mcp::Outcome;

/// Grant states, in the order `/metrics` lists them.
pub const GRANT_STATES: [&str; 6] = [
    "idle",
    "dialing",
    "attached",
    "redialing",
    "halted",
    "ended",
];
/// Distinct tool names outside the known set that get their own label; later ones are
/// counted as `other`.
pub const MAX_EXTRA_TOOL_LABELS: usize = 64;
/// Distinct close codes that get their own label; later ones are counted as `other`.
pub const MAX_CLOSE_CODE_LABELS: usize = 64;
/// The label value that absorbs everything past a bound.
pub const OTHER: &str = "other";
/// How a held call's approval ended (§10), in the order `/metrics` lists them.
pub const APPROVAL_DECISIONS: [&str; 4] = ["allow", "deny", "expired", "withdrawn"];

/// Process-wide counters. Share through an `Arc`; every method takes `&self`.
#[derive(Debug, Default)]
pub struct Metrics {
    dials: AtomicU64,
    dial_failures: AtomicU64,
    bytes_in: AtomicU64,
    bytes_out: AtomicU64,
    auth_denied: AtomicU64,
    throttled: AtomicU64,
    /// Close code (or `other`) → count.
    closes: Mutex<BTreeMap<String, u64>>,
    tool_calls: Mutex<ToolCalls>,
    jobs_running: AtomicU64,
    jobs_started: AtomicU64,
    /// Indexed like [`JOB_END_STATES`].
    jobs_ended: [AtomicU64; 2],
    approvals_requested: AtomicU64,
    /// Counts in the order of [`APPROVAL_DECISIONS`].
    approvals: [AtomicU64; 4],
    approvals_pending: AtomicU64,
    approval_waiters: AtomicU64,
}

/// The states a job ends in, in the order `/metrics` lists them.
pub const JOB_END_STATES: [&str; 2] = ["exited", "killed"];

#[derive(Debug, Default)]
struct ToolCalls {
    /// (tool label, outcome) → count.
    counts: BTreeMap<(String, &'static str), u64>,
    /// Names outside the known set that have their own label.
    extra: usize,
}

/// Tools that always get their own label: every classified one (local and browser).
fn is_known_tool(tool: &str) -> bool {
    crate::tools::policy::classify(tool).is_some()
}

impl Metrics {
    pub fn new() -> Self {
        Self::default()
    }

    /// A dial to a pod started.
    pub fn dial(&self) {
        self.dials.fetch_add(1, Ordering::Relaxed);
    }

    /// A dial failed before the socket was attached (connect, TLS, or handshake).
    pub fn dial_failed(&self) {
        self.dial_failures.fetch_add(1, Ordering::Relaxed);
    }

    /// A grant socket closed with this WebSocket close code (ours or the pod's).
    pub fn close(&self, code: u16) {
        let mut closes = self.closes.lock().unwrap_or_else(|p| p.into_inner());
        let key = code.to_string();
        let key = if closes.contains_key(&key) || closes.len() < MAX_CLOSE_CODE_LABELS {
            key
        } else {
            OTHER.to_string()
        };
        *closes.entry(key).or_insert(0) += 1;
    }

    /// A `tools/call` finished (or was refused) with this outcome.
    /// The name is cut to a [`label::name`] first, so a label's length is bounded as well
    /// as their number.
    pub fn tool_call(&self, tool: &str, outcome: Outcome) {
        let tool = label::name(tool);
        let tool = tool.as_ref();
        let mut calls = self.tool_calls.lock().unwrap_or_else(|p| p.into_inner());
        let outcome = outcome.as_str();
        let seen = calls.counts.keys().any(|(t, _)| t == tool);
        let label = if is_known_tool(tool) || seen {
            tool.to_string()
        } else if calls.extra < MAX_EXTRA_TOOL_LABELS {
            calls.extra += 1;
            tool.to_string()
        } else {
            OTHER.to_string()
        };
        *calls.counts.entry((label, outcome)).or_insert(0) += 1;
    }

    /// A call was held for approval.
    pub fn approval_requested(&self) {
        self.approvals_requested.fetch_add(1, Ordering::Relaxed);
    }

    /// A held call's approval ended this way (one of [`APPROVAL_DECISIONS`]).
    pub fn approval_ended(&self, decision: &str) {
        if let Some(i) = APPROVAL_DECISIONS.iter().position(|d| *d == decision) {
            self.approvals[i].fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Calls held for approval right now.
    pub fn set_approvals_pending(&self, n: usize) {
        self.approvals_pending.store(n as u64, Ordering::Relaxed);
    }

    /// `GET /approvals` long-polls parked right now.
    pub fn set_approval_waiters(&self, n: usize) {
        self.approval_waiters.store(n as u64, Ordering::Relaxed);
    }

    /// Bytes received on grant sockets.
    pub fn bytes_in(&self, n: u64) {
        self.bytes_in.fetch_add(n, Ordering::Relaxed);
    }

    /// Bytes sent on grant sockets.
    pub fn bytes_out(&self, n: u64) {
        self.bytes_out.fetch_add(n, Ordering::Relaxed);
    }

    /// A job started (`bash_start`, or a `bash` call past its inline limit).
    pub fn job_started(&self) {
        self.jobs_started.fetch_add(1, Ordering::Relaxed);
        self.jobs_running.fetch_add(1, Ordering::Relaxed);
    }

    /// A job this process started ended in `state` (one of [`JOB_END_STATES`]).
    pub fn job_ended(&self, state: &str) {
        let i = JOB_END_STATES.iter().position(|s| *s == state).unwrap_or(1);
        self.jobs_ended[i].fetch_add(1, Ordering::Relaxed);
        let _ = self
            .jobs_running
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| n.checked_sub(1));
    }

    /// An admin request failed authentication (`401`).
    pub fn auth_denied(&self) {
        self.auth_denied.fetch_add(1, Ordering::Relaxed);
    }

    /// An admin request was refused by the failed-auth throttle (`429`).
    pub fn throttled(&self) {
        self.throttled.fetch_add(1, Ordering::Relaxed);
    }

    /// The `/metrics` body. `grants` is `(grant id, state)` for each grant the registry
    /// lists; states are the grant JSON's `state` values. `own_displays` is how many
    /// grants' own displays (§19) run now (`tools::display::OwnDisplays::running`).
    pub fn render<S: AsRef<str>>(&self, grants: &[(S, &str)], own_displays: usize) -> String {
        let mut out = String::new();

        family(&mut out, "handnode_grants", "gauge", "Grants by state.");
        let mut by_state: BTreeMap<&str, u64> = BTreeMap::new();
        for (_, state) in grants {
            *by_state.entry(state).or_insert(0) += 1;
        }
        for state in GRANT_STATES {
            let n = by_state.remove(state).unwrap_or(0);
            sample(&mut out, "handnode_grants", &[("state", state)], n);
        }
        // A state this module does not know still shows up rather than vanishing.
        for (state, n) in by_state {
            sample(&mut out, "handnode_grants", &[("state", state)], n);
        }

        family(
            &mut out,
            "handnode_grant_state",
            "gauge",
            "The current state of each grant (1 for its state).",
        );
        for (id, state) in grants {
            sample(
                &mut out,
                "handnode_grant_state",
                &[("grant", id.as_ref()), ("state", state)],
                1,
            );
        }

        counter(
            &mut out,
            "handnode_dials_total",
            "Dials to a pod started.",
            &self.dials,
        );
        counter(
            &mut out,
            "handnode_dial_failures_total",
            "Dials that failed before the socket attached.",
            &self.dial_failures,
        );

        family(
            &mut out,
            "handnode_closes_total",
            "counter",
            "Grant sockets closed, by WebSocket close code.",
        );
        for (code, n) in self.closes.lock().unwrap_or_else(|p| p.into_inner()).iter() {
            sample(&mut out, "handnode_closes_total", &[("code", code)], *n);
        }

        family(
            &mut out,
            "handnode_tool_calls_total",
            "counter",
            "Tool calls by tool and outcome (ok, tool_error, rpc_error, denied, not_approved).",
        );
        let calls = self.tool_calls.lock().unwrap_or_else(|p| p.into_inner());
        for ((tool, outcome), n) in calls.counts.iter() {
            sample(
                &mut out,
                "handnode_tool_calls_total",
                &[("tool", tool), ("outcome", outcome)],
                *n,
            );
        }
        drop(calls);

        family(
            &mut out,
            "handnode_jobs_running",
            "gauge",
            "Long-running jobs running now.",
        );
        sample(
            &mut out,
            "handnode_jobs_running",
            &[],
            self.jobs_running.load(Ordering::Relaxed),
        );
        counter(
            &mut out,
            "handnode_jobs_started_total",
            "Long-running jobs started.",
            &self.jobs_started,
        );
        family(
            &mut out,
            "handnode_jobs_ended_total",
            "counter",
            "Long-running jobs ended, by state (exited, killed).",
        );
        for (state, n) in JOB_END_STATES.iter().zip(&self.jobs_ended) {
            sample(
                &mut out,
                "handnode_jobs_ended_total",
                &[("state", state)],
                n.load(Ordering::Relaxed),
            );
        }

        family(
            &mut out,
            "handnode_own_displays_running",
            "gauge",
            "Grants' own displays (display own) running now.",
        );
        sample(
            &mut out,
            "handnode_own_displays_running",
            &[],
            own_displays as u64,
        );

        counter(
            &mut out,
            "handnode_bytes_in_total",
            "Bytes received on grant sockets.",
            &self.bytes_in,
        );
        counter(
            &mut out,
            "handnode_bytes_out_total",
            "Bytes sent on grant sockets.",
            &self.bytes_out,
        );
        counter(
            &mut out,
            "handnode_auth_denied_total",
            "Admin API requests refused as unauthorized (401).",
            &self.auth_denied,
        );
        counter(
            &mut out,
            "handnode_auth_throttled_total",
            "Admin API requests refused by the failed-auth throttle (429).",
            &self.throttled,
        );
        counter(
            &mut out,
            "handnode_approvals_requested_total",
            "Tool calls held for approval.",
            &self.approvals_requested,
        );
        family(
            &mut out,
            "handnode_approvals_total",
            "counter",
            "Held calls by how their approval ended (allow, deny, expired, withdrawn).",
        );
        for (decision, n) in APPROVAL_DECISIONS.iter().zip(&self.approvals) {
            sample(
                &mut out,
                "handnode_approvals_total",
                &[("decision", decision)],
                n.load(Ordering::Relaxed),
            );
        }
        family(
            &mut out,
            "handnode_approvals_pending",
            "gauge",
            "Tool calls waiting for approval now.",
        );
        sample(
            &mut out,
            "handnode_approvals_pending",
            &[],
            self.approvals_pending.load(Ordering::Relaxed),
        );
        family(
            &mut out,
            "handnode_approval_waiters",
            "gauge",
            "GET /approvals long-polls held open now (their answer included).",
        );
        sample(
            &mut out,
            "handnode_approval_waiters",
            &[],
            self.approval_waiters.load(Ordering::Relaxed),
        );
        family(
            &mut out,
            "handnode_panics_total",
            "counter",
            "Panics (bugs) contained, by where: tool (the call ended with a tool error), grant (it ended internal_error), admin (the request got 500), audit (the writer restarted), halt_key (the halt key's watcher restarted). Counted for the whole process.",
        );
        for site in Site::ALL {
            sample(
                &mut out,
                "handnode_panics_total",
                &[("site", site.as_str())],
                faults::count(site),
            );
        }
        out
    }
}

fn family(out: &mut String, name: &str, kind: &str, help: &str) {
    let _ = writeln!(out, "# HELP {name} {}", escape_help(help));
    let _ = writeln!(out, "# TYPE {name} {kind}");
}

fn counter(out: &mut String, name: &str, help: &str, value: &AtomicU64) {
    family(out, name, "counter", help);
    sample(out, name, &[], value.load(Ordering::Relaxed));
}

fn sample(out: &mut String, name: &str, labels: &[(&str, &str)], value: u64) {
    out.push_str(name);
    if !labels.is_empty() {
        out.push('{');
        for (i, (k, v)) in labels.iter().enumerate() {
            if i > 0 {
                out.push(',');
            }
            let _ = write!(out, "{k}=\"{}\"", escape_label(v));
        }
        out.push('}');
    }
    let _ = writeln!(out, " {value}");
}

/// Label values escape backslash, double quote and line feed.
pub fn escape_label(v: &str) -> String {
    let mut s = String::with_capacity(v.len());
    for c in v.chars() {
        match c {
            '\\' => s.push_str("\\\\"),
            '"' => s.push_str("\\\""),
            '\n' => s.push_str("\\n"),
            c => s.push(c),
        }
    }
    s
}

/// Help text escapes backslash and line feed.
fn escape_help(v: &str) -> String {
    v.replace('\\', "\\\\").replace('\n', "\\n")
}

impl crate::tools::jobs::table::JobMeter for Metrics {
    fn job_started(&self) {
        Metrics::job_started(self);
    }

    fn job_ended(&self, state: &str) {
        Metrics::job_ended(self, state);
    }
}

#[cfg(test)]
mod tests;
