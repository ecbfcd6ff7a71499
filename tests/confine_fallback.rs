//! The fallback where no cgroup can be used (§16, issue 24), forced with `--containment
//! subreaper`: the daemon is a child subreaper, a run's end kills every process that
//! still carries the run's marker (a `setsid` child, a double-forked daemon), and the
//! daemon's stop kills every descendant, including one that unset the marker and left
//! the group. The grant JSON says `"containment":"subreaper"`. Its own binary: the test
//! process becomes a subreaper.

mod common;

use std::time::{Duration, Instant};

use common::*;
use serde_json::json;

fn alive(pid: u64) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|s| !s.contains(") Z "))
}

/// Whether `pid` is gone (or a zombie) within `within`; waits on its pidfd.
fn dies_within(pid: u64, within: Duration) -> bool {
    let Some(p) = rustix::process::Pid::from_raw(pid as i32) else {
        return true;
    };
    let Ok(fd) = rustix::process::pidfd_open(p, rustix::process::PidfdFlags::empty()) else {
        return true;
    };
    let poller = handnode::base::wake::Poller::new().unwrap();
    poller.add(&fd, 1, true, false).unwrap();
    !poller.wait(Some(within)).unwrap().is_empty() || !alive(pid)
}

#[test]
fn the_subreaper_kills_what_it_can_attribute_and_everything_at_stop() {
    let pod = StubPod::start();
    let mut d = TestDaemon::with("fallback", |c| {
        quiet_liveness(c);
        c.force_subreaper = true;
    });
    let (id, mut conn) = d.attached(&pod, "laptop", "owner");
    let g = d.grant(&id);
    assert_eq!(g["containment"], "subreaper", "{g}");
    assert!(g.get("cgroup_mode").is_none(), "{g}");
    let i = conn.call_tool(json!("i"), "sys_info", json!({}));
    assert_eq!(result(&i)["structuredContent"]["containment"], "subreaper");

    let pids = d.dir.join("pids");
    let script = format!(
        r#"P='{p}'
setsid sleep 300 </dev/null >/dev/null 2>&1 &
echo "s $!" >> "$P"
python3 -c 'import os, sys, time
if os.fork(): os._exit(0)
os.setsid()
if os.fork(): os._exit(0)
open(sys.argv[1], "a").write("d %d\n" % os.getpid())
time.sleep(300)' "$P" </dev/null >/dev/null 2>&1
env -u HN_JOB_ID setsid sleep 300 </dev/null >/dev/null 2>&1 &
u=$!
# Listed once it is `sleep`: until then it may still be `env` in bash's process group with
# the marker, which the cancel below would rightly kill.
while [ "$(cat /proc/$u/comm 2>/dev/null)" != sleep ]; do sleep 0.01; done
echo "u $u" >> "$P"
while [ "$(wc -l < "$P")" -lt 3 ]; do sleep 0.01; done
echo ready
sleep 300"#,
        p = pids.display()
    );
    let r = conn.call_tool(json!("s"), "bash_start", json!({"command": script}));
    let job = result(&r)["structuredContent"]["job_id"]
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
        if result(&p)["structuredContent"]["stdout"]
            .as_str()
            .is_some_and(|s| s.contains("ready"))
        {
            break;
        }
        assert!(Instant::now() < deadline, "watchdog: never ready: {p}");
    }
    let listed = std::fs::read_to_string(&pids).unwrap();
    let pid_of = |tag: &str| -> u64 {
        listed
            .lines()
            .find_map(|l| l.strip_prefix(tag)?.trim().parse().ok())
            .unwrap_or_else(|| panic!("no {tag} in {listed:?}"))
    };
    let (setsid, daemonised, unmarked) = (pid_of("s "), pid_of("d "), pid_of("u "));
    let r = conn.call_tool(
        json!("c"),
        "bash_cancel",
        json!({"job_id": job, "signal": "KILL"}),
    );
    assert_eq!(result(&r)["isError"], false, "{r}");
    for pid in [setsid, daemonised] {
        assert!(
            dies_within(pid, Duration::from_secs(1)),
            "{pid} carries the job's marker and outlived bash_cancel"
        );
    }
    // Unattributable without a cgroup: it lives until the daemon stops.
    assert!(alive(unmarked), "the unmarked process died early");
    d.stop();
    assert!(
        dies_within(unmarked, Duration::from_secs(1)),
        "{unmarked} outlived the daemon's stop"
    );
}
