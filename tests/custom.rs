//! Custom tool lists and the escalation check, through the admin API and a real grant
//! socket: the pod lists exactly a grant's effective tools, a forced call of any other tool
//! gets the unknown-tool answer, a pattern never matches an upstream tool without a class
//! (which only `owner` sees), every rule's `400` names the offending value and changes
//! nothing, a renew needs identical lists, and a restart keeps them. A stub upstream MCP
//! server offers classified browser tools and one without a class.

mod common;
#[path = "common/realbin.rs"]
mod realbin;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use common::*;
use handnode::profiles::{profile_error, Class, Profile, MAX_LIST_NAMES, MAX_TOOL_NAME_BYTES};
use handnode::tools;
use handnode::tools::policy::{
    classify, ALLOW_NEEDS_CUSTOM_ERROR, BROWSER_PROFILE_HINT, CUSTOM_NEEDS_ALLOW_ERROR,
    NO_TOOLS_ERROR, NO_UPSTREAM, UPSTREAM_LACKS,
};
use handnode::wire::mcp::INVALID_PARAMS;
use realbin::RealDaemon;
use serde_json::{json, Value};

/// The stub upstream's tool without a class.
const UNCLASSIFIED: &str = "browser_brand_new";
/// What the stub upstream offers, in order.
const UPSTREAM_TOOLS: [&str; 5] = [
    "browser_snapshot",
    "browser_navigate",
    "browser_evaluate",
    "browser_file_upload",
    UNCLASSIFIED,
];

/// A Streamable HTTP MCP server with JSON replies: `initialize`, `tools/list` of
/// [`UPSTREAM_TOOLS`], and `tools/call` answering `upstream ran <name>`.
struct StubUpstream {
    port: u16,
    lists: Arc<AtomicUsize>,
    calls: Arc<Mutex<Vec<String>>>,
    server: Arc<tiny_http::Server>,
    thread: Option<JoinHandle<()>>,
}

impl StubUpstream {
    fn start() -> StubUpstream {
        let server = Arc::new(tiny_http::Server::http("127.0.0.1:0").expect("bind"));
        let port = server.server_addr().to_ip().expect("an IP address").port();
        let lists = Arc::new(AtomicUsize::new(0));
        let calls = Arc::new(Mutex::new(Vec::new()));
        let thread = {
            let (server, lists, calls) = (Arc::clone(&server), lists.clone(), calls.clone());
            std::thread::spawn(move || {
                for rq in server.incoming_requests() {
                    serve(rq, &lists, &calls);
                }
            })
        };
        StubUpstream {
            port,
            lists,
            calls,
            server,
            thread: Some(thread),
        }
    }

    fn url(&self) -> String {
        format!("http://127.0.0.1:{}/mcp", self.port)
    }

    fn calls(&self) -> Vec<String> {
        self.calls.lock().unwrap().clone()
    }
}

impl Drop for StubUpstream {
    fn drop(&mut self) {
        self.server.unblock();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

fn serve(mut rq: tiny_http::Request, lists: &AtomicUsize, calls: &Mutex<Vec<String>>) {
    let json_header = tiny_http::Header::from_bytes("Content-Type", "application/json").unwrap();
    if *rq.method() != tiny_http::Method::Post {
        let _ = rq.respond(tiny_http::Response::empty(200));
        return;
    }
    let mut body = String::new();
    let _ = rq.as_reader().read_to_string(&mut body);
    let msg: Value = serde_json::from_str(&body).unwrap_or(Value::Null);
    let Some(id) = msg.get("id").cloned() else {
        let _ = rq.respond(tiny_http::Response::empty(202));
        return;
    };
    let result = match msg["method"].as_str().unwrap_or("") {
        "initialize" => json!({"protocolVersion": "2025-06-18", "capabilities": {"tools": {}},
                               "serverInfo": {"name": "stub-upstream", "version": "0"}}),
        "tools/list" => {
            lists.fetch_add(1, Ordering::SeqCst);
            let tools: Vec<Value> = UPSTREAM_TOOLS
                .iter()
                .map(|n| json!({"name": n, "description": "stub", "inputSchema": {"type": "object"}}))
                .collect();
            json!({ "tools": tools })
        }
        "tools/call" => {
            let name = msg["params"]["name"].as_str().unwrap_or("").to_string();
            calls.lock().unwrap().push(name.clone());
            json!({"content": [{"type": "text", "text": format!("upstream ran {name}")}]})
        }
        _ => json!({}),
    };
    let reply = json!({"jsonrpc": "2.0", "id": id, "result": result}).to_string();
    let _ = rq.respond(tiny_http::Response::from_string(reply).with_header(json_header));
}

fn daemon(tag: &str, upstream: &StubUpstream) -> TestDaemon {
    let url = upstream.url();
    TestDaemon::with(tag, move |c| {
        quiet_liveness(c);
        c.upstreams = vec![("browser".into(), url)];
        c.timing.upstream_cache_ttl = Duration::from_millis(100);
    })
}

fn body(pod: &StubPod, session: &str, extra: Value) -> Value {
    let mut b = json!({"runtime": pod.runtime(), "session": session, "secret": "s3cret-attach"});
    for (k, v) in extra.as_object().unwrap() {
        b[k] = v.clone();
    }
    b
}

fn names(list: &Value) -> Vec<String> {
    list["result"]["tools"]
        .as_array()
        .unwrap_or_else(|| panic!("tools/list: {list}"))
        .iter()
        .map(|t| t["name"].as_str().unwrap().to_string())
        .collect()
}

/// `tools/list` once the upstream's tools are in (the first listing may race the first
/// background fetch of the upstream's list).
fn listed_with_upstream(conn: &mut PodConn) -> Vec<String> {
    let mut n = 100;
    poll_until(
        || {
            n += 1;
            names(&conn.request(json!(n), "tools/list", json!({})))
        },
        |names| names.iter().any(|n| n.starts_with("browser_")),
        |names| format!("watchdog: no upstream tool was ever listed: {names:?}"),
    )
}

fn assert_unknown_tool(reply: &Value, name: &str) {
    assert_eq!(reply["error"]["code"], INVALID_PARAMS, "{name}: {reply}");
    assert_eq!(
        reply["error"]["message"],
        format!("Invalid params: unknown tool: {name}"),
        "{reply}"
    );
}

fn strings(v: &Value) -> Vec<String> {
    v.as_array()
        .unwrap_or_else(|| panic!("not a list: {v}"))
        .iter()
        .map(|s| s.as_str().unwrap().to_string())
        .collect()
}

#[test]
fn a_custom_grant_lists_exactly_its_tools_and_refuses_every_other() {
    let up = StubUpstream::start();
    let pod = StubPod::start();
    let d = daemon("custom-list", &up);
    let g = d.attach(body(
        &pod,
        "lent",
        json!({"profile": "custom", "allow": ["sys_info", "browser_*"], "deny": ["browser_evaluate"]}),
    ));
    // The 202 says what was lent, and that it reaches a shell (a browser file tool).
    assert_eq!(g["profile"], "custom");
    assert_eq!(g["allow"], json!(["sys_info", "browser_*"]));
    assert_eq!(g["deny"], json!(["browser_evaluate"]));
    assert!(g.get("approve").is_none(), "no approve, no field: {g}");
    assert_eq!(g["shell"], "yes");
    assert_eq!(g["shell_because"], "browser_file_upload is a shell tool");
    let tools = strings(&g["tools"]);
    assert_eq!(tools[0], "sys_info");
    assert!(
        tools[1..].iter().all(|t| t.starts_with("browser_")),
        "{tools:?}"
    );
    assert!(!tools
        .iter()
        .any(|t| t == "browser_evaluate" || t == UNCLASSIFIED));
    assert!(tools.iter().all(|t| classify(t).is_some()), "{tools:?}");

    let id = g["id"].as_str().unwrap().to_string();
    let (_, mut conn) = pod.next_session();
    d.wait_grant(&id, "attached", |g| g["state"] == "attached");
    // The pod sees the effective tools the upstream offers, in listing order: never the
    // denied one, never the one without a class, no other local tool.
    let listed = listed_with_upstream(&mut conn);
    assert_eq!(
        listed,
        [
            "sys_info",
            "browser_snapshot",
            "browser_navigate",
            "browser_file_upload"
        ]
    );
    // The grant, read again now the upstream's list is known, names exactly that (§25).
    let tools = strings(&d.grant(&id)["tools"]);
    assert_eq!(tools, listed, "the grant names what it lends");
    for (i, name) in [
        "bash",
        "screenshot",
        "key",
        "browser_evaluate",
        UNCLASSIFIED,
        "no_such_tool",
    ]
    .into_iter()
    .enumerate()
    {
        assert_unknown_tool(&conn.call_tool(json!(i), name, json!({})), name);
    }
    assert!(up.calls().is_empty(), "a refused call reached the upstream");
    let ran = conn.call_tool(json!("snap"), "browser_snapshot", json!({}));
    assert_eq!(
        ran["result"]["content"][0]["text"], "upstream ran browser_snapshot",
        "{ran}"
    );
    assert_eq!(up.calls(), ["browser_snapshot"]);

    // sys_info (its detail names each tool) and every local description tell the agent
    // what it may use.
    let info = conn.call_tool(json!("info"), "sys_info", json!({"detail": true}));
    let s = &info["result"]["structuredContent"];
    assert_eq!(s["profile"], "custom");
    assert_eq!(strings(&s["allowed_tools"]), tools);
    assert_eq!(s["shell"], "yes");
    assert_eq!(s["shell_because"], "browser_file_upload is a shell tool");
    let list = conn.request(json!("l"), "tools/list", json!({}));
    let description = list["result"]["tools"][0]["description"].as_str().unwrap();
    assert!(
        description.contains("profile 'custom'")
            && description.contains(&format!("It may use: {}", tools.join(", "))),
        "{description}"
    );
    // Upstream tools keep the upstream's own description.
    assert_eq!(list["result"]["tools"][1]["description"], "stub");
}

#[test]
fn a_pattern_never_reaches_a_tool_without_a_class_which_only_owner_sees() {
    let up = StubUpstream::start();
    let pod = StubPod::start();
    let d = daemon("custom-unclassified", &up);
    // Named, or matched only by it, it is refused; nothing is created.
    for allow in [json!([UNCLASSIFIED]), json!(["browser_brand*"])] {
        let (status, v) = d.call(
            "POST",
            "/attach",
            Some(&body(
                &pod,
                "x",
                json!({"profile": "custom", "allow": allow}),
            )),
        );
        assert_eq!(status, 400, "{v}");
        assert_eq!(
            v["error"],
            format!("unknown tool in allow: {}", allow[0].as_str().unwrap())
        );
    }
    let (status, v) = d.call(
        "POST",
        "/attach",
        Some(&body(
            &pod,
            "x",
            json!({"profile": "owner", "deny": [UNCLASSIFIED]}),
        )),
    );
    assert_eq!(
        (status, v["error"].as_str()),
        (400, Some(&*format!("unknown tool in deny: {UNCLASSIFIED}")))
    );
    assert_eq!(d.call("GET", "/attach", None).1["grants"], json!([]));

    // owner with a deny: the denied tool is gone, the unclassified one is still there (and
    // the grant says so: what it lends is what tools/list gives, §25), and owner counts as
    // shell.
    let (id, mut conn) = d.attached_with(
        &pod,
        body(
            &pod,
            "own",
            json!({"profile": "owner", "deny": ["bash", "browser_evaluate"]}),
        ),
    );
    let g = d.grant(&id);
    assert_eq!(g["shell"], "yes");
    assert_eq!(g["shell_because"], "mouse is a shell tool");
    let listed = listed_with_upstream(&mut conn);
    // Read again now that the upstream's list is known.
    let lent = strings(&d.grant(&id)["tools"]);
    assert_eq!(lent, listed, "the grant names what it lends");
    assert!(lent.iter().any(|t| t == UNCLASSIFIED), "{lent:?}");
    assert!(listed.iter().any(|n| n == UNCLASSIFIED), "{listed:?}");
    assert!(
        !listed
            .iter()
            .any(|n| n == "bash" || n == "browser_evaluate"),
        "{listed:?}"
    );
    assert_unknown_tool(&conn.call_tool(json!(1), "bash", json!({})), "bash");
    assert_unknown_tool(
        &conn.call_tool(json!(2), "browser_evaluate", json!({})),
        "browser_evaluate",
    );
    let ran = conn.call_tool(json!(3), UNCLASSIFIED, json!({}));
    assert_eq!(
        ran["result"]["content"][0]["text"],
        format!("upstream ran {UNCLASSIFIED}")
    );

    // A custom grant of every pattern still never lists it.
    let pod2 = StubPod::start();
    let (_, mut conn) = d.attached_with(
        &pod2,
        body(&pod2, "all", json!({"profile": "custom", "allow": ["*"]})),
    );
    let listed = listed_with_upstream(&mut conn);
    assert!(!listed.iter().any(|n| n == UNCLASSIFIED), "{listed:?}");
    assert_unknown_tool(
        &conn.call_tool(json!(1), UNCLASSIFIED, json!({})),
        UNCLASSIFIED,
    );
}

#[test]
fn deny_subtracts_from_any_profile_and_the_check_follows() {
    let pod = StubPod::start();
    let d = TestDaemon::with("custom-deny", quiet_liveness);
    // desktop without its shell tools does not reach a shell. Which tools those are, and
    // what is left, comes from the registry.
    let (shell, rest): (Vec<&str>, Vec<&str>) = tools::allowed(Profile::Desktop)
        .map(|t| t.name)
        .partition(|name| tools::class_of(name) == Some(Class::Shell));
    assert!(!shell.is_empty() && !rest.is_empty(), "{shell:?} {rest:?}");
    let (id, mut conn) = d.attached_with(
        &pod,
        body(&pod, "tame", json!({"profile": "desktop", "deny": shell})),
    );
    let g = d.grant(&id);
    assert_eq!(g["shell"], "no");
    assert!(g.get("shell_because").is_none(), "{g}");
    let listed = names(&conn.request(json!(1), "tools/list", json!({})));
    assert_eq!(listed, rest);
    for name in shell {
        assert_unknown_tool(&conn.call_tool(json!(name), name, json!({})), name);
    }
    // Plain profiles say what they are.
    let pod2 = StubPod::start();
    let (id2, _c) = d.attached(&pod2, "obs", "observe");
    let g = d.grant(&id2);
    assert_eq!(
        (g["shell"].as_str(), g["allow"].clone(), g["deny"].clone()),
        (Some("no"), json!([]), json!([]))
    );
    assert_eq!(strings(&g["tools"]), tools::names(Profile::Observe));
    let pod3 = StubPod::start();
    let (id3, _c) = d.attached(&pod3, "desk", "desktop");
    let g = d.grant(&id3);
    assert_eq!(
        (g["shell"].as_str(), g["shell_because"].as_str()),
        (Some("yes"), Some("bash is a shell tool"))
    );
}

#[test]
fn every_rule_answers_its_400_naming_the_value_and_changes_nothing() {
    let pod = StubPod::start();
    let d = TestDaemon::with("custom-400", quiet_liveness);
    let long = "b".repeat(MAX_TOOL_NAME_BYTES + 1);
    let cases: Vec<(Value, String)> = vec![
        (
            json!({"allow": ["sys_info"]}),
            ALLOW_NEEDS_CUSTOM_ERROR.into(),
        ),
        (
            json!({"profile": "desktop", "allow": ["sys_info"]}),
            ALLOW_NEEDS_CUSTOM_ERROR.into(),
        ),
        (
            json!({"profile": "custom"}),
            CUSTOM_NEEDS_ALLOW_ERROR.into(),
        ),
        (
            json!({"profile": "custom", "allow": []}),
            CUSTOM_NEEDS_ALLOW_ERROR.into(),
        ),
        (
            json!({"profile": "custom", "allow": ["sys_info", "rm_rf"]}),
            "unknown tool in allow: rm_rf".into(),
        ),
        (
            json!({"profile": "custom", "allow": ["sys_info"], "deny": ["nope*"]}),
            "unknown tool in deny: nope*".into(),
        ),
        (
            json!({"profile": "observe", "deny": ["bash*", "Bash"]}),
            "unknown tool in deny: Bash".into(),
        ),
        (
            json!({"profile": "observe", "deny": tools::names(Profile::Observe)}),
            NO_TOOLS_ERROR.into(),
        ),
        (
            json!({"profile": "custom", "allow": ["bash"], "deny": ["*"]}),
            NO_TOOLS_ERROR.into(),
        ),
        (
            json!({"profile": "custom", "allow": "sys_info"}),
            "allow must be a list of tool names".into(),
        ),
        (
            json!({"profile": "custom", "allow": ["sys_info", null]}),
            "allow must be a list of tool names".into(),
        ),
        (
            json!({"deny": 5}),
            "deny must be a list of tool names".into(),
        ),
        (
            json!({"profile": "custom", "allow": vec!["sys_info"; MAX_LIST_NAMES + 1]}),
            format!(
                "allow holds {} names; at most {MAX_LIST_NAMES}",
                MAX_LIST_NAMES + 1
            ),
        ),
        (
            json!({"deny": vec!["bash"; MAX_LIST_NAMES + 1]}),
            format!(
                "deny holds {} names; at most {MAX_LIST_NAMES}",
                MAX_LIST_NAMES + 1
            ),
        ),
        (
            json!({"profile": "custom", "allow": [long]}),
            format!(
                "allow names a tool longer than {MAX_TOOL_NAME_BYTES} bytes: {}…",
                &long[..MAX_TOOL_NAME_BYTES]
            ),
        ),
        (json!({"profile": "sandbox"}), profile_error().into()),
        (
            json!({"profile": "Custom", "allow": ["sys_info"]}),
            profile_error().into(),
        ),
    ];
    for (extra, want) in cases {
        let (status, v) = d.call("POST", "/attach", Some(&body(&pod, "s", extra.clone())));
        assert_eq!(
            (status, v["error"].as_str()),
            (400, Some(want.as_str())),
            "{extra}"
        );
    }
    assert_eq!(
        profile_error(),
        "profile must be one of owner, desktop, observe, browser, files, apps, custom"
    );
    // Nothing was created, dialled or written.
    assert_eq!(d.call("GET", "/attach", None).1["grants"], json!([]));
    pod.assert_no_upgrade(Duration::from_millis(200));
    // At the bounds it is accepted.
    let at = json!({"profile": "custom", "allow": vec!["sys_info"; MAX_LIST_NAMES]});
    let g = d.attach(body(&pod, "s", at));
    assert_eq!(strings(&g["tools"]), ["sys_info"]);
    assert_eq!(
        g["allow"].as_array().unwrap().len(),
        MAX_LIST_NAMES,
        "kept as given"
    );
}

#[test]
fn a_renew_needs_the_same_lists_else_it_replaces() {
    let pod = StubPod::start();
    let d = TestDaemon::with("custom-renew", quiet_liveness);
    let first = json!({"profile": "custom", "allow": ["sys_info", "screenshot"]});
    let (id, mut conn) = d.attached_with(&pod, body(&pod, "s", first));
    // The same names in another order, repeated: the same lists, so a renew.
    let same = d.attach(body(
        &pod,
        "s",
        json!({"profile": "custom", "allow": ["screenshot", "sys_info", "sys_info"]}),
    ));
    assert_eq!(same["id"], id.as_str());
    assert_eq!(same["state"], "attached", "the socket stays");
    assert_eq!(conn.ping(json!("p"))["result"], json!({}));
    // A deny added: another grant.
    let other = d.attach(body(
        &pod,
        "s",
        json!({"profile": "custom", "allow": ["sys_info", "screenshot"], "deny": ["screenshot"]}),
    ));
    assert_ne!(other["id"], id.as_str());
    assert_eq!(strings(&other["tools"]), ["sys_info"]);
    assert_eq!(conn.expect_close(), 1000);
    let old = d.wait_grant(&id, "replaced", |g| g["state"] == "ended");
    assert_eq!(old["ended"], "replaced");
    // The same effective tools through other lists is a replace too.
    let (_, mut conn2) = pod.next_session();
    let new_id = other["id"].as_str().unwrap().to_string();
    d.wait_grant(&new_id, "attached", |g| g["state"] == "attached");
    let plain = d.attach(body(
        &pod,
        "s",
        json!({"profile": "custom", "allow": ["sys_info"]}),
    ));
    assert_ne!(
        plain["id"],
        new_id.as_str(),
        "allow sys_info is not allow sys_info,screenshot deny screenshot"
    );
    assert_eq!(conn2.expect_close(), 1000);
}

#[test]
fn a_restart_keeps_the_lists() {
    let dir = temp_dir("custom-restart");
    let mut config = test_config(&dir);
    quiet_liveness(&mut config);
    let pod = StubPod::start();
    let mut d = TestDaemon::start(config.clone(), dir.clone());
    let asked = json!({"profile": "custom", "allow": ["screenshot", "sys_info", "key*"],
                       "deny": ["sys_info"], "ttl_secs": 600});
    let (id, mut conn) = d.attached_with(&pod, body(&pod, "s", asked));
    let before = d.grant(&id);
    assert_eq!(strings(&before["tools"]), ["screenshot", "key"]);
    let listed = names(&conn.request(json!(1), "tools/list", json!({})));
    assert_eq!(listed, strings(&before["tools"]));
    let stored = std::fs::read_to_string(d.state_dir().join("grants.json")).unwrap();
    let stored: Value = serde_json::from_str(&stored).unwrap();
    assert_eq!(stored["grants"][0]["allow"], before["allow"]);
    assert_eq!(stored["grants"][0]["deny"], before["deny"]);
    assert_eq!(stored["grants"][0]["tools"], before["tools"]);

    d.stop();
    assert_eq!(conn.expect_close(), 1001);
    let d2 = TestDaemon::start(config, dir);
    let (_, mut conn) = pod.next_session();
    let after = d2.wait_grant(&id, "attached", |g| g["state"] == "attached");
    for field in ["profile", "allow", "deny", "approve", "tools", "shell"] {
        assert_eq!(after[field], before[field], "{field}");
    }
    assert_eq!(
        names(&conn.request(json!(2), "tools/list", json!({}))),
        listed
    );
    assert_unknown_tool(&conn.call_tool(json!(3), "sys_info", json!({})), "sys_info");
    drop(d);
}

/// A `grants.json` entry for `session` under `profile` with lists, expiring in an hour.
fn stored_entry(id: &str, pod: &StubPod, session: &str, profile: &str, lists: Value) -> Value {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs();
    let mut e = json!({"id": id, "runtime": pod.runtime(), "session": session, "profile": profile,
                       "principal": "token", "created_at": now, "expires_at": now + 3600,
                       "secret": "s3cret-attach"});
    for (k, v) in lists.as_object().unwrap() {
        e[k] = v.clone();
    }
    e
}

#[test]
fn a_stored_grant_whose_lists_changed_meaning_is_dropped_at_load_and_logged() {
    let dir = temp_dir("custom-load");
    let state = dir.join("state");
    std::fs::create_dir_all(&state).unwrap();
    let pod = StubPod::start();
    let keep = "00000000-0000-4000-8000-000000000001";
    let gone = "00000000-0000-4000-8000-000000000002";
    let wider = "00000000-0000-4000-8000-000000000003";
    let denied = "00000000-0000-4000-8000-000000000004";
    let entries = vec![
        stored_entry(
            keep,
            &pod,
            "keep",
            "custom",
            json!({"allow": ["sys_info", "screenshot"], "tools": ["sys_info", "screenshot"]}),
        ),
        // Names a tool no longer classified.
        stored_entry(
            gone,
            &pod,
            "gone",
            "custom",
            json!({"allow": ["browser_gone"], "tools": ["browser_gone"]}),
        ),
        // Its pattern would now match more than was granted: never widened.
        stored_entry(
            wider,
            &pod,
            "wider",
            "custom",
            json!({"allow": ["browser_*"], "tools": ["browser_snapshot"]}),
        ),
        stored_entry(
            denied,
            &pod,
            "denied",
            "desktop",
            json!({"deny": ["browser_gone"], "tools": []}),
        ),
    ];
    let file = json!({"version": 1, "grants": entries});
    std::fs::write(state.join("grants.json"), file.to_string()).unwrap();
    std::fs::set_permissions(
        state.join("grants.json"),
        std::os::unix::fs::PermissionsExt::from_mode(0o600),
    )
    .unwrap();
    let d = RealDaemon::start(&state, &[]);
    let (status, list) = d.call("GET", "/attach", None);
    assert_eq!(status, 200);
    let ids: Vec<&str> = list["grants"]
        .as_array()
        .unwrap()
        .iter()
        .map(|g| g["id"].as_str().unwrap())
        .collect();
    assert_eq!(ids, [keep], "{list}");
    let log = poll_until(
        || d.log_tail(),
        |log| log.matches("dropped persisted grant").count() >= 3,
        |log| format!("watchdog: the drops were not logged:\n{log}"),
    );
    for (id, why) in [
        (gone, "unknown tool in allow: browser_gone"),
        (
            wider,
            "its allow list now matches other tools than those granted",
        ),
        (denied, "unknown tool in deny: browser_gone"),
    ] {
        assert!(
            log.contains(&format!("dropped persisted grant {id}: {why}")),
            "{id}: {log}"
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn an_upstream_tool_without_a_class_is_logged_once() {
    let up = StubUpstream::start();
    let dir = temp_dir("custom-log-once");
    let url = format!("browser={}", up.url());
    let d = RealDaemon::start(
        &dir.join("state"),
        &[("--upstream", &url), ("--upstream-cache-ttl-ms", "1")],
    );
    // With a 1 ms TTL nearly every owner listing makes the upstream list its tools again.
    let mut n = 0;
    let log = poll_until(
        || {
            n += 1;
            let rq = json!({"jsonrpc": "2.0", "id": n, "method": "tools/list"});
            let (status, _) = d.call("POST", "/mcp", Some(&rq));
            assert_eq!(status, 200);
            d.log_tail()
        },
        |log| log.contains("which has no class") && up.lists.load(Ordering::SeqCst) >= 4,
        |log| format!("watchdog: no note of the unclassified tool after several listings:\n{log}"),
    );
    assert_eq!(log.matches("which has no class").count(), 1, "{log}");
    assert!(
        log.contains(&format!("offers \"{UNCLASSIFIED}\", which has no class")),
        "{log}"
    );
    drop(d);
    let _ = std::fs::remove_dir_all(&dir);
}

/// Issue 37: on a box without an upstream, what a grant says it lends (its JSON's `tools`,
/// what `handnode grant` prints) is what the pod's `tools/list` gives, profile by profile,
/// and the rest of its list is named with the reason; an `allow` naming a tool the box
/// does not have is refused, naming it, and lends nothing.
#[test]
fn without_an_upstream_a_grant_says_and_lends_only_the_box_s_own_tools() {
    let pod = StubPod::start();
    let d = TestDaemon::with("lent-bare", quiet_liveness);
    let folder = d.dir.join("lent");
    std::fs::create_dir_all(&folder).unwrap();
    // Each socket stays open: a closed one would redial into the next grant's turn.
    let mut conns = Vec::new();
    for profile in ["observe", "desktop", "owner", "files"] {
        let mut asked = body(&pod, profile, json!({ "profile": profile }));
        if profile == "files" {
            asked["folder"] = json!(folder);
        }
        let (id, mut conn) = d.attached_with(&pod, asked);
        let g = d.grant(&id);
        let listed = names(&conn.request(json!(1), "tools/list", json!({})));
        assert_eq!(strings(&g["tools"]), listed, "{profile}");
        assert!(
            !listed.iter().any(|t| t.starts_with("browser_")),
            "{listed:?}"
        );
        if matches!(profile, "desktop" | "owner") {
            let missing = strings(&g["unavailable"]);
            assert!(
                !missing.is_empty() && missing.iter().all(|t| t.starts_with("browser_")),
                "{g}"
            );
            assert_eq!(g["unavailable_because"], NO_UPSTREAM);
        } else {
            assert!(g.get("unavailable").is_none(), "{g}");
        }
        conns.push(conn);
    }

    // The CLI's summary says it too.
    let secret = d.dir.join("secret");
    std::fs::write(&secret, "s3cret-attach").unwrap();
    let runtime = pod.runtime();
    let grant = |session: &str, lists: &[&str]| {
        let mut args = vec!["grant", "--runtime", &runtime, "--session", session];
        args.extend_from_slice(lists);
        args.extend(["--secret-file", secret.to_str().unwrap()]);
        cli(&d, &args)
    };
    let (code, out, err) = grant("cli-desktop", &["--profile", "desktop"]);
    assert_eq!(code, 0, "{err}");
    let tools_line = out.lines().find(|l| l.trim_start().starts_with("tools:"));
    assert!(tools_line.is_some_and(|l| !l.contains("browser_")), "{out}");
    let (_, all) = d.call("GET", "/attach", None);
    let cli_grant = all["grants"]
        .as_array()
        .and_then(|a| a.iter().find(|g| g["session"] == "cli-desktop"))
        .unwrap_or_else(|| panic!("{all}"));
    let missing = strings(&cli_grant["unavailable"]).len();
    assert!(
        out.contains(&format!("not lent on this box: {missing} tools"))
            && out.contains(NO_UPSTREAM),
        "{out}"
    );

    let narrow =
        json!({"profile": "custom", "allow": ["sys_info", "screenshot", "browser_snapshot"]});
    let (status, reply) = d.call("POST", "/attach", Some(&body(&pod, "narrow", narrow)));
    assert_eq!(status, 400, "{reply}");
    assert_eq!(
        reply["error"],
        format!(
            "allow names tools this box does not have: browser_snapshot \
             ({NO_UPSTREAM}{BROWSER_PROFILE_HINT})"
        )
    );
    let (code, _, err) = grant(
        "narrow",
        &["--allow", "sys_info,screenshot,browser_snapshot"],
    );
    assert_ne!(code, 0);
    assert!(err.contains("does not have: browser_snapshot"), "{err}");
    let (_, all) = d.call("GET", "/attach", None);
    assert!(
        !all.to_string().contains("\"narrow\""),
        "nothing was lent: {all}"
    );
}

/// Issue 37: with an upstream, the grant JSON names the browser tools the pod gets from
/// it, no more (a tool of the list the upstream does not offer is named as unavailable,
/// and why), and follows the upstream when it goes away.
#[test]
fn with_an_upstream_a_grant_says_the_browser_tools_the_pod_gets() {
    let up = StubUpstream::start();
    let pod = StubPod::start();
    let d = daemon("lent-upstream", &up);
    let cases = [
        ("desktop", json!({"profile": "desktop"})),
        ("owner", json!({"profile": "owner"})),
        (
            "custom",
            json!({"profile": "custom", "allow": ["sys_info", "browser_*"]}),
        ),
    ];
    for (session, asked) in cases {
        let (id, mut conn) = d.attached_with(&pod, body(&pod, session, asked));
        let listed = listed_with_upstream(&mut conn);
        let g = d.wait_grant(&id, "the pod's list", |g| strings(&g["tools"]) == listed);
        assert!(listed.iter().any(|t| t == "browser_snapshot"), "{listed:?}");
        assert_eq!(g["unavailable_because"], UPSTREAM_LACKS, "{g}");
        let missing = strings(&g["unavailable"]);
        assert!(missing.iter().all(|t| !listed.contains(t)), "{g}");
        if session == "custom" {
            // The verdict counts what the upstream can lend: browser_file_upload is here.
            assert_eq!(g["shell_because"], "browser_file_upload is a shell tool");
        }
    }
}
