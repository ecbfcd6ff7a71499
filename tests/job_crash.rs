//! Jobs and the real binary's life (issue 14): `kill -9` of the daemon mid-job, then a
//! restart on the same state dir, leaves no process of the job behind (neither a group
//! whose leader still runs nor one whose leader exited after the crash) and the resumed
//! grant reads the job's output with `killed` / `daemon_restarted`. SIGTERM kills every
//! job's process group before the daemon exits.

mod common;
#[path = "common/realbin.rs"]
mod realbin;

use std::path::{Path, PathBuf};

use common::*;
use realbin::RealDaemon;
use serde_json::{json, Value};

fn mkfifo(dir: &Path, name: &str) -> PathBuf {
    let path = dir.join(name);
    assert!(std::process::Command::new("mkfifo")
        .arg(&path)
        .status()
        .unwrap()
        .success());
    path
}

/// Open the FIFO for writing (blocks until its reader opens it), under the watchdog.
fn release(path: &Path) {
    let path = path.to_path_buf();
    let (tx, rx) = crossbeam_channel::bounded(1);
    std::thread::spawn(move || tx.send(std::fs::write(path, b"go\n").is_ok()));
    assert!(rx
        .recv_timeout(WATCHDOG)
        .expect("watchdog: nobody read the FIFO"));
}

fn alive(pid: u64) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|s| !s.contains(") Z "))
}

fn assert_dies(pid: u64) {
    poll_until(
        || alive(pid),
        |a| !a,
        |_| format!("watchdog: process {pid} is still alive"),
    );
}

fn attach(d: &RealDaemon, pod: &StubPod) -> String {
    let body =
        json!({"runtime": pod.runtime(), "session": "crash", "profile": "owner", "secret": "s"});
    let (status, g) = d.call("POST", "/attach", Some(&body));
    assert_eq!(status, 202, "{g}");
    g["id"].as_str().unwrap().to_string()
}

/// Start a job that runs a grandchild and prints its pid first; returns (job, leader,
/// grandchild).
fn start(conn: &mut PodConn, n: u64, script: &str) -> (String, u64, u64) {
    let r = conn.call_tool(json!(n), "bash_start", json!({ "command": script }));
    let s = &r["result"]["structuredContent"];
    let job = s["job_id"]
        .as_str()
        .unwrap_or_else(|| panic!("{r}"))
        .to_string();
    let leader = s["pid"].as_u64().unwrap();
    let r = conn.call_tool(
        json!(n + 100),
        "bash_poll",
        json!({"job_id": job, "wait_secs": 10}),
    );
    let out = r["result"]["structuredContent"]["stdout"].as_str().unwrap();
    let grandchild = out.trim().parse().unwrap_or_else(|_| panic!("{r}"));
    (job, leader, grandchild)
}

fn poll(conn: &mut PodConn, id: u64, job: &str) -> Value {
    conn.call_tool(json!(id), "bash_poll", json!({ "job_id": job }))["result"].clone()
}

#[test]
fn kill_9_mid_job_then_restart_leaves_no_process_and_says_daemon_restarted() {
    let pod = StubPod::start();
    let dir = temp_dir("jobcrash");
    let state = dir.join("state");
    let gate = mkfifo(&dir, "gate");
    let mut d = RealDaemon::start(&state, &[]);
    let id = attach(&d, &pod);
    let (_, mut conn) = pod.next_session();
    // One job whose leader stays, one whose leader exits after the crash (released
    // below), leaving its grandchild alone in the group.
    let (running, leader_a, child_a) = start(&mut conn, 1, "sleep 1000 & echo $!; sleep 1000");
    let (orphaned, leader_b, child_b) = start(
        &mut conn,
        2,
        &format!("sleep 1000 & echo $!; read -r l < '{}'", gate.display()),
    );
    d.kill();
    release(&gate);
    assert_dies(leader_b);
    for pid in [leader_a, child_a, child_b] {
        assert!(
            alive(pid),
            "{pid} outlived the daemon: the restart must kill it"
        );
    }

    let mut d = RealDaemon::start(&state, &[]);
    for pid in [leader_a, child_a, child_b] {
        assert_dies(pid);
    }
    let (_, mut conn) = pod.next_session();
    d.wait_grant(&id, "attached", |g| g["state"] == "attached");
    for (n, (job, child)) in [(&running, child_a), (&orphaned, child_b)]
        .iter()
        .enumerate()
    {
        let r = poll(&mut conn, 10 + n as u64, job);
        let s = &r["structuredContent"];
        assert_eq!(s["state"], "killed", "{r}");
        assert_eq!(s["reason"], "daemon_restarted", "{r}");
        assert_eq!(
            s["stdout"],
            format!("{child}\n"),
            "the output is still readable"
        );
        let record: Value = serde_json::from_slice(
            &std::fs::read(state.join("jobs").join(&id).join(format!("{job}.json"))).unwrap(),
        )
        .unwrap();
        assert_eq!(record["reason"], "daemon_restarted");
    }
    // Each killed job's end is in the audit once, said by the run that killed it (the
    // audit is written through once the daemon has stopped).
    assert_eq!(d.terminate(), Some(0));
    let audit = std::fs::read_to_string(state.join("audit.jsonl")).unwrap();
    for job in [&running, &orphaned] {
        let ends: Vec<Value> = audit
            .lines()
            .filter_map(|l| serde_json::from_str::<Value>(l).ok())
            .filter(|v| v["kind"] == "job_ended" && v["job_id"] == job.as_str())
            .collect();
        assert_eq!(ends.len(), 1, "{job}: {audit}");
        assert_eq!(
            (ends[0]["state"].as_str(), ends[0]["reason"].as_str()),
            (Some("killed"), Some("daemon_restarted"))
        );
        assert_eq!(ends[0]["grant_id"], id.as_str());
    }
}

#[test]
fn sigterm_kills_every_jobs_process_group() {
    let pod = StubPod::start();
    let dir = temp_dir("jobterm");
    let state = dir.join("state");
    let mut d = RealDaemon::start(&state, &[]);
    let id = attach(&d, &pod);
    let (_, mut conn) = pod.next_session();
    let (job, leader, child) = start(&mut conn, 1, "sleep 1000 & echo $!; sleep 1000");
    assert_eq!(d.terminate(), Some(0));
    assert_dies(leader);
    assert_dies(child);
    let record: Value = serde_json::from_slice(
        &std::fs::read(state.join("jobs").join(&id).join(format!("{job}.json"))).unwrap(),
    )
    .unwrap();
    assert_eq!(
        (record["state"].as_str(), record["reason"].as_str()),
        (Some("killed"), Some("daemon_stopped"))
    );
    let audit = std::fs::read_to_string(state.join("audit.jsonl")).unwrap();
    assert!(audit.contains("\"job_ended\""), "{audit}");
}
