//! A desktop of the agent's own (contract §19): a grant with `"display":"own"` gets a
//! headless X screen of its own. Against real `Xvfb`, `matchbox-window-manager`,
//! `dbus-daemon`, `zenity` and `xdotool` (installed by `scripts/ci/displays.sh` and
//! `scripts/ci/packages.sh`); the "owner's" display is a private Xvfb each test starts,
//! whose framebuffer file (`-fbdir`) is compared byte for byte.

mod common;
#[path = "common/path_tools.rs"]
mod path_tools;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use common::*;
use handnode::walls::Kind;
use serde_json::{json, Value};

/// What these tests run; without one they print why and skip (CI installs them all).
/// `zenity`, not `xterm`, is the app they start: the daemon runs as root in CI, and inside
/// the wall root has no capabilities (§21), where xterm's chown of its pty to the `tty`
/// group fails and xterm exits.
const NEEDS: [&str; 5] = ["Xvfb", "xdotool", "zenity", "xmessage", "scrot"];

fn skip(test: &str) -> bool {
    for program in NEEDS {
        if !Path::new("/usr/bin").join(program).exists() {
            eprintln!("SKIPPED {test}: {program} is not installed");
            return true;
        }
    }
    false
}

/// The owner's screen: an Xvfb of the test's own with its framebuffer in a file.
struct OwnerScreen {
    child: Child,
    display: String,
    fb: PathBuf,
}

impl OwnerScreen {
    fn start(dir: &Path) -> OwnerScreen {
        let fbdir = dir.join("owner-fb");
        std::fs::create_dir_all(&fbdir).unwrap();
        let mut child = Command::new("Xvfb")
            .args([
                "-displayfd",
                "1",
                "-nolisten",
                "tcp",
                "-screen",
                "0",
                "320x240x24",
            ])
            .arg("-fbdir")
            .arg(&fbdir)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("Xvfb runs");
        // Read on a thread of its own, under the watchdog: an Xvfb that hangs fails the test.
        let out = child.stdout.take().unwrap();
        let (tx, rx) = crossbeam_channel::bounded(1);
        std::thread::spawn(move || {
            let mut line = String::new();
            let _ = std::io::BufRead::read_line(&mut std::io::BufReader::new(out), &mut line);
            let _ = tx.send(line);
        });
        let line = rx
            .recv_timeout(Duration::from_secs(30))
            .expect("watchdog: the owner's Xvfb never printed its display number");
        let number: u32 = line
            .trim()
            .parse()
            .expect("Xvfb printed its display number");
        OwnerScreen {
            child,
            display: format!(":{number}"),
            fb: fbdir.join("Xvfb_screen0"),
        }
    }

    fn pixels(&self) -> Vec<u8> {
        std::fs::read(&self.fb).expect("the owner's framebuffer file")
    }
}

impl Drop for OwnerScreen {
    fn drop(&mut self) {
        // SIGTERM: a killed Xvfb would leave its socket and lock file behind.
        let _ = Command::new("kill")
            .arg(self.child.id().to_string())
            .status();
        let _ = self.child.wait();
    }
}

/// The daemon's display environment: the owner's screen, and a plain `PATH`.
fn owner_env(display: &str) -> std::collections::BTreeMap<String, String> {
    [
        ("DISPLAY", display),
        ("PATH", "/usr/local/bin:/usr/bin:/bin"),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .collect()
}

fn daemon(tag: &str, owner: &OwnerScreen, max: usize) -> TestDaemon {
    daemon_with(tag, owner, max, |_| {})
}

fn daemon_with(
    tag: &str,
    owner: &OwnerScreen,
    max: usize,
    tweak: impl FnOnce(&mut handnode::config::Config),
) -> TestDaemon {
    let display = owner.display.clone();
    TestDaemon::with(tag, move |c| {
        quiet_liveness(c);
        c.display_env = Some(owner_env(&display));
        c.own_display.size = (640, 480);
        c.own_display.max = max;
        c.own_display.stop_timeout = Duration::from_millis(500);
        tweak(c);
    })
}

fn own_body(pod: &StubPod, session: &str, profile: &str) -> Value {
    let mut body = attach_body(pod, session, profile);
    body["display"] = json!("own");
    body
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
}

fn agent(d: &TestDaemon, pod: &StubPod, session: &str) -> (String, Agent) {
    agent_as(d, pod, session, "desktop")
}

/// A grant of `profile` with its own display, attached and initialized.
fn agent_as(d: &TestDaemon, pod: &StubPod, session: &str, profile: &str) -> (String, Agent) {
    let (id, mut conn) = d.attached_with(pod, own_body(pod, session, profile));
    conn.set_read_timeout(Duration::from_secs(30));
    conn.initialize();
    (id, Agent { conn, next: 100 })
}

/// What an own display's runtime directory records: (display number, Xvfb pid).
fn record(d: &TestDaemon, grant: &str) -> (u32, u32) {
    let (display, pids) = record_all(d, grant);
    (display, pids[0])
}

/// The display number and every pid an own display's record names: Xvfb, the window
/// manager, the bus.
fn record_all(d: &TestDaemon, grant: &str) -> (u32, Vec<u32>) {
    let text = std::fs::read(runtime_dir(d, grant).join("display.json"))
        .expect("the own display's record");
    let v: Value = serde_json::from_slice(&text).unwrap();
    let pids = v["pids"].as_array().unwrap().iter();
    (
        v["display"].as_u64().unwrap() as u32,
        pids.map(|p| p.as_u64().unwrap() as u32).collect(),
    )
}

/// Every pid `/proc` lists now.
fn pids() -> impl Iterator<Item = u32> {
    std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse().ok())
}

/// Live processes whose parent is `pid`.
fn children_of(pid: u32) -> Vec<u32> {
    pids()
        .filter(|child| {
            std::fs::read_to_string(format!("/proc/{child}/stat"))
                .ok()
                .and_then(|stat| handnode::base::procfs::stat_field(&stat, 4))
                == Some(u64::from(pid))
        })
        .collect()
}

fn runtime_dir(d: &TestDaemon, grant: &str) -> PathBuf {
    let g = d.grant(grant);
    PathBuf::from(
        g["own_display"]["runtime_dir"]
            .as_str()
            .unwrap_or_else(|| panic!("no runtime_dir: {g}")),
    )
}

/// Live processes whose command line holds one of `marks`.
fn processes_naming(marks: &[String]) -> Vec<String> {
    let mut found = Vec::new();
    for pid in pids() {
        let Ok(cmdline) = std::fs::read(format!("/proc/{pid}/cmdline")) else {
            continue;
        };
        let cmdline = String::from_utf8_lossy(&cmdline).replace('\0', " ");
        if alive(pid) && marks.iter().any(|m| cmdline.contains(m.as_str())) {
            found.push(format!("{pid}: {cmdline}"));
        }
    }
    found
}

/// An X socket or lock file nothing owns: no process listens on the socket, the lock names
/// no live process. (Tests run in parallel: another test's X server may take the number
/// as soon as it is free, and then the path is rightly there.)
fn left_behind(path: &Path, runtime: &Path) -> bool {
    // A walled display's path is a link to its socket in its runtime directory (whose
    // server listens in a network of its own, so the table below never names it): left
    // behind when it still points into this display's directory. A link elsewhere is
    // another test's display, which took the number as soon as it was free.
    if let Ok(target) = std::fs::read_link(path) {
        return target.starts_with(runtime);
    }
    if !path.exists() {
        return false;
    }
    if let Ok(lock) = std::fs::read_to_string(path) {
        if let Ok(pid) = lock.trim().parse::<u32>() {
            return !alive(pid);
        }
    }
    let table = std::fs::read_to_string("/proc/net/unix").unwrap_or_default();
    let want = path.display().to_string();
    !table
        .lines()
        .any(|l| l.split_whitespace().nth(7) == Some(want.as_str()))
}

fn alive(pid: u32) -> bool {
    // A zombie is gone for this purpose; the daemon reaps its own children.
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .map(|s| !s.contains(") Z "))
        .unwrap_or(false)
}

#[test]
fn key_types_into_an_app_on_the_own_display_and_the_owners_screen_is_untouched() {
    if skip("key_types_into_an_app_on_the_own_display") {
        return;
    }
    let dir = temp_dir("own-display-owner");
    let owner = OwnerScreen::start(&dir);
    let before = owner.pixels();
    let pod = StubPod::start();
    let d = daemon("own-display-key", &owner, 2);
    let (id, mut a) = agent(&d, &pod, "own-key");
    let g = d.grant(&id);
    assert_eq!(g["display"], "own", "{g}");
    assert_eq!(g["own_display"]["running"], false, "started lazily: {g}");

    // The first graphical call starts it, at --own-display-size.
    let shot = a.ok("screenshot", json!({}));
    let sc = &shot["structuredContent"];
    assert_eq!(
        (sc["width"].as_u64(), sc["height"].as_u64()),
        (Some(640), Some(480)),
        "{sc}"
    );
    assert_ne!(sc["display_name"], owner.display.as_str());
    let g = d.grant(&id);
    assert_eq!(g["own_display"]["running"], true, "{g}");
    let (number, xvfb_pid) = record(&d, &id);
    assert_eq!(sc["display_name"], format!(":{number}"));
    // Its X server runs in the grant's cgroup (§16), under its limits.
    if cgroups_here(&g) {
        let cgroup = std::fs::read_to_string(format!("/proc/{xvfb_pid}/cgroup")).unwrap();
        assert!(cgroup.contains(&format!("grants/{id}/")), "{cgroup}");
    }

    // sys_info describes the grant's own display, not the owner's.
    let info = a.ok("sys_info", json!({}));
    let shown = &info["structuredContent"]["display"];
    assert_eq!(
        shown["displays"][0]["name"],
        format!(":{number}"),
        "{shown}"
    );
    assert_eq!(shown["displays"][0]["width"], 640, "{shown}");
    assert_eq!(shown["own_display"]["running"], true, "{shown}");

    // The console's Activity shows this screen: the same picture the grant sees.
    let (status, screen) = d.call("GET", &format!("/attach/{id}/screen"), None);
    assert_eq!(status, 200, "{screen}");
    assert_eq!(screen["content"][0]["mimeType"], "image/jpeg", "{screen}");
    assert_eq!(
        screen["structuredContent"]["display_name"],
        format!(":{number}")
    );

    // Its runtime directory is private, and so is the cookie in it.
    {
        use std::os::unix::fs::PermissionsExt;
        let dir = runtime_dir(&d, &id);
        let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode(&dir), 0o700);
        assert_eq!(mode(&dir.join("xauth")), 0o600);
    }

    // bash gets the own display's variables, not the owner's.
    let env = a.bash("echo \"$DISPLAY|$XAUTHORITY|$XDG_RUNTIME_DIR|$DBUS_SESSION_BUS_ADDRESS\"");
    let runtime = runtime_dir(&d, &id).display().to_string();
    assert!(
        env.trim().starts_with(&format!(
            ":{number}|{runtime}/xauth|{runtime}|unix:path={runtime}/bus,guid="
        )),
        "bash's display environment: {env}; grant: {}",
        d.grant(&id)
    );

    // Its private session bus starts the accessibility bus (§17) inside its runtime
    // directory, when AT-SPI is installed.
    if at_spi_installed() {
        let a11y = a.bash(
            "dbus-send --session --print-reply --dest=org.a11y.Bus /org/a11y/bus \
             org.a11y.Bus.GetAddress 2>&1",
        );
        assert!(
            a11y.contains(&format!("unix:path={runtime}/at-spi/")),
            "{a11y}"
        );
    }

    // A dialog started on it by the grant's job reads one line into a file; `key` types it.
    let out = dir.join("typed.txt");
    let script = format!(
        "exec zenity --entry --title own-key-window --text line > {}",
        out.display()
    );
    a.ok("bash_start", json!({ "command": script }));
    poll_until(
        || a.bash("xdotool search --onlyvisible --name own-key-window || true"),
        |found| !found.trim().is_empty(),
        |found| format!("watchdog: the dialog never showed: {found:?}"),
    );
    // Focus is the window manager's; make sure the keystrokes go to the dialog.
    a.bash("xdotool search --onlyvisible --name own-key-window windowactivate --sync || true");
    a.ok("mouse", json!({"action": "move", "x": 320, "y": 240}));
    a.ok(
        "key",
        json!({"action": "type", "text": "hello from my own desktop"}),
    );
    a.ok("key", json!({"action": "press", "keys": ["Return"]}));
    let typed = poll_until(
        || std::fs::read_to_string(&out).unwrap_or_default(),
        |t| !t.is_empty(),
        |t| format!("watchdog: the typed text never arrived: {t:?}"),
    );
    assert_eq!(typed.trim_end(), "hello from my own desktop");
    assert!(
        owner.pixels() == before,
        "the owner's screen changed while the agent worked on its own"
    );

    // It survives a redial: the same X server answers the grant's next call.
    a.conn.reset();
    let (_, mut conn) = pod.next_session();
    conn.set_read_timeout(Duration::from_secs(30));
    let mut a = Agent { conn, next: 200 };
    d.wait_grant(&id, "attached again", |g| g["state"] == "attached");
    let shot = a.ok("screenshot", json!({}));
    assert_eq!(
        shot["structuredContent"]["display_name"],
        format!(":{number}")
    );
    assert_eq!(record(&d, &id), (number, xvfb_pid));
    assert!(alive(xvfb_pid), "the redial restarted the X server");

    // Revoke: nothing of it is left.
    let (status, _) = d.call("DELETE", &format!("/attach/{id}"), None);
    assert_eq!(status, 204);
    let x_socket = PathBuf::from(format!("/tmp/.X11-unix/X{number}"));
    let x_lock = PathBuf::from(format!("/tmp/.X{number}-lock"));
    let runtime = PathBuf::from(runtime);
    poll_until(
        || {
            (
                alive(xvfb_pid),
                left_behind(&x_socket, &runtime),
                left_behind(&x_lock, &runtime),
                runtime.exists(),
            )
        },
        |left| *left == (false, false, false, false),
        |left| format!("watchdog: after revoke (xvfb alive, socket, lock, dir) = {left:?}"),
    );
    // The dialog, the accessibility bus and everything else started on it went with the
    // grant: no live process names its runtime directory or the dialog's output file.
    let marks = [runtime.display().to_string(), out.display().to_string()];
    poll_until(
        || processes_naming(&marks),
        |left| left.is_empty(),
        |left| format!("watchdog: processes of the grant are left: {left:?}"),
    );
    poll_until(
        || {
            let (_, _, body) = d.raw("GET", "/metrics", &[], None);
            String::from_utf8(body).unwrap()
        },
        |text| text.contains("\nhandnode_own_displays_running 0\n"),
        |text| format!("watchdog: /metrics still counts the display: {text}"),
    );
    assert!(owner.pixels() == before, "the owner's screen changed");
}

#[test]
fn two_grants_see_only_their_own_screens_and_one_past_the_bound_is_refused() {
    if skip("two_grants_see_only_their_own_screens") {
        return;
    }
    let dir = temp_dir("own-display-two-owner");
    let owner = OwnerScreen::start(&dir);
    let pod = StubPod::start();
    // The local admin socket answers any process of the daemon's user without a token:
    // the shortest way from a shell to another grant's screen (`GET /attach/<id>/screen`).
    let socket = dir.join("admin.sock");
    let sock = socket.clone();
    let d = daemon_with("own-display-two", &owner, 2, move |c| {
        c.local_socket = Some(sock)
    });
    let (ida, mut a) = agent(&d, &pod, "own-a");
    let (idb, mut b) = agent(&d, &pod, "own-b");
    let (_idc, mut c) = agent(&d, &pod, "own-c");

    b.ok("screenshot", json!({}));
    a.ok("screenshot", json!({}));
    let (na, _) = record(&d, &ida);
    let (nb, _) = record(&d, &idb);
    assert_ne!(na, nb);
    let running = || {
        let (_, _, body) = d.raw("GET", "/metrics", &[], None);
        String::from_utf8(body).unwrap().lines().find_map(|l| {
            l.strip_prefix("handnode_own_displays_running ")
                .map(str::to_string)
        })
    };
    assert_eq!(running().as_deref(), Some("2"));

    // One past --max-own-displays: isError with the reason, and no third server.
    let refused = c.call("screenshot", json!({}));
    assert_eq!(refused["isError"], true, "{refused}");
    assert_eq!(running().as_deref(), Some("2"));
    let text = refused["content"][0]["text"].as_str().unwrap();
    assert!(
        text.contains("no own display available: 2 already running"),
        "{text}"
    );

    // A's window is on A's screen only. B's screen first settles (its window manager
    // may still be painting), then must not change.
    let mut last = Value::Null;
    let b_first = poll_until(
        || {
            let now = b.ok("screenshot", json!({}))["content"][0]["data"].clone();
            let same = now == last;
            last = now.clone();
            (same, now)
        },
        |(same, _)| *same,
        |_| "watchdog: B's screen never settled".into(),
    )
    .1;
    a.ok(
        "bash_start",
        json!({"command": "exec xmessage -title own-a-window a"}),
    );
    poll_until(
        || a.bash("xdotool search --onlyvisible --name own-a-window || true"),
        |found| !found.trim().is_empty(),
        |found| format!("watchdog: A's window never showed: {found:?}"),
    );
    assert_eq!(
        b.bash("xdotool search --onlyvisible --name own-a-window || true")
            .trim(),
        "",
        "B sees A's window"
    );
    let b_now = b.ok("screenshot", json!({}));
    assert_eq!(
        b_now["content"][0]["data"], b_first,
        "B's screen changed when A opened a window"
    );
    // The screen as text (§17) too: A's application is in A's accessibility tree (through
    // A's private bus), and not in B's. Where AT-SPI and zenity are installed (CI).
    if at_spi_installed() && Path::new("/usr/bin/zenity").exists() {
        a.ok(
            "bash_start",
            json!({"command": "exec zenity --question --text=own-a-question"}),
        );
        poll_until(
            || {
                a.call("desktop_snapshot", json!({"app": "zenity"}))
                    .to_string()
            },
            |snap| snap.contains("own-a-question"),
            |snap| format!("watchdog: A's zenity never joined A's tree: {snap}"),
        );
        let theirs = b.call("desktop_snapshot", json!({})).to_string();
        assert!(
            !theirs.contains("own-a-question"),
            "B sees A's application: {theirs}"
        );
    } else {
        eprintln!("skipping the accessibility part: no at-spi2-core or zenity");
    }

    // Knowing A's display number is not enough: B's cookie does not open it.
    let probe = b.bash(&format!(
        "DISPLAY=:{na} xdotool getdisplaygeometry 2>&1; echo rc=$?"
    ));
    assert!(probe.contains("rc=1"), "B reached A's display: {probe}");
    // B's shell runs inside its wall (§19, --own-display-isolation): each way a shell of
    // the daemon's user would reach A's screen is tried, and each must fail. Outside the
    // wall (this test's own process) each of them works, so a failure inside is the
    // wall's doing.
    let isolation = d.grant(&idb)["own_display"]["isolation"].clone();
    if handnode::walls::probe_bwrap(std::env::var_os("PATH").as_deref(), Kind::OwnDisplay).is_err()
    {
        assert_eq!(isolation, "none");
        eprintln!("skipping the wall checks: bwrap cannot build a PID namespace here");
        return;
    }
    assert_eq!(isolation, "bwrap");
    let a_cookie = runtime_dir(&d, &ida).join("xauth");
    let (_, a_xvfb) = record(&d, &ida);
    let screen_path = format!("/attach/{ida}/screen");
    let attempts = [
        // A's cookie file, by its path.
        format!("cat {} >/dev/null", a_cookie.display()),
        // A's display with A's cookie.
        format!(
            "XAUTHORITY={} DISPLAY=:{na} xdotool getdisplaygeometry",
            a_cookie.display()
        ),
        // A's display with no cookie at all (X listens on an abstract socket too).
        format!("XAUTHORITY=/dev/null DISPLAY=:{na} xdotool getdisplaygeometry"),
        // A's cookie through A's X server's view of the file system.
        format!("cat /proc/{a_xvfb}/root{} >/dev/null", a_cookie.display()),
        // A's screen through the daemon's local admin socket.
        format!(
            "curl -sf --max-time 5 --unix-socket {} http://localhost{screen_path} -o /dev/null",
            socket.display()
        ),
    ];
    for attempt in &attempts {
        let out = b.bash(&format!("{{ {attempt}; }} 2>&1; echo rc=$?"));
        assert!(
            !out.trim_end().ends_with("rc=0") && out.contains("rc="),
            "B's shell got through its wall with `{attempt}`: {out}"
        );
    }
    // B's file tools reach what its shell's wall shows, however the path is spelled:
    // directly, through A's X server's /proc/<pid>/root, through a symlink B made.
    b.bash(&format!(
        "ln -sfn {} \"$XDG_RUNTIME_DIR/to-a\"",
        a_cookie.display()
    ));
    let b_dir = runtime_dir(&d, &idb);
    let tries = [
        a_cookie.display().to_string(),
        format!("/proc/{a_xvfb}/root{}", a_cookie.display()),
        b_dir.join("to-a").display().to_string(),
        d.state_dir().display().to_string(),
        runtime_dir(&d, &ida).display().to_string(),
    ];
    // Every tool that takes a path (from the registry) tries each. One that opens only
    // directories (or only files) may refuse the other kind before the fence is asked;
    // each path is fenced for at least one tool, and none reaches any.
    for path in &tries {
        let mut fenced = false;
        for tool in path_tools::path_tools() {
            let got = b.call(tool.name, path_tools::with_path(tool, path));
            let tool = tool.name;
            assert_eq!(got["isError"], true, "B's {tool} reached {path}: {got}");
            let text = got["content"][0]["text"].as_str().unwrap_or_default();
            fenced |= text.contains("out of reach");
            assert!(
                text.contains("out of reach")
                    || text.contains("not a directory")
                    || text.contains("not a regular file"),
                "{tool} {path}: {text}"
            );
        }
        assert!(fenced, "no tool said {path} is out of reach");
    }
    // Its own runtime directory stays in reach.
    b.ok(
        "file_get",
        json!({"path": b_dir.join("xauth").display().to_string()}),
    );
    // What runs B's display (walled too, tests/walls.rs) starts nothing B chooses. Its private bus
    // can start only the accessibility bus, and lets no one set the environment of what
    // it starts (LD_PRELOAD would run code before any wall).
    let mut bus = |method: &str, args: &str| {
        b.bash(&format!(
            "dbus-send --session --print-reply --dest=org.freedesktop.DBus \
             /org/freedesktop/DBus org.freedesktop.DBus.{method} {args} 2>&1; echo rc=$?"
        ))
    };
    let names = bus("ListActivatableNames", "");
    let activatable: Vec<&str> = names
        .lines()
        .filter_map(|l| l.trim().strip_prefix("string \"")?.strip_suffix('"'))
        .collect();
    assert!(activatable.contains(&"org.freedesktop.DBus"), "{names}");
    assert!(
        activatable
            .iter()
            .all(|n| ["org.freedesktop.DBus", "org.a11y.Bus"].contains(n)),
        "B's bus can start more than the accessibility bus: {names}"
    );
    let preload = bus(
        "UpdateActivationEnvironment",
        "dict:string:string:LD_PRELOAD,/nonexistent.so",
    );
    assert!(preload.contains("AccessDenied"), "{preload}");
    // Its window manager's key bindings start no program (matchbox's own start an xterm
    // on ctrl+alt+x, outside the wall). The chord, then alt+f4 closing B's window: once
    // the window is gone the window manager has handled the chord before it.
    let wm = record_all(&d, &idb).1[1];
    b.ok(
        "bash_start",
        json!({"command": "exec xmessage -title own-b-window b"}),
    );
    let shown = "xdotool search --onlyvisible --name own-b-window || true";
    poll_until(
        || b.bash(shown),
        |found| !found.trim().is_empty(),
        |found| format!("watchdog: B's window never showed: {found:?}"),
    );
    b.ok(
        "key",
        json!({"action": "press", "keys": ["ctrl+alt+x", "alt+F4"]}),
    );
    poll_until(
        || b.bash(shown),
        |found| found.trim().is_empty(),
        |found| format!("watchdog: alt+F4 did not close B's window: {found:?}"),
    );
    assert_eq!(
        children_of(wm),
        Vec::<u32>::new(),
        "B's window manager started a program"
    );
    // The same steps outside the wall do work: the cookie is there, the socket answers.
    assert!(std::fs::metadata(&a_cookie).is_ok_and(|m| m.len() > 0));
    let outside = std::process::Command::new("curl")
        .args(["-sf", "--max-time", "5", "--unix-socket"])
        .arg(&socket)
        .arg(format!("http://localhost{screen_path}"))
        .args(["-o", "/dev/null"])
        .status()
        .expect("curl runs");
    assert!(
        outside.success(),
        "the local socket did not give A's screen: {outside}"
    );
    // Nothing of handnode's state, and no process but its own, inside B's wall: its state
    // dir holds only the mount point of the own displays' parent (tests keep that inside
    // the state dir), and that parent holds only B's own runtime directory.
    let state = d.state_dir();
    let parent = runtime_dir(&d, &idb).parent().unwrap().to_path_buf();
    assert!(std::fs::read_dir(&state).unwrap().count() > 1);
    let listing = |dir: &Path| format!("ls -A {} | tr '\\n' ' '; echo", dir.display());
    let state_seen = b.bash(&listing(&state));
    assert_eq!(state_seen.trim(), "displays", "B sees handnode's state dir");
    let parent_seen = b.bash(&listing(&parent));
    let b_dir = runtime_dir(&d, &idb);
    assert_eq!(
        parent_seen.trim(),
        b_dir.file_name().unwrap().to_str().unwrap(),
        "B sees other own displays"
    );
    let pids = b.bash("ls /proc | grep -c '^[0-9]'");
    assert!(
        pids.trim().parse::<u32>().unwrap() < 10,
        "B sees the box's processes: {pids}"
    );
    // A's own shell is walled too, and still has its own display.
    assert!(a.bash("xdotool getdisplaygeometry").trim().contains(' '));
}

#[test]
fn display_own_needs_display_tools_and_bad_values_change_nothing() {
    let pod = StubPod::start();
    let d = TestDaemon::new("own-display-attach");
    let mut body = attach_body(&pod, "own-bad", "custom");
    body["allow"] = json!(["sys_info"]);
    body["display"] = json!("own");
    let (status, v) = d.call("POST", "/attach", Some(&body));
    assert_eq!(status, 400, "{v}");
    let why = v["error"].as_str().unwrap();
    assert!(why.contains("needs a profile with display tools"), "{why}");
    let mut body = attach_body(&pod, "own-bad", "desktop");
    body["display"] = json!("mine");
    let (status, v) = d.call("POST", "/attach", Some(&body));
    assert_eq!(status, 400, "{v}");
    assert!(v["error"]
        .as_str()
        .unwrap()
        .contains("display must be \"own\""));
    let (_, list) = d.call("GET", "/attach", None);
    assert_eq!(list["grants"].as_array().map(Vec::len), Some(0), "{list}");

    // A grant with its own display keeps it across a restart (started again lazily).
    let dir = d.dir.clone();
    let (id, _conn) = d.attached_with(&pod, own_body(&pod, "own-keep", "observe"));
    let g = d.grant(&id);
    assert_eq!(g["display"], "own", "{g}");
    // The console's picture of it waits for the grant to start it; a grant without one
    // has none.
    let (status, v) = d.call("GET", &format!("/attach/{id}/screen"), None);
    assert_eq!(status, 409, "{v}");
    assert!(v["error"].as_str().unwrap().contains("not running"), "{v}");
    let (plain, _plain_conn) = d.attached(&pod, "own-plain", "observe");
    let (status, v) = d.call("GET", &format!("/attach/{plain}/screen"), None);
    assert_eq!(status, 404, "{v}");
    assert_eq!(d.call("DELETE", &format!("/attach/{plain}"), None).0, 204);
    // The display never changes in place: the same request with the box's display would
    // replace the grant (refused here with what differs); the same again renews it.
    let mut same = own_body(&pod, "own-keep", "observe");
    same["replace"] = json!(false);
    let (status, v) = d.call("POST", "/attach", Some(&same));
    assert_eq!(
        (status, v["attach"].as_str()),
        (202, Some("renewed")),
        "{v}"
    );
    let mut boxs = attach_body(&pod, "own-keep", "observe");
    boxs["replace"] = json!(false);
    let (status, v) = d.call("POST", "/attach", Some(&boxs));
    assert_eq!(status, 409, "{v}");
    assert!(
        v["error"]
            .as_str()
            .unwrap()
            .contains("display (own or the box's)"),
        "{v}"
    );
    let mut d = d;
    d.stop();
    let grants = std::fs::read_to_string(dir.join("state").join("grants.json")).unwrap();
    assert!(grants.contains("\"display\": \"own\""), "{grants}");
    let d2 = TestDaemon::start(test_config(&dir), dir.clone());
    let g = d2.grant(&id);
    assert_eq!(g["display"], "own", "{g}");
    assert_eq!(g["own_display"]["running"], false, "{g}");
    std::mem::forget(d); // its directory is d2's
    if skip("display_own_after_a_restart") {
        return;
    }
    // Its next graphical call starts it again.
    let (_, mut conn) = pod.next_session();
    conn.set_read_timeout(Duration::from_secs(30));
    let shot = result(&conn.call_tool(json!(7), "screenshot", json!({}))).clone();
    assert_ne!(shot["isError"], true, "{shot}");
    let g = d2.grant(&id);
    assert_eq!(g["own_display"]["running"], true, "{g}");
}

#[test]
fn daemon_stop_leaves_nothing_of_an_own_display() {
    if skip("daemon_stop_leaves_nothing_of_an_own_display") {
        return;
    }
    let dir = temp_dir("own-display-stop-owner");
    let owner = OwnerScreen::start(&dir);
    let pod = StubPod::start();
    let mut d = daemon("own-display-stop", &owner, 2);
    let (id, mut a) = agent(&d, &pod, "own-stop");
    a.ok("key", json!({"action": "press", "keys": ["shift"]}));
    // An X server that dies (here SIGKILLed, which leaves its socket behind) is cleaned
    // up and started again by the grant's next call.
    let (dead_number, dead_pid) = record(&d, &id);
    let dead_runtime = runtime_dir(&d, &id);
    assert!(Command::new("kill")
        .args(["-KILL", &dead_pid.to_string()])
        .status()
        .unwrap()
        .success());
    poll_until(
        || alive(dead_pid),
        |a| !a,
        |_| "watchdog: the killed Xvfb lives".into(),
    );
    a.ok("key", json!({"action": "press", "keys": ["shift"]}));
    let (number, xvfb_pid) = record(&d, &id);
    assert_ne!(xvfb_pid, dead_pid, "a new X server");
    if number != dead_number {
        let stale = PathBuf::from(format!("/tmp/.X11-unix/X{dead_number}"));
        assert!(
            !left_behind(&stale, &dead_runtime),
            "the dead server's socket is left"
        );
    }
    let runtime = runtime_dir(&d, &id);
    assert!(alive(xvfb_pid));
    let x_socket = PathBuf::from(format!("/tmp/.X11-unix/X{number}"));
    let x_lock = PathBuf::from(format!("/tmp/.X{number}-lock"));
    // (Xvfb -displayfd takes no lock file; the cleanup removes one if there is.)
    assert_eq!(
        (x_socket.exists(), runtime.exists()),
        (true, true),
        "display :{number} running"
    );
    d.stop();
    // Daemon::stop returns after the display is stopped: nothing to wait for.
    assert!(!alive(xvfb_pid), "Xvfb outlived the daemon");
    assert!(
        !left_behind(&x_socket, &runtime),
        "{} left",
        x_socket.display()
    );
    assert!(!left_behind(&x_lock, &runtime), "{} left", x_lock.display());
    assert!(!runtime.exists(), "{} left", runtime.display());
}

/// `app_open` under an `apps` grant with its own display: the app gets that display (and
/// its cookie and bus), started by the call itself, never the owner's.
#[test]
fn app_open_starts_the_app_on_the_grants_own_display() {
    if skip("app_open_starts_the_app_on_the_grants_own_display") {
        return;
    }
    let dir = temp_dir("own-display-apps");
    let owner = OwnerScreen::start(&dir);
    let entries = listed_app(&dir, "t.Sleep", "t.Sleep app", "sleep 30", "/usr/bin:/bin");
    let display = owner.display.clone();
    let d = TestDaemon::with("own-display-apps-d", move |c| {
        quiet_liveness(c);
        c.display_env = Some(owner_env(&display));
        c.apps = entries;
    });
    let pod = StubPod::start();
    let (id, mut a) = agent_as(&d, &pod, "own-apps", "apps");
    // The display starts with the call that needs it.
    assert_eq!(d.grant(&id)["own_display"]["running"], false);
    let opened = a.ok("app_open", json!({"app": "t.Sleep"}));
    let pid = opened["structuredContent"]["pid"].as_i64().unwrap();
    let (number, _) = record(&d, &id);
    let runtime = runtime_dir(&d, &id);
    // Once the leader has exec'd the app.
    poll_until(
        || std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default(),
        |c| c.starts_with(b"sleep") || c.windows(6).any(|w| w == b"sleep\0"),
        |c| {
            format!(
                "watchdog: the app never ran: {:?}",
                String::from_utf8_lossy(c)
            )
        },
    );
    // The app itself: `pid` is the process app_open started, which is the app or, on a
    // box where the grant's wall works, the `bwrap` around it (§19).
    let app = poll_until(
        || {
            let mut todo = vec![pid as u32];
            let mut found = None;
            while let Some(p) = todo.pop() {
                let comm = std::fs::read_to_string(format!("/proc/{p}/comm")).unwrap_or_default();
                if comm.trim() == "sleep" {
                    found = Some(p);
                    break;
                }
                todo.extend(children_of(p));
            }
            found
        },
        Option::is_some,
        |_| "watchdog: no sleep under the app's process".into(),
    )
    .unwrap();
    let walled =
        handnode::walls::probe_bwrap(std::env::var_os("PATH").as_deref(), Kind::OwnDisplay).is_ok();
    let pid_ns = |p: u32| std::fs::read_link(format!("/proc/{p}/ns/pid")).unwrap();
    assert_eq!(
        pid_ns(app) != pid_ns(std::process::id()),
        walled,
        "the app runs in a PID namespace of its own exactly when the wall works here"
    );
    let environ = std::fs::read(format!("/proc/{app}/environ")).unwrap();
    let environ: Vec<String> = environ
        .split(|b| *b == 0)
        .map(|v| String::from_utf8_lossy(v).into_owned())
        .collect();
    let var = |name: &str| {
        environ
            .iter()
            .find_map(|v| v.strip_prefix(&format!("{name}=")).map(str::to_string))
    };
    assert_eq!(var("DISPLAY"), Some(format!(":{number}")), "{environ:?}");
    assert_eq!(
        var("XAUTHORITY"),
        Some(runtime.join("xauth").display().to_string())
    );
    assert!(
        var("DBUS_SESSION_BUS_ADDRESS").is_some_and(|a| a.contains(&runtime.display().to_string())),
        "{environ:?}"
    );
    assert_ne!(var("DISPLAY"), Some(owner.display.clone()));
    let (status, _) = d.call("DELETE", &format!("/attach/{id}"), None);
    assert_eq!(status, 204);
    poll_until(
        || alive(pid as u32),
        |a| !a,
        |_| "watchdog: the app outlived its grant".into(),
    );
}

/// Under `apps` with its own display, the app `app_open` starts runs inside the grant's wall
/// (a PID namespace of its own), and `desktop_act` still knows it for the grant's own: the
/// accessibility bus names its process by the box's pid, which is in the app's run.
#[test]
fn an_apps_grant_drives_its_walled_app_on_its_own_display() {
    if skip("an_apps_grant_drives_its_walled_app_on_its_own_display") {
        return;
    }
    if !at_spi_installed() || !Path::new("/usr/bin/zenity").exists() {
        eprintln!("SKIPPED: no at-spi2-core or zenity");
        return;
    }
    let dir = temp_dir("own-display-zenity");
    let owner = OwnerScreen::start(&dir);
    let entries = listed_app(
        &dir,
        "t.Question",
        "Question",
        "zenity --question \"--text=Own question?\"",
        "/usr/bin:/bin",
    );
    let d = daemon_with("own-display-zenity-d", &owner, 1, move |c| c.apps = entries);
    let pod = StubPod::start();
    let (_id, mut a) = agent_as(&d, &pod, "own-zen", "apps");
    a.ok("app_open", json!({"app": "t.Question"}));
    let snap = poll_until(
        || a.call("desktop_snapshot", json!({"app": "zenity"})),
        |s| s.to_string().contains("Own question?"),
        |s| format!("watchdog: the app never joined the grant's tree: {s}"),
    );
    let nodes = snap["structuredContent"]["nodes"].as_array().unwrap();
    let yes = nodes
        .iter()
        .find(|n| n["role"] == "push button" && n["name"] == "Yes")
        .and_then(|n| n["ref"].as_str())
        .unwrap_or_else(|| panic!("no Yes button: {snap}"))
        .to_string();
    let pressed = a.call("desktop_act", json!({"ref": yes, "action": "press"}));
    assert_ne!(pressed["isError"], true, "{pressed}");
    // Pressed for real: the question is gone from the grant's tree.
    poll_until(
        || a.call("desktop_snapshot", json!({})).to_string(),
        |s| !s.contains("Own question?"),
        |s| format!("watchdog: the question is still there after Yes: {s}"),
    );
}

/// §25: what a `bash` call leaves running stays on the grant's own display after the call
/// answered (an `xterm &` the README promises; `xmessage` here, which needs no pty in the
/// wall), and goes with the grant.
#[test]
fn a_window_started_with_amp_stays_on_the_own_display_after_the_call() {
    if skip("a_window_started_with_amp_stays") {
        return;
    }
    let dir = temp_dir("own-display-bg");
    let owner = OwnerScreen::start(&dir);
    let pod = StubPod::start();
    let d = daemon("own-display-bg", &owner, 2);
    let (id, mut a) = agent(&d, &pod, "own-bg");
    let title = format!("hn-bg-{}", std::process::id());
    let r = a.ok(
        "bash",
        json!({"command": format!("xmessage -title {title} hi &")}),
    );
    // xmessage, and no more than the wall's network helper on its way out.
    let kept = r["structuredContent"]["background_processes"].as_u64();
    assert!(matches!(kept, Some(1..=2)), "{r}");
    // Listed by the grant's own xdotool, on its own display, once the call has answered.
    let windows = poll_until(
        || a.bash(&format!("xdotool search --name {title}; true")),
        |out| !out.trim().is_empty(),
        |out| format!("watchdog: no window titled {title} on the own display: {out:?}"),
    );
    assert!(
        windows.trim().lines().all(|w| w.parse::<u64>().is_ok()),
        "{windows}"
    );
    let (status, _) = d.call("DELETE", &format!("/attach/{id}"), None);
    assert_eq!(status, 204);
    poll_until(
        || {
            std::fs::read_dir("/proc").unwrap().flatten().any(|e| {
                std::fs::read(e.path().join("cmdline"))
                    .is_ok_and(|c| c.windows(title.len()).any(|w| w == title.as_bytes()))
            })
        },
        |alive| !alive,
        |_| format!("watchdog: the xmessage titled {title} outlived its grant"),
    );
}
