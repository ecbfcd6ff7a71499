//! `sys_info`: facts about the box for the agent. Facts that cannot change while the
//! daemon runs (hostname, OS, kernel, CPUs, the user it runs as, where bash is) are
//! gathered once at start in [`StaticFacts`]; each call reads only `/proc` files on top
//! (memory, uptime, load, tailnet addresses: Tailscale may come up after the daemon).
//! Nothing is spawned.

use std::net::{Ipv4Addr, Ipv6Addr};
use std::path::{Path, PathBuf};

use serde_json::{json, Value};

use super::{CallContext, ToolSpec};
use crate::jobs::Completion;
use crate::mcp::ToolOutput;
use crate::profiles::Profile;

pub static SPEC: ToolSpec = ToolSpec {
    name: "sys_info",
    description: "Describe this box: hostname, OS, kernel, architecture, CPUs, memory, \
uptime, tailnet addresses, the display backend and displays with their sizes, which tools \
work here (and why not), the user handnode runs as, and the grant you are working under \
(profile, expiry) with the longest a call may run. Read-only; takes no arguments.",
    input_schema: schema,
};

fn schema() -> Value {
    json!({"type": "object", "properties": {}})
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

/// Display facts until the display module provides them (`display::facts`): same shape,
/// `tools` maps each graphical tool to `{"works": bool, "why"?: string}`.
pub(crate) fn display_facts() -> Value {
    let why = "graphical tools are not built into this handnode yet";
    json!({
        "backend": "none",
        "displays": [],
        "tools": {
            "screenshot": {"works": false, "why": why},
            "mouse": {"works": false, "why": why},
            "key": {"works": false, "why": why},
        },
    })
}

/// `{name, works, why?}` for every local tool the caller's profile allows.
fn tool_status(profile: Profile, facts: &StaticFacts, display: &Value) -> Vec<Value> {
    profile
        .local_allow_list()
        .iter()
        .map(|name| {
            let status = match *name {
                "sys_info" => Ok(()),
                "bash" => facts.bash_status(),
                other => match display["tools"].get(other) {
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

/// Everything `sys_info` reports, as its `structuredContent`.
pub(crate) fn collect(cx: &CallContext) -> Value {
    let facts = &cx.host.facts;
    let (mem_total, mem_available) = parse_meminfo(&read_proc("/proc/meminfo"));
    let uptime = parse_uptime(&read_proc("/proc/uptime"));
    let load = parse_loadavg(&read_proc("/proc/loadavg"));
    let display = display_facts();
    let now = crate::timefmt::now_unix();
    let grant = cx.grant.as_ref().map(|g| {
        json!({
            "id": g.id,
            "session": g.session,
            "expires_at": crate::timefmt::rfc3339(g.expires_at),
            "expires_in_secs": g.expires_at.saturating_sub(now),
        })
    });
    json!({
        "hostname": facts.hostname,
        "os": facts.os,
        "kernel": facts.kernel,
        "arch": facts.arch,
        "cpus": facts.cpus,
        "cpu_model": facts.cpu_model,
        "memory": {"total_bytes": mem_total, "available_bytes": mem_available},
        "uptime_secs": uptime,
        "load_average": load,
        "tailnet_addresses": tailnet_addresses(),
        "display": display,
        "tools": tool_status(cx.profile, facts, &display),
        "agent": {
            "name": "handnode",
            "version": env!("CARGO_PKG_VERSION"),
            "pid": std::process::id(),
            "uid": facts.uid,
            "user": facts.user,
        },
        "profile": cx.profile.as_str(),
        "grant": grant,
        "max_run_secs": cx.limits.max_run_secs,
    })
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
        "\nagent: handnode {}, pid {}, running as {} (uid {})",
        s(&agent["version"]),
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
    out.push_str(&format!("\na call runs at most {} s", info["max_run_secs"]));
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

/// Answer a `sys_info` call. Arguments are ignored (the tool takes none).
pub fn start(_args: Value, cx: CallContext, done: Completion) {
    let info = collect(&cx);
    let text = summary(&info);
    done.complete(ToolOutput::Result(json!({
        "content": [{"type": "text", "text": text}],
        "structuredContent": info,
    })));
}
