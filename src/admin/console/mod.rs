//! The web console: the page `GET /` and its assets `GET /console/{name}`, embedded in the
//! binary (no CDN, no build step), each served with [`HEADERS`]. They are served without
//! authentication, since a fresh page has no token yet and holds no secret; every API call
//! the page makes authenticates like any other client's.

use std::io::Cursor;
use std::sync::LazyLock;

use tiny_http::{Header, Response};

use crate::profiles::Profile;
use crate::tools::policy::ToolPolicy;

/// One embedded file.
#[derive(Debug)]
pub struct Asset {
    /// The `{name}` of `/console/{name}`.
    pub name: &'static str,
    pub content_type: &'static str,
    pub body: &'static [u8],
}

/// The page itself, served at `/` by a daemon with `--browser-command` and `--apps`:
/// `index.html` with the Lend form's profile choices rendered in from [`Profile::ALL`].
pub static PAGE: LazyLock<Asset> = LazyLock::new(|| render(true, true));

/// The page for each `(browser tier, apps)` a daemon may have: a profile the box cannot
/// serve (`browser` without `--browser-command`, `apps` without `--apps`) is disabled and
/// says why, before anyone submits it.
static PAGES: [LazyLock<Asset, fn() -> Asset>; 4] = [
    LazyLock::new(|| render(false, false)),
    LazyLock::new(|| render(false, true)),
    LazyLock::new(|| render(true, false)),
    LazyLock::new(|| render(true, true)),
];

/// The page for a daemon that has (or has not) the browser tier and listed apps.
pub fn page(browser_tier: bool, apps: bool) -> &'static Asset {
    &PAGES[usize::from(browser_tier) * 2 + usize::from(apps)]
}

fn render(browser_tier: bool, apps: bool) -> Asset {
    let template = include_str!("index.html");
    assert!(
        template.contains(PROFILE_CHOICES),
        "index.html has the profile choices mark"
    );
    let body = template.replacen(PROFILE_CHOICES, &profile_choices(browser_tier, apps), 1);
    Asset {
        name: "index.html",
        content_type: "text/html; charset=utf-8",
        body: Box::leak(body.into_bytes().into_boxed_slice()),
    }
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
fn profile_choices(browser_tier: bool, apps: bool) -> String {
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
            let (browser, mut parts): (Vec<&str>, Vec<&str>) = policy
                .tools()
                .iter()
                .partition(|name| crate::tools::find(name).is_none());
            let count = match browser.len() {
                1 => "1 browser tool".to_string(),
                n => format!("{n} browser tools"),
            };
            if !browser.is_empty() {
                parts.push(&count);
            }
            let mut text = parts.join(", ");
            if policy.sees_unclassified() {
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
    fn the_lend_form_offers_every_profile_once_with_its_boundary() {
        let page = std::str::from_utf8(PAGE.body).unwrap();
        assert!(!page.contains(PROFILE_CHOICES), "the mark is replaced");
        for profile in Profile::ALL {
            let radio = format!("name=\"profile\" value=\"{profile}\"");
            assert_eq!(page.matches(&radio).count(), 1, "{profile}");
        }
        assert_eq!(page.matches("name=\"profile\"").count(), Profile::ALL.len());
        assert_eq!(page.matches(" checked>").count(), 4, "one per radio group");
        let choices = profile_choices(true, true);
        let without = profile_choices(false, true);
        assert!(
            without.contains("value=\"browser\" data-shell=\"no\" disabled>")
                && without.contains(NO_BROWSER_TIER),
            "{without}"
        );
        assert_eq!(without.matches(" disabled>").count(), 1, "{without}");
        let no_apps = profile_choices(true, false);
        assert!(
            no_apps.contains("value=\"apps\" data-shell=\"no\" disabled>")
                && no_apps.contains(NO_APPS),
            "{no_apps}"
        );
        assert_eq!(no_apps.matches(" disabled>").count(), 1, "{no_apps}");
        assert_eq!(
            profile_choices(false, false).matches(" disabled>").count(),
            2
        );
        assert!(!choices.contains("disabled"), "{choices}");
        let line = |name: &str| {
            choices
                .lines()
                .skip_while(|l| !l.contains(&format!("value=\"{name}\"")))
                .nth(1)
                .unwrap()
                .to_string()
        };
        assert!(choices.contains("value=\"observe\" data-shell=\"no\" checked>"));
        assert!(choices.contains("value=\"browser\" data-shell=\"no\">"));
        assert!(choices.contains("value=\"desktop\" data-shell=\"yes\">"));
        assert!(choices.contains("value=\"owner\" data-shell=\"yes\">"));
        assert!(choices.contains("value=\"custom\" data-shell=\"list\">"));
        // The lists and counts come from the registry and the profiles' tables.
        let observe = format!("({})", crate::tools::names(Profile::Observe).join(", "));
        assert!(line("observe").contains(&observe), "{}", line("observe"));
        let browser = format!(
            "({} browser tools)",
            crate::profiles::browser_profile_tools().count()
        );
        assert!(line("browser").contains(&browser), "{}", line("browser"));
        let desktop = format!(
            "({}, {} browser tools)",
            crate::tools::names(Profile::Desktop).join(", "),
            crate::profiles::DESKTOP_BROWSER_TOOLS.len()
        );
        assert!(line("desktop").contains(&desktop), "{}", line("desktop"));
    }

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
