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
use crate::wire::httpc::{self, Request, Target};

/// Where the daemon listens unless `--url` says otherwise.
pub const DEFAULT_URL: &str = "http://127.0.0.1:8795";
/// How often `grant --wait` asks for the grant's state.
pub const POLL_INTERVAL: Duration = Duration::from_millis(200);
/// Whole-request timeout; a grant with an admin credential waits for the pod's mint (15 s).
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(30);
/// Largest admin API answer the CLI reads (a full grant list is a few KiB).
const MAX_REPLY_BYTES: u64 = 4 << 20;
use crate::config::MAX_TTL_SECS;
/// Longest grant id accepted on the command line (a UUID is 36).
const MAX_ID_LEN: usize = 64;
/// How long one `approvals --watch` long-poll waits for a change (seconds); under
/// [`REQUEST_TIMEOUT`], so a quiet daemon is not mistaken for a dead one.
pub const WATCH_WAIT_SECS: u64 = 25;

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
    /// Print this text to stdout and exit 0.
    Help(String),
    /// Print `handnode <version>` and exit 0.
    Version,
}

/// The subcommands, for errors and help.
const SUBCOMMANDS: &str =
    "serve, doctor, tools, grant, grants, revoke, approvals, approve, deny, help";

/// Turn argv (without the program name) and the environment into what to do.
///
/// For `serve` this also finds the admin token (`config::parse_serve`). Errors are
/// [`Error::Config`] with a message that says what to fix (exit 2).
pub fn parse(args: &[String], env: &HashMap<String, String>) -> Result<Command, Error> {
    let (sub, rest) = match args.first().map(String::as_str) {
        Some(
            word @ ("serve" | "doctor" | "tools" | "grant" | "grants" | "revoke" | "approvals"
            | "approve" | "deny" | "help"),
        ) => (word, &args[1..]),
        Some(word) if !word.starts_with('-') => {
            return Err(Error::Config(format!(
                "unknown subcommand '{word}'; expected one of {SUBCOMMANDS} (see handnode --help)"
            )))
        }
        _ => ("serve", args),
    };
    if sub == "help" {
        return help_for(rest.first().map_or("serve", String::as_str)).map(Command::Help);
    }
    if rest.iter().any(|a| a == "--help" || a == "-h") {
        return help_for(sub).map(Command::Help);
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

fn help_for(sub: &str) -> Result<String, Error> {
    match sub {
        "serve" => Ok(config::serve_help()),
        "doctor" => {
            let mut out = String::from(
                "Usage: handnode doctor [--json] [--browser-command COMMAND]\n\nWhat works on this box, and what to install or set for the rest.\n\nFlags:\n",
            );
            render_flags(&mut out, &[config::DOCTOR_FLAGS]);
            Ok(out)
        }
        "tools" => Ok(crate::ops::tool_list::HELP.to_string()),
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
    markdown_flags(&mut out, &[config::SERVE_FLAGS]);
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
/// How long `grant --wait` waits for the attach unless `--wait-secs` says otherwise.
pub const DEFAULT_WAIT_SECS: u64 = 30;

/// How to reach the daemon.
#[derive(Clone, Debug)]
pub struct ClientArgs {
    /// Base URL without a trailing `/`.
    pub url: String,
    /// The daemon's local socket, used instead of `url` when set.
    pub socket: Option<std::path::PathBuf>,
    pub token: Option<Secret>,
    /// Where the token came from, for hints when the daemon says 401.
    pub token_source: Option<String>,
}

/// How the daemon gets the attach secret (§4).
#[derive(Clone, Debug)]
pub enum Credential {
    /// A pre-minted attach secret.
    Secret(Secret),
    /// The pod's admin credential; the daemon mints once and forgets it.
    AdminCredential(Secret),
}

#[derive(Clone, Debug)]
pub struct GrantArgs {
    pub client: ClientArgs,
    pub runtime: String,
    pub session: String,
    /// `None`: the daemon's default (`observe`), or `custom` when `allow` is given.
    pub profile: Option<Profile>,
    /// Tool names or `prefix*` patterns; as the daemon's `allow` and `deny` lists.
    pub allow: Vec<String>,
    pub deny: Vec<String>,
    /// `None`: the daemon's default (3600).
    pub ttl_secs: Option<u64>,
    pub credential: Credential,
    /// `approve` (§10): tool names, or `["shell"]` for the word.
    pub approve: Option<Vec<String>>,
    /// The folder to lend (§18), made absolute against the working directory.
    pub folder: Option<PathBuf>,
    /// `"display":"own"` (§19): the grant gets a headless display of its own.
    pub own_display: bool,
    pub wait: bool,
    /// How long `--wait` waits for the attach before it gives up (the grant keeps dialing).
    pub wait_secs: u64,
    /// End a live grant of the same target that has other tools (else that is refused).
    pub replace: bool,
    pub json: bool,
}

#[derive(Clone, Debug)]
pub struct GrantsArgs {
    pub client: ClientArgs,
    pub json: bool,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RevokeTarget {
    One(String),
    All,
}

#[derive(Clone, Debug)]
pub struct RevokeArgs {
    pub client: ClientArgs,
    pub target: RevokeTarget,
}

#[derive(Clone, Debug)]
pub struct ApprovalsArgs {
    pub client: ClientArgs,
    /// Keep printing the list whenever it changes (until interrupted).
    pub watch: bool,
    pub json: bool,
    /// `--full ID`: show that waiting call's every argument, nothing cut.
    pub full: Option<String>,
}

#[derive(Clone, Debug)]
pub struct DecideArgs {
    pub client: ClientArgs,
    pub id: String,
    pub allow: bool,
    pub remember: bool,
    pub reason: Option<String>,
}

/// Everything any operator subcommand may be given, before validation.
#[derive(Default)]
pub(crate) struct OperatorDraft {
    url: Option<String>,
    token_file: Option<PathBuf>,
    config_dir: Option<PathBuf>,
    runtime: Option<String>,
    session: Option<String>,
    profile: Option<Profile>,
    allow: Vec<String>,
    deny: Vec<String>,
    ttl_secs: Option<u64>,
    secret_file: Option<PathBuf>,
    admin_credential_file: Option<PathBuf>,
    wait: bool,
    wait_secs: Option<u64>,
    replace: bool,
    json: bool,
    all: bool,
    watch: bool,
    full: Option<String>,
    remember: bool,
    reason: Option<String>,
    approve: Option<Vec<String>>,
    folder: Option<PathBuf>,
    own_display: bool,
}

/// `--allow`/`--deny` values: each may itself be a comma-separated list.
fn tool_names(values: Vec<String>) -> Vec<String> {
    values
        .iter()
        .flat_map(|v| v.split(','))
        .map(str::trim)
        .filter(|v| !v.is_empty())
        .map(String::from)
        .collect()
}

fn nonempty(value: String) -> Result<String, String> {
    if value.trim().is_empty() {
        Err("expected a value, got nothing".into())
    } else {
        Ok(value.trim().to_string())
    }
}

const CLIENT_FLAGS: &[Flag<OperatorDraft>] = &[
    Flag {
        name: "url",
        env: true,
        default: DEFAULT_URL,
        help: "Base URL of the daemon's admin API (its --listen). Without it the daemon's local socket ($XDG_RUNTIME_DIR/handnode.sock, or HANDNODE_LOCAL_SOCKET) is used when there is one: no token needed, and it works with --allow-login.",
        kind: Kind::Text {
            metavar: "URL",
            set: |d, v| {
                d.url = Some(nonempty(v)?);
                Ok(())
            },
        },
    },
    Flag {
        name: "token-file",
        env: true,
        default: "",
        help: "File holding the admin token; else env HANDNODE_TOKEN, $CREDENTIALS_DIRECTORY/handnode-token, <config dir>/token, as the daemon reads them.",
        kind: Kind::Text {
            metavar: "PATH",
            set: |d, v| {
                d.token_file = Some(nonempty(v)?.into());
                Ok(())
            },
        },
    },
    Flag {
        name: "config-dir",
        env: true,
        default: "$XDG_CONFIG_HOME/handnode or ~/.config/handnode",
        help: "Where the default token file is looked for.",
        kind: Kind::Text {
            metavar: "DIR",
            set: |d, v| {
                d.config_dir = Some(nonempty(v)?.into());
                Ok(())
            },
        },
    },
];

const JSON_FLAG: &[Flag<OperatorDraft>] = &[Flag {
    name: "json",
    env: false,
    default: "",
    help: "Print the daemon's JSON instead of a summary.",
    kind: Kind::Switch(|d| d.json = true),
}];

const GRANT_FLAGS: &[Flag<OperatorDraft>] = &[
    Flag {
        name: "runtime",
        env: false,
        default: "",
        help: "The pod runtime's ws:// or wss:// URL (required).",
        kind: Kind::Text {
            metavar: "URL",
            set: |d, v| {
                d.runtime = Some(check_runtime(v.trim())?);
                Ok(())
            },
        },
    },
    Flag {
        name: "session",
        env: false,
        default: "",
        help: "The session to lend the box to, [a-z0-9-]{1,32} (required).",
        kind: Kind::Text {
            metavar: "NAME",
            set: |d, v| {
                d.session = Some(check_session(v.trim())?);
                Ok(())
            },
        },
    },
    Flag {
        name: "profile",
        env: false,
        default: "observe",
        help: "Which tools the agent sees: owner, desktop, observe, browser (a throwaway browser of the grant's own; needs the daemon's --browser-command), files (sys_info and the file tools in the --folder you lend) or custom (the --allow list). Only observe, browser and files keep the agent out of this box's shell; the answer says whether the grant reaches one (shell yes|gated|no, and why).",
        kind: Kind::Text {
            metavar: "PROFILE",
            set: |d, v| {
                d.profile = Some(v.trim().parse().map_err(|e: &str| e.to_string())?);
                Ok(())
            },
        },
    },
    Flag {
        name: "allow",
        env: false,
        default: "",
        help: "Lend exactly these tools (names, or prefix* patterns such as browser_*; comma-separated too). Implies --profile custom.",
        kind: Kind::List {
            metavar: "TOOL",
            set: |d, v| {
                d.allow = tool_names(v);
                Ok(())
            },
        },
    },
    Flag {
        name: "deny",
        env: false,
        default: "",
        help: "Take these tools (names or prefix* patterns) out of the profile's list.",
        kind: Kind::List {
            metavar: "TOOL",
            set: |d, v| {
                d.deny = tool_names(v);
                Ok(())
            },
        },
    },
    Flag {
        name: "ttl",
        env: false,
        default: "1h",
        help: "How long the grant lasts: N seconds, or Ns, Nm, Nh; at most 24h.",
        kind: Kind::Text {
            metavar: "DURATION",
            set: |d, v| {
                d.ttl_secs = Some(parse_ttl(&v)?);
                Ok(())
            },
        },
    },
    Flag {
        name: "secret-file",
        env: false,
        default: "",
        help: "File holding a pre-minted attach secret.",
        kind: Kind::Text {
            metavar: "PATH",
            set: |d, v| {
                d.secret_file = Some(nonempty(v)?.into());
                Ok(())
            },
        },
    },
    Flag {
        name: "admin-credential-file",
        env: false,
        default: "",
        help: "File holding the pod's admin credential; the daemon uses it once to mint a secret and forgets it. Give this or --secret-file.",
        kind: Kind::Text {
            metavar: "PATH",
            set: |d, v| {
                d.admin_credential_file = Some(nonempty(v)?.into());
                Ok(())
            },
        },
    },
    Flag {
        name: "approve",
        env: false,
        default: "",
        help: "Tools whose every call waits for your yes (handnode approvals / approve / deny, or the desktop notification): a comma-separated list such as bash,key, or shell for every shell tool the grant can see.",
        kind: Kind::Text {
            metavar: "TOOLS|shell",
            set: |d, v| {
                let names: Vec<String> = v
                    .split(',')
                    .map(str::trim)
                    .filter(|n| !n.is_empty())
                    .map(String::from)
                    .collect();
                if names.is_empty() {
                    return Err("expected tool names such as bash,key, or shell".into());
                }
                d.approve = Some(names);
                Ok(())
            },
        },
    },
    Flag {
        name: "own-display",
        env: false,
        default: "",
        help: "Give the grant a headless display of its own (\"display\":\"own\"), started on its first graphical or bash call, so the agent never touches your screen; needs a profile with display tools (desktop, owner, observe).",
        kind: Kind::Switch(|d| d.own_display = true),
    },
    Flag {
        name: "folder",
        env: false,
        default: "",
        help: "Lend this directory: the file tools (file_get, file_put, file_list) reach it and nothing beneath or beside it can lead out (required by --profile files). A relative path is taken from the current directory; give the real path (no symlink on the way).",
        kind: Kind::Text {
            metavar: "DIR",
            set: |d, v| {
                let path = PathBuf::from(nonempty(v)?);
                d.folder = Some(if path.is_absolute() {
                    path
                } else {
                    std::env::current_dir()
                        .map_err(|e| format!("cannot tell the current directory: {e}"))?
                        .join(path)
                });
                Ok(())
            },
        },
    },
    Flag {
        name: "wait",
        env: false,
        default: "",
        help: "Wait until the grant is attached (exit 0) or has ended (exit 3), at most --wait-secs (then exit 4: the grant keeps dialing until revoked or expired).",
        kind: Kind::Switch(|d| d.wait = true),
    },
    Flag {
        name: "wait-secs",
        env: false,
        default: "30",
        help: "How long --wait waits for the attach before it gives up with the last dial error.",
        kind: Kind::Text {
            metavar: "N",
            set: |d, v| {
                match v.trim().parse::<u64>() {
                    Ok(n) if (1..=MAX_TTL_SECS).contains(&n) => d.wait_secs = Some(n),
                    _ => return Err(format!("expected whole seconds, 1...{MAX_TTL_SECS}")),
                }
                d.wait = true;
                Ok(())
            },
        },
    },
    Flag {
        name: "replace",
        env: false,
        default: "",
        help: "If a live grant already lends this box to the session with other tools (profile, lists or approve), end it (`replaced`) and lend this one. Without it that is refused; the same tools again renew the grant in place.",
        kind: Kind::Switch(|d| d.replace = true),
    },
];

const REVOKE_FLAGS: &[Flag<OperatorDraft>] = &[Flag {
    name: "all",
    env: false,
    default: "",
    help: "Revoke every live grant.",
    kind: Kind::Switch(|d| d.all = true),
}];

const WATCH_FLAG: &[Flag<OperatorDraft>] = &[Flag {
    name: "watch",
    env: false,
    default: "",
    help: "Keep listing: print the waiting calls again whenever they change, until interrupted.",
    kind: Kind::Switch(|d| d.watch = true),
}];

const FULL_FLAG: &[Flag<OperatorDraft>] = &[Flag {
    name: "full",
    env: false,
    default: "",
    help: "Show one waiting call (by id) with every argument, nothing cut: control, bidi and invisible characters as \\u{…} escapes, long runs of spaces counted, code-running env variables named first.",
    kind: Kind::Text {
        metavar: "ID",
        set: |d, v| {
            d.full = Some(v);
            Ok(())
        },
    },
}];

const REMEMBER_FLAG: &[Flag<OperatorDraft>] = &[Flag {
    name: "remember",
    env: false,
    default: "",
    help: "Also let later calls of the same tool under that grant run without asking, until the grant ends.",
    kind: Kind::Switch(|d| d.remember = true),
}];

const REASON_FLAG: &[Flag<OperatorDraft>] = &[Flag {
    name: "reason",
    env: false,
    default: "",
    help: "Why, in a few words; the agent is told (denied by you: TEXT).",
    kind: Kind::Text {
        metavar: "TEXT",
        set: |d, v| {
            if v.len() > crate::grants::approvals::MAX_REASON_BYTES {
                return Err(format!(
                    "at most {} bytes",
                    crate::grants::approvals::MAX_REASON_BYTES
                ));
            }
            d.reason = Some(nonempty(v)?);
            Ok(())
        },
    },
}];

fn tables(sub: &str) -> &'static [&'static [Flag<OperatorDraft>]] {
    match sub {
        "grant" => &[GRANT_FLAGS, JSON_FLAG, CLIENT_FLAGS],
        "grants" => &[JSON_FLAG, CLIENT_FLAGS],
        "approvals" => &[WATCH_FLAG, FULL_FLAG, JSON_FLAG, CLIENT_FLAGS],
        "approve" => &[REMEMBER_FLAG, CLIENT_FLAGS],
        "deny" => &[REASON_FLAG, CLIENT_FLAGS],
        _ => &[REVOKE_FLAGS, CLIENT_FLAGS],
    }
}

/// Env vars the operator subcommands read, so `serve` does not call them unknown.
fn env_names() -> impl Iterator<Item = String> {
    CLIENT_FLAGS.iter().filter(|f| f.env).map(Flag::env_name)
}

/// `--ttl`: `N`, `Ns`, `Nm` or `Nh`, within 1 s…24 h.
pub fn parse_ttl(value: &str) -> Result<u64, String> {
    let value = value.trim();
    let fail = || format!("expected N seconds or Ns/Nm/Nh between 1s and 24h, got '{value}'");
    let (digits, unit) = match value.char_indices().last() {
        Some((i, 's')) => (&value[..i], 1),
        Some((i, 'm')) => (&value[..i], 60),
        Some((i, 'h')) => (&value[..i], 3600),
        _ => (value, 1),
    };
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return Err(fail());
    }
    let secs = digits
        .parse::<u64>()
        .ok()
        .and_then(|n| n.checked_mul(unit))
        .ok_or_else(fail)?;
    if !(1..=MAX_TTL_SECS).contains(&secs) {
        return Err(fail());
    }
    Ok(secs)
}

/// The daemon checks these too; checking here saves a round trip and reads the same.
fn check_runtime(value: &str) -> Result<String, String> {
    let lower = value.to_ascii_lowercase();
    let rest = lower
        .strip_prefix("ws://")
        .or_else(|| lower.strip_prefix("wss://"));
    match rest {
        Some(r) if !r.is_empty() && !r.starts_with(['/', '?', '#', ':']) => Ok(value.to_string()),
        _ => Err("runtime must be a ws:// or wss:// URL".into()),
    }
}

fn check_session(value: &str) -> Result<String, String> {
    let ok = (1..=32).contains(&value.len())
        && value
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-');
    if ok {
        Ok(value.to_string())
    } else {
        Err("session must match [a-z0-9-]{1,32}".into())
    }
}

fn check_url(value: &str) -> Result<String, Error> {
    let lower = value.to_ascii_lowercase();
    let rest = lower
        .strip_prefix("http://")
        .or_else(|| lower.strip_prefix("https://"));
    match rest {
        Some(r) if !r.is_empty() && !r.starts_with('/') => {
            Ok(value.trim_end_matches('/').to_string())
        }
        _ => Err(Error::Config(format!(
            "--url: expected http://HOST:PORT such as {DEFAULT_URL}, got '{value}'"
        ))),
    }
}

fn check_id(value: &str) -> Result<String, Error> {
    check_id_of(value, "a grant id (see `handnode grants` for the ids)")
}

fn check_id_of(value: &str, what: &str) -> Result<String, Error> {
    let ok = (1..=MAX_ID_LEN).contains(&value.len())
        && value
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-');
    if ok {
        Ok(value.to_ascii_lowercase())
    } else {
        Err(Error::Config(format!("'{value}' is not {what}")))
    }
}

fn client_args(
    draft: &mut OperatorDraft,
    env: &HashMap<String, String>,
) -> Result<ClientArgs, Error> {
    let url = check_url(draft.url.as_deref().unwrap_or(DEFAULT_URL))?;
    // No address asked for: the local socket, when a daemon serves one.
    let socket = match draft.url {
        Some(_) => None,
        None => env
            .get("HANDNODE_LOCAL_SOCKET")
            .filter(|v| v.as_str() != "none" && !v.is_empty())
            .map(std::path::PathBuf::from)
            .or_else(|| config::default_local_socket(env))
            .filter(|p| {
                use std::os::unix::fs::FileTypeExt;
                std::fs::metadata(p).is_ok_and(|m| m.file_type().is_socket())
            }),
    };
    let config_dir = draft.config_dir.take().or_else(|| default_config_dir(env));
    let token = resolve_token(draft.token_file.as_deref(), env, config_dir.as_deref())?;
    Ok(ClientArgs {
        url,
        socket,
        token_source: token.as_ref().map(|t| t.source.clone()),
        token: token.map(|t| t.secret),
    })
}

/// Parse `grant`, `grants` or `revoke` arguments (after the subcommand word).
fn parse_operator(
    sub: &str,
    args: &[String],
    env: &HashMap<String, String>,
) -> Result<Command, Error> {
    let mut draft = OperatorDraft::default();
    let positional = apply_flags(tables(sub), args, env, &mut draft)?;
    match sub {
        "grant" => {
            no_positional(sub, &positional)?;
            let usage =
                |msg: &str| Error::Config(format!("grant: {msg} (see handnode grant --help)"));
            let runtime = draft
                .runtime
                .take()
                .ok_or_else(|| usage("--runtime URL is required"))?;
            let session = draft
                .session
                .take()
                .ok_or_else(|| usage("--session NAME is required"))?;
            let read = |path: &PathBuf| {
                read_secret_file(path).map_err(|e| Error::Config(format!("grant: {e}")))
            };
            let credential = match (&draft.secret_file, &draft.admin_credential_file) {
                (Some(path), None) => Credential::Secret(read(path)?),
                (None, Some(path)) => Credential::AdminCredential(read(path)?),
                _ => {
                    return Err(usage(
                        "give exactly one of --secret-file or --admin-credential-file",
                    ))
                }
            };
            Ok(Command::Grant(GrantArgs {
                client: client_args(&mut draft, env)?,
                runtime,
                session,
                profile: draft.profile,
                allow: std::mem::take(&mut draft.allow),
                deny: std::mem::take(&mut draft.deny),
                ttl_secs: draft.ttl_secs,
                credential,
                approve: draft.approve.take(),
                folder: draft.folder.take(),
                own_display: draft.own_display,
                wait: draft.wait,
                wait_secs: draft.wait_secs.unwrap_or(DEFAULT_WAIT_SECS),
                replace: draft.replace,
                json: draft.json,
            }))
        }
        "grants" => {
            no_positional(sub, &positional)?;
            Ok(Command::Grants(GrantsArgs {
                client: client_args(&mut draft, env)?,
                json: draft.json,
            }))
        }
        "approvals" => {
            no_positional(sub, &positional)?;
            Ok(Command::Approvals(ApprovalsArgs {
                client: client_args(&mut draft, env)?,
                watch: draft.watch,
                json: draft.json,
                full: draft.full.take(),
            }))
        }
        "approve" | "deny" => {
            let [id] = positional.as_slice() else {
                return Err(Error::Config(format!(
                    "{sub}: give one approval id (see handnode approvals for the ids)"
                )));
            };
            let id = check_id_of(id, "an approval id (see `handnode approvals` for the ids)")?;
            Ok(Command::Decide(DecideArgs {
                client: client_args(&mut draft, env)?,
                id,
                allow: sub == "approve",
                remember: draft.remember,
                reason: draft.reason.take(),
            }))
        }
        _ => {
            let target = match (positional.as_slice(), draft.all) {
                ([id], false) => RevokeTarget::One(check_id(id)?),
                ([], true) => RevokeTarget::All,
                _ => {
                    return Err(Error::Config(
                        "revoke: give one grant id or --all (see handnode revoke --help)".into(),
                    ))
                }
            };
            Ok(Command::Revoke(RevokeArgs {
                client: client_args(&mut draft, env)?,
                target,
            }))
        }
    }
}

/// `handnode grant|grants|revoke --help`.
fn help(sub: &str) -> String {
    let head = match sub {
        "grant" => "Usage: handnode grant --runtime URL --session NAME (--secret-file PATH | --admin-credential-file PATH)\n                      [--profile PROFILE] [--allow TOOL]... [--deny TOOL]... [--ttl DURATION]\n                      [--folder DIR] [--own-display] [--wait [--wait-secs N]] [--replace] [--json] [--url URL]\n\nAsk the running daemon to lend this box to a pod session; says whether it created, renewed\n(same tools again: same id and socket, new deadline and secret) or replaced (--replace, when\na live grant of the session has other tools) a grant. Exit 0 ok, 1 daemon unreachable or\nrefused, 2 bad usage or a replace without --replace, 3 the grant ended while --wait waited,\n4 --wait gave up after --wait-secs (the grant keeps dialing).\n",
        "grants" => "Usage: handnode grants [--json] [--url URL]\n\nList the daemon's grants: live ones and those ended in the last 10 minutes.\n",
        "approvals" => "Usage: handnode approvals [--watch] [--json] [--url URL]\n\nList the tool calls waiting for your approval (a grant's approve list names their tool), oldest\nfirst, with their arguments. --watch keeps listing as calls arrive and leave.\n",
        "approve" => "Usage: handnode approve ID [--remember] [--url URL]\n\nLet one waiting call run. With --remember, later calls of its tool under that grant run\nwithout asking until the grant ends. Exit 1 when the id is unknown, already decided, expired\nor withdrawn.\n",
        "deny" => "Usage: handnode deny ID [--reason TEXT] [--url URL]\n\nRefuse one waiting call; it does not run, and the agent is told who denied it (and why).\nExit 1 when the id is unknown, already decided, expired or withdrawn.\n",
        _ => "Usage: handnode revoke (ID | --all) [--url URL]\n\nEnd a grant (or every live grant). The pod's own verifier lives until its TTL; revoking here\nstops this box from dialing and closes the socket. An unknown or already ended id is not an error.\n",
    };
    let mut out = format!("{head}\nFlags:\n");
    render_flags(&mut out, tables(sub));
    out
}

/// The operator flags as a Markdown table, for the README.
fn markdown(out: &mut String) {
    out.push_str("Flags of `handnode grant`, `grants`, `revoke`, `approvals`, `approve` and `deny` (`--all` is revoke's, `--json` grant's, grants' and approvals', `--watch` and `--full` approvals', `--remember` approve's, `--reason` deny's):\n\n");
    markdown_flags(
        out,
        &[
            GRANT_FLAGS,
            JSON_FLAG,
            REVOKE_FLAGS,
            WATCH_FLAG,
            FULL_FLAG,
            REMEMBER_FLAG,
            REASON_FLAG,
            CLIENT_FLAGS,
        ],
    );
}

/// Something went wrong talking to the daemon; printed as `handnode: <message>`.
#[derive(Debug)]
struct Failure(String);

/// An answer from the daemon.
struct Reply {
    status: u16,
    body: Value,
    etag: Option<String>,
}

impl Reply {
    /// The daemon's `{"error": …}` message, or the status when there is none.
    fn error_message(&self) -> String {
        match self.body.get("error").and_then(Value::as_str) {
            Some(msg) => msg.to_string(),
            None => format!("HTTP {}", self.status),
        }
    }
}

/// A blocking HTTP client of one daemon's admin API. The token goes to the daemon and
/// nowhere else: no proxy from the environment, no redirects ([`crate::wire::httpc`]).
struct Client<'a> {
    args: &'a ClientArgs,
    /// Built on the first https call and kept: `revoke --all` makes one call per grant.
    tls: std::cell::OnceCell<Arc<rustls::ClientConfig>>,
}

impl<'a> Client<'a> {
    fn new(args: &'a ClientArgs) -> Self {
        Client {
            args,
            tls: std::cell::OnceCell::new(),
        }
    }

    fn tls(&self) -> Result<&Arc<rustls::ClientConfig>, String> {
        if let Some(config) = self.tls.get() {
            return Ok(config);
        }
        let config = crate::wire::tls::client_config(None).map_err(|e| e.to_string())?;
        Ok(self.tls.get_or_init(|| config))
    }

    fn call(&self, method: &str, path: &str, body: Option<&Value>) -> Result<Reply, Failure> {
        self.call_within(method, path, body, REQUEST_TIMEOUT)
    }

    fn call_within(
        &self,
        method: &str,
        path: &str,
        body: Option<&Value>,
        timeout: Duration,
    ) -> Result<Reply, Failure> {
        let unreachable = |e: &dyn std::fmt::Display| {
            Failure(format!(
                "cannot reach the daemon at {}: {e} (is it running? pass --url for another address)",
                self.where_()
            ))
        };
        let url = match &self.args.socket {
            Some(_) => format!("http://localhost{path}"),
            None => format!("{}{path}", self.args.url),
        };
        let target = Target::parse(&url).map_err(|e| unreachable(&e))?;
        let tls = match target.tls {
            true => Some(self.tls().map_err(|e| unreachable(&e))?),
            false => None,
        };
        let authorization = self
            .args
            .token
            .as_ref()
            .map(|token| format!("Bearer {}", token.expose()));
        let mut headers = vec![("Accept", "application/json")];
        if let Some(value) = &authorization {
            headers.push(("Authorization", value));
        }
        let body = body.map(|b| b.to_string());
        if body.is_some() {
            headers.push(("Content-Type", "application/json"));
        }
        let request = Request {
            method,
            target: &target,
            headers: &headers,
            body: body.as_deref().map(str::as_bytes),
        };
        let response = match &self.args.socket {
            Some(socket) => httpc::send_unix(socket, &request, timeout),
            None => httpc::send(&request, timeout, tls),
        }
        .map_err(|e| unreachable(&e))?;
        let status = response.status;
        let etag = response
            .header("etag")
            .map(|v| String::from_utf8_lossy(v).trim().to_string());
        let raw = response
            .read_body(MAX_REPLY_BYTES)
            .map_err(|e| unreachable(&e))?;
        let text = String::from_utf8_lossy(&raw);
        let body = if text.trim().is_empty() {
            Value::Null
        } else {
            serde_json::from_str(&text).unwrap_or_else(|_| Value::String(text.into_owned()))
        };
        Ok(Reply { status, body, etag })
    }

    /// Where the daemon is reached, for messages.
    fn where_(&self) -> String {
        match &self.args.socket {
            Some(socket) => format!("the local socket {}", socket.display()),
            None => self.args.url.clone(),
        }
    }

    /// A non-2xx answer as a message that says what to do about it.
    fn refused(&self, what: &str, reply: &Reply) -> Failure {
        let mut msg = format!(
            "the daemon refused to {what} (HTTP {}): {}",
            reply.status,
            reply.error_message()
        );
        if let Some(reason) = reply.body.get("reason").and_then(Value::as_str) {
            msg.push_str(&format!(" ({reason})"));
        }
        let about_token = reply
            .body
            .get("reason")
            .and_then(Value::as_str)
            .is_none_or(|r| r.contains("admin token"));
        if reply.status == 401 && about_token {
            match &self.args.token_source {
                Some(source) => msg.push_str(&format!(
                    "; the token from {source} is not the daemon's"
                )),
                None => msg.push_str(
                    "; no admin token found (looked at --token-file, HANDNODE_TOKEN, $CREDENTIALS_DIRECTORY/handnode-token and <config dir>/token)",
                ),
            }
        }
        Failure(msg)
    }
}

/// Run an operator subcommand, printing to `out` (results) and `err` (progress and
/// failures). Returns the process exit code.
pub fn run(command: &Command, out: &mut dyn Write, err: &mut dyn Write) -> i32 {
    let result = match command {
        Command::Grant(args) => grant(args, out, err),
        Command::Grants(args) => grants(args, out),
        Command::Revoke(args) => revoke(args, out),
        Command::Approvals(args) => approvals(args, out),
        Command::Decide(args) => decide(args, out),
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

fn str_field<'v>(grant: &'v Value, field: &str) -> &'v str {
    grant.get(field).and_then(Value::as_str).unwrap_or("-")
}

/// `1h 5m`, `42s`: a human's view of seconds left.
fn human_secs(secs: u64) -> String {
    match secs {
        s if s >= 3600 => format!("{}h {}m", s / 3600, (s % 3600) / 60),
        s if s >= 60 => format!("{}m {}s", s / 60, s % 60),
        s => format!("{s}s"),
    }
}

/// A grant's state with what goes with it: `redialing in 4s (handshake 503)`, `ended: revoked`.
fn state_line(grant: &Value) -> String {
    let mut line = state_cell(grant);
    if let Some(error) = grant.get("last_error").and_then(Value::as_str) {
        line.push_str(&format!(" (last error: {error})"));
    }
    line
}

/// Longest last error the `grants` table shows (characters); `grant ID --json` has it whole.
const MAX_ERROR_CELL: usize = 60;

/// The state, its redial countdown and its end reason: the `grants` table's STATE column.
fn state_cell(grant: &Value) -> String {
    let mut line = str_field(grant, "state").to_string();
    if let Some(secs) = grant.get("redial_in_secs").and_then(Value::as_u64) {
        line.push_str(&format!(" in {}", human_secs(secs)));
    }
    if let Some(reason) = grant.get("ended").and_then(Value::as_str) {
        line.push_str(&format!(": {reason}"));
    }
    line
}

/// The last error, cut to [`MAX_ERROR_CELL`] characters, or `-`.
fn error_cell(grant: &Value) -> String {
    match grant.get("last_error").and_then(Value::as_str) {
        Some(e) if e.chars().count() > MAX_ERROR_CELL => {
            let cut: String = e.chars().take(MAX_ERROR_CELL - 1).collect();
            format!("{cut}…")
        }
        Some(e) => e.to_string(),
        None => "-".to_string(),
    }
}

/// A list field of the grant JSON, comma-separated; `None` when absent or empty.
fn names_field(grant: &Value, field: &str) -> Option<String> {
    let names: Vec<&str> = grant
        .get(field)?
        .as_array()?
        .iter()
        .filter_map(Value::as_str)
        .collect();
    (!names.is_empty()).then(|| names.join(", "))
}

/// Whether a grant reaches the box's shell, and why: `yes (bash is a shell tool)`.
fn shell_line(grant: &Value) -> String {
    let mut line = str_field(grant, "shell").to_string();
    if let Some(because) = grant.get("shell_because").and_then(Value::as_str) {
        line.push_str(&format!(" ({because})"));
    }
    line
}

fn describe(grant: &Value) -> String {
    let expires_in = grant
        .get("expires_in_secs")
        .and_then(Value::as_u64)
        .map_or(String::new(), |s| format!(" (in {})", human_secs(s)));
    let mut text = format!(
        "grant {}: {}\n  session {} at {}, profile {}, principal {}\n  expires {}{}\n",
        str_field(grant, "id"),
        state_line(grant),
        str_field(grant, "session"),
        str_field(grant, "runtime"),
        str_field(grant, "profile"),
        str_field(grant, "principal"),
        str_field(grant, "expires_at"),
        expires_in,
    );
    for field in ["allow", "deny", "tools"] {
        if let Some(names) = names_field(grant, field) {
            text.push_str(&format!("  {field}: {names}\n"));
        }
    }
    if let Some(folder) = grant.get("folder").and_then(Value::as_str) {
        text.push_str(&format!("  lent folder: {folder}\n"));
    }
    if grant.get("display").and_then(Value::as_str) == Some("own") {
        text.push_str("  display: its own (headless; your screen is not touched)\n");
    }
    let names = |v: Option<&Value>| match v {
        Some(Value::String(s)) => Some(s.clone()),
        Some(Value::Array(a)) if !a.is_empty() => Some(
            a.iter()
                .filter_map(Value::as_str)
                .collect::<Vec<_>>()
                .join(", "),
        ),
        _ => None,
    };
    if let Some(approve) = names(grant.get("approve")) {
        text.push_str(&format!("  each call waits for approval: {approve}\n"));
    }
    if let Some(remembered) = names(grant.get("approved_for_grant")) {
        text.push_str(&format!(
            "  allowed for the rest of the grant: {remembered}\n"
        ));
    }
    if let Some(shell) = grant.get("shell").and_then(Value::as_str) {
        let why = match (shell, grant.get("shell_because").and_then(Value::as_str)) {
            ("yes", Some(because)) => format!("yes ({because})"),
            ("gated", _) => "gated (every shell tool waits for approval)".to_string(),
            (other, _) => other.to_string(),
        };
        text.push_str(&format!("  reaches the shell: {why}\n"));
    }
    text
}

fn print(out: &mut dyn Write, text: &str) -> Result<(), Failure> {
    match out.write_all(text.as_bytes()).and_then(|_| out.flush()) {
        // The reader stopped reading (`handnode grants | head`): nothing to report.
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(()),
        other => other.map_err(|e| Failure(format!("cannot write output: {e}"))),
    }
}

fn pretty(value: &Value) -> String {
    format!(
        "{}\n",
        serde_json::to_string_pretty(value).unwrap_or_else(|_| value.to_string())
    )
}

fn grant(args: &GrantArgs, out: &mut dyn Write, err: &mut dyn Write) -> Result<i32, Failure> {
    let client = Client::new(&args.client);
    let mut body = json!({"runtime": args.runtime, "session": args.session});
    let profile = match args.profile {
        None if !args.allow.is_empty() => Some(Profile::Custom),
        profile => profile,
    };
    if let Some(profile) = profile {
        body["profile"] = json!(profile.as_str());
    }
    if !args.allow.is_empty() {
        body["allow"] = json!(args.allow);
    }
    if !args.deny.is_empty() {
        body["deny"] = json!(args.deny);
    }
    if let Some(folder) = &args.folder {
        body["folder"] = json!(folder.to_string_lossy());
    }
    if args.own_display {
        body["display"] = json!("own");
    }
    if let Some(ttl) = args.ttl_secs {
        body["ttl_secs"] = json!(ttl);
    }
    match args.approve.as_deref() {
        Some([word]) if word == crate::grants::approvals::SHELL_WORD => {
            body["approve"] = json!(word)
        }
        Some(names) => body["approve"] = json!(names),
        None => {}
    }
    match &args.credential {
        Credential::Secret(s) => body["secret"] = json!(s.expose()),
        Credential::AdminCredential(s) => body["admin_credential"] = json!(s.expose()),
    }
    body["replace"] = json!(args.replace);
    let reply = client.call("POST", "/attach", Some(&body))?;
    if reply.status == 409 {
        let _ = writeln!(err, "handnode: {}", reply.error_message());
        return Ok(EXIT_USAGE);
    }
    if !(200..300).contains(&reply.status) {
        return Err(client.refused("create the grant", &reply));
    }
    let mut grant = reply.body;
    let id = grant
        .get("id")
        .and_then(Value::as_str)
        .map(str::to_string)
        .ok_or_else(|| Failure("the daemon's answer has no grant id".into()))?;
    // What the request did, first: create, renew or replace look alike otherwise.
    let _ = writeln!(err, "{}", attach_outcome(&grant, &args.credential));
    if !args.wait {
        print(
            out,
            &if args.json {
                pretty(&grant)
            } else {
                describe(&grant)
            },
        )?;
        return Ok(EXIT_OK);
    }
    if !args.json {
        print(out, &describe(&grant))?;
    }
    let path = format!("/attach/{id}");
    let give_up = std::time::Instant::now() + Duration::from_secs(args.wait_secs);
    // One line per change of state (not per tick of a redial countdown), so a log of it
    // reads as what happened.
    let mut last_state = String::new();
    let code = loop {
        let now_state = change_key(&grant);
        if now_state != last_state {
            let _ = writeln!(err, "grant {id}: {}", state_line(&grant));
            last_state = now_state;
        }
        match str_field(&grant, "state") {
            "attached" => break EXIT_OK,
            "ended" => break EXIT_GRANT_ENDED,
            _ => {}
        }
        if std::time::Instant::now() >= give_up {
            let error = grant
                .get("last_error")
                .and_then(Value::as_str)
                .map_or("no dial has failed yet".to_string(), |e| {
                    format!("last dial error: {e}")
                });
            let _ = writeln!(
                err,
                "handnode: grant {id} is not attached after {} s ({}; {error}). It stays live and keeps dialing until {}; to stop it: handnode revoke {id}",
                args.wait_secs,
                str_field(&grant, "state"),
                str_field(&grant, "expires_at"),
            );
            break EXIT_WAIT_GAVE_UP;
        }
        std::thread::sleep(POLL_INTERVAL);
        let reply = client.call("GET", &path, None)?;
        match reply.status {
            200 => grant = reply.body,
            404 => {
                let _ = writeln!(err, "grant {id}: the daemon no longer knows it");
                return Ok(EXIT_GRANT_ENDED);
            }
            _ => return Err(client.refused("show the grant", &reply)),
        }
    };
    if args.json {
        print(out, &pretty(&grant))?;
    }
    Ok(code)
}

/// What a grant's `--wait` lines change on: its state, end and last error.
fn change_key(grant: &Value) -> String {
    format!(
        "{} {} {}",
        str_field(grant, "state"),
        str_field(grant, "ended"),
        str_field(grant, "last_error")
    )
}

/// The first line of `handnode grant`'s answer: created, renewed (and what a new secret
/// means) or replaced, from the `202`'s `attach` field.
fn attach_outcome(grant: &Value, credential: &Credential) -> String {
    let id = str_field(grant, "id");
    let session = str_field(grant, "session");
    match str_field(grant, "attach") {
        "renewed" => {
            let mut line = format!(
                "renewed grant {id} for session {session}: same id and socket, deadline now {}",
                str_field(grant, "expires_at")
            );
            let new_secret = grant.get("new_secret").and_then(Value::as_bool) == Some(true);
            if new_secret || matches!(credential, Credential::AdminCredential(_)) {
                line.push_str(
                    "; the new secret is used at the next dial and is not checked now (a pod that refuses it ends the grant handshake_rejected_401, naming this renewal)",
                );
            }
            line
        }
        "replaced" => format!(
            "replaced grant {} (it ended `replaced`) with grant {id} for session {session}",
            str_field(grant, "replaced_id")
        ),
        "created" => format!("created grant {id} for session {session}"),
        // A daemon that predates the field.
        _ => format!("grant {id} for session {session}"),
    }
}

fn list(client: &Client) -> Result<Vec<Value>, Failure> {
    let reply = client.call("GET", "/attach", None)?;
    if reply.status != 200 {
        return Err(client.refused("list grants", &reply));
    }
    match reply.body.get("grants").and_then(Value::as_array) {
        Some(grants) => Ok(grants.clone()),
        None => Err(Failure(
            "the daemon's answer to GET /attach has no \"grants\" list".into(),
        )),
    }
}

/// Left-aligned columns, two spaces apart.
fn table(rows: &[Vec<String>]) -> String {
    let columns = rows.first().map_or(0, Vec::len);
    let widths: Vec<usize> = (0..columns)
        .map(|c| rows.iter().map(|r| r[c].chars().count()).max().unwrap_or(0))
        .collect();
    let mut out = String::new();
    for row in rows {
        let mut line = String::new();
        for (c, cell) in row.iter().enumerate() {
            if c + 1 == columns {
                line.push_str(cell);
            } else {
                line.push_str(&format!("{cell:<width$}  ", width = widths[c]));
            }
        }
        out.push_str(line.trim_end());
        out.push('\n');
    }
    out
}

fn grants(args: &GrantsArgs, out: &mut dyn Write) -> Result<i32, Failure> {
    let client = Client::new(&args.client);
    let grants = list(&client)?;
    if args.json {
        print(out, &pretty(&json!({ "grants": grants })))?;
        return Ok(EXIT_OK);
    }
    if grants.is_empty() {
        print(out, "no grants\n")?;
        return Ok(EXIT_OK);
    }
    let mut rows = vec![[
        "ID",
        "STATE",
        "PROFILE",
        "SHELL",
        "SESSION",
        "EXPIRES IN",
        "CALLS",
        "JOBS",
        "RUNTIME",
        "LAST ERROR",
    ]
    .map(String::from)
    .to_vec()];
    for g in &grants {
        rows.push(vec![
            str_field(g, "id").to_string(),
            state_cell(g),
            str_field(g, "profile").to_string(),
            shell_line(g),
            str_field(g, "session").to_string(),
            // An ended grant expires in nothing.
            g.get("expires_in_secs")
                .and_then(Value::as_u64)
                .filter(|_| str_field(g, "state") != "ended")
                .map_or("-".into(), human_secs),
            g.get("calls")
                .and_then(Value::as_u64)
                .map_or("-".into(), |c| c.to_string()),
            // Running jobs; a daemon that predates jobs sends none.
            g.get("jobs")
                .and_then(Value::as_u64)
                .map_or("-".into(), |c| c.to_string()),
            str_field(g, "runtime").to_string(),
            error_cell(g),
        ]);
    }
    print(out, &table(&rows))?;
    Ok(EXIT_OK)
}

/// DELETE one grant; `Ok(false)` when the daemon did not know it (nothing to do).
fn revoke_one(client: &Client, id: &str) -> Result<bool, Failure> {
    let reply = client.call("DELETE", &format!("/attach/{id}"), None)?;
    match reply.status {
        200..=299 => Ok(true),
        404 => Ok(false),
        _ => Err(client.refused(&format!("revoke grant {id}"), &reply)),
    }
}

fn revoke(args: &RevokeArgs, out: &mut dyn Write) -> Result<i32, Failure> {
    let client = Client::new(&args.client);
    match &args.target {
        RevokeTarget::One(id) => {
            let text = if revoke_one(&client, id)? {
                format!("revoked grant {id}\n")
            } else {
                format!("grant {id} is unknown or already ended; nothing to revoke\n")
            };
            print(out, &text)?;
        }
        RevokeTarget::All => {
            let live: Vec<String> = list(&client)?
                .iter()
                .filter(|g| str_field(g, "state") != "ended")
                .map(|g| str_field(g, "id").to_string())
                .collect();
            if live.is_empty() {
                print(out, "no live grants; nothing to revoke\n")?;
            }
            for id in live {
                // A grant may end between the list and its DELETE; that is not a failure.
                if revoke_one(&client, &id)? {
                    print(out, &format!("revoked grant {id}\n"))?;
                }
            }
        }
    }
    Ok(EXIT_OK)
}

/// `GET /approvals`, optionally a long-poll past `seen`: the list and its `ETag`.
fn approvals_list(client: &Client, seen: Option<&str>) -> Result<(Vec<Value>, String), Failure> {
    let (path, timeout) = match seen {
        Some(etag) => (
            format!(
                "/approvals?wait={WATCH_WAIT_SECS}&seen={}",
                etag.trim_matches('"')
            ),
            REQUEST_TIMEOUT.max(Duration::from_secs(WATCH_WAIT_SECS + 5)),
        ),
        None => ("/approvals".to_string(), REQUEST_TIMEOUT),
    };
    let reply = client.call_within("GET", &path, None, timeout)?;
    if reply.status != 200 {
        return Err(client.refused("list approvals", &reply));
    }
    let list = reply
        .body
        .get("approvals")
        .and_then(Value::as_array)
        .cloned()
        .ok_or_else(|| {
            Failure("the daemon's answer to GET /approvals has no \"approvals\" list".into())
        })?;
    Ok((list, reply.etag.unwrap_or_default()))
}

/// Bytes of a waiting call's arguments shown in the `approvals` table; past this the row
/// says how many bytes it left out (`--full ID` shows all of it).
pub const TABLE_ARGS_BYTES: usize = 200;

/// One waiting call in full (`approvals --full ID`): who asks for what, then every
/// argument as `crate::base::reveal` shows it, nothing cut.
fn approval_full(a: &Value) -> String {
    format!(
        "approval {}\nsession {}  tool {}  expires in {}\n\n{}\n",
        crate::base::reveal::escape(str_field(a, "id")),
        crate::base::reveal::escape(str_field(a, "session")),
        crate::base::reveal::escape(str_field(a, "tool")),
        a.get("expires_in_secs")
            .and_then(Value::as_u64)
            .map_or("-".into(), human_secs),
        crate::base::reveal::full(a.get("arguments").unwrap_or(&Value::Null))
    )
}

/// A waiting call's arguments in the table: one line, cut at [`TABLE_ARGS_BYTES`] saying
/// so, and saying when the daemon's list already cut them (`--full ID` has them whole).
fn table_arguments(a: &Value) -> String {
    let shown =
        crate::base::reveal::one_line(a.get("arguments").unwrap_or(&Value::Null), TABLE_ARGS_BYTES);
    if a.get("arguments_truncated") == Some(&Value::Bool(true)) {
        format!(
            "{shown} (cut by the daemon; --full {} shows all)",
            crate::base::reveal::escape(str_field(a, "id"))
        )
    } else {
        shown
    }
}

/// The waiting calls as a table (or `no calls are waiting for approval`).
fn approvals_table(list: &[Value]) -> String {
    if list.is_empty() {
        return "no calls are waiting for approval\n".into();
    }
    let mut rows = vec![["ID", "SESSION", "TOOL", "EXPIRES IN", "ARGUMENTS"]
        .map(String::from)
        .to_vec()];
    for a in list {
        rows.push(vec![
            str_field(a, "id").to_string(),
            str_field(a, "session").to_string(),
            str_field(a, "tool").to_string(),
            a.get("expires_in_secs")
                .and_then(Value::as_u64)
                .map_or("-".into(), human_secs),
            table_arguments(a),
        ]);
    }
    table(&rows)
}

fn approvals(args: &ApprovalsArgs, out: &mut dyn Write) -> Result<i32, Failure> {
    let client = Client::new(&args.client);
    let show = |list: &[Value], out: &mut dyn Write| {
        print(
            out,
            &if args.json {
                format!("{}\n", json!({ "approvals": list }))
            } else {
                approvals_table(list)
            },
        )
    };
    if let Some(id) = &args.full {
        // GET /approvals may cut long arguments; this route never does.
        let reply = client.call("GET", &format!("/approvals/{id}"), None)?;
        return match reply.status {
            200 => {
                let a = &reply.body;
                print(
                    out,
                    &if args.json {
                        format!("{a}\n")
                    } else {
                        approval_full(a)
                    },
                )?;
                Ok(EXIT_OK)
            }
            404 => Err(Failure(format!(
                "no call with id {id} is waiting for approval (decided, expired or withdrawn?); \
                 handnode approvals lists the waiting ones"
            ))),
            _ => Err(client.refused("show the approval", &reply)),
        };
    }
    let (list, mut etag) = approvals_list(&client, None)?;
    show(&list, out)?;
    if !args.watch {
        return Ok(EXIT_OK);
    }
    loop {
        let (next, next_etag) = approvals_list(&client, Some(&etag))?;
        if next_etag != etag {
            if !args.json {
                print(out, "--\n")?;
            }
            show(&next, out)?;
        }
        etag = next_etag;
    }
}

fn decide(args: &DecideArgs, out: &mut dyn Write) -> Result<i32, Failure> {
    let client = Client::new(&args.client);
    let mut body = json!({"decision": if args.allow { "allow" } else { "deny" }});
    if args.remember {
        body["remember"] = json!(true);
    }
    if let Some(reason) = &args.reason {
        body["reason"] = json!(reason);
    }
    let reply = client.call("POST", &format!("/approvals/{}", args.id), Some(&body))?;
    match reply.status {
        200 => {
            let a = &reply.body;
            let mut text = format!(
                "{} {} of {} (session {}), by {}",
                if args.allow { "allowed" } else { "denied" },
                str_field(a, "id"),
                str_field(a, "tool"),
                str_field(a, "session"),
                str_field(a, "decided_by"),
            );
            if args.remember {
                text.push_str("; later calls of this tool under the grant run without asking");
            }
            text.push('\n');
            print(out, &text)?;
            Ok(EXIT_OK)
        }
        404 => Err(Failure(format!(
            "approval {} is unknown, already decided, expired or withdrawn",
            args.id
        ))),
        _ => Err(client.refused(&format!("decide approval {}", args.id), &reply)),
    }
}

#[cfg(test)]
mod tests {
    use super::parse as parse_command;
    use super::*;
    use std::sync::{Arc, Mutex};

    use crate::base::testutil::TempDir;

    fn env(tmp: &TempDir) -> HashMap<String, String> {
        [
            ("HOME".to_string(), tmp.0.display().to_string()),
            ("HANDNODE_TOKEN".to_string(), "tok".to_string()),
        ]
        .into()
    }

    fn parse_args(args: &[&str], env: &HashMap<String, String>) -> Result<Command, String> {
        let args: Vec<String> = args.iter().map(|s| s.to_string()).collect();
        parse_command(&args, env).map_err(|e| match e {
            Error::Config(msg) => msg,
            other => panic!("not a config error: {other:?}"),
        })
    }

    #[test]
    fn help_lists_every_flag_and_env_var() {
        let tmp = TempDir::new("cli");
        let env = env(&tmp);
        for args in [vec!["--help"], vec!["serve", "-h"], vec!["help"]] {
            let Ok(Command::Help(text)) = parse_args(&args, &env) else {
                panic!("{args:?} is not help");
            };
            for flag in config::SERVE_FLAGS {
                assert!(text.contains(&format!("--{}", flag.name)), "{}", flag.name);
                assert!(text.contains(&flag.env_name()), "{}", flag.name);
            }
        }
        let audit = config::SERVE_FLAGS
            .iter()
            .find(|f| f.name == "audit-args")
            .unwrap();
        assert!(audit.help.contains("typed text, passwords included"));
        let markdown = help_table_markdown();
        for flag in config::SERVE_FLAGS {
            assert!(
                markdown.contains(&format!("| `--{}", flag.name)),
                "{}",
                flag.name
            );
        }
        assert!(markdown.contains("`--runtime URL`") && markdown.contains("`HANDNODE_URL`"));
        for args in [
            vec!["doctor", "--help"],
            vec!["help", "grant"],
            vec!["revoke", "-h"],
        ] {
            assert!(
                matches!(parse_args(&args, &env), Ok(Command::Help(_))),
                "{args:?}"
            );
        }
        assert!(matches!(
            parse_args(&["--version"], &env),
            Ok(Command::Version)
        ));
        assert!(matches!(
            parse_args(&["doctor", "--json"], &env),
            Ok(Command::Doctor(config::DoctorArgs {
                json: true,
                browser_command: None
            }))
        ));
        assert!(matches!(
            parse_args(&["doctor"], &env),
            Ok(Command::Doctor(config::DoctorArgs { json: false, .. }))
        ));
        assert!(parse_args(&["doctor", "--listen", "x"], &env).is_err());
        let Ok(Command::Doctor(args)) = parse_args(
            &["doctor", "--browser-command", "node 'a b.js' --headless"],
            &env,
        ) else {
            panic!("doctor --browser-command");
        };
        assert_eq!(
            args.browser_command,
            Some(vec![
                "node".to_string(),
                "a b.js".to_string(),
                "--headless".to_string()
            ])
        );
        let mut with_env = env.clone();
        with_env.insert(
            "HANDNODE_BROWSER_COMMAND".into(),
            "x --cdp-endpoint h".into(),
        );
        let err = parse_args(&["doctor"], &with_env).unwrap_err();
        assert!(err.contains("must not pass --cdp-endpoint"), "{err}");
    }

    #[test]
    fn subcommand_errors_say_what_to_fix() {
        let tmp = TempDir::new("cli");
        let env = env(&tmp);
        for (args, want) in [
            (vec!["extra"], "unknown subcommand 'extra'"),
            (vec!["serve", "extra"], "unexpected argument 'extra'"),
        ] {
            match parse_args(&args, &env) {
                Err(msg) => assert!(msg.contains(want), "{args:?}: {msg:?} lacks {want:?}"),
                Ok(_) => panic!("{args:?} was accepted"),
            }
        }
    }

    #[test]
    fn ttl_parser() {
        for (input, want) in [
            ("1", Some(1)),
            ("90s", Some(90)),
            ("30m", Some(1800)),
            ("1h", Some(3600)),
            (" 5m ", Some(300)),
            ("86400", Some(86_400)),
            ("24h", Some(86_400)),
            ("1440m", Some(86_400)),
            ("86401", None),
            ("86401s", None),
            ("1441m", None),
            ("25h", None),
            ("0", None),
            ("0h", None),
            ("", None),
            ("h", None),
            ("1.5h", None),
            ("-1", None),
            ("1d", None),
            ("1 h", None),
            ("99999999999999999999h", None),
            ("9999999999999999999h", None),
        ] {
            assert_eq!(parse_ttl(input).ok(), want, "{input:?}");
        }
    }

    #[test]
    fn grant_arguments() {
        let tmp = TempDir::new("cli");
        let secret = tmp
            .write("secret", "  attach-secret\n")
            .display()
            .to_string();
        let env = env(&tmp);
        let base = [
            "grant",
            "--runtime",
            "wss://pod:8090/",
            "--session",
            "laptop",
        ];
        let with = |extra: &[&str]| {
            let mut args: Vec<&str> = base.to_vec();
            args.extend_from_slice(extra);
            parse_args(&args, &env)
        };
        let Ok(Command::Grant(args)) = with(&["--secret-file", &secret]) else {
            panic!("not a grant");
        };
        assert_eq!(args.runtime, "wss://pod:8090/");
        assert_eq!(args.session, "laptop");
        assert_eq!(
            (args.profile, args.ttl_secs, args.wait, args.json),
            (None, None, false, false)
        );
        assert!(matches!(&args.credential, Credential::Secret(s) if s.expose() == "attach-secret"));
        assert_eq!(args.client.url, DEFAULT_URL);
        assert_eq!(args.client.token.as_ref().map(Secret::expose), Some("tok"));
        assert!(!format!("{args:?}").contains("attach-secret"));
        assert_eq!(args.folder, None);
        // --folder: absolute as given, relative from the working directory.
        let Ok(Command::Grant(args)) = with(&[
            "--secret-file",
            &secret,
            "--profile",
            "files",
            "--folder",
            "/srv/lent",
        ]) else {
            panic!("not a grant");
        };
        assert_eq!(args.profile, Some(Profile::Files));
        assert_eq!(args.folder, Some(PathBuf::from("/srv/lent")));
        let Ok(Command::Grant(args)) = with(&["--secret-file", &secret, "--folder", "lent"]) else {
            panic!("not a grant");
        };
        assert_eq!(
            args.folder,
            Some(std::env::current_dir().unwrap().join("lent"))
        );

        let Ok(Command::Grant(args)) = with(&[
            "--admin-credential-file",
            &secret,
            "--profile",
            "desktop",
            "--ttl",
            "30m",
            "--wait",
            "--json",
            "--url",
            "http://127.0.0.1:9000/",
        ]) else {
            panic!("not a grant");
        };
        assert!(matches!(args.credential, Credential::AdminCredential(_)));
        assert_eq!(args.profile, Some(Profile::Desktop));
        assert_eq!(args.ttl_secs, Some(1800));
        assert!(args.wait && args.json);
        assert_eq!(args.client.url, "http://127.0.0.1:9000");
        assert!(args.allow.is_empty() && args.deny.is_empty());

        let Ok(Command::Grant(args)) = with(&[
            "--secret-file",
            &secret,
            "--allow",
            "sys_info,browser_*",
            "--allow",
            " screenshot ",
            "--deny=browser_evaluate",
        ]) else {
            panic!("not a grant");
        };
        assert_eq!(args.allow, ["sys_info", "browser_*", "screenshot"]);
        assert_eq!(args.deny, ["browser_evaluate"]);
        assert_eq!(
            args.profile, None,
            "the body says custom; see grant_sends_lists"
        );

        let Ok(Command::Grant(args)) = with(&["--secret-file", &secret, "--profile", "browser"])
        else {
            panic!("not a grant");
        };
        assert_eq!(args.profile, Some(Profile::Browser));

        let empty = tmp.write("empty", "\n").display().to_string();
        for (extra, want) in [
            (
                vec![],
                "exactly one of --secret-file or --admin-credential-file",
            ),
            (
                vec!["--secret-file", &secret, "--admin-credential-file", &secret],
                "exactly one of",
            ),
            (vec!["--secret-file", &empty], "is empty"),
            (vec!["--secret-file", "/nonexistent"], "cannot read it"),
            (
                vec!["--secret-file", &secret, "--profile", "sandbox"],
                "profile must be one of owner, desktop, observe, browser, files, custom",
            ),
            (
                vec!["--secret-file", &secret, "--ttl", "86401"],
                "--ttl: expected N seconds",
            ),
            (
                vec!["--secret-file", &secret, "--url", "ftp://x"],
                "--url: expected http://",
            ),
            (
                vec!["--secret-file", &secret, "--secret", "x"],
                "unknown flag --secret",
            ),
            (
                vec!["--secret-file", &secret, "extra"],
                "unexpected argument 'extra'",
            ),
        ] {
            let err = with(&extra).unwrap_err();
            assert!(err.contains(want), "{extra:?}: {err}");
        }
        for (args, want) in [
            (
                vec!["grant", "--session", "s", "--secret-file", &secret],
                "--runtime URL is required",
            ),
            (
                vec!["grant", "--runtime", "ws://h", "--secret-file", &secret],
                "--session NAME is required",
            ),
            (
                vec!["grant", "--runtime", "http://h", "--session", "s"],
                "runtime must be a ws:// or wss:// URL",
            ),
            (
                vec!["grant", "--runtime", "ws://", "--session", "s"],
                "runtime must be a ws:// or wss:// URL",
            ),
            (
                vec!["grant", "--runtime", "ws://h", "--session", "Laptop"],
                "session must match [a-z0-9-]{1,32}",
            ),
        ] {
            let err = parse_args(&args, &env).unwrap_err();
            assert!(err.contains(want), "{args:?}: {err}");
        }
        // 32 characters is the bound; 33 is refused.
        let ok = "a".repeat(32);
        let long = "a".repeat(33);
        assert!(parse_args(
            &[
                "grant",
                "--runtime",
                "ws://h",
                "--session",
                &ok,
                "--secret-file",
                &secret
            ],
            &env
        )
        .is_ok());
        assert!(parse_args(
            &[
                "grant",
                "--runtime",
                "ws://h",
                "--session",
                &long,
                "--secret-file",
                &secret
            ],
            &env
        )
        .is_err());
    }

    #[test]
    fn grants_and_revoke_arguments() {
        let tmp = TempDir::new("cli");
        let mut env = env(&tmp);
        env.insert("HANDNODE_URL".into(), "http://127.0.0.1:1".into());
        let Ok(Command::Grants(args)) = parse_args(&["grants", "--json"], &env) else {
            panic!("not grants");
        };
        assert!(args.json);
        assert_eq!(args.client.url, "http://127.0.0.1:1");
        let id = "0b6c5a1e-8f7e-4c47-9d36-0e0f3a1b2c3d";
        let Ok(Command::Revoke(args)) = parse_args(&["revoke", id], &env) else {
            panic!("not revoke");
        };
        assert_eq!(args.target, RevokeTarget::One(id.into()));
        let Ok(Command::Revoke(args)) = parse_args(&["revoke", "--all"], &env) else {
            panic!("not revoke");
        };
        assert_eq!(args.target, RevokeTarget::All);
        let too_long = "a".repeat(MAX_ID_LEN + 1);
        for args in [
            vec!["revoke"],
            vec!["revoke", id, "--all"],
            vec!["revoke", id, id],
            vec!["revoke", "../x"],
            vec!["revoke", &too_long],
            vec!["grants", "extra"],
            vec!["grants", "--all"],
        ] {
            assert!(parse_args(&args, &env).is_err(), "{args:?}");
        }
        assert!(parse_args(&["revoke", &"a".repeat(MAX_ID_LEN)], &env).is_ok());
    }

    /// A request the stub daemon saw.
    #[derive(Debug)]
    struct Seen {
        method: String,
        path: String,
        authorization: Option<String>,
        body: String,
    }

    /// A scripted daemon on 127.0.0.1:0: the n-th request gets the n-th reply. It gives up
    /// after 5 s without a request, so a hung client fails the test instead of hanging it.
    struct Stub {
        url: String,
        seen: Arc<Mutex<Vec<Seen>>>,
        thread: Option<std::thread::JoinHandle<()>>,
    }

    impl Stub {
        fn start(replies: Vec<(u16, String)>) -> Self {
            Stub::start_tagged(replies.into_iter().map(|(s, b)| (s, b, None)).collect())
        }

        /// Like `start`, each reply with an `ETag` when given.
        fn start_tagged(replies: Vec<(u16, String, Option<&'static str>)>) -> Self {
            let server = tiny_http::Server::http("127.0.0.1:0").unwrap();
            let url = format!("http://{}", server.server_addr().to_ip().unwrap());
            let seen = Arc::new(Mutex::new(Vec::new()));
            let log = Arc::clone(&seen);
            let thread = std::thread::spawn(move || {
                for (status, body, etag) in replies {
                    let Ok(Some(mut request)) = server.recv_timeout(Duration::from_secs(5)) else {
                        return;
                    };
                    let mut text = String::new();
                    let _ = request.as_reader().read_to_string(&mut text);
                    log.lock().unwrap().push(Seen {
                        method: request.method().to_string(),
                        path: request.url().to_string(),
                        authorization: request
                            .headers()
                            .iter()
                            .find(|h| h.field.equiv("Authorization"))
                            .map(|h| h.value.to_string()),
                        body: text,
                    });
                    let header =
                        tiny_http::Header::from_bytes("Content-Type", "application/json").unwrap();
                    let mut response = tiny_http::Response::from_string(body)
                        .with_status_code(status)
                        .with_header(header);
                    if let Some(etag) = etag {
                        response.add_header(tiny_http::Header::from_bytes("ETag", etag).unwrap());
                    }
                    let _ = request.respond(response);
                }
            });
            Stub {
                url,
                seen,
                thread: Some(thread),
            }
        }

        fn client(&self, token: Option<&str>) -> ClientArgs {
            ClientArgs {
                url: self.url.clone(),
                socket: None,
                token: token.map(Secret::new),
                token_source: token.map(|_| "a test".to_string()),
            }
        }

        /// Wait for the script to finish and return what was asked.
        fn finish(mut self) -> Vec<Seen> {
            self.thread.take().unwrap().join().unwrap();
            std::mem::take(&mut *self.seen.lock().unwrap())
        }
    }

    fn grant_json(state: &str, extra: &str) -> String {
        format!(
            r#"{{"id":"g1","runtime":"wss://pod:8090","session":"laptop","profile":"observe","principal":"token","created_at":"2026-11-30T12:00:00Z","expires_at":"2026-11-30T13:00:00Z","expires_in_secs":3600,"state":"{state}","calls":0{extra}}}"#
        )
    }

    fn grant_args(client: ClientArgs, wait: bool) -> Command {
        Command::Grant(GrantArgs {
            client,
            runtime: "wss://pod:8090".into(),
            session: "laptop".into(),
            profile: Some(Profile::Observe),
            allow: Vec::new(),
            deny: Vec::new(),
            ttl_secs: Some(600),
            credential: Credential::Secret(Secret::new("s3")),
            approve: None,
            folder: None,
            own_display: false,
            wait,
            wait_secs: DEFAULT_WAIT_SECS,
            replace: false,
            json: false,
        })
    }

    fn run_captured(command: &Command) -> (i32, String, String) {
        let (mut out, mut err) = (Vec::new(), Vec::new());
        let code = run(command, &mut out, &mut err);
        (
            code,
            String::from_utf8(out).unwrap(),
            String::from_utf8(err).unwrap(),
        )
    }

    #[test]
    fn cargo_runs_build_variable_is_not_an_unknown_env_var() {
        let env: HashMap<String, String> = [
            ("HANDNODE_TARGET", "x86_64-unknown-linux-gnu"),
            ("HANDNODE_TOKEN", "t"),
            ("HANDNODE_LISTEN", "127.0.0.1:1"),
            ("HANDNODE_LISTNE", "typo"),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
        assert_eq!(unknown_env(&env), [&"HANDNODE_LISTNE".to_string()]);
    }

    #[test]
    fn grant_posts_the_attach_body_and_summarises() {
        let stub = Stub::start(vec![(202, grant_json("idle", ""))]);
        let (code, out, _) = run_captured(&grant_args(stub.client(Some("tok")), false));
        let seen = stub.finish();
        assert_eq!(code, EXIT_OK);
        assert!(
            out.contains("grant g1: idle")
                && out.contains("expires 2026-11-30T13:00:00Z (in 1h 0m)"),
            "{out}"
        );
        assert_eq!(
            (seen[0].method.as_str(), seen[0].path.as_str()),
            ("POST", "/attach")
        );
        assert_eq!(seen[0].authorization.as_deref(), Some("Bearer tok"));
        let body: Value = serde_json::from_str(&seen[0].body).unwrap();
        assert_eq!(
            body,
            json!({"runtime":"wss://pod:8090","session":"laptop","profile":"observe","ttl_secs":600,"secret":"s3","replace":false})
        );
    }

    /// Create, renew and replace read differently; a replace is refused unless asked for.
    #[test]
    fn grant_says_whether_it_created_renewed_or_replaced() {
        let cases = [
            (r#","attach":"created""#, "created grant g1 for session laptop"),
            (
                r#","attach":"renewed","new_secret":true"#,
                "renewed grant g1 for session laptop: same id and socket, deadline now 2026-11-30T13:00:00Z; the new secret is used at the next dial and is not checked now",
            ),
            (
                r#","attach":"replaced","replaced_id":"g0""#,
                "replaced grant g0 (it ended `replaced`) with grant g1",
            ),
        ];
        for (extra, want) in cases {
            let stub = Stub::start(vec![(202, grant_json("idle", extra))]);
            let (code, _, err) = run_captured(&grant_args(stub.client(Some("tok")), false));
            stub.finish();
            assert_eq!(code, EXIT_OK);
            assert!(err.contains(want), "{want}: {err}");
        }
        // A renewal with the same secret says nothing about secrets.
        let stub = Stub::start(vec![(
            202,
            grant_json("attached", r#","attach":"renewed","new_secret":false"#),
        )]);
        let (_, _, err) = run_captured(&grant_args(stub.client(Some("tok")), false));
        stub.finish();
        assert!(
            err.contains("renewed grant g1") && !err.contains("secret"),
            "{err}"
        );

        let stub = Stub::start(vec![(
            409,
            r#"{"error":"grant g0 already lends this box to session laptop at this runtime with other tools (profile desktop -> observe); ... with --replace"}"#.into(),
        )]);
        let Command::Grant(mut args) = grant_args(stub.client(Some("tok")), false) else {
            unreachable!()
        };
        args.replace = true;
        let (code, out, err) = run_captured(&Command::Grant(args));
        let seen = stub.finish();
        let body: Value = serde_json::from_str(&seen[0].body).unwrap();
        assert_eq!(body["replace"], true, "--replace is sent");
        assert_eq!(code, EXIT_USAGE, "{out}{err}");
        assert!(
            err.contains("grant g0 already lends") && err.contains("--replace"),
            "{err}"
        );
    }

    #[test]
    fn grant_wait_gives_up_after_wait_secs_with_the_last_error_and_exit_4() {
        let stub = Stub::start(vec![(
            202,
            grant_json(
                "redialing",
                r#","redial_in_secs":4,"last_error":"connect: Connection refused""#,
            ),
        )]);
        let Command::Grant(mut args) = grant_args(stub.client(Some("tok")), true) else {
            unreachable!()
        };
        args.wait_secs = 0;
        let (code, _, err) = run_captured(&Command::Grant(args));
        stub.finish();
        assert_eq!(code, EXIT_WAIT_GAVE_UP, "{err}");
        assert!(
            err.contains("grant g1 is not attached after 0 s (redialing; last dial error: connect: Connection refused)")
                && err.contains("keeps dialing until 2026-11-30T13:00:00Z")
                && err.contains("handnode revoke g1"),
            "{err}"
        );
    }

    #[test]
    fn grant_wait_prints_a_line_per_state_change_not_per_countdown_tick() {
        let redialing = |secs: u32| {
            grant_json(
                "redialing",
                &format!(r#","redial_in_secs":{secs},"last_error":"handshake 503""#),
            )
        };
        let stub = Stub::start(vec![
            (202, grant_json("idle", "")),
            (200, redialing(3)),
            (200, redialing(2)),
            (200, redialing(1)),
            (200, grant_json("attached", "")),
        ]);
        let (code, _, err) = run_captured(&grant_args(stub.client(Some("tok")), true));
        stub.finish();
        assert_eq!(code, EXIT_OK);
        assert_eq!(err.matches("grant g1: redialing").count(), 1, "{err}");
        assert_eq!(err.matches("grant g1: ").count(), 3, "{err}");
    }

    #[test]
    fn grant_sends_lists_and_shows_whether_the_grant_reaches_a_shell() {
        let reply = grant_json(
            "idle",
            r#","profile":"custom","allow":["sys_info","bash"],"deny":[],"tools":["sys_info","bash"],"folder":"/srv/lent","display":"own","shell":"yes","shell_because":"bash is a shell tool""#,
        );
        let stub = Stub::start(vec![(202, reply)]);
        let Command::Grant(mut args) = grant_args(stub.client(Some("tok")), false) else {
            unreachable!()
        };
        args.profile = None;
        args.allow = vec!["sys_info".into(), "bash".into()];
        args.deny = vec!["key".into()];
        args.folder = Some(PathBuf::from("/srv/lent"));
        args.own_display = true;
        let (code, out, _) = run_captured(&Command::Grant(args));
        let seen = stub.finish();
        assert_eq!(code, EXIT_OK);
        let body: Value = serde_json::from_str(&seen[0].body).unwrap();
        assert_eq!(body["folder"], "/srv/lent");
        assert_eq!(body["display"], "own");
        assert!(out.contains("  display: its own"), "{out}");
        assert_eq!(body["profile"], "custom", "--allow implies custom");
        assert_eq!(body["allow"], json!(["sys_info", "bash"]));
        assert_eq!(body["deny"], json!(["key"]));
        assert!(
            out.contains("  reaches the shell: yes (bash is a shell tool)\n")
                && out.contains("  allow: sys_info, bash\n")
                && out.contains("  tools: sys_info, bash\n")
                && out.contains("  lent folder: /srv/lent\n")
                && !out.contains("  deny:"),
            "{out}"
        );
    }

    #[test]
    fn grant_wait_follows_the_state_until_attached() {
        let stub = Stub::start(vec![
            (202, grant_json("idle", "")),
            (
                200,
                grant_json(
                    "redialing",
                    r#","redial_in_secs":4,"last_error":"handshake 503""#,
                ),
            ),
            (200, grant_json("attached", "")),
        ]);
        let (code, _, err) = run_captured(&grant_args(stub.client(Some("tok")), true));
        let seen = stub.finish();
        assert_eq!(code, EXIT_OK);
        let paths: Vec<_> = seen
            .iter()
            .map(|s| format!("{} {}", s.method, s.path))
            .collect();
        assert_eq!(paths, ["POST /attach", "GET /attach/g1", "GET /attach/g1"]);
        let idle = err.find("grant g1: idle").unwrap();
        let redialing = err
            .find("grant g1: redialing in 4s (last error: handshake 503)")
            .unwrap();
        let attached = err.find("grant g1: attached").unwrap();
        assert!(idle < redialing && redialing < attached, "{err}");
    }

    #[test]
    fn grant_wait_reports_an_ended_grant_with_exit_3() {
        let stub = Stub::start(vec![
            (202, grant_json("dialing", "")),
            (
                200,
                grant_json("ended", r#","ended":"handshake_rejected_401""#),
            ),
        ]);
        let (code, _, err) = run_captured(&grant_args(stub.client(Some("tok")), true));
        stub.finish();
        assert_eq!(code, EXIT_GRANT_ENDED);
        assert!(err.contains("ended: handshake_rejected_401"), "{err}");
    }

    #[test]
    fn daemon_errors_are_printed_with_exit_1() {
        let stub = Stub::start(vec![(
            400,
            r#"{"error":"session must match [a-z0-9-]{1,32}"}"#.into(),
        )]);
        let (code, _, err) = run_captured(&grant_args(stub.client(Some("tok")), false));
        stub.finish();
        assert_eq!(code, EXIT_FAILURE);
        assert!(
            err.contains("(HTTP 400): session must match [a-z0-9-]{1,32}"),
            "{err}"
        );

        let stub = Stub::start(vec![(401, r#"{"error":"unauthorized"}"#.into())]);
        let command = Command::Grants(GrantsArgs {
            client: stub.client(None),
            json: false,
        });
        let (code, _, err) = run_captured(&command);
        let seen = stub.finish();
        assert_eq!(code, EXIT_FAILURE);
        assert_eq!(seen[0].authorization, None);
        assert!(err.contains("unauthorized; no admin token found"), "{err}");
    }

    #[test]
    fn an_unreachable_daemon_is_exit_1() {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let client = ClientArgs {
            socket: None,
            url: format!("http://127.0.0.1:{port}"),
            token: None,
            token_source: None,
        };
        let (code, _, err) = run_captured(&Command::Grants(GrantsArgs {
            client,
            json: false,
        }));
        assert_eq!(code, EXIT_FAILURE);
        assert!(err.contains("cannot reach the daemon"), "{err}");
    }

    #[test]
    fn grants_prints_a_table() {
        let list = format!(
            r#"{{"grants":[{},{}]}}"#,
            grant_json(
                "attached",
                r#","jobs":3,"shell":"yes","shell_because":"bash is a shell tool""#
            ),
            grant_json(
                "ended",
                &format!(
                    r#","ended":"handshake_rejected_401","shell":"no","last_error":"handshake 401: {}""#,
                    "x".repeat(200)
                )
            )
        );
        let stub = Stub::start(vec![(200, list), (200, r#"{"grants":[]}"#.into())]);
        let command = Command::Grants(GrantsArgs {
            client: stub.client(Some("tok")),
            json: false,
        });
        let (code, out, _) = run_captured(&command);
        let (code2, out2, _) = run_captured(&command);
        stub.finish();
        assert_eq!((code, code2), (EXIT_OK, EXIT_OK));
        let lines: Vec<&str> = out.lines().collect();
        assert_eq!(lines.len(), 3, "{out}");
        let header: Vec<&str> = lines[0].split_whitespace().collect();
        assert_eq!(header[..4], ["ID", "STATE", "PROFILE", "SHELL"], "{out}");
        assert!(lines[1].contains("attached") && lines[1].contains("1h 0m"));
        assert!(lines[0].contains("JOBS"), "{out}");
        let jobs_at = lines[0].find("JOBS").unwrap();
        assert_eq!(&lines[1][jobs_at..jobs_at + 1], "3", "{out}");
        assert_eq!(&lines[2][jobs_at..jobs_at + 1], "-", "{out}");
        assert!(lines[1].contains("yes (bash is a shell tool)"), "{out}");
        assert!(lines[2].contains("ended: handshake_rejected_401") && lines[2].contains(" no "));
        // The last error has a bounded column of its own, not the STATE column; an ended
        // grant expires in nothing.
        let state_at = lines[0].find("STATE").unwrap();
        let profile_at = lines[0].find("PROFILE").unwrap();
        assert!(
            !lines[2][state_at..profile_at].contains("handshake 401"),
            "{out}"
        );
        assert!(lines[0].ends_with("LAST ERROR"), "{out}");
        assert!(
            lines[2].ends_with('…') && lines[2].contains("handshake 401: xxx"),
            "{out}"
        );
        assert!(lines[2].chars().count() < 200, "{out}");
        let expires_at = lines[0].find("EXPIRES IN").unwrap();
        assert_eq!(&lines[2][expires_at..expires_at + 2], "- ", "{out}");
        assert_eq!(out2, "no grants\n");
    }

    #[test]
    fn revoke_one_and_all() {
        let stub = Stub::start(vec![
            (204, String::new()),
            (404, r#"{"error":"no such grant"}"#.into()),
        ]);
        let command = Command::Revoke(RevokeArgs {
            client: stub.client(Some("tok")),
            target: RevokeTarget::One("g1".into()),
        });
        let (code, out, _) = run_captured(&command);
        let (code2, out2, _) = run_captured(&command);
        let seen = stub.finish();
        assert_eq!((code, code2), (EXIT_OK, EXIT_OK));
        assert_eq!(out, "revoked grant g1\n");
        assert!(out2.contains("unknown or already ended"));
        assert_eq!(
            (seen[0].method.as_str(), seen[0].path.as_str()),
            ("DELETE", "/attach/g1")
        );

        let live = grant_json("attached", "");
        let ended = grant_json("ended", r#","ended":"deadline""#).replace("\"g1\"", "\"g2\"");
        let stub = Stub::start(vec![
            (200, format!(r#"{{"grants":[{live},{ended}]}}"#)),
            (204, String::new()),
        ]);
        let command = Command::Revoke(RevokeArgs {
            client: stub.client(Some("tok")),
            target: RevokeTarget::All,
        });
        let (code, out, _) = run_captured(&command);
        let seen = stub.finish();
        assert_eq!(code, EXIT_OK);
        assert_eq!(out, "revoked grant g1\n");
        let paths: Vec<_> = seen
            .iter()
            .map(|s| format!("{} {}", s.method, s.path))
            .collect();
        assert_eq!(paths, ["GET /attach", "DELETE /attach/g1"]);
    }

    #[test]
    fn approval_subcommand_arguments() {
        let tmp = TempDir::new("cli");
        let env = env(&tmp);
        let Ok(Command::Approvals(args)) = parse_args(&["approvals", "--watch"], &env) else {
            panic!("not approvals");
        };
        assert!(args.watch && !args.json);
        let id = "0b6c5a1e-8f7e-4c47-9d36-0e0f3a1b2c3d";
        let Ok(Command::Decide(args)) = parse_args(&["approve", id, "--remember"], &env) else {
            panic!("not approve");
        };
        assert_eq!(
            (args.id.as_str(), args.allow, args.remember),
            (id, true, true)
        );
        let Ok(Command::Decide(args)) = parse_args(&["deny", id, "--reason", "not now"], &env)
        else {
            panic!("not deny");
        };
        assert_eq!(
            (args.allow, args.reason.as_deref()),
            (false, Some("not now"))
        );
        let long = "r".repeat(crate::grants::approvals::MAX_REASON_BYTES + 1);
        let at = "r".repeat(crate::grants::approvals::MAX_REASON_BYTES);
        assert!(parse_args(&["deny", id, "--reason", &at], &env).is_ok());
        for args in [
            vec!["approve"],
            vec!["approve", id, id],
            vec!["approve", "../x"],
            vec!["deny", id, "--remember"],
            vec!["approve", id, "--reason", "x"],
            vec!["deny", id, "--reason", &long],
            vec!["approvals", "extra"],
        ] {
            assert!(parse_args(&args, &env).is_err(), "{args:?}");
        }
        let secret = tmp.write("secret", "s").display().to_string();
        let grant = |approve: &str| {
            let Ok(Command::Grant(g)) = parse_args(
                &[
                    "grant",
                    "--runtime",
                    "ws://h",
                    "--session",
                    "s",
                    "--secret-file",
                    &secret,
                    "--approve",
                    approve,
                ],
                &env,
            ) else {
                panic!("not a grant");
            };
            g.approve
        };
        assert_eq!(grant("bash, key"), Some(vec!["bash".into(), "key".into()]));
        assert_eq!(grant("shell"), Some(vec!["shell".into()]));
        assert!(parse_args(
            &[
                "grant",
                "--runtime",
                "ws://h",
                "--session",
                "s",
                "--secret-file",
                &secret,
                "--approve",
                " , "
            ],
            &env
        )
        .is_err());
    }

    fn approval_json(id: &str) -> String {
        format!(
            r#"{{"id":"{id}","grant_id":"g1","principal":"token","session":"laptop","profile":"desktop","tool":"bash","arguments":{{"command":"rm -rf /tmp/x"}},"created_at":"2026-11-30T12:00:00Z","expires_at":"2026-11-30T12:01:00Z","expires_in_secs":42}}"#
        )
    }

    #[test]
    fn approvals_lists_and_watch_follows_the_etag() {
        let one = format!(r#"{{"approvals":[{}]}}"#, approval_json("a1"));
        let stub = Stub::start_tagged(vec![
            (200, r#"{"approvals":[]}"#.into(), Some("\"e0\"")),
            (200, one.clone(), Some("\"e1\"")),
            (200, one, Some("\"e1\"")),
        ]);
        let command = Command::Approvals(ApprovalsArgs {
            client: stub.client(Some("tok")),
            watch: true,
            json: false,
            full: None,
        });
        // The stub stops answering after three replies: the watch then ends with exit 1.
        let (code, out, err) = run_captured(&command);
        let seen = stub.finish();
        assert_eq!(code, EXIT_FAILURE, "{err}");
        let paths: Vec<&str> = seen.iter().map(|s| s.path.as_str()).collect();
        assert_eq!(
            paths,
            [
                "/approvals",
                "/approvals?wait=25&seen=e0",
                "/approvals?wait=25&seen=e1"
            ]
        );
        assert!(
            out.starts_with("no calls are waiting for approval\n--\nID"),
            "{out}"
        );
        assert!(out.contains("a1") && out.contains("rm -rf /tmp/x") && out.contains("42s"));
        assert_eq!(
            out.matches("--\n").count(),
            1,
            "an unchanged set is not printed again: {out}"
        );
    }

    #[test]
    fn approve_and_deny_post_the_decision() {
        let decided = approval_json("a1").replace(
            r#""expires_in_secs":42"#,
            r#""decision":"allow","decided_by":"token""#,
        );
        let stub = Stub::start(vec![
            (200, decided),
            (404, r#"{"error":"no such approval"}"#.into()),
        ]);
        let approve = Command::Decide(DecideArgs {
            client: stub.client(Some("tok")),
            id: "a1".into(),
            allow: true,
            remember: true,
            reason: None,
        });
        let deny = Command::Decide(DecideArgs {
            client: stub.client(Some("tok")),
            id: "a2".into(),
            allow: false,
            remember: false,
            reason: Some("not now".into()),
        });
        let (code, out, _) = run_captured(&approve);
        let (code2, _, err2) = run_captured(&deny);
        let seen = stub.finish();
        assert_eq!((code, code2), (EXIT_OK, EXIT_FAILURE));
        assert!(
            out.starts_with("allowed a1 of bash (session laptop), by token"),
            "{out}"
        );
        assert!(err2.contains("approval a2 is unknown, already decided, expired or withdrawn"));
        assert_eq!(seen[0].path, "/approvals/a1");
        let body: Value = serde_json::from_str(&seen[0].body).unwrap();
        assert_eq!(body, json!({"decision": "allow", "remember": true}));
        let body: Value = serde_json::from_str(&seen[1].body).unwrap();
        assert_eq!(body, json!({"decision": "deny", "reason": "not now"}));
    }
}
