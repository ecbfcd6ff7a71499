//! Graphical tools: `screenshot`, `mouse`, `key` over X11 or wlroots Wayland. Owns
//! backend probing (re-done on each call, cached briefly), the display thread that runs
//! every graphical action in order so no pool worker waits on a helper, and the facts
//! `sys_info` and `doctor` report.

mod helper;
mod image;
pub mod keys;
mod wayland;
mod x11;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use base64::Engine as _;
use crossbeam_channel::{Sender, TrySendError};
use serde_json::{json, Value};

use super::args::{self, Naming};
use super::process::ProcessWatcher;
use super::{CallContext, Needs, Tool, ToolConfig, ToolHost, TtlCache};
use crate::config::DisplayBackend;
use crate::pool::{Completion, JobCtl};
use crate::profiles::{Class, Profile};
use crate::wire::mcp::ToolOutput;
use helper::{Helper, RunError};

/// Graphical calls waiting for the display thread before new ones are refused.
const DISPLAY_QUEUE: usize = 32;
/// Most keystrokes per helper run; a cancel takes effect between runs.
const TYPE_CHUNK_CHARS: usize = 32;
/// Longest a helper run of keystrokes should take (ms): the cancel latency of `key`.
const KEY_PIECE_MS: u32 = 1000;
/// Intermediate pointer positions of a drag.
pub(crate) const DRAG_STEPS: u32 = 8;
/// Longest `text` for `key type` (characters).
const MAX_TEXT_CHARS: usize = 10_000;
/// Most chords in one `key press`.
const MAX_KEYS: usize = 64;
/// Default and largest pause between keystrokes (ms).
const DEFAULT_KEY_DELAY_MS: u32 = 12;
const MAX_KEY_DELAY_MS: u32 = 1000;
/// Largest wheel notches in one `scroll` on either axis.
const MAX_SCROLL_NOTCHES: i64 = 100;
/// Largest coordinate accepted in arguments (pixels); the screen check comes later.
const MAX_COORD: u64 = 100_000;
/// `wtype` drops the first keystroke unless it waits for the keymap to settle (ms).
const WTYPE_SETTLE_MS: u32 = 50;
/// Screenshot byte budget: default, and the largest a reply can carry once base64-encoded
/// under the 16 MiB − 64 KiB outbound cap.
const DEFAULT_MAX_BYTES: u64 = 4 << 20;
const MIN_MAX_BYTES: u64 = 1024;
const MAX_MAX_BYTES: u64 = 11 << 20;
/// Screenshot scale bounds.
const MIN_SCALE: f64 = 0.1;
const MAX_SCALE: f64 = 2.0;

pub static SCREENSHOT: Tool = Tool {
    name: "screenshot",
    class: Class::Observe,
    class_reason: "reads the screen's pixels and changes nothing",
    description: "Take a screenshot of a display of this box (X11 or wlroots Wayland). Returns \
        the image plus its size, the scale it was taken at and the display's coordinate space: \
        mouse takes x,y in that space (pixels of the unscaled display, origin top-left), so a \
        point (ix, iy) in the image is x = region.x + ix / scale, y = region.y + iy / scale. \
        The long edge is capped (default 1920 px); a result over max_bytes is refused with \
        advice. sys_info lists the displays.",
    input_schema: screenshot_schema,
    output_schema: Some(screenshot_output_schema),
    start: screenshot,
    inline: None,
    needs: Needs::Display(Gui::Screenshot),
    profiles: &[Profile::Owner, Profile::Desktop, Profile::Observe],
};
pub static MOUSE: Tool = Tool {
    name: "mouse",
    class: Class::Shell,
    class_reason: "clicks anything on the desktop, a terminal included, so it reaches a shell",
    description: "Move, click, double-click, right-click, drag or scroll the pointer. x,y are \
        pixels of the unscaled screenshot of the display (origin top-left); screenshot reports \
        that coordinate space. A point off the screen is an error that names the screen size. \
        Scroll: positive dy scrolls the content down (wheel towards you), negative up; \
        positive dx scrolls right.",
    input_schema: mouse_schema,
    output_schema: Some(mouse_output_schema),
    start: mouse,
    inline: None,
    needs: Needs::Display(Gui::Mouse),
    profiles: &[Profile::Owner, Profile::Desktop],
};
pub static KEY: Tool = Tool {
    name: "key",
    class: Class::Shell,
    class_reason: "types into the focused window, a terminal included, so it reaches a shell",
    description: "Type text or press key combinations into the focused window. action=type \
        types `text` literally; action=press presses each chord of `keys` in order, e.g. \
        [\"ctrl+l\", \"Return\", \"super+shift+4\"] (modifiers ctrl, shift, alt, super; aliases \
        control, option, meta/win/cmd). An unknown key name is an error listing valid names.",
    input_schema: key_schema,
    output_schema: None,
    start: key,
    inline: None,
    needs: Needs::Display(Gui::Key),
    profiles: &[Profile::Owner, Profile::Desktop],
};

/// `structuredContent` of a screenshot: what was taken, and the space mouse uses.
fn screenshot_output_schema() -> Value {
    let size = json!({"type": "object", "properties": {
        "width": {"type": "integer"}, "height": {"type": "integer"},
    }, "required": ["width", "height"]});
    json!({
        "type": "object",
        "properties": {
            "display": {"type": "integer", "minimum": 0},
            "display_name": {"type": ["string", "null"]},
            "width": {"type": "integer"},
            "height": {"type": "integer"},
            "format": {"type": "string", "enum": ["png", "jpeg"]},
            "bytes": {"type": "integer", "minimum": 0},
            "scale": {"type": "number"},
            "region": {"type": "object", "properties": {
                "x": {"type": "integer"}, "y": {"type": "integer"},
                "width": {"type": "integer"}, "height": {"type": "integer"},
            }},
            "coordinate_space": size,
        },
        "required": ["display", "width", "height", "format", "bytes", "scale", "coordinate_space"],
    })
}

/// `structuredContent` of a pointer action: the display and its coordinate space.
fn mouse_output_schema() -> Value {
    json!({
        "type": "object",
        "properties": {
            "display": {"type": "integer", "minimum": 0},
            "coordinate_space": {"type": "object", "properties": {
                "width": {"type": "integer"}, "height": {"type": "integer"},
            }, "required": ["width", "height"]},
        },
        "required": ["display", "coordinate_space"],
    })
}

fn screenshot_schema() -> Value {
    crate::tools::schema(&format!(
        r#"{{
        "type": "object",
        "properties": {{
            "display": {{"type": "integer", "minimum": 0, "description": "Display index from sys_info (default 0)."}},
            "region": {{
                "type": "object",
                "description": "Only this rectangle, in the display's pixel space.",
                "properties": {{
                    "x": {{"type": "integer", "minimum": 0}},
                    "y": {{"type": "integer", "minimum": 0}},
                    "width": {{"type": "integer", "minimum": 1}},
                    "height": {{"type": "integer", "minimum": 1}}
                }},
                "required": ["x", "y", "width", "height"]
            }},
            "scale": {{"type": "number", "minimum": {MIN_SCALE:?}, "maximum": {MAX_SCALE:?}, "default": 1,
                      "description": "Resize factor before the long-edge cap."}},
            "format": {{"type": "string", "enum": ["png", "jpeg"], "default": "png"}},
            "max_bytes": {{"type": "integer", "minimum": {MIN_MAX_BYTES}, "maximum": {MAX_MAX_BYTES},
                          "default": {DEFAULT_MAX_BYTES}, "description": "Largest image (bytes, before base64)."}}
        }}
    }}"#
    ))
}

fn mouse_schema() -> Value {
    crate::tools::schema(&format!(
        r#"{{
        "type": "object",
        "properties": {{
            "action": {{"type": "string", "enum": ["move", "click", "double_click", "right_click", "drag", "scroll"]}},
            "x": {{"type": "integer", "minimum": 0, "description": "Pixels from the display's left edge."}},
            "y": {{"type": "integer", "minimum": 0, "description": "Pixels from the display's top edge."}},
            "to_x": {{"type": "integer", "minimum": 0, "description": "drag: end point x."}},
            "to_y": {{"type": "integer", "minimum": 0, "description": "drag: end point y."}},
            "dx": {{"type": "integer", "minimum": -{MAX_SCROLL_NOTCHES}, "maximum": {MAX_SCROLL_NOTCHES},
                   "description": "scroll: wheel notches; positive scrolls the content right."}},
            "dy": {{"type": "integer", "minimum": -{MAX_SCROLL_NOTCHES}, "maximum": {MAX_SCROLL_NOTCHES},
                   "description": "scroll: wheel notches; positive scrolls the content down (wheel towards you), negative up."}},
            "button": {{"type": "string", "enum": ["left", "middle", "right"], "default": "left"}},
            "display": {{"type": "integer", "minimum": 0, "description": "Display index (default 0)."}}
        }},
        "required": ["action", "x", "y"]
    }}"#
    ))
}

fn key_schema() -> Value {
    crate::tools::schema(&format!(
        r#"{{
        "type": "object",
        "properties": {{
            "action": {{"type": "string", "enum": ["type", "press"]}},
            "text": {{"type": "string", "maxLength": {MAX_TEXT_CHARS}, "description": "type: the text to type."}},
            "keys": {{"type": "array", "items": {{"type": "string"}}, "minItems": 1, "maxItems": {MAX_KEYS},
                     "description": "press: chords such as \"ctrl+c\", \"Return\", \"super+shift+4\"."}},
            "delay_ms": {{"type": "integer", "minimum": 0, "maximum": {MAX_KEY_DELAY_MS},
                         "default": {DEFAULT_KEY_DELAY_MS}, "description": "Pause between keystrokes."}}
        }},
        "required": ["action"]
    }}"#
    ))
}

// ───────────────────────────── probing ─────────────────────────────

/// A backend that was found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Backend {
    X11,
    Wayland,
}

impl Backend {
    pub fn as_str(self) -> &'static str {
        match self {
            Backend::X11 => "x11",
            Backend::Wayland => "wayland",
        }
    }
}

/// One screen: an X screen, or a Wayland output. `width`×`height` is the coordinate space
/// `mouse` uses and the size of an unscaled screenshot (0 when it could not be learned).
#[derive(Clone, Debug, PartialEq)]
pub struct Display {
    pub index: usize,
    pub name: String,
    pub width: u32,
    pub height: u32,
    /// Position in the compositor's layout (logical pixels).
    pub x: i32,
    pub y: i32,
    pub scale: i32,
    /// Size in layout (logical) pixels, where the compositor said.
    pub logical: Option<(i32, i32)>,
}

/// Helper programs, with the Debian package that ships each.
const HELPERS: &[(&str, &str)] = &[
    ("xset", "x11-xserver-utils"),
    ("notify-send", "libnotify-bin"),
    ("xdotool", "xdotool"),
    ("scrot", "scrot"),
    ("import", "imagemagick"),
    ("xdpyinfo", "x11-utils"),
    ("grim", "grim"),
    ("wtype", "wtype"),
];

/// The environment variables that decide the display, read once per probe.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct DisplayEnv {
    pub display: Option<String>,
    pub wayland_display: Option<String>,
    pub xdg_runtime_dir: Option<String>,
    pub swaysock: Option<String>,
    pub path: Option<String>,
}

const DISPLAY_VARS: [&str; 5] = [
    "DISPLAY",
    "WAYLAND_DISPLAY",
    "XDG_RUNTIME_DIR",
    "SWAYSOCK",
    "PATH",
];

impl DisplayEnv {
    pub fn from_config(cfg: &ToolConfig) -> Self {
        let get = |name: &str| -> Option<String> {
            let v = match &cfg.display_env {
                Some(map) => map.get(name).cloned(),
                None => std::env::var(name).ok(),
            };
            v.filter(|v| !v.is_empty())
        };
        DisplayEnv {
            display: get("DISPLAY"),
            wayland_display: get("WAYLAND_DISPLAY"),
            xdg_runtime_dir: get("XDG_RUNTIME_DIR"),
            swaysock: get("SWAYSOCK"),
            path: get("PATH"),
        }
    }

    fn pairs(&self) -> [(&'static str, &Option<String>); 5] {
        [
            ("DISPLAY", &self.display),
            ("WAYLAND_DISPLAY", &self.wayland_display),
            ("XDG_RUNTIME_DIR", &self.xdg_runtime_dir),
            ("SWAYSOCK", &self.swaysock),
            ("PATH", &self.path),
        ]
    }
}

/// Find `name` on `path` as an executable file.
pub fn which(name: &str, path: Option<&str>) -> Option<PathBuf> {
    use std::os::unix::fs::PermissionsExt;
    let path = path.unwrap_or("/usr/local/bin:/usr/bin:/bin");
    path.split(':')
        .filter(|d| !d.is_empty())
        .map(|d| Path::new(d).join(name))
        .find(|p| {
            std::fs::metadata(p)
                .map(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
                .unwrap_or(false)
        })
}

fn install_hint(helper: &str) -> String {
    let package = HELPERS
        .iter()
        .find(|(h, _)| *h == helper)
        .map(|(_, p)| *p)
        .unwrap_or(helper);
    format!("{helper} is not installed (Debian/Ubuntu: apt install {package})")
}

/// What a graphical tool asks of the display: [`Probe::ready`] answers for each. The
/// tools themselves are registered in [`super::TOOLS`] with [`Needs::Display`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Gui {
    Screenshot,
    Mouse,
    Key,
}

impl Gui {
    /// Every variant, so a test can check each is registered exactly once.
    pub const ALL: [Gui; 3] = [Gui::Screenshot, Gui::Mouse, Gui::Key];

    /// The registered tool's name.
    pub fn name(self) -> &'static str {
        gui_tools()
            .find(|(_, g)| *g == self)
            .map_or("graphical tool", |(t, _)| t.name)
    }
}

/// The registered tools that need the display, in listing order, with what each needs.
pub fn gui_tools() -> impl Iterator<Item = (&'static Tool, Gui)> {
    super::TOOLS.iter().filter_map(|t| match t.needs {
        Needs::Display(g) => Some((*t, g)),
        Needs::Nothing | Needs::Bash => None,
    })
}

/// What one probe found: the backend, its displays, helpers, and what is wrong.
#[derive(Clone, Debug)]
pub struct Probe {
    pub requested: DisplayBackend,
    pub backend: Option<Backend>,
    pub env: DisplayEnv,
    pub helpers: Vec<(&'static str, Option<PathBuf>)>,
    pub displays: Vec<Display>,
    /// Why no backend can be used at all.
    pub problem: Option<String>,
    /// Wayland globals (interface, version).
    pub globals: Vec<(String, u32)>,
    /// Things worth knowing that do not stop the tools.
    pub notes: Vec<String>,
}

impl Probe {
    pub fn helper(&self, name: &str) -> Option<&Path> {
        self.helpers
            .iter()
            .find(|(n, _)| *n == name)
            .and_then(|(_, p)| p.as_deref())
    }

    fn need(&self, name: &str) -> Result<&Path, String> {
        self.helper(name).ok_or_else(|| install_hint(name))
    }

    fn wayland_socket(&self) -> Result<PathBuf, String> {
        let wd = self.env.wayland_display.as_deref().unwrap_or("wayland-0");
        wayland::socket_path(wd, self.env.xdg_runtime_dir.as_deref())
    }

    fn has_global(&self, interface: &str) -> bool {
        self.globals.iter().any(|(i, _)| i == interface)
    }

    /// The X11 capture helper: `scrot` first (lighter), else ImageMagick `import`.
    fn x11_grabber(&self) -> Result<(&'static str, &Path), String> {
        if let Some(p) = self.helper("scrot") {
            return Ok(("scrot", p));
        }
        if let Some(p) = self.helper("import") {
            return Ok(("import", p));
        }
        Err(
            "no X11 screen grabber is installed: install scrot (apt install scrot) or \
             ImageMagick's import (apt install imagemagick)"
                .into(),
        )
    }

    /// A probe that found an X display and every helper, so each graphical tool's
    /// readiness is a fact of its own rather than the probe's one problem.
    #[cfg(test)]
    pub(crate) fn working_x11() -> Probe {
        Probe {
            requested: DisplayBackend::X11,
            backend: Some(Backend::X11),
            env: DisplayEnv::default(),
            helpers: HELPERS
                .iter()
                .map(|(h, _)| (*h, Some(PathBuf::from("/nonexistent/bin").join(h))))
                .collect(),
            displays: Vec::new(),
            problem: None,
            globals: Vec::new(),
            notes: Vec::new(),
        }
    }

    /// Ok when `tool` can run here, else what is missing and how to fix it.
    pub fn ready(&self, tool: Gui) -> Result<(), String> {
        if let Some(problem) = &self.problem {
            return Err(problem.clone());
        }
        match (self.backend, tool) {
            (None, _) => Err("no display backend".into()),
            (Some(Backend::X11), Gui::Screenshot) => self.x11_grabber().map(drop),
            (Some(Backend::X11), Gui::Mouse | Gui::Key) => self.need("xdotool").map(drop),
            (Some(Backend::Wayland), Gui::Screenshot) => {
                self.need("grim")?;
                if !self.has_global(wayland::SCREENCOPY) {
                    return Err(format!(
                        "the Wayland compositor does not offer {}, which grim needs: \
                         screenshots work on wlroots compositors (sway, labwc, wayfire, \
                         river, Hyprland), not on GNOME or KDE Wayland sessions",
                        wayland::SCREENCOPY
                    ));
                }
                Ok(())
            }
            (Some(Backend::Wayland), Gui::Mouse) => {
                if self.has_global(wayland::VIRTUAL_POINTER) {
                    Ok(())
                } else {
                    Err(wayland::no_virtual_pointer())
                }
            }
            (Some(Backend::Wayland), Gui::Key) => {
                self.need("wtype")?;
                if !self.has_global(wayland::VIRTUAL_KEYBOARD) {
                    return Err(format!(
                        "the Wayland compositor does not offer {}, which wtype needs: \
                         keys work on wlroots compositors (sway, labwc, wayfire, river, \
                         Hyprland), not on GNOME or KDE Wayland sessions",
                        wayland::VIRTUAL_KEYBOARD
                    ));
                }
                Ok(())
            }
        }
    }

    /// The display with `index`, or an error that lists the ones there are.
    pub fn display(&self, index: usize) -> Result<&Display, String> {
        self.displays.get(index).ok_or_else(|| {
            if self.displays.is_empty() {
                return format!(
                    "display {index} does not exist: the {} backend reported no displays",
                    self.backend.map(Backend::as_str).unwrap_or("display")
                );
            }
            let list: Vec<String> = self
                .displays
                .iter()
                .map(|d| format!("{} = {} {}x{}", d.index, d.name, d.width, d.height))
                .collect();
            format!(
                "display {index} does not exist; this box has {}: {}",
                self.displays.len(),
                list.join(", ")
            )
        })
    }

    /// The environment helpers run with: the daemon's, cleaned by
    /// [`super::env::child_env`], with the display variables this probe used (and a
    /// default `PATH`) in place of the daemon's own. Variables that are not UTF-8 are left
    /// out: helpers get their environment as text.
    pub fn child_env(&self, cfg: &ToolConfig) -> Vec<(String, String)> {
        let mut set: Vec<(String, String)> = self
            .env
            .pairs()
            .iter()
            .filter_map(|(name, value)| Some((name.to_string(), value.as_ref()?.clone())))
            .collect();
        if self.env.path.is_none() {
            set.push(("PATH".into(), "/usr/local/bin:/usr/bin:/bin".into()));
        }
        super::env::child_env(std::env::vars_os(), cfg, &DISPLAY_VARS, &set)
            .into_iter()
            .filter_map(|(k, v)| Some((k.into_string().ok()?, v.into_string().ok()?)))
            .collect()
    }

    /// The JSON `sys_info` and `doctor` show.
    pub fn to_json(&self) -> Value {
        let tools: serde_json::Map<String, Value> = gui_tools()
            .map(|(t, g)| {
                let v = match self.ready(g) {
                    Ok(()) => json!({"works": true}),
                    Err(why) => json!({"works": false, "why": why}),
                };
                (t.name.to_string(), v)
            })
            .collect();
        let helpers: serde_json::Map<String, Value> = self
            .helpers
            .iter()
            .map(|(n, p)| {
                (
                    n.to_string(),
                    p.as_ref()
                        .map(|p| Value::String(p.display().to_string()))
                        .unwrap_or(Value::Null),
                )
            })
            .collect();
        let env: serde_json::Map<String, Value> = self
            .env
            .pairs()
            .iter()
            .filter(|(n, _)| *n != "PATH")
            .map(|(n, v)| (n.to_string(), json!(v)))
            .collect();
        let displays = self.displays.iter().map(|d| {
            json!({
                "index": d.index, "name": d.name, "width": d.width, "height": d.height,
                "x": d.x, "y": d.y, "scale": d.scale,
            })
        });
        let mut out = json!({
            "backend": self.backend.map(Backend::as_str).unwrap_or("none"),
            "requested": backend_name(self.requested),
            "problem": self.problem,
            "notes": self.notes,
        });
        // Moved in rather than written inside `json!`, which deep-copies a `Value`:
        // sys_info builds this on every call.
        let map = out.as_object_mut().expect("json! object");
        map.insert("displays".into(), Value::Array(displays.collect()));
        map.insert("tools".into(), Value::Object(tools));
        map.insert("helpers".into(), Value::Object(helpers));
        map.insert("env".into(), Value::Object(env));
        out
    }
}

pub fn backend_name(b: DisplayBackend) -> &'static str {
    match b {
        DisplayBackend::Auto => "auto",
        DisplayBackend::X11 => "x11",
        DisplayBackend::Wayland => "wayland",
        DisplayBackend::None => "none",
    }
}

const NO_DISPLAY: &str = "no display: neither WAYLAND_DISPLAY nor DISPLAY is set in \
    handnode's environment. Run handnode inside the desktop session (for a systemd user \
    service: `systemctl --user import-environment DISPLAY WAYLAND_DISPLAY XDG_RUNTIME_DIR`), \
    or set DISPLAY=:0 (X11) or WAYLAND_DISPLAY=wayland-0 with XDG_RUNTIME_DIR (Wayland)";

/// Look at the environment and the display servers now. Cheap: environment, socket
/// existence, `PATH`, and one short query of the chosen display server.
pub fn probe_now(cfg: &ToolConfig, processes: &ProcessWatcher) -> Probe {
    let env = DisplayEnv::from_config(cfg);
    let helpers = HELPERS
        .iter()
        .map(|(h, _)| (*h, which(h, env.path.as_deref())))
        .collect();
    let mut p = Probe {
        requested: cfg.display_backend,
        backend: None,
        env,
        helpers,
        displays: Vec::new(),
        problem: None,
        globals: Vec::new(),
        notes: Vec::new(),
    };
    let timeout = cfg.display_helper_timeout;
    match cfg.display_backend {
        DisplayBackend::None => {
            p.problem = Some(
                "graphical tools are turned off on this box (--display-backend none); \
                 restart handnode with --display-backend auto to use the display"
                    .into(),
            )
        }
        DisplayBackend::Wayland => match &p.env.wayland_display {
            Some(_) => probe_wayland(&mut p, timeout),
            None => {
                p.problem = Some(
                    "--display-backend wayland but WAYLAND_DISPLAY is not set in handnode's \
                     environment: set WAYLAND_DISPLAY (e.g. wayland-0) and XDG_RUNTIME_DIR"
                        .into(),
                )
            }
        },
        DisplayBackend::X11 => match &p.env.display {
            Some(_) => probe_x11(&mut p, cfg, processes),
            None => {
                p.problem = Some(
                    "--display-backend x11 but DISPLAY is not set in handnode's environment: \
                     set DISPLAY (e.g. :0)"
                        .into(),
                )
            }
        },
        DisplayBackend::Auto => {
            // Wayland first: XWayland sets DISPLAY too, and X11 tools cannot see or
            // drive native Wayland windows.
            let wayland_socket = p
                .env
                .wayland_display
                .as_deref()
                .map(|wd| wayland::socket_path(wd, p.env.xdg_runtime_dir.as_deref()));
            match (wayland_socket, p.env.display.is_some()) {
                (Some(Ok(path)), _) if path.exists() => probe_wayland(&mut p, timeout),
                (Some(Ok(path)), true) => {
                    p.notes.push(format!(
                        "WAYLAND_DISPLAY is set but {} does not exist; using X11",
                        path.display()
                    ));
                    probe_x11(&mut p, cfg, processes)
                }
                (Some(Err(why)), true) => {
                    p.notes.push(format!("{why}; using X11"));
                    probe_x11(&mut p, cfg, processes)
                }
                (Some(Ok(path)), false) => {
                    p.backend = Some(Backend::Wayland);
                    p.problem = Some(format!(
                        "WAYLAND_DISPLAY is set but the compositor's socket {} does not exist: \
                         is the Wayland session running, and is XDG_RUNTIME_DIR right?",
                        path.display()
                    ));
                }
                (Some(Err(why)), false) => {
                    p.backend = Some(Backend::Wayland);
                    p.problem = Some(why);
                }
                (None, true) => probe_x11(&mut p, cfg, processes),
                (None, false) => p.problem = Some(NO_DISPLAY.into()),
            }
        }
    }
    p
}

fn probe_wayland(p: &mut Probe, timeout: Duration) {
    p.backend = Some(Backend::Wayland);
    let socket = match p.wayland_socket() {
        Ok(s) => s,
        Err(why) => {
            p.problem = Some(why);
            return;
        }
    };
    match wayland::survey(&socket, timeout) {
        Ok(survey) => {
            p.displays = survey.displays;
            p.globals = survey.globals;
            if p.displays.is_empty() {
                p.problem = Some(
                    "the Wayland compositor has no outputs (screens) right now: is a monitor \
                     connected and on?"
                        .into(),
                );
            }
        }
        Err(why) => p.problem = Some(why),
    }
}

fn probe_x11(p: &mut Probe, cfg: &ToolConfig, processes: &ProcessWatcher) {
    p.backend = Some(Backend::X11);
    let display = p.env.display.clone().unwrap_or_default();
    let env = p.child_env(cfg);
    let ctl = JobCtl::new();
    let query = |program: &Path, args: &[&str]| {
        helper::run_ok(
            &Helper {
                program,
                args: args.iter().map(|s| s.to_string()).collect(),
                env: &env,
                stdin: None,
                timeout: cfg.display_helper_timeout,
                cancel_kills: true,
            },
            &ctl,
            processes,
        )
        .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
        .map_err(RunError::message)
    };
    let size = if let Some(xdotool) = p.helper("xdotool") {
        Some(query(xdotool, &["getdisplaygeometry"]).map(|s| x11::parse_geometry(&s)))
    } else {
        p.helper("xdpyinfo")
            .map(|xdpyinfo| query(xdpyinfo, &[]).map(|s| x11::parse_xdpyinfo(&s)))
    };
    let (width, height) = match size {
        Some(Ok(Some(size))) => size,
        Some(Ok(None)) => {
            p.notes
                .push("could not read the X screen size; it is taken from screenshots".into());
            (0, 0)
        }
        Some(Err(why)) => {
            p.problem = Some(format!("cannot use the X display {display}: {why}"));
            return;
        }
        None => {
            if let Some(socket) = x11::local_socket(&display) {
                if !socket.exists() {
                    p.problem = Some(format!(
                        "DISPLAY={display} but there is no X server socket {}: is the X server \
                         running?",
                        socket.display()
                    ));
                    return;
                }
            }
            p.notes.push(
                "neither xdotool nor xdpyinfo is installed, so the X screen size is unknown \
                 until a screenshot is taken"
                    .into(),
            );
            (0, 0)
        }
    };
    p.displays.push(Display {
        index: 0,
        name: display,
        width,
        height,
        x: 0,
        y: 0,
        scale: 1,
        logical: None,
    });
}

// ───────────────────────────── shared state ─────────────────────────────

type Job = Box<dyn FnOnce() + Send>;

/// Per-daemon display state: the probe cache and the display thread's queue.
#[derive(Debug, Default)]
pub struct DisplayState {
    cache: TtlCache<Probe>,
    queue: Mutex<Option<Sender<Job>>>,
}

impl DisplayState {
    /// The probe if one younger than `display_probe_ttl` is at hand, without waiting (a
    /// probe in progress holds the lock): for callers that must not block.
    pub fn cached(&self, cfg: &ToolConfig) -> Option<Arc<Probe>> {
        let (probe, _) = self.cache.cached(cfg.display_probe_ttl)?;
        Some(probe)
    }

    /// The current probe, reused for `display_probe_ttl`.
    pub fn probe(&self, cfg: &ToolConfig, processes: &ProcessWatcher) -> Arc<Probe> {
        self.cache
            .get(cfg.display_probe_ttl, || probe_now(cfg, processes))
            .0
    }

    /// Queue a graphical action for the display thread, starting it on first use. Actions
    /// run one at a time, in order: two agents' clicks and keystrokes must not interleave.
    fn submit(&self, job: Job) -> Result<(), String> {
        let mut queue = self.queue.lock().unwrap_or_else(|e| e.into_inner());
        if queue.is_none() {
            let (tx, rx) = crossbeam_channel::bounded::<Job>(DISPLAY_QUEUE);
            std::thread::Builder::new()
                .name("display".into())
                .spawn(move || {
                    for job in rx.iter() {
                        // A panic is reported to the caller by the job's Completion drop.
                        if let Err(payload) =
                            std::panic::catch_unwind(std::panic::AssertUnwindSafe(job))
                        {
                            crate::containment::caught(
                                crate::containment::Site::Tool,
                                "a graphical call",
                                payload.as_ref(),
                            );
                        }
                    }
                })
                .map_err(|e| format!("cannot start the display thread: {e}"))?;
            *queue = Some(tx);
        }
        let tx = queue.as_ref().expect("queue was just set");
        match tx.try_send(job) {
            Ok(()) => Ok(()),
            Err(TrySendError::Full(_)) => Err(format!(
                "the display is busy: {DISPLAY_QUEUE} graphical calls are already waiting; \
                 retry shortly"
            )),
            Err(TrySendError::Disconnected(_)) => {
                *queue = None;
                Err("the display thread stopped; retry".into())
            }
        }
    }
}

/// Run a short query helper (e.g. `xset q`) with the probe's display environment and
/// the helper timeout; its stdout, or why it failed. For `doctor`.
pub fn query(
    probe: &Probe,
    cfg: &ToolConfig,
    processes: &ProcessWatcher,
    program: &str,
    args: &[&str],
) -> Result<String, String> {
    let path = which(program, probe.env.path.as_deref()).ok_or_else(|| install_hint(program))?;
    let env = probe.child_env(cfg);
    helper::run_ok(
        &Helper {
            program: &path,
            args: args.iter().map(|s| s.to_string()).collect(),
            env: &env,
            stdin: None,
            timeout: cfg.display_helper_timeout,
            cancel_kills: true,
        },
        &JobCtl::new(),
        processes,
    )
    .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
    .map_err(RunError::message)
}

/// Backend, displays and which graphical tools work (and why not), for `sys_info`.
pub fn facts(host: &ToolHost) -> Value {
    host.display.probe(&host.config, &host.processes).to_json()
}

/// Run `work` on the display thread with a fresh probe; its output completes `done`.
fn dispatch(
    cx: CallContext,
    done: Completion,
    tool: Gui,
    work: impl FnOnce(&Probe, &CallContext) -> ToolOutput + Send + 'static,
) {
    let host = cx.host.clone();
    let slot = Arc::new(Mutex::new(Some(done)));
    let job_slot = slot.clone();
    let job: Job = Box::new(move || {
        let Some(done) = job_slot.lock().unwrap_or_else(|e| e.into_inner()).take() else {
            return;
        };
        if cx.ctl.is_cancelled() {
            done.complete(ToolOutput::tool_error("cancelled before it started"));
            return;
        }
        let probe = cx.host.display.probe(&cx.host.config, &cx.host.processes);
        let out = match probe.ready(tool) {
            Ok(()) => work(&probe, &cx),
            Err(why) => ToolOutput::tool_error(format!("{} unavailable: {why}", tool.name())),
        };
        done.complete(out);
    });
    if let Err(why) = host.display.submit(job) {
        if let Some(done) = slot.lock().unwrap_or_else(|e| e.into_inner()).take() {
            done.complete(ToolOutput::tool_error(why));
        }
    }
}

// ───────────────────────────── arguments ─────────────────────────────

type ArgResult<T> = Result<T, String>;

/// The display tools name fields in backticks.
const NAMING: Naming = Naming::Code;

fn int(
    m: &serde_json::Map<String, Value>,
    key: &str,
    min: i64,
    max: i64,
) -> ArgResult<Option<i64>> {
    args::int(m, key, min..=max, NAMING, None)
}

fn req_int(m: &serde_json::Map<String, Value>, key: &str, min: i64, max: i64) -> ArgResult<i64> {
    args::required_int(m, key, min..=max, NAMING)
}

fn string<'a>(m: &'a serde_json::Map<String, Value>, key: &str) -> ArgResult<Option<&'a str>> {
    match m.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => Ok(Some(s)),
        Some(_) => Err(format!("`{key}` must be a string")),
    }
}

fn coord(m: &serde_json::Map<String, Value>, key: &str) -> ArgResult<u32> {
    Ok(req_int(m, key, 0, MAX_COORD as i64)? as u32)
}

fn display_index(m: &serde_json::Map<String, Value>) -> ArgResult<usize> {
    Ok(int(m, "display", 0, 1023)?.unwrap_or(0) as usize)
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    Png,
    Jpeg,
}

impl Format {
    fn mime(self) -> &'static str {
        match self {
            Format::Png => "image/png",
            Format::Jpeg => "image/jpeg",
        }
    }
    fn name(self) -> &'static str {
        match self {
            Format::Png => "png",
            Format::Jpeg => "jpeg",
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Region {
    pub x: u32,
    pub y: u32,
    pub width: u32,
    pub height: u32,
}

#[derive(Clone, Debug, PartialEq)]
pub struct ScreenshotArgs {
    pub display: usize,
    pub region: Option<Region>,
    pub scale: f64,
    pub format: Format,
    pub max_bytes: u64,
}

pub fn parse_screenshot(args: &Value) -> ArgResult<ScreenshotArgs> {
    let m = args::object(args)?.clone();
    let region = match m.get("region") {
        None | Some(Value::Null) => None,
        Some(Value::Object(r)) => Some(Region {
            x: coord(r, "x").map_err(|e| format!("region: {e}"))?,
            y: coord(r, "y").map_err(|e| format!("region: {e}"))?,
            width: req_int(r, "width", 1, MAX_COORD as i64).map_err(|e| format!("region: {e}"))?
                as u32,
            height: req_int(r, "height", 1, MAX_COORD as i64).map_err(|e| format!("region: {e}"))?
                as u32,
        }),
        Some(_) => return Err("`region` must be an object {x, y, width, height}".into()),
    };
    let scale = match m.get("scale") {
        None | Some(Value::Null) => 1.0,
        Some(v) => match v.as_f64() {
            Some(s) if (MIN_SCALE..=MAX_SCALE).contains(&s) => s,
            _ => {
                return Err(format!(
                    "`scale` must be a number from {MIN_SCALE:?} to {MAX_SCALE:?}"
                ))
            }
        },
    };
    let format = match string(&m, "format")? {
        None | Some("png") => Format::Png,
        Some("jpeg" | "jpg") => Format::Jpeg,
        Some(other) => return Err(format!("`format` must be png or jpeg, not {other:?}")),
    };
    let max_bytes = int(&m, "max_bytes", MIN_MAX_BYTES as i64, MAX_MAX_BYTES as i64)?
        .map(|n| n as u64)
        .unwrap_or(DEFAULT_MAX_BYTES);
    Ok(ScreenshotArgs {
        display: display_index(&m)?,
        region,
        scale,
        format,
        max_bytes,
    })
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Button {
    Left,
    Middle,
    Right,
}

impl Button {
    fn name(self) -> &'static str {
        match self {
            Button::Left => "left",
            Button::Middle => "middle",
            Button::Right => "right",
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MouseAction {
    Move {
        x: u32,
        y: u32,
    },
    Click {
        x: u32,
        y: u32,
        button: Button,
        count: u32,
    },
    Drag {
        x: u32,
        y: u32,
        to_x: u32,
        to_y: u32,
        button: Button,
    },
    Scroll {
        x: u32,
        y: u32,
        dx: i32,
        dy: i32,
    },
}

impl MouseAction {
    fn points(&self) -> Vec<(u32, u32)> {
        match *self {
            MouseAction::Move { x, y }
            | MouseAction::Click { x, y, .. }
            | MouseAction::Scroll { x, y, .. } => vec![(x, y)],
            MouseAction::Drag {
                x, y, to_x, to_y, ..
            } => vec![(x, y), (to_x, to_y)],
        }
    }

    fn describe(&self) -> String {
        match *self {
            MouseAction::Move { x, y } => format!("moved the pointer to ({x}, {y})"),
            MouseAction::Click {
                x,
                y,
                button,
                count,
            } => {
                let what = if count == 2 {
                    "double-clicked"
                } else {
                    "clicked"
                };
                format!("{what} {} at ({x}, {y})", button.name())
            }
            MouseAction::Drag {
                x,
                y,
                to_x,
                to_y,
                button,
            } => {
                format!(
                    "dragged with {} from ({x}, {y}) to ({to_x}, {to_y})",
                    button.name()
                )
            }
            MouseAction::Scroll { x, y, dx, dy } => {
                format!("scrolled dx={dx} dy={dy} notches at ({x}, {y})")
            }
        }
    }

    /// The virtual-pointer steps for Wayland.
    fn steps(&self) -> Vec<wayland::Step> {
        use wayland::Step;
        let code = |b: Button| match b {
            Button::Left => wayland::BTN_LEFT,
            Button::Middle => wayland::BTN_MIDDLE,
            Button::Right => wayland::BTN_RIGHT,
        };
        match *self {
            MouseAction::Move { x, y } => vec![Step::MoveTo(x, y)],
            MouseAction::Click {
                x,
                y,
                button,
                count,
            } => {
                let mut s = vec![Step::MoveTo(x, y)];
                for _ in 0..count {
                    s.push(Step::Button(code(button), true));
                    s.push(Step::Button(code(button), false));
                }
                s
            }
            MouseAction::Drag {
                x,
                y,
                to_x,
                to_y,
                button,
            } => {
                let mut s = vec![Step::MoveTo(x, y), Step::Button(code(button), true)];
                for i in 1..=DRAG_STEPS {
                    let t = f64::from(i) / f64::from(DRAG_STEPS);
                    let ix = f64::from(x) + (f64::from(to_x) - f64::from(x)) * t;
                    let iy = f64::from(y) + (f64::from(to_y) - f64::from(y)) * t;
                    s.push(Step::MoveTo(ix.round() as u32, iy.round() as u32));
                }
                s.push(Step::Button(code(button), false));
                s
            }
            MouseAction::Scroll { x, y, dx, dy } => {
                let mut s = vec![Step::MoveTo(x, y)];
                for (vertical, amount) in [(true, dy), (false, dx)] {
                    for _ in 0..amount.unsigned_abs() {
                        s.push(Step::Scroll {
                            vertical,
                            notches: amount.signum(),
                        });
                    }
                }
                s
            }
        }
    }
}

#[derive(Clone, Debug, PartialEq)]
pub struct MouseArgs {
    pub display: usize,
    pub action: MouseAction,
}

pub fn parse_mouse(args: &Value) -> ArgResult<MouseArgs> {
    let m = args::object(args)?.clone();
    let action = string(&m, "action")?
        .ok_or("`action` is required: move, click, double_click, right_click, drag or scroll")?;
    let button = match string(&m, "button")? {
        None | Some("left") => Button::Left,
        Some("middle") => Button::Middle,
        Some("right") => Button::Right,
        Some(other) => {
            return Err(format!(
                "`button` must be left, middle or right, not {other:?}"
            ))
        }
    };
    let (x, y) = (coord(&m, "x")?, coord(&m, "y")?);
    let action = match action {
        "move" => MouseAction::Move { x, y },
        "click" => MouseAction::Click { x, y, button, count: 1 },
        "double_click" => MouseAction::Click { x, y, button, count: 2 },
        "right_click" => MouseAction::Click { x, y, button: Button::Right, count: 1 },
        "drag" => MouseAction::Drag {
            x,
            y,
            to_x: coord(&m, "to_x").map_err(|e| format!("drag: {e}"))?,
            to_y: coord(&m, "to_y").map_err(|e| format!("drag: {e}"))?,
            button,
        },
        "scroll" => {
            let dx = int(&m, "dx", -MAX_SCROLL_NOTCHES, MAX_SCROLL_NOTCHES)?.unwrap_or(0) as i32;
            let dy = int(&m, "dy", -MAX_SCROLL_NOTCHES, MAX_SCROLL_NOTCHES)?.unwrap_or(0) as i32;
            if dx == 0 && dy == 0 {
                return Err("scroll needs a non-zero `dy` (positive = content down) or `dx`".into());
            }
            MouseAction::Scroll { x, y, dx, dy }
        }
        other => {
            return Err(format!(
                "`action` must be move, click, double_click, right_click, drag or scroll, not {other:?}"
            ))
        }
    };
    Ok(MouseArgs {
        display: display_index(&m)?,
        action,
    })
}

#[derive(Clone, Debug, PartialEq)]
pub enum KeyAction {
    Type(String),
    /// The chords as given (for messages) and parsed; a parse failure is kept to be
    /// answered as a tool error.
    Press(Vec<String>),
}

#[derive(Clone, Debug, PartialEq)]
pub struct KeyArgs {
    pub action: KeyAction,
    pub delay_ms: u32,
}

pub fn parse_key(args: &Value) -> ArgResult<KeyArgs> {
    let m = args::object(args)?.clone();
    let delay_ms = int(&m, "delay_ms", 0, MAX_KEY_DELAY_MS.into())?
        .map(|n| n as u32)
        .unwrap_or(DEFAULT_KEY_DELAY_MS);
    let action = match string(&m, "action")? {
        Some("type") => {
            let text = string(&m, "text")?.ok_or("type needs `text`")?;
            let chars = text.chars().count();
            if chars == 0 {
                return Err("`text` is empty".into());
            }
            if chars > MAX_TEXT_CHARS {
                return Err(format!(
                    "`text` is {chars} characters; at most {MAX_TEXT_CHARS} per call"
                ));
            }
            KeyAction::Type(text.to_string())
        }
        Some("press") => {
            let keys = match m.get("keys") {
                Some(Value::Array(a)) => a,
                Some(_) => return Err("`keys` must be an array of strings".into()),
                None => return Err("press needs `keys`, e.g. [\"ctrl+l\", \"Return\"]".into()),
            };
            if keys.is_empty() || keys.len() > MAX_KEYS {
                return Err(format!("`keys` must hold 1 to {MAX_KEYS} chords"));
            }
            let keys = keys
                .iter()
                .map(|k| k.as_str().map(str::to_string))
                .collect::<Option<Vec<_>>>()
                .ok_or("`keys` must be an array of strings")?;
            KeyAction::Press(keys)
        }
        Some(other) => return Err(format!("`action` must be type or press, not {other:?}")),
        None => return Err("`action` is required: type or press".into()),
    };
    Ok(KeyArgs { action, delay_ms })
}

// ───────────────────────────── tools ─────────────────────────────

fn helper_error(tool: Gui, e: RunError) -> ToolOutput {
    match e {
        RunError::Cancelled => ToolOutput::tool_error(format!("{} cancelled", tool.name())),
        RunError::Failed(why) => ToolOutput::tool_error(format!("{} failed: {why}", tool.name())),
    }
}

pub fn screenshot(args: Value, cx: CallContext, done: Completion) {
    let req = match parse_screenshot(&args) {
        Ok(r) => r,
        Err(e) => return done.complete(ToolOutput::InvalidParams(e)),
    };
    dispatch(cx, done, Gui::Screenshot, move |probe, cx| {
        take_screenshot(probe, cx, &req).unwrap_or_else(|e| e)
    });
}

fn capture(probe: &Probe, cx: &CallContext, display: &Display) -> Result<Vec<u8>, ToolOutput> {
    let cfg = &cx.host.config;
    let env = probe.child_env(cfg);
    let dir = helper::ScratchDir::new()
        .map_err(|e| ToolOutput::tool_error(format!("screenshot failed: no scratch space: {e}")))?;
    let file = dir.path().join("shot.png");
    let file_arg = file.display().to_string();
    let (program, args) = match probe.backend {
        Some(Backend::X11) => {
            let (name, path) = probe.x11_grabber().map_err(ToolOutput::tool_error)?;
            // With the pointer drawn in, the agent can see where mouse left it.
            let args = if name == "scrot" {
                vec!["--pointer".into(), file_arg]
            } else {
                vec![
                    "-window".into(),
                    "root".into(),
                    "-silent".into(),
                    format!("png:{file_arg}"),
                ]
            };
            (path, args)
        }
        _ => {
            let grim = probe.need("grim").map_err(ToolOutput::tool_error)?;
            let mut args = vec!["-t".into(), "png".into(), "-c".into()];
            if probe.displays.len() > 1 || !display.name.starts_with("output-") {
                args.extend(["-o".into(), display.name.clone()]);
            }
            args.push(file_arg);
            (grim, args)
        }
    };
    helper::run_ok(
        &Helper {
            program,
            args,
            env: &env,
            stdin: None,
            timeout: cfg.display_helper_timeout,
            cancel_kills: true,
        },
        &cx.ctl,
        &cx.host.processes,
    )
    .map_err(|e| helper_error(Gui::Screenshot, e))?;
    std::fs::read(&file).map_err(|e| {
        ToolOutput::tool_error(format!(
            "screenshot failed: the grabber wrote no image ({e})"
        ))
    })
}

fn take_screenshot(
    probe: &Probe,
    cx: &CallContext,
    req: &ScreenshotArgs,
) -> Result<ToolOutput, ToolOutput> {
    let display = probe.display(req.display).map_err(ToolOutput::tool_error)?;
    if let (Some(r), true) = (req.region, display.width > 0) {
        check_region(&r, display)?;
    }
    let png = capture(probe, cx, display)?;
    let (raw_w, raw_h) = image::png_size(&png).ok_or_else(|| {
        ToolOutput::tool_error("screenshot failed: the grabber did not produce a PNG")
    })?;
    // The coordinate space is the display's size; a grabber that renders at another
    // size (fractional scaling) is resampled to it so image pixels and mouse agree.
    let (space_w, space_h) = if display.width > 0 {
        (display.width, display.height)
    } else {
        (raw_w, raw_h)
    };
    let region = req.region.unwrap_or(Region {
        x: 0,
        y: 0,
        width: space_w,
        height: space_h,
    });
    if display.width == 0 {
        let known = Display {
            width: space_w,
            height: space_h,
            ..display.clone()
        };
        check_region(&region, &known)?;
    }
    let cap = cx.host.config.max_screenshot_edge.max(1);
    let mut out_w = ((f64::from(region.width) * req.scale).round() as u32).max(1);
    let mut out_h = ((f64::from(region.height) * req.scale).round() as u32).max(1);
    if out_w.max(out_h) > cap {
        let shrink = f64::from(cap) / f64::from(out_w.max(out_h));
        out_w = ((f64::from(out_w) * shrink).round() as u32).clamp(1, cap);
        out_h = ((f64::from(out_h) * shrink).round() as u32).clamp(1, cap);
    }
    let untouched = (raw_w, raw_h) == (space_w, space_h)
        && (region.width, region.height) == (space_w, space_h)
        && (out_w, out_h) == (space_w, space_h)
        && req.format == Format::Png;
    let bytes = if untouched {
        png
    } else {
        let fail = |e: String| ToolOutput::tool_error(format!("screenshot failed: {e}"));
        let mut img = image::decode_png(&png).map_err(fail)?;
        if (img.width, img.height) != (space_w, space_h) {
            img = img.resize(space_w, space_h);
        }
        if (region.width, region.height) != (space_w, space_h) {
            img = img.crop(region.x, region.y, region.width, region.height);
        }
        img = img.resize(out_w, out_h);
        match req.format {
            Format::Png => img.encode_png().map_err(fail)?,
            Format::Jpeg => img.encode_jpeg().map_err(fail)?,
        }
    };
    if bytes.len() as u64 > req.max_bytes {
        return Err(ToolOutput::tool_error(format!(
            "screenshot is {} bytes ({out_w}x{out_h} {}), over max_bytes {}: pass format \
             \"jpeg\", a smaller scale, a region, or a larger max_bytes (up to {MAX_MAX_BYTES})",
            bytes.len(),
            req.format.name(),
            req.max_bytes
        )));
    }
    let scale = f64::from(out_w) / f64::from(region.width);
    let scale = (scale * 10_000.0).round() / 10_000.0;
    let text = format!(
        "Screenshot of display {} ({}, {space_w}x{space_h}): image {out_w}x{out_h} {} ({} bytes) \
         of region x={} y={} {}x{} at scale {scale}. mouse uses the display's {space_w}x{space_h} \
         pixel space: x = {} + image_x / {scale}, y = {} + image_y / {scale}.",
        display.index,
        display.name,
        req.format.name(),
        bytes.len(),
        region.x,
        region.y,
        region.width,
        region.height,
        region.x,
        region.y,
    );
    Ok(ToolOutput::Result(json!({
        "content": [
            {"type": "image", "data": base64::engine::general_purpose::STANDARD.encode(&bytes),
             "mimeType": req.format.mime()},
            {"type": "text", "text": text},
        ],
        "structuredContent": {
            "display": display.index,
            "display_name": display.name,
            "width": out_w,
            "height": out_h,
            "format": req.format.name(),
            "bytes": bytes.len(),
            "scale": scale,
            "region": {"x": region.x, "y": region.y, "width": region.width, "height": region.height},
            "coordinate_space": {"width": space_w, "height": space_h},
        },
    })))
}

fn check_region(r: &Region, d: &Display) -> Result<(), ToolOutput> {
    let fits = u64::from(r.x) + u64::from(r.width) <= u64::from(d.width)
        && u64::from(r.y) + u64::from(r.height) <= u64::from(d.height);
    if fits {
        return Ok(());
    }
    Err(ToolOutput::tool_error(format!(
        "region x={} y={} {}x{} does not fit on display {} ({}), which is {}x{} pixels",
        r.x, r.y, r.width, r.height, d.index, d.name, d.width, d.height
    )))
}

pub fn mouse(args: Value, cx: CallContext, done: Completion) {
    let req = match parse_mouse(&args) {
        Ok(r) => r,
        Err(e) => return done.complete(ToolOutput::InvalidParams(e)),
    };
    dispatch(cx, done, Gui::Mouse, move |probe, cx| {
        move_mouse(probe, cx, &req).unwrap_or_else(|e| e)
    });
}

fn move_mouse(probe: &Probe, cx: &CallContext, req: &MouseArgs) -> Result<ToolOutput, ToolOutput> {
    let display = probe.display(req.display).map_err(ToolOutput::tool_error)?;
    if display.width == 0 || display.height == 0 {
        return Err(ToolOutput::tool_error(
            "mouse unavailable: the screen size is unknown, so the point cannot be checked",
        ));
    }
    for (x, y) in req.action.points() {
        if x >= display.width || y >= display.height {
            return Err(ToolOutput::tool_error(format!(
                "point ({x}, {y}) is off the screen: display {} ({}) is {}x{} pixels, so x must \
                 be 0-{} and y 0-{}",
                display.index,
                display.name,
                display.width,
                display.height,
                display.width - 1,
                display.height - 1
            )));
        }
    }
    let cfg = &cx.host.config;
    match probe.backend {
        Some(Backend::X11) => {
            if req.display != 0 {
                return Err(ToolOutput::tool_error("X11 has only display 0"));
            }
            let env = probe.child_env(cfg);
            let xdotool = probe.need("xdotool").map_err(ToolOutput::tool_error)?;
            helper::run_ok(
                &Helper {
                    program: xdotool,
                    args: x11::mouse_args(&req.action),
                    env: &env,
                    stdin: None,
                    timeout: cfg.display_helper_timeout,
                    // Never leave a button held by killing xdotool between down and up.
                    cancel_kills: false,
                },
                &cx.ctl,
                &cx.host.processes,
            )
            .map_err(|e| helper_error(Gui::Mouse, e))?;
        }
        _ => {
            let socket = probe.wayland_socket().map_err(ToolOutput::tool_error)?;
            let steps = req.action.steps();
            let cancelled = || cx.ctl.is_cancelled();
            wayland::pointer(
                &socket,
                display,
                &steps,
                cfg.display_helper_timeout,
                &cancelled,
            )
            .map_err(|e| match e {
                wayland::PointerError::Cancelled => ToolOutput::tool_error("mouse cancelled"),
                wayland::PointerError::Failed(why) => {
                    ToolOutput::tool_error(format!("mouse failed: {why}"))
                }
            })?;
        }
    }
    let text = format!(
        "{} on display {} ({}x{}).",
        capitalize(&req.action.describe()),
        display.index,
        display.width,
        display.height
    );
    Ok(ToolOutput::Result(json!({
        "content": [{"type": "text", "text": text}],
        "structuredContent": {
            "display": display.index,
            "coordinate_space": {"width": display.width, "height": display.height},
        },
    })))
}

fn capitalize(s: &str) -> String {
    let mut c = s.chars();
    match c.next() {
        Some(f) => f.to_uppercase().chain(c).collect(),
        None => String::new(),
    }
}

pub fn key(args: Value, cx: CallContext, done: Completion) {
    let req = match parse_key(&args) {
        Ok(r) => r,
        Err(e) => return done.complete(ToolOutput::InvalidParams(e)),
    };
    // Unknown key names are answered before anything is pressed.
    let chords = match &req.action {
        KeyAction::Press(keys) => match keys
            .iter()
            .map(|k| keys::parse_chord(k))
            .collect::<Result<Vec<_>, _>>()
        {
            Ok(c) => c,
            Err(e) => return done.complete(ToolOutput::tool_error(e)),
        },
        KeyAction::Type(_) => Vec::new(),
    };
    if let KeyAction::Type(text) = &req.action {
        let chars = text.chars().count() as u64;
        let needed_ms = chars * u64::from(req.delay_ms);
        let limit_ms = cx.limits.max_run_secs * 1000;
        if needed_ms > limit_ms {
            return done.complete(ToolOutput::tool_error(format!(
                "typing {chars} characters at delay_ms {} takes {} s, over this call's {} s \
                 limit: lower delay_ms or split the text",
                req.delay_ms,
                needed_ms / 1000,
                cx.limits.max_run_secs
            )));
        }
    }
    dispatch(cx, done, Gui::Key, move |probe, cx| {
        press_keys(probe, cx, &req, &chords).unwrap_or_else(|e| e)
    });
}

fn press_keys(
    probe: &Probe,
    cx: &CallContext,
    req: &KeyArgs,
    chords: &[keys::Chord],
) -> Result<ToolOutput, ToolOutput> {
    let cfg = &cx.host.config;
    let env = probe.child_env(cfg);
    let wayland = probe.backend == Some(Backend::Wayland);
    let program = probe
        .need(if wayland { "wtype" } else { "xdotool" })
        .map_err(ToolOutput::tool_error)?;
    let per_key = Duration::from_millis(u64::from(req.delay_ms) + u64::from(WTYPE_SETTLE_MS));
    let run = |args: Vec<String>, keystrokes: usize| {
        helper::run_ok(
            &Helper {
                program,
                args,
                env: &env,
                stdin: None,
                timeout: cfg.display_helper_timeout + per_key * keystrokes as u32,
                // A cancel waits for the current piece (about a second at most).
                cancel_kills: false,
            },
            &cx.ctl,
            &cx.host.processes,
        )
        .map_err(|e| helper_error(Gui::Key, e))
    };
    let per_piece = keys_per_piece(req.delay_ms);
    let deadline = Instant::now() + Duration::from_secs(cx.limits.max_run_secs);
    let (unit, total) = match &req.action {
        KeyAction::Press(_) => ("key chords", chords.len()),
        KeyAction::Type(text) => ("characters", text.chars().count()),
    };
    let stop = |done: usize| -> Option<ToolOutput> {
        if cx.ctl.is_cancelled() {
            return Some(ToolOutput::tool_error(format!(
                "key cancelled after {done} of {total} {unit}"
            )));
        }
        if Instant::now() >= deadline {
            return Some(ToolOutput::tool_error(format!(
                "stopped after {done} of {total} {unit}: the call reached its {} s limit; \
                 send the rest in another call",
                cx.limits.max_run_secs
            )));
        }
        None
    };
    let mut done = 0;
    match &req.action {
        KeyAction::Press(names) => {
            for piece in chords.chunks(per_piece) {
                if let Some(out) = stop(done) {
                    return Err(out);
                }
                let args = if wayland {
                    let mut a = vec!["-s".to_string(), WTYPE_SETTLE_MS.to_string()];
                    for (i, chord) in piece.iter().enumerate() {
                        if i > 0 {
                            a.extend(["-s".into(), req.delay_ms.to_string()]);
                        }
                        a.extend(chord.wtype());
                    }
                    a
                } else {
                    x11::key_args(piece, req.delay_ms)
                };
                run(args, piece.len())?;
                done += piece.len();
            }
            Ok(ToolOutput::text(format!("Pressed {}.", names.join(", "))))
        }
        KeyAction::Type(text) => {
            let chars: Vec<char> = text.chars().collect();
            for piece in chars.chunks(per_piece) {
                if let Some(out) = stop(done) {
                    return Err(out);
                }
                let piece: String = piece.iter().collect();
                let args = if wayland {
                    wtype_type_args(&piece, req.delay_ms)
                } else {
                    x11::type_args(&piece, req.delay_ms)
                };
                run(args, piece.chars().count())?;
                done += piece.chars().count();
            }
            Ok(ToolOutput::text(format!("Typed {done} characters.")))
        }
    }
}

/// Keystrokes per helper run: as many as take about `KEY_PIECE_MS`, at most
/// `TYPE_CHUNK_CHARS`, so a cancel waits at most about that long.
fn keys_per_piece(delay_ms: u32) -> usize {
    (KEY_PIECE_MS / delay_ms.max(1)).clamp(1, TYPE_CHUNK_CHARS as u32) as usize
}

/// `wtype` arguments to type `chunk`. Newlines are sent as Return taps: as text,
/// xkbcommon maps "\n" to Linefeed, which terminals do not treat as Enter. wtype reads an
/// argument starting with '-' as an option (and everything after "--" as text, which would
/// swallow the Return taps), so leading dashes of a line are tapped as `minus` instead.
fn wtype_type_args(chunk: &str, delay_ms: u32) -> Vec<String> {
    let mut args = vec![
        "-s".to_string(),
        WTYPE_SETTLE_MS.to_string(),
        "-d".into(),
        delay_ms.to_string(),
    ];
    let mut lines = chunk.split('\n').peekable();
    while let Some(line) = lines.next() {
        let rest = line.trim_start_matches('-');
        for _ in 0..line.len() - rest.len() {
            args.extend(["-k".into(), "minus".into()]);
        }
        if !rest.is_empty() {
            args.push(rest.into());
        }
        if lines.peek().is_some() {
            args.extend(["-k".into(), "Return".into()]);
        }
    }
    args
}

/// Map (key, value) pairs of a test's environment into the override `ToolConfig` takes.
pub fn env_override<'a>(
    pairs: impl IntoIterator<Item = (&'a str, &'a str)>,
) -> BTreeMap<String, String> {
    pairs
        .into_iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

#[cfg(test)]
mod tests;
