//! Desktop entries (freedesktop Desktop Entry Specification 1.5) for typed app control
//! (contract §17): finding an entry by its desktop file ID under the XDG data dirs,
//! reading its `[Desktop Entry]` group, turning its `Exec` into an argv (it is never run
//! through a shell), and the one list of what `--apps` refuses ([`REFUSED_PROGRAMS`],
//! [`REFUSED_CATEGORIES`], [`vet`]).
//!
//! **IDs.** An entry's ID is its path below an `applications` directory with `/` turned
//! into `-` and `.desktop` dropped: `…/applications/kde/foo.desktop` is `kde-foo`. The
//! directories are `$XDG_DATA_HOME/applications` (default `~/.local/share`), then each
//! `$XDG_DATA_DIRS/*/applications` (default `/usr/local/share:/usr/share`), in that
//! order; the first directory that holds an ID wins. An ID is matched against the IDs a
//! walk of those directories computes, never joined onto a path, so `../x` or `a/b` can
//! name nothing; such IDs are refused by their shape before any lookup.
//!
//! **Refusals** are about what an entry can do, not what it is called: a terminal
//! emulator, `Terminal=true`, system settings and system tools, and any program that runs
//! commands by design (shells, interpreters, `env`-like launchers, privilege tools, file
//! managers, openers, launchers, editors with a command line), checked on the program's
//! file name as written and after following symlinks (`x-terminal-emulator` → `xterm`).
//! A wrapper script under another name is not opened to look inside: the owner who lists
//! an app vouches for it (an app that can run programs makes the grant a shell).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// Largest desktop file read (bytes); real ones are a few KiB (translations included).
pub const MAX_ENTRY_BYTES: u64 = 64 * 1024;
/// Longest desktop file ID accepted (bytes), a file name's limit.
pub const MAX_ID_BYTES: usize = 255;
/// Most `.desktop` files one walk of the data dirs looks at; past it the walk stops and
/// says so (a lookup that did not find its ID then says the walk was cut short).
pub const MAX_SCAN_FILES: usize = 4096;
/// Deepest subdirectory of an `applications` directory a walk enters.
pub const MAX_DEPTH: usize = 4;
/// Most entries `--apps` may name.
pub const MAX_APPS: usize = 64;
/// Most arguments an `Exec` line may hold.
pub const MAX_EXEC_ARGS: usize = 64;

/// Why a program's file name is refused: a pattern (exact, or a prefix before a trailing
/// `*`) and the reason. One list, read by [`vet`] and shown in docs/protocol.md.
pub const REFUSED_PROGRAMS: &[(&str, &str)] = &[
    // Shells.
    ("sh", SHELL),
    ("bash", SHELL),
    ("rbash", SHELL),
    ("dash", SHELL),
    ("ash", SHELL),
    ("zsh", SHELL),
    ("fish", SHELL),
    ("ksh*", SHELL),
    ("mksh", SHELL),
    ("csh", SHELL),
    ("tcsh", SHELL),
    ("nu", SHELL),
    ("elvish", SHELL),
    ("xonsh", SHELL),
    ("pwsh", SHELL),
    ("busybox", SHELL),
    // Interpreters: the entry's arguments are a program.
    ("python*", INTERPRETER),
    ("pypy*", INTERPRETER),
    ("perl*", INTERPRETER),
    ("ruby*", INTERPRETER),
    ("irb*", INTERPRETER),
    ("node*", INTERPRETER),
    ("deno", INTERPRETER),
    ("bun", INTERPRETER),
    ("lua*", INTERPRETER),
    ("php*", INTERPRETER),
    ("tclsh*", INTERPRETER),
    ("wish*", INTERPRETER),
    ("java", INTERPRETER),
    ("julia", INTERPRETER),
    ("Rscript", INTERPRETER),
    ("guile*", INTERPRETER),
    ("gjs", INTERPRETER),
    ("osascript", INTERPRETER),
    ("awk", INTERPRETER),
    ("gawk", INTERPRETER),
    ("mawk", INTERPRETER),
    // Programs whose job is to run another program.
    ("env", LAUNCHER),
    ("xargs", LAUNCHER),
    ("nohup", LAUNCHER),
    ("setsid", LAUNCHER),
    ("nice", LAUNCHER),
    ("timeout", LAUNCHER),
    ("stdbuf", LAUNCHER),
    ("script", LAUNCHER),
    ("tmux", LAUNCHER),
    ("screen", LAUNCHER),
    ("dbus-launch", LAUNCHER),
    ("dbus-run-session", LAUNCHER),
    ("systemd-run", LAUNCHER),
    ("flatpak-spawn", LAUNCHER),
    ("ssh", LAUNCHER),
    ("sudo", PRIVILEGE),
    ("su", PRIVILEGE),
    ("doas", PRIVILEGE),
    ("pkexec", PRIVILEGE),
    ("runuser", PRIVILEGE),
    // Openers and launchers: they start whatever they are pointed at.
    ("xdg-open", OPENER),
    ("gio", OPENER),
    ("gnome-open", OPENER),
    ("exo-open", OPENER),
    ("kde-open*", OPENER),
    ("kioclient*", OPENER),
    ("mimeopen", OPENER),
    ("run-mailcap", OPENER),
    ("sensible-*", OPENER),
    ("krunner", OPENER),
    ("rofi", OPENER),
    ("dmenu*", OPENER),
    ("wofi", OPENER),
    ("fuzzel", OPENER),
    ("bemenu*", OPENER),
    ("tofi*", OPENER),
    ("albert", OPENER),
    ("ulauncher", OPENER),
    ("synapse", OPENER),
    ("gmrun", OPENER),
    ("xfce4-appfinder", OPENER),
    // Terminal emulators (also refused by their category).
    ("x-terminal-emulator", TERMINAL),
    ("xterm", TERMINAL),
    ("uxterm", TERMINAL),
    ("lxterm", TERMINAL),
    ("koi8rxterm", TERMINAL),
    ("gnome-terminal*", TERMINAL),
    ("kgx", TERMINAL),
    ("ptyxis", TERMINAL),
    ("konsole", TERMINAL),
    ("xfce4-terminal", TERMINAL),
    ("mate-terminal", TERMINAL),
    ("lxterminal", TERMINAL),
    ("qterminal", TERMINAL),
    ("terminator", TERMINAL),
    ("tilix", TERMINAL),
    ("alacritty", TERMINAL),
    ("kitty", TERMINAL),
    ("foot", TERMINAL),
    ("footclient", TERMINAL),
    ("st", TERMINAL),
    ("urxvt*", TERMINAL),
    ("rxvt*", TERMINAL),
    ("sakura", TERMINAL),
    ("terminology", TERMINAL),
    ("wezterm*", TERMINAL),
    ("guake", TERMINAL),
    ("tilda", TERMINAL),
    ("yakuake", TERMINAL),
    ("cool-retro-term", TERMINAL),
    // File managers: they open and run any file.
    ("nautilus", FILE_MANAGER),
    ("dolphin", FILE_MANAGER),
    ("thunar", FILE_MANAGER),
    ("pcmanfm*", FILE_MANAGER),
    ("nemo", FILE_MANAGER),
    ("caja", FILE_MANAGER),
    ("konqueror", FILE_MANAGER),
    ("spacefm", FILE_MANAGER),
    ("krusader", FILE_MANAGER),
    ("doublecmd", FILE_MANAGER),
    ("mc", FILE_MANAGER),
    // Editors and IDEs with a command line or a terminal of their own.
    ("vi", EDITOR),
    ("vim", EDITOR),
    ("gvim", EDITOR),
    ("nvim", EDITOR),
    ("emacs*", EDITOR),
    ("code", EDITOR),
    ("code-oss", EDITOR),
    ("codium", EDITOR),
    ("geany", EDITOR),
    ("kate", EDITOR),
    ("gnome-builder", EDITOR),
    // Settings and control of the desktop itself.
    ("gnome-control-center", SETTINGS),
    ("systemsettings*", SETTINGS),
    ("xfce4-settings-manager", SETTINGS),
    ("lxqt-config*", SETTINGS),
    ("dconf-editor", SETTINGS),
    ("gsettings", SETTINGS),
    ("swaymsg", SETTINGS),
    ("i3-msg", SETTINGS),
    ("xdotool", SETTINGS),
    // Debuggers and tracers: they start (or take over) any program they are given.
    ("gdb*", DEBUGGER),
    ("lldb*", DEBUGGER),
    ("strace", DEBUGGER),
    ("ltrace", DEBUGGER),
    ("valgrind", DEBUGGER),
    ("perf", DEBUGGER),
    // More programs whose job is to run another one (issue 35: each opened a shell).
    ("watch", LAUNCHER),
    ("flock", LAUNCHER),
    ("find", LAUNCHER),
    ("parallel", LAUNCHER),
    ("chroot", LAUNCHER),
    ("unshare", LAUNCHER),
    ("nsenter", LAUNCHER),
    ("bwrap", LAUNCHER),
    ("firejail", LAUNCHER),
    ("chrt", LAUNCHER),
    ("ionice", LAUNCHER),
    ("taskset", LAUNCHER),
    ("prlimit", LAUNCHER),
    ("time", LAUNCHER),
    ("make", LAUNCHER),
    // Web browsers: `file://` and their own devtools reach what the URL guard would refuse.
    ("chromium*", BROWSER),
    ("chrome", BROWSER),
    ("google-chrome*", BROWSER),
    ("firefox*", BROWSER),
    ("epiphany*", BROWSER),
    ("brave*", BROWSER),
    ("vivaldi*", BROWSER),
    ("opera", BROWSER),
    ("falkon", BROWSER),
    ("midori", BROWSER),
    ("x-www-browser", BROWSER),
];

/// Why an entry with one of these `Categories` is refused (patterns as in
/// [`REFUSED_PROGRAMS`]).
pub const REFUSED_CATEGORIES: &[(&str, &str)] = &[
    ("TerminalEmulator", TERMINAL),
    ("Shell", SHELL),
    ("ConsoleOnly", "runs in a terminal"),
    ("Settings", SETTINGS),
    ("DesktopSettings", SETTINGS),
    ("HardwareSettings", SETTINGS),
    ("X-GNOME-Settings-Panel", SETTINGS),
    ("X-GNOME-SystemSettings", SETTINGS),
    ("X-KDE-settings*", SETTINGS),
    ("System", "is a system tool: it administers the box"),
    ("PackageManager", "installs software"),
    ("FileManager", FILE_MANAGER),
    ("IDE", EDITOR),
    ("WebBrowser", BROWSER),
];

const SHELL: &str = "is a shell";
const INTERPRETER: &str = "is an interpreter: its arguments are a program";
const LAUNCHER: &str = "runs another command by design";
const PRIVILEGE: &str = "runs commands as another user";
const OPENER: &str = "opens or launches whatever it is given";
const TERMINAL: &str = "is a terminal emulator";
const FILE_MANAGER: &str = "is a file manager: it opens and runs any file";
const EDITOR: &str = "is an editor or IDE that runs commands";
const SETTINGS: &str = "changes the system's or the desktop's settings";
const DEBUGGER: &str = "is a debugger or tracer: it runs any program it is given";
const BROWSER: &str = "is a web browser: file:// and its devtools reach past the URL guard";

/// Whether `pattern` (exact, or a prefix before a trailing `*`) names `word`.
fn matches(pattern: &str, word: &str) -> bool {
    match pattern.strip_suffix('*') {
        Some(prefix) => word.starts_with(prefix),
        None => pattern == word,
    }
}

/// The `applications` directories to look in, in precedence order.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DataDirs {
    pub dirs: Vec<PathBuf>,
}

impl DataDirs {
    /// From the XDG variables and `HOME` as `get` reads them (the daemon's environment, or
    /// a test's). Relative values are ignored, as the XDG spec says.
    pub fn from_env(get: impl Fn(&str) -> Option<String>) -> DataDirs {
        let absolute = |v: String| Some(PathBuf::from(v)).filter(|p| p.is_absolute());
        let home_data = get("XDG_DATA_HOME")
            .filter(|v| !v.is_empty())
            .and_then(absolute)
            .or_else(|| {
                get("HOME")
                    .and_then(absolute)
                    .map(|h| h.join(".local/share"))
            });
        let system = get("XDG_DATA_DIRS")
            .filter(|v| !v.trim().is_empty())
            .unwrap_or_else(|| "/usr/local/share:/usr/share".into());
        let mut dirs: Vec<PathBuf> = Vec::new();
        for dir in home_data
            .into_iter()
            .chain(system.split(':').filter_map(|d| absolute(d.to_string())))
        {
            let apps = dir.join("applications");
            if !dirs.contains(&apps) {
                dirs.push(apps);
            }
        }
        DataDirs { dirs }
    }

    /// The directories as one line, for errors.
    pub fn describe(&self) -> String {
        self.dirs
            .iter()
            .map(|d| d.display().to_string())
            .collect::<Vec<_>>()
            .join(", ")
    }

    /// Every `(id, path)` in precedence order, the first of each ID only, at most
    /// [`MAX_SCAN_FILES`] files looked at; `true` when the walk was cut short there.
    pub fn scan(&self) -> (Vec<(String, PathBuf)>, bool) {
        let mut seen = std::collections::HashSet::new();
        let mut out = Vec::new();
        let mut files = 0usize;
        for dir in &self.dirs {
            let mut found = Vec::new();
            if walk(dir, dir, 0, &mut found, &mut files) {
                for (id, path) in found {
                    if seen.insert(id.clone()) {
                        out.push((id, path));
                    }
                }
                return (out, true);
            }
            found.sort();
            for (id, path) in found {
                if seen.insert(id.clone()) {
                    out.push((id, path));
                }
            }
        }
        (out, false)
    }

    /// The file of the entry `id` (already checked by [`check_id`]).
    pub fn find(&self, id: &str) -> Result<PathBuf, String> {
        let (all, cut) = self.scan();
        match all.into_iter().find(|(i, _)| i == id) {
            Some((_, path)) => Ok(path),
            None if cut => Err(format!(
                "not found: the search stopped after {MAX_SCAN_FILES} desktop files in {}",
                self.describe()
            )),
            None => Err(format!("not found in {}", self.describe())),
        }
    }
}

/// Collect `*.desktop` files below `dir` (IDs relative to `root`); `true` when the file
/// bound was reached.
fn walk(
    root: &Path,
    dir: &Path,
    depth: usize,
    out: &mut Vec<(String, PathBuf)>,
    files: &mut usize,
) -> bool {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return false;
    };
    let mut entries: Vec<_> = entries.flatten().map(|e| e.path()).collect();
    entries.sort();
    for path in entries {
        let Ok(meta) = std::fs::metadata(&path) else {
            continue;
        };
        if meta.is_dir() {
            if depth < MAX_DEPTH && walk(root, &path, depth + 1, out, files) {
                return true;
            }
            continue;
        }
        let Some(rel) = path.strip_prefix(root).ok().and_then(Path::to_str) else {
            continue;
        };
        let Some(stem) = rel.strip_suffix(".desktop") else {
            continue;
        };
        if !meta.is_file() {
            continue;
        }
        if *files >= MAX_SCAN_FILES {
            return true;
        }
        *files += 1;
        out.push((stem.replace('/', "-"), path));
    }
    false
}

/// A desktop file ID as the operator or the agent gives it (`org.gnome.Calculator`, a
/// trailing `.desktop` allowed) in its canonical form, or why it cannot be one: letters,
/// digits, `-`, `_` and `.` only, not starting with `.` or `-`, no `..`, at most
/// [`MAX_ID_BYTES`]. A path, `../`, a slash or a space is refused here, before any lookup.
pub fn check_id(given: &str) -> Result<String, String> {
    let id = given.strip_suffix(".desktop").unwrap_or(given);
    if id.is_empty() {
        return Err(
            "an app is a desktop entry ID such as org.gnome.Calculator; got nothing".into(),
        );
    }
    if given.len() > MAX_ID_BYTES {
        return Err(format!(
            "a desktop entry ID is at most {MAX_ID_BYTES} bytes; got {}",
            given.len()
        ));
    }
    let shown = crate::base::label::name(given);
    if let Some(bad) = id
        .chars()
        .find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.')))
    {
        let what = if bad == '/' {
            "a path".to_string()
        } else {
            format!("{bad:?}")
        };
        return Err(format!(
            "{shown} is not a desktop entry ID (letters, digits, '-', '_' and '.' only; it holds {what})"
        ));
    }
    if id.starts_with(['.', '-']) || id.contains("..") {
        return Err(format!(
            "{shown} is not a desktop entry ID (it may not start with '.' or '-' or hold '..')"
        ));
    }
    Ok(id.to_string())
}

/// The `[Desktop Entry]` group of a desktop file: its keys (locale variants such as
/// `Name[fr]` skipped) with their raw values, or why the file is not a desktop entry.
pub fn parse_group(text: &str) -> Result<BTreeMap<String, String>, String> {
    let mut keys = BTreeMap::new();
    let mut group: Option<&str> = None;
    let mut seen_main = false;
    for (n, line) in text.lines().enumerate() {
        let line = line.trim_end_matches('\r');
        let trimmed = line.trim_start();
        if trimmed.is_empty() || trimmed.starts_with('#') {
            continue;
        }
        if let Some(rest) = trimmed.strip_prefix('[') {
            let name = rest
                .strip_suffix(']')
                .ok_or_else(|| format!("line {}: a group header without its ']'", n + 1))?;
            if name == "Desktop Entry" {
                if seen_main {
                    return Err("it has two [Desktop Entry] groups".into());
                }
                seen_main = true;
            } else if !seen_main {
                return Err("its first group is not [Desktop Entry]".into());
            }
            group = Some(name);
            continue;
        }
        let Some(group) = group else {
            return Err(format!("line {}: a key before any group", n + 1));
        };
        if group != "Desktop Entry" {
            continue;
        }
        let (key, value) = line
            .split_once('=')
            .ok_or_else(|| format!("line {}: neither a key=value, a group nor a comment", n + 1))?;
        let key = key.trim();
        if key.is_empty() {
            return Err(format!("line {}: an empty key", n + 1));
        }
        if key.contains('[') {
            continue; // a translation; the untranslated value is the one used
        }
        if !key.chars().all(|c| c.is_ascii_alphanumeric() || c == '-') {
            return Err(format!("line {}: {key:?} is not a key", n + 1));
        }
        if keys
            .insert(key.to_string(), value.trim().to_string())
            .is_some()
        {
            return Err(format!("{key} is given twice"));
        }
    }
    if !seen_main {
        return Err("it has no [Desktop Entry] group".into());
    }
    Ok(keys)
}

/// A `string` value with the spec's escapes (`\s`, `\n`, `\t`, `\r`, `\\`) undone; any
/// other backslash is kept as written.
pub fn unescape(value: &str) -> String {
    let mut out = String::with_capacity(value.len());
    let mut chars = value.chars();
    while let Some(c) = chars.next() {
        if c != '\\' {
            out.push(c);
            continue;
        }
        match chars.next() {
            Some('s') => out.push(' '),
            Some('n') => out.push('\n'),
            Some('t') => out.push('\t'),
            Some('r') => out.push('\r'),
            Some('\\') => out.push('\\'),
            Some(other) => {
                out.push('\\');
                out.push(other);
            }
            None => out.push('\\'),
        }
    }
    out
}

/// A list value (`a;b;c;`), escapes undone (`\;` is a literal `;`), empty items dropped.
pub fn list(value: &str) -> Vec<String> {
    let mut items = Vec::new();
    let mut cur = String::new();
    let mut chars = value.chars();
    while let Some(c) = chars.next() {
        match c {
            '\\' => match chars.next() {
                Some(';') => cur.push(';'),
                Some(other) => {
                    cur.push('\\');
                    cur.push(other);
                }
                None => cur.push('\\'),
            },
            ';' => items.push(std::mem::take(&mut cur)),
            _ => cur.push(c),
        }
    }
    items.push(cur);
    items
        .into_iter()
        .map(|s| unescape(&s))
        .filter(|s| !s.is_empty())
        .collect()
}

/// Field codes removed from `Exec`: the files/URLs/icon/name/location ones, and the
/// deprecated ones the spec says to ignore. (`%%` is a literal `%`.)
const FIELD_CODES: &str = "fFuUickdDnNvm";

/// The argv of an `Exec` value as written in the file: string escapes undone, then the
/// spec's quoting rules (arguments split at spaces; inside double quotes `\"`, `` \` ``,
/// `\$` and `\\` are the character), field codes removed (an argument that was only a
/// field code goes), `%%` made `%`. Refused: an unclosed quote, an unknown field code, no
/// program, more than [`MAX_EXEC_ARGS`] arguments.
pub fn exec_argv(raw: &str) -> Result<Vec<String>, String> {
    let exec = unescape(raw);
    let mut args: Vec<String> = Vec::new();
    let mut cur = String::new();
    // Whether `cur` is an argument even if empty (it was quoted, or held text).
    let mut started = false;
    // Whether `cur` held anything but field codes.
    let mut literal = false;
    let mut chars = exec.chars().peekable();
    let mut push = |cur: &mut String, started: &mut bool, literal: &mut bool| {
        if *started && *literal {
            args.push(std::mem::take(cur));
        }
        cur.clear();
        *started = false;
        *literal = false;
    };
    let field = |c: Option<char>, cur: &mut String, literal: &mut bool| match c {
        Some('%') => {
            cur.push('%');
            *literal = true;
            Ok(())
        }
        Some(code) if FIELD_CODES.contains(code) => Ok(()),
        Some(code) => Err(format!("Exec holds an unknown field code %{code}")),
        None => Err("Exec ends in a lone %".to_string()),
    };
    while let Some(c) = chars.next() {
        match c {
            ' ' | '\t' | '\n' => push(&mut cur, &mut started, &mut literal),
            '"' => {
                started = true;
                literal = true;
                loop {
                    match chars.next() {
                        None => return Err("Exec has an unclosed quote".into()),
                        Some('"') => break,
                        Some('\\') => match chars.next() {
                            Some(e @ ('"' | '`' | '$' | '\\')) => cur.push(e),
                            Some(other) => {
                                cur.push('\\');
                                cur.push(other);
                            }
                            None => return Err("Exec has an unclosed quote".into()),
                        },
                        Some('%') => field(chars.next(), &mut cur, &mut literal)?,
                        Some(other) => cur.push(other),
                    }
                }
            }
            '%' => {
                started = true;
                field(chars.next(), &mut cur, &mut literal)?;
            }
            other => {
                started = true;
                literal = true;
                cur.push(other);
            }
        }
    }
    push(&mut cur, &mut started, &mut literal);
    if args.first().is_none_or(|p| p.is_empty()) {
        return Err("Exec names no program".into());
    }
    if args.len() > MAX_EXEC_ARGS {
        return Err(format!(
            "Exec holds {} arguments; at most {MAX_EXEC_ARGS}",
            args.len()
        ));
    }
    Ok(args)
}

/// One desktop entry, read and resolved.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DesktopEntry {
    /// The desktop file ID, without `.desktop`.
    pub id: String,
    pub path: PathBuf,
    /// `Name`, untranslated.
    pub name: String,
    /// `Exec` as an argv, field codes removed; `argv[0]` as written.
    pub argv: Vec<String>,
    /// `argv[0]` found on `PATH` (or as given when absolute); `None`: not installed.
    pub program: Option<PathBuf>,
    pub categories: Vec<String>,
    /// `Terminal=true`.
    pub terminal: bool,
    /// `NoDisplay=true`: not shown in menus.
    pub no_display: bool,
}

/// Find `name` on `path` (colon-separated) as an executable file; an absolute name is
/// taken as it is when it is one.
pub fn which(name: &str, path: &str) -> Option<PathBuf> {
    use std::os::unix::fs::PermissionsExt;
    let executable = |p: &Path| {
        std::fs::metadata(p).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
    };
    if name.contains('/') {
        let p = PathBuf::from(name);
        return (p.is_absolute() && executable(&p)).then_some(p);
    }
    path.split(':')
        .filter(|d| d.starts_with('/'))
        .map(|d| Path::new(d).join(name))
        .find(|p| executable(p))
}

impl DesktopEntry {
    /// Read the entry `id` at `path`, its program looked up on `search_path`; `Err` says
    /// why it is no application at all (not an application, hidden, no `Exec`, a file
    /// that is not a desktop entry). See [`DesktopEntry::installed`].
    pub fn load(id: &str, path: &Path, search_path: &str) -> Result<DesktopEntry, String> {
        use std::io::Read;
        let file = std::fs::File::open(path).map_err(|e| format!("cannot be read: {e}"))?;
        let mut text = String::new();
        file.take(MAX_ENTRY_BYTES + 1)
            .read_to_string(&mut text)
            .map_err(|e| format!("cannot be read: {e}"))?;
        if text.len() as u64 > MAX_ENTRY_BYTES {
            return Err(format!(
                "is larger than {MAX_ENTRY_BYTES} bytes, not a desktop entry"
            ));
        }
        let keys = parse_group(&text)?;
        let get = |k: &str| keys.get(k).map(|v| unescape(v));
        let flag = |k: &str| keys.get(k).is_some_and(|v| v == "true");
        match get("Type").as_deref() {
            Some("Application") => {}
            Some(other) => return Err(format!("is not an application (Type={other})")),
            None => return Err("has no Type".into()),
        }
        if flag("Hidden") {
            return Err("is deleted (Hidden=true)".into());
        }
        let raw_exec = keys.get("Exec").ok_or(
            "has no Exec line (an entry started by D-Bus activation alone cannot be opened here)",
        )?;
        let argv = exec_argv(raw_exec)?;
        let program = which(&argv[0], search_path);
        Ok(DesktopEntry {
            id: id.to_string(),
            path: path.to_path_buf(),
            name: get("Name").unwrap_or_else(|| id.to_string()),
            argv,
            program,
            categories: keys.get("Categories").map(|v| list(v)).unwrap_or_default(),
            terminal: flag("Terminal"),
            no_display: flag("NoDisplay"),
        })
    }

    /// Whether a menu would show it: its program is installed, and it is neither
    /// `NoDisplay` nor a terminal program.
    pub fn displayable(&self) -> bool {
        self.program.is_some() && !self.no_display && !self.terminal
    }

    /// The program to run, or why there is none.
    pub fn installed(&self) -> Result<&Path, String> {
        self.program
            .as_deref()
            .ok_or_else(|| format!("its program {} is not installed", self.argv[0]))
    }
}

/// Why `--apps` refuses `entry`, or `Ok`: `Terminal=true`, a refused category
/// ([`REFUSED_CATEGORIES`]), a refused program ([`REFUSED_PROGRAMS`]) by the name in
/// `Exec` or by the file a symlink chain ends at, or a program that is not installed.
pub fn vet(entry: &DesktopEntry) -> Result<(), String> {
    if entry.terminal {
        return Err("it runs in a terminal (Terminal=true)".into());
    }
    // In the table's order, so a terminal says so even when it is also `System`.
    for (pattern, why) in REFUSED_CATEGORIES {
        if let Some(category) = entry.categories.iter().find(|c| matches(pattern, c)) {
            return Err(format!("it {why} (Categories has {category})"));
        }
    }
    let program = entry.program.as_deref();
    let names = [
        Path::new(&entry.argv[0]).file_name().map(PathBuf::from),
        program.and_then(Path::file_name).map(PathBuf::from),
        program
            .and_then(|p| std::fs::canonicalize(p).ok())
            .and_then(|p| p.file_name().map(PathBuf::from)),
    ];
    for name in names.iter().flatten() {
        let Some(name) = name.to_str() else {
            continue;
        };
        if let Some((_, why)) = REFUSED_PROGRAMS.iter().find(|(p, _)| matches(p, name)) {
            let shown = if name == entry.argv[0] {
                name.to_string()
            } else {
                format!("{} ({name})", entry.argv[0])
            };
            return Err(format!("its program {shown} {why}"));
        }
    }
    entry.installed().map(|_| ())
}

/// `--apps`: each ID checked, found, read and vetted, in the order given (duplicates
/// once), or the first refusal, which names the entry and the reason.
pub fn resolve_apps(
    ids: &[String],
    dirs: &DataDirs,
    search_path: &str,
) -> Result<Vec<DesktopEntry>, String> {
    if ids.len() > MAX_APPS {
        return Err(format!("names {} apps; at most {MAX_APPS}", ids.len()));
    }
    let mut out: Vec<DesktopEntry> = Vec::new();
    for given in ids {
        let id = check_id(given)?;
        if out.iter().any(|e| e.id == id) {
            continue;
        }
        let path = dirs.find(&id).map_err(|why| format!("{id}: {why}"))?;
        let entry = DesktopEntry::load(&id, &path, search_path)
            .map_err(|why| format!("{id} ({}) {why}", path.display()))?;
        vet(&entry).map_err(|why| format!("{id} ({}) is refused: {why}", path.display()))?;
        out.push(entry);
    }
    Ok(out)
}

#[cfg(test)]
mod tests;
