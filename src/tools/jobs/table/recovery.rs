//! Recovery at start (see the table's module doc, Recovery): load what an earlier run
//! left, kill what it left running (never a recycled pid), remove what is not a job.

use super::*;

impl JobTable {
    /// At start, before any grant resumes: load what an earlier run left (see the module
    /// doc), kill what it left running, remove what is not a valid job. Returns how many
    /// jobs were loaded.
    pub fn recover(&self) -> io::Result<usize> {
        let Some(root) = self.cfg.dir.clone() else {
            return Ok(0);
        };
        private_dir(&root)?;
        let mut loaded = Vec::new();
        let mut running = Vec::new();
        for scope_entry in fs::read_dir(&root)?.flatten() {
            let name = scope_entry.file_name().to_string_lossy().to_string();
            let path = scope_entry.path();
            let is_dir = scope_entry.file_type().is_ok_and(|t| t.is_dir());
            if !is_scope(&name) || !is_dir {
                log::warn!("jobs: removing {} (not a job scope)", path.display());
                let _ = fs::remove_dir_all(&path).or_else(|_| fs::remove_file(&path));
                continue;
            }
            let _ = fs::set_permissions(&path, fs::Permissions::from_mode(DIR_MODE));
            let mut ids = std::collections::BTreeSet::new();
            let Ok(files) = fs::read_dir(&path) else {
                log::warn!(
                    "jobs: cannot read {}; its jobs are not recovered",
                    path.display()
                );
                continue;
            };
            for file in files.flatten() {
                let fname = file.file_name().to_string_lossy().to_string();
                let (id, ext) = fname.split_once('.').unwrap_or((&fname, ""));
                if is_job_id(id) && matches!(ext, "out" | "err" | "json") {
                    ids.insert(id.to_string());
                } else {
                    let _ = fs::remove_file(file.path());
                }
            }
            for id in ids {
                match self.load_one(&path, &name, &id) {
                    Some((job, recorded_running)) => {
                        if recorded_running {
                            running.push(Arc::clone(&job));
                        }
                        loaded.push(job);
                    }
                    None => {
                        log::warn!("jobs: removing the files of job {id}: no valid record");
                        for ext in ["out", "err", "json"] {
                            let _ = fs::remove_file(path.join(format!("{id}.{ext}")));
                        }
                    }
                }
            }
        }
        kill_leftovers(&running);
        let now = now_ms();
        let mut kept = 0;
        for job in loaded {
            let mut st = job.lock_status();
            let mut restarted = None;
            if st.state == State::Running {
                st.state = State::Killed;
                st.reason = Some("daemon_restarted".into());
                st.ended_at_ms = Some(now);
                st.duration_ms = Some(now.saturating_sub(job.started_at_ms));
                if st.exit_code.is_none() {
                    st.exit_code = Some(crate::tools::process::KILLED_EXIT_CODE);
                }
                log::warn!(
                    "job {} was running when handnode stopped: killed (daemon_restarted)",
                    job.id
                );
                restarted = Some((
                    st.exit_code.unwrap_or_default(),
                    st.duration_ms.unwrap_or_default(),
                ));
            }
            let age = Duration::from_millis(now.saturating_sub(st.ended_at_ms.unwrap_or(now)));
            drop(st);
            // The run that started it could not say it ended; this one does.
            if let Some((exit_code, duration_ms)) = restarted {
                let reason = Some("daemon_restarted");
                self.audit_ended(&job, State::Killed, reason, exit_code, duration_ms);
            }
            if age >= self.cfg.retention {
                job.remove_files();
                continue;
            }
            job.persist();
            let expires = Instant::now() + (self.cfg.retention - age);
            *job.expires.lock().unwrap_or_else(|e| e.into_inner()) = Some(expires);
            let held = job.disk_bytes();
            job.reserved.store(held, Ordering::SeqCst);
            {
                let mut inner = self.lock();
                inner.reserved += held;
                inner.jobs.push(Arc::clone(&job));
            }
            self.schedule(expires, Chore::ExpireJob(Arc::downgrade(&job)));
            kept += 1;
        }
        self.lock().jobs.sort_by_key(|j| j.started_at_ms);
        Ok(kept)
    }

    /// One job's record and files, or `None` if they are not a valid job. The bool says
    /// whether the record says it was running.
    fn load_one(&self, dir: &Path, scope: &str, id: &str) -> Option<(Arc<Job>, bool)> {
        let mut text = Vec::new();
        open_state_file(
            OpenOptions::new().read(true),
            &dir.join(format!("{id}.json")),
        )
        .and_then(|mut f| f.read_to_end(&mut text))
        .ok()?;
        let v: Value = serde_json::from_slice(&text).ok()?;
        if v["v"] != RECORD_VERSION || v["id"] != id || v["scope"] != scope {
            return None;
        }
        let state = State::parse(v["state"].as_str()?)?;
        let opt_u64 = |k: &str| v[k].as_u64();
        let out = StreamFile::open(&dir.join(format!("{id}.out"))).ok()?;
        let err = StreamFile::open(&dir.join(format!("{id}.err"))).ok()?;
        let running = state == State::Running;
        let status = Status {
            state,
            pid: v["pid"]
                .as_i64()
                .and_then(|p| i32::try_from(p).ok())
                .filter(|p| *p > 1),
            start_ticks: opt_u64("start_ticks"),
            exit_code: v["exit_code"].as_i64().and_then(|c| i32::try_from(c).ok()),
            reason: v["reason"].as_str().map(str::to_string),
            ended_at_ms: opt_u64("ended_at_ms"),
            duration_ms: opt_u64("duration_ms"),
        };
        let boot_matches = v["boot_id"].as_str() == Some(boot_id());
        let job = Arc::new(Job {
            id: id.to_string(),
            scope: scope.to_string(),
            key: self.next_key.fetch_add(1, Ordering::SeqCst),
            command: command_note(v["command"].as_str().unwrap_or("")),
            principal: v["principal"].as_str().unwrap_or("").to_string(),
            session: v["session"].as_str().map(str::to_string),
            started_at_ms: opt_u64("started_at_ms").unwrap_or(0),
            started: Instant::now(),
            ctl: CallCtl::new(),
            out,
            err,
            status: Mutex::new(Status {
                // A different boot: nothing it started can still run.
                pid: status.pid.filter(|_| boot_matches),
                ..status
            }),
            stop_reason: Mutex::new(None),
            reserved: AtomicU64::new(0),
            kill_scheduled: AtomicBool::new(false),
            end_pending: AtomicBool::new(false),
            dir: dir.to_path_buf(),
            expires: Mutex::new(None),
            table: self.me.clone(),
        });
        Some((job, running))
    }
}

/// Kill the process groups of jobs a crashed daemon left running (see the module doc):
/// a group is ours if its leader is the process we started (pid and start time match),
/// or if a member carries the job's marker. One scan of `/proc` serves every job.
pub(super) fn kill_leftovers(jobs: &[Arc<Job>]) {
    let targets: Vec<(i32, Option<u64>, String)> = jobs
        .iter()
        .filter_map(|j| {
            let st = j.lock_status();
            Some((st.pid?, st.start_ticks, j.id.clone()))
        })
        .collect();
    if targets.is_empty() {
        return;
    }
    let mut verified: Vec<i32> = Vec::new();
    let Ok(procs) = fs::read_dir("/proc") else {
        return;
    };
    let settle = crate::cgroup::subreaper::Settle::now();
    for entry in procs.flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|n| n.parse::<i32>().ok())
        else {
            continue;
        };
        let Ok(stat) = fs::read_to_string(format!("/proc/{pid}/stat")) else {
            continue;
        };
        let pgrp = crate::base::procfs::stat_field(&stat, 5).map(|g| g as i32);
        let start = crate::base::procfs::stat_field(&stat, 22);
        for (leader, ticks, id) in &targets {
            if verified.contains(leader) {
                continue;
            }
            let is_leader = pid == *leader && ticks.is_some() && start == *ticks;
            let is_member = pgrp == Some(*leader) && start >= *ticks && settle.carries(pid, &[id]);
            if is_leader || is_member {
                verified.push(*leader);
            }
        }
    }
    for pgid in verified {
        if let Some(pgid) = rustix::process::Pid::from_raw(pgid) {
            log::warn!("jobs: killing process group {pgid:?} left running by an earlier handnode");
            let _ = rustix::process::kill_process_group(pgid, rustix::process::Signal::KILL);
        }
    }
}
