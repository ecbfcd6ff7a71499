//! One grant socket's framing, on any `Read + Write`: replies queued and written with
//! backpressure (a reply over [`FRAGMENT_BYTES`] goes out as a fragmented message, so the
//! WebSocket's own buffer never holds more than about one fragment), and each read
//! classified into what the grant thread does next. The grant thread runs it on its
//! socket; `tests/ws_large_frames.rs` and the `grant_frames` fuzz target run it in memory.

use std::collections::VecDeque;
use std::io::{self, Read, Write};
use std::time::Instant;

use tungstenite::protocol::frame::coding::{CloseCode, Data, OpCode};
use tungstenite::protocol::frame::Frame;
use tungstenite::protocol::WebSocketConfig;
use tungstenite::{Bytes, Message, WebSocket};

use crate::config::Limits;

/// Largest payload (bytes) of one outbound frame: a longer reply is sent as a Text frame
/// with FIN=0 and Continuation frames (RFC 6455 §5.4), each at most this long. The
/// published tungstenite keeps its write buffer's capacity for the connection's life (up
/// to twice the largest frame, as a `Vec` grows), so this is also what a grant that ever
/// sent a long reply keeps. Measured per grant after a 2 MiB reply, on the same tree: the
/// vendored copy (which freed large frames) 107 KiB; 64 KiB fragments 165; 16 KiB 119;
/// 8 KiB 108. Per frame the cost is a 4-byte header and one `write`.
pub const FRAGMENT_BYTES: usize = 8 << 10;

/// The WebSocket settings of a grant socket. Inbound messages and frames are capped at
/// `max_inbound_bytes`. On the write side the link decides when bytes are written, so
/// tungstenite's own threshold sits above anything the link hands it at once (one
/// fragment plus small frames), and its hard cap above that again.
pub fn ws_config(limits: &Limits) -> WebSocketConfig {
    WebSocketConfig::default()
        .read_buffer_size(16 << 10)
        .max_message_size(Some(limits.max_inbound_bytes))
        .max_frame_size(Some(limits.max_inbound_bytes))
        .write_buffer_size(2 * FRAGMENT_BYTES)
        .max_write_buffer_size(4 * FRAGMENT_BYTES)
}

/// A close frame we send: its code and the reason text that goes with it. `dial` holds
/// the table of every one we send (`dial::SENT_CLOSES`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct OurClose {
    pub code: u16,
    pub reason: &'static str,
}

/// The pod sent a text frame that is not UTF-8; we redial.
pub const CLOSE_BAD_UTF8: OurClose = OurClose {
    code: 1007,
    reason: "invalid UTF-8 in a text frame",
};
/// The pod sent a message over the inbound cap; we redial.
pub const CLOSE_TOO_LARGE: OurClose = OurClose {
    code: 1009,
    reason: "message too large",
};

/// What one read from the socket means.
#[derive(Debug, PartialEq)]
pub enum Inbound {
    /// Nothing more to read for now.
    Idle,
    /// A text or binary message, whole.
    Data(Bytes),
    /// A ping or pong (tungstenite answers pings itself).
    Control,
    /// The pod closed with this code (1005 when it gave none); our close reply is queued.
    Closed(u16),
    /// The pod broke a rule that has a close code: close with it, then drop the socket.
    Violation { close: OurClose, error: String },
    /// The socket is unusable (network error, protocol error, closed).
    Lost(String),
}

/// A socket, the replies owed on it, and how far they got.
#[derive(Debug)]
pub struct Link<S> {
    ws: WebSocket<S>,
    /// Replies not yet started, oldest first.
    queue: VecDeque<Bytes>,
    /// The reply being sent in fragments and the offset of its next fragment.
    current: Option<(Bytes, usize)>,
    /// Bytes of replies not yet handed to the WebSocket (`queue` plus the rest of `current`).
    queued: usize,
    /// Bytes handed to the WebSocket since its buffer was last empty.
    unflushed: usize,
    /// Since when the socket has refused bytes the WebSocket holds; `None` while it takes
    /// them.
    stuck_since: Option<Instant>,
}

impl<S: Read + Write> Link<S> {
    pub fn new(ws: WebSocket<S>) -> Self {
        Link {
            ws,
            queue: VecDeque::new(),
            current: None,
            queued: 0,
            unflushed: 0,
            stuck_since: None,
        }
    }

    pub fn socket(&self) -> &S {
        self.ws.get_ref()
    }

    pub fn socket_mut(&mut self) -> &mut S {
        self.ws.get_mut()
    }

    /// Queue one reply (a JSON-RPC message). Nothing is written until [`Link::pump`].
    pub fn queue(&mut self, text: String) {
        self.queued += text.len();
        self.queue.push_back(Bytes::from(text));
    }

    /// Bytes of replies queued and not yet handed to the WebSocket.
    pub fn queued_bytes(&self) -> usize {
        self.queued
    }

    /// Since when the socket has refused our bytes (write readiness will let them go), or
    /// `None` while it takes what we write.
    pub fn stuck_since(&self) -> Option<Instant> {
        self.stuck_since
    }

    /// Nothing queued and nothing held back by the socket.
    pub fn is_idle(&self) -> bool {
        self.queued == 0 && self.stuck_since.is_none()
    }

    /// Hand queued frames to the WebSocket while the socket takes them, flushing every
    /// [`FRAGMENT_BYTES`] so the WebSocket's buffer never holds more than that and one
    /// frame; with `flush`, also push out the last partial batch. Stops (without error)
    /// when the socket is full; [`Link::stuck_since`] then says so.
    pub fn pump(&mut self, flush: bool) -> Result<(), tungstenite::Error> {
        if self.stuck_since.is_some() && !self.try_flush()? {
            return Ok(());
        }
        while let Some(len) = self.next_len() {
            if self.unflushed > 0 && self.unflushed + len > FRAGMENT_BYTES && !self.try_flush()? {
                return Ok(());
            }
            let frame = self.next_frame();
            self.unflushed += frame.len();
            if !self.write(Message::Frame(frame))? {
                return Ok(());
            }
        }
        if flush && self.unflushed > 0 {
            self.try_flush()?;
        }
        Ok(())
    }

    /// Queue a WebSocket Ping (control frames may go between the fragments of a message).
    pub fn ping(&mut self) -> Result<(), tungstenite::Error> {
        self.unflushed += 6;
        self.write(Message::Ping(Bytes::new())).map(drop)
    }

    /// Queue our close frame and try to write it; queued replies are abandoned.
    pub fn close(&mut self, close: OurClose) -> Result<(), tungstenite::Error> {
        self.queue.clear();
        self.current = None;
        self.queued = 0;
        let frame = tungstenite::protocol::CloseFrame {
            code: CloseCode::from(close.code),
            reason: close.reason.into(),
        };
        match self.ws.close(Some(frame)) {
            Ok(()) => {
                self.stuck_since = None;
                Ok(())
            }
            Err(e) if is_would_block(&e) => {
                self.stuck_since.get_or_insert_with(Instant::now);
                Ok(())
            }
            Err(e) => Err(e),
        }
    }

    /// Try to write out what the WebSocket holds. `Ok(false)`: the socket is full.
    pub fn try_flush(&mut self) -> Result<bool, tungstenite::Error> {
        match self.ws.flush() {
            Ok(()) => {
                self.unflushed = 0;
                self.stuck_since = None;
                Ok(true)
            }
            Err(e) if is_would_block(&e) => {
                self.stuck_since.get_or_insert_with(Instant::now);
                Ok(false)
            }
            Err(e) => Err(e),
        }
    }

    /// Read one message (or find there is none yet) and say what it means.
    pub fn read(&mut self) -> Inbound {
        match self.ws.read() {
            Ok(Message::Text(text)) => Inbound::Data(Bytes::from(text)),
            Ok(Message::Binary(bytes)) => Inbound::Data(bytes),
            Ok(Message::Close(frame)) => {
                // tungstenite queued the close reply; push it out if the socket takes it.
                let _ = self.ws.flush();
                Inbound::Closed(frame.map(|f| u16::from(f.code)).unwrap_or(1005))
            }
            Ok(Message::Ping(_) | Message::Pong(_) | Message::Frame(_)) => Inbound::Control,
            Err(e) if is_would_block(&e) => Inbound::Idle,
            Err(tungstenite::Error::Utf8(e)) => Inbound::Violation {
                close: CLOSE_BAD_UTF8,
                error: format!(
                    "invalid UTF-8 in a text frame: {e} (closed {})",
                    CLOSE_BAD_UTF8.code
                ),
            },
            Err(tungstenite::Error::Capacity(e)) => Inbound::Violation {
                close: CLOSE_TOO_LARGE,
                error: format!(
                    "inbound message too large: {e} (closed {})",
                    CLOSE_TOO_LARGE.code
                ),
            },
            Err(tungstenite::Error::ConnectionClosed | tungstenite::Error::AlreadyClosed) => {
                Inbound::Lost("connection closed".into())
            }
            Err(e) => Inbound::Lost(format!("socket error: {e}")),
        }
    }

    /// Give the WebSocket one message. `Ok(false)`: it is buffered but the socket is full.
    fn write(&mut self, message: Message) -> Result<bool, tungstenite::Error> {
        match self.ws.write(message) {
            Ok(()) => Ok(true),
            Err(e) if is_would_block(&e) => {
                self.stuck_since.get_or_insert_with(Instant::now);
                Ok(false)
            }
            Err(e) => Err(e),
        }
    }

    /// Payload length of the next frame, if any.
    fn next_len(&self) -> Option<usize> {
        match &self.current {
            Some((text, at)) => Some((text.len() - at).min(FRAGMENT_BYTES)),
            None => self.queue.front().map(|t| t.len().min(FRAGMENT_BYTES)),
        }
    }

    /// The next frame: a whole short reply, or the next fragment of a long one.
    fn next_frame(&mut self) -> Frame {
        let (text, at) = match self.current.take() {
            Some(current) => current,
            None => {
                let text = self.queue.pop_front().expect("next_len saw a reply");
                if text.len() <= FRAGMENT_BYTES {
                    self.queued -= text.len();
                    return Frame::message(text, OpCode::Data(Data::Text), true);
                }
                (text, 0)
            }
        };
        let end = fragment_end(&text, at);
        self.queued -= end - at;
        let opcode = if at == 0 { Data::Text } else { Data::Continue };
        let last = end == text.len();
        let frame = Frame::message(text.slice(at..end), OpCode::Data(opcode), last);
        if !last {
            self.current = Some((text, end));
        }
        frame
    }
}

/// Where the fragment of UTF-8 `text` starting at `at` ends: [`FRAGMENT_BYTES`] on, moved
/// back to a character boundary, so that every fragment is valid UTF-8 on its own (RFC 6455
/// allows a split character; a receiver that decodes frame by frame does not).
fn fragment_end(text: &[u8], at: usize) -> usize {
    let mut end = (at + FRAGMENT_BYTES).min(text.len());
    // A UTF-8 character is at most 4 bytes, so at most 3 continuation bytes are skipped.
    while end < text.len() && end > at + 1 && (text[end] & 0xC0) == 0x80 {
        end -= 1;
    }
    end
}

pub fn is_would_block(e: &tungstenite::Error) -> bool {
    matches!(e, tungstenite::Error::Io(io) if io.kind() == io::ErrorKind::WouldBlock)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Cursor;
    use tungstenite::protocol::Role;

    /// A socket that takes at most `room` bytes before refusing (`WouldBlock`) until
    /// given more room.
    struct Pipe {
        wire: Vec<u8>,
        room: usize,
        largest_write: usize,
    }

    impl Write for Pipe {
        fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
            self.largest_write = self.largest_write.max(buf.len());
            if self.room == 0 {
                return Err(io::ErrorKind::WouldBlock.into());
            }
            let n = buf.len().min(self.room);
            self.room -= n;
            self.wire.extend_from_slice(&buf[..n]);
            Ok(n)
        }
        fn flush(&mut self) -> io::Result<()> {
            Ok(())
        }
    }

    impl Read for Pipe {
        fn read(&mut self, _: &mut [u8]) -> io::Result<usize> {
            Err(io::ErrorKind::WouldBlock.into())
        }
    }

    fn link(room: usize) -> Link<Pipe> {
        let pipe = Pipe {
            wire: Vec::new(),
            room,
            largest_write: 0,
        };
        let config = ws_config(&Limits::default());
        Link::new(WebSocket::from_raw_socket(pipe, Role::Client, Some(config)))
    }

    /// The frames on the wire as (opcode, fin, payload length), and the messages they make.
    fn frames(wire: &[u8]) -> Vec<(u8, bool, usize)> {
        let mut out = Vec::new();
        let mut at = 0;
        while at < wire.len() {
            let (b0, b1) = (wire[at], wire[at + 1]);
            let (len, mut head) = match b1 & 0x7F {
                126 => (u16::from_be_bytes([wire[at + 2], wire[at + 3]]) as usize, 4),
                127 => (
                    u64::from_be_bytes(wire[at + 2..at + 10].try_into().unwrap()) as usize,
                    10,
                ),
                n => (n as usize, 2),
            };
            assert_ne!(b1 & 0x80, 0, "a client frame is masked");
            head += 4;
            out.push((b0 & 0x0F, b0 & 0x80 != 0, len));
            at += head + len;
        }
        out
    }

    fn messages(wire: Vec<u8>) -> Vec<String> {
        let mut server = WebSocket::from_raw_socket(Cursor::new(wire), Role::Server, None);
        let mut out = Vec::new();
        loop {
            match server.read() {
                Ok(Message::Text(t)) => out.push(t.as_str().to_owned()),
                Ok(_) => {}
                Err(_) => return out,
            }
        }
    }

    #[test]
    fn a_long_reply_is_one_fragmented_message_of_bounded_frames() {
        let long = "é".repeat(100_000) + "x"; // 200 001 bytes, characters of 2 bytes
        let mut l = link(usize::MAX);
        l.queue("short".into());
        l.queue(long.clone());
        l.queue("after".into());
        l.pump(true).unwrap();
        assert!(l.is_idle());
        let wire = l.socket().wire.clone();
        let f = frames(&wire);
        assert_eq!(f[0], (1, true, 5));
        assert_eq!((f[1].0, f[1].1), (1, false), "first fragment: Text, FIN=0");
        let middle = &f[2..f.len() - 1];
        assert!(middle.iter().all(|&(op, _, _)| op == 0), "{f:?}");
        assert!(middle.last().unwrap().1, "last fragment has FIN=1");
        assert!(f[1..f.len() - 1]
            .iter()
            .all(|&(_, _, n)| n <= FRAGMENT_BYTES));
        assert_eq!(
            f[1..f.len() - 1].iter().map(|&(_, _, n)| n).sum::<usize>(),
            long.len()
        );
        assert_eq!(*f.last().unwrap(), (1, true, 5));
        assert_eq!(messages(wire), ["short".to_string(), long, "after".into()]);
    }

    #[test]
    fn fragments_end_on_character_boundaries() {
        let text = "aé€😀".repeat(40_000);
        let mut at = 0;
        while at < text.len() {
            let end = fragment_end(text.as_bytes(), at);
            assert!(end > at && end - at <= FRAGMENT_BYTES);
            assert!(text.is_char_boundary(end), "{end}");
            at = end;
        }
        // A reply exactly one fragment long is one frame; one byte more is two.
        let mut l = link(usize::MAX);
        l.queue("x".repeat(FRAGMENT_BYTES));
        l.queue("y".repeat(FRAGMENT_BYTES + 1));
        l.pump(true).unwrap();
        assert_eq!(
            frames(&l.socket().wire.clone()),
            [
                (1, true, FRAGMENT_BYTES),
                (1, false, FRAGMENT_BYTES),
                (0, true, 1)
            ]
        );
    }

    #[test]
    fn a_full_socket_holds_one_fragment_and_the_rest_waits_queued() {
        let big = "y".repeat(3 << 20);
        let mut l = link(1000);
        l.queue(big.clone());
        l.queue("small".into());
        l.pump(true).unwrap();
        assert!(l.stuck_since().is_some(), "the socket refused");
        assert!(
            l.queued_bytes() >= big.len() - FRAGMENT_BYTES,
            "only one fragment was handed over: {} queued",
            l.queued_bytes()
        );
        // Let it drain in small steps; the WebSocket is never given more than a fragment
        // plus a header at once.
        for _ in 0..1_000_000 {
            if l.is_idle() {
                break;
            }
            l.socket_mut().room = 7000;
            l.pump(true).unwrap();
        }
        assert!(l.is_idle());
        let pipe = l.socket();
        assert!(
            pipe.largest_write <= FRAGMENT_BYTES + 14,
            "{}",
            pipe.largest_write
        );
        assert_eq!(messages(pipe.wire.clone()), [big, "small".to_string()]);
    }

    #[test]
    fn pings_may_go_between_fragments() {
        let big = "z".repeat(3 * FRAGMENT_BYTES);
        let mut l = link(FRAGMENT_BYTES + 100);
        l.queue(big.clone());
        l.pump(true).unwrap();
        l.ping().unwrap();
        l.socket_mut().room = usize::MAX;
        l.pump(true).unwrap();
        assert!(l.is_idle());
        let f = frames(&l.socket().wire.clone());
        let ping = f.iter().position(|&(op, _, _)| op == 9).expect("a ping");
        assert!(ping > 0 && ping < f.len() - 1, "{f:?}");
        assert_eq!(messages(l.socket().wire.clone()), [big]);
    }
}
