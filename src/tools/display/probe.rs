//! Finding the display backend: which of Wayland (wlroots) or X11 is usable, its displays,
//! which helpers are installed and which graphical tools work (and why not), for the tools,
//! `sys_info` and `doctor`.

use super::*;

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
pub(super) const HELPERS: &[(&str, &str)] = &[
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
    /// The X cookie file (an own display's, §19; else the session's, if set).
    pub xauthority: Option<String>,
    /// The session bus, where `org.a11y.Bus.GetAddress` names the accessibility bus (an own
    /// display's private one, §19).
    pub dbus_session_bus_address: Option<String>,
    /// The accessibility bus itself, when the session says where it is.
    pub at_spi_bus_address: Option<String>,
}

pub(super) const DISPLAY_VARS: [&str; 8] = [
    "DISPLAY",
    "WAYLAND_DISPLAY",
    "XDG_RUNTIME_DIR",
    "SWAYSOCK",
    "PATH",
    "XAUTHORITY",
    "DBUS_SESSION_BUS_ADDRESS",
    "AT_SPI_BUS_ADDRESS",
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
            xauthority: get("XAUTHORITY"),
            dbus_session_bus_address: get("DBUS_SESSION_BUS_ADDRESS"),
            at_spi_bus_address: get("AT_SPI_BUS_ADDRESS"),
        }
    }

    pub fn pairs(&self) -> [(&'static str, &Option<String>); 8] {
        [
            ("DISPLAY", &self.display),
            ("WAYLAND_DISPLAY", &self.wayland_display),
            ("XDG_RUNTIME_DIR", &self.xdg_runtime_dir),
            ("SWAYSOCK", &self.swaysock),
            ("PATH", &self.path),
            ("XAUTHORITY", &self.xauthority),
            ("DBUS_SESSION_BUS_ADDRESS", &self.dbus_session_bus_address),
            ("AT_SPI_BUS_ADDRESS", &self.at_spi_bus_address),
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

pub(super) fn install_hint(helper: &str) -> String {
    let package = HELPERS
        .iter()
        .find(|(h, _)| *h == helper)
        .map(|(_, p)| *p)
        .unwrap_or(helper);
    format!("{helper} is not installed (Debian/Ubuntu: apt install {package})")
}

/// Why the accessibility tools cannot work without a session bus.
pub const NO_SESSION_BUS: &str = "neither AT_SPI_BUS_ADDRESS nor DBUS_SESSION_BUS_ADDRESS is set: \
    the accessibility bus is found through the desktop session's D-Bus session bus (start the \
    daemon inside the session, or set DBUS_SESSION_BUS_ADDRESS)";

/// What a graphical tool asks of the display: [`Probe::ready`] answers for each. The
/// tools themselves are registered in [`super::TOOLS`] with [`Needs::Display`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Gui {
    Screenshot,
    Mouse,
    Key,
    /// Reading the accessibility tree (`desktop_snapshot`).
    A11ySnapshot,
    /// Acting on an accessible element (`desktop_act`).
    A11yAct,
}

impl Gui {
    /// Every variant, so a test can check each is registered exactly once.
    pub const ALL: [Gui; 5] = [
        Gui::Screenshot,
        Gui::Mouse,
        Gui::Key,
        Gui::A11ySnapshot,
        Gui::A11yAct,
    ];

    /// The registered tool's name.
    pub fn name(self) -> &'static str {
        gui_tools()
            .find(|(_, g)| *g == self)
            .map_or("graphical tool", |(t, _)| t.name)
    }
}

/// The registered tools that need the display, in listing order, with what each needs.
pub fn gui_tools() -> impl Iterator<Item = (&'static Tool, Gui)> {
    crate::tools::registered()
        .iter()
        .filter_map(|t| match t.needs {
            Needs::Display(g) => Some((*t, g)),
            Needs::Nothing | Needs::Bash | Needs::Screen => None,
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

    pub(super) fn need(&self, name: &str) -> Result<&Path, String> {
        self.helper(name).ok_or_else(|| install_hint(name))
    }

    pub(super) fn wayland_socket(&self) -> Result<PathBuf, String> {
        let wd = self.env.wayland_display.as_deref().unwrap_or("wayland-0");
        wayland::socket_path(wd, self.env.xdg_runtime_dir.as_deref())
    }

    pub(super) fn has_global(&self, interface: &str) -> bool {
        self.globals.iter().any(|(i, _)| i == interface)
    }

    /// The X11 capture helper: `scrot` first (lighter), else ImageMagick `import`.
    pub(super) fn x11_grabber(&self) -> Result<(&'static str, &Path), String> {
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
            env: DisplayEnv {
                dbus_session_bus_address: Some("unix:path=/nonexistent/bus".into()),
                ..DisplayEnv::default()
            },
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
            (Some(_), Gui::A11ySnapshot | Gui::A11yAct) => {
                if self.env.at_spi_bus_address.is_none()
                    && self.env.dbus_session_bus_address.is_none()
                {
                    return Err(NO_SESSION_BUS.into());
                }
                Ok(())
            }
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
    /// [`crate::tools::env::child_env`], with the display variables this probe used (and a
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
        crate::tools::env::child_env(std::env::vars_os(), cfg, &DISPLAY_VARS, &set)
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
            // The bus addresses say where sockets are, which is the accessibility
            // section's business (`desktop_snapshot`), not the display's.
            .filter(|(n, _)| {
                !matches!(
                    *n,
                    "PATH" | "DBUS_SESSION_BUS_ADDRESS" | "AT_SPI_BUS_ADDRESS"
                )
            })
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

pub(super) const NO_DISPLAY: &str = "no display: neither WAYLAND_DISPLAY nor DISPLAY is set in \
    handnode's environment. Run handnode inside the desktop session (for a systemd user \
    service: `systemctl --user import-environment DISPLAY WAYLAND_DISPLAY XDG_RUNTIME_DIR`), \
    or set DISPLAY=:0 (X11) or WAYLAND_DISPLAY=wayland-0 with XDG_RUNTIME_DIR (Wayland)";

/// Look at the environment and the display servers now. Cheap: environment, socket
/// existence, `PATH`, and one short query of the chosen display server.
pub fn probe_now(cfg: &ToolConfig, processes: &ProcessWatcher) -> Probe {
    probe_with(
        cfg,
        DisplayEnv::from_config(cfg),
        cfg.display_backend,
        processes,
    )
}

/// [`probe_now`] for a given environment and backend: a grant's own display (§19) is
/// probed as X11 with its own variables.
pub fn probe_with(
    cfg: &ToolConfig,
    env: DisplayEnv,
    requested: DisplayBackend,
    processes: &ProcessWatcher,
) -> Probe {
    let helpers = HELPERS
        .iter()
        .map(|(h, _)| (*h, which(h, env.path.as_deref())))
        .collect();
    let mut p = Probe {
        requested,
        backend: None,
        env,
        helpers,
        displays: Vec::new(),
        problem: None,
        globals: Vec::new(),
        notes: Vec::new(),
    };
    let timeout = cfg.display_helper_timeout;
    match requested {
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

pub(super) fn probe_wayland(p: &mut Probe, timeout: Duration) {
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

pub(super) fn probe_x11(p: &mut Probe, cfg: &ToolConfig, processes: &ProcessWatcher) {
    p.backend = Some(Backend::X11);
    let display = p.env.display.clone().unwrap_or_default();
    let env = p.child_env(cfg);
    let ctl = CallCtl::new();
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
