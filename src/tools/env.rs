//! What a tool's child process inherits: the one environment cleaner `bash` and the
//! display helpers both use, so no child of any tool sees the daemon's secrets.
//!
//! From the daemon's environment it removes every `HANDNODE_*` name,
//! `CREDENTIALS_DIRECTORY`, every name in `ToolConfig::scrub_env`, and every variable whose
//! value equals one of `ToolConfig::scrub_values` (the daemon's secrets). Then the caller's
//! own names are unset and set as given, *including* names that were scrubbed: scrubbing
//! keeps the daemon's own secrets from being inherited, and a value the caller passes
//! explicitly is the caller's own, so it cannot leak anything the caller does not already
//! hold.

use std::ffi::{OsStr, OsString};

use super::ToolConfig;

/// Whether an inherited variable name is withheld from children.
fn scrubbed_name(name: &OsStr, cfg: &ToolConfig) -> bool {
    // A name that is not UTF-8 cannot equal any configured name.
    let Some(name) = name.to_str() else {
        return false;
    };
    name.starts_with("HANDNODE_")
        || name == "CREDENTIALS_DIRECTORY"
        || cfg.scrub_env.iter().any(|s| s == name)
}

/// Whether an inherited value is one of the daemon's secrets.
fn secret_value(value: &OsStr, cfg: &ToolConfig) -> bool {
    let Some(value) = value.to_str() else {
        return false;
    };
    cfg.scrub_values
        .iter()
        .any(|s| !s.is_empty() && s.matches(value))
}

/// A child's environment: `base` (the daemon's, `std::env::vars_os()`) minus the scrubbed
/// names and secret values and minus `unset`, then `set` applied over it in order.
pub fn child_env(
    base: impl IntoIterator<Item = (OsString, OsString)>,
    cfg: &ToolConfig,
    unset: &[&str],
    set: &[(String, String)],
) -> Vec<(OsString, OsString)> {
    let mut env: Vec<(OsString, OsString)> = base
        .into_iter()
        .filter(|(name, value)| {
            !scrubbed_name(name, cfg)
                && !secret_value(value, cfg)
                && !unset.iter().any(|u| name.as_os_str() == OsStr::new(u))
        })
        .collect();
    for (name, value) in set {
        env.retain(|(n, _)| n.as_os_str() != OsStr::new(name));
        env.push((name.into(), value.into()));
    }
    env
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::base::secret::Secret;
    use std::os::unix::ffi::OsStringExt;

    #[test]
    fn unset_names_go_even_when_nothing_replaces_them() {
        let base = [("DISPLAY", ":0"), ("WAYLAND_DISPLAY", "w"), ("KEEP", "1")]
            .map(|(k, v)| (OsString::from(k), OsString::from(v)));
        let env = child_env(
            base,
            &ToolConfig::default(),
            &["DISPLAY", "WAYLAND_DISPLAY"],
            &[("DISPLAY".into(), ":5".into())],
        );
        assert_eq!(
            env,
            [("KEEP".into(), "1".into()), ("DISPLAY".into(), ":5".into())]
        );
    }

    #[test]
    fn child_env_scrubs_secrets_and_applies_the_callers_vars() {
        let cfg = ToolConfig {
            scrub_env: vec!["SCRUB_ME".into()],
            scrub_values: vec![Secret::new("tok-123"), Secret::new("")],
            ..ToolConfig::default()
        };
        let base = [
            ("HANDNODE_TOKEN", "x"),
            ("HANDNODE_ANYTHING", "y"),
            ("CREDENTIALS_DIRECTORY", "/run/credentials/handnode"),
            ("SCRUB_ME", "z"),
            ("LEAKY", "tok-123"),
            ("NEAR_MISS", "tok-1234"),
            ("EMPTY", ""),
            ("KEEP", "1"),
            ("OVERRIDE", "old"),
        ]
        .map(|(k, v)| (OsString::from(k), OsString::from(v)));
        let odd = (
            OsString::from("BYTES"),
            OsString::from_vec(vec![0xff, 0xfe]),
        );
        let extra = vec![
            ("OVERRIDE".to_string(), "new".to_string()),
            ("HANDNODE_MINE".to_string(), "caller's own".to_string()),
        ];
        let env = child_env(base.into_iter().chain([odd.clone()]), &cfg, &[], &extra);
        let names: Vec<&str> = env.iter().map(|(k, _)| k.to_str().unwrap()).collect();
        assert_eq!(
            names,
            [
                "NEAR_MISS",
                "EMPTY",
                "KEEP",
                "BYTES",
                "OVERRIDE",
                "HANDNODE_MINE"
            ]
        );
        assert!(env.contains(&odd));
        assert!(env.contains(&("OVERRIDE".into(), "new".into())));
    }
}
