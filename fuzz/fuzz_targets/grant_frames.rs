//! The grant thread's frame handling on arbitrary frame sequences from the pod: frames
//! built from the input (text, binary, ping, pong, close, continuation, reserved opcodes,
//! a reserved bit, a mask the pod must not set, invalid UTF-8, lengths past the inbound
//! cap) are read by a `handnode::wire::link::Link` over an in-memory socket, exactly as the grant
//! thread reads its socket; each message goes through the dispatcher and its replies (plus,
//! when the selector asks, a long reply made from the message so the fragment path runs)
//! are queued and pumped out through a socket that takes a fuzzed number of bytes per
//! write and refuses every other write. Checks, beyond not panicking: the link stops at the
//! first close or violation with the right close code; what was written is masked frames
//! of at most `FRAGMENT_BYTES` payload that a WebSocket server reads back as exactly the replies
//! queued, in order (all of them, unless our close abandoned the rest).
#![no_main]

use std::io::{self, Cursor, Read, Write};

use handnode::config::Limits;
use handnode::wire::link::{ws_config, Inbound, Link, FRAGMENT_BYTES};
use handnode::wire::mcp::{Action, Dispatcher};
use handnode::profiles::Profile;
use handnode::tools::policy::ToolPolicy;
use handnode::tools::ConnCatalog;
use libfuzzer_sys::fuzz_target;
use tungstenite::error::ProtocolError;
use tungstenite::protocol::frame::coding::CloseCode;
use tungstenite::protocol::{Role, WebSocketConfig};
use tungstenite::{Message, WebSocket};

/// Inbound cap for the fuzzed link: small, so messages past it are cheap to build.
const MAX_INBOUND: usize = 4096;
/// Most frames read per input (the grant thread reads 256 per turn, forever).
const MAX_READS: usize = 4096;
/// Most long (fragmented) replies queued per input: each is ~128 KiB through a trickle.
const MAX_LONG_REPLIES: usize = 3;

/// The pod's side of the socket: reads come from `input` (then `WouldBlock`, as from an
/// open socket with nothing more to say); writes take `chunk` bytes, every other one
/// refused while `congested`.
struct Mem {
    input: Cursor<Vec<u8>>,
    output: Vec<u8>,
    chunk: usize,
    congested: bool,
    refuse_next: bool,
}

impl Read for Mem {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        match self.input.read(buf)? {
            0 if !buf.is_empty() => Err(io::ErrorKind::WouldBlock.into()),
            n => Ok(n),
        }
    }
}

impl Write for Mem {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        if self.congested {
            self.refuse_next = !self.refuse_next;
            if self.refuse_next {
                return Err(io::ErrorKind::WouldBlock.into());
            }
        }
        let n = if self.congested {
            buf.len().min(self.chunk)
        } else {
            buf.len()
        };
        self.output.extend_from_slice(&buf[..n]);
        Ok(n)
    }
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

/// Server frames (the pod's) from the input: per frame a header byte (FIN, opcode; a
/// reserved bit or a mask when bits 4-6 say so), a length byte (254: two more length
/// bytes follow; 255: a frame announcing more than the cap, with no payload), then the
/// payload from the input.
fn pod_frames(mut data: &[u8]) -> Vec<u8> {
    let mut wire = Vec::new();
    let take = |n: usize, data: &mut &[u8]| {
        let (head, rest) = data.split_at(n.min(data.len()));
        *data = rest;
        head.to_vec()
    };
    while data.len() >= 2 {
        let h = take(1, &mut data)[0];
        let flags = h & 0x70;
        let rsv = if flags == 0x70 { 0x40 } else { 0 };
        let masked = flags == 0x60;
        let b0 = (h & 0x8F) | rsv;
        let (len, payload) = match take(1, &mut data)[0] {
            255 => ((MAX_INBOUND + 1) as u64, Vec::new()),
            254 => {
                let b = take(2, &mut data);
                // The input may end inside the two length bytes.
                let byte = |i: usize| b.get(i).copied().unwrap_or(0);
                let len = u16::from_be_bytes([byte(0), byte(1)]) as usize;
                let p = take(len, &mut data);
                (p.len() as u64, p)
            }
            n => {
                let p = take(n as usize, &mut data);
                (p.len() as u64, p)
            }
        };
        wire.push(b0);
        let mask_bit = if masked { 0x80 } else { 0 };
        if len < 126 {
            wire.push(mask_bit | len as u8);
        } else if len <= u16::MAX as u64 {
            wire.push(mask_bit | 126);
            wire.extend_from_slice(&(len as u16).to_be_bytes());
        } else {
            wire.push(mask_bit | 127);
            wire.extend_from_slice(&len.to_be_bytes());
        }
        if masked {
            wire.extend_from_slice(&[1, 2, 3, 4]);
        }
        wire.extend_from_slice(&payload);
    }
    wire
}

/// A frame header as the daemon (a client) wrote it: `(payload length, header length)`.
fn client_frame_len(wire: &[u8]) -> (usize, usize) {
    assert!(wire.len() >= 2, "a cut frame");
    assert_ne!(wire[1] & 0x80, 0, "a client frame is masked");
    match wire[1] & 0x7F {
        126 => (u16::from_be_bytes([wire[2], wire[3]]) as usize, 8),
        127 => (
            u64::from_be_bytes(wire[2..10].try_into().unwrap()) as usize,
            14,
        ),
        n => (n as usize, 6),
    }
}

fuzz_target!(|data: &[u8]| {
    let Some((&selector, rest)) = data.split_first() else {
        return;
    };
    let profile = match selector % 3 {
        0 => Profile::Owner,
        1 => Profile::Desktop,
        _ => Profile::Observe,
    };
    let policy = ToolPolicy::fixed(profile).expect("a fixed profile has tools");
    let long_replies = selector & 0x04 != 0;
    let chunk = 1024 + usize::from(selector >> 3) * 4093;
    let mut long_left = MAX_LONG_REPLIES;
    let limits = Limits {
        max_inbound_bytes: MAX_INBOUND,
        ..Limits::default()
    };
    let mem = Mem {
        input: Cursor::new(pod_frames(rest)),
        output: Vec::new(),
        chunk,
        congested: true,
        refuse_next: false,
    };
    let mut link = Link::new(WebSocket::from_raw_socket(
        mem,
        Role::Client,
        Some(ws_config(&limits)),
    ));
    let catalog = ConnCatalog {
        grant: None,
        upstream: None,
        browsers: None,
        policy: &policy,
    };
    let mut dispatcher = Dispatcher::new();
    let mut queued: Vec<String> = Vec::new();
    let mut closed_by_us = false;
    // Whether the pod is still talking when the input runs out: then every reply is owed.
    let mut open = true;
    for _ in 0..MAX_READS {
        match link.read() {
            Inbound::Idle => break,
            Inbound::Data(bytes) => {
                assert!(bytes.len() <= MAX_INBOUND, "a message past the cap");
                for action in dispatcher.handle(&bytes, &catalog) {
                    if let Action::Reply(text) = action {
                        queued.push(text.clone());
                        link.queue(text);
                    }
                }
                if long_replies && long_left > 0 && !bytes.is_empty() {
                    long_left -= 1;
                    // Three fragments; multi-byte characters from the lossy decoding land
                    // on fragment ends.
                    let unit = String::from_utf8_lossy(&bytes).into_owned();
                    let text = unit.repeat((2 * FRAGMENT_BYTES) / unit.len() + 1);
                    queued.push(text.clone());
                    link.queue(text);
                }
                link.pump(false).expect("an in-memory socket never fails");
            }
            Inbound::Control => {}
            Inbound::Closed(_) => {
                open = false;
                break;
            }
            Inbound::Violation { close, error } => {
                assert!(
                    matches!(
                        CloseCode::from(close.code),
                        CloseCode::Invalid | CloseCode::Size
                    ),
                    "{close:?}"
                );
                assert!(error.contains(&format!("closed {}", close.code)), "{error}");
                link.close(close).expect("an in-memory socket never fails");
                closed_by_us = true;
                open = false;
                break;
            }
            Inbound::Lost(_) => {
                open = false;
                break;
            }
        }
    }
    // The pod reads again: everything owed goes out.
    link.socket_mut().congested = false;
    if !closed_by_us {
        let _ = link.pump(true);
    }
    let _ = link.try_flush();
    let wire = std::mem::take(&mut link.socket_mut().output);

    // Every frame is whole, masked, and at most one fragment long.
    let mut at = 0;
    while at < wire.len() {
        let (len, head) = client_frame_len(&wire[at..]);
        assert!(len <= FRAGMENT_BYTES, "a {len}-byte frame");
        at += head + len;
        assert!(at <= wire.len(), "a cut frame");
    }
    // A server reads back the replies queued, in order: all of them unless our close (or
    // a close the link then refused to write after) abandoned the rest.
    let config = WebSocketConfig::default().max_message_size(Some(64 << 20));
    let mut server = WebSocket::from_raw_socket(Cursor::new(wire), Role::Server, Some(config));
    let mut got = Vec::new();
    loop {
        match server.read() {
            Ok(Message::Text(t)) => got.push(t.as_str().to_owned()),
            Ok(Message::Binary(_)) => panic!("replies are text"),
            Ok(Message::Close(_)) => break,
            Ok(_) => {}
            // The end of what we wrote.
            Err(tungstenite::Error::Protocol(ProtocolError::ResetWithoutClosingHandshake)) => break,
            Err(e) => panic!("our output is not a valid WebSocket stream: {e}"),
        }
    }
    if open {
        assert_eq!(got.len(), queued.len(), "replies owed were not all written");
    }
    assert!(got.len() <= queued.len());
    for (i, (g, q)) in got.iter().zip(&queued).enumerate() {
        assert!(
            g == q,
            "reply {i} differs ({} vs {} bytes)",
            g.len(),
            q.len()
        );
    }
});
