//! Parsing and bounding the graphical tools' arguments (`screenshot`, `mouse`, `key`).

use super::*;

pub(super) type ArgResult<T> = Result<T, String>;

/// The display tools name fields in backticks.
pub(super) const NAMING: Naming = Naming::Code;

pub(super) fn int(
    m: &serde_json::Map<String, Value>,
    key: &str,
    min: i64,
    max: i64,
) -> ArgResult<Option<i64>> {
    args::int(m, key, min..=max, NAMING, None)
}

pub(super) fn req_int(
    m: &serde_json::Map<String, Value>,
    key: &str,
    min: i64,
    max: i64,
) -> ArgResult<i64> {
    args::required_int(m, key, min..=max, NAMING)
}

pub(super) fn string<'a>(
    m: &'a serde_json::Map<String, Value>,
    key: &str,
) -> ArgResult<Option<&'a str>> {
    match m.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => Ok(Some(s)),
        Some(_) => Err(format!("`{key}` must be a string")),
    }
}

pub(super) fn coord(m: &serde_json::Map<String, Value>, key: &str) -> ArgResult<u32> {
    Ok(req_int(m, key, 0, MAX_COORD as i64)? as u32)
}

pub(super) fn display_index(m: &serde_json::Map<String, Value>) -> ArgResult<usize> {
    Ok(int(m, "display", 0, 1023)?.unwrap_or(0) as usize)
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    Png,
    Jpeg,
}

impl Format {
    pub(super) fn mime(self) -> &'static str {
        match self {
            Format::Png => "image/png",
            Format::Jpeg => "image/jpeg",
        }
    }
    pub(super) fn name(self) -> &'static str {
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
    pub(super) fn name(self) -> &'static str {
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
    pub(super) fn points(&self) -> Vec<(u32, u32)> {
        match *self {
            MouseAction::Move { x, y }
            | MouseAction::Click { x, y, .. }
            | MouseAction::Scroll { x, y, .. } => vec![(x, y)],
            MouseAction::Drag {
                x, y, to_x, to_y, ..
            } => vec![(x, y), (to_x, to_y)],
        }
    }

    pub(super) fn describe(&self) -> String {
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
    pub(super) fn steps(&self) -> Vec<wayland::Step> {
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
