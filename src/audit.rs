//! `audit.jsonl`: the append-only record of grant lifecycle events and every tool call.
//! Owns the writer thread, the record format, group-commit fsync, durable writes for
//! lifecycle records acknowledged by a `202`, and rotation by size.
//!
//! Callers never wait for the disk unless they ask to ([`Audit::record_durable`]). Records
//! carry only plain strings chosen by the caller; no field has a secret's type. Every record
//! is cut to a bounded size before it is queued ([`Record::bounded`]): a peer chooses tool
//! names and arguments, and an unbounded line would let it rotate the real records away.
//!
//! Plain records (every tool call) do not wake the writer each: they are queued in
//! [`Pending`], and only the first one of a batch wakes it, which then waits out the fsync
//! interval and writes and fsyncs the whole batch. A tool call's reply would otherwise pay
//! for waking the writer on another CPU, which costs more than the call on an idle VM.

use std::borrow::Cow;
use std::fs::{self, File, OpenOptions};
use std::io::{self, Write};
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use crossbeam_channel::{Receiver, RecvTimeoutError, Sender};
use serde_json::{Map, Value};

use crate::base::error::Error;
use crate::base::label;
use crate::base::timefmt;
use crate::config::{Limits, Timing};
use crate::faults::{self, Site};
use crate::wire::mcp::Outcome;

/// Name of the live audit file inside the state dir; rotated copies add `.1`, `.2`, ….
pub const FILE_NAME: &str = "audit.jsonl";
/// Mode of every audit file: records name principals and, with `--audit-args`, typed text.
pub const FILE_MODE: u32 = 0o600;
/// Most queued messages the writer takes into one batch, so a flood cannot postpone a
/// durable request's fsync indefinitely.
const MAX_BATCH: usize = 4096;

/// Longest text field of a record once written as JSON (bytes): room for a 2 KiB runtime URL
/// and any login header; a longer value is cut and marked (see [`Record::bounded`]).
pub const MAX_FIELD_BYTES: usize = 4 << 10;
/// Longest `args` of a record once written as JSON (bytes).
pub const MAX_ARGS_BYTES: usize = 64 << 10;
/// Text fields a record can have (lifecycle: grant id, principal, previous principal,
/// profile, runtime, session, reason).
const TEXT_FIELDS: usize = 7;
/// Longest audit line (bytes): every field at its cap plus keys, timestamps and numbers.
pub const MAX_LINE_BYTES: usize = MAX_ARGS_BYTES + TEXT_FIELDS * MAX_FIELD_BYTES + 512;

/// What happened to a grant.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LifecycleEvent {
    Created,
    Renewed,
    Replaced,
    Revoked,
    Expired,
    Ended,
}

impl LifecycleEvent {
    pub fn as_str(self) -> &'static str {
        match self {
            LifecycleEvent::Created => "created",
            LifecycleEvent::Renewed => "renewed",
            LifecycleEvent::Replaced => "replaced",
            LifecycleEvent::Revoked => "revoked",
            LifecycleEvent::Expired => "expired",
            LifecycleEvent::Ended => "ended",
        }
    }
}

/// What happened to a call held for approval (§10).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ApprovalEvent {
    Requested,
    Decided,
    Expired,
    Withdrawn,
}

impl ApprovalEvent {
    pub fn as_str(self) -> &'static str {
        match self {
            ApprovalEvent::Requested => "approval_requested",
            ApprovalEvent::Decided => "approval_decided",
            ApprovalEvent::Expired => "approval_expired",
            ApprovalEvent::Withdrawn => "approval_withdrawn",
        }
    }
}

/// One audit line. `None` fields are left out of the line.
#[derive(Clone, Debug, PartialEq)]
pub enum Record {
    Lifecycle {
        event: LifecycleEvent,
        grant_id: String,
        principal: String,
        /// On a renew by someone else: who held the grant before.
        previous_principal: Option<String>,
        profile: String,
        runtime: String,
        session: String,
        ttl_secs: Option<u64>,
        /// Why it ended (the grant JSON's `ended` reason), or other context.
        reason: Option<String>,
    },
    ToolCall {
        /// `None` for calls on `POST /mcp` (the owner, no grant).
        grant_id: Option<String>,
        principal: String,
        session: Option<String>,
        tool: String,
        outcome: Outcome,
        duration_ms: u64,
        /// Only with `--audit-args`.
        args: Option<Value>,
    },
    /// A long-running job started or ended (`kind` is `job_started` or `job_ended`).
    Job {
        ended: bool,
        /// `None` for the owner's `/mcp` scope.
        grant_id: Option<String>,
        principal: String,
        session: Option<String>,
        job_id: String,
        /// Only with `--audit-args`.
        command: Option<String>,
        /// `job_ended` only: `exited` or `killed`, and why it was killed.
        state: Option<&'static str>,
        reason: Option<String>,
        exit_code: Option<i32>,
        duration_ms: Option<u64>,
        /// `job_ended` only: stdout and stderr bytes the job wrote.
        bytes: Option<u64>,
    },
    Approval {
        event: ApprovalEvent,
        approval_id: String,
        grant_id: String,
        /// The grant's principal (who lent the box), not the decider.
        principal: String,
        session: String,
        tool: String,
        /// `allow` or `deny`, on `approval_decided`.
        decision: Option<&'static str>,
        decided_by: Option<String>,
        reason: Option<String>,
        /// From the request to its end, in seconds (millisecond precision).
        waited_secs: Option<f64>,
        /// Only with `--audit-args`, on `approval_requested`.
        args: Option<Value>,
    },
    /// The wheel of an own display changed hands (§23).
    Wheel {
        grant_id: String,
        /// Who took or gave it (`idle` when the idle time gave it back).
        principal: String,
        /// `taken`, `given` or `idle`.
        event: &'static str,
        /// Who holds it now: `agent` or `lender`.
        holder: &'static str,
        epoch: u64,
    },
}

/// A peer-chosen tool name as its [`label::name`], reusing the string when it is already safe.
fn labelled(tool: String) -> String {
    match label::name(&tool) {
        Cow::Borrowed(_) => tool,
        Cow::Owned(label) => label,
    }
}

/// `args` within [`MAX_ARGS_BYTES`]: past it, a string of their JSON text cut to the bound.
fn bounded_args(args: Value) -> Value {
    let json = args.to_string();
    match cut_json(&json, MAX_ARGS_BYTES) {
        Some(cut) => Value::String(cut),
        None => args,
    }
}

/// One field of a record as [`Record::fields`] yields it; its kind says how it is bounded.
enum Field {
    /// Peer- or caller-chosen text: cut past [`MAX_FIELD_BYTES`] (as JSON).
    Text(String),
    /// A tool name: its [`label::name`].
    Tool(String),
    /// Tool arguments: a string of their JSON text cut past [`MAX_ARGS_BYTES`].
    Args(Value),
    /// A number or one of our own words: already bounded.
    Plain(Value),
}

impl Field {
    fn bounded(self) -> Value {
        match self {
            Field::Text(s) => Value::String(cut_json(&s, MAX_FIELD_BYTES).unwrap_or(s)),
            Field::Tool(t) => Value::String(labelled(t)),
            Field::Args(a) => bounded_args(a),
            Field::Plain(v) => v,
        }
    }

    #[cfg(test)]
    fn unbounded(self) -> Value {
        match self {
            Field::Text(s) | Field::Tool(s) => Value::String(s),
            Field::Args(v) | Field::Plain(v) => v,
        }
    }
}

/// A record with every field within its bound, in line order: what is queued for the
/// writer, which only stamps it ([`Line::to_line`]).
#[derive(Clone, Debug, PartialEq)]
pub struct Line {
    kind: &'static str,
    fields: Vec<(&'static str, Value)>,
}

impl Line {
    pub fn kind(&self) -> &'static str {
        self.kind
    }

    /// A field's value, `None` when the record left it out.
    pub fn get(&self, name: &str) -> Option<&Value> {
        self.fields.iter().find(|(k, _)| *k == name).map(|(_, v)| v)
    }

    /// The JSON line (without its newline), stamped at `ts_ms`.
    pub fn to_line(&self, ts_ms: u64) -> String {
        let mut m = Map::new();
        m.insert("ts".into(), timefmt::rfc3339(ts_ms / 1000).into());
        m.insert("ts_ms".into(), ts_ms.into());
        m.insert("kind".into(), self.kind.into());
        for (k, v) in &self.fields {
            m.insert((*k).to_string(), v.clone());
        }
        Value::Object(m).to_string()
    }
}

impl Record {
    pub fn kind(&self) -> &'static str {
        match self {
            Record::Lifecycle { .. } => "lifecycle",
            Record::ToolCall { .. } => "tool_call",
            Record::Job { ended: false, .. } => "job_started",
            Record::Job { ended: true, .. } => "job_ended",
            Record::Approval { .. } => "approval",
            Record::Wheel { .. } => "wheel",
        }
    }

    /// Every field of this record once, in line order, `None`s left out: the one place a
    /// field is named. Its bound ([`Record::bounded`]) and its place in the line both
    /// follow from what it yields here.
    fn fields(self) -> Vec<(&'static str, Field)> {
        use Field::{Args, Plain, Text, Tool};
        let mut out = Vec::with_capacity(12);
        let mut put = |k: &'static str, f: Option<Field>| {
            if let Some(f) = f {
                out.push((k, f));
            }
        };
        match self {
            Record::Lifecycle {
                event,
                grant_id,
                principal,
                previous_principal,
                profile,
                runtime,
                session,
                ttl_secs,
                reason,
            } => {
                put("event", Some(Plain(event.as_str().into())));
                put("grant_id", Some(Text(grant_id)));
                put("principal", Some(Text(principal)));
                put("previous_principal", previous_principal.map(Text));
                put("profile", Some(Text(profile)));
                put("runtime", Some(Text(runtime)));
                put("session", Some(Text(session)));
                put("ttl_secs", ttl_secs.map(|t| Plain(t.into())));
                put("reason", reason.map(Text));
            }
            Record::ToolCall {
                grant_id,
                principal,
                session,
                tool,
                outcome,
                duration_ms,
                args,
            } => {
                put("grant_id", grant_id.map(Text));
                put("principal", Some(Text(principal)));
                put("session", session.map(Text));
                put("tool", Some(Tool(tool)));
                put("outcome", Some(Plain(outcome.as_str().into())));
                put("duration_ms", Some(Plain(duration_ms.into())));
                put("args", args.map(Args));
            }
            Record::Job {
                ended: _,
                grant_id,
                principal,
                session,
                job_id,
                command,
                state,
                reason,
                exit_code,
                duration_ms,
                bytes,
            } => {
                put("grant_id", grant_id.map(Text));
                put("principal", Some(Text(principal)));
                put("session", session.map(Text));
                put("job_id", Some(Text(job_id)));
                put("command", command.map(Text));
                put("state", state.map(|s| Plain(s.into())));
                put("reason", reason.map(Text));
                put("exit_code", exit_code.map(|c| Plain(c.into())));
                put("duration_ms", duration_ms.map(|d| Plain(d.into())));
                put("bytes", bytes.map(|b| Plain(b.into())));
            }
            Record::Approval {
                event,
                approval_id,
                grant_id,
                principal,
                session,
                tool,
                decision,
                decided_by,
                reason,
                waited_secs,
                args,
            } => {
                put("event", Some(Plain(event.as_str().into())));
                put("approval_id", Some(Text(approval_id)));
                put("grant_id", Some(Text(grant_id)));
                put("principal", Some(Text(principal)));
                put("session", Some(Text(session)));
                put("tool", Some(Tool(tool)));
                put("decision", decision.map(|d| Plain(d.into())));
                put("decided_by", decided_by.map(Text));
                put("reason", reason.map(Text));
                put(
                    "waited_secs",
                    waited_secs.map(|s| Plain(((s * 1000.0).round() / 1000.0).into())),
                );
                put("args", args.map(Args));
            }
            Record::Wheel {
                grant_id,
                principal,
                event,
                holder,
                epoch,
            } => {
                put("grant_id", Some(Text(grant_id)));
                put("principal", Some(Text(principal)));
                put("event", Some(Plain(event.into())));
                put("holder", Some(Plain(holder.into())));
                put("epoch", Some(Plain(epoch.into())));
            }
        }
        out
    }

    /// This record with every field within its bound: a tool name becomes its
    /// [`label::name`], a text field longer than [`MAX_FIELD_BYTES`] (as JSON) is cut and
    /// ends `…[truncated: <n> bytes]`, and `args` longer than [`MAX_ARGS_BYTES`] become a
    /// string of their JSON text cut the same way. So no record is ever dropped for its size,
    /// and a hostile peer cannot make one line push the real records out through rotation.
    pub fn bounded(self) -> Line {
        Line {
            kind: self.kind(),
            fields: self
                .fields()
                .into_iter()
                .map(|(k, f)| (k, f.bounded()))
                .collect(),
        }
    }

    /// The same walk without the bounds, for tests that a record within them is unchanged.
    #[cfg(test)]
    fn unbounded(self) -> Line {
        Line {
            kind: self.kind(),
            fields: self
                .fields()
                .into_iter()
                .map(|(k, f)| (k, f.unbounded()))
                .collect(),
        }
    }

    /// The bounded JSON line (without its newline) for this record stamped at `ts_ms`.
    pub fn to_line(&self, ts_ms: u64) -> String {
        self.clone().bounded().to_line(ts_ms)
    }
}

/// Bytes `c` takes inside a JSON string as serde_json writes it.
fn json_len(c: char) -> usize {
    match c {
        '"' | '\\' | '\n' | '\r' | '\t' | '\u{8}' | '\u{c}' => 2,
        c if (c as u32) < 0x20 => 6,
        c => c.len_utf8(),
    }
}

/// `None` if `text` fits in `max` bytes as a JSON string body; else its longest prefix that
/// fits together with the marker `…[truncated: <n> bytes]` (n = the whole text's length).
fn cut_json(text: &str, max: usize) -> Option<String> {
    if text.len() <= max / 6 || text.chars().map(json_len).sum::<usize>() <= max {
        return None;
    }
    let marker = format!("…[truncated: {} bytes]", text.len());
    let budget = max.saturating_sub(marker.len());
    let mut used = 0;
    let mut end = 0;
    for (i, c) in text.char_indices() {
        used += json_len(c);
        if used > budget {
            break;
        }
        end = i + c.len_utf8();
    }
    Some(format!("{}{marker}", &text[..end]))
}

type Reply = Sender<Result<(), String>>;

enum Msg {
    Record(u64, Line),
    /// The first plain record of a batch is in [`Pending`]: write the batch within one
    /// fsync interval.
    Kick,
    /// Write this record, then fsync, then answer.
    Durable(u64, Line, Reply),
    /// Fsync everything queued before it, then answer.
    Sync(Reply),
    Shutdown,
}

/// Cloneable handle to the audit writer. Sending never blocks (the queue is unbounded).
#[derive(Clone, Debug)]
pub struct Audit {
    tx: Option<Sender<Msg>>,
    pending: Arc<Pending>,
    dead_logged: Arc<AtomicBool>,
    /// The directory of the audit files, for readers (`GET /audit`); `None` when discarding.
    dir: Option<Arc<PathBuf>>,
}

/// Plain records waiting for the writer, oldest first, and whether the writer has stopped.
#[derive(Debug, Default)]
struct Pending {
    records: Mutex<Vec<(u64, Line)>>,
    closed: AtomicBool,
    /// The guard asked the writer to stop: a writer restarted after a panic stops too (the
    /// `Shutdown` message may have been lost with the batch it panicked in).
    stopping: AtomicBool,
}

impl Pending {
    fn is_empty(&self) -> bool {
        self.records
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .is_empty()
    }

    fn take(&self) -> Vec<(u64, Line)> {
        std::mem::take(&mut *self.records.lock().unwrap_or_else(|e| e.into_inner()))
    }
}

impl std::fmt::Debug for Msg {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("audit::Msg")
    }
}

/// Owns the writer thread. Dropping it writes and fsyncs everything queued before the
/// drop, then joins the thread; records sent after that are dropped with one warning.
#[derive(Debug)]
pub struct AuditGuard {
    tx: Sender<Msg>,
    pending: Arc<Pending>,
    join: Option<JoinHandle<()>>,
}

impl Drop for AuditGuard {
    fn drop(&mut self) {
        self.pending.stopping.store(true, Ordering::SeqCst);
        let _ = self.tx.send(Msg::Shutdown);
        if let Some(join) = self.join.take() {
            if join.join().is_err() {
                log::error!("audit writer thread panicked");
            }
        }
        self.pending.closed.store(true, Ordering::SeqCst);
        self.pending.take();
    }
}

/// Start the writer for `<state_dir>/audit.jsonl`. The state dir must exist (the grant
/// store creates it 0700). Fails if the audit file cannot be opened for appending.
pub fn start(
    state_dir: &Path,
    timing: &Timing,
    limits: &Limits,
) -> Result<(Audit, AuditGuard), Error> {
    start_with(Writer::new(state_dir, timing, limits)?)
}

fn start_with(writer: Writer) -> Result<(Audit, AuditGuard), Error> {
    let (tx, rx) = crossbeam_channel::unbounded();
    let pending = Arc::new(Pending::default());
    let writer_pending = Arc::clone(&pending);
    let dir = Arc::new(writer.dir.clone());
    let join = std::thread::Builder::new()
        .name("audit".into())
        .spawn(move || {
            let mut writer = writer;
            // A panic while writing restarts the writer with what it had: records already
            // fsynced and acknowledged stay so; the batch it was in the middle of is lost,
            // and any durable request in it is answered an error (never acknowledged).
            loop {
                let run = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                    writer.run(&rx, &writer_pending)
                }));
                match run {
                    Ok(()) => return,
                    Err(payload) => {
                        faults::caught(Site::Audit, FILE_NAME, payload.as_ref());
                        writer.recover();
                        if writer_pending.stopping.load(Ordering::SeqCst) {
                            let mut rest: Vec<Msg> = writer_pending
                                .take()
                                .into_iter()
                                .map(|(ts, r)| Msg::Record(ts, r))
                                .collect();
                            rest.push(Msg::Shutdown);
                            if std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                                writer.handle(&mut rest)
                            }))
                            .is_err()
                            {
                                log::error!("the audit writer panicked again while stopping");
                            }
                            return;
                        }
                    }
                }
            }
        })
        .map_err(|e| Error::io("cannot start the audit writer thread", e))?;
    Ok((
        Audit {
            tx: Some(tx.clone()),
            pending: Arc::clone(&pending),
            dead_logged: Arc::new(AtomicBool::new(false)),
            dir: Some(dir),
        },
        AuditGuard {
            tx,
            pending,
            join: Some(join),
        },
    ))
}

impl Audit {
    /// A handle that records nothing (for configurations and tests without an audit).
    pub fn discard() -> Audit {
        Audit {
            tx: None,
            pending: Arc::default(),
            dead_logged: Arc::new(AtomicBool::new(false)),
            dir: None,
        }
    }

    /// The directory holding [`FILE_NAME`] and its rotated copies; `None` when discarding.
    pub fn dir(&self) -> Option<&Path> {
        self.dir.as_deref().map(PathBuf::as_path)
    }

    /// Queue `rec`; returns at once. Written and fsynced within one fsync interval.
    pub fn record(&self, rec: Record) {
        let Some(tx) = &self.tx else { return };
        if self.pending.closed.load(Ordering::SeqCst) {
            return self.writer_gone();
        }
        let first = {
            let mut records = self
                .pending
                .records
                .lock()
                .unwrap_or_else(|e| e.into_inner());
            records.push((now_ms(), rec.bounded()));
            records.len() == 1
        };
        if first && tx.send(Msg::Kick).is_err() {
            self.pending.take();
            self.writer_gone();
        }
    }

    /// Queue `rec` and wait until it and every record queued before it are written and
    /// fsynced. Use before acknowledging a created or renewed grant.
    pub fn record_durable(&self, rec: Record) -> Result<(), Error> {
        let Some(tx) = &self.tx else { return Ok(()) };
        let (reply_tx, reply_rx) = crossbeam_channel::bounded(1);
        self.wait(
            tx.send(Msg::Durable(now_ms(), rec.bounded(), reply_tx))
                .is_ok(),
            reply_rx,
        )
    }

    /// Wait until every record queued so far is written and fsynced (e.g. at shutdown).
    pub fn sync(&self) -> Result<(), Error> {
        let Some(tx) = &self.tx else { return Ok(()) };
        let (reply_tx, reply_rx) = crossbeam_channel::bounded(1);
        self.wait(tx.send(Msg::Sync(reply_tx)).is_ok(), reply_rx)
    }

    fn wait(&self, sent: bool, reply: Receiver<Result<(), String>>) -> Result<(), Error> {
        let gone = || {
            Error::io(
                "audit",
                io::Error::other("the audit writer has stopped; the record was not written"),
            )
        };
        if !sent {
            self.writer_gone();
            return Err(gone());
        }
        match reply.recv() {
            Ok(Ok(())) => Ok(()),
            Ok(Err(msg)) => Err(Error::io("audit", io::Error::other(msg))),
            Err(_) if !self.pending.closed.load(Ordering::SeqCst) => Err(Error::io(
                "audit",
                io::Error::other(
                    "the audit writer failed while writing this record and was restarted; the record is not acknowledged",
                ),
            )),
            Err(_) => {
                self.writer_gone();
                Err(gone())
            }
        }
    }

    fn writer_gone(&self) {
        if !self.dead_logged.swap(true, Ordering::Relaxed) {
            log::error!("audit writer is not running; audit records are being dropped");
        }
    }
}

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

/// The writer thread's state: the open file, its size, and what is not yet fsynced.
struct Writer {
    dir: PathBuf,
    fsync_interval: Duration,
    rotate_bytes: u64,
    keep: usize,
    file: Option<File>,
    size: u64,
    /// When the oldest unsynced write happened.
    dirty_since: Option<Instant>,
    /// Set while writes fail, so a full disk logs once per outage, not per record.
    failing: bool,
    /// Set while rotation fails, for the same reason.
    rotate_failing: bool,
    /// Held by the writer around each batch; a test takes it to stall the writer.
    #[cfg(test)]
    gate: Option<Arc<std::sync::Mutex<()>>>,
    /// Told about each successful fsync, so tests can count them.
    #[cfg(test)]
    fsynced: Option<Sender<()>>,
}

impl Writer {
    fn new(dir: &Path, timing: &Timing, limits: &Limits) -> Result<Writer, Error> {
        let mut w = Writer {
            dir: dir.to_path_buf(),
            fsync_interval: timing.audit_fsync_interval,
            rotate_bytes: limits.audit_rotate_bytes,
            keep: limits.audit_keep,
            file: None,
            size: 0,
            dirty_since: None,
            failing: false,
            rotate_failing: false,
            #[cfg(test)]
            gate: None,
            #[cfg(test)]
            fsynced: None,
        };
        w.open().map_err(|e| {
            if crate::base::statedir::is_refused(&e) {
                return Error::Config(format!(
                    "{}: {e}; move it out of the way so handnode can keep its audit log there",
                    w.path().display()
                ));
            }
            Error::io(
                format!(
                    "cannot open {} for appending (check the state dir's owner and mode)",
                    w.path().display()
                ),
                e,
            )
        })?;
        Ok(w)
    }

    fn path(&self) -> PathBuf {
        self.dir.join(FILE_NAME)
    }

    fn open(&mut self) -> io::Result<()> {
        let path = self.path();
        let file = crate::base::statedir::open_state_file(
            OpenOptions::new().append(true).create(true).mode(FILE_MODE),
            &path,
        )?;
        let meta = file.metadata()?;
        if meta.permissions().mode() & 0o7777 & !FILE_MODE != 0 {
            file.set_permissions(fs::Permissions::from_mode(FILE_MODE))?;
            log::warn!(
                "{} was readable by others; narrowed to 0600",
                path.display()
            );
        }
        self.size = meta.len();
        self.file = Some(file);
        Ok(())
    }

    /// After a panic in [`Writer::run`]: reopen the file (whatever was half done with the
    /// old descriptor is dropped with it) and fsync what reached it before, on the next turn.
    fn recover(&mut self) {
        self.file = None;
        match self.open() {
            Ok(()) => self.dirty_since = Some(Instant::now()),
            Err(e) => {
                // `flush` reopens it before the next write.
                log::error!("cannot reopen {} after a panic: {e}", self.path().display());
                self.dirty_since = None;
            }
        }
    }

    fn run(&mut self, rx: &Receiver<Msg>, pending: &Pending) {
        let mut batch = Vec::new();
        // When the oldest record in `pending` must be written and fsynced. After a restart
        // records may wait there whose wake-up was consumed by the run that panicked.
        let mut pending_due: Option<Instant> = (!pending.is_empty()).then(Instant::now);
        loop {
            let deadline = match (self.dirty_since, pending_due) {
                (Some(since), Some(due)) => Some((since + self.fsync_interval).min(due)),
                (Some(since), None) => Some(since + self.fsync_interval),
                (None, due) => due,
            };
            let first = match deadline {
                Some(deadline) => match rx.recv_deadline(deadline) {
                    Ok(msg) => Some(msg),
                    Err(RecvTimeoutError::Timeout) => None,
                    Err(RecvTimeoutError::Disconnected) => break,
                },
                None => match rx.recv() {
                    Ok(msg) => Some(msg),
                    Err(_) => break,
                },
            };
            let Some(first) = first else {
                if pending_due.is_some_and(|due| Instant::now() >= due) {
                    pending_due = None;
                    batch.extend(pending.take().into_iter().map(|(ts, r)| Msg::Record(ts, r)));
                    if self.handle(&mut batch) {
                        return;
                    }
                }
                // These records have waited their interval (and any others have too).
                self.fsync();
                continue;
            };
            batch.push(first);
            while batch.len() < MAX_BATCH {
                match rx.try_recv() {
                    Ok(msg) => batch.push(msg),
                    Err(_) => break,
                }
            }
            if batch.iter().any(|m| matches!(m, Msg::Kick)) && pending_due.is_none() {
                pending_due = Some(Instant::now() + self.fsync_interval);
            }
            // Someone waits for everything recorded before: the pending records go first.
            if batch
                .iter()
                .any(|m| matches!(m, Msg::Durable(..) | Msg::Sync(_) | Msg::Shutdown))
            {
                pending_due = None;
                let earlier = pending.take().into_iter().map(|(ts, r)| Msg::Record(ts, r));
                batch.splice(0..0, earlier);
            }
            if self.handle(&mut batch) {
                return;
            }
        }
        self.fsync();
    }

    /// Write one batch; fsync if someone waits on it. True when told to stop.
    fn handle(&mut self, batch: &mut Vec<Msg>) -> bool {
        #[cfg(test)]
        let gate = self.gate.clone();
        #[cfg(test)]
        let _held = gate
            .as_ref()
            .map(|g| g.lock().unwrap_or_else(|p| p.into_inner()));

        let mut waiters: Vec<Reply> = Vec::new();
        let mut stop = false;
        let mut error: Option<String> = None;
        let mut buf = Vec::new();
        for msg in batch.drain(..) {
            let (ts, rec) = match msg {
                Msg::Record(ts, rec) => (ts, rec),
                Msg::Durable(ts, rec, reply) => {
                    waiters.push(reply);
                    (ts, rec)
                }
                Msg::Sync(reply) => {
                    waiters.push(reply);
                    continue;
                }
                Msg::Kick => continue,
                Msg::Shutdown => {
                    stop = true;
                    break;
                }
            };
            #[cfg(test)]
            if rec.kind() == "tool_call"
                && rec.get("tool").and_then(Value::as_str) == Some(faults::hooks::AUDIT_TOOL)
            {
                panic!("test hook: the audit writer panics");
            }
            let mut line = rec.to_line(ts).into_bytes();
            line.push(b'\n');
            if let Err(e) = self.append(&mut buf, &line) {
                error.get_or_insert_with(|| e.to_string());
            }
        }
        if let Err(e) = self.flush(&mut buf) {
            error.get_or_insert_with(|| e.to_string());
        }
        if !waiters.is_empty() || stop {
            self.fsync();
            if self.dirty_since.is_some() {
                error.get_or_insert_with(|| "fsync failed".into());
            }
        } else if self
            .dirty_since
            .is_some_and(|since| since.elapsed() >= self.fsync_interval)
        {
            self.fsync();
        }
        match &error {
            Some(e) if !self.failing => {
                self.failing = true;
                log::error!(
                    "cannot write {}: {e}; audit records are being lost",
                    self.path().display()
                );
            }
            None if self.failing => {
                self.failing = false;
                log::info!("writing {} again", self.path().display());
            }
            _ => {}
        }
        let answer: Result<(), String> = match error {
            Some(e) => Err(format!("cannot write {}: {e}", self.path().display())),
            None => Ok(()),
        };
        for w in waiters {
            let _ = w.send(answer.clone());
        }
        stop
    }

    /// Add `line` to the pending buffer, rotating first if it would push the file past
    /// the size limit. A line longer than the limit still goes whole into a fresh file.
    /// A failed rotation is logged and the line still written: an oversized file beats a
    /// lost record.
    fn append(&mut self, buf: &mut Vec<u8>, line: &[u8]) -> io::Result<()> {
        let pending = self.size + buf.len() as u64;
        if pending > 0 && pending + line.len() as u64 > self.rotate_bytes {
            self.flush(buf)?;
            match self.rotate() {
                Ok(()) => self.rotate_failing = false,
                Err(e) if !self.rotate_failing => {
                    self.rotate_failing = true;
                    log::error!(
                        "cannot rotate {}: {e}; it keeps growing",
                        self.path().display()
                    );
                }
                Err(_) => {}
            }
        }
        buf.extend_from_slice(line);
        Ok(())
    }

    fn flush(&mut self, buf: &mut Vec<u8>) -> io::Result<()> {
        if buf.is_empty() {
            return Ok(());
        }
        if self.file.is_none() {
            self.open()?;
        }
        let file = self.file.as_mut().expect("opened above");
        let result = file.write_all(buf);
        if result.is_err() {
            // The position is unknown after a partial write; reopen (append) next time.
            self.file = None;
        } else {
            self.size += buf.len() as u64;
            self.dirty_since.get_or_insert_with(Instant::now);
        }
        buf.clear();
        result
    }

    /// Fsync the live file; on failure it stays dirty and the next batch retries.
    fn fsync(&mut self) {
        if self.dirty_since.is_none() {
            return;
        }
        match self.file.as_ref().map(File::sync_data) {
            Some(Ok(())) => {
                self.dirty_since = None;
                #[cfg(test)]
                if let Some(tx) = &self.fsynced {
                    let _ = tx.send(());
                }
            }
            Some(Err(e)) => log::error!("cannot fsync {}: {e}", self.path().display()),
            None => {}
        }
    }

    /// audit.jsonl → .1 → .2 … → .keep (the oldest deleted), then a fresh audit.jsonl.
    fn rotate(&mut self) -> io::Result<()> {
        self.fsync();
        if self.dirty_since.is_some() {
            return Err(io::Error::other("fsync before rotation failed"));
        }
        self.file = None;
        let numbered = |n: usize| self.dir.join(format!("{FILE_NAME}.{n}"));
        if self.keep == 0 {
            fs::remove_file(self.path())?;
        } else {
            match fs::remove_file(numbered(self.keep)) {
                Ok(()) => {}
                Err(e) if e.kind() == io::ErrorKind::NotFound => {}
                Err(e) => return Err(e),
            }
            for n in (1..self.keep).rev() {
                match fs::rename(numbered(n), numbered(n + 1)) {
                    Ok(()) => {}
                    Err(e) if e.kind() == io::ErrorKind::NotFound => {}
                    Err(e) => return Err(e),
                }
            }
            fs::rename(self.path(), numbered(1))?;
        }
        self.open()?;
        File::open(&self.dir)?.sync_all()
    }
}

#[cfg(test)]
mod tests;
