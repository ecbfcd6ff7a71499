//! Halt (§22): the lender's stop-everything, latched. Owns whether the daemon is halted,
//! why, by whom and since when, and `halt.json` in the state dir that keeps it across a
//! restart until `POST /resume`. What a halt does to grants, calls and processes is the
//! registry's (`Registry::halt`) and each grant thread's; this is only the latch.

use std::io::Read as _;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;

use serde_json::{json, Value};

use crate::base::error::Error;

/// The file under the state dir that holds a halt.
pub const FILE_NAME: &str = "halt.json";

/// What every call and held approval a halt ends is answered, before the reason.
pub const HALTED_BY_LENDER: &str = "halted by the person who lent the box";

/// The longest reason a halt may carry, in bytes (it reaches the agent and the console).
pub const MAX_REASON_BYTES: usize = 500;

#[derive(Clone, Debug, PartialEq, Eq)]
struct Halted {
    reason: Option<String>,
    by: String,
    at: u64,
}

/// Whether the daemon is halted. One per daemon, shared by the admin API, the registry
/// and every grant thread (which read [`Halt::is_halted`] each turn: one atomic load).
#[derive(Debug)]
pub struct Halt {
    on: AtomicBool,
    halted: Mutex<Option<Halted>>,
    /// `None`: not kept across restarts (tests, and a daemon without a state dir).
    path: Option<PathBuf>,
}

impl Halt {
    /// Not halted, and nothing kept on disk.
    pub fn in_memory() -> Halt {
        Halt {
            on: AtomicBool::new(false),
            halted: Mutex::new(None),
            path: None,
        }
    }

    /// The latch kept in `state_dir`, halted if the last run left it so. A file that
    /// cannot be read or parsed (a link, too: state files are never followed) keeps the
    /// daemon halted (it fails closed) and says why.
    pub fn load(state_dir: &Path) -> Halt {
        let path = state_dir.join(FILE_NAME);
        let read =
            crate::base::statedir::open_state_file(std::fs::OpenOptions::new().read(true), &path)
                .and_then(|mut f| {
                    let mut bytes = Vec::new();
                    f.read_to_end(&mut bytes).map(|_| bytes)
                });
        let halted = match read {
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
            Err(e) => Some(unreadable(&path, &e.to_string())),
            Ok(bytes) => match serde_json::from_slice::<Value>(&bytes) {
                Ok(v) if v.is_object() => Some(Halted {
                    reason: v["reason"].as_str().map(String::from),
                    by: v["by"].as_str().unwrap_or("unknown").to_string(),
                    at: v["at"].as_u64().unwrap_or(0),
                }),
                Ok(_) => Some(unreadable(&path, "not a JSON object")),
                Err(e) => Some(unreadable(&path, &e.to_string())),
            },
        };
        if let Some(h) = &halted {
            log::warn!(
                "halted since {} by {}{}: no grant dials until POST /resume (handnode resume)",
                crate::base::timefmt::rfc3339(h.at),
                h.by,
                h.reason
                    .as_deref()
                    .map(|r| format!(" ({r})"))
                    .unwrap_or_default()
            );
        }
        Halt {
            on: AtomicBool::new(halted.is_some()),
            halted: Mutex::new(halted),
            path: Some(path),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Option<Halted>> {
        self.halted.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub fn is_halted(&self) -> bool {
        self.on.load(Ordering::SeqCst)
    }

    /// Halt, kept on disk first: a halt that could not be made durable is refused (the
    /// lender must know a restart would undo it). `Ok(false)`: it was halted already (the
    /// first halt's reason stays).
    pub fn halt(&self, reason: Option<String>, by: &str) -> Result<bool, Error> {
        let mut halted = self.lock();
        if halted.is_some() {
            return Ok(false);
        }
        let h = Halted {
            reason,
            by: by.to_string(),
            at: crate::base::timefmt::now_unix(),
        };
        if let Some(path) = &self.path {
            write_durably(path, &view(Some(&h)).to_string())?;
        }
        *halted = Some(h);
        self.on.store(true, Ordering::SeqCst);
        Ok(true)
    }

    /// Resume: the file goes first, so a crash in between leaves the daemon halted.
    /// `Ok(false)`: it was not halted.
    pub fn resume(&self) -> Result<bool, Error> {
        let mut halted = self.lock();
        if halted.is_none() {
            return Ok(false);
        }
        if let Some(path) = &self.path {
            match std::fs::remove_file(path) {
                Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                    return Err(Error::io(format!("cannot remove {}", path.display()), e))
                }
                _ => {}
            }
            if let Some(dir) = path.parent() {
                crate::base::statedir::sync_dir(dir)?;
            }
        }
        *halted = None;
        self.on.store(false, Ordering::SeqCst);
        Ok(true)
    }

    /// What a call or held approval a halt ends is answered: `halted by the person who
    /// lent the box: <reason>` (without `: …` when no reason was given).
    pub fn answer(&self) -> String {
        let reason = self.lock().as_ref().and_then(|h| h.reason.clone());
        answer(reason.as_deref())
    }

    /// `{"halted":bool}` and, while halted, `reason`, `by` and `since`.
    pub fn to_json(&self) -> Value {
        view(self.lock().as_ref())
    }
}

/// The answer text for `reason`.
pub fn answer(reason: Option<&str>) -> String {
    match reason {
        Some(r) => format!("{HALTED_BY_LENDER}: {r}"),
        None => HALTED_BY_LENDER.to_string(),
    }
}

fn view(h: Option<&Halted>) -> Value {
    match h {
        None => json!({"halted": false}),
        Some(h) => json!({
            "halted": true,
            "reason": h.reason,
            "by": h.by,
            "at": h.at,
            "since": crate::base::timefmt::rfc3339(h.at),
        }),
    }
}

fn unreadable(path: &Path, why: &str) -> Halted {
    log::error!(
        "{} cannot be read ({why}): staying halted; POST /resume (handnode resume) ends it",
        path.display()
    );
    Halted {
        reason: Some(format!("{} could not be read at start", path.display())),
        by: "handnode".into(),
        at: crate::base::timefmt::now_unix(),
    }
}

/// Write `text` to `path` as `grants.json` is: a 0600 temporary file created anew (never
/// through a link), fsynced, renamed over `path`, and the dir fsynced.
fn write_durably(path: &Path, text: &str) -> Result<(), Error> {
    let tmp = path.with_extension("json.tmp");
    // A temporary file a crash left behind: `write_durably` creates its file anew.
    let _ = std::fs::remove_file(&tmp);
    crate::base::statedir::write_durably(&tmp, text.as_bytes())?;
    std::fs::rename(&tmp, path)
        .map_err(|e| Error::io(format!("cannot rename {} into place", tmp.display()), e))?;
    match path.parent() {
        Some(dir) => crate::base::statedir::sync_dir(dir),
        None => Ok(()),
    }
}

/// Parse `POST /halt`'s body: empty, or an object with an optional `reason` string of at
/// most [`MAX_REASON_BYTES`] (unknown fields are ignored).
pub fn parse_body(body: &[u8]) -> Result<Option<String>, String> {
    if body.iter().all(u8::is_ascii_whitespace) {
        return Ok(None);
    }
    let v: Value = serde_json::from_slice(body)
        .map_err(|e| format!("the body must be a JSON object like {{\"reason\":\"…\"}}: {e}"))?;
    let Some(map) = v.as_object() else {
        return Err("the body must be a JSON object like {\"reason\":\"…\"}".into());
    };
    match map.get("reason") {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) if s.len() > MAX_REASON_BYTES => Err(format!(
            "reason is {} bytes; at most {MAX_REASON_BYTES}",
            s.len()
        )),
        Some(Value::String(s)) if s.trim().is_empty() => Ok(None),
        Some(Value::String(s)) => Ok(Some(s.trim().to_string())),
        Some(_) => Err("reason must be a string".into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::base::testutil::TempDir;

    #[test]
    fn a_halt_is_kept_across_a_restart_until_resume() {
        let dir = TempDir::new("halt-latch");
        let h = Halt::load(&dir.0);
        assert!(!h.is_halted());
        assert!(h.halt(Some("lunch".into()), "token").unwrap());
        assert!(
            !h.halt(Some("again".into()), "token").unwrap(),
            "latched once"
        );
        assert_eq!(h.answer(), "halted by the person who lent the box: lunch");
        let again = Halt::load(&dir.0);
        assert!(again.is_halted());
        assert_eq!(again.to_json()["reason"], "lunch");
        assert_eq!(again.to_json()["by"], "token");
        assert!(again.resume().unwrap());
        assert!(!again.resume().unwrap());
        assert!(!Halt::load(&dir.0).is_halted());
        assert!(!dir.0.join(FILE_NAME).exists());
    }

    #[test]
    fn an_unreadable_halt_file_keeps_the_daemon_halted() {
        let dir = TempDir::new("halt-bad");
        std::fs::write(dir.0.join(FILE_NAME), b"{not json").unwrap();
        let h = Halt::load(&dir.0);
        assert!(h.is_halted());
        assert!(h.answer().starts_with(HALTED_BY_LENDER), "{}", h.answer());
        assert!(h.resume().unwrap());
        assert!(!Halt::load(&dir.0).is_halted());
    }

    #[test]
    fn a_halt_file_that_is_a_link_is_not_followed_and_keeps_the_daemon_halted() {
        let dir = TempDir::new("halt-link");
        let elsewhere = dir.0.join("elsewhere.json");
        std::fs::write(&elsewhere, br#"{"reason":"planted"}"#).unwrap();
        std::os::unix::fs::symlink(&elsewhere, dir.0.join(FILE_NAME)).unwrap();
        let h = Halt::load(&dir.0);
        assert!(h.is_halted());
        assert_ne!(h.to_json()["reason"], "planted", "{}", h.to_json());
    }

    #[test]
    fn the_body_is_checked_and_the_reason_bounded() {
        assert_eq!(parse_body(b""), Ok(None));
        assert_eq!(parse_body(b"{}"), Ok(None));
        assert_eq!(
            parse_body(br#"{"reason":" lunch ","x":1}"#),
            Ok(Some("lunch".into()))
        );
        let at = format!(r#"{{"reason":"{}"}}"#, "r".repeat(MAX_REASON_BYTES));
        assert!(parse_body(at.as_bytes()).is_ok());
        let over = format!(r#"{{"reason":"{}"}}"#, "r".repeat(MAX_REASON_BYTES + 1));
        assert!(parse_body(over.as_bytes())
            .unwrap_err()
            .contains("at most 500"));
        for bad in [&b"[1]"[..], b"{", br#"{"reason":5}"#] {
            assert!(
                parse_body(bad).is_err(),
                "{:?}",
                String::from_utf8_lossy(bad)
            );
        }
    }
}
