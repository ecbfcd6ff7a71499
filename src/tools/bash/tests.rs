//! Unit tests of `tools::bash`.

use super::*;
use crate::base::secret::Secret;
use crate::pool::{CallCtl, Pool};
use crate::tools::testutil::*;
use crate::tools::{CallLimits, ToolConfig};
use std::io::BufRead;
use std::sync::Arc;

fn call_with(
    host: &Arc<super::super::ToolHost>,
    limits: CallLimits,
    ctl: Arc<CallCtl>,
    args: Value,
) -> ToolOutput {
    let (done, rx) = completion();
    start(args, cx(host, limits, ctl), done);
    rx.recv_timeout(WATCHDOG).expect("bash call finished")
}

fn call(args: Value) -> Value {
    result(call_with(&host(), CallLimits::GRANT, CallCtl::new(), args))
}

/// The result object of any output that is a `CallToolResult`, serialized or not.
fn any_result(out: ToolOutput) -> Value {
    match out.produced() {
        ToolOutput::Result(v) => v,
        ToolOutput::Encoded { json, .. } => serde_json::from_str(&json).unwrap(),
        ToolOutput::Json { json, .. } => serde_json::from_str(&json).unwrap(),
        other => panic!("expected a result, got {other:?}"),
    }
}

#[test]
fn structured_results_conform_to_the_declared_output_schemas() {
    // MCP 2025-06-18 and later, server/tools "Output Schema": a tool that declares
    // one MUST return structuredContent that conforms; clients validate it.
    use crate::tools::jobs::job_tools as job;
    let schema = |tool: &crate::tools::Tool| (tool.output_schema.expect(tool.name))();
    let check = |tool: &crate::tools::Tool, r: &Value| {
        conforms(&schema(tool), &r["structuredContent"])
            .unwrap_or_else(|e| panic!("{}: {e}: {r}", tool.name));
    };
    let tmp = crate::base::testutil::TempDir::new("bash-output-schema");
    let mut config = ToolConfig {
        display_env: Some(Default::default()),
        ..ToolConfig::default()
    };
    config.jobs.dir = Some(tmp.path("jobs"));
    let host = super::super::ToolHost::new(config).unwrap();
    for args in [
        json!({"command": "echo hi"}),
        json!({"command": "echo oops >&2; exit 3"}),
        json!({"command": "head -c 100 /dev/zero", "max_output_bytes": 10}),
        json!({"command": "sleep 5", "timeout_secs": 1}),
    ] {
        let r = any_result(call_with(&host, CallLimits::GRANT, CallCtl::new(), args));
        check(&TOOL, &r);
    }
    // A command still running at the inline limit continues as a job: the other shape.
    let limits = CallLimits {
        inline_wait: std::time::Duration::from_millis(100),
        ..CallLimits::GRANT
    };
    let r = any_result(call_with(
        &host,
        limits,
        CallCtl::new(),
        json!({"command": "echo started; sleep 30", "timeout_secs": 60}),
    ));
    check(&TOOL, &r);
    let job_id = r["structuredContent"]["job_id"]
        .as_str()
        .unwrap_or_else(|| panic!("{r}"))
        .to_string();
    let run = |start: fn(Value, crate::tools::CallContext, crate::pool::Completion),
               args: Value| {
        let (done, rx) = completion();
        start(args, cx(&host, CallLimits::GRANT, CallCtl::new()), done);
        any_result(rx.recv_timeout(WATCHDOG).expect("job tool answered"))
    };
    check(&job::POLL, &run(job::poll, json!({"job_id": job_id})));
    check(&job::LIST, &run(job::list, json!({})));
    check(
        &job::CANCEL,
        &run(job::cancel, json!({"job_id": job_id, "signal": "KILL"})),
    );
    let started = run(job::start, json!({"command": "true"}));
    check(&job::START, &started);
    let id = started["structuredContent"]["job_id"].clone();
    check(&job::CANCEL, &run(job::cancel, json!({"job_id": id})));
}

/// Wait until `pid` has exited (or is gone), failing after the watchdog.
fn assert_dies(pid: i32) {
    let pid = rustix::process::Pid::from_raw(pid).unwrap();
    let fd = match rustix::process::pidfd_open(pid, rustix::process::PidfdFlags::empty()) {
        Ok(fd) => fd,
        Err(rustix::io::Errno::SRCH) => return,
        Err(e) => panic!("pidfd_open: {e}"),
    };
    let poller = crate::base::wake::Poller::new().unwrap();
    poller.add(&fd, 1, true, false).unwrap();
    let ready = poller.wait(Some(WATCHDOG)).unwrap();
    assert_eq!(
        ready.len(),
        1,
        "process {pid:?} still alive after the call ended"
    );
}

/// A bash snippet that reports `$!` (the last background pid) to the test over
/// loopback TCP, and the channel the pid arrives on: a signal to wait for instead of
/// a sleep.
fn pid_reporter() -> (String, crossbeam_channel::Receiver<i32>) {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let (tx, rx) = crossbeam_channel::bounded(1);
    std::thread::spawn(move || {
        let (stream, _) = listener.accept().unwrap();
        let mut line = String::new();
        std::io::BufReader::new(stream)
            .read_line(&mut line)
            .unwrap();
        let _ = tx.send(line.trim().parse().unwrap());
    });
    let snippet = format!("exec 3<>/dev/tcp/127.0.0.1/{port}; echo $! >&3; exec 3>&-");
    (snippet, rx)
}

#[test]
fn echo_hi() {
    let r = call(json!({"command": "echo hi"}));
    assert_eq!(r["structuredContent"]["stdout"], "hi\n");
    assert_eq!(r["structuredContent"]["exit_code"], 0);
    assert_eq!(r["structuredContent"]["timed_out"], false);
    assert_eq!(r["isError"], false);
    let text = r["content"][0]["text"].as_str().unwrap();
    assert!(text.starts_with("hi\n[exit 0 after "), "{text}");
}

#[test]
fn non_zero_exit_is_an_error_result_with_both_streams() {
    let r = call(json!({"command": "echo out; echo oops >&2; exit 3"}));
    let s = &r["structuredContent"];
    assert_eq!(
        (s["exit_code"].as_i64(), r["isError"].as_bool()),
        (Some(3), Some(true))
    );
    assert_eq!(
        (s["stdout"].as_str(), s["stderr"].as_str()),
        (Some("out\n"), Some("oops\n"))
    );
    let text = r["content"][0]["text"].as_str().unwrap();
    assert!(
        text.starts_with("out\n--- stderr ---\noops\n[exit 3 "),
        "{text}"
    );
}

#[test]
fn timeout_kills_the_whole_group() {
    let r = call(json!({"command": "sleep 100 & echo $!; sleep 100", "timeout_secs": 1}));
    let s = &r["structuredContent"];
    assert_eq!(s["timed_out"], true);
    assert_eq!(s["exit_code"], 137);
    assert_eq!(r["isError"], true);
    assert!(r["content"][0]["text"]
        .as_str()
        .unwrap()
        .contains("timed out after 1 s"));
    let grandchild: i32 = s["stdout"].as_str().unwrap().trim().parse().unwrap();
    assert_dies(grandchild);
}

#[test]
fn cancel_kills_the_whole_group() {
    let host = host();
    let ctl = CallCtl::new();
    let (report, pid_rx) = pid_reporter();
    let (done, rx) = completion();
    let script = format!("sleep 100 & {report}; sleep 100");
    start(
        json!({"command": script, "timeout_secs": 100}),
        cx(&host, CallLimits::GRANT, Arc::clone(&ctl)),
        done,
    );
    let grandchild = pid_rx.recv_timeout(WATCHDOG).unwrap();
    ctl.cancel();
    let r = result(rx.recv_timeout(WATCHDOG).unwrap());
    let s = &r["structuredContent"];
    assert_eq!(
        (s["cancelled"].as_bool(), s["timed_out"].as_bool()),
        (Some(true), Some(false))
    );
    assert_eq!(s["exit_code"], 137);
    assert_eq!(r["isError"], true);
    assert_dies(grandchild);
}

#[test]
fn a_background_nothing_can_keep_ends_with_the_shell() {
    // The unit tests' confinement is inert (no cgroup; this process is no subreaper
    // unless a test of another module made it one): what the shell leaves behind is
    // found nowhere, so nothing is kept and the run's end kills it by its marker.
    // Keeping is tested with a daemon's real containment (tests/background.rs).
    let (report, pid_rx) = pid_reporter();
    let r = call(json!({"command": format!("sleep 100 & {report}; echo done")}));
    assert_eq!(r["structuredContent"]["stdout"], "done\n");
    assert_eq!(r["isError"], false);
    let pid = pid_rx.recv_timeout(WATCHDOG).unwrap();
    if r["structuredContent"]["background_processes"] == 1 {
        let p = rustix::process::Pid::from_raw(pid).unwrap();
        assert!(
            rustix::process::test_kill_process(p).is_ok(),
            "kept, yet gone"
        );
        let _ = rustix::process::kill_process(p, rustix::process::Signal::KILL);
    }
    assert_dies(pid);
}

#[test]
fn output_is_capped_per_stream_at_exactly_max_output_bytes() {
    let r = call(
        json!({"command": "printf aaaaaaaaaa; printf bbbbbbbbbbb >&2",
                            "max_output_bytes": 10}),
    );
    let s = &r["structuredContent"];
    assert_eq!(
        (s["stdout"].as_str(), s["stdout_truncated"].as_bool()),
        (Some("aaaaaaaaaa"), Some(false))
    );
    assert_eq!(
        (s["stderr"].as_str(), s["stderr_truncated"].as_bool()),
        (Some("bbbbbbbbbb"), Some(true))
    );
    assert!(r["content"][0]["text"]
        .as_str()
        .unwrap()
        .contains("[stderr truncated to its first 10 bytes"));
}

#[test]
fn output_past_the_cap_is_drained_so_the_child_finishes() {
    // Far more than a pipe holds: the child would block forever if we stopped reading.
    let r = call(
        json!({"command": "head -c 5000000 /dev/zero; echo done >&2",
                            "max_output_bytes": 10}),
    );
    let s = &r["structuredContent"];
    assert_eq!(s["exit_code"], 0);
    assert_eq!(s["stdout"].as_str().unwrap().len(), 10);
    assert_eq!(s["stdout_truncated"], true);
    assert_eq!(s["stderr"], "done\n");
}

#[test]
fn invalid_utf8_is_replaced() {
    let r = call(json!({"command": "printf 'a\\377b'"}));
    assert_eq!(r["structuredContent"]["stdout"], "a\u{fffd}b");
}

#[test]
fn stdin_is_dev_null() {
    let r = call(json!({"command": "cat; readlink /proc/self/fd/0", "timeout_secs": 20}));
    assert_eq!(r["structuredContent"]["stdout"], "/dev/null\n");
    assert_eq!(r["structuredContent"]["timed_out"], false);
}

#[test]
fn cwd_is_used_and_must_exist() {
    let r = call(json!({"command": "pwd", "cwd": "/tmp"}));
    assert_eq!(r["structuredContent"]["stdout"], "/tmp\n");
    for (cwd, why) in [
        ("/nonexistent/handnode", "does not exist"),
        ("/etc/hostname", "is not a directory"),
    ] {
        let r = call(json!({"command": "pwd", "cwd": cwd}));
        assert_eq!(r["isError"], true);
        let text = r["content"][0]["text"].as_str().unwrap();
        assert!(text.contains(why), "{text}");
    }
}

#[test]
fn bad_arguments_are_invalid_params_through_start() {
    let host = host();
    for (limits, args, needle) in [
        (
            CallLimits::GRANT,
            json!({"command": "true", "timeout_secs": 86_401}),
            "1..=86400",
        ),
        (
            CallLimits::LOCAL_HTTP,
            json!({"command": "true", "timeout_secs": 86_401}),
            "1..=86400",
        ),
        (
            CallLimits::GRANT,
            json!({"command": "true", "max_output_bytes": 1_048_577}),
            "1..=1048576",
        ),
        (
            CallLimits::GRANT,
            json!({"command": 7}),
            "command must be a string",
        ),
        (CallLimits::GRANT, json!({}), "command is required"),
    ] {
        match call_with(&host, limits, CallCtl::new(), args) {
            ToolOutput::InvalidParams(msg) => assert!(msg.contains(needle), "{msg}"),
            other => panic!("{other:?}"),
        }
    }
}

#[test]
fn argument_bounds_and_types() {
    // The bounds no longer depend on the transport: past the inline limit a command
    // continues as a job.
    let (g, l) = ((), ());
    let ok = |args: Value, _: ()| parse_args(&args).unwrap();
    let err = |args: Value, _: ()| parse_args(&args).unwrap_err();

    let d = ok(json!({"command": "x", "unknown": [1], "cwd": null}), g);
    assert_eq!(
        (d.timeout_secs, d.max_output_bytes, d.cwd),
        (60, 65536, None)
    );
    assert_eq!(
        ok(json!({"command": "x", "timeout_secs": 110}), g).timeout_secs,
        110
    );
    assert_eq!(
        ok(json!({"command": "x", "timeout_secs": 86_400}), l).timeout_secs,
        86_400
    );
    assert_eq!(
        ok(json!({"command": "x", "max_output_bytes": 1_048_576}), g).max_output_bytes,
        1_048_576
    );
    assert!(err(json!({"command": "x", "timeout_secs": 86_401}), g).contains("1..=86400"));
    assert!(err(json!({"command": "x", "timeout_secs": 86_401}), l).starts_with("timeout_secs"));
    for bad in [json!(0), json!(-1), json!(1.5), json!("5"), json!(true)] {
        let msg = err(json!({"command": "x", "timeout_secs": bad}), l);
        assert!(msg.starts_with("timeout_secs must be an integer"), "{msg}");
    }
    for bad in [json!(0), json!(1_048_577), json!("big")] {
        let msg = err(json!({"command": "x", "max_output_bytes": bad}), l);
        assert!(
            msg.starts_with("max_output_bytes must be an integer"),
            "{msg}"
        );
    }
    assert!(err(json!({"command": ""}), g).contains("non-empty"));
    assert!(err(json!({"command": "a\u{0}b"}), g).contains("NUL"));
    assert!(err(json!({"command": "x", "cwd": 5}), g).starts_with("cwd"));
    assert!(err(json!({"command": "x", "cwd": ""}), g).starts_with("cwd"));
    assert!(err(json!({"command": "x", "env": "A=1"}), g).starts_with("env must be"));
    assert!(err(json!({"command": "x", "env": {"A": 1}}), g).contains("env.A"));
    assert!(err(json!({"command": "x", "env": {"A=B": "1"}}), g).contains("variable name"));
    assert!(err(json!({"command": "x", "env": {"": "1"}}), g).contains("variable name"));
    assert!(err(json!([1]), g).contains("object"));
    // `null` is no arguments (tools::args::object), so the missing command is named.
    assert!(err(json!(null), g).starts_with("command is required"));
    let e = ok(json!({"command": "x", "env": {"A": "1", "B": ""}}), g).env;
    assert_eq!(e, vec![("A".into(), "1".into()), ("B".into(), "".into())]);
}

#[test]
fn the_child_sees_only_the_built_environment() {
    // End to end without touching this process's environment: scrub one inherited
    // name and one inherited value, add a caller var, and read the environment the
    // child was exec'd with (bash builtins only: PATH may be the scrubbed one).
    let mut inherited: Vec<(String, String)> = std::env::vars_os()
        .filter_map(|(k, v)| Some((k.into_string().ok()?, v.into_string().ok()?)))
        .filter(|(k, v)| !k.starts_with("HANDNODE_") && !v.is_empty())
        .collect();
    inherited.sort();
    inherited.dedup_by(|a, b| a.1 == b.1);
    assert!(
        inherited.len() >= 2,
        "the test runner has at least two variables"
    );
    let (by_name, by_value) = (&inherited[0], &inherited[1]);
    let host = super::super::ToolHost::new(ToolConfig {
        scrub_env: vec![by_name.0.clone()],
        scrub_values: vec![Secret::new(by_value.1.clone())],
        ..ToolConfig::default()
    })
    .unwrap();
    let script = "while IFS= read -r -d '' v; do echo \"${v%%=*}\"; done < /proc/$$/environ";
    let r = result(call_with(
        &host,
        CallLimits::GRANT,
        CallCtl::new(),
        json!({"command": script, "env": {"ADDED_BY_CALLER": "yes"}}),
    ));
    let out = r["structuredContent"]["stdout"].as_str().unwrap();
    let names: Vec<&str> = out.lines().collect();
    assert!(names.contains(&"ADDED_BY_CALLER"), "{out}");
    assert!(!names.contains(&by_name.0.as_str()), "{out}");
    assert!(!names.contains(&by_value.0.as_str()), "{out}");
}

#[test]
fn no_worker_waits_on_a_child() {
    #[derive(Debug)]
    enum Event {
        Bash(ToolOutput),
        SysInfo,
    }
    let host = host();
    let pool = Pool::new(1, 16);
    let (events_tx, events) = crossbeam_channel::unbounded();
    let gate = std::env::temp_dir().join(format!(
        "handnode-gate-{}-{:?}",
        std::process::id(),
        std::time::SystemTime::now()
    ));
    // Each child waits for a gate the test opens only after sys_info answered, so
    // sys_info can only answer if the single worker is free while four children run.
    let script = format!("until [ -e '{}' ]; do sleep 0.02; done", gate.display());
    for _ in 0..4 {
        let (cx, tx) = (
            cx(&host, CallLimits::GRANT, CallCtl::new()),
            events_tx.clone(),
        );
        let args = json!({"command": script, "timeout_secs": 60});
        pool.submit(move || {
            start(
                args,
                cx,
                Completion::new(move |o| tx.send(Event::Bash(o)).unwrap()),
            )
        })
        .unwrap();
    }
    let (cx, tx) = (
        cx(&host, CallLimits::GRANT, CallCtl::new()),
        events_tx.clone(),
    );
    pool.submit(move || {
        super::super::sysinfo::start(
            json!({}),
            cx,
            Completion::new(move |_| tx.send(Event::SysInfo).unwrap()),
        )
    })
    .unwrap();
    let first = events.recv_timeout(WATCHDOG).expect("sys_info answered");
    assert!(matches!(first, Event::SysInfo), "{first:?}");
    std::fs::write(&gate, b"").unwrap();
    for _ in 0..4 {
        match events
            .recv_timeout(WATCHDOG)
            .expect("every bash call finished")
        {
            Event::Bash(out) => assert_eq!(result(out)["structuredContent"]["exit_code"], 0),
            other => panic!("{other:?}"),
        }
    }
    let _ = std::fs::remove_file(&gate);
}

#[test]
fn a_missing_bash_is_a_tool_error() {
    let msg = spawn_error(
        Path::new("/nope/bash"),
        &std::io::Error::from(std::io::ErrorKind::NotFound),
    );
    assert!(msg.contains("/nope/bash was not found"), "{msg}");
}

#[test]
fn description_states_the_limits() {
    for needle in [
        "100 s",
        "120 s",
        "600",
        "86400",
        "137",
        "setsid",
        "1048576",
        "isError",
        "job_id",
        "bash_poll",
    ] {
        assert!(TOOL.description.contains(needle), "{needle}");
    }
    let s = schema();
    assert_eq!(s["required"], json!(["command"]));
    assert_eq!(
        s["properties"]["max_output_bytes"]["maximum"],
        MAX_OUTPUT_BYTES
    );
}
