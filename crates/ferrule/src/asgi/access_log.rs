//! `AccessEntry`: what an access line needs of a request, captured before the app has it, and
//! `AccessLog`, where the line goes (`access_line` writes it).

use std::time::{Duration, Instant, SystemTime};

use http::{HeaderName, HeaderValue, Method, Version};
use pyo3::prelude::*;

use super::access_format::{basic_auth_user, AccessFields, AccessFormat};
use super::access_route::FastAccess;
use super::conn::ConnInfo;
use super::proxy::Forwarded;

/// Where a server's access lines go while access logging is on and INFO taken: the
/// `ferrule.access` logger, or the fast path's writer; in `--access-log-format`'s atoms (else
/// uvicorn's line), or as JSON objects.
#[derive(Clone, Copy)]
pub struct AccessLog<'a> {
    pub logger: &'a Py<PyAny>,
    pub format: Option<&'a AccessFormat>,
    /// Set while lines are written here rather than through `logger`.
    pub fast: Option<&'a FastAccess>,
    /// `--log-format json`: lines are JSON objects.
    pub json: bool,
    /// `--access-log-headers`: the request headers a JSON line, or a record, also gives.
    pub headers: &'a [HeaderName],
    /// Whether a record carries the line's fields as attributes (they cost the logging path
    /// a third more, so only where a formatter or handler other than ferrule's may read them).
    pub fields: bool,
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
    /// The rest only with `--access-log-format`, and only what it names.
    user: Option<String>,
    request_headers: Vec<Option<HeaderValue>>,
    user_agent: Option<HeaderValue>,
    referer: Option<HeaderValue>,
    /// The values of `--access-log-headers`, index for index.
    chosen_headers: Vec<Option<HeaderValue>>,
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
        log: &AccessLog<'_>,
    ) -> Self {
        let format = log.format;
        let target = parts
            .uri
            .path_and_query()
            .map_or_else(|| parts.uri.path(), |pq| pq.as_str())
            .to_owned();
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
        // Only a JSON line and a record's attributes give these: two header lookups and two
        // copies a request that uvicorn's line does without.
        let detailed = log.json || log.fields;
        let header = |name| detailed.then(|| parts.headers.get(name).cloned()).flatten();
        Self {
            client: conn.client_label(forwarded),
            method: parts.method.clone(),
            target,
            version: http_version(parts.version),
            received: Instant::now(),
            user,
            request_headers,
            user_agent: header(http::header::USER_AGENT),
            referer: header(http::header::REFERER),
            chosen_headers: AccessFormat::pick(log.headers, &parts.headers),
        }
    }

    /// The request's User-Agent, where it is text.
    pub fn user_agent(&self) -> Option<&str> {
        self.user_agent.as_ref().and_then(|v| v.to_str().ok())
    }

    /// The request's Referer, where it is text.
    pub fn referer(&self) -> Option<&str> {
        self.referer.as_ref().and_then(|v| v.to_str().ok())
    }

    /// The values of `--access-log-headers` (as text; `None` for one absent or not text).
    pub fn chosen_header_values(&self) -> impl Iterator<Item = Option<&str>> {
        self.chosen_headers
            .iter()
            .map(|value| value.as_ref().and_then(|v| v.to_str().ok()))
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
            // One clock read fewer per request: only a format's %(t)s wants the wall clock.
            received_at: SystemTime::now() - self.elapsed(),
            elapsed: self.elapsed(),
            status: outcome.status,
            body_bytes: outcome.body_bytes,
            close_code: outcome.close_code,
            request_headers: &self.request_headers,
            response_headers: outcome.response_headers,
        })
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
