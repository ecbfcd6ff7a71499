//! The `handnode` binary: argv and env → `ops::cli::Command`, logging, signals, exit codes.

use std::collections::HashMap;
use std::process::ExitCode;

use handnode::config;
use handnode::ops::cli::Command;
use handnode::{ops::cli, ops::doctor, Shutdown};
use signal_hook::consts::{SIGINT, SIGTERM};
use signal_hook::iterator::Signals;

/// The one place this crate calls C: capping glibc's malloc arenas. glibc gives every
/// thread that allocates an arena of its own (up to 8 per CPU) and keeps what each frees;
/// with one thread per grant, a 1 MiB reply on each of 100 grants left 339 KiB per grant
/// resident (bench `rss_per_grant_after_reply_kib`, target 256) where two arenas leave 147.
/// The shipped static binary uses musl, which has no arenas; an operator's own
/// `MALLOC_ARENA_MAX` or `GLIBC_TUNABLES` wins.
#[cfg(all(target_os = "linux", target_env = "gnu"))]
mod glibc_malloc {
    use std::os::raw::c_int;

    /// `M_ARENA_MAX` of glibc's `<malloc.h>`.
    const M_ARENA_MAX: c_int = -8;
    /// Arenas: the threads of a grant, the pool and the admin API share two.
    const ARENAS: c_int = 2;

    extern "C" {
        fn mallopt(param: c_int, value: c_int) -> c_int;
    }

    pub fn cap_arenas() {
        if std::env::var_os("MALLOC_ARENA_MAX").is_some()
            || std::env::var_os("GLIBC_TUNABLES").is_some()
        {
            return;
        }
        // SAFETY: mallopt only sets a malloc parameter; it is called first thing in main,
        // before any other thread exists, with a parameter glibc documents.
        #[allow(unsafe_code)]
        unsafe {
            mallopt(M_ARENA_MAX, ARENAS);
        }
    }
}

#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
mod glibc_malloc {
    pub fn cap_arenas() {}
}

/// Log targets whose trace output carries raw request bytes (the `Authorization` header of
/// a WebSocket handshake, a grant's secret in an admin request body).
const RAW_TRACE_TARGETS: [&str; 1] = ["tungstenite"];

fn is_raw_trace(metadata: &log::Metadata) -> bool {
    metadata.level() == log::Level::Trace
        && RAW_TRACE_TARGETS
            .iter()
            .any(|t| metadata.target() == *t || metadata.target().starts_with(&format!("{t}::")))
}

/// env_logger with the raw-bytes trace output of our HTTP/WebSocket crates dropped, so even
/// `RUST_LOG=trace` never prints a secret.
struct SecretSafeLogger(env_logger::Logger);

impl log::Log for SecretSafeLogger {
    fn enabled(&self, metadata: &log::Metadata) -> bool {
        !is_raw_trace(metadata) && self.0.enabled(metadata)
    }

    fn log(&self, record: &log::Record) {
        if !is_raw_trace(record.metadata()) {
            self.0.log(record);
        }
    }

    fn flush(&self) {
        self.0.flush();
    }
}

fn init_logging() {
    // env_logger's standard line (RFC 3339 time, level, target, message), coloured only on
    // a terminal.
    let logger =
        env_logger::Builder::from_env(env_logger::Env::default().default_filter_or("info")).build();
    let max = logger.filter();
    if log::set_logger(Box::leak(Box::new(SecretSafeLogger(logger)))).is_ok() {
        log::set_max_level(max);
    }
}

fn exit(code: i32) -> ExitCode {
    ExitCode::from(u8::try_from(code).unwrap_or(1))
}

fn main() -> ExitCode {
    glibc_malloc::cap_arenas();
    init_logging();
    // First, before any secret is read: every subcommand may hold one (a token, a pod
    // credential from --admin-credential-file).
    if let Err(e) = handnode::base::hardening::apply() {
        log::warn!("could not disable core dumps and ptrace for this process: {e}");
    }
    let mut args = Vec::new();
    for arg in std::env::args_os().skip(1) {
        match arg.into_string() {
            Ok(arg) => args.push(arg),
            Err(arg) => {
                eprintln!("handnode: argument {arg:?} is not UTF-8");
                return exit(2);
            }
        }
    }
    // Variables that are not UTF-8 cannot be ours; leave them out.
    let env: HashMap<String, String> = std::env::vars_os()
        .filter_map(|(k, v)| Some((k.into_string().ok()?, v.into_string().ok()?)))
        .collect();

    let command = match cli::parse(&args, &env) {
        Ok(command) => command,
        Err(e) => {
            eprintln!("handnode: {e}");
            return exit(e.exit_code());
        }
    };
    match command {
        Command::Help(text) => {
            print!("{text}");
            exit(0)
        }
        Command::Version => {
            println!("handnode {}", env!("CARGO_PKG_VERSION"));
            exit(0)
        }
        Command::Doctor(args) => exit(doctor::main(&args)),
        Command::Tools(args) => exit(handnode::ops::tool_list::main(&args)),
        Command::Serve(config) => serve(config),
        operator => exit(cli::main(&operator)),
    }
}

fn serve(config: handnode::Config) -> ExitCode {
    config::log_effective(&config);
    let (handle, shutdown) = Shutdown::new();
    let mut signals = match Signals::new([SIGTERM, SIGINT]) {
        Ok(signals) => signals,
        Err(e) => {
            eprintln!("handnode: cannot install signal handlers: {e}");
            return exit(1);
        }
    };
    let spawned = std::thread::Builder::new()
        .name("signals".into())
        .spawn(move || {
            let mut signals = signals.forever();
            if let Some(signal) = signals.next() {
                log::info!("signal {signal}: shutting down (send it again to exit at once)");
                handle.shutdown();
            }
            // A second signal means the operator will not wait for a clean shutdown.
            if let Some(signal) = signals.next() {
                log::warn!("signal {signal} again: exiting without a clean shutdown");
                std::process::exit(1);
            }
        });
    if let Err(e) = spawned {
        eprintln!("handnode: cannot start the signal thread: {e}");
        return exit(1);
    }
    match handnode::run(config, shutdown) {
        Ok(()) => exit(0),
        Err(e) => {
            eprintln!("handnode: {e}");
            exit(e.exit_code())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn raw_trace_of_wire_crates_is_dropped() {
        let meta = |target: &'static str, level| {
            log::Metadata::builder().target(target).level(level).build()
        };
        assert!(is_raw_trace(&meta(
            "tungstenite::handshake::client",
            log::Level::Trace
        )));
        assert!(is_raw_trace(&meta("tungstenite", log::Level::Trace)));
        assert!(!is_raw_trace(&meta(
            "tungstenite::protocol",
            log::Level::Debug
        )));
        assert!(!is_raw_trace(&meta("tungstenitex", log::Level::Trace)));
        assert!(!is_raw_trace(&meta(
            "handnode::grants::dial",
            log::Level::Trace
        )));
    }
}
