//! `serve` and `doctor` flags: the value parsers, the flag tables, `--help`, and turning
//! flags and env into a `Config` (dirs and the token resolved).

use super::*;

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

/// `--isolation`, `--browser-isolation` or `--own-display-isolation` (`flag`, without its
/// dashes).
fn parse_isolation(flag: &str, value: &str) -> Result<IsolationMode, String> {
    match value {
        "auto" => Ok(IsolationMode::Auto),
        "bwrap" => Ok(IsolationMode::Bwrap),
        "none" => Ok(IsolationMode::None),
        other => Err(format!(
            "--{flag} must be auto, bwrap or none, got {other:?}"
        )),
    }
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
                d.apps = split_app_ids(&v)?;
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
        default: "",
        help: "Overrides --isolation for throwaway browsers only: bwrap, none or auto (default: as --isolation).",
        kind: Kind::Text {
            metavar: "auto|bwrap|none",
            set: |d, v| {
                d.config.browser_isolation = Some(parse_isolation("browser-isolation", &v)?);
                Ok(())
            },
        },
    },
    Flag {
        name: "isolation",
        env: true,
        default: "auto",
        help: "The wall around every process of every non-owner grant (bash, jobs, app_open apps, own displays' children, throwaway browsers): bwrap (bubblewrap: handnode's state dir, config dir, token file and local socket and other grants' dirs are empty inside, /sys/fs/cgroup is read-only in a cgroup namespace, a PID namespace of its own, and as root a user namespace without capabilities; start fails if bwrap does not work), none (a grant's shell can then reach the lender's channel), or auto (bwrap when it works here, else none with a warning). `doctor` says which.",
        kind: Kind::Text {
            metavar: "auto|bwrap|none",
            set: |d, v| {
                d.config.isolation = parse_isolation("isolation", &v)?;
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
        name: "own-display-size",
        env: true,
        default: "1280x800",
        help: "Size of a grant's own display (\"display\":\"own\" at attach): WIDTHxHEIGHT, each edge 64..8192.",
        kind: Kind::Text {
            metavar: "WxH",
            set: |d, v| {
                d.config.own_display.size = super::own_display::parse_size(&v)?;
                Ok(())
            },
        },
    },
    Flag {
        name: "max-own-displays",
        env: true,
        default: "2",
        help: "Own displays (one per grant that asked for \"display\":\"own\") running at once; a graphical call past that is answered `no own display available`.",
        kind: Kind::Int {
            metavar: "N",
            min: 1,
            max: super::own_display::MAX_MAX as u64,
            set: |d, v| d.config.own_display.max = v as usize,
        },
    },
    Flag {
        name: "own-display-isolation",
        env: true,
        default: "",
        help: "Overrides --isolation for grants with their own display: bwrap, none or auto (default: as --isolation). Their wall also empties the owner's runtime dir, X cookies, /tmp/.X11-unix (but for the grant's own socket) and the browsers' dir, and the grant's file tools refuse the same paths.",
        kind: Kind::Text {
            metavar: "auto|bwrap|none",
            set: |d, v| {
                d.config.own_display.isolation =
                    Some(parse_isolation("own-display-isolation", &v)?);
                Ok(())
            },
        },
    },
    Flag {
        name: "own-display-network",
        env: true,
        default: "pasta",
        help: "The network of an own display's wall: pasta (a network namespace of its own through pasta, Debian `passt`: outbound TCP/UDP and the box's loopback ports work, the box's X, D-Bus and Wayland sockets do not; without pasta, \"display\":\"own\" is refused) or shared (the box's network namespace: its abstract sockets stay reachable).",
        kind: Kind::Text {
            metavar: "pasta|shared",
            set: |d, v| {
                d.config.own_display.network = match v.as_str() {
                    "pasta" => super::own_display::Network::Pasta,
                    "shared" => super::own_display::Network::Shared,
                    other => {
                        return Err(format!(
                            "--own-display-network must be pasta or shared, got {other:?}"
                        ))
                    }
                };
                Ok(())
            },
        },
    },
    Flag {
        name: "own-display-start-timeout-ms",
        env: true,
        default: "10000",
        help: "Longest an own display's X server (and its session bus) may take to answer.",
        kind: Kind::Int {
            metavar: "MS",
            min: 1,
            max: 600_000,
            set: |d, v| d.config.own_display.start_timeout = Duration::from_millis(v),
        },
    },
    Flag {
        name: "own-display-stop-timeout-ms",
        env: true,
        default: "2000",
        help: "Stopping an own display: SIGKILL follows SIGTERM after this long.",
        kind: Kind::Int {
            metavar: "MS",
            min: 1,
            max: 600_000,
            set: |d, v| d.config.own_display.stop_timeout = Duration::from_millis(v),
        },
    },
    Flag {
        name: "live-view-max-viewers",
        env: true,
        default: "4",
        help: "Live viewers (GET /attach/{id}/view) of one own display at once; one more is answered 429.",
        kind: Kind::Int {
            metavar: "N",
            min: 1,
            max: super::own_display::MAX_MAX_VIEWERS as u64,
            set: |d, v| d.config.own_display.max_viewers = v as usize,
        },
    },
    Flag {
        name: "live-view-ticket-ms",
        env: true,
        default: "30000",
        help: "A live-view ticket (POST /attach/{id}/view-ticket, how the console's WebSocket authenticates) is refused after this long unused.",
        kind: Kind::Int {
            metavar: "MS",
            min: 1,
            max: 600_000,
            set: |d, v| d.config.own_display.view_ticket = Duration::from_millis(v),
        },
    },
    Flag {
        name: "wheel-idle-secs",
        env: true,
        default: "300",
        help: "The wheel of an own display goes back to the agent after this long without input from the lender's live view (POST /attach/{id}/wheel takes it).",
        kind: Kind::Int {
            metavar: "SECS",
            min: 1,
            max: super::own_display::MAX_WHEEL_IDLE_SECS,
            set: |d, v| d.config.own_display.wheel_idle = Duration::from_secs(v),
        },
    },
    Flag {
        name: "box-view-linger-ms",
        env: true,
        default: "5000",
        help: "The box display's VNC server (x11vnc or wayvnc, started for the first live viewer of a grant on the box's display) stops this long after the last viewer left.",
        kind: Kind::Int {
            metavar: "MS",
            min: 0,
            max: super::own_display::MAX_BOX_VIEW_LINGER_MS,
            set: |d, v| d.config.own_display.box_view_linger = Duration::from_millis(v),
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
        name: "halt-key",
        env: true,
        default: "",
        help: "A key chord such as ctrl+alt+end (modifiers ctrl, alt, shift, super and one key, by evdev's KEY_* names) that halts everything, as `handnode halt` does, when pressed on one of this box's physical keyboards. Read through evdev (/dev/input/event*) without grabbing: the keyboard types as usual. uinput and other software devices are never read (and XTEST never reaches evdev), so an agent can neither press nor block it. The daemon's user must be able to read the keyboards: `handnode doctor --halt-key CHORD` says whether it can and how to allow it. Off by default.",
        kind: Kind::Text {
            metavar: "CHORD",
            set: |d, v| {
                d.config.halt_key = Some(crate::base::evdev::Chord::parse(&v)?);
                Ok(())
            },
        },
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
        name: "call-queue",
        env: true,
        default: "256",
        help: "Tool calls queued for the workers before callers are told the box is busy.",
        kind: Kind::Int {
            metavar: "N",
            min: 1,
            max: 65_536,
            set: |d, v| d.config.limits.call_queue = v as usize,
        },
    },
    Flag {
        name: "journal-bytes",
        env: true,
        default: "67108864",
        help: "What one grant's journal (and one day of the owner's /mcp) may hold on disk: past it the oldest thumbnails go first, then the oldest records (a line says how many).",
        kind: Kind::Int {
            metavar: "BYTES",
            min: 65_536,
            max: 1 << 40,
            set: |d, v| d.config.limits.journal_bytes = v,
        },
    },
    Flag {
        name: "journal-days",
        env: true,
        default: "14",
        help: "How long a journal is kept after its last record (an ended grant's, an old day of /mcp).",
        kind: Kind::Int {
            metavar: "DAYS",
            min: 1,
            max: 3650,
            set: |d, v| d.config.timing.journal_keep = Duration::from_secs(v * 86_400),
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
    millis!("background-grace-ms", background_grace, "100", "After a bash call's shell exited, how long its output may stay open (held by a background process) before the call answers anyway."),
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
    /// `--apps` (or its env var): the desktop entry IDs to look up and vet as `serve` would.
    pub apps: Vec<String>,
    /// `--halt-key` (or its env var): the chord whose keyboards doctor looks for.
    pub halt_key: Option<crate::base::evdev::Chord>,
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
    Flag {
        name: "apps",
        env: true,
        default: "",
        help: "The daemon's --apps: doctor looks up each desktop entry and says which `serve` would refuse, and why.",
        kind: Kind::List {
            metavar: "ID",
            set: |d, v| {
                d.apps = split_app_ids(&v)?;
                Ok(())
            },
        },
    },
    Flag {
        name: "halt-key",
        env: true,
        default: "",
        help: "The daemon's --halt-key: doctor says which keyboards have the chord's keys, which input devices are software ones it ignores, and whether this user can read them (and how to allow it).",
        kind: Kind::Text {
            metavar: "CHORD",
            set: |d, v| {
                d.halt_key = Some(crate::base::evdev::Chord::parse(&v)?);
                Ok(())
            },
        },
    },
];

/// `--apps` values (repeated, comma-separated) into checked desktop entry IDs.
fn split_app_ids(values: &[String]) -> Result<Vec<String>, String> {
    values
        .iter()
        .flat_map(|v| v.split(','))
        .map(str::trim)
        .filter(|v| !v.is_empty())
        .map(crate::rules::desktop_entry::check_id)
        .collect()
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
/// `handnode --help`: what each subcommand is for, on one screen, and where the rest is.
pub(crate) fn overview_help() -> String {
    format!(
        "{}\n\
Each subcommand's flags: handnode SUBCOMMAND --help (the daemon's: handnode serve --help,\n\
{} flags). README.md and docs/ hold the rest.\n",
        usage_lines(),
        SERVE_FLAGS.len()
    )
}

fn usage_lines() -> String {
    format!(
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
  handnode calls [--watch]          what runs now: calls in flight and running jobs\n  \
  handnode jobs                     the running jobs with their last output lines\n  \
  handnode stop ID                  stop one call or job; the agent is told you did\n  \
  handnode halt [REASON]            stop everything, latched across restarts\n  \
  handnode resume                   end a halt: grants dial again\n  \
  handnode journal [ID] [--html FILE]  what the agent did, in order (an auditor's file with --html)\n  \
  handnode help SUBCOMMAND | --help | --version\n",
        env!("CARGO_PKG_VERSION")
    )
}

/// `handnode serve --help`, its help texts written out by `expand`.
pub(crate) fn serve_help(expand: super::flags::Expand) -> String {
    let mut out = format!(
        "{}\n\
Every flag can also be set by the env var shown (a flag beats its env var; repeatable flags\n\
take a comma-separated list in env). The admin token is never a flag: it is read from\n\
--token-file, env {TOKEN_ENV}, $CREDENTIALS_DIRECTORY/{CREDENTIAL_NAME} or <config dir>/{TOKEN_FILE_NAME},\n\
in that order; with no authentication configured at all, the first start writes a new one\n\
to <config dir>/{TOKEN_FILE_NAME}.\n\nFlags of serve:\n",
        usage_lines()
    );
    render_flags(&mut out, &[SERVE_FLAGS], expand);
    out
}

/// `--apps` resolved in the daemon's environment (its XDG data dirs and `PATH`): every
/// entry found and vetted, or exit 2 naming the first refused entry and why.
fn resolve_apps(
    ids: &[String],
    env: &HashMap<String, String>,
) -> Result<Vec<crate::rules::desktop_entry::DesktopEntry>, Error> {
    if ids.is_empty() {
        return Ok(Vec::new());
    }
    let (dirs, path) = apps_lookup(env);
    crate::rules::desktop_entry::resolve_apps(ids, &dirs, &path)
        .map_err(|why| Error::Config(format!("--apps: {why}")))
}

/// Where `--apps` entries are looked up and their programs found, from the daemon's
/// environment: its XDG data dirs and its `PATH` (`serve` and `doctor` alike).
pub fn apps_lookup(
    env: &HashMap<String, String>,
) -> (crate::rules::desktop_entry::DataDirs, String) {
    let dirs = crate::rules::desktop_entry::DataDirs::from_env(|k| env.get(k).cloned());
    let path = env
        .get("PATH")
        .map_or("/usr/local/bin:/usr/bin:/bin", String::as_str)
        .to_string();
    (dirs, path)
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
    let (positional, old_names) = apply_flags_noting(&[SERVE_FLAGS], args, env, &mut draft)?;
    no_positional("serve", &positional)?;
    draft.config.start_warnings = old_names;
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
