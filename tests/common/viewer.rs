//! A raw RFB client over a grant's live view (`GET /attach/{id}/view`, §23) and the
//! wheel (`POST /attach/{id}/wheel`): what tests/live_view.rs (own displays) and
//! tests/live_view_box.rs (the box's display) both drive.

use std::io::ErrorKind;
use std::net::TcpStream;

use super::common::*;
use serde_json::{json, Value};
use tungstenite::client::IntoClientRequest;
use tungstenite::{Message, WebSocket};

/// A raw RFB client over the live view's WebSocket.
pub struct Viewer {
    pub ws: WebSocket<TcpStream>,
    pub buf: Vec<u8>,
}

/// Open `/view` with the token (unless `token` is false) and `headers`; the refusal's
/// status and body otherwise.
pub fn open_view(
    d: &TestDaemon,
    id: &str,
    token: bool,
    headers: &[(&str, &str)],
) -> Result<Viewer, (u16, String)> {
    let mut req = format!("ws://{}/attach/{id}/view", d.addr)
        .into_client_request()
        .unwrap();
    if token {
        req.headers_mut().insert(
            "Authorization",
            format!("Bearer {}", d.token).parse().unwrap(),
        );
    }
    for (k, v) in headers {
        let name: tungstenite::http::HeaderName = k.parse().unwrap();
        req.headers_mut().insert(name, v.parse().unwrap());
    }
    let tcp = TcpStream::connect(d.addr).unwrap();
    tcp.set_read_timeout(Some(WATCHDOG)).unwrap();
    match tungstenite::client::client(req, tcp) {
        Ok((ws, _)) => Ok(Viewer {
            ws,
            buf: Vec::new(),
        }),
        Err(tungstenite::HandshakeError::Failure(tungstenite::Error::Http(resp))) => Err((
            resp.status().as_u16(),
            String::from_utf8_lossy(resp.body().as_deref().unwrap_or_default()).into(),
        )),
        Err(e) => panic!("the upgrade failed otherwise: {e}"),
    }
}

pub fn view(d: &TestDaemon, id: &str) -> Viewer {
    open_view(d, id, true, &[]).unwrap_or_else(|e| panic!("/view refused: {e:?}"))
}

impl Viewer {
    pub fn send(&mut self, bytes: &[u8]) {
        self.ws.send(Message::binary(bytes.to_vec())).unwrap();
    }

    pub fn bytes(&mut self, n: usize) -> Vec<u8> {
        while self.buf.len() < n {
            match self.ws.read() {
                Ok(Message::Binary(b)) => self.buf.extend_from_slice(&b),
                Ok(Message::Close(f)) => panic!("the view closed: {f:?}"),
                Ok(_) => {}
                Err(e) => panic!("watchdog or error reading the view: {e}"),
            }
        }
        let rest = self.buf.split_off(n);
        std::mem::replace(&mut self.buf, rest)
    }

    pub fn u16(&mut self) -> u16 {
        let b = self.bytes(2);
        u16::from_be_bytes([b[0], b[1]])
    }

    pub fn u32(&mut self) -> u32 {
        let b = self.bytes(4);
        u32::from_be_bytes([b[0], b[1], b[2], b[3]])
    }

    /// The handshake through ServerInit: the server's version line and the screen size.
    pub fn handshake(&mut self) -> (String, (u16, u16)) {
        let version = String::from_utf8(self.bytes(12)).unwrap();
        self.send(b"RFB 003.008\n");
        let n = self.bytes(1)[0] as usize;
        let types = self.bytes(n);
        assert!(types.contains(&1), "security None is offered: {types:?}");
        self.send(&[1]);
        assert_eq!(self.u32(), 0, "SecurityResult OK");
        self.send(&[1]); // ClientInit, shared
        let size = (self.u16(), self.u16());
        let format = self.bytes(16);
        assert_eq!(format[0], 32, "32 bits per pixel: {format:?}");
        let name = self.u32() as usize;
        self.bytes(name);
        (version, size)
    }

    /// Ask for a (small) update and read it whole: the rectangles' count. The server
    /// answers after it has handled everything sent before, so this also orders input.
    pub fn update(&mut self) -> u16 {
        self.send(&handnode::base::rfb::update_request(false, 8, 8));
        loop {
            let kind = self.bytes(1)[0];
            match kind {
                0 => {
                    self.bytes(1);
                    let rects = self.u16();
                    for _ in 0..rects {
                        let (_, _, w, h) = (self.u16(), self.u16(), self.u16(), self.u16());
                        let encoding = self.u32() as i32;
                        match encoding {
                            0 => {
                                self.bytes(usize::from(w) * usize::from(h) * 4);
                            }
                            // A pseudo-encoding without data (the default set has none).
                            e => panic!("unexpected encoding {e}"),
                        }
                    }
                    return rects;
                }
                // Bell.
                2 => {}
                // ServerCutText.
                3 => {
                    self.bytes(3);
                    let n = self.u32() as usize;
                    self.bytes(n);
                }
                other => panic!("unexpected server message {other}"),
            }
        }
    }

    pub fn pointer(&mut self, x: u16, y: u16) {
        self.send(&handnode::base::rfb::pointer_event(0, x, y));
        self.update();
    }

    /// The close code the daemon ends the view with.
    pub fn closed(&mut self) -> u16 {
        loop {
            match self.ws.read() {
                Ok(Message::Close(f)) => return f.map_or(1005, |f| u16::from(f.code)),
                Ok(_) => {}
                Err(tungstenite::Error::Io(e)) if e.kind() == ErrorKind::WouldBlock => {
                    panic!("watchdog: the view was not closed")
                }
                Err(_) => return 1006,
            }
        }
    }
}

pub fn wheel(d: &TestDaemon, id: &str, take: bool) -> Value {
    let (status, v) = d.call(
        "POST",
        &format!("/attach/{id}/wheel"),
        Some(&json!({ "take": take })),
    );
    assert_eq!(status, 200, "{v}");
    v
}
