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
use std::os::unix::net::UnixStream;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use rustls::pki_types::ServerName;
use rustls::{ClientConfig, ClientConnection, StreamOwned};
use ureq::http;
use ureq::unversioned::resolver::DefaultResolver;
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
    /// The deadline passed; says in which phase (resolve, connect, send, receive).
    Timeout(String),
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
            ureq::Error::Timeout(phase) => HttpError::Timeout(phase.to_string()),
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
            agent: ureq::Agent::with_parts(config(timeout), connector, DefaultResolver::default()),
        }
    }

    /// Over the Unix socket at `socket` whatever the URL's host; the URL gives the path and
    /// the `Host` header.
    pub fn unix(socket: PathBuf, timeout: Duration) -> Client {
        Client {
            agent: ureq::Agent::with_parts(
                config(timeout),
                ().chain(Unix(socket)),
                DefaultResolver::default(),
            ),
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
