//! Unit tests of `ops::doctor`.

use super::*;

fn env(pairs: &[(&str, &str)]) -> HashMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

#[test]
fn the_daemons_lock_and_listeners_are_read_from_proc() {
    let locks = "1: POSIX  ADVISORY  WRITE 99 08:01:5 0 EOF\n\
                     2: FLOCK  ADVISORY  WRITE 4321 fd:01:123456 0 EOF\n";
    let dev = rustix::fs::makedev(0xfd, 1);
    assert_eq!(lock_holder(locks, dev, 123456), Some(4321));
    assert_eq!(lock_holder(locks, dev, 123457), None);
    assert_eq!(
        lock_holder(locks, rustix::fs::makedev(8, 1), 5),
        None,
        "POSIX is not ours"
    );
    let tcp = "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode\n\
   0: 0100007F:2260 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 777 1 0\n\
   1: 0100007F:2261 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 778 1 0\n\
   2: 0100007F:2262 0100007F:9999 01 00000000:00000000 00:00000000 00000000     0        0 777 1 0\n";
    let ours: std::collections::HashSet<String> = ["777".to_string()].into();
    assert_eq!(tcp_listeners(tcp, &ours), ["127.0.0.1:8800"]);
    let tcp6 = "  sl  local_address                         remote_address                        st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode\n\
   0: 00000000000000000000000001000000:2263 00000000000000000000000000000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 777 1 0\n";
    assert_eq!(tcp_listeners(tcp6, &ours), ["[::1]:8803"]);
}

#[test]
fn the_upstreams_blocked_origins_are_compared_in_either_spelling() {
    let wanted = crate::base::browser_argv::admin_origins("127.0.0.1:8795".parse().unwrap(), &[]);
    let all: Vec<String> = wanted.iter().map(|w| format!("http://{w}/")).collect();
    assert!(missing_origins(&all, &wanted).is_empty());
    assert!(missing_origins(&wanted, &wanted).is_empty());
    let some = vec!["127.0.0.1:8795".to_string()];
    let missing = missing_origins(&some, &wanted);
    assert!(
        missing.contains(&"localhost:8795".to_string()),
        "{missing:?}"
    );
    assert!(!missing.contains(&"127.0.0.1:8795".to_string()));
}

#[test]
fn isolation_none_is_a_warning_with_the_fix() {
    let c = isolation_check(&env(&[("HANDNODE_BROWSER_ISOLATION", "none")]));
    assert_eq!(c.status, Status::Warn);
    let no_bwrap = isolation_check(&env(&[("PATH", "/nonexistent")]));
    assert_eq!(no_bwrap.status, Status::Warn, "{no_bwrap:?}");
    assert!(no_bwrap.fix.as_deref().unwrap().contains("bubblewrap"));
    let required = isolation_check(&env(&[
        ("PATH", "/nonexistent"),
        ("HANDNODE_BROWSER_ISOLATION", "bwrap"),
    ]));
    assert_eq!(required.status, Status::Fail);
    let shells = own_display_isolation_check(&env(&[
        ("PATH", "/nonexistent"),
        ("HANDNODE_OWN_DISPLAY_ISOLATION", "bwrap"),
    ]));
    assert_eq!(shells.status, Status::Fail);
    assert_eq!(shells.name, "own display isolation");
    let off = own_display_isolation_check(&env(&[("HANDNODE_OWN_DISPLAY_ISOLATION", "none")]));
    assert_eq!(off.status, Status::Warn);
    assert!(off
        .fix
        .as_deref()
        .unwrap()
        .contains("--own-display-isolation none"));
}

#[test]
fn the_summary_counts_in_the_right_number() {
    let one = [check("a", Status::Warn, "x", None)];
    assert!(
        render(&one).ends_with("0 not working, 1 warning\n"),
        "{}",
        render(&one)
    );
    let two = [
        check("a", Status::Warn, "x", None),
        check("b", Status::Warn, "y", None),
    ];
    assert!(render(&two).ends_with("0 not working, 2 warnings\n"));
}

#[test]
fn apps_names_every_refused_entry_and_why() {
    let dir = crate::base::testutil::TempDir::new("doctor-apps");
    let apps = dir.path("share/applications");
    std::fs::create_dir_all(&apps).unwrap();
    std::fs::write(
        apps.join("t.Sleep.desktop"),
        "[Desktop Entry]\nType=Application\nName=Sleep\nExec=sleep 30\n",
    )
    .unwrap();
    std::fs::write(
        apps.join("t.Term.desktop"),
        "[Desktop Entry]\nType=Application\nName=Term\nExec=sleep 30\nTerminal=true\n",
    )
    .unwrap();
    let env = env(&[
        ("XDG_DATA_HOME", dir.path("share").to_str().unwrap()),
        ("XDG_DATA_DIRS", "/nonexistent"),
        ("PATH", "/usr/bin:/bin"),
    ]);
    let ok = apps_check(&["t.Sleep".into()], &env);
    assert_eq!(ok.status, Status::Ok, "{ok:?}");
    assert!(
        ok.detail.contains("t.Sleep (/usr/bin/sleep)")
            || ok.detail.contains("t.Sleep (/bin/sleep)"),
        "{ok:?}"
    );
    let bad = apps_check(
        &["t.Sleep".into(), "t.Term".into(), "t.Missing".into()],
        &env,
    );
    assert_eq!(bad.status, Status::Fail, "{bad:?}");
    assert!(bad.detail.contains("t.Term"), "{bad:?}");
    assert!(bad.detail.contains("t.Missing"), "{bad:?}");
    assert!(bad.detail.contains("fine: t.Sleep"), "{bad:?}");
    assert!(bad.fix.is_some());
}

#[test]
fn own_display_says_what_to_install() {
    let ok = own_display_check(&json!({"possible": true, "missing": []}));
    assert_eq!(ok.status, Status::Ok);
    let no_wm = own_display_check(&json!({"possible": true,
            "missing": ["matchbox-window-manager (apt install matchbox-window-manager)"]}));
    assert_eq!(no_wm.status, Status::Warn);
    assert_eq!(
        no_wm.fix.as_deref(),
        Some("apt install matchbox-window-manager")
    );
    let none = own_display_check(&json!({"possible": false,
            "missing": ["Xvfb (apt install xvfb)", "dbus-daemon (apt install dbus)"]}));
    assert_eq!(none.status, Status::Warn);
    assert!(
        none.detail.contains("cannot have a display of their own"),
        "{}",
        none.detail
    );
    assert_eq!(none.fix.as_deref(), Some("apt install xvfb dbus"));
}

#[test]
fn live_view_says_what_to_install() {
    let on = live_view_check(&json!({"live_view": "/usr/bin/Xvnc"}), true);
    assert_eq!(on.status, Status::Ok);
    assert!(on.detail.contains("/usr/bin/Xvnc"), "{}", on.detail);
    let off = live_view_check(&json!({"live_view": null}), true);
    assert_eq!(off.status, Status::Warn);
    assert_eq!(
        off.fix.as_deref(),
        Some("apt install tigervnc-standalone-server")
    );
    let no_novnc = live_view_check(&json!({"live_view": "/usr/bin/Xvnc"}), false);
    assert_eq!(no_novnc.status, Status::Warn);
    assert!(
        no_novnc.detail.contains("polling screenshot"),
        "{}",
        no_novnc.detail
    );
    assert_eq!(no_novnc.fix.as_deref(), Some("apt install novnc"));
    let neither = live_view_check(&json!({"live_view": null}), false);
    assert_eq!(
        neither.fix.as_deref(),
        Some("apt install tigervnc-standalone-server novnc")
    );
}

#[test]
fn the_halt_key_line_says_what_it_reads_ignores_and_how_to_allow_it() {
    use crate::ops::halt_key::{Found, ListError, OpenError};
    let chord = Chord::example();
    let found =
        |node: &str, name: &str, verdict: Verdict, open: Option<Result<(), OpenError>>| Found {
            node: Some(node.into()),
            name: name.into(),
            verdict,
            open,
        };
    let uinput = found(
        "event7",
        "ydotoold virtual device",
        Verdict::Virtual("event7 is a software device".into()),
        None,
    );
    let denied = found(
        "event3",
        "AT Translated Set 2 keyboard",
        Verdict::Watch,
        Some(Err(OpenError::Denied {
            path: "/dev/input/event3".into(),
            owner: "root:input 0660".into(),
        })),
    );
    // On, and not readable: it fails, with the exact commands.
    let c = halt_key_report(
        Ok(vec![denied.clone(), uinput.clone()]),
        &chord,
        true,
        "ann",
        false,
    );
    assert_eq!(c.status, Status::Fail, "{c:?}");
    assert!(
        c.detail.contains("this user (ann) cannot read")
            && c.detail.contains("root:input 0660")
            && c.detail.contains("\"ydotoold virtual device\" (event7)"),
        "{}",
        c.detail
    );
    let fix = c.fix.unwrap();
    assert!(
        fix.starts_with("sudo usermod -aG input ann, then log in again"),
        "{fix}"
    );
    assert!(
        fix.contains("ENV{ID_INPUT_KEYBOARD}==\"1\"")
            && fix.contains("setfacl -m u:ann:r $devnode")
            && fix.contains("sudo udevadm trigger --subsystem-match=input"),
        "{fix}"
    );
    // Nodes of group root: no usermod, only the rule.
    let root_only = found(
        "event3",
        "kb",
        Verdict::Watch,
        Some(Err(OpenError::Denied {
            path: "/dev/input/event3".into(),
            owner: "root:root 0600".into(),
        })),
    );
    let c = halt_key_report(Ok(vec![root_only]), &chord, true, "ann", false);
    assert!(c.fix.unwrap().starts_with("echo 'SUBSYSTEM=="));
    // Off: the same facts, not a failure.
    let c = halt_key_report(Ok(vec![denied]), &chord, false, "ann", false);
    assert_eq!(c.status, Status::Ok);
    assert!(
        c.detail.starts_with("--halt-key is off; for ctrl+alt+end:"),
        "{}",
        c.detail
    );
    // Readable.
    let ok = found("event3", "kb", Verdict::Watch, Some(Ok(())));
    let c = halt_key_report(Ok(vec![ok.clone(), uinput]), &chord, true, "ann", false);
    assert_eq!(c.status, Status::Ok);
    assert!(
            c.detail.starts_with("--halt-key ctrl+alt+end: reads 1 physical keyboard(s): \"kb\" (event3); ignored as software devices"),
            "{}",
            c.detail
        );
    let c = halt_key_report(Ok(vec![ok]), &chord, true, "ann", true);
    assert_eq!(c.status, Status::Warn);
    assert!(c.detail.contains("--isolation none"), "{}", c.detail);
    // A box without input devices (this CI box: /proc/bus/input/devices is empty).
    for survey in [
        Err(ListError::NoInputSubsystem(
            "/proc/bus/input/devices".into(),
        )),
        Ok(Vec::new()),
    ] {
        let c = halt_key_report(survey, &chord, true, "ann", false);
        assert_eq!(c.status, Status::Warn);
        assert!(
            c.detail.contains("headless VM or container"),
            "{}",
            c.detail
        );
    }
    // Listed, but no node: a container.
    let gone = found(
        "event4",
        "kb",
        Verdict::Watch,
        Some(Err(OpenError::Missing("/dev/input/event4".into()))),
    );
    let c = halt_key_report(Ok(vec![gone]), &chord, true, "ann", false);
    assert!(
        c.detail
            .contains("a container without the box's /dev/input"),
        "{}",
        c.detail
    );
    // The real survey of a tree with no input subsystem.
    let tmp = crate::base::testutil::TempDir::new("doctor-halt-key");
    let c = halt_key_check(&tmp.0, Some(&chord), &env(&[("USER", "ann")]));
    assert!(
        c.detail.contains("proc/bus/input/devices does not exist"),
        "{}",
        c.detail
    );
}

#[test]
fn containment_says_which_and_how_to_get_cgroups() {
    let ok = containment_check(Ok(crate::cgroup::Mode::Hybrid), None);
    assert_eq!(ok.status, Status::Ok);
    assert!(ok.detail.starts_with("cgroup (hybrid)"), "{}", ok.detail);
    assert_eq!(ok.fix, None);
    // Where a move into a group can wait for the kernel, it says so and how to stop it.
    let slow = containment_check(Ok(crate::cgroup::Mode::V2), Some("/sys/fs/cgroup"));
    assert_eq!(slow.status, Status::Ok);
    assert!(
        slow.detail
            .contains("/sys/fs/cgroup is mounted without favordynmods"),
        "{}",
        slow.detail
    );
    assert!(slow
        .fix
        .unwrap()
        .starts_with("mount -o remount,favordynmods /sys/fs/cgroup "),);
    let no = containment_check(Err("no cgroup2 hierarchy is mounted".into()), None);
    assert!(!no.detail.contains("  "), "{}", no.detail);
    assert_eq!(no.status, Status::Warn);
    assert!(
        no.detail.starts_with("subreaper: no cgroup2"),
        "{}",
        no.detail
    );
    let fix = no.fix.unwrap();
    assert!(
        fix.contains("Delegate=yes") && fix.contains("cgroup v2"),
        "{fix}"
    );
}

#[test]
fn xset_blanking_is_reported_with_the_fix() {
    let q = "Screen Saver:\n  prefer blanking:  yes    allow exposures:  yes\n  timeout:  600    cycle:  600\nDPMS (Energy Star):\n  Standby: 600    Suspend: 600    Off: 600\n  DPMS is Enabled\n  Monitor is On\n";
    let c = xset_blanking(q);
    assert_eq!(c.len(), 2);
    assert!(c[0].detail.contains("after 600 s"));
    assert!(c[0].fix.as_deref().unwrap().contains("xset s off"));
    assert!(c[1].fix.as_deref().unwrap().contains("xset -dpms"));
    let off = "  timeout:  0    cycle:  600\n  DPMS is Disabled\n";
    assert!(xset_blanking(off).is_empty());
}

#[test]
fn lockers_and_idlers_are_named() {
    let running = ["bash", "swayidle", "swaylock", "swayidle"].map(String::from);
    let c = screen_guards(&running);
    assert_eq!(c.len(), 2, "{c:?}");
    assert!(c
        .iter()
        .any(|c| c.detail.starts_with("swayidle is running")));
    assert!(c.iter().any(|c| c
        .detail
        .starts_with("swaylock is running: the screen is locked")));
    assert!(screen_guards(&["bash".to_string()]).is_empty());
}

#[test]
fn token_file_mode_and_sources() {
    let dir = std::env::temp_dir().join(format!("handnode-doctor-{}", std::process::id()));
    std::fs::create_dir_all(dir.join("handnode")).unwrap();
    let token = dir.join("handnode/token");
    std::fs::write(&token, "secret-value").unwrap();
    std::fs::set_permissions(&token, std::fs::Permissions::from_mode(0o644)).unwrap();
    let xdg = dir.display().to_string();
    let c = token_check(&env(&[("XDG_CONFIG_HOME", &xdg)]));
    assert_eq!(c.status, Status::Warn);
    assert_eq!(c.fix, Some(format!("chmod 600 {}", token.display())));
    std::fs::set_permissions(&token, std::fs::Permissions::from_mode(0o600)).unwrap();
    let c = token_check(&env(&[("XDG_CONFIG_HOME", &xdg)]));
    assert_eq!(c.status, Status::Ok);
    assert!(c.detail.contains("mode 0600"));
    assert!(!format!("{c:?}").contains("secret-value"));
    let c = token_check(&env(&[("HANDNODE_TOKEN", "secret-value")]));
    assert!(c.detail.contains("HANDNODE_TOKEN") && !c.detail.contains("secret-value"));
    let c = token_check(&env(&[("HANDNODE_TOKEN_FILE", "/nonexistent/t")]));
    assert_eq!(c.status, Status::Fail);
    let c = token_check(&env(&[("HOME", "/nonexistent-home")]));
    assert!(c
        .detail
        .contains("creates /nonexistent-home/.config/handnode/token"));
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn no_display_fails_with_what_to_set_and_exit_is_zero() {
    let e = env(&[("PATH", "/nonexistent"), ("HOME", "/nonexistent-home")]);
    // The probe reads the process environment; only the report text is checked here.
    let cfg = ToolConfig {
        display_env: Some(Default::default()),
        ..ToolConfig::default()
    };
    let processes = ProcessWatcher::start().unwrap();
    let probe = display::probe_now(&cfg, &processes);
    let c = display_checks(&probe, &cfg, &processes);
    assert_eq!(c[0].status, Status::Fail);
    assert!(c[0].detail.contains("neither WAYLAND_DISPLAY nor DISPLAY"));
    let text = render(&c);
    assert!(text.contains("[fail] display: no display"), "{text}");
    let (checks, display) = checks(&e, true, &processes);
    assert!(checks
        .iter()
        .any(|c| c.name == "user" && c.status == Status::Warn));
    let v = to_json(&checks, display);
    assert!(v["checks"].as_array().unwrap().len() >= 3);
    assert!(v["display"]["tools"]["screenshot"]["works"].is_boolean());
}

#[test]
fn every_tool_that_needs_the_display_gets_a_line() {
    let probe = Probe::working_x11();
    let cfg = ToolConfig {
        display_env: Some(Default::default()),
        ..ToolConfig::default()
    };
    let lines = display_checks(&probe, &cfg, &ProcessWatcher::start().unwrap());
    let mut checked = 0;
    for tool in crate::tools::registered() {
        let line = lines.iter().find(|c| c.name == tool.name);
        match tool.needs {
            crate::tools::Needs::Display(_) => {
                let line = line.unwrap_or_else(|| panic!("doctor skips {}", tool.name));
                assert_eq!(line.status, Status::Ok, "{line:?}");
                checked += 1;
            }
            crate::tools::Needs::Nothing
            | crate::tools::Needs::Bash
            | crate::tools::Needs::Screen => {
                assert!(line.is_none(), "{line:?}")
            }
        }
    }
    assert_eq!(checked, display::gui_tools().count());
    assert!(checked > 0);
}

#[test]
fn build_is_reported_and_static_glibc_warns_about_nss_modules() {
    let describe = crate::base::build_info::describe();
    let pi_os = "passwd: files\nhosts:          files mdns4_minimal [NOTFOUND=return] dns # x\n";
    for (libc, is_static) in [("musl", true), ("glibc", false)] {
        let c = build_check(libc, is_static, Some(pi_os));
        assert_eq!((c.name.as_str(), c.status), ("build", Status::Ok), "{c:?}");
        assert_eq!(c.detail, describe);
    }
    let c = build_check("glibc", true, Some(pi_os));
    assert_eq!(c.status, Status::Warn, "{c:?}");
    assert!(c.detail.starts_with(&describe), "{c:?}");
    assert!(c.detail.contains("through mdns4_minimal, which"), "{c:?}");
    assert!(c.fix.as_deref().unwrap().contains("musl"));
    for plain in [Some("hosts: files dns\n"), Some("# hosts: mdns\n"), None] {
        assert_eq!(
            build_check("glibc", true, plain).status,
            Status::Ok,
            "{plain:?}"
        );
    }
    let (checks, display) = checks(
        &env(&[("HOME", "/x")]),
        false,
        &ProcessWatcher::start().unwrap(),
    );
    assert_eq!(checks[0].name, "build");
    assert!(checks[0].detail.starts_with(&describe));
    let v = to_json(&checks, display);
    assert_eq!(v["build"]["target"], crate::base::build_info::TARGET);
    assert_eq!(v["build"]["libc"], crate::base::build_info::LIBC);
    assert_eq!(v["build"]["static"], crate::base::build_info::STATIC);
}

#[test]
fn allow_login_without_a_token_is_flagged() {
    let tmp = crate::base::testutil::TempDir::new("doctor-login");
    let xdg = tmp.0.display().to_string();
    let flagged = |extra: &[(&str, &str)]| {
        let mut pairs = vec![("HANDNODE_ALLOW_LOGIN", "a@b.c"), ("XDG_CONFIG_HOME", &xdg)];
        pairs.extend_from_slice(extra);
        login_without_token(&env(&pairs))
    };
    let c = flagged(&[]).expect("no token anywhere: flagged");
    assert_eq!((c.name.as_str(), c.status), ("tailnet", Status::Warn));
    assert!(c.fix.unwrap().contains("AND bearer"));
    assert!(flagged(&[("HANDNODE_TOKEN", "t0ken")]).is_none());
    tmp.write("handnode/token", "t0ken");
    assert!(flagged(&[]).is_none(), "the default token file counts");
    assert!(login_without_token(&env(&[("XDG_CONFIG_HOME", &xdg)])).is_none());
}

#[test]
fn allow_login_without_allow_host_is_flagged() {
    let processes = ProcessWatcher::start().unwrap();
    let (c, _) = checks(
        &env(&[("HANDNODE_ALLOW_LOGIN", "a@b.c"), ("HOME", "/x")]),
        false,
        &processes,
    );
    let about_host = |c: &Check| c.name == "tailnet" && c.detail.contains("ALLOW_HOST");
    assert!(c.iter().any(|c| about_host(c) && c.status == Status::Warn));
    let (c, _) = checks(
        &env(&[
            ("HANDNODE_ALLOW_LOGIN", "a@b.c"),
            ("HANDNODE_ALLOW_HOST", "box.ts.net"),
            ("HOME", "/x"),
        ]),
        false,
        &processes,
    );
    assert!(!c.iter().any(about_host));
}

fn words(v: &[&str]) -> Vec<String> {
    v.iter().map(|s| s.to_string()).collect()
}

fn fake(mode: &str) -> Vec<String> {
    let script = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/fixtures/fake-browser.sh"
    );
    words(&["bash", script, "--mode", mode])
}

#[test]
fn the_browser_tier_off_is_not_a_failure_and_says_how_to_turn_it_on() {
    let out = browser_checks(None, &env(&[]), false, |_| panic!("nothing to start"));
    assert_eq!(out.len(), 1);
    assert_eq!(out[0].status, Status::Ok);
    assert!(out[0].fix.as_deref().unwrap().contains("--browser-command"));
}

#[test]
fn a_missing_command_or_chromium_fails_without_a_test_start() {
    let path = env(&[("PATH", "/usr/bin:/bin")]);
    let argv = words(&["no-such-browser-cmd", "x"]);
    let out = browser_checks(Some(&argv), &path, false, |_| panic!("not started"));
    assert_eq!(out[0].status, Status::Fail, "{out:?}");
    assert!(out
        .iter()
        .any(|c| c.name == "browser start" && c.status == Status::Fail));

    let argv = words(&[
        "bash",
        "/nonexistent/cli.js",
        "--executable-path",
        "/nonexistent/chromium",
    ]);
    let out = browser_checks(Some(&argv), &path, true, |_| panic!("not started"));
    let failed: Vec<&str> = out
        .iter()
        .filter(|c| c.status == Status::Fail)
        .map(|c| c.detail.as_str())
        .collect();
    assert!(
        failed
            .iter()
            .any(|d| d.contains("/nonexistent/cli.js does not exist")),
        "{failed:?}"
    );
    assert!(
        failed
            .iter()
            .any(|d| d.contains("/nonexistent/chromium is not an executable")),
        "{failed:?}"
    );
    assert!(
        out.iter().any(|c| c.name == "browser sandbox"),
        "root without --no-sandbox"
    );
}

#[test]
fn the_test_start_reports_what_the_browser_said() {
    let path = env(&[("PATH", &std::env::var("PATH").unwrap_or_default())]);
    let base = crate::base::testutil::TempDir::new("doctor-browser");
    let out = browser_checks(Some(&fake("normal")), &path, false, |argv| {
        test_start(argv, &base.0)
    });
    let start = out.iter().find(|c| c.name == "browser start").unwrap();
    assert_eq!(start.status, Status::Ok, "{out:?}");
    assert!(start
        .detail
        .starts_with("started and opened about:blank in"));
    let out = browser_checks(Some(&fake("fail-start")), &path, false, |argv| {
        test_start(argv, &base.0)
    });
    let start = out.iter().find(|c| c.name == "browser start").unwrap();
    assert_eq!(start.status, Status::Fail, "{out:?}");
    assert!(
        start.detail.contains("Executable doesn't exist"),
        "{}",
        start.detail
    );
    let left: Vec<_> = std::fs::read_dir(&base.0).unwrap().flatten().collect();
    assert!(
        left.is_empty(),
        "the test browsers' dirs are removed: {left:?}"
    );
}

#[test]
fn box_live_view_says_which_server_to_install_for_the_backend() {
    let dir = std::env::temp_dir().join(format!("handnode-doctor-vnc-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let mut probe = Probe::working_x11();
    probe.env.path = Some(dir.display().to_string());
    let c = box_view_check(&probe);
    assert_eq!(c.status, Status::Warn);
    assert!(c.detail.contains("needs x11vnc"), "{}", c.detail);
    assert_eq!(c.fix.as_deref(), Some("apt install x11vnc"));
    probe.backend = Some(Backend::Wayland);
    let c = box_view_check(&probe);
    assert_eq!(c.fix.as_deref(), Some("apt install wayvnc"));
    let fake = dir.join("wayvnc");
    std::fs::write(&fake, "#!/bin/sh\n").unwrap();
    std::fs::set_permissions(&fake, std::fs::Permissions::from_mode(0o755)).unwrap();
    let c = box_view_check(&probe);
    assert_eq!(c.status, Status::Ok, "{}", c.detail);
    assert!(c.detail.contains("wayvnc is installed"), "{}", c.detail);
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn a_cgroup2_mount_without_favordynmods_is_named_only_where_the_kernel_has_it() {
    let hybrid = "tmpfs /sys/fs/cgroup tmpfs rw,relatime,mode=755 0 0
cgroup /sys/fs/cgroup/pids cgroup rw,relatime,pids 0 0
cgroup2 /sys/fs/cgroup/unified cgroup2 rw,relatime 0 0
";
    assert_eq!(
        slow_cgroup_moves(hybrid, "6.18.44-fc-v1252").as_deref(),
        Some("/sys/fs/cgroup/unified")
    );
    assert_eq!(
        slow_cgroup_moves(hybrid, "5.15.0-91-generic"),
        None,
        "no such option before 6.0"
    );
    let favoured = "cgroup2 /sys/fs/cgroup cgroup2 rw,nosuid,nodev,noexec,relatime,nsdelegate,favordynmods 0 0\n";
    assert_eq!(slow_cgroup_moves(favoured, "6.1.0-13-amd64"), None);
    assert_eq!(
        slow_cgroup_moves("proc /proc proc rw 0 0\n", "6.1.0"),
        None,
        "no cgroup2"
    );
    assert_eq!(slow_cgroup_moves(hybrid, "garbage"), None);
}
