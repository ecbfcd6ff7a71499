//! The wlroots Wayland backend: outputs and protocol support surveyed over a pure-Rust
//! `wayland-client` connection, pointer control through `zwlr_virtual_pointer_v1`
//! (works on sway, labwc, wayfire alike), capture with `grim` and keys with `wtype`.

use std::os::unix::net::UnixStream;
use std::path::Path;
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use rustix::event::{poll, PollFd, PollFlags, Timespec};
use wayland_client::protocol::{wl_callback, wl_output, wl_pointer, wl_registry};
use wayland_client::{Connection, Dispatch, EventQueue, QueueHandle, WEnum};
use wayland_protocols::xdg::xdg_output::zv1::client::{zxdg_output_manager_v1, zxdg_output_v1};
use wayland_protocols_wlr::virtual_pointer::v1::client::{
    zwlr_virtual_pointer_manager_v1, zwlr_virtual_pointer_v1,
};

use super::Display;

/// Linux input event codes (linux/input-event-codes.h).
pub const BTN_LEFT: u32 = 0x110;
pub const BTN_RIGHT: u32 = 0x111;
pub const BTN_MIDDLE: u32 = 0x112;
/// Scroll distance of one wheel notch, in the protocol's surface units (libinput's value).
const WHEEL_STEP: f64 = 15.0;

/// Globals this backend cares about, by interface name.
pub const VIRTUAL_POINTER: &str = "zwlr_virtual_pointer_manager_v1";
pub const SCREENCOPY: &str = "zwlr_screencopy_manager_v1";
pub const VIRTUAL_KEYBOARD: &str = "zwp_virtual_keyboard_manager_v1";
const XDG_OUTPUT: &str = "zxdg_output_manager_v1";

/// What the compositor offers.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Survey {
    pub displays: Vec<Display>,
    /// (interface, version) of every global.
    pub globals: Vec<(String, u32)>,
}

#[derive(Debug, Default)]
struct OutputInfo {
    global: u32,
    proxy: Option<wl_output::WlOutput>,
    name: Option<String>,
    mode: Option<(i32, i32)>,
    transform_swaps: bool,
    scale: i32,
    logical_position: Option<(i32, i32)>,
    logical_size: Option<(i32, i32)>,
}

impl OutputInfo {
    /// The output's size in pixels, as a screenshot of it has.
    fn pixel_size(&self) -> Option<(u32, u32)> {
        let (w, h) = match (self.mode, self.logical_size) {
            (Some((w, h)), _) if self.transform_swaps => (h, w),
            (Some(size), _) => size,
            (None, Some((w, h))) => (w * self.scale.max(1), h * self.scale.max(1)),
            (None, None) => return None,
        };
        Some((u32::try_from(w).ok()?, u32::try_from(h).ok()?))
    }
}

#[derive(Debug, Default)]
struct State {
    globals: Vec<(u32, String, u32)>,
    outputs: Vec<OutputInfo>,
    synced: bool,
}

impl Dispatch<wl_registry::WlRegistry, ()> for State {
    fn event(
        state: &mut Self,
        _: &wl_registry::WlRegistry,
        event: wl_registry::Event,
        _: &(),
        _: &Connection,
        _: &QueueHandle<Self>,
    ) {
        if let wl_registry::Event::Global {
            name,
            interface,
            version,
        } = event
        {
            state.globals.push((name, interface, version));
        }
    }
}

impl Dispatch<wl_callback::WlCallback, ()> for State {
    fn event(
        state: &mut Self,
        _: &wl_callback::WlCallback,
        _: wl_callback::Event,
        _: &(),
        _: &Connection,
        _: &QueueHandle<Self>,
    ) {
        state.synced = true;
    }
}

impl Dispatch<wl_output::WlOutput, usize> for State {
    fn event(
        state: &mut Self,
        _: &wl_output::WlOutput,
        event: wl_output::Event,
        index: &usize,
        _: &Connection,
        _: &QueueHandle<Self>,
    ) {
        let Some(out) = state.outputs.get_mut(*index) else {
            return;
        };
        match event {
            wl_output::Event::Geometry { transform, .. } => {
                use wl_output::Transform as T;
                out.transform_swaps = matches!(
                    transform,
                    WEnum::Value(T::_90 | T::_270 | T::Flipped90 | T::Flipped270)
                );
            }
            wl_output::Event::Mode {
                flags,
                width,
                height,
                ..
            } => {
                let current = match flags {
                    WEnum::Value(f) => f.contains(wl_output::Mode::Current),
                    WEnum::Unknown(_) => false,
                };
                if current {
                    out.mode = Some((width, height));
                }
            }
            wl_output::Event::Scale { factor } => out.scale = factor,
            wl_output::Event::Name { name } => out.name = Some(name),
            _ => {}
        }
    }
}

impl Dispatch<zxdg_output_v1::ZxdgOutputV1, usize> for State {
    fn event(
        state: &mut Self,
        _: &zxdg_output_v1::ZxdgOutputV1,
        event: zxdg_output_v1::Event,
        index: &usize,
        _: &Connection,
        _: &QueueHandle<Self>,
    ) {
        let Some(out) = state.outputs.get_mut(*index) else {
            return;
        };
        match event {
            zxdg_output_v1::Event::LogicalPosition { x, y } => out.logical_position = Some((x, y)),
            zxdg_output_v1::Event::LogicalSize { width, height } => {
                out.logical_size = Some((width, height))
            }
            zxdg_output_v1::Event::Name { name } if out.name.is_none() => out.name = Some(name),
            _ => {}
        }
    }
}

wayland_client::delegate_noop!(State: ignore zxdg_output_manager_v1::ZxdgOutputManagerV1);
wayland_client::delegate_noop!(State: ignore zwlr_virtual_pointer_manager_v1::ZwlrVirtualPointerManagerV1);
wayland_client::delegate_noop!(State: ignore zwlr_virtual_pointer_v1::ZwlrVirtualPointerV1);

/// One connection to the compositor with a deadline on every wait.
struct Session {
    conn: Connection,
    queue: EventQueue<State>,
    state: State,
    registry: wl_registry::WlRegistry,
    deadline: Instant,
    socket: String,
}

impl Session {
    fn open(socket: &Path, timeout: Duration) -> Result<Session, String> {
        let shown = socket.display().to_string();
        let stream = UnixStream::connect(socket)
            .map_err(|e| format!("cannot connect to the Wayland compositor at {shown}: {e}"))?;
        let conn = Connection::from_socket(stream)
            .map_err(|e| format!("cannot talk to the Wayland compositor at {shown}: {e}"))?;
        let queue = conn.new_event_queue();
        let registry = conn.display().get_registry(&queue.handle(), ());
        let mut session = Session {
            conn,
            queue,
            state: State::default(),
            registry,
            deadline: Instant::now() + timeout,
            socket: shown,
        };
        session.roundtrip()?;
        Ok(session)
    }

    fn lost(&self, e: impl std::fmt::Display) -> String {
        format!("the Wayland compositor at {} failed: {e}", self.socket)
    }

    /// Send everything queued and wait until the compositor has handled it, or the
    /// deadline passes.
    fn roundtrip(&mut self) -> Result<(), String> {
        self.state.synced = false;
        self.conn.display().sync(&self.queue.handle(), ());
        loop {
            self.queue
                .dispatch_pending(&mut self.state)
                .map_err(|e| self.lost(e))?;
            if self.state.synced {
                return Ok(());
            }
            self.queue.flush().map_err(|e| self.lost(e))?;
            let Some(guard) = self.queue.prepare_read() else {
                continue;
            };
            let now = Instant::now();
            if now >= self.deadline {
                return Err(format!(
                    "the Wayland compositor at {} did not answer in time",
                    self.socket
                ));
            }
            let left = self.deadline - now;
            let ts = Timespec {
                tv_sec: left.as_secs().try_into().unwrap_or(i64::MAX),
                tv_nsec: left.subsec_nanos().into(),
            };
            let ready = {
                let fd = guard.connection_fd();
                let mut fds = [PollFd::new(&fd, PollFlags::IN)];
                match poll(&mut fds, Some(&ts)) {
                    Ok(n) => n > 0,
                    Err(rustix::io::Errno::INTR) => false,
                    Err(e) => return Err(self.lost(e)),
                }
            };
            if ready {
                match guard.read() {
                    Ok(_) => {}
                    Err(wayland_client::backend::WaylandError::Io(e))
                        if e.kind() == std::io::ErrorKind::WouldBlock => {}
                    Err(e) => return Err(self.lost(e)),
                }
            }
        }
    }

    fn global(&self, interface: &str) -> Option<(u32, u32)> {
        self.state
            .globals
            .iter()
            .find(|(_, i, _)| i == interface)
            .map(|(name, _, version)| (*name, *version))
    }

    /// Bind every output (and its xdg_output for names and layout) and collect their facts.
    fn bind_outputs(&mut self) -> Result<(), String> {
        let qh = self.queue.handle();
        let outputs: Vec<(u32, u32)> = self
            .state
            .globals
            .iter()
            .filter(|(_, i, _)| i == "wl_output")
            .map(|(n, _, v)| (*n, *v))
            .collect();
        for (index, (name, version)) in outputs.into_iter().enumerate() {
            let proxy: wl_output::WlOutput = self.registry.bind(name, version.min(4), &qh, index);
            self.state.outputs.push(OutputInfo {
                global: name,
                proxy: Some(proxy),
                scale: 1,
                ..OutputInfo::default()
            });
        }
        if let Some((name, version)) = self.global(XDG_OUTPUT) {
            let manager: zxdg_output_manager_v1::ZxdgOutputManagerV1 =
                self.registry.bind(name, version.min(3), &qh, ());
            for (index, out) in self.state.outputs.iter().enumerate() {
                if let Some(proxy) = &out.proxy {
                    manager.get_xdg_output(proxy, &qh, index);
                }
            }
        }
        self.roundtrip()
    }

    fn displays(&self) -> Vec<Display> {
        self.state
            .outputs
            .iter()
            .enumerate()
            .filter_map(|(index, out)| {
                let (width, height) = out.pixel_size()?;
                let (x, y) = out.logical_position.unwrap_or((0, 0));
                Some(Display {
                    index,
                    name: out
                        .name
                        .clone()
                        .unwrap_or_else(|| format!("output-{}", out.global)),
                    width,
                    height,
                    x,
                    y,
                    scale: out.scale,
                    logical: out.logical_size,
                })
            })
            .collect()
    }
}

/// The socket path for `WAYLAND_DISPLAY` (absolute, or relative to `XDG_RUNTIME_DIR`).
pub fn socket_path(
    wayland_display: &str,
    runtime_dir: Option<&str>,
) -> Result<std::path::PathBuf, String> {
    let p = Path::new(wayland_display);
    if p.is_absolute() {
        return Ok(p.to_path_buf());
    }
    match runtime_dir {
        Some(dir) if !dir.is_empty() => Ok(Path::new(dir).join(p)),
        _ => Err(format!(
            "WAYLAND_DISPLAY={wayland_display} is set but XDG_RUNTIME_DIR is not, so the \
             compositor's socket cannot be found: set XDG_RUNTIME_DIR (usually /run/user/<uid>)"
        )),
    }
}

/// Connect, list globals and outputs.
pub fn survey(socket: &Path, timeout: Duration) -> Result<Survey, String> {
    let mut session = Session::open(socket, timeout)?;
    session.bind_outputs()?;
    Ok(Survey {
        displays: session.displays(),
        globals: session
            .state
            .globals
            .iter()
            .map(|(_, i, v)| (i.clone(), *v))
            .collect(),
    })
}

/// One pointer event group, sent as one frame.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Step {
    /// Absolute position in the display's pixel space.
    MoveTo(u32, u32),
    Button(u32, bool),
    /// Wheel notches; positive = content moves down / right (wheel towards the user).
    Scroll {
        vertical: bool,
        notches: i32,
    },
}

/// Maps a display pixel to `motion_absolute`'s (x, y, x_extent, y_extent).
type ToAbsolute = dyn Fn(u32, u32) -> (u32, u32, u32, u32);

fn now_ms() -> u32 {
    static START: OnceLock<Instant> = OnceLock::new();
    // Wrapping is what the protocol expects of a millisecond timestamp.
    START.get_or_init(Instant::now).elapsed().as_millis() as u32
}

/// Why a pointer run stopped early.
#[derive(Debug, PartialEq, Eq)]
pub enum PointerError {
    Cancelled,
    Failed(String),
}

impl From<String> for PointerError {
    fn from(s: String) -> Self {
        PointerError::Failed(s)
    }
}

/// Drive one virtual pointer on `display` through `steps`, all on the same device so a
/// drag's press and release belong together. `cancelled` is asked between steps; a
/// cancel releases any held button before the device goes away.
pub fn pointer(
    socket: &Path,
    display: &Display,
    steps: &[Step],
    timeout: Duration,
    cancelled: &dyn Fn() -> bool,
) -> Result<(), PointerError> {
    let mut session = Session::open(socket, timeout)?;
    let Some((manager_name, manager_version)) = session.global(VIRTUAL_POINTER) else {
        return Err(no_virtual_pointer().into());
    };
    session.bind_outputs()?;
    let qh = session.queue.handle();
    let manager: zwlr_virtual_pointer_manager_v1::ZwlrVirtualPointerManagerV1 = session
        .registry
        .bind(manager_name, manager_version.min(2), &qh, ());
    let target = session
        .state
        .outputs
        .iter()
        .find(|o| o.name.as_deref() == Some(display.name.as_str()))
        .or_else(|| session.state.outputs.get(display.index))
        .ok_or_else(|| format!("display {} ({}) is gone", display.index, display.name))
        .map_err(PointerError::Failed)?;
    // With an output, absolute motion spans exactly that output, so the display's pixel
    // space maps proportionally whatever its scale. Version 1 spans the whole layout.
    let (vp, map): (_, Box<ToAbsolute>) = if manager_version >= 2 && target.proxy.is_some() {
        let (w, h) = (display.width, display.height);
        (
            manager.create_virtual_pointer_with_output(None, target.proxy.as_ref(), &qh, ()),
            Box::new(move |x, y| (x, y, w, h)),
        )
    } else {
        let layout = layout_box(&session.state.outputs);
        let (ox, oy) = target.logical_position.unwrap_or((0, 0));
        let (lw, lh) = target
            .logical_size
            .unwrap_or((display.width as i32, display.height as i32));
        let (dw, dh) = (display.width.max(1), display.height.max(1));
        (
            manager.create_virtual_pointer(None, &qh, ()),
            Box::new(move |x, y| {
                let lx = f64::from(ox - layout.0) + f64::from(x) * f64::from(lw) / f64::from(dw);
                let ly = f64::from(oy - layout.1) + f64::from(y) * f64::from(lh) / f64::from(dh);
                (
                    lx.max(0.0) as u32,
                    ly.max(0.0) as u32,
                    layout.2.max(1),
                    layout.3.max(1),
                )
            }),
        )
    };
    let mut held: Vec<u32> = Vec::new();
    for step in steps {
        if cancelled() {
            for button in held.drain(..) {
                vp.button(now_ms(), button, wl_pointer::ButtonState::Released);
                vp.frame();
            }
            vp.destroy();
            session.roundtrip()?;
            return Err(PointerError::Cancelled);
        }
        let t = now_ms();
        match *step {
            Step::MoveTo(x, y) => {
                let (x, y, xe, ye) = map(x, y);
                vp.motion_absolute(t, x, y, xe, ye);
            }
            Step::Button(button, pressed) => {
                let state = if pressed {
                    wl_pointer::ButtonState::Pressed
                } else {
                    wl_pointer::ButtonState::Released
                };
                held.retain(|b| *b != button);
                if pressed {
                    held.push(button);
                }
                vp.button(t, button, state);
            }
            Step::Scroll { vertical, notches } => {
                let axis = if vertical {
                    wl_pointer::Axis::VerticalScroll
                } else {
                    wl_pointer::Axis::HorizontalScroll
                };
                vp.axis_source(wl_pointer::AxisSource::Wheel);
                vp.axis_discrete(t, axis, WHEEL_STEP * f64::from(notches), notches);
            }
        }
        vp.frame();
        // One round trip per step keeps press/release and motion in order as separate
        // input events rather than one burst the client may coalesce.
        session.roundtrip()?;
    }
    vp.destroy();
    manager.destroy();
    Ok(session.roundtrip()?)
}

/// The bounding box (x, y, width, height) of every output in layout coordinates.
fn layout_box(outputs: &[OutputInfo]) -> (i32, i32, u32, u32) {
    let mut boxes = outputs.iter().filter_map(|o| {
        let (x, y) = o.logical_position?;
        let (w, h) = o.logical_size?;
        Some((x, y, x + w, y + h))
    });
    let Some(first) = boxes.next() else {
        return (0, 0, 0, 0);
    };
    let (x0, y0, x1, y1) = boxes.fold(first, |a, b| {
        (a.0.min(b.0), a.1.min(b.1), a.2.max(b.2), a.3.max(b.3))
    });
    (x0, y0, (x1 - x0) as u32, (y1 - y0) as u32)
}

pub fn no_virtual_pointer() -> String {
    format!(
        "the Wayland compositor does not offer {VIRTUAL_POINTER}, so the pointer cannot be \
         driven: mouse works on wlroots compositors (sway, labwc, wayfire, river, Hyprland), \
         not on GNOME or KDE Wayland sessions"
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn socket_path_rules() {
        assert_eq!(
            socket_path("wayland-1", Some("/run/user/1000")).unwrap(),
            Path::new("/run/user/1000/wayland-1")
        );
        assert_eq!(socket_path("/tmp/w", None).unwrap(), Path::new("/tmp/w"));
        assert!(socket_path("wayland-0", None)
            .unwrap_err()
            .contains("XDG_RUNTIME_DIR"));
    }

    #[test]
    fn pixel_size_follows_transform_and_scale() {
        let mut o = OutputInfo {
            mode: Some((1920, 1080)),
            scale: 2,
            ..OutputInfo::default()
        };
        assert_eq!(o.pixel_size(), Some((1920, 1080)));
        o.transform_swaps = true;
        assert_eq!(o.pixel_size(), Some((1080, 1920)));
        let o = OutputInfo {
            logical_size: Some((960, 540)),
            scale: 2,
            ..OutputInfo::default()
        };
        assert_eq!(o.pixel_size(), Some((1920, 1080)));
    }

    #[test]
    fn layout_box_spans_all_outputs() {
        let outs = [
            OutputInfo {
                logical_position: Some((0, 0)),
                logical_size: Some((1280, 720)),
                ..OutputInfo::default()
            },
            OutputInfo {
                logical_position: Some((1280, -100)),
                logical_size: Some((800, 600)),
                ..OutputInfo::default()
            },
        ];
        assert_eq!(layout_box(&outs), (0, -100, 2080, 820));
    }

    #[test]
    fn a_missing_socket_is_a_clear_error() {
        let err = survey(Path::new("/nonexistent/wayland-9"), Duration::from_secs(1)).unwrap_err();
        assert!(err.contains("cannot connect to the Wayland compositor at /nonexistent/wayland-9"));
    }
}
