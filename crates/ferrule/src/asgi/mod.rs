//! The ASGI plumbing HTTP and WebSockets share, built on `bridge` alone:
//! - `server`: `Server`, what every connection and request of one server shares, made of
//!   - `settings`: `Settings`, what the server was configured with;
//!   - `handles`: `PyHandles`, the Python objects it calls or hands to the app;
//!   - `live`: `LiveState`, what changes as it runs (requests in flight, stopping);
//!   - `diagnostics`: `Diagnostics`, the benchmark's hooks answered from Rust;
//!   - with `--metrics`, the worker's slot (`metrics::WorkerMetrics`);
//! - `conn`: `ConnInfo`, one connection's two ends;
//! - `access_format`: `AccessFormat`, an `--access-log-format` parsed into its atoms;
//! - `access_log`: `AccessEntry`, what an access line needs of a request, and writing one;
//! - `access_line`: the line itself, as text, as JSON, as a record's attributes;
//! - `access_route`: `AccessRoute`, whether lines go through Python's logging or the fast path;
//! - `raw_head`: `RawHead`, a request head as the client sent it;
//! - `proxy`: what a trusted proxy's `X-Forwarded-*` headers change in the scope;
//! - `scope`: the ASGI scope of a request;
//! - `tls_scope`: `TlsScope`, the scope's TLS extension for one connection;
//! - `messages`: reading the app's messages (optional fields, headers);
//! - `responses`: responses the server makes itself;
//! - `disconnected`: `ClientDisconnected`, what `send()` raises once the client has gone;
//! - `logging`: logging what an app raised;
//! - `levels`: the log level numbers, TRACE's shared with Python;
//! - `gil_lock`: locking what Python callables and tokio tasks share, never across the GIL.

pub(crate) mod access_format;
pub(crate) mod access_line;
pub(crate) mod access_log;
pub(crate) mod access_route;
pub(crate) mod conn;
pub(crate) mod diagnostics;
pub(crate) mod disconnected;
pub(crate) mod gil_lock;
pub(crate) mod handles;
pub(crate) mod levels;
pub(crate) mod live;
pub(crate) mod logging;
pub(crate) mod messages;
pub(crate) mod proxy;
pub(crate) mod raw_head;
pub(crate) mod responses;
pub(crate) mod scope;
pub(crate) mod server;
pub(crate) mod settings;
pub(crate) mod tls_scope;

use pyo3::prelude::*;

pub use self::disconnected::ClientDisconnected;

/// Registers the exception the ASGI callables raise, the checks of the access log format and
/// the compressed types, and the facts Python's settings take from here (TRACE, the smallest
/// head limit, `--http`'s values, `--compress`'s codings and levels), on `module`.
pub fn register(module: &Bound<'_, PyModule>) -> PyResult<()> {
    module.add("TRACE", levels::TRACE)?;
    module.add("MIN_HEAD_SIZE", settings::MIN_HEAD_SIZE)?;
    module.add(
        "HTTP_VERSIONS",
        pyo3::types::PyTuple::new(module.py(), settings::HTTP_VERSIONS)?,
    )?;
    // `--compress`'s codings and, for each, its lowest, highest and default level.
    let levels = pyo3::types::PyDict::new(module.py());
    for coding in crate::compress::Coding::ALL {
        levels.set_item(coding.name(), coding.levels())?;
    }
    module.add("COMPRESS_LEVELS", levels)?;
    module.add(
        "ClientDisconnected",
        module.py().get_type::<ClientDisconnected>(),
    )?;
    module.add_function(pyo3::wrap_pyfunction!(
        access_format::check_access_log_format,
        module
    )?)?;
    module.add_function(pyo3::wrap_pyfunction!(
        settings::check_compress_types,
        module
    )?)?;
    Ok(())
}
