//! Key names for `key press`: parsing "ctrl+shift+t" into modifiers and one X keysym
//! name, with friendly aliases, and the argv fragments each backend's helper wants.

/// A modifier held while the key is pressed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Modifier {
    Ctrl,
    Shift,
    Alt,
    Super,
}

impl Modifier {
    /// The name `xdotool key` understands in a `mod+key` chord.
    pub fn xdotool(self) -> &'static str {
        match self {
            Modifier::Ctrl => "ctrl",
            Modifier::Shift => "shift",
            Modifier::Alt => "alt",
            Modifier::Super => "super",
        }
    }

    /// The name `wtype -M/-m` understands.
    pub fn wtype(self) -> &'static str {
        match self {
            Modifier::Ctrl => "ctrl",
            Modifier::Shift => "shift",
            Modifier::Alt => "alt",
            Modifier::Super => "logo",
        }
    }

    /// The left-hand keysym, for a modifier pressed on its own.
    fn keysym(self) -> &'static str {
        match self {
            Modifier::Ctrl => "Control_L",
            Modifier::Shift => "Shift_L",
            Modifier::Alt => "Alt_L",
            Modifier::Super => "Super_L",
        }
    }
}

/// Modifier names and their aliases (compared after [`normalize`]).
const MODIFIERS: &[(Modifier, &[&str])] = &[
    (Modifier::Ctrl, &["ctrl", "control", "ctl", "strg"]),
    (Modifier::Shift, &["shift"]),
    (Modifier::Alt, &["alt", "option", "opt", "mod1"]),
    (
        Modifier::Super,
        &[
            "super", "meta", "win", "windows", "cmd", "command", "logo", "mod4",
        ],
    ),
];

/// Named keys: the X keysym name (what both `xdotool` and `wtype -k` take) and aliases.
const NAMED: &[(&str, &[&str])] = &[
    ("Return", &["enter", "ret", "newline"]),
    ("Tab", &[]),
    ("Escape", &["esc"]),
    ("BackSpace", &["bksp", "back"]),
    ("Delete", &["del"]),
    ("Insert", &["ins"]),
    ("Home", &[]),
    ("End", &[]),
    ("Page_Up", &["pgup", "prior"]),
    ("Page_Down", &["pgdn", "next"]),
    ("Up", &["arrowup"]),
    ("Down", &["arrowdown"]),
    ("Left", &["arrowleft"]),
    ("Right", &["arrowright"]),
    ("space", &["spacebar"]),
    ("Print", &["printscreen", "prtsc", "sysrq"]),
    ("Menu", &["apps", "contextmenu"]),
    ("Pause", &["break"]),
    ("Scroll_Lock", &[]),
    ("Caps_Lock", &[]),
    ("Num_Lock", &[]),
    ("minus", &[]),
    ("equal", &["equals"]),
    ("plus", &[]),
    ("comma", &[]),
    ("period", &["dot"]),
    ("slash", &[]),
    ("backslash", &[]),
    ("semicolon", &[]),
    ("colon", &[]),
    ("apostrophe", &["quote"]),
    ("quotedbl", &["doublequote"]),
    ("grave", &["backtick", "backquote"]),
    ("asciitilde", &["tilde"]),
    ("bracketleft", &[]),
    ("bracketright", &[]),
    ("braceleft", &[]),
    ("braceright", &[]),
    ("parenleft", &[]),
    ("parenright", &[]),
    ("less", &[]),
    ("greater", &[]),
    ("question", &[]),
    ("exclam", &[]),
    ("at", &[]),
    ("numbersign", &["hash"]),
    ("dollar", &[]),
    ("percent", &[]),
    ("asciicircum", &["caret"]),
    ("ampersand", &[]),
    ("asterisk", &["star"]),
    ("underscore", &[]),
    ("bar", &["pipe"]),
    ("XF86AudioRaiseVolume", &["volumeup"]),
    ("XF86AudioLowerVolume", &["volumedown"]),
    ("XF86AudioMute", &["mute", "volumemute"]),
    ("XF86AudioPlay", &["play", "mediaplaypause"]),
    ("XF86AudioNext", &["medianext", "mediatracknext"]),
    ("XF86AudioPrev", &["mediaprev", "mediatrackprevious"]),
    ("XF86MonBrightnessUp", &["brightnessup"]),
    ("XF86MonBrightnessDown", &["brightnessdown"]),
];

/// Printable ASCII punctuation and the keysym each types.
const PUNCTUATION: &[(char, &str)] = &[
    ('-', "minus"),
    ('=', "equal"),
    ('+', "plus"),
    (',', "comma"),
    ('.', "period"),
    ('/', "slash"),
    ('\\', "backslash"),
    (';', "semicolon"),
    (':', "colon"),
    ('\'', "apostrophe"),
    ('"', "quotedbl"),
    ('`', "grave"),
    ('~', "asciitilde"),
    ('[', "bracketleft"),
    (']', "bracketright"),
    ('{', "braceleft"),
    ('}', "braceright"),
    ('(', "parenleft"),
    (')', "parenright"),
    ('<', "less"),
    ('>', "greater"),
    ('?', "question"),
    ('!', "exclam"),
    ('@', "at"),
    ('#', "numbersign"),
    ('$', "dollar"),
    ('%', "percent"),
    ('^', "asciicircum"),
    ('&', "ampersand"),
    ('*', "asterisk"),
    ('_', "underscore"),
    ('|', "bar"),
    (' ', "space"),
];

/// One key chord: modifiers held while `key` is pressed. `key` is `None` when only
/// modifiers were named (e.g. "super" alone opens a launcher).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Chord {
    pub mods: Vec<Modifier>,
    pub key: Option<&'static str>,
    /// A literal single character (letters and digits keep their case).
    pub literal: Option<char>,
}

impl Chord {
    /// The keysym to press: the named key, the literal character, or a lone modifier's.
    pub fn keysym(&self) -> String {
        if let Some(k) = self.key {
            return k.to_string();
        }
        if let Some(c) = self.literal {
            return c.to_string();
        }
        self.mods
            .last()
            .map(|m| m.keysym().to_string())
            .unwrap_or_default()
    }

    /// The `xdotool key` argument: "ctrl+shift+t", "Return", "Super_L".
    pub fn xdotool(&self) -> String {
        let only_mods = self.key.is_none() && self.literal.is_none();
        let held: &[Modifier] = if only_mods {
            &self.mods[..self.mods.len().saturating_sub(1)]
        } else {
            &self.mods
        };
        let mut parts: Vec<String> = held.iter().map(|m| m.xdotool().to_string()).collect();
        parts.push(self.keysym());
        parts.join("+")
    }

    /// The `wtype` arguments: press modifiers, tap the key, release in reverse order.
    pub fn wtype(&self) -> Vec<String> {
        let mut args = Vec::new();
        for m in &self.mods {
            args.push("-M".into());
            args.push(m.wtype().into());
        }
        if self.key.is_some() || self.literal.is_some() {
            args.push("-k".into());
            args.push(self.keysym());
        }
        for m in self.mods.iter().rev() {
            args.push("-m".into());
            args.push(m.wtype().into());
        }
        args
    }
}

/// Case-insensitive, and "page_up", "Page-Up" and "PageUp" are the same name.
fn normalize(name: &str) -> String {
    name.chars()
        .filter(|c| *c != '_' && *c != '-' && *c != ' ')
        .flat_map(char::to_lowercase)
        .collect()
}

fn modifier(name: &str) -> Option<Modifier> {
    let n = normalize(name);
    MODIFIERS
        .iter()
        .find(|(_, names)| names.iter().any(|a| *a == n))
        .map(|(m, _)| *m)
}

fn named(name: &str) -> Option<&'static str> {
    let n = normalize(name);
    if n.is_empty() {
        return None;
    }
    if let Some((sym, _)) = NAMED
        .iter()
        .find(|(sym, aliases)| normalize(sym) == n || aliases.contains(&n.as_str()))
    {
        return Some(sym);
    }
    // F1..F24
    let num = n.strip_prefix('f')?.parse::<u8>().ok()?;
    const F: [&str; 24] = [
        "F1", "F2", "F3", "F4", "F5", "F6", "F7", "F8", "F9", "F10", "F11", "F12", "F13", "F14",
        "F15", "F16", "F17", "F18", "F19", "F20", "F21", "F22", "F23", "F24",
    ];
    F.get(usize::from(num).checked_sub(1)?).copied()
}

/// Parse one chord such as "ctrl+l", "Return", "super+shift+4" or "ctrl++".
pub fn parse_chord(spec: &str) -> Result<Chord, String> {
    let trimmed = spec.trim();
    if trimmed.is_empty() {
        return Err(format!("empty key name. {}", valid_names()));
    }
    // A trailing "+" after a separator is the plus key itself ("ctrl++", "+").
    let (head, plus_key) = if trimmed == "+" {
        ("", true)
    } else if let Some(head) = trimmed.strip_suffix("++") {
        (head, true)
    } else {
        (trimmed, false)
    };
    let mut parts: Vec<&str> = if head.is_empty() {
        Vec::new()
    } else {
        head.split('+').collect()
    };
    let mut chord = Chord {
        mods: Vec::new(),
        key: None,
        literal: None,
    };
    let last = if plus_key { None } else { parts.pop() };
    for part in parts {
        match modifier(part) {
            Some(m) if !chord.mods.contains(&m) => chord.mods.push(m),
            Some(_) => {}
            None => {
                return Err(format!(
                    "'{part}' in '{trimmed}' is not a modifier (ctrl, shift, alt, super); \
                     only the last part of a chord names the key. {}",
                    valid_names()
                ))
            }
        }
    }
    if plus_key {
        chord.key = Some("plus");
        return Ok(chord);
    }
    let last = last.unwrap_or_default();
    let mut chars = last.chars();
    match (chars.next(), chars.next()) {
        (Some(c), None) if c.is_ascii_alphanumeric() => chord.literal = Some(c),
        (Some(c), None) => match PUNCTUATION.iter().find(|(p, _)| *p == c) {
            Some((_, sym)) => chord.key = Some(sym),
            None => return Err(unknown(last, trimmed)),
        },
        _ => {
            if let Some(sym) = named(last) {
                chord.key = Some(sym);
            } else if let Some(m) = modifier(last) {
                if !chord.mods.contains(&m) {
                    chord.mods.push(m);
                }
            } else {
                return Err(unknown(last, trimmed));
            }
        }
    }
    Ok(chord)
}

fn unknown(name: &str, chord: &str) -> String {
    format!("unknown key '{name}' in '{chord}'. {}", valid_names())
}

/// Every name `key press` accepts, for error messages.
pub fn valid_names() -> String {
    let named: Vec<String> = NAMED
        .iter()
        .map(|(sym, aliases)| {
            if aliases.is_empty() {
                sym.to_string()
            } else {
                format!("{sym} ({})", aliases.join("/"))
            }
        })
        .collect();
    format!(
        "Valid keys: one character (a-z, A-Z, 0-9, punctuation such as / or -), F1-F24, {}. \
         Modifiers, joined with '+': ctrl (control/ctl), shift, alt (option/opt), \
         super (meta/win/cmd/command/logo). Names are case-insensitive.",
        named.join(", ")
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn chord(s: &str) -> Chord {
        parse_chord(s).unwrap_or_else(|e| panic!("{s}: {e}"))
    }

    #[test]
    fn chords_map_to_xdotool_and_wtype() {
        assert_eq!(chord("ctrl+l").xdotool(), "ctrl+l");
        assert_eq!(chord("Control+L").xdotool(), "ctrl+L");
        assert_eq!(chord("Return").xdotool(), "Return");
        assert_eq!(chord("enter").xdotool(), "Return");
        assert_eq!(chord("super+shift+4").xdotool(), "super+shift+4");
        assert_eq!(chord("cmd+Page-Up").xdotool(), "super+Page_Up");
        assert_eq!(chord("win").xdotool(), "Super_L");
        assert_eq!(chord("ctrl+alt").xdotool(), "ctrl+Alt_L");
        assert_eq!(chord("ctrl+/").xdotool(), "ctrl+slash");
        assert_eq!(chord("f12").xdotool(), "F12");
        assert_eq!(chord("ctrl++").xdotool(), "ctrl+plus");
        assert_eq!(chord("+").xdotool(), "plus");
        assert_eq!(
            chord("meta+shift+t").wtype(),
            ["-M", "logo", "-M", "shift", "-k", "t", "-m", "shift", "-m", "logo"]
        );
        assert_eq!(chord("super").wtype(), ["-M", "logo", "-m", "logo"]);
        assert_eq!(chord("Escape").wtype(), ["-k", "Escape"]);
    }

    #[test]
    fn unknown_names_list_the_valid_ones() {
        for bad in ["ctrl+bogus", "F25", "f0", "hyper+a", "", "ctrl+", "é"] {
            let err = parse_chord(bad).unwrap_err();
            assert!(err.contains("Valid keys"), "{bad}: {err}");
            assert!(err.contains("Return (enter"), "{bad}: {err}");
        }
        assert!(parse_chord("ctrl+bogus")
            .unwrap_err()
            .starts_with("unknown key 'bogus'"));
        assert!(parse_chord("a+b")
            .unwrap_err()
            .contains("'a' in 'a+b' is not a modifier"));
    }
}
