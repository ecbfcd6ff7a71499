//! What a person is shown before allowing a held call (contract §14): every argument,
//! nothing hidden by the text itself and nothing cut silently. One rendering serves the
//! desktop notification and `handnode approvals`; the console's `app.js` renders the same
//! escapes (`tests/console.rs` compares them).
//!
//! - Control characters, bidi controls, zero-width and other invisible or look-alike
//!   blank characters are shown as `\u{202e}`-style escapes ([`needs_escape`]); a
//!   literal `\u{` in the text is shown as `\\u{`, so an escape cannot be faked.
//! - A run of more than three spaces is shown as `␠×N` (padding cannot push the rest of a
//!   command out of sight).
//! - Every argument is shown, `command` first, then the others by name; an object's
//!   entries (`env`) each on a line of their own.
//! - An `env` that sets a variable the shell or the loader runs code from is named first:
//!   `env sets BASH_ENV`.
//! - A shortened view ends `+N bytes not shown`.

use serde_json::Value;

/// Runs of spaces longer than this are shown as `␠×N`.
pub const MAX_SPACE_RUN: usize = 3;

/// Environment names the shell or the dynamic loader runs code from (or that change what
/// a command name means); `BASH_FUNC_*` too.
pub const CODE_ENV: &[&str] = &[
    "BASH_ENV",
    "ENV",
    "PROMPT_COMMAND",
    "PS4",
    "SHELLOPTS",
    "BASHOPTS",
    "IFS",
    "PATH",
    "LD_PRELOAD",
    "LD_LIBRARY_PATH",
    "LD_AUDIT",
];

/// Whether setting `name` can make the shell or the loader run code.
pub fn is_code_env(name: &str) -> bool {
    CODE_ENV.contains(&name) || name.starts_with("BASH_FUNC_")
}

/// Whether `c` is shown as an escape: controls (C0, DEL, C1), bidi controls, zero-width,
/// invisible and format characters, and every blank other than the ASCII space.
pub fn needs_escape(c: char) -> bool {
    let u = c as u32;
    c.is_control()
        || (c.is_whitespace() && c != ' ')
        || matches!(
            u,
            0x00AD
                | 0x034F
                | 0x061C
                | 0x115F
                | 0x1160
                | 0x17B4
                | 0x17B5
                | 0x180B..=0x180F
                | 0x200B..=0x200F
                | 0x202A..=0x202E
                | 0x2060..=0x206F
                | 0x3164
                | 0xFE00..=0xFE0F
                | 0xFEFF
                | 0xFFA0
                | 0xFFF9..=0xFFFB
                | 0xE0000..=0xE007F
                | 0xE0100..=0xE01EF
        )
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
            out.push_str(&format!("\\u{{{:x}}}", c as u32));
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
    let all = full(arguments).lines().collect::<Vec<_>>().join(" ¶ ");
    cut(&all, max_bytes)
}

fn cut(all: &str, max_bytes: usize) -> String {
    if all.len() <= max_bytes {
        return all.to_string();
    }
    let mut end = max_bytes;
    while !all.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}… +{} bytes not shown", &all[..end], all.len() - end)
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
