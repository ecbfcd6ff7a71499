//! `GET /audit?grant=<id>&limit=N`: tool-call records read back from the tail of
//! `audit.jsonl` and its rotated copies, newest first, for the console's Activity view.
//! Reads backwards in chunks, so the newest calls cost the same however long the file is;
//! the bytes read, the line kept and the reply are each bounded.

use std::fs::{File, OpenOptions};
use std::io::{self, Read, Seek, SeekFrom};
use std::os::unix::fs::MetadataExt;
use std::path::Path;

use serde_json::{json, Map, Value};

use crate::audit::FILE_NAME;
use crate::base::statedir::open_state_file;
use crate::grants::persist::is_grant_id;

/// Records an answer carries when `limit` is not given.
pub const DEFAULT_LIMIT: usize = 50;
/// Most records one answer may carry; a `limit` past it is `400`.
pub const MAX_LIMIT: usize = 500;
/// The `400` for a `limit` outside 1…[`MAX_LIMIT`].
pub const LIMIT_ERROR: &str = "limit must be a whole number 1...500";
/// Rotated copies looked at (`audit.jsonl.1` …); the writer keeps 5.
const MAX_ROTATED_FILES: usize = 99;
/// The `400` for a `grant` that is not a grant id.
pub const GRANT_ERROR: &str = "grant must be a grant id (a lowercase UUID)";

/// The bounds of one read-back. [`Bounds::SERVED`] is what `GET /audit` uses; tests shrink it.
#[derive(Clone, Copy, Debug)]
pub struct Bounds {
    /// Most bytes of audit files read per request, newest first (bytes): a grant with few
    /// calls among many others cannot make one request read all six files (60 MiB).
    pub scan_bytes: u64,
    /// Bytes read per step backwards.
    pub chunk_bytes: usize,
    /// Longest line kept (bytes); a longer one (only `--audit-args` makes them) is skipped.
    pub line_bytes: usize,
    /// Most bytes of records in one answer; past it the answer stops early with `more`.
    pub reply_bytes: usize,
}

impl Bounds {
    pub const SERVED: Bounds = Bounds {
        scan_bytes: 16 << 20,
        chunk_bytes: 64 << 10,
        line_bytes: 2 << 20,
        reply_bytes: 1 << 20,
    };
}

/// What `GET /audit` was asked.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Query {
    /// Only this grant's calls; `None`: every call, `/mcp` ones included.
    pub grant: Option<String>,
    pub limit: usize,
}

impl Query {
    /// Parse the query string (the part after `?`, or empty). Unknown parameters are
    /// ignored, as unknown body fields are elsewhere; a repeated one counts once, the last.
    pub fn parse(query: &str) -> Result<Query, String> {
        let mut q = Query {
            grant: None,
            limit: DEFAULT_LIMIT,
        };
        for pair in query.split('&').filter(|p| !p.is_empty()) {
            let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
            match key {
                // Neither value has a character that needs percent-encoding, so an encoded
                // one is as wrong as any other stray byte.
                "grant" if is_grant_id(value) => q.grant = Some(value.to_string()),
                "grant" => return Err(GRANT_ERROR.to_string()),
                "limit" => {
                    q.limit = match value.parse::<usize>() {
                        Ok(n) if (1..=MAX_LIMIT).contains(&n) => n,
                        _ => return Err(LIMIT_ERROR.to_string()),
                    }
                }
                _ => {}
            }
        }
        Ok(q)
    }
}

/// The answer: `{"calls":[…newest first…],"more":bool}`. `more` is true when the read
/// stopped before the oldest record (the limit, the reply cap or the scan bound): older
/// calls may exist. `args` are kept only when `with_args` (`--audit-args` is on now).
pub fn read(dir: &Path, query: &Query, with_args: bool, bounds: Bounds) -> io::Result<Value> {
    let mut calls = Vec::new();
    let mut reply_bytes = 0usize;
    let mut budget = bounds.scan_bytes;
    let mut seen_files = Vec::new();
    let kind_mark = br#""kind":"tool_call""#;
    let grant_mark = query
        .grant
        .as_ref()
        .map(|g| format!(r#""grant_id":"{g}""#).into_bytes());
    let mut more = false;
    'files: for n in 0..=MAX_ROTATED_FILES {
        let path = if n == 0 {
            dir.join(FILE_NAME)
        } else {
            dir.join(format!("{FILE_NAME}.{n}"))
        };
        let file = match open_state_file(OpenOptions::new().read(true), &path) {
            Ok(f) => f,
            Err(e) if e.kind() == io::ErrorKind::NotFound => break,
            Err(e) => return Err(e),
        };
        // A rotation between two opens shows the same file under the next name: read it once.
        let meta = file.metadata()?;
        let identity = (meta.dev(), meta.ino());
        if seen_files.contains(&identity) {
            continue;
        }
        seen_files.push(identity);
        let mut lines = BackLines::new(file, meta.len(), bounds);
        loop {
            let line = match lines.next_line(&mut budget)? {
                Step::Line(range) => lines.line(range),
                Step::Start => break,
                Step::OutOfBudget => {
                    more = true;
                    break 'files;
                }
            };
            // The grant first: it rules out most lines of a busy log.
            if grant_mark.as_ref().is_some_and(|m| !contains(line, m)) || !contains(line, kind_mark)
            {
                continue;
            }
            let Some(mut record) = record(line, query.grant.as_deref(), with_args) else {
                continue;
            };
            let mut size = json_len(&record);
            if size > bounds.reply_bytes {
                // Only huge arguments make a record this big: keep the call, not them.
                record.remove("args");
                record.insert("args_omitted".into(), json!(true));
                size = json_len(&record);
            }
            if reply_bytes + size > bounds.reply_bytes {
                more = true;
                break 'files;
            }
            reply_bytes += size;
            calls.push(Value::Object(record));
            if calls.len() == query.limit {
                more = true;
                break 'files;
            }
        }
    }
    Ok(json!({"calls": calls, "more": more}))
}

/// A line as a tool-call record of `grant` (any when `None`), `kind` dropped and `args`
/// unless `with_args`; `None` for anything else (another kind, a torn or foreign line).
fn record(line: &[u8], grant: Option<&str>, with_args: bool) -> Option<Map<String, Value>> {
    let Ok(Value::Object(mut m)) = serde_json::from_slice::<Value>(line) else {
        return None;
    };
    if m.get("kind").and_then(Value::as_str) != Some("tool_call") {
        return None;
    }
    if let Some(g) = grant {
        if m.get("grant_id").and_then(Value::as_str) != Some(g) {
            return None;
        }
    }
    m.remove("kind");
    if !with_args {
        m.remove("args");
    }
    Some(m)
}

fn json_len(record: &Map<String, Value>) -> usize {
    serde_json::to_vec(record).map_or(0, |v| v.len())
}

fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    memchr::memmem::find(haystack, needle).is_some()
}

enum Step {
    /// A line: `BackLines::line` of this range.
    Line(std::ops::Range<usize>),
    /// The file's first line has been given.
    Start,
    /// The scan bound is spent.
    OutOfBudget,
}

/// A file's lines from the last to the first. The text after the last newline is never a
/// line: in the live file it may be a record the writer is still appending.
struct BackLines {
    file: File,
    /// Offset of `buf`'s first byte in the file.
    pos: u64,
    /// `buf[..end]` is not given out yet: whole lines after a partial first one. A line
    /// given out is a range of `buf` past `end`, valid until the next call.
    buf: Vec<u8>,
    end: usize,
    /// The segment after the next newline found (scanning leftwards) is no line: the
    /// unterminated tail at first, or the start of a line too long to keep.
    discard: bool,
    bounds: Bounds,
}

impl BackLines {
    fn new(file: File, len: u64, bounds: Bounds) -> BackLines {
        BackLines {
            file,
            pos: len,
            buf: Vec::new(),
            end: 0,
            discard: true,
            bounds,
        }
    }

    fn line(&self, range: std::ops::Range<usize>) -> &[u8] {
        &self.buf[range]
    }

    fn next_line(&mut self, budget: &mut u64) -> io::Result<Step> {
        loop {
            if let Some(i) = memchr::memrchr(b'\n', &self.buf[..self.end]) {
                let line = i + 1..self.end;
                self.end = i;
                if std::mem::take(&mut self.discard) || line.is_empty() {
                    continue;
                }
                return Ok(Step::Line(line));
            }
            if self.pos == 0 {
                let line = 0..std::mem::take(&mut self.end);
                if std::mem::take(&mut self.discard) || line.is_empty() {
                    return Ok(Step::Start);
                }
                return Ok(Step::Line(line));
            }
            if *budget == 0 {
                return Ok(Step::OutOfBudget);
            }
            let step = (self.bounds.chunk_bytes as u64).min(self.pos).min(*budget);
            let start = self.pos - step;
            let mut chunk = vec![0; step as usize];
            self.file.seek(SeekFrom::Start(start))?;
            self.file.read_exact(&mut chunk)?;
            *budget -= step;
            self.pos = start;
            if self.end + chunk.len() > self.bounds.line_bytes
                && memchr::memchr(b'\n', &chunk).is_none()
            {
                // A line longer than we keep: drop what we hold of it and its start too.
                self.end = 0;
                self.discard = true;
                continue;
            }
            chunk.extend_from_slice(&self.buf[..self.end]);
            self.end = chunk.len();
            self.buf = chunk;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::base::testutil::TempDir;

    const GRANT_A: &str = "0b7e1c2a-5d1f-4c3e-9a47-2f0c8d6e1b90";
    const GRANT_B: &str = "1c8f2d3b-6e2a-4d4f-8b58-3a1d9e7f2ca1";

    fn call(grant: &str, tool: &str, n: u64) -> String {
        json!({"ts": "2026-11-30T12:00:00Z", "ts_ms": n, "kind": "tool_call", "grant_id": grant,
               "principal": "you", "session": "s", "tool": tool, "outcome": "ok",
               "duration_ms": 1, "args": {"n": n}})
        .to_string()
    }

    fn lifecycle(grant: &str) -> String {
        json!({"ts": "2026-11-30T12:00:00Z", "ts_ms": 1, "kind": "lifecycle", "event": "created",
               "grant_id": grant, "tool": "not-a-call"})
        .to_string()
    }

    fn query(grant: Option<&str>, limit: usize) -> Query {
        Query {
            grant: grant.map(str::to_string),
            limit,
        }
    }

    fn ts(answer: &Value) -> Vec<u64> {
        answer["calls"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| c["ts_ms"].as_u64().unwrap())
            .collect()
    }

    /// Small enough that every test crosses chunk boundaries many times.
    const TINY: Bounds = Bounds {
        scan_bytes: 1 << 20,
        chunk_bytes: 7,
        line_bytes: 4096,
        reply_bytes: 1 << 20,
    };

    #[test]
    fn queries_parse_with_their_bounds() {
        assert_eq!(Query::parse("").unwrap(), query(None, DEFAULT_LIMIT));
        assert_eq!(
            Query::parse(&format!("grant={GRANT_A}&limit=500&x=1")).unwrap(),
            query(Some(GRANT_A), MAX_LIMIT)
        );
        assert_eq!(Query::parse("limit=1").unwrap(), query(None, 1));
        for bad in [
            "limit=0",
            "limit=501",
            "limit=",
            "limit=-1",
            "limit=1.5",
            "limit",
        ] {
            assert_eq!(Query::parse(bad).unwrap_err(), LIMIT_ERROR, "{bad}");
        }
        let upper = GRANT_A.to_uppercase();
        let encoded = GRANT_A.replacen('0', "%30", 1);
        for bad in ["", "abc", &upper, &encoded, &format!("{GRANT_A}0")] {
            let q = format!("grant={bad}");
            assert_eq!(Query::parse(&q).unwrap_err(), GRANT_ERROR, "{q}");
        }
    }

    #[test]
    fn a_link_at_an_audit_name_is_refused_not_followed() {
        let dir = TempDir::new("activity-link");
        dir.write("elsewhere", &format!("{}\n", call(GRANT_A, "bash", 1)));
        std::os::unix::fs::symlink(dir.0.join("elsewhere"), dir.0.join(FILE_NAME)).unwrap();
        let e = read(&dir.0, &query(Some(GRANT_A), 50), false, TINY).unwrap_err();
        assert!(crate::base::statedir::is_refused(&e), "{e}");
    }

    #[test]
    fn newest_first_across_rotated_files_only_the_grants_calls() {
        let dir = TempDir::new("activity-rotated");
        let file = |lines: &[String]| lines.iter().map(|l| format!("{l}\n")).collect::<String>();
        dir.write(
            "audit.jsonl.2",
            &file(&[call(GRANT_A, "sys_info", 1), call(GRANT_B, "bash", 2)]),
        );
        dir.write(
            "audit.jsonl.1",
            &file(&[lifecycle(GRANT_A), call(GRANT_A, "bash", 3)]),
        );
        // The live file ends with a record the writer has not finished.
        let live = file(&[call(GRANT_A, "key", 4), call(GRANT_B, "key", 5)]);
        dir.write(
            "audit.jsonl",
            &format!("{live}{{\"kind\":\"tool_call\",\"grant_id\":\"{GRANT_A}"),
        );
        // .4 is past a gap (.3 missing): never read.
        dir.write("audit.jsonl.4", &file(&[call(GRANT_A, "bash", 99)]));

        let a = read(&dir.0, &query(Some(GRANT_A), 50), false, TINY).unwrap();
        assert_eq!(ts(&a), [4, 3, 1]);
        assert_eq!(a["more"], false);
        let first = &a["calls"][0];
        assert_eq!(first["tool"], "key");
        assert!(
            first.get("kind").is_none() && first.get("args").is_none(),
            "{first}"
        );

        let all = read(&dir.0, &query(None, 50), true, TINY).unwrap();
        assert_eq!(ts(&all), [5, 4, 3, 2, 1]);
        assert_eq!(
            all["calls"][0]["args"],
            json!({"n": 5}),
            "args kept with --audit-args"
        );

        let two = read(&dir.0, &query(None, 2), false, TINY).unwrap();
        assert_eq!(ts(&two), [5, 4]);
        assert_eq!(two["more"], true);
    }

    #[test]
    fn no_audit_file_is_no_calls() {
        let dir = TempDir::new("activity-empty");
        let a = read(&dir.0, &query(None, 5), false, Bounds::SERVED).unwrap();
        assert_eq!(a, json!({"calls": [], "more": false}));
    }

    #[test]
    fn the_scan_stops_at_its_bound() {
        let dir = TempDir::new("activity-scan");
        let old = format!("{}\n", call(GRANT_A, "bash", 1));
        let filler = format!("{}\n", call(GRANT_B, "bash", 2)).repeat(20);
        dir.write("audit.jsonl", &format!("{old}{filler}"));
        let total = (old.len() + filler.len()) as u64;
        let exactly = Bounds {
            scan_bytes: total,
            ..TINY
        };
        let a = read(&dir.0, &query(Some(GRANT_A), 5), false, exactly).unwrap();
        assert_eq!((ts(&a), &a["more"]), (vec![1], &json!(false)));
        // One byte short of the file: the oldest record is out of reach, and it says so.
        let short = Bounds {
            scan_bytes: total - 1,
            ..TINY
        };
        let a = read(&dir.0, &query(Some(GRANT_A), 5), false, short).unwrap();
        assert_eq!((ts(&a), &a["more"]), (vec![], &json!(true)));
    }

    #[test]
    fn a_line_past_the_line_bound_is_skipped_and_its_neighbours_kept() {
        let dir = TempDir::new("activity-long");
        let line = call(GRANT_A, "bash", 2);
        let fits = Bounds {
            line_bytes: line.len(),
            ..TINY
        };
        let long = call(GRANT_A, &"x".repeat(100), 3);
        dir.write(
            "audit.jsonl",
            &format!("{}\n{long}\n{line}\n", call(GRANT_A, "bash", 1)),
        );
        let a = read(&dir.0, &query(None, 5), false, fits).unwrap();
        assert_eq!(ts(&a), [2, 1]);
        // One byte more than the bound keeps the long line too.
        let roomy = Bounds {
            line_bytes: long.len() + 1,
            ..TINY
        };
        assert_eq!(
            ts(&read(&dir.0, &query(None, 5), false, roomy).unwrap()),
            [2, 3, 1]
        );
    }

    #[test]
    fn the_reply_stops_at_its_byte_bound_and_huge_args_are_omitted() {
        let dir = TempDir::new("activity-reply");
        let huge = json!({"ts_ms": 3, "kind": "tool_call", "tool": "key",
                          "args": {"text": "y".repeat(5000)}})
        .to_string();
        dir.write(
            "audit.jsonl",
            &format!(
                "{}\n{}\n{huge}\n",
                call(GRANT_A, "a", 1),
                call(GRANT_A, "b", 2)
            ),
        );
        let record_len = json_len(&record(call(GRANT_A, "b", 2).as_bytes(), None, true).unwrap());
        let bounds = Bounds {
            reply_bytes: 2 * record_len,
            line_bytes: 1 << 20,
            ..TINY
        };
        let a = read(&dir.0, &query(None, 50), true, bounds).unwrap();
        assert_eq!(ts(&a), [3, 2], "{a}");
        assert_eq!(a["calls"][0]["args_omitted"], true);
        assert!(a["calls"][0].get("args").is_none());
        assert_eq!(a["more"], true);
    }

    #[test]
    fn a_file_seen_twice_through_a_rotation_is_read_once() {
        let dir = TempDir::new("activity-rotating");
        dir.write("audit.jsonl.1", &format!("{}\n", call(GRANT_A, "bash", 1)));
        std::fs::hard_link(dir.path("audit.jsonl.1"), dir.path("audit.jsonl")).unwrap();
        let a = read(&dir.0, &query(None, 50), false, TINY).unwrap();
        assert_eq!(ts(&a), [1]);
    }
}
