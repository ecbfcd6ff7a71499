//! The grants-file loader. Every grant `persist::parse` keeps must go through what
//! `Registry::resume` and the dial loop do with it without a panic or a dial that can
//! never work; drop reasons never quote the file.
#![no_main]

use std::time::{Duration, UNIX_EPOCH};

use handnode::profiles::Profile;
use handnode::base::timefmt::rfc3339;
use handnode::{grants::dial, grants, grants::persist, base::url};
use libfuzzer_sys::fuzz_target;
use tungstenite::client::IntoClientRequest;

fuzz_target!(|data: &[u8]| {
    let now = 1_800_000_000u64;
    let Ok(report) = persist::parse(data, now) else {
        return;
    };
    for g in &report.grants {
        assert!(persist::is_grant_id(&g.id));
        let _profile: Profile = g.profile.parse().expect("kept grants have a known profile");
        assert!(g.expires_at > now);
        // A stored deadline past the TTL cap comes back clamped to it.
        assert!(g.expires_at <= now + grants::MAX_TTL_SECS);
        // What resume does with the timestamps.
        let _deadline = UNIX_EPOCH + Duration::from_secs(g.expires_at);
        let _ = rfc3339(g.created_at);
        let _ = rfc3339(g.expires_at);
        let _ = grants::target_key(&g.runtime, &g.session);
        let url = dial::attach_url(&g.runtime, &g.session);
        url::endpoint(&url).unwrap_or_else(|e| panic!("kept an undialable runtime: {e}"));
        url.as_str()
            .into_client_request()
            .unwrap_or_else(|e| panic!("kept an undialable runtime {url:?}: {e}"));
        tungstenite::http::HeaderValue::from_str(&format!("Bearer {}", g.secret.expose()))
            .expect("kept secrets are valid header values");
    }
    for (_, reason) in &report.dropped {
        assert!(reason.len() < 200, "{reason}");
    }
});
