//! Halt (contract §22) on the real binary: 16 grants × 50 processes (plain background,
//! `setsid -f`, double-forked) are all gone and every grant socket is closed 1000 `halted`
//! after `POST /halt`; after a SIGKILL and restart the halt still holds (no dial for
//! [`QUIET`], `POST /attach` is 423); `POST /resume` brings all 16 back.

mod common;
#[path = "common/realbin.rs"]
mod realbin;

use std::path::Path;
use std::time::{Duration, Instant};

use common::*;
use realbin::RealDaemon;
use serde_json::{json, Value};
use tungstenite::Message;

/// No bwrap: the pids the sleepers record must be the host's (a pid namespace would hide them).
const FLAGS: &[(&str, &str)] = &[("--isolation", "none")];
/// Grants attached.
const GRANTS: usize = 16;
/// Sleepers each grant's bash starts.
const PER_GRANT: usize = 50;
/// How long the restarted, still-halted daemon is watched for a dial that must not come.
const QUIET: Duration = Duration::from_secs(5);

/// A bash that starts [`PER_GRANT`] sleepers, a third each of plain `&`, `setsid -f` and
/// double-forked, each writing the sleeper's own pid to `pids`, then waits.
fn sleepers(pids: &Path) -> String {
    format!(
        r#"P='{p}'
for i in $(seq 0 {last}); do
  case $((i % 3)) in
  0) sleep 600 </dev/null >/dev/null 2>&1 &
     echo $! >> "$P";;
  1) setsid -f sh -c 'echo $$ >> "$0"; exec sleep 600' "$P" </dev/null >/dev/null 2>&1;;
  2) ( (sh -c 'echo $$ >> "$0"; exec sleep 600' "$P" </dev/null >/dev/null 2>&1 &) & );;
  esac
done
wait"#,
        p = pids.display(),
        last = PER_GRANT - 1
    )
}

/// Running and not a zombie (a killed orphan waits for init or the subreaper to reap it).
fn alive(pid: u64) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|s| !s.contains(") Z "))
}

fn read_pids(files: &[std::path::PathBuf]) -> Vec<u64> {
    files
        .iter()
        .flat_map(|f| {
            std::fs::read_to_string(f)
                .unwrap_or_default()
                .lines()
                .filter_map(|l| l.trim().parse().ok())
                .collect::<Vec<u64>>()
        })
        .collect()
}

/// Read until the close frame: `(code, reason)`.
fn close_of(conn: &mut PodConn) -> (u16, String) {
    loop {
        match conn.ws.read() {
            Ok(Message::Close(f)) => {
                return f.map_or((1005, String::new()), |f| {
                    (u16::from(f.code), f.reason.to_string())
                })
            }
            Ok(_) => continue,
            Err(e) if is_interrupted(&e) => continue,
            Err(e) => panic!("watchdog or error before the close: {e}"),
        }
    }
}

#[test]
fn halt_of_sixteen_grants_by_fifty_processes_is_total_latched_and_resumable() {
    let pod = StubPod::start();
    let dir = temp_dir("halt-realbin");
    let state = dir.join("state");
    let mut d = RealDaemon::start(&state, FLAGS);
    let mut ids = Vec::new();
    let mut conns = Vec::new();
    for n in 0..GRANTS {
        let (status, g) = d.call(
            "POST",
            "/attach",
            Some(&attach_body(&pod, &format!("h{n}"), "desktop")),
        );
        assert_eq!(status, 202, "{g}");
        ids.push(g["id"].as_str().unwrap().to_string());
        conns.push(pod.next_session().1);
    }
    let first = d.wait_grant(&ids[0], "attached", |g| g["state"] == "attached");
    if !cgroups_here(&first) {
        eprintln!("SKIPPED: the daemon has no cgroups on this box: {first}");
        return;
    }
    let files: Vec<_> = (0..GRANTS).map(|n| dir.join(format!("pids-{n}"))).collect();
    for (conn, file) in conns.iter_mut().zip(&files) {
        let r = conn.call_tool(json!("s"), "bash_start", json!({"command": sleepers(file)}));
        assert!(result(&r)["structuredContent"]["job_id"].is_string(), "{r}");
    }
    let pids = poll_until(
        || read_pids(&files),
        |p| p.len() == GRANTS * PER_GRANT,
        |p| {
            format!(
                "watchdog: only {} of {} pids recorded",
                p.len(),
                GRANTS * PER_GRANT
            )
        },
    );
    for pid in &pids {
        assert!(alive(*pid), "sleeper {pid} is not running");
    }

    let t0 = Instant::now();
    let readers: Vec<_> = conns
        .into_iter()
        .map(|mut c| {
            std::thread::spawn(move || {
                let close = close_of(&mut c);
                (close, Instant::now())
            })
        })
        .collect();
    let (status, v) = d.call("POST", "/halt", Some(&json!({"reason": "realbin"})));
    assert_eq!((status, v["halted"].as_bool()), (200, Some(true)), "{v}");
    let left = poll_until(
        || {
            pids.iter()
                .copied()
                .filter(|p| alive(*p))
                .collect::<Vec<_>>()
        },
        Vec::is_empty,
        |left| {
            format!(
                "watchdog: {} sleepers outlived the halt: {left:?}",
                left.len()
            )
        },
    );
    assert!(left.is_empty());
    let mut gone = Instant::now();
    for r in readers {
        let ((code, reason), at) = r.join().unwrap();
        assert_eq!((code, reason.as_str()), (1000, "halted"));
        gone = gone.max(at);
    }
    eprintln!(
        "halt of {GRANTS} grants x {PER_GRANT} processes: {:?} (request -> every pid gone and every socket closed)",
        gone - t0
    );
    for id in &ids {
        d.wait_grant(id, "halted", |g| g["state"] == "halted");
    }
    let (_, list) = d.call("GET", "/attach", None);
    let states: Vec<&Value> = list["grants"]
        .as_array()
        .unwrap()
        .iter()
        .map(|g| &g["state"])
        .collect();
    assert_eq!(states.len(), GRANTS, "{list}");
    assert!(states.iter().all(|s| *s == "halted"), "{list}");

    d.kill();
    let d = RealDaemon::start(&state, FLAGS);
    let (_, h) = d.call("GET", "/halt", None);
    assert_eq!(h["halted"], true, "{h}");
    let (status, v) = d.call(
        "POST",
        "/attach",
        Some(&attach_body(&pod, "after", "desktop")),
    );
    assert_eq!(status, 423, "{v}");
    pod.assert_no_upgrade(QUIET);

    let (status, v) = d.call("POST", "/resume", None);
    assert_eq!((status, v["halted"].as_bool()), (200, Some(false)), "{v}");
    // Kept open: a dropped socket would send the grant back to dialing.
    let _back: Vec<PodConn> = (0..GRANTS).map(|_| pod.next_session().1).collect();
    for id in &ids {
        d.wait_grant(id, "attached", |g| g["state"] == "attached");
    }
}
