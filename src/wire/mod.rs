//! The wire to pods and upstreams: the sans-IO MCP dispatcher, one grant socket's framing,
//! TLS and the outbound HTTP client, and minting an attach secret at the pod.

pub mod http;
pub mod link;
pub mod mcp;
pub mod mint;
pub mod tls;
