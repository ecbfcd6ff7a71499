//! The `apps` profile as a boundary (contract §17): `--apps` refuses a terminal at start
//! (the real binary, exit 2, naming it); an `apps` grant over a stub pod sees the profile's
//! tools, opens only its listed entries, with no argument of its own, in an environment
//! that holds no handnode secret, and its apps die with it; `apps` without `--apps` is a
//! `400`. The element check of `desktop_act` (`tools::apps::may_drive`) is attacked with
//! real processes in `tools::apps`' unit tests and against a real GTK app in
//! `tests/a11y.rs` (`an_apps_grant_presses_only_buttons_of_the_apps_it_opened`).

mod common;
#[path = "common/realbin.rs"]
mod realbin;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::{cmdline, descendant_running, StubPod, TestDaemon};
use handnode::profiles::{Profile, APPS_NEEDS_LIST};
use handnode::tools::policy::{Shell, ToolPolicy};
use realbin::{wait_exit, RealDaemon, TOKEN};
use serde_json::{json, Value};

/// A data dir with `applications/<id>.desktop` for each `(id, Exec, extra lines)`.
fn data_dir(tag: &str, entries: &[(&str, &str, &str)]) -> PathBuf {
    let dir = common::temp_dir(tag);
    let apps = dir.join("share/applications");
    std::fs::create_dir_all(&apps).unwrap();
    for (id, exec, extra) in entries {
        std::fs::write(
            apps.join(format!("{id}.desktop")),
            format!("[Desktop Entry]\nType=Application\nName={id} app\nExec={exec}\n{extra}\n"),
        )
        .unwrap();
    }
    dir
}

fn share(dir: &Path) -> String {
    dir.join("share").display().to_string()
}

/// `handnode serve --apps <apps>` with `XDG_DATA_DIRS` as given: its exit status and log.
fn serve_apps(dir: &Path, apps: &str, data_dirs: Option<&str>) -> (Option<i32>, String) {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_handnode"));
    cmd.args(["serve", "--listen", "127.0.0.1:0", "--local-socket", "none"])
        .arg("--state-dir")
        .arg(dir.join("state"))
        .arg("--config-dir")
        .arg(dir.join("config"))
        .args(["--apps", apps])
        .env("HANDNODE_TOKEN", TOKEN)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    if let Some(d) = data_dirs {
        cmd.env("XDG_DATA_DIRS", d);
    }
    let mut child = cmd.spawn().unwrap();
    let mut err = String::new();
    std::io::Read::read_to_string(&mut child.stderr.take().unwrap(), &mut err).unwrap();
    (wait_exit(&mut child).code(), err)
}

#[test]
fn serve_refuses_a_terminal_in_apps_with_exit_2_naming_it() {
    let dir = data_dir(
        "apps-term",
        &[
            ("t.Calc", "true", "Categories=Utility;"),
            ("t.Term", "true", "Categories=System;TerminalEmulator;"),
            ("t.Shell", "bash -i", ""),
        ],
    );
    for (apps, reason) in [
        ("t.Calc,t.Term", "--apps: t.Term ("),
        (
            "t.Term",
            "is refused: it is a terminal emulator (Categories has TerminalEmulator)",
        ),
        ("t.Shell", "is refused: its program bash is a shell"),
        ("t.Missing", "--apps: t.Missing: not found in "),
        ("../t.Calc", "is not a desktop entry ID"),
    ] {
        let (code, log) = serve_apps(&dir, apps, Some(&share(&dir)));
        assert_eq!(code, Some(2), "{apps}: {log}");
        assert!(log.contains(reason), "{apps}: {log}");
    }
    // The box's own xterm entry, where xterm is installed (CI installs it).
    if Path::new("/usr/share/applications/debian-xterm.desktop").exists() {
        let (code, log) = serve_apps(&dir, "debian-xterm", None);
        assert_eq!(code, Some(2), "{log}");
        assert!(
            log.contains("--apps: debian-xterm (/usr/share/applications/debian-xterm.desktop) is refused: it is a terminal emulator"),
            "{log}"
        );
    } else {
        eprintln!("SKIPPED the box's xterm entry: xterm is not installed (apt install xterm)");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn an_apps_grant_needs_apps_on_the_box() {
    let d = TestDaemon::new("apps-none");
    let pod = StubPod::start();
    let (status, v) = d.call(
        "POST",
        "/attach",
        Some(&common::attach_body(&pod, "s-apps", "apps")),
    );
    assert_eq!(status, 400, "{v}");
    assert_eq!(v["error"], APPS_NEEDS_LIST);
}

#[test]
fn a_stored_apps_grant_resumes_with_apps_and_is_dropped_without() {
    let data = data_dir("apps-persist", &[("t.Sleep", "sleep 30", "")]);
    let entries = handnode::rules::desktop_entry::resolve_apps(
        &["t.Sleep".to_string()],
        &handnode::rules::desktop_entry::DataDirs {
            dirs: vec![data.join("share/applications")],
        },
        "/usr/bin:/bin",
    )
    .unwrap();
    let dir = data.join("daemon");
    let config = |apps: &[handnode::rules::desktop_entry::DesktopEntry]| {
        let mut c = common::test_config(&dir);
        c.apps = apps.to_vec();
        c
    };
    let mut d = TestDaemon::start(config(&entries), dir.clone());
    let pod = StubPod::start();
    let g = d.attach(common::attach_body(&pod, "s-keep", "apps"));
    let id = g["id"].as_str().unwrap().to_string();
    assert_eq!(g["shell"], "no", "{g}");
    d.stop();
    let mut d = TestDaemon::start(config(&entries), dir.clone());
    assert_eq!(d.grant(&id)["profile"], "apps", "resumed with --apps");
    d.stop();
    let d = TestDaemon::start(config(&[]), dir.clone());
    let (status, _) = d.call("GET", &format!("/attach/{id}"), None);
    assert_eq!(
        status, 404,
        "an apps grant without --apps is dropped at load"
    );
    drop(d);
    let _ = std::fs::remove_dir_all(&data);
}

fn call(conn: &mut common::PodConn, id: &mut u64, name: &str, args: Value) -> Value {
    *id += 1;
    conn.set_read_timeout(Duration::from_secs(30));
    let reply = conn.call_tool(json!(*id), name, args);
    reply["result"].clone()
}

fn text(result: &Value) -> &str {
    result["content"][0]["text"].as_str().unwrap_or_default()
}

/// Whether `pid` is gone or a zombie.
fn dead(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .map_or(true, |s| s[s.rfind(')').unwrap() + 2..].starts_with('Z'))
}

#[test]
fn an_apps_grant_opens_only_its_listed_apps_without_arguments_or_secrets_and_they_die_with_it() {
    let data = data_dir(
        "apps-grant",
        &[
            ("t.Sleep", "sleep 30 %U", "Categories=Utility;"),
            ("t.Term", "sleep 30", "Categories=TerminalEmulator;"),
        ],
    );
    let state = data.join("state");
    // LC_PAPER passes the app's allow-list by name; its value is the admin token, so the
    // cleaner must still drop it.
    let d = RealDaemon::start_with_env(
        &state,
        &[("--apps", "t.Sleep")],
        &[
            ("XDG_DATA_DIRS", &share(&data)),
            ("LC_PAPER", TOKEN),
            // A display name is all app_open asks of the display: the "app" is a sleep.
            ("DISPLAY", ":99"),
        ],
    );
    let pod = StubPod::start();
    let (status, g) = d.call(
        "POST",
        "/attach",
        Some(&common::attach_body(&pod, "s-apps", "apps")),
    );
    assert_eq!(status, 202, "{g}");
    assert_eq!(g["shell"], "no", "{g}");
    let grant = g["id"].as_str().unwrap().to_string();
    let (_, mut conn) = pod.next_session();
    d.wait_grant(&grant, "attached", |g| g["state"] == "attached");
    let mut id = 0;
    // The profile's tools, as the registry says.
    let listed = conn.request(json!(0), "tools/list", json!({}));
    let names: Vec<&str> = listed["result"]["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, handnode::tools::names(Profile::Apps));
    let apps = call(&mut conn, &mut id, "apps_list", json!({}));
    assert_eq!(
        apps["structuredContent"]["apps"][0]["id"], "t.Sleep",
        "{apps}"
    );
    assert_eq!(
        apps["structuredContent"]["apps"].as_array().unwrap().len(),
        1
    );
    // Nothing but a listed ID opens; no argument reaches the app.
    for (args, want) in [
        (
            json!({"app": "t.Term"}),
            "t.Term is not an app this grant may open (it may open: t.Sleep)",
        ),
        (
            json!({"app": "debian-xterm"}),
            "is not an app this grant may open",
        ),
        (
            json!({"app": "/usr/bin/xterm"}),
            "is not a desktop entry ID",
        ),
        (
            json!({"app": "../applications/t.Sleep"}),
            "is not a desktop entry ID",
        ),
        (
            json!({"app": "t.Sleep -e bash"}),
            "is not a desktop entry ID",
        ),
        (
            json!({"app": "t.Sleep", "args": ["-e", "bash"]}),
            "args is not accepted",
        ),
        (
            json!({"app": "t.Sleep", "argv": ["bash"]}),
            "argv is not accepted",
        ),
        (
            json!({"app": "t.Sleep", "env": {"LD_PRELOAD": "/tmp/x.so"}}),
            "env is not accepted",
        ),
    ] {
        let r = call(&mut conn, &mut id, "app_open", args.clone());
        assert_eq!(r["isError"], true, "{args}: {r}");
        assert!(text(&r).contains(want), "{args}: {}", text(&r));
    }
    let opened = call(&mut conn, &mut id, "app_open", json!({"app": "t.Sleep"}));
    assert!(opened.get("isError").is_none(), "{opened}");
    let leader = opened["structuredContent"]["pid"].as_i64().unwrap() as u32;
    // Its argv is the entry's, field codes removed (once the leader has
    // exec'd it, inside the grant's wall, §21, where the leader is `bwrap`); its
    // environment holds no secret.
    let end = Instant::now() + Duration::from_secs(10);
    let pid = loop {
        if let Some(p) = descendant_running(leader, "sleep") {
            break p;
        }
        assert!(
            Instant::now() < end,
            "the app never ran: {:?}",
            cmdline(leader)
        );
        std::thread::sleep(Duration::from_millis(10));
    };
    let argv = || cmdline(pid);
    assert_eq!(argv()[1..], ["30"]);
    let environ = String::from_utf8_lossy(&std::fs::read(format!("/proc/{pid}/environ")).unwrap())
        .into_owned();
    assert!(environ.contains("PATH="), "not an environment: {environ}");
    for secret in [TOKEN, "s3cret-attach", "HANDNODE_", "SWAYSOCK"] {
        assert!(
            !environ.contains(secret),
            "{secret} reached the app: {environ}"
        );
    }
    let apps = call(&mut conn, &mut id, "apps_list", json!({}));
    assert_eq!(
        apps["structuredContent"]["apps"][0]["running"], true,
        "{apps}"
    );
    // Revoked: the app is dead within a second.
    let (status, _) = d.call("DELETE", &format!("/attach/{grant}"), None);
    assert_eq!(status, 204);
    let end = Instant::now() + Duration::from_secs(1);
    while !dead(pid) {
        assert!(
            Instant::now() < end,
            "the app {pid} outlived its grant by a second"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    let _ = std::fs::remove_dir_all(&data);
}

/// The escalation check's claims about app tools are attacked here: every fixed profile
/// that can start or drive apps and says it reaches no shell must be one these tests grant.
#[test]
fn every_apps_boundary_the_escalation_check_claims_is_attacked() {
    const ATTACKED: &[Profile] = &[Profile::Apps];
    let app_tools = ["app_open", handnode::tools::apps::DESKTOP_ACT];
    for profile in Profile::ALL {
        let Some(policy) = ToolPolicy::fixed(profile) else {
            continue;
        };
        let drives = policy.tools().iter().any(|t| app_tools.contains(t));
        let claim = policy.escalation(|_| false).shell;
        if drives && claim == Shell::No {
            assert!(
                ATTACKED.contains(&profile),
                "{profile} claims shell {claim:?} and starts or drives apps, but tests/apps.rs does not attack it"
            );
        }
    }
    let apps = ToolPolicy::fixed(Profile::Apps).unwrap();
    assert_eq!(apps.escalation(|_| false).shell, Shell::No);
    assert!(
        app_tools.iter().all(|t| apps.allows(t)),
        "apps holds app_open and desktop_act"
    );
}
