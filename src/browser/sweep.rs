//! Finding and killing every process of one throwaway browser, and removing what a crashed
//! daemon left behind.
//!
//! Killing the process group of the server we spawned is not enough: Playwright starts
//! chromium detached (a session of its own), and chromium's crash handlers double-fork
//! into sessions of their own. So each browser's processes are marked: the server runs
//! with `HANDNODE_BROWSER_INSTANCE=<its dir>` in its environment, which node, chromium and the
//! crash handlers inherit. A sweep kills every live process carrying that entry and every
//! process in a session one of them belongs to (chromium's zygote children overwrite
//! their environment with their titles, but stay in chromium's session), never our own
//! session. Each victim is signalled through a pidfd opened and re-checked after the scan,
//! so a recycled pid is never hit, and the sweep waits on those pidfds for the deaths
//! instead of sleeping.

use crate::cgroup::subreaper::Settle;
use std::collections::{HashMap, HashSet};
use std::os::fd::OwnedFd;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::time::{Duration, Instant};

use rustix::process::{Pid, PidfdFlags, Signal};

/// The environment variable that marks a browser's processes; its value is the browser's
/// own directory.
pub const TAG_VAR: &str = "HANDNODE_BROWSER_INSTANCE";

/// Scans of `/proc` per sweep at most: each kills what the last one found, so only a
/// process forking faster than we kill could need more.
const MAX_ROUNDS: usize = 16;

/// `HANDNODE_BROWSER_INSTANCE=<dir>` as it appears in `/proc/<pid>/environ`.
pub fn tag_entry(dir: &Path) -> Vec<u8> {
    let mut tag = format!("{TAG_VAR}=").into_bytes();
    tag.extend_from_slice(dir.as_os_str().as_bytes());
    tag
}

/// What the sweep reads of a process from `/proc/<pid>/stat`.
struct Stat {
    live: bool,
    session: i32,
    /// Clock ticks after boot: with the pid, names the process across a recycled pid.
    start_time: u64,
}

fn read_stat(pid: i32) -> Option<Stat> {
    parse_stat(&std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?)
}

fn parse_stat(text: &str) -> Option<Stat> {
    // The command name may hold spaces and parentheses: fields start after the last ')'.
    let rest = &text[text.rfind(')')? + 1..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let state = fields.first()?;
    Some(Stat {
        live: !matches!(*state, "Z" | "X" | "x"),
        session: fields.get(3)?.parse().ok()?,
        start_time: fields.get(19)?.parse().ok()?,
    })
}

fn tagged(pid: i32, tag: &[u8], settle: &Settle) -> bool {
    settle
        .environ(pid)
        .is_some_and(|env| env.split(|b| *b == 0).any(|entry| entry == tag))
}

/// Live processes that carry `tag` or sit in one of `sessions` (grown by the sessions of
/// tagged processes), with their start times.
fn scan(tag: &[u8], sessions: &mut HashSet<i32>, spare: &HashSet<i32>) -> HashMap<i32, u64> {
    let me = rustix::process::getpid().as_raw_nonzero().get();
    let settle = Settle::now();
    let mut stats = Vec::new();
    if let Ok(dir) = std::fs::read_dir("/proc") {
        for entry in dir.flatten() {
            let Some(pid) = entry
                .file_name()
                .to_str()
                .and_then(|s| s.parse::<i32>().ok())
            else {
                continue;
            };
            if pid == me {
                continue;
            }
            let Some(stat) = read_stat(pid) else {
                continue;
            };
            if !stat.live {
                continue;
            }
            if tagged(pid, tag, &settle) && !spare.contains(&stat.session) && stat.session > 1 {
                sessions.insert(stat.session);
            }
            stats.push((pid, stat));
        }
    }
    stats
        .into_iter()
        .filter(|(pid, stat)| sessions.contains(&stat.session) || tagged(*pid, tag, &settle))
        .map(|(pid, stat)| (pid, stat.start_time))
        .collect()
}

/// The sessions a sweep never kills whole: ours (the server is spawned in it), init's, and
/// session 0, which is what a process started by an init that never called `setsid` is in
/// (CI runs so). Our session is read from `/proc/self/stat`, not `getsid`: rustix's
/// `getsid` returns a `Pid`, which cannot be 0, and panics on that session.
fn spared_sessions() -> HashSet<i32> {
    let mut spare = HashSet::from([0, 1]);
    if let Some(own) = std::fs::read_to_string("/proc/self/stat")
        .ok()
        .and_then(|text| parse_stat(&text))
    {
        spare.insert(own.session);
    }
    spare
}

/// SIGKILL every process of the browser whose directory is `dir` and wait (at most
/// `patience` in all) until they are dead. Returns how many were killed.
pub fn kill_browser_processes(dir: &Path, patience: Duration) -> usize {
    let tag = tag_entry(dir);
    let spare = spared_sessions();
    let deadline = Instant::now() + patience;
    let mut sessions = HashSet::new();
    let mut killed = 0;
    for _ in 0..MAX_ROUNDS {
        let victims = scan(&tag, &mut sessions, &spare);
        if victims.is_empty() {
            break;
        }
        let mut pidfds = Vec::new();
        for (pid, start_time) in victims {
            let Some(raw) = Pid::from_raw(pid) else {
                continue;
            };
            let Ok(fd) = rustix::process::pidfd_open(raw, PidfdFlags::empty()) else {
                continue;
            };
            // Still the process we scanned (not a recycled pid)?
            if read_stat(pid).is_none_or(|s| s.start_time != start_time || !s.live) {
                continue;
            }
            if rustix::process::pidfd_send_signal(&fd, Signal::KILL).is_ok() {
                killed += 1;
                pidfds.push(fd);
            }
        }
        wait_dead(&pidfds, deadline);
        if Instant::now() >= deadline {
            break;
        }
    }
    killed
}

/// Wait until every pidfd reports its process dead, or the deadline.
fn wait_dead(pidfds: &[OwnedFd], deadline: Instant) {
    let mut pending: Vec<&OwnedFd> = pidfds.iter().collect();
    while !pending.is_empty() {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return;
        }
        let mut fds: Vec<rustix::event::PollFd> = pending
            .iter()
            .map(|fd| rustix::event::PollFd::new(*fd, rustix::event::PollFlags::IN))
            .collect();
        let ts = rustix::event::Timespec {
            tv_sec: left.as_secs() as i64,
            tv_nsec: left.subsec_nanos() as _,
        };
        match rustix::event::poll(&mut fds, Some(&ts)) {
            Ok(_) | Err(rustix::io::Errno::INTR) => {}
            Err(_) => return,
        }
        let done: Vec<bool> = fds.iter().map(|f| !f.revents().is_empty()).collect();
        let mut i = 0;
        pending.retain(|_| {
            let keep = !done[i];
            i += 1;
            keep
        });
    }
}

/// Name of the file in each browser directory that says which daemon made it.
pub const OWNER_FILE: &str = ".handnode-owner";

/// `"<pid> <start time>"` of this process, written into each browser directory.
pub fn owner_stamp() -> String {
    let pid = rustix::process::getpid().as_raw_nonzero().get();
    let start = read_stat(pid).map_or(0, |s| s.start_time);
    format!("{pid} {start}")
}

/// Whether the daemon named by an owner stamp still runs.
fn owner_alive(stamp: &str) -> bool {
    let mut parts = stamp.split_whitespace();
    let (Some(Ok(pid)), Some(Ok(start))) = (
        parts.next().map(str::parse::<i32>),
        parts.next().map(str::parse::<u64>),
    ) else {
        return false;
    };
    read_stat(pid).is_some_and(|s| s.live && s.start_time == start)
}

/// Remove the browser directories under `base` whose daemon is gone (it crashed or was
/// killed), killing any process still marked with them. Directories of a live daemon,
/// and anything without an owner file, are left alone. Returns how many were removed.
pub fn remove_orphans(base: &Path, patience: Duration) -> usize {
    let Ok(entries) = std::fs::read_dir(base) else {
        return 0;
    };
    let mut removed = 0;
    for entry in entries.flatten() {
        let dir = entry.path();
        let Ok(stamp) = std::fs::read_to_string(dir.join(OWNER_FILE)) else {
            continue;
        };
        if owner_alive(&stamp) {
            continue;
        }
        let killed = kill_browser_processes(&dir, patience);
        match std::fs::remove_dir_all(&dir) {
            Ok(()) => {
                removed += 1;
                log::info!(
                    "removed {} left by a daemon that is gone ({killed} processes killed)",
                    dir.display()
                );
            }
            Err(e) => log::warn!("cannot remove {}: {e}", dir.display()),
        }
    }
    removed
}

/// The live processes of the browser whose directory is `dir` (the marked ones and
/// their sessions' other members), for tests, diagnostics and the benchmark.
pub fn processes(dir: &Path) -> Vec<i32> {
    let tag = tag_entry(dir);
    let mut sessions = HashSet::new();
    let spare = spared_sessions();
    scan(&tag, &mut sessions, &spare).into_keys().collect()
}

/// Whether any live process is still marked with `dir`.
pub fn any_alive(dir: &Path) -> bool {
    !processes(dir).is_empty()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::process::Command;

    /// Longest a sweep may wait for its victims to die.
    const WATCHDOG: Duration = Duration::from_secs(10);

    #[test]
    fn a_tagged_process_in_a_session_of_its_own_is_killed_with_its_session() {
        let dir = crate::base::testutil::TempDir::new("sweep");
        // setsid puts the shell in a session of its own; the untagged child in the same
        // session must die too (as chromium's zygote children do).
        let mut leader = Command::new("setsid")
            .arg("bash")
            .arg("-c")
            .arg("env -u HANDNODE_BROWSER_INSTANCE sleep 300 & echo ready; exec sleep 300")
            .env(TAG_VAR, &dir.0)
            .stdout(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        // Both sleepers exist once the shell says so.
        let mut line = String::new();
        let stdout = leader.stdout.take().unwrap();
        std::io::BufRead::read_line(&mut std::io::BufReader::new(stdout), &mut line).unwrap();
        assert_eq!(line, "ready\n");
        assert!(any_alive(&dir.0), "the marked process is not found");
        let killed = kill_browser_processes(&dir.0, WATCHDOG);
        assert!(killed >= 1, "killed {killed}");
        assert!(!any_alive(&dir.0), "a marked process survived the sweep");
        let _ = leader.wait();
    }

    #[test]
    fn stat_lines_parse_past_odd_names_and_session_zero_is_spared() {
        // Session 0 is what CI's processes are in (an init that never called setsid).
        let line = "4242 (a) (b c)) S 1 4242 0 0 -1 4194560 0 0 0 0 0 0 0 0 20 0 1 0 987 0 0";
        let stat = parse_stat(line).expect("parses");
        assert_eq!((stat.live, stat.session, stat.start_time), (true, 0, 987));
        assert!(
            parse_stat("4242 (zombie) Z 1 4242 7 0 -1 0 0 0 0 0 0 0 0 0 20 0 1 0 5")
                .is_some_and(|s| !s.live)
        );
        assert!(parse_stat("4242 (cut short) S 1").is_none());
        let spare = spared_sessions();
        assert!(spare.contains(&0) && spare.contains(&1));
        let own = read_stat(rustix::process::getpid().as_raw_nonzero().get()).unwrap();
        assert!(spare.contains(&own.session), "our own session is spared");
    }

    #[test]
    fn an_unmarked_process_is_spared() {
        let dir = crate::base::testutil::TempDir::new("sweep-spare");
        let other = crate::base::testutil::TempDir::new("sweep-other");
        let mut bystander = Command::new("sleep")
            .arg("300")
            .env(TAG_VAR, &other.0)
            .spawn()
            .unwrap();
        assert_eq!(kill_browser_processes(&dir.0, WATCHDOG), 0);
        assert!(bystander.try_wait().unwrap().is_none(), "a bystander died");
        let _ = bystander.kill();
        let _ = bystander.wait();
    }

    #[test]
    fn orphans_of_a_dead_daemon_go_and_a_live_daemons_stay() {
        let base = crate::base::testutil::TempDir::new("sweep-orphans");
        let dead = base.0.join("dead");
        let live = base.0.join("live");
        let foreign = base.0.join("foreign");
        for d in [&dead, &live, &foreign] {
            std::fs::create_dir(d).unwrap();
        }
        std::fs::write(dead.join(OWNER_FILE), "999999999 1").unwrap();
        std::fs::write(live.join(OWNER_FILE), owner_stamp()).unwrap();
        assert_eq!(remove_orphans(&base.0, WATCHDOG), 1);
        assert!(!dead.exists());
        assert!(live.exists() && foreign.exists());
    }
}
