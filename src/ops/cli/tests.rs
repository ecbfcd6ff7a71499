//! Unit tests of `ops::cli`.

use super::parse as parse_command;
use super::*;
use std::sync::{Arc, Mutex};

use crate::base::testutil::TempDir;

fn env(tmp: &TempDir) -> HashMap<String, String> {
    [
        ("HOME".to_string(), tmp.0.display().to_string()),
        ("HANDNODE_TOKEN".to_string(), "tok".to_string()),
    ]
    .into()
}

fn parse_args(args: &[&str], env: &HashMap<String, String>) -> Result<Command, String> {
    let args: Vec<String> = args.iter().map(|s| s.to_string()).collect();
    parse_command(&args, env).map_err(|e| match e {
        Error::Config(msg) => msg,
        other => panic!("not a config error: {other:?}"),
    })
}

#[test]
fn help_lists_every_flag_and_env_var() {
    let tmp = TempDir::new("cli");
    let env = env(&tmp);
    // The overview fits one screen and points at the rest.
    for args in [vec!["--help"], vec!["-h"], vec!["help"]] {
        let Ok(Command::Help(text)) = parse_args(&args, &env) else {
            panic!("{args:?} is not help");
        };
        assert!(
            text.lines().count() <= 24,
            "{args:?}: {} lines",
            text.lines().count()
        );
        for sub in SUBCOMMANDS.split(", ") {
            assert!(
                text.contains(&format!("handnode {sub}")),
                "{args:?} omits {sub}"
            );
        }
        assert!(text.contains("handnode serve --help"), "{text}");
        assert!(
            !text.contains("--audit-args"),
            "serve's flags are not in the overview"
        );
    }
    for args in [
        vec!["serve", "--help"],
        vec!["serve", "-h"],
        vec!["help", "serve"],
    ] {
        let Ok(Command::Help(text)) = parse_args(&args, &env) else {
            panic!("{args:?} is not help");
        };
        for flag in config::SERVE_FLAGS {
            assert!(text.contains(&format!("--{}", flag.name)), "{}", flag.name);
            assert!(text.contains(&flag.env_name()), "{}", flag.name);
        }
    }
    let audit = config::SERVE_FLAGS
        .iter()
        .find(|f| f.name == "audit-args")
        .unwrap();
    assert!(audit.help.contains("typed text, passwords included"));
    let markdown = help_table_markdown();
    for flag in config::SERVE_FLAGS {
        assert!(
            markdown.contains(&format!("| `--{}", flag.name)),
            "{}",
            flag.name
        );
    }
    assert!(markdown.contains("`--runtime URL`") && markdown.contains("`HANDNODE_URL`"));
    for args in [
        vec!["doctor", "--help"],
        vec!["help", "grant"],
        vec!["revoke", "-h"],
    ] {
        assert!(
            matches!(parse_args(&args, &env), Ok(Command::Help(_))),
            "{args:?}"
        );
    }
    assert!(matches!(
        parse_args(&["--version"], &env),
        Ok(Command::Version)
    ));
    assert!(matches!(
        parse_args(&["doctor", "--json"], &env),
        Ok(Command::Doctor(config::DoctorArgs {
            json: true,
            browser_command: None,
            ..
        }))
    ));
    assert!(matches!(
        parse_args(&["doctor"], &env),
        Ok(Command::Doctor(config::DoctorArgs { json: false, .. }))
    ));
    assert!(parse_args(&["doctor", "--listen", "x"], &env).is_err());
    let Ok(Command::Doctor(args)) = parse_args(
        &["doctor", "--browser-command", "node 'a b.js' --headless"],
        &env,
    ) else {
        panic!("doctor --browser-command");
    };
    assert_eq!(
        args.browser_command,
        Some(vec![
            "node".to_string(),
            "a b.js".to_string(),
            "--headless".to_string()
        ])
    );
    let mut with_env = env.clone();
    with_env.insert(
        "HANDNODE_BROWSER_COMMAND".into(),
        "x --cdp-endpoint h".into(),
    );
    let err = parse_args(&["doctor"], &with_env).unwrap_err();
    assert!(err.contains("must not pass --cdp-endpoint"), "{err}");
}

#[test]
fn subcommand_errors_say_what_to_fix() {
    let tmp = TempDir::new("cli");
    let env = env(&tmp);
    for (args, want) in [
        (vec!["extra"], "unknown subcommand 'extra'"),
        (vec!["serve", "extra"], "unexpected argument 'extra'"),
    ] {
        match parse_args(&args, &env) {
            Err(msg) => assert!(msg.contains(want), "{args:?}: {msg:?} lacks {want:?}"),
            Ok(_) => panic!("{args:?} was accepted"),
        }
    }
}

#[test]
fn ttl_parser() {
    for (input, want) in [
        ("1", Some(1)),
        ("90s", Some(90)),
        ("30m", Some(1800)),
        ("1h", Some(3600)),
        (" 5m ", Some(300)),
        ("86400", Some(86_400)),
        ("24h", Some(86_400)),
        ("1440m", Some(86_400)),
        ("86401", None),
        ("86401s", None),
        ("1441m", None),
        ("25h", None),
        ("0", None),
        ("0h", None),
        ("", None),
        ("h", None),
        ("1.5h", None),
        ("-1", None),
        ("1d", None),
        ("1 h", None),
        ("99999999999999999999h", None),
        ("9999999999999999999h", None),
    ] {
        assert_eq!(parse_ttl(input).ok(), want, "{input:?}");
    }
}

#[test]
fn grant_arguments() {
    let tmp = TempDir::new("cli");
    let secret = tmp
        .write("secret", "  attach-secret\n")
        .display()
        .to_string();
    let env = env(&tmp);
    let base = [
        "grant",
        "--runtime",
        "wss://pod:8090/",
        "--session",
        "laptop",
    ];
    let with = |extra: &[&str]| {
        let mut args: Vec<&str> = base.to_vec();
        args.extend_from_slice(extra);
        parse_args(&args, &env)
    };
    let Ok(Command::Grant(args)) = with(&["--secret-file", &secret]) else {
        panic!("not a grant");
    };
    assert_eq!(args.runtime, "wss://pod:8090/");
    assert_eq!(args.session, "laptop");
    assert_eq!(
        (args.profile, args.ttl_secs, args.wait, args.json),
        (None, None, false, false)
    );
    assert!(matches!(&args.credential, Credential::Secret(s) if s.expose() == "attach-secret"));
    assert_eq!(args.client.url, DEFAULT_URL);
    assert_eq!(args.client.token.as_ref().map(Secret::expose), Some("tok"));
    assert!(!format!("{args:?}").contains("attach-secret"));
    assert_eq!(args.folder, None);
    // --folder: absolute as given, relative from the working directory.
    let Ok(Command::Grant(args)) = with(&[
        "--secret-file",
        &secret,
        "--profile",
        "files",
        "--folder",
        "/srv/lent",
    ]) else {
        panic!("not a grant");
    };
    assert_eq!(args.profile, Some(Profile::Files));
    assert_eq!(args.folder, Some(PathBuf::from("/srv/lent")));
    let Ok(Command::Grant(args)) = with(&["--secret-file", &secret, "--folder", "lent"]) else {
        panic!("not a grant");
    };
    assert_eq!(
        args.folder,
        Some(std::env::current_dir().unwrap().join("lent"))
    );

    let Ok(Command::Grant(args)) = with(&[
        "--admin-credential-file",
        &secret,
        "--profile",
        "desktop",
        "--ttl",
        "30m",
        "--wait",
        "--json",
        "--url",
        "http://127.0.0.1:9000/",
    ]) else {
        panic!("not a grant");
    };
    assert!(matches!(args.credential, Credential::AdminCredential(_)));
    assert_eq!(args.profile, Some(Profile::Desktop));
    assert_eq!(args.ttl_secs, Some(1800));
    assert!(args.wait && args.json);
    assert_eq!(args.client.url, "http://127.0.0.1:9000");
    assert!(args.allow.is_empty() && args.deny.is_empty());

    let Ok(Command::Grant(args)) = with(&[
        "--secret-file",
        &secret,
        "--allow",
        "sys_info,browser_*",
        "--allow",
        " screenshot ",
        "--deny=browser_evaluate",
    ]) else {
        panic!("not a grant");
    };
    assert_eq!(args.allow, ["sys_info", "browser_*", "screenshot"]);
    assert_eq!(args.deny, ["browser_evaluate"]);
    assert_eq!(
        args.profile, None,
        "the body says custom; see grant_sends_lists"
    );

    let Ok(Command::Grant(args)) = with(&["--secret-file", &secret, "--profile", "browser"]) else {
        panic!("not a grant");
    };
    assert_eq!(args.profile, Some(Profile::Browser));

    let empty = tmp.write("empty", "\n").display().to_string();
    for (extra, want) in [
        (
            vec![],
            "exactly one of --secret-file or --admin-credential-file",
        ),
        (
            vec!["--secret-file", &secret, "--admin-credential-file", &secret],
            "exactly one of",
        ),
        (vec!["--secret-file", &empty], "is empty"),
        (vec!["--secret-file", "/nonexistent"], "cannot read it"),
        (
            vec!["--secret-file", &secret, "--profile", "sandbox"],
            "profile must be one of owner, desktop, observe, browser, files, apps, custom",
        ),
        (
            vec!["--secret-file", &secret, "--ttl", "86401"],
            "--ttl: expected N seconds",
        ),
        (
            vec!["--secret-file", &secret, "--url", "ftp://x"],
            "--url: expected http://",
        ),
        (
            vec!["--secret-file", &secret, "--secret", "x"],
            "unknown flag --secret",
        ),
        (
            vec!["--secret-file", &secret, "extra"],
            "unexpected argument 'extra'",
        ),
    ] {
        let err = with(&extra).unwrap_err();
        assert!(err.contains(want), "{extra:?}: {err}");
    }
    for (args, want) in [
        (
            vec!["grant", "--session", "s", "--secret-file", &secret],
            "--runtime URL is required",
        ),
        (
            vec!["grant", "--runtime", "ws://h", "--secret-file", &secret],
            "--session NAME is required",
        ),
        (
            vec!["grant", "--runtime", "http://h", "--session", "s"],
            "runtime must be a ws:// or wss:// URL",
        ),
        (
            vec!["grant", "--runtime", "ws://", "--session", "s"],
            "runtime must be a ws:// or wss:// URL",
        ),
        (
            vec!["grant", "--runtime", "ws://h", "--session", "Laptop"],
            "session must match [a-z0-9-]{1,32}",
        ),
    ] {
        let err = parse_args(&args, &env).unwrap_err();
        assert!(err.contains(want), "{args:?}: {err}");
    }
    // 32 characters is the bound; 33 is refused.
    let ok = "a".repeat(32);
    let long = "a".repeat(33);
    assert!(parse_args(
        &[
            "grant",
            "--runtime",
            "ws://h",
            "--session",
            &ok,
            "--secret-file",
            &secret
        ],
        &env
    )
    .is_ok());
    assert!(parse_args(
        &[
            "grant",
            "--runtime",
            "ws://h",
            "--session",
            &long,
            "--secret-file",
            &secret
        ],
        &env
    )
    .is_err());
}

#[test]
fn grants_and_revoke_arguments() {
    let tmp = TempDir::new("cli");
    let mut env = env(&tmp);
    env.insert("HANDNODE_URL".into(), "http://127.0.0.1:1".into());
    let Ok(Command::Grants(args)) = parse_args(&["grants", "--json"], &env) else {
        panic!("not grants");
    };
    assert!(args.json);
    assert_eq!(args.client.url, "http://127.0.0.1:1");
    let id = "0b6c5a1e-8f7e-4c47-9d36-0e0f3a1b2c3d";
    let Ok(Command::Revoke(args)) = parse_args(&["revoke", id], &env) else {
        panic!("not revoke");
    };
    assert_eq!(args.target, RevokeTarget::One(id.into()));
    let Ok(Command::Revoke(args)) = parse_args(&["revoke", "--all"], &env) else {
        panic!("not revoke");
    };
    assert_eq!(args.target, RevokeTarget::All);
    let too_long = "a".repeat(MAX_ID_LEN + 1);
    for args in [
        vec!["revoke"],
        vec!["revoke", id, "--all"],
        vec!["revoke", id, id],
        vec!["revoke", "../x"],
        vec!["revoke", &too_long],
        vec!["grants", "extra"],
        vec!["grants", "--all"],
    ] {
        assert!(parse_args(&args, &env).is_err(), "{args:?}");
    }
    assert!(parse_args(&["revoke", &"a".repeat(MAX_ID_LEN)], &env).is_ok());
}

/// A request the stub daemon saw.
#[derive(Debug)]
struct Seen {
    method: String,
    path: String,
    authorization: Option<String>,
    body: String,
}

/// A scripted daemon on 127.0.0.1:0: the n-th request gets the n-th reply. It gives up
/// after 5 s without a request, so a hung client fails the test instead of hanging it.
struct Stub {
    url: String,
    seen: Arc<Mutex<Vec<Seen>>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Stub {
    fn start(replies: Vec<(u16, String)>) -> Self {
        Stub::start_tagged(replies.into_iter().map(|(s, b)| (s, b, None)).collect())
    }

    /// Like `start`, each reply with an `ETag` when given.
    fn start_tagged(replies: Vec<(u16, String, Option<&'static str>)>) -> Self {
        let server = tiny_http::Server::http("127.0.0.1:0").unwrap();
        let url = format!("http://{}", server.server_addr().to_ip().unwrap());
        let seen = Arc::new(Mutex::new(Vec::new()));
        let log = Arc::clone(&seen);
        let thread = std::thread::spawn(move || {
            for (status, body, etag) in replies {
                let Ok(Some(mut request)) = server.recv_timeout(Duration::from_secs(5)) else {
                    return;
                };
                let mut text = String::new();
                let _ = request.as_reader().read_to_string(&mut text);
                log.lock().unwrap().push(Seen {
                    method: request.method().to_string(),
                    path: request.url().to_string(),
                    authorization: request
                        .headers()
                        .iter()
                        .find(|h| h.field.equiv("Authorization"))
                        .map(|h| h.value.to_string()),
                    body: text,
                });
                let header =
                    tiny_http::Header::from_bytes("Content-Type", "application/json").unwrap();
                let mut response = tiny_http::Response::from_string(body)
                    .with_status_code(status)
                    .with_header(header);
                if let Some(etag) = etag {
                    response.add_header(tiny_http::Header::from_bytes("ETag", etag).unwrap());
                }
                let _ = request.respond(response);
            }
        });
        Stub {
            url,
            seen,
            thread: Some(thread),
        }
    }

    fn client(&self, token: Option<&str>) -> ClientArgs {
        ClientArgs {
            url: self.url.clone(),
            socket: None,
            token: token.map(Secret::new),
            token_source: token.map(|_| "a test".to_string()),
        }
    }

    /// Wait for the script to finish and return what was asked.
    fn finish(mut self) -> Vec<Seen> {
        self.thread.take().unwrap().join().unwrap();
        std::mem::take(&mut *self.seen.lock().unwrap())
    }
}

fn grant_json(state: &str, extra: &str) -> String {
    format!(
        r#"{{"id":"g1","runtime":"wss://pod:8090","session":"laptop","profile":"observe","principal":"token","created_at":"2026-11-30T12:00:00Z","expires_at":"2026-11-30T13:00:00Z","expires_in_secs":3600,"state":"{state}","calls":0{extra}}}"#
    )
}

fn grant_args(client: ClientArgs, wait: bool) -> Command {
    Command::Grant(GrantArgs {
        client,
        runtime: "wss://pod:8090".into(),
        session: "laptop".into(),
        profile: Some(Profile::Observe),
        allow: Vec::new(),
        deny: Vec::new(),
        ttl_secs: Some(600),
        credential: Credential::Secret(Secret::new("s3")),
        approve: None,
        folder: None,
        own_display: false,
        wait,
        wait_secs: DEFAULT_WAIT_SECS,
        replace: false,
        json: false,
    })
}

fn run_captured(command: &Command) -> (i32, String, String) {
    let (mut out, mut err) = (Vec::new(), Vec::new());
    let code = run(command, &mut out, &mut err);
    (
        code,
        String::from_utf8(out).unwrap(),
        String::from_utf8(err).unwrap(),
    )
}

#[test]
fn cargo_runs_build_variable_is_not_an_unknown_env_var() {
    let env: HashMap<String, String> = [
        ("HANDNODE_TARGET", "x86_64-unknown-linux-gnu"),
        ("HANDNODE_TOKEN", "t"),
        ("HANDNODE_LISTEN", "127.0.0.1:1"),
        ("HANDNODE_LISTNE", "typo"),
        // An old flag name's variable is deprecated, and warned about as that, not a typo.
        ("HANDNODE_JOB_QUEUE", "9"),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .collect();
    assert_eq!(unknown_env(&env), [&"HANDNODE_LISTNE".to_string()]);
}

#[test]
fn grant_posts_the_attach_body_and_summarises() {
    let stub = Stub::start(vec![(202, grant_json("idle", ""))]);
    let (code, out, _) = run_captured(&grant_args(stub.client(Some("tok")), false));
    let seen = stub.finish();
    assert_eq!(code, EXIT_OK);
    assert!(
        out.contains("grant g1: idle") && out.contains("expires 2026-11-30T13:00:00Z (in 1h 0m)"),
        "{out}"
    );
    assert_eq!(
        (seen[0].method.as_str(), seen[0].path.as_str()),
        ("POST", "/attach")
    );
    assert_eq!(seen[0].authorization.as_deref(), Some("Bearer tok"));
    let body: Value = serde_json::from_str(&seen[0].body).unwrap();
    assert_eq!(
        body,
        json!({"runtime":"wss://pod:8090","session":"laptop","profile":"observe","ttl_secs":600,"secret":"s3","replace":false})
    );
}

/// Create, renew and replace read differently; a replace is refused unless asked for.
#[test]
fn grant_says_whether_it_created_renewed_or_replaced() {
    let cases = [
            (r#","attach":"created""#, "created grant g1 for session laptop"),
            (
                r#","attach":"renewed","new_secret":true"#,
                "renewed grant g1 for session laptop: same id and socket, deadline now 2026-11-30T13:00:00Z; the new secret is used at the next dial and is not checked now",
            ),
            (
                r#","attach":"replaced","replaced_id":"g0""#,
                "replaced grant g0 (it ended `replaced`) with grant g1",
            ),
        ];
    for (extra, want) in cases {
        let stub = Stub::start(vec![(202, grant_json("idle", extra))]);
        let (code, _, err) = run_captured(&grant_args(stub.client(Some("tok")), false));
        stub.finish();
        assert_eq!(code, EXIT_OK);
        assert!(err.contains(want), "{want}: {err}");
    }
    // A renewal with the same secret says nothing about secrets.
    let stub = Stub::start(vec![(
        202,
        grant_json("attached", r#","attach":"renewed","new_secret":false"#),
    )]);
    let (_, _, err) = run_captured(&grant_args(stub.client(Some("tok")), false));
    stub.finish();
    assert!(
        err.contains("renewed grant g1") && !err.contains("secret"),
        "{err}"
    );

    let stub = Stub::start(vec![(
            409,
            r#"{"error":"grant g0 already lends this box to session laptop at this runtime with other tools (profile desktop -> observe); ... with --replace"}"#.into(),
        )]);
    let Command::Grant(mut args) = grant_args(stub.client(Some("tok")), false) else {
        unreachable!()
    };
    args.replace = true;
    let (code, out, err) = run_captured(&Command::Grant(args));
    let seen = stub.finish();
    let body: Value = serde_json::from_str(&seen[0].body).unwrap();
    assert_eq!(body["replace"], true, "--replace is sent");
    assert_eq!(code, EXIT_USAGE, "{out}{err}");
    assert!(
        err.contains("grant g0 already lends") && err.contains("--replace"),
        "{err}"
    );
}

#[test]
fn grant_wait_gives_up_after_wait_secs_with_the_last_error_and_exit_4() {
    let stub = Stub::start(vec![(
        202,
        grant_json(
            "redialing",
            r#","redial_in_secs":4,"last_error":"connect: Connection refused""#,
        ),
    )]);
    let Command::Grant(mut args) = grant_args(stub.client(Some("tok")), true) else {
        unreachable!()
    };
    args.wait_secs = 0;
    let (code, _, err) = run_captured(&Command::Grant(args));
    stub.finish();
    assert_eq!(code, EXIT_WAIT_GAVE_UP, "{err}");
    assert!(
            err.contains("grant g1 is not attached after 0 s (redialing; last dial error: connect: Connection refused)")
                && err.contains("keeps dialing until 2026-11-30T13:00:00Z")
                && err.contains("handnode revoke g1"),
            "{err}"
        );
}

#[test]
fn grant_wait_prints_a_line_per_state_change_not_per_countdown_tick() {
    let redialing = |secs: u32| {
        grant_json(
            "redialing",
            &format!(r#","redial_in_secs":{secs},"last_error":"handshake 503""#),
        )
    };
    let stub = Stub::start(vec![
        (202, grant_json("idle", "")),
        (200, redialing(3)),
        (200, redialing(2)),
        (200, redialing(1)),
        (200, grant_json("attached", "")),
    ]);
    let (code, _, err) = run_captured(&grant_args(stub.client(Some("tok")), true));
    stub.finish();
    assert_eq!(code, EXIT_OK);
    assert_eq!(err.matches("grant g1: redialing").count(), 1, "{err}");
    assert_eq!(err.matches("grant g1: ").count(), 3, "{err}");
}

#[test]
fn grant_sends_lists_and_shows_whether_the_grant_reaches_a_shell() {
    let reply = grant_json(
        "idle",
        r#","profile":"custom","allow":["sys_info","bash"],"deny":[],"tools":["sys_info","bash"],"folder":"/srv/lent","display":"own","shell":"yes","shell_because":"bash is a shell tool""#,
    );
    let stub = Stub::start(vec![(202, reply)]);
    let Command::Grant(mut args) = grant_args(stub.client(Some("tok")), false) else {
        unreachable!()
    };
    args.profile = None;
    args.allow = vec!["sys_info".into(), "bash".into()];
    args.deny = vec!["key".into()];
    args.folder = Some(PathBuf::from("/srv/lent"));
    args.own_display = true;
    let (code, out, _) = run_captured(&Command::Grant(args));
    let seen = stub.finish();
    assert_eq!(code, EXIT_OK);
    let body: Value = serde_json::from_str(&seen[0].body).unwrap();
    assert_eq!(body["folder"], "/srv/lent");
    assert_eq!(body["display"], "own");
    assert!(out.contains("  display: its own"), "{out}");
    assert_eq!(body["profile"], "custom", "--allow implies custom");
    assert_eq!(body["allow"], json!(["sys_info", "bash"]));
    assert_eq!(body["deny"], json!(["key"]));
    assert!(
        out.contains("  reaches the shell: yes (bash is a shell tool)\n")
            && out.contains("  allow: sys_info, bash\n")
            && out.contains("  tools: sys_info, bash\n")
            && out.contains("  lent folder: /srv/lent\n")
            && !out.contains("  deny:"),
        "{out}"
    );
}

#[test]
fn grant_wait_follows_the_state_until_attached() {
    let stub = Stub::start(vec![
        (202, grant_json("idle", "")),
        (
            200,
            grant_json(
                "redialing",
                r#","redial_in_secs":4,"last_error":"handshake 503""#,
            ),
        ),
        (200, grant_json("attached", "")),
    ]);
    let (code, _, err) = run_captured(&grant_args(stub.client(Some("tok")), true));
    let seen = stub.finish();
    assert_eq!(code, EXIT_OK);
    let paths: Vec<_> = seen
        .iter()
        .map(|s| format!("{} {}", s.method, s.path))
        .collect();
    assert_eq!(paths, ["POST /attach", "GET /attach/g1", "GET /attach/g1"]);
    let idle = err.find("grant g1: idle").unwrap();
    let redialing = err
        .find("grant g1: redialing in 4s (last error: handshake 503)")
        .unwrap();
    let attached = err.find("grant g1: attached").unwrap();
    assert!(idle < redialing && redialing < attached, "{err}");
}

#[test]
fn grant_wait_reports_an_ended_grant_with_exit_3() {
    let stub = Stub::start(vec![
        (202, grant_json("dialing", "")),
        (
            200,
            grant_json("ended", r#","ended":"handshake_rejected_401""#),
        ),
    ]);
    let (code, _, err) = run_captured(&grant_args(stub.client(Some("tok")), true));
    stub.finish();
    assert_eq!(code, EXIT_GRANT_ENDED);
    assert!(err.contains("ended: handshake_rejected_401"), "{err}");
}

#[test]
fn daemon_errors_are_printed_with_exit_1() {
    let stub = Stub::start(vec![(
        400,
        r#"{"error":"session must match [a-z0-9-]{1,32}"}"#.into(),
    )]);
    let (code, _, err) = run_captured(&grant_args(stub.client(Some("tok")), false));
    stub.finish();
    assert_eq!(code, EXIT_FAILURE);
    assert!(
        err.contains("(HTTP 400): session must match [a-z0-9-]{1,32}"),
        "{err}"
    );

    let stub = Stub::start(vec![(401, r#"{"error":"unauthorized"}"#.into())]);
    let command = Command::Grants(GrantsArgs {
        client: stub.client(None),
        json: false,
    });
    let (code, _, err) = run_captured(&command);
    let seen = stub.finish();
    assert_eq!(code, EXIT_FAILURE);
    assert_eq!(seen[0].authorization, None);
    assert!(err.contains("unauthorized; no admin token found"), "{err}");
}

#[test]
fn an_unreachable_daemon_is_exit_1() {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let client = ClientArgs {
        socket: None,
        url: format!("http://127.0.0.1:{port}"),
        token: None,
        token_source: None,
    };
    let (code, _, err) = run_captured(&Command::Grants(GrantsArgs {
        client,
        json: false,
    }));
    assert_eq!(code, EXIT_FAILURE);
    assert!(err.contains("cannot reach the daemon"), "{err}");
}

#[test]
fn grants_prints_a_table() {
    let list = format!(
        r#"{{"grants":[{},{}]}}"#,
        grant_json(
            "attached",
            r#","jobs":3,"shell":"yes","shell_because":"bash is a shell tool""#
        ),
        grant_json(
            "ended",
            &format!(
                r#","ended":"handshake_rejected_401","shell":"no","last_error":"handshake 401: {}""#,
                "x".repeat(200)
            )
        )
    );
    let stub = Stub::start(vec![(200, list), (200, r#"{"grants":[]}"#.into())]);
    let command = Command::Grants(GrantsArgs {
        client: stub.client(Some("tok")),
        json: false,
    });
    let (code, out, _) = run_captured(&command);
    let (code2, out2, _) = run_captured(&command);
    stub.finish();
    assert_eq!((code, code2), (EXIT_OK, EXIT_OK));
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines.len(), 3, "{out}");
    let header: Vec<&str> = lines[0].split_whitespace().collect();
    assert_eq!(header[..4], ["ID", "STATE", "PROFILE", "SHELL"], "{out}");
    assert!(lines[1].contains("attached") && lines[1].contains("1h 0m"));
    assert!(lines[0].contains("JOBS"), "{out}");
    let jobs_at = lines[0].find("JOBS").unwrap();
    assert_eq!(&lines[1][jobs_at..jobs_at + 1], "3", "{out}");
    assert_eq!(&lines[2][jobs_at..jobs_at + 1], "-", "{out}");
    assert!(lines[1].contains("yes (bash is a shell tool)"), "{out}");
    assert!(lines[2].contains("ended: handshake_rejected_401") && lines[2].contains(" no "));
    // The last error has a bounded column of its own, not the STATE column; an ended
    // grant expires in nothing.
    let state_at = lines[0].find("STATE").unwrap();
    let profile_at = lines[0].find("PROFILE").unwrap();
    assert!(
        !lines[2][state_at..profile_at].contains("handshake 401"),
        "{out}"
    );
    assert!(lines[0].ends_with("LAST ERROR"), "{out}");
    assert!(
        lines[2].ends_with('…') && lines[2].contains("handshake 401: xxx"),
        "{out}"
    );
    assert!(lines[2].chars().count() < 200, "{out}");
    let expires_at = lines[0].find("EXPIRES IN").unwrap();
    assert_eq!(&lines[2][expires_at..expires_at + 2], "- ", "{out}");
    assert_eq!(out2, "no grants\n");
}

#[test]
fn revoke_one_and_all() {
    let ended_g1 = grant_json("ended", r#","ended":"cancelled""#);
    let stub = Stub::start(vec![
        (204, String::new()),
        (404, r#"{"error":"no such grant"}"#.into()),
        (200, ended_g1),
        (404, r#"{"error":"no such grant"}"#.into()),
        (404, r#"{"error":"no such grant"}"#.into()),
    ]);
    let command = Command::Revoke(RevokeArgs {
        client: stub.client(Some("tok")),
        target: RevokeTarget::One("g1".into()),
    });
    let (code, out, _) = run_captured(&command);
    let (code2, out2, _) = run_captured(&command);
    let (code3, out3, err3) = run_captured(&command);
    let seen = stub.finish();
    assert_eq!((code, code2), (EXIT_OK, EXIT_OK));
    assert_eq!(out, "revoked grant g1\n");
    assert_eq!(
        out2,
        "grant g1 already ended (cancelled); nothing to revoke\n"
    );
    // An id the daemon never had is a failure a script can see (issue 37).
    assert_eq!(code3, EXIT_FAILURE, "{out3}{err3}");
    assert!(
        err3.contains("no grant g1 on this daemon") && err3.contains("handnode grants"),
        "{err3}"
    );
    let paths: Vec<_> = seen
        .iter()
        .map(|s| format!("{} {}", s.method, s.path))
        .collect();
    assert_eq!(
        paths,
        [
            "DELETE /attach/g1",
            "DELETE /attach/g1",
            "GET /attach/g1",
            "DELETE /attach/g1",
            "GET /attach/g1"
        ]
    );

    let live = grant_json("attached", "");
    let ended = grant_json("ended", r#","ended":"deadline""#).replace("\"g1\"", "\"g2\"");
    let stub = Stub::start(vec![
        (200, format!(r#"{{"grants":[{live},{ended}]}}"#)),
        (204, String::new()),
    ]);
    let command = Command::Revoke(RevokeArgs {
        client: stub.client(Some("tok")),
        target: RevokeTarget::All,
    });
    let (code, out, _) = run_captured(&command);
    let seen = stub.finish();
    assert_eq!(code, EXIT_OK);
    assert_eq!(out, "revoked grant g1\n");
    let paths: Vec<_> = seen
        .iter()
        .map(|s| format!("{} {}", s.method, s.path))
        .collect();
    assert_eq!(paths, ["GET /attach", "DELETE /attach/g1"]);
}

#[test]
fn approval_subcommand_arguments() {
    let tmp = TempDir::new("cli");
    let env = env(&tmp);
    let Ok(Command::Approvals(args)) = parse_args(&["approvals", "--watch"], &env) else {
        panic!("not approvals");
    };
    assert!(args.watch && !args.json);
    let id = "0b6c5a1e-8f7e-4c47-9d36-0e0f3a1b2c3d";
    let Ok(Command::Decide(args)) = parse_args(&["approve", id, "--remember"], &env) else {
        panic!("not approve");
    };
    assert_eq!(
        (args.id.as_str(), args.allow, args.remember),
        (id, true, true)
    );
    let Ok(Command::Decide(args)) = parse_args(&["deny", id, "--reason", "not now"], &env) else {
        panic!("not deny");
    };
    assert_eq!(
        (args.allow, args.reason.as_deref()),
        (false, Some("not now"))
    );
    let long = "r".repeat(crate::grants::approvals::MAX_REASON_BYTES + 1);
    let at = "r".repeat(crate::grants::approvals::MAX_REASON_BYTES);
    assert!(parse_args(&["deny", id, "--reason", &at], &env).is_ok());
    for args in [
        vec!["approve"],
        vec!["approve", id, id],
        vec!["approve", "../x"],
        vec!["deny", id, "--remember"],
        vec!["approve", id, "--reason", "x"],
        vec!["deny", id, "--reason", &long],
        vec!["approvals", "extra"],
    ] {
        assert!(parse_args(&args, &env).is_err(), "{args:?}");
    }
    let secret = tmp.write("secret", "s").display().to_string();
    let grant = |approve: &str| {
        let Ok(Command::Grant(g)) = parse_args(
            &[
                "grant",
                "--runtime",
                "ws://h",
                "--session",
                "s",
                "--secret-file",
                &secret,
                "--approve",
                approve,
            ],
            &env,
        ) else {
            panic!("not a grant");
        };
        g.approve
    };
    assert_eq!(grant("bash, key"), Some(vec!["bash".into(), "key".into()]));
    assert_eq!(grant("shell"), Some(vec!["shell".into()]));
    assert!(parse_args(
        &[
            "grant",
            "--runtime",
            "ws://h",
            "--session",
            "s",
            "--secret-file",
            &secret,
            "--approve",
            " , "
        ],
        &env
    )
    .is_err());
}

fn approval_json(id: &str) -> String {
    format!(
        r#"{{"id":"{id}","grant_id":"g1","principal":"token","session":"laptop","profile":"desktop","tool":"bash","arguments":{{"command":"rm -rf /tmp/x"}},"created_at":"2026-11-30T12:00:00Z","expires_at":"2026-11-30T12:01:00Z","expires_in_secs":42}}"#
    )
}

#[test]
fn approvals_lists_and_watch_follows_the_etag() {
    let one = format!(r#"{{"approvals":[{}]}}"#, approval_json("a1"));
    let stub = Stub::start_tagged(vec![
        (200, r#"{"approvals":[]}"#.into(), Some("\"e0\"")),
        (200, one.clone(), Some("\"e1\"")),
        (200, one, Some("\"e1\"")),
    ]);
    let command = Command::Approvals(ApprovalsArgs {
        client: stub.client(Some("tok")),
        watch: true,
        json: false,
        full: None,
    });
    // The stub stops answering after three replies: the watch then ends with exit 1.
    let (code, out, err) = run_captured(&command);
    let seen = stub.finish();
    assert_eq!(code, EXIT_FAILURE, "{err}");
    let paths: Vec<&str> = seen.iter().map(|s| s.path.as_str()).collect();
    assert_eq!(
        paths,
        [
            "/approvals",
            "/approvals?wait=25&seen=e0",
            "/approvals?wait=25&seen=e1"
        ]
    );
    assert!(
        out.starts_with("no calls are waiting for approval\n--\nID"),
        "{out}"
    );
    assert!(out.contains("a1") && out.contains("rm -rf /tmp/x") && out.contains("42s"));
    assert_eq!(
        out.matches("--\n").count(),
        1,
        "an unchanged set is not printed again: {out}"
    );
}

#[test]
fn approve_and_deny_post_the_decision() {
    let decided = approval_json("a1").replace(
        r#""expires_in_secs":42"#,
        r#""decision":"allow","decided_by":"token""#,
    );
    let stub = Stub::start(vec![
        (200, decided),
        (404, r#"{"error":"no such approval"}"#.into()),
    ]);
    let approve = Command::Decide(DecideArgs {
        client: stub.client(Some("tok")),
        id: "a1".into(),
        allow: true,
        remember: true,
        reason: None,
    });
    let deny = Command::Decide(DecideArgs {
        client: stub.client(Some("tok")),
        id: "a2".into(),
        allow: false,
        remember: false,
        reason: Some("not now".into()),
    });
    let (code, out, _) = run_captured(&approve);
    let (code2, _, err2) = run_captured(&deny);
    let seen = stub.finish();
    assert_eq!((code, code2), (EXIT_OK, EXIT_FAILURE));
    assert!(
        out.starts_with("allowed a1 of bash (session laptop), by token"),
        "{out}"
    );
    assert!(err2.contains("approval a2 is unknown, already decided, expired or withdrawn"));
    assert_eq!(seen[0].path, "/approvals/a1");
    let body: Value = serde_json::from_str(&seen[0].body).unwrap();
    assert_eq!(body, json!({"decision": "allow", "remember": true}));
    let body: Value = serde_json::from_str(&seen[1].body).unwrap();
    assert_eq!(body, json!({"decision": "deny", "reason": "not now"}));
}
