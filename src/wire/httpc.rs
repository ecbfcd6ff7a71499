//! The daemon's outbound HTTP/1.1 client: one request per connection, a deadline over the
//! whole exchange, a cap on what it reads, no proxy from the environment and no redirects.
//! Used to mint attach secrets at a pod, to talk to upstream MCP servers and by the
//! operator CLI. Response parsing is done on any `BufRead`, so it is tested (and fuzzed)
//! on bytes without a socket.
//!
//! Hand-written rather than a general client crate: the daemon needs a small, fixed subset
//! (sized, chunked and close-delimited bodies; http and https over the same rustls
//! configuration the dial uses), and a general client was a sixth of the binary.

use std::io::{self, BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::wire::tls::{connect_first, ClientStream, ConnectError};

/// Most bytes of a response's status line and headers together.
pub const MAX_HEAD_BYTES: usize = 64 << 10;
/// Most header lines in a response.
pub const MAX_HEADERS: usize = 100;
/// Most bytes of one chunk-size line (digits, extensions) or trailer line.
const MAX_CHUNK_LINE_BYTES: usize = 1024;

/// Where a request goes: scheme, authority and the path (with query) to send.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Target {
    pub tls: bool,
    pub host: String,
    pub port: u16,
    /// Starts with `/`.
    pub path: String,
}

impl Target {
    /// Parse an `http://` or `https://` URL (userinfo refused, IPv6 in brackets).
    pub fn parse(url: &str) -> Result<Target, String> {
        let (tls, rest) = if let Some(rest) = crate::base::url::strip_prefix_ci(url, "https://") {
            (true, rest)
        } else if let Some(rest) = crate::base::url::strip_prefix_ci(url, "http://") {
            (false, rest)
        } else {
            return Err("not an http:// or https:// URL".into());
        };
        let path_at = rest.find(['/', '?']).unwrap_or(rest.len());
        let (authority, path) = rest.split_at(path_at);
        let path = path.split('#').next().unwrap_or("");
        let (host, port) =
            crate::base::url::authority_parts(authority, if tls { 443 } else { 80 })?;
        if path.bytes().any(|b| b <= b' ' || b == 0x7f) {
            return Err("spaces or control characters in the path".into());
        }
        let path = match path {
            "" => "/".to_string(),
            p if p.starts_with('?') => format!("/{p}"),
            p => p.to_string(),
        };
        Ok(Target {
            tls,
            host,
            port,
            path,
        })
    }

    /// The `Host` header: IPv6 back in brackets, the port always given.
    fn host_header(&self) -> String {
        if self.host.contains(':') {
            format!("[{}]:{}", self.host, self.port)
        } else {
            format!("{}:{}", self.host, self.port)
        }
    }
}

/// Why a request got no response.
#[derive(Debug)]
pub enum HttpError {
    /// The deadline passed (connecting, sending or waiting for the head).
    Timeout,
    /// No connection: refused, unreachable, name not resolved.
    Connect(io::Error),
    /// The TLS handshake or the server name failed.
    Tls(String),
    /// The connection broke while sending or reading.
    Io(io::Error),
    /// What came back is not an HTTP/1.x response we can read.
    BadResponse(String),
}

impl std::fmt::Display for HttpError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            HttpError::Timeout => write!(f, "timed out"),
            HttpError::Connect(e) if e.kind() == io::ErrorKind::ConnectionRefused => {
                write!(f, "connection refused")
            }
            HttpError::Connect(e) => write!(f, "cannot connect: {e}"),
            HttpError::Tls(e) => write!(f, "TLS: {e}"),
            HttpError::Io(e) => write!(f, "{e}"),
            HttpError::BadResponse(e) => write!(f, "bad HTTP response: {e}"),
        }
    }
}

impl From<io::Error> for HttpError {
    fn from(e: io::Error) -> Self {
        if is_timeout(&e) {
            HttpError::Timeout
        } else {
            HttpError::Io(e)
        }
    }
}

/// True when a socket read or write gave up on its timeout (the deadline passed).
pub fn is_timeout(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
    )
}

/// A body read stopped because the body is longer than the caller's cap.
#[derive(Debug)]
pub struct BodyTooLarge {
    pub limit: u64,
}

impl std::fmt::Display for BodyTooLarge {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "body larger than {} bytes", self.limit)
    }
}

impl std::error::Error for BodyTooLarge {}

/// True when a body read failed on the cap rather than on the connection.
pub fn is_too_large(e: &io::Error) -> bool {
    e.get_ref()
        .is_some_and(|inner| inner.downcast_ref::<BodyTooLarge>().is_some())
}

/// One request: method, where, extra headers and a body (sent with `Content-Length` when
/// the method carries one).
#[derive(Debug)]
pub struct Request<'a> {
    pub method: &'a str,
    pub target: &'a Target,
    pub headers: &'a [(&'a str, &'a str)],
    pub body: Option<&'a [u8]>,
}

/// The socket of one exchange: TCP (plain or TLS), or the daemon's local Unix socket.
enum Conn {
    Net(ClientStream),
    Unix(std::os::unix::net::UnixStream),
}

/// A reader whose socket timeouts follow one deadline.
pub struct Deadlined {
    conn: Conn,
    deadline: Instant,
}

impl Deadlined {
    fn arm(&self) -> io::Result<()> {
        let left = self.deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(io::Error::new(io::ErrorKind::TimedOut, "deadline passed"));
        }
        match &self.conn {
            Conn::Net(c) => {
                c.tcp().set_read_timeout(Some(left))?;
                c.tcp().set_write_timeout(Some(left))
            }
            Conn::Unix(u) => {
                u.set_read_timeout(Some(left))?;
                u.set_write_timeout(Some(left))
            }
        }
    }
}

impl Read for Deadlined {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        self.arm()?;
        let conn = match &mut self.conn {
            Conn::Net(c) => c,
            Conn::Unix(u) => return u.read(buf),
        };
        match conn.read(buf) {
            // A TLS peer that closes without close_notify ends the body like a plain EOF:
            // framing (length or chunks) still tells a complete body from a cut one.
            Err(e)
                if e.kind() == io::ErrorKind::UnexpectedEof
                    && matches!(conn, ClientStream::Tls(_)) =>
            {
                Ok(0)
            }
            other => other,
        }
    }
}

impl Write for Deadlined {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.arm()?;
        match &mut self.conn {
            Conn::Net(c) => c.write(buf),
            Conn::Unix(u) => u.write(buf),
        }
    }
    fn flush(&mut self) -> io::Result<()> {
        self.arm()?;
        match &mut self.conn {
            Conn::Net(c) => c.flush(),
            Conn::Unix(u) => u.flush(),
        }
    }
}

/// Send `req` and read the response head. `tls` is used for `https://` targets; the whole
/// exchange, body included, must end by `timeout` from now.
pub fn send(
    req: &Request<'_>,
    timeout: Duration,
    tls: Option<&Arc<rustls::ClientConfig>>,
) -> Result<Response<BufReader<Deadlined>>, HttpError> {
    let deadline = Instant::now() + timeout;
    let target = req.target;
    let tcp = connect(&target.host, target.port, deadline)?;
    let _ = tcp.set_nodelay(true);
    let tls = match target.tls {
        true => Some(tls.ok_or_else(|| HttpError::Tls("no TLS configuration for https".into()))?),
        false => None,
    };
    let conn =
        ClientStream::new(tcp, &target.host, tls).map_err(|e| HttpError::Tls(e.to_string()))?;
    exchange(
        Deadlined {
            conn: Conn::Net(conn),
            deadline,
        },
        req,
    )
}

/// [`send`] over the Unix socket at `socket` (the daemon's local socket); `req.target`
/// gives the path and the `Host` header.
pub fn send_unix(
    socket: &std::path::Path,
    req: &Request<'_>,
    timeout: Duration,
) -> Result<Response<BufReader<Deadlined>>, HttpError> {
    let deadline = Instant::now() + timeout;
    let conn = std::os::unix::net::UnixStream::connect(socket).map_err(HttpError::Connect)?;
    exchange(
        Deadlined {
            conn: Conn::Unix(conn),
            deadline,
        },
        req,
    )
}

fn exchange(
    mut stream: Deadlined,
    req: &Request<'_>,
) -> Result<Response<BufReader<Deadlined>>, HttpError> {
    stream.write_all(&request_head(req))?;
    if let Some(body) = req.body {
        stream.write_all(body)?;
    }
    stream.flush()?;
    read_head(BufReader::new(stream))
}

fn connect(host: &str, port: u16, deadline: Instant) -> Result<TcpStream, HttpError> {
    let mut left =
        || Some(deadline.saturating_duration_since(Instant::now())).filter(|d| !d.is_zero());
    connect_first(host, port, &mut left).map_err(|e| match e {
        ConnectError::Resolve(e) => HttpError::Connect(e),
        ConnectError::NoAddress => HttpError::Connect(io::Error::new(
            io::ErrorKind::NotFound,
            "the name has no address",
        )),
        ConnectError::OutOfTime => HttpError::Timeout,
        ConnectError::Failed(_, e) if is_timeout(&e) => HttpError::Timeout,
        ConnectError::Failed(_, e) => HttpError::Connect(e),
    })
}

fn request_head(req: &Request<'_>) -> Vec<u8> {
    let mut head = format!(
        "{} {} HTTP/1.1\r\nHost: {}\r\nConnection: close\r\nUser-Agent: handnode/{}\r\n",
        req.method,
        req.target.path,
        req.target.host_header(),
        env!("CARGO_PKG_VERSION"),
    );
    for (name, value) in req.headers {
        head.push_str(name);
        head.push_str(": ");
        head.push_str(value);
        head.push_str("\r\n");
    }
    if let Some(body) = req.body {
        head.push_str(&format!("Content-Length: {}\r\n", body.len()));
    }
    head.push_str("\r\n");
    head.into_bytes()
}

/// How the body's end is found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Framing {
    Length(u64),
    /// Bytes left in the current chunk; `None` before a size line.
    Chunked(Option<u64>),
    UntilClose,
    Done,
}

/// A response: status, headers, and the body to read (once, through [`Response::body`]).
pub struct Response<R> {
    pub status: u16,
    headers: Vec<(String, Vec<u8>)>,
    reader: R,
    framing: Framing,
}

impl<R> std::fmt::Debug for Response<R> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Response")
            .field("status", &self.status)
            .field("framing", &self.framing)
            .finish_non_exhaustive()
    }
}

/// Read a response head from `reader`, leaving it at the first body byte.
pub fn read_head<R: BufRead>(mut reader: R) -> Result<Response<R>, HttpError> {
    let mut head = Vec::new();
    loop {
        let before = head.len();
        let n = (&mut reader)
            .take((MAX_HEAD_BYTES + 1 - head.len()) as u64)
            .read_until(b'\n', &mut head)?;
        if n == 0 {
            return Err(HttpError::BadResponse(if head.is_empty() {
                "the connection closed without a response".into()
            } else {
                "the connection closed inside the response head".into()
            }));
        }
        if head.len() > MAX_HEAD_BYTES {
            return Err(HttpError::BadResponse(format!(
                "response head longer than {MAX_HEAD_BYTES} bytes"
            )));
        }
        let line = &head[before..];
        if line == b"\r\n" || line == b"\n" {
            break;
        }
    }
    let mut slots = [httparse::EMPTY_HEADER; MAX_HEADERS];
    let mut parsed = httparse::Response::new(&mut slots);
    match parsed.parse(&head) {
        Ok(httparse::Status::Complete(_)) => {}
        Ok(httparse::Status::Partial) => {
            return Err(HttpError::BadResponse("incomplete response head".into()))
        }
        Err(e) => return Err(HttpError::BadResponse(e.to_string())),
    }
    let status = parsed.code.unwrap_or(0);
    let headers: Vec<(String, Vec<u8>)> = parsed
        .headers
        .iter()
        .map(|h| (h.name.to_ascii_lowercase(), h.value.to_vec()))
        .collect();
    let value = |name: &str| {
        headers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| String::from_utf8_lossy(v).trim().to_ascii_lowercase())
    };
    let framing = if status / 100 == 1 || status == 204 || status == 304 {
        Framing::Done
    } else if value("transfer-encoding").is_some_and(|v| v.contains("chunked")) {
        Framing::Chunked(None)
    } else if let Some(length) = value("content-length") {
        let n = length
            .parse::<u64>()
            .map_err(|_| HttpError::BadResponse(format!("Content-Length {length:?}")))?;
        if n == 0 {
            Framing::Done
        } else {
            Framing::Length(n)
        }
    } else {
        Framing::UntilClose
    };
    Ok(Response {
        status,
        headers,
        reader,
        framing,
    })
}

impl<R: BufRead> Response<R> {
    /// The first value of header `name` (lower-case), as sent.
    pub fn header(&self, name: &str) -> Option<&[u8]> {
        self.headers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_slice())
    }

    /// Every header in the order sent: the name lower-case, the value as sent.
    pub fn headers(&self) -> impl Iterator<Item = (&str, &[u8])> {
        self.headers.iter().map(|(n, v)| (n.as_str(), v.as_slice()))
    }

    /// The body, ending where the framing says; more than `limit` bytes is an error that
    /// [`is_too_large`] recognises.
    pub fn body(self, limit: u64) -> Body<R> {
        Body {
            reader: self.reader,
            framing: self.framing,
            limit,
            delivered: 0,
        }
    }

    /// The whole body, up to `limit` bytes.
    pub fn read_body(self, limit: u64) -> io::Result<Vec<u8>> {
        let mut out = Vec::new();
        self.body(limit).read_to_end(&mut out)?;
        Ok(out)
    }
}

/// A response body as a reader (de-chunked, capped).
pub struct Body<R> {
    reader: R,
    framing: Framing,
    limit: u64,
    delivered: u64,
}

fn malformed(what: &str) -> io::Error {
    io::Error::new(
        io::ErrorKind::InvalidData,
        format!("malformed body: {what}"),
    )
}

impl<R: BufRead> Body<R> {
    fn line(&mut self) -> io::Result<String> {
        let mut line = Vec::new();
        (&mut self.reader)
            .take(MAX_CHUNK_LINE_BYTES as u64 + 1)
            .read_until(b'\n', &mut line)?;
        if line.len() > MAX_CHUNK_LINE_BYTES {
            return Err(malformed("chunk line too long"));
        }
        if line.last() != Some(&b'\n') {
            return Err(malformed("cut inside a chunk line"));
        }
        Ok(String::from_utf8_lossy(&line).trim().to_string())
    }

    /// Bytes the next `read` may take from the wire, `0` at the end.
    fn available(&mut self) -> io::Result<u64> {
        loop {
            match self.framing {
                Framing::Done => return Ok(0),
                Framing::Length(n) => return Ok(n),
                Framing::UntilClose => return Ok(u64::MAX),
                Framing::Chunked(Some(n)) if n > 0 => return Ok(n),
                Framing::Chunked(Some(_)) => {
                    if !self.line()?.is_empty() {
                        return Err(malformed("no CRLF after a chunk"));
                    }
                    self.framing = Framing::Chunked(None);
                }
                Framing::Chunked(None) => {
                    let line = self.line()?;
                    let digits = line.split(';').next().unwrap_or("").trim();
                    let size =
                        u64::from_str_radix(digits, 16).map_err(|_| malformed("bad chunk size"))?;
                    if size == 0 {
                        // Trailers, then the blank line that ends the message.
                        while !self.line()?.is_empty() {}
                        self.framing = Framing::Done;
                    } else {
                        self.framing = Framing::Chunked(Some(size));
                    }
                }
            }
        }
    }
}

impl<R: BufRead> Read for Body<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let available = self.available()?;
        if available == 0 || buf.is_empty() {
            return Ok(0);
        }
        let want = buf
            .len()
            .min(usize::try_from(available).unwrap_or(usize::MAX));
        let n = self.reader.read(&mut buf[..want])?;
        if n == 0 {
            return match self.framing {
                Framing::UntilClose => {
                    self.framing = Framing::Done;
                    Ok(0)
                }
                _ => Err(io::Error::new(
                    io::ErrorKind::UnexpectedEof,
                    "the connection closed inside the body",
                )),
            };
        }
        self.framing = match self.framing {
            Framing::Length(left) if left == n as u64 => Framing::Done,
            Framing::Length(left) => Framing::Length(left - n as u64),
            Framing::Chunked(Some(left)) => Framing::Chunked(Some(left - n as u64)),
            other => other,
        };
        self.delivered += n as u64;
        if self.delivered > self.limit {
            return Err(io::Error::other(BodyTooLarge { limit: self.limit }));
        }
        Ok(n)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(raw: &[u8]) -> Result<Response<&[u8]>, HttpError> {
        read_head(raw)
    }

    #[test]
    fn targets() {
        let t = Target::parse("http://127.0.0.1:8931/mcp").unwrap();
        assert_eq!(
            t,
            Target {
                tls: false,
                host: "127.0.0.1".into(),
                port: 8931,
                path: "/mcp".into()
            }
        );
        assert_eq!(t.host_header(), "127.0.0.1:8931");
        let t = Target::parse("HTTPS://[::1]/a?b=c#frag").unwrap();
        assert!(t.tls);
        assert_eq!(
            (t.host.as_str(), t.port, t.path.as_str()),
            ("::1", 443, "/a?b=c")
        );
        assert_eq!(t.host_header(), "[::1]:443");
        assert_eq!(Target::parse("http://h").unwrap().path, "/");
        assert_eq!(Target::parse("http://h?x").unwrap().path, "/?x");
        for bad in [
            "ftp://h/",
            "/mcp",
            "http://",
            "http://u:p@h/",
            "http://h:0/",
            "http://h:99999/",
            "http://h/a b",
            "http://[::1/",
        ] {
            assert!(Target::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn request_heads_carry_host_length_and_close() {
        let t = Target::parse("http://h:1/p").unwrap();
        let head = request_head(&Request {
            method: "POST",
            target: &t,
            headers: &[("Accept", "application/json")],
            body: Some(b"{}"),
        });
        let text = String::from_utf8(head).unwrap();
        assert!(text.starts_with("POST /p HTTP/1.1\r\nHost: h:1\r\nConnection: close\r\n"));
        assert!(text.contains("\r\nAccept: application/json\r\n"));
        assert!(text.ends_with("Content-Length: 2\r\n\r\n"));
    }

    #[test]
    fn bodies_by_length_chunks_and_close() {
        let r = parse(b"HTTP/1.1 200 OK\r\nContent-Length: 3\r\nX-A: b\r\n\r\nabcdef").unwrap();
        assert_eq!(r.status, 200);
        assert_eq!(r.header("x-a"), Some(&b"b"[..]));
        let all: Vec<_> = r.headers().collect();
        assert_eq!(all, [("content-length", &b"3"[..]), ("x-a", &b"b"[..])]);
        assert_eq!(r.read_body(100).unwrap(), b"abc");
        let r = parse(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3;x=y\r\nabc\r\n2\r\nde\r\n0\r\nT: 1\r\n\r\nzz")
            .unwrap();
        assert_eq!(r.read_body(100).unwrap(), b"abcde");
        let r = parse(b"HTTP/1.0 500 X\n\nall of it").unwrap();
        assert_eq!(r.status, 500);
        assert_eq!(r.read_body(100).unwrap(), b"all of it");
        let r = parse(b"HTTP/1.1 204 No Content\r\n\r\nignored").unwrap();
        assert_eq!(r.read_body(100).unwrap(), b"");
    }

    #[test]
    fn a_body_one_byte_over_the_cap_is_refused_and_at_the_cap_is_not() {
        let ok = parse(b"HTTP/1.1 200 OK\r\nContent-Length: 4\r\n\r\nabcd").unwrap();
        assert_eq!(ok.read_body(4).unwrap(), b"abcd");
        let over = parse(b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nabcde").unwrap();
        assert!(is_too_large(&over.read_body(4).unwrap_err()));
        let chunked =
            parse(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nabcde\r\n0\r\n\r\n")
                .unwrap();
        assert!(is_too_large(&chunked.read_body(4).unwrap_err()));
    }

    #[test]
    fn bad_responses_are_errors_not_panics() {
        for raw in [
            &b""[..],
            b"garbage\r\n\r\n",
            b"HTTP/1.1 200 OK\r\nContent-Length: x\r\n\r\n",
            b"HTTP/1.1 200 OK\r\nContent-Length: 3",
        ] {
            assert!(parse(raw).is_err(), "{:?}", String::from_utf8_lossy(raw));
        }
        let mut long = b"HTTP/1.1 200 OK\r\nX: ".to_vec();
        long.resize(MAX_HEAD_BYTES + 10, b'a');
        long.extend_from_slice(b"\r\n\r\n");
        assert!(matches!(parse(&long), Err(HttpError::BadResponse(m)) if m.contains("longer")));
        let mut many = b"HTTP/1.1 200 OK\r\n".to_vec();
        for i in 0..=MAX_HEADERS {
            many.extend_from_slice(format!("H{i}: v\r\n").as_bytes());
        }
        many.extend_from_slice(b"\r\n");
        assert!(parse(&many).is_err(), "{} headers", MAX_HEADERS + 1);
        for body in [
            &b"zz\r\nabc\r\n0\r\n\r\n"[..],
            b"3\r\nabcXX0\r\n\r\n",
            b"ffffffffffffffffff\r\n",
            b"3\r\nab",
        ] {
            let mut raw = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n".to_vec();
            raw.extend_from_slice(body);
            let r = parse(&raw).unwrap();
            assert!(
                r.read_body(1 << 20).is_err(),
                "{:?}",
                String::from_utf8_lossy(body)
            );
        }
        let cut = parse(b"HTTP/1.1 200 OK\r\nContent-Length: 9\r\n\r\nabc").unwrap();
        assert_eq!(
            cut.read_body(100).unwrap_err().kind(),
            io::ErrorKind::UnexpectedEof
        );
    }
}
