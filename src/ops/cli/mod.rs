//! The command line: argv and env → [`Command`] (the subcommand dispatch and `--help`),
//! and the operator subcommands `grant`, `grants`, `revoke`, and `approvals`, `approve`,
//! `deny` for calls waiting for approval: their arguments, and the calls they make to a
//! running daemon's admin API. Secrets come from files, never from argv. `serve`'s and
//! `doctor`'s own flags are parsed by `config`.

use std::collections::HashMap;
use std::fmt::Write as _;
use std::io::Write;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use serde_json::{json, Value};

use crate::base::error::Error;
use crate::base::secret::Secret;
use crate::config::{
    self, apply_flags, default_config_dir, markdown_flags, no_positional, read_secret_file,
    render_flags, resolve_token, Flag, Kind, CREDENTIAL_NAME, ENV_PREFIX, TOKEN_ENV,
    TOKEN_FILE_NAME,
};
use crate::profiles::Profile;
use crate::wire::http::{Client as HttpClient, Request, Target};

mod args;
mod client;
mod commands;
mod show;

pub use args::*;
use client::*;
pub use commands::POLL_INTERVAL;
use commands::*;
pub use show::TABLE_ARGS_BYTES;
use show::*;

/// Where the daemon listens unless `--url` says otherwise.
pub const DEFAULT_URL: &str = "http://127.0.0.1:8795";

/// What the process was asked to do.
// Built once per process; boxing `Config` would only add noise at every use.
#[allow(clippy::large_enum_variant)]
#[derive(Debug)]
pub enum Command {
    /// Run the daemon (also what no subcommand means).
    Serve(crate::config::Config),
    /// Report what works on this box.
    Doctor(config::DoctorArgs),
    /// List the registry's tools (`ops::tool_list`).
    Tools(crate::ops::tool_list::ToolsArgs),
    /// Ask a running daemon to attach to a pod session.
    Grant(GrantArgs),
    /// List a running daemon's grants.
    Grants(GrantsArgs),
    /// End one grant or all of them.
    Revoke(RevokeArgs),
    /// List the calls waiting for approval (or follow them).
    Approvals(ApprovalsArgs),
    /// Allow or deny one waiting call.
    Decide(DecideArgs),
    /// What runs now (`calls`), or the running jobs (`jobs`).
    Calls(CallsArgs),
    /// Stop one call or job.
    Stop(StopArgs),
    /// What the agent did: a journal, or the list of them.
    Journal(JournalArgs),
    /// Halt everything, or resume.
    Halt(HaltArgs),
    /// Print this text to stdout and exit 0.
    Help(String),
    /// Print `handnode <version>` and exit 0.
    Version,
}

/// The subcommands, for errors and help.
const SUBCOMMANDS: &str =
    "serve, doctor, tools, grant, grants, revoke, approvals, approve, deny, calls, jobs, stop, halt, resume, journal, help";

/// Turn argv (without the program name) and the environment into what to do.
///
/// For `serve` this also finds the admin token (`config::parse_serve`). Errors are
/// [`Error::Config`] with a message that says what to fix (exit 2).
pub fn parse(args: &[String], env: &HashMap<String, String>) -> Result<Command, Error> {
    let (sub, rest) = match args.first().map(String::as_str) {
        Some(
            word @ ("serve" | "doctor" | "tools" | "grant" | "grants" | "revoke" | "approvals"
            | "approve" | "deny" | "calls" | "jobs" | "stop" | "halt" | "resume"
            | "journal" | "help"),
        ) => (word, &args[1..]),
        Some(word) if !word.starts_with('-') => {
            return Err(Error::Config(format!(
                "unknown subcommand '{word}'; expected one of {SUBCOMMANDS} (see handnode --help)"
            )))
        }
        _ => ("serve", args),
    };
    // `handnode --help` and `handnode help`: the subcommands on one screen; the daemon's
    // own flags are `handnode serve --help` (issue 37: 305 lines were mostly serve flags).
    let named = args.first().is_some_and(|a| a == sub);
    if sub == "help" {
        return match rest.first() {
            Some(of) => help_text(of).map(Command::Help),
            None => Ok(Command::Help(config::overview_help())),
        };
    }
    if rest.iter().any(|a| a == "--help" || a == "-h") {
        if !named {
            return Ok(Command::Help(config::overview_help()));
        }
        return help_text(sub).map(Command::Help);
    }
    if rest.iter().any(|a| a == "--version" || a == "-V") {
        return Ok(Command::Version);
    }
    match sub {
        "serve" => {
            warn_unknown_env(env);
            config::parse_serve(rest, env).map(Command::Serve)
        }
        "doctor" => {
            let mut args = config::DoctorArgs::default();
            let positional = apply_flags(&[config::DOCTOR_FLAGS], rest, env, &mut args)?;
            no_positional("doctor", &positional)?;
            Ok(Command::Doctor(args))
        }
        "tools" => crate::ops::tool_list::parse(rest).map(Command::Tools),
        _ => parse_operator(sub, rest, env),
    }
}

/// `handnode SUB --help`, as printed.
pub fn help_text(sub: &str) -> Result<String, Error> {
    match sub {
        "serve" => Ok(config::serve_help(crate::ops::lists::expand)),
        "doctor" => {
            let mut out = String::from(
                "Usage: handnode doctor [--json] [--browser-command COMMAND] [--apps ID,...]\n\nWhat works on this box, and what to install or set for the rest.\n\nFlags:\n",
            );
            render_flags(&mut out, &[config::DOCTOR_FLAGS], crate::ops::lists::expand);
            Ok(out)
        }
        "tools" => Ok(crate::ops::tool_list::help()),
        "grant" | "grants" | "revoke" | "approvals" | "approve" | "deny" => Ok(help(sub)),
        other => Err(Error::Config(format!(
            "no help for '{other}'; subcommands are {SUBCOMMANDS}"
        ))),
    }
}

/// The README's flag reference: one Markdown table for `serve`, one for the operator
/// subcommands, generated from the same tables as parsing and `--help`.
pub fn help_table_markdown() -> String {
    let mut out = String::from("Flags of `handnode serve` (no subcommand):\n\n");
    markdown_flags(&mut out, &[config::SERVE_FLAGS], crate::ops::lists::expand);
    let _ = write!(
        out,
        "\nThe admin token is never a flag: `--token-file`, env `{TOKEN_ENV}`, \
`$CREDENTIALS_DIRECTORY/{CREDENTIAL_NAME}`, `<config dir>/{TOKEN_FILE_NAME}`, in that order.\n\n"
    );
    markdown(&mut out);
    out
}

/// Env vars every subcommand reads besides the flag tables.
const OTHER_KNOWN_ENV: [&str; 1] = [TOKEN_ENV];

/// `HANDNODE_*` variables that are not settings but reach the daemon anyway: `cargo run`
/// passes build.rs's `rustc-env` values on to the program it runs.
const BUILD_ENV: [&str; 1] = ["HANDNODE_TARGET"];

/// A `HANDNODE_*` variable no table knows is most likely a typo of one that does.
fn warn_unknown_env(env: &HashMap<String, String>) {
    for var in unknown_env(env) {
        log::warn!("ignoring unknown env var {var} (see handnode --help for the names)");
    }
}

/// The `HANDNODE_*` variables of `env` that nothing reads, sorted.
fn unknown_env(env: &HashMap<String, String>) -> Vec<&String> {
    let known: Vec<String> = config::SERVE_FLAGS
        .iter()
        .map(Flag::env_name)
        .chain(env_names())
        .chain(config::old_env_names())
        .chain(OTHER_KNOWN_ENV.iter().map(|s| s.to_string()))
        .chain(BUILD_ENV.iter().map(|s| s.to_string()))
        .collect();
    let mut unknown: Vec<&String> = env
        .keys()
        .filter(|k| k.starts_with(ENV_PREFIX) && !known.contains(k))
        .collect();
    unknown.sort();
    unknown
}

/// Exit codes of the operator subcommands.
pub const EXIT_OK: i32 = 0;

/// Daemon unreachable, or it refused.
pub const EXIT_FAILURE: i32 = 1;

/// Bad usage; also a `grant` that would replace a live grant without `--replace`.
pub const EXIT_USAGE: i32 = 2;

/// `grant --wait` saw the grant end before it attached.
pub const EXIT_GRANT_ENDED: i32 = 3;

/// `grant --wait` gave up after `--wait-secs`; the grant is live and keeps dialing.
pub const EXIT_WAIT_GAVE_UP: i32 = 4;

/// Run an operator subcommand, printing to `out` (results) and `err` (progress and
/// failures). Returns the process exit code.
pub fn run(command: &Command, out: &mut dyn Write, err: &mut dyn Write) -> i32 {
    let result = match command {
        Command::Grant(args) => grant(args, out, err),
        Command::Grants(args) => grants(args, out),
        Command::Revoke(args) => revoke(args, out),
        Command::Approvals(args) => approvals(args, out),
        Command::Decide(args) => decide(args, out),
        Command::Calls(args) => calls(args, out),
        Command::Stop(args) => stop(args, out),
        Command::Journal(args) => journal(args, out),
        Command::Halt(args) => halt(args, out),
        _ => Err(Failure("not an operator subcommand".into())),
    };
    match result {
        Ok(code) => code,
        Err(Failure(msg)) => {
            let _ = writeln!(err, "handnode: {msg}");
            EXIT_FAILURE
        }
    }
}

/// [`run`] on stdout and stderr.
pub fn main(command: &Command) -> i32 {
    run(
        command,
        &mut std::io::stdout().lock(),
        &mut std::io::stderr(),
    )
}

#[cfg(test)]
mod tests;
