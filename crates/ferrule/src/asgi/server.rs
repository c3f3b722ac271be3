//! `ServerShared`: what every connection and request of one server shares, with the HTTP
//! versions and WebSocket pings it was made with.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use http::{HeaderMap, HeaderName, HeaderValue};
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyString};
use tokio::sync::watch;

use crate::bridge::{self, RequestContext};

use super::proxy::TrustedProxies;
use super::scope::ScopeTemplate;

/// What every connection and request of one server shares.
pub struct ServerShared {
    pub bridge: Arc<bridge::Shared>,
    pub app: Py<PyAny>,
    pub root_path: Py<PyString>,
    pub state: Option<Py<PyDict>>,
    pub scope_template: ScopeTemplate,
    pub request_context: RequestContext,
    pub error_logger: Py<PyAny>,
    /// Peers whose `X-Forwarded-For` / `X-Forwarded-Proto` the scope follows.
    pub proxies: TrustedProxies,
    /// `logging.getLogger("ferrule.access")` when access logging is on and INFO is enabled.
    pub access_logger: Option<Py<PyAny>>,
    /// A done asyncio future every non-blocking `send()` returns (awaiting it never waits).
    pub done_future: Py<PyAny>,
    pub(crate) limit_concurrency: Option<usize>,
    /// Largest request body accepted, in bytes: past it the client gets 413.
    pub limit_request_body: Option<u64>,
    /// Largest request line plus headers, in bytes: past it the client gets 431 (or 414).
    pub(crate) max_head_size: usize,
    /// Open connections allowed at once; accepting waits for one to close past it.
    pub(crate) max_connections: usize,
    pub(crate) in_flight: AtomicUsize,
    pub(crate) keep_alive: Duration,
    pub(crate) server_header: Option<HeaderValue>,
    /// `--header NAME:VALUE`: added to every response.
    pub(crate) default_headers: Vec<(HeaderName, HeaderValue)>,
    /// Whether hyper adds a `date` header to responses that lack one (`--no-date-header`).
    pub(crate) date_header: bool,
    /// A path answered "Hello, world!" from Rust without calling the app: the benchmark's
    /// ceiling for the HTTP stack alone (`--rust-hello-route`).
    pub(crate) rust_hello_route: Option<String>,
    /// A path answered from Rust with the bridge's counters as JSON (`--stats-route`), for the
    /// benchmark's GIL-relay figures.
    pub(crate) stats_route: Option<String>,
    pub(crate) versions: HttpVersions,
    pub(crate) tls: Option<tokio_rustls::TlsAcceptor>,
    /// The largest WebSocket message, when WebSockets are on (`--ws auto`).
    pub(crate) ws_max_size: Option<usize>,
    pub ws_ping: WsPing,
    /// Client messages queued for the app's `receive()` before the socket stops being read.
    pub ws_max_queue: usize,
    /// Becomes `Some(timeout)` when shutdown starts (WebSockets then close with 1012).
    pub stopping: watch::Receiver<Option<Option<Duration>>>,
    /// `--limit-max-requests`: requests still to accept before the server stops itself, and
    /// the graceful timeout it stops with.
    pub(crate) requests_left: Option<(AtomicU64, Option<Duration>)>,
    pub(crate) stop: watch::Sender<Option<Option<Duration>>>,
    /// WebSocket sessions whose app has not returned. Upgraded connections leave hyper's
    /// graceful shutdown, so shutdown waits for this to reach 0 as well.
    pub ws_sessions: watch::Sender<usize>,
}

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

impl ServerShared {
    /// The headers every response gets: `server` unless the app set one or it is off, then
    /// the `--header` ones, added after the app's (as uvicorn does, a name may then repeat).
    pub fn add_default_headers(&self, headers: &mut HeaderMap) {
        if let Some(value) = &self.server_header {
            headers
                .entry(http::header::SERVER)
                .or_insert_with(|| value.clone());
        }
        for (name, value) in &self.default_headers {
            headers.append(name.clone(), value.clone());
        }
    }

    /// How long a client may take to send a request head: the keep-alive timeout, at least 1 s.
    pub(crate) fn header_read_timeout(&self) -> Duration {
        self.keep_alive.max(Duration::from_secs(1))
    }

    /// Counts one request against `--limit-max-requests`; the one that reaches it starts a
    /// graceful shutdown (this request and those in flight are still answered).
    pub(crate) fn count_request(&self) {
        if let Some((left, graceful)) = &self.requests_left {
            let before =
                left.fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| n.checked_sub(1));
            if before == Ok(1) {
                self.stop.send_if_modified(|stop| {
                    let starting = stop.is_none();
                    if starting {
                        *stop = Some(*graceful);
                    }
                    starting
                });
            }
        }
    }

    pub fn request_finished(&self) {
        self.in_flight.fetch_sub(1, Ordering::AcqRel);
    }
}

/// The server's keepalive pings on each WebSocket (uvicorn's `--ws-ping-interval` and
/// `--ws-ping-timeout`): a peer that stops answering is found and closed with 1011.
#[derive(Clone, Copy)]
pub struct WsPing {
    /// Time between pings; `None`: no pings.
    pub interval: Option<Duration>,
    /// How long a ping may go unanswered; `None`: forever.
    pub timeout: Option<Duration>,
}

/// A timeout given from Python in seconds, `None` meaning none: refused if negative or not finite.
pub(crate) fn optional_seconds(seconds: Option<f64>, name: &str) -> PyResult<Option<Duration>> {
    seconds
        .map(Duration::try_from_secs_f64)
        .transpose()
        .map_err(|_| PyValueError::new_err(format!("{name} must be a number >= 0")))
}
