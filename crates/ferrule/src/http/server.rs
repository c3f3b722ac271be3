//! `HttpServer`, the Python class: the server's settings, the listening sockets Python hands
//! it, and shutdown.

use std::os::fd::RawFd;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use http::{HeaderName, HeaderValue};
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict};
use tokio_rustls::TlsAcceptor;

use super::connection::accept_loop;
use super::tls::{self, ClientCerts};
use crate::asgi::diagnostics::Diagnostics;
use crate::asgi::handles::PyHandles;
use crate::asgi::live::LiveState;
use crate::asgi::proxy::TrustedProxies;
use crate::asgi::server::Server;
use crate::asgi::settings::{optional_seconds, HttpVersions, Settings, MIN_HEAD_SIZE};
use crate::bridge::{Bridge, NativeFuture, ResumeVia};

/// Listening sockets handed over from Python (which binds them, for clear errors and for
/// sharing one socket between worker processes).
pub(super) enum Listener {
    Tcp(tokio::net::TcpListener),
    Unix(tokio::net::UnixListener, String),
}

#[pyclass(frozen, module = "ferrule._ferrule")]
pub struct HttpServer {
    server: Arc<Server>,
    /// The TLS acceptor, when the server speaks HTTPS.
    tls: Option<TlsAcceptor>,
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
        let settings = Settings {
            root_path: root_path.to_owned(),
            timeout_keep_alive: keep_alive,
            limit_concurrency,
            limit_request_body,
            max_head_size,
            connection_limit: max_connections,
            access_log,
            server_header,
            date_header,
            headers: default_headers,
            proxy_headers: trusted_proxies.is_some(),
            trusted_proxies: TrustedProxies::new(trusted_proxies.unwrap_or_default()),
            http: versions,
            websockets: ws,
            ws_max_size,
            ws_max_queue,
            ws_ping_interval: positive(ws_ping_interval, "ws_ping_interval")?,
            ws_ping_timeout: positive(ws_ping_timeout, "ws_ping_timeout")?,
            max_requests: limit_max_requests,
            timeout_graceful_shutdown: graceful,
            reset_contextvars,
        };
        let bridge = bridge.shared().clone();
        let server = Server {
            py: PyHandles::new(py, &bridge, app, state, &settings)?,
            state: LiveState::new(&settings),
            diagnostics: Diagnostics {
                rust_hello_route,
                stats_route,
            },
            settings,
            bridge,
        };
        Ok(Self {
            server: Arc::new(server),
            tls,
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
        self.server.state.stop(timeout);
        Ok(())
    }

    #[getter]
    fn in_flight(&self) -> usize {
        self.server.state.in_flight()
    }
}

impl HttpServer {
    fn start(
        &self,
        py: Python<'_>,
        make_listener: impl FnOnce() -> std::io::Result<Listener> + Send + 'static,
    ) -> PyResult<Py<NativeFuture>> {
        let mut started = self.started.lock().unwrap();
        if *started {
            return Err(pyo3::exceptions::PyRuntimeError::new_err(
                "the server is already serving",
            ));
        }
        *started = true;
        let done = Py::new(py, NativeFuture::new(self.server.bridge.clone()))?;
        let mut stopped = StoppedSignal(Some(done.clone_ref(py)));
        let server = self.server.clone();
        let tls = self.tls.clone();
        let stop = self.server.state.stopping();
        self.server.bridge.handle.spawn(async move {
            let outcome = match make_listener() {
                Ok(listener) => {
                    accept_loop(listener, server, tls, stop).await;
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
