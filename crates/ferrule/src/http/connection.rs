//! `Connection`: one connection as its requests see it.

use std::sync::Arc;

use http::HeaderValue;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use crate::asgi::conn::ConnInfo;

use super::heads::HeadLog;
use super::streams::OpenStreams;

/// One connection as its requests see it: its two ends (the scope's), and what the server
/// keeps track of on it.
pub(crate) struct Connection {
    pub(super) info: ConnInfo,
    /// The request heads recorded as they were read, in the client's order.
    pub(super) heads: Arc<HeadLog>,
    /// Its requests in progress, for the idle timeout and for putting it aside when idle.
    pub(super) streams: Arc<OpenStreams>,
    /// `h3=":PORT"`, added to every response over TLS when HTTP/3 is served beside it.
    pub(super) alt_svc: Option<HeaderValue>,
    /// One permit per app call running for this connection, as many as it may have streams
    /// open: a stream the client makes the server reset ends for HTTP/2, but not its app call,
    /// so without them one connection could run any number of app calls at once.
    app_calls: Arc<Semaphore>,
}

/// One app call running for a connection (see `Connection::app_calls`), until dropped.
pub(crate) type AppCall = OwnedSemaphorePermit;

impl Connection {
    /// `max_app_calls`: the streams the connection may have open at once.
    pub(crate) fn new(info: ConnInfo, max_app_calls: usize) -> Self {
        Self {
            info,
            heads: Arc::default(),
            streams: Arc::default(),
            alt_svc: None,
            app_calls: Arc::new(Semaphore::new(max_app_calls)),
        }
    }

    /// A permit for one more app call, if fewer than the limit run.
    pub(super) fn try_app_call(&self) -> Option<AppCall> {
        self.app_calls.clone().try_acquire_owned().ok()
    }

    /// A permit for one more app call, once fewer than the limit run.
    pub(super) async fn app_call(&self) -> AppCall {
        let semaphore = self.app_calls.clone();
        semaphore.acquire_owned().await.expect("never closed")
    }

    /// The connection, announcing HTTP/3 with `alt_svc` on every response.
    pub(crate) fn announcing(mut self, alt_svc: Option<HeaderValue>) -> Self {
        self.alt_svc = alt_svc;
        self
    }
}
