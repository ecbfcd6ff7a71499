//! Admin API authentication on arbitrary headers: `RequestFacts::from_headers`, the §2
//! decision under every policy shape, the throttle key and the throttle table itself.
//! Input: header lines `name: value` separated by `\n`; the first byte picks the policy.
#![no_main]

use std::net::IpAddr;
use std::time::{Duration, Instant};

use handnode::auth::{client_key, Decision, Policy, RequestFacts, Throttle, MAX_KEY_BYTES};
use handnode::Secret;
use libfuzzer_sys::fuzz_target;

const TOKEN: &str = "fuzz-token";

fuzz_target!(|data: &[u8]| {
    let Some((&selector, rest)) = data.split_first() else {
        return;
    };
    let Ok(text) = std::str::from_utf8(rest) else {
        return;
    };
    let headers: Vec<(&str, &str)> = text
        .split('\n')
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k, v.trim_start()))
        .collect();
    let loopback = selector & 1 != 0;
    let facts = RequestFacts::from_headers(headers.iter().copied(), loopback);
    let token = (selector & 2 != 0).then(|| Secret::new(TOKEN));
    let logins: &[&str] = if selector & 4 != 0 {
        &["you@example.com"]
    } else {
        &[]
    };
    let policy = Policy::new(token.clone(), logins, selector & 8 != 0);
    let decision = policy.decide(&facts);
    if token.is_some() {
        if let Decision::Allow(_) = decision {
            let auth = facts
                .authorization
                .as_ref()
                .expect("allowed without a header");
            let value = auth.expose();
            assert!(value.len() >= 7 && value[..7].eq_ignore_ascii_case("bearer "));
            assert_eq!(value[7..].trim(), TOKEN, "allowed with a wrong token");
        }
    }
    let peer: IpAddr = if loopback {
        [127, 0, 0, 1].into()
    } else {
        [203, 0, 113, 7].into()
    };
    let key = client_key(&facts, peer);
    assert!(key.len() <= MAX_KEY_BYTES + 8, "{}", key.len());
    // The table never grows past its capacity, whatever the keys.
    let mut throttle = Throttle::new(2, Duration::from_secs(60), Duration::from_secs(60), 4);
    let t0 = Instant::now();
    for (i, (_, v)) in headers.iter().enumerate() {
        let _ = throttle.fail(v, t0 + Duration::from_millis(i as u64));
        assert!(throttle.len() <= 4);
    }
    let _ = throttle.fail(&key, t0);
    assert!(throttle.len() <= 4);
});
