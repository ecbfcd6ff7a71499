//! The MCP / JSON-RPC dispatcher, sans-IO: one message's bytes in, replies and tool calls
//! out. The grant socket and `POST /mcp` both drive it; neither transport logic nor tool
//! execution lives here, so every protocol rule is a row in a table test.

use serde_json::value::RawValue;
use serde_json::{json, Map, Value};

/// Protocol versions we negotiate. `2025-03-26` is deliberately absent: it requires batch
/// support, which we refuse.
pub const PROTOCOL_VERSIONS: [&str; 2] = ["2025-06-18", "2024-11-05"];
pub const DEFAULT_PROTOCOL_VERSION: &str = PROTOCOL_VERSIONS[0];

pub const PARSE_ERROR: i64 = -32700;
pub const INVALID_REQUEST: i64 = -32600;
pub const METHOD_NOT_FOUND: i64 = -32601;
pub const INVALID_PARAMS: i64 = -32602;
pub const SERVER_ERROR: i64 = -32000;

/// Where a visible tool is served from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Route {
    Local,
    /// The index of the upstream in the configured list.
    Upstream(usize),
    /// The grant's own throwaway browser (profile `browser`, §12).
    Browser,
}

/// What the catalogue knows of a tool name for this connection.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Resolution {
    Visible(Route),
    /// Exists, but the connection may not use it: answered exactly like `Unknown`,
    /// audited `denied`.
    Hidden,
    Unknown,
}

/// The tools a connection can see: it knows the connection's profile and lists.
/// Implemented by the live tool registry and by fakes in tests; must not block (upstream
/// lists come from a cache).
pub trait Catalog {
    /// `tools/list` entries this connection may use, each a complete MCP tool object.
    fn list(&self) -> Vec<Value>;
    fn resolve(&self, name: &str) -> Resolution;
    /// The `instructions` text of `initialize` for this connection.
    fn instructions(&self) -> String;
}

/// Audit outcome of a tool call, as recorded in `audit.jsonl`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outcome {
    Ok,
    ToolError,
    RpcError,
    Denied,
    /// Held for approval (§10) and denied, expired or withdrawn: it did not run.
    NotApproved,
}

impl Outcome {
    pub fn as_str(self) -> &'static str {
        match self {
            Outcome::Ok => "ok",
            Outcome::ToolError => "tool_error",
            Outcome::RpcError => "rpc_error",
            Outcome::Denied => "denied",
            Outcome::NotApproved => "not_approved",
        }
    }
}

/// What the transport must do after one inbound message.
#[derive(Clone, Debug, PartialEq)]
pub enum Action {
    /// Send this serialized JSON-RPC message.
    Reply(String),
    /// Run a tool; its reply is produced later with [`tool_reply`].
    Call {
        id: Value,
        name: String,
        route: Route,
        arguments: Value,
    },
    /// `notifications/cancelled`: stop the call with this request id, send nothing.
    Cancel { id: Value },
    /// A `tools/call` answered here without running anything; audit it.
    Refused { tool: String, outcome: Outcome },
}

/// Per-connection protocol state. What the connection may use is the catalogue's
/// business, not the dispatcher's.
#[derive(Debug, Default)]
pub struct Dispatcher {
    negotiated: Option<&'static str>,
    initialized_notified: bool,
}

impl Dispatcher {
    pub fn new() -> Self {
        Dispatcher::default()
    }

    /// The protocol version agreed on `initialize`, if it has happened.
    pub fn negotiated_version(&self) -> Option<&'static str> {
        self.negotiated
    }

    pub fn saw_initialized_notification(&self) -> bool {
        self.initialized_notified
    }

    /// Handle one inbound message. Never panics on any input.
    ///
    /// The message is read without building a tree of it: its members are kept as raw
    /// text borrowed from `bytes` and only the few the method needs are parsed (a 16 MiB
    /// `params` of `[0,0,…]` would be ~250 MB as a `Value`, and twice that once copied).
    pub fn handle(&mut self, bytes: &[u8], catalog: &dyn Catalog) -> Vec<Action> {
        let parse_error = |e: &dyn std::fmt::Display| {
            vec![Action::Reply(error_reply(
                &Value::Null,
                PARSE_ERROR,
                &format!("Parse error: {e}"),
            ))]
        };
        let text = match std::str::from_utf8(bytes) {
            Ok(text) => text,
            Err(e) => return parse_error(&e),
        };
        // Validated first, with the parser's nesting limit, so exactly what a `Value` would
        // refuse is a parse error; nothing is allocated.
        if let Err(e) = raw::validate(text) {
            return parse_error(&e);
        }
        match raw::members(text, &TOP_MEMBERS) {
            Some(top) => self.handle_object(&top, catalog),
            None if text.trim_start().starts_with('[') => vec![Action::Reply(error_reply(
                &Value::Null,
                INVALID_REQUEST,
                "Invalid Request: batch requests are not supported",
            ))],
            None => vec![Action::Reply(error_reply(
                &Value::Null,
                INVALID_REQUEST,
                "Invalid Request: a message must be a JSON object",
            ))],
        }
    }

    fn handle_object(
        &mut self,
        top: &[Option<&RawValue>; TOP_MEMBERS.len()],
        catalog: &dyn Catalog,
    ) -> Vec<Action> {
        let [jsonrpc, id, method, params, result, error] = *top;
        let id = id.map(raw::shallow);
        let id = id.as_ref();
        // MCP ids are strings or integers. Anything else cannot be echoed back faithfully: a
        // fraction or a number beyond 64 bits comes back as the nearest double, which the
        // client may not match to what it sent.
        let reply_id = match id {
            Some(v) if is_valid_id(v) => v.clone(),
            _ => Value::Null,
        };
        let invalid = |msg: &str| {
            vec![Action::Reply(error_reply(
                &reply_id,
                INVALID_REQUEST,
                &format!("Invalid Request: {msg}"),
            ))]
        };
        if jsonrpc.map(raw::shallow).as_ref().and_then(Value::as_str) != Some("2.0") {
            return invalid("jsonrpc must be \"2.0\"");
        }
        match id {
            Some(Value::Null) => return invalid("id must not be null"),
            Some(v) if is_valid_id(v) => {}
            None => {}
            Some(_) => return invalid("id must be a string or an integer of at most 64 bits"),
        }
        let method = match method.map(raw::shallow) {
            Some(Value::String(m)) => m,
            Some(_) => return invalid("method must be a string"),
            None if id.is_some() && (result.is_some() || error.is_some()) => {
                // A response to something we never ask; nothing to do.
                return Vec::new();
            }
            None => return invalid("method is missing"),
        };
        if id.is_none() {
            return self.handle_notification(&method, params);
        }
        self.handle_request(reply_id, &method, params, catalog)
    }

    fn handle_notification(&mut self, method: &str, params: Option<&RawValue>) -> Vec<Action> {
        match method {
            "notifications/cancelled" => match member(params, "requestId").map(raw::shallow) {
                Some(v) if is_valid_id(&v) => vec![Action::Cancel { id: v }],
                _ => Vec::new(),
            },
            "notifications/initialized" => {
                self.initialized_notified = true;
                Vec::new()
            }
            _ => Vec::new(),
        }
    }

    fn handle_request(
        &mut self,
        id: Value,
        method: &str,
        params: Option<&RawValue>,
        catalog: &dyn Catalog,
    ) -> Vec<Action> {
        let result = match method {
            "initialize" => {
                let requested = member(params, "protocolVersion").map(raw::shallow);
                let requested = requested.as_ref().and_then(Value::as_str);
                let version = PROTOCOL_VERSIONS
                    .iter()
                    .copied()
                    .find(|v| Some(*v) == requested)
                    .unwrap_or(DEFAULT_PROTOCOL_VERSION);
                self.negotiated = Some(version);
                json!({
                    "protocolVersion": version,
                    "capabilities": {"tools": {"listChanged": false}},
                    "serverInfo": {"name": "handnode", "version": env!("CARGO_PKG_VERSION")},
                    "instructions": catalog.instructions(),
                })
            }
            "ping" => json!({}),
            "tools/list" => json!({"tools": catalog.list()}),
            "resources/list" => json!({"resources": []}),
            "prompts/list" => json!({"prompts": []}),
            "tools/call" => return self.tools_call(id, params, catalog),
            other => {
                return vec![Action::Reply(error_reply(
                    &id,
                    METHOD_NOT_FOUND,
                    &format!("Method not found: {other}"),
                ))]
            }
        };
        vec![Action::Reply(result_reply(&id, result))]
    }

    fn tools_call(
        &mut self,
        id: Value,
        params: Option<&RawValue>,
        catalog: &dyn Catalog,
    ) -> Vec<Action> {
        let refuse = |tool: &str, outcome: Outcome, msg: String| {
            vec![
                Action::Reply(error_reply(&id, INVALID_PARAMS, &msg)),
                Action::Refused {
                    tool: tool.to_string(),
                    outcome,
                },
            ]
        };
        let Some([name, arguments]) =
            params.and_then(|p| raw::members(p.get(), &["name", "arguments"]))
        else {
            return refuse(
                "",
                Outcome::RpcError,
                "Invalid params: params must be an object".into(),
            );
        };
        let name = match name.map(raw::shallow) {
            Some(Value::String(n)) => n,
            _ => {
                return refuse(
                    "",
                    Outcome::RpcError,
                    "Invalid params: name must be a string".into(),
                )
            }
        };
        let arguments = match arguments.map(|a| (a, raw::shallow(a))) {
            None | Some((_, Value::Null)) => Value::Object(Map::new()),
            Some((text, Value::Object(_))) => match raw::arguments(text) {
                Ok(v) => v,
                Err(msg) => {
                    return refuse(&name, Outcome::RpcError, format!("Invalid params: {msg}"))
                }
            },
            Some(_) => {
                return refuse(
                    &name,
                    Outcome::RpcError,
                    "Invalid params: arguments must be an object".into(),
                )
            }
        };
        match catalog.resolve(&name) {
            Resolution::Visible(route) => vec![Action::Call {
                id,
                name,
                route,
                arguments,
            }],
            resolution => {
                let outcome = if resolution == Resolution::Hidden {
                    Outcome::Denied
                } else {
                    Outcome::RpcError
                };
                let msg = format!("Invalid params: unknown tool: {name}");
                refuse(&name, outcome, msg)
            }
        }
    }
}

/// The top-level members the dispatcher reads, in the order `raw::members` returns them.
const TOP_MEMBERS: [&str; 6] = ["jsonrpc", "id", "method", "params", "result", "error"];

/// Most JSON values (scalars and containers, at any depth) a `tools/call`'s `arguments`
/// may hold. A tool takes a handful of fields; a tree of this many values costs at most
/// ~2 MiB, where 16 MiB of `[0,0,…]` would cost ~250 MB (32 bytes per value).
pub const MAX_ARGUMENT_VALUES: usize = 16_384;

/// One member of an object given as raw JSON (`None` when absent or not an object).
fn member<'a>(object: Option<&'a RawValue>, name: &str) -> Option<&'a RawValue> {
    raw::members(object?.get(), &[name])?[0]
}

/// Reading JSON text without building its tree: members picked out as raw text borrowed
/// from the message, small values parsed one at a time.
mod raw {
    use std::fmt;

    use serde::de::{self, DeserializeSeed, Deserializer, MapAccess, SeqAccess, Visitor};
    use serde_json::value::RawValue;
    use serde_json::{Map, Value};

    use super::MAX_ARGUMENT_VALUES;

    /// Check that `text` is one JSON value a `Value` would take (syntax, number ranges and
    /// the parser's nesting limit), allocating nothing.
    pub(super) fn validate(text: &str) -> Result<(), serde_json::Error> {
        let mut de = serde_json::Deserializer::from_str(text);
        Skip.deserialize(&mut de)?;
        de.end()
    }

    /// The members `names` of the object `text` (last one wins, as in a `Value`), or
    /// `None` when `text` is not an object. `text` must already be valid JSON.
    pub(super) fn members<'a, const N: usize>(
        text: &'a str,
        names: &[&str; N],
    ) -> Option<[Option<&'a RawValue>; N]> {
        let found = pick(text, names)?;
        Some(std::array::from_fn(|i| found[i]))
    }

    /// Most members [`members`] picks at once (the envelope's).
    const MAX_PICKED: usize = super::TOP_MEMBERS.len();

    /// [`members`] without a copy per `N` of the visitor and the parser under it.
    fn pick<'a>(text: &'a str, names: &[&str]) -> Option<[Option<&'a RawValue>; MAX_PICKED]> {
        assert!(names.len() <= MAX_PICKED);
        let mut de = serde_json::Deserializer::from_str(text);
        de.deserialize_any(Pick(names)).ok().flatten()
    }

    /// A raw value parsed as a `Value` if it is a scalar; a container becomes an empty one
    /// of its kind, which is all the envelope's checks need to know of it.
    pub(super) fn shallow(raw: &RawValue) -> Value {
        match raw.get().as_bytes().first() {
            Some(b'[') => Value::Array(Vec::new()),
            Some(b'{') => Value::Object(Map::new()),
            _ => serde_json::from_str(raw.get()).unwrap_or(Value::Null),
        }
    }

    /// A `tools/call`'s `arguments` object as a `Value`, refused past
    /// `MAX_ARGUMENT_VALUES` values before any of it is built.
    pub(super) fn arguments(raw: &RawValue) -> Result<Value, String> {
        let values = count_values(raw.get());
        if values > MAX_ARGUMENT_VALUES {
            return Err(format!(
                "arguments hold {values} JSON values; at most {MAX_ARGUMENT_VALUES} are accepted"
            ));
        }
        serde_json::from_str(raw.get()).map_err(|e| format!("arguments: {e}"))
    }

    /// How many values valid JSON text holds, counted from above: every value but the
    /// outermost follows a `[`, a `,` or a `:` outside a string (an object's `,` precede
    /// names, which cost memory too; an empty array counts one).
    fn count_values(text: &str) -> usize {
        let (mut n, mut in_string, mut escaped) = (1, false, false);
        for b in text.bytes() {
            if in_string {
                match b {
                    _ if escaped => escaped = false,
                    b'\\' => escaped = true,
                    b'"' => in_string = false,
                    _ => {}
                }
            } else {
                match b {
                    b'"' => in_string = true,
                    b',' | b':' | b'[' => n += 1,
                    _ => {}
                }
            }
        }
        n
    }

    /// Visits anything and keeps nothing, through `deserialize_any` so the parser's nesting
    /// limit applies (`IgnoredAny` skips without one).
    struct Skip;

    impl<'de> DeserializeSeed<'de> for Skip {
        type Value = ();
        fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
            d.deserialize_any(Skip)
        }
    }

    impl<'de> Visitor<'de> for Skip {
        type Value = ();
        fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
            f.write_str("any JSON value")
        }
        fn visit_bool<E>(self, _: bool) -> Result<(), E> {
            Ok(())
        }
        fn visit_i64<E>(self, _: i64) -> Result<(), E> {
            Ok(())
        }
        fn visit_u64<E>(self, _: u64) -> Result<(), E> {
            Ok(())
        }
        fn visit_f64<E>(self, _: f64) -> Result<(), E> {
            Ok(())
        }
        fn visit_str<E>(self, _: &str) -> Result<(), E> {
            Ok(())
        }
        fn visit_unit<E>(self) -> Result<(), E> {
            Ok(())
        }
        fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
            while seq.next_element_seed(Skip)?.is_some() {}
            Ok(())
        }
        fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
            while map.next_key_seed(Skip)?.is_some() {
                map.next_value_seed(Skip)?;
            }
            Ok(())
        }
    }

    /// Picks the members `names` out of an object; anything else is "not an object".
    struct Pick<'n>(&'n [&'n str]);

    impl<'de> Visitor<'de> for Pick<'_> {
        type Value = Option<[Option<&'de RawValue>; MAX_PICKED]>;
        fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
            f.write_str("a JSON object")
        }
        fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
            let mut found = [None; MAX_PICKED];
            while let Some(key) = map.next_key_seed(KeyIndex(self.0))? {
                match key {
                    Some(i) => found[i] = Some(map.next_value::<&'de RawValue>()?),
                    None => map.next_value::<de::IgnoredAny>().map(drop)?,
                }
            }
            Ok(Some(found))
        }
        fn visit_seq<A: SeqAccess<'de>>(self, _: A) -> Result<Self::Value, A::Error> {
            Ok(None)
        }
        fn visit_bool<E>(self, _: bool) -> Result<Self::Value, E> {
            Ok(None)
        }
        fn visit_i64<E>(self, _: i64) -> Result<Self::Value, E> {
            Ok(None)
        }
        fn visit_u64<E>(self, _: u64) -> Result<Self::Value, E> {
            Ok(None)
        }
        fn visit_f64<E>(self, _: f64) -> Result<Self::Value, E> {
            Ok(None)
        }
        fn visit_str<E>(self, _: &str) -> Result<Self::Value, E> {
            Ok(None)
        }
        fn visit_unit<E>(self) -> Result<Self::Value, E> {
            Ok(None)
        }
    }

    /// A member name as its index in `names` (`None` for any other name), without
    /// copying it.
    struct KeyIndex<'n>(&'n [&'n str]);

    impl<'de> DeserializeSeed<'de> for KeyIndex<'_> {
        type Value = Option<usize>;
        fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
            d.deserialize_str(self)
        }
    }

    impl<'de> Visitor<'de> for KeyIndex<'_> {
        type Value = Option<usize>;
        fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
            f.write_str("a member name")
        }
        fn visit_str<E>(self, key: &str) -> Result<Self::Value, E> {
            Ok(self.0.iter().position(|n| *n == key))
        }
    }
}

/// A request id MCP allows: a string, or an integer that parses without rounding.
fn is_valid_id(id: &Value) -> bool {
    match id {
        Value::String(_) => true,
        Value::Number(n) => n.is_i64() || n.is_u64(),
        _ => false,
    }
}

/// Serialize a successful JSON-RPC response.
pub fn result_reply(id: &Value, result: Value) -> String {
    // Serialized straight from `result`: `json!` around a `Value` deep-copies it first,
    // which for a screenshot means megabytes copied and held twice.
    #[derive(serde::Serialize)]
    struct Reply<'a> {
        jsonrpc: &'static str,
        id: &'a Value,
        result: &'a Value,
    }
    // Sized up front from the text and data blocks: a reply of megabytes then never
    // exists twice while its buffer grows (§15 counts what a reply holds).
    let hint: usize = result["content"]
        .as_array()
        .map(|blocks| {
            blocks
                .iter()
                .filter_map(|b| b["text"].as_str().or(b["data"].as_str()))
                .map(str::len)
                .sum()
        })
        .unwrap_or(0);
    let mut out = Vec::with_capacity(hint + 1024);
    serde_json::to_writer(
        &mut out,
        &Reply {
            jsonrpc: "2.0",
            id,
            result: &result,
        },
    )
    .expect("a JSON value always serializes");
    drop(result);
    String::from_utf8(out).expect("serde_json writes UTF-8")
}

/// A successful JSON-RPC response around a result that is already JSON text.
fn encoded_result_reply(id: &Value, result: &str) -> String {
    let id = id.to_string();
    let mut out = String::with_capacity(result.len() + id.len() + 32);
    out.push_str(r#"{"jsonrpc":"2.0","id":"#);
    out.push_str(&id);
    out.push_str(r#","result":"#);
    out.push_str(result);
    out.push('}');
    out
}

/// Serialize a JSON-RPC error response.
pub fn error_reply(id: &Value, code: i64, message: &str) -> String {
    json!({"jsonrpc": "2.0", "id": id, "error": {"code": code, "message": message}}).to_string()
}

/// What a tool call produced, before it is put on the wire.
#[derive(Clone, Debug, PartialEq)]
pub enum ToolOutput {
    /// A `CallToolResult` object (`content`, optional `structuredContent`, `isError`).
    Result(Value),
    /// A `CallToolResult` already serialized (a cached answer), put into the reply as is.
    Encoded {
        json: std::sync::Arc<str>,
        is_error: bool,
    },
    /// A `CallToolResult` serialized for this one reply (a tool's output written straight
    /// as JSON): the reply is built around it in place, never copied (§15).
    Json { json: String, is_error: bool },
    /// Bad argument shapes: a JSON-RPC `-32602`.
    InvalidParams(String),
    /// A JSON-RPC error other than bad params (overload, upstream protocol failure).
    RpcError { code: i64, message: String },
    /// A call held for approval that did not run (denied, expired): an `isError` result
    /// whose text says why, audited `not_approved`.
    NotApproved(String),
    /// A result produced only when its reply can be sent (§15): a job's output stays in
    /// its files until the connection has room for it. A grant thread runs it when its
    /// socket takes what it owes; [`tool_reply`] runs it at once.
    Later(Later),
}

type Produce = Box<dyn FnOnce() -> ToolOutput + Send>;

/// The producer of a [`ToolOutput::Later`]: run once.
#[derive(Clone)]
pub struct Later(std::sync::Arc<std::sync::Mutex<Option<Produce>>>);

impl Later {
    pub fn new(produce: impl FnOnce() -> ToolOutput + Send + 'static) -> Self {
        Later(std::sync::Arc::new(std::sync::Mutex::new(Some(Box::new(
            produce,
        )))))
    }

    /// Produce the output (a second run, which no caller makes, answers a tool error).
    pub fn run(self) -> ToolOutput {
        let produce = self.0.lock().unwrap_or_else(|e| e.into_inner()).take();
        match produce {
            Some(produce) => produce(),
            None => ToolOutput::tool_error("this result was already sent"),
        }
    }
}

impl std::fmt::Debug for Later {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Later(..)")
    }
}

impl PartialEq for Later {
    fn eq(&self, other: &Self) -> bool {
        std::sync::Arc::ptr_eq(&self.0, &other.0)
    }
}

impl ToolOutput {
    /// A successful result with one text block.
    pub fn text(text: impl Into<String>) -> Self {
        ToolOutput::Result(json!({"content": [{"type": "text", "text": text.into()}]}))
    }

    /// A tool that ran and failed: an `isError` result whose text says why.
    pub fn tool_error(text: impl Into<String>) -> Self {
        ToolOutput::Result(json!({
            "content": [{"type": "text", "text": text.into()}],
            "isError": true,
        }))
    }

    pub fn outcome(&self) -> Outcome {
        match self {
            ToolOutput::Result(v) if v.get("isError") == Some(&Value::Bool(true)) => {
                Outcome::ToolError
            }
            ToolOutput::Result(_) => Outcome::Ok,
            ToolOutput::Encoded { is_error: true, .. } => Outcome::ToolError,
            ToolOutput::Encoded { .. } => Outcome::Ok,
            ToolOutput::Json { is_error: true, .. } => Outcome::ToolError,
            ToolOutput::Json { .. } => Outcome::Ok,
            ToolOutput::InvalidParams(_) | ToolOutput::RpcError { .. } => Outcome::RpcError,
            ToolOutput::NotApproved(_) => Outcome::NotApproved,
            // Known once produced; whoever produces it reports that one.
            ToolOutput::Later(_) => Outcome::Ok,
        }
    }
}

/// Serialize a tool call's reply, replacing a result that would exceed `max_bytes` on the
/// wire with an `isError` result that says how large it was.
pub fn tool_reply(id: &Value, output: ToolOutput, max_bytes: usize) -> (String, Outcome) {
    let mut output = output;
    while let ToolOutput::Later(later) = output {
        output = later.run();
    }
    let outcome = output.outcome();
    let encoded = match output {
        ToolOutput::Result(result) => result_reply(id, result),
        ToolOutput::Encoded { json, .. } => encoded_result_reply(id, &json),
        ToolOutput::Json { mut json, .. } => {
            // In place: the prefix moves the bytes within the buffer, which has room.
            let prefix = format!(r#"{{"jsonrpc":"2.0","id":{id},"result":"#);
            json.reserve(prefix.len() + 1);
            json.insert_str(0, &prefix);
            json.push('}');
            json
        }
        ToolOutput::InvalidParams(msg) => {
            error_reply(id, INVALID_PARAMS, &format!("Invalid params: {msg}"))
        }
        ToolOutput::RpcError { code, message } => error_reply(id, code, &message),
        ToolOutput::NotApproved(text) => result_reply(
            id,
            json!({"content": [{"type": "text", "text": text}], "isError": true}),
        ),
        ToolOutput::Later(_) => unreachable!("produced above"),
    };
    if encoded.len() <= max_bytes {
        return (encoded, outcome);
    }
    let too_large = ToolOutput::tool_error(format!("result too large: {} bytes", encoded.len()));
    let ToolOutput::Result(result) = too_large else {
        unreachable!("tool_error builds a result")
    };
    (result_reply(id, result), Outcome::ToolError)
}

#[cfg(test)]
mod tests {
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
                arguments: json!({"command":"true"})
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
                arguments: json!({})
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
                arguments: json!({"command": "b"})
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
}
