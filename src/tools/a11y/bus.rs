//! Finding the accessibility bus and talking to it: `AT_SPI_BUS_ADDRESS`, else
//! `org.a11y.Bus.GetAddress` on the session bus (whose first call starts
//! `at-spi-bus-launcher`); then batches of calls sent pipelined, a bounded window at a time,
//! each with a deadline, so a level of the tree costs one round of the application's main
//! loop rather than one round trip per property, and an application that stops answering
//! is marked hung and asked nothing more.

use std::collections::{HashSet, VecDeque};
use std::time::{Duration, Instant};

use crate::tools::display::{DisplayEnv, NO_SESSION_BUS};
use crate::wire::dbus::{Arg, Call, Conn, DbusError, Val};

/// Largest message read from the accessibility bus; a larger answer is skipped.
pub const MAX_MESSAGE: usize = 4 << 20;
/// Largest message read from the session bus (only `GetAddress` is asked there).
const MAX_SESSION_MESSAGE: usize = 64 << 10;
/// Calls in flight at once: enough to keep an application's main loop busy, few enough
/// that neither side's socket buffer fills while the other writes.
pub const WINDOW: usize = 128;

pub const DBUS: &str = "org.freedesktop.DBus";
pub const REGISTRY: &str = "org.a11y.atspi.Registry";
pub const ROOT_PATH: &str = "/org/a11y/atspi/accessible/root";
pub const ACCESSIBLE: &str = "org.a11y.atspi.Accessible";
pub const COMPONENT: &str = "org.a11y.atspi.Component";
pub const ACTION: &str = "org.a11y.atspi.Action";
pub const TEXT: &str = "org.a11y.atspi.Text";
pub const EDITABLE_TEXT: &str = "org.a11y.atspi.EditableText";
pub const VALUE: &str = "org.a11y.atspi.Value";
pub const SELECTION: &str = "org.a11y.atspi.Selection";
pub const PROPERTIES: &str = "org.freedesktop.DBus.Properties";

/// An argument that owns its text, so requests can be built in a loop.
#[derive(Clone, Debug)]
pub enum A {
    S(String),
    U(u32),
    I(i32),
}

/// One call of a batch.
#[derive(Clone, Debug)]
pub struct Req {
    pub dest: String,
    pub path: String,
    pub iface: &'static str,
    pub member: &'static str,
    pub args: Vec<A>,
}

impl Req {
    pub fn new(dest: &str, path: &str, iface: &'static str, member: &'static str) -> Req {
        Req {
            dest: dest.to_string(),
            path: path.to_string(),
            iface,
            member,
            args: Vec::new(),
        }
    }
    pub fn arg(mut self, a: A) -> Req {
        self.args.push(a);
        self
    }
    /// `Properties.Get(iface, name)` on the same object.
    pub fn prop(dest: &str, path: &str, iface: &'static str, name: &str) -> Req {
        Req::new(dest, path, PROPERTIES, "Get")
            .arg(A::S(iface.to_string()))
            .arg(A::S(name.to_string()))
    }
}

/// The address of the accessibility bus for this display environment.
pub fn address(env: &DisplayEnv, timeout: Duration) -> Result<String, String> {
    if let Some(a) = &env.at_spi_bus_address {
        return Ok(a.clone());
    }
    let session = env
        .dbus_session_bus_address
        .as_deref()
        .ok_or(NO_SESSION_BUS)?;
    let mut conn = Conn::connect(session, timeout, MAX_SESSION_MESSAGE)
        .map_err(|e| format!("cannot reach the session bus: {e}"))?;
    let serial = conn.send(&Call {
        dest: "org.a11y.Bus",
        path: "/org/a11y/bus",
        iface: "org.a11y.Bus",
        member: "GetAddress",
        args: &[],
    });
    let answer = conn.wait(serial, Instant::now() + timeout).map_err(|e| {
        format!(
            "the session bus did not give the accessibility bus's address ({e}): is \
             at-spi2-core installed (Debian/Ubuntu: apt install at-spi2-core)?"
        )
    })?;
    match answer.first().and_then(Val::as_str) {
        Some(a) if !a.is_empty() => Ok(a.to_string()),
        _ => Err("the session bus gave an empty accessibility bus address".into()),
    }
}

/// A connection to the accessibility bus, with the applications that stopped answering.
#[derive(Debug)]
pub struct Bus {
    conn: Conn,
    pub timeout: Duration,
    /// Bus names of applications that missed a deadline: asked nothing more.
    pub hung: HashSet<String>,
    /// No call waits past this (the whole snapshot's budget), whatever its own deadline.
    pub until: Option<Instant>,
    /// Calls sent so far (the bench counts what a snapshot asks).
    pub sent: usize,
    /// A call found the connection unusable ([`DbusError::is_fatal`]).
    pub broken: bool,
}

thread_local! {
    /// The accessibility bus connection a display thread used last, with the addresses it
    /// was found for (§24): a snapshot then neither asks the session bus for the address
    /// nor connects and authenticates again (7–12 ms a call). Only a connection left idle
    /// ([`Conn::is_idle`]) by a call that hung on no application is kept; one that fails is
    /// dropped and the call tried once on a new one. It ends with its thread (an own
    /// display's ends with the display).
    static KEPT: std::cell::RefCell<Option<(BusKey, Bus)>> = const { std::cell::RefCell::new(None) };
}

/// What a kept connection was found for: the display environment's bus addresses.
type BusKey = (Option<String>, Option<String>);

fn bus_key(env: &DisplayEnv) -> BusKey {
    (
        env.at_spi_bus_address.clone(),
        env.dbus_session_bus_address.clone(),
    )
}

/// Run `work` over this thread's kept connection to the accessibility bus of `env`, or a
/// new one; keep it afterwards when it is still good. A kept connection that turns out
/// broken (the bus restarted) costs one retry on a new connection, never an error.
pub fn with_bus<T>(
    env: &DisplayEnv,
    timeout: Duration,
    work: impl Fn(&mut Bus) -> Result<T, String>,
) -> Result<T, String> {
    let key = bus_key(env);
    let kept = KEPT
        .with(|k| k.borrow_mut().take())
        .filter(|(k, _)| *k == key)
        .map(|(_, mut bus)| {
            bus.timeout = timeout;
            bus.hung.clear();
            bus.until = None;
            bus.broken = false;
            bus
        });
    let reused = kept.is_some();
    let mut bus = match kept {
        Some(bus) => bus,
        None => Bus::open(env, timeout)?,
    };
    let mut out = work(&mut bus);
    if reused && bus.broken {
        bus = Bus::open(env, timeout)?;
        out = work(&mut bus);
    }
    if !bus.broken && bus.hung.is_empty() && bus.conn.is_idle() {
        KEPT.with(|k| *k.borrow_mut() = Some((key, bus)));
    }
    out
}

impl Bus {
    pub fn open(env: &DisplayEnv, timeout: Duration) -> Result<Bus, String> {
        let address = address(env, timeout)?;
        let conn = Conn::connect(&address, timeout, MAX_MESSAGE)
            .map_err(|e| format!("cannot reach the accessibility bus: {e}"))?;
        Ok(Bus {
            conn,
            timeout,
            hung: HashSet::new(),
            until: None,
            sent: 0,
            broken: false,
        })
    }

    /// A bus over a connection already made (tests: a fake bus).
    #[cfg(test)]
    pub(crate) fn over(conn: Conn, timeout: Duration) -> Bus {
        Bus {
            conn,
            timeout,
            hung: HashSet::new(),
            until: None,
            sent: 0,
            broken: false,
        }
    }

    /// One call, waited for.
    pub fn call(&mut self, req: Req) -> Result<Vec<Val>, DbusError> {
        self.batch(&[req])
            .pop()
            .unwrap_or(Err(DbusError::Protocol("no answer".into())))
    }

    /// Every call of `reqs`, pipelined; the answers in the same order. A call to an
    /// application already marked hung is not sent (it answers `Timeout`); a missed
    /// deadline marks its application hung and ends its other calls at once. A broken
    /// connection answers every unanswered call with its error.
    pub fn batch(&mut self, reqs: &[Req]) -> Vec<Result<Vec<Val>, DbusError>> {
        let mut results: Vec<Option<Result<Vec<Val>, DbusError>>> = vec![None; reqs.len()];
        let mut inflight: VecDeque<(usize, u32, Instant)> = VecDeque::new();
        let mut next = 0;
        loop {
            while inflight.len() < WINDOW && next < reqs.len() {
                let r = &reqs[next];
                if self.hung.contains(&r.dest) {
                    results[next] = Some(Err(DbusError::Timeout));
                } else {
                    let args: Vec<Arg> = r
                        .args
                        .iter()
                        .map(|a| match a {
                            A::S(s) => Arg::Str(s),
                            A::U(u) => Arg::U32(*u),
                            A::I(i) => Arg::I32(*i),
                        })
                        .collect();
                    let serial = self.conn.send(&Call {
                        dest: &r.dest,
                        path: &r.path,
                        iface: r.iface,
                        member: r.member,
                        args: &args,
                    });
                    self.sent += 1;
                    let own = Instant::now() + self.timeout;
                    let at = self.until.map_or(own, |u| u.min(own));
                    inflight.push_back((next, serial, at));
                }
                next += 1;
            }
            inflight.retain(|&(i, serial, _)| match self.conn.take(serial) {
                Some(answer) => {
                    results[i] = Some(answer);
                    false
                }
                None => true,
            });
            if inflight.is_empty() {
                if next >= reqs.len() {
                    break;
                }
                continue;
            }
            let deadline = inflight.iter().map(|e| e.2).min().expect("not empty");
            match self.conn.read_one(deadline) {
                Ok(true) => {}
                Ok(false) => {
                    let now = Instant::now();
                    for &(i, _, at) in &inflight {
                        if at <= now {
                            self.hung.insert(reqs[i].dest.clone());
                        }
                    }
                    let hung = &self.hung;
                    let conn = &mut self.conn;
                    inflight.retain(|&(i, serial, _)| {
                        if hung.contains(&reqs[i].dest) {
                            conn.forget(serial);
                            results[i] = Some(Err(DbusError::Timeout));
                            false
                        } else {
                            true
                        }
                    });
                }
                Err(e) => {
                    self.broken |= e.is_fatal();
                    return results
                        .into_iter()
                        .map(|r| r.unwrap_or_else(|| Err(e.clone())))
                        .collect();
                }
            }
        }
        results
            .into_iter()
            .map(|r| r.unwrap_or(Err(DbusError::Timeout)))
            .collect()
    }
}
