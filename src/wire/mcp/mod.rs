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
mod tests;
