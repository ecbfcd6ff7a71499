//! The journal (§22): what the agent did, in order, with what the screen looked like after.
//! One per grant, and one per day for the owner's `/mcp`, under `<state dir>/journal/`:
//! every call's revealed arguments, how its approval was decided, its duration, outcome
//! and a bounded summary of its result, and a JPEG thumbnail after a call that changes a
//! screen. Bounded per journal (thumbnails go first) and kept for days after the grant.
//!
//! The call path only builds a small record and hands it to one writer thread; a
//! thumbnail is captured on the call's display thread, in order with the calls there, and
//! its record is written when it arrives.

pub mod html;
pub mod store;

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use crossbeam_channel::{Receiver, RecvTimeoutError, Sender};
use serde_json::{json, Map, Value};

use crate::base::text::head;
use crate::pool::{CallCtl, Completion};
use crate::wire::mcp::ToolOutput;

pub use store::{is_journal_id, owner_journal_id};

/// `--journal-bytes` by default: what one journal may hold on disk (bytes).
pub const DEFAULT_MAX_BYTES: u64 = crate::config::JOURNAL_BYTES_DEFAULT;
/// `--journal-days` by default: how long a journal is kept after its last record (days).
pub const DEFAULT_KEEP_DAYS: u64 = crate::config::JOURNAL_DAYS_DEFAULT;
/// Longest edge of a thumbnail (pixels).
pub const THUMBNAIL_EDGE: u32 = 640;
/// Longest summary of a result kept (characters); a longer one ends `…`.
pub const SUMMARY_CHARS: usize = 500;
/// Longest string argument kept whole (bytes); a longer one is cut and says how long it was
/// (a `file_put`'s `data`, a pasted file).
pub const ARG_STRING_BYTES: usize = 4096;
/// Most bytes of arguments one record keeps, after strings are cut.
pub const ARGS_BYTES: usize = 64 * 1024;
/// Longest tool name a refused call's record keeps (bytes): the name is the agent's.
const MAX_TOOL_NAME_BYTES: usize = 200;
/// Records waiting for the writer thread; a call completing past this waits for room.
const QUEUE: usize = 4096;
/// Longest a call's completion waits for room in a full queue before its record is
/// dropped (and counted in the next record written).
const QUEUE_WAIT: Duration = Duration::from_millis(500);
/// Journal states the writer keeps in memory; the least recently used is reloaded later.
const OPEN_STATES: usize = 256;

/// Where journals go and how much they may hold.
#[derive(Clone, Debug)]
pub struct Settings {
    /// `<state dir>/journal`; `None`: no journal is kept (no state dir).
    pub dir: Option<PathBuf>,
    /// `--journal-bytes`.
    pub max_bytes: u64,
    /// `--journal-days`, as a duration.
    pub keep: Duration,
    /// How often old journals are looked for (and once at start).
    pub sweep_every: Duration,
}

/// How a thumbnail is taken after a screen-changing call: given where to deliver the JPEG.
pub type Capture = Box<dyn FnOnce(Box<dyn FnOnce(Result<Thumb, String>) + Send>) + Send>;

/// A thumbnail: a JPEG and its size.
#[derive(Clone, Debug)]
pub struct Thumb {
    pub jpeg: Vec<u8>,
    pub width: u32,
    pub height: u32,
}

/// The result as it came, summarised on the writer thread when it is costly here.
enum Result_ {
    Summary(String, bool),
    Encoded(Arc<str>),
}

/// A record on its way to the writer.
struct Pending {
    journal: String,
    fields: Map<String, Value>,
    result: Result_,
    thumb: Option<Result<Thumb, String>>,
}

enum Msg {
    Record(Box<Pending>),
    /// Answered once everything sent before it is on disk.
    Flush(Sender<()>),
}

/// The daemon's journals. Dropping the last handle stops the writer after it wrote what
/// it had.
pub struct Journal {
    tx: Option<Sender<Msg>>,
    settings: Settings,
    join: Mutex<Option<JoinHandle<()>>>,
    live: Arc<Mutex<Option<LiveCheck>>>,
    dropped: Arc<std::sync::atomic::AtomicU64>,
}

/// Whether a grant id is still a live grant (its journal is never swept).
pub type LiveCheck = Arc<dyn Fn(&str) -> bool + Send + Sync>;

impl std::fmt::Debug for Journal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Journal")
            .field("dir", &self.settings.dir)
            .finish_non_exhaustive()
    }
}

impl Journal {
    /// Start the writer thread (none without a dir).
    pub fn start(settings: Settings) -> std::io::Result<Arc<Journal>> {
        let live: Arc<Mutex<Option<LiveCheck>>> = Arc::new(Mutex::new(None));
        let dropped = Arc::new(std::sync::atomic::AtomicU64::new(0));
        let Some(dir) = settings.dir.clone() else {
            return Ok(Arc::new(Journal {
                tx: None,
                settings,
                join: Mutex::new(None),
                live,
                dropped,
            }));
        };
        let (tx, rx) = crossbeam_channel::bounded(QUEUE);
        let mut writer = Writer {
            root: dir,
            max_bytes: settings.max_bytes,
            keep: settings.keep,
            sweep_every: settings.sweep_every,
            states: HashMap::new(),
            live: Arc::clone(&live),
            dropped: Arc::clone(&dropped),
        };
        let join = std::thread::Builder::new()
            .name("journal".into())
            .spawn(move || {
                // A panic in the writer ends the journal, never the daemon; say so once.
                if std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| writer.run(rx)))
                    .is_err()
                {
                    log::error!(
                        "the journal writer stopped after a panic; no more records are kept"
                    );
                }
            })?;
        Ok(Arc::new(Journal {
            tx: Some(tx),
            settings,
            join: Mutex::new(Some(join)),
            live,
            dropped,
        }))
    }

    /// A journal that keeps nothing (tests, and a daemon without a state dir).
    pub fn disabled() -> Arc<Journal> {
        Journal::start(Settings {
            dir: None,
            max_bytes: DEFAULT_MAX_BYTES,
            keep: Duration::from_secs(DEFAULT_KEEP_DAYS * 86_400),
            sweep_every: Duration::from_secs(3600),
        })
        .expect("no thread to start")
    }

    pub fn settings(&self) -> &Settings {
        &self.settings
    }

    /// Tell the sweeper which grants are live (their journals are kept however old).
    pub fn set_live_check(&self, live: LiveCheck) {
        *self.live.lock().unwrap_or_else(|e| e.into_inner()) = Some(live);
    }

    /// Wait until every record sent so far is on disk (or `wait` has passed): a reader
    /// then sees every call that has ended. Thumbnails still being taken come later.
    pub fn flush(&self, wait: Duration) -> bool {
        let Some(tx) = &self.tx else { return true };
        let (ack, done) = crossbeam_channel::bounded(1);
        if tx.send_timeout(Msg::Flush(ack), wait).is_err() {
            return false;
        }
        done.recv_timeout(wait).is_ok()
    }

    /// Journal the call when `done` is delivered: wraps it. `capture` takes the thumbnail
    /// after a call that changes a screen and succeeded.
    pub fn track(
        self: &Arc<Self>,
        grant: Option<&str>,
        tool: &str,
        arguments: &Value,
        ctl: &Arc<CallCtl>,
        capture: Option<Capture>,
        done: Completion,
    ) -> Completion {
        if self.tx.is_none() {
            return done;
        }
        let started_at = SystemTime::now();
        let started = Instant::now();
        let journal = match grant {
            Some(id) => id.to_string(),
            None => owner_journal_id(unix_secs(started_at)),
        };
        let tool = tool.to_string();
        let arguments = bounded_arguments(arguments);
        let ctl = Arc::clone(ctl);
        let me = Arc::clone(self);
        Completion::new(move |output| {
            let duration = started.elapsed();
            let record = move |output: &ToolOutput| {
                let outcome = output.outcome();
                let mut fields = Map::new();
                fields.insert("tool".into(), json!(tool));
                fields.insert("arguments".into(), arguments);
                fields.insert("started_at".into(), json!(rfc3339_ms(started_at)));
                fields.insert("duration_ms".into(), json!(duration.as_millis() as u64));
                fields.insert("outcome".into(), json!(outcome.as_str()));
                if let Some(approval) = ctl.approval() {
                    fields.insert("approval".into(), approval);
                }
                if let Some(reason) = ctl.stop_reason() {
                    fields.insert("stopped".into(), json!(reason));
                }
                let pending = Pending {
                    journal,
                    fields,
                    result: summarise(output),
                    thumb: None,
                };
                (pending, outcome == crate::wire::mcp::Outcome::Ok)
            };
            match output {
                // Made when the connection has room for it (a bash's output): journalled
                // then, from what the agent is sent.
                ToolOutput::Later(later) => {
                    let wrapped = crate::wire::mcp::Later::new(move || {
                        let produced = later.run().produced();
                        me.send(record(&produced).0);
                        produced
                    });
                    done.complete(ToolOutput::Later(wrapped));
                }
                output => {
                    let (pending, ok) = record(&output);
                    match capture.filter(|_| ok) {
                        // The thumbnail is queued behind the call on its display thread before
                        // the agent hears back, so the agent's next call there comes after it.
                        Some(capture) => {
                            let me2 = Arc::clone(&me);
                            capture(Box::new(move |thumb| {
                                me2.send(Pending {
                                    thumb: Some(thumb),
                                    ..pending
                                })
                            }));
                            done.complete(output);
                        }
                        // Journalled before the agent hears back: its next call, even one
                        // refused at once on the connection's thread, comes after it.
                        None => {
                            me.send(pending);
                            done.complete(output);
                        }
                    }
                }
            }
        })
    }

    /// A call refused before it was started (a tool this connection may not use): kept
    /// too, since an attempt is what an auditor looks for.
    pub fn refused(&self, grant: Option<&str>, tool: &str, outcome: crate::wire::mcp::Outcome) {
        if self.tx.is_none() {
            return;
        }
        let now = SystemTime::now();
        let mut name = head(tool, MAX_TOOL_NAME_BYTES).to_string();
        if name.len() < tool.len() {
            name.push('…');
        }
        let mut fields = Map::new();
        fields.insert("tool".into(), json!(name));
        fields.insert("arguments".into(), Value::Null);
        fields.insert("started_at".into(), json!(rfc3339_ms(now)));
        fields.insert("duration_ms".into(), json!(0));
        fields.insert("outcome".into(), json!(outcome.as_str()));
        self.send(Pending {
            journal: match grant {
                Some(id) => id.to_string(),
                None => owner_journal_id(unix_secs(now)),
            },
            fields,
            result: Result_::Summary(
                "refused: not a tool this connection may use (answered as an unknown tool; it did not run)".into(),
                false,
            ),
            thumb: None,
        });
    }

    fn send(&self, pending: Pending) {
        let Some(tx) = &self.tx else { return };
        if tx
            .send_timeout(Msg::Record(Box::new(pending)), QUEUE_WAIT)
            .is_err()
        {
            self.dropped
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        }
    }
}

impl Drop for Journal {
    fn drop(&mut self) {
        self.tx = None;
        if let Some(join) = self.join.lock().unwrap_or_else(|e| e.into_inner()).take() {
            let _ = join.join();
        }
    }
}

/// The writer thread: the only one that writes journal files.
struct Writer {
    root: PathBuf,
    max_bytes: u64,
    keep: Duration,
    sweep_every: Duration,
    states: HashMap<String, store::State>,
    live: Arc<Mutex<Option<LiveCheck>>>,
    dropped: Arc<std::sync::atomic::AtomicU64>,
}

impl Writer {
    fn run(&mut self, rx: Receiver<Msg>) {
        let mut next_sweep = Instant::now();
        loop {
            if Instant::now() >= next_sweep {
                self.sweep();
                next_sweep = Instant::now() + self.sweep_every;
            }
            let wait = next_sweep.saturating_duration_since(Instant::now());
            let first = match rx.recv_timeout(wait) {
                Ok(m) => m,
                Err(RecvTimeoutError::Timeout) => continue,
                Err(RecvTimeoutError::Disconnected) => return,
            };
            // Everything waiting goes out in one write per journal.
            let mut batch: Vec<Pending> = Vec::new();
            let mut acks = Vec::new();
            for msg in std::iter::once(first).chain(rx.try_iter()) {
                match msg {
                    Msg::Record(p) => batch.push(*p),
                    Msg::Flush(ack) => acks.push(ack),
                }
            }
            self.write(batch);
            for ack in acks {
                let _ = ack.send(());
            }
        }
    }

    fn sweep(&mut self) {
        let live = self.live.lock().unwrap_or_else(|e| e.into_inner()).clone();
        let now = SystemTime::now();
        let removed = store::sweep(&self.root, self.keep, now, |id| {
            live.as_ref().is_some_and(|live| live(id))
        });
        for id in &removed {
            self.states.remove(id);
        }
        if !removed.is_empty() {
            log::info!(
                "journal: removed {} journal(s) older than --journal-days",
                removed.len()
            );
        }
    }

    fn write(&mut self, batch: Vec<Pending>) {
        // Per journal: its lines, and the thumbnails they name.
        type Batch = (String, Vec<u8>, Vec<(u64, Thumb)>);
        let mut by_journal: Vec<Batch> = Vec::new();
        for p in batch {
            let Pending {
                journal,
                mut fields,
                result,
                thumb,
            } = p;
            if !self.states.contains_key(&journal) {
                if self.states.len() >= OPEN_STATES {
                    // Forget one: it is read back from disk when next used.
                    if let Some(k) = self.states.keys().next().cloned() {
                        self.states.remove(&k);
                    }
                }
                match store::State::load(&self.root, &journal) {
                    Ok(state) => {
                        self.states.insert(journal.clone(), state);
                    }
                    Err(e) => {
                        log::warn!("journal {journal}: cannot open it ({e}); a record is lost");
                        continue;
                    }
                }
            }
            let state = self.states.get_mut(&journal).expect("just loaded");
            let seq = state.next_seq;
            state.next_seq += 1;
            let (summary, cut) = match result {
                Result_::Summary(s, cut) => (s, cut),
                Result_::Encoded(json) => summarise_json(&json),
            };
            let mut line = Map::new();
            line.insert("seq".into(), json!(seq));
            line.append(&mut fields);
            line.insert("summary".into(), json!(summary));
            if cut {
                line.insert("summary_cut".into(), json!(true));
            }
            let lost = self.dropped.swap(0, std::sync::atomic::Ordering::Relaxed);
            if lost > 0 {
                line.insert("records_lost_before".into(), json!(lost));
            }
            let mut thumbs = Vec::new();
            match thumb {
                Some(Ok(t)) => {
                    line.insert(
                        "thumbnail".into(),
                        json!({"file": store::thumb_name(seq), "width": t.width,
                               "height": t.height, "bytes": t.jpeg.len()}),
                    );
                    thumbs.push((seq, t));
                }
                Some(Err(why)) => {
                    line.insert("thumbnail_error".into(), json!(why));
                }
                None => {}
            }
            let mut text = serde_json::to_vec(&Value::Object(line)).unwrap_or_default();
            text.push(b'\n');
            match by_journal.iter_mut().find(|(j, _, _)| *j == journal) {
                Some((_, bytes, t)) => {
                    bytes.extend_from_slice(&text);
                    t.extend(thumbs);
                }
                None => by_journal.push((journal, text, thumbs)),
            }
        }
        for (journal, lines, thumbs) in by_journal {
            let Some(state) = self.states.get_mut(&journal) else {
                continue;
            };
            if let Err(e) = state.append(&lines, thumbs, self.max_bytes) {
                log::warn!("journal {journal}: cannot write ({e}); its latest records are lost");
                self.states.remove(&journal);
            }
        }
    }
}

/// The arguments as journalled: strings over [`ARG_STRING_BYTES`] cut (saying how long),
/// and the whole at most [`ARGS_BYTES`].
pub fn bounded_arguments(arguments: &Value) -> Value {
    fn cut(v: &Value) -> Value {
        match v {
            Value::String(s) if s.len() > ARG_STRING_BYTES => {
                let kept = head(s, ARG_STRING_BYTES);
                json!(format!(
                    "{kept}… (+{} bytes not kept)",
                    s.len() - kept.len()
                ))
            }
            Value::Array(a) => Value::Array(a.iter().map(cut).collect()),
            Value::Object(o) => Value::Object(o.iter().map(|(k, v)| (k.clone(), cut(v))).collect()),
            other => other.clone(),
        }
    }
    // The common case (small arguments) costs one pass and no copy of a long string.
    let out = cut(arguments);
    let size = crate::base::text::json_len(&out);
    if size <= ARGS_BYTES {
        out
    } else {
        json!(format!("[{size} bytes of arguments, not kept]"))
    }
}

/// A summary of a result: its text, at most [`SUMMARY_CHARS`], and what else it held.
fn summarise(output: &ToolOutput) -> Result_ {
    match output {
        ToolOutput::Result(v) => {
            let (s, cut) = summarise_value(v);
            Result_::Summary(s, cut)
        }
        ToolOutput::Encoded { json, .. } => Result_::Encoded(Arc::clone(json)),
        ToolOutput::Json { json, .. } => {
            // Large outputs (a job's log): only the head is looked at.
            let looked_at = head(json, 64 * 1024);
            let (s, cut) = summarise_json(looked_at);
            Result_::Summary(s, cut || looked_at.len() < json.len())
        }
        ToolOutput::InvalidParams(m) => {
            let (s, cut) = clip(&format!("invalid arguments: {m}"));
            Result_::Summary(s, cut)
        }
        ToolOutput::RpcError { message, .. } => {
            let (s, cut) = clip(message);
            Result_::Summary(s, cut)
        }
        ToolOutput::NotApproved(m) => {
            let (s, cut) = clip(m);
            Result_::Summary(s, cut)
        }
        // Never reached: a later output is journalled once produced.
        ToolOutput::Later(_) => Result_::Summary(String::new(), false),
    }
}

fn summarise_json(json: &str) -> (String, bool) {
    // Read as the few fields a summary shows, borrowed from the text: a `file_get`'s 4 MiB
    // blob is skipped over, never copied into a `Value` (issue 36).
    if let Ok(result) = serde_json::from_str::<ResultHead<'_>>(json) {
        return summarise_blocks(result.content.iter().map(|b| Shown {
            kind: b.kind.as_deref(),
            text: b.text.as_deref(),
            mime: b.mime.as_deref(),
            data_len: b.data.as_ref().map(|d| d.0),
        }));
    }
    match serde_json::from_str::<Value>(json) {
        Ok(v) => summarise_value(&v),
        // A cut head: its first text, as far as it goes.
        Err(_) => match json.find("\"text\":\"") {
            Some(i) => {
                let rest = &json[i + 7..];
                let literal: String = first_string_literal(rest);
                let (s, _) = clip(&literal);
                (s, true)
            }
            None => (String::new(), true),
        },
    }
}

/// The JSON string literal at the head of `text` (which starts with its `"`), decoded as
/// far as it is whole.
fn first_string_literal(text: &str) -> String {
    let mut end = None;
    let mut escaped = false;
    for (i, c) in text.char_indices().skip(1) {
        match c {
            _ if escaped => escaped = false,
            '\\' => escaped = true,
            '"' => {
                end = Some(i + 1);
                break;
            }
            _ => {}
        }
    }
    let literal = match end {
        Some(end) => text[..end].to_string(),
        None => {
            // Cut inside it: close it at a point that is not inside an escape.
            let mut t = text.to_string();
            while t.ends_with('\\') {
                t.pop();
            }
            t.push('"');
            t
        }
    };
    serde_json::from_str::<String>(&literal).unwrap_or_default()
}

fn summarise_value(v: &Value) -> (String, bool) {
    let content = v.get("content").and_then(Value::as_array);
    summarise_blocks(content.into_iter().flatten().map(|block| {
        let str_of = |k: &str| block.get(k).and_then(Value::as_str);
        Shown {
            kind: str_of("type"),
            text: str_of("text"),
            mime: str_of("mimeType"),
            data_len: str_of("data").map(str::len),
        }
    }))
}

/// What a summary reads of one content block (a field of another type counts as absent).
struct Shown<'a> {
    kind: Option<&'a str>,
    text: Option<&'a str>,
    mime: Option<&'a str>,
    data_len: Option<usize>,
}

fn summarise_blocks<'a>(blocks: impl Iterator<Item = Shown<'a>>) -> (String, bool) {
    let mut parts: Vec<String> = Vec::new();
    for block in blocks {
        match block.kind {
            Some("text") => parts.push(block.text.unwrap_or_default().to_string()),
            Some("image") => {
                let mime = block.mime.unwrap_or("image");
                let bytes = block.data_len.map_or(0, |len| len / 4 * 3);
                parts.push(format!("[{mime}, about {bytes} bytes]"));
            }
            Some(other) => parts.push(format!("[{other}]")),
            None => {}
        }
        if parts.iter().map(String::len).sum::<usize>() > SUMMARY_CHARS * 4 {
            break;
        }
    }
    clip(&parts.join("\n"))
}

/// A tool result as [`summarise_json`] reads it: every other field is skipped unread.
#[derive(serde::Deserialize)]
struct ResultHead<'a> {
    #[serde(default, borrow)]
    content: Vec<BlockHead<'a>>,
}

#[derive(serde::Deserialize)]
struct BlockHead<'a> {
    #[serde(rename = "type", default, borrow)]
    kind: Option<std::borrow::Cow<'a, str>>,
    #[serde(default, borrow)]
    text: Option<std::borrow::Cow<'a, str>>,
    #[serde(rename = "mimeType", default, borrow)]
    mime: Option<std::borrow::Cow<'a, str>>,
    #[serde(default)]
    data: Option<StrLen>,
}

/// A string's length, read without keeping the string.
struct StrLen(usize);

impl<'de> serde::Deserialize<'de> for StrLen {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Len;
        impl serde::de::Visitor<'_> for Len {
            type Value = StrLen;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a string")
            }
            fn visit_str<E: serde::de::Error>(self, s: &str) -> Result<StrLen, E> {
                Ok(StrLen(s.len()))
            }
        }
        d.deserialize_str(Len)
    }
}

/// `text` cut after [`SUMMARY_CHARS`] characters (marked `…`), and whether it was.
fn clip(text: &str) -> (String, bool) {
    let cut_at = if text.len() <= SUMMARY_CHARS {
        None
    } else if text.as_bytes()[..=SUMMARY_CHARS].is_ascii() {
        // Most output is ASCII: there the N-th character starts at byte N, found without
        // decoding characters one by one (every call's summary is clipped, issue 38).
        Some(SUMMARY_CHARS)
    } else {
        text.char_indices().nth(SUMMARY_CHARS).map(|(i, _)| i)
    };
    match cut_at {
        Some(i) => (format!("{}…", &text[..i]), true),
        None => (text.to_string(), false),
    }
}

fn unix_secs(t: SystemTime) -> u64 {
    t.duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs())
}

/// RFC 3339 with milliseconds, UTC.
fn rfc3339_ms(t: SystemTime) -> String {
    let d = t.duration_since(UNIX_EPOCH).unwrap_or_default();
    let whole = crate::base::timefmt::rfc3339(d.as_secs());
    format!("{}.{:03}Z", whole.trim_end_matches('Z'), d.subsec_millis())
}

#[cfg(test)]
mod tests;
