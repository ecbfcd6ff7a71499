//! The real `handnode` binary as a child process: started on `127.0.0.1:0` with a state
//! dir, the token in its environment and turned-down timers; its address learned from its
//! start-up log line; its descriptors, threads and memory read from `/proc/<pid>`. Also the
//! pieces for tests that start it their own way: its stderr log, SIGTERM and a bounded wait.
#![allow(dead_code)]

use std::collections::VecDeque;
use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStderr, Command, ExitStatus, Stdio};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::Instant;

use serde_json::Value;

use crate::common::{admin_call, fds_and_threads, poll_until, vm_rss_kib, WATCHDOG};

/// The daemon's start-up line names its admin address after this.
const LISTENING: &str = "admin API listening on http://";

/// The admin token every real daemon in the tests is given (through its environment).
pub const TOKEN: &str = "real-binary-test-token";

/// Timing flags that keep every test fast (milliseconds); a test may override any.
pub const FAST_FLAGS: [(&str, &str); 8] = [
    ("--backoff-base-ms", "10"),
    ("--backoff-cap-ms", "40"),
    ("--backoff-reset-ms", "60000"),
    ("--connect-timeout-ms", "2000"),
    ("--handshake-timeout-ms", "2000"),
    ("--mint-timeout-ms", "2000"),
    ("--admin-io-timeout-ms", "2000"),
    ("--ended-retention-ms", "200"),
];

/// `handnode` (no subcommand: `serve` is the default) on `127.0.0.1:0` with its state and
/// config under `dir`, [`TOKEN`] as `HANDNODE_TOKEN` and `RUST_LOG=info`; the caller adds its
/// own flags and environment.
pub fn daemon_command(dir: &Path) -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_handnode"));
    cmd.args(["--listen", "127.0.0.1:0", "--local-socket", "none"])
        .arg("--state-dir")
        .arg(dir.join("state"))
        .arg("--config-dir")
        .arg(dir.join("config"))
        .env("HANDNODE_TOKEN", TOKEN)
        .env("RUST_LOG", "info");
    cmd
}

/// Spawn `cmd` with stdout discarded and stderr read into a [`ChildLog`] that keeps its last
/// `keep` lines (`usize::MAX`: all of them).
pub fn spawn_logged(cmd: &mut Command, keep: usize) -> (Child, ChildLog) {
    let mut child = cmd
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("the handnode binary starts");
    let log = ChildLog::start(child.stderr.take().unwrap(), keep);
    (child, log)
}

/// [`spawn_logged`], then the address the daemon logs. If it never says (or exits first),
/// kill it and panic with its log.
pub fn spawn_daemon(cmd: &mut Command, keep: usize) -> (Child, ChildLog, SocketAddr) {
    let (mut child, log) = spawn_logged(cmd, keep);
    match log.wait_addr() {
        Some(addr) => (child, log, addr),
        None => {
            let _ = child.kill();
            let _ = child.wait();
            panic!(
                "watchdog: the daemon never said where it listens; its log:\n{}",
                log.text()
            );
        }
    }
}

/// A child's stderr, read line by line on a thread for the child's whole life (so the child
/// never blocks on a full pipe) and kept for assertions and failure messages; the address of
/// the daemon's "admin API listening on http://ADDR" line is picked out as it passes. Waits
/// on it are watchdog-bounded and end early once stderr has ended (the child is gone).
pub struct ChildLog {
    shared: Arc<(Mutex<LogState>, Condvar)>,
    reader: Option<JoinHandle<()>>,
}

#[derive(Default)]
struct LogState {
    lines: VecDeque<String>,
    addr: Option<SocketAddr>,
    ended: bool,
}

impl ChildLog {
    pub fn start(stderr: ChildStderr, keep: usize) -> ChildLog {
        let shared = Arc::new((Mutex::new(LogState::default()), Condvar::new()));
        let reader = {
            let shared = Arc::clone(&shared);
            std::thread::spawn(move || {
                let (state, changed) = &*shared;
                for line in BufReader::new(stderr).lines() {
                    let Ok(line) = line else { break };
                    let mut s = state.lock().unwrap();
                    if s.addr.is_none() {
                        s.addr = line
                            .split(LISTENING)
                            .nth(1)
                            .and_then(|rest| rest.trim().parse().ok());
                    }
                    s.lines.push_back(line);
                    if s.lines.len() > keep {
                        s.lines.pop_front();
                    }
                    changed.notify_all();
                }
                state.lock().unwrap().ended = true;
                changed.notify_all();
            })
        };
        ChildLog {
            shared,
            reader: Some(reader),
        }
    }

    /// Wait until `find` finds something in the log: `None` once stderr has ended without
    /// it, or when the watchdog fires.
    fn wait_for<T>(&self, find: impl Fn(&LogState) -> Option<T>) -> Option<T> {
        let deadline = Instant::now() + WATCHDOG;
        let (state, changed) = &*self.shared;
        let mut s = state.lock().unwrap();
        loop {
            if let Some(found) = find(&s) {
                return Some(found);
            }
            let now = Instant::now();
            if s.ended || now >= deadline {
                return None;
            }
            s = changed.wait_timeout(s, deadline - now).unwrap().0;
        }
    }

    /// The address the daemon logged, or `None` if it never did within the watchdog.
    pub fn wait_addr(&self) -> Option<SocketAddr> {
        self.wait_for(|s| s.addr)
    }

    /// The address the daemon logged; panics with the log if it never did.
    pub fn addr(&self) -> SocketAddr {
        self.wait_addr().unwrap_or_else(|| {
            panic!(
                "watchdog: the daemon never said where it listens; its log:\n{}",
                self.text()
            )
        })
    }

    /// The first kept line that contains `needle`; panics with the log if none comes.
    pub fn line(&self, needle: &str) -> String {
        self.wait_for(|s| s.lines.iter().find(|l| l.contains(needle)).cloned())
            .unwrap_or_else(|| {
                panic!(
                    "watchdog: no log line with {needle:?}; the log:\n{}",
                    self.text()
                )
            })
    }

    /// The kept lines, each ending in a newline.
    pub fn text(&self) -> String {
        let s = self.shared.0.lock().unwrap();
        s.lines.iter().map(|l| format!("{l}\n")).collect()
    }

    /// Every kept line, once stderr has ended: call it after the child has exited.
    pub fn finish(&mut self) -> String {
        if let Some(reader) = self.reader.take() {
            reader.join().unwrap();
        }
        self.text()
    }
}

/// Send `SIGTERM` to `child`.
pub fn sigterm(child: &Child) {
    rustix::process::kill_process(
        rustix::process::Pid::from_child(child),
        rustix::process::Signal::TERM,
    )
    .unwrap();
}

/// Wait for `child` to exit under the watchdog; if it does not, `SIGKILL` it and panic.
pub fn wait_exit(child: &mut Child) -> ExitStatus {
    let pid = child.id();
    let (tx, rx) = crossbeam_channel::bounded(1);
    let guard = std::thread::spawn(move || {
        if rx.recv_timeout(WATCHDOG).is_err() {
            if let Some(pid) = rustix::process::Pid::from_raw(pid as i32) {
                let _ = rustix::process::kill_process(pid, rustix::process::Signal::KILL);
            }
            return true;
        }
        false
    });
    let status = child.wait().unwrap();
    let _ = tx.send(());
    assert!(
        !guard.join().unwrap(),
        "watchdog: process {pid} did not exit"
    );
    status
}

/// A started child that is killed and reaped when this is dropped, unless taken out first,
/// so a failing test leaves no orphan holding the harness's output open.
pub struct KillOnDrop(pub Option<Child>);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        if let Some(mut child) = self.0.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

pub struct RealDaemon {
    child: Option<Child>,
    pub addr: SocketAddr,
    pub pid: u32,
    pub state_dir: PathBuf,
    /// The last lines the daemon logged, for failure messages.
    log: ChildLog,
}

impl RealDaemon {
    /// Start `handnode serve` on a fresh port (unless `--listen` is given) with `state_dir`,
    /// [`FAST_FLAGS`] and the given `(flag, value)` pairs (which replace a fast flag of the
    /// same name; an empty value is a switch).
    pub fn start(state_dir: &Path, flags: &[(&str, &str)]) -> RealDaemon {
        let mut all: Vec<(&str, &str)> = FAST_FLAGS
            .iter()
            .copied()
            .filter(|(f, _)| !flags.iter().any(|(g, _)| g == f))
            .collect();
        all.extend_from_slice(flags);
        if !flags.iter().any(|(f, _)| *f == "--listen") {
            all.push(("--listen", "127.0.0.1:0"));
        }
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_handnode"));
        cmd.arg("serve")
            .arg("--state-dir")
            .arg(state_dir)
            .arg("--config-dir")
            .arg(state_dir.join("config"))
            .args(["--no-notify", "--no-sd-notify", "--display-backend", "none"])
            // Every test daemon would otherwise try the one $XDG_RUNTIME_DIR/handnode.sock.
            .args(["--local-socket", "none"])
            .args(
                all.iter()
                    .flat_map(|(f, v)| [*f, *v])
                    .filter(|a| !a.is_empty()),
            )
            .stdin(Stdio::null());
        for (k, _) in std::env::vars_os() {
            if k.to_string_lossy().starts_with("HANDNODE_") {
                cmd.env_remove(k);
            }
        }
        cmd.env("HANDNODE_TOKEN", TOKEN).env("RUST_LOG", "info");
        // The tail is enough for diagnostics, however long the daemon runs.
        let (child, log, addr) = spawn_daemon(&mut cmd, 200);
        let pid = child.id();
        RealDaemon {
            child: Some(child),
            addr,
            pid,
            state_dir: state_dir.to_path_buf(),
            log,
        }
    }

    /// A request with the admin token; the body, when given, is JSON.
    pub fn call(&self, method: &str, path: &str, body: Option<&Value>) -> (u16, Value) {
        admin_call(self.addr, TOKEN, method, path, body)
    }

    pub fn grant(&self, id: &str) -> (u16, Value) {
        self.call("GET", &format!("/attach/{id}"), None)
    }

    /// Wait (watchdog-bounded) until the grant's JSON satisfies `pred`.
    pub fn wait_grant(&self, id: &str, what: &str, pred: impl Fn(&Value) -> bool) -> Value {
        let (_, g) = poll_until(
            || self.grant(id),
            |(status, g)| *status == 200 && pred(g),
            |(status, g)| format!("watchdog: grant {id} never became {what}: {status} {g}"),
        );
        g
    }

    /// `(open descriptors, threads)` of the daemon process.
    pub fn counts(&self) -> (usize, usize) {
        fds_and_threads(Some(self.pid))
    }

    pub fn rss_kib(&self) -> u64 {
        vm_rss_kib(Some(self.pid))
    }

    pub fn log_tail(&self) -> String {
        self.log.text()
    }

    /// `SIGKILL`, and reap it.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// `SIGTERM` and wait for a clean exit; returns the exit code.
    pub fn terminate(&mut self) -> Option<i32> {
        let mut child = self.child.take()?;
        sigterm(&child);
        wait_exit(&mut child).code()
    }
}

impl Drop for RealDaemon {
    fn drop(&mut self) {
        self.kill();
    }
}
