//! `ClientDisconnected`: what `send()` raises once the client has gone.

use pyo3::exceptions::PyOSError;
use pyo3::prelude::*;

pyo3::create_exception!(
    ferrule,
    ClientDisconnected,
    PyOSError,
    "The client went away: raised by send() so the app stops producing."
);

/// What `send()` raises once the client has gone.
pub(crate) fn client_gone() -> PyErr {
    ClientDisconnected::new_err("the client disconnected")
}
