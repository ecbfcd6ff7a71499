//! The MCP / JSON-RPC dispatcher, sans-IO: one message's bytes in, replies and tool calls
//! out. The grant socket and `POST /mcp` both drive it; neither transport logic nor tool
//! execution lives here, so every protocol rule is a row in a table test.

use serde_json::value::RawValue;
use serde_json::{json, Map, Value};

mod headers;
mod reply;

use headers::*;
pub use reply::*;

/// A protocol revision handnode speaks, each by its own rules (CONTRACT §6, §20).
/// `2025-03-26` is deliberately absent: it requires batch support, which we refuse.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Revision {
    R2024_11_05,
    R2025_06_18,
    R2025_11_25,
    /// Stateless: no `initialize`, `_meta` on every request, `server/discover`,
    /// `resultType` on every result.
    R2026_07_28,
}

impl Revision {
    /// Every revision, newest first.
    pub const ALL: [Revision; 4] = [
        Revision::R2026_07_28,
        Revision::R2025_11_25,
        Revision::R2025_06_18,
        Revision::R2024_11_05,
    ];

    pub const fn as_str(self) -> &'static str {
        match self {
            Revision::R2024_11_05 => "2024-11-05",
            Revision::R2025_06_18 => "2025-06-18",
            Revision::R2025_11_25 => "2025-11-25",
            Revision::R2026_07_28 => "2026-07-28",
        }
    }

    pub fn parse(version: &str) -> Option<Revision> {
        Revision::ALL.into_iter().find(|r| r.as_str() == version)
    }

    /// 2026-07-28 basic/versioning "Terminology": a *modern* revision carries version and
    /// capabilities on every request; a *legacy* one opens with `initialize`.
    pub fn is_stateless(self) -> bool {
        self >= Revision::R2026_07_28
    }

    /// 2025-11-25 server/tools "Error Handling" (SEP-1303): input validation errors are
    /// tool execution errors (`isError`), so a model can correct itself; before, `-32602`.
    pub fn invalid_arguments_are_tool_errors(self) -> bool {
        self >= Revision::R2025_11_25
    }
}

/// Protocol versions we speak, newest first (derived from [`Revision::ALL`]).
pub const PROTOCOL_VERSIONS: [&str; 4] = [
    Revision::ALL[0].as_str(),
    Revision::ALL[1].as_str(),
    Revision::ALL[2].as_str(),
    Revision::ALL[3].as_str(),
];

/// What a legacy connection that never named a version we know is served as, and what
/// handnode asks its own upstreams for: the revision the pod runtime speaks.
pub const DEFAULT_REVISION: Revision = Revision::R2025_06_18;

pub const DEFAULT_PROTOCOL_VERSION: &str = DEFAULT_REVISION.as_str();

/// The newest revision negotiated through `initialize` (2025-11-25 lifecycle: a server
/// that does not support the requested version answers another, SHOULD be its latest).
pub const LATEST_LEGACY: Revision = Revision::R2025_11_25;

/// The revisions served statelessly, as `server/discover` lists them.
pub const STATELESS_VERSIONS: [&str; 1] = [Revision::R2026_07_28.as_str()];

pub const PARSE_ERROR: i64 = -32700;

pub const INVALID_REQUEST: i64 = -32600;

pub const METHOD_NOT_FOUND: i64 = -32601;

pub const INVALID_PARAMS: i64 = -32602;

pub const SERVER_ERROR: i64 = -32000;

/// 2026-07-28 basic/index "Error Codes": HTTP headers that do not match the body.
pub const HEADER_MISMATCH: i64 = -32020;

/// 2026-07-28 basic/index "Error Codes": a request needs a capability the client did not
/// declare in `io.modelcontextprotocol/clientCapabilities`.
pub const MISSING_CLIENT_CAPABILITY: i64 = -32021;

/// 2026-07-28 basic/index "Error Codes": the request's protocol version is not served.
pub const UNSUPPORTED_PROTOCOL_VERSION: i64 = -32022;

/// The reserved `_meta` keys of 2026-07-28 basic/index "Per-request protocol fields".
pub const META_PROTOCOL_VERSION: &str = "io.modelcontextprotocol/protocolVersion";

pub const META_CLIENT_CAPABILITIES: &str = "io.modelcontextprotocol/clientCapabilities";

pub const META_SERVER_INFO: &str = "io.modelcontextprotocol/serverInfo";

/// The tasks extension's identifier (2026-07-28 basic/versioning "Extension Negotiation").
pub const TASKS_EXTENSION: &str = "io.modelcontextprotocol/tasks";

/// The `Mcp-*` headers of one `POST /mcp` (2026-07-28 transports/streamable-http
/// "Request Metadata"); the grant socket has none.
#[derive(Clone, Copy, Debug, Default)]
pub struct HttpHeaders<'a> {
    /// `MCP-Protocol-Version`.
    pub protocol_version: Option<&'a str>,
    /// `Mcp-Method`.
    pub method: Option<&'a str>,
    /// `Mcp-Name`.
    pub name: Option<&'a str>,
}

/// What one `POST /mcp` message produced: the HTTP status its reply goes out with, and the
/// actions.
#[derive(Clone, Debug, PartialEq)]
pub struct HttpOutcome {
    pub status: u16,
    pub actions: Vec<Action>,
}

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
    /// A key that changes whenever [`Catalog::list`] would answer differently: it must
    /// cover everything `list` reads (the connection's policy and grant, each upstream's
    /// list, the browser tier's). While it stays the same, a connection answers
    /// `tools/list` again with the bytes it built the last time (building the list cost
    /// ~0.8 ms of CPU a request, §24). `None`: unknown, built every time. Must be cheap
    /// and must not block.
    fn list_key(&self) -> Option<u64> {
        None
    }
    fn resolve(&self, name: &str) -> Resolution;
    /// The `instructions` text of `initialize` for this connection.
    fn instructions(&self) -> String;
    /// The tools the tasks extension maps onto, when this connection may use all of them.
    fn tasks(&self) -> Option<TaskTools> {
        None
    }
}

/// The tasks extension (`io.modelcontextprotocol/tasks`) on jobs (CONTRACT §9, §20): a
/// call of `call` may be answered as a task, started with `start` (its `job_id` is the
/// `taskId`); `tasks/get` reads it with `poll`, `tasks/cancel` stops it with `cancel`.
/// Named by the tool registry, which owns the names.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TaskTools {
    pub call: &'static str,
    pub start: &'static str,
    pub poll: &'static str,
    pub cancel: &'static str,
}

/// Which step of a task a job tool's output answers, and so how it is reshaped.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TaskStep {
    /// `tools/call` answered as a task: a `CreateTaskResult`.
    Create,
    /// `tasks/get`: the task's state, with the call's result once it ended.
    Get,
    /// `tasks/update`: an empty acknowledgement for a known task.
    Update,
    /// `tasks/cancel`: an empty acknowledgement.
    Cancel,
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
    /// Run a tool; its reply is produced later with [`Form::reply`].
    Call {
        id: Value,
        name: String,
        route: Route,
        arguments: Value,
        /// How the reply is framed: the request's revision (and task step).
        form: Form,
    },
    /// `notifications/cancelled`: stop the call with this request id, send nothing.
    Cancel { id: Value },
    /// A `tools/call` answered here without running anything; audit it.
    Refused { tool: String, outcome: Outcome },
}

/// How a tool call's output is put on the wire: by the rules of the request's revision.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Form {
    pub revision: Revision,
    /// A job tool run for a step of the tasks extension.
    pub task: Option<TaskStep>,
}

impl Form {
    /// The legacy default: what a connection that never initialized is served as.
    pub const DEFAULT: Form = Form {
        revision: DEFAULT_REVISION,
        task: None,
    };

    /// Serialize a tool call's reply by this form's rules (see [`tool_reply`]).
    pub fn reply(self, id: &Value, output: ToolOutput, max_bytes: usize) -> (String, Outcome) {
        match self.task {
            Some(step) => tasks::reply(step, self.revision, id, output, max_bytes),
            None => tool_reply_at(self.revision, id, output, max_bytes),
        }
    }
}

/// One request as the dispatcher serves it: its revision and what its client declared.
struct Req<'a> {
    id: Value,
    method: &'a str,
    params: Option<&'a RawValue>,
    revision: Revision,
    /// `io.modelcontextprotocol/clientCapabilities.extensions` names the tasks extension.
    tasks: bool,
}

/// A refusal of a modern request before its method runs: the HTTP status and the reply.
type Refusal = (u16, String);

/// Per-connection protocol state. What the connection may use is the catalogue's
/// business, not the dispatcher's.
#[derive(Debug, Default)]
pub struct Dispatcher {
    negotiated: Option<Revision>,
    initialized_notified: bool,
    /// The last `tools/list` result this connection built, serialized (see
    /// [`Catalog::list_key`]).
    tools_list: Option<ListCache>,
}

/// A serialized `tools/list` result and what it was built for: the catalogue's key and
/// the revision that framed it (a modern request frames it with `resultType` and `_meta`).
#[derive(Debug)]
struct ListCache {
    key: u64,
    revision: Revision,
    result: String,
}

impl Dispatcher {
    pub fn new() -> Self {
        Dispatcher::default()
    }

    /// The protocol version agreed on `initialize`, if it has happened.
    pub fn negotiated_version(&self) -> Option<&'static str> {
        self.negotiated.map(Revision::as_str)
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
        self.handle_on(bytes, catalog, None).actions
    }

    /// Handle one `POST /mcp` message: as [`Dispatcher::handle`], plus the checks of the
    /// `MCP-Protocol-Version`, `Mcp-Method` and `Mcp-Name` headers and the HTTP status
    /// the reply goes out with.
    pub fn handle_http(
        &mut self,
        bytes: &[u8],
        catalog: &dyn Catalog,
        headers: &HttpHeaders<'_>,
    ) -> HttpOutcome {
        self.handle_on(bytes, catalog, Some(headers))
    }

    fn handle_on(
        &mut self,
        bytes: &[u8],
        catalog: &dyn Catalog,
        http: Option<&HttpHeaders<'_>>,
    ) -> HttpOutcome {
        let ok = |actions| HttpOutcome {
            status: 200,
            actions,
        };
        let parse_error = |e: &dyn std::fmt::Display| {
            vec![Action::Reply(error_reply(
                &Value::Null,
                PARSE_ERROR,
                &format!("Parse error: {e}"),
            ))]
        };
        let text = match std::str::from_utf8(bytes) {
            Ok(text) => text,
            Err(e) => return ok(parse_error(&e)),
        };
        // Validated first, with the parser's nesting limit, so exactly what a `Value` would
        // refuse is a parse error; nothing is allocated.
        if let Err(e) = raw::validate(text) {
            return ok(parse_error(&e));
        }
        ok(match raw::members(text, &TOP_MEMBERS) {
            Some(top) => return self.handle_object(&top, catalog, http),
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
        })
    }

    fn handle_object(
        &mut self,
        top: &[Option<&RawValue>; TOP_MEMBERS.len()],
        catalog: &dyn Catalog,
        http: Option<&HttpHeaders<'_>>,
    ) -> HttpOutcome {
        let ok = |actions| HttpOutcome {
            status: 200,
            actions,
        };
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
            return ok(invalid("jsonrpc must be \"2.0\""));
        }
        match id {
            Some(Value::Null) => return ok(invalid("id must not be null")),
            Some(v) if is_valid_id(v) => {}
            None => {}
            Some(_) => {
                return ok(invalid(
                    "id must be a string or an integer of at most 64 bits",
                ))
            }
        }
        let method = match method.map(raw::shallow) {
            Some(Value::String(m)) => m,
            Some(_) => return ok(invalid("method must be a string")),
            None if id.is_some() && (result.is_some() || error.is_some()) => {
                // A response to something we never ask; nothing to do.
                return ok(Vec::new());
            }
            None => return ok(invalid("method is missing")),
        };
        if id.is_none() {
            return ok(self.handle_notification(&method, params));
        }
        let req = match self.classify(reply_id, &method, params, http) {
            Ok(req) => req,
            Err((status, reply)) => {
                return HttpOutcome {
                    status,
                    actions: vec![Action::Reply(reply)],
                }
            }
        };
        let actions = self.handle_request(&req, catalog);
        // 2026-07-28 transports/streamable-http "Protocol Version Header": a method the
        // server does not implement is `404 Not Found` with `-32601`.
        let status = match (&actions[..], req.revision.is_stateless(), http) {
            ([Action::Reply(text)], true, Some(_)) => match error_code(text) {
                Some(METHOD_NOT_FOUND) => 404,
                // basic/index: MissingRequiredClientCapability is `400` on HTTP.
                Some(MISSING_CLIENT_CAPABILITY) => 400,
                _ => 200,
            },
            _ => 200,
        };
        HttpOutcome { status, actions }
    }

    /// Which revision's rules serve this request, after the checks that the revision's
    /// envelope asks for (CONTRACT §20).
    ///
    /// A request is *modern* when its `_meta` names a protocol version, or when its
    /// `MCP-Protocol-Version` header names a stateless revision (2026-07-28
    /// basic/versioning "A dual-era server selects its behavior from how the client
    /// opens"); anything else is served by the legacy rules of the revision negotiated on
    /// `initialize` (or named by the header; else the default).
    fn classify<'a>(
        &self,
        id: Value,
        method: &'a str,
        params: Option<&'a RawValue>,
        http: Option<&HttpHeaders<'_>>,
    ) -> Result<Req<'a>, Refusal> {
        let meta = member(params, "_meta");
        let fields = meta.and_then(|m| {
            raw::members(m.get(), &[META_PROTOCOL_VERSION, META_CLIENT_CAPABILITIES])
        });
        let [meta_version, capabilities] = fields.unwrap_or([None, None]);
        // Naming the field at all makes the request modern; a value that is not a string
        // is then a malformed request, not a legacy one.
        let names_version = meta_version.is_some();
        let meta_version = meta_version.map(raw::shallow);
        let meta_version = meta_version.as_ref().and_then(Value::as_str);
        let header_version = http.and_then(|h| h.protocol_version).map(str::trim);
        let header_revision = header_version.and_then(Revision::parse);
        let refuse = |status: u16, code: i64, message: String| {
            Err((status, error_reply(&id, code, &message)))
        };
        let unsupported = |requested: &str| {
            let body = json!({"jsonrpc": "2.0", "id": &id, "error": {
                "code": UNSUPPORTED_PROTOCOL_VERSION,
                "message": format!("Unsupported protocol version: {requested}; \
                    this server speaks {} statelessly and {} through initialize",
                    STATELESS_VERSIONS.join(", "),
                    Revision::ALL.iter().filter(|r| !r.is_stateless())
                        .map(|r| r.as_str()).collect::<Vec<_>>().join(", ")),
                "data": {"supported": STATELESS_VERSIONS, "requested": requested},
            }});
            Err((400, body.to_string()))
        };
        let modern = names_version || header_revision.is_some_and(Revision::is_stateless);
        if !modern {
            // 2025-06-18 transports "Protocol Version Header": an invalid or unsupported
            // MCP-Protocol-Version is `400 Bad Request`.
            if let (Some(v), None) = (header_version, header_revision) {
                return unsupported(v);
            }
            let revision = header_revision
                .or(self.negotiated)
                .unwrap_or(DEFAULT_REVISION);
            return Ok(Req {
                id,
                method,
                params,
                revision,
                tasks: false,
            });
        }
        // 2026-07-28 transports/streamable-http "Protocol Version Header": the header
        // MUST match `_meta`, else `400` HeaderMismatch.
        if let (Some(h), Some(m)) = (http, meta_version) {
            match header_version {
                None => {
                    let _ = h;
                    return refuse(
                        400,
                        HEADER_MISMATCH,
                        format!(
                            "Header mismatch: the MCP-Protocol-Version header is required \
                             (the body's _meta names {m})"
                        ),
                    );
                }
                Some(v) if v != m => {
                    return refuse(
                        400,
                        HEADER_MISMATCH,
                        format!(
                            "Header mismatch: MCP-Protocol-Version header value '{v}' does \
                             not match body value '{m}'"
                        ),
                    )
                }
                Some(_) => {}
            }
        }
        // 2026-07-28 basic/index "Per-request protocol fields": a request missing a
        // required field is malformed: `-32602`, on HTTP `400`.
        let Some(version) = meta_version else {
            return refuse(
                400,
                INVALID_PARAMS,
                format!("Invalid params: _meta.\"{META_PROTOCOL_VERSION}\" (a string) is required"),
            );
        };
        let revision = match Revision::parse(version) {
            Some(r) if r.is_stateless() => r,
            // 2026-07-28 basic/versioning "Protocol Version Negotiation".
            _ => return unsupported(version),
        };
        if !capabilities.is_some_and(|c| c.get().starts_with('{')) {
            return refuse(
                400,
                INVALID_PARAMS,
                format!(
                    "Invalid params: _meta.\"{META_CLIENT_CAPABILITIES}\" (an object) is required"
                ),
            );
        }
        if let Some(h) = http {
            check_standard_headers(h, method, params).map_err(|msg| {
                (
                    400,
                    error_reply(&id, HEADER_MISMATCH, &format!("Header mismatch: {msg}")),
                )
            })?;
        }
        let extensions = member(capabilities, "extensions");
        let tasks = member(extensions, TASKS_EXTENSION).is_some_and(|t| t.get().starts_with('{'));
        Ok(Req {
            id,
            method,
            params,
            revision,
            tasks,
        })
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

    fn handle_request(&mut self, req: &Req<'_>, catalog: &dyn Catalog) -> Vec<Action> {
        let (id, params) = (&req.id, req.params);
        let stateless = req.revision.is_stateless();
        let not_found = |other: &str| {
            vec![Action::Reply(error_reply(
                id,
                METHOD_NOT_FOUND,
                &format!("Method not found: {other}"),
            ))]
        };
        let result = match req.method {
            // 2026-07-28 changelog 2: the handshake is gone; 5: so is `ping`.
            "initialize" | "ping" if stateless => return not_found(req.method),
            "initialize" => {
                let requested = member(params, "protocolVersion").map(raw::shallow);
                let requested = requested.as_ref().and_then(Value::as_str);
                let revision = negotiate(requested);
                self.negotiated = Some(revision);
                json!({
                    "protocolVersion": revision.as_str(),
                    "capabilities": {"tools": {"listChanged": false}},
                    "serverInfo": server_info(),
                    "instructions": catalog.instructions(),
                })
            }
            // 2026-07-28 server/discover: servers MUST implement it.
            "server/discover" if stateless => json!({
                "supportedVersions": STATELESS_VERSIONS,
                "capabilities": modern_capabilities(),
                "serverInfo": server_info(),
                "instructions": catalog.instructions(),
            }),
            "ping" => json!({}),
            "tools/list" => return vec![Action::Reply(self.tools_list(req, catalog))],
            "resources/list" => json!({"resources": []}),
            "resources/templates/list" => json!({"resourceTemplates": []}),
            "prompts/list" => json!({"prompts": []}),
            "tools/call" => return self.tools_call(req, catalog),
            "tasks/get" | "tasks/update" | "tasks/cancel" if stateless => {
                return tasks::request(req, catalog)
            }
            other => return not_found(other),
        };
        vec![Action::Reply(result_reply(
            id,
            frame_result(req.revision, req.method, result),
        ))]
    }

    /// The `tools/list` reply: from the bytes built last time while the catalogue's key
    /// and the request's revision are the same, else built (and kept when there is a key).
    fn tools_list(&mut self, req: &Req<'_>, catalog: &dyn Catalog) -> String {
        let key = catalog.list_key();
        let fresh = |c: &&ListCache| Some(c.key) == key && c.revision == req.revision;
        if let Some(cached) = self.tools_list.as_ref().filter(fresh) {
            return encoded_result_reply(&req.id, &cached.result);
        }
        let result = frame_result(req.revision, req.method, json!({"tools": catalog.list()}));
        let result = result.to_string();
        let reply = encoded_result_reply(&req.id, &result);
        self.tools_list = key.map(|key| ListCache {
            key,
            revision: req.revision,
            result,
        });
        reply
    }

    fn tools_call(&mut self, req: &Req<'_>, catalog: &dyn Catalog) -> Vec<Action> {
        let (id, params) = (&req.id, req.params);
        let form = Form {
            revision: req.revision,
            task: None,
        };
        let refuse = |tool: &str, outcome: Outcome, msg: String| {
            vec![
                Action::Reply(error_reply(id, INVALID_PARAMS, &msg)),
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
            Resolution::Visible(Route::Local) if req.tasks => match catalog.tasks() {
                // Tasks extension, "Capability Negotiation": the server decides per request;
                // handnode answers every `bash` call of a negotiating client as a task.
                Some(t) if t.call == name => vec![Action::Call {
                    id: id.clone(),
                    name: t.start.to_string(),
                    route: Route::Local,
                    arguments: tasks::start_arguments(arguments),
                    form: Form {
                        task: Some(TaskStep::Create),
                        ..form
                    },
                }],
                _ => vec![Action::Call {
                    id: id.clone(),
                    name,
                    route: Route::Local,
                    arguments,
                    form,
                }],
            },
            Resolution::Visible(route) => vec![Action::Call {
                id: id.clone(),
                name,
                route,
                arguments,
                form,
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

/// The revision an `initialize` asking for `requested` gets: that one if it is a legacy
/// revision we speak; the newest legacy one for a version newer than all of them (a
/// modern client that opens the legacy way); else the default, which the pod runtime
/// speaks.
fn negotiate(requested: Option<&str>) -> Revision {
    match requested.and_then(Revision::parse) {
        Some(r) if !r.is_stateless() => r,
        _ if requested.is_some_and(|v| v > LATEST_LEGACY.as_str()) => LATEST_LEGACY,
        _ => DEFAULT_REVISION,
    }
}

fn server_info() -> Value {
    json!({"name": "handnode", "version": env!("CARGO_PKG_VERSION")})
}

/// What `server/discover` advertises. `resources` and `prompts` are declared because
/// their lists are served (empty): 2026-07-28 server/discover, capabilities match what
/// the server honors.
fn modern_capabilities() -> Value {
    json!({
        "tools": {"listChanged": false},
        "resources": {},
        "prompts": {},
        "extensions": {TASKS_EXTENSION: {}},
    })
}

/// The methods whose results are cacheable (2026-07-28 changelog minor 5, SEP-2549).
const CACHEABLE: [&str; 5] = [
    "server/discover",
    "tools/list",
    "resources/list",
    "resources/templates/list",
    "prompts/list",
];

mod tasks;

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

mod raw;

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
            let (text, _) =
                tool_reply_at(Revision::R2026_07_28, &json!(1), output.clone(), 1 << 20);
            let v: Value = serde_json::from_str(&text).unwrap_or_else(|e| panic!("{e}: {text}"));
            assert_eq!(v["result"]["resultType"], "complete", "{output:?}: {v}");
            assert_eq!(
                v["result"]["_meta"][META_SERVER_INFO]["name"], "handnode",
                "{output:?}: {v}"
            );
            let (text, _) =
                tool_reply_at(Revision::R2025_06_18, &json!(1), output.clone(), 1 << 20);
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
            let out =
                Dispatcher::new().handle_http(msg.as_bytes(), &Fake(Profile::Owner), &headers);
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
        v["params"]["_meta"][META_CLIENT_CAPABILITIES] =
            json!({"extensions": {TASKS_EXTENSION: {}}});
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
        let bash =
            json!({"name": "bash", "arguments": {"command": "make", "max_output_bytes": 10}});
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
        let other =
            single_reply(&d.handle(br#"{"jsonrpc":"2.0","id":"x","method":"tools/list"}"#, &c));
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
}
