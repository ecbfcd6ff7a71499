//! Benchmarks of what handnode adds (issue 5): a release daemon in a real process, a stub
//! pod on loopback inside this process, and every time figure beside a floor measured in
//! the same run, so targets are ratios that survive a noisy shared box.
//!
//! Run through `scripts/bench.sh` (it builds the binaries and starts Xvfb); by hand:
//! `cargo bench --bench bench -- [--bin PATH] [--static-bin PATH --static-libc NAME] [--quick]`.
//! Output: one JSON object per line on stdout (`{"metric","value","unit","floor"}`), then a
//! summary table with each target and pass/fail. Not part of CI: nothing here asserts on
//! time; a missed target is a figure to investigate, not a failing test.
//!
//! Re-executed with `--echo-server` this binary is the raw tungstenite echo server of the
//! `ws_echo_*` floors, so that floor crosses a process boundary just like the daemon does.

// tungstenite's handshake callback type returns its large error by value.
#![allow(clippy::result_large_err)]

#[path = "../tests/common/playwright.rs"]
mod playwright;

use std::collections::{HashMap, HashSet, VecDeque};
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant, SystemTime};

use serde_json::{json, Value};
use tungstenite::handshake::server::{Request, Response};
use tungstenite::protocol::frame::coding::CloseCode;
use tungstenite::protocol::CloseFrame;
use tungstenite::{Message, WebSocket};

/// Argument that turns this binary into the echo server child.
const ECHO_ARG: &str = "--echo-server";
/// The echo child's path that answers every message with a 100-byte frame.
const ECHO_ACK_PATH: &str = "/ack";
/// Largest request body the pod's runtime accepts (bytes): it closes before reading a
/// larger one, so the stub pod refuses to send one (§24).
const POD_BODY_LIMIT: usize = 1 << 20;
/// Longest any single wait may take before the run is abandoned with a message.
const WATCHDOG: Duration = Duration::from_secs(20);
/// Size of one echo-floor text frame (bytes), as the issue specifies.
const ECHO_FRAME_BYTES: usize = 100;
/// Requests in flight in the pipelined figures.
const DEPTH: usize = 64;
/// Bytes of stdout the "screenshot-sized" bash reply carries (the reply is larger: JSON).
const BIG_REPLY_STDOUT_BYTES: usize = 1 << 20;
/// Attach secret the stub pod is handed (it accepts any bearer).
const POD_SECRET: &str = "bench-attach-secret";

// ---------------------------------------------------------------------------------------
// Options

struct Opts {
    bin: PathBuf,
    static_bin: Option<PathBuf>,
    static_libc: String,
    quick: bool,
    /// Run only these sections (see `--help`); the floors always run.
    only: Option<Vec<String>>,
    /// How scripts/bench.sh placed the processes on CPUs (`same`, `cross`, `free`).
    placement: String,
}

/// With `--server-cpu N` the echo server and the daemon (and so its children) run on CPU N,
/// while scripts/bench.sh keeps the bench itself on another: every round trip then crosses
/// CPUs, for the floor and the daemon alike.
static SERVER_CPU: std::sync::OnceLock<Option<usize>> = std::sync::OnceLock::new();

/// A command for a server process: `prog` itself, or `taskset -c N prog` (see [`SERVER_CPU`]).
fn server_command(prog: &Path) -> Command {
    match SERVER_CPU.get().copied().flatten() {
        Some(cpu) => {
            let mut cmd = Command::new("taskset");
            cmd.arg("-c").arg(cpu.to_string()).arg(prog);
            cmd
        }
        None => Command::new(prog),
    }
}

impl Opts {
    fn parse(args: &[String]) -> Opts {
        let mut o = Opts {
            bin: PathBuf::from(env!("CARGO_BIN_EXE_handnode")),
            static_bin: None,
            static_libc: "glibc (+crt-static)".into(),
            quick: false,
            only: None,
            placement: "free".into(),
        };
        let mut server_cpu = None;
        let mut it = args.iter();
        while let Some(a) = it.next() {
            match a.as_str() {
                "--bin" => o.bin = PathBuf::from(it.next().expect("--bin PATH")),
                "--static-bin" => {
                    o.static_bin = Some(PathBuf::from(it.next().expect("--static-bin PATH")))
                }
                "--static-libc" => o.static_libc = it.next().expect("--static-libc NAME").clone(),
                "--quick" => o.quick = true,
                "--placement" => o.placement = it.next().expect("--placement NAME").clone(),
                "--server-cpu" => {
                    let cpu = it.next().expect("--server-cpu N");
                    server_cpu = Some(cpu.parse().expect("--server-cpu takes a CPU number"));
                }
                "--only" => {
                    let list = it.next().expect("--only SECTION[,SECTION]");
                    o.only = Some(list.split(',').map(str::to_string).collect());
                }
                "--help" | "-h" => {
                    println!(
                        "bench [--bin PATH] [--static-bin PATH] [--static-libc NAME] [--quick] \
                         [--only SECTION,...] [--placement NAME] [--server-cpu N]\n\
                         sections: memory, latency (= ping, sys_info, bash, pipelined, hol), \
                         approval, attach, redial, screenshot, browser, audit, jobs, owed, containment, halt, files, a11y, journal"
                    );
                    std::process::exit(0);
                }
                // `cargo bench` passes --bench; other harness flags mean nothing here.
                _ => {}
            }
        }
        SERVER_CPU.set(server_cpu).expect("options are parsed once");
        o
    }

    /// Whether `section` (or the group it belongs to) was asked for.
    fn runs(&self, section: &str) -> bool {
        const LATENCY: [&str; 7] = [
            "ping",
            "sys_info",
            "tools_list",
            "bash",
            "pipelined",
            "hol",
            "mcp_keepalive",
        ];
        self.only.as_ref().is_none_or(|only| {
            only.iter().any(|s| {
                s == section
                    || (s == "latency" && (section == "latency" || LATENCY.contains(&section)))
                    || (section == "latency" && LATENCY.contains(&s.as_str()))
            })
        })
    }

    /// Full counts, or a tenth of them for a smoke run.
    fn n(&self, full: usize) -> usize {
        if self.quick {
            (full / 10).max(5)
        } else {
            full
        }
    }
}

// ---------------------------------------------------------------------------------------
// Statistics and the report

fn percentile(samples: &[f64], q: f64) -> f64 {
    assert!(!samples.is_empty(), "no samples");
    let mut s = samples.to_vec();
    s.sort_by(|a, b| a.partial_cmp(b).unwrap());
    s[((s.len() - 1) as f64 * q).round() as usize]
}

fn us(d: Duration) -> f64 {
    d.as_secs_f64() * 1e6
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

struct Metric {
    name: String,
    value: Option<f64>,
    unit: &'static str,
    floor: Option<f64>,
    note: Option<String>,
}

struct Check {
    metric: String,
    target: String,
    pass: Option<bool>,
}

#[derive(Default)]
struct Report {
    metrics: Vec<Metric>,
    checks: Vec<Check>,
}

impl Report {
    fn emit(&mut self, m: Metric) {
        let mut line =
            json!({"metric": m.name, "value": m.value, "unit": m.unit, "floor": m.floor});
        if let Some(note) = &m.note {
            line["note"] = json!(note);
        }
        println!("{line}");
        let _ = std::io::stdout().flush();
        self.metrics.push(m);
    }

    fn put(&mut self, name: &str, value: f64, unit: &'static str, floor: Option<f64>) {
        self.emit(Metric {
            name: name.into(),
            value: Some(value),
            unit,
            floor,
            note: None,
        });
    }

    fn note(&mut self, name: &str, unit: &'static str, note: String) {
        self.emit(Metric {
            name: name.into(),
            value: None,
            unit,
            floor: None,
            note: Some(note),
        });
    }

    fn get(&self, name: &str) -> Option<f64> {
        self.metrics
            .iter()
            .find(|m| m.name == name)
            .and_then(|m| m.value)
    }

    /// A target: `pass` is `None` when a figure it needs is missing.
    fn check(&mut self, metric: &str, target: String, pass: Option<bool>) {
        self.checks.push(Check {
            metric: metric.into(),
            target,
            pass,
        });
    }

    fn table(&self) {
        println!();
        println!(
            "{:<30} {:>12} {:<6} {:>12}  {:<44} result",
            "metric", "value", "unit", "floor", "target"
        );
        println!("{}", "-".repeat(118));
        let fmt = |v: Option<f64>| match v {
            Some(v) if v.abs() >= 100.0 => format!("{v:.0}"),
            Some(v) => format!("{v:.2}"),
            None => "-".into(),
        };
        for m in &self.metrics {
            let checks: Vec<&Check> = self.checks.iter().filter(|c| c.metric == m.name).collect();
            let (target, result) = match checks.first() {
                Some(c) => (
                    c.target.clone(),
                    match c.pass {
                        Some(true) => "pass",
                        Some(false) => "MISS",
                        None => "n/a",
                    },
                ),
                None => (String::new(), ""),
            };
            println!(
                "{:<30} {:>12} {:<6} {:>12}  {:<44} {}",
                m.name,
                fmt(m.value),
                m.unit,
                fmt(m.floor),
                target,
                result
            );
            if let Some(note) = &m.note {
                println!("    note: {note}");
            }
        }
        let passed = self.checks.iter().filter(|c| c.pass == Some(true)).count();
        let missed: Vec<&str> = self
            .checks
            .iter()
            .filter(|c| c.pass == Some(false))
            .map(|c| c.metric.as_str())
            .collect();
        println!(
            "\n{passed} of {} targets met; missed: {}",
            self.checks.len(),
            if missed.is_empty() {
                "none".to_string()
            } else {
                missed.join(", ")
            }
        );
    }
}

// ---------------------------------------------------------------------------------------
// WebSocket helpers shared by the echo floor and the stub pod

/// Next text or binary message as a string, skipping control frames.
fn recv_text(ws: &mut WebSocket<TcpStream>, what: &str) -> String {
    loop {
        match ws.read() {
            Ok(Message::Text(t)) => return t.as_str().to_owned(),
            Ok(Message::Binary(b)) => return String::from_utf8(b.to_vec()).expect("UTF-8 reply"),
            Ok(Message::Close(f)) => panic!("{what}: socket closed while waiting: {f:?}"),
            Ok(_) => continue,
            Err(e) => panic!("{what}: watchdog or socket error while waiting: {e}"),
        }
    }
}

fn send_text(ws: &mut WebSocket<TcpStream>, text: String) {
    ws.send(Message::text(text)).expect("send a frame");
}

/// The JSON-RPC id of a reply (only numeric ids are used here).
fn reply_id(text: &str) -> u64 {
    #[derive(serde::Deserialize)]
    struct Reply {
        id: Value,
        error: Option<Value>,
    }
    let r: Reply = serde_json::from_str(text)
        .unwrap_or_else(|e| panic!("reply is not JSON-RPC ({e}): {}", clip(text)));
    if let Some(err) = r.error {
        panic!("error reply: {err}");
    }
    r.id.as_u64()
        .unwrap_or_else(|| panic!("non-numeric id: {}", clip(text)))
}

fn clip(text: &str) -> String {
    text.chars().take(300).collect()
}

/// Keep `depth` requests in flight until `total` are answered; returns requests/second.
fn pipelined(
    ws: &mut WebSocket<TcpStream>,
    total: usize,
    depth: usize,
    first_id: u64,
    request: impl Fn(u64) -> String,
    id_of: impl Fn(&str) -> u64,
) -> f64 {
    let mut outstanding = HashSet::new();
    let mut next = first_id;
    let end = first_id + total as u64;
    let start = Instant::now();
    while next < end && outstanding.len() < depth {
        send_text(ws, request(next));
        outstanding.insert(next);
        next += 1;
    }
    while !outstanding.is_empty() {
        let reply = recv_text(ws, "pipelined");
        let id = id_of(&reply);
        assert!(outstanding.remove(&id), "unexpected reply id {id}");
        if next < end {
            send_text(ws, request(next));
            outstanding.insert(next);
            next += 1;
        }
    }
    total as f64 / start.elapsed().as_secs_f64()
}

// ---------------------------------------------------------------------------------------
// The echo floor: a raw tungstenite server in a child process

fn echo_server() {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind the echo server");
    println!("{}", listener.local_addr().unwrap().port());
    let _ = std::io::stdout().flush();
    // The parent holds our stdin: when it goes away, so do we.
    std::thread::spawn(|| {
        let _ = std::io::copy(&mut std::io::stdin(), &mut std::io::sink());
        std::process::exit(0);
    });
    for stream in listener.incoming() {
        let Ok(stream) = stream else { continue };
        std::thread::spawn(move || {
            let _ = stream.set_nodelay(true);
            // On ECHO_ACK_PATH each message is answered with a short frame instead of
            // itself: the floor of an upload, whose reply is small.
            let mut ack = false;
            let callback = |req: &Request, resp: Response| {
                ack = req.uri().path() == ECHO_ACK_PATH;
                Ok(resp)
            };
            let Ok(mut ws) = tungstenite::accept_hdr(stream, callback) else {
                return;
            };
            loop {
                match ws.read() {
                    Ok(m @ (Message::Text(_) | Message::Binary(_))) => {
                        let m = if ack { Message::text(echo_frame(0)) } else { m };
                        if ws.send(m).is_err() {
                            return;
                        }
                    }
                    Ok(_) => {}
                    Err(_) => return,
                }
            }
        });
    }
}

struct EchoChild {
    child: Child,
    port: u16,
}

impl EchoChild {
    fn start() -> EchoChild {
        let mut child = server_command(&std::env::current_exe().unwrap())
            .arg(ECHO_ARG)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .expect("start the echo server child");
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        let port = line.trim().parse().expect("echo child prints its port");
        EchoChild { child, port }
    }

    fn connect(&self) -> WebSocket<TcpStream> {
        self.connect_at("/")
    }

    fn connect_at(&self, path: &str) -> WebSocket<TcpStream> {
        let stream = TcpStream::connect(("127.0.0.1", self.port)).unwrap();
        stream.set_nodelay(true).unwrap();
        stream.set_read_timeout(Some(WATCHDOG)).unwrap();
        let (ws, _) = tungstenite::client(format!("ws://127.0.0.1:{}{path}", self.port), stream)
            .expect("echo handshake");
        ws
    }
}

impl Drop for EchoChild {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn echo_frame(id: u64) -> String {
    echo_frame_of(id, ECHO_FRAME_BYTES)
}

/// An echo frame of `bytes` (at least its head) carrying `id`.
fn echo_frame_of(id: u64, bytes: usize) -> String {
    let head = format!("{{\"id\":{id},\"pad\":\"");
    let pad = bytes.saturating_sub(head.len() + 2);
    format!("{head}{}\"}}", "x".repeat(pad))
}

// ---------------------------------------------------------------------------------------
// The daemon under test, in a real process

struct DaemonProc {
    child: Child,
    pid: u32,
    admin: SocketAddr,
    token: String,
    dir: PathBuf,
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

fn random_hex(bytes: usize) -> String {
    let mut b = vec![0u8; bytes];
    getrandom::fill(&mut b).expect("random bytes");
    b.iter().map(|x| format!("{x:02x}")).collect()
}

impl DaemonProc {
    fn start(bin: &Path, dir: &Path, display: Option<&str>) -> DaemonProc {
        DaemonProc::start_with(bin, dir, display, &[])
    }

    /// [`DaemonProc::start`] with more flags.
    fn start_with(bin: &Path, dir: &Path, display: Option<&str>, extra: &[String]) -> DaemonProc {
        DaemonProc::start_env(bin, dir, display, extra, &[])
    }

    /// [`DaemonProc::start_with`] with more environment (a session bus).
    fn start_env(
        bin: &Path,
        dir: &Path,
        display: Option<&str>,
        extra: &[String],
        env: &[(&str, &str)],
    ) -> DaemonProc {
        let port = free_port();
        let token = random_hex(16);
        std::fs::create_dir_all(dir).unwrap();
        let log = std::fs::File::create(dir.join("daemon.log")).unwrap();
        let mut cmd = server_command(bin);
        cmd.args(["--listen", &format!("127.0.0.1:{port}")])
            .arg("--state-dir")
            .arg(dir.join("state"))
            .arg("--config-dir")
            .arg(dir.join("config"))
            .args(["--no-notify", "--no-sd-notify"])
            .args(extra)
            .envs(env.iter().copied())
            .env("HANDNODE_TOKEN", &token)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log);
        for (k, _) in std::env::vars_os() {
            if k.to_string_lossy().starts_with("HANDNODE_") && k != "HANDNODE_TOKEN" {
                cmd.env_remove(k);
            }
        }
        match display {
            Some(d) => {
                cmd.env("DISPLAY", d).args(["--display-backend", "x11"]);
            }
            None => {
                cmd.args(["--display-backend", "none"]);
            }
        }
        let child = cmd.spawn().expect("start handnode");
        let mut d = DaemonProc {
            pid: child.id(),
            child,
            admin: SocketAddr::from(([127, 0, 0, 1], port)),
            token,
            dir: dir.to_path_buf(),
        };
        let deadline = Instant::now() + WATCHDOG;
        loop {
            if let Ok(Some(status)) = d.child.try_wait() {
                panic!(
                    "handnode exited at start ({status}); log:\n{}",
                    std::fs::read_to_string(dir.join("daemon.log")).unwrap_or_default()
                );
            }
            if TcpStream::connect(d.admin).is_ok() && d.http("GET", "/readyz", None).0 == 200 {
                return d;
            }
            assert!(Instant::now() < deadline, "watchdog: handnode never ready");
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    fn state_dir(&self) -> PathBuf {
        self.dir.join("state")
    }

    /// `(VmRSS, RssAnon)` in KiB.
    fn rss_kib(&self) -> (f64, f64) {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.pid)).unwrap();
        let field = |name: &str| -> f64 {
            status
                .lines()
                .find_map(|l| l.strip_prefix(name))
                .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
                .unwrap_or_else(|| panic!("no {name} in /proc/{}/status", self.pid))
        };
        (field("VmRSS:"), field("RssAnon:"))
    }

    /// On-CPU time of every live thread of the daemon so far (`schedstat`, ns).
    fn cpu_ns(&self) -> u64 {
        std::fs::read_dir(format!("/proc/{}/task", self.pid))
            .unwrap()
            .filter_map(|t| std::fs::read_to_string(t.ok()?.path().join("schedstat")).ok())
            .filter_map(|s| s.split(' ').next()?.parse::<u64>().ok())
            .sum()
    }

    fn threads(&self) -> usize {
        std::fs::read_dir(format!("/proc/{}/task", self.pid))
            .map(|d| d.count())
            .unwrap_or(0)
    }

    /// Write a request and return the open stream (the caller reads the response).
    fn send_request(&self, method: &str, path: &str, body: Option<&Value>) -> TcpStream {
        let mut s = TcpStream::connect(self.admin).unwrap();
        s.set_nodelay(true).unwrap();
        s.set_read_timeout(Some(WATCHDOG)).unwrap();
        let body = body.map(|b| b.to_string()).unwrap_or_default();
        let req = format!(
            "{method} {path} HTTP/1.1\r\nHost: {}\r\nConnection: close\r\nAuthorization: Bearer {}\r\n\
             Content-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
            self.admin,
            self.token,
            body.len()
        );
        s.write_all(req.as_bytes()).unwrap();
        s
    }

    fn read_response(mut s: TcpStream) -> (u16, Value) {
        let mut raw = Vec::new();
        let _ = s.read_to_end(&mut raw);
        let text = String::from_utf8_lossy(&raw);
        let (head, body) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
        let status = head
            .split(' ')
            .nth(1)
            .and_then(|s| s.parse().ok())
            .unwrap_or_else(|| panic!("bad HTTP response: {}", clip(&text)));
        let v = serde_json::from_str(body).unwrap_or(Value::String(body.into()));
        (status, v)
    }

    fn http(&self, method: &str, path: &str, body: Option<&Value>) -> (u16, Value) {
        DaemonProc::read_response(self.send_request(method, path, body))
    }

    fn attach(&self, pod: &Pod, session: &str, profile: &str) -> String {
        let body = json!({"runtime": pod.runtime(), "session": session, "profile": profile,
                          "ttl_secs": 3600, "secret": POD_SECRET});
        let (status, v) = self.http("POST", "/attach", Some(&body));
        assert_eq!(status, 202, "POST /attach: {v}");
        v["id"].as_str().expect("grant id").to_string()
    }

    fn revoke(&self, id: &str) {
        let (status, v) = self.http("DELETE", &format!("/attach/{id}"), None);
        assert_eq!(status, 204, "DELETE /attach/{id}: {v}");
    }
}

impl Drop for DaemonProc {
    fn drop(&mut self) {
        if let Some(pid) = rustix::process::Pid::from_raw(self.pid as i32) {
            let _ = rustix::process::kill_process(pid, rustix::process::Signal::TERM);
        }
        let deadline = Instant::now() + Duration::from_secs(5);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

// ---------------------------------------------------------------------------------------
// The stub pod: a tungstenite server on loopback that hands each attach socket to the
// benchmark thread, stamped with when its upgrade request arrived.

struct Arrival {
    session: String,
    /// When the upgrade request reached the pod (before the 101 went out).
    at: Instant,
    conn: PodConn,
}

struct Pod {
    addr: SocketAddr,
    arrivals: mpsc::Receiver<Arrival>,
    stash: HashMap<String, VecDeque<Arrival>>,
}

impl Pod {
    fn start() -> Pod {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let (tx, arrivals) = mpsc::channel();
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                let Ok(stream) = stream else { continue };
                let tx = tx.clone();
                std::thread::spawn(move || {
                    let _ = stream.set_nodelay(true);
                    let _ = stream.set_read_timeout(Some(WATCHDOG));
                    let mut seen = None;
                    let callback = |req: &Request, resp: Response| {
                        let session = req
                            .uri()
                            .path()
                            .strip_prefix("/tools/attach/")
                            .unwrap_or("")
                            .to_string();
                        seen = Some((session, Instant::now()));
                        Ok(resp)
                    };
                    if let Ok(ws) = tungstenite::accept_hdr(stream, callback) {
                        let (session, at) = seen.expect("callback ran");
                        let _ = tx.send(Arrival {
                            session,
                            at,
                            conn: PodConn { ws, next_id: 1 },
                        });
                    }
                });
            }
        });
        Pod {
            addr,
            arrivals,
            stash: HashMap::new(),
        }
    }

    fn runtime(&self) -> String {
        format!("ws://{}", self.addr)
    }

    /// The next socket the daemon opened for `session`.
    fn arrival(&mut self, session: &str) -> Arrival {
        if let Some(a) = self.stash.get_mut(session).and_then(VecDeque::pop_front) {
            return a;
        }
        let deadline = Instant::now() + WATCHDOG;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            let a = self
                .arrivals
                .recv_timeout(left)
                .unwrap_or_else(|_| panic!("watchdog: no dial for session {session}"));
            if a.session == session {
                return a;
            }
            self.stash
                .entry(a.session.clone())
                .or_default()
                .push_back(a);
        }
    }
}

/// The pod's side of one attach socket.
struct PodConn {
    ws: WebSocket<TcpStream>,
    next_id: u64,
}

impl PodConn {
    fn request(&mut self, method: &str, params: Value) -> Value {
        let id = self.next_id;
        self.next_id += 1;
        send_text(
            &mut self.ws,
            json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}).to_string(),
        );
        let text = recv_text(&mut self.ws, method);
        let v: Value = serde_json::from_str(&text).expect("reply is JSON");
        assert_eq!(
            v["id"],
            json!(id),
            "reply to another request: {}",
            clip(&text)
        );
        assert!(v.get("error").is_none(), "{method}: {}", clip(&text));
        v
    }

    fn initialize(&mut self) {
        self.request(
            "initialize",
            json!({"protocolVersion": "2025-06-18", "capabilities": {},
                   "clientInfo": {"name": "bench-pod", "version": "0"}}),
        );
    }

    fn call_tool(&mut self, name: &str, args: Value) -> Value {
        self.request("tools/call", json!({"name": name, "arguments": args}))["result"].clone()
    }

    /// Round-trip times of `n` sequential requests built by `request(id)`.
    fn sequential(&mut self, n: usize, request: impl Fn(u64) -> String) -> Vec<f64> {
        let mut rtts = Vec::with_capacity(n);
        for _ in 0..n {
            let id = self.next_id;
            self.next_id += 1;
            let t = Instant::now();
            send_text(&mut self.ws, request(id));
            let reply = recv_text(&mut self.ws, "sequential");
            rtts.push(us(t.elapsed()));
            assert_eq!(reply_id(&reply), id);
        }
        rtts
    }

    /// Read until the daemon's close frame; panics on a data frame.
    fn expect_close(&mut self) -> u16 {
        loop {
            match self.ws.read() {
                Ok(Message::Close(f)) => return f.map(|f| u16::from(f.code)).unwrap_or(1005),
                Ok(Message::Ping(_) | Message::Pong(_)) => continue,
                Ok(other) => panic!("expected a close frame, got {other:?}"),
                Err(e) => panic!("expected a close frame, got error {e}"),
            }
        }
    }

    /// Send our close frame (the pod ending the socket with `code`).
    fn close(&mut self, code: u16) {
        let _ = self.ws.close(Some(CloseFrame {
            code: CloseCode::from(code),
            reason: "bench".into(),
        }));
        let _ = self.ws.flush();
    }
}

fn ping_req(id: u64) -> String {
    format!(r#"{{"jsonrpc":"2.0","id":{id},"method":"ping"}}"#)
}

fn sys_info_req(id: u64) -> String {
    format!(
        r#"{{"jsonrpc":"2.0","id":{id},"method":"tools/call","params":{{"name":"sys_info","arguments":{{}}}}}}"#
    )
}

fn bash_req(id: u64, command: &str, extra: Value) -> String {
    let mut args = json!({"command": command});
    for (k, v) in extra.as_object().unwrap() {
        args[k] = v.clone();
    }
    json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
           "params": {"name": "bash", "arguments": args}})
    .to_string()
}

/// Processes created on the whole box so far (`/proc/stat` "processes").
fn forks_so_far() -> u64 {
    std::fs::read_to_string("/proc/stat")
        .unwrap()
        .lines()
        .find_map(|l| l.strip_prefix("processes "))
        .and_then(|v| v.trim().parse().ok())
        .unwrap()
}

// ---------------------------------------------------------------------------------------
// Floors

/// The echo floor's connection, kept open for the whole run so that each daemon figure
/// can be measured in blocks alternating with echo blocks.
struct Echo {
    child: EchoChild,
    ws: WebSocket<TcpStream>,
    next_id: u64,
}

impl Echo {
    fn start() -> Echo {
        let child = EchoChild::start();
        let ws = child.connect();
        Echo {
            child,
            ws,
            next_id: 0,
        }
    }

    /// Round trips of `n` sequential 100-byte frames (µs).
    fn rtts(&mut self, n: usize) -> Vec<f64> {
        self.rtts_sized(n, ECHO_FRAME_BYTES)
    }

    /// Round trips of `n` sequential frames of `bytes` (µs).
    fn rtts_sized(&mut self, n: usize, bytes: usize) -> Vec<f64> {
        (0..n)
            .map(|_| {
                self.next_id += 1;
                let frame = echo_frame_of(self.next_id, bytes);
                let t = Instant::now();
                send_text(&mut self.ws, frame);
                let _ = recv_text(&mut self.ws, "echo");
                us(t.elapsed())
            })
            .collect()
    }

    /// Seconds to echo `total` frames with `DEPTH` in flight.
    fn pipelined_secs(&mut self, total: usize) -> f64 {
        let id_of = |t: &str| -> u64 {
            t.strip_prefix("{\"id\":")
                .and_then(|t| t.split(',').next())
                .and_then(|n| n.parse().ok())
                .expect("echoed frame")
        };
        let first = self.next_id + 1;
        self.next_id += total as u64;
        let rate = pipelined(&mut self.ws, total, DEPTH, first, echo_frame, id_of);
        total as f64 / rate
    }
}

/// `blocks` alternating blocks of a floor and a figure, each returning its samples: a
/// shared box's load changes within seconds, so a floor means something only when it was
/// measured beside the figure, not minutes earlier.
fn interleave(
    blocks: usize,
    mut floor: impl FnMut() -> Vec<f64>,
    mut figure: impl FnMut() -> Vec<f64>,
) -> (Vec<f64>, Vec<f64>) {
    let (mut f, mut m) = (Vec::new(), Vec::new());
    for _ in 0..blocks {
        f.extend(floor());
        m.extend(figure());
    }
    (f, m)
}

/// Blocks per interleaved figure.
const BLOCKS: usize = 10;

fn floor_echo(r: &mut Report, o: &Opts) -> Echo {
    let mut echo = Echo::start();
    echo.rtts(o.n(500)); // warm-up
    let rtts = echo.rtts(o.n(5000));
    r.put("ws_echo_rtt_p50", percentile(&rtts, 0.5), "us", None);
    r.put("ws_echo_rtt_p99", percentile(&rtts, 0.99), "us", None);
    let total = o.n(20000);
    let rate = total as f64 / echo.pipelined_secs(total);
    r.put("ws_echo_pipelined_per_s", rate, "1/s", None);
    echo
}

/// `bash -c true` from this process, as the bash tool runs it (ms).
fn spawn_true() -> f64 {
    let t = Instant::now();
    let out = Command::new("bash")
        .args(["-c", "true"])
        .stdin(Stdio::null())
        .output()
        .expect("spawn bash");
    assert!(out.status.success());
    ms(t.elapsed())
}

fn floor_spawn(r: &mut Report, o: &Opts) {
    for _ in 0..o.n(20) {
        spawn_true();
    }
    let samples: Vec<f64> = (0..o.n(300)).map(|_| spawn_true()).collect();
    r.put("spawn_true_p50", percentile(&samples, 0.5), "ms", None);
}

fn floor_fsync(r: &mut Report, o: &Opts, dir: &Path) {
    std::fs::create_dir_all(dir).unwrap();
    let path = dir.join("bench-fsync.tmp");
    let samples: Vec<f64> = (0..o.n(100))
        .map(|i| {
            let t = Instant::now();
            let mut f = std::fs::File::create(&path).unwrap();
            f.write_all(format!("{{\"n\":{i},\"pad\":\"{}\"}}\n", "x".repeat(200)).as_bytes())
                .unwrap();
            f.sync_all().unwrap();
            ms(t.elapsed())
        })
        .collect();
    let _ = std::fs::remove_file(&path);
    r.put("fsync_p50", percentile(&samples, 0.5), "ms", None);
}

/// The X11 grabber the display tools run, as `(program, args before the output file)`.
fn grabber() -> Option<(&'static str, Vec<&'static str>)> {
    let on_path = |p: &str| {
        std::env::var_os("PATH")
            .map(|path| std::env::split_paths(&path).any(|d| d.join(p).is_file()))
            .unwrap_or(false)
    };
    if on_path("scrot") {
        Some(("scrot", vec!["--pointer", "--overwrite"]))
    } else if on_path("import") {
        Some(("import", vec!["-window", "root", "-silent"]))
    } else {
        None
    }
}

/// Paint a desktop-like picture on the root window of the X server `display` (an Xvfb that
/// `scripts/bench.sh` started, which asks for this with `BENCH_PAINT_ROOT=1`): a blank
/// screen compresses to a few KB, a real desktop's PNG is hundreds of KB to a few MB, and
/// decoding and re-encoding it is most of a screenshot's cost. Speaks just enough of the X11
/// protocol over the local socket (no auth: Xvfb's default) for CreateGC and PutImage. The
/// returned connection must stay open: an X server resets (and clears the screen) when its
/// last client leaves.
fn paint_root(display: &str) -> Result<(std::os::unix::net::UnixStream, u32, u32), String> {
    use std::os::unix::net::UnixStream;
    let n: u32 = display
        .trim_start_matches(':')
        .split('.')
        .next()
        .and_then(|n| n.parse().ok())
        .ok_or_else(|| format!("cannot parse DISPLAY {display}"))?;
    let mut x = UnixStream::connect(format!("/tmp/.X11-unix/X{n}"))
        .map_err(|e| format!("connect to X{n}: {e}"))?;
    x.set_read_timeout(Some(WATCHDOG)).unwrap();
    x.write_all(&[b'l', 0, 11, 0, 0, 0, 0, 0, 0, 0, 0, 0])
        .map_err(|e| e.to_string())?;
    let mut head = [0u8; 8];
    x.read_exact(&mut head).map_err(|e| e.to_string())?;
    let mut setup = vec![0u8; 4 * u16::from_le_bytes([head[6], head[7]]) as usize];
    x.read_exact(&mut setup).map_err(|e| e.to_string())?;
    if head[0] != 1 {
        return Err("the X server refused the connection".into());
    }
    let u16_at = |o: usize| u16::from_le_bytes([setup[o], setup[o + 1]]);
    let u32_at = |o: usize| u32::from_le_bytes(setup[o..o + 4].try_into().unwrap());
    let id_base = u32_at(4);
    let vendor_len = u16_at(16) as usize;
    let max_request = 4 * u16_at(18) as usize;
    let formats = setup[21] as usize;
    let screen = 32 + vendor_len.div_ceil(4) * 4 + 8 * formats;
    let (root, width, height, depth) = (
        u32_at(screen),
        u16_at(screen + 20) as u32,
        u16_at(screen + 22) as u32,
        setup[screen + 38],
    );
    if depth != 24 {
        return Err(format!("root depth {depth}, expected 24"));
    }
    let gc = id_base + 1;
    let mut req = vec![55u8, 0, 4, 0];
    req.extend_from_slice(&gc.to_le_bytes());
    req.extend_from_slice(&root.to_le_bytes());
    req.extend_from_slice(&0u32.to_le_bytes());
    x.write_all(&req).map_err(|e| e.to_string())?;
    // Background gradient, a band of "windows" with text-like stripes, and a noisy photo-like
    // block: about 1-2 MB as PNG.
    let mut seed = 0x2545_f491_4f6c_dd1du64;
    let mut noise = move || {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed
    };
    let pixel = |xx: u32, yy: u32, rnd: u64| -> [u8; 4] {
        if (yy / 40) % 5 == 1 && (xx / 200) % 2 == 0 && (yy % 40) % 6 < 3 && rnd % 3 != 0 {
            [30, 30, 30, 0]
        } else if xx > width / 2 && yy > height / 3 {
            let r = rnd.to_le_bytes();
            [r[0], r[1], r[2], 0]
        } else {
            [(xx * 255 / width) as u8, (yy * 255 / height) as u8, 128, 0]
        }
    };
    let rows = ((max_request - 24) / (4 * width as usize)).max(1) as u32;
    let mut y = 0;
    while y < height {
        let h = rows.min(height - y);
        let len_units = 6 + (width * h) as usize;
        let mut req = vec![72u8, 2];
        req.extend_from_slice(&(len_units as u16).to_le_bytes());
        req.extend_from_slice(&root.to_le_bytes());
        req.extend_from_slice(&gc.to_le_bytes());
        req.extend_from_slice(&(width as u16).to_le_bytes());
        req.extend_from_slice(&(h as u16).to_le_bytes());
        req.extend_from_slice(&0i16.to_le_bytes());
        req.extend_from_slice(&(y as i16).to_le_bytes());
        req.extend_from_slice(&[0, 24, 0, 0]);
        for yy in y..y + h {
            for xx in 0..width {
                req.extend_from_slice(&pixel(xx, yy, noise()));
            }
        }
        x.write_all(&req).map_err(|e| e.to_string())?;
        y += h;
    }
    // GetInputFocus: its reply means everything before it was processed.
    x.write_all(&[43, 0, 1, 0]).map_err(|e| e.to_string())?;
    let mut reply = [0u8; 32];
    loop {
        x.read_exact(&mut reply).map_err(|e| e.to_string())?;
        match reply[0] {
            0 => return Err(format!("X error {} on request {}", reply[1], reply[10])),
            1 => return Ok((x, width, height)),
            _ => continue,
        }
    }
}

/// Runs the screenshot helper directly, as the display tools do.
struct Grabber {
    prog: &'static str,
    args: Vec<&'static str>,
    display: String,
    file: PathBuf,
}

impl Grabber {
    fn new(display: Option<&str>, dir: &Path) -> Option<Grabber> {
        let (prog, args) = grabber()?;
        Some(Grabber {
            prog,
            args,
            display: display?.to_string(),
            file: dir.join("grab.png"),
        })
    }

    /// One grab: (ms, PNG bytes).
    fn grab(&self) -> (f64, usize) {
        let _ = std::fs::remove_file(&self.file);
        let t = Instant::now();
        let target = if self.prog == "import" {
            format!("png:{}", self.file.display())
        } else {
            self.file.display().to_string()
        };
        let st = Command::new(self.prog)
            .args(&self.args)
            .arg(&target)
            .env("DISPLAY", &self.display)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .expect("run the grabber");
        assert!(st.success(), "{} failed on {}", self.prog, self.display);
        let bytes = std::fs::read(&self.file).unwrap();
        (ms(t.elapsed()), bytes.len())
    }
}

fn floor_grab(r: &mut Report, o: &Opts, grabber: Option<&Grabber>) {
    let Some(g) = grabber else {
        r.note(
            "grab_png_p50",
            "ms",
            "no X display or no scrot/import: run under scripts/bench.sh with Xvfb".into(),
        );
        return;
    };
    g.grab();
    let runs: Vec<(f64, usize)> = (0..o.n(30)).map(|_| g.grab()).collect();
    let samples: Vec<f64> = runs.iter().map(|r| r.0).collect();
    r.put("grab_png_p50", percentile(&samples, 0.5), "ms", None);
    r.put("grab_png_bytes", runs[0].1 as f64, "bytes", None);
}

// ---------------------------------------------------------------------------------------
// Figures through the daemon

/// Attach a grant and complete the pod's first turns: `initialize`, `tools/list`.
fn attach_ready(d: &DaemonProc, pod: &mut Pod, session: &str, profile: &str) -> (String, PodConn) {
    let id = d.attach(pod, session, profile);
    let mut a = pod.arrival(session);
    a.conn.initialize();
    a.conn.request("tools/list", json!({}));
    (id, a.conn)
}

fn bench_latency(r: &mut Report, o: &Opts, d: &DaemonProc, pod: &mut Pod, echo: &mut Echo) {
    let (grant, mut conn) = attach_ready(d, pod, "lat", "owner");
    if o.runs("ping") {
        bench_ping(r, o, d, &mut conn, echo);
    }
    if o.runs("sys_info") {
        bench_sys_info(r, o, d, &mut conn, echo);
    }
    if o.runs("tools_list") {
        bench_tools_list(r, o, d, &mut conn, echo);
    }
    if o.runs("bash") {
        bench_bash_true(r, o, &mut conn);
    }
    if o.runs("pipelined") {
        bench_pipelined(r, o, d, &mut conn, echo);
    }
    if o.runs("hol") {
        bench_hol(r, o, &mut conn);
    }
    if o.runs("mcp_keepalive") {
        bench_mcp_keepalive(r, o, d);
    }
    d.revoke(&grant);
}

/// Sequential round trips of `request`s in blocks alternating with echo blocks of the
/// same size: (echo samples, daemon samples, daemon CPU per call in µs).
fn paired(
    d: &DaemonProc,
    conn: &mut PodConn,
    echo: &mut Echo,
    n: usize,
    request: impl Fn(u64) -> String,
) -> (Vec<f64>, Vec<f64>, f64) {
    let block = (n / BLOCKS).max(1);
    let mut cpu_ns = 0;
    let (floor, figure) = interleave(
        BLOCKS,
        || echo.rtts(block),
        || {
            let before = d.cpu_ns();
            let rtts = conn.sequential(block, &request);
            cpu_ns += d.cpu_ns() - before;
            rtts
        },
    );
    let cpu = cpu_ns as f64 / 1e3 / figure.len() as f64;
    (floor, figure, cpu)
}

fn bench_ping(r: &mut Report, o: &Opts, d: &DaemonProc, conn: &mut PodConn, echo: &mut Echo) {
    conn.sequential(o.n(500), ping_req);
    let (floor, rtts, cpu) = paired(d, conn, echo, o.n(5000), ping_req);
    let (p50, p99) = (percentile(&rtts, 0.5), percentile(&rtts, 0.99));
    let (echo50, echo99) = (percentile(&floor, 0.5), percentile(&floor, 0.99));
    r.put("ping_rtt_p50", p50, "us", Some(echo50));
    r.put("ping_rtt_p99", p99, "us", Some(echo99));
    r.put("ping_daemon_cpu_us", cpu, "us", None);
    r.check(
        "ping_rtt_p50",
        format!("<= 2 x ws_echo p50 = {:.0} us", 2.0 * echo50),
        Some(p50 <= 2.0 * echo50),
    );
    // The issue sets the target on p50; p99 is held to the same ratio of the echo's p99.
    r.check(
        "ping_rtt_p99",
        format!("<= 2 x ws_echo p99 = {:.0} us", 2.0 * echo99),
        Some(p99 <= 2.0 * echo99),
    );
}

/// `tools/list` on an owner grant's socket beside the echo (§24: built once per connection
/// and policy, so a repeated list costs a reply of its size, not a rebuild).
fn bench_tools_list(r: &mut Report, o: &Opts, d: &DaemonProc, conn: &mut PodConn, echo: &mut Echo) {
    let reply = conn.request("tools/list", json!({}));
    r.put(
        "tools_list_reply_bytes",
        reply.to_string().len() as f64,
        "bytes",
        None,
    );
    let size = reply.to_string().len();
    let list = |id: u64| format!(r#"{{"jsonrpc":"2.0","id":{id},"method":"tools/list"}}"#);
    conn.sequential(o.n(200), list);
    // Its floor: the echo of a frame of the reply's size (the list is ~30 KB, the ping
    // floor's frame 100 bytes).
    let block = (o.n(2000) / BLOCKS).max(1);
    let mut cpu_ns = 0;
    let (floor, rtts) = interleave(
        BLOCKS,
        || echo.rtts_sized(block, size),
        || {
            let before = d.cpu_ns();
            let rtts = conn.sequential(block, list);
            cpu_ns += d.cpu_ns() - before;
            rtts
        },
    );
    let cpu = cpu_ns as f64 / 1e3 / rtts.len() as f64;
    let (p50, echo50) = (percentile(&rtts, 0.5), percentile(&floor, 0.5));
    r.put("ws_echo_list_sized_rtt_p50", echo50, "us", None);
    r.put("tools_list_rtt_p50", p50, "us", Some(echo50));
    r.put("tools_list_daemon_cpu_us", cpu, "us", None);
    r.check(
        "tools_list_rtt_p50",
        format!("<= 2 x the echo of {size} bytes = {:.0} us", 2.0 * echo50),
        Some(p50 <= 2.0 * echo50),
    );
}

/// Largest default `sys_info` result (§24: the facts an agent acts on first; the rest with
/// `{"detail":true}`).
const SYS_INFO_MAX_BYTES: usize = 2048;

fn bench_sys_info(r: &mut Report, o: &Opts, d: &DaemonProc, conn: &mut PodConn, echo: &mut Echo) {
    let one = conn.call_tool("sys_info", json!({}));
    if std::env::var_os("BENCH_SHOW_SYS_INFO").is_some() {
        eprintln!("{}", serde_json::to_string_pretty(&one).unwrap());
    }
    let bytes = one.to_string().len();
    r.put("sys_info_result_bytes", bytes as f64, "bytes", None);
    r.check(
        "sys_info_result_bytes",
        format!("<= {SYS_INFO_MAX_BYTES} bytes (the rest with detail:true)"),
        Some(bytes <= SYS_INFO_MAX_BYTES),
    );
    // Whatever the daemon answers to `detail` (a daemon without it may refuse the argument,
    // as a JSON-RPC error at this revision).
    let id = conn.next_id;
    conn.next_id += 1;
    let req = json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
                     "params": {"name": "sys_info", "arguments": {"detail": true}}});
    send_text(&mut conn.ws, req.to_string());
    let detail: Value = serde_json::from_str(&recv_text(&mut conn.ws, "sys_info detail")).unwrap();
    match detail.get("result") {
        Some(res) if res["isError"] != true => r.put(
            "sys_info_detail_result_bytes",
            res.to_string().len() as f64,
            "bytes",
            None,
        ),
        _ => r.note(
            "sys_info_detail_result_bytes",
            "bytes",
            format!("sys_info refused detail: {}", clip(&detail.to_string())),
        ),
    }
    conn.sequential(o.n(200), sys_info_req);
    let n = o.n(2000);
    let forks_before = forks_so_far();
    let (floor, rtts, cpu) = paired(d, conn, echo, n, sys_info_req);
    // Processes started anywhere on the box meanwhile (the echo blocks start none): fewer
    // than one per two calls means sys_info spawns nothing per call, whatever else runs.
    let forks = forks_so_far() - forks_before;
    let (p50, p99) = (percentile(&rtts, 0.5), percentile(&rtts, 0.99));
    let echo50 = percentile(&floor, 0.5);
    r.put("sys_info_rtt_p50", p50, "us", Some(echo50));
    r.put(
        "sys_info_rtt_p99",
        p99,
        "us",
        Some(percentile(&floor, 0.99)),
    );
    r.put("sys_info_daemon_cpu_us", cpu, "us", None);
    r.put("sys_info_box_forks", forks as f64, "procs", None);
    r.check(
        "sys_info_rtt_p50",
        format!("<= 3 x ws_echo p50 = {:.0} us", 3.0 * echo50),
        Some(p50 <= 3.0 * echo50),
    );
    r.check(
        "sys_info_box_forks",
        format!("< {} (nothing spawned per call)", n / 2),
        Some((forks as usize) < n / 2),
    );
}

/// A `sys_info` on the owner's `/mcp`, on one kept-alive connection (what every MCP SDK client
/// does) beside the same call on a fresh connection each time (contract §24: Nagle plus a
/// delayed ACK once made the kept-alive call ~44 ms).
fn bench_mcp_keepalive(r: &mut Report, o: &Opts, d: &DaemonProc) {
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
                      "params": {"name": "sys_info", "arguments": {}}})
    .to_string();
    let request = |connection: &str| {
        format!(
            "POST /mcp HTTP/1.1\r\nHost: {}\r\nConnection: {connection}\r\nAuthorization: Bearer {}\r\n\
             Content-Type: application/json\r\nAccept: application/json, text/event-stream\r\n\
             Content-Length: {}\r\n\r\n{body}",
            d.admin,
            d.token,
            body.len()
        )
    };
    let n = o.n(200);
    let keep = request("keep-alive");
    let mut kept = TcpStream::connect(d.admin).unwrap();
    kept.set_read_timeout(Some(WATCHDOG)).unwrap();
    let mut reader = std::io::BufReader::new(kept.try_clone().unwrap());
    let mut one_kept = || {
        let t = Instant::now();
        kept.write_all(keep.as_bytes()).unwrap();
        let status = read_keepalive_response(&mut reader);
        assert_eq!(status, 200, "/mcp sys_info on a kept-alive connection");
        ms(t.elapsed())
    };
    let close = request("close");
    let one_fresh = || {
        let t = Instant::now();
        let mut s = TcpStream::connect(d.admin).unwrap();
        s.set_read_timeout(Some(WATCHDOG)).unwrap();
        s.write_all(close.as_bytes()).unwrap();
        let mut raw = Vec::new();
        let _ = s.read_to_end(&mut raw);
        assert!(
            raw.starts_with(b"HTTP/1.1 200"),
            "/mcp sys_info on a fresh connection"
        );
        ms(t.elapsed())
    };
    let block = (n / BLOCKS).max(1);
    let (fresh, kept_ms) = interleave(
        BLOCKS,
        || (0..block).map(|_| one_fresh()).collect(),
        || (0..block).map(|_| one_kept()).collect(),
    );
    let (kept50, fresh50) = (percentile(&kept_ms, 0.5), percentile(&fresh, 0.5));
    r.put("mcp_keepalive_ms", kept50, "ms", Some(fresh50));
    r.check(
        "mcp_keepalive_ms",
        format!("<= 2 x a fresh connection = {:.2} ms", 2.0 * fresh50),
        Some(kept50 <= 2.0 * fresh50),
    );
}

/// Read one response on a kept-alive connection (head, then `Content-Length` bytes): its status.
fn read_keepalive_response(reader: &mut impl std::io::BufRead) -> u16 {
    let mut line = String::new();
    reader
        .read_line(&mut line)
        .expect("watchdog: a status line");
    let status = line
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("bad status line: {line:?}"));
    let mut length = None;
    loop {
        line.clear();
        reader
            .read_line(&mut line)
            .expect("watchdog: a header line");
        let header = line.trim_end();
        if header.is_empty() {
            break;
        }
        if let Some((k, v)) = header.split_once(':') {
            if k.eq_ignore_ascii_case("content-length") {
                length = v.trim().parse::<usize>().ok();
            }
        }
    }
    let length = length.expect("a kept-alive response says its Content-Length");
    let mut body = vec![0u8; length];
    reader.read_exact(&mut body).expect("watchdog: the body");
    status
}

fn bench_bash_true(r: &mut Report, o: &Opts, conn: &mut PodConn) {
    let true_req = |id| bash_req(id, "true", json!({}));
    conn.sequential(o.n(20), true_req);
    let block = (o.n(300) / BLOCKS).max(1);
    let (floor, rtts) = interleave(
        BLOCKS,
        || (0..block).map(|_| spawn_true()).collect(),
        || {
            conn.sequential(block, true_req)
                .into_iter()
                .map(|u| u / 1e3)
                .collect()
        },
    );
    let (p50, spawn) = (percentile(&rtts, 0.5), percentile(&floor, 0.5));
    r.put("bash_true_rtt_p50", p50, "ms", Some(spawn));
    r.check(
        "bash_true_rtt_p50",
        format!("<= spawn_true + 1 ms = {:.2} ms", spawn + 1.0),
        Some(p50 <= spawn + 1.0),
    );
}

fn bench_pipelined(r: &mut Report, o: &Opts, d: &DaemonProc, conn: &mut PodConn, echo: &mut Echo) {
    let mixed = |id: u64| {
        if id % 2 == 0 {
            ping_req(id)
        } else {
            sys_info_req(id)
        }
    };
    let blocks = 4;
    let block = o.n(20000) / blocks;
    let mut cpu_ns = 0;
    let (floor, figure) = interleave(
        blocks,
        || vec![echo.pipelined_secs(block)],
        || {
            let first = conn.next_id;
            conn.next_id += block as u64;
            let before = d.cpu_ns();
            let rate = pipelined(&mut conn.ws, block, DEPTH, first, mixed, reply_id);
            cpu_ns += d.cpu_ns() - before;
            vec![block as f64 / rate]
        },
    );
    let total = (block * blocks) as f64;
    let (rate, echo_rate) = (
        total / figure.iter().sum::<f64>(),
        total / floor.iter().sum::<f64>(),
    );
    r.put("pipelined_calls_per_s", rate, "1/s", Some(echo_rate));
    r.put(
        "pipelined_daemon_cpu_us",
        cpu_ns as f64 / 1e3 / total,
        "us",
        None,
    );
    r.check(
        "pipelined_calls_per_s",
        format!(">= 25 % of echo = {:.0}/s", 0.25 * echo_rate),
        Some(rate >= 0.25 * echo_rate),
    );
}

/// Sequential `sys_info` round trips (µs) for `window`; replies to other requests that
/// arrive meanwhile are taken out of `others`.
fn sys_info_window(conn: &mut PodConn, window: Duration, others: &mut HashSet<u64>) -> Vec<f64> {
    let mut samples = Vec::new();
    let end = Instant::now() + window;
    while Instant::now() < end {
        let id = conn.next_id;
        conn.next_id += 1;
        let t = Instant::now();
        send_text(&mut conn.ws, sys_info_req(id));
        loop {
            let got = reply_id(&recv_text(&mut conn.ws, "hol"));
            if got == id {
                break;
            }
            assert!(others.remove(&got), "unexpected reply {got}");
        }
        samples.push(us(t.elapsed()));
    }
    samples
}

/// Head-of-line: `sys_info` while four slow bash calls hold the same grant, against
/// `sys_info` in a window of the same length with nothing else running (so both see the
/// same background load: a 2000-call run lasts a few milliseconds, these windows seconds).
fn bench_hol(r: &mut Report, o: &Opts, conn: &mut PodConn) {
    let window = Duration::from_millis(if o.quick { 1000 } else { 4000 });
    let mut idle = Vec::new();
    let mut busy = Vec::new();
    let rounds = if o.quick { 1 } else { 3 };
    for _ in 0..rounds {
        idle.extend(sys_info_window(conn, window, &mut HashSet::new()));
        let mut sleepers = HashSet::new();
        for _ in 0..4 {
            let id = conn.next_id;
            conn.next_id += 1;
            let secs = window.as_secs() + 1;
            send_text(
                &mut conn.ws,
                bash_req(id, &format!("sleep {secs}"), json!({"timeout_secs": 30})),
            );
            sleepers.insert(id);
        }
        busy.extend(sys_info_window(conn, window, &mut sleepers));
        assert_eq!(sleepers.len(), 4, "a sleeper answered early");
        while !sleepers.is_empty() {
            let got = reply_id(&recv_text(&mut conn.ws, "hol sleepers"));
            assert!(sleepers.remove(&got), "unexpected reply {got}");
        }
    }
    let (p99, idle_p99) = (percentile(&busy, 0.99), percentile(&idle, 0.99));
    r.put("hol_idle_window_sys_info_p99", idle_p99, "us", None);
    r.put("hol_sys_info_p99", p99, "us", Some(idle_p99));
    r.check(
        "hol_sys_info_p99",
        format!("<= 2 x idle-window p99 = {:.0} us", 2.0 * idle_p99),
        Some(p99 <= 2.0 * idle_p99),
    );
}

/// The id of the first held call, by long-polling `GET /approvals` from the list last `seen`.
/// The list's ETag also moves when a decision joins `recent`, so an answer without a held call
/// is a newer list to poll from, not a failure.
fn wait_held(d: &DaemonProc, seen: &mut String) -> String {
    for _ in 0..20 {
        let mut raw = String::new();
        let _ = d
            .send_request("GET", &format!("/approvals?wait=10&seen={seen}"), None)
            .read_to_string(&mut raw);
        let body = raw.split_once("\r\n\r\n").map_or("", |(_, b)| b);
        let v: Value = serde_json::from_str(body)
            .unwrap_or_else(|e| panic!("GET /approvals: {e}: {}", clip(&raw)));
        *seen = etag_of(&raw);
        if let Some(id) = v["approvals"][0]["id"].as_str() {
            return id.to_string();
        }
    }
    panic!("no held call after 20 answers from GET /approvals")
}

/// The `ETag` of a response read whole (head and body as text).
fn etag_of(raw: &str) -> String {
    raw.split("\r\n\r\n")
        .next()
        .unwrap_or("")
        .lines()
        .find_map(|l| {
            let (k, v) = l.split_once(':')?;
            k.eq_ignore_ascii_case("etag")
                .then(|| v.trim().trim_matches('"').to_string())
        })
        .expect("GET /approvals has an ETag")
}

/// Issue 15: from `POST /approvals/{id}` with `allow` to the pod holding the reply of the held
/// `bash true`, beside `bash -c true` spawned here in the same run.
fn bench_approval(r: &mut Report, o: &Opts, d: &DaemonProc, pod: &mut Pod) {
    let body = json!({"runtime": pod.runtime(), "session": "approve", "profile": "owner",
                      "ttl_secs": 3600, "secret": POD_SECRET, "approve": ["bash"]});
    let (status, v) = d.http("POST", "/attach", Some(&body));
    assert_eq!(status, 202, "POST /attach: {v}");
    let grant = v["id"].as_str().expect("grant id").to_string();
    let mut a = pod.arrival("approve");
    a.conn.initialize();
    let conn = &mut a.conn;
    let mut raw = String::new();
    let _ = d
        .send_request("GET", "/approvals", None)
        .read_to_string(&mut raw);
    let mut seen = etag_of(&raw);
    let mut one = || -> f64 {
        let id = conn.next_id;
        conn.next_id += 1;
        send_text(&mut conn.ws, bash_req(id, "true", json!({})));
        let approval = wait_held(d, &mut seen);
        let t = Instant::now();
        let post = d.send_request(
            "POST",
            &format!("/approvals/{approval}"),
            Some(&json!({"decision": "allow"})),
        );
        let reply = recv_text(&mut conn.ws, "the allowed bash true");
        let took = ms(t.elapsed());
        assert_eq!(reply_id(&reply), id);
        assert!(reply.contains("\"isError\":false"), "{}", clip(&reply));
        let (status, v) = DaemonProc::read_response(post);
        assert_eq!(status, 200, "POST /approvals: {v}");
        took
    };
    for _ in 0..o.n(10) {
        one();
    }
    let block = (o.n(200) / BLOCKS).max(1);
    let (floor, samples) = interleave(
        BLOCKS,
        || (0..block).map(|_| spawn_true()).collect(),
        || (0..block).map(|_| one()).collect(),
    );
    let (p50, spawn) = (percentile(&samples, 0.5), percentile(&floor, 0.5));
    r.put("approval_ms_p50", p50, "ms", Some(spawn));
    r.put("approval_ms_p99", percentile(&samples, 0.99), "ms", None);
    r.check(
        "approval_ms_p50",
        format!("<= spawn_true + 2 ms = {:.2} ms", spawn + 2.0),
        Some(p50 <= spawn + 2.0),
    );
    d.revoke(&grant);
}

/// Start Xvnc (or Xvfb without it; -displayfd), the window manager and a session bus by
/// hand, as an own display does (§19, §23), and stop them: the floor of `own_display_start_ms` (ms to ready).
fn own_display_by_hand(dir: &Path) -> Option<f64> {
    let run = dir.join("own-floor");
    let _ = std::fs::remove_dir_all(&run);
    std::fs::create_dir_all(&run).ok()?;
    let t = Instant::now();
    // The X server an own display runs on: Xvnc where installed (§23), as the daemon picks.
    let mut server = if Path::new("/usr/bin/Xvnc").exists() {
        let mut c = Command::new("Xvnc");
        c.args([
            "-displayfd",
            "1",
            "-nolisten",
            "tcp",
            "-noreset",
            "-rfbport",
            "-1",
        ])
        .args([
            "-SecurityTypes",
            "None",
            "-geometry",
            "1280x800",
            "-depth",
            "24",
        ])
        .arg("-rfbunixpath")
        .arg(run.join("rfb.sock"));
        c
    } else {
        let mut c = Command::new("Xvfb");
        c.args(["-displayfd", "1", "-nolisten", "tcp", "-noreset", "-s", "0"])
            .args(["-screen", "0", "1280x800x24"]);
        c
    };
    let mut xvfb = server
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .ok()?;
    let mut line = String::new();
    std::io::BufReader::new(xvfb.stdout.take()?)
        .read_line(&mut line)
        .ok()?;
    let display = format!(":{}", line.trim());
    let wm = Command::new("matchbox-window-manager")
        .args(["-use_titlebar", "no"])
        .env("DISPLAY", &display)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .ok();
    let mut bus = Command::new("dbus-daemon")
        .args(["--session", "--nofork", "--nopidfile", "--print-address=1"])
        .arg(format!("--address=unix:path={}/bus", run.display()))
        .env("DISPLAY", &display)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .ok();
    if let Some(b) = bus.as_mut() {
        let mut addr = String::new();
        let _ = std::io::BufReader::new(b.stdout.take()?).read_line(&mut addr);
    }
    let took = ms(t.elapsed());
    for mut c in [wm, bus].into_iter().flatten() {
        let _ = c.kill();
        let _ = c.wait();
    }
    let _ = Command::new("kill").arg(xvfb.id().to_string()).status();
    let _ = xvfb.wait();
    let _ = std::fs::remove_dir_all(&run);
    Some(took)
}

/// §19: a grant's own display, from its first graphical call (a `mouse move`) to the
/// answer, beside the same servers started by hand; and the same call once it runs.
fn bench_own_display(r: &mut Report, o: &Opts, d: &DaemonProc, pod: &mut Pod, dir: &Path) {
    if Command::new("Xvfb")
        .arg("-help")
        .stderr(Stdio::null())
        .status()
        .is_err()
    {
        r.note(
            "own_display_start_ms",
            "ms",
            "skipped: Xvfb is not installed".into(),
        );
        return;
    }
    let n = o.n(10).min(10);
    let floor: Vec<f64> = (0..n).filter_map(|_| own_display_by_hand(dir)).collect();
    let mut first = Vec::new();
    let mut warm = Vec::new();
    let mut walled = Vec::new();
    // `bash true` on a grant of the same profile without an own display, beside it.
    let (plain_grant, mut plain) = attach_ready(d, pod, "own-plain", "desktop");
    let wall = wall_argv(&mut plain);
    let mut rtts = None;
    for i in 0..n {
        let session = format!("own-{i}");
        let body = json!({"runtime": pod.runtime(), "session": session, "profile": "desktop",
                          "ttl_secs": 3600, "secret": POD_SECRET, "display": "own"});
        let (status, v) = d.http("POST", "/attach", Some(&body));
        assert_eq!(status, 202, "POST /attach: {v}");
        let grant = v["id"].as_str().expect("grant id").to_string();
        let mut a = pod.arrival(&session);
        a.conn.initialize();
        let t = Instant::now();
        let out = a
            .conn
            .call_tool("mouse", json!({"action": "move", "x": 10, "y": 10}));
        first.push(ms(t.elapsed()));
        assert_ne!(out["isError"], true, "own display mouse: {out}");
        let t = Instant::now();
        a.conn
            .call_tool("mouse", json!({"action": "move", "x": 20, "y": 20}));
        warm.push(ms(t.elapsed()));
        // Its bash runs inside the grant's bwrap wall (where bwrap works): what that costs,
        // on a warm grant (its first bash also makes the grant's cgroup).
        a.conn.call_tool("bash", json!({"command": "true"}));
        let t = Instant::now();
        let out = a.conn.call_tool("bash", json!({"command": "true"}));
        walled.push(ms(t.elapsed()));
        assert_ne!(out["isError"], true, "own display bash: {out}");
        if i == 0 {
            let own_wall = wall_argv(&mut a.conn);
            let walls = [wall.as_deref(), own_wall.as_deref()];
            rtts = Some(own_display_bash_true(o, &mut a.conn, &mut plain, walls));
        }
        d.revoke(&grant);
    }
    d.revoke(&plain_grant);
    // The floor of the wall: bwrap with the same namespaces around `true`, by hand.
    let wall_floor: Vec<f64> = (0..n)
        .filter_map(|_| {
            let t = Instant::now();
            let ok = Command::new("bwrap")
                .args(["--dev-bind", "/", "/", "--unshare-pid", "--proc", "/proc"])
                .args(["--", "true"])
                .status()
                .is_ok_and(|s| s.success());
            ok.then(|| ms(t.elapsed()))
        })
        .collect();
    let wall_floor = (!wall_floor.is_empty()).then(|| percentile(&wall_floor, 0.5));
    r.put(
        "own_display_bash_true_ms",
        percentile(&walled, 0.5),
        "ms",
        wall_floor,
    );
    if let Some((spawn, plain, own, [by_hand, own_by_hand])) = rtts {
        let (spawn, plain, own) = (
            percentile(&spawn, 0.5),
            percentile(&plain, 0.5),
            percentile(&own, 0.5),
        );
        let p50 = |v: Vec<f64>| (!v.is_empty()).then(|| percentile(&v, 0.5));
        let (by_hand, own_by_hand) = (p50(by_hand), p50(own_by_hand));
        r.put("own_display_spawn_true_p50", spawn, "ms", None);
        if let Some(by_hand) = by_hand {
            r.put("wall_bash_true_by_hand_p50", by_hand, "ms", Some(spawn));
        }
        if let Some(own_by_hand) = own_by_hand {
            r.put(
                "own_wall_bash_true_by_hand_p50",
                own_by_hand,
                "ms",
                Some(spawn),
            );
        }
        r.put(
            "own_display_plain_bash_true_rtt_p50",
            plain,
            "ms",
            by_hand.or(Some(spawn)),
        );
        // What the daemon adds to a walled call: its wall's own argv run by hand around
        // `bash -c true` is the floor (a bwrap with fewer mounts is not).
        if let Some(by_hand) = by_hand {
            r.check(
                "own_display_plain_bash_true_rtt_p50",
                format!("<= its wall by hand + 1 ms = {:.2} ms", by_hand + 1.0),
                Some(plain <= by_hand + 1.0),
            );
        }
        r.put("own_display_bash_true_rtt_p50", own, "ms", Some(plain));
        // Its network is made once per display and joined (issue 36): a call costs what a
        // walled call without a network of its own does.
        r.check(
            "own_display_bash_true_rtt_p50",
            format!("<= the plain walled grant's + 1 ms = {:.2} ms", plain + 1.0),
            Some(own <= plain + 1.0),
        );
        // Its own wall by hand joins no network (the daemon joins the display's with one
        // setns(2) between fork and exec, which the check against the plain grant bounds).
        if let Some(own_by_hand) = own_by_hand {
            r.check(
                "own_display_bash_true_rtt_p50",
                format!("<= its wall by hand + 1 ms = {:.2} ms", own_by_hand + 1.0),
                Some(own <= own_by_hand + 1.0),
            );
        }
    }
    let floor_p50 = (!floor.is_empty()).then(|| percentile(&floor, 0.5));
    let p50 = percentile(&first, 0.5);
    r.put("own_display_start_ms", p50, "ms", floor_p50);
    r.put(
        "own_display_warm_call_ms",
        percentile(&warm, 0.5),
        "ms",
        None,
    );
    r.check(
        "own_display_start_ms",
        "<= 1500 ms (first call to ready, beside the servers started by hand)".into(),
        Some(percentile(&first, 0.99) <= 1500.0),
    );
}

/// `bash true` round trips (ms) on a warm own-display grant beside the same on a plain
/// grant, `spawn_true` and (when known) each grant's wall (`walls`: plain, own) run by hand
/// around `bash -c true`, in alternating blocks: (spawn, plain, own, [by hand; 2]).
fn own_display_bash_true(
    o: &Opts,
    own: &mut PodConn,
    plain: &mut PodConn,
    walls: [Option<&[String]>; 2],
) -> (Vec<f64>, Vec<f64>, Vec<f64>, [Vec<f64>; 2]) {
    let true_req = |id| bash_req(id, "true", json!({}));
    own.sequential(o.n(20), true_req);
    plain.sequential(o.n(20), true_req);
    let block = (o.n(200) / BLOCKS).max(1);
    let (mut spawn, mut plain_ms, mut own_ms) = (Vec::new(), Vec::new(), Vec::new());
    let mut by_hand = [Vec::new(), Vec::new()];
    let as_ms = |v: Vec<f64>| v.into_iter().map(|u| u / 1e3);
    for _ in 0..BLOCKS {
        spawn.extend((0..block).map(|_| spawn_true()));
        for (wall, times) in walls.iter().zip(by_hand.iter_mut()) {
            if let Some(wall) = wall {
                times.extend((0..block).filter_map(|_| wall_true(wall)));
            }
        }
        plain_ms.extend(as_ms(plain.sequential(block, true_req)));
        own_ms.extend(as_ms(own.sequential(block, true_req)));
    }
    (spawn, plain_ms, own_ms, by_hand)
}

/// The wall a walled grant's `bash` runs in, as its argv up to and including `--`: read
/// from inside, where `bwrap` is pid 1 of the wall's PID namespace. `None` when the call
/// is not walled here (no `bwrap`, or `--isolation none`).
fn wall_argv(conn: &mut PodConn) -> Option<Vec<String>> {
    let out = conn.call_tool(
        "bash",
        json!({"command": "tr '\\0' '\\n' </proc/1/cmdline"}),
    );
    let text = out["content"][0]["text"].as_str().unwrap_or_default();
    let mut argv: Vec<String> = Vec::new();
    for line in text.lines() {
        argv.push(line.to_string());
        if line == "--" {
            break;
        }
    }
    let walled = argv.first().is_some_and(|p| p.ends_with("bwrap")) && argv.last()? == "--";
    walled.then_some(argv)
}

/// `wall` (from [`wall_argv`]) around `bash -c true`, by hand (ms).
fn wall_true(wall: &[String]) -> Option<f64> {
    let t = Instant::now();
    let ok = Command::new(&wall[0])
        .args(&wall[1..])
        .args(["bash", "-c", "true"])
        .stdin(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    ok.then(|| ms(t.elapsed()))
}

fn bench_attach_revoke(r: &mut Report, o: &Opts, d: &DaemonProc, pod: &mut Pod) {
    let mut attach = Vec::new();
    let mut revoke = Vec::new();
    for i in 0..o.n(50) {
        let session = format!("ar-{i}");
        let t = Instant::now();
        let (grant, mut conn) = attach_ready(d, pod, &session, "observe");
        attach.push(ms(t.elapsed()));
        let t = Instant::now();
        let req = d.send_request("DELETE", &format!("/attach/{grant}"), None);
        let code = conn.expect_close();
        revoke.push(ms(t.elapsed()));
        assert_eq!(code, 1000, "revoke closes 1000");
        let (status, v) = DaemonProc::read_response(req);
        assert_eq!(status, 204, "DELETE: {v}");
    }
    let fsync = r.get("fsync_p50");
    let p50 = percentile(&attach, 0.5);
    r.put("attach_ms_p50", p50, "ms", fsync);
    r.check(
        "attach_ms_p50",
        "<= 20 ms (beside fsync)".into(),
        Some(p50 <= 20.0),
    );
    let p99 = percentile(&revoke, 0.99);
    r.put("revoke_ms_p99", p99, "ms", None);
    r.check("revoke_ms_p99", "<= 50 ms".into(), Some(p99 <= 50.0));
}

fn bench_redial(r: &mut Report, o: &Opts, d: &DaemonProc, pod: &mut Pod) {
    let n = o.n(10).min(10);
    let mut grants = Vec::new();
    for i in 0..n {
        let session = format!("rd-{i}");
        let (grant, conn) = attach_ready(d, pod, &session, "observe");
        grants.push((session, grant, conn));
    }
    let mut closed_at = Vec::new();
    for (session, _, conn) in &mut grants {
        conn.close(1000);
        closed_at.push((session.clone(), Instant::now()));
    }
    let mut samples = Vec::new();
    for (session, at) in &closed_at {
        let a = pod.arrival(session);
        samples.push(ms(a.at.duration_since(*at)));
    }
    for (_, grant, _) in &grants {
        d.revoke(grant);
    }
    let lo = samples.iter().cloned().fold(f64::MAX, f64::min);
    let hi = samples.iter().cloned().fold(0.0, f64::max);
    r.put("redial_ms_p50", percentile(&samples, 0.5), "ms", None);
    r.put("redial_ms_min", lo, "ms", None);
    r.put("redial_ms_max", hi, "ms", None);
    // The backoff is 1000 ms +-20 %; the dial and upgrade add a loopback handshake.
    r.check(
        "redial_ms_p50",
        "1000 +-20 % (each of min..max in 800..1220)".into(),
        Some(lo >= 800.0 && hi <= 1220.0),
    );
}

fn bench_memory(r: &mut Report, o: &Opts, d: &DaemonProc, pod: &mut Pod) {
    std::thread::sleep(Duration::from_millis(500));
    let (rss, anon) = d.rss_kib();
    r.put("rss_idle_kib", rss, "KiB", None);
    r.put("rss_anon_idle_kib", anon, "KiB", None);
    r.put("threads_idle", d.threads() as f64, "threads", None);
    r.check("rss_idle_kib", "<= 6144 KiB".into(), Some(rss <= 6144.0));
    r.check(
        "rss_anon_idle_kib",
        "<= 6144 KiB".into(),
        Some(anon <= 6144.0),
    );

    // The first grant pays once for what every later grant shares (code and data pages
    // first touched, a pool worker's first start, malloc's arenas grown): measured apart as
    // `rss_first_grant_kib`, so the per-grant figures are what each further grant adds and
    // a tenth of the count (--quick) does not spread that once-only cost over ten grants
    // instead of a hundred. It sends no large reply: freed reply memory that later grants
    // reuse would hide part of their cost.
    let (warm, _warm_conn) = attach_ready(d, pod, "mem-warm", "owner");
    std::thread::sleep(Duration::from_millis(500));
    let (rss_warm, anon_warm) = d.rss_kib();
    r.put("rss_first_grant_kib", rss_warm - rss, "KiB", None);
    let (rss, anon) = (rss_warm, anon_warm);

    let n = o.n(100);
    let mut grants = Vec::new();
    for i in 0..n {
        let session = format!("mem-{i}");
        grants.push(attach_ready(d, pod, &session, "owner"));
    }
    std::thread::sleep(Duration::from_millis(500));
    let (rss_n, anon_n) = d.rss_kib();
    let per = (rss_n - rss) / n as f64;
    r.put("rss_per_grant_kib", per, "KiB", None);
    // The anonymous part (heap, stacks) beside it: the rest is code and data pages of the
    // binary first touched by a grant, shared by all of them and so spread over `n`.
    r.put(
        "rss_anon_per_grant_kib",
        (anon_n - anon) / n as f64,
        "KiB",
        None,
    );
    r.check("rss_per_grant_kib", "<= 256 KiB".into(), Some(per <= 256.0));

    let big = format!("head -c {BIG_REPLY_STDOUT_BYTES} /dev/zero | tr '\\0' x");
    let mut reply_bytes = 0;
    for (_, conn) in &mut grants {
        let id = conn.next_id;
        conn.next_id += 1;
        send_text(
            &mut conn.ws,
            bash_req(
                id,
                &big,
                json!({"max_output_bytes": BIG_REPLY_STDOUT_BYTES}),
            ),
        );
        let reply = recv_text(&mut conn.ws, "big reply");
        assert_eq!(reply_id(&reply), id);
        reply_bytes = reply.len();
    }
    std::thread::sleep(Duration::from_millis(500));
    let (rss_big, anon_big) = d.rss_kib();
    let per_big = (rss_big - rss) / n as f64;
    r.put(
        "rss_anon_per_grant_after_reply_kib",
        (anon_big - anon) / n as f64,
        "KiB",
        None,
    );
    r.put("big_reply_bytes", reply_bytes as f64, "bytes", None);
    r.put("rss_per_grant_after_reply_kib", per_big, "KiB", None);
    r.check(
        "rss_per_grant_after_reply_kib",
        "<= 256 KiB".into(),
        Some(per_big <= 256.0),
    );
    for (grant, _) in &grants {
        d.revoke(grant);
    }
    d.revoke(&warm);
    std::thread::sleep(Duration::from_millis(500));
    r.put("rss_after_revoke_kib", d.rss_kib().0, "KiB", None);
}

/// Calls in flight on one grant (the cap) in the owed-replies flood.
const OWED_CALLS: usize = 64;
/// How long the daemon's memory is watched while it owes a pod that stopped reading.
const OWED_WINDOW: Duration = Duration::from_secs(3);
/// The daemon's `--write-buffer-bytes` in the owed-replies flood (its default).
const OWED_WRITE_BUFFER_KIB: f64 = 4096.0;

/// Issue 23's memory flood (§15): a job printed 1 MiB of invalid UTF-8 to each stream
/// (each byte becomes 3 in a reply, so one `bash_poll` of it answers ~6 MiB), and 64
/// `bash_poll`s of it are sent to a grant whose pod then reads nothing. The figure is the
/// daemon's peak RSS growth while it owes them (VmHWM, reset first through `clear_refs`
/// where allowed, else the highest VmRSS sampled), beside `--write-buffer-bytes`, which it
/// should stay near: that plus one reply plus the one being produced.
fn bench_owed(r: &mut Report, d: &DaemonProc, pod: &mut Pod) {
    let (_, mut greedy) = attach_ready(d, pod, "owed-greedy", "owner");
    let (_, mut other) = attach_ready(d, pod, "owed-other", "owner");
    let started = greedy.call_tool(
        "bash_start",
        json!({"command": "head -c 1048576 /dev/zero | tr '\\0' '\\377'; \
                           head -c 1048576 /dev/zero | tr '\\0' '\\377' >&2"}),
    );
    let job = started["structuredContent"]["job_id"]
        .as_str()
        .expect("a job")
        .to_string();
    let deadline = Instant::now() + WATCHDOG;
    while greedy.call_tool(
        "bash_poll",
        json!({"job_id": job, "max_bytes": 1, "wait_secs": 5}),
    )["structuredContent"]["state"]
        != "exited"
    {
        assert!(
            Instant::now() < deadline,
            "watchdog: the flood's job never ended"
        );
    }
    let status_kib = |field: &str| -> f64 {
        std::fs::read_to_string(format!("/proc/{}/status", d.pid))
            .unwrap()
            .lines()
            .find_map(|l| l.strip_prefix(field))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
            .unwrap_or(0.0)
    };
    let reset = std::fs::write(format!("/proc/{}/clear_refs", d.pid), "5").is_ok();
    let before = d.rss_kib().0;
    for _ in 0..OWED_CALLS {
        let id = greedy.next_id;
        greedy.next_id += 1;
        send_text(
            &mut greedy.ws,
            json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
                   "params": {"name": "bash_poll",
                              "arguments": {"job_id": job, "max_bytes": 1_048_576}}})
            .to_string(),
        );
    }
    // The pod reads nothing more; the other grant is pinged, and the memory read, until
    // the window ends.
    let mut peak = before;
    let mut rtts = Vec::new();
    let window = Instant::now();
    while window.elapsed() < OWED_WINDOW {
        rtts.extend(other.sequential(1, ping_req));
        peak = peak.max(d.rss_kib().0);
    }
    if reset {
        peak = peak.max(status_kib("VmHWM:"));
    }
    let grown = peak - before;
    r.put("owed_reply_peak_kib", grown, "KiB", None);
    r.put("write_buffer_kib", OWED_WRITE_BUFFER_KIB, "KiB", None);
    r.put(
        "owed_other_grant_ping_p99_us",
        percentile(&rtts, 0.99),
        "us",
        None,
    );
    r.check(
        "owed_reply_peak_kib",
        "< 32768 KiB (--write-buffer-bytes 4096 KiB + one ~6 MiB reply + the one produced)".into(),
        Some(grown < 32768.0),
    );
    if !reset {
        r.note(
            "owed_reply_peak_kib",
            "KiB",
            "VmHWM could not be reset here: the peak is the highest VmRSS sampled".into(),
        );
    }
}

/// Bytes the throughput job writes to its stdout (the issue's 256 MiB).
const JOB_OUTPUT_BYTES: u64 = 256 << 20;

/// Bytes free to an unprivileged writer on the filesystem holding `dir` (`df`), if it says.
fn free_bytes(dir: &Path) -> Option<u64> {
    let out = Command::new("df")
        .args(["--output=avail", "-B1"])
        .arg(dir)
        .stderr(Stdio::null())
        .output()
        .ok()?;
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .nth(1)?
        .trim()
        .parse()
        .ok()
}

/// A FIFO under `dir`, made with `mkfifo`.
fn mkfifo(dir: &Path, name: &str) -> PathBuf {
    let path = dir.join(name);
    let _ = std::fs::remove_file(&path);
    let ok = Command::new("mkfifo").arg(&path).status().expect("mkfifo");
    assert!(ok.success(), "mkfifo {}", path.display());
    path
}

/// The relay both wake figures run: bash echoing each line it reads from a FIFO.
fn relay_script(fifo: &Path) -> String {
    format!(
        "exec 3<'{}'; while IFS= read -r l <&3; do echo \"$l\"; done",
        fifo.display()
    )
}

/// Open a FIFO for writing on a helper thread (it blocks until the reader opens it).
fn open_writer(fifo: &Path) -> std::fs::File {
    let path = fifo.to_path_buf();
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(std::fs::OpenOptions::new().write(true).open(path));
    });
    rx.recv_timeout(WATCHDOG)
        .expect("watchdog: nobody opened the FIFO for reading")
        .expect("open the FIFO")
}

/// Start a job; returns its id.
fn start_job(conn: &mut PodConn, command: &str) -> String {
    let r = conn.call_tool("bash_start", json!({ "command": command }));
    r["structuredContent"]["job_id"]
        .as_str()
        .unwrap_or_else(|| panic!("bash_start: {}", clip(&r.to_string())))
        .to_string()
}

/// Wait until every pid in `pids` has exited (pidfds: no polling); `false` past `limit`.
fn all_gone(pids: &[i32], limit: Duration) -> bool {
    let deadline = Instant::now() + limit;
    for &pid in pids {
        let Some(p) = rustix::process::Pid::from_raw(pid) else {
            continue;
        };
        let Ok(fd) = rustix::process::pidfd_open(p, rustix::process::PidfdFlags::empty()) else {
            continue; // gone already
        };
        let poller = handnode::base::wake::Poller::new().expect("epoll");
        poller.add(&fd, 1, true, false).expect("watch a pidfd");
        let left = deadline.saturating_duration_since(Instant::now());
        if poller.wait(Some(left)).expect("epoll wait").is_empty() {
            return false;
        }
    }
    true
}

/// Issue 24: a grant with 50 processes (a job's shell and 49 `sleep`s, some in sessions of
/// their own), revoke → all gone, beside the floor: the bench SIGKILLs 50 `sleep`s of its
/// own by pid and waits for each.
/// A job read's stdout, as docs/protocol.md says to read it: the text block sliced by
/// `structuredContent.stdout_range` (byte offsets into the text's UTF-8).
fn stdout_of(result: &Value) -> String {
    let text = result["content"]
        .as_array()
        .and_then(|blocks| blocks.iter().find(|b| b["type"] == "text"))
        .and_then(|b| b["text"].as_str())
        .unwrap_or("");
    let range = &result["structuredContent"]["stdout_range"];
    let (Some(start), Some(end)) = (range[0].as_u64(), range[1].as_u64()) else {
        panic!(
            "a job read without stdout_range: {}",
            clip(&result.to_string())
        );
    };
    text.as_bytes()
        .get(start as usize..end as usize)
        .map(|b| String::from_utf8_lossy(b).into_owned())
        .unwrap_or_else(|| {
            panic!(
                "stdout_range {start}..{end} outside the text of {} bytes",
                text.len()
            )
        })
}

/// Start a job of 50 processes in a grant (every other sleeper in a session of its own, the
/// shell waiting on them) and return their pids once every one runs.
fn fifty_processes(conn: &mut PodConn) -> Vec<i32> {
    let job = start_job(
        conn,
        "for i in $(seq 49); do if [ $((i % 2)) = 0 ]; then setsid sleep 300 & else sleep 300 & fi;              echo $!; done; echo $$; echo ready; wait",
    );
    let started = Instant::now();
    let pids: Vec<i32> = loop {
        let r = conn.call_tool("bash_poll", json!({"job_id": job, "wait_secs": 10}));
        let out = stdout_of(&r);
        if out.contains("ready") {
            break out.lines().filter_map(|l| l.parse().ok()).collect();
        }
        assert!(
            r["structuredContent"]["state"] == "running",
            "the job ended before it printed ready: {}",
            clip(&r.to_string())
        );
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "the job printed no ready in 60 s: {}",
            clip(&out)
        );
    };
    assert_eq!(pids.len(), 50, "the grant runs 50 processes");
    pids
}

/// `n` children running `sleep 300`.
fn sleepers(n: usize) -> Vec<Child> {
    (0..n)
        .map(|_| {
            Command::new("sleep")
                .arg("300")
                .stdin(Stdio::null())
                .spawn()
                .expect("start sleep")
        })
        .collect()
}

/// Kill `children` by pid and reap them: the floor of a stop.
fn kill_by_hand(children: &mut [Child]) {
    for c in children.iter() {
        let pid = rustix::process::Pid::from_raw(c.id() as i32).expect("a pid");
        let _ = rustix::process::kill_process(pid, rustix::process::Signal::KILL);
    }
    for c in children.iter_mut() {
        let _ = c.wait();
    }
}

/// Grants of the halt figure (contract §22), each running 50 processes.
const HALT_GRANTS: usize = 16;

/// `halt_ms_p99` (contract §22): 16 owner grants with 50 processes each (half of them in
/// sessions of their own), from `POST /halt` to every process gone and every socket's close
/// frame read, beside killing the same 800 processes by pid here and reaping them. Each
/// round then revokes the halted grants and resumes.
fn bench_halt(r: &mut Report, o: &Opts, d: &DaemonProc, pod: &mut Pod) {
    let rounds = o.n(10);
    let mut floor = Vec::with_capacity(rounds);
    for _ in 0..rounds {
        let mut children = sleepers(HALT_GRANTS * 50);
        let t = Instant::now();
        kill_by_hand(&mut children);
        floor.push(ms(t.elapsed()));
    }
    let mut samples = Vec::with_capacity(rounds);
    for round in 0..rounds {
        let mut grants = Vec::with_capacity(HALT_GRANTS);
        let mut pids = Vec::with_capacity(HALT_GRANTS * 50);
        for g in 0..HALT_GRANTS {
            let (grant, mut conn) = attach_ready(d, pod, &format!("halt-{round}-{g}"), "owner");
            pids.extend(fifty_processes(&mut conn));
            grants.push((grant, conn));
        }
        let t = Instant::now();
        let req = d.send_request("POST", "/halt", Some(&json!({"reason": "bench"})));
        assert!(
            all_gone(&pids, Duration::from_secs(10)),
            "a process outlived the halt"
        );
        for (_, conn) in &mut grants {
            assert_eq!(conn.expect_close(), 1000, "a halted socket's close code");
        }
        samples.push(ms(t.elapsed()));
        let (status, v) = DaemonProc::read_response(req);
        assert_eq!(status, 200, "POST /halt: {v}");
        for (grant, _) in &grants {
            d.revoke(grant);
        }
        let (status, v) = d.http("POST", "/resume", None);
        assert_eq!(status, 200, "POST /resume: {v}");
    }
    let (p99, floor_p99) = (percentile(&samples, 0.99), percentile(&floor, 0.99));
    r.put("kill800_floor_ms_p99", floor_p99, "ms", None);
    r.put("halt_ms_p50", percentile(&samples, 0.5), "ms", None);
    r.put("halt_ms_p99", p99, "ms", Some(floor_p99));
    r.check("halt_ms_p99", "<= 100 ms".into(), Some(p99 <= 100.0));
}

fn bench_grant_kill(r: &mut Report, o: &Opts, d: &DaemonProc, pod: &mut Pod) {
    let rounds = o.n(20);
    let mut floor = Vec::with_capacity(rounds);
    for _ in 0..rounds {
        let mut children = sleepers(50);
        let t = Instant::now();
        kill_by_hand(&mut children);
        floor.push(ms(t.elapsed()));
    }
    let floor_p50 = percentile(&floor, 0.5);
    r.put("kill50_floor_ms", floor_p50, "ms", None);
    let mut samples = Vec::with_capacity(rounds);
    for i in 0..rounds {
        let (grant, mut conn) = attach_ready(d, pod, &format!("gk-{i}"), "owner");
        let pids = fifty_processes(&mut conn);
        let t = Instant::now();
        let req = d.send_request("DELETE", &format!("/attach/{grant}"), None);
        assert!(
            all_gone(&pids, Duration::from_secs(10)),
            "a grant's process outlived revoke"
        );
        samples.push(ms(t.elapsed()));
        let (status, v) = DaemonProc::read_response(req);
        assert_eq!(status, 204, "DELETE: {v}");
        let _ = conn.expect_close();
    }
    let p50 = percentile(&samples, 0.5);
    r.put("grant_kill_ms", p50, "ms", Some(floor_p50));
    r.put("grant_kill_ms_p99", percentile(&samples, 0.99), "ms", None);
    r.check(
        "grant_kill_ms",
        "<= 1000 ms (every process within a second)".into(),
        Some(percentile(&samples, 0.99) <= 1000.0),
    );
}

/// Wait for a job's end with long-polls that read nothing (offsets past any output).
fn wait_job_end(conn: &mut PodConn, job: &str) -> Value {
    let far = 1u64 << 50;
    let deadline = Instant::now() + Duration::from_secs(600);
    loop {
        let r = conn.call_tool(
            "bash_poll",
            json!({"job_id": job, "stdout_offset": far, "stderr_offset": far, "wait_secs": 100}),
        );
        if r["structuredContent"]["state"] != "running" {
            return r;
        }
        assert!(Instant::now() < deadline, "watchdog: job {job} never ended");
    }
}

/// The job figures (issue 14): a waiting poll's wake beside a bare pipe's, a job's output
/// rate beside the same command writing to a file, and the daemon's RSS while it runs.
/// Bytes `file_get` moves per call in the file figures (its maximum), and the file read.
const FILE_CHUNK_BYTES: usize = 4 << 20;
const FILE_BYTES: usize = 64 << 20;

/// `file_get_mb_per_s`: a 64 MiB file of a lent folder read in 4 MiB `file_get` ranges
/// through the stub pod (the bench parses each reply and decodes its base64), beside
/// `ws_b64_mb_per_s`: the same bytes base64-encoded, sent through the WebSocket echo child
/// and decoded again, 4 MiB per message. Blocks of each alternate; MB are 10^6 bytes of
/// the file.
fn bench_files(r: &mut Report, o: &Opts, d: &DaemonProc, pod: &mut Pod, echo: &mut Echo) {
    use base64::Engine;
    let b64 = base64::engine::general_purpose::STANDARD;
    let total = if o.quick { FILE_BYTES / 4 } else { FILE_BYTES };
    let folder = d.dir.join("lent");
    std::fs::create_dir_all(&folder).unwrap();
    let mut data = vec![0u8; total];
    getrandom::fill(&mut data).expect("random bytes");
    std::fs::write(folder.join("blob.bin"), &data).unwrap();
    let body = json!({"runtime": pod.runtime(), "session": "files", "profile": "files",
                      "folder": folder, "ttl_secs": 3600, "secret": POD_SECRET});
    let (status, v) = d.http("POST", "/attach", Some(&body));
    assert_eq!(status, 202, "POST /attach: {v}");
    let grant = v["id"].as_str().expect("grant id").to_string();
    let mut a = pod.arrival("files");
    a.conn.initialize();
    a.conn.request("tools/list", json!({}));
    let mut conn = a.conn;

    let mut get_all = || {
        let t = Instant::now();
        let mut offset = 0usize;
        while offset < total {
            let res = conn.call_tool(
                "file_get",
                json!({"path": "blob.bin", "offset": offset, "length": FILE_CHUNK_BYTES}),
            );
            let blob = res["content"][0]["resource"]["blob"]
                .as_str()
                .unwrap_or_else(|| panic!("file_get: {}", clip(&res.to_string())));
            let bytes = b64.decode(blob).expect("base64 blob");
            assert!(!bytes.is_empty(), "file_get returned nothing at {offset}");
            offset += bytes.len();
        }
        vec![total as f64 / 1e6 / t.elapsed().as_secs_f64()]
    };
    let mut echo_all = || {
        let t = Instant::now();
        for chunk in data.chunks(FILE_CHUNK_BYTES) {
            send_text(&mut echo.ws, b64.encode(chunk));
            let back = recv_text(&mut echo.ws, "base64 echo");
            assert_eq!(
                b64.decode(back.as_bytes()).expect("base64").len(),
                chunk.len()
            );
        }
        vec![total as f64 / 1e6 / t.elapsed().as_secs_f64()]
    };
    // One warm pass of each, then alternating blocks.
    get_all();
    echo_all();
    let (floor, figure) = interleave(3, &mut echo_all, &mut get_all);
    let (floor50, figure50) = (percentile(&floor, 0.5), percentile(&figure, 0.5));
    r.put("ws_b64_mb_per_s", floor50, "MB/s", None);
    r.put("file_get_mb_per_s", figure50, "MB/s", Some(floor50));
    r.check(
        "file_get_mb_per_s",
        format!(">= 50 % of ws_b64_mb_per_s = {:.0} MB/s", floor50 / 2.0),
        Some(figure50 >= floor50 / 2.0),
    );
    bench_file_put(r, &mut conn, &folder, &data, echo);
    drop(conn);
    d.revoke(&grant);
}

/// `file_put_mb_per_s`: the same bytes uploaded through the stub pod in chunks of the
/// largest `data` the grant's `tools/list` advertises (`data.maxLength`), every request
/// checked against the pod runtime's 1 MiB body limit before it is sent; beside
/// `ws_put_mb_per_s`: the same requests sent to the echo child, which answers each with a
/// 100-byte frame. MB are 10^6 bytes of the file.
fn bench_file_put(r: &mut Report, conn: &mut PodConn, folder: &Path, data: &[u8], echo: &mut Echo) {
    use base64::Engine;
    let b64 = base64::engine::general_purpose::STANDARD;
    let tools = conn.request("tools/list", json!({}));
    let max_chars = tools["result"]["tools"]
        .as_array()
        .and_then(|t| t.iter().find(|t| t["name"] == "file_put"))
        .and_then(|t| t["inputSchema"]["properties"]["data"]["maxLength"].as_u64());
    let Some(max_chars) = max_chars else {
        r.note(
            "file_put_mb_per_s",
            "MB/s",
            "the grant's file_put gives no data.maxLength".into(),
        );
        return;
    };
    let chunk = (max_chars / 4 * 3) as usize;
    let total = data.len();
    let request = |id: u64, offset: usize| {
        let end = (offset + chunk).min(total);
        let req = json!({"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": {
            "name": "file_put", "arguments": {"path": "up.bin", "offset": offset,
            "data": b64.encode(&data[offset..end]), "final": end == total}}})
        .to_string();
        assert!(
            req.len() <= POD_BODY_LIMIT,
            "the pod would refuse this file_put: a {} byte request (limit {POD_BODY_LIMIT})              with data.maxLength {max_chars}",
            req.len()
        );
        req
    };
    let mut largest = 0usize;
    let mut put_all = || {
        let t = Instant::now();
        for offset in (0..total).step_by(chunk) {
            let id = conn.next_id;
            conn.next_id += 1;
            let req = request(id, offset);
            largest = largest.max(req.len());
            send_text(&mut conn.ws, req);
            let reply: Value =
                serde_json::from_str(&recv_text(&mut conn.ws, "file_put")).expect("JSON reply");
            assert!(
                reply["result"].is_object() && reply["result"]["isError"] != true,
                "file_put at {offset}: {}",
                clip(&reply.to_string())
            );
        }
        vec![total as f64 / 1e6 / t.elapsed().as_secs_f64()]
    };
    let mut ack = echo.child.connect_at(ECHO_ACK_PATH);
    let mut send_all = || {
        let t = Instant::now();
        for offset in (0..total).step_by(chunk) {
            send_text(&mut ack, request(0, offset));
            recv_text(&mut ack, "ack echo");
        }
        vec![total as f64 / 1e6 / t.elapsed().as_secs_f64()]
    };
    put_all();
    send_all();
    let (floor, figure) = interleave(3, &mut send_all, &mut put_all);
    let written = std::fs::read(folder.join("up.bin")).expect("the uploaded file");
    assert!(
        written == data,
        "the uploaded file differs from what was sent"
    );
    let (floor50, figure50) = (percentile(&floor, 0.5), percentile(&figure, 0.5));
    r.put("file_put_chunk_bytes", chunk as f64, "bytes", None);
    r.put(
        "file_put_request_bytes",
        largest as f64,
        "bytes",
        Some(POD_BODY_LIMIT as f64),
    );
    r.put("ws_put_mb_per_s", floor50, "MB/s", None);
    r.put("file_put_mb_per_s", figure50, "MB/s", Some(floor50));
    r.check(
        "file_put_mb_per_s",
        format!(">= 50 % of ws_put_mb_per_s = {:.0} MB/s", floor50 / 2.0),
        Some(figure50 >= floor50 / 2.0),
    );
}

fn bench_jobs(r: &mut Report, o: &Opts, d: &DaemonProc, pod: &mut Pod) {
    let (grant, mut conn) = attach_ready(d, pod, "jobs", "owner");
    let dir = d.dir.join("fifos");
    std::fs::create_dir_all(&dir).unwrap();
    let n = o.n(300);

    // Floor: the same relay with its stdout piped straight to the bench.
    let fifo = mkfifo(&dir, "floor");
    let mut relay = Command::new("bash")
        .args(["-c", &relay_script(&fifo)])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .spawn()
        .expect("start the relay");
    let mut writer = open_writer(&fifo);
    let mut lines = BufReader::new(relay.stdout.take().unwrap());
    let mut floor = Vec::with_capacity(n);
    for i in 0..n + 20 {
        let t = Instant::now();
        writeln!(writer, "line {i}").unwrap();
        let mut got = String::new();
        lines.read_line(&mut got).unwrap();
        if i >= 20 {
            floor.push(ms(t.elapsed()));
        }
    }
    drop(writer);
    let _ = relay.wait();

    // The figure: the relay as a job, each line awaited by a parked bash_poll.
    let fifo = mkfifo(&dir, "job");
    let job = start_job(&mut conn, &relay_script(&fifo));
    let mut writer = open_writer(&fifo);
    let mut offset = 0u64;
    let mut wakes = Vec::with_capacity(n);
    for i in 0..n + 20 {
        let id = conn.next_id;
        conn.next_id += 1;
        let poll = json!({"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": {
            "name": "bash_poll",
            "arguments": {"job_id": job, "stdout_offset": offset, "wait_secs": 10}}});
        send_text(&mut conn.ws, poll.to_string());
        // Long enough for the poll to be parked on the watcher before the line is written.
        std::thread::sleep(Duration::from_millis(5));
        let t = Instant::now();
        writeln!(writer, "line {i}").unwrap();
        let reply = recv_text(&mut conn.ws, "job poll");
        let elapsed = ms(t.elapsed());
        assert_eq!(reply_id(&reply), id);
        let v: Value = serde_json::from_str(&reply).unwrap();
        offset = v["result"]["structuredContent"]["stdout_next"]
            .as_u64()
            .unwrap();
        if i >= 20 {
            wakes.push(elapsed);
        }
    }
    drop(writer);
    wait_job_end(&mut conn, &job);
    let (p50, floor50) = (percentile(&wakes, 0.5), percentile(&floor, 0.5));
    r.put("job_poll_wake_ms", p50, "ms", Some(floor50));
    r.check(
        "job_poll_wake_ms",
        format!("p50 <= pipe wake + 1 ms = {:.2} ms", floor50 + 1.0),
        Some(p50 <= floor50 + 1.0),
    );

    // Throughput and memory: 256 MiB to a job's stdout (a tenth in --quick: the floor writes
    // them to disk, and a CI machine may have little of it).
    let bytes = if o.quick {
        JOB_OUTPUT_BYTES / 10
    } else {
        JOB_OUTPUT_BYTES
    };
    let command = format!("head -c {bytes} /dev/zero");
    let warm = start_job(&mut conn, "head -c 1048576 /dev/zero");
    wait_job_end(&mut conn, &warm);
    std::thread::sleep(Duration::from_millis(300));
    let (rss_before, _) = d.rss_kib();
    let peak = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(rss_before as u64));
    let done = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let sampler = {
        let (peak, done, pid) = (peak.clone(), done.clone(), d.pid);
        std::thread::spawn(move || {
            while !done.load(std::sync::atomic::Ordering::SeqCst) {
                if let Some(kib) = std::fs::read_to_string(format!("/proc/{pid}/status"))
                    .ok()
                    .and_then(|s| {
                        s.lines()
                            .find_map(|l| l.strip_prefix("VmRSS:"))
                            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
                    })
                {
                    peak.fetch_max(kib, std::sync::atomic::Ordering::SeqCst);
                }
                std::thread::sleep(Duration::from_millis(5));
            }
        })
    };
    let blocks = if o.quick { 1 } else { 3 };
    let (mut job_rates, mut file_rates) = (Vec::new(), Vec::new());
    let floor_file = d.state_dir().join("bench-job-floor.bin");
    let mb = bytes as f64 / (1 << 20) as f64;
    // A full disk is the machine's, not the daemon's: the figure is then reported without its
    // floor (the job's own ring file is 16 MiB), and the reason printed.
    let floor_needs = bytes + (64 << 20);
    let mut floor_failure = free_bytes(&d.state_dir())
        .filter(|free| *free < floor_needs)
        .map(|free| {
            format!(
                "the floor needs {} MiB on the state dir's disk and {} MiB are free",
                floor_needs >> 20,
                free >> 20
            )
        });
    for _ in 0..blocks {
        if floor_failure.is_none() {
            let t = Instant::now();
            let out = Command::new("bash")
                .args(["-c", &format!("{command} > '{}'", floor_file.display())])
                .stdin(Stdio::null())
                .output()
                .expect("the floor's head");
            if out.status.success() {
                file_rates.push(mb / t.elapsed().as_secs_f64());
            } else {
                floor_failure = Some(format!(
                    "the floor's write failed: {}",
                    String::from_utf8_lossy(&out.stderr).trim()
                ));
            }
            let _ = std::fs::remove_file(&floor_file);
        }

        let t = Instant::now();
        let job = start_job(&mut conn, &command);
        let end = wait_job_end(&mut conn, &job);
        job_rates.push(mb / t.elapsed().as_secs_f64());
        let s = &end["structuredContent"];
        assert_eq!(s["stdout_total"], bytes, "{}", clip(&end.to_string()));
        assert_eq!(s["exit_code"], 0);
    }
    done.store(true, std::sync::atomic::Ordering::SeqCst);
    let _ = sampler.join();
    let growth = peak.load(std::sync::atomic::Ordering::SeqCst) as f64 - rss_before;
    let rate = percentile(&job_rates, 0.5);
    match floor_failure {
        None => {
            let floor_rate = percentile(&file_rates, 0.5);
            r.put("job_output_mb_per_s", rate, "MB/s", Some(floor_rate));
            r.check(
                "job_output_mb_per_s",
                format!(">= 50 % of a file write = {:.0} MB/s", floor_rate / 2.0),
                Some(rate >= floor_rate / 2.0),
            );
        }
        Some(why) => {
            r.put("job_output_mb_per_s", rate, "MB/s", None);
            r.check(
                "job_output_mb_per_s",
                format!(">= 50 % of a file write: not judged, {why}"),
                None,
            );
        }
    }
    r.put("job_rss_growth_kib", growth, "KiB", Some(rss_before));
    r.check(
        "job_rss_growth_kib",
        format!("<= 1024 KiB while {mb:.0} MiB stream"),
        Some(growth <= 1024.0),
    );
    d.revoke(&grant);
}

fn bench_screenshot(
    r: &mut Report,
    o: &Opts,
    d: &DaemonProc,
    pod: &mut Pod,
    grabber: Option<&Grabber>,
) {
    let (grant, mut conn) = attach_ready(d, pod, "shot", "observe");
    let tools = conn.request("tools/list", json!({}));
    let listed = tools["result"]["tools"]
        .as_array()
        .map(|t| t.iter().any(|t| t["name"] == "screenshot"))
        .unwrap_or(false);
    let first = if listed {
        Some(conn.call_tool("screenshot", json!({})))
    } else {
        None
    };
    let image = first.as_ref().and_then(|res| {
        res["content"]
            .as_array()?
            .iter()
            .find(|b| b["type"] == "image")
            .and_then(|b| b["data"].as_str())
            .map(str::len)
    });
    match (first, image) {
        (None, _) => r.note(
            "screenshot_rtt_p50",
            "ms",
            "screenshot is not served by this build".into(),
        ),
        (Some(res), None) => r.note(
            "screenshot_rtt_p50",
            "ms",
            format!(
                "screenshot answered no image (no display?): {}",
                clip(&res.to_string())
            ),
        ),
        (Some(_), Some(b64)) => {
            let req = |id: u64| {
                format!(
                    r#"{{"jsonrpc":"2.0","id":{id},"method":"tools/call","params":{{"name":"screenshot","arguments":{{}}}}}}"#
                )
            };
            let block = (o.n(30) / BLOCKS).max(1);
            let shots = |conn: &mut PodConn| -> Vec<f64> {
                conn.sequential(block, req)
                    .into_iter()
                    .map(|u| u / 1e3)
                    .collect()
            };
            let (grab, rtts) = match grabber {
                Some(g) => {
                    let (floor, rtts) = interleave(
                        BLOCKS,
                        || (0..block).map(|_| g.grab().0).collect(),
                        || shots(&mut conn),
                    );
                    (Some(percentile(&floor, 0.5)), rtts)
                }
                None => (None, (0..BLOCKS).flat_map(|_| shots(&mut conn)).collect()),
            };
            let p50 = percentile(&rtts, 0.5);
            r.put("screenshot_rtt_p50", p50, "ms", grab);
            r.put("screenshot_base64_bytes", b64 as f64, "bytes", None);
            if let Some(g) = grab {
                r.check(
                    "screenshot_rtt_p50",
                    format!("<= grab_png + 15 ms = {:.1} ms", g + 15.0),
                    Some(p50 <= g + 15.0),
                );
            }
        }
    }
    d.revoke(&grant);
}

// ---------------------------------------------------------------------------------------
// desktop_snapshot (contract §17): a `zenity --list` window of about 200 shown elements on
// the bench's display, in a session bus of its own; beside it, screenshot on the same
// display through the same daemon.

/// Rows, columns and window height of the list: about 200 elements are shown on a
/// 1280x800 screen (the rest of the rows are scrolled away, not shown, not listed).
const A11Y_ROWS: usize = 400;
const A11Y_COLUMNS: usize = 6;
const A11Y_HEIGHT: &str = "--height=800";

/// Kills a process group when dropped (the session bus and what it activated).
struct Group(Child);

impl Drop for Group {
    fn drop(&mut self) {
        let _ = Command::new("kill")
            .args(["-KILL", "--", &format!("-{}", self.0.id())])
            .status();
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// The floor of `desktop_snapshot_ms`, in this process over the tool's own accessibility
/// bus code (`tools::a11y::bus`, whose batches are pipelined): the elements one snapshot
/// shows, walked from the registry as plainly as a walk can be: one batch per level asking
/// each element's role, name and children, every request of a level sent before a reply is
/// read, descending only into the children the snapshot showed.
struct A11yWalk {
    bus: handnode::tools::a11y::bus::Bus,
    app: String,
    /// The (bus name, path) of every element a snapshot showed.
    shown: HashSet<(String, String)>,
    /// Elements the last walk reached.
    walked: usize,
    /// Calls the last walk and the last read sent, and how many of the read's went to the
    /// application directly (on its own socket, not through the bus).
    walk_calls: usize,
    read_calls: usize,
    read_direct_calls: usize,
}

impl A11yWalk {
    fn new(env: &handnode::tools::display::DisplayEnv, app: &str) -> A11yWalk {
        let bus = handnode::tools::a11y::bus::Bus::open(env, Duration::from_secs(5))
            .expect("the accessibility bus");
        let mut w = A11yWalk {
            bus,
            app: app.to_string(),
            shown: HashSet::new(),
            walked: 0,
            walk_calls: 0,
            read_calls: 0,
            read_direct_calls: 0,
        };
        w.read();
        w
    }

    /// The snapshot's own tree read (`tools::a11y::tree::read`) in this process: ms.
    /// Keeps which elements it showed.
    fn read(&mut self) -> f64 {
        use handnode::tools::a11y::{tree, DEFAULT_MAX_NODES};
        let opts = tree::Opts {
            app: Some(self.app.clone()),
            max_nodes: DEFAULT_MAX_NODES,
            offscreen: false,
        };
        let (t, sent, direct) = (Instant::now(), self.bus.sent, self.bus.sent_direct);
        let snap = tree::read(&mut self.bus, &opts, &|| false).expect("a snapshot");
        let took = ms(t.elapsed());
        self.read_calls = self.bus.sent - sent;
        self.read_direct_calls = self.bus.sent_direct - direct;
        self.shown = snap
            .nodes
            .iter()
            .map(|n| (n.el.bus.clone(), n.el.path.clone()))
            .collect();
        took
    }

    /// One plain walk: ms.
    fn walk(&mut self) -> f64 {
        use handnode::tools::a11y::bus::{Req, ACCESSIBLE, REGISTRY, ROOT_PATH};
        use handnode::wire::dbus::Val;
        let refs = |answer: &Result<Vec<Val>, _>| -> Vec<(String, String)> {
            let Ok(v) = answer else { return Vec::new() };
            v.first()
                .map(Val::items)
                .unwrap_or_default()
                .iter()
                .filter_map(|i| match i.items() {
                    [b, p] => Some((b.as_str()?.to_string(), p.as_str()?.to_string())),
                    _ => None,
                })
                .collect()
        };
        let (t, sent) = (Instant::now(), self.bus.sent);
        let apps = refs(
            &self
                .bus
                .call(Req::new(REGISTRY, ROOT_PATH, ACCESSIBLE, "GetChildren")),
        );
        let names: Vec<Req> = apps
            .iter()
            .map(|(b, p)| Req::prop(b, p, ACCESSIBLE, "Name"))
            .collect();
        let names = self.bus.batch(&names);
        let mut level: Vec<(String, String)> = apps
            .into_iter()
            .zip(names)
            .filter(|(_, n)| {
                n.as_ref()
                    .ok()
                    .and_then(|v| v.first())
                    .and_then(Val::as_str)
                    == Some(self.app.as_str())
            })
            .map(|(a, _)| a)
            .collect();
        let mut walked = 0;
        while !level.is_empty() {
            walked += level.len();
            let reqs: Vec<Req> = level
                .iter()
                .flat_map(|(b, p)| {
                    [
                        Req::new(b, p, ACCESSIBLE, "GetChildren"),
                        Req::new(b, p, ACCESSIBLE, "GetRoleName"),
                        Req::prop(b, p, ACCESSIBLE, "Name"),
                    ]
                })
                .collect();
            let answers = self.bus.batch(&reqs);
            level = (0..level.len())
                .flat_map(|k| refs(&answers[3 * k]))
                .filter(|el| self.shown.contains(el))
                .collect();
        }
        self.walked = walked;
        self.walk_calls = self.bus.sent - sent;
        ms(t.elapsed())
    }
}

fn bench_a11y(r: &mut Report, o: &Opts, dir: &Path, display: Option<&str>) {
    use std::os::unix::fs::PermissionsExt;
    use std::os::unix::process::CommandExt;
    let Some(display) = display else {
        r.note("desktop_snapshot_ms", "ms", "no DISPLAY".into());
        return;
    };
    for program in ["dbus-daemon", "zenity", "/usr/libexec/at-spi-bus-launcher"] {
        let found = if program.starts_with('/') {
            Path::new(program).exists()
        } else {
            Command::new("which")
                .arg(program)
                .stdout(Stdio::null())
                .status()
                .is_ok_and(|s| s.success())
        };
        if !found {
            r.note(
                "desktop_snapshot_ms",
                "ms",
                format!("{program} is not installed (apt install zenity at-spi2-core dbus-daemon)"),
            );
            return;
        }
    }
    let runtime = dir.join("a11y-runtime");
    std::fs::create_dir_all(&runtime).unwrap();
    std::fs::set_permissions(&runtime, std::fs::Permissions::from_mode(0o700)).unwrap();
    let runtime_s = runtime.display().to_string();
    let path = std::env::var("PATH").unwrap_or_else(|_| "/usr/bin:/bin".into());
    let base: Vec<(&str, &str)> = vec![
        ("DISPLAY", display),
        ("XDG_RUNTIME_DIR", &runtime_s),
        ("HOME", &runtime_s),
        ("PATH", &path),
    ];
    let mut bus = Command::new("dbus-daemon")
        .args(["--session", "--nofork", "--print-address"])
        .env_clear()
        .envs(base.iter().copied())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .process_group(0)
        .spawn()
        .expect("dbus-daemon starts");
    let stdout = bus.stdout.take().unwrap();
    let _bus = Group(bus);
    let mut line = String::new();
    BufReader::new(stdout)
        .read_line(&mut line)
        .expect("dbus-daemon prints its address");
    let address = line.trim().to_string();
    // The accessibility bus and its registry up before the window, as in a running session.
    let env = handnode::tools::display::DisplayEnv {
        dbus_session_bus_address: Some(address.clone()),
        ..Default::default()
    };
    let deadline = Instant::now() + WATCHDOG;
    while let Err(why) = handnode::tools::a11y::bus_status(&env, Duration::from_secs(5)) {
        assert!(
            Instant::now() < deadline,
            "watchdog: no accessibility bus: {why}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    let columns: Vec<String> = (0..A11Y_COLUMNS)
        .map(|c| format!("--column=col {c}"))
        .collect();
    let cells: Vec<String> = (0..A11Y_ROWS * A11Y_COLUMNS)
        .map(|i| format!("r{} c{}", i / A11Y_COLUMNS, i % A11Y_COLUMNS))
        .collect();
    let mut zenity = Command::new("zenity")
        .args(["--list", "--width=1200", A11Y_HEIGHT])
        .args(&columns)
        .args(&cells)
        .env_clear()
        .envs(base.iter().copied())
        .env("DBUS_SESSION_BUS_ADDRESS", &address)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("zenity starts");
    let d = DaemonProc::start_env(
        &o.bin,
        &dir.join("a11y"),
        Some(display),
        &[],
        &[
            ("DBUS_SESSION_BUS_ADDRESS", &address),
            ("XDG_RUNTIME_DIR", &runtime_s),
        ],
    );
    let mut pod = Pod::start();
    let (grant, mut conn) = attach_ready(&d, &mut pod, "a11y", "observe");
    let args = json!({"app": "zenity"});
    let deadline = Instant::now() + WATCHDOG;
    let first = loop {
        let res = conn.call_tool("desktop_snapshot", args.clone());
        let text = res["content"][0]["text"].as_str().unwrap_or("").to_string();
        if res["isError"] != true && text.contains("table cell") {
            break res;
        }
        assert!(
            Instant::now() < deadline,
            "watchdog: the list never appeared: {}",
            clip(&res.to_string())
        );
        std::thread::sleep(Duration::from_millis(50));
    };
    if std::env::var_os("BENCH_SHOW_A11Y").is_some() {
        eprintln!("{}", first["content"][0]["text"].as_str().unwrap_or(""));
    }
    let nodes = first["structuredContent"]["nodes"]
        .as_array()
        .map_or(0, Vec::len);
    let text_kb = first["content"][0]["text"].as_str().map_or(0, str::len) as f64 / 1024.0;
    let req = |name: &'static str, args: &'static str| {
        move |id: u64| {
            format!(
                r#"{{"jsonrpc":"2.0","id":{id},"method":"tools/call","params":{{"name":"{name}","arguments":{args}}}}}"#
            )
        }
    };
    let n = o.n(30);
    // The floor: a plain pipelined walk of the same elements over the tool's own bus code.
    let mut walker = A11yWalk::new(&env, "zenity");
    let block = (n / BLOCKS).max(1);
    let (mut snaps, mut walks, mut reads, mut bus_reads) =
        (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    for _ in 0..BLOCKS {
        snaps.extend(
            conn.sequential(block, req("desktop_snapshot", r#"{"app":"zenity"}"#))
                .into_iter()
                .map(|u| u / 1e3),
        );
        walks.extend((0..block).map(|_| walker.walk()));
        // Like for like: the same read with every call over the bus, as the walk's are.
        walker.bus.direct = false;
        bus_reads.extend((0..block).map(|_| walker.read()));
        walker.bus.direct = true;
        reads.extend((0..block).map(|_| walker.read()));
    }
    let shots: Vec<f64> = conn
        .sequential(n, req("screenshot", "{}"))
        .into_iter()
        .map(|u| u / 1e3)
        .collect();
    let (p50, shot, walk) = (
        percentile(&snaps, 0.5),
        percentile(&shots, 0.5),
        percentile(&walks, 0.5),
    );
    r.put("a11y_walk_ms", walk, "ms", None);
    r.put("a11y_walk_elements", walker.walked as f64, "nodes", None);
    r.put("a11y_walk_calls", walker.walk_calls as f64, "calls", None);
    r.put(
        "desktop_snapshot_calls",
        walker.read_calls as f64,
        "calls",
        Some(walker.walk_calls as f64),
    );
    r.put(
        "desktop_snapshot_read_ms",
        percentile(&reads, 0.5),
        "ms",
        Some(walk),
    );
    r.put(
        "desktop_snapshot_read_bus_ms",
        percentile(&bus_reads, 0.5),
        "ms",
        Some(walk),
    );
    r.put(
        "desktop_snapshot_direct_calls",
        walker.read_direct_calls as f64,
        "calls",
        Some(walker.read_calls as f64),
    );
    r.put("desktop_snapshot_ms", p50, "ms", Some(walk));
    r.put("desktop_snapshot_nodes", nodes as f64, "nodes", None);
    r.put("desktop_snapshot_text_kb", text_kb, "KiB", None);
    r.put("a11y_screenshot_rtt_p50", shot, "ms", None);
    r.check(
        "desktop_snapshot_ms",
        format!(
            "<= 150 ms and <= 2 x a11y_walk = {:.1} ms ({nodes} elements)",
            2.0 * walk
        ),
        Some(p50 <= 150.0 && p50 <= 2.0 * walk),
    );
    r.check(
        "desktop_snapshot_text_kb",
        "<= 16 KiB".into(),
        Some(text_kb <= 16.0),
    );
    d.revoke(&grant);
    let _ = zenity.kill();
    let _ = zenity.wait();
}

// ---------------------------------------------------------------------------------------
// The browser tier: a grant's first browser call (the browser starts) against starting the
// same Playwright MCP command and navigating directly; the daemon's memory per browser grant.

/// The pinned Playwright MCP on stdio with Debian's chromium, as the tests run it.
fn browser_argv() -> Result<Vec<String>, String> {
    match playwright::missing() {
        Some(why) => Err(why),
        None => Ok(playwright::browser_command()),
    }
}

/// Where the first navigation of each measurement goes.
const BROWSER_URL: &str = "about:blank";

/// The floor: spawn the command, `initialize`, navigate, in a fresh directory; then kill
/// every process of it. Milliseconds from spawn to the navigation's reply.
fn browser_cold_start(argv: &[String], base: &Path, n: usize) -> f64 {
    let dir = base.join(format!("floor-{n}"));
    for sub in ["tmp", "out"] {
        std::fs::create_dir_all(dir.join(sub)).unwrap();
    }
    let started = Instant::now();
    let mut child = Command::new(&argv[0])
        .args(&argv[1..])
        .arg("--output-dir")
        .arg(dir.join("out"))
        .current_dir(&dir)
        .env("TMPDIR", dir.join("tmp"))
        .env(handnode::browser::sweep::TAG_VAR, &dir)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("start the browser command");
    let mut stdin = child.stdin.take().unwrap();
    let mut stdout = BufReader::new(child.stdout.take().unwrap());
    let mut send = |v: Value| {
        stdin.write_all(format!("{v}\n").as_bytes()).unwrap();
        stdin.flush().unwrap();
    };
    let mut wait_for = |id: u64| loop {
        let mut line = String::new();
        assert!(
            stdout.read_line(&mut line).unwrap() > 0,
            "the browser command exited"
        );
        let v: Value = serde_json::from_str(&line).unwrap_or(Value::Null);
        if v["id"] == json!(id) {
            assert!(v.get("error").is_none(), "{}", clip(&line));
            return v;
        }
    };
    send(
        json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {},
        "clientInfo": {"name": "bench", "version": "0"}}}),
    );
    wait_for(1);
    send(json!({"jsonrpc": "2.0", "method": "notifications/initialized"}));
    send(json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call",
                "params": {"name": "browser_navigate", "arguments": {"url": BROWSER_URL}}}));
    let reply = wait_for(2);
    let took = ms(started.elapsed());
    assert_ne!(reply["result"]["isError"], true, "{reply}");
    handnode::browser::sweep::kill_browser_processes(&dir, Duration::from_secs(5));
    let _ = child.wait();
    let _ = std::fs::remove_dir_all(&dir);
    took
}

/// `Pss` of a process in KiB (its share of shared pages), 0 when it is gone.
fn pss_kib(pid: i32) -> f64 {
    std::fs::read_to_string(format!("/proc/{pid}/smaps_rollup"))
        .ok()
        .and_then(|t| {
            t.lines()
                .find_map(|l| l.strip_prefix("Pss:"))
                .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        })
        .unwrap_or(0.0)
}

/// The directories the daemon's browsers live in right now.
fn browser_dirs(base: &Path) -> Vec<PathBuf> {
    std::fs::read_dir(base)
        .map(|d| {
            d.flatten()
                .map(|e| e.path())
                .filter(|p| p.join(handnode::browser::sweep::OWNER_FILE).is_file())
                .collect()
        })
        .unwrap_or_default()
}

/// Wait until the daemon has no browser left under `base`.
fn wait_no_browsers(base: &Path) {
    let deadline = Instant::now() + WATCHDOG;
    while !browser_dirs(base).is_empty() {
        assert!(
            Instant::now() < deadline,
            "watchdog: a browser outlived its grant"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn bench_browser(r: &mut Report, o: &Opts, dir: &Path) {
    let argv = match browser_argv() {
        Ok(argv) => argv,
        Err(why) => {
            r.note(
                "browser_first_call_ms",
                "ms",
                format!("not measured: {why}"),
            );
            return;
        }
    };
    // Short: chromium's socket lives under it.
    let base = PathBuf::from(format!("/tmp/hnbench-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&base);
    let command = argv
        .iter()
        .map(|w| format!("'{w}'"))
        .collect::<Vec<_>>()
        .join(" ");
    let extra = vec![
        "--browser-command".to_string(),
        command,
        "--browser-dir".into(),
        base.join("daemon").display().to_string(),
    ];
    let d = DaemonProc::start_with(&o.bin, &dir.join("browser"), None, &extra);
    // The start-up probe has learned the tool list (and is gone) before anything is measured.
    let log = dir.join("browser/daemon.log");
    let deadline = Instant::now() + WATCHDOG;
    while !std::fs::read_to_string(&log)
        .unwrap_or_default()
        .contains("tools a browser grant may use")
    {
        assert!(
            Instant::now() < deadline,
            "watchdog: the browser probe never finished"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    wait_no_browsers(&base.join("daemon"));
    let mut pod = Pod::start();

    let n = if o.quick { 3 } else { 7 };
    let (mut floor, mut first) = (Vec::new(), Vec::new());
    for i in 0..n {
        floor.push(browser_cold_start(&argv, &base, i));
        let session = format!("brw-{i}");
        let (grant, mut conn) = attach_ready(&d, &mut pod, &session, "browser");
        let t = Instant::now();
        let result = conn.call_tool("browser_navigate", json!({"url": BROWSER_URL}));
        first.push(ms(t.elapsed()));
        assert_ne!(result["isError"], true, "{result}");
        d.revoke(&grant);
        wait_no_browsers(&base.join("daemon"));
    }
    let cold = percentile(&floor, 0.5);
    let call = percentile(&first, 0.5);
    r.put("browser_cold_start_ms", cold, "ms", None);
    r.put("browser_first_call_ms", call, "ms", Some(cold));
    r.check(
        "browser_first_call_ms",
        format!("<= cold start + 100 ms ({:.0})", cold + 100.0),
        Some(call <= cold + 100.0),
    );

    // Memory: the daemon before and with two browser grants whose browsers run.
    std::thread::sleep(Duration::from_millis(500));
    let (before, _) = d.rss_kib();
    let mut held = Vec::new();
    for i in 0..2 {
        let (grant, mut conn) = attach_ready(&d, &mut pod, &format!("brm-{i}"), "browser");
        let result = conn.call_tool("browser_navigate", json!({"url": BROWSER_URL}));
        assert_ne!(result["isError"], true, "{result}");
        let snap = conn.call_tool("browser_snapshot", json!({}));
        assert_ne!(snap["isError"], true, "{snap}");
        held.push((grant, conn));
    }
    std::thread::sleep(Duration::from_millis(500));
    let (after, _) = d.rss_kib();
    let per = (after - before) / held.len() as f64;
    let browsers: f64 = browser_dirs(&base.join("daemon"))
        .iter()
        .flat_map(|b| handnode::browser::sweep::processes(b))
        .map(pss_kib)
        .sum();
    r.put("rss_per_browser_grant_kib", per, "KiB", None);
    r.check(
        "rss_per_browser_grant_kib",
        "<= 1024 KiB (the daemon's own)".into(),
        Some(per <= 1024.0),
    );
    r.put(
        "browser_pss_per_grant_kib",
        browsers / held.len() as f64,
        "KiB",
        None,
    );
    for (grant, _) in &held {
        d.revoke(grant);
    }
    wait_no_browsers(&base.join("daemon"));
    drop(d);
    let _ = std::fs::remove_dir_all(&base);
}

/// Bytes of other grants' calls before the measured grant's in the long audit file: under
/// the 10 MiB rotation size, so the daemon's own records do not rotate it away.
const AUDIT_FILLER_BYTES: usize = 9 << 20;
/// The measured grant's calls at the end of the audit file, and the `limit` asked for.
const AUDIT_TAIL_CALLS: usize = 50;

fn audit_line(grant: &str, n: usize) -> String {
    json!({"ts": "2026-11-30T12:00:00Z", "ts_ms": n, "kind": "tool_call", "grant_id": grant,
           "principal": "bench", "session": "bench", "tool": "sys_info", "outcome": "ok",
           "duration_ms": 0})
    .to_string()
}

/// A daemon whose state dir starts with an audit file of `filler` bytes of another grant's
/// calls followed by [`AUDIT_TAIL_CALLS`] of `grant`'s.
fn audit_daemon(o: &Opts, dir: &Path, grant: &str, filler: usize) -> DaemonProc {
    use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
    let state = dir.join("state");
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(&state)
        .unwrap();
    let mut text = String::with_capacity(filler + AUDIT_TAIL_CALLS * 256);
    let other = "00000000-0000-4000-8000-000000000000";
    let mut n = 0;
    while text.len() < filler {
        text.push_str(&audit_line(other, n));
        text.push('\n');
        n += 1;
    }
    for _ in 0..AUDIT_TAIL_CALLS {
        text.push_str(&audit_line(grant, n));
        text.push('\n');
        n += 1;
    }
    std::fs::OpenOptions::new()
        .create(true)
        .truncate(true)
        .write(true)
        .mode(0o600)
        .open(state.join("audit.jsonl"))
        .and_then(|mut f| f.write_all(text.as_bytes()))
        .unwrap();
    DaemonProc::start(&o.bin, dir, None)
}

/// Latencies (us) of `GET path`, after a warm-up, each checked to be a `200`.
fn get_latencies(d: &DaemonProc, path: &str, n: usize) -> Vec<f64> {
    let one = || {
        let t = Instant::now();
        let (status, v) = d.http("GET", path, None);
        assert_eq!(status, 200, "GET {path}: {v}");
        us(t.elapsed())
    };
    for _ in 0..n / 10 + 1 {
        one();
    }
    (0..n).map(|_| one()).collect()
}

/// `GET /audit` (the console's Activity view) reads the audit file backwards, so a grant's
/// newest calls cost the same whether the file holds only them or 9 MiB of older records
/// (the floor is the same request on the short file); a grant with no calls in it reads the
/// whole file, bounded by the 16 MiB scan.
fn bench_audit(r: &mut Report, o: &Opts, dir: &Path) {
    let grant = "0b7e1c2a-5d1f-4c3e-9a47-2f0c8d6e1b90";
    let absent = "1c8f2d3b-6e2a-4d4f-8b58-3a1d9e7f2ca1";
    let tail = format!("/audit?grant={grant}&limit={AUDIT_TAIL_CALLS}");
    let n = o.n(300);
    let short = audit_daemon(o, &dir.join("audit-short"), grant, 0);
    let floor = percentile(&get_latencies(&short, &tail, n), 0.5);
    drop(short);
    let long = audit_daemon(o, &dir.join("audit-long"), grant, AUDIT_FILLER_BYTES);
    let (_, v) = long.http("GET", &tail, None);
    assert_eq!(
        v["calls"].as_array().map(Vec::len),
        Some(AUDIT_TAIL_CALLS),
        "GET {tail}: {v}"
    );
    let p50 = percentile(&get_latencies(&long, &tail, n), 0.5);
    let whole = percentile(
        &get_latencies(&long, &format!("/audit?grant={absent}"), o.n(50)),
        0.5,
    );
    r.put("audit_tail_9mib_p50", p50, "us", Some(floor));
    r.put("audit_absent_9mib_p50", whole, "us", None);
    r.check(
        "audit_tail_9mib_p50",
        format!("<= 1.5 x the same on a short file = {:.0} us", 1.5 * floor),
        Some(p50 <= 1.5 * floor),
    );
}

/// What the journal adds to a call (§22), in-process: `Journal::track` and the completion
/// of a `sys_info`-sized cached answer with the writer thread running, beside the same call
/// path without a journal; and a thumbnail (a 1920x1080 PNG to a JPEG of long edge 640)
/// beside decoding that PNG alone.
fn bench_journal(r: &mut Report, o: &Opts, dir: &Path) {
    use handnode::journal::{Journal, Settings};
    use handnode::pool::{CallCtl, Completion};
    use handnode::wire::mcp::ToolOutput;
    let answer: std::sync::Arc<str> = format!(
        r#"{{"content":[{{"type":"text","text":"{}"}}]}}"#,
        "box facts ".repeat(180)
    )
    .into();
    let grant = "2c8f2d3b-6e2a-4d4f-8b58-3a1d9e7f2ca1";
    let per_call = |journal: &std::sync::Arc<Journal>, n: usize| -> f64 {
        let ctl = CallCtl::new();
        let args = json!({});
        let start = Instant::now();
        for _ in 0..n {
            let done = journal.track(
                Some(grant),
                "sys_info",
                &args,
                &ctl,
                None,
                Completion::new(|_| {}),
            );
            done.complete(ToolOutput::Encoded {
                json: std::sync::Arc::clone(&answer),
                is_error: false,
            });
        }
        us(start.elapsed()) / n as f64
    };
    let n = o.n(20_000);
    let off = Journal::disabled();
    per_call(&off, n / 10);
    let floor = per_call(&off, n);
    let on = Journal::start(Settings {
        dir: Some(dir.join("journal-bench")),
        max_bytes: 64 << 20,
        keep: Duration::from_secs(86_400),
        sweep_every: Duration::from_secs(3600),
    })
    .expect("start the journal");
    per_call(&on, n / 10);
    let mut rounds: Vec<f64> = (0..5).map(|_| per_call(&on, n / 5)).collect();
    assert!(
        on.flush(Duration::from_secs(60)),
        "watchdog: the journal writer never caught up"
    );
    rounds.sort_by(f64::total_cmp);
    let cost = rounds[rounds.len() / 2] - floor;
    r.put("journal_sys_info_added_us", cost, "us", Some(floor));
    r.check(
        "journal_sys_info_added_us",
        "<= 5 us".into(),
        Some(cost <= 5.0),
    );
    drop(on);

    // A thumbnail of a busy full-HD screen.
    let (w, h) = (1920u32, 1080u32);
    let mut pixels = Vec::with_capacity((w * h * 3) as usize);
    for y in 0..h {
        for x in 0..w {
            pixels.extend_from_slice(&[(x % 251) as u8, (y % 241) as u8, ((x * y) % 239) as u8]);
        }
    }
    let mut png_bytes = Vec::new();
    {
        let mut enc = png::Encoder::new(&mut png_bytes, w, h);
        enc.set_color(png::ColorType::Rgb);
        enc.set_depth(png::BitDepth::Eight);
        let mut writer = enc.write_header().expect("png header");
        writer.write_image_data(&pixels).expect("png data");
    }
    let rounds = o.n(30);
    let decode: Vec<f64> = (0..rounds)
        .map(|_| {
            let start = Instant::now();
            let mut dec = png::Decoder::new(std::io::Cursor::new(&png_bytes))
                .read_info()
                .expect("png info");
            let mut buf = vec![0; dec.output_buffer_size().expect("png size")];
            dec.next_frame(&mut buf).expect("png frame");
            ms(start.elapsed())
        })
        .collect();
    let thumbs: Vec<f64> = (0..rounds)
        .map(|_| {
            let start = Instant::now();
            let (jpeg, tw, th) =
                handnode::tools::display::jpeg_thumbnail(&png_bytes, 640).expect("thumbnail");
            assert!(tw == 640 && th == 360 && jpeg.len() > 100);
            ms(start.elapsed())
        })
        .collect();
    let p50 = percentile(&thumbs, 0.5);
    r.put(
        "thumbnail_ms_p50",
        p50,
        "ms",
        Some(percentile(&decode, 0.5)),
    );
    r.check("thumbnail_ms_p50", "<= 30 ms".into(), Some(p50 <= 30.0));
}

/// Largest stripped dynamic release binary (bytes): 5 MiB (issue 25 moved it from 4 to make
/// room for plain code over byte-saving tricks).
const MAX_DYNAMIC_BINARY_BYTES: u64 = 5 << 20;
/// Largest stripped static release binary (bytes): 6 MiB.
const MAX_STATIC_BINARY_BYTES: u64 = 6 << 20;

/// `<= N MiB (bytes)`, as a target is shown.
fn size_target(bytes: u64) -> String {
    format!("<= {} MiB ({bytes})", bytes as f64 / 1048576.0)
}

fn bench_binary(r: &mut Report, o: &Opts) {
    let size = std::fs::metadata(&o.bin)
        .expect("the handnode binary")
        .len() as f64;
    r.put("binary_bytes_dynamic", size, "bytes", None);
    r.check(
        "binary_bytes_dynamic",
        size_target(MAX_DYNAMIC_BINARY_BYTES),
        Some(size <= MAX_DYNAMIC_BINARY_BYTES as f64),
    );
    match &o.static_bin {
        Some(p) => {
            let size = std::fs::metadata(p).expect("the static binary").len() as f64;
            r.emit(Metric {
                name: "binary_bytes_static".into(),
                value: Some(size),
                unit: "bytes",
                floor: None,
                note: Some(format!("libc: {}", o.static_libc)),
            });
            r.check(
                "binary_bytes_static",
                size_target(MAX_STATIC_BINARY_BYTES),
                Some(size <= MAX_STATIC_BINARY_BYTES as f64),
            );
        }
        None => r.note(
            "binary_bytes_static",
            "bytes",
            "no --static-bin given".into(),
        ),
    }
}

/// What `--placement` meant for this run, in words.
fn placement(o: &Opts) -> String {
    let allowed = std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("Cpus_allowed_list:"))
                .map(|v| v.trim().to_string())
        })
        .unwrap_or_default();
    match (o.placement.as_str(), SERVER_CPU.get().copied().flatten()) {
        ("cross", Some(cpu)) => format!(
            "cross: the bench on CPU {allowed}, the echo server and the daemon on CPU {cpu}"
        ),
        ("same", _) => {
            format!("same: the bench, the echo server and the daemon on CPU {allowed}")
        }
        (other, _) => format!(
            "{other}: no pinning (CPUs {allowed}); on a VM each round trip then takes ~7 or \
             ~60 us depending on where the scheduler puts each side"
        ),
    }
}

fn machine() -> String {
    let cpu = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|c| {
            c.lines()
                .find_map(|l| l.strip_prefix("model name"))
                .map(|v| v.trim_start_matches([' ', '\t', ':']).to_string())
        })
        .unwrap_or_else(|| "unknown CPU".into());
    // The box's CPUs: available_parallelism() would count only those scripts/bench.sh
    // pinned the bench to.
    let cpus = std::fs::read_to_string("/proc/cpuinfo")
        .map(|c| c.lines().filter(|l| l.starts_with("processor")).count())
        .unwrap_or(0);
    let load = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    let kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default();
    let secs = SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .unwrap()
        .as_secs();
    format!(
        "{cpus} CPUs, {cpu}, kernel {}, load {}, unix time {secs}",
        kernel.trim(),
        load.split(' ').take(3).collect::<Vec<_>>().join(" ")
    )
}

/// The live view's reader (§23): owns the viewer's WebSocket, keeps one incremental update
/// request outstanding, and reports each framebuffer update with pixels (its arrival time)
/// and every byte the viewer was sent.
struct LiveViewer {
    updates: mpsc::Receiver<Instant>,
    bytes: std::sync::Arc<std::sync::atomic::AtomicU64>,
}

/// RFB's FramebufferUpdateRequest.
fn rfb_update_request(incremental: bool, w: u16, h: u16) -> Vec<u8> {
    let mut m = vec![3, u8::from(incremental), 0, 0, 0, 0];
    m.extend_from_slice(&w.to_be_bytes());
    m.extend_from_slice(&h.to_be_bytes());
    m
}

impl LiveViewer {
    /// Connect to `/attach/{grant}/view`, go through RFB's handshake and ask for the whole
    /// screen; returns once the first update with pixels is read whole, with the time that took.
    /// Without `keep` the viewer is closed after its first frame.
    fn open(d: &DaemonProc, grant: &str, keep: bool) -> (Option<LiveViewer>, f64) {
        let t = Instant::now();
        let stream = TcpStream::connect(d.admin).unwrap();
        stream
            .set_read_timeout(Some(Duration::from_secs(30)))
            .unwrap();
        let mut req = tungstenite::client::IntoClientRequest::into_client_request(format!(
            "ws://{}/attach/{grant}/view",
            d.admin
        ))
        .unwrap();
        req.headers_mut().insert(
            "Authorization",
            format!("Bearer {}", d.token).parse().unwrap(),
        );
        let (ws, _) = tungstenite::client(req, stream).expect("the live view's upgrade");
        let mut rx = RfbIn {
            ws,
            buf: Vec::new(),
            bytes: 0,
        };
        rx.take(12);
        rx.send(b"RFB 003.008\n");
        let n = rx.take(1)[0] as usize;
        rx.take(n);
        rx.send(&[1]);
        rx.take(4);
        rx.send(&[1]);
        let size = rx.take(4);
        let (w, h) = (
            u16::from_be_bytes([size[0], size[1]]),
            u16::from_be_bytes([size[2], size[3]]),
        );
        rx.take(16);
        let name = rx.take(4);
        rx.take(u32::from_be_bytes([name[0], name[1], name[2], name[3]]) as usize);
        rx.send(&rfb_update_request(false, w, h));
        while rx
            .update()
            .expect("the live view ended before its first frame")
            == 0
        {
            rx.send(&rfb_update_request(false, w, h));
        }
        let first = ms(t.elapsed());
        if !keep {
            let _ = rx.ws.close(None);
            return (None, first);
        }
        let bytes = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(0));
        let (tx, updates) = mpsc::channel();
        let counted = std::sync::Arc::clone(&bytes);
        std::thread::spawn(move || {
            rx.ws.get_mut().set_read_timeout(None).ok();
            rx.bytes = 0;
            // Ends when the view does (the grant revoked) or nobody listens.
            loop {
                if rx
                    .ws
                    .send(Message::binary(rfb_update_request(true, w, h)))
                    .is_err()
                {
                    return;
                }
                let Some(rects) = rx.update() else { return };
                counted.store(rx.bytes, std::sync::atomic::Ordering::SeqCst);
                if rects > 0 && tx.send(Instant::now()).is_err() {
                    return;
                }
            }
        });
        (Some(LiveViewer { updates, bytes }), first)
    }
}

/// The viewer's side of RFB in the bench: raw encoding only (none other is asked for).
struct RfbIn {
    ws: WebSocket<TcpStream>,
    buf: Vec<u8>,
    bytes: u64,
}

impl RfbIn {
    fn send(&mut self, m: &[u8]) {
        self.ws
            .send(Message::binary(m.to_vec()))
            .expect("send to the view");
    }

    /// `n` bytes of the server's stream; `None` once the view has ended.
    fn read(&mut self, n: usize) -> Option<Vec<u8>> {
        while self.buf.len() < n {
            match self.ws.read().ok()? {
                Message::Binary(b) => {
                    self.bytes += b.len() as u64;
                    self.buf.extend_from_slice(&b);
                }
                Message::Close(_) => return None,
                _ => {}
            }
        }
        let rest = self.buf.split_off(n);
        Some(std::mem::replace(&mut self.buf, rest))
    }

    fn take(&mut self, n: usize) -> Vec<u8> {
        self.read(n)
            .expect("the live view ended during the handshake")
    }

    /// Read one FramebufferUpdate whole (skipping bells and cut text): its rectangles;
    /// `None` once the view has ended.
    fn update(&mut self) -> Option<u16> {
        loop {
            match self.read(1)?[0] {
                0 => {
                    let head = self.read(3)?;
                    let rects = u16::from_be_bytes([head[1], head[2]]);
                    for _ in 0..rects {
                        let r = self.read(12)?;
                        let (w, h) = (
                            u16::from_be_bytes([r[4], r[5]]) as usize,
                            u16::from_be_bytes([r[6], r[7]]) as usize,
                        );
                        let enc = i32::from_be_bytes([r[8], r[9], r[10], r[11]]);
                        assert_eq!(enc, 0, "raw encoding only");
                        self.read(w * h * 4)?;
                    }
                    return Some(rects);
                }
                2 => {}
                3 => {
                    self.read(3)?;
                    let n = self.read(4)?;
                    self.read(u32::from_be_bytes([n[0], n[1], n[2], n[3]]) as usize)?;
                }
                other => panic!("unexpected RFB server message {other}"),
            }
        }
    }
}

/// §23: the live view of an own display on Xvnc. `live_view_first_frame_ms`: connect to
/// the first framebuffer update with pixels read whole (1280x800 raw, ~4 MB), beside
/// `own_display_start_ms`'s scale; `live_view_update_ms`: `xsetroot -solid <colour>` run
/// by the bench on the display repaints the root window, to the viewer's update received,
/// beside that xsetroot's own run; the bytes sent to a viewer of an idle display for a
/// minute (in --quick, 6 s scaled to a minute).
fn bench_live_view(r: &mut Report, o: &Opts, d: &DaemonProc, pod: &mut Pod) {
    for (program, package) in [
        ("Xvnc", "tigervnc-standalone-server"),
        ("xsetroot", "x11-xserver-utils"),
    ] {
        if !Path::new("/usr/bin").join(program).exists() {
            r.note(
                "live_view_first_frame_ms",
                "ms",
                format!("skipped: {program} is not installed ({package})"),
            );
            return;
        }
    }
    let session = "live-view";
    let body = json!({"runtime": pod.runtime(), "session": session, "profile": "desktop",
                      "ttl_secs": 3600, "secret": POD_SECRET, "display": "own"});
    let (status, v) = d.http("POST", "/attach", Some(&body));
    assert_eq!(status, 202, "POST /attach: {v}");
    let grant = v["id"].as_str().expect("grant id").to_string();
    let mut a = pod.arrival(session);
    a.conn.initialize();
    let out = a
        .conn
        .call_tool("mouse", json!({"action": "move", "x": 5, "y": 5}));
    assert_ne!(out["isError"], true, "own display mouse: {out}");
    // At most 3 viewers, the last kept: within --live-view-max-viewers (4) even before
    // the daemon has seen the others go.
    let n = o.n(10).clamp(2, 3);
    let mut firsts = Vec::new();
    let mut viewer = None;
    for i in 0..n {
        let (v, first) = LiveViewer::open(d, &grant, i + 1 == n);
        firsts.push(first);
        viewer = v;
    }
    let viewer = viewer.expect("the last viewer is kept");
    // The repaint is made by the bench itself, as an X client of the display (its cookie is
    // in the grant's runtime dir, the daemon's user's): a tool call's own time (a walled
    // `bash` is ~150 ms on a loaded 2-core box) would hide what the view adds.
    let (_, g) = d.http("GET", &format!("/attach/{grant}"), None);
    let own = &g["own_display"];
    let display = own["display"]
        .as_str()
        .expect("own display running")
        .to_string();
    let cookie = Path::new(own["runtime_dir"].as_str().expect("runtime dir")).join("xauth");
    let colours = ["red", "green", "blue", "black", "white", "grey"];
    let (mut update, mut call) = (Vec::new(), Vec::new());
    for i in 0..o.n(40).max(8) {
        while viewer.updates.try_recv().is_ok() {}
        let t = Instant::now();
        let ok = Command::new("xsetroot")
            .args(["-solid", colours[i % colours.len()]])
            .env("DISPLAY", &display)
            .env("XAUTHORITY", &cookie)
            .status()
            .is_ok_and(|s| s.success());
        call.push(ms(t.elapsed()));
        assert!(ok, "xsetroot on the own display {display} failed");
        let at = viewer
            .updates
            .recv_timeout(Duration::from_secs(10))
            .expect("the viewer saw no update within 10 s of a repaint");
        update.push(at.saturating_duration_since(t).as_secs_f64() * 1e3);
    }
    // Idle: nothing on the display changes; what does the viewer get?
    while viewer.updates.try_recv().is_ok() {}
    let idle = if o.quick {
        Duration::from_secs(6)
    } else {
        Duration::from_secs(60)
    };
    let before = viewer.bytes.load(std::sync::atomic::Ordering::SeqCst);
    std::thread::sleep(idle);
    let sent = viewer.bytes.load(std::sync::atomic::Ordering::SeqCst) - before;
    let per_minute = sent as f64 * 60.0 / idle.as_secs_f64() / 1024.0;
    let first = percentile(&firsts, 0.5);
    r.put("live_view_first_frame_ms", first, "ms", None);
    r.check(
        "live_view_first_frame_ms",
        "<= 1000 ms (connect to the first update with pixels, 1280x800 raw)".into(),
        Some(percentile(&firsts, 0.99) <= 1000.0),
    );
    let p50 = percentile(&update, 0.5);
    r.put(
        "live_view_update_ms",
        p50,
        "ms",
        Some(percentile(&call, 0.5)),
    );
    r.put(
        "live_view_update_ms_p99",
        percentile(&update, 0.99),
        "ms",
        None,
    );
    r.check(
        "live_view_update_ms",
        "p50 <= 150 ms (xsetroot run on the display to the viewer's update; floor: xsetroot alone)"
            .into(),
        Some(p50 <= 150.0),
    );
    r.put("live_view_idle_kib_per_min", per_minute, "KiB", None);
    r.check(
        "live_view_idle_kib_per_min",
        format!(
            "<= 64 KiB a minute to an idle display's viewer (measured over {} s{})",
            idle.as_secs(),
            if o.quick { ", scaled to a minute" } else { "" }
        ),
        Some(per_minute <= 64.0),
    );
    d.revoke(&grant);
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.iter().any(|a| a == ECHO_ARG) {
        echo_server();
        return;
    }
    // `cargo test --all-targets` runs this binary too, without the `--bench` that `cargo
    // bench` passes. The benchmark is not a test (issue 5: not part of CI): say how to run it.
    if !args.iter().any(|a| a == "--bench") {
        println!("bench: not run under `cargo test`; run scripts/bench.sh or `cargo bench --bench bench`");
        return;
    }
    let o = Opts::parse(&args);
    eprintln!("bench: {}", machine());
    eprintln!("bench: placement: {}", placement(&o));
    eprintln!("bench: daemon {}", o.bin.display());
    let dir = std::env::temp_dir().join(format!("handnode-bench-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let display = std::env::var("DISPLAY").ok().filter(|d| !d.is_empty());
    let mut r = Report::default();
    let mut _painter = None;
    if let (Some(d), Some(_)) = (&display, std::env::var_os("BENCH_PAINT_ROOT")) {
        match paint_root(d) {
            Ok((conn, w, h)) => {
                eprintln!("bench: painted a {w}x{h} desktop-like picture on {d}");
                _painter = Some(conn);
            }
            Err(e) => eprintln!(
                "bench: could not paint the screen ({e}); screenshots are of a blank screen"
            ),
        }
    }

    bench_binary(&mut r, &o);
    if o.runs("memory") {
        // Memory first, on a fresh daemon.
        let d = DaemonProc::start(&o.bin, &dir.join("mem"), display.as_deref());
        let mut pod = Pod::start();
        eprintln!("bench: memory (daemon pid {})", d.pid);
        bench_memory(&mut r, &o, &d, &mut pod);
    }
    if o.runs("owed") {
        // On a fresh daemon too: its peak is this flood's alone.
        let d = DaemonProc::start_with(
            &o.bin,
            &dir.join("owed"),
            display.as_deref(),
            &["--write-stall-ms".into(), "600000".into()],
        );
        let mut pod = Pod::start();
        eprintln!("bench: owed replies (daemon pid {})", d.pid);
        bench_owed(&mut r, &d, &mut pod);
    }
    eprintln!("bench: floors");
    let mut echo = floor_echo(&mut r, &o);
    floor_spawn(&mut r, &o);
    let d = DaemonProc::start(&o.bin, &dir.join("run"), display.as_deref());
    floor_fsync(&mut r, &o, &d.state_dir());
    let grabber = Grabber::new(display.as_deref(), &dir);
    floor_grab(&mut r, &o, grabber.as_ref());
    let mut pod = Pod::start();
    if o.runs("latency") {
        eprintln!("bench: latency (daemon pid {})", d.pid);
        bench_latency(&mut r, &o, &d, &mut pod, &mut echo);
    }
    if o.runs("approval") {
        eprintln!("bench: approval");
        bench_approval(&mut r, &o, &d, &mut pod);
    }
    if o.runs("attach") {
        eprintln!("bench: attach/revoke");
        bench_attach_revoke(&mut r, &o, &d, &mut pod);
    }
    if o.runs("redial") {
        eprintln!("bench: redial");
        bench_redial(&mut r, &o, &d, &mut pod);
    }
    if o.runs("screenshot") {
        eprintln!("bench: screenshot");
        bench_screenshot(&mut r, &o, &d, &mut pod, grabber.as_ref());
    }
    if o.runs("own_display") {
        eprintln!("bench: own display");
        bench_own_display(&mut r, &o, &d, &mut pod, &dir);
    }
    if o.runs("live_view") {
        eprintln!("bench: live view");
        bench_live_view(&mut r, &o, &d, &mut pod);
    }
    if o.runs("jobs") {
        eprintln!("bench: jobs");
        bench_jobs(&mut r, &o, &d, &mut pod);
    }
    if o.runs("containment") {
        eprintln!("bench: containment (grant_kill_ms)");
        bench_grant_kill(&mut r, &o, &d, &mut pod);
    }
    if o.runs("halt") {
        eprintln!("bench: halt (halt_ms_p99)");
        bench_halt(&mut r, &o, &d, &mut pod);
    }
    if o.runs("files") {
        eprintln!("bench: files");
        bench_files(&mut r, &o, &d, &mut pod, &mut echo);
    }
    drop(d);
    if o.runs("a11y") {
        eprintln!("bench: a11y (desktop_snapshot)");
        bench_a11y(&mut r, &o, &dir, display.as_deref());
    }
    if o.runs("browser") {
        eprintln!("bench: browser tier");
        bench_browser(&mut r, &o, &dir);
    }
    if o.runs("audit") {
        eprintln!("bench: audit");
        bench_audit(&mut r, &o, &dir);
    }
    if o.runs("journal") {
        eprintln!("bench: journal");
        bench_journal(&mut r, &o, &dir);
    }
    r.table();
    println!("machine: {}", machine());
    println!("placement: {}", placement(&o));
    let _ = std::fs::remove_dir_all(&dir);
}
