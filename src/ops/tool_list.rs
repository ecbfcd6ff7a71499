//! `handnode tools [--profile P] [--json]`: the registry's local tools (name, class, the
//! profiles that hold them), so scripts, benches and docs read a profile's list or a count
//! from the binary instead of spelling it out. Everything printed comes from
//! [`crate::tools::TOOLS`]; nothing here names a tool.

use serde_json::{json, Value};

use crate::base::error::Error;
use crate::profiles::Profile;
use crate::tools::Tool;

/// What `handnode tools` was asked for.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ToolsArgs {
    /// Only the tools this profile allows (`custom` and `browser` hold no local tool of
    /// their own, so their lists are empty).
    pub profile: Option<Profile>,
    pub json: bool,
}

/// `handnode tools --help`.
/// `handnode tools --help`; the profiles are named from [`Profile::ALL`], so a new one is
/// never missing here.
pub fn help() -> String {
    let names: Vec<&str> = crate::profiles::Profile::ALL
        .iter()
        .map(|p| p.as_str())
        .collect();
    format!(
        "Usage: handnode tools [--profile PROFILE] [--json]

The local tools this binary serves, in listing order: name, class (observe, act, shell) and
the fixed profiles that hold it. Read lists and counts from here instead of writing them down.

Flags:
  --profile PROFILE  Only the tools PROFILE allows ({}).
  --json             One JSON object: {{\"tools\":[{{\"name\",\"class\",\"profiles\":[...]}}]}}.
",
        names.join(", ")
    )
}

/// argv after `tools` → [`ToolsArgs`]; errors say what to fix (exit 2).
pub fn parse(rest: &[String]) -> Result<ToolsArgs, Error> {
    let mut args = ToolsArgs::default();
    let mut it = rest.iter();
    while let Some(arg) = it.next() {
        let (flag, inline) = match arg.split_once('=') {
            Some((flag, value)) if flag.starts_with("--") => (flag, Some(value.to_string())),
            _ => (arg.as_str(), None),
        };
        match flag {
            "--json" if inline.is_none() => args.json = true,
            "--profile" => {
                let value = match inline.or_else(|| it.next().cloned()) {
                    Some(value) => value,
                    None => return Err(usage("--profile needs a value")),
                };
                let profile = value
                    .parse::<Profile>()
                    .map_err(|e| usage(&format!("--profile: {e}")))?;
                args.profile = Some(profile);
            }
            other => return Err(usage(&format!("unexpected argument '{other}'"))),
        }
    }
    Ok(args)
}

fn usage(message: &str) -> Error {
    Error::Config(format!("tools: {message} (see handnode tools --help)"))
}

/// The tools `args` selects from `tools`, in listing order.
fn selected<'a>(tools: &'a [&'a Tool], args: &'a ToolsArgs) -> impl Iterator<Item = &'a Tool> {
    tools
        .iter()
        .copied()
        .filter(move |t| args.profile.is_none_or(|p| t.allowed_in(p)))
}

/// The listing of `tools` (the registry, or a test's own) as `handnode tools` prints it.
pub fn render(tools: &[&Tool], args: &ToolsArgs) -> String {
    if args.json {
        let list: Vec<Value> = selected(tools, args)
            .map(|t| {
                json!({
                    "name": t.name,
                    "class": t.class.as_str(),
                    "profiles": t.profiles.iter().map(|p| p.as_str()).collect::<Vec<_>>(),
                })
            })
            .collect();
        return format!("{}\n", json!({ "tools": list }));
    }
    let mut out = String::new();
    for t in selected(tools, args) {
        let profiles: Vec<&str> = t.profiles.iter().map(|p| p.as_str()).collect();
        out.push_str(&format!(
            "{}\t{}\t{}\n",
            t.name,
            t.class.as_str(),
            profiles.join(",")
        ));
    }
    out
}

/// Run `handnode tools`: print the registry's listing, exit 0.
pub fn main(args: &ToolsArgs) -> i32 {
    print!("{}", render(crate::tools::registered(), args));
    0
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(words: &[&str]) -> Result<ToolsArgs, Error> {
        parse(&words.iter().map(|w| w.to_string()).collect::<Vec<_>>())
    }

    #[test]
    fn flags_parse_and_bad_ones_say_what_to_fix() {
        assert_eq!(args(&[]).unwrap(), ToolsArgs::default());
        assert_eq!(
            args(&["--profile", "observe", "--json"]).unwrap(),
            ToolsArgs {
                profile: Some(Profile::Observe),
                json: true
            }
        );
        assert_eq!(
            args(&["--profile=desktop"]).unwrap().profile,
            Some(Profile::Desktop)
        );
        for bad in [
            &["--profile"][..],
            &["--profile", "nope"],
            &["--jsn"],
            &["extra"],
            &["--json=1"],
        ] {
            let err = args(bad).unwrap_err().to_string();
            assert!(err.contains("tools: "), "{bad:?}: {err}");
        }
    }

    #[test]
    fn the_listing_is_the_registry_in_order() {
        let all: Value =
            serde_json::from_str(&render(crate::tools::TOOLS, &args(&["--json"]).unwrap()))
                .unwrap();
        let names: Vec<&str> = all["tools"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| t["name"].as_str().unwrap())
            .collect();
        let want: Vec<&str> = crate::tools::TOOLS.iter().map(|t| t.name).collect();
        assert_eq!(names, want);
        for profile in Profile::ALL {
            let text = render(
                crate::tools::TOOLS,
                &ToolsArgs {
                    profile: Some(profile),
                    json: false,
                },
            );
            let listed: Vec<&str> = text
                .lines()
                .map(|l| l.split('\t').next().unwrap())
                .collect();
            assert_eq!(listed, crate::tools::names(profile), "{profile}");
        }
    }

    /// A tool added to the registry is listed with its class and profiles, with no edit
    /// here (`tools::tests` checks the rest of its way).
    #[test]
    fn a_scratch_tool_is_listed() {
        static SCRATCH: Tool = Tool {
            name: "scratch_tool",
            class: crate::profiles::Class::Act,
            class_reason: "a test's",
            description: "A test's tool.",
            input_schema: || json!({"type": "object"}),
            output_schema: None,
            start: |_, _, _| {},
            inline: None,
            needs: crate::tools::Needs::Nothing,
            reach: crate::tools::Reach::Nothing,
            changes_screen: false,
            profiles: &[Profile::Desktop],
        };
        crate::tools::with_scratch_tools(&[&SCRATCH], || {
            let text = render(
                crate::tools::registered(),
                &ToolsArgs {
                    profile: Some(Profile::Desktop),
                    json: false,
                },
            );
            assert!(text.ends_with("scratch_tool\tact\tdesktop\n"), "{text}");
            let observe = render(
                crate::tools::registered(),
                &ToolsArgs {
                    profile: Some(Profile::Observe),
                    json: true,
                },
            );
            assert!(!observe.contains("scratch_tool"), "{observe}");
        });
    }
}
