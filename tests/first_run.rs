//! A new user's first commands with the real binary (issue 30): `cargo run` passes build.rs's
//! `HANDNODE_TARGET` on, which is not a setting to warn about; `doctor | head` (a reader that
//! stops early) ends quietly, without a panic; the README's CLI commands work as written.

mod common;
#[path = "common/realbin.rs"]
mod realbin;

use std::io::Read;
use std::process::{Command, Stdio};

use common::*;
use serde_json::{json, Value};

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

/// The README's shell commands of the fenced block that follows `marker`, `\`-continued
/// lines joined, comments dropped, each split into words the way a shell would for these
/// (plain words, '…' and "…" quoted).
fn readme_commands(marker: &str) -> Vec<Vec<String>> {
    let readme =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/README.md")).unwrap();
    let at = readme
        .find(marker)
        .unwrap_or_else(|| panic!("README lost {marker:?}"));
    // A heading names the block after it; a command names the block it is in.
    let inside = readme[..at].matches("```").count() % 2 == 1;
    let block = if inside {
        let start = readme[..at].rfind("```").unwrap();
        let body = &readme[start + 3..];
        body[body.find('\n').unwrap()..]
            .split("```")
            .next()
            .unwrap()
    } else {
        readme[at..]
            .split("```")
            .nth(1)
            .expect("a fenced block after it")
    };
    let mut commands = Vec::new();
    let mut current = String::new();
    for line in block.lines() {
        let line = line.trim();
        if let Some(head) = line.strip_suffix('\\') {
            current.push_str(head);
            current.push(' ');
            continue;
        }
        current.push_str(line);
        let words = shell_words(&current);
        if !words.is_empty() {
            commands.push(words);
        }
        current.clear();
    }
    commands
}

fn shell_words(line: &str) -> Vec<String> {
    let mut words = Vec::new();
    let mut word: Option<String> = None;
    let mut quote = None;
    let mut prev_space = true;
    for c in line.chars() {
        match (quote, c) {
            (None, '#') if prev_space => break,
            (None, ' ' | '\t') => {
                words.extend(word.take());
                prev_space = true;
                continue;
            }
            (None, '"' | '\'') => {
                quote = Some(c);
                word.get_or_insert_with(String::new);
            }
            (Some(q), c) if c == q => quote = None,
            (_, c) => word.get_or_insert_with(String::new).push(c),
        }
        prev_space = false;
    }
    words.extend(word);
    words
}

/// Run one README command: `handnode` is the binary under test, the README's placeholders
/// are replaced (`wss://pod.example:8090`, `~/attach-secret`, `<id>`), and the daemon is
/// named by HANDNODE_URL with its token in HANDNODE_TOKEN, as a user's shell would have them.
fn run_readme(
    words: &[String],
    d: &realbin::RealDaemon,
    pod: &StubPod,
    secret: &std::path::Path,
    id: &str,
) -> (Option<i32>, String, String) {
    assert_eq!(words[0], "handnode", "{words:?}");
    let args: Vec<String> = words[1..]
        .iter()
        .map(|w| match w.as_str() {
            "wss://pod.example:8090" => pod.runtime(),
            "~/attach-secret" => secret.display().to_string(),
            "<id>" => id.to_string(),
            other => other.to_string(),
        })
        .collect();
    let out = Command::new(env!("CARGO_BIN_EXE_handnode"))
        .args(&args)
        .env_clear()
        .env("HOME", secret.parent().unwrap())
        .env("HANDNODE_URL", format!("http://{}", d.addr))
        .env("HANDNODE_TOKEN", realbin::TOKEN)
        .stdin(Stdio::null())
        .output()
        .unwrap();
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// The README's "Lending the box to a session" commands, as written, against a real daemon
/// and a stub pod: grant (created, then waits until attached), grants, revoke.
#[test]
fn the_readmes_lending_commands_work_as_written() {
    let pod = StubPod::start();
    let dir = temp_dir("firstrun-lend");
    std::fs::create_dir_all(&dir).unwrap();
    let secret = dir.join("attach-secret");
    std::fs::write(&secret, "readme-secret\n").unwrap();
    std::fs::set_permissions(&secret, std::os::unix::fs::PermissionsExt::from_mode(0o600)).unwrap();
    let d = realbin::RealDaemon::start(&dir.join("state"), &[]);
    let commands = readme_commands("## Lending the box to a session");
    assert_eq!(commands.len(), 3, "{commands:?}");

    // `--wait` returns once the pod has said hello on the socket: the pod's side runs here.
    let ((code, out, err), up, _conn) = std::thread::scope(|s| {
        let cli = s.spawn(|| run_readme(&commands[0], &d, &pod, &secret, ""));
        let (up, conn) = pod.next_session();
        (cli.join().unwrap(), up, conn)
    });
    assert_eq!(code, Some(0), "{out}{err}");
    let id = err
        .split("created grant ")
        .nth(1)
        .and_then(|r| r.split_whitespace().next())
        .unwrap_or_else(|| panic!("{err}"))
        .to_string();
    assert!(err.contains(&format!("grant {id}: attached")), "{err}");
    assert_eq!(up.authorization.as_deref(), Some("Bearer readme-secret"));

    let (code, out, err) = run_readme(&commands[1], &d, &pod, &secret, &id);
    assert_eq!(code, Some(0), "{err}");
    let row = out
        .lines()
        .find(|l| l.starts_with(&id))
        .unwrap_or_else(|| panic!("{out}"));
    assert!(
        row.contains("attached") && row.contains("desktop") && row.contains("laptop"),
        "{out}"
    );

    let (code, out, err) = run_readme(&commands[2], &d, &pod, &secret, &id);
    assert_eq!(
        (code, out.trim()),
        (Some(0), format!("revoked grant {id}").as_str()),
        "{err}"
    );
    assert_eq!(d.grant(&id).1["ended"], "cancelled");
}

/// The README's approvals commands, as written: a grant with --approve shell, then the
/// held calls decided with approve, approve --remember and deny --reason.
#[test]
fn the_readmes_approval_commands_work_as_written() {
    let pod = StubPod::start();
    let dir = temp_dir("firstrun-approve");
    std::fs::create_dir_all(&dir).unwrap();
    let secret = dir.join("attach-secret");
    std::fs::write(&secret, "readme-secret\n").unwrap();
    std::fs::set_permissions(&secret, std::os::unix::fs::PermissionsExt::from_mode(0o600)).unwrap();
    let d = realbin::RealDaemon::start(&dir.join("state"), &[]);
    let commands = readme_commands("--approve shell --secret-file ~/attach-secret");
    assert_eq!(commands.len(), 5, "{commands:?}");
    let (code, out, err) = run_readme(&commands[0], &d, &pod, &secret, "");
    assert_eq!(code, Some(0), "{out}{err}");
    let (_, mut conn) = pod.next_session();
    conn.set_read_timeout(WATCHDOG);

    // A held call, listed by `approvals --watch` (read until it shows, then stopped).
    let held = |conn: &mut PodConn, n: u64, tool: &str, args: Value| {
        conn.send(&json!({"jsonrpc": "2.0", "id": n, "method": "tools/call",
                          "params": {"name": tool, "arguments": args}}));
        let (_, list) = poll_until(
            || d.call("GET", "/approvals", None),
            |(_, v)| v["approvals"].as_array().is_some_and(|a| !a.is_empty()),
            |(_, v)| format!("watchdog: no held call: {v}"),
        );
        list["approvals"][0]["id"].as_str().unwrap().to_string()
    };
    let first = held(
        &mut conn,
        1,
        "bash",
        json!({"command": "echo readme-approved"}),
    );
    let watch = &commands[1];
    assert_eq!(watch[1..], ["approvals", "--watch"]);
    let mut child = Command::new(env!("CARGO_BIN_EXE_handnode"))
        .args(&watch[1..])
        .env_clear()
        .env("HANDNODE_URL", format!("http://{}", d.addr))
        .env("HANDNODE_TOKEN", realbin::TOKEN)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut stdout = std::io::BufReader::new(child.stdout.take().unwrap());
    let mut seen = String::new();
    while !seen.contains(&first) {
        let mut line = String::new();
        if std::io::BufRead::read_line(&mut stdout, &mut line).unwrap() == 0 {
            break;
        }
        seen.push_str(&line);
    }
    let _ = child.kill();
    let _ = child.wait();
    assert!(
        seen.contains(&first) && seen.contains("echo readme-approved"),
        "{seen}"
    );

    let (code, out, err) = run_readme(&commands[2], &d, &pod, &secret, &first);
    assert_eq!(code, Some(0), "{out}{err}");
    let r = conn.recv();
    assert_eq!(
        r["result"]["structuredContent"]["stdout"], "readme-approved\n",
        "{r}"
    );

    let second = held(&mut conn, 2, "bash", json!({"command": "echo remembered"}));
    let (code, out, err) = run_readme(&commands[3], &d, &pod, &secret, &second);
    assert_eq!(code, Some(0), "{out}{err}");
    assert_eq!(conn.recv()["id"], 2);

    let third = held(
        &mut conn,
        3,
        "bash_start",
        json!({"command": "touch never"}),
    );
    let (code, out, err) = run_readme(&commands[4], &d, &pod, &secret, &third);
    assert_eq!(code, Some(0), "{out}{err}");
    let r = conn.recv();
    let text = r["result"]["content"][0]["text"]
        .as_str()
        .unwrap_or_default();
    assert!(
        text.contains("not on this box") && text.contains("did not run"),
        "{r}"
    );
}
