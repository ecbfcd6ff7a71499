//! The graphical tools against real display servers: Xvfb and a headless sway started by
//! `scripts/ci/displays.sh start`. Without them the display tests print why and skip;
//! the no-display test always runs.

mod displays;

use std::time::Duration;

use displays::*;
use handnode::config::DisplayBackend;
use handnode::pool::CallCtl;
use handnode::profiles::Profile;
use serde_json::{json, Value};

fn load_or_skip(test: &str) -> Option<Displays> {
    match Displays::load() {
        Ok(d) => Some(d),
        Err(why) => {
            eprintln!("SKIPPED {test}: {why}");
            None
        }
    }
}

/// Screenshot checks shared by both backends: a PNG of the display's size whose
/// structured content names the coordinate space; a scaled JPEG region; max_bytes.
fn check_screenshots(
    host: &std::sync::Arc<handnode::tools::ToolHost>,
    size: (u32, u32),
    name: &str,
) {
    let result = ok(call(host, "screenshot", json!({})));
    let (png, mime) = image(&result);
    assert_eq!(mime, "image/png");
    assert_eq!(
        png_size(&png),
        size,
        "full screenshot is the display's size"
    );
    let sc = &result["structuredContent"];
    assert_eq!(
        (sc["width"].as_u64(), sc["height"].as_u64()),
        (Some(size.0.into()), Some(size.1.into()))
    );
    assert_eq!(
        sc["coordinate_space"],
        json!({"width": size.0, "height": size.1})
    );
    assert_eq!(sc["scale"], 1.0);
    assert!(result["content"][1]["text"]
        .as_str()
        .unwrap()
        .contains(&format!("{}x{}", size.0, size.1)));
    save_screenshot(&format!("{name}.png"), &png);

    // Region at half scale as JPEG.
    let result = ok(call(
        host,
        "screenshot",
        json!({"region": {"x": 10, "y": 20, "width": 400, "height": 300}, "scale": 0.5, "format": "jpeg"}),
    ));
    let (jpeg, mime) = image(&result);
    assert_eq!(mime, "image/jpeg");
    assert_eq!(&jpeg[..2], &[0xff, 0xd8], "JPEG SOI marker");
    let sc = &result["structuredContent"];
    assert_eq!(
        (sc["width"].as_u64(), sc["height"].as_u64()),
        (Some(200), Some(150))
    );
    assert_eq!(
        sc["region"],
        json!({"x": 10, "y": 20, "width": 400, "height": 300})
    );
    assert_eq!(
        sc["coordinate_space"],
        json!({"width": size.0, "height": size.1})
    );

    // Up-scaling past the long-edge cap is capped.
    let host_cap = host.config.max_screenshot_edge;
    let result = ok(call(host, "screenshot", json!({"scale": 2})));
    let (png, _) = image(&result);
    let (w, h) = png_size(&png);
    assert_eq!(w.max(h), host_cap.min(size.0.max(size.1) * 2));

    let err = tool_error(call(host, "screenshot", json!({"max_bytes": 1024})));
    assert!(
        err.contains("over max_bytes 1024") && err.contains("jpeg"),
        "{err}"
    );
    let err = tool_error(call(
        host,
        "screenshot",
        json!({"region": {"x": size.0 - 10, "y": 0, "width": 11, "height": 10}}),
    ));
    assert!(
        err.contains(&format!("{}x{} pixels", size.0, size.1)),
        "{err}"
    );
    let err = tool_error(call(host, "screenshot", json!({"display": 7})));
    assert!(err.contains("display 7 does not exist"), "{err}");
}

/// Every graphical tool works, but the accessibility ones, which also need a session bus
/// (this host has none: tests/a11y.rs gives them one).
fn check_tools_work(facts: &Value) {
    use handnode::tools::display::Gui;
    for (tool, gui) in handnode::tools::display::gui_tools() {
        let tool = tool.name;
        if matches!(gui, Gui::A11ySnapshot | Gui::A11yAct) {
            assert_eq!(facts["tools"][tool]["works"], false, "{facts}");
            let why = facts["tools"][tool]["why"].as_str().unwrap();
            assert!(why.contains("DBUS_SESSION_BUS_ADDRESS"), "{why}");
        } else {
            assert_eq!(facts["tools"][tool]["works"], true, "{facts}");
        }
    }
}

/// Key and mouse errors shared by both backends.
fn check_input_errors(host: &std::sync::Arc<handnode::tools::ToolHost>, size: (u32, u32)) {
    let err = tool_error(call(
        host,
        "key",
        json!({"action": "press", "keys": ["ctrl+bogus"]}),
    ));
    assert!(
        err.contains("unknown key 'bogus'") && err.contains("Return (enter"),
        "{err}"
    );
    for (x, y) in [(size.0, 0), (0, size.1), (size.0 + 500, size.1 + 500)] {
        let err = tool_error(call(
            host,
            "mouse",
            json!({"action": "move", "x": x, "y": y}),
        ));
        assert!(err.contains("off the screen"), "{err}");
        assert!(
            err.contains(&format!("{}x{} pixels", size.0, size.1)),
            "{err}"
        );
    }
    let err = tool_error(call(
        host,
        "mouse",
        json!({"action": "drag", "x": 1, "y": 1, "to_x": size.0, "to_y": 1}),
    ));
    assert!(err.contains("off the screen"), "{err}");
}

fn type_and_see(host: &std::sync::Arc<handnode::tools::ToolHost>, dir: &Scratch, tag: &str) {
    let target = dir.0.join(format!("{tag}-typed"));
    let command = format!("echo typed-{tag} > {}\n", target.display());
    ok(call(
        host,
        "key",
        json!({"action": "type", "text": command}),
    ));
    let typed = wait_until(EFFECT_WAIT, || {
        std::fs::read_to_string(&target)
            .map(|t| t.trim() == format!("typed-{tag}"))
            .unwrap_or(false)
    });
    if !typed {
        // Keep what the screen showed, for whoever reads the failure.
        if let handnode::wire::mcp::ToolOutput::Result(r) = call(host, "screenshot", json!({})) {
            if r.get("isError").is_none() {
                save_screenshot(&format!("{tag}-typing-failed.png"), &image(&r).0);
            }
        }
    }
    assert!(
        typed,
        "the command typed into the {tag} terminal did not write {} (screen saved as \
         target/screenshots/{tag}-typing-failed.png)",
        target.display()
    );
    // press: the shell sees a chord and a named key.
    let second = dir.0.join(format!("{tag}-pressed"));
    ok(call(
        host,
        "key",
        json!({"action": "type", "text": format!("echo pressed > {}", second.display())}),
    ));
    ok(call(
        host,
        "key",
        json!({"action": "press", "keys": ["Return"]}),
    ));
    assert!(
        wait_until(EFFECT_WAIT, || second.exists()),
        "pressing Return in the {tag} terminal did not run the command"
    );
}

#[test]
fn x11_screenshot_keys_and_mouse() {
    let Some(d) = load_or_skip("x11_screenshot_keys_and_mouse") else {
        return;
    };
    let size = d.x11_size();
    let host = d.host(DisplayBackend::X11);
    let dir = Scratch::new("x11");

    let facts = handnode::tools::display::facts(&host);
    assert_eq!(facts["backend"], "x11", "{facts}");
    assert_eq!(facts["displays"][0]["width"], size.0);
    assert_eq!(facts["displays"][0]["height"], size.1);
    check_tools_work(&facts);

    let _xterm = Killed(
        d.command(DisplayBackend::X11, "xterm")
            .args(["-geometry", "100x30+0+0", "-fa", "Monospace", "-fs", "11"])
            .args(["-e", "bash", "--norc", "--noprofile"])
            .env("PS1", "$ ")
            .spawn()
            .expect("start xterm"),
    );
    assert!(
        wait_until(EFFECT_WAIT, || d
            .command(DisplayBackend::X11, "xdotool")
            .args(["search", "--onlyvisible", "--class", "xterm"])
            .output()
            .map(|o| !o.stdout.is_empty())
            .unwrap_or(false)),
        "xterm window did not appear"
    );

    // The pointer lands where mouse says (checked by the X server's own view).
    ok(call(
        &host,
        "mouse",
        json!({"action": "move", "x": 700, "y": 500}),
    ));
    assert_eq!(d.x11_pointer(), (700, 500));
    ok(call(
        &host,
        "mouse",
        json!({"action": "scroll", "x": 650, "y": 450, "dy": 2, "dx": -1}),
    ));
    assert_eq!(d.x11_pointer(), (650, 450));
    ok(call(
        &host,
        "mouse",
        json!({"action": "drag", "x": 600, "y": 400, "to_x": 610, "to_y": 420}),
    ));
    assert_eq!(d.x11_pointer(), (610, 420));
    // Without a window manager keyboard focus follows the pointer: click into xterm.
    let out = ok(call(
        &host,
        "mouse",
        json!({"action": "click", "x": 100, "y": 100}),
    ));
    assert_eq!(d.x11_pointer(), (100, 100));
    assert!(out["content"][0]["text"]
        .as_str()
        .unwrap()
        .contains("(100, 100)"));

    type_and_see(&host, &dir, "x11");
    check_cancel(&host);
    ok(call(
        &host,
        "key",
        json!({"action": "press", "keys": ["ctrl+u"]}),
    ));
    // A cancel must not leave a key held (a held key swallows its next press).
    type_and_see(&host, &dir, "x11-after-cancel");
    check_input_errors(&host, size);
    check_screenshots(&host, size, "x11");
}

#[test]
fn sway_screenshot_keys_and_mouse() {
    let Some(d) = load_or_skip("sway_screenshot_keys_and_mouse") else {
        return;
    };
    let size = d.sway_size();
    let host = d.host(DisplayBackend::Wayland);
    let dir = Scratch::new("sway");

    let facts = handnode::tools::display::facts(&host);
    assert_eq!(facts["backend"], "wayland", "{facts}");
    assert_eq!(facts["displays"][0]["width"], size.0, "{facts}");
    assert_eq!(facts["displays"][0]["height"], size.1);
    assert_eq!(facts["displays"][0]["name"], "HEADLESS-1");
    check_tools_work(&facts);

    // Start from an empty workspace, then two terminals side by side.
    d.swaymsg_quiet(&["[app_id=foot]", "kill"]);
    assert!(wait_until(EFFECT_WAIT, || sway_views(
        &d.swaymsg(&["-t", "get_tree"])
    )
    .is_empty()));
    for expected in 1..=2 {
        d.swaymsg(&[
            "exec",
            "foot -o font=monospace:size=11 bash --norc --noprofile",
        ]);
        assert!(
            wait_until(EFFECT_WAIT, || sway_views(&d.swaymsg(&["-t", "get_tree"]))
                .len()
                == expected),
            "foot window {expected} did not appear"
        );
    }
    let views = sway_views(&d.swaymsg(&["-t", "get_tree"]));
    let left = views.iter().min_by_key(|v| v.rect.0).unwrap().clone();
    let right = views.iter().max_by_key(|v| v.rect.0).unwrap().clone();
    assert!(
        right.focused,
        "the newest terminal (right) starts focused: {views:?}"
    );
    assert_ne!(left.id, right.id);

    // A click in the left terminal moves focus there (sway's own view of focus).
    let (lx, ly, lw, lh) = left.rect;
    let (cx, cy) = ((lx + lw / 2) as u32, (ly + lh / 2) as u32);
    ok(call(
        &host,
        "mouse",
        json!({"action": "click", "x": cx, "y": cy}),
    ));
    let focused = |d: &Displays| {
        sway_views(&d.swaymsg(&["-t", "get_tree"]))
            .into_iter()
            .find(|v| v.focused)
            .map(|v| v.id)
    };
    assert!(
        wait_until(EFFECT_WAIT, || focused(&d) == Some(left.id)),
        "click at ({cx}, {cy}) did not focus the left terminal"
    );
    let (rx, ry, rw, rh) = right.rect;
    ok(call(
        &host,
        "mouse",
        json!({"action": "click", "x": (rx + rw / 2) as u32, "y": (ry + rh / 2) as u32}),
    ));
    assert!(wait_until(EFFECT_WAIT, || focused(&d) == Some(right.id)));
    // The other actions run through the virtual pointer without protocol errors.
    ok(call(
        &host,
        "mouse",
        json!({"action": "scroll", "x": cx, "y": cy, "dy": -3}),
    ));
    ok(call(
        &host,
        "mouse",
        json!({"action": "drag", "x": 5, "y": 5, "to_x": 20, "to_y": 30}),
    ));
    ok(call(
        &host,
        "mouse",
        json!({"action": "double_click", "x": (rx + rw / 2) as u32, "y": (ry + rh / 2) as u32}),
    ));
    ok(call(
        &host,
        "mouse",
        json!({"action": "move", "x": size.0 - 1, "y": size.1 - 1}),
    ));

    type_and_see(&host, &dir, "sway");
    check_input_errors(&host, size);
    check_screenshots(&host, size, "sway");
    d.swaymsg_quiet(&["[app_id=foot]", "kill"]);
}

#[test]
fn no_display_answers_tool_errors_that_say_what_is_missing() {
    let calls: [(&str, Value); 3] = [
        ("screenshot", json!({})),
        ("mouse", json!({"action": "move", "x": 1, "y": 1})),
        ("key", json!({"action": "press", "keys": ["Return"]})),
    ];
    let empty = std::collections::BTreeMap::new();
    let cases = [
        (
            host_with(DisplayBackend::Auto, Some(empty.clone())),
            "neither WAYLAND_DISPLAY nor DISPLAY",
        ),
        (
            host_with(DisplayBackend::None, Some(empty.clone())),
            "--display-backend none",
        ),
        (
            host_with(DisplayBackend::X11, Some(empty.clone())),
            "DISPLAY is not set",
        ),
        (
            host_with(DisplayBackend::Wayland, Some(empty)),
            "WAYLAND_DISPLAY is not set",
        ),
    ];
    for (host, needle) in &cases {
        for (tool, args) in &calls {
            let err = tool_error(call(host, tool, args.clone()));
            assert!(err.starts_with(&format!("{tool} unavailable: ")), "{err}");
            assert!(err.contains(needle), "{tool}: {err}");
        }
    }
    // Bad argument shapes are -32602 even with no display.
    let host = &cases[0].0;
    match call(host, "mouse", json!({"action": "move", "x": "left"})) {
        handnode::wire::mcp::ToolOutput::InvalidParams(msg) => {
            assert!(msg.contains("`x`"), "{msg}")
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn missing_helpers_are_named_with_their_packages() {
    let Some(d) = load_or_skip("missing_helpers_are_named_with_their_packages") else {
        return;
    };
    let mut env = d.env_for(DisplayBackend::X11);
    env.insert("PATH".into(), "/nonexistent".into());
    let host = host_with(DisplayBackend::X11, Some(env));
    let err = tool_error(call(&host, "key", json!({"action": "type", "text": "x"})));
    assert!(
        err.contains("xdotool is not installed (Debian/Ubuntu: apt install xdotool)"),
        "{err}"
    );
    let err = tool_error(call(&host, "screenshot", json!({})));
    assert!(err.contains("apt install scrot"), "{err}");

    let mut env = d.env_for(DisplayBackend::Wayland);
    env.insert("PATH".into(), "/nonexistent".into());
    let host = host_with(DisplayBackend::Wayland, Some(env));
    let err = tool_error(call(
        &host,
        "key",
        json!({"action": "press", "keys": ["a"]}),
    ));
    assert!(err.contains("wtype is not installed"), "{err}");
    let err = tool_error(call(&host, "screenshot", json!({})));
    assert!(err.contains("grim is not installed"), "{err}");
}

/// A cancel stops `key type` between chunks: before it starts, and while it types.
/// Runs inside a display test so no other test types into the same display meanwhile.
fn check_cancel(host: &std::sync::Arc<handnode::tools::ToolHost>) {
    let host = host.clone();
    let ctl = CallCtl::new();
    ctl.cancel();
    let err = tool_error(call_ctl(
        &host,
        Profile::Owner,
        "key",
        json!({"action": "type", "text": "a".repeat(500)}),
        ctl,
    ));
    assert!(err.contains("cancelled"), "{err}");

    // Cancel while typing: 200 chars at 20 ms is ~4 s of typing.
    let ctl = CallCtl::new();
    let (tx, rx) = crossbeam_channel::bounded(1);
    let cx = handnode::tools::CallContext {
        policy: handnode::tools::policy::ToolPolicy::owner(),
        grant: None,
        limits: handnode::tools::CallLimits::LOCAL_HTTP,
        ctl: ctl.clone(),
        host: host.clone(),
        principal: "test".into(),
    };
    handnode::tools::start_local(
        "key",
        json!({"action": "type", "text": " ".repeat(200), "delay_ms": 20}),
        cx,
        handnode::pool::Completion::new(move |out| {
            let _ = tx.send(out);
        }),
    );
    // Cancelling at any moment must stop before all 200 characters; waiting a little
    // first makes it likely (not required) that it lands mid-typing.
    std::thread::sleep(Duration::from_millis(300));
    ctl.cancel();
    let err = tool_error(rx.recv_timeout(CALL_WATCHDOG).expect("key answered"));
    assert!(err.contains("cancelled after"), "{err}");
    assert!(!err.contains("after 200 of"), "{err}");
}
