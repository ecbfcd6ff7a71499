//! The job tools `bash_start`, `bash_poll`, `bash_list` and `bash_cancel` (contract §9):
//! their specs and schemas, argument checks, and results; and the step that turns a `bash`
//! call past its inline limit into a job. The jobs themselves live in [`crate::tools::jobs::table`].
//!
//! A job belongs to its scope: the grant it was started under (so a redial, a pod restart
//! or a renew keeps it), or the owner's `/mcp`. Another scope's job id is answered exactly
//! like an unknown one. A waiting `bash_poll` is parked on the process watcher
//! ([`crate::tools::process::Wait`]), which answers it when the job's pipes bring output or its
//! leader exits: no pool worker waits.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde::Serialize;
use serde_json::{json, Map, Value};

use crate::pool::Completion;
use crate::profiles::{Class, Profile};
use crate::tools::args::object;
use crate::tools::jobs::table::{Admit, Job, JobTable, State, Stop};
use crate::tools::process::{Continued, RunSpec, SoFar, Wait};
use crate::tools::shell::{command_field, cwd_field, env_field, int_field};
use crate::tools::{CallContext, Needs, Reach, Tool};
use crate::wire::mcp::ToolOutput;

/// `max_bytes` of `bash_poll` when the caller gives none (bytes per stream).
pub const DEFAULT_POLL_BYTES: u64 = 64 << 10;
/// The largest `max_bytes` of `bash_poll` (bytes per stream).
pub const MAX_POLL_BYTES: u64 = 1 << 20;
/// The longest `wait_secs` of `bash_poll`: well inside the pod's 120 s call limit.
pub const MAX_WAIT_SECS: u64 = 100;
/// The largest `timeout_secs` of `bash_start` (one day); 0 = until the grant ends.
pub const MAX_JOB_TIMEOUT_SECS: u64 = 86_400;
/// Longest job id echoed back in `unknown job_id: <id>` (characters).
const MAX_ECHOED_ID_CHARS: usize = 64;

/// The job tools, in listing order: a family the docs name together.
pub static TOOLS: [&Tool; 4] = [&START, &POLL, &LIST, &CANCEL];

/// The job tools a task of the MCP tasks extension is served by (`tools::ConnCatalog`'s
/// `tasks`), in the order a task lives: started, polled, cancelled.
pub static TASK_TOOLS: [&Tool; 3] = [&START, &POLL, &CANCEL];

pub static START: Tool = Tool {
    name: "bash_start",
    class: Class::Shell,
    class_reason: "runs any command the caller writes, as a job: it is the box's shell",
    description: "Start a long-running bash command as a job and return at once with its \
job_id: for builds, test suites, downloads, flashing, anything that may take longer than a \
call (the pod gives up on a call at 120 s). The command runs like bash's (`bash -c`, its own \
process group, stdin /dev/null, handnode's secrets removed from the environment, plus `env`), \
and its stdout and stderr go to files on this box. Read them with bash_poll (use wait_secs to \
wait for new output instead of calling in a loop), see every job with bash_list, stop one with \
bash_cancel. The job belongs to this grant: it keeps running if the socket drops and is \
redialled, if the pod restarts, or if the grant is renewed; it is killed when the grant ends \
(revoked, replaced, expired) or handnode stops, and at timeout_secs (0, the default, means \
until the grant ends; at most 86400). At most 16 jobs run at once per grant by default. The \
result has job_id, pid, state (running) and started_at.",
    input_schema: start_schema,
    output_schema: Some(start_output_schema),
    start,
    inline: None,
    needs: Needs::Bash,
    reach: Reach::Processes,
    changes_screen: false,
    profiles: &[Profile::Owner, Profile::Desktop],
};

pub static POLL: Tool = Tool {
    name: "bash_poll",
    class: Class::Observe,
    class_reason: "reads a job's output and state and changes nothing",
    description: "Read a job's output (from bash_start, or from a bash call that continued as a \
job) and its state. Offsets are absolute byte offsets into each stream: pass the stdout_next and \
stderr_next of the previous answer to get only what is new. Each stream returns at most \
max_bytes (default 65536, at most 1048576). The answer has stdout, stderr, stdout_next, \
stderr_next, stdout_total, stderr_total, state (running, exited or killed), exit_code and, for a \
killed job, reason (cancelled, timeout, grant_ended, daemon_stopped, daemon_restarted). Only the \
newest 16 MiB of each stream are kept: when an offset asked for has already been dropped, \
skipped_bytes says how many bytes of each stream were lost and reading starts at the oldest byte \
kept. With wait_secs (0 to 100, default 0) the call waits until there is output past the offsets \
or the job ends, and answers at once when it does: a cheap way to follow a job. Text is UTF-8 \
with invalid bytes replaced; offsets still count bytes.",
    input_schema: poll_schema,
    output_schema: Some(poll_output_schema),
    start: poll,
    inline: None,
    needs: Needs::Bash,
    reach: Reach::Nothing,
    changes_screen: false,
    profiles: &[Profile::Owner, Profile::Desktop],
};

pub static LIST: Tool = Tool {
    name: "bash_list",
    class: Class::Observe,
    class_reason: "lists the jobs of the caller's own grant and changes nothing",
    description: "List this grant's jobs: running ones, and finished ones for 10 minutes after \
they end (then their output is removed). Each has job_id, command (its first 1024 bytes), state, \
pid, exit_code, reason, started_at, ended_at, stdout_total and stderr_total. Jobs of other \
grants are never shown.",
    input_schema: list_schema,
    output_schema: Some(list_output_schema),
    start: list,
    inline: None,
    needs: Needs::Bash,
    reach: Reach::Nothing,
    changes_screen: false,
    profiles: &[Profile::Owner, Profile::Desktop],
};

pub static CANCEL: Tool = Tool {
    name: "bash_cancel",
    class: Class::Act,
    class_reason: "stops a job the caller started; it cannot start anything",
    description: "Stop a running job: signal TERM (the default) asks its whole process group to \
stop and sends KILL 5 s later if it is still alive; KILL stops it at once. Answers at once; the \
job's end (state killed, reason cancelled) shows in bash_poll and bash_list. Cancelling a job \
that already ended changes nothing and says so.",
    input_schema: cancel_schema,
    output_schema: Some(cancel_output_schema),
    start: cancel,
    inline: None,
    needs: Needs::Bash,
    reach: Reach::Nothing,
    changes_screen: false,
    profiles: &[Profile::Owner, Profile::Desktop],
};

/// The facts every job answer carries ([`JobFacts`]), as a JSON Schema object whose
/// `properties` the tools extend.
pub(crate) fn job_facts_schema() -> Value {
    json!({
        "type": "object",
        "properties": {
            "job_id": {"type": "string"},
            "state": {"type": "string", "enum": ["running", "exited", "killed"]},
            "pid": {"type": ["integer", "null"]},
            "started_at": {"type": "string"},
            "exit_code": {"type": "integer"},
            "reason": {"type": "string"},
            "ended_at": {"type": "string"},
            "duration_ms": {"type": "integer", "minimum": 0},
        },
        "required": ["job_id", "state", "pid", "started_at"],
    })
}

/// A stream's `[start, end)` byte range in a reply's text block ([`Ranges`]).
pub(crate) fn range_schema() -> Value {
    json!({"type": "array", "items": {"type": "integer", "minimum": 0}})
}

/// [`job_facts_schema`] with more properties and more required ones.
fn job_schema_with(props: Value, required: &[&str]) -> Value {
    let mut schema = job_facts_schema();
    if let (Some(to), Value::Object(from)) = (schema["properties"].as_object_mut(), props) {
        to.extend(from);
    }
    if let Some(list) = schema["required"].as_array_mut() {
        list.extend(required.iter().map(|r| json!(r)));
    }
    schema
}

fn start_output_schema() -> Value {
    job_facts_schema()
}

fn poll_output_schema() -> Value {
    let offset = json!({"type": "integer", "minimum": 0});
    job_schema_with(
        json!({
            "stdout_range": range_schema(),
            "stderr_range": range_schema(),
            "stdout_next": offset, "stderr_next": offset,
            "stdout_total": offset, "stderr_total": offset,
            "skipped_bytes": {"type": "object", "properties": {
                "stdout": offset, "stderr": offset,
            }},
        }),
        &[
            "stdout_range",
            "stderr_range",
            "stdout_next",
            "stderr_next",
            "stdout_total",
            "stderr_total",
        ],
    )
}

fn list_output_schema() -> Value {
    let offset = json!({"type": "integer", "minimum": 0});
    let item = job_schema_with(
        json!({"command": {"type": "string"}, "stdout_total": offset, "stderr_total": offset}),
        &["command", "stdout_total", "stderr_total"],
    );
    json!({
        "type": "object",
        "properties": {"jobs": {"type": "array", "items": item}},
        "required": ["jobs"],
    })
}

fn cancel_output_schema() -> Value {
    json!({
        "type": "object",
        "properties": {
            "job_id": {"type": "string"},
            "signal": {"type": "string", "enum": ["TERM", "KILL"]},
            "state": {"type": "string", "enum": ["running", "exited", "killed"]},
        },
        "required": ["job_id", "signal", "state"],
    })
}

fn start_schema() -> Value {
    json!({
        "type": "object",
        "properties": {
            "command": {"type": "string", "minLength": 1, "description": "The bash script to run, e.g. \"make -j4 2>&1\"."},
            "cwd": {"type": "string", "description": "Working directory; must exist. Relative paths and the default are taken from the home directory of the user handnode runs as."},
            "env": {"type": "object", "additionalProperties": {"type": "string"}, "description": "Extra environment variables, name to value."},
            "timeout_secs": {"type": "integer", "minimum": 0, "maximum": MAX_JOB_TIMEOUT_SECS, "default": 0, "description": "Kill the job's process group after this many seconds; 0 = run until the grant ends."}
        },
        "required": ["command"]
    })
}

fn poll_schema() -> Value {
    json!({
        "type": "object",
        "properties": {
            "job_id": {"type": "string", "description": "The job_id bash_start (or bash) returned."},
            "stdout_offset": {"type": "integer", "minimum": 0, "default": 0, "description": "Absolute byte offset in stdout to read from: the previous answer's stdout_next."},
            "stderr_offset": {"type": "integer", "minimum": 0, "default": 0, "description": "Absolute byte offset in stderr to read from: the previous answer's stderr_next."},
            "max_bytes": {"type": "integer", "minimum": 1, "maximum": MAX_POLL_BYTES, "default": DEFAULT_POLL_BYTES, "description": "Most bytes returned per stream."},
            "wait_secs": {"type": "integer", "minimum": 0, "maximum": MAX_WAIT_SECS, "default": 0, "description": "Wait up to this long for output past the offsets or the job's end; answers as soon as either happens."}
        },
        "required": ["job_id"]
    })
}

fn list_schema() -> Value {
    json!({"type": "object", "properties": {}})
}

fn cancel_schema() -> Value {
    json!({
        "type": "object",
        "properties": {
            "job_id": {"type": "string", "description": "The job to stop."},
            "signal": {"type": "string", "enum": ["TERM", "KILL"], "default": "TERM", "description": "TERM: ask the process group to stop, KILL 5 s later if it is still alive. KILL: stop it now."}
        },
        "required": ["job_id"]
    })
}

/// The job scope of a call: its grant, or the owner's `/mcp`.
pub fn scope(cx: &CallContext) -> &str {
    crate::tools::shell::scope(cx)
}

/// `job_id`: a string. Whether it names a job is answered later, as a tool error.
fn job_id_field(map: &Map<String, Value>) -> Result<String, String> {
    match map.get("job_id") {
        None | Some(Value::Null) => {
            Err("job_id is required: the job_id bash_start returned, as a string".into())
        }
        Some(Value::String(s)) => Ok(s.clone()),
        Some(_) => Err("job_id must be a string".into()),
    }
}

/// The answer to a job id this scope does not have: the same for an unknown id and for
/// another grant's.
fn unknown(id: &str) -> ToolOutput {
    let shown: String = id.chars().take(MAX_ECHOED_ID_CHARS).collect();
    ToolOutput::tool_error(format!("unknown job_id: {shown}"))
}

fn rfc3339_ms(ms: u64) -> String {
    crate::base::timefmt::rfc3339(ms / 1000)
}

/// `3 s`, `0.2 s`: how the inline limit is said.
fn secs_text(d: Duration) -> String {
    if d.subsec_millis() == 0 {
        format!("{} s", d.as_secs())
    } else {
        format!("{:.1} s", d.as_secs_f64())
    }
}

/// A `CallToolResult` with one text block and `structuredContent`, serialized straight
/// from `structured` (cheaper in code than building a `Value`).
fn reply<S: Serialize>(text: String, structured: &S, is_error: bool) -> ToolOutput {
    #[derive(Serialize)]
    struct Block<'a> {
        #[serde(rename = "type")]
        kind: &'static str,
        text: &'a str,
    }
    #[derive(Serialize)]
    struct Reply<'a, S> {
        content: [Block<'a>; 1],
        #[serde(rename = "structuredContent")]
        structured: &'a S,
        #[serde(rename = "isError")]
        is_error: bool,
    }
    let json = serde_json::to_string(&Reply {
        content: [Block {
            kind: "text",
            text: &text,
        }],
        structured,
        is_error,
    })
    .expect("a tool result always serializes");
    ToolOutput::Encoded {
        json: json.into(),
        is_error,
    }
}

/// What a job's answers say about its state and end, as far as known.
#[derive(Serialize)]
struct JobFacts<'a> {
    job_id: &'a str,
    state: &'static str,
    pid: Option<i32>,
    started_at: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    exit_code: Option<i32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    reason: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    ended_at: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    duration_ms: Option<u64>,
}

impl<'a> JobFacts<'a> {
    fn of(job: &'a Job, st: &'a crate::tools::jobs::table::Status) -> Self {
        let ended = st.state != State::Running;
        JobFacts {
            job_id: &job.id,
            state: st.state.as_str(),
            pid: st.pid,
            started_at: rfc3339_ms(job.started_at_ms),
            exit_code: st.exit_code.filter(|_| ended),
            reason: st.reason.as_deref().filter(|_| ended),
            ended_at: st.ended_at_ms.filter(|_| ended).map(rfc3339_ms),
            duration_ms: st.duration_ms.filter(|_| ended),
        }
    }
}

/// `bash_start`: validate, reserve, spawn, answer with the job id.
pub fn start(args: Value, cx: CallContext, done: Completion) {
    let parsed = object(&args).and_then(|map| {
        Ok((
            command_field(map)?,
            cwd_field(map)?,
            env_field(map)?,
            int_field(
                map,
                "timeout_secs",
                0,
                0..=MAX_JOB_TIMEOUT_SECS,
                "0 = until the grant ends",
            )?,
        ))
    });
    let (script, cwd, env, timeout_secs) = match parsed {
        Ok(p) => p,
        Err(msg) => return done.complete(ToolOutput::InvalidParams(msg)),
    };
    let jobs = Arc::clone(&cx.host.jobs);
    let job_id = crate::tools::jobs::table::new_job_id();
    // Checked before anything is reserved, so a bad cwd changes nothing.
    let (cmd, _, confine) =
        match crate::tools::shell::command(&cx, &script, cwd.as_deref(), &env, &job_id) {
            Ok(built) => built,
            Err(msg) => return done.complete(ToolOutput::tool_error(msg)),
        };
    let job = match jobs.admit(Admit {
        id: Some(job_id),
        scope: scope(&cx).to_string(),
        principal: cx.principal.clone(),
        session: cx.grant.as_ref().map(|g| g.session.clone()),
        command: script,
        stdout_start: 0,
        stderr_start: 0,
    }) {
        Ok(job) => job,
        Err(why) => return done.complete(ToolOutput::tool_error(why)),
    };
    let timeout = match timeout_secs {
        0 => Duration::MAX,
        n => Duration::from_secs(n),
    };
    let slot = Arc::new(Mutex::new(Some(done)));
    let on_spawn = {
        let (jobs, job, slot) = (Arc::clone(&jobs), Arc::clone(&job), Arc::clone(&slot));
        Box::new(move |pid: rustix::process::Pid, ticks| {
            jobs.spawned(&job, pid.as_raw_nonzero().get(), ticks);
            if let Some(done) = slot.lock().unwrap_or_else(|e| e.into_inner()).take() {
                done.complete(started(&job));
            }
        })
    };
    let spec = RunSpec {
        timeout,
        max_output_bytes: 0,
        ctl: Arc::clone(&job.ctl),
        sink: Some(Arc::clone(&job) as Arc<dyn crate::tools::process::JobSink>),
        inline: None,
        on_spawn: Some(on_spawn),
        stdin: None,
        confine,
        // A job's end ends everything it started (§16).
        background: None,
    };
    let on_exit = jobs.on_exit(Arc::clone(&job));
    cx.host.processes.spawn(cmd, spec, move |run| match run {
        Ok(run) => on_exit(run),
        Err(e) => {
            jobs.unadmit(&job);
            if let Some(done) = slot.lock().unwrap_or_else(|e| e.into_inner()).take() {
                done.complete(ToolOutput::tool_error(format!("could not start bash: {e}")));
            }
        }
    });
}

/// The answer to a started job.
fn started(job: &Job) -> ToolOutput {
    let st = job.status();
    let text = format!(
        "job {id} started (pid {pid}). Read its output with bash_poll {{\"job_id\": \"{id}\", \
         \"wait_secs\": 30}}, then again from the stdout_next/stderr_next it answers; stop it \
         with bash_cancel.",
        id = job.id,
        pid = st.pid.unwrap_or(0)
    );
    reply(text, &JobFacts::of(job, &st), false)
}

/// A `bash` call at its inline limit (on the watcher thread): make it a job of the call's
/// scope and answer the call with what it printed so far; or, if no job can start, hand
/// the call's completion back with why, and the call runs on inline (§15).
pub(crate) fn continue_as_job(
    jobs: &Arc<JobTable>,
    mut admit: Admit,
    so_far: SoFar<'_>,
    inline_wait: Duration,
    cap: u64,
    done: Completion,
) -> Result<Continued, (Completion, String)> {
    // What the call dropped past its cap is gone: such a stream's file starts after it.
    if so_far.stdout_truncated {
        admit.stdout_start = so_far.stdout_total;
    }
    if so_far.stderr_truncated {
        admit.stderr_start = so_far.stderr_total;
    }
    let job = match jobs.admit(admit) {
        Ok(job) => job,
        Err(why) => return Err((done, why)),
    };
    let after = secs_text(inline_wait);
    // Through the job's sink, so what it keeps counts against its share of the disk.
    let sink: &dyn crate::tools::process::JobSink = &*job;
    if !so_far.stdout_truncated {
        sink.write(crate::tools::process::Which::Stdout, so_far.stdout);
    }
    if !so_far.stderr_truncated {
        sink.write(crate::tools::process::Which::Stderr, so_far.stderr);
    }
    let pid = so_far.pid.as_raw_nonzero().get();
    jobs.spawned(&job, pid, crate::tools::process::start_ticks(pid));
    let truncated: Vec<&str> = [
        ("stdout", so_far.stdout_truncated),
        ("stderr", so_far.stderr_truncated),
    ]
    .into_iter()
    .filter_map(|(n, t)| t.then_some(n))
    .collect();
    let mut status = format!(
        "[still running after {after}; continues as job {id}; read it with bash_poll \
         {{\"job_id\": \"{id}\", \"stdout_offset\": {so}, \"stderr_offset\": {se}, \
         \"wait_secs\": 30}}; stop it with bash_cancel]",
        id = job.id,
        so = so_far.stdout_total,
        se = so_far.stderr_total,
    );
    if !truncated.is_empty() {
        status.push_str(&format!(
            " [{} past its first {cap} bytes was dropped before the job began keeping it]",
            truncated.join(" and ")
        ));
    }
    #[derive(Serialize)]
    struct AsJob<'a> {
        #[serde(flatten)]
        job: JobFacts<'a>,
        stdout_next: u64,
        stderr_next: u64,
        stdout_truncated: bool,
        stderr_truncated: bool,
        duration_ms: u64,
    }
    let st = job.status();
    let as_job = AsJob {
        job: JobFacts::of(&job, &st),
        stdout_next: so_far.stdout_total,
        stderr_next: so_far.stderr_total,
        stdout_truncated: so_far.stdout_truncated,
        stderr_truncated: so_far.stderr_truncated,
        duration_ms: so_far.elapsed.as_millis() as u64,
    };
    done.complete(stream_reply(
        so_far.stdout,
        so_far.stderr,
        &status,
        &as_job,
        false,
    ));
    Ok(Continued {
        sink: Arc::clone(&job) as Arc<dyn crate::tools::process::JobSink>,
        ctl: Arc::clone(&job.ctl),
        on_exit: jobs.on_exit(job),
    })
}

/// Where each stream's text lies in a reply's text block, as `[start, end)` byte offsets
/// (UTF-8) into `content[0].text`. Each output byte goes into a reply once (§15): the
/// streams are in the text block, and `structuredContent` says where instead of holding
/// them a second time.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub(crate) struct Ranges {
    pub stdout_range: [usize; 2],
    pub stderr_range: [usize; 2],
}

/// The line between stdout and stderr in a text block.
const STDERR_MARK: &str = "--- stderr ---\n";

/// A `CallToolResult` whose text block is stdout, then (if any) stderr under a marker
/// line, then a status line, with `structured` plus the streams' [`Ranges`] as its
/// `structuredContent`. The streams are bytes as read: they are made UTF-8 (invalid
/// sequences as U+FFFD) and JSON-escaped straight into the result, so producing a reply
/// of megabytes holds the bytes and the result, never a text copy in between (§15).
pub(crate) fn stream_reply<S: Serialize>(
    out: &[u8],
    err: &[u8],
    status: &str,
    structured: &S,
    is_error: bool,
) -> ToolOutput {
    // The text's layout first (lengths only), so the ranges are known before it is written.
    let out_len = lossy_len(out);
    let mut len = out_len;
    let newline = |len: usize, last: Option<u8>| usize::from(len > 0 && last != Some(b'\n'));
    let mut stderr_range = [out_len, out_len];
    if !err.is_empty() {
        len += newline(len, out.last().copied()) + STDERR_MARK.len();
        let err_len = lossy_len(err);
        stderr_range = [len, len + err_len];
        len += err_len;
    }
    let last = if err.is_empty() {
        out.last()
    } else {
        err.last()
    };
    let status_nl = newline(len, last.copied());
    let ranges = Ranges {
        stdout_range: [0, out_len],
        stderr_range,
    };
    #[derive(Serialize)]
    struct WithRanges<'a, S> {
        #[serde(flatten)]
        structured: &'a S,
        #[serde(flatten)]
        ranges: Ranges,
    }
    let tail = serde_json::to_string(&WithRanges { structured, ranges })
        .expect("a tool result always serializes");
    let mut json = String::with_capacity(len + len / 8 + status.len() + tail.len() + 160);
    json.push_str(r#"{"content":[{"type":"text","text":""#);
    push_json_lossy(&mut json, out);
    if !err.is_empty() {
        if newline(out_len, out.last().copied()) == 1 {
            json.push_str("\\n");
        }
        push_json_lossy(&mut json, STDERR_MARK.as_bytes());
        push_json_lossy(&mut json, err);
    }
    if status_nl == 1 {
        json.push_str("\\n");
    }
    push_json_lossy(&mut json, status.as_bytes());
    json.push_str(r#""}],"structuredContent":"#);
    json.push_str(&tail);
    json.push_str(if is_error {
        r#","isError":true}"#
    } else {
        r#","isError":false}"#
    });
    ToolOutput::Json { json, is_error }
}

/// Append `bytes` as the inside of a JSON string: made UTF-8 as `from_utf8_lossy` does, then
/// escaped as JSON requires (quote, backslash, control characters).
fn push_json_lossy(json: &mut String, bytes: &[u8]) {
    for chunk in bytes.utf8_chunks() {
        let valid = chunk.valid();
        let mut from = 0;
        for (i, b) in valid.bytes().enumerate() {
            let escaped = match b {
                b'"' => "\\\"",
                b'\\' => "\\\\",
                b'\n' => "\\n",
                b'\r' => "\\r",
                b'\t' => "\\t",
                0..=0x1F => "",
                _ => continue,
            };
            json.push_str(&valid[from..i]);
            if escaped.is_empty() {
                json.push_str(&format!("\\u{b:04x}"));
            } else {
                json.push_str(escaped);
            }
            from = i + 1;
        }
        json.push_str(&valid[from..]);
        if !chunk.invalid().is_empty() {
            json.push(char::REPLACEMENT_CHARACTER);
        }
    }
}

/// The length of `bytes` once made UTF-8 as `String::from_utf8_lossy` does.
fn lossy_len(bytes: &[u8]) -> usize {
    bytes
        .utf8_chunks()
        .map(|c| c.valid().len() + if c.invalid().is_empty() { 0 } else { 3 })
        .sum()
}

/// The validated arguments of `bash_poll`.
#[derive(Clone, Debug, PartialEq, Eq)]
struct PollArgs {
    job_id: String,
    stdout_offset: u64,
    stderr_offset: u64,
    max_bytes: u64,
    wait_secs: u64,
}

fn parse_poll(args: &Value) -> Result<PollArgs, String> {
    let map = object(args)?;
    let offset = |field| {
        int_field(
            map,
            field,
            0,
            0..=u64::MAX,
            "an absolute byte offset: the previous answer's *_next",
        )
    };
    Ok(PollArgs {
        job_id: job_id_field(map)?,
        stdout_offset: offset("stdout_offset")?,
        stderr_offset: offset("stderr_offset")?,
        max_bytes: int_field(
            map,
            "max_bytes",
            DEFAULT_POLL_BYTES,
            1..=MAX_POLL_BYTES,
            "bytes returned per stream",
        )?,
        wait_secs: int_field(
            map,
            "wait_secs",
            0,
            0..=MAX_WAIT_SECS,
            "the pod gives up on a call at 120 s",
        )?,
    })
}

/// `bash_poll`: answer now, or park on the process watcher until there is news.
pub fn poll(args: Value, cx: CallContext, done: Completion) {
    let args = match parse_poll(&args) {
        Ok(args) => args,
        Err(msg) => return done.complete(ToolOutput::InvalidParams(msg)),
    };
    let Some(job) = cx.host.jobs.find(scope(&cx), &args.job_id) else {
        return done.complete(unknown(&args.job_id));
    };
    let (so, se, max) = (
        args.stdout_offset,
        args.stderr_offset,
        args.max_bytes as usize,
    );
    if args.wait_secs == 0 || job.has_news(so, se) {
        return done.complete(poll_later(job, so, se, max));
    }
    let ready = Arc::clone(&job);
    cx.host.processes.wait(Wait {
        key: crate::tools::process::JobSink::key(&*job),
        deadline: Instant::now() + Duration::from_secs(args.wait_secs),
        ctl: Arc::clone(&cx.ctl),
        ready: Box::new(move || ready.has_news(so, se)),
        answer: Box::new(move || done.complete(poll_later(job, so, se, max))),
    });
}

/// `bash_poll`'s answer, read from the job's files only when the reply can be sent
/// (§15): until then the output stays on disk, not in a reply waiting in memory.
fn poll_later(job: Arc<Job>, so: u64, se: u64, max: usize) -> ToolOutput {
    ToolOutput::Later(crate::wire::mcp::Later::new(move || {
        poll_result(&job, so, se, max)
    }))
}

/// What `bash_poll` answers about `job` from these offsets.
fn poll_result(job: &Job, stdout_offset: u64, stderr_offset: u64, max: usize) -> ToolOutput {
    // The status first: output read after it is at least as new, so a job seen ended
    // has all its output in the chunks.
    let st = job.status();
    let mut out = job.out.read(stdout_offset, max);
    let mut err = job.err.read(stderr_offset, max);
    for c in [&mut out, &mut err] {
        // A character cut by max_bytes or by the writer's last chunk is left for the next
        // poll rather than shown as U+FFFD twice; a stream that has ended keeps its tail.
        if c.next < c.total || st.state == State::Running {
            let keep = utf8_whole(&c.data);
            if keep > 0 {
                c.next -= (c.data.len() - keep) as u64;
                c.data.truncate(keep);
            }
        }
    }
    #[derive(Serialize)]
    struct Skipped {
        stdout: u64,
        stderr: u64,
    }
    #[derive(Serialize)]
    struct Poll<'a> {
        #[serde(flatten)]
        job: JobFacts<'a>,
        stdout_next: u64,
        stderr_next: u64,
        stdout_total: u64,
        stderr_total: u64,
        #[serde(skip_serializing_if = "Option::is_none")]
        skipped_bytes: Option<Skipped>,
    }
    let mut status = match st.state {
        State::Running => format!(
            "[job {} running; poll again with stdout_offset {} and stderr_offset {}]",
            job.id, out.next, err.next
        ),
        State::Exited => format!(
            "[job {} exited {} after {} ms; all output read up to stdout {} / stderr {} of {} / {}]",
            job.id,
            st.exit_code.unwrap_or(-1),
            st.duration_ms.unwrap_or(0),
            out.next,
            err.next,
            out.total,
            err.total
        ),
        State::Killed => format!(
            "[job {} killed ({}), exit {}; output up to stdout {} / stderr {} of {} / {}]",
            job.id,
            st.reason.as_deref().unwrap_or("killed"),
            st.exit_code.unwrap_or(137),
            out.next,
            err.next,
            out.total,
            err.total
        ),
    };
    for (name, c) in [("stdout", &out), ("stderr", &err)] {
        if c.skipped > 0 {
            status.push_str(&format!(
                " [{} bytes of {name} before offset {} had already been dropped: only the \
                 newest bytes of each stream are kept]",
                c.skipped, c.from
            ));
        }
    }
    let answer = Poll {
        job: JobFacts::of(job, &st),
        stdout_next: out.next,
        stderr_next: err.next,
        stdout_total: out.total,
        stderr_total: err.total,
        skipped_bytes: (out.skipped + err.skipped > 0).then_some(Skipped {
            stdout: out.skipped,
            stderr: err.skipped,
        }),
    };
    stream_reply(&out.data, &err.data, &status, &answer, false)
}

/// The length of `data` without a UTF-8 sequence cut short at its end.
fn utf8_whole(data: &[u8]) -> usize {
    let n = data.len();
    for back in 1..=n.min(4) {
        let b = data[n - back];
        if b & 0xC0 == 0x80 {
            continue;
        }
        let need = match b {
            0xF8.. => 1, // never a lead byte
            0xF0.. => 4,
            0xE0.. => 3,
            0xC0.. => 2,
            _ => 1,
        };
        return if need > back { n - back } else { n };
    }
    n
}

/// `bash_list`: this scope's jobs, oldest first.
pub fn list(args: Value, cx: CallContext, done: Completion) {
    if let Err(msg) = object(&args) {
        return done.complete(ToolOutput::InvalidParams(msg));
    }
    let jobs = cx.host.jobs.list(scope(&cx));
    #[derive(Serialize)]
    struct Item<'a> {
        #[serde(flatten)]
        job: JobFacts<'a>,
        command: &'a str,
        stdout_total: u64,
        stderr_total: u64,
    }
    #[derive(Serialize)]
    struct List<'a> {
        jobs: Vec<Item<'a>>,
    }
    let statuses: Vec<crate::tools::jobs::table::Status> =
        jobs.iter().map(|j| j.status()).collect();
    let mut lines = Vec::with_capacity(jobs.len() + 1);
    let items = jobs
        .iter()
        .zip(&statuses)
        .map(|(job, st)| {
            let how = match (&st.state, &st.reason) {
                (State::Exited, _) => format!("exited {}", st.exit_code.unwrap_or(-1)),
                (State::Killed, Some(r)) => format!("killed ({r})"),
                (state, _) => state.as_str().to_string(),
            };
            let first_line = job.command.lines().next().unwrap_or("");
            lines.push(format!(
                "{}  {how}  stdout {} B, stderr {} B  {first_line}",
                job.id,
                job.out.total(),
                job.err.total()
            ));
            Item {
                job: JobFacts::of(job, st),
                command: &job.command,
                stdout_total: job.out.total(),
                stderr_total: job.err.total(),
            }
        })
        .collect();
    if lines.is_empty() {
        lines.push("no jobs under this grant".into());
    }
    done.complete(reply(lines.join("\n"), &List { jobs: items }, false));
}

/// `bash_cancel`: TERM (then KILL after the grace) or KILL a running job.
pub fn cancel(args: Value, cx: CallContext, done: Completion) {
    let parsed = object(&args).and_then(|map| {
        let signal = match map.get("signal") {
            None | Some(Value::Null) => Stop::Term,
            Some(Value::String(s)) if s == "TERM" => Stop::Term,
            Some(Value::String(s)) if s == "KILL" => Stop::Kill,
            Some(_) => return Err("signal must be \"TERM\" or \"KILL\"".to_string()),
        };
        Ok((job_id_field(map)?, signal))
    });
    let (id, signal) = match parsed {
        Ok(p) => p,
        Err(msg) => return done.complete(ToolOutput::InvalidParams(msg)),
    };
    let jobs = &cx.host.jobs;
    let Some(job) = jobs.find(scope(&cx), &id) else {
        return done.complete(unknown(&id));
    };
    let name = match signal {
        Stop::Term => "TERM",
        Stop::Kill => "KILL",
    };
    let text = if jobs.stop(&job, signal) {
        match signal {
            Stop::Term => format!(
                "sent TERM to job {id}'s process group; KILL follows in {} if it is still \
                 alive. bash_poll shows its end.",
                secs_text(jobs.config().kill_grace)
            ),
            Stop::Kill => {
                format!("sent KILL to job {id}'s process group. bash_poll shows its end.")
            }
        }
    } else {
        let st = job.status();
        format!(
            "job {id} had already ended ({}, exit {}); nothing was sent",
            st.state.as_str(),
            st.exit_code.unwrap_or(-1)
        )
    };
    #[derive(Serialize)]
    struct Cancelled<'a> {
        job_id: &'a str,
        signal: &'static str,
        state: &'static str,
    }
    let state = job.status().state.as_str();
    let answer = Cancelled {
        job_id: &id,
        signal: name,
        state,
    };
    done.complete(reply(text, &answer, false));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_job_tools_are_owner_and_desktop_only_with_their_classes() {
        // Reading a job is observe-class, but observe has no way to start one: §9 lists
        // the job tools for owner and desktop only.
        for tool in [&START, &POLL, &LIST, &CANCEL] {
            assert_eq!(
                crate::tools::find(tool.name).map(|t| t.name),
                Some(tool.name)
            );
            assert!(!tool.allowed_in(Profile::Observe), "{}", tool.name);
            assert!(!tool.allowed_in(Profile::Browser), "{}", tool.name);
            assert!(tool.allowed_in(Profile::Owner) && tool.allowed_in(Profile::Desktop));
            assert_eq!(tool.needs, Needs::Bash, "{}", tool.name);
        }
        assert_eq!(crate::tools::class_of("bash_start"), Some(Class::Shell));
        assert_eq!(crate::tools::class_of("bash_poll"), Some(Class::Observe));
        assert_eq!(crate::tools::class_of("bash_list"), Some(Class::Observe));
        assert_eq!(crate::tools::class_of("bash_cancel"), Some(Class::Act));
    }

    #[test]
    fn poll_arguments_are_checked_and_name_the_field() {
        let ok = parse_poll(&json!({"job_id": "x"})).unwrap();
        assert_eq!(
            (
                ok.stdout_offset,
                ok.stderr_offset,
                ok.max_bytes,
                ok.wait_secs
            ),
            (0, 0, 65536, 0)
        );
        let ok =
            parse_poll(&json!({"job_id": "x", "max_bytes": 1_048_576, "wait_secs": 100})).unwrap();
        assert_eq!((ok.max_bytes, ok.wait_secs), (1_048_576, 100));
        for (args, field) in [
            (json!({}), "job_id is required"),
            (json!({"job_id": 5}), "job_id must be a string"),
            (json!({"job_id": null}), "job_id is required"),
            (
                json!({"job_id": "x", "stdout_offset": -1}),
                "stdout_offset must be",
            ),
            (
                json!({"job_id": "x", "stderr_offset": -5}),
                "stderr_offset must be",
            ),
            (
                json!({"job_id": "x", "stdout_offset": 1.5}),
                "stdout_offset must be",
            ),
            (json!({"job_id": "x", "max_bytes": 0}), "max_bytes must be"),
            (
                json!({"job_id": "x", "max_bytes": 1_048_577}),
                "max_bytes must be",
            ),
            (
                json!({"job_id": "x", "wait_secs": 101}),
                "wait_secs must be",
            ),
            (json!({"job_id": "x", "wait_secs": -1}), "wait_secs must be"),
            (json!([1]), "arguments must be an object"),
        ] {
            let err = parse_poll(&args).unwrap_err();
            assert!(err.starts_with(field), "{args}: {err}");
        }
    }

    #[test]
    fn specs_say_how_to_use_them() {
        for needle in [
            "bash_poll",
            "wait_secs",
            "120 s",
            "grant",
            "86400",
            "bash_cancel",
        ] {
            assert!(START.description.contains(needle), "{needle}");
        }
        for needle in [
            "absolute",
            "stdout_next",
            "skipped_bytes",
            "wait_secs",
            "max_bytes",
        ] {
            assert!(POLL.description.contains(needle), "{needle}");
        }
        assert_eq!(poll_schema()["properties"]["wait_secs"]["maximum"], 100);
        assert_eq!(
            poll_schema()["properties"]["max_bytes"]["maximum"],
            1_048_576
        );
        assert_eq!(
            start_schema()["properties"]["timeout_secs"]["maximum"],
            86_400
        );
        assert_eq!(
            cancel_schema()["properties"]["signal"]["enum"],
            json!(["TERM", "KILL"])
        );
        assert_eq!(list_schema()["type"], "object");
        assert_eq!(secs_text(Duration::from_secs(100)), "100 s");
        assert_eq!(secs_text(Duration::from_millis(300)), "0.3 s");
    }

    #[test]
    fn streams_go_into_the_text_once_and_the_ranges_find_them() {
        let cases: [(&[u8], &[u8]); 6] = [
            (b"", b""),
            (b"plain\n", b""),
            (b"no newline", b"err"),
            (
                b"q\"uote\\ back\ttab\r\x01\x1f\x7f",
                b"\xff\xfe\xe2\x82 cut",
            ),
            (b"", b"only stderr\n"),
            ("é€😀".as_bytes(), b"\x00zero"),
        ];
        for (out, err) in cases {
            let ToolOutput::Json { json, is_error } =
                stream_reply(out, err, "[status]", &serde_json::json!({"k": 1}), true)
            else {
                panic!("a Json output")
            };
            assert!(is_error);
            let v: Value = serde_json::from_str(&json).unwrap_or_else(|e| panic!("{e}: {json}"));
            let text = v["content"][0]["text"].as_str().unwrap();
            let sc = &v["structuredContent"];
            let slice = |name: &str| {
                let r = &sc[format!("{name}_range")];
                &text[r[0].as_u64().unwrap() as usize..r[1].as_u64().unwrap() as usize]
            };
            assert_eq!(slice("stdout"), String::from_utf8_lossy(out), "{json}");
            assert_eq!(slice("stderr"), String::from_utf8_lossy(err), "{json}");
            assert!(text.ends_with("[status]"), "{text:?}");
            assert_eq!(
                text.matches("--- stderr ---").count(),
                usize::from(!err.is_empty())
            );
            assert_eq!(
                (sc["k"].as_u64(), v["isError"].as_bool()),
                (Some(1), Some(true))
            );
            // Nothing of the streams in structuredContent.
            assert!(sc.get("stdout").is_none() && sc.get("stderr").is_none());
        }
    }

    #[test]
    fn a_cut_character_waits_for_the_next_poll() {
        let euro = "€".as_bytes(); // three bytes
        assert_eq!(utf8_whole(b"ab"), 2);
        assert_eq!(utf8_whole(&[b'a', euro[0], euro[1]]), 1);
        assert_eq!(utf8_whole(&[b'a', euro[0]]), 1);
        assert_eq!(utf8_whole(&[b'a', euro[0], euro[1], euro[2]]), 4);
        assert_eq!(utf8_whole(&[euro[0], euro[1]]), 0);
        assert_eq!(utf8_whole("é😀".as_bytes()), 6);
        assert_eq!(
            utf8_whole(&[0xff]),
            1,
            "an invalid byte is not a cut character"
        );
        assert_eq!(utf8_whole(&[]), 0);
    }

    #[test]
    fn an_unknown_id_is_echoed_but_bounded() {
        let long = "z".repeat(10_000);
        match unknown(&long) {
            ToolOutput::Result(v) => {
                let text = v["content"][0]["text"].as_str().unwrap();
                assert_eq!(text, format!("unknown job_id: {}", "z".repeat(64)));
                assert_eq!(v["isError"], true);
            }
            other => panic!("{other:?}"),
        }
    }
}
