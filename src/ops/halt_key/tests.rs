use super::*;

use std::io::Write as _;
use std::os::unix::fs::PermissionsExt as _;

use crate::base::evdev::{InputEvent, EV_KEY, EV_SYN};
use crate::base::testutil::TempDir;

/// Longest any wait here may take.
const WATCHDOG: Duration = Duration::from_secs(10);

/// A devices-file block of a keyboard with the example chord's keys.
fn block(node: &str, name: &str, sysfs: &str) -> String {
    format!(
        "I: Bus=0003 Vendor=046d Product=c31c Version=0110\nN: Name=\"{name}\"\nP: Phys=\nS: Sysfs={sysfs}\nU: Uniq=\nH: Handlers=sysrq kbd leds {node} \nB: PROP=0\nB: EV=120013\nB: KEY=1000000000007 ff9f207ac14057ff febeffdfffefffff fffffffffffffffe\nB: MSC=10\n\n"
    )
}

/// A fake input tree: `proc/bus/input/devices`, a FIFO per node standing for its device,
/// and `sys/class/input/<node>` links into `sys/devices/`.
struct Tree {
    dir: TempDir,
    devices: String,
}

impl Tree {
    fn new(tag: &str) -> Tree {
        let dir = TempDir::new(tag);
        std::fs::create_dir_all(dir.path(INPUT_DIR)).unwrap();
        std::fs::create_dir_all(dir.path("sys/class/input")).unwrap();
        let tree = Tree {
            dir,
            devices: String::new(),
        };
        tree.write_devices();
        tree
    }

    fn root(&self) -> PathBuf {
        self.dir.0.clone()
    }

    fn write_devices(&self) {
        self.dir.write(DEVICES_FILE, &self.devices);
    }

    /// A keyboard at `sysfs` (under `/devices/…`) as `node`, listed then made.
    fn add(&mut self, node: &str, name: &str, sysfs: &str) {
        self.devices.push_str(&block(node, name, sysfs));
        self.write_devices();
        self.sysfs(node, sysfs);
        self.fifo(node);
    }

    fn sysfs(&self, node: &str, sysfs: &str) {
        let target = format!("sys{sysfs}/{node}");
        std::fs::create_dir_all(self.dir.path(&target)).unwrap();
        let link = self.dir.path(&format!("sys/class/input/{node}"));
        let _ = std::fs::remove_file(&link);
        std::os::unix::fs::symlink(format!("../..{sysfs}/{node}"), link).unwrap();
    }

    fn fifo(&self, node: &str) {
        rustix::fs::mknodat(
            rustix::fs::CWD,
            self.dir.path(&format!("{INPUT_DIR}/{node}")),
            rustix::fs::FileType::Fifo,
            rustix::fs::Mode::from_raw_mode(0o600),
            0,
        )
        .unwrap();
    }

    /// The FIFO of `node`, opened for writing and reading: a write never waits for a
    /// reader, and what nobody read can be read back.
    fn keyboard(&self, node: &str) -> std::fs::File {
        std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(self.dir.path(&format!("{INPUT_DIR}/{node}")))
            .unwrap()
    }
}

/// The chord pressed, each key followed by a report, as a keyboard sends it.
fn chord_bytes(chord: &Chord) -> Vec<u8> {
    let mut out = Vec::new();
    for code in chord.press_codes() {
        for e in [
            InputEvent {
                kind: EV_KEY,
                code,
                value: 1,
            },
            InputEvent {
                kind: EV_SYN,
                code: 0,
                value: 0,
            },
        ] {
            out.extend(evdev::encode(e, EVENT_BYTES));
        }
    }
    out
}

fn release_bytes(chord: &Chord) -> Vec<u8> {
    chord
        .press_codes()
        .into_iter()
        .flat_map(|code| {
            evdev::encode(
                InputEvent {
                    kind: EV_KEY,
                    code,
                    value: 0,
                },
                EVENT_BYTES,
            )
        })
        .collect()
}

/// Bytes waiting unread in a FIFO opened by [`Tree::keyboard`].
fn unread(f: &std::fs::File) -> usize {
    let mut flags = rustix::fs::fcntl_getfl(f).unwrap();
    flags |= rustix::fs::OFlags::NONBLOCK;
    rustix::fs::fcntl_setfl(f, flags).unwrap();
    let mut buf = [0u8; 4096];
    let mut total = 0;
    loop {
        match rustix::io::read(f, &mut buf) {
            Ok(0) | Err(Errno::AGAIN) => return total,
            Ok(n) => total += n,
            Err(e) => panic!("{e}"),
        }
    }
}

fn start(root: PathBuf) -> (HaltKey, crossbeam_channel::Receiver<String>) {
    let (tx, rx) = crossbeam_channel::unbounded();
    let key = HaltKey::start(
        Settings {
            chord: Chord::example(),
            root,
            rescan: Duration::from_millis(20),
        },
        Box::new(move |device| {
            let _ = tx.send(device.to_string());
        }),
    )
    .unwrap();
    (key, rx)
}

fn wait_view(key: &HaltKey, what: &str, pred: impl Fn(&Value) -> bool) -> Value {
    crate::base::testutil::wait_for(|| pred(&key.view()), what);
    key.view()
}

fn watching(view: &Value, node: &str) -> bool {
    view["watching"]
        .as_array()
        .is_some_and(|l| l.iter().any(|w| w["node"] == node))
}

const USB: &str =
    "/devices/pci0000:00/0000:00:14.0/usb1/1-1/1-1:1.0/0003:046D:C31C.0001/input/input3";
const UINPUT: &str = "/devices/virtual/input/input7";

#[test]
fn the_chord_on_a_virtual_keyboard_is_never_read_and_on_a_physical_one_fires() {
    let mut tree = Tree::new("halt-key-fire");
    tree.add("event3", "Logitech USB Keyboard", USB);
    tree.add("event7", "ydotoold virtual device", UINPUT);
    let (key, fired) = start(tree.root());
    let chord = Chord::example();
    let mut virtual_kb = tree.keyboard("event7");
    virtual_kb.write_all(&chord_bytes(&chord)).unwrap();
    let mut physical = tree.keyboard("event3");
    physical.write_all(&chord_bytes(&chord)).unwrap();
    let device = fired.recv_timeout(WATCHDOG).expect("watchdog: no fire");
    assert_eq!(device, "\"Logitech USB Keyboard\" (event3)");
    // The virtual keyboard's chord is still in its pipe: nothing ever read it.
    assert_eq!(unread(&virtual_kb), chord_bytes(&chord).len());
    let view = key.view();
    assert!(
        watching(&view, "event3") && !watching(&view, "event7"),
        "{view}"
    );
    let ignored = &view["ignored"][0];
    assert_eq!(ignored["node"], "event7", "{view}");
    assert!(ignored["why"].as_str().unwrap().contains(UINPUT), "{view}");

    // Held: End's repeat fires nothing; released and pressed again, it fires again.
    let repeat = evdev::encode(
        InputEvent {
            kind: EV_KEY,
            code: 107,
            value: 2,
        },
        EVENT_BYTES,
    );
    physical.write_all(&repeat).unwrap();
    physical.write_all(&release_bytes(&chord)).unwrap();
    physical.write_all(&chord_bytes(&chord)).unwrap();
    assert_eq!(fired.recv_timeout(WATCHDOG).unwrap(), device);
    assert!(fired.try_recv().is_err(), "the repeat fired it");

    // Stopped promptly when dropped, though it waits with no timeout.
    let (done_tx, done) = crossbeam_channel::bounded(1);
    std::thread::spawn(move || {
        drop(key);
        let _ = done_tx.send(());
    });
    done.recv_timeout(WATCHDOG)
        .expect("watchdog: the watcher did not stop");
}

/// A name with line breaks can make up a block that says its own node is a physical
/// keyboard; the node's sysfs entry says otherwise, and it is not read.
#[test]
fn a_made_up_block_cannot_make_a_virtual_node_physical() {
    let mut tree = Tree::new("halt-key-forged");
    tree.add("event3", "Logitech USB Keyboard", USB);
    tree.add("event7", "x", UINPUT);
    tree.devices = tree.devices.replace(
        "N: Name=\"x\"",
        &format!(
            "N: Name=\"x\n\n{}N: Name=\"y\"",
            block("event7", "Forged Keyboard", "/devices/pci0000:00/usb9")
        ),
    );
    tree.write_devices();
    let (key, fired) = start(tree.root());
    let view = wait_view(&key, "the first look", |v| v["scans"] != 0);
    assert!(!watching(&view, "event7"), "{view}");
    let why: Vec<&str> = view["ignored"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|i| i["node"] == "event7")
        .filter_map(|i| i["why"].as_str())
        .collect();
    assert!(why.iter().any(|w| w.contains("software device")), "{view}");
    let mut forged = tree.keyboard("event7");
    forged.write_all(&chord_bytes(&Chord::example())).unwrap();
    tree.keyboard("event3")
        .write_all(&chord_bytes(&Chord::example()))
        .unwrap();
    assert!(fired.recv_timeout(WATCHDOG).unwrap().contains("event3"));
    assert_eq!(unread(&forged), chord_bytes(&Chord::example()).len());
}

#[test]
fn a_keyboard_plugged_in_later_is_watched() {
    let mut tree = Tree::new("halt-key-hotplug");
    let (key, fired) = start(tree.root());
    wait_view(&key, "the first look", |v| v["scans"] != 0);
    tree.add("event5", "Late Keyboard", USB);
    wait_view(&key, "event5 watched", |v| watching(v, "event5"));
    tree.keyboard("event5")
        .write_all(&chord_bytes(&Chord::example()))
        .unwrap();
    assert!(fired.recv_timeout(WATCHDOG).unwrap().contains("event5"));
}

#[test]
fn without_dev_input_the_keyboards_are_looked_for_on_the_timer() {
    let mut tree = Tree::new("halt-key-no-dir");
    std::fs::remove_dir(tree.dir.path(INPUT_DIR)).unwrap();
    let (key, fired) = start(tree.root());
    wait_view(&key, "a second look", |v| v["scans"].as_u64() > Some(1));
    std::fs::create_dir_all(tree.dir.path(INPUT_DIR)).unwrap();
    tree.add(
        "event2",
        "AT Translated Set 2 keyboard",
        "/devices/platform/i8042/serio0/input/input2",
    );
    wait_view(&key, "event2 watched", |v| watching(v, "event2"));
    tree.keyboard("event2")
        .write_all(&chord_bytes(&Chord::example()))
        .unwrap();
    assert!(fired.recv_timeout(WATCHDOG).unwrap().contains("event2"));
}

#[test]
fn a_panic_in_the_watcher_is_contained_and_it_starts_over() {
    let mut tree = Tree::new("halt-key-panic");
    tree.add("event3", "Logitech USB Keyboard", USB);
    let (tx, fired) = crossbeam_channel::unbounded();
    let calls = std::sync::atomic::AtomicU64::new(0);
    let before = faults::count(Site::HaltKey);
    let key = HaltKey::start(
        Settings {
            chord: Chord::example(),
            root: tree.root(),
            rescan: Duration::from_millis(20),
        },
        Box::new(move |device| {
            if calls.fetch_add(1, Ordering::SeqCst) == 0 {
                panic!("test: the first halt panics");
            }
            let _ = tx.send(device.to_string());
        }),
    )
    .unwrap();
    let mut kb = tree.keyboard("event3");
    kb.write_all(&chord_bytes(&Chord::example())).unwrap();
    crate::base::testutil::wait_for(
        || faults::count(Site::HaltKey) > before,
        "the watcher's panic counted",
    );
    // Started over: the keyboard is opened afresh and the chord works.
    kb.write_all(&release_bytes(&Chord::example())).unwrap();
    kb.write_all(&chord_bytes(&Chord::example())).unwrap();
    assert!(fired.recv_timeout(WATCHDOG).unwrap().contains("event3"));
    drop(key);
}

#[test]
fn nodes_that_are_not_physical_input_devices_are_refused() {
    let mut tree = Tree::new("halt-key-open");
    tree.add("event3", "kb", USB);
    assert!(open_physical(&tree.root(), "event3").is_ok());
    // Outside a test tree a stand-in is refused: only a character device is read.
    assert!(matches!(
        open_node(&tree.root(), "event3", false),
        Err(OpenError::NotPhysical(w)) if w.contains("not a character device")
    ));
    // A character device of another major (/dev/null, 1:3).
    let elsewhere = TempDir::new("halt-key-null");
    std::fs::create_dir_all(elsewhere.path("dev")).unwrap();
    std::os::unix::fs::symlink("/dev", elsewhere.path("dev/input")).unwrap();
    assert!(matches!(
        open_physical(&elsewhere.0, "null"),
        Err(OpenError::NotPhysical(w)) if w.contains("character device 1:3")
    ));
    // A link in place of the node is not followed.
    std::os::unix::fs::symlink("event3", tree.dir.path(&format!("{INPUT_DIR}/event9"))).unwrap();
    assert!(matches!(
        open_physical(&tree.root(), "event9"),
        Err(OpenError::NotPhysical(w)) if w.contains("symbolic link")
    ));
    // A node without a sysfs entry, or one under /devices/virtual.
    tree.fifo("event4");
    assert!(matches!(
        open_physical(&tree.root(), "event4"),
        Err(OpenError::NotPhysical(w)) if w.contains("cannot be read")
    ));
    tree.sysfs("event4", UINPUT);
    assert!(matches!(
        open_physical(&tree.root(), "event4"),
        Err(OpenError::NotPhysical(w)) if w.contains("software device")
    ));
    assert!(matches!(
        open_physical(&tree.root(), "event6"),
        Err(OpenError::Missing(_))
    ));
}

#[test]
fn the_survey_says_what_was_found_and_what_could_be_read() {
    let tree = Tree::new("halt-key-survey");
    assert!(matches!(
        survey(&tree.dir.path("nowhere"), &Chord::example()),
        Err(ListError::NoInputSubsystem(_))
    ));
    assert_eq!(survey(&tree.root(), &Chord::example()), Ok(Vec::new()));
    let mut tree = tree;
    tree.add("event3", "kb", USB);
    tree.add("event7", "uinput", UINPUT);
    tree.devices.push_str(&block("event8", "gone", USB));
    tree.write_devices();
    let found = survey(&tree.root(), &Chord::example()).unwrap();
    assert_eq!(found.len(), 3);
    assert_eq!(found[0].open, Some(Ok(())));
    assert!(matches!(found[1].verdict, Verdict::Virtual(_)) && found[1].open.is_none());
    assert!(matches!(&found[2].open, Some(Err(OpenError::Missing(_)))));
    if rustix::process::geteuid().is_root() {
        eprintln!("SKIPPED (the unreadable-node part): running as root, which reads every node");
        return;
    }
    let node = tree.dir.path(&format!("{INPUT_DIR}/event3"));
    std::fs::set_permissions(&node, std::fs::Permissions::from_mode(0o000)).unwrap();
    let found = survey(&tree.root(), &Chord::example()).unwrap();
    assert!(matches!(
        &found[0].open,
        Some(Err(OpenError::Denied { .. }))
    ));
}

#[test]
fn the_devices_file_is_bounded() {
    let tree = Tree::new("halt-key-bound");
    let at = " ".repeat(MAX_DEVICES_FILE_BYTES as usize);
    tree.dir.write(DEVICES_FILE, &at);
    assert_eq!(read_devices(&tree.root()), Ok(Vec::new()));
    tree.dir.write(DEVICES_FILE, &format!("{at} "));
    assert!(matches!(
        read_devices(&tree.root()),
        Err(ListError::Other(w)) if w.contains("larger than 1048576 bytes")
    ));
}
