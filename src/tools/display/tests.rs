use super::*;

/// [`super::probe_now`] with a process watcher of the test's own.
fn probe_now(cfg: &ToolConfig) -> Probe {
    super::probe_now(cfg, &ProcessWatcher::start().unwrap())
}

#[test]
fn screenshot_args_and_their_bounds() {
    let ok = parse_screenshot(
        &json!({"display": 1, "region": {"x": 1, "y": 2, "width": 3, "height": 4},
        "scale": 0.5, "format": "jpeg", "max_bytes": 2048, "unknown": true}),
    )
    .unwrap();
    assert_eq!(ok.display, 1);
    assert_eq!(
        ok.region,
        Some(Region {
            x: 1,
            y: 2,
            width: 3,
            height: 4
        })
    );
    assert_eq!(
        (ok.scale, ok.format, ok.max_bytes),
        (0.5, Format::Jpeg, 2048)
    );
    let d = parse_screenshot(&Value::Null).unwrap();
    assert_eq!(
        (d.display, d.scale, d.format, d.max_bytes),
        (0, 1.0, Format::Png, DEFAULT_MAX_BYTES)
    );
    for (bad, needle) in [
        (json!({"scale": 2.0001}), "scale"),
        (json!({"scale": 0.0999}), "scale"),
        (json!({"scale": "big"}), "scale"),
        (json!({"format": "gif"}), "format"),
        (json!({"max_bytes": MAX_MAX_BYTES + 1}), "max_bytes"),
        (json!({"max_bytes": MIN_MAX_BYTES - 1}), "max_bytes"),
        (json!({"display": -1}), "display"),
        (json!({"display": 1.5}), "display"),
        (
            json!({"region": {"x": 0, "y": 0, "width": 0, "height": 1}}),
            "width",
        ),
        (json!({"region": {"x": 0, "y": 0, "width": 1}}), "height"),
        (json!({"region": [1, 2]}), "region"),
        (json!([1]), "object"),
    ] {
        let err = parse_screenshot(&bad).unwrap_err();
        assert!(err.contains(needle), "{bad}: {err}");
    }
    assert!(parse_screenshot(&json!({"scale": 2, "max_bytes": MAX_MAX_BYTES})).is_ok());
}

#[test]
fn mouse_args_and_their_bounds() {
    let m = parse_mouse(
        &json!({"action": "drag", "x": 1, "y": 2, "to_x": 3, "to_y": 4, "button": "middle"}),
    )
    .unwrap();
    assert_eq!(
        m.action,
        MouseAction::Drag {
            x: 1,
            y: 2,
            to_x: 3,
            to_y: 4,
            button: Button::Middle
        }
    );
    let m = parse_mouse(&json!({"action": "double_click", "x": 5, "y": 6})).unwrap();
    assert_eq!(
        m.action,
        MouseAction::Click {
            x: 5,
            y: 6,
            button: Button::Left,
            count: 2
        }
    );
    let m = parse_mouse(&json!({"action": "scroll", "x": 0, "y": 0, "dy": MAX_SCROLL_NOTCHES}))
        .unwrap();
    assert_eq!(
        m.action,
        MouseAction::Scroll {
            x: 0,
            y: 0,
            dx: 0,
            dy: 100
        }
    );
    for (bad, needle) in [
        (json!({"x": 1, "y": 1}), "action"),
        (json!({"action": "hover", "x": 1, "y": 1}), "action"),
        (json!({"action": "move", "y": 1}), "`x` is required"),
        (json!({"action": "move", "x": -1, "y": 1}), "`x` must be"),
        (
            json!({"action": "move", "x": MAX_COORD + 1, "y": 1}),
            "`x` must be",
        ),
        (json!({"action": "drag", "x": 1, "y": 1, "to_x": 2}), "to_y"),
        (json!({"action": "scroll", "x": 1, "y": 1}), "non-zero"),
        (
            json!({"action": "scroll", "x": 1, "y": 1, "dy": MAX_SCROLL_NOTCHES + 1}),
            "dy",
        ),
        (
            json!({"action": "click", "x": 1, "y": 1, "button": "fourth"}),
            "button",
        ),
    ] {
        let err = parse_mouse(&bad).unwrap_err();
        assert!(err.contains(needle), "{bad}: {err}");
    }
}

#[test]
fn wayland_scroll_steps_follow_the_sign() {
    let steps = MouseAction::Scroll {
        x: 1,
        y: 2,
        dx: -1,
        dy: 2,
    }
    .steps();
    assert_eq!(
        steps,
        [
            wayland::Step::MoveTo(1, 2),
            wayland::Step::Scroll {
                vertical: true,
                notches: 1
            },
            wayland::Step::Scroll {
                vertical: true,
                notches: 1
            },
            wayland::Step::Scroll {
                vertical: false,
                notches: -1
            },
        ]
    );
    let click = MouseAction::Click {
        x: 0,
        y: 0,
        button: Button::Right,
        count: 2,
    }
    .steps();
    assert_eq!(click.len(), 5);
    assert_eq!(click[1], wayland::Step::Button(wayland::BTN_RIGHT, true));
}

#[test]
fn key_args_and_their_bounds() {
    let k = parse_key(&json!({"action": "type", "text": "hi"})).unwrap();
    assert_eq!(
        (k.action, k.delay_ms),
        (KeyAction::Type("hi".into()), DEFAULT_KEY_DELAY_MS)
    );
    let k = parse_key(&json!({"action": "press", "keys": ["ctrl+c"], "delay_ms": 0})).unwrap();
    assert_eq!(k.action, KeyAction::Press(vec!["ctrl+c".into()]));
    let long = "é".repeat(MAX_TEXT_CHARS + 1);
    let many: Vec<&str> = vec!["a"; MAX_KEYS + 1];
    for (bad, needle) in [
        (json!({"action": "type"}), "text"),
        (json!({"action": "type", "text": ""}), "empty"),
        (json!({"action": "type", "text": long}), "at most"),
        (json!({"action": "press"}), "keys"),
        (json!({"action": "press", "keys": []}), "keys"),
        (json!({"action": "press", "keys": many}), "keys"),
        (json!({"action": "press", "keys": [1]}), "strings"),
        (
            json!({"action": "press", "keys": ["a"], "delay_ms": MAX_KEY_DELAY_MS + 1}),
            "delay_ms",
        ),
        (json!({"action": "sing"}), "action"),
    ] {
        let err = parse_key(&bad).unwrap_err();
        assert!(err.contains(needle), "{bad}: {err}");
    }
    assert!(parse_key(&json!({"action": "type", "text": "é".repeat(MAX_TEXT_CHARS)})).is_ok());
}

#[test]
fn wtype_text_keeps_dashes_text_and_newlines_enter() {
    assert_eq!(
        wtype_type_args("--help me\n-x\n", 5),
        [
            "-s", "50", "-d", "5", "-k", "minus", "-k", "minus", "help me", "-k", "Return", "-k",
            "minus", "x", "-k", "Return"
        ]
    );
    assert_eq!(
        wtype_type_args("plain", 0),
        ["-s", "50", "-d", "0", "plain"]
    );
}

fn cfg_with(env: &[(&str, &str)], backend: DisplayBackend) -> ToolConfig {
    ToolConfig {
        display_backend: backend,
        display_env: Some(env_override(env.iter().copied())),
        ..ToolConfig::default()
    }
}

#[test]
fn no_display_says_what_is_missing() {
    let p = probe_now(&cfg_with(&[("PATH", "/nonexistent")], DisplayBackend::Auto));
    assert_eq!(p.backend, None);
    for tool in Gui::ALL {
        let err = p.ready(tool).unwrap_err();
        assert!(err.contains("neither WAYLAND_DISPLAY nor DISPLAY"), "{err}");
    }
    let p = probe_now(&cfg_with(&[("DISPLAY", ":0")], DisplayBackend::None));
    assert!(p
        .ready(Gui::Mouse)
        .unwrap_err()
        .contains("--display-backend none"));
    let p = probe_now(&cfg_with(&[], DisplayBackend::X11));
    assert!(p
        .ready(Gui::Key)
        .unwrap_err()
        .contains("DISPLAY is not set"));
    let p = probe_now(&cfg_with(&[], DisplayBackend::Wayland));
    assert!(p
        .ready(Gui::Key)
        .unwrap_err()
        .contains("WAYLAND_DISPLAY is not set"));
    let p = probe_now(&cfg_with(
        &[("WAYLAND_DISPLAY", "wayland-7")],
        DisplayBackend::Auto,
    ));
    assert!(p
        .ready(Gui::Screenshot)
        .unwrap_err()
        .contains("XDG_RUNTIME_DIR"));
    let p = probe_now(&cfg_with(
        &[
            ("WAYLAND_DISPLAY", "wayland-7"),
            ("XDG_RUNTIME_DIR", "/nonexistent"),
        ],
        DisplayBackend::Auto,
    ));
    assert!(p
        .ready(Gui::Screenshot)
        .unwrap_err()
        .contains("/nonexistent/wayland-7 does not exist"));
}

#[test]
fn x11_without_helpers_names_the_packages() {
    // A local display number whose socket cannot exist, and a PATH with no helpers.
    let p = probe_now(&cfg_with(
        &[("DISPLAY", ":987654"), ("PATH", "/nonexistent")],
        DisplayBackend::X11,
    ));
    assert_eq!(p.backend, Some(Backend::X11));
    assert!(p
        .ready(Gui::Mouse)
        .unwrap_err()
        .contains("/tmp/.X11-unix/X987654"));
    // The same with a display that is not local: the probe cannot tell it is dead, so the
    // answer is about the helpers.
    let p = probe_now(&cfg_with(
        &[("DISPLAY", "remote.invalid:0"), ("PATH", "/nonexistent")],
        DisplayBackend::X11,
    ));
    let err = p.ready(Gui::Mouse).unwrap_err();
    assert!(
        err.contains("xdotool is not installed (Debian/Ubuntu: apt install xdotool)"),
        "{err}"
    );
    let err = p.ready(Gui::Screenshot).unwrap_err();
    assert!(
        err.contains("apt install scrot") && err.contains("imagemagick"),
        "{err}"
    );
    let facts = p.to_json();
    assert_eq!(facts["backend"], "x11");
    assert_eq!(facts["tools"]["key"]["works"], false);
    assert_eq!(facts["helpers"]["xdotool"], Value::Null);
}

#[test]
fn child_env_drops_secrets_and_handnode_vars() {
    let cfg = ToolConfig {
        scrub_env: vec!["HOME".into()],
        scrub_values: vec![crate::base::secret::Secret::new(
            std::env::var("PATH").unwrap_or_default(),
        )],
        display_env: Some(env_override([("DISPLAY", ":5"), ("PATH", "/x")])),
        ..ToolConfig::default()
    };
    let p = probe_now(&ToolConfig {
        display_backend: DisplayBackend::None,
        ..cfg.clone()
    });
    let env = p.child_env(&cfg);
    let get = |k: &str| {
        env.iter()
            .filter(|(n, _)| n == k)
            .map(|(_, v)| v.as_str())
            .collect::<Vec<_>>()
    };
    assert_eq!(get("DISPLAY"), [":5"]);
    assert_eq!(get("PATH"), ["/x"]);
    assert!(get("HOME").is_empty());
    assert!(get("WAYLAND_DISPLAY").is_empty());
    assert!(env.iter().all(|(k, _)| !k.starts_with("HANDNODE_")));
}

#[test]
fn which_finds_only_executables() {
    let dir = helper::ScratchDir::new().unwrap();
    let exe = dir.path().join("tool");
    std::fs::write(&exe, "#!/bin/sh\n").unwrap();
    let path = dir.path().display().to_string();
    assert_eq!(which("tool", Some(&path)), None);
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&exe, std::fs::Permissions::from_mode(0o755)).unwrap();
    assert_eq!(
        which("tool", Some(&format!("/nonexistent:{path}"))),
        Some(exe)
    );
}

#[test]
fn probe_is_cached_for_the_ttl() {
    let state = DisplayState::default();
    let w = ProcessWatcher::start().unwrap();
    let mut cfg = cfg_with(&[], DisplayBackend::None);
    cfg.display_probe_ttl = Duration::from_secs(3600);
    let a = state.probe(&cfg, &w);
    assert!(Arc::ptr_eq(&a, &state.probe(&cfg, &w)));
    cfg.display_probe_ttl = Duration::ZERO;
    assert!(!Arc::ptr_eq(&a, &state.probe(&cfg, &w)));
}

#[test]
fn key_pieces_last_about_a_second() {
    assert_eq!(keys_per_piece(0), TYPE_CHUNK_CHARS);
    assert_eq!(keys_per_piece(12), TYPE_CHUNK_CHARS);
    assert_eq!(keys_per_piece(100), 10);
    assert_eq!(keys_per_piece(MAX_KEY_DELAY_MS), 1);
}
