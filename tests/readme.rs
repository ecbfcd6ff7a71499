//! The README stays true: its first lines are the two commands, and its flag table is the
//! one `--help` is generated from.

#[test]
fn readme_starts_with_the_two_commands() {
    let readme =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/README.md")).unwrap();
    let code: Vec<&str> = readme
        .lines()
        .skip_while(|l| !l.starts_with("```"))
        .skip(1)
        .take_while(|l| !l.starts_with("```"))
        .collect();
    assert!(code[0].starts_with("cargo run --release"), "{code:?}");
    assert!(code[1].starts_with("scripts/test.sh"), "{code:?}");
    let ci = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/.ci/run")).unwrap();
    assert!(
        ci.contains("scripts/test.sh"),
        ".ci/run must call the README's test command"
    );
}

/// The README's `--allow` example is what it says: narrow, no shell (issue 30: the old
/// `browser_*` example reached the shell through `browser_file_upload`).
#[test]
fn the_readmes_allow_example_reaches_no_shell() {
    use handnode::profiles::Profile;
    use handnode::tools::policy::{ToolLists, ToolPolicy};
    let readme =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/README.md")).unwrap();
    let (_, rest) = readme
        .split_once("name them: `--allow ")
        .expect("the README's --allow example");
    let list = rest.split('`').next().unwrap();
    let policy = ToolPolicy::new(
        Profile::Custom,
        ToolLists {
            allow: list.split(',').map(String::from).collect(),
            ..Default::default()
        },
    )
    .unwrap();
    let e = policy.escalation(|_| false);
    assert_eq!(e.shell.as_str(), "no", "--allow {list}: {e:?}");
    // And the pattern it warns about does reach one.
    let wide = ToolPolicy::new(
        Profile::Custom,
        ToolLists {
            allow: vec!["browser_*".into()],
            ..Default::default()
        },
    )
    .unwrap();
    assert_eq!(wide.escalation(|_| false).shell.as_str(), "yes");
    assert!(readme.contains("reaches the shell"));
}

/// Where a README command is run: a file of this repository that runs it (and a string that
/// file contains where it does), or why nothing here can (a Pi, root, a user manager, a
/// tailnet), which the README's reader can check against the reason.
enum RunBy {
    File(&'static str, &'static str),
    NotHere(&'static str),
}

/// Every shell command of the README, by the start of its (continuation-joined, comment-free)
/// text, and where it runs (issue 30: every command in it run by a test or scripts/e2e.sh).
const LEDGER: &[(&str, RunBy)] = &[
    ("cargo run --release", RunBy::File("scripts/e2e-lib.sh", "cargo build --release")),
    ("scripts/test.sh", RunBy::File(".ci/run", "scripts/test.sh")),
    ("cargo fmt --check && cargo clippy --all-targets -- -D warnings", RunBy::File("scripts/test.sh", "cargo clippy --all-targets -- -D warnings")),
    ("cargo test --lib", RunBy::File("scripts/test.sh", "cargo test --all-targets")),
    ("cargo test --test attach", RunBy::File("scripts/test.sh", "cargo test --all-targets")),
    ("scripts/build-static.sh --all", RunBy::File("scripts/ci/dist-check.sh", "build-static.sh")),
    ("tar czf handnode-dist.tgz", RunBy::File("tests/readme.rs", "fn the_readmes_dist_tarball_names_files_that_exist")),
    ("scp handnode-dist.tgz", RunBy::NotHere("copies to a Pi; CI has none")),
    ("mkdir handnode && tar xzf", RunBy::NotHere("runs on the Pi, on the copied tarball")),
    ("scripts/install.sh --from-dist target/dist", RunBy::File("tests/install_dist.rs", "\"--from-dist\"")),
    ("sudo loginctl enable-linger", RunBy::NotHere("needs root and a systemd user manager; scripts/ci/install-check.sh runs systemd-analyze verify --user on the unit instead")),
    ("sudo apt-get install -y build-essential git curl", RunBy::NotHere("the Pi's own build tools; CI installs its own in scripts/ci/packages.sh")),
    ("curl --proto '=https' -sSf https://sh.rustup.rs", RunBy::NotHere("installs Rust from the network; CI already has it")),
    ("git clone <this repository> handnode", RunBy::File("scripts/ci-like.sh", "git clone")),
    ("scripts/install.sh", RunBy::File("scripts/ci/install-check.sh", "install_sh --prefix")),
    ("scripts/install.sh --no-systemd", RunBy::File("scripts/ci/install-check.sh", "\"scripts/install.sh --no-systemd|nohup handnode serve ")),
    ("nohup handnode serve", RunBy::File("scripts/ci/install-check.sh", "bash -c \"${route[1]}\"")),
    ("handnode doctor", RunBy::File("scripts/ci/install-check.sh", "bash -c \"${route[2]}\"")),
    ("scripts/install.sh --uninstall", RunBy::File("scripts/ci/install-check.sh", "bash -c \"${route[3]} --prefix '$prefix'\"")),
    ("systemctl --user import-environment", RunBy::NotHere("needs a desktop session's user manager")),
    ("TOKEN=$(cat ~/.config/handnode/token)", RunBy::File("scripts/e2e.sh", "token=\"$(tr -d '[:space:]' <\"$token_file\"")),
    ("curl -s -H \"Authorization: Bearer $TOKEN\" -H 'Content-Type: application/json' -d '{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"initialize\"", RunBy::File("scripts/e2e.sh", "The README's own two curl lines")),
    ("curl -s -H \"Authorization: Bearer $TOKEN\" -H 'Content-Type: application/json' -d '{\"jsonrpc\":\"2.0\",\"id\":2,\"method\":\"tools/call\"", RunBy::File("scripts/e2e.sh", "echo hi")),
    ("{ \"mcpServers\": {", RunBy::File("scripts/interop-readme-client.cjs", "<!-- mcp-client:begin -->")),
    ("cat ~/.config/handnode/token", RunBy::File("scripts/interop.sh", "bash -c 'cat ~/.config/handnode/token'")),
    ("tailscale serve", RunBy::NotHere("needs a tailnet; what it sends (Host, Tailscale-User-Login) is replayed by tests/local_socket.rs")),
    ("handnode --allow-host box.tailnet.ts.net --allow-login you@example.com", RunBy::File("tests/local_socket.rs", "allow_logins = vec![\"you@example.com\"")),
    ("handnode grant --runtime wss://pod.example:8090 --session laptop --profile desktop --ttl 1h", RunBy::File("tests/first_run.rs", "## Lending the box to a session")),
    ("handnode grants", RunBy::File("tests/first_run.rs", "## Lending the box to a session")),
    ("handnode calls --watch", RunBy::NotHere("runs until interrupted; its list is handnode calls', which tests/calls.rs runs, printed again on a change")),
    ("handnode calls", RunBy::File("tests/calls.rs", "cli(&d, &[\"calls\"])")),
    ("handnode jobs", RunBy::File("tests/calls.rs", "cli(&d, &[\"jobs\"])")),
    ("handnode stop", RunBy::File("tests/calls.rs", "cli(&d, &[\"stop\", &bash_id])")),
    ("handnode halt", RunBy::File("tests/halt.rs", "run(&[\"halt\", \"lunch\", \"break\"])")),
    ("handnode resume", RunBy::File("tests/halt.rs", "run(&[\"resume\"])")),
    ("handnode journal ID --html", RunBy::File("tests/journal.rs", "cli(&d, &[\"journal\", &grant, \"--html\"")),
    ("handnode journal ID", RunBy::File("tests/journal.rs", "cli(&d, &[\"journal\", &grant])")),
    ("handnode journal", RunBy::File("tests/journal.rs", "cli(&d, &[\"journal\"])")),
    ("handnode revoke <id>", RunBy::File("tests/first_run.rs", "## Lending the box to a session")),
    ("curl -s -H \"Authorization: Bearer $TOKEN\" -H 'Content-Type: application/json' -d '{\"runtime\"", RunBy::File("scripts/e2e.sh", "\"$daemon_url/attach\"")),
    ("curl -s -X DELETE", RunBy::File("scripts/e2e.sh", "http -X DELETE \"${admin[@]}\" \"$daemon_url/attach/$grant_id\"")),
    ("scripts/ci/playwright.sh", RunBy::File("scripts/test.sh", "bash scripts/ci/playwright.sh")),
    ("handnode --browser-command", RunBy::File("tests/browser.rs", "(\"--browser-command\", &command)")),
    ("handnode grant --runtime wss://pod.example:8090 --session laptop --profile browser", RunBy::File("tests/browser.rs", "common::attach_body(&pod, \"grant-t\", \"browser\")")),
    ("handnode grant --runtime wss://pod.example:8090 --session laptop --profile files", RunBy::File("tests/files.rs", "lend(&d, &pod, \"trav\", \"files\", &lent)")),
    ("handnode grant --runtime wss://pod.example:8090 --session laptop --profile desktop --own-display", RunBy::File("src/ops/cli/tests.rs", "args.own_display = true")),
    ("handnode serve --apps", RunBy::File("tests/apps.rs", ".args([\"--apps\", apps])")),
    ("handnode grant --runtime wss://pod.example:8090 --session laptop --profile apps", RunBy::File("tests/apps.rs", "common::attach_body(&pod, \"s-apps\", \"apps\")")),
    ("handnode doctor --browser-command", RunBy::File("src/ops/doctor.rs", "browser_checks(")),
    ("handnode doctor --apps", RunBy::File("src/ops/doctor/tests.rs", "fn apps_names_every_refused_entry_and_why")),
    ("handnode grant --runtime wss://pod.example:8090 --session laptop --profile desktop --approve shell", RunBy::File("tests/first_run.rs", "--approve shell --secret-file ~/attach-secret")),
    ("handnode approvals --watch", RunBy::File("tests/first_run.rs", "[\"approvals\", \"--watch\"]")),
    ("handnode approve <id>", RunBy::File("tests/first_run.rs", "--approve shell --secret-file ~/attach-secret")),
    ("handnode deny <id> --reason", RunBy::File("tests/first_run.rs", "--approve shell --secret-file ~/attach-secret")),
    ("curl -s -D - -H \"Authorization: Bearer $TOKEN\" 'https://box.tailnet.ts.net/approvals?wait=60", RunBy::File("tests/common/mod.rs", "?wait=5&seen={etag}")),
    ("curl -s -H \"Authorization: Bearer $TOKEN\" -H 'Content-Type: application/json' -d '{\"decision\"", RunBy::File("tests/approvals.rs", "\"decision\"")),
    ("[e", RunBy::File("tests/a11y.rs", "push button \\\"Yes\\\"")),
    ("tail -f ~/.local/state/handnode/audit.jsonl", RunBy::NotHere("follows the log forever; the records it selects are asserted in tests/attach.rs and src/audit.rs")),
    ("handnode --token-file ~/.config/handnode/token --allow-login", RunBy::File("tests/local_socket.rs", "config.allow_hosts = vec![\"box.tail.ts.net\"")),
    ("curl -H \"Authorization: Bearer $(cat ~/.config/handnode/token)\" https://box.tailnet.ts.net:8795/attach", RunBy::File("tests/local_socket.rs", "(\"Host\", \"box.tail.ts.net\")")),
];

/// The README's commands: every fenced block's lines, `\`-continuations joined, comments and
/// `#`-only lines dropped, whitespace runs made one space. A `json` block is one command, the
/// whole of it (what a client is given, run as a whole by whoever runs it).
fn readme_commands() -> Vec<String> {
    let readme =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/README.md")).unwrap();
    let mut out = Vec::new();
    for (i, block) in readme.split("```").enumerate() {
        if i % 2 == 0 {
            continue;
        }
        if let Some(json) = block.strip_prefix("json\n") {
            out.push(json.split_whitespace().collect::<Vec<_>>().join(" "));
            continue;
        }
        let mut current = String::new();
        for line in block.lines().skip(1) {
            let line = line.trim();
            if let Some(head) = line.strip_suffix('\\') {
                current.push_str(head);
                current.push(' ');
                continue;
            }
            current.push_str(line);
            // A comment starts at " # " (the README's commands have no such text in quotes).
            let text = match current.find("  #").or_else(|| current.find(" # ")) {
                Some(at) => &current[..at],
                None => &current,
            };
            let text = text.split_whitespace().collect::<Vec<_>>().join(" ");
            if !text.is_empty() && !text.starts_with('#') {
                out.push(text);
            }
            current.clear();
        }
    }
    out
}

#[test]
fn every_readme_command_is_run_by_a_test_or_says_why_not() {
    let commands = readme_commands();
    assert!(commands.len() > 30, "{commands:#?}");
    let mut used = vec![false; LEDGER.len()];
    let mut missing = Vec::new();
    for command in &commands {
        // The longest key that starts the command: "scripts/install.sh --from-dist" before
        // "scripts/install.sh".
        let best = LEDGER
            .iter()
            .enumerate()
            .filter(|(_, (key, _))| command.starts_with(key))
            .max_by_key(|(_, (key, _))| key.len());
        let Some((i, (_, run))) = best else {
            missing.push(command.clone());
            continue;
        };
        used[i] = true;
        if let RunBy::NotHere(why) = run {
            assert!(
                why.len() > 20,
                "`{command}` is not run here: say why, not {why:?}"
            );
        }
        if let RunBy::File(file, needle) = run {
            let text = std::fs::read_to_string(format!("{}/{file}", env!("CARGO_MANIFEST_DIR")))
                .unwrap_or_else(|e| panic!("{file}: {e}"));
            assert!(
                text.contains(needle),
                "{file} no longer runs `{command}` ({needle:?} is gone)"
            );
        }
    }
    assert!(
        missing.is_empty(),
        "README commands nothing runs; add them to LEDGER: {missing:#?}"
    );
    let stale: Vec<&str> = LEDGER
        .iter()
        .zip(&used)
        .filter(|(_, used)| !**used)
        .map(|((key, _), _)| *key)
        .collect();
    assert!(
        stale.is_empty(),
        "LEDGER entries the README no longer has: {stale:#?}"
    );
}

/// The tarball of "Install on a Pi" packs files this checkout has.
#[test]
fn the_readmes_dist_tarball_names_files_that_exist() {
    let command = readme_commands()
        .into_iter()
        .find(|c| c.starts_with("tar czf handnode-dist.tgz"))
        .expect("the README's tar line");
    for path in command.split_whitespace().skip(3) {
        if path == "target/dist" {
            // Made by the line before, which names it: without --dist the artifacts go to
            // <cargo target dir>/dist, elsewhere when CARGO_TARGET_DIR is set (issue 37).
            let build = readme_commands()
                .into_iter()
                .find(|c| c.starts_with("scripts/build-static.sh --all"))
                .expect("the README's build-static line");
            assert!(
                build.contains("--dist target/dist"),
                "the README's build line must write target/dist itself: {build}"
            );
            let script = std::fs::read_to_string(concat!(
                env!("CARGO_MANIFEST_DIR"),
                "/scripts/build-static.sh"
            ))
            .unwrap();
            assert!(
                script.contains("--dist DIR"),
                "build-static.sh takes --dist DIR"
            );
            continue;
        }
        let full = format!("{}/{path}", env!("CARGO_MANIFEST_DIR"));
        assert!(
            std::path::Path::new(&full).exists(),
            "{path} is not in the checkout"
        );
    }
}

/// The README's profile table: one row per fixed profile, its browser-tool counts the
/// profiles' tables'; the local-tools cells are generated spans (`tests/generated.rs`).
#[test]
fn readme_profile_table_matches_the_registry() {
    use handnode::profiles::{browser_profile_tools, Profile, DESKTOP_BROWSER_TOOLS};

    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/README.md");
    let readme = std::fs::read_to_string(path).unwrap();
    let start = readme
        .find("<!-- profiles:begin")
        .expect("profiles:begin marker");
    let end = readme
        .find("<!-- profiles:end -->")
        .expect("profiles:end marker");
    let mut seen = Vec::new();
    for line in readme[start..end].lines() {
        let cells: Vec<&str> = line.split(" | ").collect();
        let profile = cells[0]
            .strip_prefix("| `")
            .and_then(|rest| rest.split('`').next())
            .and_then(|name| name.parse::<Profile>().ok());
        let Some(profile) = profile else { continue };
        seen.push(profile);
        let local = cells[1];
        assert!(
            local != "none" || handnode::tools::names(profile).is_empty(),
            "README says {profile} has no local tools"
        );
        assert!(
            local == "none" || local.contains(&format!("<!-- gen:profile:{profile} -->")),
            "README: {profile}'s local tools are a generated span, not a list by hand: {local}"
        );
        let browser = cells[2];
        match profile {
            Profile::Browser => assert!(
                browser.contains(&format!("up to {},", browser_profile_tools().count())),
                "README: the browser profile's tool count: {browser}"
            ),
            Profile::Desktop => assert!(
                browser.contains(&format!("the {} ", DESKTOP_BROWSER_TOOLS.len())),
                "README: the desktop profile's browser-tool count: {browser}"
            ),
            _ => {}
        }
    }
    let mut fixed: Vec<Profile> = Profile::ALL
        .into_iter()
        .filter(|p| !p.is_custom())
        .collect();
    seen.sort_by_key(|p| p.as_str());
    fixed.sort_by_key(|p| p.as_str());
    assert_eq!(seen, fixed, "one README row per fixed profile");
}
