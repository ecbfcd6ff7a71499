//! The `bwrap` walls (contract §21): one wall around every process of every non-`owner`
//! grant — its `bash` and jobs, its `app_open` apps, its throwaway browser — that keeps it
//! from acting as the lender. Owns probing `bwrap` (and `pasta`), the list of what is
//! hidden, and the arguments of each wall; `--isolation` (and the finer
//! `--browser-isolation`/`--own-display-isolation`) decide whether a box where `bwrap` does
//! not work refuses to start or goes on without the wall (with a warning).
//!
//! **What a grant's wall does.** Inside, the file system is the box's (`--dev-bind / /`),
//! except that handnode's state dir, config dir, token file, `$CREDENTIALS_DIRECTORY` and
//! local admin socket read empty, and so do the other grants' browser and display dirs.
//! `/sys/fs/cgroup` is read-only (every v1 hierarchy and `unified` beneath it) and the wall
//! has a cgroup namespace rooted at the run's own group (the child enters that group
//! before it execs `bwrap`, `cgroup::enter`), so nothing inside moves itself out of its grant's groups
//! and dies with the grant. A PID namespace with a fresh `/proc` hides every other process,
//! the daemon's among them. When `bwrap` runs with capabilities (handnode as root) the wall
//! also gets a user namespace and `--cap-drop ALL`: without that, root inside could simply
//! `umount` the tmpfs over the state dir and read the token beneath.
//!
//! **An own display's wall** also empties the owner's runtime directory, their X cookies,
//! `/tmp/.X11-unix` (its own display's socket bound back), `/tmp/.ICE-unix`, `/run/user`
//! and `/run/dbus`, and — with `pasta` — lives in the display's network namespace, so no
//! abstract socket of the box's X servers or session buses is reachable. That namespace is
//! made once per display ([`OwnNet`]): a holder (`bwrap --unshare-net … sleep`, in the
//! display's cgroup) makes it, `pasta` attaches to it while the holder waits on
//! `--block-fd`, and the daemon keeps it by open descriptors; every walled call joins it
//! (`setns` between fork and exec, `cgroup::join_network`) instead of making its own, which
//! cost a `pasta` start per call (~150 ms, docs/performance.md). `pasta` spawning a
//! namespace itself cannot run as root (it maps uid 0 without `CAP_SETFCAP`, which the
//! kernel refuses), hence the holder.
//!
//! **Why browsers keep the box's PID namespace.** The browser tier's sweep finds chromium
//! by its tag in `/proc`, and a browser runs no command the agent chose; its wall has the
//! rest (the read-only cgroups, the user namespace as root).

use std::collections::HashMap;
use std::ffi::{OsStr, OsString};
use std::io::{Read as _, Write as _};
use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{LazyLock, Mutex};
use std::time::{Duration, Instant};

use crate::config::{Config, IsolationMode};
use crate::Error;

/// What the escalation check adds for a non-owner grant whose shell runs without the wall
/// (§21: `--isolation none`, or `auto` where `bwrap` does not work).
pub const UNWALLED_SHELL: &str = "its shell runs without the wall (isolation none): it can \
read handnode's token and grants.json and use the local admin socket, the lender's own \
channel, and so approve, renew or lend the box further";

/// Read-only inside every wall: the box's cgroup hierarchies (`/sys/fs/cgroup`, every v1
/// hierarchy and `unified` beneath it) and every other kernel knob root could write.
const SYS: &str = "/sys";

/// The `bwrap` program and what it hides. Inside, the whole file system is the box's
/// (`--dev-bind / /`: chromium needs `/dev/shm`, `/proc`, fonts, the display's sockets),
/// except that each hidden directory is an empty tmpfs and each hidden file reads empty.
#[derive(Clone, Debug)]
pub struct Bwrap {
    pub program: PathBuf,
    /// Emptied directories: the state dir, the config dir, `$CREDENTIALS_DIRECTORY`, the
    /// browsers' dir, the own displays' parent (and, for own-display walls, the owner's
    /// runtime directory and the box's X and bus socket dirs).
    pub hide_dirs: Vec<PathBuf>,
    /// Files that read empty: the token file (wherever it is), the local admin socket (and,
    /// for own-display walls, the owner's `$XAUTHORITY`).
    pub hide_files: Vec<PathBuf>,
    /// `bwrap` runs with capabilities (as root): give the wall a user namespace and drop
    /// every capability, so its mounts are locked.
    pub lock: bool,
    /// `pasta`, for a wall with a network namespace of its own (own displays).
    pub pasta: Option<PathBuf>,
}

impl Bwrap {
    /// A wall of `program` hiding `dirs` and `files`, locked when this process is root.
    pub fn new(program: PathBuf, hide_dirs: Vec<PathBuf>, hide_files: Vec<PathBuf>) -> Bwrap {
        Bwrap {
            program,
            hide_dirs,
            hide_files,
            lock: rustix::process::geteuid().is_root(),
            pasta: None,
        }
    }

    /// What every wall starts with: the user namespace without capabilities (as root),
    /// `--dev-bind / /` (for a grant's processes, `own_dev`, with a `/dev` of its own: no
    /// disk, input or sound device of the box, whose nodes root would open), what is
    /// hidden, and `/sys` read-only with a cgroup namespace of its own.
    fn hiding(&self, own_dev: bool) -> Vec<OsString> {
        let mut args: Vec<OsString> = Vec::new();
        if self.lock {
            args.extend(["--unshare-user", "--cap-drop", "ALL"].map(OsString::from));
        }
        args.extend(["--dev-bind", "/", "/"].map(OsString::from));
        if own_dev {
            args.extend(["--dev", "/dev"].map(OsString::from));
        }
        // Parents before children: a tmpfs over a parent would cover a child's mount.
        // Only paths that exist: with / bound, a missing mount point would be created on
        // the box's own file system.
        // Locked (as root), the wall has no capabilities: what lies past a directory it may
        // not pass through (another user's 0700 runtime dir) is out of its reach anyway, and
        // bwrap could not mount over it (`Can't create file at …: Permission denied`).
        let reachable = |p: &&PathBuf| !self.lock || reachable_without_caps(p);
        let mut dirs: Vec<&PathBuf> = self
            .hide_dirs
            .iter()
            .filter(|d| d.is_dir())
            .filter(reachable)
            .collect();
        dirs.sort_by_key(|d| d.components().count());
        dirs.dedup();
        for dir in dirs {
            args.push("--tmpfs".into());
            args.push(dir.into());
        }
        // Files and sockets alike (a bind mount covers any non-directory).
        let hidden = |f: &&PathBuf| f.symlink_metadata().is_ok_and(|m| !m.is_dir());
        for file in self.hide_files.iter().filter(hidden).filter(reachable) {
            args.push("--ro-bind".into());
            args.push("/dev/null".into());
            args.push(file.into());
        }
        args.extend(cgroup_args());
        args
    }

    /// `bwrap`'s arguments up to (not including) the browser's own argv, for a browser
    /// whose directory is `own` under the browsers' parent `base`: the browsers' parent
    /// is an empty tmpfs holding only this browser's own directory. `--die-with-parent`
    /// ends the browser if `bwrap` is killed (the supervisor thread that starts it lives
    /// as long as the tier).
    pub fn args(&self, own: &Path, base: &Path) -> Vec<OsString> {
        let mut args: Vec<OsString> = vec!["--die-with-parent".into()];
        args.extend(self.hiding(false));
        args.extend(own_only(base, Some(own)));
        args.push("--chdir".into());
        args.push(own.into());
        args.push("--".into());
        args
    }

    /// The program and its arguments up to (not including) what the grant runs (`bash`,
    /// an app): the grant's wall, with a fresh `/proc` in a PID namespace of its own. For
    /// a grant with its own display, `own` is `(parent, dir, x_socket)`: the own displays'
    /// parent is emptied but for the grant's `dir` (when its display has started), and its
    /// X socket (`(where it is, where clients look for it)`: in the display's own socket
    /// directory, [`Bwrap::display_args`]) is bound into the emptied `/tmp/.X11-unix`; with `pasta`, the wall
    /// runs in the display's network, `net` ([`OwnNet::join`]), and without one in a
    /// network of its own with nothing in it (never the box's). No `--die-with-parent`:
    /// the kernel ties that to the *thread* that spawned it, and a run ends through its
    /// group (§16) anyway, which holds `bwrap` and everything inside.
    pub fn grant_args(
        &self,
        own: Option<(&Path, Option<&Path>, Option<XSocket>)>,
        net: Option<NetJoin>,
    ) -> Walled {
        let mut args = self.hiding(true);
        args.extend(["--unshare-pid", "--proc", "/proc"].map(OsString::from));
        if let Some((parent, dir, x_socket)) = own {
            args.extend(own_only(parent, dir));
            if let Some((socket, seen_at)) = x_socket.filter(|(s, _)| s.exists()) {
                args.extend(["--bind".into(), socket.into(), seen_at.into()]);
            }
        }
        if self.pasta.is_some() && net.is_none() {
            args.push("--unshare-net".into());
        }
        args.push("--".into());
        Walled {
            program: self.program.clone(),
            args,
            net,
        }
    }

    /// The wall of an own display's own processes (§21, §23): its X server (a large parser
    /// of whatever the agent's clients send), window manager and session bus run in the
    /// wall of the grant's shell, so a client that breaks one lands where it started. As
    /// [`Bwrap::grant_args`] (handnode's files and the other grants' directories hidden,
    /// `/sys` read-only, a `/dev` and a PID namespace of its own), and: no network at all
    /// (`--unshare-net`; an X server on Unix sockets needs none, and its abstract socket
    /// is then its own namespace's, never the box's); a `/tmp` of its own (`x_tmp`), so
    /// the lock file the server writes names its pid in its own namespace to nobody else;
    /// the grant's runtime `dir` bound back (its cookie, the live view's socket, the bus's
    /// socket), and the display's socket directory `x_sockets` (in `dir`) as
    /// `<x_tmp>/.X11-unix`, where the server makes its socket and every client looks.
    /// With `own_pids`, the program is the pid 1 of a PID namespace of its own with a
    /// fresh `/proc` (`--as-pid-1`: when it ends, all it started ends). Without, it keeps
    /// the box's, as a browser's wall does: the session bus, because the accessibility bus
    /// it starts names each application's process for the `apps` profile's check
    /// (`GetConnectionUnixProcessID`), and a bus in a PID namespace of its own sees the
    /// grant's apps, in their walls' namespaces, as pid 0. Its user namespace still keeps
    /// it from the daemon's and other walls' processes (`/proc/<pid>/root`, `environ`).
    /// `bwrap` writes the program's pid as the box sees it to its stdin (`--info-fd 0`,
    /// read by [`spawn_inside`]); a small `sh` gives the program `/dev/null` for the stdin
    /// `bwrap` closed. `program` is what runs (found on the daemon's `PATH`; one beneath
    /// `x_tmp` is bound into the wall's own `/tmp`); add its arguments.
    pub fn display_args(
        &self,
        program: &Path,
        parent: &Path,
        dir: &Path,
        x_sockets: &Path,
        x_tmp: &Path,
        own_pids: bool,
    ) -> Walled {
        let mut args = self.hiding(true);
        if own_pids {
            args.extend(["--unshare-pid", "--as-pid-1", "--proc", "/proc"].map(OsString::from));
        }
        args.extend(["--unshare-net", "--tmpfs"].map(OsString::from));
        args.push(x_tmp.into());
        // After the tmpfs over /tmp: the runtime directories' parent may lie beneath it.
        args.extend(own_only(parent, Some(dir)));
        args.extend([
            "--bind".into(),
            x_sockets.into(),
            x_tmp.join(".X11-unix").into(),
        ]);
        if program.starts_with(x_tmp) {
            args.extend(["--ro-bind".into(), program.into(), program.into()]);
        }
        args.extend(["--info-fd", "0", "--", "/bin/sh", "-c", STDIN_NULL].map(OsString::from));
        args.push(program.into());
        Walled {
            program: self.program.clone(),
            args,
            net: None,
        }
    }

    /// Make an own display's network ([`OwnNet`]): `command` makes the command of a
    /// program (in the display's group, with its environment) and `spawn` starts it;
    /// `scratch` is a private directory no wall sees (`pasta`'s pid file and its error);
    /// each wait is bounded by `timeout`. `Err` says why, in words for the agent.
    pub fn own_net(
        &self,
        command: &dyn Fn(&Path) -> Command,
        spawn: &dyn Fn(&mut Command) -> std::io::Result<Child>,
        scratch: &Path,
        timeout: Duration,
    ) -> Result<OwnNet, String> {
        let Some(pasta) = &self.pasta else {
            return Err("no pasta here".into());
        };
        let why =
            |what: String| format!("pasta could not give this grant's wall its network: {what}");
        // The holder: a namespace (and, as root, a user namespace without capabilities,
        // as every locked wall has) with nothing in it but `sleep`, held on its
        // `--block-fd` until pasta is attached. Its info (`child-pid`) on stdout, the
        // block on stdin.
        let mut holder_cmd = command(&self.program);
        if self.lock {
            holder_cmd.args(["--unshare-user", "--cap-drop", "ALL"]);
        }
        holder_cmd
            .args(["--dev-bind", "/", "/", "--unshare-net"])
            .args([
                "--info-fd",
                "1",
                "--block-fd",
                "0",
                "--",
                "/bin/sh",
                "-c",
                HOLDER,
            ])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let mut holder = spawn(&mut holder_cmd)
            .map_err(|e| why(format!("cannot run {}: {e}", self.program.display())))?;
        let made = self.attach_pasta(pasta, &mut holder, command, spawn, scratch, timeout);
        match made {
            Ok(mut net) => {
                net.holder = Some(holder);
                Ok(net)
            }
            Err(e) => {
                let _ = holder.kill();
                let mut err = String::new();
                if let Some(mut stderr) = holder.stderr.take() {
                    let _ = stderr.by_ref().take(400).read_to_string(&mut err);
                }
                let _ = holder.wait();
                let err = err.trim();
                Err(why(if err.is_empty() {
                    e
                } else {
                    format!("{e}: {err}")
                }))
            }
        }
    }

    /// The rest of [`Bwrap::own_net`], once the holder runs: its namespaces held open,
    /// pasta attached, the holder let go on to `sleep`.
    fn attach_pasta(
        &self,
        pasta: &Path,
        holder: &mut Child,
        command: &dyn Fn(&Path) -> Command,
        spawn: &dyn Fn(&mut Command) -> std::io::Result<Child>,
        scratch: &Path,
        timeout: Duration,
    ) -> Result<OwnNet, String> {
        let stdout = holder.stdout.take().ok_or("no info pipe")?;
        let (pid, stdout) = child_pid(stdout, timeout)
            .ok_or_else(|| format!("{} did not say its child's pid", self.program.display()))?;
        holder.stdout = Some(stdout);
        // The holder's child waits on the block fd until this process writes to it, so its
        // pid names it and nothing else until then: its namespaces are opened here and
        // held by descriptor from now on, and the pidfd kills exactly it.
        // Killed on every way out but success (`Killed`'s drop): once let go, it would
        // sleep forever.
        let sleeper = rustix::process::Pid::from_raw(pid)
            .ok_or("a pid of 0")
            .map_err(String::from)
            .and_then(|p| {
                rustix::process::pidfd_open(p, rustix::process::PidfdFlags::empty())
                    .map_err(|e| format!("pidfd_open: {e}"))
            })
            .map(Killed)?;
        let ns = |kind: &str| -> Result<OwnedFd, String> {
            std::fs::File::open(format!("/proc/{pid}/ns/{kind}"))
                .map(OwnedFd::from)
                .map_err(|e| format!("cannot open its {kind} namespace: {e}"))
        };
        let net = ns("net")?;
        // Refused outright: a namespace that is the box's own would join every wall to it.
        let same = |a: &rustix::fs::Stat, b: &rustix::fs::Stat| {
            a.st_ino == b.st_ino && a.st_dev == b.st_dev
        };
        let ours = rustix::fs::stat("/proc/self/ns/net").map_err(|e| e.to_string())?;
        let theirs = rustix::fs::fstat(&net).map_err(|e| e.to_string())?;
        if same(&ours, &theirs) {
            return Err("its network namespace is the box's".into());
        }
        // Root joins the network namespace directly; anyone else must join the user
        // namespace that owns it first (`cgroup::join_network`).
        let user = if self.lock { None } else { Some(ns("user")?) };
        let pid_file = scratch.join("pasta.pid");
        let err_file = scratch.join("pasta.err");
        let err_out = std::fs::File::create(&err_file).map_err(|e| e.to_string())?;
        let mut cmd = command(pasta);
        if self.lock {
            // As root pasta would drop to `nobody` before it joins the namespaces.
            cmd.args(["--runas", "0"]);
        }
        cmd.args(["-q", "--config-net", "--pid"])
            .arg(&pid_file)
            .arg("--netns")
            .arg(format!("/proc/{pid}/ns/net"))
            .arg("--userns")
            .arg(format!("/proc/{pid}/ns/user"))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(err_out);
        // pasta forks its daemon once the namespace is configured and then exits 0.
        let mut setup =
            spawn(&mut cmd).map_err(|e| format!("cannot run {}: {e}", pasta.display()))?;
        let status = wait_at_most(&mut setup, timeout);
        let pasta_err = || {
            let text = std::fs::read(&err_file).unwrap_or_default();
            String::from_utf8_lossy(&text[..text.len().min(400)])
                .trim()
                .to_string()
        };
        match status {
            Some(s) if s.success() => {}
            Some(s) => return Err(format!("{} ({s}): {}", pasta.display(), pasta_err())),
            None => {
                return Err(format!(
                    "{} did not finish within {} ms",
                    pasta.display(),
                    timeout.as_millis()
                ))
            }
        }
        let pasta_pid = std::fs::read_to_string(&pid_file)
            .ok()
            .and_then(|t| t.trim().parse::<i32>().ok())
            .and_then(rustix::process::Pid::from_raw)
            .ok_or("pasta wrote no pid")?;
        // Opened as soon as pasta's parent is gone: the daemon it forked runs until killed.
        let pasta_pidfd =
            rustix::process::pidfd_open(pasta_pid, rustix::process::PidfdFlags::empty())
                .map(Killed)
                .map_err(|e| format!("pasta is not running: {e}"))?;
        let mut go = holder.stdin.take().ok_or("no block pipe")?;
        go.write_all(b"g")
            .map_err(|e| format!("cannot let the holder go: {e}"))?;
        // Not joinable before its command runs: bwrap finishes the user namespace (its uid
        // and gid maps) around the block, and a process that joins a user namespace in
        // which its uid has no mapping can make no namespace of its own (the wall's
        // `bwrap` fails with EPERM). The holder says when it runs.
        let stderr = holder.stderr.take().ok_or("no holder stderr")?;
        wait_for_line(stderr, HOLDER_READY, timeout)
            .map_err(|said| format!("the namespace's holder did not start: {said}"))?;
        Ok(OwnNet {
            net,
            user,
            holder_pid: pid as u32,
            sleeper,
            pasta_pid: pasta_pid.as_raw_nonzero().get() as u32,
            pasta: pasta_pidfd,
            holder: None,
        })
    }
}

/// One own display's network namespace (§21): made once when the display starts
/// ([`Bwrap::own_net`]) and joined by every walled call of its grant ([`OwnNet::join`]).
/// Held by open descriptors, never by a `/proc/<pid>` path a later process could reuse;
/// the holder and `pasta` are killed by pidfd when it is dropped (and sit in the display's
/// cgroup, so the grant's end kills them too).
#[derive(Debug)]
pub struct OwnNet {
    net: OwnedFd,
    /// The user namespace that owns `net`, for a daemon without root (joined first).
    user: Option<OwnedFd>,
    /// The holder's sleeping child, by pid (for the stale cleanup's record and the tests)
    /// and by pidfd (what kills it).
    holder_pid: u32,
    sleeper: Killed,
    /// `pasta`'s daemon, by pid (for the record) and pidfd.
    pasta_pid: u32,
    pasta: Killed,
    /// `bwrap` around the holder: killed and reaped on drop.
    holder: Option<Child>,
}

impl OwnNet {
    /// Descriptors of the namespaces for one command to join (duplicates, `O_CLOEXEC`).
    pub fn join(&self) -> std::io::Result<NetJoin> {
        Ok(NetJoin {
            user: self.user.as_ref().map(|u| u.try_clone()).transpose()?,
            net: self.net.try_clone()?,
        })
    }

    /// Whether the holder and `pasta` both still run (a halt kills the grant's cgroup, and
    /// with it both: the namespace would be held with no way out).
    pub fn alive(&self) -> bool {
        use rustix::event::{poll, PollFd, PollFlags, Timespec};
        let mut fds = [
            PollFd::new(&self.sleeper.0, PollFlags::IN),
            PollFd::new(&self.pasta.0, PollFlags::IN),
        ];
        let now = Timespec {
            tv_sec: 0,
            tv_nsec: 0,
        };
        // A pidfd turns readable when its process exits.
        matches!(poll(&mut fds, Some(&now)), Ok(0))
    }

    /// The holder's and `pasta`'s pids, for the display's record.
    pub fn pids(&self) -> Vec<u32> {
        vec![self.holder_pid, self.pasta_pid]
    }
}

/// A process by pidfd, SIGKILLed when this is dropped.
#[derive(Debug)]
struct Killed(OwnedFd);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = rustix::process::pidfd_send_signal(&self.0, rustix::process::Signal::KILL);
    }
}

impl Drop for OwnNet {
    fn drop(&mut self) {
        // `sleeper` and `pasta` are killed by their own drops.
        if let Some(mut holder) = self.holder.take() {
            let _ = holder.kill();
            let _ = holder.wait();
        }
    }
}

/// An own display's network, for one command to join (see [`OwnNet::join`]).
#[derive(Debug)]
pub struct NetJoin {
    user: Option<OwnedFd>,
    net: OwnedFd,
}

/// An own display's X socket for a grant's wall: where it is (its display's socket
/// directory) and where X clients look for it (`/tmp/.X11-unix/X<n>`).
pub type XSocket<'a> = (&'a Path, &'a Path);

/// What runs an own display's program inside its wall (`$0` the program, `$@` its
/// arguments): `bwrap` closed its stdin (the info pipe), so it gets `/dev/null` there
/// rather than whatever file it opens first.
const STDIN_NULL: &str = "exec \"$0\" \"$@\" </dev/null";

/// A program started inside a wall of [`Bwrap::display_args`]: `bwrap`, the daemon's
/// child (it exits when the program does), and the program, the wall's pid 1, by its pid
/// as the box sees it (the display's record; `/proc`) and a pidfd (what kills it, and with
/// it everything in its namespace).
#[derive(Debug)]
pub struct Inside {
    pub bwrap: Child,
    pub pid: u32,
    pub pidfd: OwnedFd,
}

/// Start `cmd` (from [`Walled::command`] of [`Bwrap::display_args`], the program added)
/// with `spawn`, its stdin the pipe `bwrap` writes its info to, and learn the program's
/// pid: `bwrap` writes it before it lets the program run, so nothing else can have that
/// pid yet when the pidfd is opened. Waits at most `timeout`; `Err` says why.
pub fn spawn_inside(
    mut cmd: Command,
    spawn: &dyn Fn(&mut Command) -> std::io::Result<Child>,
    timeout: Duration,
) -> Result<Inside, String> {
    let (info, to_bwrap) = rustix::pipe::pipe_with(rustix::pipe::PipeFlags::CLOEXEC)
        .map_err(|e| format!("cannot make a pipe: {e}"))?;
    cmd.stdin(Stdio::from(to_bwrap));
    let spawned = spawn(&mut cmd);
    // The command holds the pipe's other end: gone, a bwrap that fails ends the read.
    drop(cmd);
    let mut bwrap = spawned.map_err(|e| format!("cannot run bwrap: {e}"))?;
    let pid = child_pid(std::fs::File::from(info), timeout).map(|(pid, _)| pid);
    let inside = pid
        .and_then(rustix::process::Pid::from_raw)
        .ok_or_else(|| "bwrap did not say its child's pid".to_string())
        .and_then(|p| {
            rustix::process::pidfd_open(p, rustix::process::PidfdFlags::empty())
                .map_err(|e| format!("pidfd_open: {e}"))
                .map(|fd| (p.as_raw_nonzero().get() as u32, fd))
        });
    match inside {
        Ok((pid, pidfd)) => Ok(Inside { bwrap, pid, pidfd }),
        Err(e) => {
            let _ = bwrap.kill();
            let _ = bwrap.wait();
            Err(e)
        }
    }
}

/// What an own display's network holder runs: it says it runs (once its namespaces are
/// whole, see `attach_pasta`), then sleeps until it is killed.
const HOLDER: &str = "echo ready >&2 && exec sleep infinity";
/// The line [`HOLDER`] says.
const HOLDER_READY: &str = "ready";

/// Read lines of `out` until one is `want` (`Ok`), else what was read (`Err`) at EOF or
/// after `timeout` (read on a short-lived thread, so the wait is bounded).
fn wait_for_line(
    out: impl std::io::Read + Send + 'static,
    want: &'static str,
    timeout: Duration,
) -> Result<(), String> {
    use std::io::BufRead as _;
    let (tx, rx) = crossbeam_channel::bounded(1);
    std::thread::Builder::new()
        .name("own-net-ready".into())
        .spawn(move || {
            let mut said = String::new();
            let mut lines = std::io::BufReader::new(out.take(4096)).lines();
            let got = loop {
                match lines.next() {
                    Some(Ok(line)) if line.trim() == want => break Ok(()),
                    Some(Ok(line)) => {
                        said.push_str(&line);
                        said.push(' ');
                    }
                    _ => break Err(said.trim().to_string()),
                }
            };
            let _ = tx.send(got);
        })
        .map_err(|e| e.to_string())?;
    rx.recv_timeout(timeout)
        .unwrap_or_else(|_| Err(format!("nothing within {} ms", timeout.as_millis())))
}

/// The `child-pid` of `bwrap --info-fd` on `out` once its whole object has come, with
/// `out` given back (kept open: `bwrap` dies of SIGPIPE if the reader leaves while it
/// still writes, and its child then waits forever); `None` at EOF, past 4 KiB or after
/// `timeout` (read on a short-lived thread, so the wait is bounded).
fn child_pid<R: std::io::Read + Send + 'static>(mut out: R, timeout: Duration) -> Option<(i32, R)> {
    let (tx, rx) = crossbeam_channel::bounded(1);
    std::thread::Builder::new()
        .name("own-net-info".into())
        .spawn(move || {
            let mut text = String::new();
            let mut buf = [0u8; 512];
            let pid = loop {
                match out.read(&mut buf) {
                    Ok(0) | Err(_) => break None,
                    Ok(n) => text.push_str(&String::from_utf8_lossy(&buf[..n])),
                }
                if text.len() > 4096 {
                    break None;
                }
                // The object is one, flat: whole at its first '}'.
                let Some((whole, _)) = text.split_once('}') else {
                    continue;
                };
                break whole.split_once("\"child-pid\":").and_then(|(_, rest)| {
                    let digits: String = rest
                        .trim_start()
                        .chars()
                        .take_while(char::is_ascii_digit)
                        .collect();
                    digits.parse().ok()
                });
            };
            let _ = tx.send(pid.map(|p| (p, out)));
        })
        .ok()?;
    rx.recv_timeout(timeout).ok().flatten()
}

/// Wait for `child` at most `patience` (on its pidfd); `None` when it is still running,
/// after it was killed and reaped.
pub(crate) fn wait_at_most(
    child: &mut Child,
    patience: Duration,
) -> Option<std::process::ExitStatus> {
    let deadline = Instant::now() + patience;
    let pidfd = rustix::process::Pid::from_raw(child.id() as i32).and_then(|pid| {
        rustix::process::pidfd_open(pid, rustix::process::PidfdFlags::empty()).ok()
    });
    loop {
        if let Ok(Some(status)) = child.try_wait() {
            return Some(status);
        }
        let left = deadline.saturating_duration_since(Instant::now());
        let Some(fd) = pidfd.as_ref().filter(|_| !left.is_zero()) else {
            let _ = child.kill();
            let _ = child.wait();
            return None;
        };
        let mut fds = [rustix::event::PollFd::new(fd, rustix::event::PollFlags::IN)];
        let ts = rustix::event::Timespec {
            tv_sec: left.as_secs() as i64,
            tv_nsec: left.subsec_nanos() as _,
        };
        let _ = rustix::event::poll(&mut fds, Some(&ts));
    }
}

/// A walled command's program and its arguments up to what runs inside, and the own
/// display's network it joins.
#[derive(Debug)]
pub struct Walled {
    pub program: PathBuf,
    pub args: Vec<OsString>,
    pub net: Option<NetJoin>,
}

impl Walled {
    /// Make `file` (a file or socket bound into the wall) read as `/dev/null` inside: an
    /// own display's live-view socket (§23) in the grant's own runtime directory.
    pub fn cover_file(&mut self, file: &Path) {
        // Before the `--` that ends bwrap's options (last).
        let Some(end) = self.args.iter().rposition(|a| a == "--") else {
            return;
        };
        let cover: [OsString; 3] = ["--ro-bind".into(), "/dev/null".into(), file.into()];
        self.args.splice(end..end, cover);
    }

    /// The command that runs the wall in the run `group` (`None`: in no group, for the
    /// probe): its child enters the group, joins the display's network, then execs
    /// `bwrap`. Spawn it with `group.spawn` (or `cgroup::spawn_alone`) so a failure says why.
    pub fn command(self, group: Option<&crate::cgroup::RunGroup>) -> Command {
        let mut cmd = match group {
            Some(g) => g.command(&self.program),
            None => Command::new(&self.program),
        };
        if let Some(j) = self.net {
            crate::cgroup::join_network(&mut cmd, j.user, j.net);
        }
        cmd.args(self.args);
        cmd
    }
}

/// Whether uid 0 without capabilities (a locked wall's root) may pass through every
/// directory above `path`: by the owner's bits where root owns it, the group's where its
/// group is 0, else the others'.
fn reachable_without_caps(path: &Path) -> bool {
    use std::os::unix::fs::MetadataExt as _;
    path.ancestors().skip(1).all(|dir| {
        let Ok(m) = std::fs::metadata(dir) else {
            return false;
        };
        let bit = if m.uid() == 0 {
            0o100
        } else if m.gid() == 0 {
            0o010
        } else {
            0o001
        };
        m.mode() & bit != 0
    })
}

/// `/sys` read-only (bwrap remounts every submount read-only too, `/sys/fs/cgroup` and
/// its hierarchies among them) and a cgroup namespace.
fn cgroup_args() -> Vec<OsString> {
    let mut args = Vec::new();
    if Path::new(SYS).is_dir() {
        args.extend(["--ro-bind", SYS, SYS].map(OsString::from));
    }
    args.push("--unshare-cgroup".into());
    args
}

/// `parent` emptied, then `own` (when it exists) bound back at its own path.
fn own_only(parent: &Path, own: Option<&Path>) -> Vec<OsString> {
    let mut args: Vec<OsString> = vec!["--tmpfs".into(), parent.into()];
    if let Some(own) = own.filter(|o| o.is_dir()) {
        args.extend(["--bind".into(), own.into(), own.into()]);
    }
    args
}

/// Which wall a probe checks and which flag chooses it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Kind {
    /// A throwaway browser's: the box's PID namespace.
    Browser,
    /// Every other non-owner grant's processes: a PID namespace and a fresh `/proc`, which
    /// some containers refuse where a plain mount namespace works.
    Grant,
    /// An own display's grant: as `Grant`, plus its own network through `pasta` when
    /// `--own-display-network pasta`.
    OwnDisplay,
}

impl Kind {
    /// The flag that chooses this wall.
    pub fn flag(self) -> &'static str {
        match self {
            Kind::Browser => "--browser-isolation",
            Kind::Grant => "--isolation",
            Kind::OwnDisplay => "--own-display-isolation",
        }
    }
}

/// Probes already run in this process, by `PATH` and kind: a daemon probes once at start,
/// and in-process tests start hundreds.
static PROBED: LazyLock<Mutex<HashMap<ProbeKey, Result<PathBuf, String>>>> =
    LazyLock::new(Default::default);

/// A probe's `PATH` and kind.
type ProbeKey = (Option<OsString>, Kind);

/// Find `bwrap` on `path` (a `PATH` value) and check it can build `kind`'s wall here (it
/// needs unprivileged user namespaces unless run as root). `Err` says what to do.
pub fn probe_bwrap(path: Option<&OsStr>, kind: Kind) -> Result<PathBuf, String> {
    // An own display's probe is a grant's: its network is probed by `probe_pasta`.
    let kind = if kind == Kind::OwnDisplay {
        Kind::Grant
    } else {
        kind
    };
    let key = (path.map(OsStr::to_os_string), kind);
    if let Some(known) = PROBED.lock().unwrap_or_else(|e| e.into_inner()).get(&key) {
        return known.clone();
    }
    let found = probe_bwrap_uncached(path, kind);
    PROBED
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .insert(key, found.clone());
    found
}

fn probe_bwrap_uncached(path: Option<&OsStr>, kind: Kind) -> Result<PathBuf, String> {
    let Some(program) = find_on(path, "bwrap") else {
        return Err("bwrap is not installed (Debian/Ubuntu: apt-get install bubblewrap)".into());
    };
    let wall = Bwrap::new(program.clone(), vec![std::env::temp_dir()], Vec::new());
    let mut cmd = std::process::Command::new(&program);
    cmd.arg("--die-with-parent")
        .args(wall.hiding(kind == Kind::Grant));
    if kind == Kind::Grant {
        cmd.args(["--unshare-pid", "--proc", "/proc"]);
    }
    let out = cmd
        .args(["--", "true"])
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .output();
    match out {
        Ok(o) if o.status.success() => Ok(program),
        Ok(o) => Err(format!(
            "{} does not work here ({}): {} (it needs unprivileged user namespaces: \
             sysctl kernel.unprivileged_userns_clone=1, or an AppArmor profile for bwrap; \
             and cgroup namespaces{})",
            program.display(),
            o.status,
            String::from_utf8_lossy(&o.stderr).trim(),
            match kind {
                Kind::Browser => "",
                _ => "; and a PID namespace with its own /proc, which some containers refuse",
            }
        )),
        Err(e) => Err(format!("cannot run {}: {e}", program.display())),
    }
}

/// Find `pasta` on `path` and check it gives an own display's network here: a network made
/// as a display makes it ([`Bwrap::own_net`], each wait bounded by `timeout`), a wall made
/// by `bwrap` joined to it, both gone when the probe returns.
pub fn probe_pasta(
    path: Option<&OsStr>,
    bwrap: &Path,
    timeout: Duration,
) -> Result<PathBuf, String> {
    let Some(pasta) = find_on(path, "pasta") else {
        return Err("pasta is not installed (Debian/Ubuntu: apt-get install passt)".into());
    };
    let mut wall = Bwrap::new(bwrap.to_path_buf(), Vec::new(), Vec::new());
    wall.pasta = Some(pasta.clone());
    let scratch = private_dir("pasta-probe").map_err(|e| format!("cannot probe pasta: {e}"))?;
    let net = wall.own_net(&|p| Command::new(p), &|c| c.spawn(), &scratch, timeout);
    let _ = std::fs::remove_dir_all(&scratch);
    let net = net?;
    let join = net
        .join()
        .map_err(|e| format!("cannot hold its network: {e}"))?;
    let mut cmd = wall.grant_args(None, Some(join)).command(None);
    cmd.arg("true")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    let out = crate::cgroup::spawn_alone(&mut cmd).and_then(|c| c.wait_with_output());
    drop(net);
    match out {
        Ok(o) if o.status.success() => Ok(pasta),
        Ok(o) => Err(format!(
            "a wall cannot join the network {} made here ({}): {}",
            pasta.display(),
            o.status,
            String::from_utf8_lossy(&o.stderr).trim()
        )),
        Err(e) => Err(format!(
            "a wall cannot join the network {} made here: {e}",
            pasta.display()
        )),
    }
}

/// A new directory only this user reaches (0700), under the temporary directory.
fn private_dir(tag: &str) -> std::io::Result<PathBuf> {
    use std::os::unix::fs::DirBuilderExt as _;
    let mut nonce = [0u8; 8];
    getrandom::fill(&mut nonce).map_err(std::io::Error::other)?;
    let name: String = nonce.iter().map(|b| format!("{b:02x}")).collect();
    let dir = std::env::temp_dir().join(format!("handnode-{tag}-{name}"));
    std::fs::DirBuilder::new().mode(0o700).create(&dir)?;
    Ok(dir)
}

fn find_on(path: Option<&OsStr>, name: &str) -> Option<PathBuf> {
    path.map(std::env::split_paths)
        .into_iter()
        .flatten()
        .map(|d| d.join(name))
        .find(|p| p.is_file())
}

/// The wall `mode` asks for, probed on this box: `bwrap` that cannot work is a
/// configuration error (exit 2); `auto` goes on without it and warns (`unwalled` says
/// what that means); `none` is none. `extra_dirs`/`extra_files` are hidden besides
/// handnode's own files.
pub fn for_mode(
    mode: IsolationMode,
    kind: Kind,
    config: &Config,
    extra_dirs: Vec<PathBuf>,
    extra_files: Vec<PathBuf>,
    unwalled: &str,
) -> Result<Option<Bwrap>, Error> {
    if mode == IsolationMode::None {
        return Ok(None);
    }
    match probe_bwrap(std::env::var_os("PATH").as_deref(), kind) {
        Ok(program) => Ok(Some(Bwrap::new(
            program,
            handnode_dirs(config)
                .into_iter()
                .chain(extra_dirs)
                .collect(),
            handnode_files(config)
                .into_iter()
                .chain(extra_files)
                .collect(),
        ))),
        Err(why) if mode == IsolationMode::Bwrap => {
            Err(Error::Config(format!("{} bwrap: {why}", kind.flag())))
        }
        Err(why) => {
            log::warn!(
                "{unwalled}: {why}; pass {} none to silence this",
                kind.flag()
            );
            Ok(None)
        }
    }
}

/// The wall of every non-owner grant without its own display (§21), as `--isolation` asks:
/// besides handnode's files, the browsers' dir and the own displays' parent.
pub fn for_grants(config: &Config, browser_dir: Option<PathBuf>) -> Result<Option<Bwrap>, Error> {
    for_mode(
        config.isolation,
        Kind::Grant,
        config,
        browser_dir
            .into_iter()
            .chain([config.own_display.parent()])
            .collect(),
        Vec::new(),
        "the shells of grants are not walled from handnode's files and the local admin \
         socket (the lender's channel)",
    )
}

/// The wall of own-display grants (§19, §21), as `--own-display-isolation` (else
/// `--isolation`) asks: besides handnode's files, the owner's runtime directory (their
/// session bus, Wayland socket, `systemd --user`), their X cookies (`$XAUTHORITY`,
/// `~/.Xauthority`), the box's X and bus socket dirs and the browsers' directory
/// (`browser_dir`); with `--own-display-network pasta`, its own network, and a box without
/// `pasta` is refused here only when `bwrap` is required (else `"display":"own"` is `400`,
/// [`OwnDisplayWall::refusal`]). Other grants' own displays are hidden per call
/// ([`Bwrap::grant_args`]).
pub fn for_own_display_shells(
    config: &Config,
    browser_dir: Option<PathBuf>,
) -> Result<OwnDisplayWall, Error> {
    let env_path = |name: &str| {
        std::env::var_os(name)
            .map(PathBuf::from)
            .filter(|p| p.is_absolute())
    };
    let owner_runtime = env_path("XDG_RUNTIME_DIR").filter(|p| !is_shared_dir(p));
    // X clients read `$XAUTHORITY`, else `~/.Xauthority`: both are the owner's cookies.
    let cookies = env_path("XAUTHORITY")
        .into_iter()
        .chain(env_path("HOME").map(|h| h.join(".Xauthority")))
        .collect();
    let x_tmp = &config.own_display.x_tmp;
    let sockets = [
        x_tmp.join(".X11-unix"),
        x_tmp.join(".ICE-unix"),
        PathBuf::from("/run/user"),
        PathBuf::from("/run/dbus"),
    ];
    let wall = for_mode(
        config.own_display_wall_mode(),
        Kind::OwnDisplay,
        config,
        owner_runtime
            .into_iter()
            .chain(browser_dir)
            .chain(sockets)
            .collect(),
        cookies,
        "the shells of grants with their own display are not walled from each other, \
         from the owner's session or from handnode's files",
    )?;
    let Some(mut wall) = wall else {
        return Ok(OwnDisplayWall {
            wall: None,
            network: crate::config::own_display::Network::Shared,
            refusal: None,
        });
    };
    let network = config.own_display.network;
    if network == crate::config::own_display::Network::Shared {
        return Ok(OwnDisplayWall {
            wall: Some(wall),
            network,
            refusal: None,
        });
    }
    let timeout = config.own_display.start_timeout;
    match probe_pasta(std::env::var_os("PATH").as_deref(), &wall.program, timeout) {
        Ok(pasta) => {
            wall.pasta = Some(pasta);
            Ok(OwnDisplayWall {
                wall: Some(wall),
                network,
                refusal: None,
            })
        }
        Err(why) => {
            log::warn!(
                "\"display\":\"own\" is refused: {why}; pass --own-display-network shared to \
                 lend own displays whose shells share the box's abstract sockets"
            );
            Ok(OwnDisplayWall {
                wall: Some(wall),
                network,
                refusal: Some(format!(
                    "\"display\":\"own\" needs pasta on this box for the grant's own network: \
                     {why}; or the operator starts handnode with --own-display-network shared"
                )),
            })
        }
    }
}

/// The wall of own-display grants, as probed at start.
#[derive(Clone, Debug)]
pub struct OwnDisplayWall {
    /// `None`: no wall (`none`, or `auto` without a working `bwrap`).
    pub wall: Option<Bwrap>,
    /// The grant JSON's `own_display.network`.
    pub network: crate::config::own_display::Network,
    /// Why `"display":"own"` is refused here (`400`): `pasta` is asked for and missing.
    pub refusal: Option<String>,
}

impl Default for OwnDisplayWall {
    fn default() -> Self {
        OwnDisplayWall {
            wall: None,
            network: crate::config::own_display::Network::Shared,
            refusal: None,
        }
    }
}

/// A directory everybody uses, never emptied whole (a runtime dir pointed at `/tmp`).
fn is_shared_dir(p: &Path) -> bool {
    ["/", "/tmp", "/var/tmp", "/run", "/dev/shm"]
        .iter()
        .any(|s| p == Path::new(s))
}

/// The directories a walled process must find empty: the state dir (grants.json, the
/// audit, jobs), the config dir (the default token file), `$CREDENTIALS_DIRECTORY`.
fn handnode_dirs(config: &Config) -> Vec<PathBuf> {
    let mut dirs = vec![config.state_dir.clone(), config.config_dir.clone()];
    if let Some(creds) = std::env::var_os("CREDENTIALS_DIRECTORY").filter(|c| !c.is_empty()) {
        dirs.push(PathBuf::from(creds));
    }
    dirs
}

/// The token file, wherever `--token-file` put it, and the local admin socket (issue 30),
/// which answers any process of the daemon's uid without a credential: a walled process
/// runs as that uid, so inside the wall the socket's path is `/dev/null` and connecting
/// fails.
fn handnode_files(config: &Config) -> Vec<PathBuf> {
    config
        .token_source
        .as_deref()
        .map(PathBuf::from)
        .into_iter()
        .chain(config.local_socket.clone())
        .filter(|p| p.is_absolute())
        .collect()
}

/// What the file tools of a grant with its own display may not reach (§19): what the wall
/// around its shell hides, the other grants' own displays among it, and the box's `/proc`
/// (whose `<pid>/root` shows any process's files; the wall has a `/proc` of its own). The
/// file tools run in the daemon, outside any wall, so they check each descriptor they open
/// against it (`tools::paths`).
#[derive(Clone, Debug, Default)]
pub struct Fence {
    /// Directories and files refused, with all beneath them.
    pub hidden: Vec<PathBuf>,
    /// Beneath a hidden directory, still reachable: the grant's own runtime directory.
    pub except: Option<PathBuf>,
}

impl Fence {
    /// Whether the file at `real` (a path the kernel gave for an open descriptor) is
    /// kept out.
    pub fn refuses(&self, real: &Path) -> bool {
        if self.except.as_deref().is_some_and(|e| real.starts_with(e)) {
            return false;
        }
        real.starts_with("/proc") || self.hidden.iter().any(|h| real.starts_with(h))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_fence_refuses_what_is_hidden_and_proc_but_not_the_grants_own_directory() {
        let fence = Fence {
            hidden: vec![
                PathBuf::from("/s/state"),
                PathBuf::from("/s/state/displays"),
            ],
            except: Some(PathBuf::from("/s/state/displays/mine")),
        };
        assert!(fence.refuses(Path::new("/s/state/grants.json")));
        assert!(fence.refuses(Path::new("/s/state/displays/theirs/xauth")));
        assert!(fence.refuses(Path::new("/proc/1/root/etc/passwd")));
        assert!(!fence.refuses(Path::new("/s/state/displays/mine/xauth")));
        // Components, not prefixes of a name.
        assert!(!fence.refuses(Path::new("/s/stateful/x")));
        assert!(!fence.refuses(Path::new("/procfs-notes")));
        assert!(!fence.refuses(Path::new("/home/me/notes")));
    }

    fn strings(args: &[OsString]) -> Vec<String> {
        args.iter()
            .map(|a| a.to_string_lossy().into_owned())
            .collect()
    }

    fn wall(hide_dirs: Vec<PathBuf>, hide_files: Vec<PathBuf>, lock: bool) -> Bwrap {
        Bwrap {
            program: PathBuf::from("/usr/bin/bwrap"),
            hide_dirs,
            hide_files,
            lock,
            pasta: None,
        }
    }

    #[test]
    fn a_grant_wall_hides_parents_first_then_binds_only_its_own_display_back() {
        let root = std::env::temp_dir().join(format!("hn-walls-{}", std::process::id()));
        let parent = root.join("displays");
        let own = parent.join("g1");
        let other = parent.join("g2");
        std::fs::create_dir_all(&own).unwrap();
        std::fs::create_dir_all(&other).unwrap();
        let state = root.join("state");
        std::fs::create_dir_all(&state).unwrap();
        let socket = root.join("X77");
        std::fs::write(&socket, "").unwrap();
        let w = wall(
            vec![state.clone(), root.clone(), root.join("missing")],
            vec![root.join("no-such-token")],
            false,
        );
        let seen_at = root.join("x11-unix/X77");
        let walled = w.grant_args(Some((&parent, Some(&own), Some((&socket, &seen_at)))), None);
        assert_eq!(walled.program, PathBuf::from("/usr/bin/bwrap"));
        let args = strings(&walled.args);
        let at = |s: &str| args.iter().position(|a| a == s).unwrap();
        assert_eq!(&args[..5], ["--dev-bind", "/", "/", "--dev", "/dev"]);
        // The shallower directory first; a missing one and a missing file are skipped.
        assert!(at(&root.display().to_string()) < at(&state.display().to_string()));
        assert!(!args
            .iter()
            .any(|a| a.contains("missing") || a.contains("token")));
        // Cgroups read-only in a namespace of their own, a fresh /proc in its own PID
        // namespace, then the parent emptied, then only this grant's directory and X
        // socket back; nothing names the other grant's.
        assert!(args.windows(3).any(|w| w == ["--ro-bind", SYS, SYS]));
        assert!(args.windows(2).any(|w| w == ["--dev", "/dev"]));
        assert!(args.iter().any(|a| a == "--unshare-cgroup"));
        assert!(args
            .windows(3)
            .any(|w| w == ["--unshare-pid", "--proc", "/proc"]));
        let p = parent.display().to_string();
        let o = own.display().to_string();
        let x = socket.display().to_string();
        let seen = seen_at.display().to_string();
        let tail = &args[args.len() - 9..];
        assert_eq!(
            tail,
            ["--tmpfs", &p, "--bind", &o, &o, "--bind", &x, &seen, "--"]
        );
        assert!(!args.iter().any(|a| a.contains("g2")));
        // Not root: no user namespace asked for (bwrap makes one anyway, without caps).
        assert!(!args.iter().any(|a| a == "--unshare-user"));
        // A display not started yet: the parent is emptied and nothing is bound back.
        let idle = strings(
            &w.grant_args(Some((&parent, Some(&parent.join("g3")), None)), None)
                .args,
        );
        assert_eq!(&idle[idle.len() - 3..], ["--tmpfs", &p, "--"]);
        let _ = std::fs::remove_dir_all(&root);
    }

    #[test]
    fn a_displays_own_wall_has_no_network_its_own_tmp_and_its_sockets_where_clients_look() {
        let w = wall(Vec::new(), Vec::new(), false);
        let root = std::env::temp_dir().join(format!("hn-walls-display-{}", std::process::id()));
        let (parent, dir) = (root.join("p"), root.join("p/g1"));
        let sockets = dir.join("x11");
        std::fs::create_dir_all(&sockets).unwrap();
        let (parent, dir) = (parent.as_path(), dir.as_path());
        let (d, x) = (dir.display().to_string(), sockets.display().to_string());
        let server = strings(
            &w.display_args(
                Path::new("/usr/bin/Xvnc"),
                parent,
                dir,
                &sockets,
                Path::new("/tmp"),
                true,
            )
            .args,
        );
        let at = |args: &[String], s: &[&str]| {
            args.windows(s.len())
                .position(|w| w == s)
                .unwrap_or_else(|| panic!("{s:?} in {args:?}"))
        };
        at(&server, &["--unshare-pid", "--as-pid-1", "--proc", "/proc"]);
        assert!(server.iter().any(|a| a == "--unshare-net"), "{server:?}");
        // Its own /tmp first, then the runtime directory back, then its sockets where
        // X clients look; the program last, behind the `sh` that gives it a stdin.
        let tmp = at(&server, &["--tmpfs", "/tmp"]);
        let own = at(&server, &["--bind", &d, &d]);
        let x = at(&server, &["--bind", &x, "/tmp/.X11-unix"]);
        assert!(tmp < own && own < x, "{server:?}");
        let info = at(&server, &["--info-fd", "0", "--", "/bin/sh", "-c"]);
        assert!(x < info);
        assert_eq!(server.last().unwrap(), "/usr/bin/Xvnc");
        // The bus keeps the box's pids; a program beneath /tmp is bound into its /tmp.
        let bus = strings(
            &w.display_args(
                Path::new("/tmp/bin/dbus-daemon"),
                parent,
                dir,
                &sockets,
                Path::new("/tmp"),
                false,
            )
            .args,
        );
        assert!(!bus
            .iter()
            .any(|a| a == "--unshare-pid" || a == "--as-pid-1"));
        assert!(bus.iter().any(|a| a == "--unshare-net"), "{bus:?}");
        let bound = at(
            &bus,
            &["--ro-bind", "/tmp/bin/dbus-daemon", "/tmp/bin/dbus-daemon"],
        );
        assert!(at(&bus, &["--tmpfs", "/tmp"]) < bound);
        let _ = std::fs::remove_dir_all(&root);
    }

    #[test]
    fn as_root_every_wall_drops_every_capability_in_a_user_namespace_first() {
        let w = wall(Vec::new(), Vec::new(), true);
        for args in [
            w.grant_args(None, None).args,
            w.args(Path::new("/x/b1"), Path::new("/x")),
        ] {
            let args = strings(&args);
            let user = args.iter().position(|a| a == "--unshare-user").unwrap();
            let caps = args
                .windows(2)
                .position(|w| w == ["--cap-drop", "ALL"])
                .unwrap();
            let root = args
                .windows(3)
                .position(|w| w == ["--dev-bind", "/", "/"])
                .unwrap();
            assert!(user < root && caps < root, "{args:?}");
        }
    }

    #[test]
    fn with_pasta_a_wall_joins_the_displays_network_and_never_keeps_the_boxs() {
        let mut w = wall(Vec::new(), Vec::new(), true);
        w.pasta = Some(PathBuf::from("/usr/bin/pasta"));
        // Given the display's network: bwrap itself, no network of its own, the join carried.
        let held = std::fs::File::open("/proc/self/ns/net").unwrap();
        let join = NetJoin {
            user: None,
            net: OwnedFd::from(held),
        };
        let walled = w.grant_args(None, Some(join));
        assert_eq!(walled.program, PathBuf::from("/usr/bin/bwrap"));
        assert!(walled.net.is_some());
        let args = strings(&walled.args);
        assert!(!args.iter().any(|a| a == "--unshare-net"), "{args:?}");
        assert_eq!(args.last().unwrap(), "--");
        // Without it (the display's network is not up): a network with nothing in it.
        let args = strings(&w.grant_args(None, None).args);
        assert!(args.iter().any(|a| a == "--unshare-net"), "{args:?}");
        // Without pasta (`--own-display-network shared`, other grants): the box's.
        w.pasta = None;
        let args = strings(&w.grant_args(None, None).args);
        assert!(!args.iter().any(|a| a == "--unshare-net"), "{args:?}");
    }

    #[test]
    fn a_locked_wall_leaves_out_what_root_without_capabilities_cannot_reach() {
        use std::os::unix::fs::PermissionsExt as _;
        if !rustix::process::geteuid().is_root() {
            return; // chown to another user needs root
        }
        let base = std::env::temp_dir().join(format!("hn-walls-reach-{}", std::process::id()));
        let foreign = base.join("foreign");
        std::fs::create_dir_all(foreign.join("dir")).unwrap();
        std::fs::write(foreign.join("sock"), b"").unwrap();
        std::fs::create_dir_all(base.join("open/dir")).unwrap();
        std::os::unix::fs::chown(&foreign, Some(65534), Some(65534)).unwrap();
        std::fs::set_permissions(&foreign, std::fs::Permissions::from_mode(0o700)).unwrap();
        let dirs = vec![foreign.join("dir"), base.join("open/dir")];
        let files = vec![foreign.join("sock")];
        let locked = strings(
            &wall(dirs.clone(), files.clone(), true)
                .grant_args(None, None)
                .args,
        );
        let has = |args: &[String], p: &Path| args.iter().any(|a| a == &p.display().to_string());
        assert!(!has(&locked, &foreign.join("dir")), "{locked:?}");
        assert!(!has(&locked, &foreign.join("sock")), "{locked:?}");
        assert!(has(&locked, &base.join("open/dir")), "{locked:?}");
        // Unlocked, the wall is the daemon's own user, who made these: all of it is hidden.
        let open = strings(&wall(dirs, files, false).grant_args(None, None).args);
        assert!(has(&open, &foreign.join("dir")) && has(&open, &foreign.join("sock")));
        let _ = std::fs::remove_dir_all(&base);
    }

    #[test]
    fn every_grant_wall_has_a_dev_of_its_own_with_or_without_pasta() {
        for (lock, pasta) in [(false, false), (false, true), (true, false), (true, true)] {
            let mut w = wall(Vec::new(), Vec::new(), lock);
            w.pasta = pasta.then(|| PathBuf::from("/usr/bin/pasta"));
            let args = strings(&w.grant_args(None, None).args);
            assert!(args.windows(2).any(|a| a == ["--dev", "/dev"]), "{args:?}");
        }
    }

    #[test]
    fn bwraps_info_gives_the_childs_pid_once_it_is_whole() {
        let info = b"{\n    \"child-pid\": 3067,\n    \"net-namespace\": 4026532176\n}\n";
        let pid = |text: &'static [u8]| child_pid(text, Duration::from_secs(10)).map(|(p, _)| p);
        assert_eq!(pid(&info[..]), Some(3067));
        // Cut before the object ends, no pid in it, or nothing: no pid (EOF ends the wait).
        assert_eq!(pid(b"{\"child-pid\": 3067,"), None);
        assert_eq!(pid(b"{\"mnt-namespace\": 1}"), None);
        assert_eq!(pid(b""), None);
    }

    #[test]
    fn a_browser_wall_keeps_the_box_pid_namespace_and_starts_in_its_own_directory() {
        let w = wall(Vec::new(), Vec::new(), false);
        let base = std::env::temp_dir();
        let args = strings(&w.args(&base.join("b1"), &base));
        assert_eq!(args[0], "--die-with-parent");
        assert!(!args.iter().any(|a| a == "--unshare-pid"));
        assert!(args.iter().any(|a| a == "--unshare-cgroup"));
        assert!(args.windows(2).any(|w| w[0] == "--chdir"));
        assert_eq!(args.last().unwrap(), "--");
    }

    #[test]
    fn shared_runtime_dirs_are_never_emptied_whole() {
        assert!(is_shared_dir(Path::new("/tmp")));
        assert!(!is_shared_dir(Path::new("/run/user/1000")));
    }
}
