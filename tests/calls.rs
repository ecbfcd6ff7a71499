//! What runs now and stop one (contract §22) against the in-process stub pod: `GET /calls`
//! lists an inline `bash`, a call held for approval and a job with their arguments while
//! they run, and `DELETE /calls/{id}` stops each; the agent reads the lender's reason.

mod common;

use common::*;
use serde_json::{json, Value};

const STOPPED: &str = "stopped by the person who lent the box";

fn calls(d: &TestDaemon) -> Vec<Value> {
    let (status, v) = d.call("GET", "/calls", None);
    assert_eq!(status, 200, "{v}");
    v["calls"].as_array().cloned().expect("a calls array")
}

fn text_of(reply: &Value) -> &str {
    reply["result"]["content"][0]["text"].as_str().unwrap_or("")
}

fn row<'a>(rows: &'a [Value], tool: &str) -> &'a Value {
    rows.iter()
        .find(|r| r["tool"] == tool)
        .unwrap_or_else(|| panic!("no {tool} in {rows:?}"))
}

#[test]
fn a_running_bash_a_held_call_and_a_job_are_listed_and_each_is_stopped() {
    let pod = StubPod::start();
    let d = TestDaemon::with("calls-stop", quiet_liveness);
    let mut body = attach_body(&pod, "laptop", "desktop");
    body["approve"] = json!(["key"]);
    let (grant, mut conn) = d.attached_with(&pod, body);
    assert!(calls(&d).is_empty());

    let started = conn.call_tool(
        json!("j"),
        "bash_start",
        json!({"command": "sleep 300; echo never"}),
    );
    let job_id = result(&started)["structuredContent"]["job_id"]
        .as_str()
        .unwrap()
        .to_string();
    conn.send(
        &json!({"jsonrpc": "2.0", "id": "b1", "method": "tools/call",
                      "params": {"name": "bash", "arguments": {"command": "sleep 300"}}}),
    );
    conn.send(
        &json!({"jsonrpc": "2.0", "id": "k1", "method": "tools/call",
                      "params": {"name": "key", "arguments": {"keys": "ctrl+q"}}}),
    );
    // The grant thread takes b1 before k1: once k1 is held, b1 is in flight too.
    wait_pending(&d, 1);

    let rows = calls(&d);
    assert_eq!(rows.len(), 3, "{rows:?}");
    let bash = row(&rows, "bash");
    assert_eq!(bash["state"], "running", "{bash}");
    assert_eq!(bash["arguments"]["command"], "sleep 300");
    let key = row(&rows, "key");
    assert_eq!(key["state"], "waiting_approval", "{key}");
    assert_eq!(key["arguments"]["keys"], "ctrl+q");
    let job = row(&rows, "bash_start");
    assert_eq!(job["state"], "job", "{job}");
    assert_eq!(job["job_id"], job_id.as_str());
    assert_eq!(job["arguments"]["command"], "sleep 300; echo never");
    for r in &rows {
        assert_eq!(r["grant"], grant.as_str(), "{r}");
        assert!(
            r["started_at"].as_str().is_some_and(|s| s.ends_with('Z')),
            "{r}"
        );
        assert!(r["elapsed_ms"].is_u64(), "{r}");
        assert!(r["id"].is_string(), "{r}");
    }

    // `DELETE /calls/{row's id}`, and the agent's reply to request `asked` says who stopped it.
    let mut stop = |row: &Value, asked: &str| {
        let (status, v) = d.call(
            "DELETE",
            &format!("/calls/{}", row["id"].as_str().unwrap()),
            None,
        );
        assert_eq!(status, 204, "{v}");
        let reply = conn.recv();
        assert_eq!(reply["id"], asked, "{reply}");
        assert_eq!(reply["result"]["isError"], true, "{reply}");
        assert_eq!(text_of(&reply), STOPPED, "{reply}");
    };
    // The running bash: killed, and the agent is told by whom.
    stop(bash, "b1");
    // The held call: denied as the lender's decision, never run.
    stop(key, "k1");
    let (_, approvals) = d.call("GET", "/approvals", None);
    assert_eq!(approvals["approvals"], json!([]), "{approvals}");

    // The job: killed as bash_cancel KILL would, its end says why.
    let (status, v) = d.call("DELETE", &format!("/calls/{job_id}"), None);
    assert_eq!(status, 204, "{v}");
    let polled = conn.call_tool(
        json!("p"),
        "bash_poll",
        json!({"job_id": job_id, "wait_secs": 5}),
    );
    let st = &result(&polled)["structuredContent"];
    assert_eq!(st["state"], "killed", "{polled}");
    assert_eq!(st["reason"], "stopped_by_lender", "{polled}");
    assert!(
        !text_of(&polled).contains("never"),
        "the job ran on: {polled}"
    );

    assert!(calls(&d).is_empty(), "{:?}", calls(&d));
    // Stopped already, or never there: 404, nothing else changes.
    for id in [
        bash["id"].as_str().unwrap(),
        job_id.as_str(),
        "c999999",
        "nonsense",
    ] {
        let (status, v) = d.call("DELETE", &format!("/calls/{id}"), None);
        assert_eq!(status, 404, "{id}: {v}");
    }
    // The grant lives on: the next call runs.
    let ok = conn.call_tool(
        json!("after"),
        "bash",
        json!({"command": "echo still here"}),
    );
    assert!(text_of(&ok).contains("still here"), "{ok}");
    assert_eq!(d.grant(&grant)["state"], "attached");
}

#[test]
fn calls_need_the_admin_token() {
    let d = TestDaemon::with("calls-auth", |_| {});
    for (method, path) in [("GET", "/calls"), ("DELETE", "/calls/c1")] {
        let (status, _, _) = http(d.addr, method, path, &[], None);
        assert_eq!(status, 401, "{method} {path}");
    }
    let (status, _, _) = d.raw("POST", "/calls", &[], None);
    assert_eq!(status, 405);
}

#[test]
fn the_cli_lists_calls_and_jobs_and_stops_one() {
    let pod = StubPod::start();
    let d = TestDaemon::with("calls-cli", quiet_liveness);
    let (grant, mut conn) = d.attached(&pod, "laptop", "desktop");
    let (code, out, err) = cli(&d, &["calls"]);
    assert_eq!((code, out.as_str()), (0, "nothing runs now\n"), "{err}");

    let started = conn.call_tool(
        json!("j"),
        "bash_start",
        json!({"command": "echo first-line; echo second-line; exec sleep 300"}),
    );
    let job_id = result(&started)["structuredContent"]["job_id"]
        .as_str()
        .unwrap()
        .to_string();
    // The job's output is in its files once bash_poll has seen it (in one or two writes).
    let mut n = 0;
    poll_until(
        || {
            n += 1;
            conn.call_tool(
                json!(format!("p{n}")),
                "bash_poll",
                json!({"job_id": job_id, "wait_secs": 1}),
            )
        },
        |polled| text_of(polled).contains("second-line"),
        |polled| format!("watchdog: the job never wrote its lines: {polled}"),
    );
    conn.send(
        &json!({"jsonrpc": "2.0", "id": "b1", "method": "tools/call",
                      "params": {"name": "bash", "arguments": {"command": "sleep 301"}}}),
    );
    // b1 is in flight once a call sent after it is answered.
    assert_eq!(conn.ping(json!("after-b1"))["result"], json!({}));
    let rows = calls(&d);
    let bash_id = row(&rows, "bash")["id"].as_str().unwrap().to_string();

    let (code, out, err) = cli(&d, &["calls"]);
    assert_eq!(code, 0, "{err}");
    for want in [
        bash_id.as_str(),
        "sleep 301",
        "running",
        job_id.as_str(),
        "job",
        grant.as_str(),
    ] {
        assert!(out.contains(want), "{want} in:\n{out}");
    }
    let (code, out, err) = cli(&d, &["calls", "--json"]);
    assert_eq!(code, 0, "{err}");
    let listed: Value = serde_json::from_str(&out).expect("--json prints JSON");
    assert_eq!(
        listed["calls"].as_array().map(Vec::len),
        Some(2),
        "{listed}"
    );

    let (code, out, err) = cli(&d, &["jobs"]);
    assert_eq!(code, 0, "{err}");
    for want in [
        job_id.as_str(),
        "echo first-line",
        "| first-line",
        "| second-line",
    ] {
        assert!(out.contains(want), "{want} in:\n{out}");
    }
    assert!(!out.contains("sleep 301"), "jobs lists jobs only:\n{out}");

    let (code, out, err) = cli(&d, &["stop", &bash_id]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains(STOPPED), "{out}");
    let reply = conn.recv();
    assert_eq!(
        (reply["id"].clone(), text_of(&reply)),
        (json!("b1"), STOPPED),
        "{reply}"
    );
    let (code, _, err) = cli(&d, &["stop", &bash_id]);
    assert_eq!(code, 1);
    assert!(
        err.contains("nothing with id") && err.contains("handnode calls"),
        "{err}"
    );
    let (code, _, err) = cli(&d, &["stop"]);
    assert_eq!(code, 2, "{err}");
    let (code, out, err) = cli(&d, &["stop", &job_id]);
    assert_eq!(code, 0, "{out}{err}");
}
