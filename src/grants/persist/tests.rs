//! Unit tests of `grants::persist`.

use super::*;
use std::sync::Arc;

use crate::base::testutil::TempDir;

const NOW: u64 = 1_796_040_000;

fn grant(n: u8, expires_at: u64) -> StoredGrant {
    StoredGrant {
        id: format!("0000000{n}-aaaa-4bbb-8ccc-dddddddddddd"),
        runtime: "wss://pod.example:8090".into(),
        session: format!("s{n}"),
        profile: "observe".into(),
        allow: Vec::new(),
        deny: Vec::new(),
        tools: vec!["sys_info".into(), "screenshot".into()],
        principal: "you@example.com".into(),
        created_at: NOW - 10,
        expires_at,
        secret: Secret::new(format!("sekrit-value-{n}")),
        approve: None,
        approved_for_grant: Vec::new(),
        folder: None,
        limits: None,
        display: None,
    }
}

fn mode(path: &Path) -> u32 {
    fs::metadata(path).unwrap().permissions().mode() & 0o7777
}

fn entry_json(g: &StoredGrant) -> Value {
    serde_json::json!({
        "id": g.id, "runtime": g.runtime, "session": g.session, "profile": g.profile,
        "allow": g.allow, "deny": g.deny, "tools": g.tools, "principal": g.principal, "created_at": g.created_at, "expires_at": g.expires_at,
        "secret": g.secret.expose(),
    })
}

fn file_with(entries: Vec<Value>) -> Vec<u8> {
    serde_json::to_vec(&serde_json::json!({"version": 1, "grants": entries})).unwrap()
}

#[test]
fn round_trip_and_modes() {
    let tmp = TempDir::fresh("rt");
    let dir = tmp.0.join("nested/state");
    let store = GrantStore::open(&dir).unwrap();
    assert_eq!(mode(&dir), 0o700);
    let mut lent = grant(2, NOW + 200);
    lent.profile = "files".into();
    lent.tools = vec!["sys_info".into()];
    lent.folder = Some("/srv/lent".into());
    let grants = vec![grant(1, NOW + 100), lent];
    store.save(&grants).unwrap();
    assert_eq!(mode(&store.path()), 0o600);
    let report = store.load(NOW).unwrap();
    assert_eq!(report.grants, grants);
    assert!(report.dropped.is_empty());
    // Only grants.json remains: no temp file lingers.
    let names: Vec<_> = fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(names, vec![std::ffi::OsString::from(FILE_NAME)]);
}

#[test]
fn approvals_round_trip_and_a_list_the_profile_cannot_use_drops_the_grant() {
    let tmp = TempDir::fresh("approve");
    let store = GrantStore::open(&tmp.0).unwrap();
    let mut listed = grant(1, NOW + 100);
    listed.profile = "desktop".into();
    listed.approve = Some(Approve::Tools(vec!["bash".into(), "key".into()]));
    listed.approved_for_grant = vec!["key".into()];
    let mut shell = grant(2, NOW + 100);
    shell.profile = "owner".into();
    shell.approve = Some(Approve::Shell);
    store.save(&[listed.clone(), shell.clone()]).unwrap();
    let report = store.load(NOW).unwrap();
    assert_eq!(report.grants, vec![listed.clone(), shell]);
    let entries = |f: &dyn Fn(&mut Value)| {
        let mut e = entry_json(&grant(3, NOW + 100));
        f(&mut e);
        file_with(vec![e])
    };
    for (tweak, why) in [
        (
            (|e: &mut Value| e["approve"] = serde_json::json!(["bash"])) as fn(&mut Value),
            "approve names a tool this profile cannot use",
        ),
        (
            |e: &mut Value| e["approve"] = serde_json::json!(7),
            "approve is not a list of tool names or \"shell\"",
        ),
        (
            |e: &mut Value| e["approved_for_grant"] = serde_json::json!(["bash"]),
            "approved_for_grant names a tool this profile cannot use",
        ),
        (
            |e: &mut Value| e["approved_for_grant"] = serde_json::json!("bash"),
            "approved_for_grant is not a list of tool names",
        ),
    ] {
        let report = parse(&entries(&tweak), NOW).unwrap();
        assert!(report.grants.is_empty(), "{why}");
        assert_eq!(report.dropped[0].1, why);
    }
}

#[test]
fn missing_file_is_empty() {
    let tmp = TempDir::fresh("missing");
    let store = GrantStore::open(&tmp.0).unwrap();
    let report = store.load(NOW).unwrap();
    assert!(report.grants.is_empty() && report.dropped.is_empty());
    assert!(report.set_aside.is_none());
}

#[test]
fn wide_dir_and_file_are_narrowed() {
    let tmp = TempDir::fresh("wide");
    fs::create_dir_all(&tmp.0).unwrap();
    fs::set_permissions(&tmp.0, fs::Permissions::from_mode(0o755)).unwrap();
    let store = GrantStore::open(&tmp.0).unwrap();
    assert_eq!(mode(&tmp.0), 0o700);
    store.save(&[grant(1, NOW + 5)]).unwrap();
    fs::set_permissions(store.path(), fs::Permissions::from_mode(0o644)).unwrap();
    let report = store.load(NOW).unwrap();
    assert_eq!(mode(&store.path()), 0o600);
    assert_eq!(report.grants.len(), 1);
}

#[test]
fn state_dir_that_is_a_file_is_refused() {
    let tmp = TempDir::fresh("notdir");
    fs::write(&tmp.0, b"x").unwrap();
    let err = GrantStore::open(&tmp.0).unwrap_err();
    assert!(err.to_string().contains("not a directory"), "{err}");
    fs::remove_file(&tmp.0).unwrap();
}

#[test]
fn a_state_dir_that_is_a_link_or_someone_elses_is_refused() {
    let tmp = TempDir::new("dirs");
    let real = tmp.path("real");
    fs::create_dir(&real).unwrap();
    let link = tmp.path("link");
    std::os::unix::fs::symlink(&real, &link).unwrap();
    let err = GrantStore::open(&link).unwrap_err();
    assert!(err.to_string().contains("is a symbolic link"), "{err}");
    assert_eq!(err.exit_code(), 2);
    let euid = rustix::process::geteuid().as_raw();
    let meta = fs::symlink_metadata(&real).unwrap();
    assert!(crate::base::statedir::check_state_dir_meta(&real, &meta, euid).is_ok());
    let err = crate::base::statedir::check_state_dir_meta(&real, &meta, euid.wrapping_add(1))
        .unwrap_err();
    assert!(err.to_string().contains("is owned by uid"), "{err}");
}

#[test]
fn a_grants_file_that_is_a_link_is_refused_and_its_target_untouched() {
    let tmp = TempDir::new("link");
    let store = GrantStore::open(&tmp.0).unwrap();
    let target = tmp.path("elsewhere.json");
    let content = String::from_utf8(file_with(vec![entry_json(&grant(1, NOW + 60))])).unwrap();
    fs::write(&target, &content).unwrap();
    fs::set_permissions(&target, fs::Permissions::from_mode(0o644)).unwrap();
    std::os::unix::fs::symlink(&target, store.path()).unwrap();
    let err = store.load(NOW).unwrap_err();
    assert!(err.to_string().contains("is a symbolic link"), "{err}");
    assert_eq!(err.exit_code(), 2);
    assert_eq!(mode(&target), 0o644, "the link's target was chmodded");
    assert_eq!(fs::read_to_string(&target).unwrap(), content);
    // A FIFO planted there is refused too, without hanging the open.
    fs::remove_file(store.path()).unwrap();
    rustix::fs::mknodat(
        rustix::fs::CWD,
        store.path(),
        rustix::fs::FileType::Fifo,
        rustix::fs::Mode::from_raw_mode(0o600),
        0,
    )
    .unwrap();
    let err = store.load(NOW).unwrap_err();
    assert!(err.to_string().contains("not a regular file"), "{err}");
}

#[test]
fn expiry_bound() {
    let bytes = file_with(vec![
        entry_json(&grant(1, NOW)),
        entry_json(&grant(2, NOW + 1)),
        entry_json(&grant(3, NOW - 1)),
    ]);
    let report = parse(&bytes, NOW).unwrap();
    assert_eq!(report.grants.len(), 1);
    assert_eq!(report.grants[0].expires_at, NOW + 1);
    assert_eq!(
        report.dropped,
        vec![
            (grant(1, 0).id, "expired".to_string()),
            (grant(3, 0).id, "expired".to_string())
        ]
    );
}

#[test]
fn a_deadline_past_the_ttl_cap_is_clamped_to_it() {
    let cap = NOW + crate::config::MAX_TTL_SECS;
    let ten_years = NOW + 10 * 365 * 86_400;
    let bytes = file_with(vec![
        entry_json(&grant(1, cap)),
        entry_json(&grant(2, cap + 1)),
        entry_json(&grant(3, ten_years)),
    ]);
    let report = parse(&bytes, NOW).unwrap();
    let got: Vec<u64> = report.grants.iter().map(|g| g.expires_at).collect();
    assert_eq!(got, [cap, cap, cap]);
    assert_eq!(
        report.clamped,
        vec![(grant(2, 0).id, cap + 1), (grant(3, 0).id, ten_years)]
    );
    assert!(report.dropped.is_empty());
}

#[test]
fn each_malformed_entry_is_dropped_alone() {
    let good = grant(1, NOW + 60);
    let base = entry_json(&good);
    let with = |field: &str, value: Value| {
        let mut e = base.clone();
        e[field] = value;
        e
    };
    let without = |field: &str| {
        let mut e = base.clone();
        e.as_object_mut().unwrap().remove(field);
        e
    };
    let cases: Vec<(Value, &str)> = vec![
        (without("secret"), "secret missing or not a string"),
        (with("secret", Value::from("")), "secret is empty"),
        (
            with("secret", Value::from("a\r\nb")),
            "secret contains control characters",
        ),
        (
            with("secret", Value::from(42)),
            "secret missing or not a string",
        ),
        (
            without("expires_at"),
            "expires_at missing or not a non-negative integer",
        ),
        (
            with("expires_at", Value::from("soon")),
            "expires_at missing or not a non-negative integer",
        ),
        (
            with("created_at", Value::from(-1)),
            "created_at missing or not a non-negative integer",
        ),
        (
            with("profile", Value::from("sandbox")),
            "profile is not one of owner, desktop, observe, browser, files, apps, custom",
        ),
        (
            with("folder", Value::from("relative/dir")),
            "folder is not a plain absolute path",
        ),
        (
            with("folder", Value::from("/a/../b")),
            "folder is not a plain absolute path",
        ),
        (
            with("profile", Value::from("files")),
            "folder missing for a profile that requires one",
        ),
        (
            with("profile", Value::from("Owner")),
            "profile is not one of owner, desktop, observe, browser, files, apps, custom",
        ),
        (
            with("allow", Value::from("bash")),
            "allow is not a list of at most 128 tool names",
        ),
        (
            with("deny", serde_json::json!(["bash", 7])),
            "deny is not a list of at most 128 tool names",
        ),
        (
            with("deny", serde_json::json!(["bash\u{1b}[2J"])),
            "deny is not a list of at most 128 tool names",
        ),
        (
            with("allow", serde_json::json!([""])),
            "allow is not a list of at most 128 tool names",
        ),
        (
            with(
                "allow",
                serde_json::json!(vec!["sys_info"; MAX_LIST_NAMES + 1]),
            ),
            "allow is not a list of at most 128 tool names",
        ),
        (
            with(
                "tools",
                serde_json::json!(["b".repeat(MAX_TOOL_NAME_BYTES + 1)]),
            ),
            "tools is not a list of at most 128 tool names",
        ),
        (
            with("session", Value::from("Bad Session")),
            "session does not match [a-z0-9-]{1,32}",
        ),
        (
            with("session", Value::from("a".repeat(33))),
            "session does not match [a-z0-9-]{1,32}",
        ),
        (
            with("runtime", Value::from("http://pod")),
            "runtime is not a ws:// or wss:// URL with a host",
        ),
        (without("principal"), "principal missing or not a string"),
        (Value::from("just a string"), "entry is not a JSON object"),
        // Regressions from the grants_file fuzz target: a runtime that could never be
        // dialled, and a deadline `SystemTime` cannot hold (resume panicked on it).
        (
            with("runtime", Value::from("ws://host:notaport")),
            "runtime is not a ws:// or wss:// URL with a host",
        ),
        (
            with("runtime", Value::from("ws://:80")),
            "runtime is not a ws:// or wss:// URL with a host",
        ),
        (
            with("secret", Value::from("sécret")),
            "secret is not printable ASCII",
        ),
        (
            with("expires_at", Value::from(u64::MAX)),
            "expires_at is not a plausible time",
        ),
        (
            with("expires_at", Value::from(MAX_EXPIRES_AT + 1)),
            "expires_at is not a plausible time",
        ),
    ];
    for (entry, reason) in cases {
        // The good grant keeps its place after every bad one.
        let mut good2 = good.clone();
        good2.id = "ffffffff-aaaa-4bbb-8ccc-dddddddddddd".into();
        let report = parse(&file_with(vec![entry, entry_json(&good2)]), NOW).unwrap();
        assert_eq!(report.grants, vec![good2], "{reason}");
        assert_eq!(report.dropped.len(), 1, "{reason}");
        assert_eq!(report.dropped[0].1, reason);
    }
    // What `POST /attach` accepts resumes: an upper-case scheme (fuzz regression).
    let upper = parse(
        &file_with(vec![with(
            "runtime",
            Value::from("WSS://Pod.Example:8090/"),
        )]),
        NOW,
    )
    .unwrap();
    assert_eq!(upper.grants.len(), 1, "{:?}", upper.dropped);
    let latest = parse(
        &file_with(vec![with("expires_at", Value::from(MAX_EXPIRES_AT))]),
        NOW,
    )
    .unwrap();
    assert_eq!(latest.grants.len(), 1);
    // A session of exactly 32 is fine (bound), 33 above is not.
    let ok = parse(
        &file_with(vec![with("session", Value::from("a".repeat(32)))]),
        NOW,
    )
    .unwrap();
    assert_eq!(ok.grants.len(), 1);
}

#[test]
fn tool_lists_round_trip_within_their_bounds_and_older_files_have_none() {
    let mut g = grant(1, NOW + 60);
    g.profile = "custom".into();
    g.allow = vec!["sys_info".into(), "browser_*".into()];
    g.deny = vec!["browser_evaluate".into()];
    g.tools = vec!["sys_info".into(), "browser_snapshot".into()];
    let report = parse(&encode(std::slice::from_ref(&g)), NOW).unwrap();
    assert_eq!(report.grants, vec![g.clone()]);
    // At the bounds: MAX_LIST_NAMES names of MAX_TOOL_NAME_BYTES bytes each.
    let mut e = entry_json(&g);
    let longest = format!("{}*", "b".repeat(MAX_TOOL_NAME_BYTES - 1));
    e["allow"] = serde_json::json!(vec![longest; MAX_LIST_NAMES]);
    let report = parse(&file_with(vec![e]), NOW).unwrap();
    assert_eq!(report.grants[0].allow.len(), MAX_LIST_NAMES);
    // Written before the lists existed: no allow, deny or tools at all.
    let mut old = entry_json(&grant(2, NOW + 60));
    for field in ["allow", "deny", "tools"] {
        old.as_object_mut().unwrap().remove(field);
    }
    let report = parse(&file_with(vec![old]), NOW).unwrap();
    let resumed = &report.grants[0];
    assert!(resumed.allow.is_empty() && resumed.deny.is_empty() && resumed.tools.is_empty());
}

#[test]
fn bad_ids_are_labelled_by_index_and_duplicates_dropped() {
    let mut e = entry_json(&grant(1, NOW + 60));
    for bad in [
        Value::from("0000000A-aaaa-4bbb-8ccc-dddddddddddd"),
        Value::from("not-a-uuid"),
        Value::from(7),
    ] {
        e["id"] = bad;
        let report = parse(&file_with(vec![e.clone()]), NOW).unwrap();
        assert!(report.grants.is_empty());
        assert_eq!(report.dropped[0].0, "#0");
    }
    let g = entry_json(&grant(2, NOW + 60));
    let report = parse(&file_with(vec![g.clone(), g]), NOW).unwrap();
    assert_eq!(report.grants.len(), 1);
    assert_eq!(
        report.dropped,
        vec![(grant(2, 0).id, "duplicate id".into())]
    );
}

#[test]
fn unknown_fields_are_ignored() {
    let mut e = entry_json(&grant(1, NOW + 60));
    e["future_field"] = serde_json::json!({"x": [1, 2]});
    let bytes = serde_json::to_vec(&serde_json::json!({
        "version": 1, "grants": [e], "written_by": "handnode 9"
    }))
    .unwrap();
    assert_eq!(parse(&bytes, NOW).unwrap().grants.len(), 1);
}

#[test]
fn whole_file_rejections() {
    for (bytes, why) in [
        (b"{\"version\":1,\"grants\":[" as &[u8], "not valid JSON"),
        (b"[]", "top level is not a JSON object"),
        (b"{\"grants\":[]}", "version field missing"),
        (b"{\"version\":2,\"grants\":[]}", "version is not 1"),
        (
            b"{\"version\":1,\"grants\":{}}",
            "grants field missing or not an array",
        ),
        (b"\xff\xfe", "not valid JSON"),
    ] {
        let err = parse(bytes, NOW).unwrap_err();
        assert!(err.starts_with(why), "{err}");
    }
}

#[test]
fn every_truncation_is_rejected_whole_or_parsed_without_panic() {
    let full = encode(&[grant(1, NOW + 60), grant(2, NOW + 60)]);
    for len in 0..full.len() {
        // A torn file must never resume a grant with a cut-off secret.
        if let Ok(report) = parse(&full[..len], NOW) {
            for g in report.grants {
                assert!(g.secret.expose().starts_with("sekrit-value-"));
                assert_eq!(g.secret.expose().len(), "sekrit-value-1".len());
            }
        }
    }
    assert_eq!(parse(&full, NOW).unwrap().grants.len(), 2);
}

#[test]
fn corrupt_file_is_kept_aside() {
    let tmp = TempDir::fresh("corrupt");
    let store = GrantStore::open(&tmp.0).unwrap();
    let junk = b"{\"version\":1,\"grants\":[{\"secret\":\"sekrit-x\"";
    fs::write(store.path(), junk).unwrap();
    let report = store.load(NOW).unwrap();
    assert!(report.grants.is_empty());
    assert_eq!(report.dropped.len(), 1);
    assert_eq!(report.dropped[0].0, FILE_NAME);
    assert!(!report.dropped[0].1.contains("sekrit"));
    let aside = report.set_aside.unwrap();
    assert_eq!(aside, tmp.0.join(format!("grants.json.corrupt-{NOW}")));
    assert_eq!(fs::read(&aside).unwrap(), junk);
    assert!(!store.path().exists());
    // A second corruption in the same second does not overwrite the first.
    fs::write(store.path(), b"nope").unwrap();
    let second = store.load(NOW).unwrap().set_aside.unwrap();
    assert_ne!(second, aside);
    assert_eq!(fs::read(&aside).unwrap(), junk);
    assert_eq!(fs::read(&second).unwrap(), b"nope");
}

#[test]
fn stale_temp_files_are_removed_on_open() {
    let tmp = TempDir::fresh("stale");
    fs::create_dir_all(&tmp.0).unwrap();
    let stale = tmp.0.join(format!("{TMP_PREFIX}1-0"));
    fs::write(&stale, b"half a secret").unwrap();
    GrantStore::open(&tmp.0).unwrap();
    assert!(!stale.exists());
}

#[test]
fn file_holds_only_the_saved_grants_secrets() {
    let tmp = TempDir::fresh("only");
    let store = GrantStore::open(&tmp.0).unwrap();
    store
        .save(&[grant(1, NOW + 60), grant(2, NOW + 60)])
        .unwrap();
    store.save(&[grant(1, NOW + 60)]).unwrap();
    let text = fs::read_to_string(store.path()).unwrap();
    assert!(text.contains("sekrit-value-1"));
    assert!(!text.contains("sekrit-value-2"));
    store.save(&[]).unwrap();
    let text = fs::read_to_string(store.path()).unwrap();
    assert!(!text.contains("sekrit"), "{text}");
    assert_eq!(parse(text.as_bytes(), NOW).unwrap().grants.len(), 0);
    // Debug of a stored grant masks its secret.
    assert!(!format!("{:?}", grant(3, 0)).contains("sekrit"));
}

#[test]
fn concurrent_saves_never_tear() {
    let tmp = TempDir::fresh("race");
    let store = Arc::new(GrantStore::open(&tmp.0).unwrap());
    let sets: Vec<Vec<StoredGrant>> = vec![
        (1..=3).map(|n| grant(n, NOW + 60)).collect(),
        (4..=9).map(|n| grant(n, NOW + 60)).collect(),
    ];
    let (done_tx, done_rx) = crossbeam_channel::unbounded();
    for set in sets.clone() {
        let store = Arc::clone(&store);
        let done_tx = done_tx.clone();
        std::thread::spawn(move || {
            for _ in 0..50 {
                store.save(&set).unwrap();
            }
            done_tx.send(()).unwrap();
        });
    }
    // Read while the writers race: every read sees one whole set.
    let reader_store = Arc::clone(&store);
    let mut finished = 0;
    let watchdog = std::time::Instant::now() + std::time::Duration::from_secs(60);
    while finished < 2 {
        assert!(std::time::Instant::now() < watchdog, "saves hung");
        if done_rx.try_recv().is_ok() {
            finished += 1;
        }
        if let Ok(bytes) = fs::read(reader_store.path()) {
            let report = parse(&bytes, NOW).expect("a torn grants.json");
            assert!(sets.contains(&report.grants));
        }
    }
    let report = store.load(NOW).unwrap();
    assert!(sets.contains(&report.grants));
    assert_eq!(
        fs::read_dir(&tmp.0).unwrap().count(),
        1,
        "a temp file leaked"
    );
}
