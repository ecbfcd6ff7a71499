//! The local tool registry: every local tool is one [`Tool`] descriptor (name, class and
//! why, description, input schema, how it starts, which readiness facts it needs, which
//! profiles it is placed in) registered once in [`TOOLS`]. The catalogue a connection sees,
//! the profiles' allow-lists, the annotations, `sys_info`'s tool status, `doctor` and the
//! tests' expected lists are all derived from that list. Tool implementations live in the
//! submodules.

pub mod a11y;
pub mod apps;
pub mod args;
pub mod bash;
pub mod display;
pub mod env;
pub mod files;
pub mod jobs;
pub mod paths;
pub mod policy;
pub mod process;
pub mod shell;
pub mod sysinfo;
#[cfg(test)]
pub(crate) mod testutil;

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use crate::pool::{CallCtl, Completion};
use crate::profiles::{Annotations, Class, Profile};
use crate::wire::mcp::{Catalog, Resolution, Route, ToolOutput};
use policy::ToolPolicy;

/// Every local tool, in listing order. A tool that is not here does not exist; adding a
/// tool is its module plus one line here.
pub static TOOLS: &[&Tool] = &[
    &sysinfo::TOOL,
    &bash::TOOL,
    &display::SCREENSHOT,
    &display::MOUSE,
    &display::KEY,
    &a11y::SNAPSHOT,
    &a11y::ACT,
    &jobs::job_tools::START,
    &jobs::job_tools::POLL,
    &jobs::job_tools::LIST,
    &jobs::job_tools::CANCEL,
    &files::GET,
    &files::PUT,
    &files::LIST,
    &apps::LIST,
    &apps::OPEN,
];

/// The tools in force: [`TOOLS`]. Everything that lists, finds, classifies or reports on
/// local tools reads them through here, so a unit test can put a scratch tool beside the
/// real ones on its own thread ([`with_scratch_tools`]) and see it flow everywhere.
pub fn registered() -> &'static [&'static Tool] {
    #[cfg(test)]
    if let Some(tools) = SCRATCH.with(std::cell::Cell::get) {
        return tools;
    }
    TOOLS
}

#[cfg(test)]
thread_local! {
    static SCRATCH: std::cell::Cell<Option<&'static [&'static Tool]>> =
        const { std::cell::Cell::new(None) };
}

/// Runs `f` on this thread with `extra` registered after [`TOOLS`] (tests only).
#[cfg(test)]
pub(crate) fn with_scratch_tools<R>(extra: &[&'static Tool], f: impl FnOnce() -> R) -> R {
    let tools: Vec<&'static Tool> = TOOLS.iter().chain(extra).copied().collect();
    SCRATCH.with(|s| s.set(Some(Vec::leak(tools))));
    struct Reset;
    impl Drop for Reset {
        fn drop(&mut self) {
            SCRATCH.with(|s| s.set(None));
        }
    }
    let _reset = Reset;
    f()
}

/// One local tool, declared once in its own module and registered in [`TOOLS`].
#[derive(Debug)]
pub struct Tool {
    pub name: &'static str,
    /// What the tool can do to the box; decides its annotations and which profiles may
    /// hold it (only a shell-equivalent profile may hold a `shell` tool).
    pub class: Class,
    /// One line saying why the tool has that class.
    pub class_reason: &'static str,
    pub description: &'static str,
    pub input_schema: fn() -> Value,
    /// The JSON Schema of the tool's `structuredContent`, for a tool that returns one
    /// (MCP 2025-06-18 and later, server/tools "Output Schema": results then conform).
    pub output_schema: Option<fn() -> Value>,
    /// Starts a call on a pool worker; must return quickly (see [`start_local`]).
    pub start: fn(Value, CallContext, Completion),
    /// An answer the caller's own thread may give at once from caches (see
    /// [`answer_inline`]); `None` for tools that always go to the pool.
    pub inline: Option<fn(&Value, &CallContext) -> Option<ToolOutput>>,
    /// Which readiness facts `sys_info` and `doctor` report for it.
    pub needs: Needs,
    /// What of the box it reaches on the agent's behalf (§21): what the wall's attack tests
    /// (`tests/walls.rs`) try through it.
    pub reach: Reach,
    /// Whether a call can change what a screen shows (pointer, keys, an app started or
    /// driven): the journal keeps a thumbnail of the screen after it (§22).
    pub changes_screen: bool,
    /// The profiles that allow it. Profiles are allow-lists: a profile not named here
    /// does not see the tool, and a call to it is answered as for an unknown tool.
    pub profiles: &'static [Profile],
}

/// What a tool reaches on the agent's behalf, beyond answering (§21).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Reach {
    /// Nothing the agent chooses: at most the daemon's own fixed helpers (`xdotool`,
    /// `scrot`) with arguments it checked.
    Nothing,
    /// Starts processes the agent chooses (a command, an app): each runs inside the
    /// grant's wall ([`display::own::walled_command`]).
    Processes,
    /// Opens paths the agent names, in these arguments: beneath the lent folder, and never
    /// what the wall hides, confined by [`paths`] and attacked by the confinement and wall
    /// tests for every tool that declares them.
    Paths(&'static [paths::PathArg]),
}

/// What a tool needs from the box to work: the readiness fact `sys_info` reports as
/// `works`/`why` for it, and `doctor` checks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Needs {
    /// Always works.
    Nothing,
    /// A `bash` on the daemon's `PATH` and child processes that can be watched
    /// ([`sysinfo::StaticFacts::bash_status`]).
    Bash,
    /// The display backend's readiness for this graphical tool ([`display::Probe::ready`]).
    Display(display::Gui),
    /// A screen of any backend for the windows it starts (`app_open`): the call's display
    /// (the box's, or the grant's own) has a backend.
    Screen,
}

impl Tool {
    /// Whether `profile` allows this tool.
    pub fn allowed_in(&self, profile: Profile) -> bool {
        self.profiles.contains(&profile)
    }

    /// The MCP annotations, from the class.
    pub fn annotations(&self) -> Annotations {
        self.class.annotations()
    }

    /// The path arguments it declares (`Reach::Paths`); none for any other tool.
    pub fn takes_path(&self) -> &'static [paths::PathArg] {
        match self.reach {
            Reach::Paths(args) => args,
            _ => &[],
        }
    }
}

/// The registered tool called `name`.
pub fn find(name: &str) -> Option<&'static Tool> {
    registered().iter().copied().find(|t| t.name == name)
}

/// A registered tool's class.
pub fn class_of(name: &str) -> Option<Class> {
    find(name).map(|t| t.class)
}

/// Any tool's class: a local tool's own, else a browser tool's (of an upstream or of the
/// browser tier) from [`crate::profiles::BROWSER_TOOL_CLASSES`]; the classification of
/// [`policy::classify`]. `None` for a name neither knows.
pub fn class_of_any(name: &str) -> Option<Class> {
    policy::classify(name).map(|e| e.class)
}

/// The tools `profile` allows, in listing order.
pub fn allowed(profile: Profile) -> impl Iterator<Item = &'static Tool> {
    registered()
        .iter()
        .copied()
        .filter(move |t| t.allowed_in(profile))
}

/// The names of the tools `profile` allows, in listing order.
pub fn names(profile: Profile) -> Vec<&'static str> {
    allowed(profile).map(|t| t.name).collect()
}

/// What the agent must know about the grant it works under. The pod answers the agent's
/// `initialize` itself, so this goes into tool descriptions and `sys_info` too.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct GrantNote {
    pub id: String,
    pub session: String,
    /// Unix seconds.
    pub expires_at: u64,
    /// Tools whose calls wait for a person's decision (§10), so the agent knows why such a
    /// call takes a while and what its refusal means.
    pub approve: Vec<String>,
    /// How long such a call waits for a decision (`--approval-timeout-ms`).
    pub approval_wait: Duration,
}

impl GrantNote {
    /// One paragraph for tool descriptions: the grant, and when it has lists of its own
    /// (`allow`/`deny`), what it may use.
    pub fn describe(&self, policy: &ToolPolicy, here: policy::Sources<'_>) -> String {
        let mut text = format!(
            "This box is lent to session '{}' under profile '{}' until {} (grant {}).",
            self.session,
            policy.profile(),
            crate::base::timefmt::rfc3339(self.expires_at),
            self.id
        );
        if !policy.lists().is_empty() {
            text.push(' ');
            text.push_str(&policy.summary_lent(here));
        }
        if !self.approve.is_empty() {
            text.push_str(&format!(
                " Each call of {} waits until the person who lent the box allows it (at most {}); a denied or unanswered call says so and did not run.",
                self.approve.join(", "),
                wait_text(self.approval_wait)
            ));
        }
        text
    }
}

/// A wait as the agent reads it: whole seconds (rounded up), or milliseconds under one.
fn wait_text(wait: Duration) -> String {
    if wait < Duration::from_secs(1) {
        format!("{} ms", wait.as_millis())
    } else {
        format!("{} s", wait.as_millis().div_ceil(1000))
    }
}

/// Per-call limits that depend on the transport.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CallLimits {
    /// The longest any single call may run. 110 s under a grant (the pod gives up at
    /// 120 s), 600 s on `/mcp`.
    pub max_run_secs: u64,
    /// A `bash` call whose command still runs after this long continues as a job
    /// (`Timing::inline_wait` under a grant, `Timing::mcp_inline_wait` on `/mcp`).
    pub inline_wait: Duration,
}

impl CallLimits {
    pub const GRANT: CallLimits = CallLimits {
        max_run_secs: 110,
        inline_wait: Duration::from_secs(100),
    };
    pub const LOCAL_HTTP: CallLimits = CallLimits {
        max_run_secs: 600,
        inline_wait: Duration::from_secs(600),
    };
}

/// Settings that tools read, taken from the daemon's config at start.
#[derive(Clone, Debug)]
pub struct ToolConfig {
    /// Environment variable names removed from every child (exact names).
    pub scrub_env: Vec<String>,
    /// Secret values: any inherited variable whose value equals one is removed too.
    pub scrub_values: Vec<crate::base::secret::Secret>,
    pub display_backend: crate::config::DisplayBackend,
    pub max_screenshot_edge: u32,
    /// How long probed display facts are reused (`Timing::display_probe_ttl`).
    pub display_probe_ttl: std::time::Duration,
    /// Longest one display helper (grim, xdotool, …) may run (`Timing::display_helper_timeout`).
    pub display_helper_timeout: std::time::Duration,
    /// How long a `bash` call's output may stay open after its shell exited
    /// (`Timing::background_grace`).
    pub background_grace: std::time::Duration,
    /// Longest one accessibility-bus call may wait (`Timing::a11y_call_timeout`).
    pub a11y_call_timeout: std::time::Duration,
    /// How long `sys_info` reuses its `/proc` reads (`Timing::sys_info_ttl`).
    pub sys_info_ttl: std::time::Duration,
    /// Replaces the process environment for display probing and helpers (DISPLAY,
    /// WAYLAND_DISPLAY, XDG_RUNTIME_DIR, SWAYSOCK, PATH); `None` reads the process's own.
    pub display_env: Option<std::collections::BTreeMap<String, String>>,
    /// Long-running jobs: where their files go, their limits and timers.
    pub jobs: jobs::table::JobConfig,
    /// Bytes of unfinished uploads (part files) one grant may hold (`--upload-bytes`).
    pub upload_bytes: u64,
    /// What a lent folder must neither be nor hold (`paths::vet`).
    pub protected: paths::Protected,
    /// An upstream MCP server is configured, so the browser tools of a profile other than
    /// `browser` exist here; without one `sys_info` does not list them.
    pub upstreams: bool,
    /// `--apps`: the desktop entries the `apps` profile may start and drive (§17).
    pub apps: Vec<crate::rules::desktop_entry::DesktopEntry>,
    /// Test override of where installed desktop entries are found (`apps_list`/`app_open`
    /// under `owner`/`desktop`); `None` = the daemon's XDG data dirs. Not a flag.
    #[doc(hidden)]
    pub app_dirs: Option<crate::rules::desktop_entry::DataDirs>,
    /// Containment (§16); `None` uses no cgroup and changes nothing about the process
    /// (unit tests of other modules).
    pub confine: Option<Arc<crate::cgroup::Confine>>,
    /// How a grant's own display is made (§19).
    pub own_display: display::OwnOptions,
    /// The wall the `bash`, jobs and apps of a grant with its own display run in (§19,
    /// §21), probed at start as `--own-display-isolation` (else `--isolation`) asks.
    pub own_display_walls: crate::walls::OwnDisplayWall,
    /// The wall of every other non-owner grant's processes (§21), as `--isolation` asks;
    /// `None`: no wall.
    pub grant_walls: Option<crate::walls::Bwrap>,
    /// The admin listener, which no grant's browser tool may open in any spelling (§21).
    pub admin_origin: crate::rules::browser_url::AdminOrigin,
}

impl Default for ToolConfig {
    fn default() -> Self {
        ToolConfig {
            admin_origin: Default::default(),
            scrub_env: Vec::new(),
            scrub_values: Vec::new(),
            display_backend: crate::config::DisplayBackend::Auto,
            max_screenshot_edge: 1920,
            display_probe_ttl: crate::config::Timing::default().display_probe_ttl,
            display_helper_timeout: crate::config::Timing::default().display_helper_timeout,
            background_grace: crate::config::Timing::default().background_grace,
            a11y_call_timeout: crate::config::Timing::default().a11y_call_timeout,
            sys_info_ttl: crate::config::Timing::default().sys_info_ttl,
            display_env: None,
            jobs: jobs::table::JobConfig::default(),
            upload_bytes: crate::config::Limits::default().upload_bytes,
            protected: paths::Protected::default(),
            upstreams: true,
            apps: Vec::new(),
            app_dirs: None,
            confine: None,
            own_display: display::OwnOptions::default(),
            own_display_walls: Default::default(),
            grant_walls: None,
        }
    }
}

/// The last value computed, reused while younger than a TTL: the display probe and
/// `sys_info`'s `/proc` reads. The TTL is given per call, from the configuration.
#[derive(Debug)]
pub struct TtlCache<T> {
    last: Mutex<Option<(Instant, Arc<T>)>>,
}

impl<T> Default for TtlCache<T> {
    fn default() -> Self {
        TtlCache {
            last: Mutex::new(None),
        }
    }
}

impl<T> TtlCache<T> {
    /// The value and its age, computed now if the copy is older than `ttl`. Callers that
    /// arrive together while it is stale wait for one computation instead of each running
    /// it.
    pub fn get(&self, ttl: Duration, compute: impl FnOnce() -> T) -> (Arc<T>, Duration) {
        let mut last = self.last.lock().unwrap_or_else(|e| e.into_inner());
        if let Some((at, value)) = last.as_ref() {
            let age = at.elapsed();
            if age < ttl {
                return (Arc::clone(value), age);
            }
        }
        let value = Arc::new(compute());
        *last = Some((Instant::now(), Arc::clone(&value)));
        (value, Duration::ZERO)
    }

    /// Replace the value (it is known to be stale).
    pub fn put(&self, value: Arc<T>) {
        *self.last.lock().unwrap_or_else(|e| e.into_inner()) = Some((Instant::now(), value));
    }

    /// The value and its age if a copy younger than `ttl` is at hand, without waiting (a
    /// computation in progress holds the lock): for callers that must not block.
    pub fn cached(&self, ttl: Duration) -> Option<(Arc<T>, Duration)> {
        let last = self.last.try_lock().ok()?;
        let (at, value) = last.as_ref()?;
        let age = at.elapsed();
        (age < ttl).then(|| (Arc::clone(value), age))
    }
}

/// Shared state every tool call can reach: configuration, cached facts, the process
/// watcher. One per daemon.
#[derive(Debug)]
pub struct ToolHost {
    pub config: ToolConfig,
    pub processes: process::ProcessWatcher,
    pub facts: sysinfo::StaticFacts,
    /// `sys_info`'s `/proc` reads, reused for `sys_info_ttl`.
    pub live: TtlCache<sysinfo::LiveFacts>,
    /// `sys_info`'s last answer from those caches.
    pub sys_info_answers: sysinfo::AnswerCache,
    /// Display probe cache and the display thread.
    pub display: display::DisplayState,
    /// Every long-running job (`bash_start`, and `bash` past its inline limit).
    pub jobs: Arc<jobs::table::JobTable>,
    /// Unfinished `file_put` uploads, per grant.
    pub files: files::uploads::Uploads,
    /// The grants' cgroups (§16): every child a tool starts runs in one.
    pub confine: Arc<crate::cgroup::Confine>,
    /// The grants' own displays (§19).
    pub own_displays: display::OwnDisplays,
    /// The box's own display in the live view, and its wheel (§23).
    pub box_view: display::boxview::BoxView,
    /// The apps each grant started with `app_open` (§17).
    pub apps: apps::AppRuns,
    /// Each grant's refs of its last `desktop_snapshot`.
    pub a11y: a11y::Refs,
    /// The catalogue's other sources, set once at start when the daemon has them:
    /// `sys_info` names what a connection is lent from them, as `tools/list` lists it.
    pub sources: std::sync::OnceLock<LentSources>,
}

/// The upstream and the browser tier as `sys_info` reads them ([`policy::Sources`], owned).
#[derive(Debug, Default)]
pub struct LentSources {
    pub upstream: Option<Arc<dyn UpstreamSource>>,
    pub browsers: Option<Arc<dyn BrowserTier>>,
}

impl LentSources {
    pub fn borrow(&self) -> policy::Sources<'_> {
        policy::Sources {
            upstream: self.upstream.as_deref(),
            browsers: self.browsers.as_deref(),
        }
    }
}

impl ToolHost {
    pub fn new(config: ToolConfig) -> std::io::Result<Arc<Self>> {
        Ok(Arc::new(ToolHost {
            processes: process::ProcessWatcher::start()?,
            facts: sysinfo::StaticFacts::gather(),
            live: TtlCache::default(),
            sys_info_answers: sysinfo::AnswerCache::default(),
            display: display::DisplayState::default(),
            own_displays: display::OwnDisplays::new(
                config.own_display.clone(),
                config.own_display_walls.clone(),
            ),
            box_view: display::boxview::BoxView::new(&config.own_display),
            jobs: jobs::table::JobTable::new(config.jobs.clone()),
            files: files::uploads::Uploads::new(config.upload_bytes),
            apps: apps::AppRuns::default(),
            a11y: a11y::Refs::default(),
            sources: std::sync::OnceLock::new(),
            confine: config
                .confine
                .clone()
                .unwrap_or_else(crate::cgroup::Confine::inert),
            config,
        }))
    }
}

/// Everything one tool call runs with.
#[derive(Clone, Debug)]
pub struct CallContext {
    /// What the connection may use; fixed for a grant's life.
    pub policy: Arc<ToolPolicy>,
    pub grant: Option<GrantNote>,
    pub limits: CallLimits,
    pub ctl: Arc<CallCtl>,
    pub host: Arc<ToolHost>,
    /// Who is calling (the grant's principal, or the `/mcp` caller): for job audit records.
    pub principal: String,
}

/// A local tool's answer when it can be given at once on the caller's thread (cheap, from
/// caches, never waiting), else `None` and the call goes to the pool.
pub fn answer_inline(name: &str, args: &Value, cx: &CallContext) -> Option<ToolOutput> {
    (find(name)?.inline?)(args, cx)
}

/// Start a local tool. Runs on a pool worker and must return quickly: a tool that waits
/// hands `done` to whatever owns the wait.
pub fn start_local(name: &str, args: Value, cx: CallContext, done: Completion) {
    if cx.ctl.is_cancelled() {
        done.complete(ToolOutput::tool_error("cancelled before it started"));
        return;
    }
    match find(name) {
        // A command's children get the grant's own display (§19): start it first.
        Some(tool) if tool.class == Class::Shell && tool.needs == Needs::Bash => {
            display::own::with_call_display(
                cx,
                done,
                Box::new(move |cx, done| (tool.start)(args, cx, done)),
            )
        }
        Some(tool) => (tool.start)(args, cx, done),
        None => done.complete(ToolOutput::InvalidParams(format!("unknown tool: {name}"))),
    }
}

/// Tools served by upstream MCP servers (browser tools). Implementations never block:
/// the list comes from a cache, and calls are handed to the upstream's own I/O thread.
pub trait UpstreamSource: Send + Sync + std::fmt::Debug {
    /// `(upstream index, MCP tool object)` for every tool currently known, unfiltered.
    fn tools(&self) -> Vec<(usize, Value)>;
    /// Forward a call; `done` receives the upstream's result untouched.
    fn call(
        &self,
        upstream: usize,
        name: &str,
        arguments: Value,
        ctl: Arc<CallCtl>,
        done: Completion,
    );
    /// Moves whenever [`UpstreamSource::tools`] would answer another list (a connection's
    /// cached `tools/list` is rebuilt then); like `tools`, asks a stale list to refresh.
    /// `None`: unknown, and the list is built for every request.
    fn version(&self) -> Option<u64> {
        None
    }
}

/// The browser tier (`crate::browser::Browsers`) as the catalogue sees it: the tools a
/// `browser` grant lists and may call. A trait here so that `tools` stays below `browser`
/// (which uses `tools`' environment cleaner). Implementations never block.
pub trait BrowserTier: Send + Sync + std::fmt::Debug {
    /// The tool objects a `browser` grant lists, in class-table order.
    fn tools(&self) -> Vec<Value>;
    /// Whether a `browser` grant may call `name` (it is listed).
    fn offers(&self, name: &str) -> bool;
    /// Moves whenever [`BrowserTier::tools`] would answer another list; `None`: unknown.
    fn version(&self) -> Option<u64> {
        None
    }
}

/// Said after the grant note in each browser-tier tool's description: the pod answers
/// `initialize` itself, so the agent learns what this browser is from here.
const BROWSER_TIER_NOTE: &str = " The browser_* tools drive a browser of this grant's own: \
    started on the first call with an empty profile, kept across reconnects, discarded when \
    the grant ends.";

/// A tool object as `tools/list` shows it.
pub fn tool_json(tool: &Tool, note: Option<&str>) -> Value {
    let description = match note {
        Some(note) => format!("{} {}", tool.description, note),
        None => tool.description.to_string(),
    };
    let mut json = json!({
        "name": tool.name,
        "description": description,
        "inputSchema": (tool.input_schema)(),
        "annotations": tool.annotations().to_json(),
    });
    if let Some(schema) = tool.output_schema {
        json["outputSchema"] = schema();
    }
    json
}

/// The catalogue one connection sees: local tools, then upstream tools, filtered by the
/// connection's policy. A local name wins over an upstream one. Under `browser` it is the
/// grant's own browser tools instead (less its `deny`), and nothing else.
#[derive(Debug)]
pub struct ConnCatalog<'a> {
    pub grant: Option<&'a GrantNote>,
    pub upstream: Option<&'a dyn UpstreamSource>,
    pub browsers: Option<&'a dyn BrowserTier>,
    pub policy: &'a ToolPolicy,
}

impl ConnCatalog<'_> {
    fn note(&self) -> Option<String> {
        self.grant.map(|g| g.describe(self.policy, self.sources()))
    }

    fn sources(&self) -> policy::Sources<'_> {
        policy::Sources {
            upstream: self.upstream,
            browsers: self.browsers,
        }
    }
}

impl Catalog for ConnCatalog<'_> {
    /// Everything [`ConnCatalog::list`] reads: the registry, the policy, the grant note
    /// (its expiry and approvals are in every description; a grant's socket gets the pod's
    /// `file_put` limit) and the one other source the profile lists from.
    fn list_key(&self) -> Option<u64> {
        use std::hash::{Hash, Hasher};
        let mut h = std::collections::hash_map::DefaultHasher::new();
        let tools = registered();
        (tools.as_ptr(), tools.len()).hash(&mut h);
        self.policy.hash(&mut h);
        self.grant.hash(&mut h);
        let source = if self.policy.profile() == Profile::Browser {
            self.browsers.map(BrowserTier::version)
        } else {
            self.upstream.map(UpstreamSource::version)
        };
        match source {
            Some(None) => return None,
            Some(Some(version)) => version.hash(&mut h),
            None => {}
        }
        Some(h.finish())
    }

    fn list(&self) -> Vec<Value> {
        let note = self.note();
        if self.policy.profile() == Profile::Browser {
            let Some(browsers) = self.browsers else {
                return Vec::new();
            };
            let mut tools = browsers.tools();
            tools.retain(|t| {
                t.get("name")
                    .and_then(Value::as_str)
                    .is_some_and(|n| self.policy.allows(n))
            });
            if let Some(note) = &note {
                for tool in &mut tools {
                    if let Some(Value::String(d)) = tool.get_mut("description") {
                        d.push(' ');
                        d.push_str(note);
                        d.push_str(BROWSER_TIER_NOTE);
                    }
                }
            }
            return tools;
        }
        let mut tools: Vec<Value> = registered()
            .iter()
            .filter(|t| self.policy.allows(t.name))
            .map(|t| {
                let mut json = tool_json(t, note.as_deref());
                // Annotations follow the class under this policy (a lent folder makes the
                // file tools observe/act).
                if let Some(class) = self.policy.class_of(t.name) {
                    json["annotations"] = class.annotations().to_json();
                }
                // A grant socket's requests cross the pod, whose body limit is 1 MiB.
                if self.grant.is_some() {
                    files::fit_to_pod(&mut json);
                }
                json
            })
            .collect();
        if let Some(up) = self.upstream {
            let mut seen: std::collections::HashSet<String> =
                registered().iter().map(|t| t.name.to_string()).collect();
            for (_, tool) in up.tools() {
                let Some(name) = tool.get("name").and_then(Value::as_str) else {
                    continue;
                };
                if self.policy.allows(name) && seen.insert(name.to_string()) {
                    tools.push(tool);
                }
            }
        }
        tools
    }

    fn resolve(&self, name: &str) -> Resolution {
        if self.policy.profile() == Profile::Browser {
            if self.policy.allows(name) && self.browsers.is_some_and(|b| b.offers(name)) {
                return Resolution::Visible(Route::Browser);
            }
            let known = find(name).is_some()
                || crate::profiles::browser_class_of(name).is_some()
                || self.upstream.is_some_and(|up| {
                    up.tools()
                        .iter()
                        .any(|(_, t)| t.get("name").and_then(Value::as_str) == Some(name))
                });
            return if known {
                Resolution::Hidden
            } else {
                Resolution::Unknown
            };
        }
        let visible = |route| {
            if self.policy.allows(name) {
                Resolution::Visible(route)
            } else {
                Resolution::Hidden
            }
        };
        if find(name).is_some() {
            return visible(Route::Local);
        }
        if let Some(up) = self.upstream {
            if let Some((index, _)) = up
                .tools()
                .into_iter()
                .find(|(_, t)| t.get("name").and_then(Value::as_str) == Some(name))
            {
                return visible(Route::Upstream(index));
            }
        }
        Resolution::Unknown
    }

    fn tasks(&self) -> Option<crate::wire::mcp::TaskTools> {
        let [start, poll, cancel] = jobs::job_tools::TASK_TOOLS.map(|t| t.name);
        let tools = crate::wire::mcp::TaskTools {
            call: bash::TOOL.name,
            start,
            poll,
            cancel,
        };
        let local = |name| self.resolve(name) == Resolution::Visible(Route::Local);
        // A call held for a person's decision (§10) stays one, asked as itself: a grant
        // whose approvals gate any of these tools gets no tasks.
        let gated = |name: &str| {
            self.grant
                .is_some_and(|g| g.approve.iter().any(|a| a == name))
        };
        let names = [tools.call, tools.start, tools.poll, tools.cancel];
        (names.into_iter().all(local) && !names.into_iter().any(gated)).then_some(tools)
    }

    fn instructions(&self) -> String {
        let mut text = String::new();
        if let Some(note) = self.note() {
            text.push_str(&note);
            text.push(' ');
        }
        let profile = self.policy.profile();
        if profile == Profile::Browser {
            text.push_str(
                "handnode lends this box's browser tier: the browser_* tools drive a browser \
                 of this grant's own, started on the first call with an empty profile and \
                 discarded when the grant ends. It reaches the box's network, not its files \
                 or programs.",
            );
            return text;
        }
        text.push_str(&format!(
            "handnode serves this Linux box's tools. Profile '{profile}': {} ",
            self.policy.summary_lent(self.sources())
        ));
        if self.policy.confined() {
            text.push_str(&format!(
                "{} work beneath the one folder this grant lends: every path is relative to \
                 it, and nothing outside it can be reached. ",
                crate::base::text::sentence_list(&paths::tools(), "and")
            ));
        }
        text.push_str(
            "Screen coordinates for mouse are pixels of the unscaled screenshot of the chosen \
             display, origin top-left; screenshot reports the coordinate space with every image. \
             Call sys_info for the box's displays and which tools work here.",
        );
        text
    }
}

#[cfg(test)]
mod tests;

#[cfg(test)]
mod catalog_tests {
    use super::*;

    /// `file_put`'s largest chunk is the pod's over a grant socket (contract §24).
    #[test]
    fn a_grant_socket_lists_file_put_with_the_pods_chunk_and_mcp_with_its_own() {
        // Listed so over a grant socket only; /mcp (no grant) keeps 4 MiB.
        let owner = policy::ToolPolicy::owner();
        let note = GrantNote {
            id: "g".into(),
            session: "s".into(),
            expires_at: 0,
            approve: Vec::new(),
            approval_wait: std::time::Duration::from_secs(1),
        };
        let listed = |grant| {
            use crate::wire::mcp::Catalog;
            let catalog = ConnCatalog {
                grant,
                upstream: None,
                browsers: None,
                policy: &owner,
            };
            catalog
                .list()
                .into_iter()
                .find(|t| t["name"] == "file_put")
                .unwrap()["inputSchema"]["properties"]["data"]["maxLength"]
                .clone()
        };
        assert_eq!(listed(Some(&note)), json!(files::POD_PUT_DATA_CHARS));
        assert_eq!(listed(None), Value::Null);
    }

    /// An upstream (or browser tier) whose list the test changes, with its version.
    #[derive(Debug, Default)]
    struct Changing(Mutex<(u64, Vec<&'static str>)>);

    impl Changing {
        fn set(&self, names: &[&'static str]) {
            let mut s = self.0.lock().unwrap();
            s.0 += 1;
            s.1 = names.to_vec();
        }
        fn objects(&self) -> Vec<Value> {
            let s = self.0.lock().unwrap();
            s.1.iter().map(|n| json!({"name": n})).collect()
        }
    }

    impl UpstreamSource for Changing {
        fn tools(&self) -> Vec<(usize, Value)> {
            self.objects().into_iter().map(|t| (0, t)).collect()
        }
        fn call(&self, _: usize, _: &str, _: Value, _: Arc<CallCtl>, _: Completion) {
            unreachable!("the catalogue never runs tools")
        }
        fn version(&self) -> Option<u64> {
            Some(self.0.lock().unwrap().0)
        }
    }

    impl BrowserTier for Changing {
        fn tools(&self) -> Vec<Value> {
            self.objects()
        }
        fn offers(&self, _: &str) -> bool {
            true
        }
        fn version(&self) -> Option<u64> {
            Some(self.0.lock().unwrap().0)
        }
    }

    /// Contract §24: `tools/list` is built once per connection while nothing it reads
    /// changed. Every input of the list moves the key when it changes the list, and a
    /// source that cannot say when it changes turns the cache off.
    #[test]
    fn the_list_key_moves_whenever_the_list_does() {
        use crate::wire::mcp::Catalog;
        let owner = policy::ToolPolicy::owner();
        let desktop = policy::ToolPolicy::fixed(Profile::Desktop).unwrap();
        let browser = policy::ToolPolicy::fixed(Profile::Browser).unwrap();
        let note = GrantNote {
            id: "g".into(),
            session: "s".into(),
            expires_at: 1_800_000_000,
            approve: Vec::new(),
            approval_wait: Duration::from_secs(60),
        };
        let later = GrantNote {
            expires_at: note.expires_at + 3600,
            ..note.clone()
        };
        let gated = GrantNote {
            approve: vec!["bash".into()],
            ..note.clone()
        };
        let up = Changing::default();
        up.set(&["browser_navigate"]);
        let tier = Changing::default();
        tier.set(&["browser_navigate"]);
        let catalog = |policy, grant, upstream: bool, browsers: bool| ConnCatalog {
            grant,
            upstream: upstream.then_some(&up as &dyn UpstreamSource),
            browsers: browsers.then_some(&tier as &dyn BrowserTier),
            policy,
        };
        let mut seen: Vec<(Option<u64>, Vec<Value>, &str)> = Vec::new();
        let mut look = |what: &'static str, c: ConnCatalog<'_>| {
            let (key, list) = (c.list_key(), c.list());
            assert!(key.is_some(), "{what}: every source here has a version");
            assert_eq!(
                key,
                c.list_key(),
                "{what}: the same key while nothing moved"
            );
            for (k, l, other) in &seen {
                if *l != list {
                    assert_ne!(*k, key, "{what} lists other tools than {other}, same key");
                }
            }
            seen.push((key, list, what));
        };
        look("/mcp", catalog(&owner, None, false, false));
        look("grant", catalog(&owner, Some(&note), false, false));
        look("extended", catalog(&owner, Some(&later), false, false));
        look("approvals", catalog(&owner, Some(&gated), false, false));
        look("desktop", catalog(&desktop, Some(&note), false, false));
        look("upstream", catalog(&owner, Some(&note), true, false));
        up.set(&["browser_navigate", "browser_snapshot"]);
        look(
            "upstream refreshed",
            catalog(&owner, Some(&note), true, false),
        );
        up.set(&[]);
        look("upstream down", catalog(&owner, Some(&note), true, false));
        look("browser", catalog(&browser, Some(&note), false, true));
        tier.set(&["browser_navigate", "browser_click"]);
        look(
            "browser learned",
            catalog(&browser, Some(&note), false, true),
        );
        static EXTRA: Tool = Tool {
            name: "uptime",
            class: Class::Observe,
            class_reason: "reads how long the box has been up",
            description: "How long this box has been up.",
            input_schema: || json!({"type": "object", "properties": {}}),
            output_schema: None,
            start: |_, _, done| done.complete(ToolOutput::Result(json!({"content": []}))),
            inline: None,
            needs: Needs::Nothing,
            reach: Reach::Nothing,
            changes_screen: false,
            profiles: &[Profile::Owner],
        };
        let owner_plus = with_scratch_tools(&[&EXTRA], policy::ToolPolicy::owner);
        with_scratch_tools(&[&EXTRA], || {
            look("registry", catalog(&owner_plus, Some(&note), false, false));
        });
        // A refresh that changed nothing keeps the key (a source's version is its to keep).
        let before = catalog(&owner, Some(&note), true, false).list_key();
        assert_eq!(before, catalog(&owner, Some(&note), true, false).list_key());

        // Through the dispatcher: the second list is the first's bytes and is not rebuilt;
        // an upstream's new list is listed at once.
        let mut d = crate::wire::mcp::Dispatcher::new();
        let req = br#"{"jsonrpc":"2.0","id":1,"method":"tools/list"}"#;
        let c = catalog(&owner, Some(&note), true, false);
        let first = d.handle(req, &c);
        assert_eq!(d.handle(req, &c), first);
        up.set(&["browser_navigate"]);
        let changed = d.handle(req, &c);
        assert_ne!(changed, first);
        let crate::wire::mcp::Action::Reply(text) = &changed[0] else {
            panic!("{changed:?}")
        };
        assert!(text.contains("browser_navigate"), "{text}");
    }

    /// A source that cannot say when its list changes: built for every request.
    #[test]
    fn a_source_without_a_version_is_never_cached() {
        use crate::wire::mcp::Catalog;
        #[derive(Debug)]
        struct Unversioned;
        impl UpstreamSource for Unversioned {
            fn tools(&self) -> Vec<(usize, Value)> {
                Vec::new()
            }
            fn call(&self, _: usize, _: &str, _: Value, _: Arc<CallCtl>, _: Completion) {
                unreachable!("the catalogue never runs tools")
            }
        }
        let owner = policy::ToolPolicy::owner();
        let c = ConnCatalog {
            grant: None,
            upstream: Some(&Unversioned),
            browsers: None,
            policy: &owner,
        };
        assert_eq!(c.list_key(), None);
    }
}
