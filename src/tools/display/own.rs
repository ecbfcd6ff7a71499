//! A grant's own display (contract §19): a headless X screen (`Xvfb` with the small
//! `matchbox-window-manager`) and a private session bus, started for one grant on its
//! first call that needs them and destroyed with it, so the agent never touches the
//! owner's screen.
//!
//! **Why Xvfb and not headless sway.** Both start well within §19's 1500 ms (2-CPU build
//! box, other builds running: `own_display_start_ms` 199–254 ms, first call to answer,
//! beside 152–196 ms for the same servers started by hand; headless sway as `nobody` with
//! the pixman renderer 100–160 ms to answer `swaymsg`). What decides: sway refuses to run
//! as root ("Unable to drop root"), and CI and root installs run the daemon as root; sway
//! needs a seat and a runtime dir per grant; the X11 helpers (`xdotool`, `scrot`) are the
//! ones the X11 tools use already, and `xdotool` needs no Wayland virtual-input protocol.
//!
//! **Xvnc where installed.** TigerVNC's `Xvnc` is an X server like Xvfb that also serves
//! the screen over RFB (§23). When it is on the box it is the display's X server, with its
//! RFB on one Unix socket in the runtime directory ([`RFB_SOCKET`], no TCP port), which the
//! admin API's live view bridges; the grant's own wall covers that socket. Without it,
//! Xvfb as before, and the live view says what to install ([`live_view_missing`]).
//!
//! **The one value every tool reads.** [`call_display`] answers, for a call, which
//! display it uses and with which variables ([`CallDisplay`]): the box's display
//! (`DisplayEnv::from_config`) or the grant's own. The graphical tools, `bash` and jobs
//! (`shell::command`), and anything else that starts a child with the display (apps, a
//! headed browser, the accessibility tools) read it there, never `DISPLAY` directly.
//!
//! **Life.** Nothing runs until the grant's first graphical call (or first `bash` /
//! `bash_start`, whose children get its variables): that call, on the grant's own display
//! thread, starts `Xvfb -displayfd 1 -nolisten tcp -auth <cookie>` (the display number is
//! learned from its stdout, without races; walled, it is the number held for it, and
//! `-displayfd` only says it is ready), the window manager, and `dbus-daemon` with a
//! session configuration of ours on a socket in the grant's 0700 runtime directory (with
//! `pasta`, its network comes first, once: [`crate::walls::OwnNet`], in a run group of its
//! own, kept until the grant ends, whatever becomes of the X server). All
//! three run in one run
//! group of the grant's cgroup (§16) and carry the job marker. It survives redials; it is
//! stopped when the grant ends, on daemon stop, and on the next start after a crash
//! ([`OwnDisplays::clean_stale`]): walled, SIGKILL to each program (its namespace's pid 1);
//! unwalled, SIGTERM, up to `--own-display-stop-timeout-ms`, then SIGKILL, then the X socket
//! a killed Xvfb leaves behind (unless a server bound it since); then the runtime directory
//! is removed. A display that died is started again by the next call.
//!
//! **Isolation.** Every grant runs as the daemon's user. A grant's tools only ever address
//! its own display; X clients need the grant's cookie (`-auth`), so a process that knows
//! only the display number is refused. The cookie file is a file of that user, so the
//! `bash`, jobs and `app_open` apps of a grant with its own display run inside its wall
//! ([`walled_command`], `crate::walls`): their own PID namespace, and the parent of the
//! runtime directories empty but for the grant's own; its file tools, which run in the
//! daemon, refuse the same paths ([`OwnDisplays::file_fence`]).
//!
//! **The display's own processes are walled too** (§21, §23): the X server parses all the
//! agent's clients send, and one that breaks it must land where the agent's shell is. The
//! X server, the window manager and the bus each run in a wall like the shell's, with no
//! network and a `/tmp` of their own ([`crate::walls::Bwrap::display_args`]); the daemon,
//! outside, learns each program's pid as the box sees it (the record, `/proc`) and kills it
//! by pidfd. Inside, every display number is free, so the daemon picks it ([`XName`]) and
//! reaches the server by a link to its socket. And they start nothing the agent chooses:
//! the window manager's key bindings run no program (`WM_KEYS`), and the private bus
//! starts only the accessibility bus and lets no one change what it starts with
//! (`write_bus_config`). A grant without its own
//! display is the owner's shell and is not walled (only `observe`, `browser`, `files`
//! and `apps` are boundaries, §7).

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::os::fd::OwnedFd;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::process::{Child, Stdio};
use std::time::Instant;

use super::wheel::{Viewers, Wheel};
use super::*;
use crate::cgroup::subreaper::Settle;
use crate::cgroup::{RunGroup, MARKER_ENV};
pub use crate::config::own_display::*;

/// Ended grants remembered so a late call of one starts no display.
const ENDED_KEPT: usize = 1024;
/// How own displays are made here (the configuration's settings).
pub type OwnOptions = OwnDisplaySettings;
/// The window manager, with the Debian package that ships it.
pub const WINDOW_MANAGER: (&str, &str) = ("matchbox-window-manager", "matchbox-window-manager");
/// What an own display needs: the X server, the window manager, the session bus.
pub const PROGRAMS: [(&str, &str); 3] = [("Xvfb", "xvfb"), WINDOW_MANAGER, ("dbus-daemon", "dbus")];
/// The X server that also serves the screen over RFB for the live view (§23), used in
/// place of `Xvfb` when installed.
pub const XVNC: (&str, &str) = ("Xvnc", "tigervnc-standalone-server");
/// The live view's RFB socket in a grant's runtime directory (§23): its only way in.
pub const RFB_SOCKET: &str = "rfb.sock";
/// Why a box without `Xvnc` has no live view: for `/view`, `doctor` and `sys_info`.
pub fn live_view_missing() -> String {
    format!(
        "live view needs {} (Debian/Ubuntu: apt install {}); own displays run on Xvfb \
         without it, and a running display keeps its X server until the grant ends",
        XVNC.0, XVNC.1
    )
}
/// The record of what runs in a runtime directory, for the stale cleanup after a crash.
const RECORD: &str = "display.json";
/// Longest stderr tail of a failed start quoted in the error.
const LOG_TAIL: usize = 400;

/// Which display one call uses, and the variables its children get: the one value every
/// tool reads (see the module doc).
#[derive(Clone, Debug)]
pub struct CallDisplay {
    /// The display variables (`DISPLAY`, `XAUTHORITY`, `XDG_RUNTIME_DIR`,
    /// `DBUS_SESSION_BUS_ADDRESS`, …) the call's helpers and children use.
    pub env: DisplayEnv,
    /// The grant's own display, when the grant has one (running or not).
    pub own: Option<Arc<OwnDisplay>>,
}

impl CallDisplay {
    /// The variables to remove from and set in a child's environment (`bash`, jobs, apps):
    /// nothing for the box's display (children inherit the daemon's session as before);
    /// for an own display, every display variable of the owner's session is removed and
    /// the own display's set, so no child reaches the owner's screen or session bus.
    pub fn child_vars(&self) -> (&'static [&'static str], Vec<(String, String)>) {
        if self.own.is_none() {
            return (&[], Vec::new());
        }
        let set = self
            .env
            .pairs()
            .iter()
            .filter(|(name, _)| *name != "PATH")
            .filter_map(|(name, value)| Some((name.to_string(), value.as_ref()?.clone())))
            .collect();
        (&OWNER_SESSION_VARS, set)
    }
}

/// What an own display's children must not inherit from the owner's session.
pub const OWNER_SESSION_VARS: [&str; 8] = [
    "DISPLAY",
    "WAYLAND_DISPLAY",
    "XDG_RUNTIME_DIR",
    "SWAYSOCK",
    "XAUTHORITY",
    "DBUS_SESSION_BUS_ADDRESS",
    "AT_SPI_BUS_ADDRESS",
    "I3SOCK",
];

/// The display a call uses (see the module doc): its grant's own display when the grant
/// asked for one (`"display":"own"`), else the box's. Never starts anything.
pub fn call_display(cx: &CallContext) -> CallDisplay {
    match own_of(cx) {
        Some(own) => CallDisplay {
            env: own
                .env_now(&cx.host.config)
                .unwrap_or_else(|| own.idle_env(&cx.host.config)),
            own: Some(own),
        },
        None => CallDisplay {
            env: DisplayEnv::from_config(&cx.host.config),
            own: None,
        },
    }
}

/// The grant's own display, when its policy asks for one.
pub fn own_of(cx: &CallContext) -> Option<Arc<OwnDisplay>> {
    if !cx.policy.own_display() {
        return None;
    }
    let grant = cx.grant.as_ref()?;
    Some(cx.host.own_displays.entry(&grant.id))
}

/// Every grant's own display, and the bound on how many run at once. One per daemon.
#[derive(Debug)]
pub struct OwnDisplays {
    opts: OwnOptions,
    /// The wall its grants' shells run in (`--own-display-isolation`); `None`: no wall.
    walls: crate::walls::OwnDisplayWall,
    entries: Mutex<HashMap<String, Arc<OwnDisplay>>>,
    /// Grants that ended, newest last (at most [`ENDED_KEPT`]): a call of one still in
    /// flight gets an ended display, never a new one nobody would stop.
    ended: Mutex<std::collections::VecDeque<String>>,
    running: Arc<Mutex<usize>>,
    /// Where the wheel's changes of hands are recorded (§23), once the daemon has an audit.
    audit: Arc<std::sync::OnceLock<crate::audit::Audit>>,
}

impl OwnDisplays {
    pub fn new(opts: OwnOptions, walls: crate::walls::OwnDisplayWall) -> OwnDisplays {
        OwnDisplays {
            opts,
            walls,
            entries: Mutex::new(HashMap::new()),
            ended: Mutex::new(std::collections::VecDeque::new()),
            running: Arc::new(Mutex::new(0)),
            audit: Arc::default(),
        }
    }

    /// Record the wheels' changes of hands in `audit` from now on.
    pub fn report_to(&self, audit: crate::audit::Audit) {
        let _ = self.audit.set(audit);
    }

    pub fn options(&self) -> &OwnOptions {
        &self.opts
    }

    /// The grant's own display (not started); for a grant that has ended, one that
    /// never starts.
    pub fn entry(&self, grant: &str) -> Arc<OwnDisplay> {
        let make = |ended: bool| {
            Arc::new(OwnDisplay {
                grant: grant.to_string(),
                opts: self.opts.clone(),
                running: Arc::clone(&self.running),
                state: DisplayState::default(),
                live: Mutex::new(None),
                shown: Mutex::new(None),
                ended: std::sync::atomic::AtomicBool::new(ended),
                isolation: self.isolation(),
                network: self.network(),
                wall: self.walls.wall.clone(),
                net_wall: self.walls.wall.clone().filter(|w| w.pasta.is_some()),
                net: Mutex::new(None),
                net_failed: Mutex::new(None),
                wheel: Arc::new(Wheel::new(
                    grant,
                    self.opts.wheel_idle,
                    Arc::clone(&self.audit),
                )),
                viewers: Arc::default(),
            })
        };
        let mut entries = lock(&self.entries);
        if let Some(own) = entries.get(grant) {
            return Arc::clone(own);
        }
        if lock(&self.ended).iter().any(|g| g == grant) {
            return make(true);
        }
        Arc::clone(
            entries
                .entry(grant.to_string())
                .or_insert_with(|| make(false)),
        )
    }

    /// The grant JSON's and `sys_info`'s `isolation` of own-display shells: `bwrap` or
    /// `none`.
    pub fn isolation(&self) -> &'static str {
        if self.walls.wall.is_some() {
            "bwrap"
        } else {
            "none"
        }
    }

    /// The grant JSON's and `sys_info`'s `network` of own displays: `pasta` (a network
    /// namespace of its own) or `shared` (also when there is no wall at all).
    pub fn network(&self) -> &'static str {
        match &self.walls.wall {
            Some(w) if w.pasta.is_some() => "pasta",
            _ => "shared",
        }
    }

    /// Why `"display":"own"` is refused on this box (`400` at attach): its wall needs
    /// `pasta` and `pasta` does not work here.
    pub fn refusal(&self) -> Option<&str> {
        self.walls.refusal.as_deref()
    }

    /// The program and its arguments up to the shell, for `bash` or a job of the grant
    /// whose own display is `own`: its wall (see `crate::walls`), in which the other
    /// grants' runtime directories are empty and only its own X socket is there, and, with
    /// `pasta`, the display's network to join. `Ok(None)` when there is no wall here; `Err`
    /// when the wall needs the display's network and it is not up (the call is refused:
    /// it never runs in the box's network).
    pub fn shell_wall(&self, own: &OwnDisplay) -> Result<Option<crate::walls::Walled>, String> {
        let Some(walls) = self.walls.wall.as_ref() else {
            return Ok(None);
        };
        let net = match &own.net_wall {
            None => None,
            Some(_) => {
                let held = lock(&own.net).clone();
                let Some(held) = held else {
                    let why = lock(&own.net_failed)
                        .clone()
                        .unwrap_or_else(|| "its display has not started".into());
                    return Err(format!(
                        "this grant's shell runs in its own display's network, which is not \
                         up: {why}"
                    ));
                };
                Some(
                    held.own
                        .join()
                        .map_err(|e| format!("cannot join this grant's own network: {e}"))?,
                )
            }
        };
        let shown = lock(&own.shown).clone();
        let dir = shown.as_ref().map(|s| s.dir.clone());
        // Its X socket, from its own socket directory, where X clients look for it.
        let socket = shown.as_ref().and_then(|s| {
            let seen_at = self
                .opts
                .x_tmp
                .join(".X11-unix")
                .join(format!("X{}", s.number));
            Some((s.x_socket.clone()?, seen_at))
        });
        let parent = self.opts.parent();
        let socket = socket.as_ref().map(|(s, at)| (s.as_path(), at.as_path()));
        let mut walled = walls.grant_args(Some((&parent, dir.as_deref(), socket)), net);
        // The live view's socket reads as /dev/null inside: with `None` security, whoever
        // connects may type; only the daemon's bridge, which enforces the wheel, does.
        if let Some(rfb) = shown.and_then(|s| s.rfb).filter(|p| p.exists()) {
            walled.cover_file(&rfb);
        }
        Ok(Some(walled))
    }

    /// What the file tools of the grant whose own display is `own` may not reach: what its
    /// shell's wall hides (see `crate::walls::Fence`). `None` when there
    /// is no wall here (then its shell reaches all of it anyway).
    pub fn file_fence(&self, own: &OwnDisplay) -> Option<crate::walls::Fence> {
        let walls = self.walls.wall.as_ref()?;
        // Compared with the paths the kernel gives for open files: with symlinks resolved.
        let real = |p: &Path| std::fs::canonicalize(p).unwrap_or_else(|_| p.to_path_buf());
        let hidden = walls
            .hide_dirs
            .iter()
            .chain(&walls.hide_files)
            .chain([&self.opts.parent()])
            .map(|p| real(p))
            .collect();
        Some(crate::walls::Fence {
            hidden,
            except: lock(&own.shown).as_ref().map(|s| real(&s.dir)),
        })
    }

    /// The grant's own display if it has been asked for, without creating one.
    pub fn get(&self, grant: &str) -> Option<Arc<OwnDisplay>> {
        lock(&self.entries).get(grant).cloned()
    }

    /// Close every live viewer of the grant's own display (a halt, §22/§23).
    pub fn end_viewers(&self, grant: &str) {
        if let Some(own) = self.get(grant) {
            own.viewers.end_all();
        }
    }

    /// Own displays running now.
    pub fn running(&self) -> usize {
        *lock(&self.running)
    }

    /// The grant ended: stop its display (if any) and forget it. Waits at most the stop
    /// timeout for each process.
    pub fn end_grant(&self, grant: &str) {
        let own = {
            let mut entries = lock(&self.entries);
            let mut ended = lock(&self.ended);
            if ended.len() >= ENDED_KEPT {
                ended.pop_front();
            }
            ended.push_back(grant.to_string());
            entries.remove(grant)
        };
        if let Some(own) = own {
            own.end();
        }
    }

    /// Daemon stop: every own display goes.
    pub fn shutdown(&self) {
        let all: Vec<Arc<OwnDisplay>> = lock(&self.entries).drain().map(|(_, d)| d).collect();
        for own in all {
            Arc::clone(&own).end();
            // Before the daemon goes: wait for a start in progress, then stop it here.
            let live = lock(&own.live).take();
            if let Some(l) = live {
                own.stop_live(l);
            }
            own.stop_net();
        }
    }

    /// After a crash: stop what a previous run of this daemon left in the parent directory
    /// (its record names the daemon's pid; a directory of a daemon still running is left
    /// alone) and remove it. Returns how many directories were cleaned.
    pub fn clean_stale(&self) -> usize {
        let parent = self.opts.parent();
        let Ok(dir) = std::fs::read_dir(&parent) else {
            return 0;
        };
        let (mut cleaned, settle) = (0, Settle::now());
        for entry in dir.flatten() {
            let path = entry.path();
            if !path.is_dir() {
                continue;
            }
            // A directory without a record is not one of ours (every start writes its
            // record first): left alone.
            let Some(r) = Record::read(&path) else {
                continue;
            };
            let daemon_alive = r.daemon_pid != std::process::id()
                && Path::new(&format!("/proc/{}", r.daemon_pid)).exists();
            if daemon_alive {
                continue;
            }
            let marked = r.pids.iter().map(|p| (p, &r.marker));
            for (pid, marker) in marked.chain(r.net_pids.iter().map(|p| (p, &r.net_marker))) {
                if carries_marker(*pid, marker, &settle) {
                    let _ = signal(*pid, rustix::process::Signal::KILL);
                }
            }
            if !r.pids.is_empty() || r.display != 0 {
                remove_x_files(&self.opts.x_tmp, r.display, r.pids.first().copied(), &path);
            }
            log::info!(
                "removing a stale own display's directory {}",
                path.display()
            );
            let _ = std::fs::remove_dir_all(&path);
            cleaned += 1;
        }
        cleaned
    }
}

/// One grant's own display: its display thread's queue and probe cache, and the running
/// processes once started.
#[derive(Debug)]
pub struct OwnDisplay {
    grant: String,
    opts: OwnOptions,
    running: Arc<Mutex<usize>>,
    /// The probe cache and the queue of this display's own thread.
    pub(super) state: DisplayState,
    live: Mutex<Option<Live>>,
    /// What the running display is, for callers that must not wait on a start in progress
    /// (which holds `live`): set when a start succeeds, cleared when it stops.
    shown: Mutex<Option<Shown>>,
    /// The grant ended: nothing starts again.
    ended: std::sync::atomic::AtomicBool,
    /// Whether its `bash` and jobs run walled (`bwrap`) or not (`none`).
    isolation: &'static str,
    /// Whether that wall has its own network (`pasta`) or the box's (`shared`).
    network: &'static str,
    /// The wall its own processes run in (X server, window manager, bus), as its shells
    /// do: `None`, no wall here.
    wall: Option<crate::walls::Bwrap>,
    /// The wall whose `pasta` makes its network: `Some` when its shells get one.
    net_wall: Option<crate::walls::Bwrap>,
    /// Its network (§21): made on its first start, before the X server, and kept until
    /// the grant ends, so every walled call joins it instead of making one (§24).
    net: Mutex<Option<Arc<Net>>>,
    /// Why its network could not be made, for the calls refused for want of it.
    net_failed: Mutex<Option<String>>,
    /// Who drives it: the agent, or the lender through the live view (§23).
    wheel: Arc<Wheel>,
    /// The live view's viewers of it.
    viewers: Arc<Viewers>,
}

/// An own display's network and the run group its holder and `pasta` live in: dropped,
/// both are killed (by pidfd, then whatever the group still holds).
#[derive(Debug)]
struct Net {
    own: crate::walls::OwnNet,
    _group: Arc<RunGroup>,
}

#[derive(Clone, Debug)]
struct Shown {
    number: u32,
    dir: PathBuf,
    env: DisplayEnv,
    xvfb_pid: u32,
    notes: Vec<String>,
    /// The RFB socket when the X server is `Xvnc`.
    rfb: Option<PathBuf>,
    /// Its X socket in its own socket directory, when the server is walled.
    x_socket: Option<PathBuf>,
}

#[derive(Debug)]
struct Live {
    number: u32,
    dir: PathBuf,
    env: DisplayEnv,
    /// The X server: `Xvnc` where installed, else `Xvfb`.
    xvfb: Proc,
    /// Its RFB socket (`Xvnc` only).
    rfb: Option<PathBuf>,
    /// Its display number held on the box, when the server is walled.
    x_name: Option<XName>,
    wm: Option<Proc>,
    bus: Option<Proc>,
    /// The run group all three live in (its drop kills what is left).
    group: Arc<RunGroup>,
    /// Notes for `sys_info` (e.g. no window manager installed).
    notes: Vec<String>,
}

/// What a runtime directory's record says, for [`OwnDisplays::clean_stale`].
#[derive(Debug, serde::Serialize, serde::Deserialize)]
struct Record {
    daemon_pid: u32,
    display: u32,
    /// Xvfb first.
    pids: Vec<u32>,
    marker: String,
    /// Its network's holder and `pasta`, which carry `net_marker`.
    #[serde(default)]
    net_pids: Vec<u32>,
    #[serde(default)]
    net_marker: String,
}

impl Record {
    /// Written to a temporary file and renamed, so a crash never leaves half a record.
    fn write(&self, dir: &Path) -> std::io::Result<()> {
        let tmp = dir.join(format!("{RECORD}.tmp"));
        std::fs::write(
            &tmp,
            serde_json::to_vec(self).map_err(std::io::Error::other)?,
        )?;
        std::fs::rename(tmp, dir.join(RECORD))
    }

    fn read(dir: &Path) -> Option<Record> {
        let text = std::fs::read(dir.join(RECORD)).ok()?;
        serde_json::from_slice(&text).ok()
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl OwnDisplay {
    pub fn grant(&self) -> &str {
        &self.grant
    }

    /// Who drives it (§23).
    pub fn wheel(&self) -> &Wheel {
        &self.wheel
    }

    /// Who drives it, shared (§23).
    pub fn wheel_arc(&self) -> Arc<Wheel> {
        Arc::clone(&self.wheel)
    }

    /// The live view's viewers of it (§23).
    pub fn viewers(&self) -> &Arc<Viewers> {
        &self.viewers
    }

    /// Whether a call of the agent that drives the display, admitted under the wheel
    /// epoch `admitted` (`None`: not stamped, checked against now), may act now.
    pub fn may_drive(&self, admitted: Option<u64>) -> Result<(), String> {
        self.wheel
            .check(admitted.unwrap_or_else(|| self.wheel.epoch()))
    }

    /// The display's variables when it is running now (never waits on a start).
    pub fn env_now(&self, cfg: &ToolConfig) -> Option<DisplayEnv> {
        let shown = lock(&self.shown);
        let s = shown.as_ref().filter(|s| pid_runs(s.xvfb_pid))?;
        let mut env = s.env.clone();
        env.path = DisplayEnv::from_config(cfg).path;
        Some(env)
    }

    /// The variables of a display that is not running: none of the owner's, so a child
    /// started then reaches no screen at all rather than the owner's.
    fn idle_env(&self, cfg: &ToolConfig) -> DisplayEnv {
        DisplayEnv {
            path: DisplayEnv::from_config(cfg).path,
            ..DisplayEnv::default()
        }
    }

    /// The running display's RFB socket (§23): `Ok(None)` when it is not running, `Err`
    /// (what to install) when it runs on `Xvfb`. Never waits on a start in progress.
    pub fn rfb_socket(&self) -> Result<Option<PathBuf>, String> {
        let shown = lock(&self.shown);
        match shown.as_ref().filter(|s| pid_runs(s.xvfb_pid)) {
            None => Ok(None),
            Some(s) => s.rfb.clone().map(Some).ok_or_else(live_view_missing),
        }
    }

    /// Whether it is running now (its X server has not exited).
    pub fn is_running(&self) -> bool {
        lock(&self.shown)
            .as_ref()
            .is_some_and(|s| pid_runs(s.xvfb_pid))
    }

    /// For the grant JSON and `sys_info`. Never waits on a start in progress.
    pub fn to_json(&self) -> Value {
        let shown = lock(&self.shown);
        match shown.as_ref().filter(|s| pid_runs(s.xvfb_pid)) {
            Some(l) => json!({
                "own": true, "running": true, "display": format!(":{}", l.number),
                "runtime_dir": l.dir.display().to_string(),
                "size": format!("{}x{}", self.opts.size.0, self.opts.size.1),
                "server": if l.rfb.is_some() { XVNC.0 } else { PROGRAMS[0].0 },
                "live_view": l.rfb.is_some(),
                "isolation": self.isolation,
                "network": self.network,
                "notes": l.notes,
            }),
            None => json!({
                "own": true, "running": false,
                "size": format!("{}x{}", self.opts.size.0, self.opts.size.1),
                "isolation": self.isolation,
                "network": self.network,
            }),
        }
    }

    /// The running display's variables, starting it first if needed. Runs on this
    /// display's own thread (or a test's), never on a pool worker: a start waits on Xvfb.
    pub fn ensure(
        &self,
        cfg: &ToolConfig,
        confine: &crate::cgroup::Confine,
    ) -> Result<DisplayEnv, String> {
        let mut live = lock(&self.live);
        // Checked under the lock: `end` sets the flag, then takes what the lock holds.
        if self.ended.load(std::sync::atomic::Ordering::SeqCst) {
            return Err("this grant has ended; its own display is gone".into());
        }
        // The network first, and whatever becomes of the X server: the shells join it.
        self.ensure_net(cfg, confine)
            .map_err(|why| format!("the grant's own display could not start: {why}"))?;
        if let Some(l) = live.as_mut() {
            if matches!(l.xvfb.child.try_wait(), Ok(None)) {
                let mut env = l.env.clone();
                env.path = DisplayEnv::from_config(cfg).path;
                return Ok(env);
            }
            log::warn!(
                "grant {}: its own display :{} stopped; starting it again",
                self.grant,
                l.number
            );
            let dead = live.take().expect("checked");
            self.stop_live(dead);
        }
        {
            let mut running = lock(&self.running);
            if *running >= self.opts.max {
                return Err(format!(
                    "no own display available: {} already running (--max-own-displays {}); \
                     end another grant with its own display, or raise the bound",
                    *running, self.opts.max
                ));
            }
            *running += 1;
        }
        match self.start(cfg, confine) {
            Ok(l) => {
                let mut env = l.env.clone();
                env.path = DisplayEnv::from_config(cfg).path;
                *lock(&self.shown) = Some(Shown {
                    number: l.number,
                    dir: l.dir.clone(),
                    env: l.env.clone(),
                    xvfb_pid: l.xvfb.pid(),
                    notes: l.notes.clone(),
                    rfb: l.rfb.clone(),
                    x_socket: l.x_name.as_ref().map(|n| n.target.clone()),
                });
                *live = Some(l);
                Ok(env)
            }
            Err(why) => {
                *lock(&self.running) -= 1;
                Err(format!("the grant's own display could not start: {why}"))
            }
        }
    }

    /// Whether its shells can run now as far as the network goes: it needs none (no
    /// `pasta`), or it has one whose holder and `pasta` run.
    fn net_up(&self) -> bool {
        self.net_wall.is_none() || lock(&self.net).as_ref().is_some_and(|n| n.own.alive())
    }

    /// Make its network once (§21, §24), when its wall has `pasta` and it has none yet:
    /// the holder and `pasta` in a run group of the grant's, `pasta`'s files in a private
    /// directory beside the runtime directories (whose parent every wall sees empty).
    /// Called with `live` held, so two starts never make two.
    fn ensure_net(&self, cfg: &ToolConfig, confine: &crate::cgroup::Confine) -> Result<(), String> {
        let Some(wall) = &self.net_wall else {
            return Ok(());
        };
        if self.net_up() {
            return Ok(());
        }
        if lock(&self.net).take().is_some() {
            log::warn!(
                "grant {}: its own display's network stopped; making it again",
                self.grant
            );
        }
        let made = self.make_net(wall, cfg, confine);
        let mut failed = lock(&self.net_failed);
        match made {
            Ok(net) => {
                *failed = None;
                *lock(&self.net) = Some(Arc::new(net));
                Ok(())
            }
            Err(why) => {
                *failed = Some(why.clone());
                Err(why)
            }
        }
    }

    fn make_net(
        &self,
        wall: &crate::walls::Bwrap,
        cfg: &ToolConfig,
        confine: &crate::cgroup::Confine,
    ) -> Result<Net, String> {
        let marker = format!("own-net-{}", self.grant);
        let group = confine
            .run(&self.grant, true, &marker)
            .map_err(|e| format!("could not contain its network: {e}"))?;
        let parent = made_parent(&self.opts)?;
        let scratch = parent.join(format!("{}.net", dir_name(&self.grant)));
        let _ = std::fs::remove_dir_all(&scratch);
        std::fs::DirBuilder::new()
            .mode(0o700)
            .create(&scratch)
            .map_err(|e| format!("cannot create {}: {e}", scratch.display()))?;
        let env = crate::tools::env::child_env(
            std::env::vars_os(),
            cfg,
            &OWNER_SESSION_VARS,
            &[(MARKER_ENV.into(), marker)],
        );
        let made = wall.own_net(
            &|program| {
                let mut cmd = group.command(program);
                cmd.env_clear().envs(env.clone());
                cmd
            },
            &|cmd| group.spawn(cmd),
            &scratch,
            self.opts.start_timeout,
        );
        let _ = std::fs::remove_dir_all(&scratch);
        let own = made?;
        log::info!("grant {}: its own display's network is up", self.grant);
        Ok(Net { own, _group: group })
    }

    fn start(&self, cfg: &ToolConfig, confine: &crate::cgroup::Confine) -> Result<Live, String> {
        let path_var = DisplayEnv::from_config(cfg).path;
        let find = |(name, package): (&str, &str)| {
            which(name, path_var.as_deref()).ok_or_else(|| {
                format!("{name} is not installed (Debian/Ubuntu: apt install {package})")
            })
        };
        // Xvnc where installed (the live view, §23), else Xvfb: the same X server to every
        // tool, one more listener (RFB on a socket in the runtime dir) for the bridge.
        let xvnc = which(XVNC.0, path_var.as_deref());
        let xvfb = match &xvnc {
            Some(p) => p.clone(),
            None => find(PROGRAMS[0])?,
        };
        let parent = made_parent(&self.opts)?;
        let dir = parent.join(dir_name(&self.grant));
        if dir.exists() {
            let _ = std::fs::remove_dir_all(&dir);
        }
        std::fs::DirBuilder::new()
            .mode(0o700)
            .create(&dir)
            .map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
        let cleanup = |why: String| {
            let _ = std::fs::remove_dir_all(&dir);
            why
        };
        let marker = format!("own-display-{}", self.grant);
        // The record first, so a crash at any later point leaves a directory the next
        // start knows to clean; completed with the pids below.
        let net_pids = lock(&self.net)
            .as_ref()
            .map(|n| n.own.pids())
            .unwrap_or_default();
        let mut record = Record {
            daemon_pid: std::process::id(),
            display: 0,
            pids: Vec::new(),
            marker: marker.clone(),
            net_marker: format!("own-net-{}", self.grant),
            net_pids,
        };
        record
            .write(&dir)
            .map_err(|e| cleanup(format!("cannot write its record: {e}")))?;
        let cookie = dir.join("xauth");
        write_cookie(&cookie).map_err(|e| cleanup(format!("cannot write the X cookie: {e}")))?;
        let group = confine
            .run(&self.grant, true, &marker)
            .map_err(|e| cleanup(format!("could not contain it: {e}")))?;
        // Walled (§21, §23): its number held on the box and its socket in a directory of
        // its own, in the runtime directory; the record names the number at once, so a
        // crash from here on leaves a link the next start removes.
        let x_sockets = dir.join(X_SOCKETS);
        let x_name = match &self.wall {
            None => None,
            Some(_) => {
                std::fs::DirBuilder::new()
                    .mode(0o700)
                    .create(&x_sockets)
                    .map_err(|e| cleanup(format!("cannot create {}: {e}", x_sockets.display())))?;
                let name = XName::reserve(&self.opts.x_tmp, &x_sockets).map_err(&cleanup)?;
                record.display = name.number;
                record
                    .write(&dir)
                    .map_err(|e| cleanup(format!("cannot write its record: {e}")))?;
                Some(name)
            }
        };
        // How each of its programs starts: inside its wall (`walls::Bwrap::display_args`),
        // else as the daemon's child in its group. `cover_rfb`: the live view's socket
        // reads as /dev/null (all but the X server that serves it); `own_pids`: a PID
        // namespace of its own (all but the bus, see `display_args`).
        let command = |program: &Path, cover_rfb: Option<&Path>, own_pids: bool| match &self.wall {
            Some(wall) => {
                let mut walled = wall.display_args(
                    program,
                    &parent,
                    &dir,
                    &x_sockets,
                    &self.opts.x_tmp,
                    own_pids,
                );
                if let Some(rfb) = cover_rfb.filter(|p| p.exists()) {
                    walled.cover_file(rfb);
                }
                walled.command(Some(&group))
            }
            None => group.command(program),
        };
        let spawn = |cmd: std::process::Command| -> std::io::Result<Proc> {
            let mut cmd = cmd;
            if self.wall.is_none() {
                return group.spawn(&mut cmd).map(|child| Proc {
                    child,
                    inside: None,
                });
            }
            crate::walls::spawn_inside(cmd, &|c| group.spawn(c), self.opts.start_timeout)
                .map(|i| Proc {
                    child: i.bwrap,
                    inside: Some((i.pid, i.pidfd)),
                })
                .map_err(std::io::Error::other)
        };
        let log_file = |name: &str| -> Result<Stdio, String> {
            std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .mode(0o600)
                .open(dir.join(name))
                .map(Stdio::from)
                .map_err(|e| format!("cannot open {name}: {e}"))
        };
        let base_env = crate::tools::env::child_env(
            std::env::vars_os(),
            cfg,
            &OWNER_SESSION_VARS,
            &[
                ("XAUTHORITY".into(), cookie.display().to_string()),
                ("XDG_RUNTIME_DIR".into(), dir.display().to_string()),
                (MARKER_ENV.into(), marker.clone()),
            ],
        );
        let (w, h) = self.opts.size;
        let started = Instant::now();
        let rfb = xvnc.as_ref().map(|_| dir.join(RFB_SOCKET));
        let mut cmd = command(&xvfb, None, true);
        // Walled, its number is the one held for it (inside, every number is free);
        // `-displayfd` still says when it is ready.
        if let Some(name) = &x_name {
            cmd.arg(format!(":{}", name.number));
        }
        cmd.args(["-displayfd", "1", "-nolisten", "tcp", "-noreset", "-s", "0"]);
        match &rfb {
            // No TCP port; `None` security is only sound because the socket is 0600 in the
            // grant's 0700 runtime dir, which only the daemon's user reaches outside the
            // walls and which the grant's own wall covers (`OwnDisplays::shell_wall`).
            Some(socket) => {
                cmd.arg("-rfbunixpath")
                    .arg(socket)
                    .args(["-rfbunixmode", "0600", "-rfbport", "-1"])
                    .args(["-SecurityTypes", "None", "-AlwaysShared"])
                    .args(["-AcceptSetDesktopSize=0", "-depth", "24", "-geometry"])
                    .arg(format!("{w}x{h}"));
            }
            None => {
                cmd.arg("-screen").arg("0").arg(format!("{w}x{h}x24"));
            }
        }
        cmd.arg("-auth")
            .arg(&cookie)
            .env_clear()
            .envs(base_env.clone())
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(log_file("xvfb.log").map_err(&cleanup)?);
        let mut notes = Vec::new();
        let mut xvfb_child =
            spawn(cmd).map_err(|e| cleanup(format!("cannot run {}: {e}", xvfb.display())))?;
        let stdout = xvfb_child.child.stdout.take().expect("piped");
        let number = match first_line(stdout, self.opts.start_timeout) {
            Some(line) => line.trim().parse::<u32>().ok(),
            None => None,
        };
        let Some(number) = number else {
            xvfb_child.kill();
            let tail = log_tail(&dir.join("xvfb.log"));
            return Err(cleanup(format!(
                "{} did not report a display within {} ms: {tail}",
                server_name(&xvfb),
                self.opts.start_timeout.as_millis()
            )));
        };
        // Xvnc binds its RFB socket before it reports the display (vncext starts with the
        // screen); checked so a live view never waits on a socket that will not come.
        if let Some(socket) = &rfb {
            if !socket.exists() {
                notes.push(format!(
                    "the live view's socket did not appear: {}",
                    log_tail(&dir.join("xvfb.log"))
                ));
            }
        }
        let display = format!(":{number}");
        let mut child_env = base_env;
        child_env.push(("DISPLAY".into(), display.clone().into()));
        // The window manager: optional (a screen without one still works, but windows
        // are not focused or placed).
        let wm = match which(WINDOW_MANAGER.0, path_var.as_deref()) {
            Some(path) => {
                let keys = dir.join("kbdconfig");
                std::fs::write(&keys, WM_KEYS)
                    .map_err(|e| cleanup(format!("cannot write the key bindings: {e}")))?;
                let mut cmd = command(&path, rfb.as_deref(), true);
                cmd.args(["-use_titlebar", "no", "-kbdconfig"])
                    .arg(&keys)
                    .env_clear()
                    .envs(child_env.clone())
                    .stdin(Stdio::null())
                    .stdout(Stdio::null())
                    .stderr(log_file("wm.log").map_err(&cleanup)?);
                match spawn(cmd) {
                    Ok(c) => Some(c),
                    Err(e) => {
                        notes.push(format!("the window manager did not start: {e}"));
                        None
                    }
                }
            }
            None => {
                notes.push(format!(
                    "no window manager: install {} (apt install {}) so windows are placed \
                     and focused",
                    WINDOW_MANAGER.0, WINDOW_MANAGER.1
                ));
                None
            }
        };
        // The private session bus, for the accessibility tools and apps that want one.
        let bus_socket = dir.join("bus");
        let mut bus_address = None;
        let bus = match which("dbus-daemon", path_var.as_deref()) {
            Some(path) => {
                let config = write_bus_config(&dir, &bus_socket)
                    .map_err(|e| cleanup(format!("cannot write the bus's configuration: {e}")))?;
                let mut cmd = command(&path, rfb.as_deref(), false);
                cmd.arg(format!("--config-file={}", config.display()))
                    .args(["--nofork", "--nopidfile", "--print-address=1"])
                    .env_clear()
                    .envs(child_env.clone())
                    .stdin(Stdio::null())
                    .stdout(Stdio::piped())
                    .stderr(log_file("bus.log").map_err(&cleanup)?);
                match spawn(cmd) {
                    Ok(mut c) => {
                        let out = c.child.stdout.take().expect("piped");
                        match first_line(out, self.opts.start_timeout) {
                            Some(addr) if !addr.trim().is_empty() => {
                                bus_address = Some(addr.trim().to_string());
                            }
                            _ => notes.push(format!(
                                "the session bus did not start: {}",
                                log_tail(&dir.join("bus.log"))
                            )),
                        }
                        Some(c)
                    }
                    Err(e) => {
                        notes.push(format!("the session bus did not start: {e}"));
                        None
                    }
                }
            }
            None => {
                notes.push(
                    "no session bus: install dbus-daemon (apt install dbus) for the \
                     accessibility tools"
                        .into(),
                );
                None
            }
        };
        record.display = number;
        record.pids = vec![xvfb_child.pid()];
        record
            .pids
            .extend(wm.iter().chain(bus.iter()).map(Proc::pid));
        if let Err(e) = record.write(&dir) {
            log::warn!(
                "grant {}: cannot update its own display's record: {e}",
                self.grant
            );
        }
        log::info!(
            "grant {}: own display {display} ({w}x{h}, {}) started in {} ms",
            self.grant,
            server_name(&xvfb),
            started.elapsed().as_millis()
        );
        Ok(Live {
            number,
            env: DisplayEnv {
                display: Some(display),
                wayland_display: None,
                xdg_runtime_dir: Some(dir.display().to_string()),
                swaysock: None,
                path: None,
                xauthority: Some(cookie.display().to_string()),
                dbus_session_bus_address: bus_address,
                // Found through the bus (`org.a11y.Bus.GetAddress`) when asked.
                at_spi_bus_address: None,
            },
            dir,
            xvfb: xvfb_child,
            rfb,
            x_name,
            wm,
            bus,
            group,
            notes,
        })
    }

    /// The grant ended: stop the display and start nothing again. Called under the
    /// registry's lock, so it never waits on a start in progress (up to the start
    /// timeout): then a thread of its own stops the display once the start is done.
    fn end(self: Arc<Self>) {
        self.ended.store(true, std::sync::atomic::Ordering::SeqCst);
        self.viewers.end_all();
        // The display thread ends when its queue's sender goes.
        lock(&self.state.queue).take();
        let taken = match self.live.try_lock() {
            Ok(mut live) => Some(live.take()),
            Err(std::sync::TryLockError::Poisoned(p)) => Some(p.into_inner().take()),
            Err(std::sync::TryLockError::WouldBlock) => None,
        };
        match taken {
            Some(Some(l)) => {
                self.stop_live(l);
                self.stop_net();
            }
            Some(None) => self.stop_net(),
            None => {
                let own = Arc::clone(&self);
                let spawned = std::thread::Builder::new()
                    .name("own-display-stop".into())
                    .spawn(move || {
                        let live = lock(&own.live).take();
                        if let Some(l) = live {
                            own.stop_live(l);
                        }
                        own.stop_net();
                    });
                if let Err(e) = spawned {
                    // The grant's cgroup kill and the next start's stale cleanup remain.
                    log::warn!("grant {}: cannot stop its own display now: {e}", self.grant);
                }
            }
        }
    }

    /// Its network goes: the holder and `pasta` are killed (once no call holds it, which
    /// is at once: a call only duplicates its descriptors).
    fn stop_net(&self) {
        if lock(&self.net).take().is_some() {
            log::info!("grant {}: its own display's network stopped", self.grant);
        }
    }

    /// SIGTERM each process, wait up to the stop timeout, SIGKILL what is left; then the
    /// X socket and lock file a killed Xvfb leaves, and the runtime directory.
    fn stop_live(&self, mut l: Live) {
        lock(&self.shown).take();
        self.viewers.end_all();
        let xvfb_pid = l.xvfb.pid();
        for child in [l.wm.as_mut(), l.bus.as_mut(), Some(&mut l.xvfb)]
            .into_iter()
            .flatten()
        {
            child.stop(self.opts.stop_timeout);
        }
        drop(l.group);
        remove_x_files(&self.opts.x_tmp, l.number, Some(xvfb_pid), &l.dir);
        // Its number is let go only once its link is gone.
        drop(l.x_name.take());
        if let Err(e) = std::fs::remove_dir_all(&l.dir) {
            if e.kind() != std::io::ErrorKind::NotFound {
                log::warn!("cannot remove {}: {e}", l.dir.display());
            }
        }
        *lock(&self.running) -= 1;
        log::info!("grant {}: own display :{} stopped", self.grant, l.number);
    }
}

impl Drop for OwnDisplay {
    fn drop(&mut self) {
        if let Some(l) = self
            .live
            .get_mut()
            .unwrap_or_else(|e| e.into_inner())
            .take()
        {
            self.stop_live(l);
        }
    }
}

/// The own displays' parent directory, made (0700) if it is missing: each display's own
/// directory and its network's scratch directory go beneath it.
fn made_parent(opts: &OwnOptions) -> Result<PathBuf, String> {
    let parent = opts.parent();
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(&parent)
        .map_err(|e| format!("cannot create {}: {e}", parent.display()))?;
    Ok(parent)
}

/// A grant's runtime directory's name: short, because the session bus's socket lives in
/// it and a Unix socket path holds at most 107 bytes.
pub fn dir_name(grant: &str) -> String {
    grant
        .chars()
        .filter(char::is_ascii_alphanumeric)
        .take(12)
        .collect()
}

/// Whether `pid` is a process that has not exited (a zombie has: its parent has not
/// reaped it yet).
fn pid_runs(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        // The state follows the last ')' (the command name may hold one).
        Ok(stat) => stat
            .rsplit_once(')')
            .is_some_and(|(_, rest)| !rest.trim_start().starts_with(['Z', 'X'])),
        Err(_) => false,
    }
}

/// SIGTERM, wait up to `patience` for the exit (on the child's pidfd, not a timer), SIGKILL,
/// reap.
pub(super) fn stop_child(child: &mut Child, patience: Duration) {
    if matches!(child.try_wait(), Ok(Some(_))) {
        return;
    }
    let pidfd = rustix::process::Pid::from_raw(child.id() as i32).and_then(|pid| {
        rustix::process::pidfd_open(pid, rustix::process::PidfdFlags::empty()).ok()
    });
    let _ = signal(child.id(), rustix::process::Signal::TERM);
    if let Some(fd) = &pidfd {
        let deadline = Instant::now() + patience;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                break;
            }
            let mut fds = [rustix::event::PollFd::new(fd, rustix::event::PollFlags::IN)];
            let ts = rustix::event::Timespec {
                tv_sec: left.as_secs() as i64,
                tv_nsec: left.subsec_nanos() as _,
            };
            match rustix::event::poll(&mut fds, Some(&ts)) {
                Ok(_) if !fds[0].revents().is_empty() => break,
                Ok(_) | Err(rustix::io::Errno::INTR) => {}
                Err(_) => break,
            }
        }
    }
    if matches!(child.try_wait(), Ok(Some(_))) {
        return;
    }
    let _ = child.kill();
    let _ = child.wait();
}

fn signal(pid: u32, sig: rustix::process::Signal) -> rustix::io::Result<()> {
    let pid = rustix::process::Pid::from_raw(pid as i32).ok_or(rustix::io::Errno::INVAL)?;
    rustix::process::kill_process(pid, sig)
}

/// Whether `pid` runs with `marker` in its environment (so a stale record's pid, maybe
/// reused since, is only signalled when it is still one of ours).
pub(super) fn carries_marker(pid: u32, marker: &str, settle: &Settle) -> bool {
    i32::try_from(pid).is_ok_and(|pid| settle.carries(pid, &[marker]))
}

/// Remove `/tmp/.X11-unix/X<n>` and `/tmp/.X<n>-lock` when the lock names `xvfb_pid` (or
/// names a process that is gone): never another server's. A walled server's path is a
/// link into its runtime directory `dir` ([`XName`]), removed only when it points there.
fn remove_x_files(x_tmp: &Path, number: u32, xvfb_pid: Option<u32>, dir: &Path) {
    let link = x_tmp.join(".X11-unix").join(format!("X{number}"));
    if link
        .symlink_metadata()
        .is_ok_and(|m| m.file_type().is_symlink())
    {
        if std::fs::read_link(&link).is_ok_and(|t| t.starts_with(dir)) {
            let _ = std::fs::remove_file(&link);
        }
        return;
    }
    let lock_file = x_tmp.join(format!(".X{number}-lock"));
    let owner: Option<u32> = std::fs::read_to_string(&lock_file)
        .ok()
        .and_then(|t| t.trim().parse().ok());
    let ours = match owner {
        Some(pid) => Some(pid) == xvfb_pid || !Path::new(&format!("/proc/{pid}")).exists(),
        None => true,
    };
    if !ours {
        return;
    }
    let _ = std::fs::remove_file(&lock_file);
    // Xvfb -displayfd takes no lock file, and a server started since may have taken the
    // number and bound the path again: a socket someone listens on is never removed.
    let socket = x_tmp.join(".X11-unix").join(format!("X{number}"));
    if !unix_socket_bound(&socket) {
        let _ = std::fs::remove_file(&socket);
    }
}

/// One of an own display's processes: the program, or (walled) `bwrap` around it.
#[derive(Debug)]
struct Proc {
    /// The daemon's child: the program itself, or `bwrap`, which exits when it does.
    child: Child,
    /// Walled: the program, its wall's pid 1, by its pid as the box sees it and a pidfd.
    inside: Option<(u32, OwnedFd)>,
}

impl Proc {
    /// The program's pid as the box sees it (the record's, `/proc`'s).
    fn pid(&self) -> u32 {
        self.inside
            .as_ref()
            .map_or(self.child.id(), |(pid, _)| *pid)
    }

    /// Stop it: unwalled, as [`stop_child`] does; walled, SIGKILL to the program, which
    /// as its wall's pid 1 ends everything in its PID namespace at once (a pid 1 ignores
    /// a SIGTERM it has no handler for, and a display has nothing to save: its files go
    /// with its directory, its lock file with its `/tmp`; what the bus started goes with
    /// the display's group), then `bwrap` reaped.
    fn stop(&mut self, patience: Duration) {
        if let Some((_, pidfd)) = &self.inside {
            let _ = rustix::process::pidfd_send_signal(pidfd, rustix::process::Signal::KILL);
        }
        stop_child(&mut self.child, patience);
    }

    /// Kill it now and reap it (a start that failed).
    fn kill(&mut self) {
        if let Some((_, pidfd)) = &self.inside {
            let _ = rustix::process::pidfd_send_signal(pidfd, rustix::process::Signal::KILL);
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Where walled own displays' numbers start: above the ones display managers and remote
/// sessions take first.
const FIRST_DISPLAY: u32 = 20;
/// How many numbers a start tries before it gives up.
const DISPLAY_TRIES: u32 = 4096;
/// A walled display's socket directory in its runtime directory: `/tmp/.X11-unix` inside
/// its wall.
pub const X_SOCKETS: &str = "x11";

/// The number of a walled own display, held on the box for as long as it runs. Its X
/// server has no network (`walls::Bwrap::display_args`), so the box's X clients (the
/// daemon's helpers) reach it by path only: `/tmp/.X11-unix/X<n>` is a link to its socket
/// in its own socket directory (`target`). Its abstract name in the box's network, which
/// clients try first, is held here by a socket bound but never listening: a client is
/// refused there at once and goes on to the path, and no other process can take the name
/// and catch the helpers' connections (and the cookie they send). Both taken atomically
/// (bind, symlink), so two starts (or another X server choosing its number) never share
/// one. Dropped, the link is removed if it is still ours.
#[derive(Debug)]
struct XName {
    number: u32,
    target: PathBuf,
    link: PathBuf,
    _held: OwnedFd,
}

impl XName {
    /// The first number from [`FIRST_DISPLAY`] that nothing on the box uses: no lock file
    /// in `x_tmp`, its abstract name free, its path free; its socket will be in `sockets`.
    fn reserve(x_tmp: &Path, sockets: &Path) -> Result<XName, String> {
        use rustix::net::{AddressFamily, SocketAddrUnix, SocketFlags, SocketType};
        let unix = x_tmp.join(".X11-unix");
        if !unix.is_dir() {
            use std::os::unix::fs::PermissionsExt as _;
            std::fs::create_dir_all(&unix)
                .and_then(|()| {
                    std::fs::set_permissions(&unix, std::fs::Permissions::from_mode(0o1777))
                })
                .map_err(|e| format!("cannot create {}: {e}", unix.display()))?;
        }
        for number in FIRST_DISPLAY..FIRST_DISPLAY + DISPLAY_TRIES {
            if x_tmp
                .join(format!(".X{number}-lock"))
                .symlink_metadata()
                .is_ok()
            {
                continue;
            }
            let link = unix.join(format!("X{number}"));
            let held = rustix::net::socket_with(
                AddressFamily::UNIX,
                SocketType::STREAM,
                SocketFlags::CLOEXEC,
                None,
            )
            .map_err(|e| format!("cannot make a socket: {e}"))?;
            let name = SocketAddrUnix::new_abstract_name(link.as_os_str().as_encoded_bytes())
                .map_err(|e| format!("{}: {e}", link.display()))?;
            if rustix::net::bind(&held, &name).is_err() {
                continue;
            }
            let target = sockets.join(format!("X{number}"));
            match std::os::unix::fs::symlink(&target, &link) {
                Ok(()) => {
                    return Ok(XName {
                        number,
                        target,
                        link,
                        _held: held,
                    })
                }
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
                Err(e) => return Err(format!("cannot link {}: {e}", link.display())),
            }
        }
        Err(format!(
            "no free display number from :{FIRST_DISPLAY} to :{}",
            FIRST_DISPLAY + DISPLAY_TRIES - 1
        ))
    }
}

impl Drop for XName {
    fn drop(&mut self) {
        if std::fs::read_link(&self.link).is_ok_and(|t| t == self.target) {
            let _ = std::fs::remove_file(&self.link);
        }
    }
}

/// Whether a process (of this network namespace) has a Unix socket bound at `path`.
fn unix_socket_bound(path: &Path) -> bool {
    let Ok(table) = std::fs::read_to_string("/proc/net/unix") else {
        return false;
    };
    let want = path.to_string_lossy();
    table
        .lines()
        .skip(1)
        .any(|l| l.split_whitespace().nth(7) == Some(want.as_ref()))
}

/// The window manager's key bindings. matchbox's default file starts programs
/// (`<ctrl><alt>x=!xterm`), which would run outside the grant's wall as children of the
/// window manager; these only move between windows and close one.
const WM_KEYS: &str = "<alt>Tab=next\n<alt><shift>Tab=prev\n<alt>f4=close\n";

/// Where the box's session services are declared, for the accessibility bus's entry.
const SYSTEM_SERVICE_DIRS: [&str; 2] = [
    "/usr/share/dbus-1/services",
    "/usr/local/share/dbus-1/services",
];
/// The one session service the private bus may start: the accessibility bus (§17).
const A11Y_SERVICE: &str = "org.a11y.Bus.service";

/// The private bus's configuration, written into the runtime directory `dir`: a session
/// bus like the box's, but the only service it can start is the accessibility bus (the
/// box's own entry, copied), not every service under `~/.local/share/dbus-1/services`
/// (which a grant's shell can write) or the box's portals; and no client may change the
/// environment started services get (`UpdateActivationEnvironment`, an `LD_PRELOAD`
/// away from running code outside the grant's wall).
fn write_bus_config(dir: &Path, socket: &Path) -> std::io::Result<PathBuf> {
    let services = dir.join("services");
    std::fs::DirBuilder::new().mode(0o700).create(&services)?;
    let a11y = SYSTEM_SERVICE_DIRS
        .iter()
        .map(|d| Path::new(d).join(A11Y_SERVICE))
        .find_map(|p| std::fs::read_to_string(p).ok());
    if let Some(entry) = a11y {
        // `Name` and `Exec` only: our bus has no systemd to hand `SystemdService` to.
        let kept: String = entry
            .lines()
            .filter(|l| l.starts_with('[') || l.starts_with("Name=") || l.starts_with("Exec="))
            .map(|l| format!("{l}\n"))
            .collect();
        std::fs::write(services.join(A11Y_SERVICE), kept)?;
    }
    let config = dir.join("bus.conf");
    std::fs::write(&config, bus_config_text(socket, &services))?;
    Ok(config)
}

fn bus_config_text(socket: &Path, services: &Path) -> String {
    let xml = |p: &Path| {
        p.display()
            .to_string()
            .replace('&', "&amp;")
            .replace('<', "&lt;")
            .replace('>', "&gt;")
            .replace('"', "&quot;")
    };
    let (socket, services) = (xml(socket), xml(services));
    format!(
        r#"<!DOCTYPE busconfig PUBLIC "-//freedesktop//DTD D-Bus Bus Configuration 1.0//EN"
 "http://www.freedesktop.org/standards/dbus/1.0/busconfig.dtd">
<busconfig>
  <type>session</type>
  <keep_umask/>
  <listen>unix:path={socket}</listen>
  <auth>EXTERNAL</auth>
  <servicedir>{services}</servicedir>
  <policy context="default">
    <allow send_destination="*" eavesdrop="true"/>
    <allow eavesdrop="true"/>
    <allow own="*"/>
    <deny send_destination="org.freedesktop.DBus" send_interface="org.freedesktop.DBus"
          send_member="UpdateActivationEnvironment"/>
  </policy>
</busconfig>
"#
    )
}

/// An Xauthority file with one wildcard MIT-MAGIC-COOKIE-1 entry (any display number: it
/// is written before the number is known), mode 0600.
fn write_cookie(path: &Path) -> std::io::Result<()> {
    let mut cookie = [0u8; 16];
    getrandom::fill(&mut cookie).map_err(std::io::Error::other)?;
    let mut out = Vec::new();
    let field = |out: &mut Vec<u8>, b: &[u8]| {
        out.extend_from_slice(&(b.len() as u16).to_be_bytes());
        out.extend_from_slice(b);
    };
    out.extend_from_slice(&0xffffu16.to_be_bytes()); // FamilyWild
    field(&mut out, b"");
    field(&mut out, b"");
    field(&mut out, b"MIT-MAGIC-COOKIE-1");
    field(&mut out, &cookie);
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)?;
    f.write_all(&out)?;
    f.sync_all()
}

/// The first line a child writes, or `None` at EOF or after `timeout`. The read runs on a
/// short-lived thread so the wait is bounded.
fn first_line(out: impl Read + Send + 'static, timeout: Duration) -> Option<String> {
    let (tx, rx) = crossbeam_channel::bounded(1);
    std::thread::Builder::new()
        .name("own-display-read".into())
        .spawn(move || {
            let mut line = String::new();
            let got = BufReader::new(out.take(256)).read_line(&mut line);
            let _ = tx.send(got.ok().filter(|n| *n > 0).map(|_| line));
        })
        .ok()?;
    rx.recv_timeout(timeout).ok().flatten()
}

/// The X server's name as errors and the grant JSON give it (`Xvnc` or `Xvfb`).
fn server_name(program: &Path) -> &'static str {
    if program.file_name() == Some(std::ffi::OsStr::new(XVNC.0)) {
        XVNC.0
    } else {
        PROGRAMS[0].0
    }
}

fn log_tail(path: &Path) -> String {
    let text = std::fs::read(path).unwrap_or_default();
    let start = text.len().saturating_sub(LOG_TAIL);
    let tail = String::from_utf8_lossy(&text[start..]).trim().to_string();
    if tail.is_empty() {
        "(it printed nothing)".into()
    } else {
        tail
    }
}

/// `sys_info`'s display facts for an own display that is not running yet: the graphical
/// tools work if the X server is installed (the first call starts it).
pub fn idle_facts(cfg: &ToolConfig) -> Value {
    let path = DisplayEnv::from_config(cfg).path;
    let xvfb = which(XVNC.0, path.as_deref()).or_else(|| which(PROGRAMS[0].0, path.as_deref()));
    let tools: serde_json::Map<String, Value> = gui_tools()
        .map(|(t, _)| {
            let v = match &xvfb {
                Some(_) => json!({"works": true}),
                None => json!({"works": false, "why": format!(
                    "this grant's own display needs Xvfb (apt install {})", PROGRAMS[0].1)}),
            };
            (t.name.to_string(), v)
        })
        .collect();
    json!({
        "backend": "x11",
        "requested": "x11",
        "problem": null,
        "notes": ["this grant's own display starts on its first graphical call"],
        "displays": [],
        "tools": tools,
    })
}

/// Whether own displays are possible here, and what to install: for `doctor`.
pub fn doctor_facts(cfg: &ToolConfig) -> Value {
    let path = DisplayEnv::from_config(cfg).path;
    let programs: serde_json::Map<String, Value> = PROGRAMS
        .iter()
        .map(|(name, _)| {
            (
                name.to_string(),
                which(name, path.as_deref())
                    .map(|p| Value::String(p.display().to_string()))
                    .unwrap_or(Value::Null),
            )
        })
        .collect();
    let xvnc = which(XVNC.0, path.as_deref());
    let missing: Vec<String> = PROGRAMS
        .iter()
        // Xvnc stands in for Xvfb.
        .filter(|(name, _)| !(*name == PROGRAMS[0].0 && xvnc.is_some()))
        .filter(|(name, _)| which(name, path.as_deref()).is_none())
        .map(|(name, package)| format!("{name} (apt install {package})"))
        .collect();
    let possible = xvnc.is_some() || which(PROGRAMS[0].0, path.as_deref()).is_some();
    json!({
        "possible": possible,
        "programs": programs,
        "missing": missing,
        "live_view": xvnc.map(|p| p.display().to_string()),
    })
}

/// Run `start` once the grant's own display is up (for `bash` and `bash_start`, whose
/// children get its variables): at once when it is running, else on its display thread
/// after starting it. A display that cannot start does not stop the command: it runs
/// without any display variables (never the owner's).
pub fn with_started(own: Arc<OwnDisplay>, cx: CallContext, done: Completion, start: DeferredStart) {
    if own.env_now(&cx.host.config).is_some() && own.net_up() {
        return start(cx, done);
    }
    let slot = Arc::new(Mutex::new(Some((cx, done, start))));
    let job_slot = Arc::clone(&slot);
    let own2 = Arc::clone(&own);
    let job: Job = Box::new(move || {
        let Some((cx, done, start)) = lock(&job_slot).take() else {
            return;
        };
        if let Err(why) = own2.ensure(&cx.host.config, &cx.host.confine) {
            log::info!("grant {}: {why}", own2.grant);
        }
        start(cx, done);
    });
    if let Err(why) = own.state.submit(job) {
        if let Some((_, done, _)) = lock(&slot).take() {
            done.complete(ToolOutput::tool_error(why));
        }
    }
}

/// Run `start` once the call's display is usable: at once for the box's display, else
/// via [`with_started`]. For tools that start children with the display's variables
/// (`bash`, `bash_start`, `app_open`, …): inside `start`, [`call_display`] gives them.
pub fn with_call_display(cx: CallContext, done: Completion, start: DeferredStart) {
    match own_of(&cx) {
        Some(own) => with_started(own, cx, done, start),
        None => start(cx, done),
    }
}

/// The command that runs `program` for a call in the run `group` (`bash`, jobs and
/// `app_open`: the one place a grant's processes are made): inside the call's grant's wall
/// (§21) when the call has a grant other than `owner` and this box has the wall — its own
/// display's wall for a grant with one, so an app's "open a terminal" is walled too, in
/// that display's network — else as `group.command` makes it. Add the program's arguments
/// to it. `Err` (the call is refused) when its own display's network is not up.
pub fn walled_command(
    cx: &CallContext,
    group: &crate::cgroup::RunGroup,
    program: &Path,
) -> Result<std::process::Command, String> {
    let walled = if !walls_apply(cx) {
        None
    } else if let Some(own) = own_of(cx) {
        cx.host.own_displays.shell_wall(&own)?
    } else {
        cx.host
            .config
            .grant_walls
            .as_ref()
            .map(|w| w.grant_args(None, None))
    };
    Ok(match walled {
        Some(w) => {
            let mut cmd = w.command(Some(group));
            cmd.arg(program);
            cmd
        }
        None => group.command(program),
    })
}

/// Whether the call's processes belong inside a wall: every grant's but the `owner`
/// profile's, never the owner's own `/mcp`.
pub fn walls_apply(cx: &CallContext) -> bool {
    cx.grant.is_some() && cx.policy.profile() != crate::profiles::Profile::Owner
}

/// The `isolation` of a call's processes, for `sys_info` (§21): `bwrap` when they run
/// walled, else `none`.
pub fn call_isolation(cx: &CallContext) -> &'static str {
    if !walls_apply(cx) {
        return "none";
    }
    match own_of(cx) {
        Some(_) => cx.host.own_displays.isolation(),
        None if cx.host.config.grant_walls.is_some() => "bwrap",
        None => "none",
    }
}

/// A tool start deferred until the own display is up.
pub type DeferredStart = Box<dyn FnOnce(CallContext, Completion) + Send>;

#[cfg(test)]
mod tests;
