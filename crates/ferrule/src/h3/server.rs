//! `H3Server`, the Python class: HTTP/3 on a UDP socket Python binds at the TLS listener's
//! address, serving the same app, settings and limits as the `HttpServer` it is made from.

use std::os::fd::RawFd;
use std::sync::{Arc, Mutex};

use pyo3::exceptions::PyRuntimeError;
use pyo3::prelude::*;

use crate::asgi::server::Server;
use crate::bridge::NativeFuture;
use crate::tcp::{HttpServer, StoppedSignal, TlsFiles};

use super::endpoint::server_config;
use super::serving::serve;

#[pyclass(frozen, module = "ferrule._ferrule")]
pub struct H3Server {
    server: Arc<Server>,
    config: quinn::ServerConfig,
    /// The server's certificate, PEM, for the scope's TLS extension.
    server_cert: Arc<str>,
    started: Mutex<bool>,
}

#[pymethods]
impl H3Server {
    /// `http` is the server whose app, settings and shutdown this one shares; `tls` its TLS
    /// files (`ferrule.tls.TlsFiles`).
    #[new]
    fn new(http: &HttpServer, tls: TlsFiles<'_>) -> PyResult<Self> {
        let server = http.server().clone();
        let config = server_config(&tls, &server.settings)?;
        Ok(Self {
            server,
            config,
            server_cert: tls.server_cert()?,
            started: Mutex::new(false),
        })
    }

    /// Serves HTTP/3 on the bound UDP socket `fd` (ownership passes to the server). Returns a
    /// future resolved once the server has stopped and every connection is closed; it stops
    /// with its `HttpServer` (`shutdown`).
    fn serve(&self, py: Python<'_>, fd: RawFd) -> PyResult<Py<NativeFuture>> {
        let mut started = self.started.lock().unwrap();
        if *started {
            return Err(PyRuntimeError::new_err("the server is already serving"));
        }
        let socket = crate::bridge::take_fd::<std::net::UdpSocket>(fd)?;
        socket.set_nonblocking(true)?;
        *started = true;
        let done = Py::new(py, NativeFuture::new(self.server.bridge.clone()))?;
        let mut stopped = StoppedSignal(Some(done.clone_ref(py)));
        let server = self.server.clone();
        let config = self.config.clone();
        let server_cert = self.server_cert.clone();
        let stop = server.state.stopping();
        let handle = self.server.bridge.handle.clone();
        handle.spawn(async move {
            let endpoint = quinn::Endpoint::new(
                quinn::EndpointConfig::default(),
                Some(config),
                socket,
                Arc::new(quinn::TokioRuntime),
            );
            let outcome = match endpoint {
                Ok(endpoint) => {
                    serve(endpoint, server, server_cert, stop).await;
                    Ok(())
                }
                Err(err) => Err(err.to_string()),
            };
            stopped.resolve(outcome);
        });
        Ok(done)
    }
}
