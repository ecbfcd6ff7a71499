//! The DNS-rebinding guard's host check. The input is `host \0 allow-host \0 ...`.
//! Anything it admits without an allow-list is loopback or localhost; case never matters.
#![no_main]

use handnode::admin::host_allowed;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let mut parts = text.split('\0');
    let host = parts.next().unwrap_or("");
    let allow: Vec<String> = parts.map(|s| s.to_ascii_lowercase()).collect();
    let allowed = host_allowed(host, &allow);
    assert_eq!(allowed, host_allowed(&host.to_ascii_uppercase(), &allow));
    if host_allowed(host, &[]) {
        let h = host.trim().to_ascii_lowercase();
        let bare = if let Some(rest) = h.strip_prefix('[') {
            rest.split(']').next().unwrap_or("").to_string()
        } else if h.matches(':').count() == 1 {
            h.split(':').next().unwrap_or("").to_string()
        } else {
            h.clone()
        };
        let loopback = bare
            .parse::<std::net::IpAddr>()
            .map(handnode::auth::is_loopback)
            .unwrap_or(false);
        assert!(
            loopback || bare == "localhost" || bare.ends_with(".localhost"),
            "{host:?} admitted as local ({bare:?})"
        );
    }
});
