//! ferrule's core: the bridge that drives Python coroutines from Rust, and the HTTP/1.1
//! ASGI server built on it.
pub mod bridge;
pub mod http;
pub mod ws;
