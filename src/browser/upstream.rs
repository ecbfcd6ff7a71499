//! MCP client of upstream servers (browser tools over Streamable HTTP): each upstream's
//! session, its cached tool list refreshed in the background, and tool calls forwarded on
//! the upstream's own I/O threads so neither a catalogue lookup nor a pool worker ever
//! waits on HTTP.

use std::io::{BufRead, BufReader, Read};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, Sender, TrySendError};
use serde_json::{json, Value};

use crate::base::error::Error;
use crate::config::Timing;
use crate::pool::{CallCtl, Completion};
use crate::tools::UpstreamSource;
use crate::wire::http::{self, HttpError, Request, Target};
use crate::wire::mcp::{ToolOutput, DEFAULT_PROTOCOL_VERSION, SERVER_ERROR};

/// I/O threads per upstream that carry tool calls (the list refresh has its own thread).
pub const CALL_THREADS: usize = 4;
/// Calls queued per upstream before further calls are refused as busy.
pub const CALL_QUEUE: usize = 64;
/// Largest reply body (bytes, JSON or the whole SSE stream up to our response) we read
/// from an upstream; the outbound cap to the agent is 16 MiB anyway.
pub const MAX_REPLY_BYTES: usize = 16 << 20;
/// Most `tools/list` pages followed before the list is refused as runaway.
pub const MAX_LIST_PAGES: usize = 16;
/// Longest `Mcp-Session-Id` (bytes) we keep and send back.
pub const MAX_SESSION_ID_BYTES: usize = 1024;
/// Tools without a class remembered per upstream so each is logged once (names); past
/// this many, one more line says further ones go unlogged.
pub const MAX_UNCLASSIFIED_LOGGED: usize = 64;

/// How the upstream clients behave. Built from [`Timing`] in production; tests shrink
/// the bounds to exercise them.
#[derive(Clone, Debug)]
pub struct UpstreamOptions {
    /// One HTTP exchange with an upstream, end to end (connect to last byte read).
    pub timeout: Duration,
    /// How long a fetched tool list is served before a background refresh is triggered.
    pub cache_ttl: Duration,
    pub call_threads: usize,
    pub call_queue: usize,
    pub max_reply_bytes: usize,
    pub max_list_pages: usize,
    /// For `https://` upstreams: the daemon's roots and `--ca-file`.
    pub tls: Option<Arc<rustls::ClientConfig>>,
}

impl UpstreamOptions {
    pub fn from_timing(timing: &Timing) -> Self {
        UpstreamOptions {
            timeout: timing.upstream_timeout,
            cache_ttl: timing.upstream_cache_ttl,
            call_threads: CALL_THREADS,
            call_queue: CALL_QUEUE,
            max_reply_bytes: MAX_REPLY_BYTES,
            max_list_pages: MAX_LIST_PAGES,
            tls: None,
        }
    }
}

/// What one upstream looks like right now, for `sys_info` and `doctor`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UpstreamStatus {
    pub name: String,
    pub url: String,
    /// Tools in the cached list (0 while down or not yet fetched).
    pub tools: usize,
    /// Why the last refresh failed; `None` when it succeeded or none finished yet.
    pub error: Option<String>,
    /// Whether any refresh has finished yet.
    pub checked: bool,
}

/// Every configured upstream MCP server. Implements [`UpstreamSource`]: `tools()` answers
/// from a cache and never blocks; `call()` queues onto the upstream's own threads.
/// Dropping it stops those threads (waiting at most one request timeout for an exchange
/// in flight) and ends each upstream session.
pub struct Upstreams {
    lanes: Vec<Lane>,
    cache_ttl: Duration,
}

/// One upstream: the state its threads share, and the channels that feed them. The
/// senders live here only, so dropping them ends the threads.
struct Lane {
    shared: Arc<Shared>,
    refresh_tx: Option<Sender<Refresh>>,
    call_tx: Option<Sender<CallTask>>,
    threads: Vec<JoinHandle<()>>,
}

struct Shared {
    client: Client,
    cache: Mutex<Cache>,
    refreshed: Condvar,
    /// A background refresh is queued or running; further triggers are dropped.
    refreshing: AtomicBool,
    stopping: AtomicBool,
    /// Background refreshes queued so far (tests check that the TTL is honoured).
    triggered: AtomicU64,
}

#[derive(Default)]
struct Cache {
    tools: Vec<Value>,
    /// Tools this upstream offered that have no class, in the order first seen, each cut
    /// to `MAX_TOOL_NAME_BYTES`: each was logged once then (only `owner` sees them).
    unclassified: Vec<String>,
    /// More than [`MAX_UNCLASSIFIED_LOGGED`] were offered, and that was logged.
    unclassified_overflowed: bool,
    fetched_at: Option<Instant>,
    error: Option<String>,
    /// Finished refreshes, successful or not.
    generation: u64,
    /// Refreshes that changed `tools`: a connection's cached `tools/list` is rebuilt
    /// when this moves ([`UpstreamSource::version`]).
    changes: u64,
}

enum Refresh {
    Background,
    /// `refresh_now`: acknowledge when done.
    Now(Sender<()>),
}

struct CallTask {
    name: String,
    arguments: Value,
    ctl: Arc<CallCtl>,
    done: Completion,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl Upstreams {
    /// Start clients for `upstreams` (`(name, url)` as in `Config::upstreams`) with the
    /// production bounds and the timing from `timing`. Nothing is fetched yet: the first
    /// `tools()` (or [`Upstreams::refresh_now`]) triggers the first refresh.
    pub fn new(
        upstreams: Vec<(String, String)>,
        timing: &Timing,
        tls: Arc<rustls::ClientConfig>,
    ) -> Result<Self, Error> {
        let options = UpstreamOptions {
            tls: Some(tls),
            ..UpstreamOptions::from_timing(timing)
        };
        Self::with_options(upstreams, options)
    }

    pub fn with_options(
        upstreams: Vec<(String, String)>,
        options: UpstreamOptions,
    ) -> Result<Self, Error> {
        let targets = validate(&upstreams)?;
        let mut this = Upstreams {
            lanes: Vec::with_capacity(upstreams.len()),
            cache_ttl: options.cache_ttl,
        };
        for ((name, url), target) in upstreams.into_iter().zip(targets) {
            // On a spawn failure `this` is dropped, which stops the lanes already started.
            let lane = Lane::start(name, url, target, &options)?;
            this.lanes.push(lane);
        }
        Ok(this)
    }

    /// Names of the configured upstreams, by index.
    pub fn names(&self) -> Vec<&str> {
        self.lanes
            .iter()
            .map(|l| l.shared.client.name.as_str())
            .collect()
    }

    /// Refresh every upstream's tool list now and wait until all have finished (each
    /// bounded by the request timeout per exchange). For start-up and tests.
    pub fn refresh_now(&self) {
        let acks: Vec<Receiver<()>> = self
            .lanes
            .iter()
            .filter_map(|lane| {
                let (tx, rx) = crossbeam_channel::bounded(1);
                lane.refresh_tx.as_ref()?.send(Refresh::Now(tx)).ok()?;
                Some(rx)
            })
            .collect();
        for ack in acks {
            // A disconnected ack means the thread is gone; nothing left to wait for.
            let _ = ack.recv();
        }
    }

    /// How many refreshes of upstream `index` have finished (0 for an unknown index).
    pub fn refresh_generation(&self, index: usize) -> u64 {
        self.lanes
            .get(index)
            .map_or(0, |l| lock(&l.shared.cache).generation)
    }

    /// Wait until upstream `index` has finished a refresh after generation `after`.
    /// Returns false when `timeout` passes first. For tests and diagnostics.
    pub fn wait_refreshed(&self, index: usize, after: u64, timeout: Duration) -> bool {
        let Some(lane) = self.lanes.get(index) else {
            return false;
        };
        let deadline = Instant::now() + timeout;
        let mut cache = lock(&lane.shared.cache);
        while cache.generation <= after {
            let now = Instant::now();
            if now >= deadline {
                return false;
            }
            cache = lane
                .shared
                .refreshed
                .wait_timeout(cache, deadline - now)
                .unwrap_or_else(|e| e.into_inner())
                .0;
        }
        true
    }

    /// The tools without a class upstream `index` has offered, in the order first seen
    /// (each logged once then).
    pub fn unclassified(&self, index: usize) -> Vec<String> {
        self.lanes
            .get(index)
            .map_or(Vec::new(), |l| lock(&l.shared.cache).unclassified.clone())
    }

    pub fn status(&self) -> Vec<UpstreamStatus> {
        self.lanes
            .iter()
            .map(|lane| {
                let cache = lock(&lane.shared.cache);
                UpstreamStatus {
                    name: lane.shared.client.name.clone(),
                    url: lane.shared.client.url.clone(),
                    tools: cache.tools.len(),
                    error: cache.error.clone(),
                    checked: cache.generation > 0,
                }
            })
            .collect()
    }
}

/// Names must be distinct and non-empty, URLs plain `http(s)://host…`. Returns each URL
/// parsed, in order.
fn validate(upstreams: &[(String, String)]) -> Result<Vec<Target>, Error> {
    let mut seen = std::collections::HashSet::new();
    let mut targets = Vec::with_capacity(upstreams.len());
    for (name, url) in upstreams {
        if name.is_empty() {
            return Err(Error::Config(format!(
                "upstream {url:?} has an empty name; write --upstream NAME=URL"
            )));
        }
        if !seen.insert(name.as_str()) {
            return Err(Error::Config(format!(
                "upstream name {name:?} is given twice; each --upstream needs its own name"
            )));
        }
        match Target::parse(url) {
            Ok(target) => targets.push(target),
            Err(why) => {
                return Err(Error::Config(format!(
                    "upstream {name}: {url:?} is not a URL handnode can use ({why}); it must be \
                     an http:// or https:// URL with a host, e.g. http://127.0.0.1:8931/mcp"
                )))
            }
        }
    }
    Ok(targets)
}

impl Lane {
    fn start(
        name: String,
        url: String,
        target: Target,
        options: &UpstreamOptions,
    ) -> Result<Lane, Error> {
        let shared = Arc::new(Shared {
            client: Client::new(name, url, target, options),
            cache: Mutex::new(Cache::default()),
            refreshed: Condvar::new(),
            refreshing: AtomicBool::new(false),
            stopping: AtomicBool::new(false),
            triggered: AtomicU64::new(0),
        });
        let (refresh_tx, refresh_rx) = crossbeam_channel::unbounded::<Refresh>();
        let (call_tx, call_rx) = crossbeam_channel::bounded::<CallTask>(options.call_queue);
        let mut lane = Lane {
            shared: shared.clone(),
            refresh_tx: Some(refresh_tx),
            call_tx: Some(call_tx),
            threads: Vec::new(),
        };
        let short: String = shared.client.name.chars().take(8).collect();
        let spawn = |thread_name: String, body: Box<dyn FnOnce() + Send>| {
            std::thread::Builder::new()
                .name(thread_name)
                .spawn(body)
                .map_err(|e| Error::io("starting an upstream I/O thread", e))
        };
        let s = shared.clone();
        lane.threads.push(spawn(
            format!("up-{short}-list"),
            Box::new(move || refresh_loop(&s, refresh_rx)),
        )?);
        for i in 0..options.call_threads.max(1) {
            let s = shared.clone();
            let rx = call_rx.clone();
            lane.threads.push(spawn(
                format!("up-{short}-{i}"),
                Box::new(move || call_loop(&s, rx)),
            )?);
        }
        Ok(lane)
    }

    fn trigger_refresh(&self) {
        let shared = &self.shared;
        if shared
            .refreshing
            .compare_exchange(false, true, Ordering::SeqCst, Ordering::SeqCst)
            .is_err()
        {
            return;
        }
        shared.triggered.fetch_add(1, Ordering::SeqCst);
        let sent = self
            .refresh_tx
            .as_ref()
            .is_some_and(|tx| tx.send(Refresh::Background).is_ok());
        if !sent {
            shared.refreshing.store(false, Ordering::SeqCst);
        }
    }
}

fn refresh_loop(shared: &Shared, rx: Receiver<Refresh>) {
    for msg in rx.iter() {
        let background = matches!(msg, Refresh::Background);
        if shared.stopping.load(Ordering::SeqCst) {
            shared.refreshing.store(false, Ordering::SeqCst);
        } else {
            shared.refresh(background);
        }
        if let Refresh::Now(ack) = msg {
            let _ = ack.send(());
        }
    }
}

fn call_loop(shared: &Shared, rx: Receiver<CallTask>) {
    for task in rx.iter() {
        // A panic must not take the thread down; the Completion's Drop reports it.
        let run = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            let CallTask {
                name,
                arguments,
                ctl,
                done,
            } = task;
            if shared.stopping.load(Ordering::SeqCst) {
                done.complete(ToolOutput::tool_error(
                    "handnode is shutting down; the call was not sent to the upstream",
                ));
                return;
            }
            if ctl.is_cancelled() {
                done.complete(ToolOutput::tool_error("cancelled before it started"));
                return;
            }
            // A cancel that lands while the exchange runs changes nothing here: the
            // connection that asked drops the late reply.
            done.complete(shared.call_tool(&name, arguments));
        }));
        if let Err(payload) = run {
            crate::faults::caught(
                crate::faults::Site::Tool,
                "an upstream call",
                payload.as_ref(),
            );
        }
    }
}

/// Log, once each, the tools of `tools` that have no class, remembering at most
/// [`MAX_UNCLASSIFIED_LOGGED`] of them in `seen` (and whether more came in `overflowed`).
fn note_unclassified(
    upstream: &str,
    (seen, overflowed): (&mut Vec<String>, &mut bool),
    tools: &[Value],
) {
    let names = tools
        .iter()
        .filter_map(|t| t.get("name").and_then(Value::as_str));
    for name in names {
        if crate::tools::policy::classify(name).is_some() {
            continue;
        }
        // Remembered as shown: at most MAX_TOOL_NAME_BYTES of a name the upstream chose.
        let mut shown = name.to_string();
        if shown.len() > crate::profiles::MAX_TOOL_NAME_BYTES {
            let mut end = crate::profiles::MAX_TOOL_NAME_BYTES;
            while !shown.is_char_boundary(end) {
                end -= 1;
            }
            shown.truncate(end);
            shown.push('…');
        }
        if seen.contains(&shown) {
            continue;
        }
        if seen.len() >= MAX_UNCLASSIFIED_LOGGED {
            if !*overflowed {
                log::warn!(
                    "upstream '{upstream}' offers more than {MAX_UNCLASSIFIED_LOGGED} tools \
                     without a class; further ones are not logged"
                );
                *overflowed = true;
            }
            return;
        }
        log::warn!(
            "upstream '{upstream}' offers {shown:?}, which has no class: only owner grants \
             see it, and no allow/deny list can name it"
        );
        seen.push(shown);
    }
}

impl Shared {
    /// Fetch the tool list and publish it. A `background` refresh re-arms the trigger in
    /// the same step that publishes, so a lookup that sees the new list can trigger again.
    fn refresh(&self, background: bool) {
        let result = self.client.list_tools();
        let client = &self.client;
        let mut cache = lock(&self.cache);
        match result {
            Ok(tools) => {
                if cache.error.is_some() || cache.generation == 0 {
                    log::info!(
                        "upstream '{}' ({}) answers: {} tools",
                        client.name,
                        client.url,
                        tools.len()
                    );
                }
                let cache = &mut *cache;
                note_unclassified(
                    &client.name,
                    (&mut cache.unclassified, &mut cache.unclassified_overflowed),
                    &tools,
                );
                if cache.tools != tools {
                    cache.changes += 1;
                    cache.tools = tools;
                }
                cache.error = None;
            }
            Err(failure) => {
                let text = failure.to_string();
                if cache.error.is_none() {
                    log::warn!(
                        "upstream '{}' ({}) is unavailable: {text}; its tools are hidden \
                         until it answers again",
                        client.name,
                        client.url
                    );
                }
                if !cache.tools.is_empty() {
                    cache.changes += 1;
                    cache.tools.clear();
                }
                cache.error = Some(text);
            }
        }
        cache.fetched_at = Some(Instant::now());
        cache.generation += 1;
        if background {
            self.refreshing.store(false, Ordering::SeqCst);
        }
        self.refreshed.notify_all();
    }

    fn call_tool(&self, name: &str, arguments: Value) -> ToolOutput {
        let client = &self.client;
        let params = json!({"name": name, "arguments": arguments});
        match client.request("tools/call", params) {
            Ok(result @ Value::Object(_)) => ToolOutput::Result(result),
            Ok(_) => ToolOutput::RpcError {
                code: SERVER_ERROR,
                message: format!(
                    "upstream '{}' sent an invalid reply: the tools/call result is not an object",
                    client.name
                ),
            },
            Err(Failure::Rpc { code, message }) => ToolOutput::RpcError { code, message },
            Err(Failure::Invalid(why)) => ToolOutput::RpcError {
                code: SERVER_ERROR,
                message: format!("upstream '{}' sent an invalid reply: {why}", client.name),
            },
            Err(failure) => {
                // Make the next catalogue lookup re-check the upstream, so a dead one stops
                // being listed without waiting out the TTL.
                lock(&self.cache).fetched_at = None;
                ToolOutput::tool_error(format!(
                    "upstream '{}' ({}) is unreachable: {failure}. Check that the upstream MCP \
                     server is running (scripts/upstream.sh start PORT, or the \
                     handnode-playwright user service) and retry.",
                    client.name, client.url
                ))
            }
        }
    }
}

impl Upstreams {
    /// Read every lane's cache with `read`; a lane whose list is empty or older than the
    /// TTL is asked to refresh in the background, whoever reads it.
    fn read_lanes(&self, mut read: impl FnMut(usize, &Cache)) {
        for (index, lane) in self.lanes.iter().enumerate() {
            let stale = {
                let cache = lock(&lane.shared.cache);
                read(index, &cache);
                cache.tools.is_empty()
                    || match cache.fetched_at {
                        Some(at) => at.elapsed() >= self.cache_ttl,
                        None => true,
                    }
            };
            if stale {
                lane.trigger_refresh();
            }
        }
    }
}

impl UpstreamSource for Upstreams {
    fn tools(&self) -> Vec<(usize, Value)> {
        let mut out = Vec::new();
        self.read_lanes(|index, cache| out.extend(cache.tools.iter().map(|t| (index, t.clone()))));
        out
    }

    fn version(&self) -> Option<u64> {
        // Each lane's count only grows, so their sum moves whenever any list changed.
        let mut sum = 0u64;
        self.read_lanes(|_, cache| sum = sum.wrapping_add(cache.changes));
        Some(sum)
    }

    fn call(
        &self,
        upstream: usize,
        name: &str,
        arguments: Value,
        ctl: Arc<CallCtl>,
        done: Completion,
    ) {
        let Some(lane) = self.lanes.get(upstream) else {
            done.complete(ToolOutput::RpcError {
                code: SERVER_ERROR,
                message: format!("internal error: no upstream #{upstream} is configured"),
            });
            return;
        };
        if ctl.is_cancelled() {
            done.complete(ToolOutput::tool_error("cancelled before it started"));
            return;
        }
        let Some(tx) = lane.call_tx.as_ref() else {
            done.complete(ToolOutput::tool_error("handnode is shutting down"));
            return;
        };
        let task = CallTask {
            name: name.to_string(),
            arguments,
            ctl,
            done,
        };
        match tx.try_send(task) {
            Ok(()) => {}
            Err(TrySendError::Full(task)) => task.done.complete(ToolOutput::RpcError {
                code: SERVER_ERROR,
                message: format!(
                    "server busy: {} calls to upstream '{}' already queued; retry shortly",
                    tx.capacity().unwrap_or(0),
                    lane.shared.client.name
                ),
            }),
            Err(TrySendError::Disconnected(task)) => task
                .done
                .complete(ToolOutput::tool_error("handnode is shutting down")),
        }
    }
}

impl Drop for Upstreams {
    fn drop(&mut self) {
        for lane in &self.lanes {
            lane.shared.stopping.store(true, Ordering::SeqCst);
        }
        for lane in &mut self.lanes {
            lane.refresh_tx.take();
            lane.call_tx.take();
        }
        for lane in &mut self.lanes {
            for thread in lane.threads.drain(..) {
                let _ = thread.join();
            }
            lane.shared.client.end_session();
        }
    }
}

impl std::fmt::Debug for Upstreams {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut list = f.debug_list();
        for lane in &self.lanes {
            list.entry(&(&lane.shared.client.name, &lane.shared.client.url));
        }
        list.finish()
    }
}

/// Why an exchange with an upstream failed.
#[derive(Debug, PartialEq)]
enum Failure {
    /// Refused, reset, timed out, or an HTTP error status: the upstream is not usable.
    Unreachable(String),
    /// HTTP 400/404: the upstream no longer knows our session.
    SessionLost(u16),
    /// The upstream answered something that is not a valid MCP reply.
    Invalid(String),
    /// The upstream answered with a JSON-RPC error.
    Rpc { code: i64, message: String },
}

impl std::fmt::Display for Failure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Failure::Unreachable(why) => f.write_str(why),
            Failure::SessionLost(status) => {
                write!(f, "it answered HTTP {status} (session unknown)")
            }
            Failure::Invalid(why) => write!(f, "invalid reply: {why}"),
            Failure::Rpc { code, message } => write!(f, "JSON-RPC error {code}: {message}"),
        }
    }
}

/// The MCP session with one upstream.
#[derive(Default)]
struct Session {
    ready: bool,
    id: Option<String>,
    protocol: String,
    /// Bumped on every initialise, so a stale 404 does not discard a newer session.
    epoch: u64,
}

/// A Streamable HTTP MCP client for one upstream URL.
struct Client {
    name: String,
    url: String,
    target: Target,
    http: http::Client,
    timeout: Duration,
    max_reply_bytes: usize,
    max_list_pages: usize,
    next_id: AtomicU64,
    /// Held across `initialize`, so concurrent callers wait for one session instead of
    /// each opening their own.
    session: Mutex<Session>,
}

const ACCEPT: &str = "application/json, text/event-stream";

impl Client {
    /// `target` is `url` as parsed by `validate`. Each exchange connects afresh: a POST is
    /// not retried, so a kept-alive connection the server closed while idle would fail a
    /// call. No proxy from the environment (upstreams are local MCP servers) and no
    /// redirects (one would turn our POST into a GET).
    fn new(name: String, url: String, target: Target, options: &UpstreamOptions) -> Self {
        let tls = match (&options.tls, target.tls) {
            (Some(tls), _) => Some(Arc::clone(tls)),
            (None, true) => crate::wire::tls::client_config(None).ok(),
            (None, false) => None,
        };
        Client {
            name,
            url,
            target,
            http: http::Client::new(options.timeout, tls),
            timeout: options.timeout,
            max_reply_bytes: options.max_reply_bytes,
            max_list_pages: options.max_list_pages,
            next_id: AtomicU64::new(1),
            session: Mutex::new(Session::default()),
        }
    }

    fn send(
        &self,
        method: &str,
        headers: &[(&str, &str)],
        body: Option<&[u8]>,
    ) -> Result<http::Response, Failure> {
        let request = Request {
            method,
            target: &self.target,
            headers,
            body,
        };
        self.http.send(&request).map_err(|e| {
            Failure::Unreachable(match e {
                HttpError::Timeout(_) => format!("no reply within {:?}", self.timeout),
                other => other.to_string(),
            })
        })
    }

    fn next_id(&self) -> u64 {
        self.next_id.fetch_add(1, Ordering::SeqCst)
    }

    /// Every tool object of the upstream, following `nextCursor`.
    fn list_tools(&self) -> Result<Vec<Value>, Failure> {
        let mut tools = Vec::new();
        let mut cursor: Option<String> = None;
        for _ in 0..self.max_list_pages {
            let params = match &cursor {
                Some(c) => json!({"cursor": c}),
                None => json!({}),
            };
            let result = self.request("tools/list", params)?;
            let Some(page) = result.get("tools").and_then(Value::as_array) else {
                return Err(Failure::Invalid(
                    "tools/list result has no tools array".into(),
                ));
            };
            for tool in page {
                if tool.get("name").and_then(Value::as_str).is_some() && tool.is_object() {
                    tools.push(tool.clone());
                } else {
                    log::debug!("upstream '{}': skipping a tool without a name", self.name);
                }
            }
            match result.get("nextCursor").and_then(Value::as_str) {
                Some(next) => cursor = Some(next.to_string()),
                None => return Ok(tools),
            }
        }
        Err(Failure::Invalid(format!(
            "tools/list goes on past {} pages",
            self.max_list_pages
        )))
    }

    /// Send one request on the session (initialising it first if needed) and return its
    /// result. A 400/404 means the upstream lost our session: re-initialise and retry once.
    fn request(&self, method: &str, params: Value) -> Result<Value, Failure> {
        let mut retried = false;
        loop {
            let (session_id, protocol, epoch) = self.session()?;
            let id = self.next_id();
            let msg = json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params});
            match self.exchange(&msg, Some(id), session_id.as_deref(), Some(&protocol)) {
                Ok((_, Some(result))) => return Ok(result),
                Ok((_, None)) => unreachable!("exchange with an id returns a result"),
                Err(Failure::SessionLost(status)) if !retried => {
                    log::info!(
                        "upstream '{}' answered HTTP {status} to {method}; opening a new session",
                        self.name
                    );
                    retried = true;
                    self.invalidate(epoch);
                }
                Err(Failure::SessionLost(status)) => {
                    return Err(Failure::Unreachable(format!(
                        "it answered HTTP {status} to {method} even on a fresh session"
                    )))
                }
                Err(other) => return Err(other),
            }
        }
    }

    /// The current session, initialising one if there is none.
    fn session(&self) -> Result<(Option<String>, String, u64), Failure> {
        let mut session = lock(&self.session);
        if !session.ready {
            self.initialize(&mut session)?;
        }
        Ok((session.id.clone(), session.protocol.clone(), session.epoch))
    }

    fn invalidate(&self, epoch: u64) {
        let mut session = lock(&self.session);
        if session.epoch == epoch {
            session.ready = false;
        }
    }

    fn initialize(&self, session: &mut Session) -> Result<(), Failure> {
        session.ready = false;
        session.id = None;
        let id = self.next_id();
        let msg = json!({
            "jsonrpc": "2.0",
            "id": id,
            "method": "initialize",
            "params": {
                "protocolVersion": DEFAULT_PROTOCOL_VERSION,
                "capabilities": {},
                "clientInfo": {"name": "handnode", "version": env!("CARGO_PKG_VERSION")},
            },
        });
        let (session_id, result) = match self.exchange(&msg, Some(id), None, None) {
            Err(Failure::SessionLost(status)) => {
                return Err(Failure::Unreachable(format!(
                    "it refused initialize with HTTP {status}"
                )))
            }
            other => other?,
        };
        let protocol = result
            .as_ref()
            .and_then(|r| r.get("protocolVersion"))
            .and_then(Value::as_str)
            .ok_or_else(|| Failure::Invalid("initialize result has no protocolVersion".into()))?
            .to_string();
        let note = json!({"jsonrpc": "2.0", "method": "notifications/initialized"});
        match self.exchange(&note, None, session_id.as_deref(), Some(&protocol)) {
            Err(Failure::SessionLost(status)) => {
                return Err(Failure::Unreachable(format!(
                    "it refused notifications/initialized with HTTP {status}"
                )))
            }
            other => other?,
        };
        session.id = session_id;
        session.protocol = protocol;
        session.epoch += 1;
        session.ready = true;
        Ok(())
    }

    /// Tell the upstream we are done with the session (best effort, on shutdown).
    fn end_session(&self) {
        let session = lock(&self.session);
        let (true, Some(id)) = (session.ready, session.id.as_deref()) else {
            return;
        };
        let _ = self.send(
            "DELETE",
            &[
                ("Mcp-Session-Id", id),
                ("MCP-Protocol-Version", session.protocol.as_str()),
            ],
            None,
        );
    }

    /// POST one JSON-RPC message. Returns the `Mcp-Session-Id` the upstream sent (if any)
    /// and, when `expect` is an id, the result of the response with that id.
    fn exchange(
        &self,
        msg: &Value,
        expect: Option<u64>,
        session_id: Option<&str>,
        protocol: Option<&str>,
    ) -> Result<(Option<String>, Option<Value>), Failure> {
        let mut headers = vec![("Content-Type", "application/json"), ("Accept", ACCEPT)];
        if let Some(id) = session_id {
            headers.push(("Mcp-Session-Id", id));
        }
        if let Some(p) = protocol {
            headers.push(("MCP-Protocol-Version", p));
        }
        let resp = self.send("POST", &headers, Some(msg.to_string().as_bytes()))?;
        let status = resp.status;
        if status == 400 || status == 404 {
            return Err(Failure::SessionLost(status));
        }
        if !(200..300).contains(&status) {
            return Err(Failure::Unreachable(format!("it answered HTTP {status}")));
        }
        let new_session = match resp.header("mcp-session-id") {
            None => None,
            Some(v) => Some(valid_session_id(v)?),
        };
        let Some(id) = expect else {
            return Ok((new_session, None));
        };
        let content_type = resp
            .header("content-type")
            .and_then(|v| std::str::from_utf8(v).ok())
            .unwrap_or("")
            .split(';')
            .next()
            .unwrap_or("")
            .trim()
            .to_ascii_lowercase();
        let limit = self.max_reply_bytes as u64;
        let body = resp.body(limit);
        let result = match content_type.as_str() {
            "application/json" => read_json_reply(body, id),
            "text/event-stream" => read_sse_reply(BufReader::new(body), id),
            other => Err(ReplyError::Bad(Failure::Invalid(format!(
                "Content-Type {other:?}; expected application/json or text/event-stream"
            )))),
        };
        let result = result.map_err(|e| match e {
            ReplyError::Read(io) => self.read_failure(&io),
            ReplyError::Bad(failure) => failure,
        })?;
        Ok((new_session, Some(result)))
    }

    /// Name the two body-read failures that matter (size cap, timeout) in our own words.
    fn read_failure(&self, e: &std::io::Error) -> Failure {
        if http::is_too_large(e) {
            Failure::Invalid(format!("reply larger than {} bytes", self.max_reply_bytes))
        } else if http::is_timeout(e) {
            Failure::Unreachable(format!("no reply within {:?}", self.timeout))
        } else {
            Failure::Unreachable(format!("reading the reply failed: {e}"))
        }
    }
}

/// Why a reply body could not be turned into a result.
enum ReplyError {
    /// Reading the body failed (size cap, timeout, connection lost).
    Read(std::io::Error),
    Bad(Failure),
}

/// Session ids are visible ASCII (0x21–0x7E) per the transport spec, and bounded.
fn valid_session_id(raw: &[u8]) -> Result<String, Failure> {
    if raw.is_empty()
        || raw.len() > MAX_SESSION_ID_BYTES
        || !raw.iter().all(|b| (0x21..=0x7e).contains(b))
    {
        return Err(Failure::Invalid(format!(
            "Mcp-Session-Id must be 1..={MAX_SESSION_ID_BYTES} visible ASCII characters"
        )));
    }
    Ok(String::from_utf8_lossy(raw).into_owned())
}

fn read_json_reply(mut body: impl Read, id: u64) -> Result<Value, ReplyError> {
    let mut text = Vec::new();
    body.read_to_end(&mut text).map_err(ReplyError::Read)?;
    let msg: Value = serde_json::from_slice(&text).map_err(|e| {
        ReplyError::Bad(Failure::Invalid(format!(
            "the JSON reply does not parse: {e}"
        )))
    })?;
    let found = match msg {
        Value::Array(items) => items.into_iter().find_map(|m| response_for(m, id)),
        single => response_for(single, id),
    };
    found
        .unwrap_or_else(|| {
            Err(Failure::Invalid(format!(
                "the reply holds no response to request {id}"
            )))
        })
        .map_err(ReplyError::Bad)
}

/// Read an SSE stream until the response to `id` arrives. Other messages (notifications,
/// requests from the server, responses to other ids) are skipped.
fn read_sse_reply(mut body: impl BufRead, id: u64) -> Result<Value, ReplyError> {
    let mut data = String::new();
    let mut event = String::new();
    let mut line = Vec::new();
    loop {
        line.clear();
        let n = body
            .read_until(b'\n', &mut line)
            .map_err(ReplyError::Read)?;
        let text = String::from_utf8_lossy(&line);
        let text = text.trim_end_matches(['\n', '\r']);
        if n == 0 || text.is_empty() {
            if !data.is_empty() && (event.is_empty() || event == "message") {
                if let Ok(msg) = serde_json::from_str::<Value>(&data) {
                    if let Some(found) = response_for(msg, id) {
                        return found.map_err(ReplyError::Bad);
                    }
                }
            }
            data.clear();
            event.clear();
            if n == 0 {
                return Err(ReplyError::Bad(Failure::Invalid(format!(
                    "the event stream ended without a response to request {id}"
                ))));
            }
            continue;
        }
        if text.starts_with(':') {
            continue;
        }
        let (field, value) = match text.split_once(':') {
            Some((f, v)) => (f, v.strip_prefix(' ').unwrap_or(v)),
            None => (text, ""),
        };
        match field {
            "data" => {
                if !data.is_empty() {
                    data.push('\n');
                }
                data.push_str(value);
            }
            "event" => event = value.to_string(),
            _ => {}
        }
    }
}

/// If `msg` is the JSON-RPC response to `id`, its result or error.
fn response_for(msg: Value, id: u64) -> Option<Result<Value, Failure>> {
    let Value::Object(mut obj) = msg else {
        return None;
    };
    if obj.contains_key("method") || obj.get("id").and_then(Value::as_u64) != Some(id) {
        return None;
    }
    if let Some(error) = obj.remove("error") {
        let code = error
            .get("code")
            .and_then(Value::as_i64)
            .unwrap_or(SERVER_ERROR);
        let message = error
            .get("message")
            .and_then(Value::as_str)
            .unwrap_or("the upstream reported an error without a message")
            .to_string();
        return Some(Err(Failure::Rpc { code, message }));
    }
    Some(
        obj.remove("result")
            .ok_or_else(|| Failure::Invalid(format!("response {id} has neither result nor error"))),
    )
}

#[cfg(test)]
mod tests;
