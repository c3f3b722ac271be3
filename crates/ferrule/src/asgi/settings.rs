//! `Settings`: what the server was configured with, as plain Rust values, fixed once made.

use std::time::Duration;

use http::{HeaderMap, HeaderName, HeaderValue};
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;

use super::proxy::{Forwarded, TrustedProxies};

/// The server's settings.
pub struct Settings {
    /// Given as the scope's `root_path`, and prepended to its `path`.
    pub root_path: String,
    /// How long a connection may stay idle: between HTTP/1.1 requests, with no HTTP/2 stream in
    /// progress (and a PING unanswered), and for a request head to arrive (at least 1 s).
    pub timeout_keep_alive: Duration,
    /// Requests in progress at once; past it the client gets 503.
    pub limit_concurrency: Option<usize>,
    /// Largest request body accepted, in bytes: past it the client gets 413.
    pub limit_request_body: Option<u64>,
    /// Largest request line plus headers, in bytes: past it the client gets 431 (or 414).
    pub max_head_size: usize,
    /// Open connections allowed at once; accepting waits for one to close past it.
    pub connection_limit: usize,
    /// Whether each request is logged on `ferrule.access` (when INFO is enabled there).
    pub access_log: bool,
    /// Whether responses say `server: ferrule` (unless the app set a `server` header).
    pub server_header: bool,
    /// Whether hyper adds a `date` header to responses that lack one.
    pub date_header: bool,
    /// `--header NAME:VALUE`: added to every response.
    pub headers: Vec<(HeaderName, HeaderValue)>,
    /// Whether `X-Forwarded-For` / `X-Forwarded-Proto` from a trusted proxy change the scope.
    pub proxy_headers: bool,
    /// The peers whose forwarded headers are obeyed, when `proxy_headers` is on.
    pub trusted_proxies: TrustedProxies,
    /// The HTTP versions served.
    pub http: HttpVersions,
    /// Whether WebSocket upgrades are served.
    pub websockets: bool,
    /// The largest WebSocket message, in bytes.
    pub ws_max_size: usize,
    /// Client messages queued for the app's `receive()` before the socket stops being read.
    pub ws_max_queue: usize,
    /// Time between the server's pings on each WebSocket; `None`: no pings. A peer that stops
    /// answering is closed with 1011.
    pub ws_ping_interval: Option<Duration>,
    /// How long a ping may go unanswered; `None`: forever.
    pub ws_ping_timeout: Option<Duration>,
    /// Requests to serve before the server stops itself (`--limit-max-requests` with its jitter).
    pub max_requests: Option<u64>,
    /// How long shutdown waits for requests in progress before cancelling them; `None`: forever.
    pub timeout_graceful_shutdown: Option<Duration>,
    /// Whether each request runs in an empty contextvars context rather than a copy of the
    /// server's.
    pub reset_contextvars: bool,
}

/// The `server` header's value.
static SERVER: HeaderValue = HeaderValue::from_static("ferrule");

impl Settings {
    /// The headers every response gets: `server` unless the app set one or it is off, then
    /// the `--header` ones, added after the app's (as uvicorn does, a name may then repeat).
    pub fn add_default_headers(&self, headers: &mut HeaderMap) {
        if self.server_header {
            headers
                .entry(http::header::SERVER)
                .or_insert_with(|| SERVER.clone());
        }
        for (name, value) in &self.headers {
            headers.append(name.clone(), value.clone());
        }
    }

    /// How long a client may take to send a request head: the keep-alive timeout, at least 1 s.
    pub fn header_read_timeout(&self) -> Duration {
        self.timeout_keep_alive.max(Duration::from_secs(1))
    }

    /// What a trusted proxy's headers say of a request from `peer` (nothing when proxy headers
    /// are off or the peer is not trusted).
    pub fn forwarded(&self, peer: Option<&str>, headers: &HeaderMap) -> Forwarded {
        if !self.proxy_headers {
            return Forwarded::default();
        }
        self.trusted_proxies.forwarded(peer, headers)
    }
}

/// The smallest request head limit: hyper's read buffer (twice the limit) cannot be smaller
/// than 8 KiB.
pub const MIN_HEAD_SIZE: usize = 4096;

/// The HTTP versions `--http` allows.
#[derive(Clone, Copy)]
pub struct HttpVersions {
    pub h1: bool,
    pub h2: bool,
}

impl HttpVersions {
    pub(crate) fn from_option(http: &str) -> PyResult<Self> {
        match http {
            "auto" => Ok(Self { h1: true, h2: true }),
            "1" => Ok(Self {
                h1: true,
                h2: false,
            }),
            "2" => Ok(Self {
                h1: false,
                h2: true,
            }),
            _ => Err(PyValueError::new_err("http must be 'auto', '1' or '2'")),
        }
    }
}

/// A timeout given from Python in seconds, `None` meaning none: refused if negative or not finite.
pub(crate) fn optional_seconds(seconds: Option<f64>, name: &str) -> PyResult<Option<Duration>> {
    seconds
        .map(Duration::try_from_secs_f64)
        .transpose()
        .map_err(|_| PyValueError::new_err(format!("{name} must be a number >= 0")))
}
