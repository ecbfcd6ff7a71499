//! The daemon's outbound HTTP/1.1 client (minting at a pod, upstream MCP servers, the
//! operator CLI): `ureq`, set up the one way every caller needs it. One deadline over the
//! whole exchange, bodies read through a cap, no proxy from the environment, no redirects,
//! no connection kept between requests, and TLS through the daemon's own rustls
//! configuration ([`crate::wire::tls::client_config`]: webpki roots plus `--ca-file`, ring),
//! so an `https://` request and a `wss://` dial trust the same roots. The operator CLI can
//! also reach the daemon over its local Unix socket through the same client.
//!
//! What stays ours is small: URL checking with errors that say what to fix ([`Target`]),
//! the TLS and Unix-socket connectors (ureq's `unversioned` transport API, hence the exact
//! version pin), and naming the failures (timeout, cap) in the callers' words.

use std::io::{self, Read, Write};
use std::net::ToSocketAddrs;
use std::os::unix::net::UnixStream;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use rustls::pki_types::ServerName;
use rustls::{ClientConfig, ClientConnection, StreamOwned};
use ureq::http;
use ureq::unversioned::resolver::{ResolvedSocketAddrs, Resolver};
use ureq::unversioned::transport::{
    Buffers, ConnectionDetails, Connector, Either, LazyBuffers, NextTimeout, TcpConnector,
    Transport, TransportAdapter,
};

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
        let target = Target {
            tls,
            host,
            port,
            path,
        };
        // What ureq is handed is this URL rebuilt, so it must parse there too.
        target
            .url()
            .parse::<http::Uri>()
            .map_err(|e| format!("not a URL: {e}"))?;
        Ok(target)
    }

    /// The URL rebuilt from its parts: scheme lower-case, the port always given, IPv6 in
    /// brackets, no fragment.
    pub fn url(&self) -> String {
        let scheme = if self.tls { "https" } else { "http" };
        if self.host.contains(':') {
            format!("{scheme}://[{}]:{}{}", self.host, self.port, self.path)
        } else {
            format!("{scheme}://{}:{}{}", self.host, self.port, self.path)
        }
    }
}

/// Why a request got no response.
#[derive(Debug)]
pub enum HttpError {
    /// The deadline over the whole exchange passed (ureq's `Global` timeout), or a phase's
    /// own (ureq names it: connect, receive response, ...) were one ever set.
    Timeout(ureq::Timeout),
    /// No connection: refused, unreachable, name not resolved.
    Connect(String),
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
            HttpError::Timeout(ureq::Timeout::Global) => write!(f, "timed out"),
            HttpError::Timeout(phase) => write!(f, "timed out ({phase})"),
            HttpError::Connect(e) => write!(f, "{e}"),
            HttpError::Tls(e) => write!(f, "TLS: {e}"),
            HttpError::Io(e) => write!(f, "{e}"),
            HttpError::BadResponse(e) => write!(f, "bad HTTP response: {e}"),
        }
    }
}

impl From<ureq::Error> for HttpError {
    fn from(e: ureq::Error) -> Self {
        match e {
            ureq::Error::Timeout(phase) => HttpError::Timeout(phase),
            ureq::Error::Io(e) if e.kind() == io::ErrorKind::ConnectionRefused => {
                HttpError::Connect("connection refused".into())
            }
            ureq::Error::Io(e) if is_tls_failure(&e) => HttpError::Tls(e.to_string()),
            ureq::Error::Io(e) => HttpError::Io(e),
            ureq::Error::HostNotFound => HttpError::Connect("the name has no address".into()),
            ureq::Error::ConnectionFailed => HttpError::Connect("cannot connect".into()),
            ureq::Error::Tls(e) => HttpError::Tls(e.into()),
            other => HttpError::BadResponse(other.to_string()),
        }
    }
}

/// A rustls failure surfaces from the handshake as an `InvalidData` I/O error around a
/// `rustls::Error`.
fn is_tls_failure(e: &io::Error) -> bool {
    e.get_ref()
        .is_some_and(|inner| inner.downcast_ref::<rustls::Error>().is_some())
}

/// The ureq error inside an I/O error from a body read, if that is what it is.
fn ureq_error(e: &io::Error) -> Option<&ureq::Error> {
    e.get_ref().and_then(|inner| inner.downcast_ref())
}

/// True when a body read gave up on the deadline.
pub fn is_timeout(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
    ) || matches!(ureq_error(e), Some(ureq::Error::Timeout(_)))
}

/// True when a body read failed on the cap rather than on the connection.
pub fn is_too_large(e: &io::Error) -> bool {
    matches!(ureq_error(e), Some(ureq::Error::BodyExceedsLimit(_)))
}

/// One request: method, where, extra headers and a body (sent with `Content-Length`).
#[derive(Debug)]
pub struct Request<'a> {
    pub method: &'a str,
    pub target: &'a Target,
    pub headers: &'a [(&'a str, &'a str)],
    pub body: Option<&'a [u8]>,
}

/// A response: status and headers; the body is read once, through a cap.
pub struct Response {
    pub status: u16,
    inner: http::Response<ureq::Body>,
}

impl std::fmt::Debug for Response {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Response")
            .field("status", &self.status)
            .finish_non_exhaustive()
    }
}

impl Response {
    /// The first value of header `name`, as sent.
    pub fn header(&self, name: &str) -> Option<&[u8]> {
        self.inner.headers().get(name).map(|v| v.as_bytes())
    }

    /// The body as a reader (de-chunked, read as it arrives); more than `limit` bytes is an
    /// error that [`is_too_large`] recognises.
    pub fn body(self, limit: u64) -> impl Read {
        self.inner
            .into_body()
            .into_with_config()
            .limit(limit)
            .reader()
    }

    /// The whole body, up to `limit` bytes.
    pub fn read_body(self, limit: u64) -> io::Result<Vec<u8>> {
        let mut out = Vec::new();
        self.body(limit).read_to_end(&mut out)?;
        Ok(out)
    }
}

/// One configured client: TCP (TLS for `https://`), or the daemon's local Unix socket.
#[derive(Debug, Clone)]
pub struct Client {
    agent: ureq::Agent,
}

impl Client {
    /// Over TCP; `tls` is used for `https://` targets (none: `https://` is refused). Every
    /// exchange, body included, ends within `timeout` of its start.
    pub fn new(timeout: Duration, tls: Option<Arc<ClientConfig>>) -> Client {
        let connector = ().chain(TcpConnector::default()).chain(Tls(tls));
        Client {
            agent: ureq::Agent::with_parts(config(timeout), connector, Resolve),
        }
    }

    /// Over the Unix socket at `socket` whatever the URL's host; the URL gives the path and
    /// the `Host` header.
    pub fn unix(socket: PathBuf, timeout: Duration) -> Client {
        Client {
            agent: ureq::Agent::with_parts(config(timeout), ().chain(Unix(socket)), Resolve),
        }
    }

    /// Send `req` and read the response head; any status is a response (none is an error).
    pub fn send(&self, req: &Request<'_>) -> Result<Response, HttpError> {
        let mut builder = http::Request::builder()
            .method(req.method)
            .uri(req.target.url());
        for (name, value) in req.headers {
            builder = builder.header(*name, *value);
        }
        let bad = |e: http::Error| HttpError::BadResponse(format!("cannot send: {e}"));
        let response = match req.body {
            Some(body) => self.agent.run(builder.body(body).map_err(bad)?),
            None => self.agent.run(builder.body(()).map_err(bad)?),
        }?;
        Ok(Response {
            status: response.status().as_u16(),
            inner: response,
        })
    }
}

fn config(timeout: Duration) -> ureq::config::Config {
    ureq::Agent::config_builder()
        // Callers judge the status themselves (a 404 from an upstream means its session is gone).
        .http_status_as_error(false)
        // Not from HTTP(S)_PROXY: the admin token, a pod credential or a tool call must
        // go to the address given and nowhere else.
        .proxy(None)
        // A redirect would turn a POST into a GET and could carry a credential elsewhere; a
        // 3xx is handed back as it is.
        .max_redirects(0)
        .max_redirects_will_error(false)
        // One request per connection: a POST is not retried, so a kept-alive connection the
        // server closed while idle would fail a call.
        .max_idle_connections(0)
        .max_idle_connections_per_host(0)
        .user_agent(concat!("handnode/", env!("CARGO_PKG_VERSION")))
        .timeout_global(Some(timeout))
        .build()
}

/// Resolves on the calling thread, as the dial does. ureq's own resolver starts a thread
/// per request to put the deadline on the lookup; the names here are local (loopback
/// upstreams, the daemon, a pod named in /etc/hosts or DNS), and a lookup the resolver
/// gives up on ends anyway.
#[derive(Debug)]
struct Resolve;

impl Resolver for Resolve {
    fn resolve(
        &self,
        uri: &http::Uri,
        _: &ureq::config::Config,
        _: NextTimeout,
    ) -> Result<ResolvedSocketAddrs, ureq::Error> {
        let host = uri.host().unwrap_or("");
        let host = host.trim_start_matches('[').trim_end_matches(']');
        // Target::url always names the port.
        let port = uri.port_u16().unwrap_or(80);
        let mut addrs = self.empty();
        for addr in (host, port).to_socket_addrs()? {
            if addrs.try_push(addr).is_err() {
                break;
            }
        }
        if addrs.is_empty() {
            return Err(ureq::Error::HostNotFound);
        }
        Ok(addrs)
    }
}

/// Wraps the TCP transport in TLS for `https://` with the daemon's rustls configuration.
struct Tls(Option<Arc<ClientConfig>>);

impl std::fmt::Debug for Tls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("Tls").field(&self.0.is_some()).finish()
    }
}

impl<In: Transport> Connector<In> for Tls {
    type Out = Either<In, TlsTransport>;

    fn connect(
        &self,
        details: &ConnectionDetails,
        chained: Option<In>,
    ) -> Result<Option<Self::Out>, ureq::Error> {
        let Some(transport) = chained else {
            return Ok(None);
        };
        if !details.needs_tls() || transport.is_tls() {
            return Ok(Some(Either::A(transport)));
        }
        let Some(config) = &self.0 else {
            return Err(ureq::Error::Tls("no TLS configuration for https"));
        };
        let host = details.uri.host().unwrap_or("");
        let host = host.trim_start_matches('[').trim_end_matches(']');
        let name = ServerName::try_from(host.to_string())
            .map_err(|_| ureq::Error::Tls("the host is not a valid TLS server name"))?;
        let mut conn = ClientConnection::new(Arc::clone(config), name)
            .map_err(|e| ureq::Error::Io(io::Error::new(io::ErrorKind::InvalidData, e)))?;
        let mut sock = TransportAdapter::new(transport.boxed(), details.current_time.clone());
        sock.set_timeout(details.timeout);
        conn.complete_io(&mut sock)?;
        let buffers = LazyBuffers::new(
            details.config.input_buffer_size(),
            details.config.output_buffer_size(),
        );
        Ok(Some(Either::B(TlsTransport {
            buffers,
            stream: StreamOwned { conn, sock },
        })))
    }
}

struct TlsTransport {
    buffers: LazyBuffers,
    stream: StreamOwned<ClientConnection, TransportAdapter>,
}

impl std::fmt::Debug for TlsTransport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("TlsTransport")
    }
}

impl Transport for TlsTransport {
    fn buffers(&mut self) -> &mut dyn Buffers {
        &mut self.buffers
    }

    fn transmit_output(&mut self, amount: usize, timeout: NextTimeout) -> Result<(), ureq::Error> {
        self.stream.get_mut().set_timeout(timeout);
        let output = &self.buffers.output()[..amount];
        self.stream.write_all(output)?;
        Ok(())
    }

    fn await_input(&mut self, timeout: NextTimeout) -> Result<bool, ureq::Error> {
        self.stream.get_mut().set_timeout(timeout);
        let input = self.buffers.input_append_buf();
        let amount = match self.stream.read(input) {
            // A peer that closes without close_notify ends the body like a plain EOF: the
            // framing (length or chunks) still tells a complete body from a cut one.
            Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => 0,
            other => other?,
        };
        self.buffers.input_appended(amount);
        Ok(amount > 0)
    }

    fn is_open(&mut self) -> bool {
        self.stream.get_mut().get_mut().is_open()
    }

    fn is_tls(&self) -> bool {
        true
    }
}

/// Connects to one Unix socket, whatever the URL's host (the daemon's `--local-socket`).
#[derive(Debug)]
struct Unix(PathBuf);

impl Connector<()> for Unix {
    type Out = UnixTransport;

    fn connect(
        &self,
        details: &ConnectionDetails,
        _: Option<()>,
    ) -> Result<Option<Self::Out>, ureq::Error> {
        let stream = UnixStream::connect(&self.0)?;
        Ok(Some(UnixTransport {
            stream,
            buffers: LazyBuffers::new(
                details.config.input_buffer_size(),
                details.config.output_buffer_size(),
            ),
        }))
    }
}

#[derive(Debug)]
struct UnixTransport {
    stream: UnixStream,
    buffers: LazyBuffers,
}

/// A socket timeout for what is left of `timeout` (none left: the phase's timeout error).
fn left(timeout: NextTimeout) -> Result<Option<Duration>, ureq::Error> {
    if timeout.after.is_not_happening() {
        return Ok(None);
    }
    if timeout.after.is_zero() {
        return Err(ureq::Error::Timeout(timeout.reason));
    }
    Ok(timeout.not_zero().map(|d| *d))
}

fn timed_out(e: io::Error, timeout: NextTimeout) -> ureq::Error {
    match e.kind() {
        io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut => ureq::Error::Timeout(timeout.reason),
        _ => ureq::Error::Io(e),
    }
}

impl Transport for UnixTransport {
    fn buffers(&mut self) -> &mut dyn Buffers {
        &mut self.buffers
    }

    fn transmit_output(&mut self, amount: usize, timeout: NextTimeout) -> Result<(), ureq::Error> {
        let timeout = timeout.for_write();
        self.stream.set_write_timeout(left(timeout)?)?;
        let output = &self.buffers.output()[..amount];
        self.stream
            .write_all(output)
            .map_err(|e| timed_out(e, timeout))
    }

    fn await_input(&mut self, timeout: NextTimeout) -> Result<bool, ureq::Error> {
        let timeout = timeout.for_read();
        self.stream.set_read_timeout(left(timeout)?)?;
        let input = self.buffers.input_append_buf();
        let amount = self.stream.read(input).map_err(|e| timed_out(e, timeout))?;
        self.buffers.input_appended(amount);
        Ok(amount > 0)
    }

    fn is_open(&mut self) -> bool {
        // Never reused: one request per connection.
        false
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::TcpListener;

    const WATCHDOG: Duration = Duration::from_secs(10);

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
        assert_eq!(t.url(), "http://127.0.0.1:8931/mcp");
        let t = Target::parse("HTTPS://[::1]/a?b=c#frag").unwrap();
        assert!(t.tls);
        assert_eq!(
            (t.host.as_str(), t.port, t.path.as_str()),
            ("::1", 443, "/a?b=c")
        );
        assert_eq!(t.url(), "https://[::1]:443/a?b=c");
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

    /// Read one request (head, then a `Content-Length` body) from `s`.
    fn read_request(s: &mut impl Read) -> String {
        let mut got = Vec::new();
        let mut byte = [0u8; 1];
        while !got.ends_with(b"\r\n\r\n") {
            assert_eq!(s.read(&mut byte).unwrap(), 1, "the request head was cut");
            got.push(byte[0]);
        }
        let head = String::from_utf8_lossy(&got).to_ascii_lowercase();
        let length = head
            .lines()
            .find_map(|l| l.strip_prefix("content-length: "))
            .map_or(0, |n| n.trim().parse().unwrap());
        let mut body = vec![0u8; length];
        s.read_exact(&mut body).unwrap();
        got.extend_from_slice(&body);
        String::from_utf8_lossy(&got).into_owned()
    }

    /// A one-shot HTTP server on loopback: answers `reply` (None: never answers) and hands
    /// back the request it read.
    fn serve(reply: Option<&'static [u8]>) -> (u16, std::thread::JoinHandle<String>) {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let server = std::thread::spawn(move || {
            let (mut s, _) = listener.accept().unwrap();
            s.set_read_timeout(Some(WATCHDOG)).unwrap();
            let request = read_request(&mut s);
            match reply {
                Some(reply) => s.write_all(reply).unwrap(),
                // Hold the socket until the client gives up and closes it.
                None => while s.read(&mut [0u8; 64]).is_ok_and(|n| n > 0) {},
            }
            request
        });
        (port, server)
    }

    fn get(path: &str) -> Request<'static> {
        let target = Box::leak(Box::new(Target::parse(path).unwrap()));
        Request {
            method: "GET",
            target,
            headers: &[("Accept", "application/json")],
            body: None,
        }
    }

    #[test]
    fn a_request_goes_as_given_and_a_redirect_comes_back_unfollowed() {
        let (port, server) = serve(Some(
            b"HTTP/1.1 302 Found\r\nLocation: /elsewhere\r\nContent-Length: 2\r\n\r\nno",
        ));
        let target = Target::parse(&format!("http://127.0.0.1:{port}/p?q=1")).unwrap();
        let client = Client::new(WATCHDOG, None);
        assert!(client.agent.config().proxy().is_none());
        let response = client
            .send(&Request {
                method: "POST",
                target: &target,
                headers: &[("Authorization", "Bearer t")],
                body: Some(b"{}"),
            })
            .unwrap();
        assert_eq!(response.status, 302);
        assert_eq!(response.header("location"), Some(&b"/elsewhere"[..]));
        assert_eq!(response.read_body(2).unwrap(), b"no");
        let request = server.join().unwrap().to_ascii_lowercase();
        assert!(request.starts_with("post /p?q=1 http/1.1\r\n"), "{request}");
        assert!(request.contains(&format!("\r\nhost: 127.0.0.1:{port}\r\n")));
        assert!(request.contains("\r\nauthorization: bearer t\r\n"));
        assert!(request.contains("\r\ncontent-length: 2\r\n"), "{request}");
        assert!(request.ends_with("\r\n\r\n{}"), "{request}");
    }

    #[test]
    fn a_body_one_byte_over_the_cap_is_refused_and_at_the_cap_is_not() {
        let client = Client::new(WATCHDOG, None);
        for (raw, limit, ok) in [
            (
                &b"HTTP/1.1 200 OK\r\nContent-Length: 4\r\n\r\nabcd"[..],
                4,
                true,
            ),
            (
                b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nabcde",
                4,
                false,
            ),
            (
                b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nabcde\r\n0\r\n\r\n",
                4,
                false,
            ),
            (
                b"HTTP/1.1 200 OK\r\nConnection: close\r\n\r\nabcde",
                4,
                false,
            ),
        ] {
            let (port, server) = serve(Some(raw));
            let response = client
                .send(&get(&format!("http://127.0.0.1:{port}/")))
                .unwrap();
            match response.read_body(limit) {
                Ok(body) => assert!(ok && body == b"abcd", "{body:?}"),
                Err(e) => assert!(!ok && is_too_large(&e), "{e}"),
            }
            server.join().unwrap();
        }
    }

    #[test]
    fn a_silent_server_times_out_on_the_deadline() {
        let (port, server) = serve(None);
        let client = Client::new(Duration::from_millis(300), None);
        let err = client
            .send(&get(&format!("http://127.0.0.1:{port}/")))
            .unwrap_err();
        assert!(
            matches!(err, HttpError::Timeout(ureq::Timeout::Global)),
            "{err}"
        );
        assert_eq!(err.to_string(), "timed out");
        drop(client);
        server.join().unwrap();
    }

    #[test]
    fn a_closed_port_is_a_connect_error() {
        let port = TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let err = Client::new(WATCHDOG, None)
            .send(&get(&format!("http://127.0.0.1:{port}/")))
            .unwrap_err();
        assert!(matches!(err, HttpError::Connect(_)), "{err}");
    }

    #[test]
    fn the_unix_socket_client_sends_the_path_to_the_socket() {
        let dir = std::env::temp_dir().join(format!("hn-http-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("sock");
        let _ = std::fs::remove_file(&path);
        let listener = std::os::unix::net::UnixListener::bind(&path).unwrap();
        let server = std::thread::spawn(move || {
            let (mut s, _) = listener.accept().unwrap();
            s.set_read_timeout(Some(WATCHDOG)).unwrap();
            let request = read_request(&mut s);
            s.write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
                .unwrap();
            request
        });
        let response = Client::unix(path.clone(), WATCHDOG)
            .send(&get("http://localhost/status"))
            .unwrap();
        assert_eq!(response.status, 200);
        assert_eq!(response.read_body(10).unwrap(), b"ok");
        let request = server.join().unwrap().to_ascii_lowercase();
        assert!(request.starts_with("get /status http/1.1\r\n"), "{request}");
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// A one-shot HTTPS server on loopback with the test certificate (CN localhost, signed
    /// by testdata/ca.pem).
    fn serve_tls() -> (u16, std::thread::JoinHandle<Option<String>>) {
        let certs = rustls_pemfile::certs(&mut &include_bytes!("testdata/server.pem")[..])
            .collect::<Result<Vec<_>, _>>()
            .unwrap();
        let key = rustls_pemfile::private_key(&mut &include_bytes!("testdata/server.key")[..])
            .unwrap()
            .unwrap();
        let config = rustls::ServerConfig::builder_with_provider(Arc::new(
            rustls::crypto::ring::default_provider(),
        ))
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_no_client_auth()
        .with_single_cert(certs, key)
        .unwrap();
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let server = std::thread::spawn(move || {
            let (tcp, _) = listener.accept().unwrap();
            tcp.set_read_timeout(Some(WATCHDOG)).unwrap();
            let conn = rustls::ServerConnection::new(Arc::new(config)).unwrap();
            let mut s = StreamOwned::new(conn, tcp);
            // A client that refuses the certificate ends the handshake: no request.
            let mut first = [0u8; 1];
            if s.read(&mut first).unwrap_or(0) == 0 {
                return None;
            }
            let mut rest = read_request(&mut s);
            rest.insert(0, first[0] as char);
            s.write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 3\r\n\r\nsec")
                .unwrap();
            s.conn.send_close_notify();
            let _ = s.flush();
            Some(rest)
        });
        (port, server)
    }

    #[test]
    fn https_trusts_the_ca_file_roots_and_nothing_else() {
        let dir = std::env::temp_dir().join(format!("hn-https-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let ca = dir.join("ca.pem");
        std::fs::write(&ca, include_bytes!("testdata/ca.pem")).unwrap();
        let with_ca = crate::wire::tls::client_config(Some(&ca)).unwrap();
        let (port, server) = serve_tls();
        let response = Client::new(WATCHDOG, Some(with_ca))
            .send(&get(&format!("https://localhost:{port}/mint")))
            .unwrap();
        assert_eq!(response.status, 200);
        assert_eq!(response.read_body(3).unwrap(), b"sec");
        let request = server.join().unwrap().expect("a request over TLS");
        assert!(request.starts_with("GET /mint HTTP/1.1\r\n"), "{request}");

        // The webpki roots alone do not know the test CA.
        let (port, server) = serve_tls();
        let err = Client::new(
            WATCHDOG,
            Some(crate::wire::tls::client_config(None).unwrap()),
        )
        .send(&get(&format!("https://localhost:{port}/mint")))
        .unwrap_err();
        assert!(matches!(err, HttpError::Tls(_)), "{err:?}");
        assert!(server.join().unwrap().is_none());

        // No TLS configuration: https is refused before anything is sent.
        let (port, server) = serve(Some(b"HTTP/1.1 200 OK\r\n\r\n"));
        let err = Client::new(WATCHDOG, None)
            .send(&get(&format!("https://localhost:{port}/")))
            .unwrap_err();
        assert!(matches!(err, HttpError::Tls(_)), "{err:?}");
        drop(server);
        let _ = std::fs::remove_dir_all(&dir);
    }
}
