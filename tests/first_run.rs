//! A new user's first commands with the real binary (issue 30): `cargo run` passes build.rs's
//! `HANDNODE_TARGET` on, which is not a setting to warn about; `doctor | head` (a reader that
//! stops early) ends quietly, without a panic.

mod common;

use std::io::Read;
use std::process::{Command, Stdio};

use common::*;

#[test]
fn cargos_build_variable_is_not_warned_about() {
    let dir = temp_dir("firstrun-env");
    // `serve` warns about unknown variables first; a bad --workers then stops it at once.
    let out = Command::new(env!("CARGO_BIN_EXE_handnode"))
        .args(["serve", "--workers", "0"])
        .env_clear()
        .env("HOME", &dir)
        .env("RUST_LOG", "info")
        .env("HANDNODE_TARGET", "x86_64-unknown-linux-gnu")
        .env("HANDNODE_TYPO", "1")
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(!err.contains("HANDNODE_TARGET"), "{err}");
    assert!(
        err.contains("ignoring unknown env var HANDNODE_TYPO"),
        "the check still works: {err}"
    );
}

#[test]
fn doctor_into_a_closed_pipe_exits_quietly() {
    let dir = temp_dir("firstrun-doctor");
    let mut child = Command::new(env!("CARGO_BIN_EXE_handnode"))
        .arg("doctor")
        .env_clear()
        .env("HOME", &dir)
        .env("PATH", "/usr/bin:/bin")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // `| head -0`: the reader is gone before the report is written.
    drop(child.stdout.take());
    let mut err = String::new();
    child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut err)
        .unwrap();
    let status = child.wait().unwrap();
    assert!(!err.contains("panicked"), "{err}");
    assert_eq!(status.code(), Some(0), "{err}");
}
