//! The real `handnode` binary as a child process: started on `127.0.0.1:0` with a state
//! dir, the token in its environment and turned-down timers; its address learned from its
//! start-up log line; its descriptors, threads and memory read from `/proc/<pid>`.
#![allow(dead_code)]

use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::Value;

use crate::common::{admin_call, fds_and_threads, vm_rss_kib, WATCHDOG};

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

pub struct RealDaemon {
    child: Option<Child>,
    pub addr: SocketAddr,
    pub pid: u32,
    pub state_dir: PathBuf,
    /// The last lines the daemon logged, for failure messages.
    log: Arc<Mutex<Vec<String>>>,
}

impl RealDaemon {
    /// Start `handnode serve` on a fresh port with `state_dir`, [`FAST_FLAGS`] and the
    /// given `(flag, value)` pairs (which replace a fast flag of the same name; an empty
    /// value is a switch).
    pub fn start(state_dir: &Path, flags: &[(&str, &str)]) -> RealDaemon {
        let mut all: Vec<(&str, &str)> = FAST_FLAGS
            .iter()
            .copied()
            .filter(|(f, _)| !flags.iter().any(|(g, _)| g == f))
            .collect();
        all.extend_from_slice(flags);
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_handnode"));
        cmd.arg("serve")
            .args(["--listen", "127.0.0.1:0"])
            .arg("--state-dir")
            .arg(state_dir)
            .arg("--config-dir")
            .arg(state_dir.join("config"))
            .args(["--no-notify", "--no-sd-notify", "--display-backend", "none"])
            .args(
                all.iter()
                    .flat_map(|(f, v)| [*f, *v])
                    .filter(|a| !a.is_empty()),
            )
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped());
        for (k, _) in std::env::vars_os() {
            if k.to_string_lossy().starts_with("HANDNODE_") {
                cmd.env_remove(k);
            }
        }
        cmd.env("HANDNODE_TOKEN", TOKEN).env("RUST_LOG", "info");
        let mut child = cmd.spawn().expect("the handnode binary starts");
        let pid = child.id();
        let stderr = child.stderr.take().unwrap();
        let log = Arc::new(Mutex::new(Vec::new()));
        let (addr_tx, addr_rx) = crossbeam_channel::bounded(1);
        {
            let log = Arc::clone(&log);
            // Keep draining stderr for the daemon's whole life so it never blocks on a
            // full pipe; remember the tail for diagnostics.
            std::thread::spawn(move || {
                for line in BufReader::new(stderr).lines() {
                    let Ok(line) = line else { break };
                    if let Some(rest) = line.split("admin API listening on http://").nth(1) {
                        if let Ok(addr) = rest.trim().parse::<SocketAddr>() {
                            let _ = addr_tx.try_send(addr);
                        }
                    }
                    let mut log = log.lock().unwrap();
                    log.push(line);
                    if log.len() > 200 {
                        log.remove(0);
                    }
                }
            });
        }
        let addr = match addr_rx.recv_timeout(WATCHDOG) {
            Ok(addr) => addr,
            Err(_) => {
                let _ = child.kill();
                let _ = child.wait();
                panic!(
                    "watchdog: the daemon never said where it listens; its log:\n{}",
                    log.lock().unwrap().join("\n")
                );
            }
        };
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
        let deadline = std::time::Instant::now() + WATCHDOG;
        loop {
            let (status, g) = self.grant(id);
            if status == 200 && pred(&g) {
                return g;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "watchdog: grant {id} never became {what}: {status} {g}"
            );
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// `(open descriptors, threads)` of the daemon process.
    pub fn counts(&self) -> (usize, usize) {
        fds_and_threads(Some(self.pid))
    }

    pub fn rss_kib(&self) -> u64 {
        vm_rss_kib(Some(self.pid))
    }

    pub fn log_tail(&self) -> String {
        self.log.lock().unwrap().join("\n")
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
        let _ = rustix::process::kill_process(
            rustix::process::Pid::from_child(&child),
            rustix::process::Signal::TERM,
        );
        let deadline = std::time::Instant::now() + WATCHDOG;
        loop {
            if let Some(status) = child.try_wait().unwrap() {
                return status.code();
            }
            if std::time::Instant::now() > deadline {
                let _ = child.kill();
                let _ = child.wait();
                panic!("watchdog: the daemon did not exit on SIGTERM");
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }
}

impl Drop for RealDaemon {
    fn drop(&mut self) {
        self.kill();
    }
}
