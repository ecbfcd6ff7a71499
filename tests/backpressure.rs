//! A hostile pod against the real binary's grant sockets, memory read from `/proc/<pid>`:
//! one that stops reading and floods cheap requests (each answered inline with a ~2 KB
//! `tools/list`) is no longer read once `--write-buffer-bytes` of replies are owed, so
//! the daemon stays small while another grant is served; one that never reads is dropped
//! after `--write-stall-ms` and redialed; and one 16 MiB message costs a small multiple of
//! its size, not a tree of its `params`.

mod common;
#[path = "common/realbin.rs"]
mod realbin;

use std::io::Write;
use std::net::TcpStream;
use std::time::{Duration, Instant};

use common::*;
use realbin::RealDaemon;
use serde_json::{json, Value};

/// Requests the flooding pod tries to send: 100 000 is what grew the daemon by 214 MB
/// before; four times that, so that kernel buffers cannot absorb the flood whole.
const FLOOD_REQUESTS: usize = 400_000;

/// How long a write of the flood may block before the pod concludes the daemon stopped
/// reading.
const FLOOD_WRITE_TIMEOUT: Duration = Duration::from_secs(2);

/// Longest the daemon may take to answer one 16 MiB message (debug build).
const BIG_MESSAGE_WATCHDOG: Duration = Duration::from_secs(60);

/// A field of `/proc/<pid>/status` in KiB.
fn status_kib(pid: u32, field: &str) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix(field))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or_else(|| panic!("no {field} in /proc/{pid}/status"))
}

fn attach(d: &RealDaemon, pod: &StubPod, session: &str) -> (String, PodConn) {
    let (status, g) = d.call(
        "POST",
        "/attach",
        Some(&attach_body(pod, session, "observe")),
    );
    assert_eq!(status, 202, "{g}");
    let id = g["id"].as_str().unwrap().to_string();
    let (_, conn) = pod.next_session();
    d.wait_grant(&id, "attached", |g| g["state"] == "attached");
    (id, conn)
}

/// Write `count` copies of `frame` on `socket` from another thread until done or a write
/// blocks for [`FLOOD_WRITE_TIMEOUT`]; returns the whole frames written.
fn flood(socket: &TcpStream, frame: Vec<u8>, count: usize) -> std::thread::JoinHandle<usize> {
    let mut s = socket.try_clone().unwrap();
    s.set_write_timeout(Some(FLOOD_WRITE_TIMEOUT)).unwrap();
    std::thread::spawn(move || {
        let batch: Vec<u8> = frame.repeat(1000);
        let mut written = 0usize;
        while written < frame.len() * count {
            match s.write(&batch[written % batch.len()..]) {
                Ok(n) => written += n,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(_) => break,
            }
        }
        written / frame.len()
    })
}

fn sys_info_round_trip(conn: &mut PodConn, id: u64) -> Duration {
    let started = Instant::now();
    let reply = conn.call_tool(json!(id), "sys_info", json!({}));
    assert!(reply["result"]["content"].is_array(), "{reply}");
    started.elapsed()
}

#[test]
fn a_pod_that_stops_reading_and_floods_cannot_grow_the_daemon() {
    let dir = temp_dir("bp-flood");
    let pod = StubPod::start();
    // The production write buffer (4 MiB); no stall drop while the test measures.
    let d = RealDaemon::start(&dir.join("state"), &[("--write-stall-ms", "600000")]);
    let (hostile_id, mut hostile) = attach(&d, &pod, "flood");
    let (_, mut other) = attach(&d, &pod, "other");
    let request = br#"{"jsonrpc":"2.0","id":1,"method":"tools/list"}"#;
    let list = hostile.request(json!(1), "tools/list", json!({}));
    let reply_bytes = list.to_string().len();
    sys_info_round_trip(&mut other, 1);
    let rss_before = d.rss_kib();

    // The pod reads nothing from here on.
    let writer = flood(
        hostile.ws.get_ref(),
        raw_frame(1, true, request),
        FLOOD_REQUESTS,
    );
    let sent = writer.join().unwrap();
    assert!(
        sent < FLOOD_REQUESTS,
        "the daemon read all {FLOOD_REQUESTS} requests without the pod reading a reply"
    );
    // The daemon stopped reading this socket a while ago (a write blocked for 2 s), and
    // another grant is served as usual.
    let took = sys_info_round_trip(&mut other, 2);
    let rss_after = d.rss_kib();
    let grown_mib = (rss_after.saturating_sub(rss_before)) as f64 / 1024.0;
    eprintln!(
        "flood: {sent} requests of {} bytes taken before the daemon stopped reading \
         ({reply_bytes}-byte replies owed); VmRSS {rss_before} -> {rss_after} KiB \
         (+{grown_mib:.1} MiB); the other grant's sys_info took {took:?}",
        request.len() + 2
    );
    assert!(
        grown_mib < 32.0,
        "the daemon grew by {grown_mib:.1} MiB under the flood"
    );
    // The grant stays attached and its replies were owed, not dropped: once the pod
    // reads again they arrive, in order, whole.
    assert_eq!(d.grant(&hostile_id).1["state"], "attached");
    for _ in 0..1000 {
        let reply = hostile.recv();
        assert_eq!(reply["id"], 1);
        assert_eq!(reply.to_string().len(), reply_bytes);
    }
    drop(d);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_pod_that_never_reads_is_dropped_after_the_write_stall_and_redialed() {
    let dir = temp_dir("bp-stall");
    let pod = StubPod::start();
    let d = RealDaemon::start(
        &dir.join("state"),
        &[
            ("--write-stall-ms", "300"),
            ("--write-buffer-bytes", "65536"),
        ],
    );
    let (id, hostile) = attach(&d, &pod, "stall");
    let request = br#"{"jsonrpc":"2.0","id":1,"method":"tools/list"}"#;
    let started = Instant::now();
    let writer = flood(
        hostile.ws.get_ref(),
        raw_frame(1, true, request),
        FLOOD_REQUESTS,
    );
    // Dropped and dialed again: a new upgrade reaches the pod.
    let up = pod.next_upgrade();
    let redialed_after = started.elapsed();
    assert_eq!(up.path, "/tools/attach/stall");
    let g = d.wait_grant(&id, "redialed after a write stall", |g| {
        g["last_error"]
            .as_str()
            .is_some_and(|e| e.contains("write stall"))
    });
    let error = g["last_error"].as_str().unwrap();
    assert!(error.contains("300 ms"), "{error}");
    let line = realbin_log_line(&d, "write stall");
    assert!(line.contains("dropped"), "{line}");
    eprintln!("stalled pod redialed {redialed_after:?} after the flood began: {error}");
    // The new connection is served.
    let mut conn = pod.next_conn();
    assert_eq!(
        conn.initialize()["result"]["serverInfo"]["name"],
        "handnode"
    );
    drop(writer);
    drop(d);
    let _ = std::fs::remove_dir_all(&dir);
}

/// The daemon's log line containing `needle`, waited for (watchdog-bounded).
fn realbin_log_line(d: &RealDaemon, needle: &str) -> String {
    poll_until(
        || d.log_tail(),
        |log| log.contains(needle),
        |log| format!("watchdog: no {needle:?} in the daemon's log:\n{log}"),
    )
    .lines()
    .find(|l| l.contains(needle))
    .unwrap()
    .to_string()
}

/// A message of about `size` bytes: `prefix`, then `[0,0,…]`, then `suffix`.
fn zeros_message(prefix: &str, size: usize, suffix: &str) -> String {
    let n = (size - prefix.len() - suffix.len() - 2) / 2;
    let mut m = String::with_capacity(size);
    m.push_str(prefix);
    m.push('[');
    for i in 0..n {
        m.push_str(if i == 0 { "0" } else { ",0" });
    }
    m.push(']');
    m.push_str(suffix);
    m
}

#[test]
fn a_sixteen_mib_message_costs_a_few_times_its_size() {
    let dir = temp_dir("bp-big");
    let pod = StubPod::start();
    let d = RealDaemon::start(&dir.join("state"), &[]);
    let (_, mut conn) = attach(&d, &pod, "big");
    // The test binary is a debug build, which takes seconds to read 16 MiB of JSON twice
    // (validated, then its members picked); release takes ~1 s.
    conn.set_read_timeout(BIG_MESSAGE_WATCHDOG);
    // Just under the 16 MiB inbound cap.
    let size = (16 << 20) - 1024;
    let list = zeros_message(
        r#"{"jsonrpc":"2.0","id":1,"method":"tools/list","params":"#,
        size,
        "}",
    );
    let call = zeros_message(
        r#"{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"sys_info","arguments":{"a":"#,
        size,
        "}}}",
    );
    assert!(list.len() <= 16 << 20 && call.len() <= 16 << 20);
    let rss_before = d.rss_kib();
    let hwm_before = status_kib(d.pid, "VmHWM:");

    conn.send_msg(tungstenite::Message::text(list));
    let reply = conn.recv();
    assert_eq!(reply["id"], 1);
    assert!(reply["result"]["tools"].is_array(), "{reply}");
    conn.send_msg(tungstenite::Message::text(call));
    let reply: Value = conn.recv();
    assert_eq!(reply["id"], 2);
    assert_eq!(reply["error"]["code"], -32602, "{reply}");

    let hwm_after = status_kib(d.pid, "VmHWM:");
    // An upper bound: the peak after, over the resident size before.
    let cost_mib = hwm_after.saturating_sub(rss_before) as f64 / 1024.0;
    eprintln!(
        "two 16 MiB messages: VmRSS before {rss_before} KiB, VmHWM {hwm_before} -> {hwm_after} KiB: \
         at most {cost_mib:.1} MiB at the peak"
    );
    assert!(
        cost_mib <= 3.0 * 16.0,
        "a 16 MiB message cost {cost_mib:.1} MiB at its peak"
    );
    drop(d);
    let _ = std::fs::remove_dir_all(&dir);
}

/// Reset the daemon's VmHWM to its current VmRSS (`/proc/<pid>/clear_refs` `5`), so the
/// peak read after a flood is that flood's; `false` where that is not allowed.
fn reset_peak(pid: u32) -> bool {
    std::fs::write(format!("/proc/{pid}/clear_refs"), "5").is_ok()
}

/// One of 64 requests in flight per grant (the in-flight cap).
const IN_FLIGHT: usize = 64;

/// How long the daemon's memory is watched while it owes a pod that stopped reading.
const OWED_WINDOW: Duration = Duration::from_secs(3);

#[test]
fn owed_replies_of_a_pod_that_stopped_reading_stay_near_the_write_buffer() {
    let dir = temp_dir("bp-owed");
    let pod = StubPod::start();
    // The production write buffer (4 MiB); no stall drop while the test measures.
    let d = RealDaemon::start(&dir.join("state"), &[("--write-stall-ms", "600000")]);
    let attach_owner = |session: &str| {
        let (status, g) = d.call(
            "POST",
            "/attach",
            Some(&attach_body(&pod, session, "owner")),
        );
        assert_eq!(status, 202, "{g}");
        let id = g["id"].as_str().unwrap().to_string();
        let (_, conn) = pod.next_session();
        d.wait_grant(&id, "attached", |g| g["state"] == "attached");
        conn
    };
    let mut greedy = attach_owner("greedy");
    let mut other = attach_owner("other");
    // A job that printed 1 MiB of invalid UTF-8 to each stream: each byte becomes U+FFFD
    // (3 bytes), so one bash_poll of it answers about 6 MiB, and 64 of them 384 MiB.
    let started = greedy.call_tool(
        json!("start"),
        "bash_start",
        json!({"command": "head -c 1048576 /dev/zero | tr '\\0' '\\377'; \
                            head -c 1048576 /dev/zero | tr '\\0' '\\377' >&2"}),
    );
    let job = started["result"]["structuredContent"]["job_id"]
        .as_str()
        .unwrap_or_else(|| panic!("{started}"))
        .to_string();
    poll_until(
        || {
            greedy.call_tool(
                json!("wait"),
                "bash_poll",
                json!({"job_id": job, "max_bytes": 1, "wait_secs": 5}),
            )
        },
        |r| r["result"]["structuredContent"]["state"] == "exited",
        |r| format!("watchdog: the job never ended: {r}"),
    );
    let ping_round_trip = |conn: &mut PodConn, id: u64| {
        let at = Instant::now();
        assert_eq!(conn.ping(json!(id))["result"], json!({}));
        at.elapsed()
    };
    let p99 = |mut v: Vec<Duration>| {
        v.sort();
        v[(v.len() * 99).div_ceil(100) - 1]
    };
    let usual = p99((0..100).map(|i| ping_round_trip(&mut other, i)).collect());
    let peak_reset = reset_peak(d.pid);
    let rss_before = d.rss_kib();

    // 64 bash_polls in flight; the pod reads nothing from here on.
    for i in 0..IN_FLIGHT {
        greedy.send(&json!({"jsonrpc": "2.0", "id": i, "method": "tools/call",
            "params": {"name": "bash_poll", "arguments": {"job_id": job, "max_bytes": 1_048_576}}}));
    }
    // While the daemon produces what it can send and then waits (a debug build takes
    // about a second for that), the other grant's pings are answered; the daemon's
    // memory is read at each. The window only bounds the measurement.
    let mut during = Vec::new();
    let mut rss_peak = rss_before;
    let window = Instant::now();
    while window.elapsed() < OWED_WINDOW {
        during.push(ping_round_trip(&mut other, 1000 + during.len() as u64));
        rss_peak = rss_peak.max(d.rss_kib());
    }
    let hwm = status_kib(d.pid, "VmHWM:");
    let peak = if peak_reset {
        hwm.max(rss_peak)
    } else {
        rss_peak
    };
    let grown_kib = peak.saturating_sub(rss_before);
    let during = p99(during);
    eprintln!(
        "owed replies: {IN_FLIGHT} bash_polls of 2 x 1 MiB invalid UTF-8 to a pod that stopped \
         reading: VmRSS {rss_before} KiB, peak {peak} KiB (VmHWM {}): owed_reply_peak_kib \
         {grown_kib} with --write-buffer-bytes 4096 KiB; the other grant's ping p99 \
         {usual:?} before, {during:?} during",
        if peak_reset {
            "reset before"
        } else {
            "not resettable here"
        }
    );
    assert!(
        grown_kib < 32 << 10,
        "the daemon grew by {grown_kib} KiB under 64 owed replies"
    );
    // Once the pod reads again, replies arrive whole, each output byte once (the streams
    // in the text, structuredContent saying where). Reading all 384 MiB takes a debug
    // build over a minute; the first few show it.
    let read_from = Instant::now();
    greedy.set_read_timeout(WATCHDOG);
    let mut ids = Vec::new();
    for n in 0..4 {
        let text = loop {
            match greedy.ws.read() {
                Ok(tungstenite::Message::Text(t)) => break t,
                Ok(_) => continue,
                Err(e) if is_interrupted(&e) => continue,
                Err(e) => panic!("reply {n} never came: {e}"),
            }
        };
        assert!(
            (6 << 20..7 << 20).contains(&text.len()),
            "reply of {} bytes",
            text.len()
        );
        assert!(
            text.contains("\"stdout_range\":[0,3145728]"),
            "{}",
            &text[text.len() - 600..]
        );
        assert!(
            !text.contains("\"stdout\":\""),
            "a stream in structuredContent"
        );
        let id_at = text.find("\"id\":").unwrap() + 5;
        let id: u64 = text[id_at..]
            .split(|c: char| !c.is_ascii_digit())
            .next()
            .unwrap()
            .parse()
            .unwrap();
        ids.push(id);
    }
    ids.sort();
    ids.dedup();
    assert_eq!(ids.len(), 4, "{ids:?}");
    assert!(ids.iter().all(|&id| id < IN_FLIGHT as u64), "{ids:?}");
    eprintln!("read 4 replies in {:?}", read_from.elapsed());
    assert_eq!(other.ping(json!("after"))["result"], json!({}));
    drop(d);
    let _ = std::fs::remove_dir_all(&dir);
}
