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
mod tests {
    use super::*;

    fn lists(allow: &[&str], deny: &[&str]) -> ToolLists {
        ToolLists {
            allow: allow.iter().map(|s| s.to_string()).collect(),
            deny: deny.iter().map(|s| s.to_string()).collect(),
        }
    }

    fn custom(allow: &[&str]) -> Result<ToolPolicy, String> {
        ToolPolicy::new(Profile::Custom, lists(allow, &[]))
    }

    fn fixed() -> impl Iterator<Item = Profile> {
        Profile::ALL.into_iter().filter(|p| !p.is_custom())
    }

    /// Nothing is gated.
    fn none(_: &str) -> bool {
        false
    }

    /// A name no table classifies, shaped like a browser tool.
    const NEW_UPSTREAM_TOOL: &str = "browser_brand_new_tool";

    #[test]
    fn every_tool_is_classified_once_local_first() {
        let all: Vec<Entry> = classified().collect();
        let mut names: Vec<&str> = all.iter().map(|e| e.name).collect();
        let n = names.len();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), n, "a tool is classified twice");
        let locals = all.iter().take_while(|e| e.origin == Origin::Local).count();
        assert_eq!(locals, super::super::TOOLS.len());
        assert!(all[locals..].iter().all(|e| e.origin == Origin::Upstream));
        for tool in super::super::TOOLS {
            assert_eq!(classify(tool.name).map(|e| e.class), Some(tool.class));
        }
        assert_eq!(classify(NEW_UPSTREAM_TOOL), None);
    }

    #[test]
    fn patterns_are_exact_or_a_trailing_star_prefix() {
        assert!(matches("bash", "bash"));
        assert!(!matches("bas", "bash"));
        assert!(matches("browser_*", "browser_snapshot"));
        assert!(matches("*", "sys_info"));
        assert!(!matches("browser_*", "bash"));
        assert!(
            !matches("b*sh", "bash"),
            "only a trailing star is a pattern"
        );
        assert!(!matches("browser_**", "browser_snapshot"));
    }

    // Boundary tests: they call the same escalation check as grant creation does. The
    // claims it makes for grants a browser can reach are also attacked end to end, with
    // real chromium, in tests/chains.rs (contract §14's chains: the token read through the
    // browser, a `javascript:` URL on the admin origin); its
    // `every_browser_boundary_the_escalation_check_claims_is_attacked` fails when a
    // profile, tool or flag adds such a claim that the chains do not try.

    #[test]
    fn no_unclassified_tool_reaches_any_profile_but_owner() {
        for profile in fixed() {
            let policy = ToolPolicy::fixed(profile).unwrap();
            assert_eq!(
                policy.allows(NEW_UPSTREAM_TOOL),
                profile == Profile::Owner,
                "{profile}"
            );
            assert_eq!(policy.sees_unclassified(), profile == Profile::Owner);
            assert!(policy.tools().iter().all(|t| classify(t).is_some()));
        }
        // Not even by the widest list: a pattern matches classified tools only.
        let all = custom(&["*"]).unwrap();
        assert!(!all.allows(NEW_UPSTREAM_TOOL));
        assert_eq!(all.tools().len(), classified().count());
        let browser = custom(&["browser_*"]).unwrap();
        assert!(!browser.allows(NEW_UPSTREAM_TOOL));
        // Nor by naming it, in any list.
        assert_eq!(
            custom(&[NEW_UPSTREAM_TOOL]).unwrap_err(),
            format!("unknown tool in allow: {NEW_UPSTREAM_TOOL}")
        );
        assert_eq!(
            custom(&["browser_brand_*"]).unwrap_err(),
            "unknown tool in allow: browser_brand_*"
        );
        assert_eq!(
            ToolPolicy::new(Profile::Owner, lists(&[], &[NEW_UPSTREAM_TOOL])).unwrap_err(),
            format!("unknown tool in deny: {NEW_UPSTREAM_TOOL}")
        );
    }

    #[test]
    fn boundary_profiles_hold_no_shell_and_no_act_tool_outside_their_lists() {
        // Every fixed profile not declared shell-equivalent (observe; browser when it
        // lands), with no deny and with each single deny: denying only ever removes.
        let boundaries: Vec<Profile> = fixed().filter(|p| !p.is_shell_equivalent()).collect();
        assert!(boundaries.contains(&Profile::Observe));
        for profile in boundaries {
            let denies = std::iter::once(None).chain(classified().map(|e| Some(e.name)));
            for deny in denies {
                let Ok(policy) = ToolPolicy::new(profile, lists(&[], deny.as_slice())) else {
                    continue; // denying its last tool leaves nothing: refused
                };
                assert_eq!(
                    policy.escalation(none).shell,
                    Shell::No,
                    "{profile} {deny:?}"
                );
                for tool in policy.tools() {
                    let entry = classify(tool).unwrap();
                    let class = policy.class_of(tool).unwrap();
                    assert_ne!(class, Class::Shell, "{profile} holds {tool}");
                    if class == Class::Act {
                        assert!(in_profile(profile, &entry), "{profile}: {tool}");
                    }
                    assert_ne!(Some(*tool), deny, "{profile}: denied {tool} stays");
                }
                assert!(!policy.sees_unclassified(), "{profile}");
            }
        }
        // observe's own list has no act tool at all, and no browser tool.
        let observe = ToolPolicy::fixed(Profile::Observe).unwrap();
        for tool in observe.tools() {
            assert_eq!(classify(tool).unwrap().class, Class::Observe, "{tool}");
        }
        assert!(!observe.allows("browser_snapshot"));
        assert!(boundaries_include_files());
    }

    fn boundaries_include_files() -> bool {
        fixed().any(|p| p == Profile::Files && !p.is_shell_equivalent())
    }

    #[test]
    fn a_lent_folder_confines_the_file_tools_and_nothing_else() {
        let file_tools: Vec<&str> = super::super::TOOLS
            .iter()
            .filter(|t| super::super::files::confined_class(t.name).is_some())
            .map(|t| t.name)
            .collect();
        assert!(!file_tools.is_empty());
        // files: sys_info plus the file tools, no shell, whatever it denies.
        let files = ToolPolicy::fixed(Profile::Files).unwrap();
        assert!(files.confined());
        let mut want = vec!["sys_info"];
        want.extend(&file_tools);
        assert_eq!(files.tools(), want.as_slice());
        assert_eq!(files.escalation(none).shell, Shell::No);
        // The same tools unconfined are shell tools: a custom list naming one without a
        // folder reaches the shell, with a folder it does not.
        for tool in &file_tools {
            let bare = custom(&[tool]).unwrap();
            assert_eq!(bare.escalation(none).shell, Shell::Yes, "{tool}");
            let lent = custom(&[tool])
                .unwrap()
                .with_folder(Some(PathBuf::from("/srv/lent")));
            assert_eq!(lent.escalation(none).shell, Shell::No, "{tool}");
            assert_ne!(lent.class_of(tool), Some(Class::Shell));
        }
        // A folder changes no other tool's class: owner with a folder is still a shell.
        let owner = ToolPolicy::fixed(Profile::Owner)
            .unwrap()
            .with_folder(Some(PathBuf::from("/srv/lent")));
        assert_eq!(owner.class_of("bash"), Some(Class::Shell));
        assert_eq!(owner.escalation(none).shell, Shell::Yes);
    }

    #[test]
    fn fixed_profiles_are_what_they_are_declared_and_yes_means_a_shell_tool() {
        for profile in fixed() {
            let policy = ToolPolicy::fixed(profile).unwrap();
            let check = policy.escalation(none);
            assert_eq!(
                check.shell == Shell::Yes,
                profile.is_shell_equivalent(),
                "{profile}: {check:?}"
            );
            let has_shell = policy
                .tools()
                .iter()
                .any(|t| policy.class_of(t).unwrap() == Class::Shell);
            if !profile.is_shell_equivalent() {
                assert!(!has_shell, "{profile} holds a shell tool");
            }
        }
        assert_eq!(
            ToolPolicy::fixed(Profile::Owner).unwrap().escalation(none),
            Escalation {
                shell: Shell::Yes,
                because: Some("bash is a shell tool".into())
            }
        );
        // desktop never gets code execution in the browser.
        let desktop = ToolPolicy::fixed(Profile::Desktop).unwrap();
        for tool in ["browser_evaluate", "browser_run_code_unsafe"] {
            assert!(!desktop.allows(tool), "{tool}");
        }
        assert!(ToolPolicy::fixed(Profile::Custom).is_none());
    }

    #[test]
    fn any_list_holding_a_shell_tool_is_yes() {
        for entry in classified().filter(|e| e.class == Class::Shell) {
            for allow in [vec![entry.name], vec!["sys_info", entry.name]] {
                let policy = custom(&allow).unwrap();
                assert_eq!(
                    policy.escalation(none),
                    Escalation {
                        shell: Shell::Yes,
                        because: Some(format!("{} is a shell tool", entry.name))
                    },
                    "{allow:?}"
                );
            }
        }
        // And a list without one is no, whatever else it holds.
        for entry in classified().filter(|e| e.class != Class::Shell) {
            assert_eq!(
                custom(&[entry.name]).unwrap().escalation(none).shell,
                Shell::No,
                "{}",
                entry.name
            );
        }
        // A pattern counts for everything it matches.
        let policy = custom(&["browser_*"]).unwrap();
        assert_eq!(policy.escalation(none).shell, Shell::Yes);
        // Denying every shell tool of desktop leaves it no shell.
        let desktop = ToolPolicy::fixed(Profile::Desktop).unwrap();
        let shell_tools: Vec<&str> = desktop
            .tools()
            .iter()
            .copied()
            .filter(|t| desktop.class_of(t) == Some(Class::Shell))
            .collect();
        assert!(shell_tools.contains(&"bash"));
        let tamed = ToolPolicy::new(Profile::Desktop, lists(&[], &shell_tools));
        assert_eq!(tamed.unwrap().escalation(none).shell, Shell::No);
    }

    #[test]
    fn the_check_itself_gates_on_approval_and_counts_unclassified_as_shell() {
        // `approve` as the grant's gate resolves it: names, or "shell" for every
        // shell-class tool, the unclassified ones included.
        let shell = |v: &[(&str, Option<Class>)], approve: &[&str]| {
            let word = approve.contains(&"shell");
            let gated = |t: &str| {
                approve.contains(&t)
                    || (word
                        && matches!(
                            v.iter().find(|(n, _)| *n == t),
                            Some((_, None | Some(Class::Shell)))
                        ))
            };
            escalation(v.iter().copied(), gated)
        };
        let v = [
            ("sys_info", Some(Class::Observe)),
            ("bash", Some(Class::Shell)),
            ("key", Some(Class::Shell)),
        ];
        assert_eq!(shell(&v, &[]).shell, Shell::Yes);
        assert_eq!(
            shell(&v, &["bash"]).because.as_deref(),
            Some("key is a shell tool")
        );
        assert_eq!(shell(&v, &["bash", "key"]).shell, Shell::Gated);
        assert_eq!(shell(&v, &["shell"]).shell, Shell::Gated);
        assert_eq!(shell(&v[..1], &[]).shell, Shell::No);
        assert_eq!(
            shell(&v[..1], &["shell"]).shell,
            Shell::No,
            "nothing to gate"
        );
        let owner_like = [("sys_info", Some(Class::Observe)), (UNCLASSIFIED, None)];
        assert_eq!(
            shell(&owner_like, &[]).because.as_deref(),
            Some("any upstream tool without a class counts as a shell tool")
        );
        assert_eq!(shell(&owner_like, &["shell"]).shell, Shell::Gated);
        // owner without any classified shell tool still sees unclassified ones.
        let owner = ToolPolicy::new(
            Profile::Owner,
            lists(&[], &["bash", "mouse", "key", "browser_*"]),
        )
        .unwrap();
        assert_eq!(owner.escalation(none).shell, Shell::Yes);
        assert!(owner.allows(NEW_UPSTREAM_TOOL));
    }

    #[test]
    fn the_browser_profile_is_the_browser_tier_less_its_deny() {
        let browser = ToolPolicy::fixed(Profile::Browser).unwrap();
        let tier: Vec<&str> = crate::profiles::browser_profile_tools().collect();
        assert_eq!(browser.tools(), tier.as_slice());
        assert_eq!(tier.len(), 36);
        assert_eq!(browser.escalation(none).shell, Shell::No);
        assert!(!browser.sees_unclassified() && !browser.allows("bash"));
        assert!(!browser.allows("browser_evaluate"));
        let less = ToolPolicy::new(Profile::Browser, lists(&[], &["browser_navigate*"])).unwrap();
        assert_eq!(less.tools().len(), 34);
        assert!(!less.allows("browser_navigate") && less.allows("browser_click"));
        assert_eq!(
            ToolPolicy::new(Profile::Browser, lists(&["browser_click"], &[])).unwrap_err(),
            ALLOW_NEEDS_CUSTOM_ERROR
        );
        // A custom list may name browser-tier tools (served by the persistent upstream).
        let c = custom(&["browser_navigate", "browser_run_code_unsafe"]).unwrap();
        assert_eq!(
            c.escalation(none),
            Escalation {
                shell: Shell::Yes,
                because: Some("browser_run_code_unsafe is a shell tool".into())
            }
        );
        assert_eq!(
            c.escalation(|t| t == "browser_run_code_unsafe").shell,
            Shell::Gated
        );
    }

    #[test]
    fn each_rule_answers_its_400() {
        let cases: Vec<(Profile, ToolLists, String)> = vec![
            (
                Profile::Desktop,
                lists(&["bash"], &[]),
                ALLOW_NEEDS_CUSTOM_ERROR.into(),
            ),
            (
                Profile::Observe,
                lists(&["sys_info"], &[]),
                ALLOW_NEEDS_CUSTOM_ERROR.into(),
            ),
            (
                Profile::Custom,
                lists(&[], &[]),
                CUSTOM_NEEDS_ALLOW_ERROR.into(),
            ),
            (
                Profile::Custom,
                lists(&[], &["bash"]),
                CUSTOM_NEEDS_ALLOW_ERROR.into(),
            ),
            (
                Profile::Custom,
                lists(&["sys_info", "nope"], &[]),
                "unknown tool in allow: nope".into(),
            ),
            (
                Profile::Custom,
                lists(&["sys_info"], &["Bash"]),
                "unknown tool in deny: Bash".into(),
            ),
            (
                Profile::Custom,
                lists(&[""], &[]),
                "unknown tool in allow: ".into(),
            ),
            (
                Profile::Observe,
                lists(&[], &crate::tools::names(Profile::Observe)),
                NO_TOOLS_ERROR.into(),
            ),
            (
                Profile::Custom,
                lists(&["browser_*"], &["browser_*"]),
                NO_TOOLS_ERROR.into(),
            ),
            (Profile::Owner, lists(&[], &["*"]), NO_TOOLS_ERROR.into()),
        ];
        for (profile, l, want) in cases {
            assert_eq!(
                ToolPolicy::new(profile, l.clone()).unwrap_err(),
                want,
                "{profile} {l:?}"
            );
        }
    }

    #[test]
    fn list_bounds_hold_at_the_bound_and_refuse_one_past_it() {
        for field in ["allow", "deny"] {
            let make = |n: usize| {
                let mut l = lists(&["sys_info", "screenshot"], &[]);
                if field == "allow" {
                    l.allow = vec!["sys_info".to_string(); n];
                } else {
                    l.deny = vec!["screenshot".to_string(); n];
                }
                ToolPolicy::new(Profile::Custom, l)
            };
            assert!(make(MAX_LIST_NAMES).is_ok(), "{field} at the bound");
            assert_eq!(
                make(MAX_LIST_NAMES + 1).unwrap_err(),
                format!(
                    "{field} holds {} names; at most {MAX_LIST_NAMES}",
                    MAX_LIST_NAMES + 1
                )
            );
        }
        let long_ok = format!("{}*", "b".repeat(MAX_TOOL_NAME_BYTES - 1));
        assert_eq!(
            custom(&[&long_ok]).unwrap_err(),
            format!("unknown tool in allow: {long_ok}"),
            "at the bound the name is only unknown"
        );
        let long = "é".repeat(MAX_TOOL_NAME_BYTES / 2 + 1);
        let err = custom(&[&long]).unwrap_err();
        assert!(
            err.starts_with(&format!(
                "allow names a tool longer than {MAX_TOOL_NAME_BYTES} bytes: é"
            )) && err.len() < 2 * MAX_TOOL_NAME_BYTES + 64,
            "{err}"
        );
    }

    #[test]
    fn lists_resolve_in_listing_order_and_compare_as_sets() {
        let p = custom(&["browser_snapshot", "sys_info", "sys_info"]).unwrap();
        assert_eq!(p.tools(), ["sys_info", "browser_snapshot"]);
        assert_eq!(p.lists().allow.len(), 3, "kept as given");
        let desktop = ToolPolicy::new(Profile::Desktop, lists(&[], &["browser_*"])).unwrap();
        assert_eq!(
            desktop.tools(),
            crate::tools::names(Profile::Desktop).as_slice()
        );
        assert!(lists(&["a", "b"], &["c"]).same_as(&lists(&["b", "a", "a"], &["c"])));
        assert!(!lists(&["a"], &[]).same_as(&lists(&["a"], &["c"])));
        assert!(!lists(&["browser_*"], &[]).same_as(&lists(&["browser_snapshot"], &[])));
        assert!(p.summary().contains("sys_info, browser_snapshot."));
        assert!(ToolPolicy::owner()
            .summary()
            .ends_with("configured upstreams."));
    }

    #[test]
    fn a_stored_grant_resumes_only_as_it_was_granted() {
        let granted = custom(&["browser_snapshot", "sys_info"]).unwrap();
        let stored: Vec<String> = granted.tools().iter().map(|s| s.to_string()).collect();
        let again =
            ToolPolicy::resume("custom", granted.lists().clone(), &stored).expect("unchanged");
        assert_eq!(again, granted);
        // A pattern that would now match more (or less) than it did: dropped.
        let err = ToolPolicy::resume("custom", lists(&["browser_*"], &[]), &stored).unwrap_err();
        assert!(err.contains("other tools than those granted"), "{err}");
        // A name no longer classified.
        assert_eq!(
            ToolPolicy::resume("custom", lists(&["browser_gone"], &[]), &stored).unwrap_err(),
            "unknown tool in allow: browser_gone"
        );
        assert_eq!(
            ToolPolicy::resume("desktop", lists(&[], &["browser_gone"]), &[]).unwrap_err(),
            "unknown tool in deny: browser_gone"
        );
        assert!(ToolPolicy::resume("sandbox", ToolLists::default(), &[])
            .unwrap_err()
            .starts_with("unknown profile"));
        // Fixed profiles follow the daemon's own lists.
        assert!(ToolPolicy::resume("desktop", ToolLists::default(), &[]).is_ok());
    }

    /// An upstream offering some classified browser tools (one no profile but owner and
    /// custom may use), a local name, and one without a class.
    #[derive(Debug)]
    struct Upstream(&'static [&'static str]);

    impl super::super::UpstreamSource for Upstream {
        fn tools(&self) -> Vec<(usize, serde_json::Value)> {
            let tool = |n: &&str| (0, serde_json::json!({"name": n, "inputSchema": {}}));
            self.0.iter().map(tool).collect()
        }

        fn call(
            &self,
            _: usize,
            _: &str,
            _: serde_json::Value,
            _: Arc<crate::pool::JobCtl>,
            _: crate::pool::Completion,
        ) {
            unreachable!("listing runs nothing")
        }
    }

    /// A browser tier whose command offers `0` (a learned list).
    #[derive(Debug)]
    struct Tier(&'static [&'static str]);

    impl super::super::BrowserTier for Tier {
        fn tools(&self) -> Vec<serde_json::Value> {
            crate::profiles::browser_profile_tools()
                .filter(|n| self.0.contains(n))
                .map(|n| serde_json::json!({"name": n, "inputSchema": {}}))
                .collect()
        }

        fn offers(&self, name: &str) -> bool {
            self.0.contains(&name)
        }
    }

    const OFFERED: &[&str] = &[
        "browser_snapshot",
        "browser_navigate",
        "browser_file_upload",
        "bash",
        NEW_UPSTREAM_TOOL,
    ];

    /// Issue 37: what a grant says it lends is `tools/list`'s names, for every profile
    /// and list, with and without an upstream and a browser tier.
    #[test]
    fn lent_is_what_the_catalogue_lists() {
        let up = Upstream(OFFERED);
        let tier = Tier(&["browser_snapshot", "browser_click", "browser_evaluate"]);
        let mut policies: Vec<ToolPolicy> = fixed().filter_map(ToolPolicy::fixed).collect();
        policies.push(custom(&["sys_info", "browser_*"]).unwrap());
        policies.push(custom(&["screenshot", "browser_snapshot", "browser_pdf_save"]).unwrap());
        policies.push(ToolPolicy::new(Profile::Desktop, lists(&[], &["browser_*"])).unwrap());
        let sources = [
            Sources::default(),
            Sources {
                upstream: Some(&up),
                browsers: None,
            },
            Sources {
                upstream: Some(&up),
                browsers: Some(&tier),
            },
            Sources {
                upstream: None,
                browsers: Some(&tier),
            },
        ];
        for policy in &policies {
            for here in sources {
                let catalog = super::super::ConnCatalog {
                    grant: None,
                    upstream: here.upstream,
                    browsers: here.browsers,
                    policy,
                };
                let listed: Vec<String> = super::super::Catalog::list(&catalog)
                    .iter()
                    .map(|t| t["name"].as_str().unwrap().to_string())
                    .collect();
                assert_eq!(policy.lent(here), listed, "{policy:?} {here:?}");
                // What is not lent is named, and nothing lent is.
                let missing = policy.unavailable(here).map(|(m, _)| m).unwrap_or_default();
                for t in policy.tools() {
                    assert_eq!(
                        missing.contains(t),
                        !listed.iter().any(|l| l == t),
                        "{t} {policy:?}"
                    );
                }
            }
        }
        // Without an upstream no profile lends a browser_* tool; the browser tier lends
        // what its command offers, never browser_evaluate.
        for policy in &policies {
            if policy.profile() != Profile::Browser {
                let lent = policy.lent(Sources::default());
                assert!(!lent.iter().any(|t| t.starts_with("browser_")), "{lent:?}");
            }
        }
        let browser = ToolPolicy::fixed(Profile::Browser).unwrap();
        let here = Sources {
            upstream: None,
            browsers: Some(&tier),
        };
        let mut lent = browser.lent(here);
        lent.sort();
        assert_eq!(lent, ["browser_click", "browser_snapshot"]);
        assert_eq!(browser.unavailable(here).unwrap().1, BROWSER_LACKS);
    }

    /// Issue 37: an `allow` naming a tool this box cannot serve is refused, naming it and
    /// why; the shell verdict counts only tools this box can lend.
    #[test]
    fn an_allow_naming_what_this_box_lacks_is_refused_and_the_verdict_counts_what_it_has() {
        let up = Upstream(OFFERED);
        let bare = Sources::default();
        let with_up = Sources {
            upstream: Some(&up),
            browsers: None,
        };
        let narrow = custom(&["sys_info", "screenshot", "browser_snapshot"]).unwrap();
        let err = narrow.check_here(bare).unwrap_err();
        assert_eq!(
            err,
            format!(
                "allow names tools this box does not have: browser_snapshot \
                 ({NO_UPSTREAM}{BROWSER_PROFILE_HINT})"
            )
        );
        assert_eq!(narrow.check_here(with_up), Ok(()));
        let wide = custom(&["sys_info", "browser_*"]).unwrap();
        assert!(wide.check_here(bare).unwrap_err().contains(": browser_* ("));
        // Without an upstream browser_file_upload cannot be lent: no shell; with one it can.
        assert_eq!(wide.escalation_here(bare, none).shell, Shell::No);
        let e = wide.escalation_here(with_up, none);
        assert_eq!(
            (e.shell, e.because.as_deref()),
            (Shell::Yes, Some("browser_file_upload is a shell tool"))
        );
        // A name the deny took out is the caller's choice, not a missing tool.
        let denied = ToolPolicy::new(Profile::Custom, lists(&["sys_info", "bash"], &["bash"]));
        assert_eq!(denied.unwrap().check_here(bare), Ok(()));
        // Fixed profiles are never refused for what the box lacks; they lend less.
        for profile in fixed() {
            assert_eq!(ToolPolicy::fixed(profile).unwrap().check_here(bare), Ok(()));
        }
        // Under owner the upstreams' tools without a class count only with an upstream.
        let owner = ToolPolicy::new(Profile::Owner, lists(&[], &["bash"])).unwrap();
        let shells: Vec<&str> = owner
            .tools()
            .iter()
            .copied()
            .filter(|t| owner.class_of(t) == Some(Class::Shell))
            .collect();
        let gate = |t: &str| shells.contains(&t);
        assert_eq!(owner.escalation_here(bare, gate).shell, Shell::Gated);
        assert_eq!(owner.escalation_here(with_up, gate).shell, Shell::Yes);
    }
}
