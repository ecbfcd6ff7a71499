//! `grants.json`: the on-disk store of live grants and their attach secrets. Owns the
//! file format, its atomic fsynced replacement, the 0700/0600 modes, and the drop rules
//! applied when grants are loaded at start.
//!
//! This box has no keychain, so this file *is* the secret store: it is the only place an
//! attach secret is ever written, its mode is enforced on every load, and nothing read
//! from it (other than a well-formed grant id) ever reaches a log line.

use std::fs::{self, OpenOptions};
use std::io;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

use serde::Serialize;
use serde_json::{Map, Value};

use crate::base::error::Error;
use crate::base::secret::Secret;
pub use crate::base::statedir::{ensure_state_dir, DIR_MODE, FILE_MODE};
use crate::base::statedir::{is_refused, open_state_file, sync_dir, write_durably};
use crate::grants::approvals::{fits_policy, Approve};
use crate::profiles::{profile_names, Profile, MAX_LIST_NAMES, MAX_TOOL_NAME_BYTES};
use crate::tools::policy::ToolPolicy;

/// Name of the grant store inside the state dir.
pub const FILE_NAME: &str = "grants.json";
/// The only file format version this build reads and writes.
pub const FORMAT_VERSION: u64 = 1;
/// Latest `expires_at` a stored grant may have (Unix seconds, 9999-12-31T23:59:59Z); later
/// values are corrupt, and too large for a `SystemTime` past `i64::MAX`.
pub const MAX_EXPIRES_AT: u64 = 253_402_300_799;
/// Prefix of the temp file a save writes before renaming it over `grants.json`.
const TMP_PREFIX: &str = "grants.json.tmp-";

/// One live grant as persisted. `Debug` is safe: [`Secret`] masks itself.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StoredGrant {
    /// Lowercase UUID (8-4-4-4-12 hex).
    pub id: String,
    pub runtime: String,
    pub session: String,
    /// One of `Profile::ALL`'s names.
    pub profile: String,
    /// The grant's `allow` and `deny` lists as given (empty when it had none).
    pub allow: Vec<String>,
    pub deny: Vec<String>,
    /// The effective tools when it was granted: a `custom` grant whose `allow` would now
    /// mean other tools is dropped at load instead of widened.
    pub tools: Vec<String>,
    pub principal: String,
    /// Unix seconds.
    pub created_at: u64,
    /// Unix seconds; the grant is dead at this instant (`expires_at <= now`).
    pub expires_at: u64,
    pub secret: Secret,
    /// `approve` as given at `POST /attach` (§10); `None` when nothing needs approval.
    pub approve: Option<Approve>,
    /// Tools allowed with `remember` until the grant ends.
    pub approved_for_grant: Vec<String>,
    /// The lent folder (§18), as vetted at `POST /attach`; vetted again at resume.
    pub folder: Option<String>,
    /// The limits the grant asked for at `POST /attach` (§16); `None` = the flags'.
    pub limits: Option<crate::cgroup::Limits>,
    /// `"own"`: the grant has a display of its own (§19), started again lazily on resume.
    pub display: Option<String>,
}

/// What [`GrantStore::load`] (or [`parse`]) found.
#[derive(Debug, Default)]
pub struct LoadReport {
    /// Grants to resume, in file order.
    pub grants: Vec<StoredGrant>,
    /// `(grant id, or "#<index>" when the id itself is unusable, or "grants.json" for the
    /// whole file; reason)`. Reasons never contain values read from the file.
    pub dropped: Vec<(String, String)>,
    /// Where an unparseable `grants.json` was moved so nothing is silently lost.
    pub set_aside: Option<PathBuf>,
    /// `(grant id, stored expires_at)` of grants whose deadline lay past now plus the TTL
    /// cap ([`crate::config::MAX_TTL_SECS`]): their `expires_at` in `grants` is now + the cap.
    /// No grant the daemon made can get there; a hand-edited or forged file can.
    pub clamped: Vec<(String, u64)>,
}

/// The grant store in one state dir. Saves are serialised by an internal lock, so two
/// threads saving at once each leave a complete file (the later one wins).
#[derive(Debug)]
pub struct GrantStore {
    dir: PathBuf,
    save_lock: Mutex<()>,
}

/// Distinguishes temp files of concurrent saves from different stores in one process.
static TMP_COUNTER: AtomicU64 = AtomicU64::new(0);

#[derive(Serialize)]
struct WireFile<'a> {
    version: u64,
    grants: Vec<WireGrant<'a>>,
}

/// The serialised shape of a grant. Private so that [`Secret`] never gains `Serialize`:
/// this file is the one place an attach secret is written as a plain string.
#[derive(Serialize)]
struct WireGrant<'a> {
    id: &'a str,
    runtime: &'a str,
    session: &'a str,
    profile: &'a str,
    allow: &'a [String],
    deny: &'a [String],
    tools: &'a [String],
    principal: &'a str,
    created_at: u64,
    expires_at: u64,
    secret: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    approve: Option<Value>,
    #[serde(skip_serializing_if = "<[String]>::is_empty")]
    approved_for_grant: &'a [String],
    #[serde(skip_serializing_if = "Option::is_none")]
    folder: Option<&'a str>,
    limits: Option<crate::cgroup::Limits>,
    #[serde(skip_serializing_if = "Option::is_none")]
    display: Option<&'a str>,
}

impl GrantStore {
    /// Open (creating it 0700 if needed) the state dir. An existing dir with a wider mode
    /// is narrowed to 0700 and a warning logged. Leftover temp files of an interrupted
    /// save are removed, since they may hold secrets.
    pub fn open(state_dir: &Path) -> Result<GrantStore, Error> {
        ensure_state_dir(state_dir)?;
        remove_stale_temps(state_dir);
        Ok(GrantStore {
            dir: state_dir.to_path_buf(),
            save_lock: Mutex::new(()),
        })
    }

    /// Path of `grants.json`.
    pub fn path(&self) -> PathBuf {
        self.dir.join(FILE_NAME)
    }

    /// Read `grants.json` and keep the grants that may resume at `now_unix`. A missing file
    /// is an empty store. A file wider than 0600 is narrowed first (and logged). A file that
    /// is not a valid store is renamed to `grants.json.corrupt-<unix>` and every grant in it
    /// counted as dropped. Each dropped grant is logged at warn, without its secret.
    ///
    /// Errors only when the file exists but cannot be inspected, narrowed, read or moved
    /// aside: the daemon must not start and later overwrite grants it could not read.
    pub fn load(&self, now_unix: u64) -> Result<LoadReport, Error> {
        let path = self.path();
        let mut file = match open_state_file(OpenOptions::new().read(true), &path) {
            Ok(file) => file,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(LoadReport::default()),
            Err(e) if is_refused(&e) => {
                return Err(Error::Config(format!(
                    "{}: {e}; move it out of the way so handnode can keep its grants there",
                    path.display()
                )))
            }
            Err(e) => return Err(Error::io(format!("cannot open {}", path.display()), e)),
        };
        let meta = file
            .metadata()
            .map_err(|e| Error::io(format!("cannot inspect {}", path.display()), e))?;
        let mode = meta.permissions().mode() & 0o7777;
        if mode & !FILE_MODE != 0 {
            // On the open file: a path could have been swapped for a link since.
            file.set_permissions(fs::Permissions::from_mode(FILE_MODE))
                .map_err(|e| {
                    Error::io(
                        format!(
                            "cannot narrow {} to mode 0600 (it holds secrets)",
                            path.display()
                        ),
                        e,
                    )
                })?;
            log::warn!(
                "{} had mode {mode:04o}; narrowed to 0600 because it holds attach secrets",
                path.display()
            );
        }
        let mut bytes = Vec::new();
        io::Read::read_to_end(&mut file, &mut bytes)
            .map_err(|e| Error::io(format!("cannot read {}", path.display()), e))?;
        drop(file);
        let report = match parse(&bytes, now_unix) {
            Ok(report) => report,
            Err(why) => {
                let aside = self.set_aside(now_unix)?;
                log::warn!(
                    "{} is not a valid grant store ({why}); moved to {}, no grants resumed",
                    path.display(),
                    aside.display()
                );
                LoadReport {
                    grants: Vec::new(),
                    dropped: vec![(FILE_NAME.to_string(), why)],
                    set_aside: Some(aside),
                    clamped: Vec::new(),
                }
            }
        };
        for (id, reason) in &report.dropped {
            if id != FILE_NAME {
                log::warn!("stored grant {id} dropped: {reason}");
            }
        }
        for (id, stored) in &report.clamped {
            log::warn!(
                "stored grant {id} ran until {}, past the {} s cap on a grant's life; it now ends at {}",
                crate::base::timefmt::rfc3339(*stored),
                crate::config::MAX_TTL_SECS,
                crate::base::timefmt::rfc3339(now_unix.saturating_add(crate::config::MAX_TTL_SECS))
            );
        }
        Ok(report)
    }

    /// Replace `grants.json` with exactly `grants`: written to a 0600 temp file in the
    /// same dir, fsynced, renamed over the old file, and the dir fsynced, so a crash leaves
    /// either the old or the new file, never a torn one. Returns once it is durable.
    pub fn save(&self, grants: &[StoredGrant]) -> Result<(), Error> {
        let body = encode(grants);
        let _guard = self.save_lock.lock().unwrap_or_else(|p| p.into_inner());
        let tmp = self.dir.join(format!(
            "{TMP_PREFIX}{}-{}",
            std::process::id(),
            TMP_COUNTER.fetch_add(1, Ordering::Relaxed)
        ));
        let result = write_durably(&tmp, &body).and_then(|()| {
            fs::rename(&tmp, self.path())
                .map_err(|e| Error::io(format!("cannot rename {} into place", tmp.display()), e))
        });
        if result.is_err() {
            let _ = fs::remove_file(&tmp);
        }
        result?;
        sync_dir(&self.dir)
    }

    /// Move an unreadable store aside under a name that does not exist yet.
    fn set_aside(&self, now_unix: u64) -> Result<PathBuf, Error> {
        let base = format!("{FILE_NAME}.corrupt-{now_unix}");
        let mut aside = self.dir.join(&base);
        let mut n = 1;
        while aside.exists() {
            aside = self.dir.join(format!("{base}.{n}"));
            n += 1;
        }
        fs::rename(self.path(), &aside).map_err(|e| {
            Error::io(
                format!("cannot move the unreadable {} aside", self.path().display()),
                e,
            )
        })?;
        sync_dir(&self.dir)?;
        Ok(aside)
    }
}

/// The bytes `save` writes for `grants`.
fn encode(grants: &[StoredGrant]) -> Vec<u8> {
    let file = WireFile {
        version: FORMAT_VERSION,
        grants: grants
            .iter()
            .map(|g| WireGrant {
                id: &g.id,
                runtime: &g.runtime,
                session: &g.session,
                profile: &g.profile,
                allow: &g.allow,
                deny: &g.deny,
                tools: &g.tools,
                principal: &g.principal,
                created_at: g.created_at,
                expires_at: g.expires_at,
                secret: g.secret.expose(),
                approve: g.approve.as_ref().map(Approve::to_json),
                approved_for_grant: &g.approved_for_grant,
                folder: g.folder.as_deref(),
                limits: g.limits,
                display: g.display.as_deref(),
            })
            .collect(),
    };
    let mut body = serde_json::to_vec_pretty(&file).expect("strings and integers serialise");
    body.push(b'\n');
    body
}

/// Parse a store's bytes and apply the drop rules at `now_unix`. Pure: no I/O, no logging,
/// so a fuzz target can call it. `Err` means the whole file is unusable (not JSON, not an
/// object, no `grants` array, unknown `version`) and says why; otherwise each entry is
/// kept or dropped on its own. Unknown fields, at either level, are ignored.
pub fn parse(bytes: &[u8], now_unix: u64) -> Result<LoadReport, String> {
    let root: Value = serde_json::from_slice(bytes).map_err(|e| {
        // Only the position: serde's message can quote file content.
        format!("not valid JSON (line {}, column {})", e.line(), e.column())
    })?;
    let root = root
        .as_object()
        .ok_or_else(|| "top level is not a JSON object".to_string())?;
    match root.get("version") {
        Some(v) if v.as_u64() == Some(FORMAT_VERSION) => {}
        Some(_) => {
            return Err(format!(
                "version is not {FORMAT_VERSION} (written by another handnode version?)"
            ))
        }
        None => return Err("version field missing".to_string()),
    }
    let entries = root
        .get("grants")
        .and_then(Value::as_array)
        .ok_or_else(|| "grants field missing or not an array".to_string())?;

    let mut report = LoadReport::default();
    for (index, entry) in entries.iter().enumerate() {
        let label = entry
            .get("id")
            .and_then(Value::as_str)
            .filter(|id| is_grant_id(id))
            .map(str::to_string)
            .unwrap_or_else(|| format!("#{index}"));
        let cap = now_unix.saturating_add(crate::config::MAX_TTL_SECS);
        match entry_to_grant(entry, now_unix) {
            Ok(grant) if report.grants.iter().any(|g| g.id == grant.id) => {
                report.dropped.push((label, "duplicate id".to_string()));
            }
            Ok(mut grant) => {
                if grant.expires_at > cap {
                    report.clamped.push((grant.id.clone(), grant.expires_at));
                    grant.expires_at = cap;
                }
                report.grants.push(grant)
            }
            Err(reason) => report.dropped.push((label, reason)),
        }
    }
    Ok(report)
}

/// One entry → a grant that may resume, or why it may not. Reasons name fields, never
/// their values.
fn entry_to_grant(entry: &Value, now_unix: u64) -> Result<StoredGrant, String> {
    let obj = entry
        .as_object()
        .ok_or_else(|| "entry is not a JSON object".to_string())?;
    let id = string_field(obj, "id")?;
    if !is_grant_id(id) {
        return Err("id is not a lowercase UUID".to_string());
    }
    let runtime = string_field(obj, "runtime")?;
    if !crate::base::url::is_runtime_url(runtime) {
        return Err("runtime is not a ws:// or wss:// URL with a host".to_string());
    }
    let session = string_field(obj, "session")?;
    if !is_session(session) {
        return Err("session does not match [a-z0-9-]{1,32}".to_string());
    }
    let profile = string_field(obj, "profile")?;
    if profile.parse::<Profile>().is_err() {
        return Err(format!("profile is not one of {}", profile_names()));
    }
    let allow = names_field(obj, "allow")?;
    let deny = names_field(obj, "deny")?;
    let tools = names_field(obj, "tools")?;
    // What the grant may ever show, for its approvals: a custom grant's tools as granted
    // (`grants` drops it when its list now means others), else its profile's own list.
    let fixed = profile.parse().ok().and_then(ToolPolicy::fixed);
    let can_use = |t: &str| match &fixed {
        Some(policy) => fits_policy(t, policy),
        None => tools.iter().any(|g| g == t),
    };
    // Dropping the grant, not the list: a grant without its approvals would be wider.
    let approve = Approve::from_json(obj.get("approve"))
        .map_err(|_| "approve is not a list of tool names or \"shell\"".to_string())?;
    if approve.as_ref().is_some_and(|a| !a.fits(can_use)) {
        return Err("approve names a tool this profile cannot use".to_string());
    }
    let approved_for_grant = match obj.get("approved_for_grant") {
        None => Vec::new(),
        Some(Value::Array(items)) if items.len() <= crate::grants::approvals::MAX_APPROVE_NAMES => {
            items
                .iter()
                .map(|v| v.as_str().filter(|t| can_use(t)).map(str::to_string))
                .collect::<Option<Vec<String>>>()
                .ok_or_else(|| {
                    "approved_for_grant names a tool this profile cannot use".to_string()
                })?
        }
        Some(_) => return Err("approved_for_grant is not a list of tool names".to_string()),
    };
    let folder = match obj.get("folder") {
        None | Some(Value::Null) => None,
        Some(Value::String(f)) if crate::tools::paths::parse(f).is_ok() => Some(f.clone()),
        Some(_) => return Err("folder is not a plain absolute path".to_string()),
    };
    // A grant that needs a folder and has none would resume wider than it was lent.
    if folder.is_none() && profile.parse().is_ok_and(Profile::requires_folder) {
        return Err("folder missing for a profile that requires one".to_string());
    }
    let display = match obj.get("display") {
        None | Some(Value::Null) => None,
        Some(Value::String(d)) if d == "own" => Some(d.clone()),
        Some(_) => return Err("display is not \"own\"".to_string()),
    };
    let principal = string_field(obj, "principal")?;
    let created_at = u64_field(obj, "created_at")?;
    let expires_at = u64_field(obj, "expires_at")?;
    let secret = string_field(obj, "secret")?;
    if secret.is_empty() {
        return Err("secret is empty".to_string());
    }
    if secret.chars().any(char::is_control) {
        // It is sent as an HTTP header value.
        return Err("secret contains control characters".to_string());
    }
    if !Secret::is_header_safe(secret) {
        return Err("secret is not printable ASCII".to_string());
    }
    if expires_at > MAX_EXPIRES_AT {
        // `UNIX_EPOCH + expires_at` would overflow when the grant resumes.
        return Err("expires_at is not a plausible time".to_string());
    }
    if expires_at <= now_unix {
        return Err("expired".to_string());
    }
    // Unreadable limits fall back to the flags' (never more than the daemon allows).
    let limits = obj
        .get("limits")
        .and_then(|v| serde_json::from_value(v.clone()).ok());
    Ok(StoredGrant {
        limits,
        display,
        id: id.to_string(),
        runtime: runtime.to_string(),
        session: session.to_string(),
        profile: profile.to_string(),
        allow,
        deny,
        tools,
        approve,
        approved_for_grant,
        folder,
        principal: principal.to_string(),
        created_at,
        expires_at,
        secret: Secret::new(secret),
    })
}

fn string_field<'a>(obj: &'a Map<String, Value>, name: &str) -> Result<&'a str, String> {
    obj.get(name)
        .and_then(Value::as_str)
        .ok_or_else(|| format!("{name} missing or not a string"))
}

/// A list of tool names (absent: empty, as files written before the lists existed have
/// none), within the bounds `POST /attach` enforces and of the characters tool names and
/// patterns use, so a name the loader later reports is safe to log.
fn names_field(obj: &Map<String, Value>, name: &str) -> Result<Vec<String>, String> {
    let wrong = || format!("{name} is not a list of at most {MAX_LIST_NAMES} tool names");
    let items = match obj.get(name) {
        None => return Ok(Vec::new()),
        Some(Value::Array(items)) if items.len() <= MAX_LIST_NAMES => items,
        Some(_) => return Err(wrong()),
    };
    items
        .iter()
        .map(|item| match item.as_str() {
            Some(s) if is_tool_name_shape(s) => Ok(s.to_string()),
            _ => Err(wrong()),
        })
        .collect()
}

/// 1..=`MAX_TOOL_NAME_BYTES` of `[A-Za-z0-9_.-]`, optionally ending in `*`.
fn is_tool_name_shape(s: &str) -> bool {
    let body = s.strip_suffix('*').unwrap_or(s);
    !s.is_empty()
        && s.len() <= MAX_TOOL_NAME_BYTES
        && body
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'.' | b'-'))
}

fn u64_field(obj: &Map<String, Value>, name: &str) -> Result<u64, String> {
    obj.get(name)
        .and_then(Value::as_u64)
        .ok_or_else(|| format!("{name} missing or not a non-negative integer"))
}

/// Lowercase 8-4-4-4-12 hex, the shape of the ids handnode issues.
pub fn is_grant_id(s: &str) -> bool {
    crate::base::ids::is_id(s)
}

fn is_session(s: &str) -> bool {
    (1..=32).contains(&s.len())
        && s.bytes()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == b'-')
}

fn remove_stale_temps(dir: &Path) {
    let Ok(entries) = fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        if entry.file_name().to_string_lossy().starts_with(TMP_PREFIX) {
            match fs::remove_file(entry.path()) {
                Ok(()) => log::info!(
                    "removed {} left by an interrupted save",
                    entry.path().display()
                ),
                Err(e) => log::warn!("cannot remove {}: {e}", entry.path().display()),
            }
        }
    }
}

#[cfg(test)]
mod tests;
