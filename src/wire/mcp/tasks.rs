//! The tasks extension (`io.modelcontextprotocol/tasks`, SEP-2663, for 2026-07-28) mapped
//! onto jobs (CONTRACT §9): the `taskId` is the `job_id`.

use serde_json::{json, Map, Value};

use super::{
    error_reply, frame_result, member, raw, result_reply, Action, Catalog, Form, Outcome, Req,
    Route, TaskStep, ToolOutput, INVALID_PARAMS, MISSING_CLIENT_CAPABILITY, TASKS_EXTENSION,
};

/// How often a client is asked to poll (Task `pollIntervalMs`).
pub(super) const POLL_INTERVAL_MS: u64 = 1000;
/// The most of each stream a finished task's result carries, as `bash`'s default
/// `max_output_bytes`.
pub(super) const RESULT_BYTES: u64 = 65_536;
/// `bash`'s default `timeout_secs`, which a task keeps.
const BASH_TIMEOUT_SECS: u64 = 60;

/// `bash` arguments as the job tool's: the same command, cwd, env and timeout (60 s
/// when not given, as for `bash`); `max_output_bytes` is a read's business.
pub(super) fn start_arguments(arguments: Value) -> Value {
    let Value::Object(mut map) = arguments else {
        return arguments;
    };
    map.remove("max_output_bytes");
    map.entry("timeout_secs")
        .or_insert_with(|| json!(BASH_TIMEOUT_SECS));
    Value::Object(map)
}

/// `tasks/get`, `tasks/update`, `tasks/cancel`.
pub(super) fn request(req: &Req<'_>, catalog: &dyn Catalog) -> Vec<Action> {
    let id = &req.id;
    // Tasks extension, "Capability Negotiation": without the extension on the
    // request, the methods are refused with MissingRequiredClientCapability.
    if !req.tasks {
        let body = json!({"jsonrpc": "2.0", "id": id, "error": {
            "code": MISSING_CLIENT_CAPABILITY,
            "message": format!("Missing required client capability: {} needs the \
                {TASKS_EXTENSION} extension in _meta clientCapabilities.extensions",
                req.method),
            "data": {"requiredCapabilities": {"extensions": {TASKS_EXTENSION: {}}}},
        }});
        return vec![Action::Reply(body.to_string())];
    }
    let task_id = member(req.params, "taskId").map(raw::shallow);
    let Some(Value::String(task_id)) = task_id else {
        return vec![Action::Reply(error_reply(
            id,
            INVALID_PARAMS,
            "Invalid params: taskId (a string) is required",
        ))];
    };
    let Some(tools) = catalog.tasks() else {
        return vec![Action::Reply(unknown_task(id, &task_id))];
    };
    let (step, name, arguments) = match req.method {
        "tasks/get" => (
            TaskStep::Get,
            tools.poll,
            json!({"job_id": task_id, "max_bytes": RESULT_BYTES}),
        ),
        "tasks/update" => (
            TaskStep::Update,
            tools.poll,
            json!({"job_id": task_id, "max_bytes": 1}),
        ),
        _ => (TaskStep::Cancel, tools.cancel, json!({"job_id": task_id})),
    };
    vec![Action::Call {
        id: id.clone(),
        name: name.to_string(),
        route: Route::Local,
        arguments,
        form: Form {
            revision: req.revision,
            task: Some(step),
        },
    }]
}

fn unknown_task(id: &Value, task_id: &str) -> String {
    error_reply(
        id,
        INVALID_PARAMS,
        &format!("Invalid params: unknown taskId: {task_id}"),
    )
}

/// A job tool's output as the answer to a task step.
pub(super) fn reply(
    step: TaskStep,
    revision: super::Revision,
    id: &Value,
    output: ToolOutput,
    max_bytes: usize,
) -> (String, Outcome) {
    let output = output.produced();
    let outcome = output.outcome();
    let result = match output {
        ToolOutput::Result(v) => v,
        ToolOutput::Encoded { json, .. } => serde_json::from_str(&json).unwrap_or_default(),
        ToolOutput::Json { json, .. } => serde_json::from_str(&json).unwrap_or_default(),
        // Anything else (a refusal, a bad argument): what the call itself would answer.
        other => return super::tool_reply_at(revision, id, other, max_bytes),
    };
    let failed = result.get("isError") == Some(&Value::Bool(true));
    let facts = &result["structuredContent"];
    let task_id = facts["job_id"].as_str().unwrap_or_default();
    let text = match step {
        // The job did not start (limits, bad arguments): the call's own tool error.
        TaskStep::Create if failed || task_id.is_empty() => {
            return super::tool_reply_at(revision, id, ToolOutput::Result(result), max_bytes)
        }
        // Unknown (or another grant's) job: tasks/get SHOULD be a JSON-RPC error.
        _ if failed || task_id.is_empty() => {
            let id_text = result["content"][0]["text"]
                .as_str()
                .unwrap_or("unknown task");
            return (
                error_reply(id, INVALID_PARAMS, &format!("Invalid params: {id_text}")),
                Outcome::RpcError,
            );
        }
        TaskStep::Create => {
            let mut task = task_object(facts);
            task.insert("resultType".into(), json!("task"));
            result_reply(id, Value::Object(task))
        }
        TaskStep::Get => result_reply(
            id,
            frame_result(revision, "tasks/get", Value::Object(detailed(&result))),
        ),
        TaskStep::Update | TaskStep::Cancel => {
            result_reply(id, frame_result(revision, "tasks/cancel", json!({})))
        }
    };
    (text, outcome)
}

/// The `Task` of a job: its id, status, times, TTL and poll interval. A finished
/// job's record is kept 10 minutes after it ends (§9), not from its start, so no TTL
/// from creation is promised (`null`).
fn task_object(facts: &Value) -> Map<String, Value> {
    let started = facts["started_at"].clone();
    let updated = match facts.get("ended_at") {
        Some(Value::String(_)) => facts["ended_at"].clone(),
        _ => started.clone(),
    };
    let (status, message) = status(facts);
    let mut task = Map::new();
    task.insert("taskId".into(), facts["job_id"].clone());
    task.insert("status".into(), json!(status));
    task.insert("statusMessage".into(), json!(message));
    task.insert("createdAt".into(), started);
    task.insert("lastUpdatedAt".into(), updated);
    task.insert("ttlMs".into(), Value::Null);
    task.insert("pollIntervalMs".into(), json!(POLL_INTERVAL_MS));
    task
}

/// Job state → task status: running is working; exited is completed (a non-zero exit
/// is a completed call whose result is `isError`, as the extension says); killed by
/// `tasks/cancel` is cancelled, killed otherwise (timeout, grant ended) completed with
/// an `isError` result, as `bash` answers a timeout.
fn status(facts: &Value) -> (&'static str, String) {
    let reason = facts["reason"].as_str().unwrap_or("");
    match facts["state"].as_str() {
        Some("running") => ("working", "the command is running".into()),
        Some("killed") if reason == "cancelled" => ("cancelled", "cancelled".into()),
        Some("killed") => ("completed", format!("killed ({reason})")),
        _ => (
            "completed",
            format!("exited {}", facts["exit_code"].as_i64().unwrap_or(-1)),
        ),
    }
}

/// A `tasks/get` answer from a `bash_poll` result: the task, and once it completed,
/// the `bash` result the call would have answered: the poll's text block (the output
/// from the start, at most [`RESULT_BYTES`] a stream, and its status line) with the
/// ranges that find the streams in it.
fn detailed(poll: &Value) -> Map<String, Value> {
    let facts = &poll["structuredContent"];
    let mut task = task_object(facts);
    if task["status"] != "completed" {
        return task;
    }
    let reason = facts["reason"].as_str().unwrap_or("");
    let exit_code = facts["exit_code"].as_i64().unwrap_or(137);
    let cut = |stream: &str| {
        facts[format!("{stream}_total")].as_u64() > facts[format!("{stream}_next")].as_u64()
    };
    let result = json!({
        "content": poll["content"],
        "structuredContent": {
            "job_id": facts["job_id"],
            "state": facts["state"],
            "pid": facts["pid"],
            "started_at": facts["started_at"],
            "exit_code": exit_code,
            "timed_out": reason == "timeout",
            "cancelled": false,
            "stdout_truncated": cut("stdout"),
            "stderr_truncated": cut("stderr"),
            "duration_ms": facts["duration_ms"].as_u64().unwrap_or(0),
            "stdout_range": facts["stdout_range"],
            "stderr_range": facts["stderr_range"],
        },
        "isError": exit_code != 0 || facts["state"] == "killed",
    });
    task.insert("result".into(), result);
    task
}
