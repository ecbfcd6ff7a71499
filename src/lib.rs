//! handnode: lend this Linux box's tools to one coding-agent session, time-boxed and
//! revocable, by dialling into the agent's pod and serving MCP over that socket.
#![forbid(unsafe_code)]

pub mod config;
pub mod error;
pub mod jobs;
pub mod mcp;
pub mod profiles;
pub mod secret;
pub mod timefmt;
pub mod tools;
pub mod wake;

pub use config::Config;
pub use error::Error;
