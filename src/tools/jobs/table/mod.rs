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
//! ([`MARKER_ENV`](crate::tools::shell::MARKER_ENV)) — a leader killed by SIGPIPE when the
//! daemon died leaves its children behind. Either way a recycled pid is never signalled. The job is then `killed` with
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
use crate::pool::CallCtl;
use crate::tools::process::{End, JobSink, RunResult, Which};

/// The job scope of the owner's `/mcp` (grant scopes are grant ids).
pub use crate::tools::shell::OWNER_SCOPE;
/// Name of the jobs dir inside the state dir.
mod files;
mod job;
mod recovery;

pub use files::*;
pub use job::*;

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

/// Bytes a running job may hold per stream beyond what its files hold: reserved at its
/// start and restored each time its files grow past the reservation (capped at the
/// window). Asking the table once per this many bytes keeps the watcher's path cheap.
pub const HEADROOM_BYTES: u64 = crate::config::JOB_HEADROOM_BYTES;

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
            ctl: CallCtl::new(),
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
        // Killed by the grant's memory limit: say so, whoever else wanted it stopped.
        let oom = run.oom_limit.map(crate::cgroup::oom_message);
        let (state, reason) = match &oom {
            Some(why) => (State::Killed, Some(why.as_str())),
            None => (state, reason),
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

    /// Every running job of every scope, oldest first (`GET /calls`).
    pub fn running(&self) -> Vec<Arc<Job>> {
        self.lock()
            .jobs
            .iter()
            .filter(|j| j.is_running())
            .cloned()
            .collect()
    }

    /// The job `id` whatever its scope: for the lender (`DELETE /calls/{id}`), never a grant.
    pub fn find_any(&self, id: &str) -> Option<Arc<Job>> {
        self.lock().jobs.iter().find(|j| j.id == id).cloned()
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
        self.stop_because(job, how, "cancelled")
    }

    /// Stop a running job, its end reported as `killed` with `reason` (the first one given
    /// wins): `bash_cancel`'s `cancelled`, the lender's `stopped_by_lender` or `halted`
    /// (§22). `false` if it had already ended.
    pub fn stop_because(&self, job: &Arc<Job>, how: Stop, reason: &'static str) -> bool {
        if !job.is_running() {
            return false;
        }
        job.stop_reason
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get_or_insert(reason);
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

#[cfg(test)]
mod tests;
