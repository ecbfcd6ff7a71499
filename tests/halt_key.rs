//! `--halt-key` (contract §22) on a daemon started in-process: the chord pressed on a
//! virtual keyboard (its sysfs node under `/devices/virtual/`, as `uinput` makes one) does
//! nothing and is never even read; pressed on a physical one it halts everything — the
//! grant's processes gone, its socket closed 1000 `halted`, `POST /attach` 423 — and the
//! halt says the key did it. The keyboards are a fake input tree (`--input-root`'s test
//! hook): `proc/bus/input/devices`, a FIFO per `dev/input/eventN`, `sys/class/input` links.
//! Where the machine has `/dev/uinput`, a real virtual keyboard made through it presses the
//! chord too and nothing halts; without it the test says why it skipped.

mod common;

use std::io::{BufRead as _, Write as _};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use common::*;
use handnode::base::evdev::{self, Chord, InputEvent, EVENT_BYTES, EV_KEY, EV_SYN};
use serde_json::{json, Value};
use tungstenite::Message;

const USB: &str =
    "/devices/pci0000:00/0000:00:14.0/usb1/1-1/1-1:1.0/0003:046D:C31C.0001/input/input3";
const UINPUT: &str = "/devices/virtual/input/input7";

/// How long nothing may happen after a virtual keyboard pressed the chord (there is no
/// event to wait for: the daemon never opens that device).
const QUIET: Duration = Duration::from_millis(500);

/// A devices-file block of a keyboard that has the example chord's keys.
fn block(node: &str, name: &str, sysfs: &str) -> String {
    format!(
        "I: Bus=0003 Vendor=046d Product=c31c Version=0110\nN: Name=\"{name}\"\nP: Phys=\n\
         S: Sysfs={sysfs}\nU: Uniq=\nH: Handlers=sysrq kbd leds {node} \nB: PROP=0\n\
         B: EV=120013\nB: KEY=1000000000007 ff9f207ac14057ff febeffdfffefffff fffffffffffffffe\n\
         B: MSC=10\n\n"
    )
}

/// A fake `/` holding two keyboards: `event3` on USB and `event7` made by uinput.
fn input_tree(root: &Path) {
    let mut devices = String::new();
    for (node, name, sysfs) in [
        ("event3", "Logitech USB Keyboard", USB),
        ("event7", "ydotoold virtual device", UINPUT),
    ] {
        devices.push_str(&block(node, name, sysfs));
        std::fs::create_dir_all(root.join(format!("sys{sysfs}/{node}"))).unwrap();
        std::fs::create_dir_all(root.join("sys/class/input")).unwrap();
        std::os::unix::fs::symlink(
            format!("../..{sysfs}/{node}"),
            root.join(format!("sys/class/input/{node}")),
        )
        .unwrap();
        std::fs::create_dir_all(root.join("dev/input")).unwrap();
        rustix::fs::mknodat(
            rustix::fs::CWD,
            root.join(format!("dev/input/{node}")),
            rustix::fs::FileType::Fifo,
            rustix::fs::Mode::from_raw_mode(0o600),
            0,
        )
        .unwrap();
    }
    std::fs::create_dir_all(root.join("proc/bus/input")).unwrap();
    std::fs::write(root.join("proc/bus/input/devices"), devices).unwrap();
}

/// A fake keyboard's FIFO opened both ways: a write never waits for a reader, and what
/// nobody read stays there to be counted.
fn keyboard(root: &Path, node: &str) -> std::fs::File {
    std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(root.join(format!("dev/input/{node}")))
        .unwrap()
}

/// The chord pressed as a keyboard sends it: each key down, then a report.
fn chord_bytes(chord: &Chord) -> Vec<u8> {
    let mut out = Vec::new();
    for code in chord.press_codes() {
        for (kind, code, value) in [(EV_KEY, code, 1), (EV_SYN, 0, 0)] {
            out.extend(evdev::encode(InputEvent { kind, code, value }, EVENT_BYTES));
        }
    }
    out
}

/// Bytes waiting unread in a FIFO from [`keyboard`].
fn unread(f: &std::fs::File) -> usize {
    let flags = rustix::fs::fcntl_getfl(f).unwrap() | rustix::fs::OFlags::NONBLOCK;
    rustix::fs::fcntl_setfl(f, flags).unwrap();
    let mut buf = [0u8; 4096];
    let mut total = 0;
    loop {
        match rustix::io::read(f, &mut buf) {
            Ok(0) | Err(rustix::io::Errno::AGAIN) => return total,
            Ok(n) => total += n,
            Err(e) => panic!("{e}"),
        }
    }
}

fn watching(view: &Value, node: &str) -> bool {
    view["watching"]
        .as_array()
        .is_some_and(|l| l.iter().any(|w| w["node"] == node))
}

fn ignored(view: &Value, node: &str) -> bool {
    view["ignored"]
        .as_array()
        .is_some_and(|l| l.iter().any(|w| w["node"] == node))
}

/// Pids whose command line carries `marker`.
fn marked(marker: &str) -> Vec<u32> {
    let mut pids = Vec::new();
    for entry in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        let cmdline = std::fs::read(entry.path().join("cmdline")).unwrap_or_default();
        if String::from_utf8_lossy(&cmdline).contains(marker) {
            pids.push(pid);
        }
    }
    pids
}

/// The close frame's code and reason, skipping anything before it.
fn close_of(conn: &mut PodConn) -> (u16, String) {
    loop {
        match conn.ws.read() {
            Ok(Message::Close(f)) => {
                return f.map_or((1005, String::new()), |f| {
                    (u16::from(f.code), f.reason.to_string())
                })
            }
            Ok(_) => continue,
            Err(e) => panic!("watchdog or error before the close: {e}"),
        }
    }
}

fn key_daemon(tag: &str, root: PathBuf) -> TestDaemon {
    TestDaemon::with(tag, |c| {
        quiet_liveness(c);
        c.halt_key = Some(Chord::example());
        c.input_root = root;
        c.timing.halt_key_rescan = Duration::from_millis(20);
    })
}

fn view(d: &TestDaemon) -> Value {
    d.daemon
        .as_ref()
        .unwrap()
        .halt_key_view()
        .expect("--halt-key is on")
}

#[test]
fn the_chord_from_a_virtual_keyboard_does_nothing_and_from_a_physical_one_halts_everything() {
    let root = temp_dir("halt-key-root");
    input_tree(&root);
    let pod = StubPod::start();
    let d = key_daemon("halt-key", root.clone());
    let (grant, mut conn) = d.attached(&pod, "laptop", "desktop");
    let marker = format!("hn-halt-key-{}", std::process::id());
    let job = conn.call_tool(
        json!("j"),
        "bash_start",
        json!({"command": format!("exec -a {marker} sleep 300")}),
    );
    assert_eq!(result(&job)["isError"], false, "{job}");
    poll_until(
        || marked(&marker),
        |p| !p.is_empty(),
        |p| format!("watchdog: the job never ran: {p:?}"),
    );
    let seen = poll_until(
        || view(&d),
        |v| watching(v, "event3") && ignored(v, "event7"),
        |v| format!("watchdog: the keyboards were never sorted: {v}"),
    );
    assert!(!watching(&seen, "event7"), "{seen}");

    let chord = Chord::example();
    let mut virtual_kb = keyboard(&root, "event7");
    virtual_kb.write_all(&chord_bytes(&chord)).unwrap();
    // Not halted, and not because it is slow: the virtual keyboard's bytes are never read.
    assert_eq!(d.call("GET", "/halt", None).1["halted"], false);

    let mut physical = keyboard(&root, "event3");
    physical.write_all(&chord_bytes(&chord)).unwrap();
    let (code, reason) = close_of(&mut conn);
    assert_eq!((code, reason.as_str()), (1000, "halted"));
    let (_, halt) = d.call("GET", "/halt", None);
    assert_eq!(halt["halted"], true, "{halt}");
    assert_eq!(halt["by"], "halt-key", "{halt}");
    assert_eq!(
        halt["reason"],
        format!("halt key {chord} pressed on the box's keyboard"),
        "{halt}"
    );
    poll_until(
        || marked(&marker),
        |p| p.is_empty(),
        |p| format!("watchdog: the halt left the job running: {p:?}"),
    );
    poll_until(
        || d.grant(&grant),
        |g| g["state"] == "halted",
        |g| format!("watchdog: the grant never halted: {g}"),
    );
    let (status, v) = d.call(
        "POST",
        "/attach",
        Some(&attach_body(&pod, "new", "observe")),
    );
    assert_eq!(status, 423, "{v}");
    assert_eq!(unread(&virtual_kb), chord_bytes(&chord).len());
    // The physical keyboard's chord was read, all of it.
    assert_eq!(unread(&physical), 0);

    let (status, v) = d.call("POST", "/resume", None);
    assert_eq!((status, v["halted"].as_bool()), (200, Some(false)), "{v}");
    let (_, mut again) = pod.next_session();
    let r = again.call_tool(json!("after"), "bash", json!({"command": "echo back"}));
    assert_eq!(result(&r)["isError"], false, "{r}");
}

/// Python (stdlib only: `fcntl.ioctl`) making a uinput keyboard with the chord's keys. It
/// prints `ready` once the device exists, presses the chord on a line `press` and prints
/// `pressed`, and removes the device at end of input.
const UINPUT_KEYBOARD: &str = r#"
import fcntl, os, struct, sys
codes = [int(c) for c in sys.argv[1].split(",")]
fd = os.open("/dev/uinput", os.O_WRONLY | os.O_NONBLOCK)
fcntl.ioctl(fd, 0x40045564, 1)            # UI_SET_EVBIT EV_KEY
for c in codes:
    fcntl.ioctl(fd, 0x40045565, c)        # UI_SET_KEYBIT
name = b"handnode test virtual keyboard"
dev = struct.pack("80sHHHHi", name, 3, 0x1234, 0x5678, 1, 0) + bytes(4 * 64 * 4)
os.write(fd, dev)
fcntl.ioctl(fd, 0x5501)                   # UI_DEV_CREATE
print("ready", flush=True)
def ev(t, c, v):
    os.write(fd, struct.pack("llHHi", 0, 0, t, c, v))
for line in sys.stdin:
    if line.strip() == "press":
        for c in codes:
            ev(1, c, 1); ev(0, 0, 0)
        for c in codes:
            ev(1, c, 0); ev(0, 0, 0)
        print("pressed", flush=True)
fcntl.ioctl(fd, 0x5502)                   # UI_DEV_DESTROY
"#;

#[test]
fn a_uinput_keyboard_pressing_the_chord_halts_nothing() {
    if let Err(e) = std::fs::metadata("/dev/uinput") {
        let misc = std::fs::read_to_string("/proc/misc").unwrap_or_default();
        eprintln!(
            "skipped: /dev/uinput: {e}; /proc/misc {} uinput (the kernel has no uinput \
             module loaded or built in), so no virtual keyboard can be made here; the fake \
             tree's virtual keyboard is tested above",
            if misc.contains("uinput") {
                "lists"
            } else {
                "does not list"
            }
        );
        return;
    }
    let chord = Chord::example();
    let codes: Vec<String> = chord.press_codes().iter().map(u16::to_string).collect();
    let pod = StubPod::start();
    let d = key_daemon("halt-key-uinput", PathBuf::from("/"));
    let (_grant, _conn) = d.attached(&pod, "laptop", "desktop");
    let mut kb = Command::new("python3")
        .args(["-c", UINPUT_KEYBOARD, &codes.join(",")])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("python3 runs");
    let mut lines = std::io::BufReader::new(kb.stdout.take().unwrap()).lines();
    let mut stdin = kb.stdin.take().unwrap();
    assert_eq!(lines.next().unwrap().unwrap(), "ready");
    // The daemon has looked at the new device and set it aside as virtual.
    let seen = poll_until(
        || view(&d),
        |v| {
            v["ignored"].as_array().is_some_and(|l| {
                l.iter().any(|w| {
                    w["name"]
                        .as_str()
                        .is_some_and(|n| n.contains("handnode test virtual keyboard"))
                })
            })
        },
        |v| format!("watchdog: the uinput keyboard was never looked at: {v}"),
    );
    assert!(
        !seen["watching"]
            .to_string()
            .contains("handnode test virtual"),
        "{seen}"
    );
    writeln!(stdin, "press").unwrap();
    assert_eq!(lines.next().unwrap().unwrap(), "pressed");
    std::thread::sleep(QUIET);
    let (_, halt) = d.call("GET", "/halt", None);
    assert_eq!(
        halt["halted"], false,
        "a uinput keyboard halted the box: {halt}"
    );
    drop(stdin);
    let _ = kb.wait();
}
