use super::tree::{self, state, Node};
use super::*;

fn el(name: &str) -> ElementRef {
    ElementRef {
        bus: ":1.5".into(),
        path: "/org/a11y/atspi/accessible/7".into(),
        role: "push button".into(),
        name: name.into(),
        app: ElementApp {
            name: "zenity".into(),
            pid: Some(42),
        },
    }
}

#[test]
fn max_nodes_and_app_are_bounded_at_bound_plus_one() {
    assert_eq!(
        snapshot_args(&Value::Null).unwrap().max_nodes,
        DEFAULT_MAX_NODES
    );
    assert_eq!(
        snapshot_args(&json!({"max_nodes": MAX_MAX_NODES}))
            .unwrap()
            .max_nodes,
        MAX_MAX_NODES
    );
    for bad in [
        json!({"max_nodes": MAX_MAX_NODES + 1}),
        json!({"max_nodes": 0}),
        json!({"max_nodes": 1.5}),
        json!({"app": "x".repeat(MAX_APP_CHARS + 1)}),
        json!({"app": ""}),
        json!({"offscreen": 1}),
        json!([]),
    ] {
        assert!(snapshot_args(&bad).is_err(), "{bad}");
    }
    assert_eq!(
        snapshot_args(&json!({"app": "x".repeat(MAX_APP_CHARS)}))
            .unwrap()
            .app
            .map(|a| a.len()),
        Some(MAX_APP_CHARS)
    );
}

#[test]
fn refs_belong_to_their_scope_until_its_next_snapshot_or_its_end() {
    let refs = Refs::default();
    refs.put("g1", vec![el("Yes"), el("No")]);
    refs.put("g2", vec![el("Other")]);
    assert_eq!(refs.get("g1", "e2").unwrap().name, "No");
    assert_eq!(refs.get("g2", "e1").unwrap().name, "Other");
    for missing in ["e3", "e0", "x1", "e", "e-1", "e99999999999999999999"] {
        assert!(refs.get("g1", missing).is_none(), "{missing}");
    }
    // The next snapshot replaces the old refs whole.
    refs.put("g1", vec![el("Only")]);
    assert!(refs.get("g1", "e2").is_none());
    refs.end_scope("g1");
    assert!(refs.get("g1", "e1").is_none());
    assert_eq!(refs.scopes(), 1);
}

#[test]
fn a_line_shows_role_name_the_states_that_matter_and_escapes_the_name() {
    let mut node = Node::alone(el("Save \"all\"\n"), 0);
    node.states = (1 << state::FOCUSED) | (1 << state::VISIBLE) | (1 << state::SHOWING);
    assert_eq!(
        tree::line("e12", &node, false),
        r#"[e12] push button "Save \"all\"\n" (focused, disabled)"#
    );
    node.states |= 1 << state::SENSITIVE;
    assert_eq!(
        tree::line("e12", &node, false),
        r#"[e12] push button "Save \"all\"\n" (focused)"#
    );
    let long = "x".repeat(tree::LINE_NAME_CHARS + 1);
    let node = Node::alone(el(&long), 1 << state::VISIBLE | 1 << state::SENSITIVE);
    let line = tree::line("e1", &node, true);
    assert!(line.ends_with("…\" (offscreen)"), "{line}");
    let v = tree::node_json("e1", &node, true);
    assert_eq!(v["app"], "zenity");
    assert_eq!(v["states"], json!(["offscreen"]));
}

#[test]
fn the_registry_places_the_tools_and_their_readiness() {
    let observe = crate::tools::names(Profile::Observe);
    assert!(observe.contains(&SNAPSHOT.name) && !observe.contains(&ACT.name));
    assert_eq!(crate::tools::find(ACT.name).unwrap().class, Class::Shell);
    let probe = crate::tools::display::Probe::working_x11();
    assert!(probe.ready(Gui::A11ySnapshot).is_ok());
    let mut bare = probe.clone();
    bare.env.dbus_session_bus_address = None;
    let err = bare.ready(Gui::A11yAct).unwrap_err();
    assert!(err.contains("DBUS_SESSION_BUS_ADDRESS"), "{err}");
}

#[test]
fn the_escalation_check_classifies_both_tools() {
    use crate::tools::policy::{Shell, ToolLists, ToolPolicy};
    let custom = |allow: &[&str]| {
        ToolPolicy::new(
            Profile::Custom,
            ToolLists {
                allow: allow.iter().map(|s| s.to_string()).collect(),
                deny: Vec::new(),
            },
        )
        .unwrap()
        .escalation(|_| false)
    };
    assert_eq!(custom(&[SNAPSHOT.name, "screenshot"]).shell, Shell::No);
    let yes = custom(&[SNAPSHOT.name, ACT.name]);
    assert_eq!(yes.shell, Shell::Yes);
    assert_eq!(yes.because.as_deref(), Some("desktop_act is a shell tool"));
    // Under approval, the grant is gated.
    let policy = ToolPolicy::new(
        Profile::Custom,
        ToolLists {
            allow: vec![ACT.name.to_string()],
            deny: Vec::new(),
        },
    )
    .unwrap();
    assert_eq!(policy.escalation(|n| n == ACT.name).shell, Shell::Gated);
    // observe stays a boundary with the snapshot in it.
    let observe = ToolPolicy::fixed(Profile::Observe).unwrap();
    assert!(observe.allows(SNAPSHOT.name) && !observe.allows(ACT.name));
    assert_eq!(observe.escalation(|_| false).shell, Shell::No);
}

/// A fake bus on a socket pair: answers every call to `:1.good` with 7, never one to
/// `:1.bad`; reports each call's destination as it comes.
fn fake_bus(timeout: std::time::Duration) -> (bus::Bus, crossbeam_channel::Receiver<String>) {
    use std::io::{Read, Write};
    let (ours, mut theirs) = std::os::unix::net::UnixStream::pair().unwrap();
    let (tx, rx) = crossbeam_channel::unbounded();
    std::thread::spawn(move || {
        let mut buf = Vec::new();
        let mut chunk = [0u8; 4096];
        let mut serial = 100;
        loop {
            while let Some((len, reply_to, dest, _)) = crate::wire::dbus::fake::call_at(&buf) {
                buf.drain(..len);
                let _ = tx.send(dest.clone());
                if dest == ":1.good" {
                    serial += 1;
                    let _ =
                        theirs.write_all(&crate::wire::dbus::fake::reply_u(serial, reply_to, 7));
                }
            }
            match theirs.read(&mut chunk) {
                Ok(0) | Err(_) => return,
                Ok(n) => buf.extend_from_slice(&chunk[..n]),
            }
        }
    });
    let conn = crate::wire::dbus::Conn::over(ours, bus::MAX_MESSAGE);
    (bus::Bus::over(conn, timeout), rx)
}

#[test]
fn an_application_that_misses_a_deadline_is_marked_hung_and_asked_nothing_more() {
    use crate::wire::dbus::{DbusError, Val};
    use std::time::{Duration, Instant};
    let (mut bus, seen) = fake_bus(Duration::from_millis(100));
    let req = |dest: &str| bus::Req::new(dest, "/", bus::ACCESSIBLE, "GetRoleName");
    let started = Instant::now();
    let out = bus.batch(&[req(":1.good"), req(":1.bad"), req(":1.good")]);
    assert_eq!(out[0], Ok(vec![Val::UInt(7)]));
    assert_eq!(out[1], Err(DbusError::Timeout));
    assert_eq!(out[2], Ok(vec![Val::UInt(7)]));
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "{:?}",
        started.elapsed()
    );
    assert!(bus.hung.contains(":1.bad"));
    // Next batch: the hung one is not asked (its answer is at once), the other is.
    let started = Instant::now();
    let out = bus.batch(&[req(":1.bad"), req(":1.good")]);
    assert_eq!(out[0], Err(DbusError::Timeout));
    assert_eq!(out[1], Ok(vec![Val::UInt(7)]));
    assert!(
        started.elapsed() < Duration::from_millis(100),
        "{:?}",
        started.elapsed()
    );
    drop(bus);
    // The fake bus ends when the connection closes (a watchdog in case it does not).
    let mut dests = Vec::new();
    while let Ok(d) = seen.recv_timeout(Duration::from_secs(10)) {
        dests.push(d);
    }
    assert_eq!(
        dests.iter().filter(|d| *d == ":1.bad").count(),
        1,
        "{dests:?}"
    );
    assert_eq!(
        dests.iter().filter(|d| *d == ":1.good").count(),
        3,
        "{dests:?}"
    );
}

#[test]
fn a_batch_larger_than_the_window_is_answered_whole_and_in_order() {
    use crate::wire::dbus::Val;
    let (mut bus, _seen) = fake_bus(std::time::Duration::from_secs(10));
    let reqs: Vec<bus::Req> = (0..bus::WINDOW * 3 + 1)
        .map(|_| bus::Req::new(":1.good", "/", bus::ACCESSIBLE, "GetRoleName"))
        .collect();
    let out = bus.batch(&reqs);
    assert_eq!(out.len(), reqs.len());
    assert!(out.iter().all(|a| *a == Ok(vec![Val::UInt(7)])));
}

/// A fake application's own socket: answers its first `answers` calls with 9, then
/// closes (or, with `silent`, keeps the socket open and answers nothing).
fn fake_peer(answers: usize, silent: bool) -> crate::wire::dbus::Conn {
    use std::io::{Read, Write};
    let (ours, mut theirs) = std::os::unix::net::UnixStream::pair().unwrap();
    std::thread::spawn(move || {
        let mut buf = Vec::new();
        let mut chunk = [0u8; 4096];
        let (mut serial, mut answered) = (500, 0);
        loop {
            while let Some((len, reply_to, _, _)) = crate::wire::dbus::fake::call_at(&buf) {
                buf.drain(..len);
                if silent {
                    continue;
                }
                if answered == answers {
                    return; // closes the socket
                }
                serial += 1;
                answered += 1;
                let _ = theirs.write_all(&crate::wire::dbus::fake::reply_u(serial, reply_to, 9));
            }
            match theirs.read(&mut chunk) {
                Ok(0) | Err(_) => return,
                Ok(n) => buf.extend_from_slice(&chunk[..n]),
            }
        }
    });
    crate::wire::dbus::Conn::over(ours, bus::MAX_MESSAGE)
}

#[test]
fn an_application_asked_directly_answers_on_its_own_socket_and_falls_back_to_the_bus() {
    use crate::wire::dbus::{DbusError, Val};
    let (mut bus, seen) = fake_bus(std::time::Duration::from_millis(300));
    bus.add_peer(":1.app", fake_peer(3, false));
    let req = |dest: &str| bus::Req::new(dest, "/", bus::ACCESSIBLE, "GetRoleName");
    // Both lanes at once, answered in order, each by its own side.
    let out = bus.batch(&[req(":1.app"), req(":1.good"), req(":1.app"), req(":1.app")]);
    assert_eq!(
        out,
        [
            Ok(vec![Val::UInt(9)]),
            Ok(vec![Val::UInt(7)]),
            Ok(vec![Val::UInt(9)]),
            Ok(vec![Val::UInt(9)])
        ]
    );
    assert_eq!((bus.sent, bus.sent_direct), (4, 3));
    // The application's socket closes: its call ends with the error, the bus's is
    // answered, and the application is asked over the bus from then on.
    let out = bus.batch(&[req(":1.app"), req(":1.good")]);
    assert!(matches!(out[0], Err(DbusError::Io(_))), "{:?}", out[0]);
    assert_eq!(out[1], Ok(vec![Val::UInt(7)]));
    assert_eq!(bus.direct_count(), 0);
    let _ = bus.batch(&[req(":1.app")]);
    assert_eq!(bus.sent_direct, 4, "not sent directly again");
    drop(bus);
    let mut dests = Vec::new();
    while let Ok(d) = seen.recv_timeout(std::time::Duration::from_secs(10)) {
        dests.push(d);
    }
    assert_eq!(
        dests,
        [":1.good", ":1.good", ":1.app"],
        "what the bus was asked"
    );
}

#[test]
fn an_application_silent_on_its_own_socket_is_marked_hung_and_the_bus_still_answers() {
    use crate::wire::dbus::{DbusError, Val};
    use std::time::{Duration, Instant};
    let (mut bus, _seen) = fake_bus(Duration::from_millis(200));
    bus.add_peer(":1.app", fake_peer(0, true));
    let req = |dest: &str| bus::Req::new(dest, "/", bus::ACCESSIBLE, "GetRoleName");
    let started = Instant::now();
    let out = bus.batch(&[req(":1.app"), req(":1.good")]);
    assert_eq!(out[0], Err(DbusError::Timeout));
    assert_eq!(out[1], Ok(vec![Val::UInt(7)]));
    assert!(bus.hung.contains(":1.app"));
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "{:?}",
        started.elapsed()
    );
    // Asked nothing more, on either lane.
    let sent = bus.sent;
    assert_eq!(bus.batch(&[req(":1.app")]), [Err(DbusError::Timeout)]);
    assert_eq!(bus.sent, sent);
}

#[test]
fn at_most_max_direct_applications_are_talked_to_directly() {
    let (mut bus, _seen) = fake_bus(std::time::Duration::from_millis(200));
    for n in 0..bus::MAX_DIRECT - 1 {
        bus.add_peer(&format!(":1.peer{n}"), fake_peer(0, true));
    }
    let app = [(":1.good".to_string(), "/".to_string(), Some(1))];
    // Below the bound: the application is asked for its own socket (the fake bus answers
    // a number, not an address, so it stays on the bus).
    bus.go_direct(&app);
    assert_eq!(bus.sent, 1);
    // At the bound: nothing more is asked.
    bus.add_peer(":1.last", fake_peer(0, true));
    assert_eq!(bus.direct_count(), bus::MAX_DIRECT);
    bus.go_direct(&app);
    assert_eq!(bus.sent, 1, "a 33rd application was asked for its socket");
    bus.end_direct();
    assert_eq!(bus.direct_count(), 0);
}
