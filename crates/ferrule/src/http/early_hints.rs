//! `EarlyHints`: how one request's `http.response.early_hint` messages reach its client, as a
//! 103 response ahead of the final one; HTTP/1.0 has no informational responses, and none.

use std::sync::Arc;

use http::{HeaderValue, Response, StatusCode};
use tokio::sync::mpsc;

use super::interim::InterimQueue;

/// A request's way to send 103 Early Hints, by its protocol (`Clone`, as a request's extensions
/// must be).
#[derive(Clone)]
pub enum EarlyHints {
    /// HTTP/1.1: bytes written on the socket beside hyper.
    Http1(Arc<InterimQueue>),
    /// HTTP/2: a HEADERS frame queued on the stream by h2 (the vendored h2's sender, which it
    /// puts in each request).
    Http2(h2::server::InformationalSender),
    /// HTTP/3: the links, for the stream's task to send as a 103 HEADERS frame.
    Http3(mpsc::UnboundedSender<Vec<HeaderValue>>),
}

impl EarlyHints {
    /// Sends a 103 with a `link` field per link (none goes out for no links).
    pub(crate) fn send(&self, links: Vec<HeaderValue>) {
        if links.is_empty() {
            return;
        }
        match self {
            EarlyHints::Http1(queue) => queue.push_early_hints(&links),
            // An error is the stream ended or answered: nothing left to hint.
            EarlyHints::Http2(sender) => drop(sender.send(response(links))),
            // The stream's task gone, the response is too: nothing to hint.
            EarlyHints::Http3(tx) => drop(tx.send(links)),
        }
    }

    /// The HTTP/2 sender h2 put in the request, if it is one of its.
    pub(crate) fn of_http2(extensions: &mut http::Extensions) -> Option<Self> {
        extensions
            .remove::<h2::server::InformationalSender>()
            .map(EarlyHints::Http2)
    }

    /// Waits until the hints sent so far are on their way before the final head (over
    /// HTTP/1.1, on the socket; the other protocols keep the order themselves).
    pub(crate) async fn sent(&self) {
        if let EarlyHints::Http1(queue) = self {
            queue.written().await;
        }
    }
}

/// A 103 (Early Hints) with a `link` field per link.
pub(crate) fn response(links: Vec<HeaderValue>) -> Response<()> {
    let mut response = Response::new(());
    *response.status_mut() = StatusCode::EARLY_HINTS;
    let headers = response.headers_mut();
    for link in links {
        headers.append(http::header::LINK, link);
    }
    response
}
