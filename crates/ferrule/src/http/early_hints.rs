//! `EarlyHints`: how one request's `http.response.early_hint` messages reach its client, as a
//! 103 response ahead of the final one; HTTP/1.0 has no informational responses, and none.

use std::sync::Arc;

use http::HeaderValue;
use tokio::sync::mpsc;

use super::interim::InterimQueue;

/// A request's way to send 103 Early Hints, by its protocol (`Clone`, as a request's extensions
/// must be).
#[derive(Clone)]
pub enum EarlyHints {
    /// HTTP/1.1: bytes written on the socket beside hyper.
    Http1(Arc<InterimQueue>),
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
            // The stream's task gone, the response is too: nothing to hint.
            EarlyHints::Http3(tx) => drop(tx.send(links)),
        }
    }

    /// Waits until the hints sent so far are on their way before the final head (over
    /// HTTP/1.1, on the socket; the other protocols keep the order themselves).
    pub(crate) async fn sent(&self) {
        if let EarlyHints::Http1(queue) = self {
            queue.written().await;
        }
    }
}
