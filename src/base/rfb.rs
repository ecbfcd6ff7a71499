//! The viewer's half of RFB (RFC 6143), read without I/O: what a live viewer (§23) sends
//! to an own display's VNC server, cut into whole messages so the bridge can drop the
//! input ones (`KeyEvent`, `PointerEvent`, `ClientCutText`) unless the lender holds the
//! wheel. Bytes go in as they arrive, in any split; whole messages come out.
//!
//! **Only what it can frame passes.** The bridge must know where each message ends, or a
//! dropped one would leave the rest misaligned; so anything this parser cannot frame ends
//! the viewer: an unknown message type, a security type other than `None`, a cut text or
//! encodings list past its bound. The extensions whose client messages it would not know
//! (fences, continuous updates, desktop resize, xvp, QEMU keys) are taken out of the
//! viewer's `SetEncodings`, so the server never turns them on ([`UNFRAMED_PSEUDO`]); the
//! extended clipboard is kept (its `ClientCutText` has a negative length, framed here).

/// Longest `ClientCutText` payload framed (bytes); a longer one ends the viewer.
pub const MAX_CUT_TEXT: usize = 256 << 10;
/// Most encodings in one `SetEncodings` (noVNC sends about 20).
pub const MAX_ENCODINGS: usize = 256;
/// The one security type a viewer may choose: `None` (the socket is the daemon's only).
pub const SECURITY_NONE: u8 = 1;

/// Pseudo-encodings whose use needs a client message this parser does not frame:
/// `Fence` (-312, message 248), `ContinuousUpdates` (-313, 150), `ExtendedDesktopSize`
/// (-308, `SetDesktopSize` 251), `xvp` (-309, 250), QEMU extended key events (-258, 255).
pub const UNFRAMED_PSEUDO: [i32; 5] = [-312, -313, -308, -309, -258];

/// What a framed piece of the viewer's stream is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// `ProtocolVersion`, the security choice or `ClientInit`.
    Handshake,
    SetPixelFormat,
    SetEncodings,
    FramebufferUpdateRequest,
    KeyEvent,
    PointerEvent,
    ClientCutText,
}

impl Kind {
    /// Whether it acts on the display (dropped unless the lender holds the wheel).
    pub fn is_input(self) -> bool {
        matches!(
            self,
            Kind::KeyEvent | Kind::PointerEvent | Kind::ClientCutText
        )
    }
}

/// One whole message, as it goes to the server (`SetEncodings` possibly rewritten).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Piece {
    pub kind: Kind,
    pub bytes: Vec<u8>,
}

/// Why the viewer's stream cannot go on.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Refused(pub String);

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Phase {
    Version,
    Security,
    ClientInit,
    Messages,
}

/// The viewer's stream so far: its phase and the bytes of a message not yet whole
/// (at most one message: [`MAX_CUT_TEXT`] + 8).
#[derive(Debug)]
pub struct ClientStream {
    phase: Phase,
    pending: Vec<u8>,
    /// A 3.3 viewer sends no security choice (the server decides).
    chooses_security: bool,
    failed: Option<Refused>,
}

impl Default for ClientStream {
    fn default() -> Self {
        ClientStream::new()
    }
}

impl ClientStream {
    pub fn new() -> ClientStream {
        ClientStream {
            phase: Phase::Version,
            pending: Vec::new(),
            chooses_security: true,
            failed: None,
        }
    }

    /// Take `bytes`, give every message they complete, in order. After an `Err` the
    /// stream is finished: every later call gives the same error.
    pub fn feed(&mut self, bytes: &[u8]) -> Result<Vec<Piece>, Refused> {
        if let Some(f) = &self.failed {
            return Err(f.clone());
        }
        self.pending.extend_from_slice(bytes);
        let mut out = Vec::new();
        loop {
            match self.next_piece() {
                Ok(Some(p)) => out.push(p),
                Ok(None) => return Ok(out),
                Err(e) => {
                    self.failed = Some(e.clone());
                    self.pending = Vec::new();
                    return Err(e);
                }
            }
        }
    }

    /// Bytes held of a message not yet whole.
    pub fn pending(&self) -> usize {
        self.pending.len()
    }

    fn take(&mut self, n: usize, kind: Kind) -> Option<Piece> {
        if self.pending.len() < n {
            return None;
        }
        let rest = self.pending.split_off(n);
        let bytes = std::mem::replace(&mut self.pending, rest);
        Some(Piece { kind, bytes })
    }

    fn next_piece(&mut self) -> Result<Option<Piece>, Refused> {
        let refuse = |why: String| Err(Refused(why));
        match self.phase {
            Phase::Version => {
                let Some(p) = self.take(12, Kind::Handshake) else {
                    return Ok(None);
                };
                let (major, minor) = parse_version(&p.bytes).ok_or_else(|| {
                    Refused(format!(
                        "not an RFB ProtocolVersion: {:?} (want \"RFB 003.008\\n\")",
                        String::from_utf8_lossy(&p.bytes)
                    ))
                })?;
                if major != 3 {
                    return refuse(format!("RFB major version {major} is not 3"));
                }
                self.chooses_security = minor >= 7;
                self.phase = if self.chooses_security {
                    Phase::Security
                } else {
                    Phase::ClientInit
                };
                Ok(Some(p))
            }
            Phase::Security => {
                let Some(p) = self.take(1, Kind::Handshake) else {
                    return Ok(None);
                };
                if p.bytes[0] != SECURITY_NONE {
                    return refuse(format!(
                        "security type {} is not offered: only None (1)",
                        p.bytes[0]
                    ));
                }
                self.phase = Phase::ClientInit;
                Ok(Some(p))
            }
            Phase::ClientInit => {
                let Some(p) = self.take(1, Kind::Handshake) else {
                    return Ok(None);
                };
                self.phase = Phase::Messages;
                Ok(Some(p))
            }
            Phase::Messages => self.message(),
        }
    }

    fn message(&mut self) -> Result<Option<Piece>, Refused> {
        let Some(&kind) = self.pending.first() else {
            return Ok(None);
        };
        let fixed = |n| Ok(n);
        let size: Result<usize, Refused> = match kind {
            0 => fixed(20),
            2 => {
                let Some(n) = be16(&self.pending, 2) else {
                    return Ok(None);
                };
                let n = usize::from(n);
                if n > MAX_ENCODINGS {
                    return Err(Refused(format!(
                        "SetEncodings lists {n} encodings; at most {MAX_ENCODINGS}"
                    )));
                }
                Ok(4 + 4 * n)
            }
            3 => fixed(10),
            4 => fixed(8),
            5 => fixed(6),
            6 => {
                let Some(len) = be32(&self.pending, 4) else {
                    return Ok(None);
                };
                // Negative: the extended clipboard's form, |len| bytes follow.
                let len = (len as i32).unsigned_abs() as usize;
                if len > MAX_CUT_TEXT {
                    return Err(Refused(format!(
                        "ClientCutText of {len} bytes; at most {MAX_CUT_TEXT}"
                    )));
                }
                Ok(8 + len)
            }
            other => Err(Refused(format!(
                "RFB client message type {other} is not one the bridge passes \
                 (0, 2, 3, 4, 5 and 6 only)"
            ))),
        };
        let size = size?;
        let kind = match kind {
            0 => Kind::SetPixelFormat,
            2 => Kind::SetEncodings,
            3 => Kind::FramebufferUpdateRequest,
            4 => Kind::KeyEvent,
            5 => Kind::PointerEvent,
            _ => Kind::ClientCutText,
        };
        let Some(mut p) = self.take(size, kind) else {
            return Ok(None);
        };
        if kind == Kind::SetEncodings {
            p.bytes = without_unframed(&p.bytes);
        }
        Ok(Some(p))
    }
}

/// `RFB xxx.yyy\n` → (xxx, yyy).
fn parse_version(b: &[u8]) -> Option<(u32, u32)> {
    if b.len() != 12 || &b[..4] != b"RFB " || b[7] != b'.' || b[11] != b'\n' {
        return None;
    }
    let num = |s: &[u8]| -> Option<u32> {
        s.iter()
            .all(u8::is_ascii_digit)
            .then(|| std::str::from_utf8(s).ok()?.parse().ok())?
    };
    Some((num(&b[4..7])?, num(&b[8..11])?))
}

fn be16(b: &[u8], at: usize) -> Option<u16> {
    Some(u16::from_be_bytes(b.get(at..at + 2)?.try_into().ok()?))
}

fn be32(b: &[u8], at: usize) -> Option<u32> {
    Some(u32::from_be_bytes(b.get(at..at + 4)?.try_into().ok()?))
}

/// A whole `SetEncodings` without the pseudo-encodings in [`UNFRAMED_PSEUDO`].
fn without_unframed(msg: &[u8]) -> Vec<u8> {
    let kept: Vec<&[u8]> = msg[4..]
        .chunks_exact(4)
        .filter(|e| {
            let v = i32::from_be_bytes([e[0], e[1], e[2], e[3]]);
            !UNFRAMED_PSEUDO.contains(&v)
        })
        .collect();
    let mut out = Vec::with_capacity(4 + 4 * kept.len());
    out.extend_from_slice(&msg[..2]);
    out.extend_from_slice(&(kept.len() as u16).to_be_bytes());
    for e in kept {
        out.extend_from_slice(e);
    }
    out
}

/// A `PointerEvent` (buttons mask, x, y): for tests and tools that speak RFB.
pub fn pointer_event(buttons: u8, x: u16, y: u16) -> Vec<u8> {
    let mut m = vec![5, buttons];
    m.extend_from_slice(&x.to_be_bytes());
    m.extend_from_slice(&y.to_be_bytes());
    m
}

/// A `FramebufferUpdateRequest` of the whole `w`×`h` screen.
pub fn update_request(incremental: bool, w: u16, h: u16) -> Vec<u8> {
    let mut m = vec![3, u8::from(incremental), 0, 0, 0, 0];
    m.extend_from_slice(&w.to_be_bytes());
    m.extend_from_slice(&h.to_be_bytes());
    m
}

#[cfg(test)]
mod tests {
    use super::*;

    const HELLO: &[u8] = b"RFB 003.008\n\x01\x01";

    fn greeted() -> ClientStream {
        let mut s = ClientStream::new();
        let got = s.feed(HELLO).unwrap();
        assert_eq!(got.len(), 3);
        assert!(got.iter().all(|p| p.kind == Kind::Handshake));
        s
    }

    fn set_encodings(list: &[i32]) -> Vec<u8> {
        let mut m = vec![2, 0];
        m.extend_from_slice(&(list.len() as u16).to_be_bytes());
        for e in list {
            m.extend_from_slice(&e.to_be_bytes());
        }
        m
    }

    fn cut_text(len: i32, body: usize) -> Vec<u8> {
        let mut m = vec![6, 0, 0, 0];
        m.extend_from_slice(&len.to_be_bytes());
        m.extend(std::iter::repeat_n(b'x', body));
        m
    }

    /// Every client message the bridge passes, whole: its kind and that it comes out as
    /// it went in.
    #[test]
    fn each_message_is_framed_whole_by_its_table_size() {
        let table: Vec<(Vec<u8>, Kind)> = vec![
            ([0u8; 20].to_vec(), Kind::SetPixelFormat),
            (set_encodings(&[0, 1, 7, -223]), Kind::SetEncodings),
            (
                update_request(true, 640, 480),
                Kind::FramebufferUpdateRequest,
            ),
            (vec![4, 1, 0, 0, 0, 0, 0, 0x61], Kind::KeyEvent),
            (pointer_event(1, 10, 20), Kind::PointerEvent),
            (cut_text(5, 5), Kind::ClientCutText),
            (cut_text(-4, 4), Kind::ClientCutText),
            (cut_text(0, 0), Kind::ClientCutText),
        ];
        for (msg, kind) in table {
            let mut s = greeted();
            let got = s.feed(&msg).unwrap();
            assert_eq!(
                got,
                vec![Piece {
                    kind,
                    bytes: msg.clone()
                }],
                "{kind:?}"
            );
            assert_eq!(s.pending(), 0);
            assert_eq!(kind.is_input(), matches!(msg[0], 4..=6), "{kind:?}");
        }
    }

    /// However the bytes are split (one at a time here), the same messages come out, and
    /// nothing before a message is whole.
    #[test]
    fn truncated_input_waits_for_the_rest_in_any_split() {
        let mut all = HELLO.to_vec();
        let msgs = [
            pointer_event(0, 1, 2),
            cut_text(3, 3),
            update_request(false, 8, 8),
            vec![4, 0, 0, 0, 0, 0, 0xff, 0x0d],
        ];
        for m in &msgs {
            all.extend_from_slice(m);
        }
        let mut s = ClientStream::new();
        let mut out = Vec::new();
        for b in &all {
            out.extend(s.feed(std::slice::from_ref(b)).unwrap());
        }
        let bodies: Vec<&Vec<u8>> = out[3..].iter().map(|p| &p.bytes).collect();
        assert_eq!(bodies, msgs.iter().collect::<Vec<_>>());
        // Half a message: nothing yet.
        let mut s = greeted();
        assert!(s.feed(&pointer_event(0, 1, 2)[..5]).unwrap().is_empty());
        assert_eq!(s.pending(), 5);
        assert!(s.feed(&cut_text(10, 9)[..0]).unwrap().is_empty());
    }

    #[test]
    fn garbage_and_what_it_cannot_frame_end_the_stream() {
        let cases: Vec<(&[u8], Vec<u8>, &str)> = vec![
            (
                b"",
                b"GET / HTTP/1.1\r\n".to_vec(),
                "not an RFB ProtocolVersion",
            ),
            (b"", b"RFB 004.000\n".to_vec(), "major version 4"),
            (b"", b"RFB 00x.008\n".to_vec(), "not an RFB ProtocolVersion"),
            (b"RFB 003.008\n", vec![2], "security type 2"),
            (b"RFB 003.008\n", vec![0], "security type 0"),
            (HELLO, vec![1, 0, 0], "message type 1"),
            (
                HELLO,
                vec![150, 1, 0, 0, 0, 0, 0, 0, 0, 0],
                "message type 150",
            ),
            (HELLO, vec![248, 0, 0, 0, 0, 0, 0, 0, 0], "message type 248"),
            (HELLO, vec![255; 4], "message type 255"),
        ];
        for (before, bad, want) in cases {
            let mut s = ClientStream::new();
            s.feed(before).unwrap();
            let err = s.feed(&bad).unwrap_err();
            assert!(err.0.contains(want), "{bad:?}: {err:?}");
            // Finished: the same answer after, whatever comes.
            assert_eq!(s.feed(&pointer_event(0, 0, 0)), Err(err));
            assert_eq!(s.pending(), 0);
        }
    }

    /// A 3.3 viewer sends no security choice: its ClientInit follows the version.
    #[test]
    fn a_3_3_viewer_skips_the_security_choice() {
        let mut s = ClientStream::new();
        let got = s.feed(b"RFB 003.003\n\x00").unwrap();
        assert_eq!(got.len(), 2);
        let got = s.feed(&pointer_event(0, 3, 4)).unwrap();
        assert_eq!(got[0].kind, Kind::PointerEvent);
    }

    /// The bounds, at the bound and one past it (by the declared length: refused before
    /// the bytes arrive).
    #[test]
    fn cut_text_and_encodings_are_bounded() {
        let max = MAX_CUT_TEXT as i32;
        let mut s = greeted();
        assert_eq!(s.feed(&cut_text(max, MAX_CUT_TEXT)).unwrap().len(), 1);
        let mut s = greeted();
        let err = s.feed(&cut_text(max + 1, 0)).unwrap_err();
        assert!(err.0.contains("at most 262144"), "{err:?}");
        let mut s = greeted();
        assert!(s.feed(&cut_text(-(max + 1), 0)).is_err());
        let mut s = greeted();
        assert!(s.feed(&cut_text(i32::MIN, 0)).is_err());
        let mut s = greeted();
        let list: Vec<i32> = (0..MAX_ENCODINGS as i32).collect();
        assert_eq!(s.feed(&set_encodings(&list)).unwrap().len(), 1);
        let mut s = greeted();
        let list: Vec<i32> = (0..=MAX_ENCODINGS as i32).collect();
        let err = s.feed(&set_encodings(&list)[..4]).unwrap_err();
        assert!(err.0.contains("257 encodings"), "{err:?}");
    }

    #[test]
    fn set_encodings_loses_the_extensions_whose_messages_are_not_framed() {
        let mut s = greeted();
        let mut list = vec![7, 1, 0, -223, -1063131698];
        list.extend(UNFRAMED_PSEUDO);
        let got = s.feed(&set_encodings(&list)).unwrap();
        assert_eq!(got[0].bytes, set_encodings(&[7, 1, 0, -223, -1063131698]));
    }
}
