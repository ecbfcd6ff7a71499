//! The conformance vectors, from the repository's own copy in `tests/conformance/`: every
//! auth case against `auth::Policy` (reasons included). The copy can be compared with an
//! upstream set of vectors on request (`HANDNODE_SHARED_CONFORMANCE`); nothing here reads
//! a file outside the repository unless asked to.

use std::path::{Path, PathBuf};

use handnode::auth::{Decision, Policy, RequestFacts};
use handnode::base::secret::Secret;
use serde_json::Value;

fn vendored() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/conformance")
}

fn load(name: &str) -> Value {
    let path = vendored().join(name);
    let text = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

fn policy_of(config: &Value) -> Policy {
    let token = config
        .get("bearerToken")
        .and_then(Value::as_str)
        .map(Secret::new);
    let logins: Vec<String> = config
        .get("allowedLogins")
        .and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .map(|v| v.as_str().expect("logins are strings").to_string())
                .collect()
        })
        .unwrap_or_default();
    let insecure_local = config
        .get("allowLocalUnauthenticated")
        .and_then(Value::as_bool)
        .unwrap_or(false);
    Policy::new(token, logins, insecure_local)
}

#[test]
fn every_auth_vector_passes() {
    let vectors = load("auth_vectors.json");
    let cases = vectors["cases"].as_array().expect("cases array");
    assert!(!cases.is_empty());
    let (mut validated, mut decided) = (0, 0);
    for case in cases {
        let name = case["name"].as_str().expect("case name");
        let policy = policy_of(&case["config"]);
        if let Some(want) = case.get("validate") {
            match want.as_str() {
                Some("error") => assert!(policy.validate().is_err(), "{name}"),
                Some("ok") => assert!(policy.validate().is_ok(), "{name}"),
                other => panic!("{name}: unknown validate expectation {other:?}"),
            }
            validated += 1;
        }
        let Some(expect) = case.get("expect") else {
            continue;
        };
        // A case that decides must have a configuration that validates.
        assert_eq!(policy.validate(), Ok(()), "{name}");
        let headers: Vec<(String, String)> = case["headers"]
            .as_object()
            .map(|h| {
                h.iter()
                    .map(|(k, v)| (k.clone(), v.as_str().expect("header value").to_string()))
                    .collect()
            })
            .unwrap_or_default();
        let loopback = case["remoteIsLoopback"]
            .as_bool()
            .expect("remoteIsLoopback");
        let facts = RequestFacts::from_headers(
            headers.iter().map(|(k, v)| (k.as_str(), v.as_str())),
            loopback,
        );
        let want = match (expect.get("allow"), expect.get("deny")) {
            (Some(p), None) => Decision::Allow(p.as_str().expect("principal").into()),
            (None, Some(r)) => Decision::Deny(r.as_str().expect("reason").into()),
            _ => panic!("{name}: expect needs exactly one of allow/deny"),
        };
        assert_eq!(policy.decide(&facts), want, "{name}");
        decided += 1;
    }
    assert_eq!(validated + decided, cases.len(), "every case was checked");
}

/// An upstream set of vectors to compare the repository's copy with, named by
/// `HANDNODE_SHARED_CONFORMANCE`. A named dir that does not exist is a failure, not a skip:
/// whoever set the variable wants the comparison.
fn shared_dir() -> Option<PathBuf> {
    let dir = PathBuf::from(std::env::var_os("HANDNODE_SHARED_CONFORMANCE")?);
    assert!(
        dir.is_dir(),
        "HANDNODE_SHARED_CONFORMANCE={} is not a directory",
        dir.display()
    );
    Some(dir)
}

#[test]
fn vendored_vectors_equal_the_shared_ones() {
    let Some(shared) = shared_dir() else {
        println!(
            "skipped: set HANDNODE_SHARED_CONFORMANCE to a dir of upstream vectors to compare tests/conformance/ with"
        );
        return;
    };
    let names = |dir: &Path| {
        let mut names: Vec<String> = std::fs::read_dir(dir)
            .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .filter(|n| n.ends_with(".json"))
            .collect();
        names.sort();
        names
    };
    let ours = names(&vendored());
    assert_eq!(ours, names(&shared), "the same vector files");
    assert!(ours.len() >= 2, "{ours:?}");
    for name in ours {
        let a = std::fs::read(vendored().join(&name)).unwrap();
        let b = std::fs::read(shared.join(&name)).unwrap();
        assert!(
            a == b,
            "tests/conformance/{name} differs from {}",
            shared.display()
        );
    }
}
