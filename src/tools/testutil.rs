//! Helpers shared by the unit tests of the tool modules.
use std::sync::Arc;
use std::time::Duration;

use serde_json::Value;

use crate::pool::{CallCtl, Completion};
use crate::tools::policy::ToolPolicy;
use crate::tools::{CallContext, CallLimits, ToolConfig, ToolHost};
use crate::wire::mcp::ToolOutput;

/// Every blocking wait in these tests fails after this long instead of hanging.
pub const WATCHDOG: Duration = Duration::from_secs(30);

pub fn host() -> Arc<ToolHost> {
    // An empty display environment: unit tests never reach a real display.
    ToolHost::new(ToolConfig {
        display_env: Some(Default::default()),
        ..ToolConfig::default()
    })
    .unwrap()
}

pub fn cx(host: &Arc<ToolHost>, limits: CallLimits, ctl: Arc<CallCtl>) -> CallContext {
    CallContext {
        policy: ToolPolicy::owner(),
        grant: None,
        limits,
        ctl,
        host: Arc::clone(host),
        principal: "test".into(),
    }
}

/// A completion and the channel its output arrives on.
pub fn completion() -> (Completion, crossbeam_channel::Receiver<ToolOutput>) {
    let (tx, rx) = crossbeam_channel::bounded(1);
    (Completion::new(move |out| tx.send(out).unwrap()), rx)
}

/// The result object of an output that must be a `CallToolResult` (produced now if it
/// was to be produced later, parsed if it was already encoded), with the streams of its
/// text block also in `structuredContent.stdout`/`stderr`, sliced by their ranges as a
/// structured client would (on the wire they are in the text only, §15).
pub fn result(out: ToolOutput) -> Value {
    let mut v = match out {
        ToolOutput::Result(v) => v,
        ToolOutput::Later(later) => return result(later.run()),
        ToolOutput::Encoded { json, .. } => serde_json::from_str(&json).unwrap(),
        ToolOutput::Json { json, .. } => serde_json::from_str(&json).unwrap(),
        other => panic!("expected a result, got {other:?}"),
    };
    let text = v["content"][0]["text"].as_str().unwrap_or("").to_string();
    if let Some(sc) = v
        .get_mut("structuredContent")
        .and_then(Value::as_object_mut)
    {
        for name in ["stdout", "stderr"] {
            let range = sc.get(&format!("{name}_range")).and_then(Value::as_array);
            if let Some([a, b]) = range.map(Vec::as_slice) {
                let (a, b) = (a.as_u64().unwrap() as usize, b.as_u64().unwrap() as usize);
                sc.insert(name.to_string(), Value::String(text[a..b].to_string()));
            }
        }
    }
    v
}

/// Whether `value` conforms to `schema`, for the JSON Schema keywords the tools' output
/// schemas use (`type`, `properties`, `required`, `items`, `enum`, `minimum`): the check
/// that a tool's `structuredContent` matches its declared `outputSchema` (MCP server/tools
/// "Output Schema": servers MUST provide structured results that conform). An error names
/// the path that does not.
pub fn conforms(schema: &Value, value: &Value) -> Result<(), String> {
    conforms_at(schema, value, "$")
}

fn conforms_at(schema: &Value, value: &Value, path: &str) -> Result<(), String> {
    let type_ok = |t: &str| match t {
        "object" => value.is_object(),
        "array" => value.is_array(),
        "string" => value.is_string(),
        "integer" => value.is_i64() || value.is_u64(),
        "number" => value.is_number(),
        "boolean" => value.is_boolean(),
        "null" => value.is_null(),
        other => panic!("{path}: the checker does not know type {other}"),
    };
    match &schema["type"] {
        Value::String(t) if !type_ok(t) => return Err(format!("{path}: {value} is not {t}")),
        Value::Array(ts) if !ts.iter().filter_map(Value::as_str).any(type_ok) => {
            return Err(format!("{path}: {value} is none of {ts:?}"))
        }
        _ => {}
    }
    if let Some(options) = schema["enum"].as_array() {
        if !options.contains(value) {
            return Err(format!("{path}: {value} is not one of {options:?}"));
        }
    }
    if let (Some(min), Some(n)) = (schema["minimum"].as_f64(), value.as_f64()) {
        if n < min {
            return Err(format!("{path}: {n} < {min}"));
        }
    }
    if let Value::Object(map) = value {
        for name in schema["required"].as_array().into_iter().flatten() {
            let name = name.as_str().unwrap_or_default();
            if !map.contains_key(name) {
                return Err(format!("{path}: required {name} is missing"));
            }
        }
        if let Some(props) = schema["properties"].as_object() {
            for (name, sub) in props {
                if let Some(v) = map.get(name) {
                    conforms_at(sub, v, &format!("{path}.{name}"))?;
                }
            }
        }
    }
    if let (Value::Array(items), Some(sub)) = (value, schema.get("items")) {
        for (i, v) in items.iter().enumerate() {
            conforms_at(sub, v, &format!("{path}[{i}]"))?;
        }
    }
    Ok(())
}
