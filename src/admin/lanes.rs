//! Bounded lanes for admin work that waits on someone else (a mint waits for the pod, a
//! `/mcp` tool call for its tool; approval long-polls will too): each piece of work runs on
//! a thread of its own, at most `max` at once per lane, so the admin API's few handler
//! threads only ever do quick work and `/healthz`, `/readyz` and revokes are answered while
//! any number of slow requests wait. Past the bound a caller is told so at once.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use crate::faults::{self, Site};

/// One kind of waiting work and how much of it may wait at once.
#[derive(Debug)]
pub struct Lane {
    /// Name of the threads its work runs on.
    name: &'static str,
    /// What one piece of work is called in a refusal, plural ("mints").
    what: &'static str,
    max: usize,
    busy: AtomicUsize,
}

/// A place in a lane; dropping it (the work returned, panicked, or never started) frees it.
#[derive(Debug)]
pub struct Slot {
    lane: Arc<Lane>,
}

/// The lane is full. Its `Display` is the message for the caller's `429`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Busy {
    pub max: usize,
    pub what: &'static str,
}

impl std::fmt::Display for Busy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} {} already waiting (the most allowed at once); retry when one has finished",
            self.max, self.what
        )
    }
}

impl Lane {
    pub fn new(name: &'static str, what: &'static str, max: usize) -> Arc<Lane> {
        Arc::new(Lane {
            name,
            what,
            max,
            busy: AtomicUsize::new(0),
        })
    }

    /// Pieces of work holding a slot right now.
    pub fn busy(&self) -> usize {
        self.busy.load(Ordering::SeqCst)
    }

    /// Take a slot, or say why not.
    pub fn try_acquire(self: &Arc<Self>) -> Result<Slot, Busy> {
        let taken = self
            .busy
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| {
                (n < self.max).then_some(n + 1)
            });
        match taken {
            Ok(_) => Ok(Slot {
                lane: Arc::clone(self),
            }),
            Err(_) => Err(Busy {
                max: self.max,
                what: self.what,
            }),
        }
    }
}

impl Slot {
    /// Run `work` on a thread of its own that holds this slot until `work` returns or
    /// unwinds. If no thread can be started, the slot is freed and `work` handed back, so
    /// the caller can still answer its request.
    pub fn spawn<F>(self, work: F) -> Result<(), (std::io::Error, F)>
    where
        F: FnOnce() + Send + 'static,
    {
        // The closure is kept in a cell the thread takes it from, so a failed spawn can
        // return it: `Builder::spawn` drops what it was given when it fails.
        let cell = Arc::new(std::sync::Mutex::new(Some(work)));
        let theirs = Arc::clone(&cell);
        let name = self.lane.name;
        let spawned = std::thread::Builder::new()
            .name(name.into())
            .spawn(move || {
                let _slot = self;
                let work = theirs.lock().unwrap_or_else(|e| e.into_inner()).take();
                if let Some(work) = work {
                    // Lane work answers an admin request: a panic ends that request (500,
                    // from tiny_http dropping it) and frees the slot, nothing else.
                    let done = std::panic::catch_unwind(std::panic::AssertUnwindSafe(work));
                    if let Err(payload) = done {
                        faults::caught(Site::Admin, name, payload.as_ref());
                    }
                }
            });
        match spawned {
            Ok(_) => Ok(()),
            Err(e) => {
                let work = cell
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .take()
                    .expect("the thread never started, so never took it");
                Err((e, work))
            }
        }
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        self.lane.busy.fetch_sub(1, Ordering::SeqCst);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn the_bound_plus_one_is_refused_and_a_finished_slot_is_reused() {
        let lane = Lane::new("test-lane", "tests", 2);
        let (gate_tx, gate_rx) = crossbeam_channel::bounded::<()>(0);
        let (done_tx, done_rx) = crossbeam_channel::unbounded();
        for _ in 0..2 {
            let gate = gate_rx.clone();
            let done = done_tx.clone();
            lane.try_acquire()
                .unwrap()
                .spawn(move || {
                    let _ = gate.recv();
                    done.send(()).unwrap();
                })
                .map_err(|(e, _)| e)
                .unwrap();
        }
        assert_eq!(lane.busy(), 2);
        let busy = lane.try_acquire().unwrap_err();
        assert_eq!(
            busy.to_string(),
            "2 tests already waiting (the most allowed at once); retry when one has finished"
        );
        drop(gate_tx);
        for _ in 0..2 {
            done_rx.recv_timeout(Duration::from_secs(10)).unwrap();
        }
        crate::base::testutil::wait_for(|| lane.busy() == 0, "the slots to be freed");
        assert!(lane.try_acquire().is_ok());
    }

    #[test]
    fn a_panic_frees_its_slot() {
        let lane = Lane::new("test-lane", "tests", 1);
        lane.try_acquire()
            .unwrap()
            .spawn(|| panic!("test: work that panics"))
            .map_err(|(e, _)| e)
            .unwrap();
        crate::base::testutil::wait_for(|| lane.busy() == 0, "the panicked work's slot");
        assert!(lane.try_acquire().is_ok());
    }
}
