//! The process watcher: one thread that waits on every child process a tool starts (its
//! pipes, its exit, its timeout), so no pool worker ever blocks on a child. It is the one
//! way handnode runs a tool's child: `bash` hands a child over and returns
//! ([`ProcessWatcher::spawn`]); the display thread and `doctor`, which may wait, use
//! [`ProcessWatcher::run`]. It also holds the long-polls of `bash_poll` (answered the
//! moment a job's pipes bring output or its leader exits).
//!
//! A child is spawned by [`ProcessWatcher::spawn`] on the caller's thread (a pool worker),
//! in a process group of its own, with stdin `/dev/null` (or a file the caller gives) and
//! stdout/stderr piped. The worker registers the group with the call's [`CallCtl`] (so
//! cancelling the call kills it), hands the child to the watcher thread and returns at
//! once. The watcher sleeps in one epoll set on every child's pipes and on a pidfd per
//! child (readable = exited), woken by its [`Waker`] when a child is handed over and
//! otherwise only by readiness or the nearest deadline. No interval polling.
//!
//! **Where output goes.** A one-shot call keeps the first `max_output_bytes` of each
//! stream in memory. A job's streams go to its [`JobSink`] (its files on disk) chunk by
//! chunk as they are read, so a job's output never accumulates in memory. A one-shot
//! call given an inline limit ([`RunSpec::inline`]) is offered, at that limit, to become
//! a job: from then on its output goes to the job's sink and its end to the job.
//!
//! **When a run ends.** A run ends when the group *leader* (the process we spawned)
//! exits. Whatever the leader wrote is already in the pipes and is drained; then the rest
//! of the group and the run's cgroup ([`RunSpec::confine`], §16) are SIGKILLed, a process
//! that left the group (`setsid`, a double fork) included. Without a cgroup (the
//! subreaper fallback) what left the group is killed when it still carries the run's
//! marker variable.
//!
//! **A `bash` call's background** ([`RunSpec::background`], §25) is the exception: what
//! the shell left running (`cmd &`, `setsid -f cmd`, `nohup cmd &`) is not killed but kept
//! until the grant ends ([`RunGroup::keep`], which also counts it for the reply). Such a
//! process may hold the call's stdout/stderr open (`sleep 300 &` unredirected does), so
//! the call does not wait for end of file: after the leader's exit the pipes are read
//! until both close or the grace passes (`--background-grace-ms`), whichever is first,
//! and the call answers. Pipes still open then *linger*: the watcher keeps reading and
//! dropping what comes (so a later write neither blocks nor dies of `SIGPIPE`) until
//! their writers end, at most [`MAX_LINGERING`] runs' (the oldest are closed first). A
//! timeout, a cancel or an abort still kills everything the run started.
//!
//! **Timeout and cancel.** At the deadline the watcher SIGKILLs the whole group; a cancel
//! ([`CallCtl::cancel`]) does the same from the cancelling thread. Either way the leader's
//! exit is then observed like any other, and the run reports exit code 137.
//!
//! **Reaping.** The leader is reaped by the watcher after the group is killed and the
//! group is unregistered from its `CallCtl`. Unregistering happens while the leader is
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

use crate::base::wake::{Poller, Waker, WAKE_KEY};
use crate::cgroup::RunGroup;
use crate::pool::CallCtl;

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

/// Pipe buffer asked for on a job's streams (bytes): a job that writes fast then wakes
/// the watcher once per this much instead of once per 64 KiB. The kernel caps it at
/// `/proc/sys/fs/pipe-max-size` (1 MiB by default); a refusal keeps the default.
const JOB_PIPE_BYTES: usize = 1 << 20;

/// Runs whose pipes are still read (and dropped) after their call answered, because a
/// background process holds them (two descriptors each); past it the oldest are closed.
pub const MAX_LINGERING: usize = 64;

/// Added to every deadline sleep so a sub-millisecond remainder, rounded down by epoll,
/// does not spin the loop.
const DEADLINE_SLACK: Duration = Duration::from_millis(1);

/// One of a child's two output streams.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Which {
    Stdout,
    Stderr,
}

/// Where a job's output goes: the job table's files. Called on the watcher thread for
/// every chunk read from the job's pipes, so it must not block for long.
pub trait JobSink: Send + Sync {
    fn write(&self, which: Which, bytes: &[u8]);
    /// The key long-polls on this job wait on ([`ProcessWatcher::wait`]).
    fn key(&self) -> u64;
}

/// A run's output at its inline limit, offered to [`Convert`].
#[derive(Debug)]
pub struct SoFar<'a> {
    pub pid: Pid,
    pub stdout: &'a [u8],
    pub stderr: &'a [u8],
    /// Every byte read so far, kept or not.
    pub stdout_total: u64,
    pub stderr_total: u64,
    pub stdout_truncated: bool,
    pub stderr_truncated: bool,
    pub elapsed: Duration,
}

/// What a run continues as once it became a job.
pub struct Continued {
    pub sink: Arc<dyn JobSink>,
    /// The job's own control; the group moves to it from the call's.
    pub ctl: Arc<CallCtl>,
    pub on_exit: OnExit,
}

/// Offered a run at its inline limit: `Some` makes it a job; `None` leaves it a one-shot
/// run to its own timeout (§15: it is never killed because it could not become a job).
pub type Convert = Box<dyn FnOnce(SoFar<'_>) -> Option<Continued> + Send>;

/// Called on the spawning thread with the new group's pgid and the leader's start time
/// (clock ticks after boot, from `/proc/<pid>/stat`), before the child is watched.
pub type OnSpawn = Box<dyn FnOnce(Pid, Option<u64>) + Send>;

/// How one run is bounded.
pub struct RunSpec {
    /// The group is killed this long after the spawn.
    pub timeout: Duration,
    /// Bytes kept per stream; the rest is read and discarded. Unused with a `sink`.
    pub max_output_bytes: usize,
    /// The call this run belongs to: cancelling it kills the group.
    pub ctl: Arc<CallCtl>,
    /// A job: output goes here from the first byte.
    pub sink: Option<Arc<dyn JobSink>>,
    /// A one-shot call that may become a job: offered to the `Convert` this long after
    /// the spawn, if still running.
    pub inline: Option<(Duration, Convert)>,
    pub on_spawn: Option<OnSpawn>,
    /// Read as the child's stdin; `None` is `/dev/null`.
    pub stdin: Option<File>,
    /// The run's cgroup (§16), which `cmd` was built to enter ([`RunGroup::command`]):
    /// every end of the run kills it whole.
    pub confine: Option<Arc<RunGroup>>,
    /// `Some(grace)`: a `bash` call, whose background processes outlive it (see the
    /// module doc); `grace` bounds the wait for its pipes after the leader's exit. Cleared
    /// when the run becomes a job: a job's end ends everything it started (§16).
    pub background: Option<Duration>,
}

impl RunSpec {
    /// A one-shot run that keeps `max_output_bytes` of each stream in memory.
    pub fn oneshot(timeout: Duration, max_output_bytes: usize, ctl: Arc<CallCtl>) -> Self {
        RunSpec {
            timeout,
            max_output_bytes,
            ctl,
            sink: None,
            inline: None,
            on_spawn: None,
            stdin: None,
            confine: None,
            background: None,
        }
    }
}

impl std::fmt::Debug for RunSpec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RunSpec")
            .field("timeout", &self.timeout)
            .field("max_output_bytes", &self.max_output_bytes)
            .field("job", &self.sink.is_some())
            .field("inline", &self.inline.as_ref().map(|(d, _)| *d))
            .field("stdin", &self.stdin)
            .finish()
    }
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
    /// Empty for a job: its output is in its sink.
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
    /// The grant's memory limit (bytes) when the kernel's OOM killer ended the run.
    pub oom_limit: Option<u64>,
    /// Processes the run left running in the background, kept ([`RunSpec::background`]).
    pub kept: usize,
    /// The kept processes still held stdout or stderr when the call answered: what they
    /// write there from now on is dropped.
    pub kept_hold_output: bool,
}

pub type OnExit = Box<dyn FnOnce(RunResult) + Send>;

/// A long-poll parked on the watcher: answered once, when `ready` says so (checked when
/// it arrives and after every chunk or end of the job its `key` names), at its deadline,
/// or dropped unanswered when its call is cancelled.
pub struct Wait {
    pub key: u64,
    pub deadline: Instant,
    /// The waiting call; its cancel wakes the watcher ([`CallCtl::wake_on_cancel`]).
    pub ctl: Arc<CallCtl>,
    pub ready: Box<dyn Fn() -> bool + Send>,
    pub answer: Box<dyn FnOnce() + Send>,
}

enum Msg {
    Child(Box<Entry>),
    Wait(Wait),
}

/// Waits on child processes for every tool call. Dropping it stops its thread after
/// killing and reaping every child still running (each reports [`End::Aborted`]).
pub struct ProcessWatcher {
    tx: Option<Sender<Msg>>,
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

/// The start time of process `pid` in clock ticks after boot (field 22 of
/// `/proc/<pid>/stat`), which tells a process from a later one given the same pid.
pub fn start_ticks(pid: i32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    crate::base::procfs::stat_field(&stat, 22)
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
                    waits: Vec::new(),
                    lingering: Default::default(),
                }
                .run()
            })?;
        Ok(ProcessWatcher {
            tx: Some(tx),
            waker,
            thread: Some(thread),
        })
    }

    fn send(&self, msg: Msg) -> Result<(), Msg> {
        let tx = self.tx.as_ref().expect("the watcher runs until dropped");
        tx.send(msg).map_err(|e| e.0)?;
        self.waker.wake();
        Ok(())
    }

    /// Spawn `cmd` in a new process group (stdin `spec.stdin` or `/dev/null`, stdout and
    /// stderr piped; any stdio set on `cmd` is replaced), tie the group to `spec.ctl`, and
    /// watch it.
    /// Returns as soon as the child runs. `on_exit` is called exactly once: with `Err`
    /// right here if the child could not be started or watched (nothing is left
    /// running), else with the result on the watcher thread after the leader was reaped
    /// (unless the run became a job: then the job's own `on_exit` is called instead).
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
                if let Err(Msg::Child(mut entry)) = self.send(Msg::Child(entry)) {
                    abandon(
                        &mut entry.child,
                        entry.pgid,
                        &entry.ctl,
                        entry.confine.as_deref(),
                    );
                    let on_exit = entry.on_exit.take().expect("set above");
                    drop(entry);
                    // Unreachable while `self` lives; kept total rather than panicking.
                    report_aborted(on_exit);
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

    /// Park a long-poll here (see [`Wait`]). Answered at once if it is ready already.
    pub fn wait(&self, wait: Wait) {
        wait.ctl.wake_on_cancel(Arc::clone(&self.waker));
        if let Err(Msg::Wait(wait)) = self.send(Msg::Wait(wait)) {
            (wait.answer)();
        }
    }

    fn try_spawn(&self, mut cmd: Command, spec: RunSpec) -> io::Result<Box<Entry>> {
        let stdin = spec.stdin.map_or_else(Stdio::null, Stdio::from);
        cmd.process_group(0)
            .stdin(stdin)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let started = Instant::now();
        let mut child = match &spec.confine {
            Some(group) => group.spawn(&mut cmd)?,
            None => cmd.spawn()?,
        };
        let pgid = Pid::from_raw(child.id() as i32).expect("a spawned child has a positive pid");
        // False means the call was cancelled first: the group is already killed, and the
        // watcher reaps it and reports the cancel like any other.
        let _ = spec.ctl.register_group(pgid);
        if let Some(group) = &spec.confine {
            spec.ctl.register_cgroup(Arc::clone(group));
        }

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
            Ok((pidfd, stdout, stderr)) => {
                if spec.sink.is_some() {
                    widen_pipes(&stdout, &stderr);
                }
                if let Some(on_spawn) = spec.on_spawn {
                    // The leader cannot be reaped before the watcher has it, so its /proc
                    // entry is there (a zombie at worst).
                    on_spawn(pgid, start_ticks(pgid.as_raw_nonzero().get()));
                }
                let (convert_at, convert) = match spec.inline {
                    Some((after, convert)) => (Some(started + after), Some(convert)),
                    None => (None, None),
                };
                Ok(Box::new(Entry {
                    child,
                    pgid,
                    pidfd,
                    out: Stream::new(Some(stdout), spec.max_output_bytes),
                    err: Stream::new(Some(stderr), spec.max_output_bytes),
                    sink: spec.sink,
                    started,
                    deadline: started.checked_add(spec.timeout).unwrap_or(far_future()),
                    convert_at,
                    convert,
                    forced: None,
                    ctl: spec.ctl,
                    on_exit: None,
                    confine: spec.confine,
                    background: spec.background,
                    grace_until: None,
                }))
            }
            Err(e) => {
                abandon(&mut child, pgid, &spec.ctl, spec.confine.as_deref());
                Err(e)
            }
        }
    }
}

/// A deadline that never comes: a job with no timeout of its own.
fn far_future() -> Instant {
    Instant::now() + Duration::from_secs(100 * 365 * 86_400)
}

/// Ask for larger pipe buffers on a job's streams (see [`JOB_PIPE_BYTES`]).
fn widen_pipes(stdout: &impl AsFd, stderr: &impl AsFd) {
    let _ = rustix::pipe::fcntl_setpipe_size(stdout, JOB_PIPE_BYTES);
    let _ = rustix::pipe::fcntl_setpipe_size(stderr, JOB_PIPE_BYTES);
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
        oom_limit: None,
        kept: 0,
        kept_hold_output: false,
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
fn abandon(child: &mut Child, pgid: Pid, ctl: &CallCtl, confine: Option<&RunGroup>) {
    let _ = rustix::process::kill_process_group(pgid, Signal::KILL);
    if let Some(group) = confine {
        group.kill();
        ctl.unregister_cgroup(group);
    }
    ctl.unregister_group(pgid);
    let _ = child.wait();
}

/// One piped output stream of a child: kept in memory up to a cap, or written to a sink.
struct Stream<R> {
    /// `None` once it reached end of file.
    pipe: Option<R>,
    kept: Vec<u8>,
    cap: usize,
    truncated: bool,
    /// Every byte read.
    total: u64,
}

impl<R: Read + AsFd> Stream<R> {
    fn new(pipe: Option<R>, cap: usize) -> Self {
        Stream {
            pipe,
            kept: Vec::new(),
            cap,
            truncated: false,
            total: 0,
        }
    }

    /// Read until the pipe would block, reaches EOF, or `budget` bytes were read.
    /// Bytes past the cap are read and dropped so the writer never blocks on us; with a
    /// sink every byte goes there instead.
    fn pump(
        &mut self,
        poller: &Poller,
        scratch: &mut [u8],
        mut budget: usize,
        sink: Option<(&dyn JobSink, Which)>,
    ) {
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
                    self.total += n as u64;
                    if let Some((sink, which)) = sink {
                        sink.write(which, &scratch[..n]);
                        continue;
                    }
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
    /// Set for a job: where its output goes.
    sink: Option<Arc<dyn JobSink>>,
    started: Instant,
    deadline: Instant,
    /// When to offer the run to `convert` (a one-shot call that may become a job).
    convert_at: Option<Instant>,
    convert: Option<Convert>,
    /// Set once we killed the group ourselves.
    forced: Option<End>,
    ctl: Arc<CallCtl>,
    /// Always `Some` once handed to the watcher.
    on_exit: Option<OnExit>,
    /// The run's cgroup: killed with the group at every end.
    confine: Option<Arc<RunGroup>>,
    /// [`RunSpec::background`].
    background: Option<Duration>,
    /// Set when the leader exited with a background holding a pipe: the run ends when
    /// both pipes close or at this time.
    grace_until: Option<Instant>,
}

impl Entry {
    /// SIGKILL the run's process group and its cgroup.
    fn kill(&self) {
        let _ = rustix::process::kill_process_group(self.pgid, Signal::KILL);
        if let Some(group) = &self.confine {
            group.kill();
        }
    }

    /// The key of the job this run feeds, if it is one.
    fn job_key(&self) -> Option<u64> {
        self.sink.as_ref().map(|s| s.key())
    }

    fn pump(&mut self, which: Which, poller: &Poller, scratch: &mut [u8], budget: usize) {
        let sink = self.sink.as_deref().map(|s| (s, which));
        match which {
            Which::Stdout => self.out.pump(poller, scratch, budget, sink),
            Which::Stderr => self.err.pump(poller, scratch, budget, sink),
        }
    }

    /// At the inline limit: become a job, or run on inline.
    fn offer(&mut self) {
        self.convert_at = None;
        let Some(convert) = self.convert.take() else {
            return;
        };
        let so_far = SoFar {
            pid: self.pgid,
            stdout: &self.out.kept,
            stderr: &self.err.kept,
            stdout_total: self.out.total,
            stderr_total: self.err.total,
            stdout_truncated: self.out.truncated,
            stderr_truncated: self.err.truncated,
            elapsed: self.started.elapsed(),
        };
        // The run leaves the call's reach before the job is offered: a cancel that came
        // first kills it as the call's (and it is not offered), one that comes later cannot
        // kill what the offer's reply says continues (contract §21).
        if !self.ctl.release(self.pgid, self.confine.as_deref()) {
            return;
        }
        let Some(job) = convert(so_far) else {
            // Refused: the run goes on inline to its own timeout, as it began, the call's
            // again (killed at once if the call was cancelled meanwhile).
            let _ = self.ctl.register_group(self.pgid);
            if let Some(group) = &self.confine {
                self.ctl.register_cgroup(Arc::clone(group));
            }
            return;
        };
        {
            // The group leaves the call (whose socket may go) for the job, with its cgroup.
            let _ = job.ctl.register_group(self.pgid);
            if let Some(group) = &self.confine {
                job.ctl.register_cgroup(Arc::clone(group));
            }
            self.ctl = job.ctl;
            self.background = None;
            self.sink = Some(job.sink);
            self.on_exit = Some(job.on_exit);
            self.out.kept = Vec::new();
            self.err.kept = Vec::new();
            if let (Some(out), Some(err)) = (&self.out.pipe, &self.err.pipe) {
                widen_pipes(out, err);
            }
        }
    }
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
    rx: Receiver<Msg>,
    entries: HashMap<u64, Box<Entry>>,
    next_id: u64,
    scratch: Vec<u8>,
    waits: Vec<Wait>,
    /// Pipes of answered calls still held by their background processes, by entry id
    /// (ids only grow, so the smallest is the oldest).
    lingering: std::collections::BTreeMap<u64, (Stream<ChildStdout>, Stream<ChildStderr>)>,
}

impl Watcher {
    /// How long to sleep: until the nearest kill deadline, inline limit or long-poll
    /// deadline.
    fn timeout(&self) -> Option<Duration> {
        let now = Instant::now();
        let children = self.entries.values().flat_map(|e| {
            let kill = (e.forced.is_none() && e.grace_until.is_none()).then_some(e.deadline);
            kill.into_iter().chain(e.convert_at).chain(e.grace_until)
        });
        let waits = self.waits.iter().map(|w| w.deadline);
        children
            .chain(waits)
            .map(|at| at.saturating_duration_since(now) + DEADLINE_SLACK)
            .min()
    }

    fn run(mut self) {
        loop {
            let ready = match self.poller.wait(self.timeout()) {
                Ok(ready) => ready,
                Err(e) => {
                    log::error!("process watcher: waiting failed ({e}); killing every child");
                    break;
                }
            };
            let mut stop = false;
            let mut exited = Vec::new();
            let mut touched = Vec::new();
            for r in ready {
                if r.key == WAKE_KEY {
                    stop |= !self.accept();
                    continue;
                }
                let id = r.key >> 2;
                let Some(entry) = self.entries.get_mut(&id) else {
                    self.drain_lingering(id);
                    continue;
                };
                let budget = READS_PER_WAKE * READ_CHUNK_BYTES;
                match r.key & 3 {
                    KEY_STDOUT => {
                        entry.pump(Which::Stdout, &self.poller, &mut self.scratch, budget)
                    }
                    KEY_STDERR => {
                        entry.pump(Which::Stderr, &self.poller, &mut self.scratch, budget)
                    }
                    _ => exited.push(id),
                }
                touched.extend(entry.job_key());
            }
            self.enforce_deadlines();
            // A run waiting out its grace ends once both pipes closed or the grace passed.
            let now = Instant::now();
            exited.extend(self.entries.iter().filter_map(|(id, e)| {
                let closed = e.out.pipe.is_none() && e.err.pipe.is_none();
                e.grace_until
                    .is_some_and(|at| closed || at <= now)
                    .then_some(*id)
            }));
            exited.sort_unstable();
            exited.dedup();
            for id in exited {
                touched.extend(self.finish(id, None));
            }
            self.settle_waits(&touched);
            if stop {
                break;
            }
        }
        self.abort_all();
    }

    /// Take every message. False once the owning handle is gone.
    fn accept(&mut self) -> bool {
        loop {
            match self.rx.try_recv() {
                Ok(Msg::Child(entry)) => self.add(entry),
                Ok(Msg::Wait(wait)) => {
                    if (wait.ready)() {
                        (wait.answer)();
                    } else {
                        self.waits.push(wait);
                    }
                }
                Err(TryRecvError::Empty) => return true,
                Err(TryRecvError::Disconnected) => return false,
            }
        }
    }

    fn add(&mut self, entry: Box<Entry>) {
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
            let touched = self.finish(id, Some(End::Aborted));
            self.settle_waits(&touched.into_iter().collect::<Vec<_>>());
        }
    }

    fn enforce_deadlines(&mut self) {
        let now = Instant::now();
        for entry in self.entries.values_mut() {
            if entry.forced.is_none() && entry.grace_until.is_none() && entry.deadline <= now {
                entry.kill();
                entry.forced = Some(End::TimedOut);
            }
            if entry.forced.is_none() && entry.convert_at.is_some_and(|at| at <= now) {
                entry.offer();
            }
        }
    }

    /// Answer the long-polls that can be answered: those on a touched job that are ready
    /// now, and those past their deadline; drop those whose call was cancelled.
    fn settle_waits(&mut self, touched: &[u64]) {
        if self.waits.is_empty() {
            return;
        }
        let now = Instant::now();
        let mut i = 0;
        while i < self.waits.len() {
            let w = &self.waits[i];
            if w.ctl.is_cancelled() {
                // Its reply would be dropped anyway; the Completion's drop says so.
                drop(self.waits.swap_remove(i));
                continue;
            }
            if w.deadline <= now || (touched.contains(&w.key) && (w.ready)()) {
                let w = self.waits.swap_remove(i);
                (w.answer)();
                continue;
            }
            i += 1;
        }
    }

    /// The leader has exited (or `abort` says to stop watching): kill what is left of the
    /// group, drain the pipes, reap, report. Returns the job's key, if it was a job.
    fn finish(&mut self, id: u64, abort: Option<End>) -> Option<u64> {
        let mut entry = self.entries.remove(&id)?;
        // A `bash` call that ended on its own keeps its background (§25); every other end
        // kills what the run started.
        let keep = abort.is_none()
            && entry.forced.is_none()
            && entry.background.is_some()
            && !entry.ctl.is_cancelled();
        if let (true, None, Some(grace)) = (keep, entry.grace_until, entry.background) {
            // First sight of the exit: take what is in the pipes; a pipe still open is
            // held by the background, waited for up to the grace.
            let budget = READS_PER_WAKE * READ_CHUNK_BYTES;
            entry.pump(Which::Stdout, &self.poller, &mut self.scratch, budget);
            entry.pump(Which::Stderr, &self.poller, &mut self.scratch, budget);
            if entry.out.pipe.is_some() || entry.err.pipe.is_some() {
                // The pidfd stays readable: it must leave the (level-triggered) set.
                let _ = self.poller.delete(&entry.pidfd);
                entry.convert_at = None;
                entry.grace_until = Some(Instant::now() + grace);
                self.entries.insert(id, entry);
                return None;
            }
        }
        if !keep {
            // The leader is at worst a zombie until reaped below, so the pgid is still
            // ours. Its cgroup goes with it: nothing the run started outlives it (§16).
            entry.kill();
        }
        entry.pump(
            Which::Stdout,
            &self.poller,
            &mut self.scratch,
            FINAL_DRAIN_BYTES,
        );
        entry.pump(
            Which::Stderr,
            &self.poller,
            &mut self.scratch,
            FINAL_DRAIN_BYTES,
        );
        let held = entry.out.pipe.is_some() || entry.err.pipe.is_some();
        if keep && held {
            self.linger(id, &mut entry);
        }
        entry.out.close(&self.poller);
        entry.err.close(&self.poller);
        let _ = self.poller.delete(&entry.pidfd);
        entry.ctl.unregister_group(entry.pgid);
        if let Some(group) = &entry.confine {
            entry.ctl.unregister_cgroup(group);
        }
        let status = match entry.child.try_wait() {
            Ok(Some(status)) => Some(status),
            // Only reached on abort, right after the SIGKILL above: a short wait.
            Ok(None) => entry.child.wait().ok(),
            Err(e) => {
                log::warn!("process watcher: could not reap a child ({e})");
                None
            }
        };
        // After the reap: the leader is no longer among what is left.
        let kept = match (&entry.confine, keep) {
            (Some(group), true) => group.keep(),
            _ => 0,
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
            // Killed by SIGKILL while the grant's OOM count rose: its memory limit did it.
            // (the killed one may be a child: the leader then exits 137).
            oom_limit: match (status, &entry.confine) {
                (Some(s), Some(group)) if s.signal() == Some(9) || s.code() == Some(137) => {
                    group.oom_limit()
                }
                _ => None,
            },
            kept,
            kept_hold_output: kept > 0 && held,
        };
        if let Some(on_exit) = entry.on_exit.take() {
            on_exit(result);
        }
        entry.job_key()
    }

    /// Stop: kill and reap every child, including ones handed over but not yet accepted;
    /// answer every long-poll.
    fn abort_all(&mut self) {
        while let Ok(msg) = self.rx.try_recv() {
            match msg {
                Msg::Child(entry) => {
                    let id = self.next_id;
                    self.next_id += 1;
                    self.entries.insert(id, entry);
                }
                Msg::Wait(wait) => self.waits.push(wait),
            }
        }
        let ids: Vec<u64> = self.entries.keys().copied().collect();
        for id in ids {
            self.finish(id, Some(End::Aborted));
        }
        for wait in std::mem::take(&mut self.waits) {
            (wait.answer)();
        }
        for (_, (mut out, mut err)) in std::mem::take(&mut self.lingering) {
            out.close(&self.poller);
            err.close(&self.poller);
        }
    }

    /// Keep reading an answered call's pipes that its background still holds (their
    /// epoll keys stay the entry's), closing the oldest past [`MAX_LINGERING`].
    fn linger(&mut self, id: u64, entry: &mut Entry) {
        let mut out = Stream::new(entry.out.pipe.take(), 0);
        let mut err = Stream::new(entry.err.pipe.take(), 0);
        // What comes from now on is read and dropped.
        out.truncated = true;
        err.truncated = true;
        self.lingering.insert(id, (out, err));
        while self.lingering.len() > MAX_LINGERING {
            if let Some((_, (mut out, mut err))) = self.lingering.pop_first() {
                out.close(&self.poller);
                err.close(&self.poller);
            }
        }
    }

    /// Read and drop what a lingering run's pipes hold; forget it once both closed.
    fn drain_lingering(&mut self, id: u64) {
        let Some((out, err)) = self.lingering.get_mut(&id) else {
            return;
        };
        let budget = READS_PER_WAKE * READ_CHUNK_BYTES;
        out.pump(&self.poller, &mut self.scratch, budget, None);
        err.pump(&self.poller, &mut self.scratch, budget, None);
        if out.pipe.is_none() && err.pipe.is_none() {
            self.lingering.remove(&id);
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
        ctl: Arc<CallCtl>,
    ) -> crossbeam_channel::Receiver<RunResult> {
        let (tx, rx) = crossbeam_channel::bounded(1);
        let mut cmd = Command::new("bash");
        cmd.arg("-c").arg(script);
        watcher.spawn(cmd, RunSpec::oneshot(timeout, cap, ctl), move |r| {
            tx.send(r.unwrap()).unwrap()
        });
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
            CallCtl::new(),
        );
        let r = rx.recv_timeout(WATCHDOG).unwrap();
        assert_eq!(r.stdout, b"out\n");
        assert_eq!(r.stderr, b"err\n");
        assert_eq!((r.exit_code, r.end), (3, End::Exited));
    }

    #[test]
    fn killed_by_own_signal_reports_128_plus_signal() {
        let w = ProcessWatcher::start().unwrap();
        let rx = run(&w, "kill -TERM $$", WATCHDOG, 1024, CallCtl::new());
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
            CallCtl::new(),
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
            .map(|_| run(&w, "sleep 300", WATCHDOG, 1024, CallCtl::new()))
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
        let ctl = CallCtl::new();
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
            RunSpec::oneshot(WATCHDOG, 1, CallCtl::new()),
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
            RunSpec::oneshot(WATCHDOG, 1, CallCtl::new()),
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

    /// A sink that keeps what it is given and counts it.
    #[derive(Default)]
    struct TestSink {
        bytes: std::sync::Mutex<Vec<u8>>,
        total: std::sync::atomic::AtomicU64,
    }

    impl JobSink for TestSink {
        fn write(&self, _: Which, bytes: &[u8]) {
            self.bytes.lock().unwrap().extend_from_slice(bytes);
            self.total
                .fetch_add(bytes.len() as u64, std::sync::atomic::Ordering::SeqCst);
        }
        fn key(&self) -> u64 {
            7
        }
    }

    fn fifo(tag: &str) -> std::path::PathBuf {
        let path = std::env::temp_dir().join(format!(
            "handnode-fifo-{tag}-{}-{:?}",
            std::process::id(),
            Instant::now()
        ));
        assert!(Command::new("mkfifo")
            .arg(&path)
            .status()
            .unwrap()
            .success());
        path
    }

    /// Open the FIFO for writing (it blocks until the child reads), under the watchdog.
    fn release(path: &std::path::Path) {
        let path = path.to_path_buf();
        let (tx, rx) = crossbeam_channel::bounded(1);
        std::thread::spawn(move || tx.send(std::fs::write(path, b"go\n").is_ok()));
        assert!(rx
            .recv_timeout(WATCHDOG)
            .expect("watchdog: nobody read the FIFO"));
    }

    #[test]
    fn a_jobs_output_goes_to_its_sink_and_a_wait_answers_when_it_arrives() {
        let w = ProcessWatcher::start().unwrap();
        let sink = Arc::new(TestSink::default());
        let gate = fifo("sink");
        let mut cmd = Command::new("bash");
        cmd.arg("-c")
            .arg(format!("read l < '{}'; echo out", gate.display()));
        let (tx, rx) = crossbeam_channel::bounded(1);
        let spec = RunSpec {
            sink: Some(Arc::clone(&sink) as Arc<dyn JobSink>),
            ..RunSpec::oneshot(WATCHDOG, 0, CallCtl::new())
        };
        w.spawn(cmd, spec, move |r| tx.send(r.unwrap()).unwrap());
        let (answered_tx, answered) = crossbeam_channel::bounded(1);
        let seen = Arc::clone(&sink);
        w.wait(Wait {
            key: 7,
            deadline: Instant::now() + WATCHDOG,
            ctl: CallCtl::new(),
            ready: Box::new(move || seen.total.load(std::sync::atomic::Ordering::SeqCst) > 0),
            answer: Box::new(move || answered_tx.send(()).unwrap()),
        });
        assert!(answered.try_recv().is_err(), "nothing yet");
        release(&gate);
        answered.recv_timeout(WATCHDOG).expect("answered on output");
        let r = rx.recv_timeout(WATCHDOG).unwrap();
        assert_eq!(
            (r.end, r.stdout.len()),
            (End::Exited, 0),
            "nothing kept in memory"
        );
        assert_eq!(sink.bytes.lock().unwrap().as_slice(), b"out\n");
        let _ = std::fs::remove_file(gate);
    }

    #[test]
    fn a_wait_answers_at_its_deadline_and_a_cancelled_one_never() {
        let w = ProcessWatcher::start().unwrap();
        let (tx, rx) = crossbeam_channel::unbounded();
        let tx2 = tx.clone();
        w.wait(Wait {
            key: 1,
            deadline: Instant::now() + Duration::from_millis(50),
            ctl: CallCtl::new(),
            ready: Box::new(|| false),
            answer: Box::new(move || tx.send("deadline").unwrap()),
        });
        let ctl = CallCtl::new();
        w.wait(Wait {
            key: 1,
            deadline: Instant::now() + WATCHDOG,
            ctl: Arc::clone(&ctl),
            ready: Box::new(|| false),
            answer: Box::new(move || tx2.send("cancelled").unwrap()),
        });
        assert_eq!(rx.recv_timeout(WATCHDOG).unwrap(), "deadline");
        ctl.cancel();
        // Dropped unanswered: its sender goes with it, so the channel disconnects.
        assert_eq!(
            rx.recv_timeout(WATCHDOG),
            Err(crossbeam_channel::RecvTimeoutError::Disconnected)
        );
    }

    #[test]
    fn at_its_inline_limit_a_run_becomes_a_job_or_runs_on_inline() {
        let w = ProcessWatcher::start().unwrap();
        let gate = fifo("inline");
        let sink = Arc::new(TestSink::default());
        let (call_tx, call_rx) = crossbeam_channel::unbounded();
        let (job_tx, job_rx) = crossbeam_channel::bounded(1);
        let job_ctl = CallCtl::new();
        let call_ctl = CallCtl::new();
        let mut cmd = Command::new("bash");
        cmd.arg("-c").arg(format!(
            "echo before; read l < '{}'; echo after",
            gate.display()
        ));
        let (offered_tx, offered) = crossbeam_channel::bounded(1);
        let mut spec = RunSpec::oneshot(WATCHDOG, 1024, Arc::clone(&call_ctl));
        let (s, c) = (Arc::clone(&sink), Arc::clone(&job_ctl));
        spec.inline = Some((
            Duration::from_millis(200),
            Box::new(move |so_far: SoFar<'_>| {
                offered_tx
                    .send((so_far.stdout.to_vec(), so_far.stdout_total))
                    .unwrap();
                Some(Continued {
                    sink: s as Arc<dyn JobSink>,
                    ctl: c,
                    on_exit: Box::new(move |r| job_tx.send(r).unwrap()),
                })
            }),
        ));
        w.spawn(cmd, spec, move |r| call_tx.send(r.unwrap()).unwrap());
        let (kept, total) = offered.recv_timeout(WATCHDOG).unwrap();
        assert_eq!((kept.as_slice(), total), (&b"before\n"[..], 7));
        // The call's cancel no longer reaches the group: it is the job's now.
        call_ctl.cancel();
        release(&gate);
        let r = job_rx.recv_timeout(WATCHDOG).unwrap();
        assert_eq!((r.end, r.exit_code), (End::Exited, 0));
        assert_eq!(sink.bytes.lock().unwrap().as_slice(), b"after\n");
        assert!(
            call_rx.try_recv().is_err(),
            "the call's own end is not reported"
        );

        // Refused: the run goes on inline and ends on its own, with all its output.
        let (offered_tx, offered) = crossbeam_channel::bounded(1);
        let mut spec = RunSpec::oneshot(WATCHDOG, 1024, CallCtl::new());
        spec.inline = Some((
            Duration::from_millis(50),
            Box::new(move |_| {
                offered_tx.send(()).unwrap();
                None
            }),
        ));
        let (tx, rx) = crossbeam_channel::bounded(1);
        let mut cmd = Command::new("bash");
        cmd.arg("-c").arg(format!(
            "echo before; read l < '{}'; echo after",
            gate.display()
        ));
        w.spawn(cmd, spec, move |r| tx.send(r.unwrap()).unwrap());
        offered.recv_timeout(WATCHDOG).unwrap();
        release(&gate);
        let r = rx.recv_timeout(WATCHDOG).unwrap();
        assert_eq!((r.end, r.exit_code), (End::Exited, 0));
        assert_eq!(r.stdout, b"before\nafter\n");
        let _ = std::fs::remove_file(gate);
    }
}
