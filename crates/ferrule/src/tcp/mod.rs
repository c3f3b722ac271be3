//! The TCP transport under HTTP/1.1 and HTTP/2, one file per concern:
//! - `server`: `HttpServer`, the Python class: settings, listening sockets, shutdown;
//! - `listener`: `Listeners`, the listening sockets Python hands over, and accepting;
//! - `serving`: the accept loop and each connection it serves (TLS handshake, hyper, setting
//!   idle HTTP/1.1 connections aside);
//! - `finish_when`: `FinishWhen`, when a connection is asked to finish, and when an idle
//!   HTTP/1.1 connection is set aside;
//! - `header_timer`: `HeaderTimer`, hyper's timer for how long an HTTP/1.1 client may take over
//!   a request head, a tokio timer only for the heads that are slow to come;
//! - `recording_io`: `RecordingIo`, the socket as hyper reads it, through the head recorder;
//!   it also tells HTTP/1.1 from HTTP/2 by the client's first bytes, and gathers HTTP/2's writes;
//! - `proxy_protocol`: the PROXY protocol header a balancer may send first (`--proxy-protocol`);
//! - `tls`: rustls, certificates and ALPN;
//! - `woken_only`: `WokenOnly`, a future polled only on its own wakes (a connection's side
//!   branches: the stop, the timers).
//!
//! It hands each request to `http`'s request path.

mod finish_when;
mod header_timer;
mod listener;
mod proxy_protocol;
mod recording_io;
mod server;
mod serving;
mod tls;
mod woken_only;

use pyo3::prelude::*;

pub use self::server::HttpServer;

// What HTTP/3 shares: the server it rides beside, and its TLS files.
pub(crate) use self::server::StoppedSignal;
pub(crate) use self::tls::TlsFiles;

/// Registers the server's classes on `module`.
pub fn register(module: &Bound<'_, PyModule>) -> PyResult<()> {
    module.add_class::<HttpServer>()?;
    Ok(())
}
