//! What `serve` says at start: warnings about risky settings and the effective settings,
//! with secrets masked.

use super::*;

/// `http://user:pass@host/…` → `http://***@host/…`, for logs.
fn mask_url(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_string();
    };
    let authority_end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    match rest[..authority_end].rfind('@') {
        Some(at) => format!("{scheme}://***{}", &rest[at..]),
        None => url.to_string(),
    }
}

fn on_off(b: bool) -> &'static str {
    if b {
        "on"
    } else {
        "off"
    }
}

/// What an operator should hear about at start. `is_root` is passed in so tests need not
/// run as root (or not).
pub fn warnings(config: &Config, is_root: bool) -> Vec<String> {
    let mut out = Vec::new();
    if !config.allow_logins.is_empty() && config.allow_hosts.is_empty() {
        out.push(
            "--allow-login is set without any --allow-host: behind `tailscale serve` requests arrive with Host: <box>.<tailnet>.ts.net and will get 403; add --allow-host <that name>"
                .to_string(),
        );
    }
    if !config.allow_logins.is_empty() && config.token.is_none() {
        out.push(
            "--allow-login is set without an admin token: `tailscale serve` connects from loopback, so a local process sending the same Tailscale-User-Login header is indistinguishable from the tailnet and gets in as that login; configure a token too (--token-file or <config dir>/token) so every request needs the login AND the bearer"
                .to_string(),
        );
    }
    if !config.allow_logins.is_empty() && !config.listen.ip().is_loopback() {
        out.push(format!(
            "--allow-login trusts the Tailscale-User-Login header, but --listen {} is not loopback: anyone who can reach that address can claim a login; listen on loopback behind `tailscale serve`",
            config.listen
        ));
    }
    if config.insecure_local {
        out.push(
            "--insecure-local is on: every local user and process can use the admin API without credentials"
                .to_string(),
        );
    }
    if config.audit_args {
        out.push("--audit-args is on: audit.jsonl records tool arguments, typed text and passwords included".to_string());
    }
    out.extend(config.start_warnings.iter().cloned());
    if is_root {
        out.push(
            "running as root: the bash tool is a root shell for whoever holds a grant; run handnode as an ordinary user"
                .to_string(),
        );
    }
    out
}

/// Log the effective settings once at start (secrets masked), then any warnings.
pub fn log_effective(config: &Config) {
    let list = |v: &[String]| {
        if v.is_empty() {
            "-".to_string()
        } else {
            v.join(",")
        }
    };
    let token = match (&config.token, &config.token_source) {
        (Some(_), Some(source)) => format!("token from {source}"),
        (Some(_), None) => "token set".to_string(),
        (None, _) => "no token".to_string(),
    };
    log::info!(
        "handnode {} starting (admin API to listen on {}); auth: {token}, allow-login {}, insecure-local {}; allow-host {}",
        env!("CARGO_PKG_VERSION"),
        config.listen,
        list(&config.allow_logins),
        on_off(config.insecure_local),
        list(&config.allow_hosts),
    );
    let upstreams: Vec<String> = config
        .upstreams
        .iter()
        .map(|(name, url)| format!("{name}={}", mask_url(url)))
        .collect();
    log::info!(
        "state dir {} (persist {}), config dir {}; workers {}, audit-args {}, ca-file {}, upstream {}, display {}, max screenshot edge {} px, notify {}, sd-notify {}",
        config.state_dir.display(),
        on_off(config.persist),
        config.config_dir.display(),
        config.workers,
        on_off(config.audit_args),
        config.ca_file.as_ref().map_or("-".to_string(), |p| p.display().to_string()),
        list(&upstreams),
        config.display_backend.as_str(),
        config.max_screenshot_edge,
        on_off(config.notify),
        on_off(config.sd_notify),
    );
    match &config.browser_command {
        Some(argv) => log::info!(
            "browser tier: {} browser(s) at most, each running {:?}",
            config.limits.max_browsers,
            argv
        ),
        None => log::info!("browser tier: off (no --browser-command)"),
    }
    // Every timer and bound, for whoever debugs a start (RUST_LOG=debug); at info level they
    // buried the one line a person needs, e.g. why a second daemon refused to start.
    log::debug!("timing: {:?}; limits: {:?}", config.timing, config.limits);
    let is_root = rustix::process::geteuid().is_root();
    for warning in warnings(config, is_root) {
        log::warn!("{warning}");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_in_logs_lose_their_credentials() {
        assert_eq!(mask_url("http://u:p@h:1/mcp"), "http://***@h:1/mcp");
        assert_eq!(mask_url("http://h/a@b"), "http://h/a@b");
        assert_eq!(mask_url("https://h"), "https://h");
    }
}
