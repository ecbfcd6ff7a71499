//! The MCP dispatcher on arbitrary frames: the first byte picks the policy (a fixed
//! profile or a custom list) and the catalogue (grant socket or `/mcp`, with or without an
//! upstream); the rest is a sequence
//! of messages separated by 0x1e (one dispatcher, so state carries over). Checks the
//! protocol rules that must hold for any input, not just that nothing panics.
#![no_main]

use std::sync::Arc;

use handnode::pool::{CallCtl, Completion};
use handnode::wire::mcp::{self, Action, Catalog, Dispatcher, Resolution, Route, ToolOutput};
use handnode::profiles::{Class, Profile};
use handnode::tools::policy::{classify, ToolLists, ToolPolicy};
use handnode::tools::{ConnCatalog, GrantNote, UpstreamSource};
use libfuzzer_sys::fuzz_target;
use serde_json::{json, Value};

/// An upstream with an allowed, a desktop-forbidden, a shadowed, an unclassified and a
/// nameless tool.
#[derive(Debug)]
struct FakeUpstream;

impl UpstreamSource for FakeUpstream {
    fn tools(&self) -> Vec<(usize, Value)> {
        vec![
            (
                0,
                json!({"name": "browser_navigate", "inputSchema": {"type": "object"}}),
            ),
            (
                0,
                json!({"name": "browser_evaluate", "inputSchema": {"type": "object"}}),
            ),
            (
                1,
                json!({"name": "bash", "description": "an upstream may not shadow a local tool"}),
            ),
            (1, json!({"name": "browser_without_a_class"})),
            (1, json!({"no_name": true})),
        ]
    }

    fn call(&self, _: usize, _: &str, _: Value, _: Arc<CallCtl>, _: Completion) {
        unreachable!("the dispatcher never runs tools")
    }
}

fn check(policy: &ToolPolicy, catalog: &dyn Catalog, input: &[u8], actions: &[Action]) {
    let profile = policy.profile();
    let parsed: Option<serde_json::Map<String, Value>> = serde_json::from_slice(input).ok();
    let is_request = parsed.as_ref().is_some_and(|o| {
        o.get("jsonrpc") == Some(&json!("2.0"))
            && match o.get("id") {
                Some(Value::String(_)) => true,
                // MCP ids are integers; a fraction would not echo back exactly.
                Some(Value::Number(n)) => n.is_i64() || n.is_u64(),
                _ => false,
            }
            && o.get("method").is_some_and(Value::is_string)
    });
    let is_notification = parsed.as_ref().is_some_and(|o| {
        o.get("jsonrpc") == Some(&json!("2.0"))
            && !o.contains_key("id")
            && o.get("method").is_some_and(Value::is_string)
    });
    // An id that is present but no valid MCP id is answered with a null id.
    let unusable_id = parsed
        .as_ref()
        .and_then(|o| o.get("id"))
        .is_some_and(|id| !(id.is_string() || id.is_i64() || id.is_u64()));
    let mut replies = 0;
    let mut calls = 0;
    for action in actions {
        match action {
            Action::Reply(text) => {
                replies += 1;
                let v: Value = serde_json::from_str(text).expect("a reply is JSON");
                assert_eq!(v["jsonrpc"], "2.0", "{text}");
                assert!(v.get("id").is_some(), "a reply carries an id: {text}");
                assert!(
                    v.get("result").is_some() != v.get("error").is_some(),
                    "exactly one of result and error: {text}"
                );
                if let Some(e) = v.get("error") {
                    assert!(e["code"].is_i64() && e["message"].is_string(), "{text}");
                }
                if is_request {
                    let id = &parsed.as_ref().unwrap()["id"];
                    assert_eq!(&v["id"], id, "the reply echoes the request id");
                }
                if unusable_id {
                    assert!(v["id"].is_null(), "{text}");
                }
            }
            Action::Call {
                name,
                route,
                arguments,
                ..
            } => {
                calls += 1;
                assert!(is_request, "only a request starts a tool");
                assert!(arguments.is_object());
                assert_eq!(catalog.resolve(name), Resolution::Visible(route.clone()));
                assert!(policy.allows(name), "{profile} ran {name}");
                match classify(name) {
                    Some(_) => assert!(policy.tools().contains(&name.as_str())),
                    None => {
                        assert_eq!(profile, Profile::Owner, "{profile} ran unclassified {name}")
                    }
                }
                match route {
                    Route::Local => {
                        handnode::tools::find(name).expect("a local tool");
                    }
                    Route::Upstream(_) => {
                        assert!(
                            handnode::tools::find(name).is_none(),
                            "a local name went upstream"
                        );
                    }
                    // The fuzzed catalogue has no browser tier, so nothing routes there.
                    Route::Browser => panic!("{profile} routed {name} to a browser tier"),
                }
                if profile == Profile::Observe {
                    let class = handnode::tools::find(name).map(|t| t.class);
                    assert_eq!(class, Some(Class::Observe), "{name}");
                }
            }
            Action::Cancel { id } => {
                assert!(is_notification, "only a notification cancels");
                assert!(id.is_string() || id.is_i64() || id.is_u64(), "{id}");
            }
            Action::Refused { .. } => assert!(is_request),
        }
    }
    if is_request {
        assert_eq!(
            replies + calls,
            1,
            "a request gets exactly one answer: {actions:?}"
        );
    }
    if is_notification {
        assert_eq!(replies, 0, "a notification never gets a reply");
    }
}

fuzz_target!(|data: &[u8]| {
    let Some((&selector, rest)) = data.split_first() else {
        return;
    };
    let policy = match selector % 4 {
        0 => ToolPolicy::fixed(Profile::Owner),
        1 => ToolPolicy::fixed(Profile::Desktop),
        2 => ToolPolicy::fixed(Profile::Observe),
        _ => ToolPolicy::new(
            Profile::Custom,
            ToolLists {
                allow: vec!["sys_info".into(), "browser_*".into()],
                deny: vec!["browser_evaluate".into()],
            },
        )
        .ok(),
    }
    .expect("a valid policy");
    let note = GrantNote {
        id: "00000000-0000-4000-8000-000000000000".into(),
        session: "fuzz".into(),
        expires_at: 1_800_000_000,
        approve: Vec::new(),
        approval_wait: std::time::Duration::from_secs(60),
    };
    let upstream = FakeUpstream;
    let catalog = ConnCatalog {
        grant: (selector & 0x10 != 0).then_some(&note),
        upstream: (selector & 0x20 != 0).then_some(&upstream as &dyn UpstreamSource),
        policy: &policy,
        browsers: None,
    };
    let mut dispatcher = Dispatcher::new();
    for message in rest.split(|&b| b == 0x1e) {
        let actions = dispatcher.handle(message, &catalog);
        check(&policy, &catalog, message, &actions);
    }
    // The outbound cap: whatever the result, the reply fits or is replaced by the error.
    let max = 64 + usize::from(selector) * 8;
    let text = String::from_utf8_lossy(rest).into_owned();
    let (reply, outcome) = mcp::tool_reply(&json!(1), ToolOutput::text(text), max);
    let v: Value = serde_json::from_str(&reply).unwrap();
    if outcome == mcp::Outcome::ToolError {
        let msg = v["result"]["content"][0]["text"].as_str().unwrap();
        assert!(msg.starts_with("result too large: "), "{msg}");
    } else {
        assert!(reply.len() <= max);
    }
});
