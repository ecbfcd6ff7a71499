//! `GET /attach/{id}/screen`: the picture of a grant's own display (§19) for the console's
//! Activity view, which otherwise shows the owner's screen (the `screenshot` tool on
//! `/mcp`). Taken on that display's own thread, as the grant's `screenshot` is, and
//! audited as the owner's `screenshot` call; never starts a display that is not running.

use super::*;
use crate::tools::GrantNote;

/// What the thumbnail asks of the screenshot tool (as the console's `/mcp` thumbnail).
fn thumb_args() -> Value {
    json!({"scale": 0.5, "format": "jpeg", "max_bytes": 512 * 1024})
}

pub(super) fn get(state: &Arc<AdminState>, request: Request, id: &str, principal: String) {
    let Some(view) = state.registry.get(id) else {
        return respond(request, error_response(404, "no such grant"));
    };
    if view["display"] != "own" {
        return respond(
            request,
            error_response(
                404,
                "this grant uses the box's display (it has no \"display\":\"own\"): the \
                 owner's screen is the screenshot tool on /mcp",
            ),
        );
    }
    let running = state
        .services
        .host
        .own_displays
        .get(id)
        .is_some_and(|d| d.is_running());
    if !running {
        return respond(
            request,
            error_response(
                409,
                "this grant's own display is not running: it starts on the grant's first \
                 graphical call",
            ),
        );
    }
    let slot = match state.mcp_calls.try_acquire() {
        Ok(slot) => slot,
        Err(busy) => return respond(request, too_busy(&busy)),
    };
    let (tx, rx) = crossbeam_channel::bounded::<ToolOutput>(1);
    let done = Completion::new(move |out| {
        let _ = tx.send(out);
    });
    let own_policy = match (*ToolPolicy::owner()).clone().with_own_display(true) {
        Ok(p) => Arc::new(p),
        Err(why) => return respond(request, error_response(500, &why)),
    };
    let ctl = Arc::new(crate::pool::CallCtl::new());
    let cx = CallContext {
        policy: own_policy,
        // Only the id matters: it names the own display the call uses.
        grant: Some(GrantNote {
            id: id.to_string(),
            session: view["session"].as_str().unwrap_or_default().to_string(),
            expires_at: 0,
            approve: Vec::new(),
            approval_wait: Duration::ZERO,
        }),
        limits: CallLimits::LOCAL_HTTP,
        ctl: Arc::clone(&ctl),
        host: Arc::clone(&state.services.host),
        principal: principal.clone(),
    };
    let started = Instant::now();
    crate::tools::display::screenshot(thumb_args(), cx, done);
    let state = Arc::clone(state);
    let wait = state.services.host.config.display_helper_timeout * 2 + MCP_RESULT_SLACK;
    let spawned = slot.spawn(move || {
        let output = rx.recv_timeout(wait).unwrap_or_else(|_| {
            ctl.cancel();
            ToolOutput::tool_error("the screenshot did not finish in time and was stopped")
        });
        let (status, body, outcome) = match output {
            ToolOutput::Result(v) => {
                let outcome = if v["isError"] == true {
                    Outcome::ToolError
                } else {
                    Outcome::Ok
                };
                (200, v, outcome)
            }
            ToolOutput::InvalidParams(why) => (500, json!({"error": why}), Outcome::RpcError),
            _ => (
                500,
                json!({"error": "unexpected answer"}),
                Outcome::RpcError,
            ),
        };
        state.metrics.tool_call("screenshot", outcome);
        state.audit.record(Record::ToolCall {
            grant_id: None,
            principal,
            session: None,
            tool: "screenshot".into(),
            outcome,
            duration_ms: started.elapsed().as_millis() as u64,
            args: None,
        });
        respond(request, json_response(status, &body));
    });
    if let Err((e, _work)) = spawned {
        warn!("/attach/{{id}}/screen: could not start a responder thread: {e}");
    }
}
