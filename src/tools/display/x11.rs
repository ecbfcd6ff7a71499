//! The X11 backend: `xdotool` for input and the screen size, `scrot` or ImageMagick
//! `import` for capture, all under `DISPLAY`. `xdotool mousemove --sync` is never used: to
//! the pointer's current position it waits ~15 s for a motion event that never comes.

use super::keys::Chord;

/// Left, middle, right as X button numbers.
pub fn button_number(button: super::Button) -> u32 {
    match button {
        super::Button::Left => 1,
        super::Button::Middle => 2,
        super::Button::Right => 3,
    }
}

/// Parse `xdotool getdisplaygeometry` ("1280 800").
pub fn parse_geometry(stdout: &str) -> Option<(u32, u32)> {
    let mut it = stdout.split_whitespace().map(str::parse::<u32>);
    match (it.next(), it.next()) {
        (Some(Ok(w)), Some(Ok(h))) if w > 0 && h > 0 => Some((w, h)),
        _ => None,
    }
}

/// Parse the "dimensions:    1280x800 pixels" line of `xdpyinfo`.
pub fn parse_xdpyinfo(stdout: &str) -> Option<(u32, u32)> {
    let line = stdout
        .lines()
        .find(|l| l.trim_start().starts_with("dimensions:"))?;
    let dims = line.split_whitespace().nth(1)?;
    let (w, h) = dims.split_once('x')?;
    Some((w.parse().ok()?, h.parse().ok()?))
}

/// The local X socket for DISPLAY=":N" / ":N.S" / "unix:N"; `None` for TCP displays.
pub fn local_socket(display: &str) -> Option<std::path::PathBuf> {
    let (host, rest) = display.rsplit_once(':')?;
    if !(host.is_empty() || host == "unix") {
        return None;
    }
    let number = rest.split('.').next()?;
    number.parse::<u32>().ok()?;
    Some(std::path::PathBuf::from(format!(
        "/tmp/.X11-unix/X{number}"
    )))
}

/// `xdotool` arguments for a pointer action.
pub fn mouse_args(action: &super::MouseAction) -> Vec<String> {
    use super::MouseAction as A;
    let mv = |x: u32, y: u32| vec!["mousemove".to_string(), x.to_string(), y.to_string()];
    match *action {
        A::Move { x, y } => mv(x, y),
        A::Click {
            x,
            y,
            button,
            count,
        } => {
            let mut a = mv(x, y);
            a.extend(["click".into(), "--repeat".into(), count.to_string()]);
            a.extend(["--delay".into(), "80".into()]);
            a.push(button_number(button).to_string());
            a
        }
        A::Drag {
            x,
            y,
            to_x,
            to_y,
            button,
        } => {
            let b = button_number(button).to_string();
            let mut a = mv(x, y);
            a.extend(["mousedown".into(), b.clone()]);
            // Intermediate positions, so applications see a drag rather than a jump.
            for i in 1..=super::DRAG_STEPS {
                let t = f64::from(i) / f64::from(super::DRAG_STEPS);
                let ix = f64::from(x) + (f64::from(to_x) - f64::from(x)) * t;
                let iy = f64::from(y) + (f64::from(to_y) - f64::from(y)) * t;
                a.extend(mv(ix.round() as u32, iy.round() as u32));
            }
            a.extend(["mouseup".into(), b]);
            a
        }
        A::Scroll { x, y, dx, dy } => {
            let mut a = mv(x, y);
            // Wheel buttons: 4 up, 5 down, 6 left, 7 right. Positive dy = content down.
            for (amount, neg, pos) in [(dy, 4, 5), (dx, 6, 7)] {
                if amount != 0 {
                    let button = if amount > 0 { pos } else { neg };
                    a.extend([
                        "click".into(),
                        "--repeat".into(),
                        amount.unsigned_abs().to_string(),
                        "--delay".into(),
                        "30".into(),
                        button.to_string(),
                    ]);
                }
            }
            a
        }
    }
}

/// `xdotool key` arguments for a list of chords.
pub fn key_args(chords: &[Chord], delay_ms: u32) -> Vec<String> {
    let mut a = vec![
        "key".to_string(),
        "--clearmodifiers".into(),
        "--delay".into(),
        delay_ms.to_string(),
    ];
    a.extend(chords.iter().map(Chord::xdotool));
    a
}

/// `xdotool type` arguments for one chunk of text.
pub fn type_args(chunk: &str, delay_ms: u32) -> Vec<String> {
    vec![
        "type".into(),
        "--clearmodifiers".into(),
        "--delay".into(),
        delay_ms.to_string(),
        "--".into(),
        chunk.into(),
    ]
}

#[cfg(test)]
mod tests {
    use super::super::{Button, MouseAction};
    use super::*;

    #[test]
    fn parsers() {
        assert_eq!(parse_geometry("1280 800\n"), Some((1280, 800)));
        assert_eq!(parse_geometry("garbage"), None);
        let info = "name of display:    :99\nscreen #0:\n  dimensions:    1280x800 pixels (339x212 millimeters)\n";
        assert_eq!(parse_xdpyinfo(info), Some((1280, 800)));
        assert_eq!(local_socket(":99"), Some("/tmp/.X11-unix/X99".into()));
        assert_eq!(local_socket(":0.1"), Some("/tmp/.X11-unix/X0".into()));
        assert_eq!(local_socket("localhost:10.0"), None);
        assert_eq!(local_socket("nonsense"), None);
    }

    #[test]
    fn mouse_argv_never_syncs_and_scrolls_the_right_way() {
        let click = mouse_args(&MouseAction::Click {
            x: 10,
            y: 20,
            button: Button::Right,
            count: 2,
        });
        assert_eq!(
            click,
            [
                "mousemove",
                "10",
                "20",
                "click",
                "--repeat",
                "2",
                "--delay",
                "80",
                "3"
            ]
        );
        let scroll = mouse_args(&MouseAction::Scroll {
            x: 1,
            y: 2,
            dx: -1,
            dy: 3,
        });
        assert_eq!(
            scroll,
            [
                "mousemove",
                "1",
                "2",
                "click",
                "--repeat",
                "3",
                "--delay",
                "30",
                "5",
                "click",
                "--repeat",
                "1",
                "--delay",
                "30",
                "6"
            ]
        );
        let drag = mouse_args(&MouseAction::Drag {
            x: 0,
            y: 0,
            to_x: 100,
            to_y: 50,
            button: Button::Left,
        });
        assert_eq!(&drag[..5], ["mousemove", "0", "0", "mousedown", "1"]);
        assert_eq!(
            &drag[drag.len() - 5..],
            ["mousemove", "100", "50", "mouseup", "1"]
        );
        for args in [click, scroll, drag] {
            assert!(!args.iter().any(|a| a == "--sync"));
        }
    }
}
