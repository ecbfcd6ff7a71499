//! The process hardening `main` applies (no core file, not dumpable), checked in a process of
//! its own (this test binary) and on the real binary from outside.

mod common;
#[path = "common/realbin.rs"]
mod realbin;

#[test]
fn apply_makes_this_process_undumpable_with_no_core_limit() {
    assert!(
        !handnode::base::hardening::in_effect(),
        "a fresh test process is dumpable"
    );
    handnode::base::hardening::apply().expect("hardening applies");
    assert!(handnode::base::hardening::in_effect());
    assert_eq!(
        rustix::process::dumpable_behavior().unwrap(),
        rustix::process::DumpableBehavior::NotDumpable
    );
    let core = rustix::process::getrlimit(rustix::process::Resource::Core);
    assert_eq!((core.current, core.maximum), (Some(0), Some(0)));
    // Raising the hard limit back needs CAP_SYS_RESOURCE, which root has.
    if !rustix::process::geteuid().is_root() {
        let raised = rustix::process::setrlimit(
            rustix::process::Resource::Core,
            rustix::process::Rlimit {
                current: Some(1 << 20),
                maximum: Some(1 << 20),
            },
        );
        assert!(raised.is_err(), "the hard core limit was raised again");
    }
}

#[test]
fn the_real_daemon_has_no_core_limit() {
    let dir = common::temp_dir("hardening-real");
    let d = realbin::RealDaemon::start(&dir.join("state"), &[]);
    let limits = std::fs::read_to_string(format!("/proc/{}/limits", d.pid)).unwrap();
    let core = limits
        .lines()
        .find(|l| l.starts_with("Max core file size"))
        .expect("a core limit line");
    let fields: Vec<&str> = core.split_whitespace().collect();
    assert_eq!(&fields[4..6], ["0", "0"], "{core}");
    // Not dumpable: another process of the same user cannot read its environment (where
    // HANDNODE_TOKEN is). Root may read anyone's, so this holds only for an ordinary user.
    let environ = std::fs::read(format!("/proc/{}/environ", d.pid));
    if rustix::process::geteuid().is_root() {
        eprintln!("running as root: /proc/<pid>/environ is readable to root whatever the flag");
    } else {
        assert!(environ.is_err(), "the daemon's environment is readable");
    }
}
