//! Finding the accessibility bus and talking to it: `AT_SPI_BUS_ADDRESS`, else
//! `org.a11y.Bus.GetAddress` on the session bus (whose first call starts
//! `at-spi-bus-launcher`); then batches of calls sent pipelined, a bounded window at a time,
//! each with a deadline, so a level of the tree costs one round of the application's main
//! loop rather than one round trip per property, and an application that stops answering
//! is marked hung and asked nothing more. An application walked by a snapshot is asked
//! directly, over the socket of its own it names (`GetApplicationBusAddress`, as libatspi
//! does), when that socket is served by the application's own process: each call then skips
//! the bus daemon's two hops, a third to a half of its cost (docs/performance.md).

use std::collections::{HashMap, HashSet, VecDeque};
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
/// Applications talked to directly at once; others are asked over the bus.
pub const MAX_DIRECT: usize = 32;
pub const APPLICATION: &str = "org.a11y.atspi.Application";

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
    /// Calls sent so far (the bench counts what a snapshot asks), and how many of them
    /// went to an application directly.
    pub sent: usize,
    pub sent_direct: usize,
    /// Whether [`Bus::go_direct`] may connect to applications (the bench turns it off to
    /// measure the bus alone).
    pub direct: bool,
    /// Applications talked to directly, by bus name. Closed when the work that opened them
    /// ends ([`Bus::end_direct`]): an idle direct connection would collect the
    /// application's events unread.
    peers: HashMap<String, Conn>,
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
    bus.end_direct();
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
            sent_direct: 0,
            direct: true,
            peers: HashMap::new(),
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
            sent_direct: 0,
            direct: true,
            peers: HashMap::new(),
            broken: false,
        }
    }

    /// One call, waited for.
    pub fn call(&mut self, req: Req) -> Result<Vec<Val>, DbusError> {
        self.batch(&[req])
            .pop()
            .unwrap_or(Err(DbusError::Protocol("no answer".into())))
    }

    /// Talk to these applications (bus name, accessible path, process id) directly from
    /// now until [`Bus::end_direct`], where each names a socket of its own that its own
    /// process serves; the others stay on the bus. Costs one batched call and one connect
    /// per application; any failure just leaves that application on the bus.
    pub fn go_direct(&mut self, apps: &[(String, String, Option<u32>)]) {
        if !self.direct {
            return;
        }
        let todo: Vec<(&String, &String, u32)> = apps
            .iter()
            .filter(|(name, ..)| !self.peers.contains_key(name) && !self.hung.contains(name))
            .filter_map(|(name, path, pid)| Some((name, path, (*pid)?)))
            .take(MAX_DIRECT.saturating_sub(self.peers.len()))
            .collect();
        if todo.is_empty() {
            return;
        }
        let reqs: Vec<Req> = todo
            .iter()
            .map(|(name, path, _)| Req::new(name, path, APPLICATION, "GetApplicationBusAddress"))
            .collect();
        let answers = self.batch(&reqs);
        for ((name, _, pid), answer) in todo.into_iter().zip(answers) {
            let Some(address) = answer
                .ok()
                .and_then(|v| v.first().and_then(Val::as_str).map(str::to_string))
            else {
                continue;
            };
            match Conn::connect_peer(&address, pid, self.timeout, MAX_MESSAGE) {
                Ok(conn) => {
                    self.peers.insert(name.clone(), conn);
                }
                Err(e) => log::debug!("asking {name} over the bus, not directly: {e}"),
            }
        }
    }

    /// Talk to `name` over `conn` (tests: a fake application).
    #[cfg(test)]
    pub(crate) fn add_peer(&mut self, name: &str, conn: Conn) {
        self.peers.insert(name.to_string(), conn);
    }

    /// Close the direct connections: later calls go over the bus.
    pub fn end_direct(&mut self) {
        self.peers.clear();
    }

    /// How many applications are talked to directly now.
    pub fn direct_count(&self) -> usize {
        self.peers.len()
    }

    /// Every call of `reqs`, pipelined; the answers in the same order. A call to an
    /// application already marked hung is not sent (it answers `Timeout`); a missed
    /// deadline marks its application hung and ends its other calls at once. A broken
    /// bus connection answers every unanswered call with its error; a broken direct one
    /// answers that application's calls with it, and the application is asked over the
    /// bus from then on.
    pub fn batch(&mut self, reqs: &[Req]) -> Vec<Result<Vec<Val>, DbusError>> {
        let mut results: Vec<Option<Result<Vec<Val>, DbusError>>> = vec![None; reqs.len()];
        // One lane per connection: the bus (`None`) and each application asked directly.
        let mut lanes: Vec<Lane> = Vec::new();
        for (i, r) in reqs.iter().enumerate() {
            if self.hung.contains(&r.dest) {
                results[i] = Some(Err(DbusError::Timeout));
                continue;
            }
            let peer = self.peers.contains_key(&r.dest).then(|| r.dest.clone());
            match lanes.iter_mut().find(|l| l.peer == peer) {
                Some(lane) => lane.queue.push_back(i),
                None => lanes.push(Lane {
                    peer,
                    queue: VecDeque::from([i]),
                    inflight: VecDeque::new(),
                }),
            }
        }
        loop {
            for lane in &mut lanes {
                let conn = lane_conn(&mut self.conn, &mut self.peers, &lane.peer);
                while lane.inflight.len() < WINDOW {
                    let Some(i) = lane.queue.pop_front() else {
                        break;
                    };
                    let r = &reqs[i];
                    if self.hung.contains(&r.dest) {
                        results[i] = Some(Err(DbusError::Timeout));
                        continue;
                    }
                    let args: Vec<Arg> = r
                        .args
                        .iter()
                        .map(|a| match a {
                            A::S(s) => Arg::Str(s),
                            A::U(u) => Arg::U32(*u),
                            A::I(i) => Arg::I32(*i),
                        })
                        .collect();
                    let serial = conn.send(&Call {
                        dest: &r.dest,
                        path: &r.path,
                        iface: r.iface,
                        member: r.member,
                        args: &args,
                    });
                    self.sent += 1;
                    self.sent_direct += usize::from(lane.peer.is_some());
                    let own = Instant::now() + self.timeout;
                    let at = self.until.map_or(own, |u| u.min(own));
                    lane.inflight.push_back((i, serial, at));
                }
                lane.inflight
                    .retain(|&(i, serial, _)| match conn.take(serial) {
                        Some(answer) => {
                            results[i] = Some(answer);
                            false
                        }
                        None => true,
                    });
            }
            lanes.retain(|l| !l.inflight.is_empty() || !l.queue.is_empty());
            if lanes.is_empty() {
                break;
            }
            if lanes.iter().all(|l| l.inflight.is_empty()) {
                continue;
            }
            // Write what is queued, then wait for the first lane to have something, or the
            // first deadline.
            let deadline = lanes
                .iter()
                .flat_map(|l| l.inflight.iter().map(|e| e.2))
                .min()
                .expect("a call in flight");
            let mut failed: Vec<(Option<String>, DbusError)> = Vec::new();
            for lane in &lanes {
                if let Err(e) = lane_conn(&mut self.conn, &mut self.peers, &lane.peer).flush() {
                    failed.push((lane.peer.clone(), e));
                }
            }
            if failed.is_empty() {
                let mut fds: Vec<rustix::event::PollFd> = lanes
                    .iter()
                    .map(|lane| {
                        let conn = match &lane.peer {
                            Some(name) => &self.peers[name],
                            None => &self.conn,
                        };
                        rustix::event::PollFd::new(conn, rustix::event::PollFlags::IN)
                    })
                    .collect();
                let left = deadline.saturating_duration_since(Instant::now());
                let ts =
                    rustix::event::Timespec::try_from(left).unwrap_or(rustix::event::Timespec {
                        tv_sec: 1,
                        tv_nsec: 0,
                    });
                let ready: Vec<bool> = match rustix::event::poll(&mut fds, Some(&ts)) {
                    Ok(_) | Err(rustix::io::Errno::INTR) => {
                        fds.iter().map(|f| !f.revents().is_empty()).collect()
                    }
                    Err(e) => return self.broken_bus(DbusError::Io(e.to_string()), results),
                };
                for (lane, ready) in lanes.iter().zip(ready) {
                    if !ready {
                        continue;
                    }
                    let conn = lane_conn(&mut self.conn, &mut self.peers, &lane.peer);
                    if let Err(e) = conn.read_ready() {
                        failed.push((lane.peer.clone(), e));
                    }
                }
            }
            for (peer, e) in failed {
                match peer {
                    None => return self.broken_bus(e, results),
                    Some(peer) => self.drop_peer(&peer, &e, &mut lanes, &mut results),
                }
            }
            // Calls past their deadline: their applications are hung.
            let now = Instant::now();
            if now >= deadline {
                for lane in &lanes {
                    for &(i, _, at) in &lane.inflight {
                        if at <= now {
                            self.hung.insert(reqs[i].dest.clone());
                        }
                    }
                }
                let hung = &self.hung;
                for lane in &mut lanes {
                    let conn = lane_conn(&mut self.conn, &mut self.peers, &lane.peer);
                    lane.inflight.retain(|&(i, serial, _)| {
                        if hung.contains(&reqs[i].dest) {
                            conn.forget(serial);
                            results[i] = Some(Err(DbusError::Timeout));
                            false
                        } else {
                            true
                        }
                    });
                }
            }
        }
        results
            .into_iter()
            .map(|r| r.unwrap_or(Err(DbusError::Timeout)))
            .collect()
    }

    /// The bus connection failed: every unanswered call ends with its error.
    fn broken_bus(
        &mut self,
        e: DbusError,
        results: Vec<Option<Result<Vec<Val>, DbusError>>>,
    ) -> Vec<Result<Vec<Val>, DbusError>> {
        self.broken |= e.is_fatal();
        results
            .into_iter()
            .map(|r| r.unwrap_or_else(|| Err(e.clone())))
            .collect()
    }

    /// A direct connection failed: its calls end with the error, and its application is
    /// asked over the bus from now on.
    fn drop_peer(
        &mut self,
        peer: &str,
        e: &DbusError,
        lanes: &mut Vec<Lane>,
        results: &mut [Option<Result<Vec<Val>, DbusError>>],
    ) {
        log::debug!("the direct connection to {peer} failed ({e}); asking it over the bus");
        self.peers.remove(peer);
        lanes.retain(|l| {
            if l.peer.as_deref() != Some(peer) {
                return true;
            }
            for &(i, ..) in &l.inflight {
                results[i] = Some(Err(e.clone()));
            }
            for &i in &l.queue {
                results[i] = Some(Err(e.clone()));
            }
            false
        });
    }
}

/// The connection of a lane: the application's own, or the bus.
fn lane_conn<'a>(
    bus: &'a mut Conn,
    peers: &'a mut HashMap<String, Conn>,
    peer: &Option<String>,
) -> &'a mut Conn {
    match peer {
        Some(name) => peers.get_mut(name).expect("a lane's peer is kept"),
        None => bus,
    }
}

/// The calls of a batch on one connection: waiting to be sent, and sent (index in the
/// batch, serial, deadline).
struct Lane {
    /// The application asked directly, or `None` for the bus.
    peer: Option<String>,
    queue: VecDeque<usize>,
    inflight: VecDeque<(usize, u32, Instant)>,
}
