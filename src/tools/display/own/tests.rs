use super::*;

fn scratch(tag: &str) -> PathBuf {
    static N: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let n = N.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let dir = std::env::temp_dir().join(format!("hn-{tag}-{}-{n}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

#[test]
fn own_display_size_bounds() {
    assert_eq!(parse_size("1280x800"), Ok((1280, 800)));
    assert_eq!(parse_size("64X64"), Ok((64, 64)));
    assert_eq!(parse_size("8192x8192"), Ok((8192, 8192)));
    for bad in [
        "63x800",
        "8193x800",
        "800x63",
        "800x8193",
        "1280",
        "x800",
        "1280x",
        "-1x800",
        "1280x800x24",
        "12 80x800",
        "",
    ] {
        let err = parse_size(bad).unwrap_err();
        assert!(err.contains("--own-display-size"), "{bad}: {err}");
    }
}

#[test]
fn a_late_call_of_an_ended_grant_starts_nothing() {
    let own = OwnDisplays::new(OwnOptions::default(), Default::default());
    let before = own.entry("g-late");
    own.end_grant("g-late");
    let after = own.entry("g-late");
    let confine = crate::cgroup::Confine::inert();
    for d in [before, after] {
        let err = d.ensure(&ToolConfig::default(), &confine).unwrap_err();
        assert!(err.contains("has ended"), "{err}");
    }
    assert!(own.get("g-late").is_none(), "an ended grant is not kept");
    assert_eq!(own.running(), 0);
}

#[test]
fn when_pasta_fails_nothing_starts_and_its_shell_is_refused_saying_why() {
    let path = std::env::var_os("PATH");
    let kind = crate::walls::Kind::Grant;
    let Ok(bwrap) = crate::walls::probe_bwrap(path.as_deref(), kind) else {
        eprintln!("skip: bwrap does not work here");
        return;
    };
    let mut wall = crate::walls::Bwrap::new(bwrap, Vec::new(), Vec::new());
    wall.pasta = Some(PathBuf::from("/bin/false"));
    let parent = scratch("own-nonet");
    let own = OwnDisplays::new(
        OwnOptions {
            dir: Some(parent.clone()),
            ..OwnOptions::default()
        },
        crate::walls::OwnDisplayWall {
            wall: Some(wall),
            network: Network::Pasta,
            refusal: None,
        },
    );
    let d = own.entry("g-nonet");
    let confine = crate::cgroup::Confine::inert();
    let err = d.ensure(&ToolConfig::default(), &confine).unwrap_err();
    assert!(
        err.contains("could not start")
            && err.contains("pasta could not give this grant's wall its network")
            && err.contains("/bin/false"),
        "{err}"
    );
    assert_eq!(own.running(), 0, "no X server was started");
    let refused = own.shell_wall(&d).unwrap_err();
    assert!(
        refused.contains("its own display's network, which is not up")
            && refused.contains("/bin/false"),
        "{refused}"
    );
    // Its private directory went with the failure.
    let left: Vec<_> = std::fs::read_dir(&parent).unwrap().flatten().collect();
    assert!(left.is_empty(), "{left:?}");
    let _ = std::fs::remove_dir_all(parent);
}

#[test]
fn a_socket_someone_listens_on_is_never_removed() {
    let dir = scratch("own-bound");
    std::fs::create_dir_all(dir.join(".X11-unix")).unwrap();
    let path = dir.join(".X11-unix/X77");
    let listener = std::os::unix::net::UnixListener::bind(&path).unwrap();
    assert!(unix_socket_bound(&path));
    remove_x_files(&dir, 77, None, &dir);
    assert!(path.exists(), "a bound socket was removed");
    drop(listener);
    // What a killed server leaves: the file, bound by nobody.
    let stale = dir.join(".X11-unix/X78");
    std::fs::write(&stale, "").unwrap();
    remove_x_files(&dir, 78, None, &dir);
    assert!(!stale.exists(), "a stale socket is left");
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn stopping_asks_with_term_first_and_kills_what_ignores_it() {
    use std::os::unix::process::ExitStatusExt;
    let mut polite = std::process::Command::new("sleep")
        .arg("60")
        .spawn()
        .unwrap();
    stop_child(&mut polite, Duration::from_secs(10));
    assert_eq!(
        polite.wait().unwrap().signal(),
        Some(15),
        "ended by SIGTERM"
    );
    let mut stubborn = std::process::Command::new("sh")
        .args(["-c", "trap '' TERM; echo ready; exec sleep 60"])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    // The trap is set once it has printed.
    first_line(stubborn.stdout.take().unwrap(), Duration::from_secs(10)).unwrap();
    let started = Instant::now();
    stop_child(&mut stubborn, Duration::from_millis(100));
    assert_eq!(
        stubborn.wait().unwrap().signal(),
        Some(9),
        "ended by SIGKILL"
    );
    assert!(started.elapsed() >= Duration::from_millis(100));
}

#[test]
fn runtime_dir_names_are_short_and_plain() {
    assert_eq!(
        dir_name("84bb92fd-13ed-4bd2-b32d-09c603fb1dac"),
        "84bb92fd13ed"
    );
    assert_eq!(dir_name("../../etc"), "etc");
}

#[test]
fn the_cookie_file_is_one_wildcard_mit_cookie_and_private() {
    use std::os::unix::fs::PermissionsExt;
    let dir = scratch("own-cookie");
    let path = dir.join("xauth");
    write_cookie(&path).unwrap();
    let bytes = std::fs::read(&path).unwrap();
    assert_eq!(&bytes[..2], &[0xff, 0xff], "FamilyWild");
    assert_eq!(bytes.len(), 2 + 2 + 2 + 2 + 18 + 2 + 16);
    assert_eq!(&bytes[8..26], b"MIT-MAGIC-COOKIE-1");
    let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o600);
    // Never overwritten in place.
    assert!(write_cookie(&path).is_err());
    let _ = std::fs::remove_dir_all(dir);
}

/// After a crash, a walled display's record names its programs by the pids the box
/// sees (each its wall's pid 1, not the `bwrap` the daemon started): killed by it, the
/// whole PID namespace goes, what the program started too; its link goes with it.
#[test]
fn a_dead_daemons_walled_display_is_killed_by_its_record_namespace_and_all() {
    let path = std::env::var_os("PATH");
    let Ok(bwrap) = crate::walls::probe_bwrap(path.as_deref(), crate::walls::Kind::Grant) else {
        eprintln!("skip: bwrap does not work here");
        return;
    };
    let wall = crate::walls::Bwrap::new(bwrap, Vec::new(), Vec::new());
    let parent = scratch("own-stale-walled");
    let xtmp = scratch("own-stale-walled-xtmp");
    let dir = parent.join("g1");
    let sockets = dir.join(X_SOCKETS);
    std::fs::create_dir_all(&sockets).unwrap();
    let marker = "own-display-stale-walled-test";
    let mut cmd = wall
        .display_args(Path::new("/bin/sh"), &parent, &dir, &sockets, &xtmp, true)
        .command(None);
    cmd.args(["-c", "sleep 60 & echo started; exec sleep 60"])
        .env(MARKER_ENV, marker)
        .stdout(Stdio::piped());
    let mut inside =
        crate::walls::spawn_inside(cmd, &|c| c.spawn(), Duration::from_secs(10)).unwrap();
    first_line(inside.bwrap.stdout.take().unwrap(), Duration::from_secs(10))
        .expect("the walled program started its child");
    // Its child, by the pid the box sees.
    let children =
        std::fs::read_to_string(format!("/proc/{0}/task/{0}/children", inside.pid)).unwrap();
    let child: u32 = children.split_whitespace().next().unwrap().parse().unwrap();
    let child_fd = rustix::process::pidfd_open(
        rustix::process::Pid::from_raw(child as i32).unwrap(),
        rustix::process::PidfdFlags::empty(),
    )
    .unwrap();
    assert_ne!(inside.pid, inside.bwrap.id(), "the program, not bwrap");
    let mut gone = std::process::Command::new("true").spawn().unwrap();
    let dead_daemon = gone.id();
    gone.wait().unwrap();
    let number = 4545;
    let link = xtmp.join(".X11-unix").join(format!("X{number}"));
    std::fs::create_dir_all(link.parent().unwrap()).unwrap();
    std::os::unix::fs::symlink(sockets.join(format!("X{number}")), &link).unwrap();
    let r = Record {
        daemon_pid: dead_daemon,
        display: number,
        pids: vec![inside.pid],
        marker: marker.into(),
        net_pids: Vec::new(),
        net_marker: String::new(),
    };
    r.write(&dir).unwrap();
    let own = displays_in(&parent, &xtmp);
    assert_eq!(own.clean_stale(), 1);
    // bwrap exits once its program is gone: a bounded wait on it.
    assert!(
        crate::walls::wait_at_most(&mut inside.bwrap, Duration::from_secs(10)).is_some(),
        "the walled program outlived its record's cleanup"
    );
    // Its child was its namespace's: gone with it (its pidfd turns readable at its end).
    let mut fds = [rustix::event::PollFd::new(
        &child_fd,
        rustix::event::PollFlags::IN,
    )];
    let ten = rustix::event::Timespec {
        tv_sec: 10,
        tv_nsec: 0,
    };
    assert_eq!(
        rustix::event::poll(&mut fds, Some(&ten)),
        Ok(1),
        "what it started outlived its namespace"
    );
    assert!(!pid_runs(child));
    assert!(link.symlink_metadata().is_err(), "its link is left");
    assert!(!dir.exists());
    let _ = std::fs::remove_dir_all(parent);
    let _ = std::fs::remove_dir_all(xtmp);
}

/// Own displays under `parent`, with `xtmp` as the box's `/tmp` (X sockets and locks).
fn displays_in(parent: &Path, xtmp: &Path) -> OwnDisplays {
    OwnDisplays::new(
        OwnOptions {
            dir: Some(parent.to_path_buf()),
            x_tmp: xtmp.to_path_buf(),
            ..OwnOptions::default()
        },
        Default::default(),
    )
}

/// After a crash: what a dead daemon's record names is killed (only if it still
/// carries the marker) and its directory removed; a live daemon's is left alone.
#[test]
fn stale_displays_of_a_dead_daemon_are_cleaned_and_a_live_ones_kept() {
    let parent = scratch("own-stale");
    let xtmp = scratch("own-stale-xtmp");
    let own = displays_in(&parent, &xtmp);
    std::fs::create_dir_all(xtmp.join(".X11-unix")).unwrap();
    let marker = "own-display-stale-test";
    let mut left = std::process::Command::new("sleep")
        .arg("60")
        .env(MARKER_ENV, marker)
        .spawn()
        .unwrap();
    // What its network left: the holder and pasta carry a marker of their own.
    let net_marker = "own-net-stale-test";
    let mut left_net = std::process::Command::new("sleep")
        .arg("60")
        .env(MARKER_ENV, net_marker)
        .spawn()
        .unwrap();
    let mut stranger = std::process::Command::new("sleep")
        .arg("60")
        .spawn()
        .unwrap();
    // A daemon pid that is surely dead: a child that has been reaped.
    let mut gone = std::process::Command::new("true").spawn().unwrap();
    let dead_pid = gone.id();
    gone.wait().unwrap();
    let write = |name: &str, daemon_pid: u32, pids: Vec<u32>, display: u32| {
        let dir = parent.join(name);
        std::fs::create_dir_all(&dir).unwrap();
        let r = Record {
            daemon_pid,
            display,
            pids,
            marker: marker.into(),
            net_pids: vec![left_net.id()],
            net_marker: net_marker.into(),
        };
        std::fs::write(dir.join(RECORD), serde_json::to_vec(&r).unwrap()).unwrap();
        dir
    };
    let stale = write("stale", dead_pid, vec![left.id(), stranger.id()], 4242);
    std::fs::write(xtmp.join(".X4242-lock"), format!("{:>10}\n", left.id())).unwrap();
    std::fs::write(xtmp.join(".X11-unix/X4242"), "").unwrap();
    // The parent of this test process stands for a daemon still running.
    let live_daemon = rustix::process::getppid().map_or(1, |p| p.as_raw_nonzero().get() as u32);
    let kept = write("kept", live_daemon, vec![stranger.id()], 4343);

    assert_eq!(own.clean_stale(), 1);
    assert!(!xtmp.join(".X4242-lock").exists());
    assert!(!xtmp.join(".X11-unix/X4242").exists());
    let status = left.wait().unwrap();
    assert!(
        !status.success(),
        "the marked process was killed: {status:?}"
    );
    let status = left_net.wait().unwrap();
    assert!(
        !status.success(),
        "its network's marked process was killed: {status:?}"
    );
    assert!(!stale.exists());
    assert!(kept.exists(), "a live daemon's display is left alone");
    assert!(
        matches!(stranger.try_wait(), Ok(None)),
        "a process without the marker is never signalled"
    );
    let _ = stranger.kill();
    let _ = stranger.wait();
    let stray = parent.join("not-ours");
    std::fs::create_dir_all(&stray).unwrap();
    assert_eq!(own.clean_stale(), 0);
    assert!(
        stray.exists(),
        "a directory without a record is not touched"
    );
    let _ = std::fs::remove_dir_all(parent);
    let _ = std::fs::remove_dir_all(xtmp);
}
