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

#[test]
fn readme_flag_table_matches_help() {
    let readme =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/README.md")).unwrap();
    let start = readme
        .find("<!-- flags:begin -->")
        .expect("flags:begin marker")
        + "<!-- flags:begin -->".len();
    let end = readme.find("<!-- flags:end -->").expect("flags:end marker");
    let table = readme[start..end].trim();
    let want = handnode::cli::help_table_markdown();
    assert_eq!(
        table,
        want.trim(),
        "README flag table is stale: regenerate it with `cargo run -- help-markdown > /tmp/t` or copy cli::help_table_markdown()"
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
