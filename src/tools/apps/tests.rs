//! Unit tests of `tools::apps`.

use super::*;
use crate::tools::policy::ToolPolicy;
use crate::tools::testutil::{self, WATCHDOG};
use crate::tools::{CallLimits, GrantNote, ToolConfig, ToolHost};
use std::time::Instant;

fn entry(id: &str, argv: &[&str]) -> DesktopEntry {
    DesktopEntry {
        id: id.into(),
        path: PathBuf::from(format!("/test/{id}.desktop")),
        name: format!("{id} app"),
        argv: argv.iter().map(|s| s.to_string()).collect(),
        program: de::which(argv[0], "/usr/bin:/bin"),
        categories: Vec::new(),
        terminal: false,
        no_display: false,
    }
}

/// A display environment naming a display (no test here needs a real one: the "apps"
/// are `sleep`s).
fn display_env() -> Option<std::collections::BTreeMap<String, String>> {
    Some([("DISPLAY".to_string(), ":99".to_string())].into())
}

fn host(apps: Vec<DesktopEntry>) -> Arc<ToolHost> {
    ToolHost::new(ToolConfig {
        display_env: display_env(),
        apps,
        ..ToolConfig::default()
    })
    .unwrap()
}

fn cx(host: &Arc<ToolHost>, profile: Profile, grant: &str) -> CallContext {
    let mut cx = testutil::cx(host, CallLimits::GRANT, CallCtl::new());
    cx.policy = Arc::new(ToolPolicy::fixed(profile).unwrap());
    cx.grant = Some(GrantNote {
        id: grant.into(),
        session: "s".into(),
        expires_at: 0,
        approve: Vec::new(),
        approval_wait: Duration::from_secs(1),
    });
    cx
}

fn call(tool: &Tool, cx: &CallContext, args: Value) -> Value {
    let (done, rx) = testutil::completion();
    (tool.start)(args, cx.clone(), done);
    testutil::result(rx.recv_timeout(WATCHDOG).unwrap())
}

fn text(v: &Value) -> &str {
    v["content"][0]["text"].as_str().unwrap()
}

/// Whether `pid` is gone or a zombie.
fn dead(pid: i32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .map_or(true, |s| s[s.rfind(')').unwrap() + 2..].starts_with('Z'))
}

fn until(what: &str, mut f: impl FnMut() -> bool) {
    let end = Instant::now() + WATCHDOG;
    while !f() {
        assert!(Instant::now() < end, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// The children of `pid`, from /proc.
fn children(pid: i32) -> Vec<i32> {
    let mut out = Vec::new();
    for task in std::fs::read_dir(format!("/proc/{pid}/task"))
        .into_iter()
        .flatten()
        .flatten()
    {
        let text = std::fs::read_to_string(task.path().join("children")).unwrap_or_default();
        out.extend(
            text.split_whitespace()
                .filter_map(|p| p.parse::<i32>().ok()),
        );
    }
    out
}

/// An "app" that starts a helper, as real apps do (built here, not vetted: the check is
/// about processes, not about what --apps refuses).
fn forks() -> DesktopEntry {
    entry("t.Forks", &["sh", "-c", "sleep 30 & exec sleep 31"])
}

#[test]
fn may_drive_holds_an_element_to_the_processes_of_apps_this_grant_started() {
    // Without cgroups: by the run's marker variable.
    drive_check(host(vec![forks()]));
}

#[test]
fn may_drive_holds_an_element_to_the_run_cgroup_of_apps_this_grant_started() {
    let tmp = crate::base::testutil::TempDir::new("apps-cgroup");
    let confine = crate::cgroup::Confine::start(crate::cgroup::Settings::for_state_dir(
        &tmp.0,
        false,
        crate::cgroup::Limits::defaults(),
    ));
    if confine.containment().mode().is_none() {
        assert!(
            !rustix::process::geteuid().is_root(),
            "root, yet no cgroup: {:?}",
            confine.why_not_cgroup()
        );
        eprintln!("skip: no cgroup here (not root, no delegated cgroup v2)");
        return;
    }
    let host = ToolHost::new(ToolConfig {
        display_env: display_env(),
        apps: vec![forks()],
        confine: Some(Arc::clone(&confine)),
        ..ToolConfig::default()
    })
    .unwrap();
    drive_check(host);
    confine.stop();
}

fn drive_check(host: Arc<ToolHost>) {
    let g1 = cx(&host, Profile::Apps, "g1");
    let out = call(&OPEN, &g1, json!({"app": "t.Forks"}));
    assert!(out.get("isError").is_none(), "{out}");
    let pid = out["structuredContent"]["pid"].as_i64().unwrap() as i32;
    // Once the app's shell has started its helper and become `sleep 31` (while a
    // process execs, /proc shows no environment to read the marker from).
    let execd = |p: i32| {
        std::fs::read(format!("/proc/{p}/cmdline")).is_ok_and(|c| c.starts_with(b"sleep\0"))
    };
    until("the helper and the exec", || {
        execd(pid) && children(pid).first().is_some_and(|h| execd(*h))
    });
    let helper = children(pid)[0];
    assert_eq!(may_drive(&g1, "forks", Some(pid as u32)), Ok(()));
    assert_eq!(may_drive(&g1, "forks", Some(helper as u32)), Ok(()));
    // A process this grant did not start, named like the app or not.
    let mut stranger = std::process::Command::new("sleep")
        .arg("30")
        .spawn()
        .unwrap();
    let refused = Err("forks is not an app this grant may drive".to_string());
    assert_eq!(may_drive(&g1, "forks", Some(stranger.id())), refused);
    assert_eq!(may_drive(&g1, "forks", Some(std::process::id())), refused);
    assert_eq!(may_drive(&g1, "forks", None), refused);
    assert_eq!(may_drive(&g1, "forks", Some(0)), refused);
    assert_eq!(may_drive(&g1, "forks", Some(u32::MAX)), refused);
    // Another grant's apps are not this grant's.
    let g2 = cx(&host, Profile::Apps, "g2");
    assert!(may_drive(&g2, "forks", Some(pid as u32)).is_err());
    // Where desktop_act is a shell tool anyway, every element may be driven.
    let desktop = cx(&host, Profile::Desktop, "g3");
    assert_eq!(may_drive(&desktop, "x", Some(stranger.id())), Ok(()));
    let mut custom = cx(&host, Profile::Apps, "g4");
    custom.policy = Arc::new(
        ToolPolicy::new(
            Profile::Custom,
            crate::tools::policy::ToolLists {
                allow: vec![DESKTOP_ACT.into()],
                deny: Vec::new(),
            },
        )
        .unwrap(),
    );
    assert_eq!(may_drive(&custom, "x", Some(stranger.id())), Ok(()));
    // apps_list says it runs, for g1 only.
    let listed = call(&LIST, &g1, json!({}));
    assert_eq!(listed["structuredContent"]["apps"][0]["running"], true);
    assert_eq!(listed["structuredContent"]["apps"][0]["pids"][0], pid);
    let other = call(&LIST, &g2, json!({}));
    assert_eq!(other["structuredContent"]["apps"][0]["running"], false);
    // The grant ends: the app and its helper die, and nothing of it may be driven.
    host.apps.end_scope("g1");
    until("the app's end", || dead(pid) && dead(helper));
    assert_eq!(may_drive(&g1, "forks", Some(helper as u32)), refused);
    let _ = stranger.kill();
    let _ = stranger.wait();
}

#[test]
fn app_open_opens_listed_ids_only_and_takes_no_arguments() {
    let host = host(vec![entry("t.Sleep", &["sleep", "30"])]);
    let apps = cx(&host, Profile::Apps, "g-open");
    for (args, want) in [
        (
            json!({"app": "t.Other"}),
            "t.Other is not an app this grant may open (it may open: t.Sleep)",
        ),
        (
            json!({"app": "/usr/bin/xterm"}),
            "is not a desktop entry ID",
        ),
        (json!({"app": "../t.Sleep"}), "is not a desktop entry ID"),
        (
            json!({"app": "t.Sleep --e=bash"}),
            "is not a desktop entry ID",
        ),
        (json!({"app": "sub/t.Sleep"}), "a path"),
        (
            json!({"app": "t.Sleep", "args": ["-e", "bash"]}),
            "args is not accepted",
        ),
        (
            json!({"app": "t.Sleep", "env": {"LD_PRELOAD": "x"}}),
            "env is not accepted",
        ),
        (json!({"app": 7}), "app must be a string"),
        (json!({}), "app is required"),
        (json!([1]), "arguments must be an object"),
    ] {
        let out = call(&OPEN, &apps, args.clone());
        assert_eq!(out["isError"], true, "{args}");
        assert!(text(&out).contains(want), "{args}: {}", text(&out));
    }
    assert!(host.apps.running("g-open").is_empty(), "nothing started");
    // A custom list naming app_open is held to the listed apps too.
    let custom = {
        let mut c = cx(&host, Profile::Apps, "g-custom");
        c.policy = Arc::new(
            ToolPolicy::new(
                Profile::Custom,
                crate::tools::policy::ToolLists {
                    allow: vec!["app_open".into()],
                    deny: Vec::new(),
                },
            )
            .unwrap(),
        );
        c
    };
    let out = call(&OPEN, &custom, json!({"app": "debian-xterm"}));
    assert!(
        text(&out).contains("not an app this grant may open"),
        "{out}"
    );
}

#[test]
fn an_app_gets_every_display_variable_but_the_compositors_socket() {
    let vars = [
        ("DISPLAY", ":99"),
        ("SWAYSOCK", "/run/sway.sock"),
        ("XAUTHORITY", "/run/cookie"),
        ("DBUS_SESSION_BUS_ADDRESS", "unix:path=/run/bus"),
        ("AT_SPI_BUS_ADDRESS", "unix:path=/run/a11y"),
    ];
    let host = ToolHost::new(ToolConfig {
        display_env: Some(
            vars.iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
        ),
        ..ToolConfig::default()
    })
    .unwrap();
    let env: std::collections::BTreeMap<_, _> = app_env(&cx(&host, Profile::Desktop, "g"))
        .into_iter()
        .map(|(k, v)| (k.into_string().unwrap(), v.into_string().unwrap()))
        .collect();
    for (name, value) in vars {
        match name {
            "SWAYSOCK" => assert!(!env.contains_key(name), "{env:?}"),
            _ => assert_eq!(env.get(name).map(String::as_str), Some(value), "{name}"),
        }
    }
    assert!(env.contains_key("PATH"), "{env:?}");
}

#[test]
fn a_grant_runs_at_most_its_bound_of_apps_and_their_environment_is_allow_listed() {
    let host = host(vec![entry("t.Sleep", &["sleep", "30"])]);
    let g = cx(&host, Profile::Apps, "g-bound");
    let mut pids = Vec::new();
    for _ in 0..MAX_RUNNING_APPS {
        let out = call(&OPEN, &g, json!({"app": "t.Sleep"}));
        assert!(out.get("isError").is_none(), "{out}");
        pids.push(out["structuredContent"]["pid"].as_i64().unwrap() as i32);
    }
    let out = call(&OPEN, &g, json!({"app": "t.Sleep"}));
    assert_eq!(out["isError"], true);
    assert!(
        text(&out).contains(&format!("already runs {MAX_RUNNING_APPS} apps")),
        "{out}"
    );
    // What the app inherited: the allow-list, the display's variables, the marker.
    let environ = std::fs::read(format!("/proc/{}/environ", pids[0])).unwrap();
    let display = ["DISPLAY", "WAYLAND_DISPLAY", "XDG_RUNTIME_DIR", "PATH"];
    for var in environ.split(|b| *b == 0).filter(|v| !v.is_empty()) {
        let var = String::from_utf8_lossy(var);
        let name = var.split('=').next().unwrap();
        let allowed = APP_ENV.iter().any(|p| match p.strip_suffix('*') {
            Some(prefix) => name.starts_with(prefix),
            None => name == *p,
        }) || display.contains(&name)
            || name == "QT_LINUX_ACCESSIBILITY_ALWAYS_ON"
            || name == super::super::shell::MARKER_ENV;
        assert!(allowed, "{name} reached the app");
    }
    // One ends on its own: its slot is free again.
    let mut one = pids.pop().unwrap();
    rustix::process::kill_process(
        rustix::process::Pid::from_raw(one).unwrap(),
        rustix::process::Signal::KILL,
    )
    .unwrap();
    until("the slot", || {
        host.apps.running("g-bound")["t.Sleep"].len() < MAX_RUNNING_APPS
    });
    let out = call(&OPEN, &g, json!({"app": "t.Sleep"}));
    assert!(out.get("isError").is_none(), "{out}");
    one = out["structuredContent"]["pid"].as_i64().unwrap() as i32;
    pids.push(one);
    host.apps.end_scope("g-bound");
    until("every app's end", || pids.iter().all(|p| dead(*p)));
}

#[test]
fn owner_lists_installed_apps_up_to_the_bound_and_opens_any_of_them() {
    let tmp = crate::base::testutil::TempDir::new("apps-installed");
    let apps_dir = tmp.path("applications");
    std::fs::create_dir_all(&apps_dir).unwrap();
    let write = |id: &str, extra: &str| {
        std::fs::write(
            apps_dir.join(format!("{id}.desktop")),
            format!("[Desktop Entry]\nType=Application\nName={id}\nExec=sleep 30\n{extra}\n"),
        )
        .unwrap();
    };
    for i in 0..MAX_LISTED_APPS {
        write(&format!("a{i:04}"), "");
    }
    // Not shown by a menu: not listed, and not counted.
    write("hidden", "NoDisplay=true");
    write("tty", "Terminal=true");
    write("gone", "Hidden=true");
    let host = ToolHost::new(ToolConfig {
        display_env: display_env(),
        app_dirs: Some(DataDirs {
            dirs: vec![apps_dir.clone()],
        }),
        ..ToolConfig::default()
    })
    .unwrap();
    let owner = cx(&host, Profile::Owner, "g-owner");
    let out = call(&LIST, &owner, json!({}));
    assert_eq!(out["structuredContent"]["truncated"], false, "at the bound");
    let listed = out["structuredContent"]["apps"].as_array().unwrap();
    assert_eq!(listed.len(), MAX_LISTED_APPS);
    assert!(listed
        .iter()
        .all(|a| a["id"].as_str().unwrap().starts_with('a')));
    write("b-one-more", "");
    let out = call(&LIST, &owner, json!({}));
    assert_eq!(out["structuredContent"]["truncated"], true, "bound + 1");
    assert_eq!(
        out["structuredContent"]["apps"].as_array().unwrap().len(),
        MAX_LISTED_APPS
    );
    assert!(text(&out).contains(&format!("only the first {MAX_LISTED_APPS}")));
    assert!(call(&LIST, &owner, json!({"x": 1}))["isError"] == true);
    // The owner opens any installed entry, even one --apps would refuse; apps does not.
    let out = call(&OPEN, &owner, json!({"app": "tty"}));
    assert!(out.get("isError").is_none(), "{out}");
    let out = call(&OPEN, &owner, json!({"app": "gone"}));
    assert!(text(&out).contains("is deleted (Hidden=true)"), "{out}");
    let apps = cx(&host, Profile::Apps, "g-apps");
    let out = call(&OPEN, &apps, json!({"app": "a0001"}));
    assert!(text(&out).contains("it may open: none"), "{out}");
    host.apps.end_scope("g-owner");
    // Without a display nothing is started.
    let headless = ToolHost::new(ToolConfig {
        display_env: Some(Default::default()),
        app_dirs: Some(DataDirs {
            dirs: vec![apps_dir.clone()],
        }),
        ..ToolConfig::default()
    })
    .unwrap();
    let out = call(
        &OPEN,
        &cx(&headless, Profile::Owner, "g-h"),
        json!({"app": "a0001"}),
    );
    assert!(text(&out).contains("a0001 needs a display"), "{out}");
    assert!(headless.apps.running("g-h").is_empty());
}

#[test]
fn an_app_that_ends_says_how_and_a_grant_keeps_its_last_ends_up_to_the_bound() {
    let host = host(vec![entry("t.Exit", &["sh", "-c", "exit 3"])]);
    let g = cx(&host, Profile::Apps, "g-exit");
    let kept = |host: &ToolHost| {
        lock(&host.apps.inner)
            .ended
            .get("g-exit")
            .map_or(0, |e| e.len())
    };
    for i in 0..=MAX_ENDED_KEPT {
        let out = call(&OPEN, &g, json!({"app": "t.Exit"}));
        assert!(out.get("isError").is_none(), "{out}");
        until("the app's end", || {
            host.apps.running("g-exit").is_empty() && kept(&host) == (i + 1).min(MAX_ENDED_KEPT)
        });
    }
    assert_eq!(
        kept(&host),
        MAX_ENDED_KEPT,
        "bound + 1 ends, the bound kept"
    );
    let listed = call(&LIST, &g, json!({}));
    let app = &listed["structuredContent"]["apps"][0];
    assert_eq!(app["running"], false, "{listed}");
    assert_eq!(app["last_exit"]["exit_code"], 3, "{listed}");
    assert!(text(&listed).contains("(ended: exit 3 after "), "{listed}");
    testutil::conforms(&list_output_schema(), &listed["structuredContent"]).unwrap();
    // Another grant's apps_list knows nothing of it; the grant's end forgets it.
    let other = call(&LIST, &cx(&host, Profile::Apps, "g-other"), json!({}));
    assert!(other["structuredContent"]["apps"][0]
        .get("last_exit")
        .is_none());
    host.apps.end_scope("g-exit");
    assert_eq!(kept(&host), 0);
}

#[test]
fn desktop_act_is_act_under_apps_only() {
    let apps = ToolPolicy::fixed(Profile::Apps).unwrap();
    assert!(drives_listed_only(Profile::Apps) && drives_listed_only(Profile::Custom));
    assert!(!drives_listed_only(Profile::Desktop) && !drives_listed_only(Profile::Owner));
    assert!(apps.tools().contains(&"app_open") && apps.tools().contains(&"apps_list"));
    assert!(!apps.tools().contains(&"bash"));
    assert_eq!(
        apps.escalation(|_| false).shell,
        crate::tools::policy::Shell::No
    );
}
