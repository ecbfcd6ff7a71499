//! No secret — admin token, attach secret (given or minted), the pod's admin credential, a
//! wrong token someone typed — ever leaves the daemon: not in its log at `RUST_LOG=trace`,
//! not in its argv, not in any `/attach`, `/metrics` or `handnode grants` output, not in
//! `audit.jsonl` (even with `--audit-args`), and not in a `bash` child's environment, whether
//! the call comes over `/mcp` or through a grant. Runs the real binary with stderr captured.

mod common;
#[path = "common/realbin.rs"]
mod realbin;

use std::io::Write;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use common::{http, temp_dir, with_streams, StubPod, WATCHDOG};
use realbin::{sigterm, spawn_daemon, wait_exit, ChildLog, KillOnDrop};
use serde_json::{json, Value};

const BIN: &str = env!("CARGO_BIN_EXE_handnode");

/// Distinctive values, so a substring search for any of them is meaningful.
const ADMIN_TOKEN: &str = "ZqAdminTok-7f3e9c1a-never-printed";
const FILE_TOKEN: &str = "ZqFileTok-4b2d8e6f-never-printed";
const DECOY_ENV_TOKEN: &str = "ZqDecoyEnvTok-91c7a3d5-never-printed";
const ATTACH_SECRET: &str = "ZqAttachSecret-1d4c6b8a-never-printed";
const RENEW_SECRET: &str = "ZqRenewSecret-5e0f2a7c-never-printed";
const ADMIN_CREDENTIAL: &str = "ZqPodAdminCred-8a6e4c2b-never-printed";
const MINTED_SECRET: &str = "ZqMintedSecret-3c9b1f7e-never-printed";
const WRONG_TOKEN: &str = "ZqWrongTok-6d2a8c4e-never-printed";

const ALL_SECRETS: [&str; 8] = [
    ADMIN_TOKEN,
    FILE_TOKEN,
    DECOY_ENV_TOKEN,
    ATTACH_SECRET,
    RENEW_SECRET,
    ADMIN_CREDENTIAL,
    MINTED_SECRET,
    WRONG_TOKEN,
];

/// Every secret that occurs in `text`, by value, so a failure names what leaked.
fn leaked(text: &str) -> Vec<&'static str> {
    ALL_SECRETS
        .iter()
        .copied()
        .filter(|s| text.contains(s))
        .collect()
}

fn assert_clean(what: &str, text: &str) {
    let found = leaked(text);
    assert!(found.is_empty(), "{what} contains {found:?}:\n{text}");
}

/// The daemon binary running with stderr captured line by line.
struct Daemon {
    child: KillOnDrop,
    pid: u32,
    addr: SocketAddr,
    /// Every line: a secret anywhere in it is a leak.
    log: ChildLog,
}

impl Daemon {
    /// Start `handnode` with a cleared environment plus `env`, on an ephemeral port that
    /// the daemon reports in its "listening" log line.
    fn start(args: &[&str], env: &[(&str, &str)]) -> Daemon {
        let mut cmd = Command::new(BIN);
        cmd.args(["--listen", "127.0.0.1:0", "--no-notify", "--no-sd-notify"])
            .args(args)
            .env_clear()
            .env("PATH", std::env::var("PATH").unwrap_or_default())
            .env("RUST_LOG", "trace")
            .envs(env.iter().copied())
            .stdin(Stdio::null());
        let (child, log, addr) = spawn_daemon(&mut cmd, usize::MAX);
        Daemon {
            pid: child.id(),
            child: KillOnDrop(Some(child)),
            addr,
            log,
        }
    }

    fn call(&self, token: &str, method: &str, path: &str, body: Option<&Value>) -> (u16, String) {
        let auth = format!("Bearer {token}");
        let body = body.map(Value::to_string);
        let (status, headers, text) = http(
            self.addr,
            method,
            path,
            &[
                ("Authorization", auth.as_str()),
                ("Content-Type", "application/json"),
            ],
            body.as_deref().map(str::as_bytes),
        );
        let headers: String = headers.iter().map(|(k, v)| format!("{k}: {v}\n")).collect();
        assert_clean(&format!("headers of {method} {path}"), &headers);
        (status, String::from_utf8_lossy(&text).into_owned())
    }

    fn json(&self, token: &str, method: &str, path: &str, body: Option<&Value>) -> (u16, Value) {
        let (status, text) = self.call(token, method, path, body);
        assert_clean(&format!("{method} {path} response"), &text);
        let v = serde_json::from_str(&text).unwrap_or(Value::String(text));
        (status, v)
    }

    /// `POST /attach` with `token`.
    fn attach(&self, token: &str, body: Value) -> (u16, Value) {
        self.json(token, "POST", "/attach", Some(&body))
    }

    /// `bash {"command": "env"}` on `/mcp` without a session: the child's environment.
    fn mcp_env(&self, token: &str) -> String {
        let call = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
            "params": {"name": "bash", "arguments": {"command": "env"}}});
        let (status, reply) = self.json(token, "POST", "/mcp", Some(&call));
        assert_eq!(status, 200, "{reply}");
        bash_stdout(&reply)
    }

    /// SIGTERM, wait for a clean exit under the watchdog, and return the whole log.
    fn stop(mut self) -> String {
        let mut child = self.child.0.take().unwrap();
        sigterm(&child);
        let status = wait_exit(&mut child);
        // stderr hits EOF once the daemon is gone, so the log has every line.
        let log = self.log.finish();
        assert!(status.success(), "daemon exited {status}:\n{log}");
        log
    }
}

/// Run a short-lived `handnode` subcommand under the watchdog.
fn run_cli(args: &[&str], env: &[(&str, &str)]) -> Output {
    let mut child = Command::new(BIN)
        .args(args)
        .env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .env("RUST_LOG", "trace")
        .envs(env.iter().copied())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdout = child.stdout.take().unwrap();
    let mut stderr = child.stderr.take().unwrap();
    let out = std::thread::spawn(move || {
        let mut v = Vec::new();
        std::io::Read::read_to_end(&mut stdout, &mut v).unwrap();
        v
    });
    let err = std::thread::spawn(move || {
        let mut v = Vec::new();
        std::io::Read::read_to_end(&mut stderr, &mut v).unwrap();
        v
    });
    let status = wait_exit(&mut child);
    Output {
        status,
        stdout: out.join().unwrap(),
        stderr: err.join().unwrap(),
    }
}

fn bash_stdout(reply: &Value) -> String {
    let reply = with_streams(reply.clone());
    let sc = &reply["result"]["structuredContent"];
    assert_eq!(sc["exit_code"], 0, "{reply}");
    sc["stdout"].as_str().expect("bash stdout").to_string()
}

/// The child environment holds no secret and no `HANDNODE_*` variable, yet is a real env.
fn assert_env_clean(what: &str, env: &str) {
    assert!(env.contains("PATH="), "{what}: not an environment:\n{env}");
    assert_clean(what, env);
    let names: Vec<&str> = env
        .lines()
        .filter_map(|l| l.split_once('=').map(|(k, _)| k))
        .filter(|k| k.starts_with("HANDNODE_"))
        .collect();
    assert!(names.is_empty(), "{what}: {names:?} reached the child");
}

fn write_file(dir: &Path, name: &str, content: &str) -> PathBuf {
    let path = dir.join(name);
    let mut f = std::fs::File::create(&path).unwrap();
    f.write_all(content.as_bytes()).unwrap();
    path
}

fn proc_cmdline(pid: u32) -> String {
    let raw = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap();
    String::from_utf8_lossy(&raw).replace('\0', " ")
}

#[test]
fn no_secret_reaches_logs_responses_audit_metrics_cli_or_child_env() {
    let dir = temp_dir("secrets");
    let state = dir.join("state");
    let config_dir = dir.join("config");
    let home = dir.join("home");
    std::fs::create_dir_all(&home).unwrap();
    let pod = StubPod::start();
    let state_arg = state.to_str().unwrap();
    let config_arg = config_dir.to_str().unwrap();
    let home_arg = home.to_str().unwrap();
    let d = Daemon::start(
        &[
            "--state-dir",
            state_arg,
            "--config-dir",
            config_arg,
            "--audit-args",
            "--backoff-base-ms",
            "100",
            "--backoff-cap-ms",
            "400",
        ],
        &[("HANDNODE_TOKEN", ADMIN_TOKEN), ("HOME", home_arg)],
    );
    assert_clean("the daemon's argv", &proc_cmdline(d.pid));

    // A wrong token is refused and is itself never echoed or logged.
    let (status, v) = d.json(WRONG_TOKEN, "GET", "/attach", None);
    assert_eq!((status, v["error"].as_str()), (401, Some("unauthorized")));

    // Attach with a given secret (owner, so `bash` is served under the grant).
    let (status, g) = d.attach(
        ADMIN_TOKEN,
        json!({"runtime": pod.runtime(), "session": "given", "profile": "owner",
            "secret": ATTACH_SECRET, "ttl_secs": 600}),
    );
    assert_eq!(status, 202, "{g}");
    let given_id = g["id"].as_str().unwrap().to_string();
    let (up, mut conn) = pod.next_session();
    assert_eq!(
        up.authorization.as_deref(),
        Some(format!("Bearer {ATTACH_SECRET}").as_str()),
        "the secret is used on the dial"
    );
    let list = conn.request(json!(2), "tools/list", json!({}));
    assert_clean("tools/list under a grant", &list.to_string());
    let info = conn.call_tool(json!(3), "sys_info", json!({}));
    assert_ne!(info["result"]["isError"], true, "{info}");
    assert_clean("sys_info under a grant", &info.to_string());
    let env = conn.call_tool(json!(4), "bash", json!({"command": "env"}));
    assert_env_clean("bash env under a grant", &bash_stdout(&env));
    let hidden = conn.call_tool(json!(5), "no_such_tool", json!({}));
    assert_eq!(hidden["error"]["code"], -32602);

    // Renew with a new secret: same id, the new secret reaches the next dial only.
    let (status, renewed) = d.attach(
        ADMIN_TOKEN,
        json!({"runtime": pod.runtime(), "session": "given", "profile": "owner",
            "secret": RENEW_SECRET, "ttl_secs": 900}),
    );
    assert_eq!(status, 202, "{renewed}");
    assert_eq!(renewed["id"], given_id.as_str());
    conn.close(1000);
    let (up, mut conn) = pod.next_session();
    assert_eq!(
        up.authorization.as_deref(),
        Some(format!("Bearer {RENEW_SECRET}").as_str()),
        "the renewed secret is used on the redial"
    );
    let env = conn.call_tool(json!(1), "bash", json!({"command": "env"}));
    assert_env_clean("bash env after renew", &bash_stdout(&env));

    // Attach through minting with the pod's admin credential.
    {
        let mut script = pod.script();
        script.mint_body = json!({"secret": MINTED_SECRET, "expires_in_secs": 600});
    }
    let (status, minted) = d.attach(
        ADMIN_TOKEN,
        json!({"runtime": pod.runtime(), "session": "minted", "profile": "observe",
            "admin_credential": ADMIN_CREDENTIAL}),
    );
    assert_eq!(status, 202, "{minted}");
    let minted_id = minted["id"].as_str().unwrap().to_string();
    let mint = pod
        .mints
        .recv_timeout(WATCHDOG)
        .expect("watchdog: no mint request");
    assert_eq!(
        mint.authorization.as_deref(),
        Some(format!("Bearer {ADMIN_CREDENTIAL}").as_str())
    );
    let (up, mut minted_conn) = pod.next_session();
    assert_eq!(
        up.authorization.as_deref(),
        Some(format!("Bearer {MINTED_SECRET}").as_str())
    );
    let info = minted_conn.call_tool(json!(1), "sys_info", json!({}));
    assert_clean("sys_info under a minted grant", &info.to_string());

    // A failed mint answers 502 with the pod's words, never the credential.
    {
        let mut script = pod.script();
        script.mint_status = 403;
        script.mint_body = json!({"error": "bad credential"});
    }
    let (status, v) = d.attach(
        ADMIN_TOKEN,
        json!({"runtime": pod.runtime(), "session": "refused",
            "admin_credential": ADMIN_CREDENTIAL}),
    );
    assert_eq!(status, 502, "{v}");
    pod.mints.recv_timeout(WATCHDOG).expect("watchdog: no mint");

    // The owner's own `/mcp`, with and without a session.
    assert_env_clean("bash env on /mcp", &d.mcp_env(ADMIN_TOKEN));
    let init = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize",
        "params": {"protocolVersion": "2025-06-18", "capabilities": {},
                   "clientInfo": {"name": "secrets-test", "version": "0"}}});
    let (status, _) = d.json(ADMIN_TOKEN, "POST", "/mcp", Some(&init));
    assert_eq!(status, 200);

    // Every read of the grants.
    for path in [
        "/attach".to_string(),
        format!("/attach/{given_id}"),
        format!("/attach/{minted_id}"),
        "/metrics".to_string(),
        "/readyz".to_string(),
    ] {
        let (status, text) = d.call(ADMIN_TOKEN, "GET", &path, None);
        assert_eq!(status, 200, "GET {path}: {text}");
        assert_clean(&format!("GET {path}"), &text);
    }

    // The operator CLI, with the token from the env and from a file.
    let url = format!("http://{}", d.addr);
    let token_file = write_file(&dir, "cli-token", ADMIN_TOKEN);
    for (args, env) in [
        (
            vec!["grants", "--url", url.as_str()],
            vec![("HANDNODE_TOKEN", ADMIN_TOKEN)],
        ),
        (
            vec!["grants", "--json", "--url", url.as_str()],
            vec![("HANDNODE_TOKEN", ADMIN_TOKEN)],
        ),
        (
            vec![
                "grants",
                "--url",
                url.as_str(),
                "--token-file",
                token_file.to_str().unwrap(),
            ],
            vec![],
        ),
    ] {
        let out = run_cli(&args, &env);
        let stdout = String::from_utf8_lossy(&out.stdout);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "{args:?}: {stdout}{stderr}");
        assert!(
            stdout.contains(&given_id),
            "{args:?} lists the grant: {stdout}"
        );
        assert_clean(&format!("handnode {args:?} stdout"), &stdout);
        assert_clean(&format!("handnode {args:?} stderr"), &stderr);
    }

    // Revoke both grants; the pod sees 1000 on each.
    for (id, conn) in [(&given_id, &mut conn), (&minted_id, &mut minted_conn)] {
        let (status, text) = d.call(ADMIN_TOKEN, "DELETE", &format!("/attach/{id}"), None);
        assert_eq!(status, 204, "{text}");
        conn.set_read_timeout(WATCHDOG);
        assert_eq!(conn.expect_close(), 1000);
    }
    let (status, text) = d.call(ADMIN_TOKEN, "GET", "/attach", None);
    assert_eq!(status, 200);
    assert_clean("GET /attach after revoke", &text);

    let log = d.stop();
    // The log really is at trace level and really covers what happened.
    assert!(log.contains("TRACE") || log.contains("DEBUG"), "{log}");
    assert!(log.contains(&given_id) && log.contains(&minted_id), "{log}");
    assert_clean("the daemon log", &log);

    let audit = std::fs::read_to_string(state.join("audit.jsonl")).unwrap();
    assert!(
        audit.contains(&given_id) && audit.contains("\"env\""),
        "{audit}"
    );
    assert_clean("audit.jsonl", &audit);
    let _ = std::fs::remove_dir_all(&dir);
}

/// The token file is in use (named by `HANDNODE_TOKEN_FILE`) and a stale `HANDNODE_TOKEN`
/// sits in the daemon's env: neither value nor variable reaches a child (on `/mcp` or under a
/// grant), the log, or argv.
#[test]
fn token_file_and_env_token_stay_out_of_the_child_env() {
    let dir = temp_dir("secrets-file");
    let token_file = write_file(&dir, "token", &format!("{FILE_TOKEN}\n"));
    let state = dir.join("state");
    let pod = StubPod::start();
    let d = Daemon::start(
        &[
            "--state-dir",
            state.to_str().unwrap(),
            "--config-dir",
            dir.join("config").to_str().unwrap(),
        ],
        &[
            ("HANDNODE_TOKEN_FILE", token_file.to_str().unwrap()),
            ("HANDNODE_TOKEN", DECOY_ENV_TOKEN),
            ("HOME", dir.to_str().unwrap()),
        ],
    );
    assert_clean("the daemon's argv", &proc_cmdline(d.pid));
    // The file wins over the env var.
    let (status, _) = d.json(DECOY_ENV_TOKEN, "GET", "/attach", None);
    assert_eq!(status, 401);
    assert_env_clean("bash env on /mcp", &d.mcp_env(FILE_TOKEN));

    let (status, g) = d.attach(
        FILE_TOKEN,
        json!({"runtime": pod.runtime(), "session": "file", "profile": "owner",
            "secret": ATTACH_SECRET}),
    );
    assert_eq!(status, 202, "{g}");
    let (_, mut conn) = pod.next_session();
    let env = conn.call_tool(json!(1), "bash", json!({"command": "env"}));
    assert_env_clean("bash env under a grant", &bash_stdout(&env));

    let log = d.stop();
    assert!(log.contains("TRACE") || log.contains("DEBUG"), "{log}");
    assert_clean("the daemon log", &log);
    let _ = std::fs::remove_dir_all(&dir);
}
