//! The state dir and opening files in it: a real directory of our own (0700), and files
//! opened without following a link at their name. `grants.json`, the audit log and every
//! other state file go through here, so one check guards them all.

use std::fs::{self, File, OpenOptions};
use std::io::{self, Write as _};
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

use crate::base::error::Error;

/// Mode of the state dir: only the daemon's user may list or enter it (it holds attach
/// secrets and the audit).
pub const DIR_MODE: u32 = 0o700;

/// Mode of a state file written whole (`grants.json`, `halt.json`, and their temp files):
/// only the daemon's user may read it.
pub const FILE_MODE: u32 = 0o600;

/// Open a file in the state dir without following a symbolic link at its name (`O_NOFOLLOW`;
/// `O_NONBLOCK` so a FIFO planted there cannot hang the open), and only if it is a regular
/// file. A refusal is an error [`is_refused`] recognises, saying why.
pub(crate) fn open_state_file(options: &mut OpenOptions, path: &Path) -> io::Result<File> {
    let flags = rustix::fs::OFlags::NOFOLLOW | rustix::fs::OFlags::NONBLOCK;
    let file = match options.custom_flags(flags.bits() as i32).open(path) {
        Ok(file) => file,
        Err(e) if e.raw_os_error() == Some(rustix::io::Errno::LOOP.raw_os_error()) => {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                REFUSED_LINK.to_string(),
            ))
        }
        Err(e) => return Err(e),
    };
    if !file.metadata()?.file_type().is_file() {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            REFUSED_NOT_FILE.to_string(),
        ));
    }
    Ok(file)
}

const REFUSED_LINK: &str = "is a symbolic link, and handnode never follows one in its state dir";
const REFUSED_NOT_FILE: &str = "is not a regular file";

/// Whether `e` is [`open_state_file`] refusing a link or a non-file.
pub(crate) fn is_refused(e: &io::Error) -> bool {
    e.kind() == io::ErrorKind::InvalidInput
        && matches!(e.get_ref().map(|inner| inner.to_string()), Some(m) if m == REFUSED_LINK || m == REFUSED_NOT_FILE)
}

/// Create the state dir (and parents) 0700, or check an existing one: it must be a real
/// directory (not a symbolic link to one somewhere else) owned by the user running handnode;
/// a wider mode is narrowed to 0700. Everything it holds is secret or audit, so a dir that
/// someone else controls or points elsewhere is refused rather than used.
pub fn ensure_state_dir(dir: &Path) -> Result<(), Error> {
    check_state_dir(dir, rustix::process::geteuid().as_raw())
}

fn check_state_dir(dir: &Path, euid: u32) -> Result<(), Error> {
    let meta = match fs::symlink_metadata(dir) {
        Ok(meta) => meta,
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            fs::DirBuilder::new()
                .recursive(true)
                .mode(DIR_MODE)
                .create(dir)
                .map_err(|e| {
                    Error::Config(format!(
                        "cannot create the state dir {}: {e} (check its parent is writable, or set --state-dir)",
                        dir.display()
                    ))
                })?;
            // What was created is checked like what was found (a link could race in).
            fs::symlink_metadata(dir)
                .map_err(|e| Error::io(format!("cannot inspect state dir {}", dir.display()), e))?
        }
        Err(e) => {
            return Err(Error::io(
                format!("cannot inspect state dir {}", dir.display()),
                e,
            ))
        }
    };
    check_state_dir_meta(dir, &meta, euid)
}

pub(crate) fn check_state_dir_meta(
    dir: &Path,
    meta: &fs::Metadata,
    euid: u32,
) -> Result<(), Error> {
    use std::os::unix::fs::MetadataExt;
    if meta.file_type().is_symlink() {
        return Err(Error::Config(format!(
            "state dir {} is a symbolic link; handnode does not follow it: point --state-dir at the real directory",
            dir.display()
        )));
    }
    if !meta.is_dir() {
        return Err(Error::Config(format!(
            "state dir {} exists but is not a directory; point the state dir elsewhere or remove it",
            dir.display()
        )));
    }
    if meta.uid() != euid {
        return Err(Error::Config(format!(
            "state dir {} is owned by uid {}, not by the user running handnode (uid {euid}); point --state-dir at a directory of your own",
            dir.display(),
            meta.uid()
        )));
    }
    let mode = meta.permissions().mode() & 0o7777;
    if mode & !DIR_MODE != 0 {
        fs::set_permissions(dir, fs::Permissions::from_mode(DIR_MODE)).map_err(|e| {
            Error::io(
                format!("cannot narrow state dir {} to mode 0700", dir.display()),
                e,
            )
        })?;
        log::warn!(
            "state dir {} had mode {mode:04o}; narrowed to 0700 because it holds attach secrets",
            dir.display()
        );
    }
    Ok(())
}

/// The file in the state dir whose exclusive `flock` a running daemon holds for its whole
/// life; it also holds that daemon's pid, so a second start can name it.
pub const LOCK_FILE: &str = "handnode.lock";

/// Proof that this process owns the state dir: the open lock file, whose `flock` the kernel
/// releases when it is closed (on drop, or however the process dies: a `kill -9`'d daemon
/// leaves no stale lock).
#[derive(Debug)]
pub struct StateLock {
    _file: File,
    path: PathBuf,
}

impl Drop for StateLock {
    fn drop(&mut self) {
        held_here().remove(&self.path);
    }
}

/// Longest wait for a lock that names this very process but that no live [`StateLock`] of
/// it holds: a child it forked keeps a copy of the lock file until it execs, so a daemon
/// restarted in the same process (as the tests do) can find its predecessor's lock still
/// held for a moment. Any other holder is refused at once.
pub const FORKED_COPY_WAIT: std::time::Duration = std::time::Duration::from_secs(2);

/// The lock files this process holds through a live [`StateLock`].
fn held_here() -> std::sync::MutexGuard<'static, std::collections::HashSet<PathBuf>> {
    static HELD: std::sync::OnceLock<std::sync::Mutex<std::collections::HashSet<PathBuf>>> =
        std::sync::OnceLock::new();
    HELD.get_or_init(Default::default)
        .lock()
        .unwrap_or_else(|e| e.into_inner())
}

/// Take the state dir for this process before anything reads or changes what is in it (crash
/// recovery kills the jobs a dead daemon left, the grants resume and dial): a second daemon on
/// the same dir must not do either to a live one. Refused at once, naming the running
/// daemon's pid, when another process holds it.
pub fn lock_state_dir(dir: &Path) -> Result<StateLock, Error> {
    use std::io::{Read, Seek, Write};
    let path = dir.join(LOCK_FILE);
    let mut file = open_state_file(
        OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .mode(0o600),
        &path,
    )
    .map_err(|e| Error::io(format!("cannot open the lock file {}", path.display()), e))?;
    let try_lock =
        |file: &File| rustix::fs::flock(file, rustix::fs::FlockOperation::NonBlockingLockExclusive);
    let mut locked = try_lock(&file);
    // The pid the holder wrote (read again when asked: after a wait it may be another's).
    let holder = |file: &mut File| -> Option<u32> {
        let mut held = String::new();
        file.seek(io::SeekFrom::Start(0)).ok()?;
        file.read_to_string(&mut held).ok()?;
        held.trim().parse().ok()
    };
    if locked == Err(rustix::io::Errno::WOULDBLOCK)
        && !held_here().contains(&path)
        && holder(&mut file) == Some(std::process::id())
    {
        let deadline = std::time::Instant::now() + FORKED_COPY_WAIT;
        while locked == Err(rustix::io::Errno::WOULDBLOCK) && std::time::Instant::now() < deadline {
            // No signal exists for "the child exec'd"; the wait is bounded and rare.
            std::thread::sleep(std::time::Duration::from_millis(5));
            locked = try_lock(&file);
        }
    }
    if let Err(e) = locked {
        if e != rustix::io::Errno::WOULDBLOCK {
            return Err(Error::io(
                format!("cannot lock {}", path.display()),
                e.into(),
            ));
        }
        let who = match holder(&mut file) {
            Some(pid) => format!("handnode pid {pid}"),
            None => "another handnode".to_string(),
        };
        return Err(Error::Config(format!(
            "state dir {} is in use by {who}, which is running: nothing was changed; stop it first (systemctl --user stop handnode, or kill that pid), or give this one another --state-dir",
            dir.display()
        )));
    }
    // Ours now: record who holds it (best effort; the lock, not the text, is what counts).
    let pid = std::process::id();
    let _ = file
        .set_len(0)
        .and_then(|_| file.seek(io::SeekFrom::Start(0)))
        .and_then(|_| file.write_all(format!("{pid}\n").as_bytes()));
    held_here().insert(path.clone());
    Ok(StateLock { _file: file, path })
}

/// Whether `dir` is a directory of this process's own user: only then do handnode's runtime
/// directories go beneath `$XDG_RUNTIME_DIR`. A grant's wall run as root has no
/// capabilities, and cannot pass through another user's 0700 runtime dir to bind its own.
pub fn is_own_runtime_dir(dir: &std::path::Path) -> bool {
    use std::os::unix::fs::MetadataExt as _;
    dir.is_absolute()
        && std::fs::metadata(dir)
            .is_ok_and(|m| m.is_dir() && m.uid() == rustix::process::geteuid().as_raw())
}

pub(crate) fn write_durably(path: &Path, body: &[u8]) -> Result<(), Error> {
    let ctx = |what: &str| format!("cannot {what} {}", path.display());
    // `create_new` (O_EXCL) already fails on any existing name, a link included.
    let mut file = open_state_file(
        OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(FILE_MODE),
        path,
    )
    .map_err(|e| Error::io(ctx("create"), e))?;
    file.write_all(body)
        .map_err(|e| Error::io(ctx("write"), e))?;
    file.sync_all().map_err(|e| Error::io(ctx("fsync"), e))
}

/// Make a rename or create in `dir` durable.
pub(crate) fn sync_dir(dir: &Path) -> Result<(), Error> {
    File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(|e| Error::io(format!("cannot fsync dir {}", dir.display()), e))
}

#[cfg(test)]
mod lock_tests {
    use super::*;
    use crate::base::testutil::TempDir;

    #[test]
    fn a_second_lock_on_the_same_dir_is_refused_naming_the_holder() {
        let dir = TempDir::new("statelock");
        let first = lock_state_dir(&dir.0).unwrap();
        let err = lock_state_dir(&dir.0).unwrap_err().to_string();
        assert!(
            err.contains(&format!("pid {}", std::process::id())) && err.contains("in use"),
            "{err}"
        );
        drop(first);
        // Released with the file: the next start takes it.
        let _again = lock_state_dir(&dir.0).unwrap();
    }

    #[test]
    fn a_copy_left_in_a_child_of_this_process_is_waited_for_not_refused() {
        let dir = TempDir::new("statelock-fork");
        let first = lock_state_dir(&dir.0).unwrap();
        // What a forked child that has not exec'd yet holds: the same open file description.
        let copy = first._file.try_clone().unwrap();
        drop(first);
        // The child execs a moment later, closing its copy.
        let child = std::thread::spawn(move || {
            std::thread::sleep(std::time::Duration::from_millis(50));
            drop(copy);
        });
        let taken = lock_state_dir(&dir.0);
        child.join().unwrap();
        assert!(taken.is_ok(), "{:?}", taken.as_ref().err());
        drop(taken);
        // A holder that is not this process's own leftover is still refused at once.
        let _mine = lock_state_dir(&dir.0).unwrap();
        let started = std::time::Instant::now();
        assert!(lock_state_dir(&dir.0).is_err());
        assert!(started.elapsed() < FORKED_COPY_WAIT);
    }
}
