//! Reverse attach end to end against the in-process stub pod: grants, the dial loop,
//! close codes, handshake statuses, renew/replace/revoke, deadlines, minting, in-flight
//! limits, cancellation, persistence and resume.

mod common;

use std::time::{Duration, Instant};

use common::*;
use serde_json::{json, Value};

/// The conformance vectors shared with the pod's implementation.
fn vectors() -> Value {
    let text = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/conformance/reverse_attach_vectors.json"
    ))
    .unwrap();
    serde_json::from_str(&text).unwrap()
}

/// Start `sleep 100` in a `bash` call with request id `id` (left in flight); returns the
/// sleep's pid once the shell has written it.
fn start_sleeper(d: &TestDaemon, conn: &mut PodConn, id: &str) -> u32 {
    let pidfile = d.dir.join("pid");
    conn.send(&json!({"jsonrpc":"2.0","id": id,"method":"tools/call","params":{"name":"bash","arguments":{"command": format!("sleep 100 & echo $! > {}; wait", pidfile.display())}}}));
    wait_for_pid(&pidfile)
}

#[test]
fn attach_dials_with_the_secret_and_serves_mcp_under_the_profile() {
    let pod = StubPod::start();
    let d = TestDaemon::new("attach");
    let g = d.attach(attach_body(&pod, "laptop", "observe"));
    assert_eq!(g["profile"], "observe");
    assert!(
        matches!(g["state"].as_str(), Some("idle" | "dialing")),
        "{g}"
    );
    assert_eq!(g["id"].as_str().unwrap().len(), 36);
    let up = pod.next_upgrade();
    assert_eq!(up.path, "/tools/attach/laptop");
    assert_eq!(up.authorization.as_deref(), Some("Bearer s3cret-attach"));
    assert_eq!(up.origin, None, "no Origin header on the dial");
    let mut conn = pod.next_conn();
    let id = g["id"].as_str().unwrap();
    let init = conn.initialize();
    assert_eq!(init["result"]["protocolVersion"], "2025-06-18");
    d.wait_grant(id, "attached", |g| g["state"] == "attached");
    let list = conn.request(json!(2), "tools/list", json!({}));
    let names: Vec<&str> = list["result"]["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap())
        .collect();
    assert_eq!(
        names,
        handnode::tools::names(handnode::profiles::Profile::Observe)
    );
    let desc = list["result"]["tools"][0]["description"].as_str().unwrap();
    assert!(
        desc.contains("profile 'observe'") && desc.contains("laptop"),
        "{desc}"
    );
    let info = conn.call_tool(json!(3), "sys_info", json!({}));
    assert_ne!(info["result"]["isError"], true, "{info}");
    let hidden = conn.call_tool(json!(4), "bash", json!({"command": "id"}));
    assert_eq!(hidden["error"]["code"], -32602);
    assert_eq!(
        hidden["error"]["message"],
        "Invalid params: unknown tool: bash"
    );
    assert_eq!(conn.ping(json!(5))["result"], json!({}));
    let g = d.grant(id);
    assert_eq!(g["calls"], 1, "{g}");
    assert!(g.get("secret").is_none() && !g.to_string().contains("s3cret"));
}

#[test]
fn revoke_closes_the_socket_1000_promptly_and_never_redials() {
    let pod = StubPod::start();
    // Long read/liveness timers: only the wake handle can make this prompt.
    let d = TestDaemon::with("revoke", quiet_liveness);
    let (id, mut conn) = d.attached(&pod, "laptop", "observe");
    let started = Instant::now();
    let (status, _) = d.call("DELETE", &format!("/attach/{id}"), None);
    assert_eq!(status, 204);
    conn.set_read_timeout(Duration::from_secs(2));
    assert_eq!(conn.expect_close(), 1000);
    assert!(started.elapsed() < Duration::from_secs(2));
    let g = d.grant(&id);
    assert_eq!(g["state"], "ended");
    assert_eq!(g["ended"], "cancelled");
    pod.assert_no_upgrade(Duration::from_millis(800));
    let (status, v) = d.call("DELETE", &format!("/attach/{id}"), None);
    assert_eq!((status, v["error"].as_str()), (404, Some("no such grant")));
    let (status, v) = d.call("GET", "/attach", None);
    assert_eq!(status, 200);
    assert_eq!(
        v["grants"][0]["id"],
        id.as_str(),
        "ended grants stay listed"
    );
}

#[test]
fn every_close_code_vector_end_to_end() {
    let vectors = vectors();
    let pod = StubPod::start();
    let d = TestDaemon::new("closecodes");
    for (i, case) in vectors["close_code"].as_array().unwrap().iter().enumerate() {
        let code = case["code"].as_u64().unwrap() as u16;
        let session = format!("s{i}");
        let (id, mut conn) = d.attached_with(
            &pod,
            json!({"runtime": pod.runtime(), "session": session, "secret": "x"}),
        );
        conn.close(code);
        match case["expect"]["stop"].as_str() {
            Some(stop) => {
                let want = match stop {
                    "grantExpired" => "grant_expired",
                    "replaced" => "replaced",
                    "sessionEnded" => "session_ended",
                    "revoked" => "revoked",
                    other => panic!("{other}"),
                };
                let g = d.wait_grant(&id, "ended", |g| g["state"] == "ended");
                assert_eq!(g["ended"], want, "close {code}");
                pod.assert_no_upgrade(Duration::from_millis(500));
            }
            None => {
                let (up, mut again) = pod.next_session();
                assert_eq!(
                    up.path,
                    format!("/tools/attach/{session}"),
                    "close {code} redials"
                );
                let (status, _) = d.call("DELETE", &format!("/attach/{id}"), None);
                assert_eq!(status, 204);
                assert_eq!(again.expect_close(), 1000);
            }
        }
    }
}

#[test]
fn handshake_statuses_redial_or_stop_as_the_vectors_say() {
    let vectors = vectors();
    let pod = StubPod::start();
    let d = TestDaemon::new("statuses");
    for (i, case) in vectors["handshake_status"]
        .as_array()
        .unwrap()
        .iter()
        .enumerate()
    {
        let status = case["status"].as_u64().unwrap() as u16;
        if status == 101 {
            continue; // a 101 that fails validation cannot be produced by a conforming server
        }
        pod.script().refuse.push_back(status);
        let g =
            d.attach(json!({"runtime": pod.runtime(), "session": format!("h{i}"), "secret": "x"}));
        let id = g["id"].as_str().unwrap();
        assert_eq!(pod.next_upgrade().status, status);
        if let Some(rejected) = case["expect"]["stop_rejected"].as_u64() {
            let g = d.wait_grant(id, "ended", |g| g["state"] == "ended");
            assert_eq!(g["ended"], format!("handshake_rejected_{rejected}"));
            assert_eq!(g["last_error"], format!("handshake {rejected}"));
            pod.assert_no_upgrade(Duration::from_millis(500));
        } else {
            let again = pod.next_upgrade();
            assert_eq!(again.status, 101, "status {status} redials");
            let mut conn = pod.next_conn();
            conn.initialize();
            assert_eq!(d.call("DELETE", &format!("/attach/{id}"), None).0, 204);
            assert_eq!(conn.expect_close(), 1000);
        }
    }
}

#[test]
fn a_slow_tool_never_delays_ping_or_sys_info_and_its_reply_arrives_when_done() {
    let pod = StubPod::start();
    let d = TestDaemon::with("slow", |c| {
        c.workers = 1;
        quiet_liveness(c);
    });
    let (_id, mut conn) = d.attached(&pod, "laptop", "owner");
    let marker = d.dir.join("release");
    for i in 0..4 {
        conn.send(&json!({"jsonrpc":"2.0","id": format!("slow{i}"),"method":"tools/call","params":{"name":"bash","arguments":{"command": format!("while [ ! -e {} ]; do sleep 0.05; done; echo done{i}", marker.display())}}}));
    }
    // With one worker, these are answered only if no worker waits on the bash children.
    assert_eq!(conn.ping(json!("p"))["result"], json!({}));
    let info = conn.call_tool(json!("info"), "sys_info", json!({}));
    assert_ne!(info["result"]["isError"], true);
    std::fs::write(&marker, "").unwrap();
    let mut done = Vec::new();
    for _ in 0..4 {
        let r = conn.recv();
        assert!(
            r["result"]["content"][0]["text"]
                .as_str()
                .unwrap()
                .starts_with("done"),
            "{r}"
        );
        done.push(r["id"].as_str().unwrap().to_string());
    }
    done.sort();
    assert_eq!(done, ["slow0", "slow1", "slow2", "slow3"]);
}

#[test]
fn the_65th_request_in_flight_is_refused() {
    let pod = StubPod::start();
    let d = TestDaemon::new("inflight");
    let (_id, mut conn) = d.attached(&pod, "laptop", "owner");
    let marker = d.dir.join("go");
    let cmd = format!("while [ ! -e {} ]; do sleep 0.05; done", marker.display());
    for i in 0..64 {
        conn.send(&json!({"jsonrpc":"2.0","id": i,"method":"tools/call","params":{"name":"bash","arguments":{"command": cmd}}}));
    }
    let refused = conn.call_tool(json!(64), "bash", json!({"command": "true"}));
    assert_eq!(refused["error"]["code"], -32000);
    assert_eq!(
        refused["error"]["message"],
        "too many requests in flight (64)"
    );
    // Control messages are not tool calls and are still answered.
    assert_eq!(conn.ping(json!("p"))["result"], json!({}));
    std::fs::write(&marker, "").unwrap();
    for _ in 0..64 {
        let r = conn.recv();
        assert_eq!(r["result"]["isError"], false, "{r}");
    }
    let after = conn.call_tool(json!(65), "bash", json!({"command": "echo ok"}));
    assert_eq!(after["result"]["isError"], false);
}

#[test]
fn cancel_kills_the_process_group_and_sends_no_reply() {
    let pod = StubPod::start();
    let d = TestDaemon::new("cancel");
    let (_id, mut conn) = d.attached(&pod, "laptop", "owner");
    let pid = start_sleeper(&d, &mut conn, "long");
    conn.send(&json!({"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":"long","reason":"user"}}));
    wait_until_dead(pid);
    // The next reply on the socket is for the ping, not the cancelled call.
    assert_eq!(conn.ping(json!("after"))["result"], json!({}));
}

#[test]
fn socket_loss_kills_the_connections_jobs_and_drops_their_replies() {
    let pod = StubPod::start();
    let d = TestDaemon::new("loss");
    let (_id, mut conn) = d.attached(&pod, "laptop", "owner");
    let pid = start_sleeper(&d, &mut conn, "long");
    conn.close(1000);
    wait_until_dead(pid);
    // The redial gets a fresh socket; the old call's reply never appears on it.
    let (_, mut again) = pod.next_session();
    assert_eq!(again.ping(json!("p2"))["result"], json!({}));
}

#[test]
fn renew_keeps_id_and_socket_and_uses_the_new_secret_next_dial() {
    let pod = StubPod::start();
    let d = TestDaemon::new("renew");
    let (id, mut conn) = d.attached(&pod, "laptop", "desktop");
    let mut body = attach_body(&pod, "laptop", "desktop");
    body["secret"] = json!("second-secret");
    body["ttl_secs"] = json!(120);
    let g = d.attach(body);
    assert_eq!(g["id"], id.as_str());
    assert!(g["expires_in_secs"].as_u64().unwrap() <= 120);
    // Same socket still serves.
    assert_eq!(conn.ping(json!(9))["result"], json!({}));
    pod.assert_no_upgrade(Duration::from_millis(300));
    conn.close(1000);
    let up = pod.next_upgrade();
    assert_eq!(up.authorization.as_deref(), Some("Bearer second-secret"));
    let audit = std::fs::read_to_string(d.state_dir().join("audit.jsonl")).unwrap();
    assert!(audit.contains("\"renewed\""), "{audit}");
}

#[test]
fn renew_while_waiting_to_redial_dials_at_once() {
    let pod = StubPod::start();
    let d = TestDaemon::with("renewwait", |c| {
        c.timing.backoff_base = Duration::from_secs(30);
        c.timing.backoff_cap = Duration::from_secs(30);
    });
    pod.script().refuse.push_back(503);
    let g = d.attach(attach_body(&pod, "laptop", "observe"));
    let id = g["id"].as_str().unwrap();
    assert_eq!(pod.next_upgrade().status, 503);
    let g = d.wait_grant(id, "redialing", |g| g["state"] == "redialing");
    assert!(g["redial_in_secs"].as_u64().unwrap() >= 20, "{g}");
    let mut body = attach_body(&pod, "laptop", "observe");
    body["secret"] = json!("fresh");
    d.attach(body);
    let up = pod.next_upgrade();
    assert_eq!(up.status, 101);
    assert_eq!(up.authorization.as_deref(), Some("Bearer fresh"));
}

#[test]
fn a_different_profile_replaces_the_grant() {
    let pod = StubPod::start();
    let d = TestDaemon::new("replace");
    let (old, mut conn) = d.attached(&pod, "laptop", "observe");
    let g = d.attach(attach_body(&pod, "laptop", "owner"));
    let new = g["id"].as_str().unwrap();
    assert_ne!(new, old);
    assert_eq!(conn.expect_close(), 1000);
    let old_g = d.grant(&old);
    assert_eq!(old_g["state"], "ended");
    assert_eq!(old_g["ended"], "replaced");
    let (_, mut conn2) = pod.next_session();
    let list = conn2.request(json!(1), "tools/list", json!({}));
    assert_eq!(
        list["result"]["tools"].as_array().unwrap().len(),
        handnode::tools::names(handnode::profiles::Profile::Owner).len()
    );
}

#[test]
fn the_deadline_closes_the_socket_and_kills_a_running_bash() {
    let pod = StubPod::start();
    let d = TestDaemon::with("deadline", quiet_liveness);
    let mut body = attach_body(&pod, "laptop", "owner");
    body["ttl_secs"] = json!(2);
    let (id, mut conn) = d.attached_with(&pod, body);
    let pid = start_sleeper(&d, &mut conn, "long");
    conn.set_read_timeout(Duration::from_secs(5));
    assert_eq!(conn.expect_close(), 1000);
    wait_until_dead(pid);
    let g = d.wait_grant(&id, "ended", |g| g["state"] == "ended");
    assert_eq!(g["ended"], "deadline");
    pod.assert_no_upgrade(Duration::from_millis(300));
    d.wait_audit("the expiry", |audit| audit.contains("\"expired\""));
}

#[test]
fn minting_uses_the_credential_once_and_the_pods_ttl_wins() {
    let pod = StubPod::start();
    pod.script().mint_body = json!({"secret": "pod-minted", "expires_in_secs": 60});
    let d = TestDaemon::new("mint");
    let body = json!({"runtime": format!("{}/", pod.runtime()), "session": "laptop", "ttl_secs": 3600, "admin_credential": "pod-admin-cred"});
    let g = d.attach(body);
    let mint = pod.mints.recv_timeout(WATCHDOG).unwrap();
    assert_eq!(mint.path, "/admin/sessions/laptop/tools-attach");
    assert_eq!(mint.authorization.as_deref(), Some("Bearer pod-admin-cred"));
    assert_eq!(mint.body, json!({"ttl_secs": 3600}));
    assert!(g["expires_in_secs"].as_u64().unwrap() <= 60, "{g}");
    let up = pod.next_upgrade();
    assert_eq!(up.authorization.as_deref(), Some("Bearer pod-minted"));
    let persisted = std::fs::read_to_string(d.state_dir().join("grants.json")).unwrap();
    assert!(
        !persisted.contains("pod-admin-cred"),
        "the credential is kept nowhere"
    );
    assert!(persisted.contains("pod-minted"));
}

#[test]
fn a_refused_mint_is_a_502_with_the_pods_status_and_leaves_grants_untouched() {
    let pod = StubPod::start();
    let d = TestDaemon::new("mintfail");
    let (id, mut conn) = d.attached(&pod, "laptop", "observe");
    {
        let mut s = pod.script();
        s.mint_status = 403;
        s.mint_body = json!({"error": "bad credential"});
    }
    let body = json!({"runtime": pod.runtime(), "session": "laptop", "profile": "owner", "admin_credential": "wrong"});
    let (status, v) = d.call("POST", "/attach", Some(&body));
    assert_eq!(status, 502);
    let msg = v["error"].as_str().unwrap();
    assert!(
        msg.starts_with("runtime refused to mint (HTTP 403): "),
        "{msg}"
    );
    assert!(msg.contains("bad credential"));
    assert_eq!(
        d.grant(&id)["state"],
        "attached",
        "the existing grant is untouched"
    );
    assert_eq!(conn.ping(json!(1))["result"], json!({}));
    // A transport failure is status 0.
    let dead = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = dead.local_addr().unwrap().port();
    drop(dead);
    let body = json!({"runtime": format!("ws://127.0.0.1:{port}"), "session": "x", "admin_credential": "c"});
    let (status, v) = d.call("POST", "/attach", Some(&body));
    assert_eq!(status, 502);
    assert!(
        v["error"]
            .as_str()
            .unwrap()
            .starts_with("runtime refused to mint (HTTP 0): "),
        "{v}"
    );
}

#[test]
fn grants_persist_and_resume_under_the_same_id() {
    let pod = StubPod::start();
    let dir = temp_dir("resume");
    let config = test_config(&dir);
    let mut d = TestDaemon::start(config.clone(), dir.clone());
    let (id, mut conn) = d.attached(&pod, "laptop", "desktop");
    let file = d.state_dir().join("grants.json");
    let mode =
        std::os::unix::fs::PermissionsExt::mode(&std::fs::metadata(&file).unwrap().permissions())
            & 0o777;
    assert_eq!(mode, 0o600);
    d.stop();
    assert_eq!(conn.expect_close(), 1001, "shutdown closes 1001");
    // Same state dir, new daemon.
    let d2 = TestDaemon::start(config, dir);
    let (status, v) = http_readyz(&d2);
    assert_eq!(status, 200, "{v}");
    let g = d2.grant(&id);
    assert_eq!(g["profile"], "desktop");
    let (up, _conn2) = pod.next_session();
    assert_eq!(up.authorization.as_deref(), Some("Bearer s3cret-attach"));
    d2.wait_grant(&id, "attached", |g| g["state"] == "attached");
    std::mem::forget(d); // its dir is shared with d2, which cleans up
}

fn http_readyz(d: &TestDaemon) -> (u16, Value) {
    let (status, _, body) = http(d.addr, "GET", "/readyz", &[], None);
    (status, serde_json::from_slice(&body).unwrap_or(Value::Null))
}

#[test]
fn an_oversized_reply_becomes_an_error_result() {
    let pod = StubPod::start();
    let d = TestDaemon::with("outcap", |c| c.limits.max_outbound_bytes = 4096);
    let (_id, mut conn) = d.attached(&pod, "laptop", "owner");
    let r = conn.call_tool(
        json!(1),
        "bash",
        json!({"command": "head -c 10000 /dev/zero | tr '\\0' x"}),
    );
    assert_eq!(r["result"]["isError"], true, "{r}");
    let text = r["result"]["content"][0]["text"].as_str().unwrap();
    assert!(text.starts_with("result too large: "), "{text}");
    let small = conn.call_tool(json!(2), "bash", json!({"command": "echo small"}));
    assert_eq!(small["result"]["isError"], false);
}

/// The 110 s cap of §5 is on the call, no longer on the command: past the inline limit a
/// command continues as a job (tests/jobs.rs), so `timeout_secs` may be up to a day.
#[test]
fn bash_under_a_grant_takes_a_timeout_of_up_to_a_day() {
    let pod = StubPod::start();
    let d = TestDaemon::new("cap110");
    let (_id, mut conn) = d.attached(&pod, "laptop", "owner");
    let r = conn.call_tool(
        json!(1),
        "bash",
        json!({"command": "true", "timeout_secs": 86_401}),
    );
    assert_eq!(r["error"]["code"], -32602, "{r}");
    let r = conn.call_tool(
        json!(2),
        "bash",
        json!({"command": "true", "timeout_secs": 86_400}),
    );
    assert_eq!(r["result"]["isError"], false, "{r}");
}

#[test]
fn binary_frames_and_garbage_get_error_replies_and_the_socket_stays_up() {
    let pod = StubPod::start();
    let d = TestDaemon::new("garbage");
    let (id, mut conn) = d.attached(&pod, "laptop", "observe");
    conn.send_msg(tungstenite::Message::binary(
        br#"{"jsonrpc":"2.0","id":1,"method":"ping"}"#.to_vec(),
    ));
    assert_eq!(conn.recv()["result"], json!({}));
    conn.send_msg(tungstenite::Message::binary(vec![0xff, 0xfe, 0x00]));
    let r = conn.recv();
    assert_eq!(
        (r["error"]["code"].as_i64(), &r["id"]),
        (Some(-32700), &Value::Null)
    );
    conn.send_msg(tungstenite::Message::text("not json at all"));
    assert_eq!(conn.recv()["error"]["code"], -32700);
    conn.send_msg(tungstenite::Message::text(format!(
        "{}{}",
        "[".repeat(10_000),
        "]".repeat(10_000)
    )));
    assert_eq!(conn.recv()["error"]["code"], -32700);
    assert_eq!(conn.ping(json!(2))["result"], json!({}));
    assert_eq!(d.grant(&id)["state"], "attached");
}

#[test]
fn a_failed_first_dial_is_retried() {
    let dead = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = dead.local_addr().unwrap();
    drop(dead);
    let d = TestDaemon::new("firstdial");
    let g = d.attach(json!({"runtime": format!("ws://{addr}"), "session": "s", "secret": "x"}));
    let id = g["id"].as_str().unwrap();
    let g = d.wait_grant(id, "redialing", |g| {
        g["state"] == "redialing" && g["last_error"].is_string()
    });
    assert!(g["last_error"].as_str().unwrap().contains("connect"), "{g}");
}

#[test]
fn the_admin_api_refuses_bad_input_with_clear_errors() {
    let d = TestDaemon::new("badinput");
    let (status, v) = d.call(
        "POST",
        "/attach",
        Some(&json!({"runtime": "http://x", "session": "s", "secret": "x"})),
    );
    assert_eq!(
        (status, v["error"].as_str()),
        (400, Some("runtime must be a ws:// or wss:// URL"))
    );
    let (status, v) = d.call("POST", "/attach", Some(&json!([1])));
    assert_eq!(
        (status, v["error"].as_str()),
        (400, Some("body must be a JSON object"))
    );
    let (status, _) = d.call("GET", "/attach/nope", None);
    assert_eq!(status, 404);
    let (status, v) = d.call("PUT", "/attach", None);
    assert_eq!(
        (status, v["error"].as_str()),
        (405, Some("method not allowed"))
    );
    let (status, _) = d.call("GET", "/nowhere", None);
    assert_eq!(status, 404);
    let text_plain = [("Content-Type", "text/plain")];
    let (status, _, _) = d.raw("POST", "/attach", &text_plain, Some(b"{}"));
    assert_eq!(status, 415);
    let big = vec![b' '; (1 << 20) + 1];
    let json_type = [("Content-Type", "application/json")];
    let (status, _, _) = d.raw("POST", "/attach", &json_type, Some(&big));
    assert_eq!(status, 413);
    let (status, _, _) = d.raw("GET", "/attach", &[("Host", "evil.example")], None);
    assert_eq!(status, 403);
    let origin = [("Origin", "http://evil.example")];
    let (status, _, _) = d.raw("GET", "/attach", &origin, None);
    assert_eq!(status, 403);
    let (status, _, body) = http(
        d.addr,
        "GET",
        "/attach",
        &[("Authorization", "Bearer wrong")],
        None,
    );
    assert_eq!(status, 401);
    assert_eq!(
        serde_json::from_slice::<Value>(&body).unwrap(),
        json!({"error": "unauthorized",
               "reason": "the bearer token is not this daemon's admin token"})
    );
    let (status, _, body) = http(d.addr, "GET", "/healthz", &[], None);
    assert_eq!((status, body.as_slice()), (200, b"ok".as_slice()));
}

fn wait_for_pid(path: &std::path::Path) -> u32 {
    poll_until(
        || {
            std::fs::read_to_string(path)
                .ok()
                .and_then(|text| text.trim().parse().ok())
        },
        Option::is_some,
        |_| "watchdog: the command never wrote its pid".into(),
    )
    .unwrap()
}

fn wait_until_dead(pid: u32) {
    poll_until(
        || std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default(),
        // Gone, or a zombie waiting for its (killed) parent's reaper.
        |stat| stat.is_empty() || stat.split(") ").nth(1).is_some_and(|s| s.starts_with('Z')),
        |_| format!("watchdog: process {pid} is still alive"),
    );
}

#[test]
fn liveness_pings_both_ways() {
    let pod = StubPod::start();
    let d = TestDaemon::with("pings", |c| {
        c.timing.ping_interval = Duration::from_millis(100);
        c.timing.silence_limit = Duration::from_secs(30);
    });
    let (_id, mut conn) = d.attached(&pod, "laptop", "observe");
    // Our pings reach the pod...
    let mut pings = 0;
    while pings < 2 {
        match conn.ws.read().expect("watchdog: no ping from handnode") {
            tungstenite::Message::Ping(_) => pings += 1,
            other => panic!("unexpected {other:?}"),
        }
    }
    // ...and the pod's pings are answered.
    conn.send_msg(tungstenite::Message::Ping(b"pod".to_vec().into()));
    loop {
        match conn.ws.read().expect("watchdog: no pong") {
            tungstenite::Message::Pong(p) if p.as_ref() == b"pod" => break,
            tungstenite::Message::Ping(_) => continue,
            other => panic!("unexpected {other:?}"),
        }
    }
}

#[test]
fn a_silent_socket_is_dropped_and_redialed() {
    let pod = StubPod::start();
    let d = TestDaemon::with("silence", |c| {
        c.timing.ping_interval = Duration::from_secs(30);
        c.timing.silence_limit = Duration::from_millis(300);
    });
    let (id, _conn) = d.attached(&pod, "laptop", "observe");
    // The pod says nothing more (and does not read, so no pongs either).
    let up = pod.next_upgrade();
    assert_eq!(up.status, 101, "redialed after the silence limit");
    let g = d.grant(&id);
    assert!(
        g["last_error"].as_str().unwrap_or("").contains("silence"),
        "{g}"
    );
}

/// Issue 30: the `202` says what the request did; `replace:false` refuses to end a live
/// grant with other tools (`409`, nothing changed); a renewal's new secret is not checked
/// until the next dial, and the end it then causes names that renewal.
#[test]
fn attach_says_created_renewed_or_replaced_and_replace_false_refuses() {
    let pod = StubPod::start();
    let d = TestDaemon::with("attachsays", quiet_liveness);
    let mut body = attach_body(&pod, "laptop", "desktop");
    body["replace"] = json!(false);
    let g = d.attach(body.clone());
    assert_eq!(g["attach"], "created", "{g}");
    let id = g["id"].as_str().unwrap().to_string();
    let (_, mut conn) = pod.next_session();
    d.wait_grant(&id, "attached", |g| g["state"] == "attached");

    let g = d.attach(body.clone());
    assert_eq!(
        (
            g["attach"].as_str(),
            g["new_secret"].as_bool(),
            g["id"].as_str()
        ),
        (Some("renewed"), Some(false), Some(id.as_str()))
    );

    let mut other = body.clone();
    other["profile"] = json!("observe");
    let (status, v) = d.call("POST", "/attach", Some(&other));
    assert_eq!(status, 409, "{v}");
    let msg = v["error"].as_str().unwrap();
    assert!(
        msg.contains(&id)
            && msg.contains("profile desktop -> observe")
            && msg.contains("--replace"),
        "{msg}"
    );
    assert_eq!(
        d.grant(&id)["state"],
        "attached",
        "the refused replace changed nothing"
    );
    assert_eq!(conn.ping(json!(1))["result"], json!({}));
    let (status, v) = d.call(
        "POST",
        "/attach",
        Some(&json!({"runtime": pod.runtime(),
        "session": "laptop", "secret": "s", "replace": "yes"})),
    );
    assert_eq!(
        (status, v["error"].as_str()),
        (400, Some("replace must be true or false"))
    );

    // A renewal with another secret: accepted now, tried at the next dial.
    let mut renew = body.clone();
    renew["secret"] = json!("mistyped");
    let g = d.attach(renew);
    assert_eq!(
        (g["attach"].as_str(), g["new_secret"].as_bool()),
        (Some("renewed"), Some(true))
    );
    pod.script().expect_secret = Some("s3cret-attach".into());
    conn.close(1000);
    assert_eq!(pod.next_upgrade().status, 401);
    let g = d.wait_grant(&id, "ended", |g| g["state"] == "ended");
    assert_eq!(g["ended"], "handshake_rejected_401", "{g}");
    let error = g["last_error"].as_str().unwrap();
    assert!(
        error.starts_with("handshake 401: the pod refused the new secret from the renewal at ")
            && error.contains(" by token"),
        "{error}"
    );

    // With replace:true (or absent) a different profile replaces, and says which grant ended.
    let g = d.attach(body.clone());
    assert_eq!(g["attach"], "created", "the old one had ended: {g}");
    let first = g["id"].as_str().unwrap().to_string();
    let _ = pod.next_session();
    other["replace"] = json!(true);
    let g = d.attach(other);
    assert_eq!(g["attach"], "replaced", "{g}");
    assert_eq!(g["replaced_id"], first.as_str());
}
