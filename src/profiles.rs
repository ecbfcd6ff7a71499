//! Profiles and tool classes: the profile names, the class → annotation table, and which
//! upstream (browser) tools each profile allows. Which *local* tools a profile allows is
//! declared by each tool ([`crate::tools::Tool::profiles`]).
//!
//! Profiles are allow-lists. A tool not placed in a profile is absent from that profile,
//! so a new tool is denied until someone places it on purpose. `owner` and `desktop`
//! reach the box's shell (directly through `bash` or through the GUI with `mouse`/`key`)
//! and are declared shell-equivalent below. `observe` and `browser` are boundaries:
//! `browser` holds no local tool and only the classified `observe`/`act` browser tools
//! (minus `browser_evaluate`) of [`BROWSER_TOOL_CLASSES`], served by a throwaway browser
//! of the grant's own (`crate::browser`).

use std::fmt;
use std::str::FromStr;

/// Who sees which tools. Parsed only from the exact names in [`Profile::ALL`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Profile {
    Owner,
    Desktop,
    Observe,
    /// Browser tools only, each grant with a throwaway browser of its own (contract §12).
    Browser,
}

/// What a tool can do to the box. Local tools and upstream ones are classed alike.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Class {
    /// Reads only.
    Observe,
    /// Changes state but cannot reach a shell.
    Act,
    /// Reaches the box's shell, directly or through the GUI.
    Shell,
}

/// The four MCP tool annotations; always all present on the wire.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Annotations {
    pub read_only: bool,
    pub destructive: bool,
    pub idempotent: bool,
    pub open_world: bool,
}

/// The `400` for a profile name that is not in [`Profile::ALL`] (a test checks that it
/// names every one of them).
pub const PROFILE_ERROR: &str = "profile must be one of owner, desktop, observe, browser";

/// The `400` for a `browser` grant on a box that has no `--browser-command`.
pub const BROWSER_NEEDS_COMMAND: &str = "the browser profile needs --browser-command on this box";

impl Profile {
    pub const ALL: [Profile; 4] = [
        Profile::Owner,
        Profile::Desktop,
        Profile::Observe,
        Profile::Browser,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Profile::Owner => "owner",
            Profile::Desktop => "desktop",
            Profile::Observe => "observe",
            Profile::Browser => "browser",
        }
    }

    /// Profiles whose tools can reach a shell. Anything not declared here must hold no
    /// `shell` tool (checked by a boundary test).
    pub fn is_shell_equivalent(self) -> bool {
        matches!(self, Profile::Owner | Profile::Desktop)
    }

    /// Whether a tool of the box's persistent upstream (§7.2, the owner's browser) is
    /// visible under this profile. Never under `browser`: its grants drive a browser of
    /// their own instead.
    pub fn allows_upstream(self, tool: &str) -> bool {
        match self {
            Profile::Owner => true,
            Profile::Desktop => DESKTOP_BROWSER_TOOLS.contains(&tool),
            Profile::Observe | Profile::Browser => false,
        }
    }

    /// Whether a tool of the grant's own throwaway browser (§12) is visible under this
    /// profile: under `browser`, every classified `observe` or `act` browser tool except
    /// those in [`BROWSER_PROFILE_EXCLUDES`]; under every other profile, none.
    pub fn allows_browser_tier(self, tool: &str) -> bool {
        self == Profile::Browser
            && matches!(browser_class_of(tool), Some(Class::Observe | Class::Act))
            && !BROWSER_PROFILE_EXCLUDES.contains(&tool)
    }
}

impl fmt::Display for Profile {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for Profile {
    type Err = &'static str;
    /// Exact, case-sensitive names only; the retired `sandbox` is refused like any other.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "owner" => Ok(Profile::Owner),
            "desktop" => Ok(Profile::Desktop),
            "observe" => Ok(Profile::Observe),
            "browser" => Ok(Profile::Browser),
            _ => Err(PROFILE_ERROR),
        }
    }
}

/// Upstream browser tools a `desktop` grant may use. Deliberately excludes
/// `browser_evaluate` and `browser_run_code_unsafe` (arbitrary code in the page).
pub const DESKTOP_BROWSER_TOOLS: [&str; 15] = [
    "browser_navigate",
    "browser_navigate_back",
    "browser_snapshot",
    "browser_find",
    "browser_click",
    "browser_type",
    "browser_fill_form",
    "browser_press_key",
    "browser_hover",
    "browser_select_option",
    "browser_wait_for",
    "browser_tabs",
    "browser_take_screenshot",
    "browser_console_messages",
    "browser_resize",
];

/// Every tool of the pinned Playwright MCP (0.0.83, with every `--caps`) and its class,
/// with the reason. `shell` = reaches code or files outside the page; `act` = changes
/// page or browser state without reaching a shell; `observe` = reads only. A browser
/// tool missing here is visible under `owner` only (a test lists the real upstream's
/// tools and fails on any without a class).
#[rustfmt::skip]
pub const BROWSER_TOOL_CLASSES: &[(&str, Class, &str)] = &[
    ("browser_console_messages", Class::Observe, "reads the page's console; a filename is written inside Playwright's output dir"),
    ("browser_find", Class::Observe, "searches the page"),
    ("browser_network_requests", Class::Observe, "lists the page's requests; a filename stays inside the output dir"),
    ("browser_network_request", Class::Observe, "reads one request of the page"),
    ("browser_snapshot", Class::Observe, "reads the page's accessibility tree; a filename stays inside the output dir"),
    ("browser_take_screenshot", Class::Observe, "an image of the page; a filename stays inside the output dir"),
    ("browser_wait_for", Class::Observe, "waits for text or time"),
    ("browser_close", Class::Act, "closes the page"),
    ("browser_resize", Class::Act, "resizes the window"),
    ("browser_resume", Class::Act, "resumes paused page script"),
    ("browser_highlight", Class::Act, "draws an overlay on the page"),
    ("browser_hide_highlight", Class::Act, "removes that overlay"),
    ("browser_annotate", Class::Act, "draws on the page"),
    ("browser_handle_dialog", Class::Act, "answers a page dialog"),
    ("browser_emulate_media", Class::Act, "changes emulated media features"),
    ("browser_evaluate", Class::Act, "runs JavaScript in the page (not in the upstream's process)"),
    ("browser_fill_form", Class::Act, "types into the page"),
    ("browser_press_key", Class::Act, "a key press in the page"),
    ("browser_type", Class::Act, "types into the page"),
    ("browser_mouse_move_xy", Class::Act, "pointer input to the page"),
    ("browser_mouse_click_xy", Class::Act, "pointer input to the page"),
    ("browser_mouse_drag_xy", Class::Act, "pointer input to the page"),
    ("browser_mouse_down", Class::Act, "pointer input to the page"),
    ("browser_mouse_up", Class::Act, "pointer input to the page"),
    ("browser_mouse_wheel", Class::Act, "pointer input to the page"),
    ("browser_navigate", Class::Act, "loads a URL"),
    ("browser_navigate_back", Class::Act, "goes back in history"),
    ("browser_click", Class::Act, "clicks in the page"),
    ("browser_drag", Class::Act, "drags in the page"),
    ("browser_hover", Class::Act, "hovers in the page"),
    ("browser_select_option", Class::Act, "selects in the page"),
    ("browser_tabs", Class::Act, "opens, closes and switches tabs"),
    ("browser_start_recording", Class::Act, "records actions inside the session"),
    ("browser_stop_recording", Class::Act, "stops that recording"),
    ("browser_video_chapter", Class::Act, "marks a chapter in a running video"),
    ("browser_video_show_actions", Class::Act, "overlays actions on a running video"),
    ("browser_video_hide_actions", Class::Act, "removes that overlay"),
    ("browser_run_code_unsafe", Class::Shell, "runs code in the upstream's own node process: the box's shell"),
    ("browser_file_upload", Class::Shell, "reads any file of the box by absolute path"),
    ("browser_drop", Class::Shell, "reads any file of the box by absolute path"),
    ("browser_pdf_save", Class::Shell, "writes a file on the box"),
    ("browser_start_tracing", Class::Shell, "writes files on the box"),
    ("browser_stop_tracing", Class::Shell, "writes files on the box"),
    ("browser_start_video", Class::Shell, "writes files on the box"),
    ("browser_stop_video", Class::Shell, "writes files on the box"),
];

/// Classified `act` tools that the `browser` profile leaves out all the same:
/// `browser_evaluate` runs arbitrary JavaScript in the page.
pub const BROWSER_PROFILE_EXCLUDES: &[&str] = &["browser_evaluate"];

/// The class of a browser tool, from [`BROWSER_TOOL_CLASSES`].
pub fn browser_class_of(tool: &str) -> Option<Class> {
    BROWSER_TOOL_CLASSES
        .iter()
        .find(|(name, _, _)| *name == tool)
        .map(|(_, class, _)| *class)
}

/// The browser tools a `browser` grant sees, in table order (derived, never listed twice).
pub fn browser_profile_tools() -> impl Iterator<Item = &'static str> {
    BROWSER_TOOL_CLASSES
        .iter()
        .map(|(name, _, _)| *name)
        .filter(|name| Profile::Browser.allows_browser_tier(name))
}

/// What a grant is, by the escalation check of contract §11: whether the agent can reach
/// the box's shell without a person saying yes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Shell {
    /// A tool the grant can run without approval is `shell`-class.
    Yes,
    /// Every `shell`-class tool the grant can see needs approval (§10).
    Gated,
    /// The grant sees no `shell`-class tool.
    No,
}

impl Shell {
    pub fn as_str(self) -> &'static str {
        match self {
            Shell::Yes => "yes",
            Shell::Gated => "gated",
            Shell::No => "no",
        }
    }
}

impl Class {
    /// The single class → annotation table.
    pub fn annotations(self) -> Annotations {
        match self {
            Class::Observe => Annotations {
                read_only: true,
                destructive: false,
                idempotent: true,
                open_world: false,
            },
            Class::Act => Annotations {
                read_only: false,
                destructive: false,
                idempotent: false,
                open_world: false,
            },
            Class::Shell => Annotations {
                read_only: false,
                destructive: true,
                idempotent: false,
                open_world: true,
            },
        }
    }
}

impl Annotations {
    pub fn to_json(self) -> serde_json::Value {
        serde_json::json!({
            "readOnlyHint": self.read_only,
            "destructiveHint": self.destructive,
            "idempotentHint": self.idempotent,
            "openWorldHint": self.open_world,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn observe_sees_no_upstream_tool() {
        for tool in DESKTOP_BROWSER_TOOLS {
            assert!(!Profile::Observe.allows_upstream(tool));
        }
        assert!(!Profile::Observe.allows_upstream("browser_anything_new"));
        assert!(!Profile::Observe.is_shell_equivalent());
    }

    #[test]
    fn desktop_refuses_code_execution_in_the_browser() {
        for tool in [
            "browser_evaluate",
            "browser_run_code_unsafe",
            "browser_install",
        ] {
            assert!(!Profile::Desktop.allows_upstream(tool), "{tool}");
        }
        for tool in DESKTOP_BROWSER_TOOLS {
            assert!(Profile::Desktop.allows_upstream(tool), "{tool}");
        }
        assert!(Profile::Owner.allows_upstream("browser_evaluate"));
    }

    #[test]
    fn only_the_declared_names_parse() {
        for bad in [
            "sandbox", "Owner", "OBSERVE", "", " observe", "admin", "root", "Browser", "browser ",
            "custom",
        ] {
            assert_eq!(bad.parse::<Profile>(), Err(PROFILE_ERROR), "{bad:?}");
        }
        for p in Profile::ALL {
            assert_eq!(p.as_str().parse::<Profile>(), Ok(p));
        }
    }

    #[test]
    fn the_profile_error_names_every_accepted_profile() {
        let listed = PROFILE_ERROR
            .strip_prefix("profile must be one of ")
            .unwrap();
        let names: Vec<&str> = listed.split(", ").collect();
        let want: Vec<&str> = Profile::ALL.iter().map(|p| p.as_str()).collect();
        assert_eq!(names, want);
    }

    #[test]
    fn the_browser_table_classifies_each_tool_once_with_a_reason() {
        assert_eq!(BROWSER_TOOL_CLASSES.len(), 45);
        let mut seen = std::collections::HashSet::new();
        for (name, _, reason) in BROWSER_TOOL_CLASSES {
            assert!(seen.insert(*name), "{name} is classified twice");
            assert!(name.starts_with("browser_"), "{name}");
            assert!(!reason.is_empty(), "{name} has no reason");
        }
        let count = |c: Class| {
            BROWSER_TOOL_CLASSES
                .iter()
                .filter(|(_, class, _)| *class == c)
                .count()
        };
        assert_eq!(
            (
                count(Class::Observe),
                count(Class::Act),
                count(Class::Shell)
            ),
            (7, 30, 8)
        );
        for tool in [
            "browser_run_code_unsafe",
            "browser_file_upload",
            "browser_drop",
            "browser_pdf_save",
            "browser_start_tracing",
            "browser_stop_tracing",
            "browser_start_video",
            "browser_stop_video",
        ] {
            assert_eq!(browser_class_of(tool), Some(Class::Shell), "{tool}");
        }
        assert_eq!(browser_class_of("browser_evaluate"), Some(Class::Act));
        assert_eq!(browser_class_of("browser_install"), None);
    }

    #[test]
    fn the_browser_profile_is_observe_and_act_minus_evaluate_and_never_a_shell() {
        let tools: Vec<&str> = browser_profile_tools().collect();
        assert_eq!(tools.len(), 36);
        for tool in &tools {
            let class = browser_class_of(tool);
            assert!(
                matches!(class, Some(Class::Observe | Class::Act)),
                "{tool} is {class:?}"
            );
        }
        for (name, class, _) in BROWSER_TOOL_CLASSES {
            let listed = tools.contains(name);
            let want = *class != Class::Shell && *name != "browser_evaluate";
            assert_eq!(listed, want, "{name}");
        }
        assert!(!Profile::Browser.allows_browser_tier("browser_evaluate"));
        assert!(!Profile::Browser.allows_browser_tier("browser_run_code_unsafe"));
        assert!(!Profile::Browser.allows_browser_tier("browser_page_registered_tool"));
        assert!(!Profile::Browser.is_shell_equivalent());
        for tool in DESKTOP_BROWSER_TOOLS {
            assert!(!Profile::Browser.allows_upstream(tool), "{tool}");
        }
        assert!(!Profile::Browser.allows_upstream("browser_evaluate"));
        for other in [Profile::Owner, Profile::Desktop, Profile::Observe] {
            assert!(!other.allows_browser_tier("browser_navigate"), "{other}");
        }
    }

    #[test]
    fn desktop_browser_tools_are_classified_and_never_shell() {
        for tool in DESKTOP_BROWSER_TOOLS {
            let class = browser_class_of(tool);
            assert!(
                matches!(class, Some(Class::Observe | Class::Act)),
                "{tool} is {class:?}"
            );
        }
    }

    #[test]
    fn annotations_follow_the_class() {
        assert!(Class::Observe.annotations().read_only);
        assert!(!Class::Shell.annotations().read_only);
        assert!(Class::Shell.annotations().destructive);
        let json = Class::Act.annotations().to_json();
        for key in [
            "readOnlyHint",
            "destructiveHint",
            "idempotentHint",
            "openWorldHint",
        ] {
            assert!(json.get(key).is_some(), "{key}");
        }
    }
}
