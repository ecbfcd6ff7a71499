//! `sys_info`: facts about the box for the agent. Facts that cannot change while the
//! daemon runs (hostname, OS, kernel, CPUs, the user it runs as, where bash is) are
//! gathered once at start in [`StaticFacts`]; on top, `/proc` files are read (memory,
//! uptime, load, tailnet addresses: Tailscale may come up after the daemon), at most once
//! per `sys_info_ttl` (`ToolHost::live`): those reads cost ~70 µs of kernel time (the
//! fib_trie walk alone ~40 µs), several times the rest of a call. Nothing is spawned.

use std::net::{Ipv4Addr, Ipv6Addr};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::{json, Value};

use super::display::Probe;
use super::policy::ToolPolicy;
use super::{CallContext, GrantNote, Needs, Tool};
use crate::pool::Completion;
use crate::profiles::{Class, Profile};
use crate::wire::mcp::ToolOutput;

pub static TOOL: Tool = Tool {
    name: "sys_info",
    class: Class::Observe,
    class_reason: "reads facts about the box and changes nothing",
    description: "Describe this box in under 2 KiB: hostname, OS, kernel, architecture, \
CPUs, memory, the display and its size, the user handnode runs as, the grant you are working \
under (profile, expiry, the tools it lets you use and whether that reaches a shell), the \
longest a call may run, and which tools do not work here and why, in short. With \
{\"detail\":true}: everything, each tool's full reason, uptime, load, tailnet addresses, \
the display's helpers and environment, the grant's limits and usage. Read-only.",
    input_schema: schema,
    output_schema: Some(output_schema),
    start,
    inline: Some(from_cache),
    needs: Needs::Nothing,
    reach: crate::tools::Reach::Nothing,
    changes_screen: false,
    profiles: &[
        Profile::Owner,
        Profile::Desktop,
        Profile::Observe,
        Profile::Files,
        Profile::Apps,
    ],
};

/// `structuredContent`: the facts every answer has are typed; the rest are described in
/// the tool's description and may grow.
fn output_schema() -> Value {
    json!({
        "type": "object",
        "properties": {
            "hostname": {"type": "string"},
            "profile": {"type": "string"},
            "agent": {"type": "object", "properties": {
                "name": {"type": "string"},
                "version": {"type": "string"},
                "pid": {"type": "integer"},
            }},
            "detail": {"type": "boolean"},
            "tools": {"type": "array", "description": "with detail: every tool and whether it works"},
            "unavailable": {"type": "array", "description": "without detail: the tools that do not work, grouped by why"},
            "allowed_tools": {"type": "array", "items": {"type": "string"}},
            "display": {"type": "object"},
            "grant": {"type": ["object", "null"]},
            "max_run_secs": {"type": "integer"},
        },
        "required": ["hostname", "profile", "agent", "display", "grant", "detail"],
    })
}

fn schema() -> Value {
    json!({"type": "object", "properties": {
        "detail": {"type": "boolean", "description": "everything, not just the facts to act on first (default false)"},
    }})
}

/// Facts that do not change while the daemon runs, gathered once at start.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct StaticFacts {
    pub hostname: String,
    /// `PRETTY_NAME` from os-release, else "Linux".
    pub os: String,
    /// Kernel release (`uname -r`).
    pub kernel: String,
    /// Machine hardware name (`uname -m`).
    pub arch: String,
    /// CPUs this process may use.
    pub cpus: usize,
    pub cpu_model: Option<String>,
    /// The user handnode runs as; children run as this user too.
    pub uid: u32,
    pub user: Option<String>,
    /// The `bash` found on the daemon's `PATH` at start.
    pub bash: Option<PathBuf>,
    /// Why child processes cannot be watched, if they cannot (no pidfd support).
    pub pidfd_error: Option<String>,
}

impl StaticFacts {
    pub fn gather() -> Self {
        let uname = rustix::system::uname();
        let text = |c: &std::ffi::CStr| c.to_string_lossy().into_owned();
        let uid = rustix::process::getuid().as_raw();
        let pidfd_error = rustix::process::pidfd_open(
            rustix::process::getpid(),
            rustix::process::PidfdFlags::empty(),
        )
        .err()
        .map(|e| format!("pidfd_open failed ({e}): handnode needs Linux 5.3 or newer"));
        StaticFacts {
            hostname: text(uname.nodename()),
            os: ["/etc/os-release", "/usr/lib/os-release"]
                .iter()
                .find_map(|p| parse_os_release(&std::fs::read_to_string(p).ok()?))
                .unwrap_or_else(|| "Linux".into()),
            kernel: text(uname.release()),
            arch: text(uname.machine()),
            cpus: std::thread::available_parallelism().map_or(1, |n| n.get()),
            cpu_model: std::fs::read_to_string("/proc/cpuinfo")
                .ok()
                .and_then(|t| parse_cpu_model(&t)),
            uid,
            user: std::fs::read_to_string("/etc/passwd")
                .ok()
                .and_then(|t| user_name(&t, uid)),
            bash: find_in_path("bash", std::env::var_os("PATH").as_deref()),
            pidfd_error,
        }
    }

    /// Whether `bash` can run here, and if not, why.
    pub fn bash_status(&self) -> Result<(), String> {
        if let Some(e) = &self.pidfd_error {
            return Err(e.clone());
        }
        if self.bash.is_none() {
            return Err("bash was not found on handnode's PATH: install bash".into());
        }
        Ok(())
    }
}

/// `PRETTY_NAME` of an os-release file, unquoted.
pub(crate) fn parse_os_release(text: &str) -> Option<String> {
    let raw = text
        .lines()
        .find_map(|l| l.trim().strip_prefix("PRETTY_NAME="))?;
    let value = match raw.as_bytes().first() {
        Some(b'"') | Some(b'\'') if raw.len() >= 2 && raw.ends_with(&raw[..1]) => {
            let inner = &raw[1..raw.len() - 1];
            let mut out = String::with_capacity(inner.len());
            let mut chars = inner.chars();
            while let Some(c) = chars.next() {
                match c {
                    '\\' => out.extend(chars.next()),
                    c => out.push(c),
                }
            }
            out
        }
        _ => raw.to_string(),
    };
    Some(value).filter(|v| !v.is_empty())
}

/// The first `model name` (x86) or `Model` (Raspberry Pi) line of `/proc/cpuinfo`.
pub(crate) fn parse_cpu_model(text: &str) -> Option<String> {
    ["model name", "Model", "Hardware"].iter().find_map(|key| {
        text.lines().find_map(|l| {
            let (k, v) = l.split_once(':')?;
            (k.trim() == *key && !v.trim().is_empty()).then(|| v.trim().to_string())
        })
    })
}

/// The login name of `uid` in an `/etc/passwd` text.
pub(crate) fn user_name(passwd: &str, uid: u32) -> Option<String> {
    passwd.lines().find_map(|l| {
        let mut fields = l.split(':');
        let name = fields.next()?;
        let _password = fields.next()?;
        (fields.next()?.parse::<u32>().ok()? == uid).then(|| name.to_string())
    })
}

/// The first executable regular file named `program` in a `PATH` value.
pub(crate) fn find_in_path(program: &str, path: Option<&std::ffi::OsStr>) -> Option<PathBuf> {
    use std::os::unix::fs::PermissionsExt;
    let path = path.unwrap_or(std::ffi::OsStr::new("/usr/local/bin:/usr/bin:/bin"));
    std::env::split_paths(path)
        .filter(|dir| dir.is_absolute())
        .map(|dir| dir.join(program))
        .find(|p| {
            std::fs::metadata(p).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
        })
}

/// `(MemTotal, MemAvailable)` in bytes from `/proc/meminfo`.
pub(crate) fn parse_meminfo(text: &str) -> (Option<u64>, Option<u64>) {
    let field = |name: &str| {
        text.lines().find_map(|l| {
            let rest = l.strip_prefix(name)?.strip_prefix(':')?;
            let kib: u64 = rest.trim().trim_end_matches("kB").trim().parse().ok()?;
            Some(kib.saturating_mul(1024))
        })
    };
    (field("MemTotal"), field("MemAvailable"))
}

/// Seconds since boot from `/proc/uptime`.
pub(crate) fn parse_uptime(text: &str) -> Option<u64> {
    let secs: f64 = text.split_whitespace().next()?.parse().ok()?;
    (secs.is_finite() && secs >= 0.0).then_some(secs as u64)
}

/// The three load averages from `/proc/loadavg`.
pub(crate) fn parse_loadavg(text: &str) -> Option<[f64; 3]> {
    let mut it = text.split_whitespace().map(|f| f.parse::<f64>().ok());
    Some([it.next()??, it.next()??, it.next()??])
}

/// Whether an address is in Tailscale's CGNAT range 100.64.0.0/10.
pub(crate) fn is_tailnet_v4(a: Ipv4Addr) -> bool {
    let o = a.octets();
    o[0] == 100 && (o[1] & 0xc0) == 64
}

/// Whether an address is in Tailscale's ULA range fd7a:115c:a1e0::/48.
pub(crate) fn is_tailnet_v6(a: Ipv6Addr) -> bool {
    a.segments()[..3] == [0xfd7a, 0x115c, 0xa1e0]
}

/// The box's own IPv4 addresses, from `/proc/net/fib_trie`: a leaf `|-- a.b.c.d`
/// followed by a `/32 host LOCAL` line is an address of a local interface.
pub(crate) fn local_ipv4s(fib_trie: &str) -> Vec<Ipv4Addr> {
    let mut out = Vec::new();
    let mut leaf: Option<Ipv4Addr> = None;
    for line in fib_trie.lines() {
        let t = line.trim();
        if let Some(addr) = t.strip_prefix("|-- ") {
            leaf = addr.trim().parse().ok();
        } else if t.starts_with("/32 host LOCAL") {
            if let Some(a) = leaf {
                if !out.contains(&a) {
                    out.push(a);
                }
            }
        } else if !t.starts_with('/') {
            leaf = None;
        }
    }
    out
}

/// `(address, interface)` of every IPv6 address, from `/proc/net/if_inet6`.
pub(crate) fn local_ipv6s(if_inet6: &str) -> Vec<(Ipv6Addr, String)> {
    if_inet6
        .lines()
        .filter_map(|l| {
            let fields: Vec<&str> = l.split_whitespace().collect();
            let (hex, ifname) = (fields.first()?, fields.get(5)?);
            if hex.len() != 32 {
                return None;
            }
            let bits = u128::from_str_radix(hex, 16).ok()?;
            Some((Ipv6Addr::from(bits), ifname.to_string()))
        })
        .collect()
}

/// The box's tailnet addresses (Tailscale's IPv4 and IPv6 ranges), read now.
pub(crate) fn tailnet_addresses() -> Vec<String> {
    let read = |p: &str| std::fs::read_to_string(p).unwrap_or_default();
    let mut out: Vec<String> = local_ipv4s(&read("/proc/net/fib_trie"))
        .into_iter()
        .filter(|a| is_tailnet_v4(*a))
        .map(|a| a.to_string())
        .collect();
    out.extend(
        local_ipv6s(&read("/proc/net/if_inet6"))
            .into_iter()
            .filter(|(a, _)| is_tailnet_v6(*a))
            .map(|(a, _)| a.to_string()),
    );
    out
}

/// `{name, works, why?}` for every local tool the caller's policy allows, from the fact
/// each tool [`Needs`].
pub(crate) fn tool_status(policy: &ToolPolicy, facts: &StaticFacts, display: &Value) -> Vec<Value> {
    super::registered()
        .iter()
        .filter(|tool| policy.allows(tool.name))
        .map(|tool| {
            let name = tool.name;
            let status = match tool.needs {
                Needs::Nothing => Ok(()),
                Needs::Bash => facts.bash_status(),
                Needs::Screen => match (display["backend"].as_str(), display["problem"].as_str()) {
                    (_, Some(problem)) => Err(problem.to_string()),
                    (Some(backend), None) if backend != "none" => Ok(()),
                    _ => Err("no display to start windows on".to_string()),
                },
                Needs::Display(_) => match display["tools"].get(name) {
                    Some(t) if t["works"] == true => Ok(()),
                    Some(t) => Err(t["why"]
                        .as_str()
                        .unwrap_or("the display backend reports it unavailable")
                        .to_string()),
                    None => Err("no display facts for this tool".to_string()),
                },
            };
            match status {
                Ok(()) => json!({"name": name, "works": true}),
                Err(why) => json!({"name": name, "works": false, "why": why}),
            }
        })
        .collect()
}

fn gib(bytes: u64) -> String {
    format!("{:.1} GiB", bytes as f64 / (1u64 << 30) as f64)
}

fn human_secs(secs: u64) -> String {
    let (d, h, m) = (secs / 86_400, (secs / 3600) % 24, (secs / 60) % 60);
    if d > 0 {
        format!("{d}d {h}h {m}m")
    } else if h > 0 {
        format!("{h}h {m}m")
    } else {
        format!("{m}m {}s", secs % 60)
    }
}

fn read_proc(path: impl AsRef<Path>) -> String {
    std::fs::read_to_string(path).unwrap_or_default()
}

/// Facts read from `/proc` that change while the daemon runs.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct LiveFacts {
    pub mem_total: Option<u64>,
    pub mem_available: Option<u64>,
    /// Seconds since boot when read.
    pub uptime: Option<u64>,
    pub load: Option<[f64; 3]>,
    pub tailnet: Vec<String>,
}

impl LiveFacts {
    pub fn read() -> Self {
        let (mem_total, mem_available) = parse_meminfo(&read_proc("/proc/meminfo"));
        LiveFacts {
            mem_total,
            mem_available,
            uptime: parse_uptime(&read_proc("/proc/uptime")),
            load: parse_loadavg(&read_proc("/proc/loadavg")),
            tailnet: tailnet_addresses(),
        }
    }
}

/// The last `sys_info` answer given from the caches, as JSON text, and what it was built
/// from: an agent polling sys_info gets the same text until a second passes or a cache is
/// refreshed, without building and serializing the whole value again.
#[derive(Debug, Default)]
pub struct AnswerCache {
    last: Mutex<Option<(AnswerKey, Arc<str>)>>,
}

/// Everything a cached answer depends on.
#[derive(Debug)]
struct AnswerKey {
    policy: Arc<ToolPolicy>,
    grant: Option<GrantNote>,
    max_run_secs: u64,
    /// Unix seconds: `expires_in_secs` counts in them.
    now: u64,
    live: Arc<LiveFacts>,
    /// Whole seconds the `/proc` copy had aged: the uptime counts in them.
    live_age: u64,
    probe: Arc<Probe>,
    /// The answer asked for `{"detail":true}`.
    detail: bool,
    /// The own display's wheel epoch (§23): every change of hands is a new answer.
    wheel: Option<u64>,
}

impl AnswerKey {
    fn same(&self, other: &AnswerKey) -> bool {
        (Arc::ptr_eq(&self.policy, &other.policy) || self.policy == other.policy)
            && self.grant == other.grant
            && self.max_run_secs == other.max_run_secs
            && self.now == other.now
            && Arc::ptr_eq(&self.live, &other.live)
            && self.live_age == other.live_age
            && Arc::ptr_eq(&self.probe, &other.probe)
            && self.detail == other.detail
            && self.wheel == other.wheel
    }
}

impl AnswerCache {
    fn get(&self, key: &AnswerKey) -> Option<Arc<str>> {
        let last = self.last.lock().unwrap_or_else(|e| e.into_inner());
        let (k, json) = last.as_ref()?;
        k.same(key).then(|| Arc::clone(json))
    }

    fn put(&self, key: AnswerKey, json: Arc<str>) {
        *self.last.lock().unwrap_or_else(|e| e.into_inner()) = Some((key, json));
    }
}

/// Everything `sys_info` reports, as its `structuredContent`.
pub(crate) fn collect(cx: &CallContext) -> Value {
    collect_from(
        cx,
        cx.host
            .live
            .get(cx.host.config.sys_info_ttl, LiveFacts::read),
        super::display::call_facts(cx),
        crate::base::timefmt::now_unix(),
    )
}

/// [`collect`] from `/proc` facts of a given age, the display facts and the time.
fn collect_from(
    cx: &CallContext,
    (live, age): (Arc<LiveFacts>, Duration),
    display: Value,
    now: u64,
) -> Value {
    let facts = &cx.host.facts;
    let (mem_total, mem_available) = (live.mem_total, live.mem_available);
    // Uptime keeps counting while the copy ages.
    let uptime = live.uptime.map(|u| u + age.as_secs());
    let load = live.load;
    let confine = &cx.host.confine;
    let grant = cx.grant.as_ref().map(|g| {
        // The grant's limits and what it uses of them now (§16).
        let usage = confine.usage_json(&g.id);
        json!({
            "id": g.id,
            "session": g.session,
            "expires_at": crate::base::timefmt::rfc3339(g.expires_at),
            "expires_in_secs": g.expires_at.saturating_sub(now),
            "limits": usage["limits"],
            "usage": usage.get("usage").cloned().unwrap_or(Value::Null),
        })
    });
    let tools = tool_status(&cx.policy, facts, &display);
    // A grant's note names the tools that wait for a decision now (its gate's answer).
    let escalation = cx.policy.escalation(|t| {
        cx.grant
            .as_ref()
            .is_some_and(|g| g.approve.iter().any(|a| a == t))
    });
    let mut info = json!({
        "hostname": facts.hostname,
        "os": facts.os,
        "kernel": facts.kernel,
        "arch": facts.arch,
        "cpus": facts.cpus,
        "cpu_model": facts.cpu_model,
        "memory": {"total_bytes": mem_total, "available_bytes": mem_available},
        "uptime_secs": uptime,
        "load_average": load,
        "tailnet_addresses": &live.tailnet,
        "agent": {
            "name": "handnode",
            "version": env!("CARGO_PKG_VERSION"),
            "build": crate::base::build_info::to_json(),
            "pid": std::process::id(),
            "uid": facts.uid,
            "user": facts.user,
        },
        "profile": cx.policy.profile().as_str(),
        "allowed_tools": match cx.host.sources.get() {
            Some(here) => cx.policy.lent(here.borrow()),
            None => cx.policy.present_tools(cx.host.config.upstreams),
        },
        "upstream_tools_without_class": cx.policy.sees_unclassified(),
        "shell": escalation.shell.as_str(),
        "max_run_secs": cx.limits.max_run_secs,
    });
    // Values are moved in, not written inside `json!`: it deep-copies a `Value` through
    // the serializer, which was most of a call's cost.
    let map = info.as_object_mut().expect("json! object");
    map.insert("display".into(), display);
    map.insert("tools".into(), Value::Array(tools));
    map.insert("grant".into(), grant.unwrap_or(Value::Null));
    map.insert("containment".into(), confine.containment().as_str().into());
    if let Some(mode) = confine.containment().mode() {
        map.insert("cgroup_mode".into(), mode.as_str().into());
    }
    let isolation = super::display::own::call_isolation(cx);
    map.insert("isolation".into(), isolation.into());
    // Who drives the call's display (§23), its own or the box's: the agent, or the lender.
    if let Some(wheel) = call_wheel(cx) {
        map.insert("wheel".into(), wheel.holder().as_str().into());
    }
    let open_channel = (isolation == "none"
        && super::display::own::walls_apply(cx)
        && escalation.shell.as_str() != "no")
        .then_some(crate::walls::UNWALLED_SHELL);
    let because = match (escalation.because, open_channel) {
        (Some(b), Some(o)) => Some(format!("{b}; {o}")),
        (b, o) => b.or(o.map(String::from)),
    };
    if let Some(because) = because {
        map.insert("shell_because".into(), because.into());
    }
    info
}

/// A human summary of [`collect`]'s value.
pub(crate) fn summary(info: &Value) -> String {
    let s = |v: &Value| v.as_str().unwrap_or("?").to_string();
    let mut out = format!(
        "{} — {}, kernel {} ({}), {} CPUs",
        s(&info["hostname"]),
        s(&info["os"]),
        s(&info["kernel"]),
        s(&info["arch"]),
        info["cpus"]
    );
    if let Some(model) = info["cpu_model"].as_str() {
        out.push_str(&format!(" ({model})"));
    }
    let mem = &info["memory"];
    if let (Some(total), Some(avail)) =
        (mem["total_bytes"].as_u64(), mem["available_bytes"].as_u64())
    {
        out.push_str(&format!(
            "\nmemory: {} total, {} available",
            gib(total),
            gib(avail)
        ));
    }
    if let Some(up) = info["uptime_secs"].as_u64() {
        out.push_str(&format!("\nuptime: {}", human_secs(up)));
    }
    if let Some(load) = info["load_average"].as_array() {
        let load: Vec<String> = load.iter().map(|l| format!("{l}")).collect();
        out.push_str(&format!(", load {}", load.join(" ")));
    }
    let tailnet: Vec<String> = info["tailnet_addresses"]
        .as_array()
        .map(|a| a.iter().map(s).collect())
        .unwrap_or_default();
    out.push_str(&format!(
        "\ntailnet: {}",
        if tailnet.is_empty() {
            "no tailnet address".to_string()
        } else {
            tailnet.join(", ")
        }
    ));
    let display = &info["display"];
    let displays = display["displays"].as_array().map_or(0, Vec::len);
    out.push_str(&format!(
        "\ndisplay: backend {}, {displays} display(s)",
        s(&display["backend"])
    ));
    for (i, d) in display["displays"]
        .as_array()
        .into_iter()
        .flatten()
        .enumerate()
    {
        out.push_str(&format!("\n  display {i}: {d}"));
    }
    let agent = &info["agent"];
    out.push_str(&format!(
        "\nagent: handnode {} ({}, {}), pid {}, running as {} (uid {})",
        s(&agent["version"]),
        s(&agent["build"]["target"]),
        s(&agent["build"]["libc"]),
        agent["pid"],
        agent["user"].as_str().unwrap_or("?"),
        agent["uid"]
    ));
    if agent["uid"] == 0 {
        out.push_str(": bash is a root shell");
    }
    match info["grant"].as_object() {
        Some(g) => out.push_str(&format!(
            "\ngrant: profile {}, session {}, expires {} (in {} s)",
            s(&info["profile"]),
            s(&g["session"]),
            s(&g["expires_at"]),
            g["expires_in_secs"]
        )),
        None => out.push_str(&format!(
            "\nno grant: the box's owner on the local /mcp endpoint (profile {})",
            s(&info["profile"])
        )),
    }
    if let Some(limits) = info["grant"]["limits"].as_object() {
        let usage = &info["grant"]["usage"];
        out.push_str(&format!(
            "\nthis grant's processes ({}{}): memory {} of {} bytes, processes {} of {}, cpu weight {}",
            s(&info["containment"]),
            info["cgroup_mode"].as_str().map(|m| format!(" {m}")).unwrap_or_default(),
            usage["memory_bytes"],
            limits["memory_max"],
            usage["pids"],
            limits["pids_max"],
            limits["cpu_weight"],
        ));
    }
    push_lending(&mut out, info, info);
    out.push_str("\ntools:");
    for t in info["tools"].as_array().into_iter().flatten() {
        if t["works"] == true {
            out.push_str(&format!("\n  {}: works", s(&t["name"])));
        } else {
            out.push_str(&format!(
                "\n  {}: unavailable: {}",
                s(&t["name"]),
                s(&t["why"])
            ));
        }
    }
    out
}

/// The lines both summaries share: the tools allowed (from the whole value `info`; browser
/// tools by count past a few, as tools/list names each one), whether that reaches a shell
/// and the longest a call may run (from `facts`, the whole value or the brief one).
fn push_lending(out: &mut String, info: &Value, facts: &Value) {
    let s = |v: &Value| v.as_str().unwrap_or("?").to_string();
    let allowed: Vec<String> = info["allowed_tools"]
        .as_array()
        .map(|a| a.iter().map(s).collect())
        .unwrap_or_default();
    let (browser, local): (Vec<String>, Vec<String>) =
        allowed.into_iter().partition(|t| t.starts_with("browser_"));
    let mut listed = local;
    match browser.len() {
        0 => {}
        n @ 1..=BRIEF_BROWSER_NAMES => listed.extend(browser.into_iter().take(n)),
        n => listed.push(format!("{n} browser tools (browser_*)")),
    }
    out.push_str(&format!("\nyou may use: {}", listed.join(", ")));
    if facts["upstream_tools_without_class"] == true {
        out.push_str(", and any other tool of the configured upstreams");
    }
    out.push_str(&format!("\nreaches a shell: {}", s(&facts["shell"])));
    if let Some(because) = facts["shell_because"].as_str() {
        out.push_str(&format!(" ({because})"));
    }
    out.push_str(&format!(
        "\na call runs at most {} s",
        facts["max_run_secs"]
    ));
}

/// Bytes of a reason kept in the brief answer: its first clause says what is wrong; the
/// rest (how to fix it) is in `{"detail":true}`.
const BRIEF_WHY_BYTES: usize = 120;

/// The brief answer's reason for tools that fail for the display's problem, said once.
const SEE_DISPLAY_PROBLEM: &str = "the display's problem (display.problem)";

/// Browser tools the brief text names one by one; past it, their count.
const BRIEF_BROWSER_NAMES: usize = 3;

/// `detail` from the arguments: absent or `null` is `false`; any other non-boolean is
/// refused with what to send instead (unknown fields are ignored).
fn wants_detail(args: &Value) -> Result<bool, String> {
    match args.get("detail") {
        None | Some(Value::Null) => Ok(false),
        Some(Value::Bool(b)) => Ok(*b),
        Some(other) => Err(format!(
            "sys_info: detail must be true or false, not {}; send {{\"detail\":true}} for everything",
            match other {
                Value::String(_) => "a string",
                Value::Number(_) => "a number",
                Value::Array(_) => "an array",
                _ => "an object",
            }
        )),
    }
}

/// A reason cut for the brief answer: its first sentence, at most [`BRIEF_WHY_BYTES`],
/// saying when it was cut.
fn brief_why(why: &str) -> String {
    let why = why.split_once(". ").map_or(why, |(first, _)| first);
    let cut = crate::base::text::head(why, BRIEF_WHY_BYTES);
    if cut.len() < why.len() {
        format!("{}…", cut.trim_end())
    } else {
        why.to_string()
    }
}

/// The tools that do not work, grouped by their (cut) reason in first-seen order:
/// `[{"tools":[names],"why"}]`.
fn unavailable(tools: &Value) -> Vec<Value> {
    let mut groups: Vec<(String, Vec<Value>)> = Vec::new();
    for t in tools.as_array().into_iter().flatten() {
        if t["works"] == true {
            continue;
        }
        let why = brief_why(t["why"].as_str().unwrap_or("unavailable"));
        match groups.iter_mut().find(|(w, _)| *w == why) {
            Some((_, names)) => names.push(t["name"].clone()),
            None => groups.push((why, vec![t["name"].clone()])),
        }
    }
    groups
        .into_iter()
        .map(|(why, tools)| json!({"tools": tools, "why": why}))
        .collect()
}

/// The default answer's `structuredContent` (contract §24: ≤ 2 KiB with its text): what an
/// agent acts on first, taken from [`collect`]'s value.
fn brief(info: &Value) -> Value {
    let mut out = serde_json::Map::new();
    out.insert("detail".into(), false.into());
    for key in [
        "hostname",
        "os",
        "kernel",
        "arch",
        "cpus",
        "memory",
        "profile",
        "shell",
        "max_run_secs",
        "containment",
        "isolation",
        "wheel",
    ] {
        if let Some(v) = info.get(key).filter(|v| !v.is_null()) {
            out.insert(key.into(), v.clone());
        }
    }
    // Why it reaches a shell, without what follows from it (detail has that).
    if let Some(because) = info["shell_because"].as_str() {
        let short = because.split_once(": ").map_or(because, |(first, _)| first);
        out.insert("shell_because".into(), short.into());
    }
    if info["upstream_tools_without_class"] == true {
        out.insert("upstream_tools_without_class".into(), true.into());
    }
    let agent = &info["agent"];
    out.insert(
        "agent".into(),
        json!({"name": agent["name"], "version": agent["version"], "pid": agent["pid"],
               "user": agent["user"], "uid": agent["uid"]}),
    );
    let grant = info["grant"].as_object().map(|g| {
        json!({"id": g["id"], "session": g["session"], "expires_at": g["expires_at"],
               "expires_in_secs": g["expires_in_secs"], "usage": g["usage"]})
    });
    out.insert("grant".into(), grant.unwrap_or(Value::Null));
    let d = &info["display"];
    let mut display = serde_json::Map::new();
    display.insert("backend".into(), d["backend"].clone());
    let screens: Vec<Value> = d["displays"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|s| json!({"name": s["name"], "width": s["width"], "height": s["height"]}))
        .collect();
    display.insert("displays".into(), screens.into());
    // A grant's own display: whether it runs and its size (detail has its dir and notes).
    if let Some(own) = d.get("own_display").filter(|o| o.is_object()) {
        let mut brief_own = serde_json::Map::new();
        for key in ["running", "display", "size"] {
            if let Some(v) = own.get(key) {
                brief_own.insert(key.into(), v.clone());
            }
        }
        display.insert("own_display".into(), brief_own.into());
    }
    let problem = d["problem"].as_str().map(brief_why);
    let mut groups = unavailable(&info["tools"]);
    // The display's own problem is said once, under display.
    for g in &mut groups {
        if problem.as_deref() == g["why"].as_str() {
            g["why"] = SEE_DISPLAY_PROBLEM.into();
        }
    }
    if let Some(problem) = problem {
        display.insert("problem".into(), problem.into());
    }
    out.insert("display".into(), display.into());
    out.insert("unavailable".into(), groups.into());
    // tools/list names every tool the agent may use; the text counts the browser's.
    out.insert(
        "allowed_tools_count".into(),
        info["allowed_tools"].as_array().map_or(0, Vec::len).into(),
    );
    out.into()
}

/// The brief answer's text: [`brief`]'s facts (`b`) for a person or a model to read, and
/// the tools allowed from the whole value (`info`).
fn brief_summary(info: &Value, b: &Value) -> String {
    let s = |v: &Value| v.as_str().unwrap_or("?").to_string();
    let mut out = format!(
        "{} — {}, kernel {} ({}), {} CPUs",
        s(&b["hostname"]),
        s(&b["os"]),
        s(&b["kernel"]),
        s(&b["arch"]),
        b["cpus"]
    );
    let mem = &b["memory"];
    if let (Some(total), Some(avail)) =
        (mem["total_bytes"].as_u64(), mem["available_bytes"].as_u64())
    {
        out.push_str(&format!(
            ", memory {} ({} available)",
            gib(total),
            gib(avail)
        ));
    }
    let display = &b["display"];
    let sizes: Vec<String> = display["displays"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|d| format!("{} {}x{}", s(&d["name"]), d["width"], d["height"]))
        .collect();
    out.push_str(&format!("\ndisplay: backend {}", s(&display["backend"])));
    if !sizes.is_empty() {
        out.push_str(&format!(", {}", sizes.join(", ")));
    }
    if let Some(problem) = display["problem"].as_str() {
        out.push_str(&format!(" ({problem})"));
    }
    let agent = &b["agent"];
    out.push_str(&format!(
        "\nagent: handnode {}, pid {}, running as {} (uid {})",
        s(&agent["version"]),
        agent["pid"],
        agent["user"].as_str().unwrap_or("?"),
        agent["uid"]
    ));
    if agent["uid"] == 0 {
        out.push_str(": bash is a root shell");
    }
    match b["grant"].as_object() {
        Some(g) => out.push_str(&format!(
            "\ngrant: profile {}, session {}, expires {} (in {} s)",
            s(&b["profile"]),
            s(&g["session"]),
            s(&g["expires_at"]),
            g["expires_in_secs"]
        )),
        None => out.push_str(&format!(
            "\nno grant: the box's owner on the local /mcp endpoint (profile {})",
            s(&b["profile"])
        )),
    }
    push_lending(&mut out, info, b);
    for group in b["unavailable"].as_array().into_iter().flatten() {
        let names: Vec<String> = group["tools"]
            .as_array()
            .map(|a| a.iter().map(s).collect())
            .unwrap_or_default();
        let why = match group["why"].as_str() {
            Some(SEE_DISPLAY_PROBLEM) => "the display's problem, above".to_string(),
            _ => s(&group["why"]),
        };
        out.push_str(&format!("\nnot working: {}: {why}", names.join(", ")));
    }
    out.push_str("\nmore: sys_info {\"detail\":true}");
    out
}

/// Answer a `sys_info` call: the brief answer, or everything with `{"detail":true}`.
pub fn start(args: Value, cx: CallContext, done: Completion) {
    match wants_detail(&args) {
        Ok(detail) => done.complete(output(collect(&cx), detail)),
        Err(why) => done.complete(ToolOutput::tool_error(why)),
    }
}

/// The answer when everything it needs is cached and fresh (the `/proc` copy and the
/// display probe), else `None`. It then costs about what `tools/list` does and never
/// waits on a file, a child or a lock, so the connection's own thread may answer it: two
/// thread hops to a pool worker and back would cost more than the call.
pub fn from_cache(args: &Value, cx: &CallContext) -> Option<ToolOutput> {
    // A bad argument is answered on a worker, with the rest of the errors.
    let detail = wants_detail(args).ok()?;
    let (live, age) = cx.host.live.cached(cx.host.config.sys_info_ttl)?;
    if cx.policy.own_display() {
        return None; // its own display's facts: answered on a worker
    }
    let probe = cx.host.display.cached(&cx.host.config)?;
    let key = AnswerKey {
        policy: Arc::clone(&cx.policy),
        grant: cx.grant.clone(),
        max_run_secs: cx.limits.max_run_secs,
        now: crate::base::timefmt::now_unix(),
        live: Arc::clone(&live),
        live_age: age.as_secs(),
        probe: Arc::clone(&probe),
        detail,
        wheel: call_wheel(cx).map(|w| w.epoch()),
    };
    let answers = &cx.host.sys_info_answers;
    let json = match answers.get(&key) {
        Some(json) => json,
        None => {
            let ToolOutput::Result(result) = output(
                collect_from(cx, (live, age), probe.to_json(), key.now),
                detail,
            ) else {
                unreachable!("output builds a result")
            };
            let json: Arc<str> = result.to_string().into();
            answers.put(key, Arc::clone(&json));
            json
        }
    };
    Some(ToolOutput::Encoded {
        json,
        is_error: false,
    })
}

fn output(mut info: Value, detail: bool) -> ToolOutput {
    if !detail {
        let b = brief(&info);
        let text = brief_summary(&info, &b);
        return ToolOutput::Result(
            json!({"content": [{"type": "text", "text": text}], "structuredContent": b}),
        );
    }
    info.as_object_mut()
        .expect("json! object")
        .insert("detail".into(), true.into());
    let text = summary(&info);
    let mut result = json!({"content": [{"type": "text", "text": text}]});
    result
        .as_object_mut()
        .expect("json! object")
        .insert("structuredContent".into(), info);
    ToolOutput::Result(result)
}

/// The wheel of the call's display (§23), but for a browser grant, which drives none.
fn call_wheel(cx: &CallContext) -> Option<Arc<super::display::wheel::Wheel>> {
    (cx.policy.profile() != crate::profiles::Profile::Browser)
        .then(|| super::display::boxview::call_wheel(cx))
}

#[cfg(test)]
mod tests;
