//! Profiles and tool classes: the profile names, the class → annotation table, the class
//! of every upstream (browser) tool of the pinned Playwright MCP, and which upstream tools
//! each fixed profile allows. Which *local* tools a profile allows, and their classes, are
//! declared by each tool ([`crate::tools::Tool`]); `tools::policy` joins the two into one
//! classification and resolves a grant's `allow`/`deny` lists against it.
//!
//! Profiles are allow-lists. A tool not placed in a profile is absent from that profile,
//! so a new tool is denied until someone places it on purpose. `owner` and `desktop`
//! reach the box's shell (directly through `bash` or through the GUI with `mouse`/`key`)
//! and are declared shell-equivalent below. `observe` and `browser` are boundaries:
//! `browser` holds no local tool and only the classified `observe`/`act` browser tools
//! (minus `browser_evaluate`) of [`BROWSER_TOOL_CLASSES`], served by a throwaway browser
//! of the grant's own (`crate::browser`). `files` is a boundary too: `sys_info` and the
//! file tools, confined beneath the folder the grant lends (`crate::tools::files`). `apps`
//! is a boundary the owner vouches for: it starts and drives only the desktop apps of
//! `--apps`, which refuses terminals, shells and whatever runs commands by design
//! (`crate::rules::desktop_entry`); `desktop_act` is `act` there, checked per element
//! (`crate::tools::apps`).

use std::fmt;
use std::str::FromStr;
use std::sync::LazyLock;

/// Who sees which tools. Parsed only from the exact names of [`Profile::ALL`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Profile {
    Owner,
    Desktop,
    Observe,
    /// Browser tools only, each grant with a throwaway browser of its own (contract §12).
    Browser,
    /// `sys_info` and the file tools, confined to the grant's lent folder (contract §18).
    Files,
    /// The desktop apps the owner listed with `--apps`: start them, read the screen, drive
    /// their elements and nothing else's (contract §17).
    Apps,
    /// No list of its own: the grant's `allow` list is its list.
    Custom,
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

/// Every accepted profile name, comma-separated, in [`Profile::ALL`] order.
pub fn profile_names() -> &'static str {
    static NAMES: LazyLock<String> = LazyLock::new(|| {
        Profile::ALL
            .iter()
            .map(|p| p.as_str())
            .collect::<Vec<_>>()
            .join(", ")
    });
    &NAMES
}

/// The `400` for a profile that is not one of [`Profile::ALL`]; a profile added there is
/// named here without touching this text.
pub fn profile_error() -> &'static str {
    static ERROR: LazyLock<String> =
        LazyLock::new(|| format!("profile must be one of {}", profile_names()));
    &ERROR
}

/// Most names one `allow`, `deny` or `approve` list may hold (names). Far more than there
/// are tools; the bound keeps a grant, its `grants.json` entry and its JSON small.
pub const MAX_LIST_NAMES: usize = 128;
/// Longest name (or pattern) in such a list, in bytes; longer than any tool's name.
pub const MAX_TOOL_NAME_BYTES: usize = 64;

/// The tool that is `act` instead of `shell` under `apps` (contract §17): there
/// `tools::apps::may_drive` holds it to elements of apps the grant started. Declared by
/// `tools::a11y::ACT` (a test compares the names).
pub const DESKTOP_ACT: &str = "desktop_act";

/// The `400` for an `apps` grant on a box that lists no apps.
pub const APPS_NEEDS_LIST: &str =
    "the apps profile needs --apps on this box: the owner lists the desktop apps it may start and drive";

/// The `400` for a `browser` grant on a box that has no `--browser-command`.
pub const BROWSER_NEEDS_COMMAND: &str = "the browser profile needs --browser-command on this box";

impl Profile {
    /// Every profile, in the order error messages and docs list them.
    pub const ALL: [Profile; 7] = [
        Profile::Owner,
        Profile::Desktop,
        Profile::Observe,
        Profile::Browser,
        Profile::Files,
        Profile::Apps,
        Profile::Custom,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Profile::Owner => "owner",
            Profile::Desktop => "desktop",
            Profile::Observe => "observe",
            Profile::Browser => "browser",
            Profile::Files => "files",
            Profile::Apps => "apps",
            Profile::Custom => "custom",
        }
    }

    /// What lending this profile means, for the person choosing one (the console's Lend
    /// form prints it beside the profile's tools and whether it is a boundary).
    pub fn meaning(self) -> &'static str {
        match self {
            Profile::Owner => "every tool of this box and of its browser",
            Profile::Desktop => {
                "the shell and the screen, and the box's browser without the tools that run \
                 code in the page"
            }
            Profile::Observe => "it can look, not touch",
            Profile::Browser => {
                "a throwaway browser of the grant's own, gone with the grant; nothing of this \
                 box itself"
            }
            Profile::Files => {
                "one folder you lend: it can read, write and list the files beneath it, and \
                 nothing else of this box"
            }
            Profile::Apps => {
                "the desktop apps this box lists (--apps): start them, read the screen and drive \
                 their buttons and fields, nothing else; you vouch for those apps (one that can \
                 run programs is a shell)"
            }
            Profile::Custom => "only the tools you list under Allow",
        }
    }

    /// A profile with no list of its own: its tools are the grant's `allow` list.
    pub fn is_custom(self) -> bool {
        self == Profile::Custom
    }

    /// A profile whose grants must lend a folder (`POST /attach` `folder`): its file tools
    /// are confined beneath it, which is what makes them `observe`/`act` rather than
    /// `shell` (contract §18).
    pub fn requires_folder(self) -> bool {
        self == Profile::Files
    }

    /// A profile whose grants need `--apps` on this box: its app tools start and drive
    /// only the listed apps (contract §17); with none listed it would hold nothing.
    pub fn requires_apps(self) -> bool {
        self == Profile::Apps
    }

    /// Fixed profiles whose tools can reach a shell. A fixed profile not declared here
    /// must come out `no` from the escalation check (a boundary test); a `custom` grant
    /// is whatever the check says of its list.
    pub fn is_shell_equivalent(self) -> bool {
        matches!(self, Profile::Owner | Profile::Desktop)
    }

    /// Whether a classified tool of the box's persistent upstream (§7.2, the owner's
    /// browser) is in this profile's own list. Never under `browser`: its grants drive a
    /// browser of their own instead. `custom` has no list of its own (its `allow` names
    /// upstream tools); an unclassified tool is decided by `tools::policy` (only `owner`
    /// sees it).
    pub fn allows_upstream(self, tool: &str) -> bool {
        match self {
            Profile::Owner => true,
            Profile::Desktop => DESKTOP_BROWSER_TOOLS.contains(&tool),
            Profile::Observe
            | Profile::Browser
            | Profile::Files
            | Profile::Apps
            | Profile::Custom => false,
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
        Profile::ALL
            .into_iter()
            .find(|p| p.as_str() == s)
            .ok_or_else(profile_error)
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

/// The pinned upstream whose tools [`BROWSER_TOOL_CLASSES`] classifies: the npm package,
/// its version, and the `--caps` under which it offers all of them.
pub const PINNED_UPSTREAM: (&str, &str, &str) =
    ("@playwright/mcp", "0.0.83", "vision,pdf,devtools");

/// A tool's class with the one-line reason for it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Classified {
    pub name: &'static str,
    pub class: Class,
    pub reason: &'static str,
}

/// The class of every tool of the pinned Playwright MCP ([`PINNED_UPSTREAM`]), in the
/// order it lists them. `shell` = reaches code or files outside the page. An upstream
/// tool missing here has no class: only `owner` sees it, and no list can name it.
/// Annotations of these tools stay the upstream's own; the class decides who may use them.
pub static BROWSER_TOOL_CLASSES: &[Classified] = &[
    Classified {
        name: "browser_close",
        class: Class::Act,
        reason: "closes the page",
    },
    Classified {
        name: "browser_resize",
        class: Class::Act,
        reason: "resizes the browser window",
    },
    Classified {
        name: "browser_console_messages",
        class: Class::Observe,
        reason: "reads the page's console messages (a `filename` lands in the upstream's own output dir)",
    },
    Classified {
        name: "browser_resume",
        class: Class::Act,
        reason: "resumes a paused script of the page",
    },
    Classified {
        name: "browser_highlight",
        class: Class::Act,
        reason: "draws a highlight overlay on the page",
    },
    Classified {
        name: "browser_hide_highlight",
        class: Class::Act,
        reason: "removes a highlight overlay from the page",
    },
    Classified {
        name: "browser_annotate",
        class: Class::Act,
        reason: "opens an annotation view of the page and waits for the person at the browser",
    },
    Classified {
        name: "browser_handle_dialog",
        class: Class::Act,
        reason: "accepts or dismisses a dialog of the page",
    },
    Classified {
        name: "browser_emulate_media",
        class: Class::Act,
        reason: "changes the page's emulated CSS media features",
    },
    Classified {
        name: "browser_evaluate",
        class: Class::Act,
        reason: "runs JavaScript inside the page: it reaches the page and its site, not the box",
    },
    Classified {
        name: "browser_file_upload",
        class: Class::Shell,
        reason: "hands any file of the box, named by absolute path, to the page",
    },
    Classified {
        name: "browser_drop",
        class: Class::Shell,
        reason: "drops any file of the box, named by absolute path, onto the page",
    },
    Classified {
        name: "browser_find",
        class: Class::Observe,
        reason: "searches the page's accessibility snapshot",
    },
    Classified {
        name: "browser_fill_form",
        class: Class::Act,
        reason: "fills the page's form fields",
    },
    Classified {
        name: "browser_press_key",
        class: Class::Act,
        reason: "presses a key in the page, not on the box's keyboard",
    },
    Classified {
        name: "browser_type",
        class: Class::Act,
        reason: "types text into an element of the page",
    },
    Classified {
        name: "browser_mouse_move_xy",
        class: Class::Act,
        reason: "moves the page's mouse, not the box's pointer",
    },
    Classified {
        name: "browser_mouse_click_xy",
        class: Class::Act,
        reason: "clicks at a point of the page",
    },
    Classified {
        name: "browser_mouse_drag_xy",
        class: Class::Act,
        reason: "drags with the page's mouse",
    },
    Classified {
        name: "browser_mouse_down",
        class: Class::Act,
        reason: "presses the page's mouse button",
    },
    Classified {
        name: "browser_mouse_up",
        class: Class::Act,
        reason: "releases the page's mouse button",
    },
    Classified {
        name: "browser_mouse_wheel",
        class: Class::Act,
        reason: "scrolls the page",
    },
    Classified {
        name: "browser_navigate",
        class: Class::Act,
        reason: "loads a URL in the browser (any address this box can reach)",
    },
    Classified {
        name: "browser_navigate_back",
        class: Class::Act,
        reason: "goes back in the page's history",
    },
    Classified {
        name: "browser_network_requests",
        class: Class::Observe,
        reason: "lists the page's network requests",
    },
    Classified {
        name: "browser_network_request",
        class: Class::Observe,
        reason: "reads one network request of the page",
    },
    Classified {
        name: "browser_pdf_save",
        class: Class::Shell,
        reason: "writes a PDF file on the box",
    },
    Classified {
        name: "browser_start_recording",
        class: Class::Act,
        reason: "records what the person does in the browser as code, returned in a reply; writes no file",
    },
    Classified {
        name: "browser_stop_recording",
        class: Class::Act,
        reason: "ends a recording and returns its code; writes no file",
    },
    Classified {
        name: "browser_run_code_unsafe",
        class: Class::Shell,
        reason: "runs arbitrary code in the upstream's own Node process: code execution on the box",
    },
    Classified {
        name: "browser_take_screenshot",
        class: Class::Observe,
        reason: "captures the page as an image",
    },
    Classified {
        name: "browser_snapshot",
        class: Class::Observe,
        reason: "reads the page's accessibility snapshot",
    },
    Classified {
        name: "browser_click",
        class: Class::Act,
        reason: "clicks an element of the page",
    },
    Classified {
        name: "browser_drag",
        class: Class::Act,
        reason: "drags between two elements of the page",
    },
    Classified {
        name: "browser_hover",
        class: Class::Act,
        reason: "hovers over an element of the page",
    },
    Classified {
        name: "browser_select_option",
        class: Class::Act,
        reason: "selects an option of a dropdown in the page",
    },
    Classified {
        name: "browser_tabs",
        class: Class::Act,
        reason: "lists, opens, closes or switches browser tabs",
    },
    Classified {
        name: "browser_start_tracing",
        class: Class::Shell,
        reason: "starts a trace that is written as files on the box",
    },
    Classified {
        name: "browser_stop_tracing",
        class: Class::Shell,
        reason: "writes the trace files on the box",
    },
    Classified {
        name: "browser_start_video",
        class: Class::Shell,
        reason: "starts a video recording written as a file on the box",
    },
    Classified {
        name: "browser_stop_video",
        class: Class::Shell,
        reason: "writes the video file on the box",
    },
    Classified {
        name: "browser_video_chapter",
        class: Class::Act,
        reason: "shows a chapter card over the page",
    },
    Classified {
        name: "browser_video_show_actions",
        class: Class::Act,
        reason: "overlays callouts naming each action on the page",
    },
    Classified {
        name: "browser_video_hide_actions",
        class: Class::Act,
        reason: "stops the action callouts on the page",
    },
    Classified {
        name: "browser_wait_for",
        class: Class::Observe,
        reason: "waits for text to appear or go, or for time to pass; changes nothing",
    },
];

/// Classified `act` tools that the `browser` profile leaves out all the same:
/// `browser_evaluate` runs arbitrary JavaScript in the page.
pub const BROWSER_PROFILE_EXCLUDES: &[&str] = &["browser_evaluate"];

/// Every argument of a tool of the pinned Playwright MCP that names a URL the browser
/// would open (contract §14), found by reading all of its tools' schemas: under every
/// grant but `owner` each is checked by [`crate::rules::browser_url`] before the call is
/// forwarded. `browser_tabs`' `url` is read for every `action` (it opens a tab only with
/// `new`, but an argument the browser ignores costs nothing to check). A test reads the
/// pinned upstream's real `tools/list` and fails on any URL-like field missing here.
pub static BROWSER_URL_FIELDS: &[(&str, &[&str])] =
    &[("browser_navigate", &["url"]), ("browser_tabs", &["url"])];

/// The URL-bearing argument names of browser tool `tool` (empty for most tools).
pub fn browser_url_fields(tool: &str) -> &'static [&'static str] {
    BROWSER_URL_FIELDS
        .iter()
        .find(|(name, _)| *name == tool)
        .map_or(&[], |(_, fields)| fields)
}

/// The browser tools that navigate, click or type: the journal keeps a thumbnail of the
/// page after each (§22). Every name is one of [`BROWSER_TOOL_CLASSES`] (a unit test).
pub const BROWSER_SCREEN_TOOLS: &[&str] = &[
    "browser_click",
    "browser_drag",
    "browser_drop",
    "browser_fill_form",
    "browser_handle_dialog",
    "browser_hover",
    "browser_mouse_click_xy",
    "browser_mouse_down",
    "browser_mouse_drag_xy",
    "browser_mouse_move_xy",
    "browser_mouse_up",
    "browser_mouse_wheel",
    "browser_navigate",
    "browser_navigate_back",
    "browser_press_key",
    "browser_select_option",
    "browser_tabs",
    "browser_type",
];

/// The class of a browser tool, from [`BROWSER_TOOL_CLASSES`].
pub fn browser_class_of(tool: &str) -> Option<Class> {
    BROWSER_TOOL_CLASSES
        .iter()
        .find(|c| c.name == tool)
        .map(|c| c.class)
}

/// The browser tools a `browser` grant sees, in table order (derived, never listed twice).
pub fn browser_profile_tools() -> impl Iterator<Item = &'static str> {
    BROWSER_TOOL_CLASSES
        .iter()
        .map(|c| c.name)
        .filter(|name| Profile::Browser.allows_browser_tier(name))
}

impl Class {
    pub const ALL: [Class; 3] = [Class::Observe, Class::Act, Class::Shell];

    pub fn as_str(self) -> &'static str {
        match self {
            Class::Observe => "observe",
            Class::Act => "act",
            Class::Shell => "shell",
        }
    }

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
    #[test]
    fn screen_changing_browser_tools_are_browser_tools() {
        for name in super::BROWSER_SCREEN_TOOLS {
            assert!(super::browser_class_of(name).is_some(), "{name}");
        }
    }
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
        assert!(!Profile::Custom.allows_upstream("browser_snapshot"));
    }

    #[test]
    fn only_the_listed_names_parse_and_the_error_names_them_all() {
        for bad in [
            "sandbox", "Owner", "OBSERVE", "", " observe", "admin", "root", "Custom", "custom ",
            "Browser", "browser ",
        ] {
            assert_eq!(bad.parse::<Profile>(), Err(profile_error()), "{bad:?}");
        }
        for p in Profile::ALL {
            assert_eq!(p.as_str().parse::<Profile>(), Ok(p));
            assert!(profile_error().contains(p.as_str()), "{p}");
        }
        assert_eq!(
            profile_error(),
            "profile must be one of owner, desktop, observe, browser, files, apps, custom"
        );
        assert!(!profile_error().contains("sandbox"));
    }

    #[test]
    fn the_browser_table_classifies_each_tool_once_with_a_reason() {
        let mut seen = std::collections::HashSet::new();
        for t in BROWSER_TOOL_CLASSES {
            assert!(seen.insert(t.name), "{} is classified twice", t.name);
            assert!(t.name.starts_with("browser_"), "{}", t.name);
            assert!(t.name.len() <= MAX_TOOL_NAME_BYTES, "{}", t.name);
            assert!(
                !t.reason.trim().is_empty() && !t.reason.contains('\n') && !t.reason.contains('|'),
                "{}: one line, no table bars",
                t.name
            );
        }
        assert_eq!(
            BROWSER_TOOL_CLASSES.len(),
            45,
            "the pinned upstream's 45 tools"
        );
        let class = |name: &str| {
            BROWSER_TOOL_CLASSES
                .iter()
                .find(|t| t.name == name)
                .map(|t| t.class)
        };
        // The issue names these; a reclassification must be deliberate.
        for name in [
            "browser_run_code_unsafe",
            "browser_file_upload",
            "browser_drop",
            "browser_pdf_save",
            "browser_start_tracing",
            "browser_stop_tracing",
            "browser_start_video",
            "browser_stop_video",
        ] {
            assert_eq!(class(name), Some(Class::Shell), "{name}");
        }
        assert_eq!(class("browser_evaluate"), Some(Class::Act));
        assert_eq!(class("browser_snapshot"), Some(Class::Observe));
        // desktop's own list is classified, and holds no shell tool.
        for tool in DESKTOP_BROWSER_TOOLS {
            assert!(
                matches!(class(tool), Some(Class::Observe | Class::Act)),
                "{tool}"
            );
        }
    }

    #[test]
    fn the_browser_table_counts_its_classes() {
        let count = |c: Class| BROWSER_TOOL_CLASSES.iter().filter(|t| t.class == c).count();
        assert_eq!(
            (
                count(Class::Observe),
                count(Class::Act),
                count(Class::Shell)
            ),
            (7, 30, 8)
        );
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
        for t in BROWSER_TOOL_CLASSES {
            let (name, class) = (t.name, t.class);
            let listed = tools.contains(&name);
            let want = class != Class::Shell && name != "browser_evaluate";
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
        for other in [
            Profile::Owner,
            Profile::Desktop,
            Profile::Observe,
            Profile::Custom,
        ] {
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
