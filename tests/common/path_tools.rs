//! The tools that take a path, read from the registry (`Tool::takes_path`), and a call to
//! each with a path of the test's choosing: what the confinement tests (tests/files.rs) and
//! the wall's (tests/walls.rs) attack, so a new tool that declares a path argument is
//! attacked by both with no edit to either.

use handnode::tools::Tool;
use serde_json::{json, Map, Value};

/// Every registered tool that declares a path argument.
pub fn path_tools() -> Vec<&'static Tool> {
    let tools: Vec<&'static Tool> = handnode::tools::registered()
        .iter()
        .copied()
        .filter(|t| !t.takes_path().is_empty())
        .collect();
    assert!(!tools.is_empty(), "no registered tool declares a path");
    tools
}

/// Arguments for `tool` with each declared path argument set to `path` and every other
/// required argument given a well-formed value from its schema (a string is `"eA=="`, which
/// is also base64 of one byte), so the call fails only for its path.
pub fn with_path(tool: &Tool, path: &str) -> Value {
    let schema = (tool.input_schema)();
    let mut args = Map::new();
    for field in schema["required"].as_array().into_iter().flatten() {
        let field = field.as_str().unwrap();
        let prop = &schema["properties"][field];
        let value = match prop["type"].as_str() {
            Some("string") => json!("eA=="),
            Some("integer") | Some("number") => prop.get("minimum").cloned().unwrap_or(json!(0)),
            Some("boolean") => json!(false),
            Some("array") => json!([]),
            _ => json!({}),
        };
        args.insert(field.to_string(), value);
    }
    for arg in tool.takes_path() {
        args.insert(arg.field.to_string(), json!(path));
    }
    Value::Object(args)
}
