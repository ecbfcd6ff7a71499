//! Long-running jobs (issue 14, contract §9) end to end against the in-process stub pod:
//! the four tools and their profiles, long-polls that hold no worker, `bash` past its
//! inline limit, what a job survives (a redial, a renew) and what kills it (revoke,
//! replace, deadline, a 400x close, shutdown, its timeout, bash_cancel), scopes, the
//! output window and files, limits, retention, clean-up at start, bad input, audit,
//! metrics and the grant JSON. Jobs wait on FIFOs the test opens, never on sleeps.

mod common;

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use common::*;
use serde_json::{json, Value};

/// A FIFO a job reads from; the test writes a line to let it go on.
struct Gate(PathBuf);

impl Gate {
    fn new(dir: &Path, name: &str) -> Gate {
        let path = dir.join(name);
        let status = std::process::Command::new("mkfifo")
            .arg(&path)
            .status()
            .unwrap();
        assert!(status.success(), "mkfifo");
        Gate(path)
    }

    /// `read line < FIFO` in bash.
    fn wait(&self) -> String {
        format!("read -r line < '{}'", self.0.display())
    }

    /// Let the job go on: open the FIFO for writing (blocks until the job opens it for
    /// reading) on a helper thread, under the watchdog.
    fn open(&self, line: &str) {
        let (path, line) = (self.0.clone(), format!("{line}\n"));
        let (tx, rx) = crossbeam_channel::bounded(1);
        std::thread::spawn(move || {
            let r = std::fs::OpenOptions::new()
                .write(true)
                .open(&path)
                .and_then(|mut f| std::io::Write::write_all(&mut f, line.as_bytes()));
            let _ = tx.send(r.is_ok());
        });
        assert!(
            rx.recv_timeout(WATCHDOG)
                .expect("watchdog: the job never read its gate"),
            "writing the gate failed"
        );
    }
}

/// A daemon with quiet liveness timers and the given tweaks.
fn daemon(tag: &str, tweak: impl FnOnce(&mut handnode::Config)) -> TestDaemon {
    TestDaemon::with(tag, |c| {
        quiet_liveness(c);
        tweak(c);
    })
}

/// The `result` of a tool call reply, which must not be a JSON-RPC error.
fn text(r: &Value) -> &str {
    r["content"][0]["text"].as_str().unwrap_or("")
}

/// `bash_start` → the job id.
fn start_job(conn: &mut PodConn, id: &str, command: &str) -> String {
    let reply = conn.call_tool(json!(id), "bash_start", json!({ "command": command }));
    let r = result(&reply);
    assert_eq!(r["isError"], false, "{r}");
    assert_eq!(r["structuredContent"]["state"], "running", "{r}");
    assert!(r["structuredContent"]["pid"].as_u64().unwrap() > 1, "{r}");
    assert!(text(r).contains("bash_poll"), "{r}");
    r["structuredContent"]["job_id"]
        .as_str()
        .unwrap()
        .to_string()
}

fn poll(conn: &mut PodConn, id: &str, args: Value) -> Value {
    result(&conn.call_tool(json!(id), "bash_poll", args)).clone()
}

/// Follow a job with waiting polls until it has ended (each poll answers on news, so
/// this waits on the job, not on a clock); returns the last answer, read from 0.
fn until_ended(conn: &mut PodConn, job: &str) -> Value {
    let deadline = Instant::now() + WATCHDOG;
    let (mut so, mut se) = (0u64, 0u64);
    loop {
        let r = poll(
            conn,
            "follow",
            json!({"job_id": job, "stdout_offset": so, "stderr_offset": se, "wait_secs": 5}),
        );
        let s = &r["structuredContent"];
        if s["state"] != "running" {
            return poll(
                conn,
                "final",
                json!({"job_id": job, "max_bytes": 1_048_576}),
            );
        }
        so = s["stdout_next"].as_u64().unwrap();
        se = s["stderr_next"].as_u64().unwrap();
        assert!(
            Instant::now() < deadline,
            "watchdog: job {job} never ended: {r}"
        );
    }
}

/// Wait until `pid` is gone (a zombie counts as gone: its parent is the reaper).
fn assert_dies(pid: u64) {
    poll_until(
        || std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default(),
        |stat| stat.is_empty() || stat.contains(") Z "),
        |stat| format!("watchdog: process {pid} is still alive: {stat}"),
    );
}

fn alive(pid: u64) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|s| !s.contains(") Z "))
}

/// A job that starts a grandchild, prints its pid, then waits on `gate`; returns the job
/// id, the leader's pid and the grandchild's.
fn job_with_grandchild(conn: &mut PodConn, gate: &Gate) -> (String, u64, u64) {
    let job = start_job(
        conn,
        "start",
        &format!("sleep 1000 & echo $!; {}; echo released", gate.wait()),
    );
    let r = poll(conn, "pid", json!({"job_id": job, "wait_secs": 10}));
    let s = &r["structuredContent"];
    let grandchild: u64 = s["stdout"].as_str().unwrap().trim().parse().unwrap();
    let leader = s["pid"].as_u64().unwrap();
    assert!(alive(leader) && alive(grandchild));
    (job, leader, grandchild)
}

fn record(d: &TestDaemon, grant: &str, job: &str) -> Value {
    let path = d
        .state_dir()
        .join("jobs")
        .join(grant)
        .join(format!("{job}.json"));
    serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap()
}

fn names(list: &Value) -> Vec<String> {
    list["result"]["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap().to_string())
        .collect()
}

#[test]
fn job_tools_are_listed_for_owner_and_desktop_never_observe() {
    use handnode::profiles::Profile;
    use handnode::tools::jobs::job_tools::{CANCEL, LIST, POLL, START};
    let pod = StubPod::start();
    let d = daemon("jobtools", |_| {});
    for profile in [Profile::Owner, Profile::Desktop, Profile::Observe] {
        let (_, mut conn) = d.attached(&pod, profile.as_str(), profile.as_str());
        let list = conn.request(json!(1), "tools/list", json!({}));
        let listed = names(&list);
        for tool in [&START, &POLL, &LIST, &CANCEL] {
            let name = tool.name;
            assert_eq!(
                listed.contains(&name.to_string()),
                tool.allowed_in(profile),
                "{profile} {name}"
            );
            if !tool.allowed_in(profile) {
                let r = conn.call_tool(json!(2), name, json!({"job_id": "x", "command": "id"}));
                assert_eq!(
                    r["error"]["message"],
                    format!("Invalid params: unknown tool: {name}")
                );
                continue;
            }
            let t = list["result"]["tools"]
                .as_array()
                .unwrap()
                .iter()
                .find(|t| t["name"] == name)
                .unwrap();
            assert_eq!(t["annotations"], tool.annotations().to_json(), "{name}");
            assert!(t["description"].as_str().unwrap().len() > 200, "{name}");
        }
    }
}

#[test]
fn a_waiting_poll_holds_no_worker_and_answers_the_moment_output_arrives() {
    let pod = StubPod::start();
    let d = daemon("jobwake", |c| c.workers = 1);
    let (_, mut conn) = d.attached(&pod, "laptop", "owner");
    let gate = Gate::new(&d.dir, "gate");
    let job = start_job(
        &mut conn,
        "s",
        &format!("{}; echo \"got $line\"", gate.wait()),
    );
    let asked = Instant::now();
    conn.send(&json!({"jsonrpc":"2.0","id":"p","method":"tools/call","params":{"name":"bash_poll","arguments":{"job_id": job, "wait_secs": 60}}}));
    // The only worker took the poll first; the echo can run only if the poll let it go.
    let echo = conn.call_tool(json!("b"), "bash", json!({"command": "echo free"}));
    assert_eq!(result(&echo)["structuredContent"]["stdout"], "free\n");
    gate.open("hello");
    let r = conn.recv();
    assert_eq!(r["id"], "p", "{r}");
    let s = &result(&r)["structuredContent"];
    assert_eq!(s["stdout"], "got hello\n", "{r}");
    assert_eq!(s["stdout_next"], 10);
    assert!(
        asked.elapsed() < Duration::from_secs(30),
        "answered on output, not at wait_secs"
    );
    let end = until_ended(&mut conn, &job);
    assert_eq!(end["structuredContent"]["state"], "exited");
    assert_eq!(end["structuredContent"]["exit_code"], 0);
}

#[test]
fn a_waiting_poll_is_one_call_in_flight_and_a_cancel_ends_the_wait() {
    let pod = StubPod::start();
    let d = daemon("jobinflight", |c| c.limits.max_in_flight = 2);
    let (_, mut conn) = d.attached(&pod, "laptop", "owner");
    let gate = Gate::new(&d.dir, "gate");
    let job = start_job(&mut conn, "s", &gate.wait());
    for id in ["p1", "p2"] {
        conn.send(&json!({"jsonrpc":"2.0","id": id,"method":"tools/call","params":{"name":"bash_poll","arguments":{"job_id": job, "wait_secs": 60}}}));
    }
    let refused = conn.call_tool(json!("third"), "bash_list", json!({}));
    assert_eq!(
        refused["error"]["message"], "too many requests in flight (2)",
        "{refused}"
    );
    conn.send(
        &json!({"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":"p1"}}),
    );
    // The cancelled wait freed its slot and sends nothing: the next message is this reply.
    let list = conn.call_tool(json!("after"), "bash_list", json!({}));
    assert_eq!(
        result(&list)["structuredContent"]["jobs"][0]["job_id"],
        job.as_str()
    );
    gate.open("x");
    let r = conn.recv();
    assert_eq!(r["id"], "p2", "only the live wait answers: {r}");
    assert_eq!(conn.ping(json!("ping"))["result"], json!({}));
}

#[test]
fn wait_secs_runs_out_with_nothing_new() {
    let pod = StubPod::start();
    let d = daemon("jobquiet", |_| {});
    let (_, mut conn) = d.attached(&pod, "laptop", "owner");
    let gate = Gate::new(&d.dir, "gate");
    let job = start_job(&mut conn, "s", &format!("echo hi; {}", gate.wait()));
    let first = poll(&mut conn, "p0", json!({"job_id": job, "wait_secs": 10}));
    assert_eq!(first["structuredContent"]["stdout"], "hi\n");
    let asked = Instant::now();
    let r = poll(
        &mut conn,
        "p1",
        json!({"job_id": job, "stdout_offset": 3, "wait_secs": 1}),
    );
    assert!(asked.elapsed() >= Duration::from_secs(1), "it waited");
    let s = &r["structuredContent"];
    assert_eq!(
        (s["state"].as_str(), s["stdout"].as_str()),
        (Some("running"), Some(""))
    );
    assert_eq!(
        (s["stdout_next"].as_u64(), s["stdout_total"].as_u64()),
        (Some(3), Some(3))
    );
    gate.open("x");
}

#[test]
fn a_finished_job_reports_its_exit_both_streams_and_an_offset_past_the_end() {
    let pod = StubPod::start();
    let d = daemon("jobexit", |_| {});
    let (_, mut conn) = d.attached(&pod, "laptop", "desktop");
    let job = start_job(&mut conn, "s", "echo out; printf 'a\\377b' >&2; exit 3");
    let r = until_ended(&mut conn, &job);
    let s = &r["structuredContent"];
    assert_eq!(
        (s["state"].as_str(), s["exit_code"].as_i64()),
        (Some("exited"), Some(3))
    );
    assert_eq!(
        (s["stdout"].as_str(), s["stderr"].as_str()),
        (Some("out\n"), Some("a\u{fffd}b"))
    );
    assert_eq!(
        (s["stdout_total"].as_u64(), s["stderr_total"].as_u64()),
        (Some(4), Some(3))
    );
    assert!(s.get("skipped_bytes").is_none(), "{r}");
    assert!(text(&r).contains("exited 3"), "{r}");
    let past = poll(
        &mut conn,
        "past",
        json!({"job_id": job, "stdout_offset": 100, "wait_secs": 3}),
    );
    assert_eq!(past["structuredContent"]["stdout_next"], 100);
    assert_eq!(past["structuredContent"]["stdout"], "");
    let small = poll(&mut conn, "small", json!({"job_id": job, "max_bytes": 2}));
    assert_eq!(small["structuredContent"]["stdout"], "ou");
    assert_eq!(small["structuredContent"]["stdout_next"], 2);
    // A character that max_bytes would cut is left whole for the next poll.
    let job = start_job(&mut conn, "s2", "printf 'a\\342\\202\\254b'");
    until_ended(&mut conn, &job);
    let cut = poll(&mut conn, "cut", json!({"job_id": job, "max_bytes": 3}));
    let s = &cut["structuredContent"];
    assert_eq!(
        (s["stdout"].as_str(), s["stdout_next"].as_u64()),
        (Some("a"), Some(1))
    );
    let rest = poll(
        &mut conn,
        "rest",
        json!({"job_id": job, "stdout_offset": 1}),
    );
    assert_eq!(rest["structuredContent"]["stdout"], "€b");
}

#[test]
fn bash_past_the_inline_limit_continues_as_a_job() {
    let pod = StubPod::start();
    let d = daemon("jobinline", |c| {
        c.timing.inline_wait = Duration::from_millis(300)
    });
    let (_, mut conn) = d.attached(&pod, "laptop", "owner");
    let gate = Gate::new(&d.dir, "gate");
    let reply = conn.call_tool(
        json!(1),
        "bash",
        json!({"command": format!("echo early; echo warn >&2; {}; echo late", gate.wait()), "timeout_secs": 86_400}),
    );
    let r = result(&reply);
    assert_eq!(r["isError"], false, "{r}");
    let s = &r["structuredContent"];
    let job = s["job_id"].as_str().unwrap().to_string();
    assert_eq!(
        (s["stdout"].as_str(), s["stderr"].as_str()),
        (Some("early\n"), Some("warn\n"))
    );
    assert_eq!(
        (s["stdout_next"].as_u64(), s["state"].as_str()),
        (Some(6), Some("running"))
    );
    let words =
        format!("still running after 0.3 s; continues as job {job}; read it with bash_poll");
    assert!(text(r).contains(&words), "{r}");
    gate.open("x");
    let rest = poll(
        &mut conn,
        "rest",
        json!({"job_id": job, "stdout_offset": 6, "stderr_offset": 5, "wait_secs": 10}),
    );
    assert_eq!(rest["structuredContent"]["stdout"], "late\n", "{rest}");
    let all = until_ended(&mut conn, &job);
    assert_eq!(all["structuredContent"]["stdout"], "early\nlate\n");
    assert_eq!(all["structuredContent"]["stderr"], "warn\n");
    assert_eq!(all["structuredContent"]["exit_code"], 0);

    // A call that had already dropped output past its cap: the job's file starts after it.
    let gate2 = Gate::new(&d.dir, "gate2");
    let reply = conn.call_tool(
        json!(2),
        "bash",
        json!({"command": format!("printf 0123456789; {}; printf tail", gate2.wait()), "max_output_bytes": 4, "timeout_secs": 600}),
    );
    let s = &result(&reply)["structuredContent"];
    assert_eq!(
        (s["stdout"].as_str(), s["stdout_next"].as_u64()),
        (Some("0123"), Some(10))
    );
    assert_eq!(s["stdout_truncated"], true);
    let job2 = s["job_id"].as_str().unwrap().to_string();
    gate2.open("x");
    let end = until_ended(&mut conn, &job2);
    let s = &end["structuredContent"];
    assert_eq!(
        (s["stdout"].as_str(), s["skipped_bytes"]["stdout"].as_u64()),
        (Some("tail"), Some(10))
    );

    // A command that ends before the inline limit is an ordinary call; the bound is a day.
    let quick = conn.call_tool(
        json!(3),
        "bash",
        json!({"command": "echo quick", "timeout_secs": 86_400}),
    );
    assert!(result(&quick)["structuredContent"].get("job_id").is_none());
    let over = conn.call_tool(
        json!(4),
        "bash",
        json!({"command": "true", "timeout_secs": 86_401}),
    );
    assert_eq!(over["error"]["code"], -32602, "{over}");
}

#[test]
fn a_bash_call_that_cannot_become_a_job_runs_on_inline_and_says_why() {
    let pod = StubPod::start();
    let d = daemon("jobinlinefull", |c| {
        c.timing.inline_wait = Duration::from_millis(300);
        c.limits.jobs_per_grant = 1;
    });
    let (_, mut conn) = d.attached(&pod, "laptop", "owner");
    let gate = Gate::new(&d.dir, "gate");
    let job = start_job(&mut conn, "s", &gate.wait());
    // It outlives the inline limit (300 ms) and no job can start: it is not killed.
    let reply = conn.call_tool(
        json!(1),
        "bash",
        json!({"command": "echo start; sleep 1; echo end", "timeout_secs": 3600}),
    );
    let r = result(&reply);
    assert_eq!(r["isError"], false, "{r}");
    assert_eq!(r["structuredContent"]["exit_code"], 0, "{r}");
    assert!(
        text(r).contains("could not continue as a job (too many running jobs (1) under this grant"),
        "{r}"
    );
    assert!(text(r).contains("start\nend\n"), "{r}");
    gate.open("x");
    until_ended(&mut conn, &job);
}

#[test]
fn a_job_survives_a_pod_close_1011_and_is_read_from_the_redialled_socket() {
    let pod = StubPod::start();
    let d = daemon("jobredial", |_| {});
    let (id, mut conn) = d.attached(&pod, "laptop", "owner");
    let gate = Gate::new(&d.dir, "gate");
    let (job, leader, grandchild) = job_with_grandchild(&mut conn, &gate);
    conn.close(1011);
    let (_, mut conn) = pod.next_session();
    d.wait_grant(&id, "attached again", |g| g["state"] == "attached");
    assert!(
        alive(leader) && alive(grandchild),
        "the job outlived its socket"
    );
    let list = result(&conn.call_tool(json!(1), "bash_list", json!({}))).clone();
    assert_eq!(
        list["structuredContent"]["jobs"][0]["state"], "running",
        "{list}"
    );
    gate.open("go");
    let end = until_ended(&mut conn, &job);
    assert!(
        end["structuredContent"]["stdout"]
            .as_str()
            .unwrap()
            .ends_with("released\n"),
        "{end}"
    );
    assert_eq!(end["structuredContent"]["exit_code"], 0);
}

#[test]
fn a_renew_keeps_jobs_running_and_the_grant_json_counts_them() {
    let pod = StubPod::start();
    let d = daemon("jobrenew", |_| {});
    let (id, mut conn) = d.attached(&pod, "laptop", "owner");
    let gate = Gate::new(&d.dir, "gate");
    let (job, leader, _) = job_with_grandchild(&mut conn, &gate);
    assert_eq!(d.grant(&id)["jobs"], 1);
    let renewed = d.attach(attach_body(&pod, "laptop", "owner"));
    assert_eq!(renewed["id"], id.as_str(), "a renew");
    assert_eq!(renewed["jobs"], 1);
    assert!(alive(leader));
    let r = poll(&mut conn, "after", json!({"job_id": job}));
    assert_eq!(r["structuredContent"]["state"], "running");
    gate.open("x");
    until_ended(&mut conn, &job);
    assert_eq!(d.grant(&id)["jobs"], 0);
}

#[test]
fn revoke_kills_a_jobs_grandchildren_and_records_why() {
    let pod = StubPod::start();
    let d = daemon("jobrevoke", |_| {});
    let (id, mut conn) = d.attached(&pod, "laptop", "owner");
    let gate = Gate::new(&d.dir, "gate");
    let (job, leader, grandchild) = job_with_grandchild(&mut conn, &gate);
    let (status, _) = d.call("DELETE", &format!("/attach/{id}"), None);
    assert_eq!(status, 204);
    assert_dies(grandchild);
    assert_dies(leader);
    // The audit keeps why; the files went with the grant (§15).
    let ended = |l: &str| l.contains("job_ended") && l.contains(&job);
    let audit = d.wait_audit("the job's end", |a| a.lines().any(ended));
    let line = audit.lines().find(|l| ended(l)).unwrap();
    assert!(
        line.contains("\"killed\"") && line.contains("grant_ended"),
        "{line}"
    );
    let dir = d.state_dir().join("jobs").join(&id);
    poll_until(
        || dir.exists(),
        |e| !e,
        |_| "watchdog: the revoked grant's job files stayed".into(),
    );
}

#[test]
fn replace_deadline_and_a_400x_close_end_the_grants_jobs() {
    let pod = StubPod::start();
    let d = daemon("jobends", |_| {});
    let gate = Gate::new(&d.dir, "gate");
    // Replace: the same target with another profile.
    let (old, mut conn) = d.attached(&pod, "replace", "owner");
    let (_, leader, grandchild) = job_with_grandchild(&mut conn, &gate);
    let new = d.attach(attach_body(&pod, "replace", "desktop"));
    assert_ne!(new["id"], old.as_str());
    assert_dies(grandchild);
    assert_dies(leader);
    // Held open: a dropped socket would redial, and that dial could be taken for the next grant's.
    let (_, _replacement) = pod.next_session();
    // The pod ends the grant (4010).
    let (_, mut conn) = d.attached(&pod, "podend", "owner");
    let (_, leader, grandchild) = job_with_grandchild(&mut conn, &gate);
    conn.close(4010);
    assert_dies(grandchild);
    assert_dies(leader);
    // Our own deadline.
    let mut body = attach_body(&pod, "deadline", "owner");
    body["ttl_secs"] = json!(2);
    let (id, mut conn) = d.attached_with(&pod, body);
    let (_, leader, grandchild) = job_with_grandchild(&mut conn, &gate);
    assert_eq!(conn.expect_close(), 1000);
    assert_dies(grandchild);
    assert_dies(leader);
    d.wait_grant(&id, "ended", |g| g["ended"] == "deadline");
}

#[test]
fn shutdown_kills_every_job() {
    let pod = StubPod::start();
    let mut d = daemon("jobstop", |_| {});
    let (id, mut conn) = d.attached(&pod, "laptop", "owner");
    let gate = Gate::new(&d.dir, "gate");
    let (job, leader, grandchild) = job_with_grandchild(&mut conn, &gate);
    d.stop();
    assert_dies(grandchild);
    assert_dies(leader);
    let rec = record(&d, &id, &job);
    assert_eq!(
        (rec["state"].as_str(), rec["reason"].as_str()),
        (Some("killed"), Some("daemon_stopped"))
    );
}

#[test]
fn another_grants_job_id_is_answered_exactly_like_an_unknown_one() {
    let pod = StubPod::start();
    let d = daemon("jobscope", |_| {});
    let (_, mut a) = d.attached(&pod, "alice", "owner");
    let (_, mut b) = d.attached(&pod, "bob", "owner");
    let gate = Gate::new(&d.dir, "gate");
    let job = start_job(&mut a, "s", &gate.wait());
    let unknown = "0123456789abcdef";
    for (tool, args) in [
        ("bash_poll", json!({"job_id": job})),
        ("bash_poll", json!({"job_id": job, "wait_secs": 5})),
        ("bash_cancel", json!({"job_id": job, "signal": "KILL"})),
    ] {
        let theirs = result(&b.call_tool(json!(1), tool, args.clone())).clone();
        let mut args = args;
        args["job_id"] = json!(unknown);
        let none = result(&b.call_tool(json!(1), tool, args)).clone();
        assert_eq!(theirs["isError"], true, "{theirs}");
        assert_eq!(text(&theirs), format!("unknown job_id: {job}"));
        assert_eq!(
            theirs.to_string().replace(&job, unknown),
            none.to_string(),
            "{tool}"
        );
    }
    let list = result(&b.call_tool(json!(2), "bash_list", json!({}))).clone();
    assert_eq!(list["structuredContent"]["jobs"], json!([]), "{list}");
    // The first grant's job was not touched.
    let r = poll(&mut a, "mine", json!({"job_id": job}));
    assert_eq!(r["structuredContent"]["state"], "running");
    gate.open("x");
    until_ended(&mut a, &job);
}

#[test]
fn the_owners_mcp_has_a_job_scope_of_its_own() {
    let pod = StubPod::start();
    let d = daemon("jobowner", |_| {});
    let (_, mut conn) = d.attached(&pod, "laptop", "owner");
    let mcp = |body: Value| {
        let body = body.to_string();
        let (status, _, b) = d.raw(
            "POST",
            "/mcp",
            &[
                ("Content-Type", "application/json"),
                ("Accept", "application/json"),
            ],
            Some(body.as_bytes()),
        );
        assert_eq!(status, 200);
        with_streams(serde_json::from_slice::<Value>(&b).unwrap())
    };
    let call = |id: u64, name: &str, args: Value| {
        mcp(
            json!({"jsonrpc":"2.0","id": id,"method":"tools/call","params":{"name": name,"arguments": args}}),
        )
    };
    let started = call(1, "bash_start", json!({"command": "echo owner"}));
    let owner_job = started["result"]["structuredContent"]["job_id"]
        .as_str()
        .unwrap()
        .to_string();
    let grant_job = start_job(&mut conn, "g", "echo grant");
    let r = result(&conn.call_tool(json!(1), "bash_poll", json!({"job_id": owner_job}))).clone();
    assert_eq!(text(&r), format!("unknown job_id: {owner_job}"));
    let r = call(2, "bash_poll", json!({"job_id": grant_job}));
    assert_eq!(text(&r["result"]), format!("unknown job_id: {grant_job}"));
    let r = call(
        3,
        "bash_poll",
        json!({"job_id": owner_job, "wait_secs": 10}),
    );
    assert_eq!(r["result"]["structuredContent"]["stdout"], "owner\n", "{r}");
    let listed = call(4, "bash_list", json!({}));
    let jobs = listed["result"]["structuredContent"]["jobs"]
        .as_array()
        .unwrap()
        .clone();
    assert_eq!(jobs.len(), 1);
    assert_eq!(jobs[0]["job_id"], owner_job.as_str());
    assert!(d
        .state_dir()
        .join("jobs/owner")
        .join(format!("{owner_job}.out"))
        .exists());
}

#[test]
fn bash_on_the_owners_mcp_continues_as_a_job_after_its_own_inline_limit() {
    let d = daemon("jobmcpinline", |c| {
        c.timing.mcp_inline_wait = Duration::from_millis(300)
    });
    let gate = Gate::new(&d.dir, "gate");
    let body = json!({"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"bash","arguments":{"command": format!("echo mcp; {}", gate.wait()), "timeout_secs": 3600}}}).to_string();
    let (status, _, b) = d.raw(
        "POST",
        "/mcp",
        &[
            ("Content-Type", "application/json"),
            ("Accept", "application/json"),
        ],
        Some(body.as_bytes()),
    );
    assert_eq!(status, 200);
    let r: Value = with_streams(serde_json::from_slice(&b).unwrap());
    let s = &r["result"]["structuredContent"];
    assert_eq!(r["result"]["isError"], false, "{r}");
    assert_eq!(
        (s["stdout"].as_str(), s["state"].as_str()),
        (Some("mcp\n"), Some("running"))
    );
    let job = s["job_id"].as_str().unwrap();
    assert!(d
        .state_dir()
        .join("jobs/owner")
        .join(format!("{job}.out"))
        .exists());
    gate.open("x");
}

#[test]
fn job_files_are_private_and_the_window_drops_the_oldest_bytes() {
    let pod = StubPod::start();
    let d = daemon("jobwindow", |c| c.limits.job_output_bytes = 1000);
    let (id, mut conn) = d.attached(&pod, "laptop", "owner");
    // 250 lines of 10 bytes: 2500 bytes through a 1000-byte window.
    let job = start_job(
        &mut conn,
        "s",
        "for i in $(seq 0 249); do printf '%09d\\n' $i; done",
    );
    let end = until_ended(&mut conn, &job);
    let s = &end["structuredContent"];
    assert_eq!(s["stdout_total"], 2500);
    assert_eq!(s["skipped_bytes"]["stdout"], 1500, "{end}");
    assert_eq!(s["skipped_bytes"]["stderr"], 0);
    assert!(
        s["stdout"].as_str().unwrap().starts_with("000000150\n"),
        "{end}"
    );
    assert_eq!(
        (
            s["stdout_next"].as_u64(),
            s["stdout"].as_str().unwrap().len()
        ),
        (Some(2500), 1000)
    );
    assert!(
        text(&end).contains("1500 bytes of stdout before offset 1500 had already been dropped"),
        "{end}"
    );
    let mid = poll(
        &mut conn,
        "mid",
        json!({"job_id": job, "stdout_offset": 2000, "max_bytes": 10}),
    );
    assert_eq!(mid["structuredContent"]["stdout"], "000000200\n");
    assert!(mid["structuredContent"].get("skipped_bytes").is_none());
    let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
    let dir = d.state_dir().join("jobs").join(&id);
    assert_eq!(
        (mode(&d.state_dir().join("jobs")), mode(&dir)),
        (0o700, 0o700)
    );
    for ext in ["out", "err", "json"] {
        let file = dir.join(format!("{job}.{ext}"));
        assert_eq!(mode(&file), 0o600, "{ext}");
        assert!(
            std::fs::metadata(&file).unwrap().len() <= 1032,
            "{ext} stays within its window"
        );
    }
}

#[test]
fn the_job_limits_and_the_disk_cap_refuse_one_more_and_say_what_to_do() {
    let pod = StubPod::start();
    let d = daemon("joblimits", |c| {
        c.limits.jobs_per_grant = 2;
        c.limits.job_output_bytes = 1000;
        c.limits.job_disk_bytes = 5000;
        c.limits.job_disk_share = Some(5000);
    });
    let (_, mut conn) = d.attached(&pod, "laptop", "owner");
    let gate = Gate::new(&d.dir, "gate");
    let a = start_job(&mut conn, "a", &gate.wait());
    let b = start_job(&mut conn, "b", &gate.wait());
    let third =
        result(&conn.call_tool(json!("c"), "bash_start", json!({"command": "true"}))).clone();
    assert_eq!(third["isError"], true);
    assert_eq!(
        text(&third),
        "too many running jobs (2) under this grant; cancel one or wait"
    );
    // Over the disk cap in another grant: 2 × 2064 reserved of 5000 (a header and a
    // headroom of one window per stream, as the window is under 1 MiB).
    let (_, mut other) = d.attached(&pod, "other", "owner");
    let refused =
        result(&other.call_tool(json!("d"), "bash_start", json!({"command": "true"}))).clone();
    assert_eq!(refused["isError"], true);
    for needle in ["needs 2064 bytes", "--job-disk-bytes", "bash_cancel"] {
        assert!(text(&refused).contains(needle), "{needle}: {refused}");
    }
    assert!(
        result(&other.call_tool(json!("l"), "bash_list", json!({})))["structuredContent"]["jobs"]
            .as_array()
            .unwrap()
            .is_empty(),
        "a refused start leaves nothing"
    );
    for job in [&a, &b] {
        let r = result(&conn.call_tool(
            json!("k"),
            "bash_cancel",
            json!({"job_id": job, "signal": "KILL"}),
        ))
        .clone();
        assert_eq!(r["isError"], false, "{r}");
        until_ended(&mut conn, job);
    }
    start_job(&mut other, "e", "true");
}

#[test]
fn cancel_sends_term_then_kill_after_the_grace_or_kill_at_once() {
    let pod = StubPod::start();
    let d = daemon("jobcancel", |c| {
        c.timing.job_kill_grace = Duration::from_millis(300)
    });
    let (_, mut conn) = d.attached(&pod, "laptop", "owner");
    // Obeys TERM.
    let job = start_job(&mut conn, "a", "exec sleep 1000");
    let r = result(&conn.call_tool(json!(1), "bash_cancel", json!({"job_id": job}))).clone();
    assert_eq!(r["structuredContent"]["signal"], "TERM");
    let s = until_ended(&mut conn, &job)["structuredContent"].clone();
    assert_eq!(
        (
            s["state"].as_str(),
            s["reason"].as_str(),
            s["exit_code"].as_i64()
        ),
        (Some("killed"), Some("cancelled"), Some(143))
    );
    // Ignores TERM: KILL follows after the grace.
    let job = start_job(
        &mut conn,
        "b",
        "trap '' TERM; echo ready; sleep 1000; sleep 1000",
    );
    poll(&mut conn, "ready", json!({"job_id": job, "wait_secs": 10}));
    let sent = Instant::now();
    result(&conn.call_tool(
        json!(2),
        "bash_cancel",
        json!({"job_id": job, "signal": "TERM"}),
    ));
    let s = until_ended(&mut conn, &job)["structuredContent"].clone();
    assert!(
        sent.elapsed() >= Duration::from_millis(300),
        "KILL waited for the grace"
    );
    assert_eq!(
        (s["reason"].as_str(), s["exit_code"].as_i64()),
        (Some("cancelled"), Some(137))
    );
    // KILL at once; a second cancel of an ended job changes nothing.
    let job = start_job(&mut conn, "c", "trap '' TERM; sleep 1000");
    result(&conn.call_tool(
        json!(3),
        "bash_cancel",
        json!({"job_id": job, "signal": "KILL"}),
    ));
    until_ended(&mut conn, &job);
    let again = result(&conn.call_tool(json!(4), "bash_cancel", json!({"job_id": job}))).clone();
    assert!(text(&again).contains("had already ended"), "{again}");
    assert_eq!(again["isError"], false);
}

#[test]
fn a_jobs_own_timeout_kills_it() {
    let pod = StubPod::start();
    let d = daemon("jobtimeout", |_| {});
    let (_, mut conn) = d.attached(&pod, "laptop", "owner");
    let r = conn.call_tool(
        json!(1),
        "bash_start",
        json!({"command": "sleep 1000", "timeout_secs": 1}),
    );
    let job = result(&r)["structuredContent"]["job_id"]
        .as_str()
        .unwrap()
        .to_string();
    let s = until_ended(&mut conn, &job)["structuredContent"].clone();
    assert_eq!(
        (
            s["state"].as_str(),
            s["reason"].as_str(),
            s["exit_code"].as_i64()
        ),
        (Some("killed"), Some("timeout"), Some(137))
    );
}

#[test]
fn finished_jobs_and_an_ended_grants_files_are_removed_after_their_retention() {
    let pod = StubPod::start();
    let d = daemon("jobretain", |c| {
        c.timing.job_retention = Duration::from_millis(300);
    });
    let (id, mut conn) = d.attached(&pod, "laptop", "owner");
    let job = start_job(&mut conn, "s", "echo bye");
    until_ended(&mut conn, &job);
    let dir = d.state_dir().join("jobs").join(&id);
    let out = dir.join(format!("{job}.out"));
    poll_until(
        || {
            (
                out.exists(),
                result(&conn.call_tool(json!("l"), "bash_list", json!({})))["structuredContent"]
                    ["jobs"]
                    .clone(),
            )
        },
        |(exists, jobs)| !exists && jobs == &json!([]),
        |now| format!("watchdog: the finished job stayed: {now:?}"),
    );
    let r = result(&conn.call_tool(json!("p"), "bash_poll", json!({"job_id": job}))).clone();
    assert_eq!(text(&r), format!("unknown job_id: {job}"));
    // A grant that ends takes all its files with it, at once.
    let gate = Gate::new(&d.dir, "gate");
    start_job(&mut conn, "s2", &gate.wait());
    assert!(dir.exists());
    d.call("DELETE", &format!("/attach/{id}"), None);
    poll_until(
        || dir.exists(),
        |e| !e,
        |_| "watchdog: the ended grant's job dir stayed".into(),
    );
}

#[test]
fn files_left_by_a_crash_are_removed_at_start() {
    let dir = temp_dir("jobjunk");
    let jobs = dir.join("state/jobs");
    let grant = jobs.join("0000000a-aaaa-4bbb-8ccc-dddddddddddd");
    std::fs::create_dir_all(&grant).unwrap();
    std::fs::create_dir_all(jobs.join("not-a-scope")).unwrap();
    std::fs::write(grant.join("0123456789abcdef.out"), b"half written").unwrap();
    std::fs::write(grant.join("0123456789abcdef.json"), b"{\"v\":1,").unwrap();
    std::fs::write(grant.join("stray.tmp"), b"x").unwrap();
    let d = TestDaemon::start(test_config(&dir), dir.clone());
    assert!(!jobs.join("not-a-scope").exists());
    let left: Vec<_> = std::fs::read_dir(&grant)
        .map(|d| d.count())
        .into_iter()
        .collect();
    assert!(left.is_empty() || left == [0], "{left:?}");
    drop(d);
}

#[test]
fn bad_input_is_invalid_params_naming_the_field_and_changes_nothing() {
    let pod = StubPod::start();
    let d = daemon("jobbad", |_| {});
    let (id, mut conn) = d.attached(&pod, "laptop", "owner");
    let job = start_job(&mut conn, "s", "echo x");
    // Ended first: its end rewrites its record (through a temporary file), which would
    // count as a file created.
    until_ended(&mut conn, &job);
    let cases = [
        ("bash_start", json!({}), "command is required"),
        (
            "bash_start",
            json!({"command": 5}),
            "command must be a string",
        ),
        (
            "bash_start",
            json!({"command": "x", "timeout_secs": 86_401}),
            "timeout_secs must be",
        ),
        (
            "bash_start",
            json!({"command": "x", "timeout_secs": -1}),
            "timeout_secs must be",
        ),
        (
            "bash_start",
            json!({"command": "x", "env": {"A": 1}}),
            "env.A must be a string",
        ),
        ("bash_poll", json!({}), "job_id is required"),
        ("bash_poll", json!({"job_id": 7}), "job_id must be a string"),
        (
            "bash_poll",
            json!({"job_id": job, "stdout_offset": -1}),
            "stdout_offset must be",
        ),
        (
            "bash_poll",
            json!({"job_id": job, "stderr_offset": -1}),
            "stderr_offset must be",
        ),
        (
            "bash_poll",
            json!({"job_id": job, "max_bytes": 0}),
            "max_bytes must be",
        ),
        (
            "bash_poll",
            json!({"job_id": job, "max_bytes": 1_048_577}),
            "max_bytes must be",
        ),
        (
            "bash_poll",
            json!({"job_id": job, "wait_secs": 101}),
            "wait_secs must be",
        ),
        ("bash_cancel", json!({}), "job_id is required"),
        (
            "bash_cancel",
            json!({"job_id": ["x"]}),
            "job_id must be a string",
        ),
        (
            "bash_cancel",
            json!({"job_id": job, "signal": "HUP"}),
            "signal must be",
        ),
        (
            "bash_cancel",
            json!({"job_id": job, "signal": 9}),
            "signal must be",
        ),
    ];
    let files = || {
        std::fs::read_dir(d.state_dir().join("jobs").join(&id))
            .unwrap()
            .count()
    };
    let before = files();
    for (i, (tool, args, want)) in cases.iter().enumerate() {
        let r = conn.call_tool(json!(i), tool, args.clone());
        assert_eq!(r["error"]["code"], -32602, "{tool} {args}: {r}");
        let msg = r["error"]["message"].as_str().unwrap();
        assert!(
            msg.starts_with(&format!("Invalid params: {want}")),
            "{tool} {args}: {msg}"
        );
    }
    assert_eq!(files(), before, "nothing was created");
    let list = result(&conn.call_tool(json!("l"), "bash_list", json!({}))).clone();
    assert_eq!(
        list["structuredContent"]["jobs"].as_array().unwrap().len(),
        1
    );
    let bad_cwd = result(&conn.call_tool(
        json!("c"),
        "bash_start",
        json!({"command": "x", "cwd": "/nonexistent/handnode"}),
    ))
    .clone();
    assert_eq!(bad_cwd["isError"], true);
    assert!(text(&bad_cwd).contains("does not exist"), "{bad_cwd}");
    assert_eq!(files(), before, "a bad cwd creates nothing either");
}

#[test]
fn jobs_are_audited_and_counted_in_metrics() {
    let pod = StubPod::start();
    let d = daemon("jobaudit", |_| {});
    let (id, mut conn) = d.attached(&pod, "laptop", "owner");
    let gate = Gate::new(&d.dir, "gate");
    let job = start_job(
        &mut conn,
        "s",
        &format!("echo secret-command-text; {}", gate.wait()),
    );
    let metrics = || {
        let (_, _, body) = d.raw("GET", "/metrics", &[], None);
        String::from_utf8(body).unwrap()
    };
    let m = metrics();
    assert!(
        m.contains("handnode_jobs_running 1\n") && m.contains("handnode_jobs_started_total 1\n"),
        "{m}"
    );
    // Cancel only once the line is out, so the recorded byte count is the line's.
    let out = poll(&mut conn, "p", json!({"job_id": job, "wait_secs": 10}));
    assert_eq!(
        out["structuredContent"]["stdout"], "secret-command-text\n",
        "{out}"
    );
    result(&conn.call_tool(
        json!(1),
        "bash_cancel",
        json!({"job_id": job, "signal": "KILL"}),
    ));
    until_ended(&mut conn, &job);
    let m = metrics();
    assert!(m.contains("handnode_jobs_running 0\n"), "{m}");
    assert!(
        m.contains("handnode_jobs_ended_total{state=\"killed\"} 1\n"),
        "{m}"
    );
    let audit = d.wait_audit("job_ended", |a| a.contains("\"job_ended\""));
    let lines: Vec<Value> = audit
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let started = lines.iter().find(|l| l["kind"] == "job_started").unwrap();
    assert_eq!(
        (started["grant_id"].as_str(), started["job_id"].as_str()),
        (Some(id.as_str()), Some(job.as_str()))
    );
    assert_eq!(started["session"], "laptop");
    assert!(
        started.get("command").is_none(),
        "no command without --audit-args"
    );
    let ended = lines.iter().find(|l| l["kind"] == "job_ended").unwrap();
    assert_eq!(
        (ended["state"].as_str(), ended["reason"].as_str()),
        (Some("killed"), Some("cancelled"))
    );
    assert_eq!(ended["exit_code"], 137);
    assert_eq!(
        ended["bytes"], 20,
        "the bytes of secret-command-text and its newline"
    );
    assert!(ended["duration_ms"].is_u64());
    assert!(!audit.contains("secret-command-text"));
}

/// Disk blocks the files under `dir` really use (bytes).
fn allocated_under(dir: &Path) -> u64 {
    use std::os::unix::fs::MetadataExt;
    std::fs::read_dir(dir)
        .map(|entries| {
            entries
                .flatten()
                .filter_map(|e| e.metadata().ok())
                .map(|m| m.blocks() * 512)
                .sum()
        })
        .unwrap_or(0)
}

#[test]
fn one_grant_filling_its_disk_share_leaves_the_others_their_jobs() {
    // The production sizes (16 MiB windows, 256 MiB in all, a quarter per grant); only
    // the inline limit is short.
    let pod = StubPod::start();
    let d = daemon("jobshares", |c| {
        c.timing.inline_wait = Duration::from_millis(300);
        c.timing.mcp_inline_wait = Duration::from_millis(300);
    });
    let limits = handnode::config::Limits::default();
    let share = limits.job_disk_share();
    assert_eq!(share, limits.job_disk_bytes / 4);
    let (b_id, mut b) = d.attached(&pod, "greedy-b", "owner");
    let (_, mut c) = d.attached(&pod, "other-c", "owner");
    // Grant B: 7 idle jobs and 8 that write 16 MiB to each stream.
    for i in 0..7 {
        start_job(&mut b, &format!("idle{i}"), "sleep 600");
    }
    // Each writer waits on its gate, so all 15 start before any file grows.
    let gates: Vec<Gate> = (0..8)
        .map(|i| Gate::new(&d.dir, &format!("w{i}")))
        .collect();
    let writers: Vec<String> = gates
        .iter()
        .enumerate()
        .map(|(i, gate)| {
            start_job(
                &mut b,
                &format!("w{i}"),
                &format!(
                    "{}; yes | head -c 16777216; yes | head -c 16777216 >&2",
                    gate.wait()
                ),
            )
        })
        .collect();
    for gate in &gates {
        gate.open("go");
    }
    for job in &writers {
        let end = until_ended(&mut b, job);
        assert_eq!(end["structuredContent"]["exit_code"], 0, "{end}");
    }
    let b_dir = d.state_dir().join("jobs").join(&b_id);
    let used = allocated_under(&b_dir);
    assert!(
        used <= share + (1 << 20),
        "grant B's files use {used} bytes, past its share of {share}"
    );
    // B is at its share: one more job of its own is refused, saying whose share is full.
    let r = result(&b.call_tool(json!("more"), "bash_start", json!({"command": "true"}))).clone();
    assert_eq!(r["isError"], true, "{r}");
    assert!(text(&r).contains("this grant's share"), "{r}");
    // A bash of B's that cannot become a job runs on inline to its end.
    let r = result(&b.call_tool(
        json!("inline"),
        "bash",
        json!({"command": "sleep 1; echo fine", "timeout_secs": 30}),
    ))
    .clone();
    assert_eq!(r["structuredContent"]["exit_code"], 0, "{r}");
    assert!(text(&r).contains("could not continue as a job"), "{r}");
    // Grant C still starts jobs, and its 1 s bash outlives the inline limit, continues as
    // a job and exits 0.
    let cj = start_job(&mut c, "c1", "echo c");
    assert_eq!(
        until_ended(&mut c, &cj)["structuredContent"]["exit_code"],
        0
    );
    let r = result(&c.call_tool(
        json!("c2"),
        "bash",
        json!({"command": "sleep 1; echo slow", "timeout_secs": 30}),
    ))
    .clone();
    assert_eq!(r["isError"], false, "{r}");
    let slow = r["structuredContent"]["job_id"]
        .as_str()
        .unwrap_or_else(|| panic!("continued as a job: {r}"))
        .to_string();
    let end = until_ended(&mut c, &slow);
    assert_eq!(end["structuredContent"]["exit_code"], 0, "{end}");
    // The owner's /mcp too.
    let body = json!({"jsonrpc":"2.0","id":1,"method":"tools/call",
                      "params":{"name":"bash_start","arguments":{"command":"echo owner"}}})
    .to_string();
    let (status, _, answer) = d.raw(
        "POST",
        "/mcp",
        &[
            ("Content-Type", "application/json"),
            ("Accept", "application/json"),
        ],
        Some(body.as_bytes()),
    );
    assert_eq!(status, 200);
    let answer: Value = serde_json::from_slice(&answer).unwrap();
    assert_eq!(answer["result"]["isError"], false, "{answer}");
    // B's revoke takes all its files within a second.
    let revoked = Instant::now();
    assert_eq!(d.call("DELETE", &format!("/attach/{b_id}"), None).0, 204);
    poll_until(
        || b_dir.exists(),
        |exists| !exists,
        |_| "watchdog: the revoked grant's job files stayed".into(),
    );
    assert!(
        revoked.elapsed() < Duration::from_secs(1),
        "B's files went after {:?}",
        revoked.elapsed()
    );
}
