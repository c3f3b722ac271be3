//! Building the ASGI `http` scope from a parsed request (ASGI HTTP spec 2.4).

use std::sync::{Arc, OnceLock};

use http::request::Parts;
use http::Version;
use percent_encoding::percent_decode;
use pyo3::intern;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict, PyList, PyString, PyTuple};

use super::heads::{HeadLog, RawHead};
use super::serve::ServerShared;

/// The two ends of one connection, as the scope's `client` and `server` want them.
pub struct ConnInfo {
    pub client: Option<(String, u16)>,
    pub server: (String, Option<u16>),
    /// The request heads recorded as they were read, in the client's order.
    pub heads: Arc<HeadLog>,
    /// Whether the connection is TLS (scheme "https").
    pub tls: bool,
    /// The tuples above as Python objects, made on the connection's first request.
    python: OnceLock<(Py<PyAny>, Py<PyAny>)>,
}

impl ConnInfo {
    pub fn new(client: Option<(String, u16)>, server: (String, Option<u16>)) -> Self {
        Self {
            client,
            server,
            heads: Arc::default(),
            tls: false,
            python: OnceLock::new(),
        }
    }

    fn python<'py>(&self, py: Python<'py>) -> PyResult<(Bound<'py, PyAny>, Bound<'py, PyAny>)> {
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

    /// `host:port` of the client for the access log.
    pub fn client_label(&self) -> String {
        match &self.client {
            Some((host, port)) => format!("{host}:{port}"),
            None => "-".to_owned(),
        }
    }
}

pub fn http_version(version: Version) -> &'static str {
    match version {
        Version::HTTP_10 => "1.0",
        Version::HTTP_09 => "0.9",
        Version::HTTP_2 => "2",
        _ => "1.1",
    }
}

pub fn build_scope<'py>(
    py: Python<'py>,
    parts: &Parts,
    raw_head: Option<&RawHead>,
    conn: &ConnInfo,
    server: &ServerShared,
) -> PyResult<Bound<'py, PyDict>> {
    let scope = PyDict::new(py);
    scope.set_item(intern!(py, "type"), intern!(py, "http"))?;
    let asgi = PyDict::new(py);
    asgi.set_item(intern!(py, "version"), intern!(py, "3.0"))?;
    asgi.set_item(intern!(py, "spec_version"), intern!(py, "2.4"))?;
    scope.set_item(intern!(py, "asgi"), asgi)?;
    scope.set_item(intern!(py, "http_version"), http_version(parts.version))?;
    scope.set_item(intern!(py, "method"), method_name(py, &parts.method))?;
    let peer = conn.client.as_ref().map(|(host, _)| host.as_str());
    let forwarded = server.proxies.forwarded(peer, &parts.headers, false);
    let scheme = forwarded
        .scheme
        .unwrap_or(if conn.tls { "https" } else { "http" });
    scope.set_item(intern!(py, "scheme"), PyString::intern(py, scheme))?;
    let raw_path = parts.uri.path().as_bytes();
    let decoded = percent_decode(raw_path).decode_utf8_lossy();
    let root_path = server.root_path.bind(py);
    let path = if root_path.is_empty()? {
        PyString::new(py, &decoded)
    } else {
        PyString::new(py, &format!("{}{}", root_path.to_str()?, decoded))
    };
    scope.set_item(intern!(py, "path"), path)?;
    scope.set_item(intern!(py, "raw_path"), PyBytes::new(py, raw_path))?;
    let query = parts.uri.query().unwrap_or("").as_bytes();
    scope.set_item(intern!(py, "query_string"), PyBytes::new(py, query))?;
    scope.set_item(intern!(py, "root_path"), root_path)?;
    let headers = PyList::empty(py);
    let add = |name: &[u8], value: &[u8]| {
        headers.append(PyTuple::new(
            py,
            [PyBytes::new(py, name), PyBytes::new(py, value)],
        )?)
    };
    if parts.version == Version::HTTP_2 && !parts.headers.contains_key(http::header::HOST) {
        // HTTP/2 carries the host as `:authority`; frameworks look for a `host` header.
        if let Some(authority) = parts.uri.authority() {
            add(b"host", authority.as_str().as_bytes())?;
        }
    }
    match raw_head {
        // In the client's order (hyper's map groups lines by name).
        Some(head) => head
            .headers()
            .try_for_each(|(name, value)| add(name, value))?,
        None => parts
            .headers
            .iter()
            .try_for_each(|(name, value)| add(name.as_str().as_bytes(), value.as_bytes()))?,
    }
    scope.set_item(intern!(py, "headers"), headers)?;
    let (client, server_addr) = conn.python(py)?;
    match forwarded.client {
        // A forwarded client has no port to report: 0, as uvicorn gives.
        Some(host) => scope.set_item(intern!(py, "client"), (host, 0u16))?,
        None => scope.set_item(intern!(py, "client"), client)?,
    }
    scope.set_item(intern!(py, "server"), server_addr)?;
    let extensions = PyDict::new(py);
    extensions.set_item(intern!(py, "http.response.pathsend"), PyDict::new(py))?;
    extensions.set_item(intern!(py, "http.response.trailers"), PyDict::new(py))?;
    scope.set_item(intern!(py, "extensions"), extensions)?;
    if let Some(state) = &server.state {
        scope.set_item(intern!(py, "state"), state.bind(py).copy()?)?;
    }
    Ok(scope)
}

fn method_name<'py>(py: Python<'py>, method: &http::Method) -> Bound<'py, PyString> {
    match *method {
        http::Method::GET => intern!(py, "GET").clone(),
        http::Method::POST => intern!(py, "POST").clone(),
        http::Method::PUT => intern!(py, "PUT").clone(),
        http::Method::DELETE => intern!(py, "DELETE").clone(),
        http::Method::HEAD => intern!(py, "HEAD").clone(),
        http::Method::PATCH => intern!(py, "PATCH").clone(),
        http::Method::OPTIONS => intern!(py, "OPTIONS").clone(),
        _ => PyString::new(py, method.as_str()),
    }
}
