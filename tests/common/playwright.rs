//! Test helpers for the real browser upstream: whether Playwright MCP and chromium are
//! installed, a local page to browse, the upstream started and stopped through
//! `scripts/upstream.sh`, and an MCP connection driven through the dispatcher and catalogue.
//! Include with `#[path = "common/playwright.rs"] mod playwright;`.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use handnode::pool::{CallCtl, Completion};
use handnode::profiles::Profile;
use handnode::tools::policy::ToolPolicy;
use handnode::tools::{
    self, CallContext, CallLimits, ConnCatalog, ToolConfig, ToolHost, UpstreamSource,
};
use handnode::wire::mcp::{tool_reply, Action, Dispatcher, Route, ToolOutput};
use serde_json::{json, Value};

/// Longest one tool call may take in these tests (the first one launches chromium).
pub const CALL_WATCHDOG: Duration = Duration::from_secs(90);
/// Longest `scripts/upstream.sh start` may wait for the port; the watchdog adds a margin.
pub const START_TIMEOUT_SECS: u64 = 60;
/// Text the local page shows; `browser_snapshot` must return it.
pub const PAGE_TEXT: &str = "handnode upstream test page 5b1e";
/// Debian's chromium, as `scripts/upstream.sh` uses it.
pub const CHROMIUM: &str = "/usr/lib/chromium/chromium";

pub fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// The npm prefix `scripts/ci/playwright.sh` installs into.
pub fn prefix() -> PathBuf {
    match std::env::var_os("PLAYWRIGHT_MCP_PREFIX") {
        Some(p) => PathBuf::from(p),
        None => repo().join("target/playwright-mcp"),
    }
}

/// The pinned Playwright MCP on stdio as a browser-tier grant runs it: headless, isolated,
/// Debian's chromium. Chromium's sandbox cannot run as root (scripts/upstream.sh does the
/// same). The tests and the benchmark both use this one.
pub fn browser_command() -> Vec<String> {
    let cli = prefix().join("node_modules/@playwright/mcp/cli.js");
    let mut argv: Vec<String> = vec![
        "node".into(),
        cli.display().to_string(),
        "--headless".into(),
        "--isolated".into(),
        "--browser".into(),
        "chromium".into(),
        "--executable-path".into(),
        CHROMIUM.into(),
    ];
    if rustix::process::geteuid().is_root() {
        argv.push("--no-sandbox".into());
    }
    argv
}

/// Why the real-upstream tests cannot run here, or `None` when they can.
pub fn missing() -> Option<String> {
    let cli = prefix().join("node_modules/@playwright/mcp/cli.js");
    if !cli.is_file() {
        return Some(format!(
            "{} is missing; run scripts/ci/playwright.sh",
            cli.display()
        ));
    }
    if !Path::new(CHROMIUM).is_file() {
        return Some(format!("{CHROMIUM} is missing; apt-get install chromium"));
    }
    let node = Command::new("node").arg("--version").output();
    if !node.is_ok_and(|o| o.status.success()) {
        return Some("node is not on PATH; apt-get install nodejs".into());
    }
    None
}

/// A port that was free a moment ago on 127.0.0.1.
pub fn free_port() -> u16 {
    let l = std::net::TcpListener::bind("127.0.0.1:0").expect("bind 127.0.0.1:0");
    l.local_addr().unwrap().port()
}

/// A fresh directory under the system temp dir, removed on drop.
pub struct TempDir(pub PathBuf);

impl TempDir {
    pub fn new(tag: &str) -> TempDir {
        static N: AtomicU64 = AtomicU64::new(0);
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .subsec_nanos();
        let dir = std::env::temp_dir().join(format!(
            "handnode-{tag}-{}-{}-{nanos}",
            std::process::id(),
            N.fetch_add(1, Ordering::SeqCst)
        ));
        std::fs::create_dir_all(&dir).expect("create temp dir");
        TempDir(dir)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A one-page web site on 127.0.0.1 showing [`PAGE_TEXT`].
pub struct PageServer {
    server: Arc<tiny_http::Server>,
    thread: Option<JoinHandle<()>>,
    pub url: String,
}

impl PageServer {
    pub fn start() -> PageServer {
        let server = Arc::new(tiny_http::Server::http("127.0.0.1:0").expect("page server"));
        let port = server.server_addr().to_ip().unwrap().port();
        let s = server.clone();
        let thread = std::thread::spawn(move || {
            while let Ok(rq) = s.recv() {
                let resp = if rq.url() == "/" || rq.url() == "/index.html" {
                    let html = format!(
                        "<!doctype html><html><head><title>handnode test</title></head>\
                         <body><h1>{PAGE_TEXT}</h1><p>served for the upstream test</p></body></html>"
                    );
                    tiny_http::Response::from_string(html).with_header(
                        tiny_http::Header::from_bytes("Content-Type", "text/html; charset=utf-8")
                            .unwrap(),
                    )
                } else {
                    tiny_http::Response::from_string("not found").with_status_code(404)
                };
                let _ = rq.respond(resp);
            }
        });
        PageServer {
            server,
            thread: Some(thread),
            url: format!("http://127.0.0.1:{port}/"),
        }
    }
}

impl Drop for PageServer {
    fn drop(&mut self) {
        self.server.unblock();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// The real Playwright MCP server, run by `scripts/upstream.sh` on its own port and
/// directory. Dropping it stops it.
pub struct Playwright {
    pub port: u16,
    dir: TempDir,
    /// `--caps` it runs with (`PLAYWRIGHT_MCP_CAPS`); empty for none.
    caps: String,
    /// More environment for `scripts/upstream.sh`.
    env: Vec<(String, String)>,
    /// One Playwright at a time in a test binary: two starting together on a loaded
    /// 2-core box made one exit during start-up with an empty log.
    _one_at_a_time: std::sync::MutexGuard<'static, ()>,
}

static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());

impl Playwright {
    pub fn start() -> Playwright {
        Playwright::with_caps("")
    }

    /// Started with `--caps caps` (e.g. `vision,pdf,devtools`): the extra tool groups.
    pub fn with_caps(caps: &str) -> Playwright {
        let pw = Playwright::on_port(free_port(), caps, Vec::new());
        pw.run("start");
        pw
    }

    /// Not started yet: on `port`, with `env` added to `scripts/upstream.sh`'s (such as
    /// `HANDNODE_LISTEN`, whose origins it blocks). [`Playwright::restart`] starts it.
    pub fn on_port(port: u16, caps: &str, env: Vec<(String, String)>) -> Playwright {
        let guard = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
        Playwright {
            _one_at_a_time: guard,
            port,
            dir: TempDir::new("playwright"),
            caps: caps.to_string(),
            env,
        }
    }

    /// The installed `@playwright/mcp` version, from its package.json.
    pub fn installed_version() -> Option<String> {
        let path = prefix().join("node_modules/@playwright/mcp/package.json");
        let text = std::fs::read_to_string(path).ok()?;
        let json: Value = serde_json::from_str(&text).ok()?;
        json["version"].as_str().map(str::to_string)
    }

    pub fn url(&self) -> String {
        format!("http://127.0.0.1:{}/mcp", self.port)
    }

    /// Start again on the same port after [`Playwright::stop`].
    pub fn restart(&self) {
        self.run("start");
    }

    /// Stop it and every process it started; returns when they are gone.
    pub fn stop(&self) {
        self.run("stop");
    }

    pub fn running(&self) -> bool {
        self.script("status").status.success()
    }

    fn script(&self, action: &str) -> std::process::Output {
        let mut cmd = Command::new("bash");
        cmd.arg(repo().join("scripts/upstream.sh"))
            .arg(action)
            .arg(self.port.to_string())
            .env("HANDNODE_UPSTREAM_DIR", &self.dir.0)
            .env("PLAYWRIGHT_MCP_PREFIX", prefix())
            .env("PLAYWRIGHT_MCP_CAPS", &self.caps)
            .env("UPSTREAM_START_TIMEOUT", START_TIMEOUT_SECS.to_string())
            .env("UPSTREAM_STOP_TIMEOUT", "10")
            .envs(self.env.iter().map(|(k, v)| (k, v)));
        let (tx, rx) = crossbeam_channel::bounded(1);
        std::thread::spawn(move || {
            let _ = tx.send(cmd.output());
        });
        let watchdog = Duration::from_secs(START_TIMEOUT_SECS + 30);
        rx.recv_timeout(watchdog)
            .unwrap_or_else(|_| panic!("scripts/upstream.sh {action} hung past {watchdog:?}"))
            .expect("run bash")
    }

    fn run(&self, action: &str) {
        let out = self.script(action);
        assert!(
            out.status.success(),
            "scripts/upstream.sh {action} {} failed:\n{}{}",
            self.port,
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

impl Drop for Playwright {
    fn drop(&mut self) {
        let _ = self.script("stop");
    }
}

/// One MCP connection under a profile: messages go through the real dispatcher and
/// catalogue; tool calls run locally or on the upstream, each under a watchdog.
pub struct Conn<'a> {
    pub dispatcher: Dispatcher,
    pub policy: Arc<ToolPolicy>,
    pub upstream: &'a dyn UpstreamSource,
    pub host: Arc<ToolHost>,
    next_id: u64,
}

impl<'a> Conn<'a> {
    pub fn open(profile: Profile, upstream: &'a dyn UpstreamSource) -> Conn<'a> {
        Conn::with_policy(
            ToolPolicy::fixed(profile).expect("a fixed profile"),
            upstream,
        )
    }

    /// A connection under any policy: a custom grant's lists too.
    pub fn with_policy(policy: ToolPolicy, upstream: &'a dyn UpstreamSource) -> Conn<'a> {
        let mut conn = Conn {
            dispatcher: Dispatcher::new(),
            policy: Arc::new(policy),
            upstream,
            host: ToolHost::new(ToolConfig::default()).expect("tool host"),
            next_id: 0,
        };
        let init = conn.request(
            "initialize",
            json!({"protocolVersion": "2025-06-18", "capabilities": {},
                   "clientInfo": {"name": "test", "version": "0"}}),
        );
        assert!(init.get("result").is_some(), "{init}");
        conn.notify("notifications/initialized");
        conn
    }

    /// The catalogue for one message, over a handle of the policy (the dispatcher is
    /// borrowed mutably beside it).
    fn catalog<'b>(upstream: &'b dyn UpstreamSource, policy: &'b ToolPolicy) -> ConnCatalog<'b> {
        ConnCatalog {
            grant: None,
            upstream: Some(upstream),
            browsers: None,
            policy,
        }
    }

    pub fn notify(&mut self, method: &str) {
        let msg = json!({"jsonrpc": "2.0", "method": method}).to_string();
        let policy = Arc::clone(&self.policy);
        let catalog = Self::catalog(self.upstream, &policy);
        let actions = self.dispatcher.handle(msg.as_bytes(), &catalog);
        assert!(
            actions.iter().all(|a| !matches!(a, Action::Reply(_))),
            "{actions:?}"
        );
    }

    /// Send a request; return the JSON-RPC reply.
    pub fn request(&mut self, method: &str, params: Value) -> Value {
        self.next_id += 1;
        let id = json!(self.next_id);
        let msg = json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params});
        let policy = Arc::clone(&self.policy);
        let catalog = Self::catalog(self.upstream, &policy);
        let actions = self.dispatcher.handle(msg.to_string().as_bytes(), &catalog);
        for action in actions {
            match action {
                Action::Reply(text) => return serde_json::from_str(&text).expect("reply JSON"),
                Action::Call {
                    id,
                    name,
                    route,
                    arguments,
                    ..
                } => {
                    let output = self.run_call(&name, route, arguments);
                    let (text, _) = tool_reply(&id, output, 16 << 20);
                    return serde_json::from_str(&text).expect("reply JSON");
                }
                Action::Refused { .. } | Action::Cancel { .. } => {}
            }
        }
        panic!("{method} produced no reply");
    }

    fn run_call(&self, name: &str, route: Route, arguments: Value) -> ToolOutput {
        let (tx, rx) = crossbeam_channel::bounded(1);
        let done = Completion::new(move |out| {
            let _ = tx.send(out);
        });
        let ctl = CallCtl::new();
        match route {
            Route::Local => tools::start_local(
                name,
                arguments,
                CallContext {
                    policy: Arc::clone(&self.policy),
                    grant: None,
                    limits: CallLimits::GRANT,
                    ctl,
                    host: self.host.clone(),
                    principal: "test".into(),
                },
                done,
            ),
            Route::Upstream(i) => self.upstream.call(i, name, arguments, ctl, done),
            Route::Browser => panic!("{name}: no browser tier in this connection"),
        }
        rx.recv_timeout(CALL_WATCHDOG)
            .unwrap_or_else(|_| panic!("{name} did not complete within {CALL_WATCHDOG:?}"))
    }

    /// `tools/list` names, in order.
    pub fn tool_names(&mut self) -> Vec<String> {
        let reply = self.request("tools/list", json!({}));
        reply["result"]["tools"]
            .as_array()
            .unwrap_or_else(|| panic!("tools/list: {reply}"))
            .iter()
            .map(|t| t["name"].as_str().unwrap().to_string())
            .collect()
    }

    /// `tools/call`; returns the whole JSON-RPC reply.
    pub fn call(&mut self, name: &str, arguments: Value) -> Value {
        self.request("tools/call", json!({"name": name, "arguments": arguments}))
    }
}

/// All text blocks of a `tools/call` reply's result, joined.
pub fn result_text(reply: &Value) -> String {
    reply["result"]["content"]
        .as_array()
        .unwrap_or_else(|| panic!("no content in {reply}"))
        .iter()
        .filter_map(|b| b["text"].as_str())
        .collect::<Vec<_>>()
        .join("\n")
}
