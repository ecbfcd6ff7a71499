//! Counters for `GET /metrics` and their Prometheus text (exposition format 0.0.4).
//! Owns every metric name, its help text, and the bounds on label values: a hostile pod or
//! agent chooses close codes and tool names, so distinct values are capped, and tool names
//! are cut to a bounded label: the whole text stays small whatever the traffic.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

use crate::base::label;
use crate::containment::{self, Site};
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
                containment::count(site),
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
mod tests {
    use super::*;
    use std::collections::{HashMap, HashSet};

    /// One parsed sample: name, labels, value.
    type Sample = (String, Vec<(String, String)>, u64);

    /// A strict reader of the subset of the text format we emit: every sample belongs to a
    /// family announced by `# HELP` then `# TYPE` just before its samples, names and label
    /// names are `[a-zA-Z_][a-zA-Z0-9_]*`, label values use only the three escapes.
    fn parse(text: &str) -> Vec<Sample> {
        fn is_name(s: &str) -> bool {
            let mut cs = s.chars();
            matches!(cs.next(), Some(c) if c.is_ascii_alphabetic() || c == '_')
                && cs.all(|c| c.is_ascii_alphanumeric() || c == '_')
        }
        assert!(text.ends_with('\n'));
        let mut samples = Vec::new();
        let mut current: Option<String> = None;
        let mut typed: HashSet<String> = HashSet::new();
        let mut pending_help: Option<String> = None;
        for line in text.lines() {
            if let Some(rest) = line.strip_prefix("# HELP ") {
                let (name, help) = rest.split_once(' ').expect("HELP has text");
                assert!(is_name(name) && !help.is_empty(), "{line}");
                pending_help = Some(name.to_string());
                continue;
            }
            if let Some(rest) = line.strip_prefix("# TYPE ") {
                let (name, kind) = rest.split_once(' ').expect("TYPE has a kind");
                assert_eq!(
                    pending_help.take().as_deref(),
                    Some(name),
                    "TYPE without HELP: {line}"
                );
                assert!(kind == "counter" || kind == "gauge", "{line}");
                assert!(
                    typed.insert(name.to_string()),
                    "family announced twice: {name}"
                );
                if kind == "counter" {
                    assert!(name.ends_with("_total"), "{name}");
                }
                current = Some(name.to_string());
                continue;
            }
            assert!(
                !line.starts_with('#') && !line.is_empty(),
                "stray line: {line:?}"
            );
            let (series, value) = line.rsplit_once(' ').expect("sample has a value");
            let value: u64 = value.parse().expect("integer value");
            let (name, labels) = match series.split_once('{') {
                None => (series, Vec::new()),
                Some((name, rest)) => {
                    let body = rest.strip_suffix('}').expect("labels close");
                    let mut labels = Vec::new();
                    let mut chars = body.chars().peekable();
                    while chars.peek().is_some() {
                        let key: String = chars.by_ref().take_while(|&c| c != '=').collect();
                        assert!(is_name(&key), "{line}");
                        assert_eq!(chars.next(), Some('"'), "{line}");
                        let mut val = String::new();
                        loop {
                            match chars.next().expect("unterminated label value") {
                                '"' => break,
                                '\\' => match chars.next() {
                                    Some('\\') => val.push('\\'),
                                    Some('"') => val.push('"'),
                                    Some('n') => val.push('\n'),
                                    other => panic!("bad escape {other:?} in {line}"),
                                },
                                '\n' => panic!("raw newline"),
                                c => val.push(c),
                            }
                        }
                        labels.push((key, val));
                        match chars.next() {
                            None => break,
                            Some(',') => {}
                            Some(c) => panic!("unexpected {c:?} in {line}"),
                        }
                    }
                    (name, labels)
                }
            };
            assert_eq!(
                current.as_deref(),
                Some(name),
                "sample outside its family: {line}"
            );
            samples.push((name.to_string(), labels, value));
        }
        samples
    }

    fn value(samples: &[Sample], name: &str, labels: &[(&str, &str)]) -> Option<u64> {
        samples
            .iter()
            .find(|(n, l, _)| {
                n == name
                    && l.len() == labels.len()
                    && l.iter()
                        .zip(labels)
                        .all(|((k, v), (k2, v2))| k == k2 && v == v2)
            })
            .map(|(_, _, v)| *v)
    }

    #[test]
    fn empty_metrics_render_every_family_and_zero_states() {
        let m = Metrics::new();
        let samples = parse(&m.render::<&str>(&[], 0));
        for state in GRANT_STATES {
            assert_eq!(
                value(&samples, "handnode_grants", &[("state", state)]),
                Some(0)
            );
        }
        for name in [
            "handnode_dials_total",
            "handnode_dial_failures_total",
            "handnode_bytes_in_total",
            "handnode_bytes_out_total",
            "handnode_auth_denied_total",
            "handnode_auth_throttled_total",
        ] {
            assert_eq!(value(&samples, name, &[]), Some(0), "{name}");
        }
        let text = m.render::<&str>(&[], 0);
        for site in ["tool", "grant", "admin", "audit"] {
            assert!(value(&samples, "handnode_panics_total", &[("site", site)]).is_some());
        }
        for family in [
            "handnode_closes_total",
            "handnode_tool_calls_total",
            "handnode_grant_state",
        ] {
            assert!(text.contains(&format!("# TYPE {family} ")), "{family}");
        }
    }

    #[test]
    fn counts_are_rendered() {
        let m = Metrics::new();
        m.dial();
        m.dial();
        m.dial_failed();
        m.close(1000);
        m.close(1000);
        m.close(4001);
        m.tool_call("bash", Outcome::Ok);
        m.tool_call("bash", Outcome::ToolError);
        m.tool_call("bash", Outcome::Ok);
        m.bytes_in(10);
        m.bytes_out(7);
        m.bytes_out(1);
        m.auth_denied();
        m.throttled();
        let grants = vec![
            ("g1".to_string(), "attached"),
            ("g2".to_string(), "attached"),
            ("g3".to_string(), "ended"),
        ];
        let s = parse(&m.render(&grants, 1));
        assert_eq!(value(&s, "handnode_own_displays_running", &[]), Some(1));
        assert_eq!(
            value(&s, "handnode_grants", &[("state", "attached")]),
            Some(2)
        );
        assert_eq!(value(&s, "handnode_grants", &[("state", "ended")]), Some(1));
        assert_eq!(value(&s, "handnode_grants", &[("state", "idle")]), Some(0));
        assert_eq!(
            value(
                &s,
                "handnode_grant_state",
                &[("grant", "g3"), ("state", "ended")]
            ),
            Some(1)
        );
        assert_eq!(value(&s, "handnode_dials_total", &[]), Some(2));
        assert_eq!(value(&s, "handnode_dial_failures_total", &[]), Some(1));
        assert_eq!(
            value(&s, "handnode_closes_total", &[("code", "1000")]),
            Some(2)
        );
        assert_eq!(
            value(&s, "handnode_closes_total", &[("code", "4001")]),
            Some(1)
        );
        assert_eq!(
            value(
                &s,
                "handnode_tool_calls_total",
                &[("tool", "bash"), ("outcome", "ok")]
            ),
            Some(2)
        );
        assert_eq!(
            value(
                &s,
                "handnode_tool_calls_total",
                &[("tool", "bash"), ("outcome", "tool_error")]
            ),
            Some(1)
        );
        assert_eq!(value(&s, "handnode_bytes_in_total", &[]), Some(10));
        assert_eq!(value(&s, "handnode_bytes_out_total", &[]), Some(8));
        assert_eq!(value(&s, "handnode_auth_denied_total", &[]), Some(1));
        assert_eq!(value(&s, "handnode_auth_throttled_total", &[]), Some(1));
    }

    #[test]
    fn label_values_are_escaped() {
        assert_eq!(escape_label(r#"a\b"c"#), r#"a\\b\"c"#);
        assert_eq!(escape_label("x\ny"), "x\\ny");
        let m = Metrics::new();
        let nasty = "evil\"} 1\nhandnode_dials_total 999\\";
        m.tool_call(nasty, Outcome::Denied);
        let text = m.render(&[(nasty, "attached")], 0);
        let s = parse(&text);
        // The hostile name comes back as its label (the line feed escaped) and injects no
        // sample; quotes and backslashes survive the label and are escaped by the format.
        assert_eq!(value(&s, "handnode_dials_total", &[]), Some(0));
        let label = label::name(nasty);
        assert!(label.starts_with("evil\"} 1\\u{a}handnode"), "{label}");
        assert_eq!(
            value(
                &s,
                "handnode_tool_calls_total",
                &[("tool", &label), ("outcome", "denied")]
            ),
            Some(1)
        );
        assert_eq!(
            value(
                &s,
                "handnode_grant_state",
                &[("grant", nasty), ("state", "attached")]
            ),
            Some(1)
        );
    }

    #[test]
    fn extra_tool_labels_are_bounded() {
        let m = Metrics::new();
        for i in 0..MAX_EXTRA_TOOL_LABELS {
            m.tool_call(&format!("up_{i}"), Outcome::Ok);
        }
        // bound + 1 goes to `other`; names already labelled and known tools keep theirs.
        m.tool_call("one_too_many", Outcome::Ok);
        m.tool_call("up_0", Outcome::RpcError);
        m.tool_call("browser_click", Outcome::Ok);
        m.tool_call("sys_info", Outcome::Ok);
        let s = parse(&m.render::<&str>(&[], 0));
        let tools: HashSet<&str> = s
            .iter()
            .filter(|(n, _, _)| n == "handnode_tool_calls_total")
            .map(|(_, l, _)| l[0].1.as_str())
            .collect();
        assert_eq!(tools.len(), MAX_EXTRA_TOOL_LABELS + 3);
        assert!(!tools.contains("one_too_many"));
        assert_eq!(
            value(
                &s,
                "handnode_tool_calls_total",
                &[("tool", "other"), ("outcome", "ok")]
            ),
            Some(1)
        );
        assert_eq!(
            value(
                &s,
                "handnode_tool_calls_total",
                &[("tool", "up_0"), ("outcome", "rpc_error")]
            ),
            Some(1)
        );
        assert_eq!(
            value(
                &s,
                "handnode_tool_calls_total",
                &[("tool", "browser_click"), ("outcome", "ok")]
            ),
            Some(1)
        );
    }

    #[test]
    fn a_flood_of_distinct_long_names_keeps_the_text_small() {
        let m = Metrics::new();
        for i in 0..1_000 {
            let name = format!("{i}{}", "\u{1b}x".repeat(4096));
            m.tool_call(&name, Outcome::RpcError);
            m.tool_call(&name, Outcome::Denied);
        }
        let text = m.render::<&str>(&[], 0);
        assert!(text.len() < 64 << 10, "{} bytes", text.len());
        let s = parse(&text);
        for (name, labels, _) in &s {
            if name == "handnode_tool_calls_total" {
                let tool = &labels[0].1;
                assert!(
                    tool.len() <= label::max_len(label::MAX_NAME_BYTES),
                    "{tool}"
                );
                assert!(!tool.contains('\u{1b}'), "{tool:?}");
            }
        }
        assert_eq!(
            value(
                &s,
                "handnode_tool_calls_total",
                &[("tool", "other"), ("outcome", "denied")]
            ),
            Some(1_000 - MAX_EXTRA_TOOL_LABELS as u64)
        );
    }

    #[test]
    fn close_code_labels_are_bounded() {
        let m = Metrics::new();
        for code in 4000..4000 + MAX_CLOSE_CODE_LABELS as u16 {
            m.close(code);
        }
        m.close(1000); // bound + 1
        m.close(4000);
        let s = parse(&m.render::<&str>(&[], 0));
        let codes: HashMap<&str, u64> = s
            .iter()
            .filter(|(n, _, _)| n == "handnode_closes_total")
            .map(|(_, l, v)| (l[0].1.as_str(), *v))
            .collect();
        assert_eq!(codes.len(), MAX_CLOSE_CODE_LABELS + 1);
        assert_eq!(codes.get("other"), Some(&1));
        assert_eq!(codes.get("4000"), Some(&2));
        assert!(!codes.contains_key("1000"));
    }

    #[test]
    fn concurrent_counting_loses_nothing() {
        let m = std::sync::Arc::new(Metrics::new());
        let threads: Vec<_> = (0..4)
            .map(|_| {
                let m = std::sync::Arc::clone(&m);
                std::thread::spawn(move || {
                    for _ in 0..1000 {
                        m.dial();
                        m.tool_call("bash", Outcome::Ok);
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        let s = parse(&m.render::<&str>(&[], 0));
        assert_eq!(value(&s, "handnode_dials_total", &[]), Some(4000));
        assert_eq!(
            value(
                &s,
                "handnode_tool_calls_total",
                &[("tool", "bash"), ("outcome", "ok")]
            ),
            Some(4000)
        );
    }
}
