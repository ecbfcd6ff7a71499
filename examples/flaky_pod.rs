//! Soak driver: a flaky pod (WebSocket server on 127.0.0.1) plus a real `handnode`
//! process holding N grants to it. The pod misbehaves at random — closes with assorted
//! codes, drops and resets sockets, refuses (503/429) or stalls handshakes, goes silent
//! past the liveness limit, sends garbage — while driving real tool calls (fast
//! `sys_info`, slow `bash`, bursts). It prints, every minute and at the end, the calls
//! served, redials, errors by kind, and the daemon's RSS, descriptors and threads.
//!
//!   cargo run --example flaky_pod -- --handnode target/debug/handnode --minutes 10
//!
//! Used by `scripts/soak.sh`; not part of the test suite. Exit status 1 if the daemon died,
//! a reply went to the wrong request, or descriptors/threads grew between the first and
//! the last minute.

#![allow(clippy::result_large_err)] // tungstenite's handshake callback type

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use tungstenite::handshake::server::{ErrorResponse, Request, Response};
use tungstenite::protocol::frame::coding::CloseCode;
use tungstenite::protocol::CloseFrame;
use tungstenite::{Message, WebSocket};

/// Admin token given to the daemon through its environment.
const TOKEN: &str = "soak-token";
/// Daemon liveness limit (ms); a "silent" pod stays quiet longer than this.
const SILENCE_MS: u64 = 3_000;
/// Longest the pod waits for any one reply before counting it lost.
const REPLY_TIMEOUT: Duration = Duration::from_secs(60);

/// xorshift64*: enough randomness for choosing misbehaviour, no dependency.
struct Rng(u64);

impl Rng {
    fn new() -> Rng {
        let mut b = [0u8; 8];
        getrandom::fill(&mut b).expect("OS randomness");
        Rng(u64::from_ne_bytes(b) | 1)
    }
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    /// 0..n
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
    fn chance(&mut self, per_mille: u64) -> bool {
        self.below(1000) < per_mille
    }
}

#[derive(Default)]
struct Stats {
    counts: Mutex<BTreeMap<String, u64>>,
    bad: AtomicU64,
}

impl Stats {
    fn add(&self, key: &str) {
        *self
            .counts
            .lock()
            .unwrap()
            .entry(key.to_string())
            .or_insert(0) += 1;
    }
    fn get(&self, key: &str) -> u64 {
        self.counts.lock().unwrap().get(key).copied().unwrap_or(0)
    }
    fn wrong(&self, what: String) {
        eprintln!("flaky_pod: UNEXPECTED: {what}");
        self.bad.fetch_add(1, Ordering::SeqCst);
        self.add("unexpected");
    }
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let flag = |name: &str| {
        args.iter()
            .position(|a| a == name)
            .and_then(|i| args.get(i + 1))
            .cloned()
    };
    let handnode = flag("--handnode").unwrap_or_else(|| "target/debug/handnode".into());
    let minutes: f64 = flag("--minutes").map_or(10.0, |m| m.parse().expect("--minutes N"));
    let grants: usize = flag("--grants").map_or(20, |g| g.parse().expect("--grants N"));

    let stats = Arc::new(Stats::default());
    let stop = Arc::new(AtomicBool::new(false));
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let pod_addr = listener.local_addr().unwrap();
    {
        let stats = Arc::clone(&stats);
        let stop = Arc::clone(&stop);
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                if stop.load(Ordering::SeqCst) {
                    return;
                }
                let Ok(stream) = stream else { continue };
                let stats = Arc::clone(&stats);
                let stop = Arc::clone(&stop);
                std::thread::spawn(move || serve(stream, &stats, &stop));
            }
        });
    }

    let state = std::env::temp_dir().join(format!("handnode-soak-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&state);
    let (mut daemon, admin) = start_daemon(&handnode, &state);
    let pid = daemon.id();
    eprintln!("flaky_pod: pod on {pod_addr}, handnode pid {pid} on {admin}, {grants} grants, {minutes} min");
    for i in 0..grants {
        let body = json!({"runtime": format!("ws://{pod_addr}"), "session": format!("soak-{i}"),
                          "profile": "owner", "ttl_secs": 86400, "secret": format!("soak-secret-{i}")});
        let (status, v) = http(admin, "POST", "/attach", Some(&body));
        assert_eq!(status, 202, "POST /attach: {v}");
    }
    std::thread::sleep(Duration::from_secs(5));
    let first = sample(pid);
    println!("start: {}", first.show());
    let mut minute_mins: Vec<Sample> = Vec::new();
    let started = Instant::now();
    let total = Duration::from_secs_f64(minutes * 60.0);
    let mut minute = 0;
    let mut window = first.clone();
    let mut dead = false;
    while started.elapsed() < total {
        std::thread::sleep(Duration::from_millis(500));
        if let Ok(Some(status)) = daemon.try_wait() {
            stats.wrong(format!("handnode exited: {status}"));
            dead = true;
            break;
        }
        let s = sample(pid);
        window = window.min(&s);
        if started.elapsed() >= Duration::from_secs(60 * (minute + 1)) || started.elapsed() >= total
        {
            minute += 1;
            let metrics = metrics(admin);
            println!(
                "minute {minute}: {} | lowest fds {} threads {} | {}",
                s.show(),
                window.fds,
                window.threads,
                progress(&stats, &metrics, grants)
            );
            minute_mins.push(window.clone());
            window = s;
        }
    }
    let end = if dead { first.clone() } else { sample(pid) };
    let metrics = if dead { String::new() } else { metrics(admin) };
    stop.store(true, Ordering::SeqCst);
    println!("end:   {}", end.show());
    println!("{}", progress(&stats, &metrics, grants));
    for (k, v) in stats.counts.lock().unwrap().iter() {
        println!("  {k:<28} {v}");
    }
    for line in metrics.lines().filter(|l| {
        l.starts_with("handnode_closes_total")
            || l.starts_with("handnode_dial")
            || l.starts_with("handnode_grants{")
    }) {
        println!("  {line}");
    }
    let mut ok = !dead && stats.bad.load(Ordering::SeqCst) == 0;
    if let (Some(a), Some(b)) = (minute_mins.first(), minute_mins.last()) {
        // The lowest counts of a minute remove transient sockets and tool pipes.
        let grew = b.fds > a.fds + 2 || b.threads > a.threads + 2;
        println!(
            "growth: lowest fds {} -> {}, lowest threads {} -> {}, VmRSS {} -> {} KiB (first vs last minute){}",
            a.fds,
            b.fds,
            a.threads,
            b.threads,
            first.rss_kib,
            end.rss_kib,
            if grew { "  GREW" } else { "" }
        );
        ok &= !grew;
    }
    if !dead {
        let _ = rustix::process::kill_process(
            rustix::process::Pid::from_child(&daemon),
            rustix::process::Signal::TERM,
        );
    }
    let _ = daemon.wait();
    let _ = std::fs::remove_dir_all(&state);
    println!("soak: {}", if ok { "PASS" } else { "FAIL" });
    std::process::exit(if ok { 0 } else { 1 });
}

fn progress(stats: &Stats, metrics: &str, grants: usize) -> String {
    let dials = metric(metrics, "handnode_dials_total");
    format!(
        "calls served {} (tool errors {}), redials {}, connections {}",
        stats.get("result ok"),
        stats.get("result isError"),
        dials.saturating_sub(grants as u64),
        stats.get("conn accepted"),
    )
}

#[derive(Clone, Debug)]
struct Sample {
    rss_kib: u64,
    fds: usize,
    threads: usize,
}

impl Sample {
    fn min(&self, other: &Sample) -> Sample {
        Sample {
            rss_kib: self.rss_kib.min(other.rss_kib),
            fds: self.fds.min(other.fds),
            threads: self.threads.min(other.threads),
        }
    }
    fn show(&self) -> String {
        format!(
            "VmRSS {} KiB, fds {}, threads {}",
            self.rss_kib, self.fds, self.threads
        )
    }
}

fn sample(pid: u32) -> Sample {
    let count = |d: &str| std::fs::read_dir(d).map(|d| d.count()).unwrap_or(0);
    let rss_kib = std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or(0);
    Sample {
        rss_kib,
        fds: count(&format!("/proc/{pid}/fd")),
        threads: count(&format!("/proc/{pid}/task")),
    }
}

fn start_daemon(handnode: &str, state: &std::path::Path) -> (Child, SocketAddr) {
    let mut child = Command::new(handnode)
        .args([
            "serve",
            "--listen",
            "127.0.0.1:0",
            "--no-notify",
            "--no-sd-notify",
        ])
        .args(["--display-backend", "none"])
        .arg("--state-dir")
        .arg(state)
        .arg("--config-dir")
        .arg(state.join("config"))
        .args(["--backoff-base-ms", "100", "--backoff-cap-ms", "2000"])
        .args(["--backoff-reset-ms", "5000", "--ping-interval-ms", "1000"])
        .args(["--silence-limit-ms", &SILENCE_MS.to_string()])
        .args([
            "--handshake-timeout-ms",
            "2000",
            "--connect-timeout-ms",
            "2000",
        ])
        .args(["--ended-retention-ms", "10000"])
        .env("HANDNODE_TOKEN", TOKEN)
        .env("RUST_LOG", "warn,handnode=info")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("cannot start {handnode}: {e}"));
    let stderr = child.stderr.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    let log_path = state.with_extension("log");
    std::thread::spawn(move || {
        let mut log = std::fs::File::create(&log_path).ok();
        for line in BufReader::new(stderr).lines() {
            let Ok(line) = line else { break };
            if let Some(rest) = line.split("admin API listening on http://").nth(1) {
                if let Ok(addr) = rest.trim().parse::<SocketAddr>() {
                    let _ = tx.send(addr);
                }
            }
            if let Some(f) = log.as_mut() {
                let _ = writeln!(f, "{line}");
            }
        }
    });
    let addr = rx
        .recv_timeout(Duration::from_secs(20))
        .expect("handnode said where it listens");
    (child, addr)
}

fn http(addr: SocketAddr, method: &str, path: &str, body: Option<&Value>) -> (u16, Value) {
    let Ok(mut s) = TcpStream::connect(addr) else {
        return (0, Value::Null);
    };
    let _ = s.set_read_timeout(Some(Duration::from_secs(10)));
    let body = body.map(|b| b.to_string()).unwrap_or_default();
    let req = format!(
        "{method} {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\nAuthorization: Bearer {TOKEN}\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    );
    let mut raw = Vec::new();
    if s.write_all(req.as_bytes()).is_err() || s.read_to_end(&mut raw).is_err() {
        return (0, Value::Null);
    }
    let Some(pos) = raw.windows(4).position(|w| w == b"\r\n\r\n") else {
        return (0, Value::Null);
    };
    let status = String::from_utf8_lossy(&raw[..pos])
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    let text = String::from_utf8_lossy(&raw[pos + 4..]).into_owned();
    (
        status,
        serde_json::from_str(&text).unwrap_or(Value::String(text)),
    )
}

fn metrics(admin: SocketAddr) -> String {
    match http(admin, "GET", "/metrics", None) {
        (200, Value::String(text)) => text,
        _ => String::new(),
    }
}

fn metric(text: &str, name: &str) -> u64 {
    text.lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.parse().ok())
        .unwrap_or(0)
}

/// One connection from the daemon: maybe refuse or stall the handshake, else serve it.
fn serve(stream: TcpStream, stats: &Stats, stop: &AtomicBool) {
    let mut rng = Rng::new();
    if rng.chance(20) {
        // Stall the handshake past the daemon's 2 s timeout.
        stats.add("handshake stalled");
        std::thread::sleep(Duration::from_millis(2500));
        return;
    }
    let refuse = match rng.below(1000) {
        0..=29 => Some(503),
        30..=39 => Some(429),
        _ => None,
    };
    let callback = |_: &Request, resp: Response| -> Result<Response, ErrorResponse> {
        match refuse {
            None => Ok(resp),
            Some(code) => {
                let mut err = ErrorResponse::new(Some("busy".into()));
                *err.status_mut() = tungstenite::http::StatusCode::from_u16(code).unwrap();
                Err(err)
            }
        }
    };
    let _ = stream.set_read_timeout(Some(Duration::from_secs(10)));
    let ws = tungstenite::accept_hdr(stream, callback);
    if let Some(code) = refuse {
        stats.add(&format!("handshake refused {code}"));
        return;
    }
    let Ok(ws) = ws else {
        stats.add("handshake failed");
        return;
    };
    stats.add("conn accepted");
    let _ = ws
        .get_ref()
        .set_read_timeout(Some(Duration::from_millis(200)));
    let mut conn = Conn {
        ws,
        stats,
        next_id: 0,
    };
    let init = json!({"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "flaky-pod", "version": "0"}});
    if conn.call("initialize", init).is_none() {
        return;
    }
    while !stop.load(Ordering::SeqCst) {
        let roll = rng.below(1000);
        let alive = match roll {
            0..=9 => {
                let code = [1000u16, 1001, 1011, 4000, 3000][rng.below(5) as usize];
                stats.add(&format!("pod closed {code}"));
                let _ = conn.ws.close(Some(CloseFrame {
                    code: CloseCode::from(code),
                    reason: "flaky".into(),
                }));
                conn.ends_within(Duration::from_secs(3));
                false
            }
            10..=14 => {
                stats.add("pod dropped tcp");
                false
            }
            15..=19 => {
                stats.add("pod reset tcp");
                let _ = rustix::net::sockopt::set_socket_linger(
                    conn.ws.get_ref(),
                    Some(Duration::ZERO),
                );
                false
            }
            20..=23 => {
                // Neither read nor write (so pings go unanswered) past the silence limit.
                stats.add("pod went silent");
                std::thread::sleep(Duration::from_millis(SILENCE_MS + 1500));
                if !conn.ends_within(Duration::from_secs(3)) {
                    stats.wrong("the daemon kept a silent socket".into());
                }
                false
            }
            24..=33 => {
                stats.add("pod sent garbage");
                let _ = conn.ws.send(Message::text("{not json"));
                match conn.reply_to(&Value::Null) {
                    Some(r) if r["error"]["code"] == -32700 => true,
                    Some(r) => {
                        stats.wrong(format!("garbage answered {r}"));
                        true
                    }
                    None => false,
                }
            }
            34..=83 => {
                // A burst of concurrent calls, slow and fast mixed.
                let ids: Vec<Value> = (0..8)
                    .map(|i| {
                        if i % 2 == 0 {
                            conn.send_call("bash", json!({"command": format!("sleep 0.{}; echo burst", rng.below(10))}))
                        } else {
                            conn.send_call("sys_info", json!({}))
                        }
                    })
                    .collect();
                ids.iter().all(|id| conn.result_for(id))
            }
            84..=383 => {
                let secs = rng.below(3);
                let id = conn.send_call(
                    "bash",
                    json!({"command": format!("sleep {secs}.{}; echo slow", rng.below(10))}),
                );
                conn.result_for(&id)
            }
            384..=433 => {
                let id = conn.send_call("bash", json!({"command": "exit 3"}));
                conn.result_for(&id)
            }
            434..=483 => conn.call("tools/list", json!({})).is_some(),
            _ => {
                if rng.chance(500) {
                    conn.call("ping", json!({})).is_some()
                } else {
                    let id = conn.send_call("sys_info", json!({}));
                    conn.result_for(&id)
                }
            }
        };
        if !alive {
            return;
        }
        // Idle a little, still reading so the daemon's pings are answered.
        let pause = Instant::now() + Duration::from_millis(50 + rng.below(400));
        while Instant::now() < pause {
            match conn.ws.read() {
                Ok(Message::Text(t)) => stats.wrong(format!("unsolicited frame {t}")),
                Ok(_) => {}
                Err(tungstenite::Error::Io(e))
                    if matches!(
                        e.kind(),
                        std::io::ErrorKind::WouldBlock
                            | std::io::ErrorKind::TimedOut
                            | std::io::ErrorKind::Interrupted
                    ) => {}
                Err(_) => {
                    stats.add("daemon dropped idle socket");
                    return;
                }
            }
        }
    }
}

struct Conn<'a> {
    ws: WebSocket<TcpStream>,
    stats: &'a Stats,
    next_id: u64,
}

impl Conn<'_> {
    fn send(&mut self, method: &str, params: Value) -> Value {
        self.next_id += 1;
        let id = json!(self.next_id);
        let msg = json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params});
        let _ = self.ws.send(Message::text(msg.to_string()));
        id
    }

    fn send_call(&mut self, name: &str, arguments: Value) -> Value {
        self.stats.add(&format!("call {name}"));
        self.send("tools/call", json!({"name": name, "arguments": arguments}))
    }

    fn call(&mut self, method: &str, params: Value) -> Option<Value> {
        let id = self.send(method, params);
        let r = self.reply_to(&id)?;
        if r.get("result").is_none() {
            self.stats.wrong(format!("{method} failed: {r}"));
        }
        Some(r)
    }

    /// Wait for the tool result with `id`; count it. `false` if the socket went away.
    fn result_for(&mut self, id: &Value) -> bool {
        match self.reply_to(id) {
            Some(r) if r["result"]["isError"] == true => {
                self.stats.add("result isError");
                true
            }
            Some(r) if r.get("result").is_some() => {
                self.stats.add("result ok");
                true
            }
            Some(r) => {
                self.stats.add(&format!("rpc error {}", r["error"]["code"]));
                true
            }
            None => {
                self.stats.add("call abandoned (socket lost)");
                false
            }
        }
    }

    /// The reply with this id (replies to other ids of this socket may come first in a
    /// burst; they are kept for their own wait). `None` when the socket is lost.
    fn reply_to(&mut self, id: &Value) -> Option<Value> {
        let deadline = Instant::now() + REPLY_TIMEOUT;
        loop {
            if let Some(i) =
                PENDING.with(|p| p.borrow().iter().position(|r: &Value| &r["id"] == id))
            {
                return Some(PENDING.with(|p| p.borrow_mut().remove(i)));
            }
            match self.ws.read() {
                Ok(Message::Text(t)) => {
                    let v: Value = match serde_json::from_str(&t) {
                        Ok(v) => v,
                        Err(_) => {
                            self.stats.wrong(format!("reply is not JSON: {t}"));
                            continue;
                        }
                    };
                    if &v["id"] == id {
                        return Some(v);
                    }
                    if v["id"].as_u64().is_none_or(|n| n > self.next_id) {
                        self.stats
                            .wrong(format!("reply to a request never sent here: {v}"));
                    }
                    PENDING.with(|p| p.borrow_mut().push(v));
                }
                Ok(Message::Close(_)) => {
                    self.stats.add("daemon closed socket");
                    return None;
                }
                Ok(_) => {}
                Err(tungstenite::Error::Io(e))
                    if matches!(
                        e.kind(),
                        std::io::ErrorKind::WouldBlock
                            | std::io::ErrorKind::TimedOut
                            | std::io::ErrorKind::Interrupted
                    ) =>
                {
                    if Instant::now() > deadline {
                        self.stats
                            .wrong(format!("no reply to {id} within {REPLY_TIMEOUT:?}"));
                        return None;
                    }
                }
                Err(_) => return None,
            }
        }
    }

    /// Read (and discard) until the socket ends; `false` if it is still open after `limit`.
    fn ends_within(&mut self, limit: Duration) -> bool {
        let deadline = Instant::now() + limit;
        while Instant::now() < deadline {
            match self.ws.read() {
                Ok(_) => {}
                Err(tungstenite::Error::Io(e))
                    if matches!(
                        e.kind(),
                        std::io::ErrorKind::WouldBlock
                            | std::io::ErrorKind::TimedOut
                            | std::io::ErrorKind::Interrupted
                    ) => {}
                Err(_) => return true,
            }
        }
        false
    }
}

thread_local! {
    /// Replies that arrived while waiting for another id on this connection's thread.
    static PENDING: std::cell::RefCell<Vec<Value>> = const { std::cell::RefCell::new(Vec::new()) };
}
