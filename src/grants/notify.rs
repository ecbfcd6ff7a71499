//! Desktop notifications for the person at the box ("this box is lent to …"), through
//! `notify-send` when it is installed. Fire and forget: the caller never waits. An approval
//! ask (§10) adds Allow/Deny actions and `--wait`; its child is reaped, and its answer read,
//! on a short-lived thread of its own.

use std::collections::BTreeMap;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// Variables `notify-send` needs to reach the session's notification daemon. Nothing
/// else from the daemon's environment (which may hold a token) reaches the child.
const PASS_ENV: &[&str] = &[
    "PATH",
    "HOME",
    "USER",
    "LANG",
    "LC_ALL",
    "DISPLAY",
    "WAYLAND_DISPLAY",
    "XDG_RUNTIME_DIR",
    "DBUS_SESSION_BUS_ADDRESS",
];

/// Most bytes of `notify-send`'s answer read (it prints one action key).
const MAX_ANSWER_BYTES: u64 = 256;

/// The button the person pressed on an approval ask.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Choice {
    Allow,
    Deny,
}

/// How to reach the desktop of the person at the box: the `notify-send` to run and the
/// environment it gets (display variables, session bus; nothing else of ours).
#[derive(Clone, Debug)]
pub struct Notifier {
    program: Option<PathBuf>,
    env: Vec<(String, String)>,
}

/// Logged once per process when `notify-send` is missing, so a box without it is told
/// how to decide without flooding the log on every held call.
static MISSING_LOGGED: AtomicBool = AtomicBool::new(false);

impl Notifier {
    /// A notifier for the display named by `display_env` (or this process's environment),
    /// or `None` when no display is present (neither `DISPLAY` nor `WAYLAND_DISPLAY`).
    /// `program` overrides the `notify-send` found on `PATH`.
    pub fn for_display(
        program: Option<PathBuf>,
        display_env: Option<&BTreeMap<String, String>>,
    ) -> Option<Notifier> {
        let mut env: BTreeMap<String, String> = PASS_ENV
            .iter()
            .filter_map(|k| Some((k.to_string(), std::env::var(k).ok()?)))
            .collect();
        if let Some(over) = display_env {
            for (k, v) in over {
                if PASS_ENV.contains(&k.as_str()) {
                    env.insert(k.clone(), v.clone());
                }
            }
        }
        let present = ["DISPLAY", "WAYLAND_DISPLAY"]
            .iter()
            .any(|k| env.get(*k).is_some_and(|v| !v.is_empty()));
        if !present {
            return None;
        }
        let program = program.or_else(|| {
            crate::tools::display::which("notify-send", env.get("PATH").map(String::as_str))
        });
        Some(Notifier {
            program,
            env: env.into_iter().collect(),
        })
    }

    /// A plain notification (no actions).
    pub fn plain(&self, summary: &str, body: &str) {
        let Some(program) = &self.program else {
            return log::debug!("notify-send not installed; no desktop notification");
        };
        let args = plain_args(summary, body);
        if let Err(e) = spawn_args(program, &self.env, &args) {
            log::warn!("desktop notification failed: {e}");
        }
    }

    /// Ask with Allow / Deny buttons; `answer` gets the button pressed, or `None` when the
    /// notification closed without one, was cancelled, or could not offer buttons (then a
    /// plain notification is shown instead and a line logged). `None` returned: nothing
    /// could be shown (no `notify-send`; logged).
    pub fn ask(
        &self,
        summary: &str,
        body: &str,
        expire: Duration,
        answer: impl FnOnce(Option<Choice>) + Send + 'static,
    ) -> Option<Ask> {
        let Some(program) = self.program.clone() else {
            if !MISSING_LOGGED.swap(true, Ordering::Relaxed) {
                log::warn!(
                    "notify-send is not installed, so calls waiting for approval get no Allow/Deny notification; decide with `handnode approve ID` / `handnode deny ID` or POST /approvals/ID (install libnotify-bin for the notification)"
                );
            }
            return None;
        };
        let args = vec![
            "--app-name=handnode".to_string(),
            "--urgency=critical".to_string(),
            format!("--expire-time={}", expire.as_millis()),
            "--action=allow=Allow".to_string(),
            "--action=deny=Deny".to_string(),
            "--wait".to_string(),
            "--".to_string(),
            escape_markup(summary),
            escape_markup(body),
        ];
        let mut child = match Command::new(&program)
            .args(&args)
            .env_clear()
            .envs(self.env.iter().map(|(k, v)| (k, v)))
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
        {
            Ok(child) => child,
            Err(e) => {
                log::warn!("approval notification failed: {}: {e}", program.display());
                return None;
            }
        };
        let pid = rustix::process::Pid::from_raw(child.id() as i32)?;
        let state = Arc::new(Mutex::new(AskState::default()));
        let ask = Ask {
            pid,
            state: Arc::clone(&state),
        };
        let fallback = self.clone();
        let (summary, body) = (summary.to_string(), body.to_string());
        let spawned = std::thread::Builder::new()
            .name("notify-ask".into())
            .spawn(move || {
                let mut out = Vec::new();
                if let Some(stdout) = child.stdout.take() {
                    let _ = stdout.take(MAX_ANSWER_BYTES).read_to_end(&mut out);
                }
                // From here on the pid is about to be reaped: `Ask::cancel` must not signal it.
                let cancelled = {
                    let mut st = state.lock().unwrap_or_else(|e| e.into_inner());
                    st.reaping = true;
                    st.cancelled
                };
                let status = child.wait();
                let choice = match String::from_utf8_lossy(&out).trim() {
                    "allow" => Some(Choice::Allow),
                    "deny" => Some(Choice::Deny),
                    _ => None,
                };
                if choice.is_none() && !cancelled {
                    match status {
                        Ok(s) if s.success() => {}
                        other => {
                            log::warn!(
                                "{} could not show Allow/Deny buttons ({}); showed a plain notification instead: decide with `handnode approve ID` / `handnode deny ID` or POST /approvals/ID",
                                program.display(),
                                match other {
                                    Ok(s) => s.to_string(),
                                    Err(e) => e.to_string(),
                                }
                            );
                            fallback.plain(&summary, &body);
                        }
                    }
                }
                answer(choice);
            });
        if let Err(e) = spawned {
            log::warn!("cannot start the notification reaper: {e}");
        }
        Some(ask)
    }
}

#[derive(Debug, Default)]
struct AskState {
    /// The reaper is about to wait for the child: its pid may be recycled after that.
    reaping: bool,
    cancelled: bool,
}

/// An approval notification on screen; [`Ask::cancel`] takes it away (the call was decided
/// some other way, expired or withdrawn).
#[derive(Debug)]
pub struct Ask {
    pid: rustix::process::Pid,
    state: Arc<Mutex<AskState>>,
}

impl Ask {
    pub fn cancel(&self) {
        let mut st = self.state.lock().unwrap_or_else(|e| e.into_inner());
        st.cancelled = true;
        if !st.reaping {
            // Not yet reaped, so the pid is still this child's (at worst a zombie).
            let _ = rustix::process::kill_process(self.pid, rustix::process::Signal::TERM);
        }
    }
}

/// Notification servers may read the body as markup: what a pod chose to send is shown
/// as text, never as markup.
fn escape_markup(text: &str) -> String {
    text.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

fn plain_args(summary: &str, body: &str) -> Vec<String> {
    vec![
        "--app-name=handnode".to_string(),
        "--".to_string(),
        summary.to_string(),
        body.to_string(),
    ]
}

/// Show a notification if `notify-send` is on `PATH`; log and return otherwise.
pub fn desktop(summary: &str, body: &str) {
    let path = std::env::var("PATH").ok();
    let Some(program) = crate::tools::display::which("notify-send", path.as_deref()) else {
        log::debug!("notify-send not installed; no desktop notification");
        return;
    };
    let env: Vec<(String, String)> = PASS_ENV
        .iter()
        .filter_map(|k| Some((k.to_string(), std::env::var(k).ok()?)))
        .collect();
    if let Err(e) = spawn(&program, &env, summary, body) {
        log::warn!("desktop notification failed: {e}");
    }
}

/// Start `program` with a fixed argv and reap it on a short-lived thread.
fn spawn(
    program: &Path,
    env: &[(String, String)],
    summary: &str,
    body: &str,
) -> std::io::Result<std::thread::JoinHandle<()>> {
    spawn_args(program, env, &plain_args(summary, body))
}

fn spawn_args(
    program: &Path,
    env: &[(String, String)],
    args: &[String],
) -> std::io::Result<std::thread::JoinHandle<()>> {
    let mut child = Command::new(program)
        .args(args)
        .env_clear()
        .envs(env.iter().map(|(k, v)| (k, v)))
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()?;
    let name = PathBuf::from(program);
    std::thread::Builder::new()
        .name("notify".into())
        .spawn(move || match child.wait() {
            Ok(status) if !status.success() => {
                log::debug!("{} exited with {status}", name.display())
            }
            Ok(_) => {}
            Err(e) => log::debug!("waiting for {}: {e}", name.display()),
        })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn argv_is_fixed_and_env_is_only_what_we_pass() {
        let dir = std::env::temp_dir().join(format!("handnode-notify-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let out = dir.join("out");
        let fake = dir.join("notify-send");
        std::fs::write(
            &fake,
            format!(
                "#!/bin/sh\nfor a in \"$@\"; do echo \"arg:$a\"; done > {0}.tmp\nenv >> {0}.tmp\nmv {0}.tmp {0}\n",
                out.display()
            ),
        )
        .unwrap();
        std::fs::set_permissions(&fake, std::fs::Permissions::from_mode(0o755)).unwrap();
        let env = vec![("PATH".to_string(), "/usr/bin:/bin".to_string())];
        let summary = "lent to 'laptop'; $(touch /tmp/pwned)";
        spawn(&fake, &env, summary, "profile desktop until 12:00")
            .unwrap()
            .join()
            .unwrap();
        let text = std::fs::read_to_string(&out).unwrap();
        assert!(text.contains("arg:--app-name=handnode\narg:--\n"), "{text}");
        assert!(text.contains(&format!("arg:{summary}\n")), "{text}");
        assert!(text.contains("arg:profile desktop until 12:00\n"));
        assert!(!text.contains("HOME="), "only the given env: {text}");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_missing_program_is_an_error_not_a_panic() {
        assert!(spawn(Path::new("/nonexistent/notify-send"), &[], "a", "b").is_err());
    }
}
