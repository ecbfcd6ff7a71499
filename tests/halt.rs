//! Halt: stop everything, latched (contract §22), against the in-process stub pod. Every
//! call and held approval is answered, every process of every grant is gone (`setsid` ones
//! too), every socket closed 1000 `halted`, `POST /attach` is `423`, `/healthz` says
//! `halted`, a restart stays halted (no dial), and resume brings the grants back.

mod common;

use std::time::Duration;

use common::*;
use serde_json::{json, Value};
use tungstenite::Message;

const ANSWER: &str = "halted by the person who lent the box: lunch";

fn text_of(reply: &Value) -> &str {
    reply["result"]["content"][0]["text"].as_str().unwrap_or("")
}

/// Pids whose command line carries `marker` (as `exec -a` set it).
fn marked(marker: &str) -> Vec<u32> {
    let mut pids = Vec::new();
    for entry in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        let cmdline = std::fs::read(entry.path().join("cmdline")).unwrap_or_default();
        if String::from_utf8_lossy(&cmdline).contains(marker) {
            pids.push(pid);
        }
    }
    pids
}

/// Replies until the close frame: `(replies, close code, close reason)`.
fn until_close(conn: &mut PodConn) -> (Vec<Value>, u16, String) {
    let mut replies = Vec::new();
    loop {
        match conn.ws.read() {
            Ok(Message::Text(t)) => replies.push(serde_json::from_str(&t).unwrap()),
            Ok(Message::Close(f)) => {
                let (code, reason) = f.map_or((1005, String::new()), |f| {
                    (u16::from(f.code), f.reason.to_string())
                });
                return (replies, code, reason);
            }
            Ok(_) => continue,
            Err(e) => panic!("watchdog or error before the close: {e}"),
        }
    }
}

fn send_call(conn: &mut PodConn, id: &str, name: &str, args: Value) {
    conn.send(&json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
                      "params": {"name": name, "arguments": args}}));
}

fn wait_state(d: &TestDaemon, grant: &str, state: &str) {
    poll_until(
        || d.grant(grant),
        |g| g["state"] == state,
        |g| format!("watchdog: grant never {state}: {g}"),
    );
}

#[test]
fn a_halt_answers_every_call_kills_every_process_closes_every_socket_and_outlives_a_restart() {
    let pod = StubPod::start();
    let dir = temp_dir("halt-all");
    let mut config = test_config(&dir);
    quiet_liveness(&mut config);
    config.timing.backoff_base = Duration::from_millis(20);
    let mut d = TestDaemon::start(config.clone(), dir.clone());
    let marker = format!("hn-halt-{}", std::process::id());

    let mut body = attach_body(&pod, "laptop", "desktop");
    body["approve"] = json!(["key"]);
    let (a, mut conn_a) = d.attached_with(&pod, body);
    let (b, mut conn_b) = d.attached(&pod, "desktop-two", "desktop");

    let job = conn_a.call_tool(
        json!("j"),
        "bash_start",
        json!({"command": format!("exec -a {marker}-job sleep 300")}),
    );
    assert_eq!(result(&job)["isError"], false, "{job}");
    send_call(
        &mut conn_a,
        "b1",
        "bash",
        json!({"command": format!("exec -a {marker}-inline sleep 300")}),
    );
    send_call(&mut conn_a, "k1", "key", json!({"keys": "ctrl+q"}));
    // An escapee: a new session, double-forked, left behind by a call that has returned.
    let left = conn_b.call_tool(
        json!("e"),
        "bash",
        json!({"command": format!("(setsid sh -c 'exec -a {marker}-escapee sleep 300' &) ; echo left")}),
    );
    assert!(text_of(&left).contains("left"), "{left}");
    send_call(
        &mut conn_b,
        "b2",
        "bash",
        json!({"command": format!("exec -a {marker}-other sleep 300")}),
    );
    let every = poll_until(
        || marked(&marker),
        |pids| pids.len() >= 4,
        |pids| format!("watchdog: not every process started: {pids:?}"),
    );
    // The held call is held, and b1/b2 are in flight.
    poll_until(
        || d.call("GET", "/calls", None).1,
        |v| v["calls"].as_array().map_or(0, Vec::len) == 4,
        |v| format!("watchdog: not every call listed: {v}"),
    );

    let (status, v) = d.call("POST", "/halt", Some(&json!({"reason": "lunch"})));
    assert_eq!(status, 200, "{v}");
    assert_eq!(
        (v["halted"].as_bool(), v["reason"].as_str()),
        (Some(true), Some("lunch"))
    );

    let (replies, code, reason) = until_close(&mut conn_a);
    assert_eq!((code, reason.as_str()), (1000, "halted"), "{replies:?}");
    let mut ids: Vec<&str> = replies.iter().filter_map(|r| r["id"].as_str()).collect();
    ids.sort();
    assert_eq!(ids, ["b1", "k1"], "{replies:?}");
    for r in &replies {
        assert_eq!(r["result"]["isError"], true, "{r}");
        assert_eq!(text_of(r), ANSWER, "{r}");
    }
    let (replies, code, reason) = until_close(&mut conn_b);
    assert_eq!((code, reason.as_str()), (1000, "halted"));
    assert_eq!(replies.len(), 1, "{replies:?}");
    assert_eq!(
        (replies[0]["id"].as_str(), text_of(&replies[0])),
        (Some("b2"), ANSWER)
    );

    poll_until(
        || marked(&marker),
        |pids| pids.is_empty(),
        |pids| format!("watchdog: a halt left processes of {every:?}: {pids:?}"),
    );
    wait_state(&d, &a, "halted");
    wait_state(&d, &b, "halted");
    assert_eq!(d.call("GET", "/calls", None).1["calls"], json!([]));
    let (_, approvals) = d.call("GET", "/approvals", None);
    assert_eq!(approvals["approvals"], json!([]), "{approvals}");

    // Latched: nothing new is lent, nothing dials, and a second halt changes nothing.
    let (status, v) = d.call(
        "POST",
        "/attach",
        Some(&attach_body(&pod, "new", "observe")),
    );
    assert_eq!(status, 423, "{v}");
    let err = v["error"].as_str().unwrap_or_default();
    assert!(
        err.contains(ANSWER) && err.contains("handnode resume"),
        "{err}"
    );
    let (_, _, health) = d.raw("GET", "/healthz", &[], None);
    assert_eq!(health, b"halted");
    let (status, v) = d.call("POST", "/halt", Some(&json!({"reason": "other"})));
    assert_eq!((status, v["reason"].as_str()), (200, Some("lunch")), "{v}");
    pod.assert_no_upgrade(Duration::from_millis(300));

    // A restart keeps it.
    d.stop();
    let mut d = TestDaemon::start(config.clone(), dir.clone());
    assert_eq!(d.call("GET", "/halt", None).1["reason"], "lunch");
    wait_state(&d, &a, "halted");
    wait_state(&d, &b, "halted");
    pod.assert_no_upgrade(Duration::from_millis(300));

    // Resume: both dial again and serve.
    let (status, v) = d.call("POST", "/resume", None);
    assert_eq!((status, v["halted"].as_bool()), (200, Some(false)), "{v}");
    let (_, mut one) = pod.next_session();
    let (_, _two) = pod.next_session();
    let r = one.call_tool(json!("after"), "bash", json!({"command": "echo back"}));
    assert!(text_of(&r).contains("back"), "{r}");
    let (_, _, health) = d.raw("GET", "/healthz", &[], None);
    assert_eq!(health, b"ok");
    assert!(!d.state_dir().join("halt.json").exists());
    d.stop();
}

#[test]
fn bad_halt_bodies_are_refused_and_change_nothing() {
    let d = TestDaemon::new("halt-bad");
    let over = json!({"reason": "r".repeat(501)});
    for body in [json!([1]), json!({"reason": 5}), over] {
        let (status, v) = d.call("POST", "/halt", Some(&body));
        assert_eq!(status, 400, "{body}: {v}");
        assert_eq!(d.call("GET", "/halt", None).1["halted"], false);
    }
    let json = [("Content-Type", "application/json")];
    let (status, _, _) = d.raw("POST", "/halt", &json, Some(b"{not json"));
    assert_eq!(status, 400);
    let at = json!({"reason": "r".repeat(500)});
    assert_eq!(d.call("POST", "/halt", Some(&at)).0, 200);
    assert_eq!(d.call("POST", "/resume", None).0, 200);
    // Resume when not halted: nothing to do, still 200.
    let (status, v) = d.call("POST", "/resume", None);
    assert_eq!((status, v["halted"].as_bool()), (200, Some(false)));
    for (method, path) in [("POST", "/halt"), ("POST", "/resume"), ("GET", "/halt")] {
        let (status, _, _) = http(d.addr, method, path, &[], None);
        assert_eq!(status, 401, "{method} {path}");
    }
}

#[test]
fn the_cli_halts_and_resumes() {
    let d = TestDaemon::new("halt-cli");
    let run = |args: &[&str]| {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_handnode"))
            .args(args)
            .args(["--url", &format!("http://{}", d.addr)])
            .env("HANDNODE_TOKEN", &d.token)
            .stdin(std::process::Stdio::null())
            .output()
            .unwrap();
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
        )
    };
    let (code, out) = run(&["halt", "lunch", "break"]);
    assert_eq!(code, Some(0), "{out}");
    assert!(
        out.starts_with("halted since ") && out.contains("(lunch break)"),
        "{out}"
    );
    assert_eq!(d.call("GET", "/halt", None).1["reason"], "lunch break");
    let (code, out) = run(&["resume"]);
    assert_eq!(
        (code, out.as_str()),
        (Some(0), "not halted: live grants dial again\n")
    );
    assert_eq!(d.call("GET", "/halt", None).1["halted"], false);
    let long = "r".repeat(501);
    let (code, _) = run(&["halt", &long]);
    assert_eq!(code, Some(2));
    assert_eq!(d.call("GET", "/halt", None).1["halted"], false);
}
