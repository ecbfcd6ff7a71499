//! The attacks of issue 22 against real chromium and the pinned Playwright MCP (contract
//! §14): read the admin token through the browser (`view-source:file://…`), then run a
//! `javascript:` URL on the admin origin that `fetch`es `/mcp` with the token and calls
//! `bash` to write a marker file. For a `browser` grant (its own browser), a `custom`
//! `[browser_navigate, browser_snapshot]` grant and a `desktop` grant with
//! `approve:"shell"` (both over the shared upstream started by `scripts/upstream.sh`), with
//! and without `bwrap`: the secret is never seen, no owner `bash` call is made (the audit
//! says so) and no marker file is written.
//!
//! Each layer also holds alone, with the others out of the way (the daemon's browser tier
//! driven directly, so no URL check): `bwrap` keeps the token unreadable where a URL gets
//! through; the blocked origins keep the admin origin out of reach; the CSP of the admin
//! responses refuses the `fetch` of a `javascript:` URL run there, the real token in it
//! (Chromium runs a browser-initiated `javascript:` URL whatever the page's CSP, so the
//! control shows the same script's fetch getting through on a page without it).
//! Each of those has its control: the same step without the layer does succeed.
//!
//! Skips (saying why) when Playwright MCP, chromium or bwrap is missing;
//! `scripts/test.sh` installs them.

mod common;
#[path = "common/playwright.rs"]
mod playwright;

use std::path::{Path, PathBuf};
use std::time::Duration;

use common::{poll_until, quiet_liveness, PodConn, StubPod, TestDaemon};
use handnode::browser::{BrowserOptions, Browsers, Isolation};
use handnode::config::IsolationMode;
use handnode::pool::{CallCtl, Completion};
use handnode::profiles::{Profile, BROWSER_URL_FIELDS};
use handnode::tools::policy::{Shell, ToolLists, ToolPolicy};
use handnode::tools::ToolConfig;
use handnode::walls::{Bwrap, Kind};
use handnode::wire::mcp::ToolOutput;
use serde_json::{json, Value};

const CALL_WATCHDOG: Duration = playwright::CALL_WATCHDOG;
/// Longest a `javascript:` URL's fetch may take to reach `/mcp` and run `bash`, had it run.
const SETTLE: Duration = Duration::from_secs(3);

/// A short directory (chromium's socket path must stay under 108 bytes).
struct ShortDir(PathBuf);

impl ShortDir {
    fn new(tag: &str) -> ShortDir {
        static N: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        let n = N.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        let dir = PathBuf::from(format!("/tmp/hnc{tag}-{}-{n}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        ShortDir(dir)
    }
}

impl Drop for ShortDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn missing() -> Option<String> {
    if let Some(why) = playwright::missing() {
        return Some(why);
    }
    handnode::walls::probe_bwrap(std::env::var_os("PATH").as_deref(), Kind::Browser).err()
}

/// The text blocks of a tool result, and whether it is an error.
fn text_of(out: &Value) -> (String, bool) {
    let text = out["content"]
        .as_array()
        .map(|blocks| {
            blocks
                .iter()
                .filter_map(|b| b["text"].as_str())
                .collect::<Vec<_>>()
                .join("\n")
        })
        .unwrap_or_default();
    (text, out["isError"] == true)
}

/// The `javascript:` URL of the issue: `fetch` the owner's `/mcp` of the page's origin with
/// the admin token and call `bash` to create `marker`. When it has run, the page says
/// `attack-done: fetched <n>` or `attack-done: refused <why>`.
fn attack_js(token: &str, marker: &Path) -> String {
    let rpc = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
        "params": {"name": "bash", "arguments": {"command": format!("touch {}", marker.display())}}});
    format!(
        "javascript:fetch('/mcp',{{method:'POST',headers:{{'Authorization':'Bearer {token}',\
         'Content-Type':'application/json','Accept':'application/json, text/event-stream'}},\
         body:JSON.stringify({rpc})}}).then(r=>r.text()).then(t=>{{document.body.textContent='attack-done: fetched '+t.length}})\
         .catch(e=>{{document.body.textContent='attack-done: refused '+e}});void 0"
    )
}

/// The ways of spelling a `javascript:` URL and a `view-source:file:` URL that a browser
/// reads alike.
fn spellings(url: &str) -> Vec<String> {
    let (scheme, rest) = url.split_once(':').unwrap();
    let mut mixed: String = scheme
        .chars()
        .enumerate()
        .map(|(i, c)| {
            if i % 2 == 0 {
                c.to_ascii_uppercase()
            } else {
                c
            }
        })
        .collect();
    mixed.insert(2, '\t');
    vec![
        url.to_string(),
        format!(" \u{1}{mixed}:{rest}\n"),
        format!("{}\n{}:{rest}", &scheme[..1], &scheme[1..]),
    ]
}

fn audit_has_owner_bash(state: &Path) -> bool {
    std::fs::read_to_string(state.join("audit.jsonl"))
        .unwrap_or_default()
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .any(|r| r["kind"] == "tool_call" && r["tool"] == "bash")
}

// ---------------------------------------------------------------------------------------
// The daemon's browser tier driven directly: no URL check, so each other layer is tried
// on its own.

struct Tier {
    browsers: Browsers,
    _dir: ShortDir,
}

fn tier(isolation: Isolation, blocked_origins: Vec<String>) -> Tier {
    let dir = ShortDir::new("t");
    let browsers = Browsers::start(BrowserOptions {
        argv: playwright::browser_command(),
        max_browsers: 4,
        idle: Duration::from_secs(600),
        start_timeout: CALL_WATCHDOG,
        dir: dir.0.clone(),
        env: ToolConfig::default(),
        max_message_bytes: 16 << 20,
        probe: false,
        blocked_origins,
        isolation,
    })
    .expect("the browser tier starts");
    Tier {
        browsers,
        _dir: dir,
    }
}

impl Tier {
    fn call(&self, grant: &str, name: &str, args: Value) -> (String, bool) {
        let (tx, rx) = crossbeam_channel::bounded(1);
        self.browsers.call(
            grant,
            name,
            args,
            CallCtl::new(),
            CALL_WATCHDOG,
            Completion::new(move |out| {
                let _ = tx.send(out);
            }),
        );
        let out = rx
            .recv_timeout(CALL_WATCHDOG + Duration::from_secs(5))
            .unwrap_or_else(|_| panic!("watchdog: {name} did not complete"));
        match out {
            ToolOutput::Result(v) => text_of(&v),
            other => (format!("{other:?}"), true),
        }
    }

    fn visit(&self, grant: &str, url: &str) -> String {
        let (nav, _) = self.call(grant, "browser_navigate", json!({"url": url}));
        let (snap, _) = self.call(grant, "browser_snapshot", json!({}));
        format!("{nav}\n{snap}")
    }
}

/// A secret file as the daemon keeps its token: in a config dir of its own.
fn secret_file(tag: &str, secret: &str) -> (playwright::TempDir, PathBuf) {
    let dir = playwright::TempDir::new(tag);
    let file = dir.0.join("token");
    std::fs::write(&file, secret).unwrap();
    (dir, file)
}

#[test]
fn bwrap_alone_keeps_the_token_unreadable_where_a_url_gets_through() {
    if let Some(why) = missing() {
        return eprintln!(
            "SKIPPED bwrap_alone_keeps_the_token_unreadable_where_a_url_gets_through: {why}"
        );
    }
    let secret = format!("admin-token-{}", std::process::id());
    let (config_dir, token) = secret_file("chain-bw", &secret);
    let program =
        handnode::walls::probe_bwrap(std::env::var_os("PATH").as_deref(), Kind::Browser).unwrap();
    let url = format!("view-source:file://{}", token.display());
    // Control: without bwrap (and with the URL check out of the way) the token is read.
    let open = tier(Isolation::None, Vec::new());
    let seen = open.visit("control", &url);
    assert!(
        seen.contains(&secret),
        "the control did not read the token: {seen}"
    );
    drop(open);
    // With bwrap alone: the config dir is empty, the token file reads empty.
    let walled = tier(
        Isolation::Bwrap(Bwrap::new(
            program,
            vec![config_dir.0.clone()],
            vec![token.clone()],
        )),
        Vec::new(),
    );
    for u in [
        url.clone(),
        format!("view-source:file://{}/", config_dir.0.display()),
    ] {
        let seen = walled.visit("walled", &u);
        assert!(!seen.contains(&secret), "{u} showed the token: {seen}");
    }
}

#[test]
fn blocked_origins_and_csp_each_alone_keep_the_real_token_from_becoming_an_owner_call() {
    if let Some(why) = missing() {
        return eprintln!("SKIPPED blocked_origins_and_csp_each_alone_keep_the_real_token_from_becoming_an_owner_call: {why}");
    }
    let d = TestDaemon::with("chain-csp", quiet_liveness);
    let page = playwright::PageServer::start();
    let marker = std::env::temp_dir().join(format!("hn-chain-marker-{}", std::process::id()));
    let _ = std::fs::remove_file(&marker);
    let admin = format!("http://127.0.0.1:{}/healthz", d.addr.port());
    let js = attack_js(&d.token, &marker);

    // Control: a javascript: URL does run on a page without our CSP.
    let open = tier(Isolation::None, Vec::new());
    let seen = open.visit("control", &page.url);
    assert!(seen.contains(playwright::PAGE_TEXT), "{seen}");
    let (_, _) = open.call(
        "control",
        "browser_navigate",
        json!({"url": "javascript:void(document.title='ran-'+(6*7))"}),
    );
    let (snap, _) = open.call("control", "browser_snapshot", json!({}));
    assert!(
        snap.contains("ran-42"),
        "javascript: URLs do not run here: {snap}"
    );

    // The same attack script runs, and its fetch gets through, on a page without our CSP.
    let (_, _) = open.call("control", "browser_navigate", json!({"url": js}));
    let done = open.call(
        "control",
        "browser_wait_for",
        json!({"text": "attack-done"}),
    );
    let (snap, _) = open.call("control", "browser_snapshot", json!({}));
    assert!(
        snap.contains("attack-done: fetched"),
        "the control's fetch did not get through: {done:?} {snap}"
    );

    // CSP alone: the admin origin is open, the URL check is out of the way, the real token
    // is in the script. Chromium runs a javascript: URL the browser itself navigates to
    // (as it runs a bookmarklet) whatever the page's CSP, but `default-src 'none'` refuses
    // its fetch, and nothing else a page can send carries the bearer token.
    let seen = open.visit("control", &admin);
    assert!(!seen.contains("ERR_BLOCKED_BY_CLIENT"), "{seen}");
    let (_, _) = open.call("control", "browser_navigate", json!({"url": js}));
    let done = open.call(
        "control",
        "browser_wait_for",
        json!({"text": "attack-done"}),
    );
    let (snap, _) = open.call("control", "browser_snapshot", json!({}));
    assert!(
        !snap.contains("attack-done: fetched") && snap.contains("attack-done: refused"),
        "the script's fetch was not refused on the admin origin: {done:?} {snap}"
    );
    std::thread::sleep(SETTLE);
    assert!(!marker.exists(), "the marker file was written");
    assert!(
        !audit_has_owner_bash(&d.state_dir()),
        "an owner bash call was made"
    );
    drop(open);

    // Blocked origins alone: every spelling of the admin origin is refused.
    let blocked = tier(
        Isolation::None,
        handnode::base::browser_argv::admin_origins(d.addr, &[]),
    );
    for host in ["127.0.0.1", "localhost", "[::1]", "x.localhost"] {
        let url = format!("http://{host}:{}/healthz", d.addr.port());
        let seen = blocked.visit("blocked", &url);
        assert!(
            seen.contains("ERR_BLOCKED_BY_CLIENT"),
            "{url} was not blocked: {seen}"
        );
    }
    // Its page stays the blocked one: the script has no admin document to run in.
    let (_, _) = blocked.call("blocked", "browser_navigate", json!({"url": js}));
    std::thread::sleep(SETTLE);
    assert!(!marker.exists(), "the marker file was written");
    assert!(
        !audit_has_owner_bash(&d.state_dir()),
        "an owner bash call was made"
    );
}

// ---------------------------------------------------------------------------------------
// The chains through grants, as an agent would run them.

struct Stage {
    d: TestDaemon,
    _pw: playwright::Playwright,
    pod: StubPod,
    token_file: PathBuf,
    marker: PathBuf,
    _browsers: ShortDir,
}

fn stage(tag: &str, isolation: IsolationMode) -> Stage {
    let browsers = ShortDir::new("g");
    let pw_port = playwright::free_port();
    let token = format!("chain-admin-token-{tag}-{}", std::process::id());
    let mut token_file = PathBuf::new();
    let d = TestDaemon::with(&format!("chain-{tag}"), |c| {
        quiet_liveness(c);
        std::fs::create_dir_all(&c.config_dir).unwrap();
        token_file = c.config_dir.join("token");
        std::fs::write(&token_file, &token).unwrap();
        c.token = Some(handnode::Secret::new(&token));
        c.token_source = Some(token_file.display().to_string());
        c.browser_command = Some(playwright::browser_command());
        c.browser_dir = Some(browsers.0.clone());
        c.browser_isolation = Some(isolation);
        c.upstreams = vec![("browser".into(), format!("http://127.0.0.1:{pw_port}/mcp"))];
        c.timing.upstream_timeout = CALL_WATCHDOG;
    });
    // The shared upstream, started the documented way for this daemon's listener.
    let pw = playwright::Playwright::on_port(
        pw_port,
        "",
        vec![("HANDNODE_LISTEN".into(), d.addr.to_string())],
    );
    pw.restart();
    poll_until(
        || {
            let rpc = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list"});
            d.call("POST", "/mcp", Some(&rpc)).1
        },
        |list| list.to_string().contains("\"browser_navigate\""),
        |list| format!("watchdog: the upstream never listed its tools: {list}"),
    );
    // doctor agrees that the upstream blocks this daemon's origins (the script's list and
    // browser_argv::admin_origins are the same).
    let env: std::collections::HashMap<String, String> = [
        (
            "HANDNODE_UPSTREAM".to_string(),
            format!("browser=http://127.0.0.1:{pw_port}/mcp"),
        ),
        ("HANDNODE_LISTEN".to_string(), d.addr.to_string()),
    ]
    .into();
    let checks = handnode::ops::doctor::upstream_origin_checks(&env);
    assert_eq!(checks.len(), 1);
    assert_eq!(
        checks[0].status,
        handnode::ops::doctor::Status::Ok,
        "{checks:?}"
    );
    let marker = std::env::temp_dir().join(format!("hn-chain-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_file(&marker);
    Stage {
        d,
        _pw: pw,
        pod: StubPod::start(),
        token_file,
        marker,
        _browsers: browsers,
    }
}

/// The grants the chains are tried on, each with the `shell` the escalation check must
/// give it: the boundary claims that a browser can reach.
fn attacked(pod: &StubPod) -> Vec<(&'static str, Value, &'static str)> {
    let body = |session: &str, extra: Value| {
        let mut b =
            json!({"runtime": pod.runtime(), "session": session, "secret": "s3cret-attach"});
        for (k, v) in extra.as_object().unwrap() {
            b[k] = v.clone();
        }
        b
    };
    vec![
        (
            "browser",
            body("chain-browser", json!({"profile": "browser"})),
            "no",
        ),
        (
            "custom",
            body(
                "chain-custom",
                json!({"profile": "custom", "allow": ["browser_navigate", "browser_snapshot"]}),
            ),
            "no",
        ),
        (
            "desktop",
            body(
                "chain-desktop",
                json!({"profile": "desktop", "approve": "shell"}),
            ),
            "gated",
        ),
    ]
}

fn call(conn: &mut PodConn, name: &str, args: Value) -> (String, bool) {
    static N: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);
    conn.set_read_timeout(CALL_WATCHDOG);
    let id = N.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
    let reply = conn.call_tool(json!(id), name, args);
    text_of(&reply["result"])
}

/// Both chains on one grant's socket, through every URL-bearing field of every tool it
/// has: each read and each `javascript:` URL refused however it is spelt, the admin
/// origin blocked. Returns everything the agent was shown.
fn run_chains(s: &Stage, kind: &str, conn: &mut PodConn, tools: &[String]) -> String {
    let mut shown = String::new();
    let port = s.d.addr.port();
    let state = s.d.state_dir();
    let reads = [
        format!("view-source:file://{}", s.token_file.display()),
        format!(
            "view-source:file://{}/",
            s.token_file.parent().unwrap().display()
        ),
        format!("view-source:file://{}", state.join("grants.json").display()),
        format!("file://{}", s.token_file.display()),
    ];
    let js = attack_js(&s.d.token, &s.marker);
    let refused: Vec<String> = reads
        .iter()
        .chain(std::iter::once(&js))
        .flat_map(|u| spellings(u))
        .collect();
    // Issue 35 #5: the spellings the red team opened in a real browser, refused before the
    // browser is asked (its --blocked-origins stays the second layer, for links in pages).
    let admin = [
        format!("http://127.0.0.1:{port}/healthz"),
        format!("http://localhost:{port}/healthz"),
        format!("http://x@127.0.0.1:{port}/healthz"),
        format!("http://x:y@127.0.0.1:{port}/"),
        format!("http://x@localhost:{port}/readyz"),
        format!("http://[::ffff:7f00:1]:{port}/healthz"),
    ];
    let mut tried = 0;
    for (tool, fields) in BROWSER_URL_FIELDS {
        if !tools.iter().any(|t| t == tool) {
            continue;
        }
        for field in *fields {
            let args = |url: &str| {
                let mut a = json!({"action": "new"});
                a[*field] = json!(url);
                a
            };
            for url in &refused {
                let (text, err) = call(conn, tool, args(url));
                assert!(
                    err && text.starts_with(handnode::rules::browser_url::REFUSAL),
                    "{kind}: {tool}.{field} {url:?} was not refused: {text}"
                );
                shown.push_str(&text);
                tried += 1;
            }
            for url in &admin {
                let (text, err) = call(conn, tool, args(url));
                shown.push_str(&text);
                assert!(
                    err && text == handnode::rules::browser_url::ADMIN_REFUSAL,
                    "{kind}: {tool}.{field} {url} reached the admin origin: {text}"
                );
                if tools.iter().any(|t| t == "browser_snapshot") {
                    shown.push_str(&call(conn, "browser_snapshot", json!({})).0);
                }
                tried += 1;
            }
        }
    }
    assert!(tried > 0, "no URL-bearing tool among {tools:?}");
    shown
}

fn chains_hold(isolation: IsolationMode, tag: &str) {
    let s = stage(tag, isolation);
    let mut secrets = vec![s.d.token.clone()];
    // Kept open: a socket dropped here would redial and take the next grant's place.
    let mut conns = Vec::new();
    for (kind, body, shell) in attacked(&s.pod) {
        let g = s.d.attach(body.clone());
        assert_eq!(g["shell"], shell, "{kind}: {g}");
        if kind == "browser" {
            let want = match isolation {
                IsolationMode::None => "none",
                _ => "bwrap",
            };
            assert_eq!(g["browser_isolation"], want, "{g}");
        }
        let id = g["id"].as_str().unwrap().to_string();
        let (_, mut conn) = s.pod.next_session();
        s.d.wait_grant(&id, "attached", |g| g["state"] == "attached");
        let tools: Vec<String> = g["tools"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| t.as_str().unwrap().to_string())
            .collect();
        secrets.push("s3cret-attach".into());
        let shown = run_chains(&s, kind, &mut conn, &tools);
        conns.push(conn);
        for secret in &secrets {
            assert!(
                !shown.contains(secret.as_str()),
                "{kind}: a secret was shown: {shown}"
            );
        }
    }
    std::thread::sleep(SETTLE);
    assert!(!s.marker.exists(), "the marker file was written");
    assert!(
        !audit_has_owner_bash(&s.d.state_dir()),
        "an owner bash call was made"
    );
}

#[test]
fn the_chains_fail_for_every_browser_boundary_with_bwrap() {
    if let Some(why) = missing() {
        return eprintln!("SKIPPED the_chains_fail_for_every_browser_boundary_with_bwrap: {why}");
    }
    chains_hold(IsolationMode::Bwrap, "bw");
}

#[test]
fn the_chains_fail_for_every_browser_boundary_without_bwrap() {
    if let Some(why) = playwright::missing() {
        return eprintln!(
            "SKIPPED the_chains_fail_for_every_browser_boundary_without_bwrap: {why}"
        );
    }
    chains_hold(IsolationMode::None, "nb");
}

/// The escalation check's boundary claims that a browser can reach are the ones attacked
/// above: every fixed profile that the check calls `no` (or `gated` with
/// `approve:"shell"`) and that sees a URL-bearing browser tool. A profile, tool or flag
/// that adds such a claim without being attacked fails here.
#[test]
fn every_browser_boundary_the_escalation_check_claims_is_attacked() {
    let pod = StubPod::start();
    let attacked: Vec<String> = attacked(&pod)
        .into_iter()
        .map(|(_, body, _)| body["profile"].as_str().unwrap().to_string())
        .collect();
    let url_tools: Vec<&str> = BROWSER_URL_FIELDS.iter().map(|(t, _)| *t).collect();
    for profile in Profile::ALL {
        let Some(policy) = ToolPolicy::fixed(profile) else {
            continue;
        };
        let opens_urls = policy.tools().iter().any(|t| url_tools.contains(t))
            || (profile != Profile::Owner && policy.sees_unclassified());
        let claim = policy.escalation(|_| true).shell;
        // `owner` is no boundary and its browser opens anything (contract §14).
        if profile != Profile::Owner && opens_urls && matches!(claim, Shell::No | Shell::Gated) {
            assert!(
                attacked.iter().any(|p| p == profile.as_str()),
                "{} claims shell {:?} and opens URLs, but tests/chains.rs does not attack it",
                profile.as_str(),
                claim
            );
        }
    }
    // The custom list of the issue is itself a claim the check makes.
    let custom = ToolPolicy::new(
        Profile::Custom,
        ToolLists {
            allow: vec!["browser_navigate".into(), "browser_snapshot".into()],
            deny: vec![],
        },
    )
    .unwrap();
    assert_eq!(custom.escalation(|_| false).shell, Shell::No);
}
