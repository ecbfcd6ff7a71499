//! `--browser-command`: the operator's command line split into an argv without a shell,
//! and the Playwright MCP flags it may not carry because handnode sets them per grant or
//! because they would reach past the grant's own browser.
//!
//! Quoting rules (the README repeats them):
//! - words are separated by unquoted spaces, tabs or newlines;
//! - `'…'` is literal: no escapes at all inside single quotes;
//! - `"…"` keeps spaces; inside it only `\"` and `\\` are escapes, any other `\` is literal;
//! - outside quotes `\x` is the character `x` (so `\ ` is a space inside a word);
//! - nothing else is special: no `$VAR`, `~`, globs, `;`, `|`, `&` or redirections;
//! - an unclosed quote or a trailing `\` is an error.

/// Longest `--browser-command` accepted (bytes): a command line, not a script.
pub const MAX_COMMAND_BYTES: usize = 8 << 10;

/// Split `line` into words by the rules above.
pub fn split(line: &str) -> Result<Vec<String>, String> {
    if line.len() > MAX_COMMAND_BYTES {
        return Err(format!(
            "--browser-command is {} bytes; at most {MAX_COMMAND_BYTES} are accepted",
            line.len()
        ));
    }
    let mut words = Vec::new();
    let mut word = String::new();
    // A word exists once any character or quote of it was seen: `''` is an empty word.
    let mut in_word = false;
    let mut chars = line.chars();
    while let Some(c) = chars.next() {
        match c {
            ' ' | '\t' | '\n' | '\r' => {
                if in_word {
                    words.push(std::mem::take(&mut word));
                    in_word = false;
                }
            }
            '\'' => {
                in_word = true;
                loop {
                    match chars.next() {
                        Some('\'') => break,
                        Some(c) => word.push(c),
                        None => return Err("--browser-command has an unclosed ' quote".into()),
                    }
                }
            }
            '"' => {
                in_word = true;
                loop {
                    match chars.next() {
                        Some('"') => break,
                        Some('\\') => match chars.next() {
                            Some(c @ ('"' | '\\')) => word.push(c),
                            Some(c) => {
                                word.push('\\');
                                word.push(c);
                            }
                            None => return Err("--browser-command has an unclosed \" quote".into()),
                        },
                        Some(c) => word.push(c),
                        None => return Err("--browser-command has an unclosed \" quote".into()),
                    }
                }
            }
            '\\' => match chars.next() {
                Some(c) => {
                    in_word = true;
                    word.push(c);
                }
                None => return Err("--browser-command ends with a lone \\".into()),
            },
            c => {
                in_word = true;
                word.push(c);
            }
        }
    }
    if in_word {
        words.push(word);
    }
    if words.is_empty() {
        return Err("--browser-command is empty; give the Playwright MCP command line".into());
    }
    Ok(words)
}

/// Playwright MCP flags refused in `--browser-command`, each with why. handnode passes
/// `--output-dir` (and `--user-data-dir` unless `--isolated`) itself, per grant.
pub const REFUSED_FLAGS: &[(&str, &str)] = &[
    (
        "--user-data-dir",
        "handnode gives each grant an empty profile of its own",
    ),
    (
        "--output-dir",
        "handnode gives each grant an output directory of its own",
    ),
    (
        "--storage-state",
        "it would load saved cookies and storage into every grant's browser",
    ),
    (
        "--cdp-endpoint",
        "it would drive an existing browser instead of a throwaway one",
    ),
    (
        "--endpoint",
        "it would drive an existing browser instead of a throwaway one",
    ),
    (
        "--extension",
        "it would drive the owner's own browser through its extension",
    ),
    (
        "--port",
        "handnode speaks MCP to the browser on stdio, not over HTTP",
    ),
    (
        "--host",
        "handnode speaks MCP to the browser on stdio, not over HTTP",
    ),
    (
        "--shared-browser-context",
        "each grant gets a browser of its own",
    ),
    (
        "--allow-unrestricted-file-access",
        "it opens the box's files (file:// URLs, paths outside the output directory) to the page",
    ),
];

/// The first refused flag in `argv` (as `--flag` or `--flag=value`), with why.
pub fn refused_flag(argv: &[String]) -> Option<(&'static str, &'static str)> {
    argv.iter().skip(1).find_map(|arg| {
        REFUSED_FLAGS.iter().copied().find(|(flag, _)| {
            arg == flag
                || arg
                    .strip_prefix(flag)
                    .is_some_and(|rest| rest.starts_with('='))
        })
    })
}

/// Whether the command keeps its profile in memory (`--isolated`), so no
/// `--user-data-dir` is needed.
pub fn is_isolated(argv: &[String]) -> bool {
    argv.iter().skip(1).any(|a| a == "--isolated")
}

/// The value of `--executable-path` (`--executable-path X` or `--executable-path=X`).
pub fn executable_path(argv: &[String]) -> Option<&str> {
    let mut it = argv.iter().skip(1);
    while let Some(arg) = it.next() {
        if arg == "--executable-path" {
            return it.next().map(String::as_str);
        }
        if let Some(v) = arg.strip_prefix("--executable-path=") {
            return Some(v);
        }
    }
    None
}

/// Parse and check a `--browser-command` value: the argv, or what to fix.
pub fn parse_command(line: &str) -> Result<Vec<String>, String> {
    let argv = split(line)?;
    if let Some((flag, why)) = refused_flag(&argv) {
        return Err(format!("--browser-command must not pass {flag}: {why}"));
    }
    Ok(argv)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn words(v: &[&str]) -> Vec<String> {
        v.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn splitting_follows_the_documented_rules() {
        let cases: &[(&str, &[&str])] = &[
            ("node cli.js --headless", &["node", "cli.js", "--headless"]),
            ("  a \t b\n c  ", &["a", "b", "c"]),
            ("'/opt/my dir/cli.js' x", &["/opt/my dir/cli.js", "x"]),
            (r#""a \"b\" \\ \n""#, &[r#"a "b" \ \n"#]),
            (r"a\ b c", &["a b", "c"]),
            ("'' x", &["", "x"]),
            ("a'b'\"c\"d", &["abcd"]),
            (
                "$HOME ~ * ; | & > x",
                &["$HOME", "~", "*", ";", "|", "&", ">", "x"],
            ),
            (r"'it\'s", &[r"it\s"]),
        ];
        for (line, want) in cases {
            assert_eq!(split(line).unwrap(), words(want), "{line:?}");
        }
    }

    #[test]
    fn bad_command_lines_say_what_is_wrong() {
        let cases = [
            ("", "is empty"),
            ("   ", "is empty"),
            ("node 'cli.js", "unclosed ' quote"),
            ("node \"cli.js", "unclosed \" quote"),
            ("node \"cli.js\\", "unclosed \" quote"),
            ("node \\", "lone \\"),
        ];
        for (line, want) in cases {
            let err = split(line).unwrap_err();
            assert!(err.contains(want), "{line:?}: {err}");
        }
    }

    #[test]
    fn the_length_bound_is_enforced_at_bound_plus_one() {
        let at = "a".repeat(MAX_COMMAND_BYTES);
        assert_eq!(split(&at).unwrap().len(), 1);
        let over = "a".repeat(MAX_COMMAND_BYTES + 1);
        assert!(split(&over).unwrap_err().contains("at most"));
    }

    #[test]
    fn flags_that_escape_the_grant_are_refused() {
        for line in [
            "node cli.js --user-data-dir /home/me/.config/chromium",
            "node cli.js --user-data-dir=/x",
            "node cli.js --cdp-endpoint http://127.0.0.1:9222",
            "node cli.js --extension",
            "node cli.js --port 8931",
            "node cli.js --storage-state=s.json",
            "node cli.js --output-dir /tmp/x",
            "node cli.js --allow-unrestricted-file-access",
        ] {
            let err = parse_command(line).unwrap_err();
            assert!(
                err.starts_with("--browser-command must not pass --"),
                "{err}"
            );
        }
        // The program itself and look-alike flags are not refused.
        let ok = parse_command("--port cli.js --portable --headless --isolated").unwrap();
        assert!(is_isolated(&ok));
        assert!(!is_isolated(&words(&["--isolated", "x"])));
    }

    #[test]
    fn the_executable_path_is_found_in_both_spellings() {
        let a = words(&["node", "cli.js", "--executable-path", "/usr/bin/chromium"]);
        assert_eq!(executable_path(&a), Some("/usr/bin/chromium"));
        let b = words(&["node", "--executable-path=/c"]);
        assert_eq!(executable_path(&b), Some("/c"));
        assert_eq!(
            executable_path(&words(&["node", "--executable-path"])),
            None
        );
    }
}
