//! Profiles and tool classes: the profile names, the class → annotation table, and which
//! upstream (browser) tools each profile allows. Which *local* tools a profile allows is
//! declared by each tool ([`crate::tools::Tool::profiles`]).
//!
//! Profiles are allow-lists. A tool not placed in a profile is absent from that profile,
//! so a new tool is denied until someone places it on purpose. Only `observe` is a
//! security boundary: `owner` and `desktop` reach the box's shell (directly through `bash`
//! or through the GUI with `mouse`/`key`) and are declared shell-equivalent below.

use std::fmt;
use std::str::FromStr;

/// Who sees which tools. Parsed only from the three exact names.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Profile {
    Owner,
    Desktop,
    Observe,
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

pub const PROFILE_ERROR: &str = "profile must be one of owner, desktop, observe";

impl Profile {
    pub const ALL: [Profile; 3] = [Profile::Owner, Profile::Desktop, Profile::Observe];

    pub fn as_str(self) -> &'static str {
        match self {
            Profile::Owner => "owner",
            Profile::Desktop => "desktop",
            Profile::Observe => "observe",
        }
    }

    /// Profiles whose tools can reach a shell. Anything not declared here must hold no
    /// `shell` tool (checked by a boundary test).
    pub fn is_shell_equivalent(self) -> bool {
        matches!(self, Profile::Owner | Profile::Desktop)
    }

    /// Whether an upstream (browser) tool is visible under this profile.
    pub fn allows_upstream(self, tool: &str) -> bool {
        match self {
            Profile::Owner => true,
            Profile::Desktop => DESKTOP_BROWSER_TOOLS.contains(&tool),
            Profile::Observe => false,
        }
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
    fn only_the_three_names_parse() {
        for bad in [
            "sandbox", "Owner", "OBSERVE", "", " observe", "admin", "root",
        ] {
            assert_eq!(bad.parse::<Profile>(), Err(PROFILE_ERROR), "{bad:?}");
        }
        for p in Profile::ALL {
            assert_eq!(p.as_str().parse::<Profile>(), Ok(p));
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
