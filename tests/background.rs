//! A call's background processes live as long as the grant (contract §25): `cmd &`,
//! `setsid -f cmd` and `nohup cmd &` keep running after the `bash` call returned, the
//! reply counts them, and they die with the grant (revoke, halt). The call's timeout and
//! its cancel still kill everything it started. A background process that holds the
//! call's stdout does not hold the call past the grace (`--background-grace-ms`), and
//! what it writes later is read and dropped, so it is never killed by a closed pipe.
//!
//! Each process is found by the name `exec -a` gives it, so the walled grant (its own PID
//! namespace: `$!` there is not the box's pid) is checked the same way as the owner's.

mod common;

use std::time::{Duration, Instant};

use common::*;
use serde_json::{json, Value};

/// How soon after an end every background process must be gone.
const WITHIN: Duration = Duration::from_secs(1);

fn text_of(reply: &Value) -> &str {
    reply["result"]["content"][0]["text"].as_str().unwrap_or("")
}

fn tag(what: &str) -> String {
    use std::sync::atomic::{AtomicU64, Ordering};
    static N: AtomicU64 = AtomicU64::new(0);
    format!(
        "hn-bg-{what}-{}-{}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    )
}

/// Live (not zombie) pids whose argv[0] is exactly `name`.
fn named(name: &str) -> Vec<u32> {
    let mut pids = Vec::new();
    for entry in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        let cmdline = std::fs::read(entry.path().join("cmdline")).unwrap_or_default();
        let zombie =
            std::fs::read_to_string(entry.path().join("stat")).map_or(true, |s| s.contains(") Z "));
        if !zombie && cmdline.split(|b| *b == 0).next() == Some(name.as_bytes()) {
            pids.push(pid);
        }
    }
    pids
}

/// Every process named in `names` is gone within [`WITHIN`] of `since` (killed here if
/// not, so a failure leaves nothing behind).
fn assert_gone(names: &[String], since: Instant, what: &str) {
    let deadline = since + WITHIN;
    loop {
        let left: Vec<(String, Vec<u32>)> = names
            .iter()
            .map(|n| (n.clone(), named(n)))
            .filter(|(_, p)| !p.is_empty())
            .collect();
        if left.is_empty() {
            return;
        }
        if Instant::now() > deadline {
            for pid in left.iter().flat_map(|(_, p)| p) {
                let _ = std::process::Command::new("kill")
                    .args(["-9", &pid.to_string()])
                    .status();
            }
            panic!("{what}: {left:?} still alive {WITHIN:?} after the end");
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// One live process named `name`, waiting (bounded) for it to exec.
fn one_named(name: &str) -> u32 {
    poll_until(
        || named(name),
        |p| p.len() == 1,
        |p| format!("watchdog: not exactly one {name}: {p:?}"),
    )[0]
}

/// `cmd &`, `setsid -f cmd` and `nohup cmd &`, each a `sleep 300` renamed `<prefix>-…`.
fn three_ways(prefix: &str) -> (String, [String; 3]) {
    let names = [
        format!("{prefix}-amp"),
        format!("{prefix}-setsid"),
        format!("{prefix}-nohup"),
    ];
    let script = format!(
        "(exec -a {a} sleep 300) & echo $!\n\
         setsid -f bash -c 'exec -a {s} sleep 300'\n\
         nohup bash -c 'exec -a {n} sleep 300' & echo $!\n\
         echo done",
        a = names[0],
        s = names[1],
        n = names[2]
    );
    (script, names)
}

fn kept_running(profile: &str) {
    let pod = StubPod::start();
    let d = TestDaemon::with(&format!("bg-{profile}"), quiet_liveness);
    let (id, mut conn) = d.attached(&pod, "laptop", profile);
    if !cgroups_here(&d.grant(&id)) {
        return;
    }
    let (script, names) = three_ways(&tag(profile));
    let r = conn.call_tool(json!("b"), "bash", json!({"command": script}));
    let r = with_streams(r);
    let s = &result(&r)["structuredContent"];
    assert_eq!(r["result"]["isError"], false, "{r}");
    assert!(s["stdout"].as_str().unwrap().ends_with("done\n"), "{r}");
    assert_eq!(s["background_processes"], 3, "{r}");
    assert!(
        text_of(&r)
            .contains("[3 processes kept running in the background; they end with the grant"),
        "{r}"
    );
    // Alive after the call returned, in the grant's cgroup (the owner's `$!` is the box's
    // pid; a walled grant's is its own namespace's).
    let pids: Vec<u32> = names.iter().map(|n| one_named(n)).collect();
    if profile == "owner" {
        let said: Vec<u32> = s["stdout"]
            .as_str()
            .unwrap()
            .lines()
            .filter_map(|l| l.parse().ok())
            .collect();
        assert_eq!(said, [pids[0], pids[2]], "{r}");
    }
    for pid in &pids {
        let cg = std::fs::read_to_string(format!("/proc/{pid}/cgroup")).unwrap();
        assert!(cg.contains(&format!("/grants/{id}/")), "{pid}: {cg}");
    }
    // A later call does not end them either.
    let again = conn.call_tool(json!("t"), "bash", json!({"command": "true"}));
    assert_eq!(again["result"]["isError"], false, "{again}");
    assert!(names.iter().all(|n| named(n).len() == 1));
    let t0 = Instant::now();
    let (status, _) = d.call("DELETE", &format!("/attach/{id}"), None);
    assert_eq!(status, 204);
    assert_gone(&names, t0, "revoke");
}

#[test]
fn background_processes_of_an_owner_grant_outlive_the_call_and_die_with_the_revoke() {
    kept_running("owner");
}

#[test]
fn background_processes_of_a_walled_grant_outlive_the_call_and_die_with_the_revoke() {
    kept_running("desktop");
}

#[test]
fn a_halt_kills_what_a_call_left_running() {
    let pod = StubPod::start();
    let d = TestDaemon::with("bg-halt", quiet_liveness);
    let (id, mut conn) = d.attached(&pod, "laptop", "desktop");
    if !cgroups_here(&d.grant(&id)) {
        return;
    }
    let (script, names) = three_ways(&tag("halt"));
    let r = conn.call_tool(json!("b"), "bash", json!({"command": script}));
    assert_eq!(result(&r)["structuredContent"]["background_processes"], 3);
    for n in &names {
        one_named(n);
    }
    let t0 = Instant::now();
    let (status, v) = d.call("POST", "/halt", Some(&json!({"reason": "bg"})));
    assert!((200..300).contains(&status), "{status} {v}");
    assert_gone(&names, t0, "halt");
    let (status, v) = d.call("POST", "/resume", None);
    assert!((200..300).contains(&status), "{status} {v}");
}

#[test]
fn a_timeout_or_a_cancel_still_kills_the_background() {
    let pod = StubPod::start();
    let d = TestDaemon::with("bg-end", quiet_liveness);
    let (id, mut conn) = d.attached(&pod, "laptop", "owner");
    if !cgroups_here(&d.grant(&id)) {
        return;
    }
    // The timeout.
    let (script, names) = three_ways(&tag("timeout"));
    let r = conn.call_tool(
        json!("t"),
        "bash",
        json!({"command": format!("{script}\nsleep 100"), "timeout_secs": 1}),
    );
    let t0 = Instant::now();
    assert_eq!(result(&r)["structuredContent"]["timed_out"], true, "{r}");
    assert!(result(&r)["structuredContent"]
        .get("background_processes")
        .is_none());
    assert_gone(&names, t0, "the call's timeout");
    // The cancel: no reply, everything the call started gone.
    let (script, names) = three_ways(&tag("cancel"));
    conn.send(
        &json!({"jsonrpc": "2.0", "id": "c", "method": "tools/call", "params": {
        "name": "bash", "arguments": {"command": format!("{script}\nsleep 100")}}}),
    );
    for n in &names {
        one_named(n);
    }
    conn.send(
        &json!({"jsonrpc": "2.0", "method": "notifications/cancelled",
                      "params": {"requestId": "c", "reason": "user"}}),
    );
    let t0 = Instant::now();
    assert_gone(&names, t0, "the call's cancel");
    assert_eq!(conn.ping(json!("after"))["result"], json!({}));
}

#[test]
fn a_writer_holding_stdout_does_not_hold_the_call_and_is_not_cut_off() {
    let pod = StubPod::start();
    let d = TestDaemon::with("bg-writer", |c| {
        quiet_liveness(c);
        c.timing.background_grace = Duration::from_millis(50);
    });
    let (id, mut conn) = d.attached(&pod, "laptop", "owner");
    if !cgroups_here(&d.grant(&id)) {
        return;
    }
    let name = tag("writer");
    let count = d.dir.join(format!("{name}.count"));
    let fifo = d.dir.join(format!("{name}.fifo"));
    // A bash that prints forever without forking (so it is one process): `read -t` on a
    // FIFO nobody writes paces it. bash dies of SIGPIPE at its next print if its pipe is
    // closed. It counts its prints in a file.
    let script = format!(
        "mkfifo '{fifo}'\n\
         (exec -a {name} bash -c 'exec 9<>\"$1\"; n=0; while :; do n=$((n+1)); \
         echo tick $n; echo $n >\"$2\"; read -t 0.02 -u 9; done' _ '{fifo}' '{count}') &\n\
         echo started",
        fifo = fifo.display(),
        count = count.display()
    );
    // The watchdog of the pod connection bounds the wait: a call that waited for the
    // writer's end would never answer.
    let r = with_streams(conn.call_tool(json!("w"), "bash", json!({"command": script})));
    let s = &result(&r)["structuredContent"];
    assert_eq!(s["background_processes"], 1, "{r}");
    assert!(
        s["stdout"].as_str().unwrap().starts_with("started\n"),
        "{r}"
    );
    assert!(
        text_of(&r).contains("from now on is dropped"),
        "the reply says the output still held goes nowhere: {r}"
    );
    let pid = one_named(&name);
    let read = || {
        std::fs::read_to_string(&count)
            .ok()
            .and_then(|t| t.trim().parse::<u64>().ok())
            .unwrap_or(0)
    };
    // Fifty more prints after the call returned, and still alive: its stdout is drained.
    let after = read();
    poll_until(
        read,
        |n| *n >= after + 50,
        |n| format!("watchdog: the writer stopped printing at {n} (since {after})"),
    );
    assert_eq!(named(&name), [pid], "the writer died on its pipe");
    let t0 = Instant::now();
    let (status, _) = d.call("DELETE", &format!("/attach/{id}"), None);
    assert_eq!(status, 204);
    assert_gone(&[name], t0, "revoke");
}
