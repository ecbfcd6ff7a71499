//! The in-flight table of one MCP connection (a grant socket or an `/mcp` session) and the
//! shared services a call is started with. Both transports use the same rules: a bounded
//! number of calls in flight, cancellation by request id, and replies matched to the call
//! that asked for them (a stale or cancelled call's reply is dropped). [`Calls::apply`] is
//! the one place the dispatcher's actions become in-flight calls, for both transports; what
//! really differs between them is each one's [`Transport`].

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Instant;

use serde_json::Value;

use crate::faults::{self, Site};
use crate::journal::Journal;
use crate::pool::{CallCtl, Completion, Pool};
use crate::tools::{self, CallContext, ToolHost, UpstreamSource};
use crate::wire::mcp::{Action, Form, Outcome, Route, ToolOutput, SERVER_ERROR};

/// Everything a connection needs to run tool calls. One per daemon.
#[derive(Debug)]
pub struct Services {
    pub pool: Pool,
    pub host: Arc<ToolHost>,
    pub upstream: Option<Arc<dyn UpstreamSource>>,
    /// The throwaway browsers of `browser` grants (`--browser-command`).
    pub browsers: Option<Arc<crate::browser::Browsers>>,
    /// Every call in flight, for the lender's `GET /calls` and `DELETE /calls/{id}`.
    pub running: Arc<crate::grants::running::Running>,
    /// The lender's halt (§22): while on, no grant dials and every call is refused.
    pub halt: Arc<crate::grants::halt::Halt>,
    /// What the agent did, per grant and per day of the owner's `/mcp` (§22).
    pub journal: Arc<crate::journal::Journal>,
}

impl Services {
    /// Track a call from the moment its transport has it: listed in [`Self::running`] until
    /// its output is delivered (so the lender can stop it), and journalled when it is (with
    /// a thumbnail of the screen after a call that changes one). Both transports call this
    /// before they start or hold the call; the completion it returns goes to the call.
    pub fn track(
        self: &Arc<Self>,
        grant: Option<&str>,
        route: &Route,
        name: &str,
        arguments: &Value,
        cx: &CallContext,
        done: Completion,
    ) -> Completion {
        // Admitted now (§23): a call that drives its own display is checked against this
        // wheel epoch when it reaches the display (its own, or the box's).
        if matches!(route, Route::Local) && tools::display::wheel::drives(name) {
            cx.ctl
                .admit_wheel(tools::display::boxview::call_wheel(cx).epoch());
        }
        let capture = self.screen_capture(route, name, arguments, cx);
        let done = self
            .journal
            .track(grant, name, arguments, &cx.ctl, capture, done);
        self.running.track(grant, name, arguments, &cx.ctl, done)
    }

    /// How to take the journal's thumbnail after `name`, if it changes a screen: the
    /// call's display for a local tool, the page for a browser tool.
    fn screen_capture(
        self: &Arc<Self>,
        route: &Route,
        name: &str,
        arguments: &Value,
        cx: &CallContext,
    ) -> Option<crate::journal::Capture> {
        use crate::journal::{Thumb, THUMBNAIL_EDGE};
        let mut cx = cx.clone();
        // Its own handle: the lender stopping the call must not stop its thumbnail.
        cx.ctl = CallCtl::new();
        match route {
            Route::Local => {
                if !tools::find(name)?.changes_screen {
                    return None;
                }
                let display = arguments
                    .get("display")
                    .and_then(Value::as_u64)
                    .unwrap_or(0) as usize;
                Some(Box::new(move |deliver| {
                    tools::display::thumbnail(cx, display, THUMBNAIL_EDGE, move |made| {
                        deliver(made.map(|(jpeg, width, height)| Thumb {
                            jpeg,
                            width,
                            height,
                        }))
                    })
                }))
            }
            Route::Browser | Route::Upstream(_) => {
                if !crate::profiles::BROWSER_SCREEN_TOOLS.contains(&name) {
                    return None;
                }
                let services = Arc::clone(self);
                let route = route.clone();
                Some(Box::new(move |deliver| {
                    let done = Completion::new(move |output| deliver(page_thumbnail(&output)));
                    services.start(
                        route,
                        "browser_take_screenshot".into(),
                        serde_json::json!({"type": "png"}),
                        cx,
                        done,
                    );
                }))
            }
        }
    }

    /// Start a call on its route. Never blocks: a local tool that can answer from caches
    /// answers here (`tools::answer_inline`), other local tools go to the pool (a full
    /// queue answers `done` with "busy"), upstream calls to the upstream's own thread,
    /// browser-tier calls to the browser supervisor.
    pub fn start(
        &self,
        route: Route,
        name: String,
        arguments: Value,
        cx: CallContext,
        done: Completion,
    ) {
        // Halted (§22): nothing starts, on the owner's /mcp neither.
        if self.halt.is_halted() {
            return done.complete(ToolOutput::tool_error(self.halt.answer()));
        }
        if let Err(why) = url_allowed(&route, &cx, &name, &arguments) {
            return done.complete(ToolOutput::tool_error(why));
        }
        match route {
            Route::Local => {
                // The inline answer runs on the caller's thread (a grant thread, an admin
                // handler): a panic in it must end this call, not that thread.
                let inline = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                    #[cfg(test)]
                    crate::faults::hooks::tool(&arguments, crate::faults::hooks::INLINE);
                    tools::answer_inline(&name, &arguments, &cx)
                }));
                match inline {
                    Ok(Some(output)) => return done.complete(output),
                    Ok(None) => {}
                    Err(payload) => {
                        faults::caught(Site::Tool, &name, payload.as_ref());
                        return done.complete(ToolOutput::tool_error(faults::TOOL_PANIC_MESSAGE));
                    }
                }
                let _ = self.pool.submit_call(
                    move |done| {
                        #[cfg(test)]
                        crate::faults::hooks::tool(&arguments, crate::faults::hooks::WORKER);
                        tools::start_local(&name, arguments, cx, done)
                    },
                    done,
                );
            }
            Route::Upstream(index) => match &self.upstream {
                Some(up) => up.call(index, &name, arguments, cx.ctl, done),
                None => done.complete(ToolOutput::tool_error(
                    "no upstream is configured for this tool",
                )),
            },
            Route::Browser => match (&self.browsers, &cx.grant) {
                (Some(browsers), Some(grant)) => {
                    let timeout = std::time::Duration::from_secs(cx.limits.max_run_secs);
                    browsers.call(&grant.id, &name, arguments, cx.ctl, timeout, done)
                }
                _ => done.complete(crate::wire::mcp::ToolOutput::tool_error(
                    "no browser tier is configured for this call",
                )),
            },
        }
    }
}

/// The journal's thumbnail from a browser's screenshot: its PNG, scaled to fit.
fn page_thumbnail(output: &ToolOutput) -> Result<crate::journal::Thumb, String> {
    use base64::Engine as _;
    let ToolOutput::Result(v) = output else {
        return Err("the browser took no screenshot".into());
    };
    let data = v["content"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|b| b["type"] == "image" && b["mimeType"] == "image/png")
        .and_then(|b| b["data"].as_str())
        .ok_or("the browser's screenshot came without an image")?;
    let png = base64::engine::general_purpose::STANDARD
        .decode(data)
        .map_err(|e| format!("the browser's screenshot is not base64: {e}"))?;
    let (jpeg, width, height) =
        tools::display::jpeg_thumbnail(&png, crate::journal::THUMBNAIL_EDGE)?;
    Ok(crate::journal::Thumb {
        jpeg,
        width,
        height,
    })
}

/// Contract §14: under every grant but `owner`, a browser tool (the per-grant browser's
/// and the shared upstream's alike) may open only `http(s)` pages and `about:blank`. The
/// check runs before the call is handed anywhere (and before a call is held for approval:
/// nobody is asked about a call that would be refused), so a refused URL is never forwarded.
pub fn url_allowed(
    route: &Route,
    cx: &CallContext,
    name: &str,
    arguments: &Value,
) -> Result<(), String> {
    if matches!(route, Route::Local) || cx.policy.profile() == crate::profiles::Profile::Owner {
        return Ok(());
    }
    crate::rules::browser_url::check_arguments(
        crate::profiles::browser_url_fields(name),
        arguments,
        &cx.host.config.admin_origin,
    )
}

/// One call in flight.
#[derive(Debug)]
pub struct InFlight {
    /// Distinguishes this call from an earlier one that reused the same request id.
    pub seq: u64,
    pub tool: String,
    pub ctl: Arc<CallCtl>,
    pub started: Instant,
    /// The call's arguments, kept only when `--audit-args` asks for them in the audit log.
    pub arguments: Option<Value>,
    /// How its reply is put on the wire: for a reply made here (a halt, §22), not by its tool.
    pub form: Option<Form>,
}

/// The calls in flight on one connection, keyed by JSON-RPC request id.
#[derive(Debug)]
pub struct Calls {
    max: usize,
    next_seq: u64,
    entries: HashMap<String, InFlight>,
}

/// Why a call could not begin; `message` is the JSON-RPC error to send.
#[derive(Debug, PartialEq, Eq)]
pub struct Refusal {
    pub code: i64,
    pub message: String,
}

/// A call that has its place in the table: what its transport starts.
#[derive(Debug)]
pub struct Begun {
    pub id: Value,
    pub name: String,
    pub route: Route,
    pub arguments: Value,
    pub form: Form,
    /// Its entry's sequence number, for [`Calls::finish`].
    pub seq: u64,
    pub ctl: Arc<CallCtl>,
}

/// What one MCP transport (a grant's socket, the owner's `/mcp`) does with the
/// dispatcher's actions once [`Calls::apply`] has done the bookkeeping both share. Only
/// what really differs is here: where replies go, how a call starts, how a cancel or a
/// refusal is recorded.
pub trait Transport {
    /// The grant whose journal a refused call is kept in; `None` for the owner's `/mcp`.
    fn grant(&self) -> Option<&str>;
    fn journal(&self) -> &Journal;
    /// Whether each call keeps its arguments in its entry, for an audit record made
    /// without its tool (`--audit-args`).
    fn keeps_arguments(&self) -> bool {
        false
    }
    /// Send a JSON-RPC message: the dispatcher's own, or a call's refusal.
    fn reply(&mut self, text: String);
    /// Start a call that has begun; its reply is matched by `seq` through
    /// [`Calls::finish`].
    fn start(&mut self, call: Begun);
    /// The client cancelled this call: it is out of the table and its handle cancelled.
    fn cancelled(&mut self, id: &Value, call: InFlight);
    /// The dispatcher answered a `tools/call` itself without running anything; the journal
    /// has it already: audit and count it.
    fn refused(&mut self, tool: String, outcome: Outcome);
}

fn key(id: &Value) -> String {
    id.to_string()
}

impl Calls {
    pub fn new(max: usize) -> Self {
        Calls {
            max,
            next_seq: 0,
            entries: HashMap::new(),
        }
    }

    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Apply the dispatcher's actions for one inbound message: a call begins here or is
    /// refused with the bound's (or the reused id's) error reply, a cancel takes its call
    /// out, a refused tool is journalled; the rest is `transport`'s.
    pub fn apply(&mut self, actions: Vec<Action>, transport: &mut impl Transport) {
        for action in actions {
            match action {
                Action::Reply(text) => transport.reply(text),
                Action::Call {
                    id,
                    name,
                    route,
                    arguments,
                    form,
                } => {
                    let (seq, ctl) = match self.begin(&id, &name) {
                        Ok(begun) => begun,
                        Err(refusal) => {
                            transport.reply(crate::wire::mcp::error_reply(
                                &id,
                                refusal.code,
                                &refusal.message,
                            ));
                            continue;
                        }
                    };
                    self.keep_form(&id, form);
                    if transport.keeps_arguments() {
                        self.keep_arguments(&id, arguments.clone());
                    }
                    transport.start(Begun {
                        id,
                        name,
                        route,
                        arguments,
                        form,
                        seq,
                        ctl,
                    });
                }
                Action::Cancel { id } => {
                    if let Some(call) = self.cancel(&id) {
                        transport.cancelled(&id, call);
                    }
                }
                Action::Refused { tool, outcome } => {
                    transport
                        .journal()
                        .refused(transport.grant(), &tool, outcome);
                    transport.refused(tool, outcome);
                }
            }
        }
    }

    /// Register a call, or refuse it when the connection already has `max` in flight or
    /// the id is already in use.
    fn begin(&mut self, id: &Value, tool: &str) -> Result<(u64, Arc<CallCtl>), Refusal> {
        if self.entries.len() >= self.max {
            return Err(Refusal {
                code: SERVER_ERROR,
                message: format!("too many requests in flight ({})", self.max),
            });
        }
        let k = key(id);
        if self.entries.contains_key(&k) {
            return Err(Refusal {
                code: crate::wire::mcp::INVALID_REQUEST,
                message: format!("Invalid Request: request id {k} is already in flight"),
            });
        }
        self.next_seq += 1;
        let ctl = CallCtl::new();
        self.entries.insert(
            k,
            InFlight {
                seq: self.next_seq,
                tool: tool.to_string(),
                ctl: Arc::clone(&ctl),
                started: Instant::now(),
                arguments: None,
                form: None,
            },
        );
        Ok((self.next_seq, ctl))
    }

    /// Keep a call's arguments for its audit record (`--audit-args`).
    fn keep_arguments(&mut self, id: &Value, arguments: Value) {
        if let Some(entry) = self.entries.get_mut(&key(id)) {
            entry.arguments = Some(arguments);
        }
    }

    /// Keep how a call's reply is put on the wire, for a reply made without its tool.
    fn keep_form(&mut self, id: &Value, form: Form) {
        if let Some(entry) = self.entries.get_mut(&key(id)) {
            entry.form = Some(form);
        }
    }

    /// Every call with its request id, taken out of the table and cancelled: a halt
    /// answers each itself (§22). Their tools' late replies find no entry and are dropped.
    pub fn take_all(&mut self) -> Vec<(Value, InFlight)> {
        let taken: Vec<(Value, InFlight)> = self
            .entries
            .drain()
            .map(|(k, e)| (serde_json::from_str(&k).unwrap_or(Value::Null), e))
            .collect();
        for (_, entry) in &taken {
            entry.ctl.cancel();
        }
        taken
    }

    /// The call's output arrived: take its entry if it is still the live one.
    pub fn finish(&mut self, id: &Value, seq: u64) -> Option<InFlight> {
        let k = key(id);
        match self.entries.get(&k) {
            Some(entry) if entry.seq == seq => self.entries.remove(&k),
            _ => None,
        }
    }

    /// `notifications/cancelled`: stop the call; its reply will be dropped.
    pub fn cancel(&mut self, id: &Value) -> Option<InFlight> {
        let entry = self.entries.remove(&key(id))?;
        entry.ctl.cancel();
        Some(entry)
    }

    /// Stop tracking every call without cancelling it: for a one-shot `/mcp` request
    /// whose calls are answered on the same HTTP exchange and cannot be cancelled later.
    pub fn release_all(&mut self) {
        self.entries.clear();
    }

    /// The connection is gone: stop everything it started.
    pub fn cancel_all(&mut self) -> Vec<InFlight> {
        let drained: Vec<InFlight> = self.entries.drain().map(|(_, e)| e).collect();
        for entry in &drained {
            entry.ctl.cancel();
        }
        drained
    }
}

impl Drop for Calls {
    fn drop(&mut self) {
        self.cancel_all();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn the_bound_plus_one_is_refused() {
        let mut calls = Calls::new(64);
        for i in 0..64 {
            calls.begin(&json!(i), "bash").unwrap();
        }
        let refusal = calls.begin(&json!(64), "bash").unwrap_err();
        assert_eq!(refusal.code, SERVER_ERROR);
        assert_eq!(refusal.message, "too many requests in flight (64)");
        let (seq, _) = calls.finish_first_for_test();
        assert!(seq > 0);
        calls.begin(&json!(64), "bash").unwrap();
    }

    impl Calls {
        fn finish_first_for_test(&mut self) -> (u64, ()) {
            let (k, seq) = self
                .entries
                .iter()
                .map(|(k, e)| (k.clone(), e.seq))
                .next()
                .unwrap();
            let id: Value = serde_json::from_str(&k).unwrap();
            assert!(self.finish(&id, seq).is_some());
            (seq, ())
        }
    }

    #[test]
    fn duplicate_ids_are_refused_and_stale_seqs_dropped() {
        let mut calls = Calls::new(4);
        let (seq1, _) = calls.begin(&json!("a"), "bash").unwrap();
        assert_eq!(
            calls.begin(&json!("a"), "bash").unwrap_err().code,
            crate::wire::mcp::INVALID_REQUEST
        );
        // "1" and 1 are different ids.
        calls.begin(&json!(1), "bash").unwrap();
        calls.begin(&json!("1"), "bash").unwrap();
        let cancelled = calls.cancel(&json!("a")).unwrap();
        assert!(cancelled.ctl.is_cancelled());
        let (seq2, _) = calls.begin(&json!("a"), "bash").unwrap();
        assert!(
            calls.finish(&json!("a"), seq1).is_none(),
            "the cancelled call's reply is dropped"
        );
        assert!(calls.finish(&json!("a"), seq2).is_some());
    }

    /// What [`Calls::apply`] asked of a transport, in order.
    #[derive(Debug, PartialEq)]
    enum Seen {
        Reply(String),
        Start(Value, String),
        Cancelled(Value, String),
        Refused(String, Outcome),
    }

    struct Recorder {
        journal: Arc<Journal>,
        seen: Vec<Seen>,
        ctls: Vec<Arc<CallCtl>>,
    }

    const GRANT: &str = "0b9d3c1e-6f4a-4c3e-9a51-2f0e8d7c6b5a";

    impl Transport for Recorder {
        fn grant(&self) -> Option<&str> {
            Some(GRANT)
        }
        fn journal(&self) -> &Journal {
            &self.journal
        }
        fn reply(&mut self, text: String) {
            self.seen.push(Seen::Reply(text));
        }
        fn start(&mut self, call: Begun) {
            self.ctls.push(call.ctl);
            self.seen.push(Seen::Start(call.id, call.name));
        }
        fn cancelled(&mut self, id: &Value, call: InFlight) {
            assert!(
                call.ctl.is_cancelled(),
                "a cancelled call's handle is cancelled"
            );
            self.seen.push(Seen::Cancelled(id.clone(), call.tool));
        }
        fn refused(&mut self, tool: String, outcome: Outcome) {
            self.seen.push(Seen::Refused(tool, outcome));
        }
    }

    fn call(id: Value, name: &str) -> Action {
        Action::Call {
            id,
            name: name.into(),
            route: Route::Local,
            arguments: json!({"command": "true"}),
            form: Form::DEFAULT,
        }
    }

    #[test]
    fn actions_become_calls_replies_cancels_and_records_in_one_place() {
        use crate::wire::mcp::{error_reply, INVALID_REQUEST};
        let dir = std::env::temp_dir().join(format!("hn-calls-apply-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let journal = Journal::start(crate::journal::Settings {
            dir: Some(dir.join("journal")),
            max_bytes: crate::journal::DEFAULT_MAX_BYTES,
            keep: std::time::Duration::from_secs(86_400),
            sweep_every: std::time::Duration::from_secs(3600),
        })
        .unwrap();
        let refused = || Action::Refused {
            tool: "not_lent".into(),
            outcome: Outcome::Denied,
        };
        // (what, the bound, the actions, what the transport sees, calls left in flight)
        type Case = (&'static str, usize, Vec<Action>, Vec<Seen>, usize);
        let cases: Vec<Case> = vec![
            (
                "a reply passes through",
                2,
                vec![Action::Reply("x".into())],
                vec![Seen::Reply("x".into())],
                0,
            ),
            (
                "a call beyond the bound gets the bound's error reply",
                2,
                vec![
                    call(json!(1), "bash"),
                    call(json!(2), "bash"),
                    call(json!(3), "bash"),
                ],
                vec![
                    Seen::Start(json!(1), "bash".into()),
                    Seen::Start(json!(2), "bash".into()),
                    Seen::Reply(error_reply(
                        &json!(3),
                        SERVER_ERROR,
                        "too many requests in flight (2)",
                    )),
                ],
                2,
            ),
            (
                "an id in flight is refused",
                2,
                vec![call(json!("a"), "bash"), call(json!("a"), "sys_info")],
                vec![
                    Seen::Start(json!("a"), "bash".into()),
                    Seen::Reply(error_reply(
                        &json!("a"),
                        INVALID_REQUEST,
                        "Invalid Request: request id \"a\" is already in flight",
                    )),
                ],
                1,
            ),
            (
                "a cancel of an unknown id does nothing",
                2,
                vec![call(json!(1), "bash"), Action::Cancel { id: json!(9) }],
                vec![Seen::Start(json!(1), "bash".into())],
                1,
            ),
            (
                "a cancel takes its call out",
                2,
                vec![call(json!(1), "bash"), Action::Cancel { id: json!(1) }],
                vec![
                    Seen::Start(json!(1), "bash".into()),
                    Seen::Cancelled(json!(1), "bash".into()),
                ],
                0,
            ),
            (
                "a refused tool is recorded once",
                2,
                vec![refused()],
                vec![Seen::Refused("not_lent".into(), Outcome::Denied)],
                0,
            ),
        ];
        for (what, max, actions, want, in_flight) in cases {
            let mut calls = Calls::new(max);
            let mut transport = Recorder {
                journal: Arc::clone(&journal),
                seen: Vec::new(),
                ctls: Vec::new(),
            };
            calls.apply(actions, &mut transport);
            assert_eq!(transport.seen, want, "{what}");
            assert_eq!(calls.len(), in_flight, "{what}: calls in flight");
            let cancels = want
                .iter()
                .filter(|s| matches!(s, Seen::Cancelled(..)))
                .count();
            let stopped = transport.ctls.iter().filter(|c| c.is_cancelled()).count();
            assert_eq!(stopped, cancels, "{what}: only a cancel stops a call");
        }
        // Journalled once, by `apply`, not by the transport.
        assert!(journal.flush(std::time::Duration::from_secs(10)));
        let (body, _) =
            crate::journal::store::read_since(&dir.join("journal"), GRANT, 0, usize::MAX, true)
                .unwrap()
                .expect("the grant's journal exists");
        let records: Vec<Value> = body
            .split(|b| *b == b'\n')
            .filter(|l| !l.is_empty())
            .map(|l| serde_json::from_slice(l).unwrap())
            .collect();
        assert_eq!(records.len(), 1, "{records:?}");
        assert_eq!(records[0]["tool"], "not_lent");
        assert_eq!(records[0]["outcome"], "denied");
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn arguments_are_kept_only_when_the_transport_audits_them() {
        struct Keeper(Arc<Journal>, bool);
        impl Transport for Keeper {
            fn grant(&self) -> Option<&str> {
                None
            }
            fn journal(&self) -> &Journal {
                &self.0
            }
            fn keeps_arguments(&self) -> bool {
                self.1
            }
            fn reply(&mut self, text: String) {
                panic!("no reply expected: {text}");
            }
            fn start(&mut self, _: Begun) {}
            fn cancelled(&mut self, _: &Value, _: InFlight) {}
            fn refused(&mut self, _: String, _: Outcome) {}
        }
        for keeps in [false, true] {
            let mut calls = Calls::new(2);
            calls.apply(
                vec![call(json!(1), "bash")],
                &mut Keeper(Journal::disabled(), keeps),
            );
            let (_, entry) = calls.take_all().pop().unwrap();
            assert_eq!(entry.form, Some(Form::DEFAULT));
            assert_eq!(entry.arguments.is_some(), keeps);
        }
    }

    #[test]
    fn cancel_all_cancels_every_call() {
        let mut calls = Calls::new(4);
        let (_, a) = calls.begin(&json!(1), "bash").unwrap();
        let (_, b) = calls.begin(&json!(2), "sys_info").unwrap();
        assert_eq!(calls.cancel_all().len(), 2);
        assert!(a.is_cancelled() && b.is_cancelled());
        assert!(calls.is_empty());
    }
}
