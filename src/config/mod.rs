//! Daemon configuration: every setting, its default, and every timing constant, so tests
//! can turn production-sized timers down. The settings types and defaults live here; the
//! flag machinery (one table drives flags, `HANDNODE_*` env and `--help`) in `flags`, the
//! `serve` and `doctor` flag tables and parsing in `serve`, finding the admin token in
//! `token`, start-up warnings and the effective-settings log in `report`. The subcommand
//! dispatch and the operator subcommands' arguments live in `ops::cli`.

mod flags;
pub mod own_display;
mod report;
mod serve;
mod token;

pub(crate) use flags::*;
pub use report::*;
pub(crate) use serve::*;
pub use serve::{apps_lookup, DoctorArgs};
pub use token::*;

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

/// `--isolation` (and its finer overrides `--browser-isolation`, `--own-display-isolation`):
/// whether the processes of non-owner grants run inside the `bwrap` wall (`crate::walls`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum IsolationMode {
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
    /// After a `bash` call's shell exited, how long its stdout/stderr may stay open (held
    /// by what it left running in the background) before the call answers anyway (§25).
    pub background_grace: Duration,
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
    /// `--journal-days`: how long a journal is kept after its last record (§22).
    pub journal_keep: Duration,
    /// How often the journal writer looks for journals past `journal_keep`.
    pub journal_sweep: Duration,
    /// `--halt-key` without a `/dev/input` to watch (inotify): how often the keyboards are
    /// looked for again (`ops::halt_key`).
    pub halt_key_rescan: Duration,
}

/// `--journal-bytes` by default: what one journal may hold on disk (bytes).
pub const JOURNAL_BYTES_DEFAULT: u64 = 64 << 20;
/// `--journal-days` by default (days).
pub const JOURNAL_DAYS_DEFAULT: u64 = 14;

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
            background_grace: Duration::from_millis(100),
            a11y_call_timeout: Duration::from_secs(2),
            inline_wait: Duration::from_secs(100),
            mcp_inline_wait: Duration::from_secs(600),
            job_retention: Duration::from_secs(600),
            job_kill_grace: Duration::from_secs(5),
            browser_idle: Duration::from_secs(600),
            browser_start_timeout: Duration::from_secs(30),
            approval_timeout: Duration::from_secs(60),
            journal_keep: Duration::from_secs(JOURNAL_DAYS_DEFAULT * 86_400),
            journal_sweep: Duration::from_secs(3600),
            halt_key_rescan: Duration::from_secs(5),
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
    pub call_queue: usize,
    /// `--journal-bytes`: what one journal may hold on disk, thumbnails first to go.
    pub journal_bytes: u64,
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
            call_queue: 256,
            journal_bytes: JOURNAL_BYTES_DEFAULT,
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
    /// `--browser-isolation`; `None`: as `--isolation`.
    pub browser_isolation: Option<IsolationMode>,
    /// `--isolation`: the wall around every process of every non-owner grant (§21).
    pub isolation: IsolationMode,
    /// `--apps`: the desktop entries the `apps` profile may start and drive (§17),
    /// resolved and vetted at start (`rules::desktop_entry::resolve_apps`).
    pub apps: Vec<crate::rules::desktop_entry::DesktopEntry>,
    pub display_backend: DisplayBackend,
    /// Test override of the display variables graphical tools see (`DISPLAY`,
    /// `WAYLAND_DISPLAY`, …); `None` = this process's environment. Not a flag.
    #[doc(hidden)]
    pub display_env: Option<std::collections::BTreeMap<String, String>>,
    pub max_screenshot_edge: u32,
    /// A grant's own display (§19): `--own-display-size`, `--max-own-displays`, its
    /// timeouts; `dir` (where runtime directories go) is not a flag.
    pub own_display: own_display::OwnDisplaySettings,
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
    /// `--halt-key` (§22): the chord that halts everything from a physical keyboard.
    pub halt_key: Option<crate::base::evdev::Chord>,
    /// Where `--halt-key` finds `proc/bus/input/devices`, `dev/input/` and `sys/`: `/`;
    /// tests point it at a fake tree. Not a flag.
    #[doc(hidden)]
    pub input_root: PathBuf,
    pub timing: Timing,
    pub limits: Limits,
    /// What parsing found to warn about at start (an old flag name used), said with
    /// [`warnings`].
    pub start_warnings: Vec<String>,
}

impl Config {
    /// The wall throwaway browsers get: `--browser-isolation`, else `--isolation`.
    pub fn browser_wall_mode(&self) -> IsolationMode {
        self.browser_isolation.unwrap_or(self.isolation)
    }

    /// The wall own-display grants get: `--own-display-isolation`, else `--isolation`.
    pub fn own_display_wall_mode(&self) -> IsolationMode {
        self.own_display.isolation.unwrap_or(self.isolation)
    }

    /// A configuration for tests: loopback on an ephemeral port, the given state dir,
    /// no auth until the caller sets some.
    pub fn for_tests(state_dir: PathBuf) -> Self {
        let displays_dir = state_dir.join("displays");
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
            browser_isolation: None,
            isolation: IsolationMode::Auto,
            apps: Vec::new(),
            display_backend: DisplayBackend::Auto,
            display_env: None,
            max_screenshot_edge: 1920,
            own_display: own_display::OwnDisplaySettings {
                dir: Some(displays_dir),
                ..Default::default()
            },
            notify: false,
            notify_program: None,
            sd_notify: false,
            local_socket: None,
            force_subreaper: false,
            halt_key: None,
            input_root: PathBuf::from("/"),
            timing: Timing::default(),
            limits: Limits::default(),
            start_warnings: Vec::new(),
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
            browser_isolation: None,
            isolation: IsolationMode::Auto,
            apps: Vec::new(),
            display_backend: DisplayBackend::Auto,
            display_env: None,
            max_screenshot_edge: DEFAULT_MAX_SCREENSHOT_EDGE,
            own_display: Default::default(),
            notify: true,
            notify_program: None,
            sd_notify: true,
            local_socket: None,
            force_subreaper: false,
            halt_key: None,
            input_root: PathBuf::from("/"),
            timing: Timing::default(),
            limits: Limits::default(),
            start_warnings: Vec::new(),
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

#[cfg(test)]
mod tests;
