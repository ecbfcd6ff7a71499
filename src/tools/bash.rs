//! `bash`: run one command with `bash -c` in its own process group, with output caps, a
//! timeout and cancellation; the waiting is done by the process watcher
//! ([`super::process`]), never by the pool worker that starts the call.
//!
//! **Environment.** The child gets the daemon's environment cleaned by
//! [`super::env::child_env`] (no `HANDNODE_*`, `CREDENTIALS_DIRECTORY`, scrubbed names or
//! secret values), then the caller's `env` applied as given, *including* names that were
//! scrubbed: a value the caller passes explicitly is the caller's own.
//!
//! **Working directory.** `cwd` must name an existing directory (else a tool error). A
//! relative `cwd`, and the default, are taken from the daemon user's `$HOME` when that is
//! a directory, else from the daemon's own working directory ([`super::shell`] builds the
//! command, for jobs too).
//!
//! **Past the inline limit.** A command still running at the call's inline limit is not
//! killed: it is handed to [`super::jobs`] and continues as a job. If no job can start
//! (its grant's job limit or disk share), it runs on inline to its own timeout and its
//! answer says why it did not become a job (§15).
//!
//! **The command string.** It is passed to bash as one argv element (`bash -c <command>`);
//! handnode never splices arguments into a shell string of its own.

use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::{json, Value};

use super::args::object;
use super::process::{End, RunResult, RunSpec};
use super::shell::{command, command_field, cwd_field, env_field, int_field};
use super::{CallContext, Needs, Reach, Tool};
use crate::pool::Completion;
use crate::profiles::{Class, Profile};
use crate::wire::mcp::ToolOutput;

/// `timeout_secs` when the caller gives none.
pub const DEFAULT_TIMEOUT_SECS: u64 = 60;
/// `max_output_bytes` when the caller gives none (bytes per stream).
pub const DEFAULT_MAX_OUTPUT_BYTES: u64 = 64 << 10;
/// The largest `max_output_bytes` a caller may ask for (bytes per stream).
pub const MAX_OUTPUT_BYTES: u64 = 1 << 20;
/// The largest `timeout_secs` (one day): past the inline limit the command is a job.
pub const MAX_TIMEOUT_SECS: u64 = 86_400;

pub static TOOL: Tool = Tool {
    name: "bash",
    class: Class::Shell,
    class_reason: "runs any command the caller writes: it is the box's shell",
    description: "Run a bash command on this box and return its output. The command runs as \
`bash -c <command>` (passed as one argument, never spliced into another shell string) in a \
process group of its own, with stdin /dev/null and the handnode daemon's environment minus \
handnode's secrets, plus `env`. The result has stdout, stderr, exit_code, timed_out, \
stdout_truncated, stderr_truncated and duration_ms; it is an error result (isError) when the \
exit code is non-zero, the command timed out, or the call was cancelled. timeout_secs \
defaults to 60, at most 86400; at the timeout, or when the call is cancelled, the whole \
process group is killed and exit_code is 137. Long work is not lost to the call limit: a \
command still running at the inline limit (100 s under a grant, as the pod gives up on a call \
at 120 s; the call's timeout, at most 600 s, on the box's local /mcp endpoint) is not killed \
but continues as a job: the reply (not an error) carries the output so far, job_id, \
stdout_next and stderr_next; read the rest with bash_poll, stop it with bash_cancel. For work \
you know is long, call bash_start directly. The call ends when the shell exits (its output read until \
the pipes close, or for a short grace while a background process holds them): what it leaves \
running (`cmd &`, `setsid -f cmd`, `nohup cmd &`) keeps running until the grant ends, and the \
reply says how many (background_processes); what they write to the call's output after it \
answered is dropped, so redirect it to a file (`cmd >/tmp/cmd.log 2>&1 &`). A timeout or a \
cancel kills them too. Each stream keeps at most max_output_bytes (default \
65536, at most 1048576); the rest is discarded and *_truncated is set. Output is decoded as \
UTF-8, invalid bytes replaced. If handnode runs as root this is a root shell: sys_info says \
which user it runs as.",
    input_schema: schema,
    output_schema: Some(output_schema),
    start,
    inline: None,
    needs: Needs::Bash,
    reach: Reach::Processes,
    changes_screen: false,
    profiles: &[Profile::Owner, Profile::Desktop],
};

/// `structuredContent` of a finished command, or of one that continued as a job (then
/// with the job's facts and the offsets to poll from, and no exit code yet). The streams
/// are in the text block; the ranges say where.
fn output_schema() -> Value {
    let mut schema = super::jobs::job_tools::job_facts_schema();
    let props = schema["properties"]
        .as_object_mut()
        .expect("an object schema");
    let range = super::jobs::job_tools::range_schema();
    for (name, prop) in [
        ("stdout_range", range.clone()),
        ("stderr_range", range),
        ("not_a_job", json!({"type": "string"})),
        ("timed_out", json!({"type": "boolean"})),
        ("cancelled", json!({"type": "boolean"})),
        ("stdout_truncated", json!({"type": "boolean"})),
        ("stderr_truncated", json!({"type": "boolean"})),
        ("stdout_next", json!({"type": "integer", "minimum": 0})),
        ("stderr_next", json!({"type": "integer", "minimum": 0})),
        (
            "background_processes",
            json!({"type": "integer", "minimum": 1}),
        ),
    ] {
        props.insert(name.into(), prop);
    }
    schema["required"] = json!([
        "stdout_range",
        "stderr_range",
        "stdout_truncated",
        "stderr_truncated",
        "duration_ms"
    ]);
    schema
}

fn schema() -> Value {
    json!({
        "type": "object",
        "properties": {
            "command": {
                "type": "string",
                "minLength": 1,
                "description": "The bash script to run, e.g. \"ls -la /etc | head\"."
            },
            "cwd": {
                "type": "string",
                "description": "Working directory; must exist. Relative paths and the default are taken from the home directory of the user handnode runs as."
            },
            "timeout_secs": {
                "type": "integer",
                "minimum": 1,
                "maximum": MAX_TIMEOUT_SECS,
                "default": DEFAULT_TIMEOUT_SECS,
                "description": "Kill the process group after this many seconds (exit 137). A command still running at the call's inline limit (100 s under a grant) continues as a job until then."
            },
            "max_output_bytes": {
                "type": "integer",
                "minimum": 1,
                "maximum": MAX_OUTPUT_BYTES,
                "default": DEFAULT_MAX_OUTPUT_BYTES,
                "description": "Bytes of stdout and of stderr kept (each); the rest is read and discarded, and stdout_truncated/stderr_truncated is set."
            },
            "env": {
                "type": "object",
                "additionalProperties": {"type": "string"},
                "description": "Extra environment variables for the command, name to value."
            }
        },
        "required": ["command"]
    })
}

/// The validated arguments of one call.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct BashArgs {
    pub command: String,
    pub cwd: Option<String>,
    pub timeout_secs: u64,
    pub max_output_bytes: u64,
    pub env: Vec<(String, String)>,
}

/// Check the arguments' shapes and bounds. The `Err` text becomes an `Invalid params`
/// message, so it names the field and what it must be. Unknown fields are ignored, and a
/// `null` optional field counts as absent.
pub(crate) fn parse_args(args: &Value) -> Result<BashArgs, String> {
    let map = object(args)?;
    let timeout_secs = int_field(
        map,
        "timeout_secs",
        DEFAULT_TIMEOUT_SECS,
        1..=MAX_TIMEOUT_SECS,
        "a command still running at the call's inline limit continues as a job",
    )?;
    let max_output_bytes = int_field(
        map,
        "max_output_bytes",
        DEFAULT_MAX_OUTPUT_BYTES,
        1..=MAX_OUTPUT_BYTES,
        "bytes kept per stream",
    )?;
    Ok(BashArgs {
        command: command_field(map)?,
        cwd: cwd_field(map)?,
        timeout_secs,
        max_output_bytes,
        env: env_field(map)?,
    })
}

/// A one-shot call's completion, taken by whichever of its end and its conversion to a
/// job comes first.
type Slot = Arc<Mutex<Option<Completion>>>;

fn take(slot: &Slot) -> Option<Completion> {
    slot.lock().unwrap_or_else(|e| e.into_inner()).take()
}

/// Start a `bash` call: validate, spawn, hand the child to the process watcher, return.
/// A command that outlives the call's inline limit is offered to become a job then.
pub fn start(args: Value, cx: CallContext, done: Completion) {
    let args = match parse_args(&args) {
        Ok(args) => args,
        Err(msg) => return done.complete(ToolOutput::InvalidParams(msg)),
    };
    // Allocated now: the marker variable must be in the environment from the start.
    let job_id = super::jobs::table::new_job_id();
    let (cmd, program, confine) =
        match command(&cx, &args.command, args.cwd.as_deref(), &args.env, &job_id) {
            Ok(built) => built,
            Err(msg) => return done.complete(ToolOutput::tool_error(msg)),
        };
    let timeout_secs = args.timeout_secs;
    let cap = args.max_output_bytes;
    let slot: Slot = Arc::new(Mutex::new(Some(done)));
    let mut spec = RunSpec::oneshot(
        Duration::from_secs(timeout_secs),
        cap as usize,
        cx.ctl.clone(),
    );
    spec.confine = confine;
    spec.background = Some(cx.host.config.background_grace);
    // Who ends what the call leaves running, for its reply.
    let kept_until = if cx.grant.is_some() {
        "the grant"
    } else {
        "handnode (this is the owner's /mcp)"
    };
    let inline_wait = cx.limits.inline_wait;
    // Why the call did not become a job at its inline limit, for its answer.
    let not_a_job: Arc<Mutex<Option<String>>> = Arc::default();
    if Duration::from_secs(timeout_secs) > inline_wait {
        let slot = Arc::clone(&slot);
        let not_a_job = Arc::clone(&not_a_job);
        let admit = super::jobs::table::Admit {
            id: Some(job_id),
            scope: super::jobs::job_tools::scope(&cx).to_string(),
            principal: cx.principal.clone(),
            session: cx.grant.as_ref().map(|g| g.session.clone()),
            command: args.command,
            stdout_start: 0,
            stderr_start: 0,
        };
        let jobs = Arc::clone(&cx.host.jobs);
        spec.inline = Some((
            inline_wait,
            Box::new(move |so_far| {
                let done = take(&slot)?;
                match super::jobs::job_tools::continue_as_job(
                    &jobs,
                    admit,
                    so_far,
                    inline_wait,
                    cap,
                    done,
                ) {
                    Ok(continued) => Some(continued),
                    Err((done, why)) => {
                        *slot.lock().unwrap_or_else(|e| e.into_inner()) = Some(done);
                        *not_a_job.lock().unwrap_or_else(|e| e.into_inner()) = Some(format!(
                            "[still running after {} s, it could not continue as a job ({why}), \
                             so it ran on inline to its own timeout]",
                            inline_wait.as_secs_f64()
                        ));
                        None
                    }
                }
            }),
        ));
    }
    cx.host.processes.spawn(cmd, spec, move |run| {
        let Some(done) = take(&slot) else { return };
        match run {
            Ok(run) => {
                let why = not_a_job.lock().unwrap_or_else(|e| e.into_inner()).take();
                // Rendered when the reply can be sent (§15): until then the output waits
                // as the bytes read, not as a reply several times their size.
                done.complete(ToolOutput::Later(crate::wire::mcp::Later::new(move || {
                    render(&run, timeout_secs, cap, why.as_deref(), kept_until)
                })))
            }
            Err(e) => done.complete(ToolOutput::tool_error(spawn_error(&program, &e))),
        }
    });
}

/// The reply's words for what a call left running (§25, docs/protocol.md), `until` naming
/// what ends them ("the grant").
fn kept_line(n: usize, hold_output: bool, until: &str) -> String {
    let (what, they, end, write) = if n == 1 {
        ("1 process".to_string(), "it", "ends", "writes")
    } else {
        (format!("{n} processes"), "they", "end", "write")
    };
    let mut line = format!(" [{what} kept running in the background; {they} {end} with {until}");
    if hold_output {
        line.push_str(&format!(
            "; what {they} {write} to this call's stdout or stderr from now on is dropped: \
             redirect it to a file to keep it"
        ));
    }
    line.push(']');
    line
}

fn spawn_error(program: &Path, e: &std::io::Error) -> String {
    if e.kind() == std::io::ErrorKind::NotFound {
        format!(
            "could not start bash: {} was not found; install bash on this box",
            program.display()
        )
    } else {
        format!("could not start bash: {e}")
    }
}

/// The `CallToolResult` of a finished run.
pub(crate) fn render(
    run: &RunResult,
    timeout_secs: u64,
    cap: u64,
    not_a_job: Option<&str>,
    kept_until: &str,
) -> ToolOutput {
    let timed_out = run.end == End::TimedOut;
    let cancelled = run.end == End::Cancelled;
    let is_error = run.exit_code != 0 || run.end != End::Exited;
    let duration_ms = u64::try_from(run.duration.as_millis()).unwrap_or(u64::MAX);

    let mut status = match run.end {
        // The grant's memory limit killed it: say so, not just "exit 137".
        _ if run.oom_limit.is_some() => format!(
            "[{}, exit {}]",
            crate::cgroup::oom_message(run.oom_limit.unwrap_or(0)),
            run.exit_code
        ),
        End::Exited => format!("[exit {} after {duration_ms} ms]", run.exit_code),
        End::TimedOut => format!(
            "[timed out after {timeout_secs} s: process group killed, exit {}]",
            run.exit_code
        ),
        End::Cancelled => format!("[cancelled: process group killed, exit {}]", run.exit_code),
        End::Aborted => format!(
            "[handnode stopped watching the command (shutting down): process group killed, \
             exit {}]",
            run.exit_code
        ),
    };
    let truncated: Vec<&str> = [
        ("stdout", run.stdout_truncated),
        ("stderr", run.stderr_truncated),
    ]
    .into_iter()
    .filter_map(|(name, t)| t.then_some(name))
    .collect();
    if !truncated.is_empty() {
        status.push_str(&format!(
            " [{} truncated to its first {cap} bytes: raise max_output_bytes or filter the \
             output]",
            truncated.join(" and ")
        ));
    }
    if let Some(why) = not_a_job {
        status.push(' ');
        status.push_str(why);
    }
    if run.kept > 0 {
        status.push_str(&kept_line(run.kept, run.kept_hold_output, kept_until));
    }
    // Each output byte once (§15): the streams are in the text, and structuredContent
    // says where.
    let mut structured = json!({
        "exit_code": run.exit_code,
        "timed_out": timed_out,
        "cancelled": cancelled,
        "stdout_truncated": run.stdout_truncated,
        "stderr_truncated": run.stderr_truncated,
        "duration_ms": duration_ms,
    });
    if let Some(why) = not_a_job {
        structured["not_a_job"] = json!(why);
    }
    if run.kept > 0 {
        structured["background_processes"] = json!(run.kept);
    }
    super::jobs::job_tools::stream_reply(&run.stdout, &run.stderr, &status, &structured, is_error)
}

#[cfg(test)]
mod tests;
