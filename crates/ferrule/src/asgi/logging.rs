//! Logging what an app's coroutine raised.

use pyo3::intern;
use pyo3::prelude::*;
use pyo3::types::PyDict;

use super::disconnected::ClientDisconnected;
use super::handles::PyHandles;

/// Logs what an app's coroutine raised: a traceback at ERROR, except for `send()`'s "client
/// went away" let through, which is routine (INFO, no traceback).
pub fn log_app_exception(py: Python<'_>, handles: &PyHandles, error: PyErr) {
    if error.is_instance_of::<ClientDisconnected>(py) {
        let _ = handles.error_logger.bind(py).call_method1(
            intern!(py, "info"),
            ("Client disconnected before the response completed",),
        );
        return;
    }
    if error.is_instance_of::<pyo3::exceptions::asyncio::CancelledError>(py) {
        // The server cancelled it (a shutdown past its timeout, or forced), and said so once.
        let _ = handles
            .error_logger
            .bind(py)
            .call_method1(intern!(py, "info"), ("ASGI application cancelled",));
        return;
    }
    let kwargs = PyDict::new(py);
    // into_value attaches the traceback to the exception, which logging then prints.
    let logged = kwargs
        .set_item(intern!(py, "exc_info"), error.into_value(py))
        .and_then(|_| {
            handles.error_logger.bind(py).call_method(
                intern!(py, "error"),
                ("Exception in ASGI application",),
                Some(&kwargs),
            )
        });
    if let Err(err) = logged {
        err.write_unraisable(py, None);
    }
}

/// Logs `line` on the error logger at `level` (a `logging` level number), as uvicorn logs its
/// connection events there.
pub fn log_line(handles: &PyHandles, level: u8, line: &str) {
    Python::attach(|py| {
        let logged = handles
            .error_logger
            .bind(py)
            .call_method1(intern!(py, "log"), (level, line));
        if let Err(err) = logged {
            err.write_unraisable(py, None);
        }
    });
}
