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

use std::collections::BTreeMap;
use std::io::ErrorKind;
use std::net::TcpStream;
use std::path::Path;
use std::time::{Duration, Instant};

use common::*;
use displays::Displays;
use handnode::config::DisplayBackend;
use serde_json::{json, Value};
use tungstenite::client::IntoClientRequest;
use tungstenite::{Message, WebSocket};

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

/// A raw RFB client over the live view's WebSocket.
struct Viewer {
    ws: WebSocket<TcpStream>,
    buf: Vec<u8>,
}

/// Open `/view` with the token (unless `token` is false) and `headers`; the refusal's
/// status and body otherwise.
fn open_view(
    d: &TestDaemon,
    id: &str,
    token: bool,
    headers: &[(&str, &str)],
) -> Result<Viewer, (u16, String)> {
    let mut req = format!("ws://{}/attach/{id}/view", d.addr)
        .into_client_request()
        .unwrap();
    if token {
        req.headers_mut().insert(
            "Authorization",
            format!("Bearer {}", d.token).parse().unwrap(),
        );
    }
    for (k, v) in headers {
        let name: tungstenite::http::HeaderName = k.parse().unwrap();
        req.headers_mut().insert(name, v.parse().unwrap());
    }
    let tcp = TcpStream::connect(d.addr).unwrap();
    tcp.set_read_timeout(Some(WATCHDOG)).unwrap();
    match tungstenite::client::client(req, tcp) {
        Ok((ws, _)) => Ok(Viewer {
            ws,
            buf: Vec::new(),
        }),
        Err(tungstenite::HandshakeError::Failure(tungstenite::Error::Http(resp))) => Err((
            resp.status().as_u16(),
            String::from_utf8_lossy(resp.body().as_deref().unwrap_or_default()).into(),
        )),
        Err(e) => panic!("the upgrade failed otherwise: {e}"),
    }
}

fn view(d: &TestDaemon, id: &str) -> Viewer {
    open_view(d, id, true, &[]).unwrap_or_else(|e| panic!("/view refused: {e:?}"))
}

impl Viewer {
    fn send(&mut self, bytes: &[u8]) {
        self.ws.send(Message::binary(bytes.to_vec())).unwrap();
    }

    fn bytes(&mut self, n: usize) -> Vec<u8> {
        while self.buf.len() < n {
            match self.ws.read() {
                Ok(Message::Binary(b)) => self.buf.extend_from_slice(&b),
                Ok(Message::Close(f)) => panic!("the view closed: {f:?}"),
                Ok(_) => {}
                Err(e) => panic!("watchdog or error reading the view: {e}"),
            }
        }
        let rest = self.buf.split_off(n);
        std::mem::replace(&mut self.buf, rest)
    }

    fn u16(&mut self) -> u16 {
        let b = self.bytes(2);
        u16::from_be_bytes([b[0], b[1]])
    }

    fn u32(&mut self) -> u32 {
        let b = self.bytes(4);
        u32::from_be_bytes([b[0], b[1], b[2], b[3]])
    }

    /// The handshake through ServerInit: the server's version line and the screen size.
    fn handshake(&mut self) -> (String, (u16, u16)) {
        let version = String::from_utf8(self.bytes(12)).unwrap();
        self.send(b"RFB 003.008\n");
        let n = self.bytes(1)[0] as usize;
        let types = self.bytes(n);
        assert!(types.contains(&1), "security None is offered: {types:?}");
        self.send(&[1]);
        assert_eq!(self.u32(), 0, "SecurityResult OK");
        self.send(&[1]); // ClientInit, shared
        let size = (self.u16(), self.u16());
        let format = self.bytes(16);
        assert_eq!(format[0], 32, "32 bits per pixel: {format:?}");
        let name = self.u32() as usize;
        self.bytes(name);
        (version, size)
    }

    /// Ask for a (small) update and read it whole: the rectangles' count. The server
    /// answers after it has handled everything sent before, so this also orders input.
    fn update(&mut self) -> u16 {
        self.send(&handnode::base::rfb::update_request(false, 8, 8));
        loop {
            let kind = self.bytes(1)[0];
            match kind {
                0 => {
                    self.bytes(1);
                    let rects = self.u16();
                    for _ in 0..rects {
                        let (_, _, w, h) = (self.u16(), self.u16(), self.u16(), self.u16());
                        let encoding = self.u32() as i32;
                        match encoding {
                            0 => {
                                self.bytes(usize::from(w) * usize::from(h) * 4);
                            }
                            // A pseudo-encoding without data (the default set has none).
                            e => panic!("unexpected encoding {e}"),
                        }
                    }
                    return rects;
                }
                // Bell.
                2 => {}
                // ServerCutText.
                3 => {
                    self.bytes(3);
                    let n = self.u32() as usize;
                    self.bytes(n);
                }
                other => panic!("unexpected server message {other}"),
            }
        }
    }

    /// The close code the daemon ends the view with.
    fn closed(&mut self) -> u16 {
        loop {
            match self.ws.read() {
                Ok(Message::Close(f)) => return f.map_or(1005, |f| u16::from(f.code)),
                Ok(_) => {}
                Err(tungstenite::Error::Io(e)) if e.kind() == ErrorKind::WouldBlock => {
                    panic!("watchdog: the view was not closed")
                }
                Err(_) => return 1006,
            }
        }
    }

    fn pointer(&mut self, x: u16, y: u16) {
        self.send(&handnode::base::rfb::pointer_event(0, x, y));
        self.update();
    }
}

fn wheel(d: &TestDaemon, id: &str, take: bool) -> Value {
    let (status, v) = d.call(
        "POST",
        &format!("/attach/{id}/wheel"),
        Some(&json!({ "take": take })),
    );
    assert_eq!(status, 200, "{v}");
    v
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
    // A browser grant drives its own browser, never the box's screen: nothing to view.
    let (browser, _conn) = d.attached_with(&pod, attach_body(&pod, "s2", "browser"));
    let (status, body) = open_view(&d, &browser, true, &[]).err().expect("refused");
    assert_eq!(status, 404, "{body}");
    assert!(body.contains("browser grant has no display"), "{body}");
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
