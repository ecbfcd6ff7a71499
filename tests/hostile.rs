//! A hostile pod, a slow mint and hostile local clients against the in-process daemon
//! (issue 12): what they send is bounded where it is written down (audit, metrics), slow
//! mints never starve the admin API, state files are never followed through symlinks,
//! ambiguous HTTP framing is refused, and stored grants cannot outlive the TTL cap.

mod common;

use std::time::Duration;

use common::*;
use serde_json::{json, Value};
use tungstenite::Message;

/// The next data message on the pod's socket as text, skipping control frames, without
/// parsing it (a 4 MiB reply parsed in a debug build would dominate the test's time).
fn recv_text(conn: &mut PodConn) -> String {
    loop {
        match conn.ws.read() {
            Ok(Message::Text(t)) => return t.as_str().to_string(),
            Ok(Message::Binary(b)) => return String::from_utf8(b.to_vec()).unwrap(),
            Ok(Message::Close(f)) => panic!("socket closed while waiting for a reply: {f:?}"),
            Ok(_) => continue,
            Err(e) if is_interrupted(&e) => continue,
            Err(e) => panic!("watchdog or error while waiting for a reply: {e}"),
        }
    }
}

#[test]
fn four_mib_tool_names_neither_rotate_the_audit_away_nor_grow_metrics() {
    let d = TestDaemon::with("hostile-names", quiet_liveness);
    let pod = StubPod::start();
    let (id, mut conn) = d.attached(&pod, "names", "observe");
    conn.set_read_timeout(WATCHDOG);
    const CALLS: usize = 80;
    const NAME_BYTES: usize = 4 << 20;
    for n in 0..CALLS {
        // Distinct names (more than the metrics' label cap), each with a control character
        // that must never reach a file raw.
        // Written by hand: serde_json escaping 4 MiB in a debug build is slow.
        let frame = format!(
            r#"{{"jsonrpc":"2.0","id":{n},"method":"tools/call","params":{{"name":"{n:02}\u001b{}","arguments":{{}}}}}}"#,
            "x".repeat(NAME_BYTES - 3)
        );
        conn.send_msg(Message::text(frame));
        let reply = recv_text(&mut conn);
        assert!(
            reply.starts_with(
                r#"{"error":{"code":-32602,"message":"Invalid params: unknown tool: "#
            ),
            "{}",
            &reply[..200.min(reply.len())]
        );
        assert!(reply.ends_with(&format!(r#""id":{n},"jsonrpc":"2.0"}}"#)));
    }
    let audit = d.wait_audit("every refused call", |a| {
        a.matches(r#""kind":"tool_call""#).count() == CALLS
    });
    let lines: Vec<Value> = audit
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert!(
        lines
            .iter()
            .any(|l| l["event"] == "created" && l["grant_id"] == id.as_str()),
        "the grant's created record was pushed out: {}",
        &audit[..500.min(audit.len())]
    );
    for l in lines.iter().filter(|l| l["kind"] == "tool_call") {
        let tool = l["tool"].as_str().unwrap();
        assert!(tool.len() <= 256, "{tool}");
        assert!(tool.ends_with(&format!(", {NAME_BYTES} bytes]")), "{tool}");
        assert_eq!(l["outcome"], "rpc_error");
    }
    assert!(
        !audit.contains('\u{1b}'),
        "a raw control character in the audit"
    );
    assert!(
        !d.state_dir().join("audit.jsonl.1").exists(),
        "{} bytes of audit for {CALLS} calls rotated the file",
        audit.len()
    );

    let (status, _, body) = d.raw("GET", "/metrics", &[], None);
    assert_eq!(status, 200);
    assert!(
        body.len() < 256 << 10,
        "/metrics is {} bytes after {CALLS} distinct long names",
        body.len()
    );
    let text = String::from_utf8(body).unwrap();
    assert!(!text.contains('\u{1b}'));
    assert!(
        text.contains(r#"handnode_tool_calls_total{tool="other",outcome="rpc_error"} 16"#),
        "{text}"
    );
    // The pod's socket still serves.
    assert_eq!(conn.ping(json!("after"))["result"], json!({}));
}

/// Send `raw` bytes as they are on one connection and read until the daemon closes it:
/// every response on it, as `(status, body)`.
fn raw_exchange(addr: std::net::SocketAddr, raw: &str) -> Vec<(u16, String)> {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(WATCHDOG)).unwrap();
    s.write_all(raw.as_bytes()).unwrap();
    let mut all = Vec::new();
    s.read_to_end(&mut all)
        .expect("watchdog: the daemon kept the connection open");
    let mut out = Vec::new();
    let mut rest = &all[..];
    while !rest.is_empty() {
        let (status, headers, body, used) = parse_response(rest).expect("an HTTP response");
        assert!(
            headers.iter().any(|(k, _)| k == "content-length"),
            "tiny_http sizes these bodies"
        );
        out.push((status, String::from_utf8_lossy(&body).to_string()));
        rest = &rest[used..];
    }
    out
}

#[test]
fn ambiguous_framing_and_duplicate_host_or_origin_get_400_and_change_nothing() {
    let d = TestDaemon::new("hostile-framing");
    let pod = StubPod::start();
    let body = attach_body(&pod, "framing", "observe").to_string();
    let auth = format!("Authorization: Bearer {}", d.token);
    let host = format!("Host: {}", d.addr);
    let attach = |extra: &str, content_lengths: &[usize]| {
        let mut req = format!(
            "POST /attach HTTP/1.1\r\n{host}\r\n{auth}\r\nContent-Type: application/json\r\n{extra}"
        );
        for n in content_lengths {
            req.push_str(&format!("Content-Length: {n}\r\n"));
        }
        req.push_str("\r\n");
        req.push_str(&body);
        // A second request pipelined behind: never answered once framing is in doubt.
        req.push_str(&format!("GET /healthz HTTP/1.1\r\n{host}\r\n\r\n"));
        raw_exchange(d.addr, &req)
    };
    let n = body.len();
    // (reason, extra headers, Content-Length values, whether the framing is in doubt so the
    // connection must close: a duplicate Origin leaves the body's length known.)
    let cases: Vec<(&str, String, Vec<usize>, bool)> = vec![
        (
            "conflicting Content-Length headers",
            String::new(),
            vec![n, n + 1],
            true,
        ),
        (
            "conflicting Content-Length headers",
            String::new(),
            vec![n - 1, n],
            true,
        ),
        (
            "Content-Length must be a number",
            "Content-Length: +5\r\n".into(),
            vec![n],
            true,
        ),
        (
            "Content-Length must be a number",
            "Content-Length: 5, 5\r\n".into(),
            vec![],
            true,
        ),
        (
            "Content-Length and Transfer-Encoding together",
            "Transfer-Encoding: chunked\r\n".into(),
            vec![n],
            true,
        ),
        (
            "more than one Host header",
            "Host: evil.example\r\n".into(),
            vec![n],
            true,
        ),
        (
            "more than one Origin header",
            format!(
                "Origin: http://{}\r\nOrigin: http://evil.example\r\n",
                d.addr
            ),
            vec![n],
            false,
        ),
    ];
    for (why, extra, lengths, closes) in cases {
        let responses = attach(&extra, &lengths);
        let want = if closes { 1 } else { 2 };
        assert_eq!(responses.len(), want, "{why}: {responses:?}");
        assert_eq!(responses[0].0, 400, "{why}: {responses:?}");
        assert_eq!(
            serde_json::from_str::<Value>(&responses[0].1).unwrap(),
            json!({"error": why})
        );
    }
    let (_, list) = d.call("GET", "/attach", None);
    assert_eq!(
        list["grants"],
        json!([]),
        "a refused request created a grant"
    );
    assert!(
        pod.upgrades.try_recv().is_err(),
        "a refused request dialled"
    );

    // Identical duplicates are one length (RFC 9112 §6.3 allows it): served, then the
    // pipelined request after it too.
    let responses = attach("", &[n, n]);
    assert_eq!(responses.len(), 2, "{responses:?}");
    assert_eq!(responses[0].0, 202, "{responses:?}");
    assert_eq!(responses[1], (200, "ok".to_string()));
}

#[test]
fn symlinked_state_files_are_refused_and_their_targets_unchanged() {
    use std::os::unix::fs::PermissionsExt;
    for name in ["grants.json", "audit.jsonl", ""] {
        let dir = temp_dir("hostile-links");
        let target = dir.join("target");
        std::fs::create_dir_all(&target).unwrap();
        let file = target.join("file");
        std::fs::write(&file, "not yours\n").unwrap();
        std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o644)).unwrap();
        let state = dir.join("state");
        if name.is_empty() {
            // The state dir itself is a link to a dir elsewhere.
            std::os::unix::fs::symlink(&target, &state).unwrap();
        } else {
            std::fs::create_dir_all(&state).unwrap();
            std::os::unix::fs::symlink(&file, state.join(name)).unwrap();
        }
        let what = if name.is_empty() { "state dir" } else { name };
        let err = handnode::Daemon::start(test_config(&dir)).expect_err(what);
        assert!(err.to_string().contains("symbolic link"), "{what}: {err}");
        assert_eq!(err.exit_code(), 2, "{what}: refused as configuration");
        assert_eq!(std::fs::read_to_string(&file).unwrap(), "not yours\n");
        let mode = std::fs::metadata(&file).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o644, "{what}: the target's mode changed");
        let entries: Vec<_> = std::fs::read_dir(&target).unwrap().collect();
        assert_eq!(
            entries.len(),
            1,
            "{what}: something was written through the link"
        );
        let _ = std::fs::remove_dir_all(&dir);
    }
}

#[test]
fn a_ten_year_stored_grant_comes_back_with_the_one_day_cap() {
    use std::os::unix::fs::PermissionsExt;
    let pod = StubPod::start();
    let dir = temp_dir("hostile-clamp");
    let state = dir.join("state");
    std::fs::create_dir_all(&state).unwrap();
    std::fs::set_permissions(&state, std::fs::Permissions::from_mode(0o700)).unwrap();
    let now = handnode::base::timefmt::now_unix();
    let id = "0000000a-aaaa-4bbb-8ccc-dddddddddddd";
    let file = json!({"version": 1, "grants": [{
        "id": id, "runtime": pod.runtime(), "session": "decade", "profile": "observe",
        "principal": "you@example.com", "created_at": now, "expires_at": now + 10 * 365 * 86_400,
        "secret": "s3cret-attach",
    }]});
    let path = state.join("grants.json");
    std::fs::write(&path, file.to_string()).unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
    let d = TestDaemon::start(test_config(&dir), dir);
    let g = d.grant(id);
    let left = g["expires_in_secs"].as_u64().unwrap();
    assert!(
        (86_400 - 60..=86_400).contains(&left),
        "resumed with {left} s left: {g}"
    );
    // The file was rewritten with the cap, so a restart cannot bring the decade back.
    let stored: Value = serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
    let expires = stored["grants"][0]["expires_at"].as_u64().unwrap();
    assert!(
        expires <= handnode::base::timefmt::now_unix() + 86_400,
        "{stored}"
    );
    assert!(expires >= now + 86_400 - 60, "{stored}");
}

#[test]
fn dripping_mints_never_delay_healthz_or_a_revoke_and_the_one_past_the_bound_gets_429() {
    // More than the admin API has handler threads (4): held on them, these would starve it.
    const MAX_MINTS: usize = 5;
    let d = TestDaemon::with("hostile-mints", |c| {
        quiet_liveness(c);
        c.limits.max_mints = MAX_MINTS;
        // Longer than the test holds the mints: only the release below ends them.
        c.timing.mint_timeout = Duration::from_secs(60);
    });
    let pod = StubPod::start();
    let (id, mut conn) = d.attached(&pod, "live", "observe");
    let (hold, held) = crossbeam_channel::bounded::<()>(0);
    pod.script().mint_hold = Some(held);

    let (done_tx, done) = crossbeam_channel::unbounded();
    let mint_body = |session: &str| json!({"runtime": pod.runtime(), "session": session, "admin_credential": "pod-admin"});
    for n in 0..MAX_MINTS {
        let (addr, token, body) = (d.addr, d.token.clone(), mint_body(&format!("mint-{n}")));
        let done_tx = done_tx.clone();
        std::thread::spawn(move || {
            let _ = done_tx.send(admin_call(addr, &token, "POST", "/attach", Some(&body)));
        });
    }
    // Every mint is at the pod, dripping: the daemon's side of each is waiting on it.
    for _ in 0..MAX_MINTS {
        pod.mints
            .recv_timeout(WATCHDOG)
            .expect("watchdog: a mint never reached the pod");
    }

    // The admin API answers everything else meanwhile (each call has the watchdog).
    let (status, _, body) = d.raw("GET", "/healthz", &[], None);
    assert_eq!((status, body.as_slice()), (200, &b"ok"[..]));
    assert_eq!(d.call("GET", "/readyz", None).0, 200);
    let (status, list) = d.call("GET", "/attach", None);
    assert_eq!(status, 200, "{list}");
    let (status, _) = d.call("DELETE", &format!("/attach/{id}"), None);
    assert_eq!(status, 204);
    conn.set_read_timeout(WATCHDOG);
    assert_eq!(conn.expect_close(), 1000, "the revoke closed the socket");
    // …and a grant with a given secret needs no mint, so it is not queued behind them.
    let (status, g) = d.call(
        "POST",
        "/attach",
        Some(&attach_body(&pod, "given", "observe")),
    );
    assert_eq!(status, 202, "{g}");
    assert!(
        done.try_recv().is_err(),
        "a mint finished before it was released, so nothing above ran while they waited"
    );

    // The bound + 1-th mint is refused at once and never reaches the pod.
    let (status, err) = d.call("POST", "/attach", Some(&mint_body("one-too-many")));
    assert_eq!(status, 429, "{err}");
    let msg = err["error"].as_str().unwrap();
    assert!(
        msg.contains(&format!("{MAX_MINTS} mints already waiting")),
        "{msg}"
    );
    assert!(
        pod.mints.try_recv().is_err(),
        "the refused mint reached the pod"
    );

    drop(hold);
    for _ in 0..MAX_MINTS {
        let (status, g) = done
            .recv_timeout(WATCHDOG)
            .expect("watchdog: a released mint never finished");
        assert_eq!(status, 202, "{g}");
    }
    // Their slots are free again.
    pod.script().mint_hold = None;
    let (status, g) = d.call("POST", "/attach", Some(&mint_body("after")));
    assert_eq!(status, 202, "{g}");
}
