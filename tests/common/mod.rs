//! Test harness shared by the integration tests: an in-process stub pod (tungstenite
//! server on 127.0.0.1:0 that mints, verifies the bearer, drives MCP turns and closes
//! with any code), a daemon started in-process with turned-down timers, and a raw HTTP
//! client for the admin API. Every blocking read has a watchdog.
#![allow(dead_code, clippy::result_large_err)]

use std::collections::VecDeque;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, Sender};
use handnode::{Config, Daemon, Secret};
use serde_json::{json, Value};
use tungstenite::handshake::server::{ErrorResponse, Request, Response};
use tungstenite::protocol::frame::coding::CloseCode;
use tungstenite::protocol::CloseFrame;
use tungstenite::{Message, WebSocket};

/// Longest any single wait in a test may take before it fails.
pub const WATCHDOG: Duration = Duration::from_secs(10);

static COUNTER: AtomicU64 = AtomicU64::new(0);

/// A fresh empty directory under the system temp dir.
pub fn temp_dir(tag: &str) -> PathBuf {
    let n = COUNTER.fetch_add(1, Ordering::SeqCst);
    let dir = std::env::temp_dir().join(format!(
        "handnode-test-{tag}-{}-{n}-{}",
        std::process::id(),
        Instant::now().elapsed().as_nanos()
    ));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// Whether AT-SPI's bus launcher is installed (`at-spi2-core`; older Debian and Ubuntu put
/// it under `/usr/lib/at-spi2-core`).
pub fn at_spi_installed() -> bool {
    [
        "/usr/libexec/at-spi-bus-launcher",
        "/usr/lib/at-spi2-core/at-spi-bus-launcher",
    ]
    .iter()
    .any(|p| std::path::Path::new(p).exists())
}

/// `--apps <id>` as `serve` resolves it: `<dir>/share/applications/<id>.desktop` named
/// `name` running `exec`, looked up there and vetted with programs found on `path`.
pub fn listed_app(
    dir: &std::path::Path,
    id: &str,
    name: &str,
    exec: &str,
    path: &str,
) -> Vec<handnode::rules::desktop_entry::DesktopEntry> {
    let apps = dir.join("share/applications");
    std::fs::create_dir_all(&apps).unwrap();
    std::fs::write(
        apps.join(format!("{id}.desktop")),
        format!("[Desktop Entry]\nType=Application\nName={name}\nExec={exec}\n"),
    )
    .unwrap();
    handnode::rules::desktop_entry::resolve_apps(
        &[id.to_string()],
        &handnode::rules::desktop_entry::DataDirs { dirs: vec![apps] },
        path,
    )
    .unwrap()
}

/// What one WebSocket upgrade attempt at the stub pod looked like.
#[derive(Clone, Debug)]
pub struct Upgrade {
    pub path: String,
    pub authorization: Option<String>,
    pub origin: Option<String>,
    /// 101 when accepted, else the refusal status.
    pub status: u16,
    pub at: Instant,
}

/// One mint request the stub pod received.
#[derive(Clone, Debug)]
pub struct MintRequest {
    pub path: String,
    pub authorization: Option<String>,
    pub body: Value,
}

/// What the stub pod does next.
#[derive(Debug)]
pub struct Script {
    /// Statuses to refuse the next upgrades with (front first); empty = accept.
    pub refuse: VecDeque<u16>,
    /// Accept only this bearer (else 401). `None` accepts anything.
    pub expect_secret: Option<String>,
    /// Accept TCP but never answer the next N handshakes.
    pub stall_handshakes: usize,
    /// Mint reply: status and body.
    pub mint_status: u16,
    pub mint_body: Value,
    /// While set, mint answers drip: the head and then one byte of (leading whitespace of)
    /// the body every 20 ms, until this channel yields or disconnects; then the rest.
    pub mint_hold: Option<Receiver<()>>,
}

impl Default for Script {
    fn default() -> Self {
        Script {
            refuse: VecDeque::new(),
            expect_secret: None,
            stall_handshakes: 0,
            mint_status: 201,
            mint_body: json!({"secret": "minted-secret", "expires_in_secs": 3600}),
            mint_hold: None,
        }
    }
}

/// An in-process pod on 127.0.0.1.
pub struct StubPod {
    pub addr: SocketAddr,
    pub upgrades: Receiver<Upgrade>,
    pub conns: Receiver<PodConn>,
    pub mints: Receiver<MintRequest>,
    pub script: Arc<Mutex<Script>>,
    /// A second handle on every stalled TCP connection (see `Script::stall_handshakes`),
    /// so a test can watch the daemon give up on it (EOF).
    pub stalls: Receiver<TcpStream>,
    stop: Arc<AtomicBool>,
    stalled: Arc<Mutex<Vec<TcpStream>>>,
}

impl StubPod {
    pub fn start() -> StubPod {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let (up_tx, upgrades) = crossbeam_channel::unbounded();
        let (conn_tx, conns) = crossbeam_channel::unbounded();
        let (mint_tx, mints) = crossbeam_channel::unbounded();
        let (stall_tx, stalls) = crossbeam_channel::unbounded();
        let script = Arc::new(Mutex::new(Script::default()));
        let stop = Arc::new(AtomicBool::new(false));
        let stalled = Arc::new(Mutex::new(Vec::new()));
        {
            let script = Arc::clone(&script);
            let stop = Arc::clone(&stop);
            let stalled = Arc::clone(&stalled);
            std::thread::spawn(move || {
                for stream in listener.incoming() {
                    if stop.load(Ordering::SeqCst) {
                        return;
                    }
                    let Ok(stream) = stream else { continue };
                    let script = Arc::clone(&script);
                    let up_tx = up_tx.clone();
                    let conn_tx = conn_tx.clone();
                    let mint_tx = mint_tx.clone();
                    let stall_tx = stall_tx.clone();
                    let stalled = Arc::clone(&stalled);
                    std::thread::spawn(move || {
                        serve_one(stream, script, up_tx, conn_tx, mint_tx, stalled, stall_tx)
                    });
                }
            });
        }
        StubPod {
            addr,
            upgrades,
            conns,
            mints,
            script,
            stalls,
            stop,
            stalled,
        }
    }

    pub fn runtime(&self) -> String {
        format!("ws://{}", self.addr)
    }

    pub fn script(&self) -> std::sync::MutexGuard<'_, Script> {
        self.script.lock().unwrap()
    }

    /// The next upgrade attempt, or panic after the watchdog.
    pub fn next_upgrade(&self) -> Upgrade {
        self.upgrades
            .recv_timeout(WATCHDOG)
            .expect("watchdog: no upgrade attempt reached the pod")
    }

    /// The next accepted connection, or panic after the watchdog.
    pub fn next_conn(&self) -> PodConn {
        self.conns
            .recv_timeout(WATCHDOG)
            .expect("watchdog: no connection reached the pod")
    }

    /// The next dial, accepted (101), with the pod's first turn (`initialize`) served on it:
    /// the upgrade as the pod saw it and the pod's side of the socket.
    pub fn next_session(&self) -> (Upgrade, PodConn) {
        let up = self.next_upgrade();
        assert_eq!(up.status, 101, "the dial was refused: {up:?}");
        let mut conn = self.next_conn();
        let init = conn.initialize();
        assert_eq!(init["result"]["serverInfo"]["name"], "handnode", "{init}");
        (up, conn)
    }

    /// Assert no upgrade arrives within `quiet`.
    pub fn assert_no_upgrade(&self, quiet: Duration) {
        if let Ok(up) = self.upgrades.recv_timeout(quiet) {
            panic!("unexpected dial: {up:?}");
        }
    }
}

impl Drop for StubPod {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        let _ = TcpStream::connect(self.addr);
        self.stalled.lock().unwrap().clear();
    }
}

fn header_of(req: &Request, name: &str) -> Option<String> {
    req.headers()
        .get(name)
        .and_then(|v| v.to_str().ok())
        .map(str::to_string)
}

fn serve_one(
    stream: TcpStream,
    script: Arc<Mutex<Script>>,
    up_tx: Sender<Upgrade>,
    conn_tx: Sender<PodConn>,
    mint_tx: Sender<MintRequest>,
    stalled: Arc<Mutex<Vec<TcpStream>>>,
    stall_tx: Sender<TcpStream>,
) {
    stream.set_read_timeout(Some(WATCHDOG)).unwrap();
    let mut peek = [0u8; 64];
    let n = match stream.peek(&mut peek) {
        Ok(n) => n,
        Err(_) => return,
    };
    let head = String::from_utf8_lossy(&peek[..n]).to_string();
    if head.starts_with("POST ") && head.contains("/admin/") {
        return serve_mint(stream, &script, &mint_tx);
    }
    {
        let mut s = script.lock().unwrap();
        if s.stall_handshakes > 0 {
            s.stall_handshakes -= 1;
            if let Ok(watch) = stream.try_clone() {
                let _ = stall_tx.send(watch);
            }
            stalled.lock().unwrap().push(stream);
            return;
        }
    }
    let callback = |req: &Request, resp: Response| -> Result<Response, ErrorResponse> {
        let auth = header_of(req, "authorization");
        let mut s = script.lock().unwrap();
        let refuse = s.refuse.pop_front().or_else(|| match &s.expect_secret {
            Some(secret) if auth.as_deref() != Some(&format!("Bearer {secret}")) => Some(401),
            _ => None,
        });
        let status = refuse.unwrap_or(101);
        let _ = up_tx.send(Upgrade {
            path: req.uri().path().to_string(),
            authorization: auth,
            origin: header_of(req, "origin"),
            status,
            at: Instant::now(),
        });
        match refuse {
            None => Ok(resp),
            Some(code) => {
                let mut err = ErrorResponse::new(Some(format!("refused {code}")));
                *err.status_mut() = tungstenite::http::StatusCode::from_u16(code).unwrap();
                Err(err)
            }
        }
    };
    if let Ok(ws) = tungstenite::accept_hdr(stream, callback) {
        let _ = conn_tx.send(PodConn { ws });
    }
}

fn serve_mint(mut stream: TcpStream, script: &Arc<Mutex<Script>>, mint_tx: &Sender<MintRequest>) {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    let (head_end, content_length) = loop {
        let n = match stream.read(&mut chunk) {
            Ok(0) | Err(_) => return,
            Ok(n) => n,
        };
        buf.extend_from_slice(&chunk[..n]);
        if let Some(pos) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            let head = String::from_utf8_lossy(&buf[..pos]).to_string();
            let len = head
                .lines()
                .find_map(|l| {
                    let (k, v) = l.split_once(':')?;
                    k.eq_ignore_ascii_case("content-length")
                        .then(|| v.trim().parse().ok())?
                })
                .unwrap_or(0usize);
            break (pos + 4, len);
        }
    };
    while buf.len() < head_end + content_length {
        match stream.read(&mut chunk) {
            Ok(0) | Err(_) => break,
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
        }
    }
    let head = String::from_utf8_lossy(&buf[..head_end]).to_string();
    let path = head.split(' ').nth(1).unwrap_or("").to_string();
    let authorization = head.lines().find_map(|l| {
        let (k, v) = l.split_once(':')?;
        k.eq_ignore_ascii_case("authorization")
            .then(|| v.trim().to_string())
    });
    let body: Value = serde_json::from_slice(&buf[head_end..]).unwrap_or(Value::Null);
    let _ = mint_tx.send(MintRequest {
        path,
        authorization,
        body,
    });
    let (status, reply, hold) = {
        let s = script.lock().unwrap();
        (s.mint_status, s.mint_body.to_string(), s.mint_hold.clone())
    };
    let Some(hold) = hold else {
        let _ = write!(
            stream,
            "HTTP/1.1 {status} X\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{reply}",
            reply.len()
        );
        return;
    };
    // Enough whitespace to drip for longer than the watchdog.
    const PAD: usize = 1024;
    let _ = write!(
        stream,
        "HTTP/1.1 {status} X\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        PAD + reply.len()
    );
    let mut sent = 0;
    while sent < PAD {
        match hold.recv_timeout(Duration::from_millis(20)) {
            Err(crossbeam_channel::RecvTimeoutError::Timeout) => {
                if stream.write_all(b" ").is_err() {
                    return;
                }
                sent += 1;
            }
            _ => break,
        }
    }
    let _ = stream.write_all(format!("{}{reply}", " ".repeat(PAD - sent)).as_bytes());
}

/// A read cut short by a signal (with `SO_RCVTIMEO` set, Linux returns `EINTR` instead of
/// restarting the call, e.g. when the process is stopped and continued): just read again.
pub fn is_interrupted(e: &tungstenite::Error) -> bool {
    matches!(e, tungstenite::Error::Io(io) if io.kind() == std::io::ErrorKind::Interrupted)
}

/// The pod's side of one attached socket (blocking, with a watchdog on every read).
pub struct PodConn {
    pub ws: WebSocket<TcpStream>,
}

impl PodConn {
    pub fn set_read_timeout(&mut self, d: Duration) {
        self.ws.get_ref().set_read_timeout(Some(d)).unwrap();
    }

    pub fn send(&mut self, v: &Value) {
        self.ws.send(Message::text(v.to_string())).unwrap();
    }

    pub fn send_msg(&mut self, m: Message) {
        self.ws.send(m).unwrap();
    }

    /// Next data message (text or binary) as JSON, skipping control frames; a tool
    /// result's streams are sliced out of its text block by their ranges into
    /// `structuredContent.stdout`/`stderr` ([`with_streams`]), as a client would.
    pub fn recv(&mut self) -> Value {
        with_streams(self.recv_raw())
    }

    /// Next data message exactly as it came over the wire.
    pub fn recv_raw(&mut self) -> Value {
        loop {
            match self.ws.read() {
                Ok(Message::Text(t)) => return serde_json::from_str(&t).expect("reply is JSON"),
                Ok(Message::Binary(b)) => {
                    return serde_json::from_slice(&b).expect("reply is JSON")
                }
                Ok(Message::Close(f)) => panic!("socket closed while waiting for a reply: {f:?}"),
                Ok(_) => continue,
                Err(e) if is_interrupted(&e) => continue,
                Err(e) => panic!("watchdog or error while waiting for a reply: {e}"),
            }
        }
    }

    /// Read until the close frame and return its code; panics on a data frame or timeout.
    pub fn expect_close(&mut self) -> u16 {
        loop {
            match self.ws.read() {
                Ok(Message::Close(f)) => return f.map(|f| u16::from(f.code)).unwrap_or(1005),
                Ok(Message::Ping(_)) | Ok(Message::Pong(_)) => continue,
                Ok(other) => panic!("expected close, got {other:?}"),
                Err(e) if is_interrupted(&e) => continue,
                Err(e) => panic!("expected close, got error {e}"),
            }
        }
    }

    pub fn request(&mut self, id: Value, method: &str, params: Value) -> Value {
        self.send(&json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}));
        let reply = self.recv();
        assert_eq!(reply["id"], id, "reply to a different request: {reply}");
        reply
    }

    /// The pod's first turn: `initialize`, as the real pod sends it.
    pub fn initialize(&mut self) -> Value {
        self.request(
            json!("init"),
            "initialize",
            json!({"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "stub-pod", "version": "0"}}),
        )
    }

    /// A JSON-RPC `ping`; the reply (its `result` is `{}` when answered).
    pub fn ping(&mut self, id: Value) -> Value {
        self.request(id, "ping", json!({}))
    }

    pub fn call_tool(&mut self, id: Value, name: &str, args: Value) -> Value {
        self.request(id, "tools/call", json!({"name": name, "arguments": args}))
    }

    /// Write bytes straight onto the TCP stream, bypassing the WebSocket framing.
    pub fn send_raw(&mut self, bytes: &[u8]) {
        let s = self.ws.get_mut();
        s.write_all(bytes).unwrap();
        s.flush().unwrap();
    }

    /// Abort the TCP connection: `SO_LINGER` 0 then close, so the daemon gets a RST.
    pub fn reset(self) {
        rustix::net::sockopt::set_socket_linger(self.ws.get_ref(), Some(Duration::ZERO)).unwrap();
        drop(self);
    }

    /// Send FIN (no more data from the pod) but keep reading.
    pub fn shutdown_write(&mut self) {
        self.ws
            .get_ref()
            .shutdown(std::net::Shutdown::Write)
            .unwrap();
    }

    /// Read until the socket ends without a close frame; returns how many Ping frames
    /// arrived first. Panics on a data frame, a close frame, or the watchdog.
    pub fn pings_until_dropped(&mut self) -> usize {
        let mut pings = 0;
        loop {
            match self.ws.read() {
                Ok(Message::Ping(_)) => pings += 1,
                Ok(Message::Pong(_)) => {}
                Ok(other) => panic!("expected pings then a dropped socket, got {other:?}"),
                Err(e) if is_interrupted(&e) => continue,
                Err(tungstenite::Error::Io(e))
                    if matches!(
                        e.kind(),
                        std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                    ) =>
                {
                    panic!("watchdog: the daemon never dropped the socket")
                }
                Err(_) => return pings,
            }
        }
    }

    pub fn close(&mut self, code: u16) {
        let _ = self.ws.close(Some(CloseFrame {
            code: CloseCode::from(code),
            reason: "stub".into(),
        }));
        // Drive the close handshake briefly; the daemon may already be gone.
        let deadline = Instant::now() + Duration::from_secs(2);
        self.set_read_timeout(Duration::from_millis(200));
        while Instant::now() < deadline {
            match self.ws.read() {
                Ok(_) => continue,
                Err(tungstenite::Error::Io(e))
                    if matches!(
                        e.kind(),
                        std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                    ) =>
                {
                    continue
                }
                Err(_) => break,
            }
        }
    }
}

/// A `POST /attach` body for `pod` with a given secret (`s3cret-attach`).
pub fn attach_body(pod: &StubPod, session: &str, profile: &str) -> Value {
    json!({"runtime": pod.runtime(), "session": session, "profile": profile, "secret": "s3cret-attach"})
}

/// A config for in-process tests: loopback on an ephemeral port, a token, fast timers.
pub fn test_config(dir: &std::path::Path) -> Config {
    let mut c = Config::for_tests(dir.join("state"));
    c.token = Some(Secret::new("test-admin-token"));
    c.timing.backoff_base = Duration::from_millis(100);
    c.timing.backoff_cap = Duration::from_millis(400);
    c.timing.backoff_reset = Duration::from_secs(5);
    c.timing.connect_timeout = Duration::from_secs(2);
    c.timing.handshake_timeout = Duration::from_secs(2);
    c.timing.mint_timeout = Duration::from_secs(2);
    c.timing.admin_io_timeout = Duration::from_secs(2);
    c
}

/// Liveness timers (ping interval, silence limit) of 30 s, longer than any test: no ping
/// and no silence timeout comes between a test and what it drives.
pub fn quiet_liveness(c: &mut Config) {
    c.timing.silence_limit = Duration::from_secs(30);
    c.timing.ping_interval = Duration::from_secs(30);
}

/// A daemon started in-process.
pub struct TestDaemon {
    pub daemon: Option<Daemon>,
    pub addr: SocketAddr,
    pub token: String,
    pub dir: PathBuf,
}

impl TestDaemon {
    pub fn start(config: Config, dir: PathBuf) -> TestDaemon {
        let token = config
            .token
            .as_ref()
            .map(|t| t.expose().to_string())
            .unwrap_or_default();
        let daemon = Daemon::start(config).expect("daemon starts");
        let addr = daemon.local_addr().unwrap();
        TestDaemon {
            daemon: Some(daemon),
            addr,
            token,
            dir,
        }
    }

    pub fn new(tag: &str) -> TestDaemon {
        let dir = temp_dir(tag);
        TestDaemon::start(test_config(&dir), dir)
    }

    pub fn with(tag: &str, tweak: impl FnOnce(&mut Config)) -> TestDaemon {
        let dir = temp_dir(tag);
        let mut c = test_config(&dir);
        tweak(&mut c);
        TestDaemon::start(c, dir)
    }

    pub fn state_dir(&self) -> PathBuf {
        self.dir.join("state")
    }

    /// A request with the admin token.
    pub fn call(&self, method: &str, path: &str, body: Option<&Value>) -> (u16, Value) {
        admin_call(self.addr, &self.token, method, path, body)
    }

    pub fn attach(&self, body: Value) -> Value {
        let (status, v) = self.call("POST", "/attach", Some(&body));
        assert_eq!(status, 202, "POST /attach: {v}");
        v
    }

    /// Attach with `body`, accept the dial and serve the pod's first turn; returns the grant
    /// id and the pod's socket once the grant is `attached`.
    pub fn attached_with(&self, pod: &StubPod, body: Value) -> (String, PodConn) {
        let g = self.attach(body);
        let id = g["id"].as_str().expect("grant id").to_string();
        let (_, conn) = pod.next_session();
        self.wait_grant(&id, "attached", |g| g["state"] == "attached");
        (id, conn)
    }

    /// [`TestDaemon::attached_with`] the [`attach_body`] for `session` and `profile`.
    pub fn attached(&self, pod: &StubPod, session: &str, profile: &str) -> (String, PodConn) {
        self.attached_with(pod, attach_body(pod, session, profile))
    }

    /// A raw request with the admin token plus `headers`: for replies that are not JSON
    /// (`/metrics`) and for checks that vary one other header.
    pub fn raw(
        &self,
        method: &str,
        path: &str,
        headers: &[(&str, &str)],
        body: Option<&[u8]>,
    ) -> (u16, Vec<(String, String)>, Vec<u8>) {
        let auth = format!("Bearer {}", self.token);
        let mut all = vec![("Authorization", auth.as_str())];
        all.extend_from_slice(headers);
        http(self.addr, method, path, &all, body)
    }

    pub fn grant(&self, id: &str) -> Value {
        let (status, v) = self.call("GET", &format!("/attach/{id}"), None);
        assert_eq!(status, 200, "{v}");
        v
    }

    /// Wait until the grant's JSON satisfies `pred` (the daemon has no push channel for
    /// state, so this re-reads it), or fail after the watchdog.
    pub fn wait_grant(&self, id: &str, what: &str, pred: impl Fn(&Value) -> bool) -> Value {
        poll_until(
            || self.grant(id),
            pred,
            |g| format!("watchdog: grant never became {what}: {g}"),
        )
    }

    /// `audit.jsonl` once it satisfies `pred`, or fail after the watchdog: tool-call
    /// records are written by the audit thread within one fsync interval, not before the
    /// reply.
    pub fn wait_audit(&self, what: &str, pred: impl Fn(&str) -> bool) -> String {
        poll_until(
            || std::fs::read_to_string(self.state_dir().join("audit.jsonl")).unwrap_or_default(),
            |audit| pred(audit),
            |audit| format!("watchdog: audit.jsonl never had {what}: {audit}"),
        )
    }

    pub fn stop(&mut self) {
        self.daemon.take();
    }
}

impl Drop for TestDaemon {
    fn drop(&mut self) {
        self.daemon.take();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// Run the real `handnode` CLI (`args` and `--url` of `d`, its token in the environment):
/// exit code, stdout, stderr.
pub fn cli(d: &TestDaemon, args: &[&str]) -> (i32, String, String) {
    let url = format!("http://{}", d.addr);
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_handnode"))
        .args(args)
        .args(["--url", &url])
        .env("HANDNODE_TOKEN", &d.token)
        .stdin(std::process::Stdio::null())
        .output()
        .expect("run handnode");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// An admin API request with `token`; the body, when given, is JSON. A reply that is not
/// JSON comes back as a JSON string.
pub fn admin_call(
    addr: SocketAddr,
    token: &str,
    method: &str,
    path: &str,
    body: Option<&Value>,
) -> (u16, Value) {
    let auth = format!("Bearer {token}");
    let body = body.map(|b| b.to_string());
    let (status, _, text) = http(
        addr,
        method,
        path,
        &[
            ("Authorization", auth.as_str()),
            ("Content-Type", "application/json"),
        ],
        body.as_deref().map(str::as_bytes),
    );
    let v = serde_json::from_slice(&text)
        .unwrap_or(Value::String(String::from_utf8_lossy(&text).into()));
    (status, v)
}

/// A raw HTTP/1.1 request (Connection: close) so tests control every header.
pub fn http(
    addr: SocketAddr,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: Option<&[u8]>,
) -> (u16, Vec<(String, String)>, Vec<u8>) {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(WATCHDOG)).unwrap();
    let mut req = format!("{method} {path} HTTP/1.1\r\nConnection: close\r\n");
    if !headers.iter().any(|(k, _)| k.eq_ignore_ascii_case("host")) {
        req.push_str(&format!("Host: {addr}\r\n"));
    }
    for (k, v) in headers {
        req.push_str(&format!("{k}: {v}\r\n"));
    }
    if let Some(b) = body {
        req.push_str(&format!("Content-Length: {}\r\n", b.len()));
    }
    req.push_str("\r\n");
    s.write_all(req.as_bytes()).unwrap();
    if let Some(b) = body {
        // A server may answer (413, 401, …) and close before reading a large body; the
        // answer is already queued here, so a write cut short is not the test's failure.
        if let Err(e) = s.write_all(b) {
            assert!(
                matches!(
                    e.kind(),
                    std::io::ErrorKind::BrokenPipe | std::io::ErrorKind::ConnectionReset
                ),
                "sending the body: {e}"
            );
        }
    }
    read_response(&mut s)
}

pub fn read_response(s: &mut TcpStream) -> (u16, Vec<(String, String)>, Vec<u8>) {
    let mut raw = Vec::new();
    let _ = s.read_to_end(&mut raw);
    let (status, headers, body, _) = parse_response(&raw).unwrap_or_else(|e| {
        panic!(
            "no HTTP response ({e}): {:?}",
            String::from_utf8_lossy(&raw)
        )
    });
    (status, headers, body)
}

/// Status, headers, body, and the bytes of the raw input the response took.
pub type ParsedResponse = (u16, Vec<(String, String)>, Vec<u8>, usize);

/// One HTTP/1.1 response from the front of `raw`, as the tests read what the daemon sent on
/// a raw socket: status, headers (names lower-case, values trimmed), the body (sized, chunked
/// as tiny_http sends bodies of 32 KiB and more, or up to the end) and how many bytes of
/// `raw` it took. The daemon's own client is ureq; this reader is for tests only.
pub fn parse_response(raw: &[u8]) -> Result<ParsedResponse, String> {
    let mut slots = [httparse::EMPTY_HEADER; 128];
    let mut parsed = httparse::Response::new(&mut slots);
    let head_len = match parsed.parse(raw).map_err(|e| e.to_string())? {
        httparse::Status::Complete(n) => n,
        httparse::Status::Partial => return Err("the response head is cut".into()),
    };
    let status = parsed.code.unwrap_or(0);
    let headers: Vec<(String, String)> = parsed
        .headers
        .iter()
        .map(|h| {
            let value = String::from_utf8_lossy(h.value).trim().to_string();
            (h.name.to_ascii_lowercase(), value)
        })
        .collect();
    let value = |name: &str| {
        headers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.to_ascii_lowercase())
    };
    let rest = &raw[head_len..];
    if status / 100 == 1 || status == 204 || status == 304 {
        return Ok((status, headers, Vec::new(), head_len));
    }
    if value("transfer-encoding").is_some_and(|v| v.contains("chunked")) {
        let mut body = Vec::new();
        let mut at = 0;
        loop {
            let line_end = rest[at..]
                .windows(2)
                .position(|w| w == b"\r\n")
                .ok_or("a chunk size line is cut")?;
            let line = String::from_utf8_lossy(&rest[at..at + line_end]).to_string();
            let digits = line.split(';').next().unwrap_or("").trim();
            let size = usize::from_str_radix(digits, 16)
                .map_err(|_| format!("bad chunk size {line:?}"))?;
            at += line_end + 2;
            if size == 0 {
                // No trailers from tiny_http: the blank line ends the message.
                let end = rest[at..]
                    .windows(2)
                    .position(|w| w == b"\r\n")
                    .ok_or("the last chunk is cut")?;
                return Ok((status, headers, body, head_len + at + end + 2));
            }
            let chunk = rest.get(at..at + size).ok_or("a chunk is cut")?;
            body.extend_from_slice(chunk);
            at += size + 2;
        }
    }
    if let Some(length) = value("content-length") {
        let n: usize = length
            .parse()
            .map_err(|_| format!("Content-Length {length:?}"))?;
        let body = rest.get(..n).ok_or("the body is cut")?.to_vec();
        return Ok((status, headers, body, head_len + n));
    }
    Ok((status, headers, rest.to_vec(), raw.len()))
}

/// One unmasked WebSocket frame as a server (the pod) sends it.
pub fn raw_frame(opcode: u8, fin: bool, payload: &[u8]) -> Vec<u8> {
    let mut out = vec![(if fin { 0x80 } else { 0 }) | opcode];
    out.extend(raw_frame_len(payload.len() as u64));
    out.extend_from_slice(payload);
    out
}

/// The length bytes of a server frame header (mask bit clear).
pub fn raw_frame_len(len: u64) -> Vec<u8> {
    if len < 126 {
        vec![len as u8]
    } else if len <= u16::MAX as u64 {
        let mut v = vec![126];
        v.extend_from_slice(&(len as u16).to_be_bytes());
        v
    } else {
        let mut v = vec![127];
        v.extend_from_slice(&len.to_be_bytes());
        v
    }
}

/// Read one frame the daemon (a client, so masked) sent: `(opcode, unmasked payload)`.
pub fn read_raw_frame(s: &mut impl Read) -> std::io::Result<(u8, Vec<u8>)> {
    let mut head = [0u8; 2];
    s.read_exact(&mut head)?;
    let opcode = head[0] & 0x0f;
    let masked = head[1] & 0x80 != 0;
    let len = match head[1] & 0x7f {
        126 => {
            let mut b = [0u8; 2];
            s.read_exact(&mut b)?;
            u16::from_be_bytes(b) as u64
        }
        127 => {
            let mut b = [0u8; 8];
            s.read_exact(&mut b)?;
            u64::from_be_bytes(b)
        }
        n => n as u64,
    };
    let mut mask = [0u8; 4];
    if masked {
        s.read_exact(&mut mask)?;
    }
    let mut payload = vec![0u8; len as usize];
    s.read_exact(&mut payload)?;
    if masked {
        for (i, b) in payload.iter_mut().enumerate() {
            *b ^= mask[i % 4];
        }
    }
    Ok((opcode, payload))
}

/// Re-read `read()` every 10 ms until `done` holds of the reading and return it, or panic
/// with `failure(&last reading)` once the watchdog has passed. For state the daemon has no
/// push channel for (grant JSON, files, `/proc`).
pub fn poll_until<T>(
    mut read: impl FnMut() -> T,
    done: impl Fn(&T) -> bool,
    failure: impl Fn(&T) -> String,
) -> T {
    let deadline = Instant::now() + WATCHDOG;
    loop {
        let now = read();
        if done(&now) {
            return now;
        }
        assert!(Instant::now() < deadline, "{}", failure(&now));
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Open descriptors and threads of a process (`None` = this one), from `/proc`.
pub fn fds_and_threads(pid: Option<u32>) -> (usize, usize) {
    let base = match pid {
        Some(p) => format!("/proc/{p}"),
        None => "/proc/self".to_string(),
    };
    // Never 0 for a directory that cannot be read: that would make every leak check pass.
    // The real daemon is not dumpable (src/base/hardening.rs), so its fd dir needs root or
    // CAP_SYS_PTRACE, as it does for any other process of its user.
    let count =
        |dir: &str| {
            std::fs::read_dir(dir).map(|d| d.count()).unwrap_or_else(|e| {
            panic!("cannot read {dir}: {e} (a non-dumpable daemon's needs root or CAP_SYS_PTRACE)")
        })
        };
    (count(&format!("{base}/fd")), count(&format!("{base}/task")))
}

/// Resident memory of a process in KiB (`None` = this one), from `/proc/<pid>/status`.
pub fn vm_rss_kib(pid: Option<u32>) -> u64 {
    let path = match pid {
        Some(p) => format!("/proc/{p}/status"),
        None => "/proc/self/status".to_string(),
    };
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or(0)
}

/// Thread names (`comm`) of a process (`None` = this one).
pub fn thread_names(pid: Option<u32>) -> Vec<String> {
    let dir = match pid {
        Some(p) => format!("/proc/{p}/task"),
        None => "/proc/self/task".to_string(),
    };
    std::fs::read_dir(dir)
        .map(|d| {
            d.filter_map(|e| std::fs::read_to_string(e.ok()?.path().join("comm")).ok())
                .map(|c| c.trim().to_string())
                .collect()
        })
        .unwrap_or_default()
}

/// Prefixes of the names the daemon gives its own threads.
pub const DAEMON_THREAD_PREFIXES: [&str; 10] = [
    "worker-",
    "grant",
    "audit",
    "process-watche",
    "admin-",
    "mcp-call",
    "mint",
    "upstream",
    "approvals",
    "notify-ask",
];

/// This process's threads that the daemon named (see [`DAEMON_THREAD_PREFIXES`]).
pub fn daemon_threads_here() -> Vec<String> {
    thread_names(None)
        .into_iter()
        .filter(|n| DAEMON_THREAD_PREFIXES.iter().any(|p| n.starts_with(p)))
        .collect()
}

/// The daemon's bounded pools (`worker-N`, `admin-N`): their threads start on demand, up to
/// their caps, and stay, so how many exist after a run depends on how requests overlapped.
pub const POOL_THREAD_PREFIXES: [&str; 2] = ["worker-", "admin-"];

/// Threads of a process in the pools of [`POOL_THREAD_PREFIXES`] starting with `prefix`.
pub fn pool_threads(pid: Option<u32>, prefix: &str) -> usize {
    thread_names(pid)
        .iter()
        .filter(|n| n.starts_with(prefix))
        .count()
}

/// Open descriptors and the threads outside the pools: what must return to a baseline.
pub fn fds_and_threads_outside_pools(pid: Option<u32>) -> (usize, usize) {
    let fds = fds_and_threads(pid).0;
    let threads = thread_names(pid)
        .iter()
        .filter(|n| !POOL_THREAD_PREFIXES.iter().any(|p| n.starts_with(p)))
        .count();
    (fds, threads)
}

/// Wait (watchdog-bounded) until a process's descriptors and threads are back at or below
/// `baseline` plus `slack`; returns the final counts, or panics with both sets of numbers.
pub fn settle_counts(
    pid: Option<u32>,
    baseline: (usize, usize),
    slack: (usize, usize),
    what: &str,
) -> (usize, usize) {
    settle(|| fds_and_threads(pid), baseline, slack, what)
}

/// [`settle_counts`] with another way of counting (e.g. [`fds_and_threads_outside_pools`]).
pub fn settle(
    count: impl Fn() -> (usize, usize),
    baseline: (usize, usize),
    slack: (usize, usize),
    what: &str,
) -> (usize, usize) {
    poll_until(
        count,
        |now| now.0 <= baseline.0 + slack.0 && now.1 <= baseline.1 + slack.1,
        |now| {
            format!(
                "watchdog: after {what}, fds/threads are {now:?}, baseline {baseline:?} \
                 (slack {slack:?})"
            )
        },
    )
}

/// A reply (or a result) with the streams of its text block, located by
/// `structuredContent.stdout_range`/`stderr_range` (UTF-8 byte offsets), added to its
/// `structuredContent` as `stdout`/`stderr`. On the wire each output byte is in the text
/// only (§15); tests read the streams as a structured client would slice them.
pub fn with_streams(mut v: Value) -> Value {
    let at = if v.get("result").is_some() {
        &mut v["result"]
    } else {
        &mut v
    };
    let text = at["content"][0]["text"].as_str().unwrap_or("").to_string();
    let Some(sc) = at
        .get_mut("structuredContent")
        .and_then(Value::as_object_mut)
    else {
        return v;
    };
    for name in ["stdout", "stderr"] {
        let range = sc.get(&format!("{name}_range")).and_then(Value::as_array);
        if let Some([a, b]) = range.map(Vec::as_slice) {
            let (a, b) = (a.as_u64().unwrap() as usize, b.as_u64().unwrap() as usize);
            let slice = text
                .get(a..b)
                .expect("a stream range on character boundaries");
            sc.insert(name.to_string(), Value::String(slice.to_string()));
        }
    }
    v
}

/// The `result` of a JSON-RPC reply, which must not be an error.
pub fn result(reply: &Value) -> &Value {
    assert!(reply.get("error").is_none(), "expected a result: {reply}");
    &reply["result"]
}

/// Whether this box gives the daemon cgroups; prints why not when it does not. As root
/// (CI) it must.
pub fn cgroups_here(grant: &Value) -> bool {
    if grant["containment"] == "cgroup" {
        return true;
    }
    assert!(
        !rustix::process::geteuid().is_root(),
        "root, yet the daemon fell back to the subreaper: {grant}"
    );
    eprintln!(
        "skip: this box gives the daemon no cgroup (not root, no delegated cgroup v2): {grant}"
    );
    false
}

/// A process's argv (empty once it is gone).
pub fn cmdline(pid: u32) -> Vec<String> {
    std::fs::read(format!("/proc/{pid}/cmdline"))
        .unwrap_or_default()
        .split(|b| *b == 0)
        .filter(|a| !a.is_empty())
        .map(|a| String::from_utf8_lossy(a).into_owned())
        .collect()
}

/// The parent of `pid`, from `/proc/<pid>/stat`.
pub fn parent_of(pid: u32) -> Option<u32> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name may hold spaces and parentheses: fields follow the last ')'.
    let rest = &stat[stat.rfind(')')? + 2..];
    rest.split(' ').nth(1)?.parse().ok()
}

/// `pid` itself or a process beneath it whose argv[0] ends with `name` (a walled program
/// runs beneath `bwrap`, §21).
pub fn descendant_running(pid: u32, name: &str) -> Option<u32> {
    let under = |mut p: u32| {
        for _ in 0..64 {
            if p == pid {
                return true;
            }
            match parent_of(p) {
                Some(q) if q > 1 => p = q,
                _ => return false,
            }
        }
        false
    };
    std::fs::read_dir("/proc")
        .ok()?
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .find(|p| cmdline(*p).first().is_some_and(|a| a.ends_with(name)) && under(*p))
}

/// `GET /approvals`: the list and its ETag.
pub fn approvals(d: &TestDaemon, query: &str) -> (u16, Vec<Value>, String) {
    let (status, headers, body) = d.raw("GET", &format!("/approvals{query}"), &[], None);
    let v: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
    let etag = headers
        .iter()
        .find(|(k, _)| k.eq_ignore_ascii_case("etag"))
        .map(|(_, v)| v.clone())
        .unwrap_or_default();
    let list = v["approvals"].as_array().cloned().unwrap_or_default();
    (status, list, etag)
}

/// Wait, through the long-poll (no re-reading on a timer), until `n` approvals are pending.
pub fn wait_pending(d: &TestDaemon, n: usize) -> Vec<Value> {
    let deadline = Instant::now() + WATCHDOG;
    let (_, mut list, mut etag) = approvals(d, "");
    while list.len() != n {
        assert!(
            Instant::now() < deadline,
            "watchdog: never {n} pending: {list:?}"
        );
        let (status, next, next_etag) = approvals(d, &format!("?wait=5&seen={etag}"));
        assert_eq!(status, 200);
        (list, etag) = (next, next_etag);
    }
    list
}
