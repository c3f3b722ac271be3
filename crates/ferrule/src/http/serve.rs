//! `HttpServer`: hyper's HTTP/1.1 on the bridge's tokio runtime. Each request's coroutine gets its
//! first drive on the tokio thread that parsed it; continuations run on the loop thread.

use std::convert::Infallible;
use std::future::Future;
use std::os::fd::RawFd;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::task::Poll;
use std::time::Duration;

use http::header::CONTENT_LENGTH;
use http::{HeaderMap, HeaderName, HeaderValue, Request, Response, StatusCode};
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto;
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict, PyString};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::sync::{oneshot, watch, OwnedSemaphorePermit, Semaphore};

use crate::bridge::{self, trace, Bridge, Completion, NativeFuture, RequestContext, ResumeVia};
use crate::ws;

use super::callbacks::{on_app_done, AccessInfo};
use super::heads::{RawHead, Recorder, RecordingIo};
use super::io::{
    closing_response, plain_response, server_response, Exchange, Receive, ResponseBody, Send,
};
use super::proxy::{Forwarded, TrustedProxies};
use super::tls::{self, ClientCerts};
use super::types::{build_scope, ConnInfo, ScopeTemplate};

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
    limit_concurrency: Option<usize>,
    /// Largest request body accepted, in bytes: past it the client gets 413.
    pub limit_request_body: Option<u64>,
    /// Largest request line plus headers, in bytes: past it the client gets 431 (or 414).
    max_head_size: usize,
    /// Open connections allowed at once; accepting waits for one to close past it.
    max_connections: usize,
    in_flight: AtomicUsize,
    keep_alive: Duration,
    server_header: Option<HeaderValue>,
    /// `--header NAME:VALUE`: added to every response.
    default_headers: Vec<(HeaderName, HeaderValue)>,
    /// Whether hyper adds a `date` header to responses that lack one (`--no-date-header`).
    date_header: bool,
    /// A path answered "Hello, world!" from Rust without calling the app: the benchmark's
    /// ceiling for the HTTP stack alone (`--rust-hello-route`).
    rust_hello_route: Option<String>,
    /// A path answered from Rust with the bridge's counters as JSON (`--stats-route`), for the
    /// benchmark's GIL-relay figures.
    stats_route: Option<String>,
    versions: HttpVersions,
    tls: Option<tokio_rustls::TlsAcceptor>,
    /// The largest WebSocket message, when WebSockets are on (`--ws auto`).
    ws_max_size: Option<usize>,
    pub ws_ping: WsPing,
    /// Client messages queued for the app's `receive()` before the socket stops being read.
    pub ws_max_queue: usize,
    /// Becomes `Some(timeout)` when shutdown starts (WebSockets then close with 1012).
    pub stopping: watch::Receiver<Option<Option<Duration>>>,
    /// `--limit-max-requests`: requests still to accept before the server stops itself, and
    /// the graceful timeout it stops with.
    requests_left: Option<(AtomicU64, Option<Duration>)>,
    stop: watch::Sender<Option<Option<Duration>>>,
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
    fn from_option(http: &str) -> PyResult<Self> {
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
    fn header_read_timeout(&self) -> Duration {
        self.keep_alive.max(Duration::from_secs(1))
    }

    /// Counts one request against `--limit-max-requests`; the one that reaches it starts a
    /// graceful shutdown (this request and those in flight are still answered).
    fn count_request(&self) {
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
fn optional_seconds(seconds: Option<f64>, name: &str) -> PyResult<Option<Duration>> {
    seconds
        .map(Duration::try_from_secs_f64)
        .transpose()
        .map_err(|_| PyValueError::new_err(format!("{name} must be a number >= 0")))
}

/// Listening sockets handed over from Python (which binds them, for clear errors and for
/// sharing one socket between worker processes).
enum Listener {
    Tcp(tokio::net::TcpListener),
    Unix(tokio::net::UnixListener, String),
}

#[pyclass(frozen, module = "ferrule._ferrule")]
pub struct HttpServer {
    shared: Arc<ServerShared>,
    started: Mutex<bool>,
}

#[pymethods]
impl HttpServer {
    #[new]
    #[pyo3(signature = (bridge, app, *, root_path="", state=None, timeout_keep_alive=5.0, limit_concurrency=None, limit_request_body=None, max_connections=4096, access_log=true, server_header=true, date_header=true, headers=None, trusted_proxies=None, rust_hello_route=None, http="auto", tls_cert=None, tls_key=None, tls_ca_certs=None, tls_cert_reqs=0, ws=true, ws_max_size=16777216, ws_max_queue=32, ws_ping_interval=None, ws_ping_timeout=None, stats_route=None, limit_max_requests=None, timeout_graceful_shutdown=None, reset_contextvars=false, max_head_size=65536))]
    #[allow(clippy::too_many_arguments)]
    fn new(
        py: Python<'_>,
        bridge: &Bridge,
        app: Py<PyAny>,
        root_path: &str,
        state: Option<Py<PyDict>>,
        timeout_keep_alive: f64,
        limit_concurrency: Option<usize>,
        limit_request_body: Option<u64>,
        max_connections: usize,
        access_log: bool,
        server_header: bool,
        date_header: bool,
        headers: Option<Vec<(String, String)>>,
        trusted_proxies: Option<Vec<String>>,
        rust_hello_route: Option<String>,
        http: &str,
        tls_cert: Option<Bound<'_, PyBytes>>,
        tls_key: Option<Bound<'_, PyBytes>>,
        tls_ca_certs: Option<Bound<'_, PyBytes>>,
        tls_cert_reqs: u8,
        ws: bool,
        ws_max_size: usize,
        ws_max_queue: usize,
        ws_ping_interval: Option<f64>,
        ws_ping_timeout: Option<f64>,
        stats_route: Option<String>,
        limit_max_requests: Option<u64>,
        timeout_graceful_shutdown: Option<f64>,
        reset_contextvars: bool,
        max_head_size: usize,
    ) -> PyResult<Self> {
        if max_head_size < MIN_HEAD_SIZE {
            return Err(PyValueError::new_err(format!(
                "the request head limit must be at least {MIN_HEAD_SIZE} bytes, not {max_head_size}"
            )));
        }
        let versions = HttpVersions::from_option(http)?;
        let stop = watch::channel(None).0;
        let tls = match (tls_cert, tls_key) {
            (Some(cert), Some(key)) => Some(tls::acceptor(
                cert.as_bytes(),
                key.as_bytes(),
                tls_ca_certs.as_ref().map(|ca| ca.as_bytes()),
                ClientCerts::from_ssl_constant(tls_cert_reqs)?,
                versions,
            )?),
            (None, None) => None,
            _ => {
                return Err(PyValueError::new_err(
                    "TLS needs both a certificate and a key",
                ))
            }
        };
        if max_connections == 0 {
            return Err(PyValueError::new_err("max_connections must be at least 1"));
        }
        let logging = py.import("logging")?;
        let error_logger = logging.call_method1("getLogger", ("ferrule.error",))?;
        let access_logger = logging.call_method1("getLogger", ("ferrule.access",))?;
        let access_enabled = access_log
            && access_logger
                .call_method1("isEnabledFor", (20,))?
                .is_truthy()?;
        let keep_alive = Duration::try_from_secs_f64(timeout_keep_alive)
            .map_err(|_| PyValueError::new_err("timeout_keep_alive must be a number >= 0"))?;
        let positive = |seconds: Option<f64>, name: &str| {
            seconds
                .map(|s| {
                    Duration::try_from_secs_f64(s)
                        .ok()
                        .filter(|d| !d.is_zero())
                        .ok_or_else(|| PyValueError::new_err(format!("{name} must be > 0")))
                })
                .transpose()
        };
        let graceful = optional_seconds(timeout_graceful_shutdown, "timeout_graceful_shutdown")?;
        let default_headers = headers
            .unwrap_or_default()
            .into_iter()
            .map(|(name, value)| {
                let parsed = HeaderName::from_bytes(name.trim().as_bytes())
                    .ok()
                    .zip(HeaderValue::from_str(value.trim()).ok());
                parsed.ok_or_else(|| {
                    PyValueError::new_err(format!("not a valid header: {name:?}: {value:?}"))
                })
            })
            .collect::<PyResult<Vec<_>>>()?;
        if ws_max_queue == 0 {
            return Err(PyValueError::new_err("ws_max_queue must be at least 1"));
        }
        let ws_ping = WsPing {
            interval: positive(ws_ping_interval, "ws_ping_interval")?,
            timeout: positive(ws_ping_timeout, "ws_ping_timeout")?,
        };
        let bridge = bridge.shared().clone();
        // An asyncio future, not a resolved `NativeFuture`: awaiting a done asyncio future
        // takes CPython's `am_send` path and raises no StopIteration (85 ns against 355 ns per
        // await, measured here), and `send()` is awaited several times per request.
        let done_future = bridge.event_loop.bind(py).call_method0("create_future")?;
        done_future.call_method1("set_result", (py.None(),))?;
        let done_future = done_future.unbind();
        let root_path = PyString::new(py, root_path);
        let scope_template = ScopeTemplate::new(py, &root_path, state.is_some())?;
        let shared = ServerShared {
            bridge,
            app,
            root_path: root_path.unbind(),
            state,
            scope_template,
            request_context: RequestContext::new(py, reset_contextvars)?,
            error_logger: error_logger.unbind(),
            proxies: TrustedProxies::new(trusted_proxies),
            access_logger: access_enabled.then(|| access_logger.unbind()),
            done_future,
            limit_concurrency,
            limit_request_body,
            max_head_size,
            max_connections,
            in_flight: AtomicUsize::new(0),
            keep_alive,
            server_header: server_header.then(|| HeaderValue::from_static("ferrule")),
            default_headers,
            date_header,
            rust_hello_route,
            stats_route,
            versions,
            tls,
            ws_max_size: ws.then_some(ws_max_size),
            ws_ping,
            ws_max_queue,
            stopping: stop.subscribe(),
            requests_left: limit_max_requests.map(|limit| (AtomicU64::new(limit), graceful)),
            stop,
            ws_sessions: watch::Sender::new(0),
        };
        Ok(Self {
            shared: Arc::new(shared),
            started: Mutex::new(false),
        })
    }

    /// Serves the listening TCP socket `fd` (ownership passes to the server). Returns a future
    /// resolved once the server has stopped and every connection is closed.
    fn serve_tcp(&self, py: Python<'_>, fd: RawFd) -> PyResult<Py<NativeFuture>> {
        let listener = std_tcp_listener(fd)?;
        self.start(py, move || {
            Ok(Listener::Tcp(tokio::net::TcpListener::from_std(listener)?))
        })
    }

    /// As `serve_tcp`, for a listening Unix socket bound at `path`.
    fn serve_unix(&self, py: Python<'_>, fd: RawFd, path: String) -> PyResult<Py<NativeFuture>> {
        let listener = std_unix_listener(fd)?;
        self.start(py, move || {
            Ok(Listener::Unix(
                tokio::net::UnixListener::from_std(listener)?,
                path,
            ))
        })
    }

    /// Stops accepting; in-flight requests get `timeout` seconds (forever if None), then are
    /// cancelled and their connections closed.
    #[pyo3(signature = (timeout=None))]
    fn shutdown(&self, timeout: Option<f64>) -> PyResult<()> {
        let timeout = optional_seconds(timeout, "timeout")?;
        self.shared.stop.send_replace(Some(timeout));
        Ok(())
    }

    #[getter]
    fn in_flight(&self) -> usize {
        self.shared.in_flight.load(Ordering::Acquire)
    }
}

impl HttpServer {
    fn start(
        &self,
        py: Python<'_>,
        make_listener: impl FnOnce() -> std::io::Result<Listener> + std::marker::Send + 'static,
    ) -> PyResult<Py<NativeFuture>> {
        let mut started = self.started.lock().unwrap();
        if *started {
            return Err(pyo3::exceptions::PyRuntimeError::new_err(
                "the server is already serving",
            ));
        }
        *started = true;
        let done = Py::new(py, NativeFuture::new(self.shared.bridge.clone()))?;
        let mut stopped = StoppedSignal(Some(done.clone_ref(py)));
        let shared = self.shared.clone();
        let stop = self.shared.stop.subscribe();
        self.shared.bridge.handle.spawn(async move {
            let outcome = match make_listener() {
                Ok(listener) => {
                    accept_loop(listener, shared.clone(), stop).await;
                    Ok(())
                }
                Err(err) => Err(err),
            };
            stopped.resolve(outcome.map_err(|err| err.to_string()));
        });
        Ok(done)
    }
}

/// Resolves the "server stopped" future once: with the outcome, or with an error if the server
/// task ended another way (a panic), so Python never waits forever on it.
struct StoppedSignal(Option<Py<NativeFuture>>);

impl StoppedSignal {
    fn resolve(&mut self, outcome: Result<(), String>) {
        let Some(future) = self.0.take() else { return };
        Python::attach(|py| {
            let result = outcome
                .map(|()| py.None())
                .map_err(pyo3::exceptions::PyOSError::new_err);
            NativeFuture::settle(future.bind(py), result, ResumeVia::DriveNow);
        });
    }
}

impl Drop for StoppedSignal {
    fn drop(&mut self) {
        self.resolve(Err("the server task stopped unexpectedly".to_owned()));
    }
}

fn std_tcp_listener(fd: RawFd) -> PyResult<std::net::TcpListener> {
    let listener = crate::bridge::take_fd::<std::net::TcpListener>(fd)?;
    listener.set_nonblocking(true)?;
    Ok(listener)
}

fn std_unix_listener(fd: RawFd) -> PyResult<std::os::unix::net::UnixListener> {
    let listener = crate::bridge::take_fd::<std::os::unix::net::UnixListener>(fd)?;
    listener.set_nonblocking(true)?;
    Ok(listener)
}

async fn accept_loop(
    listener: Listener,
    shared: Arc<ServerShared>,
    mut stop: watch::Receiver<Option<Option<Duration>>>,
) {
    // Each connection holds a receiver until it ends: told `true`, it finishes gracefully,
    // and once every receiver is gone every connection has ended.
    let (stopping, _) = watch::channel(false);
    let (abort_tx, abort_rx) = watch::channel(false);
    let builder = Arc::new(connection_builder(&shared));
    let permits = Arc::new(Semaphore::new(shared.max_connections));
    loop {
        let accepted = tokio::select! {
            biased;
            _ = stop.wait_for(Option::is_some) => break,
            accepted = accept_with_permit(&listener, &permits, &shared) => accepted,
        };
        let (stream, conn, permit) = match accepted {
            Ok(accepted) => accepted,
            Err(_) => {
                // Out of descriptors or a connection reset before accept: keep serving.
                tokio::time::sleep(Duration::from_millis(10)).await;
                continue;
            }
        };
        let served = serve_connection(
            stream,
            Arc::new(conn),
            shared.clone(),
            builder.clone(),
            stopping.subscribe(),
        );
        let mut abort = abort_rx.clone();
        tokio::spawn(async move {
            tokio::select! {
                _ = served => {}
                _ = abort.wait_for(|aborted| *aborted) => {}
            }
            drop(permit);
        });
    }
    drop(listener);
    let timeout = stop.borrow().flatten();
    let mut ws_sessions = shared.ws_sessions.subscribe();
    let drain = async {
        stopping.send_replace(true);
        stopping.closed().await;
        // Each session has been sent 1012; its app returns once it hears the disconnect.
        let _ = ws_sessions.wait_for(|open| *open == 0).await;
    };
    let drained = match timeout {
        Some(timeout) => tokio::time::timeout(timeout, drain).await.is_ok(),
        None => {
            drain.await;
            true
        }
    };
    if !drained {
        Python::attach(|py| shared.bridge.cancel_all(py));
        let _ = abort_tx.send(true);
    }
}

/// hyper's connection settings: HTTP/1.1 and HTTP/2 told apart by the client's first bytes
/// (hyper-util's auto builder), or HTTP/2 alone. HTTP/1.1 alone cannot be asked of the auto
/// builder once upgrades are on (it ignores it), so the head recorder refuses an HTTP/2 preface
/// then (`Recorder::refusing_http2`).
fn connection_builder(shared: &ServerShared) -> auto::Builder<TokioExecutor> {
    let mut builder = auto::Builder::new(TokioExecutor::new());
    builder
        .http1()
        .timer(TokioTimer::new())
        .header_read_timeout(shared.header_read_timeout())
        .auto_date_header(shared.date_header)
        // The request line and headers must fit in `max_head_size`. hyper's buffer is twice
        // that, so a head a little over the limit is still parsed whole: a long request line
        // then gets 414 from hyper (it only tells URI length on a complete parse), long headers
        // 431 from `refusal`. Past the buffer hyper answers 431 and closes.
        .max_buf_size(2 * shared.max_head_size);
    builder
        .http2()
        .timer(TokioTimer::new())
        .max_header_list_size(u32::try_from(shared.max_head_size).unwrap_or(u32::MAX))
        // A peer silent for the keep-alive timeout is PINGed, and dropped if it does not answer
        // within as long again: a client gone without a FIN (a NAT that forgot it, a machine
        // switched off) would otherwise keep its connection slot for ever. A live client that
        // answers PINGs but opens no stream is sent GOAWAY after as long (`FinishWhen`).
        .keep_alive_interval(shared.header_read_timeout())
        .keep_alive_timeout(shared.header_read_timeout())
        .auto_date_header(shared.date_header);
    if shared.versions.h1 {
        builder
    } else {
        builder.http2_only()
    }
}

/// How long a client may take over the TLS handshake.
const TLS_HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// One connection, from the TLS handshake (if any) to its close.
async fn serve_connection(
    stream: Box<dyn IoStream>,
    conn: Arc<ConnInfo>,
    shared: Arc<ServerShared>,
    builder: Arc<auto::Builder<TokioExecutor>>,
    stopping: watch::Receiver<bool>,
) {
    let stream: Box<dyn IoStream> = match &shared.tls {
        None => stream,
        Some(acceptor) => {
            match tokio::time::timeout(TLS_HANDSHAKE_TIMEOUT, acceptor.accept(stream)).await {
                Ok(Ok(tls)) => Box::new(tls),
                // A failed or abandoned handshake: rustls has sent its alert, if any.
                _ => return,
            }
        }
    };
    // The record of request heads sees the bytes after TLS, as hyper does.
    let mut recorder = Recorder::new(conn.heads.clone(), shared.max_head_size);
    if !shared.versions.h2 {
        recorder = recorder.refusing_http2();
    }
    let io = TokioIo::new(RecordingIo::new(stream, recorder));
    let heads = conn.heads.clone();
    let first_request_timeout = shared.header_read_timeout();
    let versions = shared.versions;
    let finish_when = FinishWhen {
        stopping,
        conn: conn.clone(),
        idle_timeout: first_request_timeout,
    };
    let service = service_fn(move |request| handle(request, conn.clone(), shared.clone()));
    type BoxError = Box<dyn std::error::Error + std::marker::Send + Sync>;
    type Serving<'a> = Pin<Box<dyn Future<Output = Result<(), BoxError>> + std::marker::Send + 'a>>;
    let serving: Serving<'_> = if versions.h1 {
        let connection = builder.serve_connection_with_upgrades(io, service);
        Box::pin(finish_when.drive(connection, |c| c.graceful_shutdown()))
    } else {
        // WebSockets are HTTP/1.1 upgrades: none to allow on HTTP/2 alone.
        let connection = builder.serve_connection(io, service);
        Box::pin(finish_when.drive(connection, |c| c.graceful_shutdown()))
    };
    tokio::pin!(serving);
    // hyper times out slow heads only once it knows the protocol, which takes the client's
    // first 24 bytes: a client that sends fewer and goes silent is closed here instead.
    tokio::select! {
        _ = &mut serving => return,
        _ = tokio::time::sleep(first_request_timeout) => {
            if !heads.first_request_seen() {
                return;
            }
        }
    }
    let _ = serving.await;
}

/// When a connection is asked to finish (hyper's `graceful_shutdown`: requests in progress are
/// answered, then HTTP/1.1 closes and HTTP/2 says GOAWAY): when the server stops, or when an
/// HTTP/2 connection has had no stream in progress for the keep-alive timeout, as an HTTP/1.1
/// connection is closed between requests.
struct FinishWhen {
    /// Held until the connection ends: the server's drain waits for every receiver to go.
    stopping: watch::Receiver<bool>,
    conn: Arc<ConnInfo>,
    idle_timeout: Duration,
}

impl FinishWhen {
    async fn drive<C: Future>(
        mut self,
        connection: C,
        graceful_shutdown: impl FnOnce(Pin<&mut C>),
    ) -> C::Output {
        tokio::pin!(connection);
        let idle = async {
            // Pending until the client's preface has said HTTP/2 (HTTP/1.1 has hyper's own
            // timeout between requests). No wake-up of its own is needed: the preface is read
            // while the connection is polled, in this task, just before this is polled again;
            // and an atomic load is all an HTTP/1.1 connection pays for it.
            std::future::poll_fn(|_| {
                if self.conn.heads.http2() {
                    Poll::Ready(())
                } else {
                    Poll::Pending
                }
            })
            .await;
            self.conn.streams.idle_for(self.idle_timeout).await;
        };
        tokio::select! {
            biased;
            output = &mut connection => return output,
            // An error is the server gone without draining: finish all the same.
            _ = self.stopping.wait_for(|stop| *stop) => {}
            () = idle => {}
        }
        graceful_shutdown(connection.as_mut());
        connection.await
    }
}

/// The smallest request head limit: hyper's read buffer (twice the limit) cannot be smaller
/// than 8 KiB.
const MIN_HEAD_SIZE: usize = 4096;

type Accepted = (Box<dyn IoStream>, ConnInfo);

/// Waits for a connection slot, then for a connection.
async fn accept_with_permit(
    listener: &Listener,
    permits: &Arc<Semaphore>,
    shared: &ServerShared,
) -> std::io::Result<(Box<dyn IoStream>, ConnInfo, OwnedSemaphorePermit)> {
    let permit = permits
        .clone()
        .acquire_owned()
        .await
        .expect("the semaphore is never closed");
    let (stream, mut conn) = accept(listener).await?;
    conn.tls = shared.tls.is_some();
    Ok((stream, conn, permit))
}

trait IoStream: AsyncRead + AsyncWrite + Unpin + std::marker::Send {}
impl<T: AsyncRead + AsyncWrite + Unpin + std::marker::Send> IoStream for T {}

async fn accept(listener: &Listener) -> std::io::Result<Accepted> {
    match listener {
        Listener::Tcp(listener) => {
            let (stream, peer) = listener.accept().await?;
            let _ = stream.set_nodelay(true);
            let local = stream.local_addr()?;
            let conn = ConnInfo::new(
                Some((peer.ip().to_string(), peer.port())),
                (local.ip().to_string(), Some(local.port())),
            );
            Ok((Box::new(stream), conn))
        }
        Listener::Unix(listener, path) => {
            let (stream, _) = listener.accept().await?;
            Ok((Box::new(stream), ConnInfo::new(None, (path.clone(), None))))
        }
    }
}

/// Tells the app the client is gone if hyper drops the request before the response head.
struct DisconnectOnDrop(Option<Arc<Exchange>>);

impl Drop for DisconnectOnDrop {
    fn drop(&mut self) {
        if let Some(exchange) = self.0.take() {
            Python::attach(|py| exchange.mark_disconnected(py));
        }
    }
}

async fn handle(
    request: Request<Incoming>,
    conn: Arc<ConnInfo>,
    shared: Arc<ServerShared>,
) -> Result<Response<ResponseBody>, Infallible> {
    let received = shared.bridge.trace.mark();
    // Taken first, whatever happens to the request, to stay in step with hyper's order.
    let raw_head = conn.heads.take();
    // Until the response's last byte: a streamed body takes it over below.
    let open_stream = (request.version() == http::Version::HTTP_2).then(|| conn.streams.open());
    shared.count_request();
    let previous = shared.in_flight.fetch_add(1, Ordering::AcqRel);
    if shared
        .limit_concurrency
        .is_some_and(|limit| previous >= limit)
    {
        shared.request_finished();
        return Ok(plain_response(StatusCode::SERVICE_UNAVAILABLE, &shared));
    }
    if raw_head.as_ref().is_some_and(|head| head.ambiguous) {
        shared.request_finished();
        return Ok(closing_response(StatusCode::BAD_REQUEST, &shared));
    }
    if let Some(status) = refusal(&request, raw_head.is_some(), &shared) {
        shared.request_finished();
        return Ok(closing_response(status, &shared));
    }
    if shared.rust_hello_route.as_deref() == Some(request.uri().path()) {
        shared.request_finished();
        return Ok(rust_hello(&shared));
    }
    if shared.stats_route.as_deref() == Some(request.uri().path()) {
        shared.request_finished();
        return Ok(bridge_stats(&shared));
    }
    if let Some(max_size) = shared.ws_max_size {
        if ws::is_upgrade(&request) {
            return Ok(ws::upgrade(request, raw_head, conn, shared.clone(), max_size).await);
        }
    }
    let (parts, body) = request.into_parts();
    let http10 = parts.version == http::Version::HTTP_10;
    let (head_tx, head_rx) = oneshot::channel();
    let head_request = parts.method == http::Method::HEAD;
    // As hyper decides when to send `100 Continue` (HTTP/1.1, a body to come).
    let expects_continue = parts.version == http::Version::HTTP_11
        && !http_body::Body::is_end_stream(&body)
        && parts
            .headers
            .get(http::header::EXPECT)
            .is_some_and(|value| value.as_bytes().eq_ignore_ascii_case(b"100-continue"));
    // Here, without the GIL: the scope and the access line both need it.
    let forwarded = conn.forwarded(&parts.headers, &shared);
    let exchange = Arc::new(Exchange::new(
        shared.clone(),
        head_tx,
        body,
        head_request,
        expects_continue,
    ));
    // Built only when an access log line will be written: it costs three allocations.
    let access = shared
        .access_logger
        .is_some()
        .then(|| AccessInfo::new(&parts, &conn, &forwarded));
    let mut guard = DisconnectOnDrop(Some(exchange.clone()));
    let mut access = access;
    let mut begin = {
        let exchange = exchange.clone();
        move |py: Python<'_>| {
            let head = (&parts, raw_head.as_ref(), &forwarded);
            if let Err(err) = start_app(py, &exchange, head, &conn, &mut access, received) {
                // Calling the app raised before there was a coroutine (say, a sync callable):
                // the same 500 and logged traceback as an exception inside it.
                on_app_done(py, &exchange, access.as_ref(), Err(err));
            }
        }
    };
    let bridge = &shared.bridge;
    if bridge.starts_on_loop() {
        bridge.start_on_loop(Box::new(begin));
    } else {
        let asked_for_gil = bridge.trace.mark();
        Python::attach(|py| {
            bridge
                .trace
                .record_since(&bridge.trace.gil_wait, asked_for_gil);
            begin(py);
        });
    }
    let mut response = head_rx
        .await
        .unwrap_or_else(|_| plain_response(StatusCode::INTERNAL_SERVER_ERROR, &shared));
    guard.0 = None;
    if http10 && response.body().is_streamed() && !response.headers().contains_key(CONTENT_LENGTH) {
        // HTTP/1.0 has no chunks: this body ends at the close. Said as HTTP/1.0, the response
        // closes the connection; said as HTTP/1.1 (hyper's default), hyper would add
        // `connection: keep-alive` to a keep-alive request's answer and close all the same.
        *response.version_mut() = http::Version::HTTP_10;
    }
    if let Some(open_stream) = open_stream {
        response.body_mut().hold(open_stream);
    }
    Ok(response)
}

/// What the benchmark app's `/hello` answers, made without Python.
fn rust_hello(shared: &ServerShared) -> Response<ResponseBody> {
    let body = bytes::Bytes::from_static(b"Hello, world!");
    server_response(StatusCode::OK, "text/plain", body, shared)
}

/// The bridge's counters as a JSON object, made without Python (so reading them moves none).
fn bridge_stats(shared: &ServerShared) -> Response<ResponseBody> {
    let mut fields: Vec<String> = shared
        .bridge
        .counters
        .snapshot()
        .into_iter()
        .map(|(name, value)| format!("\"{name}\": {value}"))
        .collect();
    let trace = &shared.bridge.trace;
    if trace.enabled() {
        let list = |values: Vec<u64>| {
            let items: Vec<String> = values.iter().map(u64::to_string).collect();
            format!("[{}]", items.join(","))
        };
        let bounds = trace::bucket_upper_bounds();
        let mut histograms = vec![format!("\"bucket_upper_ns\": {}", list(bounds))];
        for (name, counts) in trace.snapshot() {
            histograms.push(format!("\"{name}\": {}", list(counts)));
        }
        fields.push(format!("\"trace\": {{{}}}", histograms.join(", ")));
    }
    let body = format!("{{{}}}", fields.join(", "));
    server_response(StatusCode::OK, "application/json", body.into(), shared)
}

/// A request refused before the app sees it: headers over `max_head_size` in all (hyper
/// enforces its buffer limit only when a head arrives in several reads), a request no ASGI app
/// can be handed (`unservable`), or a declared body over `limit_request_body` (hyper has
/// already rejected malformed Content-Lengths). A `recorded` head's framing was checked
/// already, on the raw lines (`RawHead::ambiguous`).
fn refusal(
    request: &Request<Incoming>,
    recorded: bool,
    shared: &ServerShared,
) -> Option<StatusCode> {
    if let Some(status) = unservable(request) {
        return Some(status);
    }
    let headers = request.headers();
    let head_bytes: usize = headers
        .iter()
        .map(|(name, value)| name.as_str().len() + value.len() + 4)
        .sum();
    if head_bytes > shared.max_head_size {
        return Some(StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE);
    }
    if !recorded && ambiguous_framing(headers) {
        return Some(StatusCode::BAD_REQUEST);
    }
    let limit = shared.limit_request_body?;
    let length: u64 = headers
        .get(http::header::CONTENT_LENGTH)?
        .to_str()
        .ok()?
        .parse()
        .ok()?;
    (length > limit).then_some(StatusCode::PAYLOAD_TOO_LARGE)
}

/// What RFC 9112 says a server must refuse, or what no ASGI app can serve:
/// - CONNECT asks for a tunnel, which an ASGI server has none of (hyper would take the app's
///   2xx for the start of one and drop the connection with no response sent): 501;
/// - a request-target other than a path (or `*` for OPTIONS), such as `GET example.com:80`,
///   would reach the app with an empty path: 400 (RFC 9112 3.2);
/// - a request with two Host lines: 400 (RFC 9112 3.2), a host-confusion vector, a proxy
///   routing on one and the app reading the other. An HTTP/1.1 request with none is served, as
///   uvicorn's default parser (httptools) serves it: RFC 9112 says refuse it, but clients that
///   omit it (a wrk script formatting requests before wrk knows the host) worked until now.
fn unservable(request: &Request<Incoming>) -> Option<StatusCode> {
    if request.method() == http::Method::CONNECT {
        return Some(StatusCode::NOT_IMPLEMENTED);
    }
    let path = request.uri().path();
    let asterisk = path == "*" && request.method() == http::Method::OPTIONS;
    if !path.starts_with('/') && !asterisk {
        return Some(StatusCode::BAD_REQUEST);
    }
    if request
        .headers()
        .get_all(http::header::HOST)
        .iter()
        .nth(1)
        .is_some()
    {
        return Some(StatusCode::BAD_REQUEST);
    }
    None
}

/// Body framing two parsers could read differently, the raw material of request smuggling:
/// Content-Length given more than once or together with Transfer-Encoding, or any
/// Transfer-Encoding but a single `chunked`. hyper tolerates some of these (as RFC 9112 allows);
/// a server facing the internet refuses them all.
fn ambiguous_framing(headers: &http::HeaderMap) -> bool {
    let lengths = headers.get_all(http::header::CONTENT_LENGTH).iter().count();
    let mut encodings = headers.get_all(http::header::TRANSFER_ENCODING).iter();
    let encoding = encodings.next();
    if encodings.next().is_some() || lengths > 1 {
        return true;
    }
    match encoding {
        None => false,
        Some(encoding) => {
            lengths > 0
                || !encoding
                    .as_bytes()
                    .trim_ascii()
                    .eq_ignore_ascii_case(b"chunked")
        }
    }
}

/// Calls the app and hands its coroutine to the bridge, which drives it right here.
fn start_app(
    py: Python<'_>,
    exchange: &Arc<Exchange>,
    head: (&http::request::Parts, Option<&RawHead>, &Forwarded),
    conn: &ConnInfo,
    access: &mut Option<AccessInfo>,
    received: u64,
) -> PyResult<()> {
    let shared = &exchange.server;
    let (coro, context) = shared
        .request_context
        .run(py, || call_app(py, exchange, head, conn))?;
    // From here the completion owns the access info; if making the job fails, the caller's
    // fallback logs the error without an access line.
    let access = access.take();
    let finishing = exchange.clone();
    let completion = Completion::Callback(Box::new(move |py, result| {
        on_app_done(py, &finishing, access.as_ref(), result)
    }));
    shared
        .bridge
        .start(py, &coro, completion, context, received)
}

/// `app(scope, receive, send)`: the coroutine to drive.
fn call_app<'py>(
    py: Python<'py>,
    exchange: &Arc<Exchange>,
    (parts, raw_head, forwarded): (&http::request::Parts, Option<&RawHead>, &Forwarded),
    conn: &ConnInfo,
) -> PyResult<Bound<'py, PyAny>> {
    let shared = &exchange.server;
    let scope = build_scope(py, parts, raw_head, conn, forwarded, shared)?;
    let receive = Py::new(
        py,
        Receive {
            exchange: exchange.clone(),
        },
    )?;
    let send = Py::new(
        py,
        Send {
            exchange: exchange.clone(),
        },
    )?;
    shared.app.bind(py).call1((scope, receive, send))
}
