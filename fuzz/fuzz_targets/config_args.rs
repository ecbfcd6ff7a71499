//! Command-line and environment parsing (`cli::parse`, which also covers the operator
//! subcommands). Input: argv words separated by NUL. The token comes from the
//! environment so no token file is ever generated, and flags naming files are skipped so
//! the fuzzer never reads from a pipe or a device.
#![no_main]

use std::collections::HashMap;

use handnode::ops::cli;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let mut args: Vec<String> = Vec::new();
    let mut skip_next = false;
    for word in text.split('\0') {
        if skip_next {
            skip_next = false;
            continue;
        }
        if word.contains("file") || word.contains("dir") || word.starts_with("--wait") {
            skip_next = !word.contains('=');
            continue;
        }
        args.push(word.to_string());
    }
    let env: HashMap<String, String> = [
        ("HANDNODE_TOKEN".to_string(), "fuzz-token".to_string()),
        ("HOME".to_string(), "/nonexistent-handnode-fuzz".to_string()),
    ]
    .into_iter()
    .collect();
    match cli::parse(&args, &env) {
        Ok(_) => {}
        Err(e) => {
            assert!(!e.to_string().is_empty());
            assert_eq!(
                e.exit_code(),
                2,
                "a parse error is a configuration error: {e}"
            );
        }
    }
});
