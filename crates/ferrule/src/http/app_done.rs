//! What happens when an app's coroutine finishes: make sure the client has an answer, log a
//! traceback for a failure, write the access log line.

use std::sync::Arc;

use pyo3::intern;
use pyo3::prelude::*;

use crate::asgi::logging::log_app_exception;
use crate::bridge::trace;

use super::access_log::{log_access, AccessInfo};
use super::exchange::Exchange;

/// The `Completion::Callback` of every request's job.
pub fn on_app_done(
    py: Python<'_>,
    exchange: &Arc<Exchange>,
    access: Option<&AccessInfo>,
    result: PyResult<Py<PyAny>>,
) {
    let server = &exchange.server;
    server.state.request_finished();
    let failed = result.is_err();
    let (status, problem) = exchange.finish_app(py, failed);
    if let Some(metrics) = &server.metrics {
        let (protocol, received) = exchange.started;
        let nanos = trace::now_mark().saturating_sub(received);
        metrics.record_request(protocol, status, Some(nanos));
    }
    if let Err(error) = result {
        log_app_exception(py, &server.py, error);
    } else if let Some(problem) = problem {
        let _ = server
            .py
            .error_logger
            .bind(py)
            .call_method1(intern!(py, "error"), (problem,));
    }
    log_access(py, &server.py, access, status);
}
