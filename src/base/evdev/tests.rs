use super::*;

/// A USB keyboard, as a 64-bit kernel lists it.
pub(crate) const USB_KEYBOARD: &str = "I: Bus=0003 Vendor=046d Product=c31c Version=0110
N: Name=\"Logitech USB Keyboard\"
P: Phys=usb-0000:00:14.0-1/input0
S: Sysfs=/devices/pci0000:00/0000:00:14.0/usb1/1-1/1-1:1.0/0003:046D:C31C.0001/input/input3
U: Uniq=
H: Handlers=sysrq kbd leds event3 
B: PROP=0
B: EV=120013
B: KEY=1000000000007 ff9f207ac14057ff febeffdfffefffff fffffffffffffffe
B: MSC=10
B: LED=7
";

/// A uinput keyboard (ydotool's, here) claiming to be on USB: only its sysfs place
/// gives it away.
pub(crate) const UINPUT_KEYBOARD: &str = "I: Bus=0003 Vendor=1234 Product=5678 Version=0001
N: Name=\"ydotoold virtual device\"
P: Phys=
S: Sysfs=/devices/virtual/input/input7
U: Uniq=
H: Handlers=sysrq kbd leds event7 
B: PROP=0
B: EV=120017
B: KEY=1000000000007 ff9f207ac14057ff febeffdfffefffff fffffffffffffffe
B: MSC=10
";

const POWER_BUTTON: &str = "I: Bus=0019 Vendor=0000 Product=0001 Version=0000
N: Name=\"Power Button\"
P: Phys=PNP0C0C/button/input0
S: Sysfs=/devices/LNXSYSTM:00/LNXSYBUS:00/PNP0C0C:00/input/input0
U: Uniq=
H: Handlers=kbd event0 
B: PROP=0
B: EV=3
B: KEY=10000000000000 0
";

const MOUSE: &str = "I: Bus=0003 Vendor=046d Product=c077 Version=0111
N: Name=\"Logitech USB Optical Mouse\"
P: Phys=usb-0000:00:14.0-2/input0
S: Sysfs=/devices/pci0000:00/0000:00:14.0/usb1/1-2/1-2:1.0/0003:046D:C077.0002/input/input4
U: Uniq=
H: Handlers=mouse0 event4 
B: PROP=0
B: EV=17
B: KEY=ff0000 0 0 0 0
B: REL=903
B: MSC=10
";

fn box_file() -> String {
    [POWER_BUTTON, USB_KEYBOARD, MOUSE, UINPUT_KEYBOARD].join("\n")
}

fn ev(kind: u16, code: u16, value: i32) -> InputEvent {
    InputEvent { kind, code, value }
}

fn key(code: u16, value: i32) -> InputEvent {
    ev(EV_KEY, code, value)
}

#[test]
fn the_devices_file_is_parsed_and_each_device_judged() {
    let devices = parse_devices(&box_file());
    assert_eq!(devices.len(), 4, "{devices:#?}");
    let kb = &devices[1];
    assert_eq!(kb.name, "Logitech USB Keyboard");
    assert_eq!(kb.bus, Some(0x0003));
    assert_eq!(kb.event_node(), Some("event3"));
    assert_eq!(kb.ev, Some(0x120013));
    assert!(kb.malformed.is_none());
    let chord = Chord::example();
    let verdicts: Vec<Verdict> = devices.iter().map(|d| judge(d, &chord)).collect();
    assert!(
        matches!(&verdicts[0], Verdict::NotKeyboard(why) if why.contains("no ctrl, alt, end key")),
        "{verdicts:?}"
    );
    assert_eq!(verdicts[1], Verdict::Watch);
    assert!(
        matches!(&verdicts[2], Verdict::NotKeyboard(why) if why.contains("event4")),
        "{verdicts:?}"
    );
    assert!(
        matches!(&verdicts[3], Verdict::Virtual(why) if why.contains("/devices/virtual/input/input7")),
        "{verdicts:?}"
    );
    // The power button has its one key, KEY_POWER (116).
    assert!(devices[0].has_key(116) && !devices[0].has_key(115));
    // The mouse's buttons are not keys of a chord.
    assert!(devices[2].has_key(0x110) && !devices[2].has_key(29));
}

#[test]
fn bus_virtual_a_missing_sysfs_path_and_no_event_node_are_not_watched() {
    let chord = Chord::example();
    let on_bus_6 = USB_KEYBOARD.replace("Bus=0003", "Bus=0006");
    let d = &parse_devices(&on_bus_6)[0];
    assert!(matches!(judge(d, &chord), Verdict::Virtual(w) if w.contains("BUS_VIRTUAL")));
    let no_sysfs: String = USB_KEYBOARD
        .lines()
        .filter(|l| !l.starts_with("S:"))
        .map(|l| format!("{l}\n"))
        .collect();
    let d = &parse_devices(&no_sysfs)[0];
    assert!(matches!(judge(d, &chord), Verdict::Virtual(w) if w.contains("no Sysfs")));
    let no_node = USB_KEYBOARD.replace("leds event3", "leds");
    let d = &parse_devices(&no_node)[0];
    assert!(matches!(judge(d, &chord), Verdict::NotKeyboard(w) if w.contains("no event node")));
    let no_keys = USB_KEYBOARD.replace("EV=120013", "EV=120011");
    let d = &parse_devices(&no_keys)[0];
    assert!(matches!(judge(d, &chord), Verdict::NotKeyboard(w) if w.contains("no keys")));
}

/// A device name with line breaks (uinput copies it unchecked) can add lines to its own
/// block, which then has a line twice, and can make up a whole block: the file alone
/// cannot tell that one from the kernel's, which is why the watcher confirms each node on
/// its descriptor through sysfs (ops::halt_key).
#[test]
fn lines_a_device_name_makes_up_mark_its_block_or_are_left_to_the_sysfs_check() {
    let chord = Chord::example();
    let into_own_block = UINPUT_KEYBOARD.replace(
        "N: Name=\"ydotoold virtual device\"",
        "N: Name=\"x\nS: Sysfs=/devices/pci0000:00/usb1\"",
    );
    let d = &parse_devices(&into_own_block)[0];
    assert_eq!(d.malformed.as_deref(), Some("its S line is given twice"));
    assert!(matches!(judge(d, &chord), Verdict::Virtual(w) if w.contains("lists it oddly")));

    let whole_block = UINPUT_KEYBOARD.replace(
        "N: Name=\"ydotoold virtual device\"",
        "N: Name=\"x\n\nS: Sysfs=/devices/pci0000:00/usb1\nH: Handlers=kbd event7\nB: EV=3\nB: KEY=800 0 1000000 20000000\n\nN: Name=\"y\"",
    );
    let devices = parse_devices(&whole_block);
    assert_eq!(devices.len(), 3, "{devices:#?}");
    assert_eq!(
        judge(&devices[1], &chord),
        Verdict::Watch,
        "made up, and well formed"
    );
    assert!(matches!(judge(&devices[2], &chord), Verdict::Virtual(_)));
}

#[test]
fn a_key_bitmap_of_a_32_bit_kernel_is_read_too() {
    let chord = Chord::example();
    // KEY_LEFTCTRL 29, KEY_LEFTALT 56 and KEY_END 107 in 32-bit words.
    let kb = USB_KEYBOARD.replace(
        "B: KEY=1000000000007 ff9f207ac14057ff febeffdfffefffff fffffffffffffffe",
        "B: KEY=800 0 1000000 20000000",
    );
    assert_eq!(judge(&parse_devices(&kb)[0], &chord), Verdict::Watch);
    let power = POWER_BUTTON.replace("KEY=10000000000000 0", "KEY=100000 0 0 0");
    let power = &parse_devices(&power)[0];
    assert!(power.has_key(116) && !power.has_key(29));
    // A word that is not hex: no keys at all.
    let bad = USB_KEYBOARD.replace("fffffffffffffffe", "zz");
    assert!(!parse_devices(&bad)[0].has_key(29));
}

#[test]
fn events_decode_in_both_layouts() {
    for size in [24, 16] {
        let e = ev(EV_KEY, 107, 1);
        let bytes = encode(e, size);
        assert_eq!(bytes.len(), size);
        assert_eq!(decode(&bytes), Some(e));
        let release = encode(ev(EV_KEY, 29, 0), size);
        assert_eq!(decode(&release), Some(key(29, 0)));
        let negative = encode(ev(3, 0, -5), size);
        assert_eq!(decode(&negative).map(|e| e.value), Some(-5));
    }
    assert_eq!(decode(&[0; 23]), None);
    assert_eq!(decode(&[0; 20]), None);
    assert_eq!(
        EVENT_BYTES,
        if cfg!(target_pointer_width = "64") {
            24
        } else {
            16
        }
    );
    // The time is skipped, whatever it holds.
    let mut with_time = encode(key(30, 2), 24);
    with_time[..16].fill(0xab);
    assert_eq!(decode(&with_time), Some(key(30, 2)));
}

#[test]
fn chords_parse_in_any_case_and_order_and_print_one_way() {
    for (text, want) in [
        ("ctrl+alt+end", "ctrl+alt+end"),
        ("Alt + Ctrl + END", "ctrl+alt+end"),
        ("super+KEY_PAUSE", "super+pause"),
        ("control+shift+escape", "ctrl+shift+esc"),
        ("ctrl+alt+del", "ctrl+alt+delete"),
        ("meta+f12", "super+f12"),
        ("shift+alt+5", "alt+shift+5"),
    ] {
        assert_eq!(Chord::parse(text).unwrap().to_string(), want, "{text}");
    }
    assert_eq!(
        Chord::example().slots(),
        vec![vec![29, 97], vec![56, 100], vec![107]]
    );
    assert_eq!(Chord::example().press_codes(), vec![29, 56, 107]);
}

#[test]
fn bad_chords_say_what_is_accepted() {
    for (text, says) in [
        ("", "empty part"),
        ("end", "at least one modifier"),
        ("ctrl+alt", "no key besides"),
        ("ctrl+alt+end+home", "more than one key"),
        ("ctrl+ctrl+end", "names ctrl twice"),
        ("ctrl++end", "empty part"),
        ("ctrl+alt+foo", "unknown key \"foo\""),
        ("leftctrl+end", "unknown key \"leftctrl\""),
        ("ctrl+alt+f25", "unknown key \"f25\""),
    ] {
        let err = Chord::parse(text).unwrap_err();
        assert!(err.contains(says), "{text:?}: {err}");
        if says != "at least one modifier" {
            assert!(
                err.contains("ctrl, alt, shift, super") && err.contains("end, down"),
                "{text:?} names the accepted keys: {err}"
            );
        }
    }
}

#[test]
fn every_key_name_is_the_kernel_headers() {
    let path = "/usr/include/linux/input-event-codes.h";
    let Ok(header) = std::fs::read_to_string(path) else {
        eprintln!("SKIPPED: {path} is not installed (linux-libc-dev)");
        return;
    };
    let define = |name: &str| -> Option<u16> {
        header.lines().find_map(|l| {
            let mut w = l.split_whitespace();
            (w.next() == Some("#define") && w.next() == Some(name))
                .then(|| w.next())
                .flatten()
                .and_then(|v| match v.strip_prefix("0x") {
                    Some(hex) => u16::from_str_radix(hex, 16).ok(),
                    None => v.parse().ok(),
                })
        })
    };
    for (name, code) in KEYS {
        let macro_name = format!("KEY_{}", name.to_ascii_uppercase());
        assert_eq!(define(&macro_name), Some(*code), "{macro_name}");
    }
    for (name, codes) in [
        ("CTRL", Modifier::Ctrl.codes()),
        ("ALT", Modifier::Alt.codes()),
        ("SHIFT", Modifier::Shift.codes()),
        ("META", Modifier::Super.codes()),
    ] {
        assert_eq!(define(&format!("KEY_LEFT{name}")), Some(codes[0]));
        assert_eq!(define(&format!("KEY_RIGHT{name}")), Some(codes[1]));
    }
    assert_eq!(define("KEY_MAX"), Some(KEY_MAX));
    assert_eq!(define("EV_KEY"), Some(EV_KEY));
    assert_eq!(define("SYN_DROPPED"), Some(SYN_DROPPED));
}

#[test]
fn the_chord_fires_once_whatever_the_order_and_rearms_after_a_release() {
    let chord = Chord::example();
    let mut s = ChordState::default();
    let syn = ev(EV_SYN, 0, 0);
    // End first, then the modifiers: it fires when the last one goes down.
    assert!(!s.feed(&chord, key(107, 1)));
    assert!(!s.feed(&chord, syn));
    assert!(!s.feed(&chord, key(29, 1)));
    assert!(s.feed(&chord, key(56, 1)));
    // Held: End's auto-repeat and the reports between do not fire it again.
    for _ in 0..5 {
        assert!(!s.feed(&chord, key(107, 2)));
        assert!(!s.feed(&chord, syn));
    }
    // A key of it released re-arms it; pressed again, it fires again.
    assert!(!s.feed(&chord, key(56, 0)));
    assert!(s.feed(&chord, key(100, 1)), "right alt counts as alt");
    // A key outside the chord changes nothing.
    assert!(!s.feed(&chord, key(30, 1)));
    assert!(!s.feed(&chord, key(30, 0)));
}

#[test]
fn keys_released_before_the_last_one_or_dropped_events_do_not_fire() {
    let chord = Chord::example();
    let mut s = ChordState::default();
    assert!(!s.feed(&chord, key(29, 1)));
    assert!(!s.feed(&chord, key(29, 0)));
    assert!(!s.feed(&chord, key(56, 1)));
    assert!(!s.feed(&chord, key(107, 1)), "ctrl was released");
    assert!(!s.feed(&chord, key(56, 0)));
    assert!(!s.feed(&chord, key(107, 0)));
    // The kernel dropped events: what is down is forgotten.
    assert!(!s.feed(&chord, key(29, 1)));
    assert!(!s.feed(&chord, key(56, 1)));
    assert!(!s.feed(&chord, ev(EV_SYN, SYN_DROPPED, 0)));
    assert!(!s.feed(&chord, key(107, 2)), "alt is not known to be down");
    assert!(!s.feed(&chord, key(56, 1)), "nor ctrl");
    assert!(s.feed(&chord, key(29, 1)));
    // Codes past KEY_MAX, odd values and other event types are ignored.
    let mut s = ChordState::default();
    assert!(!s.feed(&chord, key(KEY_MAX + 1, 1)));
    assert!(!s.feed(&chord, key(29, 7)));
    assert!(!s.feed(&chord, ev(4, 29, 1)));
    assert!(!s.feed(&chord, key(56, 1)));
    assert!(!s.feed(&chord, key(107, 1)), "ctrl never went down");
}

#[test]
fn only_a_physical_node_in_sysfs_passes() {
    let usb = "/sys/devices/pci0000:00/0000:00:14.0/usb1/1-1/1-1:1.0/0003:046D:C31C.0001/input/input3/event3";
    assert_eq!(sysfs_is_physical(usb, "event3"), Ok(()));
    let uinput = "/sys/devices/virtual/input/input7/event7";
    assert!(sysfs_is_physical(uinput, "event7")
        .unwrap_err()
        .contains("software device"));
    let uhid = "/sys/devices/virtual/misc/uhid/0005:046D:B342.0003/input/input9/event9";
    assert!(sysfs_is_physical(uhid, "event9").is_err());
    assert!(sysfs_is_physical(usb, "event4")
        .unwrap_err()
        .contains("is not event4"));
    assert!(sysfs_is_physical("/tmp/devices/x/event3", "event3").is_err());
    assert!(sysfs_is_physical("/sys/class/input/event3", "event3").is_err());
}
