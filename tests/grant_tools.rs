//! The graphical and browser tools through a real reverse-attach grant: the stub pod drives
//! `tools/list` and `tools/call` over the grant socket, under `desktop` and `observe`.
//! Needs the display servers of `scripts/ci/displays.sh` and the Playwright upstream of
//! `scripts/ci/playwright.sh`; without them each test prints why and skips.

mod common;
#[path = "displays/mod.rs"]
mod displays;
#[path = "common/playwright.rs"]
mod playwright;

use std::time::Duration;

use common::*;
use handnode::config::DisplayBackend;
use handnode::profiles::Profile;
use handnode::tools;
use serde_json::{json, Value};

fn attach_as(d: &TestDaemon, pod: &StubPod, session: &str, profile: &str) -> PodConn {
    let g = d.attach(
        json!({"runtime": pod.runtime(), "session": session, "profile": profile, "secret": "s"}),
    );
    let id = g["id"].as_str().unwrap().to_string();
    assert_eq!(pod.next_upgrade().status, 101);
    let mut conn = pod.next_conn();
    conn.set_read_timeout(Duration::from_secs(90));
    conn.initialize();
    d.wait_grant(&id, "attached", |g| g["state"] == "attached");
    conn
}

fn names(list: &Value) -> Vec<String> {
    list["result"]["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap().to_string())
        .collect()
}

fn result(reply: &Value) -> &Value {
    assert!(reply.get("error").is_none(), "{reply}");
    assert_ne!(reply["result"]["isError"], true, "{reply}");
    &reply["result"]
}

#[test]
fn desktop_tools_through_a_grant_on_x11() {
    let d11 = match displays::Displays::load() {
        Ok(d) => d,
        Err(why) => return eprintln!("SKIPPED desktop_tools_through_a_grant_on_x11: {why}"),
    };
    let size = d11.x11_size();
    let pod = StubPod::start();
    let d = TestDaemon::with("granttools", |c| {
        c.display_backend = DisplayBackend::X11;
        c.display_env = Some(d11.env_for(DisplayBackend::X11));
    });
    let scratch = displays::Scratch::new("grant-x11");
    let _xterm = displays::Killed(
        d11.command(DisplayBackend::X11, "xterm")
            .args([
                "-geometry",
                "100x30+0+0",
                "-e",
                "bash",
                "--norc",
                "--noprofile",
            ])
            .env("PS1", "$ ")
            .spawn()
            .expect("start xterm"),
    );
    assert!(displays::wait_until(displays::EFFECT_WAIT, || d11
        .command(DisplayBackend::X11, "xdotool")
        .args(["search", "--onlyvisible", "--class", "xterm"])
        .output()
        .map(|o| !o.stdout.is_empty())
        .unwrap_or(false)));

    let mut conn = attach_as(&d, &pod, "desk", "desktop");
    let list = conn.request(json!(1), "tools/list", json!({}));
    assert_eq!(names(&list), tools::names(Profile::Desktop));

    let shot = conn.call_tool(json!(2), "screenshot", json!({}));
    let r = result(&shot);
    let (png, mime) = displays::image(r);
    assert_eq!(mime, "image/png");
    assert_eq!(displays::png_size(&png), size);
    displays::save_screenshot("grant-x11.png", &png);

    let moved = conn.call_tool(
        json!(3),
        "mouse",
        json!({"action": "move", "x": 321, "y": 234}),
    );
    result(&moved);
    assert_eq!(
        d11.x11_pointer(),
        (321, 234),
        "the X server's own view of the pointer"
    );
    result(&conn.call_tool(
        json!(4),
        "mouse",
        json!({"action": "click", "x": 100, "y": 100}),
    ));

    let target = scratch.0.join("typed-through-grant");
    let typed = conn.call_tool(
        json!(5),
        "key",
        json!({"action": "type", "text": format!("echo via-grant > {}\n", target.display())}),
    );
    result(&typed);
    assert!(
        displays::wait_until(displays::EFFECT_WAIT, || std::fs::read_to_string(&target)
            .map(|t| t.trim() == "via-grant")
            .unwrap_or(false)),
        "the command typed through the grant did not run"
    );

    // Under observe only the screenshot remains of the graphical tools.
    let mut obs = attach_as(&d, &pod, "look", "observe");
    let list = obs.request(json!(1), "tools/list", json!({}));
    assert_eq!(names(&list), tools::names(Profile::Observe));
    let shot = obs.call_tool(json!(2), "screenshot", json!({"scale": 0.5}));
    let (png, _) = displays::image(result(&shot));
    assert_eq!(displays::png_size(&png), (size.0 / 2, size.1 / 2));
    let hidden = tools::TOOLS
        .iter()
        .map(|t| t.name)
        .filter(|n| !tools::names(Profile::Observe).contains(n));
    for (i, tool) in hidden.enumerate() {
        let r = obs.call_tool(
            json!(10 + i),
            tool,
            json!({"action": "move", "x": 1, "y": 1}),
        );
        assert_eq!(r["error"]["code"], -32602, "{tool}: {r}");
        assert_eq!(
            r["error"]["message"],
            format!("Invalid params: unknown tool: {tool}")
        );
    }
    assert_eq!(d11.x11_pointer(), (100, 100), "observe moved nothing");
}

#[test]
fn browser_tools_through_a_grant() {
    if let Some(why) = playwright::missing() {
        return eprintln!("SKIPPED browser_tools_through_a_grant: {why}");
    }
    let page = playwright::PageServer::start();
    let upstream = playwright::Playwright::start();
    let pod = StubPod::start();
    let url = upstream.url();
    let d = TestDaemon::with("grantbrowser", |c| {
        c.upstreams = vec![("browser".into(), url)];
        c.timing.upstream_cache_ttl = Duration::from_millis(200);
        c.timing.upstream_timeout = Duration::from_secs(60);
        c.display_backend = DisplayBackend::None;
    });
    let mut conn = attach_as(&d, &pod, "web", "desktop");
    let local = tools::names(Profile::Desktop);
    let want: Vec<String> = local
        .iter()
        .map(|s| s.to_string())
        .chain(
            handnode::profiles::DESKTOP_BROWSER_TOOLS
                .iter()
                .map(|s| s.to_string()),
        )
        .collect();
    // The first listing may race the first background fetch of the upstream's tools.
    let mut listed = Vec::new();
    let deadline = std::time::Instant::now() + playwright::CALL_WATCHDOG;
    let mut n = 100;
    while std::time::Instant::now() < deadline {
        n += 1;
        listed = names(&conn.request(json!(n), "tools/list", json!({})));
        if listed.len() > local.len() {
            break;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let mut sorted_listed = listed[local.len()..].to_vec();
    sorted_listed.sort();
    let mut sorted_want = want[local.len()..].to_vec();
    sorted_want.sort();
    assert_eq!(
        &listed[..local.len()],
        &want[..local.len()],
        "local tools first"
    );
    assert_eq!(
        sorted_listed, sorted_want,
        "exactly the 15 desktop browser tools"
    );

    let nav = conn.call_tool(json!(1), "browser_navigate", json!({"url": page.url}));
    assert!(nav.get("error").is_none(), "{nav}");
    let snap = conn.call_tool(json!(2), "browser_snapshot", json!({}));
    assert!(snap.to_string().contains(playwright::PAGE_TEXT), "{snap}");
    for (i, tool) in ["browser_evaluate", "browser_run_code_unsafe"]
        .iter()
        .enumerate()
    {
        let r = conn.call_tool(json!(3 + i), tool, json!({"function": "() => 1"}));
        assert_eq!(
            r["error"]["message"],
            format!("Invalid params: unknown tool: {tool}"),
            "{r}"
        );
    }

    let mut obs = attach_as(&d, &pod, "peek", "observe");
    let list = names(&obs.request(json!(1), "tools/list", json!({})));
    assert_eq!(
        list,
        tools::names(Profile::Observe),
        "no browser tool under observe"
    );

    // Upstream down: local tools still answer, browser tools disappear.
    upstream.stop();
    let mut gone = false;
    for i in 0..100 {
        let list = names(&conn.request(json!(200 + i), "tools/list", json!({})));
        if list.len() == local.len() {
            gone = true;
            break;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    assert!(gone, "browser tools still listed with the upstream down");
    let info = conn.call_tool(json!(300), "sys_info", json!({}));
    assert!(info.get("error").is_none(), "{info}");
    let echo = conn.call_tool(json!(301), "bash", json!({"command": "echo still-here"}));
    assert!(echo.to_string().contains("still-here"));

    // And back.
    upstream.restart();
    let mut back = false;
    for i in 0..300 {
        let list = names(&conn.request(json!(400 + i), "tools/list", json!({})));
        if list.len() == want.len() {
            back = true;
            break;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    assert!(
        back,
        "browser tools did not come back after the upstream restarted"
    );
}

#[test]
fn screenshot_through_a_grant_on_sway() {
    let dw = match displays::Displays::load() {
        Ok(d) => d,
        Err(why) => return eprintln!("SKIPPED screenshot_through_a_grant_on_sway: {why}"),
    };
    let pod = StubPod::start();
    let d = TestDaemon::with("grantsway", |c| {
        c.display_backend = DisplayBackend::Auto;
        c.display_env = Some(dw.env_for(DisplayBackend::Wayland));
    });
    let mut conn = attach_as(&d, &pod, "wl", "desktop");
    let info = conn.call_tool(json!(1), "sys_info", json!({}));
    assert_eq!(
        result(&info)["structuredContent"]["display"]["backend"],
        "wayland",
        "{info}"
    );
    let shot = conn.call_tool(json!(2), "screenshot", json!({}));
    let (png, _) = displays::image(result(&shot));
    assert_eq!(displays::png_size(&png), dw.sway_size());
    displays::save_screenshot("grant-sway.png", &png);
    let moved = conn.call_tool(
        json!(3),
        "mouse",
        json!({"action": "move", "x": 10, "y": 10}),
    );
    result(&moved);
    let off = conn.call_tool(
        json!(4),
        "mouse",
        json!({"action": "move", "x": 5000, "y": 10}),
    );
    assert_eq!(off["result"]["isError"], true, "{off}");
    let (w, h) = dw.sway_size();
    assert!(off.to_string().contains(&format!("{w}x{h}")), "{off}");
}
