//! The `bash -c <command>` a `bash` call and a job (`bash_start`) both run, and the argument
//! fields they share: `command`, `cwd`, `env` and bash-named bounded integers. Below both
//! tools, so that `bash` can hand a call past its inline limit to [`super::jobs`] while the
//! job tools build their command here.
//!
//! **Working directory.** `cwd` must name an existing directory (else a tool error). A
//! relative `cwd`, and the default, are taken from the daemon user's `$HOME` when that is
//! a directory, else from the daemon's own working directory.

use std::path::PathBuf;
use std::process::Command;
use std::sync::Arc;

use crate::cgroup::RunGroup;

use serde_json::{Map, Value};

use super::args::{self, Naming};
use super::CallContext;

/// Environment variable every job's processes carry (its job id), so recovery can tell a
/// job's orphans from strangers that reuse its process group id, and the subreaper
/// fallback can attribute them (declared with the containment that reads it).
pub const MARKER_ENV: &str = crate::cgroup::MARKER_ENV;
/// The job scope, and the cgroup, of the owner's `/mcp` calls (a grant's are its id).
pub const OWNER_SCOPE: &str = "owner";

/// `command`: a non-empty string without NUL bytes.
pub(crate) fn command_field(map: &Map<String, Value>) -> Result<String, String> {
    match map.get("command") {
        None | Some(Value::Null) => {
            Err("command is required: the bash script to run, as a string".into())
        }
        Some(Value::String(s)) if s.is_empty() => Err("command must be a non-empty string".into()),
        Some(Value::String(s)) if s.contains('\0') => {
            Err("command must not contain NUL bytes".into())
        }
        Some(Value::String(s)) => Ok(s.clone()),
        Some(_) => Err("command must be a string".into()),
    }
}

/// `cwd`: an optional non-empty path without NUL bytes.
pub(crate) fn cwd_field(map: &Map<String, Value>) -> Result<Option<String>, String> {
    match map.get("cwd") {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) if s.is_empty() || s.contains('\0') => {
            Err("cwd must be a non-empty path without NUL bytes".into())
        }
        Some(Value::String(s)) => Ok(Some(s.clone())),
        Some(_) => Err("cwd must be a string (a directory path)".into()),
    }
}

/// `env`: an optional object of string values with valid names.
pub(crate) fn env_field(map: &Map<String, Value>) -> Result<Vec<(String, String)>, String> {
    match map.get("env") {
        None | Some(Value::Null) => Ok(Vec::new()),
        Some(Value::Object(vars)) => {
            let mut env = Vec::with_capacity(vars.len());
            for (name, value) in vars {
                if name.is_empty() || name.contains('=') || name.contains('\0') {
                    return Err(format!(
                        "env: {name:?} is not a valid variable name (non-empty, no '=' or NUL)"
                    ));
                }
                match value {
                    Value::String(v) if v.contains('\0') => {
                        return Err(format!("env.{name} must not contain NUL bytes"))
                    }
                    Value::String(v) => env.push((name.clone(), v.clone())),
                    _ => return Err(format!("env.{name} must be a string")),
                }
            }
            Ok(env)
        }
        Some(_) => Err("env must be an object of string values".into()),
    }
}

/// An optional integer field in `range`, `default` when absent: [`args::int`] in bash's
/// naming.
pub(crate) fn int_field(
    map: &Map<String, Value>,
    field: &str,
    default: u64,
    range: std::ops::RangeInclusive<u64>,
    why: &str,
) -> Result<u64, String> {
    let bound = |v: u64| i64::try_from(v).unwrap_or(i64::MAX);
    let range = bound(*range.start())..=bound(*range.end());
    Ok(args::int(map, field, range, Naming::Plain, Some(why))?.map_or(default, |v| v as u64))
}

/// The job scope of a call, which is also its cgroup's grant: its grant, or the owner's
/// `/mcp`.
pub(crate) fn scope(cx: &CallContext) -> &str {
    cx.grant.as_ref().map_or(OWNER_SCOPE, |g| g.id.as_str())
}

/// `$HOME` when it is a directory.
fn home_dir() -> Option<PathBuf> {
    std::env::var_os("HOME")
        .map(PathBuf::from)
        .filter(|p| p.is_absolute() && p.is_dir())
}

/// The directory to run in (`None` = the daemon's own), or a tool error's text.
fn resolve_cwd(cwd: Option<&str>) -> Result<Option<PathBuf>, String> {
    let home = home_dir();
    let Some(cwd) = cwd else {
        return Ok(home);
    };
    let path = match &home {
        Some(home) => home.join(cwd),
        None => PathBuf::from(cwd),
    };
    match std::fs::metadata(&path) {
        Ok(meta) if meta.is_dir() => Ok(Some(path)),
        Ok(_) => Err(format!("cwd {} is not a directory", path.display())),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            Err(format!("cwd {} does not exist", path.display()))
        }
        Err(e) => Err(format!("cwd {} cannot be used: {e}", path.display())),
    }
}

/// The `bash -c <command>` of a call or job: the daemon's bash, the scrubbed
/// environment plus the caller's `env` plus the job marker, the working directory, and
/// the run's cgroup under its grant (§16), which the command enters before bash starts.
/// The `Err` is a tool error's text.
pub(crate) fn command(
    cx: &CallContext,
    script: &str,
    cwd: Option<&str>,
    env: &[(String, String)],
    job_id: &str,
) -> Result<(Command, PathBuf, Option<Arc<RunGroup>>), String> {
    let cwd = resolve_cwd(cwd)?;
    // The bash found on the daemon's PATH at start, so a caller's PATH in `env` cannot
    // change which program runs.
    let program = cx
        .host
        .facts
        .bash
        .clone()
        .unwrap_or_else(|| PathBuf::from("bash"));
    let group = cx
        .host
        .confine
        .run(scope(cx), cx.grant.is_some(), job_id)
        .map_err(|e| format!("could not contain the command: {e}"))?;
    // The call's display (§19): a grant's own display replaces the owner's session
    // variables; the caller's `env` still wins. Its shell runs inside its wall, where
    // other grants' displays and handnode's files are not there.
    let display = super::display::call_display(cx);
    let mut cmd = super::display::own::walled_command(cx, &group, &program)?;
    let (unset, mut set) = display.child_vars();
    set.extend(env.iter().cloned());
    cmd.arg("-c")
        .arg(script)
        .env_clear()
        .envs(super::env::child_env(
            std::env::vars_os(),
            &cx.host.config,
            unset,
            &set,
        ))
        .env(MARKER_ENV, job_id);
    if let Some(cwd) = cwd {
        cmd.current_dir(cwd);
    }
    Ok((cmd, program, Some(group)))
}
