//! The grant socket's write path (`handnode::wire::link`): a reply over `FRAGMENT_BYTES` goes out
//! as one fragmented message (a Text frame with FIN=0, then Continuation frames, each at
//! most `FRAGMENT_BYTES`), small replies as single frames; whatever the socket accepts at a time, the
//! bytes on the wire are the messages in the order they were queued, correctly masked, and
//! the WebSocket is never handed more than about one fragment at once. End to end, a 1.5 MiB
//! reply through a grant reaches the stub pod as one message.

mod common;

use std::io::{self, Cursor, Read, Write};

use common::*;
use handnode::wire::link::{ws_config, Link, FRAGMENT_BYTES};
use serde_json::{json, Value};
use tungstenite::protocol::Role;
use tungstenite::{Message, WebSocket};

/// A socket that takes at most `chunk` bytes per write and refuses every other write
/// (`WouldBlock`), like a non-blocking socket whose peer reads slowly.
struct Trickle {
    wire: Vec<u8>,
    chunk: usize,
    refuse_next: bool,
    /// The most bytes offered in one write: what the WebSocket held at that moment.
    largest_offer: usize,
}

impl Write for Trickle {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.largest_offer = self.largest_offer.max(buf.len());
        self.refuse_next = !self.refuse_next;
        if !self.refuse_next {
            return Err(io::ErrorKind::WouldBlock.into());
        }
        let n = buf.len().min(self.chunk);
        self.wire.extend_from_slice(&buf[..n]);
        Ok(n)
    }
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

impl Read for Trickle {
    fn read(&mut self, _: &mut [u8]) -> io::Result<usize> {
        Err(io::ErrorKind::WouldBlock.into())
    }
}

fn pump_all(link: &mut Link<Trickle>) {
    for _ in 0..10_000_000 {
        link.pump(true).expect("pump");
        if link.is_idle() {
            return;
        }
    }
    panic!("the link never drained");
}

/// The wire after queueing `messages` (pumping after every second one) on a socket that
/// takes `chunk` bytes per write; and the largest write the WebSocket offered.
fn written(messages: &[String], chunk: usize) -> (Vec<u8>, usize) {
    let socket = Trickle {
        wire: Vec::new(),
        chunk,
        refuse_next: false,
        largest_offer: 0,
    };
    let config = ws_config(&handnode::config::Limits::default());
    let mut link = Link::new(WebSocket::from_raw_socket(
        socket,
        Role::Client,
        Some(config),
    ));
    for (i, m) in messages.iter().enumerate() {
        link.queue(m.clone());
        if i % 2 == 1 {
            link.pump(false).expect("pump");
        }
    }
    pump_all(&mut link);
    let t = link.socket();
    (t.wire.clone(), t.largest_offer)
}

/// The frame headers on the wire: `(opcode, fin, payload length)`; client frames are masked.
fn frame_heads(wire: &[u8]) -> Vec<(u8, bool, usize)> {
    let mut out = Vec::new();
    let mut s = Cursor::new(wire);
    while (s.position() as usize) < wire.len() {
        let (opcode, fin, payload) = read_frame(&mut s).expect("a whole frame");
        out.push((opcode, fin, payload.len()));
    }
    out
}

/// One frame the daemon (a client, so masked) sent: `(opcode, fin, unmasked payload)`.
fn read_frame(s: &mut impl Read) -> io::Result<(u8, bool, Vec<u8>)> {
    let mut head = [0u8; 2];
    s.read_exact(&mut head)?;
    let fin = head[0] & 0x80 != 0;
    assert_ne!(head[1] & 0x80, 0, "a client frame is masked");
    let len = match head[1] & 0x7f {
        126 => {
            let mut b = [0u8; 2];
            s.read_exact(&mut b)?;
            u16::from_be_bytes(b) as usize
        }
        127 => {
            let mut b = [0u8; 8];
            s.read_exact(&mut b)?;
            u64::from_be_bytes(b) as usize
        }
        n => n as usize,
    };
    let mut mask = [0u8; 4];
    s.read_exact(&mut mask)?;
    let mut payload = vec![0u8; len];
    s.read_exact(&mut payload)?;
    for (i, b) in payload.iter_mut().enumerate() {
        *b ^= mask[i % 4];
    }
    Ok((head[0] & 0x0f, fin, payload))
}

fn read_back(wire: Vec<u8>, n: usize) -> Vec<String> {
    let mut server = WebSocket::from_raw_socket(Cursor::new(wire), Role::Server, None);
    (0..n)
        .map(|_| match server.read().expect("a message") {
            Message::Text(t) => t.as_str().to_owned(),
            other => panic!("unexpected {other:?}"),
        })
        .collect()
}

#[test]
fn large_and_small_frames_arrive_whole_in_order() {
    let big = |c: char, n: usize| std::iter::repeat_n(c, n).collect::<String>();
    let messages = vec![
        "small one".to_string(),
        big('a', 3 << 20),
        "small two".to_string(),
        "small three".to_string(),
        big('b', (64 << 10) - 1),
        big('c', 64 << 10),
        "small four".to_string(),
        big('d', 200_000),
        big('é', 100_000),
    ];
    for chunk in [1 << 20, 65_536, 4096, 1000] {
        let (wire, largest_offer) = written(&messages, chunk);
        // The WebSocket held at most one fragment and a few small frames at a time.
        assert!(
            largest_offer <= 2 * FRAGMENT_BYTES,
            "{largest_offer} bytes offered at once with {chunk}-byte writes"
        );
        let heads = frame_heads(&wire);
        assert!(
            heads.iter().all(|&(_, _, n)| n <= FRAGMENT_BYTES),
            "a frame over {FRAGMENT_BYTES} bytes"
        );
        // 3 MiB is n fragments: Text/FIN=0, n-2 Continuation/FIN=0, Continuation/FIN=1.
        let n = (3 << 20) / FRAGMENT_BYTES;
        let (opcode, fin, len) = heads[1];
        assert_eq!((opcode, fin, len), (1, false, FRAGMENT_BYTES));
        assert!(heads[2..n].iter().all(|&(op, fin, _)| op == 0 && !fin));
        assert_eq!((heads[n].0, heads[n].1), (0, true));
        let got = read_back(wire, messages.len());
        for (i, (g, m)) in got.iter().zip(&messages).enumerate() {
            assert!(
                g == m,
                "message {i} differs with {chunk}-byte writes ({} vs {} bytes)",
                g.len(),
                m.len()
            );
        }
    }
}

/// `bash` printing 800 000 bytes on each of stdout and stderr: both are in the text block
/// (once, §15), so the reply is over 1.5 MiB.
fn three_mib_call(id: u64) -> Value {
    let n = 800_000;
    json!({"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": {"name": "bash",
        "arguments": {"command": format!("head -c {n} /dev/zero | tr '\\0' x; head -c {n} /dev/zero | tr '\\0' y >&2"),
                      "max_output_bytes": 1 << 20}}})
}

fn check_three_mib_reply(reply: &Value, id: u64) {
    assert_eq!(reply["id"], id, "{}", &reply.to_string()[..200]);
    let reply = with_streams(reply.clone());
    let s = &reply["result"]["structuredContent"];
    assert_eq!(s["stdout"].as_str().map(str::len), Some(800_000));
    assert_eq!(s["stderr"].as_str().map(str::len), Some(800_000));
    assert!(s["stdout"].as_str().unwrap().bytes().all(|b| b == b'x'));
}

#[test]
fn a_three_mib_reply_reaches_the_pod_as_one_message() {
    let pod = StubPod::start();
    let d = TestDaemon::with("large-frames", quiet_liveness);
    let (_, mut conn) = d.attached(&pod, "big", "owner");
    conn.set_read_timeout(WATCHDOG);

    // Through the pod's WebSocket: one message, whole, then the socket still serves.
    conn.send(&three_mib_call(1));
    let text = loop {
        match conn.ws.read() {
            Ok(Message::Text(t)) => break t,
            Ok(Message::Ping(_) | Message::Pong(_)) => continue,
            Ok(other) => panic!("expected one text message, got {other:?}"),
            Err(e) if is_interrupted(&e) => continue,
            Err(e) => panic!("watchdog or error waiting for the reply: {e}"),
        }
    };
    assert!(text.len() > 3 << 19, "{} bytes", text.len());
    assert!(
        text.len() < 2 << 20,
        "each output byte once (§15): {} bytes",
        text.len()
    );
    let reply: Value = serde_json::from_str(&text).expect("one whole JSON message");
    check_three_mib_reply(&reply, 1);
    assert_eq!(conn.ping(json!(2))["result"], json!({}));

    // The same reply frame by frame: fragments of at most FRAGMENT_BYTES making one Text
    // message.
    conn.send(&three_mib_call(3));
    let socket = conn.ws.get_mut();
    let mut frames = Vec::new();
    let mut message = Vec::new();
    loop {
        let (opcode, fin, payload) = read_frame(socket).expect("a frame within the watchdog");
        if opcode == 9 || opcode == 10 {
            continue;
        }
        frames.push((opcode, fin, payload.len()));
        message.extend_from_slice(&payload);
        if fin {
            break;
        }
    }
    assert_eq!(frames[0].0, 1, "a text message");
    assert!(
        frames.len() >= (3 << 19) / FRAGMENT_BYTES,
        "{} frames",
        frames.len()
    );
    assert!(
        frames[1..].iter().all(|&(op, _, _)| op == 0),
        "continuations"
    );
    assert!(frames.iter().all(|&(_, _, n)| n <= FRAGMENT_BYTES));
    let reply: Value = serde_json::from_slice(&message).unwrap();
    check_three_mib_reply(&reply, 3);
}

#[test]
fn a_reply_over_the_outbound_cap_is_still_replaced_by_an_error() {
    let pod = StubPod::start();
    let d = TestDaemon::with("large-cap", |c| {
        quiet_liveness(c);
        c.limits.max_outbound_bytes = 1 << 20;
    });
    let (_, mut conn) = d.attached(&pod, "cap", "owner");
    let reply = conn.request(json!(1), "tools/call", three_mib_call(1)["params"].clone());
    let text = reply["result"]["content"][0]["text"].as_str().unwrap();
    assert!(text.starts_with("result too large: "), "{text}");
    assert_eq!(reply["result"]["isError"], true);
}
