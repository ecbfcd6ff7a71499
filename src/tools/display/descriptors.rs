//! The three graphical tools' descriptors (`screenshot`, `mouse`, `key`): name, class,
//! description, input schema and profiles, and the argument bounds the schemas state.

use super::*;

/// The three desktop tools, in listing order: a family the docs name together.
pub static SCREEN_TOOLS: [&Tool; 3] = [&SCREENSHOT, &MOUSE, &KEY];

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
    reach: crate::tools::Reach::Nothing,
    changes_screen: false,
    // `apps` too: it only reads, shows no more than desktop_snapshot already tells (the
    // whole desktop's text), and lets the agent see what desktop_act did (§17).
    profiles: &[
        Profile::Owner,
        Profile::Desktop,
        Profile::Observe,
        Profile::Apps,
    ],
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
    reach: crate::tools::Reach::Nothing,
    changes_screen: true,
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
    reach: crate::tools::Reach::Nothing,
    changes_screen: true,
    profiles: &[Profile::Owner, Profile::Desktop],
};

pub(super) fn screenshot_schema() -> Value {
    json!({
        "type": "object",
        "properties": {
            "display": {"type": "integer", "minimum": 0, "description": "Display index from sys_info (default 0)."},
            "region": {
                "type": "object",
                "description": "Only this rectangle, in the display's pixel space.",
                "properties": {
                    "x": {"type": "integer", "minimum": 0},
                    "y": {"type": "integer", "minimum": 0},
                    "width": {"type": "integer", "minimum": 1},
                    "height": {"type": "integer", "minimum": 1}
                },
                "required": ["x", "y", "width", "height"]
            },
            "scale": {"type": "number", "minimum": MIN_SCALE, "maximum": MAX_SCALE, "default": 1,
                      "description": "Resize factor before the long-edge cap."},
            "format": {"type": "string", "enum": ["png", "jpeg"], "default": "png"},
            "max_bytes": {"type": "integer", "minimum": MIN_MAX_BYTES, "maximum": MAX_MAX_BYTES,
                          "default": DEFAULT_MAX_BYTES, "description": "Largest image (bytes, before base64)."}
        }
    })
}

pub(super) fn mouse_schema() -> Value {
    json!({
        "type": "object",
        "properties": {
            "action": {"type": "string", "enum": ["move", "click", "double_click", "right_click", "drag", "scroll"]},
            "x": {"type": "integer", "minimum": 0, "description": "Pixels from the display's left edge."},
            "y": {"type": "integer", "minimum": 0, "description": "Pixels from the display's top edge."},
            "to_x": {"type": "integer", "minimum": 0, "description": "drag: end point x."},
            "to_y": {"type": "integer", "minimum": 0, "description": "drag: end point y."},
            "dx": {"type": "integer", "minimum": -MAX_SCROLL_NOTCHES, "maximum": MAX_SCROLL_NOTCHES,
                   "description": "scroll: wheel notches; positive scrolls the content right."},
            "dy": {"type": "integer", "minimum": -MAX_SCROLL_NOTCHES, "maximum": MAX_SCROLL_NOTCHES,
                   "description": "scroll: wheel notches; positive scrolls the content down (wheel towards you), negative up."},
            "button": {"type": "string", "enum": ["left", "middle", "right"], "default": "left"},
            "display": {"type": "integer", "minimum": 0, "description": "Display index (default 0)."}
        },
        "required": ["action", "x", "y"]
    })
}

pub(super) fn key_schema() -> Value {
    json!({
        "type": "object",
        "properties": {
            "action": {"type": "string", "enum": ["type", "press"]},
            "text": {"type": "string", "maxLength": MAX_TEXT_CHARS, "description": "type: the text to type."},
            "keys": {"type": "array", "items": {"type": "string"}, "minItems": 1, "maxItems": MAX_KEYS,
                     "description": "press: chords such as \"ctrl+c\", \"Return\", \"super+shift+4\"."},
            "delay_ms": {"type": "integer", "minimum": 0, "maximum": MAX_KEY_DELAY_MS,
                         "default": DEFAULT_KEY_DELAY_MS, "description": "Pause between keystrokes."}
        },
        "required": ["action"]
    })
}

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
