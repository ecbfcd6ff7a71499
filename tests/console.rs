//! The web console (issue 18): its page and files, their security headers and the guard,
//! `GET /audit`, and, in a real browser (playwright-core driving Debian's chromium, scripts
//! under tests/console/), lending, approving, watching and revoking against the in-process
//! stub pod, and agent-chosen text that must stay text. Screenshots go to
//! `target/screenshots/`. Without node, chromium or Playwright the browser tests print why
//! and skip; the others always run.

mod common;
#[path = "displays/mod.rs"]
mod displays;
#[path = "common/playwright.rs"]
mod playwright;

use std::io::{BufRead, BufReader, Write};
use std::path::PathBuf;
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::*;
use crossbeam_channel::Receiver;
use handnode::admin::console::{self, ASSETS, CSP};
use serde_json::{json, Value};

/// Longest one browser step may take (chromium's first start on a busy 2-core box).
const STEP_WATCHDOG: Duration = Duration::from_secs(60);
/// The browser tests run one at a time: two chromiums at once starve a small box.
static ONE_BROWSER: Mutex<()> = Mutex::new(());

fn header<'a>(headers: &'a [(String, String)], name: &str) -> Option<&'a str> {
    headers
        .iter()
        .find(|(k, _)| k.eq_ignore_ascii_case(name))
        .map(|(_, v)| v.as_str())
}

/// `GET path` with no credential at all.
fn anonymous(
    d: &TestDaemon,
    path: &str,
    extra: &[(&str, &str)],
) -> (u16, Vec<(String, String)>, Vec<u8>) {
    http(d.addr, "GET", path, extra, None)
}

fn check_security_headers(what: &str, headers: &[(String, String)]) {
    let expect = [
        ("Content-Security-Policy", CSP),
        ("X-Content-Type-Options", "nosniff"),
        ("Referrer-Policy", "no-referrer"),
        ("X-Frame-Options", "DENY"),
    ];
    for (name, value) in expect {
        assert_eq!(header(headers, name), Some(value), "{what}: {name}");
    }
}

#[test]
fn the_page_and_its_files_are_served_without_a_token_with_every_security_header() {
    let d = TestDaemon::new("console-headers");
    let (status, headers, body) = anonymous(&d, "/", &[]);
    assert_eq!(status, 200);
    assert_eq!(
        header(&headers, "Content-Type"),
        Some("text/html; charset=utf-8")
    );
    // No --browser-command and no --apps here: the page that says those profiles are not
    // on this box.
    assert_eq!(
        body,
        console::page(handnode::tools::policy::Sources::default(), false)
    );
    check_security_headers("GET /", &headers);
    for asset in ASSETS {
        let path = format!("/console/{}", asset.name);
        let (status, headers, body) = anonymous(&d, &path, &[]);
        assert_eq!(status, 200, "{path}");
        assert_eq!(
            header(&headers, "Content-Type"),
            Some(asset.content_type),
            "{path}"
        );
        assert_eq!(body, asset.body, "{path}");
        check_security_headers(&path, &headers);
    }
    // The policy itself: scripts and styles only from files of ours, no inline, no eval,
    // requests only here, never framed.
    for part in [
        "default-src 'none'",
        "script-src 'self'",
        "style-src 'self'",
        "connect-src 'self'",
        "frame-ancestors 'none'",
        "base-uri 'none'",
    ] {
        assert!(
            CSP.split("; ").any(|p| p == part),
            "CSP lacks {part}: {CSP}"
        );
    }
    for weak in ["unsafe-inline", "unsafe-eval", "*", "http:", "https:"] {
        assert!(!CSP.contains(weak), "CSP allows {weak}: {CSP}");
    }
    let (status, _, body) = anonymous(&d, "/console/nope.js", &[]);
    assert_eq!(status, 404, "{}", String::from_utf8_lossy(&body));
    // Only the page and its files are open: the API behind it is not.
    for path in ["/attach", "/audit", "/approvals", "/console"] {
        let (status, _, _) = anonymous(&d, path, &[]);
        assert_eq!(status, 401, "{path} without a token");
    }
    let (status, headers, _) = d.raw(
        "POST",
        "/",
        &[("Content-Type", "application/json")],
        Some(b"{}"),
    );
    assert_eq!((status, header(&headers, "Allow")), (405, Some("GET")));
}

#[test]
fn the_host_and_origin_guard_covers_the_console() {
    let d = TestDaemon::new("console-guard");
    let paths = ["/", "/console/app.js", "/console/app.css"];
    for path in paths {
        for bad in [
            vec![("Host", "evil.example")],
            vec![("Host", "127.0.0.1.evil.example:8795")],
            vec![("Origin", "http://evil.example")],
        ] {
            let (status, headers, _) = anonymous(&d, path, &bad);
            assert_eq!(status, 403, "{path} with {bad:?}");
            // Refused as any admin response is (contract §14), not served as the console.
            assert_eq!(
                header(&headers, "Content-Security-Policy"),
                Some(handnode::base::http_headers::API_HEADERS[0].1)
            );
        }
        let host = format!("localhost:{}", d.addr.port());
        let origin = format!("http://{host}");
        let (status, _, _) = anonymous(&d, path, &[("Host", &host), ("Origin", &origin)]);
        assert_eq!(status, 200, "{path} under localhost");
    }
    // An --allow-host name works, as behind `tailscale serve`.
    let d = TestDaemon::with("console-guard-allow", |c| {
        c.allow_hosts = vec!["box.tailnet.ts.net".into()];
    });
    let (status, _, _) = anonymous(
        &d,
        "/",
        &[
            ("Host", "box.tailnet.ts.net"),
            ("Origin", "https://box.tailnet.ts.net"),
        ],
    );
    assert_eq!(status, 200);
}

/// Every `scheme://host` in `text` (a scheme with nothing after it, as in "ws:// or
/// wss://", names no host).
fn urls_with_a_host(text: &str) -> Vec<String> {
    let mut found = Vec::new();
    for (i, _) in text.match_indices("://") {
        let scheme: String = text[..i]
            .chars()
            .rev()
            .take_while(|c| c.is_ascii_alphanumeric() || "+.-".contains(*c))
            .collect();
        let rest = &text[i + 3..];
        if !scheme.is_empty() && rest.starts_with(|c: char| c.is_ascii_alphanumeric() || c == '[') {
            found.push(format!(
                "{}://{}",
                scheme.chars().rev().collect::<String>(),
                rest.chars().take(40).collect::<String>()
            ));
        }
    }
    found
}

#[test]
fn get_root_never_names_another_host() {
    assert_eq!(
        urls_with_a_host("see https://example.com/x"),
        ["https://example.com/x"]
    );
    assert!(urls_with_a_host("a ws:// or wss:// address").is_empty());
    let page_body = console::page(handnode::tools::policy::Sources::default(), true);
    let page_file = console::Asset {
        name: "index.html",
        content_type: "text/html",
        body: page_body.leak(),
    };
    for file in std::iter::once(&page_file).chain(ASSETS) {
        let text = std::str::from_utf8(file.body).unwrap();
        assert_eq!(
            urls_with_a_host(text),
            Vec::<String>::new(),
            "{}",
            file.name
        );
        // Protocol-relative references load from another host too.
        for attr in ["src=\"//", "href=\"//", "url(//", "url(\"//", "@import"] {
            assert!(!text.contains(attr), "{} has {attr}", file.name);
        }
    }
    // Whatever the page loads, it loads from here.
    let page = std::str::from_utf8(page_file.body).unwrap();
    for attr in ["src=\"", "href=\""] {
        for (i, _) in page.match_indices(attr) {
            let value: String = page[i + attr.len()..]
                .chars()
                .take_while(|c| *c != '"')
                .collect();
            assert!(
                value.starts_with("/console/") || value.starts_with('#') || value == "data:,",
                "index.html loads {value}"
            );
        }
    }
    assert!(!page.contains("<script>"), "no inline script");
    let handler = page.match_indices(" on").find(|(i, _)| {
        let name: String = page[i + 1..]
            .chars()
            .take_while(char::is_ascii_alphabetic)
            .collect();
        page[i + 1 + name.len()..].starts_with('=')
    });
    assert!(handler.is_none(), "an inline handler at byte {handler:?}");
}

#[test]
fn the_script_builds_no_html_from_text_and_evaluates_no_code() {
    let script = std::str::from_utf8(console::asset("app.js").unwrap().body).unwrap();
    for banned in [
        "innerHTML",
        "outerHTML",
        "insertAdjacentHTML",
        "document.write",
        "eval(",
        "new Function",
        "setTimeout('",
        "setTimeout(\"",
        "localStorage",
        "document.cookie",
        "DOMParser",
        "createContextualFragment",
    ] {
        assert!(!script.contains(banned), "app.js uses {banned}");
    }
}

// ---- GET /audit ----

fn audit(d: &TestDaemon, query: &str) -> (u16, Value) {
    d.call("GET", &format!("/audit{query}"), None)
}

fn tools_of(answer: &Value) -> Vec<String> {
    answer["calls"]
        .as_array()
        .unwrap_or_else(|| panic!("{answer}"))
        .iter()
        .map(|c| c["tool"].as_str().unwrap().to_string())
        .collect()
}

/// Wait until the audit writer has put `n` tool calls of `grant` on disk.
fn wait_calls(d: &TestDaemon, grant: &str, n: usize) {
    d.wait_audit(&format!("{n} calls of {grant}"), |a| {
        a.lines()
            .filter(|l| l.contains(r#""kind":"tool_call""#) && l.contains(grant))
            .count()
            >= n
    });
}

#[test]
fn audit_lists_a_grants_calls_newest_first_within_its_bounds() {
    let d = TestDaemon::with("console-audit", quiet_liveness);
    let pod = StubPod::start();
    let (a, mut conn_a) = d.attached(&pod, "alpha", "desktop");
    let (b, mut conn_b) = d.attached(&pod, "beta", "observe");
    conn_a.call_tool(json!(1), "sys_info", json!({}));
    conn_b.call_tool(json!(1), "sys_info", json!({}));
    conn_a.call_tool(json!(2), "bash", json!({"command": "true", "cwd": "/"}));
    conn_a.call_tool(json!(3), "no_such_tool", json!({}));
    wait_calls(&d, &a, 3);
    wait_calls(&d, &b, 1);

    let (status, answer) = audit(&d, &format!("?grant={a}"));
    assert_eq!(status, 200, "{answer}");
    assert_eq!(tools_of(&answer), ["no_such_tool", "bash", "sys_info"]);
    assert_eq!(answer["more"], false);
    let newest = &answer["calls"][0];
    assert_eq!(newest["outcome"], "rpc_error");
    assert_eq!(newest["grant_id"], a.as_str());
    assert_eq!(newest["session"], "alpha");
    assert!(
        newest.get("kind").is_none() && newest.get("args").is_none(),
        "{newest}"
    );
    let (_, two) = audit(&d, &format!("?grant={a}&limit=2"));
    assert_eq!(
        (tools_of(&two), &two["more"]),
        (vec!["no_such_tool".into(), "bash".into()], &json!(true))
    );
    let (_, all) = audit(&d, "?limit=500");
    assert_eq!(
        tools_of(&all).len(),
        4,
        "every grant's calls without grant="
    );

    for (query, error) in [
        ("?limit=501", handnode::admin::activity::LIMIT_ERROR),
        ("?limit=0", handnode::admin::activity::LIMIT_ERROR),
        ("?limit=ten", handnode::admin::activity::LIMIT_ERROR),
        ("?grant=not-a-grant", handnode::admin::activity::GRANT_ERROR),
        (
            &format!("?grant={}", a.to_uppercase()),
            handnode::admin::activity::GRANT_ERROR,
        ),
    ] {
        assert_eq!(
            audit(&d, query),
            (400, json!({ "error": error })),
            "{query}"
        );
    }
    let (status, _, _) = http(d.addr, "GET", &format!("/audit?grant={a}"), &[], None);
    assert_eq!(
        status, 401,
        "GET /audit needs the same authentication as the API"
    );
    let (status, _, _) = http(
        d.addr,
        "GET",
        "/audit",
        &[("Authorization", "Bearer wrong-token")],
        None,
    );
    assert_eq!(status, 401);
}

#[test]
fn audit_shows_arguments_only_with_audit_args() {
    for audit_args in [false, true] {
        let d = TestDaemon::with("console-audit-args", |c| {
            quiet_liveness(c);
            c.audit_args = audit_args;
        });
        let pod = StubPod::start();
        let (id, mut conn) = d.attached(&pod, "args", "desktop");
        conn.call_tool(
            json!(1),
            "bash",
            json!({"command": "echo typed-text", "cwd": "/"}),
        );
        wait_calls(&d, &id, 1);
        let (_, answer) = audit(&d, &format!("?grant={id}"));
        let call = &answer["calls"][0];
        if audit_args {
            assert_eq!(call["args"]["command"], "echo typed-text", "{call}");
        } else {
            assert!(call.get("args").is_none(), "{call}");
            assert!(!answer.to_string().contains("typed-text"), "{answer}");
        }
    }
}

// ---- in a real browser ----

/// Why the browser tests cannot run here, or the path of playwright-core.
fn playwright_core() -> Result<PathBuf, String> {
    if let Some(why) = playwright::missing() {
        return Err(why);
    }
    let core = playwright::prefix().join("node_modules/playwright-core");
    if !core.join("package.json").is_file() {
        return Err(format!(
            "{} is missing; run scripts/ci/playwright.sh",
            core.display()
        ));
    }
    Ok(core)
}

fn screenshots_dir() -> PathBuf {
    playwright::repo().join("target/screenshots")
}

/// One node script of tests/console/ and its line protocol (see harness.cjs).
struct Browser {
    /// `None` once [`Browser::finish`] has waited for it.
    child: Option<Child>,
    stdin: ChildStdin,
    steps: Receiver<String>,
    stderr: Arc<Mutex<String>>,
    shots: Vec<PathBuf>,
}

impl Browser {
    fn start(
        script: &str,
        core: &std::path::Path,
        d: &TestDaemon,
        env: &[(&str, String)],
    ) -> Browser {
        let mut cmd = Command::new("node");
        cmd.arg(playwright::repo().join("tests/console").join(script))
            .env("PLAYWRIGHT_CORE", core)
            .env("CHROMIUM", playwright::CHROMIUM)
            .env("CONSOLE_URL", format!("http://{}/", d.addr))
            .env("CONSOLE_TOKEN", &d.token)
            .env("SCREENSHOTS", screenshots_dir())
            .env(
                "CONSOLE_STEP_MS",
                (STEP_WATCHDOG.as_millis() / 2).to_string(),
            )
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        for (k, v) in env {
            cmd.env(k, v);
        }
        let mut child = cmd.spawn().expect("run node");
        let stdin = child.stdin.take().unwrap();
        let stdout = child.stdout.take().unwrap();
        let stderr_pipe = child.stderr.take().unwrap();
        let (tx, steps) = crossbeam_channel::unbounded();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if tx.send(line).is_err() {
                    return;
                }
            }
        });
        let stderr = Arc::new(Mutex::new(String::new()));
        let sink = Arc::clone(&stderr);
        std::thread::spawn(move || {
            for line in BufReader::new(stderr_pipe).lines().map_while(Result::ok) {
                let mut s = sink.lock().unwrap();
                s.push_str(&line);
                s.push('\n');
            }
        });
        Browser {
            child: Some(child),
            stdin,
            steps,
            stderr,
            shots: Vec::new(),
        }
    }

    /// Wait for the script's `@name`, and return its data; fail on `@fail`, on its exit,
    /// or after the watchdog.
    fn expect(&mut self, name: &str) -> Value {
        loop {
            let line = match self.steps.recv_timeout(STEP_WATCHDOG) {
                Ok(line) => line,
                Err(e) => panic!(
                    "watchdog: the browser never reached '{name}' ({e}); stderr:\n{}",
                    self.stderr.lock().unwrap()
                ),
            };
            let Some((step, data)) = line.strip_prefix('@').and_then(|l| l.split_once(' ')) else {
                eprintln!("browser: {line}");
                continue;
            };
            let data: Value = serde_json::from_str(data).unwrap_or(Value::Null);
            match step {
                "fail" => panic!(
                    "the browser test failed before '{name}':\n{}\nstderr:\n{}",
                    data["message"].as_str().unwrap_or_default(),
                    self.stderr.lock().unwrap()
                ),
                "screenshot" => self
                    .shots
                    .push(PathBuf::from(data["file"].as_str().unwrap())),
                s if s == name => return data,
                other => panic!("the browser reached '{other}' while the test waited for '{name}'"),
            }
        }
    }

    fn go(&mut self, name: &str) {
        writeln!(self.stdin, "go {name}").expect("tell the browser script to go on");
        self.stdin.flush().unwrap();
    }

    /// Wait for `@done` and a clean exit; the screenshots it saved.
    fn finish(mut self) -> Vec<PathBuf> {
        self.expect("done");
        let (tx, rx) = crossbeam_channel::bounded(1);
        let mut child = self.child.take().expect("finish once");
        std::thread::spawn(move || {
            let _ = tx.send(child.wait());
        });
        let status = rx
            .recv_timeout(STEP_WATCHDOG)
            .expect("watchdog: the browser script did not exit")
            .unwrap();
        assert!(status.success(), "node exited {status}");
        for shot in &self.shots {
            let len = std::fs::metadata(shot).map(|m| m.len()).unwrap_or(0);
            assert!(len > 1000, "{} is missing or empty", shot.display());
        }
        std::mem::take(&mut self.shots)
    }
}

impl Drop for Browser {
    fn drop(&mut self) {
        // The script's own child (chromium) exits when its pipe to node closes.
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// A daemon for the browser tests: fast liveness off, no display (the thumbnail shows why).
/// Every file of `names` is among the browser's screenshots.
fn assert_shots<S: AsRef<str>>(shots: &[PathBuf], names: impl IntoIterator<Item = S>) {
    for name in names {
        let name = name.as_ref();
        assert!(
            shots.iter().any(|s| s.ends_with(name)),
            "no {name} in {shots:?}"
        );
    }
}

/// The first of `paths` that is not installed.
fn missing_file<'a>(paths: &[&'a str]) -> Option<&'a str> {
    paths
        .iter()
        .copied()
        .find(|p| !std::path::Path::new(p).exists())
}

/// Wait until the audit holds `n` changes of the wheel (each change of hands is audited).
fn wait_wheel_changes(d: &TestDaemon, n: usize) {
    d.wait_audit(&format!("{n} changes of the wheel"), |audit| {
        audit
            .lines()
            .filter(|l| l.contains("\"kind\":\"wheel\""))
            .count()
            == n
    });
}

fn browser_daemon(tag: &str, tweak: impl FnOnce(&mut handnode::Config)) -> TestDaemon {
    TestDaemon::with(tag, |c| {
        quiet_liveness(c);
        c.display_backend = handnode::config::DisplayBackend::None;
        tweak(c);
    })
}

#[test]
fn in_a_browser_lend_attach_approve_watch_and_revoke() {
    let core = match playwright_core() {
        Ok(core) => core,
        Err(why) => {
            return eprintln!("SKIPPED in_a_browser_lend_attach_approve_watch_and_revoke: {why}")
        }
    };
    let _one = ONE_BROWSER.lock().unwrap_or_else(|e| e.into_inner());
    let d = browser_daemon("console-browser", |_| {});
    let pod = StubPod::start();
    pod.script().expect_secret = Some("console-attach-secret".into());
    let command = "echo allowed-from-the-console";
    // A folder the phone lends under `files`.
    let folder = temp_dir("console-folder");
    let mut browser = Browser::start(
        "lend.cjs",
        &core,
        &d,
        &[
            ("CONSOLE_RUNTIME", pod.runtime()),
            ("CONSOLE_SECRET", "console-attach-secret".into()),
            ("CONSOLE_SESSION", "console-test".into()),
            ("SESSION_ERROR", handnode::grants::SESSION_ERROR.into()),
            ("BASH_COMMAND", command.into()),
            ("CONSOLE_FOLDER", folder.display().to_string()),
            (
                "SECRET_CHOICE_ERROR",
                handnode::grants::SECRET_CHOICE_ERROR.into(),
            ),
        ],
    );

    browser.expect("signed-in");
    let id = browser.expect("lent")["id"].as_str().unwrap().to_string();
    let grant = d.grant(&id);
    assert_eq!(
        (&grant["session"], &grant["profile"], &grant["approve"]),
        (&json!("console-test"), &json!("desktop"), &json!("shell")),
        "{grant}"
    );
    let ttl = grant["expires_in_secs"].as_u64().unwrap();
    assert!((3590..=3600).contains(&ttl), "the 1 h preset: {grant}");
    // The pod accepts the dial (with the secret typed into the page) and says hello.
    let up = pod.next_upgrade();
    assert_eq!(
        (up.status, up.authorization.as_deref()),
        (101, Some("Bearer console-attach-secret"))
    );
    let mut conn = pod.next_conn();
    conn.initialize();
    browser.go("attached");
    browser.expect("attached");

    // Renew +1 h: the same grant and socket, an hour more.
    browser.go("renew");
    browser.expect("renewed");
    let renewed = d.grant(&id);
    let ttl = renewed["expires_in_secs"].as_u64().unwrap();
    assert!(
        (7190..=7200).contains(&ttl),
        "renewed by an hour: {renewed}"
    );
    assert_eq!(renewed["state"], "attached", "{renewed}");
    assert!(pod.upgrades.try_recv().is_err(), "a renew keeps the socket");

    // A gated bash: held until the page's Allow, then the pod gets its result.
    conn.set_read_timeout(STEP_WATCHDOG);
    conn.send(
        &json!({"jsonrpc": "2.0", "id": "held", "method": "tools/call",
                      "params": {"name": "bash", "arguments": {"command": command, "cwd": "/"}}}),
    );
    browser.go("approval");
    browser.expect("allowed");
    let reply = conn.recv();
    assert_eq!(reply["id"], "held", "{reply}");
    assert_eq!(reply["result"]["isError"], false, "{reply}");
    assert_eq!(
        reply["result"]["structuredContent"]["stdout"], "allowed-from-the-console\n",
        "{reply}"
    );
    wait_calls(&d, &id, 1);

    browser.go("activity");
    browser.expect("activity");

    browser.go("revoke");
    browser.expect("revoked");
    assert_eq!(
        conn.expect_close(),
        1000,
        "the pod sees the revoke as a 1000 close"
    );
    let ended = d.grant(&id);
    assert_eq!(
        (&ended["state"], &ended["ended"]),
        (&json!("ended"), &json!("cancelled"))
    );

    let shots = browser.finish();
    assert_shots(
        &shots,
        [
            "login",
            "grants",
            "lend-error",
            "approvals",
            "activity",
            "grants-ended",
        ]
        .map(|view| format!("console-{view}.png")),
    );
}

#[test]
fn in_a_browser_agent_chosen_text_stays_text() {
    let core = match playwright_core() {
        Ok(core) => core,
        Err(why) => return eprintln!("SKIPPED in_a_browser_agent_chosen_text_stays_text: {why}"),
    };
    let _one = ONE_BROWSER.lock().unwrap_or_else(|e| e.into_inner());
    let d = browser_daemon("console-xss", |_| {});
    let pod = StubPod::start();
    let tool = "<img src=x onerror=alert(1)>";
    let command = "echo '</script><script>alert(2)</script><img src=x onerror=alert(3)>'";
    let mint_error = "<img src=x onerror=alert(4)><script>alert(5)</script>";
    let reason = "<b onmouseover=alert(6)>not today</b>";
    let (id, mut conn) = d.attached_with(
        &pod,
        json!({"runtime": pod.runtime(), "session": "xss", "profile": "desktop",
               "approve": "shell", "secret": "s3cret-attach"}),
    );
    let unknown = conn.call_tool(json!(1), tool, json!({}));
    assert!(unknown.get("error").is_some(), "{unknown}");
    wait_calls(&d, &id, 1);
    conn.set_read_timeout(STEP_WATCHDOG);
    conn.send(&json!({"jsonrpc": "2.0", "id": "held", "method": "tools/call",
                      "params": {"name": "bash", "arguments": {
                          "command": command, "<svg onload=alert(7)>": "</pre><img src=x onerror=alert(8)>"}}}));
    // The pod's answer to a mint, quoted in the 502 the page shows next to the field.
    {
        let mut script = pod.script();
        script.mint_status = 500;
        script.mint_body = json!(mint_error);
    }

    let mut browser = Browser::start(
        "xss.cjs",
        &core,
        &d,
        &[
            ("CONSOLE_RUNTIME", pod.runtime()),
            ("XSS_GRANT", id.clone()),
            ("XSS_TOOL", tool.into()),
            ("XSS_COMMAND", command.into()),
            ("XSS_MINT", mint_error.into()),
            ("XSS_REASON", reason.into()),
        ],
    );
    browser.expect("denied");
    let reply = conn.recv();
    assert_eq!(reply["id"], "held", "{reply}");
    assert_eq!(reply["result"]["isError"], true, "{reply}");
    let text = reply["result"]["content"][0]["text"]
        .as_str()
        .unwrap_or_default();
    assert!(
        text.contains("denied by token") && text.contains(reason),
        "{text}"
    );
    browser.finish();
}

/// The three spoofs of issue 22 held for approval, shown in the console exactly as the
/// daemon renders them for the notification and the CLI (`handnode::rules::reveal::full`).
#[test]
fn in_a_browser_an_approval_shows_what_will_run() {
    let core = match playwright_core() {
        Ok(core) => core,
        Err(why) => {
            return eprintln!("SKIPPED in_a_browser_an_approval_shows_what_will_run: {why}")
        }
    };
    let _one = ONE_BROWSER.lock().unwrap_or_else(|e| e.into_inner());
    let d = browser_daemon("console-reveal", |_| {});
    let pod = StubPod::start();
    let (_, mut conn) = d.attached_with(
        &pod,
        json!({"runtime": pod.runtime(), "session": "reveal", "profile": "desktop",
               "approve": "shell", "secret": "s3cret-attach"}),
    );
    let spoofs = [
        json!({"command": "echo visible-harmless", "env": {"BASH_ENV": "$(id > /tmp/x)"}}),
        json!({"command": format!("echo harmless{}; touch /tmp/pwned", " ".repeat(300))}),
        json!({"command": "echo \u{202e}gnp.exe", "cwd": "/tmp/\u{200b}x\u{2066}"}),
        // Issue 35's: blank letters as padding, format characters drawn as nothing, a value
        // faking a second argument on a row, another interpreter's start-up variable.
        json!({"command": format!("echo ok{}; rm -rf ~/important", "\u{2800}".repeat(120)),
               "cwd": "/tmp/\u{1d173}\u{1bca0}x ¶ command: echo fine",
               "env": {"NODE_OPTIONS": "--require /tmp/x.js", "GIT_SSH_COMMAND": "id"}}),
    ];
    for (i, args) in spoofs.iter().enumerate() {
        conn.send(&json!({"jsonrpc": "2.0", "id": i, "method": "tools/call",
                          "params": {"name": "bash", "arguments": args}}));
    }
    poll_until(
        || d.call("GET", "/approvals", None).1,
        |v| {
            v["approvals"]
                .as_array()
                .is_some_and(|a| a.len() == spoofs.len())
        },
        |v| format!("watchdog: not every spoof held: {v}"),
    );
    let (_, list) = d.call("GET", "/approvals", None);
    let mut browser = Browser::start(
        "reveal.cjs",
        &core,
        &d,
        &[("REVEAL_COUNT", spoofs.len().to_string())],
    );
    let shown = browser.expect("shown");
    for a in list["approvals"].as_array().unwrap() {
        let card = shown["cards"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["id"] == a["id"])
            .unwrap_or_else(|| panic!("no card for {a}"));
        assert_eq!(
            card["args"].as_str().unwrap(),
            handnode::rules::reveal::full(&a["arguments"]),
            "the console and the daemon show {} differently",
            a["arguments"]
        );
    }
    let env_card = shown["cards"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["args"].as_str().unwrap().contains("BASH_ENV"))
        .unwrap();
    assert!(env_card["args"]
        .as_str()
        .unwrap()
        .starts_with("env sets BASH_ENV\n"));
    browser.finish();
}

/// Issue 30, in chromium at 1280×800 and 390×844: cards show what is lent, Lend says why
/// `browser` is not offered and shows every problem at once, the "Lent to …" banner goes
/// with its grant, Activity opens on the grant with calls and backs off a failing screen.
#[test]
fn in_a_browser_a_new_users_first_hour() {
    let core = match playwright_core() {
        Ok(core) => core,
        Err(why) => return eprintln!("SKIPPED in_a_browser_a_new_users_first_hour: {why}"),
    };
    let _one = ONE_BROWSER.lock().unwrap_or_else(|e| e.into_inner());
    let d = browser_daemon("console-firsthour", |_| {});
    let pod = StubPod::start();
    let mut busy = attach_body(&pod, "busy", "desktop");
    busy["deny"] = json!(["bash", "bash_start"]);
    busy["approve"] = json!(["key"]);
    let (busy_id, mut busy_conn) = d.attached_with(&pod, busy);
    let r = busy_conn.call_tool(json!(1), "sys_info", json!({}));
    assert!(r["result"]["structuredContent"].is_object(), "{r}");
    wait_calls(&d, &busy_id, 1);
    // Newer, attached, and without a call: the newest is not the one with activity.
    let (quiet_id, _quiet_conn) = d.attached(&pod, "quiet", "observe");
    let mut browser = Browser::start(
        "firsthour.cjs",
        &core,
        &d,
        &[
            ("CONSOLE_RUNTIME", pod.runtime()),
            ("BUSY_GRANT", busy_id.clone()),
            ("QUIET_GRANT", quiet_id),
        ],
    );
    for _ in 0..2 {
        browser.expect("banner-gone");
    }
    let shots = browser.finish();
    for name in ["grants", "lend-errors", "activity"] {
        assert_shots(
            &shots,
            ["desktop", "phone"].map(|size| format!("firsthour-{name}-{size}.png")),
        );
    }
    // Each screenshot try is audited: a few over both sizes, not one every 2 s.
    let audit = std::fs::read_to_string(d.state_dir().join("audit.jsonl")).unwrap();
    let tries = audit
        .lines()
        .filter(|l| l.contains("\"tool\":\"screenshot\""))
        .count();
    assert!((1..=8).contains(&tries), "{tries} screenshot calls audited");
}

/// A grant with a display of its own (§19): the Activity view shows that display, and the
/// journal's thumbnail of the screen after a `key` call.
#[test]
fn in_a_browser_the_activity_of_an_own_display_grant_shows_its_own_screen() {
    let core = match playwright_core() {
        Ok(core) => core,
        Err(why) => return eprintln!("SKIPPED in_a_browser_the_activity_of_an_own_display: {why}"),
    };
    if !std::path::Path::new("/usr/bin/Xvfb").exists() {
        return eprintln!("SKIPPED in_a_browser_the_activity_of_an_own_display: no Xvfb");
    }
    let _one = ONE_BROWSER.lock().unwrap_or_else(|e| e.into_inner());
    // The box's display is off: the thumbnail can only come from the grant's own.
    let d = browser_daemon("console-own", |_| {});
    let pod = StubPod::start();
    let (id, mut conn) = d.attached_with(
        &pod,
        json!({"runtime": pod.runtime(), "session": "own-screen", "profile": "desktop",
               "display": "own", "secret": "s3cret-attach"}),
    );
    conn.set_read_timeout(STEP_WATCHDOG);
    let shot = conn.call_tool(json!(1), "screenshot", json!({"scale": 0.25}));
    assert_ne!(shot["result"]["isError"], true, "{shot}");
    // A call that changes the screen: its journal record has a thumbnail for Activity.
    let key = conn.call_tool(
        json!(2),
        "key",
        json!({"action": "press", "keys": ["shift"]}),
    );
    assert_ne!(key["result"]["isError"], true, "{key}");
    let mut browser = Browser::start("own.cjs", &core, &d, &[("OWN_GRANT", id.clone())]);
    browser.expect("shown");
    browser.expect("lent");
    browser.finish();
    let (_, list) = d.call("GET", "/attach", None);
    let lent = list["grants"]
        .as_array()
        .unwrap()
        .iter()
        .find(|g| g["session"] == "own-lent")
        .unwrap_or_else(|| panic!("the form lent nothing: {list}"))
        .clone();
    assert_eq!(
        (&lent["profile"], &lent["display"]),
        (&json!("desktop"), &json!("own")),
        "{lent}"
    );
    // Each picture was audited as the owner's screenshot, not as the grant's call.
    d.wait_audit("the console's screenshot as the owner's call", |audit| {
        audit
            .lines()
            .any(|l| l.contains("\"tool\":\"screenshot\"") && !l.contains(&id))
    });
}

/// noVNC's files at `/console/novnc/` (§23): served without a token (the page has none
/// yet), with the console's headers and their type; nothing outside its tree, nor its
/// HTML pages.
#[test]
fn novnc_is_served_from_its_installed_files_only() {
    if !std::path::Path::new("/usr/share/novnc/core/rfb.js").exists() {
        return eprintln!("SKIPPED novnc_is_served_from_its_installed_files_only: no novnc");
    }
    let d = browser_daemon("console-novnc", |_| {});
    let (status, headers, body) = http(d.addr, "GET", "/console/novnc/core/rfb.js", &[], None);
    assert_eq!(status, 200);
    assert_eq!(body, std::fs::read("/usr/share/novnc/core/rfb.js").unwrap());
    let header = |name: &str| {
        headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.clone())
            .unwrap_or_default()
    };
    assert_eq!(header("Content-Type"), "text/javascript; charset=utf-8");
    assert!(header("Content-Security-Policy").contains("script-src 'self'"));
    assert_eq!(header("X-Content-Type-Options"), "nosniff");
    for path in [
        "/console/novnc/../../../etc/passwd",
        "/console/novnc/core/../../../../etc/hostname",
        "/console/novnc/%2e%2e/%2e%2e/etc/passwd",
        "/console/novnc/vnc.html",
        "/console/novnc/core",
        "/console/novnc/core/no-such.js",
    ] {
        let (status, _, body) = http(d.addr, "GET", path, &[], None);
        assert_eq!(status, 404, "{path}: {}", String::from_utf8_lossy(&body));
    } // No file named: not a public path, so the token is asked for first.
    let (status, _, _) = http(d.addr, "GET", "/console/novnc/", &[], None);
    assert_eq!(status, 401);
}

/// The live view (§23), in chromium at 1180×820 and 390×844: noVNC shows the grant's own
/// display; text the agent's `key` types into a dialog on it changes the view (the time it
/// took is printed; the bench holds the speed); Take over, then a click in the view moves
/// the display's pointer there (read back by the grant's own xdotool), and Give back.
#[test]
fn in_a_browser_the_live_view_shows_typing_and_takes_the_wheel() {
    const TEST: &str = "in_a_browser_the_live_view_shows_typing_and_takes_the_wheel";
    let core = match playwright_core() {
        Ok(core) => core,
        Err(why) => return eprintln!("SKIPPED {TEST}: {why}"),
    };
    if let Some(needed) = missing_file(&[
        "/usr/bin/Xvnc",
        "/usr/bin/xdotool",
        "/usr/bin/zenity",
        "/usr/share/novnc/core/rfb.js",
    ]) {
        return eprintln!("SKIPPED {TEST}: no {needed} (scripts/ci/packages.sh)");
    }
    let _one = ONE_BROWSER.lock().unwrap_or_else(|e| e.into_inner());
    let size = (640u32, 480u32);
    let d = browser_daemon("console-live", |c| {
        c.own_display.size = size;
        c.display_env = Some(
            [("PATH", "/usr/local/bin:/usr/bin:/bin")]
                .into_iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
        );
    });
    let pod = StubPod::start();
    let (id, mut conn) = d.attached_with(
        &pod,
        json!({"runtime": pod.runtime(), "session": "own-live", "profile": "desktop",
               "display": "own", "secret": "s3cret-attach"}),
    );
    conn.set_read_timeout(STEP_WATCHDOG);
    let mut n = 0;
    let mut call = |conn: &mut PodConn, tool: &str, args: Value| -> Value {
        n += 1;
        let r = conn.call_tool(json!(n), tool, args.clone());
        assert_ne!(r["result"]["isError"], true, "{tool} {args}: {r}");
        r["result"].clone()
    };
    let bash = |conn: &mut PodConn,
                call: &mut dyn FnMut(&mut PodConn, &str, Value) -> Value,
                command: &str| {
        call(conn, "bash", json!({ "command": command }))["structuredContent"]["stdout"]
            .as_str()
            .unwrap_or("")
            .to_string()
    };
    call(&mut conn, "screenshot", json!({"scale": 0.25}));
    assert_eq!(
        d.grant(&id)["own_display"]["live_view"],
        true,
        "{}",
        d.grant(&id)
    );
    // A dialog with a text field to type into (xterm cannot run as root in the wall).
    call(
        &mut conn,
        "bash_start",
        json!({"command": "exec zenity --entry --title live-key-window --text line"}),
    );
    poll_until(
        || {
            bash(
                &mut conn,
                &mut call,
                "xdotool search --onlyvisible --name live-key-window || true",
            )
        },
        |found| !found.trim().is_empty(),
        |found| format!("watchdog: the dialog never showed: {found:?}"),
    );
    let mut browser = Browser::start(
        "live.cjs",
        &core,
        &d,
        &[
            ("OWN_GRANT", id.clone()),
            ("OWN_SIZE", format!("{}x{}", size.0, size.1)),
        ],
    );
    for (name, text) in [
        ("desktop", "typed where you watch"),
        ("phone", "and on a phone"),
    ] {
        browser.expect(&format!("ready-{name}"));
        bash(
            &mut conn,
            &mut call,
            "xdotool search --onlyvisible --name live-key-window windowactivate --sync || true",
        );
        call(&mut conn, "key", json!({"action": "type", "text": text}));
        browser.go(&format!("typed-{name}"));
        let shown = browser.expect(&format!("shown-{name}"));
        println!(
            "live view, {name}: the typing showed {} ms after the key call returned",
            shown["ms"]
        );
        let clicked = browser.expect(&format!("clicked-{name}"));
        assert_eq!(d.grant(&id)["wheel"], "lender");
        let want = (
            clicked["x"].as_i64().unwrap(),
            clicked["y"].as_i64().unwrap(),
        );
        let within = clicked["within"].as_i64().unwrap();
        let at = poll_until(
            || bash(&mut conn, &mut call, "xdotool getmouselocation"),
            |out| {
                let field = |f: &str| {
                    out.split_whitespace()
                        .find_map(|w| w.strip_prefix(f))
                        .and_then(|v| v.parse::<i64>().ok())
                };
                let near =
                    |got: Option<i64>, want: i64| got.is_some_and(|g| (g - want).abs() <= within);
                near(field("x:"), want.0) && near(field("y:"), want.1)
            },
            |out| format!("watchdog: the pointer never reached {want:?} (within {within}): {out}"),
        );
        println!("live view, {name}: pointer {at}");
        browser.go(&format!("moved-{name}"));
        browser.expect(&format!("gave-{name}"));
        assert_eq!(d.grant(&id)["wheel"], "agent");
        browser.go(&format!("next-{name}"));
    }
    let shots = browser.finish();
    assert_shots(
        &shots,
        [
            "console-live-desktop.png",
            "console-live-phone.png",
            "console-live-desktop-wheel.png",
            "console-live-phone-wheel.png",
        ],
    );
    // Each change of hands is audited.
    wait_wheel_changes(&d, 4);
}

/// An xterm on the box's X display, the test's own (the lender's desktop): killed with it.
struct Term(Child);

impl Drop for Term {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// The live view of the box's own display (§23, a grant without `"display":"own"`), in
/// chromium: the grant JSON's `live_view` turns the console's screenshot into noVNC over
/// x11vnc, and the page says the screen is the lender's own. At 1180×820 the text the agent's
/// `key` types into an xterm on :99 changes the view; with the wheel taken the agent's `mouse`
/// is refused, and works again once given back. On a 390×844 touch phone a tap on the view
/// moves :99's pointer only while the lender holds the wheel (read back with xdotool).
#[test]
fn in_a_browser_the_box_display_is_live_and_a_phone_takes_the_wheel() {
    const TEST: &str = "in_a_browser_the_box_display_is_live_and_a_phone_takes_the_wheel";
    let core = match playwright_core() {
        Ok(core) => core,
        Err(why) => return eprintln!("SKIPPED {TEST}: {why}"),
    };
    let screen = match displays::Displays::load() {
        Ok(d) if std::path::Path::new("/tmp/.X11-unix/X99").exists() => d,
        _ => {
            return eprintln!("SKIPPED {TEST}: no Xvfb on :99 (bash scripts/ci/displays.sh start)")
        }
    };
    if let Some(needed) = missing_file(&[
        "/usr/bin/x11vnc",
        "/usr/bin/xdotool",
        "/usr/bin/xterm",
        "/usr/share/novnc/core/rfb.js",
    ]) {
        return eprintln!("SKIPPED {TEST}: no {needed} (scripts/ci/packages.sh)");
    }
    let _one = ONE_BROWSER.lock().unwrap_or_else(|e| e.into_inner());
    let x11 = handnode::config::DisplayBackend::X11;
    let size = screen.x11_size();
    let d = browser_daemon("console-livebox", |c| {
        c.display_backend = x11;
        c.display_env = Some(screen.env_for(x11));
    });
    // The lender's own desktop: an xterm the agent will type into.
    let (tx, ty, tw, th) = (40u32, 40u32, 480u32, 160u32);
    let title = format!("handnode-livebox-{}", std::process::id());
    let _term = Term(
        screen
            .command(x11, "xterm")
            .args(["-title", &title, "-geometry", &format!("60x8+{tx}+{ty}")])
            .args(["-bg", "white", "-fg", "black"])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("run xterm"),
    );
    let xdotool = |args: &[&str]| {
        let out = screen
            .command(x11, "xdotool")
            .args(args)
            .output()
            .expect("run xdotool");
        String::from_utf8_lossy(&out.stdout).trim().to_string()
    };
    poll_until(
        || xdotool(&["search", "--onlyvisible", "--name", &title]),
        |found| !found.is_empty(),
        |found| format!("watchdog: the xterm never showed: {found:?}"),
    );
    let pod = StubPod::start();
    let (id, mut conn) = d.attached_with(&pod, attach_body(&pod, "livebox", "desktop"));
    conn.set_read_timeout(STEP_WATCHDOG);
    // The console's cue: the box's display can be viewed (x11vnc is there).
    poll_until(
        || d.grant(&id),
        |g| g["live_view"] == true && g.get("display").is_none(),
        |g| format!("watchdog: the grant JSON never said live_view true: {g}"),
    );
    let mut n = 0;
    let mut call = |conn: &mut PodConn, tool: &str, args: Value| -> Value {
        n += 1;
        conn.call_tool(json!(n), tool, args)["result"].clone()
    };
    // A first call, so the grant has a journal when the page reads it (none is a 404).
    let info = call(&mut conn, "sys_info", json!({}));
    assert_eq!(info["structuredContent"]["wheel"], "agent", "{info}");
    let mut browser = Browser::start(
        "livebox.cjs",
        &core,
        &d,
        &[
            ("BOX_GRANT", id.clone()),
            ("BOX_SIZE", format!("{}x{}", size.0, size.1)),
            ("BOX_TERM", format!("{tx},{ty},{tw},{th}")),
        ],
    );

    // At a desk: the agent types, the view shows it.
    browser.expect("ready-desktop");
    xdotool(&["search", "--name", &title, "windowfocus", "--sync"]);
    let typed = call(
        &mut conn,
        "key",
        json!({"action": "type", "text": "typed on your own screen"}),
    );
    assert_ne!(typed["isError"], true, "{typed}");
    browser.go("typed");
    let shown = browser.expect("shown");
    println!(
        "live view of the box display: the typing showed {} ms after the key call returned",
        shown["ms"]
    );
    browser.expect("took-desktop");
    assert_eq!(d.grant(&id)["wheel"], "lender");
    let refused = call(
        &mut conn,
        "mouse",
        json!({"action": "move", "x": 5, "y": 5}),
    );
    assert_eq!(refused["isError"], true, "{refused}");
    let text = refused["content"][0]["text"].as_str().unwrap_or("");
    assert!(
        text.contains("the person who lent the box has the wheel"),
        "{text}"
    );
    browser.go("refused");
    browser.expect("gave-desktop");
    assert_eq!(d.grant(&id)["wheel"], "agent");
    let moved = call(
        &mut conn,
        "mouse",
        json!({"action": "move", "x": 7, "y": 9}),
    );
    assert_ne!(moved["isError"], true, "{moved}");
    assert_eq!(screen.x11_pointer(), (7, 9), "the agent drives again");
    browser.go("next-desktop");

    // On a phone: a tap moves the pointer only with the wheel.
    let near = |at: (u32, u32), step: &Value| {
        let within = step["within"].as_i64().unwrap();
        let want = (step["x"].as_i64().unwrap(), step["y"].as_i64().unwrap());
        (i64::from(at.0) - want.0).abs() <= within && (i64::from(at.1) - want.1).abs() <= within
    };
    browser.expect("ready-phone");
    xdotool(&["mousemove", "10", "10"]);
    browser.go("parked");
    let watching = browser.expect("tapped-watching");
    // The tap went (or not) before the page reported it; the bridge passes input at once.
    let at = screen.x11_pointer();
    assert!(
        !near(at, &watching) && at == (10, 10),
        "a tap without the wheel moved the pointer to {at:?}"
    );
    browser.go("not-moved");
    let tapped = browser.expect("tapped-wheel");
    assert_eq!(d.grant(&id)["wheel"], "lender");
    let at = poll_until(
        || screen.x11_pointer(),
        |at| near(*at, &tapped),
        |at| format!("watchdog: the tap never moved the pointer to {tapped}: {at:?}"),
    );
    println!("live view of the box display, phone: a tap put the pointer at {at:?}");
    browser.go("moved");
    browser.expect("gave-phone");
    assert_eq!(d.grant(&id)["wheel"], "agent");
    xdotool(&["mousemove", "10", "10"]);
    browser.go("parked-again");
    let given = browser.expect("tapped-given-back");
    let at = screen.x11_pointer();
    assert!(
        !near(at, &given) && at == (10, 10),
        "a tap after giving the wheel back moved the pointer to {at:?}"
    );
    browser.go("next-phone");
    let shots = browser.finish();
    assert_shots(
        &shots,
        [
            "console-livebox-desktop.png",
            "console-livebox-desktop-wheel.png",
            "console-livebox-phone-wheel.png",
        ],
    );
    wait_wheel_changes(&d, 4);
}

/// Without x11vnc the box's display is not viewable: the grant JSON says `"live_view":false`
/// once the display was probed, and the console shows the owner's screenshot, named as the
/// lender's own screen, without asking for a view (livebox.cjs, `BOX_MODE=fallback`).
#[test]
fn in_a_browser_without_x11vnc_the_box_display_is_a_screenshot_named_as_yours() {
    const TEST: &str = "in_a_browser_without_x11vnc_the_box_display_is_a_screenshot_named_as_yours";
    let core = match playwright_core() {
        Ok(core) => core,
        Err(why) => return eprintln!("SKIPPED {TEST}: {why}"),
    };
    let screen = match displays::Displays::load() {
        Ok(d) if std::path::Path::new("/tmp/.X11-unix/X99").exists() => d,
        _ => {
            return eprintln!("SKIPPED {TEST}: no Xvfb on :99 (bash scripts/ci/displays.sh start)")
        }
    };
    let helpers = ["xdotool", "scrot"];
    for program in helpers {
        if !std::path::Path::new("/usr/bin").join(program).exists() {
            return eprintln!("SKIPPED {TEST}: no {program} (scripts/ci/displays.sh)");
        }
    }
    let _one = ONE_BROWSER.lock().unwrap_or_else(|e| e.into_inner());
    // A PATH with the screenshot's helpers and no x11vnc.
    let bin = std::env::temp_dir().join(format!("handnode-livebox-bin-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&bin);
    std::fs::create_dir_all(&bin).unwrap();
    for program in helpers {
        std::os::unix::fs::symlink(format!("/usr/bin/{program}"), bin.join(program)).unwrap();
    }
    let x11 = handnode::config::DisplayBackend::X11;
    let mut env = screen.env_for(x11);
    env.insert("PATH".into(), bin.display().to_string());
    let d = browser_daemon("console-livebox-fallback", |c| {
        c.display_backend = x11;
        c.display_env = Some(env);
    });
    let pod = StubPod::start();
    let (id, mut conn) = d.attached_with(&pod, attach_body(&pod, "fallback", "desktop"));
    conn.set_read_timeout(STEP_WATCHDOG);
    // The agent's screenshot probes the box's display: what the grant JSON says is then
    // known, not the "false" of a daemon that has not looked yet.
    let shot = conn.call_tool(json!(1), "screenshot", json!({"scale": 0.25}));
    assert_ne!(shot["result"]["isError"], true, "{shot}");
    let g = d.grant(&id);
    assert_eq!(g["live_view"], false, "{g}");
    let size = screen.x11_size();
    let browser = Browser::start(
        "livebox.cjs",
        &core,
        &d,
        &[
            ("BOX_MODE", "fallback".to_string()),
            ("BOX_GRANT", id.clone()),
            ("BOX_SIZE", format!("{}x{}", size.0, size.1)),
            ("BOX_TERM", "0,0,1,1".to_string()),
        ],
    );
    let shots = browser.finish();
    assert!(
        shots
            .iter()
            .any(|s| s.ends_with("console-livebox-fallback.png")),
        "{shots:?}"
    );
    drop(d);
    let _ = std::fs::remove_dir_all(&bin);
}

/// What the agent is answered when the lender stops one call (contract §22).
const STOPPED: &str = "stopped by the person who lent the box";

fn text_of(reply: &Value) -> &str {
    reply["result"]["content"][0]["text"].as_str().unwrap_or("")
}

fn send_call(conn: &mut PodConn, id: &str, name: &str, args: Value) {
    conn.send(&json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
                      "params": {"name": name, "arguments": args}}));
}

/// Wait until `GET /calls` lists `n` calls.
fn wait_calls_listed(d: &TestDaemon, n: usize) -> Vec<Value> {
    poll_until(
        || d.call("GET", "/calls", None).1,
        |v| v["calls"].as_array().map_or(0, Vec::len) == n,
        |v| format!("watchdog: GET /calls never listed {n}: {v}"),
    )["calls"]
        .as_array()
        .unwrap()
        .clone()
}

/// Issue 38 (§22), in chromium at 1280×800 and 390×844: the Now list of a grant's card shows
/// a running `bash`, a held `key` and a `bash_start` job with their arguments and a ticking
/// time, and its Stop stops each (the agent reads who stopped it); Approvals keeps the
/// decision it just made; "Stop everything" halts (the agent's call is answered halted, the
/// socket closes, `GET /halt` says so) and the banner shows on every view of both pages,
/// until Resume; Activity reads the journal of the live grant and of an ended one, and
/// downloads journal.html.
#[test]
fn in_a_browser_the_lender_sees_what_runs_and_stops_it() {
    let core = match playwright_core() {
        Ok(core) => core,
        Err(why) => {
            return eprintln!("SKIPPED in_a_browser_the_lender_sees_what_runs_and_stops_it: {why}")
        }
    };
    let _one = ONE_BROWSER.lock().unwrap_or_else(|e| e.into_inner());
    let d = browser_daemon("console-now", |_| {});
    let pod = StubPod::start();

    // An ended grant with a journal: two calls, then revoked.
    let (done, mut done_conn) = d.attached(&pod, "done", "observe");
    for i in 0..2 {
        let r = done_conn.call_tool(json!(i), "sys_info", json!({}));
        assert!(r["result"]["structuredContent"].is_object(), "{r}");
    }
    let (status, v) = d.call("DELETE", &format!("/attach/{done}"), None);
    assert!(status < 300, "{status} {v}");

    let mut body = attach_body(&pod, "busy", "desktop");
    body["approve"] = json!(["key"]);
    let (busy, mut conn) = d.attached_with(&pod, body);
    conn.set_read_timeout(STEP_WATCHDOG);
    let started = conn.call_tool(json!("j"), "bash_start", json!({"command": "sleep 300"}));
    let job_id = result(&started)["structuredContent"]["job_id"]
        .as_str()
        .unwrap_or_else(|| panic!("{started}"))
        .to_string();
    send_call(&mut conn, "b1", "bash", json!({"command": "sleep 300"}));
    send_call(&mut conn, "k1", "key", json!({"keys": "ctrl+q"}));
    wait_pending(&d, 1);
    wait_calls_listed(&d, 3);

    let mut browser = Browser::start(
        "now.cjs",
        &core,
        &d,
        &[
            ("BUSY_GRANT", busy.clone()),
            ("DONE_GRANT", done.clone()),
            ("JOB_ID", job_id.clone()),
        ],
    );
    browser.expect("shown");
    // The page stopped all three; the agent reads who did it.
    browser.expect("stopped");
    let mut ids = Vec::new();
    for _ in 0..2 {
        let reply = conn.recv();
        assert_eq!(reply["result"]["isError"], true, "{reply}");
        assert_eq!(text_of(&reply), STOPPED, "{reply}");
        ids.push(reply["id"].as_str().unwrap_or_default().to_string());
    }
    ids.sort();
    assert_eq!(ids, ["b1", "k1"]);
    let polled = conn.call_tool(
        json!("p"),
        "bash_poll",
        json!({"job_id": job_id, "wait_secs": 5}),
    );
    let st = &result(&polled)["structuredContent"];
    assert_eq!(
        (&st["state"], &st["reason"]),
        (&json!("killed"), &json!("stopped_by_lender")),
        "{polled}"
    );
    assert!(wait_calls_listed(&d, 0).is_empty());

    // A held call the page allows: its decision stays under Approvals.
    send_call(
        &mut conn,
        "k2",
        "key",
        json!({"action": "press", "keys": ["ctrl+w"]}),
    );
    wait_pending(&d, 1);
    browser.go("approve");
    browser.expect("allowed");
    let reply = conn.recv();
    assert_eq!(reply["id"], "k2", "{reply}");
    assert_ne!(text_of(&reply), STOPPED, "{reply}");

    // Stop everything, with a call running.
    send_call(&mut conn, "b2", "bash", json!({"command": "sleep 300"}));
    wait_calls_listed(&d, 1);
    browser.go("halt");
    browser.expect("halted");
    let mut replies = Vec::new();
    let close = loop {
        match conn.ws.read() {
            Ok(tungstenite::Message::Text(t)) => {
                replies.push(serde_json::from_str::<Value>(&t).unwrap())
            }
            Ok(tungstenite::Message::Close(f)) => {
                break f.map(|f| (u16::from(f.code), f.reason.to_string()))
            }
            Ok(_) => continue,
            Err(e) => panic!("watchdog or error before the halt's close: {e}"),
        }
    };
    assert_eq!(close, Some((1000, "halted".to_string())), "{replies:?}");
    assert_eq!(replies.len(), 1, "{replies:?}");
    assert_eq!(replies[0]["id"], "b2");
    assert_eq!(
        text_of(&replies[0]),
        "halted by the person who lent the box: lunch break"
    );
    let (_, halt) = d.call("GET", "/halt", None);
    assert_eq!(
        (&halt["halted"], &halt["reason"], &halt["by"]),
        (&json!(true), &json!("lunch break"), &json!("token")),
        "{halt}"
    );
    browser.go("banner");
    browser.expect("resumed");
    let (_, halt) = d.call("GET", "/halt", None);
    assert_eq!(halt["halted"], false, "{halt}");

    browser.go("journal");
    browser.expect("journal");
    let shots = browser.finish();
    for name in ["now", "halted", "journal", "journal-ended", "recent"] {
        assert_shots(
            &shots,
            ["desktop", "phone"].map(|size| format!("now-{name}-{size}.png")),
        );
    }
}
