//! What happens when an app's coroutine finishes: make sure the client has an answer, log a
//! traceback for a failure, write the access log line.

use std::sync::Arc;

use pyo3::intern;
use pyo3::prelude::*;
use pyo3::types::PyDict;

use super::access_log::{log_access, AccessInfo};
use super::disconnected::ClientDisconnected;
use super::exchange::Exchange;
use super::shared::ServerShared;

/// The `Completion::Callback` of every request's job.
pub fn on_app_done(
    py: Python<'_>,
    exchange: &Arc<Exchange>,
    access: Option<&AccessInfo>,
    result: PyResult<Py<PyAny>>,
) {
    let server = &exchange.server;
    server.request_finished();
    let failed = result.is_err();
    let (status, problem) = exchange.finish_app(py, failed);
    if let Err(error) = result {
        log_app_exception(py, server, error);
    } else if let Some(problem) = problem {
        let _ = server
            .error_logger
            .bind(py)
            .call_method1(intern!(py, "error"), (problem,));
    }
    log_access(py, server, access, status);
}

/// Logs what an app's coroutine raised: a traceback at ERROR, except for `send()`'s "client
/// went away" let through, which is routine (INFO, no traceback).
pub fn log_app_exception(py: Python<'_>, server: &ServerShared, error: PyErr) {
    if error.is_instance_of::<ClientDisconnected>(py) {
        let _ = server.error_logger.bind(py).call_method1(
            intern!(py, "info"),
            ("Client disconnected before the response completed",),
        );
        return;
    }
    let kwargs = PyDict::new(py);
    // into_value attaches the traceback to the exception, which logging then prints.
    let logged = kwargs
        .set_item(intern!(py, "exc_info"), error.into_value(py))
        .and_then(|_| {
            server.error_logger.bind(py).call_method(
                intern!(py, "error"),
                ("Exception in ASGI application",),
                Some(&kwargs),
            )
        });
    if let Err(err) = logged {
        err.write_unraisable(py, None);
    }
}
