//! Daemon configuration: every setting, its default, and every timing constant, so tests
//! can turn production-sized timers down. Parsing from flags and `HANDNODE_*` env lives
//! here too (one table drives both and `--help`), as does finding the admin token. The
//! subcommand dispatch and the operator subcommands' arguments live in `cli`.

use std::collections::{BTreeMap, HashMap};
use std::fmt::Write as _;
use std::io::{Read, Write as _};
use std::net::{Ipv4Addr, SocketAddr};
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::auth::Policy;
use crate::base::error::Error;
use crate::base::secret::Secret;

/// Which display backend graphical tools use.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DisplayBackend {
    /// Probe on each call: Wayland first (XWayland also sets `DISPLAY`), then X11.
    Auto,
    X11,
    Wayland,
    /// Graphical tools answer a tool error.
    None,
}

/// `--browser-isolation`: how each throwaway browser is kept from the daemon's files.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BrowserIsolation {
    /// `bwrap` when it works on this box, else none (with a warning at start).
    Auto,
    /// `bwrap` or refuse to start.
    Bwrap,
    /// No wrapper.
    None,
}

/// Every timing constant, with its production value as the default.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Timing {
    /// First redial delay; doubles per failure.
    pub backoff_base: Duration,
    /// Upper bound of the redial delay.
    pub backoff_cap: Duration,
    /// A connection attached this long resets the backoff to `backoff_base`.
    pub backoff_reset: Duration,
    /// How often we send a WebSocket Ping on an attached socket.
    pub ping_interval: Duration,
    /// No inbound frame for this long and the socket is dead.
    pub silence_limit: Duration,
    /// The pod does not take our pending output (at most one 8 KiB fragment and a few
    /// small frames) within this long and the socket is dropped (redial).
    pub write_stall: Duration,
    /// TCP connect to the pod.
    pub connect_timeout: Duration,
    /// TLS + WebSocket upgrade, after connect.
    pub handshake_timeout: Duration,
    /// The whole mint request to the pod.
    pub mint_timeout: Duration,
    /// Read/write timeout of every accepted admin API socket.
    pub admin_io_timeout: Duration,
    /// Window in which failed authentications are counted.
    pub throttle_window: Duration,
    /// How long a throttled client gets `429`.
    pub throttle_lockout: Duration,
    /// Longest an audit record waits for its group-commit fsync.
    pub audit_fsync_interval: Duration,
    /// How long ended grants stay in `GET /attach`.
    pub ended_retention: Duration,
    /// One request to an upstream MCP server.
    pub upstream_timeout: Duration,
    /// How long an upstream's tool list is reused before it is fetched again.
    pub upstream_cache_ttl: Duration,
    /// How long probed display facts (backend, screen sizes) are reused.
    pub display_probe_ttl: Duration,
    /// How long `sys_info` reuses what it read from `/proc` (memory, uptime, load,
    /// tailnet addresses).
    pub sys_info_ttl: Duration,
    /// Longest one display helper (grim, xdotool, wtype, …) may run.
    pub display_helper_timeout: Duration,
    /// Longest one call on the accessibility bus may wait for its answer: an application
    /// that does not answer in time is left out of a snapshot (which says so).
    pub a11y_call_timeout: Duration,
    /// Under a grant, a `bash` call whose command still runs after this long continues as
    /// a job (the pod gives up on a call at 120 s).
    pub inline_wait: Duration,
    /// The same limit on the owner's `/mcp`, where a call may wait longer.
    pub mcp_inline_wait: Duration,
    /// How long a finished job's record and output files are kept.
    pub job_retention: Duration,
    /// `bash_cancel` with TERM: SIGKILL follows this long after, if the group still lives.
    pub job_kill_grace: Duration,
    /// A grant's browser without a call for this long is stopped (its pages are gone).
    pub browser_idle: Duration,
    /// From starting a browser command to its answer to `initialize`.
    pub browser_start_timeout: Duration,
    /// How long a call held for approval waits for a decision (§10); at most
    /// [`MAX_APPROVAL_TIMEOUT`] under a grant.
    pub approval_timeout: Duration,
}

/// Longest a call under a grant may wait for approval: the pod gives up on a call at 120 s.
pub const MAX_APPROVAL_TIMEOUT: Duration = Duration::from_secs(100);

impl Default for Timing {
    fn default() -> Self {
        Timing {
            backoff_base: Duration::from_secs(1),
            backoff_cap: Duration::from_secs(30),
            backoff_reset: Duration::from_secs(60),
            ping_interval: Duration::from_secs(20),
            silence_limit: Duration::from_secs(60),
            write_stall: Duration::from_secs(30),
            connect_timeout: Duration::from_secs(10),
            handshake_timeout: Duration::from_secs(15),
            mint_timeout: Duration::from_secs(15),
            admin_io_timeout: Duration::from_secs(10),
            throttle_window: Duration::from_secs(60),
            throttle_lockout: Duration::from_secs(60),
            audit_fsync_interval: Duration::from_millis(100),
            ended_retention: Duration::from_secs(600),
            upstream_timeout: Duration::from_secs(30),
            upstream_cache_ttl: Duration::from_secs(10),
            display_probe_ttl: Duration::from_secs(2),
            sys_info_ttl: Duration::from_secs(1),
            display_helper_timeout: Duration::from_secs(10),
            a11y_call_timeout: Duration::from_secs(2),
            inline_wait: Duration::from_secs(100),
            mcp_inline_wait: Duration::from_secs(600),
            job_retention: Duration::from_secs(600),
            job_kill_grace: Duration::from_secs(5),
            browser_idle: Duration::from_secs(600),
            browser_start_timeout: Duration::from_secs(30),
            approval_timeout: Duration::from_secs(60),
        }
    }
}

/// Counts and sizes, each with the contract's value as default.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Limits {
    /// Failed authentications within `throttle_window` before `429`.
    pub throttle_failures: u32,
    /// Client keys the throttle remembers; the oldest are forgotten past this.
    pub throttle_table: usize,
    /// Admin request body cap (bytes).
    pub max_body_bytes: usize,
    /// Inbound WebSocket message cap (bytes).
    pub max_inbound_bytes: usize,
    /// Outbound message cap (bytes): 16 MiB − 64 KiB.
    pub max_outbound_bytes: usize,
    /// Requests in flight per grant connection.
    pub max_in_flight: usize,
    /// Replies owed on a grant socket (bytes) past which it is not read until the pod
    /// takes some.
    pub write_buffer_bytes: usize,
    /// Tool calls queued for the worker pool before callers are told it is busy.
    pub job_queue: usize,
    /// `Mcp-Session-Id` sessions kept (least recently used evicted).
    pub mcp_sessions: usize,
    /// Audit file size that triggers rotation (bytes).
    pub audit_rotate_bytes: u64,
    /// Rotated audit files kept.
    pub audit_keep: usize,
    /// Bytes of each job stream (stdout, stderr) kept on disk; older bytes are dropped.
    pub job_output_bytes: u64,
    /// All job output files together (bytes); a running job reserves what its files hold
    /// plus a headroom (§15).
    pub job_disk_bytes: u64,
    /// Job output disk one scope (a grant, the owner's `/mcp`) may hold or reserve
    /// (`--job-disk-share`); `None`: a quarter of `job_disk_bytes`.
    pub job_disk_share: Option<u64>,
    /// Running jobs per grant (and on the owner's `/mcp`).
    pub jobs_per_grant: usize,
    /// Bytes of unfinished `file_put` uploads (part files) one grant may hold.
    pub upload_bytes: u64,
    /// Running jobs on this box.
    pub jobs_total: usize,
    /// Throwaway browsers (one per `browser` grant) running at once.
    pub max_browsers: usize,
    /// Calls held for approval at once, over all grants; past this a call is answered
    /// `isError` and does not run.
    pub approvals_pending: usize,
    /// Calls of one grant held for approval at once (§15): past this that grant's call is
    /// refused, so no grant can fill the box-wide bound above for the others.
    pub approvals_pending_per_grant: usize,
    /// `GET /approvals?wait=N` long-polls parked at once; past this a `429`.
    pub approval_waiters: usize,
    /// Largest arguments (serialized JSON, bytes) a held call may carry: the person must be
    /// able to read what they allow.
    pub approval_args_bytes: usize,
    /// Mints (`POST /attach` with `admin_credential`) waiting for their pods at once; each
    /// waits on a thread of its own, never on an admin handler. One more gets `429`.
    pub max_mints: usize,
    /// Most memory (bytes) one grant's processes may use together (§16); `POST /attach`
    /// may ask for less.
    pub grant_memory_max: u64,
    /// Most processes one grant may run at once.
    pub grant_pids_max: u64,
    /// One grant's CPU weight against the daemon's own 100.
    pub grant_cpu_weight: u64,
}

/// Bytes a running job may hold per stream beyond what its files hold (§15): reserved
/// at its start, restored as its files grow (`tools::bgjobs`).
pub const JOB_HEADROOM_BYTES: u64 = 1 << 20;
/// A job output file's header (`tools::bgjobs::HEADER_BYTES`, which a test keeps equal).
pub const JOB_HEADER_BYTES: u64 = 32;

impl Limits {
    /// What a job reserves when it starts: a header and a headroom per stream.
    pub fn job_start_bytes(&self) -> u64 {
        2 * (JOB_HEADER_BYTES + JOB_HEADROOM_BYTES.min(self.job_output_bytes))
    }

    /// The job disk one scope may use: `--job-disk-share`, or a quarter of the box's.
    pub fn job_disk_share(&self) -> u64 {
        self.job_disk_share.unwrap_or(self.job_disk_bytes / 4)
    }
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            throttle_failures: 10,
            throttle_table: 4096,
            max_body_bytes: 1 << 20,
            max_inbound_bytes: 16 << 20,
            max_outbound_bytes: (16 << 20) - (64 << 10),
            max_in_flight: 64,
            write_buffer_bytes: 4 << 20,
            job_queue: 256,
            mcp_sessions: 256,
            audit_rotate_bytes: 10 << 20,
            audit_keep: 5,
            job_output_bytes: 16 << 20,
            job_disk_bytes: 256 << 20,
            job_disk_share: None,
            jobs_per_grant: 16,
            upload_bytes: 1 << 30,
            jobs_total: 64,
            max_browsers: 2,
            approvals_pending: 256,
            approvals_pending_per_grant: 16,
            approval_waiters: 16,
            approval_args_bytes: 64 << 10,
            max_mints: 8,
            grant_memory_max: crate::cgroup::Limits::defaults().memory_max,
            grant_pids_max: crate::cgroup::Limits::defaults().pids_max,
            grant_cpu_weight: crate::cgroup::Limits::defaults().cpu_weight,
        }
    }
}

impl Limits {
    /// The most any grant gets: the `--grant-*` flags.
    pub fn grant_ceiling(&self) -> crate::cgroup::Limits {
        crate::cgroup::Limits {
            memory_max: self.grant_memory_max,
            pids_max: self.grant_pids_max,
            cpu_weight: self.grant_cpu_weight,
        }
    }
}

/// The effective configuration of `handnode serve`.
#[derive(Clone, Debug)]
pub struct Config {
    pub listen: SocketAddr,
    /// The admin bearer token, resolved from file/env/credentials dir.
    pub token: Option<Secret>,
    /// Where the token came from (for the start-up log; never the value).
    pub token_source: Option<String>,
    pub allow_logins: Vec<String>,
    pub allow_hosts: Vec<String>,
    pub insecure_local: bool,
    pub state_dir: PathBuf,
    pub config_dir: PathBuf,
    pub persist: bool,
    pub workers: usize,
    pub audit_args: bool,
    pub ca_file: Option<PathBuf>,
    /// `(name, url)` of each upstream MCP server.
    pub upstreams: Vec<(String, String)>,
    /// `--browser-command`, split into an argv: the Playwright MCP server (stdio) each
    /// `browser` grant gets its own copy of. `None`: `browser` grants are refused.
    pub browser_command: Option<Vec<String>>,
    /// Where each browser gets its own directory; `None` = `browser::default_dir`.
    pub browser_dir: Option<PathBuf>,
    pub browser_isolation: BrowserIsolation,
    /// `--apps`: the desktop entries the `apps` profile may start and drive (§17),
    /// resolved and vetted at start (`base::desktop_entry::resolve_apps`).
    pub apps: Vec<crate::base::desktop_entry::DesktopEntry>,
    pub display_backend: DisplayBackend,
    /// Test override of the display variables graphical tools see (`DISPLAY`,
    /// `WAYLAND_DISPLAY`, …); `None` = this process's environment. Not a flag.
    #[doc(hidden)]
    pub display_env: Option<std::collections::BTreeMap<String, String>>,
    pub max_screenshot_edge: u32,
    pub notify: bool,
    /// Test override of the `notify-send` program (default: found on `PATH`). Not a flag.
    #[doc(hidden)]
    pub notify_program: Option<PathBuf>,
    /// Tell systemd (`NOTIFY_SOCKET`) when ready and when stopping.
    pub sd_notify: bool,
    /// The admin API's Unix socket for the box owner's own CLI (peers of this uid only);
    /// `None`: not served.
    pub local_socket: Option<PathBuf>,
    /// `--containment subreaper`: never use cgroups (§16), as where none is usable.
    pub force_subreaper: bool,
    pub timing: Timing,
    pub limits: Limits,
}

impl Config {
    /// A configuration for tests: loopback on an ephemeral port, the given state dir,
    /// no auth until the caller sets some.
    pub fn for_tests(state_dir: PathBuf) -> Self {
        Config {
            listen: "127.0.0.1:0".parse().expect("literal address"),
            token: None,
            token_source: None,
            allow_logins: Vec::new(),
            allow_hosts: Vec::new(),
            insecure_local: false,
            config_dir: state_dir.join("config"),
            state_dir,
            persist: true,
            workers: 4,
            audit_args: false,
            ca_file: None,
            upstreams: Vec::new(),
            browser_command: None,
            browser_dir: None,
            browser_isolation: BrowserIsolation::Auto,
            apps: Vec::new(),
            display_backend: DisplayBackend::Auto,
            display_env: None,
            max_screenshot_edge: 1920,
            notify: false,
            notify_program: None,
            sd_notify: false,
            local_socket: None,
            force_subreaper: false,
            timing: Timing::default(),
            limits: Limits::default(),
        }
    }

    /// The admin API's authentication settings of this configuration.
    pub fn policy(&self) -> Policy {
        Policy::new(self.token.clone(), &self.allow_logins, self.insecure_local)
    }
}

/// The admin API address when `--listen` is not given.
pub const DEFAULT_LISTEN: SocketAddr =
    SocketAddr::new(std::net::IpAddr::V4(Ipv4Addr::new(127, 0, 0, 1)), 8795);
/// Long edge of a screenshot (pixels) when `--max-screenshot-edge` is not given.
pub const DEFAULT_MAX_SCREENSHOT_EDGE: u32 = 1920;
/// Worker pool size when `--workers` is not given.
pub const DEFAULT_WORKERS: usize = 4;
/// Largest token or secret file we read (bytes); anything bigger is a mistake, not a secret.
pub const SECRET_FILE_MAX_BYTES: u64 = 16 << 10;
/// Name of the default token file inside the config dir.
pub const TOKEN_FILE_NAME: &str = "token";
/// Name systemd's `LoadCredential=` gives the token inside `$CREDENTIALS_DIRECTORY`.
pub const CREDENTIAL_NAME: &str = "handnode-token";
/// The env var that may hold the admin token itself (never a flag: argv is world-readable).
pub const TOKEN_ENV: &str = "HANDNODE_TOKEN";
/// Prefix of every env var that sets a flag.
pub const ENV_PREFIX: &str = "HANDNODE_";
/// Longest TTL a grant may have (seconds): one day. `POST /attach`, the CLI and the load
/// of `grants.json` all hold grants to it.
pub const MAX_TTL_SECS: u64 = 86_400;

/// Longest value of a `--*-ms` timing flag (milliseconds): one day.
const MAX_MS: u64 = 86_400_000;

/// How a flag takes its value, and where the value goes in the draft `T` being built.
pub(crate) enum Kind<T> {
    /// Present or absent. In env: `1|true|yes|on` or `0|false|no|off`.
    Switch(fn(&mut T)),
    /// One value.
    Text {
        metavar: &'static str,
        set: fn(&mut T, String) -> Result<(), String>,
    },
    /// Repeatable; comma-separated in env.
    List {
        metavar: &'static str,
        set: fn(&mut T, Vec<String>) -> Result<(), String>,
    },
    /// A whole number in `min..=max`.
    Int {
        metavar: &'static str,
        min: u64,
        max: u64,
        set: fn(&mut T, u64),
    },
}

/// One row of a flag table: parsing, env and `--help` all come from it.
pub(crate) struct Flag<T> {
    /// Without the leading `--`.
    pub name: &'static str,
    /// Whether `HANDNODE_<NAME>` sets it too.
    pub env: bool,
    /// As shown in `--help`; empty when there is none.
    pub default: &'static str,
    pub help: &'static str,
    pub kind: Kind<T>,
}

impl<T> Flag<T> {
    /// `HANDNODE_<NAME>` with `-` → `_`.
    pub fn env_name(&self) -> String {
        env_name(self.name)
    }

    fn metavar(&self) -> Option<&'static str> {
        match self.kind {
            Kind::Switch(_) => None,
            Kind::Text { metavar, .. } | Kind::List { metavar, .. } | Kind::Int { metavar, .. } => {
                Some(metavar)
            }
        }
    }

    fn repeatable(&self) -> bool {
        matches!(self.kind, Kind::List { .. })
    }

    /// `--name METAVAR`, as help and the README show it.
    fn usage(&self) -> String {
        match self.metavar() {
            Some(m) if self.repeatable() => format!("--{} {m} (repeatable)", self.name),
            Some(m) => format!("--{} {m}", self.name),
            None => format!("--{}", self.name),
        }
    }
}

fn env_name(flag: &str) -> String {
    format!(
        "{ENV_PREFIX}{}",
        flag.to_ascii_uppercase().replace('-', "_")
    )
}

/// Values gathered for one flag before conversion, and where they came from, so an error
/// names the flag or env var the operator actually wrote.
struct Raw {
    origin: String,
    from_args: bool,
    values: Vec<String>,
}

fn parse_bool(value: &str) -> Option<bool> {
    match value.trim().to_ascii_lowercase().as_str() {
        "1" | "true" | "yes" | "on" => Some(true),
        "0" | "false" | "no" | "off" => Some(false),
        _ => None,
    }
}

/// Fill `draft` from env, then argv (a flag beats its env var; for a repeatable flag any
/// occurrence on the command line replaces the env list). Returns the positional arguments.
pub(crate) fn apply_flags<T>(
    tables: &[&[Flag<T>]],
    args: &[String],
    env: &HashMap<String, String>,
    draft: &mut T,
) -> Result<Vec<String>, Error> {
    let flags = || tables.iter().flat_map(|t| t.iter());
    let mut raw: BTreeMap<&'static str, Raw> = BTreeMap::new();

    for flag in flags().filter(|f| f.env) {
        let var = flag.env_name();
        let Some(value) = env.get(&var).map(|v| v.trim()).filter(|v| !v.is_empty()) else {
            continue;
        };
        let values = match flag.kind {
            Kind::Switch(_) => match parse_bool(value) {
                Some(true) => Vec::new(),
                Some(false) => continue,
                None => {
                    return Err(Error::Config(format!(
                        "{var}: expected 1/0, true/false, yes/no or on/off, got '{value}'"
                    )))
                }
            },
            Kind::List { .. } => value
                .split(',')
                .map(str::trim)
                .filter(|v| !v.is_empty())
                .map(String::from)
                .collect(),
            _ => vec![value.to_string()],
        };
        raw.insert(
            flag.name,
            Raw {
                origin: var,
                from_args: false,
                values,
            },
        );
    }

    let mut positional = Vec::new();
    let mut iter = args.iter();
    while let Some(arg) = iter.next() {
        if arg == "--" {
            positional.extend(iter.by_ref().cloned());
            break;
        }
        let Some(body) = arg.strip_prefix("--") else {
            if arg.len() > 1 && arg.starts_with('-') {
                return Err(Error::Config(format!("unknown flag {arg} (see --help)")));
            }
            positional.push(arg.clone());
            continue;
        };
        let (name, inline) = match body.split_once('=') {
            Some((n, v)) => (n, Some(v.to_string())),
            None => (body, None),
        };
        let Some(flag) = flags().find(|f| f.name == name) else {
            return Err(Error::Config(format!("unknown flag --{name} (see --help)")));
        };
        let value = match (&flag.kind, inline) {
            (Kind::Switch(_), Some(_)) => {
                return Err(Error::Config(format!(
                    "--{name} is a switch and takes no value; leave it out to keep it off"
                )))
            }
            (Kind::Switch(_), None) => None,
            (_, Some(v)) => Some(v),
            (_, None) => match iter.next() {
                Some(v) => Some(v.clone()),
                None => {
                    return Err(Error::Config(format!(
                        "--{name} needs a value ({})",
                        flag.metavar().unwrap_or("VALUE")
                    )))
                }
            },
        };
        match raw.get_mut(flag.name) {
            Some(entry) if entry.from_args => {
                if !flag.repeatable() {
                    return Err(Error::Config(format!(
                        "--{name} given more than once; give it once"
                    )));
                }
                entry.values.extend(value);
            }
            // First on the command line: whatever env said is replaced.
            _ => {
                raw.insert(
                    flag.name,
                    Raw {
                        origin: format!("--{name}"),
                        from_args: true,
                        values: value.into_iter().collect(),
                    },
                );
            }
        }
    }

    for flag in flags() {
        let Some(Raw { origin, values, .. }) = raw.remove(flag.name) else {
            continue;
        };
        let fail = |msg: String| Error::Config(format!("{origin}: {msg}"));
        match &flag.kind {
            Kind::Switch(set) => set(draft),
            Kind::Text { set, .. } => {
                let value = values.into_iter().next().unwrap_or_default();
                set(draft, value).map_err(fail)?;
            }
            Kind::List { set, .. } => set(draft, values).map_err(fail)?,
            Kind::Int { min, max, set, .. } => {
                let value = values.into_iter().next().unwrap_or_default();
                match value.trim().parse::<u64>() {
                    Ok(n) if (*min..=*max).contains(&n) => set(draft, n),
                    _ => {
                        return Err(fail(format!(
                            "expected a whole number in {min}...{max}, got '{value}'"
                        )))
                    }
                }
            }
        }
    }
    Ok(positional)
}

/// Wrap `text` at `width` columns, every line indented by `indent` spaces.
fn wrap(out: &mut String, text: &str, indent: usize, width: usize) {
    let mut line = String::new();
    for word in text.split_whitespace() {
        if !line.is_empty() && indent + line.len() + 1 + word.len() > width {
            let _ = writeln!(out, "{:indent$}{line}", "");
            line.clear();
        }
        if !line.is_empty() {
            line.push(' ');
        }
        line.push_str(word);
    }
    if !line.is_empty() {
        let _ = writeln!(out, "{:indent$}{line}", "");
    }
}

/// The flag part of `--help` for these tables.
pub(crate) fn render_flags<T>(out: &mut String, tables: &[&[Flag<T>]]) {
    for flag in tables.iter().flat_map(|t| t.iter()) {
        let _ = writeln!(out, "  {}", flag.usage());
        wrap(out, flag.help, 6, 90);
        let mut notes = Vec::new();
        if flag.env {
            notes.push(format!("env {}", flag.env_name()));
        }
        if !flag.default.is_empty() {
            notes.push(format!("default {}", flag.default));
        }
        if !notes.is_empty() {
            wrap(out, &format!("[{}]", notes.join("; ")), 6, 90);
        }
    }
}

/// One Markdown table of these flags: flag, env var, default, meaning.
pub(crate) fn markdown_flags<T>(out: &mut String, tables: &[&[Flag<T>]]) {
    out.push_str("| Flag | Env | Default | Meaning |\n|---|---|---|---|\n");
    let code = |s: &str| {
        if s.is_empty() {
            String::new()
        } else {
            format!("`{}`", s.replace('|', "\\|"))
        }
    };
    for flag in tables.iter().flat_map(|t| t.iter()) {
        let env = if flag.env {
            code(&flag.env_name())
        } else {
            String::new()
        };
        let _ = writeln!(
            out,
            "| {} | {} | {} | {} |",
            code(&flag.usage()),
            env,
            code(flag.default),
            flag.help.replace('|', "\\|")
        );
    }
}

/// `serve` settings gathered from flags and env before dirs and the token are resolved.
pub(crate) struct ServeDraft {
    config: Config,
    token_file: Option<PathBuf>,
    state_dir: Option<PathBuf>,
    config_dir: Option<PathBuf>,
    /// `--local-socket`: `Some(None)` is `none`.
    local_socket: Option<Option<PathBuf>>,
    /// `--apps` IDs, resolved against the environment's data dirs once all flags are in.
    apps: Vec<String>,
}

fn path_value(value: String) -> Result<PathBuf, String> {
    if value.trim().is_empty() {
        return Err("expected a path, got nothing".into());
    }
    Ok(PathBuf::from(value))
}

fn parse_listen(value: &str) -> Result<SocketAddr, String> {
    let value = value.trim();
    if let Ok(addr) = value.parse() {
        return Ok(addr);
    }
    // `localhost:PORT` is what people type; resolve it without DNS.
    if let Some(port) = value.strip_prefix("localhost:") {
        if let Ok(port) = port.parse::<u16>() {
            return Ok(SocketAddr::new(Ipv4Addr::LOCALHOST.into(), port));
        }
    }
    Err(format!(
        "expected IP:PORT such as 127.0.0.1:8795 or [::1]:8795, got '{value}'"
    ))
}

/// A tailnet login as `Tailscale-User-Login` carries it, compared lowercase.
fn parse_login(value: String) -> Result<String, String> {
    let login = value.trim().to_lowercase();
    if login.is_empty() || login.chars().any(|c| c.is_whitespace() || c == ',') {
        return Err(format!(
            "expected a tailnet login such as you@example.com, got '{value}'"
        ));
    }
    Ok(login)
}

/// A host name or address the Host/Origin guard accepts, lowercase, without port.
fn parse_allowed_host(value: String) -> Result<String, String> {
    let host = value.trim().to_lowercase();
    let ok = !host.is_empty()
        && host
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | ':' | '[' | ']'));
    if !ok {
        return Err(format!(
            "expected a host name such as box.tailnet.ts.net (no scheme, no path), got '{value}'"
        ));
    }
    Ok(host)
}

fn parse_upstreams(values: Vec<String>) -> Result<Vec<(String, String)>, String> {
    let mut out: Vec<(String, String)> = Vec::new();
    for value in values {
        let Some((name, url)) = value.split_once('=') else {
            return Err(format!(
                "expected NAME=URL such as browser=http://127.0.0.1:8931/mcp, got '{value}'"
            ));
        };
        let (name, url) = (name.trim(), url.trim());
        let name_ok = !name.is_empty()
            && name.len() <= 32
            && name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_');
        if !name_ok {
            return Err(format!(
                "upstream name must match [A-Za-z0-9_-]{{1,32}}, got '{name}'"
            ));
        }
        let lower = url.to_ascii_lowercase();
        let rest = lower
            .strip_prefix("http://")
            .or_else(|| lower.strip_prefix("https://"));
        if !rest.is_some_and(|r| !r.is_empty() && !r.starts_with('/')) {
            return Err(format!(
                "upstream '{name}' must be an http:// or https:// URL with a host, got '{url}'"
            ));
        }
        if out.iter().any(|(n, _)| n == name) {
            return Err(format!("upstream '{name}' given twice"));
        }
        out.push((name.to_string(), url.to_string()));
    }
    Ok(out)
}

fn parse_display_backend(value: &str) -> Result<DisplayBackend, String> {
    match value.trim().to_ascii_lowercase().as_str() {
        "auto" => Ok(DisplayBackend::Auto),
        "x11" => Ok(DisplayBackend::X11),
        "wayland" => Ok(DisplayBackend::Wayland),
        "none" => Ok(DisplayBackend::None),
        _ => Err(format!(
            "expected one of auto, x11, wayland, none, got '{value}'"
        )),
    }
}

impl DisplayBackend {
    pub fn as_str(self) -> &'static str {
        match self {
            DisplayBackend::Auto => "auto",
            DisplayBackend::X11 => "x11",
            DisplayBackend::Wayland => "wayland",
            DisplayBackend::None => "none",
        }
    }
}

/// A `--*-ms` flag setting one `Timing` field.
macro_rules! millis {
    ($name:literal, $field:ident, $default:literal, $help:literal) => {
        Flag {
            name: $name,
            env: true,
            default: $default,
            help: $help,
            kind: Kind::Int {
                metavar: "MS",
                min: 1,
                max: MAX_MS,
                set: |d: &mut ServeDraft, v| d.config.timing.$field = Duration::from_millis(v),
            },
        }
    };
}

/// Every flag of `serve`, in `--help` order.
pub(crate) const SERVE_FLAGS: &[Flag<ServeDraft>] = &[
    Flag {
        name: "listen",
        env: true,
        default: "127.0.0.1:8795",
        help: "Address of the admin API. Keep it on loopback; reach it from the tailnet through `tailscale serve`.",
        kind: Kind::Text {
            metavar: "ADDR",
            set: |d, v| {
                d.config.listen = parse_listen(&v)?;
                Ok(())
            },
        },
    },
    Flag {
        name: "token-file",
        env: true,
        default: "",
        help: "File holding the admin bearer token (surrounding whitespace is ignored). Without it the token comes from env HANDNODE_TOKEN, then $CREDENTIALS_DIRECTORY/handnode-token, then <config dir>/token. The token is never a flag value: argv is world-readable.",
        kind: Kind::Text {
            metavar: "PATH",
            set: |d, v| {
                d.token_file = Some(path_value(v)?);
                Ok(())
            },
        },
    },
    Flag {
        name: "allow-login",
        env: true,
        default: "",
        help: "Tailnet login allowed to use the admin API, as `tailscale serve` sends it in Tailscale-User-Login. Pair it with --allow-host and with the admin token (tailnet login AND bearer): without a token any local process can send the header.",
        kind: Kind::List {
            metavar: "EMAIL",
            set: |d, v| {
                d.config.allow_logins = v.into_iter().map(parse_login).collect::<Result<_, _>>()?;
                Ok(())
            },
        },
    },
    Flag {
        name: "allow-host",
        env: true,
        default: "",
        help: "Extra name accepted in the Host/Origin headers besides loopback and localhost, e.g. the box's <box>.<tailnet>.ts.net name behind `tailscale serve`.",
        kind: Kind::List {
            metavar: "HOST",
            set: |d, v| {
                d.config.allow_hosts =
                    v.into_iter().map(parse_allowed_host).collect::<Result<_, _>>()?;
                Ok(())
            },
        },
    },
    Flag {
        name: "insecure-local",
        env: true,
        default: "",
        help: "Let loopback callers without any identity use the admin API (debugging only: every local user and process gets in).",
        kind: Kind::Switch(|d| d.config.insecure_local = true),
    },
    Flag {
        name: "state-dir",
        env: true,
        default: "$XDG_STATE_HOME/handnode or ~/.local/state/handnode",
        help: "Where grants.json and audit.jsonl live (created 0700).",
        kind: Kind::Text {
            metavar: "DIR",
            set: |d, v| {
                d.state_dir = Some(path_value(v)?);
                Ok(())
            },
        },
    },
    Flag {
        name: "config-dir",
        env: true,
        default: "$XDG_CONFIG_HOME/handnode or ~/.config/handnode",
        help: "Where the default token file lives (generated on first start when no authentication is configured).",
        kind: Kind::Text {
            metavar: "DIR",
            set: |d, v| {
                d.config_dir = Some(path_value(v)?);
                Ok(())
            },
        },
    },
    Flag {
        name: "no-persist",
        env: true,
        default: "",
        help: "Keep grants in memory only: they do not survive a restart.",
        kind: Kind::Switch(|d| d.config.persist = false),
    },
    Flag {
        name: "workers",
        env: true,
        default: "4",
        help: "Threads that start tool calls.",
        kind: Kind::Int {
            metavar: "N",
            min: 1,
            max: 64,
            set: |d, v| d.config.workers = v as usize,
        },
    },
    Flag {
        name: "audit-args",
        env: true,
        default: "",
        help: "Also record tool arguments in audit.jsonl. This records typed text, passwords included.",
        kind: Kind::Switch(|d| d.config.audit_args = true),
    },
    Flag {
        name: "ca-file",
        env: true,
        default: "",
        help: "PEM file of an extra CA to trust for wss:// pods (on top of the public web roots).",
        kind: Kind::Text {
            metavar: "PATH",
            set: |d, v| {
                let path = path_value(v)?;
                match std::fs::metadata(&path) {
                    Ok(m) if m.is_file() => {}
                    Ok(_) => return Err(format!("{} is not a file", path.display())),
                    Err(e) => return Err(format!("cannot read {}: {e}", path.display())),
                }
                d.config.ca_file = Some(path);
                Ok(())
            },
        },
    },
    Flag {
        name: "upstream",
        env: true,
        default: "",
        help: "An upstream MCP server whose tools are offered after the local ones, e.g. browser=http://127.0.0.1:8931/mcp.",
        kind: Kind::List {
            metavar: "NAME=URL",
            set: |d, v| {
                d.config.upstreams = parse_upstreams(v)?;
                Ok(())
            },
        },
    },
    Flag {
        name: "browser-command",
        env: true,
        default: "",
        help: "A Playwright MCP server speaking MCP on stdio, e.g. \"node /opt/pw/node_modules/@playwright/mcp/cli.js --headless --isolated --browser chromium --executable-path /usr/lib/chromium/chromium\". Each `browser` grant runs its own copy, with a fresh profile, destroyed when the grant ends. Split into words without a shell: quote with '…' or \"…\", escape with \\.",
        kind: Kind::Text {
            metavar: "COMMAND",
            set: |d, v| {
                d.config.browser_command = Some(crate::base::browser_argv::parse_command(&v)?);
                Ok(())
            },
        },
    },
    Flag {
        name: "apps",
        env: true,
        default: "",
        help: "Desktop entry IDs (e.g. org.gnome.Calculator, comma-separated or repeated) that `apps` grants may start (app_open) and drive (desktop_act), looked up under $XDG_DATA_HOME/applications and each $XDG_DATA_DIRS/*/applications. Terminal emulators, Terminal=true entries, settings and system tools, shells, interpreters and anything that runs commands by design are refused at start. You vouch for the apps you list: one that can run programs makes its grants a shell.",
        kind: Kind::List {
            metavar: "ID",
            set: |d, v| {
                d.apps = v
                    .iter()
                    .flat_map(|v| v.split(','))
                    .map(str::trim)
                    .filter(|v| !v.is_empty())
                    .map(crate::base::desktop_entry::check_id)
                    .collect::<Result<_, _>>()?;
                Ok(())
            },
        },
    },
    Flag {
        name: "max-browsers",
        env: true,
        default: "2",
        help: "Throwaway browsers (one per browser grant) running at once; a call past that is answered `no browser available`.",
        kind: Kind::Int {
            metavar: "N",
            min: 1,
            max: 64,
            set: |d, v| d.config.limits.max_browsers = v as usize,
        },
    },
    Flag {
        name: "local-socket",
        env: true,
        default: "$XDG_RUNTIME_DIR/handnode.sock (none without XDG_RUNTIME_DIR)",
        help: "A Unix socket (0600) serving the admin API to processes of this daemon's own user only (their uid is checked), without the token: the box owner's CLI uses it by default. `none`: not served.",
        kind: Kind::Text {
            metavar: "PATH|none",
            set: |d, v| {
                d.local_socket = Some(if v == "none" { None } else { Some(path_value(v)?) });
                Ok(())
            },
        },
    },
    Flag {
        name: "browser-dir",
        env: true,
        default: "$XDG_RUNTIME_DIR/handnode-browsers or /tmp/handnode-browsers-<uid>",
        help: "Where each browser gets a directory of its own (profile, downloads, temp files), removed with the browser. Keep the path short: chromium puts a Unix socket inside.",
        kind: Kind::Text {
            metavar: "DIR",
            set: |d, v| {
                d.config.browser_dir = Some(path_value(v)?);
                Ok(())
            },
        },
    },
    Flag {
        name: "browser-isolation",
        env: true,
        default: "auto",
        help: "How each throwaway browser is kept from handnode's files: bwrap (bubblewrap: the state dir, config dir, token file and other grants' browsers are empty inside; start fails if bwrap does not work), none, or auto (bwrap when it works here, else none with a warning). `doctor` says which.",
        kind: Kind::Text {
            metavar: "auto|bwrap|none",
            set: |d, v| {
                d.config.browser_isolation = match v.as_str() {
                    "auto" => BrowserIsolation::Auto,
                    "bwrap" => BrowserIsolation::Bwrap,
                    "none" => BrowserIsolation::None,
                    other => {
                        return Err(format!(
                            "--browser-isolation must be auto, bwrap or none, got {other:?}"
                        ))
                    }
                };
                Ok(())
            },
        },
    },
    Flag {
        name: "display-backend",
        env: true,
        default: "auto",
        help: "Graphical backend: auto (probe Wayland, then X11, on each call), x11, wayland or none.",
        kind: Kind::Text {
            metavar: "auto|x11|wayland|none",
            set: |d, v| {
                d.config.display_backend = parse_display_backend(&v)?;
                Ok(())
            },
        },
    },
    Flag {
        name: "max-screenshot-edge",
        env: true,
        default: "1920",
        help: "Longest screenshot edge in pixels; bigger screens are scaled down.",
        kind: Kind::Int {
            metavar: "PX",
            min: 16,
            max: 16384,
            set: |d, v| d.config.max_screenshot_edge = v as u32,
        },
    },
    Flag {
        name: "no-notify",
        env: true,
        default: "",
        help: "Do not show desktop notifications (a grant attaches or ends; a call waits for approval with Allow/Deny buttons).",
        kind: Kind::Switch(|d| d.config.notify = false),
    },
    Flag {
        name: "no-sd-notify",
        env: true,
        default: "",
        help: "Do not tell systemd (NOTIFY_SOCKET) when ready and when stopping.",
        kind: Kind::Switch(|d| d.config.sd_notify = false),
    },
    Flag {
        name: "throttle-failures",
        env: true,
        default: "10",
        help: "Failed authentications from one client within the throttle window before it gets 429.",
        kind: Kind::Int {
            metavar: "N",
            min: 1,
            max: 10_000,
            set: |d, v| d.config.limits.throttle_failures = v as u32,
        },
    },
    Flag {
        name: "throttle-table",
        env: true,
        default: "4096",
        help: "Clients the failed-auth throttle remembers; the oldest are forgotten past this.",
        kind: Kind::Int {
            metavar: "N",
            min: 1,
            max: 1_000_000,
            set: |d, v| d.config.limits.throttle_table = v as usize,
        },
    },
    Flag {
        name: "max-in-flight",
        env: true,
        default: "64",
        help: "Requests in flight per grant connection; one more is refused.",
        kind: Kind::Int {
            metavar: "N",
            min: 1,
            max: 1024,
            set: |d, v| d.config.limits.max_in_flight = v as usize,
        },
    },
    Flag {
        name: "write-buffer-bytes",
        env: true,
        default: "4194304",
        help: "Replies owed on a grant socket (bytes) past which it is not read until the pod reads; a job's or bash's output is made into a reply only while fewer are owed, so a grant's replies hold at most this plus one reply.",
        kind: Kind::Int {
            metavar: "BYTES",
            min: 65_536,
            max: 1 << 30,
            set: |d, v| d.config.limits.write_buffer_bytes = v as usize,
        },
    },
    Flag {
        name: "job-queue",
        env: true,
        default: "256",
        help: "Tool calls queued for the workers before callers are told the box is busy.",
        kind: Kind::Int {
            metavar: "N",
            min: 1,
            max: 65_536,
            set: |d, v| d.config.limits.job_queue = v as usize,
        },
    },
    Flag {
        name: "approval-timeout-ms",
        env: true,
        default: "60000",
        help: "How long a call of a tool named in a grant's approve list waits for someone to allow it; then it is answered 'no one approved' and does not run. At most 100000 (the pod gives up on a call at 120 s).",
        kind: Kind::Int {
            metavar: "MS",
            min: 1,
            max: MAX_APPROVAL_TIMEOUT.as_millis() as u64,
            set: |d, v| d.config.timing.approval_timeout = Duration::from_millis(v),
        },
    },
    Flag {
        name: "max-pending-approvals",
        env: true,
        default: "256",
        help: "Calls waiting for approval at once, over all grants; one more is answered with a tool error and does not run.",
        kind: Kind::Int {
            metavar: "N",
            min: 1,
            max: 65_536,
            set: |d, v| d.config.limits.approvals_pending = v as usize,
        },
    },
    Flag {
        name: "max-pending-per-grant",
        env: true,
        default: "16",
        help: "Calls of one grant (or of the owner's /mcp) waiting for approval at once; one more of that grant's is answered with a tool error and does not run, so one grant never fills --max-pending-approvals for the others.",
        kind: Kind::Int {
            metavar: "N",
            min: 1,
            max: 65_536,
            set: |d, v| d.config.limits.approvals_pending_per_grant = v as usize,
        },
    },
    Flag {
        name: "approval-waiters",
        env: true,
        default: "16",
        help: "GET /approvals?wait=N long-polls held open at once; one more gets 429.",
        kind: Kind::Int {
            metavar: "N",
            min: 1,
            max: 1024,
            set: |d, v| d.config.limits.approval_waiters = v as usize,
        },
    },
    Flag {
        name: "max-mints",
        env: true,
        default: "8",
        help: "Mints (POST /attach with admin_credential) that may wait for their pods at once; one more is answered 429. Mints never hold the admin API's own threads.",
        kind: Kind::Int {
            metavar: "N",
            min: 1,
            max: 1024,
            set: |d, v| d.config.limits.max_mints = v as usize,
        },
    },
    millis!("backoff-base-ms", backoff_base, "1000", "First redial delay; doubles per failure."),
    millis!("backoff-cap-ms", backoff_cap, "30000", "Longest redial delay."),
    millis!("backoff-reset-ms", backoff_reset, "60000", "A connection attached this long resets the redial delay."),
    millis!("ping-interval-ms", ping_interval, "20000", "How often we ping an attached pod."),
    millis!("silence-limit-ms", silence_limit, "60000", "No frame from the pod for this long and the socket is dead (redial)."),
    millis!("write-stall-ms", write_stall, "30000", "A pod that does not take our pending output (at most 8 KiB) within this long is dropped (redial)."),
    millis!("connect-timeout-ms", connect_timeout, "10000", "TCP connect to the pod."),
    millis!("handshake-timeout-ms", handshake_timeout, "15000", "TLS and WebSocket upgrade with the pod, after connect."),
    millis!("mint-timeout-ms", mint_timeout, "15000", "Minting an attach secret at the pod."),
    millis!("admin-io-timeout-ms", admin_io_timeout, "10000", "Read/write timeout of every admin API connection."),
    millis!("throttle-window-ms", throttle_window, "60000", "Window in which failed authentications are counted."),
    millis!("throttle-lockout-ms", throttle_lockout, "60000", "How long a throttled client gets 429."),
    millis!("audit-fsync-interval-ms", audit_fsync_interval, "100", "Longest an audit record waits for its fsync."),
    millis!("ended-retention-ms", ended_retention, "600000", "How long ended grants stay listed."),
    millis!("upstream-timeout-ms", upstream_timeout, "30000", "One request to an upstream MCP server."),
    millis!("upstream-cache-ttl-ms", upstream_cache_ttl, "10000", "How long an upstream's tool list is reused."),
    millis!("display-probe-ttl-ms", display_probe_ttl, "2000", "How long probed display facts are reused."),
    millis!("sys-info-ttl-ms", sys_info_ttl, "1000", "How long sys_info reuses what it read from /proc (memory, uptime, load, tailnet addresses)."),
    millis!("display-helper-timeout-ms", display_helper_timeout, "10000", "Longest one display helper (grim, xdotool, wtype) may run."),
    millis!("a11y-call-timeout-ms", a11y_call_timeout, "2000", "Longest one accessibility-bus call may wait; an application that does not answer is left out of desktop_snapshot."),
    Flag {
        name: "containment",
        env: true,
        default: "auto",
        help: "What holds a grant's processes: auto (a cgroup per grant where one can be made, else a child subreaper) or subreaper (never cgroups).",
        kind: Kind::Text {
            metavar: "auto|subreaper",
            set: |d, v| {
                d.config.force_subreaper = match v.as_str() {
                    "auto" => false,
                    "subreaper" => true,
                    other => {
                        return Err(format!(
                            "--containment must be auto or subreaper, not {other:?}"
                        ))
                    }
                };
                Ok(())
            },
        },
    },
    Flag {
        name: "grant-memory-max",
        env: true,
        default: "",
        help: "Most memory one grant's processes may use together (default: half of this box's RAM); past it the kernel kills one and the call says so. POST /attach may ask for less.",
        kind: Kind::Int {
            metavar: "BYTES",
            min: 1 << 20,
            max: 1 << 50,
            set: |d, v| d.config.limits.grant_memory_max = v,
        },
    },
    Flag {
        name: "grant-pids-max",
        env: true,
        default: "1024",
        help: "Most processes (and threads) one grant may run at once; a fork past it fails. POST /attach may ask for less.",
        kind: Kind::Int {
            metavar: "N",
            min: 1,
            max: 4_194_304,
            set: |d, v| d.config.limits.grant_pids_max = v,
        },
    },
    Flag {
        name: "grant-cpu-weight",
        env: true,
        default: "50",
        help: "One grant's CPU weight (1-10000) against the daemon's own 100, so handnode keeps answering under a grant's load. POST /attach may ask for less.",
        kind: Kind::Int {
            metavar: "N",
            min: 1,
            max: 10_000,
            set: |d, v| d.config.limits.grant_cpu_weight = v,
        },
    },
    Flag {
        name: "job-output-bytes",
        env: true,
        default: "16777216",
        help: "Bytes of each job stream (stdout, stderr) kept on disk; past it the oldest bytes are dropped and offsets stay absolute.",
        kind: Kind::Int {
            metavar: "BYTES",
            min: 1,
            max: 1 << 30,
            set: |d, v| d.config.limits.job_output_bytes = v,
        },
    },
    Flag {
        name: "job-disk-bytes",
        env: true,
        default: "268435456",
        help: "Disk all job output files may use together; a running job reserves what its files hold plus 1 MiB per stream, and a job that cannot start within it or its grant's --job-disk-share is refused.",
        kind: Kind::Int {
            metavar: "BYTES",
            min: 2,
            max: 1 << 40,
            set: |d, v| d.config.limits.job_disk_bytes = v,
        },
    },
    Flag {
        name: "upload-bytes",
        env: true,
        default: "1073741824",
        help: "Bytes of unfinished file_put uploads (hidden part files) one grant may hold; a chunk past it is refused. Part files are removed when the grant ends.",
        kind: Kind::Int {
            metavar: "BYTES",
            min: 1,
            max: 1 << 40,
            set: |d, v| d.config.limits.upload_bytes = v,
        },
    },
    Flag {
        name: "job-disk-share",
        env: true,
        default: "",
        help: "Disk the job output of one grant (or of the owner's /mcp) may use, default a quarter of --job-disk-bytes: a running job reserves what its files hold plus 1 MiB per stream, and past its grant's share its output keeps only its newest bytes, so one grant never fills the disk for the others.",
        kind: Kind::Int {
            metavar: "BYTES",
            min: 2,
            max: 1 << 40,
            set: |d, v| d.config.limits.job_disk_share = Some(v),
        },
    },
    Flag {
        name: "jobs-per-grant",
        env: true,
        default: "16",
        help: "Running jobs per grant (and on the owner's /mcp); one more is refused.",
        kind: Kind::Int {
            metavar: "N",
            min: 1,
            max: 1024,
            set: |d, v| d.config.limits.jobs_per_grant = v as usize,
        },
    },
    Flag {
        name: "jobs-total",
        env: true,
        default: "64",
        help: "Running jobs on this box; one more is refused.",
        kind: Kind::Int {
            metavar: "N",
            min: 1,
            max: 4096,
            set: |d, v| d.config.limits.jobs_total = v as usize,
        },
    },
    Flag {
        name: "inline-wait-ms",
        env: true,
        default: "100000",
        help: "Under a grant, a bash call whose command still runs after this long continues as a job. At most 110000: the pod gives up on a call at 120 s.",
        kind: Kind::Int {
            metavar: "MS",
            min: 1,
            max: 110_000,
            set: |d, v| d.config.timing.inline_wait = Duration::from_millis(v),
        },
    },
    millis!("mcp-inline-wait-ms", mcp_inline_wait, "600000", "The same limit on the owner's /mcp."),
    millis!("job-retention-ms", job_retention, "600000", "How long a finished job's record and output are kept."),
    millis!("job-kill-grace-ms", job_kill_grace, "5000", "bash_cancel with TERM: SIGKILL follows this long after if the job's process group still lives."),
    millis!("browser-idle-ms", browser_idle, "600000", "A grant's browser without a call for this long is stopped; the next call starts a new one (and says the pages are gone)."),
    millis!("browser-start-timeout-ms", browser_start_timeout, "30000", "Longest a browser command may take to answer initialize."),
];

/// What `handnode doctor` was asked.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct DoctorArgs {
    pub json: bool,
    /// `--browser-command` (or its env var), split: the browser tier to test-start.
    pub browser_command: Option<Vec<String>>,
}

/// Flags of `doctor`.
pub(crate) const DOCTOR_FLAGS: &[Flag<DoctorArgs>] = &[
    Flag {
        name: "json",
        env: false,
        default: "",
        help: "Print the report as JSON.",
        kind: Kind::Switch(|d| d.json = true),
    },
    Flag {
        name: "browser-command",
        env: true,
        default: "",
        help: "The daemon's --browser-command: doctor checks that it and its chromium are there and test-starts it.",
        kind: Kind::Text {
            metavar: "COMMAND",
            set: |d, v| {
                d.browser_command = Some(crate::base::browser_argv::parse_command(&v)?);
                Ok(())
            },
        },
    },
];

impl Config {
    /// Production defaults; the dirs are filled in by `parse`.
    fn defaults() -> Self {
        Config {
            listen: DEFAULT_LISTEN,
            token: None,
            token_source: None,
            allow_logins: Vec::new(),
            allow_hosts: Vec::new(),
            insecure_local: false,
            state_dir: PathBuf::new(),
            config_dir: PathBuf::new(),
            persist: true,
            workers: DEFAULT_WORKERS,
            audit_args: false,
            ca_file: None,
            upstreams: Vec::new(),
            browser_command: None,
            browser_dir: None,
            browser_isolation: BrowserIsolation::Auto,
            apps: Vec::new(),
            display_backend: DisplayBackend::Auto,
            display_env: None,
            max_screenshot_edge: DEFAULT_MAX_SCREENSHOT_EDGE,
            notify: true,
            notify_program: None,
            sd_notify: true,
            local_socket: None,
            force_subreaper: false,
            timing: Timing::default(),
            limits: Limits::default(),
        }
    }
}

/// An absolute, non-empty env value (XDG says relative ones are ignored).
fn absolute_env(env: &HashMap<String, String>, var: &str) -> Option<PathBuf> {
    env.get(var).map(PathBuf::from).filter(|p| p.is_absolute())
}

/// `$XDG_STATE_HOME/handnode`, else `~/.local/state/handnode`.
pub fn default_state_dir(env: &HashMap<String, String>) -> Option<PathBuf> {
    absolute_env(env, "XDG_STATE_HOME")
        .or_else(|| absolute_env(env, "HOME").map(|h| h.join(".local/state")))
        .map(|d| d.join("handnode"))
}

/// Name of the admin API's Unix socket in `$XDG_RUNTIME_DIR` (the CLI's default way in).
pub const LOCAL_SOCKET_NAME: &str = "handnode.sock";

/// `$XDG_RUNTIME_DIR/handnode.sock`; none without a runtime dir (a shared `/tmp` is no
/// place for it).
pub fn default_local_socket(env: &HashMap<String, String>) -> Option<PathBuf> {
    absolute_env(env, "XDG_RUNTIME_DIR").map(|d| d.join(LOCAL_SOCKET_NAME))
}

/// `$XDG_CONFIG_HOME/handnode`, else `~/.config/handnode`.
pub fn default_config_dir(env: &HashMap<String, String>) -> Option<PathBuf> {
    absolute_env(env, "XDG_CONFIG_HOME")
        .or_else(|| absolute_env(env, "HOME").map(|h| h.join(".config")))
        .map(|d| d.join("handnode"))
}

pub(crate) fn no_positional(sub: &str, positional: &[String]) -> Result<(), Error> {
    match positional.first() {
        Some(extra) => Err(Error::Config(format!(
            "unexpected argument '{extra}' for {sub} (see handnode {sub} --help)"
        ))),
        None => Ok(()),
    }
}

/// `handnode --help`: the subcommands and every `serve` flag.
pub(crate) fn serve_help() -> String {
    let mut out = format!(
        "handnode {} — lend this box's tools to one coding-agent session, time-boxed and revocable\n\n\
Usage:\n  \
  handnode [serve] [FLAGS]          run the daemon (the default)\n  \
  handnode doctor [--json]          what works on this box and how to fix the rest\n  \
  handnode tools [--profile P]      the tools this binary serves (--json for scripts)\n  \
  handnode grant --runtime URL --session S (--secret-file F | --admin-credential-file F) [...]\n  \
  handnode grants [--json]          list a running daemon's grants\n  \
  handnode revoke ID | --all        end a grant, or all of them\n  \
  handnode approvals [--watch]      calls waiting for your approval\n  \
  handnode approve ID [--remember]  let a waiting call run (--remember: and later ones of its tool)\n  \
  handnode deny ID [--reason TEXT]  refuse a waiting call; it does not run\n  \
  handnode help SUBCOMMAND | --help | --version\n\n\
Every flag can also be set by the env var shown (a flag beats its env var; repeatable flags\n\
take a comma-separated list in env). The admin token is never a flag: it is read from\n\
--token-file, env {TOKEN_ENV}, $CREDENTIALS_DIRECTORY/{CREDENTIAL_NAME} or <config dir>/{TOKEN_FILE_NAME},\n\
in that order; with no authentication configured at all, the first start writes a new one\n\
to <config dir>/{TOKEN_FILE_NAME}.\n\nFlags of serve:\n",
        env!("CARGO_PKG_VERSION")
    );
    render_flags(&mut out, &[SERVE_FLAGS]);
    out
}

/// `--apps` resolved in the daemon's environment (its XDG data dirs and `PATH`): every
/// entry found and vetted, or exit 2 naming the first refused entry and why.
fn resolve_apps(
    ids: &[String],
    env: &HashMap<String, String>,
) -> Result<Vec<crate::base::desktop_entry::DesktopEntry>, Error> {
    use crate::base::desktop_entry::{self as de, DataDirs};
    if ids.is_empty() {
        return Ok(Vec::new());
    }
    let dirs = DataDirs::from_env(|k| env.get(k).cloned());
    let path = env
        .get("PATH")
        .map_or("/usr/local/bin:/usr/bin:/bin", String::as_str);
    de::resolve_apps(ids, &dirs, path).map_err(|why| Error::Config(format!("--apps: {why}")))
}

/// `serve`'s flags and env into a validated [`Config`]. Also finds the admin token (see
/// [`resolve_token`]); when no authentication is configured at all it first generates a
/// token file at `<config dir>/token` (0600, dir 0700) and logs its path, never the token.
pub(crate) fn parse_serve(args: &[String], env: &HashMap<String, String>) -> Result<Config, Error> {
    let mut draft = ServeDraft {
        config: Config::defaults(),
        token_file: None,
        state_dir: None,
        config_dir: None,
        local_socket: None,
        apps: Vec::new(),
    };
    let positional = apply_flags(&[SERVE_FLAGS], args, env, &mut draft)?;
    no_positional("serve", &positional)?;
    draft.config.apps = resolve_apps(&draft.apps, env)?;

    let mut config = draft.config;
    config.state_dir = draft
        .state_dir
        .or_else(|| default_state_dir(env))
        .ok_or_else(|| {
            Error::Config(
                "cannot tell where to keep state: pass --state-dir (or set HOME or XDG_STATE_HOME)"
                    .into(),
            )
        })?;
    config.config_dir = draft
        .config_dir
        .or_else(|| default_config_dir(env))
        .ok_or_else(|| {
            Error::Config(
                "cannot tell where the config dir is: pass --config-dir (or set HOME or XDG_CONFIG_HOME)"
                    .into(),
            )
        })?;
    config.local_socket = match draft.local_socket {
        Some(chosen) => chosen,
        None => default_local_socket(env),
    };
    let timing = &config.timing;
    if timing.backoff_cap < timing.backoff_base {
        return Err(Error::Config(
            "--backoff-cap-ms must be at least --backoff-base-ms".into(),
        ));
    }
    if timing.ping_interval >= timing.silence_limit {
        return Err(Error::Config(
            "--ping-interval-ms must be less than --silence-limit-ms, or a quiet pod looks dead"
                .into(),
        ));
    }

    let limits = &config.limits;
    if limits.approvals_pending_per_grant >= limits.approvals_pending {
        return Err(Error::Config(
            "--max-pending-per-grant must be less than --max-pending-approvals, or one grant could hold every approval slot of the box"
                .into(),
        ));
    }
    if limits.job_output_bytes.saturating_mul(2) > limits.job_disk_bytes {
        return Err(Error::Config(
            "--job-disk-bytes must hold at least one running job: two windows of --job-output-bytes"
                .into(),
        ));
    }
    let one_job = limits.job_start_bytes();
    if limits.job_disk_share() < one_job {
        return Err(Error::Config(format!(
            "--job-disk-share must hold at least one starting job ({one_job} bytes: 1 MiB per stream, or --job-output-bytes if less)"
        )));
    }
    if limits.job_disk_share() > limits.job_disk_bytes {
        return Err(Error::Config(
            "--job-disk-share must be at most --job-disk-bytes: it is one grant's part of it"
                .into(),
        ));
    }

    let mut token = resolve_token(draft.token_file.as_deref(), env, Some(&config.config_dir))?;
    if token.is_none() && config.allow_logins.is_empty() && !config.insecure_local {
        let path = config.config_dir.join(TOKEN_FILE_NAME);
        let secret = create_token_file(&path)?;
        log::info!(
            "no authentication was configured, so a new admin token was written to {} (give that file to `handnode grant` or your client; the token is never logged)",
            path.display()
        );
        token = Some(ResolvedToken {
            secret,
            source: path.display().to_string(),
        });
    }
    if let Some(t) = token {
        config.token = Some(t.secret);
        config.token_source = Some(t.source);
    }
    config.policy().validate().map_err(Error::Config)?;
    Ok(config)
}

/// The admin token and where it came from (the source is logged, the value never).
#[derive(Clone, Debug)]
pub struct ResolvedToken {
    pub secret: Secret,
    pub source: String,
}

/// Find the admin token the way both the daemon and the operator CLI do: `token_file`
/// (`--token-file`), env `HANDNODE_TOKEN`, `$CREDENTIALS_DIRECTORY/handnode-token`, then
/// `<config_dir>/token`; the first one present wins. A named file that cannot be read, or
/// any token that is empty after trimming, is a configuration error rather than a reason to
/// look further.
pub fn resolve_token(
    token_file: Option<&Path>,
    env: &HashMap<String, String>,
    config_dir: Option<&Path>,
) -> Result<Option<ResolvedToken>, Error> {
    let from_file = |path: &Path| {
        read_secret_file(path)
            .map(|secret| {
                Some(ResolvedToken {
                    secret,
                    source: path.display().to_string(),
                })
            })
            .map_err(|e| Error::Config(format!("token file {e}")))
    };
    if let Some(path) = token_file {
        return from_file(path);
    }
    if let Some(value) = env
        .get(TOKEN_ENV)
        .map(|v| v.trim())
        .filter(|v| !v.is_empty())
    {
        check_secret_chars(value).map_err(|e| Error::Config(format!("{TOKEN_ENV} {e}")))?;
        return Ok(Some(ResolvedToken {
            secret: Secret::new(value),
            source: format!("env {TOKEN_ENV}"),
        }));
    }
    let credential = env
        .get("CREDENTIALS_DIRECTORY")
        .filter(|d| !d.is_empty())
        .map(|d| Path::new(d).join(CREDENTIAL_NAME));
    let default = config_dir.map(|d| d.join(TOKEN_FILE_NAME));
    for path in credential.into_iter().chain(default) {
        if path.exists() {
            return from_file(&path);
        }
    }
    Ok(None)
}

/// A secret must fit an `Authorization: Bearer` header unchanged.
fn check_secret_chars(value: &str) -> Result<(), String> {
    if value.chars().all(|c| c.is_ascii_graphic()) {
        Ok(())
    } else {
        Err("must be printable ASCII without spaces".into())
    }
}

/// Read a file (or pipe) holding one secret (admin token, attach secret, pod credential): at most
/// [`SECRET_FILE_MAX_BYTES`], surrounding whitespace trimmed, not empty. The error starts
/// with the path. A file others can read is used but logged, since it should be 0600.
pub fn read_secret_file(path: &Path) -> Result<Secret, String> {
    let shown = path.display();
    let file = std::fs::File::open(path).map_err(|e| format!("{shown}: cannot read it: {e}"))?;
    let meta = file
        .metadata()
        .map_err(|e| format!("{shown}: cannot read it: {e}"))?;
    // Not only regular files: `--secret-file /dev/stdin` lets a password manager pipe one in.
    if meta.is_dir() {
        return Err(format!("{shown}: is a directory, not a file"));
    }
    let mut bytes = Vec::new();
    file.take(SECRET_FILE_MAX_BYTES + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| format!("{shown}: cannot read it: {e}"))?;
    if bytes.len() as u64 > SECRET_FILE_MAX_BYTES {
        return Err(format!(
            "{shown}: is larger than {SECRET_FILE_MAX_BYTES} bytes; it should hold only the secret"
        ));
    }
    let text = String::from_utf8(bytes).map_err(|_| format!("{shown}: is not UTF-8 text"))?;
    let value = text.trim();
    if value.is_empty() {
        return Err(format!(
            "{shown}: is empty; put the secret in it (or remove the file)"
        ));
    }
    check_secret_chars(value).map_err(|e| format!("{shown}: its content {e}"))?;
    let mode = meta.permissions().mode() & 0o777;
    if meta.is_file() && mode & 0o077 != 0 {
        log::warn!(
            "{shown} has mode {mode:03o}: others on this box can read it; run chmod 600 on it"
        );
    }
    Ok(Secret::new(value))
}

/// Write a fresh random 256-bit token to `path` (0600; missing parent dirs created 0700).
/// Never overwrites: an existing file would have been found by [`resolve_token`].
pub fn create_token_file(path: &Path) -> Result<Secret, Error> {
    let fail = |what: &str, e: std::io::Error| {
        Error::Config(format!(
            "no authentication is configured and {what} {}: {e}; pass --token-file or --config-dir",
            path.display()
        ))
    };
    if let Some(dir) = path.parent() {
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(dir)
            .map_err(|e| fail("cannot create the directory of", e))?;
    }
    let secret = Secret::random().map_err(|e| fail("no randomness to generate", e))?;
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)
        .map_err(|e| fail("cannot create the token file", e))?;
    file.write_all(format!("{}\n", secret.expose()).as_bytes())
        .and_then(|_| file.sync_all())
        .map_err(|e| fail("cannot write the token file", e))?;
    Ok(secret)
}

/// `http://user:pass@host/…` → `http://***@host/…`, for logs.
fn mask_url(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_string();
    };
    let authority_end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    match rest[..authority_end].rfind('@') {
        Some(at) => format!("{scheme}://***{}", &rest[at..]),
        None => url.to_string(),
    }
}

fn on_off(b: bool) -> &'static str {
    if b {
        "on"
    } else {
        "off"
    }
}

/// What an operator should hear about at start. `is_root` is passed in so tests need not
/// run as root (or not).
pub fn warnings(config: &Config, is_root: bool) -> Vec<String> {
    let mut out = Vec::new();
    if !config.allow_logins.is_empty() && config.allow_hosts.is_empty() {
        out.push(
            "--allow-login is set without any --allow-host: behind `tailscale serve` requests arrive with Host: <box>.<tailnet>.ts.net and will get 403; add --allow-host <that name>"
                .to_string(),
        );
    }
    if !config.allow_logins.is_empty() && config.token.is_none() {
        out.push(
            "--allow-login is set without an admin token: `tailscale serve` connects from loopback, so a local process sending the same Tailscale-User-Login header is indistinguishable from the tailnet and gets in as that login; configure a token too (--token-file or <config dir>/token) so every request needs the login AND the bearer"
                .to_string(),
        );
    }
    if !config.allow_logins.is_empty() && !config.listen.ip().is_loopback() {
        out.push(format!(
            "--allow-login trusts the Tailscale-User-Login header, but --listen {} is not loopback: anyone who can reach that address can claim a login; listen on loopback behind `tailscale serve`",
            config.listen
        ));
    }
    if config.insecure_local {
        out.push(
            "--insecure-local is on: every local user and process can use the admin API without credentials"
                .to_string(),
        );
    }
    if config.audit_args {
        out.push("--audit-args is on: audit.jsonl records tool arguments, typed text and passwords included".to_string());
    }
    if is_root {
        out.push(
            "running as root: the bash tool is a root shell for whoever holds a grant; run handnode as an ordinary user"
                .to_string(),
        );
    }
    out
}

/// Log the effective settings once at start (secrets masked), then any warnings.
pub fn log_effective(config: &Config) {
    let list = |v: &[String]| {
        if v.is_empty() {
            "-".to_string()
        } else {
            v.join(",")
        }
    };
    let token = match (&config.token, &config.token_source) {
        (Some(_), Some(source)) => format!("token from {source}"),
        (Some(_), None) => "token set".to_string(),
        (None, _) => "no token".to_string(),
    };
    log::info!(
        "handnode {} starting (admin API to listen on {}); auth: {token}, allow-login {}, insecure-local {}; allow-host {}",
        env!("CARGO_PKG_VERSION"),
        config.listen,
        list(&config.allow_logins),
        on_off(config.insecure_local),
        list(&config.allow_hosts),
    );
    let upstreams: Vec<String> = config
        .upstreams
        .iter()
        .map(|(name, url)| format!("{name}={}", mask_url(url)))
        .collect();
    log::info!(
        "state dir {} (persist {}), config dir {}; workers {}, audit-args {}, ca-file {}, upstream {}, display {}, max screenshot edge {} px, notify {}, sd-notify {}",
        config.state_dir.display(),
        on_off(config.persist),
        config.config_dir.display(),
        config.workers,
        on_off(config.audit_args),
        config.ca_file.as_ref().map_or("-".to_string(), |p| p.display().to_string()),
        list(&upstreams),
        config.display_backend.as_str(),
        config.max_screenshot_edge,
        on_off(config.notify),
        on_off(config.sd_notify),
    );
    match &config.browser_command {
        Some(argv) => log::info!(
            "browser tier: {} browser(s) at most, each running {:?}",
            config.limits.max_browsers,
            argv
        ),
        None => log::info!("browser tier: off (no --browser-command)"),
    }
    log::info!("timing: {:?}; limits: {:?}", config.timing, config.limits);
    let is_root = rustix::process::geteuid().is_root();
    for warning in warnings(config, is_root) {
        log::warn!("{warning}");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::base::testutil::TempDir;

    fn strings(args: &[&str]) -> Vec<String> {
        args.iter().map(|s| s.to_string()).collect()
    }

    /// An environment with HOME in `tmp` and whatever else the test adds.
    fn env_in(tmp: &TempDir, extra: &[(&str, &str)]) -> HashMap<String, String> {
        let mut env: HashMap<String, String> = extra
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        env.entry("HOME".into())
            .or_insert_with(|| tmp.0.display().to_string());
        env
    }

    /// `serve`'s arguments, with or without the subcommand word that `cli::parse`
    /// dispatches on.
    fn serve(args: &[&str], env: &HashMap<String, String>) -> Result<Config, String> {
        let args = args.strip_prefix(&["serve"]).unwrap_or(args);
        match parse_serve(&strings(args), env) {
            Ok(config) => Ok(config),
            Err(Error::Config(msg)) => Err(msg),
            Err(other) => panic!("expected a config error, got {other:?}"),
        }
    }

    fn mode(path: &Path) -> u32 {
        std::fs::metadata(path).unwrap().permissions().mode() & 0o777
    }

    #[test]
    fn the_approval_timeout_is_at_most_100_s() {
        let tmp = TempDir::new("config");
        let env = env_in(&tmp, &[(TOKEN_ENV, "tok")]);
        let c = serve(&["--approval-timeout-ms", "100000"], &env).unwrap();
        assert_eq!(c.timing.approval_timeout, MAX_APPROVAL_TIMEOUT);
        assert_eq!(Timing::default().approval_timeout, Duration::from_secs(60));
        let err = serve(&["--approval-timeout-ms", "100001"], &env).unwrap_err();
        assert!(
            err.contains("--approval-timeout-ms") && err.contains("1...100000"),
            "{err}"
        );
        let c = serve(
            &[
                "--approval-waiters",
                "3",
                "--max-pending-approvals",
                "7",
                "--max-pending-per-grant",
                "6",
            ],
            &env,
        )
        .unwrap();
        assert_eq!(
            (
                c.limits.approval_waiters,
                c.limits.approvals_pending,
                c.limits.approvals_pending_per_grant
            ),
            (3, 7, 6)
        );
        assert_eq!(Limits::default().approvals_pending_per_grant, 16);
        // --job-disk-share: a quarter by default; at most the box's; at least one start.
        assert_eq!(c.limits.job_disk_share(), 64 << 20);
        let small = |share: &str| {
            serve(
                &[
                    "--job-output-bytes",
                    "1000",
                    "--job-disk-bytes",
                    "1000000",
                    "--job-disk-share",
                    share,
                ],
                &env,
            )
        };
        assert_eq!(small("1000000").unwrap().limits.job_disk_share(), 1_000_000);
        let err = small("1000001").unwrap_err();
        assert!(err.contains("--job-disk-share must be at most"), "{err}");
        let one_job = Limits::default().job_start_bytes();
        assert_eq!(one_job, 2 * (32 + (1 << 20)));
        let at = one_job.to_string();
        serve(&["--job-disk-share", &at], &env).unwrap();
        let below = (one_job - 1).to_string();
        let err = serve(&["--job-disk-share", &below], &env).unwrap_err();
        assert!(err.contains("at least one starting job"), "{err}");
        // A grant's bound that reaches the box's would let one grant hold every slot.
        let err = serve(
            &[
                "--max-pending-approvals",
                "7",
                "--max-pending-per-grant",
                "7",
            ],
            &env,
        )
        .unwrap_err();
        assert!(err.contains("--max-pending-per-grant"), "{err}");
    }

    #[test]
    fn defaults_follow_the_contract() {
        let tmp = TempDir::new("config");
        let env = env_in(&tmp, &[(TOKEN_ENV, "tok")]);
        let config = serve(&[], &env).unwrap();
        assert_eq!(config.listen.to_string(), "127.0.0.1:8795");
        assert_eq!(config.state_dir, tmp.path(".local/state/handnode"));
        assert_eq!(config.config_dir, tmp.path(".config/handnode"));
        assert_eq!(config.workers, 4);
        assert!(config.persist && config.notify && config.sd_notify);
        assert!(!config.audit_args && !config.insecure_local);
        assert_eq!(config.display_backend, DisplayBackend::Auto);
        assert_eq!(config.max_screenshot_edge, 1920);
        assert_eq!(config.timing, Timing::default());
        assert_eq!(config.limits, Limits::default());
        assert_eq!(config.token_source.as_deref(), Some("env HANDNODE_TOKEN"));

        let xdg = env_in(
            &tmp,
            &[
                (TOKEN_ENV, "tok"),
                ("XDG_STATE_HOME", "/xdg/state"),
                ("XDG_CONFIG_HOME", "/xdg/config"),
            ],
        );
        let config = serve(&[], &xdg).unwrap();
        assert_eq!(config.state_dir, Path::new("/xdg/state/handnode"));
        assert_eq!(config.config_dir, Path::new("/xdg/config/handnode"));
        // A relative XDG value is ignored, as the XDG spec says.
        let relative = env_in(&tmp, &[(TOKEN_ENV, "tok"), ("XDG_STATE_HOME", "rel")]);
        assert_eq!(
            serve(&[], &relative).unwrap().state_dir,
            tmp.path(".local/state/handnode")
        );
    }

    #[test]
    fn every_flag_parses() {
        let tmp = TempDir::new("config");
        let ca = tmp.write("ca.pem", "pem");
        let ca = ca.to_str().unwrap();
        let env = env_in(&tmp, &[(TOKEN_ENV, "tok")]);
        type Check = fn(&Config);
        let cases: Vec<(Vec<&str>, Check)> = vec![
            (vec!["--listen", "0.0.0.0:9000"], |c| {
                assert_eq!(c.listen.to_string(), "0.0.0.0:9000")
            }),
            (vec!["--listen=[::1]:9"], |c| {
                assert_eq!(c.listen.to_string(), "[::1]:9")
            }),
            (vec!["--listen", "localhost:1234"], |c| {
                assert_eq!(c.listen.to_string(), "127.0.0.1:1234")
            }),
            (
                vec!["--allow-login", "You@Example.com", "--allow-login=b@c"],
                |c| assert_eq!(c.allow_logins, ["you@example.com", "b@c"]),
            ),
            (vec!["--allow-host", "Box.Tail.ts.net"], |c| {
                assert_eq!(c.allow_hosts, ["box.tail.ts.net"])
            }),
            (vec!["--insecure-local"], |c| assert!(c.insecure_local)),
            (vec!["--state-dir", "/s", "--config-dir", "/c"], |c| {
                assert_eq!(
                    (c.state_dir.as_path(), c.config_dir.as_path()),
                    (Path::new("/s"), Path::new("/c"))
                )
            }),
            (vec!["--no-persist"], |c| assert!(!c.persist)),
            (vec!["--workers", "64"], |c| assert_eq!(c.workers, 64)),
            (vec!["--audit-args"], |c| assert!(c.audit_args)),
            (
                vec![
                    "--upstream",
                    "browser=http://127.0.0.1:8931/mcp",
                    "--upstream",
                    "b2=https://x/mcp",
                ],
                |c| {
                    assert_eq!(
                        c.upstreams,
                        [
                            ("browser".into(), "http://127.0.0.1:8931/mcp".into()),
                            ("b2".into(), "https://x/mcp".into())
                        ]
                    )
                },
            ),
            (vec!["--display-backend", "Wayland"], |c| {
                assert_eq!(c.display_backend, DisplayBackend::Wayland)
            }),
            (vec!["--display-backend=none"], |c| {
                assert_eq!(c.display_backend, DisplayBackend::None)
            }),
            (vec!["--max-screenshot-edge", "800"], |c| {
                assert_eq!(c.max_screenshot_edge, 800)
            }),
            (vec!["--no-notify", "--no-sd-notify"], |c| {
                assert!(!c.notify && !c.sd_notify)
            }),
            (
                vec!["--throttle-failures", "3", "--throttle-table", "5"],
                |c| {
                    assert_eq!(
                        (c.limits.throttle_failures, c.limits.throttle_table),
                        (3, 5)
                    )
                },
            ),
            (vec!["--max-in-flight", "2", "--job-queue", "7"], |c| {
                assert_eq!((c.limits.max_in_flight, c.limits.job_queue), (2, 7))
            }),
            (
                vec!["--write-buffer-bytes", "65536", "--write-stall-ms", "250"],
                |c| {
                    assert_eq!(c.limits.write_buffer_bytes, 65_536);
                    assert_eq!(c.timing.write_stall, Duration::from_millis(250));
                },
            ),
            (
                vec!["--backoff-base-ms", "5", "--backoff-cap-ms", "40"],
                |c| {
                    assert_eq!(c.timing.backoff_base, Duration::from_millis(5));
                    assert_eq!(c.timing.backoff_cap, Duration::from_millis(40));
                },
            ),
            (
                vec!["--silence-limit-ms", "300", "--ping-interval-ms", "100"],
                |c| {
                    assert_eq!(c.timing.silence_limit, Duration::from_millis(300));
                    assert_eq!(c.timing.ping_interval, Duration::from_millis(100));
                },
            ),
            (vec!["serve", "--throttle-lockout-ms", "9"], |c| {
                assert_eq!(c.timing.throttle_lockout, Duration::from_millis(9))
            }),
        ];
        for (args, check) in cases {
            let config = serve(&args, &env).unwrap_or_else(|e| panic!("{args:?}: {e}"));
            check(&config);
        }
        let config = serve(&["--ca-file", ca], &env).unwrap();
        assert_eq!(config.ca_file.as_deref(), Some(Path::new(ca)));
    }

    #[test]
    fn env_sets_flags_and_flags_beat_env() {
        let tmp = TempDir::new("config");
        let env = env_in(
            &tmp,
            &[
                (TOKEN_ENV, "tok"),
                ("HANDNODE_WORKERS", "8"),
                ("HANDNODE_ALLOW_LOGIN", " a@b , C@D,, "),
                ("HANDNODE_ALLOW_HOST", "h.ts.net"),
                ("HANDNODE_NO_PERSIST", "yes"),
                ("HANDNODE_INSECURE_LOCAL", "off"),
                ("HANDNODE_SILENCE_LIMIT_MS", "50000"),
                ("HANDNODE_AUDIT_ARGS", ""),
                ("HANDNODE_LISTEN", "127.0.0.1:1"),
            ],
        );
        let config = serve(&[], &env).unwrap();
        assert_eq!(config.workers, 8);
        assert_eq!(config.allow_logins, ["a@b", "c@d"]);
        assert_eq!(config.allow_hosts, ["h.ts.net"]);
        assert!(!config.persist);
        assert!(!config.insecure_local, "off means off");
        assert!(!config.audit_args, "empty means unset");
        assert_eq!(config.timing.silence_limit, Duration::from_secs(50));
        assert_eq!(config.listen.to_string(), "127.0.0.1:1");

        let config = serve(
            &[
                "--workers",
                "2",
                "--allow-login",
                "x@y",
                "--listen",
                "127.0.0.1:2",
            ],
            &env,
        )
        .unwrap();
        assert_eq!(config.workers, 2);
        // A repeatable flag on the command line replaces the env list entirely.
        assert_eq!(config.allow_logins, ["x@y"]);
        assert_eq!(config.listen.to_string(), "127.0.0.1:2");
        assert_eq!(config.allow_hosts, ["h.ts.net"], "untouched by flags");
    }

    /// Args, extra env, a part of the expected message.
    type ErrorCase<'a> = (Vec<&'a str>, Vec<(&'a str, &'a str)>, &'a str);

    #[test]
    fn errors_say_what_to_fix() {
        let tmp = TempDir::new("config");
        let big = tmp.write("big", &"x".repeat(SECRET_FILE_MAX_BYTES as usize + 1));
        let empty = tmp.write("empty", " \n\t");
        let spaced = tmp.write("spaced", "two words");
        let (big, empty, spaced) = (
            big.to_str().unwrap().to_string(),
            empty.to_str().unwrap().to_string(),
            spaced.to_str().unwrap().to_string(),
        );
        let dir = tmp.0.display().to_string();
        let env = env_in(&tmp, &[(TOKEN_ENV, "tok")]);
        let cases: Vec<ErrorCase> = vec![
            (vec!["--bogus"], vec![], "unknown flag --bogus"),
            (vec!["--bogus=1"], vec![], "unknown flag --bogus"),
            (vec!["-x"], vec![], "unknown flag -x"),
            (vec!["extra"], vec![], "unexpected argument 'extra'"),
            (
                vec!["serve", "extra"],
                vec![],
                "unexpected argument 'extra'",
            ),
            (vec!["--listen"], vec![], "--listen needs a value"),
            (
                vec!["--listen", "nowhere"],
                vec![],
                "--listen: expected IP:PORT",
            ),
            (
                vec!["--listen", "1", "--listen", "2"],
                vec![],
                "--listen given more than once",
            ),
            (
                vec!["--no-persist=true"],
                vec![],
                "--no-persist is a switch",
            ),
            (
                vec!["--workers", "many"],
                vec![],
                "--workers: expected a whole number in 1...64, got 'many'",
            ),
            (
                vec!["--workers", "-1"],
                vec![],
                "--workers: expected a whole number",
            ),
            (
                vec!["--display-backend", "mir"],
                vec![],
                "expected one of auto, x11, wayland, none",
            ),
            (vec!["--upstream", "browser"], vec![], "expected NAME=URL"),
            (
                vec!["--browser-command", "node 'cli.js"],
                vec![],
                "--browser-command has an unclosed ' quote",
            ),
            (
                vec![],
                vec![(
                    "HANDNODE_BROWSER_COMMAND",
                    "node cli.js --user-data-dir /home/me",
                )],
                "--browser-command must not pass --user-data-dir",
            ),
            (
                vec!["--browser-command", "node cli.js --config /etc/pw.json"],
                vec![],
                "--browser-command must not pass --config",
            ),
            (
                vec!["--browser-command", "node cli.js --config=/etc/pw.json"],
                vec![],
                "--browser-command must not pass --config",
            ),
            (
                vec!["--browser-isolation", "firejail"],
                vec![],
                "--browser-isolation must be auto, bwrap or none",
            ),
            (
                vec!["--max-browsers", "0"],
                vec![],
                "--max-browsers: expected a whole number in 1...64",
            ),
            (
                vec!["--upstream", "b=ftp://x"],
                vec![],
                "must be an http:// or https:// URL",
            ),
            (
                vec!["--upstream", "a b=http://x"],
                vec![],
                "upstream name must match",
            ),
            (
                vec!["--upstream", "b=http://x", "--upstream", "b=http://y"],
                vec![],
                "upstream 'b' given twice",
            ),
            (
                vec!["--allow-login", "a b"],
                vec![],
                "--allow-login: expected a tailnet login",
            ),
            (
                vec!["--allow-host", "https://h/"],
                vec![],
                "--allow-host: expected a host name",
            ),
            (
                vec!["--ca-file", "/nonexistent/ca.pem"],
                vec![],
                "--ca-file: cannot read /nonexistent/ca.pem",
            ),
            (vec!["--state-dir="], vec![], "--state-dir: expected a path"),
            (
                vec![],
                vec![("HANDNODE_WORKERS", "65")],
                "HANDNODE_WORKERS: expected a whole number in 1...64, got '65'",
            ),
            (
                vec![],
                vec![("HANDNODE_NO_PERSIST", "maybe")],
                "HANDNODE_NO_PERSIST: expected 1/0",
            ),
            (
                vec!["--backoff-base-ms", "10", "--backoff-cap-ms", "9"],
                vec![],
                "--backoff-cap-ms must be at least --backoff-base-ms",
            ),
            (
                vec!["--ping-interval-ms", "60000"],
                vec![],
                "--ping-interval-ms must be less than --silence-limit-ms",
            ),
            (
                vec!["--job-output-bytes", "1000", "--job-disk-bytes", "1999"],
                vec![],
                "--job-disk-bytes must hold at least one running job",
            ),
            (
                vec!["--inline-wait-ms", "110001"],
                vec![],
                "--inline-wait-ms: expected a whole number in 1...110000",
            ),
            (
                vec!["--token-file", "/nonexistent/token"],
                vec![],
                "token file /nonexistent/token: cannot read it",
            ),
            (
                vec!["--token-file", &big],
                vec![],
                "is larger than 16384 bytes",
            ),
            (vec!["--token-file", &empty], vec![], "is empty"),
            (vec!["--token-file", &dir], vec![], "is a directory"),
            (
                vec!["--token-file", &spaced],
                vec![],
                "printable ASCII without spaces",
            ),
            (
                vec![],
                vec![(TOKEN_ENV, "a b")],
                "HANDNODE_TOKEN must be printable ASCII",
            ),
            (
                vec![],
                vec![("HOME", ""), ("XDG_CONFIG_HOME", "/c")],
                "pass --state-dir",
            ),
            (
                vec!["--state-dir", "/s"],
                vec![("HOME", "")],
                "pass --config-dir",
            ),
        ];
        for (args, extra, want) in cases {
            let mut env = env.clone();
            env.extend(extra.iter().map(|(k, v)| (k.to_string(), v.to_string())));
            match serve(&args, &env) {
                Err(msg) => assert!(msg.contains(want), "{args:?}: {msg:?} lacks {want:?}"),
                Ok(_) => panic!("{args:?} {extra:?} was accepted"),
            }
        }
    }

    #[test]
    fn every_number_flag_refuses_one_past_its_bounds() {
        let tmp = TempDir::new("config");
        let env = env_in(&tmp, &[(TOKEN_ENV, "tok")]);
        let mut checked = 0;
        for flag in SERVE_FLAGS {
            let Kind::Int { min, max, .. } = flag.kind else {
                continue;
            };
            let over = format!("--{}={}", flag.name, max + 1);
            let err = serve(&[&over], &env).unwrap_err();
            assert!(err.starts_with(&format!("--{}:", flag.name)), "{err}");
            if min > 0 {
                let under = format!("--{}={}", flag.name, min - 1);
                assert!(serve(&[&under], &env).is_err(), "{under}");
            }
            checked += 1;
        }
        assert!(checked >= 20, "only {checked} number flags");
    }

    #[test]
    fn documented_defaults_are_the_real_defaults() {
        let tmp = TempDir::new("config");
        let env = env_in(&tmp, &[(TOKEN_ENV, "tok")]);
        let baseline = format!("{:?}", serve(&[], &env).unwrap());
        for flag in SERVE_FLAGS {
            if matches!(flag.kind, Kind::Switch(_)) || flag.default.is_empty() {
                continue;
            }
            if flag.default.starts_with('$') {
                continue; // the dirs: described, not literal
            }
            let arg = format!("--{}={}", flag.name, flag.default);
            assert_eq!(
                format!("{:?}", serve(&[&arg], &env).unwrap()),
                baseline,
                "{arg}"
            );
        }
    }

    #[test]
    fn token_sources_are_tried_in_order() {
        let tmp = TempDir::new("config");
        let flag_file = tmp.write("flag-token", "  from-flag\n");
        let creds = tmp.path("creds");
        let config_dir = tmp.path("config");
        tmp.write("creds/handnode-token", "from-credentials\n");
        tmp.write("config/token", "from-default\n");
        let mut env: HashMap<String, String> = [
            (TOKEN_ENV.to_string(), " from-env ".to_string()),
            (
                "CREDENTIALS_DIRECTORY".to_string(),
                creds.display().to_string(),
            ),
        ]
        .into();
        let resolve = |file: Option<&Path>, env: &HashMap<String, String>| {
            resolve_token(file, env, Some(&config_dir))
                .unwrap()
                .map(|t| (t.secret.expose().to_string(), t.source))
        };
        let got = resolve(Some(&flag_file), &env).unwrap();
        assert_eq!(got, ("from-flag".into(), flag_file.display().to_string()));
        assert_eq!(
            resolve(None, &env).unwrap(),
            ("from-env".into(), "env HANDNODE_TOKEN".into())
        );
        env.remove(TOKEN_ENV);
        assert_eq!(resolve(None, &env).unwrap().0, "from-credentials");
        std::fs::remove_file(creds.join(CREDENTIAL_NAME)).unwrap();
        assert_eq!(resolve(None, &env).unwrap().0, "from-default");
        std::fs::remove_file(config_dir.join(TOKEN_FILE_NAME)).unwrap();
        assert_eq!(resolve(None, &env), None);
        // A named file that is missing is an error, never a reason to look further.
        assert!(resolve_token(Some(&tmp.path("missing")), &env, Some(&config_dir)).is_err());
    }

    #[test]
    fn first_start_without_auth_generates_a_private_token_file() {
        let tmp = TempDir::new("config");
        let env = env_in(&tmp, &[]);
        let config = serve(&[], &env).unwrap();
        let path = tmp.path(".config/handnode/token");
        assert_eq!(config.token_source, Some(path.display().to_string()));
        assert_eq!(mode(&path), 0o600);
        assert_eq!(mode(path.parent().unwrap()), 0o700);
        let written = std::fs::read_to_string(&path).unwrap();
        let token = config.token.unwrap();
        assert_eq!(written.trim(), token.expose());
        assert_eq!(token.expose().len(), 64, "256 bits, hex");
        // The second start finds the same token instead of making another.
        let again = serve(&[], &env).unwrap();
        assert_eq!(again.token.unwrap(), token);
    }

    #[test]
    fn configured_auth_generates_nothing() {
        let tmp = TempDir::new("config");
        let env = env_in(&tmp, &[]);
        let config = serve(&["--allow-login", "a@b"], &env).unwrap();
        assert!(config.token.is_none());
        let config = serve(&["--insecure-local"], &env).unwrap();
        assert!(config.token.is_none());
        assert!(!tmp.path(".config/handnode/token").exists());
    }

    #[test]
    fn warnings_name_the_risky_settings() {
        let mut config = Config::for_tests(PathBuf::from("/s"));
        assert!(warnings(&config, false).is_empty());
        assert_eq!(warnings(&config, true).len(), 1);
        assert!(warnings(&config, true)[0].contains("root shell"));
        config.allow_logins = vec!["a@b".into()];
        let w = warnings(&config, false);
        assert!(
            w.len() == 2
                && w[0].contains("without any --allow-host")
                && w[1].contains("without an admin token"),
            "{w:?}"
        );
        config.token = Some(Secret::new("t"));
        let w = warnings(&config, false);
        assert!(
            w.len() == 1 && w[0].contains("without any --allow-host"),
            "{w:?}"
        );
        config.allow_hosts = vec!["box.tail.ts.net".into()];
        assert!(warnings(&config, false).is_empty());
        config.listen = "0.0.0.0:8795".parse().unwrap();
        assert!(warnings(&config, false)[0].contains("not loopback"));
    }

    #[test]
    fn urls_in_logs_lose_their_credentials() {
        assert_eq!(mask_url("http://u:p@h:1/mcp"), "http://***@h:1/mcp");
        assert_eq!(mask_url("http://h/a@b"), "http://h/a@b");
        assert_eq!(mask_url("https://h"), "https://h");
    }

    #[test]
    fn apps_resolve_at_start_from_flags_or_env_and_a_terminal_is_refused_by_name() {
        let tmp = TempDir::new("config-apps");
        let apps = tmp.path("share/applications");
        std::fs::create_dir_all(&apps).unwrap();
        let entry = |exec: &str, extra: &str| {
            format!("[Desktop Entry]\nType=Application\nName=X\nExec={exec}\n{extra}\n")
        };
        std::fs::write(apps.join("t.Ok.desktop"), entry("true %U", "")).unwrap();
        std::fs::write(apps.join("t.Two.desktop"), entry("true", "")).unwrap();
        std::fs::write(
            apps.join("t.Term.desktop"),
            entry("true", "Categories=System;TerminalEmulator;"),
        )
        .unwrap();
        let data = tmp.path("share").display().to_string();
        let env = env_in(&tmp, &[(TOKEN_ENV, "tok"), ("XDG_DATA_DIRS", &data)]);
        let c = serve(&["--apps", "t.Ok,t.Two", "--apps", "t.Ok.desktop"], &env).unwrap();
        let ids: Vec<&str> = c.apps.iter().map(|e| e.id.as_str()).collect();
        assert_eq!(ids, ["t.Ok", "t.Two"]);
        assert_eq!(c.apps[0].argv, ["true"]);
        let mut with_env = env.clone();
        with_env.insert("HANDNODE_APPS".into(), "t.Two".into());
        assert_eq!(serve(&[], &with_env).unwrap().apps[0].id, "t.Two");
        assert!(serve(&[], &env).unwrap().apps.is_empty());
        let err = serve(&["--apps", "t.Ok,t.Term"], &env).unwrap_err();
        assert!(
            err.starts_with("--apps: t.Term (")
                && err.ends_with(
                    "is refused: it is a terminal emulator (Categories has TerminalEmulator)"
                ),
            "{err}"
        );
        let err = serve(&["--apps", "t.Gone"], &env).unwrap_err();
        assert!(err.starts_with("--apps: t.Gone: not found in "), "{err}");
        let err = serve(&["--apps", "../t.Ok"], &env).unwrap_err();
        assert!(err.contains("is not a desktop entry ID"), "{err}");
    }
}
