//! The live view of the box's own display (contract §23): a raw RFB client over
//! `GET /attach/{id}/view` for grants without `"display":"own"`, bridged to x11vnc (the
//! CI's Xvfb :99, 1280x800) or wayvnc (its headless sway) on a Unix socket started for the
//! first viewer. Pointer events reach the display only while the lender holds the one wheel
//! of the box's display (read back with xdotool on :99), every grant's `mouse` on it is
//! refused meanwhile, and the server is gone after the last viewer and the linger, on halt,
//! and with the daemon. Skips, saying why, without x11vnc, wayvnc, xdotool or the displays.

mod common;
#[path = "displays/mod.rs"]
mod displays;
#[path = "common/viewer.rs"]
mod viewer;

use std::collections::BTreeMap;
use std::path::Path;
use std::time::{Duration, Instant};

use common::*;
use displays::Displays;
use handnode::config::DisplayBackend;
use serde_json::{json, Value};
use viewer::*;

/// The tests count this process's x11vnc and wayvnc children: one test at a time.
static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn serial() -> std::sync::MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

fn skip(test: &str) -> bool {
    for program in ["x11vnc", "xdotool"] {
        if !Path::new("/usr/bin").join(program).exists() {
            eprintln!("SKIPPED {test}: {program} is not installed (scripts/ci/packages.sh)");
            return true;
        }
    }
    if !Path::new("/tmp/.X11-unix/X99").exists() {
        eprintln!("SKIPPED {test}: no Xvfb on :99 (bash scripts/ci/displays.sh start)");
        return true;
    }
    false
}

/// The pointer on :99, read by the test itself.
fn pointer() -> (u32, u32) {
    let out = std::process::Command::new("xdotool")
        .arg("getmouselocation")
        .env("DISPLAY", ":99")
        .output()
        .unwrap();
    let out = String::from_utf8_lossy(&out.stdout).to_string();
    let field = |name: &str| -> u32 {
        out.split_whitespace()
            .find_map(|w| w.strip_prefix(name))
            .and_then(|v| v.parse().ok())
            .unwrap_or_else(|| panic!("getmouselocation: {out:?}"))
    };
    (field("x:"), field("y:"))
}

/// The box's X display as the daemon sees it.
fn x11_env() -> BTreeMap<String, String> {
    [("PATH", "/usr/local/bin:/usr/bin:/bin"), ("DISPLAY", ":99")]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

fn move_pointer(x: u32, y: u32) {
    let ok = std::process::Command::new("xdotool")
        .args(["mousemove", &x.to_string(), &y.to_string()])
        .env("DISPLAY", ":99")
        .status()
        .unwrap();
    assert!(ok.success());
}

/// The processes named `name` this test process started (the in-process daemon's children).
fn our_children(name: &str) -> usize {
    let me = std::process::id().to_string();
    let comm = format!("({name}");
    std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter(|e| {
            let stat = std::fs::read_to_string(e.path().join("stat")).unwrap_or_default();
            let Some((head, rest)) = stat.rsplit_once(") ") else {
                return false;
            };
            let mut fields = rest.split_whitespace();
            let state = fields.next().unwrap_or("Z");
            let ppid = fields.next().unwrap_or("");
            head.ends_with(&comm) && ppid == me && state != "Z"
        })
        .count()
}

struct Agent {
    conn: PodConn,
    next: u64,
}

impl Agent {
    fn call(&mut self, tool: &str, args: Value) -> Value {
        self.next += 1;
        let reply = self.conn.call_tool(json!(self.next), tool, args);
        result(&reply).clone()
    }
}

/// A daemon whose box display is `env` (the daemon's display environment), lingering 200 ms.
fn daemon(tag: &str, backend: DisplayBackend, env: BTreeMap<String, String>) -> TestDaemon {
    TestDaemon::with(tag, move |c| {
        quiet_liveness(c);
        c.display_backend = backend;
        c.display_env = Some(env);
        c.own_display.box_view_linger = Duration::from_millis(200);
        c.own_display.stop_timeout = Duration::from_millis(500);
    })
}

fn grant(d: &TestDaemon, pod: &StubPod, session: &str, profile: &str) -> (String, Agent) {
    let (id, mut conn) = d.attached_with(pod, attach_body(pod, session, profile));
    conn.set_read_timeout(Duration::from_secs(60));
    conn.initialize();
    (id, Agent { conn, next: 100 })
}

/// The TCP sockets (v4 and v6, any state) held by this process's children named `name`:
/// the box view's server must have none.
fn tcp_sockets_of(name: &str) -> Vec<String> {
    let me = std::process::id().to_string();
    let comm = format!("({name})");
    let tables: String = ["/proc/net/tcp", "/proc/net/tcp6"]
        .iter()
        .map(|t| std::fs::read_to_string(t).unwrap_or_default())
        .collect();
    let inodes: Vec<String> = tables
        .lines()
        .filter_map(|l| l.split_whitespace().nth(9).map(String::from))
        .collect();
    let mut found = Vec::new();
    for e in std::fs::read_dir("/proc").unwrap().flatten() {
        let stat = std::fs::read_to_string(e.path().join("stat")).unwrap_or_default();
        let ours = stat.contains(&comm)
            && stat
                .rsplit_once(") ")
                .and_then(|(_, rest)| rest.split_whitespace().nth(1))
                == Some(me.as_str());
        if !ours {
            continue;
        }
        for fd in std::fs::read_dir(e.path().join("fd"))
            .into_iter()
            .flatten()
            .flatten()
        {
            let link = std::fs::read_link(fd.path()).unwrap_or_default();
            let link = link.to_string_lossy();
            if let Some(inode) = link
                .strip_prefix("socket:[")
                .and_then(|l| l.strip_suffix(']'))
            {
                if inodes.iter().any(|i| i == inode) {
                    found.push(link.to_string());
                }
            }
        }
    }
    found
}

/// Wait (bounded by the watchdog) until none of `name` runs as this process's child.
fn gone(name: &str) {
    let deadline = Instant::now() + WATCHDOG;
    while our_children(name) > 0 {
        assert!(Instant::now() < deadline, "watchdog: {name} still runs");
        // No signal says when another process's child has exited: polled.
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn the_box_display_is_viewed_through_x11vnc_and_driven_only_with_the_wheel() {
    let _serial = serial();
    if skip("the_box_display_is_viewed_through_x11vnc_and_driven_only_with_the_wheel") {
        return;
    }
    let d = daemon("live_view_box", DisplayBackend::X11, x11_env());
    let pod = StubPod::start();
    let (id, mut agent) = grant(&d, &pod, "s1", "desktop");
    let (other, mut other_agent) = grant(&d, &pod, "s2", "desktop");
    assert_eq!(
        our_children("x11vnc"),
        0,
        "nothing runs before the first viewer"
    );
    // The console's cue that it may ask for a view: x11vnc is there for the box's X display
    // (known once the first listing's probe has run on its own thread).
    poll_until(
        || d.grant(&id),
        |g| g["live_view"] == true,
        |g| format!("watchdog: the grant JSON never said live_view true: {g}"),
    );
    assert_eq!(our_children("x11vnc"), 0, "saying so started no server");

    let mut v = view(&d, &id);
    let (version, size) = v.handshake();
    assert!(version.starts_with("RFB 003.00"), "{version:?}");
    assert_eq!(size, (1280, 800), "the box display's size");
    assert!(v.update() >= 1, "a framebuffer update");
    assert_eq!(our_children("x11vnc"), 1, "one x11vnc, the daemon's child");
    assert_eq!(
        tcp_sockets_of("x11vnc"),
        Vec::<String>::new(),
        "a TCP socket"
    );
    let sock = d.dir.join("state/displays/box-view/rfb.sock");
    assert!(sock.exists(), "{}", sock.display());
    let mode = std::fs::metadata(sock.parent().unwrap())
        .unwrap()
        .permissions();
    assert_eq!(
        std::os::unix::fs::PermissionsExt::mode(&mode) & 0o777,
        0o700
    );

    // View-only: the viewer's pointer does not move the box's pointer.
    move_pointer(10, 10);
    v.pointer(300, 200);
    assert_eq!(
        pointer(),
        (10, 10),
        "the viewer's pointer reached the display"
    );

    // The lender takes the wheel: their pointer moves it, the agent's mouse is refused,
    // that grant's and every other grant's on the box's display (one wheel, one screen).
    assert_eq!(wheel(&d, &id, true)["wheel"], "lender");
    assert_eq!(d.grant(&other)["wheel"], "lender");
    v.pointer(300, 200);
    assert_eq!(
        pointer(),
        (300, 200),
        "the lender's pointer did not reach the display"
    );
    for a in [&mut agent, &mut other_agent] {
        let r = a.call("mouse", json!({"action": "move", "x": 5, "y": 5}));
        assert_eq!(r["isError"], true, "{r}");
        let text = r["content"][0]["text"].as_str().unwrap_or("");
        assert!(text.contains("has the wheel"), "{text}");
    }
    assert_eq!(pointer(), (300, 200), "the refused mouse moved the pointer");
    for detail in [false, true] {
        let info = other_agent.call("sys_info", json!({ "detail": detail }));
        assert_eq!(info["structuredContent"]["wheel"], "lender", "{info}");
    }

    // Given back: the agent drives again, the viewer's input is dropped again.
    assert_eq!(wheel(&d, &other, false)["wheel"], "agent");
    let r = agent.call("mouse", json!({"action": "move", "x": 40, "y": 30}));
    assert_ne!(r["isError"], true, "{r}");
    assert_eq!(pointer(), (40, 30));
    let info = other_agent.call("sys_info", json!({}));
    assert_eq!(info["structuredContent"]["wheel"], "agent", "{info}");
    v.pointer(600, 400);
    assert_eq!(pointer(), (40, 30));

    // A second viewer shares the one server; the last one leaving stops it after the
    // linger.
    let mut w = view(&d, &other);
    assert_eq!(w.handshake().1, (1280, 800));
    assert_eq!(our_children("x11vnc"), 1);
    drop(v);
    drop(w);
    gone("x11vnc");
}

#[test]
fn an_observe_grant_is_watched_and_the_daemon_stop_leaves_no_server() {
    let _serial = serial();
    if skip("an_observe_grant_is_watched_and_the_daemon_stop_leaves_no_server") {
        return;
    }
    let d = daemon("live_view_box_observe", DisplayBackend::X11, x11_env());
    let pod = StubPod::start();
    let (id, _agent) = grant(&d, &pod, "s1", "observe");
    let mut v = view(&d, &id);
    assert_eq!(v.handshake().1, (1280, 800));
    assert!(v.update() >= 1);
    let dir = d.dir.clone();
    drop(d);
    assert_eq!(our_children("x11vnc"), 0, "x11vnc outlived the daemon");
    assert!(!dir.join("state/displays/box-view").exists());
}

#[test]
fn without_x11vnc_the_view_says_what_to_install() {
    let _serial = serial();
    if skip("without_x11vnc_the_view_says_what_to_install") {
        return;
    }
    let empty = std::env::temp_dir().join(format!("handnode-no-vnc-{}", std::process::id()));
    std::fs::create_dir_all(&empty).unwrap();
    let mut env = x11_env();
    env.insert("PATH".into(), empty.display().to_string());
    let browsers = std::env::temp_dir().join(format!("handnode-box-br-{}", std::process::id()));
    let fake = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/fixtures/fake-browser.sh"
    );
    let dir = browsers.clone();
    let d = TestDaemon::with("live_view_box_missing", move |c| {
        quiet_liveness(c);
        c.display_backend = DisplayBackend::X11;
        c.display_env = Some(env);
        c.browser_command = Some(vec!["bash".into(), fake.into()]);
        c.browser_dir = Some(dir);
    });
    let pod = StubPod::start();
    let (id, _agent) = grant(&d, &pod, "s1", "desktop");
    let (status, body) = open_view(&d, &id, true, &[]).err().expect("refused");
    assert_eq!(status, 503, "{body}");
    assert!(body.contains("apt install x11vnc"), "{body}");
    assert_eq!(our_children("x11vnc"), 0);
    // `/view` probed the display: the grant JSON now says, on that probe, that it cannot be
    // viewed (the console keeps its screenshot).
    assert_eq!(d.grant(&id)["live_view"], false, "{}", d.grant(&id));
    // A browser grant drives its own browser, never the box's screen: nothing to view.
    let (browser, _conn) = d.attached_with(&pod, attach_body(&pod, "s2", "browser"));
    let (status, body) = open_view(&d, &browser, true, &[]).err().expect("refused");
    assert_eq!(status, 404, "{body}");
    assert!(body.contains("browser grant has no display"), "{body}");
    let g = d.grant(&browser);
    assert!(
        g.get("live_view").is_none() && g.get("wheel").is_none(),
        "{g}"
    );
    let (status, body) = d.call(
        "POST",
        &format!("/attach/{browser}/wheel"),
        Some(&json!({"take": true})),
    );
    assert_eq!(status, 404, "{body}");
    drop(d);
    let _ = std::fs::remove_dir(&empty);
    let _ = std::fs::remove_dir_all(&browsers);
}

#[test]
fn sway_is_viewed_through_wayvnc() {
    let _serial = serial();
    let test = "sway_is_viewed_through_wayvnc";
    let Ok(displays) = Displays::load() else {
        eprintln!("SKIPPED {test}: no target/displays.env (bash scripts/ci/displays.sh start)");
        return;
    };
    if !Path::new("/usr/bin/wayvnc").exists() {
        eprintln!("SKIPPED {test}: wayvnc is not installed (scripts/ci/packages.sh)");
        return;
    }
    let size = displays.sway_size();
    let d = daemon(
        "live_view_box_sway",
        DisplayBackend::Wayland,
        displays.env_for(DisplayBackend::Wayland),
    );
    let pod = StubPod::start();
    let (id, mut agent) = grant(&d, &pod, "s1", "desktop");
    let mut v = view(&d, &id);
    let log = d.dir.join("state/displays/box-view/wayvnc.log");
    let shaken = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| v.handshake()));
    let (version, got) = shaken.unwrap_or_else(|_| {
        panic!(
            "wayvnc's handshake failed; its log: {}",
            std::fs::read_to_string(&log).unwrap_or_default()
        )
    });
    assert!(version.starts_with("RFB 003.00"), "{version:?}");
    assert_eq!(
        (u32::from(got.0), u32::from(got.1)),
        size,
        "the sway output's size"
    );
    assert!(v.update() >= 1, "a framebuffer update");
    assert_eq!(our_children("wayvnc"), 1);
    assert_eq!(
        tcp_sockets_of("wayvnc"),
        Vec::<String>::new(),
        "a TCP socket"
    );
    // Sway has no pointer read-back as xdotool's; the wheel's refusal is checked here.
    assert_eq!(wheel(&d, &id, true)["wheel"], "lender");
    let r = agent.call("mouse", json!({"action": "move", "x": 5, "y": 5}));
    assert_eq!(r["isError"], true, "{r}");
    assert_eq!(wheel(&d, &id, false)["wheel"], "agent");
    drop(v);
    gone("wayvnc");
}

#[test]
fn a_halt_closes_the_box_displays_viewers_and_its_server_stops() {
    let _serial = serial();
    if skip("a_halt_closes_the_box_displays_viewers_and_its_server_stops") {
        return;
    }
    let d = daemon("live_view_box_halt", DisplayBackend::X11, x11_env());
    let pod = StubPod::start();
    let (id, _agent) = grant(&d, &pod, "s1", "desktop");
    let mut v = view(&d, &id);
    v.handshake();
    let (status, h) = d.call("POST", "/halt", Some(&json!({"reason": "test"})));
    assert_eq!(status, 200, "{h}");
    let code = v.closed();
    assert!(code == 1001 || code == 1006, "close code {code}");
    let (status, body) = open_view(&d, &id, true, &[]).err().expect("halted");
    assert_eq!(status, 423, "{body}");
    gone("x11vnc");
    let (status, _) = d.call("POST", "/resume", None);
    assert_eq!(status, 200);
}
