//! Unit tests of the browser tier against a fake stdio MCP server
//! (`tests/fixtures/fake-browser.sh`): start, calls, crash and restart, idle shutdown,
//! start failures with stderr, the bounds, cancellation and teardown.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use super::*;
use crate::base::testutil::TempDir;
use crate::pool::{CallCtl, Completion};
use crate::wire::mcp::ToolOutput;

/// Longest one call, or one wait for a state, may take before the test counts it a hang.
const WATCHDOG: Duration = Duration::from_secs(20);
/// A call's time limit in these tests when it is not what is tested.
const CALL_LIMIT: Duration = Duration::from_secs(20);

fn fake_script() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/fake-browser.sh")
}

/// bash by absolute path: some tests strip PATH from the fake's environment.
fn bash() -> String {
    std::env::var_os("PATH")
        .into_iter()
        .flat_map(|p| std::env::split_paths(&p).collect::<Vec<_>>())
        .map(|d| d.join("bash"))
        .find(|p| p.is_file())
        .expect("bash on PATH")
        .display()
        .to_string()
}

struct Tier {
    browsers: Browsers,
    base: TempDir,
}

fn options(base: &TempDir, mode: &str) -> BrowserOptions {
    BrowserOptions {
        argv: vec![
            bash(),
            fake_script().display().to_string(),
            "--mode".into(),
            mode.into(),
        ],
        max_browsers: 2,
        idle: Duration::from_secs(600),
        start_timeout: Duration::from_secs(10),
        dir: base.0.join("b"),
        env: ToolConfig::default(),
        max_message_bytes: 16 << 20,
        probe: false,
        blocked_origins: Vec::new(),
        isolation: Isolation::None,
    }
}

fn tier(mode: &str, tweak: impl FnOnce(&mut BrowserOptions)) -> Tier {
    let base = TempDir::new("btier");
    let mut opts = options(&base, mode);
    tweak(&mut opts);
    Tier {
        browsers: Browsers::start(opts).expect("start the browser tier"),
        base,
    }
}

impl Tier {
    fn dir(&self) -> PathBuf {
        self.base.0.join("b")
    }

    /// Start a call; the receiver gets its output.
    fn start_call(
        &self,
        grant: &str,
        name: &str,
        args: Value,
        ctl: Arc<CallCtl>,
        limit: Duration,
    ) -> crossbeam_channel::Receiver<ToolOutput> {
        let (tx, rx) = crossbeam_channel::bounded(1);
        let done = Completion::new(move |out| {
            let _ = tx.send(out);
        });
        self.browsers.call(grant, name, args, ctl, limit, done);
        rx
    }

    fn call(&self, grant: &str, name: &str, args: Value) -> ToolOutput {
        self.start_call(grant, name, args, CallCtl::new(), CALL_LIMIT)
            .recv_timeout(WATCHDOG)
            .unwrap_or_else(|_| panic!("{name} did not complete within {WATCHDOG:?}"))
    }

    /// The browser directories under the base whose names start with `prefix`.
    fn dirs(&self, prefix: &str) -> Vec<PathBuf> {
        std::fs::read_dir(self.dir())
            .map(|d| {
                d.flatten()
                    .map(|e| e.path())
                    .filter(|p| {
                        p.file_name()
                            .and_then(|n| n.to_str())
                            .is_some_and(|n| n.starts_with(prefix))
                    })
                    .collect()
            })
            .unwrap_or_default()
    }

    /// Wait (re-reading, under the watchdog) until `pred` holds.
    fn wait_until(&self, what: &str, pred: impl Fn(&Tier) -> bool) {
        let start = Instant::now();
        while !pred(self) {
            assert!(start.elapsed() < WATCHDOG, "watchdog: {what}");
            std::thread::sleep(Duration::from_millis(5));
        }
    }
}

/// The text of a result and whether it is an error.
fn text(out: &ToolOutput) -> (String, bool) {
    match out {
        ToolOutput::Result(v) => (
            v["content"]
                .as_array()
                .map(|blocks| {
                    blocks
                        .iter()
                        .filter_map(|b| b["text"].as_str())
                        .collect::<Vec<_>>()
                        .join("\n")
                })
                .unwrap_or_default(),
            v["isError"] == true,
        ),
        other => (format!("{other:?}"), true),
    }
}

fn ok_text(out: &ToolOutput) -> String {
    let (t, err) = text(out);
    assert!(!err, "unexpected error: {t}");
    t
}

fn err_text(out: &ToolOutput) -> String {
    let (t, err) = text(out);
    assert!(err, "expected an error, got: {t}");
    t
}

/// The pid the fake reports in its snapshot.
fn fake_pid(snapshot: &str) -> String {
    snapshot.rsplit("pid ").next().unwrap().trim().to_string()
}

#[test]
fn a_grant_gets_its_own_browser_that_keeps_its_page_and_goes_with_the_grant() {
    let t = tier("normal", |_| {});
    assert_eq!(t.browsers.running(), 0, "nothing starts before a call");
    assert!(t.dirs("").is_empty());
    let nav = ok_text(&t.call(
        "grant-a1",
        "browser_navigate",
        json!({"url": "http://a.test/"}),
    ));
    assert!(nav.contains("navigated to http://a.test/"), "{nav}");
    assert_eq!(t.browsers.running(), 1);
    let snap = ok_text(&t.call("grant-a1", "browser_snapshot", json!({})));
    assert!(snap.starts_with("page http://a.test/"), "{snap}");
    // Another grant: another process, its own blank page.
    let other = ok_text(&t.call("grant-b2", "browser_snapshot", json!({})));
    assert!(other.starts_with("page about:blank"), "{other}");
    assert_ne!(fake_pid(&snap), fake_pid(&other));
    assert_eq!(t.browsers.running(), 2);
    let a_dirs = t.dirs("granta1-");
    assert_eq!(a_dirs.len(), 1, "{a_dirs:?}");
    let a_dir = a_dirs[0].clone();

    t.browsers.end_grant("grant-a1");
    t.wait_until("grant a's browser is gone", |t| t.browsers.running() == 1);
    assert!(!a_dir.exists(), "its directory is removed");
    assert!(!sweep::any_alive(&a_dir), "none of its processes is left");
    // B's browser is untouched.
    let again = ok_text(&t.call("grant-b2", "browser_snapshot", json!({})));
    assert_eq!(fake_pid(&again), fake_pid(&other));
}

#[test]
fn the_environment_is_cleaned_and_points_inside_the_browsers_dir() {
    let t = tier("normal", |o| {
        // By name, as a handnode secret would be (bash builtins need no PATH).
        o.env.scrub_env = vec!["PATH".into()];
    });
    let env = ok_text(&t.call("grant-env1", "browser_console_messages", json!({})));
    let dir = t.dirs("grantenv")[0].display().to_string();
    let names: Vec<&str> = env
        .strip_prefix("names ")
        .unwrap()
        .split(' ')
        .take_while(|w| !w.starts_with("tmp="))
        .collect();
    assert!(!names.contains(&"PATH"), "{env}");
    assert!(names
        .iter()
        .all(|n| !n.starts_with("HANDNODE_") || *n == "HANDNODE_BROWSER_INSTANCE"));
    assert!(env.contains(&format!("tmp={dir}/tmp ")), "{env}");
    assert!(env.contains(&format!("home={dir}/home ")), "{env}");
    assert!(env.contains(&format!("tag={dir} ")), "{env}");
    assert!(env.ends_with(&format!("cwd={dir}")), "{env}");
}

#[test]
fn a_crash_fails_the_running_call_and_the_next_reply_says_the_pages_were_lost() {
    let t = tier("normal", |_| {});
    ok_text(&t.call(
        "grant-c1",
        "browser_navigate",
        json!({"url": "http://c.test/"}),
    ));
    let first = ok_text(&t.call("grant-c1", "browser_snapshot", json!({})));
    let crash = err_text(&t.call("grant-c1", "browser_close", json!({})));
    assert!(crash.contains("exited with status 3"), "{crash}");
    assert!(crash.contains("its pages were lost"), "{crash}");
    assert!(crash.contains("fake browser"), "the stderr tail: {crash}");
    assert_eq!(t.browsers.running(), 0);
    assert!(
        t.dirs("grantc1-").is_empty(),
        "the crashed browser's dir is removed"
    );
    let after = ok_text(&t.call("grant-c1", "browser_snapshot", json!({})));
    assert!(
        after.starts_with("Note: this grant's browser stopped (it exited with status 3)"),
        "{after}"
    );
    assert!(after.contains("its pages were lost"), "{after}");
    assert!(after.contains("page about:blank"), "a fresh page: {after}");
    assert_ne!(fake_pid(&after), fake_pid(&first));
    // Said once.
    let later = ok_text(&t.call("grant-c1", "browser_snapshot", json!({})));
    assert!(later.starts_with("page about:blank"), "{later}");
}

#[test]
fn an_idle_browser_is_stopped_and_the_next_call_says_so() {
    let t = tier("normal", |o| o.idle = Duration::from_millis(200));
    ok_text(&t.call(
        "grant-i1",
        "browser_navigate",
        json!({"url": "http://i.test/"}),
    ));
    t.wait_until("the idle browser is stopped", |t| t.browsers.running() == 0);
    assert!(t.dirs("granti1-").is_empty());
    let next = ok_text(&t.call("grant-i1", "browser_snapshot", json!({})));
    assert!(
        next.starts_with("Note: this grant's browser was closed after 200 ms without a call"),
        "{next}"
    );
    assert!(
        next.contains("pages, cookies and storage are gone"),
        "{next}"
    );
    assert!(next.contains("page about:blank"), "{next}");
}

#[test]
fn a_browser_that_cannot_start_answers_with_its_stderr() {
    let t = tier("fail-start", |_| {});
    let err = err_text(&t.call("grant-f1", "browser_navigate", json!({"url": "x"})));
    assert!(
        err.starts_with(
            "the browser could not start: it exited with status 7 before it answered initialize"
        ),
        "{err}"
    );
    assert!(
        err.contains("Executable doesn't exist at /nowhere/chromium"),
        "{err}"
    );
    assert!(err.contains("the last line before exit"), "{err}");
    assert_eq!(t.browsers.running(), 0);
    assert!(t.dirs("").is_empty());
}

#[test]
fn a_missing_program_and_a_silent_one_are_start_failures() {
    let t = tier("normal", |o| {
        o.argv = vec!["/nonexistent/handnode-browser".into()]
    });
    let err = err_text(&t.call("grant-m1", "browser_navigate", json!({})));
    assert!(
        err.starts_with("the browser could not start: cannot run /nonexistent/handnode-browser"),
        "{err}"
    );
    assert!(t.dirs("").is_empty(), "no directory is left");

    let t = tier("silent", |o| o.start_timeout = Duration::from_millis(300));
    let err = err_text(&t.call("grant-s1", "browser_navigate", json!({})));
    assert!(
        err.contains("it did not answer initialize within 300 ms"),
        "{err}"
    );
    assert!(err.contains("starting in mode silent"), "{err}");
    assert_eq!(t.browsers.running(), 0);
}

#[test]
fn the_stderr_tail_is_bounded() {
    let mut tail = super::supervisor::Tail::default();
    for i in 0..(STDERR_TAIL_LINES + 5) {
        tail.push(format!("line {i} \u{1b}[2mdim\u{1b}[22m\n").as_bytes());
    }
    tail.push(&vec![b'y'; STDERR_LINE_BYTES * 3]);
    let text = tail.render();
    let lines: Vec<&str> = text.lines().skip(1).collect();
    assert_eq!(lines.len(), STDERR_TAIL_LINES, "{text}");
    assert!(
        !text.contains("line 5 "),
        "the oldest lines are dropped: {text}"
    );
    assert!(
        text.contains("line 6 dim"),
        "escape codes are dropped: {text}"
    );
    let last = lines.last().unwrap().trim();
    assert_eq!(last.len(), STDERR_LINE_BYTES);
}

#[test]
fn past_max_browsers_a_call_is_refused_until_one_ends() {
    let t = tier("normal", |o| o.max_browsers = 1);
    ok_text(&t.call("grant-x1", "browser_snapshot", json!({})));
    let refused = err_text(&t.call("grant-x2", "browser_snapshot", json!({})));
    assert!(
        refused.starts_with("no browser available: 1 already running"),
        "{refused}"
    );
    assert!(t.dirs("grantx2").is_empty(), "nothing was started for it");
    t.browsers.end_grant("grant-x1");
    t.wait_until("x1's browser is gone", |t| t.browsers.running() == 0);
    ok_text(&t.call("grant-x2", "browser_snapshot", json!({})));
}

#[test]
fn a_cancel_drops_the_wait_and_the_browser_stays() {
    let t = tier("normal", |_| {});
    let first = ok_text(&t.call("grant-k1", "browser_snapshot", json!({})));
    let ctl = CallCtl::new();
    let rx = t.start_call(
        "grant-k1",
        "browser_wait_for",
        json!({}),
        Arc::clone(&ctl),
        CALL_LIMIT,
    );
    assert!(
        rx.recv_timeout(Duration::from_millis(50)).is_err(),
        "it waits"
    );
    ctl.cancel();
    let out = rx
        .recv_timeout(WATCHDOG)
        .expect("the cancel answers at once");
    assert_eq!(err_text(&out), "cancelled");
    let again = ok_text(&t.call("grant-k1", "browser_snapshot", json!({})));
    assert_eq!(fake_pid(&again), fake_pid(&first), "the same browser");
}

#[test]
fn a_call_past_its_limit_is_given_up() {
    let t = tier("normal", |_| {});
    let out = t
        .start_call(
            "grant-t1",
            "browser_wait_for",
            json!({}),
            CallCtl::new(),
            Duration::from_millis(200),
        )
        .recv_timeout(WATCHDOG)
        .expect("the limit answers");
    let err = err_text(&out);
    assert!(
        err.contains("did not answer browser_wait_for within 200 ms"),
        "{err}"
    );
    ok_text(&t.call("grant-t1", "browser_snapshot", json!({})));
}

/// The fake's `browser_take_screenshot` line, as it writes it (without the newline).
fn screenshot_line(id: u64) -> usize {
    let text = "x".repeat(2000);
    format!(
        r#"{{"jsonrpc":"2.0","id":{id},"result":{{"content":[{{"type":"text","text":"{text}"}}]}}}}"#
    )
    .len()
}

#[test]
fn a_message_over_the_bound_kills_the_browser_and_one_at_the_bound_is_taken() {
    // The first call is request 3 (1 = initialize, 2 = tools/list).
    let at = screenshot_line(3);
    let t = tier("normal", |o| o.max_message_bytes = at);
    ok_text(&t.call("grant-z1", "browser_take_screenshot", json!({})));
    let t = tier("normal", |o| o.max_message_bytes = at - 1);
    let err = err_text(&t.call("grant-z2", "browser_take_screenshot", json!({})));
    assert!(
        err.contains(&format!("it sent a message larger than {} bytes", at - 1)),
        "{err}"
    );
    assert_eq!(t.browsers.running(), 0);
}

#[test]
fn calls_past_the_per_browser_bound_are_refused() {
    let t = tier("normal", |_| {});
    let pending: Vec<_> = (0..MAX_CALLS_PER_BROWSER)
        .map(|_| {
            t.start_call(
                "grant-q1",
                "browser_wait_for",
                json!({}),
                CallCtl::new(),
                CALL_LIMIT,
            )
        })
        .collect();
    let refused = err_text(&t.call("grant-q1", "browser_snapshot", json!({})));
    assert!(refused.starts_with("too many calls waiting"), "{refused}");
    t.browsers.end_grant("grant-q1");
    for rx in pending {
        let out = rx.recv_timeout(WATCHDOG).expect("answered at the end");
        assert!(err_text(&out).contains("this grant ended"));
    }
}

#[test]
fn the_list_is_static_until_learned_then_what_the_command_offers() {
    let t = tier("normal", |o| o.probe = true);
    t.wait_until("the probe has listed the tools", |t| t.browsers.learned());
    assert_eq!(
        t.browsers.running(),
        0,
        "the probe is not a grant's browser"
    );
    t.wait_until("the probe is gone", |t| t.dirs("probe-").is_empty());
    let names: Vec<String> = t
        .browsers
        .tools()
        .iter()
        .map(|t| t["name"].as_str().unwrap().to_string())
        .collect();
    // What the fake offers, minus what the profile forbids, in class-table order.
    assert_eq!(
        names,
        [
            "browser_close",
            "browser_console_messages",
            "browser_find",
            "browser_navigate",
            "browser_take_screenshot",
            "browser_snapshot",
            "browser_wait_for",
        ]
    );
    for hidden in [
        "browser_evaluate",
        "browser_run_code_unsafe",
        "browser_page_tool",
        "browser_click",
    ] {
        assert!(!t.browsers.offers(hidden), "{hidden}");
    }
    assert!(t.browsers.offers("browser_navigate"));

    let cold = tier("normal", |_| {});
    let listed = cold.browsers.tools();
    assert_eq!(
        listed.len(),
        crate::profiles::browser_profile_tools().count()
    );
    assert_eq!(listed[0]["inputSchema"]["type"], "object");
    assert!(cold.browsers.offers("browser_click"));
    assert!(!cold.browsers.offers("browser_evaluate"));
}

#[test]
fn shutdown_kills_every_browser_and_removes_every_dir() {
    let t = tier("normal", |_| {});
    ok_text(&t.call("grant-d1", "browser_snapshot", json!({})));
    ok_text(&t.call("grant-d2", "browser_snapshot", json!({})));
    let dirs = t.dirs("grant");
    assert_eq!(dirs.len(), 2);
    let pending = t.start_call(
        "grant-d1",
        "browser_wait_for",
        json!({}),
        CallCtl::new(),
        CALL_LIMIT,
    );
    t.browsers.shutdown();
    assert!(err_text(&pending.recv_timeout(WATCHDOG).unwrap()).contains("shutting down"));
    for dir in dirs {
        assert!(!dir.exists(), "{}", dir.display());
        assert!(!sweep::any_alive(&dir));
    }
    let late = err_text(&t.call("grant-d3", "browser_snapshot", json!({})));
    assert!(late.contains("shutting down"), "{late}");
}

#[test]
fn a_crashed_daemons_leftovers_are_removed_at_start() {
    let base = TempDir::new("btier-orphans");
    let left = base.0.join("b").join("granto1-deadbeef");
    std::fs::create_dir_all(left.join("tmp")).unwrap();
    std::fs::write(left.join(sweep::OWNER_FILE), "999999999 1").unwrap();
    let _tier = Browsers::start(options(&base, "normal")).unwrap();
    assert!(!left.exists());
}

#[test]
fn a_calls_limit_counts_the_browser_start_too() {
    let t = tier("silent", |o| o.start_timeout = Duration::from_secs(30));
    let out = t
        .start_call(
            "grant-l1",
            "browser_navigate",
            json!({}),
            CallCtl::new(),
            Duration::from_millis(200),
        )
        .recv_timeout(WATCHDOG)
        .expect("the limit answers while the browser still starts");
    let err = err_text(&out);
    assert!(
        err.contains("did not answer browser_navigate within 200 ms"),
        "{err}"
    );
}

#[test]
fn a_browser_that_stops_reading_gets_no_more_than_two_messages_queued() {
    let max = 4096;
    let t = tier("deaf", |o| o.max_message_bytes = max);
    // Ready, then deaf: what we write fills the pipe, then waits in handnode.
    let big = "y".repeat(max - 200);
    let mut pending = Vec::new();
    let refused = loop {
        assert!(pending.len() < MAX_CALLS_PER_BROWSER, "never refused");
        let rx = t.start_call(
            "grant-h1",
            "browser_type",
            json!({"text": big}),
            CallCtl::new(),
            CALL_LIMIT,
        );
        match rx.recv_timeout(Duration::from_millis(100)) {
            Ok(out) => break err_text(&out),
            Err(_) => pending.push(rx),
        }
    };
    assert!(refused.contains("is not reading its input"), "{refused}");
    // The pipe takes 64 KiB before handnode holds anything, so at least that many went.
    assert!(
        pending.len() * max >= 64 << 10,
        "refused after {} calls",
        pending.len()
    );
}

#[test]
fn the_environment_is_an_allow_list_and_display_variables_only_when_headed() {
    let cfg = ToolConfig {
        scrub_values: vec![crate::base::secret::Secret::new("s3cret-value")],
        ..ToolConfig::default()
    };
    let base = [
        ("PATH", "/usr/bin"),
        ("LANG", "C.UTF-8"),
        ("LC_ALL", "C"),
        ("TZ", "UTC"),
        ("DISPLAY", ":99"),
        ("WAYLAND_DISPLAY", "wayland-1"),
        ("PLAYWRIGHT_MCP_ALLOW_UNRESTRICTED_FILE_ACCESS", "true"),
        ("PLAYWRIGHT_MCP_CONFIG", "/etc/pw.json"),
        ("NODE_OPTIONS", "--require /tmp/x.js"),
        ("HANDNODE_TOKEN", "t"),
        ("HOME", "/root"),
        ("SOMETHING", "else"),
        ("LC_SECRET", "s3cret-value"),
    ]
    .map(|(k, v)| (std::ffi::OsString::from(k), std::ffi::OsString::from(v)));
    let set = [("HOME".to_string(), "/b/home".to_string())];
    let names = |headed: bool| -> Vec<String> {
        super::browser_env(base.clone(), headed, &cfg, &set)
            .into_iter()
            .map(|(k, v)| format!("{}={}", k.to_string_lossy(), v.to_string_lossy()))
            .collect()
    };
    assert_eq!(
        names(false),
        [
            "PATH=/usr/bin",
            "LANG=C.UTF-8",
            "LC_ALL=C",
            "TZ=UTC",
            "HOME=/b/home"
        ]
    );
    assert_eq!(
        names(true),
        [
            "PATH=/usr/bin",
            "LANG=C.UTF-8",
            "LC_ALL=C",
            "TZ=UTC",
            "DISPLAY=:99",
            "WAYLAND_DISPLAY=wayland-1",
            "HOME=/b/home"
        ]
    );
}

#[test]
fn inside_bwrap_the_daemons_files_and_other_browsers_are_empty() {
    let program = match crate::walls::probe_bwrap(
        std::env::var_os("PATH").as_deref(),
        crate::walls::Kind::Browser,
    ) {
        Ok(p) => p,
        Err(why) => {
            eprintln!("SKIPPED inside_bwrap_the_daemons_files_and_other_browsers_are_empty: {why}");
            return;
        }
    };
    let secrets = TempDir::new("bwrap-secrets");
    let state = secrets.0.join("state");
    std::fs::create_dir_all(&state).unwrap();
    std::fs::write(state.join("grants.json"), "attach-secret-1").unwrap();
    let token = secrets.0.join("token");
    std::fs::write(&token, "admin-token-1").unwrap();
    // The local admin socket answers the daemon's uid without a credential.
    let socket = secrets.0.join("handnode.sock");
    let _listener = std::os::unix::net::UnixListener::bind(&socket).unwrap();
    let t = tier("normal", |o| {
        o.isolation = Isolation::Bwrap(crate::walls::Bwrap::new(
            program,
            vec![state.clone()],
            vec![token.clone(), socket.clone()],
        ));
    });
    let find = |grant: &str, path: &std::path::Path| {
        ok_text(&t.call(
            grant,
            "browser_find",
            json!({"text": path.display().to_string()}),
        ))
    };
    // Outside, the files are there; inside, the dir is empty and the file reads empty.
    assert_eq!(find("grant-bw1", &state), "dir: ");
    assert_eq!(find("grant-bw1", &token), "file: ");
    assert_eq!(find("grant-bw1", &state.join("grants.json")), "none");
    // The socket is /dev/null inside: nothing to connect to.
    assert_eq!(find("grant-bw1", &socket), "file: ");
    // Its own directory is there; another grant's is not, nor the browsers' parent's
    // other contents.
    find("grant-bw2", &state);
    let own = t.dirs("grantbw1")[0].clone();
    let other = t.dirs("grantbw2")[0].clone();
    assert!(find("grant-bw1", &own).starts_with("dir: "), "own dir");
    assert_eq!(find("grant-bw1", &other), "none");
    let parent = find("grant-bw1", &t.dir());
    assert_eq!(
        parent,
        format!("dir: {}", own.file_name().unwrap().to_string_lossy())
    );
    assert!(std::fs::read_to_string(&token).unwrap() == "admin-token-1");
}
