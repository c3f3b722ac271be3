//! ferrule's core: the bridge that drives Python coroutines from Rust, and the ASGI server
//! (HTTP/1.1, HTTP/2, TLS, WebSockets) built on it.
pub mod asgi;
pub mod bridge;
pub mod http;
pub mod ws;
