//! What goes back: JSON-RPC result and error replies (framed by revision), a tool's
//! output and the reply built from it (produced now or later), request id rules.

use super::*;

/// A result as `revision` frames it. From 2026-07-28 every result carries `resultType`
/// (basic/index "ResultType") and the server names itself in `_meta` (basic/index
/// "Per-response protocol fields"); cacheable ones carry `ttlMs` and `cacheScope`.
/// `ttlMs` is 0: a grant's tool list changes when an upstream comes or goes, and a
/// profile's list is the caller's own, hence `private`.
pub(super) fn frame_result(revision: Revision, method: &str, mut result: Value) -> Value {
    if !revision.is_stateless() {
        return result;
    }
    if let Value::Object(map) = &mut result {
        map.insert("resultType".into(), json!("complete"));
        map.entry("_meta")
            .or_insert_with(|| json!({}))
            .as_object_mut()
            .map(|meta| meta.insert(META_SERVER_INFO.into(), server_info()));
        if CACHEABLE.contains(&method) {
            map.insert("ttlMs".into(), json!(0));
            map.insert("cacheScope".into(), json!("private"));
        }
    }
    result
}

/// The error code of a serialized reply, if it is an error.
pub(super) fn error_code(reply: &str) -> Option<i64> {
    serde_json::from_str::<Value>(reply)
        .ok()
        .and_then(|v| v.pointer("/error/code").and_then(Value::as_i64))
}

/// A request id MCP allows: a string, or an integer that parses without rounding.
pub(super) fn is_valid_id(id: &Value) -> bool {
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
pub(super) fn encoded_result_reply(id: &Value, result: &str) -> String {
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

    /// This output with any [`ToolOutput::Later`] produced.
    pub fn produced(self) -> ToolOutput {
        let mut output = self;
        while let ToolOutput::Later(later) = output {
            output = later.run();
        }
        output
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

/// Serialize a tool call's reply by the default (legacy) revision's rules, replacing a
/// result that would exceed `max_bytes` on the wire with an `isError` result that says how
/// large it was.
pub fn tool_reply(id: &Value, output: ToolOutput, max_bytes: usize) -> (String, Outcome) {
    tool_reply_at(DEFAULT_REVISION, id, output, max_bytes)
}

/// [`tool_reply`] by the rules of `revision`: from 2025-11-25 bad arguments are a tool
/// error, from 2026-07-28 the result carries `resultType` and the server's name.
pub fn tool_reply_at(
    revision: Revision,
    id: &Value,
    output: ToolOutput,
    max_bytes: usize,
) -> (String, Outcome) {
    let output = match output.produced() {
        ToolOutput::InvalidParams(msg) if revision.invalid_arguments_are_tool_errors() => {
            ToolOutput::tool_error(format!("Invalid arguments: {msg}"))
        }
        other => other,
    };
    let outcome = output.outcome();
    let encoded = match output {
        ToolOutput::Result(result) => {
            result_reply(id, frame_result(revision, "tools/call", result))
        }
        ToolOutput::Encoded { json, .. } if revision.is_stateless() => {
            encoded_result_reply(id, &with_result_type(&json))
        }
        ToolOutput::Encoded { json, .. } => encoded_result_reply(id, &json),
        ToolOutput::Json { mut json, .. } => {
            // In place: the prefix moves the bytes within the buffer, which has room.
            let mut prefix = format!(r#"{{"jsonrpc":"2.0","id":{id},"result":"#);
            if revision.is_stateless() && json.starts_with('{') {
                // The result's own `{` becomes the prefix's, followed by `resultType`.
                let head = framing_head(&json);
                json.remove(0);
                let sep = if json.trim_start().starts_with('}') {
                    ""
                } else {
                    ","
                };
                prefix.push_str(&head);
                prefix.push_str(sep);
            }
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
            frame_result(
                revision,
                "tools/call",
                json!({"content": [{"type": "text", "text": text}], "isError": true}),
            ),
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
    (
        result_reply(id, frame_result(revision, "tools/call", result)),
        Outcome::ToolError,
    )
}

/// A serialized result object with `"resultType":"complete"` first, and the server's name
/// in `_meta` unless the result has a `_meta` of its own (an upstream's result is passed
/// through untouched otherwise).
pub(super) fn with_result_type(json: &str) -> String {
    let body = json.trim_start().strip_prefix('{').unwrap_or("}");
    let sep = if body.trim_start().starts_with('}') {
        ""
    } else {
        ","
    };
    format!("{}{sep}{body}", framing_head(json))
}

/// The opening of a stateless result around the serialized result `json`: `{`,
/// `resultType`, and `_meta` with the server's name when `json` names no `_meta` itself.
pub(super) fn framing_head(json: &str) -> String {
    if json.contains(r#""_meta""#) {
        r#"{"resultType":"complete""#.to_string()
    } else {
        format!(
            r#"{{"resultType":"complete","_meta":{}"#,
            json!({META_SERVER_INFO: server_info()})
        )
    }
}
