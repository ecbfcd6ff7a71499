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
mod tests {
    use super::*;
    use std::sync::Arc;

    use crate::base::testutil::TempDir;

    const NOW: u64 = 1_796_040_000;

    fn grant(n: u8, expires_at: u64) -> StoredGrant {
        StoredGrant {
            id: format!("0000000{n}-aaaa-4bbb-8ccc-dddddddddddd"),
            runtime: "wss://pod.example:8090".into(),
            session: format!("s{n}"),
            profile: "observe".into(),
            allow: Vec::new(),
            deny: Vec::new(),
            tools: vec!["sys_info".into(), "screenshot".into()],
            principal: "you@example.com".into(),
            created_at: NOW - 10,
            expires_at,
            secret: Secret::new(format!("sekrit-value-{n}")),
            approve: None,
            approved_for_grant: Vec::new(),
            folder: None,
            limits: None,
            display: None,
        }
    }

    fn mode(path: &Path) -> u32 {
        fs::metadata(path).unwrap().permissions().mode() & 0o7777
    }

    fn entry_json(g: &StoredGrant) -> Value {
        serde_json::json!({
            "id": g.id, "runtime": g.runtime, "session": g.session, "profile": g.profile,
            "allow": g.allow, "deny": g.deny, "tools": g.tools, "principal": g.principal, "created_at": g.created_at, "expires_at": g.expires_at,
            "secret": g.secret.expose(),
        })
    }

    fn file_with(entries: Vec<Value>) -> Vec<u8> {
        serde_json::to_vec(&serde_json::json!({"version": 1, "grants": entries})).unwrap()
    }

    #[test]
    fn round_trip_and_modes() {
        let tmp = TempDir::fresh("rt");
        let dir = tmp.0.join("nested/state");
        let store = GrantStore::open(&dir).unwrap();
        assert_eq!(mode(&dir), 0o700);
        let mut lent = grant(2, NOW + 200);
        lent.profile = "files".into();
        lent.tools = vec!["sys_info".into()];
        lent.folder = Some("/srv/lent".into());
        let grants = vec![grant(1, NOW + 100), lent];
        store.save(&grants).unwrap();
        assert_eq!(mode(&store.path()), 0o600);
        let report = store.load(NOW).unwrap();
        assert_eq!(report.grants, grants);
        assert!(report.dropped.is_empty());
        // Only grants.json remains: no temp file lingers.
        let names: Vec<_> = fs::read_dir(&dir)
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(names, vec![std::ffi::OsString::from(FILE_NAME)]);
    }

    #[test]
    fn approvals_round_trip_and_a_list_the_profile_cannot_use_drops_the_grant() {
        let tmp = TempDir::fresh("approve");
        let store = GrantStore::open(&tmp.0).unwrap();
        let mut listed = grant(1, NOW + 100);
        listed.profile = "desktop".into();
        listed.approve = Some(Approve::Tools(vec!["bash".into(), "key".into()]));
        listed.approved_for_grant = vec!["key".into()];
        let mut shell = grant(2, NOW + 100);
        shell.profile = "owner".into();
        shell.approve = Some(Approve::Shell);
        store.save(&[listed.clone(), shell.clone()]).unwrap();
        let report = store.load(NOW).unwrap();
        assert_eq!(report.grants, vec![listed.clone(), shell]);
        let entries = |f: &dyn Fn(&mut Value)| {
            let mut e = entry_json(&grant(3, NOW + 100));
            f(&mut e);
            file_with(vec![e])
        };
        for (tweak, why) in [
            (
                (|e: &mut Value| e["approve"] = serde_json::json!(["bash"])) as fn(&mut Value),
                "approve names a tool this profile cannot use",
            ),
            (
                |e: &mut Value| e["approve"] = serde_json::json!(7),
                "approve is not a list of tool names or \"shell\"",
            ),
            (
                |e: &mut Value| e["approved_for_grant"] = serde_json::json!(["bash"]),
                "approved_for_grant names a tool this profile cannot use",
            ),
            (
                |e: &mut Value| e["approved_for_grant"] = serde_json::json!("bash"),
                "approved_for_grant is not a list of tool names",
            ),
        ] {
            let report = parse(&entries(&tweak), NOW).unwrap();
            assert!(report.grants.is_empty(), "{why}");
            assert_eq!(report.dropped[0].1, why);
        }
    }

    #[test]
    fn missing_file_is_empty() {
        let tmp = TempDir::fresh("missing");
        let store = GrantStore::open(&tmp.0).unwrap();
        let report = store.load(NOW).unwrap();
        assert!(report.grants.is_empty() && report.dropped.is_empty());
        assert!(report.set_aside.is_none());
    }

    #[test]
    fn wide_dir_and_file_are_narrowed() {
        let tmp = TempDir::fresh("wide");
        fs::create_dir_all(&tmp.0).unwrap();
        fs::set_permissions(&tmp.0, fs::Permissions::from_mode(0o755)).unwrap();
        let store = GrantStore::open(&tmp.0).unwrap();
        assert_eq!(mode(&tmp.0), 0o700);
        store.save(&[grant(1, NOW + 5)]).unwrap();
        fs::set_permissions(store.path(), fs::Permissions::from_mode(0o644)).unwrap();
        let report = store.load(NOW).unwrap();
        assert_eq!(mode(&store.path()), 0o600);
        assert_eq!(report.grants.len(), 1);
    }

    #[test]
    fn state_dir_that_is_a_file_is_refused() {
        let tmp = TempDir::fresh("notdir");
        fs::write(&tmp.0, b"x").unwrap();
        let err = GrantStore::open(&tmp.0).unwrap_err();
        assert!(err.to_string().contains("not a directory"), "{err}");
        fs::remove_file(&tmp.0).unwrap();
    }

    #[test]
    fn a_state_dir_that_is_a_link_or_someone_elses_is_refused() {
        let tmp = TempDir::new("dirs");
        let real = tmp.path("real");
        fs::create_dir(&real).unwrap();
        let link = tmp.path("link");
        std::os::unix::fs::symlink(&real, &link).unwrap();
        let err = GrantStore::open(&link).unwrap_err();
        assert!(err.to_string().contains("is a symbolic link"), "{err}");
        assert_eq!(err.exit_code(), 2);
        let euid = rustix::process::geteuid().as_raw();
        let meta = fs::symlink_metadata(&real).unwrap();
        assert!(crate::base::statedir::check_state_dir_meta(&real, &meta, euid).is_ok());
        let err = crate::base::statedir::check_state_dir_meta(&real, &meta, euid.wrapping_add(1))
            .unwrap_err();
        assert!(err.to_string().contains("is owned by uid"), "{err}");
    }

    #[test]
    fn a_grants_file_that_is_a_link_is_refused_and_its_target_untouched() {
        let tmp = TempDir::new("link");
        let store = GrantStore::open(&tmp.0).unwrap();
        let target = tmp.path("elsewhere.json");
        let content = String::from_utf8(file_with(vec![entry_json(&grant(1, NOW + 60))])).unwrap();
        fs::write(&target, &content).unwrap();
        fs::set_permissions(&target, fs::Permissions::from_mode(0o644)).unwrap();
        std::os::unix::fs::symlink(&target, store.path()).unwrap();
        let err = store.load(NOW).unwrap_err();
        assert!(err.to_string().contains("is a symbolic link"), "{err}");
        assert_eq!(err.exit_code(), 2);
        assert_eq!(mode(&target), 0o644, "the link's target was chmodded");
        assert_eq!(fs::read_to_string(&target).unwrap(), content);
        // A FIFO planted there is refused too, without hanging the open.
        fs::remove_file(store.path()).unwrap();
        rustix::fs::mknodat(
            rustix::fs::CWD,
            store.path(),
            rustix::fs::FileType::Fifo,
            rustix::fs::Mode::from_raw_mode(0o600),
            0,
        )
        .unwrap();
        let err = store.load(NOW).unwrap_err();
        assert!(err.to_string().contains("not a regular file"), "{err}");
    }

    #[test]
    fn expiry_bound() {
        let bytes = file_with(vec![
            entry_json(&grant(1, NOW)),
            entry_json(&grant(2, NOW + 1)),
            entry_json(&grant(3, NOW - 1)),
        ]);
        let report = parse(&bytes, NOW).unwrap();
        assert_eq!(report.grants.len(), 1);
        assert_eq!(report.grants[0].expires_at, NOW + 1);
        assert_eq!(
            report.dropped,
            vec![
                (grant(1, 0).id, "expired".to_string()),
                (grant(3, 0).id, "expired".to_string())
            ]
        );
    }

    #[test]
    fn a_deadline_past_the_ttl_cap_is_clamped_to_it() {
        let cap = NOW + crate::config::MAX_TTL_SECS;
        let ten_years = NOW + 10 * 365 * 86_400;
        let bytes = file_with(vec![
            entry_json(&grant(1, cap)),
            entry_json(&grant(2, cap + 1)),
            entry_json(&grant(3, ten_years)),
        ]);
        let report = parse(&bytes, NOW).unwrap();
        let got: Vec<u64> = report.grants.iter().map(|g| g.expires_at).collect();
        assert_eq!(got, [cap, cap, cap]);
        assert_eq!(
            report.clamped,
            vec![(grant(2, 0).id, cap + 1), (grant(3, 0).id, ten_years)]
        );
        assert!(report.dropped.is_empty());
    }

    #[test]
    fn each_malformed_entry_is_dropped_alone() {
        let good = grant(1, NOW + 60);
        let base = entry_json(&good);
        let with = |field: &str, value: Value| {
            let mut e = base.clone();
            e[field] = value;
            e
        };
        let without = |field: &str| {
            let mut e = base.clone();
            e.as_object_mut().unwrap().remove(field);
            e
        };
        let cases: Vec<(Value, &str)> = vec![
            (without("secret"), "secret missing or not a string"),
            (with("secret", Value::from("")), "secret is empty"),
            (
                with("secret", Value::from("a\r\nb")),
                "secret contains control characters",
            ),
            (
                with("secret", Value::from(42)),
                "secret missing or not a string",
            ),
            (
                without("expires_at"),
                "expires_at missing or not a non-negative integer",
            ),
            (
                with("expires_at", Value::from("soon")),
                "expires_at missing or not a non-negative integer",
            ),
            (
                with("created_at", Value::from(-1)),
                "created_at missing or not a non-negative integer",
            ),
            (
                with("profile", Value::from("sandbox")),
                "profile is not one of owner, desktop, observe, browser, files, apps, custom",
            ),
            (
                with("folder", Value::from("relative/dir")),
                "folder is not a plain absolute path",
            ),
            (
                with("folder", Value::from("/a/../b")),
                "folder is not a plain absolute path",
            ),
            (
                with("profile", Value::from("files")),
                "folder missing for a profile that requires one",
            ),
            (
                with("profile", Value::from("Owner")),
                "profile is not one of owner, desktop, observe, browser, files, apps, custom",
            ),
            (
                with("allow", Value::from("bash")),
                "allow is not a list of at most 128 tool names",
            ),
            (
                with("deny", serde_json::json!(["bash", 7])),
                "deny is not a list of at most 128 tool names",
            ),
            (
                with("deny", serde_json::json!(["bash\u{1b}[2J"])),
                "deny is not a list of at most 128 tool names",
            ),
            (
                with("allow", serde_json::json!([""])),
                "allow is not a list of at most 128 tool names",
            ),
            (
                with(
                    "allow",
                    serde_json::json!(vec!["sys_info"; MAX_LIST_NAMES + 1]),
                ),
                "allow is not a list of at most 128 tool names",
            ),
            (
                with(
                    "tools",
                    serde_json::json!(["b".repeat(MAX_TOOL_NAME_BYTES + 1)]),
                ),
                "tools is not a list of at most 128 tool names",
            ),
            (
                with("session", Value::from("Bad Session")),
                "session does not match [a-z0-9-]{1,32}",
            ),
            (
                with("session", Value::from("a".repeat(33))),
                "session does not match [a-z0-9-]{1,32}",
            ),
            (
                with("runtime", Value::from("http://pod")),
                "runtime is not a ws:// or wss:// URL with a host",
            ),
            (without("principal"), "principal missing or not a string"),
            (Value::from("just a string"), "entry is not a JSON object"),
            // Regressions from the grants_file fuzz target: a runtime that could never be
            // dialled, and a deadline `SystemTime` cannot hold (resume panicked on it).
            (
                with("runtime", Value::from("ws://host:notaport")),
                "runtime is not a ws:// or wss:// URL with a host",
            ),
            (
                with("runtime", Value::from("ws://:80")),
                "runtime is not a ws:// or wss:// URL with a host",
            ),
            (
                with("secret", Value::from("sécret")),
                "secret is not printable ASCII",
            ),
            (
                with("expires_at", Value::from(u64::MAX)),
                "expires_at is not a plausible time",
            ),
            (
                with("expires_at", Value::from(MAX_EXPIRES_AT + 1)),
                "expires_at is not a plausible time",
            ),
        ];
        for (entry, reason) in cases {
            // The good grant keeps its place after every bad one.
            let mut good2 = good.clone();
            good2.id = "ffffffff-aaaa-4bbb-8ccc-dddddddddddd".into();
            let report = parse(&file_with(vec![entry, entry_json(&good2)]), NOW).unwrap();
            assert_eq!(report.grants, vec![good2], "{reason}");
            assert_eq!(report.dropped.len(), 1, "{reason}");
            assert_eq!(report.dropped[0].1, reason);
        }
        // What `POST /attach` accepts resumes: an upper-case scheme (fuzz regression).
        let upper = parse(
            &file_with(vec![with(
                "runtime",
                Value::from("WSS://Pod.Example:8090/"),
            )]),
            NOW,
        )
        .unwrap();
        assert_eq!(upper.grants.len(), 1, "{:?}", upper.dropped);
        let latest = parse(
            &file_with(vec![with("expires_at", Value::from(MAX_EXPIRES_AT))]),
            NOW,
        )
        .unwrap();
        assert_eq!(latest.grants.len(), 1);
        // A session of exactly 32 is fine (bound), 33 above is not.
        let ok = parse(
            &file_with(vec![with("session", Value::from("a".repeat(32)))]),
            NOW,
        )
        .unwrap();
        assert_eq!(ok.grants.len(), 1);
    }

    #[test]
    fn tool_lists_round_trip_within_their_bounds_and_older_files_have_none() {
        let mut g = grant(1, NOW + 60);
        g.profile = "custom".into();
        g.allow = vec!["sys_info".into(), "browser_*".into()];
        g.deny = vec!["browser_evaluate".into()];
        g.tools = vec!["sys_info".into(), "browser_snapshot".into()];
        let report = parse(&encode(std::slice::from_ref(&g)), NOW).unwrap();
        assert_eq!(report.grants, vec![g.clone()]);
        // At the bounds: MAX_LIST_NAMES names of MAX_TOOL_NAME_BYTES bytes each.
        let mut e = entry_json(&g);
        let longest = format!("{}*", "b".repeat(MAX_TOOL_NAME_BYTES - 1));
        e["allow"] = serde_json::json!(vec![longest; MAX_LIST_NAMES]);
        let report = parse(&file_with(vec![e]), NOW).unwrap();
        assert_eq!(report.grants[0].allow.len(), MAX_LIST_NAMES);
        // Written before the lists existed: no allow, deny or tools at all.
        let mut old = entry_json(&grant(2, NOW + 60));
        for field in ["allow", "deny", "tools"] {
            old.as_object_mut().unwrap().remove(field);
        }
        let report = parse(&file_with(vec![old]), NOW).unwrap();
        let resumed = &report.grants[0];
        assert!(resumed.allow.is_empty() && resumed.deny.is_empty() && resumed.tools.is_empty());
    }

    #[test]
    fn bad_ids_are_labelled_by_index_and_duplicates_dropped() {
        let mut e = entry_json(&grant(1, NOW + 60));
        for bad in [
            Value::from("0000000A-aaaa-4bbb-8ccc-dddddddddddd"),
            Value::from("not-a-uuid"),
            Value::from(7),
        ] {
            e["id"] = bad;
            let report = parse(&file_with(vec![e.clone()]), NOW).unwrap();
            assert!(report.grants.is_empty());
            assert_eq!(report.dropped[0].0, "#0");
        }
        let g = entry_json(&grant(2, NOW + 60));
        let report = parse(&file_with(vec![g.clone(), g]), NOW).unwrap();
        assert_eq!(report.grants.len(), 1);
        assert_eq!(
            report.dropped,
            vec![(grant(2, 0).id, "duplicate id".into())]
        );
    }

    #[test]
    fn unknown_fields_are_ignored() {
        let mut e = entry_json(&grant(1, NOW + 60));
        e["future_field"] = serde_json::json!({"x": [1, 2]});
        let bytes = serde_json::to_vec(&serde_json::json!({
            "version": 1, "grants": [e], "written_by": "handnode 9"
        }))
        .unwrap();
        assert_eq!(parse(&bytes, NOW).unwrap().grants.len(), 1);
    }

    #[test]
    fn whole_file_rejections() {
        for (bytes, why) in [
            (b"{\"version\":1,\"grants\":[" as &[u8], "not valid JSON"),
            (b"[]", "top level is not a JSON object"),
            (b"{\"grants\":[]}", "version field missing"),
            (b"{\"version\":2,\"grants\":[]}", "version is not 1"),
            (
                b"{\"version\":1,\"grants\":{}}",
                "grants field missing or not an array",
            ),
            (b"\xff\xfe", "not valid JSON"),
        ] {
            let err = parse(bytes, NOW).unwrap_err();
            assert!(err.starts_with(why), "{err}");
        }
    }

    #[test]
    fn every_truncation_is_rejected_whole_or_parsed_without_panic() {
        let full = encode(&[grant(1, NOW + 60), grant(2, NOW + 60)]);
        for len in 0..full.len() {
            // A torn file must never resume a grant with a cut-off secret.
            if let Ok(report) = parse(&full[..len], NOW) {
                for g in report.grants {
                    assert!(g.secret.expose().starts_with("sekrit-value-"));
                    assert_eq!(g.secret.expose().len(), "sekrit-value-1".len());
                }
            }
        }
        assert_eq!(parse(&full, NOW).unwrap().grants.len(), 2);
    }

    #[test]
    fn corrupt_file_is_kept_aside() {
        let tmp = TempDir::fresh("corrupt");
        let store = GrantStore::open(&tmp.0).unwrap();
        let junk = b"{\"version\":1,\"grants\":[{\"secret\":\"sekrit-x\"";
        fs::write(store.path(), junk).unwrap();
        let report = store.load(NOW).unwrap();
        assert!(report.grants.is_empty());
        assert_eq!(report.dropped.len(), 1);
        assert_eq!(report.dropped[0].0, FILE_NAME);
        assert!(!report.dropped[0].1.contains("sekrit"));
        let aside = report.set_aside.unwrap();
        assert_eq!(aside, tmp.0.join(format!("grants.json.corrupt-{NOW}")));
        assert_eq!(fs::read(&aside).unwrap(), junk);
        assert!(!store.path().exists());
        // A second corruption in the same second does not overwrite the first.
        fs::write(store.path(), b"nope").unwrap();
        let second = store.load(NOW).unwrap().set_aside.unwrap();
        assert_ne!(second, aside);
        assert_eq!(fs::read(&aside).unwrap(), junk);
        assert_eq!(fs::read(&second).unwrap(), b"nope");
    }

    #[test]
    fn stale_temp_files_are_removed_on_open() {
        let tmp = TempDir::fresh("stale");
        fs::create_dir_all(&tmp.0).unwrap();
        let stale = tmp.0.join(format!("{TMP_PREFIX}1-0"));
        fs::write(&stale, b"half a secret").unwrap();
        GrantStore::open(&tmp.0).unwrap();
        assert!(!stale.exists());
    }

    #[test]
    fn file_holds_only_the_saved_grants_secrets() {
        let tmp = TempDir::fresh("only");
        let store = GrantStore::open(&tmp.0).unwrap();
        store
            .save(&[grant(1, NOW + 60), grant(2, NOW + 60)])
            .unwrap();
        store.save(&[grant(1, NOW + 60)]).unwrap();
        let text = fs::read_to_string(store.path()).unwrap();
        assert!(text.contains("sekrit-value-1"));
        assert!(!text.contains("sekrit-value-2"));
        store.save(&[]).unwrap();
        let text = fs::read_to_string(store.path()).unwrap();
        assert!(!text.contains("sekrit"), "{text}");
        assert_eq!(parse(text.as_bytes(), NOW).unwrap().grants.len(), 0);
        // Debug of a stored grant masks its secret.
        assert!(!format!("{:?}", grant(3, 0)).contains("sekrit"));
    }

    #[test]
    fn concurrent_saves_never_tear() {
        let tmp = TempDir::fresh("race");
        let store = Arc::new(GrantStore::open(&tmp.0).unwrap());
        let sets: Vec<Vec<StoredGrant>> = vec![
            (1..=3).map(|n| grant(n, NOW + 60)).collect(),
            (4..=9).map(|n| grant(n, NOW + 60)).collect(),
        ];
        let (done_tx, done_rx) = crossbeam_channel::unbounded();
        for set in sets.clone() {
            let store = Arc::clone(&store);
            let done_tx = done_tx.clone();
            std::thread::spawn(move || {
                for _ in 0..50 {
                    store.save(&set).unwrap();
                }
                done_tx.send(()).unwrap();
            });
        }
        // Read while the writers race: every read sees one whole set.
        let reader_store = Arc::clone(&store);
        let mut finished = 0;
        let watchdog = std::time::Instant::now() + std::time::Duration::from_secs(60);
        while finished < 2 {
            assert!(std::time::Instant::now() < watchdog, "saves hung");
            if done_rx.try_recv().is_ok() {
                finished += 1;
            }
            if let Ok(bytes) = fs::read(reader_store.path()) {
                let report = parse(&bytes, NOW).expect("a torn grants.json");
                assert!(sets.contains(&report.grants));
            }
        }
        let report = store.load(NOW).unwrap();
        assert!(sets.contains(&report.grants));
        assert_eq!(
            fs::read_dir(&tmp.0).unwrap().count(),
            1,
            "a temp file leaked"
        );
    }
}
