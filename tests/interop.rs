//! What MCP clients written elsewhere need from `POST /mcp`, found by running the official
//! TypeScript SDK against it (scripts/interop.sh) and pinned here without node.

mod common;

use common::*;
use serde_json::{json, Value};

fn post_mcp(
    addr: std::net::SocketAddr,
    sid: &str,
    body: &Value,
) -> (u16, Vec<(String, String)>, Vec<u8>) {
    let body = body.to_string();
    let mut headers = vec![
        ("Authorization", "Bearer test-admin-token"),
        ("Content-Type", "application/json"),
        ("Accept", "application/json, text/event-stream"),
    ];
    if !sid.is_empty() {
        headers.extend([
            ("MCP-Protocol-Version", "2025-06-18"),
            ("Mcp-Session-Id", sid),
        ]);
    }
    http(addr, "POST", "/mcp", &headers, Some(body.as_bytes()))
}

fn alive(pid: i32) -> bool {
    std::path::Path::new(&format!("/proc/{pid}")).exists()
        && !std::fs::read_to_string(format!("/proc/{pid}/stat"))
            .map(|s| {
                s.rsplit(')')
                    .next()
                    .unwrap_or("")
                    .trim_start()
                    .starts_with('Z')
            })
            .unwrap_or(true)
}

/// Poll `pred` every 10 ms under the watchdog.
fn until(what: &str, pred: impl Fn() -> bool) {
    poll_until(pred, |done| *done, |_| format!("watchdog: {what}"));
}

/// The SDK aborts a call by sending `notifications/cancelled` and still reads the HTTP answer
/// to the cancelled request: a 204 without a Content-Type is an error to it, a 202 with no
/// body is not. The call's process group dies either way.
#[test]
fn a_cancelled_mcp_call_is_answered_202_without_a_body() {
    let d = TestDaemon::new("interop-cancel");
    let (status, headers, _) = post_mcp(
        d.addr,
        "",
        &json!({"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"t","version":"0"}}}),
    );
    assert_eq!(status, 200);
    let sid = headers
        .iter()
        .find(|(k, _)| k == "mcp-session-id")
        .expect("a session id")
        .1
        .clone();
    let pid_file = d.dir.join("pid");
    let command = format!("echo $$ > {}; exec sleep 60", pid_file.display());
    let call = {
        let (addr, sid) = (d.addr, sid.clone());
        std::thread::spawn(move || {
            post_mcp(
                addr,
                &sid,
                &json!({"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"bash","arguments":{"command": command}}}),
            )
        })
    };
    until("the bash call never started", || {
        std::fs::read_to_string(&pid_file).is_ok_and(|s| s.ends_with('\n'))
    });
    let pid: i32 = std::fs::read_to_string(&pid_file)
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    let (status, _, body) = post_mcp(
        d.addr,
        &sid,
        &json!({"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":7,"reason":"aborted"}}),
    );
    assert_eq!((status, body.len()), (202, 0));
    // http() has a read timeout of WATCHDOG, so this join is bounded.
    let (status, _, body) = call.join().unwrap();
    assert_eq!(status, 202, "{}", String::from_utf8_lossy(&body));
    assert!(body.is_empty(), "{}", String::from_utf8_lossy(&body));
    until("the cancelled call's process survived", || !alive(pid));
}
