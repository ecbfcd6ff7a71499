//! Readiness waiting with a wake handle: an epoll set plus an eventfd, so a thread that
//! sleeps on its sockets or pipes is woken the moment another thread hands it work
//! (a tool result, a revoke, a renewed secret). Nothing here polls on an interval.

use std::io;
use std::os::fd::{AsFd, OwnedFd};
use std::sync::Arc;
use std::time::Duration;

use rustix::event::{epoll, eventfd, EventfdFlags, Timespec};

/// Longest one `wait` sleeps. epoll takes its timeout as milliseconds in an `i32` (about
/// 24.8 days); rustix passes a longer one to `epoll_pwait2`, which Linux before 5.11 (the
/// Raspberry Pi OS kernels of 5.10) and qemu-user do not have: `ENOSYS` there. Every
/// caller loops on its own deadlines, so a far one costs one spurious wake an hour.
pub const LONGEST_WAIT: Duration = Duration::from_secs(3600);

/// The key reported when the wake handle fired.
pub const WAKE_KEY: u64 = u64::MAX;

/// Wakes the thread blocked in [`Poller::wait`]. Cheap to clone through an `Arc`.
#[derive(Debug)]
pub struct Waker {
    fd: OwnedFd,
}

impl Waker {
    /// Make the poller's next (or current) `wait` return. Never blocks: the eventfd
    /// counter saturates long before 2^64.
    pub fn wake(&self) {
        let _ = rustix::io::write(&self.fd, &1u64.to_ne_bytes());
    }
}

/// One readiness report.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Ready {
    pub key: u64,
    pub readable: bool,
    pub writable: bool,
    /// Error or hang-up on the descriptor.
    pub closed: bool,
}

/// An epoll set owned by one thread, with its wake handle already registered.
pub struct Poller {
    epoll: OwnedFd,
    waker: Arc<Waker>,
}

impl std::fmt::Debug for Poller {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Poller")
            .field("epoll", &self.epoll)
            .finish()
    }
}

impl Poller {
    pub fn new() -> io::Result<Self> {
        let epoll = epoll::create(epoll::CreateFlags::CLOEXEC)?;
        let fd = eventfd(0, EventfdFlags::CLOEXEC | EventfdFlags::NONBLOCK)?;
        epoll::add(
            &epoll,
            &fd,
            epoll::EventData::new_u64(WAKE_KEY),
            epoll::EventFlags::IN,
        )?;
        Ok(Poller {
            epoll,
            waker: Arc::new(Waker { fd }),
        })
    }

    pub fn waker(&self) -> Arc<Waker> {
        Arc::clone(&self.waker)
    }

    fn flags(readable: bool, writable: bool) -> epoll::EventFlags {
        let mut flags = epoll::EventFlags::RDHUP;
        if readable {
            flags |= epoll::EventFlags::IN;
        }
        if writable {
            flags |= epoll::EventFlags::OUT;
        }
        flags
    }

    /// Watch `fd` (level-triggered) under `key`.
    pub fn add(&self, fd: impl AsFd, key: u64, readable: bool, writable: bool) -> io::Result<()> {
        debug_assert_ne!(key, WAKE_KEY);
        epoll::add(
            &self.epoll,
            fd,
            epoll::EventData::new_u64(key),
            Self::flags(readable, writable),
        )?;
        Ok(())
    }

    pub fn modify(
        &self,
        fd: impl AsFd,
        key: u64,
        readable: bool,
        writable: bool,
    ) -> io::Result<()> {
        epoll::modify(
            &self.epoll,
            fd,
            epoll::EventData::new_u64(key),
            Self::flags(readable, writable),
        )?;
        Ok(())
    }

    pub fn delete(&self, fd: impl AsFd) -> io::Result<()> {
        epoll::delete(&self.epoll, fd)?;
        Ok(())
    }

    /// Block until a watched descriptor is ready, the waker fires, or `timeout` passes
    /// (`None` = no timeout). A wake is reported once as [`WAKE_KEY`], however many
    /// wakes were coalesced.
    pub fn wait(&self, timeout: Option<Duration>) -> io::Result<Vec<Ready>> {
        let ts = timeout.map(|d| d.min(LONGEST_WAIT)).map(|d| Timespec {
            tv_sec: d.as_secs().min(i64::MAX as u64) as i64,
            tv_nsec: d.subsec_nanos() as _,
        });
        // A stack buffer rather than a stored Vec: epoll events hold a pointer-sized
        // union, which would make the Poller !Send and pin it to its creating thread.
        let mut buf = [std::mem::MaybeUninit::<epoll::Event>::uninit(); 32];
        let events = loop {
            match epoll::wait(&self.epoll, &mut buf, ts.as_ref()) {
                Ok((events, _)) => break events,
                Err(rustix::io::Errno::INTR) => continue,
                Err(e) => return Err(e.into()),
            }
        };
        let mut out = Vec::with_capacity(events.len());
        for ev in events.iter() {
            let key = ev.data.u64();
            let flags = ev.flags;
            if key == WAKE_KEY {
                let mut buf = [0u8; 8];
                let _ = rustix::io::read(&self.waker.fd, &mut buf);
            }
            out.push(Ready {
                key,
                readable: flags.contains(epoll::EventFlags::IN),
                writable: flags.contains(epoll::EventFlags::OUT),
                closed: flags.intersects(epoll::EventFlags::ERR | epoll::EventFlags::HUP),
            });
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;
    use std::time::Instant;

    #[test]
    fn wake_from_another_thread_returns_promptly() {
        let poller = Poller::new().unwrap();
        let waker = poller.waker();
        let t = std::thread::spawn(move || waker.wake());
        let start = Instant::now();
        // A 30 s timeout that must not be what ends the wait.
        let ready = poller.wait(Some(Duration::from_secs(30))).unwrap();
        t.join().unwrap();
        assert!(start.elapsed() < Duration::from_secs(10));
        assert_eq!(ready.len(), 1);
        assert_eq!(ready[0].key, WAKE_KEY);
        // Drained: the next wait times out instead of reporting a stale wake.
        assert!(poller
            .wait(Some(Duration::from_millis(1)))
            .unwrap()
            .is_empty());
    }

    #[test]
    fn a_timeout_past_what_epoll_pwait_takes_is_cut_to_one_it_takes() {
        // epoll_pwait's i32 milliseconds hold the cap; past them rustix would need
        // epoll_pwait2, missing on Linux < 5.11 and under qemu-user.
        assert!(LONGEST_WAIT.as_millis() <= i32::MAX as u128);
        let poller = Poller::new().unwrap();
        let waker = poller.waker();
        waker.wake();
        // 100 days: woken at once all the same, and no error.
        let far = Duration::from_secs(100 * 86_400);
        let ready = poller.wait(Some(far)).unwrap();
        assert_eq!(ready.len(), 1);
        assert_eq!(ready[0].key, WAKE_KEY);
    }

    #[test]
    fn socket_readiness_is_reported_under_its_key() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let mut client = std::net::TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        let (server, _) = listener.accept().unwrap();
        let poller = Poller::new().unwrap();
        poller.add(&server, 7, true, false).unwrap();
        client.write_all(b"x").unwrap();
        let ready = poller.wait(Some(Duration::from_secs(10))).unwrap();
        assert_eq!(ready.len(), 1);
        assert_eq!(ready[0].key, 7);
        assert!(ready[0].readable);
    }
}
