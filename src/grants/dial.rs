//! One grant's thread: dial the pod, complete the WebSocket handshake, serve MCP over the
//! socket, keep it alive, and redial with backoff until the grant ends.
//!
//! The thread owns its socket; nobody else touches it. It sleeps in one `Poller` on the
//! socket and on its wake handle, so a tool result, a revoke or a renew wakes it at once,
//! and its only timers are real deadlines (grant deadline, ping, silence, write stall,
//! backoff). The framing is `link`'s; this thread decides when to read: not while more
//! than `--write-buffer-bytes` of replies are owed to a pod that does not read them; and
//! when to produce a reply that waits where its output is (`ToolOutput::Later`: a job's
//! files, a run's bytes): only under that bound, one at a time (§15).

use std::collections::VecDeque;
use std::io;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

use crossbeam_channel::{Receiver, Sender};
use log::{debug, info, warn};
use serde_json::Value;
use tungstenite::client::IntoClientRequest;
use tungstenite::handshake::HandshakeError;
use tungstenite::WebSocket;

use crate::base::secret::Secret;
use crate::base::wake::{Poller, Waker};
use crate::config::{Limits, Timing};
use crate::grants::calls::{Begun, Calls, InFlight, Services, Transport};
use crate::pool::Completion;
use crate::profiles::Profile;
use crate::tools::policy::ToolPolicy;
use crate::tools::{CallContext, CallLimits, ConnCatalog, GrantNote};
use crate::wire::link::{ws_config, Inbound, Link};
use crate::wire::mcp::{self, Dispatcher, Outcome};
use crate::wire::tls::{connect_first, ClientStream, ConnectError, SetupError};

/// The socket's key in the poller.
const SOCKET_KEY: u64 = 1;
/// Inbound messages handled per wake before results and timers get a turn, so a flood
/// from the pod cannot starve replies.
const MAX_READS_PER_TURN: usize = 256;
/// Longest we keep trying to flush our own close frame before dropping the socket.
const CLOSE_FLUSH_LIMIT: Duration = Duration::from_millis(500);

/// The pod's attach endpoint for a runtime URL and session: one trailing `/` removed.
pub fn attach_url(runtime: &str, session: &str) -> String {
    let base = runtime.strip_suffix('/').unwrap_or(runtime);
    format!("{base}/tools/attach/{session}")
}

/// Why a grant ended. The wire names are in the contract (§1.2).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum EndReason {
    /// The pod closed 4001.
    GrantExpired,
    /// The pod closed 4002, or a `POST /attach` with a different profile or lists replaced
    /// this grant.
    Replaced,
    /// The pod closed 4004.
    SessionEnded,
    /// The pod closed 4010.
    Revoked,
    /// The pod refused the upgrade with a status that will not change by retrying.
    HandshakeRejected(u16),
    /// `DELETE /attach/{id}` here.
    Cancelled,
    /// Our own TTL ran out.
    Deadline,
    /// The grant thread panicked (a bug); caught where it was spawned.
    InternalError,
}

impl EndReason {
    pub fn as_string(&self) -> String {
        match self {
            EndReason::GrantExpired => "grant_expired".into(),
            EndReason::Replaced => "replaced".into(),
            EndReason::SessionEnded => "session_ended".into(),
            EndReason::Revoked => "revoked".into(),
            EndReason::HandshakeRejected(status) => format!("handshake_rejected_{status}"),
            EndReason::Cancelled => "cancelled".into(),
            EndReason::Deadline => "deadline".into(),
            EndReason::InternalError => "internal_error".into(),
        }
    }
}

/// What to do after a close or a refused handshake.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Disposition {
    Redial,
    Stop(EndReason),
}

/// Close codes from the pod that end the grant, and the reason it ends with; every other
/// code redials. `docs/protocol.md` must name each (`tests/protocol_doc.rs`).
pub const STOPPING_CLOSES: [(u16, EndReason); 4] = [
    (4001, EndReason::GrantExpired),
    (4002, EndReason::Replaced),
    (4004, EndReason::SessionEnded),
    (4010, EndReason::Revoked),
];

/// The closes for the pod's framing violations are `link`'s, which detects them.
pub use crate::wire::link::{OurClose, CLOSE_BAD_UTF8, CLOSE_TOO_LARGE};

/// Revoked or replaced here: the grant ends and is never redialled.
pub const CLOSE_ENDED: OurClose = OurClose {
    code: 1000,
    reason: "grant ended",
};
/// The grant's own deadline passed.
pub const CLOSE_DEADLINE: OurClose = OurClose {
    code: 1000,
    reason: "grant deadline",
};
/// The daemon is stopping; the grant stays on disk and resumes at the next start.
/// The lender halted everything (§22).
pub const CLOSE_HALTED: OurClose = OurClose {
    code: 1000,
    reason: "halted",
};

pub const CLOSE_SHUTDOWN: OurClose = OurClose {
    code: 1001,
    reason: "handnode shutting down",
};
/// Every close frame we send. `docs/protocol.md` must name each code.
pub const SENT_CLOSES: [OurClose; 6] = [
    CLOSE_ENDED,
    CLOSE_DEADLINE,
    CLOSE_HALTED,
    CLOSE_SHUTDOWN,
    CLOSE_BAD_UTF8,
    CLOSE_TOO_LARGE,
];

/// Close codes from the pod: those of [`STOPPING_CLOSES`] end the grant, everything else
/// redials.
pub fn close_disposition(code: u16) -> Disposition {
    STOPPING_CLOSES
        .iter()
        .find(|(c, _)| *c == code)
        .map_or(Disposition::Redial, |(_, reason)| {
            Disposition::Stop(reason.clone())
        })
}

/// Handshake statuses: 101, 2xx, 429 and 5xx are passing trouble; anything else means
/// the pod will not take this secret, so dialling again would only repeat the refusal.
pub fn handshake_disposition(status: u16) -> Disposition {
    match status {
        101 | 200..=299 | 429 | 500..=599 => Disposition::Redial,
        other => Disposition::Stop(EndReason::HandshakeRejected(other)),
    }
}

/// The delay before redial number `attempt` (0-based): base·2^attempt capped, then
/// scaled by `jitter` (expected in 0.8..=1.2).
pub fn backoff_delay(timing: &Timing, attempt: u32, jitter: f64) -> Duration {
    let factor = 2u32.saturating_pow(attempt.min(20));
    let raw = timing
        .backoff_base
        .saturating_mul(factor)
        .min(timing.backoff_cap);
    raw.mul_f64(jitter.clamp(0.8, 1.2))
}

/// A uniformly random factor in 0.8..=1.2 (±20 % jitter).
fn jitter() -> f64 {
    let mut bytes = [0u8; 4];
    if getrandom::fill(&mut bytes).is_err() {
        return 1.0;
    }
    0.8 + 0.4 * (u32::from_ne_bytes(bytes) as f64 / u32::MAX as f64)
}

/// Where the grant thread is, as `GET /attach` shows it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum State {
    Idle,
    Dialing,
    Attached,
    Redialing,
    /// The lender halted everything (§22): no socket, no dial, the deadline still runs.
    Halted,
    Ended,
}

impl State {
    pub fn as_str(self) -> &'static str {
        match self {
            State::Idle => "idle",
            State::Dialing => "dialing",
            State::Attached => "attached",
            State::Redialing => "redialing",
            State::Halted => "halted",
            State::Ended => "ended",
        }
    }
}

/// What the grant thread publishes about itself.
#[derive(Clone, Debug)]
pub struct Status {
    pub state: State,
    pub redial_at: Option<Instant>,
    pub ended: Option<EndReason>,
    pub calls: u64,
    pub last_error: Option<String>,
    /// Dial attempts made (handshakes started).
    pub dials: u64,
    /// A renewal brought a different secret that no handshake has used yet: which one
    /// ("the renewal at <time> by <principal>"), so a refusal of it says where it came from.
    pub untried_renewal: Option<String>,
}

impl Default for Status {
    fn default() -> Self {
        Status {
            state: State::Idle,
            redial_at: None,
            ended: None,
            calls: 0,
            last_error: None,
            dials: 0,
            untried_renewal: None,
        }
    }
}

/// Messages to a grant thread. The sender always wakes the thread afterwards.
#[derive(Debug)]
pub enum Command {
    /// Same target, profile and lists asked again: new secret for future dials, new deadline,
    /// new principal; dial now if waiting to redial.
    Renew {
        secret: Secret,
        deadline: SystemTime,
        principal: String,
    },
    /// End the grant: close 1000 and never redial.
    End(EndReason),
    /// The daemon is stopping: close 1001; the grant stays live on disk and resumes.
    Shutdown,
    /// The halt switch (§22) changed: look at it now.
    HaltChanged,
}

/// A tool call's reply, addressed to the connection and call that asked for it. It is
/// serialized by the thread that produced the output, so a grant thread never holds the
/// output and its text at once, and megabyte buffers stay out of the grant threads' malloc
/// arenas (there may be a hundred of them).
#[derive(Debug)]
pub struct Finished {
    conn: u64,
    id: Value,
    seq: u64,
    reply: Reply,
}

/// A finished call's reply: serialized, or to be produced when the socket has room (§15).
#[derive(Debug)]
enum Reply {
    Text {
        text: String,
        outcome: Outcome,
    },
    /// Produced later, framed by its request's revision (`form`).
    Later(mcp::Later, mcp::Form),
}

/// A reply owed and not yet produced: the call keeps its in-flight slot until then, so
/// these are bounded by the in-flight cap.
#[derive(Debug)]
struct Owed {
    id: Value,
    seq: u64,
    later: mcp::Later,
    form: mcp::Form,
}

/// A finished tool call, for the audit log and metrics.
#[derive(Clone, Debug)]
pub struct CallEvent {
    pub grant_id: String,
    pub principal: String,
    pub session: String,
    pub tool: String,
    pub outcome: Outcome,
    pub duration: Duration,
    pub arguments: Option<Value>,
}

/// Hooks the grant thread reports through; implemented by the registry.
pub trait GrantEvents: Send + Sync {
    /// The grant ended on its own (pod close code, rejection, deadline). Not called for
    /// `Command::End` (the sender already knows) nor on shutdown.
    fn ended(&self, grant_id: &str, reason: &EndReason);
    fn tool_call(&self, event: CallEvent);
    /// A WebSocket close arrived from the pod with this code, or we sent one.
    fn closed(&self, _code: u16) {}
    fn dialed(&self) {}
    /// A dial failed before the socket was attached (refused, unreachable, timed out).
    fn dial_failed(&self) {}
    /// Attached (first inbound frame) or detached (socket lost).
    fn attachment(&self, _grant_id: &str, _attached: bool) {}
    fn bytes(&self, _inbound: u64, _outbound: u64) {}
}

/// The fixed facts of one grant, as its thread needs them.
#[derive(Clone, Debug)]
pub struct GrantSpec {
    pub id: String,
    pub runtime: String,
    pub session: String,
    /// What the grant may use; never changes in place (a different one is a replace).
    pub policy: Arc<ToolPolicy>,
    pub principal: String,
    pub secret: Secret,
    pub deadline: SystemTime,
}

/// Everything the thread is started with.
pub struct GrantThread {
    pub spec: GrantSpec,
    pub commands: Receiver<Command>,
    pub poller: Poller,
    pub status: Arc<Mutex<Status>>,
    pub services: Arc<Services>,
    pub events: Arc<dyn GrantEvents>,
    pub tls: Arc<rustls::ClientConfig>,
    pub timing: Timing,
    pub limits: Limits,
    pub audit_args: bool,
    /// Which calls wait for a person's decision, and where they wait (§10).
    pub approvals: crate::grants::approvals::GrantApprovals,
}

/// How one connection ended.
#[derive(Debug)]
enum ConnEnd {
    /// The pod closed with this code (1005 when it gave none).
    Closed(u16),
    /// The handshake was answered with this HTTP status.
    Status(u16),
    /// Network trouble, a timeout, a dead socket: redial.
    Lost(String),
    /// A command or the deadline ended the thread's work.
    Exit(Exit),
    /// The lender halted: every call was answered and the socket closed; wait for resume.
    Halted,
}

/// What draining the command channel found.
struct Taken {
    renewed: bool,
    exit: Option<Exit>,
}

#[derive(Debug)]
enum Exit {
    End(EndReason),
    Shutdown,
}

impl GrantThread {
    /// Run until the grant ends or the daemon shuts down.
    pub fn run(mut self) {
        let mut attempt: u32 = 0;
        let mut conn: u64 = 0;
        loop {
            if let Some(exit) = self.take_commands_while_idle() {
                return self.exit(exit);
            }
            if SystemTime::now() >= self.spec.deadline {
                return self.exit(Exit::End(EndReason::Deadline));
            }
            if self.services.halt.is_halted() {
                match self.wait_while_halted() {
                    Ok(()) => {
                        attempt = 0;
                        continue;
                    }
                    Err(exit) => return self.exit(exit),
                }
            }
            self.set_state(State::Dialing, None);
            self.status.lock().unwrap_or_else(|e| e.into_inner()).dials += 1;
            self.events.dialed();
            conn += 1;
            let mut attached_for = Duration::ZERO;
            let end = match self.connect() {
                Ok(ws) => {
                    // The pod took the secret: a renewal's secret is tried now.
                    self.status
                        .lock()
                        .unwrap_or_else(|e| e.into_inner())
                        .untried_renewal = None;
                    self.serve(ws, conn, &mut attached_for)
                }
                Err(end) => {
                    if !matches!(end, ConnEnd::Exit(_)) {
                        self.events.dial_failed();
                    }
                    end
                }
            };
            let error = match end {
                ConnEnd::Exit(exit) => return self.exit(exit),
                ConnEnd::Halted => continue,
                ConnEnd::Closed(code) => match close_disposition(code) {
                    Disposition::Stop(reason) => return self.exit(Exit::End(reason)),
                    Disposition::Redial => format!("closed {code}"),
                },
                ConnEnd::Status(status) => match handshake_disposition(status) {
                    Disposition::Stop(reason) => {
                        let renewal = self
                            .status
                            .lock()
                            .unwrap_or_else(|e| e.into_inner())
                            .untried_renewal
                            .take();
                        self.set_last_error(match renewal {
                            Some(renewal) => format!(
                                "handshake {status}: the pod refused the new secret from {renewal} (it was first used at this dial)"
                            ),
                            None => format!("handshake {status}"),
                        });
                        return self.exit(Exit::End(reason));
                    }
                    Disposition::Redial => format!("handshake {status}"),
                },
                ConnEnd::Lost(msg) => msg,
            };
            info!("grant {}: {error}; will redial", self.spec.id);
            self.set_last_error(error);
            if attached_for >= self.timing.backoff_reset {
                attempt = 0;
            }
            let delay = backoff_delay(&self.timing, attempt, jitter());
            attempt = attempt.saturating_add(1);
            match self.wait_to_redial(delay) {
                Ok(renewed) => {
                    if renewed {
                        attempt = 0;
                    }
                }
                Err(exit) => return self.exit(exit),
            }
        }
    }

    fn set_state(&self, state: State, redial_at: Option<Instant>) {
        let mut status = self.status.lock().unwrap_or_else(|e| e.into_inner());
        if status.state == State::Ended {
            return;
        }
        status.state = state;
        status.redial_at = redial_at;
    }

    fn set_last_error(&self, error: String) {
        self.status
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .last_error = Some(error);
    }

    fn exit(self, exit: Exit) {
        // A grant's browser lives as long as its thread: it survives redials, and goes
        // when the grant ends and when the daemon stops (it is throwaway either way).
        if self.spec.policy.profile() == Profile::Browser {
            if let Some(browsers) = &self.services.browsers {
                browsers.end_grant(&self.spec.id);
            }
        }
        match exit {
            Exit::Shutdown => debug!("grant {}: thread stopped for shutdown", self.spec.id),
            Exit::End(reason) => {
                let already_ended = {
                    let mut status = self.status.lock().unwrap_or_else(|e| e.into_inner());
                    let already = status.state == State::Ended;
                    status.state = State::Ended;
                    status.redial_at = None;
                    if status.ended.is_none() {
                        status.ended = Some(reason.clone());
                    }
                    already
                };
                info!("grant {} ended: {}", self.spec.id, reason.as_string());
                if !already_ended {
                    self.events.ended(&self.spec.id, &reason);
                }
            }
        }
    }

    fn apply_renew(&mut self, secret: Secret, deadline: SystemTime, principal: String) {
        if !self.spec.secret.matches(secret.expose()) {
            self.status
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .untried_renewal = Some(format!(
                "the renewal at {} by {principal}",
                crate::base::timefmt::rfc3339(crate::base::timefmt::now_unix())
            ));
        }
        self.spec.secret = secret;
        self.spec.deadline = deadline;
        self.spec.principal = principal;
    }

    /// Apply every queued command. Renews are applied in place; the first `End` or
    /// `Shutdown` stops the draining and is returned.
    fn take_commands(&mut self) -> Taken {
        let mut renewed = false;
        while let Ok(cmd) = self.commands.try_recv() {
            match cmd {
                Command::Renew {
                    secret,
                    deadline,
                    principal,
                } => {
                    self.apply_renew(secret, deadline, principal);
                    renewed = true;
                }
                Command::End(reason) => {
                    return Taken {
                        renewed,
                        exit: Some(Exit::End(reason)),
                    }
                }
                Command::Shutdown => {
                    return Taken {
                        renewed,
                        exit: Some(Exit::Shutdown),
                    }
                }
                // Read where it matters: the run loop's top and each serving turn.
                Command::HaltChanged => {}
            }
        }
        Taken {
            renewed,
            exit: None,
        }
    }

    /// Commands that arrive while no socket is open. Returns the exit they ask for.
    fn take_commands_while_idle(&mut self) -> Option<Exit> {
        self.take_commands().exit
    }

    fn until_deadline(&self) -> Duration {
        self.spec
            .deadline
            .duration_since(SystemTime::now())
            .unwrap_or(Duration::ZERO)
    }

    /// Halted (§22): no socket and no dial until resume, waking for commands; the deadline
    /// keeps running.
    fn wait_while_halted(&mut self) -> Result<(), Exit> {
        self.set_state(State::Halted, None);
        info!("grant {}: halted; waiting for resume", self.spec.id);
        loop {
            if let Some(exit) = self.take_commands().exit {
                return Err(exit);
            }
            if !self.services.halt.is_halted() {
                info!("grant {}: resumed", self.spec.id);
                return Ok(());
            }
            let left = self.until_deadline();
            if left.is_zero() {
                return Err(Exit::End(EndReason::Deadline));
            }
            self.poller.wait(Some(left)).map_err(|e| {
                warn!("grant {}: poll failed: {e}", self.spec.id);
                Exit::Shutdown
            })?;
        }
    }

    /// Sleep until the redial time, waking for commands. `Ok(true)` = a renew arrived
    /// (dial now with reset backoff).
    fn wait_to_redial(&mut self, delay: Duration) -> Result<bool, Exit> {
        if delay >= self.until_deadline() {
            return Err(Exit::End(EndReason::Deadline));
        }
        let redial_at = Instant::now() + delay;
        self.set_state(State::Redialing, Some(redial_at));
        loop {
            let now = Instant::now();
            if now >= redial_at {
                return Ok(false);
            }
            self.poller.wait(Some(redial_at - now)).map_err(|e| {
                warn!("grant {}: poll failed: {e}", self.spec.id);
                Exit::Shutdown
            })?;
            let taken = self.take_commands();
            if let Some(exit) = taken.exit {
                return Err(exit);
            }
            if taken.renewed {
                // A renew while waiting: dial now with the new secret.
                return Ok(true);
            }
        }
    }

    /// TCP connect (blocking, bounded by the connect timeout) and then the TLS +
    /// WebSocket handshake on a non-blocking socket, so commands still wake us.
    fn connect(&mut self) -> Result<WebSocket<ClientStream>, ConnEnd> {
        let url = attach_url(&self.spec.runtime, &self.spec.session);
        let ep = crate::base::url::endpoint(&url).map_err(ConnEnd::Lost)?;
        // URL schemes are case-insensitive and validation accepts `WS://`, but tungstenite
        // only takes a lowercase scheme: without this such a grant redials forever.
        let url = match url.split_once("://") {
            Some((_, rest)) if ep.tls => format!("wss://{rest}"),
            Some((_, rest)) => format!("ws://{rest}"),
            None => url,
        };
        let connect_timeout = self
            .timing
            .connect_timeout
            .min(self.until_deadline().max(Duration::from_millis(1)));
        let tcp = connect_first(&ep.host, ep.port, &mut || Some(connect_timeout)).map_err(|e| {
            ConnEnd::Lost(match e {
                ConnectError::Resolve(e) => format!("cannot resolve {}: {e}", ep.host),
                ConnectError::NoAddress => format!("{} resolved to no address", ep.host),
                // Not reached: every attempt is given the connect timeout.
                ConnectError::OutOfTime => format!("connect timeout to {}", ep.host),
                ConnectError::Failed(addr, e) if e.kind() == io::ErrorKind::TimedOut => {
                    format!("connect timeout to {addr}")
                }
                ConnectError::Failed(addr, e) => format!("connect to {addr}: {e}"),
            })
        })?;
        // A command that arrived during the blocking connect wins over the handshake.
        if let Some(exit) = self.take_commands_while_idle() {
            return Err(ConnEnd::Exit(exit));
        }
        tcp.set_nonblocking(true)
            .map_err(|e| ConnEnd::Lost(format!("set non-blocking: {e}")))?;
        let stream =
            ClientStream::new(tcp, &ep.host, ep.tls.then_some(&self.tls)).map_err(|e| match e {
                SetupError::ServerName(e) => {
                    ConnEnd::Lost(format!("bad TLS server name {}: {e}", ep.host))
                }
                SetupError::Connection(e) => ConnEnd::Lost(format!("TLS setup: {e}")),
            })?;
        let mut request = url
            .as_str()
            .into_client_request()
            .map_err(|e| ConnEnd::Lost(format!("bad attach URL: {e}")))?;
        let mut auth = tungstenite::http::HeaderValue::from_str(&format!(
            "Bearer {}",
            self.spec.secret.expose()
        ))
        .map_err(|_| ConnEnd::Exit(Exit::End(EndReason::HandshakeRejected(0))))?;
        auth.set_sensitive(true);
        request.headers_mut().insert("authorization", auth);

        self.poller
            .add(&stream, SOCKET_KEY, true, false)
            .map_err(|e| ConnEnd::Lost(format!("poll register: {e}")))?;
        // On failure the stream is dropped inside, and epoll forgets a closed fd by itself.
        self.drive_handshake(request, stream)
    }

    fn drive_handshake(
        &mut self,
        request: tungstenite::handshake::client::Request,
        stream: ClientStream,
    ) -> Result<WebSocket<ClientStream>, ConnEnd> {
        let handshake_deadline = Instant::now() + self.timing.handshake_timeout;
        let mut attempt =
            tungstenite::client::client_with_config(request, stream, Some(ws_config(&self.limits)));
        loop {
            match attempt {
                Ok((ws, _response)) => return Ok(ws),
                Err(HandshakeError::Failure(tungstenite::Error::Http(response))) => {
                    return Err(ConnEnd::Status(response.status().as_u16()))
                }
                Err(HandshakeError::Failure(e)) => {
                    return Err(ConnEnd::Lost(format!("handshake failed: {e}")))
                }
                Err(HandshakeError::Interrupted(mid)) => {
                    let now = Instant::now();
                    if now >= handshake_deadline {
                        let _ = self.poller.delete(mid.get_ref().get_ref());
                        return Err(ConnEnd::Lost("handshake timeout".into()));
                    }
                    let wait = (handshake_deadline - now).min(self.until_deadline());
                    if wait.is_zero() {
                        return Err(ConnEnd::Exit(Exit::End(EndReason::Deadline)));
                    }
                    if let Err(e) = self.poller.wait(Some(wait)) {
                        return Err(ConnEnd::Lost(format!("poll: {e}")));
                    }
                    if let Some(exit) = self.take_commands_while_idle() {
                        let _ = self.poller.delete(mid.get_ref().get_ref());
                        return Err(ConnEnd::Exit(exit));
                    }
                    attempt = mid.handshake();
                }
            }
        }
    }

    /// Serve MCP on an open socket until it closes, dies, or a command/deadline ends it.
    fn serve(
        &mut self,
        ws: WebSocket<ClientStream>,
        conn: u64,
        attached_for: &mut Duration,
    ) -> ConnEnd {
        let mut link = Link::new(ws);
        let (results_tx, results_rx) = crossbeam_channel::unbounded::<Finished>();
        let waker = self.poller.waker();
        let mut calls = Calls::new(self.limits.max_in_flight);
        let mut owed: VecDeque<Owed> = VecDeque::new();
        let mut dispatcher = Dispatcher::new();
        let mut last_inbound = Instant::now();
        let mut next_ping = last_inbound + self.timing.ping_interval;
        let mut attached_at: Option<Instant> = None;
        let frame = FrameCx {
            conn,
            results: &results_tx,
            waker: &waker,
        };
        // What epoll watches the socket for: reads unless paused, writes while stuck.
        let mut interest = (true, false);
        let end = loop {
            // Commands first: a revoke must not wait behind a flood of frames.
            if let Some(end) = self.serve_commands(&mut link) {
                break end;
            }
            if self.services.halt.is_halted() {
                self.halt_connection(&mut link, &mut calls);
                break ConnEnd::Halted;
            }
            // Results. One already serialized is in memory anyway (bounded by the in-flight
            // cap and its tool's own cap), so it is queued even while paused. One produced
            // later (a job's output, still in its files) waits, holding its call's slot,
            // until the socket has taken what it owes: then the replies held here stay
            // within --write-buffer-bytes plus the one being produced (§15).
            let mut finished = Vec::new();
            while let Ok(done) = results_rx.try_recv() {
                if done.conn != conn {
                    continue;
                }
                let (text, outcome) = match done.reply {
                    Reply::Text { text, outcome } => (text, outcome),
                    Reply::Later(later, form) => {
                        owed.push_back(Owed {
                            id: done.id,
                            seq: done.seq,
                            later,
                            form,
                        });
                        continue;
                    }
                };
                let Some(call) = calls.finish(&done.id, done.seq) else {
                    continue;
                };
                finished.push(self.finished_event(call, outcome));
                self.send_text(&mut link, text);
            }
            while !self.paused(&link) {
                let Some(next) = owed.pop_front() else { break };
                // A call cancelled meanwhile is not produced at all.
                let Some(call) = calls.finish(&next.id, next.seq) else {
                    continue;
                };
                let (text, outcome) = next.form.reply(
                    &next.id,
                    mcp::ToolOutput::Later(next.later),
                    self.limits.max_outbound_bytes,
                );
                finished.push(self.finished_event(call, outcome));
                self.send_text(&mut link, text);
                // Hand it to the socket now, so what is owed shrinks as the pod reads.
                // (A write error shows again at the pump below, which ends the connection.)
                if link.pump(false).is_err() {
                    break;
                }
            }
            if !finished.is_empty() {
                // Replies go out before the calls are reported: the audit record wakes the
                // audit thread, and waking a thread on an idle CPU of a VM costs more than
                // the whole reply. A stuck socket is dealt with at the turn's end.
                if let Err(e) = link.pump(true) {
                    break ConnEnd::Lost(format!("write failed: {e}"));
                }
                for event in finished {
                    self.events.tool_call(event);
                }
            }
            // Inbound frames, unless the pod is not taking what it is owed: then its
            // requests wait in the socket (and in the pod) instead of as replies here.
            let mut reads = 0;
            let read_end = loop {
                if reads >= MAX_READS_PER_TURN || self.paused(&link) {
                    break None;
                }
                let inbound = link.read();
                if inbound == Inbound::Idle {
                    break None;
                }
                reads += 1;
                last_inbound = Instant::now();
                if attached_at.is_none() {
                    attached_at = Some(last_inbound);
                    self.set_state(State::Attached, None);
                    self.events.attachment(&self.spec.id, true);
                    info!("grant {} attached", self.spec.id);
                }
                match inbound {
                    Inbound::Data(bytes) => {
                        self.events.bytes(bytes.len() as u64, 0);
                        self.handle_frame(&mut link, &mut dispatcher, &mut calls, &bytes, &frame);
                        drop(bytes);
                        if let Err(e) = link.pump(false) {
                            break Some(ConnEnd::Lost(format!("write failed: {e}")));
                        }
                    }
                    Inbound::Idle | Inbound::Control => {}
                    Inbound::Closed(code) => {
                        self.events.closed(code);
                        break Some(ConnEnd::Closed(code));
                    }
                    Inbound::Violation { close, error } => {
                        self.close(&mut link, close);
                        break Some(ConnEnd::Lost(error));
                    }
                    Inbound::Lost(error) => break Some(ConnEnd::Lost(error)),
                }
            };
            if let Some(end) = read_end {
                break end;
            }
            // Timers.
            let now = Instant::now();
            if SystemTime::now() >= self.spec.deadline {
                self.close(&mut link, CLOSE_DEADLINE);
                break ConnEnd::Exit(Exit::End(EndReason::Deadline));
            }
            if self.paused(&link) {
                // Not reading is our choice, not the pod's silence.
                last_inbound = now;
            } else if now.duration_since(last_inbound) >= self.timing.silence_limit {
                break ConnEnd::Lost(format!(
                    "silence timeout: no frame for {} ms",
                    self.timing.silence_limit.as_millis()
                ));
            }
            if let Some(since) = link.stuck_since() {
                if now.duration_since(since) >= self.timing.write_stall {
                    let error = format!(
                        "write stall: our output waited {} ms for the pod to read it ({} bytes owed); dropped",
                        self.timing.write_stall.as_millis(),
                        link.queued_bytes()
                    );
                    warn!("grant {}: {error}", self.spec.id);
                    break ConnEnd::Lost(error);
                }
            }
            if now >= next_ping {
                if let Err(e) = link.ping() {
                    break ConnEnd::Lost(format!("ping failed: {e}"));
                }
                next_ping = now + self.timing.ping_interval;
            }
            // Write whatever is owed; ask for writability only while something is stuck,
            // and for readability only while not paused.
            if let Err(e) = link.pump(true) {
                break ConnEnd::Lost(format!("write failed: {e}"));
            }
            let want = (!self.paused(&link), link.stuck_since().is_some());
            if want != interest {
                interest = want;
                let _ = self
                    .poller
                    .modify(link.socket(), SOCKET_KEY, want.0, want.1);
            }
            if reads >= MAX_READS_PER_TURN && want.0 {
                continue;
            }
            // The socket took enough to produce the next owed reply: no need to sleep.
            if !owed.is_empty() && !self.paused(&link) {
                continue;
            }
            let now = Instant::now();
            let mut timeout = [
                self.until_deadline(),
                next_ping.saturating_duration_since(now),
                (last_inbound + self.timing.silence_limit).saturating_duration_since(now),
            ]
            .into_iter()
            .min()
            .unwrap_or(Duration::ZERO);
            if let Some(since) = link.stuck_since() {
                timeout =
                    timeout.min((since + self.timing.write_stall).saturating_duration_since(now));
            }
            // Whatever woke us (socket, wake handle, timer), the next turn checks all of
            // commands, results, frames and timers, so the readiness list itself is unused.
            if let Err(e) = self.poller.wait(Some(timeout)) {
                break ConnEnd::Lost(format!("poll: {e}"));
            }
        };
        let _ = self.poller.delete(link.socket());
        let cancelled = calls.cancel_all();
        for call in &cancelled {
            // A held call never ran: withdrawn with its socket.
            if self.approvals.withdraw(&call.ctl) {
                self.events
                    .tool_call(self.call_event(call, Outcome::NotApproved));
            }
        }
        if !cancelled.is_empty() {
            debug!(
                "grant {}: connection lost with {} calls in flight; their process groups were killed",
                self.spec.id,
                cancelled.len()
            );
        }
        if let Some(at) = attached_at {
            *attached_for = at.elapsed();
            self.events.attachment(&self.spec.id, false);
        }
        end
    }

    /// The audit/metrics event of a call whose reply was just queued.
    fn finished_event(&self, call: crate::grants::calls::InFlight, outcome: Outcome) -> CallEvent {
        CallEvent {
            grant_id: self.spec.id.clone(),
            principal: self.spec.principal.clone(),
            session: self.spec.session.clone(),
            tool: call.tool,
            outcome,
            duration: call.started.elapsed(),
            arguments: call.arguments,
        }
    }

    /// Reading is paused while more than `--write-buffer-bytes` of replies are owed.
    fn paused(&self, link: &Link<ClientStream>) -> bool {
        link.queued_bytes() > self.limits.write_buffer_bytes
    }

    /// The audit/metrics event of a call that ended without a reply.
    fn call_event(&self, call: &InFlight, outcome: Outcome) -> CallEvent {
        CallEvent {
            grant_id: self.spec.id.clone(),
            principal: self.spec.principal.clone(),
            session: self.spec.session.clone(),
            tool: call.tool.clone(),
            outcome,
            duration: call.started.elapsed(),
            arguments: None,
        }
    }

    /// The lender halted (§22): answer every call in flight (held ones too) with the
    /// halt's text, kill what they run, and close 1000 `halted`.
    fn halt_connection(&mut self, link: &mut Link<ClientStream>, calls: &mut Calls) {
        let answer = self.services.halt.answer();
        let taken = calls.take_all();
        for (id, call) in taken {
            let held = self.approvals.withdraw(&call.ctl);
            let form = call.form.unwrap_or(mcp::Form::DEFAULT);
            let (text, _) = form.reply(
                &id,
                mcp::ToolOutput::tool_error(answer.clone()),
                self.limits.max_outbound_bytes,
            );
            self.send_text(link, text);
            let outcome = if held {
                Outcome::NotApproved
            } else {
                Outcome::ToolError
            };
            self.events.tool_call(self.call_event(&call, outcome));
        }
        let _ = link.pump(true);
        self.close(link, CLOSE_HALTED);
        info!("grant {}: halted: {answer}", self.spec.id);
    }

    fn serve_commands(&mut self, link: &mut Link<ClientStream>) -> Option<ConnEnd> {
        let exit = self.take_commands().exit?;
        match exit {
            Exit::End(_) => self.close(link, CLOSE_ENDED),
            Exit::Shutdown => self.close(link, CLOSE_SHUTDOWN),
        }
        Some(ConnEnd::Exit(exit))
    }

    /// Queue our close frame and push it out promptly; the pod must see it, but we do not
    /// wait for its reply. Replies still owed are abandoned.
    fn close(&self, link: &mut Link<ClientStream>, close: OurClose) {
        let _ = link.close(close);
        let until = Instant::now() + CLOSE_FLUSH_LIMIT;
        while link.stuck_since().is_some() && Instant::now() < until {
            // The send buffer is full; briefly wait for room rather than drop the frame.
            let mut fds = [rustix::event::PollFd::new(
                link.socket(),
                rustix::event::PollFlags::OUT,
            )];
            let ts = rustix::event::Timespec {
                tv_sec: 0,
                tv_nsec: 50_000_000,
            };
            let _ = rustix::event::poll(&mut fds, Some(&ts));
            if link.try_flush().is_err() {
                break;
            }
        }
        self.events.closed(close.code);
    }

    fn send_text(&self, link: &mut Link<ClientStream>, text: String) {
        self.events.bytes(0, text.len() as u64);
        link.queue(text);
    }

    /// Dispatch one inbound message: replies are queued on `link`, tool calls started.
    fn handle_frame(
        &mut self,
        link: &mut Link<ClientStream>,
        dispatcher: &mut Dispatcher,
        calls: &mut Calls,
        bytes: &[u8],
        cx: &FrameCx<'_>,
    ) {
        let note = GrantNote {
            id: self.spec.id.clone(),
            session: self.spec.session.clone(),
            expires_at: self
                .spec
                .deadline
                .duration_since(SystemTime::UNIX_EPOCH)
                .map(|d| d.as_secs())
                .unwrap_or(0),
            approve: self.approvals.gate.waiting_tools(),
            approval_wait: self.timing.approval_timeout,
        };
        let actions = {
            let catalog = ConnCatalog {
                grant: Some(&note),
                upstream: self.services.upstream.as_deref(),
                browsers: self
                    .services
                    .browsers
                    .as_deref()
                    .map(|b| b as &dyn crate::tools::BrowserTier),
                policy: &self.spec.policy,
            };
            dispatcher.handle(bytes, &catalog)
        };
        calls.apply(
            actions,
            &mut GrantFrame {
                thread: self,
                link,
                cx,
                note: &note,
            },
        );
    }

    /// Start a call the pod asked for: tracked, then run or held for a person's decision.
    fn start_call(&mut self, call: Begun, cx: &FrameCx<'_>, note: &GrantNote) {
        let Begun {
            id,
            name,
            route,
            arguments,
            form,
            seq,
            ctl,
        } = call;
        self.status.lock().unwrap_or_else(|e| e.into_inner()).calls += 1;
        let tx = cx.results.clone();
        let wake = Arc::clone(cx.waker);
        let conn = cx.conn;
        let reply_id = id;
        let max_outbound = self.limits.max_outbound_bytes;
        let done = Completion::new(move |output| {
            let reply = match output {
                mcp::ToolOutput::Later(later) => Reply::Later(later, form),
                output => {
                    let (text, outcome) = form.reply(&reply_id, output, max_outbound);
                    Reply::Text { text, outcome }
                }
            };
            let _ = tx.send(Finished {
                conn,
                id: reply_id,
                seq,
                reply,
            });
            wake.wake();
        });
        let cx = CallContext {
            policy: Arc::clone(&self.spec.policy),
            grant: Some(note.clone()),
            limits: CallLimits {
                inline_wait: self.timing.inline_wait,
                ..CallLimits::GRANT
            },
            ctl,
            host: Arc::clone(&self.services.host),
            principal: self.spec.principal.clone(),
        };
        let done = self
            .services
            .track(Some(&self.spec.id), &route, &name, &arguments, &cx, done);
        let asker = crate::grants::approvals::Asker {
            grant_id: &self.spec.id,
            principal: &self.spec.principal,
            session: &self.spec.session,
            profile: self.spec.policy.profile(),
        };
        self.approvals
            .start(&self.services, asker, (route, name, arguments), cx, done);
    }
}

/// One inbound frame's actions on a grant's socket: replies are queued on the link, a
/// cancelled call's held approval is withdrawn, and calls are recorded through `events`.
struct GrantFrame<'a, 'b> {
    thread: &'a mut GrantThread,
    link: &'a mut Link<ClientStream>,
    cx: &'a FrameCx<'b>,
    note: &'a GrantNote,
}

impl Transport for GrantFrame<'_, '_> {
    fn grant(&self) -> Option<&str> {
        Some(&self.thread.spec.id)
    }

    fn journal(&self) -> &crate::journal::Journal {
        &self.thread.services.journal
    }

    fn keeps_arguments(&self) -> bool {
        self.thread.audit_args
    }

    fn reply(&mut self, text: String) {
        self.thread.send_text(self.link, text);
    }

    fn start(&mut self, call: Begun) {
        self.thread.start_call(call, self.cx, self.note);
    }

    fn cancelled(&mut self, _id: &Value, call: InFlight) {
        let outcome = if self.thread.approvals.withdraw(&call.ctl) {
            Outcome::NotApproved
        } else {
            Outcome::ToolError
        };
        self.thread
            .events
            .tool_call(self.thread.call_event(&call, outcome));
    }

    fn refused(&mut self, tool: String, outcome: Outcome) {
        let spec = &self.thread.spec;
        self.thread.events.tool_call(CallEvent {
            grant_id: spec.id.clone(),
            principal: spec.principal.clone(),
            session: spec.session.clone(),
            tool,
            outcome,
            duration: Duration::ZERO,
            arguments: None,
        })
    }
}

/// What a message's tool calls need to send their replies back to this connection.
struct FrameCx<'a> {
    conn: u64,
    results: &'a Sender<Finished>,
    waker: &'a Arc<Waker>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use tungstenite::protocol::frame::coding::CloseCode;

    #[test]
    fn attach_url_drops_one_trailing_slash() {
        assert_eq!(
            attach_url("ws://h:9/base/", "x"),
            "ws://h:9/base/tools/attach/x"
        );
        assert_eq!(attach_url("ws://h:9", "x"), "ws://h:9/tools/attach/x");
        assert_eq!(attach_url("ws://h:9//", "x"), "ws://h:9//tools/attach/x");
    }

    #[test]
    fn backoff_doubles_caps_and_jitters() {
        let t = Timing::default();
        assert_eq!(backoff_delay(&t, 0, 1.0), Duration::from_secs(1));
        assert_eq!(backoff_delay(&t, 1, 1.0), Duration::from_secs(2));
        assert_eq!(backoff_delay(&t, 4, 1.0), Duration::from_secs(16));
        assert_eq!(backoff_delay(&t, 5, 1.0), Duration::from_secs(30));
        assert_eq!(backoff_delay(&t, 63, 1.0), Duration::from_secs(30));
        assert_eq!(backoff_delay(&t, 0, 0.8), Duration::from_millis(800));
        assert_eq!(backoff_delay(&t, 0, 1.2), Duration::from_millis(1200));
        assert_eq!(
            backoff_delay(&t, 0, 5.0),
            Duration::from_millis(1200),
            "jitter is clamped"
        );
        for _ in 0..1000 {
            let j = jitter();
            assert!((0.8..=1.2).contains(&j), "{j}");
        }
    }

    #[test]
    fn the_closes_we_send_are_the_standard_codes() {
        assert_eq!(CloseCode::from(CLOSE_ENDED.code), CloseCode::Normal);
        assert_eq!(CloseCode::from(CLOSE_DEADLINE.code), CloseCode::Normal);
        assert_eq!(CloseCode::from(CLOSE_SHUTDOWN.code), CloseCode::Away);
        assert_eq!(CloseCode::from(CLOSE_BAD_UTF8.code), CloseCode::Invalid);
        assert_eq!(CloseCode::from(CLOSE_TOO_LARGE.code), CloseCode::Size);
        for (code, reason) in &STOPPING_CLOSES {
            assert_eq!(close_disposition(*code), Disposition::Stop(reason.clone()));
        }
        // None of ours would end a grant if a pod echoed it back.
        for close in SENT_CLOSES {
            assert_eq!(
                close_disposition(close.code),
                Disposition::Redial,
                "{close:?}"
            );
        }
    }

    #[test]
    fn end_reason_wire_names() {
        assert_eq!(
            EndReason::HandshakeRejected(401).as_string(),
            "handshake_rejected_401"
        );
        assert_eq!(EndReason::GrantExpired.as_string(), "grant_expired");
        assert_eq!(EndReason::SessionEnded.as_string(), "session_ended");
        assert_eq!(EndReason::Deadline.as_string(), "deadline");
        assert_eq!(EndReason::Cancelled.as_string(), "cancelled");
        assert_eq!(EndReason::InternalError.as_string(), "internal_error");
    }

    /// The vectors of `tests/conformance/reverse_attach_vectors.json` (the repository's
    /// copy of the conformance vectors; see `tests/conformance.rs`).
    #[test]
    fn reverse_attach_vectors() {
        let path = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/tests/conformance/reverse_attach_vectors.json"
        );
        let text = std::fs::read_to_string(path)
            .expect("reverse_attach_vectors.json vendored under tests/conformance");
        let v: Value = serde_json::from_str(&text).unwrap();
        let stop_name = |r: &EndReason| match r {
            EndReason::GrantExpired => "grantExpired",
            EndReason::Replaced => "replaced",
            EndReason::SessionEnded => "sessionEnded",
            EndReason::Revoked => "revoked",
            _ => "other",
        };
        let mut n = 0;
        for case in v["close_code"].as_array().unwrap() {
            let code = case["code"].as_u64().unwrap() as u16;
            let got = close_disposition(code);
            match (&case["expect"]["stop"], &case["expect"]["redial"]) {
                (Value::String(want), _) => match got {
                    Disposition::Stop(r) => assert_eq!(stop_name(&r), want, "close {code}"),
                    other => panic!("close {code}: {other:?}"),
                },
                (_, Value::Bool(true)) => assert_eq!(got, Disposition::Redial, "close {code}"),
                other => panic!("unknown expectation {other:?}"),
            }
            n += 1;
        }
        for case in v["handshake_status"].as_array().unwrap() {
            let status = case["status"].as_u64().unwrap() as u16;
            let got = handshake_disposition(status);
            if case["expect"]["redial"] == Value::Bool(true) {
                assert_eq!(got, Disposition::Redial, "status {status}");
            } else {
                let want = case["expect"]["stop_rejected"].as_u64().unwrap() as u16;
                assert_eq!(
                    got,
                    Disposition::Stop(EndReason::HandshakeRejected(want)),
                    "status {status}"
                );
            }
            n += 1;
        }
        for case in v["attach_url"].as_array().unwrap() {
            let got = attach_url(
                case["runtime"].as_str().unwrap(),
                case["session"].as_str().unwrap(),
            );
            assert_eq!(got, case["expect"].as_str().unwrap());
            n += 1;
        }
        assert_eq!(n, 23);
    }
}
