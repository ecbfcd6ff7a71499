//! Owns the systemd readiness protocol (`sd_notify`): one datagram of `KEY=VALUE` lines sent to
//! the socket named by `$NOTIFY_SOCKET`, so a `Type=notify` unit knows when we are ready and
//! when we are stopping.
//!
//! Written by hand instead of linking libsystemd: the protocol is a single `sendto`, and the
//! static binary must not depend on a shared library. Children never speak for us: the unit
//! sets `NotifyAccess=main`, so a `NOTIFY_SOCKET` inherited by a `bash` tool's child is
//! harmless.

use std::ffi::OsStr;
use std::io;
use std::os::linux::net::SocketAddrExt;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::net::{SocketAddr, UnixDatagram};
use std::path::Path;

/// The environment variable systemd sets for `Type=notify` services.
pub const NOTIFY_SOCKET_ENV: &str = "NOTIFY_SOCKET";

/// Largest message we send, in bytes. systemd accepts far more; our states are a few short
/// lines, so anything bigger is a bug (e.g. a status built from unbounded input).
pub const MAX_MESSAGE_BYTES: usize = 4096;

/// Tell the service manager `state` (e.g. `"READY=1"`), using `$NOTIFY_SOCKET`.
///
/// Returns `Ok(false)` when `$NOTIFY_SOCKET` is unset or empty (not started by systemd, or a
/// unit that is not `Type=notify`), `Ok(true)` once the datagram is sent.
pub fn notify(state: &str) -> io::Result<bool> {
    notify_with(std::env::var_os(NOTIFY_SOCKET_ENV).as_deref(), state)
}

/// `READY=1`: the admin API listens and persisted grants have resumed.
pub fn ready() -> io::Result<bool> {
    notify("READY=1")
}

/// `STOPPING=1`: shutdown has begun (sockets are closing, state is being persisted).
pub fn stopping() -> io::Result<bool> {
    notify("STOPPING=1")
}

/// `STATUS=<msg>`: a one-line status shown by `systemctl --user status handnode`.
/// Line breaks in `msg` are replaced by spaces so it cannot smuggle in another assignment.
pub fn status(msg: &str) -> io::Result<bool> {
    notify(&format!("STATUS={}", one_line(msg)))
}

/// [`notify`] with the socket given explicitly (`None` or empty = not under systemd).
/// This is the whole protocol; `notify` only reads the environment, so tests drive this one
/// without touching process-wide state.
pub fn notify_with(socket: Option<&OsStr>, state: &str) -> io::Result<bool> {
    match socket {
        None => Ok(false),
        Some(s) if s.is_empty() => Ok(false),
        Some(s) => send(s, state).map(|()| true),
    }
}

fn send(socket: &OsStr, state: &str) -> io::Result<()> {
    if state.is_empty() {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "sd_notify state is empty; send e.g. READY=1",
        ));
    }
    if state.len() > MAX_MESSAGE_BYTES {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!(
                "sd_notify state is {} bytes, more than the {MAX_MESSAGE_BYTES} allowed",
                state.len()
            ),
        ));
    }
    let sock = UnixDatagram::unbound()?;
    let bytes = socket.as_bytes();
    let sent = match bytes.first() {
        Some(b'/') => sock.send_to(state.as_bytes(), Path::new(socket))?,
        Some(b'@') => {
            let addr = SocketAddr::from_abstract_name(&bytes[1..])?;
            sock.send_to_addr(state.as_bytes(), &addr)?
        }
        _ => {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!(
                    "{NOTIFY_SOCKET_ENV}={} is neither an absolute path nor an @abstract name \
                     (vsock is not supported)",
                    socket.to_string_lossy()
                ),
            ))
        }
    };
    if sent != state.len() {
        return Err(io::Error::new(
            io::ErrorKind::WriteZero,
            format!("sd_notify sent {sent} of {} bytes", state.len()),
        ));
    }
    Ok(())
}

fn one_line(msg: &str) -> String {
    msg.chars()
        .map(|c| if c == '\n' || c == '\r' { ' ' } else { c })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::base::testutil::TempDir;
    use std::path::PathBuf;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::time::Duration;

    /// Watchdog on every receive, so a datagram that never arrives fails the test fast.
    const RECV_WATCHDOG: Duration = Duration::from_secs(10);

    /// A datagram socket bound at `notify` in a fresh temp dir (removed on drop).
    struct PathSocket {
        dir: TempDir,
        path: PathBuf,
        sock: UnixDatagram,
    }

    impl PathSocket {
        fn new() -> Self {
            let dir = TempDir::new("sdnotify");
            let path = dir.path("notify");
            let sock = UnixDatagram::bind(&path).unwrap();
            sock.set_read_timeout(Some(RECV_WATCHDOG)).unwrap();
            PathSocket { dir, path, sock }
        }

        fn recv(&self) -> String {
            recv(&self.sock)
        }
    }

    fn recv(sock: &UnixDatagram) -> String {
        let mut buf = [0u8; 2 * MAX_MESSAGE_BYTES];
        let n = sock.recv(&mut buf).expect("datagram within the watchdog");
        String::from_utf8(buf[..n].to_vec()).unwrap()
    }

    #[test]
    fn unset_or_empty_socket_is_not_an_error() {
        assert!(!notify_with(None, "READY=1").unwrap());
        assert!(!notify_with(Some(OsStr::new("")), "READY=1").unwrap());
    }

    #[test]
    fn sends_to_a_path_socket() {
        let s = PathSocket::new();
        let sent = notify_with(Some(s.path.as_os_str()), "READY=1").unwrap();
        assert!(sent);
        assert_eq!(s.recv(), "READY=1");
        // Each call is its own datagram, in order.
        notify_with(Some(s.path.as_os_str()), "STATUS=resuming 2 grants").unwrap();
        notify_with(Some(s.path.as_os_str()), "STOPPING=1").unwrap();
        assert_eq!(s.recv(), "STATUS=resuming 2 grants");
        assert_eq!(s.recv(), "STOPPING=1");
    }

    #[test]
    fn sends_to_an_abstract_socket() {
        static SEQ: AtomicUsize = AtomicUsize::new(0);
        let name = format!(
            "handnode-sdnotify-test-{}-{}",
            std::process::id(),
            SEQ.fetch_add(1, Ordering::Relaxed)
        );
        let addr = SocketAddr::from_abstract_name(name.as_bytes()).unwrap();
        let sock = UnixDatagram::bind_addr(&addr).unwrap();
        sock.set_read_timeout(Some(RECV_WATCHDOG)).unwrap();
        let env = format!("@{name}");
        assert!(notify_with(Some(OsStr::new(&env)), "READY=1\nSTATUS=up").unwrap());
        assert_eq!(recv(&sock), "READY=1\nSTATUS=up");
    }

    #[test]
    fn missing_socket_is_an_error() {
        let s = PathSocket::new();
        let gone = s.dir.path("nobody-listens-here");
        let err = notify_with(Some(gone.as_os_str()), "READY=1").unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::NotFound);
    }

    #[test]
    fn relative_or_vsock_address_is_rejected_with_a_reason() {
        for bad in ["notify", "vsock:2:1234"] {
            let err = notify_with(Some(OsStr::new(bad)), "READY=1").unwrap_err();
            assert_eq!(err.kind(), io::ErrorKind::InvalidInput, "{bad}");
            assert!(err.to_string().contains("absolute path"), "{err}");
        }
    }

    #[test]
    fn empty_and_oversized_states_are_rejected_and_nothing_is_sent() {
        let s = PathSocket::new();
        let p = Some(s.path.as_os_str());
        assert_eq!(
            notify_with(p, "").unwrap_err().kind(),
            io::ErrorKind::InvalidInput
        );
        let big = format!("STATUS={}", "x".repeat(MAX_MESSAGE_BYTES + 1 - 7));
        assert_eq!(big.len(), MAX_MESSAGE_BYTES + 1);
        assert_eq!(
            notify_with(p, &big).unwrap_err().kind(),
            io::ErrorKind::InvalidInput
        );
        // At the bound it goes through; and it is the first datagram, so neither reject sent.
        let max = &big[..MAX_MESSAGE_BYTES];
        assert!(notify_with(p, max).unwrap());
        assert_eq!(s.recv(), max);
    }

    #[test]
    fn status_is_kept_on_one_line() {
        assert_eq!(one_line("a\nREADY=1\r\nb"), "a READY=1  b");
    }
}
