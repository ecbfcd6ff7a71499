//! `journal.html`: one journal as one self-contained HTML file an auditor opens offline.
//! Inline CSS, no script, thumbnails as `data:` URLs, no reference to anything outside the
//! file; every agent-chosen text is escaped, and arguments are shown revealed as a person
//! is shown them before approving (`rules::reveal`).

use serde_json::Value;

use crate::base::text::escape_html as escape;
use crate::rules::reveal;

/// The page's CSP, for serving it: nothing loads, nothing runs, images only from itself.
pub const CSP: &str =
    "default-src 'none'; img-src data:; style-src 'unsafe-inline'; base-uri 'none'; form-action 'none'";

const STYLE: &str =
    "body{font:14px/1.4 system-ui,sans-serif;margin:1.5em;color:#111;background:#fff}\
h1{font-size:1.3em}table{border-collapse:collapse;width:100%}\
td,th{border-top:1px solid #ccc;padding:.4em;vertical-align:top;text-align:left}\
pre{white-space:pre-wrap;word-break:break-word;margin:0;font:12px/1.35 ui-monospace,monospace}\
.bad{color:#a00}.ok{color:#060}img{max-width:320px;height:auto;border:1px solid #999}\
.note{color:#555}@media(max-width:700px){td,th{display:block}}";

fn str_of<'a>(v: &'a Value, key: &str) -> &'a str {
    v.get(key).and_then(Value::as_str).unwrap_or("")
}

/// The page for journal `id`, its records in order (as `store::read_since` gives them,
/// thumbnails inline), made at `made_at`.
pub fn render(id: &str, records: &[Value], made_at: &str) -> String {
    let mut rows = String::new();
    for r in records {
        if str_of(r, "kind") == "dropped" {
            rows.push_str(&format!(
                "<tr class=\"note\"><td>{}</td><td colspan=\"4\">{} earlier record(s) were dropped: {}</td></tr>",
                r.get("seq").and_then(Value::as_u64).unwrap_or(0),
                r.get("records").and_then(Value::as_u64).unwrap_or(0),
                escape(str_of(r, "reason")),
            ));
            continue;
        }
        let outcome = str_of(r, "outcome");
        let mut what = format!(
            "<pre>{}</pre>",
            escape(&reveal::full(r.get("arguments").unwrap_or(&Value::Null)))
        );
        if let Some(a) = r.get("approval") {
            what.push_str(&format!(
                "<p>approval: <b>{}</b> by {} at {}{}</p>",
                escape(str_of(a, "decision")),
                escape(str_of(a, "by")),
                escape(str_of(a, "at")),
                match a.get("reason").and_then(Value::as_str) {
                    Some(why) => format!(": {}", escape(why)),
                    None => String::new(),
                }
            ));
        }
        if let Some(why) = r.get("stopped").and_then(Value::as_str) {
            what.push_str(&format!("<p class=\"bad\">{}</p>", escape(why)));
        }
        let picture = match r.get("thumbnail") {
            Some(t) => match t.get("data_url").and_then(Value::as_str) {
                // Only a JPEG data URL of ours: nothing else may reach an attribute.
                Some(url) if url.starts_with("data:image/jpeg;base64,") => format!(
                    "<img alt=\"the screen after this call\" width=\"{}\" height=\"{}\" src=\"{}\">",
                    t.get("width").and_then(Value::as_u64).unwrap_or(0),
                    t.get("height").and_then(Value::as_u64).unwrap_or(0),
                    escape(url)
                ),
                _ => "<span class=\"note\">thumbnail dropped (journal bound)</span>".into(),
            },
            None => match r.get("thumbnail_error").and_then(Value::as_str) {
                Some(why) => format!(
                    "<span class=\"note\">no thumbnail: {}</span>",
                    escape(why)
                ),
                None => String::new(),
            },
        };
        rows.push_str(&format!(
            "<tr><td>{}</td><td>{}<br><span class=\"note\">{} ms</span></td><td><b>{}</b>{}</td>\
             <td class=\"{}\">{}<pre>{}</pre></td><td>{}</td></tr>",
            r.get("seq").and_then(Value::as_u64).unwrap_or(0),
            escape(str_of(r, "started_at")),
            r.get("duration_ms").and_then(Value::as_u64).unwrap_or(0),
            escape(str_of(r, "tool")),
            what,
            if outcome == "ok" { "ok" } else { "bad" },
            escape(outcome),
            escape(str_of(r, "summary")),
            picture,
        ));
    }
    format!(
        "<!doctype html><html lang=\"en\"><head><meta charset=\"utf-8\">\
         <meta http-equiv=\"Content-Security-Policy\" content=\"{csp}\">\
         <meta name=\"viewport\" content=\"width=device-width,initial-scale=1\">\
         <title>handnode journal {id}</title><style>{STYLE}</style></head><body>\
         <h1>What the agent did: journal {id}</h1>\
         <p class=\"note\">{n} record(s), written by handnode; this file was made at {made_at} and needs nothing outside itself.</p>\
         <table><thead><tr><th>#</th><th>when</th><th>call</th><th>outcome and result</th><th>screen after</th></tr></thead>\
         <tbody id=\"records\">{rows}</tbody></table></body></html>\n",
        csp = escape(CSP),
        id = escape(id),
        n = records.len(),
        made_at = escape(made_at),
    )
}
