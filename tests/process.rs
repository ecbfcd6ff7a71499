//! The real binary: SIGTERM closes grant sockets with 1001, keeps grants on disk and exits
//! 0; bad configuration exits 2 with a message that says what to fix.

#![allow(clippy::zombie_processes)] // the child is waited on by the test body

mod common;

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};

use common::*;
use serde_json::json;

/// Start the binary on an ephemeral port and learn the port from its log.
fn spawn_daemon(dir: &std::path::Path) -> (std::process::Child, std::net::SocketAddr) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_handnode"))
        .args([
            "--listen",
            "127.0.0.1:0",
            "--no-notify",
            "--no-sd-notify",
            "--backoff-base-ms",
            "100",
        ])
        .arg("--state-dir")
        .arg(dir.join("state"))
        .arg("--config-dir")
        .arg(dir.join("config"))
        .env("HANDNODE_TOKEN", "test-admin-token")
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
    loop {
        let line = rx
            .recv_timeout(WATCHDOG)
            .expect("watchdog: the daemon never said where it listens");
        if let Some(rest) = line.split("admin API listening on http://").nth(1) {
            return (child, rest.trim().parse().unwrap());
        }
    }
}

#[test]
fn sigterm_closes_sockets_1001_persists_and_exits_0() {
    let pod = StubPod::start();
    let dir = temp_dir("sigterm");
    let (mut child, addr) = spawn_daemon(&dir);
    let body = json!({"runtime": pod.runtime(), "session": "laptop", "secret": "x"}).to_string();
    let (status, _, reply) = http(
        addr,
        "POST",
        "/attach",
        &[
            ("Authorization", "Bearer test-admin-token"),
            ("Content-Type", "application/json"),
        ],
        Some(body.as_bytes()),
    );
    assert_eq!(status, 202, "{}", String::from_utf8_lossy(&reply));
    pod.next_upgrade();
    let mut conn = pod.next_conn();
    conn.initialize();
    rustix::process::kill_process(
        rustix::process::Pid::from_raw(child.id() as i32).unwrap(),
        rustix::process::Signal::TERM,
    )
    .unwrap();
    assert_eq!(conn.expect_close(), 1001);
    let (tx, rx) = crossbeam_channel::bounded(1);
    std::thread::spawn(move || {
        let _ = tx.send(child.wait());
    });
    let status = rx
        .recv_timeout(WATCHDOG)
        .expect("watchdog: the daemon did not exit")
        .unwrap();
    assert_eq!(status.code(), Some(0));
    let grants = std::fs::read_to_string(dir.join("state/grants.json")).unwrap();
    assert!(
        grants.contains("laptop"),
        "the live grant stays on disk: {grants}"
    );
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn bad_configuration_exits_2_and_says_what_to_fix() {
    let out = Command::new(env!("CARGO_BIN_EXE_handnode"))
        .args(["--workers", "0"])
        .env("HANDNODE_TOKEN", "t")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("--workers"), "{err}");
    let out = Command::new(env!("CARGO_BIN_EXE_handnode"))
        .arg("--no-such-flag")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("--no-such-flag"));
}

#[test]
fn the_person_at_the_box_is_told_on_attach_detach_and_end() {
    let pod = StubPod::start();
    let dir = temp_dir("notify");
    // A stand-in notify-send that records its argv, first on PATH.
    let bin = dir.join("bin");
    std::fs::create_dir_all(&bin).unwrap();
    let log = dir.join("notifications");
    let fake = bin.join("notify-send");
    std::fs::write(
        &fake,
        // One write per notification (O_APPEND), so concurrent ones never interleave.
        format!(
            "#!/bin/sh\nline=$(printf '%s|' \"$@\")\nprintf '%s\\n' \"$line\" >> {}\n",
            log.display()
        ),
    )
    .unwrap();
    std::fs::set_permissions(&fake, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let path = format!(
        "{}:{}",
        bin.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let mut child = Command::new(env!("CARGO_BIN_EXE_handnode"))
        .args([
            "--listen",
            "127.0.0.1:0",
            "--no-sd-notify",
            "--backoff-base-ms",
            "100",
        ])
        .arg("--state-dir")
        .arg(dir.join("state"))
        .env("HANDNODE_TOKEN", "test-admin-token")
        .env("PATH", path)
        .env("RUST_LOG", "info")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let stderr = child.stderr.take().unwrap();
    let guard = KillOnDrop(child);
    let (tx, rx) = crossbeam_channel::unbounded();
    std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            let _ = tx.send(line);
        }
    });
    let addr: std::net::SocketAddr = loop {
        let line = rx.recv_timeout(WATCHDOG).expect("watchdog: no listen line");
        if let Some(rest) = line.split("admin API listening on http://").nth(1) {
            break rest.trim().parse().unwrap();
        }
    };
    let body =
        json!({"runtime": pod.runtime(), "session": "laptop", "profile": "desktop", "secret": "x"})
            .to_string();
    let headers = [
        ("Authorization", "Bearer test-admin-token"),
        ("Content-Type", "application/json"),
    ];
    let (status, _, reply) = http(addr, "POST", "/attach", &headers, Some(body.as_bytes()));
    assert_eq!(status, 202);
    let id = serde_json::from_slice::<serde_json::Value>(&reply).unwrap()["id"]
        .as_str()
        .unwrap()
        .to_string();
    pod.next_upgrade();
    let mut conn = pod.next_conn();
    conn.initialize();
    let wait_lines = |n: usize| -> Vec<String> {
        let deadline = std::time::Instant::now() + WATCHDOG;
        loop {
            let text = std::fs::read_to_string(&log).unwrap_or_default();
            let lines: Vec<String> = text.lines().map(str::to_string).collect();
            if lines.len() >= n {
                return lines;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "watchdog: {n} notifications expected, got {lines:?}"
            );
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
    };
    let lines = wait_lines(1);
    assert!(
        lines[0].contains("lent to laptop") && lines[0].contains("profile desktop until 20"),
        "{lines:?}"
    );
    conn.close(1000); // detach: the pod drops the socket
    let lines = wait_lines(2);
    assert!(lines[1].contains("laptop detached"), "{lines:?}");
    let mut again = pod.next_conn();
    again.initialize();
    let (status, _, _) = http(addr, "DELETE", &format!("/attach/{id}"), &headers, None);
    assert_eq!(status, 204);
    // Each notification is its own process, so the re-attach and the revoke may land in
    // either order; count them instead.
    let lines = wait_lines(4);
    let count = |needle: &str| lines.iter().filter(|l| l.contains(needle)).count();
    assert_eq!(count("this box is lent to laptop"), 2, "{lines:?}");
    assert_eq!(count("laptop detached"), 1, "{lines:?}");
    assert_eq!(
        count("laptop is no longer lent (desktop)|revoked here"),
        1,
        "{lines:?}"
    );
    drop(guard);
    let _ = std::fs::remove_dir_all(dir);
}

/// Kills a daemon a failing test leaves behind, so it cannot hold the test's pipes open.
struct KillOnDrop(std::process::Child);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}
