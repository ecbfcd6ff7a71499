//! The live view and the wheel (contract §23) on an in-process daemon with a stub pod:
//! a raw RFB client over `GET /attach/{id}/view` against a real own display on `Xvnc`,
//! the pointer read back through the grant's own `xdotool getmouselocation`, the agent's
//! `mouse`/`key` refused while the lender holds the wheel, and the refusals of `/view`.
//! Skips, saying why, where `Xvnc` or `xdotool` is missing (CI installs both).

mod common;
#[path = "common/viewer.rs"]
mod viewer;

use std::path::Path;
use std::time::Duration;

use common::*;
use serde_json::{json, Value};
use viewer::*;

const SIZE: (u16, u16) = (640, 480);

fn skip(test: &str) -> bool {
    for program in ["Xvnc", "xdotool"] {
        if !Path::new("/usr/bin").join(program).exists() {
            eprintln!("SKIPPED {test}: {program} is not installed (scripts/ci/packages.sh)");
            return true;
        }
    }
    false
}

fn daemon(tag: &str, tweak: impl FnOnce(&mut handnode::config::Config)) -> TestDaemon {
    TestDaemon::with(tag, move |c| {
        quiet_liveness(c);
        c.display_env = Some(
            [("PATH", "/usr/local/bin:/usr/bin:/bin")]
                .into_iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
        );
        c.own_display.size = (u32::from(SIZE.0), u32::from(SIZE.1));
        c.own_display.stop_timeout = Duration::from_millis(500);
        tweak(c);
    })
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

    fn ok(&mut self, tool: &str, args: Value) -> Value {
        let r = self.call(tool, args.clone());
        assert_ne!(r["isError"], true, "{tool} {args}: {r}");
        r
    }

    fn bash(&mut self, command: &str) -> String {
        let r = self.ok("bash", json!({ "command": command }));
        r["structuredContent"]["stdout"]
            .as_str()
            .unwrap_or_else(|| panic!("bash stdout: {r}"))
            .to_string()
    }

    /// Where the pointer is on the grant's own display, by its own xdotool.
    fn pointer(&mut self) -> (u32, u32) {
        let out = self.bash("xdotool getmouselocation");
        let field = |name: &str| -> u32 {
            out.split_whitespace()
                .find_map(|w| w.strip_prefix(name))
                .and_then(|v| v.parse().ok())
                .unwrap_or_else(|| panic!("getmouselocation: {out:?}"))
        };
        (field("x:"), field("y:"))
    }

    /// The call's text when it was refused.
    fn refused(&mut self, tool: &str, args: Value) -> String {
        let r = self.call(tool, args.clone());
        assert_eq!(r["isError"], true, "{tool} {args} was not refused: {r}");
        r["content"][0]["text"].as_str().unwrap_or("").to_string()
    }
}

fn agent(d: &TestDaemon, pod: &StubPod, session: &str, own: bool) -> (String, Agent) {
    let mut body = attach_body(pod, session, "desktop");
    if own {
        body["display"] = json!("own");
    }
    let (id, mut conn) = d.attached_with(pod, body);
    conn.set_read_timeout(Duration::from_secs(60));
    conn.initialize();
    (id, Agent { conn, next: 100 })
}

#[test]
fn a_viewer_watches_and_its_pointer_moves_only_while_the_lender_holds_the_wheel() {
    if skip("a_viewer_watches_and_its_pointer_moves_only_while_the_lender_holds_the_wheel") {
        return;
    }
    let pod = StubPod::start();
    let d = daemon("live-view", |c| c.own_display.max_viewers = 2);
    let (id, mut a) = agent(&d, &pod, "live", true);
    // Not started yet: nothing to view.
    let (status, body) = open_view(&d, &id, true, &[]).err().expect("refused");
    assert_eq!(status, 409, "{body}");
    a.ok("mouse", json!({"action": "move", "x": 10, "y": 10}));
    let g = d.grant(&id);
    assert_eq!(g["own_display"]["server"], "Xvnc", "{g}");
    assert_eq!(g["wheel"], "agent", "{g}");
    assert_eq!(a.pointer(), (10, 10));

    // Its RFB socket is the daemon's alone: /dev/null inside the grant's wall.
    let inside = a.bash("test -S \"$XDG_RUNTIME_DIR/rfb.sock\" && echo socket || echo covered");
    assert_eq!(inside.trim(), "covered");
    assert!(Path::new(&format!(
        "{}/rfb.sock",
        g["own_display"]["runtime_dir"].as_str().unwrap()
    ))
    .exists());

    let mut v = view(&d, &id);
    let (version, size) = v.handshake();
    assert!(version.starts_with("RFB 003.00"), "{version:?}");
    assert_eq!(size, SIZE, "ServerInit gives the own display's size");
    assert!(v.update() >= 1, "a framebuffer update");

    // View-only: the viewer's pointer does not move the display's.
    v.pointer(300, 200);
    assert_eq!(
        a.pointer(),
        (10, 10),
        "a dropped PointerEvent moved the pointer"
    );

    // The lender takes the wheel: now it does, and the agent's input is refused.
    let w = wheel(&d, &id, true);
    assert_eq!(w["wheel"], "lender", "{w}");
    v.pointer(300, 200);
    assert_eq!(a.pointer(), (300, 200));
    for (tool, args) in [
        ("mouse", json!({"action": "click", "x": 5, "y": 5})),
        ("key", json!({"action": "type", "text": "x"})),
    ] {
        let text = a.refused(tool, args);
        assert!(
            text.contains("the person who lent the box has the wheel"),
            "{tool}: {text}"
        );
    }
    assert_eq!(a.pointer(), (300, 200), "a refused click moved nothing");
    assert_eq!(d.grant(&id)["wheel"], "lender");
    let brief = a.ok("sys_info", json!({}));
    assert_eq!(brief["structuredContent"]["wheel"], "lender", "{brief}");
    let detail = a.ok("sys_info", json!({"detail": true}));
    assert_eq!(detail["structuredContent"]["wheel"], "lender");

    // The lease is the display's, not the viewer's: a new viewer still drives.
    drop(v);
    let mut v = view(&d, &id);
    v.handshake();
    v.pointer(50, 60);
    assert_eq!(a.pointer(), (50, 60));
    assert_eq!(d.grant(&id)["wheel"], "lender");

    // Given back: the viewer is view-only again and the agent acts.
    let w = wheel(&d, &id, false);
    assert_eq!(w["wheel"], "agent", "{w}");
    v.pointer(400, 400);
    assert_eq!(a.pointer(), (50, 60));
    a.ok("mouse", json!({"action": "move", "x": 20, "y": 30}));
    assert_eq!(a.pointer(), (20, 30));
    a.ok("key", json!({"action": "press", "keys": ["shift"]}));
    assert_eq!(
        a.ok("sys_info", json!({}))["structuredContent"]["wheel"],
        "agent"
    );

    // At most two viewers (--live-view-max-viewers 2): a third is refused.
    let mut second = view(&d, &id);
    second.handshake();
    let (status, body) = open_view(&d, &id, true, &[]).err().expect("a third viewer");
    assert_eq!(status, 429, "{body}");
    assert!(body.contains("already has 2 viewers"), "{body}");

    // Every change of hands is audited.
    let audit = d.wait_audit("the wheel's changes", |a| {
        a.matches("\"kind\":\"wheel\"").count() >= 2
    });
    assert!(audit.contains("\"event\":\"taken\""), "{audit}");
    assert!(audit.contains("\"event\":\"given\""), "{audit}");

    // The grant ends: its viewers are closed.
    let (status, _) = d.call("DELETE", &format!("/attach/{id}"), None);
    assert_eq!(status, 204);
    for viewer in [&mut v, &mut second] {
        let code = viewer.closed();
        assert!(code == 1001 || code == 1006, "close code {code}");
    }
}

/// A call admitted before the take-over and reaching the display after it is refused;
/// one that went first runs.
#[test]
fn a_call_admitted_before_the_take_over_cannot_act_after_it() {
    if skip("a_call_admitted_before_the_take_over_cannot_act_after_it") {
        return;
    }
    let pod = StubPod::start();
    let d = daemon("live-view-race", |_| {});
    let (id, mut a) = agent(&d, &pod, "race", true);
    a.ok("mouse", json!({"action": "move", "x": 10, "y": 10}));
    // The display thread is busy typing (about 4 s, in pieces of two keystrokes) while
    // the mouse call waits behind it.
    a.conn.send(&json!({"jsonrpc": "2.0", "id": "slow", "method": "tools/call",
        "params": {"name": "key", "arguments": {"action": "type", "text": "aaaaaaaa", "delay_ms": 500}}}));
    a.conn.send(
        &json!({"jsonrpc": "2.0", "id": "late", "method": "tools/call",
        "params": {"name": "mouse", "arguments": {"action": "move", "x": 99, "y": 99}}}),
    );
    poll_until(
        || d.call("GET", "/calls", None).1,
        |c| {
            c["calls"]
                .as_array()
                .is_some_and(|l| l.iter().any(|c| c["tool"] == "mouse"))
        },
        |c| format!("watchdog: the mouse call was never listed: {c}"),
    );
    wheel(&d, &id, true);
    let mut replies = std::collections::HashMap::new();
    while replies.len() < 2 {
        let r = a.conn.recv();
        replies.insert(r["id"].as_str().unwrap_or_default().to_string(), r);
    }
    let late = result(&replies["late"]);
    assert_eq!(late["isError"], true, "{late}");
    let text = late["content"][0]["text"].as_str().unwrap();
    assert!(
        text.contains(
            "the person who lent the box has the wheel: they took it after this call was made"
        ),
        "{text}"
    );
    // The typing admitted before the take-over stops too: at its next piece when it had
    // started ("key stopped after N of 8 characters: …"), else before it starts.
    let slow = result(&replies["slow"]);
    assert_eq!(slow["isError"], true, "{slow}");
    let text = slow["content"][0]["text"].as_str().unwrap();
    println!("the typing call: {text}");
    assert!(
        text.contains("the person who lent the box has the wheel"),
        "{text}"
    );
    wheel(&d, &id, false);
    assert_eq!(a.pointer(), (10, 10), "the late call moved the pointer");
}

#[test]
fn the_wheel_goes_back_after_the_idle_time() {
    if skip("the_wheel_goes_back_after_the_idle_time") {
        return;
    }
    let pod = StubPod::start();
    let d = daemon("live-view-idle", |c| {
        c.own_display.wheel_idle = Duration::from_millis(300)
    });
    let (id, mut a) = agent(&d, &pod, "idle", true);
    a.ok("mouse", json!({"action": "move", "x": 1, "y": 1}));
    assert_eq!(wheel(&d, &id, true)["wheel"], "lender");
    d.wait_grant(&id, "the agent's wheel again", |g| g["wheel"] == "agent");
    a.ok("mouse", json!({"action": "move", "x": 2, "y": 2}));
    d.wait_audit("the idle give-back", |a| a.contains("\"event\":\"idle\""));
}

#[test]
fn view_and_wheel_refuse_what_they_must() {
    if skip("view_and_wheel_refuse_what_they_must") {
        return;
    }
    let pod = StubPod::start();
    let d = daemon("live-view-refusals", |_| {});
    let (id, mut a) = agent(&d, &pod, "own", true);
    let (box_id, mut b) = agent(&d, &pod, "box", false);
    a.ok("mouse", json!({"action": "move", "x": 1, "y": 1}));
    // Another grant's shell does not reach the socket (the own displays' parent is empty
    // in its wall).
    let dir = d.grant(&id)["own_display"]["runtime_dir"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(Path::new(&dir).join("rfb.sock").exists());
    if d.grant(&box_id)["isolation"] == "bwrap" {
        let seen = b.bash(&format!(
            "test -e {dir}/rfb.sock && echo there || echo absent"
        ));
        assert_eq!(seen.trim(), "absent");
    } else {
        println!("the box grant is not walled here: its shell reaches every runtime dir");
    }
    // Without auth, with a foreign Origin, for a grant without its own display, unknown.
    let (status, body) = open_view(&d, &id, false, &[]).err().expect("no token");
    assert_eq!(status, 401, "{body}");
    let (status, body) = open_view(&d, &id, true, &[("Origin", "http://evil.example")])
        .err()
        .expect("a foreign Origin");
    assert_eq!(status, 403, "{body}");
    // A grant on the box's display views it through x11vnc or wayvnc (tests/live_view_box);
    // this daemon's display environment has no display at all, which it says.
    let (status, body) = open_view(&d, &box_id, true, &[])
        .err()
        .expect("no box display here");
    assert_eq!(status, 503, "{body}");
    assert!(body.contains("no usable display"), "{body}");
    let (status, _) = open_view(&d, "no-such-grant", true, &[]).err().unwrap();
    assert_eq!(status, 404);
    // A plain GET is not an upgrade.
    let (status, v) = d.call("GET", &format!("/attach/{id}/view"), None);
    assert_eq!(status, 400, "{v}");
    // The wheel's body: exactly {"take":bool}; nothing changes otherwise.
    for bad in [
        json!({}),
        json!({"take": "yes"}),
        json!({"take": true, "x": 1}),
        json!([true]),
    ] {
        let (status, v) = d.call("POST", &format!("/attach/{id}/wheel"), Some(&bad));
        assert_eq!(status, 400, "{bad}: {v}");
    }
    // The box display's wheel is its own: taking it leaves the own display's with the agent.
    assert_eq!(wheel(&d, &box_id, true)["wheel"], "lender");
    assert_eq!(d.grant(&box_id)["wheel"], "lender");
    assert_eq!(d.grant(&id)["wheel"], "agent");
    assert_eq!(wheel(&d, &box_id, false)["wheel"], "agent");
    // A viewer speaking something else than RFB is closed (1008), and nothing moved.
    let mut v = view(&d, &id);
    let (_, size) = v.handshake();
    assert_eq!(size, SIZE);
    v.send(&[150, 1, 0, 0, 0, 0, 0, 0, 0, 0]);
    assert_eq!(v.closed(), 1008);

    // A halt closes the viewers and refuses new ones until resumed.
    let mut v = view(&d, &id);
    v.handshake();
    let (status, h) = d.call("POST", "/halt", Some(&json!({"reason": "test"})));
    assert_eq!(status, 200, "{h}");
    let code = v.closed();
    assert!(code == 1001 || code == 1006, "close code {code}");
    let (status, body) = open_view(&d, &id, true, &[]).err().expect("halted");
    assert_eq!(status, 423, "{body}");
    let (status, _) = d.call(
        "POST",
        &format!("/attach/{id}/wheel"),
        Some(&json!({"take": true})),
    );
    assert_eq!(status, 423);
    let (status, _) = d.call("POST", "/resume", None);
    assert_eq!(status, 200);
}

/// The console's way in: a browser's WebSocket cannot send `Authorization`, so it trades
/// the token for a ticket and offers it as a subprotocol. A ticket opens one view of the
/// grant it names, once; on another grant it is refused and burned.
#[test]
fn a_view_ticket_opens_one_view_of_its_grant_once() {
    if skip("a_view_ticket_opens_one_view_of_its_grant_once") {
        return;
    }
    let pod = StubPod::start();
    let d = daemon("live-view-ticket", |_| {});
    let (id, mut a) = agent(&d, &pod, "own", true);
    let (other, mut b) = agent(&d, &pod, "other", true);
    let (box_id, _box) = agent(&d, &pod, "box", false);
    a.ok("mouse", json!({"action": "move", "x": 1, "y": 1}));
    b.ok("mouse", json!({"action": "move", "x": 1, "y": 1}));
    let ticket = |grant: &str| -> String {
        let (status, v) = d.call("POST", &format!("/attach/{grant}/view-ticket"), None);
        assert_eq!(status, 200, "{v}");
        let protocol = v["protocol"].as_str().unwrap().to_string();
        assert_eq!(
            protocol,
            format!("handnode.ticket.{}", v["ticket"].as_str().unwrap())
        );
        assert!(v["expires_in_ms"].as_u64().unwrap() > 0, "{v}");
        protocol
    };
    let offer = |protocol: &str| format!("binary, {protocol}");
    // Good once, without the token.
    let t = ticket(&id);
    let mut v = open_view(&d, &id, false, &[("Sec-WebSocket-Protocol", &offer(&t))])
        .unwrap_or_else(|e| panic!("the ticket was refused: {e:?}"));
    let (_, size) = v.handshake();
    assert_eq!(size, SIZE);
    // Not twice.
    let (status, body) = open_view(&d, &id, false, &[("Sec-WebSocket-Protocol", &offer(&t))])
        .err()
        .expect("a used ticket");
    assert_eq!(status, 401, "{body}");
    assert!(body.contains("view-ticket"), "{body}");
    // Not for another grant, and it is gone after trying.
    let t = ticket(&id);
    let (status, _) = open_view(&d, &other, false, &[("Sec-WebSocket-Protocol", &offer(&t))])
        .err()
        .expect("another grant's view");
    assert_eq!(status, 401);
    let (status, _) = open_view(&d, &id, false, &[("Sec-WebSocket-Protocol", &offer(&t))])
        .err()
        .expect("a ticket burned on another grant");
    assert_eq!(status, 401);
    // A made-up ticket, and a ticket only the admin credential can mint.
    let (status, _) = open_view(
        &d,
        &id,
        false,
        &[("Sec-WebSocket-Protocol", "binary, handnode.ticket.00ff")],
    )
    .err()
    .expect("a made-up ticket");
    assert_eq!(status, 401);
    let (status, _, _) = http(
        d.addr,
        "POST",
        &format!("/attach/{id}/view-ticket"),
        &[],
        None,
    );
    assert_eq!(status, 401);
    // A grant on the box's display has a view too (the box's), so a ticket of its own.
    let (status, body) = d.call("POST", &format!("/attach/{box_id}/view-ticket"), None);
    assert_eq!(status, 200, "{body}");
    let (status, _) = d.call("POST", "/attach/no-such-grant/view-ticket", None);
    assert_eq!(status, 404);
    drop(v);
}

/// A viewer that asks for the whole screen again and again and never reads holds at most
/// what the sockets hold: the daemon does not grow with what it asked for, and another
/// viewer is served all along.
#[test]
fn a_viewer_that_does_not_read_is_not_read_either() {
    if skip("a_viewer_that_does_not_read_is_not_read_either") {
        return;
    }
    let pod = StubPod::start();
    let d = daemon("live-view-backpressure", |_| {});
    let (id, mut a) = agent(&d, &pod, "slow", true);
    a.ok("mouse", json!({"action": "move", "x": 1, "y": 1}));
    let mut slow = view(&d, &id);
    slow.handshake();
    let mut fast = view(&d, &id);
    fast.handshake();
    let before = vm_rss_kib(None);
    // 200 whole-screen raw updates: 640x480x4 bytes each, 240 MiB in all if buffered.
    let whole = handnode::base::rfb::update_request(false, SIZE.0, SIZE.1);
    for _ in 0..200 {
        slow.send(&whole);
    }
    for _ in 0..20 {
        assert!(fast.update() >= 1);
    }
    let grown = vm_rss_kib(None).saturating_sub(before);
    println!("rss grew by {grown} KiB while a viewer read nothing");
    assert!(
        grown < 64 << 10,
        "the daemon grew by {grown} KiB: it buffered for the viewer"
    );
    // Still there and whole once it reads: nothing was dropped or cut to spare memory.
    assert!(slow.update() >= 1);
}

/// Without `Xvnc` an own display runs on Xvfb as before, and `/view` says what to install.
#[test]
fn without_xvnc_the_display_runs_on_xvfb_and_view_says_what_to_install() {
    if skip("without_xvnc_the_display_runs_on_xvfb_and_view_says_what_to_install") {
        return;
    }
    // A PATH with what an own display needs but Xvnc.
    let bin = temp_dir("live-view-no-xvnc");
    for program in ["Xvfb", "xdotool", "matchbox-window-manager", "dbus-daemon"] {
        let target = Path::new("/usr/bin").join(program);
        if target.exists() {
            std::os::unix::fs::symlink(&target, bin.join(program)).unwrap();
        }
    }
    let path = bin.display().to_string();
    let pod = StubPod::start();
    let d = daemon("live-view-no-xvnc", move |c| {
        c.display_env = Some([("PATH".to_string(), path)].into_iter().collect());
    });
    let (id, mut a) = agent(&d, &pod, "noxvnc", true);
    a.ok("mouse", json!({"action": "move", "x": 3, "y": 4}));
    let g = d.grant(&id);
    assert_eq!(g["own_display"]["server"], "Xvfb", "{g}");
    assert_eq!(g["own_display"]["live_view"], false, "{g}");
    let (status, body) = open_view(&d, &id, true, &[]).err().expect("no live view");
    assert_eq!(status, 503, "{body}");
    assert!(
        body.contains("apt install tigervnc-standalone-server"),
        "{body}"
    );
    // The wheel still works: it is about the agent's tools, not the view.
    assert_eq!(wheel(&d, &id, true)["wheel"], "lender");
    assert!(a
        .refused("mouse", json!({"action": "move", "x": 5, "y": 5}))
        .contains("has the wheel"));
}
