//! The web console: the page `GET /` and its assets `GET /console/{name}`, embedded in the
//! binary (no CDN, no build step), each served with [`HEADERS`]. They are served without
//! authentication, since a fresh page has no token yet and holds no secret; every API call
//! the page makes authenticates like any other client's.

use std::io::Cursor;

use tiny_http::{Header, Response};

use crate::profiles::Profile;
use crate::tools::policy::{Sources, ToolPolicy};

/// One embedded file.
#[derive(Debug)]
pub struct Asset {
    /// The `{name}` of `/console/{name}`.
    pub name: &'static str,
    pub content_type: &'static str,
    pub body: &'static [u8],
}

/// The page `GET /` serves: `index.html` with the Lend form's profile choices rendered in
/// from [`Profile::ALL`] and what each lends on this box now (`here`, the catalogue's
/// sources, as grants read them), so the form counts what a grant would get. A profile
/// the box cannot serve (`browser` without `--browser-command`, `apps` without `--apps`) is
/// disabled and says why, before anyone submits it. Rendered per request: an upstream
/// that comes or goes changes the counts.
pub fn page(here: Sources<'_>, apps: bool) -> Vec<u8> {
    let template = include_str!("index.html");
    assert!(
        template.contains(PROFILE_CHOICES),
        "index.html has the profile choices mark"
    );
    template
        .replacen(PROFILE_CHOICES, &profile_choices(here, apps), 1)
        .into_bytes()
}

/// [`page`] as a `200` with [`HEADERS`].
pub fn page_response(here: Sources<'_>, apps: bool) -> Response<Cursor<Vec<u8>>> {
    with_headers(page(here, apps), "text/html; charset=utf-8")
}

/// Why the `apps` choice is disabled on a daemon without `--apps`.
pub const NO_APPS: &str =
    "Not on this box: it needs handnode's --apps, the desktop apps you vouch for.";

/// Why the `browser` choice is disabled on a daemon without the browser tier.
pub const NO_BROWSER_TIER: &str =
    "Not on this box: it needs handnode's --browser-command (see handnode doctor).";

/// Where `index.html` takes the profile choices: rendered from the daemon's own table, a
/// profile added there is offered (with what it lends, and whether it is a boundary)
/// without touching the page.
const PROFILE_CHOICES: &str = "<!-- profile choices: rendered from profiles::Profile::ALL -->";

/// One radio button per profile, `observe` (a boundary) checked. `data-shell` tells the
/// page's script which warning to show: `yes` (shell-equivalent), `no` (a boundary) or
/// `list` (it depends on the list, as the grant's `shell` field will say).
fn profile_choices(here: Sources<'_>, apps: bool) -> String {
    let browser_tier = here.browsers.is_some();
    let mut html = String::new();
    for profile in Profile::ALL {
        let missing = match profile {
            Profile::Browser if !browser_tier => Some(NO_BROWSER_TIER),
            Profile::Apps if !apps => Some(NO_APPS),
            _ => None,
        };
        let unavailable = missing.is_some();
        let (shell, verdict) = if profile.is_custom() {
            ("list", "Shell-equivalent if the list holds a shell tool.")
        } else if profile.is_shell_equivalent() {
            ("yes", "Shell-equivalent.")
        } else {
            ("no", "A boundary.")
        };
        let tools = ToolPolicy::fixed(profile).map(|policy| {
            let lent = policy.lent(here);
            let (browser, mut parts): (Vec<&str>, Vec<&str>) = lent
                .iter()
                .map(String::as_str)
                .partition(|name| crate::tools::find(name).is_none());
            let count = match browser.len() {
                1 => "1 browser tool".to_string(),
                n => format!("{n} browser tools"),
            };
            if !browser.is_empty() {
                parts.push(&count);
            }
            let mut text = parts.join(", ");
            if policy.sees_unclassified() && here.upstream.is_some() {
                text.push_str(" and any other tool of the box's upstreams");
            }
            text
        });
        let name = profile.as_str();
        let checked = if profile == Profile::Observe {
            " checked"
        } else if unavailable {
            " disabled"
        } else {
            ""
        };
        let why_not = match missing {
            Some(why) => format!(
                " <em class=\"unavailable\">{}</em>",
                crate::base::text::escape_html(why)
            ),
            None => String::new(),
        };
        let tools = tools.map_or(String::new(), |t| {
            format!(" ({})", crate::base::text::escape_html(&t))
        });
        html.push_str(&format!(
            "      <label class=\"choice\"><input type=\"radio\" name=\"profile\" \
             value=\"{name}\" data-shell=\"{shell}\"{checked}>\n        \
             <span><b>{name}</b>: {meaning}{tools}. {verdict}{why_not}</span></label>\n",
            meaning = crate::base::text::escape_html(profile.meaning()),
        ));
    }
    html
}

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

pub use crate::config::own_display::{NOVNC_DIR, NOVNC_ENTRY};
/// Largest noVNC file served (the biggest module is well under this).
pub const NOVNC_MAX_FILE: u64 = 1 << 20;
/// What of noVNC is served, by extension: its modules and their images and styles. Not
/// its HTML pages, which carry inline script this page's CSP would refuse and are another
/// client than the console.
const NOVNC_TYPES: &[(&str, &str)] = &[
    ("js", "text/javascript; charset=utf-8"),
    ("css", "text/css; charset=utf-8"),
    ("svg", "image/svg+xml"),
    ("png", "image/png"),
];

/// `GET /console/novnc/{rest}`: a file of noVNC's installed tree under `dir`, with
/// [`HEADERS`], or why not (the admin API answers that `404` with its own headers, as it
/// does a console file it does not have). Only plain names (`[A-Za-z0-9_.-]`, not starting with a dot)
/// of a type in [`NOVNC_TYPES`], and only a regular file whose real path stays under
/// `dir`'s, so neither `..`, an escape, nor a symlink out of the tree reaches another file.
pub fn novnc_file(dir: &std::path::Path, rest: &str) -> Result<Response<Cursor<Vec<u8>>>, String> {
    read_novnc(dir, rest).map(|(body, content_type)| with_headers(body, content_type))
}

fn read_novnc(dir: &std::path::Path, rest: &str) -> Result<(Vec<u8>, &'static str), String> {
    let plain = |s: &str| {
        !s.is_empty()
            && !s.starts_with('.')
            && s.bytes()
                .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'.'))
    };
    if !rest.split('/').all(plain) {
        return Err("no such noVNC file".into());
    }
    let content_type = rest
        .rsplit_once('.')
        .and_then(|(_, ext)| NOVNC_TYPES.iter().find(|(e, _)| *e == ext))
        .map(|(_, t)| *t)
        .ok_or("no such noVNC file")?;
    let root = std::fs::canonicalize(dir).map_err(|_| {
        format!(
            "noVNC is not installed here ({}): install Debian's novnc",
            dir.display()
        )
    })?;
    let path = std::fs::canonicalize(root.join(rest)).map_err(|_| "no such noVNC file")?;
    let meta = std::fs::metadata(&path).map_err(|_| "no such noVNC file")?;
    if !path.starts_with(&root) || !meta.is_file() || meta.len() > NOVNC_MAX_FILE {
        return Err("no such noVNC file".into());
    }
    let body = std::fs::read(&path).map_err(|_| "no such noVNC file")?;
    Ok((body, content_type))
}

/// `asset` as a `200` with its type and [`HEADERS`].
pub fn response(asset: &Asset) -> Response<Cursor<Vec<u8>>> {
    with_headers(asset.body.to_vec(), asset.content_type)
}

fn with_headers(body: Vec<u8>, content_type: &str) -> Response<Cursor<Vec<u8>>> {
    let header = |name: &str, value: &str| {
        Header::from_bytes(name.as_bytes(), value.as_bytes()).expect("static header is valid")
    };
    HEADERS.iter().fold(
        Response::from_data(body).with_header(header("Content-Type", content_type)),
        |response, (name, value)| response.with_header(header(name, value)),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn novnc_files_are_served_only_from_under_its_dir() {
        let tmp = std::env::temp_dir().join(format!("handnode-novnc-{}", std::process::id()));
        let dir = tmp.join("novnc");
        std::fs::create_dir_all(dir.join("core")).unwrap();
        std::fs::write(dir.join("core/rfb.js"), b"export default 1;").unwrap();
        std::fs::write(dir.join("vnc.html"), b"<script>").unwrap();
        std::fs::write(tmp.join("secret.js"), b"no").unwrap();
        std::os::unix::fs::symlink(tmp.join("secret.js"), dir.join("core/out.js")).unwrap();
        let (body, ty) = read_novnc(&dir, "core/rfb.js").unwrap();
        assert_eq!(body, b"export default 1;");
        assert_eq!(ty, "text/javascript; charset=utf-8");
        let served = novnc_file(&dir, "core/rfb.js").unwrap();
        assert_eq!(served.status_code().0, 200);
        for bad in [
            "../secret.js",
            "core/../../secret.js",
            "core/out.js",
            "core//rfb.js",
            ".hidden.js",
            "core/%2e%2e/x.js",
            "vnc.html",
            "core",
            "core/missing.js",
        ] {
            assert!(read_novnc(&dir, bad).is_err(), "{bad} was served");
            assert!(novnc_file(&dir, bad).is_err(), "{bad}");
        }
        let why = read_novnc(&tmp.join("absent"), "core/rfb.js").unwrap_err();
        assert!(why.contains("install Debian's novnc"), "{why}");
        std::fs::remove_dir_all(&tmp).unwrap();
    }

    use serde_json::{json, Value};

    /// An upstream offering every tool `desktop` takes from one.
    #[derive(Debug)]
    struct Upstream;

    impl crate::tools::UpstreamSource for Upstream {
        fn tools(&self) -> Vec<(usize, Value)> {
            let tool = |n: &&str| (0, json!({"name": n, "inputSchema": {}}));
            crate::profiles::DESKTOP_BROWSER_TOOLS
                .iter()
                .map(tool)
                .collect()
        }

        fn call(
            &self,
            _: usize,
            _: &str,
            _: Value,
            _: std::sync::Arc<crate::pool::CallCtl>,
            _: crate::pool::Completion,
        ) {
            unreachable!("the page runs nothing")
        }
    }

    /// A browser tier whose command offers three tools.
    #[derive(Debug)]
    struct Tier;

    const TIER: [&str; 3] = ["browser_navigate", "browser_snapshot", "browser_click"];

    impl crate::tools::BrowserTier for Tier {
        fn tools(&self) -> Vec<Value> {
            TIER.iter().map(|n| json!({"name": n})).collect()
        }

        fn offers(&self, name: &str) -> bool {
            TIER.contains(&name)
        }
    }

    fn here(upstream: bool, browsers: bool) -> Sources<'static> {
        Sources {
            upstream: upstream.then_some(&Upstream as &dyn crate::tools::UpstreamSource),
            browsers: browsers.then_some(&Tier as &dyn crate::tools::BrowserTier),
        }
    }

    fn full_page() -> String {
        String::from_utf8(page(here(true, true), true)).unwrap()
    }

    #[test]
    fn the_lend_form_offers_every_profile_once_with_its_boundary() {
        let page = full_page();
        assert!(!page.contains(PROFILE_CHOICES), "the mark is replaced");
        for profile in Profile::ALL {
            let radio = format!("name=\"profile\" value=\"{profile}\"");
            assert_eq!(page.matches(&radio).count(), 1, "{profile}");
        }
        assert_eq!(page.matches("name=\"profile\"").count(), Profile::ALL.len());
        assert_eq!(page.matches(" checked>").count(), 4, "one per radio group");
        let choices = profile_choices(here(true, true), true);
        let without = profile_choices(here(true, false), true);
        assert!(
            without.contains("value=\"browser\" data-shell=\"no\" disabled>")
                && without.contains(NO_BROWSER_TIER),
            "{without}"
        );
        assert_eq!(without.matches(" disabled>").count(), 1, "{without}");
        let no_apps = profile_choices(here(true, true), false);
        assert!(
            no_apps.contains("value=\"apps\" data-shell=\"no\" disabled>")
                && no_apps.contains(NO_APPS),
            "{no_apps}"
        );
        assert_eq!(no_apps.matches(" disabled>").count(), 1, "{no_apps}");
        assert_eq!(
            profile_choices(here(true, false), false)
                .matches(" disabled>")
                .count(),
            2
        );
        assert!(!choices.contains("disabled"), "{choices}");
        assert!(choices.contains("value=\"observe\" data-shell=\"no\" checked>"));
        assert!(choices.contains("value=\"browser\" data-shell=\"no\">"));
        assert!(choices.contains("value=\"desktop\" data-shell=\"yes\">"));
        assert!(choices.contains("value=\"owner\" data-shell=\"yes\">"));
        assert!(choices.contains("value=\"custom\" data-shell=\"list\">"));
    }

    /// Issue 37: the form counts what a grant of each profile would get on this box: no
    /// browser tool without an upstream, the browser tier's real list.
    #[test]
    fn the_lend_form_counts_what_this_box_lends() {
        let line = |choices: &str, name: &str| {
            choices
                .lines()
                .skip_while(|l| !l.contains(&format!("value=\"{name}\"")))
                .nth(1)
                .unwrap()
                .to_string()
        };
        let full = profile_choices(here(true, true), true);
        let observe = format!("({})", crate::tools::names(Profile::Observe).join(", "));
        assert!(line(&full, "observe").contains(&observe), "{full}");
        assert!(
            line(&full, "browser").contains("(3 browser tools)"),
            "{full}"
        );
        let desktop = format!(
            "({}, {} browser tools)",
            crate::tools::names(Profile::Desktop).join(", "),
            crate::profiles::DESKTOP_BROWSER_TOOLS.len()
        );
        assert!(line(&full, "desktop").contains(&desktop), "{full}");
        assert!(line(&full, "owner").contains("and any other tool of the box's upstreams"));

        let bare = profile_choices(here(false, false), true);
        let desktop = format!("({})", crate::tools::names(Profile::Desktop).join(", "));
        assert!(line(&bare, "desktop").contains(&desktop), "{bare}");
        for profile in ["desktop", "owner"] {
            let l = line(&bare, profile);
            assert!(
                !l.contains("browser tool") && !l.contains("upstreams"),
                "{l}"
            );
        }
    }

    #[test]
    fn every_asset_the_page_names_is_served_and_every_served_one_is_named() {
        let page = full_page();
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
