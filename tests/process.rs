//! The real binary: SIGTERM closes grant sockets with 1001, keeps grants on disk and exits
//! 0; bad configuration exits 2 with a message that says what to fix.

mod common;
#[path = "common/realbin.rs"]
mod realbin;

use std::process::Command;

use common::*;
use realbin::{daemon_command, sigterm, spawn_daemon, wait_exit, KillOnDrop, TOKEN};
use serde_json::json;

#[test]
fn sigterm_closes_sockets_1001_persists_and_exits_0() {
    let pod = StubPod::start();
    let dir = temp_dir("sigterm");
    let mut cmd = daemon_command(&dir);
    cmd.args(["--no-notify", "--no-sd-notify", "--backoff-base-ms", "100"]);
    let (child, _log, addr) = spawn_daemon(&mut cmd, usize::MAX);
    let mut daemon = KillOnDrop(Some(child));
    let body = json!({"runtime": pod.runtime(), "session": "laptop", "secret": "x"});
    let (status, reply) = admin_call(addr, TOKEN, "POST", "/attach", Some(&body));
    assert_eq!(status, 202, "{reply}");
    let (_, mut conn) = pod.next_session();
    let child = daemon.0.as_mut().unwrap();
    sigterm(child);
    assert_eq!(conn.expect_close(), 1001);
    let status = wait_exit(child);
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
    let mut cmd = daemon_command(&dir);
    cmd.args(["--no-sd-notify", "--backoff-base-ms", "100"])
        .env("PATH", path);
    let (child, _log, addr) = spawn_daemon(&mut cmd, usize::MAX);
    let guard = KillOnDrop(Some(child));
    let body =
        json!({"runtime": pod.runtime(), "session": "laptop", "profile": "desktop", "secret": "x"});
    let (status, reply) = admin_call(addr, TOKEN, "POST", "/attach", Some(&body));
    assert_eq!(status, 202, "{reply}");
    let id = reply["id"].as_str().unwrap().to_string();
    let (_, mut conn) = pod.next_session();
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
    let (_, _again) = pod.next_session();
    let (status, _) = admin_call(addr, TOKEN, "DELETE", &format!("/attach/{id}"), None);
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
