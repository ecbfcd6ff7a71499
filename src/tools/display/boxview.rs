//! The box's own display in the live view (§23): `x11vnc` (X11) or `wayvnc` (wlroots) on
//! a Unix socket, started for the first viewer and stopped `--box-view-linger-ms` after
//! the last. It serves the lender's own session, so it runs as the daemon's child (in no
//! grant's cgroup or wall) in a 0700 directory of the daemon's, and goes with the daemon.
//!
//! **One wheel for the box's display**, shared by every grant that uses it: it is one
//! screen under one pair of hands, so the lender taking it through any such grant's
//! `/wheel` stops every such grant's input tools.

use crate::cgroup::subreaper::Settle;
use std::os::unix::fs::DirBuilderExt;
use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex, OnceLock};
use std::time::{Duration, Instant};

use super::probe::{which, Backend, Probe};
use super::wheel::{Viewers, Wheel};
use crate::config::own_display::OwnDisplaySettings as OwnOptions;

/// The VNC servers, with the Debian package that ships each.
pub const X11VNC: (&str, &str) = ("x11vnc", "x11vnc");
pub const WAYVNC: (&str, &str) = ("wayvnc", "wayvnc");
/// The socket's name in the directory.
const SOCKET: &str = "rfb.sock";
/// `<daemon pid> <server pid> <marker>`: what a crashed daemon left running.
const RECORD: &str = "record";

/// The server's marker (in its environment as `MARKER_ENV`).
fn marker() -> String {
    format!("box-view-{}", std::process::id())
}

/// The server for a backend.
pub fn server_for(backend: Backend) -> (&'static str, &'static str) {
    match backend {
        Backend::X11 => X11VNC,
        Backend::Wayland => WAYVNC,
    }
}

/// What to install so the box's display can be viewed, if anything (for `/view` and
/// `doctor`).
pub fn missing(probe: &Probe) -> Option<String> {
    let Some(backend) = probe.backend else {
        return Some(format!(
            "the box has no usable display to view: {}",
            probe.problem.as_deref().unwrap_or("none found")
        ));
    };
    let (name, package) = server_for(backend);
    which(name, probe.env.path.as_deref()).is_none().then(|| {
        format!(
            "the live view of the box's {} display needs {name}: install it \
             (Debian/Ubuntu: apt install {package})",
            backend.as_str()
        )
    })
}

/// Whether the box's display can be shown live: the grant JSON's `"live_view"` for a grant
/// on it, which the console reads before it asks for a view. Judged on the newest probe
/// whatever its age, with the server's program looked up now (installing x11vnc shows at the
/// next listing): the grant list is built under the registry's lock and polled, so it never
/// waits on the display server. Before any probe it says `false` and starts the first one
/// on a thread of its own, so the next listing knows. A view that still cannot start is
/// `503` at `/view`, and the console goes back to screenshots.
pub fn viewable(host: &Arc<crate::tools::ToolHost>) -> bool {
    if let Some(probe) = host.display.newest() {
        return missing(&probe).is_none();
    }
    if !host.box_view.first_probe.swap(true, Ordering::SeqCst) {
        let probing = Arc::clone(host);
        let spawned = std::thread::Builder::new()
            .name("display-probe".into())
            .spawn(move || {
                probing.display.probe(&probing.config, &probing.processes);
            });
        if let Err(e) = spawned {
            // The next screenshot or view probes instead.
            log::warn!("cannot start the first display probe: {e}");
            host.box_view.first_probe.store(false, Ordering::SeqCst);
        }
    }
    false
}

#[derive(Debug)]
struct Running {
    child: Child,
    socket: PathBuf,
}

#[derive(Debug, Default)]
struct State {
    running: Option<Running>,
    /// Moved by every admission: a linger that sees it moved leaves the server be.
    generation: u64,
    stopped: bool,
}

/// The box display's VNC server, its wheel and its viewers. One per daemon.
#[derive(Debug)]
pub struct BoxView {
    dir: PathBuf,
    linger: Duration,
    start_timeout: Duration,
    stop_timeout: Duration,
    wheel: Arc<Wheel>,
    viewers: Arc<Viewers>,
    state: Arc<(Mutex<State>, Condvar)>,
    audit: Arc<OnceLock<crate::audit::Audit>>,
    /// Whether [`viewable`] has started the daemon's first display probe.
    first_probe: AtomicBool,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl BoxView {
    pub fn new(opts: &OwnOptions) -> BoxView {
        let audit: Arc<OnceLock<crate::audit::Audit>> = Arc::default();
        BoxView {
            dir: opts.parent().join("box-view"),
            linger: opts.box_view_linger,
            start_timeout: opts.start_timeout,
            stop_timeout: opts.stop_timeout,
            wheel: Arc::new(Wheel::new(
                "box-display",
                opts.wheel_idle,
                Arc::clone(&audit),
            )),
            viewers: Arc::default(),
            state: Arc::default(),
            audit,
            first_probe: AtomicBool::new(false),
        }
    }

    /// Record the wheel's changes of hands in `audit` from now on.
    pub fn report_to(&self, audit: crate::audit::Audit) {
        let _ = self.audit.set(audit);
    }

    /// Who drives the box's display (§23).
    pub fn wheel(&self) -> &Arc<Wheel> {
        &self.wheel
    }

    pub fn viewers(&self) -> &Arc<Viewers> {
        &self.viewers
    }

    /// Whether the server runs now (for tests and `doctor`).
    pub fn is_running(&self) -> bool {
        let mut st = lock(&self.state.0);
        running_now(&mut st)
    }

    /// The server's socket for one more viewer, starting it if it is not running; `Err`
    /// (status, why) when it cannot run. The caller calls [`BoxView::left`] when the
    /// viewer goes.
    pub fn admit(&self, probe: &Probe, env: &[(String, String)]) -> Result<PathBuf, (u16, String)> {
        if let Some(why) = missing(probe) {
            return Err((503, why));
        }
        let backend = probe.backend.expect("missing() checked it");
        let mut st = lock(&self.state.0);
        if st.stopped {
            return Err((503, "the daemon is stopping".into()));
        }
        st.generation += 1;
        if running_now(&mut st) {
            return Ok(st.running.as_ref().expect("running").socket.clone());
        }
        let running = self.start(backend, probe, env).map_err(|why| (503, why))?;
        let socket = running.socket.clone();
        st.running = Some(running);
        Ok(socket)
    }

    /// A viewer left: with none left, the server stops after the linger unless one comes.
    pub fn left(&self) {
        if self.viewers.count() > 0 {
            return;
        }
        let generation = lock(&self.state.0).generation;
        let state = Arc::clone(&self.state);
        let viewers = Arc::clone(&self.viewers);
        let (linger, patience) = (self.linger, self.stop_timeout);
        let spawned = std::thread::Builder::new()
            .name("box-view-linger".into())
            .spawn(move || {
                let (m, cv) = &*state;
                let deadline = Instant::now() + linger;
                let mut st = lock(m);
                // Woken early by an admission (the generation moves) or the daemon's stop.
                while st.generation == generation && !st.stopped {
                    let left = deadline.saturating_duration_since(Instant::now());
                    if left.is_zero() {
                        break;
                    }
                    st = cv
                        .wait_timeout(st, left)
                        .unwrap_or_else(|e| e.into_inner())
                        .0;
                }
                if st.generation == generation && !st.stopped && viewers.count() == 0 {
                    if let Some(mut r) = st.running.take() {
                        super::own::stop_child(&mut r.child, patience);
                        let _ = std::fs::remove_file(&r.socket);
                        log::info!("the box display's VNC server stopped: no viewer left");
                    }
                }
            });
        if let Err(e) = spawned {
            log::warn!("cannot start the box view's linger: {e}; it stops with the daemon");
        }
    }

    /// At start: a server a crashed daemon left (its record names a daemon that is gone
    /// and a process that still carries its marker) is killed, and the directory removed.
    /// Returns whether one was killed.
    pub fn clean_stale(&self) -> bool {
        let Ok(record) = std::fs::read_to_string(self.dir.join(RECORD)) else {
            return false;
        };
        let mut fields = record.split_whitespace();
        let (Some(daemon), Some(pid), Some(marker)) = (
            fields.next().and_then(|p| p.parse::<u32>().ok()),
            fields.next().and_then(|p| p.parse::<u32>().ok()),
            fields.next(),
        ) else {
            let _ = std::fs::remove_dir_all(&self.dir);
            return false;
        };
        let daemon_alive = daemon != std::process::id()
            && std::path::Path::new(&format!("/proc/{daemon}")).exists();
        if daemon_alive {
            return false;
        }
        let killed = super::own::carries_marker(pid, marker, &Settle::now())
            && rustix::process::Pid::from_raw(pid as i32)
                .map(|p| rustix::process::kill_process(p, rustix::process::Signal::KILL))
                .is_some_and(|r| r.is_ok());
        if killed {
            log::info!("killed the box view's server (pid {pid}) a crashed daemon left");
        }
        let _ = std::fs::remove_dir_all(&self.dir);
        killed
    }

    /// With the daemon: every viewer ends and the server stops, leaving nothing behind.
    pub fn shutdown(&self) {
        self.viewers.end_all();
        let (m, cv) = &*self.state;
        let mut st = lock(m);
        st.stopped = true;
        cv.notify_all();
        if let Some(mut r) = st.running.take() {
            super::own::stop_child(&mut r.child, self.stop_timeout);
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }

    fn start(
        &self,
        backend: Backend,
        probe: &Probe,
        env: &[(String, String)],
    ) -> Result<Running, String> {
        let (name, _) = server_for(backend);
        let program = which(name, probe.env.path.as_deref()).ok_or_else(|| name.to_string())?;
        if let Some(parent) = self.dir.parent() {
            let _ = std::fs::DirBuilder::new()
                .recursive(true)
                .mode(0o700)
                .create(parent);
        }
        let _ = std::fs::remove_dir_all(&self.dir);
        std::fs::DirBuilder::new()
            .mode(0o700)
            .create(&self.dir)
            .map_err(|e| format!("cannot create {}: {e}", self.dir.display()))?;
        let socket = self.dir.join(SOCKET);
        let log = std::fs::File::create(self.dir.join(format!("{name}.log")))
            .map_err(|e| format!("cannot open its log: {e}"))?;
        let mut cmd = Command::new(&program);
        match backend {
            // No TCP listener at all: -rfbport 0 ends the IPv4 one, but 0.9.16 still opens
            // [::]:5900 unless -rfbportv6 -1 (-noipv6 does not stop it; there is no
            // -unixsockonly). No password, since only the daemon's user reaches the 0700
            // directory and the bridge enforces view-only.
            Backend::X11 => {
                cmd.arg("-unixsock").arg(&socket).args([
                    "-rfbport",
                    "0",
                    "-rfbportv6",
                    "-1",
                    "-shared",
                    "-forever",
                    "-nopw",
                    "-nossl",
                    "-noipv6",
                    "-nocmds",
                ]);
                if let Some(d) = &probe.env.display {
                    cmd.args(["-display", d]);
                }
            }
            Backend::Wayland => {
                cmd.arg("--unix-socket").arg(&socket);
            }
        }
        // The marker lets a later daemon tell this process from one that reused its pid.
        let marker = marker();
        cmd.env_clear()
            .envs(env.iter().map(|(k, v)| (k.as_str(), v.as_str())))
            .env(crate::cgroup::MARKER_ENV, &marker)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log)
            // Its own process group: the lender's session, not a grant's cgroup.
            .process_group(0);
        let mut child = cmd
            .spawn()
            .map_err(|e| format!("cannot run {}: {e}", program.display()))?;
        // So a daemon that crashed leaves a record the next one acts on (`clean_stale`).
        let record = format!("{} {} {marker}\n", std::process::id(), child.id());
        if let Err(e) = std::fs::write(self.dir.join(RECORD), record) {
            log::warn!("the box view's record could not be written: {e}");
        }
        // Until it listens: watched on the child and the socket, bounded by the start timeout.
        let deadline = Instant::now() + self.start_timeout;
        let mut pause = Duration::from_millis(5);
        loop {
            if listening(&socket) {
                log::info!("the box display's VNC server ({name}) started for a viewer");
                return Ok(Running { child, socket });
            }
            if let Ok(Some(status)) = child.try_wait() {
                let log = std::fs::read_to_string(self.dir.join(format!("{name}.log")))
                    .unwrap_or_default();
                // Its deprecation notices ("renamed: …") say nothing of why it stopped.
                let tail: String = log
                    .lines()
                    .filter(|l| !l.contains("renamed:"))
                    .rev()
                    .take(3)
                    .collect::<Vec<_>>()
                    .join(" / ");
                return Err(format!(
                    "{name} exited ({status}) before it listened: {tail}"
                ));
            }
            if Instant::now() >= deadline {
                super::own::stop_child(&mut child, self.stop_timeout);
                return Err(format!(
                    "{name} did not listen within {} ms",
                    self.start_timeout.as_millis()
                ));
            }
            // No signal tells when a socket starts listening: polled, backing off.
            std::thread::sleep(pause);
            pause = (pause * 2).min(Duration::from_millis(100));
        }
    }
}

/// Whether a Unix socket at `path` is listening, read from `/proc/net/unix` rather than by
/// connecting: wayvnc 0.5.0 crashes (SIGSEGV) on a client that connects and leaves at once.
fn listening(path: &std::path::Path) -> bool {
    const ACCEPTCON: u32 = 0x10000;
    let Ok(table) = std::fs::read_to_string("/proc/net/unix") else {
        return false;
    };
    let want = path.to_string_lossy();
    table.lines().skip(1).any(|line| {
        let fields: Vec<&str> = line.split_whitespace().collect();
        fields.len() >= 8
            && fields[7] == want
            && u32::from_str_radix(fields[3], 16).is_ok_and(|f| f & ACCEPTCON != 0)
    })
}

fn running_now(st: &mut State) -> bool {
    let exited = match st.running.as_mut() {
        None => return false,
        Some(r) => !matches!(r.child.try_wait(), Ok(None)),
    };
    if exited {
        st.running = None;
    }
    !exited
}

/// The wheel a call of the agent drives under (§23): its own display's, else the box's.
pub fn call_wheel(cx: &crate::tools::CallContext) -> Arc<Wheel> {
    match super::own::own_of(cx) {
        Some(own) => own.wheel_arc(),
        None => Arc::clone(&cx.host.box_view.wheel),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A server whose daemon is gone is killed at the next start; one that only reuses the
    /// pid (no marker) is left alone.
    #[test]
    fn a_crashed_daemons_server_is_killed_at_start() {
        let root = std::env::temp_dir().join(format!("handnode-boxview-{}", std::process::id()));
        let opts = OwnOptions {
            dir: Some(root.clone()),
            ..OwnOptions::default()
        };
        let view = BoxView::new(&opts);
        // A daemon that is gone: a pid above the kernel's largest (2^22), never reused.
        let gone = (1u32 << 22) + 1;
        for (marked, killed) in [(true, true), (false, false)] {
            std::fs::create_dir_all(&view.dir).unwrap();
            let mut cmd = Command::new("sleep");
            cmd.arg("60");
            if marked {
                cmd.env(crate::cgroup::MARKER_ENV, "box-view-1");
            }
            let mut server = cmd.spawn().unwrap();
            // Until it has exec'd (and its new environment is set up), /proc shows the
            // parent's or none.
            let deadline = std::time::Instant::now() + Duration::from_secs(10);
            let ran = |pid: u32| {
                let comm = std::fs::read_to_string(format!("/proc/{pid}/comm"));
                let environ = std::fs::read(format!("/proc/{pid}/environ")).unwrap_or_default();
                comm.is_ok_and(|c| c.trim() == "sleep") && !environ.is_empty()
            };
            while !ran(server.id()) {
                assert!(
                    std::time::Instant::now() < deadline,
                    "watchdog: sleep never ran"
                );
                std::thread::yield_now();
            }
            let record = format!("{gone} {} box-view-1\n", server.id());
            std::fs::write(view.dir.join(RECORD), record).unwrap();
            assert_eq!(view.clean_stale(), killed, "marked {marked}");
            assert!(!view.dir.exists(), "the directory is removed");
            if killed {
                let status = server.wait().unwrap();
                assert!(!status.success(), "killed: {status}");
            } else {
                assert!(matches!(server.try_wait(), Ok(None)), "left alone");
                server.kill().unwrap();
                server.wait().unwrap();
            }
        }
        let _ = std::fs::remove_dir_all(&root);
    }
}
