//! URL handling of the dial loop: `url::endpoint`, `attach_url`, `grants::target_key`
//! and `mint::mint_url` on arbitrary strings. Accepted hosts are lowercase and non-empty,
//! ports non-zero, and normalisation is idempotent
//! (up to the one trailing `/` the contract removes).
#![no_main]

use handnode::{grants::dial, grants, wire::mint, base::url};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(url) = std::str::from_utf8(data) else {
        return;
    };
    let session = "s";
    let key = grants::target_key(url, session);
    let _ = mint::mint_url(url, session);
    let _ = dial::attach_url(url, session);
    if let Ok(ep) = url::endpoint(url) {
        assert!(!ep.host.is_empty());
        assert_ne!(ep.port, 0);
        assert_eq!(ep.host, ep.host.to_ascii_lowercase());
        // The normalised key names the same endpoint, and normalising it again changes
        // nothing (the contract removes exactly one trailing `/`, so put one back first).
        let normal = key.strip_suffix(" s").expect("key ends with the session");
        let again = url::endpoint(normal).expect("a normalised URL parses");
        assert_eq!(again, ep, "{url:?} -> {normal:?}");
        assert_eq!(grants::target_key(&format!("{normal}/"), session), key);
    }
});
