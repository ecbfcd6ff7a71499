//! The browser tier (contract §12): a throwaway browser for each `browser` grant. Owns the
//! `--browser-command` processes (one Playwright MCP server on stdio per grant), the
//! supervisor thread that speaks MCP to them, and the tool list a `browser` grant sees.
//!
//! **Life of a browser.** Nothing runs until a grant's first browser call. That call
//! starts the command in its own process group, in a fresh directory of its own under
//! `--browser-dir` (its working directory, `TMPDIR`, `HOME` and `--output-dir` all point
//! inside it, and `--user-data-dir` too unless the command says `--isolated`), with
//! `--blocked-origins` naming the admin listener, an environment built from an allow-list
//! ([`browser_env`]), and inside `bwrap` ([`Isolation`]) where that works. The
//! browser then lives across redials of its grant, and is destroyed when the grant ends
//! for any reason, when it has been idle for `--browser-idle-ms`, or on shutdown:
//! its processes are killed (chromium included, see [`sweep`]) and its directory removed.
//!
//! **Calls never wait on a caller's thread.** `call` hands the call to the supervisor
//! thread, which sleeps in one epoll set over every browser's pipes and exit pidfd and
//! completes the call's `Completion` when the reply line arrives; a cancel (`CallCtl`)
//! wakes it to drop the wait and tell the browser `notifications/cancelled`.
//!
//! **The tool list** is known without starting a browser: the names come from the class
//! table (`profiles::browser_profile_tools`), the schemas from a *probe* run once at start
//! (the command started, `initialize` and `tools/list`, stopped; Playwright launches no
//! chromium for that), refreshed by every browser started later. Until one has answered,
//! each tool is listed with an open schema. Once learned, a tool the command does not
//! offer (a `--caps` it was not given) is not listed.
//!
//! **Bounds.** At most `--max-browsers` at once (a call past that answers `no browser
//! available: N already running`); at most [`MAX_CALLS_PER_BROWSER`] calls waiting per
//! browser; one message from a browser at most the outbound cap; the stderr kept per
//! browser is its last [`STDERR_TAIL_LINES`] lines, each cut to [`STDERR_LINE_BYTES`].

mod inline;
mod supervisor;
pub mod sweep;
pub mod upstream;

use std::os::unix::fs::{DirBuilderExt, MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use crossbeam_channel::Sender;
use serde_json::{json, Value};

use crate::base::error::Error;
use crate::base::wake::{Poller, Waker};
use crate::pool::{CallCtl, Completion};
use crate::profiles::{browser_class_of, browser_profile_tools, Class};
use crate::tools::ToolConfig;
use crate::wire::mcp::ToolOutput;

/// Calls queued or waiting for their reply per browser; one more is refused.
pub const MAX_CALLS_PER_BROWSER: usize = 64;
/// Lines of a browser's stderr kept for error messages.
pub const STDERR_TAIL_LINES: usize = 20;
/// Longest stderr line kept (bytes); the rest of a longer line is dropped.
pub const STDERR_LINE_BYTES: usize = 400;
/// Longest a browser's processes may take to die once killed, per sweep.
pub const KILL_PATIENCE: Duration = Duration::from_secs(5);

/// How the browser tier runs. Built from the configuration.
#[derive(Clone, Debug)]
pub struct BrowserOptions {
    /// `--browser-command`, split (see [`crate::base::browser_argv`]).
    pub argv: Vec<String>,
    /// Browsers running at once.
    pub max_browsers: usize,
    /// An idle browser is stopped after this long without a call (`Timing::browser_idle`).
    pub idle: Duration,
    /// From spawn to the answer to `initialize` (`Timing::browser_start_timeout`).
    pub start_timeout: Duration,
    /// Parent of every browser's own directory.
    pub dir: PathBuf,
    /// The environment cleaner's settings (secret names and values).
    pub env: ToolConfig,
    /// Largest message accepted from a browser (bytes).
    pub max_message_bytes: usize,
    /// Run the start-up probe that learns the tool schemas.
    pub probe: bool,
    /// `--blocked-origins` every browser is started with: the admin listener's origins
    /// (`browser_argv::admin_origins`).
    pub blocked_origins: Vec<String>,
    /// How each browser is walled off from the daemon's files.
    pub isolation: Isolation,
}

/// How a throwaway browser is kept from the daemon's files (contract §14).
#[derive(Clone, Debug)]
pub enum Isolation {
    /// Started as it is: it sees every file the daemon's user can read.
    None,
    /// Started inside `bwrap`: a mount namespace in which the hidden paths are empty.
    Bwrap(crate::walls::Bwrap),
}

impl Isolation {
    /// The grant JSON's `browser_isolation`.
    pub fn name(&self) -> &'static str {
        match self {
            Isolation::None => "none",
            Isolation::Bwrap(_) => "bwrap",
        }
    }
}

/// The isolation `config` asks for, probed on this box: `--browser-isolation bwrap` that
/// cannot work is a configuration error (exit 2); `auto` falls back to none and warns.
pub fn isolation_for(config: &crate::config::Config) -> Result<Isolation, Error> {
    let wall = crate::walls::for_mode(
        config.browser_wall_mode(),
        crate::walls::Kind::Browser,
        config,
        Vec::new(),
        Vec::new(),
        "throwaway browsers run without isolation from handnode's files",
    )?;
    Ok(wall.map_or(Isolation::None, Isolation::Bwrap))
}

/// A throwaway browser's environment (contract §14), built from an allow-list of the
/// daemon's: `PATH`, `LANG`, `LC_*`, `TZ`, and the display's variables only when the
/// browser is headed; then `set` (its own `HOME`, `TMPDIR`, …). Nothing else — no
/// `PLAYWRIGHT_MCP_*`, no `NODE_OPTIONS`, no handnode secret — reaches it; a kept value
/// equal to a daemon secret is dropped too (the tools' cleaner).
pub fn browser_env(
    base: impl IntoIterator<Item = (std::ffi::OsString, std::ffi::OsString)>,
    headed: bool,
    cfg: &ToolConfig,
    set: &[(String, String)],
) -> Vec<(std::ffi::OsString, std::ffi::OsString)> {
    const DISPLAY: &[&str] = &[
        "DISPLAY",
        "WAYLAND_DISPLAY",
        "XAUTHORITY",
        "XDG_RUNTIME_DIR",
    ];
    let kept = base.into_iter().filter(|(name, _)| {
        let Some(name) = name.to_str() else {
            return false;
        };
        matches!(name, "PATH" | "LANG" | "TZ")
            || name.starts_with("LC_")
            || headed && DISPLAY.contains(&name)
    });
    crate::tools::env::child_env(kept, cfg, &[], set)
}

/// The tool objects a `browser` grant lists, learned from a browser's `tools/list`.
#[derive(Debug, Default)]
struct Learned {
    /// `None` until some browser answered `tools/list`.
    tools: Option<Vec<Value>>,
    /// Times `tools` changed: a connection's cached `tools/list` is rebuilt when it moves.
    changes: u64,
}

/// What the supervisor thread is told.
enum Msg {
    Call(Box<supervisor::Call>),
    Cancel(u64),
    End(String),
    Shutdown(Sender<()>),
}

/// Every throwaway browser of this daemon. Dropping it (or [`Browsers::shutdown`]) kills
/// every browser and removes every directory they made.
pub struct Browsers {
    tx: Sender<Msg>,
    waker: Arc<Waker>,
    thread: Mutex<Option<JoinHandle<()>>>,
    learned: Arc<Mutex<Learned>>,
    running: Arc<AtomicUsize>,
    next_key: std::sync::atomic::AtomicU64,
    options: BrowserOptions,
}

impl std::fmt::Debug for Browsers {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Browsers")
            .field("program", &self.options.argv.first())
            .field("running", &self.running())
            .finish_non_exhaustive()
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// The default `--browser-dir`: `$XDG_RUNTIME_DIR/handnode-browsers` when that directory
/// is this user's own, else `/tmp/handnode-browsers-<uid>`. Short on purpose: chromium puts
/// a Unix socket under `TMPDIR`, and socket paths are limited to 107 bytes.
pub fn default_dir(env: &std::collections::HashMap<String, String>) -> PathBuf {
    match env
        .get("XDG_RUNTIME_DIR")
        .map(PathBuf::from)
        .filter(|p| crate::base::statedir::is_own_runtime_dir(p))
    {
        Some(run) => run.join("handnode-browsers"),
        None => PathBuf::from(format!(
            "/tmp/handnode-browsers-{}",
            rustix::process::geteuid().as_raw()
        )),
    }
}

/// Create `dir` (0700) or check the one there: a real directory, ours, not open to others.
pub fn prepare_dir(dir: &Path) -> Result<(), Error> {
    let fail = |why: String| {
        Error::Config(format!(
            "cannot use {} for the browsers: {why} (set --browser-dir)",
            dir.display()
        ))
    };
    match std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
    {
        Ok(()) => {}
        Err(e) => return Err(fail(e.to_string())),
    }
    let meta = std::fs::symlink_metadata(dir).map_err(|e| fail(e.to_string()))?;
    if !meta.is_dir() {
        return Err(fail("it is not a directory".into()));
    }
    let me = rustix::process::geteuid().as_raw();
    if meta.uid() != me {
        return Err(fail(format!(
            "it belongs to uid {}, not to us ({me})",
            meta.uid()
        )));
    }
    if meta.mode() & 0o077 != 0 {
        std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700))
            .map_err(|e| fail(format!("cannot narrow its mode to 0700: {e}")))?;
    }
    Ok(())
}

impl Browsers {
    /// Prepare `--browser-dir` (removing what a crashed daemon left there), start the
    /// supervisor thread, and, with `options.probe`, the start-up probe.
    pub fn start(options: BrowserOptions) -> Result<Browsers, Error> {
        prepare_dir(&options.dir)?;
        sweep::remove_orphans(&options.dir, KILL_PATIENCE);
        let poller = Poller::new().map_err(|e| Error::io("create the browser poller", e))?;
        let waker = poller.waker();
        let (tx, rx) = crossbeam_channel::unbounded();
        let learned = Arc::new(Mutex::new(Learned::default()));
        let running = Arc::new(AtomicUsize::new(0));
        let sup = supervisor::Supervisor::new(
            options.clone(),
            poller,
            rx,
            Arc::clone(&learned),
            Arc::clone(&running),
        );
        let thread = std::thread::Builder::new()
            .name("browsers".into())
            .spawn(move || sup.run())
            .map_err(|e| Error::io("start the browser supervisor thread", e))?;
        Ok(Browsers {
            tx,
            waker,
            thread: Mutex::new(Some(thread)),
            learned,
            running,
            next_key: std::sync::atomic::AtomicU64::new(1),
            options,
        })
    }

    /// Browsers running (or starting) right now.
    pub fn running(&self) -> usize {
        self.running.load(Ordering::SeqCst)
    }

    /// How every browser is walled off: the grant JSON's `browser_isolation`.
    pub fn isolation(&self) -> &'static str {
        self.options.isolation.name()
    }

    /// The parent of every browser's own directory.
    pub fn dir(&self) -> &Path {
        &self.options.dir
    }

    /// Whether some browser (or the probe) has answered `tools/list`.
    pub fn learned(&self) -> bool {
        lock(&self.learned).tools.is_some()
    }

    /// The tool objects a `browser` grant lists, in class-table order. Never blocks on a
    /// browser: the learned list is read under a short lock.
    pub fn tools(&self) -> Vec<Value> {
        let learned = lock(&self.learned);
        browser_profile_tools()
            .filter_map(|name| match &learned.tools {
                Some(tools) => tools
                    .iter()
                    .find(|t| t.get("name").and_then(Value::as_str) == Some(name))
                    .cloned(),
                None => Some(placeholder(name)),
            })
            .collect()
    }

    /// Whether a `browser` grant may call `name` (it is listed).
    pub fn offers(&self, name: &str) -> bool {
        if !browser_profile_tools().any(|t| t == name) {
            return false;
        }
        match &lock(&self.learned).tools {
            Some(tools) => tools
                .iter()
                .any(|t| t.get("name").and_then(Value::as_str) == Some(name)),
            None => true,
        }
    }

    /// Run a browser tool for `grant` in that grant's own browser (started now if it has
    /// none). Never blocks: `done` is completed by the supervisor thread, at the latest
    /// `timeout` from now, a browser start included.
    pub fn call(
        &self,
        grant: &str,
        name: &str,
        arguments: Value,
        ctl: Arc<CallCtl>,
        timeout: Duration,
        done: Completion,
    ) {
        if ctl.is_cancelled() {
            return done.complete(ToolOutput::tool_error("cancelled before it started"));
        }
        let key = self.next_key.fetch_add(1, Ordering::SeqCst);
        let call = supervisor::Call {
            key,
            grant: grant.to_string(),
            name: name.to_string(),
            arguments,
            ctl: Arc::clone(&ctl),
            timeout,
            deadline: std::time::Instant::now() + timeout,
            done,
        };
        if let Err(crossbeam_channel::SendError(Msg::Call(call))) =
            self.tx.send(Msg::Call(Box::new(call)))
        {
            return call
                .done
                .complete(ToolOutput::tool_error("handnode is shutting down"));
        }
        self.waker.wake();
        let tx = self.tx.clone();
        let waker = Arc::clone(&self.waker);
        ctl.on_cancel(move || {
            if tx.send(Msg::Cancel(key)).is_ok() {
                waker.wake();
            }
        });
    }

    /// The grant ended (or its thread stopped for shutdown): destroy its browser, if any.
    /// Returns at once; the supervisor does the killing.
    pub fn end_grant(&self, grant: &str) {
        if self.tx.send(Msg::End(grant.to_string())).is_ok() {
            self.waker.wake();
        }
    }

    /// Kill every browser, remove every directory, stop the thread; returns when done.
    pub fn shutdown(&self) {
        let Some(thread) = lock(&self.thread).take() else {
            return;
        };
        let (ack_tx, ack_rx) = crossbeam_channel::bounded(1);
        if self.tx.send(Msg::Shutdown(ack_tx)).is_ok() {
            self.waker.wake();
            let _ = ack_rx.recv();
        }
        if thread.thread().id() != std::thread::current().id() {
            let _ = thread.join();
        }
    }
}

impl crate::tools::BrowserTier for Browsers {
    fn tools(&self) -> Vec<Value> {
        Browsers::tools(self)
    }

    fn offers(&self, name: &str) -> bool {
        Browsers::offers(self, name)
    }

    fn version(&self) -> Option<u64> {
        Some(lock(&self.learned).changes)
    }
}

impl Drop for Browsers {
    fn drop(&mut self) {
        self.shutdown();
    }
}

/// A tool as listed before any browser has told its schema.
fn placeholder(name: &str) -> Value {
    let class = browser_class_of(name).unwrap_or(Class::Act);
    json!({
        "name": name,
        "description": format!(
            "Playwright's {name}, run in this grant's own browser. Its parameters are \
             learned when the first browser starts; see Playwright MCP's documentation."
        ),
        "inputSchema": {"type": "object"},
        "annotations": class.annotations().to_json(),
    })
}

#[cfg(test)]
mod tests;
