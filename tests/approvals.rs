//! Approvals (contract §10) end to end against the in-process stub pod: a grant's `approve`
//! list, held calls that run only on `allow`, deny / timeout / cancel / lost socket / grant
//! end answering or withdrawing them without running anything, `remember`, the long-poll
//! and its bound, bad input, isolation between grants, persistence, and the desktop ask
//! through a stand-in `notify-send`.

mod common;

use std::path::Path;
use std::time::{Duration, Instant};

use common::*;
use serde_json::{json, Value};

/// The principal the test token authenticates as (§2: a token without a login).
const ADMIN: &str = "token";

fn desktop_with(pod: &StubPod, session: &str, approve: Value) -> Value {
    json!({"runtime": pod.runtime(), "session": session, "profile": "desktop",
           "secret": "s3cret-attach", "approve": approve})
}

/// Send a `bash` call (request id `id`) without waiting for its reply.
fn send_bash(conn: &mut PodConn, id: &str, command: &str) {
    conn.send(&json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
                      "params": {"name": "bash", "arguments": {"command": command}}}));
}

fn decide(d: &TestDaemon, id: &str, body: Value) -> (u16, Value) {
    d.call("POST", &format!("/approvals/{id}"), Some(&body))
}

fn text_of(reply: &Value) -> String {
    reply["result"]["content"][0]["text"]
        .as_str()
        .unwrap_or("")
        .to_string()
}

fn metrics(d: &TestDaemon) -> String {
    let (_, _, body) = d.raw("GET", "/metrics", &[], None);
    String::from_utf8(body).unwrap()
}

#[test]
fn deny_never_runs_the_command_and_allow_runs_it_once() {
    let pod = StubPod::start();
    let d = TestDaemon::with("appr-deny", quiet_liveness);
    let (grant, mut conn) = d.attached_with(&pod, desktop_with(&pod, "laptop", json!(["bash"])));
    let g = d.grant(&grant);
    assert_eq!(g["approve"], json!(["bash"]), "{g}");
    assert_eq!(g["approved_for_grant"], json!([]));
    // bash is gated, but mouse and key still reach the shell unasked.
    assert_eq!(g["shell"], "yes");
    assert_eq!(g["shell_because"], "mouse is a shell tool");

    let denied_file = d.dir.join("denied");
    send_bash(&mut conn, "d1", &format!("touch {}", denied_file.display()));
    let pending = wait_pending(&d, 1);
    let a = &pending[0];
    assert_eq!(a["grant_id"], grant.as_str());
    assert_eq!(a["tool"], "bash");
    assert_eq!(a["session"], "laptop");
    assert_eq!(a["profile"], "desktop");
    assert_eq!(a["principal"], ADMIN);
    assert_eq!(
        a["arguments"]["command"],
        format!("touch {}", denied_file.display()),
        "the arguments in full"
    );
    for field in ["id", "created_at", "expires_at"] {
        assert!(a[field].is_string(), "{field}: {a}");
    }
    // Nothing is sent to the pod while the call waits.
    assert_eq!(conn.ping(json!("p1"))["result"], json!({}));
    let id = a["id"].as_str().unwrap();
    let (status, v) = decide(&d, id, json!({"decision": "deny", "reason": "not now"}));
    assert_eq!(status, 200, "{v}");
    assert_eq!(v["decision"], "deny");
    assert_eq!(v["decided_by"], ADMIN);
    assert_eq!(v["reason"], "not now");
    assert_eq!(v["tool"], "bash");
    let reply = conn.recv();
    assert_eq!(reply["id"], "d1");
    assert_eq!(reply["result"]["isError"], true, "{reply}");
    assert_eq!(
        text_of(&reply),
        format!("denied by {ADMIN}: not now; it did not run")
    );
    assert!(!denied_file.exists(), "a denied command never ran");
    let (status, v) = decide(&d, id, json!({"decision": "allow"}));
    assert_eq!(
        (status, v["error"].as_str()),
        (404, Some("no such approval"))
    );

    let ran = d.dir.join("ran");
    send_bash(&mut conn, "a1", &format!("echo once >> {}", ran.display()));
    let id = wait_pending(&d, 1)[0]["id"].as_str().unwrap().to_string();
    let (status, v) = decide(&d, &id, json!({"decision": "allow"}));
    assert_eq!(status, 200, "{v}");
    assert_eq!(
        (v["decision"].as_str(), v["remember"].as_bool()),
        (Some("allow"), Some(false))
    );
    let reply = conn.recv();
    assert_eq!(reply["id"], "a1");
    assert_eq!(reply["result"]["isError"], false, "{reply}");
    assert_eq!(
        std::fs::read_to_string(&ran).unwrap(),
        "once\n",
        "ran exactly once"
    );
    assert_eq!(decide(&d, &id, json!({"decision": "allow"})).0, 404);
    // Not remembered: the next call waits again.
    send_bash(&mut conn, "a2", "true");
    let id = wait_pending(&d, 1)[0]["id"].as_str().unwrap().to_string();
    assert_eq!(decide(&d, &id, json!({"decision": "deny"})).0, 200);
    assert_eq!(
        text_of(&conn.recv()),
        format!("denied by {ADMIN}; it did not run")
    );

    let audit = d.wait_audit("the approval records", |a| {
        a.matches("\"approval_decided\"").count() == 3 && a.contains("\"not_approved\"")
    });
    let lines: Vec<Value> = audit
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let decided: Vec<&Value> = lines
        .iter()
        .filter(|l| l["event"] == "approval_decided")
        .collect();
    assert_eq!(decided[0]["decision"], "deny");
    assert_eq!(decided[0]["decided_by"], ADMIN);
    assert_eq!(decided[0]["reason"], "not now");
    assert!(decided[0]["waited_secs"].is_number(), "{}", decided[0]);
    assert_eq!(decided[1]["decision"], "allow");
    assert_eq!(
        lines
            .iter()
            .filter(|l| l["event"] == "approval_requested")
            .count(),
        3
    );
    assert!(
        !audit.contains("touch "),
        "arguments are not audited without --audit-args"
    );
    let outcomes: Vec<&str> = lines
        .iter()
        .filter(|l| l["kind"] == "tool_call" && l["tool"] == "bash")
        .map(|l| l["outcome"].as_str().unwrap())
        .collect();
    assert_eq!(outcomes, ["not_approved", "ok", "not_approved"]);
    let m = metrics(&d);
    assert!(
        m.contains("handnode_approvals_total{decision=\"deny\"} 2"),
        "{m}"
    );
    assert!(
        m.contains("handnode_approvals_total{decision=\"allow\"} 1"),
        "{m}"
    );
    assert!(m.contains("handnode_approvals_requested_total 3"), "{m}");
    assert!(
        m.contains("handnode_tool_calls_total{tool=\"bash\",outcome=\"not_approved\"} 2"),
        "{m}"
    );
}

#[test]
fn no_decision_within_the_timeout_answers_and_runs_nothing() {
    let pod = StubPod::start();
    let d = TestDaemon::with("appr-expire", |c| {
        quiet_liveness(c);
        c.timing.approval_timeout = Duration::from_millis(300);
    });
    let (_, mut conn) = d.attached_with(&pod, desktop_with(&pod, "laptop", json!("shell")));
    let file = d.dir.join("expired");
    send_bash(&mut conn, "e1", &format!("touch {}", file.display()));
    let id = wait_pending(&d, 1)[0]["id"].as_str().unwrap().to_string();
    let reply = conn.recv();
    assert_eq!(reply["id"], "e1");
    assert_eq!(reply["result"]["isError"], true);
    assert_eq!(
        text_of(&reply),
        "no one approved bash within 0.3 s; it did not run"
    );
    assert!(!file.exists(), "an expired command never ran");
    assert_eq!(decide(&d, &id, json!({"decision": "allow"})).0, 404);
    assert!(approvals(&d, "").1.is_empty());
    assert!(!file.exists());
    d.wait_audit("approval_expired", |a| {
        a.contains("\"approval_expired\"") && a.contains("\"not_approved\"")
    });
    assert!(metrics(&d).contains("handnode_approvals_total{decision=\"expired\"} 1"));
}

#[test]
fn remember_lets_later_calls_through_and_survives_a_restart() {
    let pod = StubPod::start();
    let dir = temp_dir("appr-remember");
    let mut config = test_config(&dir);
    quiet_liveness(&mut config);
    let mut d = TestDaemon::start(config.clone(), dir.clone());
    let (grant, mut conn) = d.attached_with(&pod, desktop_with(&pod, "laptop", json!("shell")));
    let g = d.grant(&grant);
    assert_eq!(
        (g["approve"].as_str(), g["shell"].as_str()),
        (Some("shell"), Some("gated"))
    );
    assert!(g.get("shell_because").is_none(), "{g}");
    send_bash(&mut conn, "r1", "echo first");
    let id = wait_pending(&d, 1)[0]["id"].as_str().unwrap().to_string();
    let (status, v) = decide(&d, &id, json!({"decision": "allow", "remember": true}));
    assert_eq!((status, v["remember"].as_bool()), (200, Some(true)), "{v}");
    assert_eq!(
        conn.recv()["result"]["structuredContent"]["stdout"],
        "first\n"
    );
    let g = d.grant(&grant);
    assert_eq!(g["approved_for_grant"], json!(["bash"]));
    assert_eq!(g["shell"], "yes", "bash now runs unasked: {g}");
    assert_eq!(g["shell_because"], "bash is a shell tool");
    // The next bash call runs at once: no pending entry appears.
    let r = conn.call_tool(json!("r2"), "bash", json!({"command": "echo second"}));
    assert_eq!(
        r["result"]["structuredContent"]["stdout"], "second\n",
        "{r}"
    );
    assert!(approvals(&d, "").1.is_empty());
    assert!(
        d.wait_audit("two requests", |a| a.contains("approval_decided"))
            .matches("approval_requested")
            .count()
            == 1
    );
    // Other gated tools still wait.
    conn.send(&json!({"jsonrpc":"2.0","id":"k1","method":"tools/call","params":{"name":"key","arguments":{"action":"press","keys":["Return"]}}}));
    let pending = wait_pending(&d, 1);
    assert_eq!(pending[0]["tool"], "key");
    // A restart resumes the grant with its approvals.
    d.stop();
    drop(conn);
    let stored = std::fs::read_to_string(dir.join("state/grants.json")).unwrap();
    assert!(stored.contains("\"approve\": \"shell\""), "{stored}");
    assert!(stored.contains("\"approved_for_grant\""), "{stored}");
    let d = TestDaemon::start(config, dir);
    let g = d.grant(&grant);
    assert_eq!(g["approve"], "shell");
    assert_eq!(g["approved_for_grant"], json!(["bash"]));
    let (_, mut conn) = pod.next_session();
    let r = conn.call_tool(json!("r3"), "bash", json!({"command": "echo third"}));
    assert_eq!(r["result"]["structuredContent"]["stdout"], "third\n", "{r}");
}

#[test]
fn a_long_poll_answers_when_an_approval_appears_and_holds_no_handler() {
    let pod = StubPod::start();
    let d = TestDaemon::with("appr-poll", quiet_liveness);
    let (_, mut conn) = d.attached_with(&pod, desktop_with(&pod, "laptop", json!(["bash"])));
    let (status, list, etag) = approvals(&d, "");
    assert_eq!((status, list.len()), (200, 0));
    assert!(etag.starts_with('"') && etag.len() > 2, "{etag:?}");
    // Without a change, the long-poll answers after its wait with the same set.
    let t = Instant::now();
    let (_, list, same) = approvals(&d, &format!("?wait=1&seen={etag}"));
    assert!(
        t.elapsed() >= Duration::from_millis(900),
        "{:?}",
        t.elapsed()
    );
    assert_eq!((list.len(), same.as_str()), (0, etag.as_str()));
    // Six parked long-polls: more than the admin API has handler threads (4).
    let addr = d.addr;
    let token = d.token.clone();
    let polls: Vec<_> = (0..6)
        .map(|_| {
            let (token, etag) = (token.clone(), etag.clone());
            std::thread::spawn(move || {
                let auth = format!("Bearer {token}");
                let started = Instant::now();
                let (status, headers, body) = http(
                    addr,
                    "GET",
                    &format!("/approvals?wait=60&seen={}", etag.trim_matches('"')),
                    &[("Authorization", &auth)],
                    None,
                );
                let v: Value = serde_json::from_slice(&body).unwrap();
                let etag = headers
                    .into_iter()
                    .find(|(k, _)| k.eq_ignore_ascii_case("etag"))
                    .unwrap()
                    .1;
                (status, v, etag, started.elapsed())
            })
        })
        .collect();
    poll_until(
        || metrics(&d),
        |m| m.contains("handnode_approval_waiters 6"),
        |m| format!("watchdog: six long-polls never parked: {m}"),
    );
    // The handlers are free: other requests are answered while the polls wait.
    assert_eq!(d.call("GET", "/attach", None).0, 200);
    assert_eq!(d.call("GET", "/healthz", None).0, 200);
    send_bash(&mut conn, "p1", "echo polled");
    for poll in polls {
        let (status, v, new_etag, took) = poll.join().unwrap();
        assert_eq!(status, 200);
        assert_eq!(v["approvals"][0]["arguments"]["command"], "echo polled");
        assert_ne!(new_etag, etag);
        assert!(took < WATCHDOG, "{took:?}");
    }
}

#[test]
fn long_polls_past_the_bound_get_429() {
    let pod = StubPod::start();
    let d = TestDaemon::with("appr-429", |c| {
        quiet_liveness(c);
        c.limits.approval_waiters = 2;
    });
    let (_, mut conn) = d.attached_with(&pod, desktop_with(&pod, "laptop", json!(["bash"])));
    let (_, _, etag) = approvals(&d, "");
    let seen = format!("/approvals?wait=60&seen={etag}");
    let polls: Vec<_> = (0..2)
        .map(|_| {
            let (addr, token, seen) = (d.addr, d.token.clone(), seen.clone());
            std::thread::spawn(move || admin_call(addr, &token, "GET", &seen, None))
        })
        .collect();
    poll_until(
        || metrics(&d),
        |m| m.contains("handnode_approval_waiters 2"),
        |m| format!("watchdog: two long-polls never parked: {m}"),
    );
    let (status, v) = d.call("GET", &seen, None);
    assert_eq!(status, 429, "{v}");
    assert_eq!(
        v["error"],
        "too many long-polls of /approvals are open (2); retry shortly, or ask without wait"
    );
    // Without wait nothing is parked, so the bound does not apply.
    assert_eq!(approvals(&d, "").0, 200);
    send_bash(&mut conn, "b1", "true");
    for poll in polls {
        let (status, v) = poll.join().unwrap();
        assert_eq!(
            (status, v["approvals"].as_array().map(Vec::len)),
            (200, Some(1))
        );
    }
}

#[test]
fn cancel_lost_socket_and_grant_end_withdraw_and_run_nothing() {
    let pod = StubPod::start();
    let d = TestDaemon::with("appr-withdraw", quiet_liveness);
    let (grant, mut conn) = d.attached_with(&pod, desktop_with(&pod, "laptop", json!(["bash"])));
    let file = d.dir.join("withdrawn");
    let touch = format!("touch {}", file.display());

    // notifications/cancelled
    send_bash(&mut conn, "c1", &touch);
    let id = wait_pending(&d, 1)[0]["id"].as_str().unwrap().to_string();
    conn.send(
        &json!({"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":"c1"}}),
    );
    wait_pending(&d, 0);
    assert_eq!(
        decide(&d, &id, json!({"decision": "allow"})).0,
        404,
        "a late decision"
    );
    // No reply to the cancelled call: the next frame is the ping's.
    assert_eq!(conn.ping(json!("after-cancel"))["result"], json!({}));

    // A lost socket.
    send_bash(&mut conn, "c2", &touch);
    let id = wait_pending(&d, 1)[0]["id"].as_str().unwrap().to_string();
    conn.reset();
    wait_pending(&d, 0);
    assert_eq!(decide(&d, &id, json!({"decision": "allow"})).0, 404);

    // The grant's end.
    let (_, mut conn) = pod.next_session();
    send_bash(&mut conn, "c3", &touch);
    let id = wait_pending(&d, 1)[0]["id"].as_str().unwrap().to_string();
    assert_eq!(d.call("DELETE", &format!("/attach/{grant}"), None).0, 204);
    wait_pending(&d, 0);
    assert_eq!(decide(&d, &id, json!({"decision": "allow"})).0, 404);
    assert_eq!(conn.expect_close(), 1000);

    assert!(!file.exists(), "no withdrawn call ran");
    let audit = d.wait_audit("three withdrawals", |a| {
        a.matches("\"approval_withdrawn\"").count() == 3
    });
    assert!(!audit.contains("approval_decided"), "{audit}");
    assert!(metrics(&d).contains("handnode_approvals_total{decision=\"withdrawn\"} 3"));
}

#[test]
fn one_grants_arguments_never_reach_another_grants_socket() {
    let pod = StubPod::start();
    let d = TestDaemon::with("appr-isolation", quiet_liveness);
    let (_, mut a) = d.attached_with(&pod, desktop_with(&pod, "grant-a", json!(["bash"])));
    let (_, mut b) = d.attached_with(&pod, desktop_with(&pod, "grant-b", json!(["bash"])));
    let secret_arg = "echo A-ONLY-7f3e9c";
    send_bash(&mut a, "a1", secret_arg);
    wait_pending(&d, 1);
    // Everything grant B's socket can ask, and a gated call of its own decided.
    let mut seen_by_b = vec![
        b.request(json!(1), "tools/list", json!({})),
        b.call_tool(json!(2), "sys_info", json!({})),
        b.request(json!(3), "resources/list", json!({})),
        b.request(json!(4), "approvals/list", json!({})),
    ];
    send_bash(&mut b, "b1", "echo b");
    let pending = wait_pending(&d, 2);
    let b_id = pending.iter().find(|p| p["session"] == "grant-b").unwrap()["id"]
        .as_str()
        .unwrap()
        .to_string();
    assert_eq!(decide(&d, &b_id, json!({"decision": "allow"})).0, 200);
    seen_by_b.push(b.recv());
    for frame in &seen_by_b {
        assert!(
            !frame.to_string().contains("A-ONLY-7f3e9c"),
            "grant A's arguments on B's socket: {frame}"
        );
    }
    // The admin API shows them: that is where the person decides.
    let (_, list, _) = approvals(&d, "");
    assert_eq!(list[0]["arguments"]["command"], secret_arg);
}

#[test]
fn bad_input_is_a_400_that_names_the_field_and_changes_nothing() {
    let pod = StubPod::start();
    let d = TestDaemon::with("appr-bad", quiet_liveness);
    let body = |profile: &str, approve: Value| {
        json!({"runtime": pod.runtime(), "session": "bad", "profile": profile,
               "secret": "x", "approve": approve})
    };
    let too_many: Vec<String> = (0..65).map(|i| format!("t{i}")).collect();
    for (b, want) in [
        (
            body("observe", json!(["bash"])),
            "approve names bash, which this grant cannot use",
        ),
        (
            body("desktop", json!(["browser_evaluate"])),
            "approve names browser_evaluate, which this grant cannot use",
        ),
        (
            body("desktop", json!("all")),
            "approve must be a list of tool names or \"shell\"",
        ),
        (
            body("desktop", json!(["bash", 3])),
            "approve must be a list of tool names or \"shell\"",
        ),
        (
            body("desktop", json!(too_many)),
            "approve lists at most 64 tool names",
        ),
    ] {
        let (status, v) = d.call("POST", "/attach", Some(&b));
        assert_eq!((status, v["error"].as_str()), (400, Some(want)), "{b}");
    }
    let (_, v) = d.call("GET", "/attach", None);
    assert_eq!(v["grants"], json!([]), "nothing was created");
    pod.assert_no_upgrade(Duration::from_millis(200));

    let (_, mut conn) = d.attached_with(&pod, desktop_with(&pod, "laptop", json!(["bash"])));
    let file = d.dir.join("bad-input");
    send_bash(&mut conn, "x1", &format!("touch {}", file.display()));
    let id = wait_pending(&d, 1)[0]["id"].as_str().unwrap().to_string();
    let path = format!("/approvals/{id}");
    let long_reason = "r".repeat(1025);
    for (body, want) in [
        (r#"[]"#.to_string(), "body must be a JSON object"),
        (r#""allow""#.to_string(), "body must be a JSON object"),
        (r#"{"#.to_string(), "body must be a JSON object"),
        (
            r#"{"decision":"maybe"}"#.to_string(),
            "decision must be \"allow\" or \"deny\"",
        ),
        (
            r#"{}"#.to_string(),
            "decision must be \"allow\" or \"deny\"",
        ),
        (
            r#"{"decision":"deny","reason":42}"#.to_string(),
            "reason must be a string",
        ),
        (
            format!(r#"{{"decision":"deny","reason":"{long_reason}"}}"#),
            "reason must be at most 1024 bytes",
        ),
        (
            r#"{"decision":"allow","remember":"yes"}"#.to_string(),
            "remember must be true or false",
        ),
    ] {
        let (status, _, reply) = d.raw(
            "POST",
            &path,
            &[("Content-Type", "application/json")],
            Some(body.as_bytes()),
        );
        let v: Value = serde_json::from_slice(&reply).unwrap();
        assert_eq!((status, v["error"].as_str()), (400, Some(want)), "{body}");
    }
    for query in ["?wait=61", "?wait=-1", "?wait=abc", "?wait=1.5"] {
        let (status, v) = d.call("GET", &format!("/approvals{query}"), None);
        assert_eq!(status, 400, "{query}");
        assert_eq!(v["error"], "wait must be a whole number of seconds, 0...60");
    }
    assert_eq!(approvals(&d, "?wait=60").0, 200, "the bound itself is fine");
    assert_eq!(d.call("PUT", "/approvals", None).0, 405);
    assert_eq!(d.call("PATCH", &path, None).0, 405);
    // Nothing was decided.
    assert_eq!(approvals(&d, "").1.len(), 1);
    assert!(!file.exists());
    assert_eq!(decide(&d, &id, json!({"decision": "deny"})).0, 200);
    assert_eq!(decide(&d, "not-an-id", json!({"decision": "deny"})).0, 404);
}

#[test]
fn held_calls_and_their_arguments_are_bounded() {
    let pod = StubPod::start();
    let d = TestDaemon::with("appr-bounds", |c| {
        quiet_liveness(c);
        c.limits.approvals_pending = 1;
        c.limits.approval_args_bytes = 100;
    });
    let (_, mut conn) = d.attached_with(&pod, desktop_with(&pod, "laptop", json!(["bash"])));
    // {"command":"…"} is 14 bytes besides the command: 86 characters make exactly 100.
    let at_bound = format!("echo {}", "a".repeat(81));
    assert_eq!(json!({"command": at_bound}).to_string().len(), 100);
    send_bash(&mut conn, "held", &at_bound);
    let id = wait_pending(&d, 1)[0]["id"].as_str().unwrap().to_string();
    let r = conn.call_tool(json!("second"), "bash", json!({"command": "echo x"}));
    assert_eq!(r["result"]["isError"], true, "{r}");
    assert_eq!(
        text_of(&r),
        "too many calls are already waiting for approval (1); bash did not run"
    );
    assert_eq!(decide(&d, &id, json!({"decision": "deny"})).0, 200);
    assert_eq!(conn.recv()["id"], "held");
    let over = format!("echo {}", "a".repeat(82));
    let r = conn.call_tool(json!("big"), "bash", json!({"command": over}));
    assert_eq!(
        text_of(&r),
        "bash needs approval, but its arguments (101 bytes) are more than a person can review here (100 bytes); it did not run"
    );
    assert!(
        approvals(&d, "").1.is_empty(),
        "refused calls are never pending"
    );
}

#[test]
fn a_different_approve_replaces_the_grant_and_the_same_renews_it() {
    let pod = StubPod::start();
    let d = TestDaemon::with("appr-replace", quiet_liveness);
    let (first, mut conn) =
        d.attached_with(&pod, desktop_with(&pod, "laptop", json!(["bash", "key"])));
    let renewed = d.attach(desktop_with(&pod, "laptop", json!(["key", "bash", "key"])));
    assert_eq!(renewed["id"], first.as_str(), "the same set renews");
    assert_eq!(
        renewed["approve"],
        json!(["bash", "key"]),
        "a renew keeps the grant as it was given"
    );
    let replaced = d.attach(desktop_with(&pod, "laptop", json!(["bash"])));
    assert_ne!(replaced["id"], first.as_str());
    assert_eq!(conn.expect_close(), 1000);
    let old = d.grant(&first);
    assert_eq!(
        (old["state"].as_str(), old["ended"].as_str()),
        (Some("ended"), Some("replaced"))
    );
    let (_, _conn) = pod.next_session();
    let plain = d.attach(attach_body(&pod, "laptop", "desktop"));
    assert_ne!(
        plain["id"], replaced["id"],
        "no approve is a different approve"
    );
    assert!(plain.get("approve").is_none());
    assert_eq!(plain["shell"], "yes");
    assert_eq!(plain["shell_because"], "bash is a shell tool");
    let observe = d.attach(attach_body(&pod, "watch", "observe"));
    assert_eq!(observe["shell"], "no");
}

/// A stand-in `notify-send`: records each argv (one argument a line, then `--end`) in
/// `<dir>/argv`; an ask (`--wait`) answers with `answer` or, when `answer` is empty, exits 2
/// like a notify-send without action support.
fn stand_in(dir: &Path, answer: &str) -> std::path::PathBuf {
    use std::os::unix::fs::PermissionsExt;
    let script = dir.join("notify-send");
    let argv = dir.join("argv");
    let ask = if answer.is_empty() {
        "echo 'Unknown option --action' >&2; exit 2".to_string()
    } else {
        format!("echo {answer}")
    };
    std::fs::write(
        &script,
        format!(
            "#!/bin/sh\n{{ for a in \"$@\"; do printf '%s\\n' \"$a\"; done; echo --end; }} >> {argv}\n\
             case \" $* \" in *' --wait '*) {ask} ;; esac\n",
            argv = argv.display()
        ),
    )
    .unwrap();
    std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();
    script
}

fn with_stand_in(dir: &Path, answer: &str) -> impl FnOnce(&mut handnode::Config) {
    let script = stand_in(dir, answer);
    move |c: &mut handnode::Config| {
        quiet_liveness(c);
        c.notify = true;
        c.notify_program = Some(script);
        c.display_env = Some([("DISPLAY".to_string(), ":99".to_string())].into());
    }
}

#[test]
fn the_persons_allow_on_the_desktop_notification_reaches_the_call() {
    let pod = StubPod::start();
    let tools = temp_dir("appr-notify-bin");
    let d = TestDaemon::with("appr-notify", with_stand_in(&tools, "allow"));
    let (_, mut conn) = d.attached_with(&pod, desktop_with(&pod, "laptop", json!(["bash"])));
    send_bash(&mut conn, "n1", "echo '<b>notified</b>'");
    let reply = conn.recv();
    assert_eq!(reply["id"], "n1");
    assert_eq!(
        reply["result"]["structuredContent"]["stdout"], "<b>notified</b>\n",
        "{reply}"
    );
    let argv = std::fs::read_to_string(tools.join("argv")).unwrap();
    let ask: Vec<&str> = argv
        .split("--end\n")
        .find(|a| a.contains("--wait"))
        .unwrap_or_else(|| panic!("no ask among {argv}"))
        .lines()
        .collect();
    for flag in ["--action=allow=Allow", "--action=deny=Deny", "--wait", "--"] {
        assert!(ask.contains(&flag), "{flag} missing: {ask:?}");
    }
    assert!(
        ask.contains(&"handnode: laptop wants to run bash"),
        "{ask:?}"
    );
    assert!(
        ask.iter()
            .any(|a| a.starts_with("command: echo '&lt;b&gt;notified&lt;/b&gt;'")),
        "the command, markup escaped: {ask:?}"
    );
    let audit = d.wait_audit("the desktop decision", |a| a.contains("approval_decided"));
    assert!(audit.contains("\"decided_by\":\"desktop\""), "{audit}");
    let _ = std::fs::remove_dir_all(&tools);
}

#[test]
fn a_notify_send_without_actions_falls_back_to_a_plain_notification() {
    let pod = StubPod::start();
    let tools = temp_dir("appr-plain-bin");
    let d = TestDaemon::with("appr-plain", with_stand_in(&tools, ""));
    let (_, mut conn) = d.attached_with(&pod, desktop_with(&pod, "laptop", json!(["bash"])));
    send_bash(&mut conn, "f1", "echo fallback");
    let argv = poll_until(
        || std::fs::read_to_string(tools.join("argv")).unwrap_or_default(),
        |a| a.matches("--end").count() >= 2,
        |a| format!("watchdog: no plain notification after the failed ask: {a}"),
    );
    let calls: Vec<&str> = argv.split("--end\n").collect();
    assert!(calls[0].contains("--wait"), "{argv}");
    assert!(
        !calls[1].contains("--action") && calls[1].contains("handnode: laptop wants to run bash"),
        "{argv}"
    );
    // The other ways to decide still work.
    let id = wait_pending(&d, 1)[0]["id"].as_str().unwrap().to_string();
    assert_eq!(decide(&d, &id, json!({"decision": "allow"})).0, 200);
    assert_eq!(
        conn.recv()["result"]["structuredContent"]["stdout"],
        "fallback\n"
    );
    let _ = std::fs::remove_dir_all(&tools);
}

/// The three spoofs of issue 22, as `bash` arguments, each with what must be seen.
fn spoofs() -> Vec<(Value, Vec<&'static str>)> {
    vec![
        (
            json!({"command": "echo visible-harmless", "env": {"BASH_ENV": "$(id > /tmp/x)"}}),
            vec!["env sets BASH_ENV", "env.BASH_ENV: $(id > /tmp/x)"],
        ),
        (
            json!({"command": format!("echo harmless{}; touch /tmp/pwned", " ".repeat(300))}),
            vec!["command: echo harmless␠×300; touch /tmp/pwned"],
        ),
        (
            json!({"command": "echo \u{202e}gnp.exe"}),
            vec!["command: echo \\u{202e}gnp.exe"],
        ),
    ]
}

#[test]
fn the_three_spoofs_are_shown_for_what_they_are_on_the_notification_and_the_cli() {
    let pod = StubPod::start();
    let tools = temp_dir("appr-spoof-bin");
    // A notify-send without actions: the plain notification shows, the calls stay held.
    let d = TestDaemon::with("appr-spoof", with_stand_in(&tools, ""));
    let (_, mut conn) = d.attached_with(&pod, desktop_with(&pod, "laptop", json!(["bash"])));
    let cases = spoofs();
    for (i, (args, _)) in cases.iter().enumerate() {
        conn.send(
            &json!({"jsonrpc": "2.0", "id": format!("s{i}"), "method": "tools/call",
                          "params": {"name": "bash", "arguments": args}}),
        );
    }
    let pending = wait_pending(&d, cases.len());
    // GET /approvals keeps the arguments exactly as sent.
    for (args, _) in &cases {
        assert!(
            pending.iter().any(|p| p["arguments"] == *args),
            "{args} in {pending:?}"
        );
    }
    let argv = poll_until(
        || std::fs::read_to_string(tools.join("argv")).unwrap_or_default(),
        |a| a.matches("--end").count() >= 2 * cases.len(),
        |a| format!("watchdog: not every notification shown: {a}"),
    );
    let bin = env!("CARGO_BIN_EXE_handnode");
    for (args, seen) in &cases {
        let id = pending
            .iter()
            .find(|p| p["arguments"] == *args)
            .and_then(|p| p["id"].as_str())
            .unwrap()
            .to_string();
        // The notification: one of the shown ones holds every line.
        let shown = argv
            .split("--end\n")
            .find(|n| seen.iter().all(|s| n.contains(s)))
            .unwrap_or_else(|| panic!("no notification shows {seen:?}: {argv}"));
        if seen[0].starts_with("env sets") {
            assert!(
                shown.contains(
                    "handnode: laptop wants to run bash — env sets BASH_ENV\nenv sets BASH_ENV\n"
                ),
                "named first, in the title and the body: {shown}"
            );
        }
        assert!(!shown.contains('\u{202e}'), "{shown}");
        // The CLI, in full.
        let out = std::process::Command::new(bin)
            .args([
                "approvals",
                "--full",
                &id,
                "--url",
                &format!("http://{}", d.addr),
            ])
            .env("HANDNODE_TOKEN", "test-admin-token")
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success(),
            "{text}{}",
            String::from_utf8_lossy(&out.stderr)
        );
        for s in seen {
            assert!(text.contains(s), "{s:?} not in {text}");
        }
        if seen[0].starts_with("env sets") {
            let body = text.split("\n\n").nth(1).unwrap();
            assert!(body.starts_with("env sets BASH_ENV\n"), "{text}");
        }
        assert!(
            !text.contains('\u{202e}') && !text.contains(&" ".repeat(4)),
            "{text}"
        );
    }
    // The table: one line each, nothing hidden, nothing cut without saying so.
    let out = std::process::Command::new(bin)
        .args(["approvals", "--url", &format!("http://{}", d.addr)])
        .env("HANDNODE_TOKEN", "test-admin-token")
        .output()
        .unwrap();
    let table = String::from_utf8_lossy(&out.stdout);
    assert!(
        table.contains("env sets BASH_ENV ¶ command: echo visible-harmless"),
        "{table}"
    );
    assert!(table.contains("␠×300; touch /tmp/pwned"), "{table}");
    assert!(table.contains("\\u{202e}gnp.exe"), "{table}");
    // Deny them all: nothing ran.
    for p in &pending {
        assert_eq!(
            decide(&d, p["id"].as_str().unwrap(), json!({"decision": "deny"})).0,
            200
        );
    }
    let _ = std::fs::remove_dir_all(&tools);
}

#[test]
fn one_grants_approval_flood_leaves_the_other_grants_their_slots() {
    let pod = StubPod::start();
    let d = TestDaemon::with("appr-shares", |c| {
        quiet_liveness(c);
        c.limits.approvals_pending_per_grant = 3;
        c.limits.approvals_pending = 8;
    });
    let (_, mut a) = d.attached_with(&pod, desktop_with(&pod, "greedy", json!(["bash"])));
    let (_, mut b) = d.attached_with(&pod, desktop_with(&pod, "other-b", json!(["bash"])));
    let (_, mut c) = d.attached_with(&pod, desktop_with(&pod, "other-c", json!(["bash"])));
    // The greedy grant: its bound (3) held, bound + 1 refused with the §15 words.
    // {"command":"…"} is 14 bytes besides the command: the first two arguments make exactly
    // the list's budget of 64 KiB together, so both are shown whole and the third is cut.
    let first = "a".repeat(65_536 - 20 - 14);
    send_bash(&mut a, "a1", &first);
    send_bash(&mut a, "a2", "echo x");
    send_bash(&mut a, "a3", "echo third");
    wait_pending(&d, 3);
    let r = a.call_tool(json!("a4"), "bash", json!({"command": "echo four"}));
    assert_eq!(r["result"]["isError"], true, "{r}");
    assert!(
        text_of(&r).starts_with("too many of this grant's calls are waiting for approval (3)"),
        "{r}"
    );
    // The others still hold calls: B up to its own bound, C too until the box's bound (8).
    for i in 0..3 {
        send_bash(&mut b, &format!("b{i}"), "echo b");
    }
    wait_pending(&d, 6);
    send_bash(&mut c, "c0", "echo c");
    send_bash(&mut c, "c1", "echo c");
    let list = wait_pending(&d, 8);
    // The box's bound + 1 is refused, to whoever asks.
    let r = c.call_tool(json!("c2"), "bash", json!({"command": "echo c"}));
    assert_eq!(
        text_of(&r),
        "too many calls are already waiting for approval (8); bash did not run"
    );
    // GET /approvals is bounded: the budget exactly, then cut; /approvals/{id} is whole.
    assert_eq!(list[0]["arguments"]["command"], first.as_str());
    assert_eq!(list[1]["arguments"]["command"], "echo x");
    assert!(list[0].get("arguments_truncated").is_none());
    assert!(list[1].get("arguments_truncated").is_none());
    for cut in &list[2..] {
        assert_eq!(cut["arguments_truncated"], true, "{cut}");
        assert!(cut["arguments"].is_string(), "{cut}");
    }
    let third = list[2]["id"].as_str().unwrap();
    let (status, whole) = d.call("GET", &format!("/approvals/{third}"), None);
    assert_eq!(status, 200);
    assert_eq!(whole["arguments"]["command"], "echo third");
    assert!(whole.get("arguments_truncated").is_none());
    // A decision frees the greedy grant's slot for it, and only for it.
    assert_eq!(decide(&d, third, json!({"decision": "deny"})).0, 200);
    assert_eq!(a.recv()["id"], "a3");
    assert_eq!(d.call("GET", &format!("/approvals/{third}"), None).0, 404);
    send_bash(&mut a, "a5", "echo again");
    wait_pending(&d, 8);
}
