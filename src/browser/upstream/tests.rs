//! Unit tests of `browser::upstream`.

use super::*;
use crate::profiles::Profile;
use crate::tools::policy::ToolPolicy;
use crate::tools::ConnCatalog;
use crate::wire::mcp::{Catalog, Resolution, Route, INVALID_PARAMS};
use std::sync::atomic::AtomicUsize;

/// Longest any single blocking step of a test may take before it counts as a hang.
const WATCHDOG: Duration = Duration::from_secs(10);
/// Stub HTTP handler threads: enough for a held call, a held list and a refresh.
const STUB_THREADS: usize = 6;

/// A scripted Streamable HTTP MCP server on 127.0.0.1.
#[derive(Default)]
struct StubState {
    sse: AtomicBool,
    /// `(status, count)`: the next `count` session requests (not notifications)
    /// answer `status` and the session is forgotten, as a restarted upstream would.
    lose_session: Mutex<(u16, usize)>,
    session: Mutex<Option<String>>,
    sessions_issued: AtomicU64,
    /// Every request in arrival order: the JSON-RPC method (`tools/call:NAME` for
    /// calls) or `DELETE`.
    log: Mutex<Vec<String>>,
    /// Transport rules the client broke.
    violations: Mutex<Vec<String>>,
    tools: Mutex<Vec<Value>>,
    /// `tools/list` is split across this many pages (at least 1).
    pages: AtomicUsize,
    /// `tools/list` and the `slow` tool wait for a message here before answering.
    hold_list: AtomicBool,
    gate: Mutex<Option<Receiver<()>>>,
    started: Mutex<Option<Sender<String>>>,
}

impl StubState {
    fn new(tools: &[&str]) -> Arc<Self> {
        let state = StubState::default();
        *lock(&state.tools) = tools
                .iter()
                .map(|n| json!({"name": n, "description": format!("stub {n}"), "inputSchema": {"type": "object"}}))
                .collect();
        state.pages.store(1, Ordering::SeqCst);
        Arc::new(state)
    }

    /// Channels to hold the `slow` tool / a held list, and to hear that one started.
    fn gates(&self) -> (Sender<()>, Receiver<String>) {
        let (gate_tx, gate_rx) = crossbeam_channel::unbounded();
        let (started_tx, started_rx) = crossbeam_channel::unbounded();
        *lock(&self.gate) = Some(gate_rx);
        *lock(&self.started) = Some(started_tx);
        (gate_tx, started_rx)
    }

    fn log(&self) -> Vec<String> {
        lock(&self.log).clone()
    }

    fn count(&self, what: &str) -> usize {
        self.log().iter().filter(|m| *m == what).count()
    }

    fn assert_clean(&self) {
        assert_eq!(*lock(&self.violations), Vec::<String>::new());
    }

    fn hold(&self, what: &str) {
        if let Some(tx) = lock(&self.started).as_ref() {
            let _ = tx.send(what.to_string());
        }
        let gate = lock(&self.gate).clone();
        if let Some(gate) = gate {
            let _ = gate.recv_timeout(WATCHDOG);
        }
    }
}

struct Stub {
    server: Arc<tiny_http::Server>,
    threads: Vec<JoinHandle<()>>,
    port: u16,
}

impl Stub {
    fn start(state: &Arc<StubState>) -> Stub {
        Self::on_port(state, 0)
    }

    /// Bind `port` (0 = any). Rebinding a port the previous stub just released can
    /// fail for a moment while its accept thread winds down, so retry until the
    /// watchdog.
    fn on_port(state: &Arc<StubState>, port: u16) -> Stub {
        let deadline = Instant::now() + WATCHDOG;
        let server = loop {
            match tiny_http::Server::http(("127.0.0.1", port)) {
                Ok(s) => break Arc::new(s),
                Err(e) if Instant::now() > deadline => panic!("stub bind: {e}"),
                Err(_) => std::thread::sleep(Duration::from_millis(20)),
            }
        };
        let port = server.server_addr().to_ip().expect("tcp").port();
        let threads = (0..STUB_THREADS)
            .map(|_| {
                let server = server.clone();
                let state = state.clone();
                std::thread::spawn(move || {
                    while let Ok(rq) = server.recv() {
                        handle(&state, rq);
                    }
                })
            })
            .collect();
        Stub {
            server,
            threads,
            port,
        }
    }

    fn url(&self) -> String {
        format!("http://127.0.0.1:{}/mcp", self.port)
    }
}

impl Drop for Stub {
    fn drop(&mut self) {
        for _ in 0..self.threads.len() {
            self.server.unblock();
        }
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}

fn header(rq: &tiny_http::Request, name: &'static str) -> Option<String> {
    rq.headers()
        .iter()
        .find(|h| h.field.equiv(name))
        .map(|h| h.value.as_str().to_string())
}

fn respond(state: &StubState, rq: tiny_http::Request, status: u16, body: &Value) {
    respond_raw(state, rq, status, body, None)
}

fn respond_raw(
    state: &StubState,
    rq: tiny_http::Request,
    status: u16,
    body: &Value,
    session: Option<&str>,
) {
    let sse = state.sse.load(Ordering::SeqCst);
    let (ctype, text) = if sse {
        // A comment, an unrelated notification, then our response split over several
        // data lines: the client must skip the first two and join the lines.
        let mut text = String::from(": keep-alive\n\nevent: message\ndata: ");
        text.push_str(r#"{"jsonrpc":"2.0","method":"notifications/message","params":{}}"#);
        text.push_str("\n\n");
        for line in serde_json::to_string_pretty(body).unwrap().lines() {
            text.push_str("data: ");
            text.push_str(line);
            text.push('\n');
        }
        text.push('\n');
        ("text/event-stream", text)
    } else {
        ("application/json", body.to_string())
    };
    send(rq, status, ctype, text, session);
}

fn send(rq: tiny_http::Request, status: u16, ctype: &str, body: String, session: Option<&str>) {
    let mut resp = tiny_http::Response::from_string(body)
        .with_status_code(status)
        .with_header(tiny_http::Header::from_bytes("Content-Type", ctype).unwrap());
    if let Some(s) = session {
        resp = resp.with_header(tiny_http::Header::from_bytes("Mcp-Session-Id", s).unwrap());
    }
    let _ = rq.respond(resp);
}

fn handle(state: &StubState, mut rq: tiny_http::Request) {
    let violation = |v: String| lock(&state.violations).push(v);
    let sid = header(&rq, "Mcp-Session-Id");
    if *rq.method() == tiny_http::Method::Delete {
        lock(&state.log).push("DELETE".into());
        if sid.is_none() || sid != *lock(&state.session) {
            violation(format!("DELETE with session {sid:?}"));
        }
        let _ = rq.respond(tiny_http::Response::empty(200));
        return;
    }
    let mut body = String::new();
    let _ = rq.as_reader().read_to_string(&mut body);
    let Ok(msg) = serde_json::from_str::<Value>(&body) else {
        violation(format!("unparsable body {body:?}"));
        return send(rq, 400, "text/plain", "bad json".into(), None);
    };
    let accept = header(&rq, "Accept").unwrap_or_default();
    if !(accept.contains("application/json") && accept.contains("text/event-stream")) {
        violation(format!("Accept {accept:?}"));
    }
    if header(&rq, "Content-Type").as_deref() != Some("application/json") {
        violation("Content-Type".into());
    }
    let method = msg["method"].as_str().unwrap_or("").to_string();
    let id = msg["id"].clone();
    let tool = msg["params"]["name"].as_str().unwrap_or("").to_string();
    lock(&state.log).push(if method == "tools/call" {
        format!("tools/call:{tool}")
    } else {
        method.clone()
    });
    if method == "initialize" {
        if sid.is_some() {
            violation("initialize carried a session id".into());
        }
        let n = state.sessions_issued.fetch_add(1, Ordering::SeqCst) + 1;
        let session = format!("sess-{n}");
        *lock(&state.session) = Some(session.clone());
        let result = json!({
            "protocolVersion": "2025-06-18",
            "capabilities": {"tools": {}},
            "serverInfo": {"name": "stub", "version": "0"},
        });
        let reply = json!({"jsonrpc": "2.0", "id": id, "result": result});
        return respond_raw(state, rq, 200, &reply, Some(&session));
    }
    if method != "notifications/initialized" {
        let mut lose = lock(&state.lose_session);
        if lose.1 > 0 {
            lose.1 -= 1;
            *lock(&state.session) = None;
            let status = lose.0;
            drop(lose);
            return send(rq, status, "text/plain", "session gone".into(), None);
        }
    }
    if sid.is_none() || sid != *lock(&state.session) {
        violation(format!("{method} with session {sid:?}"));
        return send(rq, 404, "text/plain", "unknown session".into(), None);
    }
    if header(&rq, "MCP-Protocol-Version").as_deref() != Some("2025-06-18") {
        violation(format!("{method} without MCP-Protocol-Version"));
    }
    let result = match method.as_str() {
        "notifications/initialized" => {
            let _ = rq.respond(tiny_http::Response::empty(202));
            return;
        }
        "tools/list" => {
            if state.hold_list.load(Ordering::SeqCst) {
                state.hold("tools/list");
            }
            let tools = lock(&state.tools).clone();
            let pages = state.pages.load(Ordering::SeqCst).max(1);
            let page: usize = msg["params"]["cursor"]
                .as_str()
                .and_then(|c| c.strip_prefix("page-"))
                .and_then(|n| n.parse().ok())
                .unwrap_or(0);
            let per = tools.len().div_ceil(pages).max(1);
            let chunk: Vec<Value> = tools.iter().skip(page * per).take(per).cloned().collect();
            let mut result = json!({"tools": chunk});
            if page + 1 < pages {
                result["nextCursor"] = json!(format!("page-{}", page + 1));
            }
            result
        }
        "tools/call" => {
            let args = msg["params"]["arguments"].clone();
            match tool.as_str() {
                "echo" => echo_result(&args),
                "slow" => {
                    state.hold("slow");
                    json!({"content": [{"type": "text", "text": "slow done"}]})
                }
                "fail" => {
                    let reply = json!({"jsonrpc": "2.0", "id": id,
                            "error": {"code": INVALID_PARAMS, "message": "bad arguments for fail"}});
                    return respond(state, rq, 200, &reply);
                }
                "pad" => {
                    // A JSON reply of exactly `len` bytes.
                    let len = args["len"].as_u64().unwrap() as usize;
                    let make = |pad: usize| {
                        json!({"jsonrpc": "2.0", "id": id, "result": {"content": [
                                {"type": "text", "text": "x".repeat(pad)}]}})
                        .to_string()
                    };
                    let base = make(0).len();
                    let text = make(len - base);
                    assert_eq!(text.len(), len);
                    return send(rq, 200, "application/json", text, None);
                }
                "garbage" => {
                    return send(rq, 200, "application/json", "this is not json".into(), None)
                }
                "plain" => return send(rq, 200, "text/plain", "hello".into(), None),
                "silent_stream" => {
                    let text = "event: message\ndata: {\"jsonrpc\":\"2.0\",\"method\":\"notifications/progress\"}\n\n";
                    return send(rq, 200, "text/event-stream", text.into(), None);
                }
                "http500" => return send(rq, 500, "text/plain", "oops".into(), None),
                other => {
                    let reply = json!({"jsonrpc": "2.0", "id": id,
                            "error": {"code": INVALID_PARAMS, "message": format!("no tool {other}")}});
                    return respond(state, rq, 200, &reply);
                }
            }
        }
        other => {
            violation(format!("unexpected method {other}"));
            json!({})
        }
    };
    respond(
        state,
        rq,
        200,
        &json!({"jsonrpc": "2.0", "id": id, "result": result}),
    );
}

fn echo_result(args: &Value) -> Value {
    json!({
        "content": [
            {"type": "text", "text": args.to_string()},
            {"type": "image", "data": "iVBORw0KGgo=", "mimeType": "image/png"},
        ],
        "structuredContent": {"args": args},
        "_meta": {"stub": true},
    })
}

fn options() -> UpstreamOptions {
    UpstreamOptions {
        timeout: Duration::from_secs(5),
        cache_ttl: Duration::from_secs(3600),
        call_threads: 2,
        call_queue: 8,
        max_reply_bytes: 1 << 20,
        max_list_pages: 4,
        tls: None,
    }
}

fn ups(stubs: &[&Stub], options: UpstreamOptions) -> Upstreams {
    let list = stubs
        .iter()
        .enumerate()
        .map(|(i, s)| (format!("up{i}"), s.url()))
        .collect();
    Upstreams::with_options(list, options).unwrap()
}

/// Start a call; the receiver gets its output.
fn start_call(up: &Upstreams, index: usize, name: &str, args: Value) -> Receiver<ToolOutput> {
    start_call_with(up, index, name, args, CallCtl::new())
}

fn start_call_with(
    up: &Upstreams,
    index: usize,
    name: &str,
    args: Value,
    ctl: Arc<CallCtl>,
) -> Receiver<ToolOutput> {
    let (tx, rx) = crossbeam_channel::bounded(1);
    up.call(
        index,
        name,
        args,
        ctl,
        Completion::new(move |out| {
            let _ = tx.send(out);
        }),
    );
    rx
}

fn call(up: &Upstreams, index: usize, name: &str, args: Value) -> ToolOutput {
    start_call(up, index, name, args)
        .recv_timeout(WATCHDOG)
        .expect("call completed")
}

fn names(up: &Upstreams) -> Vec<(usize, String)> {
    up.tools()
        .into_iter()
        .map(|(i, t)| (i, t["name"].as_str().unwrap().to_string()))
        .collect()
}

fn error_text(out: &ToolOutput) -> String {
    match out {
        ToolOutput::Result(v) => {
            assert_eq!(v["isError"], true, "{v}");
            v["content"][0]["text"].as_str().unwrap().to_string()
        }
        other => panic!("expected a tool error, got {other:?}"),
    }
}

#[test]
fn lists_tools_of_json_and_sse_upstreams_tagged_by_index() {
    let a = StubState::new(&["alpha", "beta"]);
    let b = StubState::new(&["gamma"]);
    b.sse.store(true, Ordering::SeqCst);
    let (sa, sb) = (Stub::start(&a), Stub::start(&b));
    let up = ups(&[&sa, &sb], options());
    assert_eq!(up.names(), vec!["up0", "up1"]);
    up.refresh_now();
    assert_eq!(
        names(&up),
        vec![
            (0, "alpha".to_string()),
            (0, "beta".to_string()),
            (1, "gamma".to_string())
        ]
    );
    for state in [&a, &b] {
        assert_eq!(
            state.log(),
            vec!["initialize", "notifications/initialized", "tools/list"]
        );
        state.assert_clean();
    }
    let status = up.status();
    assert_eq!(status[0].tools, 2);
    assert!(status[1].checked && status[1].error.is_none());
}

#[test]
fn the_session_is_initialised_once_and_sent_on_every_request() {
    let s = StubState::new(&["echo"]);
    let stub = Stub::start(&s);
    let up = ups(&[&stub], options());
    up.refresh_now();
    up.refresh_now();
    assert!(matches!(
        call(&up, 0, "echo", json!({})),
        ToolOutput::Result(_)
    ));
    assert_eq!(s.sessions_issued.load(Ordering::SeqCst), 1);
    assert_eq!(
        s.log(),
        vec![
            "initialize",
            "notifications/initialized",
            "tools/list",
            "tools/list",
            "tools/call:echo"
        ]
    );
    s.assert_clean();
}

#[test]
fn a_lost_session_is_reinitialised_once_and_the_request_retried() {
    for status in [404, 400] {
        for sse in [false, true] {
            let s = StubState::new(&["echo"]);
            s.sse.store(sse, Ordering::SeqCst);
            let stub = Stub::start(&s);
            let up = ups(&[&stub], options());
            up.refresh_now();
            *lock(&s.lose_session) = (status, 1);
            let out = call(&up, 0, "echo", json!({"n": 1}));
            assert_eq!(out, ToolOutput::Result(echo_result(&json!({"n": 1}))));
            assert_eq!(s.sessions_issued.load(Ordering::SeqCst), 2);
            assert_eq!(
                s.log()[3..],
                [
                    "tools/call:echo",
                    "initialize",
                    "notifications/initialized",
                    "tools/call:echo"
                ]
            );
            s.assert_clean();
        }
    }
}

#[test]
fn a_session_lost_again_after_reinitialising_is_an_error_not_a_loop() {
    let s = StubState::new(&["echo"]);
    let stub = Stub::start(&s);
    let up = ups(&[&stub], options());
    up.refresh_now();
    *lock(&s.lose_session) = (404, 100);
    let text = error_text(&call(&up, 0, "echo", json!({})));
    assert!(
        text.contains("HTTP 404") && text.contains("fresh session"),
        "{text}"
    );
    assert_eq!(s.count("initialize"), 2);
    assert_eq!(s.count("tools/call:echo"), 2);
}

#[test]
fn results_pass_through_untouched_in_json_and_sse() {
    for sse in [false, true] {
        let s = StubState::new(&["echo"]);
        s.sse.store(sse, Ordering::SeqCst);
        let stub = Stub::start(&s);
        let up = ups(&[&stub], options());
        let args = json!({"text": "héllo\n\"quoted\"", "n": [1, 2.5, null]});
        let out = call(&up, 0, "echo", args.clone());
        assert_eq!(out, ToolOutput::Result(echo_result(&args)), "sse={sse}");
        s.assert_clean();
    }
}

#[test]
fn an_upstream_jsonrpc_error_is_passed_on_as_one() {
    let s = StubState::new(&[]);
    let stub = Stub::start(&s);
    let up = ups(&[&stub], options());
    assert_eq!(
        call(&up, 0, "fail", json!({})),
        ToolOutput::RpcError {
            code: INVALID_PARAMS,
            message: "bad arguments for fail".into()
        }
    );
}

#[test]
fn invalid_replies_are_server_errors_that_say_why() {
    let s = StubState::new(&[]);
    let stub = Stub::start(&s);
    let up = ups(&[&stub], options());
    for (tool, expect) in [
        ("garbage", "does not parse"),
        ("plain", "Content-Type \"text/plain\""),
        ("silent_stream", "ended without a response"),
    ] {
        match call(&up, 0, tool, json!({})) {
            ToolOutput::RpcError { code, message } => {
                assert_eq!(code, SERVER_ERROR);
                assert!(message.contains(expect), "{tool}: {message}");
                assert!(message.contains("upstream 'up0'"), "{message}");
            }
            other => panic!("{tool}: {other:?}"),
        }
    }
    let text = error_text(&call(&up, 0, "http500", json!({})));
    assert!(text.contains("HTTP 500"), "{text}");
}

#[test]
fn a_down_upstream_lists_nothing_leaves_local_tools_and_comes_back() {
    let s = StubState::new(&["browser_navigate", "browser_snapshot"]);
    let stub = Stub::start(&s);
    let port = stub.port;
    let mut opts = options();
    opts.timeout = Duration::from_secs(2);
    let up = ups(&[&stub], opts);
    up.refresh_now();
    assert_eq!(up.tools().len(), 2);
    let desktop = ToolPolicy::fixed(Profile::Desktop).unwrap();
    let catalog = ConnCatalog {
        grant: None,
        upstream: Some(&up),
        policy: &desktop,
        browsers: None,
    };
    let local = crate::tools::names(Profile::Desktop).len();
    assert_eq!(catalog.list().len(), local + 2);
    // A connection's cached tools/list is kept while the key stays: a refresh that
    // brings the same list keeps it, one that changes the list moves it.
    let up_key = catalog.list_key();
    assert!(up_key.is_some());
    up.refresh_now();
    assert_eq!(catalog.list_key(), up_key, "the same list again");

    drop(stub);
    up.refresh_now();
    assert!(up.tools().is_empty());
    let down_key = catalog.list_key();
    assert_ne!(down_key, up_key, "the upstream's tools went away");
    let listed: Vec<Value> = catalog.list();
    let listed: Vec<&str> = listed.iter().map(|t| t["name"].as_str().unwrap()).collect();
    assert_eq!(listed, crate::tools::names(Profile::Desktop));
    assert_eq!(catalog.resolve("browser_navigate"), Resolution::Unknown);
    assert!(up.status()[0].error.is_some());
    let text = error_text(&call(&up, 0, "browser_navigate", json!({})));
    assert!(
        text.contains("'up0'") && text.contains("unreachable"),
        "{text}"
    );

    // Back up on the same port, restarted so it no longer knows our session. The next lookup finds the cache empty, refreshes in
    // the background, and the tools return.
    *lock(&s.session) = None;
    let _stub = Stub::on_port(&s, port);
    let before = up.refresh_generation(0);
    assert!(up.tools().is_empty());
    assert!(up.wait_refreshed(0, before, WATCHDOG));
    assert_eq!(up.tools().len(), 2);
    assert!(
        ![up_key, down_key].contains(&catalog.list_key()),
        "they came back"
    );
    assert_eq!(
        catalog.resolve("browser_navigate"),
        Resolution::Visible(Route::Upstream(0))
    );
    // The restarted stub did not know the old session: one 404, then a fresh one.
    assert!(s.sessions_issued.load(Ordering::SeqCst) >= 2);
}

#[test]
fn a_slow_call_blocks_neither_tools_nor_the_refresh() {
    let s = StubState::new(&["slow", "echo"]);
    let (gate, started) = s.gates();
    let stub = Stub::start(&s);
    let mut opts = options();
    opts.cache_ttl = Duration::ZERO;
    let up = Arc::new(ups(&[&stub], opts));
    up.refresh_now();
    let slow = start_call(&up, 0, "slow", json!({}));
    assert_eq!(started.recv_timeout(WATCHDOG).unwrap(), "slow");

    // tools() on another thread answers while the slow call is held...
    let before = up.refresh_generation(0);
    let (tx, rx) = crossbeam_channel::bounded(1);
    let up2 = up.clone();
    std::thread::spawn(move || {
        let _ = tx.send(up2.tools().len());
    });
    assert_eq!(rx.recv_timeout(WATCHDOG).unwrap(), 2);
    // ...and the refresh it triggered (TTL 0) completes on the upstream's own thread.
    assert!(up.wait_refreshed(0, before, WATCHDOG));
    assert!(slow.try_recv().is_err(), "the slow call is still held");
    assert!(matches!(
        call(&up, 0, "echo", json!({})),
        ToolOutput::Result(_)
    ));

    gate.send(()).unwrap();
    let out = slow.recv_timeout(WATCHDOG).unwrap();
    assert_eq!(out, ToolOutput::text("slow done"));
}

#[test]
fn the_cache_is_reused_within_its_ttl_and_one_refresh_runs_at_a_time() {
    let s = StubState::new(&["echo"]);
    let stub = Stub::start(&s);
    let up = ups(&[&stub], options());
    up.refresh_now();
    for _ in 0..20 {
        assert_eq!(up.tools().len(), 1);
    }
    assert_eq!(up.lanes[0].shared.triggered.load(Ordering::SeqCst), 0);
    assert_eq!(s.count("tools/list"), 1);

    let s = StubState::new(&["echo"]);
    let (gate, started) = s.gates();
    s.hold_list.store(true, Ordering::SeqCst);
    let stub = Stub::start(&s);
    let mut opts = options();
    opts.cache_ttl = Duration::ZERO;
    let up = ups(&[&stub], opts);
    assert!(up.tools().is_empty());
    assert_eq!(started.recv_timeout(WATCHDOG).unwrap(), "tools/list");
    for _ in 0..5 {
        assert!(up.tools().is_empty());
    }
    let triggered = &up.lanes[0].shared.triggered;
    assert_eq!(triggered.load(Ordering::SeqCst), 1, "one refresh in flight");
    gate.send(()).unwrap();
    assert!(up.wait_refreshed(0, 0, WATCHDOG));
    s.hold_list.store(false, Ordering::SeqCst);
    let before = up.refresh_generation(0);
    assert_eq!(up.tools().len(), 1); // stale at TTL 0: triggers again
    assert!(up.wait_refreshed(0, before, WATCHDOG));
    assert_eq!(triggered.load(Ordering::SeqCst), 2);
}

#[test]
fn a_request_past_the_timeout_reports_the_upstream_unreachable() {
    let s = StubState::new(&["slow"]);
    let (gate, started) = s.gates();
    let stub = Stub::start(&s);
    let mut opts = options();
    opts.timeout = Duration::from_millis(300);
    let up = ups(&[&stub], opts);
    let rx = start_call(&up, 0, "slow", json!({}));
    assert_eq!(started.recv_timeout(WATCHDOG).unwrap(), "slow");
    let text = error_text(&rx.recv_timeout(WATCHDOG).unwrap());
    assert!(
        text.contains("unreachable") && text.contains("no reply within"),
        "{text}"
    );
    gate.send(()).unwrap();
}

#[test]
fn reply_size_is_capped_at_the_bound() {
    let s = StubState::new(&[]);
    let stub = Stub::start(&s);
    let mut opts = options();
    opts.max_reply_bytes = 4096;
    let up = ups(&[&stub], opts);
    assert!(matches!(
        call(&up, 0, "pad", json!({"len": 4096})),
        ToolOutput::Result(_)
    ));
    match call(&up, 0, "pad", json!({"len": 4097})) {
        ToolOutput::RpcError { code, message } => {
            assert_eq!(code, SERVER_ERROR);
            assert!(message.contains("larger than 4096 bytes"), "{message}");
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn tool_list_pages_are_followed_up_to_the_bound() {
    let tools = ["a", "b", "c", "d", "e", "f"];
    let s = StubState::new(&tools);
    let stub = Stub::start(&s);
    let mut opts = options();
    opts.max_list_pages = 3;
    let up = ups(&[&stub], opts);
    s.pages.store(3, Ordering::SeqCst);
    up.refresh_now();
    let got: Vec<String> = names(&up).into_iter().map(|(_, n)| n).collect();
    assert_eq!(got, tools);
    s.pages.store(4, Ordering::SeqCst);
    up.refresh_now();
    assert!(up.tools().is_empty());
    let err = up.status()[0].error.clone().unwrap();
    assert!(err.contains("past 3 pages"), "{err}");
}

#[test]
fn calls_past_the_queue_bound_are_refused_as_busy() {
    let s = StubState::new(&["slow", "echo"]);
    let (gate, started) = s.gates();
    let stub = Stub::start(&s);
    let mut opts = options();
    opts.call_threads = 1;
    opts.call_queue = 1;
    let up = ups(&[&stub], opts);
    let slow = start_call(&up, 0, "slow", json!({}));
    assert_eq!(started.recv_timeout(WATCHDOG).unwrap(), "slow");
    let queued = start_call(&up, 0, "echo", json!({}));
    match call(&up, 0, "echo", json!({})) {
        ToolOutput::RpcError { code, message } => {
            assert_eq!(code, SERVER_ERROR);
            assert!(
                message.contains("busy") && message.contains("'up0'"),
                "{message}"
            );
        }
        other => panic!("{other:?}"),
    }
    gate.send(()).unwrap();
    assert_eq!(
        slow.recv_timeout(WATCHDOG).unwrap(),
        ToolOutput::text("slow done")
    );
    assert!(matches!(
        queued.recv_timeout(WATCHDOG).unwrap(),
        ToolOutput::Result(_)
    ));
}

#[test]
fn a_cancelled_call_never_reaches_the_upstream() {
    let s = StubState::new(&["echo"]);
    let stub = Stub::start(&s);
    let up = ups(&[&stub], options());
    let ctl = CallCtl::new();
    ctl.cancel();
    let out = start_call_with(&up, 0, "echo", json!({}), ctl)
        .recv_timeout(WATCHDOG)
        .unwrap();
    assert!(error_text(&out).contains("cancelled"));
    assert_eq!(s.count("tools/call:echo"), 0);
}

#[test]
fn a_call_to_an_unknown_upstream_index_is_an_internal_error() {
    let up = Upstreams::with_options(Vec::new(), options()).unwrap();
    assert!(up.tools().is_empty());
    up.refresh_now();
    match call(&up, 3, "x", json!({})) {
        ToolOutput::RpcError { code, message } => {
            assert_eq!(code, SERVER_ERROR);
            assert!(message.contains("#3"), "{message}");
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn drop_stops_the_threads_and_ends_the_session() {
    let s = StubState::new(&["echo"]);
    let stub = Stub::start(&s);
    let up = ups(&[&stub], options());
    up.refresh_now();
    let (tx, rx) = crossbeam_channel::bounded(1);
    std::thread::spawn(move || {
        drop(up);
        let _ = tx.send(());
    });
    rx.recv_timeout(WATCHDOG).expect("drop returned");
    assert_eq!(s.log().last().map(String::as_str), Some("DELETE"));
    s.assert_clean();
}

#[test]
fn a_tool_without_a_class_is_noted_once_and_the_notes_are_bounded() {
    let s = StubState::new(&["browser_navigate", "browser_brand_new", "bash"]);
    let stub = Stub::start(&s);
    let up = ups(&[&stub], options());
    up.refresh_now();
    up.refresh_now();
    assert_eq!(up.unclassified(0), ["browser_brand_new"]);
    assert!(up.unclassified(7).is_empty());

    let mut seen = Vec::new();
    let mut overflowed = false;
    let many: Vec<Value> = (0..=MAX_UNCLASSIFIED_LOGGED)
        .map(|i| json!({"name": format!("browser_new_{i}")}))
        .collect();
    for _ in 0..2 {
        note_unclassified("u", (&mut seen, &mut overflowed), &many);
    }
    assert_eq!(seen.len(), MAX_UNCLASSIFIED_LOGGED);
    assert!(overflowed);
    assert_eq!(seen[0], "browser_new_0");
    // A name past the bound is remembered cut to it, once.
    let (mut seen, mut overflowed) = (Vec::new(), false);
    let huge = [json!({"name": "x".repeat(1 << 20)})];
    for _ in 0..2 {
        note_unclassified("u", (&mut seen, &mut overflowed), &huge);
    }
    assert_eq!(seen.len(), 1);
    assert_eq!(
        seen[0],
        format!("{}…", "x".repeat(crate::profiles::MAX_TOOL_NAME_BYTES))
    );
}

#[test]
fn the_catalogue_routes_filters_and_lets_local_names_win() {
    let s = StubState::new(&["browser_navigate", "browser_evaluate", "bash"]);
    let stub = Stub::start(&s);
    let up = ups(&[&stub], options());
    up.refresh_now();
    let policies: Vec<ToolPolicy> = [Profile::Owner, Profile::Desktop, Profile::Observe]
        .into_iter()
        .map(|p| ToolPolicy::fixed(p).unwrap())
        .collect();
    let catalog = |i: usize| ConnCatalog {
        grant: None,
        upstream: Some(&up),
        policy: &policies[i],
        browsers: None,
    };
    let owner: Vec<Value> = catalog(0).list();
    let owner: Vec<&str> = owner.iter().map(|t| t["name"].as_str().unwrap()).collect();
    assert_eq!(owner.iter().filter(|n| **n == "bash").count(), 1);
    assert_eq!(
        &owner[owner.len() - 2..],
        ["browser_navigate", "browser_evaluate"]
    );
    let d = catalog(1);
    assert_eq!(
        d.resolve("browser_navigate"),
        Resolution::Visible(Route::Upstream(0))
    );
    assert_eq!(d.resolve("browser_evaluate"), Resolution::Hidden);
    assert_eq!(d.resolve("bash"), Resolution::Visible(Route::Local));
    assert_eq!(catalog(2).resolve("browser_navigate"), Resolution::Hidden);
    assert!(!catalog(2)
        .list()
        .iter()
        .any(|t| t["name"].as_str().unwrap().starts_with("browser_")));
}

#[test]
fn bad_upstream_settings_are_refused_with_what_to_fix() {
    let cases = [
        (vec![("", "http://127.0.0.1:1/mcp")], "empty name"),
        (
            vec![
                ("a", "http://127.0.0.1:1/mcp"),
                ("a", "http://127.0.0.1:2/mcp"),
            ],
            "given twice",
        ),
        (vec![("a", "ftp://127.0.0.1/mcp")], "http:// or https://"),
        (vec![("a", "/mcp")], "http:// or https://"),
        (vec![("a", "not a url")], "is not a URL"),
    ];
    for (list, expect) in cases {
        let list: Vec<(String, String)> = list
            .into_iter()
            .map(|(n, u)| (n.to_string(), u.to_string()))
            .collect();
        match Upstreams::with_options(list.clone(), options()) {
            Err(Error::Config(msg)) => assert!(msg.contains(expect), "{list:?}: {msg}"),
            other => panic!("{list:?}: {other:?}"),
        }
    }
    let ok = Upstreams::new(
        vec![("browser".into(), "http://127.0.0.1:8931/mcp".into())],
        &Timing::default(),
        crate::wire::tls::client_config(None).unwrap(),
    )
    .unwrap();
    assert_eq!(
        format!("{ok:?}"),
        r#"[("browser", "http://127.0.0.1:8931/mcp")]"#
    );
}

#[test]
fn sse_parsing_skips_what_is_not_our_response() {
    let stream = "retry: 100\r\n: comment\r\n\r\nevent: ping\ndata: {\"jsonrpc\":\"2.0\",\"id\":7,\"result\":1}\n\n\
                      data: {\"jsonrpc\":\"2.0\",\"id\":6,\"result\":\"other\"}\n\n\
                      data: {\"jsonrpc\":\"2.0\",\"method\":\"roots/list\",\"id\":7}\n\n\
                      data: not json\n\n\
                      event: message\ndata: {\"jsonrpc\":\"2.0\",\ndata:\"id\":7,\"result\":{\"ok\":true}}\n\n";
    let got = read_sse_reply(stream.as_bytes(), 7).ok().unwrap();
    assert_eq!(got, json!({"ok": true}));
    // A final event without its blank line still counts at end of stream.
    let got = read_sse_reply("data: {\"id\":1,\"result\":2}".as_bytes(), 1).ok();
    assert_eq!(got, Some(json!(2)));
    match read_sse_reply("data: {\"id\":2,\"result\":2}\n\n".as_bytes(), 1) {
        Err(ReplyError::Bad(Failure::Invalid(msg))) => assert!(msg.contains("ended")),
        _ => panic!("expected an invalid-reply failure"),
    }
    match read_sse_reply(
        "data: {\"id\":1,\"error\":{\"code\":-1,\"message\":\"m\"}}\n\n".as_bytes(),
        1,
    ) {
        Err(ReplyError::Bad(f)) => assert_eq!(
            f,
            Failure::Rpc {
                code: -1,
                message: "m".into()
            }
        ),
        _ => panic!("expected the JSON-RPC error"),
    }
}

#[test]
fn session_ids_are_bounded_visible_ascii() {
    let max = "a".repeat(MAX_SESSION_ID_BYTES);
    assert_eq!(valid_session_id(max.as_bytes()).unwrap(), max);
    let over = "a".repeat(MAX_SESSION_ID_BYTES + 1);
    for bad in [over.as_bytes(), b"", b"has space", b"tab\t", "é".as_bytes()] {
        assert!(valid_session_id(bad).is_err(), "{bad:?}");
    }
}
