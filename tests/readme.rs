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
    let want = handnode::ops::cli::help_table_markdown();
    assert_eq!(
        table,
        want.trim(),
        "README flag table is stale: regenerate it with `cargo run -- help-markdown > /tmp/t` or copy cli::help_table_markdown()"
    );
}
