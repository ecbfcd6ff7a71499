//! Daemon configuration: every setting, its default, and every timing constant, so tests
//! can turn production-sized timers down. Parsing from flags and `HANDNODE_*` env lives
//! here too (one table drives both and `--help`).

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use crate::secret::Secret;

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
}

impl Default for Timing {
    fn default() -> Self {
        Timing {
            backoff_base: Duration::from_secs(1),
            backoff_cap: Duration::from_secs(30),
            backoff_reset: Duration::from_secs(60),
            ping_interval: Duration::from_secs(20),
            silence_limit: Duration::from_secs(60),
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
    /// Tool calls queued for the worker pool before callers are told it is busy.
    pub job_queue: usize,
    /// `Mcp-Session-Id` sessions kept (least recently used evicted).
    pub mcp_sessions: usize,
    /// Audit file size that triggers rotation (bytes).
    pub audit_rotate_bytes: u64,
    /// Rotated audit files kept.
    pub audit_keep: usize,
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
            job_queue: 256,
            mcp_sessions: 256,
            audit_rotate_bytes: 10 << 20,
            audit_keep: 5,
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
    pub display_backend: DisplayBackend,
    pub max_screenshot_edge: u32,
    pub notify: bool,
    /// Tell systemd (`NOTIFY_SOCKET`) when ready and when stopping.
    pub sd_notify: bool,
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
            display_backend: DisplayBackend::Auto,
            max_screenshot_edge: 1920,
            notify: false,
            sd_notify: false,
            timing: Timing::default(),
            limits: Limits::default(),
        }
    }
}
