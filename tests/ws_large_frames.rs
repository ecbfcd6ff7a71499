//! The vendored tungstenite's write path (vendor/tungstenite/PATCHED.md): a large frame's
//! payload is queued as its own buffer and masked in place, small frames share a buffer,
//! and whatever the socket accepts at a time, the bytes on the wire are the frames in the
//! order they were written, correctly masked.

use std::io::{self, Cursor, Read, Write};

use tungstenite::protocol::{Role, WebSocketConfig};
use tungstenite::{Message, WebSocket};

/// A socket that takes at most `chunk` bytes per write and refuses every other write
/// (`WouldBlock`), like a non-blocking socket whose peer reads slowly.
struct Trickle {
    wire: Vec<u8>,
    chunk: usize,
    refuse_next: bool,
}

impl Write for Trickle {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
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

fn flush_all(ws: &mut WebSocket<Trickle>) {
    for _ in 0..1_000_000 {
        match ws.flush() {
            Ok(()) => return,
            Err(tungstenite::Error::Io(e)) if e.kind() == io::ErrorKind::WouldBlock => continue,
            Err(e) => panic!("flush failed: {e}"),
        }
    }
    panic!("flush never finished");
}

fn written(messages: &[String], chunk: usize) -> Vec<u8> {
    let socket = Trickle {
        wire: Vec::new(),
        chunk,
        refuse_next: false,
    };
    let mut ws = WebSocket::from_raw_socket(socket, Role::Client, Some(WebSocketConfig::default()));
    for (i, m) in messages.iter().enumerate() {
        match ws.write(Message::text(m.clone())) {
            Ok(()) => {}
            Err(tungstenite::Error::Io(e)) if e.kind() == io::ErrorKind::WouldBlock => {}
            Err(e) => panic!("write {i} failed: {e}"),
        }
        if i % 2 == 1 {
            flush_all(&mut ws);
        }
    }
    flush_all(&mut ws);
    ws.get_ref().wire.clone()
}

fn read_back(wire: Vec<u8>, n: usize) -> Vec<String> {
    let mut server = WebSocket::from_raw_socket(Cursor::new(wire), Role::Server, None);
    (0..n)
        .map(|_| match server.read().expect("a frame") {
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
    ];
    for chunk in [1 << 20, 65_536, 4096, 1000] {
        let got = read_back(written(&messages, chunk), messages.len());
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
