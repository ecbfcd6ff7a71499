//! The pod's answer to a mint request, parsed by hand (status line, headers, chunked or
//! sized body). A 502 quotes at most 200 bytes; a secret is never empty.
#![no_main]

use handnode::wire::mint::parse_response;
use handnode::Error;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    match parse_response(data) {
        Ok(minted) => assert!(!minted.secret.expose().is_empty()),
        Err(Error::Mint { body, .. }) => {
            // 200 bytes, widened at most 3x by U+FFFD replacement of invalid UTF-8.
            assert!(body.len() <= 600, "{}", body.len());
        }
        Err(other) => panic!("unexpected error kind: {other:?}"),
    }
});
