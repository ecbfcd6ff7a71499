//! No grant can act as the lender (contract §21), attacked end to end: the red team's
//! steps, run as a grant's real `bash`, job and `app_open` app, on a `desktop` grant, an
//! `apps` grant and an own-display grant, against the daemon's real token file, state dir
//! and local admin socket. Each must end with the token unread, the umounts refused, no
//! process outside its grant's groups, the escapee dead within a second of revoke, and the
//! owner's display unreachable. An `owner` grant runs the same script unwalled first: it
//! reads the token, so these tests can fail.
//!
//! CI runs them twice: as root (`cargo test`) and as an unprivileged user with a delegated
//! cgroup subtree (`scripts/ci/unprivileged.sh`), which prints what it skipped and why.
//! The tools attacked are read from the registry (`Tool::reach`): a new tool that starts
//! processes or opens paths fails [`every_tool_that_reaches_the_box_is_attacked`] until it
//! is attacked here.

mod common;
#[path = "common/path_tools.rs"]
mod path_tools;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::*;
use handnode::tools::Reach;
use serde_json::{json, Value};

const TOKEN: &str = "walls-admin-token-0123456789";

/// The red team's script. `$1`: where to write what it found (renamed into place when
/// done); `$2`: `escape` to leave a process behind that tries to leave its groups.
const RED_TEAM: &str = r#"#!/bin/bash
out=$1; escape=$2
exec >"$out.part" 2>&1
T=@TOKEN@; S=@STATE@; L=@SOCKET@
echo "CAPS $(grep CapEff /proc/self/status | cut -f2)"
umount "$S" 2>/dev/null && echo "BROKE umount of the state dir"
umount "$T" 2>/dev/null && echo "BROKE umount of the token file"
umount -l "$S" 2>/dev/null && echo "BROKE lazy umount of the state dir"
echo "TOKEN[$(cat "$T" 2>/dev/null)]"
echo "GRANTS[$(head -c 2000 "$S/grants.json" 2>/dev/null)]"
if curl -s -m 5 -o /dev/null --unix-socket "$L" http://localhost/healthz; then
  echo "BROKE the local admin socket answered"
fi
n=0
while IFS= read -r f; do
  n=$((n + 1))
  { echo $$ >"$f"; } 2>/dev/null && echo "BROKE moved into $f"
done < <(find /sys/fs/cgroup -name cgroup.procs 2>/dev/null)
echo "TRIED $n"
mount -o remount,rw /sys/fs/cgroup 2>/dev/null && echo "BROKE remounted /sys/fs/cgroup"
for d in @DISPLAYS@; do
  env -u XAUTHORITY xdpyinfo -display "$d" >/dev/null 2>&1 && echo "REACHED $d without a cookie"
  XAUTHORITY=@COOKIE@ xdpyinfo -display "$d" >/dev/null 2>&1 && echo "REACHED $d with the cookie"
done
if [ "$escape" = escape ]; then
  setsid bash -c 'while IFS= read -r f; do { echo $$ >"$f"; } 2>/dev/null; done < <(find /sys/fs/cgroup -name cgroup.procs 2>/dev/null); exec -a @ESCAPEE@ sleep 300' </dev/null >/dev/null 2>&1 &
fi
echo DONE
mv "$out.part" "$out"
if [ "$escape" = escape ]; then exec sleep 300; fi
"#;

/// The lender's box: a daemon whose token lives in a file and whose local admin socket
/// is served, as an installed one's are.
struct Lender {
    d: TestDaemon,
    token_file: PathBuf,
    socket: PathBuf,
    dir: PathBuf,
}

fn lender(tag: &str, tweak: impl FnOnce(&mut handnode::config::Config)) -> Lender {
    let dir = temp_dir(tag);
    let token_file = dir.join("token");
    std::fs::write(&token_file, TOKEN).unwrap();
    let socket = dir.join("handnode.sock");
    let mut c = test_config(&dir);
    quiet_liveness(&mut c);
    c.token = Some(handnode::Secret::new(TOKEN));
    c.token_source = Some(token_file.display().to_string());
    c.local_socket = Some(socket.clone());
    tweak(&mut c);
    let d = TestDaemon::start(c, dir.clone());
    Lender {
        d,
        token_file,
        socket,
        dir,
    }
}

impl Lender {
    /// The red team's script for one run, written where every grant can read it.
    fn script(&self, tag: &str, displays: &[String], cookie: Option<&Path>) -> PathBuf {
        let text = RED_TEAM
            .replace("@TOKEN@", &self.token_file.display().to_string())
            .replace("@STATE@", &self.d.state_dir().display().to_string())
            .replace("@SOCKET@", &self.socket.display().to_string())
            .replace("@DISPLAYS@", &displays.join(" "))
            .replace(
                "@COOKIE@",
                &cookie.map_or("/nonexistent".into(), |c| c.display().to_string()),
            )
            .replace("@ESCAPEE@", &escapee_name(tag));
        let path = self.dir.join(format!("red-team-{tag}"));
        std::fs::write(&path, text).unwrap();
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
        path
    }

    fn out(&self, tag: &str) -> PathBuf {
        self.dir.join(format!("found-{tag}"))
    }
}

fn escapee_name(tag: &str) -> String {
    format!("hn-escapee-{tag}-{}", std::process::id())
}

/// What the script found, once it is done.
fn found(out: &Path) -> String {
    poll_until(
        || std::fs::read_to_string(out).unwrap_or_default(),
        |t| t.contains("DONE"),
        |_| {
            let part = std::fs::read_to_string(out.with_extension("part")).unwrap_or_default();
            format!(
                "watchdog: the red team never finished ({}): {part}",
                out.display()
            )
        },
    )
}

/// The red team's findings inside a wall: nothing of the lender's was reached.
fn assert_walled(what: &str, found: &str) {
    assert!(found.contains("TOKEN[]"), "{what} read the token: {found}");
    assert!(
        found.contains("GRANTS[]"),
        "{what} read grants.json: {found}"
    );
    assert!(!found.contains(TOKEN), "{what}: the token appears: {found}");
    assert!(!found.contains("BROKE"), "{what}: {found}");
    assert!(
        found.contains("CAPS 0000000000000000"),
        "{what} holds capabilities inside its wall: {found}"
    );
    if Path::new("/sys/fs/cgroup").is_dir() {
        // The cgroup files are seen (read-only): the moves were tried, and failed.
        let tried: usize = found
            .lines()
            .find_map(|l| l.strip_prefix("TRIED "))
            .and_then(|n| n.trim().parse().ok())
            .unwrap_or(0);
        assert!(tried > 0, "{what} found no cgroup.procs to try: {found}");
    }
}

/// The escapee the script left behind: it exists, it is inside the grant's groups, and
/// it is dead within a second of `DELETE /attach`.
fn assert_escapee_dies_with(l: &Lender, grant: &str, tag: &str) {
    let name = escapee_name(tag);
    let pid = poll_until(
        || find_process(&name),
        Option::is_some,
        |_| format!("watchdog: the escapee {name} never started"),
    )
    .unwrap();
    let g = l.d.grant(grant);
    if cgroups_here(&g) {
        let groups = std::fs::read_to_string(format!("/proc/{pid}/cgroup")).unwrap_or_default();
        for line in groups.lines().filter(|l| !l.ends_with(':')) {
            let controllers = line.split(':').nth(1).unwrap_or("");
            // The grant's hierarchies: the v2 tree and the v1 limits (`name=systemd` and
            // controllers handnode does not use stay where the box put the daemon).
            let used = controllers.is_empty()
                || ["memory", "pids", "cpu"]
                    .iter()
                    .any(|c| controllers.split(',').any(|x| x == *c));
            if used {
                assert!(
                    line.contains(&format!("grants/{grant}")),
                    "the escapee {pid} left its grant's groups: {line}\n{groups}"
                );
            }
        }
    }
    let (status, _) = l.d.call("DELETE", &format!("/attach/{grant}"), None);
    assert_eq!(status, 204);
    let revoked = Instant::now();
    while !dead(pid) {
        assert!(
            revoked.elapsed() < Duration::from_secs(1),
            "the escapee {pid} outlived its grant by a second"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
    eprintln!(
        "{tag}: the escapee died {} ms after revoke",
        revoked.elapsed().as_millis()
    );
}

fn find_process(argv0: &str) -> Option<u32> {
    std::fs::read_dir("/proc")
        .ok()?
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .find(|p| cmdline(*p).first().is_some_and(|a| a == argv0) && !dead(*p))
}

/// Whether `pid` is gone or a zombie.
fn dead(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .map_or(true, |s| s[s.rfind(')').unwrap() + 2..].starts_with('Z'))
}

struct Agent {
    conn: PodConn,
    next: u64,
}

impl Agent {
    fn new(mut conn: PodConn) -> Agent {
        conn.set_read_timeout(WATCHDOG);
        conn.initialize();
        Agent { conn, next: 100 }
    }

    fn call(&mut self, tool: &str, args: Value) -> Value {
        self.next += 1;
        let reply = self.conn.call_tool(json!(self.next), tool, args);
        result(&reply).clone()
    }

    fn ok(&mut self, tool: &str, args: Value) -> Value {
        let r = self.call(tool, args.clone());
        assert_ne!(r["isError"], true, "{tool} {args}: {r}");
        r
    }
}

/// Run the red team through `tool` of the grant: inline `bash`, a `bash_start` job, or
/// (`app_open`) the listed app whose entry runs it. With `escape` the run stays alive
/// after its findings (a run's end kills what it left in its groups, §16: the escapee
/// must be seen to stay in them while the run lives), so the call is sent and its answer
/// never awaited; the revoke answers it.
fn run_through(a: &mut Agent, tool: &str, script: &Path, out: &Path, escape: bool) {
    let command = format!(
        "{} {} {}",
        script.display(),
        out.display(),
        if escape { "escape" } else { "stay" }
    );
    let args = match tool {
        "bash" | "bash_start" => json!({ "command": command }),
        "app_open" => json!({"app": "hn.RedTeam"}),
        other => panic!("no attack through {other}: add one to run_through"),
    };
    if escape {
        a.next += 1;
        a.conn.send(&json!({
            "jsonrpc": "2.0", "id": a.next, "method": "tools/call",
            "params": {"name": tool, "arguments": args},
        }));
    } else {
        a.ok(tool, args);
    }
}

/// The tools that start processes, from the registry: each is attacked by
/// [`a_desktop_grant_cannot_act_as_the_lender_through_any_tool_that_starts_processes`]
/// or the apps test.
fn process_tools() -> Vec<&'static str> {
    handnode::tools::registered()
        .iter()
        .filter(|t| t.reach == Reach::Processes)
        .map(|t| t.name)
        .collect()
}

#[test]
fn every_tool_that_reaches_the_box_is_attacked() {
    const ATTACKED: &[&str] = &["bash", "bash_start", "app_open"];
    for tool in handnode::tools::registered() {
        match tool.reach {
            Reach::Processes => assert!(
                ATTACKED.contains(&tool.name),
                "{} starts processes but tests/walls.rs does not run the red team through it",
                tool.name
            ),
            // Each is tried by the_tools_that_take_a_path_never_open_what_the_wall_hides,
            // which reads them from the registry; a path it does not name would go untried.
            Reach::Paths(args) => assert!(
                !args.is_empty(),
                "{} says it opens paths but names no path argument (Reach::Paths(&[PathArg…]))",
                tool.name
            ),
            Reach::Nothing => {}
        }
    }
}

/// Whether the wall can be built here; when not, say so (the unprivileged run prints it).
fn walls_here() -> bool {
    let path = std::env::var_os("PATH");
    match handnode::walls::probe_bwrap(path.as_deref(), handnode::walls::Kind::Grant) {
        Ok(_) => true,
        Err(why) => {
            eprintln!("SKIPPED the wall's attack tests: {why}");
            false
        }
    }
}

#[test]
fn a_desktop_grant_cannot_act_as_the_lender_through_any_tool_that_starts_processes() {
    if !walls_here() {
        return;
    }
    let pod = StubPod::start();
    let l = lender("walls-desktop", |_| {});

    // The control: an owner grant is the lender's own shell, unwalled, and reads it all.
    let (owner_id, conn) = l.d.attached(&pod, "walls-owner", "owner");
    let mut owner = Agent::new(conn);
    assert_eq!(l.d.grant(&owner_id)["isolation"], "none");
    let script = l.script("owner", &[], None);
    run_through(&mut owner, "bash", &script, &l.out("owner"), false);
    let seen = found(&l.out("owner"));
    assert!(
        seen.contains(&format!("TOKEN[{TOKEN}]")),
        "the control did not read the token: {seen}"
    );
    assert!(
        !seen.contains("GRANTS[]"),
        "the control saw no grants.json: {seen}"
    );
    assert!(
        seen.contains("BROKE the local admin socket answered"),
        "the control did not reach the local socket: {seen}"
    );

    for tool in process_tools().into_iter().filter(|t| *t != "app_open") {
        let tag = format!("desktop-{}", tool.replace('_', "-"));
        let (id, conn) = l.d.attached(&pod, &tag, "desktop");
        let g = l.d.grant(&id);
        assert_eq!(g["isolation"], "bwrap", "{g}");
        let mut a = Agent::new(conn);
        let info = a.ok("sys_info", json!({}));
        assert_eq!(info["structuredContent"]["isolation"], "bwrap", "{info}");
        let script = l.script(&tag, &[], None);
        run_through(&mut a, tool, &script, &l.out(&tag), true);
        assert_walled(&tag, &found(&l.out(&tag)));
        assert_escapee_dies_with(&l, &id, &tag);
    }
    // The lender's channel still works for the lender.
    let (status, _) = l.d.call("GET", "/attach", None);
    assert_eq!(status, 200);
}

#[test]
fn an_apps_grant_s_app_cannot_act_as_the_lender() {
    if !walls_here() {
        return;
    }
    if !Path::new("/usr/bin/Xvfb").exists() {
        eprintln!("SKIPPED an_apps_grant_s_app_cannot_act_as_the_lender: Xvfb is not installed");
        return;
    }
    let dir = temp_dir("walls-apps-screen");
    let screen = Screen::start(&dir, false);
    let data = temp_dir("walls-apps-data");
    // The entry runs the red team; its out file is fixed by the entry (no arguments).
    let out_holder = temp_dir("walls-apps-out").join("found-app");
    let script_dir = temp_dir("walls-apps-script");
    let script = script_dir.join("red-team-app");
    // `--apps` resolves the entry's program at start: it exists before the daemon does,
    // and gets the red team (which names the daemon's paths) once they are known.
    std::fs::write(&script, "#!/bin/sh\n").unwrap();
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    let exec = format!("{} {} escape", script.display(), out_holder.display());
    let path = "/usr/local/bin:/usr/bin:/bin";
    let apps = listed_app(&data, "hn.RedTeam", "Red team", &exec, path);
    let display = screen.display.clone();
    let l = lender("walls-apps", move |c| {
        c.apps = apps;
        c.display_env = Some(
            [("DISPLAY", display.as_str()), ("PATH", path)]
                .into_iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
        );
    });
    let written = l.script("app", &[], None);
    std::fs::copy(&written, &script).unwrap();
    let pod = StubPod::start();
    let (id, conn) = l.d.attached(&pod, "walls-apps", "apps");
    assert_eq!(l.d.grant(&id)["isolation"], "bwrap");
    let mut a = Agent::new(conn);
    run_through(&mut a, "app_open", &script, &out_holder, true);
    assert_walled("an apps grant's app", &found(&out_holder));
    assert_escapee_dies_with(&l, &id, "app");
}

/// An X server of the test's: the owner's display. `auth`: with a cookie, plus
/// `xhost +si:localuser:<me>` as GNOME and Xwayland set it up; without: open to every
/// local client, as in CI.
struct Screen {
    child: Child,
    display: String,
    cookie: Option<PathBuf>,
}

impl Screen {
    fn start(dir: &Path, auth: bool) -> Screen {
        let cookie = auth.then(|| dir.join(format!("owner-cookie-{}", std::process::id())));
        let mut cmd = Command::new("Xvfb");
        // -noreset: the ACL `xhost` sets would go when its client disconnects.
        cmd.args(["-displayfd", "1", "-nolisten", "tcp", "-noreset"])
            .args(["-screen", "0", "320x240x24"]);
        if let Some(c) = &cookie {
            // A cookie file the server reads; clients get it from the same file.
            let hex: String = (0..16)
                .map(|i| format!("{:02x}", (std::process::id() as u8).wrapping_mul(31) ^ i))
                .collect();
            let status = Command::new("xauth")
                .arg("-f")
                .arg(c)
                .args(["add", ":0", ".", &hex])
                .status()
                .expect("xauth runs");
            assert!(status.success());
            cmd.arg("-auth").arg(c);
        }
        let mut child = cmd
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("Xvfb runs");
        let out = child.stdout.take().unwrap();
        let (tx, rx) = crossbeam_channel::bounded(1);
        std::thread::spawn(move || {
            let mut line = String::new();
            let _ = std::io::BufRead::read_line(&mut std::io::BufReader::new(out), &mut line);
            let _ = tx.send(line);
        });
        let line = rx
            .recv_timeout(WATCHDOG)
            .expect("watchdog: the owner's Xvfb never printed its display number");
        let number: u32 = line.trim().parse().expect("a display number");
        let display = format!(":{number}");
        if let Some(c) = &cookie {
            // The cookie was written for :0; give it this display's number, then let every
            // process of this user in without one.
            let list = Command::new("xauth")
                .arg("-f")
                .arg(c)
                .arg("list")
                .output()
                .unwrap();
            let hex = String::from_utf8_lossy(&list.stdout)
                .split_whitespace()
                .last()
                .unwrap_or_default()
                .to_string();
            Command::new("xauth")
                .arg("-f")
                .arg(c)
                .args(["add", &display, ".", &hex])
                .status()
                .unwrap();
            let user = std::env::var("USER").unwrap_or_else(|_| whoami());
            let xhost = Command::new("xhost")
                .arg(format!("+si:localuser:{user}"))
                .env("DISPLAY", &display)
                .env("XAUTHORITY", c)
                .stdout(Stdio::null())
                .status();
            assert!(
                xhost.is_ok_and(|s| s.success()),
                "xhost +si:localuser failed"
            );
        }
        Screen {
            child,
            display,
            cookie,
        }
    }

    /// Whether this test process (outside any wall) reaches it with `XAUTHORITY` unset.
    fn reachable_from_outside(&self) -> bool {
        Command::new("xdpyinfo")
            .args(["-display", &self.display])
            .env_remove("XAUTHORITY")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success())
    }
}

impl Drop for Screen {
    fn drop(&mut self) {
        let _ = Command::new("kill")
            .arg(self.child.id().to_string())
            .status();
        let _ = self.child.wait();
    }
}

fn whoami() -> String {
    let out = Command::new("id").arg("-un").output().unwrap();
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

/// What the own-display tests need; without one they print why and skip.
fn own_display_here(test: &str) -> bool {
    for program in ["Xvfb", "xdpyinfo", "xhost", "xauth"] {
        if !Path::new("/usr/bin").join(program).exists() {
            eprintln!("SKIPPED {test}: {program} is not installed");
            return false;
        }
    }
    walls_here()
}

/// Whether `pasta` gives a wall its own network here. When not, `"display":"own"` must
/// be refused with a `400` that says why and what to do, and that is checked instead.
fn pasta_here(test: &str) -> bool {
    let path = std::env::var_os("PATH");
    let bwrap = handnode::walls::probe_bwrap(path.as_deref(), handnode::walls::Kind::Grant)
        .expect("walls_here");
    let Err(why) = handnode::walls::probe_pasta(path.as_deref(), &bwrap, WATCHDOG) else {
        return true;
    };
    let pod = StubPod::start();
    let l = lender("walls-no-pasta", |_| {});
    let (status, body) =
        l.d.call("POST", "/attach", Some(&own_body(&pod, "no-pasta")));
    assert_eq!(status, 400, "{body}");
    let err = body["error"].as_str().unwrap_or_default();
    assert!(
        err.contains("pasta") && err.contains("--own-display-network shared"),
        "{err}"
    );
    let (_, grants) = l.d.call("GET", "/attach", None);
    assert_eq!(
        grants["grants"].as_array().map(Vec::len),
        Some(0),
        "{grants}"
    );
    eprintln!("SKIPPED {test}: pasta cannot give a wall its own network here ({why}); checked that \"display\":\"own\" is refused with a 400 instead");
    false
}

fn own_body(pod: &StubPod, session: &str) -> Value {
    let mut body = attach_body(pod, session, "desktop");
    body["display"] = json!("own");
    body
}

#[test]
fn an_own_display_grant_reaches_neither_the_lender_nor_the_owners_display() {
    let test = "an_own_display_grant_reaches_neither_the_lender_nor_the_owners_display";
    if !own_display_here(test) || !pasta_here(test) {
        return;
    }
    let dir = temp_dir("walls-own-screens");
    let open = Screen::start(&dir, false);
    let authed = Screen::start(&dir, true);
    assert!(
        open.reachable_from_outside(),
        "the control: the open screen"
    );
    assert!(
        authed.reachable_from_outside(),
        "the control: xhost +si:localuser lets this user in without a cookie"
    );
    let displays = vec![open.display.clone(), authed.display.clone()];
    let pod = StubPod::start();
    let owner_display = open.display.clone();
    let l = lender("walls-own", move |c| {
        c.display_env = Some(
            [
                ("DISPLAY", owner_display.as_str()),
                ("PATH", "/usr/local/bin:/usr/bin:/bin"),
            ]
            .into_iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
        );
        c.own_display.size = (320, 240);
    });
    for tool in process_tools().into_iter().filter(|t| *t != "app_open") {
        let tag = format!("own-{}", tool.replace('_', "-"));
        let (id, conn) = l.d.attached_with(&pod, own_body(&pod, &tag));
        let mut a = Agent::new(conn);
        // Its own display first, so its socket is the one bound into the wall.
        a.ok("screenshot", json!({}));
        let g = l.d.grant(&id);
        assert_eq!(g["isolation"], "bwrap", "{g}");
        assert_eq!(g["own_display"]["network"], "pasta", "{g}");
        // Its own display it does reach, through the one socket bound back.
        let r = a.ok(
            "bash",
            json!({"command": "xdpyinfo >/dev/null && echo own-ok"}),
        );
        assert!(
            r["structuredContent"]["stdout"]
                .as_str()
                .is_some_and(|s| s.contains("own-ok")),
            "{tag} cannot reach its own display: {r}"
        );
        // Outbound networking works: the box's loopback ports, through pasta's gateway.
        assert!(
            reaches_box_loopback(&mut a),
            "{tag}: the box's loopback port is not reachable from the wall"
        );
        let script = l.script(&tag, &displays, authed.cookie.as_deref());
        run_through(&mut a, tool, &script, &l.out(&tag), true);
        let seen = found(&l.out(&tag));
        assert_walled(&tag, &seen);
        assert!(
            !seen.contains("REACHED"),
            "{tag} reached the owner's display: {seen}"
        );
        assert_escapee_dies_with(&l, &id, &tag);
    }
    // Each display's pasta went with it (joined by a /proc path, it never notices on its
    // own: the display's end kills it).
    poll_until(
        || orphaned_pastas(start_ticks("self").unwrap_or(0)),
        Vec::is_empty,
        |leaked| format!("watchdog: pasta outlived its wall: {leaked:#?}"),
    );
}

#[test]
fn with_a_shared_network_the_grant_json_says_so_and_the_owners_abstract_socket_is_reached() {
    if !own_display_here("with_a_shared_network") {
        return;
    }
    let dir = temp_dir("walls-shared-screens");
    let open = Screen::start(&dir, false);
    let pod = StubPod::start();
    let l = lender("walls-shared", |c| {
        c.own_display.network = handnode::config::own_display::Network::Shared;
        c.own_display.size = (320, 240);
    });
    let (id, conn) = l.d.attached_with(&pod, own_body(&pod, "walls-shared"));
    let mut a = Agent::new(conn);
    a.ok("screenshot", json!({}));
    let g = l.d.grant(&id);
    assert_eq!(g["own_display"]["network"], "shared", "{g}");
    // The spoof `shared` leaves open: /tmp/.X11-unix is still emptied, yet the X server's
    // abstract socket answers from the box's network namespace. The rest still holds.
    let script = l.script("shared", std::slice::from_ref(&open.display), None);
    run_through(&mut a, "bash", &script, &l.out("shared"), false);
    let seen = found(&l.out("shared"));
    assert_walled("a shared-network own display", &seen);
    assert!(
        seen.contains(&format!("REACHED {} without a cookie", open.display)),
        "with --own-display-network shared the abstract socket should answer: {seen}"
    );
}

/// Every tool that declares a path (from the registry, so a new one is tried too), under a
/// lent folder holding symlinks to the admin token and the state dir: each refuses them.
#[test]
fn the_tools_that_take_a_path_never_open_what_the_wall_hides() {
    let pod = StubPod::start();
    let l = lender("walls-files", |_| {});
    let lent = l.dir.join("lent");
    std::fs::create_dir_all(&lent).unwrap();
    std::os::unix::fs::symlink(&l.token_file, lent.join("tok")).unwrap();
    std::os::unix::fs::symlink(l.d.state_dir(), lent.join("state")).unwrap();
    let mut body = attach_body(&pod, "walls-files", "files");
    body["folder"] = json!(lent);
    let (_, conn) = l.d.attached_with(&pod, body);
    let mut a = Agent::new(conn);
    let lenders = ["tok", "state", "state/grants.json", "state/planted"];
    for tool in path_tools::path_tools() {
        for path in lenders {
            let args = path_tools::with_path(tool, path);
            a.next += 1;
            let r = a.conn.call_tool(json!(a.next), tool.name, args.clone());
            let tool = tool.name;
            assert!(
                r.get("error").is_some() || r["result"]["isError"] == true,
                "{tool} {args}: {r}"
            );
            assert!(!r.to_string().contains(TOKEN), "{tool} {args}: {r}");
            assert!(
                !r.to_string().contains(r#""name":"grants.json""#),
                "{tool} {args}: {r}"
            );
        }
    }
    assert!(!l.d.state_dir().join("planted").exists());
}

/// The start time (clock ticks after boot) of a process, from `/proc/<pid>/stat`.
fn start_ticks(pid: &str) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // Field 22; the command name (field 2) may hold spaces, so count after its ')'.
    stat.rsplit_once(')')?
        .1
        .split_whitespace()
        .nth(19)?
        .parse()
        .ok()
}

/// `pasta` processes started after `since` whose namespace's holder is gone: leaked.
fn orphaned_pastas(since: u64) -> Vec<String> {
    let mut leaked = Vec::new();
    for entry in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
        let pid = entry.file_name().to_string_lossy().into_owned();
        if !pid.bytes().all(|b| b.is_ascii_digit()) || start_ticks(&pid) < Some(since) {
            continue;
        }
        let cmdline = std::fs::read(entry.path().join("cmdline")).unwrap_or_default();
        let args: Vec<String> = cmdline
            .split(|b| *b == 0)
            .map(|a| String::from_utf8_lossy(a).into_owned())
            .collect();
        if !args
            .first()
            .is_some_and(|a| a.contains("pasta") || a.contains("passt"))
        {
            continue;
        }
        let target = args.iter().find_map(|a| {
            a.strip_prefix("/proc/")?
                .strip_suffix("/ns/net")
                .map(String::from)
        });
        if let Some(target) = target {
            if !Path::new("/proc").join(&target).exists() {
                leaked.push(format!("{pid} (its wall {target} is gone): {args:?}"));
            }
        }
    }
    leaked
}

/// The network namespace a walled `bash` of the grant runs in (`net:[inode]`).
fn bash_netns(a: &mut Agent) -> String {
    let r = a.ok("bash", json!({"command": "readlink /proc/self/ns/net"}));
    let out = r["structuredContent"]["stdout"]
        .as_str()
        .unwrap_or_default()
        .trim()
        .to_string();
    assert!(out.starts_with("net:["), "{r}");
    out
}

/// The holder's and pasta's pids of the grant's own display's network, from its record.
fn net_pids(l: &Lender, id: &str) -> (Vec<u32>, Value) {
    let dir = PathBuf::from(
        l.d.grant(id)["own_display"]["runtime_dir"]
            .as_str()
            .expect("a running own display"),
    );
    let record: Value =
        serde_json::from_slice(&std::fs::read(dir.join("display.json")).unwrap()).unwrap();
    let pids: Vec<u32> = record["net_pids"]
        .as_array()
        .unwrap_or_else(|| panic!("no net_pids: {record}"))
        .iter()
        .filter_map(Value::as_u64)
        .map(|p| p as u32)
        .collect();
    assert_eq!(pids.len(), 2, "{record}");
    (pids, record)
}

/// A halt kills its own display's network with the grant's processes; after resume the
/// next call makes it again (the old one's pasta gone by then), and it works.
#[test]
fn a_halt_takes_an_own_displays_network_and_the_next_call_makes_it_again() {
    let test = "a_halt_takes_an_own_displays_network_and_the_next_call_makes_it_again";
    if !own_display_here(test) || !pasta_here(test) {
        return;
    }
    let pod = StubPod::start();
    let l = lender("walls-own-halt", |c| c.own_display.size = (320, 240));
    let (id, conn) = l.d.attached_with(&pod, own_body(&pod, "own-halt"));
    let mut a = Agent::new(conn);
    let before = bash_netns(&mut a);
    let (old, _) = net_pids(&l, &id);
    let (status, v) = l.d.call("POST", "/halt", Some(&json!({"reason": "net"})));
    assert_eq!(status, 200, "{v}");
    poll_until(
        || !dead(old[0]),
        |alive| !alive,
        |_| format!("watchdog: the halt left its network's holder {}", old[0]),
    );
    let (status, v) = l.d.call("POST", "/resume", None);
    assert_eq!(status, 200, "{v}");
    let (_, conn) = pod.next_session();
    let mut a = Agent::new(conn);
    let after = bash_netns(&mut a);
    assert_ne!(after, before, "a call joined the network the halt emptied");
    let box_net = std::fs::read_link("/proc/self/ns/net").unwrap();
    assert_ne!(
        after,
        box_net.to_string_lossy(),
        "the wall runs in the box's network"
    );
    for pid in &old {
        assert!(
            dead(*pid),
            "{pid} of the old network outlived the halt and the remake"
        );
    }
    let (new, record) = net_pids(&l, &id);
    for pid in &new {
        assert!(!dead(*pid), "{pid} of {record} is not running");
    }
    // And it works: the box's loopback port through pasta.
    assert!(
        reaches_box_loopback(&mut a),
        "the remade network does not reach the box's loopback port"
    );
}

/// Its own display's network is made once (§24): every call and job of the grant joins
/// the same namespace, not the box's; its holder and pasta (the display's record names
/// them) run while the grant does, and none is left after revoke.
#[test]
fn an_own_displays_network_is_made_once_joined_by_every_call_and_gone_after_revoke() {
    let test = "an_own_displays_network_is_made_once_joined_by_every_call_and_gone_after_revoke";
    if !own_display_here(test) || !pasta_here(test) {
        return;
    }
    let pod = StubPod::start();
    let l = lender("walls-own-net", |c| c.own_display.size = (320, 240));
    let (id, conn) = l.d.attached_with(&pod, own_body(&pod, "own-net"));
    let mut a = Agent::new(conn);
    let first = bash_netns(&mut a);
    let box_net = std::fs::read_link("/proc/self/ns/net").unwrap();
    assert_ne!(
        first,
        box_net.to_string_lossy(),
        "the wall runs in the box's network"
    );
    for _ in 0..3 {
        assert_eq!(
            bash_netns(&mut a),
            first,
            "a call made a network of its own"
        );
    }
    // A job joins it too.
    let job = a.ok(
        "bash_start",
        json!({"command": "readlink /proc/self/ns/net"}),
    );
    let job_id = job["structuredContent"]["job_id"]
        .as_str()
        .unwrap_or_else(|| panic!("no job_id: {job}"))
        .to_string();
    let polled = poll_until(
        || a.ok("bash_poll", json!({"job_id": job_id, "wait_secs": 5})),
        |r| r["structuredContent"]["state"] != "running",
        |r| format!("watchdog: the job did not end: {r}"),
    );
    assert!(polled.to_string().contains(&first), "{polled}");
    // Its holder and pasta, as the display's record names them, both running.
    let (net_pids, record) = net_pids(&l, &id);
    for pid in &net_pids {
        assert!(!dead(*pid), "{pid} of {record} is not running");
    }
    let holder = net_pids[0];
    if let Ok(theirs) = std::fs::read_link(format!("/proc/{holder}/ns/net")) {
        assert_eq!(theirs.to_string_lossy(), first, "the holder's namespace");
    }
    assert!(
        cmdline(net_pids[1])
            .iter()
            .any(|a| a == &format!("/proc/{holder}/ns/net")),
        "pasta is attached to the holder's namespace: {:?}",
        cmdline(net_pids[1])
    );
    let (status, _) = l.d.call("DELETE", &format!("/attach/{id}"), None);
    assert_eq!(status, 204);
    poll_until(
        || {
            net_pids
                .iter()
                .copied()
                .filter(|p| !dead(*p))
                .collect::<Vec<_>>()
        },
        Vec::is_empty,
        |left| format!("watchdog: its network's holder or pasta outlived the grant: {left:?}"),
    );
}

#[test]
fn pasta_ends_with_its_wall() {
    if !walls_here() {
        return;
    }
    let path = std::env::var_os("PATH");
    let bwrap = handnode::walls::probe_bwrap(path.as_deref(), handnode::walls::Kind::Grant)
        .expect("walls_here");
    let since = start_ticks("self").expect("our own start time");
    for _ in 0..3 {
        if let Err(why) = handnode::walls::probe_pasta(path.as_deref(), &bwrap, WATCHDOG) {
            eprintln!("SKIPPED pasta_ends_with_its_wall: {why}");
            return;
        }
    }
    poll_until(
        || orphaned_pastas(since),
        Vec::is_empty,
        |leaked| format!("watchdog: pasta outlived its wall: {leaked:#?}"),
    );
}

/// Whether a grant's bash reaches a port listening on the box's loopback: through
/// pasta's gateway (the default route), or 127.0.0.1 where there is none.
fn reaches_box_loopback(a: &mut Agent) -> bool {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    bash_out(
        a,
        &format!(
            "gw=$(ip route | awk '/^default/ {{print $3; exit}}'); \
             (exec 3<>/dev/tcp/${{gw:-127.0.0.1}}/{port}) 2>/dev/null && echo net-ok || \
             (exec 3<>/dev/tcp/127.0.0.1/{port}) 2>/dev/null && echo net-ok"
        ),
    )
    .contains("net-ok")
}

/// What a grant's bash printed.
fn bash_out(a: &mut Agent, command: &str) -> String {
    let r = a.ok("bash", json!({ "command": command }));
    r["structuredContent"]["stdout"]
        .as_str()
        .unwrap_or_else(|| panic!("bash stdout: {r}"))
        .to_string()
}

/// §21, §23: an own display's X server, window manager and bus run in the grant's wall
/// too. The X server parses whatever the agent's clients send, so one that broke it must
/// land where the agent's shell already is. Seen from outside through each process's own
/// view of the file system (`/proc/<pid>/root`) and its namespaces: handnode's token and
/// local socket read empty, its state dir and the other grants' dirs are hidden, none shares
/// the daemon's mount or network namespace, the X server and window manager have a PID
/// namespace of their own. And the display still works: for the daemon (a window the grant
/// opens shows in its screenshot; the live view's socket answers), for the grant's shell
/// (`xdotool getmouselocation`); the name the box's X clients try first is held, so no
/// other process can take it to catch them; the grant's end takes all of it.
#[test]
fn an_own_displays_server_window_manager_and_bus_run_inside_the_grants_wall() {
    let test = "an_own_displays_server_window_manager_and_bus_run_inside_the_grants_wall";
    if !own_display_here(test) || !pasta_here(test) {
        return;
    }
    let pod = StubPod::start();
    let l = lender("walls-own-server", |c| c.own_display.size = (320, 240));
    let (id, conn) = l.d.attached_with(&pod, own_body(&pod, "own-server"));
    let mut a = Agent::new(conn);
    let blank = a.ok("screenshot", json!({}))["content"][0]["data"].clone();
    let g = l.d.grant(&id);
    let dir = PathBuf::from(g["own_display"]["runtime_dir"].as_str().unwrap());
    let record: Value =
        serde_json::from_slice(&std::fs::read(dir.join("display.json")).unwrap()).unwrap();
    let number = record["display"].as_u64().unwrap();
    let pids: Vec<u32> = record["pids"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(Value::as_u64)
        .map(|p| p as u32)
        .collect();
    assert_eq!(pids.len(), 3, "X server, window manager, bus: {record}");
    let ns = |pid: &str, kind: &str| {
        std::fs::read_link(format!("/proc/{pid}/ns/{kind}"))
            .unwrap_or_else(|e| panic!("/proc/{pid}/ns/{kind}: {e}"))
    };
    let names = |dir: &Path| -> Result<Vec<String>, std::io::ErrorKind> {
        let mut names: Vec<String> = std::fs::read_dir(dir)
            .map_err(|e| e.kind())?
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        Ok(names)
    };
    let state = l.d.state_dir();
    let parent = dir.parent().unwrap().to_path_buf();
    let own_name = dir.file_name().unwrap().to_string_lossy().into_owned();
    for (what, pid) in ["the X server", "the window manager", "the bus"]
        .into_iter()
        .zip(pids.iter().copied())
    {
        assert!(!dead(pid), "{what} ({pid}) is not running: {record}");
        let p = pid.to_string();
        assert_ne!(
            ns(&p, "mnt"),
            ns("self", "mnt"),
            "{what} sees the box's mounts"
        );
        assert_ne!(
            ns(&p, "net"),
            ns("self", "net"),
            "{what} is in the box's network"
        );
        let root = PathBuf::from(format!("/proc/{pid}/root"));
        let inside = |path: &Path| root.join(path.strip_prefix("/").unwrap());
        // The bus keeps the box's PID namespace (walls::Bwrap::display_args says why).
        if what != "the bus" {
            assert_ne!(
                ns(&p, "pid"),
                ns("self", "pid"),
                "{what} sees the box's pids"
            );
            let seen = names(&inside(Path::new("/proc"))).unwrap();
            let processes = seen.iter().filter(|n| n.parse::<u32>().is_ok()).count();
            assert!(processes < 10, "{what} sees the box's processes: {seen:?}");
        }
        // Each reads empty (a /dev/null over it), or is not there at all (beneath the
        // wall's own /tmp, where the tests keep them).
        let empty = |path: &Path| match std::fs::read(inside(path)) {
            Ok(bytes) => bytes.is_empty(),
            Err(e) => e.kind() == std::io::ErrorKind::NotFound,
        };
        assert!(empty(&l.token_file), "{what} reads handnode's token");
        assert!(empty(&l.socket), "{what} reaches the local admin socket");
        assert!(
            std::fs::read(inside(&state.join("grants.json"))).is_err(),
            "{what} reads grants.json"
        );
        // The state dir is empty (or gone with the wall's own /tmp) but for the mount
        // point of the own displays' parent when the tests keep it there; that parent
        // holds only this grant's directory.
        match names(&inside(&state)) {
            Ok(seen) => {
                let allowed: Vec<String> = parent
                    .strip_prefix(&state)
                    .ok()
                    .and_then(|p| p.components().next())
                    .map(|c| c.as_os_str().to_string_lossy().into_owned())
                    .into_iter()
                    .collect();
                assert!(
                    seen.iter().all(|n| allowed.contains(n)),
                    "{what} sees handnode's state dir: {seen:?}"
                );
            }
            Err(kind) => assert_eq!(kind, std::io::ErrorKind::NotFound, "{what}"),
        }
        assert_eq!(
            names(&inside(&parent)),
            Ok(vec![own_name.clone()]),
            "{what} sees other own displays"
        );
        // Of the box's X sockets it sees its own display's only.
        assert_eq!(
            names(&inside(Path::new("/tmp/.X11-unix"))),
            Ok(vec![format!("X{number}")]),
            "{what} sees the box's X sockets"
        );
    }
    // The box's X clients reach it by path: a link to its socket in its runtime directory;
    // the abstract name they try first is held, and no one else can take it.
    let link = PathBuf::from(format!("/tmp/.X11-unix/X{number}"));
    assert_eq!(
        std::fs::read_link(&link).ok(),
        Some(dir.join("x11").join(format!("X{number}")))
    );
    {
        use std::os::linux::net::SocketAddrExt as _;
        let name =
            std::os::unix::net::SocketAddr::from_abstract_name(link.as_os_str().as_encoded_bytes())
                .unwrap();
        let taken = std::os::unix::net::UnixListener::bind_addr(&name);
        assert!(taken.is_err(), "another process took :{number}'s name");
    }
    // The daemon still reaches it: a window the grant opens shows in its screenshot.
    a.ok(
        "bash_start",
        json!({"command": "exec xmessage -title own-server-window walled"}),
    );
    poll_until(
        || {
            bash_out(
                &mut a,
                "xdotool search --onlyvisible --name own-server-window || true",
            )
        },
        |found| !found.trim().is_empty(),
        |found| format!("watchdog: the grant's window never showed: {found:?}"),
    );
    let shown = a.ok("screenshot", json!({}))["content"][0]["data"].clone();
    assert_ne!(
        shown, blank,
        "the screenshot does not show the grant's window"
    );
    // The grant's shell reaches it.
    let mouse = bash_out(&mut a, "xdotool getmouselocation");
    assert!(mouse.contains("screen:0"), "{mouse}");
    // The live view's socket answers the daemon (Xvnc only).
    if g["own_display"]["server"] == "Xvnc" || l.d.grant(&id)["own_display"]["live_view"] == true {
        use std::io::Read as _;
        let mut rfb = std::os::unix::net::UnixStream::connect(dir.join("rfb.sock")).unwrap();
        rfb.set_read_timeout(Some(WATCHDOG)).unwrap();
        let mut version = [0u8; 12];
        rfb.read_exact(&mut version).unwrap();
        assert!(version.starts_with(b"RFB 003.00"), "{version:?}");
    }
    // The grant's end takes all of it: the three, their walls, the link.
    let (status, _) = l.d.call("DELETE", &format!("/attach/{id}"), None);
    assert_eq!(status, 204);
    poll_until(
        || {
            let left: Vec<u32> = pids.iter().copied().filter(|p| !dead(*p)).collect();
            (left, link.symlink_metadata().is_ok())
        },
        |(left, linked)| left.is_empty() && !linked,
        |left| format!("watchdog: after revoke (running, link) = {left:?}"),
    );
}
