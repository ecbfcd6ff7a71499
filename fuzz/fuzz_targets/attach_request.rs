//! `POST /attach` body validation. Whatever `AttachRequest::parse` accepts must be a grant
//! the daemon can actually dial, persist and resume: the URL builds a WebSocket request,
//! the secret is a valid header value, and `persist::parse` keeps the stored form and its
//! tool lists resolve again to the same tools (a custom grant survives a restart).
#![no_main]

use handnode::grants::{self, AttachRequest, SecretSource};
use handnode::tools::policy::ToolPolicy;
use handnode::{grants::dial, wire::mint, grants::persist, base::url};
use libfuzzer_sys::fuzz_target;
use serde_json::json;
use tungstenite::client::IntoClientRequest;

fuzz_target!(|data: &[u8]| {
    let Ok(req) = AttachRequest::parse(data) else {
        return;
    };
    assert!((1..=32).contains(&req.session.len()));
    assert!(req
        .session
        .bytes()
        .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-'));
    assert!((1..=grants::MAX_TTL_SECS).contains(&req.ttl_secs));
    assert!(url::endpoint(&req.runtime).is_ok());
    let _ = grants::target_key(&req.runtime, &req.session);
    let url = dial::attach_url(&req.runtime, &req.session);
    assert!(url::endpoint(&url).is_ok(), "{url}");
    url.as_str()
        .into_client_request()
        .unwrap_or_else(|e| panic!("an accepted runtime makes an undialable URL {url:?}: {e}"));
    assert!(mint::mint_url(&req.runtime, &req.session).is_ok());
    let secret = match &req.source {
        SecretSource::Given(s) => s.expose().to_string(),
        SecretSource::AdminCredential(c) => {
            assert!(!c.expose().is_empty());
            return;
        }
    };
    assert!(!secret.is_empty());
    tungstenite::http::HeaderValue::from_str(&format!("Bearer {secret}"))
        .expect("an accepted secret is a valid Authorization header");
    // Durable means resumable: the stored form of this grant survives a reload.
    let now = 1_800_000_000u64;
    let file = json!({"version": persist::FORMAT_VERSION, "grants": [{
        "id": "00000000-0000-4000-8000-000000000000",
        "runtime": req.runtime,
        "session": req.session,
        "profile": req.policy.profile().as_str(),
        "allow": req.policy.lists().allow,
        "deny": req.policy.lists().deny,
        "tools": req.policy.tools(),
        "principal": "fuzz",
        "created_at": now,
        "expires_at": now + req.ttl_secs,
        "secret": secret,
    }]});
    let report = persist::parse(file.to_string().as_bytes(), now).unwrap();
    assert_eq!(
        report.grants.len(),
        1,
        "a grant accepted by POST /attach is dropped on reload: {:?}",
        report.dropped
    );
    let g = &report.grants[0];
    let lists = handnode::tools::policy::ToolLists {
        allow: g.allow.clone(),
        deny: g.deny.clone(),
    };
    let again = ToolPolicy::resume(&g.profile, lists, &g.tools)
        .unwrap_or_else(|e| panic!("an accepted grant does not resume: {e}"));
    assert_eq!(again, req.policy);
});
