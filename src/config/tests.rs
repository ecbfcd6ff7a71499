use super::*;

use crate::base::testutil::TempDir;

fn strings(args: &[&str]) -> Vec<String> {
    args.iter().map(|s| s.to_string()).collect()
}

/// An environment with HOME in `tmp` and whatever else the test adds.
fn env_in(tmp: &TempDir, extra: &[(&str, &str)]) -> HashMap<String, String> {
    let mut env: HashMap<String, String> = extra
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    env.entry("HOME".into())
        .or_insert_with(|| tmp.0.display().to_string());
    env
}

/// `serve`'s arguments, with or without the subcommand word that `cli::parse`
/// dispatches on.
fn serve(args: &[&str], env: &HashMap<String, String>) -> Result<Config, String> {
    let args = args.strip_prefix(&["serve"]).unwrap_or(args);
    match parse_serve(&strings(args), env) {
        Ok(config) => Ok(config),
        Err(Error::Config(msg)) => Err(msg),
        Err(other) => panic!("expected a config error, got {other:?}"),
    }
}

fn mode(path: &Path) -> u32 {
    std::fs::metadata(path).unwrap().permissions().mode() & 0o777
}

#[test]
fn the_approval_timeout_is_at_most_100_s() {
    let tmp = TempDir::new("config");
    let env = env_in(&tmp, &[(TOKEN_ENV, "tok")]);
    let c = serve(&["--approval-timeout-ms", "100000"], &env).unwrap();
    assert_eq!(c.timing.approval_timeout, MAX_APPROVAL_TIMEOUT);
    assert_eq!(Timing::default().approval_timeout, Duration::from_secs(60));
    let err = serve(&["--approval-timeout-ms", "100001"], &env).unwrap_err();
    assert!(
        err.contains("--approval-timeout-ms") && err.contains("1...100000"),
        "{err}"
    );
    let c = serve(
        &[
            "--approval-waiters",
            "3",
            "--max-pending-approvals",
            "7",
            "--max-pending-per-grant",
            "6",
        ],
        &env,
    )
    .unwrap();
    assert_eq!(
        (
            c.limits.approval_waiters,
            c.limits.approvals_pending,
            c.limits.approvals_pending_per_grant
        ),
        (3, 7, 6)
    );
    assert_eq!(Limits::default().approvals_pending_per_grant, 16);
    // --job-disk-share: a quarter by default; at most the box's; at least one start.
    assert_eq!(c.limits.job_disk_share(), 64 << 20);
    let small = |share: &str| {
        serve(
            &[
                "--job-output-bytes",
                "1000",
                "--job-disk-bytes",
                "1000000",
                "--job-disk-share",
                share,
            ],
            &env,
        )
    };
    assert_eq!(small("1000000").unwrap().limits.job_disk_share(), 1_000_000);
    let err = small("1000001").unwrap_err();
    assert!(err.contains("--job-disk-share must be at most"), "{err}");
    let one_job = Limits::default().job_start_bytes();
    assert_eq!(one_job, 2 * (32 + (1 << 20)));
    let at = one_job.to_string();
    serve(&["--job-disk-share", &at], &env).unwrap();
    let below = (one_job - 1).to_string();
    let err = serve(&["--job-disk-share", &below], &env).unwrap_err();
    assert!(err.contains("at least one starting job"), "{err}");
    // A grant's bound that reaches the box's would let one grant hold every slot.
    let err = serve(
        &[
            "--max-pending-approvals",
            "7",
            "--max-pending-per-grant",
            "7",
        ],
        &env,
    )
    .unwrap_err();
    assert!(err.contains("--max-pending-per-grant"), "{err}");
}

#[test]
fn defaults_follow_the_contract() {
    let tmp = TempDir::new("config");
    let env = env_in(&tmp, &[(TOKEN_ENV, "tok")]);
    let config = serve(&[], &env).unwrap();
    assert_eq!(config.listen.to_string(), "127.0.0.1:8795");
    assert_eq!(config.state_dir, tmp.path(".local/state/handnode"));
    assert_eq!(config.config_dir, tmp.path(".config/handnode"));
    assert_eq!(config.workers, 4);
    assert!(config.persist && config.notify && config.sd_notify);
    assert!(!config.audit_args && !config.insecure_local);
    assert_eq!(config.display_backend, DisplayBackend::Auto);
    assert_eq!(config.max_screenshot_edge, 1920);
    assert_eq!(config.timing, Timing::default());
    assert_eq!(config.limits, Limits::default());
    assert_eq!(config.token_source.as_deref(), Some("env HANDNODE_TOKEN"));

    let xdg = env_in(
        &tmp,
        &[
            (TOKEN_ENV, "tok"),
            ("XDG_STATE_HOME", "/xdg/state"),
            ("XDG_CONFIG_HOME", "/xdg/config"),
        ],
    );
    let config = serve(&[], &xdg).unwrap();
    assert_eq!(config.state_dir, Path::new("/xdg/state/handnode"));
    assert_eq!(config.config_dir, Path::new("/xdg/config/handnode"));
    // A relative XDG value is ignored, as the XDG spec says.
    let relative = env_in(&tmp, &[(TOKEN_ENV, "tok"), ("XDG_STATE_HOME", "rel")]);
    assert_eq!(
        serve(&[], &relative).unwrap().state_dir,
        tmp.path(".local/state/handnode")
    );
}

#[test]
fn every_flag_parses() {
    let tmp = TempDir::new("config");
    let ca = tmp.write("ca.pem", "pem");
    let ca = ca.to_str().unwrap();
    let env = env_in(&tmp, &[(TOKEN_ENV, "tok")]);
    type Check = fn(&Config);
    let cases: Vec<(Vec<&str>, Check)> = vec![
        (vec!["--listen", "0.0.0.0:9000"], |c| {
            assert_eq!(c.listen.to_string(), "0.0.0.0:9000")
        }),
        (vec!["--listen=[::1]:9"], |c| {
            assert_eq!(c.listen.to_string(), "[::1]:9")
        }),
        (vec!["--listen", "localhost:1234"], |c| {
            assert_eq!(c.listen.to_string(), "127.0.0.1:1234")
        }),
        (
            vec!["--allow-login", "You@Example.com", "--allow-login=b@c"],
            |c| assert_eq!(c.allow_logins, ["you@example.com", "b@c"]),
        ),
        (vec!["--allow-host", "Box.Tail.ts.net"], |c| {
            assert_eq!(c.allow_hosts, ["box.tail.ts.net"])
        }),
        (vec!["--insecure-local"], |c| assert!(c.insecure_local)),
        (vec!["--state-dir", "/s", "--config-dir", "/c"], |c| {
            assert_eq!(
                (c.state_dir.as_path(), c.config_dir.as_path()),
                (Path::new("/s"), Path::new("/c"))
            )
        }),
        (vec!["--no-persist"], |c| assert!(!c.persist)),
        (vec!["--workers", "64"], |c| assert_eq!(c.workers, 64)),
        (vec!["--audit-args"], |c| assert!(c.audit_args)),
        (
            vec![
                "--upstream",
                "browser=http://127.0.0.1:8931/mcp",
                "--upstream",
                "b2=https://x/mcp",
            ],
            |c| {
                assert_eq!(
                    c.upstreams,
                    [
                        ("browser".into(), "http://127.0.0.1:8931/mcp".into()),
                        ("b2".into(), "https://x/mcp".into())
                    ]
                )
            },
        ),
        (vec!["--display-backend", "Wayland"], |c| {
            assert_eq!(c.display_backend, DisplayBackend::Wayland)
        }),
        (vec!["--display-backend=none"], |c| {
            assert_eq!(c.display_backend, DisplayBackend::None)
        }),
        (
            vec!["--own-display-size", "800x600", "--max-own-displays", "16"],
            |c| assert_eq!((c.own_display.size, c.own_display.max), ((800, 600), 16)),
        ),
        (vec!["--own-display-stop-timeout-ms", "5"], |c| {
            assert_eq!(c.own_display.stop_timeout, Duration::from_millis(5))
        }),
        (vec!["--max-screenshot-edge", "800"], |c| {
            assert_eq!(c.max_screenshot_edge, 800)
        }),
        (vec!["--no-notify", "--no-sd-notify"], |c| {
            assert!(!c.notify && !c.sd_notify)
        }),
        (
            vec!["--throttle-failures", "3", "--throttle-table", "5"],
            |c| {
                assert_eq!(
                    (c.limits.throttle_failures, c.limits.throttle_table),
                    (3, 5)
                )
            },
        ),
        (vec!["--max-in-flight", "2", "--call-queue", "7"], |c| {
            assert_eq!((c.limits.max_in_flight, c.limits.call_queue), (2, 7))
        }),
        (
            vec!["--write-buffer-bytes", "65536", "--write-stall-ms", "250"],
            |c| {
                assert_eq!(c.limits.write_buffer_bytes, 65_536);
                assert_eq!(c.timing.write_stall, Duration::from_millis(250));
            },
        ),
        (
            vec!["--backoff-base-ms", "5", "--backoff-cap-ms", "40"],
            |c| {
                assert_eq!(c.timing.backoff_base, Duration::from_millis(5));
                assert_eq!(c.timing.backoff_cap, Duration::from_millis(40));
            },
        ),
        (
            vec!["--silence-limit-ms", "300", "--ping-interval-ms", "100"],
            |c| {
                assert_eq!(c.timing.silence_limit, Duration::from_millis(300));
                assert_eq!(c.timing.ping_interval, Duration::from_millis(100));
            },
        ),
        (vec!["serve", "--throttle-lockout-ms", "9"], |c| {
            assert_eq!(c.timing.throttle_lockout, Duration::from_millis(9))
        }),
    ];
    for (args, check) in cases {
        let config = serve(&args, &env).unwrap_or_else(|e| panic!("{args:?}: {e}"));
        check(&config);
    }
    let config = serve(&["--ca-file", ca], &env).unwrap();
    assert_eq!(config.ca_file.as_deref(), Some(Path::new(ca)));
}

#[test]
fn env_sets_flags_and_flags_beat_env() {
    let tmp = TempDir::new("config");
    let env = env_in(
        &tmp,
        &[
            (TOKEN_ENV, "tok"),
            ("HANDNODE_WORKERS", "8"),
            ("HANDNODE_ALLOW_LOGIN", " a@b , C@D,, "),
            ("HANDNODE_ALLOW_HOST", "h.ts.net"),
            ("HANDNODE_NO_PERSIST", "yes"),
            ("HANDNODE_INSECURE_LOCAL", "off"),
            ("HANDNODE_SILENCE_LIMIT_MS", "50000"),
            ("HANDNODE_AUDIT_ARGS", ""),
            ("HANDNODE_LISTEN", "127.0.0.1:1"),
        ],
    );
    let config = serve(&[], &env).unwrap();
    assert_eq!(config.workers, 8);
    assert_eq!(config.allow_logins, ["a@b", "c@d"]);
    assert_eq!(config.allow_hosts, ["h.ts.net"]);
    assert!(!config.persist);
    assert!(!config.insecure_local, "off means off");
    assert!(!config.audit_args, "empty means unset");
    assert_eq!(config.timing.silence_limit, Duration::from_secs(50));
    assert_eq!(config.listen.to_string(), "127.0.0.1:1");

    let config = serve(
        &[
            "--workers",
            "2",
            "--allow-login",
            "x@y",
            "--listen",
            "127.0.0.1:2",
        ],
        &env,
    )
    .unwrap();
    assert_eq!(config.workers, 2);
    // A repeatable flag on the command line replaces the env list entirely.
    assert_eq!(config.allow_logins, ["x@y"]);
    assert_eq!(config.listen.to_string(), "127.0.0.1:2");
    assert_eq!(config.allow_hosts, ["h.ts.net"], "untouched by flags");
}

/// Args, extra env, a part of the expected message.
type ErrorCase<'a> = (Vec<&'a str>, Vec<(&'a str, &'a str)>, &'a str);

#[test]
fn errors_say_what_to_fix() {
    let tmp = TempDir::new("config");
    let big = tmp.write("big", &"x".repeat(SECRET_FILE_MAX_BYTES as usize + 1));
    let empty = tmp.write("empty", " \n\t");
    let spaced = tmp.write("spaced", "two words");
    let (big, empty, spaced) = (
        big.to_str().unwrap().to_string(),
        empty.to_str().unwrap().to_string(),
        spaced.to_str().unwrap().to_string(),
    );
    let dir = tmp.0.display().to_string();
    let env = env_in(&tmp, &[(TOKEN_ENV, "tok")]);
    let cases: Vec<ErrorCase> = vec![
        (vec!["--bogus"], vec![], "unknown flag --bogus"),
        (vec!["--bogus=1"], vec![], "unknown flag --bogus"),
        (vec!["-x"], vec![], "unknown flag -x"),
        (vec!["extra"], vec![], "unexpected argument 'extra'"),
        (
            vec!["serve", "extra"],
            vec![],
            "unexpected argument 'extra'",
        ),
        (vec!["--listen"], vec![], "--listen needs a value"),
        (
            vec!["--listen", "nowhere"],
            vec![],
            "--listen: expected IP:PORT",
        ),
        (
            vec!["--listen", "1", "--listen", "2"],
            vec![],
            "--listen given more than once",
        ),
        (
            vec!["--no-persist=true"],
            vec![],
            "--no-persist is a switch",
        ),
        (
            vec!["--workers", "many"],
            vec![],
            "--workers: expected a whole number in 1...64, got 'many'",
        ),
        (
            vec!["--workers", "-1"],
            vec![],
            "--workers: expected a whole number",
        ),
        (
            vec!["--display-backend", "mir"],
            vec![],
            "expected one of auto, x11, wayland, none",
        ),
        (vec!["--upstream", "browser"], vec![], "expected NAME=URL"),
        (
            vec!["--browser-command", "node 'cli.js"],
            vec![],
            "--browser-command has an unclosed ' quote",
        ),
        (
            vec![],
            vec![(
                "HANDNODE_BROWSER_COMMAND",
                "node cli.js --user-data-dir /home/me",
            )],
            "--browser-command must not pass --user-data-dir",
        ),
        (
            vec!["--browser-command", "node cli.js --config /etc/pw.json"],
            vec![],
            "--browser-command must not pass --config",
        ),
        (
            vec!["--browser-command", "node cli.js --config=/etc/pw.json"],
            vec![],
            "--browser-command must not pass --config",
        ),
        (
            vec!["--browser-isolation", "firejail"],
            vec![],
            "--browser-isolation must be auto, bwrap or none",
        ),
        (
            vec!["--max-browsers", "0"],
            vec![],
            "--max-browsers: expected a whole number in 1...64",
        ),
        (
            vec!["--max-own-displays", "17"],
            vec![],
            "--max-own-displays: expected a whole number in 1...16",
        ),
        (
            vec!["--max-own-displays", "0"],
            vec![],
            "--max-own-displays: expected a whole number in 1...16",
        ),
        (
            vec!["--own-display-size", "8193x800"],
            vec![],
            "--own-display-size must be WIDTHxHEIGHT with each edge 64..8192",
        ),
        (
            vec!["--upstream", "b=ftp://x"],
            vec![],
            "must be an http:// or https:// URL",
        ),
        (
            vec!["--upstream", "a b=http://x"],
            vec![],
            "upstream name must match",
        ),
        (
            vec!["--upstream", "b=http://x", "--upstream", "b=http://y"],
            vec![],
            "upstream 'b' given twice",
        ),
        (
            vec!["--allow-login", "a b"],
            vec![],
            "--allow-login: expected a tailnet login",
        ),
        (
            vec!["--allow-host", "https://h/"],
            vec![],
            "--allow-host: expected a host name",
        ),
        (
            vec!["--ca-file", "/nonexistent/ca.pem"],
            vec![],
            "--ca-file: cannot read /nonexistent/ca.pem",
        ),
        (vec!["--state-dir="], vec![], "--state-dir: expected a path"),
        (
            vec![],
            vec![("HANDNODE_WORKERS", "65")],
            "HANDNODE_WORKERS: expected a whole number in 1...64, got '65'",
        ),
        (
            vec![],
            vec![("HANDNODE_NO_PERSIST", "maybe")],
            "HANDNODE_NO_PERSIST: expected 1/0",
        ),
        (
            vec!["--backoff-base-ms", "10", "--backoff-cap-ms", "9"],
            vec![],
            "--backoff-cap-ms must be at least --backoff-base-ms",
        ),
        (
            vec!["--ping-interval-ms", "60000"],
            vec![],
            "--ping-interval-ms must be less than --silence-limit-ms",
        ),
        (
            vec!["--job-output-bytes", "1000", "--job-disk-bytes", "1999"],
            vec![],
            "--job-disk-bytes must hold at least one running job",
        ),
        (
            vec!["--inline-wait-ms", "110001"],
            vec![],
            "--inline-wait-ms: expected a whole number in 1...110000",
        ),
        (
            vec!["--token-file", "/nonexistent/token"],
            vec![],
            "token file /nonexistent/token: cannot read it",
        ),
        (
            vec!["--token-file", &big],
            vec![],
            "is larger than 16384 bytes",
        ),
        (vec!["--token-file", &empty], vec![], "is empty"),
        (vec!["--token-file", &dir], vec![], "is a directory"),
        (
            vec!["--token-file", &spaced],
            vec![],
            "printable ASCII without spaces",
        ),
        (
            vec![],
            vec![(TOKEN_ENV, "a b")],
            "HANDNODE_TOKEN must be printable ASCII",
        ),
        (
            vec![],
            vec![("HOME", ""), ("XDG_CONFIG_HOME", "/c")],
            "pass --state-dir",
        ),
        (
            vec!["--state-dir", "/s"],
            vec![("HOME", "")],
            "pass --config-dir",
        ),
    ];
    for (args, extra, want) in cases {
        let mut env = env.clone();
        env.extend(extra.iter().map(|(k, v)| (k.to_string(), v.to_string())));
        match serve(&args, &env) {
            Err(msg) => assert!(msg.contains(want), "{args:?}: {msg:?} lacks {want:?}"),
            Ok(_) => panic!("{args:?} {extra:?} was accepted"),
        }
    }
}

#[test]
fn every_number_flag_refuses_one_past_its_bounds() {
    let tmp = TempDir::new("config");
    let env = env_in(&tmp, &[(TOKEN_ENV, "tok")]);
    let mut checked = 0;
    for flag in SERVE_FLAGS {
        let Kind::Int { min, max, .. } = flag.kind else {
            continue;
        };
        let over = format!("--{}={}", flag.name, max + 1);
        let err = serve(&[&over], &env).unwrap_err();
        assert!(err.starts_with(&format!("--{}:", flag.name)), "{err}");
        if min > 0 {
            let under = format!("--{}={}", flag.name, min - 1);
            assert!(serve(&[&under], &env).is_err(), "{under}");
        }
        checked += 1;
    }
    assert!(checked >= 20, "only {checked} number flags");
}

#[test]
fn documented_defaults_are_the_real_defaults() {
    let tmp = TempDir::new("config");
    let env = env_in(&tmp, &[(TOKEN_ENV, "tok")]);
    let baseline = format!("{:?}", serve(&[], &env).unwrap());
    for flag in SERVE_FLAGS {
        if matches!(flag.kind, Kind::Switch(_)) || flag.default.is_empty() {
            continue;
        }
        if flag.default.starts_with('$') {
            continue; // the dirs: described, not literal
        }
        let arg = format!("--{}={}", flag.name, flag.default);
        assert_eq!(
            format!("{:?}", serve(&[&arg], &env).unwrap()),
            baseline,
            "{arg}"
        );
    }
}

#[test]
fn token_sources_are_tried_in_order() {
    let tmp = TempDir::new("config");
    let flag_file = tmp.write("flag-token", "  from-flag\n");
    let creds = tmp.path("creds");
    let config_dir = tmp.path("config");
    tmp.write("creds/handnode-token", "from-credentials\n");
    tmp.write("config/token", "from-default\n");
    let mut env: HashMap<String, String> = [
        (TOKEN_ENV.to_string(), " from-env ".to_string()),
        (
            "CREDENTIALS_DIRECTORY".to_string(),
            creds.display().to_string(),
        ),
    ]
    .into();
    let resolve = |file: Option<&Path>, env: &HashMap<String, String>| {
        resolve_token(file, env, Some(&config_dir))
            .unwrap()
            .map(|t| (t.secret.expose().to_string(), t.source))
    };
    let got = resolve(Some(&flag_file), &env).unwrap();
    assert_eq!(got, ("from-flag".into(), flag_file.display().to_string()));
    assert_eq!(
        resolve(None, &env).unwrap(),
        ("from-env".into(), "env HANDNODE_TOKEN".into())
    );
    env.remove(TOKEN_ENV);
    assert_eq!(resolve(None, &env).unwrap().0, "from-credentials");
    std::fs::remove_file(creds.join(CREDENTIAL_NAME)).unwrap();
    assert_eq!(resolve(None, &env).unwrap().0, "from-default");
    std::fs::remove_file(config_dir.join(TOKEN_FILE_NAME)).unwrap();
    assert_eq!(resolve(None, &env), None);
    // A named file that is missing is an error, never a reason to look further.
    assert!(resolve_token(Some(&tmp.path("missing")), &env, Some(&config_dir)).is_err());
}

#[test]
fn first_start_without_auth_generates_a_private_token_file() {
    let tmp = TempDir::new("config");
    let env = env_in(&tmp, &[]);
    let config = serve(&[], &env).unwrap();
    let path = tmp.path(".config/handnode/token");
    assert_eq!(config.token_source, Some(path.display().to_string()));
    assert_eq!(mode(&path), 0o600);
    assert_eq!(mode(path.parent().unwrap()), 0o700);
    let written = std::fs::read_to_string(&path).unwrap();
    let token = config.token.unwrap();
    assert_eq!(written.trim(), token.expose());
    assert_eq!(token.expose().len(), 64, "256 bits, hex");
    // The second start finds the same token instead of making another.
    let again = serve(&[], &env).unwrap();
    assert_eq!(again.token.unwrap(), token);
}

#[test]
fn configured_auth_generates_nothing() {
    let tmp = TempDir::new("config");
    let env = env_in(&tmp, &[]);
    let config = serve(&["--allow-login", "a@b"], &env).unwrap();
    assert!(config.token.is_none());
    let config = serve(&["--insecure-local"], &env).unwrap();
    assert!(config.token.is_none());
    assert!(!tmp.path(".config/handnode/token").exists());
}

#[test]
fn warnings_name_the_risky_settings() {
    let mut config = Config::for_tests(PathBuf::from("/s"));
    assert!(warnings(&config, false).is_empty());
    assert_eq!(warnings(&config, true).len(), 1);
    assert!(warnings(&config, true)[0].contains("root shell"));
    config.allow_logins = vec!["a@b".into()];
    let w = warnings(&config, false);
    assert!(
        w.len() == 2
            && w[0].contains("without any --allow-host")
            && w[1].contains("without an admin token"),
        "{w:?}"
    );
    config.token = Some(Secret::new("t"));
    let w = warnings(&config, false);
    assert!(
        w.len() == 1 && w[0].contains("without any --allow-host"),
        "{w:?}"
    );
    config.allow_hosts = vec!["box.tail.ts.net".into()];
    assert!(warnings(&config, false).is_empty());
    config.listen = "0.0.0.0:8795".parse().unwrap();
    assert!(warnings(&config, false)[0].contains("not loopback"));
}

/// `--call-queue` was `--job-queue` (a "job" is a `bash_start` job): a unit file that still
/// says the old name keeps working, sets the same bound, and is told the new name at start.
#[test]
fn an_old_flag_name_sets_its_flag_and_is_warned_about() {
    let tmp = TempDir::new("config-old-name");
    let env = env_in(&tmp, &[(TOKEN_ENV, "tok")]);
    let c = serve(&["--call-queue", "7"], &env).unwrap();
    assert_eq!(c.limits.call_queue, 7);
    assert!(warnings(&c, false).is_empty(), "{:?}", warnings(&c, false));

    let c = serve(&["--job-queue=7"], &env).unwrap();
    assert_eq!(c.limits.call_queue, 7);
    let w = warnings(&c, false);
    assert!(
        w.len() == 1 && w[0].contains("--job-queue") && w[0].contains("use --call-queue"),
        "{w:?}"
    );
    // The bound holds under the old name, and its error names what the operator wrote.
    let err = serve(&["--job-queue", "65537"], &env).unwrap_err();
    assert!(
        err.starts_with("--job-queue: ") && err.contains("1...65536"),
        "{err}"
    );

    let old_env = env_in(&tmp, &[(TOKEN_ENV, "tok"), ("HANDNODE_JOB_QUEUE", "9")]);
    let c = serve(&[], &old_env).unwrap();
    assert_eq!(c.limits.call_queue, 9);
    let w = warnings(&c, false);
    assert!(
        w.len() == 1
            && w[0].contains("HANDNODE_JOB_QUEUE")
            && w[0].contains("set HANDNODE_CALL_QUEUE"),
        "{w:?}"
    );
    // A flag still beats the (old) env var; the old var is still worth a warning.
    let c = serve(&["--call-queue", "7"], &old_env).unwrap();
    assert_eq!((c.limits.call_queue, warnings(&c, false).len()), (7, 1));

    // Both names at once: an error, as a flag given twice is, whichever comes first.
    for args in [
        ["--job-queue", "5", "--call-queue", "7"],
        ["--call-queue", "7", "--job-queue", "5"],
    ] {
        let err = serve(&args, &env).unwrap_err();
        assert!(
            err.contains("--call-queue given more than once")
                && err.contains("--job-queue")
                && err.contains("give it once"),
            "{err}"
        );
    }
    let both = env_in(
        &tmp,
        &[
            (TOKEN_ENV, "tok"),
            ("HANDNODE_JOB_QUEUE", "9"),
            ("HANDNODE_CALL_QUEUE", "7"),
        ],
    );
    let err = serve(&[], &both).unwrap_err();
    assert!(
        err.contains("HANDNODE_CALL_QUEUE and HANDNODE_JOB_QUEUE")
            && err.contains("keep HANDNODE_CALL_QUEUE only"),
        "{err}"
    );

    // Help and the flag docs say it, from the one list.
    let row = SERVE_FLAGS.iter().find(|f| f.name == "call-queue").unwrap();
    let note = row.old_names_note().unwrap();
    assert!(
        note.contains("old name --job-queue (env HANDNODE_JOB_QUEUE)")
            && note.contains("giving both names is an error"),
        "{note}"
    );
}

/// Every old name stands for a flag that exists and is not itself a flag's name.
#[test]
fn old_flag_names_name_a_flag_and_shadow_none() {
    let names: Vec<&str> = SERVE_FLAGS
        .iter()
        .map(|f| f.name)
        .chain(DOCTOR_FLAGS.iter().map(|f| f.name))
        .collect();
    for o in OLD_NAMES {
        assert!(names.contains(&o.new), "--{} names no flag", o.new);
        assert!(!names.contains(&o.old), "--{} is a flag's name", o.old);
    }
}

#[test]
fn apps_resolve_at_start_from_flags_or_env_and_a_terminal_is_refused_by_name() {
    let tmp = TempDir::new("config-apps");
    let apps = tmp.path("share/applications");
    std::fs::create_dir_all(&apps).unwrap();
    let entry = |exec: &str, extra: &str| {
        format!("[Desktop Entry]\nType=Application\nName=X\nExec={exec}\n{extra}\n")
    };
    std::fs::write(apps.join("t.Ok.desktop"), entry("true %U", "")).unwrap();
    std::fs::write(apps.join("t.Two.desktop"), entry("true", "")).unwrap();
    std::fs::write(
        apps.join("t.Term.desktop"),
        entry("true", "Categories=System;TerminalEmulator;"),
    )
    .unwrap();
    let data = tmp.path("share").display().to_string();
    let env = env_in(&tmp, &[(TOKEN_ENV, "tok"), ("XDG_DATA_DIRS", &data)]);
    let c = serve(&["--apps", "t.Ok,t.Two", "--apps", "t.Ok.desktop"], &env).unwrap();
    let ids: Vec<&str> = c.apps.iter().map(|e| e.id.as_str()).collect();
    assert_eq!(ids, ["t.Ok", "t.Two"]);
    assert_eq!(c.apps[0].argv, ["true"]);
    let mut with_env = env.clone();
    with_env.insert("HANDNODE_APPS".into(), "t.Two".into());
    assert_eq!(serve(&[], &with_env).unwrap().apps[0].id, "t.Two");
    assert!(serve(&[], &env).unwrap().apps.is_empty());
    let err = serve(&["--apps", "t.Ok,t.Term"], &env).unwrap_err();
    assert!(
        err.starts_with("--apps: t.Term (")
            && err.ends_with(
                "is refused: it is a terminal emulator (Categories has TerminalEmulator)"
            ),
        "{err}"
    );
    let err = serve(&["--apps", "t.Gone"], &env).unwrap_err();
    assert!(err.starts_with("--apps: t.Gone: not found in "), "{err}");
    let err = serve(&["--apps", "../t.Ok"], &env).unwrap_err();
    assert!(err.contains("is not a desktop entry ID"), "{err}");
}

#[test]
fn the_halt_key_is_off_by_default_and_a_bad_chord_names_the_accepted_keys() {
    let tmp = TempDir::new("config-halt-key");
    let env = env_in(&tmp, &[(TOKEN_ENV, "tok")]);
    let c = serve(&[], &env).unwrap();
    assert_eq!(c.halt_key, None);
    assert_eq!(c.input_root, PathBuf::from("/"));
    let c = serve(&["--halt-key", "Ctrl+Alt+End"], &env).unwrap();
    assert_eq!(
        c.halt_key.map(|k| k.to_string()).as_deref(),
        Some("ctrl+alt+end")
    );
    let from_env = env_in(
        &tmp,
        &[(TOKEN_ENV, "tok"), ("HANDNODE_HALT_KEY", "super+pause")],
    );
    let c = serve(&[], &from_env).unwrap();
    assert_eq!(
        c.halt_key.map(|k| k.to_string()).as_deref(),
        Some("super+pause")
    );
    for bad in ["end", "ctrl+alt+nope", "ctrl+"] {
        let err = serve(&["--halt-key", bad], &env).unwrap_err();
        assert!(
            err.starts_with("--halt-key: ") && err.contains("ctrl+alt+end"),
            "{bad}: {err}"
        );
    }
    let err = serve(
        &[],
        &env_in(&tmp, &[(TOKEN_ENV, "tok"), ("HANDNODE_HALT_KEY", "x+y")]),
    )
    .unwrap_err();
    assert!(
        err.starts_with("HANDNODE_HALT_KEY: ") && err.contains("keys are esc, 1"),
        "{err}"
    );
}
