//! A child enters its cgroups between fork and exec (contract §16, §24): the crate's one
//! `unsafe` module (main.rs's `mallopt` is the binary's).
//!
//! **Why.** A run's processes must be in the run's groups before the program runs, or a
//! program that forks at once could leave a child outside (writing the pid from the parent
//! after spawn races with that). The child must therefore move itself, after `fork` and
//! before `exec`. `CommandExt::pre_exec` is std's hook for exactly that, and it is
//! `unsafe` because the closure runs in the forked child of a multi-threaded process. The
//! alternatives are slower or larger: a `/bin/sh` trampoline (`echo $$ >…/cgroup.procs &&
//! exec "$@"`, what this replaced) costs a shell's start on every call, ~2.5 ms;
//! `clone3(CLONE_INTO_CGROUP)` places a child in one cgroup2 group only (a hybrid host's
//! v1 groups would still need writes) and std's `Command` has no way to use it, so it
//! would mean a hand-written fork/exec (stdio, process group, environment, signal mask),
//! far more unsafe code than one hook. The price of the hook is that std forks instead of
//! using `posix_spawn` (vfork-like): docs/performance.md has the measured figure.
//!
//! **What the hook does, and may do.** The parent opens every `cgroup.procs` file before
//! the spawn (`O_WRONLY | O_CLOEXEC`, so exec closes them and the program never sees
//! them), and the hook writes `0` to each: "move the writing process", in cgroup v2 and v1
//! alike. It makes raw `write(2)` calls through `rustix` and nothing else: no allocation,
//! no lock, no formatting, no panic path, no `std::io` buffer.
//!
//! **Why it is sound.** After `fork` in a multi-threaded process the child has one thread,
//! and any lock another thread held (malloc's arenas, stdio, the logger) stays held
//! forever; only async-signal-safe calls may be made (`signal-safety(7)`). `write(2)` is
//! one. The closure holds its descriptors (through `Arc`s it owns: the group keeps them
//! open for later spawns, [`Slot`]) and only borrows them in the child; the child's
//! descriptor table is its own copy, so the parent closing one later changes nothing there. An error is returned as a raw OS error (no allocation: `io::Error`
//! stores an errno inline), which std sends to the parent through its own pipe and
//! `Command::spawn` returns; the child then exits without running the program. The errno
//! is offset by [`CODE_BASE`] plus the failing file's index so the parent can say which
//! file and why ([`explain`]). A file the parent could not open is reported the same way,
//! from the child, so that building a command stays infallible.
//!
//! **Joining a network namespace** ([`join_before_exec`], contract §21, §24). An own
//! display's walled calls run in the display's one network namespace, made when the
//! display starts (`crate::walls::OwnNet`). The child joins it with `setns(2)` in a second
//! hook, after the cgroup writes: one more raw syscall on descriptors the closure owns
//! (duplicated by the parent before the spawn, `O_CLOEXEC`), async-signal-safe like
//! `write(2)`, so the argument above holds unchanged. Joining costs a syscall where the
//! alternative, `nsenter`, costs a program's start per call. The namespace is named by an
//! open descriptor, never a `/proc/<pid>` path a later process could take. `setns` of a
//! network namespace needs `CAP_SYS_ADMIN` both in the user namespace that owns it and in
//! the caller's own: root has both; a daemon without root first joins the owning user
//! namespace (its own, made by its uid, so it holds every capability there), and execve
//! drops those capabilities again since its uid there is not 0. Errors are coded as the
//! files' are, from [`NS_CODE_BASE`].

use std::fs::OpenOptions;
use std::io;
use std::os::fd::{AsFd as _, OwnedFd};
use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::Command;

/// Spawn errors from the hook carry `CODE_BASE + index * CODE_STRIDE + errno`: far above
/// any errno Linux defines (< 4096), so [`explain`] never mistakes an exec's own error.
const CODE_BASE: i32 = 1 << 24;
const CODE_STRIDE: i32 = 1 << 12;

/// One `cgroup.procs` file, open in the parent or the errno of why it is not. An open one
/// may serve many spawns (the caller keeps it: opening a kernfs path per spawn cost ~0.2 ms
/// a call, docs/performance.md): each child writes through its own copy of the descriptor,
/// and the `Command` holding a clone keeps it open until the spawn returned.
#[derive(Clone, Debug)]
pub(super) enum Slot {
    Open(std::sync::Arc<OwnedFd>),
    Failed(i32),
}

impl Slot {
    /// Open `path` for writing (std opens with `O_CLOEXEC`, so the program never sees it).
    pub(super) fn open(path: &std::path::Path) -> Slot {
        match OpenOptions::new().write(true).open(path) {
            Ok(file) => Slot::Open(std::sync::Arc::new(file.into())),
            Err(e) => Slot::Failed(e.raw_os_error().unwrap_or(EIO)),
        }
    }

    pub(super) fn is_open(&self) -> bool {
        matches!(self, Slot::Open(_))
    }
}

/// Reported for an open that failed without an errno (std never does that).
const EIO: i32 = 5;

/// Errors of a namespace join carry `NS_CODE_BASE + step * CODE_STRIDE + errno`, above
/// every file code (`CODE_BASE + 4095 * CODE_STRIDE + 4095 < NS_CODE_BASE`); step 0 is
/// the user namespace, 1 the network namespace.
const NS_CODE_BASE: i32 = 1 << 25;
/// The namespaces a join names, by step.
const NS_STEPS: [&str; 2] = ["user", "network"];

fn code(index: usize, errno: i32) -> i32 {
    let index = i32::try_from(index)
        .unwrap_or(0)
        .min(CODE_BASE / CODE_STRIDE - 1);
    CODE_BASE + index * CODE_STRIDE + errno.clamp(0, CODE_STRIDE - 1)
}

/// Make `cmd`'s child write itself into every file of `procs` (each a `cgroup.procs`)
/// before it execs; a failed write fails the spawn (see [`explain`]).
#[cfg(test)]
pub(super) fn before_exec(cmd: &mut Command, procs: &[PathBuf]) {
    before_exec_slots(cmd, procs.iter().map(|p| Slot::open(p)).collect());
}

/// [`before_exec`] with the files already opened (or failed), in the order [`explain`] is
/// given their paths.
pub(super) fn before_exec_slots(cmd: &mut Command, slots: Vec<Slot>) {
    let hook = move || -> io::Result<()> {
        for (index, slot) in slots.iter().enumerate() {
            let fd: &OwnedFd = match slot {
                Slot::Open(fd) => fd,
                Slot::Failed(errno) => {
                    return Err(io::Error::from_raw_os_error(code(index, *errno)))
                }
            };
            loop {
                match rustix::io::write(fd, b"0") {
                    Ok(_) => break,
                    Err(rustix::io::Errno::INTR) => continue,
                    Err(e) => {
                        return Err(io::Error::from_raw_os_error(code(index, e.raw_os_error())))
                    }
                }
            }
        }
        Ok(())
    };
    // SAFETY: the hook runs in the forked child before exec and makes only raw write(2)
    // calls on descriptors it holds (shared with the parent's cache through an `Arc` the
    // closure owns, so they are open until the spawn returned; the child only borrows them);
    // it neither allocates nor takes a lock (module doc).
    unsafe {
        cmd.pre_exec(hook);
    }
}

/// Make `cmd`'s child join the network namespace `net` before it execs (after its cgroup
/// writes, when [`before_exec`] was called first), joining the user namespace `user` that
/// owns it first when given (a daemon without root; module doc). A failed join fails the
/// spawn (see [`explain`]): the program never runs in the box's network.
pub(super) fn join_before_exec(cmd: &mut Command, user: Option<OwnedFd>, net: OwnedFd) {
    use rustix::thread::{move_into_link_name_space as setns, LinkNameSpaceType as Ns};
    let hook = move || -> io::Result<()> {
        let steps = [(user.as_ref(), Ns::User), (Some(&net), Ns::Network)];
        for (step, (fd, kind)) in steps.into_iter().enumerate() {
            let Some(fd) = fd else { continue };
            if let Err(e) = setns(fd.as_fd(), Some(kind)) {
                let errno = e.raw_os_error().clamp(0, CODE_STRIDE - 1);
                let step = i32::try_from(step).unwrap_or(0);
                return Err(io::Error::from_raw_os_error(
                    NS_CODE_BASE + step * CODE_STRIDE + errno,
                ));
            }
        }
        Ok(())
    };
    // SAFETY: the hook runs in the forked child before exec and makes only raw setns(2)
    // calls on descriptors it owns; it neither allocates nor takes a lock (module doc).
    unsafe {
        cmd.pre_exec(hook);
    }
}

/// A spawn error as the person reading it needs it: the hook's coded errors become
/// "cannot put the process in its cgroup: writing 0 to <file> failed: <why>"; any other
/// error (the program missing, say) is returned as it is.
pub(super) fn explain(e: io::Error, procs: &[PathBuf]) -> io::Error {
    let Some(raw) = e.raw_os_error().filter(|r| *r >= CODE_BASE) else {
        return e;
    };
    if raw >= NS_CODE_BASE {
        let (step, errno) = (
            ((raw - NS_CODE_BASE) / CODE_STRIDE) as usize,
            (raw - NS_CODE_BASE) % CODE_STRIDE,
        );
        let cause = io::Error::from_raw_os_error(errno);
        let which = NS_STEPS.get(step).copied().unwrap_or("network");
        return io::Error::new(
            cause.kind(),
            format!(
                "cannot join the own display's network (setns of its {which} namespace \
                 failed: {cause}); the command did not run"
            ),
        );
    }
    let (index, errno) = (
        ((raw - CODE_BASE) / CODE_STRIDE) as usize,
        (raw - CODE_BASE) % CODE_STRIDE,
    );
    let cause = io::Error::from_raw_os_error(errno);
    let file = procs
        .get(index)
        .map_or_else(|| "cgroup.procs".to_string(), |p| p.display().to_string());
    io::Error::new(
        cause.kind(),
        format!("cannot put the process in its cgroup: writing 0 to {file} failed: {cause}"),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::base::testutil::TempDir;
    use std::fs;
    use std::path::Path;

    const WATCHDOG: std::time::Duration = std::time::Duration::from_secs(30);

    /// Run `cmd` to its end under the watchdog.
    fn output(mut cmd: Command, procs: &[PathBuf]) -> io::Result<std::process::Output> {
        let procs = procs.to_vec();
        let (tx, rx) = crossbeam_channel::bounded(1);
        std::thread::spawn(move || {
            let r = cmd.output().map_err(|e| explain(e, &procs));
            let _ = tx.send(r);
        });
        rx.recv_timeout(WATCHDOG).expect("watchdog: the child hung")
    }

    #[test]
    fn the_child_writes_0_to_every_file_and_keeps_none_open() {
        let dir = TempDir::new("enter-fds");
        let files: Vec<PathBuf> = (0..3).map(|i| dir.path(&format!("procs{i}"))).collect();
        for f in &files {
            fs::write(f, "").unwrap();
        }
        let mut cmd = Command::new("/bin/sh");
        // Every descriptor the program holds, as the paths they point at.
        cmd.args([
            "-c",
            "for f in /proc/self/fd/*; do readlink \"$f\"; done; true",
        ]);
        before_exec(&mut cmd, &files);
        let out = output(cmd, &files).unwrap();
        assert!(out.status.success(), "{out:?}");
        for f in &files {
            assert_eq!(fs::read_to_string(f).unwrap(), "0", "{}", f.display());
        }
        let open = String::from_utf8_lossy(&out.stdout);
        assert!(
            !open.contains(dir.path("").to_str().unwrap()),
            "a cgroup.procs descriptor leaked into the program: {open}"
        );
    }

    #[test]
    fn a_failed_write_or_open_fails_the_spawn_and_says_which_file() {
        // /dev/full refuses every write (ENOSPC), as a group gone or full would.
        let files = [PathBuf::from("/dev/null"), PathBuf::from("/dev/full")];
        let mut cmd = Command::new("/bin/echo");
        cmd.arg("ran");
        before_exec(&mut cmd, &files);
        let err = output(cmd, &files).unwrap_err();
        let text = err.to_string();
        assert!(
            text.contains("cannot put the process in its cgroup")
                && text.contains("/dev/full")
                && text.contains("No space left"),
            "{text}"
        );
        let dir = TempDir::new("enter-missing");
        let missing = [dir.path("gone/cgroup.procs")];
        let mut cmd = Command::new("/bin/echo");
        before_exec(&mut cmd, &missing);
        let err = output(cmd, &missing).unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::NotFound);
        assert!(err.to_string().contains("gone/cgroup.procs"), "{err}");
        // An error of the exec itself is left as it is.
        let mut cmd = Command::new("/nonexistent/handnode-enter-test");
        before_exec(&mut cmd, &[]);
        let err = output(cmd, &[]).unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::NotFound);
        assert!(!err.to_string().contains("cgroup"), "{err}");
    }

    /// A network namespace (as root) or a user namespace with one (anyone else) held by a
    /// child that is ours and not reaped, so its pid names it: `(child, user, net)`.
    fn namespace_holder() -> Option<(std::process::Child, Option<OwnedFd>, OwnedFd)> {
        let root = rustix::process::geteuid().is_root();
        let mut cmd = Command::new("unshare");
        if !root {
            cmd.arg("--user");
        }
        let mut child = cmd
            .args(["--net", "--", "sh", "-c", "echo up; exec sleep 60"])
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::null())
            .spawn()
            .ok()?;
        let mut line = String::new();
        let out = child.stdout.take()?;
        let (tx, rx) = crossbeam_channel::bounded(1);
        std::thread::spawn(move || {
            use std::io::BufRead as _;
            let mut line = String::new();
            let _ = std::io::BufReader::new(out).read_line(&mut line);
            let _ = tx.send(line);
        });
        line.push_str(&rx.recv_timeout(WATCHDOG).expect("watchdog: unshare hung"));
        if line.trim() != "up" {
            let _ = child.kill();
            let _ = child.wait();
            return None;
        }
        let open = |kind: &str| {
            fs::File::open(format!("/proc/{}/ns/{kind}", child.id()))
                .map(OwnedFd::from)
                .unwrap()
        };
        let user = (!root).then(|| open("user"));
        let net = open("net");
        Some((child, user, net))
    }

    #[test]
    fn the_child_runs_in_the_network_it_joins_and_the_parent_stays_in_its_own() {
        let Some((mut holder, user, net)) = namespace_holder() else {
            eprintln!("skip: unshare cannot make a network namespace here");
            return;
        };
        let theirs = rustix::fs::fstat(&net).unwrap().st_ino;
        let mut cmd = Command::new("readlink");
        cmd.arg("/proc/self/ns/net");
        join_before_exec(&mut cmd, user, net);
        let out = output(cmd, &[]);
        let _ = holder.kill();
        let _ = holder.wait();
        let out = out.unwrap();
        assert!(out.status.success(), "{out:?}");
        let seen = String::from_utf8_lossy(&out.stdout).trim().to_string();
        assert_eq!(seen, format!("net:[{theirs}]"));
        let own = fs::read_link("/proc/self/ns/net").unwrap();
        assert_ne!(own.to_string_lossy(), seen, "the parent moved");
    }

    #[test]
    fn a_failed_join_fails_the_spawn_and_says_so() {
        // /dev/null is no namespace: setns refuses it (EINVAL) and the program never runs.
        let null = OwnedFd::from(fs::File::open("/dev/null").unwrap());
        let mut cmd = Command::new("/bin/echo");
        join_before_exec(&mut cmd, None, null);
        let err = output(cmd, &[]).unwrap_err();
        let text = err.to_string();
        assert!(
            text.contains("cannot join the own display's network")
                && text.contains("network namespace")
                && text.contains("did not run"),
            "{text}"
        );
        // After a cgroup hook that fails first, the cgroup's error is the one told.
        let files = [PathBuf::from("/dev/full")];
        let mut cmd = Command::new("/bin/echo");
        before_exec(&mut cmd, &files);
        join_before_exec(
            &mut cmd,
            None,
            OwnedFd::from(fs::File::open("/dev/null").unwrap()),
        );
        let err = output(cmd, &files).unwrap_err();
        assert!(err.to_string().contains("/dev/full"), "{err}");
    }

    /// A real group in every hierarchy this box lets root write (cgroup2 and the v1
    /// `pids` one, as on CI's hybrid hosts).
    fn real_groups(tag: &str) -> Option<Vec<PathBuf>> {
        if !rustix::process::geteuid().is_root() {
            return None;
        }
        let mounts = fs::read_to_string("/proc/self/mounts").ok()?;
        let mut groups = Vec::new();
        for line in mounts.lines() {
            let f: Vec<&str> = line.split_whitespace().collect();
            let v1_pids = f.get(2) == Some(&"cgroup") && f[3].split(',').any(|o| o == "pids");
            if f.len() > 3 && (f[2] == "cgroup2" || v1_pids) {
                let g =
                    Path::new(f[1]).join(format!("handnode-enter-{tag}-{}", std::process::id()));
                if fs::create_dir(&g).is_ok() {
                    groups.push(g);
                }
            }
        }
        (!groups.is_empty()).then_some(groups)
    }

    #[test]
    fn the_program_runs_already_inside_every_group() {
        let Some(groups) = real_groups("in") else {
            eprintln!("skip: no cgroup hierarchy writable here (needs root and a cgroup mount)");
            return;
        };
        let procs: Vec<PathBuf> = groups.iter().map(|g| g.join("cgroup.procs")).collect();
        let mut cmd = Command::new("cat");
        cmd.arg("/proc/self/cgroup");
        before_exec(&mut cmd, &procs);
        let out = output(cmd, &procs);
        for g in &groups {
            let _ = fs::remove_dir(g);
        }
        let out = out.unwrap();
        let text = String::from_utf8_lossy(&out.stdout);
        for g in &groups {
            let name = g.file_name().unwrap().to_str().unwrap();
            assert!(
                text.lines().any(|l| l.ends_with(&format!("/{name}"))),
                "the program ran outside {}: {text}",
                g.display()
            );
        }
    }
}
