//! The daemon's error type. Every variant says whether retrying can help (`is_fatal`)
//! and which process exit code it maps to.

use std::fmt;
use std::io;

#[derive(Debug)]
pub enum Error {
    /// The configuration is wrong; the message says what to fix. Exit 2, never retried.
    Config(String),
    /// Binding the admin listener failed (address in use, no permission).
    Bind { addr: String, source: io::Error },
    /// The admin server's accept loop died; the supervisor should restart us.
    AcceptLoop(String),
    /// An I/O failure with what we were doing when it happened.
    Io { context: String, source: io::Error },
    /// The pod refused the WebSocket upgrade with this HTTP status.
    HandshakeRejected(u16),
    /// Transport failure while dialing or on an open socket; redial.
    Transport(String),
    /// A named timeout phase ran out.
    Timeout(TimeoutPhase),
    /// The pod refused to mint an attach secret (HTTP status, 0 = transport error).
    Mint { status: u16, body: String },
}

/// Every phase that has its own timeout, so logs and errors say which one ran out.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TimeoutPhase {
    /// TCP connect to the pod.
    Connect,
    /// TLS + WebSocket upgrade.
    Handshake,
    /// No inbound frame for the liveness limit.
    Silence,
    /// The mint request to the pod.
    Mint,
    /// An admin API socket read or write.
    AdminIo,
    /// A request to an upstream MCP server.
    Upstream,
    /// A tool's own run time.
    Tool,
}

impl TimeoutPhase {
    pub fn as_str(self) -> &'static str {
        match self {
            TimeoutPhase::Connect => "connect",
            TimeoutPhase::Handshake => "handshake",
            TimeoutPhase::Silence => "silence",
            TimeoutPhase::Mint => "mint",
            TimeoutPhase::AdminIo => "admin_io",
            TimeoutPhase::Upstream => "upstream",
            TimeoutPhase::Tool => "tool",
        }
    }
}

impl Error {
    pub fn io(context: impl Into<String>, source: io::Error) -> Self {
        Error::Io {
            context: context.into(),
            source,
        }
    }

    /// True when trying again cannot succeed without someone changing something.
    pub fn is_fatal(&self) -> bool {
        match self {
            Error::Config(_) | Error::Bind { .. } | Error::AcceptLoop(_) => true,
            Error::HandshakeRejected(status) => {
                !(*status == 101 || (200..300).contains(status) || *status == 429 || *status >= 500)
            }
            Error::Mint { .. } => true,
            Error::Io { .. } | Error::Transport(_) | Error::Timeout(_) => false,
        }
    }

    /// The process exit code this error means when it ends the daemon.
    pub fn exit_code(&self) -> i32 {
        match self {
            Error::Config(_) => 2,
            _ => 1,
        }
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::Config(msg) => write!(f, "configuration: {msg}"),
            Error::Bind { addr, source } => write!(f, "cannot listen on {addr}: {source}"),
            Error::AcceptLoop(msg) => write!(f, "admin server stopped accepting: {msg}"),
            Error::Io { context, source } => write!(f, "{context}: {source}"),
            Error::HandshakeRejected(status) => write!(f, "handshake {status}"),
            Error::Transport(msg) => write!(f, "{msg}"),
            Error::Timeout(phase) => write!(f, "{} timeout", phase.as_str()),
            Error::Mint { status, body } => {
                write!(f, "runtime refused to mint (HTTP {status}): {body}")
            }
        }
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Error::Bind { source, .. } | Error::Io { source, .. } => Some(source),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fatality_follows_the_disposition_table() {
        for status in [101, 200, 204, 429, 500, 503, 599] {
            assert!(!Error::HandshakeRejected(status).is_fatal(), "{status}");
        }
        for status in [400, 401, 403, 404] {
            assert!(Error::HandshakeRejected(status).is_fatal(), "{status}");
        }
        assert!(Error::Config("x".into()).is_fatal());
        assert_eq!(Error::Config("x".into()).exit_code(), 2);
        assert!(!Error::Timeout(TimeoutPhase::Handshake).is_fatal());
        assert_eq!(
            Error::Timeout(TimeoutPhase::Silence).to_string(),
            "silence timeout"
        );
    }
}
