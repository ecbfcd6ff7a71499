//! One display helper call (`xdotool`, `grim`, `wtype`, …): its argv, environment, stdin,
//! timeout and how a cancel applies, run to completion by the process watcher
//! ([`crate::tools::process`]) in its own process group tied to the call's `CallCtl`, and
//! the error text people read. Runs on the display thread (or `doctor`), which may wait;
//! never on a pool worker.

use std::ffi::OsStr;
use std::fs::File;
use std::io::{Seek, SeekFrom, Write};
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus};
use std::sync::Arc;
use std::time::Duration;

use crate::pool::CallCtl;
use crate::tools::process::{End, ProcessWatcher, RunSpec};

/// Most of a helper's stderr kept for an error message (bytes).
const STDERR_KEEP_BYTES: usize = 2048;
/// Most of a helper's stdout kept (bytes): far above what a query prints (`xdpyinfo` is a
/// few KiB); screenshots go through a file, not stdout.
const STDOUT_MAX_BYTES: usize = 4 << 20;

/// What a helper left behind.
#[derive(Debug)]
pub struct Output {
    pub status: ExitStatus,
    pub stdout: Vec<u8>,
    pub stderr: String,
}

/// Why a helper produced no usable output.
#[derive(Debug, PartialEq, Eq)]
pub enum RunError {
    Cancelled,
    Failed(String),
}

impl RunError {
    pub fn message(self) -> String {
        match self {
            RunError::Cancelled => "cancelled".into(),
            RunError::Failed(msg) => msg,
        }
    }
}

/// One helper invocation.
pub struct Helper<'a> {
    pub program: &'a Path,
    pub args: Vec<String>,
    pub env: &'a [(String, String)],
    pub stdin: Option<&'a [u8]>,
    pub timeout: Duration,
    /// Whether cancelling the call kills the helper at once. Input helpers say no: a
    /// keystroke or button killed between press and release stays held on the display
    /// (and swallows the next press of that key), so they run in short pieces and the
    /// caller stops between pieces instead.
    pub cancel_kills: bool,
}

fn program_name(path: &Path) -> String {
    path.file_name()
        .unwrap_or(path.as_os_str())
        .to_string_lossy()
        .into_owned()
}

/// A fresh anonymous file in the temp dir: created 0600, unlinked at once.
fn scratch_file() -> std::io::Result<File> {
    let dir = std::env::temp_dir();
    loop {
        let path = dir.join(format!(".handnode-{}", random_hex()?));
        match std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&path)
        {
            Ok(file) => {
                let _ = std::fs::remove_file(&path);
                return Ok(file);
            }
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
            Err(e) => return Err(e),
        }
    }
}

fn random_hex() -> std::io::Result<String> {
    let mut bytes = [0u8; 8];
    getrandom::fill(&mut bytes).map_err(std::io::Error::other)?;
    Ok(bytes.iter().map(|b| format!("{b:02x}")).collect())
}

/// A private (0700) directory for a grabber that insists on writing a file; removed on drop.
#[derive(Debug)]
pub struct ScratchDir {
    path: PathBuf,
}

impl ScratchDir {
    pub fn new() -> std::io::Result<Self> {
        let base = std::env::temp_dir();
        loop {
            let path = base.join(format!("handnode-shot-{}", random_hex()?));
            match std::fs::DirBuilder::new().mode(0o700).create(&path) {
                Ok(()) => return Ok(ScratchDir { path }),
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
                Err(e) => return Err(e),
            }
        }
    }

    pub fn path(&self) -> &Path {
        &self.path
    }
}

impl Drop for ScratchDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.path);
    }
}

/// Run `helper` to completion. A non-zero exit is not an error here; see [`run_ok`].
pub fn run(
    helper: &Helper<'_>,
    ctl: &Arc<CallCtl>,
    processes: &ProcessWatcher,
) -> Result<Output, RunError> {
    let name = program_name(helper.program);
    let failed = |what: &str, e: std::io::Error| RunError::Failed(format!("{what} {name}: {e}"));
    if helper.cancel_kills && ctl.is_cancelled() {
        return Err(RunError::Cancelled);
    }
    let stdin = match helper.stdin {
        Some(data) => {
            let mut file =
                scratch_file().map_err(|e| failed("cannot make scratch space for", e))?;
            file.write_all(data)
                .and_then(|()| file.seek(SeekFrom::Start(0)).map(drop))
                .map_err(|e| failed("cannot prepare input for", e))?;
            Some(file)
        }
        None => None,
    };
    let mut command = Command::new(helper.program);
    command
        .args(helper.args.iter().map(OsStr::new))
        .env_clear()
        .envs(helper.env.iter().map(|(k, v)| (k, v)))
        .current_dir("/");
    // An input helper is not tied to the call: killed between press and release, a key
    // would stay held (see `Helper::cancel_kills`).
    let run_ctl = if helper.cancel_kills {
        Arc::clone(ctl)
    } else {
        CallCtl::new()
    };
    let spec = RunSpec {
        stdin,
        ..RunSpec::oneshot(helper.timeout, STDOUT_MAX_BYTES, run_ctl)
    };
    let run = processes
        .run(command, spec)
        .map_err(|e| failed("cannot start", e))?;
    match run.end {
        End::Exited => {}
        End::Cancelled => return Err(RunError::Cancelled),
        End::TimedOut => {
            return Err(RunError::Failed(format!(
                "{name} did not finish within {} s and was killed",
                helper.timeout.as_secs_f64()
            )))
        }
        End::Aborted => {
            return Err(RunError::Failed(format!(
                "handnode stopped watching {name} (shutting down)"
            )))
        }
    }
    if helper.cancel_kills && ctl.is_cancelled() {
        return Err(RunError::Cancelled);
    }
    if run.stdout_truncated {
        return Err(RunError::Failed(format!(
            "{name} printed more than {STDOUT_MAX_BYTES} bytes"
        )));
    }
    let mut stderr = run.stderr;
    stderr.truncate(STDERR_KEEP_BYTES);
    Ok(Output {
        status: run
            .status
            .unwrap_or_else(|| ExitStatus::from_raw((run.exit_code & 0xff) << 8)),
        stdout: run.stdout,
        stderr: String::from_utf8_lossy(&stderr).trim().to_string(),
    })
}

/// Describe an exit status for a person.
pub fn describe_status(status: ExitStatus) -> String {
    match (status.code(), status.signal()) {
        (Some(code), _) => format!("exit {code}"),
        (None, Some(sig)) => format!("killed by signal {sig}"),
        _ => "unknown status".into(),
    }
}

/// Run and insist on exit 0; the error names the helper and quotes its stderr.
pub fn run_ok(
    helper: &Helper<'_>,
    ctl: &Arc<CallCtl>,
    processes: &ProcessWatcher,
) -> Result<Output, RunError> {
    let out = run(helper, ctl, processes)?;
    if out.status.success() {
        return Ok(out);
    }
    let name = program_name(helper.program);
    let detail = if out.stderr.is_empty() {
        String::new()
    } else {
        format!(": {}", out.stderr)
    };
    Err(RunError::Failed(format!(
        "{name} failed ({}){detail}",
        describe_status(out.status)
    )))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Read;
    use std::time::Instant;

    /// A process watcher of the test's own.
    fn w() -> ProcessWatcher {
        ProcessWatcher::start().unwrap()
    }

    fn env() -> Vec<(String, String)> {
        vec![("PATH".into(), "/usr/bin:/bin".into())]
    }

    fn sh<'a>(script: &str, env: &'a [(String, String)], timeout: Duration) -> Helper<'a> {
        Helper {
            program: Path::new("/bin/sh"),
            args: vec!["-c".into(), script.into()],
            env,
            stdin: None,
            timeout,
            cancel_kills: true,
        }
    }

    #[test]
    fn collects_large_stdout_and_stderr_without_deadlock() {
        let env = env();
        // 1 MiB is far past a pipe's buffer.
        let h = sh(
            "head -c 1048576 /dev/zero; echo oops >&2; exit 3",
            &env,
            Duration::from_secs(30),
        );
        let out = run(&h, &CallCtl::new(), &w()).unwrap();
        assert_eq!(out.stdout.len(), 1 << 20);
        assert_eq!(out.stderr, "oops");
        assert_eq!(out.status.code(), Some(3));
        let err = run_ok(&h, &CallCtl::new(), &w()).unwrap_err().message();
        assert_eq!(err, "sh failed (exit 3): oops");
    }

    #[test]
    fn stdout_is_kept_up_to_its_bound_and_refused_past_it() {
        let env = env();
        let w = w();
        let at = sh(
            &format!("head -c {STDOUT_MAX_BYTES} /dev/zero"),
            &env,
            Duration::from_secs(30),
        );
        assert_eq!(
            run_ok(&at, &CallCtl::new(), &w).unwrap().stdout.len(),
            STDOUT_MAX_BYTES
        );
        let over = sh(
            &format!("head -c {} /dev/zero", STDOUT_MAX_BYTES + 1),
            &env,
            Duration::from_secs(30),
        );
        let err = run(&over, &CallCtl::new(), &w).unwrap_err().message();
        assert_eq!(
            err,
            format!("sh printed more than {STDOUT_MAX_BYTES} bytes")
        );
    }

    #[test]
    fn stdin_and_env_are_what_we_pass() {
        let env = vec![
            ("PATH".into(), "/usr/bin:/bin".into()),
            ("ONLY_THIS".into(), "yes".into()),
        ];
        let mut h = sh("cat; env | sort", &env, Duration::from_secs(30));
        h.stdin = Some(b"typed\n");
        let out = run_ok(&h, &CallCtl::new(), &w()).unwrap();
        let text = String::from_utf8(out.stdout).unwrap();
        assert!(text.starts_with("typed\n"), "{text}");
        assert!(text.contains("ONLY_THIS=yes"));
        assert!(
            !text.contains("HOME="),
            "environment must be exactly ours: {text}"
        );
    }

    /// True when `pid` is gone or only a zombie waiting for its reaper.
    fn dead(pid: &str) -> bool {
        match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
            Err(_) => true,
            Ok(stat) => stat
                .rsplit(')')
                .next()
                .unwrap_or("")
                .trim_start()
                .starts_with('Z'),
        }
    }

    #[test]
    fn timeout_kills_the_whole_group() {
        let env = env();
        let dir = ScratchDir::new().unwrap();
        let pidfile = dir.path().join("pid");
        // The background sleep is in the helper's group; the timeout must take it too.
        let script = format!("sleep 30 & echo $! > {}; wait", pidfile.display());
        let h = sh(&script, &env, Duration::from_millis(300));
        let err = run(&h, &CallCtl::new(), &w()).unwrap_err().message();
        assert!(err.contains("did not finish within 0.3 s"), "{err}");
        let pid = std::fs::read_to_string(&pidfile).unwrap();
        let pid = pid.trim();
        // SIGKILL is delivered before kill() returns for a stopped-or-running task, but
        // the exit itself is asynchronous: allow a bounded moment for it.
        let deadline = Instant::now() + Duration::from_secs(10);
        while !dead(pid) && Instant::now() < deadline {
            std::thread::yield_now();
        }
        assert!(dead(pid), "background child {pid} survived the timeout");
    }

    #[test]
    fn cancel_kills_a_running_helper() {
        let env = env();
        let dir = ScratchDir::new().unwrap();
        let fifo = dir.path().join("started");
        assert!(Command::new("mkfifo")
            .arg(&fifo)
            .status()
            .unwrap()
            .success());
        let ctl = CallCtl::new();
        let canceller = {
            let ctl = ctl.clone();
            let fifo = fifo.clone();
            std::thread::spawn(move || {
                // Opening blocks until the helper opens the FIFO for writing: it runs.
                let mut line = String::new();
                File::open(&fifo)
                    .unwrap()
                    .read_to_string(&mut line)
                    .unwrap();
                assert_eq!(line.trim(), "started");
                ctl.cancel();
            })
        };
        let h = sh(
            &format!("echo started > {}; exec sleep 30", fifo.display()),
            &env,
            Duration::from_secs(60),
        );
        let started = Instant::now();
        assert_eq!(run(&h, &ctl, &w()).unwrap_err(), RunError::Cancelled);
        canceller.join().unwrap();
        // Generous watchdog: far below the helper's 30 s sleep.
        assert!(started.elapsed() < Duration::from_secs(20));
    }

    #[test]
    fn an_input_helper_finishes_its_piece_despite_a_cancel() {
        let env = env();
        let ctl = CallCtl::new();
        ctl.cancel();
        let mut h = sh("echo typed", &env, Duration::from_secs(30));
        h.cancel_kills = false;
        let out = run_ok(&h, &ctl, &w()).unwrap();
        assert_eq!(out.stdout, b"typed\n");
        h.cancel_kills = true;
        assert_eq!(run(&h, &ctl, &w()).unwrap_err(), RunError::Cancelled);
    }

    #[test]
    fn missing_program_is_a_clear_error() {
        let env = env();
        let h = Helper {
            program: Path::new("/nonexistent/xdotool"),
            args: vec![],
            env: &env,
            stdin: None,
            timeout: Duration::from_secs(1),
            cancel_kills: true,
        };
        let err = run(&h, &CallCtl::new(), &w()).unwrap_err().message();
        assert!(err.starts_with("cannot start xdotool"), "{err}");
    }

    #[test]
    fn scratch_dir_is_private_and_removed() {
        use std::os::unix::fs::PermissionsExt;
        let dir = ScratchDir::new().unwrap();
        let path = dir.path().to_path_buf();
        let mode = std::fs::metadata(&path).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o700);
        std::fs::write(path.join("x"), b"1").unwrap();
        drop(dir);
        assert!(!path.exists());
    }
}
