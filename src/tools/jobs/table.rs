//! Long-running jobs (contract §9): the table of every job by scope (a grant, or the
//! owner's `/mcp`), each stream's output window on disk, the job records persisted for
//! crash recovery, the limits (running jobs, disk), retention and clean-up, and the
//! recovery at start that kills what a crashed daemon left running.
//!
//! **Output windows.** Each stream is a *ring file* `<state>/jobs/<scope>/<job>.{out,err}`:
//! a 32-byte header (magic, window, start, total) and then `window` bytes in which the byte
//! at absolute offset `o` lives at `32 + o % window`. The watcher writes pipe bytes straight
//! into it ([`StreamFile::write`], one `pwrite` per chunk plus one for the header), so a
//! job's output never sits in memory, and once more than `window` bytes were written the
//! oldest are overwritten: the retained window is `[max(start, total - window), total)`.
//! `start` is where the file's bytes begin (0, or where a `bash` call that had already
//! dropped output past its cap became a job). A reader checks after its read how far the
//! writer had got, and drops (and reports as skipped) whatever may have been overwritten
//! meanwhile, so a read is never torn. The header is rewritten after every chunk, so after
//! a crash the files still say how much was written.
//!
//! **Files.** Every job file is opened with [`open_state_file`] (`O_NOFOLLOW`, regular files
//! only) and every job dir is checked to be a real directory: a link planted in the state
//! dir is refused, never followed.
//!
//! **Records.** `<job>.json` (0600, in 0700 dirs, replaced by rename) holds the job's
//! pid, the leader's start time (`/proc/<pid>/stat`), the boot id, its state and exit.
//! They are not fsynced: they only have to survive the daemon being killed, which the
//! page cache does; after a power loss the processes are gone anyway.
//!
//! **Disk (§15).** A job's reservation is what its files hold plus a bounded headroom
//! ([`HEADROOM_BYTES`] per stream), never its maximum: a start reserves the headroom, and
//! as the files grow the watcher asks the table for more. The table grants it while the
//! job's scope (a grant, or the owner's `/mcp`) stays within `--job-disk-share` and the box
//! within `--job-disk-bytes`; a stream that gets no more keeps its window at what it holds,
//! dropping its oldest bytes (their blocks punched out of the file, so the disk really is
//! given back) as a full window does. When a job ends its reservation shrinks to what its
//! files hold, and when they are removed it is released. A start that cannot reserve its
//! headroom is refused, saying whose share is full. An ended grant holds nothing: its files
//! go when it ends (a running job's when it has been killed and reported).
//!
//! **Recovery.** At start every record is read. A job recorded as running is killed: its
//! process group gets SIGKILL if its leader is still the process we started (same pid
//! *and* start time), or if a member of the group still carries the job's marker variable
//! ([`MARKER_ENV`]) — a leader killed by SIGPIPE when the daemon died leaves its children
//! behind. Either way a recycled pid is never signalled. The job is then `killed` with
//! reason `daemon_restarted` and stays readable until its retention ends. Files without a
//! valid record are removed.

use std::fs::{self, File, OpenOptions};
use std::io::{self, Read};
use std::os::unix::fs::{DirBuilderExt, FileExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, OnceLock, Weak};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use crossbeam_channel::{RecvTimeoutError, Sender};
use serde_json::Value;

use crate::audit::{Audit, Record};
use crate::base::statedir::open_state_file;
use crate::pool::JobCtl;
use crate::tools::process::{End, JobSink, RunResult, Which};
use crate::tools::shell::MARKER_ENV;

/// The job scope of the owner's `/mcp` (grant scopes are grant ids).
pub const OWNER_SCOPE: &str = "owner";
/// Name of the jobs dir inside the state dir.
pub const DIR_NAME: &str = "jobs";
/// Mode of the jobs dir and every scope dir.
pub const DIR_MODE: u32 = 0o700;
/// Mode of every job file: output may hold whatever the job printed.
pub const FILE_MODE: u32 = 0o600;
/// Bytes of a job's command kept for `bash_list` and its record.
pub const COMMAND_NOTE_BYTES: usize = 1024;
/// Finished jobs kept per scope; past it the oldest is removed before its retention ends,
/// so a pod that starts jobs in a loop cannot grow the table.
pub const DEFAULT_KEPT_PER_SCOPE: usize = 256;
/// Ended scopes remembered without jobs of their own (so a start queued before the end is
/// still refused); past it the oldest are forgotten.
const MAX_ENDED_SCOPES: usize = 1024;
/// Longest shutdown waits for killed jobs to be reported ended (records, audit).
const SHUTDOWN_WAIT: Duration = Duration::from_secs(5);
/// Size of a ring file's header (bytes): magic, window, start, total.
pub const HEADER_BYTES: u64 = crate::config::JOB_HEADER_BYTES;
/// Bytes a running job may hold per stream beyond what its files hold: reserved at its
/// start and restored each time its files grow past the reservation (capped at the
/// window). Asking the table once per this many bytes keeps the watcher's path cheap.
pub const HEADROOM_BYTES: u64 = crate::config::JOB_HEADROOM_BYTES;
const MAGIC: &[u8; 8] = b"hnjob01\n";
/// Version of the record format.
const RECORD_VERSION: u64 = 1;

/// Settings of the job table, from the daemon's config.
#[derive(Clone, Debug)]
pub struct JobConfig {
    /// `<state dir>/jobs`; `None` and every start is refused (unit tests of other tools).
    pub dir: Option<PathBuf>,
    /// Bytes of each stream kept (`--job-output-bytes`).
    pub window: u64,
    /// All job files together (`--job-disk-bytes`).
    pub disk_cap: u64,
    /// All job files of one scope (`--job-disk-share`).
    pub disk_share: u64,
    pub per_scope: usize,
    pub total: usize,
    pub retention: Duration,
    pub kill_grace: Duration,
    pub kept_per_scope: usize,
    /// Record commands in the audit log (`--audit-args`).
    pub audit_args: bool,
}

impl Default for JobConfig {
    fn default() -> Self {
        let limits = crate::config::Limits::default();
        let timing = crate::config::Timing::default();
        JobConfig {
            dir: None,
            window: limits.job_output_bytes,
            disk_cap: limits.job_disk_bytes,
            disk_share: limits.job_disk_share(),
            per_scope: limits.jobs_per_grant,
            total: limits.jobs_total,
            retention: timing.job_retention,
            kill_grace: timing.job_kill_grace,
            kept_per_scope: DEFAULT_KEPT_PER_SCOPE,
            audit_args: false,
        }
    }
}

/// A job's state on the wire.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum State {
    Running,
    Exited,
    Killed,
}

impl State {
    pub fn as_str(self) -> &'static str {
        match self {
            State::Running => "running",
            State::Exited => "exited",
            State::Killed => "killed",
        }
    }

    fn parse(s: &str) -> Option<State> {
        match s {
            "running" => Some(State::Running),
            "exited" => Some(State::Exited),
            "killed" => Some(State::Killed),
            _ => None,
        }
    }
}

/// A fresh job id: 16 lowercase hex digits.
pub fn new_job_id() -> String {
    let mut b = [0u8; 8];
    getrandom::fill(&mut b).expect("the OS random source works");
    b.iter().map(|x| format!("{x:02x}")).collect()
}

pub fn is_job_id(s: &str) -> bool {
    s.len() == 16
        && s.bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
}

fn is_scope(s: &str) -> bool {
    s == OWNER_SCOPE || crate::base::ids::is_id(s)
}

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

/// This boot's id, which tells whether recorded pids can still be ours.
fn boot_id() -> &'static str {
    static BOOT: OnceLock<String> = OnceLock::new();
    BOOT.get_or_init(|| {
        fs::read_to_string("/proc/sys/kernel/random/boot_id")
            .map(|s| s.trim().to_string())
            .unwrap_or_default()
    })
}

/// The first `COMMAND_NOTE_BYTES` of a command, cut at a character boundary.
fn command_note(command: &str) -> String {
    let mut end = command.len().min(COMMAND_NOTE_BYTES);
    while !command.is_char_boundary(end) {
        end -= 1;
    }
    command[..end].to_string()
}

/// Create `dir` 0700 (or narrow an existing one to it). A symbolic link or a non-directory
/// at its name is refused, never followed: the jobs dir and its scope dirs live in the
/// state dir, whose files are opened the same way ([`open_state_file`]).
fn private_dir(dir: &Path) -> io::Result<()> {
    fs::DirBuilder::new()
        .recursive(true)
        .mode(DIR_MODE)
        .create(dir)?;
    let meta = fs::symlink_metadata(dir)?;
    if !meta.is_dir() {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "is a symbolic link or not a directory, and handnode never follows one in its state dir",
        ));
    }
    if meta.permissions().mode() & 0o777 != DIR_MODE {
        fs::set_permissions(dir, fs::Permissions::from_mode(DIR_MODE))?;
    }
    Ok(())
}

/// The bytes of one stream read from a window.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Chunk {
    pub data: Vec<u8>,
    /// Absolute offset of `data[0]`.
    pub from: u64,
    /// Where the next read should start.
    pub next: u64,
    /// Bytes between the offset asked for and `from` that the window no longer holds.
    pub skipped: u64,
    /// Bytes written to the stream so far.
    pub total: u64,
}

/// One stream's ring file (see the module doc). One writer (the watcher), any readers.
#[derive(Debug)]
pub struct StreamFile {
    file: File,
    window: u64,
    /// Absolute offset where the file's bytes begin.
    start: AtomicU64,
    /// Bytes written and readable.
    total: AtomicU64,
    /// Bytes written or being written: what a reader must assume may be overwritten.
    reserved: AtomicU64,
    failed: AtomicBool,
}

impl StreamFile {
    fn create(path: &Path, window: u64, start: u64) -> io::Result<StreamFile> {
        let file = open_state_file(
            OpenOptions::new()
                .read(true)
                .write(true)
                .create_new(true)
                .mode(FILE_MODE),
            path,
        )?;
        let f = StreamFile {
            file,
            window: window.max(1),
            start: AtomicU64::new(start),
            total: AtomicU64::new(start),
            reserved: AtomicU64::new(start),
            failed: AtomicBool::new(false),
        };
        let mut head = [0u8; HEADER_BYTES as usize];
        head[..8].copy_from_slice(MAGIC);
        head[8..16].copy_from_slice(&f.window.to_le_bytes());
        head[16..24].copy_from_slice(&start.to_le_bytes());
        head[24..32].copy_from_slice(&start.to_le_bytes());
        f.file.write_all_at(&head, 0)?;
        Ok(f)
    }

    /// Open a ring file left by an earlier run (read only from now on).
    fn open(path: &Path) -> io::Result<StreamFile> {
        let file = open_state_file(OpenOptions::new().read(true), path)?;
        let mut head = [0u8; HEADER_BYTES as usize];
        file.read_exact_at(&mut head, 0)?;
        let word = |i: usize| u64::from_le_bytes(head[i..i + 8].try_into().expect("8 bytes"));
        let (window, start, total) = (word(8), word(16), word(24));
        let len = file.metadata()?.len();
        if &head[..8] != MAGIC || window == 0 || start > total || len > HEADER_BYTES + window {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                "not a job output file",
            ));
        }
        Ok(StreamFile {
            file,
            window,
            start: AtomicU64::new(start),
            total: AtomicU64::new(total),
            reserved: AtomicU64::new(total),
            failed: AtomicBool::new(false),
        })
    }

    pub fn total(&self) -> u64 {
        self.total.load(Ordering::SeqCst)
    }

    /// The first offset still held when `total` bytes were written.
    fn begin(&self, total: u64) -> u64 {
        self.start
            .load(Ordering::SeqCst)
            .max(total.saturating_sub(self.window))
    }

    /// Bytes this stream holds on disk (its header included).
    pub fn disk_bytes(&self) -> u64 {
        let total = self.total();
        HEADER_BYTES + (total - self.begin(total))
    }

    fn pos(&self, offset: u64) -> u64 {
        HEADER_BYTES + offset % self.window
    }

    /// Bytes of output this stream holds (its header not included).
    pub fn held(&self) -> u64 {
        let total = self.total();
        total - self.begin(total)
    }

    /// Append `bytes` (single writer). A failed write drops everything before it from
    /// the window, so a reader never sees bytes that are not what was written.
    pub fn write(&self, bytes: &[u8]) {
        self.write_within(bytes, u64::MAX);
    }

    /// Append `bytes`, keeping at most `limit` bytes of output after it (the job's share
    /// of the disk, [`Job`]'s `write`): the oldest are dropped first, as by a full window,
    /// and their blocks punched out of the file.
    pub fn write_within(&self, bytes: &[u8], limit: u64) {
        let t = self.total.load(Ordering::SeqCst);
        let len = bytes.len() as u64;
        let limit = limit.min(self.window);
        let end = t + len;
        let old_start = self.start.load(Ordering::SeqCst);
        let old_begin = self.begin(t);
        // Where the retained bytes begin after this write, within `limit`.
        let natural = old_start.max(end.saturating_sub(self.window));
        let new_start = if end - natural > limit {
            end - limit
        } else {
            old_start
        };
        if new_start != old_start {
            // Before any byte moves, so a reader's check after its read sees it.
            self.start.store(new_start, Ordering::SeqCst);
        }
        // Only the last `limit` bytes of a chunk can survive it.
        let keep = len.min(limit) as usize;
        let mut at = t + (len - keep as u64);
        let mut rest = &bytes[bytes.len() - keep..];
        self.reserved.store(t + len, Ordering::SeqCst);
        let mut result = Ok(());
        while !rest.is_empty() && result.is_ok() {
            let room = (self.window - at % self.window) as usize;
            let n = rest.len().min(room);
            result = self.file.write_all_at(&rest[..n], self.pos(at));
            at += n as u64;
            rest = &rest[n..];
        }
        if let Err(e) = result {
            self.start.store(t + len, Ordering::SeqCst);
            if !self.failed.swap(true, Ordering::SeqCst) {
                log::warn!("job output could not be written ({e}); its window restarts");
            }
        }
        let mut head = [0u8; 16];
        head[..8].copy_from_slice(&self.start.load(Ordering::SeqCst).to_le_bytes());
        head[8..].copy_from_slice(&(t + len).to_le_bytes());
        let _ = self.file.write_all_at(&head, 16);
        self.total.store(t + len, Ordering::SeqCst);
        // Give back the blocks of old bytes dropped by the limit whose positions no new
        // byte took (those at or after `end - window`; earlier ones were overwritten).
        let from = old_begin.max(end.saturating_sub(self.window));
        let to = new_start.min(t);
        if from < to {
            self.punch(from, to);
        }
    }

    /// Free the disk blocks of absolute offsets `[from, to)` (less than a window apart).
    fn punch(&self, mut from: u64, to: u64) {
        use rustix::fs::FallocateFlags;
        while from < to {
            let room = (self.window - from % self.window).min(to - from);
            let done = rustix::fs::fallocate(
                &self.file,
                FallocateFlags::PUNCH_HOLE | FallocateFlags::KEEP_SIZE,
                self.pos(from),
                room,
            );
            if let Err(e) = done {
                // The bytes are out of the window all the same; only the blocks stay.
                if !self.failed.swap(true, Ordering::SeqCst) {
                    log::warn!("job output: cannot free dropped bytes' blocks ({e})");
                }
                return;
            }
            from += room;
        }
    }

    /// At most `max` bytes from absolute `offset` (an offset past the end reads nothing).
    pub fn read(&self, offset: u64, max: usize) -> Chunk {
        let total = self.total();
        let begin = self.begin(total);
        let mut from = offset.max(begin);
        let mut skipped = begin.saturating_sub(offset);
        let to = total.min(from.saturating_add(max as u64));
        let mut data = Vec::new();
        if from < to {
            data = vec![0u8; (to - from) as usize];
            let mut at = from;
            let mut filled = 0;
            while at < to {
                let room = (self.window - at % self.window).min(to - at) as usize;
                let part = &mut data[filled..filled + room];
                if let Err(e) = self.file.read_exact_at(part, self.pos(at)) {
                    log::warn!("job output could not be read: {e}");
                    data.truncate(filled);
                    break;
                }
                at += room as u64;
                filled += room;
            }
            // The writer may have wrapped over the front of what was just read.
            let valid = self.begin(self.reserved.load(Ordering::SeqCst));
            if valid > from {
                let cut = (valid.min(from + data.len() as u64) - from) as usize;
                data.drain(..cut);
                skipped += cut as u64;
                from += cut as u64;
            }
        }
        Chunk {
            next: from + data.len() as u64,
            data,
            from,
            skipped,
            total,
        }
    }
}

/// What a job is doing and how it ended.
#[derive(Clone, Debug)]
pub struct Status {
    pub state: State,
    pub pid: Option<i32>,
    /// The leader's start time in clock ticks after boot.
    pub start_ticks: Option<u64>,
    pub exit_code: Option<i32>,
    /// Why it was killed: `cancelled`, `timeout`, `grant_ended`, `daemon_stopped`,
    /// `daemon_restarted`.
    pub reason: Option<String>,
    pub ended_at_ms: Option<u64>,
    pub duration_ms: Option<u64>,
}

/// One job.
#[derive(Debug)]
pub struct Job {
    pub id: String,
    pub scope: String,
    /// The long-poll key ([`JobSink::key`]).
    key: u64,
    /// The first [`COMMAND_NOTE_BYTES`] of the command.
    pub command: String,
    principal: String,
    session: Option<String>,
    pub started_at_ms: u64,
    started: Instant,
    /// Holds the job's process group: cancelling it kills the job.
    pub ctl: Arc<JobCtl>,
    pub out: StreamFile,
    pub err: StreamFile,
    status: Mutex<Status>,
    /// Why whoever stopped the job stopped it; the end is reported as `killed` with it.
    stop_reason: Mutex<Option<&'static str>>,
    /// Bytes held against the disk cap.
    reserved: AtomicU64,
    kill_scheduled: AtomicBool,
    /// Between the state saying ended and the end's audit record being queued: daemon
    /// shutdown waits for it too, or it could close the audit before the record arrives.
    end_pending: AtomicBool,
    /// Set when the job's files are removed; a late write then goes nowhere.
    dir: PathBuf,
    /// When its retention ends (once ended).
    expires: Mutex<Option<Instant>>,
    /// Where it asks for more disk as its files grow.
    table: Weak<JobTable>,
}

impl JobSink for Job {
    fn write(&self, which: Which, bytes: &[u8]) {
        let (stream, other) = match which {
            Which::Stdout => (&self.out, &self.err),
            Which::Stderr => (&self.err, &self.out),
        };
        // What both files would hold after this write, if nothing were dropped.
        let after = (stream.held() + bytes.len() as u64).min(stream.window)
            + other.held()
            + 2 * HEADER_BYTES;
        let reserved = self.reserved.load(Ordering::SeqCst);
        if after > reserved {
            if let Some(table) = self.table.upgrade() {
                // What the write needs and a fresh headroom, never more than two windows.
                let most = 2 * (stream.window + HEADER_BYTES);
                let headroom = HEADROOM_BYTES.min(stream.window);
                let ask = (after + headroom).min(most).saturating_sub(reserved);
                table.grow(self, ask);
            }
        }
        let limit = self
            .reserved
            .load(Ordering::SeqCst)
            .saturating_sub(other.held() + 2 * HEADER_BYTES);
        stream.write_within(bytes, limit);
    }

    fn key(&self) -> u64 {
        self.key
    }
}

impl Job {
    pub fn status(&self) -> Status {
        self.status
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    fn lock_status(&self) -> MutexGuard<'_, Status> {
        self.status.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub fn is_running(&self) -> bool {
        self.lock_status().state == State::Running
    }

    pub fn started(&self) -> Instant {
        self.started
    }

    fn path(&self, ext: &str) -> PathBuf {
        self.dir.join(format!("{}.{ext}", self.id))
    }

    /// Write the record with the current status (under the status lock, so the last
    /// writer always writes the latest state).
    fn persist(&self) {
        #[derive(serde::Serialize)]
        struct Stored<'a> {
            v: u64,
            id: &'a str,
            scope: &'a str,
            command: &'a str,
            principal: &'a str,
            session: Option<&'a str>,
            started_at_ms: u64,
            boot_id: &'static str,
            pid: Option<i32>,
            start_ticks: Option<u64>,
            state: &'static str,
            exit_code: Option<i32>,
            reason: Option<&'a str>,
            ended_at_ms: Option<u64>,
            duration_ms: Option<u64>,
        }
        let st = self.lock_status();
        let record = serde_json::to_string(&Stored {
            v: RECORD_VERSION,
            id: &self.id,
            scope: &self.scope,
            command: &self.command,
            principal: &self.principal,
            session: self.session.as_deref(),
            started_at_ms: self.started_at_ms,
            boot_id: boot_id(),
            pid: st.pid,
            start_ticks: st.start_ticks,
            state: st.state.as_str(),
            exit_code: st.exit_code,
            reason: st.reason.as_deref(),
            ended_at_ms: st.ended_at_ms,
            duration_ms: st.duration_ms,
        })
        .expect("a job record always serializes");
        let tmp = self.path("json.tmp");
        let written = open_state_file(
            OpenOptions::new()
                .write(true)
                .create(true)
                .truncate(true)
                .mode(FILE_MODE),
            &tmp,
        )
        .and_then(|f| f.write_all_at(record.as_bytes(), 0))
        .and_then(|_| fs::rename(&tmp, self.path("json")));
        if let Err(e) = written {
            log::warn!("job {}: could not write its record: {e}", self.id);
        }
    }

    fn remove_files(&self) {
        for ext in ["out", "err", "json", "json.tmp"] {
            let _ = fs::remove_file(self.path(ext));
        }
    }

    fn disk_bytes(&self) -> u64 {
        self.out.disk_bytes() + self.err.disk_bytes()
    }

    /// Whether a long-poll from these offsets can be answered now.
    pub fn has_news(&self, stdout_offset: u64, stderr_offset: u64) -> bool {
        self.out.total() > stdout_offset || self.err.total() > stderr_offset || !self.is_running()
    }
}

/// What a new job is asked to be.
#[derive(Clone, Debug)]
pub struct Admit {
    /// A pre-allocated id (a `bash` call carries it in its marker variable from the
    /// start), or `None` for a new one.
    pub id: Option<String>,
    pub scope: String,
    pub principal: String,
    pub session: Option<String>,
    pub command: String,
    /// Where each stream's bytes begin (0, or a `bash` call's total so far when it had
    /// already dropped output past its cap).
    pub stdout_start: u64,
    pub stderr_start: u64,
}

/// How `bash_cancel` stops a job.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stop {
    /// SIGTERM now, SIGKILL after the grace if the group still lives.
    Term,
    Kill,
}

/// Where job events are reported.
struct Hooks {
    audit: Audit,
    metrics: Arc<dyn JobMeter>,
}

/// The job counters of `/metrics` (`crate::metrics::Metrics` implements it; a trait here so
/// that the job table stays below `metrics`, which reads the tool registry).
pub trait JobMeter: Send + Sync {
    /// A job started (`bash_start`, or a `bash` call past its inline limit).
    fn job_started(&self);
    /// A job this process started ended in `state` (`exited` or `killed`).
    fn job_ended(&self, state: &str);
}

enum Chore {
    ExpireJob(Weak<Job>),
    Kill(Weak<Job>),
}

#[derive(Default)]
struct Inner {
    jobs: Vec<Arc<Job>>,
    /// Scopes whose grant ended: no job may start there any more.
    ended_scopes: Vec<String>,
    reserved: u64,
    shutting_down: bool,
}

/// Every job of this daemon.
pub struct JobTable {
    cfg: JobConfig,
    inner: Mutex<Inner>,
    /// Signalled whenever a job ends (shutdown waits on it).
    ended: Condvar,
    next_key: AtomicU64,
    hooks: OnceLock<Hooks>,
    janitor: OnceLock<Sender<(Instant, Chore)>>,
    me: Weak<JobTable>,
}

impl std::fmt::Debug for JobTable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("JobTable")
            .field("dir", &self.cfg.dir)
            .finish_non_exhaustive()
    }
}

impl JobTable {
    pub fn new(cfg: JobConfig) -> Arc<JobTable> {
        Arc::new_cyclic(|me| JobTable {
            cfg,
            inner: Mutex::new(Inner::default()),
            ended: Condvar::new(),
            next_key: AtomicU64::new(1),
            hooks: OnceLock::new(),
            janitor: OnceLock::new(),
            me: me.clone(),
        })
    }

    pub fn config(&self) -> &JobConfig {
        &self.cfg
    }

    /// Report job starts and ends to the audit log and `/metrics` from now on.
    pub fn report_to(&self, audit: Audit, metrics: Arc<dyn JobMeter>) {
        let _ = self.hooks.set(Hooks { audit, metrics });
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn scope_dir(&self, scope: &str) -> Option<PathBuf> {
        self.cfg.dir.as_ref().map(|d| d.join(scope))
    }

    /// Run `chore` at `at` on the janitor thread (started on first use).
    fn schedule(&self, at: Instant, chore: Chore) {
        let tx = self.janitor.get_or_init(|| {
            let (tx, rx) = crossbeam_channel::unbounded::<(Instant, Chore)>();
            let table = self.me.clone();
            let started = std::thread::Builder::new()
                .name("job-janitor".into())
                .spawn(move || {
                    let mut due: Vec<(Instant, Chore)> = Vec::new();
                    loop {
                        let now = Instant::now();
                        let next = due.iter().map(|(at, _)| *at).min();
                        let got = match next {
                            Some(at) => rx.recv_timeout(at.saturating_duration_since(now)),
                            None => rx.recv().map_err(|_| RecvTimeoutError::Disconnected),
                        };
                        match got {
                            Ok(item) => due.push(item),
                            Err(RecvTimeoutError::Timeout) => {}
                            Err(RecvTimeoutError::Disconnected) => return,
                        }
                        let now = Instant::now();
                        let (ready, later): (Vec<_>, Vec<_>) =
                            due.into_iter().partition(|(at, _)| *at <= now);
                        due = later;
                        let Some(table) = table.upgrade() else { return };
                        for (_, chore) in ready {
                            table.run_chore(chore);
                        }
                    }
                });
            if let Err(e) = started {
                log::error!("cannot start the job janitor thread: {e}; finished jobs stay");
            }
            tx
        });
        let _ = tx.send((at, chore));
    }

    fn run_chore(&self, chore: Chore) {
        match chore {
            Chore::ExpireJob(job) => {
                if let Some(job) = job.upgrade() {
                    let due = job
                        .expires
                        .lock()
                        .unwrap_or_else(|e| e.into_inner())
                        .is_some_and(|at| at <= Instant::now());
                    if due {
                        self.remove(&job);
                    }
                }
            }
            Chore::Kill(job) => {
                if let Some(job) = job.upgrade() {
                    // Groups are unregistered when their leader is reaped: an ended job
                    // is not signalled.
                    job.ctl.cancel();
                }
            }
        }
    }

    /// Reserve and create a new job (its files and table entry); the caller spawns it and
    /// then calls [`JobTable::spawned`], or [`JobTable::unadmit`] if that failed. The
    /// error is a tool error's text: why it was refused and what to do.
    pub fn admit(&self, req: Admit) -> Result<Arc<Job>, String> {
        let Some(root) = &self.cfg.dir else {
            return Err("jobs are not available: handnode has no state dir".into());
        };
        let id = req.id.clone().unwrap_or_else(new_job_id);
        let mut inner = self.lock();
        if inner.shutting_down {
            return Err("handnode is shutting down; no job can start".into());
        }
        if inner.ended_scopes.contains(&req.scope) {
            return Err("this grant has ended; no job can start under it".into());
        }
        let running = |scope: Option<&str>| {
            inner
                .jobs
                .iter()
                .filter(|j| scope.is_none_or(|s| j.scope == s) && j.is_running())
                .count()
        };
        if running(Some(&req.scope)) >= self.cfg.per_scope {
            let under = if req.scope == OWNER_SCOPE {
                "on the owner's /mcp"
            } else {
                "under this grant"
            };
            return Err(format!(
                "too many running jobs ({}) {under}; cancel one or wait",
                self.cfg.per_scope
            ));
        }
        if running(None) >= self.cfg.total {
            return Err(format!(
                "too many running jobs ({}) on this box; cancel one or wait",
                self.cfg.total
            ));
        }
        let need = self.start_reservation();
        let mine = scope_reserved(&inner, &req.scope);
        if mine + need > self.cfg.disk_share {
            let whose = if req.scope == OWNER_SCOPE {
                "the owner's /mcp"
            } else {
                "this grant"
            };
            return Err(format!(
                "cannot start a job: {whose}'s share of the disk for job output is used up: \
                 its jobs hold or reserve {mine} of the {} bytes one grant may use \
                 (--job-disk-share), and a new job needs {need}. Cancel a running job \
                 (bash_cancel), or wait for a finished one's output to expire ({} s after it \
                 ended).",
                self.cfg.disk_share,
                self.cfg.retention.as_secs()
            ));
        }
        if inner.reserved + need > self.cfg.disk_cap {
            return Err(format!(
                "cannot start a job: its output needs {need} bytes of disk to begin with, but \
                 {} of the {} bytes allowed for all job output on this box (--job-disk-bytes) \
                 are in use or reserved. Cancel a running job (bash_cancel), wait for a \
                 finished one's output to expire ({} s after it ended), or ask the box's \
                 owner to raise --job-disk-bytes.",
                inner.reserved,
                self.cfg.disk_cap,
                self.cfg.retention.as_secs()
            ));
        }
        let dir = root.join(&req.scope);
        let files = private_dir(root)
            .and_then(|_| private_dir(&dir))
            .and_then(|_| {
                let out = StreamFile::create(
                    &dir.join(format!("{id}.out")),
                    self.cfg.window,
                    req.stdout_start,
                )?;
                let err = StreamFile::create(
                    &dir.join(format!("{id}.err")),
                    self.cfg.window,
                    req.stderr_start,
                );
                match err {
                    Ok(err) => Ok((out, err)),
                    Err(e) => {
                        let _ = fs::remove_file(dir.join(format!("{id}.out")));
                        Err(e)
                    }
                }
            });
        let (out, err) = files.map_err(|e| {
            format!(
                "cannot start a job: its output files in {} could not be created: {e}",
                dir.display()
            )
        })?;
        let job = Arc::new(Job {
            id,
            scope: req.scope,
            key: self.next_key.fetch_add(1, Ordering::SeqCst),
            command: command_note(&req.command),
            principal: req.principal,
            session: req.session,
            started_at_ms: now_ms(),
            started: Instant::now(),
            ctl: JobCtl::new(),
            out,
            err,
            status: Mutex::new(Status {
                state: State::Running,
                pid: None,
                start_ticks: None,
                exit_code: None,
                reason: None,
                ended_at_ms: None,
                duration_ms: None,
            }),
            stop_reason: Mutex::new(None),
            reserved: AtomicU64::new(need),
            kill_scheduled: AtomicBool::new(false),
            end_pending: AtomicBool::new(false),
            dir,
            expires: Mutex::new(None),
            table: self.me.clone(),
        });
        inner.reserved += need;
        inner.jobs.push(Arc::clone(&job));
        Ok(job)
    }

    /// What a job reserves when it starts: two headers and a headroom per stream.
    fn start_reservation(&self) -> u64 {
        2 * (HEADER_BYTES + HEADROOM_BYTES.min(self.cfg.window))
    }

    /// `job`'s files are about to grow past its reservation: grant up to `ask` more bytes
    /// while its scope stays within its share and the box within the cap. A job no longer
    /// in the table (removed) gets nothing.
    fn grow(&self, job: &Job, ask: u64) {
        let mut inner = self.lock();
        if !inner.jobs.iter().any(|j| std::ptr::eq(&**j, job)) {
            return;
        }
        let mine = scope_reserved(&inner, &job.scope);
        let room = self
            .cfg
            .disk_share
            .saturating_sub(mine)
            .min(self.cfg.disk_cap.saturating_sub(inner.reserved));
        let granted = ask.min(room);
        job.reserved.fetch_add(granted, Ordering::SeqCst);
        inner.reserved += granted;
    }

    /// Bytes held or reserved by `scope`'s jobs.
    pub fn scope_reserved_bytes(&self, scope: &str) -> u64 {
        scope_reserved(&self.lock(), scope)
    }

    /// The job's process runs: record its pid and start time, audit the start.
    pub fn spawned(&self, job: &Job, pid: i32, start_ticks: Option<u64>) {
        {
            let mut st = job.lock_status();
            st.pid = Some(pid);
            st.start_ticks = start_ticks;
        }
        job.persist();
        if let Some(hooks) = self.hooks.get() {
            hooks.metrics.job_started();
            hooks.audit.record(Record::Job {
                ended: false,
                grant_id: (job.scope != OWNER_SCOPE).then(|| job.scope.clone()),
                principal: job.principal.clone(),
                session: job.session.clone(),
                job_id: job.id.clone(),
                command: self.cfg.audit_args.then(|| job.command.clone()),
                state: None,
                reason: None,
                exit_code: None,
                duration_ms: None,
                bytes: None,
            });
        }
        log::info!("job {} started in scope {} (pid {pid})", job.id, job.scope);
    }

    /// The job could not be spawned: forget it and its files.
    pub fn unadmit(&self, job: &Arc<Job>) {
        {
            let mut st = job.lock_status();
            st.state = State::Killed;
        }
        self.remove(job);
    }

    /// The watcher's end callback for `job`.
    pub fn on_exit(&self, job: Arc<Job>) -> Box<dyn FnOnce(RunResult) + Send> {
        let table = self.me.clone();
        Box::new(move |run| {
            if let Some(table) = table.upgrade() {
                table.finished(&job, &run);
            }
        })
    }

    fn finished(&self, job: &Arc<Job>, run: &RunResult) {
        let stop = *job.stop_reason.lock().unwrap_or_else(|e| e.into_inner());
        let (state, reason) = match (stop, run.end) {
            (Some(why), _) => (State::Killed, Some(why)),
            (None, End::Exited) => (State::Exited, None),
            (None, End::TimedOut) => (State::Killed, Some("timeout")),
            (None, End::Cancelled) => (State::Killed, Some("cancelled")),
            (None, End::Aborted) => (State::Killed, Some("daemon_stopped")),
        };
        let duration_ms = job.started.elapsed().as_millis() as u64;
        {
            let mut st = job.lock_status();
            if st.state != State::Running {
                return;
            }
            job.end_pending.store(true, Ordering::SeqCst);
            st.state = state;
            st.exit_code = Some(run.exit_code);
            st.reason = reason.map(str::to_string);
            st.ended_at_ms = Some(now_ms());
            st.duration_ms = Some(duration_ms);
        }
        job.persist();
        let expires = Instant::now() + self.cfg.retention;
        *job.expires.lock().unwrap_or_else(|e| e.into_inner()) = Some(expires);
        let oldest = {
            let mut inner = self.lock();
            let now_held = job.disk_bytes();
            let before = job.reserved.swap(now_held, Ordering::SeqCst);
            inner.reserved = inner.reserved.saturating_sub(before) + now_held;
            let ended: Vec<&Arc<Job>> = inner
                .jobs
                .iter()
                .filter(|j| j.scope == job.scope && !j.is_running())
                .collect();
            (ended.len() > self.cfg.kept_per_scope).then(|| Arc::clone(ended[0]))
        };
        if let Some(oldest) = oldest {
            self.remove(&oldest);
        }
        if !self.scope_ended(&job.scope) {
            self.schedule(expires, Chore::ExpireJob(Arc::downgrade(job)));
        }
        if let Some(hooks) = self.hooks.get() {
            hooks.metrics.job_ended(state.as_str());
        }
        self.audit_ended(job, state, reason, run.exit_code, duration_ms);
        log::info!(
            "job {} ended: {} (exit {}{})",
            job.id,
            state.as_str(),
            run.exit_code,
            reason.map(|r| format!(", {r}")).unwrap_or_default()
        );
        self.report_end(job);
        // A job of an ended grant goes as soon as its end is reported (§15): the grant
        // holds nothing. Checked last, so an end that raced the grant's end is covered
        // by one of the two.
        if self.scope_ended(&job.scope) {
            self.remove(job);
            self.remove_scope_dir(&job.scope);
        }
    }

    fn scope_ended(&self, scope: &str) -> bool {
        self.lock().ended_scopes.iter().any(|s| s == scope)
    }

    /// Remove an ended scope's dir once no job of it is left in the table.
    fn remove_scope_dir(&self, scope: &str) {
        let empty = !self.lock().jobs.iter().any(|j| j.scope == scope);
        if let (true, Some(dir)) = (empty, self.scope_dir(scope)) {
            // Only empty: a job still being reported keeps its files until it is removed.
            let _ = fs::remove_dir(&dir);
        }
    }

    /// Last: shutdown waits on this, and the audit record must be queued by then. Under
    /// the lock, so a shutdown between its check and its wait cannot miss it.
    fn report_end(&self, job: &Job) {
        let _inner = self.lock();
        job.end_pending.store(false, Ordering::SeqCst);
        self.ended.notify_all();
    }

    /// Drop a job from the table and its files from disk.
    fn remove(&self, job: &Arc<Job>) {
        let mut inner = self.lock();
        let before = inner.jobs.len();
        inner.jobs.retain(|j| !Arc::ptr_eq(j, job));
        if inner.jobs.len() != before {
            let held = job.reserved.swap(0, Ordering::SeqCst);
            inner.reserved = inner.reserved.saturating_sub(held);
        }
        drop(inner);
        job.remove_files();
    }

    /// The job `id` in `scope`; another scope's job is not found, exactly like an unknown
    /// one.
    pub fn find(&self, scope: &str, id: &str) -> Option<Arc<Job>> {
        self.lock()
            .jobs
            .iter()
            .find(|j| j.id == id && j.scope == scope)
            .cloned()
    }

    /// Every job of `scope`, oldest first.
    pub fn list(&self, scope: &str) -> Vec<Arc<Job>> {
        self.lock()
            .jobs
            .iter()
            .filter(|j| j.scope == scope)
            .cloned()
            .collect()
    }

    /// Running jobs of `scope` (the grant JSON's `jobs`).
    pub fn running_in(&self, scope: &str) -> usize {
        self.lock()
            .jobs
            .iter()
            .filter(|j| j.scope == scope && j.is_running())
            .count()
    }

    /// Bytes held or reserved against the disk cap.
    pub fn reserved_bytes(&self) -> u64 {
        self.lock().reserved
    }

    /// `bash_cancel`: stop a running job. `false` if it had already ended.
    pub fn stop(&self, job: &Arc<Job>, how: Stop) -> bool {
        if !job.is_running() {
            return false;
        }
        job.stop_reason
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get_or_insert("cancelled");
        match how {
            Stop::Kill => job.ctl.cancel(),
            Stop::Term => {
                job.ctl.signal(rustix::process::Signal::TERM);
                if !job.kill_scheduled.swap(true, Ordering::SeqCst) {
                    self.schedule(
                        Instant::now() + self.cfg.kill_grace,
                        Chore::Kill(Arc::downgrade(job)),
                    );
                }
            }
        }
        true
    }

    /// A grant ended: kill every job it runs, refuse new ones, and remove its files: a
    /// finished job's now, a running one's as soon as its end is reported.
    pub fn end_scope(&self, scope: &str) {
        let (running, done) = {
            let mut inner = self.lock();
            if !inner.ended_scopes.iter().any(|s| s == scope) {
                inner.ended_scopes.push(scope.to_string());
            }
            // A grant that never ran a job leaves only this marker (dropped oldest first).
            let over = inner.ended_scopes.len().saturating_sub(MAX_ENDED_SCOPES);
            inner.ended_scopes.drain(..over);
            let mine: Vec<&Arc<Job>> = inner.jobs.iter().filter(|j| j.scope == scope).collect();
            let (running, done): (Vec<Arc<Job>>, Vec<Arc<Job>>) =
                mine.into_iter().cloned().partition(|j| j.is_running());
            (running, done)
        };
        for job in &running {
            self.kill(job, "grant_ended");
        }
        if !running.is_empty() {
            log::info!("grant {scope} ended: killed its {} job(s)", running.len());
        }
        for job in &done {
            self.remove(job);
        }
        self.remove_scope_dir(scope);
    }

    fn kill(&self, job: &Job, why: &'static str) {
        job.stop_reason
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get_or_insert(why);
        job.ctl.cancel();
    }

    /// The grants that resumed at start; the scopes of any other grant are ended (their
    /// files go now).
    pub fn retain_scopes(&self, live: &[String]) {
        let scopes: Vec<String> = {
            let inner = self.lock();
            let mut s: Vec<String> = inner
                .jobs
                .iter()
                .map(|j| j.scope.clone())
                .filter(|s| s != OWNER_SCOPE && !live.contains(s))
                .collect();
            s.sort();
            s.dedup();
            s
        };
        for scope in scopes {
            self.end_scope(&scope);
        }
    }

    /// Daemon shutdown: refuse new jobs, kill every running one, and wait (bounded) until
    /// each is reported ended, so its record and audit line are written.
    pub fn shutdown(&self) {
        let jobs: Vec<Arc<Job>> = {
            let mut inner = self.lock();
            inner.shutting_down = true;
            inner.jobs.clone()
        };
        for job in jobs.iter().filter(|j| j.is_running()) {
            self.kill(job, "daemon_stopped");
        }
        // The state first: `finished` sets `end_pending` before it changes the state (under
        // the status lock), so a job seen ended here is seen pending until it is reported.
        let unreported = |j: &Arc<Job>| {
            let started = {
                let st = j.lock_status();
                st.state == State::Running && st.pid.is_some()
            };
            started || j.end_pending.load(Ordering::SeqCst)
        };
        let deadline = Instant::now() + SHUTDOWN_WAIT;
        let mut inner = self.lock();
        while jobs.iter().any(unreported) {
            let now = Instant::now();
            if now >= deadline {
                log::warn!("shutdown: some jobs were not reported ended in time");
                break;
            }
            inner = self
                .ended
                .wait_timeout(inner, deadline - now)
                .unwrap_or_else(|e| e.into_inner())
                .0;
        }
    }

    /// The `job_ended` audit record of `job`.
    fn audit_ended(
        &self,
        job: &Job,
        state: State,
        reason: Option<&str>,
        exit_code: i32,
        duration_ms: u64,
    ) {
        if let Some(hooks) = self.hooks.get() {
            hooks.audit.record(Record::Job {
                ended: true,
                grant_id: (job.scope != OWNER_SCOPE).then(|| job.scope.clone()),
                principal: job.principal.clone(),
                session: job.session.clone(),
                job_id: job.id.clone(),
                command: None,
                state: Some(state.as_str()),
                reason: reason.map(str::to_string),
                exit_code: Some(exit_code),
                duration_ms: Some(duration_ms),
                bytes: Some(job.out.total() + job.err.total()),
            });
        }
    }

    /// At start, before any grant resumes: load what an earlier run left (see the module
    /// doc), kill what it left running, remove what is not a valid job. Returns how many
    /// jobs were loaded.
    pub fn recover(&self) -> io::Result<usize> {
        let Some(root) = self.cfg.dir.clone() else {
            return Ok(0);
        };
        private_dir(&root)?;
        let mut loaded = Vec::new();
        let mut running = Vec::new();
        for scope_entry in fs::read_dir(&root)?.flatten() {
            let name = scope_entry.file_name().to_string_lossy().to_string();
            let path = scope_entry.path();
            let is_dir = scope_entry.file_type().is_ok_and(|t| t.is_dir());
            if !is_scope(&name) || !is_dir {
                log::warn!("jobs: removing {} (not a job scope)", path.display());
                let _ = fs::remove_dir_all(&path).or_else(|_| fs::remove_file(&path));
                continue;
            }
            let _ = fs::set_permissions(&path, fs::Permissions::from_mode(DIR_MODE));
            let mut ids = std::collections::BTreeSet::new();
            let Ok(files) = fs::read_dir(&path) else {
                log::warn!(
                    "jobs: cannot read {}; its jobs are not recovered",
                    path.display()
                );
                continue;
            };
            for file in files.flatten() {
                let fname = file.file_name().to_string_lossy().to_string();
                let (id, ext) = fname.split_once('.').unwrap_or((&fname, ""));
                if is_job_id(id) && matches!(ext, "out" | "err" | "json") {
                    ids.insert(id.to_string());
                } else {
                    let _ = fs::remove_file(file.path());
                }
            }
            for id in ids {
                match self.load_one(&path, &name, &id) {
                    Some((job, recorded_running)) => {
                        if recorded_running {
                            running.push(Arc::clone(&job));
                        }
                        loaded.push(job);
                    }
                    None => {
                        log::warn!("jobs: removing the files of job {id}: no valid record");
                        for ext in ["out", "err", "json"] {
                            let _ = fs::remove_file(path.join(format!("{id}.{ext}")));
                        }
                    }
                }
            }
        }
        kill_leftovers(&running);
        let now = now_ms();
        let mut kept = 0;
        for job in loaded {
            let mut st = job.lock_status();
            let mut restarted = None;
            if st.state == State::Running {
                st.state = State::Killed;
                st.reason = Some("daemon_restarted".into());
                st.ended_at_ms = Some(now);
                st.duration_ms = Some(now.saturating_sub(job.started_at_ms));
                if st.exit_code.is_none() {
                    st.exit_code = Some(crate::tools::process::KILLED_EXIT_CODE);
                }
                log::warn!(
                    "job {} was running when handnode stopped: killed (daemon_restarted)",
                    job.id
                );
                restarted = Some((
                    st.exit_code.unwrap_or_default(),
                    st.duration_ms.unwrap_or_default(),
                ));
            }
            let age = Duration::from_millis(now.saturating_sub(st.ended_at_ms.unwrap_or(now)));
            drop(st);
            // The run that started it could not say it ended; this one does.
            if let Some((exit_code, duration_ms)) = restarted {
                let reason = Some("daemon_restarted");
                self.audit_ended(&job, State::Killed, reason, exit_code, duration_ms);
            }
            if age >= self.cfg.retention {
                job.remove_files();
                continue;
            }
            job.persist();
            let expires = Instant::now() + (self.cfg.retention - age);
            *job.expires.lock().unwrap_or_else(|e| e.into_inner()) = Some(expires);
            let held = job.disk_bytes();
            job.reserved.store(held, Ordering::SeqCst);
            {
                let mut inner = self.lock();
                inner.reserved += held;
                inner.jobs.push(Arc::clone(&job));
            }
            self.schedule(expires, Chore::ExpireJob(Arc::downgrade(&job)));
            kept += 1;
        }
        self.lock().jobs.sort_by_key(|j| j.started_at_ms);
        Ok(kept)
    }

    /// One job's record and files, or `None` if they are not a valid job. The bool says
    /// whether the record says it was running.
    fn load_one(&self, dir: &Path, scope: &str, id: &str) -> Option<(Arc<Job>, bool)> {
        let mut text = Vec::new();
        open_state_file(
            OpenOptions::new().read(true),
            &dir.join(format!("{id}.json")),
        )
        .and_then(|mut f| f.read_to_end(&mut text))
        .ok()?;
        let v: Value = serde_json::from_slice(&text).ok()?;
        if v["v"] != RECORD_VERSION || v["id"] != id || v["scope"] != scope {
            return None;
        }
        let state = State::parse(v["state"].as_str()?)?;
        let opt_u64 = |k: &str| v[k].as_u64();
        let out = StreamFile::open(&dir.join(format!("{id}.out"))).ok()?;
        let err = StreamFile::open(&dir.join(format!("{id}.err"))).ok()?;
        let running = state == State::Running;
        let status = Status {
            state,
            pid: v["pid"]
                .as_i64()
                .and_then(|p| i32::try_from(p).ok())
                .filter(|p| *p > 1),
            start_ticks: opt_u64("start_ticks"),
            exit_code: v["exit_code"].as_i64().and_then(|c| i32::try_from(c).ok()),
            reason: v["reason"].as_str().map(str::to_string),
            ended_at_ms: opt_u64("ended_at_ms"),
            duration_ms: opt_u64("duration_ms"),
        };
        let boot_matches = v["boot_id"].as_str() == Some(boot_id());
        let job = Arc::new(Job {
            id: id.to_string(),
            scope: scope.to_string(),
            key: self.next_key.fetch_add(1, Ordering::SeqCst),
            command: command_note(v["command"].as_str().unwrap_or("")),
            principal: v["principal"].as_str().unwrap_or("").to_string(),
            session: v["session"].as_str().map(str::to_string),
            started_at_ms: opt_u64("started_at_ms").unwrap_or(0),
            started: Instant::now(),
            ctl: JobCtl::new(),
            out,
            err,
            status: Mutex::new(Status {
                // A different boot: nothing it started can still run.
                pid: status.pid.filter(|_| boot_matches),
                ..status
            }),
            stop_reason: Mutex::new(None),
            reserved: AtomicU64::new(0),
            kill_scheduled: AtomicBool::new(false),
            end_pending: AtomicBool::new(false),
            dir: dir.to_path_buf(),
            expires: Mutex::new(None),
            table: self.me.clone(),
        });
        Some((job, running))
    }
}

/// Bytes held or reserved by `scope`'s jobs.
fn scope_reserved(inner: &Inner, scope: &str) -> u64 {
    inner
        .jobs
        .iter()
        .filter(|j| j.scope == scope)
        .map(|j| j.reserved.load(Ordering::SeqCst))
        .sum()
}

/// Kill the process groups of jobs a crashed daemon left running (see the module doc):
/// a group is ours if its leader is the process we started (pid and start time match),
/// or if a member carries the job's marker. One scan of `/proc` serves every job.
fn kill_leftovers(jobs: &[Arc<Job>]) {
    let targets: Vec<(i32, Option<u64>, String)> = jobs
        .iter()
        .filter_map(|j| {
            let st = j.lock_status();
            Some((st.pid?, st.start_ticks, j.id.clone()))
        })
        .collect();
    if targets.is_empty() {
        return;
    }
    let mut verified: Vec<i32> = Vec::new();
    let Ok(procs) = fs::read_dir("/proc") else {
        return;
    };
    for entry in procs.flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|n| n.parse::<i32>().ok())
        else {
            continue;
        };
        let Ok(stat) = fs::read_to_string(format!("/proc/{pid}/stat")) else {
            continue;
        };
        let pgrp = crate::tools::process::stat_field(&stat, 5).map(|g| g as i32);
        let start = crate::tools::process::stat_field(&stat, 22);
        for (leader, ticks, id) in &targets {
            if verified.contains(leader) {
                continue;
            }
            let is_leader = pid == *leader && ticks.is_some() && start == *ticks;
            let is_member = pgrp == Some(*leader) && start >= *ticks && carries_marker(pid, id);
            if is_leader || is_member {
                verified.push(*leader);
            }
        }
    }
    for pgid in verified {
        if let Some(pgid) = rustix::process::Pid::from_raw(pgid) {
            log::warn!("jobs: killing process group {pgid:?} left running by an earlier handnode");
            let _ = rustix::process::kill_process_group(pgid, rustix::process::Signal::KILL);
        }
    }
}

/// Whether process `pid`'s environment holds `MARKER_ENV=<id>`.
fn carries_marker(pid: i32, id: &str) -> bool {
    let Ok(env) = fs::read(format!("/proc/{pid}/environ")) else {
        return false;
    };
    let want = format!("{MARKER_ENV}={id}");
    env.split(|b| *b == 0).any(|var| var == want.as_bytes())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::base::testutil::TempDir;
    use crate::tools::testutil::WATCHDOG;

    fn ring(dir: &TempDir, window: u64, start: u64) -> StreamFile {
        StreamFile::create(&dir.path("s.out"), window, start).unwrap()
    }

    #[test]
    fn a_window_keeps_the_newest_bytes_at_absolute_offsets() {
        let tmp = TempDir::new("ring");
        let f = ring(&tmp, 10, 0);
        f.write(b"0123456789abcdef");
        assert_eq!(f.total(), 16);
        let c = f.read(0, 100);
        assert_eq!(c.data, b"6789abcdef");
        assert_eq!((c.from, c.next, c.skipped, c.total), (6, 16, 6, 16));
        // An offset inside the window, a small max, and a read wrapping the ring end.
        let c = f.read(8, 3);
        assert_eq!((c.data.as_slice(), c.from, c.next), (&b"89a"[..], 8, 11));
        f.write(b"XYZ");
        let c = f.read(10, 100);
        assert_eq!(c.data, b"abcdefXYZ");
        assert_eq!((c.skipped, c.next, c.total), (0, 19, 19));
        // Past the end: nothing, and the offset stays where it was asked.
        let c = f.read(25, 100);
        assert_eq!((c.data.len(), c.next, c.skipped), (0, 25, 0));
        // A chunk larger than the window keeps only its tail.
        f.write(&[b'q'; 25]);
        let c = f.read(0, 100);
        assert_eq!((c.data, c.from, c.skipped), (vec![b'q'; 10], 34, 34));
        assert_eq!(
            std::fs::metadata(tmp.path("s.out")).unwrap().len(),
            HEADER_BYTES + 10,
            "the file never grows past its window"
        );
    }

    #[test]
    fn a_window_that_starts_late_reports_the_bytes_before_it_skipped() {
        let tmp = TempDir::new("ring");
        let f = ring(&tmp, 100, 40);
        f.write(b"tail");
        let c = f.read(0, 100);
        assert_eq!(
            (c.data.as_slice(), c.from, c.skipped, c.next),
            (&b"tail"[..], 40, 40, 44)
        );
        assert_eq!(f.disk_bytes(), HEADER_BYTES + 4);
    }

    #[test]
    fn a_ring_file_reopens_with_its_totals() {
        let tmp = TempDir::new("ring");
        {
            let f = ring(&tmp, 8, 0);
            f.write(b"abcdefghijkl");
        }
        let f = StreamFile::open(&tmp.path("s.out")).unwrap();
        assert_eq!(f.total(), 12);
        assert_eq!(f.read(0, 100).data, b"efghijkl");
        std::fs::write(tmp.path("bad.out"), b"not a ring file at all, no magic").unwrap();
        assert!(StreamFile::open(&tmp.path("bad.out")).is_err());
    }

    #[test]
    fn reads_racing_a_wrapping_writer_are_never_torn() {
        // Every byte at absolute offset o is (o % 251): any byte a reader returns must
        // match its offset, however the writer laps the ring meanwhile.
        let tmp = TempDir::new("ring");
        let f = Arc::new(ring(&tmp, 4096, 0));
        let writer = {
            let f = Arc::clone(&f);
            std::thread::spawn(move || {
                let mut o: u64 = 0;
                for _ in 0..2000 {
                    let chunk: Vec<u8> = (o..o + 1500).map(|x| (x % 251) as u8).collect();
                    f.write(&chunk);
                    o += 1500;
                }
            })
        };
        while !writer.is_finished() {
            let c = f.read(f.total().saturating_sub(3000), 4096);
            for (i, b) in c.data.iter().enumerate() {
                assert_eq!(
                    *b as u64,
                    (c.from + i as u64) % 251,
                    "torn read at {}",
                    c.from
                );
            }
        }
        writer.join().unwrap();
    }

    fn table(tmp: &TempDir, tweak: impl FnOnce(&mut JobConfig)) -> Arc<JobTable> {
        let mut cfg = JobConfig {
            dir: Some(tmp.path("jobs")),
            window: 1000,
            disk_cap: 100_000,
            ..JobConfig::default()
        };
        tweak(&mut cfg);
        JobTable::new(cfg)
    }

    fn admit(t: &JobTable, scope: &str) -> Result<Arc<Job>, String> {
        t.admit(Admit {
            id: None,
            scope: scope.into(),
            principal: "p".into(),
            session: None,
            command: "true".into(),
            stdout_start: 0,
            stderr_start: 0,
        })
    }

    fn end(t: &JobTable, job: &Arc<Job>, code: i32) {
        t.on_exit(Arc::clone(job))(RunResult {
            stdout: vec![],
            stderr: vec![],
            stdout_truncated: false,
            stderr_truncated: false,
            exit_code: code,
            status: None,
            end: End::Exited,
            duration: Duration::ZERO,
        });
    }

    const G1: &str = "0000000a-aaaa-4bbb-8ccc-dddddddddddd";
    const G2: &str = "0000000b-aaaa-4bbb-8ccc-dddddddddddd";

    #[test]
    fn limits_per_scope_and_in_all_refuse_one_more() {
        let tmp = TempDir::new("jobs");
        let t = table(&tmp, |c| {
            c.per_scope = 2;
            c.total = 3;
        });
        let a = admit(&t, G1).unwrap();
        admit(&t, G1).unwrap();
        let err = admit(&t, G1).unwrap_err();
        assert_eq!(
            err,
            "too many running jobs (2) under this grant; cancel one or wait"
        );
        admit(&t, G2).unwrap();
        let err = admit(&t, OWNER_SCOPE).unwrap_err();
        assert_eq!(
            err,
            "too many running jobs (3) on this box; cancel one or wait"
        );
        end(&t, &a, 0);
        admit(&t, G1).unwrap();
    }

    #[test]
    fn the_disk_cap_refuses_a_job_that_cannot_fit_and_says_what_to_do() {
        // A window of 1000 bytes: the headroom is the window, a start reserves 2064.
        let tmp = TempDir::new("jobs");
        let t = table(&tmp, |c| {
            c.disk_cap = 4_500;
            c.disk_share = 4_500;
        });
        let a = admit(&t, G1).unwrap();
        admit(&t, G2).unwrap();
        let err = admit(&t, OWNER_SCOPE).unwrap_err();
        for needle in [
            "2064 bytes",
            "4128 of the 4500",
            "--job-disk-bytes",
            "bash_cancel",
        ] {
            assert!(err.contains(needle), "{needle}: {err}");
        }
        let files = std::fs::read_dir(tmp.path("jobs").join(G1))
            .unwrap()
            .count();
        assert_eq!(files, 2, "the refused start created nothing");
        JobSink::write(&*a, Which::Stdout, b"12345");
        end(&t, &a, 0);
        assert_eq!(t.reserved_bytes(), 2064 + 2 * HEADER_BYTES + 5);
        admit(&t, G1).unwrap();
    }

    #[test]
    fn the_share_holds_its_bound_and_refuses_one_byte_more() {
        // A window of 1000 bytes: a start reserves 2 × (32 + 1000) = 2064 bytes.
        for (share, fits) in [(2 * 2064, 2), (2 * 2064 - 1, 1)] {
            let tmp = TempDir::new("jobs-share-bound");
            let t = table(&tmp, |c| c.disk_share = share);
            for _ in 0..fits {
                admit(&t, G1).unwrap();
            }
            let err = admit(&t, G1).unwrap_err();
            assert!(err.contains(&format!("of the {share} bytes")), "{err}");
            admit(&t, G2).unwrap();
            admit(&t, OWNER_SCOPE).unwrap();
        }
    }

    /// Disk blocks a file really uses.
    fn allocated(path: &Path) -> u64 {
        use std::os::unix::fs::MetadataExt;
        std::fs::metadata(path).unwrap().blocks() * 512
    }

    #[test]
    fn a_scope_holds_at_most_its_share_and_the_others_still_start() {
        const MIB: u64 = 1 << 20;
        let tmp = TempDir::new("jobs-share");
        let share = 3 * MIB + 4 * HEADER_BYTES;
        let t = table(&tmp, |c| {
            c.window = 2 * MIB;
            c.disk_cap = 64 * MIB;
            c.disk_share = share;
        });
        // A start reserves a header and 1 MiB of headroom per stream, not two windows.
        let a = admit(&t, G1).unwrap();
        assert_eq!(t.scope_reserved_bytes(G1), 2 * (MIB + HEADER_BYTES));
        // One stream may use the job's whole headroom.
        JobSink::write(&*a, Which::Stdout, &vec![b'o'; 2 * MIB as usize]);
        assert_eq!(a.out.read(0, usize::MAX).data.len() as u64, 2 * MIB);
        assert_eq!(t.scope_reserved_bytes(G1), 2 * (MIB + HEADER_BYTES));
        // The share + 1 byte: a second job of this grant does not fit; another grant's does.
        let err = admit(&t, G1).unwrap_err();
        assert!(
            err.contains("this grant's share") && err.contains("--job-disk-share"),
            "{err}"
        );
        let b = admit(&t, G2).unwrap();
        // At its share, a stream keeps only what fits and gives the rest of the disk back.
        JobSink::write(&*a, Which::Stderr, &vec![b'e'; 2 * MIB as usize]);
        assert_eq!(t.scope_reserved_bytes(G1), share);
        let kept = a.err.held();
        assert_eq!(kept, share - 2 * MIB - 2 * HEADER_BYTES);
        let c = a.err.read(0, usize::MAX);
        assert_eq!((c.skipped, c.data.len() as u64), (2 * MIB - kept, kept));
        JobSink::write(&*a, Which::Stderr, &vec![b'f'; MIB as usize / 2]);
        assert_eq!(a.err.held(), kept, "a full share keeps its size");
        let c = a.err.read(0, usize::MAX);
        assert!(c.data.ends_with(&vec![b'f'; MIB as usize / 2]));
        let err_file = tmp.path("jobs").join(G1).join(format!("{}.err", a.id));
        assert!(
            allocated(&err_file) <= kept + 64 * 1024,
            "dropped bytes' blocks were freed: {} allocated",
            allocated(&err_file)
        );
        assert!(t.reserved_bytes() <= share + t.scope_reserved_bytes(G2));
        // The other grant grows as it needs.
        JobSink::write(&*b, Which::Stdout, &vec![b'x'; 2 * MIB as usize]);
        assert_eq!(b.out.held(), 2 * MIB);
        // An end gives back the headroom, a removal everything.
        end(&t, &a, 0);
        assert_eq!(
            t.scope_reserved_bytes(G1),
            2 * MIB + kept + 2 * HEADER_BYTES
        );
        t.end_scope(G1);
        assert_eq!(t.scope_reserved_bytes(G1), 0);
        assert!(!err_file.exists());
    }

    #[test]
    fn files_are_private_and_an_ended_scope_refuses_and_is_removed() {
        let tmp = TempDir::new("jobs");
        let t = table(&tmp, |_| {});
        let job = admit(&t, G1).unwrap();
        t.spawned(&job, 999_999, None);
        let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
        let dir = tmp.path("jobs").join(G1);
        assert_eq!((mode(&tmp.path("jobs")), mode(&dir)), (0o700, 0o700));
        for ext in ["out", "err", "json"] {
            assert_eq!(mode(&dir.join(format!("{}.{ext}", job.id))), 0o600, "{ext}");
        }
        t.end_scope(G1);
        assert_eq!(
            admit(&t, G1).unwrap_err(),
            "this grant has ended; no job can start under it"
        );
        assert!(
            dir.exists(),
            "a running job keeps its files until it has ended"
        );
        // Its end removes them at once: an ended grant holds nothing.
        end(&t, &job, 0);
        assert!(!dir.exists());
        assert!(t.list(G1).is_empty());
        assert_eq!(t.reserved_bytes(), 0);
    }

    #[test]
    fn links_in_the_jobs_dir_are_refused_never_followed() {
        let tmp = TempDir::new("jobs-links");
        let elsewhere = TempDir::new("jobs-elsewhere");
        // A scope dir that is a link: the start is refused, nothing is written through it.
        std::fs::create_dir_all(tmp.path("jobs")).unwrap();
        std::os::unix::fs::symlink(&elsewhere.0, tmp.path("jobs").join(G1)).unwrap();
        let t = table(&tmp, |_| {});
        let err = admit(&t, G1).unwrap_err();
        assert!(err.contains("symbolic link"), "{err}");
        assert_eq!(std::fs::read_dir(&elsewhere.0).unwrap().count(), 0);
        // A record that is a link is not read at recovery: the job's files are removed,
        // what the link pointed at is left alone.
        let job = admit(&t, G2).unwrap();
        end(&t, &job, 0);
        let record = tmp.path("jobs").join(G2).join(format!("{}.json", job.id));
        let copy = elsewhere.path("record.json");
        std::fs::copy(&record, &copy).unwrap();
        std::fs::remove_file(&record).unwrap();
        std::os::unix::fs::symlink(&copy, &record).unwrap();
        let again = table(&tmp, |_| {});
        assert_eq!(
            again.recover().unwrap(),
            0,
            "the linked record was followed"
        );
        assert!(copy.exists());
        assert!(
            !tmp.path("jobs").join(G1).exists(),
            "the linked scope is removed"
        );
    }

    #[test]
    fn ended_scopes_without_jobs_are_remembered_up_to_their_bound() {
        let tmp = TempDir::new("jobs");
        let t = table(&tmp, |_| {});
        let scope = |n: usize| format!("{n:08x}-aaaa-4bbb-8ccc-dddddddddddd");
        for n in 0..=MAX_ENDED_SCOPES {
            t.end_scope(&scope(n));
        }
        assert!(
            t.janitor.get().is_none(),
            "nothing to clean: no janitor thread"
        );
        assert!(admit(&t, &scope(MAX_ENDED_SCOPES)).is_err());
        assert!(admit(&t, &scope(1)).is_err());
        admit(&t, &scope(0)).expect("the oldest of bound + 1 was forgotten");
    }

    #[test]
    fn finished_jobs_past_the_kept_bound_go_oldest_first() {
        let tmp = TempDir::new("jobs");
        let t = table(&tmp, |c| c.kept_per_scope = 2);
        let jobs: Vec<_> = (0..3).map(|_| admit(&t, G1).unwrap()).collect();
        for j in &jobs {
            end(&t, j, 0);
        }
        let left: Vec<String> = t.list(G1).iter().map(|j| j.id.clone()).collect();
        assert_eq!(left, [jobs[1].id.clone(), jobs[2].id.clone()]);
        assert!(!jobs[0].path("out").exists());
    }

    /// Blocks the first `job_ended` until released, so a test can stop a job's report
    /// halfway: its state already says ended, its audit record is not yet queued.
    struct HeldMeter {
        entered: crossbeam_channel::Sender<()>,
        release: crossbeam_channel::Receiver<()>,
    }

    impl JobMeter for HeldMeter {
        fn job_started(&self) {}
        fn job_ended(&self, _: &str) {
            let _ = self.entered.send(());
            let _ = self.release.recv_timeout(WATCHDOG);
        }
    }

    #[test]
    fn shutdown_waits_until_a_killed_jobs_end_is_audited_not_just_marked() {
        let tmp = TempDir::new("jobs");
        let t = table(&tmp, |_| {});
        let (entered_tx, entered) = crossbeam_channel::bounded(1);
        let (release, release_rx) = crossbeam_channel::bounded(1);
        t.report_to(
            Audit::discard(),
            Arc::new(HeldMeter {
                entered: entered_tx,
                release: release_rx,
            }),
        );
        let job = admit(&t, G1).unwrap();
        t.spawned(&job, 1_000_000, None);
        let reporter = {
            let (t, job) = (Arc::clone(&t), Arc::clone(&job));
            std::thread::spawn(move || end(&t, &job, 0))
        };
        entered
            .recv_timeout(WATCHDOG)
            .expect("watchdog: the end was never reported");
        assert!(!job.is_running(), "the state already says ended");
        let (done_tx, done) = crossbeam_channel::bounded(1);
        let stopper = {
            let t = Arc::clone(&t);
            std::thread::spawn(move || {
                t.shutdown();
                let _ = done_tx.send(());
            })
        };
        assert_eq!(
            done.recv_timeout(Duration::from_millis(200)),
            Err(crossbeam_channel::RecvTimeoutError::Timeout),
            "shutdown returned before the job's end was audited"
        );
        release.send(()).unwrap();
        done.recv_timeout(WATCHDOG)
            .expect("watchdog: shutdown never returned once the end was audited");
        reporter.join().unwrap();
        stopper.join().unwrap();
    }

    #[test]
    fn ids_and_scopes() {
        let id = new_job_id();
        assert!(is_job_id(&id), "{id}");
        assert_ne!(id, new_job_id());
        for bad in [
            "",
            "ABCDEF0123456789",
            "0123456789abcde",
            "../../etc/passwd",
        ] {
            assert!(!is_job_id(bad), "{bad}");
        }
        assert!(is_scope(OWNER_SCOPE) && is_scope(G1) && !is_scope("..") && !is_scope("x"));
        assert_eq!(command_note(&"é".repeat(1000)).len(), 1024);
    }

    #[test]
    fn stat_fields_are_counted_after_the_command_name() {
        let stat = "42 (a b) c) S 1 42 42 0 -1 4194560 0 0 0 0 0 0 0 0 20 0 1 0 12345 0";
        assert_eq!(crate::tools::process::stat_field(stat, 5), Some(42));
        assert_eq!(crate::tools::process::stat_field(stat, 22), Some(12345));
        let me = std::process::id() as i32;
        assert!(crate::tools::process::start_ticks(me).is_some());
    }
}
