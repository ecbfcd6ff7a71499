//! The client side of outbound connections: the rustls configuration for `wss://` dials
//! and `https://` requests (webpki roots plus the operator's private CA, `--ca-file`, with
//! the ring provider), the TCP connect over a host's addresses, and the plain-or-TLS
//! socket both of them read and write.

use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpStream, ToSocketAddrs};
use std::os::fd::{AsFd, BorrowedFd};
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use rustls::pki_types::{InvalidDnsNameError, ServerName};
use rustls::{ClientConfig, ClientConnection, RootCertStore, StreamOwned};

use crate::base::error::Error;

pub fn client_config(ca_file: Option<&Path>) -> Result<Arc<ClientConfig>, Error> {
    let mut roots = RootCertStore::empty();
    roots.extend(webpki_roots::TLS_SERVER_ROOTS.iter().cloned());
    if let Some(path) = ca_file {
        let pem = std::fs::read(path)
            .map_err(|e| Error::Config(format!("--ca-file {}: {e}", path.display())))?;
        let mut added = 0;
        for cert in rustls_pemfile::certs(&mut pem.as_slice()) {
            let cert = cert.map_err(|e| {
                Error::Config(format!(
                    "--ca-file {}: not PEM certificates: {e}",
                    path.display()
                ))
            })?;
            roots.add(cert).map_err(|e| {
                Error::Config(format!(
                    "--ca-file {}: unusable certificate: {e}",
                    path.display()
                ))
            })?;
            added += 1;
        }
        if added == 0 {
            return Err(Error::Config(format!(
                "--ca-file {}: no PEM certificate found (expected -----BEGIN CERTIFICATE-----)",
                path.display()
            )));
        }
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| Error::Config(format!("TLS setup: {e}")))?
        .with_root_certificates(roots)
        .with_no_client_auth();
    Ok(Arc::new(config))
}

/// Why no address of a host took a TCP connection.
#[derive(Debug)]
pub enum ConnectError {
    /// The name did not resolve.
    Resolve(io::Error),
    /// It resolved to no address.
    NoAddress,
    /// No time was left for the next attempt.
    OutOfTime,
    /// Every address was tried; this is how the last one failed.
    Failed(SocketAddr, io::Error),
}

/// A TCP connection to the first address of `host:port` that takes one. Each attempt may
/// last what `budget` gives it when it starts; `None` stops the search (no time left).
pub fn connect_first(
    host: &str,
    port: u16,
    budget: &mut dyn FnMut() -> Option<Duration>,
) -> Result<TcpStream, ConnectError> {
    let addrs = (host, port)
        .to_socket_addrs()
        .map_err(ConnectError::Resolve)?;
    let mut last = ConnectError::NoAddress;
    for addr in addrs {
        let Some(timeout) = budget() else {
            return Err(ConnectError::OutOfTime);
        };
        match TcpStream::connect_timeout(&addr, timeout) {
            Ok(s) => {
                // Requests and frames go out in pieces; Nagle would hold the last piece for
                // the peer's delayed ACK (~40 ms a call on a kept-alive connection).
                s.set_nodelay(true)
                    .map_err(|e| ConnectError::Failed(addr, e))?;
                return Ok(s);
            }
            Err(e) => last = ConnectError::Failed(addr, e),
        }
    }
    Err(last)
}

/// A client socket: plain TCP, or a rustls client over it.
pub enum ClientStream {
    Plain(TcpStream),
    Tls(Box<StreamOwned<ClientConnection, TcpStream>>),
}

/// Why a TLS client could not be set up on a socket; shows the underlying error only, so
/// each caller says what it was connecting to.
#[derive(Debug)]
pub enum SetupError {
    ServerName(InvalidDnsNameError),
    Connection(rustls::Error),
}

impl std::fmt::Display for SetupError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            SetupError::ServerName(e) => e.fmt(f),
            SetupError::Connection(e) => e.fmt(f),
        }
    }
}

impl ClientStream {
    /// `tcp` as it is, or with a TLS client for `host` on it when `tls` is given. The TLS
    /// handshake itself runs on the first reads and writes.
    pub fn new(
        tcp: TcpStream,
        host: &str,
        tls: Option<&Arc<ClientConfig>>,
    ) -> Result<Self, SetupError> {
        let Some(config) = tls else {
            return Ok(ClientStream::Plain(tcp));
        };
        let name = ServerName::try_from(host.to_string()).map_err(SetupError::ServerName)?;
        let conn =
            ClientConnection::new(Arc::clone(config), name).map_err(SetupError::Connection)?;
        Ok(ClientStream::Tls(Box::new(StreamOwned::new(conn, tcp))))
    }

    pub fn tcp(&self) -> &TcpStream {
        match self {
            ClientStream::Plain(s) => s,
            ClientStream::Tls(s) => &s.sock,
        }
    }
}

impl AsFd for ClientStream {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.tcp().as_fd()
    }
}

impl Read for ClientStream {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        match self {
            ClientStream::Plain(s) => s.read(buf),
            ClientStream::Tls(s) => s.read(buf),
        }
    }
}

impl Write for ClientStream {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        match self {
            ClientStream::Plain(s) => s.write(buf),
            ClientStream::Tls(s) => s.write(buf),
        }
    }
    fn flush(&mut self) -> io::Result<()> {
        match self {
            ClientStream::Plain(s) => s.flush(),
            ClientStream::Tls(s) => s.flush(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_ca_file_without_certificates_is_a_config_error() {
        let dir = std::env::temp_dir().join(format!("hn-tls-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("empty.pem");
        std::fs::write(&path, "nothing here").unwrap();
        let err = client_config(Some(&path)).unwrap_err();
        assert!(err.to_string().contains("no PEM certificate"), "{err}");
        assert!(client_config(None).is_ok());
        let missing = client_config(Some(&dir.join("missing.pem"))).unwrap_err();
        assert!(matches!(missing, Error::Config(_)));
    }

    #[test]
    fn connect_first_reports_why_no_address_took_it() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let second = Duration::from_secs(1);
        let s = connect_first("127.0.0.1", port, &mut || Some(second)).unwrap();
        assert_eq!(s.peer_addr().unwrap().port(), port);
        assert!(
            s.nodelay().unwrap(),
            "a dialled socket has Nagle off (contract §24)"
        );
        drop(listener);
        assert!(matches!(
            connect_first("127.0.0.1", port, &mut || Some(second)),
            Err(ConnectError::Failed(addr, e))
                if addr.port() == port && e.kind() == io::ErrorKind::ConnectionRefused
        ));
        assert!(matches!(
            connect_first("127.0.0.1", port, &mut || None),
            Err(ConnectError::OutOfTime)
        ));
        assert!(matches!(
            connect_first("no such host.invalid", port, &mut || Some(second)),
            Err(ConnectError::Resolve(_))
        ));
    }

    #[test]
    fn a_client_stream_is_plain_without_a_config_and_tls_with_one() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let tcp = || TcpStream::connect(addr).unwrap();
        let config = client_config(None).unwrap();
        let plain = ClientStream::new(tcp(), "pod.example", None).unwrap();
        assert!(matches!(plain, ClientStream::Plain(_)));
        assert_eq!(plain.tcp().peer_addr().unwrap(), addr);
        let tls = ClientStream::new(tcp(), "pod.example", Some(&config)).unwrap();
        assert!(matches!(tls, ClientStream::Tls(_)));
        assert_eq!(tls.tcp().peer_addr().unwrap(), addr);
        let bad = ClientStream::new(tcp(), "not a host name", Some(&config));
        assert!(matches!(bad, Err(SetupError::ServerName(_))));
    }
}
