//! How the operator CLI shows grants and held calls: state lines, tables, the full
//! arguments of a held call.

use super::*;

pub(super) fn str_field<'v>(grant: &'v Value, field: &str) -> &'v str {
    grant.get(field).and_then(Value::as_str).unwrap_or("-")
}

/// `1h 5m`, `42s`: a human's view of seconds left.
pub(super) fn human_secs(secs: u64) -> String {
    match secs {
        s if s >= 3600 => format!("{}h {}m", s / 3600, (s % 3600) / 60),
        s if s >= 60 => format!("{}m {}s", s / 60, s % 60),
        s => format!("{s}s"),
    }
}

/// A grant's state with what goes with it: `redialing in 4s (handshake 503)`, `ended: revoked`.
pub(super) fn state_line(grant: &Value) -> String {
    let mut line = state_cell(grant);
    if let Some(error) = grant.get("last_error").and_then(Value::as_str) {
        line.push_str(&format!(" (last error: {error})"));
    }
    line
}

/// Longest last error the `grants` table shows (characters); `grant ID --json` has it whole.
pub(super) const MAX_ERROR_CELL: usize = 60;

/// The state, its redial countdown and its end reason: the `grants` table's STATE column.
pub(super) fn state_cell(grant: &Value) -> String {
    let mut line = str_field(grant, "state").to_string();
    if let Some(secs) = grant.get("redial_in_secs").and_then(Value::as_u64) {
        line.push_str(&format!(" in {}", human_secs(secs)));
    }
    if let Some(reason) = grant.get("ended").and_then(Value::as_str) {
        line.push_str(&format!(": {reason}"));
    }
    line
}

/// The last error, cut to [`MAX_ERROR_CELL`] characters, or `-`.
pub(super) fn error_cell(grant: &Value) -> String {
    match grant.get("last_error").and_then(Value::as_str) {
        Some(e) if e.chars().count() > MAX_ERROR_CELL => {
            let cut: String = e.chars().take(MAX_ERROR_CELL - 1).collect();
            format!("{cut}…")
        }
        Some(e) => e.to_string(),
        None => "-".to_string(),
    }
}

/// A list field of the grant JSON, comma-separated; `None` when absent or empty.
pub(super) fn names_field(grant: &Value, field: &str) -> Option<String> {
    let names: Vec<&str> = grant
        .get(field)?
        .as_array()?
        .iter()
        .filter_map(Value::as_str)
        .collect();
    (!names.is_empty()).then(|| names.join(", "))
}

/// Whether a grant reaches the box's shell, and why: `yes (bash is a shell tool)`.
pub(super) fn shell_line(grant: &Value) -> String {
    let mut line = str_field(grant, "shell").to_string();
    if let Some(because) = grant.get("shell_because").and_then(Value::as_str) {
        line.push_str(&format!(" ({because})"));
    }
    line
}

pub(super) fn describe(grant: &Value) -> String {
    let expires_in = grant
        .get("expires_in_secs")
        .and_then(Value::as_u64)
        .map_or(String::new(), |s| format!(" (in {})", human_secs(s)));
    let mut text = format!(
        "grant {}: {}\n  session {} at {}, profile {}, principal {}\n  expires {}{}\n",
        str_field(grant, "id"),
        state_line(grant),
        str_field(grant, "session"),
        str_field(grant, "runtime"),
        str_field(grant, "profile"),
        str_field(grant, "principal"),
        str_field(grant, "expires_at"),
        expires_in,
    );
    for field in ["allow", "deny", "tools"] {
        if let Some(names) = names_field(grant, field) {
            text.push_str(&format!("  {field}: {names}\n"));
        }
    }
    // What its lists name but this box does not serve now (issue 37): said, never dropped
    // in silence.
    let unavailable: Vec<&str> = grant
        .get("unavailable")
        .and_then(Value::as_array)
        .map(|a| a.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    if !unavailable.is_empty() {
        let names = match unavailable.len() {
            n @ 5.. => format!("{n} tools ({}, …)", unavailable[..3].join(", ")),
            _ => unavailable.join(", "),
        };
        let why = str_field(grant, "unavailable_because");
        text.push_str(&format!("  not lent on this box: {names}: {why}\n"));
    }
    if let Some(folder) = grant.get("folder").and_then(Value::as_str) {
        text.push_str(&format!("  lent folder: {folder}\n"));
    }
    if grant.get("display").and_then(Value::as_str) == Some("own") {
        text.push_str("  display: its own (headless; your screen is not touched)\n");
    }
    let names = |v: Option<&Value>| match v {
        Some(Value::String(s)) => Some(s.clone()),
        Some(Value::Array(a)) if !a.is_empty() => Some(
            a.iter()
                .filter_map(Value::as_str)
                .collect::<Vec<_>>()
                .join(", "),
        ),
        _ => None,
    };
    if let Some(approve) = names(grant.get("approve")) {
        text.push_str(&format!("  each call waits for approval: {approve}\n"));
    }
    if let Some(remembered) = names(grant.get("approved_for_grant")) {
        text.push_str(&format!(
            "  allowed for the rest of the grant: {remembered}\n"
        ));
    }
    if let Some(shell) = grant.get("shell").and_then(Value::as_str) {
        let why = match (shell, grant.get("shell_because").and_then(Value::as_str)) {
            ("yes", Some(because)) => format!("yes ({because})"),
            ("gated", _) => "gated (every shell tool waits for approval)".to_string(),
            (other, _) => other.to_string(),
        };
        text.push_str(&format!("  reaches the shell: {why}\n"));
    }
    text
}

pub(super) fn print(out: &mut dyn Write, text: &str) -> Result<(), Failure> {
    match out.write_all(text.as_bytes()).and_then(|_| out.flush()) {
        // The reader stopped reading (`handnode grants | head`): nothing to report.
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(()),
        other => other.map_err(|e| Failure(format!("cannot write output: {e}"))),
    }
}

pub(super) fn pretty(value: &Value) -> String {
    format!(
        "{}\n",
        serde_json::to_string_pretty(value).unwrap_or_else(|_| value.to_string())
    )
}

/// Left-aligned columns, two spaces apart.
pub(super) fn table(rows: &[Vec<String>]) -> String {
    let columns = rows.first().map_or(0, Vec::len);
    let widths: Vec<usize> = (0..columns)
        .map(|c| rows.iter().map(|r| r[c].chars().count()).max().unwrap_or(0))
        .collect();
    let mut out = String::new();
    for row in rows {
        let mut line = String::new();
        for (c, cell) in row.iter().enumerate() {
            if c + 1 == columns {
                line.push_str(cell);
            } else {
                line.push_str(&format!("{cell:<width$}  ", width = widths[c]));
            }
        }
        out.push_str(line.trim_end());
        out.push('\n');
    }
    out
}

/// Bytes of a waiting call's arguments shown in the `approvals` table; past this the row
/// says how many bytes it left out (`--full ID` shows all of it).
pub const TABLE_ARGS_BYTES: usize = 200;

/// One waiting call in full (`approvals --full ID`): who asks for what, then every
/// argument as `crate::rules::reveal` shows it, nothing cut.
pub(super) fn approval_full(a: &Value) -> String {
    format!(
        "approval {}\nsession {}  tool {}  expires in {}\n\n{}\n",
        crate::rules::reveal::escape(str_field(a, "id")),
        crate::rules::reveal::escape(str_field(a, "session")),
        crate::rules::reveal::escape(str_field(a, "tool")),
        a.get("expires_in_secs")
            .and_then(Value::as_u64)
            .map_or("-".into(), human_secs),
        crate::rules::reveal::full(a.get("arguments").unwrap_or(&Value::Null))
    )
}

/// A waiting call's arguments in the table: one line, cut at [`TABLE_ARGS_BYTES`] saying
/// so, and saying when the daemon's list already cut them (`--full ID` has them whole).
pub(super) fn table_arguments(a: &Value) -> String {
    let shown = crate::rules::reveal::one_line(
        a.get("arguments").unwrap_or(&Value::Null),
        TABLE_ARGS_BYTES,
    );
    if a.get("arguments_truncated") == Some(&Value::Bool(true)) {
        format!(
            "{shown} (cut by the daemon; --full {} shows all)",
            crate::rules::reveal::escape(str_field(a, "id"))
        )
    } else {
        shown
    }
}

/// The waiting calls as a table (or `no calls are waiting for approval`).
pub(super) fn approvals_table(list: &[Value]) -> String {
    if list.is_empty() {
        return "no calls are waiting for approval\n".into();
    }
    let mut rows = vec![["ID", "SESSION", "TOOL", "EXPIRES IN", "ARGUMENTS"]
        .map(String::from)
        .to_vec()];
    for a in list {
        rows.push(vec![
            str_field(a, "id").to_string(),
            str_field(a, "session").to_string(),
            str_field(a, "tool").to_string(),
            a.get("expires_in_secs")
                .and_then(Value::as_u64)
                .map_or("-".into(), human_secs),
            table_arguments(a),
        ]);
    }
    table(&rows)
}

/// `GET /calls` as a table (or `nothing runs now`).
pub(super) fn calls_table(list: &[Value]) -> String {
    if list.is_empty() {
        return "nothing runs now\n".into();
    }
    let mut rows = vec![["ID", "GRANT", "TOOL", "STATE", "FOR", "ARGUMENTS"]
        .map(String::from)
        .to_vec()];
    for c in list {
        rows.push(vec![
            crate::rules::reveal::escape(str_field(c, "id")),
            grant_cell(c),
            crate::rules::reveal::escape(str_field(c, "tool")),
            str_field(c, "state").replace('_', " "),
            elapsed_cell(c),
            table_arguments(c),
        ]);
    }
    table(&rows)
}

/// The running jobs of `GET /calls` with their last output lines (or `no jobs run now`).
pub(super) fn jobs_table(list: &[Value]) -> String {
    if list.is_empty() {
        return "no jobs run now\n".into();
    }
    let mut text = String::new();
    for c in list {
        let command = c["arguments"]["command"].as_str().unwrap_or_default();
        text.push_str(&format!(
            "{}  grant {}  running for {}\n  $ {}\n",
            crate::rules::reveal::escape(str_field(c, "id")),
            grant_cell(c),
            elapsed_cell(c),
            crate::rules::reveal::one_line(&json!(command), TABLE_ARGS_BYTES),
        ));
        for line in c["output_tail"].as_array().into_iter().flatten() {
            let line = line.as_str().unwrap_or_default();
            text.push_str(&format!(
                "  | {}\n",
                crate::rules::reveal::one_line(&json!(line), TABLE_ARGS_BYTES)
            ));
        }
    }
    text
}

fn grant_cell(c: &Value) -> String {
    match c["grant"].as_str() {
        Some(g) => crate::rules::reveal::escape(g),
        None => "(your /mcp)".into(),
    }
}

fn elapsed_cell(c: &Value) -> String {
    c["elapsed_ms"]
        .as_u64()
        .map_or("-".into(), |ms| human_secs(ms / 1000))
}

/// `handnode journal`: the journals kept, newest first.
pub(super) fn journals_table(body: &Value) -> String {
    let rows = body["journals"].as_array().cloned().unwrap_or_default();
    if rows.is_empty() {
        return "no journal yet: one is kept for every grant (and every day of your /mcp) once a call has run\n".into();
    }
    let mut text = String::from("ID                                    BYTES       LAST RECORD\n");
    for r in &rows {
        text.push_str(&format!(
            "{:<37} {:<11} {}\n",
            crate::rules::reveal::escape(str_field(r, "id")),
            r["bytes"].as_u64().unwrap_or(0),
            crate::rules::reveal::escape(str_field(r, "updated_at")),
        ));
    }
    text.push_str("handnode journal ID shows one; --html FILE writes it for an auditor\n");
    text
}

/// One journal record, for a person: what ran, how it ended, who approved it.
pub(super) fn journal_line(r: &Value) -> String {
    if r["kind"] == "dropped" {
        return format!(
            "… {} earlier record(s) dropped: {}\n",
            r["records"].as_u64().unwrap_or(0),
            crate::rules::reveal::escape(str_field(r, "reason"))
        );
    }
    let mut text = format!(
        "#{} {} {} {} ({} ms): {}\n",
        r["seq"].as_u64().unwrap_or(0),
        crate::rules::reveal::escape(str_field(r, "started_at")),
        crate::rules::reveal::escape(str_field(r, "tool")),
        crate::rules::reveal::escape(str_field(r, "outcome")),
        r["duration_ms"].as_u64().unwrap_or(0),
        crate::rules::reveal::one_line(
            r.get("arguments").unwrap_or(&Value::Null),
            TABLE_ARGS_BYTES
        ),
    );
    if let Some(a) = r.get("approval") {
        text.push_str(&format!(
            "    approval: {} by {} at {}\n",
            crate::rules::reveal::escape(str_field(a, "decision")),
            crate::rules::reveal::escape(str_field(a, "by")),
            crate::rules::reveal::escape(str_field(a, "at")),
        ));
    }
    let summary = str_field(r, "summary");
    if let Some(first) = summary.lines().next().filter(|l| !l.is_empty()) {
        let first: String = first.chars().take(160).collect();
        text.push_str(&format!("    {}\n", crate::rules::reveal::escape(&first)));
    }
    if r.get("thumbnail").is_some() {
        text.push_str("    (a thumbnail of the screen after it: see --html)\n");
    }
    text
}
