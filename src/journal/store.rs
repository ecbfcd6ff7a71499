//! A journal on disk: `<root>/<id>/journal.jsonl`, one record a line with a rising `seq`,
//! and `<root>/<id>/<seq>.jpg` thumbnails beside it; reading it back, keeping it within
//! its bound (thumbnails go first, then the oldest records, which leave a line saying
//! so), and sweeping old ones. Only the writer thread writes; readers read whole lines.

use std::collections::VecDeque;
use std::fs::{self, OpenOptions};
use std::io::{self, BufRead, BufReader, Read, Seek, SeekFrom, Write};
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use base64::Engine as _;
use serde_json::{json, Map, Value};

use super::Thumb;
use crate::base::statedir::{open_state_file, DIR_MODE, FILE_MODE};

/// The records of one journal.
pub const FILE: &str = "journal.jsonl";
/// What the owner's `/mcp` journals are called: `mcp-` and the UTC day.
const OWNER_PREFIX: &str = "mcp-";
/// Bytes read from a journal's end to find its last `seq`.
const TAIL_BYTES: u64 = 256 * 1024;
/// A compaction keeps the newest records that fit in this share of the bound, so it does
/// not run again at the next record.
const COMPACT_TO: f64 = 0.75;

/// A grant id, or `mcp-YYYY-MM-DD` (the owner's `/mcp` calls of that UTC day).
pub fn is_journal_id(s: &str) -> bool {
    crate::base::ids::is_id(s) || is_owner_day(s)
}

fn is_owner_day(s: &str) -> bool {
    let Some(day) = s.strip_prefix(OWNER_PREFIX) else {
        return false;
    };
    let b = day.as_bytes();
    b.len() == 10
        && b.iter().enumerate().all(|(i, c)| match i {
            4 | 7 => *c == b'-',
            _ => c.is_ascii_digit(),
        })
}

/// The owner's journal for the UTC day of `unix`.
pub fn owner_journal_id(unix: u64) -> String {
    format!(
        "{OWNER_PREFIX}{}",
        &crate::base::timefmt::rfc3339(unix)[..10]
    )
}

pub fn thumb_name(seq: u64) -> String {
    format!("{seq}.jpg")
}

fn make_dir(dir: &Path) -> io::Result<()> {
    match fs::symlink_metadata(dir) {
        Ok(m) if m.file_type().is_dir() => Ok(()),
        Ok(_) => Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("{} is not a directory", dir.display()),
        )),
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            fs::DirBuilder::new().mode(DIR_MODE).create(dir)
        }
        Err(e) => Err(e),
    }
}

/// What the writer knows of one journal.
#[derive(Debug)]
pub struct State {
    dir: PathBuf,
    pub next_seq: u64,
    /// Records and thumbnails, on disk (bytes).
    bytes: u64,
    /// Thumbnails on disk, oldest first: `(seq, bytes)`.
    thumbs: VecDeque<(u64, u64)>,
}

impl State {
    /// Open (or create) journal `id` under `root`, reading where it left off.
    pub fn load(root: &Path, id: &str) -> io::Result<State> {
        if !is_journal_id(id) {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "not a journal id",
            ));
        }
        make_dir(root)?;
        let dir = root.join(id);
        make_dir(&dir)?;
        let mut state = State {
            next_seq: 1,
            bytes: 0,
            thumbs: VecDeque::new(),
            dir,
        };
        match open_state_file(OpenOptions::new().read(true), &state.dir.join(FILE)) {
            Ok(mut file) => {
                let len = file.metadata()?.len();
                state.bytes = len;
                let from = len.saturating_sub(TAIL_BYTES);
                file.seek(SeekFrom::Start(from))?;
                let mut tail = Vec::new();
                file.read_to_end(&mut tail)?;
                let last = tail
                    .split(|b| *b == b'\n')
                    .filter_map(|line| serde_json::from_slice::<Value>(line).ok())
                    .filter_map(|v| v.get("seq").and_then(Value::as_u64))
                    .max();
                state.next_seq = last.map_or(1, |s| s + 1);
            }
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(e) => return Err(e),
        }
        let mut thumbs: Vec<(u64, u64)> = fs::read_dir(&state.dir)?
            .filter_map(Result::ok)
            .filter_map(|e| {
                let name = e.file_name().into_string().ok()?;
                let seq: u64 = name.strip_suffix(".jpg")?.parse().ok()?;
                let meta = e.metadata().ok()?;
                meta.file_type().is_file().then_some((seq, meta.len()))
            })
            .collect();
        thumbs.sort_unstable();
        state.bytes += thumbs.iter().map(|t| t.1).sum::<u64>();
        state.thumbs = thumbs.into();
        Ok(state)
    }

    /// Write `thumbs`, then append `lines`; then keep within `max_bytes`.
    pub fn append(
        &mut self,
        lines: &[u8],
        thumbs: Vec<(u64, Thumb)>,
        max_bytes: u64,
    ) -> io::Result<()> {
        for (seq, t) in thumbs {
            let path = self.dir.join(thumb_name(seq));
            let mut f = OpenOptions::new()
                .write(true)
                .create_new(true)
                .mode(FILE_MODE)
                .open(&path)?;
            f.write_all(&t.jpeg)?;
            self.thumbs.push_back((seq, t.jpeg.len() as u64));
            self.bytes += t.jpeg.len() as u64;
        }
        let mut f = open_state_file(
            OpenOptions::new().append(true).create(true).mode(FILE_MODE),
            &self.dir.join(FILE),
        )?;
        f.write_all(lines)?;
        self.bytes += lines.len() as u64;
        self.bound(max_bytes)
    }

    fn bound(&mut self, max_bytes: u64) -> io::Result<()> {
        while self.bytes > max_bytes {
            let Some((seq, size)) = self.thumbs.pop_front() else {
                break;
            };
            match fs::remove_file(self.dir.join(thumb_name(seq))) {
                Ok(()) => {}
                Err(e) if e.kind() == io::ErrorKind::NotFound => {}
                Err(e) => return Err(e),
            }
            self.bytes = self.bytes.saturating_sub(size);
        }
        if self.bytes > max_bytes {
            self.compact(max_bytes)?;
        }
        Ok(())
    }

    /// Drop the oldest records so the rest fit in [`COMPACT_TO`] of the bound; one line
    /// in their place says how many went (it carries the last dropped `seq`, so a reader
    /// asking `?since=` sees it once). One pass over the file with one line in memory and
    /// the kept part copied as it is: reading the whole journal into memory (64 MiB by
    /// default) left the daemon holding ~100 MiB that malloc never gave back, and every
    /// later spawn paid for those pages in `fork` (issue 36).
    fn compact(&mut self, max_bytes: u64) -> io::Result<()> {
        let path = self.dir.join(FILE);
        let file = open_state_file(OpenOptions::new().read(true), &path)?;
        let len = file.metadata()?.len();
        let target = (max_bytes as f64 * COMPACT_TO) as u64;
        // The newest whole lines within `target` bytes are kept: they begin at the first
        // line that starts at or after this offset.
        let cut = len.saturating_sub(target);
        let mut reader = BufReader::new(file);
        let mut line = Vec::new();
        let mut offset = 0u64;
        let mut dropped = 0u64;
        let mut before = 0u64;
        let mut first = None;
        let mut last = None;
        while offset < cut {
            line.clear();
            let n = reader.read_until(b'\n', &mut line)?;
            if n == 0 {
                break;
            }
            offset += n as u64;
            let text = line.strip_suffix(b"\n").unwrap_or(&line);
            // Three fields read, the rest skipped unbuilt (a line the parser refuses
            // counts as one dropped record).
            let v: Dropped = serde_json::from_slice(text).unwrap_or_default();
            match v.records.filter(|_| v.kind.as_deref() == Some("dropped")) {
                Some(n) => before += n,
                None => dropped += 1,
            }
            if let Some(seq) = v.seq {
                first.get_or_insert(seq);
                last = Some(seq);
            }
        }
        let marker = json!({
            "seq": last.unwrap_or(0),
            "kind": "dropped",
            "records": dropped + before,
            "first_seq": first,
            "reason": "the journal reached its bound (--journal-bytes); the oldest records went, after every thumbnail",
        });
        let tmp = self.dir.join(format!("{FILE}.tmp"));
        let _ = fs::remove_file(&tmp);
        let out = OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(FILE_MODE)
            .open(&tmp)?;
        let mut out = io::BufWriter::new(out);
        let mut head = serde_json::to_vec(&marker).unwrap_or_default();
        head.push(b'\n');
        out.write_all(&head)?;
        // The rest as it is (the reader's buffer first, then the file); a last line cut
        // short by a crash gets its newline, as every line has.
        let mut tail = LastByte(&mut out, None);
        let copied = io::copy(&mut reader, &mut tail)?;
        let newline = matches!(tail.1, Some(b) if b != b'\n');
        if newline {
            out.write_all(b"\n")?;
        }
        out.into_inner().map_err(io::IntoInnerError::into_error)?;
        fs::rename(&tmp, &path)?;
        self.bytes = head.len() as u64
            + copied
            + u64::from(newline)
            + self.thumbs.iter().map(|t| t.1).sum::<u64>();
        Ok(())
    }
}

/// What a compaction reads of a line it drops: its `seq`, and whether it is an earlier
/// compaction's line (and how many records that one stood for). A field of another type
/// reads as absent, as it did from a `Value`.
#[derive(Default, serde::Deserialize)]
struct Dropped {
    #[serde(default, deserialize_with = "lenient")]
    seq: Option<u64>,
    #[serde(default, deserialize_with = "lenient")]
    kind: Option<String>,
    #[serde(default, deserialize_with = "lenient")]
    records: Option<u64>,
}

/// `Some` when the field has the wanted type, else `None` (never an error).
fn lenient<'de, D, T>(d: D) -> Result<Option<T>, D::Error>
where
    D: serde::Deserializer<'de>,
    T: serde::de::DeserializeOwned,
{
    let v = <Value as serde::Deserialize>::deserialize(d)?;
    Ok(serde_json::from_value(v).ok())
}

/// A writer that passes everything on and remembers the last byte it was given.
struct LastByte<'a, W: Write>(&'a mut W, Option<u8>);

impl<W: Write> Write for LastByte<'_, W> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let n = self.0.write(buf)?;
        if n > 0 {
            self.1 = Some(buf[n - 1]);
        }
        Ok(n)
    }

    fn flush(&mut self) -> io::Result<()> {
        self.0.flush()
    }
}

/// Records of journal `id` after `since`, as JSON lines, at most about `max_bytes`; with
/// `thumbnails`, each kept thumbnail inline as a `data:` URL (one gone to the bound says
/// `"dropped": true`). `None`: no such journal. The second value is set when the answer
/// stopped early: the `seq` to ask `since=` next.
pub fn read_since(
    root: &Path,
    id: &str,
    since: u64,
    max_bytes: usize,
    thumbnails: bool,
) -> io::Result<Option<(Vec<u8>, Option<u64>)>> {
    let mut out = Vec::new();
    let mut last = 0;
    let mut more = None;
    let found = scan(root, id, since, thumbnails, |seq, record| {
        let mut text = serde_json::to_vec(&record).unwrap_or_default();
        text.push(b'\n');
        if !out.is_empty() && out.len() + text.len() > max_bytes {
            more = Some(last);
            return false;
        }
        out.extend_from_slice(&text);
        last = seq;
        true
    })?;
    Ok(found.then_some((out, more)))
}

/// Every record of journal `id`, thumbnails inline, in order: what `journal.html` is made
/// from. `None`: no such journal.
pub fn all_records(root: &Path, id: &str) -> io::Result<Option<Vec<Value>>> {
    let mut records = Vec::new();
    let found = scan(root, id, 0, true, |_, record| {
        records.push(record);
        true
    })?;
    Ok(found.then_some(records))
}

/// Hand each record after `since` to `visit` (with its `seq`) until it says stop.
/// `false`: no such journal.
fn scan(
    root: &Path,
    id: &str,
    since: u64,
    thumbnails: bool,
    mut visit: impl FnMut(u64, Value) -> bool,
) -> io::Result<bool> {
    if !is_journal_id(id) {
        return Ok(false);
    }
    let dir = root.join(id);
    let file = match open_state_file(OpenOptions::new().read(true), &dir.join(FILE)) {
        Ok(f) => f,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(dir.is_dir()),
        Err(e) => return Err(e),
    };
    for line in BufReader::new(file).split(b'\n') {
        let line = line?;
        let Ok(Value::Object(mut record)) = serde_json::from_slice::<Value>(&line) else {
            continue;
        };
        let seq = record.get("seq").and_then(Value::as_u64).unwrap_or(0);
        if seq <= since {
            continue;
        }
        if thumbnails {
            inline_thumbnail(&dir, &mut record);
        }
        if !visit(seq, Value::Object(record)) {
            break;
        }
    }
    Ok(true)
}

fn inline_thumbnail(dir: &Path, record: &mut Map<String, Value>) {
    let Some(Value::Object(thumb)) = record.get_mut("thumbnail") else {
        return;
    };
    let Some(name) = thumb.get("file").and_then(Value::as_str) else {
        return;
    };
    // Only names this module writes: a record cannot point outside its journal.
    let named_by_us = name
        .strip_suffix(".jpg")
        .is_some_and(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()));
    let bytes = named_by_us
        .then(|| open_state_file(OpenOptions::new().read(true), &dir.join(name)).ok())
        .flatten()
        .and_then(|mut f| {
            let mut b = Vec::new();
            f.read_to_end(&mut b).ok().map(|_| b)
        });
    match bytes {
        Some(b) => {
            let data = base64::engine::general_purpose::STANDARD.encode(b);
            thumb.insert(
                "data_url".into(),
                json!(format!("data:image/jpeg;base64,{data}")),
            );
        }
        None => {
            thumb.insert("dropped".into(), json!(true));
        }
    }
}

/// Every journal under `root`, newest first: `id`, `grant` (or null for the owner's),
/// `day` for the owner's, `bytes`, `updated_at`.
pub fn list(root: &Path) -> Vec<Value> {
    let Ok(entries) = fs::read_dir(root) else {
        return Vec::new();
    };
    let mut out: Vec<(SystemTime, Value)> = entries
        .filter_map(Result::ok)
        .filter_map(|e| {
            let id = e.file_name().into_string().ok()?;
            if !is_journal_id(&id) || !e.file_type().ok()?.is_dir() {
                return None;
            }
            let mut bytes = 0u64;
            let mut updated = SystemTime::UNIX_EPOCH;
            for f in fs::read_dir(e.path()).ok()?.filter_map(Result::ok) {
                if let Ok(m) = f.metadata() {
                    bytes += m.len();
                    if let Ok(t) = m.modified() {
                        updated = updated.max(t);
                    }
                }
            }
            let unix = updated
                .duration_since(SystemTime::UNIX_EPOCH)
                .map_or(0, |d| d.as_secs());
            let owner = is_owner_day(&id);
            let row = json!({
                "id": id,
                "grant": if owner { Value::Null } else { json!(id) },
                "day": if owner { json!(&id[OWNER_PREFIX.len()..]) } else { Value::Null },
                "bytes": bytes,
                "updated_at": crate::base::timefmt::rfc3339(unix),
            });
            Some((updated, row))
        })
        .collect();
    out.sort_by_key(|row| std::cmp::Reverse(row.0));
    out.into_iter().map(|(_, v)| v).collect()
}

/// Remove the journals whose last write is older than `keep` (an owner day's: whose day
/// ended longer ago than that), except a live grant's. Returns the ids removed.
pub fn sweep(
    root: &Path,
    keep: Duration,
    now: SystemTime,
    live: impl Fn(&str) -> bool,
) -> Vec<String> {
    let Ok(entries) = fs::read_dir(root) else {
        return Vec::new();
    };
    let mut removed = Vec::new();
    for e in entries.filter_map(Result::ok) {
        let Ok(id) = e.file_name().into_string() else {
            continue;
        };
        if !is_journal_id(&id) || live(&id) {
            continue;
        }
        let Ok(meta) = fs::symlink_metadata(e.path()) else {
            continue;
        };
        if !meta.file_type().is_dir() {
            continue;
        }
        let last = fs::symlink_metadata(e.path().join(FILE))
            .and_then(|m| m.modified())
            .or_else(|_| meta.modified())
            .unwrap_or(now);
        let old = now.duration_since(last).is_ok_and(|age| age > keep);
        if old && fs::remove_dir_all(e.path()).is_ok() {
            removed.push(id);
        }
    }
    removed
}
