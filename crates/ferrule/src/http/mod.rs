//! The ASGI HTTP/1.1 and HTTP/2 server on the bridge, one file per concern (as granian lays out protocols):
//! - `server`: `HttpServer`, the Python class: settings, listening sockets, shutdown;
//! - `listener`: `Listener`, the listening sockets Python hands over, and accepting;
//! - `serving`: the accept loop and each connection it serves (TLS handshake, hyper, setting
//!   idle HTTP/1.1 connections aside);
//! - `finish_when`: `FinishWhen`, when a connection is asked to finish, and when an idle
//!   HTTP/1.1 connection is set aside;
//! - `connection`: `Connection`, one connection as its requests see it;
//! - `app_calls`: `AppCalls`, the app calls running for a connection, up to its stream limit;
//! - `request`: one request, from the checks before the app to the app's coroutine;
//! - `streams`: `OpenStreams`, the requests (HTTP/2 streams) in progress on a connection;
//! - `heads`: the raw request heads, recorded as hyper reads them (header order, framing);
//! - `recording_io`: `RecordingIo`, the socket as hyper reads it, through the head recorder;
//!   it also tells HTTP/1.1 from HTTP/2 by the client's first bytes, and gathers HTTP/2's writes;
//! - `exchange`: `Exchange`, what hyper's side and the app's side share for one request;
//! - `callables`: the ASGI `receive` / `send` callables (`HttpReceive`, `HttpSend`);
//! - `incoming`: `IncomingBody`, a request body from hyper or from an HTTP/3 stream;
//! - `body`: `ResponseBody`, the response body hyper polls (fed through `BodySource`);
//! - `tls`: rustls, certificates and ALPN;
//! - `app_done`: what happens when the app's coroutine finishes;
//! - `access_log`: the access log line.
//!
//! It builds on `asgi` and `bridge`; an upgrade request goes to `ws::upgrade` (`request`).

mod access_log;
mod app_calls;
mod app_done;
mod body;
mod callables;
mod connection;
mod exchange;
mod finish_when;
mod heads;
mod incoming;
mod listener;
mod recording_io;
mod request;
mod server;
mod serving;
mod streams;
mod tls;

use pyo3::prelude::*;

pub use self::server::HttpServer;

// What HTTP/3 shares: the request path, the response body, TLS files, the graceful drain.
pub(crate) use self::connection::Connection;
pub(crate) use self::incoming::{BoxError, IncomingBody};
pub(crate) use self::request::handle;
pub(crate) use self::server::StoppedSignal;
pub(crate) use self::serving::{cancel_running, drain_within};
pub(crate) use self::tls::TlsFiles;

/// Registers the server's classes on `module`.
pub fn register(module: &Bound<'_, PyModule>) -> PyResult<()> {
    module.add_class::<HttpServer>()?;
    Ok(())
}
