//! A fault stays where it happened: release builds unwind, and every place a panic can start
//! catches it at the edge of what it owns. A tool call ends as a tool error, a grant thread
//! ends its grant (`internal_error`), an admin handler answers its one request `500`, and the
//! audit writer and the halt key's watcher restart — never the process. This module names those places, counts their
//! panics for `/metrics`, and logs them; the catching is done at each place.

use std::any::Any;
use std::sync::atomic::{AtomicU64, Ordering};

/// Where a panic was caught.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Site {
    /// A tool call, on whichever thread ran it: it ended as a tool error.
    Tool,
    /// A grant thread: that grant ended `internal_error`.
    Grant,
    /// An admin request, on a handler or lane thread: it was answered `500`.
    Admin,
    /// The audit writer thread: it was restarted.
    Audit,
    /// The halt key's watcher (`ops::halt_key`): it was restarted.
    HaltKey,
}

impl Site {
    /// Every site, in the order `/metrics` lists them.
    pub const ALL: [Site; 5] = [
        Site::Tool,
        Site::Grant,
        Site::Admin,
        Site::Audit,
        Site::HaltKey,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Site::Tool => "tool",
            Site::Grant => "grant",
            Site::Admin => "admin",
            Site::Audit => "audit",
            Site::HaltKey => "halt_key",
        }
    }
}

/// Panics caught per site since the process started (process-wide, like the panics are).
static CAUGHT: [AtomicU64; 5] = [
    AtomicU64::new(0),
    AtomicU64::new(0),
    AtomicU64::new(0),
    AtomicU64::new(0),
    AtomicU64::new(0),
];

/// The text of a panic payload (`panic!` with a literal or a formatted message).
pub fn message(payload: &(dyn Any + Send)) -> &str {
    payload
        .downcast_ref::<&'static str>()
        .copied()
        .or_else(|| payload.downcast_ref::<String>().map(String::as_str))
        .unwrap_or("a panic without a message")
}

/// Count and log a panic caught at `site` while working on `what` (a grant id, a tool name,
/// a route). The panic hook has already printed where it happened.
pub fn caught(site: Site, what: &str, payload: &(dyn Any + Send)) {
    CAUGHT[site as usize].fetch_add(1, Ordering::Relaxed);
    log::error!(
        "bug: a panic in {} ({}) was contained: {}; {}",
        site.as_str(),
        crate::base::label::cut(what, 128),
        crate::base::label::cut(message(payload), 512),
        match site {
            Site::Tool => "that call ended with a tool error",
            Site::Grant => "that grant ended internal_error",
            Site::Admin => "that request was answered 500",
            Site::Audit => "the audit writer restarted",
            Site::HaltKey => "the halt key watcher restarts",
        }
    );
}

/// Panics caught at `site` so far.
pub fn count(site: Site) -> u64 {
    CAUGHT[site as usize].load(Ordering::Relaxed)
}

/// What a caller is told when its tool call panicked.
pub const TOOL_PANIC_MESSAGE: &str =
    "internal error: the tool failed (a bug in handnode, logged); other calls are not affected";

/// Test-only triggers: a pod or client that sends one of these reaches a `panic!` at the
/// matching site. Compiled only into the library's own unit tests, never into a build.
#[cfg(test)]
pub mod hooks {
    /// `tools/call` arguments key whose value picks where the call panics.
    pub const TOOL_ARG: &str = "__test_panic";
    /// … on the thread that starts it (the grant thread, for `sys_info` from its caches).
    pub const INLINE: &str = "inline";
    /// … on a pool worker.
    pub const WORKER: &str = "worker";
    /// A tool name whose refusal panics the grant thread that reports it.
    pub const GRANT_TOOL: &str = "__test_panic_grant";
    /// A tool name whose audit record panics the audit writer.
    pub const AUDIT_TOOL: &str = "__test_panic_audit";
    /// An admin path whose handler panics (after authentication).
    pub const ADMIN_PATH: &str = "/__test_panic";

    /// Panic if `arguments` ask for a panic at `place`.
    pub fn tool(arguments: &serde_json::Value, place: &str) {
        if arguments.get(TOOL_ARG).and_then(serde_json::Value::as_str) == Some(place) {
            panic!("test hook: a tool call panics ({place})");
        }
    }
}

/// The daemon with two grants, each fault injected through [`hooks`]: a tool call's panic
/// (inline and on a worker) ends the call, a grant thread's ends that grant only, an admin
/// handler's answers 500, the audit writer's restarts it, and the daemon and the other grant
/// keep serving throughout. Here, in the library's unit tests, because the hooks exist only
/// in this build.
#[cfg(test)]
mod tests {
    use std::net::{SocketAddr, TcpListener, TcpStream};
    use std::time::Duration;

    use serde_json::{json, Value};
    use tungstenite::{Message, WebSocket};

    use super::*;
    use crate::base::testutil::TempDir;
    use crate::Secret;

    /// Longest any wait in this test may take.
    const WATCHDOG: Duration = Duration::from_secs(10);
    const TOKEN: &str = "containment-token";

    /// A pod: accepts every WebSocket upgrade and hands the socket over.
    fn pod() -> (
        SocketAddr,
        crossbeam_channel::Receiver<WebSocket<TcpStream>>,
    ) {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let (tx, rx) = crossbeam_channel::unbounded();
        std::thread::spawn(move || {
            for stream in listener.incoming().flatten() {
                stream.set_read_timeout(Some(WATCHDOG)).unwrap();
                if let Ok(ws) = tungstenite::accept(stream) {
                    if tx.send(ws).is_err() {
                        return;
                    }
                }
            }
        });
        (addr, rx)
    }

    fn admin(addr: SocketAddr, method: &str, path: &str, body: Option<&Value>) -> (u16, Value) {
        let target = crate::wire::http::Target::parse(&format!("http://{addr}{path}")).unwrap();
        let auth = format!("Bearer {TOKEN}");
        let body = body.map(Value::to_string);
        let req = crate::wire::http::Request {
            method,
            target: &target,
            headers: &[
                ("Authorization", &auth),
                ("Content-Type", "application/json"),
            ],
            body: body.as_deref().map(str::as_bytes),
        };
        let resp = crate::wire::http::Client::new(WATCHDOG, None)
            .send(&req)
            .expect("the admin API answers");
        let status = resp.status;
        let bytes = resp.read_body(1 << 20).unwrap();
        let v = serde_json::from_slice(&bytes)
            .unwrap_or_else(|_| Value::String(String::from_utf8_lossy(&bytes).into()));
        (status, v)
    }

    fn request(ws: &mut WebSocket<TcpStream>, id: u64, method: &str, params: Value) -> Value {
        let msg = json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params});
        ws.send(Message::text(msg.to_string())).unwrap();
        loop {
            match ws.read().expect("watchdog or error waiting for a reply") {
                Message::Text(t) => {
                    let v: Value = serde_json::from_str(&t).unwrap();
                    assert_eq!(v["id"], id, "{v}");
                    return v;
                }
                Message::Close(f) => panic!("closed while waiting for a reply: {f:?}"),
                _ => continue,
            }
        }
    }

    fn call(ws: &mut WebSocket<TcpStream>, id: u64, name: &str, arguments: Value) -> Value {
        request(
            ws,
            id,
            "tools/call",
            json!({"name": name, "arguments": arguments}),
        )
    }

    fn grant(addr: SocketAddr, id: &str) -> Value {
        let (status, g) = admin(addr, "GET", &format!("/attach/{id}"), None);
        assert_eq!(status, 200, "{g}");
        g
    }

    fn wait_grant(addr: SocketAddr, id: &str, pred: impl Fn(&Value) -> bool) -> Value {
        let deadline = std::time::Instant::now() + WATCHDOG;
        loop {
            let g = grant(addr, id);
            if pred(&g) {
                return g;
            }
            assert!(std::time::Instant::now() < deadline, "watchdog: {g}");
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    #[test]
    fn a_fault_stays_where_it_happened() {
        let tmp = TempDir::new("containment");
        let mut config = crate::Config::for_tests(tmp.path("state"));
        config.token = Some(Secret::new(TOKEN));
        config.display_backend = crate::config::DisplayBackend::None;
        config.timing.audit_fsync_interval = Duration::from_millis(5);
        let daemon = crate::Daemon::start(config).unwrap();
        let addr = daemon.local_addr().unwrap();
        let (pod_addr, conns) = pod();
        let attach = |session: &str| {
            let body = json!({"runtime": format!("ws://{pod_addr}"), "session": session,
                              "profile": "observe", "secret": "s3cret"});
            let (status, g) = admin(addr, "POST", "/attach", Some(&body));
            assert_eq!(status, 202, "{g}");
            let id = g["id"].as_str().unwrap().to_string();
            let mut ws = conns.recv_timeout(WATCHDOG).expect("watchdog: no dial");
            request(
                &mut ws,
                0,
                "initialize",
                json!({"protocolVersion": "2025-06-18"}),
            );
            wait_grant(addr, &id, |g| g["state"] == "attached");
            (id, ws)
        };
        let (a, mut ws_a) = attach("victim");
        let (b, mut ws_b) = attach("bystander");
        let before: Vec<u64> = Site::ALL.iter().map(|s| count(*s)).collect();
        let is_tool_error = |reply: &Value| {
            reply["result"]["isError"] == true
                && reply["result"]["content"][0]["text"] == TOOL_PANIC_MESSAGE
        };

        // A tool call that panics on the grant thread, then one on a worker: each ends as a
        // tool error, and the same socket serves the next request.
        for (n, place) in [(1, hooks::INLINE), (2, hooks::WORKER)] {
            let reply = call(&mut ws_a, n, "sys_info", json!({hooks::TOOL_ARG: place}));
            assert!(is_tool_error(&reply), "{place}: {reply}");
            assert_eq!(
                request(&mut ws_a, 10 + n, "ping", json!({}))["result"],
                json!({})
            );
        }
        assert_eq!(grant(addr, &a)["state"], "attached");

        // The grant thread itself panics: that grant ends internal_error, persisted and
        // audited; its socket drops.
        ws_a.send(Message::text(
            json!({"jsonrpc": "2.0", "id": 20, "method": "tools/call",
                   "params": {"name": hooks::GRANT_TOOL, "arguments": {}}})
            .to_string(),
        ))
        .unwrap();
        let g = wait_grant(addr, &a, |g| g["state"] == "ended");
        assert_eq!(g["ended"], "internal_error", "{g}");
        loop {
            match ws_a.read() {
                Ok(Message::Close(_)) | Err(_) => break,
                Ok(_) => continue,
            }
        }
        let stored = std::fs::read_to_string(tmp.path("state/grants.json")).unwrap();
        assert!(!stored.contains(&a) && stored.contains(&b), "{stored}");
        let audit_has = |pred: &dyn Fn(&Value) -> bool| {
            std::fs::read_to_string(tmp.path("state/audit.jsonl"))
                .unwrap()
                .lines()
                .map(|l| serde_json::from_str::<Value>(l).unwrap())
                .any(|l| pred(&l))
        };
        crate::base::testutil::wait_for(
            || audit_has(&|l| l["grant_id"] == a.as_str() && l["reason"] == "internal_error"),
            "the internal_error end in audit.jsonl",
        );

        // The other grant never noticed.
        let reply = call(&mut ws_b, 30, "sys_info", json!({}));
        assert!(reply["result"]["isError"] != true, "{reply}");
        assert_eq!(grant(addr, &b)["state"], "attached");

        // An admin handler panics: that request is answered 500, the next ones as usual.
        let (status, body) = admin(addr, "GET", hooks::ADMIN_PATH, None);
        assert_eq!((status, body), (500, json!({"error": "internal error"})));
        assert_eq!(admin(addr, "GET", "/healthz", None).0, 200);

        // The audit writer panics on the bystander's next record and restarts: a durable
        // record after it is acknowledged and on disk, and the bystander serves on.
        let reply = call(&mut ws_b, 40, hooks::AUDIT_TOOL, json!({}));
        assert_eq!(reply["error"]["code"], -32602, "{reply}");
        crate::base::testutil::wait_for(
            || count(Site::Audit) > before[Site::Audit as usize],
            "the audit writer's panic",
        );
        let (status, g) = admin(
            addr,
            "POST",
            "/attach",
            Some(
                &json!({"runtime": format!("ws://{pod_addr}"), "session": "after",
                         "profile": "observe", "secret": "s3cret"}),
            ),
        );
        assert_eq!(status, 202, "{g}");
        let after_id = g["id"].as_str().unwrap().to_string();
        assert!(audit_has(
            &|l| l["grant_id"] == after_id.as_str() && l["event"] == "created"
        ));
        assert_eq!(
            request(&mut ws_b, 41, "ping", json!({}))["result"],
            json!({})
        );

        // Every panic was counted where it happened (the halt key's watcher has its own
        // test, in ops::halt_key).
        for site in Site::ALL.into_iter().filter(|s| *s != Site::HaltKey) {
            assert!(
                count(site) > before[site as usize],
                "{} panics not counted",
                site.as_str()
            );
        }
        let (status, metrics) = admin(addr, "GET", "/metrics", None);
        assert_eq!(status, 200);
        assert!(
            metrics
                .as_str()
                .unwrap()
                .contains("handnode_panics_total{site=\"grant\"}"),
            "{metrics}"
        );
        drop(daemon);
    }
}
