//! Which tools a grant may use, and whether that reaches a shell: the one classification
//! of every tool (local tools from [`super::TOOLS`], upstream ones from
//! [`BROWSER_TOOL_CLASSES`]), a profile plus the grant's `allow`/`deny` lists resolved into
//! its effective list ([`ToolPolicy`]), and the escalation check ([`escalation`]) that the
//! boundary tests and every grant go through.
//!
//! Names in the lists match classified tools only (a trailing `*` matches every classified
//! tool with that prefix), so an upstream tool without a class can never be granted by a
//! list: only `owner`, which sees every upstream tool, reaches it.
//!
//! A `custom` list may name any classified tool, browser ones included; those are served
//! by the box's persistent upstream (like `desktop`'s), never by a throwaway browser: the
//! browser tier (`crate::browser`) serves the `browser` profile alone, whose effective
//! tools are the tier's (minus its `deny`).
//!
//! A grant that lends a folder (contract §18) is *confined*: its file tools reach that
//! folder and nothing else, so they take their confined class (`observe`/`act`,
//! [`super::files::confined_class`]) instead of `shell`. The `files` profile is always
//! confined (`POST /attach` requires its folder). [`ToolPolicy::class_of`] is the class a
//! tool has under this policy; the escalation check and the annotations read it.
//!
//! Which tools wait for a person's decision is not a list here: `approve` is resolved by
//! `crate::grants::approvals` into the grant's `Gate`, and [`escalation`] asks that gate.

use std::path::{Path, PathBuf};
use std::sync::{Arc, LazyLock};

use crate::profiles::{Class, Profile, BROWSER_TOOL_CLASSES, MAX_LIST_NAMES, MAX_TOOL_NAME_BYTES};

/// `allow` given with a profile other than `custom`.
pub const ALLOW_NEEDS_CUSTOM_ERROR: &str =
    "allow needs \"profile\":\"custom\" (deny goes with any profile)";
/// `custom` without a non-empty `allow`.
pub const CUSTOM_NEEDS_ALLOW_ERROR: &str = "profile custom needs a non-empty allow list";
/// The lists leave nothing to use.
pub const NO_TOOLS_ERROR: &str = "this grant would have no tools";
/// How the escalation check names the upstream tools without a class that `owner` sees
/// (they are not known until an upstream lists them, and count as `shell`).
pub const UNCLASSIFIED: &str = "any upstream tool without a class";

/// Where a classified tool is served from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Origin {
    Local,
    Upstream,
}

/// One row of the classification.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Entry {
    pub name: &'static str,
    pub class: Class,
    pub reason: &'static str,
    pub origin: Origin,
}

/// Every classified tool, once: the local tools in listing order, then the upstream
/// table in its order. This is the order of a grant's `tools`.
pub fn classified() -> impl Iterator<Item = Entry> {
    let local = super::registered().iter().map(|t| Entry {
        name: t.name,
        class: t.class,
        reason: t.class_reason,
        origin: Origin::Local,
    });
    let upstream = BROWSER_TOOL_CLASSES
        .iter()
        .filter(|c| super::find(c.name).is_none())
        .map(|c| Entry {
            name: c.name,
            class: c.class,
            reason: c.reason,
            origin: Origin::Upstream,
        });
    local.chain(upstream)
}

/// The classification of `name`, or `None` for a tool without a class.
pub fn classify(name: &str) -> Option<Entry> {
    classified().find(|e| e.name == name)
}

/// Whether a list entry names `tool`: exactly, or by the prefix before a trailing `*`.
pub fn matches(pattern: &str, tool: &str) -> bool {
    match pattern.strip_suffix('*') {
        Some(prefix) => tool.starts_with(prefix),
        None => pattern == tool,
    }
}

/// The lists a grant was asked for, as given. (`approve`, §10, is `crate::grants::approvals`'.)
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct ToolLists {
    pub allow: Vec<String>,
    pub deny: Vec<String>,
}

fn normalised(list: &[String]) -> Vec<&str> {
    let mut names: Vec<&str> = list.iter().map(String::as_str).collect();
    names.sort_unstable();
    names.dedup();
    names
}

impl ToolLists {
    pub fn is_empty(&self) -> bool {
        self.allow.is_empty() && self.deny.is_empty()
    }

    /// Whether two requests ask for the same lists: the same names in each, whatever
    /// their order or repeats. Anything else is a different grant (a replace).
    pub fn same_as(&self, other: &ToolLists) -> bool {
        normalised(&self.allow) == normalised(&other.allow)
            && normalised(&self.deny) == normalised(&other.deny)
    }

    fn named(&self) -> [(&'static str, &[String]); 2] {
        [("allow", &self.allow), ("deny", &self.deny)]
    }
}

/// Whether a grant reaches a shell.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Shell {
    /// A `shell`-class tool runs without anyone's approval.
    Yes,
    /// Every `shell`-class tool it can see needs approval first.
    Gated,
    /// It can see no `shell`-class tool.
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

/// The escalation check's answer: the grant JSON's `shell` and `shell_because`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Escalation {
    pub shell: Shell,
    /// Set when `shell` is `yes`: the first tool (in listing order) that makes it so.
    pub because: Option<String>,
}

/// The escalation check (§11), the one function that says whether a set of tools reaches
/// a shell: `yes` when a tool that runs without approval is `shell`-class, `gated` when
/// every `shell`-class tool needs approval, `no` otherwise. `visible` is every tool the
/// grant can see with its class (`None`: no class, which counts as `shell`);
/// `needs_approval` says whether a call of a tool waits for a person now (the grant's
/// `approvals::Gate`; [`UNCLASSIFIED`] stands for every unclassified tool).
pub fn escalation<'a>(
    visible: impl IntoIterator<Item = (&'a str, Option<Class>)>,
    needs_approval: impl Fn(&str) -> bool,
) -> Escalation {
    let approved = needs_approval;
    let mut gated = false;
    for (name, class) in visible {
        if matches!(class, Some(Class::Observe | Class::Act)) {
            continue;
        }
        if approved(name) {
            gated = true;
            continue;
        }
        let because = match class {
            Some(_) => format!("{name} is a shell tool"),
            None => format!("{name} counts as a shell tool"),
        };
        return Escalation {
            shell: Shell::Yes,
            because: Some(because),
        };
    }
    Escalation {
        shell: if gated { Shell::Gated } else { Shell::No },
        because: None,
    }
}

/// What one grant (or the owner's `/mcp`) may use: its profile, the lists as given, and
/// the effective classified tools in listing order. Built only by [`ToolPolicy::new`],
/// so every policy in the daemon passed the rules of `POST /attach`.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct ToolPolicy {
    profile: Profile,
    lists: ToolLists,
    tools: Vec<&'static str>,
    /// The lent folder (vetted at `POST /attach`), beneath which the file tools work.
    folder: Option<PathBuf>,
    /// `"display":"own"` (§19): the graphical tools and children use the grant's own display.
    own_display: bool,
}

/// A list entry within the bounds, or the `400` that says which bound.
fn check_bounds(field: &str, names: &[String]) -> Result<(), String> {
    if names.len() > MAX_LIST_NAMES {
        return Err(format!(
            "{field} holds {} names; at most {MAX_LIST_NAMES}",
            names.len()
        ));
    }
    if let Some(long) = names.iter().find(|n| n.len() > MAX_TOOL_NAME_BYTES) {
        let mut end = MAX_TOOL_NAME_BYTES;
        while !long.is_char_boundary(end) {
            end -= 1;
        }
        return Err(format!(
            "{field} names a tool longer than {MAX_TOOL_NAME_BYTES} bytes: {}…",
            &long[..end]
        ));
    }
    Ok(())
}

/// Whether `profile`'s own list holds the classified tool `entry`: a local tool it lists,
/// a persistent upstream's tool it allows, or (under `browser`) a browser-tier tool.
fn in_profile(profile: Profile, entry: &Entry) -> bool {
    match entry.origin {
        Origin::Local => super::find(entry.name).is_some_and(|t| t.allowed_in(profile)),
        Origin::Upstream => {
            profile.allows_upstream(entry.name) || profile.allows_browser_tier(entry.name)
        }
    }
}

impl ToolPolicy {
    /// Resolve a profile and the lists into the effective tools, or the `400` message
    /// that names the first problem: a list past its bounds, `allow` without `custom`
    /// or `custom` without `allow`, a name that matches no classified tool, or nothing
    /// left.
    pub fn new(profile: Profile, lists: ToolLists) -> Result<ToolPolicy, String> {
        for (field, names) in lists.named() {
            check_bounds(field, names)?;
        }
        if !lists.allow.is_empty() && !profile.is_custom() {
            return Err(ALLOW_NEEDS_CUSTOM_ERROR.into());
        }
        if profile.is_custom() && lists.allow.is_empty() {
            return Err(CUSTOM_NEEDS_ALLOW_ERROR.into());
        }
        for (field, names) in lists.named() {
            if let Some(name) = names
                .iter()
                .find(|n| !classified().any(|e| matches(n, e.name)))
            {
                return Err(format!("unknown tool in {field}: {name}"));
            }
        }
        let named = |list: &[String], tool: &str| list.iter().any(|p| matches(p, tool));
        let tools: Vec<&'static str> = classified()
            .filter(|e| {
                if profile.is_custom() {
                    named(&lists.allow, e.name)
                } else {
                    in_profile(profile, e)
                }
            })
            .filter(|e| !named(&lists.deny, e.name))
            .map(|e| e.name)
            .collect();
        if tools.is_empty() {
            return Err(NO_TOOLS_ERROR.into());
        }
        Ok(ToolPolicy {
            profile,
            lists,
            tools,
            folder: None,
            own_display: false,
        })
    }

    /// This policy with a lent folder: its file tools are confined beneath it. The caller
    /// vetted the folder (`tools::paths::vet`).
    pub fn with_folder(mut self, folder: Option<PathBuf>) -> ToolPolicy {
        self.folder = folder;
        self
    }

    /// This policy with the grant's own display (§19), or the `400` when none of its tools
    /// uses a display.
    pub fn with_own_display(mut self, own: bool) -> Result<ToolPolicy, String> {
        if own
            && !self.tools.iter().any(|t| {
                super::find(t).is_some_and(|t| matches!(t.needs, super::Needs::Display(_)))
            })
        {
            let names: Vec<&str> = super::display::gui_tools().map(|(t, _)| t.name).collect();
            return Err(format!(
                "\"display\":\"own\" needs a profile with display tools ({}); profile {} \
                 has none",
                names.join(", "),
                self.profile
            ));
        }
        self.own_display = own;
        Ok(self)
    }

    /// Whether the grant has a display of its own (§19).
    pub fn own_display(&self) -> bool {
        self.own_display
    }

    /// The lent folder, if any.
    pub fn folder(&self) -> Option<&Path> {
        self.folder.as_deref()
    }

    /// Whether the file tools are confined to a lent folder: a folder is lent, or the
    /// profile requires one (a `files` policy without a folder runs no file call).
    pub fn confined(&self) -> bool {
        self.folder.is_some() || self.profile.requires_folder()
    }

    /// A classified tool's class under this policy: its confined class when the policy
    /// is [`confined`](Self::confined) and it has one, else its own. `None`: no class.
    pub fn class_of(&self, name: &str) -> Option<Class> {
        let entry = classify(name)?;
        if entry.origin == Origin::Local && self.confined() {
            if let Some(class) = super::files::confined_class(name) {
                return Some(class);
            }
        }
        // Under `apps`, desktop_act drives only the grant's own apps (`tools::apps::may_drive`).
        if entry.origin == Origin::Local
            && self.profile.requires_apps()
            && name == crate::profiles::DESKTOP_ACT
        {
            return Some(Class::Act);
        }
        Some(entry.class)
    }

    /// A fixed profile with no lists. `None` for `custom`, which has no list of its own.
    pub fn fixed(profile: Profile) -> Option<ToolPolicy> {
        ToolPolicy::new(profile, ToolLists::default()).ok()
    }

    /// The owner's policy (`/mcp`): every tool, shared.
    pub fn owner() -> Arc<ToolPolicy> {
        static OWNER: LazyLock<Arc<ToolPolicy>> =
            LazyLock::new(|| Arc::new(ToolPolicy::fixed(Profile::Owner).expect("owner has tools")));
        Arc::clone(&OWNER)
    }

    /// A stored grant's policy, resolved again at load, or why it must be dropped: its
    /// profile is unknown, its lists break a rule now (a name no longer classified), or a
    /// `custom` grant's list now means other tools than `stored_tools`, the ones granted.
    /// Never widened: a grant that would change is dropped, not adjusted.
    pub fn resume(
        profile: &str,
        lists: ToolLists,
        stored_tools: &[String],
    ) -> Result<ToolPolicy, String> {
        let profile: Profile = profile
            .parse()
            .map_err(|_| format!("unknown profile ({})", crate::profiles::profile_error()))?;
        let policy = ToolPolicy::new(profile, lists)?;
        if profile.is_custom() && policy.tools != stored_tools {
            return Err(
                "its allow list now matches other tools than those granted; grant it again".into(),
            );
        }
        Ok(policy)
    }

    pub fn profile(&self) -> Profile {
        self.profile
    }

    pub fn lists(&self) -> &ToolLists {
        &self.lists
    }

    /// The effective classified tools, in listing order (browser tools among them are
    /// served only while an upstream offers them).
    pub fn tools(&self) -> &[&'static str] {
        &self.tools
    }

    /// Whether upstream tools without a class are visible: under `owner` only.
    pub fn sees_unclassified(&self) -> bool {
        self.profile == Profile::Owner
    }

    /// Whether a tool of this name may be listed and called.
    pub fn allows(&self, name: &str) -> bool {
        // The effective list first: it is short, and most lookups are for tools in it.
        self.tools.contains(&name) || (self.sees_unclassified() && classify(name).is_none())
    }

    /// Every tool this policy can see, with its class: the effective tools, then (under
    /// `owner`) [`UNCLASSIFIED`] for the upstream tools without a class.
    pub fn visible(&self) -> impl Iterator<Item = (&'static str, Option<Class>)> + '_ {
        let unclassified = self.sees_unclassified().then_some((UNCLASSIFIED, None));
        self.tools
            .iter()
            .map(|name| (*name, self.class_of(name)))
            .chain(unclassified)
    }

    /// The escalation check of this policy's tools, with `needs_approval` from the grant's
    /// gate (`|_| false` where nothing is gated, as on the owner's `/mcp`).
    pub fn escalation(&self, needs_approval: impl Fn(&str) -> bool) -> Escalation {
        escalation(self.visible(), needs_approval)
    }

    /// One sentence for the agent: what it may use here.
    pub fn summary(&self) -> String {
        self.summary_with(true)
    }

    /// [`ToolPolicy::summary`] of what exists here: without an upstream (`upstreams` false)
    /// the browser tools of a non-`browser` profile are not there to use, so they are not
    /// named (the `browser` profile's come from its own browser tier).
    pub fn summary_with(&self, upstreams: bool) -> String {
        let present = self.present_tools(upstreams);
        let mut text = format!("It may use: {}", present.join(", "));
        if present.len() < self.tools.len() {
            text.push_str(" (no browser tools: this box has no upstream MCP server configured)");
        } else if self.sees_unclassified() {
            text.push_str(", and any other tool of the configured upstreams");
        }
        text.push('.');
        text
    }

    /// [`ToolPolicy::summary`] of what `here` lends now ([`ToolPolicy::lent`]): what the
    /// agent reads in the tool descriptions and the instructions, so it names exactly what
    /// `tools/list` gives.
    pub fn summary_lent(&self, here: Sources<'_>) -> String {
        let lent = self.lent(here);
        let mut text = format!("It may use: {}", lent.join(", "));
        if here.upstream.is_none()
            && self.profile != Profile::Browser
            && self.tools.iter().any(|t| super::find(t).is_none())
        {
            text.push_str(" (no browser tools: this box has no upstream MCP server configured)");
        } else if self.sees_unclassified() {
            text.push_str(", and any other tool of the configured upstreams");
        }
        text.push('.');
        text
    }

    /// The allowed tools that exist here: all of them with an upstream (or under the
    /// `browser` profile), else only the box's own.
    pub fn present_tools(&self, upstreams: bool) -> Vec<String> {
        self.tools
            .iter()
            .filter(|n| {
                upstreams || self.profile == Profile::Browser || crate::tools::find(n).is_some()
            })
            .map(|n| n.to_string())
            .collect()
    }
}

/// What serves tools on this box besides its own registry: the catalogue's other sources
/// (`tools::ConnCatalog`), as the daemon has them now. What a grant says it lends is read
/// through these, so the grant JSON, the CLI and the console name what `tools/list` gives.
#[derive(Clone, Copy, Debug, Default)]
pub struct Sources<'a> {
    /// The persistent upstream MCP servers (`--upstream`); `None`: none configured.
    pub upstream: Option<&'a dyn super::UpstreamSource>,
    /// The browser tier (`--browser-command`); `None`: none configured.
    pub browsers: Option<&'a dyn super::BrowserTier>,
}

/// Why a tool of a grant's list is not lent on this box: its source is not configured.
pub const NO_UPSTREAM: &str =
    "browser tools come from an upstream MCP server and this daemon has none (serve --upstream URL)";
/// Said after [`NO_UPSTREAM`] when an `allow` list is refused for it.
pub const BROWSER_PROFILE_HINT: &str =
    "; a browser of the grant's own is --profile browser, on a daemon with --browser-command";
/// Why a tool of a grant's list is not lent now: the configured upstream does not list it.
pub const UPSTREAM_LACKS: &str = "the upstream MCP server does not offer them now";
/// Why a `browser` grant's tool is not lent: the browser command does not offer it.
pub const BROWSER_LACKS: &str = "this box's --browser-command does not offer them";

impl ToolPolicy {
    /// The tools this policy lends on this box now, in `tools/list` order: the names
    /// `tools::ConnCatalog::list` gives for it (a unit test holds the two together). Under
    /// `owner` the upstreams' tools without a class are among them.
    pub fn lent(&self, here: Sources<'_>) -> Vec<String> {
        if self.profile == Profile::Browser {
            let Some(browsers) = here.browsers else {
                return Vec::new();
            };
            return browsers
                .tools()
                .iter()
                .filter_map(|t| t.get("name").and_then(serde_json::Value::as_str))
                .filter(|n| self.allows(n))
                .map(str::to_string)
                .collect();
        }
        let mut names: Vec<String> = super::registered()
            .iter()
            .filter(|t| self.allows(t.name))
            .map(|t| t.name.to_string())
            .collect();
        if let Some(up) = here.upstream {
            for (_, tool) in up.tools() {
                let Some(name) = tool.get("name").and_then(serde_json::Value::as_str) else {
                    continue;
                };
                if self.allows(name) && !names.iter().any(|n| n == name) {
                    names.push(name.to_string());
                }
            }
        }
        names
    }

    /// The policy's tools that could be lent on this box, whether listed now or not: the
    /// local ones; upstream ones only with an upstream configured (it may list a tool it
    /// lacks now once it restarts); a `browser` grant's only as its browser command offers
    /// them. The escalation check reads these, so a tool this box can never serve makes
    /// no verdict, and an upstream that is down for a moment lowers none.
    fn could_lend<'a>(&'a self, here: Sources<'a>) -> impl Iterator<Item = &'static str> + 'a {
        self.tools.iter().copied().filter(move |name| {
            if self.profile == Profile::Browser {
                return here.browsers.is_some_and(|b| b.offers(name));
            }
            super::find(name).is_some() || here.upstream.is_some()
        })
    }

    /// The policy's tools not lent on this box now, and why (`None` when all are).
    pub fn unavailable(&self, here: Sources<'_>) -> Option<(Vec<&'static str>, &'static str)> {
        let lent = self.lent(here);
        let missing: Vec<&'static str> = self
            .tools
            .iter()
            .copied()
            .filter(|t| !lent.iter().any(|l| l == t))
            .collect();
        if missing.is_empty() {
            return None;
        }
        let why = if self.profile == Profile::Browser {
            BROWSER_LACKS
        } else if here.upstream.is_none() {
            NO_UPSTREAM
        } else {
            UPSTREAM_LACKS
        };
        Some((missing, why))
    }

    /// The escalation check (§11) over what this grant can be lent on this box
    /// ([`Self::could_lend`]), plus the upstreams' unclassified tools under `owner` when
    /// there is an upstream: the grant JSON's `shell`.
    pub fn escalation_here(
        &self,
        here: Sources<'_>,
        needs_approval: impl Fn(&str) -> bool,
    ) -> Escalation {
        let unclassified =
            (self.sees_unclassified() && here.upstream.is_some()).then_some((UNCLASSIFIED, None));
        let visible = self
            .could_lend(here)
            .map(|name| (name, self.class_of(name)))
            .chain(unclassified);
        escalation(visible, needs_approval)
    }

    /// The `400` for an `allow` entry that can lend nothing on this box: every tool it
    /// names comes from a source this daemon does not have (a browser tool without
    /// `--upstream`). A grant never quietly lends less than it was asked for.
    pub fn check_here(&self, here: Sources<'_>) -> Result<(), String> {
        let can: Vec<&str> = self.could_lend(here).collect();
        let cannot = self.tools.iter().filter(|t| !can.contains(t));
        // An entry the grant's `deny` emptied is the caller's choice, not a missing tool.
        let missing: Vec<&str> = self
            .lists
            .allow
            .iter()
            .filter(|p| !can.iter().any(|t| matches(p, t)) && cannot.clone().any(|t| matches(p, t)))
            .map(String::as_str)
            .collect();
        if missing.is_empty() {
            return Ok(());
        }
        Err(format!(
            "allow names tools this box does not have: {} ({NO_UPSTREAM}{BROWSER_PROFILE_HINT})",
            missing.join(", ")
        ))
    }
}

#[cfg(test)]
mod tests;
