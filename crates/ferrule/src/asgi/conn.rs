//! `ConnInfo`: one connection's two ends, as the scope wants them.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::OnceLock;

use pyo3::prelude::*;
use pyo3::types::{PyDict, PyTuple};

use super::proxy::Forwarded;
use super::settings::Settings;
use super::tls_scope::TlsScope;

/// The two ends of one connection, as the scope's `client` and `server` want them.
pub struct ConnInfo {
    pub client: Option<(String, u16)>,
    pub server: (String, Option<u16>),
    /// Whether the connection is TLS (scheme "https").
    pub tls: bool,
    /// The TLS extension of the scope, once the handshake is done (none on a plain connection).
    pub tls_scope: Option<Box<TlsScope>>,
    /// The tuples above as Python objects, made on the connection's first request.
    python: OnceLock<(Py<PyAny>, Py<PyAny>)>,
    /// The scope's start for this connection's requests (`asgi::scope`), made on its second:
    /// a connection that serves one request would pay for it and never use it.
    pub(crate) scope: OnceLock<ConnScope>,
    served_one: AtomicBool,
}

/// The server's scope template with what every request on one connection shares filled in
/// (`client`, `server`, `scheme`, `http_version`), and the version it holds.
pub(crate) struct ConnScope {
    pub(crate) dict: Py<PyDict>,
    pub(crate) version: http::Version,
}

impl ConnInfo {
    pub fn new(client: Option<(String, u16)>, server: (String, Option<u16>)) -> Self {
        Self {
            client,
            server,
            tls: false,
            tls_scope: None,
            python: OnceLock::new(),
            scope: OnceLock::new(),
            served_one: AtomicBool::new(false),
        }
    }

    /// False the first time, true from then on: whether this connection has served a request.
    pub(crate) fn served_before(&self) -> bool {
        self.served_one.swap(true, Ordering::Relaxed)
    }

    pub(crate) fn python<'py>(
        &self,
        py: Python<'py>,
    ) -> PyResult<(Bound<'py, PyAny>, Bound<'py, PyAny>)> {
        if let Some((client, server)) = self.python.get() {
            return Ok((client.bind(py).clone(), server.bind(py).clone()));
        }
        let client = match &self.client {
            Some((host, port)) => PyTuple::new(
                py,
                [
                    host.into_pyobject(py)?.into_any(),
                    port.into_pyobject(py)?.into_any(),
                ],
            )?
            .into_any(),
            None => py.None().into_bound(py),
        };
        let server = PyTuple::new(
            py,
            [
                self.server.0.clone().into_pyobject(py)?.into_any(),
                self.server.1.into_pyobject(py)?.into_any(),
            ],
        )?
        .into_any();
        let _ = self
            .python
            .set((client.clone().unbind(), server.clone().unbind()));
        Ok((client, server))
    }

    /// The peer's address, as `--forwarded-allow-ips` is matched against it (none on a Unix
    /// socket).
    pub fn peer(&self) -> Option<&str> {
        self.client.as_ref().map(|(host, _)| host.as_str())
    }

    /// What a trusted proxy's headers say of this request (nothing when the peer is none).
    pub fn forwarded(&self, headers: &http::HeaderMap, settings: &Settings) -> Forwarded {
        settings.forwarded(self.peer(), headers)
    }

    /// `"HOST:PORT - "`, the peer as uvicorn's connection lines begin (empty for a socket
    /// without one, as a Unix socket's).
    pub fn client_prefix(&self) -> String {
        match &self.client {
            Some((host, port)) => format!("{host}:{port} - "),
            None => String::new(),
        }
    }

    /// `host:port` of the client for the access log: the forwarded one if any, as uvicorn
    /// logs the scope's client. Joined by hand: `format!` cost a request 300 instructions.
    pub fn client_label(&self, forwarded: &Forwarded) -> String {
        match forwarded.client.as_ref().or(self.client.as_ref()) {
            Some((host, port)) => {
                let mut label = String::with_capacity(host.len() + 6);
                label.push_str(host);
                label.push(':');
                label.push_str(itoa::Buffer::new().format(*port));
                label
            }
            None => "-".to_owned(),
        }
    }
}
