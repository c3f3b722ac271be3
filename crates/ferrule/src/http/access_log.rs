//! The access log line of one request.

use http::Version;
use pyo3::intern;
use pyo3::prelude::*;

use crate::asgi::conn::ConnInfo;
use crate::asgi::handles::PyHandles;
use crate::asgi::proxy::Forwarded;

/// The request line parts the access log needs, captured before the request is handed over.
pub struct AccessInfo {
    client: String,
    method: String,
    target: String,
    version: &'static str,
}

impl AccessInfo {
    pub fn new(parts: &http::request::Parts, conn: &ConnInfo, forwarded: &Forwarded) -> Self {
        let target = parts
            .uri
            .path_and_query()
            .map_or_else(|| parts.uri.path().to_owned(), |pq| pq.to_string());
        Self {
            client: conn.client_label(forwarded),
            method: parts.method.to_string(),
            target,
            version: http_version(parts.version),
        }
    }
}

pub(super) fn log_access(
    py: Python<'_>,
    handles: &PyHandles,
    access: Option<&AccessInfo>,
    status: u16,
) {
    if let (Some(access_logger), Some(access)) = (&handles.access_logger, access) {
        let _ = access_logger.bind(py).call_method1(
            intern!(py, "info"),
            (
                "%s - \"%s %s HTTP/%s\" %d",
                &access.client,
                &access.method,
                &access.target,
                access.version,
                status,
            ),
        );
    }
}

/// The HTTP version as the access line writes it (`HTTP/1.1`).
fn http_version(version: Version) -> &'static str {
    match version {
        Version::HTTP_10 => "1.0",
        Version::HTTP_09 => "0.9",
        Version::HTTP_2 => "2",
        _ => "1.1",
    }
}
