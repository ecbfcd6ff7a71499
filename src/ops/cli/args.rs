//! The operator subcommands' arguments: their types, the flag tables (flags and
//! `HANDNODE_*` env), value checks, `--help`, and argv → the subcommand's args.

use super::*;
use crate::config::MAX_TTL_SECS;

/// Longest grant id accepted on the command line (a UUID is 36).
pub(super) const MAX_ID_LEN: usize = 64;

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

/// `handnode journal [ID] [--html FILE] [--json]` (§22).
#[derive(Clone, Debug)]
pub struct JournalArgs {
    pub client: ClientArgs,
    /// A grant id or `mcp-YYYY-MM-DD`; `None`: list the journals.
    pub id: Option<String>,
    /// Write the self-contained HTML file here instead of printing.
    pub html: Option<PathBuf>,
    pub json: bool,
}

/// `handnode calls` and `handnode jobs` (§22).
#[derive(Clone, Debug)]
pub struct CallsArgs {
    pub client: ClientArgs,
    /// Keep printing the list whenever it changes (until interrupted); `calls` only.
    pub watch: bool,
    pub json: bool,
    /// `jobs`: only the running jobs, with their last output lines.
    pub jobs: bool,
}

/// `handnode halt [REASON]` and `handnode resume` (§22).
#[derive(Clone, Debug)]
pub struct HaltArgs {
    pub client: ClientArgs,
    /// `false`: resume.
    pub halt: bool,
    pub reason: Option<String>,
}

/// `handnode stop ID` (§22).
#[derive(Clone, Debug)]
pub struct StopArgs {
    pub client: ClientArgs,
    pub id: String,
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
    html: Option<PathBuf>,
}

/// `--allow`/`--deny` values: each may itself be a comma-separated list.
pub(super) fn tool_names(values: Vec<String>) -> Vec<String> {
    values
        .iter()
        .flat_map(|v| v.split(','))
        .map(str::trim)
        .filter(|v| !v.is_empty())
        .map(String::from)
        .collect()
}

pub(super) fn nonempty(value: String) -> Result<String, String> {
    if value.trim().is_empty() {
        Err("expected a value, got nothing".into())
    } else {
        Ok(value.trim().to_string())
    }
}

pub(super) const CLIENT_FLAGS: &[Flag<OperatorDraft>] = &[
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

pub(super) const JSON_FLAG: &[Flag<OperatorDraft>] = &[Flag {
    name: "json",
    env: false,
    default: "",
    help: "Print the daemon's JSON instead of a summary.",
    kind: Kind::Switch(|d| d.json = true),
}];

pub(super) const GRANT_FLAGS: &[Flag<OperatorDraft>] = &[
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
        help: "Which tools the agent sees: owner, desktop, observe, browser (a throwaway browser of the grant's own; needs the daemon's --browser-command), files (sys_info and the file tools in the --folder you lend), apps (start and drive only the desktop apps of the daemon's --apps) or custom (the --allow list). Only observe, browser, files and apps keep the agent out of this box's shell (apps as far as the listed apps do); the answer says whether the grant reaches one (shell yes|gated|no, and why).",
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
        help: "Lend this directory: the tools that take a path ({gen:paths plain}) reach it and nothing beneath or beside it can lead out (required by --profile files). A relative path is taken from the current directory; give the real path (no symlink on the way).",
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

pub(super) const REVOKE_FLAGS: &[Flag<OperatorDraft>] = &[Flag {
    name: "all",
    env: false,
    default: "",
    help: "Revoke every live grant.",
    kind: Kind::Switch(|d| d.all = true),
}];

pub(super) const HTML_FLAG: &[Flag<OperatorDraft>] = &[Flag {
    name: "html",
    env: false,
    default: "",
    help: "Write the journal as one self-contained HTML file (thumbnails inside, nothing fetched when opened) to FILE, for an auditor to open offline.",
    kind: Kind::Text {
        metavar: "FILE",
        set: |d, v| {
            d.html = Some(PathBuf::from(nonempty(v)?));
            Ok(())
        },
    },
}];

pub(super) const WATCH_FLAG: &[Flag<OperatorDraft>] = &[Flag {
    name: "watch",
    env: false,
    default: "",
    help: "Keep listing: print the list again whenever it changes, until interrupted.",
    kind: Kind::Switch(|d| d.watch = true),
}];

pub(super) const FULL_FLAG: &[Flag<OperatorDraft>] = &[Flag {
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

pub(super) const REMEMBER_FLAG: &[Flag<OperatorDraft>] = &[Flag {
    name: "remember",
    env: false,
    default: "",
    help: "Also let later calls of the same tool under that grant run without asking, until the grant ends.",
    kind: Kind::Switch(|d| d.remember = true),
}];

pub(super) const REASON_FLAG: &[Flag<OperatorDraft>] = &[Flag {
    name: "reason",
    env: false,
    default: "",
    help: "Why, in a few words; the agent is told: denied by WHO: TEXT (WHO is how you signed in: token, local-socket or your login).",
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

pub(super) fn tables(sub: &str) -> &'static [&'static [Flag<OperatorDraft>]] {
    match sub {
        "grant" => &[GRANT_FLAGS, JSON_FLAG, CLIENT_FLAGS],
        "grants" => &[JSON_FLAG, CLIENT_FLAGS],
        "approvals" => &[WATCH_FLAG, FULL_FLAG, JSON_FLAG, CLIENT_FLAGS],
        "approve" => &[REMEMBER_FLAG, CLIENT_FLAGS],
        "deny" => &[REASON_FLAG, CLIENT_FLAGS],
        "calls" => &[WATCH_FLAG, JSON_FLAG, CLIENT_FLAGS],
        "jobs" => &[JSON_FLAG, CLIENT_FLAGS],
        "stop" | "halt" | "resume" => &[CLIENT_FLAGS],
        "journal" => &[HTML_FLAG, JSON_FLAG, CLIENT_FLAGS],
        _ => &[REVOKE_FLAGS, CLIENT_FLAGS],
    }
}

/// Env vars the operator subcommands read, so `serve` does not call them unknown.
pub(super) fn env_names() -> impl Iterator<Item = String> {
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
pub(super) fn check_runtime(value: &str) -> Result<String, String> {
    let lower = value.to_ascii_lowercase();
    let rest = lower
        .strip_prefix("ws://")
        .or_else(|| lower.strip_prefix("wss://"));
    match rest {
        Some(r) if !r.is_empty() && !r.starts_with(['/', '?', '#', ':']) => Ok(value.to_string()),
        _ => Err("runtime must be a ws:// or wss:// URL".into()),
    }
}

pub(super) fn check_session(value: &str) -> Result<String, String> {
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

pub(super) fn check_url(value: &str) -> Result<String, Error> {
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

pub(super) fn check_id(value: &str) -> Result<String, Error> {
    check_id_of(value, "a grant id (see `handnode grants` for the ids)")
}

pub(super) fn check_id_of(value: &str, what: &str) -> Result<String, Error> {
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

pub(super) fn client_args(
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
pub(super) fn parse_operator(
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
        "calls" | "jobs" => {
            no_positional(sub, &positional)?;
            Ok(Command::Calls(CallsArgs {
                client: client_args(&mut draft, env)?,
                watch: draft.watch,
                json: draft.json,
                jobs: sub == "jobs",
            }))
        }
        "halt" => {
            let reason = positional.join(" ");
            let reason = reason.trim();
            if reason.len() > crate::grants::halt::MAX_REASON_BYTES {
                return Err(Error::Config(format!(
                    "halt: the reason is {} bytes; at most {}",
                    reason.len(),
                    crate::grants::halt::MAX_REASON_BYTES
                )));
            }
            Ok(Command::Halt(HaltArgs {
                client: client_args(&mut draft, env)?,
                halt: true,
                reason: (!reason.is_empty()).then(|| reason.to_string()),
            }))
        }
        "resume" => {
            no_positional(sub, &positional)?;
            Ok(Command::Halt(HaltArgs {
                client: client_args(&mut draft, env)?,
                halt: false,
                reason: None,
            }))
        }
        "journal" => {
            let id = match positional.as_slice() {
                [] => None,
                [id] if crate::journal::is_journal_id(id) => Some(id.clone()),
                [id] => {
                    return Err(Error::Config(format!(
                        "journal: '{}' is not a journal id: give a grant id or mcp-YYYY-MM-DD (handnode journal lists them)",
                        crate::rules::reveal::escape(id)
                    )))
                }
                _ => {
                    return Err(Error::Config(
                        "journal: give at most one journal id (handnode journal lists them)".into(),
                    ))
                }
            };
            if draft.html.is_some() && id.is_none() {
                return Err(Error::Config(
                    "journal: --html needs the id of the journal to write".into(),
                ));
            }
            Ok(Command::Journal(JournalArgs {
                client: client_args(&mut draft, env)?,
                id,
                html: draft.html.take(),
                json: draft.json,
            }))
        }
        "stop" => {
            let [id] = positional.as_slice() else {
                return Err(Error::Config(
                    "stop: give one call or job id (see handnode calls for the ids)".into(),
                ));
            };
            let id = check_id_of(id, "a call or job id (see `handnode calls` for the ids)")?;
            Ok(Command::Stop(StopArgs {
                client: client_args(&mut draft, env)?,
                id,
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
pub(super) fn help(sub: &str) -> String {
    let head = match sub {
        "grant" => "Usage: handnode grant --runtime URL --session NAME (--secret-file PATH | --admin-credential-file PATH)\n                      [--profile PROFILE] [--allow TOOL]... [--deny TOOL]... [--approve TOOL]... [--ttl DURATION]\n                      [--folder DIR] [--own-display] [--wait [--wait-secs N]] [--replace] [--json] [--url URL]\n\nAsk the running daemon to lend this box to a pod session; says whether it created, renewed\n(same tools again: same id and socket, new deadline and secret) or replaced (--replace, when\na live grant of the session has other tools) a grant. Exit 0 ok, 1 daemon unreachable or\nrefused, 2 bad usage or a replace without --replace, 3 the grant ended while --wait waited,\n4 --wait gave up after --wait-secs (the grant keeps dialing).\n",
        "grants" => "Usage: handnode grants [--json] [--url URL]\n\nList the daemon's grants: live ones and those ended in the last 10 minutes.\n",
        "approvals" => "Usage: handnode approvals [--watch] [--json] [--full ID] [--url URL]\n\nList the tool calls waiting for your approval (a grant's approve list names their tool), oldest\nfirst, with their arguments. --watch keeps listing as calls arrive and leave.\n",
        "approve" => "Usage: handnode approve ID [--remember] [--url URL]\n\nLet one waiting call run. With --remember, later calls of its tool under that grant run\nwithout asking until the grant ends. Exit 1 when the id is unknown, already decided, expired\nor withdrawn.\n",
        "deny" => "Usage: handnode deny ID [--reason TEXT] [--url URL]\n\nRefuse one waiting call; it does not run, and the agent is told who denied it (and why).\nExit 1 when the id is unknown, already decided, expired or withdrawn.\n",
        "calls" => "Usage: handnode calls [--watch] [--json] [--url URL]\n\nWhat runs now: every tool call in flight (running, or waiting for your approval) and every\nrunning job, over every grant and your own /mcp, with its arguments and how long it has run.\n--watch prints the list again whenever it changes. handnode stop ID stops one.\n",
        "jobs" => "Usage: handnode jobs [--json] [--url URL]\n\nThe running jobs of every grant: command, how long it has run, and its last output lines.\nhandnode stop ID kills one.\n",
        "halt" => "Usage: handnode halt [REASON...] [--url URL]\n\nStop everything, and keep it stopped: every process of every grant is killed, every call and\nwaiting approval answered (halted by the person who lent the box: REASON), every socket\nclosed; no grant dials and nothing new is lent until handnode resume, across restarts too.\nGrants keep their deadlines.\n",
        "journal" => "Usage: handnode journal [ID] [--html FILE] [--json] [--url URL]\n\nWhat the agent did, in order: every call of a grant (ended ones too, for --journal-days)\nor of a day of your own /mcp (ID mcp-YYYY-MM-DD), with its arguments, who approved it,\nhow long it took, what came of it. Without ID: the journals kept. --html FILE writes one\nself-contained HTML file (thumbnails of the screen inside) an auditor opens offline.\n",
        "resume" => "Usage: handnode resume [--url URL]\n\nEnd a halt: live grants dial again, and new grants may be lent.\n",
        "stop" => "Usage: handnode stop ID [--url URL]\n\nStop one call or job (an id from handnode calls): a running call or job is killed, a call\nwaiting for approval is denied; the agent is told: stopped by the person who lent the box.\nExit 1 when nothing of that id runs.\n",
        _ => "Usage: handnode revoke (ID | --all) [--url URL]\n\nEnd a grant (or every live grant). The pod's own verifier lives until its TTL; revoking here\nstops this box from dialing and closes the socket. An already ended id is not an error;\nan id the daemon never had exits 1.\n",
    };
    let mut out = format!("{head}\nFlags:\n");
    render_flags(&mut out, tables(sub), crate::ops::lists::expand);
    out
}

/// The operator flags as a Markdown table, for the README.
pub(super) fn markdown(out: &mut String) {
    out.push_str("Flags of `handnode grant`, `grants`, `revoke`, `approvals`, `approve`, `deny`, `calls`, `jobs`, `stop`, `halt` and `resume` (`--all` is revoke's, `--json` grant's, grants', approvals', calls' and jobs', `--watch` approvals' and calls', `--full` approvals', `--remember` approve's, `--reason` deny's):\n\n");
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
        crate::ops::lists::expand,
    );
}
