//! After many `bash` runs, finished by every path (exit, background jobs, timeout,
//! cancel, watcher shutdown), no child of this process is left: nothing running, no
//! zombie. Its own test binary so no other test's children are in flight.

use std::sync::Arc;
use std::time::Duration;

use handnode::pool::{CallCtl, Completion};
use handnode::tools::{bash, CallContext, CallLimits, ToolConfig, ToolHost};
use handnode::wire::mcp::ToolOutput;
use serde_json::{json, Value};

const WATCHDOG: Duration = Duration::from_secs(60);

/// `(pid, state)` of every process whose parent is this one.
fn children() -> Vec<(u32, char)> {
    let me = std::process::id();
    let mut out = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
            continue;
        };
        // "pid (comm) state ppid ...": comm may hold spaces and parentheses.
        let Some(rest) = stat.rfind(')').map(|i| &stat[i + 1..]) else {
            continue;
        };
        let mut fields = rest.split_whitespace();
        let state = fields.next().and_then(|s| s.chars().next()).unwrap_or('?');
        let ppid: u32 = fields.next().and_then(|p| p.parse().ok()).unwrap_or(0);
        if ppid == me {
            out.push((pid, state));
        }
    }
    out
}

fn start(
    host: &Arc<ToolHost>,
    ctl: Arc<CallCtl>,
    args: Value,
    tx: &crossbeam_channel::Sender<ToolOutput>,
) {
    let tx = tx.clone();
    bash::start(
        args,
        CallContext {
            policy: handnode::tools::policy::ToolPolicy::owner(),
            grant: None,
            limits: CallLimits::GRANT,
            ctl,
            host: Arc::clone(host),
            principal: "test".into(),
        },
        Completion::new(move |out| tx.send(out).unwrap()),
    );
}

#[test]
fn no_children_remain_after_many_runs() {
    let host = ToolHost::new(ToolConfig::default()).unwrap();
    let (tx, rx) = crossbeam_channel::unbounded();
    let mut expected = 0;
    for i in 0..40 {
        let command = match i % 4 {
            0 => "echo $$",
            1 => "sleep 100 & sleep 100 & echo started",
            2 => "exit 7",
            _ => "(sleep 100; echo never) | cat",
        };
        start(&host, CallCtl::new(), json!({"command": command}), &tx);
        expected += 1;
    }
    for _ in 0..3 {
        start(
            &host,
            CallCtl::new(),
            json!({"command": "sleep 100 & sleep 100", "timeout_secs": 1}),
            &tx,
        );
        let ctl = CallCtl::new();
        start(
            &host,
            Arc::clone(&ctl),
            json!({"command": "sleep 100"}),
            &tx,
        );
        ctl.cancel();
        expected += 2;
    }
    let mut ended = 0;
    let mut outcomes = std::collections::HashMap::<String, usize>::new();
    while ended < expected - 10 {
        // Produced when its reply can be sent (§15): here, now.
        let r: Value = match rx.recv_timeout(WATCHDOG).expect("a run ended") {
            ToolOutput::Later(later) => match later.run() {
                ToolOutput::Json { json, .. } => serde_json::from_str(&json).unwrap(),
                other => panic!("not a result: {other:?}"),
            },
            other => panic!("not a result: {other:?}"),
        };
        let key = format!(
            "exit={} timed_out={} cancelled={}",
            r["structuredContent"]["exit_code"],
            r["structuredContent"]["timed_out"],
            r["structuredContent"]["cancelled"]
        );
        *outcomes.entry(key).or_default() += 1;
        ended += 1;
    }
    // The ten `(sleep 100; …) | cat` runs are still going: dropping the host stops the
    // watcher, which kills and reaps them.
    drop(host);
    for _ in 0..10 {
        rx.recv_timeout(WATCHDOG).expect("an aborted run reported");
    }
    assert_eq!(
        outcomes["exit=0 timed_out=false cancelled=false"], 20,
        "{outcomes:?}"
    );
    assert_eq!(
        outcomes["exit=7 timed_out=false cancelled=false"], 10,
        "{outcomes:?}"
    );
    assert_eq!(
        outcomes["exit=137 timed_out=true cancelled=false"], 3,
        "{outcomes:?}"
    );
    assert_eq!(
        outcomes["exit=137 timed_out=false cancelled=true"], 3,
        "{outcomes:?}"
    );
    assert_eq!(children(), vec![], "children of the test process remain");
}
