//! `desktop_snapshot` and `desktop_act` against a real GTK application (zenity) on Xvfb,
//! with a private session bus and runtime directory per test, as contract §17 asks: the
//! snapshot names the buttons, pressing one ends zenity with its exit status, a ref taken
//! before the window closed is refused, a long list is cut at max_nodes and says so, and an
//! `apps` grant presses only buttons of the app it opened, never those of another zenity
//! (in-process, and through a daemon's grant over the pod's socket).
//! Skips (saying why) only where Xvfb, dbus-daemon, zenity or at-spi2-core are absent; CI
//! installs them (scripts/ci/packages.sh).

mod common;
mod displays;

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use displays::*;
use handnode::config::DisplayBackend;
use handnode::profiles::Profile;
use handnode::tools::ToolHost;
use serde_json::{json, Value};

/// How long a window may take to join the accessibility tree (measured ~0.45 s).
const APPEAR: Duration = Duration::from_secs(30);

/// A private desktop session on the test Xvfb: a 0700 runtime dir, a session bus, and the
/// accessibility bus its first `GetAddress` starts. Everything is killed on drop.
pub struct Session {
    pub dir: PathBuf,
    pub env: BTreeMap<String, String>,
    // Dropped in this order: the buses, then the screen, then the directory.
    _bus: BusGroup,
    _xvfb: Killed,
    _dir: RemoveDir,
}

/// The session bus's process group (it and what it activated: at-spi-bus-launcher, the
/// accessibility bus, the registry), killed when dropped, a panicking test's included.
struct BusGroup(Child);

impl Drop for BusGroup {
    fn drop(&mut self) {
        let _ = Command::new("kill")
            .args(["-KILL", "--", &format!("-{}", self.0.id())])
            .status();
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// A directory removed when dropped.
struct RemoveDir(PathBuf);

impl Drop for RemoveDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

impl Session {
    /// `None` (with the reason printed) where the packages are absent.
    pub fn start(test: &str) -> Option<Session> {
        for (program, package) in [
            ("Xvfb", "xvfb"),
            ("dbus-daemon", "dbus-daemon"),
            ("zenity", "zenity"),
            ("/usr/libexec/at-spi-bus-launcher", "at-spi2-core"),
        ] {
            let found = if program.starts_with('/') {
                common::at_spi_installed()
            } else {
                handnode::tools::display::which(program, None).is_some()
            };
            if !found {
                eprintln!("SKIPPED {test}: {program} is not installed (apt install {package})");
                return None;
            }
        }
        use std::os::unix::fs::PermissionsExt;
        static NEXT: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
        let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        let dir = std::env::temp_dir().join(format!("handnode-a11y-{}-{n}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o700)).unwrap();
        let dir_guard = RemoveDir(dir.clone());
        let (xvfb, display) = own_xvfb();
        let mut env = BTreeMap::new();
        env.insert("DISPLAY".to_string(), display);
        env.insert("XDG_RUNTIME_DIR".to_string(), dir.display().to_string());
        env.insert("HOME".to_string(), dir.display().to_string());
        // zenity prints non-ASCII as '?' without a UTF-8 locale.
        env.insert("LANG".to_string(), "C.UTF-8".to_string());
        env.insert(
            "PATH".to_string(),
            std::env::var("PATH").unwrap_or_else(|_| "/usr/bin:/bin".into()),
        );
        use std::os::unix::process::CommandExt;
        let mut bus = Command::new("dbus-daemon")
            .args(["--session", "--nofork", "--print-address"])
            .env_clear()
            .envs(&env)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .process_group(0)
            .spawn()
            .expect("dbus-daemon starts");
        let stdout = bus.stdout.take().unwrap();
        let bus = BusGroup(bus);
        let (tx, rx) = crossbeam_channel::bounded(1);
        std::thread::spawn(move || {
            let mut line = String::new();
            let _ = BufReader::new(stdout).read_line(&mut line);
            let _ = tx.send(line);
        });
        let address = rx
            .recv_timeout(Duration::from_secs(20))
            .expect("dbus-daemon printed its address");
        let address = address.trim().to_string();
        assert!(address.starts_with("unix:"), "{address}");
        // Bring the accessibility bus and its registry up first, as in a desktop session
        // that has run a while: an application that starts while the launcher and the
        // registry are still starting can miss registering (seen as a window that never
        // joins the tree).
        let display_env = handnode::tools::display::DisplayEnv {
            dbus_session_bus_address: Some(address.clone()),
            ..Default::default()
        };
        // The registry sometimes quits as it starts ("disconnected without replying"); it
        // is started again by the next call.
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            let up = handnode::tools::a11y::bus_status(&display_env, Duration::from_secs(5));
            if up.is_ok() {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "the accessibility bus did not come up: {up:?}"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        env.insert("DBUS_SESSION_BUS_ADDRESS".to_string(), address);
        Some(Session {
            dir,
            env,
            _bus: bus,
            _xvfb: xvfb,
            _dir: dir_guard,
        })
    }

    /// A tool host on this session's display and buses, with `timeout` per bus call.
    pub fn host(&self) -> Arc<ToolHost> {
        let mut env = self.env.clone();
        env.remove("HOME");
        env.remove("LANG");
        host_with(DisplayBackend::X11, Some(env))
    }

    /// A tool host whose bus calls wait at most `timeout`.
    pub fn host_timeout(&self, timeout: Duration) -> Arc<ToolHost> {
        let mut env = self.env.clone();
        env.remove("HOME");
        env.remove("LANG");
        ToolHost::new(handnode::tools::ToolConfig {
            display_backend: DisplayBackend::X11,
            display_env: Some(env),
            display_probe_ttl: Duration::ZERO,
            a11y_call_timeout: timeout,
            ..handnode::tools::ToolConfig::default()
        })
        .expect("tool host")
    }

    /// Start zenity with `args` in this session.
    pub fn zenity(&self, args: &[&str]) -> Zenity {
        let child = Command::new("zenity")
            .args(args)
            .env_clear()
            .envs(&self.env)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("zenity starts");
        Zenity(Some(child))
    }
}

/// An Xvfb of this session's own: at-spi-bus-launcher publishes its bus on the X root
/// window (`AT_SPI_BUS`), where GTK looks first, so sessions sharing a screen would find
/// each other's bus. The display number is the first free one from 200 (tests run in
/// parallel: a number another Xvfb took makes ours exit, and the next is tried).
fn own_xvfb() -> (Killed, String) {
    static NEXT: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
    let base = 200 + (std::process::id() % 50) * 10;
    for _ in 0..200 {
        let n = base + NEXT.fetch_add(1, std::sync::atomic::Ordering::SeqCst) % 500;
        let socket = PathBuf::from(format!("/tmp/.X11-unix/X{n}"));
        if socket.exists() || Path::new(&format!("/tmp/.X{n}-lock")).exists() {
            continue;
        }
        let mut child = Command::new("Xvfb")
            .args([
                &format!(":{n}"),
                "-screen",
                "0",
                "1024x768x24",
                "-nolisten",
                "tcp",
            ])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("Xvfb starts");
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            if socket.exists() {
                return (Killed(child), format!(":{n}"));
            }
            if child.try_wait().unwrap().is_some() || Instant::now() >= deadline {
                let _ = child.kill();
                let _ = child.wait();
                break;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }
    panic!("no free X display number for Xvfb");
}

/// A zenity killed when dropped, whose exit status a test can wait for.
pub struct Zenity(Option<Child>);

impl Zenity {
    pub fn pid(&self) -> u32 {
        self.0.as_ref().unwrap().id()
    }

    /// Its standard output, once it has ended.
    pub fn stdout(&mut self) -> String {
        let mut out = String::new();
        if let Some(mut s) = self.0.as_mut().unwrap().stdout.take() {
            let _ = std::io::Read::read_to_string(&mut s, &mut out);
        }
        out
    }

    /// Its exit status within `limit` (a watchdog: `None` if it is still running).
    pub fn wait(&mut self, limit: Duration) -> Option<ExitStatus> {
        let child = self.0.as_mut().unwrap();
        let deadline = Instant::now() + limit;
        loop {
            if let Some(status) = child.try_wait().unwrap() {
                return Some(status);
            }
            if Instant::now() >= deadline {
                return None;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for Zenity {
    fn drop(&mut self) {
        if let Some(mut c) = self.0.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// Snapshot until `found` holds for it (the window joins the tree a while after the
/// process starts), within [`APPEAR`]; the last result.
pub fn snapshot_until(
    host: &Arc<ToolHost>,
    args: Value,
    mut found: impl FnMut(&Value) -> bool,
) -> Value {
    let deadline = Instant::now() + APPEAR;
    let mut last = Value::Null;
    while Instant::now() < deadline {
        let out = call(host, "desktop_snapshot", args.clone());
        if let handnode::wire::mcp::ToolOutput::Result(v) = out {
            if v.get("isError") != Some(&Value::Bool(true)) && found(&v) {
                return v;
            }
            last = v;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    panic!("the window did not appear in the accessibility tree within {APPEAR:?}: {last}");
}

/// The ref of the first node with `role` and `name`.
pub fn find_ref(result: &Value, role: &str, name: &str) -> Option<String> {
    result["structuredContent"]["nodes"]
        .as_array()?
        .iter()
        .find(|n| n["role"] == role && n["name"] == name)
        .map(|n| n["ref"].as_str().unwrap().to_string())
}

fn text(result: &Value) -> &str {
    result["content"][0]["text"].as_str().unwrap()
}

fn question_buttons(test: &str) -> Option<(Session, Arc<ToolHost>, Zenity, Value)> {
    let session = Session::start(test)?;
    let host = session.host();
    let zenity = session.zenity(&["--question", "--text=Save the file?"]);
    let snap = snapshot_until(&host, json!({"app": "zenity"}), |v| {
        find_ref(v, "push button", "Yes").is_some() && find_ref(v, "push button", "No").is_some()
    });
    Some((session, host, zenity, snap))
}

#[test]
fn snapshot_names_the_buttons_and_press_yes_ends_zenity_with_0() {
    let Some((_session, host, mut zenity, snap)) = question_buttons("press_yes") else {
        return;
    };
    let t = text(&snap);
    assert!(t.contains("push button \"Yes\""), "{t}");
    assert!(t.contains("push button \"No\""), "{t}");
    assert!(
        t.lines()
            .next()
            .unwrap()
            .starts_with("[e1] application \"zenity\""),
        "{t}"
    );
    let nodes = snap["structuredContent"]["nodes"].as_array().unwrap();
    assert_eq!(snap["structuredContent"]["truncated"], false);
    // The application's process is the zenity we started.
    assert_eq!(nodes[0]["pid"], json!(zenity.pid()), "{}", nodes[0]);
    let yes = nodes.iter().find(|n| n["name"] == "Yes").unwrap();
    let b = &yes["bounds"];
    assert!(
        b["w"].as_i64().unwrap() > 0 && b["h"].as_i64().unwrap() > 0,
        "{yes}"
    );
    assert!(yes["depth"].as_u64().unwrap() >= 2, "{yes}");
    // Indented by depth.
    let line = t.lines().find(|l| l.contains("\"Yes\"")).unwrap();
    assert!(
        line.starts_with(&"  ".repeat(yes["depth"].as_u64().unwrap() as usize)),
        "{line}"
    );

    let reference = find_ref(&snap, "push button", "Yes").unwrap();
    let out = ok(call(
        &host,
        "desktop_act",
        json!({"ref": reference, "action": "press"}),
    ));
    assert!(
        text(&out).to_lowercase().contains("\"click\" action"),
        "{}",
        text(&out)
    );
    let status = zenity
        .wait(Duration::from_secs(20))
        .expect("zenity ended after Yes");
    assert_eq!(status.code(), Some(0));
}

#[test]
fn press_no_ends_zenity_with_1_and_an_old_ref_is_then_refused() {
    let Some((_session, host, mut zenity, snap)) = question_buttons("press_no") else {
        return;
    };
    let no = find_ref(&snap, "push button", "No").unwrap();
    let yes = find_ref(&snap, "push button", "Yes").unwrap();
    ok(call(
        &host,
        "desktop_act",
        json!({"ref": no, "action": "press"}),
    ));
    let status = zenity
        .wait(Duration::from_secs(20))
        .expect("zenity ended after No");
    assert_eq!(status.code(), Some(1));
    // The Yes ref was taken before the window closed.
    let err = tool_error(call(
        &host,
        "desktop_act",
        json!({"ref": yes, "action": "press"}),
    ));
    assert_eq!(
        err,
        format!("{yes} is no longer push button \"Yes\": take a new snapshot")
    );
}

#[test]
fn a_long_list_is_cut_at_max_nodes_and_says_so() {
    let Some(session) = Session::start("long_list") else {
        return;
    };
    let host = session.host();
    let rows: Vec<String> = (0..300).map(|i| format!("row {i}")).collect();
    let mut args = vec!["--list", "--column=Name", "--height=600"];
    args.extend(rows.iter().map(String::as_str));
    let _zenity = session.zenity(&args);
    let snap = snapshot_until(&host, json!({"app": "zenity", "max_nodes": 30}), |v| {
        text(v).contains("table cell")
    });
    let nodes = snap["structuredContent"]["nodes"].as_array().unwrap();
    assert_eq!(nodes.len(), 30);
    assert_eq!(snap["structuredContent"]["truncated"], true);
    assert!(
        text(&snap).contains("truncated at 30 elements"),
        "{}",
        text(&snap)
    );
    // Refs are numbered in tree order, and a ref past the snapshot is refused.
    assert_eq!(nodes[29]["ref"], "e30");
    let err = tool_error(call(
        &host,
        "desktop_act",
        json!({"ref": "e31", "action": "focus"}),
    ));
    assert!(
        err.contains("e31 is not a ref of your last desktop_snapshot"),
        "{err}"
    );
    // Uncut, the whole window fits: more nodes, not truncated.
    let all = ok(call(
        &host,
        "desktop_snapshot",
        json!({"app": "zenity", "max_nodes": 4000}),
    ));
    assert!(all["structuredContent"]["nodes"].as_array().unwrap().len() > 30);
}

#[test]
fn snapshot_bounds_are_refused_at_bound_plus_one() {
    let Some(session) = Session::start("bounds") else {
        return;
    };
    let host = session.host();
    for bad in [
        json!({"max_nodes": 4001}),
        json!({"max_nodes": 0}),
        json!({"offscreen": "yes"}),
        json!({"app": "x".repeat(257)}),
    ] {
        let err = tool_error(call(&host, "desktop_snapshot", bad.clone()));
        assert!(err.contains('`'), "{bad}: {err}");
    }
    let err = tool_error(call(
        &host,
        "desktop_act",
        json!({"ref": "e1", "action": "set_text", "text": "x".repeat(100_001)}),
    ));
    assert!(err.contains("at most 100000 characters"), "{err}");
    let err = tool_error(call(
        &host,
        "desktop_act",
        json!({"ref": "e1", "action": "explode"}),
    ));
    assert!(err.contains("press, focus, set_text"), "{err}");
    // No snapshot yet: no refs.
    let err = tool_error(call(
        &host,
        "desktop_act",
        json!({"ref": "e1", "action": "press"}),
    ));
    assert!(err.contains("take a new snapshot"), "{err}");
    // An application that is not there is named as missing, with what is there.
    let err = tool_error(call(
        &host,
        "desktop_snapshot",
        json!({"app": "no-such-app"}),
    ));
    assert!(
        err.contains("no application named \"no-such-app\""),
        "{err}"
    );
}

#[test]
fn observe_lists_the_snapshot_but_not_the_action() {
    use handnode::tools::a11y::{ACT, SNAPSHOT};
    let observe = handnode::tools::names(Profile::Observe);
    assert!(observe.contains(&SNAPSHOT.name));
    assert!(!observe.contains(&ACT.name));
    // Both are served (registered), with the classes the escalation check reads.
    assert!(
        handnode::tools::find(SNAPSHOT.name).is_some() && handnode::tools::find(ACT.name).is_some()
    );
    assert_eq!(
        handnode::tools::class_of(SNAPSHOT.name),
        Some(handnode::profiles::Class::Observe)
    );
    assert_eq!(
        handnode::tools::class_of(ACT.name),
        Some(handnode::profiles::Class::Shell)
    );
}

#[test]
fn set_text_is_read_back_and_the_application_sees_it() {
    let Some(session) = Session::start("set_text") else {
        return;
    };
    let host = session.host();
    let mut zenity = session.zenity(&["--entry", "--text=Name?"]);
    let snap = snapshot_until(&host, json!({"app": "zenity"}), |v| {
        find_ref(v, "push button", "OK").is_some()
            && v["structuredContent"]["nodes"]
                .as_array()
                .unwrap()
                .iter()
                .any(|n| {
                    n["role"] == "text"
                        && n["states"].as_array().unwrap().contains(&json!("editable"))
                })
    });
    let field = snap["structuredContent"]["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|n| n["role"] == "text")
        .unwrap()["ref"]
        .as_str()
        .unwrap()
        .to_string();
    let out = ok(call(
        &host,
        "desktop_act",
        json!({"ref": field, "action": "set_text", "text": "héllo \"world\""}),
    ));
    assert_eq!(
        out["structuredContent"]["element"]["value"], "héllo \"world\"",
        "{out}"
    );
    ok(call(
        &host,
        "desktop_act",
        json!({"ref": field, "action": "focus"}),
    ));
    // The ref still names the same field; the snapshot now shows its value.
    let snap = ok(call(&host, "desktop_snapshot", json!({"app": "zenity"})));
    assert!(
        text(&snap).contains(r#"= "héllo \"world\"""#),
        "{}",
        text(&snap)
    );
    let okay = find_ref(&snap, "push button", "OK").unwrap();
    ok(call(
        &host,
        "desktop_act",
        json!({"ref": okay, "action": "press"}),
    ));
    let status = zenity
        .wait(Duration::from_secs(20))
        .expect("zenity ended after OK");
    assert_eq!(status.code(), Some(0));
    assert_eq!(zenity.stdout().trim_end(), "héllo \"world\"");
}

/// The refs of the table cells, in order, with their names and states.
fn cells(snap: &Value) -> Vec<(String, String, Vec<Value>)> {
    snap["structuredContent"]["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|n| n["role"] == "table cell")
        .map(|n| {
            (
                n["ref"].as_str().unwrap().to_string(),
                n["name"].as_str().unwrap().to_string(),
                n["states"].as_array().unwrap().clone(),
            )
        })
        .collect()
}

#[test]
fn toggle_reports_the_new_state_and_the_application_sees_it() {
    let Some(session) = Session::start("toggle") else {
        return;
    };
    let host = session.host();
    let mut zenity = session.zenity(&[
        "--list",
        "--checklist",
        "--column=Pick",
        "--column=Name",
        "FALSE",
        "apple",
        "TRUE",
        "pear",
    ]);
    let snap = snapshot_until(&host, json!({"app": "zenity"}), |v| cells(v).len() == 4);
    let cells = cells(&snap);
    let (apple_box, pear_box) = (&cells[0], &cells[2]);
    assert_eq!(cells[1].1, "apple");
    assert!(!apple_box.2.contains(&json!("checked")) && pear_box.2.contains(&json!("checked")));
    let on = ok(call(
        &host,
        "desktop_act",
        json!({"ref": apple_box.0, "action": "toggle"}),
    ));
    assert!(text(&on).ends_with("now on"), "{}", text(&on));
    assert!(
        on["structuredContent"]["element"]["states"]
            .as_array()
            .unwrap()
            .contains(&json!("checked")),
        "{on}"
    );
    let off = ok(call(
        &host,
        "desktop_act",
        json!({"ref": pear_box.0, "action": "toggle"}),
    ));
    assert!(text(&off).ends_with("now off"), "{}", text(&off));
    let okay = find_ref(&snap, "push button", "OK").unwrap();
    ok(call(
        &host,
        "desktop_act",
        json!({"ref": okay, "action": "press"}),
    ));
    let status = zenity
        .wait(Duration::from_secs(20))
        .expect("zenity ended after OK");
    assert_eq!(status.code(), Some(0));
    assert_eq!(zenity.stdout().trim_end(), "apple");
}

#[test]
fn select_picks_a_row_and_scroll_to_brings_one_into_view() {
    let Some(session) = Session::start("select") else {
        return;
    };
    let host = session.host();
    let rows: Vec<String> = (0..60).map(|i| format!("row {i}")).collect();
    let mut args = vec!["--list", "--column=Name", "--height=300"];
    args.extend(rows.iter().map(String::as_str));
    let mut zenity = session.zenity(&args);
    let snap = snapshot_until(&host, json!({"app": "zenity"}), |v| {
        cells(v).iter().any(|c| c.1 == "row 2")
    });
    // A row scrolled away is not listed; with offscreen it is, and scroll_to shows it
    // (GTK 3 scrolls a list by focusing the row, which in a list of one choice picks it).
    assert!(find_ref(&snap, "table cell", "row 55").is_none());
    let every = ok(call(
        &host,
        "desktop_snapshot",
        json!({"app": "zenity", "offscreen": true}),
    ));
    let far = find_ref(&every, "table cell", "row 55").unwrap();
    ok(call(
        &host,
        "desktop_act",
        json!({"ref": far, "action": "scroll_to"}),
    ));
    let after = snapshot_until(&host, json!({"app": "zenity"}), |v| {
        find_ref(v, "table cell", "row 55").is_some()
    });
    assert!(
        find_ref(&after, "table cell", "row 0").is_none(),
        "{}",
        text(&after)
    );
    // select picks row 2, scrolled away now.
    let every = ok(call(
        &host,
        "desktop_snapshot",
        json!({"app": "zenity", "offscreen": true}),
    ));
    let row2 = find_ref(&every, "table cell", "row 2").unwrap();
    let out = ok(call(
        &host,
        "desktop_act",
        json!({"ref": row2, "action": "select"}),
    ));
    assert!(
        out["structuredContent"]["element"]["states"]
            .as_array()
            .unwrap()
            .contains(&json!("selected")),
        "{out}"
    );
    let okay = find_ref(&after, "push button", "OK").unwrap();
    ok(call(
        &host,
        "desktop_act",
        json!({"ref": okay, "action": "press"}),
    ));
    let status = zenity
        .wait(Duration::from_secs(20))
        .expect("zenity ended after OK");
    assert_eq!(status.code(), Some(0));
    assert_eq!(zenity.stdout().trim_end(), "row 2");
}

/// The names of the table cells a snapshot lists.
fn cell_names(snap: &Value) -> std::collections::BTreeSet<String> {
    cells(snap).into_iter().map(|c| c.1).collect()
}

/// The table cells of an `offscreen` snapshot whose bounds overlap the list's scrolled
/// view (its scroll pane's rect and its table's): what a snapshot must list, no more.
fn cells_in_view(every: &Value) -> std::collections::BTreeSet<String> {
    let nodes = every["structuredContent"]["nodes"].as_array().unwrap();
    let rect = |n: &Value| -> Option<[i64; 4]> {
        let b = &n["bounds"];
        Some([
            b["x"].as_i64()?,
            b["y"].as_i64()?,
            b["w"].as_i64()?,
            b["h"].as_i64()?,
        ])
    };
    let view = |roles: &[&str]| {
        nodes
            .iter()
            .find(|n| roles.iter().any(|r| n["role"] == *r))
            .and_then(rect)
            .unwrap_or_else(|| panic!("no {roles:?} with bounds"))
    };
    let overlaps = |a: [i64; 4], b: [i64; 4]| {
        a[0] < b[0] + b[2] && b[0] < a[0] + a[2] && a[1] < b[1] + b[3] && b[1] < a[1] + a[3]
    };
    let (pane, table) = (view(&["scroll pane"]), view(&["table", "tree table"]));
    nodes
        .iter()
        .filter(|n| n["role"] == "table cell")
        .filter(|n| rect(n).is_some_and(|r| overlaps(r, pane) && overlaps(r, table)))
        .map(|n| n["name"].as_str().unwrap().to_string())
        .collect()
}

#[test]
fn a_snapshot_lists_exactly_the_cells_in_view_wherever_the_list_is_scrolled() {
    // Seven columns, so the chunks a snapshot asks about end in the middle of a row.
    let Some(session) = Session::start("in_view") else {
        return;
    };
    let host = session.host();
    let columns: Vec<String> = (0..7).map(|c| format!("--column=col {c}")).collect();
    let names: Vec<String> = (0..200 * 7)
        .map(|i| format!("r{}c{}", i / 7, i % 7))
        .collect();
    let mut args = vec!["--list", "--width=1000", "--height=500"];
    args.extend(columns.iter().map(String::as_str));
    args.extend(names.iter().map(String::as_str));
    let _zenity = session.zenity(&args);
    let all = json!({"app": "zenity", "max_nodes": 4000});
    let every_args = json!({"app": "zenity", "max_nodes": 4000, "offscreen": true});
    snapshot_until(&host, all.clone(), |v| cell_names(v).contains("r0c0"));
    // At the top, in the middle, at the end.
    for row in [None, Some(100), Some(199)] {
        if let Some(row) = row {
            let every = ok(call(&host, "desktop_snapshot", every_args.clone()));
            let far = find_ref(&every, "table cell", &format!("r{row}c0")).unwrap();
            ok(call(
                &host,
                "desktop_act",
                json!({"ref": far, "action": "scroll_to"}),
            ));
            snapshot_until(&host, all.clone(), |v| {
                cell_names(v).contains(&format!("r{row}c0"))
            });
        }
        let shown = cell_names(&ok(call(&host, "desktop_snapshot", all.clone())));
        let every = ok(call(&host, "desktop_snapshot", every_args.clone()));
        let want = cells_in_view(&every);
        assert!(
            !want.is_empty() && want.len() < cell_names(&every).len(),
            "scrolled to {row:?}: {want:?}"
        );
        assert_eq!(shown, want, "scrolled to {row:?}");
    }
}

/// Each element of a snapshot read in this process: role, name, states and bounds.
fn read_tree(
    bus: &mut handnode::tools::a11y::bus::Bus,
) -> Vec<(String, String, u64, Option<[i64; 4]>)> {
    use handnode::tools::a11y::tree;
    let opts = tree::Opts {
        app: Some("zenity".into()),
        max_nodes: 4000,
        offscreen: false,
    };
    tree::read(bus, &opts, &|| false)
        .expect("a snapshot")
        .nodes
        .into_iter()
        .map(|n| (n.el.role, n.el.name, n.states, n.bounds))
        .collect()
}

#[test]
fn a_snapshot_asks_the_application_on_its_own_socket_and_reads_the_same_tree_as_over_the_bus() {
    use handnode::tools::a11y::bus::{Bus, Req, APPLICATION, REGISTRY, ROOT_PATH};
    let Some(session) = Session::start("direct") else {
        return;
    };
    let rows: Vec<String> = (0..100).map(|i| format!("row {i}")).collect();
    let mut args = vec!["--list", "--column=Name", "--height=400"];
    args.extend(rows.iter().map(String::as_str));
    let _zenity = session.zenity(&args);
    snapshot_until(&session.host(), json!({"app": "zenity"}), |v| {
        cell_names(v).contains("row 0")
    });
    let env = handnode::tools::display::DisplayEnv {
        dbus_session_bus_address: session.env.get("DBUS_SESSION_BUS_ADDRESS").cloned(),
        ..Default::default()
    };
    let mut bus = Bus::open(&env, Duration::from_secs(5)).expect("the accessibility bus");
    // Over the bus alone: what the snapshot must read.
    bus.direct = false;
    let over_bus = read_tree(&mut bus);
    assert!(over_bus.iter().any(|n| n.1 == "row 0"), "{over_bus:?}");
    assert_eq!(bus.sent_direct, 0);
    // Directly: the same tree, every call after the registry's on the application's socket.
    bus.direct = true;
    let sent = bus.sent;
    assert_eq!(read_tree(&mut bus), over_bus);
    assert!(
        bus.sent_direct * 10 > (bus.sent - sent) * 9,
        "{} of {} calls went directly",
        bus.sent_direct,
        bus.sent - sent
    );
    assert_eq!(bus.direct_count(), 0, "closed when the read ends");
    // The application's socket gone: the same tree over the bus, no error.
    let apps = bus
        .call(Req::new(
            REGISTRY,
            ROOT_PATH,
            handnode::tools::a11y::bus::ACCESSIBLE,
            "GetChildren",
        ))
        .unwrap();
    let zenity = apps[0].items()[0].items();
    let (name, path) = (zenity[0].as_str().unwrap(), zenity[1].as_str().unwrap());
    let address = bus
        .call(Req::new(
            name,
            path,
            APPLICATION,
            "GetApplicationBusAddress",
        ))
        .unwrap();
    let socket = address[0]
        .as_str()
        .unwrap()
        .strip_prefix("unix:path=")
        .unwrap()
        .to_string();
    std::fs::remove_file(&socket).expect("the application's socket");
    let direct = bus.sent_direct;
    assert_eq!(read_tree(&mut bus), over_bus);
    assert_eq!(
        bus.sent_direct, direct,
        "nothing sent directly without a socket"
    );
}

#[test]
fn a_hung_application_is_skipped_and_named() {
    let Some(session) = Session::start("hung") else {
        return;
    };
    let host = session.host_timeout(Duration::from_millis(300));
    let zenity = session.zenity(&["--question", "--text=hang"]);
    let before = snapshot_until(&host, json!({}), |v| {
        find_ref(v, "push button", "Yes").is_some()
    });
    let yes = find_ref(&before, "push button", "Yes").unwrap();
    // Stopped, it answers nothing; the snapshot still comes back, without it, and says so.
    let stop = |sig: &str| {
        assert!(Command::new("kill")
            .args([sig, &zenity.pid().to_string()])
            .status()
            .unwrap()
            .success());
    };
    stop("-STOP");
    // Acting on it says it does not answer (not that the element changed).
    let err = tool_error(call(
        &host,
        "desktop_act",
        json!({"ref": yes, "action": "press"}),
    ));
    assert_eq!(
        err,
        format!("{yes} (push button \"Yes\"): its application (zenity) did not answer within 300 ms: it may be busy or hung")
    );
    let started = Instant::now();
    let out = ok(call(&host, "desktop_snapshot", json!({})));
    stop("-CONT");
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "{:?}",
        started.elapsed()
    );
    let t = text(&out);
    assert!(t.contains("did not answer within 300 ms"), "{t}");
    assert!(!t.contains("push button"), "{t}");
    assert!(
        out["structuredContent"]["skipped"][0]
            .as_str()
            .unwrap()
            .contains(&zenity.pid().to_string()),
        "{out}"
    );
}

#[test]
#[ignore = "prints a snapshot for a person to read"]
fn print_a_snapshot() {
    let Some((_session, host, _zenity, _)) = question_buttons("print") else {
        return;
    };
    let out = ok(call(&host, "desktop_snapshot", json!({})));
    println!("{}", text(&out));
    println!(
        "{}",
        serde_json::to_string(&out["structuredContent"]).unwrap()
    );
}

#[test]
fn doctor_says_the_accessibility_bus_is_up_and_how_to_turn_it_on() {
    let Some(session) = Session::start("doctor") else {
        return;
    };
    let host = session.host();
    let probe = host.display.probe(&host.config, &host.processes);
    let checks = handnode::ops::doctor::display_checks(&probe, &host.config, &host.processes);
    let line = checks
        .iter()
        .find(|c| c.name == "accessibility bus")
        .expect("an accessibility bus line");
    assert!(line.detail.starts_with("up;"), "{line:?}");
    let fix = line.fix.as_deref().unwrap();
    assert!(
        fix.contains("--force-renderer-accessibility")
            && fix.contains("QT_LINUX_ACCESSIBILITY_ALWAYS_ON=1"),
        "{fix}"
    );
    // Without a session bus the tools say what is missing.
    let mut env = session.env.clone();
    env.remove("DBUS_SESSION_BUS_ADDRESS");
    env.remove("HOME");
    env.remove("LANG");
    let bare = host_with(DisplayBackend::X11, Some(env));
    let err = tool_error(call(&bare, "desktop_snapshot", json!({})));
    assert!(err.contains("DBUS_SESSION_BUS_ADDRESS"), "{err}");
}

#[test]
#[ignore = "prints a list's snapshot for a person to read"]
fn print_a_list() {
    let Some(session) = Session::start("print_list") else {
        return;
    };
    let host = session.host();
    let args = std::env::var("PRINT_ZENITY")
        .unwrap_or_else(|_| "--list --column=Name --height=300 a b c".into());
    let args: Vec<&str> = args.split(' ').collect();
    let _zenity = session.zenity(&args);
    snapshot_until(&host, json!({"app": "zenity"}), |v| {
        text(v).contains("table cell")
    });
    let t0 = Instant::now();
    let out = ok(call(
        &host,
        "desktop_snapshot",
        json!({"app": "zenity", "offscreen": true, "max_nodes": 4000}),
    ));
    println!("offscreen {:?}\n{}", t0.elapsed(), text(&out));
    let t0 = Instant::now();
    let out = ok(call(&host, "desktop_snapshot", json!({"app": "zenity"})));
    println!("shown {:?}\n{}", t0.elapsed(), text(&out));
    for n in out["structuredContent"]["nodes"].as_array().unwrap() {
        if ["table", "scroll pane", "dialog"].contains(&n["role"].as_str().unwrap())
            || n["name"] == "row 99"
            || n["name"] == "row 5"
        {
            println!("{n}");
        }
    }
}

#[test]
fn refs_belong_to_the_grant_that_took_the_snapshot() {
    let Some((_session, host, mut zenity, _)) = question_buttons("grant_refs") else {
        return;
    };
    let a = ok(call_in_grant(
        &host,
        "grant-a",
        "desktop_snapshot",
        json!({"app": "zenity"}),
    ));
    let yes = find_ref(&a, "push button", "Yes").unwrap();
    // Another grant never took a snapshot: the ref means nothing there.
    let err = tool_error(call_in_grant(
        &host,
        "grant-b",
        "desktop_act",
        json!({"ref": yes, "action": "press"}),
    ));
    assert!(
        err.contains("is not a ref of your last desktop_snapshot"),
        "{err}"
    );
    assert!(
        zenity.wait(Duration::from_millis(200)).is_none(),
        "zenity still runs"
    );
    // Its grant's end forgets them.
    host.a11y.end_scope("grant-a");
    let err = tool_error(call_in_grant(
        &host,
        "grant-a",
        "desktop_act",
        json!({"ref": yes, "action": "press"}),
    ));
    assert!(err.contains("take a new snapshot"), "{err}");
    let a = ok(call_in_grant(
        &host,
        "grant-a",
        "desktop_snapshot",
        json!({"app": "zenity"}),
    ));
    let yes = find_ref(&a, "push button", "Yes").unwrap();
    ok(call_in_grant(
        &host,
        "grant-a",
        "desktop_act",
        json!({"ref": yes, "action": "press"}),
    ));
    assert_eq!(
        zenity
            .wait(Duration::from_secs(20))
            .expect("zenity ended")
            .code(),
        Some(0)
    );
}

/// The whole daemon: the owner's `/mcp` lists both tools with their output schema, and a
/// snapshot and a press go through the display thread to zenity and back.
#[test]
fn through_the_daemon_a_snapshot_and_a_press_reach_zenity() {
    let Some((session, _host, mut zenity, _)) = question_buttons("daemon") else {
        return;
    };
    let mut env = session.env.clone();
    env.remove("HOME");
    env.remove("LANG");
    let d = common::TestDaemon::with("a11y-daemon", |c| {
        c.display_env = Some(env);
        c.display_backend = DisplayBackend::X11;
    });
    let rpc = |id: u64, method: &str, params: Value| {
        let body = json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params});
        let (status, reply) = d.call("POST", "/mcp", Some(&body));
        assert_eq!(status, 200, "{reply}");
        reply
    };
    let list = rpc(1, "tools/list", json!({}));
    let tools = list["result"]["tools"].as_array().unwrap();
    for tool in [
        handnode::tools::a11y::SNAPSHOT.name,
        handnode::tools::a11y::ACT.name,
    ] {
        let t = tools
            .iter()
            .find(|t| t["name"] == tool)
            .unwrap_or_else(|| panic!("{tool} listed"));
        assert!(t["outputSchema"]["properties"].is_object(), "{t}");
    }
    let snap = rpc(
        2,
        "tools/call",
        json!({"name": "desktop_snapshot", "arguments": {"app": "zenity"}}),
    );
    let result = &snap["result"];
    assert_ne!(result["isError"], true, "{snap}");
    let yes = find_ref(result, "push button", "Yes").expect("Yes is listed");
    let press = rpc(
        3,
        "tools/call",
        json!({"name": "desktop_act", "arguments": {"ref": yes, "action": "press"}}),
    );
    assert_ne!(press["result"]["isError"], true, "{press}");
    assert_eq!(press["result"]["structuredContent"]["action"], "press");
    assert_eq!(
        zenity
            .wait(Duration::from_secs(20))
            .expect("zenity ended")
            .code(),
        Some(0)
    );
}

/// `(application pid, ref)` of every node with `role` and `name`, by the application
/// (depth 0) it is under.
fn refs_by_app(result: &Value, role: &str, name: &str) -> Vec<(u64, String)> {
    let mut out = Vec::new();
    let mut app = 0;
    for n in result["structuredContent"]["nodes"].as_array().unwrap() {
        if n["depth"] == 0 {
            app = n["pid"].as_u64().unwrap_or(0);
        }
        if n["role"] == role && n["name"] == name {
            out.push((app, n["ref"].as_str().unwrap().to_string()));
        }
    }
    out
}

/// The `--apps` entry `t.Zenity` (a zenity question), resolved as `serve` resolves it.
fn listed_zenity(session: &Session) -> Vec<handnode::rules::desktop_entry::DesktopEntry> {
    common::listed_app(
        &session.dir,
        "t.Zenity",
        "Question",
        "zenity --question \"--text=Listed app?\"",
        &session.env["PATH"],
    )
}

#[test]
fn an_apps_grant_presses_only_buttons_of_the_apps_it_opened() {
    let Some(session) = Session::start("apps_grant") else {
        return;
    };
    // The listed app, resolved from a desktop entry as `--apps` resolves it.
    let listed = listed_zenity(&session);
    let mut env = session.env.clone();
    env.remove("HOME");
    env.remove("LANG");
    let host = ToolHost::new(handnode::tools::ToolConfig {
        display_backend: DisplayBackend::X11,
        display_env: Some(env),
        display_probe_ttl: Duration::ZERO,
        apps: listed,
        ..handnode::tools::ToolConfig::default()
    })
    .unwrap();
    // Another zenity, called "zenity" like the listed one: the name proves nothing.
    let mut stranger = session.zenity(&["--question", "--text=Not listed?"]);
    let opened = ok(call_as(
        &host,
        Profile::Apps,
        "app_open",
        json!({"app": "t.Zenity"}),
    ));
    let pid = opened["structuredContent"]["pid"].as_u64().unwrap();
    let snap = snapshot_until(&host, json!({"app": "zenity"}), |v| {
        let no = refs_by_app(v, "push button", "No");
        no.iter().any(|(p, _)| *p == pid) && no.iter().any(|(p, _)| *p == stranger.pid() as u64)
    });
    let of = |who: u64, name: &str| {
        refs_by_app(&snap, "push button", name)
            .into_iter()
            .find(|(p, _)| *p == who)
            .unwrap()
            .1
    };
    // The stranger's button is refused under apps, and the stranger keeps running.
    let err = tool_error(call_as(
        &host,
        Profile::Apps,
        "desktop_act",
        json!({"ref": of(stranger.pid() as u64, "No"), "action": "press"}),
    ));
    assert_eq!(err, "zenity is not an app this grant may drive");
    // The opened app's button works, and ends it.
    ok(call_as(
        &host,
        Profile::Apps,
        "desktop_act",
        json!({"ref": of(pid, "Yes"), "action": "press"}),
    ));
    assert!(
        wait_until(Duration::from_secs(20), || {
            std::fs::read_to_string(format!("/proc/{pid}/stat"))
                .map_or(true, |s| s[s.rfind(')').unwrap() + 2..].starts_with('Z'))
        }),
        "the opened app did not end after Yes"
    );
    assert!(
        stranger.wait(Duration::ZERO).is_none(),
        "the refused press reached the stranger"
    );
    // The refusal was the check's: under desktop the same ref presses.
    ok(call_as(
        &host,
        Profile::Desktop,
        "desktop_act",
        json!({"ref": of(stranger.pid() as u64, "No"), "action": "press"}),
    ));
    let status = stranger
        .wait(Duration::from_secs(20))
        .expect("the stranger ended after No");
    assert_eq!(status.code(), Some(1));
}

/// The same through a grant of a daemon (its cgroups, its grant-scoped refs and apps): the
/// agent's `app_open`, `desktop_snapshot` and `desktop_act` over the pod's socket.
#[test]
fn an_apps_grant_over_its_socket_drives_its_own_app_and_not_another() {
    let Some(session) = Session::start("apps_socket") else {
        return;
    };
    let listed = listed_zenity(&session);
    let mut env = session.env.clone();
    env.remove("HOME");
    env.remove("LANG");
    let d = common::TestDaemon::with("apps-socket", |c| {
        common::quiet_liveness(c);
        c.display_backend = DisplayBackend::X11;
        c.display_env = Some(env);
        c.apps = listed;
    });
    let pod = common::StubPod::start();
    let (grant, mut conn) = d.attached(&pod, "apps-e2e", "apps");
    conn.set_read_timeout(Duration::from_secs(60));
    let mut id = 0;
    let mut call = |name: &str, args: Value| {
        id += 1;
        conn.call_tool(json!(id), name, args)["result"].clone()
    };
    let mut stranger = session.zenity(&["--question", "--text=Not listed?"]);
    let opened = call("app_open", json!({"app": "t.Zenity"}));
    assert!(opened.get("isError").is_none(), "{opened}");
    let leader = opened["structuredContent"]["pid"].as_u64().unwrap() as u32;
    let deadline = Instant::now() + APPEAR;
    // The app runs inside the grant's wall (§21), beneath the `bwrap` leader.
    let mut app = None;
    let snap = loop {
        app = app.or_else(|| common::descendant_running(leader, "zenity"));
        let pid = app.map_or(0, u64::from);
        let snap = call("desktop_snapshot", json!({"app": "zenity"}));
        let no = if snap.get("isError").is_none() {
            refs_by_app(&snap, "push button", "No")
        } else {
            Vec::new()
        };
        if no.iter().any(|(p, _)| *p == pid) && no.iter().any(|(p, _)| *p == stranger.pid() as u64)
        {
            break snap;
        }
        assert!(
            Instant::now() < deadline,
            "both windows never appeared: {snap}"
        );
        std::thread::sleep(Duration::from_millis(50));
    };
    let pid = u64::from(app.expect("the app runs"));
    let of = |who: u64, name: &str| {
        refs_by_app(&snap, "push button", name)
            .into_iter()
            .find(|(p, _)| *p == who)
            .unwrap()
            .1
    };
    let refused = call(
        "desktop_act",
        json!({"ref": of(stranger.pid() as u64, "No"), "action": "press"}),
    );
    assert_eq!(refused["isError"], true, "{refused}");
    assert_eq!(text(&refused), "zenity is not an app this grant may drive");
    let pressed = call(
        "desktop_act",
        json!({"ref": of(pid, "Yes"), "action": "press"}),
    );
    assert!(pressed.get("isError").is_none(), "{pressed}");
    assert!(
        wait_until(Duration::from_secs(20), || {
            std::fs::read_to_string(format!("/proc/{pid}/stat"))
                .map_or(true, |s| s[s.rfind(')').unwrap() + 2..].starts_with('Z'))
        }),
        "the opened app did not end after Yes"
    );
    assert!(
        stranger.wait(Duration::ZERO).is_none(),
        "the refused press reached the stranger"
    );
    let (status, _) = d.call("DELETE", &format!("/attach/{grant}"), None);
    assert_eq!(status, 204);
}

#[test]
fn a_snapshot_after_the_accessibility_bus_died_connects_again() {
    let Some(session) = Session::start("bus_died") else {
        return;
    };
    let host = session.host();
    let _zenity = session.zenity(&["--question", "--text=again"]);
    // The display thread keeps its connection to the accessibility bus between calls.
    snapshot_until(&host, json!({"app": "zenity"}), |v| {
        find_ref(v, "push button", "Yes").is_some()
    });
    // The accessibility bus and its launcher (started by the session bus, in its process
    // group) go away under the kept connection.
    let group = session._bus.0.id().to_string();
    for which in ["at-spi-bus-launcher", "accessibility.conf"] {
        let killed = Command::new("pkill")
            .args(["-KILL", "-g", &group, "-f", which])
            .status()
            .unwrap();
        assert!(killed.success(), "no {which} in group {group}");
    }
    // The next call finds the connection broken and makes a new one (the session bus
    // starts a new accessibility bus), never answering with the dead connection's error.
    let out = call(&host, "desktop_snapshot", json!({}));
    let handnode::wire::mcp::ToolOutput::Result(v) = out else {
        panic!("not a result: {out:?}");
    };
    let t = v["content"][0]["text"].as_str().unwrap_or_default();
    assert!(!t.contains("D-Bus connection failed"), "{v}");
    snapshot_until(&host, json!({}), |_| true);
}
