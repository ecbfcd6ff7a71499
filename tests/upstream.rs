//! Browser tools through a real Playwright MCP upstream: listing and filtering per
//! profile, calls passed through, the upstream going away and coming back, and every tool
//! the pinned version offers (with every `--caps`) having a class.
//! Skips (saying why) when Playwright MCP or chromium is not installed;
//! `scripts/ci/playwright.sh` installs both.

#[path = "common/playwright.rs"]
mod playwright;

use std::time::{Duration, Instant};

use handnode::browser::upstream::{UpstreamOptions, Upstreams};
use handnode::profiles::{Profile, BROWSER_TOOL_CLASSES, DESKTOP_BROWSER_TOOLS, PINNED_UPSTREAM};
use handnode::tools::policy::{self, ToolLists, ToolPolicy};
use handnode::tools::UpstreamSource;
use handnode::wire::mcp::INVALID_PARAMS;
use playwright::{result_text, Conn, PageServer, Playwright, PAGE_TEXT};
use serde_json::json;

/// How long the upstream may take to come back and be listed again after a restart.
const RECOVERY_WATCHDOG: Duration = Duration::from_secs(60);

fn options() -> UpstreamOptions {
    UpstreamOptions {
        // Generous: the first call launches chromium on a busy machine.
        timeout: Duration::from_secs(60),
        cache_ttl: Duration::from_millis(200),
        call_threads: 2,
        call_queue: 8,
        max_reply_bytes: 16 << 20,
        max_list_pages: 16,
        tls: None,
    }
}

fn local(profile: Profile) -> Vec<String> {
    handnode::tools::names(profile)
        .iter()
        .map(|s| s.to_string())
        .collect()
}

fn assert_unknown_tool(reply: &serde_json::Value, name: &str) {
    assert_eq!(reply["error"]["code"], INVALID_PARAMS, "{name}: {reply}");
    assert_eq!(
        reply["error"]["message"],
        format!("Invalid params: unknown tool: {name}"),
        "{reply}"
    );
}

/// Navigate to the page and check the snapshot shows its text.
fn browse(conn: &mut Conn, url: &str) {
    let nav = conn.call("browser_navigate", json!({"url": url}));
    assert_ne!(nav["result"]["isError"], true, "{nav}");
    let snap = conn.call("browser_snapshot", json!({}));
    assert_ne!(snap["result"]["isError"], true, "{snap}");
    let text = result_text(&snap);
    assert!(
        text.contains(PAGE_TEXT),
        "snapshot lacks the page text: {text}"
    );
}

#[test]
fn browser_tools_through_a_real_playwright_upstream() {
    if let Some(reason) = playwright::missing() {
        eprintln!("SKIPPED browser_tools_through_a_real_playwright_upstream: {reason}");
        return;
    }
    let page = PageServer::start();
    let pw = Playwright::start();
    let up = Upstreams::with_options(vec![("browser".into(), pw.url())], options()).unwrap();
    up.refresh_now();
    assert_eq!(up.status()[0].error, None);

    // desktop: the local tools, then exactly the 15 allow-listed browser tools.
    let mut desktop = Conn::open(Profile::Desktop, &up);
    let names = desktop.tool_names();
    let n_local = local(Profile::Desktop).len();
    assert_eq!(names[..n_local], local(Profile::Desktop)[..]);
    let mut browser: Vec<&str> = names[n_local..].iter().map(String::as_str).collect();
    browser.sort_unstable();
    let mut allowed = DESKTOP_BROWSER_TOOLS.to_vec();
    allowed.sort_unstable();
    assert_eq!(browser, allowed);

    browse(&mut desktop, &page.url);

    // Image blocks pass through as the upstream sent them.
    let shot = desktop.call("browser_take_screenshot", json!({"type": "png"}));
    assert_ne!(shot["result"]["isError"], true, "{shot}");
    let blocks = shot["result"]["content"].as_array().expect("content");
    let image = blocks
        .iter()
        .find(|b| b["type"] == "image")
        .unwrap_or_else(|| panic!("no image block in {shot}"));
    assert_eq!(image["mimeType"], "image/png");
    let data = image["data"].as_str().expect("base64 data");
    assert!(
        data.starts_with("iVBORw0KGgo"),
        "not a PNG: {}",
        &data[..16.min(data.len())]
    );

    // Code execution in the page is refused exactly like a tool that does not exist, and
    // never reaches the upstream.
    for name in [
        "browser_evaluate",
        "browser_run_code_unsafe",
        "browser_no_such_tool",
    ] {
        let reply = desktop.call(name, json!({"function": "() => 1", "code": "1"}));
        assert_unknown_tool(&reply, name);
    }

    // owner sees every upstream tool, including the ones desktop may not use.
    let mut owner = Conn::open(Profile::Owner, &up);
    let owner_names = owner.tool_names();
    for name in ["browser_evaluate", "browser_run_code_unsafe"] {
        assert!(owner_names.iter().any(|n| n == name), "owner lacks {name}");
    }
    assert_eq!(
        owner_names.len(),
        local(Profile::Owner).len() + up.tools().len()
    );

    // observe: no browser tool at all.
    let mut observe = Conn::open(Profile::Observe, &up);
    assert_eq!(observe.tool_names(), local(Profile::Observe));
    assert_unknown_tool(
        &observe.call("browser_navigate", json!({"url": page.url})),
        "browser_navigate",
    );

    // The upstream dies: its tools go, local tools still list and answer.
    pw.stop();
    assert!(!pw.running());
    up.refresh_now();
    assert!(up.tools().is_empty());
    assert_eq!(desktop.tool_names(), local(Profile::Desktop));
    let sys = desktop.call("sys_info", json!({}));
    assert!(sys.get("result").is_some(), "local tool must answer: {sys}");
    assert_unknown_tool(
        &desktop.call("browser_snapshot", json!({})),
        "browser_snapshot",
    );

    // It restarts on the same port: listing alone brings the tools back (each lookup of an
    // empty cache triggers a background refresh), and calls work on a new session.
    pw.restart();
    let deadline = Instant::now() + RECOVERY_WATCHDOG;
    while up.tools().is_empty() {
        let now = Instant::now();
        assert!(now < deadline, "browser tools did not come back");
        let generation = up.refresh_generation(0);
        let _ = desktop.tool_names();
        assert!(
            up.wait_refreshed(0, generation, deadline - now),
            "no refresh finished within the watchdog"
        );
    }
    let names = desktop.tool_names();
    assert_eq!(names.len(), n_local + DESKTOP_BROWSER_TOOLS.len());
    browse(&mut desktop, &page.url);
}

#[test]
fn every_tool_of_the_pinned_upstream_has_a_class() {
    if let Some(reason) = playwright::missing() {
        eprintln!("SKIPPED every_tool_of_the_pinned_upstream_has_a_class: {reason}");
        return;
    }
    let (package, version, caps) = PINNED_UPSTREAM;
    assert_eq!(
        Playwright::installed_version().as_deref(),
        Some(version),
        "{package} is not the pinned {version} (scripts/ci/playwright.sh installs it); moving \
         the pin means classifying its tools in profiles::BROWSER_TOOL_CLASSES first"
    );
    let pw = Playwright::with_caps(caps);
    let up = Upstreams::with_options(vec![("browser".into(), pw.url())], options()).unwrap();
    up.refresh_now();
    assert_eq!(up.status()[0].error, None);
    let offered: Vec<String> = up
        .tools()
        .iter()
        .map(|(_, t)| t["name"].as_str().expect("a named tool").to_string())
        .collect();
    let unclassified: Vec<&String> = offered
        .iter()
        .filter(|n| policy::classify(n).is_none())
        .collect();
    assert!(
        unclassified.is_empty(),
        "{package} {version} --caps {caps} offers tools without a class: {unclassified:?}; \
         give each a class and a reason in profiles::BROWSER_TOOL_CLASSES"
    );
    assert!(up.unclassified(0).is_empty(), "{:?}", up.unclassified(0));
    for t in BROWSER_TOOL_CLASSES {
        assert!(
            offered.iter().any(|n| n == t.name),
            "BROWSER_TOOL_CLASSES classifies {}, which {package} {version} --caps {caps} no \
             longer offers",
            t.name
        );
    }
    assert_eq!(offered.len(), BROWSER_TOOL_CLASSES.len(), "{offered:?}");

    // A pattern through the real catalogue: every classified browser tool offered, minus
    // the denied one, which is then refused like a tool that does not exist.
    let lists = ToolLists {
        allow: vec!["browser_*".into()],
        deny: vec!["browser_run_code_unsafe".into()],
    };
    let custom = ToolPolicy::new(Profile::Custom, lists).unwrap();
    let mut conn = Conn::with_policy(custom, &up);
    let listed = conn.tool_names();
    let want: Vec<&String> = offered
        .iter()
        .filter(|n| *n != "browser_run_code_unsafe")
        .collect();
    assert_eq!(listed.iter().collect::<Vec<_>>(), want);
    assert_unknown_tool(
        &conn.call("browser_run_code_unsafe", json!({"code": "1"})),
        "browser_run_code_unsafe",
    );
    assert_unknown_tool(&conn.call("sys_info", json!({})), "sys_info");
}
