use super::*;
use crate::base::testutil::TempDir;

#[test]
fn limits_may_ask_for_less_never_more() {
    let ceiling = Limits {
        memory_max: 1 << 30,
        pids_max: 1024,
        cpu_weight: 50,
    };
    let less =
        Limits::from_request(&json!({"memory_max": 64 << 20, "pids_max": 256}), ceiling).unwrap();
    assert_eq!(less.memory_max, 64 << 20);
    assert_eq!(less.pids_max, 256);
    assert_eq!(less.cpu_weight, 50);
    // Exactly the ceiling is allowed; one more is not.
    assert!(Limits::from_request(&json!({"pids_max": 1024}), ceiling).is_ok());
    let err = Limits::from_request(&json!({"pids_max": 1025}), ceiling).unwrap_err();
    assert!(err.contains("--grant-pids-max"), "{err}");
    let err = Limits::from_request(&json!({"memory_max": (1u64 << 30) + 1}), ceiling).unwrap_err();
    assert!(err.contains("memory_max"), "{err}");
    assert!(Limits::from_request(&json!({"cpu_weight": 0}), ceiling).is_err());
    assert!(Limits::from_request(&json!({"swap": 1}), ceiling).is_err());
    assert!(Limits::from_request(&json!({"pids_max": "5"}), ceiling).is_err());
    assert!(Limits::from_request(&json!([1]), ceiling).is_err());
}

#[test]
fn bytes_read_as_people_write_them() {
    assert_eq!(human_bytes(1 << 30), "1 GiB");
    assert_eq!(human_bytes(64 << 20), "64 MiB");
    assert_eq!(
        oom_message(1 << 30),
        "killed: out of memory (this grant's limit is 1 GiB)"
    );
}

/// A fake cgroupfs: directories and plain files stand for the kernel's.
fn fake(dir: &TempDir, controllers: &str) -> Settings {
    let root = dir.path("cg");
    let own = root.join("user.slice/handnode.service");
    fs::create_dir_all(&own).unwrap();
    fs::write(own.join("cgroup.controllers"), controllers).unwrap();
    Settings {
        mounts: Some(format!(
            "cgroup2 {} cgroup2 rw,relatime 0 0\n",
            root.display()
        )),
        self_cgroup: Some("0::/user.slice/handnode.service\n".into()),
        instance: "abc".into(),
        force_subreaper: false,
        ceiling: Limits {
            memory_max: 64 << 20,
            pids_max: 256,
            cpu_weight: 50,
        },
    }
}

/// A confinement over a hierarchy `fake` made, built as `Confine::new` builds one.
fn on_fake(settings: &Settings) -> Confine {
    Confine {
        layout: Some(Layout::detect(settings, false).unwrap()),
        ceiling: settings.ceiling,
        why_not: None,
        grants: Mutex::new(HashMap::new()),
        limits: Mutex::new(HashMap::new()),
        next_run: AtomicU64::new(1),
        issued: Mutex::new(Default::default()),
        counted: false,
    }
}

#[test]
fn pure_v2_delegated_moves_into_a_leaf_enables_controllers_and_sets_limits() {
    let dir = TempDir::new("cgroup-fake-v2");
    let settings = fake(&dir, "cpu memory pids");
    let own = dir.path("cg/user.slice/handnode.service");
    let layout = Layout::detect(&settings, false).unwrap();
    assert_eq!(layout.mode, Mode::V2);
    // Delegation: the daemon left the unit's group for a leaf of its own.
    let moved = fs::read_to_string(own.join(DAEMON_LEAF).join("cgroup.procs")).unwrap();
    assert_eq!(moved, std::process::id().to_string());
    assert_eq!(
        fs::read_to_string(own.join("cgroup.subtree_control")).unwrap(),
        "+cpu"
    );
    assert_eq!(layout.v2_controllers, ["memory", "pids", "cpu"]);
    let grant = GrantGroup::create(&layout, "g1", Some(settings.ceiling)).unwrap();
    let gdir = own.join("handnode.abc/grants/g1");
    assert_eq!(
        fs::read_to_string(gdir.join("memory.max")).unwrap(),
        (64u64 << 20).to_string()
    );
    assert_eq!(fs::read_to_string(gdir.join("pids.max")).unwrap(), "256");
    assert_eq!(fs::read_to_string(gdir.join("cpu.weight")).unwrap(), "50");
    assert_eq!(
        fs::read_to_string(gdir.join("memory.swap.max")).unwrap(),
        "0"
    );
    // OOM kills come from memory.events.
    fs::write(
        gdir.join("memory.events"),
        "low 0\nhigh 0\nmax 3\noom 1\noom_kill 2\n",
    )
    .unwrap();
    assert_eq!(grant.oom_kills(), 2);
    // The owner's group is killed like a grant's, never limited.
    GrantGroup::create(&layout, "owner", None).unwrap();
    let odir = own.join("handnode.abc/grants/owner");
    assert!(odir.is_dir() && !odir.join("memory.max").exists() && !odir.join("pids.max").exists());
    // A second detection (same process) finds the unit's group above the leaf.
    let mut again = settings.clone();
    again.self_cgroup = Some(format!("0::/user.slice/handnode.service/{DAEMON_LEAF}\n"));
    assert_eq!(Layout::detect(&again, false).unwrap().base, layout.base);
}

#[test]
fn a_run_enters_every_group_before_exec() {
    let dir = TempDir::new("cgroup-fake-enter");
    let settings = fake(&dir, "cpu memory pids");
    let confine = on_fake(&settings);
    let run = confine.run("g1", true, "m").unwrap();
    // The kernel makes cgroup.procs with the group; a fake group needs it made.
    let procs = run.dir.as_ref().unwrap().join("cgroup.procs");
    fs::write(&procs, "").unwrap();
    let mut cmd = run.command(Path::new("echo"));
    let out = run
        .spawn(cmd.arg("hi").stdout(std::process::Stdio::piped()))
        .unwrap()
        .wait_with_output()
        .unwrap();
    assert_eq!(String::from_utf8_lossy(&out.stdout), "hi\n");
    // Written by the child itself ("0": the writer), before echo ran.
    assert_eq!(fs::read_to_string(&procs).unwrap(), "0");
    // Out of memory: the run's own memory.events says so (v2), with the grant's limit.
    assert_eq!(run.oom_limit(), None);
    fs::write(
        run.dir.as_ref().unwrap().join("memory.events"),
        "oom 1\noom_kill 1\n",
    )
    .unwrap();
    assert_eq!(run.oom_limit(), Some(64 << 20));
    // A group that cannot be written: the spawn fails, naming it; echo never runs.
    // (A new run: this one keeps its file open, and a fake group's file, unlike a
    // removed cgroup's, still takes writes.)
    let other = confine.run("g1", true, "m2").unwrap();
    let procs = other.dir.as_ref().unwrap().join("cgroup.procs");
    let err = other
        .spawn(&mut other.command(Path::new("echo")))
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("cannot put the process in its cgroup")
            && err.contains(&procs.display().to_string()),
        "{err}"
    );
}

#[test]
fn an_empty_ended_run_group_serves_the_next_run_and_a_busy_or_oom_killed_one_does_not() {
    let dir = TempDir::new("cgroup-fake-spare");
    let settings = fake(&dir, "cpu memory pids");
    let confine = on_fake(&settings);
    let events = |d: &Path, populated: u8| {
        fs::write(d.join("cgroup.events"), format!("populated {populated}\n")).unwrap()
    };
    // Empty at its end: the next run gets the same group, and nothing was kept.
    let run = confine.run("g1", true, "m1").unwrap();
    let first = run.dir.clone().unwrap();
    events(&first, 0);
    // Its cgroup.procs is opened once: gone from its path, the open file still serves.
    fs::write(first.join("cgroup.procs"), "").unwrap();
    drop(run.command(Path::new("true")));
    fs::remove_file(first.join("cgroup.procs")).unwrap();
    let mut cmd = run.command(Path::new("true"));
    assert!(run.spawn(&mut cmd).unwrap().wait().unwrap().success());
    assert_eq!(run.keep(), 0);
    drop(run);
    let run = confine.run("g1", true, "m2").unwrap();
    assert_eq!(run.dir.as_deref(), Some(first.as_path()));
    // ... and goes with the spare to the next run.
    assert!(run.own_procs.get().is_some_and(enter::Slot::is_open));
    // OOM-killed in: its own count would mislead the next run, so it is not reused.
    fs::write(first.join("memory.events"), "oom_kill 1\n").unwrap();
    drop(run);
    let run = confine.run("g1", true, "m3").unwrap();
    let second = run.dir.clone().unwrap();
    assert_ne!(second, first);
    // Still holding a process at its end: not reused either.
    events(&second, 1);
    drop(run);
    let run = confine.run("g1", true, "m4").unwrap();
    assert!(run
        .dir
        .as_ref()
        .is_some_and(|d| d != &second && d != &first));
    drop(run);
    // At most SPARE_RUNS spares per grant.
    let runs: Vec<_> = (0..SPARE_RUNS + 2)
        .map(|i| confine.run("g1", true, &format!("n{i}")).unwrap())
        .collect();
    for run in &runs {
        events(run.dir.as_ref().unwrap(), 0);
    }
    drop(runs);
    let grant = lock(&confine.grants).get("g1").cloned().unwrap();
    assert_eq!(lock(&grant.spare).len(), SPARE_RUNS);
    // A spare that holds a process when it is taken is skipped.
    let (_, busy, _) = lock(&grant.spare).last().cloned().unwrap();
    events(&busy, 1);
    let run = confine.run("g1", true, "p").unwrap();
    assert!(run.dir.as_ref().is_some_and(|d| d != &busy));
    assert_eq!(lock(&grant.spare).len(), SPARE_RUNS - 2);
}

#[test]
fn no_cgroup2_or_an_undelegated_group_means_the_subreaper() {
    let dir = TempDir::new("cgroup-fake-none");
    let mut settings = fake(&dir, "");
    settings.mounts = Some("cgroup /x cgroup rw,memory 0 0\n".into());
    assert!(Layout::detect(&settings, false)
        .unwrap_err()
        .contains("cgroup v1 only"));
    let settings = fake(&dir, "memory pids");
    let own = dir.path("cg/user.slice/handnode.service");
    // Not writable: a read-only group stands for one not delegated.
    let mut perm = fs::metadata(&own).unwrap().permissions();
    std::os::unix::fs::PermissionsExt::set_mode(&mut perm, 0o555);
    fs::set_permissions(&own, perm).unwrap();
    let r = Layout::detect(&settings, false);
    let mut perm = fs::metadata(&own).unwrap().permissions();
    std::os::unix::fs::PermissionsExt::set_mode(&mut perm, 0o755);
    fs::set_permissions(&own, perm).unwrap();
    if rustix::process::geteuid().is_root() {
        // Root ignores the mode; nothing to prove here.
        eprintln!(
            "skip: running as root, a read-only directory does not stand for an undelegated group"
        );
        return;
    }
    assert!(r.unwrap_err().contains("Delegate=yes"));
}

#[test]
fn hybrid_limits_go_to_v1_groups() {
    let dir = TempDir::new("cgroup-fake-hybrid");
    let root = dir.path("cg");
    for c in ["unified", "memory", "pids", "cpu"] {
        fs::create_dir_all(root.join(c)).unwrap();
    }
    fs::write(root.join("unified/cgroup.controllers"), "").unwrap();
    let settings = Settings {
        mounts: Some(format!(
            "cgroup {r}/memory cgroup rw,memory 0 0\ncgroup {r}/pids cgroup rw,pids 0 0\ncgroup {r}/cpu cgroup rw,cpu 0 0\ncgroup2 {r}/unified cgroup2 rw 0 0\n",
            r = root.display()
        )),
        self_cgroup: Some("4:memory:/ci/x\n1:cpu:/\n8:pids:/\n0::/\n".into()),
        instance: "i".into(),
        force_subreaper: false,
        ceiling: Limits {
            memory_max: 64 << 20,
            pids_max: 256,
            cpu_weight: 50,
        },
    };
    let layout = Layout::detect(&settings, false).unwrap();
    assert_eq!(layout.mode, Mode::Hybrid);
    assert_eq!(layout.base, root.join("unified/handnode.i"));
    GrantGroup::create(&layout, "g", Some(settings.ceiling)).unwrap();
    let read = |p: &str| fs::read_to_string(root.join(p)).unwrap();
    assert_eq!(
        read("memory/ci/x/handnode.i/grants/g/memory.limit_in_bytes"),
        (64u64 << 20).to_string()
    );
    assert_eq!(read("pids/handnode.i/grants/g/pids.max"), "256");
    assert_eq!(read("cpu/handnode.i/grants/g/cpu.shares"), "512");
    // The daemon did not move (root's cgroup2 group may hold processes).
    assert!(!root.join("unified").join(DAEMON_LEAF).exists());
}

/// `spawn` returns while the child's `execve` may still be laying out its environment;
/// read then, it had none in ~40 % of tries here, so a sweep right after a spawn (a
/// halt, a stop) missed the marker of what had just started. 200 spawns, each looked at
/// at once: every one shows its marker.
#[test]
fn a_marker_is_seen_on_a_process_that_has_only_just_been_spawned() {
    let marker = format!("fresh-{}", std::process::id());
    for round in 0..200 {
        let mut child = Command::new("sleep")
            .arg("30")
            .env(MARKER_ENV, &marker)
            .spawn()
            .expect("sleep");
        let pid = child.id() as i32;
        let seen = subreaper::carries(pid, &[&marker]);
        let _ = child.kill();
        let _ = child.wait();
        assert!(
            seen,
            "round {round}: a just-spawned process showed no marker"
        );
    }
    // A process without one is still told apart. One running has its environment laid
    // out; a zombie and a kernel thread never will have one (and are not waited on).
    let mut plain = Command::new("sleep").arg("30").spawn().expect("sleep");
    assert!(!subreaper::carries(plain.id() as i32, &[&marker]));
    assert_eq!(
        subreaper::no_environ(plain.id() as i32),
        subreaper::NoEnviron::LaidOut
    );
    assert_eq!(
        subreaper::no_environ(std::process::id() as i32),
        subreaper::NoEnviron::LaidOut
    );
    let _ = plain.kill();
    let zombie = Pid::from_raw(plain.id() as i32).unwrap();
    rustix::process::waitid(
        rustix::process::WaitId::Pid(zombie),
        rustix::process::WaitIdOptions::EXITED | rustix::process::WaitIdOptions::NOWAIT,
    )
    .expect("waitid");
    let zombie = zombie.as_raw_nonzero().get();
    assert_eq!(subreaper::no_environ(zombie), subreaper::NoEnviron::Never);
    assert!(subreaper::Settle::now()
        .environ(zombie)
        .is_none_or(|e| e.is_empty()));
    let _ = plain.wait();
    // One run with no environment at all (`env -i`): laid out, empty, read as such.
    let mut bare = Command::new("/bin/sleep")
        .arg("30")
        .env_clear()
        .spawn()
        .expect("sleep");
    let bare_pid = bare.id() as i32;
    assert!(!subreaper::carries(bare_pid, &[&marker]));
    assert_eq!(subreaper::Settle::now().environ(bare_pid), Some(Vec::new()));
    assert_eq!(
        subreaper::no_environ(bare_pid),
        subreaper::NoEnviron::LaidOut
    );
    let _ = bare.kill();
    let _ = bare.wait();
    // kthreadd, where this test sees the box's pids (not inside a pid namespace, as CI is).
    if fs::read_to_string("/proc/2/stat").is_ok_and(|s| s.starts_with("2 (kthreadd)")) {
        assert_eq!(subreaper::no_environ(2), subreaper::NoEnviron::Never);
    }
}
