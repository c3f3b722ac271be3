//! `HttpServer`, the Python class: the server's settings, the listening sockets Python hands
//! it, and shutdown.

use std::os::fd::RawFd;
use std::sync::{Arc, Mutex};

use pyo3::prelude::*;
use pyo3::types::PyDict;

use crate::asgi::access_route::{AccessPath, AccessRoute, FastAccess};
use crate::asgi::diagnostics::Diagnostics;
use crate::asgi::handles::PyHandles;
use crate::asgi::live::LiveState;
use crate::asgi::server::Server;
use crate::asgi::settings::{optional_seconds, Settings};
use crate::bridge::{Bridge, NativeFuture, ResumeVia};
use crate::logs::AccessWriter;
use crate::metrics::{MetricsRegion, WorkerMetrics};

use super::listener::{std_tcp_listener, std_unix_listener, Listener, Listeners};
use super::serving::accept_loop;
use super::tls::{TlsFiles, TlsServing};

#[pyclass(frozen, module = "ferrule._ferrule")]
pub struct HttpServer {
    server: Arc<Server>,
    /// The TLS acceptor, when the server speaks HTTPS.
    tls: Option<TlsServing>,
    started: Mutex<bool>,
}

#[pymethods]
impl HttpServer {
    /// `config` is ferrule's `Config` (see `Settings` for what is read from it), `state` the
    /// lifespan state, `tls` the TLS files read (`ferrule.tls.TlsFiles`) or None, `metrics` a
    /// `(MetricsRegion, slot)` to count into (the bridge should trace, for the GIL waits).
    #[new]
    #[pyo3(signature = (bridge, app, config, *, state=None, tls=None, metrics=None))]
    fn new(
        py: Python<'_>,
        bridge: &Bridge,
        app: Py<PyAny>,
        config: &Bound<'_, PyAny>,
        state: Option<Py<PyDict>>,
        tls: Option<TlsFiles<'_>>,
        metrics: Option<(Bound<'_, MetricsRegion>, usize)>,
    ) -> PyResult<Self> {
        let metrics = metrics
            .map(|(region, slot)| {
                WorkerMetrics::new(region.get().region.clone(), slot).ok_or_else(|| {
                    pyo3::exceptions::PyValueError::new_err(format!("no metrics slot {slot}"))
                })
            })
            .transpose()?;
        let settings = Settings::from_config(config)?;
        let diagnostics = Diagnostics::from_config(config)?;
        let tls = tls.map(|files| files.serving(settings.http)).transpose()?;
        let bridge = bridge.shared().clone();
        let handles = PyHandles::new(py, &bridge, app, state, &settings)?;
        let path = match handles.access_enabled {
            true => AccessPath::Logging,
            false => AccessPath::Off,
        };
        let server = Server {
            py: handles,
            state: LiveState::new(&settings),
            access: AccessRoute::new(path),
            diagnostics,
            metrics,
            settings,
            bridge,
        };
        Ok(Self {
            server: Arc::new(server),
            tls,
            started: Mutex::new(false),
        })
    }

    /// Serves the listening sockets `listeners`, each a descriptor (ownership passes to the
    /// server) with the path a Unix socket is bound at, or None for TCP. Returns a future
    /// resolved once the server has stopped and every connection is closed.
    fn serve(
        &self,
        py: Python<'_>,
        listeners: Vec<(RawFd, Option<String>)>,
    ) -> PyResult<Py<NativeFuture>> {
        if listeners.is_empty() {
            return Err(pyo3::exceptions::PyValueError::new_err(
                "serve needs at least one socket",
            ));
        }
        let mut taken = Vec::with_capacity(listeners.len());
        for (fd, path) in listeners {
            taken.push(match path {
                None => Taken::Tcp(std_tcp_listener(fd)?),
                Some(path) => Taken::Unix(std_unix_listener(fd)?, path),
            });
        }
        self.start(py, move || {
            let all = taken
                .into_iter()
                .map(Taken::register)
                .collect::<Result<_, _>>()?;
            Ok(Listeners::new(all))
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

    /// Whether the server has begun to stop: told to, or at `--limit-max-requests`.
    #[getter]
    fn stopping(&self) -> bool {
        self.server.state.is_stopping()
    }

    /// Says the caller has closed its own descriptors of the listening sockets. A stopping
    /// server accepts until then: a connection the kernel queued on a socket still open would
    /// otherwise be reset when the caller closed it.
    fn release_listeners(&self) {
        self.server.state.release_listeners();
    }

    /// Gives the fast path of the access log its writer, whether lines are coloured, and
    /// `http.HTTPStatus`'s reason phrases as `(status, phrase)` pairs. The first call wins.
    fn set_access_writer(&self, writer: &AccessWriter, colours: bool, phrases: Vec<(u16, String)>) {
        let fast = FastAccess::new(writer.writer.clone(), colours, phrases);
        self.server.access.set_fast(fast);
    }

    /// Where access lines go from now on: "fast" (written here; only once a writer is set),
    /// "logging" (through the `ferrule.access` logger) or "off"; the fast path before a writer
    /// is set raises `ValueError`.
    #[setter]
    fn set_access_path(&self, path: &str) -> PyResult<()> {
        let parsed = AccessPath::parse(path).ok_or_else(|| {
            pyo3::exceptions::PyValueError::new_err(format!("no access path {path:?}"))
        })?;
        if !self.server.access.switch(parsed) {
            return Err(pyo3::exceptions::PyValueError::new_err(
                "the fast access path needs set_access_writer first",
            ));
        }
        Ok(())
    }

    /// Whether access records on the logging path carry the line's fields as attributes.
    #[setter]
    fn set_access_fields(&self, fields: bool) {
        self.server.access.set_fields(fields);
    }

    /// Whether `--limit-max-requests` requests have been served.
    #[getter]
    fn max_requests_reached(&self) -> bool {
        self.server.state.max_requests_reached()
    }
}

impl HttpServer {
    /// The server its requests are served by (HTTP/3 serves the same one).
    pub(crate) fn server(&self) -> &Arc<Server> {
        &self.server
    }

    fn start(
        &self,
        py: Python<'_>,
        make_listeners: impl FnOnce() -> std::io::Result<Listeners> + Send + 'static,
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
            let outcome = match make_listeners() {
                Ok(listeners) => {
                    accept_loop(listeners, server, tls, stop).await;
                    Ok(())
                }
                Err(err) => Err(err),
            };
            stopped.resolve(outcome.map_err(|err| err.to_string()));
        });
        Ok(done)
    }
}

/// A listening socket taken from Python, to be registered with tokio on its own thread.
enum Taken {
    Tcp(std::net::TcpListener),
    Unix(std::os::unix::net::UnixListener, String),
}

impl Taken {
    fn register(self) -> std::io::Result<Listener> {
        Ok(match self {
            Taken::Tcp(tcp) => Listener::Tcp(tokio::net::TcpListener::from_std(tcp)?),
            Taken::Unix(unix, path) => {
                Listener::Unix(tokio::net::UnixListener::from_std(unix)?, path)
            }
        })
    }
}

/// Resolves the "server stopped" future once: with the outcome, or with an error if the server
/// task ended another way (a panic), so Python never waits forever on it.
pub(crate) struct StoppedSignal(pub(crate) Option<Py<NativeFuture>>);

impl StoppedSignal {
    pub(crate) fn resolve(&mut self, outcome: Result<(), String>) {
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
