//! The access log line of one request.

use std::sync::Arc;

use http::{HeaderValue, Response};
use pyo3::prelude::*;

use crate::asgi::access_format::AccessFormat;
use crate::asgi::access_line::LineKind;
use crate::asgi::access_log::{AccessEntry, AccessLog, Outcome};
use crate::asgi::conn::ConnInfo;
use crate::asgi::server::Server;

use super::body::ResponseBody;

/// Writes the request's access line (`py`: already attached to Python, as on the loop's thread).
pub(super) fn log_access(
    py: Option<Python<'_>>,
    log: AccessLog<'_>,
    access: &AccessEntry,
    status: u16,
    body_bytes: u64,
    response_headers: &[Option<HeaderValue>],
) {
    let outcome = Outcome {
        status,
        body_bytes,
        close_code: None,
        response_headers,
    };
    log.write(py, access, &outcome, LineKind::Http);
}

/// The access line of a request the server answered without the app (a static file): on the
/// fast path written here; through logging, on the loop's thread where the bridge runs Python
/// there, else here with the GIL.
pub(super) fn log_answered(
    server: &Arc<Server>,
    conn: &ConnInfo,
    request: &http::request::Parts,
    response: &Response<ResponseBody>,
) {
    let Some(log) = server.access_log() else {
        return;
    };
    let forwarded = conn.forwarded(&request.headers, &server.settings);
    let entry = AccessEntry::new(request, conn, &forwarded, &log);
    let logged = log.format.map_or_else(Vec::new, |format| {
        AccessFormat::pick(&format.response_headers, response.headers())
    });
    let status = response.status().as_u16();
    let body_bytes = http_body::Body::size_hint(response.body())
        .exact()
        .unwrap_or(0);
    if log.fast.is_some() {
        return log_access(None, log, &entry, status, body_bytes, &logged);
    }
    let writing = server.clone();
    let write = move |py: Python<'_>| {
        if let Some(log) = writing.access_log() {
            log_access(Some(py), log, &entry, status, body_bytes, &logged);
        }
    };
    if server.bridge.starts_on_loop() {
        server.bridge.start_on_loop(Box::new(write));
    } else {
        Python::attach(write);
    }
}
