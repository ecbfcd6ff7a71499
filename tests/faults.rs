//! Fault injection against the in-process daemon and a scripted stub pod: stalled and
//! silent pods, resets mid-frame, oversized and malformed frames, a burst far past the
//! in-flight limit, a pod that forgets the grant, refusals with backoff, deadlines and
//! revokes at awkward moments. Each scenario ends in the grant state the contract names,
//! and asserts outcomes and their order; no scenario asserts how long something took.
//!
//! The scenarios run one after another inside a single `#[test]`, so this process's
//! descriptor and thread counts (`/proc/self/fd`, `/proc/self/task`) can be compared with
//! the baseline after each one: nothing a scenario started may outlive it.

mod common;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use common::*;
use serde_json::{json, Value};
use tungstenite::Message;

fn id_of(g: &Value) -> String {
    g["id"].as_str().expect("grant id").to_string()
}

/// The redial after a lost socket: exactly one upgrade, accepted, and attached again.
fn reattached(d: &TestDaemon, pod: &StubPod, id: &str) -> PodConn {
    let (_, conn) = pod.next_session();
    d.wait_grant(id, "attached again", |g| g["state"] == "attached");
    conn
}

fn last_error(d: &TestDaemon, id: &str) -> String {
    d.grant(id)["last_error"]
        .as_str()
        .unwrap_or_default()
        .to_string()
}

/// A counter from `/metrics` (the full sample name with labels), 0 when absent.
fn metric(d: &TestDaemon, sample: &str) -> u64 {
    let (status, _, text) = d.raw("GET", "/metrics", &[], None);
    assert_eq!(status, 200);
    String::from_utf8(text)
        .unwrap()
        .lines()
        .find_map(|l| l.strip_prefix(sample)?.strip_prefix(' ')?.parse().ok())
        .unwrap_or(0)
}

fn expect_eof(mut s: TcpStream, what: &str) {
    s.set_read_timeout(Some(WATCHDOG)).unwrap();
    let mut buf = [0u8; 1024];
    loop {
        match s.read(&mut buf) {
            Ok(0) => return,
            Ok(_) => continue, // the handshake request the daemon sent
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => return,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => panic!("watchdog or error waiting for the daemon to drop {what}: {e}"),
        }
    }
}

/// (1) TCP accepted, no handshake answer → handshake timeout → the socket is dropped
/// and the grant redials and attaches.
fn handshake_timeout_redials() {
    let pod = StubPod::start();
    pod.script().stall_handshakes = 1;
    let d = TestDaemon::with("hstimeout", |c| {
        c.timing.handshake_timeout = Duration::from_millis(300)
    });
    let id = id_of(&d.attach(attach_body(&pod, "stall", "observe")));
    let stalled = pod.stalls.recv_timeout(WATCHDOG).expect("a stalled dial");
    expect_eof(stalled, "the stalled handshake");
    let _conn = reattached(&d, &pod, &id);
    assert_eq!(last_error(&d, &id), "handshake timeout");
    assert_eq!(metric(&d, "handnode_dials_total"), 2);
    assert_eq!(metric(&d, "handnode_dial_failures_total"), 1);
}

/// (2) Handshake done, then nothing: no frames and no pongs (the pod never reads, so it
/// cannot answer pings). Dead after the silence limit → redial; first before the pod's
/// first frame, then once attached.
fn silence_is_a_dead_socket() {
    let pod = StubPod::start();
    let d = TestDaemon::with("silence", |c| {
        c.timing.ping_interval = Duration::from_millis(100);
        c.timing.silence_limit = Duration::from_millis(600);
    });
    let id = id_of(&d.attach(attach_body(&pod, "quiet", "observe")));
    assert_eq!(pod.next_upgrade().status, 101);
    let mut mute = pod.next_conn(); // never sends initialize
    let mut conn = reattached(&d, &pod, &id);
    assert!(
        last_error(&d, &id).starts_with("silence timeout"),
        "{}",
        last_error(&d, &id)
    );
    assert!(
        mute.pings_until_dropped() >= 1,
        "the daemon pinged before giving up"
    );
    // Attached, then the pod stops reading and writing.
    let mut conn2 = reattached(&d, &pod, &id);
    assert!(last_error(&d, &id).starts_with("silence timeout"));
    assert!(conn.pings_until_dropped() >= 1);
    assert_eq!(conn2.ping(json!(1))["result"], json!({}));
}

/// (3) The pod's connection dies in the middle of a frame: RST after a partial header, and
/// FIN after a partial payload. Both redial.
fn reset_mid_frame_redials() {
    let pod = StubPod::start();
    let d = TestDaemon::new("midframe");
    let (id, mut conn) = d.attached(&pod, "reset", "observe");
    // A text frame header whose 16-bit length is cut after one byte, then RST.
    conn.send_raw(&[0x81, 0x7e, 0x01]);
    conn.reset();
    let mut conn = reattached(&d, &pod, &id);
    assert!(
        last_error(&d, &id).starts_with("socket error"),
        "{}",
        last_error(&d, &id)
    );
    // A frame promising 100 bytes that delivers 10, then FIN.
    let mut partial = vec![0x81, 100];
    partial.extend_from_slice(b"{\"jsonrpc\"");
    conn.send_raw(&partial);
    conn.shutdown_write();
    let _conn = reattached(&d, &pod, &id);
    assert_eq!(metric(&d, "handnode_dials_total"), 3);
}

/// A JSON-RPC ping whose serialised text is exactly `len` bytes.
fn padded_ping(id: &str, len: usize) -> String {
    let head = format!(r#"{{"jsonrpc":"2.0","id":"{id}","method":"ping","params":{{"pad":""#);
    let tail = r#""}}"#;
    let pad = len - head.len() - tail.len();
    format!("{head}{}{tail}", "x".repeat(pad))
}

/// (4) Messages over the inbound cap close the socket 1009 and redial; one at the cap is
/// served. The cap is turned down to 64 KiB, and one real 16 MiB + 1 frame is sent too.
fn oversized_frames_close_1009_and_redial() {
    const CAP: usize = 64 << 10;
    let pod = StubPod::start();
    let d = TestDaemon::with("oversize", |c| {
        c.limits.max_inbound_bytes = CAP;
        quiet_liveness(c);
    });
    let (id, mut conn) = d.attached(&pod, "big", "observe");
    conn.send_msg(Message::text(padded_ping("at-cap", CAP)));
    let r = conn.recv();
    assert_eq!((&r["id"], &r["result"]), (&json!("at-cap"), &json!({})));
    conn.send_msg(Message::text(padded_ping("over", CAP + 1)));
    assert_eq!(conn.expect_close(), 1009);
    let mut conn = reattached(&d, &pod, &id);
    assert!(
        last_error(&d, &id).contains("too large"),
        "{}",
        last_error(&d, &id)
    );
    // Fragments each under the cap that add up to more than it.
    let piece = vec![b'x'; 30 << 10];
    conn.send_raw(&raw_frame(0x1, false, &piece));
    conn.send_raw(&raw_frame(0x0, false, &piece));
    conn.send_raw(&raw_frame(0x0, true, &piece));
    assert_eq!(conn.expect_close(), 1009);
    let _conn = reattached(&d, &pod, &id);
    assert_eq!(metric(&d, "handnode_closes_total{code=\"1009\"}"), 2);
    drop(d);

    // The real cap: a 16 MiB + 1 binary frame, streamed while the pod watches for the close.
    let d = TestDaemon::with("oversize16", quiet_liveness);
    let (id, conn) = d.attached(&pod, "huge", "observe");
    let stream = conn.ws.get_ref().try_clone().unwrap();
    let mut writer = stream.try_clone().unwrap();
    let sender = std::thread::spawn(move || {
        let len = (16u64 << 20) + 1;
        let mut head = vec![0x82];
        head.extend(raw_frame_len(len));
        writer.write_all(&head)?;
        let chunk = vec![b'{'; 64 << 10];
        let mut left = len as usize;
        while left > 0 {
            let n = left.min(chunk.len());
            writer.write_all(&chunk[..n])?;
            left -= n;
        }
        Ok::<_, std::io::Error>(())
    });
    let mut reader = stream;
    reader.set_read_timeout(Some(WATCHDOG)).unwrap();
    let code = loop {
        let (opcode, payload) = read_raw_frame(&mut reader).expect("a close frame from the daemon");
        if opcode == 0x8 {
            break u16::from_be_bytes([payload[0], payload[1]]);
        }
    };
    assert_eq!(code, 1009);
    // The daemon stopped reading at the header: the rest of the 16 MiB cannot all be sent.
    assert!(
        sender.join().unwrap().is_err(),
        "the daemon read a 16 MiB + 1 frame to the end"
    );
    drop(conn);
    let _conn = reattached(&d, &pod, &id);
    assert!(last_error(&d, &id).contains("too large"));
}

/// (5) Malformed input gets error replies (or, for notifications and responses, nothing)
/// and the socket stays up; invalid UTF-8 in a *text* frame fails the socket with 1007
/// and the grant redials.
fn garbage_gets_errors_and_bad_text_utf8_closes_1007() {
    let pod = StubPod::start();
    let d = TestDaemon::with("garbage", quiet_liveness);
    let (id, mut conn) = d.attached(&pod, "junk", "observe");
    let mut lcg: u64 = 0x2545_f491_4f6c_dd1d;
    let junk: Vec<u8> = (0..4096)
        .map(|_| {
            lcg = lcg.wrapping_mul(6364136223846793005).wrapping_add(1);
            (lcg >> 33) as u8
        })
        .collect();
    let deep_objects = format!("{}1{}", "{\"a\":".repeat(100_000), "}".repeat(100_000));
    let deep_params = format!(
        r#"{{"jsonrpc":"2.0","id":7,"method":"ping","params":{}{}}}"#,
        "[".repeat(5000),
        "]".repeat(5000)
    );
    let cases: Vec<(Message, i64)> = vec![
        (
            Message::binary(b"{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"ping\xff\"}".to_vec()),
            -32700,
        ),
        (Message::binary(junk), -32700),
        (Message::binary(Vec::new()), -32700),
        (Message::text("}{"), -32700),
        (Message::text(""), -32700),
        (Message::text(deep_objects), -32700),
        (Message::text(deep_params), -32700),
        (Message::text("1e999999"), -32700),
        (Message::text("42"), -32600),
        (Message::text("null"), -32600),
        (
            Message::text(r#"[{"jsonrpc":"2.0","id":1,"method":"ping"}]"#),
            -32600,
        ),
        (
            Message::text(r#"{"jsonrpc":"2.0","id":null,"method":"ping"}"#),
            -32600,
        ),
        (
            Message::text(r#"{"jsonrpc":"1.0","id":2,"method":"ping"}"#),
            -32600,
        ),
        (
            Message::text(r#"{"jsonrpc":"2.0","id":{"x":1},"method":"ping"}"#),
            -32600,
        ),
        (
            Message::text(r#"{"jsonrpc":"2.0","id":3,"method":7}"#),
            -32600,
        ),
        (
            Message::text(r#"{"jsonrpc":"2.0","id":4,"method":"nope"}"#),
            -32601,
        ),
        (
            Message::text(r#"{"jsonrpc":"2.0","id":5,"method":"tools/call","params":[]}"#),
            -32602,
        ),
        (
            Message::text(
                r#"{"jsonrpc":"2.0","id":6,"method":"tools/call","params":{"name":"sys_info","arguments":"x"}}"#,
            ),
            -32602,
        ),
        (
            Message::text(
                r#"{"jsonrpc":"2.0","id":8,"method":"tools/call","params":{"name":"bash","arguments":{"command":"id"}}}"#,
            ),
            -32602,
        ),
    ];
    for (i, (msg, code)) in cases.into_iter().enumerate() {
        let shown = format!("{msg:?}").chars().take(80).collect::<String>();
        conn.send_msg(msg);
        let r = conn.recv();
        assert_eq!(r["error"]["code"], code, "case {i} ({shown}): {r}");
    }
    // No reply at all: an unknown notification, a response, a cancel of nothing. The next
    // reply on the socket is the ping's.
    conn.send(&json!({"jsonrpc": "2.0", "method": "notifications/whatever"}));
    conn.send(&json!({"jsonrpc": "2.0", "id": 99, "result": {}}));
    conn.send(&json!({"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": "none"}}));
    assert_eq!(conn.ping(json!("after"))["result"], json!({}));
    // A WebSocket ping from the pod is answered with its payload.
    conn.send_msg(Message::Ping(b"are-you-there".to_vec().into()));
    conn.set_read_timeout(WATCHDOG);
    loop {
        let msg = match conn.ws.read() {
            Err(e) if is_interrupted(&e) => continue,
            other => other.expect("a pong"),
        };
        match msg {
            Message::Pong(p) => {
                assert_eq!(&p[..], b"are-you-there");
                break;
            }
            Message::Ping(_) => continue,
            other => panic!("expected a pong, got {other:?}"),
        }
    }
    assert_eq!(d.grant(&id)["state"], "attached");
    assert_eq!(
        metric(&d, "handnode_dials_total"),
        1,
        "nothing above redialed"
    );

    // Invalid UTF-8 in a text frame: 0xc3 0x28 is not a valid sequence.
    conn.send_raw(&raw_frame(0x1, true, &[b'{', 0xc3, 0x28, b'}']));
    assert_eq!(conn.expect_close(), 1007);
    let mut conn = reattached(&d, &pod, &id);
    assert!(
        last_error(&d, &id).contains("invalid UTF-8"),
        "{}",
        last_error(&d, &id)
    );
    // Split across fragments, the same bytes fail the same way.
    conn.send_raw(&raw_frame(0x1, false, b"{\"a\":\"\xc3"));
    conn.send_raw(&raw_frame(0x0, true, b"\x28\"}"));
    assert_eq!(conn.expect_close(), 1007);
    let mut conn = reattached(&d, &pod, &id);
    // A protocol violation (reserved opcode 0x3) drops the socket and redials too.
    conn.send_raw(&raw_frame(0x3, true, b"?"));
    let _conn = reattached(&d, &pod, &id);
    assert_eq!(metric(&d, "handnode_closes_total{code=\"1007\"}"), 2);
}

/// (6) 1 000 tool calls at once, far past the 64 in flight: every id is answered exactly
/// once, by a result or by the JSON-RPC refusal, pings are answered throughout, and this
/// process's memory stays bounded.
fn a_burst_of_a_thousand_requests_is_answered_or_refused() {
    const N: usize = 1000;
    let pod = StubPod::start();
    let d = TestDaemon::with("burst", quiet_liveness);
    let (_id, mut conn) = d.attached(&pod, "burst", "owner");
    let marker = d.dir.join("go");
    let cmd = format!("while [ ! -e {} ]; do sleep 0.1; done", marker.display());
    let rss_before = vm_rss_kib(None);
    for i in 0..N {
        conn.send(&json!({"jsonrpc":"2.0","id": i,"method":"tools/call","params":{"name":"bash","arguments":{"command": cmd}}}));
        if i % 100 == 0 {
            conn.send(&json!({"jsonrpc":"2.0","id": format!("p{i}"),"method":"ping"}));
        }
    }
    let mut seen = std::collections::HashSet::new();
    let (mut results, mut refused, mut pongs) = (0usize, 0usize, 0usize);
    let mut released = false;
    while seen.len() < N + N / 100 {
        let r = conn.recv();
        assert!(seen.insert(r["id"].to_string()), "answered twice: {r}");
        if r["id"].is_string() {
            assert_eq!(r["result"], json!({}), "{r}");
            pongs += 1;
        } else if r["error"]["code"] == -32000 {
            assert_eq!(r["error"]["message"], "too many requests in flight (64)");
            refused += 1;
        } else {
            assert_eq!(r["result"]["isError"], false, "{r}");
            results += 1;
        }
        // Once every refusal is in, only the 64 held calls remain: let them finish.
        if !released && refused + pongs == N - 64 + N / 100 {
            std::fs::write(&marker, "").unwrap();
            released = true;
        }
    }
    let rss_after = vm_rss_kib(None);
    eprintln!(
        "burst: {results} results, {refused} refused, {pongs} pongs; test process VmRSS {rss_before} KiB -> {rss_after} KiB (delta {} KiB)",
        rss_after as i64 - rss_before as i64
    );
    assert_eq!((results, refused, pongs), (64, N - 64, N / 100));
    assert!(
        rss_after < rss_before + 64 * 1024,
        "memory grew by more than 64 MiB over a 1 000-request burst"
    );
    let after = conn.call_tool(json!("after"), "bash", json!({"command": "echo ok"}));
    assert_eq!(after["result"]["isError"], false);
}

/// (7) The pod forgets the grant (a new verifier): the redial is refused 401 and the grant
/// ends `handshake_rejected_401` after exactly one more dial.
fn a_forgotten_grant_ends_after_one_rejected_dial() {
    let pod = StubPod::start();
    pod.script().expect_secret = Some("s3cret-attach".into());
    let d = TestDaemon::new("forgot");
    let (id, mut conn) = d.attached(&pod, "forgot", "observe");
    pod.script().expect_secret = Some("the-pods-new-verifier".into());
    conn.close(1011);
    let up = pod.next_upgrade();
    assert_eq!(up.status, 401);
    assert_eq!(up.authorization.as_deref(), Some("Bearer s3cret-attach"));
    let g = d.wait_grant(&id, "ended", |g| g["state"] == "ended");
    assert_eq!(g["ended"], "handshake_rejected_401");
    assert_eq!(g["last_error"], "handshake 401");
    pod.assert_no_upgrade(Duration::from_millis(800));
    assert_eq!(metric(&d, "handnode_dials_total"), 2);
}

/// (8) Ten 503s then an accept → attached; 429s back off: every gap between dials is at
/// least the configured (jittered) delay, and the gaps grow.
fn refusals_redial_and_429_backs_off() {
    let pod = StubPod::start();
    let d = TestDaemon::with("refusals", |c| {
        c.timing.backoff_base = Duration::from_millis(5);
        c.timing.backoff_cap = Duration::from_millis(20);
    });
    pod.script().refuse.extend([503; 10]);
    let id = id_of(&d.attach(attach_body(&pod, "busy", "observe")));
    for _ in 0..10 {
        assert_eq!(pod.next_upgrade().status, 503);
    }
    let _conn = reattached(&d, &pod, &id);
    assert_eq!(metric(&d, "handnode_dials_total"), 11);
    assert_eq!(metric(&d, "handnode_dial_failures_total"), 10);
    drop(d);

    let base = Duration::from_millis(100);
    let d = TestDaemon::with("backoff", |c| {
        c.timing.backoff_base = base;
        c.timing.backoff_cap = Duration::from_secs(5);
    });
    pod.script().refuse.extend([429; 4]);
    let id = id_of(&d.attach(attach_body(&pod, "slow", "observe")));
    let mut at = Vec::new();
    for _ in 0..4 {
        let up = pod.next_upgrade();
        assert_eq!(up.status, 429);
        at.push(up.at);
    }
    let (up, _conn) = pod.next_session();
    at.push(up.at);
    d.wait_grant(&id, "attached", |g| g["state"] == "attached");
    let gaps: Vec<Duration> = at.windows(2).map(|w| w[1] - w[0]).collect();
    eprintln!("429 backoff gaps: {gaps:?}");
    for (i, gap) in gaps.iter().enumerate() {
        // The smallest delay the jitter allows for attempt i: a dial can come late, never early.
        let floor = base.mul_f64(0.8) * 2u32.pow(i as u32);
        assert!(
            *gap >= floor,
            "redial {i} after {gap:?}, before the {floor:?} backoff"
        );
    }
    assert!(gaps[3] > gaps[0], "backoff did not grow: {gaps:?}");
}

/// Backoff and handshake timers of 600 s: once a dial is refused or stalled, only what the
/// scenario does (a deadline, a DELETE) moves the grant on.
fn long_backoff_and_handshake(c: &mut handnode::Config) {
    c.timing.backoff_base = Duration::from_secs(600);
    c.timing.backoff_cap = Duration::from_secs(600);
    c.timing.handshake_timeout = Duration::from_secs(600);
}

/// (9) The deadline arrives while the grant waits to redial, and while a handshake is
/// stalled: it ends `deadline` then, not when the backoff or handshake timer would fire.
/// (The deadline during a running `bash` is in tests/attach.rs.)
fn the_deadline_wins_over_backoff_and_a_stalled_handshake() {
    let pod = StubPod::start();
    let d = TestDaemon::with("deadlinewait", long_backoff_and_handshake);
    pod.script().refuse.push_back(503);
    let mut b = attach_body(&pod, "waiting", "observe");
    b["ttl_secs"] = json!(1);
    let id = id_of(&d.attach(b));
    assert_eq!(pod.next_upgrade().status, 503);
    let g = d.wait_grant(&id, "ended", |g| g["state"] == "ended");
    assert_eq!(g["ended"], "deadline");

    pod.script().stall_handshakes = 1;
    let mut b = attach_body(&pod, "stalled", "observe");
    b["ttl_secs"] = json!(1);
    let id = id_of(&d.attach(b));
    let stalled = pod.stalls.recv_timeout(WATCHDOG).expect("a stalled dial");
    let g = d.wait_grant(&id, "ended", |g| g["state"] == "ended");
    assert_eq!(g["ended"], "deadline");
    expect_eof(stalled, "the stalled handshake at the deadline");
    pod.assert_no_upgrade(Duration::from_millis(300));
}

/// (10) `DELETE` while the handshake is stalled, and while waiting to redial: the grant
/// ends `cancelled` at once and never dials again.
fn delete_while_dialing_or_waiting_cancels() {
    let pod = StubPod::start();
    let d = TestDaemon::with("deletedialing", long_backoff_and_handshake);
    pod.script().stall_handshakes = 1;
    let id = id_of(&d.attach(attach_body(&pod, "stalled", "observe")));
    let stalled = pod.stalls.recv_timeout(WATCHDOG).expect("a stalled dial");
    assert_eq!(d.grant(&id)["state"], "dialing");
    assert_eq!(d.call("DELETE", &format!("/attach/{id}"), None).0, 204);
    expect_eof(stalled, "the stalled handshake after DELETE");
    let g = d.grant(&id);
    assert_eq!(
        (g["state"].as_str(), g["ended"].as_str()),
        (Some("ended"), Some("cancelled"))
    );

    pod.script().refuse.push_back(503);
    let id = id_of(&d.attach(attach_body(&pod, "waiting", "observe")));
    assert_eq!(pod.next_upgrade().status, 503);
    d.wait_grant(&id, "redialing", |g| g["state"] == "redialing");
    assert_eq!(d.call("DELETE", &format!("/attach/{id}"), None).0, 204);
    let g = d.grant(&id);
    assert_eq!(
        (g["state"].as_str(), g["ended"].as_str()),
        (Some("ended"), Some("cancelled"))
    );
    pod.assert_no_upgrade(Duration::from_millis(500));
    assert_eq!(metric(&d, "handnode_dials_total"), 2);
    // The renew path cannot bring a cancelled grant back: a new POST makes a new grant.
    let again = id_of(&d.attach(attach_body(&pod, "waiting", "observe")));
    assert_ne!(again, id);
    assert_eq!(pod.next_upgrade().status, 101);
}

#[test]
fn faults_in_sequence_leave_no_thread_or_fd_behind() {
    type Scenario = (&'static str, fn());
    let scenarios: [Scenario; 10] = [
        ("1 handshake timeout", handshake_timeout_redials),
        ("2 silence", silence_is_a_dead_socket),
        ("3 reset mid-frame", reset_mid_frame_redials),
        ("4 oversized frames", oversized_frames_close_1009_and_redial),
        (
            "5 garbage and bad UTF-8",
            garbage_gets_errors_and_bad_text_utf8_closes_1007,
        ),
        (
            "6 burst of 1000",
            a_burst_of_a_thousand_requests_is_answered_or_refused,
        ),
        (
            "7 forgotten grant",
            a_forgotten_grant_ends_after_one_rejected_dial,
        ),
        ("8 503 and 429", refusals_redial_and_429_backs_off),
        (
            "9 deadline",
            the_deadline_wins_over_backoff_and_a_stalled_handshake,
        ),
        ("10 delete", delete_while_dialing_or_waiting_cancels),
    ];
    // A first run warms whatever the process initialises once (the harness's own state).
    handshake_timeout_redials();
    settle_daemon_threads("warm-up");
    let baseline = fds_and_threads(None);
    eprintln!("baseline: {} fds, {} threads", baseline.0, baseline.1);
    for (name, scenario) in scenarios {
        let started = Instant::now();
        scenario();
        let ran = started.elapsed();
        // Every thread the daemon named is gone and every descriptor closed as soon as
        // the daemon is dropped.
        settle_daemon_threads(name);
        let after = settle_counts(None, (baseline.0, usize::MAX / 2), (0, 0), name);
        eprintln!(
            "scenario {name}: ok in {ran:?}; {} fds, {} threads after",
            after.0, after.1
        );
    }
    // tiny_http's connection threads idle out on their own (5 s); then the thread count is
    // back where it started too.
    let end = settle_counts(None, baseline, (0, 0), "all scenarios");
    eprintln!("end: {} fds, {} threads", end.0, end.1);
}

fn settle_daemon_threads(what: &str) {
    poll_until(daemon_threads_here, Vec::is_empty, |left| {
        format!("watchdog: after {what}, daemon threads still running: {left:?}")
    });
}
