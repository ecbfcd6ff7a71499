//! The graphical tools themselves: capturing and encoding a screenshot, moving and clicking
//! the pointer, typing and pressing keys, on whichever backend the probe found.

use super::*;

pub(super) fn helper_error(tool: Gui, e: RunError) -> ToolOutput {
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

pub(super) fn capture(
    probe: &Probe,
    cx: &CallContext,
    display: &Display,
) -> Result<Vec<u8>, ToolOutput> {
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

pub(super) fn take_screenshot(
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

pub(super) fn check_region(r: &Region, d: &Display) -> Result<(), ToolOutput> {
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

pub(super) fn move_mouse(
    probe: &Probe,
    cx: &CallContext,
    req: &MouseArgs,
) -> Result<ToolOutput, ToolOutput> {
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

pub(super) fn capitalize(s: &str) -> String {
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

pub(super) fn press_keys(
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
    // A take-over of the wheel (§23) stops the typing between pieces, as a cancel does.
    let wheel = super::boxview::call_wheel(cx);
    let stop = |done: usize| -> Option<ToolOutput> {
        if cx.ctl.is_cancelled() {
            return Some(ToolOutput::tool_error(format!(
                "key cancelled after {done} of {total} {unit}"
            )));
        }
        if let Err(why) = wheel.may_drive(cx.ctl.wheel_epoch()) {
            return Some(ToolOutput::tool_error(format!(
                "key stopped after {done} of {total} {unit}: {why}"
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
pub(super) fn keys_per_piece(delay_ms: u32) -> usize {
    (KEY_PIECE_MS / delay_ms.max(1)).clamp(1, TYPE_CHUNK_CHARS as u32) as usize
}

/// `wtype` arguments to type `chunk`. Newlines are sent as Return taps: as text,
/// xkbcommon maps "\n" to Linefeed, which terminals do not treat as Enter. wtype reads an
/// argument starting with '-' as an option (and everything after "--" as text, which would
/// swallow the Return taps), so leading dashes of a line are tapped as `minus` instead.
pub(super) fn wtype_type_args(chunk: &str, delay_ms: u32) -> Vec<String> {
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

/// A JPEG of display `display` (the call's), its long edge at most `long_edge`, for the journal (§22):
/// queued on the display's thread, so it shows the screen after the calls before it there.
/// `deliver` gets the JPEG and its size, or why there is none.
pub fn thumbnail(
    cx: CallContext,
    display: usize,
    long_edge: u32,
    deliver: impl FnOnce(Result<(Vec<u8>, u32, u32), String>) + Send + 'static,
) {
    type Made = Result<(Vec<u8>, u32, u32), String>;
    let slot: Arc<Mutex<Option<Made>>> = Arc::new(Mutex::new(None));
    let filled = Arc::clone(&slot);
    let done = Completion::new(move |output| {
        let got = slot.lock().unwrap_or_else(|e| e.into_inner()).take();
        deliver(got.unwrap_or_else(|| Err(output_text(&output))));
    });
    dispatch(cx, done, Gui::Screenshot, move |probe, cx| {
        let made = (|| {
            let display = probe.display(display)?;
            let png = capture(probe, cx, display).map_err(|o| output_text(&o))?;
            jpeg_thumbnail(&png, long_edge)
        })();
        *filled.lock().unwrap_or_else(|e| e.into_inner()) = Some(made);
        ToolOutput::text("taken")
    });
}

/// A PNG as a JPEG whose long edge is at most `long_edge`: its size too.
pub fn jpeg_thumbnail(png: &[u8], long_edge: u32) -> Result<(Vec<u8>, u32, u32), String> {
    let img = image::decode_png(png)?;
    let (w, h) = fit(img.width, img.height, long_edge);
    // Most of a large shrink by block means (integer sums), the rest filtered: a thumbnail
    // is cheap, and still averages text instead of aliasing it.
    let k = (img.width / w).min(img.height / h).max(1);
    let img = img.shrink_box(k);
    let img = if (w, h) == (img.width, img.height) {
        img
    } else {
        img.resize(w, h)
    };
    Ok((img.encode_jpeg()?, w, h))
}

/// `width`×`height` scaled down (never up) so its long edge is at most `edge`.
pub fn fit(width: u32, height: u32, edge: u32) -> (u32, u32) {
    let long = width.max(height);
    if long <= edge || long == 0 {
        return (width.max(1), height.max(1));
    }
    let scale = f64::from(edge) / f64::from(long);
    (
        ((f64::from(width) * scale).round() as u32).clamp(1, edge),
        ((f64::from(height) * scale).round() as u32).clamp(1, edge),
    )
}

/// The text of an error output, for a thumbnail's failure.
fn output_text(output: &ToolOutput) -> String {
    match output {
        ToolOutput::Result(v) => v["content"][0]["text"]
            .as_str()
            .unwrap_or("no image")
            .to_string(),
        ToolOutput::InvalidParams(m) | ToolOutput::NotApproved(m) => m.clone(),
        ToolOutput::RpcError { message, .. } => message.clone(),
        _ => "no image".into(),
    }
}
