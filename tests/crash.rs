//! Crash safety: `SIGKILL` the real binary in the middle of a burst of `POST /attach`
//! from several clients, restart it on the same state dir, and every grant whose `202`
//! a client received is there and dials the pod again (durable before acknowledged).
//! Also: grants that `POST /attach` accepts in unusual but valid forms survive a restart,
//! and a grants file with absurd values cannot stop the daemon from starting.

mod common;
#[path = "common/realbin.rs"]
mod realbin;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::*;
use realbin::{RealDaemon, TOKEN};
use serde_json::{json, Value};

/// `POST /attach` that reports failure instead of panicking (the daemon may die mid-way).
fn try_attach(addr: SocketAddr, body: &Value) -> Option<(u16, Value)> {
    let mut s = TcpStream::connect_timeout(&addr, WATCHDOG).ok()?;
    s.set_read_timeout(Some(WATCHDOG)).ok()?;
    let body = body.to_string();
    let req = format!(
        "POST /attach HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\nAuthorization: Bearer {TOKEN}\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    );
    s.write_all(req.as_bytes()).ok()?;
    let mut raw = Vec::new();
    s.read_to_end(&mut raw).ok()?;
    let pos = raw.windows(4).position(|w| w == b"\r\n\r\n")?;
    let head = std::str::from_utf8(&raw[..pos]).ok()?;
    let status = head.split(' ').nth(1)?.parse().ok()?;
    let v = serde_json::from_slice(&raw[pos + 4..]).unwrap_or(Value::Null);
    Some((status, v))
}

/// Serve the pod's side of every connection: `initialize`, then keep reading (answering
/// pings) until the socket goes away. Never panics: old daemons die under it.
fn auto_pod(pod: &StubPod) {
    let conns = pod.conns.clone();
    std::thread::spawn(move || {
        for mut conn in conns.iter() {
            std::thread::spawn(move || {
                conn.set_read_timeout(Duration::from_secs(60));
                let init = json!({"jsonrpc": "2.0", "id": "init", "method": "initialize", "params": {"protocolVersion": "2025-06-18"}});
                if conn
                    .ws
                    .send(tungstenite::Message::text(init.to_string()))
                    .is_err()
                {
                    return;
                }
                loop {
                    match conn.ws.read() {
                        Ok(_) => continue,
                        Err(e) if is_interrupted(&e) => continue,
                        Err(_) => return,
                    }
                }
            });
        }
    });
}

#[test]
fn sigkill_mid_burst_loses_no_acknowledged_grant() {
    const CLIENTS: usize = 4;
    let pod = StubPod::start();
    auto_pod(&pod);
    let dir = temp_dir("crash");
    let state = dir.join("state");
    let acked: Arc<Mutex<Vec<(String, String)>>> = Arc::default();
    for (round, kill_after) in [(0usize, 8usize), (1, 13), (2, 21)] {
        let mut d = RealDaemon::start(&state, &[]);
        let before = acked.lock().unwrap().len();
        // Every grant acknowledged so far resumed and dials the pod again.
        if round > 0 {
            check_resumed(&d, &acked.lock().unwrap());
        }
        let stop = Arc::new(AtomicBool::new(false));
        let cut = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let clients: Vec<_> = (0..CLIENTS)
            .map(|t| {
                let acked = Arc::clone(&acked);
                let stop = Arc::clone(&stop);
                let cut = Arc::clone(&cut);
                let addr = d.addr;
                let runtime = pod.runtime();
                std::thread::spawn(move || {
                    for n in 0.. {
                        if stop.load(Ordering::SeqCst) {
                            return;
                        }
                        let session = format!("r{round}-c{t}-{n}");
                        let body = json!({"runtime": runtime, "session": session, "profile": "observe", "secret": format!("secret-{session}")});
                        match try_attach(addr, &body) {
                            Some((202, g)) => acked
                                .lock()
                                .unwrap()
                                .push((g["id"].as_str().unwrap().to_string(), session)),
                            Some((status, v)) => panic!("POST /attach answered {status}: {v}"),
                            None => {
                                // The daemon died with this request in flight.
                                cut.fetch_add(1, Ordering::SeqCst);
                                return;
                            }
                        }
                    }
                })
            })
            .collect();
        let deadline = Instant::now() + WATCHDOG;
        while acked.lock().unwrap().len() < before + kill_after {
            assert!(Instant::now() < deadline, "watchdog: the burst stalled");
            std::thread::sleep(Duration::from_millis(1));
        }
        d.kill();
        stop.store(true, Ordering::SeqCst);
        for c in clients {
            c.join().expect("a client thread failed");
        }
        let n = acked.lock().unwrap().len();
        eprintln!(
            "round {round}: killed after {} acknowledged grants in this round ({n} in all), {} requests cut off",
            n - before,
            cut.load(Ordering::SeqCst)
        );
        // The file the dead daemon left is whole, and holds every acknowledged grant.
        let bytes = std::fs::read(state.join("grants.json")).expect("grants.json exists");
        let file: Value = serde_json::from_slice(&bytes).expect("grants.json parses");
        let report =
            handnode::grants::persist::parse(&bytes, handnode::base::timefmt::now_unix()).unwrap();
        assert!(report.dropped.is_empty(), "{:?}", report.dropped);
        for (id, session) in acked.lock().unwrap().iter() {
            assert!(
                report
                    .grants
                    .iter()
                    .any(|g| &g.id == id && &g.session == session),
                "acknowledged grant {id} ({session}) missing from grants.json: {file}"
            );
        }
    }
    let mut d = RealDaemon::start(&state, &[]);
    check_resumed(&d, &acked.lock().unwrap());
    assert_eq!(d.terminate(), Some(0), "SIGTERM exits 0");
    drop(pod);
    let _ = std::fs::remove_dir_all(&dir);
}

/// Every acknowledged grant is listed under its id and attaches (the pod's auto-responder
/// sends `initialize`, so `attached` proves the resumed grant dialed).
fn check_resumed(d: &RealDaemon, acked: &[(String, String)]) {
    for (id, session) in acked {
        let g = d.wait_grant(id, "attached after the restart", |g| {
            g["state"] == "attached"
        });
        assert_eq!(g["session"], session.as_str());
    }
    let (status, ready) = d.call("GET", "/readyz", None);
    assert_eq!(status, 200);
    assert!(
        ready["grants"].as_u64().unwrap() >= acked.len() as u64,
        "{ready}"
    );
}

/// Forms `POST /attach` accepts must survive a restart like any other grant: an upper-case
/// scheme (which also never dialled: the WebSocket client wants it lowercase), a secret of
/// odd printable characters. (Found by the `attach_request` fuzz target's invariants.)
#[test]
fn unusual_but_valid_grants_resume_after_a_restart() {
    let pod = StubPod::start();
    let dir = temp_dir("unusual");
    let config = test_config(&dir);
    let mut d = TestDaemon::start(config.clone(), dir.clone());
    let upper = format!("WS://{}/", pod.addr);
    let g1 = d.attach(json!({"runtime": upper, "session": "upper", "secret": "plain"}));
    assert_eq!(pod.next_upgrade().status, 101);
    let g2 = d.attach(
        json!({"runtime": pod.runtime(), "session": "spaced", "secret": " all printable ~!\"{} "}),
    );
    assert_eq!(pod.next_upgrade().status, 101);
    d.stop();
    let d2 = TestDaemon::start(config, dir);
    for g in [&g1, &g2] {
        let id = g["id"].as_str().unwrap();
        let (status, v) = d2.call("GET", &format!("/attach/{id}"), None);
        assert_eq!(status, 200, "grant {} was not resumed: {v}", g["session"]);
    }
    for _ in 0..2 {
        assert_eq!(pod.next_upgrade().status, 101);
    }
    std::mem::forget(d); // its dir is shared with d2, which cleans up
}

/// A secret the dial could never send (a control character or non-ASCII in an HTTP
/// header) is refused at `POST /attach`, not acknowledged and then redialled forever.
#[test]
fn a_secret_that_is_not_printable_ascii_is_refused_up_front() {
    let d = TestDaemon::new("ctlsecret");
    for secret in [
        "line\nbreak",
        "tab\there",
        "nul\u{0}",
        "del\u{7f}",
        "c1\u{85}",
        "sécret",
        "emoji-🔑",
    ] {
        let (status, v) = d.call(
            "POST",
            "/attach",
            Some(&json!({"runtime": "ws://127.0.0.1:9", "session": "s", "secret": secret})),
        );
        assert_eq!(status, 400, "{secret:?}: {v}");
        assert_eq!(
            v["error"],
            "secret must be printable ASCII (it is sent in an HTTP header)"
        );
    }
    let (_, list) = d.call("GET", "/attach", None);
    assert_eq!(list["grants"], json!([]));
}

/// A hand-edited or corrupted grants file with absurd timestamps or an unusable runtime
/// does not stop the daemon from starting; those grants are dropped, the rest resume.
#[test]
fn absurd_persisted_values_are_dropped_not_fatal() {
    let pod = StubPod::start();
    let dir = temp_dir("absurd");
    let config = test_config(&dir);
    std::fs::create_dir_all(&config.state_dir).unwrap();
    let now = handnode::base::timefmt::now_unix();
    let grant = |id: &str, runtime: &str, session: &str, expires_at: u64| {
        json!({"id": id, "runtime": runtime, "session": session, "profile": "observe",
               "principal": "t", "created_at": now, "expires_at": expires_at, "secret": "x"})
    };
    let good = "00000000-0000-4000-8000-000000000001";
    let file = json!({"version": 1, "grants": [
        grant("00000000-0000-4000-8000-00000000000a", &pod.runtime(), "far", u64::MAX),
        grant("00000000-0000-4000-8000-00000000000b", &pod.runtime(), "far2", i64::MAX as u64),
        grant("00000000-0000-4000-8000-00000000000c", "ws://host:notaport", "badport", now + 600),
        grant("00000000-0000-4000-8000-00000000000d", "ws://:80", "nohost", now + 600),
        grant(good, &pod.runtime(), "good", now + 600),
    ]});
    let path = config.state_dir.join("grants.json");
    std::fs::write(&path, file.to_string()).unwrap();
    std::fs::set_permissions(&path, std::os::unix::fs::PermissionsExt::from_mode(0o600)).unwrap();
    let d = TestDaemon::start(config, dir);
    let (_, list) = d.call("GET", "/attach", None);
    let ids: Vec<&str> = list["grants"]
        .as_array()
        .unwrap()
        .iter()
        .map(|g| g["id"].as_str().unwrap())
        .collect();
    assert_eq!(ids, [good], "{list}");
    let up = pod.next_upgrade();
    assert_eq!(up.path, "/tools/attach/good");
    pod.assert_no_upgrade(Duration::from_millis(300));
}

/// A `POST /attach` that arrives while the daemon is still starting must not race the
/// resume of persisted grants: saving the registry before they are loaded would overwrite
/// `grants.json` with the newcomer alone. A client hammers the port from before the daemon
/// exists; its first answer must come from a daemon that already holds every old grant.
#[test]
fn an_attach_during_startup_loses_no_persisted_grant() {
    const PERSISTED: usize = 100;
    let dir = temp_dir("startup-race");
    let state = dir.join("state");
    // A pod that never answers: grants need not attach to be persisted and resumed.
    let dead = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let runtime = format!("ws://{}", dead.local_addr().unwrap());
    drop(dead);
    let mut d = RealDaemon::start(&state, &[]);
    let mut ids = Vec::new();
    for n in 0..PERSISTED {
        let body = json!({"runtime": runtime, "session": format!("old-{n}"), "secret": "s"});
        let (status, g) = d.call("POST", "/attach", Some(&body));
        assert_eq!(status, 202, "{g}");
        ids.push(g["id"].as_str().unwrap().to_string());
    }
    assert_eq!(d.terminate(), Some(0));
    // The same port again, so the client can knock before the new daemon says where it is.
    let addr = d.addr;
    let listen = addr.to_string();
    let body = json!({"runtime": runtime, "session": "new", "secret": "s"});
    let hammer = std::thread::spawn(move || {
        let deadline = Instant::now() + WATCHDOG;
        loop {
            if let Some(answer) = try_attach(addr, &body) {
                return answer;
            }
            assert!(Instant::now() < deadline, "watchdog: never got an answer");
            std::thread::yield_now();
        }
    });
    let mut d = RealDaemon::start(&state, &[("--listen", &listen)]);
    let (status, new) = hammer.join().expect("the client thread");
    assert_eq!(status, 202, "{new}");
    let (status, list) = d.call("GET", "/attach", None);
    assert_eq!(status, 200, "{list}");
    let listed: Vec<&str> = list["grants"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|g| g["id"].as_str())
        .collect();
    for id in ids.iter().chain([&new["id"].as_str().unwrap().to_string()]) {
        assert!(listed.contains(&id.as_str()), "grant {id} lost: {list}");
    }
    // No clean shutdown to save the registry again: the file must already hold them all.
    d.kill();
    let bytes = std::fs::read(state.join("grants.json")).unwrap();
    let report =
        handnode::grants::persist::parse(&bytes, handnode::base::timefmt::now_unix()).unwrap();
    assert_eq!(
        report.grants.len(),
        PERSISTED + 1,
        "grants.json after restart"
    );
    let _ = std::fs::remove_dir_all(&dir);
}
