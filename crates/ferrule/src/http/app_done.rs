//! What happens when an app's coroutine finishes: make sure the client has an answer, log a
//! traceback for a failure, write the access log line (with the body bytes and response
//! headers it names, for `--access-log-format`).

use std::sync::Arc;

use pyo3::intern;
use pyo3::prelude::*;

use crate::asgi::access_log::AccessEntry;
use crate::asgi::logging::log_app_exception;
use crate::bridge::trace;

use super::access_log::log_access;
use super::exchange::Exchange;

/// The `Completion::Callback` of every request's job.
pub fn on_app_done(
    py: Python<'_>,
    exchange: &Arc<Exchange>,
    access: Option<&AccessEntry>,
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
    let (Some(access), Some(log)) = (access, server.access_log()) else {
        return;
    };
    let (body_bytes, response_headers) = {
        let mut state = exchange.lock_state(Some(py));
        let no_body = exchange.head_request || matches!(status, 204 | 304);
        let body_bytes = if no_body { 0 } else { state.body_sent };
        (body_bytes, std::mem::take(&mut state.logged_headers))
    };
    log_access(Some(py), log, access, status, body_bytes, &response_headers);
}
