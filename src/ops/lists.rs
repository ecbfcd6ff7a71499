//! The registry's lists of tool names, by key, written as prose (contract §26): what the
//! generated spans of the docs ([`super::docgen`]) and the `{gen:KEY}` placeholders of help
//! texts ([`expand`]) print, so a tool added to the registry is named wherever its kind is.
//!
//! A key is a list, optionally followed by words that say how to write it:
//! - lists: `profile:NAME` (the tools a profile allows), `paths` (the tools that take a
//!   path), `class:CLASS` (by their unconfined class), `drives` (what the wheel refuses:
//!   the tools that change what a screen shows), `display` (the tools that need a display,
//!   so start an own one), `processes` (the tools that start processes the agent chooses),
//!   `jobs` (the job tools), `tasks` (the job tools the tasks extension maps onto), `screen`
//!   (the three desktop tools), `structured` (the tools whose results carry
//!   `structuredContent`), `all`;
//! - words: `plain` (no backticks), `or` (joined with "or"), `slash` (`a`/`b`), `js` (a
//!   single-quoted JavaScript string), `count` (how many).

use std::borrow::Cow;

use crate::base::text::sentence_list;
use crate::profiles::{Class, Profile};
use crate::tools::{self, Needs, Reach, Tool};

/// The tools a list key names, in listing order; `None` for a key that is not a list.
pub fn list(key: &str) -> Option<Vec<&'static str>> {
    let pick = |keep: &dyn Fn(&Tool) -> bool| -> Vec<&'static str> {
        tools::registered()
            .iter()
            .filter(|t| keep(t))
            .map(|t| t.name)
            .collect()
    };
    if let Some(name) = key.strip_prefix("profile:") {
        let profile = name.parse::<Profile>().ok()?;
        return Some(pick(&|t| t.allowed_in(profile)));
    }
    if let Some(name) = key.strip_prefix("class:") {
        let class = Class::ALL.into_iter().find(|c| c.as_str() == name)?;
        return Some(pick(&|t| t.class == class));
    }
    Some(match key {
        "all" => pick(&|_| true),
        "paths" => tools::paths::tools(),
        "drives" => pick(&|t| t.changes_screen),
        "display" => pick(&|t| matches!(t.needs, Needs::Display(_))),
        "processes" => pick(&|t| t.reach == Reach::Processes),
        "jobs" => tools::jobs::job_tools::TOOLS
            .iter()
            .map(|t| t.name)
            .collect(),
        "tasks" => tools::jobs::job_tools::TASK_TOOLS
            .iter()
            .map(|t| t.name)
            .collect(),
        "screen" => tools::display::SCREEN_TOOLS
            .iter()
            .map(|t| t.name)
            .collect(),
        "structured" => pick(&|t| t.output_schema.is_some()),
        _ => return None,
    })
}

/// A list's text for `spec` (a list key and its words), or what is wrong with `spec`.
pub fn render(spec: &str) -> Result<String, String> {
    let mut words = spec.split_whitespace();
    let key = words.next().ok_or("an empty gen key")?;
    let names = list(key)
        .ok_or_else(|| format!("unknown gen key {key:?} (the keys are in src/ops/lists.rs)"))?;
    let (mut code, mut conj, mut slash, mut js, mut count) = (true, "and", false, false, false);
    for word in words {
        match word {
            "plain" => code = false,
            "or" => conj = "or",
            "slash" => slash = true,
            "js" => (code, js) = (false, true),
            "count" => count = true,
            other => return Err(format!("unknown gen word {other:?} in {spec:?}")),
        }
    }
    if count {
        return Ok(names.len().to_string());
    }
    let items: Vec<String> = names
        .iter()
        .map(|n| {
            if code {
                format!("`{n}`")
            } else {
                n.to_string()
            }
        })
        .collect();
    let text = if slash {
        items.join("/")
    } else {
        sentence_list(&items, conj)
    };
    Ok(if js { format!("'{text}'") } else { text })
}

/// `{gen:KEY …}` placeholders in `text` (help texts) replaced by [`render`]; a placeholder
/// that does not render is left as it is, which `tests/generated.rs` catches.
pub fn expand(text: &str) -> Cow<'_, str> {
    if !text.contains("{gen:") {
        return Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len() + 64);
    let mut rest = text;
    while let Some(start) = rest.find("{gen:") {
        out.push_str(&rest[..start]);
        let after = &rest[start + "{gen:".len()..];
        match after.find('}').map(|end| (end, render(&after[..end]))) {
            Some((end, Ok(rendered))) => {
                out.push_str(&rendered);
                rest = &after[end + 1..];
            }
            _ => {
                out.push_str("{gen:");
                rest = after;
            }
        }
    }
    out.push_str(rest);
    Cow::Owned(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The registry's tools that `keep` picks, in listing order: what a key must list.
    fn picked(keep: impl Fn(&Tool) -> bool) -> Vec<&'static str> {
        tools::registered()
            .iter()
            .filter(|t| keep(t))
            .map(|t| t.name)
            .collect()
    }

    #[test]
    fn lists_follow_the_registry() {
        let paths = list("paths").unwrap();
        assert!(paths.contains(&"file_get"), "{paths:?}");
        assert_eq!(paths, picked(|t| !t.takes_path().is_empty()));
        let drives = list("drives").unwrap();
        assert!(drives.contains(&"mouse") && !drives.contains(&"screenshot"));
        assert_eq!(drives, picked(|t| t.changes_screen));
        assert_eq!(
            list("profile:observe").unwrap(),
            tools::names(Profile::Observe)
        );
        assert_eq!(
            list("class:shell").unwrap(),
            picked(|t| t.class == Class::Shell)
        );
        assert_eq!(list("all").unwrap().len(), tools::registered().len());
        assert_eq!(list("profile:nope"), None);
        assert_eq!(list("class:nope"), None);
        assert_eq!(list("nope"), None);
    }

    #[test]
    fn words_say_how_a_list_is_written() {
        let paths = list("paths").unwrap();
        assert!(paths.len() >= 3);
        let quoted: Vec<String> = paths.iter().map(|n| format!("`{n}`")).collect();
        assert_eq!(render("paths").unwrap(), sentence_list(&quoted, "and"));
        assert!(render("paths").unwrap().starts_with("`file_get`, "));
        assert_eq!(
            render("paths plain or").unwrap(),
            sentence_list(&paths, "or")
        );
        assert_eq!(render("paths slash").unwrap(), quoted.join("/"));
        assert_eq!(
            render("paths js").unwrap(),
            format!("'{}'", sentence_list(&paths, "and"))
        );
        assert_eq!(render("paths count").unwrap(), paths.len().to_string());
        assert!(render("paths loud").unwrap_err().contains("loud"));
        assert!(render("").is_err());
    }

    #[test]
    fn placeholders_expand_and_a_bad_one_stays_visible() {
        assert_eq!(expand("no placeholder"), "no placeholder");
        assert_eq!(
            expand("tools {gen:paths plain}: beneath"),
            format!("tools {}: beneath", render("paths plain").unwrap())
        );
        assert_eq!(expand("{gen:nope} and {gen:"), "{gen:nope} and {gen:");
    }
}
