//! One job: its state, its record on disk (`<job>.json`), its identifiers and scope
//! names, and the sink its process output and exit are delivered to.

use super::*;

/// Version of the record format.
pub(super) const RECORD_VERSION: u64 = 1;

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

    pub(super) fn parse(s: &str) -> Option<State> {
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

pub(super) fn is_scope(s: &str) -> bool {
    s == OWNER_SCOPE || crate::base::ids::is_id(s)
}

pub(super) fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

/// This boot's id, which tells whether recorded pids can still be ours.
pub(super) fn boot_id() -> &'static str {
    static BOOT: OnceLock<String> = OnceLock::new();
    BOOT.get_or_init(|| {
        fs::read_to_string("/proc/sys/kernel/random/boot_id")
            .map(|s| s.trim().to_string())
            .unwrap_or_default()
    })
}

/// The first `COMMAND_NOTE_BYTES` of a command, cut at a character boundary.
pub(super) fn command_note(command: &str) -> String {
    let mut end = command.len().min(COMMAND_NOTE_BYTES);
    while !command.is_char_boundary(end) {
        end -= 1;
    }
    command[..end].to_string()
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
    pub(super) key: u64,
    /// The first [`COMMAND_NOTE_BYTES`] of the command.
    pub command: String,
    pub(super) principal: String,
    pub(super) session: Option<String>,
    pub started_at_ms: u64,
    pub(super) started: Instant,
    /// Holds the job's process group: cancelling it kills the job.
    pub ctl: Arc<CallCtl>,
    pub out: StreamFile,
    pub err: StreamFile,
    pub(super) status: Mutex<Status>,
    /// Why whoever stopped the job stopped it; the end is reported as `killed` with it.
    pub(super) stop_reason: Mutex<Option<&'static str>>,
    /// Bytes held against the disk cap.
    pub(super) reserved: AtomicU64,
    pub(super) kill_scheduled: AtomicBool,
    /// Between the state saying ended and the end's audit record being queued: daemon
    /// shutdown waits for it too, or it could close the audit before the record arrives.
    pub(super) end_pending: AtomicBool,
    /// Set when the job's files are removed; a late write then goes nowhere.
    pub(super) dir: PathBuf,
    /// When its retention ends (once ended).
    pub(super) expires: Mutex<Option<Instant>>,
    /// Where it asks for more disk as its files grow.
    pub(super) table: Weak<JobTable>,
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

    pub(super) fn lock_status(&self) -> MutexGuard<'_, Status> {
        self.status.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub fn is_running(&self) -> bool {
        self.lock_status().state == State::Running
    }

    pub fn started(&self) -> Instant {
        self.started
    }

    pub(super) fn path(&self, ext: &str) -> PathBuf {
        self.dir.join(format!("{}.{ext}", self.id))
    }

    /// Write the record with the current status (under the status lock, so the last
    /// writer always writes the latest state).
    pub(super) fn persist(&self) {
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

    pub(super) fn remove_files(&self) {
        for ext in ["out", "err", "json", "json.tmp"] {
            let _ = fs::remove_file(self.path(ext));
        }
    }

    pub(super) fn disk_bytes(&self) -> u64 {
        self.out.disk_bytes() + self.err.disk_bytes()
    }

    /// Whether a long-poll from these offsets can be answered now.
    pub fn has_news(&self, stdout_offset: u64, stderr_offset: u64) -> bool {
        self.out.total() > stdout_offset || self.err.total() > stderr_offset || !self.is_running()
    }
}
