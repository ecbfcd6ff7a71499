//! The `bwrap` walls: the mount (and, for shells, PID) namespaces that keep a throwaway
//! browser (contract §14) and the shell of a grant with its own display (§19) away from
//! handnode's files, from the owner's session and from other grants' browsers and
//! displays. Owns probing `bwrap`, the list of what is hidden, and the arguments of each
//! wall; `--browser-isolation` and `--own-display-isolation` decide whether a box where
//! `bwrap` does not work refuses to start or goes on without the wall (with a warning).
//!
//! **Why a PID namespace for shells and not for browsers.** Every grant runs as the
//! daemon's user, and `/proc/<pid>/root` of any process of that user opens the file
//! system as *that process* sees it: a shell that only had a tmpfs over another grant's
//! runtime directory could read the other grant's X cookie through its X server's
//! `/proc/<pid>/root`. A fresh `/proc` in a new PID namespace shows the shell only its
//! own processes. Browsers keep the box's PID namespace: the tier's sweep finds chromium
//! by its tag in `/proc`, and a browser runs no command the agent chose.

use std::ffi::OsString;
use std::path::{Path, PathBuf};

use crate::config::{Config, IsolationMode};
use crate::Error;

/// The `bwrap` program and what it hides. Inside, the whole file system is the box's
/// (`--dev-bind / /`: chromium needs `/dev/shm`, `/proc`, fonts, the display's sockets),
/// except that each hidden directory is an empty tmpfs and each hidden file reads empty.
#[derive(Clone, Debug)]
pub struct Bwrap {
    pub program: PathBuf,
    /// Emptied directories: the state dir, the config dir, `$CREDENTIALS_DIRECTORY`
    /// (and, for own-display shells, the owner's runtime directory and the browsers').
    pub hide_dirs: Vec<PathBuf>,
    /// Files that read empty: the token file (wherever it is), the local admin socket (and,
    /// for own-display shells, the owner's `$XAUTHORITY`).
    pub hide_files: Vec<PathBuf>,
}

impl Bwrap {
    /// `--dev-bind / /` and what is hidden: the start of every wall.
    fn hiding(&self) -> Vec<OsString> {
        let mut args: Vec<OsString> = vec!["--dev-bind".into(), "/".into(), "/".into()];
        // Parents before children: a tmpfs over a parent would cover a child's mount.
        // Only paths that exist: with / bound, a missing mount point would be created on
        // the box's own file system.
        let mut dirs: Vec<&PathBuf> = self.hide_dirs.iter().filter(|d| d.is_dir()).collect();
        dirs.sort_by_key(|d| d.components().count());
        dirs.dedup();
        for dir in dirs {
            args.push("--tmpfs".into());
            args.push(dir.into());
        }
        // Files and sockets alike (a bind mount covers any non-directory).
        let hidden = |f: &&PathBuf| f.symlink_metadata().is_ok_and(|m| !m.is_dir());
        for file in self.hide_files.iter().filter(hidden) {
            args.push("--ro-bind".into());
            args.push("/dev/null".into());
            args.push(file.into());
        }
        args
    }

    /// `bwrap`'s arguments up to (not including) the browser's own argv, for a browser
    /// whose directory is `own` under the browsers' parent `base`: the browsers' parent
    /// is an empty tmpfs holding only this browser's own directory. `--die-with-parent`
    /// ends the browser if `bwrap` is killed (the supervisor thread that starts it lives
    /// as long as the tier).
    pub fn args(&self, own: &Path, base: &Path) -> Vec<OsString> {
        let mut args: Vec<OsString> = vec!["--die-with-parent".into()];
        args.extend(self.hiding());
        args.extend(own_only(base, Some(own)));
        args.push("--chdir".into());
        args.push(own.into());
        args.push("--".into());
        args
    }

    /// `bwrap`'s arguments up to (not including) `bash`, for the shell of a grant whose
    /// own display's runtime directory is `own` (when it has started) under the own
    /// displays' parent `parent`: that parent is an empty tmpfs holding only `own`, and
    /// a fresh `/proc` in a new PID namespace shows the shell only its own processes (see
    /// the module doc). No `--die-with-parent`: the kernel ties that to the *thread* that
    /// spawned it, and a run ends through its group (§16) anyway, which holds `bwrap` and
    /// everything inside.
    pub fn shell_args(&self, parent: &Path, own: Option<&Path>) -> Vec<OsString> {
        let mut args = self.hiding();
        args.extend(["--unshare-pid", "--proc", "/proc"].map(OsString::from));
        args.extend(own_only(parent, own));
        args.push("--".into());
        args
    }
}

/// `parent` emptied, then `own` (when it exists) bound back at its own path.
fn own_only(parent: &Path, own: Option<&Path>) -> Vec<OsString> {
    let mut args: Vec<OsString> = vec!["--tmpfs".into(), parent.into()];
    if let Some(own) = own.filter(|o| o.is_dir()) {
        args.extend(["--bind".into(), own.into(), own.into()]);
    }
    args
}

/// Which wall a probe checks: a shell's needs a PID namespace and a fresh `/proc`, which
/// some containers refuse where a plain mount namespace works.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    Browser,
    Shell,
}

impl Kind {
    /// The flag that chooses this wall.
    pub fn flag(self) -> &'static str {
        match self {
            Kind::Browser => "--browser-isolation",
            Kind::Shell => "--own-display-isolation",
        }
    }
}

/// Find `bwrap` on `path` (a `PATH` value) and check it can build `kind`'s namespaces here
/// (it needs unprivileged user namespaces unless run as root). `Err` says what to do.
pub fn probe_bwrap(path: Option<&std::ffi::OsStr>, kind: Kind) -> Result<PathBuf, String> {
    let found = path
        .map(std::env::split_paths)
        .into_iter()
        .flatten()
        .map(|d| d.join("bwrap"))
        .find(|p| p.is_file());
    let Some(program) = found else {
        return Err("bwrap is not installed (Debian/Ubuntu: apt-get install bubblewrap)".into());
    };
    let mut cmd = std::process::Command::new(&program);
    cmd.args([
        "--die-with-parent",
        "--dev-bind",
        "/",
        "/",
        "--tmpfs",
        "/tmp",
    ]);
    if kind == Kind::Shell {
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
             sysctl kernel.unprivileged_userns_clone=1, or an AppArmor profile for bwrap{})",
            program.display(),
            o.status,
            String::from_utf8_lossy(&o.stderr).trim(),
            match kind {
                Kind::Browser => "",
                Kind::Shell =>
                    "; and a PID namespace with its own /proc, which some containers refuse",
            }
        )),
        Err(e) => Err(format!("cannot run {}: {e}", program.display())),
    }
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
        Ok(program) => Ok(Some(Bwrap {
            program,
            hide_dirs: handnode_dirs(config)
                .into_iter()
                .chain(extra_dirs)
                .collect(),
            hide_files: handnode_files(config)
                .into_iter()
                .chain(extra_files)
                .collect(),
        })),
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

/// The wall of own-display shells (§19), as `--own-display-isolation` asks: besides
/// handnode's files, the owner's runtime directory (their session bus, Wayland socket,
/// `systemd --user`), their X cookies (`$XAUTHORITY`, `~/.Xauthority`), and the browsers'
/// directory (`browser_dir`). Other grants' own displays are hidden per call
/// ([`Bwrap::shell_args`]).
pub fn for_own_display_shells(
    config: &Config,
    browser_dir: Option<PathBuf>,
) -> Result<Option<Bwrap>, Error> {
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
    for_mode(
        config.own_display.isolation,
        Kind::Shell,
        config,
        owner_runtime.into_iter().chain(browser_dir).collect(),
        cookies,
        "the shells of grants with their own display are not walled from each other \
         or from handnode's files",
    )
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
/// against it (`tools::files::folder`).
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

    #[test]
    fn a_shell_wall_hides_parents_first_then_binds_only_its_own_display_back() {
        let root = std::env::temp_dir().join(format!("hn-walls-{}", std::process::id()));
        let parent = root.join("displays");
        let own = parent.join("g1");
        let other = parent.join("g2");
        std::fs::create_dir_all(&own).unwrap();
        std::fs::create_dir_all(&other).unwrap();
        let state = root.join("state");
        std::fs::create_dir_all(&state).unwrap();
        let wall = Bwrap {
            program: PathBuf::from("/usr/bin/bwrap"),
            hide_dirs: vec![state.clone(), root.clone(), root.join("missing")],
            hide_files: vec![root.join("no-such-token")],
        };
        let args = strings(&wall.shell_args(&parent, Some(&own)));
        let at = |s: &str| args.iter().position(|a| a == s).unwrap();
        assert_eq!(&args[..3], ["--dev-bind", "/", "/"]);
        // The shallower directory first; a missing one and a missing file are skipped.
        assert!(at(&root.display().to_string()) < at(&state.display().to_string()));
        assert!(!args
            .iter()
            .any(|a| a.contains("missing") || a.contains("token")));
        // The fresh /proc in its own PID namespace, then the parent emptied, then only
        // this grant's directory back; nothing names the other grant's.
        assert!(args
            .windows(3)
            .any(|w| w == ["--unshare-pid", "--proc", "/proc"]));
        let p = parent.display().to_string();
        let o = own.display().to_string();
        let tail = &args[args.len() - 6..];
        assert_eq!(tail, ["--tmpfs", &p, "--bind", &o, &o, "--"]);
        assert!(!args.iter().any(|a| a.contains("g2")));
        // A display not started yet: the parent is emptied and nothing is bound back.
        let idle = strings(&wall.shell_args(&parent, Some(&parent.join("g3"))));
        assert_eq!(&idle[idle.len() - 3..], ["--tmpfs", &p, "--"]);
        let _ = std::fs::remove_dir_all(&root);
    }

    #[test]
    fn a_browser_wall_keeps_the_box_pid_namespace_and_starts_in_its_own_directory() {
        let wall = Bwrap {
            program: PathBuf::from("/usr/bin/bwrap"),
            hide_dirs: Vec::new(),
            hide_files: Vec::new(),
        };
        let base = std::env::temp_dir();
        let args = strings(&wall.args(&base.join("b1"), &base));
        assert_eq!(args[0], "--die-with-parent");
        assert!(!args.iter().any(|a| a == "--unshare-pid"));
        assert!(args.windows(2).any(|w| w[0] == "--chdir"));
        assert_eq!(args.last().unwrap(), "--");
    }

    #[test]
    fn shared_runtime_dirs_are_never_emptied_whole() {
        assert!(is_shared_dir(Path::new("/tmp")));
        assert!(!is_shared_dir(Path::new("/run/user/1000")));
    }
}
