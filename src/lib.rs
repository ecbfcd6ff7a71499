//! handnode: lend this Linux box's tools to one coding-agent session, time-boxed and
//! revocable, by dialling into the agent's pod and serving MCP over that socket.
#![forbid(unsafe_code)]

pub mod audit;
pub mod auth;
pub mod calls;
pub mod cli;
pub mod config;
pub mod dial;
pub mod doctor;
pub mod error;
pub mod grants;
pub mod jobs;
pub mod mcp;
pub mod metrics;
pub mod mint;
pub mod notify;
pub mod persist;
pub mod profiles;
pub mod secret;
pub mod timefmt;
pub mod tls;
pub mod tools;
pub mod wake;

pub use config::Config;
pub use error::Error;

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
    let _ = config;
    let _ = shutdown.receiver().recv();
    Ok(())
}
