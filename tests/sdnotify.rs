//! The real binary under a `Type=notify` supervisor: `READY=1` arrives only once `/readyz`
//! answers 200, `STOPPING=1` on SIGTERM before a clean exit; `--no-sd-notify` sends nothing;
//! a broken `NOTIFY_SOCKET` is logged and does not stop the daemon.

mod common;
#[path = "common/realbin.rs"]
mod realbin;

use std::os::unix::net::UnixDatagram;
use std::path::Path;

use common::*;
use realbin::{daemon_command, sigterm, spawn_logged, wait_exit, ChildLog, KillOnDrop};

/// Start the binary with `NOTIFY_SOCKET=notify`, its stderr kept in a log. It is not waited
/// for here: the test that reads `READY=1` learns the address from that.
fn spawn(dir: &Path, notify: &str, extra: &[&str]) -> (KillOnDrop, ChildLog) {
    let mut cmd = daemon_command(dir);
    cmd.arg("--no-notify")
        .args(extra)
        .env("NOTIFY_SOCKET", notify);
    let (child, log) = spawn_logged(&mut cmd, usize::MAX);
    (KillOnDrop(Some(child)), log)
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

fn sigterm_and_wait(daemon: &mut KillOnDrop) -> Option<i32> {
    let child = daemon.0.as_mut().unwrap();
    sigterm(child);
    wait_exit(child).code()
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
    let addr = log.addr();
    // Without sd_notify, readiness is the daemon's "ready:" log line.
    log.line("ready: ");
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
    let addr = log.addr();
    let warning = log.line("could not notify systemd");
    // Sent, and so warned about, once ready.
    assert!(warning.contains("READY=1"), "{warning}");
    let (code, _, _) = http(addr, "GET", "/readyz", &[], None);
    assert_eq!(code, 200);
    assert_eq!(sigterm_and_wait(&mut child), Some(0));
    let _ = std::fs::remove_dir_all(dir);
}
