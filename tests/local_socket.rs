//! The box owner's own way in (issue 30): with the token *and* `--allow-login` configured,
//! a loopback request without a Tailscale identity is refused, so the CLI on the box talks
//! to the daemon's local Unix socket (0600, peers of the daemon's uid only) by default; and
//! a 401 says which requirement failed.

mod common;

use std::io::{Read, Write};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::UnixStream;
use std::process::{Command, Stdio};
use std::time::Duration;

use common::*;
use serde_json::Value;

fn phone_recipe_daemon(tag: &str) -> (TestDaemon, std::path::PathBuf) {
    let dir = temp_dir(tag);
    std::fs::create_dir_all(&dir).unwrap();
    let socket = dir.join("h.sock");
    let mut config = test_config(&dir);
    config.allow_logins = vec!["you@example.com".into()];
    config.allow_hosts = vec!["box.tail.ts.net".into()];
    config.local_socket = Some(socket.clone());
    (TestDaemon::start(config, dir), socket)
}

/// The real CLI, with nothing but `env` (no token anywhere it looks).
fn cli(args: &[&str], env: &[(&str, &str)]) -> (Option<i32>, String, String) {
    let home = temp_dir("localsock-home");
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_handnode"));
    cmd.args(args)
        .env_clear()
        .env("HOME", &home)
        .envs(env.iter().copied())
        .stdin(Stdio::null());
    let out = cmd.output().unwrap();
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn the_cli_on_the_box_gets_in_through_the_local_socket_by_default() {
    let (d, socket) = phone_recipe_daemon("localsock");
    let mode = std::fs::metadata(&socket).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o600, "the local socket is the owner's only");
    let sock = socket.to_str().unwrap();
    let (code, out, err) = cli(&["grants"], &[("HANDNODE_LOCAL_SOCKET", sock)]);
    assert_eq!(code, Some(0), "{out}{err}");
    assert!(out.contains("no grants") || out.contains("ID"), "{out}");
    // An explicit --url goes over TCP, where the phone recipe wants a Tailscale identity:
    // the refusal says so, and no longer blames the token.
    let url = format!("http://{}", d.addr);
    let (code, out, err) = cli(
        &["grants", "--url", &url],
        &[("HANDNODE_TOKEN", "test-admin-token")],
    );
    assert_eq!(code, Some(1), "{out}{err}");
    assert!(
        err.contains("no Tailscale identity on this request (it came from loopback")
            && err.contains("local socket"),
        "{err}"
    );
    assert!(!err.contains("is not the daemon's"), "{err}");
    // The default, with no socket there, is the TCP address as before.
    let (code, _, err) = cli(
        &["grants"],
        &[("HANDNODE_LOCAL_SOCKET", "/nonexistent/h.sock")],
    );
    assert_eq!(code, Some(1));
    assert!(err.contains("http://127.0.0.1:8795"), "{err}");
}

#[test]
fn a_401_says_which_requirement_failed() {
    let (d, _socket) = phone_recipe_daemon("localsock-401");
    let cases: [(&[(&str, &str)], &str); 4] = [
        (&[], "needs its admin token"),
        (
            &[("Authorization", "Bearer nope")],
            "not this daemon's admin token",
        ),
        (
            &[("Authorization", "Bearer test-admin-token")],
            "no Tailscale identity on this request (it came from loopback",
        ),
        (
            &[
                ("Authorization", "Bearer test-admin-token"),
                ("Tailscale-User-Login", "eve@example.com"),
            ],
            "eve@example.com is not in this daemon's --allow-login",
        ),
    ];
    for (headers, want) in cases {
        let (status, _, body) = http(d.addr, "GET", "/attach", headers, None);
        let v: Value = serde_json::from_slice(&body).unwrap();
        assert_eq!(status, 401, "{v}");
        assert_eq!(v["error"], "unauthorized", "clients key on this");
        assert!(v["reason"].as_str().unwrap().contains(want), "{want}: {v}");
        assert!(!body.windows(16).any(|w| w == b"test-admin-token"));
    }
    // Through `tailscale serve` with an allowed login: in.
    let (status, _, _) = http(
        d.addr,
        "GET",
        "/attach",
        &[
            ("Authorization", "Bearer test-admin-token"),
            ("Tailscale-User-Login", "you@example.com"),
            ("Host", "box.tail.ts.net"),
        ],
        None,
    );
    assert_eq!(status, 200);
}

/// The socket admits only the daemon's uid: the same check, given another uid, refuses
/// this process's connection before a request is read (the patched tiny_http listener).
#[test]
fn a_peer_of_another_uid_is_refused() {
    let dir = temp_dir("localsock-uid");
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("other.sock");
    let listener = std::os::unix::net::UnixListener::bind(&path).unwrap();
    let other = rustix::process::geteuid().as_raw() + 1;
    let check = handnode::admin::peer_uid_is(other, Duration::from_secs(2));
    let server = tiny_http::Server::from_listener(
        tiny_http::Listener::UnixChecked(listener, Box::new(check)),
        None,
    )
    .unwrap();
    let mut s = UnixStream::connect(&path).unwrap();
    s.set_read_timeout(Some(WATCHDOG)).unwrap();
    let _ = s.write_all(b"GET /attach HTTP/1.1\r\nHost: localhost\r\n\r\n");
    let mut got = Vec::new();
    let _ = s.read_to_end(&mut got);
    assert!(
        got.is_empty(),
        "answered: {}",
        String::from_utf8_lossy(&got)
    );
    assert!(server
        .recv_timeout(Duration::from_millis(200))
        .unwrap()
        .is_none());
}
