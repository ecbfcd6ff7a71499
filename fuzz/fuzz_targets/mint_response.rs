//! The pod's answer to a mint request, once ureq has read it: a status (the first two
//! bytes) and a body. A refusal quotes at most 200 bytes; a secret is never empty and is
//! safe to send as a header.
#![no_main]

use handnode::wire::mint::parse_reply;
use handnode::Error;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let (status, body) = match data {
        [a, b, rest @ ..] => (u16::from_be_bytes([*a, *b]), rest),
        _ => return,
    };
    match parse_reply(status, body) {
        Ok(minted) => {
            assert!((200..300).contains(&status));
            assert!(!minted.secret.expose().is_empty());
            assert!(handnode::base::secret::Secret::is_header_safe(
                minted.secret.expose()
            ));
        }
        Err(Error::Mint { body, .. }) => {
            // 200 bytes, widened at most 3x by U+FFFD replacement of invalid UTF-8.
            assert!(body.len() <= 600, "{}", body.len());
        }
        Err(other) => panic!("unexpected error kind: {other:?}"),
    }
});
