//! `handnode doctor`: what works on this box, and what to install or set for the rest.
//! Read-only: it probes and reports, and never creates a token or touches a display.

use std::collections::HashMap;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use serde_json::{json, Value};

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
    out
}

/// Which build this is, and, for static glibc, whether name resolution needs NSS modules
/// that a static binary loads from the system's own glibc (docs/install.md).
/// `nsswitch` is the text of `/etc/nsswitch.conf`, if there is one.
pub fn build_check(libc: &str, is_static: bool, nsswitch: Option<&str>) -> Check {
    let detail = crate::build_info::describe();
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
        crate::build_info::LIBC,
        crate::build_info::STATIC,
        nsswitch.as_deref(),
    )];
    out.extend(display_checks(&probe, &cfg, processes));
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
    out.push(token_check(env));
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
    text.push_str(&format!("{failing} not working, {warning} warnings\n"));
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
        "build": crate::build_info::to_json(),
    })
}

/// Print the report (human text, or JSON with `json`) and return the process exit code.
pub fn main(json: bool) -> i32 {
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
    let (checks, display) = checks(&env, is_root, &processes);
    if json {
        println!(
            "{}",
            serde_json::to_string_pretty(&to_json(&checks, display)).unwrap_or_default()
        );
    } else {
        print!("{}", render(&checks));
    }
    0
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(pairs: &[(&str, &str)]) -> HashMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn xset_blanking_is_reported_with_the_fix() {
        let q = "Screen Saver:\n  prefer blanking:  yes    allow exposures:  yes\n  timeout:  600    cycle:  600\nDPMS (Energy Star):\n  Standby: 600    Suspend: 600    Off: 600\n  DPMS is Enabled\n  Monitor is On\n";
        let c = xset_blanking(q);
        assert_eq!(c.len(), 2);
        assert!(c[0].detail.contains("after 600 s"));
        assert!(c[0].fix.as_deref().unwrap().contains("xset s off"));
        assert!(c[1].fix.as_deref().unwrap().contains("xset -dpms"));
        let off = "  timeout:  0    cycle:  600\n  DPMS is Disabled\n";
        assert!(xset_blanking(off).is_empty());
    }

    #[test]
    fn lockers_and_idlers_are_named() {
        let running = ["bash", "swayidle", "swaylock", "swayidle"].map(String::from);
        let c = screen_guards(&running);
        assert_eq!(c.len(), 2, "{c:?}");
        assert!(c
            .iter()
            .any(|c| c.detail.starts_with("swayidle is running")));
        assert!(c.iter().any(|c| c
            .detail
            .starts_with("swaylock is running: the screen is locked")));
        assert!(screen_guards(&["bash".to_string()]).is_empty());
    }

    #[test]
    fn token_file_mode_and_sources() {
        let dir = std::env::temp_dir().join(format!("handnode-doctor-{}", std::process::id()));
        std::fs::create_dir_all(dir.join("handnode")).unwrap();
        let token = dir.join("handnode/token");
        std::fs::write(&token, "secret-value").unwrap();
        std::fs::set_permissions(&token, std::fs::Permissions::from_mode(0o644)).unwrap();
        let xdg = dir.display().to_string();
        let c = token_check(&env(&[("XDG_CONFIG_HOME", &xdg)]));
        assert_eq!(c.status, Status::Warn);
        assert_eq!(c.fix, Some(format!("chmod 600 {}", token.display())));
        std::fs::set_permissions(&token, std::fs::Permissions::from_mode(0o600)).unwrap();
        let c = token_check(&env(&[("XDG_CONFIG_HOME", &xdg)]));
        assert_eq!(c.status, Status::Ok);
        assert!(c.detail.contains("mode 0600"));
        assert!(!format!("{c:?}").contains("secret-value"));
        let c = token_check(&env(&[("HANDNODE_TOKEN", "secret-value")]));
        assert!(c.detail.contains("HANDNODE_TOKEN") && !c.detail.contains("secret-value"));
        let c = token_check(&env(&[("HANDNODE_TOKEN_FILE", "/nonexistent/t")]));
        assert_eq!(c.status, Status::Fail);
        let c = token_check(&env(&[("HOME", "/nonexistent-home")]));
        assert!(c
            .detail
            .contains("creates /nonexistent-home/.config/handnode/token"));
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn no_display_fails_with_what_to_set_and_exit_is_zero() {
        let e = env(&[("PATH", "/nonexistent"), ("HOME", "/nonexistent-home")]);
        // The probe reads the process environment; only the report text is checked here.
        let cfg = ToolConfig {
            display_env: Some(Default::default()),
            ..ToolConfig::default()
        };
        let processes = ProcessWatcher::start().unwrap();
        let probe = display::probe_now(&cfg, &processes);
        let c = display_checks(&probe, &cfg, &processes);
        assert_eq!(c[0].status, Status::Fail);
        assert!(c[0].detail.contains("neither WAYLAND_DISPLAY nor DISPLAY"));
        let text = render(&c);
        assert!(text.contains("[fail] display: no display"), "{text}");
        let (checks, display) = checks(&e, true, &processes);
        assert!(checks
            .iter()
            .any(|c| c.name == "user" && c.status == Status::Warn));
        let v = to_json(&checks, display);
        assert!(v["checks"].as_array().unwrap().len() >= 3);
        assert!(v["display"]["tools"]["screenshot"]["works"].is_boolean());
    }

    #[test]
    fn every_tool_that_needs_the_display_gets_a_line() {
        let probe = Probe::working_x11();
        let cfg = ToolConfig {
            display_env: Some(Default::default()),
            ..ToolConfig::default()
        };
        let lines = display_checks(&probe, &cfg, &ProcessWatcher::start().unwrap());
        let mut checked = 0;
        for tool in crate::tools::TOOLS {
            let line = lines.iter().find(|c| c.name == tool.name);
            match tool.needs {
                crate::tools::Needs::Display(_) => {
                    let line = line.unwrap_or_else(|| panic!("doctor skips {}", tool.name));
                    assert_eq!(line.status, Status::Ok, "{line:?}");
                    checked += 1;
                }
                crate::tools::Needs::Nothing | crate::tools::Needs::Bash => {
                    assert!(line.is_none(), "{line:?}")
                }
            }
        }
        assert_eq!(checked, display::gui_tools().count());
        assert!(checked > 0);
    }

    #[test]
    fn build_is_reported_and_static_glibc_warns_about_nss_modules() {
        let describe = crate::build_info::describe();
        let pi_os =
            "passwd: files\nhosts:          files mdns4_minimal [NOTFOUND=return] dns # x\n";
        for (libc, is_static) in [("musl", true), ("glibc", false)] {
            let c = build_check(libc, is_static, Some(pi_os));
            assert_eq!((c.name.as_str(), c.status), ("build", Status::Ok), "{c:?}");
            assert_eq!(c.detail, describe);
        }
        let c = build_check("glibc", true, Some(pi_os));
        assert_eq!(c.status, Status::Warn, "{c:?}");
        assert!(c.detail.starts_with(&describe), "{c:?}");
        assert!(c.detail.contains("through mdns4_minimal, which"), "{c:?}");
        assert!(c.fix.as_deref().unwrap().contains("musl"));
        for plain in [Some("hosts: files dns\n"), Some("# hosts: mdns\n"), None] {
            assert_eq!(
                build_check("glibc", true, plain).status,
                Status::Ok,
                "{plain:?}"
            );
        }
        let (checks, display) = checks(
            &env(&[("HOME", "/x")]),
            false,
            &ProcessWatcher::start().unwrap(),
        );
        assert_eq!(checks[0].name, "build");
        assert!(checks[0].detail.starts_with(&describe));
        let v = to_json(&checks, display);
        assert_eq!(v["build"]["target"], crate::build_info::TARGET);
        assert_eq!(v["build"]["libc"], crate::build_info::LIBC);
        assert_eq!(v["build"]["static"], crate::build_info::STATIC);
    }

    #[test]
    fn allow_login_without_a_token_is_flagged() {
        let tmp = crate::testutil::TempDir::new("doctor-login");
        let xdg = tmp.0.display().to_string();
        let flagged = |extra: &[(&str, &str)]| {
            let mut pairs = vec![("HANDNODE_ALLOW_LOGIN", "a@b.c"), ("XDG_CONFIG_HOME", &xdg)];
            pairs.extend_from_slice(extra);
            login_without_token(&env(&pairs))
        };
        let c = flagged(&[]).expect("no token anywhere: flagged");
        assert_eq!((c.name.as_str(), c.status), ("tailnet", Status::Warn));
        assert!(c.fix.unwrap().contains("AND bearer"));
        assert!(flagged(&[("HANDNODE_TOKEN", "t0ken")]).is_none());
        tmp.write("handnode/token", "t0ken");
        assert!(flagged(&[]).is_none(), "the default token file counts");
        assert!(login_without_token(&env(&[("XDG_CONFIG_HOME", &xdg)])).is_none());
    }

    #[test]
    fn allow_login_without_allow_host_is_flagged() {
        let processes = ProcessWatcher::start().unwrap();
        let (c, _) = checks(
            &env(&[("HANDNODE_ALLOW_LOGIN", "a@b.c"), ("HOME", "/x")]),
            false,
            &processes,
        );
        let about_host = |c: &Check| c.name == "tailnet" && c.detail.contains("ALLOW_HOST");
        assert!(c.iter().any(|c| about_host(c) && c.status == Status::Warn));
        let (c, _) = checks(
            &env(&[
                ("HANDNODE_ALLOW_LOGIN", "a@b.c"),
                ("HANDNODE_ALLOW_HOST", "box.ts.net"),
                ("HOME", "/x"),
            ]),
            false,
            &processes,
        );
        assert!(!c.iter().any(about_host));
    }
}
