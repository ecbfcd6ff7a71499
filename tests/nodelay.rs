//! Contract §24: every TCP socket the daemon accepts or dials sets `TCP_NODELAY`, so a
//! kept-alive `/mcp` client does not wait ~40 ms a call for its delayed ACK. The daemon runs
//! in this process, so the test takes a copy of the daemon's own end of each connection
//! (`pidfd_getfd` on itself) and reads the option there: what a timing could only suggest.

mod common;

use common::*;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

/// The option on this process's socket whose peer is `peer`, or `None` if no socket has it.
fn nodelay_of_socket_peered_with(peer: SocketAddr) -> Option<bool> {
    let me = rustix::process::getpid();
    let pidfd = rustix::process::pidfd_open(me, rustix::process::PidfdFlags::empty())
        .expect("pidfd_open on this process (Linux 5.3+)");
    for entry in std::fs::read_dir("/proc/self/fd").unwrap().flatten() {
        let Some(n) = entry
            .file_name()
            .to_str()
            .and_then(|s| s.parse::<i32>().ok())
        else {
            continue;
        };
        let is_socket = std::fs::read_link(entry.path())
            .map(|t| t.to_string_lossy().starts_with("socket:"))
            .unwrap_or(false);
        if !is_socket {
            continue;
        }
        let Ok(fd) =
            rustix::process::pidfd_getfd(&pidfd, n, rustix::process::PidfdGetfdFlags::empty())
        else {
            continue;
        };
        let Ok(Some(addr)) = rustix::net::getpeername(&fd) else {
            continue;
        };
        if SocketAddr::try_from(addr).ok() == Some(peer) {
            return Some(rustix::net::sockopt::tcp_nodelay(&fd).expect("TCP_NODELAY readable"));
        }
    }
    None
}

#[test]
fn every_tcp_socket_the_daemon_accepts_or_dials_sets_nodelay() {
    let d = TestDaemon::new("nodelay");

    // Accepted: a kept-alive admin connection, answered once so the daemon holds its end.
    let mut client = TcpStream::connect(d.addr).unwrap();
    client
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    write!(
        client,
        "GET /healthz HTTP/1.1\r\nHost: {}\r\nConnection: keep-alive\r\n\r\n",
        d.addr
    )
    .unwrap();
    let mut first = [0u8; 12];
    client
        .read_exact(&mut first)
        .expect("watchdog: /healthz answered");
    assert_eq!(&first[..9], b"HTTP/1.1 ");
    let ours = client.local_addr().unwrap();
    assert_eq!(
        nodelay_of_socket_peered_with(ours),
        Some(true),
        "the admin listener's accepted socket has Nagle on"
    );

    // Dialled: the grant's socket to the pod.
    let pod = StubPod::start();
    let (_id, _conn) = d.attached(&pod, "nodelay-s", "observe");
    assert_eq!(
        nodelay_of_socket_peered_with(pod.addr),
        Some(true),
        "the grant's dialled socket has Nagle on"
    );
}
