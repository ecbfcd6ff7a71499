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

/// The README's profile table: each fixed profile's row names its local tools exactly as
/// the registry lists them (generated), and its browser-tool counts are the profiles'
/// tables'. `HANDNODE_BLESS=1 cargo test --test readme` rewrites the local-tools cells.
#[test]
fn readme_profile_table_matches_the_registry() {
    use handnode::profiles::{browser_profile_tools, Profile, DESKTOP_BROWSER_TOOLS};
    use handnode::tools;

    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/README.md");
    let readme = std::fs::read_to_string(path).unwrap();
    let start = readme
        .find("<!-- profiles:begin")
        .expect("profiles:begin marker");
    let end = readme
        .find("<!-- profiles:end -->")
        .expect("profiles:end marker");
    let local_cell = |profile: Profile| {
        let names = tools::names(profile);
        let list: Vec<String> = names.iter().map(|n| format!("`{n}`")).collect();
        match names.len() {
            0 => "none".to_string(),
            n if n == tools::TOOLS.len() => format!("all {n}: {}", list.join(", ")),
            _ => list.join(", "),
        }
    };
    let mut seen = Vec::new();
    let mut want = String::new();
    for line in readme[start..end].lines() {
        let cells: Vec<&str> = line.split(" | ").collect();
        let profile = cells[0]
            .strip_prefix("| `")
            .and_then(|rest| rest.split('`').next())
            .and_then(|name| name.parse::<Profile>().ok());
        let Some(profile) = profile else {
            want.push_str(line);
            want.push('\n');
            continue;
        };
        seen.push(profile);
        let mut cells = cells.clone();
        let local = local_cell(profile);
        cells[1] = &local;
        want.push_str(&cells.join(" | "));
        want.push('\n');
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
    let fixed: Vec<Profile> = Profile::ALL
        .into_iter()
        .filter(|p| !p.is_custom())
        .collect();
    seen.sort_by_key(|p| p.as_str());
    let mut fixed_sorted = fixed.clone();
    fixed_sorted.sort_by_key(|p| p.as_str());
    assert_eq!(seen, fixed_sorted, "one README row per fixed profile");
    let have = &readme[start..end];
    if have == want {
        return;
    }
    if std::env::var_os("HANDNODE_BLESS").is_some() {
        let fixed = format!("{}{}{}", &readme[..start], want, &readme[end..]);
        std::fs::write(path, fixed).unwrap();
        return;
    }
    panic!(
        "README's profile table is stale (HANDNODE_BLESS=1 cargo test --test readme rewrites it):\n{want}"
    );
}
