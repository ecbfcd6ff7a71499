//! handnode: lend this Linux box's tools to one coding-agent session, time-boxed and
//! revocable, by dialling into the agent's pod and serving MCP over that socket.
// One reviewed module may use `unsafe` (`cgroup::enter`, with its own allow and module
// doc); everything else is refused.
#![deny(unsafe_code)]

pub mod admin;
pub mod audit;
pub mod auth;
pub mod base;
pub mod browser;
pub mod cgroup;
pub mod config;
pub mod faults;
pub mod grants;
pub mod journal;
pub mod metrics;
pub mod ops;
pub mod pool;
pub mod profiles;
pub mod rules;
pub mod tools;
pub mod walls;
pub mod wire;

pub use base::error::Error;
pub use base::secret::Secret;
pub use config::Config;

/// Tells a running daemon to stop. Dropping it, or calling [`ShutdownHandle::shutdown`],
/// makes [`run`] close every socket with 1001, persist, and return.
#[derive(Debug, Clone)]
pub struct ShutdownHandle {
    tx: crossbeam_channel::Sender<()>,
}

/// The daemon side of a [`ShutdownHandle`].
#[derive(Debug, Clone)]
pub struct Shutdown {
    rx: crossbeam_channel::Receiver<()>,
}

impl Shutdown {
    pub fn new() -> (ShutdownHandle, Shutdown) {
        let (tx, rx) = crossbeam_channel::bounded(1);
        (ShutdownHandle { tx }, Shutdown { rx })
    }

    /// A channel that becomes ready (disconnected or signalled) when shutdown is asked.
    pub fn receiver(&self) -> &crossbeam_channel::Receiver<()> {
        &self.rx
    }
}

impl ShutdownHandle {
    pub fn shutdown(&self) {
        let _ = self.tx.try_send(());
    }
}

/// Serve until `shutdown` fires. Returns `Err` for bad configuration (exit 2) or a
/// runtime failure such as a dead accept loop (exit 1).
pub fn run(config: Config, shutdown: Shutdown) -> Result<(), Error> {
    let daemon = Daemon::start(config)?;
    daemon.wait(&shutdown)
}

/// A started daemon. `run` is `start` + `wait`; tests use the pieces to learn the bound
/// address first.
pub struct Daemon {
    admin: Option<admin::AdminServer>,
    registry: Arc<grants::Registry>,
    fatal: crossbeam_channel::Receiver<Error>,
    approvals_guard: Option<grants::approvals::ApprovalsGuard>,
    audit_guard: Option<audit::AuditGuard>,
    jobs: Arc<tools::jobs::table::JobTable>,
    /// The tools' shared state: its grants' own displays (§19) stop with the daemon.
    host: Arc<tools::ToolHost>,
    /// Killed last: nothing a grant started outlives the daemon (§16).
    confine: Arc<cgroup::Confine>,
    sd_notify: bool,
    /// Stopped after the grants, so no browser outlives the daemon.
    browsers: Option<Arc<browser::Browsers>>,
    /// Released last, once every job is killed and audited: the next daemon may then recover.
    state_lock: Option<base::statedir::StateLock>,
    /// `--halt-key`'s watcher (§22); stopped first.
    halt_key: Option<ops::halt_key::HaltKey>,
}

impl std::fmt::Debug for Daemon {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Daemon")
            .field("addr", &self.local_addr())
            .finish()
    }
}

use std::sync::Arc;

impl Daemon {
    /// Validate, open the state, bind, resume persisted grants, serve, and report ready.
    pub fn start(config: Config) -> Result<Daemon, Error> {
        let policy = config.policy();
        policy.validate().map_err(Error::Config)?;
        let tls = wire::tls::client_config(config.ca_file.as_deref())?;
        // Also with --no-persist: the audit log lives there.
        grants::persist::ensure_state_dir(&config.state_dir)?;
        // Before anything in the state dir is read or changed (crash recovery kills the jobs
        // a dead daemon left; grants resume and dial): a second daemon on a live one's state
        // dir stops here, having touched nothing.
        let state_lock = base::statedir::lock_state_dir(&config.state_dir)?;
        // Bound before recovery too: a busy port stops a start before it changes anything.
        let listener = admin::bind(config.listen, config.timing.admin_io_timeout)?;
        let local_listener = config.local_socket.as_deref().and_then(admin::bind_local);
        let store = if config.persist {
            Some(grants::persist::GrantStore::open(&config.state_dir)?)
        } else {
            None
        };
        let (audit, audit_guard) = audit::start(&config.state_dir, &config.timing, &config.limits)?;
        let metrics = Arc::new(metrics::Metrics::new());
        let mut scrub_values = Vec::new();
        scrub_values.extend(config.token.clone());
        // Containment first (§16): what a SIGKILLed daemon with this state dir left running
        // dies before anything starts, and the browser tier and the tools share it.
        let confine = cgroup::Confine::start(cgroup::Settings::for_state_dir(
            &config.state_dir,
            config.force_subreaper,
            config.limits.grant_ceiling(),
        ));
        confine.clean_leftovers();
        // Where throwaway browsers live, when there is a browser tier: hidden from the
        // shells of grants with their own display too.
        let browser_dir = config.browser_command.as_ref().map(|_| {
            config.browser_dir.clone().unwrap_or_else(|| {
                let env: std::collections::HashMap<String, String> = std::env::vars().collect();
                browser::default_dir(&env)
            })
        });
        // The bound address (with --listen …:0 the port is only known now): the URL check
        // refuses it, and the browsers are told to block it.
        let listen = listener
            .local_addr()
            .map_err(|e| Error::io("read the admin listener's address", e))?;
        let tool_config = tools::ToolConfig {
            admin_origin: rules::browser_url::AdminOrigin::new(listen, &config.allow_hosts),
            scrub_env: vec![
                "HANDNODE_TOKEN".into(),
                "CREDENTIALS_DIRECTORY".into(),
                // systemd's notify socket is the daemon's, not a tool's.
                "NOTIFY_SOCKET".into(),
            ],
            scrub_values,
            display_backend: config.display_backend,
            max_screenshot_edge: config.max_screenshot_edge,
            display_probe_ttl: config.timing.display_probe_ttl,
            sys_info_ttl: config.timing.sys_info_ttl,
            display_helper_timeout: config.timing.display_helper_timeout,
            background_grace: config.timing.background_grace,
            a11y_call_timeout: config.timing.a11y_call_timeout,
            display_env: config.display_env.clone(),
            own_display: config.own_display.clone(),
            own_display_walls: walls::for_own_display_shells(&config, browser_dir.clone())?,
            grant_walls: walls::for_grants(&config, browser_dir.clone())?,
            confine: Some(Arc::clone(&confine)),
            jobs: tools::jobs::table::JobConfig {
                dir: Some(config.state_dir.join(tools::jobs::table::DIR_NAME)),
                window: config.limits.job_output_bytes,
                disk_cap: config.limits.job_disk_bytes,
                disk_share: config.limits.job_disk_share(),
                per_scope: config.limits.jobs_per_grant,
                total: config.limits.jobs_total,
                retention: config.timing.job_retention,
                kill_grace: config.timing.job_kill_grace,
                kept_per_scope: tools::jobs::table::DEFAULT_KEPT_PER_SCOPE,
                audit_args: config.audit_args,
            },
            upload_bytes: config.limits.upload_bytes,
            protected: protected_dirs(&config),
            upstreams: !config.upstreams.is_empty(),
            apps: config.apps.clone(),
            app_dirs: None,
        };
        let browsers = match config.browser_command.as_ref().zip(browser_dir) {
            Some((argv, dir)) => Some(Arc::new(browser::Browsers::start(
                browser::BrowserOptions {
                    argv: argv.clone(),
                    max_browsers: config.limits.max_browsers,
                    idle: config.timing.browser_idle,
                    start_timeout: config.timing.browser_start_timeout,
                    dir,
                    env: tool_config.clone(),
                    max_message_bytes: config.limits.max_outbound_bytes,
                    probe: true,
                    blocked_origins: base::browser_argv::admin_origins(listen, &config.allow_hosts),
                    isolation: browser::isolation_for(&config)?,
                },
            )?)),
            None => None,
        };
        let host = tools::ToolHost::new(tool_config)
            .map_err(|e| Error::io("start the process watcher", e))?;
        let jobs = Arc::clone(&host.jobs);
        jobs.report_to(audit.clone(), metrics.clone());
        host.own_displays.report_to(audit.clone());
        host.box_view.report_to(audit.clone());
        // What a crashed run left of its grants' own displays (§19) goes before any resumes.
        host.own_displays.clean_stale();
        host.box_view.clean_stale();
        // Before any grant resumes: what a crashed daemon left running is killed first.
        let recovered = jobs.recover().map_err(|e| {
            Error::Config(format!(
                "cannot use the jobs dir {}: {e} (check the state dir's permissions)",
                config
                    .state_dir
                    .join(tools::jobs::table::DIR_NAME)
                    .display()
            ))
        })?;
        if recovered > 0 {
            log::info!("{recovered} job(s) of an earlier run kept until their retention ends");
        }
        let services = Arc::new(grants::calls::Services {
            pool: pool::Pool::new(config.workers, config.limits.call_queue),
            host: Arc::clone(&host),
            upstream: if config.upstreams.is_empty() {
                None
            } else {
                Some(Arc::new(browser::upstream::Upstreams::new(
                    config.upstreams.clone(),
                    &config.timing,
                    Arc::clone(&tls),
                )?) as Arc<dyn tools::UpstreamSource>)
            },
            browsers: browsers.clone(),
            running: grants::running::Running::new(),
            halt: Arc::new(grants::halt::Halt::load(&config.state_dir)),
            journal: journal::Journal::start(journal::Settings {
                dir: config.persist.then(|| config.state_dir.join("journal")),
                max_bytes: config.limits.journal_bytes,
                keep: config.timing.journal_keep,
                sweep_every: config.timing.journal_sweep,
            })
            .map_err(|e| Error::io("cannot start the journal thread", e))?,
        });
        // sys_info names what a connection is lent from the same sources tools/list reads.
        let _ = host.sources.set(tools::LentSources {
            upstream: services.upstream.clone(),
            browsers: services
                .browsers
                .clone()
                .map(|b| b as Arc<dyn tools::BrowserTier>),
        });
        let notifier = if config.notify {
            grants::notify::Notifier::for_display(
                config.notify_program.clone(),
                config.display_env.as_ref(),
            )
        } else {
            None
        };
        let (approvals, approvals_guard) = grants::approvals::Approvals::start(
            grants::approvals::HubConfig {
                timeout: config.timing.approval_timeout,
                max_pending: config.limits.approvals_pending,
                max_pending_per_grant: config.limits.approvals_pending_per_grant,
                max_waiters: config.limits.approval_waiters,
                max_args_bytes: config.limits.approval_args_bytes,
                audit_args: config.audit_args,
                notifier,
            },
            audit.clone(),
            Arc::clone(&metrics),
        )
        .map_err(|e| Error::io("start the approvals thread", e))?;
        let registry = grants::Registry::new(
            Arc::clone(&services),
            store,
            audit.clone(),
            Arc::clone(&metrics),
            tls,
            Arc::clone(&approvals),
            grants::RegistryConfig {
                timing: config.timing.clone(),
                limits: config.limits.clone(),
                audit_args: config.audit_args,
                notify: config.notify,
            },
        );
        // A live grant's journal is never swept, however old its last record.
        let weak = Arc::downgrade(&registry);
        services.journal.set_live_check(Arc::new(move |id| {
            weak.upgrade().is_some_and(|r| r.get(id).is_some())
        }));
        let state = Arc::new(admin::AdminState::new(
            policy,
            Arc::clone(&registry),
            services,
            approvals,
            metrics,
            audit,
            config.allow_hosts.clone(),
            config.timing.clone(),
            config.limits.clone(),
            config.audit_args,
        ));
        // Resume before the first request is accepted (the bound listener queues it): an
        // attach served earlier would save a registry without the persisted grants over the
        // file they are about to be loaded from.
        let resumed = registry.resume()?;
        jobs.retain_scopes(&registry.live_ids());
        let halt_key = match &config.halt_key {
            Some(chord) => Some(
                ops::halt_key::HaltKey::for_registry(
                    ops::halt_key::Settings {
                        chord: chord.clone(),
                        root: config.input_root.clone(),
                        rescan: config.timing.halt_key_rescan,
                    },
                    Arc::clone(&registry),
                )
                .map_err(|e| Error::io("start the halt key's watcher", e))?,
            ),
            None => None,
        };
        let (fatal_tx, fatal) = crossbeam_channel::unbounded();
        let admin =
            admin::AdminServer::start(listener, local_listener, Arc::clone(&state), fatal_tx)?;
        state.ready.store(true, std::sync::atomic::Ordering::SeqCst);
        log::info!("admin API listening on http://{}", admin.local_addr);
        if let Some(path) = &admin.local_path {
            log::info!(
                "admin API also on the local socket {} (this user's processes only; the CLI's default)",
                path.display()
            );
        }
        // A supervisor without sd_notify (or a test) can wait for this line.
        log::info!("ready: {resumed} persisted grant(s) resumed");
        if config.sd_notify {
            // The same moment /readyz turns 200: listening, every resumed grant's thread started.
            sd_notify_or_warn(&format!(
                "READY=1\nSTATUS=admin API on http://{}",
                admin.local_addr
            ));
        }
        Ok(Daemon {
            admin: Some(admin),
            registry,
            fatal,
            approvals_guard: Some(approvals_guard),
            audit_guard: Some(audit_guard),
            jobs,
            host,
            confine,
            sd_notify: config.sd_notify,
            browsers,
            state_lock: Some(state_lock),
            halt_key,
        })
    }

    /// Where the admin API listens (useful with `--listen 127.0.0.1:0`).
    pub fn local_addr(&self) -> Option<std::net::SocketAddr> {
        self.admin.as_ref().map(|a| a.local_addr)
    }

    /// Test hook: what `--halt-key` watches and ignores now (`HaltKey::view`); `None`
    /// without `--halt-key`.
    #[doc(hidden)]
    pub fn halt_key_view(&self) -> Option<serde_json::Value> {
        self.halt_key.as_ref().map(ops::halt_key::HaltKey::view)
    }

    /// Test hook: make the admin server's accept loop die as on a real accept error.
    #[doc(hidden)]
    pub fn break_accept_loop(&self) {
        if let Some(admin) = &self.admin {
            admin.break_accept_loop();
        }
    }

    /// Block until shutdown is asked or the admin server dies, then stop cleanly.
    pub fn wait(mut self, shutdown: &Shutdown) -> Result<(), Error> {
        let result = crossbeam_channel::select! {
            recv(shutdown.receiver()) -> _ => Ok(()),
            recv(self.fatal) -> e => Err(e.unwrap_or_else(|_| Error::AcceptLoop("admin server gone".into()))),
        };
        if result.is_ok() {
            log::info!("shutting down");
        }
        if self.sd_notify {
            sd_notify_or_warn("STOPPING=1");
        }
        self.stop();
        result
    }

    fn stop(&mut self) {
        self.halt_key.take();
        self.admin.take();
        // Before the grants stop: parked long-polls are answered and held calls withdrawn
        // (audited) now, not after every grant thread has been joined.
        self.approvals_guard.take();
        self.registry.shutdown();
        if let Some(browsers) = self.browsers.take() {
            browsers.shutdown();
        }
        // A job never outlives the daemon; its end is recorded before the audit closes.
        self.jobs.shutdown();
        // Nor does a grant's own display (§19): stopped by SIGTERM before the cgroups go.
        self.host.own_displays.shutdown();
        // Nor the box display's VNC server (§23), the daemon's own child.
        self.host.box_view.shutdown();
        self.confine.stop();
        self.audit_guard.take();
        self.state_lock.take();
    }
}

/// A failed notification is logged, not fatal: under `Type=notify` systemd reports the missing
/// `READY=1` itself, and without systemd there is nobody to tell.
fn sd_notify_or_warn(state: &str) {
    if let Err(e) = ops::sdnotify::notify(state) {
        log::warn!("could not notify systemd ({state:?}): {e}");
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        self.stop();
    }
}

/// What a lent folder must neither be nor hold (`tools::paths::vet`): the state and
/// config dirs, `~` and its dirs of secrets, and wherever the admin token was read from
/// (`--token-file`, `$CREDENTIALS_DIRECTORY`) when that is a file of its own.
fn protected_dirs(config: &Config) -> tools::paths::Protected {
    let absolute = |v: std::ffi::OsString| {
        let p = std::path::PathBuf::from(v);
        p.is_absolute().then_some(p)
    };
    let home = std::env::var_os("HOME").and_then(absolute);
    let mut protected =
        tools::paths::Protected::new(&config.state_dir, &config.config_dir, home.as_deref());
    if let Some(dir) = std::env::var_os("CREDENTIALS_DIRECTORY").and_then(absolute) {
        protected = protected.with("the credentials dir", dir);
    }
    if let Some(token) = config
        .token_source
        .as_deref()
        .map(std::path::PathBuf::from)
        .filter(|p| p.is_absolute())
    {
        protected = protected.with("the admin token file", token);
    }
    protected
}
