//! `--halt-key` (contract §22): the thread that reads the box's physical keyboards through
//! evdev and halts everything (`Registry::halt`, as `POST /halt` does) when the chord is
//! down on one of them. Owns finding the keyboards (`proc/bus/input/devices`, then each
//! node confirmed physical on its opened descriptor through sysfs), reading
//! `dev/input/eventN` as a file of `struct input_event` (non-blocking, epoll with a wake
//! handle; no ioctl, never `EVIOCGRAB`, so the keyboard types as usual), hotplug (inotify
//! on `dev/input`, else a rescan every `Timing::halt_key_rescan`), the log of what it
//! watches and ignores, and [`survey`], what `doctor` reports. All paths are under
//! `Config::input_root` (`/`; tests point it at a fake tree).
//!
//! What counts as physical: a device the kernel placed under `/sys/devices/` but not
//! `/sys/devices/virtual/`, which is where every `uinput` device goes (and `uhid`'s, so a
//! Bluetooth keyboard BlueZ runs through uhid counts as virtual too). Its maker cannot
//! choose that place, unlike its name, bus or keys. XTEST input never reaches evdev at all:
//! it exists only inside the X server. The chord counts on one device: all its keys down
//! on that keyboard (either side of a modifier), in any order; it fires once and re-arms
//! when one of its keys is released.

use std::collections::{BTreeMap, BTreeSet};
use std::io::Read as _;
use std::mem::MaybeUninit;
use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rustix::fs::inotify;
use rustix::io::Errno;
use serde_json::{json, Value};

use crate::base::evdev::{self, Chord, ChordState, InputDevice, Verdict, EVENT_BYTES};
use crate::base::wake::{Poller, Waker, WAKE_KEY};
use crate::faults::{self, Site};

/// The kernel's list of input devices, under the input root.
pub const DEVICES_FILE: &str = "proc/bus/input/devices";
/// Where the event nodes are, under the input root.
pub const INPUT_DIR: &str = "dev/input";
/// Largest devices file read (bytes); a block is about 400 bytes, so thousands of devices.
pub const MAX_DEVICES_FILE_BYTES: u64 = 1 << 20;
/// Who a halt by the key is recorded as (`GET /halt`'s `by`).
pub const BY: &str = "halt-key";
/// Reads of one device per wake (each up to [`READ_EVENTS`] events) before the others get
/// their turn: a device that never stops talking cannot hold the thread.
const READS_PER_WAKE: usize = 16;
/// Events one read takes.
const READ_EVENTS: usize = 64;
/// Poller key of the inotify descriptor; devices count up from 1.
const INOTIFY_KEY: u64 = 0;
/// Longest device name written to the log (bytes): the maker of a device chooses it.
const MAX_NAME_LOG_BYTES: usize = 80;

/// The halt's reason when the key halts.
pub fn reason(chord: &Chord) -> String {
    format!("halt key {chord} pressed on the box's keyboard")
}

/// What the watcher needs.
#[derive(Clone, Debug)]
pub struct Settings {
    pub chord: Chord,
    /// `/` (`Config::input_root`).
    pub root: PathBuf,
    /// How often to look for keyboards again while `dev/input` cannot be watched.
    pub rescan: Duration,
}

/// Why the devices file gave no list.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ListError {
    /// It does not exist: the kernel has no input subsystem (a headless VM, a container
    /// without `/proc/bus/input`).
    NoInputSubsystem(PathBuf),
    Other(String),
}

impl std::fmt::Display for ListError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ListError::NoInputSubsystem(path) => write!(
                f,
                "{} does not exist: this kernel has no input devices (a headless VM or a container)",
                path.display()
            ),
            ListError::Other(why) => f.write_str(why),
        }
    }
}

/// The devices file under `root`, parsed.
pub fn read_devices(root: &Path) -> Result<Vec<InputDevice>, ListError> {
    let path = root.join(DEVICES_FILE);
    let file = match std::fs::File::open(&path) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return Err(ListError::NoInputSubsystem(path))
        }
        Err(e) => {
            return Err(ListError::Other(format!(
                "cannot read {}: {e}",
                path.display()
            )))
        }
    };
    let mut bytes = Vec::new();
    file.take(MAX_DEVICES_FILE_BYTES + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| ListError::Other(format!("cannot read {}: {e}", path.display())))?;
    if bytes.len() as u64 > MAX_DEVICES_FILE_BYTES {
        return Err(ListError::Other(format!(
            "{} is larger than {MAX_DEVICES_FILE_BYTES} bytes",
            path.display()
        )));
    }
    Ok(evdev::parse_devices(&String::from_utf8_lossy(&bytes)))
}

/// Why a keyboard's node could not be watched.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum OpenError {
    /// The device is listed but its node is not there (a container without the box's
    /// `/dev/input`).
    Missing(PathBuf),
    /// This user may not read it; the node's owner, group and mode.
    Denied {
        path: PathBuf,
        owner: String,
    },
    /// Its descriptor is not a physical input device after all.
    NotPhysical(String),
    Other(String),
}

impl std::fmt::Display for OpenError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            OpenError::Missing(path) => write!(f, "{} does not exist", path.display()),
            OpenError::Denied { path, owner } => {
                write!(
                    f,
                    "{} ({owner}) may not be read by this user",
                    path.display()
                )
            }
            OpenError::NotPhysical(why) => write!(f, "not a physical device: {why}"),
            OpenError::Other(why) => f.write_str(why),
        }
    }
}

/// `user:group mode` of `path`, for a refusal.
fn owner_of(path: &Path) -> String {
    use std::os::unix::fs::MetadataExt;
    match std::fs::symlink_metadata(path) {
        Ok(m) => format!(
            "{}:{} {:04o}",
            if m.uid() == 0 {
                "root".to_string()
            } else {
                m.uid().to_string()
            },
            group_name(m.gid()),
            m.mode() & 0o7777
        ),
        Err(_) => "owner unknown".into(),
    }
}

/// The name of group `gid` in `/etc/group`, else the number.
pub fn group_name(gid: u32) -> String {
    std::fs::read_to_string("/etc/group")
        .ok()
        .and_then(|groups| {
            groups.lines().find_map(|l| {
                let mut f = l.split(':');
                let name = f.next()?;
                (f.nth(1)? == gid.to_string()).then(|| name.to_string())
            })
        })
        .unwrap_or_else(|| gid.to_string())
}

/// Open `dev/input/<node>` under `root` for reading (non-blocking, never through a link)
/// and confirm on the descriptor that it is a physical input device: a character device of
/// the input major whose `sys/dev/char/MAJ:MIN` resolves under `/sys/devices/` and not
/// `/sys/devices/virtual/`. The devices file cannot be trusted for that: a device's name
/// may carry lines that look like the kernel's. Under a root other than `/` (tests only), a
/// node that is not a character device stands for one, and `sys/class/input/<node>` for
/// its sysfs entry.
pub fn open_physical(root: &Path, node: &str) -> Result<OwnedFd, OpenError> {
    open_node(root, node, root != Path::new("/"))
}

/// [`open_physical`]; `stand_ins`: a node that is not a character device is taken as one
/// (test trees).
fn open_node(root: &Path, node: &str, stand_ins: bool) -> Result<OwnedFd, OpenError> {
    use rustix::fs::{FileType, Mode, OFlags};
    let path = root.join(INPUT_DIR).join(node);
    let flags =
        OFlags::RDONLY | OFlags::NONBLOCK | OFlags::CLOEXEC | OFlags::NOCTTY | OFlags::NOFOLLOW;
    let fd = match rustix::fs::open(&path, flags, Mode::empty()) {
        Ok(fd) => fd,
        Err(Errno::NOENT) => return Err(OpenError::Missing(path)),
        Err(Errno::ACCESS) | Err(Errno::PERM) => {
            let owner = owner_of(&path);
            return Err(OpenError::Denied { path, owner });
        }
        Err(Errno::LOOP) => {
            return Err(OpenError::NotPhysical(format!(
                "{} is a symbolic link",
                path.display()
            )))
        }
        Err(e) => {
            return Err(OpenError::Other(format!(
                "cannot open {}: {e}",
                path.display()
            )))
        }
    };
    let st = rustix::fs::fstat(&fd)
        .map_err(|e| OpenError::Other(format!("cannot stat {}: {e}", path.display())))?;
    let link = match FileType::from_raw_mode(st.st_mode) {
        FileType::CharacterDevice => {
            let (major, minor) = (rustix::fs::major(st.st_rdev), rustix::fs::minor(st.st_rdev));
            if major != evdev::INPUT_MAJOR {
                return Err(OpenError::NotPhysical(format!(
                    "{} is character device {major}:{minor}, not an input device",
                    path.display()
                )));
            }
            root.join(format!("sys/dev/char/{major}:{minor}"))
        }
        _ if !stand_ins => {
            return Err(OpenError::NotPhysical(format!(
                "{} is not a character device",
                path.display()
            )))
        }
        _ => root.join("sys/class/input").join(node),
    };
    let resolved = std::fs::canonicalize(&link).map_err(|e| {
        OpenError::NotPhysical(format!(
            "its sysfs entry {} cannot be read: {e}",
            link.display()
        ))
    })?;
    let root = std::fs::canonicalize(root).unwrap_or_else(|_| root.to_path_buf());
    let inside = resolved
        .strip_prefix(&root)
        .map(|p| format!("/{}", p.display()))
        .unwrap_or_else(|_| resolved.display().to_string());
    evdev::sysfs_is_physical(&inside, node).map_err(OpenError::NotPhysical)?;
    Ok(fd)
}

/// One listed device as `doctor` reports it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Found {
    pub node: Option<String>,
    pub name: String,
    pub verdict: Verdict,
    /// For a [`Verdict::Watch`] device: whether its node opened and proved physical.
    pub open: Option<Result<(), OpenError>>,
}

/// What the watcher would do here for `chord`, without keeping anything open.
pub fn survey(root: &Path, chord: &Chord) -> Result<Vec<Found>, ListError> {
    let devices = read_devices(root)?;
    Ok(devices
        .iter()
        .map(|d| {
            let verdict = evdev::judge(d, chord);
            let node = d.event_node().map(String::from);
            let open = match (&verdict, &node) {
                (Verdict::Watch, Some(n)) => Some(open_physical(root, n).map(drop)),
                _ => None,
            };
            Found {
                node,
                name: d.name.clone(),
                verdict,
                open,
            }
        })
        .collect())
}

/// A watched keyboard.
struct Opened {
    node: String,
    name: String,
    fd: OwnedFd,
    state: ChordState,
    /// Bytes of an event not yet whole (a read ends mid-record only on a pipe).
    partial: Vec<u8>,
}

/// Set between the watcher and its handle.
struct Shared {
    stopping: AtomicBool,
    /// What is watched and ignored now, for tests (`HaltKey::view`).
    view: Mutex<Value>,
}

/// The halt key's thread; stopped (promptly, through its wake handle) when dropped.
pub struct HaltKey {
    shared: Arc<Shared>,
    waker: Arc<Waker>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl std::fmt::Debug for HaltKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HaltKey").finish_non_exhaustive()
    }
}

type OnChord = Box<dyn Fn(&str) + Send>;

impl HaltKey {
    /// Start watching; `on_chord` is called with the keyboard's name each time the chord
    /// goes down on one. A panic in the thread (`on_chord`'s too) is caught and counted,
    /// and the watcher starts over after `settings.rescan`.
    pub fn start(settings: Settings, on_chord: OnChord) -> std::io::Result<HaltKey> {
        let poller = Poller::new()?;
        let waker = poller.waker();
        let shared = Arc::new(Shared {
            stopping: AtomicBool::new(false),
            view: Mutex::new(json!({"watching": [], "ignored": [], "scans": 0})),
        });
        let for_thread = Arc::clone(&shared);
        let thread = std::thread::Builder::new()
            .name("halt-key".into())
            .spawn(move || supervise(&settings, &poller, &for_thread, &on_chord))?;
        Ok(HaltKey {
            shared,
            waker,
            thread: Some(thread),
        })
    }

    /// Start watching for the daemon: the chord halts through `registry` as `BY`.
    pub fn for_registry(
        settings: Settings,
        registry: Arc<crate::grants::Registry>,
    ) -> std::io::Result<HaltKey> {
        let chord = settings.chord.clone();
        HaltKey::start(
            settings,
            Box::new(move |device| {
                log::warn!("halt key {chord} pressed on {device}: halting");
                match registry.halt(Some(reason(&chord)), BY) {
                    Ok(true) => {}
                    Ok(false) => log::info!("halt key {chord}: already halted"),
                    Err(e) => log::error!(
                        "halt key {chord}: the halt could not be kept in the state dir ({e}); nothing was halted"
                    ),
                }
            }),
        )
    }

    /// `{"watching":[{"node","name"}],"ignored":[{"node","name","why"}],"scans":N}`: what
    /// the last look found (`scans` counts the looks).
    pub fn view(&self) -> Value {
        self.shared
            .view
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }
}

impl Drop for HaltKey {
    fn drop(&mut self) {
        self.shared.stopping.store(true, Ordering::SeqCst);
        self.waker.wake();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// The thread: the watcher, started over after a panic (what it held is closed as the
/// panic unwinds, so the next one opens the keyboards afresh).
fn supervise(settings: &Settings, poller: &Poller, shared: &Shared, on_chord: &OnChord) {
    loop {
        let run = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            Watcher::new(settings, poller, shared, on_chord).run()
        }));
        let Err(payload) = run else { return };
        faults::caught(Site::HaltKey, "the halt key watcher", payload.as_ref());
        if shared.stopping.load(Ordering::SeqCst) {
            return;
        }
        // Not at once: a panic that comes back every time would fill the log.
        let _ = poller.wait(Some(settings.rescan));
        if shared.stopping.load(Ordering::SeqCst) {
            return;
        }
    }
}

struct Watcher<'a> {
    settings: &'a Settings,
    poller: &'a Poller,
    shared: &'a Shared,
    on_chord: &'a OnChord,
    inotify: Option<OwnedFd>,
    open: BTreeMap<u64, Opened>,
    next_key: u64,
    /// The last line logged per device (node or name), so a rescan logs only changes.
    logged: BTreeMap<String, String>,
    summary: Option<String>,
    scans: u64,
}

impl<'a> Watcher<'a> {
    fn new(
        settings: &'a Settings,
        poller: &'a Poller,
        shared: &'a Shared,
        on_chord: &'a OnChord,
    ) -> Self {
        Watcher {
            settings,
            poller,
            shared,
            on_chord,
            inotify: None,
            open: BTreeMap::new(),
            next_key: INOTIFY_KEY + 1,
            logged: BTreeMap::new(),
            summary: None,
            scans: 0,
        }
    }

    fn stopping(&self) -> bool {
        self.shared.stopping.load(Ordering::SeqCst)
    }

    fn run(&mut self) {
        self.watch_dir();
        self.scan();
        while !self.stopping() {
            // Without inotify on dev/input, the keyboards are looked for on a timer.
            let timeout = self.inotify.is_none().then_some(self.settings.rescan);
            let ready = match self.poller.wait(timeout) {
                Ok(r) => r,
                Err(e) => {
                    log::error!("halt key: waiting on the keyboards failed ({e}); the halt key is off until handnode restarts");
                    return;
                }
            };
            if self.stopping() {
                return;
            }
            let mut rescan = ready.is_empty();
            for r in ready {
                match r.key {
                    WAKE_KEY => {}
                    INOTIFY_KEY => {
                        self.drain_inotify();
                        rescan = true;
                    }
                    key => self.read(key),
                }
            }
            if rescan {
                self.watch_dir();
                self.scan();
            }
        }
    }

    /// Watch `dev/input` for nodes coming, going and changing mode, if it is there.
    fn watch_dir(&mut self) {
        if self.inotify.is_some() {
            return;
        }
        let dir = self.settings.root.join(INPUT_DIR);
        let watched = inotify::init(inotify::CreateFlags::CLOEXEC | inotify::CreateFlags::NONBLOCK)
            .and_then(|fd| {
                use inotify::WatchFlags as W;
                let flags = W::CREATE
                    | W::DELETE
                    | W::ATTRIB
                    | W::MOVED_TO
                    | W::MOVED_FROM
                    | W::DELETE_SELF
                    | W::MOVE_SELF
                    | W::ONLYDIR;
                inotify::add_watch(&fd, &dir, flags)?;
                Ok(fd)
            });
        match watched {
            Ok(fd) => match self.poller.add(&fd, INOTIFY_KEY, true, false) {
                Ok(()) => self.inotify = Some(fd),
                Err(e) => log::warn!(
                    "halt key: cannot wait on inotify ({e}); looking for keyboards every {:?}",
                    self.settings.rescan
                ),
            },
            Err(e) => log::debug!(
                "halt key: cannot watch {} ({e}); looking for keyboards every {:?}",
                dir.display(),
                self.settings.rescan
            ),
        }
    }

    /// Read what inotify has; it only says "look again". A watch the kernel dropped (the
    /// dir went) falls back to the timer.
    fn drain_inotify(&mut self) {
        let Some(fd) = &self.inotify else { return };
        let mut buf = [MaybeUninit::<u8>::uninit(); 4096];
        let mut reader = inotify::Reader::new(fd, &mut buf);
        let mut lost = false;
        loop {
            match reader.next() {
                Ok(ev) => {
                    use inotify::ReadFlags as R;
                    if ev
                        .events()
                        .intersects(R::IGNORED | R::DELETE_SELF | R::MOVE_SELF)
                    {
                        lost = true;
                    }
                }
                Err(Errno::AGAIN) => break,
                Err(Errno::INTR) => continue,
                Err(_) => {
                    lost = true;
                    break;
                }
            }
        }
        if lost {
            self.inotify = None;
        }
    }

    fn log_change(&mut self, who: &str, level: log::Level, line: String) {
        if self.logged.get(who) != Some(&line) {
            log::log!(level, "{line}");
            self.logged.insert(who.to_string(), line);
        }
    }

    /// Look at the devices file again: open the physical keyboards not yet open, close
    /// the ones that are gone, log what changed.
    fn scan(&mut self) {
        let chord = self.settings.chord.clone();
        let root = self.settings.root.clone();
        self.scans += 1;
        let (devices, listing) = match read_devices(&root) {
            Ok(d) => (d, None),
            Err(e) => (Vec::new(), Some(e)),
        };
        let mut want: BTreeMap<String, String> = BTreeMap::new();
        let mut ignored: Vec<Value> = Vec::new();
        let mut seen: BTreeSet<String> = BTreeSet::new();
        for dev in &devices {
            let node = dev.event_node().unwrap_or("-").to_string();
            let name = crate::base::label::cut(&dev.name, MAX_NAME_LOG_BYTES).into_owned();
            let who = format!("{node} {name}");
            seen.insert(who.clone());
            match evdev::judge(dev, &chord) {
                Verdict::Watch => {
                    want.entry(node).or_insert(dev.name.clone());
                }
                Verdict::Virtual(why) => {
                    self.log_change(
                        &who,
                        log::Level::Info,
                        format!("halt key: ignoring {name:?}: {why}; a software device can neither press nor block the halt key"),
                    );
                    ignored.push(json!({"node": node, "name": dev.name, "why": why}));
                }
                Verdict::NotKeyboard(why) => {
                    self.log_change(
                        &who,
                        log::Level::Debug,
                        format!("halt key: not watching {name:?}: {why}"),
                    );
                }
            }
        }
        // Gone from the list, or no longer a keyboard to watch: closed (and so out of the
        // epoll set).
        self.open.retain(|_, o| want.contains_key(&o.node));
        let open_nodes: BTreeSet<String> = self.open.values().map(|o| o.node.clone()).collect();
        let mut trouble: Vec<String> = Vec::new();
        for (node, raw_name) in want {
            let name = crate::base::label::cut(&raw_name, MAX_NAME_LOG_BYTES).into_owned();
            let who = format!("{node} {name}");
            if open_nodes.contains(&node) {
                continue;
            }
            match open_physical(&root, &node) {
                Ok(fd) => {
                    let key = self.next_key;
                    self.next_key += 1;
                    if let Err(e) = self.poller.add(&fd, key, true, false) {
                        log::warn!("halt key: cannot wait on {node} ({e})");
                        continue;
                    }
                    self.log_change(
                        &who,
                        log::Level::Info,
                        format!("halt key {chord}: watching {name:?} ({node})"),
                    );
                    self.open.insert(
                        key,
                        Opened {
                            node,
                            name: raw_name,
                            fd,
                            state: ChordState::default(),
                            partial: Vec::new(),
                        },
                    );
                }
                Err(OpenError::NotPhysical(why)) => {
                    self.log_change(
                        &who,
                        log::Level::Info,
                        format!(
                            "halt key: ignoring {name:?} ({node}): not a physical device: {why}"
                        ),
                    );
                    ignored.push(json!({"node": node, "name": raw_name, "why": why}));
                }
                Err(e) => {
                    self.log_change(
                        &who,
                        log::Level::Warn,
                        format!("halt key: cannot watch {name:?} ({node}): {e}"),
                    );
                    trouble.push(e.to_string());
                }
            }
        }
        self.logged.retain(|who, _| seen.contains(who));
        let watching: Vec<Value> = self
            .open
            .values()
            .map(|o| json!({"node": o.node, "name": o.name}))
            .collect();
        let summary = match (&listing, watching.len()) {
            (_, n) if n > 0 => format!("halt key {chord}: watching {n} keyboard(s)"),
            (Some(e), _) => format!("halt key {chord}: no keyboard to watch: {e}; halt with `handnode halt` or the console"),
            (None, _) if !trouble.is_empty() => format!(
                "halt key {chord}: no keyboard can be read ({}); `handnode doctor --halt-key {chord}` says how to allow it",
                trouble.join("; ")
            ),
            (None, _) if devices.is_empty() => format!("halt key {chord}: the kernel lists no input devices ({DEVICES_FILE} is empty: a headless VM or container?): no keyboard to press it on yet; one plugged in later is watched, and `handnode halt` and the console halt meanwhile"),
            (None, _) => format!("halt key {chord}: no physical keyboard with its keys is plugged in; one plugged in later is watched"),
        };
        if self.summary.as_ref() != Some(&summary) {
            if watching.is_empty() {
                log::warn!("{summary}");
            } else {
                log::info!("{summary}");
            }
            self.summary = Some(summary);
        }
        *self.shared.view.lock().unwrap_or_else(|e| e.into_inner()) =
            json!({"watching": watching, "ignored": ignored, "scans": self.scans});
    }

    /// Read what a keyboard has; fire when its chord went down; drop it when it is gone.
    fn read(&mut self, key: u64) {
        let chord = &self.settings.chord;
        let Some(o) = self.open.get_mut(&key) else {
            return;
        };
        let mut buf = [0u8; READ_EVENTS * 24];
        let mut fired = false;
        let mut gone = None;
        for _ in 0..READS_PER_WAKE {
            match rustix::io::read(&o.fd, &mut buf[..READ_EVENTS * EVENT_BYTES]) {
                Ok(0) => {
                    gone = Some("it closed".to_string());
                    break;
                }
                Ok(n) => {
                    o.partial.extend_from_slice(&buf[..n]);
                    let whole = o.partial.len() / EVENT_BYTES * EVENT_BYTES;
                    for record in o.partial[..whole].chunks_exact(EVENT_BYTES) {
                        if let Some(event) = evdev::decode(record) {
                            fired |= o.state.feed(chord, event);
                        }
                    }
                    o.partial.drain(..whole);
                }
                Err(Errno::AGAIN) => break,
                Err(Errno::INTR) => continue,
                // ENODEV: unplugged.
                Err(e) => {
                    gone = Some(e.to_string());
                    break;
                }
            }
        }
        let name = crate::base::label::cut(&o.name, MAX_NAME_LOG_BYTES).into_owned();
        let node = o.node.clone();
        if fired {
            (self.on_chord)(&format!("{name:?} ({node})"));
        }
        if let Some(why) = gone {
            self.open.remove(&key);
            self.logged.remove(&format!("{node} {name}"));
            log::info!("halt key: stopped watching {name:?} ({node}): {why}");
            let mut view = self.shared.view.lock().unwrap_or_else(|e| e.into_inner());
            if let Some(list) = view["watching"].as_array_mut() {
                list.retain(|w| w["node"] != node.as_str());
            }
        }
    }
}

#[cfg(test)]
mod tests;
