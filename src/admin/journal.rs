//! The journal over the admin API (§22): `GET /journals` (which there are),
//! `GET /attach/{id}/journal` (JSON lines, `?since=<seq>`) and
//! `GET /attach/{id}/journal.html` (one self-contained file to hand an auditor). `{id}` is a
//! grant's id, ended grants' too while their journal is kept, or `mcp-YYYY-MM-DD` for a day
//! of the owner's `/mcp`.

use std::time::Duration;

use serde_json::json;
use tiny_http::{Request, Response};

use super::{error_response, header, json_response, query_param, respond, AdminState};
use crate::journal::{html, store};

/// Most bytes of JSON lines one answer carries; past it the answer ends early and its
/// `Journal-Next-Since` header says where to go on.
pub const MAX_LINES_BYTES: usize = 8 << 20;
/// Longest a reader waits for records still on their way to disk.
const FLUSH_WAIT: Duration = Duration::from_secs(2);
/// The `400` for a `since` that is not a whole number.
pub const SINCE_ERROR: &str = "since must be a whole number (the seq of the last record you have)";
/// The `404` for an unknown journal.
pub const NO_JOURNAL: &str =
    "no journal by that id (a grant id, or mcp-YYYY-MM-DD for the owner's /mcp; see GET /journals)";
/// The `404` when the daemon keeps no journal (no state dir).
const NOT_KEPT: &str = "no journal is kept: this daemon runs without a state dir";

fn root(state: &AdminState) -> Option<&std::path::Path> {
    state.services.journal.settings().dir.as_deref()
}

/// `GET /journals`.
pub fn list(state: &AdminState, request: Request) {
    let journals = root(state).map(store::list).unwrap_or_default();
    respond(
        request,
        json_response(200, &json!({ "journals": journals })),
    )
}

/// `GET /attach/{id}/journal`.
pub fn lines(state: &AdminState, request: Request, id: &str) {
    let since = match query_param(&request, "since") {
        None => 0,
        Some(v) => match v.parse::<u64>() {
            Ok(n) => n,
            Err(_) => return respond(request, error_response(400, SINCE_ERROR)),
        },
    };
    let thumbnails = query_param(&request, "thumbnails").as_deref() != Some("0");
    let Some(dir) = root(state) else {
        return respond(request, error_response(404, NOT_KEPT));
    };
    state.services.journal.flush(FLUSH_WAIT);
    match store::read_since(dir, id, since, MAX_LINES_BYTES, thumbnails) {
        Ok(Some((body, more))) => {
            let mut response = Response::from_data(body)
                .with_header(header("Content-Type", "application/x-ndjson"))
                .with_header(header("Cache-Control", "no-store"));
            if let Some(next) = more {
                response = response.with_header(header("Journal-Next-Since", &next.to_string()));
            }
            respond(request, response)
        }
        Ok(None) => respond(request, error_response(404, NO_JOURNAL)),
        Err(e) => {
            log::warn!("admin: cannot read journal {id}: {e}");
            respond(request, error_response(500, "cannot read the journal"))
        }
    }
}

/// `GET /attach/{id}/journal.html`.
pub fn page(state: &AdminState, request: Request, id: &str) {
    let Some(dir) = root(state) else {
        return respond(request, error_response(404, NOT_KEPT));
    };
    state.services.journal.flush(FLUSH_WAIT);
    match store::all_records(dir, id) {
        Ok(Some(records)) => {
            let made = crate::base::timefmt::rfc3339(crate::base::timefmt::now_unix());
            let text = html::render(id, &records, &made);
            respond(
                request,
                Response::from_data(text.into_bytes())
                    .with_header(header("Content-Type", "text/html; charset=utf-8"))
                    .with_header(header("Content-Security-Policy", html::CSP))
                    .with_header(header("X-Content-Type-Options", "nosniff"))
                    .with_header(header("Cache-Control", "no-store"))
                    .with_header(header(
                        "Content-Disposition",
                        &format!("attachment; filename=\"handnode-journal-{id}.html\""),
                    )),
            )
        }
        Ok(None) => respond(request, error_response(404, NO_JOURNAL)),
        Err(e) => {
            log::warn!("admin: cannot read journal {id}: {e}");
            respond(request, error_response(500, "cannot read the journal"))
        }
    }
}
