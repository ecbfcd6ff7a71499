//! Unit tests of `audit`.

use super::*;
use std::sync::Mutex;

use crate::base::testutil::TempDir;

/// Runs `f` on another thread and fails the test if it takes longer than a generous
/// watchdog, so a hang fails fast instead of stalling the suite.
fn within<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> T {
    let (tx, rx) = crossbeam_channel::bounded(1);
    std::thread::spawn(move || {
        let _ = tx.send(f());
    });
    rx.recv_timeout(Duration::from_secs(30))
        .expect("watchdog: audit call hung")
}

fn timing(fsync: Duration) -> Timing {
    Timing {
        audit_fsync_interval: fsync,
        ..Timing::default()
    }
}

fn call(n: u64) -> Record {
    Record::ToolCall {
        grant_id: Some("0000000a-aaaa-4bbb-8ccc-dddddddddddd".into()),
        principal: "you@example.com".into(),
        session: Some("laptop".into()),
        tool: "bash".into(),
        outcome: Outcome::Ok,
        duration_ms: n,
        args: None,
    }
}

fn created() -> Record {
    Record::Lifecycle {
        event: LifecycleEvent::Created,
        grant_id: "0000000a-aaaa-4bbb-8ccc-dddddddddddd".into(),
        principal: "you@example.com".into(),
        previous_principal: None,
        profile: "observe".into(),
        runtime: "wss://pod.example:8090".into(),
        session: "laptop".into(),
        ttl_secs: Some(3600),
        reason: None,
    }
}

fn lines(path: &Path) -> Vec<Value> {
    fs::read_to_string(path)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).expect("every line is JSON"))
        .collect()
}

#[test]
fn records_are_json_lines_in_order() {
    let tmp = TempDir::new("order");
    let (audit, guard) = start(
        &tmp.0,
        &timing(Duration::from_secs(3600)),
        &Limits::default(),
    )
    .unwrap();
    for n in 0..100 {
        audit.record(call(n));
    }
    drop(guard);
    let path = tmp.0.join(FILE_NAME);
    assert_eq!(
        fs::metadata(&path).unwrap().permissions().mode() & 0o777,
        0o600
    );
    let got = lines(&path);
    assert_eq!(got.len(), 100);
    for (n, line) in got.iter().enumerate() {
        assert_eq!(line["kind"], "tool_call");
        assert_eq!(line["duration_ms"], n as u64);
        assert_eq!(line["outcome"], "ok");
        assert!(line["ts"].as_str().unwrap().ends_with('Z'));
        assert!(line["ts_ms"].as_u64().unwrap() > 1_700_000_000_000);
    }
}

#[test]
fn plain_records_wake_the_writer_once_per_batch() {
    let (tx, rx) = crossbeam_channel::unbounded();
    let audit = Audit {
        tx: Some(tx),
        pending: Arc::default(),
        dead_logged: Arc::new(AtomicBool::new(false)),
        dir: None,
    };
    for n in 0..100 {
        audit.record(call(n));
    }
    let kicks = |rx: &Receiver<Msg>| rx.try_iter().filter(|m| matches!(m, Msg::Kick)).count();
    assert_eq!(kicks(&rx), 1, "one wake for the whole batch");
    assert_eq!(audit.pending.take().len(), 100);
    audit.record(call(100));
    assert_eq!(kicks(&rx), 1, "the next batch wakes the writer again");
    drop(rx);
    audit.pending.take();
    audit.record(call(101));
    assert!(
        audit.pending.take().is_empty(),
        "no writer: the record is dropped"
    );
}

#[test]
fn durable_record_is_on_disk_when_it_returns() {
    let tmp = TempDir::new("durable");
    // An hour-long interval: only the durable request can make these lines appear.
    let (audit, guard) = start(
        &tmp.0,
        &timing(Duration::from_secs(3600)),
        &Limits::default(),
    )
    .unwrap();
    audit.record(call(1));
    let a = audit.clone();
    within(move || a.record_durable(created())).unwrap();
    let got = lines(&tmp.0.join(FILE_NAME));
    assert_eq!(got.len(), 2);
    assert_eq!(got[0]["kind"], "tool_call");
    assert_eq!(got[1]["event"], "created");
    assert_eq!(got[1]["ttl_secs"], 3600);
    assert!(got[1].get("reason").is_none());
    drop(guard);
}

#[test]
fn lines_carry_exactly_the_documented_fields() {
    // If a field is ever added it must be added here on purpose (and must not be a secret).
    let keys = |rec: Record| -> Vec<String> {
        let v: Value = serde_json::from_str(&rec.to_line(0)).unwrap();
        v.as_object().unwrap().keys().cloned().collect()
    };
    let mut full = created();
    if let Record::Lifecycle {
        previous_principal,
        reason,
        ..
    } = &mut full
    {
        *previous_principal = Some("old@example.com".into());
        *reason = Some("deadline".into());
    }
    let mut lifecycle = keys(full);
    lifecycle.sort();
    assert_eq!(
        lifecycle,
        [
            "event",
            "grant_id",
            "kind",
            "previous_principal",
            "principal",
            "profile",
            "reason",
            "runtime",
            "session",
            "ts",
            "ts_ms",
            "ttl_secs"
        ]
    );
    let mut tool = keys(Record::ToolCall {
        grant_id: Some("0000000a-aaaa-4bbb-8ccc-dddddddddddd".into()),
        principal: "you@example.com".into(),
        session: Some("laptop".into()),
        tool: "bash".into(),
        outcome: Outcome::ToolError,
        duration_ms: 5,
        args: Some(serde_json::json!({"command": "ls"})),
    });
    tool.sort();
    assert_eq!(
        tool,
        [
            "args",
            "duration_ms",
            "grant_id",
            "kind",
            "outcome",
            "principal",
            "session",
            "tool",
            "ts",
            "ts_ms"
        ]
    );
    let job = |ended: bool, command: Option<&str>| Record::Job {
        ended,
        grant_id: Some("0000000a-aaaa-4bbb-8ccc-dddddddddddd".into()),
        principal: "you@example.com".into(),
        session: Some("laptop".into()),
        job_id: "0123456789abcdef".into(),
        command: command.map(str::to_string),
        state: ended.then_some("exited"),
        reason: None,
        exit_code: ended.then_some(0),
        duration_ms: ended.then_some(12),
        bytes: ended.then_some(34),
    };
    let mut started = keys(job(false, None));
    started.sort();
    assert_eq!(
        started,
        [
            "grant_id",
            "job_id",
            "kind",
            "principal",
            "session",
            "ts",
            "ts_ms"
        ]
    );
    let line: Value = serde_json::from_str(&job(false, Some("make")).to_line(0)).unwrap();
    assert_eq!(
        (line["kind"].as_str(), line["command"].as_str()),
        (Some("job_started"), Some("make"))
    );
    let line: Value = serde_json::from_str(&job(true, None).to_line(0)).unwrap();
    assert_eq!(line["kind"], "job_ended");
    assert_eq!(
        (line["state"].as_str(), line["bytes"].as_u64()),
        (Some("exited"), Some(34))
    );
    let line = created().to_line(1_796_040_000_123);
    assert!(!line.to_lowercase().contains("secret"), "{line}");
    assert!(line.contains("\"ts\":\"2026-11-30T12:00:00Z\""), "{line}");
}

#[test]
fn every_record_is_bounded_and_cut_fields_say_so() {
    let tmp = TempDir::new("bounded");
    let (audit, guard) = start(
        &tmp.0,
        &timing(Duration::from_secs(3600)),
        &Limits::default(),
    )
    .unwrap();
    let huge = Record::ToolCall {
        grant_id: Some("g".into()),
        principal: "\u{1}".repeat(64 << 10),
        session: Some("s".repeat(MAX_FIELD_BYTES + 1)),
        tool: "t".repeat(4 << 20),
        outcome: Outcome::RpcError,
        duration_ms: 0,
        args: Some(serde_json::json!({"text": "\"".repeat(1 << 20)})),
    };
    audit.record(huge);
    // At the bound exactly: nothing is cut.
    let mut at_bound = created();
    if let Record::Lifecycle { principal, .. } = &mut at_bound {
        *principal = "p".repeat(MAX_FIELD_BYTES);
    }
    let a = audit.clone();
    let kept = at_bound.clone();
    within(move || a.record_durable(kept)).unwrap();
    drop(guard);
    let text = fs::read_to_string(tmp.0.join(FILE_NAME)).unwrap();
    let raw: Vec<&str> = text.lines().collect();
    assert_eq!(raw.len(), 2, "no record is dropped for its size");
    assert!(raw[0].len() <= MAX_LINE_BYTES, "{} bytes", raw[0].len());
    let got = lines(&tmp.0.join(FILE_NAME));
    let tool = got[0]["tool"].as_str().unwrap();
    assert!(tool.ends_with(", 4194304 bytes]"), "{tool}");
    assert!(tool.len() <= label::max_len(label::MAX_NAME_BYTES));
    for field in ["principal", "session"] {
        let v = got[0][field].as_str().unwrap();
        assert!(v.contains("…[truncated: "), "{field}: {v}");
    }
    assert!(got[0]["session"]
        .as_str()
        .unwrap()
        .ends_with(&format!("[truncated: {} bytes]", MAX_FIELD_BYTES + 1)));
    let args = got[0]["args"].as_str().expect("cut args are a string");
    assert!(args.starts_with("{\"text\":\"\\\""), "{}", &args[..20]);
    assert!(args.ends_with("bytes]"));
    assert_eq!(got[1]["principal"], "p".repeat(MAX_FIELD_BYTES));
    assert_eq!(at_bound.clone().bounded(), at_bound.unbounded());
}

#[test]
fn job_records_are_bounded_too() {
    let job = |ended, long: &str, command: String| Record::Job {
        ended,
        grant_id: Some(long.into()),
        principal: long.into(),
        session: Some(long.into()),
        job_id: long.into(),
        command: Some(command),
        state: ended.then_some("killed"),
        reason: ended.then(|| long.to_string()),
        exit_code: ended.then_some(137),
        duration_ms: ended.then_some(5),
        bytes: ended.then_some(7),
    };
    for ended in [false, true] {
        let long = "\u{1}".repeat(64 << 10);
        let huge = job(ended, &long, "c".repeat(1 << 20));
        let line = huge.clone().bounded().to_line(now_ms());
        assert!(line.len() <= MAX_LINE_BYTES, "{} bytes", line.len());
        let v: Value = serde_json::from_str(&line).unwrap();
        assert_eq!(v["kind"], if ended { "job_ended" } else { "job_started" });
        for field in ["grant_id", "principal", "session", "job_id", "command"] {
            let text = v[field].as_str().unwrap();
            assert!(text.contains("…[truncated: "), "{field}");
        }
        if ended {
            assert!(v["reason"].as_str().unwrap().contains("…[truncated: "));
        }
        // Within the bounds nothing changes.
        let small = job(ended, "g1", "make".into());
        assert_eq!(small.clone().bounded(), small.unbounded());
    }
}

#[test]
fn rotation_keeps_exactly_keep_files_and_loses_nothing_after_them() {
    let tmp = TempDir::new("rotate");
    let line_len = call(1000).to_line(now_ms()).len() as u64 + 1;
    let limits = Limits {
        // Three lines a file.
        audit_rotate_bytes: line_len * 3 + 1,
        audit_keep: 2,
        ..Limits::default()
    };
    let (audit, guard) = start(&tmp.0, &timing(Duration::from_millis(1)), &limits).unwrap();
    // 3 files × 3 lines hold the newest 9 records; write exactly that many.
    for n in 1000..1009 {
        audit.record(call(n));
    }
    let a = audit.clone();
    within(move || a.sync()).unwrap();
    let mut names: Vec<String> = fs::read_dir(&tmp.0)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    names.sort();
    assert_eq!(names, ["audit.jsonl", "audit.jsonl.1", "audit.jsonl.2"]);
    let mut seen = Vec::new();
    for name in ["audit.jsonl.2", "audit.jsonl.1", "audit.jsonl"] {
        let path = tmp.0.join(name);
        assert!(fs::metadata(&path).unwrap().len() <= limits.audit_rotate_bytes);
        assert_eq!(
            fs::metadata(&path).unwrap().permissions().mode() & 0o777,
            0o600
        );
        seen.extend(
            lines(&path)
                .iter()
                .map(|l| l["duration_ms"].as_u64().unwrap()),
        );
    }
    assert_eq!(seen, (1000..1009).collect::<Vec<_>>());
    // One more record (bound + 1) rotates again: the oldest file goes, still 2 kept.
    audit.record(call(1009));
    drop(guard);
    let mut seen = Vec::new();
    for name in ["audit.jsonl.2", "audit.jsonl.1", "audit.jsonl"] {
        seen.extend(
            lines(&tmp.0.join(name))
                .iter()
                .map(|l| l["duration_ms"].as_u64().unwrap()),
        );
    }
    assert_eq!(seen, (1003..1010).collect::<Vec<_>>());
    assert!(!tmp.0.join("audit.jsonl.3").exists());
}

#[test]
fn links_are_never_followed_live_or_in_rotation() {
    let tmp = TempDir::new("links");
    let target = tmp.path("target");
    fs::write(&target, "precious\n").unwrap();
    fs::set_permissions(&target, fs::Permissions::from_mode(0o644)).unwrap();
    let state = tmp.path("state");
    fs::create_dir(&state).unwrap();
    let unchanged = || {
        assert_eq!(fs::read_to_string(&target).unwrap(), "precious\n");
        assert_eq!(
            fs::metadata(&target).unwrap().permissions().mode() & 0o777,
            0o644
        );
    };
    // The live file as a link: refused with a clear error, the target untouched.
    std::os::unix::fs::symlink(&target, state.join(FILE_NAME)).unwrap();
    let err = start(&state, &Timing::default(), &Limits::default()).unwrap_err();
    assert!(err.to_string().contains("is a symbolic link"), "{err}");
    assert_eq!(err.exit_code(), 2);
    unchanged();
    // Rotated names as links: rotation renames and removes them, never writes through.
    fs::remove_file(state.join(FILE_NAME)).unwrap();
    for n in 1..=2 {
        std::os::unix::fs::symlink(&target, state.join(format!("{FILE_NAME}.{n}"))).unwrap();
    }
    let line_len = call(1000).to_line(now_ms()).len() as u64 + 1;
    let limits = Limits {
        audit_rotate_bytes: line_len + 1,
        audit_keep: 2,
        ..Limits::default()
    };
    let (audit, guard) = start(&state, &timing(Duration::from_millis(1)), &limits).unwrap();
    for n in 1000..1004 {
        audit.record(call(n));
    }
    drop(guard);
    unchanged();
    for name in [FILE_NAME, "audit.jsonl.1", "audit.jsonl.2"] {
        let meta = fs::symlink_metadata(state.join(name)).unwrap();
        assert!(meta.file_type().is_file(), "{name} is still a link");
    }
}

#[test]
fn an_oversized_line_gets_a_file_of_its_own() {
    let tmp = TempDir::new("huge");
    let limits = Limits {
        audit_rotate_bytes: 64,
        audit_keep: 3,
        ..Limits::default()
    };
    let (audit, guard) = start(&tmp.0, &timing(Duration::from_millis(1)), &limits).unwrap();
    audit.record(call(1));
    audit.record(call(2));
    drop(guard);
    assert_eq!(lines(&tmp.0.join("audit.jsonl.1")).len(), 1);
    assert_eq!(lines(&tmp.0.join("audit.jsonl"))[0]["duration_ms"], 2);
}

#[test]
fn record_never_blocks_on_a_stalled_writer() {
    let tmp = TempDir::new("stall");
    let gate = Arc::new(Mutex::new(()));
    let mut writer = Writer::new(
        &tmp.0,
        &timing(Duration::from_millis(1)),
        &Limits::default(),
    )
    .unwrap();
    writer.gate = Some(Arc::clone(&gate));
    let (audit, guard) = start_with(writer).unwrap();
    let held = gate.lock().unwrap();
    let a = audit.clone();
    // The writer cannot take a batch while we hold the gate; recording still returns.
    within(move || {
        for n in 0..10_000 {
            a.record(call(n));
        }
    });
    drop(held);
    let a = audit.clone();
    within(move || a.sync()).unwrap();
    assert_eq!(lines(&tmp.0.join(FILE_NAME)).len(), 10_000);
    drop(guard);
}

fn panics_the_writer() -> Record {
    let mut rec = call(0);
    if let Record::ToolCall { tool, .. } = &mut rec {
        *tool = faults::hooks::AUDIT_TOOL.into();
    }
    rec
}

#[test]
fn a_panic_restarts_the_writer_and_loses_no_acknowledged_record() {
    let tmp = TempDir::new("panic");
    // An hour-long interval: only durable requests write.
    let (audit, guard) = start(
        &tmp.0,
        &timing(Duration::from_secs(3600)),
        &Limits::default(),
    )
    .unwrap();
    let before = faults::count(Site::Audit);
    audit.record(call(1));
    let a = audit.clone();
    within(move || a.record_durable(created())).expect("acknowledged");
    // The batch that panics: its durable request is told, never acknowledged.
    audit.record(panics_the_writer());
    let a = audit.clone();
    let err = within(move || a.record_durable(created())).unwrap_err();
    assert!(err.to_string().contains("restarted"), "{err}");
    // Counted once the unwind (which answered the request above) reaches the catch.
    crate::base::testutil::wait_for(
        || faults::count(Site::Audit) > before,
        "the audit panic to be counted",
    );
    // The restarted writer serves: plain records and durable ones.
    audit.record(call(2));
    let a = audit.clone();
    within(move || a.record_durable(created())).expect("the restarted writer writes");
    let got = lines(&tmp.0.join(FILE_NAME));
    let kinds: Vec<(String, u64)> = got
        .iter()
        .map(|l| {
            (
                l["kind"].as_str().unwrap().to_string(),
                l["duration_ms"].as_u64().unwrap_or(0),
            )
        })
        .collect();
    assert_eq!(
        kinds,
        [
            ("tool_call".to_string(), 1),
            ("lifecycle".to_string(), 0),
            ("tool_call".to_string(), 2),
            ("lifecycle".to_string(), 0)
        ]
    );
    // A panic in the batch that holds the shutdown does not leave the guard waiting.
    audit.record(panics_the_writer());
    audit.record(call(3));
    within(move || drop(guard));
}

#[test]
fn group_commit_fsyncs_per_interval_and_for_each_durable_batch() {
    let tmp = TempDir::new("group");
    let (fs_tx, fs_rx) = crossbeam_channel::unbounded();
    let mut w = Writer::new(
        &tmp.0,
        &timing(Duration::from_secs(3600)),
        &Limits::default(),
    )
    .unwrap();
    w.fsynced = Some(fs_tx);
    // Plain records inside the interval: written, not fsynced.
    for n in 0..3 {
        assert!(!w.handle(&mut vec![Msg::Record(0, call(n).bounded())]));
    }
    assert_eq!(fs_rx.try_iter().count(), 0);
    assert_eq!(lines(&tmp.0.join(FILE_NAME)).len(), 3);
    // A batch holding a durable request is fsynced before it is answered.
    let (reply_tx, reply_rx) = crossbeam_channel::bounded(1);
    w.handle(&mut vec![
        Msg::Record(0, call(3).bounded()),
        Msg::Durable(0, created().bounded(), reply_tx),
        Msg::Record(0, call(4).bounded()),
    ]);
    assert_eq!(fs_rx.try_iter().count(), 1);
    assert_eq!(reply_rx.try_recv().unwrap(), Ok(()));
    // A zero interval has elapsed at once: every batch is fsynced.
    w.fsync_interval = Duration::ZERO;
    w.handle(&mut vec![Msg::Record(0, call(5).bounded())]);
    w.handle(&mut vec![Msg::Record(0, call(6).bounded())]);
    assert_eq!(fs_rx.try_iter().count(), 2);
}

#[test]
fn a_lone_record_is_fsynced_when_the_interval_runs_out() {
    let tmp = TempDir::new("timer");
    let (fs_tx, fs_rx) = crossbeam_channel::unbounded();
    let mut w = Writer::new(
        &tmp.0,
        &timing(Duration::from_millis(20)),
        &Limits::default(),
    )
    .unwrap();
    w.fsynced = Some(fs_tx);
    let (audit, guard) = start_with(w).unwrap();
    audit.record(call(1));
    // Nothing else arrives: only the writer's own deadline can cause this fsync.
    fs_rx
        .recv_timeout(Duration::from_secs(30))
        .expect("the interval fsync never happened");
    assert_eq!(lines(&tmp.0.join(FILE_NAME)).len(), 1);
    drop(guard);
}

#[test]
fn dropping_the_guard_flushes_and_later_records_fail_cleanly() {
    let tmp = TempDir::new("drop");
    let (audit, guard) = start(
        &tmp.0,
        &timing(Duration::from_secs(3600)),
        &Limits::default(),
    )
    .unwrap();
    for n in 0..5 {
        audit.record(call(n));
    }
    within(move || drop(guard));
    assert_eq!(lines(&tmp.0.join(FILE_NAME)).len(), 5);
    audit.record(call(6));
    assert!(audit.record_durable(created()).is_err());
    assert!(audit.sync().is_err());
}

#[test]
fn appends_to_an_existing_file_and_narrows_its_mode() {
    let tmp = TempDir::new("append");
    let path = tmp.0.join(FILE_NAME);
    fs::write(&path, format!("{}\n", call(0).to_line(0))).unwrap();
    fs::set_permissions(&path, fs::Permissions::from_mode(0o644)).unwrap();
    let (audit, guard) = start(&tmp.0, &Timing::default(), &Limits::default()).unwrap();
    audit.record(call(1));
    drop(guard);
    assert_eq!(
        fs::metadata(&path).unwrap().permissions().mode() & 0o777,
        0o600
    );
    assert_eq!(lines(&path).len(), 2);
}

#[test]
fn missing_state_dir_is_a_clear_error() {
    let tmp = TempDir::new("nodir");
    let err = start(
        &tmp.0.join("absent"),
        &Timing::default(),
        &Limits::default(),
    )
    .unwrap_err();
    assert!(err.to_string().contains("cannot open"), "{err}");
}

#[test]
fn discard_records_nothing() {
    let audit = Audit::discard();
    audit.record(call(1));
    assert!(audit.record_durable(created()).is_ok());
    assert!(audit.sync().is_ok());
}
