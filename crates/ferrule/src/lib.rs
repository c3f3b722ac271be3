//! ferrule's core: the bridge that drives Python coroutines from Rust, and the ASGI server
//! (HTTP/1.1, HTTP/2, TLS, WebSockets) built on it.
//!
//! The modules depend on each other one way:
//!
//! ```text
//! metrics -> bridge
//! asgi -> bridge, metrics
//! ws   -> asgi, bridge
//! http -> asgi, bridge, metrics, ws (ws::is_upgrade and ws::upgrade, the upgrade
//!         hand-over)
//! h3   -> http (its request path, shared), asgi, bridge
//! ```
//!
//! - `bridge` drives coroutines and knows nothing of ASGI;
//! - `asgi` is what both protocols share (the server's settings, Python handles and live
//!   state, connection info, the scope, reading messages, server-made responses);
//! - `metrics` keeps the Prometheus counts each worker adds to and the parent encodes;
//! - `ws` serves WebSockets with `asgi` and `bridge` alone;
//! - `http` serves HTTP/1.1 and HTTP/2, and hands an upgrade request to `ws::upgrade`, its one
//!   use of `ws`;
//! - `h3` serves HTTP/3 over QUIC, handing each request to `http`'s request path.
//!
//! No two files of `asgi`, `http` or `ws` import each other, directly or in a circle.
pub mod asgi;
pub mod bridge;
pub mod h3;
pub mod http;
pub mod metrics;
pub mod tcp;
pub mod ws;
