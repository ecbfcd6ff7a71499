//! Unit tests of `tools`.

use super::*;

#[test]
fn desktop_act_is_act_under_apps_and_a_shell_tool_everywhere_else() {
    assert_eq!(a11y::ACT.name, apps::DESKTOP_ACT);
    assert_eq!(a11y::ACT.class, Class::Shell);
    let apps = ToolPolicy::fixed(Profile::Apps).unwrap();
    assert!(apps.allows(a11y::ACT.name) && apps.allows(a11y::SNAPSHOT.name));
    assert_eq!(apps.class_of(a11y::ACT.name), Some(Class::Act));
    for profile in [Profile::Owner, Profile::Desktop] {
        let p = ToolPolicy::fixed(profile).unwrap();
        assert_eq!(p.class_of(a11y::ACT.name), Some(Class::Shell), "{profile}");
    }
    let custom = ToolPolicy::new(
        Profile::Custom,
        policy::ToolLists {
            allow: vec![a11y::ACT.name.into()],
            deny: Vec::new(),
        },
    )
    .unwrap();
    assert_eq!(custom.escalation(|_| false).shell, policy::Shell::Yes);
}

#[test]
fn every_tool_is_registered_once_with_a_class_reason_and_a_profile() {
    check_registry();
}

/// What `tools::tests` demand of every registered tool (see ARCHITECTURE.md, "Adding a
/// tool").
fn check_registry() {
    let mut seen = std::collections::HashSet::new();
    for tool in registered() {
        assert!(seen.insert(tool.name), "{} is registered twice", tool.name);
        assert!(
            !tool.name.is_empty() && !tool.name.starts_with("browser_"),
            "{:?}: local names never take the upstream prefix",
            tool.name
        );
        assert!(
            !tool.class_reason.trim().is_empty() && !tool.class_reason.contains('\n'),
            "{} needs a one-line reason for its class",
            tool.name
        );
        assert!(
            !tool.profiles.is_empty(),
            "{} is placed in no profile: nobody could call it",
            tool.name
        );
        let placed: std::collections::HashSet<_> = tool.profiles.iter().collect();
        assert_eq!(placed.len(), tool.profiles.len(), "{}", tool.name);
        assert!(!tool.description.is_empty(), "{}", tool.name);
        assert_eq!((tool.input_schema)()["type"], "object", "{}", tool.name);
        assert_eq!(find(tool.name).map(|t| t.name), Some(tool.name));
    }
    assert!(find("no_such_tool").is_none());
}

/// The newcomer tool: read-only, in `owner` and `observe`. Its module would be
/// this static; its registration one line in [`TOOLS`].
static UPTIME: Tool = Tool {
    name: "uptime",
    class: Class::Observe,
    class_reason: "reads how long the box has been up",
    description: "How long this box has been up.",
    input_schema: || json!({"type": "object", "properties": {}}),
    output_schema: None,
    start: |_, _, done| done.complete(ToolOutput::Result(json!({"content": []}))),
    inline: None,
    needs: Needs::Nothing,
    reach: Reach::Nothing,
    changes_screen: false,
    profiles: &[Profile::Owner, Profile::Observe],
};

/// Adding a tool is its module plus one registration line: with `UPTIME` registered
/// and nothing else edited, it is listed, placed in its profiles only, classified,
/// annotated, resolved, counted by the escalation check, and reported by `sys_info`.
#[test]
fn a_scratch_tool_flows_everywhere_from_its_registration_alone() {
    with_scratch_tools(&[&UPTIME], || {
        check_registry();
        assert_eq!(registered().len(), TOOLS.len() + 1);
        assert!(find("uptime").is_some());
        for profile in Profile::ALL {
            assert_eq!(
                names(profile).contains(&"uptime"),
                UPTIME.profiles.contains(&profile),
                "{profile}"
            );
        }
        let entry = policy::classify("uptime").expect("classified");
        assert_eq!(
            (entry.class, entry.reason, entry.origin),
            (Class::Observe, UPTIME.class_reason, policy::Origin::Local)
        );
        assert_eq!(class_of_any("uptime"), Some(Class::Observe));
        let observe = ToolPolicy::fixed(Profile::Observe).unwrap();
        assert!(observe.tools().contains(&"uptime"));
        assert_eq!(observe.escalation(|_| false).shell, policy::Shell::No);
        assert!(!ToolPolicy::fixed(Profile::Desktop)
            .unwrap()
            .allows("uptime"));
        let cat = ConnCatalog {
            grant: None,
            upstream: None,
            browsers: None,
            policy: &observe,
        };
        let listed = cat.list();
        let tool = listed
            .iter()
            .find(|t| t["name"] == "uptime")
            .expect("listed");
        assert_eq!(tool["annotations"], Class::Observe.annotations().to_json());
        assert_eq!(cat.resolve("uptime"), Resolution::Visible(Route::Local));
        let custom = custom(&["upt*"], &[]);
        assert_eq!(custom.tools(), ["uptime"]);
        let facts = sysinfo::StaticFacts::gather();
        let display = display::Probe::working_x11().to_json();
        let status = sysinfo::tool_status(&observe, &facts, &display);
        assert!(
            status.contains(&json!({"name": "uptime", "works": true})),
            "{status:?}"
        );
    });
    assert!(find("uptime").is_none(), "the scratch registry is gone");
}

/// Every fixed profile's policy (custom has no list of its own).
fn fixed() -> Vec<ToolPolicy> {
    Profile::ALL
        .into_iter()
        .filter_map(ToolPolicy::fixed)
        .collect()
}

fn custom(allow: &[&str], deny: &[&str]) -> ToolPolicy {
    let lists = policy::ToolLists {
        allow: allow.iter().map(|s| s.to_string()).collect(),
        deny: deny.iter().map(|s| s.to_string()).collect(),
    };
    ToolPolicy::new(Profile::Custom, lists).unwrap()
}

fn local_names(policy: &ToolPolicy) -> Vec<&'static str> {
    TOOLS
        .iter()
        .filter(|t| policy.allows(t.name))
        .map(|t| t.name)
        .collect()
}

#[test]
fn app_open_works_only_where_there_is_a_screen() {
    let facts = sysinfo::StaticFacts::gather();
    let policy = ToolPolicy::fixed(Profile::Desktop).unwrap();
    let status = |display: &Value| {
        sysinfo::tool_status(&policy, &facts, display)
            .into_iter()
            .find(|t| t["name"] == apps::OPEN.name)
            .expect("app_open is in desktop")
    };
    let x11 = display::Probe::working_x11().to_json();
    assert_eq!(status(&x11)["works"], true);
    let mut none = x11.clone();
    none["backend"] = json!("none");
    let t = status(&none);
    assert_eq!(t["works"], false, "{t}");
    assert!(t["why"].as_str().unwrap().contains("display"), "{t}");
    let mut broken = x11;
    broken["problem"] = json!("DISPLAY=:7 does not answer");
    assert_eq!(status(&broken)["why"], "DISPLAY=:7 does not answer");
}

#[test]
fn every_tool_has_a_readiness_fact_in_sys_info() {
    let facts = sysinfo::StaticFacts::gather();
    let display = display::Probe::working_x11().to_json();
    let mut policies = fixed();
    policies.push(custom(&["screenshot", "bash"], &[]));
    for policy in &policies {
        let status = sysinfo::tool_status(policy, &facts, &display);
        let reported: Vec<&str> = status.iter().filter_map(|t| t["name"].as_str()).collect();
        assert_eq!(reported, local_names(policy), "{policy:?}");
        for t in &status {
            assert!(t["works"].is_boolean(), "{t}");
            assert!(
                t["works"] == true || t["why"].is_string(),
                "{t}: a tool that does not work says why"
            );
            assert_ne!(t["why"], "no display facts for this tool", "{t}");
        }
    }
    for profile in Profile::ALL.into_iter().filter(|p| !p.is_custom()) {
        let policy = ToolPolicy::fixed(profile).unwrap();
        assert_eq!(local_names(&policy), names(profile), "{profile}");
    }
    for tool in TOOLS {
        match tool.needs {
            Needs::Display(gui) => {
                assert_eq!(gui.name(), tool.name);
                assert!(
                    display["tools"][tool.name]["works"].is_boolean(),
                    "{}",
                    tool.name
                );
            }
            Needs::Nothing | Needs::Bash | Needs::Screen => {}
        }
    }
    for gui in display::Gui::ALL {
        let users = display::gui_tools().filter(|(_, g)| *g == gui).count();
        assert_eq!(users, 1, "{gui:?} must belong to exactly one tool");
    }
}

#[test]
fn only_shell_equivalent_profiles_hold_shell_tools() {
    for profile in Profile::ALL {
        if profile.is_shell_equivalent() {
            continue;
        }
        // The class the tool has there: a profile that requires a lent folder
        // confines the file tools.
        let policy = ToolPolicy::fixed(profile);
        for tool in allowed(profile) {
            let class = policy
                .as_ref()
                .and_then(|p| p.class_of(tool.name))
                .unwrap_or(tool.class);
            assert_ne!(class, Class::Shell, "{profile} allows {}", tool.name);
        }
    }
}

#[test]
fn observe_holds_only_observe_tools() {
    for tool in allowed(Profile::Observe) {
        assert_eq!(tool.class, Class::Observe, "{}", tool.name);
    }
    assert!(!Profile::Observe.is_shell_equivalent());
}

/// An upstream offering a classified browser tool, one desktop may not use, a local
/// name, and one without a class.
#[derive(Debug)]
struct FakeUpstream;

const UNCLASSIFIED_TOOL: &str = "browser_not_in_any_table";

impl UpstreamSource for FakeUpstream {
    fn tools(&self) -> Vec<(usize, Value)> {
        [
            "browser_snapshot",
            "browser_evaluate",
            "bash",
            UNCLASSIFIED_TOOL,
        ]
        .iter()
        .map(|n| (0, json!({"name": n, "inputSchema": {"type": "object"}})))
        .collect()
    }

    fn call(&self, _: usize, _: &str, _: Value, _: Arc<CallCtl>, _: Completion) {
        unreachable!("the catalogue never runs tools")
    }
}

#[test]
fn the_browser_profile_holds_no_local_tool() {
    assert!(names(Profile::Browser).is_empty());
    assert!(!Profile::Browser.is_shell_equivalent());
}

#[test]
fn unknown_and_hidden_tools_resolve_as_before() {
    for policy in fixed() {
        let cat = ConnCatalog {
            grant: None,
            upstream: None,
            browsers: None,
            policy: &policy,
        };
        for tool in TOOLS {
            let want = if tool.allowed_in(policy.profile()) {
                Resolution::Visible(Route::Local)
            } else {
                Resolution::Hidden
            };
            assert_eq!(cat.resolve(tool.name), want, "{policy:?} {}", tool.name);
        }
        assert_eq!(cat.resolve("nope"), Resolution::Unknown);
    }
}

#[test]
fn a_custom_catalogue_lists_and_resolves_exactly_its_tools() {
    let up = FakeUpstream;
    let policy = custom(&["screenshot", "browser_*"], &["browser_evaluate"]);
    let cat = ConnCatalog {
        grant: None,
        upstream: Some(&up),
        browsers: None,
        policy: &policy,
    };
    let listed: Vec<Value> = cat.list().iter().map(|t| t["name"].clone()).collect();
    assert_eq!(listed, ["screenshot", "browser_snapshot"]);
    assert_eq!(cat.resolve("screenshot"), Resolution::Visible(Route::Local));
    assert_eq!(
        cat.resolve("browser_snapshot"),
        Resolution::Visible(Route::Upstream(0))
    );
    for hidden in ["bash", "sys_info", "browser_evaluate", UNCLASSIFIED_TOOL] {
        assert_eq!(cat.resolve(hidden), Resolution::Hidden, "{hidden}");
    }
    // The unclassified tool: owner only, whatever the pattern.
    for policy in fixed() {
        let cat = ConnCatalog {
            grant: None,
            upstream: Some(&up),
            browsers: None,
            policy: &policy,
        };
        let owner = policy.profile() == Profile::Owner;
        let listed = cat.list();
        assert_eq!(
            listed.iter().any(|t| t["name"] == UNCLASSIFIED_TOOL),
            owner,
            "{policy:?}"
        );
        assert_eq!(
            cat.resolve(UNCLASSIFIED_TOOL) != Resolution::Hidden,
            owner,
            "{policy:?}"
        );
        assert_eq!(
            listed.iter().filter(|t| t["name"] == "bash").count(),
            usize::from(policy.allows("bash")),
            "a local name wins and is listed once"
        );
    }
}

#[test]
fn every_listed_tool_carries_all_four_annotations() {
    for policy in fixed() {
        let cat = ConnCatalog {
            grant: None,
            upstream: None,
            browsers: None,
            policy: &policy,
        };
        for tool in cat.list() {
            let ann = &tool["annotations"];
            for key in [
                "readOnlyHint",
                "destructiveHint",
                "idempotentHint",
                "openWorldHint",
            ] {
                assert!(ann[key].is_boolean(), "{} lacks {key}", tool["name"]);
            }
            assert!(tool["inputSchema"]["type"] == "object", "{}", tool["name"]);
            // Declared with the tool, once; listed as declared (2025-06-18 and later
            // server/tools "Output Schema"; an object schema, as 2025-06-18 asks).
            let name = tool["name"].as_str().unwrap();
            let declared = find(name).and_then(|t| t.output_schema).map(|f| f());
            assert_eq!(tool.get("outputSchema"), declared.as_ref(), "{name}");
            if let Some(schema) = declared {
                assert_eq!(schema["type"], "object", "{name}");
            }
        }
        let listed: Vec<Value> = cat.list().iter().map(|t| t["name"].clone()).collect();
        assert_eq!(listed, names(policy.profile()), "{policy:?}");
    }
}

#[test]
fn tasks_map_onto_the_registrys_job_tools_only_where_all_are_usable_and_ungated() {
    fn catalog<'a>(policy: &'a ToolPolicy, grant: Option<&'a GrantNote>) -> ConnCatalog<'a> {
        ConnCatalog {
            grant,
            upstream: None,
            browsers: None,
            policy,
        }
    }
    let owner = ToolPolicy::owner();
    let tools = catalog(&owner, None)
        .tasks()
        .expect("owner has the job tools");
    assert_eq!(
        (tools.call, tools.start, tools.poll, tools.cancel),
        (
            bash::TOOL.name,
            jobs::job_tools::START.name,
            jobs::job_tools::POLL.name,
            jobs::job_tools::CANCEL.name
        )
    );
    for policy in fixed() {
        let has_all = [tools.call, tools.start, tools.poll, tools.cancel]
            .iter()
            .all(|n| names(policy.profile()).contains(n));
        assert_eq!(
            catalog(&policy, None).tasks().is_some(),
            has_all,
            "{policy:?}"
        );
    }
    // A grant whose approvals gate bash keeps its bash calls synchronous (and asked).
    let gated = GrantNote {
        id: "g".into(),
        session: "s".into(),
        expires_at: 0,
        approve: vec!["bash".into()],
        approval_wait: Duration::from_secs(60),
    };
    assert_eq!(catalog(&owner, Some(&gated)).tasks(), None);
}

#[test]
fn grant_note_reaches_descriptions_and_instructions() {
    let note = GrantNote {
        id: "g1".into(),
        session: "laptop".into(),
        expires_at: 0,
        approve: vec!["bash".into()],
        approval_wait: Duration::from_secs(60),
    };
    let observe = ToolPolicy::fixed(Profile::Observe).unwrap();
    let cat = ConnCatalog {
        grant: Some(&note),
        upstream: None,
        browsers: None,
        policy: &observe,
    };
    let tools = cat.list();
    let description = tools[0]["description"].as_str().unwrap();
    assert!(description.contains("profile 'observe' until 1970-01-01T00:00:00Z"));
    assert!(!description.contains("It may use"), "no lists, no list");
    assert!(cat.instructions().contains("laptop"));
    assert!(description.contains(
        "Each call of bash waits until the person who lent the box allows it (at most 60 s)"
    ));
    // Under a custom grant every description says what the agent may use: what
    // tools/list gives (no browser tool without an upstream), as the instructions do.
    let policy = custom(&["sys_info", "browser_snapshot"], &[]);
    let cat = ConnCatalog {
        grant: Some(&note),
        upstream: None,
        browsers: None,
        policy: &policy,
    };
    let tools = cat.list();
    assert_eq!(tools.len(), 1);
    let description = tools[0]["description"].as_str().unwrap();
    assert!(
        description.contains("profile 'custom'")
            && description.contains(
                "It may use: sys_info (no browser tools: this box has no upstream MCP \
                     server configured)."
            ),
        "{description}"
    );
    assert!(cat.instructions().contains(
        "It may use: sys_info (no browser tools: this box has no upstream MCP server configured)."
    ));
    assert!(
        !cat.instructions().contains("lends"),
        "no folder, no word of one"
    );
    // A grant that lends a folder says so, and what paths mean there.
    let files = ToolPolicy::fixed(Profile::Files).unwrap();
    let cat = ConnCatalog {
        grant: Some(&note),
        upstream: None,
        browsers: None,
        policy: &files,
    };
    assert!(cat.instructions().contains("every path is relative to it"));
}

/// Issue 30: without an upstream the owner's instructions list no browser_* tool.
#[test]
fn instructions_name_only_the_tools_that_exist_here() {
    let owner = ToolPolicy::fixed(Profile::Owner).unwrap();
    let cat = ConnCatalog {
        grant: None,
        upstream: None,
        browsers: None,
        policy: &owner,
    };
    let text = cat.instructions();
    assert!(!text.contains("browser_"), "{text}");
    assert!(
        text.contains("no browser tools: this box has no upstream"),
        "{text}"
    );
    assert_eq!(wait_text(Duration::from_millis(1500)), "2 s");
    assert_eq!(wait_text(Duration::from_millis(300)), "300 ms");
}
