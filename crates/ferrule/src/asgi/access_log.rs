//! `AccessEntry`: what an access line needs of a request, captured before the app has it, and
//! writing a line on the `ferrule.access` logger.

use std::time::{Duration, Instant, SystemTime};

use http::{HeaderValue, Method, Version};
use pyo3::call::PyCallArgs;
use pyo3::intern;
use pyo3::prelude::*;

use super::access_format::{basic_auth_user, AccessFields, AccessFormat};
use super::conn::ConnInfo;
use super::proxy::Forwarded;

/// Where a server's access lines go: the `ferrule.access` logger, when access logging is on,
/// and `--access-log-format`, when one was given (else uvicorn's line).
#[derive(Clone, Copy)]
pub struct AccessLog<'a> {
    pub logger: &'a Py<PyAny>,
    pub format: Option<&'a AccessFormat>,
}

/// What the access line of one request (or WebSocket session) needs of its request. Made only
/// when the access log is on.
pub struct AccessEntry {
    /// `host:port` of the client, `-` if unknown, as uvicorn's line starts.
    pub client: String,
    pub method: Method,
    /// The request target (path and query) as the client sent it.
    pub target: String,
    /// The HTTP version as the line writes it after `HTTP/`.
    pub version: &'static str,
    received: Instant,
    received_at: SystemTime,
    /// The rest only with `--access-log-format`, and only what it names.
    user: Option<String>,
    request_headers: Vec<Option<HeaderValue>>,
}

/// How a request ended, for its access line.
pub struct Outcome<'a> {
    pub status: u16,
    pub body_bytes: u64,
    /// A WebSocket session's close code, on its closing line.
    pub close_code: Option<u16>,
    /// The values of the format's `response_headers`, index for index.
    pub response_headers: &'a [Option<HeaderValue>],
}

impl AccessEntry {
    pub fn new(
        parts: &http::request::Parts,
        conn: &ConnInfo,
        forwarded: &Forwarded,
        format: Option<&AccessFormat>,
    ) -> Self {
        let target = parts
            .uri
            .path_and_query()
            .map_or_else(|| parts.uri.path().to_owned(), |pq| pq.to_string());
        let (user, request_headers) = match format {
            Some(format) => (
                format
                    .wants_user()
                    .then(|| basic_auth_user(&parts.headers))
                    .flatten(),
                AccessFormat::pick(&format.request_headers, &parts.headers),
            ),
            None => (None, Vec::new()),
        };
        Self {
            client: conn.client_label(forwarded),
            method: parts.method.clone(),
            target,
            version: http_version(parts.version),
            received: Instant::now(),
            received_at: SystemTime::now(),
            user,
            request_headers,
        }
    }

    /// Time since the request arrived.
    pub fn elapsed(&self) -> Duration {
        self.received.elapsed()
    }

    /// The line `format` makes of this request and its `outcome`.
    pub fn render(&self, format: &AccessFormat, outcome: &Outcome<'_>) -> String {
        let client = self
            .client
            .rsplit_once(':')
            .and_then(|(host, port)| Some((host, port.parse().ok()?)));
        format.render(&AccessFields {
            client,
            method: self.method.as_str(),
            target: &self.target,
            version: self.version,
            user: self.user.as_deref(),
            received_at: self.received_at,
            elapsed: self.elapsed(),
            status: outcome.status,
            body_bytes: outcome.body_bytes,
            close_code: outcome.close_code,
            request_headers: &self.request_headers,
            response_headers: outcome.response_headers,
        })
    }
}

/// Logs `args` (a message and its arguments) at INFO on the access logger; what logging
/// raises is reported as unraisable, never to the app.
pub fn log_info<'py>(py: Python<'py>, logger: &Py<PyAny>, args: impl PyCallArgs<'py>) {
    if let Err(err) = logger.bind(py).call_method1(intern!(py, "info"), args) {
        err.write_unraisable(py, None);
    }
}

/// The HTTP version as the access line writes it (`HTTP/1.1`).
fn http_version(version: Version) -> &'static str {
    match version {
        Version::HTTP_10 => "1.0",
        Version::HTTP_09 => "0.9",
        Version::HTTP_2 => "2",
        Version::HTTP_3 => "3",
        _ => "1.1",
    }
}
