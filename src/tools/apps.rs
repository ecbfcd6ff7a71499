//! Typed app control (contract §17): `apps_list` and `app_open`, the apps each grant
//! started ([`AppRuns`]), and [`may_drive`], the check `desktop_act` asks under the `apps`
//! profile before it touches an element.
//!
//! **Which apps.** Under `apps` (and any grant that is not shell-equivalent, such as a
//! `custom` list naming `app_open`) only the entries of `--apps` exist: resolved and
//! vetted at start by `rules::desktop_entry` (no terminal, shell, interpreter, settings
//! panel or anything that runs commands by design). Under `owner` and `desktop`, which
//! reach the shell anyway, any installed entry may be listed and opened.
//!
//! **Starting one.** The entry's `Exec` argv (fixed at start for listed apps; the agent
//! names an ID and nothing else, so it cannot add an argument) is spawned without a shell
//! through the process watcher, stdin `/dev/null`, output read and dropped, in a run
//! cgroup of its grant (§16): the grant's end (revoke, replace, expiry) kills it with
//! everything it started. The app's run ends when the process we started exits (its
//! leftovers are killed then, as for any run). Its environment is an allow-list
//! ([`APP_ENV`]) of the daemon's, plus the display's variables, cleaned by
//! `tools::env::child_env`: no `HANDNODE_*`, no secret value, no `SWAYSOCK` (the
//! compositor's control socket runs commands).
//!
//! **Which elements may be driven** ([`may_drive`]). An accessibility tree's application
//! name is whatever the app calls itself, and `/proc/<pid>/exe` names a binary, not who
//! started it (every Python app is `python3`; the owner's own window of a listed app holds
//! the owner's documents). So the element's process must belong to an app this grant
//! started with `app_open`: it is in that run's cgroup (or, without cgroups, carries the
//! run's marker variable), which is exactly what dies with the grant, descendants and
//! double-forked helpers included. An app that handed its window to an instance already
//! running outside the grant (a single-instance app) is therefore not drivable: open it
//! when no other copy runs.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::{json, Value};

use super::process::RunSpec;
use super::{CallContext, Needs, Reach, Tool};
use crate::cgroup::RunGroup;
use crate::pool::{CallCtl, Completion};
use crate::profiles::{Class, Profile};
use crate::rules::desktop_entry::{self as de, DataDirs, DesktopEntry};
use crate::wire::mcp::ToolOutput;

/// Most apps one grant (or the owner's `/mcp`) runs at once.
pub const MAX_RUNNING_APPS: usize = 16;
/// Most entries `apps_list` answers under `owner`/`desktop` (all installed ones).
pub const MAX_LISTED_APPS: usize = 500;
/// Ended apps a grant's `apps_list` still reports (`last_exit`), newest kept.
pub const MAX_ENDED_KEPT: usize = 16;

/// The tool whose class is `act`, not `shell`, under `apps` (§17; `ToolPolicy::class_of`
/// says so), and which asks [`may_drive`] there (`profiles::DESKTOP_ACT`).
pub const DESKTOP_ACT: &str = crate::profiles::DESKTOP_ACT;

/// Variables of the daemon's environment an app inherits (exact names; a trailing `*` is
/// a prefix). The display's own (`DISPLAY`, `WAYLAND_DISPLAY`, `XDG_RUNTIME_DIR`, `PATH`,
/// the session and accessibility buses) come only from the call's display environment
/// (`display::DisplayEnv`, [`call_display_env`]), never from the daemon's.
pub const APP_ENV: &[&str] = &[
    "HOME",
    "USER",
    "LOGNAME",
    "LANG",
    "LANGUAGE",
    "LC_*",
    "TZ",
    "XAUTHORITY",
    "XDG_DATA_HOME",
    "XDG_DATA_DIRS",
    "XDG_CONFIG_HOME",
    "XDG_CONFIG_DIRS",
    "XDG_CACHE_HOME",
    "XDG_STATE_HOME",
    "XDG_CURRENT_DESKTOP",
    "XDG_SESSION_TYPE",
];

const PROFILES: &[Profile] = &[Profile::Owner, Profile::Desktop, Profile::Apps];

pub static LIST: Tool = Tool {
    name: "apps_list",
    class: Class::Observe,
    class_reason: "lists desktop entries and which of them run; changes nothing",
    description: "List the desktop apps this grant may open with app_open: each entry's `id` \
(what app_open takes), `name` and whether it is `running` (started by this grant and still \
up, with its pids), or how it last ended (`last_exit`). Under the apps profile these are the apps the box's owner listed; \
otherwise the installed apps a menu would show (at most 500).",
    input_schema: list_schema,
    output_schema: Some(list_output_schema),
    start: list_start,
    inline: None,
    needs: Needs::Nothing,
    reach: Reach::Nothing,
    changes_screen: false,
    profiles: PROFILES,
};

pub static OPEN: Tool = Tool {
    name: "app_open",
    class: Class::Act,
    class_reason: "starts a desktop app the owner allows (under apps only those of --apps, which refuses terminals, shells and whatever runs commands); no arguments of the caller's reach it",
    description: "Start a desktop app by its desktop entry ID (from apps_list, e.g. \
org.gnome.Calculator), as its menu entry would, without files or arguments. It runs on this \
box's display until it exits or the grant ends. Answers its pid; then use desktop_snapshot to \
see its window.",
    input_schema: open_schema,
    output_schema: Some(open_output_schema),
    start: open_start,
    inline: None,
    needs: Needs::Screen,
    reach: Reach::Processes,
    changes_screen: true,
    profiles: PROFILES,
};

/// Whether a grant of `profile` may start and drive only the apps of `--apps`: every
/// profile that is not shell-equivalent (`apps`, a `custom` list). Under `apps`
/// `desktop_act` is `act` because [`may_drive`] holds it to those apps.
pub fn drives_listed_only(profile: Profile) -> bool {
    !profile.is_shell_equivalent()
}

fn schema(text: &str) -> Value {
    serde_json::from_str(text).expect("a built-in schema is valid JSON")
}

fn list_schema() -> Value {
    schema(r#"{"type":"object","properties":{},"additionalProperties":false}"#)
}

fn open_schema() -> Value {
    schema(
        r#"{"type":"object","properties":{
        "app":{"type":"string","description":"a desktop entry ID from apps_list, e.g. org.gnome.Calculator"}},
        "required":["app"],"additionalProperties":false}"#,
    )
}

fn list_output_schema() -> Value {
    json!({
        "type": "object",
        "properties": {
            "apps": {"type": "array", "items": {"type": "object", "properties": {
                "id": {"type": "string"},
                "name": {"type": "string"},
                "running": {"type": "boolean"},
                "pids": {"type": "array", "items": {"type": "integer"}},
                "last_exit": {"type": "object", "properties": {
                    "pid": {"type": "integer"},
                    "exit_code": {"type": "integer"},
                    "after_ms": {"type": "integer", "minimum": 0},
                }, "required": ["pid", "exit_code", "after_ms"]},
            }, "required": ["id", "name", "running"]}},
            "truncated": {"type": "boolean"},
        },
        "required": ["apps", "truncated"],
    })
}

fn open_output_schema() -> Value {
    json!({
        "type": "object",
        "properties": {
            "app": {"type": "string"},
            "name": {"type": "string"},
            "pid": {"type": "integer"},
        },
        "required": ["app", "name", "pid"],
    })
}

/// One app a grant started.
#[derive(Debug)]
struct Started {
    key: u64,
    id: String,
    /// The leader's pid, once spawned.
    pid: Option<i32>,
    group: Arc<RunGroup>,
    /// The app's own control: never the call's, so a redial does not end the app.
    ctl: Arc<CallCtl>,
}

/// The apps each scope (a grant's id, or the owner's `/mcp`) started and still runs.
#[derive(Debug, Default)]
pub struct AppRuns {
    inner: Arc<Mutex<Runs>>,
}

#[derive(Debug, Default)]
struct Runs {
    next_key: u64,
    by_scope: HashMap<String, Vec<Started>>,
    /// How each scope's last apps ended, oldest first, at most [`MAX_ENDED_KEPT`]: so an
    /// agent whose app exited at once learns it and how.
    ended: HashMap<String, std::collections::VecDeque<Ended>>,
}

/// How one app a grant started ended.
#[derive(Clone, Debug)]
struct Ended {
    id: String,
    pid: i32,
    exit_code: i32,
    after_ms: u128,
}

fn lock(m: &Mutex<Runs>) -> std::sync::MutexGuard<'_, Runs> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl AppRuns {
    /// The pids of the running apps of `scope` by entry ID.
    fn running(&self, scope: &str) -> HashMap<String, Vec<i32>> {
        let mut out: HashMap<String, Vec<i32>> = HashMap::new();
        for s in lock(&self.inner).by_scope.get(scope).into_iter().flatten() {
            let pids = out.entry(s.id.clone()).or_default();
            pids.extend(s.pid);
        }
        out
    }

    /// The last end of each app of `scope` by entry ID.
    fn last_exits(&self, scope: &str) -> HashMap<String, Ended> {
        let runs = lock(&self.inner);
        let mut out = HashMap::new();
        for e in runs.ended.get(scope).into_iter().flatten() {
            out.insert(e.id.clone(), e.clone());
        }
        out
    }

    fn ended(inner: &Mutex<Runs>, scope: &str, end: Ended) {
        let mut runs = lock(inner);
        let kept = runs.ended.entry(scope.to_string()).or_default();
        if kept.len() == MAX_ENDED_KEPT {
            kept.pop_front();
        }
        kept.push_back(end);
    }

    /// Whether process `pid` belongs to an app `scope` started (see [`may_drive`]).
    pub fn holds(&self, scope: &str, pid: i32) -> Option<String> {
        let runs = lock(&self.inner);
        runs.by_scope
            .get(scope)?
            .iter()
            .find(|s| s.group.holds(pid))
            .map(|s| s.id.clone())
    }

    /// A grant ended: its apps are killed (their cgroups go with the grant's too).
    pub fn end_scope(&self, scope: &str) {
        let gone = {
            let mut runs = lock(&self.inner);
            runs.ended.remove(scope);
            runs.by_scope.remove(scope)
        };
        for s in gone.into_iter().flatten() {
            s.ctl.cancel();
            s.group.kill();
        }
    }

    /// Forget a run that ended; `false` when it was no longer listed (its grant ended,
    /// [`AppRuns::end_scope`]), so nothing is kept for a scope that is gone.
    fn remove(inner: &Mutex<Runs>, scope: &str, key: u64) -> bool {
        let mut runs = lock(inner);
        let Some(list) = runs.by_scope.get_mut(scope) else {
            return false;
        };
        let before = list.len();
        list.retain(|s| s.key != key);
        let was = list.len() < before;
        if list.is_empty() {
            runs.by_scope.remove(scope);
        }
        was
    }
}

/// The check `desktop_act` makes before it acts on an element of application `app` (its
/// accessible name, for the message) whose process is `pid`: where `desktop_act` is `act`
/// (the `apps` profile), the process must belong to an app this grant started with
/// `app_open` (see the module doc for why not the name or `/proc/<pid>/exe`); elsewhere
/// `desktop_act` is a shell tool and every element may be driven. A `pid` of `None` (the
/// accessibility bus did not say) is refused there.
pub fn may_drive(cx: &CallContext, app: &str, pid: Option<u32>) -> Result<(), String> {
    // Exactly where the policy counts desktop_act as `act` (the `apps` profile): a grant
    // that holds it as a shell tool (owner, desktop, a custom list) drives anything.
    if cx.policy.class_of(DESKTOP_ACT) != Some(Class::Act) {
        return Ok(());
    }
    let scope = super::shell::scope(cx);
    match pid.and_then(|p| i32::try_from(p).ok()).filter(|p| *p > 0) {
        Some(pid) if cx.host.apps.holds(scope, pid).is_some() => Ok(()),
        _ => Err(format!(
            "{} is not an app this grant may drive",
            crate::base::label::name(app)
        )),
    }
}

/// The entries this call may list and open: the listed ones, or (shell-equivalent
/// grants) every installed entry a menu shows, bounded; `true` when cut.
fn entries(cx: &CallContext) -> (Vec<DesktopEntry>, bool) {
    if drives_listed_only(cx.policy.profile()) {
        return (cx.host.config.apps.clone(), false);
    }
    let dirs = data_dirs(cx);
    let path = search_path(cx);
    let (found, mut cut) = dirs.scan();
    let mut out = Vec::new();
    for (id, file) in found {
        let Ok(entry) = DesktopEntry::load(&id, &file, &path) else {
            continue;
        };
        if !entry.displayable() {
            continue;
        }
        if out.len() == MAX_LISTED_APPS {
            cut = true;
            break;
        }
        out.push(entry);
    }
    (out, cut)
}

/// Where installed entries are looked up: the configured dirs (tests), else the daemon's
/// `XDG_DATA_HOME`/`XDG_DATA_DIRS`, read now.
fn data_dirs(cx: &CallContext) -> DataDirs {
    cx.host
        .config
        .app_dirs
        .clone()
        .unwrap_or_else(|| DataDirs::from_env(|k| std::env::var(k).ok()))
}

/// The display variables an app of this call starts with: the call's display
/// (`display::call_display`), the box's, or the grant's own (§19), so no app of a grant
/// with its own display reaches the owner's screen or session bus.
fn call_display_env(cx: &CallContext) -> super::display::DisplayEnv {
    super::display::call_display(cx).env
}

/// The `PATH` programs are found on: the display environment's, else the daemon's.
fn search_path(cx: &CallContext) -> String {
    call_display_env(cx)
        .path
        .or_else(|| std::env::var("PATH").ok())
        .unwrap_or_else(|| "/usr/local/bin:/usr/bin:/bin".into())
}

fn list_start(args: Value, cx: CallContext, done: Completion) {
    done.complete(match list(&args, &cx) {
        Ok(out) => out,
        Err(why) => ToolOutput::tool_error(why),
    });
}

fn list(args: &Value, cx: &CallContext) -> Result<ToolOutput, String> {
    let map = super::args::object(args)?;
    if let Some(key) = map.keys().next() {
        return Err(format!("apps_list takes no arguments; got {key}"));
    }
    let (entries, truncated) = entries(cx);
    let scope = super::shell::scope(cx);
    let running = cx.host.apps.running(scope);
    let exits = cx.host.apps.last_exits(scope);
    let mut lines = Vec::new();
    let apps: Vec<Value> = entries
        .iter()
        .map(|e| {
            let pids = running.get(&e.id).cloned().unwrap_or_default();
            let mut app =
                json!({"id": e.id, "name": e.name, "running": !pids.is_empty(), "pids": pids});
            let state = match exits.get(&e.id) {
                _ if !pids.is_empty() => " (running)".to_string(),
                Some(x) => {
                    app["last_exit"] =
                        json!({"pid": x.pid, "exit_code": x.exit_code, "after_ms": x.after_ms});
                    format!(" (ended: exit {} after {} ms)", x.exit_code, x.after_ms)
                }
                None => String::new(),
            };
            lines.push(format!("{} — {}{state}", e.id, e.name));
            app
        })
        .collect();
    let mut text = if apps.is_empty() {
        "No apps to open here.".to_string()
    } else {
        lines.join("\n")
    };
    if truncated {
        text.push_str(&format!("\n(only the first {MAX_LISTED_APPS} are listed)"));
    }
    Ok(ToolOutput::Result(json!({
        "content": [{"type": "text", "text": text}],
        "structuredContent": {"apps": apps, "truncated": truncated},
    })))
}

fn open_start(args: Value, cx: CallContext, done: Completion) {
    // A grant's own display (§19) is started first (on its display thread), so the app
    // gets its variables.
    super::display::own::with_call_display(
        cx,
        done,
        Box::new(move |cx, done| {
            // The wheel (§23), checked where the app would start.
            let wheel = super::display::boxview::call_wheel(&cx);
            if let Err(why) = wheel.may_drive(cx.ctl.wheel_epoch()) {
                return done.complete(ToolOutput::tool_error(why));
            }
            done.complete(match open(&args, &cx) {
                Ok(out) => out,
                Err(why) => ToolOutput::tool_error(why),
            })
        }),
    );
}

/// The entry `app` names for this call, or why it may not be opened here.
fn entry_for(cx: &CallContext, given: &str) -> Result<DesktopEntry, String> {
    let id = de::check_id(given)?;
    if drives_listed_only(cx.policy.profile()) {
        return cx
            .host
            .config
            .apps
            .iter()
            .find(|e| e.id == id)
            .cloned()
            .ok_or_else(|| {
                let listed: Vec<&str> = cx.host.config.apps.iter().map(|e| e.id.as_str()).collect();
                format!(
                    "{id} is not an app this grant may open (it may open: {})",
                    if listed.is_empty() {
                        "none".to_string()
                    } else {
                        listed.join(", ")
                    }
                )
            });
    }
    let dirs = data_dirs(cx);
    let file = dirs.find(&id).map_err(|why| format!("{id}: {why}"))?;
    let entry = DesktopEntry::load(&id, &file, &search_path(cx))
        .map_err(|why| format!("{id} ({}) {why}", file.display()))?;
    entry.installed()?;
    Ok(entry)
}

/// The environment an app starts with (see [`APP_ENV`]).
fn app_env(cx: &CallContext) -> Vec<(std::ffi::OsString, std::ffi::OsString)> {
    let kept = std::env::vars_os().filter(|(name, _)| {
        name.to_str().is_some_and(|n| {
            APP_ENV.iter().any(|p| match p.strip_suffix('*') {
                Some(prefix) => n.starts_with(prefix),
                None => n == *p,
            })
        })
    });
    let display = call_display_env(cx);
    // Every display variable (an own display's cookie, §19; the session and accessibility
    // buses where desktop_snapshot reads the app's tree) but the compositor's control
    // socket: an app has no business driving sway.
    let mut set: Vec<(String, String)> = display
        .pairs()
        .into_iter()
        .filter(|(name, _)| *name != "SWAYSOCK")
        .filter_map(|(k, v)| v.as_ref().map(|v| (k.to_string(), v.clone())))
        .collect();
    if display.path.is_none() {
        set.push(("PATH".into(), search_path(cx)));
    }
    // Toolkits that keep their accessibility tree off unless asked (§17).
    set.push(("QT_LINUX_ACCESSIBILITY_ALWAYS_ON".into(), "1".into()));
    super::env::child_env(kept, &cx.host.config, &[], &set)
}

/// Start the app (returns once it runs; the watcher waits on it), or why not.
fn open(args: &Value, cx: &CallContext) -> Result<ToolOutput, String> {
    let map = super::args::object(args)?;
    if let Some(key) = map.keys().find(|k| *k != "app") {
        return Err(format!(
            "app_open takes only app (a desktop entry ID); {key} is not accepted: an app starts as its entry says, with no arguments of the caller's"
        ));
    }
    let given = match map.get("app") {
        Some(Value::String(s)) => s.as_str(),
        None | Some(Value::Null) => {
            return Err("app is required: a desktop entry ID from apps_list".into())
        }
        Some(_) => return Err("app must be a string (a desktop entry ID)".into()),
    };
    let entry = entry_for(cx, given)?;
    let program: PathBuf = entry.installed()?.to_path_buf();
    let display = call_display_env(cx);
    if display.display.is_none() && display.wayland_display.is_none() {
        // It would start, find no screen and exit: say so instead of a pid that is gone.
        return Err(format!(
            "{} needs a display, and this daemon has none (neither DISPLAY nor WAYLAND_DISPLAY is set; sys_info says what works here)",
            entry.id
        ));
    }
    let scope = super::shell::scope(cx).to_string();
    let apps = &cx.host.apps;
    let key = {
        let mut runs = lock(&apps.inner);
        let running = runs.by_scope.get(&scope).map_or(0, Vec::len);
        if running >= MAX_RUNNING_APPS {
            return Err(format!(
                "this grant already runs {running} apps, the most it may; close one first"
            ));
        }
        runs.next_key += 1;
        runs.next_key
    };
    let marker = format!("app-{}", crate::base::ids::new_id());
    let group = cx
        .host
        .confine
        .run(&scope, cx.grant.is_some(), &marker)
        .map_err(|e| format!("could not contain the app: {e}"))?;
    // On the grant's own display, inside its wall (§19): an app that opens a terminal
    // opens a walled one.
    let mut cmd = super::display::own::walled_command(cx, &group, &program)?;
    cmd.args(&entry.argv[1..])
        .env_clear()
        .envs(app_env(cx))
        .env(super::shell::MARKER_ENV, &marker);
    if let Some(home) = std::env::var_os("HOME").filter(|h| std::path::Path::new(h).is_dir()) {
        cmd.current_dir(home);
    }
    let ctl = CallCtl::new();
    // Registered before the child is watched, so its end (however soon) finds it.
    let inner = Arc::clone(&apps.inner);
    let (id, run_group, run_ctl, run_scope) = (
        entry.id.clone(),
        Arc::clone(&group),
        Arc::clone(&ctl),
        scope.clone(),
    );
    let pid_cell = Arc::new(Mutex::new(None));
    let pid_seen = Arc::clone(&pid_cell);
    let mut spec = RunSpec::oneshot(Duration::MAX, 0, Arc::clone(&ctl));
    spec.confine = Some(Arc::clone(&group));
    spec.on_spawn = Some(Box::new(move |pgid, _| {
        let pid = pgid.as_raw_nonzero().get();
        *pid_seen.lock().unwrap_or_else(|e| e.into_inner()) = Some(pid);
        lock(&inner)
            .by_scope
            .entry(run_scope)
            .or_default()
            .push(Started {
                key,
                id,
                pid: Some(pid),
                group: run_group,
                ctl: run_ctl,
            });
    }));
    let inner = Arc::clone(&apps.inner);
    let exit_scope = scope.clone();
    let app_id = entry.id.clone();
    let (started_tx, started_rx) = crossbeam_channel::bounded(1);
    let pid_at_end = Arc::clone(&pid_cell);
    cx.host.processes.spawn(cmd, spec, move |result| {
        let listed = AppRuns::remove(&inner, &exit_scope, key);
        match result {
            Ok(r) if listed => {
                log::info!("app {app_id} ended (exit {})", r.exit_code);
                let pid = pid_at_end
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .unwrap_or_default();
                let end = Ended {
                    id: app_id,
                    pid,
                    exit_code: r.exit_code,
                    after_ms: r.duration.as_millis(),
                };
                AppRuns::ended(&inner, &exit_scope, end);
            }
            Ok(_) => {}
            Err(e) => {
                let _ = started_tx.send(e.to_string());
            }
        }
    });
    // `spawn` reports a failure to start before it returns; a started app's end comes
    // later, on the watcher thread.
    if let Ok(why) = started_rx.try_recv() {
        return Err(format!("could not start {}: {why}", entry.id));
    }
    let pid = pid_cell
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .unwrap_or_default();
    Ok(ToolOutput::Result(json!({
        "content": [{"type": "text", "text": format!("started {} ({}), pid {pid}", entry.id, entry.name)}],
        "structuredContent": {"app": entry.id, "name": entry.name, "pid": pid},
    })))
}

#[cfg(test)]
mod tests;
