//! A second start never harms the running daemon (issue 30): a daemon holds an exclusive
//! lock on its state dir for its whole life, taken before anything in the dir is read or
//! changed, so a second daemon on the same dir exits at once naming the first one's pid,
//! having recovered nothing (no job killed, no grant resumed). The admin listener is bound
//! before recovery too: with the port busy a start changes nothing either.

mod common;
#[path = "common/realbin.rs"]
mod realbin;

use std::path::Path;
use std::process::Command;

use common::*;
use realbin::{spawn_logged, wait_exit, KillOnDrop, RealDaemon, TOKEN};
use serde_json::{json, Value};

fn alive(pid: u64) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|s| !s.contains(") Z "))
}

/// `handnode serve` on `state` with `--listen listen`, run to its exit: (exit code, log).
fn second_start(state: &Path, listen: &str) -> (Option<i32>, String) {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_handnode"));
    cmd.arg("serve")
        .arg("--state-dir")
        .arg(state)
        .arg("--config-dir")
        .arg(state.join("config"))
        .args(["--listen", listen])
        .args(["--no-notify", "--no-sd-notify", "--display-backend", "none"])
        .args(["--local-socket", "none"])
        .env("HANDNODE_TOKEN", TOKEN)
        .env("RUST_LOG", "info");
    let (child, mut log) = spawn_logged(&mut cmd, usize::MAX);
    let mut child = KillOnDrop(Some(child));
    let status = wait_exit(child.0.as_mut().unwrap());
    child.0.take();
    (status.code(), log.finish())
}

/// Start `sleep 1000` as a job of a fresh owner grant; returns (grant, job, pid, its conn).
fn sleeping_job(d: &RealDaemon, pod: &StubPod) -> (String, String, u64, PodConn) {
    let body =
        json!({"runtime": pod.runtime(), "session": "lock", "profile": "owner", "secret": "s"});
    let (status, g) = d.call("POST", "/attach", Some(&body));
    assert_eq!(status, 202, "{g}");
    let (_, mut conn) = pod.next_session();
    let r = conn.call_tool(json!(1), "bash_start", json!({"command": "sleep 1000"}));
    let s = &r["result"]["structuredContent"];
    let job = s["job_id"].as_str().unwrap_or_else(|| panic!("{r}"));
    let pid = s["pid"].as_u64().unwrap();
    (
        g["id"].as_str().unwrap().to_string(),
        job.to_string(),
        pid,
        conn,
    )
}

fn record(state: &Path, grant: &str, job: &str) -> Value {
    let path = state.join("jobs").join(grant).join(format!("{job}.json"));
    serde_json::from_slice(&std::fs::read(path).unwrap()).unwrap()
}

#[test]
fn a_second_daemon_on_the_same_state_dir_exits_naming_the_first_and_touches_nothing() {
    let pod = StubPod::start();
    let dir = temp_dir("statelock");
    let state = dir.join("state");
    let mut d = RealDaemon::start(&state, &[]);
    let (grant, job, pid, mut conn) = sleeping_job(&d, &pod);
    let grants_before = std::fs::read(state.join("grants.json")).unwrap();

    let (code, log) = second_start(&state, "127.0.0.1:0");
    assert_eq!(code, Some(2), "{log}");
    assert!(
        log.contains(&format!("in use by handnode pid {}", d.pid)),
        "the refusal names the running daemon: {log}"
    );
    for never in ["listening on http://", "resumed", "jobs:", "earlier run"] {
        assert!(!log.contains(never), "{never:?} in {log}");
    }
    assert!(alive(pid), "the running daemon's job was killed:\n{log}");
    assert_eq!(record(&state, &grant, &job)["state"], "running");
    pod.assert_no_upgrade(std::time::Duration::from_millis(300));
    assert_eq!(
        std::fs::read(state.join("grants.json")).unwrap(),
        grants_before
    );
    // The first daemon's own records may still be arriving; none of the second's may.
    let audit = std::fs::read_to_string(state.join("audit.jsonl")).unwrap_or_default();
    for never in ["job_ended", "daemon_restarted", "resumed"] {
        assert!(!audit.contains(never), "{never:?} in the audit: {audit}");
    }

    // The first daemon is none the worse: its job is still its own.
    let r = conn.call_tool(json!(2), "bash_poll", json!({"job_id": job}));
    assert_eq!(r["result"]["structuredContent"]["state"], "running", "{r}");
    assert_eq!(d.terminate(), Some(0));
    poll_until(
        || alive(pid),
        |a| !a,
        |_| format!("watchdog: {pid} outlived the daemon"),
    );
    // Released with the daemon: the next start takes the dir.
    let mut again = RealDaemon::start(&state, &[]);
    assert_eq!(again.terminate(), Some(0));
}

#[test]
fn with_the_port_busy_a_start_recovers_nothing_and_never_says_listening() {
    let pod = StubPod::start();
    let dir = temp_dir("statelock-port");
    let state = dir.join("state");
    let mut d = RealDaemon::start(&state, &[]);
    let (grant, job, pid, _conn) = sleeping_job(&d, &pod);
    // A crash leaves the job running for the next start to recover...
    d.kill();
    assert!(alive(pid));
    // ...but a start that cannot listen must not do it.
    let busy = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let listen = busy.local_addr().unwrap().to_string();
    let (code, log) = second_start(&state, &listen);
    assert_ne!(code, Some(0), "{log}");
    assert!(log.contains(&format!("cannot listen on {listen}")), "{log}");
    for never in ["listening on", "resumed", "jobs:", "earlier run"] {
        assert!(!log.contains(never), "{never:?} in {log}");
    }
    assert!(
        alive(pid),
        "a start that could not listen killed a job:\n{log}"
    );
    assert_eq!(record(&state, &grant, &job)["state"], "running");
    pod.assert_no_upgrade(std::time::Duration::from_millis(300));
    drop(busy);
    // A start that can listen recovers it (and kills the leftover).
    let mut d = RealDaemon::start(&state, &[]);
    poll_until(
        || alive(pid),
        |a| !a,
        |_| format!("watchdog: {pid} survived recovery"),
    );
    assert_eq!(d.terminate(), Some(0));
}

/// `doctor` says whether a daemon runs on the state dir, where it listens and how many live
/// grants it keeps (issue 37), read from /proc without touching the daemon's lock.
#[test]
fn doctor_names_the_daemon_on_its_state_dir_where_it_listens_and_its_grants() {
    let mut d = TestDaemon::new("doctor-daemon");
    let pod = StubPod::start();
    let (_id, _conn) = d.attached(&pod, "doctor-s", "observe");
    let shown = handnode::ops::doctor::daemon_on(&d.state_dir()).detail;
    assert!(
        shown.contains(&format!("handnode pid {} runs on", std::process::id())),
        "{shown}"
    );
    assert!(shown.contains(&d.addr.to_string()), "{shown}");
    assert!(shown.contains("1 live grant(s)"), "{shown}");
    d.stop();
    let shown = handnode::ops::doctor::daemon_on(&d.state_dir()).detail;
    assert!(shown.starts_with("none runs on"), "{shown}");
}
