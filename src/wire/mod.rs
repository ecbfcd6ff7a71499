//! The wire to pods and upstreams: the sans-IO MCP dispatcher, one grant socket's framing,
//! TLS and the outbound HTTP client, minting an attach secret at the pod, and the small
//! synchronous D-Bus client of the accessibility bus.

pub mod dbus;
pub mod http;
pub mod link;
pub mod mcp;
pub mod mint;
pub mod tls;
