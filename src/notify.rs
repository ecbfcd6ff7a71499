//! Desktop notifications for the person at the box ("this box is lent to …"), through
//! `notify-send` when it is installed. Fire and forget: the caller never waits.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

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
    let mut child = Command::new(program)
        .args(["--app-name=handnode", "--", summary, body])
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
