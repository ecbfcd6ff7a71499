//! Containment (§16, issue 24): nothing a grant starts outlives it. A job that starts a
//! `setsid` child, a Python double-forked daemon and a renamed process without the job's
//! variables has all three dead within a second of `bash_cancel` (KILL), a call's timeout,
//! revoke, replace, the daemon's SIGTERM (real binary), and after a SIGKILLed daemon's
//! restart. The grant JSON says what contains it, and `POST /attach` may ask for less than
//! the flags allow, never more.
//!
//! These run on the cgroup path wherever the daemon gets one (CI: root, hybrid cgroups);
//! on a box where it cannot (not root, no delegation) they say so and skip, except as root,
//! where a daemon without cgroups is a failure.

mod common;
#[path = "common/realbin.rs"]
mod realbin;

use std::path::Path;
use std::time::{Duration, Instant};

use common::*;
use realbin::RealDaemon;
use serde_json::{json, Value};

/// How soon after an end every escaper must be gone.
const WITHIN: Duration = Duration::from_secs(1);

/// A bash script that starts three escapers, each writing its pid to `pids`, waits until
/// all three did, prints `ready` and stays.
fn escapers(dir: &Path) -> String {
    // A copy of sleep under another name: `ps` shows nothing of handnode or of sleep.
    let renamed = dir.join("innocent");
    if !renamed.exists() {
        std::fs::copy(
            String::from_utf8(
                std::process::Command::new("sh")
                    .args(["-c", "command -v sleep"])
                    .output()
                    .unwrap()
                    .stdout,
            )
            .unwrap()
            .trim(),
            &renamed,
        )
        .unwrap();
    }
    let pids = dir.join(format!("pids-{}", rand_tag()));
    format!(
        r#"P='{pids}'
setsid sleep 300 </dev/null >/dev/null 2>&1 &
echo $! >> "$P"
python3 -c 'import os, sys, time
if os.fork(): os._exit(0)
os.setsid()
if os.fork(): os._exit(0)
open(sys.argv[1], "a").write("%d\n" % os.getpid())
time.sleep(300)' "$P" </dev/null >/dev/null 2>&1
env -u HN_JOB_ID setsid '{renamed}' 300 </dev/null >/dev/null 2>&1 &
echo $! >> "$P"
while [ "$(wc -l < "$P")" -lt 3 ]; do sleep 0.01; done
echo "ready $(tr '\n' ' ' < "$P")"
sleep 300"#,
        pids = pids.display(),
        renamed = renamed.display()
    )
}

fn rand_tag() -> String {
    use std::sync::atomic::{AtomicU64, Ordering};
    static N: AtomicU64 = AtomicU64::new(0);
    format!(
        "{}-{}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    )
}

/// The pids a `ready …` line names.
fn ready_pids(stdout: &str) -> Option<Vec<u64>> {
    let line = stdout.lines().find(|l| l.starts_with("ready "))?;
    let pids: Vec<u64> = line[6..]
        .split_whitespace()
        .filter_map(|p| p.parse().ok())
        .collect();
    (pids.len() == 3).then_some(pids)
}

/// Start the escapers as a job; returns (job id, escaper pids), once all three run.
fn start_escapers(conn: &mut PodConn, dir: &Path) -> (String, Vec<u64>) {
    let r = conn.call_tool(json!("s"), "bash_start", json!({"command": escapers(dir)}));
    let r = result(&r);
    let job = r["structuredContent"]["job_id"]
        .as_str()
        .unwrap_or_else(|| panic!("{r}"))
        .to_string();
    let deadline = Instant::now() + WATCHDOG;
    loop {
        let p = conn.call_tool(
            json!("p"),
            "bash_poll",
            json!({"job_id": job, "wait_secs": 5}),
        );
        let s = &result(&p)["structuredContent"];
        if let Some(pids) = ready_pids(s["stdout"].as_str().unwrap_or("")) {
            for pid in &pids {
                assert!(alive(*pid), "escaper {pid} is not running");
            }
            return (job, pids);
        }
        assert!(
            Instant::now() < deadline,
            "watchdog: escapers never ready: {p}"
        );
    }
}

fn alive(pid: u64) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|s| !s.contains(") Z "))
}

/// Every pid that is still alive `within` after `since` (waits on pidfds: no polling).
fn survivors(pids: &[u64], since: Instant, within: Duration) -> Vec<u64> {
    let mut left = Vec::new();
    for &pid in pids {
        let Some(p) = rustix::process::Pid::from_raw(pid as i32) else {
            continue;
        };
        let fd = match rustix::process::pidfd_open(p, rustix::process::PidfdFlags::empty()) {
            Ok(fd) => fd,
            Err(_) => continue, // gone already
        };
        let poller = handnode::base::wake::Poller::new().unwrap();
        poller.add(&fd, 1, true, false).unwrap();
        let remaining = (since + within).saturating_duration_since(Instant::now());
        if poller.wait(Some(remaining)).unwrap().is_empty() && alive(pid) {
            left.push(pid);
        }
    }
    left
}

fn assert_all_dead(pids: &[u64], since: Instant, what: &str) {
    let left = survivors(pids, since, WITHIN);
    // Whatever survived is killed now, so a failure leaves nothing behind.
    for pid in &left {
        let _ = std::process::Command::new("kill")
            .args(["-9", &pid.to_string()])
            .status();
    }
    assert!(
        left.is_empty(),
        "{what}: {left:?} still alive {WITHIN:?} after the end"
    );
}

fn daemon(tag: &str) -> TestDaemon {
    TestDaemon::with(tag, quiet_liveness)
}

/// `bash_cancel` with `signal` ends every escaper of the job within [`WITHIN`].
fn cancel_kills_every_escaper(tag: &str, signal: &str) {
    let pod = StubPod::start();
    let d = daemon(tag);
    let (id, mut conn) = d.attached(&pod, "laptop", "owner");
    if !cgroups_here(&d.grant(&id)) {
        return;
    }
    let (job, pids) = start_escapers(&mut conn, &d.dir);
    let t0 = Instant::now();
    let r = conn.call_tool(
        json!("c"),
        "bash_cancel",
        json!({"job_id": job, "signal": signal}),
    );
    assert_eq!(result(&r)["isError"], false, "{r}");
    assert_all_dead(&pids, t0, &format!("bash_cancel {signal}"));
}

#[test]
fn bash_cancel_kill_kills_every_escaper() {
    cancel_kills_every_escaper("confcancel", "KILL");
}

#[test]
fn a_calls_timeout_kills_every_escaper() {
    let pod = StubPod::start();
    let d = daemon("conftimeout");
    let (id, mut conn) = d.attached(&pod, "laptop", "owner");
    if !cgroups_here(&d.grant(&id)) {
        return;
    }
    let script = escapers(&d.dir);
    let pids_file = script.lines().next().unwrap()[3..]
        .trim_end_matches('\'')
        .to_string();
    // Inline, with a 2 s timeout: the call answers when its command is killed.
    let r = conn.call_tool(
        json!("b"),
        "bash",
        json!({"command": script, "timeout_secs": 2}),
    );
    let t0 = Instant::now();
    let r = result(&r);
    assert_eq!(r["structuredContent"]["timed_out"], true, "{r}");
    let pids: Vec<u64> = std::fs::read_to_string(&pids_file)
        .unwrap()
        .split_whitespace()
        .map(|p| p.parse().unwrap())
        .collect();
    assert_eq!(pids.len(), 3, "{r}");
    assert_all_dead(&pids, t0, "the call's timeout");
}

#[test]
fn revoke_kills_every_escaper() {
    let pod = StubPod::start();
    let d = daemon("confrevoke");
    let (id, mut conn) = d.attached(&pod, "laptop", "owner");
    if !cgroups_here(&d.grant(&id)) {
        return;
    }
    let (_, pids) = start_escapers(&mut conn, &d.dir);
    let t0 = Instant::now();
    let (status, _) = d.call("DELETE", &format!("/attach/{id}"), None);
    assert_eq!(status, 204);
    assert_all_dead(&pids, t0, "revoke");
}

#[test]
fn replace_kills_every_escaper() {
    let pod = StubPod::start();
    let d = daemon("confreplace");
    let (old, mut conn) = d.attached(&pod, "replace", "owner");
    if !cgroups_here(&d.grant(&old)) {
        return;
    }
    let (_, pids) = start_escapers(&mut conn, &d.dir);
    let t0 = Instant::now();
    let new = d.attach(attach_body(&pod, "replace", "desktop"));
    assert_ne!(new["id"], old.as_str());
    assert_all_dead(&pids, t0, "replace");
    let (_, _replacement) = pod.next_session();
}

#[test]
fn the_grant_json_says_what_contains_it_and_limits_may_only_be_lowered() {
    let pod = StubPod::start();
    let d = TestDaemon::with("conflimits", |c| {
        quiet_liveness(c);
        c.limits.grant_memory_max = 1 << 30;
        c.limits.grant_pids_max = 1024;
        c.limits.grant_cpu_weight = 50;
    });
    let mut body = attach_body(&pod, "lim", "owner");
    body["limits"] = json!({"memory_max": 64 << 20, "pids_max": 256});
    let (id, mut conn) = d.attached_with(&pod, body.clone());
    let g = d.grant(&id);
    assert_eq!(
        g["limits"],
        json!({"memory_max": 64 << 20, "pids_max": 256, "cpu_weight": 50}),
        "{g}"
    );
    assert!(
        ["cgroup", "subreaper"].contains(&g["containment"].as_str().unwrap()),
        "{g}"
    );
    if g["containment"] == "cgroup" {
        assert!(
            ["v2", "hybrid"].contains(&g["cgroup_mode"].as_str().unwrap()),
            "{g}"
        );
    }
    // Persisted with the grant.
    let stored: Value =
        serde_json::from_slice(&std::fs::read(d.state_dir().join("grants.json")).unwrap()).unwrap();
    assert_eq!(stored["grants"][0]["limits"]["pids_max"], 256, "{stored}");
    // sys_info's detail shows them under the grant, with what it uses.
    let r = conn.call_tool(json!("i"), "sys_info", json!({"detail": true}));
    let s = &result(&r)["structuredContent"];
    assert_eq!(s["grant"]["limits"]["pids_max"], 256, "{s}");
    assert_eq!(s["containment"], g["containment"], "{s}");
    if g["containment"] == "cgroup" {
        assert!(s["grant"]["usage"]["pids"].is_u64(), "{s}");
    }
    // One more than a flag allows: 400, with the flag's name, and nothing changes.
    for (field, over) in [
        ("memory_max", json!((1u64 << 30) + 1)),
        ("pids_max", json!(1025)),
        ("cpu_weight", json!(51)),
    ] {
        let mut more = attach_body(&pod, "other", "owner");
        more["limits"] = json!({ field: over });
        let (status, v) = d.call("POST", "/attach", Some(&more));
        assert_eq!(status, 400, "{field}: {v}");
        let msg = v.to_string();
        assert!(msg.contains(field) && msg.contains("--grant-"), "{msg}");
    }
    let (_, list) = d.call("GET", "/attach", None);
    assert_eq!(list["grants"].as_array().map(Vec::len), Some(1), "{list}");
}

#[test]
fn pure_cgroup_v2_mode() {
    let pure = std::fs::read_to_string("/proc/self/mounts")
        .unwrap()
        .lines()
        .any(|l| l.split_whitespace().nth(1) == Some("/sys/fs/cgroup") && l.contains("cgroup2"));
    if !pure {
        eprintln!(
            "skip: needs a pure cgroup v2 box (/sys/fs/cgroup mounted as cgroup2); this one is hybrid or v1"
        );
        return;
    }
    let pod = StubPod::start();
    let d = daemon("confv2");
    let (id, _conn) = d.attached(&pod, "laptop", "owner");
    let g = d.grant(&id);
    if !cgroups_here(&g) {
        return;
    }
    assert_eq!(g["cgroup_mode"], "v2", "{g}");
}

/// The real binary: a grant with escapers, `attach` and start them over the pod.
fn real_grant(d: &RealDaemon, pod: &StubPod) -> (String, PodConn) {
    let body =
        json!({"runtime": pod.runtime(), "session": "real", "profile": "owner", "secret": "s"});
    let (status, g) = d.call("POST", "/attach", Some(&body));
    assert_eq!(status, 202, "{g}");
    let (_, conn) = pod.next_session();
    (g["id"].as_str().unwrap().to_string(), conn)
}

#[test]
fn sigterm_kills_every_escaper() {
    let pod = StubPod::start();
    let dir = temp_dir("confterm");
    let mut d = RealDaemon::start(&dir.join("state"), &[]);
    let (id, mut conn) = real_grant(&d, &pod);
    if !cgroups_here(&d.grant(&id).1) {
        return;
    }
    let (_, pids) = start_escapers(&mut conn, &dir);
    let t0 = Instant::now();
    assert_eq!(d.terminate(), Some(0));
    assert_all_dead(&pids, t0, "SIGTERM");
}

#[test]
fn a_sigkilled_daemons_leftover_cgroup_is_gone_after_restart() {
    let pod = StubPod::start();
    let dir = temp_dir("confleft");
    let state = dir.join("state");
    let mut d = RealDaemon::start(&state, &[]);
    let (id, mut conn) = real_grant(&d, &pod);
    if !cgroups_here(&d.grant(&id).1) {
        return;
    }
    let (_, pids) = start_escapers(&mut conn, &dir);
    // The escapers' cgroup2 group: the unified mount plus their path.
    let cg = std::fs::read_to_string(format!("/proc/{}/cgroup", pids[2])).unwrap();
    let path = cg
        .lines()
        .find_map(|l| l.strip_prefix("0::"))
        .unwrap()
        .to_string();
    let mount = std::fs::read_to_string("/proc/self/mounts")
        .unwrap()
        .lines()
        .find(|l| l.split_whitespace().nth(2) == Some("cgroup2"))
        .and_then(|l| l.split_whitespace().nth(1).map(str::to_string))
        .unwrap();
    let group = Path::new(&mount).join(path.trim_start_matches('/'));
    assert!(group.is_dir(), "{}", group.display());
    assert!(path.contains(&id), "the grant's id names its group: {path}");
    d.kill();
    // SIGKILL leaves them running: the restart must clean up.
    for pid in &pids {
        assert!(alive(*pid), "{pid} died with the daemon already");
    }
    let d = RealDaemon::start(&state, &[]);
    let t0 = Instant::now();
    assert_all_dead(&pids, t0, "restart after SIGKILL");
    let grant_group = group.parent().unwrap();
    assert!(
        !group.exists() && !grant_group.exists(),
        "{} is still there",
        group.display()
    );
    drop(d);
}

#[test]
fn bash_cancel_term_reaches_every_escaper() {
    // TERM goes to every process in the job's cgroup, and the shell's end kills the rest:
    // all within WITHIN, long before the KILL that follows 5 s later.
    cancel_kills_every_escaper("confterm2", "TERM");
}

#[test]
fn the_grants_deadline_kills_every_escaper() {
    let pod = StubPod::start();
    let d = daemon("confdeadline");
    let mut body = attach_body(&pod, "deadline", "owner");
    body["ttl_secs"] = json!(3);
    let (id, mut conn) = d.attached_with(&pod, body);
    if !cgroups_here(&d.grant(&id)) {
        return;
    }
    let (_, pids) = start_escapers(&mut conn, &d.dir);
    // The deadline closes the socket (1000) once the grant has ended.
    assert_eq!(conn.expect_close(), 1000);
    let t0 = Instant::now();
    assert_all_dead(&pids, t0, "the deadline");
    d.wait_grant(&id, "ended", |g| g["ended"] == "deadline");
}

#[test]
fn the_owners_mcp_calls_are_contained_too() {
    let pod = StubPod::start();
    let d = daemon("confowner");
    // The grant JSON says whether this box gives cgroups at all.
    let (id, _conn) = d.attached(&pod, "laptop", "observe");
    if !cgroups_here(&d.grant(&id)) {
        return;
    }
    let script = escapers(&d.dir);
    let pids_file = script.lines().next().unwrap()[3..]
        .trim_end_matches('\'')
        .to_string();
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {
        "name": "bash", "arguments": {"command": script, "timeout_secs": 2}}})
    .to_string();
    let (status, _, b) = d.raw(
        "POST",
        "/mcp",
        &[
            ("Content-Type", "application/json"),
            ("Accept", "application/json"),
        ],
        Some(body.as_bytes()),
    );
    let t0 = Instant::now();
    assert_eq!(status, 200);
    let r: Value = serde_json::from_slice(&b).unwrap();
    assert_eq!(r["result"]["structuredContent"]["timed_out"], true, "{r}");
    let pids: Vec<u64> = std::fs::read_to_string(&pids_file)
        .unwrap()
        .split_whitespace()
        .map(|p| p.parse().unwrap())
        .collect();
    assert_eq!(pids.len(), 3, "{r}");
    assert_all_dead(&pids, t0, "the owner's /mcp call's timeout");
}

#[test]
fn a_grants_limits_survive_a_restart_never_above_the_flags() {
    let pod = StubPod::start();
    let mut d = TestDaemon::with("confresume", quiet_liveness);
    let mut body = attach_body(&pod, "keep", "owner");
    body["limits"] = json!({"pids_max": 512, "cpu_weight": 20});
    let (id, _conn) = d.attached_with(&pod, body);
    d.stop();
    // The same state dir, with a lower --grant-pids-max than the grant asked for.
    let mut c = test_config(&d.dir);
    quiet_liveness(&mut c);
    c.limits.grant_pids_max = 300;
    let d2 = TestDaemon::start(c, d.dir.clone());
    let g = d2.grant(&id);
    assert_eq!(g["limits"]["pids_max"], 300, "{g}");
    assert_eq!(g["limits"]["cpu_weight"], 20, "{g}");
    drop(d2);
}
