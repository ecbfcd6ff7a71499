//! The real binary under a `Type=notify` supervisor: `READY=1` arrives only once `/readyz`
//! answers 200, `STOPPING=1` on SIGTERM before a clean exit; `--no-sd-notify` sends nothing;
//! a broken `NOTIFY_SOCKET` is logged and does not stop the daemon.

mod common;

use std::io::{BufRead, BufReader};
use std::os::unix::net::UnixDatagram;
use std::path::Path;
use std::process::{Child, Command, Stdio};

use common::*;
use crossbeam_channel::Receiver;

/// A started daemon that is killed if the test fails before it is stopped, so a failing test
/// leaves no orphan holding the harness's output open.
struct Guard(Option<Child>);

impl Drop for Guard {
    fn drop(&mut self) {
        if let Some(mut child) = self.0.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// Start the binary with `NOTIFY_SOCKET=notify` and its stderr lines on a channel.
fn spawn(dir: &Path, notify: &str, extra: &[&str]) -> (Guard, Receiver<String>) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_handnode"))
        .args(["--listen", "127.0.0.1:0", "--no-notify"])
        .args(extra)
        .arg("--state-dir")
        .arg(dir.join("state"))
        .arg("--config-dir")
        .arg(dir.join("config"))
        .env("HANDNODE_TOKEN", "test-admin-token")
        .env("NOTIFY_SOCKET", notify)
        .env("RUST_LOG", "info")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let stderr = child.stderr.take().unwrap();
    let (tx, rx) = crossbeam_channel::unbounded();
    std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            let _ = tx.send(line);
        }
    });
    (Guard(Some(child)), rx)
}

/// The first log line containing `needle`, within the watchdog.
fn log_line(rx: &Receiver<String>, needle: &str) -> String {
    loop {
        let line = rx
            .recv_timeout(WATCHDOG)
            .unwrap_or_else(|_| panic!("watchdog: no log line with {needle:?}"));
        if line.contains(needle) {
            return line;
        }
    }
}

fn listen_addr(rx: &Receiver<String>) -> std::net::SocketAddr {
    let line = log_line(rx, "admin API listening on http://");
    let rest = line.split("admin API listening on http://").nth(1).unwrap();
    rest.trim().parse().unwrap()
}

fn notify_socket(dir: &Path) -> (UnixDatagram, String) {
    let path = dir.join("notify");
    let sock = UnixDatagram::bind(&path).unwrap();
    sock.set_read_timeout(Some(WATCHDOG)).unwrap();
    (sock, path.to_str().unwrap().to_string())
}

fn recv(sock: &UnixDatagram) -> String {
    let mut buf = [0u8; 4096];
    let n = sock
        .recv(&mut buf)
        .expect("watchdog: no sd_notify datagram");
    String::from_utf8(buf[..n].to_vec()).unwrap()
}

fn sigterm_and_wait(guard: &mut Guard) -> Option<i32> {
    let pid = guard.0.as_ref().unwrap().id();
    rustix::process::kill_process(
        rustix::process::Pid::from_raw(pid as i32).unwrap(),
        rustix::process::Signal::TERM,
    )
    .unwrap();
    let (tx, rx) = crossbeam_channel::bounded(1);
    let mut child = guard.0.take().unwrap();
    std::thread::spawn(move || {
        let _ = tx.send(child.wait());
    });
    let status = rx.recv_timeout(WATCHDOG);
    if status.is_err() {
        // Still running: the waiter thread holds the child, so kill it by pid.
        let _ = rustix::process::kill_process(
            rustix::process::Pid::from_raw(pid as i32).unwrap(),
            rustix::process::Signal::KILL,
        );
    }
    status
        .expect("watchdog: the daemon did not exit")
        .unwrap()
        .code()
}

#[test]
fn ready_after_readyz_then_stopping_on_sigterm() {
    let dir = temp_dir("sdnotify");
    let (sock, path) = notify_socket(&dir);
    let (mut child, _log) = spawn(&dir, &path, &[]);

    let ready = recv(&sock);
    let mut lines = ready.lines();
    assert_eq!(lines.next(), Some("READY=1"), "{ready:?}");
    let status = lines.next().expect("a STATUS= line with the address");
    let addr: std::net::SocketAddr = status
        .strip_prefix("STATUS=admin API on http://")
        .unwrap_or_else(|| panic!("{status:?}"))
        .parse()
        .unwrap();
    // READY=1 is sent only after readiness: /readyz must already say so.
    let (code, _, body) = http(addr, "GET", "/readyz", &[], None);
    assert_eq!(code, 200, "{}", String::from_utf8_lossy(&body));

    let exit = sigterm_and_wait(&mut child);
    assert_eq!(recv(&sock), "STOPPING=1");
    assert_eq!(exit, Some(0));
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn no_sd_notify_sends_nothing() {
    let dir = temp_dir("sdnotify-off");
    let (sock, path) = notify_socket(&dir);
    let (mut child, log) = spawn(&dir, &path, &["--no-sd-notify"]);
    let addr = listen_addr(&log);
    let (code, _, _) = http(addr, "GET", "/readyz", &[], None);
    assert_eq!(code, 200);
    assert_eq!(sigterm_and_wait(&mut child), Some(0));
    // The process has exited, so anything it sent is already queued here.
    sock.set_nonblocking(true).unwrap();
    let mut buf = [0u8; 64];
    let err = sock
        .recv(&mut buf)
        .expect_err("no datagram with --no-sd-notify");
    assert_eq!(err.kind(), std::io::ErrorKind::WouldBlock);
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn broken_notify_socket_is_logged_and_not_fatal() {
    let dir = temp_dir("sdnotify-broken");
    let (mut child, log) = spawn(&dir, "relative/notify", &[]);
    let addr = listen_addr(&log);
    let warning = log_line(&log, "could not notify systemd");
    assert!(warning.contains("READY=1"), "{warning}");
    let (code, _, _) = http(addr, "GET", "/readyz", &[], None);
    assert_eq!(code, 200);
    assert_eq!(sigterm_and_wait(&mut child), Some(0));
    let _ = std::fs::remove_dir_all(dir);
}
