//! The ASGI `http` scope built from a parsed request (ASGI HTTP spec 2.4).

use http::request::Parts;
use http::Version;
use percent_encoding::percent_decode;
use pyo3::intern;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict, PyList, PyString};

use super::conn::{ConnInfo, ConnScope};
use super::proxy::Forwarded;
use super::raw_head::RawHead;

/// The parts of every request's scope that the server fixes, made once: each scope starts as a
/// copy of `scope`. Copying a dict whose keys are all in place clones its key table in one go,
/// where inserting 13 keys into a new dict resizes it twice and probes for each; the values
/// that vary are then replaced in place.
pub struct ScopeTemplate {
    scope: Py<PyDict>,
    asgi: Py<PyDict>,
    /// `--root-path`, prepended to each scope's `path`.
    root_path: Py<PyString>,
    /// What lifespan startup left in its state, copied into each scope.
    lifespan_state: Option<Py<PyDict>>,
    /// Each scope's `extensions`, a copy of one of these: without and with
    /// `http.response.early_hint`. A copy is one allocation where a new dict of new dicts was
    /// three to four, which paid for the early hints' key; the extensions' empty parameter
    /// dicts are shared by every scope.
    extensions: Py<PyDict>,
    extensions_hinted: Py<PyDict>,
}

impl ScopeTemplate {
    pub fn new(
        py: Python<'_>,
        root_path: &str,
        lifespan_state: Option<Py<PyDict>>,
    ) -> PyResult<Self> {
        let root_path = PyString::new(py, root_path);
        let asgi = PyDict::new(py);
        asgi.set_item(intern!(py, "version"), intern!(py, "3.0"))?;
        asgi.set_item(intern!(py, "spec_version"), intern!(py, "2.4"))?;
        let scope = PyDict::new(py);
        let none = py.None();
        // The keys in the order apps have seen them; `None` stands for a per-request value.
        scope.set_item(intern!(py, "type"), intern!(py, "http"))?;
        for key in [
            intern!(py, "asgi"),
            intern!(py, "http_version"),
            intern!(py, "method"),
            intern!(py, "scheme"),
            intern!(py, "path"),
            intern!(py, "raw_path"),
            intern!(py, "query_string"),
        ] {
            scope.set_item(key, &none)?;
        }
        scope.set_item(intern!(py, "root_path"), &root_path)?;
        for key in [
            intern!(py, "headers"),
            intern!(py, "client"),
            intern!(py, "server"),
            intern!(py, "extensions"),
        ] {
            scope.set_item(key, &none)?;
        }
        if lifespan_state.is_some() {
            scope.set_item(intern!(py, "state"), &none)?;
        }
        let extensions = PyDict::new(py);
        extensions.set_item(intern!(py, "http.response.pathsend"), PyDict::new(py))?;
        extensions.set_item(intern!(py, "http.response.trailers"), PyDict::new(py))?;
        let extensions_hinted = extensions.copy()?;
        extensions_hinted.set_item(intern!(py, "http.response.early_hint"), PyDict::new(py))?;
        Ok(Self {
            scope: scope.unbind(),
            asgi: asgi.unbind(),
            root_path: root_path.unbind(),
            lifespan_state,
            extensions: extensions.unbind(),
            extensions_hinted: extensions_hinted.unbind(),
        })
    }
}

/// The scope of the request `parts`; `early_hints` says whether its client can be sent 103s
/// (the `http.response.early_hint` extension).
pub fn build_scope<'py>(
    py: Python<'py>,
    (parts, raw_head): (&Parts, Option<&RawHead>),
    conn: &ConnInfo,
    forwarded: &Forwarded,
    template: &ScopeTemplate,
    early_hints: bool,
) -> PyResult<Bound<'py, PyDict>> {
    let scope = match conn_scope(py, template, conn, parts.version)? {
        Some(start) => {
            let scope = start.dict.bind(py).copy()?;
            if start.version != parts.version {
                set_version(&scope, parts.version)?;
            }
            scope
        }
        None => {
            let scope = template.scope.bind(py).copy()?;
            set_conn_items(&scope, conn, parts.version)?;
            scope
        }
    };
    scope.set_item(intern!(py, "asgi"), template.asgi.bind(py).copy()?)?;
    scope.set_item(intern!(py, "method"), method_name(py, &parts.method))?;
    if let Some(scheme) = forwarded.scheme {
        scope.set_item(intern!(py, "scheme"), PyString::intern(py, scheme))?;
    }
    let raw_path = parts.uri.path().as_bytes();
    // The path is a `str` already (the `http` crate checks it is UTF-8): without a `%` it is
    // its own decoding, and the decoder's UTF-8 check can be skipped.
    let decoded = match raw_path.contains(&b'%') {
        false => std::borrow::Cow::Borrowed(parts.uri.path()),
        true => percent_decode(raw_path).decode_utf8_lossy(),
    };
    let root_path = template.root_path.bind(py);
    let path = if root_path.is_empty()? {
        PyString::new(py, &decoded)
    } else {
        PyString::new(py, &format!("{}{}", root_path.to_str()?, decoded))
    };
    scope.set_item(intern!(py, "path"), path)?;
    scope.set_item(intern!(py, "raw_path"), PyBytes::new(py, raw_path))?;
    let query = parts.uri.query().unwrap_or("").as_bytes();
    scope.set_item(intern!(py, "query_string"), PyBytes::new(py, query))?;
    let mut lines: Vec<(&[u8], &[u8])> = Vec::with_capacity(parts.headers.len() + 1);
    let authority_version = matches!(parts.version, Version::HTTP_2 | Version::HTTP_3);
    // An HTTP/1.x request-target in absolute form names the host, and its Host line is
    // ignored (RFC 9112 3.2.2); HTTP/2 and HTTP/3 carry the host as `:authority`. Either way
    // frameworks look for a `host` header.
    let absolute_form = !authority_version && parts.uri.authority().is_some();
    let from_authority =
        absolute_form || authority_version && !parts.headers.contains_key(http::header::HOST);
    if let Some(authority) = parts.uri.authority().filter(|_| from_authority) {
        lines.push((b"host", authority.as_str().as_bytes()));
    }
    let kept = |(name, _): &(&[u8], &[u8])| !(absolute_form && name.eq_ignore_ascii_case(b"host"));
    match raw_head {
        // In the client's order (hyper's map groups lines by name).
        Some(head) => lines.extend(head.headers().filter(kept)),
        None => lines.extend(
            parts
                .headers
                .iter()
                .map(|(name, value)| (name.as_str().as_bytes(), value.as_bytes()))
                .filter(kept),
        ),
    }
    // Straight into a list of its final length: each pair becomes a tuple as it goes in.
    let pairs = lines
        .iter()
        .map(|(name, value)| (PyBytes::new(py, name), PyBytes::new(py, value)));
    let headers = PyList::new(py, pairs)?;
    scope.set_item(intern!(py, "headers"), headers)?;
    if let Some((host, port)) = &forwarded.client {
        scope.set_item(intern!(py, "client"), (host, *port))?;
    }
    let extensions = match early_hints {
        true => &template.extensions_hinted,
        false => &template.extensions,
    };
    let extensions = extensions.bind(py).copy()?;
    add_tls_extension(py, &extensions, conn)?;
    scope.set_item(intern!(py, "extensions"), extensions)?;
    if let Some(state) = &template.lifespan_state {
        scope.set_item(intern!(py, "state"), state.bind(py).copy()?)?;
    }
    Ok(scope)
}

/// The connection's start of a scope, from its second request on (`None` before): each
/// request's copy then has its `client`, `server`, `scheme` and `http_version` already.
fn conn_scope<'a>(
    py: Python<'_>,
    template: &ScopeTemplate,
    conn: &'a ConnInfo,
    version: Version,
) -> PyResult<Option<&'a ConnScope>> {
    if let Some(start) = conn.scope.get() {
        return Ok(Some(start));
    }
    if !conn.served_before() {
        return Ok(None);
    }
    let dict = template.scope.bind(py).copy()?;
    set_conn_items(&dict, conn, version)?;
    let start = ConnScope {
        dict: dict.unbind(),
        version,
    };
    // Under the GIL no other stream of the connection can have set it meanwhile.
    Ok(Some(conn.scope.get_or_init(|| start)))
}

/// What a connection's requests share: its two ends and its scheme; and the request's version.
fn set_conn_items(scope: &Bound<'_, PyDict>, conn: &ConnInfo, version: Version) -> PyResult<()> {
    let py = scope.py();
    set_version(scope, version)?;
    let scheme = match conn.tls {
        true => intern!(py, "https"),
        false => intern!(py, "http"),
    };
    scope.set_item(intern!(py, "scheme"), scheme)?;
    let (client, server) = conn.python(py)?;
    scope.set_item(intern!(py, "client"), client)?;
    scope.set_item(intern!(py, "server"), server)
}

fn set_version(scope: &Bound<'_, PyDict>, version: Version) -> PyResult<()> {
    let py = scope.py();
    scope.set_item(intern!(py, "http_version"), http_version_str(py, version))
}

/// `extensions["tls"]` on a TLS connection: the connection's one dict (absent, as the
/// extension's spec requires, on a plain connection).
pub fn add_tls_extension(
    py: Python<'_>,
    extensions: &Bound<'_, PyDict>,
    conn: &ConnInfo,
) -> PyResult<()> {
    if let Some(tls) = &conn.tls_scope {
        extensions.set_item(intern!(py, "tls"), tls.python(py)?)?;
    }
    Ok(())
}

/// `http_version` as the scope gives it, one shared string per version.
fn http_version_str(py: Python<'_>, version: Version) -> Bound<'_, PyString> {
    match version {
        Version::HTTP_10 => intern!(py, "1.0").clone(),
        Version::HTTP_09 => intern!(py, "0.9").clone(),
        Version::HTTP_2 => intern!(py, "2").clone(),
        Version::HTTP_3 => intern!(py, "3").clone(),
        _ => intern!(py, "1.1").clone(),
    }
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
