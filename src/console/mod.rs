//! The web console: the page `GET /` and its assets `GET /console/{name}`, embedded in the
//! binary (no CDN, no build step), each served with [`HEADERS`]. They are served without
//! authentication, since a fresh page has no token yet and holds no secret; every API call
//! the page makes authenticates like any other client's.

use std::io::Cursor;

use tiny_http::{Header, Response};

/// One embedded file.
#[derive(Debug)]
pub struct Asset {
    /// The `{name}` of `/console/{name}`.
    pub name: &'static str,
    pub content_type: &'static str,
    pub body: &'static [u8],
}

/// The page itself, served at `/`.
pub const PAGE: Asset = Asset {
    name: "index.html",
    content_type: "text/html; charset=utf-8",
    body: include_bytes!("index.html"),
};

/// Everything the page loads, at `/console/{name}`.
pub const ASSETS: &[Asset] = &[
    Asset {
        name: "app.js",
        content_type: "text/javascript; charset=utf-8",
        body: include_bytes!("app.js"),
    },
    Asset {
        name: "app.css",
        content_type: "text/css; charset=utf-8",
        body: include_bytes!("app.css"),
    },
];

/// Scripts and styles only from our own files (no inline script, no `eval`), images only
/// ours or `data:` (the screen thumbnail), requests only to this origin, never framed.
pub const CSP: &str = "default-src 'none'; script-src 'self'; style-src 'self'; \
                       img-src 'self' data:; connect-src 'self'; frame-ancestors 'none'; \
                       base-uri 'none'; form-action 'self'";

/// The headers of the page and of every asset.
pub const HEADERS: &[(&str, &str)] = &[
    ("Content-Security-Policy", CSP),
    ("X-Content-Type-Options", "nosniff"),
    ("Referrer-Policy", "no-referrer"),
    // For browsers that predate `frame-ancestors`.
    ("X-Frame-Options", "DENY"),
    ("Cross-Origin-Opener-Policy", "same-origin"),
    ("Cross-Origin-Resource-Policy", "same-origin"),
    // Revalidate on every load, so a new binary's page never mixes with an old cached script.
    ("Cache-Control", "no-cache"),
];

/// The asset named `name`, if there is one.
pub fn asset(name: &str) -> Option<&'static Asset> {
    ASSETS.iter().find(|a| a.name == name)
}

/// `asset` as a `200` with its type and [`HEADERS`].
pub fn response(asset: &Asset) -> Response<Cursor<Vec<u8>>> {
    let header = |name: &str, value: &str| {
        Header::from_bytes(name.as_bytes(), value.as_bytes()).expect("static header is valid")
    };
    HEADERS.iter().fold(
        Response::from_data(asset.body.to_vec())
            .with_header(header("Content-Type", asset.content_type)),
        |response, (name, value)| response.with_header(header(name, value)),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_asset_the_page_names_is_served_and_every_served_one_is_named() {
        let page = std::str::from_utf8(PAGE.body).unwrap();
        for a in ASSETS {
            assert!(
                page.contains(&format!("\"/console/{}\"", a.name)),
                "index.html never loads {}",
                a.name
            );
        }
        for (i, _) in page.match_indices("/console/") {
            let name: String = page[i + "/console/".len()..]
                .chars()
                .take_while(|c| *c != '"')
                .collect();
            assert!(
                asset(&name).is_some(),
                "index.html loads {name}, which is not served"
            );
        }
    }
}
