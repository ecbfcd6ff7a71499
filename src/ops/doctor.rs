//! `handnode doctor`: what works on this box, and what to install or set for the rest.
//! Read-only: it probes and reports, and never creates a token or touches a display. The
//! one thing it starts is the browser tier's test browser, which it destroys again.

use std::collections::HashMap;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::{json, Value};

use crate::base::evdev::{Chord, Verdict};
use crate::config::{self, DisplayBackend};
use crate::tools::display::{self, Backend, Probe};
use crate::tools::process::ProcessWatcher;
use crate::tools::ToolConfig;

/// How a check came out.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Status {
    Ok,
    /// Works, but something will bite (blanking, loose file mode, root).
    Warn,
    /// Does not work here.
    Fail,
}

impl Status {
    fn as_str(self) -> &'static str {
        match self {
            Status::Ok => "ok",
            Status::Warn => "warn",
            Status::Fail => "fail",
        }
    }
}

/// One line of the report.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Check {
    pub name: String,
    pub status: Status,
    pub detail: String,
    /// What to do about it.
    pub fix: Option<String>,
}

fn check(name: &str, status: Status, detail: impl Into<String>, fix: Option<String>) -> Check {
    Check {
        name: name.to_string(),
        status,
        detail: detail.into(),
        fix,
    }
}

/// Screen lockers: while one runs, screenshots show the lock screen. Names as in
/// `/proc/<pid>/comm` (at most 15 bytes).
const LOCKERS: &[&str] = &[
    "swaylock",
    "i3lock",
    "xsecurelock",
    "slock",
    "waylock",
    "gtklock",
    "hyprlock",
    "physlock",
    "xlock",
    "kscreenlocker_g",
];
/// Idle daemons and screensavers: they blank or lock the screen after a while.
const IDLERS: &[&str] = &[
    "swayidle",
    "xss-lock",
    "xautolock",
    "hypridle",
    "xscreensaver",
    "light-locker",
    "gnome-screensav",
    "mate-screensave",
    "cinnamon-screen",
    "xfce4-screensav",
];

/// Process names (`comm`) of everything running.
fn running_commands() -> Vec<String> {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    dir.filter_map(Result::ok)
        .filter(|e| {
            e.file_name()
                .to_string_lossy()
                .bytes()
                .all(|b| b.is_ascii_digit())
        })
        .filter_map(|e| std::fs::read_to_string(e.path().join("comm")).ok())
        .map(|c| c.trim().to_string())
        .collect()
}

/// Lockers and idle daemons among `commands`.
pub fn screen_guards(commands: &[String]) -> Vec<Check> {
    let mut out = Vec::new();
    let mut seen = std::collections::BTreeSet::new();
    for c in commands {
        if !seen.insert(c.clone()) {
            continue;
        }
        if LOCKERS.contains(&c.as_str()) {
            out.push(check(
                "screen lock",
                Status::Warn,
                format!("{c} is running: the screen is locked, so screenshots show the lock screen and input goes to it"),
                Some("unlock the session before lending the box".into()),
            ));
        } else if IDLERS.contains(&c.as_str()) {
            out.push(check(
                "screen blanking",
                Status::Warn,
                format!("{c} is running and may blank or lock the screen when the box is idle, which makes screenshots useless"),
                Some(format!("stop {c} while the box is lent, or raise its timeouts")),
            ));
        }
    }
    out
}

/// Blanking settings from `xset q`: the X screensaver timeout and DPMS.
pub fn xset_blanking(xset_q: &str) -> Vec<Check> {
    let mut out = Vec::new();
    let timeout = xset_q
        .lines()
        .find_map(|l| l.trim().strip_prefix("timeout:"))
        .and_then(|rest| rest.split_whitespace().next())
        .and_then(|n| n.parse::<u64>().ok());
    if let Some(secs) = timeout.filter(|s| *s > 0) {
        out.push(check(
            "screen blanking",
            Status::Warn,
            format!("the X screensaver blanks the screen after {secs} s idle"),
            Some("run `xset s off` in the session (and `xset -dpms`)".into()),
        ));
    }
    if xset_q.contains("DPMS is Enabled") {
        out.push(check(
            "screen blanking",
            Status::Warn,
            "DPMS is enabled: the monitor powers down when idle",
            Some("run `xset -dpms` in the session".into()),
        ));
    }
    out
}

/// The token file in use (or the one `serve` would create) and its mode.
/// Whether a daemon runs on this state dir, where it listens and how many grants it keeps
/// live (issue 37: a new user could not tell from doctor whether one was up).
fn daemon_check(env: &HashMap<String, String>) -> Check {
    let dir = env
        .get("HANDNODE_STATE_DIR")
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
        .or_else(|| config::default_state_dir(env));
    match dir {
        Some(dir) => daemon_on(&dir),
        None => check(
            "daemon",
            Status::Warn,
            "no state dir is known (HOME is unset): cannot tell whether a daemon runs",
            Some("set HOME or --state-dir / HANDNODE_STATE_DIR".into()),
        ),
    }
}

/// [`daemon_check`] for `dir`: a daemon runs there when the kernel lists a lock on its lock
/// file (read from `/proc/locks`, so asking takes no lock a starting daemon could trip on).
pub fn daemon_on(dir: &Path) -> Check {
    let lock = dir.join(crate::base::statedir::LOCK_FILE);
    let holder = std::fs::metadata(&lock).ok().and_then(|meta| {
        use std::os::unix::fs::MetadataExt;
        let locks = std::fs::read_to_string("/proc/locks").ok()?;
        lock_holder(&locks, meta.dev(), meta.ino())
    });
    let Some(pid) = holder else {
        return check(
            "daemon",
            Status::Ok,
            format!(
                "none runs on {} (start one: handnode, or systemctl --user start handnode)",
                dir.display()
            ),
            None,
        );
    };
    let listens = listening_on(pid);
    let listens = if listens.is_empty() {
        "where it listens is not readable from here".to_string()
    } else {
        format!("listening on {}", listens.join(", "))
    };
    let live = std::fs::read(dir.join(crate::grants::persist::FILE_NAME))
        .ok()
        .and_then(|bytes| {
            crate::grants::persist::parse(&bytes, crate::base::timefmt::now_unix()).ok()
        })
        .map_or(0, |report| report.grants.len());
    check(
        "daemon",
        Status::Ok,
        format!(
            "handnode pid {pid} runs on {}, {listens}; {live} live grant(s) kept",
            dir.display()
        ),
        None,
    )
}

/// The pid that `/proc/locks` says holds a `FLOCK` on the file of device `dev` and inode
/// `ino`. Lines read `1: FLOCK  ADVISORY  WRITE 1234 fd:01:5678 0 EOF` (device in hex).
fn lock_holder(locks: &str, dev: u64, ino: u64) -> Option<u32> {
    let (major, minor) = (rustix::fs::major(dev), rustix::fs::minor(dev));
    locks.lines().find_map(|line| {
        let fields: Vec<&str> = line.split_whitespace().collect();
        let at = fields.iter().position(|f| *f == "FLOCK")?;
        let pid: u32 = fields.get(at + 3)?.parse().ok()?;
        let mut id = fields.get(at + 4)?.split(':');
        let (ma, mi, inode) = (id.next()?, id.next()?, id.next()?);
        let same = u32::from_str_radix(ma, 16).ok()? == major
            && u32::from_str_radix(mi, 16).ok()? == minor
            && inode.parse::<u64>().ok()? == ino;
        same.then_some(pid)
    })
}

/// The TCP addresses and Unix socket paths process `pid` listens on: its socket inodes
/// (`/proc/PID/fd`) found among the listening sockets of `/proc/net/{tcp,tcp6,unix}`.
fn listening_on(pid: u32) -> Vec<String> {
    let Ok(fds) = std::fs::read_dir(format!("/proc/{pid}/fd")) else {
        return Vec::new();
    };
    let inodes: std::collections::HashSet<String> = fds
        .flatten()
        .filter_map(|e| std::fs::read_link(e.path()).ok())
        .filter_map(|t| {
            let t = t.to_string_lossy().into_owned();
            Some(t.strip_prefix("socket:[")?.strip_suffix(']')?.to_string())
        })
        .collect();
    let mut out = Vec::new();
    for table in ["tcp", "tcp6"] {
        let text = std::fs::read_to_string(format!("/proc/{pid}/net/{table}")).unwrap_or_default();
        out.extend(tcp_listeners(&text, &inodes));
    }
    let unix = std::fs::read_to_string(format!("/proc/{pid}/net/unix")).unwrap_or_default();
    for line in unix.lines().skip(1) {
        let f: Vec<&str> = line.split_whitespace().collect();
        // Num RefCount Protocol Flags Type St Inode Path; Flags 00010000 is a listener.
        if f.len() >= 8 && f[3] == "00010000" && inodes.contains(f[6]) {
            out.push(f[7].to_string());
        }
    }
    out
}

/// The listening (`st` 0A) sockets of a `/proc/net/tcp{,6}` table whose inode is in
/// `inodes`, as `addr:port`.
fn tcp_listeners(table: &str, inodes: &std::collections::HashSet<String>) -> Vec<String> {
    table
        .lines()
        .skip(1)
        .filter_map(|line| {
            let f: Vec<&str> = line.split_whitespace().collect();
            if f.len() < 10 || f[3] != "0A" || !inodes.contains(f[9]) {
                return None;
            }
            let (addr, port) = f[1].split_once(':')?;
            let port = u16::from_str_radix(port, 16).ok()?;
            // The kernel prints each 32-bit word of the address in host (little-endian) order.
            let words: Vec<u32> = (0..addr.len() / 8)
                .map(|i| u32::from_str_radix(&addr[i * 8..i * 8 + 8], 16).map(u32::from_be))
                .collect::<Result<_, _>>()
                .ok()?;
            let bytes: Vec<u8> = words.iter().flat_map(|w| w.to_be_bytes()).collect();
            let ip = match bytes.len() {
                4 => std::net::IpAddr::from(<[u8; 4]>::try_from(bytes).ok()?),
                16 => std::net::IpAddr::from(<[u8; 16]>::try_from(bytes).ok()?),
                _ => return None,
            };
            Some(std::net::SocketAddr::new(ip, port).to_string())
        })
        .collect()
}

pub fn token_check(env: &HashMap<String, String>) -> Check {
    let nonempty = |k: &str| env.get(k).filter(|v| !v.is_empty());
    if let Some(path) = nonempty("HANDNODE_TOKEN_FILE") {
        return file_check(Path::new(path), "--token-file / HANDNODE_TOKEN_FILE", true);
    }
    if nonempty(config::TOKEN_ENV).is_some() {
        return check(
            "admin token",
            Status::Ok,
            format!("from env {} (not shown)", config::TOKEN_ENV),
            None,
        );
    }
    if let Some(dir) = nonempty("CREDENTIALS_DIRECTORY") {
        let path = Path::new(dir).join(config::CREDENTIAL_NAME);
        if path.exists() {
            return file_check(&path, "systemd credential", true);
        }
    }
    let dir = nonempty("HANDNODE_CONFIG_DIR")
        .map(PathBuf::from)
        .or_else(|| config::default_config_dir(env));
    match dir.map(|d| d.join(config::TOKEN_FILE_NAME)) {
        Some(path) if path.exists() => file_check(&path, "default token file", true),
        Some(path) => check(
            "admin token",
            Status::Ok,
            format!(
                "no token file yet; `handnode` creates {} (mode 0600) at first start unless \
                 another authentication is configured",
                path.display()
            ),
            None,
        ),
        None => check(
            "admin token",
            Status::Fail,
            "cannot tell where the config dir is (no HOME or XDG_CONFIG_HOME)",
            Some("set HOME, or pass --config-dir / --token-file".into()),
        ),
    }
}

fn file_check(path: &Path, source: &str, must_exist: bool) -> Check {
    match std::fs::metadata(path) {
        Ok(meta) => {
            let mode = meta.permissions().mode() & 0o777;
            if mode & 0o077 != 0 {
                check(
                    "admin token",
                    Status::Warn,
                    format!(
                        "{} ({source}) has mode {mode:04o}: other users can read the admin token",
                        path.display()
                    ),
                    Some(format!("chmod 600 {}", path.display())),
                )
            } else {
                check(
                    "admin token",
                    Status::Ok,
                    format!("{} ({source}), mode {mode:04o}", path.display()),
                    None,
                )
            }
        }
        Err(e) if must_exist => check(
            "admin token",
            Status::Fail,
            format!("{} ({source}) cannot be read: {e}", path.display()),
            Some("point --token-file at an existing file holding the token".into()),
        ),
        Err(_) => check("admin token", Status::Ok, "no token file", None),
    }
}

/// A login allow-list with no token: `tailscale serve` connects from loopback, so any local
/// process that sends the same `Tailscale-User-Login` header is that login. The token is
/// looked for exactly where `serve` looks (`config::resolve_token`).
pub fn login_without_token(env: &HashMap<String, String>) -> Option<Check> {
    if !list_env(env, "HANDNODE_ALLOW_LOGIN") {
        return None;
    }
    let nonempty = |k: &str| env.get(k).filter(|v| !v.is_empty());
    let token_file = nonempty("HANDNODE_TOKEN_FILE").map(PathBuf::from);
    let config_dir = nonempty("HANDNODE_CONFIG_DIR")
        .map(PathBuf::from)
        .or_else(|| config::default_config_dir(env));
    match config::resolve_token(token_file.as_deref(), env, config_dir.as_deref()) {
        // A token that cannot be read is the "admin token" check's failure already.
        Ok(Some(_)) | Err(_) => None,
        Ok(None) => Some(check(
            "tailnet",
            Status::Warn,
            "HANDNODE_ALLOW_LOGIN is set without an admin token: `tailscale serve` connects \
             from loopback, so any local process that sends Tailscale-User-Login with that \
             login gets in as the owner",
            Some(
                "configure a token as well (HANDNODE_TOKEN_FILE or <config dir>/token): \
                 tailnet login AND bearer"
                    .into(),
            ),
        )),
    }
}

fn list_env(env: &HashMap<String, String>, key: &str) -> bool {
    env.get(key)
        .is_some_and(|v| v.split(',').any(|s| !s.trim().is_empty()))
}

/// Which wall stands between a throwaway browser and handnode's files
/// (`HANDNODE_BROWSER_ISOLATION`, else `HANDNODE_ISOLATION`, default `auto`; §14, §21), and
/// how to get `bwrap`.
pub fn isolation_check(env: &HashMap<String, String>) -> Check {
    wall_check(env, crate::walls::Kind::Browser)
}

/// Which wall stands around every process of every non-owner grant (`HANDNODE_ISOLATION`,
/// default `auto`; §21), and how to get `bwrap`.
pub fn grant_isolation_check(env: &HashMap<String, String>) -> Check {
    wall_check(env, crate::walls::Kind::Grant)
}

/// Which wall stands around the processes of a grant with its own display
/// (`HANDNODE_OWN_DISPLAY_ISOLATION`, else `HANDNODE_ISOLATION`; §19, §21), whether it gets
/// its own network (`pasta`), and how to get them.
pub fn own_display_isolation_check(env: &HashMap<String, String>) -> Check {
    let mut c = wall_check(env, crate::walls::Kind::OwnDisplay);
    if c.status != Status::Ok {
        return c;
    }
    let network = env
        .get("HANDNODE_OWN_DISPLAY_NETWORK")
        .map(|m| m.trim().to_ascii_lowercase())
        .unwrap_or_else(|| "pasta".into());
    if network == "shared" {
        c.status = Status::Warn;
        c.detail.push_str(
            "; --own-display-network shared: their shells share the box's network namespace,              so the abstract sockets of the box's X servers and session buses stay reachable",
        );
        c.fix = Some("apt install passt, then drop --own-display-network shared".into());
        return c;
    }
    let path = env.get("PATH").map(std::ffi::OsStr::new);
    let pasta = crate::walls::probe_bwrap(path, crate::walls::Kind::OwnDisplay).and_then(|bwrap| {
        let timeout = crate::config::own_display::OwnDisplaySettings::default().start_timeout;
        crate::walls::probe_pasta(path, &bwrap, timeout)
    });
    match pasta {
        Ok(p) => {
            c.detail.push_str(&format!(
                "; each in a network namespace of its own through {}",
                p.display()
            ));
            c
        }
        Err(why) => check(
            "own display isolation",
            Status::Fail,
            format!("\"display\":\"own\" is refused: {why}"),
            Some("apt install passt, or start handnode with --own-display-network shared".into()),
        ),
    }
}

fn wall_check(env: &HashMap<String, String>, kind: crate::walls::Kind) -> Check {
    use crate::walls::Kind;
    let (name, var, walled, unwalled) = match kind {
        Kind::Browser => (
            "browser isolation",
            "HANDNODE_BROWSER_ISOLATION",
            "inside each throwaway browser the state dir, the config dir, the token file \
             and other grants' browsers are empty",
            "a throwaway browser can read every file handnode's user can (the URL \
             allow-list still refuses file: and view-source:)",
        ),
        Kind::Grant => (
            "grant isolation",
            "HANDNODE_ISOLATION",
            "every non-owner grant's bash, jobs and apps see only their own processes, \
             handnode's files and local socket are empty, and /sys/fs/cgroup is read-only \
             in a cgroup namespace of their own",
            "a grant's shell can reach the lender's channel: handnode's token, grants.json \
             and the local admin socket",
        ),
        Kind::OwnDisplay => (
            "own display isolation",
            "HANDNODE_OWN_DISPLAY_ISOLATION",
            "the bash, jobs and apps of a grant with its own display see only their own \
             processes, and other grants' displays, handnode's files, the owner's runtime \
             dir and the box's X sockets are empty (its file tools refuse them too)",
            "the shells of grants with their own display can reach each other's screens, \
             the owner's and handnode's files",
        ),
    };
    let mode = env
        .get(var)
        .or_else(|| env.get("HANDNODE_ISOLATION"))
        .map(|m| m.trim().to_ascii_lowercase())
        .unwrap_or_else(|| "auto".into());
    let get = "apt install bubblewrap (Debian/Ubuntu), then restart handnode";
    if mode == "none" {
        return check(
            name,
            Status::Warn,
            format!("none ({} none): {unwalled}", kind.flag()),
            Some(format!("{get} and drop {} none", kind.flag())),
        );
    }
    match crate::walls::probe_bwrap(env.get("PATH").map(std::ffi::OsStr::new), kind) {
        Ok(program) => check(
            name,
            Status::Ok,
            format!("bwrap ({}): {walled}", program.display()),
            None,
        ),
        Err(why) => check(
            name,
            if mode == "bwrap" {
                Status::Fail
            } else {
                Status::Warn
            },
            format!("none: {why}; {unwalled}"),
            Some(get.into()),
        ),
    }
}

/// `--apps` as `serve` would resolve it (§17): each entry looked up and vetted, every one
/// reported (where `serve` stops at the first refused and exits 2).
pub fn apps_check(ids: &[String], env: &HashMap<String, String>) -> Check {
    let (dirs, path) = crate::config::apps_lookup(env);
    let mut found = Vec::new();
    let mut refused = Vec::new();
    for id in ids {
        match crate::rules::desktop_entry::resolve_apps(std::slice::from_ref(id), &dirs, &path) {
            Ok(entries) => found.extend(entries.iter().map(|e| match &e.program {
                Some(program) => format!("{} ({})", e.id, program.display()),
                None => format!("{} ({}, not installed)", e.id, e.argv[0]),
            })),
            Err(why) => refused.push(why),
        }
    }
    if refused.is_empty() {
        return check(
            "apps",
            Status::Ok,
            format!("`apps` grants may start and drive: {}", found.join(", ")),
            None,
        );
    }
    check(
        "apps",
        Status::Fail,
        format!(
            "handnode would not start with this --apps: {}{}",
            refused.join("; "),
            if found.is_empty() {
                String::new()
            } else {
                format!(" (fine: {})", found.join(", "))
            }
        ),
        Some(
            "take the refused entries out of --apps (install a missing app, or list its \
             desktop entry under $XDG_DATA_HOME/applications)"
                .into(),
        ),
    )
}

/// The `--blocked-origins` entries of `wanted` that `blocked` lacks. An entry counts in
/// host form (`127.0.0.1:8795`) or origin form (`http://127.0.0.1:8795`, any scheme,
/// trailing `/` ignored), case-insensitively.
pub fn missing_origins(blocked: &[String], wanted: &[String]) -> Vec<String> {
    let norm = |o: &str| {
        let o = o.trim().trim_end_matches('/').to_ascii_lowercase();
        match o.split_once("://") {
            Some((_, rest)) => rest.to_string(),
            None => o,
        }
    };
    let have: Vec<String> = blocked.iter().map(|b| norm(b)).collect();
    wanted
        .iter()
        .filter(|w| !have.contains(&norm(w)))
        .cloned()
        .collect()
}

/// The command line of the process listening on TCP `port` of this box, read from
/// `/proc` (`None` when no visible process of ours listens there).
fn listening_cmdline(port: u16) -> Option<Vec<String>> {
    let mut inodes = Vec::new();
    for table in ["/proc/net/tcp", "/proc/net/tcp6"] {
        let Ok(text) = std::fs::read_to_string(table) else {
            continue;
        };
        for line in text.lines().skip(1) {
            let f: Vec<&str> = line.split_whitespace().collect();
            // local_address is ADDR:PORT in hex; state 0A is LISTEN; field 9 the inode.
            let listening = f.get(3) == Some(&"0A");
            let at_port = f
                .get(1)
                .and_then(|a| a.rsplit(':').next())
                .and_then(|p| u16::from_str_radix(p, 16).ok())
                == Some(port);
            if listening && at_port {
                inodes.extend(f.get(9).map(|i| format!("socket:[{i}]")));
            }
        }
    }
    if inodes.is_empty() {
        return None;
    }
    for proc in std::fs::read_dir("/proc").ok()?.flatten() {
        let Ok(fds) = std::fs::read_dir(proc.path().join("fd")) else {
            continue;
        };
        let owns = fds.flatten().any(|fd| {
            std::fs::read_link(fd.path())
                .is_ok_and(|l| inodes.iter().any(|i| l.as_os_str() == i.as_str()))
        });
        if owns {
            let raw = std::fs::read(proc.path().join("cmdline")).ok()?;
            return Some(
                raw.split(|b| *b == 0)
                    .filter(|w| !w.is_empty())
                    .map(|w| String::from_utf8_lossy(w).into_owned())
                    .collect(),
            );
        }
    }
    None
}

/// Whether each configured upstream (`HANDNODE_UPSTREAM`) on this box was started with
/// the admin listener's origins blocked (contract §14), as `scripts/upstream.sh` does.
pub fn upstream_origin_checks(env: &HashMap<String, String>) -> Vec<Check> {
    let listen = env
        .get("HANDNODE_LISTEN")
        .and_then(|l| l.trim().parse().ok())
        .unwrap_or(config::DEFAULT_LISTEN);
    let hosts: Vec<String> = env
        .get("HANDNODE_ALLOW_HOST")
        .map(|v| {
            v.split(',')
                .map(|h| h.trim().to_string())
                .filter(|h| !h.is_empty())
                .collect()
        })
        .unwrap_or_default();
    let wanted = crate::base::browser_argv::admin_origins(listen, &hosts);
    let fix = format!(
        "start it with scripts/upstream.sh (HANDNODE_LISTEN={listen}), or add --blocked-origins \"{}\" to its command line",
        wanted.join(";")
    );
    let mut out = Vec::new();
    for entry in env
        .get("HANDNODE_UPSTREAM")
        .into_iter()
        .flat_map(|v| v.split(','))
    {
        let Some((name, url)) = entry.trim().split_once('=') else {
            continue;
        };
        let authority = url
            .split_once("://")
            .map_or(url, |(_, rest)| rest)
            .split('/')
            .next()
            .unwrap_or("");
        let port = authority
            .rsplit_once(':')
            .and_then(|(_, p)| p.parse::<u16>().ok())
            .unwrap_or(80);
        let what = format!("upstream {name}");
        out.push(match listening_cmdline(port) {
            None => check(
                &what,
                Status::Warn,
                format!(
                    "cannot tell whether {url} blocks the admin listener's origins: no process \
                     of this user listens on port {port}"
                ),
                Some(fix.clone()),
            ),
            Some(argv) => {
                let missing =
                    missing_origins(&crate::base::browser_argv::blocked_origins(&argv), &wanted);
                if missing.is_empty() {
                    check(
                        &what,
                        Status::Ok,
                        format!("{url} blocks every origin of the admin listener"),
                        None,
                    )
                } else {
                    check(
                        &what,
                        Status::Warn,
                        format!(
                            "{url} does not block the admin listener's origins {}: a page in it \
                             could reach the admin API",
                            missing.join(", ")
                        ),
                        Some(fix.clone()),
                    )
                }
            }
        });
    }
    out
}

/// The display backend setting from the environment (`HANDNODE_DISPLAY_BACKEND`).
fn backend_setting(env: &HashMap<String, String>) -> DisplayBackend {
    match env
        .get("HANDNODE_DISPLAY_BACKEND")
        .map(|s| s.trim().to_ascii_lowercase())
        .as_deref()
    {
        Some("x11") => DisplayBackend::X11,
        Some("wayland") => DisplayBackend::Wayland,
        Some("none") => DisplayBackend::None,
        _ => DisplayBackend::Auto,
    }
}

/// Checks about the display, from one probe.
pub fn display_checks(probe: &Probe, cfg: &ToolConfig, processes: &ProcessWatcher) -> Vec<Check> {
    let mut out = Vec::new();
    match (&probe.problem, probe.backend) {
        (Some(problem), _) => out.push(check("display", Status::Fail, problem.clone(), None)),
        (None, Some(backend)) => {
            let displays: Vec<String> = probe
                .displays
                .iter()
                .map(|d| format!("{} = {} {}x{}", d.index, d.name, d.width, d.height))
                .collect();
            out.push(check(
                "display",
                Status::Ok,
                format!(
                    "{} backend; displays: {}",
                    backend.as_str(),
                    displays.join(", ")
                ),
                None,
            ));
        }
        (None, None) => out.push(check("display", Status::Fail, "no display backend", None)),
    }
    for note in &probe.notes {
        out.push(check("display", Status::Warn, note.clone(), None));
    }
    if probe.problem.is_none() {
        // One line per registered tool that needs the display; `bash` and `sys_info`
        // need nothing doctor can fix from here.
        for (tool, gui) in display::gui_tools() {
            out.push(match probe.ready(gui) {
                Ok(()) => check(tool.name, Status::Ok, "works", None),
                Err(why) => check(tool.name, Status::Fail, why, None),
            });
        }
    }
    if probe.problem.is_none() && probe.ready(display::Gui::A11ySnapshot).is_ok() {
        out.push(
            match crate::tools::a11y::bus_status(&probe.env, cfg.a11y_call_timeout) {
                Ok(detail) => check(
                    "accessibility bus",
                    Status::Ok,
                    detail,
                    Some(crate::tools::a11y::TURN_ON.into()),
                ),
                Err(why) => check(
                    "accessibility bus",
                    Status::Warn,
                    why,
                    Some(crate::tools::a11y::TURN_ON.into()),
                ),
            },
        );
    }
    if probe.problem.is_none() && probe.backend == Some(Backend::X11) {
        match display::query(probe, cfg, processes, "xset", &["q"]) {
            Ok(text) => out.extend(xset_blanking(&text)),
            Err(why) => out.push(check(
                "screen blanking",
                Status::Warn,
                format!("cannot check X screen blanking: {why}"),
                None,
            )),
        }
    }
    if probe.problem.is_none() {
        out.push(box_view_check(probe));
    }
    out
}

/// Whether the lender can watch the box's own display live (§23): x11vnc or wayvnc.
pub fn box_view_check(probe: &Probe) -> Check {
    let server = probe.backend.map(display::boxview::server_for);
    match (display::boxview::missing(probe), server) {
        (None, Some((name, _))) => check(
            "box live view",
            Status::Ok,
            format!(
                "{name} is installed: GET /attach/{{id}}/view shows the box's display to you                  for a grant on it (started for the first viewer)"
            ),
            None,
        ),
        (Some(why), server) => check(
            "box live view",
            Status::Warn,
            why,
            server.map(|(_, package)| format!("apt install {package}")),
        ),
        (None, None) => check("box live view", Status::Warn, "no display backend", None),
    }
}

/// Which build this is, and, for static glibc, whether name resolution needs NSS modules
/// that a static binary loads from the system's own glibc (docs/install.md).
/// `nsswitch` is the text of `/etc/nsswitch.conf`, if there is one.
pub fn build_check(libc: &str, is_static: bool, nsswitch: Option<&str>) -> Check {
    let detail = crate::base::build_info::describe();
    if libc != "glibc" || !is_static {
        return check("build", Status::Ok, detail, None);
    }
    // `hosts: files mdns4_minimal [NOTFOUND=return] dns`: files and dns are built into a
    // static glibc; any other module is dlopen()ed together with the system's libc.so.6.
    let hosts = nsswitch.unwrap_or_default().lines().find_map(|l| {
        let l = l.split('#').next().unwrap_or_default().trim();
        l.strip_prefix("hosts:").map(str::to_string)
    });
    let modules: Vec<String> = hosts
        .unwrap_or_default()
        .split_whitespace()
        .filter(|m| !m.starts_with('[') && *m != "files" && *m != "dns")
        .map(String::from)
        .collect();
    if modules.is_empty() {
        return check("build", Status::Ok, detail, None);
    }
    check(
        "build",
        Status::Warn,
        format!(
            "{detail}: /etc/nsswitch.conf resolves hosts through {}, which a static glibc binary \
             loads from the system's glibc at run time; with another glibc version those names \
             (e.g. mDNS .local) may not resolve",
            modules.join(", ")
        ),
        Some(
            "give pods names DNS or /etc/hosts resolve, or use a musl build (aarch64, x86_64) \
             or one built on this box (docs/install.md)"
                .into(),
        ),
    )
}

/// Everything doctor checks, given the environment and whether we run as root. Helpers
/// (`xdotool`, `xset`, …) run through `processes`, as the daemon's do.
pub fn checks(
    env: &HashMap<String, String>,
    is_root: bool,
    processes: &ProcessWatcher,
) -> (Vec<Check>, Value) {
    let cfg = ToolConfig {
        display_backend: backend_setting(env),
        ..ToolConfig::default()
    };
    let probe = display::probe_now(&cfg, processes);
    let nsswitch = std::fs::read_to_string("/etc/nsswitch.conf").ok();
    let mut out = vec![build_check(
        crate::base::build_info::LIBC,
        crate::base::build_info::STATIC,
        nsswitch.as_deref(),
    )];
    out.extend(display_checks(&probe, &cfg, processes));
    let own_facts = display::own::doctor_facts(&cfg);
    out.push(own_display_check(&own_facts));
    let novnc = std::path::Path::new(crate::config::own_display::NOVNC_DIR)
        .join(crate::config::own_display::NOVNC_ENTRY)
        .is_file();
    out.push(live_view_check(&own_facts, novnc));
    out.push(grant_isolation_check(env));
    out.push(own_display_isolation_check(env));
    out.extend(screen_guards(&running_commands()));
    out.push(match probe.helper("notify-send") {
        Some(_) => check(
            "notifications",
            Status::Ok,
            "notify-send is installed: the person at the box is told when it is lent",
            None,
        ),
        None => check(
            "notifications",
            Status::Warn,
            "notify-send is not installed: nobody at the box is told when it is lent",
            Some("apt install libnotify-bin".into()),
        ),
    });
    if is_root {
        out.push(check(
            "user",
            Status::Warn,
            "running as root: the bash tool is a root shell for whoever holds a grant",
            Some("run handnode as the desktop's ordinary user".into()),
        ));
    } else {
        out.push(check("user", Status::Ok, "not root", None));
    }
    let slow_moves = slow_cgroup_moves(
        &std::fs::read_to_string("/proc/self/mounts").unwrap_or_default(),
        &rustix::system::uname().release().to_string_lossy(),
    );
    out.push(containment_check(
        crate::cgroup::probe(),
        slow_moves.as_deref(),
    ));
    out.push(token_check(env));
    out.push(daemon_check(env));
    out.extend(login_without_token(env));
    if list_env(env, "HANDNODE_ALLOW_LOGIN") && !list_env(env, "HANDNODE_ALLOW_HOST") {
        out.push(check(
            "tailnet",
            Status::Warn,
            "HANDNODE_ALLOW_LOGIN is set without HANDNODE_ALLOW_HOST: behind `tailscale serve` \
             requests carry Host: <box>.<tailnet>.ts.net and get 403",
            Some("set --allow-host <box>.<tailnet>.ts.net".into()),
        ));
    }
    (out, probe.to_json())
}

/// Whether a grant can have a display of its own here (§19), and what to install.
pub fn own_display_check(facts: &Value) -> Check {
    let missing: Vec<&str> = facts["missing"]
        .as_array()
        .map(|m| m.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    let install = || {
        let packages: Vec<&str> = display::own::PROGRAMS
            .iter()
            .filter(|(name, _)| missing.iter().any(|m| m.starts_with(name)))
            .map(|(_, package)| *package)
            .collect();
        Some(format!("apt install {}", packages.join(" ")))
    };
    if facts["possible"] != true {
        return check(
            "own display",
            Status::Warn,
            format!(
                "grants cannot have a display of their own (\"display\":\"own\"): missing {}",
                missing.join(", ")
            ),
            install(),
        );
    }
    if missing.is_empty() {
        return check(
            "own display",
            Status::Ok,
            "a grant may have a headless display of its own (\"display\":\"own\"): Xvfb, \
             its window manager and a session bus are installed",
            None,
        );
    }
    check(
        "own display",
        Status::Warn,
        format!(
            "own displays work, without: {} (windows unplaced or no accessibility bus)",
            missing.join(", ")
        ),
        install(),
    )
}

/// Whether the lender can watch an own display live and take the wheel (§23).
pub fn live_view_check(facts: &Value, novnc: bool) -> Check {
    let novnc_missing = || {
        format!(
            "the console has no noVNC ({}/{} is missing), so it shows the own display's \
             polling screenshot instead of the live view",
            crate::config::own_display::NOVNC_DIR,
            crate::config::own_display::NOVNC_ENTRY
        )
    };
    match facts["live_view"].as_str() {
        Some(xvnc) if novnc => check(
            "live view",
            Status::Ok,
            format!(
                "own displays run on {xvnc}: GET /attach/{{id}}/view shows one live (the \
                 console with noVNC), and POST /attach/{{id}}/wheel takes the wheel"
            ),
            None,
        ),
        Some(xvnc) => check(
            "live view",
            Status::Warn,
            format!("own displays run on {xvnc}, but {}", novnc_missing()),
            Some("apt install novnc".into()),
        ),
        None => check(
            "live view",
            Status::Warn,
            if novnc {
                display::own::live_view_missing()
            } else {
                format!(
                    "{}; and {}",
                    display::own::live_view_missing(),
                    novnc_missing()
                )
            },
            Some(if novnc {
                format!("apt install {}", display::own::XVNC.1)
            } else {
                format!("apt install {} novnc", display::own::XVNC.1)
            }),
        ),
    }
}

/// What contains a grant's processes (§16), and how to get cgroups when it is the
/// subreaper. Run outside the service, this says what a daemon started the same way gets.
/// `slow_moves` is the cgroup2 mount point when moving a process between groups may wait
/// for the kernel ([`slow_cgroup_moves`]): said, with the remount that ends it.
pub fn containment_check(
    probe: Result<crate::cgroup::Mode, String>,
    slow_moves: Option<&str>,
) -> Check {
    match probe {
        Ok(mode) => {
            let mut detail = format!(
                "cgroup ({}): each grant gets a cgroup with memory, process and CPU limits, and nothing a grant starts outlives it",
                mode.as_str()
            );
            let fix = slow_moves.map(|mount| {
                detail.push_str(&format!(
                    "; {mount} is mounted without favordynmods, so a call's move into its \
                     group can wait for an RCU grace period (about 10 ms; measured in \
                     docs/performance.md) when calls are a few ms apart"
                ));
                format!(
                    "mount -o remount,favordynmods {mount} (Linux 6.0 or later; it makes \
                     forks and exits slightly dearer instead); or leave it, nothing is unsafe"
                )
            });
            check("containment", Status::Ok, detail, fix)
        }
        Err(why) => check(
            "containment",
            Status::Warn,
            format!(
                "subreaper: {why}; a grant's processes are killed only where they can be \
                 attributed, and no limits apply"
            ),
            Some(
                "run handnode as the systemd user unit (contrib/systemd/handnode.service, which \
                 sets Delegate=yes) on a cgroup v2 system, or as root"
                    .into(),
            ),
        ),
    }
}

/// The cgroup2 mount point, when it is mounted without `favordynmods` on a kernel that
/// has the option (6.0 or later): `mounts` as `/proc/self/mounts` reads, `release` as
/// `uname -r` prints. Moving a process between groups then takes the kernel's
/// `cgroup_threadgroup_rwsem` for writing, which waits out an RCU grace period unless
/// another move came just before.
pub fn slow_cgroup_moves(mounts: &str, release: &str) -> Option<String> {
    let mut version = release.split(|c: char| !c.is_ascii_digit());
    let major: u32 = version.next()?.parse().ok()?;
    if major < 6 {
        return None;
    }
    mounts.lines().find_map(|line| {
        let fields: Vec<&str> = line.split_whitespace().collect();
        match fields.as_slice() {
            [_, mount, "cgroup2", options, ..] => {
                (!options.split(',').any(|o| o == "favordynmods")).then(|| mount.to_string())
            }
            _ => None,
        }
    })
}

/// Whether `--halt-key` (§22) could read this box's physical keyboards (under `root`, `/`
/// but in tests), which input devices it ignores as software ones, and how to allow the
/// reading. Judged for `chord`, or for [`evdev::EXAMPLE_CHORD`] when `--halt-key` is off.
pub fn halt_key_check(root: &Path, chord: Option<&Chord>, env: &HashMap<String, String>) -> Check {
    let on = chord.is_some();
    let chord = chord.cloned().unwrap_or_else(Chord::example);
    let user = env
        .get("USER")
        .or_else(|| env.get("LOGNAME"))
        .filter(|u| !u.is_empty())
        .map_or("$USER", String::as_str);
    let isolation_none = env
        .get("HANDNODE_ISOLATION")
        .is_some_and(|m| m.trim().eq_ignore_ascii_case("none"));
    halt_key_report(
        crate::ops::halt_key::survey(root, &chord),
        &chord,
        on,
        user,
        isolation_none,
    )
}

/// The command that lets `user` read the keyboards: the nodes' group, or a udev rule for
/// keyboards alone.
fn halt_key_allow(user: &str, group: Option<&str>) -> String {
    let rule = format!(
        "echo 'SUBSYSTEM==\"input\", KERNEL==\"event*\", ENV{{ID_INPUT_KEYBOARD}}==\"1\", RUN+=\"/usr/bin/setfacl -m u:{user}:r $devnode\"' | sudo tee /etc/udev/rules.d/70-handnode-halt-key.rules && sudo udevadm control --reload && sudo udevadm trigger --subsystem-match=input (the keyboards alone; needs the acl package)"
    );
    let group = match group {
        Some(g) if g != "root" => format!(
            "sudo usermod -aG {g} {user}, then log in again (or reboot) so the daemon starts in that group; or "
        ),
        _ => String::new(),
    };
    format!(
        "{group}{rule}; or run handnode as root. Either way every process of {user} can read what is typed: keep the grants' wall (--isolation auto or bwrap: a grant's /dev has no input devices)"
    )
}

/// [`halt_key_check`] from a survey.
pub fn halt_key_report(
    survey: Result<Vec<crate::ops::halt_key::Found>, crate::ops::halt_key::ListError>,
    chord: &Chord,
    on: bool,
    user: &str,
    isolation_none: bool,
) -> Check {
    use crate::ops::halt_key::OpenError;
    const NAME: &str = "halt key";
    let what = if on {
        format!("--halt-key {chord}")
    } else {
        format!("--halt-key is off; for {chord}")
    };
    // Off, nothing here is a problem yet: it is only what turning it on would give.
    let warn = if on { Status::Warn } else { Status::Ok };
    let headless = |why: String| {
        check(
            NAME,
            warn,
            format!(
                "{what}: {why}: there is no keyboard to press it on (a headless VM or container); `handnode halt` and the console still halt"
            ),
            None,
        )
    };
    let found = match survey {
        Err(crate::ops::halt_key::ListError::NoInputSubsystem(path)) => {
            return headless(format!("{} does not exist", path.display()))
        }
        Err(e) => return check(NAME, warn, format!("{what}: {e}"), None),
        Ok(found) if found.is_empty() => {
            return headless(
                "the kernel lists no input devices (/proc/bus/input/devices is empty)".into(),
            )
        }
        Ok(found) => found,
    };
    let label = |f: &crate::ops::halt_key::Found| {
        format!(
            "{:?} ({})",
            crate::base::label::cut(&f.name, 60),
            f.node.as_deref().unwrap_or("-")
        )
    };
    let mut readable = Vec::new();
    let mut denied = Vec::new();
    let mut missing = Vec::new();
    let mut software = Vec::new();
    let mut group = None;
    for f in &found {
        match (&f.verdict, &f.open) {
            (Verdict::Virtual(_), _) | (_, Some(Err(OpenError::NotPhysical(_)))) => {
                software.push(label(f))
            }
            (_, Some(Ok(()))) => readable.push(label(f)),
            (_, Some(Err(OpenError::Denied { owner, .. }))) => {
                group = owner
                    .split(':')
                    .nth(1)
                    .and_then(|g| g.split(' ').next())
                    .map(String::from);
                denied.push(format!("{} {owner}", label(f)));
            }
            (_, Some(Err(e))) => missing.push(format!("{}: {e}", label(f))),
            _ => {}
        }
    }
    let ignored = if software.is_empty() {
        String::new()
    } else {
        format!(
            "; ignored as software devices (uinput, uhid: they can neither press nor block it): {}",
            software.join(", ")
        )
    };
    if !readable.is_empty() {
        let mut detail = format!(
            "{what}: reads {} physical keyboard(s): {}{ignored}",
            readable.len(),
            readable.join(", ")
        );
        if !denied.is_empty() {
            detail.push_str(&format!("; not readable: {}", denied.join(", ")));
        }
        if isolation_none {
            detail.push_str(
                "; with --isolation none a grant's shell can read (and grab) the keyboards too",
            );
            return check(
                NAME,
                Status::Warn,
                detail,
                Some(
                    "drop --isolation none: a grant's wall has a /dev without input devices".into(),
                ),
            );
        }
        return check(NAME, Status::Ok, detail, None);
    }
    if !denied.is_empty() {
        return check(
            NAME,
            if on { Status::Fail } else { Status::Ok },
            format!(
                "{what}: this user ({user}) cannot read the physical keyboards: {}{ignored}",
                denied.join(", ")
            ),
            Some(halt_key_allow(user, group.as_deref())),
        );
    }
    if !missing.is_empty() {
        return check(
            NAME,
            warn,
            format!(
                "{what}: keyboards are listed but their nodes cannot be opened ({}): a container without the box's /dev/input?{ignored}",
                missing.join("; ")
            ),
            Some("run handnode on the box itself, or give its container the box's /dev/input".into()),
        );
    }
    check(
        NAME,
        warn,
        format!(
            "{what}: no physical keyboard with its keys is plugged in (it is watched for){ignored}"
        ),
        None,
    )
}

/// The report as people read it.
pub fn render(checks: &[Check]) -> String {
    let mut text = String::from("handnode doctor\n");
    for c in checks {
        text.push_str(&format!(
            "[{:<4}] {}: {}\n",
            c.status.as_str(),
            c.name,
            c.detail
        ));
        if let Some(fix) = &c.fix {
            text.push_str(&format!("       fix: {fix}\n"));
        }
    }
    let failing = checks.iter().filter(|c| c.status == Status::Fail).count();
    let warning = checks.iter().filter(|c| c.status == Status::Warn).count();
    let plural = |n: usize, word: &str| format!("{n} {word}{}", if n == 1 { "" } else { "s" });
    text.push_str(&format!(
        "{failing} not working, {}\n",
        plural(warning, "warning")
    ));
    text
}

/// The report as JSON.
pub fn to_json(checks: &[Check], display: Value) -> Value {
    json!({
        "checks": checks.iter().map(|c| json!({
            "name": c.name, "status": c.status.as_str(), "detail": c.detail, "fix": c.fix,
        })).collect::<Vec<_>>(),
        "display": display,
        "version": env!("CARGO_PKG_VERSION"),
        "build": crate::base::build_info::to_json(),
    })
}

/// Longest the browser tier's test start (start plus one navigation) may take.
pub const BROWSER_TEST_TIMEOUT: Duration = Duration::from_secs(60);

/// `path` names a regular file we may execute.
fn executable(path: &Path) -> bool {
    std::fs::metadata(path).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

/// Where `program` is run from: itself when it holds a `/`, else the first match on PATH.
fn find_program(program: &str, env: &HashMap<String, String>) -> Option<PathBuf> {
    if program.contains('/') {
        return executable(Path::new(program)).then(|| PathBuf::from(program));
    }
    env.get("PATH")?
        .split(':')
        .filter(|d| !d.is_empty())
        .map(|d| Path::new(d).join(program))
        .find(|p| executable(p))
}

/// What doctor says about the browser tier: the command and its script, chromium, and
/// (when those are there) a test start, with `start` doing the starting.
pub fn browser_checks(
    argv: Option<&[String]>,
    env: &HashMap<String, String>,
    is_root: bool,
    start: impl FnOnce(&[String]) -> Result<String, String>,
) -> Vec<Check> {
    let example =
        "--browser-command \"node <prefix>/node_modules/@playwright/mcp/cli.js --headless \
                   --isolated --browser chromium --executable-path /usr/lib/chromium/chromium\" \
                   (scripts/ci/playwright.sh installs the pinned @playwright/mcp)";
    let Some(argv) = argv else {
        return vec![check(
            "browser tier",
            Status::Ok,
            "off: no --browser-command, so `browser` grants are refused",
            Some(format!(
                "to lend a throwaway browser, give the daemon {example}"
            )),
        )];
    };
    let mut out = Vec::new();
    let mut runnable = true;
    match find_program(&argv[0], env) {
        Some(path) => out.push(check(
            "browser command",
            Status::Ok,
            format!("{} found at {}", argv[0], path.display()),
            None,
        )),
        None => {
            runnable = false;
            out.push(check(
                "browser command",
                Status::Fail,
                format!("{} is not an executable file or on PATH", argv[0]),
                Some(format!(
                    "install it (apt install nodejs for node) or fix {example}"
                )),
            ));
        }
    }
    let script = argv
        .get(1)
        .filter(|a| a.ends_with(".js") || a.ends_with(".mjs"));
    if let Some(script) = script {
        if !Path::new(script).is_file() {
            runnable = false;
            out.push(check(
                "browser command",
                Status::Fail,
                format!("its script {script} does not exist"),
                Some(
                    "run scripts/ci/playwright.sh, or point at your @playwright/mcp/cli.js".into(),
                ),
            ));
        }
    }
    match crate::base::browser_argv::executable_path(argv) {
        Some(chromium) if executable(Path::new(chromium)) => out.push(check(
            "browser chromium",
            Status::Ok,
            format!("{chromium} is there"),
            None,
        )),
        Some(chromium) => {
            runnable = false;
            out.push(check(
                "browser chromium",
                Status::Fail,
                format!("--executable-path {chromium} is not an executable file"),
                Some("apt install chromium (Debian's is /usr/lib/chromium/chromium)".into()),
            ));
        }
        None => out.push(check(
            "browser chromium",
            Status::Warn,
            "no --executable-path: Playwright looks for a browser it downloaded itself",
            Some("add --browser chromium --executable-path /usr/lib/chromium/chromium (apt install chromium)".into()),
        )),
    }
    if is_root && !argv.iter().any(|a| a == "--no-sandbox") {
        out.push(check(
            "browser sandbox",
            Status::Warn,
            "running as root: chromium's sandbox refuses to start as root",
            Some(
                "run handnode as an ordinary user, or add --no-sandbox to --browser-command".into(),
            ),
        ));
    }
    if !runnable {
        out.push(check(
            "browser start",
            Status::Fail,
            "not tried: the command cannot run as configured",
            None,
        ));
        return out;
    }
    out.push(match start(argv) {
        Ok(detail) => check("browser start", Status::Ok, detail, None),
        Err(why) => check(
            "browser start",
            Status::Fail,
            why,
            Some("run the command by hand to see why; see README \"Lending a browser\"".into()),
        ),
    });
    out
}

/// Start the browser tier under `base` (the daemon's `--browser-dir`: its own directory
/// there is removed again), open `about:blank` in one browser, and stop it: what a
/// `browser` grant's first call does.
pub fn test_start(argv: &[String], base: &Path) -> Result<String, String> {
    let options = crate::browser::BrowserOptions {
        argv: argv.to_vec(),
        max_browsers: 1,
        idle: BROWSER_TEST_TIMEOUT,
        start_timeout: crate::config::Timing::default().browser_start_timeout,
        dir: base.to_path_buf(),
        env: ToolConfig {
            scrub_env: vec!["HANDNODE_TOKEN".into(), "CREDENTIALS_DIRECTORY".into()],
            ..ToolConfig::default()
        },
        max_message_bytes: crate::config::Limits::default().max_outbound_bytes,
        probe: false,
        blocked_origins: Vec::new(),
        // Started as the daemon would: inside bwrap when it works here.
        isolation: match crate::walls::probe_bwrap(
            std::env::var_os("PATH").as_deref(),
            crate::walls::Kind::Browser,
        ) {
            Ok(program) => crate::browser::Isolation::Bwrap(crate::walls::Bwrap::new(
                program,
                Vec::new(),
                Vec::new(),
            )),
            Err(_) => crate::browser::Isolation::None,
        },
    };
    let browsers = crate::browser::Browsers::start(options).map_err(|e| e.to_string())?;
    let (tx, rx) = crossbeam_channel::bounded(1);
    let started = std::time::Instant::now();
    browsers.call(
        "doctor",
        "browser_navigate",
        json!({"url": "about:blank"}),
        crate::pool::CallCtl::new(),
        BROWSER_TEST_TIMEOUT,
        crate::pool::Completion::new(move |out| {
            let _ = tx.send(out);
        }),
    );
    let outcome = rx.recv_timeout(BROWSER_TEST_TIMEOUT + Duration::from_secs(5));
    let elapsed = started.elapsed();
    browsers.shutdown();
    match outcome {
        Ok(crate::wire::mcp::ToolOutput::Result(v)) if v["isError"] != true => Ok(format!(
            "started and opened about:blank in {} ms",
            elapsed.as_millis()
        )),
        Ok(crate::wire::mcp::ToolOutput::Result(v)) => Err(v["content"][0]["text"]
            .as_str()
            .unwrap_or("the browser answered an error")
            .to_string()),
        Ok(other) => Err(format!("the browser answered {other:?}")),
        Err(_) => Err(format!(
            "no answer within {} s",
            BROWSER_TEST_TIMEOUT.as_secs()
        )),
    }
}

/// Print the report (human text, or JSON with `json`) and return the process exit code.
pub fn main(args: &crate::config::DoctorArgs) -> i32 {
    let env: HashMap<String, String> = std::env::vars_os()
        .filter_map(|(k, v)| Some((k.into_string().ok()?, v.into_string().ok()?)))
        .collect();
    let is_root = rustix::process::geteuid().is_root();
    let processes = match ProcessWatcher::start() {
        Ok(p) => p,
        Err(e) => {
            eprintln!("handnode doctor: cannot start the process watcher: {e}");
            return 1;
        }
    };
    let (mut checks, display) = checks(&env, is_root, &processes);
    checks.extend(browser_checks(
        args.browser_command.as_deref(),
        &env,
        is_root,
        |argv| test_start(argv, &crate::browser::default_dir(&env)),
    ));
    if args.browser_command.is_some() {
        checks.push(isolation_check(&env));
    }
    if !args.apps.is_empty() {
        checks.push(apps_check(&args.apps, &env));
    }
    checks.extend(upstream_origin_checks(&env));
    checks.push(halt_key_check(Path::new("/"), args.halt_key.as_ref(), &env));
    let text = if args.json {
        format!(
            "{}\n",
            serde_json::to_string_pretty(&to_json(&checks, display)).unwrap_or_default()
        )
    } else {
        render(&checks)
    };
    // Not print!: it panics when stdout is gone (`handnode doctor | head`). A reader that
    // stopped reading is not a failure of the report; another write error is.
    use std::io::Write;
    let mut out = std::io::stdout().lock();
    match out.write_all(text.as_bytes()).and_then(|_| out.flush()) {
        Ok(()) => 0,
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => 0,
        Err(e) => {
            eprintln!("handnode doctor: cannot write the report: {e}");
            1
        }
    }
}

#[cfg(test)]
mod tests;
