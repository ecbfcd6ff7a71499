//! The current MCP over a grant socket (CONTRACT §20): the in-process stub pod speaks the
//! stateless revision 2026-07-28 (no `initialize`; `_meta` on every request) and, on the
//! same socket, the 2025-06-18 the pod runtime speaks today, each answered by its own rules.

mod common;

use common::*;
use serde_json::{json, Value};

/// `params` with the `_meta` every 2026-07-28 request carries (2026-07-28 basic/index
/// "Per-request protocol fields": protocolVersion and clientCapabilities are required).
fn with_meta(mut params: Value) -> Value {
    params["_meta"] = json!({
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientCapabilities": {},
        "io.modelcontextprotocol/clientInfo": {"name": "stub-pod", "version": "0"},
    });
    params
}

/// A result's stdout: the streams are in its text block, `stdout_range` says where.
fn stdout(result: &Value) -> String {
    let text = result["content"][0]["text"].as_str().unwrap_or_default();
    let range = &result["structuredContent"]["stdout_range"];
    let (a, b) = (
        range[0].as_u64().unwrap_or(0),
        range[1].as_u64().unwrap_or(0),
    );
    text.get(a as usize..b as usize)
        .unwrap_or_default()
        .to_string()
}

#[test]
fn a_stateless_2026_07_28_tools_call_over_the_grant_socket() {
    let pod = StubPod::start();
    let d = TestDaemon::new("mcp-stateless");
    let (_id, mut conn) = d.attached(&pod, "laptop", "owner");

    // No initialize first (2026-07-28 changelog 2): server/discover answers at once
    // (2026-07-28 server/discover: servers MUST implement it).
    let discover = conn.request(json!(1), "server/discover", with_meta(json!({})));
    assert_eq!(
        discover["result"]["supportedVersions"],
        json!(["2026-07-28"]),
        "{discover}"
    );
    assert_eq!(discover["result"]["resultType"], "complete", "{discover}");
    assert_eq!(discover["result"]["serverInfo"]["name"], "handnode");

    // The tools/call itself: a complete result (basic/index "ResultType") with the
    // server's name in its _meta and bash's structured output.
    let call = conn.request(
        json!(2),
        "tools/call",
        with_meta(json!({"name": "bash", "arguments": {"command": "echo hi"}})),
    );
    let result = &call["result"];
    assert_eq!(result["resultType"], "complete", "{call}");
    assert_eq!(stdout(result), "hi\n", "{call}");
    assert_eq!(result["isError"], false, "{call}");
    assert_eq!(
        result["_meta"]["io.modelcontextprotocol/serverInfo"]["name"], "handnode",
        "{call}"
    );

    // 2026-07-28 server/tools "Error Handling": bad arguments are a tool error.
    let bad = conn.request(
        json!(3),
        "tools/call",
        with_meta(json!({"name": "bash", "arguments": {"command": "true", "timeout_secs": -1}})),
    );
    assert_eq!(bad["result"]["isError"], true, "{bad}");
    assert_eq!(bad["result"]["resultType"], "complete", "{bad}");

    // basic/index: a request missing clientCapabilities is malformed, -32602.
    let mut params = with_meta(json!({"name": "bash", "arguments": {"command": "true"}}));
    params["_meta"]
        .as_object_mut()
        .unwrap()
        .remove("io.modelcontextprotocol/clientCapabilities");
    let missing = conn.request(json!(4), "tools/call", params);
    assert_eq!(missing["error"]["code"], -32602, "{missing}");

    // basic/versioning: an unknown version is -32022 naming what is supported.
    let mut params = with_meta(json!({}));
    params["_meta"]["io.modelcontextprotocol/protocolVersion"] = json!("1900-01-01");
    let unsupported = conn.request(json!(5), "tools/list", params);
    assert_eq!(unsupported["error"]["code"], -32022, "{unsupported}");
    assert_eq!(
        unsupported["error"]["data"],
        json!({"supported": ["2026-07-28"], "requested": "1900-01-01"})
    );

    // changelog 5: ping is gone from the stateless revision.
    let ping = conn.request(json!(6), "ping", with_meta(json!({})));
    assert_eq!(ping["error"]["code"], -32601, "{ping}");
}

#[test]
fn the_pods_2025_06_18_is_answered_unchanged_beside_the_stateless_revision() {
    let pod = StubPod::start();
    let d = TestDaemon::new("mcp-dual-era");
    let (_id, mut conn) = d.attached(&pod, "laptop", "owner");
    let init = conn.initialize();
    assert_eq!(init["result"]["protocolVersion"], "2025-06-18");
    assert!(init["result"].get("resultType").is_none(), "{init}");

    // 2025-06-18 server/tools "Error Handling": bad arguments are -32602 there.
    let bad = conn.call_tool(
        json!(1),
        "bash",
        json!({"command": "true", "timeout_secs": -1}),
    );
    assert_eq!(bad["error"]["code"], -32602, "{bad}");
    let ok = conn.call_tool(json!(2), "bash", json!({"command": "echo hi"}));
    assert_eq!(stdout(&ok["result"]), "hi\n", "{ok}");
    assert!(ok["result"].get("resultType").is_none(), "{ok}");
    assert_eq!(conn.ping(json!(3))["result"], json!({}));

    // A stateless request on the same socket is served by its own revision
    // (2026-07-28 basic/versioning: a dual-era server MAY serve both eras at once).
    let modern = conn.request(
        json!(4),
        "tools/call",
        with_meta(json!({"name": "bash", "arguments": {"command": "echo hi"}})),
    );
    assert_eq!(modern["result"]["resultType"], "complete", "{modern}");
    // ... and the legacy connection is still legacy afterwards.
    let again = conn.call_tool(json!(5), "bash", json!({"timeout_secs": -1}));
    assert_eq!(again["error"]["code"], -32602, "{again}");
}

/// [`with_meta`] for a client that negotiates the tasks extension (tasks extension
/// "Capability Negotiation": per-request, in clientCapabilities.extensions).
fn with_tasks(params: Value) -> Value {
    let mut params = with_meta(params);
    params["_meta"]["io.modelcontextprotocol/clientCapabilities"] =
        json!({"extensions": {"io.modelcontextprotocol/tasks": {}}});
    params
}

#[test]
fn a_bash_call_as_a_task_is_a_job_of_the_grant_polled_and_cancelled_through_tasks() {
    let pod = StubPod::start();
    let d = TestDaemon::new("mcp-tasks");
    let (_id, mut conn) = d.attached(&pod, "laptop", "owner");

    // Tasks extension "Task Creation": resultType task, a flat Task, durably created.
    let created = conn.request(
        json!(1),
        "tools/call",
        with_tasks(json!({"name": "bash", "arguments": {"command": "echo hi; exit 3"}})),
    );
    let task = &created["result"];
    assert_eq!(task["resultType"], "task", "{created}");
    let task_id = task["taskId"].as_str().expect("taskId").to_string();
    // The task is the job (§9): bash_list of this grant shows it.
    let list = conn.call_tool(json!(2), "bash_list", json!({}));
    let jobs = list["result"]["structuredContent"]["jobs"]
        .as_array()
        .unwrap()
        .clone();
    assert!(
        jobs.iter().any(|j| j["job_id"] == task_id.as_str()),
        "{list}"
    );

    // "Task Polling": tasks/get until terminal; the result is the bash call's.
    let mut n = 10;
    let done = poll_until(
        || {
            n += 1;
            conn.request(
                json!(n),
                "tasks/get",
                with_tasks(json!({"taskId": task_id})),
            )
        },
        |r| r["result"]["status"] != "working",
        |r| format!("the task never ended: {r}"),
    );
    let r = &done["result"];
    assert_eq!(
        (&r["resultType"], &r["status"]),
        (&json!("complete"), &json!("completed")),
        "{done}"
    );
    assert_eq!(stdout(&r["result"]), "hi\n", "{done}");
    assert_eq!(r["result"]["structuredContent"]["exit_code"], 3, "{done}");
    assert_eq!(r["result"]["isError"], true, "{done}");

    // "Task Cancellation": acknowledged, and the job is killed: the task is cancelled.
    let long = conn.request(
        json!(100),
        "tools/call",
        with_tasks(json!({"name": "bash", "arguments": {"command": "sleep 60"}})),
    );
    let long_id = long["result"]["taskId"].as_str().unwrap().to_string();
    let ack = conn.request(
        json!(101),
        "tasks/cancel",
        with_tasks(json!({"taskId": long_id})),
    );
    assert_eq!(ack["result"]["resultType"], "complete", "{ack}");
    let mut n = 200;
    let cancelled = poll_until(
        || {
            n += 1;
            conn.request(
                json!(n),
                "tasks/get",
                with_tasks(json!({"taskId": long_id})),
            )
        },
        |r| r["result"]["status"] != "working",
        |r| format!("the cancelled task kept working: {r}"),
    );
    assert_eq!(cancelled["result"]["status"], "cancelled", "{cancelled}");

    // An unknown task is a JSON-RPC error; without the extension, -32021.
    let unknown = conn.request(
        json!(300),
        "tasks/get",
        with_tasks(json!({"taskId": "nope"})),
    );
    assert_eq!(unknown["error"]["code"], -32602, "{unknown}");
    let gated = conn.request(
        json!(301),
        "tasks/get",
        with_meta(json!({"taskId": task_id})),
    );
    assert_eq!(gated["error"]["code"], -32021, "{gated}");
}
