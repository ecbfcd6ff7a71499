//! The process watcher: one thread that waits on every child process a tool starts (its
//! pipes, its exit, its timeout), so no pool worker ever blocks on a child. It is the one
//! way handnode runs a tool's child: `bash` hands a child over and returns
//! ([`ProcessWatcher::spawn`]); the display thread and `doctor`, which may wait, use
//! [`ProcessWatcher::run`].
//!
//! A child is spawned by [`ProcessWatcher::spawn`] on the caller's thread (a pool worker),
//! in a process group of its own, with stdin `/dev/null` (or a file the caller gives) and
//! stdout/stderr piped. The worker registers the group with the call's [`JobCtl`] (so
//! cancelling the call kills it), hands the child to the watcher thread and returns at
//! once. The watcher sleeps in one epoll set on every child's pipes and on a pidfd per
//! child (readable = exited), woken by its [`Waker`] when a child is handed over and
//! otherwise only by readiness or the nearest child deadline. No interval polling.
//!
//! **When a run ends.** A run ends when the group *leader* (the process we spawned)
//! exits. Whatever the leader wrote is already in the pipes and is drained; then the rest
//! of the group is SIGKILLed. So `sleep 100 &` left behind by a shell does not keep the
//! call open (it would otherwise hold the pipes until it ends) and does not outlive the
//! call. A process that must outlive the call has to leave the group on purpose
//! (`setsid -f cmd >log 2>&1`); we then stop reading its pipes, and it gets `EPIPE` if it
//! still writes to them.
//!
//! **Timeout and cancel.** At the deadline the watcher SIGKILLs the whole group; a cancel
//! ([`JobCtl::cancel`]) does the same from the cancelling thread. Either way the leader's
//! exit is then observed like any other, and the run reports exit code 137.
//!
//! **Reaping.** The leader is reaped by the watcher after the group is killed and the
//! group is unregistered from its `JobCtl`. Unregistering happens while the leader is
//! still a zombie, so its pid (= the pgid) cannot have been recycled: a late cancel can
//! never signal somebody else's group.

use std::collections::HashMap;
use std::fs::File;
use std::io::{self, Read};
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::process::{Child, ChildStderr, ChildStdout, Command, ExitStatus, Stdio};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, Sender, TryRecvError};
use rustix::process::{Pid, PidfdFlags, Signal};

use crate::jobs::JobCtl;
use crate::wake::{Poller, Waker, WAKE_KEY};

/// Exit code reported for a group we killed: 128 + SIGKILL, as a shell reports it.
pub const KILLED_EXIT_CODE: i32 = 137;

/// Bytes asked for per `read` of a child's pipe.
const READ_CHUNK_BYTES: usize = 64 * 1024;

/// Reads of one pipe per readiness report, so one chatty child cannot starve the others
/// (epoll is level-triggered: the rest is reported again on the next wait).
const READS_PER_WAKE: usize = 16;

/// Most bytes read from one pipe after its leader exited. The group is killed first, so
/// this only bounds a writer that escaped the group and keeps writing.
const FINAL_DRAIN_BYTES: usize = 4 << 20;

/// Added to every deadline sleep so a sub-millisecond remainder, rounded down by epoll,
/// does not spin the loop.
const DEADLINE_SLACK: Duration = Duration::from_millis(1);

/// How one run is bounded.
#[derive(Debug)]
pub struct RunSpec {
    /// The group is killed this long after the spawn.
    pub timeout: Duration,
    /// Bytes kept per stream; the rest is read and discarded.
    pub max_output_bytes: usize,
    /// The call this run belongs to: cancelling it kills the group.
    pub ctl: Arc<JobCtl>,
    /// Read as the child's stdin; `None` is `/dev/null`.
    pub stdin: Option<File>,
}

/// Why a run ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum End {
    /// The leader exited on its own (any status, any signal not sent by us).
    Exited,
    /// The deadline passed; we killed the group.
    TimedOut,
    /// The call was cancelled; the group was killed.
    Cancelled,
    /// The watcher stopped (daemon shutdown) or could not watch the child; the group was
    /// killed.
    Aborted,
}

/// What a finished run produced.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RunResult {
    pub stdout: Vec<u8>,
    pub stderr: Vec<u8>,
    pub stdout_truncated: bool,
    pub stderr_truncated: bool,
    /// The leader's exit code; 128 + n when killed by signal n; 137 whenever we killed it.
    pub exit_code: i32,
    /// The leader's wait status as reaped, when it was.
    pub status: Option<ExitStatus>,
    pub end: End,
    /// From spawn to the moment the end was observed.
    pub duration: Duration,
}

type OnExit = Box<dyn FnOnce(RunResult) + Send>;

/// Waits on child processes for every tool call. Dropping it stops its thread after
/// killing and reaping every child still running (each reports [`End::Aborted`]).
pub struct ProcessWatcher {
    tx: Option<Sender<Entry>>,
    waker: Arc<Waker>,
    thread: Option<JoinHandle<()>>,
}

impl std::fmt::Debug for ProcessWatcher {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ProcessWatcher")
            .field("running", &self.thread.is_some())
            .finish()
    }
}

impl ProcessWatcher {
    pub fn start() -> io::Result<Self> {
        let poller = Poller::new()?;
        let waker = poller.waker();
        let (tx, rx) = crossbeam_channel::unbounded();
        let thread = std::thread::Builder::new()
            .name("process-watcher".into())
            .spawn(move || {
                Watcher {
                    poller,
                    rx,
                    entries: HashMap::new(),
                    next_id: 0,
                    scratch: vec![0; READ_CHUNK_BYTES],
                }
                .run()
            })?;
        Ok(ProcessWatcher {
            tx: Some(tx),
            waker,
            thread: Some(thread),
        })
    }

    /// Spawn `cmd` in a new process group (stdin `spec.stdin` or `/dev/null`, stdout and
    /// stderr piped; any stdio set on `cmd` is replaced), tie the group to `spec.ctl`, and
    /// watch it.
    /// Returns as soon as the child runs. `on_exit` is called exactly once: with `Err`
    /// right here if the child could not be started or watched (nothing is left
    /// running), else with the result on the watcher thread after the leader was reaped.
    /// Keep `on_exit` short: it delays every other child.
    pub fn spawn(
        &self,
        cmd: Command,
        spec: RunSpec,
        on_exit: impl FnOnce(io::Result<RunResult>) + Send + 'static,
    ) {
        match self.try_spawn(cmd, spec) {
            Ok(mut entry) => {
                entry.on_exit = Some(Box::new(move |r| on_exit(Ok(r))));
                let tx = self.tx.as_ref().expect("the watcher runs until dropped");
                match tx.send(entry) {
                    Ok(()) => self.waker.wake(),
                    Err(crossbeam_channel::SendError(mut entry)) => {
                        abandon(&mut entry.child, entry.pgid, &entry.ctl);
                        let on_exit = entry.on_exit.take().expect("set above");
                        drop(entry);
                        // Unreachable while `self` lives; kept total rather than panicking.
                        report_aborted(on_exit);
                    }
                }
            }
            Err(e) => on_exit(Err(e)),
        }
    }

    /// [`spawn`](Self::spawn) for a thread that may wait (the display thread, `doctor`):
    /// the result once the run ended, `Err` if the child could not be started or watched.
    /// Never call it on a pool worker, a grant thread or inside an `on_exit`.
    pub fn run(&self, cmd: Command, spec: RunSpec) -> io::Result<RunResult> {
        let (tx, rx) = crossbeam_channel::bounded(1);
        self.spawn(cmd, spec, move |r| {
            let _ = tx.send(r);
        });
        // `on_exit` runs exactly once; a dropped sender means the watcher thread died.
        rx.recv()
            .unwrap_or_else(|_| Err(io::Error::other("the process watcher stopped")))
    }

    fn try_spawn(&self, mut cmd: Command, spec: RunSpec) -> io::Result<Entry> {
        let stdin = spec.stdin.map_or_else(Stdio::null, Stdio::from);
        cmd.process_group(0)
            .stdin(stdin)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let started = Instant::now();
        let mut child = cmd.spawn()?;
        let pgid = Pid::from_raw(child.id() as i32).expect("a spawned child has a positive pid");
        // False means the call was cancelled first: the group is already killed, and the
        // watcher reaps it and reports the cancel like any other.
        let _ = spec.ctl.register_group(pgid);

        let prepared = (|| -> io::Result<(OwnedFd, ChildStdout, ChildStderr)> {
            let pidfd = rustix::process::pidfd_open(pgid, PidfdFlags::empty()).map_err(|e| {
                io::Error::other(format!(
                    "cannot watch the child process: pidfd_open failed ({e}); \
                     handnode needs Linux 5.3 or newer"
                ))
            })?;
            let stdout = child.stdout.take().expect("stdout was piped");
            let stderr = child.stderr.take().expect("stderr was piped");
            rustix::io::ioctl_fionbio(&stdout, true)?;
            rustix::io::ioctl_fionbio(&stderr, true)?;
            Ok((pidfd, stdout, stderr))
        })();
        match prepared {
            Ok((pidfd, stdout, stderr)) => Ok(Entry {
                child,
                pgid,
                pidfd,
                out: Stream::new(Some(stdout), spec.max_output_bytes),
                err: Stream::new(Some(stderr), spec.max_output_bytes),
                started,
                deadline: started + spec.timeout,
                forced: None,
                ctl: spec.ctl,
                on_exit: None,
            }),
            Err(e) => {
                abandon(&mut child, pgid, &spec.ctl);
                Err(e)
            }
        }
    }
}

fn report_aborted(on_exit: OnExit) {
    // The boxed callback only takes results; report the stop as an aborted run with no
    // output, which callers already render as "handnode stopped watching".
    on_exit(RunResult {
        stdout: Vec::new(),
        stderr: Vec::new(),
        stdout_truncated: false,
        stderr_truncated: false,
        exit_code: KILLED_EXIT_CODE,
        status: None,
        end: End::Aborted,
        duration: Duration::ZERO,
    });
}

impl Drop for ProcessWatcher {
    fn drop(&mut self) {
        // A disconnected channel is the stop signal; the wake makes the thread see it.
        self.tx.take();
        self.waker.wake();
        if let Some(thread) = self.thread.take() {
            // The last handle can be dropped on the watcher thread itself, from inside an
            // `on_exit`; it must not join itself. It stops once that callback returns.
            if thread.thread().id() != std::thread::current().id() {
                let _ = thread.join();
            }
        }
    }
}

/// Kill a group we will not watch, and reap its leader (it dies at once: SIGKILL).
fn abandon(child: &mut Child, pgid: Pid, ctl: &JobCtl) {
    let _ = rustix::process::kill_process_group(pgid, Signal::KILL);
    ctl.unregister_group(pgid);
    let _ = child.wait();
}

/// One piped output stream of a child, capped.
struct Stream<R> {
    /// `None` once it reached end of file.
    pipe: Option<R>,
    kept: Vec<u8>,
    cap: usize,
    truncated: bool,
}

impl<R: Read + AsFd> Stream<R> {
    fn new(pipe: Option<R>, cap: usize) -> Self {
        Stream {
            pipe,
            kept: Vec::new(),
            cap,
            truncated: false,
        }
    }

    /// Read until the pipe would block, reaches EOF, or `budget` bytes were read.
    /// Bytes past the cap are read and dropped so the writer never blocks on us.
    fn pump(&mut self, poller: &Poller, scratch: &mut [u8], mut budget: usize) {
        while budget > 0 {
            let Some(pipe) = self.pipe.as_mut() else {
                return;
            };
            match pipe.read(scratch) {
                Ok(0) => {
                    self.close(poller);
                    return;
                }
                Ok(n) => {
                    budget = budget.saturating_sub(n);
                    let room = self.cap.saturating_sub(self.kept.len());
                    if n > room {
                        self.truncated = true;
                    }
                    self.kept.extend_from_slice(&scratch[..n.min(room)]);
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return,
                Err(e) => {
                    log::debug!("reading a child's pipe failed: {e}");
                    self.close(poller);
                    return;
                }
            }
        }
    }

    fn close(&mut self, poller: &Poller) {
        if let Some(pipe) = self.pipe.take() {
            let _ = poller.delete(&pipe);
        }
    }
}

/// One running child as the watcher tracks it.
struct Entry {
    child: Child,
    pgid: Pid,
    pidfd: OwnedFd,
    out: Stream<ChildStdout>,
    err: Stream<ChildStderr>,
    started: Instant,
    deadline: Instant,
    /// Set once we killed the group ourselves.
    forced: Option<End>,
    ctl: Arc<JobCtl>,
    /// Always `Some` once handed to the watcher.
    on_exit: Option<OnExit>,
}

/// Which descriptor of an entry an epoll key names (the low two bits of the key).
const KEY_STDOUT: u64 = 0;
const KEY_STDERR: u64 = 1;
const KEY_EXIT: u64 = 2;

fn key(id: u64, kind: u64) -> u64 {
    (id << 2) | kind
}

/// The watcher thread's state.
struct Watcher {
    poller: Poller,
    rx: Receiver<Entry>,
    entries: HashMap<u64, Entry>,
    next_id: u64,
    scratch: Vec<u8>,
}

impl Watcher {
    fn run(mut self) {
        loop {
            let now = Instant::now();
            let timeout = self
                .entries
                .values()
                .filter(|e| e.forced.is_none())
                .map(|e| e.deadline.saturating_duration_since(now) + DEADLINE_SLACK)
                .min();
            let ready = match self.poller.wait(timeout) {
                Ok(ready) => ready,
                Err(e) => {
                    log::error!("process watcher: waiting failed ({e}); killing every child");
                    break;
                }
            };
            let mut stop = false;
            let mut exited = Vec::new();
            for r in ready {
                if r.key == WAKE_KEY {
                    stop |= !self.accept();
                    continue;
                }
                let id = r.key >> 2;
                let Some(entry) = self.entries.get_mut(&id) else {
                    continue;
                };
                match r.key & 3 {
                    KEY_STDOUT => entry.out.pump(
                        &self.poller,
                        &mut self.scratch,
                        READS_PER_WAKE * READ_CHUNK_BYTES,
                    ),
                    KEY_STDERR => entry.err.pump(
                        &self.poller,
                        &mut self.scratch,
                        READS_PER_WAKE * READ_CHUNK_BYTES,
                    ),
                    _ => exited.push(id),
                }
            }
            self.enforce_deadlines();
            for id in exited {
                self.finish(id, None);
            }
            if stop {
                break;
            }
        }
        self.abort_all();
    }

    /// Take every handed-over child. False once the owning handle is gone.
    fn accept(&mut self) -> bool {
        loop {
            match self.rx.try_recv() {
                Ok(entry) => self.add(entry),
                Err(TryRecvError::Empty) => return true,
                Err(TryRecvError::Disconnected) => return false,
            }
        }
    }

    fn add(&mut self, entry: Entry) {
        let id = self.next_id;
        self.next_id += 1;
        let registered = (|| -> io::Result<()> {
            if let Some(pipe) = &entry.out.pipe {
                self.poller.add(pipe, key(id, KEY_STDOUT), true, false)?;
            }
            if let Some(pipe) = &entry.err.pipe {
                self.poller.add(pipe, key(id, KEY_STDERR), true, false)?;
            }
            self.poller
                .add(&entry.pidfd, key(id, KEY_EXIT), true, false)
        })();
        self.entries.insert(id, entry);
        if let Err(e) = registered {
            log::error!("process watcher: cannot watch a child ({e}); killing it");
            self.finish(id, Some(End::Aborted));
        }
    }

    fn enforce_deadlines(&mut self) {
        let now = Instant::now();
        for entry in self.entries.values_mut() {
            if entry.forced.is_none() && entry.deadline <= now {
                let _ = rustix::process::kill_process_group(entry.pgid, Signal::KILL);
                entry.forced = Some(End::TimedOut);
            }
        }
    }

    /// The leader has exited (or `abort` says to stop watching): kill what is left of the
    /// group, drain the pipes, reap, report.
    fn finish(&mut self, id: u64, abort: Option<End>) {
        let Some(mut entry) = self.entries.remove(&id) else {
            return;
        };
        // The leader is at worst a zombie until reaped below, so the pgid is still ours.
        let _ = rustix::process::kill_process_group(entry.pgid, Signal::KILL);
        entry
            .out
            .pump(&self.poller, &mut self.scratch, FINAL_DRAIN_BYTES);
        entry
            .err
            .pump(&self.poller, &mut self.scratch, FINAL_DRAIN_BYTES);
        entry.out.close(&self.poller);
        entry.err.close(&self.poller);
        let _ = self.poller.delete(&entry.pidfd);
        entry.ctl.unregister_group(entry.pgid);
        let status = match entry.child.try_wait() {
            Ok(Some(status)) => Some(status),
            // Only reached on abort, right after the SIGKILL above: a short wait.
            Ok(None) => entry.child.wait().ok(),
            Err(e) => {
                log::warn!("process watcher: could not reap a child ({e})");
                None
            }
        };
        let end = abort
            .or(entry.forced)
            .unwrap_or(if entry.ctl.is_cancelled() {
                End::Cancelled
            } else {
                End::Exited
            });
        let exit_code = match (end, status) {
            (End::Exited, Some(status)) => status
                .code()
                .unwrap_or_else(|| 128 + status.signal().unwrap_or(0)),
            (End::Exited, None) => -1,
            _ => KILLED_EXIT_CODE,
        };
        let result = RunResult {
            stdout: std::mem::take(&mut entry.out.kept),
            stderr: std::mem::take(&mut entry.err.kept),
            stdout_truncated: entry.out.truncated,
            stderr_truncated: entry.err.truncated,
            exit_code,
            status,
            end,
            duration: entry.started.elapsed(),
        };
        if let Some(on_exit) = entry.on_exit.take() {
            on_exit(result);
        }
    }

    /// Stop: kill and reap every child, including ones handed over but not yet accepted.
    fn abort_all(&mut self) {
        while let Ok(entry) = self.rx.try_recv() {
            let id = self.next_id;
            self.next_id += 1;
            self.entries.insert(id, entry);
        }
        let ids: Vec<u64> = self.entries.keys().copied().collect();
        for id in ids {
            self.finish(id, Some(End::Aborted));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const WATCHDOG: Duration = Duration::from_secs(30);

    fn run(
        watcher: &ProcessWatcher,
        script: &str,
        timeout: Duration,
        cap: usize,
        ctl: Arc<JobCtl>,
    ) -> crossbeam_channel::Receiver<RunResult> {
        let (tx, rx) = crossbeam_channel::bounded(1);
        let mut cmd = Command::new("bash");
        cmd.arg("-c").arg(script);
        watcher.spawn(
            cmd,
            RunSpec {
                timeout,
                max_output_bytes: cap,
                ctl,
                stdin: None,
            },
            move |r| tx.send(r.unwrap()).unwrap(),
        );
        rx
    }

    #[test]
    fn exit_status_and_both_streams() {
        let w = ProcessWatcher::start().unwrap();
        let rx = run(
            &w,
            "echo out; echo err >&2; exit 3",
            WATCHDOG,
            1024,
            JobCtl::new(),
        );
        let r = rx.recv_timeout(WATCHDOG).unwrap();
        assert_eq!(r.stdout, b"out\n");
        assert_eq!(r.stderr, b"err\n");
        assert_eq!((r.exit_code, r.end), (3, End::Exited));
    }

    #[test]
    fn killed_by_own_signal_reports_128_plus_signal() {
        let w = ProcessWatcher::start().unwrap();
        let rx = run(&w, "kill -TERM $$", WATCHDOG, 1024, JobCtl::new());
        let r = rx.recv_timeout(WATCHDOG).unwrap();
        assert_eq!((r.exit_code, r.end), (128 + 15, End::Exited));
    }

    #[test]
    fn a_writer_that_left_the_group_does_not_hold_the_run_open() {
        let w = ProcessWatcher::start().unwrap();
        // setsid moves the sleeper out of our group: the kill cannot reach it, and it
        // holds both pipes open. The run must still end when the shell exits.
        let rx = run(
            &w,
            "setsid sleep 300 & echo $!",
            WATCHDOG,
            1024,
            JobCtl::new(),
        );
        let r = rx.recv_timeout(WATCHDOG).unwrap();
        assert_eq!(r.end, End::Exited);
        let pid: i32 = String::from_utf8_lossy(&r.stdout).trim().parse().unwrap();
        let _ = rustix::process::kill_process(Pid::from_raw(pid).unwrap(), Signal::KILL);
    }

    #[test]
    fn dropping_the_watcher_kills_and_reports_every_child() {
        let w = ProcessWatcher::start().unwrap();
        let rxs: Vec<_> = (0..3)
            .map(|_| run(&w, "sleep 300", WATCHDOG, 1024, JobCtl::new()))
            .collect();
        drop(w);
        for rx in rxs {
            let r = rx.recv_timeout(WATCHDOG).unwrap();
            assert_eq!((r.end, r.exit_code), (End::Aborted, KILLED_EXIT_CODE));
        }
    }

    #[test]
    fn a_cancel_before_registration_is_still_reaped_and_reported() {
        let w = ProcessWatcher::start().unwrap();
        let ctl = JobCtl::new();
        ctl.cancel();
        let rx = run(&w, "sleep 300", WATCHDOG, 1024, ctl);
        let r = rx.recv_timeout(WATCHDOG).unwrap();
        assert_eq!((r.end, r.exit_code), (End::Cancelled, KILLED_EXIT_CODE));
    }

    #[test]
    fn a_missing_program_reports_the_error_once() {
        let w = ProcessWatcher::start().unwrap();
        let (tx, rx) = crossbeam_channel::unbounded();
        w.spawn(
            Command::new("/nonexistent/handnode-test-program"),
            RunSpec {
                timeout: WATCHDOG,
                max_output_bytes: 1,
                ctl: JobCtl::new(),
                stdin: None,
            },
            move |r| tx.send(r.map(|_| ())).unwrap(),
        );
        let err = rx.recv_timeout(WATCHDOG).unwrap().unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::NotFound);
        drop(w);
        // Exactly once: the callback (the only sender) is gone and sent nothing more.
        assert_eq!(rx.try_recv().unwrap_err(), TryRecvError::Disconnected);
    }

    #[test]
    fn the_last_handle_may_be_dropped_from_on_exit() {
        let w = Arc::new(ProcessWatcher::start().unwrap());
        let (tx, rx) = crossbeam_channel::bounded(1);
        let (gate_tx, gate_rx) = crossbeam_channel::bounded::<()>(1);
        let held = Arc::clone(&w);
        w.spawn(
            Command::new("true"),
            RunSpec {
                timeout: WATCHDOG,
                max_output_bytes: 1,
                ctl: JobCtl::new(),
                stdin: None,
            },
            move |r| {
                // Wait until the test dropped its handle, so this one is the last.
                gate_rx.recv_timeout(WATCHDOG).unwrap();
                drop(held);
                tx.send(r.unwrap().end).unwrap();
            },
        );
        drop(w);
        gate_tx.send(()).unwrap();
        assert_eq!(rx.recv_timeout(WATCHDOG).unwrap(), End::Exited);
    }
}
