//! The local tool registry: each tool's spec (name, description, input schema), the
//! catalogue a connection sees under its profile, and the entry point a worker calls to
//! start a tool. Tool implementations live in the submodules.

pub mod bash;
pub mod display;
pub mod process;
pub mod sysinfo;

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use crate::jobs::{Completion, JobCtl};
use crate::mcp::{Catalog, Resolution, Route, ToolOutput};
use crate::profiles::{class_of, Profile};

/// A local tool's static description.
#[derive(Debug)]
pub struct ToolSpec {
    pub name: &'static str,
    pub description: &'static str,
    pub input_schema: fn() -> Value,
}

/// A built-in input schema from its JSON text. Text rather than `json!`: the macro built
/// each schema with ~10 KiB of code.
pub(crate) fn schema(text: &str) -> Value {
    serde_json::from_str(text).expect("a built-in schema is valid JSON")
}

/// Every local tool, in listing order. A tool that is not here does not exist.
pub fn local_specs() -> &'static [ToolSpec] {
    static SPECS: [&ToolSpec; 5] = [
        &sysinfo::SPEC,
        &bash::SPEC,
        &display::SCREENSHOT,
        &display::MOUSE,
        &display::KEY,
    ];
    static FLAT: std::sync::OnceLock<Vec<ToolSpec>> = std::sync::OnceLock::new();
    FLAT.get_or_init(|| {
        SPECS
            .iter()
            .map(|s| ToolSpec {
                name: s.name,
                description: s.description,
                input_schema: s.input_schema,
            })
            .collect()
    })
}

pub fn spec(name: &str) -> Option<&'static ToolSpec> {
    local_specs().iter().find(|s| s.name == name)
}

/// What the agent must know about the grant it works under. The pod answers the agent's
/// `initialize` itself, so this goes into tool descriptions and `sys_info` too.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GrantNote {
    pub id: String,
    pub session: String,
    /// Unix seconds.
    pub expires_at: u64,
    /// Tools whose calls wait for a person's decision (§10), so the agent knows why such a
    /// call takes a while and what its refusal means.
    pub approve: Vec<String>,
}

impl GrantNote {
    pub fn describe(&self, profile: Profile) -> String {
        let mut text = format!(
            "This box is lent to session '{}' under profile '{}' until {} (grant {}).",
            self.session,
            profile,
            crate::timefmt::rfc3339(self.expires_at),
            self.id
        );
        if !self.approve.is_empty() {
            text.push_str(&format!(
                " Each call of {} waits until the person who lent the box allows it (at most 100 s); a denied or unanswered call says so and did not run.",
                self.approve.join(", ")
            ));
        }
        text
    }
}

/// Per-call limits that depend on the transport.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CallLimits {
    /// The longest any single tool may run. 110 s under a grant (the pod gives up at
    /// 120 s), 600 s on `/mcp`.
    pub max_run_secs: u64,
}

impl CallLimits {
    pub const GRANT: CallLimits = CallLimits { max_run_secs: 110 };
    pub const LOCAL_HTTP: CallLimits = CallLimits { max_run_secs: 600 };
}

/// Settings that tools read, taken from the daemon's config at start.
#[derive(Clone, Debug)]
pub struct ToolConfig {
    /// Environment variable names removed from every child (exact names).
    pub scrub_env: Vec<String>,
    /// Secret values: any inherited variable whose value equals one is removed too.
    pub scrub_values: Vec<crate::secret::Secret>,
    pub display_backend: crate::config::DisplayBackend,
    pub max_screenshot_edge: u32,
    /// How long probed display facts are reused (`Timing::display_probe_ttl`).
    pub display_probe_ttl: std::time::Duration,
    /// Longest one display helper (grim, xdotool, …) may run (`Timing::display_helper_timeout`).
    pub display_helper_timeout: std::time::Duration,
    /// How long `sys_info` reuses its `/proc` reads (`Timing::sys_info_ttl`).
    pub sys_info_ttl: std::time::Duration,
    /// Replaces the process environment for display probing and helpers (DISPLAY,
    /// WAYLAND_DISPLAY, XDG_RUNTIME_DIR, SWAYSOCK, PATH); `None` reads the process's own.
    pub display_env: Option<std::collections::BTreeMap<String, String>>,
}

impl Default for ToolConfig {
    fn default() -> Self {
        ToolConfig {
            scrub_env: Vec::new(),
            scrub_values: Vec::new(),
            display_backend: crate::config::DisplayBackend::Auto,
            max_screenshot_edge: 1920,
            display_probe_ttl: crate::config::Timing::default().display_probe_ttl,
            display_helper_timeout: crate::config::Timing::default().display_helper_timeout,
            sys_info_ttl: crate::config::Timing::default().sys_info_ttl,
            display_env: None,
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
    pub processes: bash::ProcessWatcher,
    pub facts: sysinfo::StaticFacts,
    /// `sys_info`'s `/proc` reads, reused for `sys_info_ttl`.
    pub live: TtlCache<sysinfo::LiveFacts>,
    /// `sys_info`'s last answer from those caches.
    pub sys_info_answers: sysinfo::AnswerCache,
    /// Display probe cache and the display thread.
    pub display: display::DisplayState,
}

impl ToolHost {
    pub fn new(config: ToolConfig) -> std::io::Result<Arc<Self>> {
        Ok(Arc::new(ToolHost {
            processes: bash::ProcessWatcher::start()?,
            facts: sysinfo::StaticFacts::gather(),
            live: TtlCache::default(),
            sys_info_answers: sysinfo::AnswerCache::default(),
            display: display::DisplayState::default(),
            config,
        }))
    }
}

/// Everything one tool call runs with.
#[derive(Clone, Debug)]
pub struct CallContext {
    pub profile: Profile,
    pub grant: Option<GrantNote>,
    pub limits: CallLimits,
    pub ctl: Arc<JobCtl>,
    pub host: Arc<ToolHost>,
}

/// A local tool's answer when it can be given at once on the caller's thread (cheap, from
/// caches, never waiting), else `None` and the call goes to the pool.
pub fn answer_inline(name: &str, cx: &CallContext) -> Option<ToolOutput> {
    match name {
        "sys_info" => sysinfo::from_cache(cx),
        _ => None,
    }
}

/// Start a local tool. Runs on a pool worker and must return quickly: a tool that waits
/// hands `done` to whatever owns the wait.
pub fn start_local(name: &str, args: Value, cx: CallContext, done: Completion) {
    if cx.ctl.is_cancelled() {
        done.complete(ToolOutput::tool_error("cancelled before it started"));
        return;
    }
    match name {
        "sys_info" => sysinfo::start(args, cx, done),
        "bash" => bash::start(args, cx, done),
        "screenshot" => display::screenshot(args, cx, done),
        "mouse" => display::mouse(args, cx, done),
        "key" => display::key(args, cx, done),
        other => done.complete(ToolOutput::InvalidParams(format!("unknown tool: {other}"))),
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
        ctl: Arc<JobCtl>,
        done: Completion,
    );
}

/// A tool object as `tools/list` shows it.
pub fn tool_json(spec: &ToolSpec, note: Option<&str>) -> Value {
    let class = class_of(spec.name).expect("every local tool has a class");
    let description = match note {
        Some(note) => format!("{} {}", spec.description, note),
        None => spec.description.to_string(),
    };
    json!({
        "name": spec.name,
        "description": description,
        "inputSchema": (spec.input_schema)(),
        "annotations": class.annotations().to_json(),
    })
}

/// The catalogue one connection sees: local tools, then upstream tools, filtered by the
/// connection's profile. A local name wins over an upstream one.
#[derive(Debug)]
pub struct ConnCatalog<'a> {
    pub grant: Option<&'a GrantNote>,
    pub upstream: Option<&'a dyn UpstreamSource>,
}

impl ConnCatalog<'_> {
    fn note(&self, profile: Profile) -> Option<String> {
        self.grant.map(|g| g.describe(profile))
    }
}

impl Catalog for ConnCatalog<'_> {
    fn list(&self, profile: Profile) -> Vec<Value> {
        let note = self.note(profile);
        let mut tools: Vec<Value> = local_specs()
            .iter()
            .filter(|s| profile.allows_local(s.name))
            .map(|s| tool_json(s, note.as_deref()))
            .collect();
        if let Some(up) = self.upstream {
            let mut seen: std::collections::HashSet<String> =
                local_specs().iter().map(|s| s.name.to_string()).collect();
            for (_, tool) in up.tools() {
                let Some(name) = tool.get("name").and_then(Value::as_str) else {
                    continue;
                };
                if profile.allows_upstream(name) && seen.insert(name.to_string()) {
                    tools.push(tool);
                }
            }
        }
        tools
    }

    fn resolve(&self, profile: Profile, name: &str) -> Resolution {
        if spec(name).is_some() {
            return if profile.allows_local(name) {
                Resolution::Visible(Route::Local)
            } else {
                Resolution::Hidden
            };
        }
        if let Some(up) = self.upstream {
            if let Some((index, _)) = up
                .tools()
                .into_iter()
                .find(|(_, t)| t.get("name").and_then(Value::as_str) == Some(name))
            {
                return if profile.allows_upstream(name) {
                    Resolution::Visible(Route::Upstream(index))
                } else {
                    Resolution::Hidden
                };
            }
        }
        Resolution::Unknown
    }

    fn instructions(&self, profile: Profile) -> String {
        let mut text = String::new();
        if let Some(note) = self.note(profile) {
            text.push_str(&note);
            text.push(' ');
        }
        let names: Vec<&str> = profile.local_allow_list().to_vec();
        text.push_str(&format!(
            "handnode serves this Linux box's tools. Profile '{profile}' allows: {}{}. ",
            names.join(", "),
            match profile {
                Profile::Owner => " and every browser_* tool of the configured upstreams",
                Profile::Desktop => " and the navigation/interaction browser_* tools",
                Profile::Observe => "",
            }
        ));
        text.push_str(
            "Screen coordinates for mouse are pixels of the unscaled screenshot of the chosen \
             display, origin top-left; screenshot reports the coordinate space with every image. \
             Call sys_info for the box's displays and which tools work here.",
        );
        text
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_listed_tool_carries_all_four_annotations() {
        let cat = ConnCatalog {
            grant: None,
            upstream: None,
        };
        for profile in Profile::ALL {
            for tool in cat.list(profile) {
                let ann = &tool["annotations"];
                for key in [
                    "readOnlyHint",
                    "destructiveHint",
                    "idempotentHint",
                    "openWorldHint",
                ] {
                    assert!(ann[key].is_boolean(), "{} lacks {key}", tool["name"]);
                }
                assert!(tool["inputSchema"]["type"] == "object", "{}", tool["name"]);
            }
        }
        assert_eq!(cat.list(Profile::Owner).len(), 5);
        assert_eq!(cat.list(Profile::Observe).len(), 2);
    }

    #[test]
    fn grant_note_reaches_descriptions_and_instructions() {
        let note = GrantNote {
            id: "g1".into(),
            session: "laptop".into(),
            expires_at: 0,
            approve: vec!["bash".into()],
        };
        let cat = ConnCatalog {
            grant: Some(&note),
            upstream: None,
        };
        let tools = cat.list(Profile::Observe);
        assert!(tools[0]["description"]
            .as_str()
            .unwrap()
            .contains("profile 'observe' until 1970-01-01T00:00:00Z"));
        assert!(cat.instructions(Profile::Observe).contains("laptop"));
        assert!(tools[0]["description"]
            .as_str()
            .unwrap()
            .contains("Each call of bash waits until the person who lent the box allows it"));
    }
}
