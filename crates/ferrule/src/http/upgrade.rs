//! A request that asks to become a WebSocket, and `Upgrader`, how the transport that can serve
//! one (`ws::upgrade`, over TCP) hands it over: the request path itself does not know `ws`.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use bytes::Bytes;
use http::{Method, Request, Response, Version};
use hyper::body::Incoming;

use crate::asgi::conn::ConnInfo;
use crate::asgi::raw_head::RawHead;
use crate::asgi::server::Server;

/// Serves an upgrade request to its answer (a 101, or the app's denial); the caller has
/// counted the request in flight.
pub(crate) type Upgrader = for<'a> fn(
    Request<Incoming>,
    Option<RawHead>,
    &'a ConnInfo,
    Arc<Server>,
)
    -> Pin<Box<dyn Future<Output = Response<Bytes>> + Send + 'a>>;

/// Whether `request` asks to become a WebSocket: an HTTP/1.1 upgrade (RFC 6455, 4.1) or an
/// HTTP/2 extended CONNECT with `:protocol websocket` (RFC 8441, 4).
pub(crate) fn is_upgrade<B>(request: &Request<B>) -> bool {
    if request.version() == Version::HTTP_2 {
        return is_extended_connect(request);
    }
    let headers = request.headers();
    let upgrade = headers
        .get(http::header::UPGRADE)
        .is_some_and(|v| v.as_bytes().eq_ignore_ascii_case(b"websocket"));
    // Most requests stop here, before the second lookup.
    if !upgrade || request.version() != Version::HTTP_11 {
        return false;
    }
    headers.get_all(http::header::CONNECTION).iter().any(|v| {
        v.as_bytes()
            .split(|&b| b == b',')
            .any(|token| token.trim_ascii().eq_ignore_ascii_case(b"upgrade"))
    })
}

/// Whether `request` is an HTTP/2 extended CONNECT for a WebSocket (RFC 8441, 4).
fn is_extended_connect<B>(request: &Request<B>) -> bool {
    request.method() == Method::CONNECT
        && request
            .extensions()
            .get::<hyper::ext::Protocol>()
            .is_some_and(|protocol| protocol.as_str().eq_ignore_ascii_case("websocket"))
}
