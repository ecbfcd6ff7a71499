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
use crate::pool::{Completion, JobCtl};
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
    ctl: Arc<JobCtl>,
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
            crate::containment::caught(
                crate::containment::Site::Tool,
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
        ctl: Arc<JobCtl>,
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
mod tests {
    use super::*;
    use crate::profiles::Profile;
    use crate::tools::policy::ToolPolicy;
    use crate::tools::ConnCatalog;
    use crate::wire::mcp::{Catalog, Resolution, Route, INVALID_PARAMS};
    use std::sync::atomic::AtomicUsize;

    /// Longest any single blocking step of a test may take before it counts as a hang.
    const WATCHDOG: Duration = Duration::from_secs(10);
    /// Stub HTTP handler threads: enough for a held call, a held list and a refresh.
    const STUB_THREADS: usize = 6;

    /// A scripted Streamable HTTP MCP server on 127.0.0.1.
    #[derive(Default)]
    struct StubState {
        sse: AtomicBool,
        /// `(status, count)`: the next `count` session requests (not notifications)
        /// answer `status` and the session is forgotten, as a restarted upstream would.
        lose_session: Mutex<(u16, usize)>,
        session: Mutex<Option<String>>,
        sessions_issued: AtomicU64,
        /// Every request in arrival order: the JSON-RPC method (`tools/call:NAME` for
        /// calls) or `DELETE`.
        log: Mutex<Vec<String>>,
        /// Transport rules the client broke.
        violations: Mutex<Vec<String>>,
        tools: Mutex<Vec<Value>>,
        /// `tools/list` is split across this many pages (at least 1).
        pages: AtomicUsize,
        /// `tools/list` and the `slow` tool wait for a message here before answering.
        hold_list: AtomicBool,
        gate: Mutex<Option<Receiver<()>>>,
        started: Mutex<Option<Sender<String>>>,
    }

    impl StubState {
        fn new(tools: &[&str]) -> Arc<Self> {
            let state = StubState::default();
            *lock(&state.tools) = tools
                .iter()
                .map(|n| json!({"name": n, "description": format!("stub {n}"), "inputSchema": {"type": "object"}}))
                .collect();
            state.pages.store(1, Ordering::SeqCst);
            Arc::new(state)
        }

        /// Channels to hold the `slow` tool / a held list, and to hear that one started.
        fn gates(&self) -> (Sender<()>, Receiver<String>) {
            let (gate_tx, gate_rx) = crossbeam_channel::unbounded();
            let (started_tx, started_rx) = crossbeam_channel::unbounded();
            *lock(&self.gate) = Some(gate_rx);
            *lock(&self.started) = Some(started_tx);
            (gate_tx, started_rx)
        }

        fn log(&self) -> Vec<String> {
            lock(&self.log).clone()
        }

        fn count(&self, what: &str) -> usize {
            self.log().iter().filter(|m| *m == what).count()
        }

        fn assert_clean(&self) {
            assert_eq!(*lock(&self.violations), Vec::<String>::new());
        }

        fn hold(&self, what: &str) {
            if let Some(tx) = lock(&self.started).as_ref() {
                let _ = tx.send(what.to_string());
            }
            let gate = lock(&self.gate).clone();
            if let Some(gate) = gate {
                let _ = gate.recv_timeout(WATCHDOG);
            }
        }
    }

    struct Stub {
        server: Arc<tiny_http::Server>,
        threads: Vec<JoinHandle<()>>,
        port: u16,
    }

    impl Stub {
        fn start(state: &Arc<StubState>) -> Stub {
            Self::on_port(state, 0)
        }

        /// Bind `port` (0 = any). Rebinding a port the previous stub just released can
        /// fail for a moment while its accept thread winds down, so retry until the
        /// watchdog.
        fn on_port(state: &Arc<StubState>, port: u16) -> Stub {
            let deadline = Instant::now() + WATCHDOG;
            let server = loop {
                match tiny_http::Server::http(("127.0.0.1", port)) {
                    Ok(s) => break Arc::new(s),
                    Err(e) if Instant::now() > deadline => panic!("stub bind: {e}"),
                    Err(_) => std::thread::sleep(Duration::from_millis(20)),
                }
            };
            let port = server.server_addr().to_ip().expect("tcp").port();
            let threads = (0..STUB_THREADS)
                .map(|_| {
                    let server = server.clone();
                    let state = state.clone();
                    std::thread::spawn(move || {
                        while let Ok(rq) = server.recv() {
                            handle(&state, rq);
                        }
                    })
                })
                .collect();
            Stub {
                server,
                threads,
                port,
            }
        }

        fn url(&self) -> String {
            format!("http://127.0.0.1:{}/mcp", self.port)
        }
    }

    impl Drop for Stub {
        fn drop(&mut self) {
            for _ in 0..self.threads.len() {
                self.server.unblock();
            }
            for t in self.threads.drain(..) {
                let _ = t.join();
            }
        }
    }

    fn header(rq: &tiny_http::Request, name: &'static str) -> Option<String> {
        rq.headers()
            .iter()
            .find(|h| h.field.equiv(name))
            .map(|h| h.value.as_str().to_string())
    }

    fn respond(state: &StubState, rq: tiny_http::Request, status: u16, body: &Value) {
        respond_raw(state, rq, status, body, None)
    }

    fn respond_raw(
        state: &StubState,
        rq: tiny_http::Request,
        status: u16,
        body: &Value,
        session: Option<&str>,
    ) {
        let sse = state.sse.load(Ordering::SeqCst);
        let (ctype, text) = if sse {
            // A comment, an unrelated notification, then our response split over several
            // data lines: the client must skip the first two and join the lines.
            let mut text = String::from(": keep-alive\n\nevent: message\ndata: ");
            text.push_str(r#"{"jsonrpc":"2.0","method":"notifications/message","params":{}}"#);
            text.push_str("\n\n");
            for line in serde_json::to_string_pretty(body).unwrap().lines() {
                text.push_str("data: ");
                text.push_str(line);
                text.push('\n');
            }
            text.push('\n');
            ("text/event-stream", text)
        } else {
            ("application/json", body.to_string())
        };
        send(rq, status, ctype, text, session);
    }

    fn send(rq: tiny_http::Request, status: u16, ctype: &str, body: String, session: Option<&str>) {
        let mut resp = tiny_http::Response::from_string(body)
            .with_status_code(status)
            .with_header(tiny_http::Header::from_bytes("Content-Type", ctype).unwrap());
        if let Some(s) = session {
            resp = resp.with_header(tiny_http::Header::from_bytes("Mcp-Session-Id", s).unwrap());
        }
        let _ = rq.respond(resp);
    }

    fn handle(state: &StubState, mut rq: tiny_http::Request) {
        let violation = |v: String| lock(&state.violations).push(v);
        let sid = header(&rq, "Mcp-Session-Id");
        if *rq.method() == tiny_http::Method::Delete {
            lock(&state.log).push("DELETE".into());
            if sid.is_none() || sid != *lock(&state.session) {
                violation(format!("DELETE with session {sid:?}"));
            }
            let _ = rq.respond(tiny_http::Response::empty(200));
            return;
        }
        let mut body = String::new();
        let _ = rq.as_reader().read_to_string(&mut body);
        let Ok(msg) = serde_json::from_str::<Value>(&body) else {
            violation(format!("unparsable body {body:?}"));
            return send(rq, 400, "text/plain", "bad json".into(), None);
        };
        let accept = header(&rq, "Accept").unwrap_or_default();
        if !(accept.contains("application/json") && accept.contains("text/event-stream")) {
            violation(format!("Accept {accept:?}"));
        }
        if header(&rq, "Content-Type").as_deref() != Some("application/json") {
            violation("Content-Type".into());
        }
        let method = msg["method"].as_str().unwrap_or("").to_string();
        let id = msg["id"].clone();
        let tool = msg["params"]["name"].as_str().unwrap_or("").to_string();
        lock(&state.log).push(if method == "tools/call" {
            format!("tools/call:{tool}")
        } else {
            method.clone()
        });
        if method == "initialize" {
            if sid.is_some() {
                violation("initialize carried a session id".into());
            }
            let n = state.sessions_issued.fetch_add(1, Ordering::SeqCst) + 1;
            let session = format!("sess-{n}");
            *lock(&state.session) = Some(session.clone());
            let result = json!({
                "protocolVersion": "2025-06-18",
                "capabilities": {"tools": {}},
                "serverInfo": {"name": "stub", "version": "0"},
            });
            let reply = json!({"jsonrpc": "2.0", "id": id, "result": result});
            return respond_raw(state, rq, 200, &reply, Some(&session));
        }
        if method != "notifications/initialized" {
            let mut lose = lock(&state.lose_session);
            if lose.1 > 0 {
                lose.1 -= 1;
                *lock(&state.session) = None;
                let status = lose.0;
                drop(lose);
                return send(rq, status, "text/plain", "session gone".into(), None);
            }
        }
        if sid.is_none() || sid != *lock(&state.session) {
            violation(format!("{method} with session {sid:?}"));
            return send(rq, 404, "text/plain", "unknown session".into(), None);
        }
        if header(&rq, "MCP-Protocol-Version").as_deref() != Some("2025-06-18") {
            violation(format!("{method} without MCP-Protocol-Version"));
        }
        let result = match method.as_str() {
            "notifications/initialized" => {
                let _ = rq.respond(tiny_http::Response::empty(202));
                return;
            }
            "tools/list" => {
                if state.hold_list.load(Ordering::SeqCst) {
                    state.hold("tools/list");
                }
                let tools = lock(&state.tools).clone();
                let pages = state.pages.load(Ordering::SeqCst).max(1);
                let page: usize = msg["params"]["cursor"]
                    .as_str()
                    .and_then(|c| c.strip_prefix("page-"))
                    .and_then(|n| n.parse().ok())
                    .unwrap_or(0);
                let per = tools.len().div_ceil(pages).max(1);
                let chunk: Vec<Value> = tools.iter().skip(page * per).take(per).cloned().collect();
                let mut result = json!({"tools": chunk});
                if page + 1 < pages {
                    result["nextCursor"] = json!(format!("page-{}", page + 1));
                }
                result
            }
            "tools/call" => {
                let args = msg["params"]["arguments"].clone();
                match tool.as_str() {
                    "echo" => echo_result(&args),
                    "slow" => {
                        state.hold("slow");
                        json!({"content": [{"type": "text", "text": "slow done"}]})
                    }
                    "fail" => {
                        let reply = json!({"jsonrpc": "2.0", "id": id,
                            "error": {"code": INVALID_PARAMS, "message": "bad arguments for fail"}});
                        return respond(state, rq, 200, &reply);
                    }
                    "pad" => {
                        // A JSON reply of exactly `len` bytes.
                        let len = args["len"].as_u64().unwrap() as usize;
                        let make = |pad: usize| {
                            json!({"jsonrpc": "2.0", "id": id, "result": {"content": [
                                {"type": "text", "text": "x".repeat(pad)}]}})
                            .to_string()
                        };
                        let base = make(0).len();
                        let text = make(len - base);
                        assert_eq!(text.len(), len);
                        return send(rq, 200, "application/json", text, None);
                    }
                    "garbage" => {
                        return send(rq, 200, "application/json", "this is not json".into(), None)
                    }
                    "plain" => return send(rq, 200, "text/plain", "hello".into(), None),
                    "silent_stream" => {
                        let text = "event: message\ndata: {\"jsonrpc\":\"2.0\",\"method\":\"notifications/progress\"}\n\n";
                        return send(rq, 200, "text/event-stream", text.into(), None);
                    }
                    "http500" => return send(rq, 500, "text/plain", "oops".into(), None),
                    other => {
                        let reply = json!({"jsonrpc": "2.0", "id": id,
                            "error": {"code": INVALID_PARAMS, "message": format!("no tool {other}")}});
                        return respond(state, rq, 200, &reply);
                    }
                }
            }
            other => {
                violation(format!("unexpected method {other}"));
                json!({})
            }
        };
        respond(
            state,
            rq,
            200,
            &json!({"jsonrpc": "2.0", "id": id, "result": result}),
        );
    }

    fn echo_result(args: &Value) -> Value {
        json!({
            "content": [
                {"type": "text", "text": args.to_string()},
                {"type": "image", "data": "iVBORw0KGgo=", "mimeType": "image/png"},
            ],
            "structuredContent": {"args": args},
            "_meta": {"stub": true},
        })
    }

    fn options() -> UpstreamOptions {
        UpstreamOptions {
            timeout: Duration::from_secs(5),
            cache_ttl: Duration::from_secs(3600),
            call_threads: 2,
            call_queue: 8,
            max_reply_bytes: 1 << 20,
            max_list_pages: 4,
            tls: None,
        }
    }

    fn ups(stubs: &[&Stub], options: UpstreamOptions) -> Upstreams {
        let list = stubs
            .iter()
            .enumerate()
            .map(|(i, s)| (format!("up{i}"), s.url()))
            .collect();
        Upstreams::with_options(list, options).unwrap()
    }

    /// Start a call; the receiver gets its output.
    fn start_call(up: &Upstreams, index: usize, name: &str, args: Value) -> Receiver<ToolOutput> {
        start_call_with(up, index, name, args, JobCtl::new())
    }

    fn start_call_with(
        up: &Upstreams,
        index: usize,
        name: &str,
        args: Value,
        ctl: Arc<JobCtl>,
    ) -> Receiver<ToolOutput> {
        let (tx, rx) = crossbeam_channel::bounded(1);
        up.call(
            index,
            name,
            args,
            ctl,
            Completion::new(move |out| {
                let _ = tx.send(out);
            }),
        );
        rx
    }

    fn call(up: &Upstreams, index: usize, name: &str, args: Value) -> ToolOutput {
        start_call(up, index, name, args)
            .recv_timeout(WATCHDOG)
            .expect("call completed")
    }

    fn names(up: &Upstreams) -> Vec<(usize, String)> {
        up.tools()
            .into_iter()
            .map(|(i, t)| (i, t["name"].as_str().unwrap().to_string()))
            .collect()
    }

    fn error_text(out: &ToolOutput) -> String {
        match out {
            ToolOutput::Result(v) => {
                assert_eq!(v["isError"], true, "{v}");
                v["content"][0]["text"].as_str().unwrap().to_string()
            }
            other => panic!("expected a tool error, got {other:?}"),
        }
    }

    #[test]
    fn lists_tools_of_json_and_sse_upstreams_tagged_by_index() {
        let a = StubState::new(&["alpha", "beta"]);
        let b = StubState::new(&["gamma"]);
        b.sse.store(true, Ordering::SeqCst);
        let (sa, sb) = (Stub::start(&a), Stub::start(&b));
        let up = ups(&[&sa, &sb], options());
        assert_eq!(up.names(), vec!["up0", "up1"]);
        up.refresh_now();
        assert_eq!(
            names(&up),
            vec![
                (0, "alpha".to_string()),
                (0, "beta".to_string()),
                (1, "gamma".to_string())
            ]
        );
        for state in [&a, &b] {
            assert_eq!(
                state.log(),
                vec!["initialize", "notifications/initialized", "tools/list"]
            );
            state.assert_clean();
        }
        let status = up.status();
        assert_eq!(status[0].tools, 2);
        assert!(status[1].checked && status[1].error.is_none());
    }

    #[test]
    fn the_session_is_initialised_once_and_sent_on_every_request() {
        let s = StubState::new(&["echo"]);
        let stub = Stub::start(&s);
        let up = ups(&[&stub], options());
        up.refresh_now();
        up.refresh_now();
        assert!(matches!(
            call(&up, 0, "echo", json!({})),
            ToolOutput::Result(_)
        ));
        assert_eq!(s.sessions_issued.load(Ordering::SeqCst), 1);
        assert_eq!(
            s.log(),
            vec![
                "initialize",
                "notifications/initialized",
                "tools/list",
                "tools/list",
                "tools/call:echo"
            ]
        );
        s.assert_clean();
    }

    #[test]
    fn a_lost_session_is_reinitialised_once_and_the_request_retried() {
        for status in [404, 400] {
            for sse in [false, true] {
                let s = StubState::new(&["echo"]);
                s.sse.store(sse, Ordering::SeqCst);
                let stub = Stub::start(&s);
                let up = ups(&[&stub], options());
                up.refresh_now();
                *lock(&s.lose_session) = (status, 1);
                let out = call(&up, 0, "echo", json!({"n": 1}));
                assert_eq!(out, ToolOutput::Result(echo_result(&json!({"n": 1}))));
                assert_eq!(s.sessions_issued.load(Ordering::SeqCst), 2);
                assert_eq!(
                    s.log()[3..],
                    [
                        "tools/call:echo",
                        "initialize",
                        "notifications/initialized",
                        "tools/call:echo"
                    ]
                );
                s.assert_clean();
            }
        }
    }

    #[test]
    fn a_session_lost_again_after_reinitialising_is_an_error_not_a_loop() {
        let s = StubState::new(&["echo"]);
        let stub = Stub::start(&s);
        let up = ups(&[&stub], options());
        up.refresh_now();
        *lock(&s.lose_session) = (404, 100);
        let text = error_text(&call(&up, 0, "echo", json!({})));
        assert!(
            text.contains("HTTP 404") && text.contains("fresh session"),
            "{text}"
        );
        assert_eq!(s.count("initialize"), 2);
        assert_eq!(s.count("tools/call:echo"), 2);
    }

    #[test]
    fn results_pass_through_untouched_in_json_and_sse() {
        for sse in [false, true] {
            let s = StubState::new(&["echo"]);
            s.sse.store(sse, Ordering::SeqCst);
            let stub = Stub::start(&s);
            let up = ups(&[&stub], options());
            let args = json!({"text": "héllo\n\"quoted\"", "n": [1, 2.5, null]});
            let out = call(&up, 0, "echo", args.clone());
            assert_eq!(out, ToolOutput::Result(echo_result(&args)), "sse={sse}");
            s.assert_clean();
        }
    }

    #[test]
    fn an_upstream_jsonrpc_error_is_passed_on_as_one() {
        let s = StubState::new(&[]);
        let stub = Stub::start(&s);
        let up = ups(&[&stub], options());
        assert_eq!(
            call(&up, 0, "fail", json!({})),
            ToolOutput::RpcError {
                code: INVALID_PARAMS,
                message: "bad arguments for fail".into()
            }
        );
    }

    #[test]
    fn invalid_replies_are_server_errors_that_say_why() {
        let s = StubState::new(&[]);
        let stub = Stub::start(&s);
        let up = ups(&[&stub], options());
        for (tool, expect) in [
            ("garbage", "does not parse"),
            ("plain", "Content-Type \"text/plain\""),
            ("silent_stream", "ended without a response"),
        ] {
            match call(&up, 0, tool, json!({})) {
                ToolOutput::RpcError { code, message } => {
                    assert_eq!(code, SERVER_ERROR);
                    assert!(message.contains(expect), "{tool}: {message}");
                    assert!(message.contains("upstream 'up0'"), "{message}");
                }
                other => panic!("{tool}: {other:?}"),
            }
        }
        let text = error_text(&call(&up, 0, "http500", json!({})));
        assert!(text.contains("HTTP 500"), "{text}");
    }

    #[test]
    fn a_down_upstream_lists_nothing_leaves_local_tools_and_comes_back() {
        let s = StubState::new(&["browser_navigate", "browser_snapshot"]);
        let stub = Stub::start(&s);
        let port = stub.port;
        let mut opts = options();
        opts.timeout = Duration::from_secs(2);
        let up = ups(&[&stub], opts);
        up.refresh_now();
        assert_eq!(up.tools().len(), 2);
        let desktop = ToolPolicy::fixed(Profile::Desktop).unwrap();
        let catalog = ConnCatalog {
            grant: None,
            upstream: Some(&up),
            policy: &desktop,
            browsers: None,
        };
        let local = crate::tools::names(Profile::Desktop).len();
        assert_eq!(catalog.list().len(), local + 2);
        // A connection's cached tools/list is kept while the key stays: a refresh that
        // brings the same list keeps it, one that changes the list moves it.
        let up_key = catalog.list_key();
        assert!(up_key.is_some());
        up.refresh_now();
        assert_eq!(catalog.list_key(), up_key, "the same list again");

        drop(stub);
        up.refresh_now();
        assert!(up.tools().is_empty());
        let down_key = catalog.list_key();
        assert_ne!(down_key, up_key, "the upstream's tools went away");
        let listed: Vec<Value> = catalog.list();
        let listed: Vec<&str> = listed.iter().map(|t| t["name"].as_str().unwrap()).collect();
        assert_eq!(listed, crate::tools::names(Profile::Desktop));
        assert_eq!(catalog.resolve("browser_navigate"), Resolution::Unknown);
        assert!(up.status()[0].error.is_some());
        let text = error_text(&call(&up, 0, "browser_navigate", json!({})));
        assert!(
            text.contains("'up0'") && text.contains("unreachable"),
            "{text}"
        );

        // Back up on the same port, restarted so it no longer knows our session. The next lookup finds the cache empty, refreshes in
        // the background, and the tools return.
        *lock(&s.session) = None;
        let _stub = Stub::on_port(&s, port);
        let before = up.refresh_generation(0);
        assert!(up.tools().is_empty());
        assert!(up.wait_refreshed(0, before, WATCHDOG));
        assert_eq!(up.tools().len(), 2);
        assert!(
            ![up_key, down_key].contains(&catalog.list_key()),
            "they came back"
        );
        assert_eq!(
            catalog.resolve("browser_navigate"),
            Resolution::Visible(Route::Upstream(0))
        );
        // The restarted stub did not know the old session: one 404, then a fresh one.
        assert!(s.sessions_issued.load(Ordering::SeqCst) >= 2);
    }

    #[test]
    fn a_slow_call_blocks_neither_tools_nor_the_refresh() {
        let s = StubState::new(&["slow", "echo"]);
        let (gate, started) = s.gates();
        let stub = Stub::start(&s);
        let mut opts = options();
        opts.cache_ttl = Duration::ZERO;
        let up = Arc::new(ups(&[&stub], opts));
        up.refresh_now();
        let slow = start_call(&up, 0, "slow", json!({}));
        assert_eq!(started.recv_timeout(WATCHDOG).unwrap(), "slow");

        // tools() on another thread answers while the slow call is held...
        let before = up.refresh_generation(0);
        let (tx, rx) = crossbeam_channel::bounded(1);
        let up2 = up.clone();
        std::thread::spawn(move || {
            let _ = tx.send(up2.tools().len());
        });
        assert_eq!(rx.recv_timeout(WATCHDOG).unwrap(), 2);
        // ...and the refresh it triggered (TTL 0) completes on the upstream's own thread.
        assert!(up.wait_refreshed(0, before, WATCHDOG));
        assert!(slow.try_recv().is_err(), "the slow call is still held");
        assert!(matches!(
            call(&up, 0, "echo", json!({})),
            ToolOutput::Result(_)
        ));

        gate.send(()).unwrap();
        let out = slow.recv_timeout(WATCHDOG).unwrap();
        assert_eq!(out, ToolOutput::text("slow done"));
    }

    #[test]
    fn the_cache_is_reused_within_its_ttl_and_one_refresh_runs_at_a_time() {
        let s = StubState::new(&["echo"]);
        let stub = Stub::start(&s);
        let up = ups(&[&stub], options());
        up.refresh_now();
        for _ in 0..20 {
            assert_eq!(up.tools().len(), 1);
        }
        assert_eq!(up.lanes[0].shared.triggered.load(Ordering::SeqCst), 0);
        assert_eq!(s.count("tools/list"), 1);

        let s = StubState::new(&["echo"]);
        let (gate, started) = s.gates();
        s.hold_list.store(true, Ordering::SeqCst);
        let stub = Stub::start(&s);
        let mut opts = options();
        opts.cache_ttl = Duration::ZERO;
        let up = ups(&[&stub], opts);
        assert!(up.tools().is_empty());
        assert_eq!(started.recv_timeout(WATCHDOG).unwrap(), "tools/list");
        for _ in 0..5 {
            assert!(up.tools().is_empty());
        }
        let triggered = &up.lanes[0].shared.triggered;
        assert_eq!(triggered.load(Ordering::SeqCst), 1, "one refresh in flight");
        gate.send(()).unwrap();
        assert!(up.wait_refreshed(0, 0, WATCHDOG));
        s.hold_list.store(false, Ordering::SeqCst);
        let before = up.refresh_generation(0);
        assert_eq!(up.tools().len(), 1); // stale at TTL 0: triggers again
        assert!(up.wait_refreshed(0, before, WATCHDOG));
        assert_eq!(triggered.load(Ordering::SeqCst), 2);
    }

    #[test]
    fn a_request_past_the_timeout_reports_the_upstream_unreachable() {
        let s = StubState::new(&["slow"]);
        let (gate, started) = s.gates();
        let stub = Stub::start(&s);
        let mut opts = options();
        opts.timeout = Duration::from_millis(300);
        let up = ups(&[&stub], opts);
        let rx = start_call(&up, 0, "slow", json!({}));
        assert_eq!(started.recv_timeout(WATCHDOG).unwrap(), "slow");
        let text = error_text(&rx.recv_timeout(WATCHDOG).unwrap());
        assert!(
            text.contains("unreachable") && text.contains("no reply within"),
            "{text}"
        );
        gate.send(()).unwrap();
    }

    #[test]
    fn reply_size_is_capped_at_the_bound() {
        let s = StubState::new(&[]);
        let stub = Stub::start(&s);
        let mut opts = options();
        opts.max_reply_bytes = 4096;
        let up = ups(&[&stub], opts);
        assert!(matches!(
            call(&up, 0, "pad", json!({"len": 4096})),
            ToolOutput::Result(_)
        ));
        match call(&up, 0, "pad", json!({"len": 4097})) {
            ToolOutput::RpcError { code, message } => {
                assert_eq!(code, SERVER_ERROR);
                assert!(message.contains("larger than 4096 bytes"), "{message}");
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn tool_list_pages_are_followed_up_to_the_bound() {
        let tools = ["a", "b", "c", "d", "e", "f"];
        let s = StubState::new(&tools);
        let stub = Stub::start(&s);
        let mut opts = options();
        opts.max_list_pages = 3;
        let up = ups(&[&stub], opts);
        s.pages.store(3, Ordering::SeqCst);
        up.refresh_now();
        let got: Vec<String> = names(&up).into_iter().map(|(_, n)| n).collect();
        assert_eq!(got, tools);
        s.pages.store(4, Ordering::SeqCst);
        up.refresh_now();
        assert!(up.tools().is_empty());
        let err = up.status()[0].error.clone().unwrap();
        assert!(err.contains("past 3 pages"), "{err}");
    }

    #[test]
    fn calls_past_the_queue_bound_are_refused_as_busy() {
        let s = StubState::new(&["slow", "echo"]);
        let (gate, started) = s.gates();
        let stub = Stub::start(&s);
        let mut opts = options();
        opts.call_threads = 1;
        opts.call_queue = 1;
        let up = ups(&[&stub], opts);
        let slow = start_call(&up, 0, "slow", json!({}));
        assert_eq!(started.recv_timeout(WATCHDOG).unwrap(), "slow");
        let queued = start_call(&up, 0, "echo", json!({}));
        match call(&up, 0, "echo", json!({})) {
            ToolOutput::RpcError { code, message } => {
                assert_eq!(code, SERVER_ERROR);
                assert!(
                    message.contains("busy") && message.contains("'up0'"),
                    "{message}"
                );
            }
            other => panic!("{other:?}"),
        }
        gate.send(()).unwrap();
        assert_eq!(
            slow.recv_timeout(WATCHDOG).unwrap(),
            ToolOutput::text("slow done")
        );
        assert!(matches!(
            queued.recv_timeout(WATCHDOG).unwrap(),
            ToolOutput::Result(_)
        ));
    }

    #[test]
    fn a_cancelled_call_never_reaches_the_upstream() {
        let s = StubState::new(&["echo"]);
        let stub = Stub::start(&s);
        let up = ups(&[&stub], options());
        let ctl = JobCtl::new();
        ctl.cancel();
        let out = start_call_with(&up, 0, "echo", json!({}), ctl)
            .recv_timeout(WATCHDOG)
            .unwrap();
        assert!(error_text(&out).contains("cancelled"));
        assert_eq!(s.count("tools/call:echo"), 0);
    }

    #[test]
    fn a_call_to_an_unknown_upstream_index_is_an_internal_error() {
        let up = Upstreams::with_options(Vec::new(), options()).unwrap();
        assert!(up.tools().is_empty());
        up.refresh_now();
        match call(&up, 3, "x", json!({})) {
            ToolOutput::RpcError { code, message } => {
                assert_eq!(code, SERVER_ERROR);
                assert!(message.contains("#3"), "{message}");
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn drop_stops_the_threads_and_ends_the_session() {
        let s = StubState::new(&["echo"]);
        let stub = Stub::start(&s);
        let up = ups(&[&stub], options());
        up.refresh_now();
        let (tx, rx) = crossbeam_channel::bounded(1);
        std::thread::spawn(move || {
            drop(up);
            let _ = tx.send(());
        });
        rx.recv_timeout(WATCHDOG).expect("drop returned");
        assert_eq!(s.log().last().map(String::as_str), Some("DELETE"));
        s.assert_clean();
    }

    #[test]
    fn a_tool_without_a_class_is_noted_once_and_the_notes_are_bounded() {
        let s = StubState::new(&["browser_navigate", "browser_brand_new", "bash"]);
        let stub = Stub::start(&s);
        let up = ups(&[&stub], options());
        up.refresh_now();
        up.refresh_now();
        assert_eq!(up.unclassified(0), ["browser_brand_new"]);
        assert!(up.unclassified(7).is_empty());

        let mut seen = Vec::new();
        let mut overflowed = false;
        let many: Vec<Value> = (0..=MAX_UNCLASSIFIED_LOGGED)
            .map(|i| json!({"name": format!("browser_new_{i}")}))
            .collect();
        for _ in 0..2 {
            note_unclassified("u", (&mut seen, &mut overflowed), &many);
        }
        assert_eq!(seen.len(), MAX_UNCLASSIFIED_LOGGED);
        assert!(overflowed);
        assert_eq!(seen[0], "browser_new_0");
        // A name past the bound is remembered cut to it, once.
        let (mut seen, mut overflowed) = (Vec::new(), false);
        let huge = [json!({"name": "x".repeat(1 << 20)})];
        for _ in 0..2 {
            note_unclassified("u", (&mut seen, &mut overflowed), &huge);
        }
        assert_eq!(seen.len(), 1);
        assert_eq!(
            seen[0],
            format!("{}…", "x".repeat(crate::profiles::MAX_TOOL_NAME_BYTES))
        );
    }

    #[test]
    fn the_catalogue_routes_filters_and_lets_local_names_win() {
        let s = StubState::new(&["browser_navigate", "browser_evaluate", "bash"]);
        let stub = Stub::start(&s);
        let up = ups(&[&stub], options());
        up.refresh_now();
        let policies: Vec<ToolPolicy> = [Profile::Owner, Profile::Desktop, Profile::Observe]
            .into_iter()
            .map(|p| ToolPolicy::fixed(p).unwrap())
            .collect();
        let catalog = |i: usize| ConnCatalog {
            grant: None,
            upstream: Some(&up),
            policy: &policies[i],
            browsers: None,
        };
        let owner: Vec<Value> = catalog(0).list();
        let owner: Vec<&str> = owner.iter().map(|t| t["name"].as_str().unwrap()).collect();
        assert_eq!(owner.iter().filter(|n| **n == "bash").count(), 1);
        assert_eq!(
            &owner[owner.len() - 2..],
            ["browser_navigate", "browser_evaluate"]
        );
        let d = catalog(1);
        assert_eq!(
            d.resolve("browser_navigate"),
            Resolution::Visible(Route::Upstream(0))
        );
        assert_eq!(d.resolve("browser_evaluate"), Resolution::Hidden);
        assert_eq!(d.resolve("bash"), Resolution::Visible(Route::Local));
        assert_eq!(catalog(2).resolve("browser_navigate"), Resolution::Hidden);
        assert!(!catalog(2)
            .list()
            .iter()
            .any(|t| t["name"].as_str().unwrap().starts_with("browser_")));
    }

    #[test]
    fn bad_upstream_settings_are_refused_with_what_to_fix() {
        let cases = [
            (vec![("", "http://127.0.0.1:1/mcp")], "empty name"),
            (
                vec![
                    ("a", "http://127.0.0.1:1/mcp"),
                    ("a", "http://127.0.0.1:2/mcp"),
                ],
                "given twice",
            ),
            (vec![("a", "ftp://127.0.0.1/mcp")], "http:// or https://"),
            (vec![("a", "/mcp")], "http:// or https://"),
            (vec![("a", "not a url")], "is not a URL"),
        ];
        for (list, expect) in cases {
            let list: Vec<(String, String)> = list
                .into_iter()
                .map(|(n, u)| (n.to_string(), u.to_string()))
                .collect();
            match Upstreams::with_options(list.clone(), options()) {
                Err(Error::Config(msg)) => assert!(msg.contains(expect), "{list:?}: {msg}"),
                other => panic!("{list:?}: {other:?}"),
            }
        }
        let ok = Upstreams::new(
            vec![("browser".into(), "http://127.0.0.1:8931/mcp".into())],
            &Timing::default(),
            crate::wire::tls::client_config(None).unwrap(),
        )
        .unwrap();
        assert_eq!(
            format!("{ok:?}"),
            r#"[("browser", "http://127.0.0.1:8931/mcp")]"#
        );
    }

    #[test]
    fn sse_parsing_skips_what_is_not_our_response() {
        let stream = "retry: 100\r\n: comment\r\n\r\nevent: ping\ndata: {\"jsonrpc\":\"2.0\",\"id\":7,\"result\":1}\n\n\
                      data: {\"jsonrpc\":\"2.0\",\"id\":6,\"result\":\"other\"}\n\n\
                      data: {\"jsonrpc\":\"2.0\",\"method\":\"roots/list\",\"id\":7}\n\n\
                      data: not json\n\n\
                      event: message\ndata: {\"jsonrpc\":\"2.0\",\ndata:\"id\":7,\"result\":{\"ok\":true}}\n\n";
        let got = read_sse_reply(stream.as_bytes(), 7).ok().unwrap();
        assert_eq!(got, json!({"ok": true}));
        // A final event without its blank line still counts at end of stream.
        let got = read_sse_reply("data: {\"id\":1,\"result\":2}".as_bytes(), 1).ok();
        assert_eq!(got, Some(json!(2)));
        match read_sse_reply("data: {\"id\":2,\"result\":2}\n\n".as_bytes(), 1) {
            Err(ReplyError::Bad(Failure::Invalid(msg))) => assert!(msg.contains("ended")),
            _ => panic!("expected an invalid-reply failure"),
        }
        match read_sse_reply(
            "data: {\"id\":1,\"error\":{\"code\":-1,\"message\":\"m\"}}\n\n".as_bytes(),
            1,
        ) {
            Err(ReplyError::Bad(f)) => assert_eq!(
                f,
                Failure::Rpc {
                    code: -1,
                    message: "m".into()
                }
            ),
            _ => panic!("expected the JSON-RPC error"),
        }
    }

    #[test]
    fn session_ids_are_bounded_visible_ascii() {
        let max = "a".repeat(MAX_SESSION_ID_BYTES);
        assert_eq!(valid_session_id(max.as_bytes()).unwrap(), max);
        let over = "a".repeat(MAX_SESSION_ID_BYTES + 1);
        for bad in [over.as_bytes(), b"", b"has space", b"tab\t", "é".as_bytes()] {
            assert!(valid_session_id(bad).is_err(), "{bad:?}");
        }
    }
}
