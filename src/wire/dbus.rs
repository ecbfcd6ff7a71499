//! A small synchronous D-Bus client: a Unix socket, SASL `EXTERNAL`, method calls with
//! basic-typed arguments, replies read into [`Val`]s, and calls *pipelined* (many sent before
//! the first reply is read) with a deadline each. Enough for the accessibility bus (AT-SPI2);
//! no async runtime, no libdbus, pure Rust for the static artifacts. Every message read is
//! bounded (`max_message`): a larger one is skipped whole and its call answered with an error.

use std::collections::HashMap;
use std::io::{Read, Write};
use std::os::unix::net::UnixStream;
use std::time::{Duration, Instant};

/// Longest header (fields) of a message read; larger is a broken peer.
const MAX_HEADER: usize = 64 << 10;
/// Deepest nesting of containers in a value (the spec allows 64).
const MAX_DEPTH: u32 = 64;
/// Bytes read per `read`.
const READ_CHUNK: usize = 64 << 10;

/// An argument of a method call (basic types only: all AT-SPI needs).
#[derive(Clone, Debug, PartialEq)]
pub enum Arg<'a> {
    Str(&'a str),
    Path(&'a str),
    U32(u32),
    I32(i32),
}

impl Arg<'_> {
    fn sig(&self) -> u8 {
        match self {
            Arg::Str(_) => b's',
            Arg::Path(_) => b'o',
            Arg::U32(_) => b'u',
            Arg::I32(_) => b'i',
        }
    }
}

/// A value read from a message body.
#[derive(Clone, Debug, PartialEq)]
pub enum Val {
    Byte(u8),
    Bool(bool),
    Int(i64),
    UInt(u64),
    Double(f64),
    Str(String),
    /// `ay`, kept as bytes.
    Bytes(Vec<u8>),
    Array(Vec<Val>),
    /// A struct or a dict entry.
    Struct(Vec<Val>),
    Variant(Box<Val>),
}

impl Val {
    pub fn as_str(&self) -> Option<&str> {
        match self {
            Val::Str(s) => Some(s),
            Val::Variant(v) => v.as_str(),
            _ => None,
        }
    }
    pub fn as_u64(&self) -> Option<u64> {
        match self {
            Val::UInt(u) => Some(*u),
            Val::Int(i) => u64::try_from(*i).ok(),
            Val::Byte(b) => Some(u64::from(*b)),
            Val::Variant(v) => v.as_u64(),
            _ => None,
        }
    }
    pub fn as_i64(&self) -> Option<i64> {
        match self {
            Val::Int(i) => Some(*i),
            Val::UInt(u) => i64::try_from(*u).ok(),
            Val::Byte(b) => Some(i64::from(*b)),
            Val::Variant(v) => v.as_i64(),
            _ => None,
        }
    }
    pub fn as_f64(&self) -> Option<f64> {
        match self {
            Val::Double(d) => Some(*d),
            Val::Variant(v) => v.as_f64(),
            other => other.as_i64().map(|i| i as f64),
        }
    }
    pub fn as_bool(&self) -> Option<bool> {
        match self {
            Val::Bool(b) => Some(*b),
            Val::Variant(v) => v.as_bool(),
            _ => None,
        }
    }
    /// The items of an array or the fields of a struct.
    pub fn items(&self) -> &[Val] {
        match self {
            Val::Array(v) | Val::Struct(v) => v,
            Val::Variant(v) => v.items(),
            _ => &[],
        }
    }
}

/// What went wrong with a call or the connection.
#[derive(Debug, Clone, PartialEq)]
pub enum DbusError {
    /// The socket failed or closed: the connection is unusable.
    Io(String),
    /// The peer broke the protocol (or the address is bad): the connection is unusable.
    Protocol(String),
    /// The remote side answered with an error.
    Remote { name: String, message: String },
    /// No answer by the call's deadline.
    Timeout,
    /// The answer was larger than the connection's cap and was skipped.
    TooLarge(usize),
}

impl DbusError {
    /// Whether the connection can no longer be used.
    pub fn is_fatal(&self) -> bool {
        matches!(self, DbusError::Io(_) | DbusError::Protocol(_))
    }
}

impl std::fmt::Display for DbusError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            DbusError::Io(e) => write!(f, "D-Bus connection failed: {e}"),
            DbusError::Protocol(e) => write!(f, "D-Bus protocol error: {e}"),
            DbusError::Remote { name, message } if message.is_empty() => write!(f, "{name}"),
            DbusError::Remote { name, message } => write!(f, "{name}: {message}"),
            DbusError::Timeout => write!(f, "no answer in time"),
            DbusError::TooLarge(n) => write!(f, "answer of {n} bytes is over the cap"),
        }
    }
}

fn io(e: std::io::Error) -> DbusError {
    DbusError::Io(e.to_string())
}

/// One method call to send.
#[derive(Clone, Debug)]
pub struct Call<'a> {
    pub dest: &'a str,
    pub path: &'a str,
    pub iface: &'a str,
    pub member: &'a str,
    pub args: &'a [Arg<'a>],
}

/// A connection to one bus.
#[derive(Debug)]
pub struct Conn {
    stream: UnixStream,
    serial: u32,
    max_message: usize,
    rbuf: Vec<u8>,
    /// Bytes still to discard of a message over the cap.
    skip: usize,
    /// Written calls whose answers are not read yet (serial → answer once read).
    answers: HashMap<u32, Result<Vec<Val>, DbusError>>,
    /// Calls given up on: their answers are dropped when they come.
    forgotten: std::collections::HashSet<u32>,
    /// Calls sent and not yet answered or forgotten: only their answers are kept. A bus
    /// routes a peer only the replies it owes; an application's own socket could send any
    /// serial, and each kept answer can be megabytes.
    pending: std::collections::HashSet<u32>,
    out: Vec<u8>,
}

/// The socket path of a D-Bus address (`unix:path=…` or `unix:abstract=…`; the first usable
/// of a `;`-separated list).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SocketAddr {
    Path(String),
    Abstract(Vec<u8>),
}

pub fn parse_address(address: &str) -> Result<SocketAddr, DbusError> {
    for entry in address.split(';').filter(|e| !e.is_empty()) {
        let Some(params) = entry.strip_prefix("unix:") else {
            continue;
        };
        for kv in params.split(',') {
            let (k, v) = kv.split_once('=').unwrap_or((kv, ""));
            let v = unescape(v)?;
            match k {
                "path" => {
                    return String::from_utf8(v)
                        .map(SocketAddr::Path)
                        .map_err(|_| DbusError::Protocol("address path is not UTF-8".into()))
                }
                "abstract" => return Ok(SocketAddr::Abstract(v)),
                _ => {}
            }
        }
    }
    Err(DbusError::Protocol(format!(
        "no unix:path= or unix:abstract= in the bus address {:?}",
        crate::base::label::cut(address, 200)
    )))
}

fn unescape(v: &str) -> Result<Vec<u8>, DbusError> {
    let b = v.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%' {
            let hex = b
                .get(i + 1..i + 3)
                .and_then(|h| std::str::from_utf8(h).ok())
                .and_then(|h| u8::from_str_radix(h, 16).ok())
                .ok_or_else(|| DbusError::Protocol("bad %-escape in the bus address".into()))?;
            out.push(hex);
            i += 3;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    Ok(out)
}

impl Conn {
    /// Connect, authenticate (`EXTERNAL`, our uid) and say `Hello`, all within `timeout`.
    pub fn connect(
        address: &str,
        timeout: Duration,
        max_message: usize,
    ) -> Result<Conn, DbusError> {
        let deadline = Instant::now() + timeout;
        let stream = match parse_address(address)? {
            SocketAddr::Path(p) => UnixStream::connect(&p),
            SocketAddr::Abstract(name) => {
                use std::os::linux::net::SocketAddrExt;
                let addr = std::os::unix::net::SocketAddr::from_abstract_name(&name).map_err(io)?;
                UnixStream::connect_addr(&addr)
            }
        }
        .map_err(io)?;
        stream.set_write_timeout(Some(timeout)).map_err(io)?;
        let mut conn = Conn::new(stream, max_message);
        conn.auth(deadline)?;
        let hello = conn.send(&Call {
            dest: "org.freedesktop.DBus",
            path: "/org/freedesktop/DBus",
            iface: "org.freedesktop.DBus",
            member: "Hello",
            args: &[],
        });
        conn.wait(hello, deadline)?;
        Ok(conn)
    }

    /// Connect to an application's own D-Bus server (a peer: no bus, no `Hello`), only when
    /// its socket is served by process `pid`, checked before a byte is sent: an address an
    /// application gives must not turn this process into a client of someone else's socket.
    /// Only a socket path is accepted, and a listener that does not accept at once is
    /// refused rather than waited for.
    pub fn connect_peer(
        address: &str,
        pid: u32,
        timeout: Duration,
        max_message: usize,
    ) -> Result<Conn, DbusError> {
        use rustix::net::{AddressFamily, SocketAddrUnix, SocketFlags, SocketType};
        let deadline = Instant::now() + timeout;
        let path = match parse_address(address)? {
            SocketAddr::Path(p) if p.starts_with('/') => p,
            _ => {
                return Err(DbusError::Protocol(
                    "an application's own address must be an absolute socket path".into(),
                ))
            }
        };
        let fd = rustix::net::socket_with(
            AddressFamily::UNIX,
            SocketType::STREAM,
            SocketFlags::CLOEXEC | SocketFlags::NONBLOCK,
            None,
        )
        .map_err(|e| io(e.into()))?;
        let addr = SocketAddrUnix::new(path.as_str()).map_err(|e| io(e.into()))?;
        rustix::net::connect(&fd, &addr).map_err(|e| io(e.into()))?;
        let served_by = rustix::net::sockopt::socket_peercred(&fd)
            .map_err(|e| io(e.into()))?
            .pid
            .as_raw_nonzero()
            .get();
        if u32::try_from(served_by).ok() != Some(pid) {
            return Err(DbusError::Protocol(format!(
                "the socket at {:?} is served by process {served_by}, not the application's {pid}",
                crate::base::label::cut(&path, 200)
            )));
        }
        let stream = UnixStream::from(fd);
        stream.set_nonblocking(false).map_err(io)?;
        stream.set_write_timeout(Some(timeout)).map_err(io)?;
        let mut conn = Conn::new(stream, max_message);
        conn.auth(deadline)?;
        Ok(conn)
    }

    fn new(stream: UnixStream, max_message: usize) -> Conn {
        Conn {
            stream,
            serial: 0,
            max_message,
            rbuf: Vec::new(),
            skip: 0,
            answers: HashMap::new(),
            forgotten: Default::default(),
            pending: Default::default(),
            out: Vec::new(),
        }
    }

    /// Read what has come (the socket polled readable): every whole message in it is kept
    /// if it is an answer. Waits at most a millisecond, for a readiness that was not real.
    pub fn read_ready(&mut self) -> Result<(), DbusError> {
        self.flush()?;
        self.fill(Instant::now() + Duration::from_millis(1))?;
        while self.parse_one()?.is_some() {}
        Ok(())
    }

    fn auth(&mut self, deadline: Instant) -> Result<(), DbusError> {
        let uid = rustix::process::getuid().as_raw().to_string();
        let hex: String = uid.bytes().map(|b| format!("{b:02x}")).collect();
        self.stream
            .write_all(format!("\0AUTH EXTERNAL {hex}\r\n").as_bytes())
            .map_err(io)?;
        let line = self.read_line(deadline)?;
        if !line.starts_with("OK ") {
            return Err(DbusError::Protocol(format!(
                "the bus refused EXTERNAL authentication ({})",
                crate::base::label::cut(&line, 200)
            )));
        }
        self.stream.write_all(b"BEGIN\r\n").map_err(io)?;
        Ok(())
    }

    /// One line of the SASL exchange; anything read past it stays in `rbuf`.
    fn read_line(&mut self, deadline: Instant) -> Result<String, DbusError> {
        loop {
            if let Some(end) = self.rbuf.windows(2).position(|w| w == b"\r\n") {
                let line = String::from_utf8_lossy(&self.rbuf[..end]).into_owned();
                self.rbuf.drain(..end + 2);
                return Ok(line);
            }
            if self.rbuf.len() > 4096 {
                return Err(DbusError::Protocol("authentication line too long".into()));
            }
            if !self.fill(deadline)? {
                return Err(DbusError::Timeout);
            }
        }
    }

    /// Read more bytes; `false` when the deadline passed first.
    fn fill(&mut self, deadline: Instant) -> Result<bool, DbusError> {
        let now = Instant::now();
        if now >= deadline {
            return Ok(false);
        }
        self.stream
            .set_read_timeout(Some((deadline - now).max(Duration::from_millis(1))))
            .map_err(io)?;
        let mut chunk = [0u8; READ_CHUNK];
        match self.stream.read(&mut chunk) {
            Ok(0) => Err(DbusError::Io("the bus closed the connection".into())),
            Ok(n) => {
                let mut data = &chunk[..n];
                if self.skip > 0 {
                    let k = self.skip.min(data.len());
                    self.skip -= k;
                    data = &data[k..];
                }
                self.rbuf.extend_from_slice(data);
                Ok(true)
            }
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) =>
            {
                Ok(false)
            }
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => Ok(true),
            Err(e) => Err(io(e)),
        }
    }

    /// Queue a call (written at the next [`Conn::flush`] or wait); its serial.
    pub fn send(&mut self, call: &Call) -> u32 {
        self.serial = self.serial.wrapping_add(1).max(1);
        let serial = self.serial;
        self.pending.insert(serial);
        encode_call(&mut self.out, serial, call);
        serial
    }

    /// Write every queued call.
    pub fn flush(&mut self) -> Result<(), DbusError> {
        if !self.out.is_empty() {
            let out = std::mem::take(&mut self.out);
            self.stream.write_all(&out).map_err(io)?;
        }
        Ok(())
    }

    /// The answer to `serial`, reading (and keeping others' answers) until it arrives or the
    /// deadline passes.
    pub fn wait(&mut self, serial: u32, deadline: Instant) -> Result<Vec<Val>, DbusError> {
        self.flush()?;
        loop {
            if let Some(answer) = self.answers.remove(&serial) {
                return answer;
            }
            if !self.read_one(deadline)? {
                return Err(DbusError::Timeout);
            }
        }
    }

    /// An answer already read, if any (for callers that collect many).
    pub fn take(&mut self, serial: u32) -> Option<Result<Vec<Val>, DbusError>> {
        self.answers.remove(&serial)
    }

    /// Forget an answer that is no longer wanted (its call timed out), so a late one is
    /// dropped when it comes.
    pub fn forget(&mut self, serial: u32) {
        self.answers.remove(&serial);
        if self.pending.remove(&serial) {
            self.forgotten.insert(serial);
        }
    }

    /// Read until one more message is parsed (kept if it is an answer); `false` at the
    /// deadline. Signals and calls to us are dropped.
    pub fn read_one(&mut self, deadline: Instant) -> Result<bool, DbusError> {
        self.flush()?;
        loop {
            if let Some(()) = self.parse_one()? {
                return Ok(true);
            }
            if !self.fill(deadline)? {
                return Ok(false);
            }
        }
    }

    fn parse_one(&mut self) -> Result<Option<()>, DbusError> {
        if self.rbuf.len() < 16 {
            return Ok(None);
        }
        let big = match self.rbuf[0] {
            b'l' => false,
            b'B' => true,
            other => return Err(DbusError::Protocol(format!("bad endianness byte {other}"))),
        };
        let u32_at = |b: &[u8], at: usize| {
            let a = [b[at], b[at + 1], b[at + 2], b[at + 3]];
            if big {
                u32::from_be_bytes(a)
            } else {
                u32::from_le_bytes(a)
            }
        };
        let body_len = u32_at(&self.rbuf, 4) as usize;
        let fields_len = u32_at(&self.rbuf, 12) as usize;
        if fields_len > MAX_HEADER {
            return Err(DbusError::Protocol("message header too large".into()));
        }
        let header_end = align(16 + fields_len, 8);
        let total = header_end + body_len;
        let too_large = total > self.max_message;
        let need = if too_large { header_end } else { total };
        if self.rbuf.len() < need {
            return Ok(None);
        }
        let kind = self.rbuf[1];
        let mut r = Reader {
            buf: &self.rbuf[..need],
            pos: 12,
            big,
            depth: 0,
        };
        let fields = r.value(b"a(yv)")?;
        let mut reply_serial = None;
        let mut error_name = String::new();
        let mut signature = String::new();
        for f in fields.items() {
            let (code, v) = match f.items() {
                [Val::Byte(c), v] => (*c, v),
                _ => continue,
            };
            match code {
                4 => error_name = v.as_str().unwrap_or_default().to_string(),
                5 => reply_serial = v.as_u64().and_then(|s| u32::try_from(s).ok()),
                8 => signature = v.as_str().unwrap_or_default().to_string(),
                _ => {}
            }
        }
        let answer = if too_large {
            Err(DbusError::TooLarge(total))
        } else {
            let mut body = Reader {
                buf: &self.rbuf[..total],
                pos: header_end,
                big,
                depth: 0,
            };
            let mut vals = Vec::new();
            let sig = signature.as_bytes();
            let mut i = 0;
            while i < sig.len() {
                let end = complete_type_end(sig, i)?;
                vals.push(body.value(&sig[i..end])?);
                i = end;
            }
            match kind {
                3 => Err(DbusError::Remote {
                    name: error_name,
                    message: vals
                        .first()
                        .and_then(Val::as_str)
                        .map(|s| crate::base::label::cut(s, 200).to_string())
                        .unwrap_or_default(),
                }),
                _ => Ok(vals),
            }
        };
        if too_large {
            let have = self.rbuf.len().min(total);
            self.rbuf.drain(..have);
            self.skip = total - have;
        } else {
            self.rbuf.drain(..total);
        }
        if matches!(kind, 2 | 3) {
            if let Some(serial) = reply_serial {
                if self.pending.remove(&serial) {
                    self.answers.insert(serial, answer);
                } else {
                    self.forgotten.remove(&serial);
                }
            }
        }
        Ok(Some(()))
    }

    /// A connection over a stream that needs no authentication: the fake bus of tests.
    #[cfg(test)]
    pub(crate) fn over(stream: UnixStream, max_message: usize) -> Conn {
        Conn::new(stream, max_message)
    }

    /// Whether nothing of earlier calls is pending: no answer held or awaited late, no
    /// message half read or unsent. Only such a connection is kept for later calls.
    pub fn is_idle(&self) -> bool {
        self.answers.is_empty()
            && self.forgotten.is_empty()
            && self.rbuf.is_empty()
            && self.skip == 0
            && self.out.is_empty()
    }

    /// How many answers are held unread (for bounding callers' pipelines).
    pub fn held(&self) -> usize {
        self.answers.len()
    }
}

impl std::os::fd::AsFd for Conn {
    fn as_fd(&self) -> std::os::fd::BorrowedFd<'_> {
        self.stream.as_fd()
    }
}

fn align(n: usize, a: usize) -> usize {
    n.div_ceil(a) * a
}

fn pad(out: &mut Vec<u8>, a: usize) {
    while out.len() % a != 0 {
        out.push(0);
    }
}

fn put_u32(out: &mut Vec<u8>, v: u32) {
    pad(out, 4);
    out.extend_from_slice(&v.to_le_bytes());
}

fn put_str(out: &mut Vec<u8>, s: &str) {
    put_u32(out, s.len() as u32);
    out.extend_from_slice(s.as_bytes());
    out.push(0);
}

fn put_sig(out: &mut Vec<u8>, s: &str) {
    out.push(s.len() as u8);
    out.extend_from_slice(s.as_bytes());
    out.push(0);
}

/// Append one method-call message (little-endian) to `out`. Alignment is relative to the
/// message's start, so each message is built on its own and then appended.
fn encode_call(out: &mut Vec<u8>, serial: u32, call: &Call) {
    let mut body = Vec::new();
    let mut sig = String::new();
    for a in call.args {
        sig.push(a.sig() as char);
        match a {
            Arg::Str(s) | Arg::Path(s) => put_str(&mut body, s),
            Arg::U32(u) => put_u32(&mut body, *u),
            Arg::I32(i) => put_u32(&mut body, *i as u32),
        }
    }
    let mut m = vec![b'l', 1, 0, 1];
    m.extend_from_slice(&(body.len() as u32).to_le_bytes());
    m.extend_from_slice(&serial.to_le_bytes());
    m.extend_from_slice(&[0; 4]); // fields length, set below
    let fields_start = m.len();
    let field = |m: &mut Vec<u8>, code: u8, sigc: &str, val: &str| {
        pad(m, 8);
        m.push(code);
        put_sig(m, sigc);
        if sigc == "g" {
            put_sig(m, val);
        } else {
            put_str(m, val);
        }
    };
    field(&mut m, 1, "o", call.path);
    if !call.iface.is_empty() {
        field(&mut m, 2, "s", call.iface);
    }
    field(&mut m, 3, "s", call.member);
    field(&mut m, 6, "s", call.dest);
    if !sig.is_empty() {
        field(&mut m, 8, "g", &sig);
    }
    let fields_len = (m.len() - fields_start) as u32;
    m[12..16].copy_from_slice(&fields_len.to_le_bytes());
    pad(&mut m, 8);
    m.extend_from_slice(&body);
    out.extend_from_slice(&m);
}

/// Where the single complete type starting at `sig[i]` ends.
fn complete_type_end(sig: &[u8], i: usize) -> Result<usize, DbusError> {
    let bad = || DbusError::Protocol("bad signature".into());
    let mut depth = 0usize;
    let mut j = i;
    loop {
        let c = *sig.get(j).ok_or_else(bad)?;
        j += 1;
        match c {
            b'a' => continue,
            b'(' | b'{' => depth += 1,
            b')' | b'}' => depth = depth.checked_sub(1).ok_or_else(bad)?,
            b'y' | b'b' | b'n' | b'q' | b'i' | b'u' | b'x' | b't' | b'd' | b's' | b'o' | b'g'
            | b'v' | b'h' => {}
            _ => return Err(bad()),
        }
        if depth == 0 {
            return Ok(j);
        }
        if depth > MAX_DEPTH as usize {
            return Err(bad());
        }
    }
}

fn alignment(c: u8) -> usize {
    match c {
        b'y' | b'g' | b'v' => 1,
        b'n' | b'q' => 2,
        b'x' | b't' | b'd' | b'(' | b'{' => 8,
        _ => 4,
    }
}

/// Reads values from a whole message (positions are relative to its start).
struct Reader<'a> {
    buf: &'a [u8],
    pos: usize,
    big: bool,
    depth: u32,
}

impl Reader<'_> {
    fn short(&self) -> DbusError {
        DbusError::Protocol("message shorter than its contents".into())
    }

    fn take(&mut self, n: usize, a: usize) -> Result<&[u8], DbusError> {
        let start = align(self.pos, a);
        let end = start.checked_add(n).ok_or_else(|| self.short())?;
        if end > self.buf.len() {
            return Err(self.short());
        }
        self.pos = end;
        Ok(&self.buf[start..end])
    }

    fn uint(&mut self, n: usize) -> Result<u64, DbusError> {
        let big = self.big;
        let b = self.take(n, n)?;
        let mut v = 0u64;
        if big {
            for &x in b {
                v = (v << 8) | u64::from(x);
            }
        } else {
            for &x in b.iter().rev() {
                v = (v << 8) | u64::from(x);
            }
        }
        Ok(v)
    }

    fn string(&mut self, len_bytes: usize) -> Result<String, DbusError> {
        let len = if len_bytes == 1 {
            u64::from(self.take(1, 1)?[0])
        } else {
            self.uint(4)?
        } as usize;
        let b = self.take(len + 1, 1)?;
        std::str::from_utf8(&b[..len])
            .map(str::to_string)
            .map_err(|_| DbusError::Protocol("string is not UTF-8".into()))
    }

    /// One value of the single complete type `sig`.
    fn value(&mut self, sig: &[u8]) -> Result<Val, DbusError> {
        self.depth += 1;
        if self.depth > MAX_DEPTH {
            return Err(DbusError::Protocol("values nested too deep".into()));
        }
        let v = self.value_inner(sig);
        self.depth -= 1;
        v
    }

    fn value_inner(&mut self, sig: &[u8]) -> Result<Val, DbusError> {
        let bad = || DbusError::Protocol("bad signature".into());
        let c = *sig.first().ok_or_else(bad)?;
        Ok(match c {
            b'y' => Val::Byte(self.take(1, 1)?[0]),
            b'b' => Val::Bool(self.uint(4)? != 0),
            b'n' => Val::Int(i64::from(self.uint(2)? as u16 as i16)),
            b'q' => Val::UInt(self.uint(2)?),
            b'i' => Val::Int(i64::from(self.uint(4)? as u32 as i32)),
            b'u' | b'h' => Val::UInt(self.uint(4)?),
            b'x' => Val::Int(self.uint(8)? as i64),
            b't' => Val::UInt(self.uint(8)?),
            b'd' => Val::Double(f64::from_bits(self.uint(8)?)),
            b's' | b'o' => Val::Str(self.string(4)?),
            b'g' => Val::Str(self.string(1)?),
            b'v' => {
                let inner = self.string(1)?;
                let sig = inner.as_bytes();
                if sig.is_empty() || complete_type_end(sig, 0)? != sig.len() {
                    return Err(bad());
                }
                Val::Variant(Box::new(self.value(sig)?))
            }
            b'a' => {
                let len = self.uint(4)? as usize;
                let elem = &sig[1..complete_type_end(sig, 1)?];
                self.take(0, alignment(elem[0]))?;
                let end = self.pos.checked_add(len).ok_or_else(|| self.short())?;
                if end > self.buf.len() {
                    return Err(self.short());
                }
                if elem == b"y" {
                    let b = self.take(len, 1)?.to_vec();
                    return Ok(Val::Bytes(b));
                }
                let mut items = Vec::new();
                while self.pos < end {
                    items.push(self.value(elem)?);
                }
                if self.pos != end {
                    return Err(self.short());
                }
                Val::Array(items)
            }
            b'(' | b'{' => {
                self.take(0, 8)?;
                let close = complete_type_end(sig, 0)? - 1;
                let mut fields = Vec::new();
                let mut i = 1;
                while i < close {
                    let end = complete_type_end(sig, i)?;
                    fields.push(self.value(&sig[i..end])?);
                    i = end;
                }
                Val::Struct(fields)
            }
            _ => return Err(bad()),
        })
    }
}

/// A fake bus's side of the wire, for tests elsewhere in the crate.
#[cfg(test)]
pub(crate) mod fake {
    use super::*;

    /// The first whole message of `buf`: its length, serial, destination and member.
    pub fn call_at(buf: &[u8]) -> Option<(usize, u32, String, String)> {
        if buf.len() < 16 {
            return None;
        }
        let body = u32::from_le_bytes(buf[4..8].try_into().ok()?) as usize;
        let serial = u32::from_le_bytes(buf[8..12].try_into().ok()?);
        let fields = u32::from_le_bytes(buf[12..16].try_into().ok()?) as usize;
        let total = align(16 + fields, 8) + body;
        if buf.len() < total {
            return None;
        }
        let mut r = Reader {
            buf: &buf[..total],
            pos: 12,
            big: false,
            depth: 0,
        };
        let f = r.value(b"a(yv)").ok()?;
        let field = |code: u64| {
            f.items()
                .iter()
                .find(|x| x.items().first().and_then(Val::as_u64) == Some(code))
                .and_then(|x| x.items().get(1)?.as_str().map(str::to_string))
                .unwrap_or_default()
        };
        Some((total, serial, field(6), field(3)))
    }

    /// A reply from the bus to call `reply_to`, its body one `u`.
    pub fn reply_u(serial: u32, reply_to: u32, v: u32) -> Vec<u8> {
        let mut body = Vec::new();
        put_u32(&mut body, v);
        tests::reply(serial, reply_to, "u", &body)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A reply message as a bus would send it: little-endian, the given body.
    pub(super) fn reply(serial: u32, reply_to: u32, sig: &str, body: &[u8]) -> Vec<u8> {
        let mut m = vec![b'l', 2, 0, 1];
        m.extend_from_slice(&(body.len() as u32).to_le_bytes());
        m.extend_from_slice(&serial.to_le_bytes());
        m.extend_from_slice(&[0; 4]);
        let start = m.len();
        pad(&mut m, 8);
        m.push(5);
        put_sig(&mut m, "u");
        put_u32(&mut m, reply_to);
        if !sig.is_empty() {
            pad(&mut m, 8);
            m.push(8);
            put_sig(&mut m, "g");
            put_sig(&mut m, sig);
        }
        let len = (m.len() - start) as u32;
        m[12..16].copy_from_slice(&len.to_le_bytes());
        pad(&mut m, 8);
        m.extend_from_slice(body);
        m
    }

    /// Send a call with no arguments; its serial.
    fn ask(conn: &mut Conn, member: &str) -> u32 {
        conn.send(&Call {
            dest: "d",
            path: "/",
            iface: "",
            member,
            args: &[],
        })
    }

    fn pair() -> (Conn, UnixStream) {
        let (a, b) = UnixStream::pair().unwrap();
        let mut conn = Conn::new(a, 4096);
        conn.serial = 10;
        (conn, b)
    }

    /// A socket served by this test process, in a directory of its own.
    fn listener(name: &str) -> (std::os::unix::net::UnixListener, String, std::path::PathBuf) {
        let dir = std::env::temp_dir().join(format!("handnode-peer-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("socket");
        let l = std::os::unix::net::UnixListener::bind(&path).unwrap();
        (l, format!("unix:path={}", path.display()), dir)
    }

    #[test]
    fn a_socket_another_process_serves_is_refused_before_a_byte_is_sent() {
        // An application could name any socket as its own: the daemon connects only when
        // the application's own process serves it, and says nothing to any other.
        let (l, address, dir) = listener("other");
        let not_ours = std::process::id() + 1;
        let err = Conn::connect_peer(&address, not_ours, Duration::from_secs(5), 4096)
            .expect_err("another process's socket");
        assert!(
            err.to_string()
                .contains(&format!("served by process {}", std::process::id())),
            "{err}"
        );
        let (mut accepted, _) = l.accept().unwrap();
        accepted
            .set_read_timeout(Some(Duration::from_secs(5)))
            .unwrap();
        let mut got = Vec::new();
        accepted.read_to_end(&mut got).unwrap();
        assert!(got.is_empty(), "sent {got:?} to a socket it refused");
        // Neither an abstract nor a relative address is taken from an application.
        for bad in [
            "unix:abstract=/tmp/x",
            "unix:path=relative/socket",
            "tcp:host=127.0.0.1",
        ] {
            let err = Conn::connect_peer(bad, std::process::id(), Duration::from_secs(5), 4096)
                .expect_err(bad);
            assert!(matches!(err, DbusError::Protocol(_)), "{bad}: {err}");
        }
        let _ = std::fs::remove_dir_all(dir);
    }

    #[test]
    fn an_applications_own_socket_is_authenticated_without_a_hello() {
        let (l, address, dir) = listener("own");
        let server = std::thread::spawn(move || {
            let (mut s, _) = l.accept().unwrap();
            s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
            let mut got = Vec::new();
            let mut byte = [0u8; 1];
            while !got.ends_with(b"\r\n") {
                s.read_exact(&mut byte).unwrap();
                got.push(byte[0]);
            }
            s.write_all(b"OK 0123456789abcdef0123456789abcdef\r\n")
                .unwrap();
            let mut rest = Vec::new();
            s.read_to_end(&mut rest).unwrap();
            (got, rest)
        });
        let conn = Conn::connect_peer(&address, std::process::id(), Duration::from_secs(5), 4096)
            .expect("this process's own socket");
        drop(conn);
        let (auth, rest) = server.join().unwrap();
        assert!(auth.starts_with(b"\0AUTH EXTERNAL "), "{auth:?}");
        // BEGIN, and no Hello: a peer is not a bus.
        assert_eq!(rest, b"BEGIN\r\n");
        let _ = std::fs::remove_dir_all(dir);
    }

    #[test]
    fn only_answers_to_calls_in_flight_are_kept() {
        // An application's own socket is no bus: nothing stops it sending replies to
        // serials it was never asked, or twice to one it was.
        let (mut conn, mut peer) = pair();
        let asked = ask(&mut conn, "A");
        conn.flush().unwrap();
        let mut v = Vec::new();
        put_u32(&mut v, 1);
        for (n, to) in [asked + 1, asked - 1, 3, asked, asked]
            .into_iter()
            .enumerate()
        {
            peer.write_all(&reply(100 + n as u32, to, "u", &v)).unwrap();
        }
        let deadline = Instant::now() + Duration::from_secs(5);
        assert_eq!(conn.wait(asked, deadline).unwrap(), vec![Val::UInt(1)]);
        // Four messages were read to find it; the fifth, a second answer, is dropped too.
        assert!(conn.read_one(deadline).unwrap());
        assert_eq!(conn.held(), 0);
        assert!(conn.is_idle());
    }

    #[test]
    fn addresses_parse_paths_abstract_and_escapes() {
        assert_eq!(
            parse_address("unix:path=/run/user/1/bus").unwrap(),
            SocketAddr::Path("/run/user/1/bus".into())
        );
        assert_eq!(
            parse_address("tcp:host=x;unix:abstract=/tmp/dbus-%41b,guid=12").unwrap(),
            SocketAddr::Abstract(b"/tmp/dbus-Ab".to_vec())
        );
        assert!(parse_address("tcp:host=localhost,port=1").is_err());
        assert!(parse_address("unix:path=%4").is_err());
    }

    #[test]
    fn a_call_encodes_as_the_spec_says() {
        let mut out = Vec::new();
        encode_call(
            &mut out,
            7,
            &Call {
                dest: "d",
                path: "/p",
                iface: "i",
                member: "M",
                args: &[Arg::Str("ab"), Arg::U32(5)],
            },
        );
        assert_eq!(&out[..4], &[b'l', 1, 0, 1]);
        let body_len = u32::from_le_bytes(out[4..8].try_into().unwrap()) as usize;
        assert_eq!(body_len, 4 + 3 + 1 + 4); // "ab\0", pad to 4, u32
        assert_eq!(u32::from_le_bytes(out[8..12].try_into().unwrap()), 7);
        let mut r = Reader {
            buf: &out,
            pos: 12,
            big: false,
            depth: 0,
        };
        let fields = r.value(b"a(yv)").unwrap();
        let codes: Vec<u64> = fields
            .items()
            .iter()
            .map(|f| f.items()[0].as_u64().unwrap())
            .collect();
        assert_eq!(codes, [1, 2, 3, 6, 8]);
        let body_start = out.len() - body_len;
        assert_eq!(body_start % 8, 0, "the body starts 8-aligned");
        let mut r = Reader {
            buf: &out,
            pos: body_start,
            big: false,
            depth: 0,
        };
        assert_eq!(r.value(b"s").unwrap(), Val::Str("ab".into()));
        assert_eq!(r.value(b"u").unwrap(), Val::UInt(5));
    }

    #[test]
    fn pipelined_answers_arrive_in_any_order_and_nested_values_parse() {
        let (mut conn, mut peer) = pair();
        let a = ask(&mut conn, "A");
        let b = ask(&mut conn, "B");
        conn.flush().unwrap();
        // a(so): one struct, aligned to 8 after the array length.
        let mut body = Vec::new();
        put_u32(&mut body, 0);
        pad(&mut body, 8);
        let start = body.len();
        put_str(&mut body, ":1.5");
        put_str(&mut body, "/x");
        let len = (body.len() - start) as u32;
        body[0..4].copy_from_slice(&len.to_le_bytes());
        peer.write_all(&reply(1, b, "a(so)", &body)).unwrap();
        let mut v = Vec::new();
        put_u32(&mut v, 42);
        peer.write_all(&reply(2, a, "u", &v)).unwrap();
        let deadline = Instant::now() + Duration::from_secs(5);
        assert_eq!(conn.wait(a, deadline).unwrap(), vec![Val::UInt(42)]);
        let got = conn.wait(b, deadline).unwrap();
        let item = &got[0].items()[0];
        assert_eq!(item.items()[0].as_str(), Some(":1.5"));
        assert_eq!(item.items()[1].as_str(), Some("/x"));
    }

    #[test]
    fn a_silent_peer_times_out_and_an_answer_over_the_cap_is_skipped_whole() {
        let (mut conn, mut peer) = pair();
        let a = ask(&mut conn, "A");
        let started = Instant::now();
        let err = conn
            .wait(a, Instant::now() + Duration::from_millis(50))
            .unwrap_err();
        assert_eq!(err, DbusError::Timeout);
        assert!(started.elapsed() < Duration::from_secs(5));
        // Cap 4096: a body of cap+1 bytes is skipped, and the next answer still parses.
        let b = ask(&mut conn, "B");
        conn.flush().unwrap();
        let mut big = Vec::new();
        put_u32(&mut big, 4097);
        big.extend(std::iter::repeat_n(b'x', 4097));
        big.push(0);
        peer.write_all(&reply(3, a, "s", &big)).unwrap();
        let mut v = Vec::new();
        put_u32(&mut v, 1);
        peer.write_all(&reply(4, b, "u", &v)).unwrap();
        let deadline = Instant::now() + Duration::from_secs(5);
        assert!(matches!(
            conn.wait(a, deadline),
            Err(DbusError::TooLarge(_))
        ));
        assert_eq!(conn.wait(b, deadline).unwrap(), vec![Val::UInt(1)]);
    }

    #[test]
    fn a_message_that_lies_about_its_contents_is_a_protocol_error() {
        let (mut conn, mut peer) = pair();
        let a = ask(&mut conn, "A");
        conn.flush().unwrap();
        let mut body = Vec::new();
        put_u32(&mut body, 1000); // a string longer than the body
        peer.write_all(&reply(1, a, "s", &body)).unwrap();
        let err = conn
            .wait(a, Instant::now() + Duration::from_secs(5))
            .unwrap_err();
        assert!(err.is_fatal(), "{err}");
    }
}
