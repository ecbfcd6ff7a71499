//! The `bwrap` walls (contract §21): one wall around every process of every non-`owner`
//! grant — its `bash` and jobs, its `app_open` apps, its throwaway browser — that keeps it
//! from acting as the lender. Owns probing `bwrap` (and `pasta`), the list of what is
//! hidden, and the arguments of each wall; `--isolation` (and the finer
//! `--browser-isolation`/`--own-display-isolation`) decide whether a box where `bwrap` does
//! not work refuses to start or goes on without the wall (with a warning).
//!
//! **What a grant's wall does.** Inside, the file system is the box's (`--dev-bind / /`),
//! except that handnode's state dir, config dir, token file, `$CREDENTIALS_DIRECTORY` and
//! local admin socket read empty, and so do the other grants' browser and display dirs.
//! `/sys/fs/cgroup` is read-only (every v1 hierarchy and `unified` beneath it) and the wall
//! has a cgroup namespace rooted at the run's own group (the child enters that group
//! before it execs `bwrap`, `cgroup::enter`), so nothing inside moves itself out of its grant's groups
//! and dies with the grant. A PID namespace with a fresh `/proc` hides every other process,
//! the daemon's among them. When `bwrap` runs with capabilities (handnode as root) the wall
//! also gets a user namespace and `--cap-drop ALL`: without that, root inside could simply
//! `umount` the tmpfs over the state dir and read the token beneath.
//!
//! **An own display's wall** also empties the owner's runtime directory, their X cookies,
//! `/tmp/.X11-unix` (its own display's socket bound back), `/tmp/.ICE-unix`, `/run/user`
//! and `/run/dbus`, and — with `pasta` — lives in a network namespace of its own, so no
//! abstract socket of the box's X servers or session buses is reachable. The namespace is
//! `bwrap`'s (`--unshare-net`); `pasta` joins it by the child's pid (`--info-fd`) before
//! the command runs (`--block-fd`), in [`NET_WRAPPER`]: `pasta` spawning `bwrap` itself
//! cannot run as root (it maps uid 0 without `CAP_SETFCAP`, which the kernel refuses).
//!
//! **Why browsers keep the box's PID namespace.** The browser tier's sweep finds chromium
//! by its tag in `/proc`, and a browser runs no command the agent chose; its wall has the
//! rest (the read-only cgroups, the user namespace as root).

use std::collections::HashMap;
use std::ffi::{OsStr, OsString};
use std::path::{Path, PathBuf};
use std::sync::{LazyLock, Mutex};

use crate::config::{Config, IsolationMode};
use crate::Error;

/// What the escalation check adds for a non-owner grant whose shell runs without the wall
/// (§21: `--isolation none`, or `auto` where `bwrap` does not work).
pub const UNWALLED_SHELL: &str = "its shell runs without the wall (isolation none): it can \
read handnode's token and grants.json and use the local admin socket, the lender's own \
channel, and so approve, renew or lend the box further";

/// Read-only inside every wall: the box's cgroup hierarchies (`/sys/fs/cgroup`, every v1
/// hierarchy and `unified` beneath it) and every other kernel knob root could write.
const SYS: &str = "/sys";

/// The shell that puts an own display's wall in its own network: `$1` is `pasta`, `$2`
/// `root` when pasta must keep uid 0 (`--runas 0`: it would drop to `nobody` before it
/// joins the wall's user namespace), the rest is `bwrap` with `--unshare-net --info-fd 3
/// --block-fd 4` and the command. Exit 125 and a line on stderr when the network cannot
/// be made; the command's own status otherwise. Every process here runs in the run's group,
/// so `pasta` ends with the run at the latest; and the wrapper kills it (by the pid it
/// wrote, `--pid`) when the wall exits, since `pasta` joined by a `/proc` path never notices
/// the namespace go (every own-display run left one behind).
pub const NET_WRAPPER: &str = r#"pasta=$1 as=$2; shift 2
d=$(mktemp -d) && mkfifo "$d/i" "$d/b" || exit 125
"$@" 3>"$d/i" 4<"$d/b" <&0 &
wall=$!
exec 5<"$d/i" 6>"$d/b"
pid=
while IFS= read -r line <&5; do
  case $line in *'"child-pid"'*) pid=$(printf '%s' "${line#*:}" | tr -cd 0-9); break ;; esac
done
if [ -z "$pid" ]; then rm -rf "$d"; wait "$wall"; exit 125; fi
set -- -q --config-net --pid "$d/pasta.pid" --netns "/proc/$pid/ns/net" --userns "/proc/$pid/ns/user"
if [ "$as" = root ]; then set -- --runas 0 "$@"; fi
if ! "$pasta" "$@" >/dev/null 2>"$d/pasta.err"; then
  echo "handnode: pasta could not give this grant's wall its network: $(head -c 400 "$d/pasta.err")" >&2
  rm -rf "$d"; kill -KILL "$wall" 2>/dev/null; wait "$wall"; exit 125
fi
net=$(tr -cd 0-9 <"$d/pasta.pid")
rm -rf "$d"
echo go >&6
exec 5<&- 6>&-
wait "$wall"; status=$?
[ -n "$net" ] && kill -KILL "$net" 2>/dev/null
exit "$status"
"#;

/// The `bwrap` program and what it hides. Inside, the whole file system is the box's
/// (`--dev-bind / /`: chromium needs `/dev/shm`, `/proc`, fonts, the display's sockets),
/// except that each hidden directory is an empty tmpfs and each hidden file reads empty.
#[derive(Clone, Debug)]
pub struct Bwrap {
    pub program: PathBuf,
    /// Emptied directories: the state dir, the config dir, `$CREDENTIALS_DIRECTORY`, the
    /// browsers' dir, the own displays' parent (and, for own-display walls, the owner's
    /// runtime directory and the box's X and bus socket dirs).
    pub hide_dirs: Vec<PathBuf>,
    /// Files that read empty: the token file (wherever it is), the local admin socket (and,
    /// for own-display walls, the owner's `$XAUTHORITY`).
    pub hide_files: Vec<PathBuf>,
    /// `bwrap` runs with capabilities (as root): give the wall a user namespace and drop
    /// every capability, so its mounts are locked.
    pub lock: bool,
    /// `pasta`, for a wall with a network namespace of its own (own displays).
    pub pasta: Option<PathBuf>,
}

impl Bwrap {
    /// A wall of `program` hiding `dirs` and `files`, locked when this process is root.
    pub fn new(program: PathBuf, hide_dirs: Vec<PathBuf>, hide_files: Vec<PathBuf>) -> Bwrap {
        Bwrap {
            program,
            hide_dirs,
            hide_files,
            lock: rustix::process::geteuid().is_root(),
            pasta: None,
        }
    }

    /// What every wall starts with: the user namespace without capabilities (as root),
    /// `--dev-bind / /` (for a grant's processes, `own_dev`, with a `/dev` of its own: no
    /// disk, input or sound device of the box, whose nodes root would open), what is
    /// hidden, and `/sys` read-only with a cgroup namespace of its own.
    fn hiding(&self, own_dev: bool) -> Vec<OsString> {
        let mut args: Vec<OsString> = Vec::new();
        if self.lock {
            args.extend(["--unshare-user", "--cap-drop", "ALL"].map(OsString::from));
        }
        args.extend(["--dev-bind", "/", "/"].map(OsString::from));
        if own_dev && !self.lock && self.pasta.is_some() {
            args.extend(dev_by_hand());
        } else if own_dev {
            args.extend(["--dev", "/dev"].map(OsString::from));
        }
        // Parents before children: a tmpfs over a parent would cover a child's mount.
        // Only paths that exist: with / bound, a missing mount point would be created on
        // the box's own file system.
        // Locked (as root), the wall has no capabilities: what lies past a directory it may
        // not pass through (another user's 0700 runtime dir) is out of its reach anyway, and
        // bwrap could not mount over it (`Can't create file at …: Permission denied`).
        let reachable = |p: &&PathBuf| !self.lock || reachable_without_caps(p);
        let mut dirs: Vec<&PathBuf> = self
            .hide_dirs
            .iter()
            .filter(|d| d.is_dir())
            .filter(reachable)
            .collect();
        dirs.sort_by_key(|d| d.components().count());
        dirs.dedup();
        for dir in dirs {
            args.push("--tmpfs".into());
            args.push(dir.into());
        }
        // Files and sockets alike (a bind mount covers any non-directory).
        let hidden = |f: &&PathBuf| f.symlink_metadata().is_ok_and(|m| !m.is_dir());
        for file in self.hide_files.iter().filter(hidden).filter(reachable) {
            args.push("--ro-bind".into());
            args.push("/dev/null".into());
            args.push(file.into());
        }
        args.extend(cgroup_args());
        args
    }

    /// `bwrap`'s arguments up to (not including) the browser's own argv, for a browser
    /// whose directory is `own` under the browsers' parent `base`: the browsers' parent
    /// is an empty tmpfs holding only this browser's own directory. `--die-with-parent`
    /// ends the browser if `bwrap` is killed (the supervisor thread that starts it lives
    /// as long as the tier).
    pub fn args(&self, own: &Path, base: &Path) -> Vec<OsString> {
        let mut args: Vec<OsString> = vec!["--die-with-parent".into()];
        args.extend(self.hiding(false));
        args.extend(own_only(base, Some(own)));
        args.push("--chdir".into());
        args.push(own.into());
        args.push("--".into());
        args
    }

    /// The program and its arguments up to (not including) what the grant runs (`bash`,
    /// an app): the grant's wall, with a fresh `/proc` in a PID namespace of its own. For
    /// a grant with its own display, `own` is `(parent, dir, x_socket)`: the own displays'
    /// parent is emptied but for the grant's `dir` (when its display has started), and its
    /// X socket is bound back into the emptied `/tmp/.X11-unix`; with `pasta`, the wall
    /// gets its own network ([`NET_WRAPPER`]). No `--die-with-parent`: the kernel ties that
    /// to the *thread* that spawned it, and a run ends through its group (§16) anyway, which
    /// holds `bwrap` and everything inside.
    pub fn grant_args(&self, own: Option<(&Path, Option<&Path>, Option<&Path>)>) -> Walled {
        let mut args = self.hiding(true);
        args.extend(["--unshare-pid", "--proc", "/proc"].map(OsString::from));
        if let Some((parent, dir, x_socket)) = own {
            args.extend(own_only(parent, dir));
            if let Some(socket) = x_socket.filter(|s| s.exists()) {
                args.extend(["--bind".into(), socket.into(), socket.into()]);
            }
        }
        match &self.pasta {
            None => {
                args.push("--".into());
                Walled {
                    program: self.program.clone(),
                    args,
                }
            }
            Some(pasta) => {
                let mut wrapped: Vec<OsString> = vec![
                    "-c".into(),
                    NET_WRAPPER.into(),
                    "handnode-wall".into(),
                    pasta.into(),
                    if self.lock { "root" } else { "user" }.into(),
                    self.program.clone().into(),
                ];
                wrapped.extend(args);
                wrapped.extend(
                    ["--unshare-net", "--info-fd", "3", "--block-fd", "4", "--"]
                        .map(OsString::from),
                );
                Walled {
                    program: PathBuf::from("/bin/sh"),
                    args: wrapped,
                }
            }
        }
    }
}

/// A walled command's program and its arguments up to what runs inside.
#[derive(Clone, Debug)]
pub struct Walled {
    pub program: PathBuf,
    pub args: Vec<OsString>,
}

impl Walled {
    /// Make `file` (a file or socket bound into the wall) read as `/dev/null` inside: an
    /// own display's live-view socket (§23) in the grant's own runtime directory.
    pub fn cover_file(&mut self, file: &Path) {
        // Before the `--` that ends bwrap's options (last, whether or not pasta wraps it).
        let Some(end) = self.args.iter().rposition(|a| a == "--") else {
            return;
        };
        let cover: [OsString; 3] = ["--ro-bind".into(), "/dev/null".into(), file.into()];
        self.args.splice(end..end, cover);
    }
}

/// Whether uid 0 without capabilities (a locked wall's root) may pass through every
/// directory above `path`: by the owner's bits where root owns it, the group's where its
/// group is 0, else the others'.
fn reachable_without_caps(path: &Path) -> bool {
    use std::os::unix::fs::MetadataExt as _;
    path.ancestors().skip(1).all(|dir| {
        let Ok(m) = std::fs::metadata(dir) else {
            return false;
        };
        let bit = if m.uid() == 0 {
            0o100
        } else if m.gid() == 0 {
            0o010
        } else {
            0o001
        };
        m.mode() & bit != 0
    })
}

/// The few nodes of a `/dev` of its own, for an unprivileged wall that `pasta` joins.
/// `bwrap --dev` mounts a `devpts` there, which run as a user it can only do as uid 0 of
/// its user namespace, so it nests a second one to give the command back the user's uid;
/// the network namespace stays owned by the outer one, which no process is left in, and
/// `pasta` cannot join it (`Couldn't switch to pasta namespaces`). So no ptys in this wall
/// (a terminal emulator needs `--own-display-network shared`), and none of the box's.
fn dev_by_hand() -> Vec<OsString> {
    let mut args: Vec<OsString> = ["--tmpfs", "/dev"].map(OsString::from).to_vec();
    for node in ["null", "zero", "full", "random", "urandom", "tty"] {
        let path = format!("/dev/{node}");
        if Path::new(&path).exists() {
            args.extend(["--dev-bind".into(), path.clone().into(), path.into()]);
        }
    }
    for (target, link) in [
        ("/proc/self/fd", "/dev/fd"),
        ("/proc/self/fd/0", "/dev/stdin"),
        ("/proc/self/fd/1", "/dev/stdout"),
        ("/proc/self/fd/2", "/dev/stderr"),
    ] {
        args.extend(["--symlink", target, link].map(OsString::from));
    }
    args.extend(["--tmpfs", "/dev/shm"].map(OsString::from));
    args
}

/// `/sys` read-only (bwrap remounts every submount read-only too, `/sys/fs/cgroup` and
/// its hierarchies among them) and a cgroup namespace.
fn cgroup_args() -> Vec<OsString> {
    let mut args = Vec::new();
    if Path::new(SYS).is_dir() {
        args.extend(["--ro-bind", SYS, SYS].map(OsString::from));
    }
    args.push("--unshare-cgroup".into());
    args
}

/// `parent` emptied, then `own` (when it exists) bound back at its own path.
fn own_only(parent: &Path, own: Option<&Path>) -> Vec<OsString> {
    let mut args: Vec<OsString> = vec!["--tmpfs".into(), parent.into()];
    if let Some(own) = own.filter(|o| o.is_dir()) {
        args.extend(["--bind".into(), own.into(), own.into()]);
    }
    args
}

/// Which wall a probe checks and which flag chooses it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Kind {
    /// A throwaway browser's: the box's PID namespace.
    Browser,
    /// Every other non-owner grant's processes: a PID namespace and a fresh `/proc`, which
    /// some containers refuse where a plain mount namespace works.
    Grant,
    /// An own display's grant: as `Grant`, plus its own network through `pasta` when
    /// `--own-display-network pasta`.
    OwnDisplay,
}

impl Kind {
    /// The flag that chooses this wall.
    pub fn flag(self) -> &'static str {
        match self {
            Kind::Browser => "--browser-isolation",
            Kind::Grant => "--isolation",
            Kind::OwnDisplay => "--own-display-isolation",
        }
    }
}

/// Probes already run in this process, by `PATH` and kind: a daemon probes once at start,
/// and in-process tests start hundreds.
static PROBED: LazyLock<Mutex<HashMap<ProbeKey, Result<PathBuf, String>>>> =
    LazyLock::new(Default::default);

/// A probe's `PATH` and kind.
type ProbeKey = (Option<OsString>, Kind);

/// Find `bwrap` on `path` (a `PATH` value) and check it can build `kind`'s wall here (it
/// needs unprivileged user namespaces unless run as root). `Err` says what to do.
pub fn probe_bwrap(path: Option<&OsStr>, kind: Kind) -> Result<PathBuf, String> {
    // An own display's probe is a grant's: its network is probed by `probe_pasta`.
    let kind = if kind == Kind::OwnDisplay {
        Kind::Grant
    } else {
        kind
    };
    let key = (path.map(OsStr::to_os_string), kind);
    if let Some(known) = PROBED.lock().unwrap_or_else(|e| e.into_inner()).get(&key) {
        return known.clone();
    }
    let found = probe_bwrap_uncached(path, kind);
    PROBED
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .insert(key, found.clone());
    found
}

fn probe_bwrap_uncached(path: Option<&OsStr>, kind: Kind) -> Result<PathBuf, String> {
    let Some(program) = find_on(path, "bwrap") else {
        return Err("bwrap is not installed (Debian/Ubuntu: apt-get install bubblewrap)".into());
    };
    let wall = Bwrap::new(program.clone(), vec![std::env::temp_dir()], Vec::new());
    let mut cmd = std::process::Command::new(&program);
    cmd.arg("--die-with-parent")
        .args(wall.hiding(kind == Kind::Grant));
    if kind == Kind::Grant {
        cmd.args(["--unshare-pid", "--proc", "/proc"]);
    }
    let out = cmd
        .args(["--", "true"])
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .output();
    match out {
        Ok(o) if o.status.success() => Ok(program),
        Ok(o) => Err(format!(
            "{} does not work here ({}): {} (it needs unprivileged user namespaces: \
             sysctl kernel.unprivileged_userns_clone=1, or an AppArmor profile for bwrap; \
             and cgroup namespaces{})",
            program.display(),
            o.status,
            String::from_utf8_lossy(&o.stderr).trim(),
            match kind {
                Kind::Browser => "",
                _ => "; and a PID namespace with its own /proc, which some containers refuse",
            }
        )),
        Err(e) => Err(format!("cannot run {}: {e}", program.display())),
    }
}

/// Find `pasta` on `path` and check it gives a wall made by `bwrap` its own network here.
pub fn probe_pasta(path: Option<&OsStr>, bwrap: &Path) -> Result<PathBuf, String> {
    let Some(pasta) = find_on(path, "pasta") else {
        return Err("pasta is not installed (Debian/Ubuntu: apt-get install passt)".into());
    };
    let mut wall = Bwrap::new(bwrap.to_path_buf(), Vec::new(), Vec::new());
    wall.pasta = Some(pasta.clone());
    let walled = wall.grant_args(None);
    let out = std::process::Command::new(&walled.program)
        .args(&walled.args)
        .arg("true")
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .output();
    match out {
        Ok(o) if o.status.success() => Ok(pasta),
        Ok(o) => Err(format!(
            "{} cannot give a wall its own network here ({}): {}",
            pasta.display(),
            o.status,
            String::from_utf8_lossy(&o.stderr).trim()
        )),
        Err(e) => Err(format!("cannot run /bin/sh for pasta: {e}")),
    }
}

fn find_on(path: Option<&OsStr>, name: &str) -> Option<PathBuf> {
    path.map(std::env::split_paths)
        .into_iter()
        .flatten()
        .map(|d| d.join(name))
        .find(|p| p.is_file())
}

/// The wall `mode` asks for, probed on this box: `bwrap` that cannot work is a
/// configuration error (exit 2); `auto` goes on without it and warns (`unwalled` says
/// what that means); `none` is none. `extra_dirs`/`extra_files` are hidden besides
/// handnode's own files.
pub fn for_mode(
    mode: IsolationMode,
    kind: Kind,
    config: &Config,
    extra_dirs: Vec<PathBuf>,
    extra_files: Vec<PathBuf>,
    unwalled: &str,
) -> Result<Option<Bwrap>, Error> {
    if mode == IsolationMode::None {
        return Ok(None);
    }
    match probe_bwrap(std::env::var_os("PATH").as_deref(), kind) {
        Ok(program) => Ok(Some(Bwrap::new(
            program,
            handnode_dirs(config)
                .into_iter()
                .chain(extra_dirs)
                .collect(),
            handnode_files(config)
                .into_iter()
                .chain(extra_files)
                .collect(),
        ))),
        Err(why) if mode == IsolationMode::Bwrap => {
            Err(Error::Config(format!("{} bwrap: {why}", kind.flag())))
        }
        Err(why) => {
            log::warn!(
                "{unwalled}: {why}; pass {} none to silence this",
                kind.flag()
            );
            Ok(None)
        }
    }
}

/// The wall of every non-owner grant without its own display (§21), as `--isolation` asks:
/// besides handnode's files, the browsers' dir and the own displays' parent.
pub fn for_grants(config: &Config, browser_dir: Option<PathBuf>) -> Result<Option<Bwrap>, Error> {
    for_mode(
        config.isolation,
        Kind::Grant,
        config,
        browser_dir
            .into_iter()
            .chain([config.own_display.parent()])
            .collect(),
        Vec::new(),
        "the shells of grants are not walled from handnode's files and the local admin \
         socket (the lender's channel)",
    )
}

/// The wall of own-display grants (§19, §21), as `--own-display-isolation` (else
/// `--isolation`) asks: besides handnode's files, the owner's runtime directory (their
/// session bus, Wayland socket, `systemd --user`), their X cookies (`$XAUTHORITY`,
/// `~/.Xauthority`), the box's X and bus socket dirs and the browsers' directory
/// (`browser_dir`); with `--own-display-network pasta`, its own network, and a box without
/// `pasta` is refused here only when `bwrap` is required (else `"display":"own"` is `400`,
/// [`OwnDisplayWall::refusal`]). Other grants' own displays are hidden per call
/// ([`Bwrap::grant_args`]).
pub fn for_own_display_shells(
    config: &Config,
    browser_dir: Option<PathBuf>,
) -> Result<OwnDisplayWall, Error> {
    let env_path = |name: &str| {
        std::env::var_os(name)
            .map(PathBuf::from)
            .filter(|p| p.is_absolute())
    };
    let owner_runtime = env_path("XDG_RUNTIME_DIR").filter(|p| !is_shared_dir(p));
    // X clients read `$XAUTHORITY`, else `~/.Xauthority`: both are the owner's cookies.
    let cookies = env_path("XAUTHORITY")
        .into_iter()
        .chain(env_path("HOME").map(|h| h.join(".Xauthority")))
        .collect();
    let x_tmp = &config.own_display.x_tmp;
    let sockets = [
        x_tmp.join(".X11-unix"),
        x_tmp.join(".ICE-unix"),
        PathBuf::from("/run/user"),
        PathBuf::from("/run/dbus"),
    ];
    let wall = for_mode(
        config.own_display_wall_mode(),
        Kind::OwnDisplay,
        config,
        owner_runtime
            .into_iter()
            .chain(browser_dir)
            .chain(sockets)
            .collect(),
        cookies,
        "the shells of grants with their own display are not walled from each other, \
         from the owner's session or from handnode's files",
    )?;
    let Some(mut wall) = wall else {
        return Ok(OwnDisplayWall {
            wall: None,
            network: crate::config::own_display::Network::Shared,
            refusal: None,
        });
    };
    let network = config.own_display.network;
    if network == crate::config::own_display::Network::Shared {
        return Ok(OwnDisplayWall {
            wall: Some(wall),
            network,
            refusal: None,
        });
    }
    match probe_pasta(std::env::var_os("PATH").as_deref(), &wall.program) {
        Ok(pasta) => {
            wall.pasta = Some(pasta);
            Ok(OwnDisplayWall {
                wall: Some(wall),
                network,
                refusal: None,
            })
        }
        Err(why) => {
            log::warn!(
                "\"display\":\"own\" is refused: {why}; pass --own-display-network shared to \
                 lend own displays whose shells share the box's abstract sockets"
            );
            Ok(OwnDisplayWall {
                wall: Some(wall),
                network,
                refusal: Some(format!(
                    "\"display\":\"own\" needs pasta on this box for the grant's own network: \
                     {why}; or the operator starts handnode with --own-display-network shared"
                )),
            })
        }
    }
}

/// The wall of own-display grants, as probed at start.
#[derive(Clone, Debug)]
pub struct OwnDisplayWall {
    /// `None`: no wall (`none`, or `auto` without a working `bwrap`).
    pub wall: Option<Bwrap>,
    /// The grant JSON's `own_display.network`.
    pub network: crate::config::own_display::Network,
    /// Why `"display":"own"` is refused here (`400`): `pasta` is asked for and missing.
    pub refusal: Option<String>,
}

impl Default for OwnDisplayWall {
    fn default() -> Self {
        OwnDisplayWall {
            wall: None,
            network: crate::config::own_display::Network::Shared,
            refusal: None,
        }
    }
}

/// A directory everybody uses, never emptied whole (a runtime dir pointed at `/tmp`).
fn is_shared_dir(p: &Path) -> bool {
    ["/", "/tmp", "/var/tmp", "/run", "/dev/shm"]
        .iter()
        .any(|s| p == Path::new(s))
}

/// The directories a walled process must find empty: the state dir (grants.json, the
/// audit, jobs), the config dir (the default token file), `$CREDENTIALS_DIRECTORY`.
fn handnode_dirs(config: &Config) -> Vec<PathBuf> {
    let mut dirs = vec![config.state_dir.clone(), config.config_dir.clone()];
    if let Some(creds) = std::env::var_os("CREDENTIALS_DIRECTORY").filter(|c| !c.is_empty()) {
        dirs.push(PathBuf::from(creds));
    }
    dirs
}

/// The token file, wherever `--token-file` put it, and the local admin socket (issue 30),
/// which answers any process of the daemon's uid without a credential: a walled process
/// runs as that uid, so inside the wall the socket's path is `/dev/null` and connecting
/// fails.
fn handnode_files(config: &Config) -> Vec<PathBuf> {
    config
        .token_source
        .as_deref()
        .map(PathBuf::from)
        .into_iter()
        .chain(config.local_socket.clone())
        .filter(|p| p.is_absolute())
        .collect()
}

/// What the file tools of a grant with its own display may not reach (§19): what the wall
/// around its shell hides, the other grants' own displays among it, and the box's `/proc`
/// (whose `<pid>/root` shows any process's files; the wall has a `/proc` of its own). The
/// file tools run in the daemon, outside any wall, so they check each descriptor they open
/// against it (`tools::paths`).
#[derive(Clone, Debug, Default)]
pub struct Fence {
    /// Directories and files refused, with all beneath them.
    pub hidden: Vec<PathBuf>,
    /// Beneath a hidden directory, still reachable: the grant's own runtime directory.
    pub except: Option<PathBuf>,
}

impl Fence {
    /// Whether the file at `real` (a path the kernel gave for an open descriptor) is
    /// kept out.
    pub fn refuses(&self, real: &Path) -> bool {
        if self.except.as_deref().is_some_and(|e| real.starts_with(e)) {
            return false;
        }
        real.starts_with("/proc") || self.hidden.iter().any(|h| real.starts_with(h))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_fence_refuses_what_is_hidden_and_proc_but_not_the_grants_own_directory() {
        let fence = Fence {
            hidden: vec![
                PathBuf::from("/s/state"),
                PathBuf::from("/s/state/displays"),
            ],
            except: Some(PathBuf::from("/s/state/displays/mine")),
        };
        assert!(fence.refuses(Path::new("/s/state/grants.json")));
        assert!(fence.refuses(Path::new("/s/state/displays/theirs/xauth")));
        assert!(fence.refuses(Path::new("/proc/1/root/etc/passwd")));
        assert!(!fence.refuses(Path::new("/s/state/displays/mine/xauth")));
        // Components, not prefixes of a name.
        assert!(!fence.refuses(Path::new("/s/stateful/x")));
        assert!(!fence.refuses(Path::new("/procfs-notes")));
        assert!(!fence.refuses(Path::new("/home/me/notes")));
    }

    fn strings(args: &[OsString]) -> Vec<String> {
        args.iter()
            .map(|a| a.to_string_lossy().into_owned())
            .collect()
    }

    fn wall(hide_dirs: Vec<PathBuf>, hide_files: Vec<PathBuf>, lock: bool) -> Bwrap {
        Bwrap {
            program: PathBuf::from("/usr/bin/bwrap"),
            hide_dirs,
            hide_files,
            lock,
            pasta: None,
        }
    }

    #[test]
    fn a_grant_wall_hides_parents_first_then_binds_only_its_own_display_back() {
        let root = std::env::temp_dir().join(format!("hn-walls-{}", std::process::id()));
        let parent = root.join("displays");
        let own = parent.join("g1");
        let other = parent.join("g2");
        std::fs::create_dir_all(&own).unwrap();
        std::fs::create_dir_all(&other).unwrap();
        let state = root.join("state");
        std::fs::create_dir_all(&state).unwrap();
        let socket = root.join("X77");
        std::fs::write(&socket, "").unwrap();
        let w = wall(
            vec![state.clone(), root.clone(), root.join("missing")],
            vec![root.join("no-such-token")],
            false,
        );
        let walled = w.grant_args(Some((&parent, Some(&own), Some(&socket))));
        assert_eq!(walled.program, PathBuf::from("/usr/bin/bwrap"));
        let args = strings(&walled.args);
        let at = |s: &str| args.iter().position(|a| a == s).unwrap();
        assert_eq!(&args[..5], ["--dev-bind", "/", "/", "--dev", "/dev"]);
        // The shallower directory first; a missing one and a missing file are skipped.
        assert!(at(&root.display().to_string()) < at(&state.display().to_string()));
        assert!(!args
            .iter()
            .any(|a| a.contains("missing") || a.contains("token")));
        // Cgroups read-only in a namespace of their own, a fresh /proc in its own PID
        // namespace, then the parent emptied, then only this grant's directory and X
        // socket back; nothing names the other grant's.
        assert!(args.windows(3).any(|w| w == ["--ro-bind", SYS, SYS]));
        assert!(args.windows(2).any(|w| w == ["--dev", "/dev"]));
        assert!(args.iter().any(|a| a == "--unshare-cgroup"));
        assert!(args
            .windows(3)
            .any(|w| w == ["--unshare-pid", "--proc", "/proc"]));
        let p = parent.display().to_string();
        let o = own.display().to_string();
        let x = socket.display().to_string();
        let tail = &args[args.len() - 9..];
        assert_eq!(
            tail,
            ["--tmpfs", &p, "--bind", &o, &o, "--bind", &x, &x, "--"]
        );
        assert!(!args.iter().any(|a| a.contains("g2")));
        // Not root: no user namespace asked for (bwrap makes one anyway, without caps).
        assert!(!args.iter().any(|a| a == "--unshare-user"));
        // A display not started yet: the parent is emptied and nothing is bound back.
        let idle = strings(
            &w.grant_args(Some((&parent, Some(&parent.join("g3")), None)))
                .args,
        );
        assert_eq!(&idle[idle.len() - 3..], ["--tmpfs", &p, "--"]);
        let _ = std::fs::remove_dir_all(&root);
    }

    #[test]
    fn as_root_every_wall_drops_every_capability_in_a_user_namespace_first() {
        let w = wall(Vec::new(), Vec::new(), true);
        for args in [
            w.grant_args(None).args,
            w.args(Path::new("/x/b1"), Path::new("/x")),
        ] {
            let args = strings(&args);
            let user = args.iter().position(|a| a == "--unshare-user").unwrap();
            let caps = args
                .windows(2)
                .position(|w| w == ["--cap-drop", "ALL"])
                .unwrap();
            let root = args
                .windows(3)
                .position(|w| w == ["--dev-bind", "/", "/"])
                .unwrap();
            assert!(user < root && caps < root, "{args:?}");
        }
    }

    #[test]
    fn with_pasta_the_wall_is_wrapped_and_blocks_until_its_network_is_up() {
        let mut w = wall(Vec::new(), Vec::new(), true);
        w.pasta = Some(PathBuf::from("/usr/bin/pasta"));
        let walled = w.grant_args(None);
        assert_eq!(walled.program, PathBuf::from("/bin/sh"));
        let args = strings(&walled.args);
        assert_eq!(args[0], "-c");
        assert_eq!(args[1], NET_WRAPPER);
        assert_eq!(&args[3..6], ["/usr/bin/pasta", "root", "/usr/bin/bwrap"]);
        let tail = &args[args.len() - 6..];
        assert_eq!(
            tail,
            ["--unshare-net", "--info-fd", "3", "--block-fd", "4", "--"]
        );
    }

    #[test]
    fn a_locked_wall_leaves_out_what_root_without_capabilities_cannot_reach() {
        use std::os::unix::fs::PermissionsExt as _;
        if !rustix::process::geteuid().is_root() {
            return; // chown to another user needs root
        }
        let base = std::env::temp_dir().join(format!("hn-walls-reach-{}", std::process::id()));
        let foreign = base.join("foreign");
        std::fs::create_dir_all(foreign.join("dir")).unwrap();
        std::fs::write(foreign.join("sock"), b"").unwrap();
        std::fs::create_dir_all(base.join("open/dir")).unwrap();
        std::os::unix::fs::chown(&foreign, Some(65534), Some(65534)).unwrap();
        std::fs::set_permissions(&foreign, std::fs::Permissions::from_mode(0o700)).unwrap();
        let dirs = vec![foreign.join("dir"), base.join("open/dir")];
        let files = vec![foreign.join("sock")];
        let locked = strings(
            &wall(dirs.clone(), files.clone(), true)
                .grant_args(None)
                .args,
        );
        let has = |args: &[String], p: &Path| args.iter().any(|a| a == &p.display().to_string());
        assert!(!has(&locked, &foreign.join("dir")), "{locked:?}");
        assert!(!has(&locked, &foreign.join("sock")), "{locked:?}");
        assert!(has(&locked, &base.join("open/dir")), "{locked:?}");
        // Unlocked, the wall is the daemon's own user, who made these: all of it is hidden.
        let open = strings(&wall(dirs, files, false).grant_args(None).args);
        assert!(has(&open, &foreign.join("dir")) && has(&open, &foreign.join("sock")));
        let _ = std::fs::remove_dir_all(&base);
    }

    #[test]
    fn an_unprivileged_wall_that_pasta_joins_builds_its_dev_without_devpts() {
        let mut w = wall(Vec::new(), Vec::new(), false);
        w.pasta = Some(PathBuf::from("/usr/bin/pasta"));
        let args = strings(&w.grant_args(None).args);
        assert!(!args.windows(2).any(|a| a == ["--dev", "/dev"]), "{args:?}");
        assert!(
            args.windows(2).any(|a| a == ["--tmpfs", "/dev"]),
            "{args:?}"
        );
        assert!(!args.iter().any(|a| a.starts_with("/dev/pts")), "{args:?}");
        // Root's wall keeps bwrap's own /dev: no nested user namespace is made there.
        w.lock = true;
        let args = strings(&w.grant_args(None).args);
        assert!(args.windows(2).any(|a| a == ["--dev", "/dev"]), "{args:?}");
    }

    #[test]
    fn a_browser_wall_keeps_the_box_pid_namespace_and_starts_in_its_own_directory() {
        let w = wall(Vec::new(), Vec::new(), false);
        let base = std::env::temp_dir();
        let args = strings(&w.args(&base.join("b1"), &base));
        assert_eq!(args[0], "--die-with-parent");
        assert!(!args.iter().any(|a| a == "--unshare-pid"));
        assert!(args.iter().any(|a| a == "--unshare-cgroup"));
        assert!(args.windows(2).any(|w| w[0] == "--chdir"));
        assert_eq!(args.last().unwrap(), "--");
    }

    #[test]
    fn shared_runtime_dirs_are_never_emptied_whole() {
        assert!(is_shared_dir(Path::new("/tmp")));
        assert!(!is_shared_dir(Path::new("/run/user/1000")));
    }
}
