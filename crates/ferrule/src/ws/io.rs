//! One WebSocket's `receive` and `send`, and `run_socket`, the tokio task that owns the upgraded
//! connection: frames from the client go to the app through a bounded channel (a slow app stops
//! the reading), the app's messages go out through another (a slow client suspends `send()` on a
//! native future), as for HTTP bodies.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use futures_util::{SinkExt, StreamExt};
use http::{HeaderMap, HeaderValue, Response, StatusCode};
use hyper::upgrade::Upgraded;
use hyper_util::rt::TokioIo;
use pyo3::exceptions::{PyRuntimeError, PyTypeError, PyValueError};
use pyo3::intern;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict, PyString};
use tokio::sync::{mpsc, oneshot};
use tokio_tungstenite::tungstenite::error::{Error as WsError, ProtocolError};
use tokio_tungstenite::tungstenite::protocol::frame::coding::CloseCode;
use tokio_tungstenite::tungstenite::protocol::{CloseFrame, Role, WebSocketConfig};
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::WebSocketStream;

use crate::bridge::{NativeFuture, ResumeVia};
use crate::http::body::ResponseBody;
use crate::http::disconnected::client_gone;
use crate::http::messages::{optional_field, optional_flag, parse_headers};
use crate::http::responses::plain_response;
use crate::http::shared::ServerShared;

/// Messages from the app waiting for the socket; past this `send()` suspends.
pub const OUTBOUND_CAPACITY: usize = 256;
/// How long the server waits for the client's half of a close handshake it started.
const CLOSE_TIMEOUT: Duration = Duration::from_secs(5);

/// What the socket task hands the app.
pub enum Inbound {
    Text(String),
    Binary(Bytes),
    Disconnect(u16, String),
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Phase {
    /// Before `websocket.accept`: the app may accept, close (403) or deny with a response.
    Connecting,
    /// Sending its own HTTP response instead (the denial-response extension).
    Denying,
    Accepted,
    /// The app sent `websocket.close` (or its response): nothing more to send.
    Closed,
}

struct State {
    phase: Phase,
    connect_delivered: bool,
    /// The upgrade's HTTP answer (101, 403, 500 or the app's own), until sent.
    head_tx: Option<oneshot::Sender<Response<ResponseBody>>>,
    accept_key: String,
    denial: Option<(StatusCode, HeaderMap, Vec<u8>)>,
    outbound: Option<mpsc::Sender<Message>>,
    /// How the socket ended (code, reason), once it has: what `receive()` reports after the
    /// messages still queued.
    socket_ended: Option<(u16, String)>,
    /// The `websocket.disconnect` given to the app, repeated to every later `receive()`.
    disconnected: Option<(u16, String)>,
}

/// What one WebSocket's callables and its socket task share.
pub struct WsExchange {
    pub server: Arc<ServerShared>,
    state: Mutex<State>,
    inbound: Arc<tokio::sync::Mutex<mpsc::Receiver<Inbound>>>,
}

/// The socket task's half of both channels.
pub struct SocketEnds {
    inbound_tx: mpsc::Sender<Inbound>,
    outbound_rx: mpsc::Receiver<Message>,
}

/// The upgrade's HTTP answer (101, 403, 500 or the app's own), once the app has decided.
pub type Answer = oneshot::Receiver<Response<ResponseBody>>;

impl WsExchange {
    pub fn new(server: Arc<ServerShared>, accept_key: String) -> (Arc<Self>, Answer, SocketEnds) {
        let (head_tx, head_rx) = oneshot::channel();
        // Messages from the client waiting for the app's `receive()` (`--ws-max-queue`); past
        // this the socket is not read.
        let (inbound_tx, inbound_rx) = mpsc::channel(server.ws_max_queue);
        let (outbound_tx, outbound_rx) = mpsc::channel(OUTBOUND_CAPACITY);
        let exchange = Arc::new(Self {
            server,
            state: Mutex::new(State {
                phase: Phase::Connecting,
                connect_delivered: false,
                head_tx: Some(head_tx),
                accept_key,
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

    fn answer(state: &mut State, response: Response<ResponseBody>) {
        if let Some(head_tx) = state.head_tx.take() {
            let _ = head_tx.send(response);
        }
    }

    /// The app's coroutine ended: make sure the client has an answer (403 if it neither
    /// accepted nor answered, 500 if it failed first) or a close (1000, or 1011 if it failed).
    pub fn finish_app(&self, failed: bool) {
        let mut state = self.state.lock().unwrap();
        let phase = state.phase;
        state.phase = Phase::Closed;
        match phase {
            Phase::Connecting | Phase::Denying => {
                let status = if failed {
                    StatusCode::INTERNAL_SERVER_ERROR
                } else {
                    StatusCode::FORBIDDEN
                };
                Self::answer(&mut state, plain_response(status, &self.server));
            }
            Phase::Accepted => {
                let code = if failed { 1011 } else { 1000 };
                if let Some(outbound) = state.outbound.take() {
                    let _ = outbound.try_send(close_message(code, ""));
                }
            }
            Phase::Closed => {}
        }
    }

    /// The socket task ended with the client gone or the close handshake done: `send()` now
    /// raises, and `receive()` reports this once the queued messages are read.
    pub fn mark_closed(&self, code: u16, reason: String) {
        let mut state = self.state.lock().unwrap();
        state.outbound = None;
        state.socket_ended.get_or_insert((code, reason));
    }

    fn ended(&self) -> Inbound {
        let state = self.state.lock().unwrap();
        let (code, reason) = state.socket_ended.clone().unwrap_or((1006, String::new()));
        Inbound::Disconnect(code, reason)
    }
}

/// An app's `websocket.close` must make a valid close frame (as websockets, under uvicorn,
/// refuses otherwise): a code an endpoint may send (RFC 6455 7.4: 1005, 1006 and 1015 only
/// report what happened, and under 1000 or from 5000 are no codes at all), and a reason that
/// keeps the frame within the 125 bytes of a control frame (5.5).
fn check_close(code: u16, reason: &str) -> PyResult<()> {
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

fn close_message(code: u16, reason: &str) -> Message {
    Message::Close(Some(CloseFrame {
        code: CloseCode::from(code),
        reason: reason.to_owned().into(),
    }))
}

fn message_dict<'py>(py: Python<'py>, message: Inbound) -> PyResult<Bound<'py, PyDict>> {
    let dict = PyDict::new(py);
    match message {
        Inbound::Text(text) => {
            dict.set_item(intern!(py, "type"), intern!(py, "websocket.receive"))?;
            dict.set_item(intern!(py, "text"), PyString::new(py, &text))?;
        }
        Inbound::Binary(data) => {
            dict.set_item(intern!(py, "type"), intern!(py, "websocket.receive"))?;
            dict.set_item(intern!(py, "bytes"), PyBytes::new(py, &data))?;
        }
        Inbound::Disconnect(code, reason) => {
            dict.set_item(intern!(py, "type"), intern!(py, "websocket.disconnect"))?;
            dict.set_item(intern!(py, "code"), code)?;
            dict.set_item(intern!(py, "reason"), reason)?;
        }
    }
    Ok(dict)
}

/// The ASGI `receive` callable of one WebSocket.
#[pyclass(frozen, module = "ferrule._ferrule")]
pub struct WsReceive {
    pub exchange: Arc<WsExchange>,
}

#[pymethods]
impl WsReceive {
    fn __call__(&self, py: Python<'_>) -> PyResult<Py<NativeFuture>> {
        let exchange = &self.exchange;
        let bridge = exchange.server.bridge.clone();
        {
            let mut state = exchange.state.lock().unwrap();
            if !state.connect_delivered {
                state.connect_delivered = true;
                let message = PyDict::new(py);
                message.set_item(intern!(py, "type"), intern!(py, "websocket.connect"))?;
                return Py::new(
                    py,
                    NativeFuture::resolved(bridge, message.into_any().unbind()),
                );
            }
            if let Some((code, reason)) = &state.disconnected {
                let message = message_dict(py, Inbound::Disconnect(*code, reason.clone()))?;
                return Py::new(
                    py,
                    NativeFuture::resolved(bridge, message.into_any().unbind()),
                );
            }
        }
        // Something already queued (or the end of the socket) is answered at once.
        if let Ok(mut inbound) = exchange.inbound.try_lock() {
            let ready = match inbound.try_recv() {
                Ok(message) => Some(message),
                Err(mpsc::error::TryRecvError::Disconnected) => Some(exchange.ended()),
                Err(mpsc::error::TryRecvError::Empty) => None,
            };
            if let Some(message) = ready {
                let message = message_dict(py, remember(exchange, message))?;
                return Py::new(
                    py,
                    NativeFuture::resolved(bridge, message.into_any().unbind()),
                );
            }
        }
        let future = Py::new(py, NativeFuture::new(bridge))?;
        let resolving = future.clone_ref(py);
        let handle = exchange.server.bridge.handle.clone();
        let exchange = exchange.clone();
        handle.spawn(async move {
            let message = exchange.inbound.lock().await.recv().await;
            let message = remember(&exchange, message.unwrap_or_else(|| exchange.ended()));
            Python::attach(|py| {
                let message = message_dict(py, message).map(|m| m.into_any().unbind());
                NativeFuture::settle(resolving.bind(py), message, ResumeVia::DriveNow);
            });
        });
        Ok(future)
    }
}

/// Keeps a disconnect to repeat it to every later `receive()`.
fn remember(exchange: &WsExchange, message: Inbound) -> Inbound {
    if let Inbound::Disconnect(code, reason) = &message {
        let mut state = exchange.state.lock().unwrap();
        state.disconnected = Some((*code, reason.clone()));
    }
    message
}

/// The ASGI `send` callable of one WebSocket.
#[pyclass(frozen, module = "ferrule._ferrule")]
pub struct WsSend {
    pub exchange: Arc<WsExchange>,
}

#[pymethods]
impl WsSend {
    fn __call__(&self, py: Python<'_>, message: Bound<'_, PyAny>) -> PyResult<Py<PyAny>> {
        let kind = message.get_item(intern!(py, "type"))?;
        let kind = kind
            .cast::<PyString>()
            .map_err(|_| PyTypeError::new_err("ASGI message 'type' must be a str"))?;
        let kind = kind.to_str()?;
        let outgoing = match kind {
            "websocket.accept" => return self.accept(py, &message),
            "websocket.http.response.start" | "websocket.http.response.body" => {
                return self.deny(py, kind, &message)
            }
            "websocket.send" => frame_of(py, &message)?,
            "websocket.close" => {
                let code: u16 = match optional_field(&message, intern!(py, "code"))? {
                    Some(code) => code.extract()?,
                    None => 1000,
                };
                let reason: String = match optional_field(&message, intern!(py, "reason"))? {
                    Some(reason) if !reason.is_none() => reason.extract()?,
                    _ => String::new(),
                };
                let mut state = self.exchange.state.lock().unwrap();
                if matches!(state.phase, Phase::Connecting) {
                    state.phase = Phase::Closed;
                    let forbidden = plain_response(StatusCode::FORBIDDEN, &self.exchange.server);
                    WsExchange::answer(&mut state, forbidden);
                    return Ok(self.done(py));
                }
                drop(state);
                check_close(code, &reason)?;
                return self.push(py, close_message(code, &reason), true);
            }
            other => {
                return Err(PyValueError::new_err(format!(
                    "Unexpected ASGI message type '{other}'"
                )))
            }
        };
        self.push(py, outgoing, false)
    }
}

/// The frame a `websocket.send` asks for: exactly one of `bytes` and `text`.
fn frame_of(py: Python<'_>, message: &Bound<'_, PyAny>) -> PyResult<Message> {
    let bytes = optional_field(message, intern!(py, "bytes"))?.filter(|b| !b.is_none());
    let text = optional_field(message, intern!(py, "text"))?.filter(|t| !t.is_none());
    match (bytes, text) {
        (Some(bytes), None) => Ok(Message::Binary(Bytes::copy_from_slice(
            bytes
                .cast::<PyBytes>()
                .map_err(|_| PyTypeError::new_err("websocket.send 'bytes' must be bytes"))?
                .as_bytes(),
        ))),
        (None, Some(text)) => Ok(Message::Text(
            text.cast::<PyString>()
                .map_err(|_| PyTypeError::new_err("websocket.send 'text' must be a str"))?
                .to_str()?
                .to_owned()
                .into(),
        )),
        _ => Err(PyValueError::new_err(
            "websocket.send needs exactly one of 'bytes' and 'text'",
        )),
    }
}

impl WsSend {
    fn done(&self, py: Python<'_>) -> Py<PyAny> {
        self.exchange.server.done_future.clone_ref(py)
    }

    fn accept(&self, py: Python<'_>, message: &Bound<'_, PyAny>) -> PyResult<Py<PyAny>> {
        let subprotocol: Option<String> = match optional_field(message, intern!(py, "subprotocol"))?
        {
            Some(value) if !value.is_none() => Some(value.extract()?),
            _ => None,
        };
        let mut headers = parse_headers(py, message)?;
        let mut state = self.exchange.state.lock().unwrap();
        if state.phase != Phase::Connecting {
            return Err(PyRuntimeError::new_err(format!(
                "Unexpected ASGI message 'websocket.accept' in state {:?}",
                state.phase
            )));
        }
        if let Some(subprotocol) = subprotocol {
            let value = HeaderValue::from_str(&subprotocol)
                .map_err(|_| PyValueError::new_err("invalid subprotocol"))?;
            headers.insert(http::header::SEC_WEBSOCKET_PROTOCOL, value);
        }
        let accept = HeaderValue::from_str(&state.accept_key).expect("base64 is a header value");
        headers.insert(http::header::SEC_WEBSOCKET_ACCEPT, accept);
        headers.insert(http::header::UPGRADE, HeaderValue::from_static("websocket"));
        headers.insert(
            http::header::CONNECTION,
            HeaderValue::from_static("Upgrade"),
        );
        self.exchange.server.add_default_headers(&mut headers);
        let mut response = Response::new(ResponseBody::full(Bytes::new()));
        *response.status_mut() = StatusCode::SWITCHING_PROTOCOLS;
        *response.headers_mut() = headers;
        state.phase = Phase::Accepted;
        WsExchange::answer(&mut state, response);
        Ok(self.done(py))
    }

    /// The denial-response extension: an HTTP response instead of the WebSocket.
    fn deny(&self, py: Python<'_>, kind: &str, message: &Bound<'_, PyAny>) -> PyResult<Py<PyAny>> {
        let mut state = self.exchange.state.lock().unwrap();
        match (kind, state.phase) {
            ("websocket.http.response.start", Phase::Connecting) => {
                let status: u16 = message.get_item(intern!(py, "status"))?.extract()?;
                let status = StatusCode::from_u16(status)
                    .ok()
                    .filter(|s| (200..600).contains(&s.as_u16()))
                    .ok_or_else(|| PyValueError::new_err(format!("invalid status {status}")))?;
                let headers = parse_headers(py, message)?;
                state.denial = Some((status, headers, Vec::new()));
                state.phase = Phase::Denying;
            }
            ("websocket.http.response.body", Phase::Denying) => {
                if let Some(body) = optional_field(message, intern!(py, "body"))? {
                    let body = body.cast::<PyBytes>().map_err(|_| {
                        PyTypeError::new_err("websocket.http.response.body 'body' must be bytes")
                    })?;
                    if let Some((_, _, buffer)) = state.denial.as_mut() {
                        buffer.extend_from_slice(body.as_bytes());
                    }
                }
                let more = optional_flag(message, intern!(py, "more_body"))?;
                if !more {
                    let (status, headers, body) = state.denial.take().expect("a denial started");
                    let mut response = Response::new(ResponseBody::full(Bytes::from(body)));
                    *response.status_mut() = status;
                    *response.headers_mut() = headers;
                    self.exchange
                        .server
                        .add_default_headers(response.headers_mut());
                    state.phase = Phase::Closed;
                    WsExchange::answer(&mut state, response);
                }
            }
            (kind, phase) => {
                return Err(PyRuntimeError::new_err(format!(
                    "Unexpected ASGI message '{kind}' in state {phase:?}"
                )))
            }
        }
        Ok(self.done(py))
    }

    /// Queues a frame for the socket; a full queue suspends the caller on a native future.
    fn push(&self, py: Python<'_>, frame: Message, closing: bool) -> PyResult<Py<PyAny>> {
        let tx = {
            let mut state = self.exchange.state.lock().unwrap();
            match state.phase {
                Phase::Accepted => {}
                Phase::Closed if state.socket_ended.is_some() => return Err(client_gone()),
                phase => {
                    return Err(PyRuntimeError::new_err(format!(
                        "Unexpected ASGI message 'websocket.send' or 'websocket.close' in state \
                         {phase:?}"
                    )))
                }
            }
            if closing {
                state.phase = Phase::Closed;
                state.outbound.take()
            } else {
                state.outbound.clone()
            }
        };
        let Some(tx) = tx else {
            return Err(client_gone());
        };
        match tx.try_send(frame) {
            Ok(()) => Ok(self.done(py)),
            Err(mpsc::error::TrySendError::Closed(_)) => Err(client_gone()),
            Err(mpsc::error::TrySendError::Full(frame)) => {
                let future = Py::new(py, NativeFuture::new(self.exchange.server.bridge.clone()))?;
                let resolving = future.clone_ref(py);
                self.exchange.server.bridge.handle.spawn(async move {
                    let sent = tx.send(frame).await;
                    Python::attach(|py| {
                        let result = sent.map(|()| py.None()).map_err(|_| client_gone());
                        NativeFuture::settle(resolving.bind(py), result, ResumeVia::DriveNow);
                    });
                });
                Ok(future.into_any())
            }
        }
    }
}

/// Sleeps until `at`, or forever if there is no `at`.
async fn sleep_until_if(at: Option<tokio::time::Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

/// The close code for a failure reading from the client.
fn error_close_code(err: &WsError) -> Option<u16> {
    match err {
        WsError::Capacity(_) => Some(1009),
        WsError::Utf8(_) => Some(1007),
        WsError::Protocol(ProtocolError::ResetWithoutClosingHandshake) => None,
        WsError::Protocol(_) => Some(1002),
        _ => None,
    }
}

/// Owns the upgraded connection until the WebSocket is over.
pub async fn run_socket(
    upgraded: Upgraded,
    exchange: Arc<WsExchange>,
    ends: SocketEnds,
    max_size: usize,
) {
    let SocketEnds {
        inbound_tx,
        mut outbound_rx,
    } = ends;
    let config = WebSocketConfig::default()
        .max_message_size(Some(max_size))
        .max_frame_size(Some(max_size));
    let socket =
        WebSocketStream::from_raw_socket(TokioIo::new(upgraded), Role::Server, Some(config)).await;
    let (mut sink, mut stream) = socket.split();
    let mut stopping = exchange.server.stopping.clone();
    // The close code the app hears, once known.
    let mut ended: Option<(u16, String)> = None;
    let mut close_deadline: Option<tokio::time::Instant> = None;
    let mut app_done = false;
    let ping = exchange.server.ws_ping;
    let mut pings = ping.interval.map(|every| {
        let mut pings = tokio::time::interval_at(tokio::time::Instant::now() + every, every);
        pings.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        pings
    });
    // When the oldest unanswered ping times out (any pong answers it, as RFC 6455 allows).
    let mut pong_due: Option<tokio::time::Instant> = None;
    loop {
        let deadline = sleep_until_if(close_deadline);
        let pong_overdue = sleep_until_if(pong_due);
        let next_ping = async {
            match pings.as_mut() {
                Some(pings) => pings.tick().await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            // Read only while the app has room for another message.
            read = async {
                let permit = inbound_tx.reserve().await;
                (permit, stream.next().await)
            } => {
                let (permit, read) = read;
                match read {
                    Some(Ok(Message::Text(text))) => {
                        if let Ok(permit) = permit {
                            permit.send(Inbound::Text(text.as_str().to_owned()));
                        }
                    }
                    Some(Ok(Message::Binary(data))) => {
                        if let Ok(permit) = permit {
                            permit.send(Inbound::Binary(data));
                        }
                    }
                    // Pings are answered by tungstenite as they are read.
                    Some(Ok(Message::Ping(_) | Message::Frame(_))) => {}
                    Some(Ok(Message::Pong(_))) => pong_due = None,
                    Some(Ok(Message::Close(frame))) => {
                        // tungstenite answers the close; the app hears the client's code.
                        let (code, reason) = frame
                            .map(|f| (u16::from(f.code), f.reason.as_str().to_owned()))
                            .unwrap_or((1005, String::new()));
                        ended.get_or_insert((code, reason));
                        // Flush tungstenite's reply to the close.
                        let _ = sink.flush().await;
                        break;
                    }
                    Some(Err(err)) => {
                        if let Some(code) = error_close_code(&err) {
                            let _ = sink.send(close_message(code, "")).await;
                            ended.get_or_insert((code, String::new()));
                        }
                        break;
                    }
                    None => break,
                }
            }
            out = outbound_rx.recv(), if !app_done => {
                match out {
                    Some(message) => {
                        let closing = matches!(message, Message::Close(_));
                        if let Message::Close(Some(frame)) = &message {
                            ended = Some((u16::from(frame.code), frame.reason.as_str().to_owned()));
                        }
                        if sink.send(message).await.is_err() {
                            break;
                        }
                        if closing {
                            app_done = true;
                            close_deadline = Some(tokio::time::Instant::now() + CLOSE_TIMEOUT);
                        }
                    }
                    None => {
                        // Every sender is gone without a close (finish_app sends one normally).
                        app_done = true;
                        if ended.is_none() {
                            let _ = sink.send(close_message(1000, "")).await;
                            ended = Some((1000, String::new()));
                        }
                        close_deadline = Some(tokio::time::Instant::now() + CLOSE_TIMEOUT);
                    }
                }
            }
            _ = deadline => break,
            _ = next_ping, if close_deadline.is_none() => {
                if sink.send(Message::Ping(Bytes::new())).await.is_err() {
                    break;
                }
                if let (None, Some(timeout)) = (pong_due, ping.timeout) {
                    pong_due = Some(tokio::time::Instant::now() + timeout);
                }
            }
            _ = pong_overdue, if close_deadline.is_none() => {
                // The peer is gone or stuck: 1011, as the websockets library (uvicorn) sends.
                ended.get_or_insert((1011, String::new()));
                let closing = sink.send(close_message(1011, "keepalive ping timeout"));
                let _ = tokio::time::timeout(CLOSE_TIMEOUT, closing).await;
                break;
            }
            // The server is shutting down: 1012 (service restart), as uvicorn sends.
            _ = async { stopping.wait_for(Option::is_some).await.is_ok() }, if close_deadline.is_none() => {
                ended.get_or_insert((1012, String::new()));
                let _ = sink.send(close_message(1012, "server shutting down")).await;
                close_deadline = Some(tokio::time::Instant::now() + CLOSE_TIMEOUT);
            }
        }
    }
    let (code, reason) = ended.unwrap_or((1006, String::new()));
    exchange.mark_closed(code, reason);
    drop(inbound_tx); // receive() reports the end once the queued messages are read
    let _ = sink.close().await;
}
