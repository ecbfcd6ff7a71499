//! The security headers of every admin response other than the console's page and files
//! (contract §14), shared by the admin server and the approvals long-poll that answers on
//! its own thread.

use tiny_http::{Header, Response};

/// Every admin response other than the console's page and assets (contract §14): no
/// document of the admin origin may load or run script of its own, send a request from
/// script (`fetch`, XHR, WebSocket, beacons: `connect-src` falls back to `'none'`), be
/// sniffed into another type, framed, or kept by a cache. Chromium still runs a
/// `javascript:` URL that the browser itself navigates to (as it runs a bookmarklet,
/// whatever the page's CSP), but such a script cannot fetch `/mcp`, and nothing else a page
/// can send carries the bearer token (`tests/chains.rs` proves both).
pub const API_HEADERS: &[(&str, &str)] = &[
    (
        "Content-Security-Policy",
        "default-src 'none'; frame-ancestors 'none'",
    ),
    ("X-Content-Type-Options", "nosniff"),
    ("Cache-Control", "no-store"),
];

/// `response` with each of [`API_HEADERS`] it does not already carry (by name): the
/// console's files keep their own headers (`admin::console::HEADERS`), everything else
/// gets these.
pub fn with_api_headers<R: std::io::Read>(mut response: Response<R>) -> Response<R> {
    for (name, value) in API_HEADERS {
        let present = response
            .headers()
            .iter()
            .any(|h| h.field.as_str().as_str().eq_ignore_ascii_case(name));
        if !present {
            response.add_header(
                Header::from_bytes(name.as_bytes(), value.as_bytes())
                    .expect("static header is valid"),
            );
        }
    }
    response
}
