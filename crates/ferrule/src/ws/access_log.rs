//! The access lines of a WebSocket session: its handshake's outcome, then its close.

use pyo3::prelude::*;

use crate::asgi::access_log::{log_info, AccessEntry, AccessLog, Outcome};

/// The handshake's line: uvicorn's `CLIENT - "WebSocket /path" [accepted]` (or the refusal's
/// status in place of `[accepted]`), or `--access-log-format`'s with `%(s)s` the status sent
/// (101, 200 on an HTTP/2 stream, or the refusal's).
pub(super) fn log_handshake(
    log: AccessLog<'_>,
    access: &AccessEntry,
    accepted: bool,
    outcome: &Outcome<'_>,
) {
    let logger = log.logger;
    Python::attach(|py| match log.format {
        None if accepted => log_info(
            py,
            logger,
            (
                "%s - \"WebSocket %s\" [accepted]",
                &access.client,
                &access.target,
            ),
        ),
        None => log_info(
            py,
            logger,
            (
                "%s - \"WebSocket %s\" %d",
                &access.client,
                &access.target,
                outcome.status,
            ),
        ),
        Some(format) => log_info(py, logger, (access.render(format, outcome),)),
    });
}

/// The closing line of an accepted session, with its close code (`outcome.close_code`) and
/// how long it lasted: `CLIENT - "WebSocket /path" [closed 1000] 1.502s`, or
/// `--access-log-format`'s with `%(c)s` the close code and the time atoms the session's length.
pub(super) fn log_close(log: AccessLog<'_>, access: &AccessEntry, outcome: &Outcome<'_>) {
    let logger = log.logger;
    Python::attach(|py| match log.format {
        None => log_info(
            py,
            logger,
            (
                "%s - \"WebSocket %s\" [closed %d] %.3fs",
                &access.client,
                &access.target,
                outcome.close_code.unwrap_or(1006),
                access.elapsed().as_secs_f64(),
            ),
        ),
        Some(format) => log_info(py, logger, (access.render(format, outcome),)),
    });
}
