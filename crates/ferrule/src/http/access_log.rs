//! The access log line of one request.

use http::HeaderValue;
use pyo3::prelude::*;

use crate::asgi::access_log::{log_info, AccessEntry, AccessLog, Outcome};

/// Writes the request's access line: uvicorn's, whose record arguments (client, method,
/// target, HTTP version, status) `--log-config` formatters may read, or `--access-log-format`'s.
pub(super) fn log_access(
    py: Python<'_>,
    log: AccessLog<'_>,
    access: &AccessEntry,
    status: u16,
    body_bytes: u64,
    response_headers: &[Option<HeaderValue>],
) {
    let logger = log.logger;
    match log.format {
        None => log_info(
            py,
            logger,
            (
                "%s - \"%s %s HTTP/%s\" %d",
                &access.client,
                access.method.as_str(),
                &access.target,
                access.version,
                status,
            ),
        ),
        Some(format) => {
            let outcome = Outcome {
                status,
                body_bytes,
                close_code: None,
                response_headers,
            };
            log_info(py, logger, (access.render(format, &outcome),));
        }
    }
}
