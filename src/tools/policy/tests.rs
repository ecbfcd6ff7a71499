//! Unit tests of `tools::policy`.

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
    // files: sys_info, the file tools and any other tool that takes a path (confined by
    // the same folder), no shell, whatever it denies.
    let files = ToolPolicy::fixed(Profile::Files).unwrap();
    assert!(files.confined());
    assert!(files.tools().contains(&"sys_info"));
    for tool in &file_tools {
        assert!(files.tools().contains(tool), "files lacks {tool}");
    }
    for tool in files.tools().iter().filter(|t| **t != "sys_info") {
        let takes_path = super::super::find(tool).is_some_and(|t| !t.takes_path().is_empty());
        assert!(takes_path, "files lends {tool}, which takes no path");
    }
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
    let again = ToolPolicy::resume("custom", granted.lists().clone(), &stored).expect("unchanged");
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
        _: Arc<crate::pool::CallCtl>,
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
