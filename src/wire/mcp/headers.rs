//! The `/mcp` request headers a 2026-07-28 request must carry (`MCP-Protocol-Version`,
//! `Mcp-Method`, `Mcp-Name`): checked against the body as the spec says, values decoded.

use super::*;

/// 2026-07-28 transports/streamable-http "Standard Request Headers" and "Server
/// Validation": `Mcp-Method` always, `Mcp-Name` for `tools/call`, `resources/read` and
/// `prompts/get`, each equal to the body's value (surrounding whitespace is not part of
/// an HTTP field value; `Mcp-Name` may be in the Base64 sentinel form).
pub(super) fn check_standard_headers(
    headers: &HttpHeaders<'_>,
    method: &str,
    params: Option<&RawValue>,
) -> Result<(), String> {
    match headers.method.map(str::trim) {
        None => return Err("the Mcp-Method header is required".into()),
        Some(m) if m != method => {
            return Err(format!(
                "Mcp-Method header value '{m}' does not match body value '{method}'"
            ))
        }
        Some(_) => {}
    }
    let source = match method {
        "tools/call" | "prompts/get" => "name",
        "resources/read" => "uri",
        _ => return Ok(()),
    };
    let body = member(params, source).map(raw::shallow);
    let Some(body) = body.as_ref().and_then(Value::as_str) else {
        // No value to mirror: the method's own checks answer the malformed request.
        return Ok(());
    };
    let Some(header) = headers.name.map(str::trim) else {
        return Err(format!(
            "the Mcp-Name header is required for {method} (body value '{body}')"
        ));
    };
    let decoded = decode_header_value(header)?;
    if decoded != body {
        return Err(format!(
            "Mcp-Name header value '{header}' does not match body value '{body}'"
        ));
    }
    Ok(())
}

/// A header value in the Base64 sentinel form `=?base64?…?=` decoded, any other value as
/// is (2026-07-28 transports/streamable-http "Value Encoding"); a malformed encoding is an
/// error.
pub(super) fn decode_header_value(value: &str) -> Result<String, String> {
    use base64::Engine as _;
    let Some(encoded) = value
        .strip_prefix("=?base64?")
        .and_then(|v| v.strip_suffix("?="))
    else {
        return Ok(value.to_string());
    };
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(encoded)
        .map_err(|e| format!("header value '{value}' is not valid Base64: {e}"))?;
    String::from_utf8(bytes).map_err(|_| format!("header value '{value}' is not UTF-8"))
}
