//! The admin API (contract §1): tiny_http on `--listen`, the Host/Origin guard, the body
//! cap, authentication and its throttle, the `/attach` and `/approvals` routes, `/mcp` for
//! the box's owner, `/metrics`, `/healthz` and `/readyz`, and the console's routes (the
//! page and assets of `console`, `GET /audit` read back by `activity`).

pub mod activity;
pub mod console;
pub mod journal;
pub mod lanes;
mod own_screen;
mod view;

use std::collections::HashMap;
use std::io::Read;
use std::net::{IpAddr, SocketAddr, TcpListener};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crossbeam_channel::Sender;
use log::{debug, info, warn};
use serde_json::{json, Value};
use tiny_http::{Header, Request, Response, Server};

use crate::admin::lanes::{Busy, Lane};
use crate::audit::{Audit, Record};
use crate::auth::{client_key, is_loopback, Decision, Policy, RequestFacts, Throttle, Verdict};
use crate::base::error::Error;
use crate::base::label;
use crate::config::{Limits, Timing};
use crate::faults::{self, Site};
use crate::grants::approvals::{self, Approvals};
use crate::grants::calls::{Begun, Calls, InFlight, Services, Transport};
use crate::grants::{AttachError, AttachRequest, Attached, Registry, SecretSource};
use crate::metrics::Metrics;
use crate::pool::Completion;
use crate::tools::policy::ToolPolicy;
use crate::tools::{CallContext, CallLimits, ConnCatalog};
use crate::wire::mcp::{self, Action, Dispatcher, Outcome, ToolOutput};

/// Most threads taking requests off tiny_http's queue. One waits when the API is idle;
/// another is started when the last waiting one takes a request. They only do quick work:
/// whatever waits on someone else (a mint on its pod, a `/mcp` tool call on its tool) is
/// handed to a thread of its [`Lane`], so `/healthz` and revokes always find a taker.
const MAX_HANDLER_THREADS: usize = 4;
/// `/mcp` tool calls waiting for their result at once; past this the call is refused.
const MAX_MCP_WAITERS: usize = 64;
/// Longest a `429` for a full lane asks the client to wait before retrying (seconds).
const LANE_RETRY_AFTER_SECS: u64 = 1;
/// Longest client-chosen text (a path, a claimed login) a log line carries (bytes).
const MAX_LOGGED_BYTES: usize = 256;
/// Slack beyond the longest tool run before a `/mcp` waiter gives up on a result.
const MCP_RESULT_SLACK: Duration = Duration::from_secs(15);

/// Every route the admin API serves, as `(method, path)`; `{id}` stands for one path
/// segment. `handle` dispatches through this table: a route missing here is never reached,
/// a known path asked with another method gets `405` with an `Allow` header built from it,
/// and `docs/protocol.md` must name every row (`tests/protocol_doc.rs`).
pub const ROUTES: &[(&str, &str)] = &[
    ("GET", "/healthz"),
    ("HEAD", "/healthz"),
    ("GET", "/readyz"),
    ("HEAD", "/readyz"),
    ("POST", "/attach"),
    ("GET", "/attach"),
    ("GET", "/attach/{id}"),
    ("DELETE", "/attach/{id}"),
    ("GET", "/attach/{id}/screen"),
    ("GET", "/attach/{id}/view"),
    ("POST", "/attach/{id}/wheel"),
    ("POST", "/attach/{id}/view-ticket"),
    ("GET", "/attach/{id}/journal"),
    ("GET", "/attach/{id}/journal.html"),
    ("GET", "/journals"),
    ("GET", "/calls"),
    ("DELETE", "/calls/{id}"),
    ("GET", "/halt"),
    ("POST", "/halt"),
    ("POST", "/resume"),
    ("GET", "/"),
    ("GET", "/console/{id}"),
    ("GET", "/console/novnc/{rest}"),
    ("GET", "/audit"),
    ("GET", "/approvals"),
    ("GET", "/approvals/{id}"),
    ("POST", "/approvals/{id}"),
    ("GET", "/metrics"),
    ("POST", "/mcp"),
    ("DELETE", "/mcp"),
];

/// Paths of [`ROUTES`] answered without authentication: the supervisor's probes, and the
/// console's page and assets (a fresh page has no token yet; its API calls authenticate).
pub const PUBLIC_PATHS: &[&str] = &[
    "/healthz",
    "/readyz",
    "/",
    "/console/{id}",
    "/console/novnc/{rest}",
];

/// What a request's method and path name in [`ROUTES`].
#[derive(Debug, PartialEq, Eq)]
enum Lookup<'a> {
    /// The row's `(method, path)` and the `{id}` segment (empty when the path has none).
    Route((&'static str, &'static str), &'a str),
    /// A path of the table, asked with a method it does not list.
    WrongMethod(&'static str),
    NotFound,
}

/// `path` against one table path: `Some(id segment)` when it matches.
fn match_path<'a>(pattern: &str, path: &'a str) -> Option<&'a str> {
    if let Some(prefix) = pattern.strip_suffix("{rest}") {
        // The rest of the path, one or more segments, as `{id}`: a tree of files.
        return path.strip_prefix(prefix).filter(|rest| !rest.is_empty());
    }
    let mut id = "";
    let mut want = pattern.split('/');
    let mut got = path.split('/');
    loop {
        match (want.next(), got.next()) {
            (None, None) => return Some(id),
            (Some("{id}"), Some(segment)) => id = segment,
            (Some(w), Some(g)) if w == g => {}
            _ => return None,
        }
    }
}

fn find_route<'a>(method: &str, path: &'a str) -> Lookup<'a> {
    let mut known_path = None;
    for &(m, p) in ROUTES {
        if let Some(id) = match_path(p, path) {
            if m == method {
                return Lookup::Route((m, p), id);
            }
            known_path = Some(p);
        }
    }
    known_path.map_or(Lookup::NotFound, Lookup::WrongMethod)
}

/// The `Allow` header value of a table path.
fn allowed_methods(path: &str) -> String {
    let methods: Vec<&str> = ROUTES
        .iter()
        .filter(|(_, p)| *p == path)
        .map(|(m, _)| *m)
        .collect();
    methods.join(", ")
}

/// Bind the admin listener with the socket timeouts every accepted socket inherits
/// (Linux copies `SO_RCVTIMEO`/`SO_SNDTIMEO` from the listener), since tiny_http sets none.
pub fn bind(addr: SocketAddr, io_timeout: Duration) -> Result<TcpListener, Error> {
    let listener = TcpListener::bind(addr).map_err(|source| Error::Bind {
        addr: addr.to_string(),
        source,
    })?;
    for which in [
        rustix::net::sockopt::Timeout::Recv,
        rustix::net::sockopt::Timeout::Send,
    ] {
        rustix::net::sockopt::set_socket_timeout(&listener, which, Some(io_timeout))
            .map_err(|e| Error::io("set admin socket timeout", e.into()))?;
    }
    Ok(listener)
}

/// The principal of a request that came over the local socket: a process of the daemon's
/// own user (its uid checked at accept), which is the box's owner.
pub const LOCAL_SOCKET_PRINCIPAL: &str = "local-socket";

/// A check for [`tiny_http`]'s Unix listener: admit a peer whose uid (`SO_PEERCRED`) is `uid`,
/// and give its socket the admin API's timeouts.
pub fn peer_uid_is(
    uid: u32,
    io_timeout: Duration,
) -> impl Fn(&std::os::unix::net::UnixStream) -> bool + Send + Sync {
    move |conn| {
        let ok =
            rustix::net::sockopt::socket_peercred(conn).is_ok_and(|cred| cred.uid.as_raw() == uid);
        if !ok {
            warn!("admin: refused a local socket peer that is not uid {uid}");
            return false;
        }
        conn.set_read_timeout(Some(io_timeout)).is_ok()
            && conn.set_write_timeout(Some(io_timeout)).is_ok()
    }
}

/// Bind the local socket at `path` (mode 0600), for the box owner's CLI. Not fatal: the TCP
/// API works without it, so a failure is logged and `None` returned. A socket another live
/// daemon answers on is left to it; a stale one (nobody answers) is replaced.
pub fn bind_local(path: &std::path::Path) -> Option<std::os::unix::net::UnixListener> {
    use std::os::unix::fs::{FileTypeExt, PermissionsExt};
    use std::os::unix::net::{UnixListener, UnixStream};
    if let Ok(meta) = std::fs::symlink_metadata(path) {
        if !meta.file_type().is_socket() {
            warn!(
                "local socket {} exists and is not a socket; not serving one (remove it, or set --local-socket)",
                path.display()
            );
            return None;
        }
        if UnixStream::connect(path).is_ok() {
            warn!(
                "local socket {} is served by another running handnode; the CLI reaches that one by default (give it --url for this one)",
                path.display()
            );
            return None;
        }
        let _ = std::fs::remove_file(path);
    }
    let listener = match UnixListener::bind(path) {
        Ok(l) => l,
        Err(e) => {
            warn!(
                "cannot serve the local socket {}: {e}; the CLI needs the token",
                path.display()
            );
            return None;
        }
    };
    if let Err(e) = std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600)) {
        warn!(
            "cannot narrow the local socket {} to 0600: {e}; not serving it",
            path.display()
        );
        let _ = std::fs::remove_file(path);
        return None;
    }
    Some(listener)
}

/// One `Mcp-Session-Id` session on `/mcp`.
struct McpSession {
    dispatcher: Dispatcher,
    calls: Calls,
    last_used: Instant,
}

/// Shared state of the admin handlers.
pub struct AdminState {
    pub policy: Policy,
    pub throttle: Mutex<Throttle>,
    pub registry: Arc<Registry>,
    pub services: Arc<Services>,
    pub approvals: Arc<Approvals>,
    pub metrics: Arc<Metrics>,
    pub audit: Audit,
    pub allow_hosts: Vec<String>,
    pub timing: Timing,
    pub limits: Limits,
    pub audit_args: bool,
    pub ready: AtomicBool,
    sessions: Mutex<HashMap<String, McpSession>>,
    /// Mints waiting for their pods (`--max-mints`).
    mints: Arc<Lane>,
    /// `/mcp` tool calls waiting for their results.
    mcp_calls: Arc<Lane>,
    /// Live-view tickets waiting for their WebSocket.
    view_tickets: view::Tickets,
}

impl AdminState {
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        policy: Policy,
        registry: Arc<Registry>,
        services: Arc<Services>,
        approvals: Arc<Approvals>,
        metrics: Arc<Metrics>,
        audit: Audit,
        allow_hosts: Vec<String>,
        timing: Timing,
        limits: Limits,
        audit_args: bool,
    ) -> Self {
        let throttle = Throttle::new(
            limits.throttle_failures,
            timing.throttle_window,
            timing.throttle_lockout,
            limits.throttle_table,
        );
        AdminState {
            policy,
            throttle: Mutex::new(throttle),
            registry,
            services,
            approvals,
            metrics,
            audit,
            allow_hosts: allow_hosts
                .into_iter()
                .map(|h| h.to_ascii_lowercase())
                .collect(),
            timing,
            audit_args,
            ready: AtomicBool::new(false),
            sessions: Mutex::new(HashMap::new()),
            mints: Lane::new("mint", "mints", limits.max_mints),
            mcp_calls: Lane::new("mcp-call", "/mcp tool calls", MAX_MCP_WAITERS),
            view_tickets: view::Tickets::default(),
            limits,
        }
    }
}

/// The running admin server. Dropping it stops the handler threads.
pub struct AdminServer {
    handlers: Arc<Handlers>,
    /// The local socket's server, when one is served.
    local: Option<Arc<Handlers>>,
    /// Where the local socket is, when one is served.
    pub local_path: Option<std::path::PathBuf>,
    /// A second handle on the listening socket, only to break the accept loop in tests.
    listener: TcpListener,
    pub local_addr: SocketAddr,
}

/// The threads that take requests, started on demand up to [`MAX_HANDLER_THREADS`].
struct Handlers {
    server: Server,
    state: Arc<AdminState>,
    fatal: Sender<Error>,
    stopping: AtomicBool,
    /// Requests come over the local socket (peer uid checked): they need no credential.
    local: bool,
    /// Handlers blocked in `recv` right now.
    waiting: AtomicUsize,
    threads: Mutex<Vec<JoinHandle<()>>>,
}

impl Handlers {
    fn new(server: Server, state: Arc<AdminState>, fatal: Sender<Error>, local: bool) -> Arc<Self> {
        Arc::new(Handlers {
            server,
            state,
            fatal,
            stopping: AtomicBool::new(false),
            local,
            waiting: AtomicUsize::new(0),
            threads: Mutex::new(Vec::new()),
        })
    }

    /// Stop taking requests and join every handler thread.
    fn stop(&self) {
        self.stopping.store(true, Ordering::SeqCst);
        // No handler starts once `stopping` is set, so this list is final.
        let threads = std::mem::take(&mut *self.threads.lock().unwrap_or_else(|e| e.into_inner()));
        for _ in &threads {
            self.server.unblock();
        }
        for t in threads {
            let _ = t.join();
        }
    }

    /// Start one more handler unless one is waiting, all are started, or we are stopping.
    fn grow(self: &Arc<Self>) -> Result<(), Error> {
        let mut threads = self.threads.lock().unwrap_or_else(|e| e.into_inner());
        if self.stopping.load(Ordering::SeqCst)
            || self.waiting.load(Ordering::SeqCst) > 0
            || threads.len() >= MAX_HANDLER_THREADS
        {
            return Ok(());
        }
        let this = Arc::clone(self);
        // Counted as waiting from now, so racing callers do not start a second one.
        self.waiting.fetch_add(1, Ordering::SeqCst);
        let spawned = std::thread::Builder::new()
            .name(format!(
                "admin-{}{}",
                if self.local { "l" } else { "" },
                threads.len()
            ))
            .spawn(move || this.run());
        match spawned {
            Ok(handle) => {
                threads.push(handle);
                Ok(())
            }
            Err(e) => {
                self.waiting.fetch_sub(1, Ordering::SeqCst);
                Err(Error::io("start admin thread", e))
            }
        }
    }

    fn run(self: Arc<Self>) {
        loop {
            let request = self.server.recv();
            if self.waiting.fetch_sub(1, Ordering::SeqCst) == 1 {
                // The last waiting handler took a request: leave another waiting. Failing
                // that, this one comes back to `recv` once it has answered.
                if let Err(e) = self.grow() {
                    log::warn!("{e}");
                }
            }
            match request {
                Ok(request) => {
                    // A panic ends this one request: unwinding drops it unanswered, and the
                    // vendored tiny_http answers a dropped request 500 {"error":"internal error"}.
                    let handled = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                        handle(&self.state, request, self.local)
                    }));
                    if let Err(payload) = handled {
                        faults::caught(Site::Admin, "an admin request", payload.as_ref());
                    }
                }
                Err(e) => {
                    if !self.stopping.load(Ordering::SeqCst) {
                        let _ = self.fatal.send(Error::AcceptLoop(e.to_string()));
                    }
                    return;
                }
            }
            self.waiting.fetch_add(1, Ordering::SeqCst);
        }
    }
}

impl AdminServer {
    /// Serve on `listener`. If tiny_http's accept loop dies, the error is sent on `fatal`.
    pub fn start(
        listener: TcpListener,
        local: Option<std::os::unix::net::UnixListener>,
        state: Arc<AdminState>,
        fatal: Sender<Error>,
    ) -> Result<AdminServer, Error> {
        let local_addr = listener
            .local_addr()
            .map_err(|e| Error::io("admin listener address", e))?;
        let listener_handle = listener
            .try_clone()
            .map_err(|e| Error::io("clone admin listener", e))?;
        let server = Server::from_listener(listener, None)
            .map_err(|e| Error::AcceptLoop(format!("cannot start the admin server: {e}")))?;
        let local_path = local
            .as_ref()
            .and_then(|l| l.local_addr().ok())
            .and_then(|a| a.as_pathname().map(std::path::Path::to_path_buf));
        let local = match local {
            Some(listener) => {
                let check = peer_uid_is(
                    rustix::process::geteuid().as_raw(),
                    state.timing.admin_io_timeout,
                );
                let server = Server::from_listener(
                    tiny_http::Listener::UnixChecked(listener, Box::new(check)),
                    None,
                )
                .map_err(|e| Error::AcceptLoop(format!("cannot serve the local socket: {e}")))?;
                let handlers = Handlers::new(server, Arc::clone(&state), fatal.clone(), true);
                handlers.grow()?;
                Some(handlers)
            }
            None => None,
        };
        let handlers = Handlers::new(server, state, fatal, false);
        handlers.grow()?;
        Ok(AdminServer {
            handlers,
            local,
            local_path,
            listener: listener_handle,
            local_addr,
        })
    }
}

impl AdminServer {
    /// Make tiny_http's accept loop fail as a real accept error would (shutting down a
    /// listening socket makes `accept` return `EINVAL`). For the test of exit code 1.
    #[doc(hidden)]
    pub fn break_accept_loop(&self) {
        let _ = rustix::net::shutdown(&self.listener, rustix::net::Shutdown::Both);
    }
}

impl Drop for AdminServer {
    fn drop(&mut self) {
        self.handlers.stop();
        if let Some(local) = &self.local {
            local.stop();
        }
    }
}

fn header(name: &str, value: &str) -> Header {
    Header::from_bytes(name.as_bytes(), value.as_bytes()).expect("static header is valid")
}

fn json_response(status: u16, body: &Value) -> Response<std::io::Cursor<Vec<u8>>> {
    Response::from_data(body.to_string().into_bytes())
        .with_status_code(status)
        .with_header(header("Content-Type", "application/json"))
}

fn error_response(status: u16, message: &str) -> Response<std::io::Cursor<Vec<u8>>> {
    json_response(status, &json!({ "error": message }))
}

fn request_header<'a>(request: &'a Request, name: &str) -> Option<&'a str> {
    request
        .headers()
        .iter()
        .find(|h| h.field.as_str().as_str().eq_ignore_ascii_case(name))
        .map(|h| h.value.as_str())
}

/// Is `host` (a Host header value or an Origin's authority, port allowed) loopback,
/// `localhost`, or named by `--allow-host`?
pub fn host_allowed(host: &str, allow_hosts: &[String]) -> bool {
    let host = host.trim().to_ascii_lowercase();
    if host.is_empty() {
        return false;
    }
    if allow_hosts.contains(&host) {
        return true;
    }
    let bare = if let Some(rest) = host.strip_prefix('[') {
        match rest.split_once(']') {
            Some((inner, tail)) if tail.is_empty() || tail.starts_with(':') => inner.to_string(),
            _ => return false,
        }
    } else {
        match host.rsplit_once(':') {
            Some((h, port)) if !h.contains(':') && port.bytes().all(|b| b.is_ascii_digit()) => {
                h.to_string()
            }
            Some(_) if host.contains("::") || host.matches(':').count() > 1 => host.clone(),
            Some(_) => return false,
            None => host.clone(),
        }
    };
    if bare == "localhost" || bare.ends_with(".localhost") {
        return true;
    }
    // A loopback address only in its one canonical spelling (contract §21): `127.x.y.z`
    // dotted-quad and `::1`. An IPv4-mapped `[::ffff:7f00:1]` reaches the same listener
    // through a spelling no list of origins names, so it is refused.
    if let Ok(ip) = bare.parse::<IpAddr>() {
        let canonical = ip.to_string() == bare;
        let loopback = match ip {
            IpAddr::V4(v4) => v4.is_loopback(),
            IpAddr::V6(v6) => v6.is_loopback(),
        };
        if canonical && loopback {
            return true;
        }
    }
    allow_hosts.contains(&bare)
}

/// The DNS-rebinding guard: Host, and Origin when present, must be ours (`403`). Two Origin
/// headers are `400`: a check of the first would pass a hostile second one on to whoever
/// reads the last. (Two Host headers never get here: tiny_http is patched to answer `400`.)
fn guard(request: &Request, allow_hosts: &[String]) -> Result<(), (u16, &'static str)> {
    let forbidden = |why| Err((403, why));
    match request_header(request, "Host") {
        Some(host) if host_allowed(host, allow_hosts) => {}
        Some(_) => {
            return forbidden(
                "Host header must name a loopback address, localhost, or an --allow-host name",
            )
        }
        None => return forbidden("a Host header is required"),
    }
    let origins = request
        .headers()
        .iter()
        .filter(|h| h.field.as_str().as_str().eq_ignore_ascii_case("Origin"))
        .count();
    if origins > 1 {
        return Err((400, "more than one Origin header"));
    }
    if let Some(origin) = request_header(request, "Origin") {
        let authority = origin
            .split_once("://")
            .map(|(_, rest)| rest.split('/').next().unwrap_or(""))
            .unwrap_or("");
        if !host_allowed(authority, allow_hosts) {
            return forbidden(
                "Origin must name a loopback address, localhost, or an --allow-host name",
            );
        }
    }
    Ok(())
}

/// The peer's address and what the request says about itself, as the authentication
/// policy and the failure throttle read them.
fn request_facts(request: &Request) -> (IpAddr, RequestFacts) {
    let peer = request
        .remote_addr()
        .map(|a| a.ip())
        .unwrap_or(IpAddr::from([0, 0, 0, 0]));
    let facts = RequestFacts::from_headers(
        request
            .headers()
            .iter()
            .map(|h| (h.field.as_str().as_str(), h.value.as_str())),
        is_loopback(peer),
    );
    (peer, facts)
}

fn authenticate(
    state: &AdminState,
    request: &Request,
) -> Result<String, Response<std::io::Cursor<Vec<u8>>>> {
    let (peer, facts) = request_facts(request);
    match state.policy.decide(&facts) {
        Decision::Allow(principal) => Ok(principal),
        Decision::Deny(reason) => {
            let key = client_key(&facts, peer);
            let verdict = state
                .throttle
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .fail(&key, Instant::now());
            state.metrics.auth_denied();
            match verdict {
                Verdict::Unauthorized => {
                    info!(
                        "admin: denied {} {}: {}",
                        request.method(),
                        shown_path(request),
                        label::cut(&reason, MAX_LOGGED_BYTES)
                    );
                    // `error` stays what clients key on; `reason` says which requirement failed.
                    Err(json_response(
                        401,
                        &json!({"error": "unauthorized", "reason": state.policy.explain(&reason, &facts)}),
                    ))
                }
                Verdict::Throttled { .. } => {
                    state.metrics.throttled();
                    debug!(
                        "admin: throttled {} {}",
                        request.method(),
                        shown_path(request)
                    );
                    Err(error_response(
                        429,
                        "too many failed authentications; wait and retry",
                    ))
                }
            }
        }
    }
}

/// A live-view ticket that is not good here: a failed authentication like a wrong token
/// (throttled the same way), with the one way to get a good one.
fn ticket_refused(state: &AdminState, request: &Request) -> Response<std::io::Cursor<Vec<u8>>> {
    let (peer, facts) = request_facts(request);
    state.metrics.auth_denied();
    let verdict = state
        .throttle
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .fail(&client_key(&facts, peer), Instant::now());
    info!("admin: denied {} {}: a live-view ticket that is unknown, used, expired or for another grant", request.method(), shown_path(request));
    match verdict {
        Verdict::Unauthorized => json_response(
            401,
            &json!({"error": "unauthorized", "reason": "this live-view ticket is unknown, already used, expired or for another grant: POST /attach/{id}/view-ticket for a new one"}),
        ),
        Verdict::Throttled { .. } => {
            state.metrics.throttled();
            error_response(429, "too many failed authentications; wait and retry")
        }
    }
}

fn path_of(request: &Request) -> &str {
    let url = request.url();
    url.split('?').next().unwrap_or(url)
}

/// The path as the log shows it: a client chooses it, up to a whole 8 KiB request line.
fn shown_path(request: &Request) -> std::borrow::Cow<'_, str> {
    label::cut(path_of(request), MAX_LOGGED_BYTES)
}

/// Read a JSON body under the cap. `Err` is the response to send.
fn read_body(
    request: &mut Request,
    max: usize,
) -> Result<Vec<u8>, Response<std::io::Cursor<Vec<u8>>>> {
    let content_type = request_header(request, "Content-Type").unwrap_or("");
    let mime = content_type.split(';').next().unwrap_or("").trim();
    let has_body = request.body_length().is_some_and(|n| n > 0)
        || request_header(request, "Transfer-Encoding").is_some();
    if has_body && !mime.eq_ignore_ascii_case("application/json") {
        return Err(error_response(
            415,
            "body must be sent with Content-Type: application/json",
        ));
    }
    if request.body_length().is_some_and(|n| n > max) {
        return Err(error_response(
            413,
            &format!("body larger than {max} bytes"),
        ));
    }
    let mut body = Vec::new();
    let read = request
        .as_reader()
        .take(max as u64 + 1)
        .read_to_end(&mut body);
    if read.is_err() {
        return Err(error_response(400, "could not read the request body"));
    }
    if body.len() > max {
        return Err(error_response(
            413,
            &format!("body larger than {max} bytes"),
        ));
    }
    Ok(body)
}

fn respond(request: Request, response: Response<std::io::Cursor<Vec<u8>>>) {
    let response = crate::base::http_headers::with_api_headers(response);
    let status = response.status_code().0;
    let method = request.method().clone();
    let path = shown_path(&request).into_owned();
    if let Err(e) = request.respond(response) {
        debug!("admin: {method} {path}: could not send {status}: {e}");
    } else {
        debug!("admin: {method} {path} -> {status}");
    }
}

fn handle(state: &Arc<AdminState>, mut request: Request, local: bool) {
    if let Err((status, why)) = guard(&request, &state.allow_hosts) {
        info!(
            "admin: refused {} {}: {why}",
            request.method(),
            shown_path(&request)
        );
        return respond(request, error_response(status, why));
    }
    let path = path_of(&request).to_string();
    let found = find_route(request.method().as_str(), &path);
    let public = matches!(
        found,
        Lookup::Route((_, p), _) | Lookup::WrongMethod(p) if PUBLIC_PATHS.contains(&p)
    );
    // Every other route authenticates before its 404 or 405, so an unauthenticated
    // caller cannot map the API.
    let principal = if public {
        String::new()
    } else if local {
        LOCAL_SOCKET_PRINCIPAL.to_string()
    } else if let Some(ticket) = match found {
        Lookup::Route(("GET", "/attach/{id}/view"), id) => {
            view::ticket_principal(state, &request, id)
        }
        _ => None,
    } {
        match ticket {
            Ok(p) => p,
            Err(()) => {
                let refused = ticket_refused(state, &request);
                return respond(request, refused);
            }
        }
    } else {
        match authenticate(state, &request) {
            Ok(p) => p,
            Err(response) => return respond(request, response),
        }
    };
    #[cfg(test)]
    if path == faults::hooks::ADMIN_PATH {
        panic!("test hook: an admin handler panics");
    }
    let (route, id) = match found {
        Lookup::Route(route, id) => (route, id),
        Lookup::WrongMethod(p) => {
            return respond(
                request,
                error_response(405, "method not allowed")
                    .with_header(header("Allow", &allowed_methods(p))),
            )
        }
        Lookup::NotFound => return respond(request, error_response(404, "not found")),
    };
    match route {
        // Alive either way; a halted daemon says so (§22).
        ("GET" | "HEAD", "/healthz") => respond(
            request,
            Response::from_string(if state.services.halt.is_halted() {
                "halted"
            } else {
                "ok"
            })
            .with_header(header("Content-Type", "text/plain")),
        ),
        ("GET" | "HEAD", "/readyz") => {
            if !state.ready.load(Ordering::SeqCst) {
                return respond(request, json_response(503, &json!({"ready": false})));
            }
            let (grants, attached) = state.registry.counts();
            respond(
                request,
                json_response(
                    200,
                    &json!({"ready": true, "grants": grants, "attached": attached}),
                ),
            )
        }
        ("POST", "/attach") => {
            let body = match read_body(&mut request, state.limits.max_body_bytes) {
                Ok(b) => b,
                Err(resp) => return respond(request, resp),
            };
            let req = match AttachRequest::parse(&body) {
                Ok(r) => r,
                Err(msg) => return respond(request, error_response(400, &msg)),
            };
            if req.policy.profile() == crate::profiles::Profile::Browser
                && state.services.browsers.is_none()
            {
                return respond(
                    request,
                    error_response(400, crate::profiles::BROWSER_NEEDS_COMMAND),
                );
            }
            if req.policy.profile().requires_apps() && state.services.host.config.apps.is_empty() {
                return respond(
                    request,
                    error_response(400, crate::profiles::APPS_NEEDS_LIST),
                );
            }
            // A grant never quietly lends less than its allow list names (issue 37).
            if let Err(msg) = req
                .policy
                .check_here(crate::grants::sources(&state.services))
            {
                return respond(request, error_response(400, &msg));
            }
            if !matches!(req.source, SecretSource::AdminCredential(_)) {
                return attach(state, request, req, &principal);
            }
            // A mint waits for the pod (up to --mint-timeout-ms, however slowly it answers):
            // on a thread of the mint lane, never on one of the few handler threads.
            let slot = match state.mints.try_acquire() {
                Ok(slot) => slot,
                Err(busy) => return respond(request, too_busy(&busy)),
            };
            let state2 = Arc::clone(state);
            let spawned = slot.spawn(move || attach(&state2, request, req, &principal));
            if let Err((e, _work)) = spawned {
                warn!("admin: cannot start a mint thread: {e}");
                // `_work` drops the request unanswered: tiny_http answers it 500.
            }
        }
        ("GET", "/attach") => respond(
            request,
            json_response(200, &json!({"grants": state.registry.list()})),
        ),
        ("GET", "/attach/{id}") => match state.registry.get(id) {
            Some(view) => respond(request, json_response(200, &view)),
            None => respond(request, error_response(404, "no such grant")),
        },
        ("DELETE", "/attach/{id}") => {
            if state.registry.revoke(id) {
                respond(
                    request,
                    Response::from_data(Vec::new()).with_status_code(204),
                )
            } else {
                respond(request, error_response(404, "no such grant"))
            }
        }
        ("GET", "/attach/{id}/screen") => own_screen::get(state, request, id, principal),
        ("GET", "/attach/{id}/view") => view::get(state, request, id),
        ("POST", "/attach/{id}/wheel") => view::wheel_post(state, request, id, &principal),
        ("POST", "/attach/{id}/view-ticket") => view::ticket_post(state, request, id, &principal),
        ("GET", "/attach/{id}/journal") => journal::lines(state, request, id),
        ("GET", "/attach/{id}/journal.html") => journal::page(state, request, id),
        ("GET", "/journals") => journal::list(state, request),
        ("GET", "/halt") => respond(request, json_response(200, &state.services.halt.to_json())),
        ("POST", "/halt") => {
            let body = match read_body(&mut request, state.limits.max_body_bytes) {
                Ok(b) => b,
                Err(resp) => return respond(request, resp),
            };
            let reason = match crate::grants::halt::parse_body(&body) {
                Ok(r) => r,
                Err(msg) => return respond(request, error_response(400, &msg)),
            };
            match state.registry.halt(reason, &principal) {
                Ok(_) => respond(request, json_response(200, &state.services.halt.to_json())),
                Err(e) => respond(
                    request,
                    error_response(
                        500,
                        &format!("cannot keep the halt in the state dir ({e}); nothing was halted"),
                    ),
                ),
            }
        }
        ("POST", "/resume") => match state.registry.resume_after_halt(&principal) {
            Ok(_) => respond(request, json_response(200, &state.services.halt.to_json())),
            Err(e) => respond(
                request,
                error_response(
                    500,
                    &format!("cannot remove the halt from the state dir ({e}); still halted"),
                ),
            ),
        },
        ("GET", "/calls") => respond(
            request,
            json_response(200, &json!({"calls": calls_now(state)})),
        ),
        ("DELETE", "/calls/{id}") => {
            if stop_call(state, id, &principal) {
                respond(
                    request,
                    Response::from_data(Vec::new()).with_status_code(204),
                )
            } else {
                respond(
                    request,
                    error_response(404, "no such call or job running (see GET /calls)"),
                )
            }
        }
        ("GET", "/") => respond(
            request,
            console::page_response(
                crate::grants::sources(&state.services),
                !state.services.host.config.apps.is_empty(),
            ),
        ),
        ("GET", "/console/novnc/{rest}") => {
            match console::novnc_file(std::path::Path::new(console::NOVNC_DIR), id) {
                Ok(file) => respond(request, file),
                Err(why) => respond(request, error_response(404, &why)),
            }
        }
        ("GET", "/console/{id}") => match console::asset(id) {
            Some(asset) => respond(request, console::response(asset)),
            None => respond(request, error_response(404, "no such console file")),
        },
        ("GET", "/audit") => audit_get(state, request),
        ("GET", "/approvals") => approvals_get(state, request),
        ("GET", "/approvals/{id}") => match state.approvals.get(id) {
            Some(view) => respond(request, json_response(200, &view)),
            None => respond(request, error_response(404, "no such approval")),
        },
        ("POST", "/approvals/{id}") => {
            let id = id.to_string();
            approvals_post(state, request, &id, &principal)
        }
        ("GET", "/metrics") => {
            let text = state.metrics.render(
                &state.registry.states(),
                state.services.host.own_displays.running(),
            );
            respond(
                request,
                Response::from_data(text.into_bytes())
                    .with_header(header("Content-Type", "text/plain; version=0.0.4")),
            )
        }
        ("POST", "/mcp") => mcp_post(state, request, principal),
        ("DELETE", "/mcp") => {
            let Some(id) = request_header(&request, "Mcp-Session-Id").map(str::to_string) else {
                return respond(
                    request,
                    error_response(400, "DELETE /mcp needs an Mcp-Session-Id header"),
                );
            };
            let removed = state
                .sessions
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .remove(&id);
            match removed {
                Some(mut session) => {
                    session.calls.cancel_all();
                    respond(
                        request,
                        Response::from_data(Vec::new()).with_status_code(204),
                    )
                }
                None => respond(request, error_response(404, "unknown Mcp-Session-Id")),
            }
        }
        (method, path) => {
            // A row of ROUTES without an arm here: a bug, caught by tests/protocol_doc.rs.
            warn!("admin: {method} {path} is in ROUTES but has no handler");
            respond(request, error_response(500, "route has no handler"))
        }
    }
}

/// The value of query parameter `name` (first occurrence, `%XX` and `+` decoded).
fn query_param(request: &Request, name: &str) -> Option<String> {
    let query = request.url().split_once('?')?.1;
    query.split('&').find_map(|pair| {
        let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
        (k == name).then(|| percent_decode(v))
    })
}

fn percent_decode(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = bytes
            .get(i + 1..i + 3)
            .and_then(|h| std::str::from_utf8(h).ok())
            .and_then(|h| u8::from_str_radix(h, 16).ok());
        match (bytes[i], hex) {
            (b'%', Some(b)) => {
                out.push(b);
                i += 3;
                continue;
            }
            (b'+', _) => out.push(b' '),
            (b, _) => out.push(b),
        }
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// `GET /audit?grant=<id>&limit=N`: a grant's tool calls, newest first, read back from the
/// audit files (`activity`); arguments only while `--audit-args` is on.
fn audit_get(state: &AdminState, request: Request) {
    let query = request.url().split_once('?').map_or("", |(_, q)| q);
    let query = match activity::Query::parse(query) {
        Ok(q) => q,
        Err(msg) => return respond(request, error_response(400, &msg)),
    };
    let Some(dir) = state.audit.dir() else {
        return respond(
            request,
            json_response(200, &json!({"calls": [], "more": false})),
        );
    };
    match activity::read(dir, &query, state.audit_args, activity::Bounds::SERVED) {
        Ok(answer) => respond(request, json_response(200, &answer)),
        Err(e) => {
            warn!("admin: GET /audit: cannot read the audit files: {e}");
            respond(request, error_response(500, "cannot read the audit files"))
        }
    }
}

/// `GET /approvals`, and its long-poll `?wait=N&seen=<etag>` (§10): parked with the
/// approvals thread, so a waiting phone holds no handler thread.
fn approvals_get(state: &Arc<AdminState>, request: Request) {
    let wait = match query_param(&request, "wait") {
        None => 0,
        Some(v) => match v.parse::<u64>() {
            Ok(n) if n <= approvals::MAX_WAIT_SECS => n,
            _ => {
                return respond(
                    request,
                    error_response(
                        400,
                        &format!(
                            "wait must be a whole number of seconds, 0...{}",
                            approvals::MAX_WAIT_SECS
                        ),
                    ),
                )
            }
        },
    };
    let seen = query_param(&request, "seen");
    let (list, etag) = state.approvals.list();
    let changed = seen
        .as_deref()
        .is_none_or(|s| !approvals::same_etag(s, &etag));
    if wait == 0 || changed {
        return respond(request, approvals::list_response(list.to_string(), &etag));
    }
    let seen = seen.unwrap_or_default();
    if let Some(request) = state
        .approvals
        .park(request, seen, Duration::from_secs(wait))
    {
        let msg = format!(
            "too many long-polls of /approvals are open ({}); retry shortly, or ask without wait",
            state.approvals.max_waiters()
        );
        respond(request, error_response(429, &msg));
    }
}

/// `GET /calls` (§22): every call in flight, then every running job, oldest first within each.
fn calls_now(state: &AdminState) -> Vec<Value> {
    let mut rows: Vec<Value> = state
        .services
        .running
        .list()
        .iter()
        .map(|call| {
            let held = state.approvals.pending_id(&call.ctl).is_some();
            call.to_json(if held { "waiting_approval" } else { "running" })
        })
        .collect();
    for job in state.services.host.jobs.running() {
        let grant = (job.scope != crate::tools::shell::OWNER_SCOPE).then_some(&job.scope);
        rows.push(json!({
            "id": job.id,
            "grant": grant,
            "tool": "bash_start",
            "arguments": {"command": job.command},
            "state": "job",
            "job_id": job.id,
            "started_at": crate::base::timefmt::rfc3339(job.started_at_ms / 1000),
            "elapsed_ms": job.started().elapsed().as_millis() as u64,
            "output_tail": output_tail(&job),
        }));
    }
    rows
}

/// A running job's last output lines for `GET /calls` (`handnode jobs`): at most
/// [`OUTPUT_TAIL_LINES`] lines of the last [`OUTPUT_TAIL_BYTES`] of its stdout and stderr
/// each, stdout first.
fn output_tail(job: &crate::tools::jobs::table::Job) -> Vec<String> {
    let mut lines = Vec::new();
    for stream in [&job.out, &job.err] {
        let total = stream.total();
        let chunk = stream.read(
            total.saturating_sub(OUTPUT_TAIL_BYTES),
            OUTPUT_TAIL_BYTES as usize,
        );
        let text = String::from_utf8_lossy(&chunk.data);
        let mut tail: Vec<String> = text
            .lines()
            .rev()
            .filter(|l| !l.trim().is_empty())
            .take(OUTPUT_TAIL_LINES)
            .map(String::from)
            .collect();
        tail.reverse();
        lines.extend(tail);
    }
    lines
}

/// Lines of a job's output `GET /calls` shows, per stream.
const OUTPUT_TAIL_LINES: usize = 3;

/// Bytes of a job's stream read for its tail.
const OUTPUT_TAIL_BYTES: u64 = 1024;

/// `DELETE /calls/{id}` (§22): a held call is denied, a running one killed, a job killed
/// as `bash_cancel` with `KILL`; the agent reads [`STOPPED_BY_LENDER`]. `false`: nothing
/// of that id runs.
fn stop_call(state: &AdminState, id: &str, principal: &str) -> bool {
    use crate::grants::running::{Running, STOPPED_BY_LENDER};
    if Running::is_call_id(id) {
        let Some(ctl) = state.services.running.find(id) else {
            return false;
        };
        log::info!("call {id}: stopped by {principal}");
        match state.approvals.pending_id(&ctl) {
            Some(approval) => {
                // The reason first, so the deny's reply carries it; then the decision,
                // audited as the lender's; then whatever the call registered is killed.
                ctl.mark_stopped(STOPPED_BY_LENDER.into());
                let decision = approvals::Decision {
                    allow: false,
                    reason: Some(STOPPED_BY_LENDER.into()),
                    remember: false,
                };
                state.approvals.decide(&approval, decision, principal);
                ctl.cancel();
            }
            None => ctl.stop(STOPPED_BY_LENDER.into()),
        }
        return true;
    }
    let jobs = &state.services.host.jobs;
    let Some(job) = jobs.find_any(id) else {
        return false;
    };
    let stopped = jobs.stop_because(
        &job,
        crate::tools::jobs::table::Stop::Kill,
        "stopped_by_lender",
    );
    if stopped {
        log::info!("job {id}: stopped by {principal}");
    }
    stopped
}

/// `POST /approvals/{id}`: allow or deny a held call.
fn approvals_post(state: &Arc<AdminState>, mut request: Request, id: &str, principal: &str) {
    let body = match read_body(&mut request, state.limits.max_body_bytes) {
        Ok(b) => b,
        Err(resp) => return respond(request, resp),
    };
    let decision = match approvals::Decision::parse(&body) {
        Ok(d) => d,
        Err(msg) => return respond(request, error_response(400, &msg)),
    };
    match state.approvals.decide(id, decision, principal) {
        Some(decided) => {
            if decided.remembered {
                state.registry.remembered(&decided.grant_id);
            }
            respond(request, json_response(200, &decided.view))
        }
        None => respond(request, error_response(404, "no such approval")),
    }
}

/// `POST /attach` once its body is valid: create or renew (minting first, if asked).
fn attach(state: &AdminState, request: Request, req: AttachRequest, principal: &str) {
    match state.registry.attach(req, principal) {
        Ok((mut view, attached)) => {
            // What this request did, beside the grant: the CLI and console say it.
            view["attach"] = json!(attached.as_str());
            match &attached {
                Attached::Replaced(old) => view["replaced_id"] = json!(old),
                Attached::Renewed { new_secret } => view["new_secret"] = json!(new_secret),
                Attached::Created => {}
            }
            respond(request, json_response(202, &view))
        }
        Err(AttachError::WouldReplace(msg)) => respond(request, error_response(409, &msg)),
        Err(AttachError::Halted(msg)) => respond(request, error_response(423, &msg)),
        Err(AttachError::Mint(e)) => respond(request, error_response(502, &e.to_string())),
        Err(AttachError::BadRequest(msg)) => respond(request, error_response(400, &msg)),
        Err(AttachError::Internal(msg)) => {
            warn!("admin: POST /attach failed: {msg}");
            respond(request, error_response(500, &msg))
        }
        Err(AttachError::ShuttingDown) => respond(
            request,
            error_response(503, "handnode is shutting down; retry after it restarts"),
        ),
    }
}

/// `429` for a full lane: what is full and when to retry.
fn too_busy(busy: &Busy) -> Response<std::io::Cursor<Vec<u8>>> {
    error_response(429, &busy.to_string())
        .with_header(header("Retry-After", &LANE_RETRY_AFTER_SECS.to_string()))
}

/// One `/mcp` request's actions: it answers at most one reply and starts at most one call
/// (the last of each wins); a cancel is logged, its call's record is the responder's.
struct McpExchange<'a> {
    state: &'a AdminState,
    principal: &'a str,
    reply: Option<String>,
    call: Option<Begun>,
}

impl<'a> McpExchange<'a> {
    /// The one reply and the one call to start for `actions`.
    fn apply(
        state: &'a AdminState,
        principal: &'a str,
        actions: Vec<Action>,
        calls: &mut Calls,
    ) -> (Option<String>, Option<Begun>) {
        let mut exchange = McpExchange {
            state,
            principal,
            reply: None,
            call: None,
        };
        calls.apply(actions, &mut exchange);
        (exchange.reply, exchange.call)
    }
}

impl Transport for McpExchange<'_> {
    fn grant(&self) -> Option<&str> {
        None
    }

    fn journal(&self) -> &crate::journal::Journal {
        &self.state.services.journal
    }

    fn reply(&mut self, text: String) {
        self.reply = Some(text);
    }

    fn start(&mut self, call: Begun) {
        self.call = Some(call);
    }

    fn cancelled(&mut self, id: &Value, call: InFlight) {
        debug!(
            "/mcp: cancelled call {} ({})",
            label::cut(&id.to_string(), MAX_LOGGED_BYTES),
            call.tool
        );
    }

    fn refused(&mut self, tool: String, outcome: Outcome) {
        let tool = label::name(&tool).into_owned();
        self.state.metrics.tool_call(&tool, outcome);
        self.state.audit.record(Record::ToolCall {
            grant_id: None,
            principal: self.principal.to_string(),
            session: None,
            tool,
            outcome,
            duration_ms: 0,
            args: None,
        });
    }
}

fn new_session_id() -> String {
    crate::base::ids::new_id()
}

/// `POST /mcp`: one JSON-RPC message per request, JSON replies only.
fn mcp_post(state: &Arc<AdminState>, mut request: Request, principal: String) {
    let body = match read_body(&mut request, state.limits.max_body_bytes) {
        Ok(b) => b,
        Err(resp) => return respond(request, resp),
    };
    let session_id = request_header(&request, "Mcp-Session-Id").map(str::to_string);
    let headers = mcp::HttpHeaders {
        protocol_version: request_header(&request, "MCP-Protocol-Version"),
        method: request_header(&request, "Mcp-Method"),
        name: request_header(&request, "Mcp-Name"),
    };
    let owner = ToolPolicy::owner();
    let catalog = ConnCatalog {
        grant: None,
        upstream: state.services.upstream.as_deref(),
        policy: &owner,
        browsers: None,
    };
    let mut sessions = state.sessions.lock().unwrap_or_else(|e| e.into_inner());
    let mut new_session = None;
    let (status, reply, call) = match &session_id {
        Some(id) => {
            let Some(session) = sessions.get_mut(id) else {
                drop(sessions);
                return respond(
                    request,
                    error_response(404, "unknown Mcp-Session-Id; initialize again"),
                );
            };
            session.last_used = Instant::now();
            let out = session.dispatcher.handle_http(&body, &catalog, &headers);
            let (reply, call) =
                McpExchange::apply(state, &principal, out.actions, &mut session.calls);
            (out.status, reply, call)
        }
        None => {
            let mut session = McpSession {
                dispatcher: Dispatcher::new(),
                calls: Calls::new(state.limits.max_in_flight),
                last_used: Instant::now(),
            };
            let out = session.dispatcher.handle_http(&body, &catalog, &headers);
            let (reply, call) =
                McpExchange::apply(state, &principal, out.actions, &mut session.calls);
            // Only a client that initializes without a session gets one; any call it made
            // in the same message stays tracked by `session.calls` below.
            if session.dispatcher.negotiated_version().is_some() {
                if sessions.len() >= state.limits.mcp_sessions {
                    let oldest = sessions
                        .iter()
                        .min_by_key(|(_, s)| s.last_used)
                        .map(|(k, _)| k.clone());
                    if let Some(mut evicted) = oldest.and_then(|k| sessions.remove(&k)) {
                        evicted.calls.cancel_all();
                    }
                }
                let id = new_session_id();
                sessions.insert(id.clone(), session);
                new_session = Some(id);
            } else {
                // No session to cancel through: the call lives as long as its HTTP exchange.
                session.calls.release_all();
            }
            (out.status, reply, call)
        }
    };
    drop(sessions);

    if let Some(call) = call {
        return mcp_call(state, request, principal, session_id.or(new_session), call);
    }
    let response = match reply {
        Some(text) => Response::from_data(text.into_bytes())
            .with_status_code(status)
            .with_header(header("Content-Type", "application/json")),
        None => Response::from_data(Vec::new()).with_status_code(202),
    };
    let response = match new_session {
        Some(id) => response.with_header(header("Mcp-Session-Id", &id)),
        None => response,
    };
    respond(request, response)
}

/// Start a tool call for `/mcp` and answer from a responder thread, so the handler
/// threads never wait on a tool.
fn mcp_call(
    state: &Arc<AdminState>,
    request: Request,
    principal: String,
    session_id: Option<String>,
    Begun {
        id,
        name,
        route,
        arguments,
        form,
        seq,
        ctl,
    }: Begun,
) {
    let slot = match state.mcp_calls.try_acquire() {
        Ok(slot) => slot,
        Err(busy) => {
            let text = mcp::error_reply(&id, mcp::SERVER_ERROR, &format!("server busy: {busy}"));
            forget_call(state, &session_id, &id, seq);
            return respond(
                request,
                Response::from_data(text.into_bytes())
                    .with_header(header("Content-Type", "application/json")),
            );
        }
    };
    let (tx, rx) = crossbeam_channel::bounded::<ToolOutput>(1);
    let done = Completion::new(move |out| {
        let _ = tx.send(out);
    });
    let audit_args = state.audit_args.then(|| arguments.clone());
    let cx = CallContext {
        policy: ToolPolicy::owner(),
        grant: None,
        limits: CallLimits {
            inline_wait: state.timing.mcp_inline_wait,
            ..CallLimits::LOCAL_HTTP
        },
        ctl: Arc::clone(&ctl),
        host: Arc::clone(&state.services.host),
        principal: principal.clone(),
    };
    let done = state
        .services
        .track(None, &route, &name, &arguments, &cx, done);
    let started = Instant::now();
    state
        .services
        .start(route, name.clone(), arguments, cx, done);
    let state = Arc::clone(state);
    let spawned = slot.spawn(move || {
        // The longest a call waits: a tool's run, a bash call's inline limit, a poll.
        let wait = Duration::from_secs(CallLimits::LOCAL_HTTP.max_run_secs)
            .max(state.timing.mcp_inline_wait)
            .max(Duration::from_secs(
                crate::tools::jobs::job_tools::MAX_WAIT_SECS,
            ))
            + MCP_RESULT_SLACK;
        let output = rx.recv_timeout(wait).unwrap_or_else(|_| {
            ctl.cancel();
            ToolOutput::tool_error("the tool did not finish in time and was stopped")
        });
        let live = forget_call(&state, &session_id, &id, seq);
        let cancelled = ctl.is_cancelled() && !live;
        let (text, outcome) = form.reply(&id, output, state.limits.max_outbound_bytes);
        let outcome = if cancelled {
            Outcome::ToolError
        } else {
            outcome
        };
        state.metrics.tool_call(&name, outcome);
        state.audit.record(Record::ToolCall {
            grant_id: None,
            principal,
            session: None,
            tool: name,
            outcome,
            duration_ms: started.elapsed().as_millis() as u64,
            args: audit_args,
        });
        if cancelled {
            // notifications/cancelled: no JSON-RPC reply; HTTP still needs an answer.
            // 202 with no body, as for a notification: clients (the official TypeScript
            // SDK among them) accept it for any message, while a 204 without a
            // Content-Type is reported as an error.
            return respond(
                request,
                Response::from_data(Vec::new()).with_status_code(202),
            );
        }
        respond(
            request,
            Response::from_data(text.into_bytes())
                .with_header(header("Content-Type", "application/json")),
        )
    });
    if let Err((e, _work)) = spawned {
        warn!("/mcp: could not start a responder thread: {e}");
    }
}

/// Remove a finished call from its session's table; `false` if it was cancelled (or the
/// session ended) meanwhile.
fn forget_call(state: &AdminState, session_id: &Option<String>, id: &Value, seq: u64) -> bool {
    let Some(sid) = session_id else {
        return true;
    };
    let mut sessions = state.sessions.lock().unwrap_or_else(|e| e.into_inner());
    match sessions.get_mut(sid) {
        Some(s) => s.calls.finish(id, seq).is_some(),
        None => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_resolve_through_the_route_table() {
        let route = |m, p| Lookup::Route((m, p), "");
        assert_eq!(find_route("GET", "/healthz"), route("GET", "/healthz"));
        assert_eq!(find_route("HEAD", "/readyz"), route("HEAD", "/readyz"));
        assert_eq!(find_route("GET", "/"), route("GET", "/"));
        assert_eq!(
            find_route("GET", "/console/app.js"),
            Lookup::Route(("GET", "/console/{id}"), "app.js")
        );
        assert_eq!(
            find_route("GET", "/console/novnc/core/rfb.js"),
            Lookup::Route(("GET", "/console/novnc/{rest}"), "core/rfb.js")
        );
        assert_eq!(find_route("GET", "/console/novnc/"), Lookup::NotFound);
        assert_eq!(
            find_route("DELETE", "/attach/abc"),
            Lookup::Route(("DELETE", "/attach/{id}"), "abc")
        );
        // An empty segment is still one segment: `GET /attach/` is an unknown grant.
        assert_eq!(find_route("GET", "/attach/"), route("GET", "/attach/{id}"));
        assert_eq!(find_route("PUT", "/attach"), Lookup::WrongMethod("/attach"));
        assert_eq!(find_route("GET", "/mcp"), Lookup::WrongMethod("/mcp"));
        assert_eq!(
            find_route("POST", "/healthz"),
            Lookup::WrongMethod("/healthz")
        );
        for unknown in [
            "",
            "/attach/a/b",
            "/mcp/",
            "/attachx",
            "/ATTACH",
            "//attach",
        ] {
            assert_eq!(find_route("GET", unknown), Lookup::NotFound, "{unknown:?}");
        }
        assert_eq!(allowed_methods("/mcp"), "POST, DELETE");
        assert_eq!(allowed_methods("/healthz"), "GET, HEAD");
        for (_, path) in ROUTES {
            assert!(path.starts_with('/'), "{path}");
        }
        for path in PUBLIC_PATHS {
            assert!(ROUTES.iter().any(|(_, p)| p == path), "{path}");
        }
    }

    #[test]
    fn hosts() {
        let allow = vec!["box.tail.ts.net".to_string()];
        for ok in [
            "127.0.0.1",
            "127.0.0.1:8795",
            "localhost",
            "LOCALHOST:1",
            "[::1]:8795",
            "[::1]",
            "::1",
            "127.9.9.9",
            "box.tail.ts.net",
            "box.tail.ts.net:443",
            "a.localhost",
        ] {
            assert!(host_allowed(ok, &allow), "{ok}");
        }
        for bad in [
            "",
            "example.com",
            "10.0.0.1",
            "192.168.1.2:8795",
            "localhost.evil.com",
            "127.0.0.1.evil.com",
            "[::2]:1",
            "box.tail.ts.net.evil",
            "evil.com:127.0.0.1",
            "[::1]x",
            // Issue 35 #5: loopback in spellings no origin list names.
            "[::ffff:7f00:1]:8795",
            "[::ffff:127.0.0.1]",
            "[0:0:0:0:0:0:0:1]",
            "2130706433:8795",
            "0x7f.1",
            "0177.0.0.1",
            "127.1",
            "localhost.",
        ] {
            assert!(!host_allowed(bad, &allow), "{bad}");
        }
        assert!(!host_allowed("box.tail.ts.net", &[]));
    }
}
