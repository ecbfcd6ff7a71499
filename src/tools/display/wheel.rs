//! Who drives an own display (§23): its agent, or the person who lent the box, who takes
//! the wheel (`POST /attach/{id}/wheel`) to act on the screen through the live view. One
//! [`Wheel`] per own display, and the live view's viewers of that display ([`Viewers`]).
//!
//! **The epoch.** Every change of hands adds one. A call of a tool that drives the display
//! ([`drives`]) is stamped with the epoch it was admitted under (`Services::track`, the
//! moment it is listed in `GET /calls`), and checked again when the display thread is
//! about to run it ([`Wheel::check`]): a call admitted before a take-over never acts after
//! it, even once the wheel is back (the screen it was aimed at may have changed).
//!
//! **The lease.** It belongs to the grant's display, not to a viewer: a viewer that
//! reconnects finds it as it was. It goes back to the agent on `{"take":false}`, after
//! `--wheel-idle-secs` without input from the lender (seen lazily: whoever next asks who
//! holds it, so no thread waits for it), when the grant ends, and with the daemon: it is
//! not persisted, since a restart ends every viewer and no one's hand is on it then.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use crate::audit::{Audit, Record};
use crate::base::wake::Waker;

/// What the agent's input tools answer while the lender holds the wheel.
pub const HAS_THE_WHEEL: &str = "the person who lent the box has the wheel";

/// Whether `tool` drives the display, and so is refused while the lender holds the wheel:
/// a local tool whose descriptor says it changes what a screen shows (`changes_screen`, the
/// same fact the journal's thumbnails follow), so a new such tool is covered by declaring it.
pub fn drives(tool: &str) -> bool {
    crate::tools::find(tool).is_some_and(|t| t.changes_screen)
}

/// Who holds the wheel.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Holder {
    Agent,
    Lender,
}

impl Holder {
    /// As the grant JSON and `sys_info` say it.
    pub fn as_str(self) -> &'static str {
        match self {
            Holder::Agent => "agent",
            Holder::Lender => "lender",
        }
    }
}

#[derive(Debug)]
struct State {
    holder: Holder,
    epoch: u64,
    /// The lender's last input (or the take): the idle clock.
    last_input: Instant,
}

/// One own display's wheel. See the module doc.
#[derive(Debug)]
pub struct Wheel {
    grant: String,
    idle: Duration,
    state: Mutex<State>,
    audit: Arc<OnceLock<Audit>>,
}

/// A change of hands: `taken`, `given`, or `idle` (given back after `--wheel-idle-secs`).
struct Change {
    holder: Holder,
    epoch: u64,
    by: String,
    how: &'static str,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl Wheel {
    pub fn new(grant: &str, idle: Duration, audit: Arc<OnceLock<Audit>>) -> Wheel {
        Wheel {
            grant: grant.to_string(),
            idle,
            state: Mutex::new(State {
                holder: Holder::Agent,
                epoch: 0,
                last_input: Instant::now(),
            }),
            audit,
        }
    }

    /// The idle give-back, when due.
    fn settle(&self, st: &mut State) -> Option<Change> {
        if st.holder == Holder::Lender && st.last_input.elapsed() >= self.idle {
            st.holder = Holder::Agent;
            st.epoch += 1;
            return Some(Change {
                holder: Holder::Agent,
                epoch: st.epoch,
                by: "idle".into(),
                how: "idle",
            });
        }
        None
    }

    /// Run `f` on the settled state, then report a change (outside the lock).
    fn with<T>(&self, f: impl FnOnce(&mut State) -> (T, Option<Change>)) -> T {
        let (out, changes) = {
            let mut st = lock(&self.state);
            let idle = self.settle(&mut st);
            let (out, change) = f(&mut st);
            (out, [idle, change])
        };
        for c in changes.into_iter().flatten() {
            self.report(c);
        }
        out
    }

    fn report(&self, c: Change) {
        log::info!(
            "grant {}: the wheel is the {}'s ({} by {}, epoch {})",
            self.grant,
            c.holder.as_str(),
            c.how,
            c.by,
            c.epoch
        );
        if let Some(audit) = self.audit.get() {
            audit.record(Record::Wheel {
                grant_id: self.grant.clone(),
                principal: c.by,
                event: c.how,
                holder: c.holder.as_str(),
                epoch: c.epoch,
            });
        }
    }

    /// Who holds it now.
    pub fn holder(&self) -> Holder {
        self.with(|st| (st.holder, None))
    }

    /// The epoch now: what a call is admitted under.
    pub fn epoch(&self) -> u64 {
        self.with(|st| (st.epoch, None))
    }

    /// Take it (`take`) or give it back, for `by`. Taking it again renews the lease;
    /// giving back what the agent holds changes nothing. Returns (holder, epoch).
    pub fn set(&self, take: bool, by: &str) -> (Holder, u64) {
        self.with(|st| {
            let change = match (take, st.holder) {
                (true, Holder::Agent) => Some((Holder::Lender, "taken")),
                (false, Holder::Lender) => Some((Holder::Agent, "given")),
                _ => None,
            };
            if take {
                st.last_input = Instant::now();
            }
            let change = change.map(|(holder, how)| {
                st.holder = holder;
                st.epoch += 1;
                Change {
                    holder,
                    epoch: st.epoch,
                    by: by.to_string(),
                    how,
                }
            });
            ((st.holder, st.epoch), change)
        })
    }

    /// Whether a call of the agent admitted under epoch `admitted` may drive the display
    /// now; `Err` is its answer.
    pub fn check(&self, admitted: u64) -> Result<(), String> {
        self.with(|st| {
            let answer = match (st.holder, st.epoch == admitted) {
                (Holder::Agent, true) => Ok(()),
                (Holder::Lender, true) => Err(format!(
                    "{HAS_THE_WHEEL}: call again once they give it back"
                )),
                (Holder::Lender, false) => Err(format!(
                    "{HAS_THE_WHEEL}: they took it after this call was made"
                )),
                (Holder::Agent, false) => Err(
                    "the person who lent the box took the wheel after this call was made \
                     and has given it back: look at the screen again, then call again"
                        .to_string(),
                ),
            };
            (answer, None)
        })
    }

    /// Whether a call of the agent that drives the display, admitted under the epoch
    /// `admitted` (`None`: not stamped, checked against now), may act now.
    pub fn may_drive(&self, admitted: Option<u64>) -> Result<(), String> {
        self.check(admitted.unwrap_or_else(|| self.epoch()))
    }

    /// The lender's viewer sent input: whether it may reach the display (the lender holds
    /// the wheel), which also restarts the idle clock.
    pub fn lender_input(&self) -> bool {
        self.with(|st| {
            let holds = st.holder == Holder::Lender;
            if holds {
                st.last_input = Instant::now();
            }
            (holds, None)
        })
    }

    /// When the lease runs out if the lender sends nothing more (`None`: the agent's).
    pub fn idle_deadline(&self) -> Option<Instant> {
        self.with(|st| {
            let at = (st.holder == Holder::Lender).then(|| st.last_input + self.idle);
            (at, None)
        })
    }
}

/// The live view's viewers of one own display: how many, and how to end them when the
/// display or its grant ends.
#[derive(Debug, Default)]
pub struct Viewers {
    list: Mutex<Vec<Arc<ViewerCtl>>>,
}

/// One viewer's stop flag and its bridge thread's wake handle.
#[derive(Debug)]
pub struct ViewerCtl {
    stop: AtomicBool,
    waker: Arc<Waker>,
}

impl ViewerCtl {
    /// Whether its display or grant ended.
    pub fn stopped(&self) -> bool {
        self.stop.load(Ordering::SeqCst)
    }
}

/// A viewer's place among at most N: gone when dropped.
#[derive(Debug)]
pub struct ViewerSlot {
    viewers: Arc<Viewers>,
    pub ctl: Arc<ViewerCtl>,
}

impl Drop for ViewerSlot {
    fn drop(&mut self) {
        lock(&self.viewers.list).retain(|v| !Arc::ptr_eq(v, &self.ctl));
    }
}

impl Viewers {
    /// A place for one more viewer, woken by `waker` at the end; `Err` when `max` watch.
    pub fn admit(self: &Arc<Self>, max: usize, waker: Arc<Waker>) -> Result<ViewerSlot, String> {
        let mut list = lock(&self.list);
        if list.len() >= max {
            return Err(format!(
                "this display already has {} viewers (--live-view-max-viewers {max}): close \
                 one, or raise the bound",
                list.len()
            ));
        }
        let ctl = Arc::new(ViewerCtl {
            stop: AtomicBool::new(false),
            waker,
        });
        list.push(Arc::clone(&ctl));
        Ok(ViewerSlot {
            viewers: Arc::clone(self),
            ctl,
        })
    }

    pub fn count(&self) -> usize {
        lock(&self.list).len()
    }

    /// The display or its grant ended: every viewer's bridge closes.
    pub fn end_all(&self) {
        for v in lock(&self.list).iter() {
            v.stop.store(true, Ordering::SeqCst);
            v.waker.wake();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn wheel(idle: Duration) -> Wheel {
        Wheel::new("g", idle, Arc::new(OnceLock::new()))
    }

    #[test]
    fn every_change_of_hands_moves_the_epoch_and_a_renewal_does_not() {
        let w = wheel(Duration::from_secs(300));
        assert_eq!((w.holder(), w.epoch()), (Holder::Agent, 0));
        assert_eq!(w.set(false, "me"), (Holder::Agent, 0), "nothing to give");
        assert_eq!(w.set(true, "me"), (Holder::Lender, 1));
        assert_eq!(w.set(true, "me"), (Holder::Lender, 1), "a renewal");
        assert_eq!(w.set(false, "me"), (Holder::Agent, 2));
    }

    /// A call admitted before a take-over is refused at dispatch, while the lender holds
    /// it and after they gave it back; one admitted while they hold it is told to wait.
    #[test]
    fn a_call_is_checked_against_the_epoch_it_was_admitted_under() {
        let w = wheel(Duration::from_secs(300));
        let before = w.epoch();
        assert_eq!(w.check(before), Ok(()));
        w.set(true, "me");
        let err = w.check(before).unwrap_err();
        assert!(err.starts_with(HAS_THE_WHEEL), "{err}");
        assert!(err.contains("after this call was made"), "{err}");
        let during = w.epoch();
        assert!(w
            .check(during)
            .unwrap_err()
            .contains("once they give it back"));
        w.set(false, "me");
        assert!(w.check(before).unwrap_err().contains("given it back"));
        assert!(w.check(during).is_err());
        assert_eq!(w.check(w.epoch()), Ok(()));
    }

    #[test]
    fn the_lease_goes_back_after_the_idle_time_and_input_renews_it() {
        let w = wheel(Duration::ZERO);
        w.set(true, "me");
        assert_eq!(w.holder(), Holder::Agent, "idle at once");
        assert_eq!(w.epoch(), 2, "taken, then given back by the idle clock");
        let w = wheel(Duration::from_secs(3600));
        assert!(!w.lender_input(), "the agent's wheel: input is dropped");
        w.set(true, "me");
        assert!(w.lender_input());
        assert!(w.idle_deadline().is_some());
        w.set(false, "me");
        assert!(w.idle_deadline().is_none());
    }

    #[test]
    fn viewers_are_bounded_and_leave_with_their_slot() {
        let viewers = Arc::new(Viewers::default());
        let poller = crate::base::wake::Poller::new().unwrap();
        let a = viewers.admit(2, poller.waker()).unwrap();
        let b = viewers.admit(2, poller.waker()).unwrap();
        let err = viewers.admit(2, poller.waker()).unwrap_err();
        assert!(err.contains("already has 2 viewers"), "{err}");
        drop(a);
        let c = viewers.admit(2, poller.waker()).unwrap();
        viewers.end_all();
        assert!(b.ctl.stopped() && c.ctl.stopped());
        drop((b, c));
        assert_eq!(viewers.count(), 0);
    }
}
