//! Unit tests of `wire::mcp`.

use super::*;
use crate::profiles::Profile;

/// The fake catalogue's local tools, and whether `observe` sees each. The dispatcher
/// sits below `tools`, so its tests bring their own table instead of the registry.
const FAKE_TOOLS: [(&str, bool); 5] = [
    ("sys_info", true),
    ("bash", false),
    ("screenshot", true),
    ("mouse", false),
    ("key", false),
];

fn fake_allows(profile: Profile, name: &str) -> bool {
    FAKE_TOOLS
        .iter()
        .any(|(n, observe)| *n == name && (*observe || profile != Profile::Observe))
}

/// A catalogue for one profile, as a connection's is.
struct Fake(Profile);
impl Catalog for Fake {
    fn list(&self) -> Vec<Value> {
        FAKE_TOOLS
            .iter()
            .filter(|(n, _)| fake_allows(self.0, n))
            .map(|(n, _)| json!({"name": n}))
            .collect()
    }
    fn resolve(&self, name: &str) -> Resolution {
        let profile = self.0;
        if fake_allows(profile, name) {
            Resolution::Visible(Route::Local)
        } else if FAKE_TOOLS.iter().any(|(n, _)| *n == name) {
            Resolution::Hidden
        } else if name == "browser_navigate" && profile.allows_upstream(name) {
            Resolution::Visible(Route::Upstream(0))
        } else {
            Resolution::Unknown
        }
    }
    fn instructions(&self) -> String {
        format!("profile {}", self.0)
    }
    fn tasks(&self) -> Option<TaskTools> {
        (self.0 != Profile::Observe).then_some(TaskTools {
            call: "bash",
            start: "bash_start",
            poll: "bash_poll",
            cancel: "bash_cancel",
        })
    }
}

fn run(profile: Profile, input: &str) -> Vec<Action> {
    Dispatcher::new().handle(input.as_bytes(), &Fake(profile))
}

fn single_reply(actions: &[Action]) -> Value {
    let replies: Vec<&String> = actions
        .iter()
        .filter_map(|a| match a {
            Action::Reply(s) => Some(s),
            _ => None,
        })
        .collect();
    assert_eq!(replies.len(), 1, "{actions:?}");
    serde_json::from_str(replies[0]).unwrap()
}

#[test]
fn error_table() {
    // (case, profile, input, error code, echoed id, message fragment)
    let cases: Vec<(&str, Profile, &str, i64, Value, &str)> = vec![
        (
            "unparseable",
            Profile::Owner,
            "{not json",
            PARSE_ERROR,
            Value::Null,
            "Parse error",
        ),
        (
            "empty bytes",
            Profile::Owner,
            "",
            PARSE_ERROR,
            Value::Null,
            "Parse error",
        ),
        (
            "invalid utf-8",
            Profile::Owner,
            "\u{0}",
            PARSE_ERROR,
            Value::Null,
            "Parse error",
        ),
        (
            "batch",
            Profile::Owner,
            r#"[{"jsonrpc":"2.0","id":1,"method":"ping"}]"#,
            INVALID_REQUEST,
            Value::Null,
            "batch requests are not supported",
        ),
        (
            "empty batch",
            Profile::Owner,
            "[]",
            INVALID_REQUEST,
            Value::Null,
            "batch",
        ),
        (
            "scalar",
            Profile::Owner,
            "42",
            INVALID_REQUEST,
            Value::Null,
            "JSON object",
        ),
        (
            "wrong jsonrpc",
            Profile::Owner,
            r#"{"jsonrpc":"1.0","id":7,"method":"ping"}"#,
            INVALID_REQUEST,
            json!(7),
            "jsonrpc",
        ),
        (
            "missing jsonrpc",
            Profile::Owner,
            r#"{"id":"a","method":"ping"}"#,
            INVALID_REQUEST,
            json!("a"),
            "jsonrpc",
        ),
        (
            "null id",
            Profile::Owner,
            r#"{"jsonrpc":"2.0","id":null,"method":"ping"}"#,
            INVALID_REQUEST,
            Value::Null,
            "id",
        ),
        (
            "fractional id (MCP ids are integers; a double may not echo back exactly)",
            Profile::Owner,
            r#"{"jsonrpc":"2.0","id":1.0715660391465825880866424e-75,"method":"ping"}"#,
            INVALID_REQUEST,
            Value::Null,
            "id must be a string or an integer",
        ),
        (
            "id beyond 64 bits",
            Profile::Owner,
            r#"{"jsonrpc":"2.0","id":18446744073709551616,"method":"ping"}"#,
            INVALID_REQUEST,
            Value::Null,
            "at most 64 bits",
        ),
        (
            "object id",
            Profile::Owner,
            r#"{"jsonrpc":"2.0","id":{},"method":"ping"}"#,
            INVALID_REQUEST,
            Value::Null,
            "id",
        ),
        (
            "method not string",
            Profile::Owner,
            r#"{"jsonrpc":"2.0","id":1,"method":3}"#,
            INVALID_REQUEST,
            json!(1),
            "method",
        ),
        (
            "no method",
            Profile::Owner,
            r#"{"jsonrpc":"2.0","id":1}"#,
            INVALID_REQUEST,
            json!(1),
            "method",
        ),
        (
            "unknown method",
            Profile::Owner,
            r#"{"jsonrpc":"2.0","id":2,"method":"foo/bar"}"#,
            METHOD_NOT_FOUND,
            json!(2),
            "foo/bar",
        ),
        (
            "unknown method, string id",
            Profile::Observe,
            r#"{"jsonrpc":"2.0","id":"x","method":"sampling/createMessage"}"#,
            METHOD_NOT_FOUND,
            json!("x"),
            "Method not found",
        ),
        (
            "hidden tool",
            Profile::Observe,
            r#"{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"bash","arguments":{"command":"id"}}}"#,
            INVALID_PARAMS,
            json!(3),
            "Invalid params: unknown tool: bash",
        ),
        (
            "nonexistent tool",
            Profile::Observe,
            r#"{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"rm_rf","arguments":{}}}"#,
            INVALID_PARAMS,
            json!(3),
            "Invalid params: unknown tool: rm_rf",
        ),
        (
            "hidden upstream tool",
            Profile::Observe,
            r#"{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"browser_navigate"}}"#,
            INVALID_PARAMS,
            json!(3),
            "unknown tool: browser_navigate",
        ),
        (
            "params not object",
            Profile::Owner,
            r#"{"jsonrpc":"2.0","id":4,"method":"tools/call","params":[1]}"#,
            INVALID_PARAMS,
            json!(4),
            "params",
        ),
        (
            "name missing",
            Profile::Owner,
            r#"{"jsonrpc":"2.0","id":4,"method":"tools/call","params":{}}"#,
            INVALID_PARAMS,
            json!(4),
            "name",
        ),
        (
            "name wrong type",
            Profile::Owner,
            r#"{"jsonrpc":"2.0","id":4,"method":"tools/call","params":{"name":5}}"#,
            INVALID_PARAMS,
            json!(4),
            "name",
        ),
        (
            "arguments wrong type",
            Profile::Owner,
            r#"{"jsonrpc":"2.0","id":4,"method":"tools/call","params":{"name":"bash","arguments":"ls"}}"#,
            INVALID_PARAMS,
            json!(4),
            "arguments",
        ),
    ];
    for (name, profile, input, code, id, fragment) in cases {
        let actions = run(profile, input);
        let reply = single_reply(&actions);
        assert_eq!(reply["jsonrpc"], "2.0", "{name}");
        assert_eq!(reply["error"]["code"], code, "{name}: {reply}");
        assert_eq!(reply["id"], id, "{name}: {reply}");
        let msg = reply["error"]["message"].as_str().unwrap();
        assert!(msg.contains(fragment), "{name}: {msg:?} lacks {fragment:?}");
        assert!(reply.get("result").is_none(), "{name}");
    }
}

#[test]
fn hidden_and_nonexistent_tools_get_the_same_answer_but_different_audit() {
    let hidden = run(
        Profile::Observe,
        r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"bash"}}"#,
    );
    let absent = run(
        Profile::Observe,
        r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"bosh"}}"#,
    );
    let strip = |a: &[Action]| single_reply(a)["error"]["code"].clone();
    assert_eq!(strip(&hidden), strip(&absent));
    assert!(hidden.contains(&Action::Refused {
        tool: "bash".into(),
        outcome: Outcome::Denied
    }));
    assert!(absent.contains(&Action::Refused {
        tool: "bosh".into(),
        outcome: Outcome::RpcError
    }));
}

#[test]
fn result_table() {
    // (name, input, json pointer, expected value)
    let cases: Vec<(&str, &str, &str, Value)> = vec![
        (
            "ping",
            r#"{"jsonrpc":"2.0","id":1,"method":"ping"}"#,
            "/result",
            json!({}),
        ),
        (
            "ping keeps string id",
            r#"{"jsonrpc":"2.0","id":"abc","method":"ping"}"#,
            "/id",
            json!("abc"),
        ),
        (
            "ping keeps the largest u64 id",
            r#"{"jsonrpc":"2.0","id":18446744073709551615,"method":"ping"}"#,
            "/id",
            json!(u64::MAX),
        ),
        (
            "ping keeps the smallest i64 id",
            r#"{"jsonrpc":"2.0","id":-9223372036854775808,"method":"ping"}"#,
            "/id",
            json!(i64::MIN),
        ),
        (
            "resources",
            r#"{"jsonrpc":"2.0","id":1,"method":"resources/list"}"#,
            "/result",
            json!({"resources": []}),
        ),
        (
            "prompts",
            r#"{"jsonrpc":"2.0","id":1,"method":"prompts/list"}"#,
            "/result",
            json!({"prompts": []}),
        ),
        (
            "init 2025-06-18",
            r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18"}}"#,
            "/result/protocolVersion",
            json!("2025-06-18"),
        ),
        (
            "init 2024-11-05",
            r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2024-11-05"}}"#,
            "/result/protocolVersion",
            json!("2024-11-05"),
        ),
        (
            "init 2025-03-26 not claimed",
            r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-03-26"}}"#,
            "/result/protocolVersion",
            json!("2025-06-18"),
        ),
        (
            "init unknown version",
            r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"1999-01-01"}}"#,
            "/result/protocolVersion",
            json!("2025-06-18"),
        ),
        (
            "init no params",
            r#"{"jsonrpc":"2.0","id":1,"method":"initialize"}"#,
            "/result/protocolVersion",
            json!("2025-06-18"),
        ),
        (
            "init capabilities",
            r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{}}"#,
            "/result/capabilities",
            json!({"tools": {"listChanged": false}}),
        ),
        (
            "init server name",
            r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{}}"#,
            "/result/serverInfo/name",
            json!("handnode"),
        ),
        (
            "init version",
            r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{}}"#,
            "/result/serverInfo/version",
            json!(env!("CARGO_PKG_VERSION")),
        ),
        (
            "init instructions",
            r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{}}"#,
            "/result/instructions",
            json!("profile observe"),
        ),
        (
            "tools/list observe",
            r#"{"jsonrpc":"2.0","id":1,"method":"tools/list"}"#,
            "/result/tools",
            json!([{"name":"sys_info"},{"name":"screenshot"}]),
        ),
        (
            "unknown fields ignored",
            r#"{"jsonrpc":"2.0","id":9,"method":"ping","future":true,"params":{"x":1}}"#,
            "/result",
            json!({}),
        ),
    ];
    for (name, input, pointer, expected) in cases {
        let actions = run(Profile::Observe, input);
        let reply = single_reply(&actions);
        assert_eq!(reply.pointer(pointer), Some(&expected), "{name}: {reply}");
    }
}

#[test]
fn known_methods_work_before_initialize() {
    let mut d = Dispatcher::new();
    let reply = single_reply(&d.handle(
        br#"{"jsonrpc":"2.0","id":1,"method":"tools/list"}"#,
        &Fake(Profile::Owner),
    ));
    assert_eq!(
        reply["result"]["tools"].as_array().unwrap().len(),
        FAKE_TOOLS.len()
    );
    assert_eq!(d.negotiated_version(), None);
}

#[test]
fn notifications_never_get_a_reply() {
    let cases = [
        r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#,
        r#"{"jsonrpc":"2.0","method":"no/such/notification"}"#,
        r#"{"jsonrpc":"2.0","method":"tools/call","params":{"name":"bash"}}"#,
        r#"{"jsonrpc":"2.0","method":"notifications/cancelled","params":{}}"#,
        r#"{"jsonrpc":"2.0","id":5,"result":{}}"#,
        r#"{"jsonrpc":"2.0","id":5,"error":{"code":1,"message":"x"}}"#,
    ];
    for input in cases {
        let actions = run(Profile::Owner, input);
        assert!(
            actions.iter().all(|a| !matches!(a, Action::Reply(_))),
            "{input}: {actions:?}"
        );
    }
}

#[test]
fn cancelled_notification_yields_cancel() {
    let actions = run(
        Profile::Owner,
        r#"{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":"r7","reason":"x"}}"#,
    );
    assert_eq!(actions, vec![Action::Cancel { id: json!("r7") }]);
    let actions = run(
        Profile::Owner,
        r#"{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":12}}"#,
    );
    assert_eq!(actions, vec![Action::Cancel { id: json!(12) }]);
    // No request can have a fractional id, so there is nothing to cancel.
    let actions = run(
        Profile::Owner,
        r#"{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":1.5}}"#,
    );
    assert_eq!(actions, vec![]);
}

#[test]
fn visible_tool_call_becomes_a_call() {
    let actions = run(
        Profile::Owner,
        r#"{"jsonrpc":"2.0","id":"c1","method":"tools/call","params":{"name":"bash","arguments":{"command":"true"}}}"#,
    );
    assert_eq!(
        actions,
        vec![Action::Call {
            id: json!("c1"),
            name: "bash".into(),
            route: Route::Local,
            arguments: json!({"command":"true"}),
            form: Form::DEFAULT,
        }]
    );
    let actions = run(
        Profile::Desktop,
        r#"{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"browser_navigate"}}"#,
    );
    assert_eq!(
        actions,
        vec![Action::Call {
            id: json!(2),
            name: "browser_navigate".into(),
            route: Route::Upstream(0),
            arguments: json!({}),
            form: Form::DEFAULT,
        }]
    );
}

#[test]
fn deep_nesting_is_a_parse_error_not_a_crash() {
    let deep = format!("{}{}", "[".repeat(100_000), "]".repeat(100_000));
    let reply = single_reply(&run(Profile::Owner, &deep));
    assert_eq!(reply["error"]["code"], PARSE_ERROR);
}

#[test]
fn deep_nesting_inside_params_is_a_parse_error_too() {
    let deep = format!(
        r#"{{"jsonrpc":"2.0","id":1,"method":"ping","params":{}{}}}"#,
        "[".repeat(200),
        "]".repeat(200)
    );
    let reply = single_reply(&run(Profile::Owner, &deep));
    assert_eq!(reply["error"]["code"], PARSE_ERROR);
}

#[test]
fn the_last_of_duplicate_members_wins_as_in_a_json_object() {
    let reply = single_reply(&run(
        Profile::Owner,
        r#"{"jsonrpc":"1.0","jsonrpc":"2.0","id":1,"id":"two","method":"x","method":"ping"}"#,
    ));
    assert_eq!(reply, json!({"jsonrpc": "2.0", "id": "two", "result": {}}));
    let actions = run(
        Profile::Owner,
        r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"rm"},"params":{"name":"bash","arguments":{"command":"a"},"arguments":{"command":"b"}}}"#,
    );
    assert_eq!(
        actions,
        vec![Action::Call {
            id: json!(1),
            name: "bash".into(),
            route: Route::Local,
            arguments: json!({"command": "b"}),
            form: Form::DEFAULT,
        }]
    );
    // Escaped member names are the names they spell.
    let reply = single_reply(&run(
        Profile::Owner,
        r#"{"jsonrpc":"2.0","\u0069d":5,"method":"p\u0069ng"}"#,
    ));
    assert_eq!(reply["id"], 5);
    assert_eq!(reply["result"], json!({}));
}

#[test]
fn arguments_beyond_the_value_cap_are_refused_before_they_are_built() {
    let call = |values: usize| {
        // An object, an array and `values - 2` zeros.
        let zeros = vec!["0"; values - 2].join(",");
        let msg = format!(
            r#"{{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{{"name":"bash","arguments":{{"a":[{zeros}]}}}}}}"#
        );
        run(Profile::Owner, &msg)
    };
    let at_cap = call(MAX_ARGUMENT_VALUES);
    assert!(
        matches!(&at_cap[..], [Action::Call { arguments, .. }] if arguments["a"].as_array().unwrap().len() == MAX_ARGUMENT_VALUES - 2),
        "{:?}",
        &at_cap.first()
    );
    let over = call(MAX_ARGUMENT_VALUES + 1);
    let reply = single_reply(&over);
    assert_eq!(reply["error"]["code"], INVALID_PARAMS);
    assert_eq!(reply["id"], 7);
    let msg = reply["error"]["message"].as_str().unwrap();
    assert!(
        msg.contains(&format!("at most {MAX_ARGUMENT_VALUES}")),
        "{msg}"
    );
    assert!(over.contains(&Action::Refused {
        tool: "bash".into(),
        outcome: Outcome::RpcError
    }));
    // Strings do not count, whatever they hold.
    let text = ",:[".repeat(MAX_ARGUMENT_VALUES);
    let msg = json!({"jsonrpc": "2.0", "id": 8, "method": "tools/call",
            "params": {"name": "bash", "arguments": {"command": text}}});
    let actions = run(Profile::Owner, &msg.to_string());
    assert!(matches!(&actions[..], [Action::Call { .. }]), "{actions:?}");
}

#[test]
fn oversized_tool_reply_becomes_an_error_result() {
    let big = ToolOutput::text("x".repeat(1000));
    let (reply, outcome) = tool_reply(&json!(1), big.clone(), 100);
    let v: Value = serde_json::from_str(&reply).unwrap();
    assert_eq!(v["result"]["isError"], true);
    assert!(v["result"]["content"][0]["text"]
        .as_str()
        .unwrap()
        .starts_with("result too large: "));
    assert_eq!(outcome, Outcome::ToolError);
    let (reply, outcome) = tool_reply(&json!(1), big, 10_000);
    assert!(reply.len() < 10_000 && reply.contains("xxxx"));
    assert_eq!(outcome, Outcome::Ok);
}

#[test]
fn an_encoded_result_is_replied_like_the_value_it_encodes() {
    let value = json!({"content": [{"type": "text", "text": "hi \"there\""}], "isError": true});
    for id in [json!(7), json!("a\"b"), json!(1.5)] {
        let (plain, plain_outcome) = tool_reply(&id, ToolOutput::Result(value.clone()), 10_000);
        let encoded = ToolOutput::Encoded {
            json: value.to_string().into(),
            is_error: true,
        };
        let (text, outcome) = tool_reply(&id, encoded.clone(), 10_000);
        let (a, b): (Value, Value) = (
            serde_json::from_str(&plain).unwrap(),
            serde_json::from_str(&text).unwrap(),
        );
        assert_eq!(a, b);
        assert_eq!(
            (outcome, plain_outcome),
            (Outcome::ToolError, Outcome::ToolError)
        );
        let (small, _) = tool_reply(&id, encoded, 20);
        assert!(small.contains("result too large"), "{small}");
    }
}

#[test]
fn tool_output_outcomes() {
    assert_eq!(ToolOutput::text("a").outcome(), Outcome::Ok);
    assert_eq!(ToolOutput::tool_error("a").outcome(), Outcome::ToolError);
    assert_eq!(
        ToolOutput::InvalidParams("a".into()).outcome(),
        Outcome::RpcError
    );
    let (reply, _) = tool_reply(
        &json!(3),
        ToolOutput::InvalidParams("timeout_secs must be 1..=110".into()),
        1 << 20,
    );
    let v: Value = serde_json::from_str(&reply).unwrap();
    assert_eq!(v["error"]["code"], INVALID_PARAMS);
}

// ---- revisions (CONTRACT §20) ----

/// The `_meta` every 2026-07-28 request carries (basic/index "Per-request protocol
/// fields"), with `extra` members merged into `params`.
fn modern(id: i64, method: &str, extra: Value) -> String {
    let mut params = json!({"_meta": {
        META_PROTOCOL_VERSION: "2026-07-28",
        META_CLIENT_CAPABILITIES: {},
        "io.modelcontextprotocol/clientInfo": {"name": "t", "version": "0"},
    }});
    if let (Value::Object(p), Value::Object(e)) = (&mut params, extra) {
        p.extend(e);
    }
    json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}).to_string()
}

/// The headers a conforming 2026-07-28 client sends with `msg`
/// (transports/streamable-http "Standard Request Headers").
fn conforming(msg: &str) -> (String, String, Option<String>) {
    let v: Value = serde_json::from_str(msg).unwrap();
    let method = v["method"].as_str().unwrap_or("").to_string();
    let name = v["params"]["name"].as_str().map(str::to_string);
    ("2026-07-28".into(), method, name)
}

fn http(profile: Profile, msg: &str, headers: HttpHeaders<'_>) -> (u16, Value) {
    let out = Dispatcher::new().handle_http(msg.as_bytes(), &Fake(profile), &headers);
    (out.status, single_reply(&out.actions))
}

#[test]
fn initialize_negotiates_each_legacy_revision_by_its_name() {
    // 2025-11-25 basic/lifecycle "Version Negotiation": the same version if supported,
    // else another one (SHOULD be the latest). The stateless revision is not reached
    // through initialize (2026-07-28 basic/versioning "Compatibility Matrix").
    let cases = [
        ("2024-11-05", "2024-11-05"),
        ("2025-06-18", "2025-06-18"),
        ("2025-11-25", "2025-11-25"),
        ("2026-07-28", "2025-11-25"),
        ("2099-01-01", "2025-11-25"),
        ("2025-03-26", "2025-06-18"),
        ("1999-01-01", "2025-06-18"),
    ];
    for (asked, answered) in cases {
        let mut d = Dispatcher::new();
        let msg = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize",
                "params": {"protocolVersion": asked}});
        let reply = single_reply(&d.handle(msg.to_string().as_bytes(), &Fake(Profile::Owner)));
        assert_eq!(reply["result"]["protocolVersion"], answered, "{asked}");
        assert_eq!(d.negotiated_version(), Some(answered));
        // A legacy result has no resultType (2026-07-28 basic/index "ResultType": its
        // absence means complete).
        assert!(reply["result"].get("resultType").is_none(), "{asked}");
    }
    for v in PROTOCOL_VERSIONS {
        assert_eq!(Revision::parse(v).map(Revision::as_str), Some(v));
    }
}

#[test]
fn stateless_requests_need_no_initialize_and_carry_result_type() {
    // (case, message, json pointer, expected)
    let cases: Vec<(&str, String, &str, Value)> = vec![
        // server/discover: supported versions, capabilities, identity.
        (
            "discover versions",
            modern(1, "server/discover", json!({})),
            "/result/supportedVersions",
            json!(["2026-07-28"]),
        ),
        (
            "discover tools capability",
            modern(1, "server/discover", json!({})),
            "/result/capabilities/tools",
            json!({"listChanged": false}),
        ),
        (
            "discover server name",
            modern(1, "server/discover", json!({})),
            "/result/serverInfo/name",
            json!("handnode"),
        ),
        (
            "discover instructions",
            modern(1, "server/discover", json!({})),
            "/result/instructions",
            json!("profile observe"),
        ),
        // basic/index "ResultType": every result carries one.
        (
            "discover resultType",
            modern(1, "server/discover", json!({})),
            "/result/resultType",
            json!("complete"),
        ),
        (
            "tools/list resultType",
            modern(2, "tools/list", json!({})),
            "/result/resultType",
            json!("complete"),
        ),
        (
            "tools/list tools",
            modern(2, "tools/list", json!({})),
            "/result/tools",
            json!([{"name":"sys_info"},{"name":"screenshot"}]),
        ),
        // basic/index "Per-response protocol fields": serverInfo in _meta.
        (
            "serverInfo in _meta",
            modern(2, "tools/list", json!({})),
            "/result/_meta/io.modelcontextprotocol~1serverInfo/name",
            json!("handnode"),
        ),
        // changelog minor 5 (SEP-2549): cacheable results carry ttlMs and cacheScope.
        (
            "tools/list ttlMs",
            modern(2, "tools/list", json!({})),
            "/result/ttlMs",
            json!(0),
        ),
        (
            "prompts/list cacheScope",
            modern(3, "prompts/list", json!({})),
            "/result/cacheScope",
            json!("private"),
        ),
        (
            "resources/templates/list",
            modern(3, "resources/templates/list", json!({})),
            "/result/resourceTemplates",
            json!([]),
        ),
        // changelog major 2 and 5: initialize and ping are gone.
        (
            "initialize is not a method",
            modern(4, "initialize", json!({"protocolVersion": "2026-07-28"})),
            "/error/code",
            json!(METHOD_NOT_FOUND),
        ),
        (
            "ping is not a method",
            modern(4, "ping", json!({})),
            "/error/code",
            json!(METHOD_NOT_FOUND),
        ),
        (
            "unknown method keeps its id",
            modern(44, "no/such", json!({})),
            "/id",
            json!(44),
        ),
        // basic/index "Per-request protocol fields": required fields → -32602.
        (
            "no clientCapabilities",
            json!({"jsonrpc": "2.0", "id": 5, "method": "tools/list", "params": {"_meta":
                    {META_PROTOCOL_VERSION: "2026-07-28"}}})
            .to_string(),
            "/error/code",
            json!(INVALID_PARAMS),
        ),
        (
            "protocolVersion not a string",
            json!({"jsonrpc": "2.0", "id": 5, "method": "tools/list", "params": {"_meta":
                    {META_PROTOCOL_VERSION: 20260728, META_CLIENT_CAPABILITIES: {}}}})
            .to_string(),
            "/error/code",
            json!(INVALID_PARAMS),
        ),
        (
            "clientCapabilities not an object",
            json!({"jsonrpc": "2.0", "id": 5, "method": "tools/list", "params": {"_meta":
                    {META_PROTOCOL_VERSION: "2026-07-28", META_CLIENT_CAPABILITIES: []}}})
            .to_string(),
            "/error/code",
            json!(INVALID_PARAMS),
        ),
        // basic/versioning "Protocol Version Negotiation": unsupported → -32022 with
        // what is supported and what was asked.
        (
            "unknown version",
            json!({"jsonrpc": "2.0", "id": 6, "method": "tools/list", "params": {"_meta":
                    {META_PROTOCOL_VERSION: "v999", META_CLIENT_CAPABILITIES: {}}}})
            .to_string(),
            "/error/data",
            json!({"supported": ["2026-07-28"], "requested": "v999"}),
        ),
        (
            "a legacy version is not served statelessly",
            json!({"jsonrpc": "2.0", "id": 6, "method": "tools/list", "params": {"_meta":
                    {META_PROTOCOL_VERSION: "2025-06-18", META_CLIENT_CAPABILITIES: {}}}})
            .to_string(),
            "/error/code",
            json!(UNSUPPORTED_PROTOCOL_VERSION),
        ),
    ];
    for (name, input, pointer, expected) in cases {
        let mut d = Dispatcher::new();
        let reply = single_reply(&d.handle(input.as_bytes(), &Fake(Profile::Observe)));
        assert_eq!(reply.pointer(pointer), Some(&expected), "{name}: {reply}");
        // basic/index "Statelessness": nothing is negotiated.
        assert_eq!(d.negotiated_version(), None, "{name}");
    }
}

#[test]
fn a_stateless_tool_call_is_framed_by_its_own_revision() {
    let actions = run(
        Profile::Owner,
        &modern(
            7,
            "tools/call",
            json!({"name": "bash", "arguments": {"command": "true"}}),
        ),
    );
    let [Action::Call { form, name, .. }] = &actions[..] else {
        panic!("{actions:?}")
    };
    assert_eq!(
        (name.as_str(), form.revision),
        ("bash", Revision::R2026_07_28)
    );
    // A legacy connection keeps its own: a 2025-06-18 pod after initialize.
    let mut d = Dispatcher::new();
    d.handle(
            br#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25"}}"#,
            &Fake(Profile::Owner),
        );
    let actions = d.handle(
            br#"{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"bash","arguments":{}}}"#,
            &Fake(Profile::Owner),
        );
    assert!(
        matches!(&actions[..], [Action::Call { form, .. }] if form.revision == Revision::R2025_11_25),
        "{actions:?}"
    );
    // ... and a stateless request on that same connection is still stateless.
    let actions = d.handle(
        modern(3, "tools/call", json!({"name": "bash"})).as_bytes(),
        &Fake(Profile::Owner),
    );
    assert!(
        matches!(&actions[..], [Action::Call { form, .. }] if form.revision == Revision::R2026_07_28),
        "{actions:?}"
    );
}

#[test]
fn invalid_arguments_are_a_tool_error_from_2025_11_25_on() {
    // 2025-11-25 and 2026-07-28 server/tools "Error Handling": input validation errors
    // are tool execution errors; 2025-06-18 and before answer -32602.
    for revision in Revision::ALL {
        let (text, outcome) = tool_reply_at(
            revision,
            &json!(9),
            ToolOutput::InvalidParams("timeout_secs must be 1..=110".into()),
            1 << 20,
        );
        let v: Value = serde_json::from_str(&text).unwrap();
        if revision >= Revision::R2025_11_25 {
            assert_eq!(v["result"]["isError"], true, "{revision:?}: {v}");
            let msg = v["result"]["content"][0]["text"].as_str().unwrap();
            assert!(msg.contains("timeout_secs must be 1..=110"), "{msg}");
            assert_eq!(outcome, Outcome::ToolError);
        } else {
            assert_eq!(v["error"]["code"], INVALID_PARAMS, "{revision:?}: {v}");
            assert_eq!(outcome, Outcome::RpcError);
        }
        assert_eq!(
            v["result"].get("resultType").is_some(),
            revision.is_stateless(),
            "{revision:?}: {v}"
        );
    }
}

#[test]
fn stateless_tool_results_carry_result_type_however_they_were_made() {
    let value = json!({"content": [{"type": "text", "text": "x"}], "isError": false});
    let outputs = [
        ToolOutput::Result(value.clone()),
        ToolOutput::Encoded {
            json: value.to_string().into(),
            is_error: false,
        },
        ToolOutput::Encoded {
            json: "{}".into(),
            is_error: false,
        },
        ToolOutput::NotApproved("denied".into()),
        ToolOutput::Json {
            json: value.to_string(),
            is_error: false,
        },
        ToolOutput::Json {
            json: "{}".into(),
            is_error: false,
        },
    ];
    for output in outputs {
        let (text, _) = tool_reply_at(Revision::R2026_07_28, &json!(1), output.clone(), 1 << 20);
        let v: Value = serde_json::from_str(&text).unwrap_or_else(|e| panic!("{e}: {text}"));
        assert_eq!(v["result"]["resultType"], "complete", "{output:?}: {v}");
        assert_eq!(
            v["result"]["_meta"][META_SERVER_INFO]["name"], "handnode",
            "{output:?}: {v}"
        );
        let (text, _) = tool_reply_at(Revision::R2025_06_18, &json!(1), output.clone(), 1 << 20);
        let v: Value = serde_json::from_str(&text).unwrap();
        assert!(v["result"].get("resultType").is_none(), "{output:?}: {v}");
    }
    // The too-large replacement is framed too.
    let (text, _) = tool_reply_at(
        Revision::R2026_07_28,
        &json!(1),
        ToolOutput::text("y".repeat(500)),
        100,
    );
    assert!(text.contains(r#""resultType":"complete""#), "{text}");
}

#[test]
fn http_headers_are_checked_as_the_2026_07_28_transport_says() {
    let call = modern(1, "tools/call", json!({"name": "bash", "arguments": {}}));
    let list = modern(2, "tools/list", json!({}));
    let b64 = |s: &str| {
        use base64::Engine as _;
        format!(
            "=?base64?{}?=",
            base64::engine::general_purpose::STANDARD.encode(s)
        )
    };
    let bash_b64 = b64("bash");
    let unknown = modern(4, "x/y", json!({}));
    let ping = modern(4, "ping", json!({}));
    let v999 = json!({"jsonrpc": "2.0", "id": 6, "method": "tools/list", "params": {"_meta":
            {META_PROTOCOL_VERSION: "v999", META_CLIENT_CAPABILITIES: {}}}})
    .to_string();
    // (case, message, protocol version, method, name, status, error code or 0)
    type Case<'a> = (
        &'a str,
        &'a str,
        Option<&'a str>,
        Option<&'a str>,
        Option<&'a str>,
        u16,
        i64,
    );
    let cases: Vec<Case> = vec![
        (
            "conforming call",
            &call,
            Some("2026-07-28"),
            Some("tools/call"),
            Some("bash"),
            200,
            0,
        ),
        (
            "conforming list",
            &list,
            Some("2026-07-28"),
            Some("tools/list"),
            None,
            200,
            0,
        ),
        // "Case Sensitivity" / RFC 9110: whitespace around a field value is not part of it.
        (
            "whitespace around values",
            &call,
            Some(" 2026-07-28 "),
            Some(" tools/call "),
            Some("  bash  "),
            200,
            0,
        ),
        // "Value Encoding": the Base64 sentinel is decoded before comparing.
        (
            "Base64 Mcp-Name",
            &call,
            Some("2026-07-28"),
            Some("tools/call"),
            Some(bash_b64.as_str()),
            200,
            0,
        ),
        (
            "bad Base64 Mcp-Name",
            &call,
            Some("2026-07-28"),
            Some("tools/call"),
            Some("=?base64?YmFza!!?="),
            400,
            HEADER_MISMATCH,
        ),
        // "Server Validation": missing or mismatched standard headers → 400 -32020.
        (
            "Mcp-Method missing",
            &list,
            Some("2026-07-28"),
            None,
            None,
            400,
            HEADER_MISMATCH,
        ),
        (
            "Mcp-Method mismatched",
            &list,
            Some("2026-07-28"),
            Some("prompts/list"),
            None,
            400,
            HEADER_MISMATCH,
        ),
        (
            "Mcp-Method values are case-sensitive",
            &list,
            Some("2026-07-28"),
            Some("TOOLS/LIST"),
            None,
            400,
            HEADER_MISMATCH,
        ),
        (
            "Mcp-Name missing",
            &call,
            Some("2026-07-28"),
            Some("tools/call"),
            None,
            400,
            HEADER_MISMATCH,
        ),
        (
            "Mcp-Name mismatched",
            &call,
            Some("2026-07-28"),
            Some("tools/call"),
            Some("wrong_tool_name"),
            400,
            HEADER_MISMATCH,
        ),
        // "Protocol Version Header": MUST match _meta, else 400 HeaderMismatch.
        (
            "version header missing",
            &list,
            None,
            Some("tools/list"),
            None,
            400,
            HEADER_MISMATCH,
        ),
        (
            "version header mismatched",
            &list,
            Some("2025-06-18"),
            Some("tools/list"),
            None,
            400,
            HEADER_MISMATCH,
        ),
        // basic/index "Per-request protocol fields": missing _meta → -32602, HTTP 400.
        (
            "header says 2026-07-28, body has no _meta",
            r#"{"jsonrpc":"2.0","id":3,"method":"tools/list","params":{}}"#,
            Some("2026-07-28"),
            Some("tools/list"),
            None,
            400,
            INVALID_PARAMS,
        ),
        // "Protocol Version Header": a method not implemented → 404 -32601.
        (
            "unknown method",
            &unknown,
            Some("2026-07-28"),
            Some("x/y"),
            None,
            404,
            METHOD_NOT_FOUND,
        ),
        (
            "removed ping",
            &ping,
            Some("2026-07-28"),
            Some("ping"),
            None,
            404,
            METHOD_NOT_FOUND,
        ),
        // An unsupported version → 400 UnsupportedProtocolVersion.
        (
            "unknown version in header and body",
            &v999,
            Some("v999"),
            Some("tools/list"),
            None,
            400,
            UNSUPPORTED_PROTOCOL_VERSION,
        ),
        // 2025-06-18 transports "Protocol Version Header": legacy, unsupported → 400.
        (
            "legacy with an unknown version header",
            r#"{"jsonrpc":"2.0","id":7,"method":"tools/list"}"#,
            Some("1999-01-01"),
            None,
            None,
            400,
            UNSUPPORTED_PROTOCOL_VERSION,
        ),
        // Legacy requests need none of the new headers.
        (
            "legacy without headers",
            r#"{"jsonrpc":"2.0","id":7,"method":"tools/list"}"#,
            None,
            None,
            None,
            200,
            0,
        ),
        (
            "legacy 2025-11-25 header",
            r#"{"jsonrpc":"2.0","id":7,"method":"tools/list"}"#,
            Some("2025-11-25"),
            None,
            None,
            200,
            0,
        ),
        (
            "legacy unknown method stays 200",
            r#"{"jsonrpc":"2.0","id":7,"method":"x/y"}"#,
            Some("2025-06-18"),
            None,
            None,
            200,
            METHOD_NOT_FOUND,
        ),
    ];
    for (name, msg, version, method, mcp_name, status, code) in cases {
        let headers = HttpHeaders {
            protocol_version: version,
            method,
            name: mcp_name,
        };
        let out = Dispatcher::new().handle_http(msg.as_bytes(), &Fake(Profile::Owner), &headers);
        assert_eq!(out.status, status, "{name}: {:?}", out.actions);
        if code == 0 {
            assert!(
                out.actions
                    .iter()
                    .all(|a| !matches!(a, Action::Reply(t) if t.contains("\"error\""))),
                "{name}: {:?}",
                out.actions
            );
            continue;
        }
        let reply = single_reply(&out.actions);
        assert_eq!(reply["error"]["code"], code, "{name}: {reply}");
        // basic/index "Error Responses": the request's id, whatever the error.
        let sent: Value = serde_json::from_str(msg).unwrap();
        assert_eq!(reply["id"], sent["id"], "{name}: {reply}");
    }
    let (_, _, _) = conforming(&call);
}

#[test]
fn a_conforming_client_passes_every_header_check() {
    for msg in [
        modern(1, "tools/call", json!({"name": "sys_info"})),
        modern(2, "tools/list", json!({})),
        modern(3, "server/discover", json!({})),
        modern(4, "prompts/list", json!({})),
    ] {
        let (version, method, name) = conforming(&msg);
        let (status, reply) = {
            let out = Dispatcher::new().handle_http(
                msg.as_bytes(),
                &Fake(Profile::Observe),
                &HttpHeaders {
                    protocol_version: Some(&version),
                    method: Some(&method),
                    name: name.as_deref(),
                },
            );
            let reply = out.actions.iter().find_map(|a| match a {
                Action::Reply(t) => Some(serde_json::from_str::<Value>(t).unwrap()),
                _ => None,
            });
            (out.status, reply)
        };
        assert_eq!(status, 200, "{msg}: {reply:?}");
        if let Some(reply) = reply {
            assert!(reply.get("error").is_none(), "{msg}: {reply}");
        }
    }
    let (status, reply) = http(
        Profile::Observe,
        &modern(5, "tools/list", json!({})),
        HttpHeaders {
            protocol_version: Some("2026-07-28"),
            method: Some("tools/list"),
            name: None,
        },
    );
    assert_eq!(
        (status, &reply["result"]["resultType"]),
        (200, &json!("complete"))
    );
}

// ---- the tasks extension on jobs (CONTRACT §9, §20) ----

fn with_tasks(id: i64, method: &str, extra: Value) -> String {
    let mut v: Value = serde_json::from_str(&modern(id, method, extra)).unwrap();
    v["params"]["_meta"][META_CLIENT_CAPABILITIES] = json!({"extensions": {TASKS_EXTENSION: {}}});
    v.to_string()
}

#[test]
fn a_negotiating_clients_bash_call_becomes_a_job_and_tasks_map_onto_job_tools() {
    let call = |msg: &str| match &run(Profile::Owner, msg)[..] {
        [Action::Call {
            name,
            arguments,
            form,
            ..
        }] => (name.clone(), arguments.clone(), form.task),
        other => panic!("{msg}: {other:?}"),
    };
    // Tasks extension "Capability Negotiation": only for a request that declares it.
    let bash = json!({"name": "bash", "arguments": {"command": "make", "max_output_bytes": 10}});
    assert_eq!(
        call(&with_tasks(1, "tools/call", bash.clone())),
        (
            "bash_start".into(),
            json!({"command": "make", "timeout_secs": 60}),
            Some(TaskStep::Create)
        )
    );
    assert_eq!(call(&modern(1, "tools/call", bash.clone())).2, None);
    assert_eq!(call(&modern(1, "tools/call", bash)).0, "bash");
    // Other tools are never tasks.
    assert_eq!(
        call(&with_tasks(1, "tools/call", json!({"name": "sys_info"}))),
        ("sys_info".into(), json!({}), None)
    );
    let task = json!({"taskId": "j1"});
    assert_eq!(
        call(&with_tasks(2, "tasks/get", task.clone())),
        (
            "bash_poll".into(),
            json!({"job_id": "j1", "max_bytes": tasks::RESULT_BYTES}),
            Some(TaskStep::Get)
        )
    );
    assert_eq!(
        call(&with_tasks(3, "tasks/cancel", task.clone())),
        (
            "bash_cancel".into(),
            json!({"job_id": "j1"}),
            Some(TaskStep::Cancel)
        )
    );
    assert_eq!(
        call(&with_tasks(4, "tasks/update", task.clone())).2,
        Some(TaskStep::Update)
    );
    // Without the extension: MissingRequiredClientCapability naming it, HTTP 400.
    for method in ["tasks/get", "tasks/update", "tasks/cancel"] {
        let msg = modern(5, method, task.clone());
        let (status, reply) = http(
            Profile::Owner,
            &msg,
            HttpHeaders {
                protocol_version: Some("2026-07-28"),
                method: Some(method),
                name: None,
            },
        );
        assert_eq!(
            (status, &reply["error"]["code"]),
            (400, &json!(MISSING_CLIENT_CAPABILITY)),
            "{method}: {reply}"
        );
        assert_eq!(
            reply["error"]["data"]["requiredCapabilities"]["extensions"][TASKS_EXTENSION],
            json!({})
        );
    }
    // A missing taskId is malformed; a legacy connection has no tasks methods.
    let reply = single_reply(&run(Profile::Owner, &with_tasks(6, "tasks/get", json!({}))));
    assert_eq!(reply["error"]["code"], INVALID_PARAMS, "{reply}");
    let reply = single_reply(&run(
        Profile::Owner,
        r#"{"jsonrpc":"2.0","id":7,"method":"tasks/get","params":{"taskId":"j1"}}"#,
    ));
    assert_eq!(reply["error"]["code"], METHOD_NOT_FOUND, "{reply}");
    // server/discover advertises the extension (and no v1-style `tasks` slot).
    let reply = single_reply(&run(
        Profile::Owner,
        &modern(8, "server/discover", json!({})),
    ));
    let caps = &reply["result"]["capabilities"];
    assert_eq!(caps["extensions"][TASKS_EXTENSION], json!({}), "{caps}");
    assert!(caps.get("tasks").is_none(), "{caps}");
}

#[test]
fn job_tool_answers_become_task_answers() {
    let form = |step| Form {
        revision: Revision::R2026_07_28,
        task: Some(step),
    };
    let job = |facts: Value, is_error: bool| ToolOutput::Encoded {
        json: json!({"content": [{"type": "text", "text": "hi\n[job exited 0]"}],
                "structuredContent": facts, "isError": is_error})
        .to_string()
        .into(),
        is_error,
    };
    let started = json!({"job_id": "j1", "state": "running", "pid": 42,
            "started_at": "2026-12-01T20:00:00Z"});
    let reply = |step, out| -> Value {
        serde_json::from_str(&form(step).reply(&json!(1), out, 1 << 20).0).unwrap()
    };
    // Tasks extension "Task Creation": resultType task, a flat Task.
    let created = reply(TaskStep::Create, job(started.clone(), false));
    let r = &created["result"];
    assert_eq!(
        (&r["resultType"], &r["taskId"], &r["status"]),
        (&json!("task"), &json!("j1"), &json!("working")),
        "{created}"
    );
    assert_eq!(r["createdAt"], "2026-12-01T20:00:00Z");
    assert!(r["ttlMs"].is_null() && r["pollIntervalMs"].is_u64(), "{r}");
    assert!(r.get("task").is_none(), "flat, no nested task: {r}");
    // A start that was refused is the call's own tool error, not a task.
    let refused = reply(
        TaskStep::Create,
        ToolOutput::tool_error("too many running jobs (16) under this grant"),
    );
    assert_eq!(refused["result"]["isError"], true, "{refused}");
    assert_eq!(refused["result"]["resultType"], "complete", "{refused}");

    // "Task Polling": tasks/get answers resultType complete and the task's state.
    let poll = |state: &str, extra: Value| {
        let mut facts = started.clone();
        facts["state"] = json!(state);
        for (k, v) in extra.as_object().unwrap() {
            facts[k] = v.clone();
        }
        reply(TaskStep::Get, job(facts, false))["result"].clone()
    };
    let running = poll(
        "running",
        json!({"stdout_range": [0, 1], "stderr_range": [1, 1]}),
    );
    assert_eq!(
        (&running["status"], &running["resultType"]),
        (&json!("working"), &json!("complete"))
    );
    assert!(running.get("result").is_none(), "{running}");
    let ended = json!({"stdout_range": [0, 3], "stderr_range": [3, 3], "stdout_next": 3, "stdout_total": 3,
            "stderr_next": 0, "stderr_total": 0, "ended_at": "2026-12-01T20:00:01Z",
            "duration_ms": 5});
    let mut ok = ended.clone();
    ok["exit_code"] = json!(0);
    let done = poll("exited", ok);
    assert_eq!(done["status"], "completed", "{done}");
    assert_eq!(done["lastUpdatedAt"], "2026-12-01T20:00:01Z");
    // "completed": the result the call would have answered, isError included.
    assert_eq!(
        done["result"]["structuredContent"]["stdout_range"],
        json!([0, 3])
    );
    assert_eq!(done["result"]["content"][0]["text"], "hi\n[job exited 0]");
    assert_eq!(done["result"]["isError"], false);
    let mut failed = ended.clone();
    failed["exit_code"] = json!(3);
    assert_eq!(poll("exited", failed)["result"]["isError"], true);
    let mut timeout = ended.clone();
    timeout["reason"] = json!("timeout");
    timeout["exit_code"] = json!(137);
    let t = poll("killed", timeout);
    assert_eq!(
        (&t["status"], &t["result"]["structuredContent"]["timed_out"]),
        (&json!("completed"), &json!(true))
    );
    let mut cancelled = ended;
    cancelled["reason"] = json!("cancelled");
    assert_eq!(poll("killed", cancelled)["status"], "cancelled");
    // An unknown (or another grant's) job: a JSON-RPC error.
    let unknown = reply(TaskStep::Get, ToolOutput::tool_error("unknown job_id: zz"));
    assert_eq!(unknown["error"]["code"], INVALID_PARAMS, "{unknown}");
    assert!(unknown["error"]["message"].as_str().unwrap().contains("zz"));
    // "Task Cancellation": an empty acknowledgement.
    let ack = reply(
        TaskStep::Cancel,
        job(
            json!({"job_id": "j1", "signal": "TERM", "state": "running"}),
            false,
        ),
    );
    assert_eq!(ack["result"]["resultType"], "complete", "{ack}");
    assert!(ack["result"].get("taskId").is_none(), "{ack}");
}

/// A catalogue whose list and key the test changes, counting how often it is built.
struct Counted {
    key: std::cell::Cell<Option<u64>>,
    tools: std::cell::RefCell<Vec<&'static str>>,
    built: std::cell::Cell<usize>,
}
impl Catalog for Counted {
    fn list(&self) -> Vec<Value> {
        self.built.set(self.built.get() + 1);
        self.tools
            .borrow()
            .iter()
            .map(|n| json!({"name": n}))
            .collect()
    }
    fn list_key(&self) -> Option<u64> {
        self.key.get()
    }
    fn resolve(&self, _: &str) -> Resolution {
        Resolution::Unknown
    }
    fn instructions(&self) -> String {
        String::new()
    }
}

#[test]
fn tools_list_is_built_once_per_key_and_revision() {
    let c = Counted {
        key: std::cell::Cell::new(Some(1)),
        tools: std::cell::RefCell::new(vec!["sys_info", "bash"]),
        built: std::cell::Cell::new(0),
    };
    let mut d = Dispatcher::new();
    let legacy = br#"{"jsonrpc":"2.0","id":7,"method":"tools/list"}"#;
    let first = d.handle(legacy, &c);
    let again = d.handle(legacy, &c);
    assert_eq!(first, again, "the same bytes the second time");
    assert_eq!(c.built.get(), 1, "not built again");
    // Another id: the cached result under this request's id.
    let other = single_reply(&d.handle(br#"{"jsonrpc":"2.0","id":"x","method":"tools/list"}"#, &c));
    assert_eq!((other["id"].clone(), c.built.get()), (json!("x"), 1));
    assert_eq!(other["result"]["tools"][1]["name"], "bash");
    // The list changed (an upstream refreshed, the grant's approvals moved): a new key,
    // a new list.
    c.tools.borrow_mut().pop();
    c.key.set(Some(2));
    let changed = single_reply(&d.handle(legacy, &c));
    assert_eq!(c.built.get(), 2);
    assert_eq!(changed["result"]["tools"], json!([{"name": "sys_info"}]));
    d.handle(legacy, &c);
    assert_eq!(c.built.get(), 2);
    // A modern request on the same connection is framed by its own revision; the
    // legacy one after it is not served the modern framing.
    let m = single_reply(&d.handle(modern(3, "tools/list", json!({})).as_bytes(), &c));
    assert_eq!(m["result"]["resultType"], "complete", "{m}");
    assert_eq!(c.built.get(), 3);
    let l = single_reply(&d.handle(legacy, &c));
    assert!(l["result"].get("resultType").is_none(), "{l}");
    assert_eq!(l["result"]["tools"], json!([{"name": "sys_info"}]));
    // Without a key the list is built for every request.
    c.key.set(None);
    d.handle(legacy, &c);
    d.handle(legacy, &c);
    assert_eq!(c.built.get(), 6);
    // Each connection builds its own.
    c.key.set(Some(2));
    Dispatcher::new().handle(legacy, &c);
    assert_eq!(c.built.get(), 7);
}
