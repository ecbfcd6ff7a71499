//! What a person is shown before allowing a held call (contract §14): every argument,
//! nothing hidden by the text itself and nothing cut silently. One rendering serves the
//! desktop notification and `handnode approvals`; the console's `app.js` renders the same
//! escapes (`tests/console.rs` compares them).
//!
//! - Control characters, bidi controls, zero-width and other invisible or look-alike
//!   blank characters are shown as `\u{202e}`-style escapes ([`needs_escape`]); a
//!   literal `\u{` in the text is shown as `\\u{`, so an escape cannot be faked.
//! - A run of more than three spaces is shown as `␠×N`, and of more than three of one
//!   escaped character as `\u{2800}×N` (padding cannot push the rest of a command out of
//!   sight).
//! - Every argument is shown, `command` first, then the others by name; an object's
//!   entries (`env`) each on a line of their own.
//! - An `env` that sets a variable that changes how a program starts is named first:
//!   `env sets BASH_ENV`.
//! - A shortened view ends `+N bytes not shown`.

use serde_json::Value;

/// Runs of spaces longer than this are shown as `␠×N`.
pub const MAX_SPACE_RUN: usize = 3;

/// Environment names that change how a program starts: the shell, the loader and the
/// interpreters run code from them (or they change what a command name means). Every
/// `BASH_FUNC_*`, `LD_*` and `GIT_*` name too ([`CODE_ENV_PREFIXES`]). docs/protocol.md and
/// the console's `app.js` keep this list (`tests/protocol_doc.rs`, the unit tests here).
pub const CODE_ENV: &[&str] = &[
    "BASH_ENV",
    "ENV",
    "PROMPT_COMMAND",
    "PS4",
    "SHELLOPTS",
    "BASHOPTS",
    "BASH_XTRACEFD",
    "IFS",
    "PATH",
    "LD_PRELOAD",
    "LD_LIBRARY_PATH",
    "LD_AUDIT",
    "GCONV_PATH",
    "NODE_OPTIONS",
    "PERL5OPT",
    "PYTHONSTARTUP",
    "PYTHONPATH",
];

/// Prefixes of [`CODE_ENV`] names: bash's exported functions, every loader variable, and
/// git's (`GIT_SSH_COMMAND`, `GIT_EXEC_PATH`, `GIT_CONFIG_*` run programs).
pub const CODE_ENV_PREFIXES: &[&str] = &["BASH_FUNC_", "LD_", "GIT_"];

/// Whether setting `name` can make the shell, the loader or an interpreter run code.
pub fn is_code_env(name: &str) -> bool {
    CODE_ENV.contains(&name) || CODE_ENV_PREFIXES.iter().any(|p| name.starts_with(p))
}

/// The separator [`one_line`] joins lines with; a value holding it shows it escaped, so a
/// value cannot fake a second argument on a row.
pub const LINE_SEPARATOR: char = '¶';

/// Code points shown escaped besides controls (Cc) and every blank but U+0020 (Rust's
/// `is_whitespace`: Zs, Zl, Zp): inclusive ranges. The format characters (Cf), the private
/// use planes (Co), the noncharacters and the wholly unassigned planes and blocks (Cn),
/// the blank letters (U+115F, U+1160, U+2800, U+3164, U+FFA0), combining invisibles and
/// variation selectors, and [`LINE_SEPARATOR`]. The console's `app.js` holds the same
/// table (a unit test compares them).
pub const ESCAPED_RANGES: &[(u32, u32)] = &[
    (0xad, 0xad),
    (0xb6, 0xb6),
    (0x34f, 0x34f),
    (0x600, 0x605),
    (0x61c, 0x61c),
    (0x6dd, 0x6dd),
    (0x70f, 0x70f),
    (0x890, 0x891),
    (0x8e2, 0x8e2),
    (0x115f, 0x1160),
    (0x17b4, 0x17b5),
    (0x180b, 0x180f),
    (0x200b, 0x200f),
    (0x202a, 0x202e),
    (0x2060, 0x206f),
    (0x2800, 0x2800),
    (0x3164, 0x3164),
    (0xe000, 0xf8ff),
    (0xfdd0, 0xfdef),
    (0xfe00, 0xfe0f),
    (0xfeff, 0xfeff),
    (0xffa0, 0xffa0),
    (0xfff0, 0xfffb),
    (0xfffe, 0xffff),
    (0x110bd, 0x110bd),
    (0x110cd, 0x110cd),
    (0x13430, 0x1343f),
    (0x1bca0, 0x1bca3),
    (0x1d173, 0x1d17a),
    (0x1fffe, 0x1ffff),
    (0x2fffe, 0x2ffff),
    (0x3fffe, 0x3ffff),
    (0x40000, 0xdffff),
    (0xe0000, 0x10ffff),
];

/// Whether `c` is shown as an escape: controls (C0, DEL, C1), every blank other than the
/// ASCII space, and [`ESCAPED_RANGES`].
pub fn needs_escape(c: char) -> bool {
    let u = c as u32;
    c.is_control()
        || (c.is_whitespace() && c != ' ')
        || ESCAPED_RANGES
            .iter()
            .any(|&(lo, hi)| (lo..=hi).contains(&u))
}

/// `text` with every character of [`needs_escape`] as `\u{hex}`, a literal `\u{` as
/// `\\u{`, and runs of more than [`MAX_SPACE_RUN`] spaces as `␠×N`.
pub fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut spaces = 0usize;
    let flush = |out: &mut String, spaces: &mut usize| {
        if *spaces > MAX_SPACE_RUN {
            out.push_str(&format!("␠×{spaces}"));
        } else {
            out.extend(std::iter::repeat_n(' ', *spaces));
        }
        *spaces = 0;
    };
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        if c == ' ' {
            spaces += 1;
            continue;
        }
        flush(&mut out, &mut spaces);
        if needs_escape(c) {
            // A run of one escaped character is counted as spaces are: 120 blank letters
            // would push the rest of a row out of sight as escapes too.
            let mut run = 1;
            while chars.peek() == Some(&c) {
                chars.next();
                run += 1;
            }
            let one = format!("\\u{{{:x}}}", c as u32);
            if run > MAX_SPACE_RUN {
                out.push_str(&format!("{one}×{run}"));
            } else {
                out.push_str(&one.repeat(run));
            }
        } else if c == '\\' && chars.peek() == Some(&'u') {
            let rest: String = chars.clone().take(2).collect();
            out.push('\\');
            if rest == "u{" {
                out.push('\\');
            }
        } else {
            out.push(c);
        }
    }
    flush(&mut out, &mut spaces);
    out
}

/// The code-running `env` names `arguments` sets, in the order given.
pub fn code_env(arguments: &Value) -> Vec<String> {
    arguments
        .get("env")
        .and_then(Value::as_object)
        .map(|env| {
            env.keys()
                .filter(|k| is_code_env(k))
                .map(|k| escape(k))
                .collect()
        })
        .unwrap_or_default()
}

/// One value as shown: a string escaped, anything else as compact JSON with its strings
/// escaped.
fn value_text(v: &Value) -> String {
    match v {
        Value::String(s) => escape(s),
        other => escape(&other.to_string()),
    }
}

/// Every argument as lines `name: value` (`command` first, then by name); an object's
/// entries as `name.key: value`, an array's items as `name[i]: value`.
fn lines(prefix: &str, v: &Value, out: &mut Vec<String>) {
    match v {
        Value::Object(map) if !map.is_empty() => {
            let mut keys: Vec<&String> = map.keys().collect();
            keys.sort_by_key(|k| (k.as_str() != "command", k.as_str()));
            for k in keys {
                let name = if prefix.is_empty() {
                    escape(k)
                } else {
                    format!("{prefix}.{}", escape(k))
                };
                lines(&name, &map[k], out);
            }
        }
        Value::Array(items) if !items.is_empty() => {
            for (i, item) in items.iter().enumerate() {
                lines(&format!("{prefix}[{i}]"), item, out);
            }
        }
        other if prefix.is_empty() => out.push(value_text(other)),
        other => out.push(format!("{prefix}: {}", value_text(other))),
    }
}

/// Everything the person must see before allowing `arguments`: the `env sets …` line
/// first when there is one, then every argument, one a line.
pub fn full(arguments: &Value) -> String {
    let mut out = Vec::new();
    let code = code_env(arguments);
    if !code.is_empty() {
        out.push(format!("env sets {}", code.join(", ")));
    }
    lines("", arguments, &mut out);
    out.join("\n")
}

/// [`full`] cut to at most `max_bytes` (on a character boundary) for a notification; a
/// cut view ends `… +N bytes not shown` (N counts bytes of the full view).
pub fn summary(arguments: &Value, max_bytes: usize) -> String {
    cut(&full(arguments), max_bytes)
}

/// [`full`] on one line (its lines joined by ` ¶ `), cut to at most `max_bytes` the
/// same way: for a table row.
pub fn one_line(arguments: &Value, max_bytes: usize) -> String {
    let separator = format!(" {LINE_SEPARATOR} ");
    let all = full(arguments).lines().collect::<Vec<_>>().join(&separator);
    cut(&all, max_bytes)
}

fn cut(all: &str, max_bytes: usize) -> String {
    if all.len() <= max_bytes {
        return all.to_string();
    }
    let kept = crate::base::text::head(all, max_bytes);
    format!("{kept}… +{} bytes not shown", all.len() - kept.len())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn the_three_spoofs_of_issue_22_are_shown_for_what_they_are() {
        // Hidden code in env: named first, and shown.
        let env =
            json!({"command": "echo visible-harmless", "env": {"BASH_ENV": "$(id > /tmp/x)"}});
        assert_eq!(
            full(&env),
            "env sets BASH_ENV\ncommand: echo visible-harmless\nenv.BASH_ENV: $(id > /tmp/x)"
        );
        // Padding: the rest of the command stays in view.
        let padded = json!({"command": format!("echo ok{}; rm -rf ~", " ".repeat(300))});
        assert_eq!(full(&padded), "command: echo ok␠×300; rm -rf ~");
        // A right-to-left override cannot reverse what is shown.
        let bidi = json!({"command": "echo \u{202e}txt.exe"});
        assert_eq!(full(&bidi), "command: echo \\u{202e}txt.exe");
    }

    #[test]
    fn invisible_and_control_characters_are_escaped_and_escapes_cannot_be_faked() {
        assert_eq!(
            escape("a\u{200b}b\u{feff}c\u{ad}d"),
            "a\\u{200b}b\\u{feff}c\\u{ad}d"
        );
        assert_eq!(
            escape("a\nb\tc\u{1b}[2J\u{7f}"),
            "a\\u{a}b\\u{9}c\\u{1b}[2J\\u{7f}"
        );
        assert_eq!(
            escape("\u{2066}x\u{2069}\u{a0}"),
            "\\u{2066}x\\u{2069}\\u{a0}"
        );
        // The text `\u{202e}` typed literally is not shown as if it were the escape.
        assert_eq!(escape("\\u{202e}"), "\\\\u{202e}");
        assert_eq!(escape("C:\\users"), "C:\\users");
        // Three spaces stay; four are counted.
        assert_eq!(escape("a   b    c"), "a   b␠×4c");
        assert_eq!(escape("    "), "␠×4");
    }

    #[test]
    fn every_argument_is_shown_and_every_code_variable_named_first() {
        let args = json!({"timeout_secs": 30, "cwd": "/tmp", "command": "make",
            "env": {"LD_PRELOAD": "/tmp/x.so", "BASH_FUNC_ls%%": "() { id; }", "HOME": "/h"}});
        let shown = full(&args);
        let mut it = shown.lines();
        assert_eq!(it.next(), Some("env sets BASH_FUNC_ls%%, LD_PRELOAD"));
        assert_eq!(it.next(), Some("command: make"));
        for want in [
            "cwd: /tmp",
            "env.HOME: /h",
            "env.LD_PRELOAD: /tmp/x.so",
            "timeout_secs: 30",
        ] {
            assert!(shown.lines().any(|l| l == want), "{want}: {shown}");
        }
        for name in CODE_ENV {
            let args = json!({"command": "true", "env": {*name: "x"}});
            assert!(
                full(&args).starts_with(&format!("env sets {name}\n")),
                "{name}"
            );
        }
        assert!(!full(&json!({"command": "true", "env": {"bash_env": "x"}})).contains("env sets"));
    }

    /// Issue 35's spoofs: blank letters as padding, format characters the font draws as
    /// nothing, a value faking a second argument on a row, and the variables of other
    /// interpreters.
    #[test]
    fn what_the_eye_skips_is_escaped_and_counted() {
        let padded =
            json!({"command": format!("echo ok{}; rm -rf ~/important", "\u{2800}".repeat(120))});
        assert_eq!(
            full(&padded),
            "command: echo ok\\u{2800}×120; rm -rf ~/important"
        );
        assert_eq!(escape("a\u{2800}\u{2800}b"), "a\\u{2800}\\u{2800}b");
        for c in [
            '\u{1d173}',
            '\u{1d174}',
            '\u{1bca0}',
            '\u{3164}',
            '\u{115f}',
            '\u{ffa0}',
            '\u{e000}',
            '\u{f0000}',
            '\u{fdd0}',
            '\u{ffff}',
            '\u{50000}',
            '\u{e0001}',
            '\u{2028}',
            '\u{2029}',
            '\u{3000}',
            '\u{600}',
            '\u{110bd}',
        ] {
            assert!(needs_escape(c), "U+{:04X} is not escaped", c as u32);
            assert_eq!(escape(&c.to_string()), format!("\\u{{{:x}}}", c as u32));
        }
        for c in ['a', 'é', '中', '😀', ' ', '\u{1d15e}'] {
            assert!(!needs_escape(c), "U+{:04X} is escaped", c as u32);
        }
        let fake = json!({"command": "rm -rf ~ ¶ command: echo fine"});
        assert_eq!(
            one_line(&fake, 200),
            "command: rm -rf ~ \\u{b6} command: echo fine"
        );
        for name in [
            "NODE_OPTIONS",
            "PERL5OPT",
            "GCONV_PATH",
            "BASH_XTRACEFD",
            "LD_BIND_NOW",
            "GIT_SSH_COMMAND",
        ] {
            let args = json!({"command": "true", "env": {name: "x"}});
            assert!(
                full(&args).starts_with(&format!("env sets {name}\n")),
                "{name}"
            );
        }
    }

    /// The console renders approvals itself (app.js): its tables are these tables.
    #[test]
    fn the_consoles_tables_are_these() {
        let app = include_str!("../admin/console/app.js");
        let squash = |s: &str| s.chars().filter(|c| !c.is_whitespace()).collect::<String>();
        let js_array = |name: &str| {
            let start = app
                .find(&format!("const {name} = ["))
                .unwrap_or_else(|| panic!("app.js has no {name}"));
            let rest = &app[start..];
            squash(&rest[rest.find('[').unwrap()..rest.find("];").unwrap() + 1])
        };
        let ranges: Vec<String> = ESCAPED_RANGES
            .iter()
            .map(|(lo, hi)| format!("[0x{lo:x},0x{hi:x}]"))
            .collect();
        assert_eq!(
            js_array("ESCAPED_RANGES"),
            format!("[{}]", ranges.join(","))
        );
        let quoted = |l: &[&str]| {
            let q: Vec<String> = l.iter().map(|n| format!("'{n}'")).collect();
            format!("[{}]", q.join(","))
        };
        assert_eq!(js_array("CODE_ENV"), quoted(CODE_ENV));
        assert_eq!(js_array("CODE_ENV_PREFIXES"), quoted(CODE_ENV_PREFIXES));
        let doc = include_str!("../../docs/protocol.md");
        for name in CODE_ENV {
            assert!(
                doc.contains(&format!("`{name}`")),
                "docs/protocol.md omits {name}"
            );
        }
        for prefix in CODE_ENV_PREFIXES {
            assert!(
                doc.contains(&format!("`{prefix}*`")),
                "docs/protocol.md omits {prefix}*"
            );
        }
    }

    #[test]
    fn a_cut_summary_says_how_much_it_left_out() {
        let args = json!({"command": "x".repeat(1000)});
        let all = full(&args);
        let cut = summary(&args, 100);
        assert_eq!(
            cut,
            format!("{}… +{} bytes not shown", &all[..100], all.len() - 100)
        );
        assert_eq!(summary(&args, all.len()), all);
        // On a character boundary.
        let wide = json!({"command": "é".repeat(100)});
        assert!(summary(&wide, 10).contains("bytes not shown"));
    }
}
