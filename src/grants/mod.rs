//! The grant registry: validates `POST /attach` bodies, creates, renews, replaces, revokes
//! and lists grants, persists the live ones, writes their lifecycle to the audit log, and
//! owns each grant thread through a `GrantHandle`.
//!
//! Lock order: the registry lock may be taken by a grant thread (when it ends on its own or
//! reports a call), so nothing under the registry lock ever waits for a grant thread.
//! Handles are joined only after the lock is released.

pub mod approvals;
pub mod calls;
pub mod dial;
pub mod halt;
pub mod notify;
pub mod persist;
pub mod running;

use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::thread::JoinHandle;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use crossbeam_channel::Sender;
use log::{debug, info, warn};
use serde_json::{json, Map, Value};

use crate::audit::{Audit, LifecycleEvent, Record};
use crate::base::error::Error;
use crate::base::ids::new_id;
use crate::base::secret::Secret;
use crate::base::timefmt::{now_unix, rfc3339};
use crate::base::wake::{Poller, Waker};
use crate::config::{Limits, Timing};
use crate::faults::{self, Site};
use crate::grants::approvals::{visible_tools, Approvals, Approve, Gate, GrantApprovals};
use crate::grants::calls::Services;
use crate::grants::dial::{
    CallEvent, Command, EndReason, GrantEvents, GrantSpec, GrantThread, State, Status,
};
use crate::grants::persist::{GrantStore, StoredGrant};
use crate::metrics::Metrics;
use crate::profiles::{profile_error, Profile};
use crate::tools::policy::{ToolLists, ToolPolicy};

pub use crate::config::MAX_TTL_SECS;
/// TTL when the request gives none (seconds).
pub const DEFAULT_TTL_SECS: u64 = 3_600;

pub const RUNTIME_ERROR: &str = "runtime must be a ws:// or wss:// URL";
pub const SESSION_ERROR: &str = "session must match [a-z0-9-]{1,32}";
pub const TTL_ERROR: &str = "ttl_secs must be 1...86400";
pub const SECRET_CHOICE_ERROR: &str = "provide exactly one of secret or admin_credential";
pub const BODY_ERROR: &str = "body must be a JSON object";

/// How the attach secret is obtained.
#[derive(Debug)]
pub enum SecretSource {
    /// Pre-minted by the caller.
    Given(Secret),
    /// The pod's admin credential: mint once, then forget it.
    AdminCredential(Secret),
}

/// A validated `POST /attach` body.
#[derive(Debug)]
pub struct AttachRequest {
    pub runtime: String,
    pub session: String,
    /// The profile with its `allow`/`deny` lists, resolved.
    pub policy: ToolPolicy,
    pub ttl_secs: u64,
    pub source: SecretSource,
    /// Tools whose every call waits for a person's decision (§10), as given.
    pub approve: Option<Approve>,
    /// `"limits"` as given (§16): checked against the `--grant-*` flags by the registry.
    pub limits: Option<Value>,
    /// `replace`: `Some(false)` refuses (`409`) to end a live grant of the same target with
    /// different tools; absent, such a request replaces it (contract §3).
    pub replace: Option<bool>,
}

/// What a `POST /attach` did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Attached {
    Created,
    /// The live grant of the target kept its id and socket; `new_secret`: the secret
    /// differs from the one it had (used at the next dial, not checked now).
    Renewed {
        new_secret: bool,
    },
    /// The live grant with this id ended `replaced`.
    Replaced(String),
}

impl Attached {
    /// The `attach` field of the `202`.
    pub fn as_str(&self) -> &'static str {
        match self {
            Attached::Created => "created",
            Attached::Renewed { .. } => "renewed",
            Attached::Replaced(_) => "replaced",
        }
    }
}

/// `"display"` other than `"own"` (§19).
pub const DISPLAY_ERROR: &str = "display must be \"own\" (a headless display of the grant's own, \
    so the owner's screen is never touched) or absent (the box's display)";

/// `files` (or another profile that requires one) without `folder`.
pub fn folder_required_error(profile: Profile) -> String {
    format!("profile {profile} needs \"folder\": the absolute path of the directory to lend")
}

fn session_ok(s: &str) -> bool {
    (1..=32).contains(&s.len())
        && s.bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
}

impl AttachRequest {
    /// Validate a body. The error is the message for a `400`; nothing is changed on error.
    pub fn parse(body: &[u8]) -> Result<AttachRequest, String> {
        let value: Value = serde_json::from_slice(body).map_err(|_| BODY_ERROR.to_string())?;
        let Value::Object(obj) = value else {
            return Err(BODY_ERROR.into());
        };
        for key in obj.keys() {
            if ![
                "runtime",
                "session",
                "profile",
                "allow",
                "deny",
                "ttl_secs",
                "secret",
                "admin_credential",
                "approve",
                "folder",
                "replace",
                "limits",
                "display",
            ]
            .contains(&key.as_str())
            {
                debug!("POST /attach: ignoring unknown field {key:?}");
            }
        }
        let runtime = match obj.get("runtime") {
            Some(Value::String(s)) if crate::base::url::is_runtime_url(s) => s.clone(),
            _ => return Err(RUNTIME_ERROR.into()),
        };
        let session = match obj.get("session") {
            Some(Value::String(s)) if session_ok(s) => s.clone(),
            _ => return Err(SESSION_ERROR.into()),
        };
        let profile = match obj.get("profile") {
            None => Profile::Observe,
            Some(Value::String(s)) => s.parse().map_err(|e: &str| e.to_string())?,
            Some(_) => return Err(profile_error().into()),
        };
        let list = |name: &str| -> Result<Vec<String>, String> {
            let wrong = || format!("{name} must be a list of tool names");
            match obj.get(name) {
                None | Some(Value::Null) => Ok(Vec::new()),
                Some(Value::Array(items)) => items
                    .iter()
                    .map(|v| v.as_str().map(str::to_string).ok_or_else(wrong))
                    .collect(),
                Some(_) => Err(wrong()),
            }
        };
        let lists = ToolLists {
            allow: list("allow")?,
            deny: list("deny")?,
        };
        let folder = match obj.get("folder") {
            None | Some(Value::Null) => None,
            Some(Value::String(f)) => Some(crate::tools::paths::parse(f)?),
            Some(_) => return Err("folder must be a string (an absolute path)".into()),
        };
        if folder.is_none() && profile.requires_folder() {
            return Err(folder_required_error(profile));
        }
        let own_display = match obj.get("display") {
            None | Some(Value::Null) => false,
            Some(Value::String(s)) if s == "own" => true,
            Some(_) => return Err(DISPLAY_ERROR.into()),
        };
        let policy = ToolPolicy::new(profile, lists)?
            .with_folder(folder)
            .with_own_display(own_display)?;
        let ttl_secs = match obj.get("ttl_secs") {
            None => DEFAULT_TTL_SECS,
            Some(v) => match v.as_u64() {
                Some(n) if (1..=MAX_TTL_SECS).contains(&n) => n,
                _ => return Err(TTL_ERROR.into()),
            },
        };
        let text_field = |name: &str| -> Result<Option<Secret>, String> {
            match obj.get(name) {
                None | Some(Value::Null) => Ok(None),
                Some(Value::String(s)) if s.is_empty() => Ok(None),
                // Sent as an HTTP header value: refuse now what could never dial (and the
                // grants-file loader would drop) rather than acknowledge it.
                Some(Value::String(s)) if !Secret::is_header_safe(s) => Err(format!(
                    "{name} must be printable ASCII (it is sent in an HTTP header)"
                )),
                Some(Value::String(s)) => Ok(Some(Secret::new(s.clone()))),
                Some(_) => Err(format!("{name} must be a string")),
            }
        };
        let source = match (text_field("secret")?, text_field("admin_credential")?) {
            (Some(s), None) => SecretSource::Given(s),
            (None, Some(c)) => SecretSource::AdminCredential(c),
            _ => return Err(SECRET_CHOICE_ERROR.into()),
        };
        let approve = Approve::from_json(obj.get("approve"))?;
        let replace = match obj.get("replace") {
            None | Some(Value::Null) => None,
            Some(Value::Bool(b)) => Some(*b),
            Some(_) => return Err("replace must be true or false".into()),
        };
        Ok(AttachRequest {
            runtime,
            session,
            policy,
            ttl_secs,
            source,
            approve,
            replace,
            limits: obj.get("limits").filter(|v| !v.is_null()).cloned(),
        })
    }
}

/// The identity of a grant's destination: runtime URL normalised (lowercase scheme and
/// host, explicit port, one trailing `/` removed) plus the session.
pub fn target_key(runtime: &str, session: &str) -> String {
    let trimmed = runtime.strip_suffix('/').unwrap_or(runtime);
    match crate::base::url::endpoint(trimmed) {
        Ok(ep) => {
            let scheme_len = if ep.tls { 6 } else { 5 };
            let after = &trimmed[scheme_len..];
            let path = after
                .find(['/', '?', '#'])
                .map(|i| &after[i..])
                .unwrap_or("");
            let host = if ep.host.contains(':') {
                format!("[{}]", ep.host)
            } else {
                ep.host
            };
            let scheme = if ep.tls { "wss" } else { "ws" };
            format!("{scheme}://{host}:{}{path} {session}", ep.port)
        }
        Err(_) => format!("{trimmed} {session}"),
    }
}

/// Owns one grant thread. Dropping it asks the thread to stop (close 1001, as on
/// shutdown, unless it already ended) and joins it.
#[derive(Debug)]
pub struct GrantHandle {
    tx: Sender<Command>,
    waker: Arc<Waker>,
    thread: Option<JoinHandle<()>>,
}

impl GrantHandle {
    fn send(&self, cmd: Command) {
        let _ = self.tx.send(cmd);
        self.waker.wake();
    }
}

impl Drop for GrantHandle {
    fn drop(&mut self) {
        self.send(Command::Shutdown);
        if let Some(thread) = self.thread.take() {
            if thread.thread().id() != std::thread::current().id() {
                let _ = thread.join();
            }
        }
    }
}

struct Entry {
    id: String,
    runtime: String,
    session: String,
    target: String,
    policy: Arc<ToolPolicy>,
    principal: String,
    created_at: u64,
    deadline: SystemTime,
    secret: Secret,
    /// `approve` as given, and what it gates.
    approve: Option<Approve>,
    gate: Arc<Gate>,
    status: Arc<Mutex<Status>>,
    handle: Option<GrantHandle>,
    ended_at: Option<Instant>,
    /// Its limits (§16), asked for or the flags'; `None` in `grants.json` when the flags'.
    limits: crate::cgroup::Limits,
    asked_limits: bool,
    confine: Arc<crate::cgroup::Confine>,
}

impl Entry {
    fn status(&self) -> Status {
        self.status
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    fn is_live(&self) -> bool {
        self.ended_at.is_none() && self.status().state != State::Ended
    }

    fn expires_at(&self) -> u64 {
        unix(self.deadline)
    }

    fn profile(&self) -> Profile {
        self.policy.profile()
    }

    fn stored(&self) -> StoredGrant {
        StoredGrant {
            id: self.id.clone(),
            runtime: self.runtime.clone(),
            session: self.session.clone(),
            profile: self.profile().as_str().to_string(),
            allow: self.policy.lists().allow.clone(),
            deny: self.policy.lists().deny.clone(),
            tools: self.policy.tools().iter().map(|t| t.to_string()).collect(),
            principal: self.principal.clone(),
            created_at: self.created_at,
            expires_at: self.expires_at(),
            secret: self.secret.clone(),
            approve: self.approve.clone(),
            approved_for_grant: self.gate.remembered(),
            folder: self
                .policy
                .folder()
                .map(|f| f.to_string_lossy().into_owned()),
            limits: self.asked_limits.then_some(self.limits),
            display: self.policy.own_display().then(|| "own".to_string()),
        }
    }

    /// The grant JSON of contract §1.2 plus `jobs` (its running jobs). Never contains
    /// the secret.
    /// The browser tier's `browser_isolation` is shown on `browser` grants; the host's own
    /// displays (§19) on a grant with one, and its walls (§21).
    /// `tools` is what this grant is lent on this box now, read as `tools/list` reads it
    /// (`ToolPolicy::lent`); `unavailable` names the rest of its list and why.
    fn view(&self, jobs: usize, services: &Services) -> Value {
        let isolation = services.browsers.as_ref().map(|b| b.isolation());
        let host = &services.host;
        let here = sources(services);
        let own = &host.own_displays;
        let status = self.status();
        let now = SystemTime::now();
        let mut v = Map::new();
        v.insert("id".into(), json!(self.id));
        v.insert("runtime".into(), json!(self.runtime));
        v.insert("session".into(), json!(self.session));
        v.insert("profile".into(), json!(self.profile().as_str()));
        let lists = self.policy.lists();
        v.insert("tools".into(), json!(self.policy.lent(here)));
        if let Some((missing, why)) = self.policy.unavailable(here) {
            v.insert("unavailable".into(), json!(missing));
            v.insert("unavailable_because".into(), json!(why));
        }
        v.insert("allow".into(), json!(lists.allow));
        v.insert("deny".into(), json!(lists.deny));
        if let Some(folder) = self.policy.folder() {
            v.insert("folder".into(), json!(folder.to_string_lossy()));
        }
        // `approve` as given (absent when none), what `remember` let through, and the
        // escalation check over every tool the policy can see, asking this grant's gate.
        if let Some(approve) = &self.approve {
            v.insert("approve".into(), approve.to_json());
        }
        v.insert("approved_for_grant".into(), json!(self.gate.remembered()));
        let escalation = self
            .policy
            .escalation_here(here, |t| self.gate.needs_approval(t));
        v.insert("shell".into(), json!(escalation.shell.as_str()));
        // §21: where the wall is missing, a shell of this grant is the lender's own.
        let walled = match self.profile() {
            Profile::Owner => "none",
            Profile::Browser => isolation.unwrap_or("none"),
            _ if self.policy.own_display() => own.isolation(),
            _ if host.config.grant_walls.is_some() => "bwrap",
            _ => "none",
        };
        v.insert("isolation".into(), json!(walled));
        let open_channel = (walled == "none"
            && self.profile() != Profile::Owner
            && escalation.shell.as_str() != "no")
            .then_some(crate::walls::UNWALLED_SHELL);
        let because = match (escalation.because, open_channel) {
            (Some(b), Some(o)) => Some(format!("{b}; {o}")),
            (b, o) => b.or(o.map(String::from)),
        };
        if let Some(because) = because {
            v.insert("shell_because".into(), json!(because));
        }
        if self.profile() == Profile::Browser {
            v.insert(
                "browser_isolation".into(),
                json!(isolation.unwrap_or("none")),
            );
        }
        if self.policy.own_display() {
            v.insert("display".into(), json!("own"));
            let (state, wheel) = match own.get(&self.id) {
                Some(d) => (d.to_json(), d.wheel().holder().as_str()),
                None => (json!({"own": true, "running": false}), "agent"),
            };
            v.insert("own_display".into(), state);
            v.insert("wheel".into(), json!(wheel));
        } else if self.profile() != Profile::Browser {
            // The box's display has one wheel, shared by every grant on it (§23).
            let holder = host.box_view.wheel().holder();
            v.insert("wheel".into(), json!(holder.as_str()));
            let viewable = crate::tools::display::boxview::viewable(&services.host);
            v.insert("live_view".into(), json!(viewable));
        }
        v.insert("principal".into(), json!(self.principal));
        v.insert("created_at".into(), json!(rfc3339(self.created_at)));
        v.insert("expires_at".into(), json!(rfc3339(self.expires_at())));
        let left = self
            .deadline
            .duration_since(now)
            .map(|d| d.as_secs())
            .unwrap_or(0);
        v.insert("expires_in_secs".into(), json!(left));
        v.insert("state".into(), json!(status.state.as_str()));
        if status.state == State::Redialing {
            let secs = status
                .redial_at
                .map(|at| {
                    at.saturating_duration_since(Instant::now())
                        .as_secs_f64()
                        .ceil() as u64
                })
                .unwrap_or(0);
            v.insert("redial_in_secs".into(), json!(secs));
        }
        if status.state == State::Ended {
            if let Some(reason) = &status.ended {
                v.insert("ended".into(), json!(reason.as_string()));
            }
        }
        v.insert("calls".into(), json!(status.calls));
        v.insert("jobs".into(), json!(jobs));
        for (key, value) in self.confine.grant_fields(self.limits) {
            v.insert(key.into(), value);
        }
        if let Some(err) = &status.last_error {
            v.insert("last_error".into(), json!(err));
        }
        Value::Object(v)
    }

    /// End this grant here (revoke or replace): mark it, drop its secret, and tell its
    /// thread to close the socket with 1000. The caller persists.
    fn end_here(&mut self, reason: EndReason) {
        {
            let mut st = self.status.lock().unwrap_or_else(|e| e.into_inner());
            st.state = State::Ended;
            st.ended = Some(reason.clone());
            st.redial_at = None;
        }
        self.mark_ended();
        if let Some(h) = &self.handle {
            h.send(Command::End(reason));
        }
    }

    /// Start the retention clock and forget the secret (it leaves disk with the next
    /// persist).
    fn mark_ended(&mut self) {
        self.ended_at = Some(Instant::now());
        self.secret = Secret::new("");
    }

    fn lifecycle(
        &self,
        event: LifecycleEvent,
        reason: Option<String>,
        previous: Option<String>,
    ) -> Record {
        Record::Lifecycle {
            event,
            grant_id: self.id.clone(),
            principal: self.principal.clone(),
            previous_principal: previous,
            profile: self.profile().as_str().to_string(),
            runtime: self.runtime.clone(),
            session: self.session.clone(),
            ttl_secs: Some(
                self.deadline
                    .duration_since(SystemTime::now())
                    .map(|d| d.as_secs())
                    .unwrap_or(0),
            ),
            reason,
        }
    }
}

fn unix(t: SystemTime) -> u64 {
    t.duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

/// Why `POST /attach` failed.
#[derive(Debug)]
pub enum AttachError {
    /// The pod refused to mint: `502`.
    Mint(Error),
    /// The grant could not be made durable or its thread started: `500`.
    Internal(String),
    /// The daemon is shutting down: `503`.
    ShuttingDown,
    /// The request names something this grant cannot have: `400` with this message.
    BadRequest(String),
    /// `replace:false` and a live grant of the target has other tools: `409`.
    WouldReplace(String),
    /// The lender halted everything (§22): `423` with this message.
    Halted(String),
}

struct Inner {
    entries: Vec<Entry>,
    shutting_down: bool,
}

/// Settings the registry needs besides the shared services.
#[derive(Clone, Debug)]
pub struct RegistryConfig {
    pub timing: Timing,
    pub limits: Limits,
    pub audit_args: bool,
    pub notify: bool,
}

/// All grants of this daemon.
pub struct Registry {
    inner: Mutex<Inner>,
    services: Arc<Services>,
    store: Option<GrantStore>,
    audit: Audit,
    metrics: Arc<Metrics>,
    tls: Arc<rustls::ClientConfig>,
    approvals: Arc<Approvals>,
    config: RegistryConfig,
    me: Weak<Registry>,
}

impl std::fmt::Debug for Registry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Registry").finish_non_exhaustive()
    }
}

struct Events {
    registry: Weak<Registry>,
}

impl GrantEvents for Events {
    fn ended(&self, grant_id: &str, reason: &EndReason) {
        if let Some(reg) = self.registry.upgrade() {
            reg.thread_ended(grant_id, reason);
        }
    }

    fn tool_call(&self, ev: CallEvent) {
        if let Some(reg) = self.registry.upgrade() {
            // The pod chose this name (a refused one can be megabytes): label it once here,
            // so the raw text goes no further and is hashed once.
            let tool = crate::base::label::name(&ev.tool).into_owned();
            drop(ev.tool);
            #[cfg(test)]
            if tool == faults::hooks::GRANT_TOOL {
                panic!("test hook: the grant thread panics");
            }
            reg.metrics.tool_call(&tool, ev.outcome);
            reg.audit.record(Record::ToolCall {
                grant_id: Some(ev.grant_id),
                principal: ev.principal,
                session: Some(ev.session),
                tool,
                outcome: ev.outcome,
                duration_ms: ev.duration.as_millis() as u64,
                args: ev.arguments,
            });
        }
    }

    fn closed(&self, code: u16) {
        if let Some(reg) = self.registry.upgrade() {
            reg.metrics.close(code);
        }
    }

    fn dialed(&self) {
        if let Some(reg) = self.registry.upgrade() {
            reg.metrics.dial();
        }
    }

    fn dial_failed(&self) {
        if let Some(reg) = self.registry.upgrade() {
            reg.metrics.dial_failed();
        }
    }

    fn attachment(&self, grant_id: &str, attached: bool) {
        if let Some(reg) = self.registry.upgrade() {
            reg.attachment_changed(grant_id, attached);
        }
    }

    fn bytes(&self, inbound: u64, outbound: u64) {
        if let Some(reg) = self.registry.upgrade() {
            if inbound > 0 {
                reg.metrics.bytes_in(inbound);
            }
            if outbound > 0 {
                reg.metrics.bytes_out(outbound);
            }
        }
    }
}

/// What serves tools on this box besides its own registry, as the grant sockets' and
/// `/mcp`'s catalogues see it: what a grant says it lends is read through this.
pub fn sources(services: &Services) -> crate::tools::policy::Sources<'_> {
    crate::tools::policy::Sources {
        upstream: services.upstream.as_deref(),
        browsers: services
            .browsers
            .as_deref()
            .map(|b| b as &dyn crate::tools::BrowserTier),
    }
}

impl Registry {
    pub fn new(
        services: Arc<Services>,
        store: Option<GrantStore>,
        audit: Audit,
        metrics: Arc<Metrics>,
        tls: Arc<rustls::ClientConfig>,
        approvals: Arc<Approvals>,
        config: RegistryConfig,
    ) -> Arc<Registry> {
        Arc::new_cyclic(|me| Registry {
            inner: Mutex::new(Inner {
                entries: Vec::new(),
                shutting_down: false,
            }),
            services,
            store,
            audit,
            metrics,
            tls,
            approvals,
            config,
            me: me.clone(),
        })
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn spawn(
        &self,
        spec: GrantSpec,
        gate: &Arc<Gate>,
    ) -> Result<(GrantHandle, Arc<Mutex<Status>>), Error> {
        let poller = Poller::new().map_err(|e| Error::io("create grant poller", e))?;
        let waker = poller.waker();
        let (tx, rx) = crossbeam_channel::unbounded();
        let status = Arc::new(Mutex::new(Status::default()));
        let name = format!("grant-{}", &spec.id[..8.min(spec.id.len())]);
        let id = spec.id.clone();
        let registry = self.me.clone();
        let thread_status = Arc::clone(&status);
        let thread = GrantThread {
            spec,
            commands: rx,
            poller,
            status: Arc::clone(&status),
            services: Arc::clone(&self.services),
            events: Arc::new(Events {
                registry: self.me.clone(),
            }),
            tls: Arc::clone(&self.tls),
            timing: self.config.timing.clone(),
            limits: self.config.limits.clone(),
            audit_args: self.config.audit_args,
            approvals: GrantApprovals {
                hub: Arc::clone(&self.approvals),
                gate: Arc::clone(gate),
            },
        };
        let join = std::thread::Builder::new()
            .name(name)
            .spawn(move || {
                // A bug reached by one grant's input ends that grant, not the daemon: the
                // unwind drops its socket and cancels its calls (their `Calls` drop), and
                // here it is ended, persisted and audited like any other end.
                let run = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| thread.run()));
                if let Err(payload) = run {
                    faults::caught(Site::Grant, &id, payload.as_ref());
                    {
                        let mut st = thread_status.lock().unwrap_or_else(|e| e.into_inner());
                        st.state = State::Ended;
                        st.redial_at = None;
                        st.ended.get_or_insert(EndReason::InternalError);
                    }
                    if let Some(reg) = registry.upgrade() {
                        reg.thread_ended(&id, &EndReason::InternalError);
                    }
                }
            })
            .map_err(|e| Error::io("start grant thread", e))?;
        Ok((
            GrantHandle {
                tx,
                waker,
                thread: Some(join),
            },
            status,
        ))
    }

    /// Write every live grant to disk (fsynced) before anyone is told about a change.
    fn persist(&self, inner: &Inner) -> Result<(), Error> {
        let Some(store) = &self.store else {
            return Ok(());
        };
        let live: Vec<StoredGrant> = inner
            .entries
            .iter()
            .filter(|e| e.is_live())
            .map(Entry::stored)
            .collect();
        store.save(&live)
    }

    fn prune(&self, inner: &mut Inner) -> Vec<GrantHandle> {
        let retention = self.config.timing.ended_retention;
        let mut dropped = Vec::new();
        inner.entries.retain_mut(|e| {
            let keep = e.ended_at.is_none_or(|at| at.elapsed() < retention);
            if !keep {
                if let Some(h) = e.handle.take() {
                    dropped.push(h);
                }
            }
            keep
        });
        dropped
    }

    /// Whether a request for a target with a live grant renews it (same profile, the
    /// same lists, the same `approve` and the same limits) rather than replacing it. A grant's tools never
    /// change in place.
    fn renews(
        live: &Entry,
        policy: &ToolPolicy,
        approve: &Option<Approve>,
        limits: crate::cgroup::Limits,
    ) -> bool {
        live.policy.profile() == policy.profile()
            && live.policy.lists().same_as(policy.lists())
            && live.policy.folder() == policy.folder()
            && live.policy.own_display() == policy.own_display()
            && Approve::same(&live.approve, approve)
            && live.limits == limits
    }

    /// `Err(WouldReplace)` when the target has a live grant this request would replace.
    fn refuse_replace(
        &self,
        target: &str,
        req: &AttachRequest,
        limits: crate::cgroup::Limits,
    ) -> Result<(), AttachError> {
        let inner = self.lock();
        match inner
            .entries
            .iter()
            .find(|e| e.target == target && e.is_live())
        {
            Some(live) if !Self::renews(live, &req.policy, &req.approve, limits) => {
                Err(AttachError::WouldReplace(Self::would_replace(
                    live,
                    &req.policy,
                    &req.approve,
                    limits,
                )))
            }
            _ => Ok(()),
        }
    }

    /// The `409` of a refused replace: which grant, and what differs.
    fn would_replace(
        live: &Entry,
        policy: &ToolPolicy,
        approve: &Option<Approve>,
        limits: crate::cgroup::Limits,
    ) -> String {
        let mut differs = Vec::new();
        if live.policy.profile() != policy.profile() {
            differs.push(format!(
                "profile {} -> {}",
                live.profile(),
                policy.profile()
            ));
        }
        if !live.policy.lists().same_as(policy.lists()) {
            differs.push("allow/deny lists".to_string());
        }
        if !Approve::same(&live.approve, approve) {
            differs.push("approve list".to_string());
        }
        if live.policy.folder() != policy.folder() {
            differs.push("lent folder".to_string());
        }
        if live.policy.own_display() != policy.own_display() {
            differs.push("display (own or the box's)".to_string());
        }
        if live.limits != limits {
            differs.push("limits".to_string());
        }
        format!(
            "grant {} already lends this box to session {} at this runtime with other tools ({}); a grant's tools never change in place: replace it (it ends `replaced`) with --replace (\"replace\": true), or revoke it first",
            live.id,
            live.session,
            differs.join(", ")
        )
    }

    /// Create, renew or replace a grant (contract §3). Blocks for the mint, if any, and
    /// for the fsync of the grant and its audit record; returns the grant JSON and
    /// whether it was a renewal.
    pub fn attach(
        &self,
        req: AttachRequest,
        principal: &str,
    ) -> Result<(Value, Attached), AttachError> {
        if self.services.halt.is_halted() {
            return Err(AttachError::Halted(format!(
                "{}; nothing is lent until POST /resume (handnode resume)",
                self.services.halt.answer()
            )));
        }
        let target = target_key(&req.runtime, &req.session);
        // Checked before any mint: a refused request changes nothing, at the pod neither.
        if req.policy.own_display() {
            if let Some(why) = self.services.host.own_displays.refusal() {
                return Err(AttachError::BadRequest(why.to_string()));
            }
        }
        if let Some(folder) = req.policy.folder() {
            crate::tools::paths::vet(
                folder,
                &self.services.host.config.protected,
                crate::tools::paths::open_folder,
            )
            .map_err(AttachError::BadRequest)?;
        }
        let visible = visible_tools(&req.policy, self.services.upstream.as_deref());
        let gated = match &req.approve {
            Some(approve) => approve.resolve(&visible).map_err(AttachError::BadRequest)?,
            None => Default::default(),
        };
        let unclassified = req
            .approve
            .as_ref()
            .is_some_and(|a| a.gates_unclassified(&req.policy));
        let confine = Arc::clone(&self.services.host.confine);
        let limits = match &req.limits {
            Some(v) => crate::cgroup::Limits::from_request(v, confine.ceiling())
                .map_err(AttachError::BadRequest)?,
            None => confine.ceiling(),
        };
        let asked_limits = req.limits.is_some();
        // Checked before any mint: a refused request changes nothing, at the pod neither.
        if req.replace == Some(false) {
            self.refuse_replace(&target, &req, limits)?;
        }
        let now = SystemTime::now();
        let (secret, ttl) = match req.source {
            SecretSource::Given(secret) => (secret, req.ttl_secs),
            SecretSource::AdminCredential(credential) => {
                let minted = crate::wire::mint::mint(
                    &req.runtime,
                    &req.session,
                    &credential,
                    req.ttl_secs,
                    self.config.timing.mint_timeout,
                    &self.tls,
                )
                .map_err(AttachError::Mint)?;
                drop(credential);
                let ttl = minted
                    .expires_in_secs
                    .map_or(req.ttl_secs, |pod| pod.min(req.ttl_secs));
                (minted.secret, ttl)
            }
        };
        let deadline = now + Duration::from_secs(ttl);

        let mut to_join = Vec::new();
        let result = {
            let mut inner = self.lock();
            if inner.shutting_down {
                return Err(AttachError::ShuttingDown);
            }
            to_join.extend(self.prune(&mut inner));
            let existing = inner
                .entries
                .iter()
                .position(|e| e.target == target && e.is_live());
            // Again under the lock: a grant may have come while the pod minted.
            if req.replace == Some(false) {
                if let Some(i) = existing {
                    if !Self::renews(&inner.entries[i], &req.policy, &req.approve, limits) {
                        return Err(AttachError::WouldReplace(Self::would_replace(
                            &inner.entries[i],
                            &req.policy,
                            &req.approve,
                            limits,
                        )));
                    }
                }
            }
            match existing {
                Some(i) if Self::renews(&inner.entries[i], &req.policy, &req.approve, limits) => {
                    let entry = &mut inner.entries[i];
                    let previous = std::mem::replace(&mut entry.principal, principal.to_string());
                    let new_secret = !entry.secret.matches(secret.expose());
                    entry.secret = secret.clone();
                    entry.deadline = deadline;
                    if let Some(h) = &entry.handle {
                        h.send(Command::Renew {
                            secret,
                            deadline,
                            principal: principal.to_string(),
                        });
                    }
                    let record = entry.lifecycle(LifecycleEvent::Renewed, None, Some(previous));
                    let view = entry.view(self.jobs().running_in(&entry.id), &self.services);
                    self.persist(&inner)
                        .and_then(|_| self.audit.record_durable(record))
                        .map_err(|e| {
                            AttachError::Internal(format!("could not persist the renewal: {e}"))
                        })?;
                    info!(
                        "grant {} renewed by {principal}, ttl {ttl}s",
                        view["id"].as_str().unwrap_or("")
                    );
                    Ok((view, Attached::Renewed { new_secret }))
                }
                existing => {
                    let mut replaced = None;
                    if let Some(i) = existing {
                        let old = &mut inner.entries[i];
                        old.end_here(EndReason::Replaced);
                        self.end_processes(&old.id);
                        info!(
                            "grant {} replaced (profile {} -> {}; tool lists {})",
                            old.id,
                            old.profile(),
                            req.policy.profile(),
                            if old.policy.lists().same_as(req.policy.lists()) {
                                "unchanged"
                            } else {
                                "changed"
                            }
                        );
                        let record =
                            old.lifecycle(LifecycleEvent::Replaced, Some("replaced".into()), None);
                        self.audit.record(record);
                        self.approvals.withdraw_grant(&old.id);
                        replaced = Some(old.id.clone());
                    }
                    let id = new_id();
                    let profile = req.policy.profile();
                    let policy = Arc::new(req.policy);
                    let spec = GrantSpec {
                        id: id.clone(),
                        runtime: req.runtime.clone(),
                        session: req.session.clone(),
                        policy: Arc::clone(&policy),
                        principal: principal.to_string(),
                        secret: secret.clone(),
                        deadline,
                    };
                    let gate = Gate::gating(gated, unclassified, []);
                    let (handle, status) = self
                        .spawn(spec, &gate)
                        .map_err(|e| AttachError::Internal(e.to_string()))?;
                    let entry = Entry {
                        id: id.clone(),
                        runtime: req.runtime,
                        session: req.session,
                        target,
                        policy,
                        principal: principal.to_string(),
                        created_at: unix(now),
                        deadline,
                        secret,
                        approve: req.approve,
                        gate,
                        status,
                        handle: Some(handle),
                        ended_at: None,
                        limits,
                        asked_limits,
                        confine: Arc::clone(&confine),
                    };
                    confine.set_limits(&id, limits);
                    let record = entry.lifecycle(LifecycleEvent::Created, None, None);
                    inner.entries.push(entry);
                    let durable = self
                        .persist(&inner)
                        .and_then(|_| self.audit.record_durable(record));
                    if let Err(e) = durable {
                        // Not durable, so not granted: stop it again and say why.
                        let entry = inner.entries.pop().expect("just pushed");
                        to_join.extend(entry.handle);
                        return Err(AttachError::Internal(format!(
                            "could not persist the grant: {e}"
                        )));
                    }
                    let view = inner
                        .entries
                        .last()
                        .expect("just pushed")
                        .view(0, &self.services);
                    info!(
                        "grant {id} created for session {} ({profile}, shell {}) by {principal}, ttl {ttl}s",
                        view["session"].as_str().unwrap_or(""),
                        view["shell"].as_str().unwrap_or("")
                    );
                    Ok((view, replaced.map_or(Attached::Created, Attached::Replaced)))
                }
            }
        };
        drop(to_join);
        result
    }

    /// `DELETE /attach/{id}`: end a live grant `cancelled`. `false` if unknown or ended.
    pub fn revoke(&self, id: &str) -> bool {
        let mut inner = self.lock();
        let Some(entry) = inner.entries.iter_mut().find(|e| e.id == id && e.is_live()) else {
            return false;
        };
        // The secret is dropped here, and from disk with the persist below.
        entry.end_here(EndReason::Cancelled);
        self.end_processes(id);
        self.approvals.withdraw_grant(id);
        let record = entry.lifecycle(LifecycleEvent::Revoked, Some("cancelled".into()), None);
        let who = (entry.session.clone(), entry.profile());
        info!("grant {id} revoked");
        self.record_end(inner, id, record, who, "revoked here");
        true
    }

    /// The shared tail of a grant's end: persist without it (under the lock), then audit
    /// and tell the person at the box (after the lock is released).
    fn record_end(
        &self,
        inner: MutexGuard<'_, Inner>,
        grant_id: &str,
        record: Record,
        (session, profile): (String, Profile),
        why: &str,
    ) {
        if let Err(e) = self.persist(&inner) {
            warn!("grant {grant_id}: could not persist its end: {e}");
        }
        drop(inner);
        self.audit.record(record);
        self.notify(
            &format!("handnode: {session} is no longer lent ({profile})"),
            why,
        );
    }

    /// A decision with `remember` added to a grant's `approved_for_grant`: keep it on disk
    /// (it lasts until the grant ends, restarts included).
    pub fn remembered(&self, grant_id: &str) {
        let inner = self.lock();
        if let Err(e) = self.persist(&inner) {
            warn!("grant {grant_id}: could not persist approved_for_grant: {e}");
        }
    }

    /// `GET /attach/{id}`.
    pub fn get(&self, id: &str) -> Option<Value> {
        let mut inner = self.lock();
        let dropped = self.prune(&mut inner);
        let view = inner
            .entries
            .iter()
            .find(|e| e.id == id)
            .map(|e| e.view(self.jobs().running_in(&e.id), &self.services));
        drop(inner);
        drop(dropped);
        view
    }

    /// `GET /attach`: live grants and those ended within the retention, oldest first.
    pub fn list(&self) -> Vec<Value> {
        let mut inner = self.lock();
        let dropped = self.prune(&mut inner);
        let views = inner
            .entries
            .iter()
            .map(|e| e.view(self.jobs().running_in(&e.id), &self.services))
            .collect();
        drop(inner);
        drop(dropped);
        views
    }

    /// The job table: a grant's jobs end with it.
    fn jobs(&self) -> &crate::tools::jobs::table::JobTable {
        &self.services.host.jobs
    }

    /// A grant ended: its jobs end (§9), and everything it started dies with its cgroup
    /// (§16), whatever left the jobs' process groups; what it kept in the tool host (upload
    /// parts, accessibility refs) goes.
    fn end_processes(&self, grant_id: &str) {
        self.jobs().end_scope(grant_id);
        // Its own display (§19) first, by SIGTERM, so the X server removes its socket and
        // lock; the cgroup kill below would leave them.
        self.services.host.own_displays.end_grant(grant_id);
        self.services.host.confine.end_grant(grant_id);
        // Its unfinished uploads' part files go with it.
        self.services.host.files.end_scope(grant_id);
        // Its apps (app_open) go with it; the cgroup kill above already took them.
        self.services.host.apps.end_scope(grant_id);
        // Its refs of its last desktop_snapshot, too.
        self.services.host.a11y.end_scope(grant_id);
    }

    /// Halt (§22): latch it (on disk first), then wake every grant thread (each answers
    /// its calls with the halt's text and closes 1000 `halted`), and kill every process of
    /// every grant and of the owner's `/mcp`: jobs, apps, throwaway browsers and whatever
    /// else is in a grant's groups. `Ok(false)`: already halted (nothing more is done).
    pub fn halt(&self, reason: Option<String>, by: &str) -> Result<bool, Error> {
        let halt = &self.services.halt;
        if !halt.halt(reason, by)? {
            return Ok(false);
        }
        let answer = halt.answer();
        // The owner's own calls stop too; a grant's are answered by its thread. Each is
        // marked first, so what its killed tool makes later is the halt's answer, and is
        // journalled as that (a bash's output is otherwise journalled only when sent).
        for call in self.services.running.list() {
            if call.grant.is_none() {
                call.ctl.stop(answer.clone());
            } else {
                call.ctl.mark_stopped(answer.clone());
            }
        }
        let live = self.halt_changed();
        let jobs = self.jobs();
        for job in jobs.running() {
            jobs.stop_because(&job, crate::tools::jobs::table::Stop::Kill, "halted");
        }
        // The box display's viewers go too (its VNC server then lingers and stops).
        self.services.host.box_view.viewers().end_all();
        for (id, profile) in &live {
            self.services.host.apps.end_scope(id);
            // Its live viewers go too (its display's processes die with its cgroup).
            self.services.host.own_displays.end_viewers(id);
            self.services.host.confine.kill_grant(id);
            if *profile == Profile::Browser {
                if let Some(browsers) = &self.services.browsers {
                    browsers.end_grant(id);
                }
            }
        }
        log::warn!(
            "halted by {by}: {} grant(s) stopped; POST /resume (handnode resume) lets them dial again",
            live.len()
        );
        Ok(true)
    }

    /// Resume after a halt: clear the latch (on disk first) and wake every grant thread,
    /// which dials again. `Ok(false)`: it was not halted.
    pub fn resume_after_halt(&self, by: &str) -> Result<bool, Error> {
        if !self.services.halt.resume()? {
            return Ok(false);
        }
        self.halt_changed();
        log::warn!("resumed by {by}: live grants dial again");
        Ok(true)
    }

    /// Wake every live grant's thread to look at the halt switch; returns who they are.
    fn halt_changed(&self) -> Vec<(String, Profile)> {
        let inner = self.lock();
        let live = inner.entries.iter().filter(|e| e.is_live());
        live.map(|entry| {
            if let Some(handle) = &entry.handle {
                handle.send(Command::HaltChanged);
            }
            (entry.id.clone(), entry.profile())
        })
        .collect()
    }

    /// Ids of the live grants.
    pub fn live_ids(&self) -> Vec<String> {
        self.lock()
            .entries
            .iter()
            .filter(|e| e.is_live())
            .map(|e| e.id.clone())
            .collect()
    }

    /// `(live grants, attached grants)` for `/readyz`.
    pub fn counts(&self) -> (usize, usize) {
        let inner = self.lock();
        let live = inner.entries.iter().filter(|e| e.is_live()).count();
        let attached = inner
            .entries
            .iter()
            .filter(|e| e.is_live() && e.status().state == State::Attached)
            .count();
        (live, attached)
    }

    /// `(grant id, state)` of every listed grant, for `/metrics`.
    pub fn states(&self) -> Vec<(String, &'static str)> {
        self.lock()
            .entries
            .iter()
            .map(|e| (e.id.clone(), e.status().state.as_str()))
            .collect()
    }

    /// Start the thread of every persisted live grant under its id. Returns how many.
    /// An unreadable grants file is an error: starting anyway would later overwrite grants
    /// we could not read.
    pub fn resume(&self) -> Result<usize, Error> {
        let Some(store) = &self.store else {
            return Ok(0);
        };
        let report = store.load(now_unix())?;
        for (which, why) in &report.dropped {
            warn!("dropped persisted grant {which}: {why}");
        }
        let mut inner = self.lock();
        let mut resumed = 0;
        for g in report.grants {
            let lists = ToolLists {
                allow: g.allow.clone(),
                deny: g.deny.clone(),
            };
            let folder = g.folder.as_deref().map(std::path::PathBuf::from);
            if let Some(folder) = &folder {
                // Vetted again: a folder that no longer passes is not lent again.
                if let Err(why) = crate::tools::paths::vet(
                    folder,
                    &self.services.host.config.protected,
                    crate::tools::paths::open_folder,
                ) {
                    warn!("dropped persisted grant {}: {why}", g.id);
                    continue;
                }
            }
            let policy = match ToolPolicy::resume(&g.profile, lists, &g.tools) {
                Ok(policy) => match policy
                    .with_folder(folder)
                    .with_own_display(g.display.as_deref() == Some("own"))
                {
                    Ok(policy) => Arc::new(policy),
                    Err(why) => {
                        warn!("dropped persisted grant {}: {why}", g.id);
                        continue;
                    }
                },
                Err(why) => {
                    // Never widened: a grant whose lists no longer resolve, or a custom
                    // grant whose list would now mean other tools, is dropped, and
                    // whoever lent it must lend again.
                    warn!("dropped persisted grant {}: {why}", g.id);
                    continue;
                }
            };
            if policy.profile() == Profile::Browser && self.services.browsers.is_none() {
                warn!(
                    "dropped persisted grant {}: {}",
                    g.id,
                    crate::profiles::BROWSER_NEEDS_COMMAND
                );
                continue;
            }
            if policy.profile().requires_apps() && self.services.host.config.apps.is_empty() {
                warn!(
                    "dropped persisted grant {}: {}",
                    g.id,
                    crate::profiles::APPS_NEEDS_LIST
                );
                continue;
            }
            // `persist` checked `approve` against the profile's own list; a deny may have
            // taken some of it away since: such a grant is dropped, not widened or narrowed.
            let outside = |t: &String| !crate::grants::approvals::fits_policy(t, &policy);
            let named = match &g.approve {
                Some(Approve::Tools(names)) => names.iter().find(|t| outside(t)),
                _ => None,
            };
            if let Some(name) = named.or_else(|| g.approved_for_grant.iter().find(|t| outside(t))) {
                warn!(
                    "dropped persisted grant {}: approve names {}, which it cannot use",
                    g.id,
                    crate::base::label::name(name)
                );
                continue;
            }
            let deadline = UNIX_EPOCH + Duration::from_secs(g.expires_at);
            // Validated at load against the policy; upstream names cannot be checked before
            // the upstreams answer, and gating a tool that is not there changes nothing.
            let gated = g
                .approve
                .as_ref()
                .map(|a| a.resolve_stored(&policy))
                .unwrap_or_default();
            let unclassified = g
                .approve
                .as_ref()
                .is_some_and(|a| a.gates_unclassified(&policy));
            let gate = Gate::gating(gated, unclassified, g.approved_for_grant.clone());
            let spec = GrantSpec {
                id: g.id.clone(),
                runtime: g.runtime.clone(),
                session: g.session.clone(),
                policy: Arc::clone(&policy),
                principal: g.principal.clone(),
                secret: g.secret.clone(),
                deadline,
            };
            match self.spawn(spec, &gate) {
                Ok((handle, status)) => {
                    // Never more than the flags allow now.
                    let ceiling = self.services.host.confine.ceiling();
                    let limits = g.limits.map_or(ceiling, |l| crate::cgroup::Limits {
                        memory_max: l.memory_max.min(ceiling.memory_max),
                        pids_max: l.pids_max.min(ceiling.pids_max),
                        cpu_weight: l.cpu_weight.min(ceiling.cpu_weight),
                    });
                    self.services.host.confine.set_limits(&g.id, limits);
                    inner.entries.push(Entry {
                        limits,
                        asked_limits: g.limits.is_some(),
                        confine: Arc::clone(&self.services.host.confine),
                        target: target_key(&g.runtime, &g.session),
                        id: g.id,
                        runtime: g.runtime,
                        session: g.session,
                        policy,
                        principal: g.principal,
                        created_at: g.created_at,
                        deadline,
                        secret: g.secret,
                        approve: g.approve,
                        gate,
                        status,
                        handle: Some(handle),
                        ended_at: None,
                    });
                    resumed += 1;
                }
                Err(e) => warn!("could not resume grant {}: {e}", g.id),
            }
        }
        if !report.clamped.is_empty() {
            // The file says the grants live longer than they will; make it say the truth.
            if let Err(e) = self.persist(&inner) {
                warn!("could not persist the clamped grants: {e}");
            }
        }
        Ok(resumed)
    }

    /// Stop every grant thread (close 1001), keep live grants on disk, refuse new ones.
    pub fn shutdown(&self) {
        let handles: Vec<GrantHandle> = {
            let mut inner = self.lock();
            inner.shutting_down = true;
            if let Err(e) = self.persist(&inner) {
                warn!("could not persist grants at shutdown: {e}");
            }
            inner
                .entries
                .iter_mut()
                .filter_map(|e| e.handle.take())
                .collect()
        };
        for handle in &handles {
            handle.send(Command::Shutdown);
        }
        drop(handles);
    }

    fn thread_ended(&self, grant_id: &str, reason: &EndReason) {
        let mut inner = self.lock();
        let Some(entry) = inner.entries.iter_mut().find(|e| e.id == grant_id) else {
            return;
        };
        if entry.ended_at.is_some() {
            return;
        }
        entry.mark_ended();
        self.end_processes(grant_id);
        self.approvals.withdraw_grant(grant_id);
        let event = match reason {
            EndReason::Deadline | EndReason::GrantExpired => LifecycleEvent::Expired,
            _ => LifecycleEvent::Ended,
        };
        let record = entry.lifecycle(event, Some(reason.as_string()), None);
        let who = (entry.session.clone(), entry.profile());
        let why = format!("grant ended: {}", reason.as_string());
        self.record_end(inner, grant_id, record, who, &why);
    }

    fn attachment_changed(&self, grant_id: &str, attached: bool) {
        let found = {
            let inner = self.lock();
            // A socket closed because the grant ended gets the end's notification, not
            // a "detached" one as well.
            inner
                .entries
                .iter()
                .find(|e| e.id == grant_id && e.ended_at.is_none())
                .map(|e| (e.session.clone(), e.profile(), e.expires_at()))
        };
        if let Some((session, profile, expires)) = found {
            if attached {
                self.notify(
                    &format!("handnode: this box is lent to {session}"),
                    &format!("profile {profile} until {}", rfc3339(expires)),
                );
            } else {
                self.notify(
                    &format!("handnode: {session} detached"),
                    &format!(
                        "profile {profile}; the grant lasts until {}",
                        rfc3339(expires)
                    ),
                );
            }
        }
    }

    fn notify(&self, summary: &str, body: &str) {
        if self.config.notify {
            crate::grants::notify::desktop(summary, body);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(body: &str) -> Result<AttachRequest, String> {
        AttachRequest::parse(body.as_bytes())
    }

    #[test]
    fn validation_table() {
        let ok = r#""runtime":"ws://127.0.0.1:1","session":"s""#;
        let cases: Vec<(String, &str)> = vec![
            ("{".into(), BODY_ERROR),
            ("[]".into(), BODY_ERROR),
            ("\"x\"".into(), BODY_ERROR),
            (r#"{"session":"s","secret":"x"}"#.into(), RUNTIME_ERROR),
            (
                r#"{"runtime":"http://h","session":"s","secret":"x"}"#.into(),
                RUNTIME_ERROR,
            ),
            (
                r#"{"runtime":"ws://","session":"s","secret":"x"}"#.into(),
                RUNTIME_ERROR,
            ),
            (
                r#"{"runtime":7,"session":"s","secret":"x"}"#.into(),
                RUNTIME_ERROR,
            ),
            (
                r#"{"runtime":"ws://h /x","session":"s","secret":"x"}"#.into(),
                RUNTIME_ERROR,
            ),
            (
                format!(
                    r#"{{"runtime":"ws://h/{}","session":"s","secret":"x"}}"#,
                    "a".repeat(crate::base::url::MAX_RUNTIME_URL_BYTES)
                ),
                RUNTIME_ERROR,
            ),
            (r#"{"runtime":"ws://h"}"#.into(), SESSION_ERROR),
            (
                r#"{"runtime":"ws://h","session":"UP","secret":"x"}"#.into(),
                SESSION_ERROR,
            ),
            (
                r#"{"runtime":"ws://h","session":"","secret":"x"}"#.into(),
                SESSION_ERROR,
            ),
            (
                format!(
                    r#"{{"runtime":"ws://h","session":"{}","secret":"x"}}"#,
                    "a".repeat(33)
                ),
                SESSION_ERROR,
            ),
            (
                r#"{"runtime":"ws://h","session":"a_b","secret":"x"}"#.into(),
                SESSION_ERROR,
            ),
            (
                r#"{"runtime":"ws://h","session":1,"secret":"x"}"#.into(),
                SESSION_ERROR,
            ),
            (
                format!(r#"{{{ok},"profile":"sandbox","secret":"x"}}"#),
                profile_error(),
            ),
            (
                format!(r#"{{{ok},"profile":"Owner","secret":"x"}}"#),
                profile_error(),
            ),
            (
                format!(r#"{{{ok},"profile":3,"secret":"x"}}"#),
                profile_error(),
            ),
            (
                format!(r#"{{{ok},"profile":"custom","secret":"x"}}"#),
                crate::tools::policy::CUSTOM_NEEDS_ALLOW_ERROR,
            ),
            (
                format!(r#"{{{ok},"profile":"custom","allow":[],"secret":"x"}}"#),
                crate::tools::policy::CUSTOM_NEEDS_ALLOW_ERROR,
            ),
            (
                format!(r#"{{{ok},"allow":["sys_info"],"secret":"x"}}"#),
                crate::tools::policy::ALLOW_NEEDS_CUSTOM_ERROR,
            ),
            (
                format!(r#"{{{ok},"profile":"custom","allow":"sys_info","secret":"x"}}"#),
                "allow must be a list of tool names",
            ),
            (
                format!(r#"{{{ok},"profile":"custom","allow":["sys_info",3],"secret":"x"}}"#),
                "allow must be a list of tool names",
            ),
            (
                format!(r#"{{{ok},"deny":{{"bash":true}},"secret":"x"}}"#),
                "deny must be a list of tool names",
            ),
            (
                format!(r#"{{{ok},"profile":"custom","allow":["sys_info","rm"],"secret":"x"}}"#),
                "unknown tool in allow: rm",
            ),
            (
                format!(r#"{{{ok},"profile":"desktop","deny":["browser_nope*"],"secret":"x"}}"#),
                "unknown tool in deny: browser_nope*",
            ),
            (
                format!(
                    r#"{{{ok},"deny":{},"secret":"x"}}"#,
                    serde_json::to_string(&crate::tools::names(Profile::Observe)).unwrap()
                ),
                crate::tools::policy::NO_TOOLS_ERROR,
            ),
            (format!(r#"{{{ok},"ttl_secs":0,"secret":"x"}}"#), TTL_ERROR),
            (
                format!(r#"{{{ok},"ttl_secs":86401,"secret":"x"}}"#),
                TTL_ERROR,
            ),
            (format!(r#"{{{ok},"ttl_secs":-5,"secret":"x"}}"#), TTL_ERROR),
            (
                format!(r#"{{{ok},"ttl_secs":1.5,"secret":"x"}}"#),
                TTL_ERROR,
            ),
            (
                format!(r#"{{{ok},"ttl_secs":"60","secret":"x"}}"#),
                TTL_ERROR,
            ),
            (format!(r#"{{{ok}}}"#), SECRET_CHOICE_ERROR),
            (format!(r#"{{{ok},"secret":""}}"#), SECRET_CHOICE_ERROR),
            (
                format!(r#"{{{ok},"secret":"a","admin_credential":"b"}}"#),
                SECRET_CHOICE_ERROR,
            ),
            (format!(r#"{{{ok},"secret":5}}"#), "secret must be a string"),
            (
                format!(r#"{{{ok},"admin_credential":true}}"#),
                "admin_credential must be a string",
            ),
        ];
        for (body, want) in cases {
            match parse(&body) {
                Err(msg) => assert_eq!(msg, want, "{body}"),
                Ok(r) => panic!("{body} accepted: {r:?}"),
            }
        }
    }

    #[test]
    fn defaults_and_bounds_accepted() {
        let r = parse(r#"{"runtime":"ws://127.0.0.1:1","session":"abc-1","secret":"x","future_field":{"a":1}}"#).unwrap();
        assert_eq!(r.policy.profile(), Profile::Observe);
        assert!(r.policy.lists().is_empty());
        assert_eq!(r.ttl_secs, 3600);
        assert!(matches!(r.source, SecretSource::Given(_)));
        let r = parse(&format!(r#"{{"runtime":"wss://h/","session":"{}","ttl_secs":86400,"admin_credential":"c","profile":"desktop"}}"#, "a".repeat(32))).unwrap();
        assert_eq!(r.ttl_secs, 86400);
        assert_eq!(r.policy.profile(), Profile::Desktop);
        assert!(matches!(r.source, SecretSource::AdminCredential(_)));
        let r = parse(r#"{"runtime":"ws://h","session":"s","profile":"browser","secret":"x"}"#)
            .unwrap();
        assert_eq!(r.policy.profile(), Profile::Browser);
        assert_eq!(
            parse(r#"{"runtime":"ws://h","session":"s","ttl_secs":1,"secret":"x"}"#)
                .unwrap()
                .ttl_secs,
            1
        );
        assert!(
            !format!("{r:?}").contains("\"c\""),
            "credential never in Debug"
        );
        let r = parse(r#"{"runtime":"ws://h","session":"s","secret":"x","profile":"custom","allow":["sys_info","browser_*"],"deny":["browser_evaluate"],"approve":["browser_file_upload"]}"#).unwrap();
        assert_eq!(r.policy.profile(), Profile::Custom);
        assert_eq!(r.policy.lists().allow, ["sys_info", "browser_*"]);
        assert_eq!(r.policy.lists().deny, ["browser_evaluate"]);
        assert_eq!(
            r.approve,
            Some(Approve::Tools(vec!["browser_file_upload".into()]))
        );
        assert!(!r.policy.allows("browser_evaluate"));
        assert!(r.policy.allows("browser_snapshot"));
        let r = parse(r#"{"runtime":"ws://h","session":"s","secret":"x","allow":null,"deny":["bash"],"profile":"owner"}"#).unwrap();
        assert!(!r.policy.allows("bash") && r.policy.allows("key"));
    }

    #[test]
    fn targets_normalise() {
        assert_eq!(
            target_key("WS://Host/", "s"),
            target_key("ws://host:80", "s")
        );
        assert_eq!(target_key("wss://h/base/", "s"), "wss://h:443/base s");
        assert_ne!(target_key("ws://h", "a"), target_key("ws://h", "b"));
        assert_ne!(target_key("ws://h:81", "a"), target_key("ws://h", "a"));
        assert_eq!(target_key("ws://[::1]:9/", "a"), "ws://[::1]:9 a");
    }

    #[test]
    fn ids_are_uuid_v4() {
        let id = new_id();
        assert_eq!(id.len(), 36);
        assert_eq!(&id[14..15], "4");
        assert!("89ab".contains(&id[19..20]));
        assert!(id
            .chars()
            .all(|c| c == '-' || c.is_ascii_digit() || ('a'..='f').contains(&c)));
        assert_ne!(id, new_id());
    }
}
