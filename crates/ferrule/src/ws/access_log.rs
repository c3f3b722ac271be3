//! The access lines of a WebSocket session: its handshake's outcome, then its close.

use crate::asgi::access_line::LineKind;
use crate::asgi::access_log::{AccessEntry, AccessLog, Outcome};

/// The handshake's line: uvicorn's `CLIENT - "WebSocket /path" [accepted]` (or the refusal's
/// status in place of `[accepted]`), or `--access-log-format`'s with `%(s)s` the status sent
/// (101, 200 on an HTTP/2 stream, or the refusal's).
pub(super) fn log_handshake(
    log: AccessLog<'_>,
    access: &AccessEntry,
    accepted: bool,
    outcome: &Outcome<'_>,
) {
    let kind = if accepted {
        LineKind::WsAccepted
    } else {
        LineKind::WsRefused
    };
    log.write(None, access, outcome, kind);
}

/// The closing line of an accepted session, with its close code (`outcome.close_code`) and
/// how long it lasted: `CLIENT - "WebSocket /path" [closed 1000] 1.502s`, or
/// `--access-log-format`'s with `%(c)s` the close code and the time atoms the session's length.
pub(super) fn log_close(log: AccessLog<'_>, access: &AccessEntry, outcome: &Outcome<'_>) {
    log.write(None, access, outcome, LineKind::WsClosed);
}
