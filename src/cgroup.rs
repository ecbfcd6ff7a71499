//! Confinement (§16): every process a tool starts lives in its grant's cgroup, every end
//! kills the whole cgroup, and each grant runs under memory, process and CPU limits.
//!
//! **Layout.** Under the daemon's own cgroup `<own>` (from `/proc/self/cgroup`) handnode
//! keeps `<own>/handnode.<instance>/grants/<grant id>/<run>`: one group per grant and one
//! per run (a `bash` call or a job) beneath it. `<instance>` is a hash of the state dir, so
//! two daemons never share a subtree and a restart with the same state dir finds what a
//! SIGKILLed one left ([`Confine::clean_leftovers`] kills and removes it at start).
//!
//! **Modes.** `v2`: cgroup2 holds the `memory` and `pids` controllers; limits are set on
//! the grant's group (`memory.max`, `memory.swap.max`, `pids.max`, `cpu.weight`). A
//! delegated service (systemd `Delegate=yes`) must keep no process in a group whose
//! controllers it enables, so the daemon first moves itself into the leaf
//! `<own>/handnode-daemon`; root in the root cgroup (no systemd) needs no move. `hybrid`:
//! cgroup2 is mounted (CI: `/sys/fs/cgroup/unified`) without controllers while v1 holds
//! them; the kill uses the cgroup2 tree (`cgroup.kill` needs no controller) and the limits
//! a `handnode.<instance>/grants/<grant id>` group in each v1 `memory`, `pids` and `cpu`
//! hierarchy (runs go straight into the grant's v1 groups).
//!
//! **Placing a child, race-free.** A run's child enters its groups between `fork` and
//! `exec` ([`enter`], the crate's one reviewed `unsafe`: a `pre_exec` hook that writes `0`
//! to `cgroup.procs` files the parent opened), so nothing the program starts, however
//! soon, can be outside; writing the pid after spawn would race with a child that forks
//! at once. A write that fails fails the spawn, naming the file ([`RunGroup::spawn`]),
//! and the program never runs. This replaced a `/bin/sh` trampoline (`echo $$ >…
//! && exec "$@"`) that cost a shell's start per call (docs/performance.md).
//!
//! **Killing.** `cgroup.kill` (Linux 5.14+) SIGKILLs every process in a subtree at once;
//! before 5.14 the group is frozen (`cgroup.freeze`), every pid in it SIGKILLed, and
//! thawed. An ended run's group that is empty is kept as a spare for the grant's next run
//! (at most [`SPARE_RUNS`] a grant; a spare is checked empty again when taken), so a call
//! costs no `mkdir`/`rmdir` in cgroupfs; the rest are removed once empty, one still
//! emptying retried when the grant starts its next run and when the grant ends.
//!
//! **Fallback.** Where no usable cgroup exists (cgroup v1 only, no write access, some
//! containers), or with `--containment subreaper`, the daemon makes itself a child
//! subreaper (`PR_SET_CHILD_SUBREAPER`): what a run leaves behind is re-parented to the
//! daemon rather than to init, and a run's end kills every process that still carries the
//! run's marker variable ([`MARKER_ENV`]); the daemon's stop kills
//! every descendant (every one carrying its markers, when other daemons share the process,
//! as in-process tests do). A process that both unsets the marker and leaves the process group
//! escapes a run's end until the daemon stops: that is why `doctor` says how to get the
//! cgroup mode.

use std::collections::{HashMap, HashSet};
use std::fs;
use std::io;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rustix::process::{Pid, Signal};
use serde_json::{json, Value};

#[allow(unsafe_code)]
mod enter;

/// The variable every process of a run carries (its value names the run): what the
/// subreaper attributes by, and what a restart finds a crashed daemon's jobs by.
pub const MARKER_ENV: &str = "HN_JOB_ID";

/// The leaf a delegated daemon moves itself into.
pub const DAEMON_LEAF: &str = "handnode-daemon";

/// How long removing a killed group waits for its processes to be gone.
const REMOVE_PATIENCE: Duration = Duration::from_secs(3);

/// cgroup v2's `cpu.weight` default; v1 `cpu.shares` 1024 stands for it.
const DEFAULT_WEIGHT: u64 = 100;

/// What contains a grant's processes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Containment {
    Cgroup(Mode),
    Subreaper,
}

impl Containment {
    pub fn as_str(self) -> &'static str {
        match self {
            Containment::Cgroup(_) => "cgroup",
            Containment::Subreaper => "subreaper",
        }
    }

    pub fn mode(self) -> Option<Mode> {
        match self {
            Containment::Cgroup(m) => Some(m),
            Containment::Subreaper => None,
        }
    }
}

/// Where the limits live: cgroup2 controllers, or v1 ones beside a controller-less cgroup2.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    V2,
    Hybrid,
}

impl Mode {
    pub fn as_str(self) -> &'static str {
        match self {
            Mode::V2 => "v2",
            Mode::Hybrid => "hybrid",
        }
    }
}

/// A grant's limits: the flags' values, or less when `POST /attach` asks for less.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Limits {
    pub memory_max: u64,
    pub pids_max: u64,
    pub cpu_weight: u64,
}

impl Limits {
    /// The flags' defaults: half of RAM, 1024 processes, weight 50.
    pub fn defaults() -> Limits {
        Limits {
            memory_max: mem_total().map_or(1 << 30, |t| t / 2),
            pids_max: 1024,
            cpu_weight: 50,
        }
    }

    pub fn to_json(self) -> Value {
        json!({
            "memory_max": self.memory_max,
            "pids_max": self.pids_max,
            "cpu_weight": self.cpu_weight,
        })
    }

    /// `POST /attach`'s `"limits"` over `ceiling`: each field may ask for less, never for
    /// more. The `Err` is the 400's message.
    pub fn from_request(v: &Value, ceiling: Limits) -> Result<Limits, String> {
        let Value::Object(map) = v else {
            return Err(
                "limits must be an object: {\"memory_max\":<bytes>,\"pids_max\":<n>,\"cpu_weight\":<n>}"
                    .into(),
            );
        };
        let mut out = ceiling;
        for (key, value) in map {
            let (slot, most, flag, min) = match key.as_str() {
                "memory_max" => (
                    &mut out.memory_max,
                    ceiling.memory_max,
                    "--grant-memory-max",
                    1 << 20,
                ),
                "pids_max" => (&mut out.pids_max, ceiling.pids_max, "--grant-pids-max", 1),
                "cpu_weight" => (
                    &mut out.cpu_weight,
                    ceiling.cpu_weight,
                    "--grant-cpu-weight",
                    1,
                ),
                other => {
                    return Err(format!(
                        "limits.{other} is not a limit (memory_max, pids_max, cpu_weight)"
                    ))
                }
            };
            let Some(n) = value.as_u64() else {
                return Err(format!("limits.{key} must be a positive integer"));
            };
            if n < min {
                return Err(format!("limits.{key} must be at least {min}"));
            }
            if n > most {
                return Err(format!(
                    "limits.{key} {n} is more than this daemon allows ({most}, {flag}); ask for at most that"
                ));
            }
            *slot = n;
        }
        Ok(out)
    }
}

/// `MemTotal` of `/proc/meminfo`, in bytes.
pub fn mem_total() -> Option<u64> {
    let text = fs::read_to_string("/proc/meminfo").ok()?;
    let line = text.lines().find(|l| l.starts_with("MemTotal:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib * 1024)
}

/// `1 GiB`, `64 MiB`, `1536 KiB`: the largest unit that divides evenly, else MiB rounded.
pub fn human_bytes(n: u64) -> String {
    const UNITS: [(u64, &str); 3] = [(1 << 30, "GiB"), (1 << 20, "MiB"), (1 << 10, "KiB")];
    for (size, name) in UNITS {
        if n >= size && n % size == 0 {
            return format!("{} {name}", n / size);
        }
    }
    if n >= 1 << 20 {
        return format!("{:.1} MiB", n as f64 / (1u64 << 20) as f64);
    }
    format!("{n} bytes")
}

/// How the daemon's confinement is set up.
#[derive(Clone, Debug)]
pub struct Settings {
    /// `/proc/self/mounts`-format text and `/proc/self/cgroup`-format text; `None` reads
    /// the real ones (tests pass a fake cgroupfs).
    pub mounts: Option<String>,
    pub self_cgroup: Option<String>,
    /// Names this daemon's subtree: a hash of the state dir.
    pub instance: String,
    /// `--containment subreaper`: never use cgroups.
    pub force_subreaper: bool,
    /// The flags' limits, the most any grant gets.
    pub ceiling: Limits,
}

impl Settings {
    pub fn for_state_dir(state_dir: &Path, force_subreaper: bool, ceiling: Limits) -> Settings {
        use sha2::Digest;
        let canonical = fs::canonicalize(state_dir).unwrap_or_else(|_| state_dir.to_path_buf());
        let digest = sha2::Sha256::digest(canonical.as_os_str().as_encoded_bytes());
        let instance = digest[..6].iter().map(|b| format!("{b:02x}")).collect();
        Settings {
            mounts: None,
            self_cgroup: None,
            instance,
            force_subreaper,
            ceiling,
        }
    }
}

/// A v1 controller handnode sets limits with.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum V1 {
    Memory,
    Pids,
    Cpu,
}

impl V1 {
    const ALL: [V1; 3] = [V1::Memory, V1::Pids, V1::Cpu];
    fn name(self) -> &'static str {
        match self {
            V1::Memory => "memory",
            V1::Pids => "pids",
            V1::Cpu => "cpu",
        }
    }
}

/// The cgroup subtree handnode owns.
#[derive(Debug)]
struct Layout {
    mode: Mode,
    /// `<cgroup2 mount>/<own>/handnode.<instance>`.
    base: PathBuf,
    /// Hybrid: `<v1 mount>/<own>/handnode.<instance>` per controller.
    v1: Vec<(V1, PathBuf)>,
    /// cgroup2 controllers enabled for the grants (`memory`, `pids`, `cpu`).
    v2_controllers: Vec<String>,
}

/// What a daemon started like this process would get, changing nothing (for `doctor`):
/// the mode, or why only the subreaper.
pub fn probe() -> Result<Mode, String> {
    let settings = Settings {
        mounts: None,
        self_cgroup: None,
        instance: "probe".into(),
        force_subreaper: false,
        ceiling: Limits::defaults(),
    };
    Layout::detect(&settings, true).map(|l| l.mode)
}

/// The daemon's confinement: one per daemon, shared by every tool call.
#[derive(Debug)]
pub struct Confine {
    layout: Option<Layout>,
    ceiling: Limits,
    /// Why there is no cgroup (for `doctor`, `sys_info` and the log), when there is none.
    why_not: Option<String>,
    grants: Mutex<HashMap<String, Arc<GrantGroup>>>,
    limits: Mutex<HashMap<String, Limits>>,
    next_run: AtomicU64,
    /// Subreaper: the markers of every run this daemon started (the newest
    /// [`MAX_ISSUED`]), killed at its stop.
    issued: Mutex<std::collections::VecDeque<String>>,
    /// Subreaper: counted in [`SUBREAPERS`] while it lives.
    counted: bool,
}

/// Markers remembered for the subreaper's stop.
const MAX_ISSUED: usize = 4096;

/// Subreaper confinements alive in this process. Only a daemon alone in its process (as in
/// production) kills every descendant at its stop: beside another (in-process tests) that
/// would kill the other's children too, so it kills by its own markers only.
static SUBREAPERS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

impl Confine {
    /// Find or build the subtree; fall back to the subreaper where none is usable.
    pub fn start(settings: Settings) -> Arc<Confine> {
        let (layout, why_not) = if settings.force_subreaper {
            (None, Some("forced by --containment subreaper".to_string()))
        } else {
            match Layout::detect(&settings, false) {
                Ok(layout) => (Some(layout), None),
                Err(why) => (None, Some(why)),
            }
        };
        match &layout {
            Some(l) => log::info!(
                "containment: cgroup ({}), grants under {}",
                l.mode.as_str(),
                l.base.join("grants").display()
            ),
            None => {
                log::warn!(
                    "containment: subreaper ({}); run as a systemd user unit with Delegate=yes on cgroup v2 for cgroups",
                    why_not.as_deref().unwrap_or("")
                );
                if let Err(e) =
                    rustix::process::set_child_subreaper(Some(rustix::process::getpid()))
                {
                    log::warn!("containment: cannot become a child subreaper: {e}");
                }
            }
        }
        let counted = layout.is_none();
        if counted {
            SUBREAPERS.fetch_add(1, Ordering::SeqCst);
        }
        Arc::new(Confine {
            layout,
            ceiling: settings.ceiling,
            why_not,
            grants: Mutex::new(HashMap::new()),
            limits: Mutex::new(HashMap::new()),
            next_run: AtomicU64::new(1),
            issued: Mutex::new(Default::default()),
            counted,
        })
    }

    /// A confinement that uses no cgroup and changes nothing about the process (unit tests
    /// of other modules).
    pub fn inert() -> Arc<Confine> {
        Arc::new(Confine {
            layout: None,
            ceiling: Limits::defaults(),
            why_not: Some("not set up".into()),
            grants: Mutex::new(HashMap::new()),
            limits: Mutex::new(HashMap::new()),
            next_run: AtomicU64::new(1),
            issued: Mutex::new(Default::default()),
            counted: false,
        })
    }

    pub fn containment(&self) -> Containment {
        match &self.layout {
            Some(l) => Containment::Cgroup(l.mode),
            None => Containment::Subreaper,
        }
    }

    /// Why the subreaper is used, when it is.
    pub fn why_not_cgroup(&self) -> Option<&str> {
        self.why_not.as_deref()
    }

    pub fn ceiling(&self) -> Limits {
        self.ceiling
    }

    /// The grant JSON's fields: `containment`, `cgroup_mode` (cgroups only) and `limits`.
    pub fn grant_fields(&self, limits: Limits) -> Vec<(&'static str, Value)> {
        let mut out = vec![("containment", json!(self.containment().as_str()))];
        if let Some(mode) = self.containment().mode() {
            out.push(("cgroup_mode", json!(mode.as_str())));
        }
        out.push(("limits", limits.to_json()));
        out
    }

    /// Remember a grant's limits (at attach and at resume); its group is made at its first
    /// run.
    pub fn set_limits(&self, grant: &str, limits: Limits) {
        lock(&self.limits).insert(grant.to_string(), limits);
    }

    /// The limits of `grant` (the ceiling when it never asked for less).
    pub fn limits_of(&self, grant: &str) -> Limits {
        lock(&self.limits)
            .get(grant)
            .copied()
            .unwrap_or(self.ceiling)
    }

    /// Kill and remove what an earlier daemon with this state dir left (SIGKILLed, its
    /// groups still there). Call before any grant resumes.
    pub fn clean_leftovers(&self) -> usize {
        let Some(layout) = &self.layout else {
            return 0;
        };
        let grants = layout.base.join("grants");
        let mut n = 0;
        if let Ok(dir) = fs::read_dir(&grants) {
            for entry in dir.flatten() {
                if entry.path().is_dir() {
                    n += 1;
                    kill_tree(&entry.path());
                    remove_grant_dirs(layout, &entry.file_name().to_string_lossy(), true);
                }
            }
        }
        if n > 0 {
            log::warn!(
                "containment: killed and removed {n} grant cgroup(s) an earlier handnode left"
            );
        }
        n
    }

    /// The group of `grant` (made on first use).
    fn grant(&self, grant: &str, limited: bool) -> io::Result<Arc<GrantGroup>> {
        let mut grants = lock(&self.grants);
        if let Some(g) = grants.get(grant) {
            return Ok(Arc::clone(g));
        }
        let limits = self.limits_of(grant);
        let group = match &self.layout {
            Some(layout) => GrantGroup::create(layout, grant, limited.then_some(limits))?,
            None => GrantGroup {
                id: grant.to_string(),
                dir: None,
                v1: Vec::new(),
                limits,
                limited,
                live: Mutex::new(HashSet::new()),
                spare: Mutex::new(Vec::new()),
                v1_procs: Default::default(),
                stale: Default::default(),
                markers: Mutex::new(HashSet::new()),
            },
        };
        let group = Arc::new(group);
        grants.insert(grant.to_string(), Arc::clone(&group));
        Ok(group)
    }

    /// A new run of `grant` (`limited`: under the grant's limits; the owner's `/mcp` is
    /// not), its processes to carry `marker` (the job marker's value).
    pub fn run(&self, grant: &str, limited: bool, marker: &str) -> io::Result<Arc<RunGroup>> {
        let grant = self.grant(grant, limited)?;
        let own_procs = std::sync::OnceLock::new();
        let (name, dir) = match &grant.dir {
            Some(gdir) => {
                grant.sweep(gdir);
                match grant.take_spare() {
                    Some((name, dir, Some(open))) => {
                        let _ = own_procs.set(open);
                        (name, Some(dir))
                    }
                    Some((name, dir, None)) => (name, Some(dir)),
                    None => {
                        let name = format!("r{}", self.next_run.fetch_add(1, Ordering::Relaxed));
                        // Live before it exists: a concurrent run's sweep must never take it.
                        lock(&grant.live).insert(name.clone());
                        let dir = gdir.join(&name);
                        if let Err(e) = fs::create_dir(&dir) {
                            lock(&grant.live).remove(&name);
                            return Err(io::Error::new(
                                e.kind(),
                                format!("cannot create cgroup {}: {e}", dir.display()),
                            ));
                        }
                        (name, Some(dir))
                    }
                }
            }
            None => {
                let name = format!("r{}", self.next_run.fetch_add(1, Ordering::Relaxed));
                lock(&grant.live).insert(name.clone());
                (name, None)
            }
        };
        lock(&grant.markers).insert(marker.to_string());
        if self.layout.is_none() {
            let mut issued = lock(&self.issued);
            if issued.len() >= MAX_ISSUED {
                issued.pop_front();
            }
            issued.push_back(marker.to_string());
        }
        let oom_before = grant.oom_kills();
        if self.layout.is_none() {
            // What earlier runs left running and has ended since is ours to reap.
            subreaper::reap();
        }
        Ok(Arc::new(RunGroup {
            name,
            dir,
            marker: marker.to_string(),
            grant,
            oom_before,
            kept: std::sync::atomic::AtomicBool::new(false),
            own_procs,
        }))
    }

    /// A grant ended (revoke, replace, expiry): kill everything in its group, then remove
    /// it (on a thread of its own: the processes take a moment to be gone).
    pub fn end_grant(&self, grant: &str) {
        lock(&self.limits).remove(grant);
        let group = lock(&self.grants).remove(grant);
        match (&self.layout, group) {
            (Some(layout), group) => {
                let dir = layout.base.join("grants").join(grant);
                kill_tree(&dir);
                drop(group);
                let v1_left = layout
                    .v1
                    .iter()
                    .any(|(_, b)| b.join("grants").join(grant).exists());
                if !dir.exists() && !v1_left {
                    return; // it never ran anything
                }
                let (base, v1, mode) = (layout.base.clone(), layout.v1.clone(), layout.mode);
                let grant = grant.to_string();
                let _ = std::thread::Builder::new()
                    .name("cgroup-remove".into())
                    .spawn(move || {
                        let layout = Layout {
                            mode,
                            base,
                            v1,
                            v2_controllers: Vec::new(),
                        };
                        remove_grant_dirs(&layout, &grant, true);
                    });
            }
            (None, Some(group)) => group.kill(),
            (None, None) => {}
        }
    }

    /// The lender halted (§22): kill every process in the grant's groups now, keeping the
    /// groups (the grant lives on, and runs again after resume).
    pub fn kill_grant(&self, grant: &str) {
        match &self.layout {
            Some(layout) => kill_tree(&layout.base.join("grants").join(grant)),
            None => {
                if let Some(group) = lock(&self.grants).get(grant) {
                    group.kill();
                }
            }
        }
    }

    /// Daemon stop: kill every grant's processes and remove every group, before returning.
    pub fn stop(&self) {
        lock(&self.grants).clear();
        match &self.layout {
            Some(layout) => {
                let grants = layout.base.join("grants");
                kill_tree(&grants);
                if let Ok(dir) = fs::read_dir(&grants) {
                    for entry in dir.flatten() {
                        remove_grant_dirs(layout, &entry.file_name().to_string_lossy(), true);
                    }
                }
                // The daemon's own subtree goes too: a stopped daemon leaves no group.
                for base in std::iter::once(&layout.base).chain(layout.v1.iter().map(|(_, b)| b)) {
                    let _ = fs::remove_dir(base.join("grants"));
                    let _ = fs::remove_dir(base);
                }
            }
            None => {
                let issued: Vec<String> = lock(&self.issued).drain(..).collect();
                subreaper::kill_marked(&issued);
                if self.counted && SUBREAPERS.load(Ordering::SeqCst) == 1 {
                    subreaper::kill_descendants();
                }
            }
        }
    }

    /// `sys_info` under a grant: the limits and what the grant uses of them now.
    pub fn usage_json(&self, grant: &str) -> Value {
        let limits = self.limits_of(grant);
        let mut v = json!({
            "containment": self.containment().as_str(),
            "limits": limits.to_json(),
        });
        if let Some(mode) = self.containment().mode() {
            v["cgroup_mode"] = json!(mode.as_str());
            let group = lock(&self.grants).get(grant).cloned();
            let (memory, pids) = group.map_or((Some(0), Some(0)), |g| g.usage());
            v["usage"] = json!({"memory_bytes": memory, "pids": pids});
        }
        v
    }
}

impl Drop for Confine {
    fn drop(&mut self) {
        if self.counted {
            SUBREAPERS.fetch_sub(1, Ordering::SeqCst);
        }
        // A daemon whose start failed after this was made never stops: leave no empty
        // subtree behind (a group still in use is not empty, and rmdir leaves it).
        if let Some(layout) = &self.layout {
            for base in std::iter::once(&layout.base).chain(layout.v1.iter().map(|(_, b)| b)) {
                let _ = fs::remove_dir(base.join("grants"));
                let _ = fs::remove_dir(base);
            }
        }
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl Layout {
    fn detect(settings: &Settings, dry: bool) -> Result<Layout, String> {
        let mounts = match &settings.mounts {
            Some(m) => m.clone(),
            None => fs::read_to_string("/proc/self/mounts")
                .map_err(|e| format!("cannot read /proc/self/mounts: {e}"))?,
        };
        let self_cg = match &settings.self_cgroup {
            Some(c) => c.clone(),
            None => fs::read_to_string("/proc/self/cgroup")
                .map_err(|e| format!("cannot read /proc/self/cgroup: {e}"))?,
        };
        let mut unified = None;
        let mut v1_mounts: Vec<(V1, PathBuf)> = Vec::new();
        for line in mounts.lines() {
            let f: Vec<&str> = line.split_whitespace().collect();
            if f.len() < 4 {
                continue;
            }
            let point = PathBuf::from(unescape(f[1]));
            match f[2] {
                "cgroup2" if unified.is_none() => unified = Some(point),
                "cgroup" => {
                    for c in V1::ALL {
                        if f[3].split(',').any(|o| o == c.name()) {
                            v1_mounts.push((c, point.clone()));
                        }
                    }
                }
                _ => {}
            }
        }
        let Some(unified) = unified else {
            return Err("no cgroup2 hierarchy is mounted (cgroup v1 only)".into());
        };
        let mut own2 = None;
        let mut own1: HashMap<&str, &str> = HashMap::new();
        for line in self_cg.lines() {
            let mut parts = line.splitn(3, ':');
            let (Some(_), Some(ctrls), Some(path)) = (parts.next(), parts.next(), parts.next())
            else {
                continue;
            };
            if ctrls.is_empty() {
                own2 = Some(path);
            } else {
                for c in ctrls.split(',') {
                    own1.insert(c, path);
                }
            }
        }
        let own2 = own2.ok_or("this process has no cgroup2 membership")?;
        let mut own_dir = unified.join(own2.trim_start_matches('/'));
        // Already moved into our leaf (an earlier daemon in this process, or a restart in
        // the same unit's cgroup): the unit's group is the parent.
        if own_dir.file_name().is_some_and(|n| n == DAEMON_LEAF) {
            own_dir.pop();
        }
        let controllers =
            fs::read_to_string(own_dir.join("cgroup.controllers")).unwrap_or_default();
        let has = |c: &str| controllers.split_whitespace().any(|x| x == c);
        let mode = if has("memory") && has("pids") {
            Mode::V2
        } else if [V1::Memory, V1::Pids]
            .iter()
            .all(|c| v1_mounts.iter().any(|(m, _)| m == c))
        {
            Mode::Hybrid
        } else {
            // cgroup2 without the controllers and no v1 ones: kill through cgroup2, no limits.
            Mode::V2
        };
        let is_root = own2 == "/" || own2.is_empty();
        let base = own_dir.join(format!("handnode.{}", settings.instance));
        if dry {
            // `doctor`: say what a daemon started like this one would get, changing nothing.
            let writable = rustix::fs::access(&own_dir, rustix::fs::Access::WRITE_OK).is_ok();
            if !writable {
                return Err(format!(
                    "{} is not writable: this process's cgroup is not delegated to it",
                    own_dir.display()
                ));
            }
            return Ok(Layout {
                mode,
                base,
                v1: Vec::new(),
                v2_controllers: Vec::new(),
            });
        }
        if mode == Mode::V2 && !is_root {
            // Delegation: no process may stay in a group whose controllers we enable.
            let leaf = own_dir.join(DAEMON_LEAF);
            mkdir(&leaf).map_err(|e| {
                format!(
                    "cannot create {} ({e}): the daemon's cgroup is not delegated to it (run it as a systemd unit with Delegate=yes)",
                    leaf.display()
                )
            })?;
            fs::write(leaf.join("cgroup.procs"), std::process::id().to_string())
                .map_err(|e| format!("cannot move the daemon into {} ({e})", leaf.display()))?;
        }
        mkdir(&base.join("grants")).map_err(|e| {
            format!(
                "cannot create {} ({e}): the daemon's cgroup is not writable (run it as root or as a systemd unit with Delegate=yes)",
                base.display()
            )
        })?;
        let mut v2_controllers = Vec::new();
        if mode == Mode::V2 {
            for c in ["memory", "pids", "cpu"] {
                if has(c) {
                    let ok = [&own_dir, &base, &base.join("grants")].iter().all(|d| {
                        fs::write(d.join("cgroup.subtree_control"), format!("+{c}")).is_ok()
                    });
                    if ok {
                        v2_controllers.push(c.to_string());
                    } else {
                        log::warn!(
                            "containment: cannot enable the {c} controller under {}",
                            own_dir.display()
                        );
                    }
                }
            }
        }
        let mut v1 = Vec::new();
        if mode == Mode::Hybrid {
            for (c, point) in &v1_mounts {
                let own = own1.get(c.name()).copied().unwrap_or("/");
                let dir = point
                    .join(own.trim_start_matches('/'))
                    .join(format!("handnode.{}", settings.instance));
                match mkdir(&dir.join("grants")) {
                    Ok(()) => v1.push((*c, dir)),
                    Err(e) => {
                        log::warn!(
                            "containment: no {} limits: cannot create {} ({e})",
                            c.name(),
                            dir.display()
                        )
                    }
                }
            }
        }
        Ok(Layout {
            mode,
            base,
            v1,
            v2_controllers,
        })
    }
}

fn mkdir(dir: &Path) -> io::Result<()> {
    match fs::create_dir_all(dir) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => Ok(()),
        Err(e) => Err(e),
    }
}

/// `/proc/self/mounts` escapes spaces and the like as `\040`.
fn unescape(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'\\'
            && i + 3 < b.len()
            && b[i + 1..i + 4].iter().all(|c| (b'0'..=b'7').contains(c))
        {
            let n = (b[i + 1] - b'0') * 64 + (b[i + 2] - b'0') * 8 + (b[i + 3] - b'0');
            out.push(n);
            i += 4;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// One grant's groups.
#[derive(Debug)]
pub struct GrantGroup {
    id: String,
    /// cgroup2 `…/grants/<id>`; `None` under the subreaper.
    dir: Option<PathBuf>,
    /// Hybrid: the grant's v1 groups.
    v1: Vec<(V1, PathBuf)>,
    limits: Limits,
    /// False for the owner's group: killed like a grant's, never limited.
    limited: bool,
    /// Runs whose groups must not be swept (spare groups count as live).
    live: Mutex<HashSet<String>>,
    /// Empty run groups kept for the next runs (at most [`SPARE_RUNS`]), with their
    /// `cgroup.procs` once opened: a `bash` call then costs no `mkdir`/`rmdir` in cgroupfs
    /// (docs/performance.md).
    spare: Mutex<Vec<Spare>>,
    /// Hybrid: the v1 groups' `cgroup.procs`, opened at the grant's first spawn.
    v1_procs: std::sync::OnceLock<Vec<enter::Slot>>,
    /// A run group could not be removed when its run ended (still emptying, or processes
    /// kept): the next run sweeps the grant's directory. Unset, no run reads it.
    stale: std::sync::atomic::AtomicBool,
    /// Subreaper: the markers of the grant's runs.
    markers: Mutex<HashSet<String>>,
}

impl GrantGroup {
    /// `limits: None`: a group to kill by, without limits (the owner's `/mcp`).
    fn create(layout: &Layout, id: &str, limits: Option<Limits>) -> io::Result<GrantGroup> {
        let dir = layout.base.join("grants").join(id);
        mkdir(&dir)?;
        let mut v1 = Vec::new();
        let limited = limits.is_some();
        let limits = limits.unwrap_or(Limits {
            memory_max: u64::MAX,
            pids_max: u64::MAX,
            cpu_weight: DEFAULT_WEIGHT,
        });
        match layout.mode {
            _ if !limited => {}
            Mode::V2 => {
                for c in &layout.v2_controllers {
                    let _ = fs::write(dir.join("cgroup.subtree_control"), format!("+{c}"));
                }
                let has = |c: &str| layout.v2_controllers.iter().any(|x| x == c);
                if has("memory") {
                    write_limit(&dir, "memory.max", limits.memory_max)?;
                    // No swap: past the limit is out of memory, not a box swapping to death.
                    let _ = fs::write(dir.join("memory.swap.max"), "0");
                }
                if has("pids") {
                    write_limit(&dir, "pids.max", limits.pids_max)?;
                }
                if has("cpu") {
                    write_limit(&dir, "cpu.weight", limits.cpu_weight.clamp(1, 10_000))?;
                }
            }
            Mode::Hybrid => {
                for (c, base) in &layout.v1 {
                    let g = base.join("grants").join(id);
                    mkdir(&g)?;
                    match c {
                        V1::Memory => {
                            write_limit(&g, "memory.limit_in_bytes", limits.memory_max)?;
                            let _ = fs::write(
                                g.join("memory.memsw.limit_in_bytes"),
                                limits.memory_max.to_string(),
                            );
                            let _ = fs::write(g.join("memory.swappiness"), "0");
                        }
                        V1::Pids => write_limit(&g, "pids.max", limits.pids_max)?,
                        V1::Cpu => write_limit(
                            &g,
                            "cpu.shares",
                            (limits.cpu_weight * 1024 / DEFAULT_WEIGHT).max(2),
                        )?,
                    }
                    v1.push((*c, g));
                }
            }
        }
        Ok(GrantGroup {
            id: id.to_string(),
            dir: Some(dir),
            v1,
            limits,
            limited,
            live: Mutex::new(HashSet::new()),
            spare: Mutex::new(Vec::new()),
            v1_procs: Default::default(),
            stale: Default::default(),
            markers: Mutex::new(HashSet::new()),
        })
    }

    pub fn limits(&self) -> Limits {
        self.limits
    }

    /// Remove the groups of runs that ended but were still emptying then (only when one
    /// was left: [`GrantGroup::stale`]). A group still busy marks the grant stale again.
    fn sweep(&self, gdir: &Path) {
        if !self.stale.swap(false, Ordering::SeqCst) {
            return;
        }
        let live = lock(&self.live);
        if let Ok(dir) = fs::read_dir(gdir) {
            for entry in dir.flatten() {
                let name = entry.file_name();
                let name = name.to_string_lossy();
                if name.starts_with('r')
                    && !live.contains(name.as_ref())
                    && entry.file_type().is_ok_and(|t| t.is_dir())
                    && fs::remove_dir(entry.path()).is_err()
                {
                    self.stale.store(true, Ordering::SeqCst);
                }
            }
        }
    }

    /// A spare run group, still empty, for a new run (its name stays live).
    fn take_spare(&self) -> Option<Spare> {
        loop {
            let (name, dir, procs) = lock(&self.spare).pop()?;
            // Nothing can enter an empty group but by a write to its `cgroup.procs`; one
            // that holds a process all the same is no run's to reuse.
            if !populated(&dir) {
                return Some((name, dir, procs));
            }
            kill_tree(&dir);
            lock(&self.live).remove(&name);
            self.stale.store(true, Ordering::SeqCst);
        }
    }

    /// An ended run's group: kept as a spare when it is empty, never OOM-killed in (its
    /// own `memory.events` count must start at 0 for the next run) and there is room;
    /// else removed (or left for [`GrantGroup::sweep`] while it empties).
    fn release(&self, name: &str, dir: &Path, procs: Option<enter::Slot>) {
        let clean = !populated(dir) && oom_kill_count(&dir.join("memory.events")).unwrap_or(0) == 0;
        if clean {
            let mut spare = lock(&self.spare);
            if spare.len() < SPARE_RUNS {
                spare.push((name.to_string(), dir.to_path_buf(), procs));
                return;
            }
        }
        lock(&self.live).remove(name);
        if fs::remove_dir(dir).is_err() {
            self.stale.store(true, Ordering::SeqCst);
        }
    }

    /// Times the kernel's OOM killer killed in this grant (v2 `memory.events`, v1
    /// `memory.oom_control`); 0 when unknown.
    fn oom_kills(&self) -> u64 {
        let file = match (&self.dir, self.v1.iter().find(|(c, _)| *c == V1::Memory)) {
            (_, Some((_, g))) => g.join("memory.oom_control"),
            (Some(d), None) => d.join("memory.events"),
            (None, None) => return 0,
        };
        oom_kill_count(&file).unwrap_or(0)
    }

    /// Memory in use (bytes) and processes, as the limiting controllers count them.
    fn usage(&self) -> (Option<u64>, Option<u64>) {
        let read = |p: PathBuf| -> Option<u64> { fs::read_to_string(p).ok()?.trim().parse().ok() };
        let v1 = |c: V1| {
            self.v1
                .iter()
                .find(|(x, _)| *x == c)
                .map(|(_, g)| g.clone())
        };
        let memory = match v1(V1::Memory) {
            Some(g) => read(g.join("memory.usage_in_bytes")),
            None => self
                .dir
                .as_ref()
                .and_then(|d| read(d.join("memory.current"))),
        };
        let pids = match v1(V1::Pids) {
            Some(g) => read(g.join("pids.current")),
            None => self.dir.as_ref().and_then(|d| read(d.join("pids.current"))),
        };
        (memory, pids)
    }

    /// Subreaper: kill every process carrying one of the grant's markers.
    fn kill(&self) {
        let markers: Vec<String> = lock(&self.markers).iter().cloned().collect();
        subreaper::kill_marked(&markers);
    }
}

fn write_limit(dir: &Path, file: &str, value: u64) -> io::Result<()> {
    fs::write(dir.join(file), value.to_string()).map_err(|e| {
        io::Error::new(
            e.kind(),
            format!("cannot set {}: {e}", dir.join(file).display()),
        )
    })
}

/// One run's group: a `bash` call, or a job (a call that became a job keeps its group).
#[derive(Debug)]
pub struct RunGroup {
    name: String,
    /// cgroup2 `…/grants/<id>/<run>`; `None` under the subreaper.
    dir: Option<PathBuf>,
    marker: String,
    grant: Arc<GrantGroup>,
    oom_before: u64,
    /// What the run left running stays until the grant ends ([`RunGroup::keep`]).
    kept: std::sync::atomic::AtomicBool,
    /// Its own group's `cgroup.procs`, opened at its first spawn (or kept with the spare).
    own_procs: std::sync::OnceLock<enter::Slot>,
}

/// A spare run group: its name, its directory, its `cgroup.procs` if it was opened.
type Spare = (String, PathBuf, Option<enter::Slot>);

/// Empty run groups a grant keeps for its next runs: enough for the calls a grant runs at
/// once in practice, few enough that an idle grant holds next to nothing in cgroupfs.
const SPARE_RUNS: usize = 4;

/// Subreaper: the most runs of one grant whose background processes are kept (their
/// markers are what the grant's end kills by); past it a run's are killed at its end.
const MAX_KEPT_RUNS: usize = 1024;

/// Whether `pid` is the init of a wall's PID namespace (`bwrap`'s, which stays while
/// anything inside lives): its innermost pid is 1.
fn is_wall_init(pid: i32) -> bool {
    fs::read_to_string(format!("/proc/{pid}/status")).is_ok_and(|s| {
        s.lines()
            .find_map(|l| l.strip_prefix("NSpid:"))
            .is_some_and(|ids| {
                let ids: Vec<&str> = ids.split_whitespace().collect();
                ids.len() > 1 && ids.last() == Some(&"1")
            })
    })
}

impl RunGroup {
    /// A `bash` call's shell has exited and was reaped (§25): what it left running (`cmd
    /// &`, `setsid -f`, `nohup`) stays, in this run's group, until the grant ends
    /// (revoke, expiry, halt, the daemon's stop), instead of dying with the run. Returns
    /// how many processes that is, a wall's own init not counted; 0 keeps nothing and
    /// the run ends as any other. The run's cgroup stays while it holds a process (a
    /// grant's `pids.max` bounds them; an empty one is removed at the grant's next run);
    /// under the subreaper the run's marker stays among the grant's (bounded by
    /// [`MAX_KEPT_RUNS`]) and the processes, re-parented to the daemon, are reaped by it.
    pub fn keep(&self) -> usize {
        let left: Vec<i32> = match &self.dir {
            // One small read in the usual case, a run that left nothing.
            Some(d) if !populated(d) => return 0,
            Some(d) => pids_in(d)
                .into_iter()
                .map(|p| p.as_raw_nonzero().get())
                .filter(|p| !is_wall_init(*p))
                .collect(),
            None => {
                let found = subreaper::marked_descendants(&self.marker);
                if found.is_empty() {
                    return 0;
                }
                let mut markers = lock(&self.grant.markers);
                if markers.len() > MAX_KEPT_RUNS {
                    let live = subreaper::live_markers();
                    markers.retain(|m| m == &self.marker || live.contains(m));
                }
                if markers.len() > MAX_KEPT_RUNS {
                    log::warn!(
                        "containment: grant {} keeps {MAX_KEPT_RUNS} runs' background processes; this run's are killed",
                        self.grant.id
                    );
                    return 0;
                }
                subreaper::adopt(&found);
                found.into_iter().filter(|p| !is_wall_init(*p)).collect()
            }
        };
        if !left.is_empty() {
            self.kept.store(true, Ordering::SeqCst);
        }
        left.len()
    }

    /// The `cgroup.procs` files the child must write its pid into before it execs.
    fn procs_files(&self) -> Vec<PathBuf> {
        let mut files = Vec::new();
        if let Some(d) = &self.dir {
            files.push(d.join("cgroup.procs"));
        }
        files.extend(self.grant.v1.iter().map(|(_, g)| g.join("cgroup.procs")));
        files
    }

    /// The command that runs `program` inside this group: its child enters every group
    /// before it execs (see the module doc). Add the program's arguments to it, and spawn
    /// it with [`RunGroup::spawn`] so that a failure to enter says which group. Under the
    /// subreaper it is `program` itself.
    pub fn command(&self, program: &Path) -> Command {
        let mut cmd = Command::new(program);
        let slots = self.procs_slots();
        if !slots.is_empty() {
            enter::before_exec_slots(&mut cmd, slots);
        }
        cmd
    }

    /// [`RunGroup::procs_files`] opened, in the same order: each opened once and kept (by
    /// the run, its spare, or the grant for v1), a failed open tried again next time.
    fn procs_slots(&self) -> Vec<enter::Slot> {
        fn cached(cell: &std::sync::OnceLock<enter::Slot>, path: &Path) -> enter::Slot {
            if let Some(slot) = cell.get() {
                return slot.clone();
            }
            let slot = enter::Slot::open(path);
            if slot.is_open() {
                let _ = cell.set(slot.clone());
            }
            slot
        }
        let mut slots = Vec::new();
        if let Some(d) = &self.dir {
            slots.push(cached(&self.own_procs, &d.join("cgroup.procs")));
        }
        if !self.grant.v1.is_empty() {
            match self.grant.v1_procs.get() {
                Some(v1) => slots.extend(v1.iter().cloned()),
                None => {
                    let v1: Vec<enter::Slot> = self
                        .grant
                        .v1
                        .iter()
                        .map(|(_, g)| enter::Slot::open(&g.join("cgroup.procs")))
                        .collect();
                    if v1.iter().all(enter::Slot::is_open) {
                        let _ = self.grant.v1_procs.set(v1.clone());
                    }
                    slots.extend(v1);
                }
            }
        }
        slots
    }

    /// `cmd.spawn()` for a command made by [`RunGroup::command`]: a child that could not
    /// enter its groups fails the spawn with "cannot put the process in its cgroup:
    /// writing 0 to <file> failed: <why>".
    pub fn spawn(&self, cmd: &mut Command) -> io::Result<std::process::Child> {
        cmd.spawn()
            .map_err(|e| enter::explain(e, &self.procs_files()))
    }

    /// SIGKILL everything in the run's group (under the subreaper: everything carrying
    /// its marker).
    pub fn kill(&self) {
        match &self.dir {
            Some(d) => kill_tree(d),
            None => subreaper::kill_marked(std::slice::from_ref(&self.marker)),
        }
    }

    /// Whether process `pid` belongs to this run: it is in the run's cgroup2 subtree, or
    /// (under the subreaper) it carries the run's marker. Exactly what the run's end kills;
    /// `desktop_act` under `apps` asks it of an element's process (`tools::apps`).
    pub fn holds(&self, pid: i32) -> bool {
        match &self.dir {
            Some(d) => pids_in(d).iter().any(|p| p.as_raw_nonzero().get() == pid),
            None => subreaper::carries(pid, std::slice::from_ref(&self.marker)),
        }
    }

    /// Send `signal` to every process in the group (`bash_cancel`'s TERM).
    pub fn signal(&self, signal: Signal) {
        if signal == Signal::KILL {
            return self.kill();
        }
        match &self.dir {
            Some(d) => {
                for pid in pids_in(d) {
                    let _ = rustix::process::kill_process(pid, signal);
                }
            }
            None => subreaper::signal_marked(std::slice::from_ref(&self.marker), signal),
        }
    }

    /// `Some(limit)` when the kernel's OOM killer killed in this grant since the run
    /// started: a run that then ended by SIGKILL was killed by the grant's memory limit.
    pub fn oom_limit(&self) -> Option<u64> {
        if self.grant.dir.is_none() || !self.grant.limited {
            return None;
        }
        // v2: the run's own count (memory is enabled for the grant's children), so another
        // run of the grant killed at the same time is not taken for this one.
        let own = self
            .dir
            .as_ref()
            .and_then(|d| oom_kill_count(&d.join("memory.events")));
        let killed = match own {
            Some(n) => n > 0,
            None => self.grant.oom_kills() > self.oom_before,
        };
        killed.then_some(self.grant.limits.memory_max)
    }

    pub fn grant_id(&self) -> &str {
        &self.grant.id
    }
}

/// Make `cmd`'s child join the network namespace `net` before it execs (first the user
/// namespace `user` that owns it, for a daemon without root), after it entered its groups
/// when `cmd` came from [`RunGroup::command`]: an own display's network (§21, `walls`).
/// The join is `enter`'s second hook; a failed join fails the spawn, saying so.
pub fn join_network(
    cmd: &mut Command,
    user: Option<std::os::fd::OwnedFd>,
    net: std::os::fd::OwnedFd,
) {
    enter::join_before_exec(cmd, user, net);
}

/// `cmd.spawn()` for a command in no group that joins a network ([`join_network`]): a
/// failed join says so.
pub fn spawn_alone(cmd: &mut Command) -> io::Result<std::process::Child> {
    cmd.spawn().map_err(|e| enter::explain(e, &[]))
}

impl Drop for RunGroup {
    fn drop(&mut self) {
        let kept = self.kept.load(Ordering::SeqCst);
        if !kept {
            // An empty group needs no kill (nothing can fork into it).
            if self.dir.as_deref().is_none_or(populated) {
                self.kill();
            }
            lock(&self.grant.markers).remove(&self.marker);
        }
        match &self.dir {
            // Reused when empty; else removed once it empties, at the grant's next run or
            // its end.
            Some(d) if !kept => self
                .grant
                .release(&self.name, d, self.own_procs.get().cloned()),
            Some(d) => {
                lock(&self.grant.live).remove(&self.name);
                if fs::remove_dir(d).is_err() {
                    self.grant.stale.store(true, Ordering::SeqCst);
                }
            }
            None => {
                lock(&self.grant.live).remove(&self.name);
            }
        }
    }
}

/// The `oom_kill` count of a v2 `memory.events` or a v1 `memory.oom_control`.
fn oom_kill_count(file: &Path) -> Option<u64> {
    fs::read_to_string(file).ok().and_then(|t| {
        t.lines()
            .find_map(|l| l.strip_prefix("oom_kill "))
            .and_then(|n| n.trim().parse().ok())
    })
}

/// The words a call or job killed by its grant's memory limit ends with.
pub fn oom_message(limit: u64) -> String {
    format!(
        "killed: out of memory (this grant's limit is {})",
        human_bytes(limit)
    )
}

/// Every pid in `dir` and its descendants (cgroup2).
fn pids_in(dir: &Path) -> Vec<Pid> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        if let Ok(text) = fs::read_to_string(d.join("cgroup.procs")) {
            out.extend(
                text.lines()
                    .filter_map(|l| l.trim().parse().ok())
                    .filter_map(Pid::from_raw),
            );
        }
        if let Ok(rd) = fs::read_dir(&d) {
            // The entry's own type: a `stat` per file of a fresh cgroup makes the kernel
            // build an inode for each (~20), on every run's end.
            stack.extend(
                rd.flatten()
                    .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
                    .map(|e| e.path()),
            );
        }
    }
    out
}

/// SIGKILL every process in the cgroup2 subtree `dir`: `cgroup.kill`, or before Linux 5.14
/// freeze, kill every pid, thaw.
pub fn kill_tree(dir: &Path) {
    if !dir.is_dir() {
        return;
    }
    let kill = dir.join("cgroup.kill");
    if kill.exists() && fs::write(&kill, "1").is_ok() {
        return;
    }
    let freeze = dir.join("cgroup.freeze");
    let frozen = fs::write(&freeze, "1").is_ok();
    // A frozen group cannot fork, so one pass finds every process; unfrozen, repeat a few
    // times for what forked meanwhile.
    for _ in 0..if frozen { 1 } else { 8 } {
        let pids = pids_in(dir);
        if pids.is_empty() {
            break;
        }
        for pid in pids {
            let _ = rustix::process::kill_process(pid, Signal::KILL);
        }
    }
    if frozen {
        let _ = fs::write(&freeze, "0");
    }
}

/// Whether the cgroup2 subtree `dir` still holds a process.
fn populated(dir: &Path) -> bool {
    match fs::read_to_string(dir.join("cgroup.events")) {
        Ok(t) => t.lines().any(|l| l.trim() == "populated 1"),
        Err(_) => !pids_in(dir).is_empty(),
    }
}

/// Remove a grant's groups (cgroup2 subtree and v1 groups), killing again while waiting
/// (bounded) for them to empty when `wait`.
fn remove_grant_dirs(layout: &Layout, grant: &str, wait: bool) {
    let dir = layout.base.join("grants").join(grant);
    let deadline = Instant::now() + REMOVE_PATIENCE;
    while wait && dir.is_dir() && populated(&dir) && Instant::now() < deadline {
        kill_tree(&dir);
        std::thread::sleep(Duration::from_millis(5));
    }
    remove_subtree(&dir);
    for (_, base) in &layout.v1 {
        let g = base.join("grants").join(grant);
        while wait && g.is_dir() && Instant::now() < deadline {
            match fs::read_to_string(g.join("cgroup.procs")) {
                Ok(t) if !t.trim().is_empty() => std::thread::sleep(Duration::from_millis(5)),
                _ => break,
            }
        }
        remove_subtree(&g);
    }
}

/// rmdir a cgroup and its children, deepest first (cgroupfs removes a group's files with it).
fn remove_subtree(dir: &Path) {
    if let Ok(rd) = fs::read_dir(dir) {
        for e in rd.flatten() {
            if e.file_type().is_ok_and(|t| t.is_dir()) {
                remove_subtree(&e.path());
            }
        }
    }
    let _ = fs::remove_dir(dir);
}

/// The fallback's kills: by marker, and every descendant at the daemon's stop.
pub mod subreaper {
    use super::*;

    fn all_pids() -> Vec<i32> {
        fs::read_dir("/proc")
            .map(|rd| {
                rd.flatten()
                    .filter_map(|e| e.file_name().to_str()?.parse().ok())
                    .collect()
            })
            .unwrap_or_default()
    }

    /// How long [`environ`] waits for an `execve` under way to lay out its environment.
    /// The kernel takes microseconds; a loaded machine may preempt it for milliseconds.
    pub const EXEC_SETTLE: Duration = Duration::from_millis(50);

    /// Where a process that reads as having no environment stands.
    #[derive(Debug, PartialEq, Eq)]
    pub(super) enum NoEnviron {
        /// Inside `execve`: its memory swapped, its new stack not yet written (`env_start`,
        /// field 50 of its stat, is 0). Read again soon.
        Exec,
        /// Laid out: it has an environment (or, run by `env -i`, an empty one). Read again
        /// once, as the exec may have finished between the two reads.
        LaidOut,
        /// It will never have one: dying, a zombie, a kernel thread, or gone.
        Never,
    }

    pub(super) fn no_environ(pid: i32) -> NoEnviron {
        /// `PF_EXITING` and `PF_KTHREAD` of a stat's flags (field 9): a process dying or
        /// dead (a zombie keeps the flag), and a kernel thread.
        const EXITING_OR_KERNEL: u64 = 0x0000_0004 | 0x0020_0000;
        use crate::base::procfs::stat_field;
        let Ok(stat) = fs::read_to_string(format!("/proc/{pid}/stat")) else {
            return NoEnviron::Never;
        };
        match (stat_field(&stat, 9), stat_field(&stat, 50)) {
            (Some(flags), _) if flags & EXITING_OR_KERNEL != 0 => NoEnviron::Never,
            (Some(_), Some(0)) => NoEnviron::Exec,
            (Some(_), _) => NoEnviron::LaidOut,
            (None, _) => NoEnviron::Never,
        }
    }

    /// One sweep's time to wait out `execve`s: [`EXEC_SETTLE`] in all, however many
    /// processes it finds inside one, so a grant that keeps many stuck there (a binary on a
    /// stalled FUSE mount) cannot stretch a kill sweep by 50 ms a process. Past it, a
    /// process is read once, as before.
    pub struct Settle(Instant);

    impl Settle {
        pub fn now() -> Settle {
            Settle(Instant::now() + EXEC_SETTLE)
        }

        /// Process `pid`'s environment (`None`: gone or not ours to read). A process
        /// caught in `execve` reads as having none — `spawn` returns in that window, and a
        /// process that re-executes itself spends time in it — so that one is read again
        /// until its new environment is laid out, within this sweep's time: a marker must
        /// not be missed there. A kernel thread or a zombie costs one look at its stat.
        pub fn environ(&self, pid: i32) -> Option<Vec<u8>> {
            let path = format!("/proc/{pid}/environ");
            loop {
                let env = fs::read(&path).ok()?;
                if !env.is_empty() || Instant::now() >= self.0 {
                    return Some(env);
                }
                match no_environ(pid) {
                    NoEnviron::Never => return Some(env),
                    NoEnviron::LaidOut => return fs::read(&path).ok(),
                    NoEnviron::Exec => std::thread::sleep(Duration::from_millis(1)),
                }
            }
        }

        /// Whether process `pid` carries one of `markers` in its environment.
        pub fn carries<M: AsRef<str>>(&self, pid: i32, markers: &[M]) -> bool {
            let Some(env) = self.environ(pid) else {
                return false;
            };
            let found =
                markers_in(&env).any(|v| markers.iter().any(|m| m.as_ref().as_bytes() == v));
            found
        }
    }

    /// [`Settle::carries`] for one process, on a sweep of its own.
    pub fn carries<M: AsRef<str>>(pid: i32, markers: &[M]) -> bool {
        Settle::now().carries(pid, markers)
    }

    /// The values of `MARKER_ENV` in an environment as `/proc/PID/environ` gives it.
    fn markers_in(env: &[u8]) -> impl Iterator<Item = &[u8]> {
        let prefix = format!("{MARKER_ENV}=");
        env.split(|b| *b == 0)
            .filter_map(move |var| var.strip_prefix(prefix.as_bytes()))
    }

    /// Processes killed here that were not the daemon's own children then: once they are
    /// (re-parented to the subreaper), their zombies are ours to reap. Bounded.
    static ORPHANS: Mutex<Vec<i32>> = Mutex::new(Vec::new());
    const MAX_ORPHANS: usize = 4096;

    /// The parent pid of `pid` (field 4 of its stat).
    fn ppid(pid: i32) -> Option<i32> {
        let stat = fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
        i32::try_from(crate::base::procfs::stat_field(&stat, 4)?).ok()
    }

    pub fn signal_marked(markers: &[String], signal: Signal) {
        if markers.is_empty() {
            return;
        }
        let me = std::process::id() as i32;
        let settle = Settle::now();
        // Repeat: a process may fork while the scan runs.
        for _ in 0..3 {
            let mut any = false;
            for pid in all_pids() {
                if pid != me && settle.carries(pid, markers) {
                    if let Some(p) = Pid::from_raw(pid) {
                        let hit = rustix::process::kill_process(p, signal).is_ok();
                        // The daemon's own children are run leaders: the process watcher
                        // reaps those.
                        if hit && signal == Signal::KILL && ppid(pid) != Some(me) {
                            let mut orphans = lock(&ORPHANS);
                            if orphans.len() >= MAX_ORPHANS {
                                orphans.remove(0);
                            }
                            orphans.push(pid);
                        }
                        any |= hit;
                    }
                }
            }
            if !any {
                break;
            }
        }
    }

    /// Every process below the daemon (it is their subreaper: what a run left is
    /// re-parented to it) that carries `marker`, and their descendants.
    pub fn marked_descendants(marker: &str) -> Vec<i32> {
        let settle = Settle::now();
        let mut stack: Vec<i32> = children(std::process::id() as i32)
            .into_iter()
            .filter(|p| settle.carries(*p, &[marker]))
            .collect();
        let mut seen = HashSet::new();
        while let Some(pid) = stack.pop() {
            if seen.insert(pid) {
                stack.extend(children(pid));
            }
        }
        seen.into_iter().collect()
    }

    /// The markers some live process carries now (one pass over `/proc`).
    pub fn live_markers() -> HashSet<String> {
        let (mut out, settle) = (HashSet::new(), Settle::now());
        for pid in all_pids() {
            if let Some(env) = settle.environ(pid) {
                out.extend(markers_in(&env).map(|v| String::from_utf8_lossy(v).into_owned()));
            }
        }
        out
    }

    /// Kept processes that are the daemon's children now: reaped by [`reap`] once they
    /// end, whoever ends them.
    pub fn adopt(pids: &[i32]) {
        let me = std::process::id() as i32;
        let mut orphans = lock(&ORPHANS);
        for &pid in pids {
            if ppid(pid) == Some(me) {
                if orphans.len() >= MAX_ORPHANS {
                    orphans.remove(0);
                }
                orphans.push(pid);
            }
        }
    }

    pub fn kill_marked(markers: &[String]) {
        signal_marked(markers, Signal::KILL);
        reap();
    }

    /// Reap the zombies of what we killed that was re-parented to us; forget what is gone.
    pub fn reap() {
        let mut orphans = lock(&ORPHANS);
        orphans.retain(|&pid| {
            let Some(p) = Pid::from_raw(pid) else {
                return false;
            };
            match rustix::process::waitpid(Some(p), rustix::process::WaitOptions::NOHANG) {
                Ok(Some(_)) => false,
                Ok(None) => true,
                // Not (yet) our child: keep it while it exists.
                Err(_) => Path::new(&format!("/proc/{pid}")).exists(),
            }
        });
    }

    /// The children of `pid` (every thread's).
    fn children(pid: i32) -> Vec<i32> {
        let mut out = Vec::new();
        if let Ok(rd) = fs::read_dir(format!("/proc/{pid}/task")) {
            for t in rd.flatten() {
                if let Ok(text) = fs::read_to_string(t.path().join("children")) {
                    out.extend(
                        text.split_whitespace()
                            .filter_map(|p| p.parse::<i32>().ok()),
                    );
                }
            }
        }
        out
    }

    /// Daemon stop: SIGKILL every descendant (what tools left is re-parented to us).
    pub fn kill_descendants() {
        let mut stack = children(std::process::id() as i32);
        let mut seen = HashSet::new();
        while let Some(pid) = stack.pop() {
            if !seen.insert(pid) {
                continue;
            }
            stack.extend(children(pid));
            if let Some(p) = Pid::from_raw(pid) {
                let _ = rustix::process::kill_process(p, Signal::KILL);
            }
        }
        reap();
    }
}

#[cfg(test)]
mod tests;
