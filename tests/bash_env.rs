//! End to end: the environment a `bash` child really receives. Its own test binary
//! because it sets variables in this process's environment, which would race with
//! other tests' threads.

use std::time::Duration;

use handnode::base::secret::Secret;
use handnode::pool::{CallCtl, Completion};
use handnode::tools::{bash, CallContext, CallLimits, ToolConfig, ToolHost};
use handnode::wire::mcp::ToolOutput;
use serde_json::json;

#[test]
fn secrets_never_reach_the_child_environment() {
    std::env::set_var("HANDNODE_TOKEN", "admin-token-value");
    std::env::set_var("HANDNODE_OTHER", "x");
    std::env::set_var("CREDENTIALS_DIRECTORY", "/run/credentials/handnode.service");
    std::env::set_var("HN_TEST_SCRUB_ME", "by-name");
    std::env::set_var("HN_TEST_HOLDS_SECRET", "attach-secret-value");
    std::env::set_var("HN_TEST_KEEP", "kept");

    let host = ToolHost::new(ToolConfig {
        scrub_env: vec!["HN_TEST_SCRUB_ME".into()],
        scrub_values: vec![Secret::new("attach-secret-value")],
        ..ToolConfig::default()
    })
    .unwrap();
    let (tx, rx) = crossbeam_channel::bounded(1);
    bash::start(
        json!({"command": "env", "env": {"HN_TEST_CALLER": "yes"}}),
        CallContext {
            policy: handnode::tools::policy::ToolPolicy::owner(),
            grant: None,
            limits: CallLimits::GRANT,
            ctl: CallCtl::new(),
            host: std::sync::Arc::clone(&host),
            principal: "test".into(),
        },
        Completion::new(move |out| tx.send(out).unwrap()),
    );
    let out = match rx.recv_timeout(Duration::from_secs(30)).unwrap() {
        // Produced when its reply can be sent (§15): here, now.
        ToolOutput::Later(later) => later.run(),
        out => out,
    };
    let result: serde_json::Value = match out {
        ToolOutput::Result(result) => result,
        ToolOutput::Json { json, .. } => serde_json::from_str(&json).unwrap(),
        other => panic!("bash did not produce a result: {other:?}"),
    };
    assert_eq!(result["structuredContent"]["exit_code"], 0, "{result}");
    // The streams are in the text block; structuredContent says where.
    let text = result["content"][0]["text"].as_str().unwrap();
    let [a, b] = [0, 1].map(|i| {
        result["structuredContent"]["stdout_range"][i]
            .as_u64()
            .unwrap() as usize
    });
    let env = &text[a..b];
    for secret in [
        "admin-token-value",
        "attach-secret-value",
        "by-name",
        "/run/credentials",
    ] {
        assert!(!env.contains(secret), "{secret} reached the child:\n{env}");
    }
    assert!(!env.contains("HANDNODE_"), "{env}");
    for kept in ["HN_TEST_KEEP=kept\n", "HN_TEST_CALLER=yes\n", "PATH="] {
        assert!(env.contains(kept), "{kept} missing:\n{env}");
    }
}
