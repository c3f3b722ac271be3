//! HTTP/3 over QUIC (`--http3`), on a UDP socket at the TLS listener's address, one file per
//! concern:
//! - `server`: `H3Server`, the Python class: the QUIC endpoint beside an `HttpServer`;
//! - `endpoint`: quinn's settings: TLS with ALPN `h3`, the idle timeout, stream limits;
//! - `serving`: the accept loop, each connection, GOAWAY and the graceful drain;
//! - `stream`: one request stream: its body into the shared request path, the response out.
//!
//! quinn is the QUIC, the h3 crate HTTP/3 and QPACK; the request itself (checks, scope,
//! `receive` / `send`, limits, pathsend, trailers) is `http`'s, shared with HTTP/1.1 and
//! HTTP/2 (`http::handle`).

mod endpoint;
mod server;
mod serving;
mod stream;

use pyo3::prelude::*;

pub use self::server::H3Server;

/// Registers the HTTP/3 server's class on `module`.
pub fn register(module: &Bound<'_, PyModule>) -> PyResult<()> {
    module.add_class::<H3Server>()?;
    Ok(())
}
