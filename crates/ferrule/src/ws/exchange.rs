//! `WsExchange`: what one WebSocket's callables and its socket task share, and where the
//! session stands.

use std::sync::{Arc, Mutex, MutexGuard};

use bytes::Bytes;
use http::{HeaderMap, HeaderValue, Response, StatusCode};
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use tokio::sync::{mpsc, oneshot};
use tokio_tungstenite::tungstenite::protocol::frame::coding::CloseCode;
use tokio_tungstenite::tungstenite::protocol::CloseFrame;
use tokio_tungstenite::tungstenite::Message;

use crate::asgi::gil_lock;
use crate::asgi::responses::closing_response;
use crate::asgi::server::Server;
use crate::asgi::settings::Settings;

/// Messages from the app waiting for the socket; past this `send()` suspends.
pub const OUTBOUND_CAPACITY: usize = 256;

/// What the socket task hands the app.
pub enum Inbound {
    Text(String),
    Binary(Bytes),
    /// The close code, and the reason when a close frame carried one: a disconnect the
    /// server detected (1006, 1012, a protocol error) has none, and its message no `reason`.
    Disconnect(u16, Option<String>),
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(super) enum Phase {
    /// Before `websocket.accept`: the app may accept, close (403) or deny with a response.
    Connecting,
    /// Sending its own HTTP response instead (the denial-response extension).
    Denying,
    Accepted,
    /// The app sent `websocket.close` (or its response): nothing more to send.
    Closed,
}

pub(super) struct State {
    pub(super) phase: Phase,
    pub(super) connect_delivered: bool,
    /// The app sent `websocket.accept`.
    pub(super) accepted: bool,
    /// The upgrade's HTTP answer (101, 403, 500 or the app's own), until sent.
    head_tx: Option<oneshot::Sender<Response<Bytes>>>,
    /// `Sec-WebSocket-Accept` for an HTTP/1.1 handshake; `None` on HTTP/2 (answered 200).
    pub(super) accept_key: Option<String>,
    /// The `Sec-WebSocket-Extensions` of the answer, when permessage-deflate was agreed.
    pub(super) extensions: Option<HeaderValue>,
    pub(super) denial: Option<(StatusCode, HeaderMap, Vec<u8>)>,
    pub(super) outbound: Option<mpsc::Sender<Message>>,
    /// How the socket ended (code, reason), once it has: what `receive()` reports after the
    /// messages still queued.
    pub(super) socket_ended: Option<(u16, Option<String>)>,
    /// The `websocket.disconnect` given to the app, repeated to every later `receive()`.
    pub(super) disconnected: Option<(u16, Option<String>)>,
}

/// What one WebSocket's callables and its socket task share.
pub struct WsExchange {
    pub server: Arc<Server>,
    state: Mutex<State>,
    pub(super) inbound: Arc<tokio::sync::Mutex<mpsc::Receiver<Inbound>>>,
}

/// The socket task's half of both channels.
pub struct SocketEnds {
    pub(super) inbound_tx: mpsc::Sender<Inbound>,
    pub(super) outbound_rx: mpsc::Receiver<Message>,
}

/// The upgrade's HTTP answer (101, 403, 500 or the app's own), once the app has decided.
pub type Answer = oneshot::Receiver<Response<Bytes>>;

impl WsExchange {
    pub fn new(
        server: Arc<Server>,
        accept_key: Option<String>,
        extensions: Option<HeaderValue>,
    ) -> (Arc<Self>, Answer, SocketEnds) {
        let (head_tx, head_rx) = oneshot::channel();
        // Messages from the client waiting for the app's `receive()` (`--ws-max-queue`); past
        // this the socket is not read.
        let (inbound_tx, inbound_rx) = mpsc::channel(server.settings.ws_max_queue);
        let (outbound_tx, outbound_rx) = mpsc::channel(OUTBOUND_CAPACITY);
        let exchange = Arc::new(Self {
            server,
            state: Mutex::new(State {
                phase: Phase::Connecting,
                connect_delivered: false,
                accepted: false,
                head_tx: Some(head_tx),
                accept_key,
                extensions,
                denial: None,
                outbound: Some(outbound_tx),
                socket_ended: None,
                disconnected: None,
            }),
            inbound: Arc::new(tokio::sync::Mutex::new(inbound_rx)),
        });
        let ends = SocketEnds {
            inbound_tx,
            outbound_rx,
        };
        (exchange, head_rx, ends)
    }

    /// Locks the session's state; `py` when the caller holds the GIL (see `gil_lock`).
    pub(super) fn lock_state(&self, py: Option<Python<'_>>) -> MutexGuard<'_, State> {
        gil_lock::lock(&self.state, py)
    }

    pub(super) fn answer(state: &mut State, response: Response<Bytes>) {
        if let Some(head_tx) = state.head_tx.take() {
            let _ = head_tx.send(response);
        }
    }

    /// The app's coroutine ended: make sure the client has an answer or a close. Before a
    /// handshake: 500 (an app must accept, close or answer; uvicorn answers 500 too); with its
    /// own response begun: that response if its `Content-Length` says it is whole, else what
    /// it sent (or 500 if it failed). After accepting: a close, 1000 (1011 if it failed).
    /// Returns what to log when the app itself did nothing wrong in Python's eyes.
    pub fn finish_app(&self, py: Python<'_>, failed: bool) -> Option<&'static str> {
        let mut state = self.lock_state(Some(py));
        let phase = state.phase;
        state.phase = Phase::Closed;
        let settings = &self.server.settings;
        match phase {
            Phase::Connecting => {
                let error = closing_response(StatusCode::INTERNAL_SERVER_ERROR, settings);
                Self::answer(&mut state, error);
                (!failed).then_some("ASGI callable returned without sending handshake.")
            }
            Phase::Denying => {
                let (status, headers, body) = state.denial.take().expect("a denial started");
                let declared = headers
                    .get(http::header::CONTENT_LENGTH)
                    .and_then(|v| v.to_str().ok()?.trim().parse::<usize>().ok());
                let whole = declared == Some(body.len());
                if failed && !whole {
                    let error = closing_response(StatusCode::INTERNAL_SERVER_ERROR, settings);
                    Self::answer(&mut state, error);
                    return None;
                }
                let mut response = denial_response(status, headers, body, settings);
                if !whole {
                    response.headers_mut().remove(http::header::CONTENT_LENGTH);
                }
                Self::answer(&mut state, response);
                (!failed && !whole).then_some("ASGI callable returned without completing response.")
            }
            Phase::Accepted => {
                let code = if failed { 1011 } else { 1000 };
                if let Some(outbound) = state.outbound.take() {
                    let _ = outbound.try_send(close_message(code, ""));
                }
                None
            }
            Phase::Closed => None,
        }
    }

    /// The socket task ended with the client gone or the close handshake done: `send()` now
    /// raises, and `receive()` reports this once the queued messages are read.
    pub fn mark_closed(&self, code: u16, reason: Option<String>) {
        let mut state = self.lock_state(None);
        state.outbound = None;
        state.socket_ended.get_or_insert((code, reason));
    }

    /// Whether the app's answer was `websocket.accept` (101, or 200 on HTTP/2).
    pub fn accepted(&self) -> bool {
        self.lock_state(None).accepted
    }

    /// The handshake will not complete (the server is stopping): the app's `receive()` hears
    /// 1006, and `websocket.accept` raises as for a client gone.
    pub fn abandon(&self) {
        let mut state = self.lock_state(None);
        state.phase = Phase::Closed;
        state.head_tx = None;
        state.outbound = None;
        state.socket_ended.get_or_insert((1006, None));
    }

    /// The code the session closed with (1006 if it never closed properly).
    pub(super) fn close_code(&self) -> u16 {
        let state = self.lock_state(None);
        state.socket_ended.as_ref().map_or(1006, |(code, _)| *code)
    }

    /// How the session ended, for `receive()`; `py` as for `lock_state`.
    pub(super) fn ended(&self, py: Option<Python<'_>>) -> Inbound {
        let state = self.lock_state(py);
        let (code, reason) = state.socket_ended.clone().unwrap_or((1006, None));
        Inbound::Disconnect(code, reason)
    }
}

/// An app's `websocket.close` must make a valid close frame (as websockets, under uvicorn,
/// refuses otherwise): a code an endpoint may send (RFC 6455 7.4: 1005, 1006 and 1015 only
/// report what happened, and under 1000 or from 5000 are no codes at all), and a reason that
/// keeps the frame within the 125 bytes of a control frame (5.5).
pub(super) fn check_close(code: u16, reason: &str) -> PyResult<()> {
    let sendable = matches!(code, 1000..=1003 | 1007..=1014 | 3000..=4999);
    if !sendable {
        return Err(PyValueError::new_err(format!(
            "websocket.close: {code} is not a close code an endpoint may send"
        )));
    }
    if reason.len() > MAX_CLOSE_REASON {
        return Err(PyValueError::new_err(format!(
            "websocket.close: the reason is {} bytes in UTF-8, at most {MAX_CLOSE_REASON} fit in \
             a close frame",
            reason.len()
        )));
    }
    Ok(())
}

/// A control frame's payload is at most 125 bytes; a close frame's first two are the code.
const MAX_CLOSE_REASON: usize = 123;

pub(super) fn close_message(code: u16, reason: &str) -> Message {
    Message::Close(Some(CloseFrame {
        code: CloseCode::from(code),
        reason: reason.to_owned().into(),
    }))
}

/// The app's own answer to an upgrade it refuses (the denial-response extension).
pub(super) fn denial_response(
    status: StatusCode,
    headers: HeaderMap,
    body: Vec<u8>,
    settings: &Settings,
) -> Response<Bytes> {
    let mut response = Response::new(Bytes::from(body));
    *response.status_mut() = status;
    *response.headers_mut() = headers;
    settings.add_default_headers(response.headers_mut());
    response
}
