//! ferrule's core: the bridge that drives Python coroutines from Rust, and the ASGI server
//! (HTTP/1.1, HTTP/2, TLS, WebSockets) built on it.
//!
//! The modules are layers, each using only those under it (`scripts/module_graph.py` checks
//! this, and that no file imports one that imports it back):
//!
//! ```text
//! tcp, h3      transports: TCP (with TLS) and QUIC; h3 rides beside tcp's HttpServer
//! http, ws     protocols: HTTP/1.1 and HTTP/2 exchanges (the request path HTTP/3 shares),
//!              WebSockets; siblings, neither imports the other
//! asgi         what the protocols share: settings, Python handles, live state, the scope
//! metrics      the Prometheus counts each worker adds to and the parent encodes
//! logs         log lines written without Python: the access log's writer, JSON lines
//! compress     response compression: codings, negotiation, encoders (no server state)
//! statics      static files: mounts, ranges, validators, media types (no server state)
//! bridge       drives coroutines; knows nothing of ASGI
//! ```
//!
//! A TCP connection hands `http` the WebSocket upgrader (`ws::upgrade`), so that the request
//! path can serve an upgrade without knowing `ws`.
pub mod asgi;
pub mod bridge;
pub mod compress;
pub mod h3;
pub mod http;
pub mod logs;
pub mod metrics;
pub mod statics;
pub mod tcp;
pub mod ws;
