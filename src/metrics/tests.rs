//! Unit tests of `metrics`.

use super::*;
use std::collections::{HashMap, HashSet};

/// One parsed sample: name, labels, value.
type Sample = (String, Vec<(String, String)>, u64);

/// A strict reader of the subset of the text format we emit: every sample belongs to a
/// family announced by `# HELP` then `# TYPE` just before its samples, names and label
/// names are `[a-zA-Z_][a-zA-Z0-9_]*`, label values use only the three escapes.
fn parse(text: &str) -> Vec<Sample> {
    fn is_name(s: &str) -> bool {
        let mut cs = s.chars();
        matches!(cs.next(), Some(c) if c.is_ascii_alphabetic() || c == '_')
            && cs.all(|c| c.is_ascii_alphanumeric() || c == '_')
    }
    assert!(text.ends_with('\n'));
    let mut samples = Vec::new();
    let mut current: Option<String> = None;
    let mut typed: HashSet<String> = HashSet::new();
    let mut pending_help: Option<String> = None;
    for line in text.lines() {
        if let Some(rest) = line.strip_prefix("# HELP ") {
            let (name, help) = rest.split_once(' ').expect("HELP has text");
            assert!(is_name(name) && !help.is_empty(), "{line}");
            pending_help = Some(name.to_string());
            continue;
        }
        if let Some(rest) = line.strip_prefix("# TYPE ") {
            let (name, kind) = rest.split_once(' ').expect("TYPE has a kind");
            assert_eq!(
                pending_help.take().as_deref(),
                Some(name),
                "TYPE without HELP: {line}"
            );
            assert!(kind == "counter" || kind == "gauge", "{line}");
            assert!(
                typed.insert(name.to_string()),
                "family announced twice: {name}"
            );
            if kind == "counter" {
                assert!(name.ends_with("_total"), "{name}");
            }
            current = Some(name.to_string());
            continue;
        }
        assert!(
            !line.starts_with('#') && !line.is_empty(),
            "stray line: {line:?}"
        );
        let (series, value) = line.rsplit_once(' ').expect("sample has a value");
        let value: u64 = value.parse().expect("integer value");
        let (name, labels) = match series.split_once('{') {
            None => (series, Vec::new()),
            Some((name, rest)) => {
                let body = rest.strip_suffix('}').expect("labels close");
                let mut labels = Vec::new();
                let mut chars = body.chars().peekable();
                while chars.peek().is_some() {
                    let key: String = chars.by_ref().take_while(|&c| c != '=').collect();
                    assert!(is_name(&key), "{line}");
                    assert_eq!(chars.next(), Some('"'), "{line}");
                    let mut val = String::new();
                    loop {
                        match chars.next().expect("unterminated label value") {
                            '"' => break,
                            '\\' => match chars.next() {
                                Some('\\') => val.push('\\'),
                                Some('"') => val.push('"'),
                                Some('n') => val.push('\n'),
                                other => panic!("bad escape {other:?} in {line}"),
                            },
                            '\n' => panic!("raw newline"),
                            c => val.push(c),
                        }
                    }
                    labels.push((key, val));
                    match chars.next() {
                        None => break,
                        Some(',') => {}
                        Some(c) => panic!("unexpected {c:?} in {line}"),
                    }
                }
                (name, labels)
            }
        };
        assert_eq!(
            current.as_deref(),
            Some(name),
            "sample outside its family: {line}"
        );
        samples.push((name.to_string(), labels, value));
    }
    samples
}

fn value(samples: &[Sample], name: &str, labels: &[(&str, &str)]) -> Option<u64> {
    samples
        .iter()
        .find(|(n, l, _)| {
            n == name
                && l.len() == labels.len()
                && l.iter()
                    .zip(labels)
                    .all(|((k, v), (k2, v2))| k == k2 && v == v2)
        })
        .map(|(_, _, v)| *v)
}

#[test]
fn empty_metrics_render_every_family_and_zero_states() {
    let m = Metrics::new();
    let samples = parse(&m.render::<&str>(&[], 0));
    for state in GRANT_STATES {
        assert_eq!(
            value(&samples, "handnode_grants", &[("state", state)]),
            Some(0)
        );
    }
    for name in [
        "handnode_dials_total",
        "handnode_dial_failures_total",
        "handnode_bytes_in_total",
        "handnode_bytes_out_total",
        "handnode_auth_denied_total",
        "handnode_auth_throttled_total",
    ] {
        assert_eq!(value(&samples, name, &[]), Some(0), "{name}");
    }
    let text = m.render::<&str>(&[], 0);
    for site in ["tool", "grant", "admin", "audit"] {
        assert!(value(&samples, "handnode_panics_total", &[("site", site)]).is_some());
    }
    for family in [
        "handnode_closes_total",
        "handnode_tool_calls_total",
        "handnode_grant_state",
    ] {
        assert!(text.contains(&format!("# TYPE {family} ")), "{family}");
    }
}

#[test]
fn counts_are_rendered() {
    let m = Metrics::new();
    m.dial();
    m.dial();
    m.dial_failed();
    m.close(1000);
    m.close(1000);
    m.close(4001);
    m.tool_call("bash", Outcome::Ok);
    m.tool_call("bash", Outcome::ToolError);
    m.tool_call("bash", Outcome::Ok);
    m.bytes_in(10);
    m.bytes_out(7);
    m.bytes_out(1);
    m.auth_denied();
    m.throttled();
    let grants = vec![
        ("g1".to_string(), "attached"),
        ("g2".to_string(), "attached"),
        ("g3".to_string(), "ended"),
    ];
    let s = parse(&m.render(&grants, 1));
    assert_eq!(value(&s, "handnode_own_displays_running", &[]), Some(1));
    assert_eq!(
        value(&s, "handnode_grants", &[("state", "attached")]),
        Some(2)
    );
    assert_eq!(value(&s, "handnode_grants", &[("state", "ended")]), Some(1));
    assert_eq!(value(&s, "handnode_grants", &[("state", "idle")]), Some(0));
    assert_eq!(
        value(
            &s,
            "handnode_grant_state",
            &[("grant", "g3"), ("state", "ended")]
        ),
        Some(1)
    );
    assert_eq!(value(&s, "handnode_dials_total", &[]), Some(2));
    assert_eq!(value(&s, "handnode_dial_failures_total", &[]), Some(1));
    assert_eq!(
        value(&s, "handnode_closes_total", &[("code", "1000")]),
        Some(2)
    );
    assert_eq!(
        value(&s, "handnode_closes_total", &[("code", "4001")]),
        Some(1)
    );
    assert_eq!(
        value(
            &s,
            "handnode_tool_calls_total",
            &[("tool", "bash"), ("outcome", "ok")]
        ),
        Some(2)
    );
    assert_eq!(
        value(
            &s,
            "handnode_tool_calls_total",
            &[("tool", "bash"), ("outcome", "tool_error")]
        ),
        Some(1)
    );
    assert_eq!(value(&s, "handnode_bytes_in_total", &[]), Some(10));
    assert_eq!(value(&s, "handnode_bytes_out_total", &[]), Some(8));
    assert_eq!(value(&s, "handnode_auth_denied_total", &[]), Some(1));
    assert_eq!(value(&s, "handnode_auth_throttled_total", &[]), Some(1));
}

#[test]
fn label_values_are_escaped() {
    assert_eq!(escape_label(r#"a\b"c"#), r#"a\\b\"c"#);
    assert_eq!(escape_label("x\ny"), "x\\ny");
    let m = Metrics::new();
    let nasty = "evil\"} 1\nhandnode_dials_total 999\\";
    m.tool_call(nasty, Outcome::Denied);
    let text = m.render(&[(nasty, "attached")], 0);
    let s = parse(&text);
    // The hostile name comes back as its label (the line feed escaped) and injects no
    // sample; quotes and backslashes survive the label and are escaped by the format.
    assert_eq!(value(&s, "handnode_dials_total", &[]), Some(0));
    let label = label::name(nasty);
    assert!(label.starts_with("evil\"} 1\\u{a}handnode"), "{label}");
    assert_eq!(
        value(
            &s,
            "handnode_tool_calls_total",
            &[("tool", &label), ("outcome", "denied")]
        ),
        Some(1)
    );
    assert_eq!(
        value(
            &s,
            "handnode_grant_state",
            &[("grant", nasty), ("state", "attached")]
        ),
        Some(1)
    );
}

#[test]
fn extra_tool_labels_are_bounded() {
    let m = Metrics::new();
    for i in 0..MAX_EXTRA_TOOL_LABELS {
        m.tool_call(&format!("up_{i}"), Outcome::Ok);
    }
    // bound + 1 goes to `other`; names already labelled and known tools keep theirs.
    m.tool_call("one_too_many", Outcome::Ok);
    m.tool_call("up_0", Outcome::RpcError);
    m.tool_call("browser_click", Outcome::Ok);
    m.tool_call("sys_info", Outcome::Ok);
    let s = parse(&m.render::<&str>(&[], 0));
    let tools: HashSet<&str> = s
        .iter()
        .filter(|(n, _, _)| n == "handnode_tool_calls_total")
        .map(|(_, l, _)| l[0].1.as_str())
        .collect();
    assert_eq!(tools.len(), MAX_EXTRA_TOOL_LABELS + 3);
    assert!(!tools.contains("one_too_many"));
    assert_eq!(
        value(
            &s,
            "handnode_tool_calls_total",
            &[("tool", "other"), ("outcome", "ok")]
        ),
        Some(1)
    );
    assert_eq!(
        value(
            &s,
            "handnode_tool_calls_total",
            &[("tool", "up_0"), ("outcome", "rpc_error")]
        ),
        Some(1)
    );
    assert_eq!(
        value(
            &s,
            "handnode_tool_calls_total",
            &[("tool", "browser_click"), ("outcome", "ok")]
        ),
        Some(1)
    );
}

#[test]
fn a_flood_of_distinct_long_names_keeps_the_text_small() {
    let m = Metrics::new();
    for i in 0..1_000 {
        let name = format!("{i}{}", "\u{1b}x".repeat(4096));
        m.tool_call(&name, Outcome::RpcError);
        m.tool_call(&name, Outcome::Denied);
    }
    let text = m.render::<&str>(&[], 0);
    assert!(text.len() < 64 << 10, "{} bytes", text.len());
    let s = parse(&text);
    for (name, labels, _) in &s {
        if name == "handnode_tool_calls_total" {
            let tool = &labels[0].1;
            assert!(
                tool.len() <= label::max_len(label::MAX_NAME_BYTES),
                "{tool}"
            );
            assert!(!tool.contains('\u{1b}'), "{tool:?}");
        }
    }
    assert_eq!(
        value(
            &s,
            "handnode_tool_calls_total",
            &[("tool", "other"), ("outcome", "denied")]
        ),
        Some(1_000 - MAX_EXTRA_TOOL_LABELS as u64)
    );
}

#[test]
fn close_code_labels_are_bounded() {
    let m = Metrics::new();
    for code in 4000..4000 + MAX_CLOSE_CODE_LABELS as u16 {
        m.close(code);
    }
    m.close(1000); // bound + 1
    m.close(4000);
    let s = parse(&m.render::<&str>(&[], 0));
    let codes: HashMap<&str, u64> = s
        .iter()
        .filter(|(n, _, _)| n == "handnode_closes_total")
        .map(|(_, l, v)| (l[0].1.as_str(), *v))
        .collect();
    assert_eq!(codes.len(), MAX_CLOSE_CODE_LABELS + 1);
    assert_eq!(codes.get("other"), Some(&1));
    assert_eq!(codes.get("4000"), Some(&2));
    assert!(!codes.contains_key("1000"));
}

#[test]
fn concurrent_counting_loses_nothing() {
    let m = std::sync::Arc::new(Metrics::new());
    let threads: Vec<_> = (0..4)
        .map(|_| {
            let m = std::sync::Arc::clone(&m);
            std::thread::spawn(move || {
                for _ in 0..1000 {
                    m.dial();
                    m.tool_call("bash", Outcome::Ok);
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    let s = parse(&m.render::<&str>(&[], 0));
    assert_eq!(value(&s, "handnode_dials_total", &[]), Some(4000));
    assert_eq!(
        value(
            &s,
            "handnode_tool_calls_total",
            &[("tool", "bash"), ("outcome", "ok")]
        ),
        Some(4000)
    );
}
