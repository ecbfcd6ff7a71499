//! Test support for the graphical tools on real display servers: finds the displays that
//! `scripts/ci/displays.sh start` brought up, builds a `ToolHost` aimed at one of them,
//! calls tools with a watchdog, opens terminals, and asks the display servers' own tools
//! what happened. Shared with the grant tests (`#[path = "displays/mod.rs"] mod displays;`).
#![allow(dead_code)]

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use base64::Engine as _;
use handnode::config::DisplayBackend;
use handnode::pool::{CallCtl, Completion};
use handnode::profiles::Profile;
use handnode::tools::policy::ToolPolicy;
use handnode::tools::{self, CallContext, CallLimits, ToolConfig, ToolHost};
use handnode::wire::mcp::ToolOutput;
use serde_json::Value;

/// Watchdog on one tool call: far above any real call, so only a hang trips it.
pub const CALL_WATCHDOG: Duration = Duration::from_secs(60);
/// Bound on waiting for a window to appear or a typed command's effect.
pub const EFFECT_WAIT: Duration = Duration::from_secs(30);

/// The display servers of `target/displays.env`.
#[derive(Clone, Debug)]
pub struct Displays {
    pub vars: BTreeMap<String, String>,
}

impl Displays {
    /// Read `target/displays.env` (written by `scripts/ci/displays.sh start`); `Err` says
    /// why the display tests must skip.
    pub fn load() -> Result<Displays, String> {
        let file = Path::new(env!("CARGO_MANIFEST_DIR")).join("target/displays.env");
        let text = std::fs::read_to_string(&file).map_err(|_| {
            format!(
                "{} not found: run `bash scripts/ci/displays.sh start` first",
                file.display()
            )
        })?;
        let vars: BTreeMap<String, String> = text
            .lines()
            .filter_map(|l| l.split_once('='))
            .map(|(k, v)| (k.trim().to_string(), v.trim().to_string()))
            .collect();
        for key in ["DISPLAY", "WAYLAND_DISPLAY", "XDG_RUNTIME_DIR", "SWAYSOCK"] {
            if !vars.contains_key(key) {
                return Err(format!("{} lacks {key}", file.display()));
            }
        }
        Ok(Displays { vars })
    }

    pub fn get(&self, key: &str) -> &str {
        self.vars.get(key).map(String::as_str).unwrap_or("")
    }

    fn size(&self, key: &str) -> (u32, u32) {
        let (w, h) = self.get(key).split_once('x').expect("WxH in displays.env");
        (w.parse().unwrap(), h.parse().unwrap())
    }

    pub fn x11_size(&self) -> (u32, u32) {
        self.size("HANDNODE_TEST_X11_SIZE")
    }

    pub fn sway_size(&self) -> (u32, u32) {
        self.size("HANDNODE_TEST_SWAY_SIZE")
    }

    /// The display variables a tool host for `backend` sees (only that backend's).
    pub fn env_for(&self, backend: DisplayBackend) -> BTreeMap<String, String> {
        let mut env = BTreeMap::new();
        env.insert(
            "PATH".to_string(),
            std::env::var("PATH").unwrap_or_else(|_| "/usr/bin:/bin".into()),
        );
        let keys: &[&str] = match backend {
            DisplayBackend::X11 => &["DISPLAY"],
            DisplayBackend::Wayland => &["WAYLAND_DISPLAY", "XDG_RUNTIME_DIR", "SWAYSOCK"],
            _ => &[],
        };
        for k in keys {
            env.insert(k.to_string(), self.get(k).to_string());
        }
        env
    }

    /// A tool host that drives `backend`.
    pub fn host(&self, backend: DisplayBackend) -> Arc<ToolHost> {
        host_with(backend, Some(self.env_for(backend)))
    }

    /// A command with this display's environment (and nothing of the other one).
    pub fn command(&self, backend: DisplayBackend, program: &str) -> Command {
        let mut c = Command::new(program);
        c.env_remove("DISPLAY")
            .env_remove("WAYLAND_DISPLAY")
            .envs(self.env_for(backend))
            .stdin(Stdio::null());
        c
    }

    /// Run swaymsg and ignore whether the command matched anything (e.g. kill of no window).
    pub fn swaymsg_quiet(&self, args: &[&str]) {
        let _ = self
            .command(DisplayBackend::Wayland, "swaymsg")
            .args(args)
            .stdout(Stdio::null())
            .status();
    }

    /// `swaymsg <args>` as JSON; panics when sway reports a failure.
    pub fn swaymsg(&self, args: &[&str]) -> Value {
        let out = self
            .command(DisplayBackend::Wayland, "swaymsg")
            .args(["-r"])
            .args(args)
            .output()
            .expect("run swaymsg");
        assert!(out.status.success(), "swaymsg {args:?}: {out:?}");
        serde_json::from_slice(&out.stdout).expect("swaymsg prints JSON")
    }

    /// Where the pointer is on the X display.
    pub fn x11_pointer(&self) -> (u32, u32) {
        let out = self
            .command(DisplayBackend::X11, "xdotool")
            .args(["getmouselocation", "--shell"])
            .output()
            .expect("run xdotool");
        let text = String::from_utf8_lossy(&out.stdout);
        let get = |k: &str| -> u32 {
            text.lines()
                .find_map(|l| l.strip_prefix(&format!("{k}=")))
                .and_then(|v| v.parse().ok())
                .unwrap_or_else(|| panic!("no {k} in {text}"))
        };
        (get("X"), get("Y"))
    }
}

/// A tool host with `backend` and, when given, exactly `env` as its display environment.
pub fn host_with(backend: DisplayBackend, env: Option<BTreeMap<String, String>>) -> Arc<ToolHost> {
    ToolHost::new(ToolConfig {
        display_backend: backend,
        display_env: env,
        // Every call re-probes, as a desktop that comes and goes needs.
        display_probe_ttl: Duration::ZERO,
        ..ToolConfig::default()
    })
    .expect("tool host")
}

/// Call a local tool as `profile` would, and wait (with a watchdog) for its output.
pub fn call_as(host: &Arc<ToolHost>, profile: Profile, name: &str, args: Value) -> ToolOutput {
    call_ctl(host, profile, name, args, CallCtl::new())
}

pub fn call_ctl(
    host: &Arc<ToolHost>,
    profile: Profile,
    name: &str,
    args: Value,
    ctl: Arc<CallCtl>,
) -> ToolOutput {
    call_with(host, profile, None, name, args, ctl)
}

/// A `desktop` call as grant `id` makes it (what is kept per grant, such as accessibility
/// refs, is that grant's own).
pub fn call_in_grant(host: &Arc<ToolHost>, id: &str, name: &str, args: Value) -> ToolOutput {
    let grant = tools::GrantNote {
        id: id.to_string(),
        session: "s".into(),
        expires_at: u64::MAX / 2,
        approve: Vec::new(),
        approval_wait: Duration::from_secs(1),
    };
    call_with(
        host,
        Profile::Desktop,
        Some(grant),
        name,
        args,
        CallCtl::new(),
    )
}

fn call_with(
    host: &Arc<ToolHost>,
    profile: Profile,
    grant: Option<tools::GrantNote>,
    name: &str,
    args: Value,
    ctl: Arc<CallCtl>,
) -> ToolOutput {
    let (tx, rx) = crossbeam_channel::bounded(1);
    let limits = match grant {
        Some(_) => CallLimits::GRANT,
        None => CallLimits::LOCAL_HTTP,
    };
    let cx = CallContext {
        policy: Arc::new(ToolPolicy::fixed(profile).expect("a fixed profile")),
        grant,
        limits,
        ctl,
        host: host.clone(),
        principal: "test".into(),
    };
    tools::start_local(
        name,
        args,
        cx,
        Completion::new(move |out| {
            let _ = tx.send(out);
        }),
    );
    rx.recv_timeout(CALL_WATCHDOG)
        .unwrap_or_else(|_| panic!("{name} did not answer within {CALL_WATCHDOG:?}"))
}

pub fn call(host: &Arc<ToolHost>, name: &str, args: Value) -> ToolOutput {
    call_as(host, Profile::Owner, name, args)
}

/// The result object of a successful call; panics with the error text otherwise.
pub fn ok(out: ToolOutput) -> Value {
    match out {
        ToolOutput::Result(v) if v.get("isError") != Some(&Value::Bool(true)) => v,
        other => panic!("expected success, got {other:?}"),
    }
}

/// The text of a tool error; panics on success.
pub fn tool_error(out: ToolOutput) -> String {
    match out {
        ToolOutput::Result(v) if v.get("isError") == Some(&Value::Bool(true)) => v["content"][0]
            ["text"]
            .as_str()
            .expect("error text")
            .to_string(),
        other => panic!("expected a tool error, got {other:?}"),
    }
}

/// The image bytes and mime type of a screenshot result.
pub fn image(result: &Value) -> (Vec<u8>, String) {
    let block = result["content"]
        .as_array()
        .and_then(|c| c.iter().find(|b| b["type"] == "image"))
        .expect("an image block");
    let data = base64::engine::general_purpose::STANDARD
        .decode(block["data"].as_str().expect("base64 data"))
        .expect("valid base64");
    (data, block["mimeType"].as_str().unwrap_or("").to_string())
}

/// Width and height from a PNG's IHDR; panics when the bytes are not a PNG.
pub fn png_size(bytes: &[u8]) -> (u32, u32) {
    assert!(
        bytes.len() > 33,
        "too short for a PNG: {} bytes",
        bytes.len()
    );
    assert_eq!(&bytes[..8], b"\x89PNG\r\n\x1a\n", "PNG signature");
    assert_eq!(&bytes[12..16], b"IHDR", "IHDR first");
    let w = u32::from_be_bytes(bytes[16..20].try_into().unwrap());
    let h = u32::from_be_bytes(bytes[20..24].try_into().unwrap());
    (w, h)
}

/// Keep a copy under `target/screenshots/` for a person to look at.
pub fn save_screenshot(name: &str, bytes: &[u8]) -> PathBuf {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("target/screenshots");
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join(name);
    std::fs::write(&path, bytes).unwrap();
    eprintln!("saved {}", path.display());
    path
}

/// Poll `check` until it holds or `limit` passes. For effects with no event to wait on
/// (a file a terminal writes, a window a compositor maps).
pub fn wait_until(limit: Duration, mut check: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + limit;
    loop {
        if check() {
            return true;
        }
        if Instant::now() >= deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// A world-writable scratch directory (the sway terminal runs as nobody).
pub struct Scratch(pub PathBuf);

impl Scratch {
    pub fn new(tag: &str) -> Scratch {
        use std::os::unix::fs::PermissionsExt;
        static NEXT: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
        let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        let path =
            std::env::temp_dir().join(format!("handnode-dtest-{tag}-{}-{n}", std::process::id()));
        let _ = std::fs::remove_dir_all(&path);
        std::fs::create_dir_all(&path).unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o777)).unwrap();
        Scratch(path)
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A child killed when dropped (a terminal window).
pub struct Killed(pub Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// One sway view (window).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SwayView {
    pub id: i64,
    pub app_id: String,
    /// x, y, width, height in layout pixels.
    pub rect: (i64, i64, i64, i64),
    pub focused: bool,
}

/// Every view in a `swaymsg -t get_tree` answer.
pub fn sway_views(tree: &Value) -> Vec<SwayView> {
    fn walk(node: &Value, out: &mut Vec<SwayView>) {
        if node["pid"].is_i64() && node["type"] == "con" {
            let r = &node["rect"];
            let n = |k: &str| r[k].as_i64().unwrap_or(0);
            out.push(SwayView {
                id: node["id"].as_i64().unwrap_or(-1),
                app_id: node["app_id"].as_str().unwrap_or("").to_string(),
                rect: (n("x"), n("y"), n("width"), n("height")),
                focused: node["focused"] == true,
            });
        }
        for key in ["nodes", "floating_nodes"] {
            if let Some(children) = node[key].as_array() {
                for c in children {
                    walk(c, out);
                }
            }
        }
    }
    let mut out = Vec::new();
    walk(tree, &mut out);
    out
}
