//! Rules the daemon applies on the lender's behalf, above `base`'s plain types: which
//! desktop entries `--apps` may lend, which URLs a browser tool may open, and how a held
//! call's arguments are shown to the person who decides it.

pub mod browser_url;
pub mod desktop_entry;
pub mod reveal;
