//! Small base types every other layer uses and that use nothing of the crate outside `base`:
//! errors, secrets, times, URLs, ids, labels, process hardening, wake handles, build facts,
//! `/proc/<pid>/stat` fields, the state dir's file rules, the browser command's words, the URLs
//! a browser may open, desktop entries, what an approval shows, evdev's key names and records
//! (the halt key), the viewer's half of RFB (the live view), unit-test helpers.

pub mod browser_argv;
pub mod build_info;
pub mod error;
pub mod evdev;
pub mod hardening;
pub mod http_headers;
pub mod ids;
pub mod label;
pub mod procfs;
pub mod rfb;
pub mod secret;
pub mod statedir;
#[cfg(test)]
pub(crate) mod testutil;
pub mod text;
pub mod timefmt;
pub mod url;
pub mod wake;
