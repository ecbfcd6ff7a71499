//! Contract §14, "boundaries that hold", the parts that need no browser: every admin
//! response but the console's carries the headers that keep script off the admin origin,
//! and every URL-bearing browser argument is checked before it reaches a browser, under
//! every grant but `owner`, however it is spelt. The chains against real chromium are in
//! `tests/chains.rs`.

mod common;

use common::{http, StubPod, TestDaemon};
use handnode::admin::{PUBLIC_PATHS, ROUTES};
use handnode::base::http_headers::API_HEADERS;
use serde_json::{json, Value};

fn header<'a>(headers: &'a [(String, String)], name: &str) -> Option<&'a str> {
    headers
        .iter()
        .find(|(k, _)| k.eq_ignore_ascii_case(name))
        .map(|(_, v)| v.as_str())
}

fn assert_api_headers(what: &str, headers: &[(String, String)]) {
    for (name, value) in API_HEADERS {
        assert_eq!(header(headers, name), Some(*value), "{what}: {name}");
    }
    let csp = header(headers, "Content-Security-Policy").unwrap();
    assert!(csp.contains("default-src 'none'") && csp.contains("frame-ancestors 'none'"));
}

#[test]
fn every_admin_response_but_the_console_forbids_script_sniffing_and_caching() {
    // One unauthenticated request per route: more than the throttle's default 10.
    let d = TestDaemon::with("api-headers", |c| c.limits.throttle_failures = 1000);
    // Every route of the table, with and without the token.
    // HEAD answers carry GET's headers and no body, which the test client cannot frame.
    for (method, path) in ROUTES.iter().filter(|(m, _)| *m != "HEAD") {
        let concrete = path.replace("{id}", "00000000-0000-4000-8000-000000000000");
        let body: Option<&[u8]> = (*method == "POST").then_some(b"{}");
        let ct = [("Content-Type", "application/json")];
        let (status, headers, _) = d.raw(method, &concrete, &ct, body);
        let is_console = *path == "/" || *path == "/console/{id}" && status == 200;
        if is_console {
            assert_ne!(
                header(&headers, "Content-Security-Policy"),
                Some(API_HEADERS[0].1),
                "the console keeps its own policy"
            );
            continue;
        }
        assert_api_headers(&format!("{method} {concrete} -> {status}"), &headers);
        if !PUBLIC_PATHS.contains(path) {
            let (status, headers, _) = http(d.addr, method, &concrete, &ct, body);
            assert_eq!(status, 401, "{method} {concrete}");
            assert_api_headers(&format!("{method} {concrete} without a token"), &headers);
        }
    }
    // The answers that come from the guard and the parser: 403, 404, 405, 415.
    type Case<'a> = (&'a str, &'a str, Vec<(&'a str, &'a str)>, u16);
    let cases: [Case; 4] = [
        ("GET", "/healthz", vec![("Host", "evil.example")], 403),
        ("GET", "/nope", vec![], 404),
        ("PUT", "/healthz", vec![], 405),
        ("POST", "/attach", vec![("Content-Type", "text/plain")], 415),
    ];
    for (method, path, extra, want) in cases {
        let body: Option<&[u8]> = (method == "POST").then_some(b"{}");
        let (status, headers, _) = d.raw(method, path, &extra, body);
        assert_eq!(status, want, "{method} {path}");
        assert_api_headers(&format!("{method} {path} -> {status}"), &headers);
    }
    // The long-poll of GET /approvals answers on its own thread; it carries them too.
    let (status, headers, _) = d.raw("GET", "/approvals?wait=1&seen=x", &[], None);
    assert_eq!(status, 200);
    assert_api_headers("GET /approvals?wait", &headers);
}

/// Spellings a browser reads as a refused scheme, each with that scheme.
const REFUSED: &[(&str, &str)] = &[
    ("view-source:file:///etc/passwd", "view-source"),
    ("VIEW-SOURCE:file:///etc/passwd", "view-source"),
    ("file:///etc/passwd", "file"),
    (" \u{1}file:///etc/passwd", "file"),
    ("javascript:fetch('/mcp')", "javascript"),
    (" JaVa\tScript:fetch('/mcp')", "javascript"),
    ("java\nscript:1", "javascript"),
    ("\u{0}javascript:1\u{1f}", "javascript"),
    ("data:text/html,<script>1</script>", "data"),
    ("blob:http://127.0.0.1/x", "blob"),
    ("filesystem:http://127.0.0.1/temporary/x", "filesystem"),
    ("chrome://version", "chrome"),
    ("chrome-extension://x/y", "chrome-extension"),
    ("devtools://devtools/x", "devtools"),
    ("about:srcdoc", "about"),
    ("not-invented-yet:x", "not-invented-yet"),
];

fn refusal(scheme: &str) -> String {
    format!("{} {scheme}:", handnode::rules::browser_url::REFUSAL)
}

fn call(conn: &mut common::PodConn, id: &mut u64, name: &str, args: Value) -> Value {
    *id += 1;
    conn.set_read_timeout(std::time::Duration::from_secs(30));
    conn.call_tool(json!(*id), name, args)
}

fn text(reply: &Value) -> (String, bool) {
    let r = &reply["result"];
    let t = r["content"]
        .as_array()
        .unwrap_or_else(|| panic!("{reply}"))
        .iter()
        .filter_map(|b| b["text"].as_str())
        .collect::<Vec<_>>()
        .join("\n");
    (t, r["isError"] == true)
}

/// Every URL-bearing field of every browser tool, with every refused spelling: the
/// refusal, and the tool never reached (`reached` says what the browser saw).
fn assert_refused_everywhere(
    conn: &mut common::PodConn,
    id: &mut u64,
    reached: &dyn Fn() -> String,
) {
    for (tool, fields) in handnode::profiles::BROWSER_URL_FIELDS {
        for field in *fields {
            for (url, scheme) in REFUSED {
                let mut args = json!({"action": "new"});
                args[field] = json!(url);
                let (t, err) = text(&call(conn, id, tool, args));
                assert!(err, "{tool}.{field} {url:?} was not refused: {t}");
                assert_eq!(t, refusal(scheme), "{tool}.{field} {url:?}");
            }
        }
    }
    let seen = reached();
    for (url, _) in REFUSED {
        assert!(!seen.contains(url), "{url:?} reached the browser: {seen}");
    }
}

/// A daemon whose throwaway browser is the fake one (it remembers the last URL it was sent),
/// and a `browser` grant attached to a stub pod: the daemon, the pod, its socket and the
/// browsers' dir (the caller removes it).
fn fake_browser_grant(
    tag: &str,
    session: &str,
) -> (TestDaemon, StubPod, common::PodConn, std::path::PathBuf) {
    let dir = std::path::PathBuf::from(format!("/tmp/hn{tag}-{}", std::process::id()));
    let fake = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/fixtures/fake-browser.sh"
    );
    let d = TestDaemon::with(tag, |c| {
        common::quiet_liveness(c);
        c.browser_command = Some(vec!["bash".into(), fake.into()]);
        c.browser_dir = Some(dir.clone());
    });
    let pod = StubPod::start();
    let (_, conn) = d.attached(&pod, session, "browser");
    (d, pod, conn, dir)
}

/// `browser_navigate` to `url` is answered `want` (isError), and the fake browser, which
/// remembers the last URL it was sent, still shows `page`: the URL never reached it.
fn assert_navigate_refused(
    conn: &mut common::PodConn,
    id: &mut u64,
    url: &str,
    want: &str,
    page: &str,
) {
    let (t, err) = text(&call(conn, id, "browser_navigate", json!({"url": url})));
    assert!(err, "{url:?}: {t}");
    assert_eq!(t, want, "{url:?}");
    let (t, _) = text(&call(conn, id, "browser_snapshot", json!({})));
    assert!(
        t.starts_with(&format!("page {page} ")),
        "{url:?} reached the browser: {t}"
    );
}

#[test]
fn a_browser_grant_opens_only_web_pages_in_its_own_browser() {
    let (_d, _pod, mut conn, dir) = fake_browser_grant("url-browser", "url-b");
    let mut id = 0;
    let page = "http://127.0.0.1:9/page";
    let (t, err) = text(&call(
        &mut conn,
        &mut id,
        "browser_navigate",
        json!({"url": page}),
    ));
    assert!(!err, "{t}");
    // The fake browser remembers the last URL it was sent: a refused one never arrives.
    let conn = &mut conn;
    for (url, scheme) in REFUSED {
        assert_navigate_refused(conn, &mut id, url, &refusal(scheme), page);
    }
    let (t, err) = text(&call(conn, &mut id, "browser_navigate", json!({"url": 7})));
    assert!(err && t == "url must be a string (a URL)", "{t}");
    for url in ["about:blank", " HTTPS://example.com\t", "example.com/x"] {
        let (t, err) = text(&call(
            conn,
            &mut id,
            "browser_navigate",
            json!({"url": url}),
        ));
        assert!(!err, "{url:?}: {t}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// Issue 35 #5, contract §21: the admin listener in every spelling a browser resolves to it
/// is refused before the browser is asked, and the same port elsewhere is not.
#[test]
fn a_browser_grant_cannot_open_the_admin_origin_in_any_spelling() {
    let (d, _pod, mut conn, dir) = fake_browser_grant("url-admin", "url-a");
    let port = d.addr.port();
    let mut id = 0;
    let page = "http://127.0.0.1:9/page";
    let (t, err) = text(&call(
        &mut conn,
        &mut id,
        "browser_navigate",
        json!({"url": page}),
    ));
    assert!(!err, "{t}");
    let spellings = [
        format!("http://x@127.0.0.1:{port}/healthz"),
        format!("http://x:y@127.0.0.1:{port}/"),
        format!("http://x@localhost:{port}/readyz"),
        format!("http://[::ffff:7f00:1]:{port}/healthz"),
        format!("http://2130706433:{port}/"),
        format!("http://0x7f.1:{port}/"),
        format!("http://0177.0.0.1:{port}/"),
        format!("http://127.1:{port}/"),
        format!("http://localhost.:{port}/"),
        format!("http://console.localhost:{port}/"),
        format!("http://0.0.0.0:{port}/"),
        format!("127.0.0.1:{port}/"),
    ];
    for url in &spellings {
        let want = handnode::rules::browser_url::ADMIN_REFUSAL;
        assert_navigate_refused(&mut conn, &mut id, url, want, page);
    }
    // Another port of the same host is a web page like any other.
    let other = format!("http://127.0.0.1:{}/", port.wrapping_add(1).max(1));
    let (t, err) = text(&call(
        &mut conn,
        &mut id,
        "browser_navigate",
        json!({"url": other}),
    ));
    assert!(!err, "{other}: {t}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// A Playwright-shaped MCP upstream on 127.0.0.1 (plain JSON answers) that records the
/// arguments of every `tools/call` it receives.
struct FakeUpstream {
    server: std::sync::Arc<tiny_http::Server>,
    calls: std::sync::Arc<std::sync::Mutex<Vec<Value>>>,
    url: String,
}

impl FakeUpstream {
    fn start() -> FakeUpstream {
        let server = std::sync::Arc::new(tiny_http::Server::http("127.0.0.1:0").unwrap());
        let port = server.server_addr().to_ip().unwrap().port();
        let calls = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let (s, log) = (server.clone(), calls.clone());
        std::thread::spawn(move || {
            while let Ok(mut rq) = s.recv() {
                let mut body = String::new();
                let _ = rq.as_reader().read_to_string(&mut body);
                let msg: Value = serde_json::from_str(&body).unwrap_or(Value::Null);
                let id = msg["id"].clone();
                let result = match msg["method"].as_str().unwrap_or("") {
                    "initialize" => json!({"protocolVersion": "2025-06-18",
                        "capabilities": {"tools": {}}, "serverInfo": {"name": "fake", "version": "0"}}),
                    "tools/list" => {
                        let tool = |n: &str| json!({"name": n, "inputSchema": {"type": "object"}});
                        json!({"tools": handnode::profiles::BROWSER_TOOL_CLASSES
                            .iter().map(|c| tool(c.name)).collect::<Vec<_>>()})
                    }
                    "tools/call" => {
                        log.lock().unwrap().push(msg["params"].clone());
                        json!({"content": [{"type": "text", "text": "done"}]})
                    }
                    _ => {
                        let _ = rq.respond(tiny_http::Response::empty(202));
                        continue;
                    }
                };
                let reply = json!({"jsonrpc": "2.0", "id": id, "result": result});
                let resp = tiny_http::Response::from_string(reply.to_string())
                    .with_header(
                        tiny_http::Header::from_bytes("Content-Type", "application/json").unwrap(),
                    )
                    .with_header(tiny_http::Header::from_bytes("Mcp-Session-Id", "s1").unwrap());
                let _ = rq.respond(resp);
            }
        });
        FakeUpstream {
            server,
            calls,
            url: format!("http://127.0.0.1:{port}/mcp"),
        }
    }

    fn seen(&self) -> String {
        Value::from(self.calls.lock().unwrap().clone()).to_string()
    }
}

impl Drop for FakeUpstream {
    fn drop(&mut self) {
        self.server.unblock();
    }
}

#[test]
fn grants_over_the_shared_upstream_open_only_web_pages_and_the_owner_anything() {
    let up = FakeUpstream::start();
    let d = TestDaemon::with("url-upstream", |c| {
        common::quiet_liveness(c);
        c.upstreams = vec![("browser".into(), up.url.clone())];
    });
    // The owner's /mcp lists the upstream's tools once its first refresh answered.
    common::poll_until(
        || {
            let rpc = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list"});
            d.call("POST", "/mcp", Some(&rpc)).1
        },
        |list| list.to_string().contains("\"browser_tabs\""),
        |list| format!("watchdog: the upstream never listed: {list}"),
    );
    let pod = StubPod::start();
    let custom = json!({"runtime": pod.runtime(), "session": "url-c", "profile": "custom",
        "allow": ["browser_navigate", "browser_snapshot", "browser_tabs"], "secret": "s"});
    let (_, mut c) = d.attached_with(&pod, custom);
    let mut id = 0;
    assert_refused_everywhere(&mut c, &mut id, &|| up.seen());
    let (_, mut desk) = d.attached(&pod, "url-d", "desktop");
    assert_refused_everywhere(&mut desk, &mut id, &|| up.seen());
    let (t, err) = text(&call(
        &mut c,
        &mut id,
        "browser_navigate",
        json!({"url": "https://example.com/"}),
    ));
    assert!(!err, "{t}");
    assert!(up.seen().contains("https://example.com/"));
    // A gated browser tool: a refused URL is refused at once, nobody is asked.
    let gated = json!({"runtime": pod.runtime(), "session": "url-g", "profile": "desktop",
        "approve": ["browser_navigate"], "secret": "s"});
    let (_, mut g) = d.attached_with(&pod, gated);
    let (t, err) = text(&call(
        &mut g,
        &mut id,
        "browser_navigate",
        json!({"url": "view-source:file:///etc/hostname"}),
    ));
    assert!(err && t == refusal("view-source"), "{t}");
    let (_, pending) = d.call("GET", "/approvals", None);
    assert_eq!(pending["approvals"], json!([]), "{pending}");
    // The box's owner is not a grant: its own browser opens what it is told.
    let rpc = json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call",
        "params": {"name": "browser_navigate", "arguments": {"url": "view-source:file:///etc/hostname"}}});
    let (status, reply) = d.call("POST", "/mcp", Some(&rpc));
    assert_eq!(status, 200, "{reply}");
    assert_ne!(reply["result"]["isError"], true, "{reply}");
    assert!(up.seen().contains("view-source:file:///etc/hostname"));
}

/// `doctor` warns about an upstream whose process does not block the admin listener's
/// origins, and names them (the positive case, with `scripts/upstream.sh`, is in
/// tests/chains.rs).
#[test]
fn doctor_warns_when_the_upstream_does_not_block_the_admin_origins() {
    let port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let mut child = std::process::Command::new("python3")
        .args([
            "-c",
            "import socket,sys,time\ns=socket.socket()\ns.bind(('127.0.0.1',int(sys.argv[1])))\ns.listen()\nprint('up',flush=True)\ntime.sleep(60)",
            &port.to_string(),
            "--blocked-origins",
            "127.0.0.1:8795",
        ])
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("python3 (scripts/ci/packages.sh installs it)");
    let mut line = String::new();
    std::io::BufRead::read_line(
        &mut std::io::BufReader::new(child.stdout.take().unwrap()),
        &mut line,
    )
    .unwrap();
    assert_eq!(line.trim(), "up");
    let env: std::collections::HashMap<String, String> = [
        (
            "HANDNODE_UPSTREAM".to_string(),
            format!("browser=http://127.0.0.1:{port}/mcp"),
        ),
        ("HANDNODE_LISTEN".to_string(), "127.0.0.1:8795".to_string()),
    ]
    .into();
    let checks = handnode::ops::doctor::upstream_origin_checks(&env);
    let _ = child.kill();
    let _ = child.wait();
    assert_eq!(checks.len(), 1, "{checks:?}");
    let c = &checks[0];
    assert_eq!(c.status, handnode::ops::doctor::Status::Warn, "{c:?}");
    assert!(c.detail.contains("localhost:8795"), "{c:?}");
    assert!(
        !c.detail.contains("127.0.0.1:8795,"),
        "blocked, so not named: {c:?}"
    );
    assert!(c.fix.as_deref().unwrap().contains("scripts/upstream.sh"));
}
