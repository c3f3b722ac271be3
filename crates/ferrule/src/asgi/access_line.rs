//! The access line of one request or WebSocket session, made three ways that agree: as text
//! (uvicorn's line, byte for byte what ferrule's logging formatter writes), as a JSON object
//! (`--log-format json`), and as the record's arguments and attributes for Python's logging;
//! and `AccessLog::write`, which writes it on the fast path or logs it.

use std::io::Write;

use http::HeaderName;
use pyo3::call::PyCallArgs;
use pyo3::intern;
use pyo3::prelude::*;
use pyo3::types::PyDict;

use crate::logs::JsonLine;

use super::access_log::{AccessEntry, AccessLog, Outcome};
use super::access_route::FastAccess;

impl AccessLog<'_> {
    /// Writes the line of `entry`'s request or session: here on the fast path (no Python);
    /// else through the logger, attaching to Python unless `py` says it is attached.
    pub fn write(
        &self,
        py: Option<Python<'_>>,
        entry: &AccessEntry,
        outcome: &Outcome<'_>,
        kind: LineKind,
    ) {
        let rendered = self.format.map(|format| entry.render(format, outcome));
        if let Some(fast) = self.fast {
            fast.writer.push(|buf| match self.json {
                true => write_json(buf, entry, outcome, kind, self.headers, fast),
                false => write_text(buf, entry, outcome, kind, rendered.as_deref(), fast),
            });
            return;
        }
        let log = |py: Python<'_>| self.log(py, entry, outcome, kind, rendered.as_deref());
        match py {
            Some(py) => log(py),
            None => Python::attach(log),
        }
    }

    /// The logging path: uvicorn's record, whose arguments (client, method, target, HTTP
    /// version, status) `--log-config` formatters may read, or the format's line; with the
    /// JSON object's fields as attributes.
    fn log(
        &self,
        py: Python<'_>,
        entry: &AccessEntry,
        outcome: &Outcome<'_>,
        kind: LineKind,
        rendered: Option<&str>,
    ) {
        let extra = match self.fields {
            true => match attributes(py, entry, outcome, kind, self.headers) {
                Ok(extra) => Some(extra),
                Err(err) => return err.write_unraisable(py, None),
            },
            false => None,
        };
        let (client, target) = (&entry.client, &entry.target);
        match (rendered, kind) {
            (Some(line), _) => log_info(py, self.logger, (line,), extra),
            (None, LineKind::Http) => log_info(
                py,
                self.logger,
                (
                    "%s - \"%s %s HTTP/%s\" %d",
                    client,
                    entry.method.as_str(),
                    target,
                    entry.version,
                    outcome.status,
                ),
                extra,
            ),
            (None, LineKind::WsAccepted) => log_info(
                py,
                self.logger,
                ("%s - \"WebSocket %s\" [accepted]", client, target),
                extra,
            ),
            (None, LineKind::WsRefused) => log_info(
                py,
                self.logger,
                ("%s - \"WebSocket %s\" %d", client, target, outcome.status),
                extra,
            ),
            (None, LineKind::WsClosed) => log_info(
                py,
                self.logger,
                (
                    "%s - \"WebSocket %s\" [closed %d] %.3fs",
                    client,
                    target,
                    outcome.close_code.unwrap_or(1006),
                    entry.elapsed().as_secs_f64(),
                ),
                extra,
            ),
        }
    }
}

/// Logs `args` (a message and its arguments) at INFO on the access logger, with `extra`'s
/// attributes if any; what logging raises is reported as unraisable, never to the app.
fn log_info<'py>(
    py: Python<'py>,
    logger: &Py<PyAny>,
    args: impl PyCallArgs<'py>,
    extra: Option<Bound<'py, PyDict>>,
) {
    let logger = logger.bind(py);
    let logged = match extra {
        Some(extra) => {
            let kwargs = PyDict::new(py);
            kwargs
                .set_item(intern!(py, "extra"), extra)
                .and_then(|_| logger.call_method(intern!(py, "info"), args, Some(&kwargs)))
        }
        None => logger.call_method1(intern!(py, "info"), args),
    };
    if let Err(err) = logged {
        err.write_unraisable(py, None);
    }
}

/// Which line of a request or session.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum LineKind {
    Http,
    WsAccepted,
    /// A handshake the app refused (or that failed): its status.
    WsRefused,
    /// An accepted session's end: its close code and length.
    WsClosed,
}

const RESET: &str = "\x1b[0m";
const BOLD: &str = "\x1b[1m";
/// The INFO level name, green, as ferrule's formatter paints it.
const INFO_COLOURED: &str = "\x1b[32mINFO\x1b[0m:     ";
const INFO_PLAIN: &str = "INFO:     ";

/// The status's colour by its hundreds, as ferrule's formatter has them.
fn status_colour(status: u16) -> Option<&'static str> {
    match status / 100 {
        1 => Some("\x1b[97m"),
        2 => Some("\x1b[32m"),
        3 => Some("\x1b[33m"),
        4 => Some("\x1b[31m"),
        5 => Some("\x1b[91m"),
        _ => None,
    }
}

/// The message of a line without `--access-log-format` (the logging path's `%` format and
/// arguments, applied), with `phrase` after an HTTP status; with `colours` the request and
/// status painted as the text formatter paints them.
fn write_message(
    buf: &mut Vec<u8>,
    entry: &AccessEntry,
    outcome: &Outcome<'_>,
    kind: LineKind,
    phrase: Option<&str>,
    colours: bool,
) {
    // Pieces joined by hand, not `write!`: the formatting machinery was half the line's cost.
    let mut number = itoa::Buffer::new();
    buf.extend_from_slice(entry.client.as_bytes());
    buf.extend_from_slice(b" - \"");
    match kind {
        LineKind::Http => {
            if colours {
                buf.extend_from_slice(BOLD.as_bytes());
            }
            buf.extend_from_slice(entry.method.as_str().as_bytes());
            buf.push(b' ');
            buf.extend_from_slice(entry.target.as_bytes());
            buf.extend_from_slice(b" HTTP/");
            buf.extend_from_slice(entry.version.as_bytes());
            if colours {
                buf.extend_from_slice(RESET.as_bytes());
            }
            buf.extend_from_slice(b"\" ");
            let colour = status_colour(outcome.status).filter(|_| colours);
            if let Some(colour) = colour {
                buf.extend_from_slice(colour.as_bytes());
            }
            buf.extend_from_slice(number.format(outcome.status).as_bytes());
            if let Some(phrase) = phrase {
                buf.push(b' ');
                buf.extend_from_slice(phrase.as_bytes());
            }
            if colour.is_some() {
                buf.extend_from_slice(RESET.as_bytes());
            }
        }
        LineKind::WsAccepted | LineKind::WsRefused | LineKind::WsClosed => {
            buf.extend_from_slice(b"WebSocket ");
            buf.extend_from_slice(entry.target.as_bytes());
            buf.extend_from_slice(b"\" ");
            let _ = match kind {
                LineKind::WsAccepted => write!(buf, "[accepted]"),
                LineKind::WsRefused => write!(buf, "{}", outcome.status),
                _ => write!(
                    buf,
                    "[closed {}] {:.3}s",
                    outcome.close_code.unwrap_or(1006),
                    entry.elapsed().as_secs_f64()
                ),
            };
        }
    }
}

/// The text line, `INFO:     ` and the message (or `--access-log-format`'s line), ending
/// with `\n`.
pub fn write_text(
    buf: &mut Vec<u8>,
    entry: &AccessEntry,
    outcome: &Outcome<'_>,
    kind: LineKind,
    rendered: Option<&str>,
    fast: &FastAccess,
) {
    let prefix = if fast.colours {
        INFO_COLOURED
    } else {
        INFO_PLAIN
    };
    buf.extend_from_slice(prefix.as_bytes());
    match rendered {
        Some(line) => buf.extend_from_slice(line.as_bytes()),
        None => {
            let phrase = fast.phrase(outcome.status);
            write_message(buf, entry, outcome, kind, phrase, fast.colours);
        }
    }
    buf.push(b'\n');
}

/// The line as one JSON object (with `headers`, the request headers `--access-log-headers`
/// names), ending with `\n`.
pub fn write_json(
    buf: &mut Vec<u8>,
    entry: &AccessEntry,
    outcome: &Outcome<'_>,
    kind: LineKind,
    headers: &[HeaderName],
    fast: &FastAccess,
) {
    let mut message = Vec::with_capacity(96);
    let phrase = fast
        .phrase(outcome.status)
        .filter(|_| kind == LineKind::Http);
    write_message(&mut message, entry, outcome, kind, phrase, false);
    let message = String::from_utf8_lossy(&message);
    let mut line = JsonLine::start(buf, "INFO", "uvicorn.access");
    line.string("message", &message);
    let fields = Fields::of(entry, outcome, kind);
    line.string("type", fields.kind);
    line.string("client", &entry.client);
    line.string("method", entry.method.as_str());
    line.string("path", fields.path);
    line.string("query", fields.query);
    line.string("http_version", entry.version);
    line.number("status", u64::from(outcome.status));
    line.number("bytes", outcome.body_bytes);
    line.seconds("duration", fields.duration);
    line.optional("user_agent", entry.user_agent());
    line.optional("referer", entry.referer());
    if !headers.is_empty() {
        let values = entry.chosen_header_values();
        line.object("headers", headers.iter().map(|h| h.as_str()).zip(values));
    }
    if let Some(code) = fields.close_code {
        line.number("close_code", u64::from(code));
    }
    line.end();
}

/// The fields every form of the line has beyond the entry's own.
struct Fields<'a> {
    kind: &'static str,
    path: &'a str,
    query: &'a str,
    duration: f64,
    close_code: Option<u16>,
}

impl<'a> Fields<'a> {
    fn of(entry: &'a AccessEntry, outcome: &Outcome<'_>, kind: LineKind) -> Self {
        let (path, query) = entry.target.split_once('?').unwrap_or((&entry.target, ""));
        Self {
            kind: if kind == LineKind::Http {
                "http"
            } else {
                "websocket"
            },
            path,
            query,
            duration: entry.elapsed().as_secs_f64(),
            close_code: (kind == LineKind::WsClosed).then(|| outcome.close_code.unwrap_or(1006)),
        }
    }
}

/// The record's attributes on the logging path (`extra=`): the JSON object's fields, so a
/// formatter of the user's can name them (`%(status)s`).
pub fn attributes<'py>(
    py: Python<'py>,
    entry: &AccessEntry,
    outcome: &Outcome<'_>,
    kind: LineKind,
    headers: &[HeaderName],
) -> PyResult<Bound<'py, PyDict>> {
    let fields = Fields::of(entry, outcome, kind);
    let extra = PyDict::new(py);
    extra.set_item("type", fields.kind)?;
    extra.set_item("client", &entry.client)?;
    extra.set_item("method", entry.method.as_str())?;
    extra.set_item("path", fields.path)?;
    extra.set_item("query", fields.query)?;
    extra.set_item("http_version", entry.version)?;
    extra.set_item("status", outcome.status)?;
    extra.set_item("bytes", outcome.body_bytes)?;
    extra.set_item("duration", fields.duration)?;
    extra.set_item("user_agent", entry.user_agent())?;
    extra.set_item("referer", entry.referer())?;
    if !headers.is_empty() {
        let values = PyDict::new(py);
        for (name, value) in headers.iter().zip(entry.chosen_header_values()) {
            values.set_item(name.as_str(), value)?;
        }
        extra.set_item("headers", values)?;
    }
    if let Some(code) = fields.close_code {
        extra.set_item("close_code", code)?;
    }
    Ok(extra)
}
