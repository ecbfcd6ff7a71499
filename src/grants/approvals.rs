//! Approvals (contract §10): the person who lent the box says yes, call by call, before the
//! tools a grant's `approve` names run. Owns what `approve` means for a grant ([`Approve`],
//! [`Gate`]), the set of held calls ([`Approvals`]) with its own timer thread (expiry of held
//! calls, and the `GET /approvals?wait=N` long-polls parked off the admin handler threads),
//! the decided-approval JSON, and the Allow/Deny desktop ask.
//!
//! A held call holds no thread: its `Completion` waits in its pending entry until a decision
//! starts the tool (on the decider's thread: starting never blocks), or a refusal, the
//! timeout or a withdrawal answers it without running anything.

use std::collections::BTreeSet;
use std::hash::{Hash, Hasher};
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::thread::JoinHandle;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use crossbeam_channel::{Receiver, RecvTimeoutError, Sender};
use serde_json::{json, Map, Value};
use tiny_http::{Header, Request, Response};

use crate::audit::{ApprovalEvent, Audit, Record};
use crate::base::timefmt::rfc3339;
use crate::grants::calls::Services;
use crate::grants::notify::{Ask, Choice, Notifier};
use crate::metrics::Metrics;
use crate::pool::{CallCtl, Completion};
use crate::profiles::{Class, Profile};
use crate::tools::class_of_any;
use crate::tools::policy::{ToolPolicy, UNCLASSIFIED};
use crate::tools::{CallContext, UpstreamSource};
use crate::wire::mcp::{Route, ToolOutput};

/// The word that, instead of a list, means every `shell`-class tool the grant can see.
pub const SHELL_WORD: &str = "shell";
pub const APPROVE_ERROR: &str = "approve must be a list of tool names or \"shell\"";
/// Most names one `approve` list may hold (there are far fewer tools).
pub const MAX_APPROVE_NAMES: usize = 64;
/// Longest `reason` of a decision (bytes); it is sent to the agent.
pub const MAX_REASON_BYTES: usize = 1024;
/// Longest `GET /approvals?wait=N` (seconds).
pub const MAX_WAIT_SECS: u64 = 60;
/// The deciding principal of a press on the desktop notification's buttons.
pub const DESKTOP_PRINCIPAL: &str = "desktop";
/// Bytes of the arguments shown in the desktop notification (contract §14's view, cut with
/// `+N bytes not shown` past this; `handnode approvals --full ID` shows all of it).
pub const NOTIFY_ARGS_BYTES: usize = 600;
/// Bytes of arguments (as compact JSON) one `GET /approvals` answer shows in full, over all
/// its approvals (§15): oldest first, an approval whose arguments fit what is left shows
/// them whole; the others show [`CUT_ARGS_BYTES`] of them as a string with
/// `"arguments_truncated": true`, and `GET /approvals/{id}` has them whole. With 256
/// pending approvals of 64 KiB each the answer stays under 1 MiB instead of 16.
pub const LIST_ARGS_BUDGET: usize = 64 << 10;
/// Bytes of a cut approval's arguments shown in `GET /approvals` (at a character boundary).
pub const CUT_ARGS_BYTES: usize = 1024;
/// Characters of a refused tool name echoed in a `400`.
const SHOWN_NAME_CHARS: usize = 64;

/// A grant's `approve` as given: `"shell"`, or tool names (duplicates dropped, order kept).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Approve {
    Shell,
    Tools(Vec<String>),
}

impl Approve {
    /// The `approve` field of `POST /attach` or of a stored grant. Absent, `null` and `[]`
    /// ask for nothing. `Err` is the message of a `400`.
    pub fn from_json(value: Option<&Value>) -> Result<Option<Approve>, String> {
        match value {
            None | Some(Value::Null) => Ok(None),
            Some(Value::String(s)) if s == SHELL_WORD => Ok(Some(Approve::Shell)),
            Some(Value::Array(items)) => {
                if items.len() > MAX_APPROVE_NAMES {
                    return Err(format!(
                        "approve lists at most {MAX_APPROVE_NAMES} tool names"
                    ));
                }
                let mut names: Vec<String> = Vec::new();
                for item in items {
                    let Value::String(name) = item else {
                        return Err(APPROVE_ERROR.into());
                    };
                    if !names.contains(name) {
                        names.push(name.clone());
                    }
                }
                Ok((!names.is_empty()).then_some(Approve::Tools(names)))
            }
            Some(_) => Err(APPROVE_ERROR.into()),
        }
    }

    pub fn to_json(&self) -> Value {
        match self {
            Approve::Shell => json!(SHELL_WORD),
            Approve::Tools(names) => json!(names),
        }
    }

    /// Whether two `approve`s ask for the same thing (a renew, not a replace): the same
    /// word, or the same set of names.
    pub fn same(a: &Option<Approve>, b: &Option<Approve>) -> bool {
        fn key(x: &Option<Approve>) -> Option<Option<BTreeSet<&String>>> {
            match x {
                None => None,
                Some(Approve::Shell) => Some(None),
                Some(Approve::Tools(names)) => Some(Some(names.iter().collect())),
            }
        }
        key(a) == key(b)
    }

    /// What a stored grant's `approve` gates when it resumes (checked at load against its
    /// policy; the upstreams' lists are not known yet, so names are taken as stored, and
    /// `"shell"` is every `shell`-class tool of the policy).
    pub fn resolve_stored(&self, policy: &ToolPolicy) -> BTreeSet<String> {
        match self {
            Approve::Shell => policy
                .tools()
                .iter()
                .filter(|t| class_of_any(t) == Some(Class::Shell))
                .map(|t| t.to_string())
                .collect(),
            Approve::Tools(names) => names.iter().cloned().collect(),
        }
    }

    /// Whether every name is one the grant may ever show (`can_use`, e.g. [`fits_policy`]):
    /// the load-time check of a stored grant.
    pub fn fits(&self, can_use: impl Fn(&str) -> bool) -> bool {
        match self {
            Approve::Shell => true,
            Approve::Tools(names) => names.iter().all(|n| can_use(n)),
        }
    }

    /// Whether this `approve` also gates the upstream tools without a class, which count
    /// as `shell` (`"shell"` under a policy that sees them: `owner`'s).
    pub fn gates_unclassified(&self, policy: &ToolPolicy) -> bool {
        matches!(self, Approve::Shell) && policy.sees_unclassified()
    }

    /// The tools whose calls wait for a decision, among the `visible` ones. `Err` is the
    /// `400` for a name the grant cannot use.
    pub fn resolve(&self, visible: &[String]) -> Result<BTreeSet<String>, String> {
        match self {
            Approve::Shell => Ok(visible
                .iter()
                .filter(|t| class_of_any(t) == Some(Class::Shell))
                .cloned()
                .collect()),
            Approve::Tools(names) => names
                .iter()
                .map(|name| {
                    if visible.contains(name) {
                        Ok(name.clone())
                    } else {
                        Err(format!(
                            "approve names {}, which this grant cannot use",
                            clip(name, SHOWN_NAME_CHARS)
                        ))
                    }
                })
                .collect(),
        }
    }
}

/// Whether a grant under `policy` can ever show `tool`: one of its effective tools (local,
/// upstream or, under `browser`, the browser tier's), or under `owner` an upstream tool
/// without a class.
pub fn fits_policy(tool: &str, policy: &ToolPolicy) -> bool {
    policy.allows(tool)
}

/// The tools a grant under `policy` can see now: its effective tools (the classified ones,
/// known without asking an upstream or starting a browser), then under `owner` the tools
/// without a class that the upstreams list at this moment.
pub fn visible_tools(policy: &ToolPolicy, upstream: Option<&dyn UpstreamSource>) -> Vec<String> {
    let mut names: Vec<String> = policy.tools().iter().map(|t| t.to_string()).collect();
    for (_, tool) in upstream.map(|u| u.tools()).unwrap_or_default() {
        if let Some(name) = tool.get("name").and_then(Value::as_str) {
            let local = crate::tools::find(name).is_some();
            if !local && policy.allows(name) && !names.iter().any(|n| n == name) {
                names.push(name.to_string());
            }
        }
    }
    names
}

/// Which of a grant's calls wait for a decision: the tools its `approve` resolved to, less
/// those allowed with `remember` (until the grant ends). Shared by the registry (grant JSON,
/// persistence) and the grant's thread (every call).
#[derive(Debug, Default)]
pub struct Gate {
    approve: BTreeSet<String>,
    /// Also every tool without a class (`"shell"` under `owner`, [`Approve::gates_unclassified`]).
    unclassified: bool,
    remembered: Mutex<BTreeSet<String>>,
}

impl Gate {
    /// `remembered` names outside `approve` are dropped: remembering cannot widen a grant.
    pub fn new(
        approve: BTreeSet<String>,
        remembered: impl IntoIterator<Item = String>,
    ) -> Arc<Gate> {
        Gate::gating(approve, false, remembered)
    }

    /// [`Gate::new`], gating the tools without a class too when `unclassified`.
    pub fn gating(
        approve: BTreeSet<String>,
        unclassified: bool,
        remembered: impl IntoIterator<Item = String>,
    ) -> Arc<Gate> {
        let mut gate = Gate {
            approve,
            unclassified,
            remembered: Mutex::new(BTreeSet::new()),
        };
        let remembered = remembered.into_iter().filter(|t| gate.gates(t)).collect();
        gate.remembered = Mutex::new(remembered);
        Arc::new(gate)
    }

    /// Whether calls of `tool` are gated at all (remembered or not).
    fn gates(&self, tool: &str) -> bool {
        self.approve.contains(tool) || (self.unclassified && class_of_any(tool).is_none())
    }

    /// Whether the gate holds anything (a grant that gates nothing never holds a call).
    pub fn gates_any(&self) -> bool {
        self.unclassified || !self.approve.is_empty()
    }

    /// Whether a call of `tool` waits for a decision now. [`UNCLASSIFIED`] (the escalation
    /// check's stand-in for every tool without a class) waits while none of them was
    /// remembered.
    pub fn needs_approval(&self, tool: &str) -> bool {
        if tool == UNCLASSIFIED {
            return self.unclassified
                && !self
                    .remembered_set()
                    .iter()
                    .any(|t| class_of_any(t).is_none());
        }
        self.gates(tool) && !self.remembered_set().contains(tool)
    }

    /// Later calls of `tool` run without asking. `false` if it already did.
    pub fn remember(&self, tool: &str) -> bool {
        self.gates(tool)
            && self
                .remembered
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .insert(tool.to_string())
    }

    /// The tools whose calls wait for a decision now, sorted (no allocation when none),
    /// then [`UNCLASSIFIED`] while the tools without a class wait too.
    pub fn waiting_tools(&self) -> Vec<String> {
        if !self.gates_any() {
            return Vec::new();
        }
        let mut waiting: Vec<String> = {
            let remembered = self.remembered_set();
            self.approve
                .iter()
                .filter(|t| !remembered.contains(*t))
                .cloned()
                .collect()
        };
        if self.needs_approval(UNCLASSIFIED) {
            waiting.push(UNCLASSIFIED.to_string());
        }
        waiting
    }

    /// `approved_for_grant`, sorted.
    pub fn remembered(&self) -> Vec<String> {
        self.remembered_set().iter().cloned().collect()
    }

    fn remembered_set(&self) -> MutexGuard<'_, BTreeSet<String>> {
        self.remembered.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// A decision on a held call, as `POST /approvals/{id}` carries it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Decision {
    pub allow: bool,
    pub reason: Option<String>,
    pub remember: bool,
}

impl Decision {
    /// Validate a `POST /approvals/{id}` body. `Err` is the `400` message; nothing is decided.
    pub fn parse(body: &[u8]) -> Result<Decision, String> {
        const BODY: &str = "body must be a JSON object";
        let Ok(Value::Object(obj)) = serde_json::from_slice::<Value>(body) else {
            return Err(BODY.into());
        };
        let allow = match obj.get("decision").and_then(Value::as_str) {
            Some("allow") => true,
            Some("deny") => false,
            _ => return Err("decision must be \"allow\" or \"deny\"".into()),
        };
        let reason = match obj.get("reason") {
            None | Some(Value::Null) => None,
            Some(Value::String(s)) if s.len() > MAX_REASON_BYTES => {
                return Err(format!("reason must be at most {MAX_REASON_BYTES} bytes"))
            }
            Some(Value::String(s)) if s.trim().is_empty() => None,
            Some(Value::String(s)) => Some(s.trim().to_string()),
            Some(_) => return Err("reason must be a string".into()),
        };
        let remember = match obj.get("remember") {
            None | Some(Value::Null) => false,
            Some(Value::Bool(b)) => *b,
            Some(_) => return Err("remember must be true or false".into()),
        };
        if remember && !allow {
            return Err("remember goes only with \"decision\":\"allow\"".into());
        }
        Ok(Decision {
            allow,
            reason,
            remember,
        })
    }
}

/// How a held call ends.
#[derive(Debug, PartialEq, Eq)]
pub enum Verdict {
    /// Allowed: start the tool now.
    Run,
    /// Denied or expired: answer `isError` with this text; nothing runs.
    Refuse(String),
    /// Cancelled, its socket lost or its grant ended: nobody waits for an answer.
    Withdrawn,
}

/// What the grant thread knows of a call it holds.
#[derive(Debug)]
pub struct Held {
    pub grant_id: String,
    pub principal: String,
    pub session: String,
    pub profile: Profile,
    pub tool: String,
    pub arguments: Value,
    pub ctl: Arc<CallCtl>,
    pub gate: Arc<Gate>,
}

type Resolve = Box<dyn FnOnce(Verdict, Value) + Send>;

struct Pending {
    id: String,
    held: Held,
    created_at: u64,
    expires_at: u64,
    created: Instant,
    deadline: Instant,
    resolve: Resolve,
    /// The desktop ask is started by the timer thread, off the grant thread.
    wants_ask: bool,
    ask: Option<Ask>,
}

impl Pending {
    /// The pending approval of §10, arguments in full.
    fn view(&self) -> Map<String, Value> {
        let h = &self.held;
        let mut v = Map::new();
        v.insert("id".into(), json!(self.id));
        v.insert("grant_id".into(), json!(h.grant_id));
        v.insert("principal".into(), json!(h.principal));
        v.insert("session".into(), json!(h.session));
        v.insert("profile".into(), json!(h.profile.as_str()));
        v.insert("tool".into(), json!(h.tool));
        v.insert("arguments".into(), h.arguments.clone());
        v.insert("created_at".into(), json!(rfc3339(self.created_at)));
        v.insert("expires_at".into(), json!(rfc3339(self.expires_at)));
        let left = self.deadline.saturating_duration_since(Instant::now());
        v.insert(
            "expires_in_secs".into(),
            json!(left.as_secs_f64().ceil() as u64),
        );
        v
    }

    fn record(&self, event: ApprovalEvent) -> Record {
        Record::Approval {
            event,
            approval_id: self.id.clone(),
            grant_id: self.held.grant_id.clone(),
            principal: self.held.principal.clone(),
            session: self.held.session.clone(),
            tool: self.held.tool.clone(),
            decision: None,
            decided_by: None,
            reason: None,
            waited_secs: (event != ApprovalEvent::Requested)
                .then(|| self.created.elapsed().as_secs_f64()),
            args: None,
        }
    }
}

/// A parked `GET /approvals?wait=N`.
struct Waiter {
    request: Request,
    seen: String,
    deadline: Instant,
}

#[derive(Default)]
struct State {
    /// Oldest first.
    pending: Vec<Pending>,
    waiters: Vec<Waiter>,
    /// Waiters taken off `waiters` whose answer is still being written.
    replying: usize,
    stopped: bool,
    /// The latest decisions, newest last, for the console's Approvals tab (§22).
    recent: std::collections::VecDeque<Value>,
    /// Decisions made so far: part of the list's `ETag`, so a long-poll sees a new one.
    decided: u64,
}

/// Decisions `GET /approvals` keeps under `recent`.
pub const RECENT_DECISIONS: usize = 20;
/// Bytes of a recent decision's arguments kept (shown on one line, revealed).
const RECENT_ARGS_BYTES: usize = 200;

impl State {
    /// Remember how `p` ended (`word`: allow, deny, expired, withdrawn) and note it on
    /// the call itself, for its journal record.
    fn note_decision(&mut self, p: &Pending, word: &str, by: &str, reason: Option<&str>) {
        let at = rfc3339(unix_now());
        let mut note = json!({"decision": word, "by": by, "at": at, "approval_id": p.id});
        if let Some(reason) = reason {
            note["reason"] = json!(reason);
        }
        p.held.ctl.note_approval(note.clone());
        note["grant_id"] = json!(p.held.grant_id);
        note["session"] = json!(p.held.session);
        note["tool"] = json!(p.held.tool);
        note["arguments"] = json!(crate::rules::reveal::one_line(
            &p.held.arguments,
            RECENT_ARGS_BYTES
        ));
        if self.recent.len() == RECENT_DECISIONS {
            self.recent.pop_front();
        }
        self.recent.push_back(note);
        self.decided += 1;
    }
}

/// Settings of the approvals hub.
#[derive(Clone, Debug)]
pub struct HubConfig {
    /// How long a held call waits; capped at [`crate::config::MAX_APPROVAL_TIMEOUT`].
    pub timeout: Duration,
    pub max_pending: usize,
    /// Held calls of one grant at once (`--max-pending-per-grant`).
    pub max_pending_per_grant: usize,
    pub max_waiters: usize,
    pub max_args_bytes: usize,
    pub audit_args: bool,
    /// `None`: no desktop asks (`--no-notify`, or no display).
    pub notifier: Option<Notifier>,
}

enum Msg {
    /// The pending set or the waiters changed.
    Wake,
    Stop,
}

/// Every call held for approval, over all grants.
pub struct Approvals {
    state: Mutex<State>,
    tx: Sender<Msg>,
    /// The timer thread, started on the first held call or long-poll: a daemon whose grants
    /// gate nothing keeps no thread (and no stack) for it.
    timer: Mutex<Timer>,
    config: HubConfig,
    audit: Audit,
    metrics: Arc<Metrics>,
    me: Weak<Approvals>,
}

impl std::fmt::Debug for Approvals {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Approvals").finish_non_exhaustive()
    }
}

#[derive(Default)]
struct Timer {
    /// Until the thread starts.
    rx: Option<Receiver<Msg>>,
    join: Option<JoinHandle<()>>,
}

/// Owns the timer thread. Dropping it withdraws every held call, answers every parked
/// long-poll, and joins the thread.
#[derive(Debug)]
pub struct ApprovalsGuard {
    hub: Arc<Approvals>,
}

impl Drop for ApprovalsGuard {
    fn drop(&mut self) {
        let join = {
            let mut timer = self.hub.timer.lock().unwrap_or_else(|e| e.into_inner());
            // No thread will start from here on.
            timer.rx = None;
            timer.join.take()
        };
        match join {
            Some(join) => {
                let _ = self.hub.tx.send(Msg::Stop);
                let _ = join.join();
            }
            None => self.hub.stop(),
        }
    }
}

/// What `decide` did.
#[derive(Debug)]
pub struct Decided {
    /// The decided approval: the pending JSON plus `decision`, `decided_by`, `decided_at`,
    /// `reason`, `remember`.
    pub view: Value,
    pub grant_id: String,
    /// `remember` added the tool to the grant's `approved_for_grant` (persist it).
    pub remembered: bool,
}

fn unix_now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

/// `60 s`, `0.3 s`: a timeout as the refusal text says it.
pub fn seconds(d: Duration) -> String {
    if d.as_millis() % 1000 == 0 {
        format!("{} s", d.as_secs())
    } else {
        format!("{:.1} s", d.as_secs_f64())
    }
}

fn clip(text: &str, chars: usize) -> String {
    let mut out: String = text.chars().take(chars).collect();
    if text.chars().nth(chars).is_some() {
        out.push('…');
    }
    out
}

/// The desktop notification of a held call: its title (the session and tool, and the
/// `env sets …` warning when there is one) and its body (`crate::rules::reveal`'s view of every
/// argument, cut at [`NOTIFY_ARGS_BYTES`] with how much was left out and where to see it).
pub fn notification(id: &str, session: &str, tool: &str, arguments: &Value) -> (String, String) {
    let mut title = format!(
        "handnode: {} wants to run {}",
        crate::rules::reveal::escape(session),
        crate::rules::reveal::escape(tool)
    );
    let code = crate::rules::reveal::code_env(arguments);
    if !code.is_empty() {
        title.push_str(&format!(" — env sets {}", code.join(", ")));
    }
    let mut body = crate::rules::reveal::summary(arguments, NOTIFY_ARGS_BYTES);
    if body.ends_with(" bytes not shown") {
        body.push_str(&format!("\nAll of it: handnode approvals --full {id}"));
    }
    (title, body)
}

fn header(name: &str, value: &str) -> Header {
    Header::from_bytes(name.as_bytes(), value.as_bytes()).expect("static header is valid")
}

/// The `200` of `GET /approvals`: the list and its `ETag`.
pub fn list_response(body: String, etag: &str) -> Response<std::io::Cursor<Vec<u8>>> {
    crate::base::http_headers::with_api_headers(
        Response::from_data(body.into_bytes())
            .with_header(header("Content-Type", "application/json"))
            .with_header(header("ETag", etag)),
    )
}

/// `seen` as a client may send it back: with or without the quotes of the `ETag` header.
pub fn same_etag(seen: &str, etag: &str) -> bool {
    seen.trim().trim_matches('"') == etag.trim_matches('"')
}

impl Approvals {
    /// Start the hub and its timer thread.
    pub fn start(
        config: HubConfig,
        audit: Audit,
        metrics: Arc<Metrics>,
    ) -> std::io::Result<(Arc<Approvals>, ApprovalsGuard)> {
        let (tx, rx) = crossbeam_channel::unbounded();
        let hub = Arc::new_cyclic(|me| Approvals {
            state: Mutex::new(State::default()),
            tx,
            timer: Mutex::new(Timer {
                rx: Some(rx),
                join: None,
            }),
            config,
            audit,
            metrics,
            me: me.clone(),
        });
        let guard = ApprovalsGuard {
            hub: Arc::clone(&hub),
        };
        Ok((hub, guard))
    }

    /// Start the timer thread unless it runs (or the hub is stopping). Never called with the
    /// state lock held.
    fn ensure_timer(&self) {
        let mut timer = self.timer.lock().unwrap_or_else(|e| e.into_inner());
        let (Some(rx), Some(me)) = (timer.rx.take(), self.me.upgrade()) else {
            return;
        };
        match std::thread::Builder::new()
            .name("approvals".into())
            .spawn(move || me.run(rx))
        {
            Ok(join) => timer.join = Some(join),
            // Held calls then wait for a decision without a timeout; say so loudly.
            Err(e) => {
                log::error!("cannot start the approvals thread (held calls will not expire): {e}")
            }
        }
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn wake(&self) {
        self.ensure_timer();
        let _ = self.tx.send(Msg::Wake);
    }

    /// The timeout a held call gets.
    pub fn timeout(&self) -> Duration {
        self.config.timeout.min(crate::config::MAX_APPROVAL_TIMEOUT)
    }

    /// Hold a call until a decision. `resolve` gets the verdict and the arguments back, once;
    /// at once when the call cannot be held (limits, shutdown, already cancelled).
    pub fn hold(&self, held: Held, resolve: impl FnOnce(Verdict, Value) + Send + 'static) {
        let args_bytes = held.arguments.to_string().len();
        if args_bytes > self.config.max_args_bytes {
            let text = format!(
                "{} needs approval, but its arguments ({args_bytes} bytes) are more than a person can review here ({} bytes); it did not run",
                held.tool, self.config.max_args_bytes
            );
            return resolve(Verdict::Refuse(text), held.arguments);
        }
        if held.ctl.is_cancelled() {
            return resolve(Verdict::Withdrawn, held.arguments);
        }
        let timeout = self.timeout();
        let now = unix_now();
        let mut st = self.lock();
        let refusal = if st.stopped {
            Some(format!(
                "handnode is shutting down; {} did not run",
                held.tool
            ))
        } else if st
            .pending
            .iter()
            .filter(|p| p.held.grant_id == held.grant_id)
            .count()
            >= self.config.max_pending_per_grant
        {
            Some(format!(
                "too many of this grant's calls are waiting for approval ({}); {} did not run. \
                 Wait for a decision on one of them.",
                self.config.max_pending_per_grant, held.tool
            ))
        } else if st.pending.len() >= self.config.max_pending {
            Some(format!(
                "too many calls are already waiting for approval ({}); {} did not run",
                self.config.max_pending, held.tool
            ))
        } else {
            None
        };
        if let Some(text) = refusal {
            drop(st);
            return resolve(Verdict::Refuse(text), held.arguments);
        }
        let created = Instant::now();
        let args = self.config.audit_args.then(|| held.arguments.clone());
        let pending = Pending {
            id: crate::base::ids::new_id(),
            held,
            created_at: now,
            expires_at: now + timeout.as_secs_f64().ceil() as u64,
            created,
            deadline: created + timeout,
            resolve: Box::new(resolve),
            wants_ask: self.config.notifier.is_some(),
            ask: None,
        };
        let mut record = pending.record(ApprovalEvent::Requested);
        if let Record::Approval { args: a, .. } = &mut record {
            *a = args;
        }
        log::info!(
            "approval {}: grant {} wants to run {}; waiting up to {}",
            pending.id,
            pending.held.grant_id,
            pending.held.tool,
            seconds(timeout)
        );
        st.pending.push(pending);
        self.metrics.set_approvals_pending(st.pending.len());
        drop(st);
        self.metrics.approval_requested();
        self.audit.record(record);
        self.wake();
    }

    /// `GET /approvals`: the pending approvals, oldest first, and the set's `ETag`.
    pub fn list(&self) -> (Value, String) {
        let st = self.lock();
        list_of(&st)
    }

    /// `GET /approvals/{id}`: one pending approval with its arguments whole, or `None`.
    pub fn get(&self, id: &str) -> Option<Value> {
        let st = self.lock();
        let p = st.pending.iter().find(|p| p.id == id)?;
        Some(Value::Object(p.view()))
    }

    /// Decide a held call. `None`: no such approval (unknown, decided, expired, withdrawn).
    pub fn decide(&self, id: &str, decision: Decision, by: &str) -> Option<Decided> {
        let (p, watched) = {
            let mut st = self.lock();
            let i = st.pending.iter().position(|p| p.id == id)?;
            let p = st.pending.remove(i);
            let word = if decision.allow { "allow" } else { "deny" };
            st.note_decision(&p, word, by, decision.reason.as_deref());
            self.metrics.set_approvals_pending(st.pending.len());
            (p, !st.waiters.is_empty())
        };
        if let Some(ask) = &p.ask {
            ask.cancel();
        }
        let remembered = decision.allow && decision.remember && p.held.gate.remember(&p.held.tool);
        let waited = p.created.elapsed().as_secs_f64();
        let word = if decision.allow { "allow" } else { "deny" };
        // The arguments stay in the answer: it goes to the admin API only.
        let mut view = p.view();
        let mut record = p.record(ApprovalEvent::Decided);
        let verdict = if decision.allow {
            Verdict::Run
        } else {
            let mut text = format!("denied by {by}");
            if let Some(reason) = &decision.reason {
                text.push_str(": ");
                text.push_str(reason);
            }
            text.push_str("; it did not run");
            Verdict::Refuse(text)
        };
        let grant_id = p.held.grant_id.clone();
        let id = p.id.clone();
        // First the call (its tool starts now), then the bookkeeping.
        (p.resolve)(verdict, p.held.arguments);
        // Only long-polls care that the set shrank (a later nearest expiry is harmless to
        // the timer): waking the timer thread for nothing costs the call a context switch.
        if watched {
            self.wake();
        }
        if let Record::Approval {
            decision: d,
            decided_by,
            reason,
            ..
        } = &mut record
        {
            *d = Some(word);
            *decided_by = Some(by.to_string());
            reason.clone_from(&decision.reason);
        }
        log::info!(
            "approval {id}: {word} by {by} after {waited:.1} s{}",
            if remembered {
                "; later calls of this tool under the grant run without asking"
            } else {
                ""
            }
        );
        self.audit.record(record);
        self.metrics.approval_ended(word);
        view.remove("expires_in_secs");
        view.insert("decision".into(), json!(word));
        view.insert("decided_by".into(), json!(by));
        view.insert("decided_at".into(), json!(rfc3339(unix_now())));
        if let Some(reason) = &decision.reason {
            view.insert("reason".into(), json!(reason));
        }
        view.insert(
            "remember".into(),
            json!(decision.allow && decision.remember),
        );
        Some(Decided {
            view: Value::Object(view),
            grant_id,
            remembered,
        })
    }

    /// Withdraw the held call of `ctl` (cancelled, or its socket lost). `true` if it was held.
    pub fn withdraw(&self, ctl: &Arc<CallCtl>) -> bool {
        let taken: Vec<Pending> = {
            let mut st = self.lock();
            let (out, keep) = std::mem::take(&mut st.pending)
                .into_iter()
                .partition(|p| Arc::ptr_eq(&p.held.ctl, ctl));
            st.pending = keep;
            self.metrics.set_approvals_pending(st.pending.len());
            out
        };
        let any = !taken.is_empty();
        self.finish_withdrawn(taken, "withdrawn");
        any
    }

    /// The approval id of the call `ctl` while it is held (`GET /calls` lists it as
    /// `waiting_approval`; `DELETE /calls/{id}` decides it).
    pub fn pending_id(&self, ctl: &Arc<CallCtl>) -> Option<String> {
        self.lock()
            .pending
            .iter()
            .find(|p| Arc::ptr_eq(&p.held.ctl, ctl))
            .map(|p| p.id.clone())
    }

    /// The grant ended: withdraw all its held calls. Returns how many.
    pub fn withdraw_grant(&self, grant_id: &str) -> usize {
        let taken: Vec<Pending> = {
            let mut st = self.lock();
            let (out, keep) = std::mem::take(&mut st.pending)
                .into_iter()
                .partition(|p| p.held.grant_id == grant_id);
            st.pending = keep;
            self.metrics.set_approvals_pending(st.pending.len());
            out
        };
        let n = taken.len();
        self.finish_withdrawn(taken, "withdrawn: the grant ended");
        n
    }

    fn finish_withdrawn(&self, taken: Vec<Pending>, why: &str) {
        if taken.is_empty() {
            return;
        }
        {
            let mut st = self.lock();
            for p in &taken {
                st.note_decision(p, "withdrawn", "handnode", Some(why));
            }
        }
        self.wake();
        for p in taken {
            if let Some(ask) = &p.ask {
                ask.cancel();
            }
            log::info!("approval {}: {why}", p.id);
            self.audit.record(p.record(ApprovalEvent::Withdrawn));
            self.metrics.approval_ended("withdrawn");
            (p.resolve)(Verdict::Withdrawn, p.held.arguments);
        }
    }

    /// Park a long-poll until the pending set differs from `seen` or `wait` has passed; the
    /// timer thread answers it. The request comes back when the waiters are at their bound
    /// (answer `429`).
    pub fn park(&self, request: Request, seen: String, wait: Duration) -> Option<Request> {
        let mut st = self.lock();
        if st.stopped || st.waiters.len() + st.replying >= self.config.max_waiters {
            return Some(request);
        }
        st.waiters.push(Waiter {
            request,
            seen,
            deadline: Instant::now() + wait,
        });
        self.metrics
            .set_approval_waiters(st.waiters.len() + st.replying);
        drop(st);
        self.wake();
        None
    }

    /// Most long-polls parked at once.
    pub fn max_waiters(&self) -> usize {
        self.config.max_waiters
    }

    fn run(self: Arc<Self>, rx: Receiver<Msg>) {
        loop {
            let timeout = {
                let st = self.lock();
                let now = Instant::now();
                st.pending
                    .iter()
                    .map(|p| p.deadline)
                    .chain(st.waiters.iter().map(|w| w.deadline))
                    .min()
                    .map(|at| at.saturating_duration_since(now))
            };
            let msg = match timeout {
                Some(t) => rx.recv_timeout(t),
                None => rx.recv().map_err(|_| RecvTimeoutError::Disconnected),
            };
            match msg {
                Ok(Msg::Stop) | Err(RecvTimeoutError::Disconnected) => break,
                Ok(Msg::Wake) | Err(RecvTimeoutError::Timeout) => {}
            }
            // One turn serves every wake queued so far.
            while let Ok(msg) = rx.try_recv() {
                if matches!(msg, Msg::Stop) {
                    return self.stop();
                }
            }
            self.turn();
        }
        self.stop();
    }

    /// Expire what is due, start desktop asks, answer the waiters whose set changed or
    /// whose time is up.
    fn turn(&self) {
        let now = Instant::now();
        let (expired, asks, answers) = {
            let mut st = self.lock();
            let (expired, keep): (Vec<Pending>, Vec<Pending>) = std::mem::take(&mut st.pending)
                .into_iter()
                .partition(|p| p.deadline <= now);
            st.pending = keep;
            for p in &expired {
                st.note_decision(p, "expired", "nobody", None);
            }
            self.metrics.set_approvals_pending(st.pending.len());
            let asks: Vec<(String, String, String, Duration)> = st
                .pending
                .iter_mut()
                .filter_map(|p| {
                    std::mem::take(&mut p.wants_ask).then(|| {
                        let (title, body) =
                            notification(&p.id, &p.held.session, &p.held.tool, &p.held.arguments);
                        (
                            p.id.clone(),
                            title,
                            body,
                            p.deadline.saturating_duration_since(now),
                        )
                    })
                })
                .collect();
            let (body, etag) = list_of(&st);
            let (due, keep): (Vec<Waiter>, Vec<Waiter>) = std::mem::take(&mut st.waiters)
                .into_iter()
                .partition(|w| w.deadline <= now || !same_etag(&w.seen, &etag));
            st.waiters = keep;
            st.replying += due.len();
            (expired, asks, (due, body.to_string(), etag))
        };
        let timeout = self.timeout();
        for p in expired {
            if let Some(ask) = &p.ask {
                ask.cancel();
            }
            log::info!(
                "approval {}: no decision within {}; {} did not run",
                p.id,
                seconds(timeout),
                p.held.tool
            );
            self.audit.record(p.record(ApprovalEvent::Expired));
            self.metrics.approval_ended("expired");
            let text = format!(
                "no one approved {} within {}; it did not run",
                p.held.tool,
                seconds(timeout)
            );
            (p.resolve)(Verdict::Refuse(text), p.held.arguments);
        }
        for (id, summary_line, body, expire) in asks {
            self.ask(id, &summary_line, &body, expire);
        }
        let (due, body, etag) = answers;
        for waiter in due {
            self.answer(waiter.request, body.clone(), etag.clone());
        }
    }

    /// Show the Allow/Deny notification of one held call.
    fn ask(&self, id: String, summary_line: &str, body: &str, expire: Duration) {
        let Some(notifier) = &self.config.notifier else {
            return;
        };
        let me = self.me.clone();
        let asked = id.clone();
        let body = format!("{body}\nAllow or deny within {}.", seconds(expire));
        let ask = notifier.ask(summary_line, &body, expire, move |choice| {
            let (Some(choice), Some(hub)) = (choice, me.upgrade()) else {
                return;
            };
            let decision = Decision {
                allow: choice == Choice::Allow,
                reason: None,
                remember: false,
            };
            hub.decide(&asked, decision, DESKTOP_PRINCIPAL);
        });
        let Some(ask) = ask else { return };
        let mut st = self.lock();
        match st.pending.iter_mut().find(|p| p.id == id) {
            Some(p) => p.ask = Some(ask),
            // Decided while the notification was starting.
            None => {
                drop(st);
                ask.cancel();
            }
        }
    }

    /// Write a long-poll's answer on a short-lived thread, so a slow reader never holds up
    /// the timers (at most `max_waiters` of these exist: they count as waiters until done).
    fn answer(&self, request: Request, body: String, etag: String) {
        let me = self.me.clone();
        let reply = move || {
            let _ = request.respond(list_response(body, &etag));
            if let Some(hub) = me.upgrade() {
                hub.replied();
            }
        };
        if let Err(e) = std::thread::Builder::new()
            .name("approvals-reply".into())
            .spawn(reply)
        {
            log::warn!("cannot start a thread to answer a long-poll: {e}");
            self.replied();
        }
    }

    fn replied(&self) {
        let mut st = self.lock();
        st.replying -= 1;
        self.metrics
            .set_approval_waiters(st.waiters.len() + st.replying);
    }

    fn stop(&self) {
        let (pending, waiters, body, etag) = {
            let mut st = self.lock();
            st.stopped = true;
            let pending = std::mem::take(&mut st.pending);
            self.metrics.set_approvals_pending(0);
            let waiters = std::mem::take(&mut st.waiters);
            let (body, etag) = list_of(&st);
            (pending, waiters, body.to_string(), etag)
        };
        self.finish_withdrawn(pending, "withdrawn: handnode is shutting down");
        for w in waiters {
            let _ = w.request.respond(list_response(body.clone(), &etag));
        }
    }
}

fn list_of(st: &State) -> (Value, String) {
    let mut hasher = std::collections::hash_map::DefaultHasher::new();
    for p in &st.pending {
        p.id.hash(&mut hasher);
    }
    st.decided.hash(&mut hasher);
    let etag = format!("\"{:016x}\"", hasher.finish());
    let mut budget = LIST_ARGS_BUDGET;
    let list: Vec<Value> = st
        .pending
        .iter()
        .map(|p| {
            let mut view = p.view();
            let text = p.held.arguments.to_string();
            if text.len() <= budget {
                budget -= text.len();
            } else {
                let kept = crate::base::text::head(&text, CUT_ARGS_BYTES);
                view.insert("arguments".into(), json!(kept));
                view.insert("arguments_truncated".into(), json!(true));
                view.insert("arguments_bytes".into(), json!(text.len()));
                budget = 0;
            }
            Value::Object(view)
        })
        .collect();
    let recent: Vec<&Value> = st.recent.iter().rev().collect();
    (json!({ "approvals": list, "recent": recent }), etag)
}

/// What a grant's thread needs to hold calls: the hub and this grant's gate.
#[derive(Clone, Debug)]
pub struct GrantApprovals {
    pub hub: Arc<Approvals>,
    pub gate: Arc<Gate>,
}

/// Who asks, for the pending entry.
#[derive(Clone, Debug)]
pub struct Asker<'a> {
    pub grant_id: &'a str,
    pub principal: &'a str,
    pub session: &'a str,
    pub profile: Profile,
}

impl GrantApprovals {
    /// Start a call, or hold it first when its tool needs approval. Never blocks.
    pub fn start(
        &self,
        services: &Arc<Services>,
        asker: Asker<'_>,
        (route, name, arguments): (Route, String, Value),
        cx: CallContext,
        done: Completion,
    ) {
        if !self.gate.needs_approval(&name) {
            return services.start(route, name, arguments, cx, done);
        }
        // A URL the browser may not open is refused now, not after someone said yes.
        if let Err(why) = crate::grants::calls::url_allowed(&route, &cx, &name, &arguments) {
            return done.complete(ToolOutput::tool_error(why));
        }
        let held = Held {
            grant_id: asker.grant_id.to_string(),
            principal: asker.principal.to_string(),
            session: asker.session.to_string(),
            profile: asker.profile,
            tool: name.clone(),
            arguments,
            ctl: Arc::clone(&cx.ctl),
            gate: Arc::clone(&self.gate),
        };
        let services = Arc::clone(services);
        self.hub
            .hold(held, move |verdict, arguments| match verdict {
                Verdict::Run => services.start(route, name, arguments, cx, done),
                Verdict::Refuse(text) => done.complete(ToolOutput::NotApproved(text)),
                // Nobody reads this reply (the call is cancelled or its socket gone); answered
                // anyway so the completion does not report an internal error.
                Verdict::Withdrawn => done.complete(ToolOutput::NotApproved(
                    "withdrawn before a decision; it did not run".into(),
                )),
            });
    }

    /// The call of `ctl` was cancelled or lost: `true` if it was waiting for approval.
    pub fn withdraw(&self, ctl: &Arc<CallCtl>) -> bool {
        // A grant that gates nothing never held a call: spare the hub's lock.
        self.gate.gates_any() && self.hub.withdraw(ctl)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fixed(profile: Profile) -> ToolPolicy {
        ToolPolicy::fixed(profile).unwrap()
    }

    #[test]
    fn approve_parses_lists_and_the_shell_word() {
        let parse = |v: Value| Approve::from_json(Some(&v));
        assert_eq!(Approve::from_json(None), Ok(None));
        assert_eq!(parse(json!(null)), Ok(None));
        assert_eq!(parse(json!([])), Ok(None));
        assert_eq!(parse(json!("shell")), Ok(Some(Approve::Shell)));
        assert_eq!(
            parse(json!(["bash", "key", "bash"])),
            Ok(Some(Approve::Tools(vec!["bash".into(), "key".into()])))
        );
        for bad in [
            json!("Shell"),
            json!(3),
            json!({"a": 1}),
            json!(["bash", 1]),
        ] {
            assert_eq!(parse(bad.clone()), Err(APPROVE_ERROR.into()), "{bad}");
        }
        let at_bound: Vec<String> = (0..MAX_APPROVE_NAMES).map(|i| format!("t{i}")).collect();
        assert!(parse(json!(at_bound)).is_ok());
        let over: Vec<String> = (0..=MAX_APPROVE_NAMES).map(|i| format!("t{i}")).collect();
        assert_eq!(
            parse(json!(over)),
            Err(format!(
                "approve lists at most {MAX_APPROVE_NAMES} tool names"
            ))
        );
    }

    #[test]
    fn approve_resolves_against_what_the_grant_sees() {
        let desktop = visible_tools(&fixed(Profile::Desktop), None);
        let shell: BTreeSet<String> = desktop
            .iter()
            .filter(|t| class_of_any(t) == Some(Class::Shell))
            .cloned()
            .collect();
        assert!(shell.contains("bash") && shell.contains("key"));
        assert_eq!(Approve::Shell.resolve(&desktop).unwrap(), shell);
        let observe = visible_tools(&fixed(Profile::Observe), None);
        assert!(Approve::Shell.resolve(&observe).unwrap().is_empty());
        assert_eq!(
            Approve::Tools(vec!["bash".into()]).resolve(&observe),
            Err("approve names bash, which this grant cannot use".into())
        );
        let long = "x".repeat(500);
        let err = Approve::Tools(vec![long]).resolve(&observe).unwrap_err();
        assert!(err.len() < 150, "a long name is clipped: {err}");
        assert!(Approve::same(
            &Some(Approve::Tools(vec!["a".into(), "b".into()])),
            &Some(Approve::Tools(vec!["b".into(), "a".into()]))
        ));
        assert!(!Approve::same(&Some(Approve::Shell), &None));
        assert!(!Approve::same(
            &Some(Approve::Shell),
            &Some(Approve::Tools(vec!["bash".into()]))
        ));
    }

    #[test]
    fn approve_sees_the_browser_tools_under_the_browser_profile() {
        let browser = visible_tools(&fixed(Profile::Browser), None);
        assert_eq!(browser.len(), 36, "{browser:?}");
        assert_eq!(
            Approve::Tools(vec!["browser_navigate".into()]).resolve(&browser),
            Ok(["browser_navigate".to_string()].into())
        );
        for refused in ["bash", "browser_evaluate", "browser_run_code_unsafe"] {
            assert!(
                Approve::Tools(vec![refused.into()])
                    .resolve(&browser)
                    .is_err(),
                "{refused}"
            );
            assert!(!fits_policy(refused, &fixed(Profile::Browser)), "{refused}");
        }
        assert!(Approve::Shell.resolve(&browser).unwrap().is_empty());
        assert!(Approve::Tools(vec!["browser_click".into()])
            .fits(|t| fits_policy(t, &fixed(Profile::Browser))));
        assert!(!Approve::Tools(vec!["browser_click".into()])
            .fits(|t| fits_policy(t, &fixed(Profile::Observe))));
        // The browser tier is the browser profile's alone; owner and desktop see browser
        // tools of the persistent upstream (classified, so known before it lists them).
        assert!(!visible_tools(&fixed(Profile::Observe), None).contains(&"browser_click".into()));
        for profile in [Profile::Owner, Profile::Desktop] {
            assert!(visible_tools(&fixed(profile), None).contains(&"browser_click".into()));
            assert!(!profile.allows_browser_tier("browser_click"));
        }
    }

    #[test]
    fn approve_shell_covers_every_shell_tool_a_custom_or_owner_grant_sees() {
        let policy = ToolPolicy::new(
            Profile::Custom,
            crate::tools::policy::ToolLists {
                allow: vec![
                    "sys_info".into(),
                    "browser_run_code_unsafe".into(),
                    "browser_click".into(),
                ],
                deny: Vec::new(),
            },
        )
        .unwrap();
        let visible = visible_tools(&policy, None);
        assert_eq!(
            Approve::Shell.resolve(&visible).unwrap(),
            ["browser_run_code_unsafe".to_string()].into()
        );
        assert!(!Approve::Shell.gates_unclassified(&policy));
        let owner = fixed(Profile::Owner);
        assert!(Approve::Shell.gates_unclassified(&owner));
        let gate = Gate::gating(Approve::Shell.resolve_stored(&owner), true, []);
        for t in [
            "bash",
            "browser_pdf_save",
            "browser_page_tool",
            UNCLASSIFIED,
        ] {
            assert!(gate.needs_approval(t), "{t}");
        }
        assert!(!gate.needs_approval("sys_info") && !gate.needs_approval("browser_click"));
        assert_eq!(
            owner.escalation(|t| gate.needs_approval(t)).shell,
            crate::tools::policy::Shell::Gated
        );
        assert!(gate.remember("browser_page_tool"));
        assert!(
            !gate.needs_approval(UNCLASSIFIED),
            "one unclassified tool runs unasked"
        );
        assert_eq!(
            owner.escalation(|t| gate.needs_approval(t)).shell,
            crate::tools::policy::Shell::Yes
        );
    }

    #[test]
    fn gate_remembers_only_what_it_gates() {
        let gate = Gate::new(
            ["bash".to_string()].into(),
            ["bash".to_string(), "mouse".to_string()],
        );
        assert_eq!(gate.remembered(), ["bash"], "mouse was never gated");
        assert!(!gate.needs_approval("bash"));
        let gate = Gate::new(["bash".to_string()].into(), []);
        assert!(gate.needs_approval("bash") && !gate.needs_approval("mouse"));
        assert!(!gate.remember("mouse"));
        assert!(gate.remember("bash"));
        assert!(!gate.remember("bash"));
        assert!(!gate.needs_approval("bash"));
    }

    #[test]
    fn decision_bodies() {
        let ok = |s: &str| Decision::parse(s.as_bytes()).unwrap();
        let bad = |s: &str| Decision::parse(s.as_bytes()).unwrap_err();
        assert_eq!(
            ok(r#"{"decision":"allow","remember":true}"#),
            Decision {
                allow: true,
                reason: None,
                remember: true
            }
        );
        assert_eq!(
            ok(r#"{"decision":"deny","reason":" not now "}"#)
                .reason
                .as_deref(),
            Some("not now")
        );
        assert_eq!(bad("[]"), "body must be a JSON object");
        assert_eq!(bad("{"), "body must be a JSON object");
        assert_eq!(bad(r#"{}"#), "decision must be \"allow\" or \"deny\"");
        assert_eq!(
            bad(r#"{"decision":"yes"}"#),
            "decision must be \"allow\" or \"deny\""
        );
        assert_eq!(
            bad(r#"{"decision":"deny","reason":5}"#),
            "reason must be a string"
        );
        assert_eq!(
            bad(r#"{"decision":"allow","remember":"yes"}"#),
            "remember must be true or false"
        );
        assert!(bad(r#"{"decision":"deny","remember":true}"#).contains("only with"));
        let at = format!(
            r#"{{"decision":"deny","reason":"{}"}}"#,
            "r".repeat(MAX_REASON_BYTES)
        );
        assert!(Decision::parse(at.as_bytes()).is_ok());
        let over = format!(
            r#"{{"decision":"deny","reason":"{}"}}"#,
            "r".repeat(MAX_REASON_BYTES + 1)
        );
        assert_eq!(
            Decision::parse(over.as_bytes()).unwrap_err(),
            format!("reason must be at most {MAX_REASON_BYTES} bytes")
        );
    }

    #[test]
    fn notifications_and_seconds() {
        let (title, body) = notification(
            "a1",
            "laptop",
            "bash",
            &json!({"command": "echo visible-harmless", "env": {"BASH_ENV": "$(id > /tmp/x)"}}),
        );
        assert_eq!(
            title,
            "handnode: laptop wants to run bash — env sets BASH_ENV"
        );
        assert!(body.starts_with("env sets BASH_ENV\n"), "{body}");
        assert!(body.contains("env.BASH_ENV: $(id > /tmp/x)"), "{body}");
        let (_, long) = notification("a2", "s", "bash", &json!({"command": "x".repeat(1000)}));
        assert!(long.contains(" bytes not shown\nAll of it: handnode approvals --full a2"));
        assert_eq!(seconds(Duration::from_secs(60)), "60 s");
        assert_eq!(seconds(Duration::from_millis(300)), "0.3 s");
        assert!(same_etag("\"ab\"", "\"ab\"") && same_etag("ab", "\"ab\""));
        assert!(!same_etag("\"ac\"", "\"ab\""));
    }
}
