//! The live view (§23): `GET /attach/{id}/view`, a WebSocket upgrade on the admin listener
//! bridged to the RFB socket of the grant's own display, and `POST /attach/{id}/wheel`,
//! which hands the display to the lender and back ([`crate::tools::display::wheel`]).
//!
//! **One thread per viewer** (`live-view`, at most `--live-view-max-viewers` per display):
//! it owns the viewer's socket (taken whole from tiny_http, `Request::upgrade_fd`) and its
//! connection to the display's VNC server, both non-blocking in one epoll set with a wake
//! handle, so it waits on neither peer and is woken when the display or its grant ends.
//! No handler or pool thread ever waits on a viewer.
//!
//! **View-only, enforced here.** Everything the viewer sends goes through
//! [`crate::base::rfb::ClientStream`], which frames each message; `KeyEvent`,
//! `PointerEvent` and `ClientCutText` reach the server only while the lender holds the
//! wheel (and restart its idle clock), and whatever cannot be framed ends the viewer
//! (close 1008). The server's bytes go to the viewer as binary frames, unparsed.
//!
//! **Bounded, with backpressure.** At most one [`CHUNK`] of the server's output is read
//! while the viewer's socket takes nothing (then the server's socket is not read, and the
//! VNC server, not this process, holds what the viewer has not taken); a viewer that takes
//! nothing for `--write-stall-ms` is dropped. At most [`TO_SERVER_MAX`] of the viewer's
//! input waits for the server; past it the viewer is not read.
//!
//! **Other displays slot in.** The bridge needs a Unix socket speaking RFB, a [`Wheel`]
//! and a [`Viewers`] set: the box's own display (x11vnc or wayvnc on a socket, started for
//! the first viewer) and the console's noVNC page are the same bridge with another
//! [`Target`].

use std::io::{self, Read, Write};
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::net::UnixStream;

use tungstenite::protocol::frame::coding::CloseCode;
use tungstenite::protocol::{CloseFrame, Role, WebSocket, WebSocketConfig};
use tungstenite::Message;

use super::*;
use crate::base::rfb::ClientStream;
use crate::base::wake::{Poller, WAKE_KEY};
use crate::tools::display::own::OwnDisplay;
use crate::tools::display::wheel::{ViewerSlot, Wheel};

/// Most bytes of the server's output read at once, and so held for a viewer that does
/// not take them.
pub const CHUNK: usize = 64 << 10;
/// Most bytes of the viewer's input held for the server (one cut text and some).
pub const TO_SERVER_MAX: usize = crate::base::rfb::MAX_CUT_TEXT + (64 << 10);
/// Largest WebSocket message a viewer may send (a whole cut text fits).
const MAX_INBOUND: usize = TO_SERVER_MAX;

const VIEWER: u64 = 1;
const SERVER: u64 = 2;

/// What a bridge acts through besides its two sockets: the display whose wheel lets
/// input pass (its `Viewers` slot is the bridge's own): the grant's own (`Some`), or the
/// box's ([`crate::tools::display::boxview`], whose server lingers after the last viewer).
pub struct Target {
    pub wheel_of: Option<Arc<OwnDisplay>>,
    pub host: Arc<crate::tools::ToolHost>,
}

impl Target {
    fn wheel(&self) -> &Wheel {
        match &self.wheel_of {
            Some(own) => own.wheel(),
            None => self.host.box_view.wheel(),
        }
    }

    fn viewers(&self) -> &Arc<crate::tools::display::wheel::Viewers> {
        match &self.wheel_of {
            Some(own) => own.viewers(),
            None => self.host.box_view.viewers(),
        }
    }
}

/// The display `/view` and `/wheel` act on for grant `id`: its own display, or (`None`)
/// the box's, which every grant without `"display":"own"` shares.
fn display_of(
    state: &AdminState,
    id: &str,
) -> Result<Option<Arc<OwnDisplay>>, Response<std::io::Cursor<Vec<u8>>>> {
    let Some(view) = state.registry.get(id) else {
        return Err(error_response(404, "no such grant"));
    };
    if view["display"] != "own" {
        // A browser grant drives a throwaway browser, never the box's screen.
        if view["profile"] == "browser" {
            return Err(error_response(
                404,
                "a browser grant has no display: its pages are in its own browser \
                 (browser_take_screenshot shows them)",
            ));
        }
        if view["state"] == "ended" {
            return Err(error_response(409, "this grant has ended"));
        }
        return Ok(None);
    }
    own_display_of(state, id).map(Some)
}

/// The grant's own display, or the answer that says why there is none to view.
fn own_display_of(
    state: &AdminState,
    id: &str,
) -> Result<Arc<OwnDisplay>, Response<std::io::Cursor<Vec<u8>>>> {
    let Some(view) = state.registry.get(id) else {
        return Err(error_response(404, "no such grant"));
    };
    if view["display"] != "own" {
        return Err(error_response(
            404,
            "this grant uses the box's display (it has no \"display\":\"own\"): the live \
             view and the wheel are for grants with a display of their own",
        ));
    }
    if view["state"] == "ended" {
        return Err(error_response(409, "this grant has ended"));
    }
    Ok(state.services.host.own_displays.entry(id))
}

/// `POST /attach/{id}/wheel {"take":true|false}`.
pub(super) fn wheel_post(state: &Arc<AdminState>, mut request: Request, id: &str, by: &str) {
    let body = match read_body(&mut request, state.limits.max_body_bytes) {
        Ok(b) => b,
        Err(resp) => return respond(request, resp),
    };
    let take = match serde_json::from_slice::<Value>(&body) {
        Ok(Value::Object(m)) if m.len() == 1 && m.get("take").is_some_and(Value::is_boolean) => {
            m["take"] == true
        }
        _ => {
            return respond(
                request,
                error_response(
                    400,
                    "send {\"take\":true} to take the wheel or {\"take\":false} to give it back",
                ),
            )
        }
    };
    if take && state.services.halt.is_halted() {
        return respond(
            request,
            error_response(423, "halted: resume first (POST /resume)"),
        );
    }
    let target = match display_of(state, id) {
        Ok(wheel_of) => Target {
            wheel_of,
            host: Arc::clone(&state.services.host),
        },
        Err(resp) => return respond(request, resp),
    };
    let (holder, epoch) = target.wheel().set(take, by);
    respond(
        request,
        json_response(
            200,
            &json!({"wheel": holder.as_str(), "epoch": epoch,
                    "idle_secs": state.services.host.own_displays.options().wheel_idle.as_secs()}),
        ),
    );
}

/// `GET /attach/{id}/view`: checks, then the upgrade and a bridge thread.
pub(super) fn get(state: &Arc<AdminState>, request: Request, id: &str) {
    if state.services.halt.is_halted() {
        return respond(
            request,
            error_response(423, "halted: resume first (POST /resume)"),
        );
    }
    let target = match display_of(state, id) {
        Ok(wheel_of) => Target {
            wheel_of,
            host: Arc::clone(&state.services.host),
        },
        Err(resp) => return respond(request, resp),
    };
    let host = &state.services.host;
    // The box's display: its VNC server starts for this viewer (or is already running).
    let rfb_socket = match &target.wheel_of {
        Some(own) => own.rfb_socket(),
        None => {
            let probe = host.display.probe(&host.config, &host.processes);
            let env = probe.child_env(&host.config);
            match host.box_view.admit(&probe, &env) {
                Ok(s) => Ok(Some(s)),
                Err((_, why)) => Err(why),
            }
        }
    };
    // Whatever happens to this request now, a box viewer that never bridges leaves too.
    let lingers = target
        .wheel_of
        .is_none()
        .then(|| LeaveOnDrop(Arc::clone(host)));
    let socket = match rfb_socket {
        Ok(Some(s)) => s,
        Ok(None) => {
            return respond(
                request,
                error_response(
                    409,
                    "this grant's own display is not running: it starts on the grant's first \
                     graphical call",
                ),
            )
        }
        Err(missing) => return respond(request, error_response(503, &missing)),
    };
    let key = match websocket_key(&request) {
        Ok(k) => k,
        Err((status, why)) => {
            let mut resp = error_response(status, why);
            if status == 426 {
                resp = resp.with_header(header("Sec-WebSocket-Version", "13"));
            }
            return respond(request, resp);
        }
    };
    let poller = match Poller::new() {
        Ok(p) => p,
        Err(e) => return respond(request, error_response(500, &format!("epoll: {e}"))),
    };
    let max = state.services.host.own_displays.options().max_viewers;
    let slot = match target.viewers().admit(max, poller.waker()) {
        Ok(s) => s,
        Err(why) => return respond(request, error_response(429, &why)),
    };
    let server = match UnixStream::connect(&socket) {
        Ok(s) => s,
        Err(e) => {
            return respond(
                request,
                error_response(
                    503,
                    &format!("cannot reach the display's VNC server: {e}; retry shortly"),
                ),
            )
        }
    };
    let mut response = Response::empty(101)
        .with_header(header("Sec-WebSocket-Accept", &key))
        .with_header(header("Cache-Control", "no-store"));
    // noVNC and websockify clients may ask for `binary`; it is what we speak.
    if request_header(&request, "Sec-WebSocket-Protocol")
        .is_some_and(|p| p.split(',').any(|p| p.trim() == "binary"))
    {
        response = response.with_header(header("Sec-WebSocket-Protocol", "binary"));
    }
    let (fd, keep) = match request.upgrade_fd("websocket", response) {
        Ok(pair) => pair,
        Err(request) => {
            return respond(
                request,
                error_response(400, "a live view needs a plain connection to upgrade"),
            )
        }
    };
    let stall = state.timing.write_stall;
    let grant = id.to_string();
    let spawned = std::thread::Builder::new()
        .name("live-view".into())
        .spawn(move || {
            let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                bridge(fd, keep, server, poller, slot, &target, stall)
            }));
            drop(lingers);
            match result {
                Ok(why) => debug!("grant {grant}: a live viewer left: {why}"),
                Err(payload) => faults::caught(Site::Admin, "a live view", payload.as_ref()),
            }
        });
    if let Err(e) = spawned {
        warn!("admin: cannot start a live-view thread: {e}");
    }
}

/// Most live-view tickets waiting for their WebSocket at once; one more is `429`.
pub const MAX_TICKETS: usize = 16;
/// The WebSocket subprotocol that carries a ticket: `handnode.ticket.<ticket>`.
pub const TICKET_PROTOCOL: &str = "handnode.ticket.";

/// Live-view tickets: a browser's WebSocket cannot send `Authorization`, and the token in
/// the URL would land in logs and history, so the console trades its credential for a
/// ticket (`POST /attach/{id}/view-ticket`) and offers it as a subprotocol. A ticket is
/// random (256 bits), names one grant, is used at most once (a wrong grant burns it too)
/// and is refused after `--live-view-ticket-ms`.
#[derive(Default)]
pub struct Tickets(Mutex<Vec<Ticket>>);

struct Ticket {
    secret: crate::base::secret::Secret,
    grant: String,
    principal: String,
    expires: Instant,
}

impl Tickets {
    /// A new ticket for `grant`, or why not (the table is full of unexpired tickets).
    fn mint(&self, grant: &str, principal: &str, ttl: Duration) -> Result<String, String> {
        let secret = crate::base::secret::Secret::random()
            .map_err(|e| format!("cannot draw a random ticket: {e}"))?;
        let shown = secret.expose().to_string();
        let now = Instant::now();
        let mut all = self.0.lock().unwrap_or_else(|e| e.into_inner());
        all.retain(|t| t.expires > now);
        if all.len() >= MAX_TICKETS {
            return Err(format!(
                "{MAX_TICKETS} live-view tickets are waiting to be used: open a view with one, \
                 or wait {} ms for them to expire",
                ttl.as_millis()
            ));
        }
        all.push(Ticket {
            secret,
            grant: grant.to_string(),
            principal: principal.to_string(),
            expires: now + ttl,
        });
        Ok(shown)
    }

    /// The principal a ticket was minted for, if `candidate` is an unexpired ticket for
    /// `grant`. Whatever it names, a matching ticket is gone afterwards.
    fn redeem(&self, candidate: &str, grant: &str) -> Option<String> {
        let now = Instant::now();
        let mut all = self.0.lock().unwrap_or_else(|e| e.into_inner());
        // Every entry is compared, so the time taken does not say which one matched.
        let found = all
            .iter()
            .map(|t| t.secret.matches(candidate))
            .collect::<Vec<_>>()
            .iter()
            .position(|m| *m)?;
        let ticket = all.swap_remove(found);
        (ticket.grant == grant && ticket.expires > now).then_some(ticket.principal)
    }
}

/// `POST /attach/{id}/view-ticket`: a ticket for one WebSocket to this grant's view.
pub(super) fn ticket_post(state: &Arc<AdminState>, request: Request, id: &str, by: &str) {
    if let Err(resp) = display_of(state, id) {
        return respond(request, resp);
    }
    let ttl = state.services.host.own_displays.options().view_ticket;
    match state.view_tickets.mint(id, by, ttl) {
        Ok(ticket) => respond(
            request,
            json_response(
                200,
                &json!({"ticket": ticket, "protocol": format!("{TICKET_PROTOCOL}{ticket}"),
                        "expires_in_ms": ttl.as_millis() as u64}),
            )
            .with_header(header("Cache-Control", "no-store")),
        ),
        Err(why) => respond(request, error_response(429, &why)),
    }
}

/// For `GET /attach/{id}/view` offering a ticket subprotocol: `Some(Ok(principal))` when
/// the ticket is good for this grant, `Some(Err(()))` when one was offered and is not,
/// `None` when none was offered (the request authenticates as any other).
pub(super) fn ticket_principal(
    state: &AdminState,
    request: &Request,
    id: &str,
) -> Option<Result<String, ()>> {
    let offered = request_header(request, "Sec-WebSocket-Protocol")?
        .split(',')
        .find_map(|p| p.trim().strip_prefix(TICKET_PROTOCOL))?;
    Some(state.view_tickets.redeem(offered, id).ok_or(()))
}

/// A viewer of the box's display: when it goes (its slot already gone), the box's VNC
/// server lingers, then stops if no other came.
struct LeaveOnDrop(Arc<crate::tools::ToolHost>);

impl Drop for LeaveOnDrop {
    fn drop(&mut self) {
        self.0.box_view.left();
    }
}

/// The accept key of a valid WebSocket upgrade request, or the status and why not.
fn websocket_key(request: &Request) -> Result<String, (u16, &'static str)> {
    let has = |name: &str, token: &str| {
        request_header(request, name)
            .is_some_and(|v| v.split(',').any(|t| t.trim().eq_ignore_ascii_case(token)))
    };
    if !has("Connection", "upgrade") || !has("Upgrade", "websocket") {
        return Err((
            400,
            "the live view is a WebSocket: send Connection: Upgrade and Upgrade: websocket",
        ));
    }
    if request_header(request, "Sec-WebSocket-Version").map(str::trim) != Some("13") {
        return Err((426, "the live view speaks WebSocket version 13"));
    }
    let key = request_header(request, "Sec-WebSocket-Key")
        .map(str::trim)
        .filter(|k| k.len() == 24)
        .ok_or((400, "Sec-WebSocket-Key must be 16 bytes in base64"))?;
    Ok(tungstenite::handshake::derive_accept_key(key.as_bytes()))
}

/// The viewer's socket as tungstenite's stream: plain reads and writes on the descriptor
/// tiny_http handed over (non-blocking).
struct Socket(OwnedFd);

impl Read for Socket {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        rustix::io::read(&self.0, buf).map_err(io::Error::from)
    }
}

impl Write for Socket {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        rustix::io::write(&self.0, buf).map_err(io::Error::from)
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

fn would_block(e: &tungstenite::Error) -> bool {
    matches!(e, tungstenite::Error::Io(io) if io.kind() == io::ErrorKind::WouldBlock)
}

/// One viewer until it or the display goes; says why it ended. `_keep` holds tiny_http's
/// halves of the socket (their drop shuts it down).
fn bridge(
    fd: OwnedFd,
    _keep: Box<dyn tiny_http::ReadWrite + Send>,
    mut server: UnixStream,
    poller: Poller,
    slot: ViewerSlot,
    target: &Target,
    stall: Duration,
) -> String {
    let setup = (|| -> io::Result<()> {
        rustix::io::ioctl_fionbio(&fd, true)?;
        server.set_nonblocking(true)?;
        poller.add(fd.as_fd(), VIEWER, true, false)?;
        poller.add(server.as_fd(), SERVER, true, false)?;
        Ok(())
    })();
    if let Err(e) = setup {
        return format!("could not set up: {e}");
    }
    let config = WebSocketConfig::default()
        .read_buffer_size(16 << 10)
        .max_message_size(Some(MAX_INBOUND))
        .max_frame_size(Some(MAX_INBOUND))
        .write_buffer_size(0)
        .max_write_buffer_size(4 * CHUNK);
    let mut ws = WebSocket::from_raw_socket(Socket(fd), Role::Server, Some(config));
    let mut parser = ClientStream::new();
    let mut to_server: Vec<u8> = Vec::new();
    // Since when the viewer's socket has refused bytes (`None`: it takes them).
    let mut blocked_since: Option<Instant> = None;
    let mut buf = vec![0u8; CHUNK];
    let mut interest = (true, false, true, false);
    let close = |ws: &mut WebSocket<Socket>, code: CloseCode, why: &str| {
        let reason = crate::base::text::head(why, 120).to_string();
        let _ = ws.close(Some(CloseFrame {
            code,
            reason: reason.into(),
        }));
        let _ = ws.flush();
    };
    loop {
        if slot.ctl.stopped() {
            close(&mut ws, CloseCode::Away, "the display or its grant ended");
            return "the display or its grant ended".into();
        }
        // The viewer's input, while the server has room for it.
        if to_server.len() < TO_SERVER_MAX {
            loop {
                match ws.read() {
                    Ok(Message::Binary(data)) => match parser.feed(&data) {
                        Ok(pieces) => {
                            for p in pieces {
                                if !p.kind.is_input() || target.wheel().lender_input() {
                                    to_server.extend_from_slice(&p.bytes);
                                }
                            }
                        }
                        Err(refused) => {
                            close(&mut ws, CloseCode::Policy, &refused.0);
                            return format!("refused: {}", refused.0);
                        }
                    },
                    Ok(Message::Text(_)) => {
                        close(&mut ws, CloseCode::Unsupported, "binary frames only");
                        return "sent a text frame".into();
                    }
                    Ok(Message::Close(_)) => {
                        let _ = ws.flush();
                        return "the viewer closed".into();
                    }
                    Ok(_) => {}
                    Err(e) if would_block(&e) => break,
                    Err(e) => return format!("the viewer's socket: {e}"),
                }
                if to_server.len() >= TO_SERVER_MAX {
                    break;
                }
            }
        }
        // To the server, as much as it takes.
        while !to_server.is_empty() {
            match server.write(&to_server) {
                Ok(0) => return "the display's server closed".into(),
                Ok(n) => {
                    to_server.drain(..n);
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => {
                    close(&mut ws, CloseCode::Away, "the display stopped");
                    return format!("the display's server: {e}");
                }
            }
        }
        // What the viewer has not taken yet, then (only then) more of the server's output.
        if blocked_since.is_some() {
            match ws.flush() {
                Ok(()) => blocked_since = None,
                Err(e) if would_block(&e) => {}
                Err(e) => return format!("the viewer's socket: {e}"),
            }
        }
        while blocked_since.is_none() {
            match server.read(&mut buf) {
                Ok(0) => {
                    close(&mut ws, CloseCode::Away, "the display stopped");
                    return "the display stopped".into();
                }
                Ok(n) => {
                    let sent = ws
                        .write(Message::Binary(buf[..n].to_vec().into()))
                        .and_then(|()| ws.flush());
                    match sent {
                        Ok(()) => {}
                        Err(e) if would_block(&e) => blocked_since = Some(Instant::now()),
                        Err(e) => return format!("the viewer's socket: {e}"),
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => {
                    close(&mut ws, CloseCode::Away, "the display stopped");
                    return format!("the display's server: {e}");
                }
            }
        }
        if let Some(since) = blocked_since {
            if since.elapsed() >= stall {
                return format!(
                    "the viewer took nothing for {} ms (--write-stall-ms)",
                    stall.as_millis()
                );
            }
        }
        // Level-triggered: ask only for what can be acted on.
        let want = (
            to_server.len() < TO_SERVER_MAX,
            blocked_since.is_some(),
            blocked_since.is_none(),
            !to_server.is_empty(),
        );
        if want != interest {
            let ok = poller
                .modify(ws.get_ref().0.as_fd(), VIEWER, want.0, want.1)
                .and_then(|()| poller.modify(server.as_fd(), SERVER, want.2, want.3));
            if let Err(e) = ok {
                return format!("epoll: {e}");
            }
            interest = want;
        }
        let timeout = blocked_since.map(|s| stall.saturating_sub(s.elapsed()));
        match poller.wait(timeout) {
            Ok(ready) => {
                // A hang-up is reported whatever the interest: acted on here, never spun on.
                if let Some(r) = ready.iter().find(|r| r.closed && r.key != WAKE_KEY) {
                    if r.key == VIEWER {
                        return "the viewer went".into();
                    }
                    close(&mut ws, CloseCode::Away, "the display stopped");
                    return "the display stopped".into();
                }
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return format!("epoll: {e}"),
        }
    }
}

impl AsFd for Socket {
    fn as_fd(&self) -> std::os::fd::BorrowedFd<'_> {
        self.0.as_fd()
    }
}

#[cfg(test)]
mod ticket_tests {
    use super::*;

    const LONG: Duration = Duration::from_secs(60);

    #[test]
    fn a_ticket_is_good_once_for_its_grant_until_it_expires() {
        let t = Tickets::default();
        let a = t.mint("g1", "owner", LONG).unwrap();
        assert_eq!(t.redeem(&a, "g1").as_deref(), Some("owner"));
        assert_eq!(t.redeem(&a, "g1"), None, "used");
        let b = t.mint("g1", "owner", LONG).unwrap();
        assert_eq!(t.redeem(&b, "g2"), None, "another grant");
        assert_eq!(t.redeem(&b, "g1"), None, "burned on another grant");
        let c = t.mint("g1", "owner", Duration::ZERO).unwrap();
        assert_eq!(t.redeem(&c, "g1"), None, "expired");
        assert_eq!(t.redeem("", "g1"), None);
    }

    #[test]
    fn at_most_max_tickets_wait_and_expired_ones_make_room() {
        let t = Tickets::default();
        for _ in 0..MAX_TICKETS {
            t.mint("g", "owner", LONG).unwrap();
        }
        let why = t.mint("g", "owner", LONG).unwrap_err();
        assert!(why.contains("tickets are waiting"), "{why}");
        assert!(why.contains("with one, or wait"), "one space: {why}");
        let t = Tickets::default();
        for _ in 0..MAX_TICKETS {
            t.mint("g", "owner", Duration::ZERO).unwrap();
        }
        t.mint("g", "owner", LONG)
            .expect("expired tickets are dropped first");
    }
}
