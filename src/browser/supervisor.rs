//! The supervisor thread of the browser tier: starts each grant's browser process, speaks
//! newline-delimited JSON-RPC (MCP over stdio) on its pipes, matches replies to calls,
//! enforces the start, call and idle timers, and destroys browsers.
//!
//! One thread for every browser: one epoll set over each browser's stdout, stderr, stdin
//! (only while a write is pending) and exit pidfd, plus the wake handle that `Browsers`
//! rings when it queues a message. It sleeps until readiness, a message, or the nearest
//! real deadline (a start, a call, an idle browser); nothing polls on an interval.

use std::collections::{HashMap, VecDeque};
use std::io::{self, Read, Write};
use std::os::fd::OwnedFd;
use std::os::unix::fs::DirBuilderExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStderr, ChildStdin, ChildStdout, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, TryRecvError};
use rustix::process::{Pid, PidfdFlags, Signal};
use serde_json::{json, Value};

use super::{sweep, BrowserOptions, Learned, Msg, MAX_CALLS_PER_BROWSER};
use super::{KILL_PATIENCE, STDERR_LINE_BYTES, STDERR_TAIL_LINES};
use crate::base::wake::{Poller, WAKE_KEY};
use crate::pool::{CallCtl, Completion};
use crate::profiles::Profile;
use crate::wire::mcp::{ToolOutput, DEFAULT_PROTOCOL_VERSION, SERVER_ERROR};

/// Bytes asked for per `read` of a browser's pipe.
const READ_CHUNK_BYTES: usize = 64 * 1024;
/// Reads of one pipe per readiness report, so one chatty browser cannot starve the others.
const READS_PER_WAKE: usize = 16;
/// Most bytes drained from a pipe after its browser exited.
const FINAL_DRAIN_BYTES: usize = 32 << 20;
/// A line buffer grown past this by a large reply is given back after the reply.
const KEEP_LINE_CAPACITY: usize = 256 << 10;
/// A browser that closed its stdout but has not exited this long after is killed. Its
/// exit usually follows at once, and its exit status says more than the closed pipe.
const STDOUT_EOF_GRACE: Duration = Duration::from_secs(2);
/// Added to every deadline sleep so a sub-millisecond remainder does not spin the loop.
const DEADLINE_SLACK: Duration = Duration::from_millis(1);

/// Which descriptor of a browser an epoll key names (the low two bits of the key).
const KEY_STDOUT: u64 = 0;
const KEY_STDERR: u64 = 1;
const KEY_EXIT: u64 = 2;
const KEY_STDIN: u64 = 3;

fn key(id: u64, kind: u64) -> u64 {
    (id << 2) | kind
}

/// One browser tool call on its way to, or in, a browser.
pub(super) struct Call {
    pub key: u64,
    pub grant: String,
    pub name: String,
    pub arguments: Value,
    pub ctl: Arc<CallCtl>,
    pub timeout: Duration,
    /// When it is given up, counted from its arrival: a browser start is included.
    pub deadline: Instant,
    pub done: Completion,
}

/// What a request sent to a browser was.
enum Waiting {
    Initialize,
    List,
    Call(Box<Call>),
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Phase {
    /// Spawned; `initialize` not answered yet.
    Starting {
        deadline: Instant,
    },
    Ready,
}

/// Why a browser is being destroyed; decides what its calls and its grant are told.
enum Why {
    Ended,
    Shutdown,
    Idle,
    /// It exited (or we killed it for a fault) after it was ready.
    Crashed(String),
    /// It exited, or failed, before it answered `initialize`.
    StartFailed(String),
    /// The probe is done with (learned or not).
    ProbeDone,
}

/// The last lines a browser wrote on stderr, bounded.
#[derive(Default)]
pub(super) struct Tail {
    lines: VecDeque<String>,
    partial: Vec<u8>,
}

impl Tail {
    pub(super) fn push(&mut self, bytes: &[u8]) {
        for &b in bytes {
            if b == b'\n' {
                self.end_line();
            } else if self.partial.len() < STDERR_LINE_BYTES {
                self.partial.push(b);
            }
        }
    }

    fn end_line(&mut self) {
        let line = clean_line(&self.partial);
        self.partial.clear();
        if line.trim().is_empty() {
            return;
        }
        if self.lines.len() == STDERR_TAIL_LINES {
            self.lines.pop_front();
        }
        self.lines.push_back(line);
    }

    /// For a tool error: the last lines, or that there were none.
    pub(super) fn render(&mut self) -> String {
        if !self.partial.is_empty() {
            self.end_line();
        }
        if self.lines.is_empty() {
            return "It wrote nothing on stderr.".into();
        }
        let mut text = String::from("Its last stderr lines:");
        for line in &self.lines {
            text.push_str("\n  ");
            text.push_str(line);
        }
        text
    }
}

/// Printable text of one stderr line: ANSI escape sequences dropped, other control
/// characters shown as spaces.
fn clean_line(raw: &[u8]) -> String {
    let text = String::from_utf8_lossy(raw);
    let mut out = String::with_capacity(text.len());
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        if c == '\u{1b}' {
            if chars.peek() == Some(&'[') {
                chars.next();
                // Parameters and intermediates, then one final byte in @..~.
                for c in chars.by_ref() {
                    if ('@'..='~').contains(&c) {
                        break;
                    }
                }
            }
            continue;
        }
        out.push(if c.is_control() && c != '\t' { ' ' } else { c });
    }
    out
}

/// One running browser process.
struct Proc {
    /// `None` for the start-up probe.
    grant: Option<String>,
    dir: PathBuf,
    child: Child,
    pgid: Pid,
    pidfd: OwnedFd,
    stdin: Option<ChildStdin>,
    /// Bytes not yet written to stdin.
    outbox: Vec<u8>,
    /// Whether stdin is in the epoll set (it is only while `outbox` waits).
    stdin_watched: bool,
    stdout: Option<ChildStdout>,
    /// The reply line being read.
    line: Vec<u8>,
    stderr: Option<ChildStderr>,
    tail: Tail,
    phase: Phase,
    /// Calls that arrived while the browser was starting.
    queued: VecDeque<Box<Call>>,
    waiting: HashMap<u64, Waiting>,
    next_rpc_id: u64,
    last_used: Instant,
    /// Said in the first successful reply of this browser (its predecessor's pages lost).
    note: Option<String>,
    /// Why we killed it ourselves, when we did.
    fault: Option<String>,
    /// When it closed its stdout plus [`STDOUT_EOF_GRACE`]: killed then if still alive.
    eof_deadline: Option<Instant>,
    /// A grant's browser runs in a cgroup under the grant's (§16): killed with it, and
    /// when this browser is dropped.
    _confine: Option<Arc<crate::cgroup::RunGroup>>,
}

impl Proc {
    fn calls_in_flight(&self) -> usize {
        self.queued.len()
            + self
                .waiting
                .values()
                .filter(|w| matches!(w, Waiting::Call(_)))
                .count()
    }

    fn label(&self) -> String {
        match &self.grant {
            Some(g) => format!("browser of grant {g}"),
            None => "browser probe".into(),
        }
    }
}

pub(super) struct Supervisor {
    options: BrowserOptions,
    poller: Poller,
    rx: Receiver<Msg>,
    learned: Arc<Mutex<Learned>>,
    running: Arc<AtomicUsize>,
    procs: HashMap<u64, Proc>,
    by_grant: HashMap<String, u64>,
    /// What the next browser of a grant must say first (its last one idled out or crashed).
    notes: HashMap<String, String>,
    next_id: u64,
    scratch: Vec<u8>,
}

impl Supervisor {
    pub(super) fn new(
        options: BrowserOptions,
        poller: Poller,
        rx: Receiver<Msg>,
        learned: Arc<Mutex<Learned>>,
        running: Arc<AtomicUsize>,
    ) -> Self {
        Supervisor {
            options,
            poller,
            rx,
            learned,
            running,
            procs: HashMap::new(),
            by_grant: HashMap::new(),
            notes: HashMap::new(),
            next_id: 1,
            scratch: vec![0; READ_CHUNK_BYTES],
        }
    }

    pub(super) fn run(mut self) {
        if self.options.probe {
            if let Err(why) = self.start(None) {
                log::warn!(
                    "browser tier: the probe could not start ({why}); browser tools are \
                     listed with open schemas until a browser starts"
                );
            }
        }
        let stop = loop {
            let timeout = self
                .next_deadline()
                .map(|at| at.saturating_duration_since(Instant::now()) + DEADLINE_SLACK);
            let ready = match self.poller.wait(timeout) {
                Ok(ready) => ready,
                Err(e) => {
                    log::error!("browser supervisor: waiting failed ({e}); stopping every browser");
                    break None;
                }
            };
            let mut exited = Vec::new();
            for r in ready {
                if r.key == WAKE_KEY {
                    continue;
                }
                let id = r.key >> 2;
                match r.key & 3 {
                    KEY_STDOUT => self.read_stdout(id, READS_PER_WAKE * READ_CHUNK_BYTES),
                    KEY_STDERR => self.read_stderr(id, READS_PER_WAKE * READ_CHUNK_BYTES),
                    KEY_EXIT => exited.push(id),
                    _ => self.flush(id),
                }
            }
            let mut stop = None;
            loop {
                match self.rx.try_recv() {
                    Ok(Msg::Call(call)) => self.call(call),
                    Ok(Msg::Cancel(key)) => self.cancel(key),
                    Ok(Msg::End(grant)) => self.end(&grant),
                    Ok(Msg::Shutdown(ack)) => {
                        stop = Some(Some(ack));
                        break;
                    }
                    Err(TryRecvError::Empty) => break,
                    Err(TryRecvError::Disconnected) => {
                        stop = Some(None);
                        break;
                    }
                }
            }
            for id in exited {
                self.exited(id);
            }
            self.timers();
            if let Some(ack) = stop {
                break ack;
            }
        };
        let ids: Vec<u64> = self.procs.keys().copied().collect();
        for id in ids {
            self.destroy(id, Why::Shutdown);
        }
        // Calls that came in behind the stop are answered, not dropped.
        while let Ok(msg) = self.rx.try_recv() {
            if let Msg::Call(call) = msg {
                call.done
                    .complete(ToolOutput::tool_error("handnode is shutting down"));
            }
        }
        if let Some(ack) = stop {
            let _ = ack.send(());
        }
    }

    // -----------------------------------------------------------------------------------
    // Messages from `Browsers`

    fn call(&mut self, call: Box<Call>) {
        if call.ctl.is_cancelled() {
            return call
                .done
                .complete(ToolOutput::tool_error("cancelled before it started"));
        }
        let id = match self.by_grant.get(&call.grant) {
            Some(id) => *id,
            None => {
                let running = self.by_grant.len();
                if running >= self.options.max_browsers {
                    return call.done.complete(ToolOutput::tool_error(format!(
                        "no browser available: {running} already running (this box allows \
                         {}); one frees up when another browser grant ends or its browser \
                         idles out",
                        self.options.max_browsers
                    )));
                }
                match self.start(Some(&call.grant)) {
                    Ok(id) => id,
                    Err(why) => {
                        return call.done.complete(ToolOutput::tool_error(format!(
                            "the browser could not start: {why}"
                        )))
                    }
                }
            }
        };
        let Some(proc) = self.procs.get_mut(&id) else {
            return call.done.complete(ToolOutput::tool_error(
                "internal error: the browser is gone",
            ));
        };
        if proc.calls_in_flight() >= MAX_CALLS_PER_BROWSER {
            return call.done.complete(ToolOutput::tool_error(format!(
                "too many calls waiting for this grant's browser ({MAX_CALLS_PER_BROWSER}); \
                 wait for some to finish"
            )));
        }
        // Two messages' worth waiting for a browser that does not read: then it is stuck.
        if proc.outbox.len() > 2 * self.options.max_message_bytes {
            return call.done.complete(ToolOutput::tool_error(
                "this grant's browser is not reading its input; retry shortly",
            ));
        }
        match proc.phase {
            Phase::Starting { .. } => proc.queued.push_back(call),
            Phase::Ready => self.dispatch(id, call),
        }
    }

    fn cancel(&mut self, key: u64) {
        let mut sent = None;
        for (id, proc) in self.procs.iter_mut() {
            if let Some(pos) = proc.queued.iter().position(|c| c.key == key) {
                let call = proc.queued.remove(pos).expect("found above");
                call.done.complete(ToolOutput::tool_error("cancelled"));
                return;
            }
            let found = proc.waiting.iter().find_map(|(rpc_id, w)| match w {
                Waiting::Call(call) if call.key == key => Some(*rpc_id),
                _ => None,
            });
            if let Some(rpc_id) = found {
                if let Some(Waiting::Call(call)) = proc.waiting.remove(&rpc_id) {
                    call.done.complete(ToolOutput::tool_error("cancelled"));
                }
                sent = Some((*id, rpc_id));
                break;
            }
        }
        // The browser stops working on it; a late reply finds no waiter and is dropped.
        if let Some((id, rpc_id)) = sent {
            self.tell_cancelled(id, rpc_id, "the caller cancelled the call");
        }
    }

    fn end(&mut self, grant: &str) {
        self.notes.remove(grant);
        if let Some(id) = self.by_grant.get(grant).copied() {
            self.destroy(id, Why::Ended);
        }
    }

    // -----------------------------------------------------------------------------------
    // Starting and stopping

    /// Start a browser for `grant` (`None`: the probe). Returns its id, or why not.
    fn start(&mut self, grant: Option<&str>) -> Result<u64, String> {
        let dir = self.make_dir(grant)?;
        match self.spawn(grant, &dir) {
            Ok(id) => Ok(id),
            Err(why) => {
                let _ = std::fs::remove_dir_all(&dir);
                Err(why)
            }
        }
    }

    /// A fresh directory of its own: `<base>/<grant prefix>-<random>` (short: chromium's
    /// socket lives under it), with the owner stamp that lets a later daemon clean up
    /// after a crash.
    fn make_dir(&self, grant: Option<&str>) -> Result<PathBuf, String> {
        let prefix: String = match grant {
            Some(g) => g
                .chars()
                .filter(|c| c.is_ascii_alphanumeric())
                .take(8)
                .collect(),
            None => "probe".into(),
        };
        let mut last_error = String::new();
        for _ in 0..4 {
            let mut bytes = [0u8; 4];
            let _ = getrandom::fill(&mut bytes);
            let dir = self
                .options
                .dir
                .join(format!("{prefix}-{:08x}", u32::from_ne_bytes(bytes)));
            match std::fs::DirBuilder::new().mode(0o700).create(&dir) {
                Ok(()) => {
                    let made = (|| -> io::Result<()> {
                        std::fs::write(dir.join(sweep::OWNER_FILE), sweep::owner_stamp())?;
                        for sub in ["tmp", "home", "output"] {
                            std::fs::DirBuilder::new()
                                .mode(0o700)
                                .create(dir.join(sub))?;
                        }
                        Ok(())
                    })();
                    return match made {
                        Ok(()) => Ok(dir),
                        Err(e) => {
                            let _ = std::fs::remove_dir_all(&dir);
                            Err(format!("cannot prepare {}: {e}", dir.display()))
                        }
                    };
                }
                Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {
                    last_error = e.to_string();
                }
                Err(e) => return Err(format!("cannot create {}: {e}", dir.display())),
            }
        }
        Err(format!(
            "cannot create a directory under {}: {last_error}",
            self.options.dir.display()
        ))
    }

    fn spawn(&mut self, grant: Option<&str>, dir: &Path) -> Result<u64, String> {
        let argv = &self.options.argv;
        let mut args: Vec<std::ffi::OsString> =
            crate::base::browser_argv::with_blocked_origins(argv, &self.options.blocked_origins)
                .into_iter()
                .map(Into::into)
                .collect();
        args.push("--output-dir".into());
        args.push(dir.join("output").into());
        if !crate::base::browser_argv::is_isolated(argv) {
            args.push("--user-data-dir".into());
            args.push(dir.join("profile").into());
        }
        let home = dir.join("home");
        let mut extra: Vec<(String, String)> = vec![
            (sweep::TAG_VAR.into(), dir.display().to_string()),
            ("TMPDIR".into(), dir.join("tmp").display().to_string()),
            ("HOME".into(), home.display().to_string()),
            (
                "XDG_CONFIG_HOME".into(),
                home.join(".config").display().to_string(),
            ),
            (
                "XDG_CACHE_HOME".into(),
                home.join(".cache").display().to_string(),
            ),
            (
                "XDG_DATA_HOME".into(),
                home.join(".local/share").display().to_string(),
            ),
        ];
        // HOME moves into the throwaway dir; browsers Playwright downloaded stay findable.
        match std::env::var("PLAYWRIGHT_BROWSERS_PATH") {
            Ok(path) => extra.push(("PLAYWRIGHT_BROWSERS_PATH".into(), path)),
            Err(_) => {
                if let Some(real) = std::env::var_os("HOME") {
                    let cache = PathBuf::from(real).join(".cache/ms-playwright");
                    extra.push((
                        "PLAYWRIGHT_BROWSERS_PATH".into(),
                        cache.display().to_string(),
                    ));
                }
            }
        }
        let env = super::browser_env(
            std::env::vars_os(),
            crate::base::browser_argv::is_headed(argv),
            &self.options.env,
            &extra,
        );
        let (program, args) = match &self.options.isolation {
            super::Isolation::None => (std::ffi::OsString::from(&argv[0]), args),
            super::Isolation::Bwrap(bwrap) => {
                let mut wrapped = bwrap.args(dir, &self.options.dir);
                wrapped.push((&argv[0]).into());
                wrapped.extend(args);
                (bwrap.program.clone().into_os_string(), wrapped)
            }
        };
        // A grant's browser lives in its grant's cgroup, under its limits (§16); the probe
        // belongs to no grant. The subreaper fallback has no group to put it in. Inside
        // it, bwrap (when used) wraps the browser.
        let confine = match (grant, &self.options.env.confine) {
            (Some(g), Some(c)) if c.containment().mode().is_some() => Some(
                c.run(g, true, "browser")
                    .map_err(|e| format!("cannot contain {}: {e}", argv[0]))?,
            ),
            _ => None,
        };
        let mut cmd = match &confine {
            Some(group) => group.command(Path::new(&program)),
            None => Command::new(&program),
        };
        cmd.args(&args)
            .current_dir(dir)
            .env_clear()
            .envs(env)
            .process_group(0)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let spawned = match &confine {
            Some(group) => group.spawn(&mut cmd),
            None => cmd.spawn(),
        };
        let mut child =
            spawned.map_err(|e| format!("cannot run {}: {e}", program.to_string_lossy()))?;
        let pgid = Pid::from_raw(child.id() as i32).expect("a spawned child has a positive pid");
        let prepared = (|| -> io::Result<(OwnedFd, ChildStdin, ChildStdout, ChildStderr)> {
            let pidfd = rustix::process::pidfd_open(pgid, PidfdFlags::empty())
                .map_err(|e| io::Error::other(format!("pidfd_open failed ({e})")))?;
            let stdin = child.stdin.take().expect("stdin was piped");
            let stdout = child.stdout.take().expect("stdout was piped");
            let stderr = child.stderr.take().expect("stderr was piped");
            for fd in [
                rustix::fd::AsFd::as_fd(&stdin),
                rustix::fd::AsFd::as_fd(&stdout),
                rustix::fd::AsFd::as_fd(&stderr),
            ] {
                rustix::io::ioctl_fionbio(fd, true)?;
            }
            Ok((pidfd, stdin, stdout, stderr))
        })();
        let (pidfd, stdin, stdout, stderr) = match prepared {
            Ok(p) => p,
            Err(e) => {
                let _ = rustix::process::kill_process_group(pgid, Signal::KILL);
                let _ = child.wait();
                return Err(format!("cannot watch it: {e}"));
            }
        };
        let id = self.next_id;
        self.next_id += 1;
        let registered = (|| -> io::Result<()> {
            self.poller.add(&stdout, key(id, KEY_STDOUT), true, false)?;
            self.poller.add(&stderr, key(id, KEY_STDERR), true, false)?;
            self.poller.add(&pidfd, key(id, KEY_EXIT), true, false)
        })();
        let now = Instant::now();
        let proc = Proc {
            grant: grant.map(str::to_string),
            dir: dir.to_path_buf(),
            child,
            pgid,
            pidfd,
            stdin: Some(stdin),
            outbox: Vec::new(),
            stdin_watched: false,
            stdout: Some(stdout),
            line: Vec::new(),
            stderr: Some(stderr),
            tail: Tail::default(),
            phase: Phase::Starting {
                deadline: now + self.options.start_timeout,
            },
            queued: VecDeque::new(),
            waiting: HashMap::new(),
            next_rpc_id: 1,
            last_used: now,
            note: grant.and_then(|g| self.notes.remove(g)),
            fault: None,
            eof_deadline: None,
            _confine: confine,
        };
        log::info!(
            "{} started (pid {}, dir {})",
            proc.label(),
            pgid.as_raw_nonzero(),
            dir.display()
        );
        self.procs.insert(id, proc);
        if let Some(g) = grant {
            self.by_grant.insert(g.to_string(), id);
            self.running.store(self.by_grant.len(), Ordering::SeqCst);
        }
        if let Err(e) = registered {
            self.destroy(id, Why::StartFailed(format!("cannot watch it: {e}")));
            return Err(format!("cannot watch it: {e}"));
        }
        let rpc_id = self.request(
            id,
            "initialize",
            json!({
                "protocolVersion": DEFAULT_PROTOCOL_VERSION,
                "capabilities": {},
                "clientInfo": {"name": "handnode", "version": env!("CARGO_PKG_VERSION")},
            }),
        );
        if let (Some(rpc_id), Some(proc)) = (rpc_id, self.procs.get_mut(&id)) {
            proc.waiting.insert(rpc_id, Waiting::Initialize);
        }
        Ok(id)
    }

    /// Kill a browser's processes, remove its directory, answer its calls.
    fn destroy(&mut self, id: u64, why: Why) {
        let Some(mut proc) = self.procs.remove(&id) else {
            return;
        };
        if let Some(g) = &proc.grant {
            self.by_grant.remove(g);
        }
        if let Some(pipe) = proc.stdout.take() {
            let _ = self.poller.delete(&pipe);
        }
        if let Some(pipe) = proc.stderr.take() {
            let _ = self.poller.delete(&pipe);
        }
        if let Some(pipe) = proc.stdin.take() {
            if proc.stdin_watched {
                let _ = self.poller.delete(&pipe);
            }
        }
        let _ = self.poller.delete(&proc.pidfd);
        // The leader is at worst a zombie until reaped below, so the pgid is still ours.
        let _ = rustix::process::kill_process_group(proc.pgid, Signal::KILL);
        let swept = sweep::kill_browser_processes(&proc.dir, KILL_PATIENCE);
        let status = proc.child.wait().ok();
        if let Err(e) = std::fs::remove_dir_all(&proc.dir) {
            log::warn!(
                "{}: cannot remove {}: {e}",
                proc.label(),
                proc.dir.display()
            );
        }
        // Counted as running until its processes and directory are gone.
        self.running.store(self.by_grant.len(), Ordering::SeqCst);
        let calls: Vec<Box<Call>> = proc
            .queued
            .drain(..)
            .chain(proc.waiting.drain().filter_map(|(_, w)| match w {
                Waiting::Call(call) => Some(call),
                _ => None,
            }))
            .collect();
        let label = proc.label();
        let answer = match &why {
            Why::Ended => "this grant ended, so its browser was closed".to_string(),
            Why::Shutdown => "handnode is shutting down; the browser was closed".to_string(),
            Why::Idle | Why::ProbeDone => "the browser was closed".to_string(),
            Why::Crashed(how) => format!(
                "this grant's browser stopped ({how}) while the call ran; its pages were \
                 lost, and the next call starts a new browser. {}",
                proc.tail.render()
            ),
            Why::StartFailed(how) => {
                format!("the browser could not start: {how}. {}", proc.tail.render())
            }
        };
        for call in calls {
            call.done.complete(ToolOutput::tool_error(answer.clone()));
        }
        let status = status.map_or("unknown".to_string(), |s| s.to_string());
        match (&why, &proc.grant) {
            (Why::Idle, Some(g)) => {
                log::info!("{label} idled out and was stopped ({swept} processes killed)");
                self.notes.insert(
                    g.clone(),
                    format!(
                        "Note: this grant's browser was closed after {} without a call, \
                         and this call started a new one: the old one's pages, cookies and \
                         storage are gone.",
                        human(self.options.idle)
                    ),
                );
            }
            (Why::Crashed(how), Some(g)) => {
                log::warn!("{label} stopped: {how}; {}", proc.tail.render());
                self.notes.insert(
                    g.clone(),
                    format!(
                        "Note: this grant's browser stopped ({how}) and this call started a \
                         new one: its pages were lost."
                    ),
                );
            }
            (Why::StartFailed(how), grant) => {
                log::warn!("{label} could not start: {how}; {}", proc.tail.render());
                // The note of the browser before it was never delivered: keep it.
                if let (Some(g), Some(note)) = (grant, proc.note.take()) {
                    self.notes.insert(g.clone(), note);
                }
            }
            (Why::ProbeDone, _) => log::debug!("{label} done (status {status})"),
            _ => log::info!("{label} stopped ({swept} processes killed, status {status})"),
        }
    }

    /// The browser process exited (its pidfd is readable): read what it left, then
    /// destroy it with the reason.
    fn exited(&mut self, id: u64) {
        self.read_stdout(id, FINAL_DRAIN_BYTES);
        self.read_stderr(id, FINAL_DRAIN_BYTES);
        let Some(proc) = self.procs.get_mut(&id) else {
            return;
        };
        let status = match proc.child.try_wait() {
            Ok(Some(status)) => describe(status),
            _ => "it exited".into(),
        };
        let how = proc.fault.take().unwrap_or(status);
        let why = match (proc.phase, &proc.grant) {
            (_, None) => {
                log::warn!(
                    "browser tier: the probe stopped before it listed its tools ({how}); {}",
                    proc.tail.render()
                );
                Why::ProbeDone
            }
            (Phase::Starting { .. }, _) => {
                Why::StartFailed(format!("{how} before it answered initialize"))
            }
            (Phase::Ready, _) => Why::Crashed(how),
        };
        self.destroy(id, why);
    }

    /// Kill a browser for a fault of its own; its exit is then handled like a crash.
    fn fault(&mut self, id: u64, why: String) {
        if let Some(proc) = self.procs.get_mut(&id) {
            if proc.fault.is_none() {
                proc.fault = Some(why);
            }
            let _ = rustix::process::kill_process_group(proc.pgid, Signal::KILL);
        }
    }

    // -----------------------------------------------------------------------------------
    // Timers

    fn next_deadline(&self) -> Option<Instant> {
        let mut next: Option<Instant> = None;
        let mut consider = |at: Instant| {
            next = Some(next.map_or(at, |n| n.min(at)));
        };
        for proc in self.procs.values() {
            if proc.fault.is_some() {
                continue;
            }
            if let Phase::Starting { deadline } = proc.phase {
                consider(deadline);
            }
            if let Some(at) = proc.eof_deadline {
                consider(at);
            }
            for w in proc.waiting.values() {
                if let Waiting::Call(call) = w {
                    consider(call.deadline);
                }
            }
            for call in &proc.queued {
                consider(call.deadline);
            }
            if proc.grant.is_some() && proc.phase == Phase::Ready && proc.calls_in_flight() == 0 {
                consider(proc.last_used + self.options.idle);
            }
        }
        next
    }

    fn timers(&mut self) {
        let now = Instant::now();
        let mut idle = Vec::new();
        let mut late_start = Vec::new();
        let mut timed_out = Vec::new();
        let mut mute = Vec::new();
        for (id, proc) in &self.procs {
            if proc.fault.is_some() {
                continue;
            }
            if proc.eof_deadline.is_some_and(|at| at <= now) {
                mute.push(*id);
                continue;
            }
            if let Phase::Starting { deadline } = proc.phase {
                if deadline <= now {
                    late_start.push(*id);
                    continue;
                }
            }
            for (rpc_id, w) in &proc.waiting {
                if let Waiting::Call(call) = w {
                    if call.deadline <= now {
                        timed_out.push((*id, Some(*rpc_id), call.key));
                    }
                }
            }
            for call in &proc.queued {
                if call.deadline <= now {
                    timed_out.push((*id, None, call.key));
                }
            }
            if proc.grant.is_some()
                && proc.phase == Phase::Ready
                && proc.calls_in_flight() == 0
                && proc.last_used + self.options.idle <= now
            {
                idle.push(*id);
            }
        }
        for (id, rpc_id, key) in timed_out {
            let Some(proc) = self.procs.get_mut(&id) else {
                continue;
            };
            let call = match rpc_id {
                Some(rpc_id) => match proc.waiting.remove(&rpc_id) {
                    Some(Waiting::Call(call)) => Some(call),
                    _ => None,
                },
                None => proc
                    .queued
                    .iter()
                    .position(|c| c.key == key)
                    .and_then(|pos| proc.queued.remove(pos)),
            };
            if let Some(call) = call {
                proc.last_used = now;
                let text = format!(
                    "the browser did not answer {} within {}, so the call was given up \
                     (the page may still be busy with it)",
                    call.name,
                    human(call.timeout)
                );
                call.done.complete(ToolOutput::tool_error(text));
            }
            if let Some(rpc_id) = rpc_id {
                self.tell_cancelled(id, rpc_id, "handnode's time limit for the call passed");
            }
        }
        for id in mute {
            self.fault(id, "it closed its standard output".into());
        }
        for id in late_start {
            let why = format!(
                "it did not answer initialize within {}",
                human(self.options.start_timeout)
            );
            let why = if self.procs.get(&id).is_some_and(|p| p.grant.is_none()) {
                log::warn!("browser tier: the probe {why}");
                Why::ProbeDone
            } else {
                Why::StartFailed(why)
            };
            self.destroy(id, why);
        }
        for id in idle {
            self.destroy(id, Why::Idle);
        }
    }

    // -----------------------------------------------------------------------------------
    // JSON-RPC over the pipes

    /// Send a request; returns its id (`None` if the browser is already gone).
    fn request(&mut self, id: u64, method: &str, params: Value) -> Option<u64> {
        let proc = self.procs.get_mut(&id)?;
        let rpc_id = proc.next_rpc_id;
        proc.next_rpc_id += 1;
        let msg = json!({"jsonrpc": "2.0", "id": rpc_id, "method": method, "params": params});
        self.write(id, &msg);
        Some(rpc_id)
    }

    fn dispatch(&mut self, id: u64, mut call: Box<Call>) {
        let params = json!({"name": call.name, "arguments": std::mem::take(&mut call.arguments)});
        let Some(rpc_id) = self.request(id, "tools/call", params) else {
            return call.done.complete(ToolOutput::tool_error(
                "internal error: the browser is gone",
            ));
        };
        let Some(proc) = self.procs.get_mut(&id) else {
            return;
        };
        proc.last_used = Instant::now();
        proc.waiting.insert(rpc_id, Waiting::Call(call));
    }

    fn tell_cancelled(&mut self, id: u64, rpc_id: u64, reason: &str) {
        let msg = json!({
            "jsonrpc": "2.0",
            "method": "notifications/cancelled",
            "params": {"requestId": rpc_id, "reason": reason},
        });
        self.write(id, &msg);
    }

    /// Queue one message on the browser's stdin and write what the pipe takes now.
    fn write(&mut self, id: u64, msg: &Value) {
        let Some(proc) = self.procs.get_mut(&id) else {
            return;
        };
        if proc.stdin.is_none() {
            return;
        }
        if serde_json::to_writer(&mut proc.outbox, msg).is_ok() {
            proc.outbox.push(b'\n');
        }
        self.flush(id);
    }

    fn flush(&mut self, id: u64) {
        let Some(proc) = self.procs.get_mut(&id) else {
            return;
        };
        let Some(stdin) = proc.stdin.as_mut() else {
            proc.outbox.clear();
            return;
        };
        let mut written = 0;
        let broken = loop {
            if written == proc.outbox.len() {
                break false;
            }
            match stdin.write(&proc.outbox[written..]) {
                Ok(0) => break true,
                Ok(n) => written += n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break false,
                Err(_) => break true,
            }
        };
        proc.outbox.drain(..written);
        if broken {
            // The browser closed its stdin: it is exiting, and its pidfd will say so.
            if let Some(pipe) = proc.stdin.take() {
                if proc.stdin_watched {
                    let _ = self.poller.delete(&pipe);
                }
            }
            proc.stdin_watched = false;
            proc.outbox = Vec::new();
            return;
        }
        let want = !proc.outbox.is_empty();
        let stdin = proc.stdin.as_ref().expect("checked above");
        match (want, proc.stdin_watched) {
            (true, false) => {
                proc.stdin_watched = self
                    .poller
                    .add(stdin, key(id, KEY_STDIN), false, true)
                    .is_ok();
            }
            (false, true) => {
                let _ = self.poller.delete(stdin);
                proc.stdin_watched = false;
                proc.outbox = Vec::new();
            }
            _ => {}
        }
    }

    fn read_stderr(&mut self, id: u64, mut budget: usize) {
        let Some(proc) = self.procs.get_mut(&id) else {
            return;
        };
        while budget > 0 {
            let Some(pipe) = proc.stderr.as_mut() else {
                return;
            };
            match pipe.read(&mut self.scratch) {
                Ok(0) => {
                    if let Some(pipe) = proc.stderr.take() {
                        let _ = self.poller.delete(&pipe);
                    }
                    return;
                }
                Ok(n) => {
                    budget = budget.saturating_sub(n);
                    proc.tail.push(&self.scratch[..n]);
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return,
                Err(_) => {
                    if let Some(pipe) = proc.stderr.take() {
                        let _ = self.poller.delete(&pipe);
                    }
                    return;
                }
            }
        }
    }

    fn read_stdout(&mut self, id: u64, mut budget: usize) {
        let max = self.options.max_message_bytes;
        let mut lines = Vec::new();
        let mut fault = None;
        {
            let Some(proc) = self.procs.get_mut(&id) else {
                return;
            };
            while budget > 0 && fault.is_none() {
                let Some(pipe) = proc.stdout.as_mut() else {
                    break;
                };
                let n = match pipe.read(&mut self.scratch) {
                    Ok(0) => {
                        if let Some(pipe) = proc.stdout.take() {
                            let _ = self.poller.delete(&pipe);
                        }
                        proc.eof_deadline = Some(Instant::now() + STDOUT_EOF_GRACE);
                        break;
                    }
                    Ok(n) => n,
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                    Err(e) => {
                        if let Some(pipe) = proc.stdout.take() {
                            let _ = self.poller.delete(&pipe);
                        }
                        fault = Some(format!("reading its output failed: {e}"));
                        break;
                    }
                };
                budget = budget.saturating_sub(n);
                let mut chunk = &self.scratch[..n];
                while let Some(pos) = chunk.iter().position(|b| *b == b'\n') {
                    proc.line.extend_from_slice(&chunk[..pos]);
                    chunk = &chunk[pos + 1..];
                    if proc.line.len() > max {
                        fault = Some(format!("it sent a message larger than {max} bytes"));
                        break;
                    }
                    let line = if proc.line.capacity() > KEEP_LINE_CAPACITY {
                        std::mem::take(&mut proc.line)
                    } else {
                        let line = proc.line.clone();
                        proc.line.clear();
                        line
                    };
                    lines.push(line);
                }
                if fault.is_none() {
                    proc.line.extend_from_slice(chunk);
                    if proc.line.len() > max {
                        fault = Some(format!("it sent a message larger than {max} bytes"));
                    }
                }
            }
        }
        for line in lines {
            self.message(id, &line);
        }
        if let Some(why) = fault {
            self.fault(id, why);
        }
    }

    /// One line from a browser.
    fn message(&mut self, id: u64, line: &[u8]) {
        if line.iter().all(u8::is_ascii_whitespace) {
            return;
        }
        let Ok(Value::Object(mut msg)) = serde_json::from_slice::<Value>(line) else {
            log::debug!("browser: ignoring a line that is not a JSON-RPC object");
            return;
        };
        if let Some(method) = msg.get("method").and_then(Value::as_str) {
            // A request from the browser: handnode offers it nothing but ping.
            if let Some(req_id) = msg.get("id").cloned() {
                let reply = if method == "ping" {
                    json!({"jsonrpc": "2.0", "id": req_id, "result": {}})
                } else {
                    json!({"jsonrpc": "2.0", "id": req_id, "error": {
                        "code": crate::wire::mcp::METHOD_NOT_FOUND,
                        "message": format!("handnode does not serve {method} to its browsers"),
                    }})
                };
                self.write(id, &reply);
            }
            return;
        }
        let Some(rpc_id) = msg.get("id").and_then(Value::as_u64) else {
            return;
        };
        let Some(proc) = self.procs.get_mut(&id) else {
            return;
        };
        // A reply to a cancelled or timed-out call finds nothing and is dropped.
        let Some(waiting) = proc.waiting.remove(&rpc_id) else {
            return;
        };
        let reply: Result<Value, (i64, String)> = match (msg.remove("result"), msg.remove("error"))
        {
            (Some(result), _) => Ok(result),
            (None, Some(error)) => Err((
                error
                    .get("code")
                    .and_then(Value::as_i64)
                    .unwrap_or(SERVER_ERROR),
                error
                    .get("message")
                    .and_then(Value::as_str)
                    .unwrap_or("the browser reported an error without a message")
                    .to_string(),
            )),
            (None, None) => Err((
                SERVER_ERROR,
                "the browser sent a reply with neither result nor error".into(),
            )),
        };
        match waiting {
            Waiting::Initialize => match reply {
                Ok(_) => self.ready(id),
                Err((_, message)) => self.destroy(
                    id,
                    Why::StartFailed(format!("it refused initialize: {message}")),
                ),
            },
            Waiting::List => {
                if let Ok(result) = reply {
                    self.learn(&result);
                }
                if self.procs.get(&id).is_some_and(|p| p.grant.is_none()) {
                    self.destroy(id, Why::ProbeDone);
                }
            }
            Waiting::Call(call) => {
                proc.last_used = Instant::now();
                let output = match reply {
                    Ok(Value::Object(mut result)) => {
                        // Files the answer links in the browser's own directory, which the
                        // grant cannot read, come into the answer instead (§25).
                        let room = self.options.max_message_bytes.saturating_sub(line.len());
                        super::inline::inline_files(&mut result, &proc.dir, room);
                        if let Some(note) = proc.note.take() {
                            prepend_note(&mut result, note);
                        }
                        ToolOutput::Result(Value::Object(result))
                    }
                    Ok(_) => ToolOutput::RpcError {
                        code: SERVER_ERROR,
                        message: "the browser sent a tools/call result that is not an object"
                            .into(),
                    },
                    Err((code, message)) => ToolOutput::RpcError { code, message },
                };
                call.done.complete(output);
            }
        }
    }

    /// `initialize` answered: finish the handshake, learn the tools, send what queued.
    fn ready(&mut self, id: u64) {
        self.write(
            id,
            &json!({"jsonrpc": "2.0", "method": "notifications/initialized"}),
        );
        if let Some(rpc_id) = self.request(id, "tools/list", json!({})) {
            if let Some(proc) = self.procs.get_mut(&id) {
                proc.waiting.insert(rpc_id, Waiting::List);
            }
        }
        let Some(proc) = self.procs.get_mut(&id) else {
            return;
        };
        proc.phase = Phase::Ready;
        proc.last_used = Instant::now();
        let queued: Vec<Box<Call>> = proc.queued.drain(..).collect();
        for call in queued {
            self.dispatch(id, call);
        }
    }

    /// Keep the tool objects a `browser` grant may see from a `tools/list` result.
    fn learn(&mut self, result: &Value) {
        let Some(tools) = result.get("tools").and_then(Value::as_array) else {
            return;
        };
        let offered: Vec<Value> = tools
            .iter()
            .filter(|t| {
                t.get("name")
                    .and_then(Value::as_str)
                    .is_some_and(|n| Profile::Browser.allows_browser_tier(n))
            })
            .cloned()
            .collect();
        let mut learned = self.learned.lock().unwrap_or_else(|e| e.into_inner());
        let first = learned.tools.is_none();
        let changed = learned.tools.as_ref().map(Vec::len) != Some(offered.len());
        if first || changed {
            log::info!(
                "browser tier: --browser-command offers {} of the {} tools a browser grant may use",
                offered.len(),
                crate::profiles::browser_profile_tools().count()
            );
        }
        if learned.tools.as_ref() != Some(&offered) {
            learned.changes += 1;
            learned.tools = Some(offered);
        }
    }
}

/// Put `note` first among a result's content blocks.
fn prepend_note(result: &mut serde_json::Map<String, Value>, note: String) {
    let block = json!({"type": "text", "text": note});
    match result.get_mut("content") {
        Some(Value::Array(content)) => content.insert(0, block),
        _ => {
            result.insert("content".into(), Value::Array(vec![block]));
        }
    }
}

/// A duration as people write it: whole seconds, else milliseconds.
fn human(d: Duration) -> String {
    if d.as_millis() % 1000 == 0 {
        format!("{} s", d.as_secs())
    } else {
        format!("{} ms", d.as_millis())
    }
}

/// An exit status in words.
fn describe(status: ExitStatus) -> String {
    use std::os::unix::process::ExitStatusExt;
    match (status.code(), status.signal()) {
        (Some(code), _) => format!("it exited with status {code}"),
        (None, Some(sig)) => format!("it was killed by signal {sig}"),
        _ => "it exited".into(),
    }
}
