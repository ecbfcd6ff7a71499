//! A grant's own display (contract §19): its settings (`--own-display-size`,
//! `--max-own-displays`, its timeouts), declared here below `tools`, which runs them
//! (`tools::display::own`).

use std::path::PathBuf;
use std::time::Duration;

/// Default `--own-display-size`.
pub const DEFAULT_SIZE: (u32, u32) = (1280, 800);
/// Smallest and largest edge `--own-display-size` accepts (pixels).
pub const MIN_EDGE: u32 = 64;
pub const MAX_EDGE: u32 = 8192;
/// Default and largest `--max-own-displays`.
pub const DEFAULT_MAX: usize = 2;
pub const MAX_MAX: usize = 16;
/// Default `--box-view-linger-ms`, and its largest (ten minutes).
pub const DEFAULT_BOX_VIEW_LINGER_MS: u64 = 5_000;
pub const MAX_BOX_VIEW_LINGER_MS: u64 = 600_000;

/// Default and largest `--live-view-max-viewers`.
pub const DEFAULT_MAX_VIEWERS: usize = 4;
pub const MAX_MAX_VIEWERS: usize = 32;
/// Default `--wheel-idle-secs`, and its largest (a day).
pub const DEFAULT_WHEEL_IDLE_SECS: u64 = 300;
pub const MAX_WHEEL_IDLE_SECS: u64 = 86_400;
/// Default `--live-view-ticket-ms`: long enough for a page to open its WebSocket after
/// the POST that minted the ticket, short enough that a leaked one is stale.
pub const DEFAULT_VIEW_TICKET_MS: u64 = 30_000;
/// Where Debian's `novnc` package installs noVNC (§23: the console's live view loads its
/// ES modules from here, at `/console/novnc/`). `doctor` checks the same place.
pub const NOVNC_DIR: &str = "/usr/share/novnc";
/// The module the console's live view imports; its absence means "no noVNC here".
pub const NOVNC_ENTRY: &str = "core/rfb.js";

/// Parse `--own-display-size`: `WxH`, each edge in `MIN_EDGE..=MAX_EDGE`.
pub fn parse_size(text: &str) -> Result<(u32, u32), String> {
    let wrong = || {
        format!(
            "--own-display-size must be WIDTHxHEIGHT with each edge {MIN_EDGE}..{MAX_EDGE}, \
             e.g. 1280x800; got {text:?}"
        )
    };
    let (w, h) = text.split_once(['x', 'X']).ok_or_else(wrong)?;
    let edge = |s: &str| -> Result<u32, String> {
        if s.is_empty() || !s.bytes().all(|b| b.is_ascii_digit()) || s.len() > 6 {
            return Err(wrong());
        }
        let n: u32 = s.parse().map_err(|_| wrong())?;
        (MIN_EDGE..=MAX_EDGE)
            .contains(&n)
            .then_some(n)
            .ok_or_else(wrong)
    };
    Ok((edge(w)?, edge(h)?))
}

/// How own displays are made here. Built from the configuration.
#[derive(Clone, Debug)]
pub struct OwnDisplaySettings {
    pub size: (u32, u32),
    /// Own displays running at once (`--max-own-displays`).
    pub max: usize,
    /// From spawning Xvfb to the display (and the bus) answering.
    pub start_timeout: Duration,
    /// From SIGTERM to SIGKILL when stopping.
    pub stop_timeout: Duration,
    /// Parent of every grant's runtime directory; `None`: the default
    /// (`$XDG_RUNTIME_DIR/handnode-displays` when that directory is this user's own, else
    /// `/tmp/handnode-displays-<uid>`).
    pub dir: Option<PathBuf>,
    /// `--own-display-isolation`: whether the grant's `bash` and jobs run inside their
    /// `bwrap` wall (`crate::walls::Bwrap::grant_args`); `None`: as `--isolation`.
    pub isolation: Option<super::IsolationMode>,
    /// `--own-display-network`: whether that wall gets a network namespace of its own.
    pub network: Network,
    /// Live viewers of one own display at once (`--live-view-max-viewers`, §23).
    pub max_viewers: usize,
    /// The lender's lease of the wheel ends after this long without their input
    /// (`--wheel-idle-secs`, §23).
    pub wheel_idle: Duration,
    /// How long a live-view ticket (`POST /attach/{id}/view-ticket`) may wait for its
    /// WebSocket (`--live-view-ticket-ms`).
    pub view_ticket: Duration,
    /// Where the X server keeps its sockets and lock files (`/tmp`; a test may not change it,
    /// Xvfb does not let it be changed, but the cleanup's reading of it is one place).
    pub x_tmp: PathBuf,
    /// The box display's VNC server stops this long after its last viewer left
    /// (`--box-view-linger-ms`, §23): a reload of the page does not restart it.
    pub box_view_linger: Duration,
}

/// `--own-display-network` (§21): an own display's wall shares no socket with the box.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Network {
    /// A network namespace of its own, connected by `pasta` (user-mode networking):
    /// outbound TCP/UDP and the box's loopback ports work, the box's abstract sockets
    /// (X servers, D-Bus) do not. Without `pasta`, `"display":"own"` is refused.
    Pasta,
    /// The box's network namespace: its abstract sockets stay reachable.
    Shared,
}

impl Network {
    /// The grant JSON's and `sys_info`'s `network`.
    pub fn as_str(self) -> &'static str {
        match self {
            Network::Pasta => "pasta",
            Network::Shared => "shared",
        }
    }
}

impl Default for OwnDisplaySettings {
    fn default() -> Self {
        OwnDisplaySettings {
            size: DEFAULT_SIZE,
            max: DEFAULT_MAX,
            start_timeout: Duration::from_secs(10),
            stop_timeout: Duration::from_secs(2),
            dir: None,
            isolation: None,
            network: Network::Pasta,
            max_viewers: DEFAULT_MAX_VIEWERS,
            wheel_idle: Duration::from_secs(DEFAULT_WHEEL_IDLE_SECS),
            view_ticket: Duration::from_millis(DEFAULT_VIEW_TICKET_MS),
            x_tmp: PathBuf::from("/tmp"),
            box_view_linger: Duration::from_millis(DEFAULT_BOX_VIEW_LINGER_MS),
        }
    }
}

impl OwnDisplaySettings {
    /// The parent of the runtime directories.
    pub fn parent(&self) -> PathBuf {
        if let Some(d) = &self.dir {
            return d.clone();
        }
        let ours = |rt: &std::ffi::OsString| crate::base::statedir::is_own_runtime_dir(rt.as_ref());
        match std::env::var_os("XDG_RUNTIME_DIR").filter(ours) {
            Some(rt) => PathBuf::from(rt).join("handnode-displays"),
            None => PathBuf::from(format!(
                "/tmp/handnode-displays-{}",
                rustix::process::getuid().as_raw()
            )),
        }
    }
}
