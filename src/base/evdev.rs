//! What `--halt-key` (contract §22) knows of Linux evdev, read as plain files with no ioctl:
//! the key names of `linux/input-event-codes.h` a chord is written in and [`Chord`], its
//! parser; `struct input_event` records of `/dev/input/event*` decoded for this target's
//! size ([`decode`]); `/proc/bus/input/devices` parsed ([`parse_devices`]) and each device
//! judged ([`judge`]: a physical keyboard with the chord's keys, virtual, or not a
//! keyboard); and [`ChordState`], when the chord is down on one device. No I/O here: the
//! watcher thread (`ops::halt_key`) reads the files and owns the descriptors.

use std::fmt;

/// `EV_SYN`: a report ends, or (with [`SYN_DROPPED`]) the kernel dropped events.
pub const EV_SYN: u16 = 0x00;
/// `EV_KEY`: a key (or button) went down (1), repeated (2) or up (0).
pub const EV_KEY: u16 = 0x01;
/// `SYN_DROPPED`: the client's buffer overran; what is down is unknown until keys change.
pub const SYN_DROPPED: u16 = 3;
/// `KEY_MAX`: the highest key code.
pub const KEY_MAX: u16 = 0x2ff;
/// `BUS_VIRTUAL` (`linux/input.h`): a device made by software.
pub const BUS_VIRTUAL: u16 = 0x06;
/// Where the kernel puts input devices that have no hardware parent: every `uinput`
/// device, and `uhid`'s (BlueZ's Bluetooth keyboards among them).
pub const VIRTUAL_SYSFS: &str = "/devices/virtual/";
/// `INPUT_MAJOR`: the character device major of every `/dev/input/event*` node.
pub const INPUT_MAJOR: u32 = 13;

/// Bytes of one `struct input_event` as this binary reads it: a `struct timeval` of two
/// `long`s, then `u16 type`, `u16 code`, `i32 value`. 24 on 64-bit targets, 16 on 32-bit
/// ones (armv7, armv6; the kernel writes the 32-bit layout to a 32-bit reader on a 64-bit
/// kernel too).
pub const EVENT_BYTES: usize = if cfg!(target_pointer_width = "64") {
    24
} else {
    16
};

/// One decoded `struct input_event` (its time is not needed).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct InputEvent {
    pub kind: u16,
    pub code: u16,
    pub value: i32,
}

/// Decode one record of `record.len()` bytes (24: 64-bit layout, 16: 32-bit layout). The
/// time comes first and is skipped: type, code and value are the last 8 bytes, in the
/// machine's byte order. `None` for any other length.
pub fn decode(record: &[u8]) -> Option<InputEvent> {
    if record.len() != 24 && record.len() != 16 {
        return None;
    }
    let tail = &record[record.len() - 8..];
    Some(InputEvent {
        kind: u16::from_ne_bytes([tail[0], tail[1]]),
        code: u16::from_ne_bytes([tail[2], tail[3]]),
        value: i32::from_ne_bytes([tail[4], tail[5], tail[6], tail[7]]),
    })
}

/// Encode an event as this target's reader reads it (tests, and the fake keyboards of
/// the integration tests): zero time, then type, code, value.
pub fn encode(event: InputEvent, record_bytes: usize) -> Vec<u8> {
    let mut out = vec![0u8; record_bytes - 8];
    out.extend_from_slice(&event.kind.to_ne_bytes());
    out.extend_from_slice(&event.code.to_ne_bytes());
    out.extend_from_slice(&event.value.to_ne_bytes());
    out
}

/// A chord's modifier; either the left or the right key counts.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Modifier {
    Ctrl,
    Alt,
    Shift,
    Super,
}

impl Modifier {
    const ALL: [Modifier; 4] = [
        Modifier::Ctrl,
        Modifier::Alt,
        Modifier::Shift,
        Modifier::Super,
    ];

    /// `KEY_LEFT*` and `KEY_RIGHT*` (`KEY_LEFTMETA`/`KEY_RIGHTMETA` for super).
    pub fn codes(self) -> [u16; 2] {
        match self {
            Modifier::Ctrl => [29, 97],
            Modifier::Alt => [56, 100],
            Modifier::Shift => [42, 54],
            Modifier::Super => [125, 126],
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Modifier::Ctrl => "ctrl",
            Modifier::Alt => "alt",
            Modifier::Shift => "shift",
            Modifier::Super => "super",
        }
    }

    fn parse(word: &str) -> Option<Modifier> {
        match word {
            "ctrl" | "control" => Some(Modifier::Ctrl),
            "alt" => Some(Modifier::Alt),
            "shift" => Some(Modifier::Shift),
            "super" | "meta" | "win" | "logo" => Some(Modifier::Super),
            _ => None,
        }
    }
}

/// The keys a chord may end in: `KEY_<NAME>` of `linux/input-event-codes.h` (the name
/// lowercase, without `KEY_`) and its code. A unit test compares every row with the header
/// where it is installed.
pub const KEYS: &[(&str, u16)] = &[
    ("esc", 1),
    ("1", 2),
    ("2", 3),
    ("3", 4),
    ("4", 5),
    ("5", 6),
    ("6", 7),
    ("7", 8),
    ("8", 9),
    ("9", 10),
    ("0", 11),
    ("minus", 12),
    ("equal", 13),
    ("backspace", 14),
    ("tab", 15),
    ("q", 16),
    ("w", 17),
    ("e", 18),
    ("r", 19),
    ("t", 20),
    ("y", 21),
    ("u", 22),
    ("i", 23),
    ("o", 24),
    ("p", 25),
    ("leftbrace", 26),
    ("rightbrace", 27),
    ("enter", 28),
    ("a", 30),
    ("s", 31),
    ("d", 32),
    ("f", 33),
    ("g", 34),
    ("h", 35),
    ("j", 36),
    ("k", 37),
    ("l", 38),
    ("semicolon", 39),
    ("apostrophe", 40),
    ("grave", 41),
    ("backslash", 43),
    ("z", 44),
    ("x", 45),
    ("c", 46),
    ("v", 47),
    ("b", 48),
    ("n", 49),
    ("m", 50),
    ("comma", 51),
    ("dot", 52),
    ("slash", 53),
    ("space", 57),
    ("f1", 59),
    ("f2", 60),
    ("f3", 61),
    ("f4", 62),
    ("f5", 63),
    ("f6", 64),
    ("f7", 65),
    ("f8", 66),
    ("f9", 67),
    ("f10", 68),
    ("scrolllock", 70),
    ("f11", 87),
    ("f12", 88),
    ("sysrq", 99),
    ("home", 102),
    ("up", 103),
    ("pageup", 104),
    ("left", 105),
    ("right", 106),
    ("end", 107),
    ("down", 108),
    ("pagedown", 109),
    ("insert", 110),
    ("delete", 111),
    ("pause", 119),
    ("f13", 183),
    ("f14", 184),
    ("f15", 185),
    ("f16", 186),
    ("f17", 187),
    ("f18", 188),
    ("f19", 189),
    ("f20", 190),
    ("f21", 191),
    ("f22", 192),
    ("f23", 193),
    ("f24", 194),
];

/// Other spellings people type, and the [`KEYS`] name each means.
const ALIASES: &[(&str, &str)] = &[
    ("escape", "esc"),
    ("del", "delete"),
    ("ins", "insert"),
    ("pgup", "pageup"),
    ("pgdn", "pagedown"),
    ("return", "enter"),
    ("print", "sysrq"),
    ("printscreen", "sysrq"),
    ("break", "pause"),
];

/// The example chord the docs and `doctor` use when none is given: rarely bound by a
/// desktop, and on every full-size and laptop keyboard (End is Fn+Right on some laptops).
pub const EXAMPLE_CHORD: &str = "ctrl+alt+end";

fn key_code(name: &str) -> Option<u16> {
    let name = name.strip_prefix("key_").unwrap_or(name);
    let name = ALIASES
        .iter()
        .find(|(alias, _)| *alias == name)
        .map_or(name, |(_, real)| real);
    KEYS.iter().find(|(n, _)| *n == name).map(|(_, c)| *c)
}

fn key_name(code: u16) -> &'static str {
    KEYS.iter()
        .find(|(_, c)| *c == code)
        .map_or("?", |(n, _)| n)
}

/// `--halt-key`: one or more modifiers and one key, e.g. `ctrl+alt+end`. It is down when
/// every one of its keys is down (either side of a modifier), in any order.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Chord {
    /// Sorted, each once.
    modifiers: Vec<Modifier>,
    key: u16,
}

/// What the chord's parser answers a bad chord with: the accepted names.
fn accepted() -> String {
    let keys: Vec<&str> = KEYS.iter().map(|(n, _)| *n).collect();
    format!(
        "write modifiers and one key joined by +, e.g. {EXAMPLE_CHORD}: modifiers are ctrl, alt, shift, super (left or right both count); keys are {} (evdev's KEY_* names, also escape, del, ins, pgup, pgdn, return, print, break)",
        keys.join(", ")
    )
}

impl Chord {
    /// Parse `ctrl+alt+end` (any case, spaces around `+` allowed, `KEY_` prefixes too).
    /// At least one modifier: a lone key would halt the box whenever someone typed it.
    pub fn parse(text: &str) -> Result<Chord, String> {
        let lower = text.trim().to_ascii_lowercase();
        let words: Vec<&str> = lower.split('+').map(str::trim).collect();
        if words.iter().any(|w| w.is_empty()) {
            return Err(format!(
                "halt key {text:?} has an empty part; {}",
                accepted()
            ));
        }
        let mut modifiers = Vec::new();
        let mut key = None;
        for word in &words {
            if let Some(m) = Modifier::parse(word) {
                if modifiers.contains(&m) {
                    return Err(format!(
                        "halt key {text:?} names {} twice; {}",
                        m.as_str(),
                        accepted()
                    ));
                }
                modifiers.push(m);
                continue;
            }
            let Some(code) = key_code(word) else {
                return Err(format!(
                    "halt key {text:?}: unknown key {word:?}; {}",
                    accepted()
                ));
            };
            if key.replace(code).is_some() {
                return Err(format!(
                    "halt key {text:?} has more than one key besides its modifiers; {}",
                    accepted()
                ));
            }
        }
        let Some(key) = key else {
            return Err(format!(
                "halt key {text:?} has no key besides its modifiers; {}",
                accepted()
            ));
        };
        if modifiers.is_empty() {
            return Err(format!(
                "halt key {text:?} needs at least one modifier (ctrl, alt, shift or super): a lone key would halt the box whenever it is typed; e.g. {EXAMPLE_CHORD}"
            ));
        }
        modifiers.sort();
        Ok(Chord { modifiers, key })
    }

    /// [`EXAMPLE_CHORD`], parsed.
    pub fn example() -> Chord {
        Chord::parse(EXAMPLE_CHORD).expect("the example chord parses")
    }

    /// Each key the chord needs down: the codes that count for it (two for a modifier).
    pub fn slots(&self) -> Vec<Vec<u16>> {
        let mut out: Vec<Vec<u16>> = self.modifiers.iter().map(|m| m.codes().to_vec()).collect();
        out.push(vec![self.key]);
        out
    }

    /// The chord's keys as a person presses them (left modifiers, then the key), for tests
    /// and the integration tests' fake keyboards.
    pub fn press_codes(&self) -> Vec<u16> {
        let mut out: Vec<u16> = self.modifiers.iter().map(|m| m.codes()[0]).collect();
        out.push(self.key);
        out
    }
}

impl fmt::Display for Chord {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for m in &self.modifiers {
            write!(f, "{}+", m.as_str())?;
        }
        f.write_str(key_name(self.key))
    }
}

/// Key codes a [`ChordState`] tracks: `0..=KEY_MAX`.
const KEY_WORDS: usize = (KEY_MAX as usize + 1) / 64;

/// Which keys are down on one device and whether its chord already fired. The chord fires
/// once when its last key goes down (press order does not matter; auto-repeat does not
/// fire it again) and re-arms when any of its keys is released.
#[derive(Clone, Debug, Default)]
pub struct ChordState {
    down: [u64; KEY_WORDS],
    fired: bool,
}

impl ChordState {
    fn is_down(&self, code: u16) -> bool {
        let code = code as usize;
        code <= KEY_MAX as usize && self.down[code / 64] & (1 << (code % 64)) != 0
    }

    /// Take one event; `true` when it completed the chord (fire now).
    pub fn feed(&mut self, chord: &Chord, event: InputEvent) -> bool {
        match (event.kind, event.code) {
            (EV_SYN, SYN_DROPPED) => {
                // What is down is unknown now: nothing counts until it is pressed again.
                self.down = [0; KEY_WORDS];
            }
            (EV_KEY, code) if code <= KEY_MAX => {
                let (word, bit) = (code as usize / 64, 1u64 << (code % 64));
                match event.value {
                    0 => self.down[word] &= !bit,
                    // A repeat means down too (a key held when the device was opened).
                    1 | 2 => self.down[word] |= bit,
                    _ => return false,
                }
            }
            _ => return false,
        }
        let all_down = chord
            .slots()
            .iter()
            .all(|slot| slot.iter().any(|c| self.is_down(*c)));
        if !all_down {
            self.fired = false;
            return false;
        }
        !std::mem::replace(&mut self.fired, true)
    }
}

/// One block of `/proc/bus/input/devices`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct InputDevice {
    /// `I: Bus=` (hex).
    pub bus: Option<u16>,
    /// `N: Name=`, unquoted. Chosen by whoever made the device: never trusted.
    pub name: String,
    /// `S: Sysfs=`.
    pub sysfs: Option<String>,
    /// `H: Handlers=`, e.g. `sysrq kbd leds event3`.
    pub handlers: Vec<String>,
    /// `B: EV=` (hex): the event types.
    pub ev: Option<u64>,
    /// `B: KEY=`: hex words, most significant first, as the kernel printed them.
    pub key_words: Vec<String>,
    /// Why the block cannot be taken as the kernel wrote it: a line given twice. A device
    /// name may hold line breaks (uinput and uhid copy it unchecked), and the lines in a
    /// name would otherwise be read as the kernel's.
    pub malformed: Option<String>,
}

impl InputDevice {
    /// `eventN` from the handlers.
    pub fn event_node(&self) -> Option<&str> {
        self.handlers.iter().map(String::as_str).find(|h| {
            h.strip_prefix("event")
                .is_some_and(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
        })
    }

    /// Whether the `B: KEY=` bitmap has `code`. The kernel prints its `long`s, 64 or 32
    /// bits wide as the *kernel* is built (a 32-bit handnode may run on a 64-bit kernel):
    /// a word of more than 8 hex digits proves 64; otherwise either width is tried, which
    /// at worst watches a device that lacks a key (reading it is harmless).
    pub fn has_key(&self, code: u16) -> bool {
        let Ok(words) = self
            .key_words
            .iter()
            .map(|w| u64::from_str_radix(w, 16))
            .collect::<Result<Vec<u64>, _>>()
        else {
            return false;
        };
        let bit = |width: usize| {
            let index = code as usize / width;
            index < words.len()
                && words[words.len() - 1 - index] & (1 << (code as usize % width)) != 0
        };
        if self.key_words.iter().any(|w| w.len() > 8) {
            bit(64)
        } else {
            bit(64) || bit(32)
        }
    }
}

/// Parse `/proc/bus/input/devices`: blank-line separated blocks of `X: …` lines. A block
/// with a line type twice (`I`, `N`, `S`, `H`, `B: EV`, `B: KEY`) is kept but marked
/// [`InputDevice::malformed`]: a device's name can carry line breaks, so lines in a block
/// may be a name's and not the kernel's, while the kernel's own lines of that device still
/// follow its name. A name can also make up whole blocks (after a blank line), naming any
/// node: so this file only finds candidates, and the node a block names is confirmed
/// physical on the opened descriptor (`ops::halt_key`, through sysfs), never by this file.
pub fn parse_devices(text: &str) -> Vec<InputDevice> {
    let mut out = Vec::new();
    for block in text.split("\n\n") {
        if block.trim().is_empty() {
            continue;
        }
        let mut dev = InputDevice::default();
        let mut seen: Vec<&str> = Vec::new();
        for line in block.lines() {
            let line = line.trim_end();
            let (tag, rest) = match line.split_once(": ") {
                Some((t, r)) => (t, r),
                None => continue,
            };
            let (field, value) = match (tag, rest.split_once('=')) {
                ("B", Some((k, v))) => (k, v),
                (_, Some((_, v))) => (tag, v),
                _ => continue,
            };
            let id = match (tag, field) {
                ("I", _) | ("N", _) | ("S", _) | ("H", _) => tag,
                ("B", "EV") => "EV",
                ("B", "KEY") => "KEY",
                _ => continue,
            };
            if seen.contains(&id) {
                dev.malformed = Some(format!("its {id} line is given twice"));
            }
            seen.push(id);
            match id {
                "I" => {
                    dev.bus = rest
                        .split_whitespace()
                        .find_map(|kv| kv.strip_prefix("Bus="))
                        .and_then(|b| u16::from_str_radix(b, 16).ok());
                }
                "N" => {
                    let v = value.strip_prefix('"').unwrap_or(value);
                    dev.name = v.strip_suffix('"').unwrap_or(v).to_string();
                }
                "S" => dev.sysfs = Some(value.to_string()),
                "H" => dev.handlers = value.split_whitespace().map(String::from).collect(),
                "EV" => dev.ev = u64::from_str_radix(value.trim(), 16).ok(),
                _ => dev.key_words = value.split_whitespace().map(String::from).collect(),
            }
        }
        out.push(dev);
    }
    out
}

/// What `--halt-key` makes of one listed device.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// A physical keyboard with the chord's keys: watched.
    Watch,
    /// Made by software (or not provably not): never opened. Why, for the log.
    Virtual(String),
    /// No event node, no keys, or not the chord's keys: not opened. Why.
    NotKeyboard(String),
}

/// Judge `dev` for `chord`. Virtual first: a software device is never read, whatever it
/// claims to have. What is physical is decided by where the kernel placed the device
/// (`Sysfs=`, which its maker cannot choose): under [`VIRTUAL_SYSFS`] it is software, as
/// is `Bus=0006`; a block without a sysfs path, or malformed, is not trusted either. The
/// watcher confirms it again on the opened node (`ops::halt_key`).
pub fn judge(dev: &InputDevice, chord: &Chord) -> Verdict {
    if let Some(why) = &dev.malformed {
        return Verdict::Virtual(format!(
            "the devices file lists it oddly ({why}; a device name with line breaks can fake lines)"
        ));
    }
    let Some(node) = dev.event_node() else {
        return Verdict::NotKeyboard("it has no event node".into());
    };
    match dev.sysfs.as_deref() {
        None => {
            return Verdict::Virtual(format!(
                "{node} has no Sysfs path: it cannot be told from a software device"
            ))
        }
        Some(path) if path.starts_with(VIRTUAL_SYSFS) => {
            return Verdict::Virtual(format!(
                "{node} is a software device (Sysfs={path}: uinput, uhid and the like)"
            ))
        }
        Some(_) => {}
    }
    if dev.bus == Some(BUS_VIRTUAL) {
        return Verdict::Virtual(format!("{node} is on Bus=0006 (BUS_VIRTUAL)"));
    }
    if dev.ev.is_none_or(|ev| ev & (1 << EV_KEY) == 0) {
        return Verdict::NotKeyboard(format!("{node} has no keys"));
    }
    let missing: Vec<String> = chord
        .slots()
        .iter()
        .filter(|slot| !slot.iter().any(|c| dev.has_key(*c)))
        .map(|slot| match slot[0] {
            c if c == chord.key => key_name(c).to_string(),
            c => Modifier::ALL
                .iter()
                .find(|m| m.codes()[0] == c)
                .map_or("?", |m| m.as_str())
                .to_string(),
        })
        .collect();
    if !missing.is_empty() {
        return Verdict::NotKeyboard(format!(
            "{node} has no {} key (not a keyboard for {chord})",
            missing.join(", ")
        ));
    }
    Verdict::Watch
}

/// Whether the device node the kernel's sysfs names for a character device
/// (`/sys/dev/char/MAJ:MIN`, resolved) is a physical input device's `eventN`: under
/// `/sys/devices/` but not [`VIRTUAL_SYSFS`], and ending in that node's name.
pub fn sysfs_is_physical(resolved: &str, node: &str) -> Result<(), String> {
    let Some(under) = resolved
        .strip_prefix("/sys")
        .filter(|p| p.starts_with("/devices/"))
    else {
        return Err(format!(
            "its sysfs entry {resolved} is not under /sys/devices"
        ));
    };
    if under.starts_with(VIRTUAL_SYSFS) {
        return Err(format!(
            "it is a software device ({resolved}: uinput, uhid and the like)"
        ));
    }
    if !resolved.ends_with(&format!("/{node}")) {
        return Err(format!("its sysfs entry {resolved} is not {node}"));
    }
    Ok(())
}

#[cfg(test)]
mod tests;
