//! `Connection`: one connection as its requests see it.

use std::sync::Arc;

use http::HeaderValue;

use crate::asgi::conn::ConnInfo;

use super::app_calls::AppCalls;
use super::heads::HeadLog;
use super::interim::InterimQueue;
use super::streams::OpenStreams;
use super::upgrade::Upgrader;

/// One connection as its requests see it: its two ends (the scope's), and what the server
/// keeps track of on it.
pub(crate) struct Connection {
    pub(crate) info: ConnInfo,
    /// The request heads recorded as they were read, in the client's order.
    pub(crate) heads: Arc<HeadLog>,
    /// Its requests in progress, for the idle timeout and for putting it aside when idle.
    pub(crate) streams: Arc<OpenStreams>,
    /// `h3=":PORT"`, added to every response over TLS when HTTP/3 is served beside it.
    pub(crate) alt_svc: Option<HeaderValue>,
    /// Its app calls running, at most as many as it may have streams open.
    pub(crate) app_calls: Arc<AppCalls>,
    /// How its upgrade requests become WebSockets; None where the transport has no way.
    pub(crate) upgrader: Option<Upgrader>,
    /// Its HTTP/1.1 requests' 103 Early Hints, which the transport writes (`with_interim`).
    pub(crate) interim: Option<Arc<InterimQueue>>,
}

impl Connection {
    /// `max_app_calls`: the streams the connection may have open at once; `upgrader`, how
    /// an upgrade request is served, if it can be.
    pub(crate) fn new(info: ConnInfo, max_app_calls: usize, upgrader: Option<Upgrader>) -> Self {
        Self {
            info,
            heads: Arc::default(),
            streams: Arc::default(),
            alt_svc: None,
            app_calls: Arc::new(AppCalls::new(max_app_calls)),
            upgrader,
            interim: None,
        }
    }

    /// The connection, its HTTP/1.1 requests sending 103 Early Hints through `interim`, which
    /// the transport writes to the socket.
    pub(crate) fn with_interim(mut self, interim: Arc<InterimQueue>) -> Self {
        self.interim = Some(interim);
        self
    }

    /// The connection, announcing HTTP/3 with `alt_svc` on every response.
    pub(crate) fn announcing(mut self, alt_svc: Option<HeaderValue>) -> Self {
        self.alt_svc = alt_svc;
        self
    }
}
