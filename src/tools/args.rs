//! Reading a tool call's arguments: the one arguments-object helper and the one bounded-integer
//! parser every tool uses, so `null` is read, and a bound is checked and refused, the same way
//! everywhere.

use std::ops::RangeInclusive;
use std::sync::OnceLock;

use serde_json::{Map, Value};

/// How a tool's messages name a field: `bash` writes `timeout_secs`, the display tools
/// `` `x` ``. Each tool keeps one style for all its messages.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Naming {
    Plain,
    Code,
}

impl Naming {
    fn name(self, key: &str) -> String {
        match self {
            Naming::Plain => key.to_string(),
            Naming::Code => format!("`{key}`"),
        }
    }
}

/// A call's arguments as an object. `null` is no arguments (an empty object), as the MCP
/// dispatcher already treats `"arguments": null`, so a tool behaves the same whichever way
/// its caller (a pod, `/mcp`, a test) says "none"; any other non-object is refused.
pub fn object(args: &Value) -> Result<&Map<String, Value>, String> {
    static NONE: OnceLock<Map<String, Value>> = OnceLock::new();
    match args {
        Value::Object(map) => Ok(map),
        Value::Null => Ok(NONE.get_or_init(Map::new)),
        _ => Err("arguments must be an object".into()),
    }
}

/// An optional integer field within `range`: `None` when absent or `null`. Anything else
/// that is not an integer in range (a float, a string, one past either end) is refused
/// with a message naming the field and the range, then `why` the range is what it is.
pub fn int(
    map: &Map<String, Value>,
    key: &str,
    range: RangeInclusive<i64>,
    naming: Naming,
    why: Option<&str>,
) -> Result<Option<i64>, String> {
    match map.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(v) => match v.as_i64() {
            Some(n) if range.contains(&n) => Ok(Some(n)),
            _ => Err(format!(
                "{} must be an integer in {}..={}{}",
                naming.name(key),
                range.start(),
                range.end(),
                why.map(|w| format!(" ({w})")).unwrap_or_default()
            )),
        },
    }
}

/// [`int`] for a field that must be present.
pub fn required_int(
    map: &Map<String, Value>,
    key: &str,
    range: RangeInclusive<i64>,
    naming: Naming,
) -> Result<i64, String> {
    int(map, key, range, naming, None)?.ok_or_else(|| format!("{} is required", naming.name(key)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn map(v: Value) -> Map<String, Value> {
        v.as_object().unwrap().clone()
    }

    /// `null` is no arguments for every tool (as the dispatcher reads `"arguments": null`);
    /// every other non-object is refused with one message.
    #[test]
    fn null_is_no_arguments_and_other_non_objects_are_refused() {
        assert_eq!(object(&Value::Null), Ok(&Map::new()));
        let given = json!({"a": 1});
        assert_eq!(object(&given), Ok(given.as_object().unwrap()));
        for bad in [json!([]), json!([1]), json!("{}"), json!(0), json!(false)] {
            assert_eq!(
                object(&bad),
                Err("arguments must be an object".to_string()),
                "{bad}"
            );
        }
    }

    #[test]
    fn both_ends_are_in_and_one_past_each_is_out() {
        let m = map(json!({"lo": -3, "hi": 7, "under": -4, "over": 8}));
        assert_eq!(int(&m, "lo", -3..=7, Naming::Plain, None), Ok(Some(-3)));
        assert_eq!(int(&m, "hi", -3..=7, Naming::Plain, None), Ok(Some(7)));
        for key in ["under", "over"] {
            let err = int(&m, key, -3..=7, Naming::Plain, None).unwrap_err();
            assert_eq!(err, format!("{key} must be an integer in -3..=7"));
        }
    }

    #[test]
    fn absent_and_null_are_none_and_other_shapes_are_refused() {
        let m = map(json!({"n": null, "f": 1.5, "s": "5", "b": true, "big": u64::MAX}));
        assert_eq!(int(&m, "missing", 0..=1, Naming::Code, None), Ok(None));
        assert_eq!(int(&m, "n", 0..=1, Naming::Code, None), Ok(None));
        for key in ["f", "s", "b", "big"] {
            let err = int(&m, key, 0..=9, Naming::Code, Some("why")).unwrap_err();
            assert_eq!(err, format!("`{key}` must be an integer in 0..=9 (why)"));
        }
        assert_eq!(
            required_int(&m, "missing", 0..=1, Naming::Code),
            Err("`missing` is required".into())
        );
        assert_eq!(
            required_int(&map(json!({"x": 1})), "x", 0..=1, Naming::Plain),
            Ok(1)
        );
    }
}
