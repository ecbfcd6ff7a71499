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
    let mut schema = super::jobs::tools::job_facts_schema();
    let props = schema["properties"]
        .as_object_mut()
        .expect("an object schema");
    let range = super::jobs::tools::range_schema();
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
            scope: super::jobs::tools::scope(&cx).to_string(),
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
                match super::jobs::tools::continue_as_job(
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
    super::jobs::tools::stream_reply(&run.stdout, &run.stderr, &status, &structured, is_error)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::base::secret::Secret;
    use crate::pool::{JobCtl, Pool};
    use crate::tools::testutil::*;
    use crate::tools::{CallLimits, ToolConfig};
    use std::io::BufRead;
    use std::sync::Arc;

    fn call_with(
        host: &Arc<super::super::ToolHost>,
        limits: CallLimits,
        ctl: Arc<JobCtl>,
        args: Value,
    ) -> ToolOutput {
        let (done, rx) = completion();
        start(args, cx(host, limits, ctl), done);
        rx.recv_timeout(WATCHDOG).expect("bash call finished")
    }

    fn call(args: Value) -> Value {
        result(call_with(&host(), CallLimits::GRANT, JobCtl::new(), args))
    }

    /// The result object of any output that is a `CallToolResult`, serialized or not.
    fn any_result(out: ToolOutput) -> Value {
        match out.produced() {
            ToolOutput::Result(v) => v,
            ToolOutput::Encoded { json, .. } => serde_json::from_str(&json).unwrap(),
            ToolOutput::Json { json, .. } => serde_json::from_str(&json).unwrap(),
            other => panic!("expected a result, got {other:?}"),
        }
    }

    #[test]
    fn structured_results_conform_to_the_declared_output_schemas() {
        // MCP 2025-06-18 and later, server/tools "Output Schema": a tool that declares
        // one MUST return structuredContent that conforms; clients validate it.
        use crate::tools::jobs::tools as job;
        let schema = |tool: &crate::tools::Tool| (tool.output_schema.expect(tool.name))();
        let check = |tool: &crate::tools::Tool, r: &Value| {
            conforms(&schema(tool), &r["structuredContent"])
                .unwrap_or_else(|e| panic!("{}: {e}: {r}", tool.name));
        };
        let tmp = crate::base::testutil::TempDir::new("bash-output-schema");
        let mut config = ToolConfig {
            display_env: Some(Default::default()),
            ..ToolConfig::default()
        };
        config.jobs.dir = Some(tmp.path("jobs"));
        let host = super::super::ToolHost::new(config).unwrap();
        for args in [
            json!({"command": "echo hi"}),
            json!({"command": "echo oops >&2; exit 3"}),
            json!({"command": "head -c 100 /dev/zero", "max_output_bytes": 10}),
            json!({"command": "sleep 5", "timeout_secs": 1}),
        ] {
            let r = any_result(call_with(&host, CallLimits::GRANT, JobCtl::new(), args));
            check(&TOOL, &r);
        }
        // A command still running at the inline limit continues as a job: the other shape.
        let limits = CallLimits {
            inline_wait: std::time::Duration::from_millis(100),
            ..CallLimits::GRANT
        };
        let r = any_result(call_with(
            &host,
            limits,
            JobCtl::new(),
            json!({"command": "echo started; sleep 30", "timeout_secs": 60}),
        ));
        check(&TOOL, &r);
        let job_id = r["structuredContent"]["job_id"]
            .as_str()
            .unwrap_or_else(|| panic!("{r}"))
            .to_string();
        let run = |start: fn(Value, crate::tools::CallContext, crate::pool::Completion),
                   args: Value| {
            let (done, rx) = completion();
            start(args, cx(&host, CallLimits::GRANT, JobCtl::new()), done);
            any_result(rx.recv_timeout(WATCHDOG).expect("job tool answered"))
        };
        check(&job::POLL, &run(job::poll, json!({"job_id": job_id})));
        check(&job::LIST, &run(job::list, json!({})));
        check(
            &job::CANCEL,
            &run(job::cancel, json!({"job_id": job_id, "signal": "KILL"})),
        );
        let started = run(job::start, json!({"command": "true"}));
        check(&job::START, &started);
        let id = started["structuredContent"]["job_id"].clone();
        check(&job::CANCEL, &run(job::cancel, json!({"job_id": id})));
    }

    /// Wait until `pid` has exited (or is gone), failing after the watchdog.
    fn assert_dies(pid: i32) {
        let pid = rustix::process::Pid::from_raw(pid).unwrap();
        let fd = match rustix::process::pidfd_open(pid, rustix::process::PidfdFlags::empty()) {
            Ok(fd) => fd,
            Err(rustix::io::Errno::SRCH) => return,
            Err(e) => panic!("pidfd_open: {e}"),
        };
        let poller = crate::base::wake::Poller::new().unwrap();
        poller.add(&fd, 1, true, false).unwrap();
        let ready = poller.wait(Some(WATCHDOG)).unwrap();
        assert_eq!(
            ready.len(),
            1,
            "process {pid:?} still alive after the call ended"
        );
    }

    /// A bash snippet that reports `$!` (the last background pid) to the test over
    /// loopback TCP, and the channel the pid arrives on: a signal to wait for instead of
    /// a sleep.
    fn pid_reporter() -> (String, crossbeam_channel::Receiver<i32>) {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let (tx, rx) = crossbeam_channel::bounded(1);
        std::thread::spawn(move || {
            let (stream, _) = listener.accept().unwrap();
            let mut line = String::new();
            std::io::BufReader::new(stream)
                .read_line(&mut line)
                .unwrap();
            let _ = tx.send(line.trim().parse().unwrap());
        });
        let snippet = format!("exec 3<>/dev/tcp/127.0.0.1/{port}; echo $! >&3; exec 3>&-");
        (snippet, rx)
    }

    #[test]
    fn echo_hi() {
        let r = call(json!({"command": "echo hi"}));
        assert_eq!(r["structuredContent"]["stdout"], "hi\n");
        assert_eq!(r["structuredContent"]["exit_code"], 0);
        assert_eq!(r["structuredContent"]["timed_out"], false);
        assert_eq!(r["isError"], false);
        let text = r["content"][0]["text"].as_str().unwrap();
        assert!(text.starts_with("hi\n[exit 0 after "), "{text}");
    }

    #[test]
    fn non_zero_exit_is_an_error_result_with_both_streams() {
        let r = call(json!({"command": "echo out; echo oops >&2; exit 3"}));
        let s = &r["structuredContent"];
        assert_eq!(
            (s["exit_code"].as_i64(), r["isError"].as_bool()),
            (Some(3), Some(true))
        );
        assert_eq!(
            (s["stdout"].as_str(), s["stderr"].as_str()),
            (Some("out\n"), Some("oops\n"))
        );
        let text = r["content"][0]["text"].as_str().unwrap();
        assert!(
            text.starts_with("out\n--- stderr ---\noops\n[exit 3 "),
            "{text}"
        );
    }

    #[test]
    fn timeout_kills_the_whole_group() {
        let r = call(json!({"command": "sleep 100 & echo $!; sleep 100", "timeout_secs": 1}));
        let s = &r["structuredContent"];
        assert_eq!(s["timed_out"], true);
        assert_eq!(s["exit_code"], 137);
        assert_eq!(r["isError"], true);
        assert!(r["content"][0]["text"]
            .as_str()
            .unwrap()
            .contains("timed out after 1 s"));
        let grandchild: i32 = s["stdout"].as_str().unwrap().trim().parse().unwrap();
        assert_dies(grandchild);
    }

    #[test]
    fn cancel_kills_the_whole_group() {
        let host = host();
        let ctl = JobCtl::new();
        let (report, pid_rx) = pid_reporter();
        let (done, rx) = completion();
        let script = format!("sleep 100 & {report}; sleep 100");
        start(
            json!({"command": script, "timeout_secs": 100}),
            cx(&host, CallLimits::GRANT, Arc::clone(&ctl)),
            done,
        );
        let grandchild = pid_rx.recv_timeout(WATCHDOG).unwrap();
        ctl.cancel();
        let r = result(rx.recv_timeout(WATCHDOG).unwrap());
        let s = &r["structuredContent"];
        assert_eq!(
            (s["cancelled"].as_bool(), s["timed_out"].as_bool()),
            (Some(true), Some(false))
        );
        assert_eq!(s["exit_code"], 137);
        assert_eq!(r["isError"], true);
        assert_dies(grandchild);
    }

    #[test]
    fn a_background_nothing_can_keep_ends_with_the_shell() {
        // The unit tests' confinement is inert (no cgroup; this process is no subreaper
        // unless a test of another module made it one): what the shell leaves behind is
        // found nowhere, so nothing is kept and the run's end kills it by its marker.
        // Keeping is tested with a daemon's real containment (tests/background.rs).
        let (report, pid_rx) = pid_reporter();
        let r = call(json!({"command": format!("sleep 100 & {report}; echo done")}));
        assert_eq!(r["structuredContent"]["stdout"], "done\n");
        assert_eq!(r["isError"], false);
        let pid = pid_rx.recv_timeout(WATCHDOG).unwrap();
        if r["structuredContent"]["background_processes"] == 1 {
            let p = rustix::process::Pid::from_raw(pid).unwrap();
            assert!(
                rustix::process::test_kill_process(p).is_ok(),
                "kept, yet gone"
            );
            let _ = rustix::process::kill_process(p, rustix::process::Signal::KILL);
        }
        assert_dies(pid);
    }

    #[test]
    fn output_is_capped_per_stream_at_exactly_max_output_bytes() {
        let r = call(
            json!({"command": "printf aaaaaaaaaa; printf bbbbbbbbbbb >&2",
                            "max_output_bytes": 10}),
        );
        let s = &r["structuredContent"];
        assert_eq!(
            (s["stdout"].as_str(), s["stdout_truncated"].as_bool()),
            (Some("aaaaaaaaaa"), Some(false))
        );
        assert_eq!(
            (s["stderr"].as_str(), s["stderr_truncated"].as_bool()),
            (Some("bbbbbbbbbb"), Some(true))
        );
        assert!(r["content"][0]["text"]
            .as_str()
            .unwrap()
            .contains("[stderr truncated to its first 10 bytes"));
    }

    #[test]
    fn output_past_the_cap_is_drained_so_the_child_finishes() {
        // Far more than a pipe holds: the child would block forever if we stopped reading.
        let r = call(
            json!({"command": "head -c 5000000 /dev/zero; echo done >&2",
                            "max_output_bytes": 10}),
        );
        let s = &r["structuredContent"];
        assert_eq!(s["exit_code"], 0);
        assert_eq!(s["stdout"].as_str().unwrap().len(), 10);
        assert_eq!(s["stdout_truncated"], true);
        assert_eq!(s["stderr"], "done\n");
    }

    #[test]
    fn invalid_utf8_is_replaced() {
        let r = call(json!({"command": "printf 'a\\377b'"}));
        assert_eq!(r["structuredContent"]["stdout"], "a\u{fffd}b");
    }

    #[test]
    fn stdin_is_dev_null() {
        let r = call(json!({"command": "cat; readlink /proc/self/fd/0", "timeout_secs": 20}));
        assert_eq!(r["structuredContent"]["stdout"], "/dev/null\n");
        assert_eq!(r["structuredContent"]["timed_out"], false);
    }

    #[test]
    fn cwd_is_used_and_must_exist() {
        let r = call(json!({"command": "pwd", "cwd": "/tmp"}));
        assert_eq!(r["structuredContent"]["stdout"], "/tmp\n");
        for (cwd, why) in [
            ("/nonexistent/handnode", "does not exist"),
            ("/etc/hostname", "is not a directory"),
        ] {
            let r = call(json!({"command": "pwd", "cwd": cwd}));
            assert_eq!(r["isError"], true);
            let text = r["content"][0]["text"].as_str().unwrap();
            assert!(text.contains(why), "{text}");
        }
    }

    #[test]
    fn bad_arguments_are_invalid_params_through_start() {
        let host = host();
        for (limits, args, needle) in [
            (
                CallLimits::GRANT,
                json!({"command": "true", "timeout_secs": 86_401}),
                "1..=86400",
            ),
            (
                CallLimits::LOCAL_HTTP,
                json!({"command": "true", "timeout_secs": 86_401}),
                "1..=86400",
            ),
            (
                CallLimits::GRANT,
                json!({"command": "true", "max_output_bytes": 1_048_577}),
                "1..=1048576",
            ),
            (
                CallLimits::GRANT,
                json!({"command": 7}),
                "command must be a string",
            ),
            (CallLimits::GRANT, json!({}), "command is required"),
        ] {
            match call_with(&host, limits, JobCtl::new(), args) {
                ToolOutput::InvalidParams(msg) => assert!(msg.contains(needle), "{msg}"),
                other => panic!("{other:?}"),
            }
        }
    }

    #[test]
    fn argument_bounds_and_types() {
        // The bounds no longer depend on the transport: past the inline limit a command
        // continues as a job.
        let (g, l) = ((), ());
        let ok = |args: Value, _: ()| parse_args(&args).unwrap();
        let err = |args: Value, _: ()| parse_args(&args).unwrap_err();

        let d = ok(json!({"command": "x", "unknown": [1], "cwd": null}), g);
        assert_eq!(
            (d.timeout_secs, d.max_output_bytes, d.cwd),
            (60, 65536, None)
        );
        assert_eq!(
            ok(json!({"command": "x", "timeout_secs": 110}), g).timeout_secs,
            110
        );
        assert_eq!(
            ok(json!({"command": "x", "timeout_secs": 86_400}), l).timeout_secs,
            86_400
        );
        assert_eq!(
            ok(json!({"command": "x", "max_output_bytes": 1_048_576}), g).max_output_bytes,
            1_048_576
        );
        assert!(err(json!({"command": "x", "timeout_secs": 86_401}), g).contains("1..=86400"));
        assert!(err(json!({"command": "x", "timeout_secs": 86_401}), l).starts_with("timeout_secs"));
        for bad in [json!(0), json!(-1), json!(1.5), json!("5"), json!(true)] {
            let msg = err(json!({"command": "x", "timeout_secs": bad}), l);
            assert!(msg.starts_with("timeout_secs must be an integer"), "{msg}");
        }
        for bad in [json!(0), json!(1_048_577), json!("big")] {
            let msg = err(json!({"command": "x", "max_output_bytes": bad}), l);
            assert!(
                msg.starts_with("max_output_bytes must be an integer"),
                "{msg}"
            );
        }
        assert!(err(json!({"command": ""}), g).contains("non-empty"));
        assert!(err(json!({"command": "a\u{0}b"}), g).contains("NUL"));
        assert!(err(json!({"command": "x", "cwd": 5}), g).starts_with("cwd"));
        assert!(err(json!({"command": "x", "cwd": ""}), g).starts_with("cwd"));
        assert!(err(json!({"command": "x", "env": "A=1"}), g).starts_with("env must be"));
        assert!(err(json!({"command": "x", "env": {"A": 1}}), g).contains("env.A"));
        assert!(err(json!({"command": "x", "env": {"A=B": "1"}}), g).contains("variable name"));
        assert!(err(json!({"command": "x", "env": {"": "1"}}), g).contains("variable name"));
        assert!(err(json!([1]), g).contains("object"));
        // `null` is no arguments (tools::args::object), so the missing command is named.
        assert!(err(json!(null), g).starts_with("command is required"));
        let e = ok(json!({"command": "x", "env": {"A": "1", "B": ""}}), g).env;
        assert_eq!(e, vec![("A".into(), "1".into()), ("B".into(), "".into())]);
    }

    #[test]
    fn the_child_sees_only_the_built_environment() {
        // End to end without touching this process's environment: scrub one inherited
        // name and one inherited value, add a caller var, and read the environment the
        // child was exec'd with (bash builtins only: PATH may be the scrubbed one).
        let mut inherited: Vec<(String, String)> = std::env::vars_os()
            .filter_map(|(k, v)| Some((k.into_string().ok()?, v.into_string().ok()?)))
            .filter(|(k, v)| !k.starts_with("HANDNODE_") && !v.is_empty())
            .collect();
        inherited.sort();
        inherited.dedup_by(|a, b| a.1 == b.1);
        assert!(
            inherited.len() >= 2,
            "the test runner has at least two variables"
        );
        let (by_name, by_value) = (&inherited[0], &inherited[1]);
        let host = super::super::ToolHost::new(ToolConfig {
            scrub_env: vec![by_name.0.clone()],
            scrub_values: vec![Secret::new(by_value.1.clone())],
            ..ToolConfig::default()
        })
        .unwrap();
        let script = "while IFS= read -r -d '' v; do echo \"${v%%=*}\"; done < /proc/$$/environ";
        let r = result(call_with(
            &host,
            CallLimits::GRANT,
            JobCtl::new(),
            json!({"command": script, "env": {"ADDED_BY_CALLER": "yes"}}),
        ));
        let out = r["structuredContent"]["stdout"].as_str().unwrap();
        let names: Vec<&str> = out.lines().collect();
        assert!(names.contains(&"ADDED_BY_CALLER"), "{out}");
        assert!(!names.contains(&by_name.0.as_str()), "{out}");
        assert!(!names.contains(&by_value.0.as_str()), "{out}");
    }

    #[test]
    fn no_worker_waits_on_a_child() {
        #[derive(Debug)]
        enum Event {
            Bash(ToolOutput),
            SysInfo,
        }
        let host = host();
        let pool = Pool::new(1, 16);
        let (events_tx, events) = crossbeam_channel::unbounded();
        let gate = std::env::temp_dir().join(format!(
            "handnode-gate-{}-{:?}",
            std::process::id(),
            std::time::SystemTime::now()
        ));
        // Each child waits for a gate the test opens only after sys_info answered, so
        // sys_info can only answer if the single worker is free while four children run.
        let script = format!("until [ -e '{}' ]; do sleep 0.02; done", gate.display());
        for _ in 0..4 {
            let (cx, tx) = (
                cx(&host, CallLimits::GRANT, JobCtl::new()),
                events_tx.clone(),
            );
            let args = json!({"command": script, "timeout_secs": 60});
            pool.submit(move || {
                start(
                    args,
                    cx,
                    Completion::new(move |o| tx.send(Event::Bash(o)).unwrap()),
                )
            })
            .unwrap();
        }
        let (cx, tx) = (
            cx(&host, CallLimits::GRANT, JobCtl::new()),
            events_tx.clone(),
        );
        pool.submit(move || {
            super::super::sysinfo::start(
                json!({}),
                cx,
                Completion::new(move |_| tx.send(Event::SysInfo).unwrap()),
            )
        })
        .unwrap();
        let first = events.recv_timeout(WATCHDOG).expect("sys_info answered");
        assert!(matches!(first, Event::SysInfo), "{first:?}");
        std::fs::write(&gate, b"").unwrap();
        for _ in 0..4 {
            match events
                .recv_timeout(WATCHDOG)
                .expect("every bash call finished")
            {
                Event::Bash(out) => assert_eq!(result(out)["structuredContent"]["exit_code"], 0),
                other => panic!("{other:?}"),
            }
        }
        let _ = std::fs::remove_file(&gate);
    }

    #[test]
    fn a_missing_bash_is_a_tool_error() {
        let msg = spawn_error(
            Path::new("/nope/bash"),
            &std::io::Error::from(std::io::ErrorKind::NotFound),
        );
        assert!(msg.contains("/nope/bash was not found"), "{msg}");
    }

    #[test]
    fn description_states_the_limits() {
        for needle in [
            "100 s",
            "120 s",
            "600",
            "86400",
            "137",
            "setsid",
            "1048576",
            "isError",
            "job_id",
            "bash_poll",
        ] {
            assert!(TOOL.description.contains(needle), "{needle}");
        }
        let s = schema();
        assert_eq!(s["required"], json!(["command"]));
        assert_eq!(
            s["properties"]["max_output_bytes"]["maximum"],
            MAX_OUTPUT_BYTES
        );
    }
}
