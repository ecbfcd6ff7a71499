//! Where a tool's path arguments lead (contract §18, §19, §26): the one confinement every
//! tool that takes a path gets, by declaring it in its descriptor (`Reach::Paths` with its
//! [`PathArg`]s) and asking [`given`] and [`confine`] for the call. Under a grant that lends a
//! folder (vetted at `POST /attach`, [`vet`]) every path is resolved beneath it with `openat2`
//! `RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS`; without one (a shell-equivalent grant or the
//! owner's `/mcp`) paths are absolute and reach whatever the daemon's user can, except, for a
//! grant with its own display, what the wall around its shell hides (`Fence`, §19).
//!
//! The kernel does the confining: a path is never checked and then opened (a symlink
//! swapped in between would win), it is opened by `openat2` against the folder's own
//! descriptor, which refuses `..` above it, absolute symlinks and magic links (`/proc/…`)
//! as it resolves. The lexical checks before it only give a clearer message.

use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::path::{Component, Path, PathBuf};

use rustix::fs::{Mode, OFlags, ResolveFlags, CWD};

use serde_json::{Map, Value};

use super::{CallContext, Tool};
use crate::walls::Fence;

/// A path argument a tool declares (`Reach::Paths`): the field that holds it and what it
/// may name. Declaring it is all a tool does to be confined: [`given`] reads it, [`confine`]
/// checks it for the call's [`Place`], and the confinement and wall tests attack it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PathArg {
    pub field: &'static str,
    pub names: Names,
}

/// What a path argument may name beneath a lent folder.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Names {
    /// Something beneath the folder, never the folder itself (a file to read or write).
    Entry,
    /// The folder itself too (`""` or `.`, a directory to list).
    EntryOrFolder,
}

impl PathArg {
    /// A path that names something beneath the folder.
    pub const fn entry(field: &'static str) -> PathArg {
        PathArg {
            field,
            names: Names::Entry,
        }
    }

    /// A path that may also name the folder itself.
    pub const fn entry_or_folder(field: &'static str) -> PathArg {
        PathArg {
            field,
            names: Names::EntryOrFolder,
        }
    }
}

/// Why a call's path was refused: its shape (`-32602`, invalid params) or the place it
/// would be resolved in (a tool error: the lent folder cannot be opened now).
#[derive(Debug, PartialEq, Eq)]
pub enum Refusal {
    Args(String),
    Place(String),
}

/// The names of the tools that take a path, in listing order (what a lent folder is lent to).
pub fn tools() -> Vec<&'static str> {
    super::registered()
        .iter()
        .filter(|t| !t.takes_path().is_empty())
        .map(|t| t.name)
        .collect()
}

/// Each of `tool`'s declared path arguments as given, in declared order: a string is
/// required. Read with the tool's other arguments, before [`confine`].
pub fn given<'a>(tool: &Tool, args: &'a Map<String, Value>) -> Result<Vec<&'a str>, String> {
    tool.takes_path()
        .iter()
        .map(|arg| match args.get(arg.field) {
            Some(Value::String(s)) => Ok(s.as_str()),
            None | Some(Value::Null) => Err(format!("{} is required", arg.field)),
            Some(_) => Err(format!("{} must be a string", arg.field)),
        })
        .collect()
}

/// Where this call's paths lead ([`place`]) and each of the [`given`] paths checked for it
/// ([`Place::check`]), in declared order. Open them only through the returned [`Place`].
pub fn confine<'a>(
    tool: &Tool,
    given: Vec<&'a str>,
    cx: &CallContext,
) -> Result<(Place, Vec<&'a str>), Refusal> {
    let place = place(cx).map_err(Refusal::Place)?;
    let checked = tool
        .takes_path()
        .iter()
        .zip(given)
        .map(|(arg, path)| place.check(path, arg.names == Names::EntryOrFolder))
        .collect::<Result<Vec<_>, _>>()
        .map_err(Refusal::Args)?;
    Ok((place, checked))
}

/// Where this call's paths lead: the grant's folder, or anywhere. A `files` policy always
/// carries one (`POST /attach` requires it); a confined policy without one runs nothing.
pub fn place(cx: &CallContext) -> Result<Place, String> {
    match cx.policy.folder() {
        Some(f) => Place::of(f),
        None if cx.policy.confined() => Err(
            "this grant is confined to a lent folder but has none; lend it again with a folder"
                .into(),
        ),
        // A grant with its own display reaches with these tools what its shell's wall
        // shows.
        None => Ok(Place::Anywhere(
            super::display::own::own_of(cx).and_then(|own| cx.host.own_displays.file_fence(&own)),
        )),
    }
}

/// Longest path argument, in bytes (Linux's `PATH_MAX`).
pub const MAX_PATH_BYTES: usize = 4096;

/// The `400` for a lent folder on a kernel without `openat2` (before Linux 5.6): a folder
/// is confined by the kernel or not lent at all, never by a looser emulation.
pub const NO_OPENAT2: &str = "a lent folder needs openat2 (Linux 5.6 or later), which this \
     kernel lacks; a folder cannot be confined here (lend a shell-equivalent profile without \
     a folder instead)";

/// Directories a lent folder must neither be nor hold, with what each is for the message:
/// the daemon's state and config dirs, `~`, `~/.ssh`, `~/.config`, `~/.local`, `~/.gnupg`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Protected {
    pub dirs: Vec<(&'static str, PathBuf)>,
}

impl Protected {
    /// The list for a daemon with these dirs, and `home` (`$HOME`) when known.
    pub fn new(state_dir: &Path, config_dir: &Path, home: Option<&Path>) -> Protected {
        let mut dirs = vec![
            ("the state dir", state_dir.to_path_buf()),
            ("the config dir", config_dir.to_path_buf()),
        ];
        if let Some(home) = home {
            dirs.push(("the home dir", home.to_path_buf()));
            for sub in [".ssh", ".config", ".local", ".gnupg"] {
                dirs.push(("a dir of secrets or settings", home.join(sub)));
            }
        }
        Protected { dirs }.normalised()
    }

    /// This list with one more path a folder must not be or hold (a secret file, such as
    /// the admin token's when it lies outside the config dir).
    pub fn with(mut self, what: &'static str, path: PathBuf) -> Protected {
        self.dirs.push((what, path));
        self.normalised()
    }

    fn normalised(mut self) -> Protected {
        let dirs = &mut self.dirs;
        // Compared as real paths: a protected dir reached through a symlink is the same dir.
        for (_, dir) in dirs.iter_mut() {
            if let Ok(real) = std::fs::canonicalize(&*dir) {
                *dir = real;
            }
        }
        self
    }
}

/// Opens a directory with `openat2` `RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS`: the
/// folder itself, at attach and at every call. A parameter so the `ENOSYS` path is tested.
pub type Opener = fn(&Path) -> io::Result<OwnedFd>;

/// The real opener.
pub fn open_folder(path: &Path) -> io::Result<OwnedFd> {
    rustix::fs::openat2(
        CWD,
        path,
        OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC,
        Mode::empty(),
        ResolveFlags::NO_SYMLINKS | ResolveFlags::NO_MAGICLINKS,
    )
    .map_err(io::Error::from)
}

/// The shape check of `POST /attach`'s `folder`: a plain absolute path (no `.` or `..`
/// parts), at most [`MAX_PATH_BYTES`]. The file system is asked later ([`vet`]).
pub fn parse(text: &str) -> Result<PathBuf, String> {
    if text.is_empty() || text.len() > MAX_PATH_BYTES || text.contains('\0') {
        return Err(format!(
            "folder must be an absolute path of 1..={MAX_PATH_BYTES} bytes"
        ));
    }
    let path = Path::new(text);
    if !path.is_absolute() {
        return Err("folder must be an absolute path".into());
    }
    if path
        .components()
        .any(|c| matches!(c, Component::CurDir | Component::ParentDir))
    {
        return Err("folder must be a plain absolute path, without . or .. parts".into());
    }
    // Rebuilt from its components: `/a//b/` and `/a/b` are the same folder.
    Ok(path.components().collect())
}

/// Vet a lent folder (contract §18): it exists, is reached without any symlink, is a
/// directory of the daemon's user, and is not and does not hold a [`Protected`] dir (nor
/// lie inside the state or config dir, `~/.ssh` or `~/.gnupg`). The error is the `400`.
pub fn vet(folder: &Path, protected: &Protected, open: Opener) -> Result<(), String> {
    let shown = folder.display();
    let fd = match open(folder) {
        Ok(fd) => fd,
        Err(e) if e.raw_os_error() == Some(libc_enosys()) => return Err(NO_OPENAT2.into()),
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            return Err(format!("folder {shown} does not exist"))
        }
        Err(e) if e.raw_os_error() == Some(rustix::io::Errno::LOOP.raw_os_error()) => {
            let real = std::fs::canonicalize(folder)
                .map(|r| format!(" (it leads to {})", r.display()))
                .unwrap_or_default();
            return Err(format!(
                "folder {shown} passes through a symlink{real}; lend the real path"
            ));
        }
        Err(e) if e.raw_os_error() == Some(rustix::io::Errno::NOTDIR.raw_os_error()) => {
            return Err(format!("folder {shown} is not a directory"))
        }
        Err(e) => return Err(format!("folder {shown} cannot be opened: {e}")),
    };
    owned_dir(fd.as_fd()).map_err(|why| format!("folder {shown} {why}"))?;
    for (what, dir) in &protected.dirs {
        if dir.starts_with(folder) {
            let how = if dir == folder { "is" } else { "holds" };
            return Err(format!(
                "folder {shown} {how} {what} ({}); lend a folder that holds none of the \
                 state dir, the config dir, ~, ~/.ssh, ~/.config, ~/.local or ~/.gnupg",
                dir.display()
            ));
        }
    }
    // Inside a dir of secrets is as bad as holding it (the home dir itself is fine to
    // lend a folder from).
    for (what, dir) in protected.dirs.iter().filter(|(w, _)| *w != "the home dir") {
        if folder.starts_with(dir) {
            return Err(format!(
                "folder {shown} lies inside {what} ({}); lend a folder elsewhere",
                dir.display()
            ));
        }
    }
    Ok(())
}

fn libc_enosys() -> i32 {
    rustix::io::Errno::NOSYS.raw_os_error()
}

/// `Ok` when `fd` is a directory owned by the daemon's user, else why not.
fn owned_dir(fd: BorrowedFd<'_>) -> Result<(), &'static str> {
    let st = rustix::fs::fstat(fd).map_err(|_| "cannot be examined")?;
    if rustix::fs::FileType::from_raw_mode(st.st_mode) != rustix::fs::FileType::Directory {
        return Err("is not a directory");
    }
    if st.st_uid != rustix::process::geteuid().as_raw() {
        return Err("belongs to another user; lend a directory of the user handnode runs as");
    }
    Ok(())
}

/// Where one call's paths are resolved.
#[derive(Debug)]
pub enum Place {
    /// Beneath a lent folder: paths are relative to this descriptor of it.
    Folder { root: OwnedFd, path: PathBuf },
    /// No folder (a shell-equivalent grant or the owner's `/mcp`): absolute paths,
    /// resolved as any program of the box would, except what `Fence` keeps out.
    Anywhere(Option<Fence>),
}

/// `fd`, when what it opened is not kept out by `fence`; `path` is the caller's, for the
/// message. Checked on the descriptor by the path the kernel gives for it, so a symlink
/// swapped in between the check and the read changes nothing.
fn admit(fence: &Fence, fd: OwnedFd, path: &str) -> Result<OwnedFd, String> {
    let link = format!("/proc/self/fd/{}", std::os::fd::AsRawFd::as_raw_fd(&fd));
    let real = std::fs::read_link(&link)
        .map_err(|e| format!("{path}: cannot tell where it leads ({e})"))?;
    if fence.refuses(&real) {
        return Err(format!(
            "{path} is out of reach of a grant with its own display: it leads to {}, \
             which is hidden from this grant's tools as from its shell (handnode's files, \
             other grants' displays, the owner's session, /proc)",
            real.display()
        ));
    }
    Ok(fd)
}

/// A path split into the directory it lies in and its last part.
pub struct Split<'a> {
    pub parent: &'a str,
    pub name: &'a str,
}

impl Place {
    /// The place of a call under a lent folder: the policy's folder opened again (it must
    /// still be a directory of ours reached without a symlink).
    pub fn of(folder: &Path) -> Result<Place, String> {
        let root = open_folder(folder).map_err(|e| {
            format!(
                "the lent folder {} cannot be opened now: {e}",
                folder.display()
            )
        })?;
        owned_dir(root.as_fd())
            .map_err(|why| format!("the lent folder {} {why}", folder.display()))?;
        Ok(Place::Folder {
            root,
            path: folder.to_path_buf(),
        })
    }

    /// Check a path argument's shape for this place: relative beneath a folder (no `..`,
    /// no absolute path), absolute anywhere else. `allow_root`: the folder itself (`""`
    /// or `.`) is a valid answer (for `file_list`).
    pub fn check<'a>(&self, path: &'a str, allow_root: bool) -> Result<&'a str, String> {
        if path.len() > MAX_PATH_BYTES || path.contains('\0') {
            return Err(format!(
                "path must be at most {MAX_PATH_BYTES} bytes without NUL"
            ));
        }
        match self {
            Place::Folder { .. } => {
                if path.starts_with('/') {
                    return Err(format!(
                        "path must be relative to the lent folder; absolute paths are refused: {path}"
                    ));
                }
                if path.split('/').any(|part| part == "..") {
                    return Err(format!(
                        "path must not contain ..: it would leave the lent folder: {path}"
                    ));
                }
                let trimmed = path.trim_end_matches('/');
                if !allow_root && (trimmed.is_empty() || trimmed == ".") {
                    return Err("path must name a file beneath the lent folder".into());
                }
                Ok(if trimmed.is_empty() { "." } else { trimmed })
            }
            Place::Anywhere(_) => {
                if !path.starts_with('/') {
                    return Err(format!(
                        "path must be absolute (this grant lends no folder): {path}"
                    ));
                }
                let trimmed = path.trim_end_matches('/');
                Ok(if trimmed.is_empty() { "/" } else { trimmed })
            }
        }
    }

    /// Split a checked path into its directory and last part (which must be a plain name).
    pub fn split<'a>(&self, path: &'a str) -> Result<Split<'a>, String> {
        let (parent, name) = match path.rfind('/') {
            Some(0) => ("/", &path[1..]),
            Some(i) => (&path[..i], &path[i + 1..]),
            None => (".", path),
        };
        if name.is_empty() || name == "." || name == ".." {
            return Err(format!("path must end in a file name: {path}"));
        }
        Ok(Split { parent, name })
    }

    /// Open a checked path: beneath the folder with `openat2` `RESOLVE_BENEATH |
    /// RESOLVE_NO_MAGICLINKS` (a symlink that leaves is refused, not followed), else as
    /// given. The error says which.
    pub fn open(&self, path: &str, flags: OFlags, mode: Mode) -> Result<OwnedFd, String> {
        // openat2 refuses (EINVAL) any flag beside O_PATH but a few, and a mode without
        // O_CREAT: add NOCTTY only where it is allowed.
        let flags = if flags.contains(OFlags::PATH) {
            flags | OFlags::CLOEXEC
        } else {
            flags | OFlags::CLOEXEC | OFlags::NOCTTY
        };
        let opened = match self {
            Place::Folder { root, .. } => rustix::fs::openat2(
                root,
                path,
                flags,
                mode,
                ResolveFlags::BENEATH | ResolveFlags::NO_MAGICLINKS,
            ),
            Place::Anywhere(_) => rustix::fs::openat(CWD, path, flags, mode),
        };
        let fd = opened.map_err(|e| self.explain(path, e))?;
        match self {
            Place::Anywhere(Some(fence)) => admit(fence, fd, path),
            _ => Ok(fd),
        }
    }

    /// Open a checked directory path for `*at` calls, creating missing directories
    /// (0700) one part at a time when `mkdirs`, each beneath the folder like any open.
    pub fn open_dir(&self, path: &str, mkdirs: bool) -> Result<OwnedFd, String> {
        let flags = OFlags::PATH | OFlags::DIRECTORY;
        match self.open(path, flags, Mode::empty()) {
            Ok(fd) => return Ok(fd),
            Err(e) if !mkdirs => return Err(e),
            Err(_) => {}
        }
        let mut at = String::new();
        for part in path.split('/') {
            if at.is_empty() && part.is_empty() {
                at.push('/');
                continue;
            }
            if part.is_empty() || part == "." {
                continue;
            }
            if !at.is_empty() && !at.ends_with('/') {
                at.push('/');
            }
            at.push_str(part);
            if let Err(first) = self.open(&at, flags, Mode::empty()) {
                let parent = self.open(
                    at.rsplit_once('/')
                        .map_or(".", |(p, _)| if p.is_empty() { "/" } else { p }),
                    flags,
                    Mode::empty(),
                );
                let Ok(parent) = parent else {
                    return Err(first);
                };
                match rustix::fs::mkdirat(&parent, part, Mode::from_raw_mode(0o700)) {
                    Ok(()) | Err(rustix::io::Errno::EXIST) => {}
                    Err(e) => return Err(format!("cannot create the directory {at}: {e}")),
                }
            }
        }
        self.open(path, flags, Mode::empty())
    }

    fn explain(&self, path: &str, e: rustix::io::Errno) -> String {
        use rustix::io::Errno;
        let confined = matches!(self, Place::Folder { .. });
        match e {
            Errno::XDEV if confined => {
                format!("path leads outside the lent folder (a symlink out is refused): {path}")
            }
            Errno::LOOP => format!("path has too many symlinks (a loop?): {path}"),
            Errno::NOENT => format!("no such file or directory: {path}"),
            Errno::NOTDIR => format!("a part of the path is not a directory: {path}"),
            Errno::ACCESS | Errno::PERM => format!("permission denied: {path}"),
            Errno::ISDIR => format!("path is a directory: {path}"),
            Errno::NOSYS => NO_OPENAT2.into(),
            e => format!("cannot open {path}: {e}"),
        }
    }

    /// The path as shown in answers: relative to the folder, or absolute.
    pub fn shown(&self, path: &str) -> String {
        path.to_string()
    }

    /// A `file://` URI for a checked path (the folder joined in), for the resource block.
    pub fn uri(&self, path: &str) -> String {
        let full = match self {
            Place::Folder { path: folder, .. } => folder.join(path),
            Place::Anywhere(_) => PathBuf::from(path),
        };
        let mut uri = String::from("file://");
        for b in full.to_string_lossy().bytes() {
            if b.is_ascii_alphanumeric() || b"/-._~".contains(&b) {
                uri.push(b as char);
            } else {
                uri.push_str(&format!("%{b:02X}"));
            }
        }
        uri
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::base::testutil::TempDir;

    fn enosys(_: &Path) -> io::Result<OwnedFd> {
        Err(io::Error::from_raw_os_error(libc_enosys()))
    }

    /// A tool's declared path arguments are required strings of its schema, and a tool with
    /// a `path` argument declares it: one that forgot would open paths unconfined and go
    /// unattacked by the confinement and wall tests.
    #[test]
    fn every_path_argument_is_declared_and_in_the_schema() {
        for tool in crate::tools::registered() {
            let schema = (tool.input_schema)();
            let required: Vec<&str> = schema["required"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(Value::as_str)
                .collect();
            for arg in tool.takes_path() {
                assert_eq!(
                    schema["properties"][arg.field]["type"], "string",
                    "{}: its path argument {} is not a string of its schema",
                    tool.name, arg.field
                );
                assert!(
                    required.contains(&arg.field),
                    "{}: {}",
                    tool.name,
                    arg.field
                );
            }
            let declared = tool.takes_path().iter().any(|a| a.field == "path");
            assert_eq!(
                schema["properties"].get("path").is_some(),
                declared,
                "{}: a `path` argument is declared in `reach: Reach::Paths(&[PathArg::…])` \
                 exactly when the schema has one, so the tool gets its confinement from here",
                tool.name
            );
        }
    }

    #[test]
    fn without_openat2_a_folder_is_refused_not_emulated() {
        let dir = TempDir::new("folder-enosys");
        assert_eq!(
            vet(&dir.0, &Protected::default(), enosys),
            Err(NO_OPENAT2.to_string())
        );
        assert!(vet(&dir.0, &Protected::default(), open_folder).is_ok());
    }

    #[test]
    fn folder_shapes() {
        assert_eq!(parse("/a//b/"), Ok(PathBuf::from("/a/b")));
        assert!(parse("a/b").unwrap_err().contains("absolute"));
        assert!(parse("/a/../b").unwrap_err().contains(".."));
        assert!(parse("").is_err());
        assert!(parse(&format!("/{}", "a".repeat(MAX_PATH_BYTES))).is_err());
    }

    #[test]
    fn protected_dirs_are_refused_whichever_way_round() {
        let dir = TempDir::new("folder-protected");
        let home = dir.0.join("home");
        let state = dir.0.join("home/.local/state/handnode");
        std::fs::create_dir_all(&state).unwrap();
        std::fs::create_dir_all(home.join("work")).unwrap();
        let p = Protected::new(&state, &dir.0.join("cfg"), Some(&home));
        let err = vet(&home, &p, open_folder).unwrap_err();
        assert!(err.contains("holds the state dir"), "{err}");
        let other_home = dir.0.join("other-home");
        std::fs::create_dir_all(&other_home).unwrap();
        let q = Protected::new(&state, &dir.0.join("cfg"), Some(&other_home));
        let err = vet(&other_home, &q, open_folder).unwrap_err();
        assert!(err.contains("is the home dir"), "{err}");
        let err = vet(&state, &p, open_folder).unwrap_err();
        assert!(err.contains("is the state dir"), "{err}");
        let err = vet(&dir.0, &p, open_folder).unwrap_err();
        assert!(err.contains("holds"), "{err}");
        let err = vet(&home.join(".local"), &p, open_folder).unwrap_err();
        assert!(
            err.contains("holds the state dir") || err.contains("is a dir"),
            "{err}"
        );
        let err = vet(&state.join("..").join("handnode"), &p, open_folder);
        assert!(err.is_err());
        assert_eq!(vet(&home.join("work"), &p, open_folder), Ok(()));
        let err = vet(&home.join("nope"), &p, open_folder).unwrap_err();
        assert!(err.contains("does not exist"), "{err}");
        std::os::unix::fs::symlink(home.join("work"), dir.0.join("link")).unwrap();
        let err = vet(&dir.0.join("link"), &p, open_folder).unwrap_err();
        assert!(err.contains("passes through a symlink"), "{err}");
    }
}
