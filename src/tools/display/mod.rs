//! Graphical tools: `screenshot`, `mouse`, `key` over X11 or wlroots Wayland. Owns
//! backend probing (re-done on each call, cached briefly), the display thread that runs
//! every graphical action in order so no pool worker waits on a helper, and the facts
//! `sys_info` and `doctor` report.

mod arguments;
pub mod boxview;
mod descriptors;
mod helper;
mod image;
pub mod keys;
pub mod own;
mod probe;
mod screen_tools;
mod wayland;
pub mod wheel;
mod x11;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use base64::Engine as _;
use crossbeam_channel::{Sender, TrySendError};
use serde_json::{json, Value};

use super::args::{self, Naming};
use super::process::ProcessWatcher;
use super::{CallContext, Needs, Tool, ToolConfig, TtlCache};
use crate::config::DisplayBackend;
use crate::pool::{CallCtl, Completion};
use crate::profiles::{Class, Profile};
use crate::wire::mcp::ToolOutput;
use helper::{Helper, RunError};

/// Graphical calls waiting for the display thread before new ones are refused.
pub(super) const DISPLAY_QUEUE: usize = 32;
/// Most keystrokes per helper run; a cancel takes effect between runs.
pub(super) const TYPE_CHUNK_CHARS: usize = 32;
/// Longest a helper run of keystrokes should take (ms): the cancel latency of `key`.
pub(super) const KEY_PIECE_MS: u32 = 1000;
/// Intermediate pointer positions of a drag.
pub(crate) const DRAG_STEPS: u32 = 8;
/// Longest `text` for `key type` (characters).
pub(super) const MAX_TEXT_CHARS: usize = 10_000;
/// Most chords in one `key press`.
pub(super) const MAX_KEYS: usize = 64;
/// Default and largest pause between keystrokes (ms).
pub(super) const DEFAULT_KEY_DELAY_MS: u32 = 12;
pub(super) const MAX_KEY_DELAY_MS: u32 = 1000;
/// Largest wheel notches in one `scroll` on either axis.
pub(super) const MAX_SCROLL_NOTCHES: i64 = 100;
/// Largest coordinate accepted in arguments (pixels); the screen check comes later.
pub(super) const MAX_COORD: u64 = 100_000;
/// `wtype` drops the first keystroke unless it waits for the keymap to settle (ms).
pub(super) const WTYPE_SETTLE_MS: u32 = 50;
/// Screenshot byte budget: default, and the largest a reply can carry once base64-encoded
/// under the 16 MiB − 64 KiB outbound cap.
pub(super) const DEFAULT_MAX_BYTES: u64 = 4 << 20;
pub(super) const MIN_MAX_BYTES: u64 = 1024;
pub(super) const MAX_MAX_BYTES: u64 = 11 << 20;
/// Screenshot scale bounds.
pub(super) const MIN_SCALE: f64 = 0.1;
pub(super) const MAX_SCALE: f64 = 2.0;

pub use arguments::*;
pub use descriptors::*;
pub use own::{call_display, CallDisplay, OwnDisplays, OwnOptions};
pub use probe::*;
pub use screen_tools::*;

// ───────────────────────────── shared state ─────────────────────────────

type Job = Box<dyn FnOnce() + Send>;

/// Per-daemon display state: the probe cache and the display thread's queue.
#[derive(Debug, Default)]
pub struct DisplayState {
    cache: TtlCache<Probe>,
    /// The newest probe whatever its age: the grant list reads it without waiting on the
    /// display server, which a probe in progress may be doing.
    newest: Mutex<Option<Arc<Probe>>>,
    queue: Mutex<Option<Sender<Job>>>,
}

impl DisplayState {
    /// The probe if one younger than `display_probe_ttl` is at hand, without waiting (a
    /// probe in progress holds the lock): for callers that must not block.
    pub fn cached(&self, cfg: &ToolConfig) -> Option<Arc<Probe>> {
        let (probe, _) = self.cache.cached(cfg.display_probe_ttl)?;
        Some(probe)
    }

    /// The current probe, reused for `display_probe_ttl`.
    pub fn probe(&self, cfg: &ToolConfig, processes: &ProcessWatcher) -> Arc<Probe> {
        let probe = self
            .cache
            .get(cfg.display_probe_ttl, || probe_now(cfg, processes))
            .0;
        *self.newest.lock().unwrap_or_else(|e| e.into_inner()) = Some(Arc::clone(&probe));
        probe
    }

    /// The newest probe, however old, without waiting (none before the first): for readers
    /// polled often, under locks, that must not wait on the display server. The backend it
    /// found rarely changes; what they ask of it (a program on `PATH`) they look up afresh.
    pub fn newest(&self) -> Option<Arc<Probe>> {
        self.newest
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// The probe of an own display (§19) with its variables, reused for
    /// `display_probe_ttl` (a restarted display has new variables: probed afresh).
    pub(super) fn probe_env(
        &self,
        cfg: &ToolConfig,
        env: DisplayEnv,
        processes: &ProcessWatcher,
    ) -> Arc<Probe> {
        let (probe, _) = self.cache.get(cfg.display_probe_ttl, || {
            probe_with(cfg, env.clone(), DisplayBackend::X11, processes)
        });
        if probe.env == env {
            return probe;
        }
        let fresh = Arc::new(probe_with(cfg, env, DisplayBackend::X11, processes));
        self.cache.put(Arc::clone(&fresh));
        fresh
    }

    /// Queue a graphical action for the display thread, starting it on first use. Actions
    /// run one at a time, in order: two agents' clicks and keystrokes must not interleave.
    fn submit(&self, job: Job) -> Result<(), String> {
        let mut queue = self.queue.lock().unwrap_or_else(|e| e.into_inner());
        if queue.is_none() {
            let (tx, rx) = crossbeam_channel::bounded::<Job>(DISPLAY_QUEUE);
            std::thread::Builder::new()
                .name("display".into())
                .spawn(move || {
                    for job in rx.iter() {
                        // A panic is reported to the caller by the job's Completion drop.
                        if let Err(payload) =
                            std::panic::catch_unwind(std::panic::AssertUnwindSafe(job))
                        {
                            crate::faults::caught(
                                crate::faults::Site::Tool,
                                "a graphical call",
                                payload.as_ref(),
                            );
                        }
                    }
                })
                .map_err(|e| format!("cannot start the display thread: {e}"))?;
            *queue = Some(tx);
        }
        let tx = queue.as_ref().expect("queue was just set");
        match tx.try_send(job) {
            Ok(()) => Ok(()),
            Err(TrySendError::Full(_)) => Err(format!(
                "the display is busy: {DISPLAY_QUEUE} graphical calls are already waiting; \
                 retry shortly"
            )),
            Err(TrySendError::Disconnected(_)) => {
                *queue = None;
                Err("the display thread stopped; retry".into())
            }
        }
    }
}

/// Run a short query helper (e.g. `xset q`) with the probe's display environment and
/// the helper timeout; its stdout, or why it failed. For `doctor`.
pub fn query(
    probe: &Probe,
    cfg: &ToolConfig,
    processes: &ProcessWatcher,
    program: &str,
    args: &[&str],
) -> Result<String, String> {
    let path = which(program, probe.env.path.as_deref()).ok_or_else(|| install_hint(program))?;
    let env = probe.child_env(cfg);
    helper::run_ok(
        &Helper {
            program: &path,
            args: args.iter().map(|s| s.to_string()).collect(),
            env: &env,
            stdin: None,
            timeout: cfg.display_helper_timeout,
            cancel_kills: true,
        },
        &CallCtl::new(),
        processes,
    )
    .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
    .map_err(RunError::message)
}

/// Backend, displays and which graphical tools work (and why not), of the box's display.
pub fn facts(host: &super::ToolHost) -> Value {
    host.display.probe(&host.config, &host.processes).to_json()
}

/// [`facts`] of the call's display (the grant's own, §19, when it has one), for `sys_info`.
pub fn call_facts(cx: &CallContext) -> Value {
    let host = &cx.host;
    let Some(own) = own::own_of(cx) else {
        return facts(host);
    };
    let mut out = match own.env_now(&host.config) {
        Some(env) => own
            .state
            .probe_env(&host.config, env, &host.processes)
            .to_json(),
        None => own::idle_facts(&host.config),
    };
    out["own_display"] = own.to_json();
    out
}

/// Run `work` on the call's display thread with a fresh probe; its output completes
/// `done`. The display is the call's ([`own::call_display`]): the box's, or the grant's
/// own, which this starts on first use (§19) on that display's own thread. The
/// accessibility tools (`tools::a11y`) run here too, in order with clicks and keys.
pub(crate) fn dispatch(
    cx: CallContext,
    done: Completion,
    tool: Gui,
    work: impl FnOnce(&Probe, &CallContext) -> ToolOutput + Send + 'static,
) {
    let host = cx.host.clone();
    let own = own::own_of(&cx);
    // The wheel (§23): checked now, and again when the display thread takes the call.
    let wheel = wheel::drives(tool.name()).then(|| boxview::call_wheel(&cx));
    let admitted = cx.ctl.wheel_epoch();
    if let Some(wheel) = &wheel {
        if let Err(why) = wheel.may_drive(admitted) {
            return done.complete(ToolOutput::tool_error(why));
        }
    }
    let slot = Arc::new(Mutex::new(Some(done)));
    let job_slot = slot.clone();
    let job_own = own.clone();
    let job: Job = Box::new(move || {
        let Some(done) = job_slot.lock().unwrap_or_else(|e| e.into_inner()).take() else {
            return;
        };
        if cx.ctl.is_cancelled() {
            done.complete(ToolOutput::tool_error("cancelled before it started"));
            return;
        }
        if let Some(wheel) = &wheel {
            if let Err(why) = wheel.may_drive(admitted) {
                return done.complete(ToolOutput::tool_error(why));
            }
        }
        let probe = match &job_own {
            None => cx.host.display.probe(&cx.host.config, &cx.host.processes),
            Some(own) => match own.ensure(&cx.host.config, &cx.host.confine) {
                Ok(env) => own
                    .state
                    .probe_env(&cx.host.config, env, &cx.host.processes),
                Err(why) => {
                    return done.complete(ToolOutput::tool_error(format!(
                        "{} unavailable: {why}",
                        tool.name()
                    )))
                }
            },
        };
        let out = match probe.ready(tool) {
            Ok(()) => work(&probe, &cx),
            Err(why) => ToolOutput::tool_error(format!("{} unavailable: {why}", tool.name())),
        };
        done.complete(out);
    });
    let state = match &own {
        Some(own) => &own.state,
        None => &host.display,
    };
    if let Err(why) = state.submit(job) {
        if let Some(done) = slot.lock().unwrap_or_else(|e| e.into_inner()).take() {
            done.complete(ToolOutput::tool_error(why));
        }
    }
}

/// Map (key, value) pairs of a test's environment into the override `ToolConfig` takes.
pub fn env_override<'a>(
    pairs: impl IntoIterator<Item = (&'a str, &'a str)>,
) -> BTreeMap<String, String> {
    pairs
        .into_iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

#[cfg(test)]
mod tests;
