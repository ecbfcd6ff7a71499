//! Admin API abuse against the real binary, with its memory measured from outside:
//! 1 000 wrong tokens (429s, a throttle table that stays bounded), a 10 MB body actually
//! sent (413 without buffering it), and hostile `Host`/`Origin` headers (403).
//! (tests/admin.rs covers 200 idle connections, throttle basics and a huge *declared* body.)

mod common;
#[path = "common/realbin.rs"]
mod realbin;

use std::io::{Read, Write};
use std::net::TcpStream;

use common::*;
use realbin::{RealDaemon, TOKEN};

fn get_attach(d: &RealDaemon, headers: &[(&str, &str)]) -> u16 {
    http(d.addr, "GET", "/attach", headers, None).0
}

#[test]
fn a_thousand_wrong_tokens_are_throttled_in_a_bounded_table() {
    let dir = temp_dir("abuse-tokens");
    let d = RealDaemon::start(
        &dir.join("state"),
        &[("--throttle-failures", "10"), ("--throttle-table", "64")],
    );
    let good = format!("Bearer {TOKEN}");
    assert_eq!(get_attach(&d, &[("Authorization", &good)]), 200);
    let rss_before = d.rss_kib();

    // One client, 1 000 wrong tokens: 10 answered 401, then 429 for all the rest.
    let mut statuses = std::collections::BTreeMap::new();
    for i in 0..1000 {
        let wrong = format!("Bearer wrong-{i}");
        let status = get_attach(
            &d,
            &[
                ("Authorization", &wrong),
                ("X-Forwarded-For", "198.51.100.1"),
            ],
        );
        *statuses.entry(status).or_insert(0) += 1;
        if i < 10 {
            assert_eq!(status, 401, "failure {i}");
        } else {
            assert_eq!(status, 429, "failure {i}");
        }
    }
    eprintln!("one client, 1000 wrong tokens: {statuses:?}");
    // A second client is one short of the limit…
    for _ in 0..9 {
        let s = get_attach(
            &d,
            &[
                ("Authorization", "Bearer nope"),
                ("X-Forwarded-For", "198.51.100.2"),
            ],
        );
        assert_eq!(s, 401);
    }
    // …then 1 000 more clients fail once each, far past the 64-key table.
    for i in 0..1000 {
        let xff = format!("203.0.{}.{}", i / 256, i % 256);
        let s = get_attach(
            &d,
            &[("Authorization", "Bearer nope"), ("X-Forwarded-For", &xff)],
        );
        assert_eq!(s, 401, "client {xff}");
    }
    // The table forgot the second client (it holds 64 keys, not 1 002): two more failures
    // are both 401, where a remembered count would have locked it at the 11th.
    for _ in 0..2 {
        let s = get_attach(
            &d,
            &[
                ("Authorization", "Bearer nope"),
                ("X-Forwarded-For", "198.51.100.2"),
            ],
        );
        assert_eq!(s, 401, "the 64-key table kept a key through 1 000 others");
    }
    // A locked-out client is not freed by the flood of new keys.
    let s = get_attach(
        &d,
        &[
            ("Authorization", "Bearer wrong"),
            ("X-Forwarded-For", "198.51.100.1"),
        ],
    );
    assert_eq!(s, 429);
    // The owner was never throttled.
    assert_eq!(get_attach(&d, &[("Authorization", &good)]), 200);
    let rss_after = d.rss_kib();
    eprintln!("daemon VmRSS {rss_before} KiB -> {rss_after} KiB over 3 011 failed authentications");
    assert!(
        rss_after < rss_before + 8 * 1024,
        "the daemon grew by more than 8 MiB"
    );
    drop(d);
    let _ = std::fs::remove_dir_all(&dir);
}

/// Send `head` then `len` bytes of body from a second thread; returns the response head
/// the daemon sent and whether the whole body could be written.
fn send_big(
    d: &RealDaemon,
    head: &str,
    body: impl Fn(&mut TcpStream) -> std::io::Result<()> + Send + 'static,
) -> (String, std::io::Result<()>) {
    let mut s = TcpStream::connect(d.addr).unwrap();
    s.set_read_timeout(Some(WATCHDOG)).unwrap();
    s.write_all(head.as_bytes()).unwrap();
    let mut writer = s.try_clone().unwrap();
    let sender = std::thread::spawn(move || body(&mut writer));
    let mut response = Vec::new();
    let mut buf = [0u8; 4096];
    while !response.windows(4).any(|w| w == b"\r\n\r\n") {
        match s.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => response.extend_from_slice(&buf[..n]),
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => panic!("watchdog or error reading the response: {e}"),
        }
    }
    drop(s);
    let sent = sender.join().unwrap();
    (String::from_utf8_lossy(&response).into_owned(), sent)
}

#[test]
fn a_ten_megabyte_body_is_refused_413_without_being_buffered() {
    const BIG: usize = 10_000_000;
    let dir = temp_dir("abuse-body");
    let d = RealDaemon::start(&dir.join("state"), &[]);
    let auth = format!("Authorization: Bearer {TOKEN}");
    assert_eq!(
        http(
            d.addr,
            "GET",
            "/attach",
            &[("Authorization", &format!("Bearer {TOKEN}"))],
            None
        )
        .0,
        200
    );
    let rss_before = d.rss_kib();
    // Declared and sent.
    let head = format!("POST /attach HTTP/1.1\r\nHost: 127.0.0.1\r\n{auth}\r\nContent-Type: application/json\r\nContent-Length: {BIG}\r\n\r\n");
    let (response, sent) = send_big(&d, &head, |w| {
        let chunk = vec![b' '; 64 << 10];
        for _ in 0..BIG / chunk.len() {
            w.write_all(&chunk)?;
        }
        w.write_all(&vec![b' '; BIG % chunk.len()])
    });
    assert!(response.starts_with("HTTP/1.1 413"), "{response}");
    eprintln!(
        "10 MB with Content-Length: {} / whole body written: {}",
        response.lines().next().unwrap_or(""),
        sent.is_ok()
    );
    // Chunked, so no length is known up front: the cap applies while reading.
    let head = format!("POST /attach HTTP/1.1\r\nHost: 127.0.0.1\r\n{auth}\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n");
    let (response, sent) = send_big(&d, &head, |w| {
        let chunk = vec![b' '; 64 << 10];
        for _ in 0..BIG / chunk.len() {
            write!(w, "{:x}\r\n", chunk.len())?;
            w.write_all(&chunk)?;
            w.write_all(b"\r\n")?;
        }
        w.write_all(b"0\r\n\r\n")
    });
    assert!(response.starts_with("HTTP/1.1 413"), "{response}");
    eprintln!(
        "10 MB chunked: {} / whole body written: {}",
        response.lines().next().unwrap_or(""),
        sent.is_ok()
    );
    // `/mcp` has the same cap.
    let head = format!("POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\n{auth}\r\nContent-Type: application/json\r\nContent-Length: {BIG}\r\n\r\n");
    let (response, _) = send_big(&d, &head, |w| {
        let chunk = vec![b' '; 64 << 10];
        for _ in 0..BIG / chunk.len() {
            w.write_all(&chunk)?;
        }
        Ok(())
    });
    assert!(response.starts_with("HTTP/1.1 413"), "{response}");
    let rss_after = d.rss_kib();
    eprintln!("daemon VmRSS {rss_before} KiB -> {rss_after} KiB after three 10 MB bodies");
    assert!(
        rss_after < rss_before + 4 * 1024,
        "the daemon grew by more than 4 MiB: it buffered a body"
    );
    assert_eq!(http(d.addr, "GET", "/healthz", &[], None).0, 200);
    drop(d);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn hostile_host_and_origin_headers_are_refused_403() {
    let dir = temp_dir("abuse-host");
    let d = RealDaemon::start(&dir.join("state"), &[("--allow-host", "box.tail.ts.net")]);
    let good = format!("Bearer {TOKEN}");
    let port_host = format!("127.0.0.1:{}", d.addr.port());
    for host in [
        "evil.example",
        "evil.example:8795",
        "127.0.0.1.evil.example",
        "localhost.evil.example",
        "localhost:80@evil.example",
        "[::1].evil.example",
        "127.1",
        "2130706433",
        "0x7f000001",
        "10.0.0.1",
        "100.100.1.1",
        "[::ffff:8.8.8.8]",
        "box.tail.ts.net.evil.example",
        "tail.ts.net",
        "",
        " ",
    ] {
        let status = get_attach(&d, &[("Authorization", &good), ("Host", host)]);
        assert_eq!(status, 403, "Host {host:?}");
    }
    for origin in [
        "http://evil.example",
        "https://127.0.0.1.evil.example",
        "null",
        "file://",
        "http://localhost.evil.example:8795",
    ] {
        let status = get_attach(
            &d,
            &[
                ("Authorization", &good),
                ("Host", &port_host),
                ("Origin", origin),
            ],
        );
        assert_eq!(status, 403, "Origin {origin:?}");
    }
    for host in [
        port_host.as_str(),
        "localhost",
        "LOCALHOST:1",
        "[::1]:8795",
        "app.localhost",
        "box.tail.ts.net",
        "BOX.tail.ts.net:443",
    ] {
        let status = get_attach(&d, &[("Authorization", &good), ("Host", host)]);
        assert_eq!(status, 200, "Host {host:?}");
    }
    // No Host at all (HTTP/1.0 lets a client omit it).
    let mut s = TcpStream::connect(d.addr).unwrap();
    s.set_read_timeout(Some(WATCHDOG)).unwrap();
    write!(s, "GET /attach HTTP/1.0\r\nAuthorization: {good}\r\n\r\n").unwrap();
    let (status, _, _) = read_response(&mut s);
    assert_eq!(status, 403);
    // The guard runs before authentication: a rebinding page learns nothing, not even 401.
    assert_eq!(get_attach(&d, &[("Host", "evil.example")]), 403);
    drop(d);
    let _ = std::fs::remove_dir_all(&dir);
}

/// A request line or header that never ends, and a request with too many headers: the
/// connection is cut and the daemon does not buffer what was sent (a vendored tiny_http
/// patch; before it, 100 MB without a newline made the daemon 100 MB larger).
#[test]
fn an_endless_request_line_or_header_is_cut_off() {
    const SENT: usize = 20 << 20;
    let dir = temp_dir("abuse-line");
    let d = RealDaemon::start(&dir.join("state"), &[]);
    assert_eq!(http(d.addr, "GET", "/healthz", &[], None).0, 200);
    let rss_before = d.rss_kib();
    for head in [
        "GET /",
        "GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Long: ",
    ] {
        let (response, sent) = send_big(&d, head, |w| {
            let chunk = vec![b'a'; 64 << 10];
            for _ in 0..SENT / chunk.len() {
                w.write_all(&chunk)?;
            }
            Ok(())
        });
        assert!(sent.is_err(), "the daemon took {SENT} bytes of one line");
        assert_eq!(response, "", "no response, just a closed connection");
    }
    let rss_after = d.rss_kib();
    eprintln!("daemon VmRSS {rss_before} KiB -> {rss_after} KiB after two 20 MiB lines");
    assert!(
        rss_after < rss_before + 4 * 1024,
        "the daemon buffered a line"
    );
    // 129 header lines: 400. 128 (Host and Connection among them) are fine.
    let mut s = TcpStream::connect(d.addr).unwrap();
    s.set_read_timeout(Some(WATCHDOG)).unwrap();
    let many: String = (0..129).map(|i| format!("X-{i}: v\r\n")).collect();
    write!(s, "GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n{many}\r\n").unwrap();
    assert_eq!(read_response(&mut s).0, 400);
    let mut s = TcpStream::connect(d.addr).unwrap();
    s.set_read_timeout(Some(WATCHDOG)).unwrap();
    let enough: String = (0..126).map(|i| format!("X-{i}: v\r\n")).collect();
    write!(
        s,
        "GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n{enough}\r\n"
    )
    .unwrap();
    assert_eq!(read_response(&mut s).0, 200);
    drop(d);
    let _ = std::fs::remove_dir_all(&dir);
}

/// A runtime URL with a multi-byte character where the scheme is looked for panicked the
/// handler thread (found by the attach_request fuzz target); with four handler threads, four
/// such requests left the admin API unanswered. Now each is a 400 and the API stays up.
#[test]
fn multibyte_runtime_urls_are_400_and_the_admin_api_survives() {
    let dir = temp_dir("abuse-utf8");
    let d = RealDaemon::start(&dir.join("state"), &[]);
    for runtime in ["wé://x", "kSS:ۦz", "ws:/ۦ", "wss:ۦ//x", "ۦۦۦۦۦۦ"] {
        for _ in 0..2 {
            let (status, v) = d.call(
                "POST",
                "/attach",
                Some(&serde_json::json!({"runtime": runtime, "session": "s", "secret": "x"})),
            );
            assert_eq!(status, 400, "{runtime}: {v}");
            assert_eq!(v["error"], "runtime must be a ws:// or wss:// URL");
        }
    }
    let (status, _) = d.call("GET", "/attach", None);
    assert_eq!(status, 200);
    drop(d);
    let _ = std::fs::remove_dir_all(&dir);
}
