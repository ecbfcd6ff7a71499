//! Nothing leaks over many reconnects: the real binary, one grant, 500 cycles of attach →
//! (tool call) → the socket ends one of several ways → redial, with a revoke-and-recreate
//! and a stalled handshake mixed in. Afterwards the daemon's open descriptors and threads
//! (`/proc/<pid>/fd`, `/proc/<pid>/task`) are back at their baseline, and the pools that
//! grow on demand (workers, admin handlers) are within their caps.

mod common;
#[path = "common/realbin.rs"]
mod realbin;

use std::time::Instant;

use common::*;
use realbin::RealDaemon;
use serde_json::{json, Value};

const CYCLES: usize = 500;

fn create(d: &RealDaemon, pod: &StubPod) -> String {
    let (status, g) = d.call(
        "POST",
        "/attach",
        Some(&json!({"runtime": pod.runtime(), "session": "cycles", "profile": "owner", "secret": "leak-test"})),
    );
    assert_eq!(status, 202, "{g}");
    g["id"].as_str().unwrap().to_string()
}

/// The next accepted socket, initialised, with the grant attached.
fn attach(d: &RealDaemon, pod: &StubPod, id: &str) -> PodConn {
    loop {
        let up = pod.next_upgrade();
        if up.status == 101 {
            break;
        }
    }
    let mut conn = pod.next_conn();
    conn.set_read_timeout(WATCHDOG);
    conn.initialize();
    d.wait_grant(id, "attached", |g| g["state"] == "attached");
    conn
}

#[test]
fn five_hundred_attach_close_redial_cycles_leave_fds_and_threads_at_baseline() {
    let pod = StubPod::start();
    let dir = temp_dir("leaks");
    let d = RealDaemon::start(
        &dir.join("state"),
        &[
            ("--backoff-base-ms", "2"),
            ("--backoff-cap-ms", "10"),
            // Any attached time resets the backoff, so every cycle redials after ~2 ms.
            ("--backoff-reset-ms", "1"),
            ("--handshake-timeout-ms", "200"),
            ("--ping-interval-ms", "60000"),
            ("--silence-limit-ms", "120000"),
            ("--workers", "4"),
        ],
    );
    let mut id = create(&d, &pod);
    let mut conn = attach(&d, &pod, &id);
    // One call of each kind first, so whatever the daemon sets up on first use exists.
    let r = conn.call_tool(json!("warm"), "bash", json!({"command": "echo warm"}));
    assert_eq!(r["result"]["isError"], false, "{r}");
    // Pool threads (workers, admin handlers) start on demand and stay, up to their caps;
    // whether a call finds one idle depends on timing, so they are checked against the caps.
    let baseline = fds_and_threads_outside_pools(Some(d.pid));
    let rss_start = d.rss_kib();
    let started = Instant::now();
    let (mut revoked, mut stalled, mut refused) = (0, 0, 0);
    for i in 0..CYCLES {
        if i % 10 == 0 {
            let r = conn.call_tool(json!(i), "bash", json!({"command": format!("echo {i}")}));
            assert_eq!(
                r["result"]["structuredContent"]["stdout"],
                format!("{i}\n"),
                "{r}"
            );
        }
        if i % 50 == 25 {
            // Grant churn: revoke (the socket closes 1000) and create a fresh grant.
            let (status, _) = d.call("DELETE", &format!("/attach/{id}"), None);
            assert_eq!(status, 204);
            assert_eq!(conn.expect_close(), 1000);
            drop(conn);
            revoked += 1;
            id = create(&d, &pod);
            conn = attach(&d, &pod, &id);
            continue;
        }
        if i % 50 == 40 {
            pod.script().stall_handshakes = 1;
            stalled += 1;
        }
        if i % 7 == 3 {
            pod.script().refuse.push_back(503);
            refused += 1;
        }
        match i % 4 {
            0 => conn.close(1000),
            1 => conn.close(4000),
            2 => conn.reset(),
            _ => drop(conn),
        }
        conn = attach(&d, &pod, &id);
    }
    eprintln!(
        "{CYCLES} cycles ({revoked} revokes, {stalled} stalled handshakes, {refused} refusals) in {:?}",
        started.elapsed()
    );
    let end = settle(
        || fds_and_threads_outside_pools(Some(d.pid)),
        baseline,
        (0, 0),
        "500 cycles",
    );
    let workers = pool_threads(Some(d.pid), "worker-");
    let admin = pool_threads(Some(d.pid), "admin-");
    assert!(workers <= 4, "{workers} worker threads; --workers is 4");
    assert!(admin <= 4, "{admin} admin handler threads; the cap is 4");
    let rss_end = d.rss_kib();
    eprintln!(
        "daemon fds {} -> {}, threads {} -> {}, VmRSS {rss_start} KiB -> {rss_end} KiB",
        baseline.0, end.0, baseline.1, end.1
    );
    assert!(
        rss_end < rss_start + 16 * 1024,
        "the daemon grew by more than 16 MiB over {CYCLES} cycles"
    );
    let (status, list) = d.call("GET", "/attach", None);
    assert_eq!(status, 200);
    let live: Vec<&Value> = list["grants"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|g| g["state"] != "ended")
        .collect();
    assert_eq!(live.len(), 1, "{list}");
    assert_eq!(live[0]["id"], id.as_str());
    drop(conn);
    drop(d);
    let _ = std::fs::remove_dir_all(&dir);
    // Keep the pod alive until the daemon is gone, so its sockets end in order.
    drop(pod);
}
