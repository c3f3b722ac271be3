//! The ASGI HTTP/1.1 and HTTP/2 server on the bridge, one file per concern (as granian lays out protocols):
//! - `server`: `HttpServer`, the Python class: settings, listening sockets, shutdown;
//! - `shared`: `ServerShared`, what every connection and request of one server shares;
//! - `connection`: the accept loop and each connection (TLS handshake, hyper, finishing);
//! - `request`: one request, from the checks before the app to the app's coroutine;
//! - `conn`: `ConnInfo`, one connection's two ends and its own state;
//! - `streams`: `OpenStreams`, the HTTP/2 streams in progress on a connection;
//! - `scope`: the ASGI `http` scope;
//! - `heads`: the raw request heads, recorded as hyper reads them (header order, framing);
//! - `exchange`: `Exchange`, what hyper's side and the app's side share for one request;
//! - `callables`: the ASGI `receive` / `send` callables (`HttpReceive`, `HttpSend`);
//! - `body`: `ResponseBody`, the response body hyper polls;
//! - `responses`: responses the server makes itself;
//! - `messages`: reading the app's messages (optional fields, headers);
//! - `disconnected`: `ClientDisconnected`, what `send()` raises once the client has gone;
//! - `tls`: rustls, certificates and ALPN;
//! - `proxy`: what a trusted proxy's `X-Forwarded-*` headers change in the scope;
//! - `app_done`: what happens when the app's coroutine finishes;
//! - `access_log`: the access log line.

mod access_log;
pub(crate) mod app_done;
pub(crate) mod body;
mod callables;
pub(crate) mod conn;
mod connection;
pub(crate) mod disconnected;
pub(crate) mod exchange;
pub(crate) mod heads;
pub(crate) mod messages;
pub(crate) mod proxy;
mod request;
pub(crate) mod responses;
pub(crate) mod scope;
mod server;
pub(crate) mod shared;
mod streams;
mod tls;

use pyo3::prelude::*;

pub use self::disconnected::ClientDisconnected;
pub use self::server::HttpServer;

/// Registers the server's classes on `module`.
pub fn register(module: &Bound<'_, PyModule>) -> PyResult<()> {
    module.add_class::<HttpServer>()?;
    module.add(
        "ClientDisconnected",
        module.py().get_type::<ClientDisconnected>(),
    )?;
    Ok(())
}
