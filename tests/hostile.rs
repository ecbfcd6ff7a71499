//! A hostile pod, a slow mint and hostile local clients against the in-process daemon
//! (issue 12): what they send is bounded where it is written down (audit, metrics), slow
//! mints never starve the admin API, state files are never followed through symlinks,
//! ambiguous HTTP framing is refused, and stored grants cannot outlive the TTL cap.

mod common;

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
