//! The ASGI `receive` and `send` callables of one WebSocket.

use std::sync::Arc;

use bytes::Bytes;
use http::{HeaderValue, Response, StatusCode};
use pyo3::exceptions::{PyRuntimeError, PyTypeError, PyValueError};
use pyo3::intern;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict, PyString};
use tokio::sync::mpsc;
use tokio_tungstenite::tungstenite::Message;

use crate::asgi::disconnected::client_gone;
use crate::asgi::levels::WARNING;
use crate::asgi::logging::log_line;
use crate::asgi::messages::{optional_field, optional_flag, parse_headers, required_field};
use crate::asgi::responses::plain_response;
use crate::bridge::{NativeFuture, ResumeVia};

use super::exchange::{check_close, close_message, denial_response, Inbound, Phase, WsExchange};

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
            if let Some(reason) = reason {
                dict.set_item(intern!(py, "reason"), reason)?;
            }
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
            let mut state = exchange.lock_state(Some(py));
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
                Err(mpsc::error::TryRecvError::Disconnected) => Some(exchange.ended(Some(py))),
                Err(mpsc::error::TryRecvError::Empty) => None,
            };
            if let Some(message) = ready {
                let message = message_dict(py, remember(exchange, message, Some(py)))?;
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
            let message = message.unwrap_or_else(|| exchange.ended(None));
            let message = remember(&exchange, message, None);
            Python::attach(|py| {
                let message = message_dict(py, message).map(|m| m.into_any().unbind());
                NativeFuture::settle(resolving.bind(py), message, ResumeVia::DriveNow);
            });
        });
        Ok(future)
    }
}

/// Keeps a disconnect to repeat it to every later `receive()`; `py` as for `lock_state`.
fn remember(exchange: &WsExchange, message: Inbound, py: Option<Python<'_>>) -> Inbound {
    if let Inbound::Disconnect(code, reason) = &message {
        let mut state = exchange.lock_state(py);
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
        let kind = required_field(&message, intern!(py, "type"))?;
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
                let mut state = self.exchange.lock_state(Some(py));
                if matches!(state.phase, Phase::Connecting) {
                    // A close before the handshake denies it, whatever the reason holds (FastAPI
                    // passes its list of validation errors there).
                    state.phase = Phase::Closed;
                    let forbidden =
                        plain_response(StatusCode::FORBIDDEN, &self.exchange.server.settings);
                    WsExchange::answer(&mut state, forbidden);
                    return Ok(self.done(py));
                }
                drop(state);
                let reason = self.close_reason(py, &message)?;
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

impl WsSend {
    fn done(&self, py: Python<'_>) -> Py<PyAny> {
        self.exchange.server.py.done_future.clone_ref(py)
    }

    /// The close frame's reason: a `str`, or nothing. Anything else is dropped with a warning,
    /// so that the close still goes out with the app's code rather than the socket failing.
    fn close_reason(&self, py: Python<'_>, message: &Bound<'_, PyAny>) -> PyResult<String> {
        let Some(reason) = optional_field(message, intern!(py, "reason"))? else {
            return Ok(String::new());
        };
        if reason.is_none() {
            return Ok(String::new());
        }
        if let Ok(reason) = reason.cast::<PyString>() {
            return Ok(reason.to_str()?.to_owned());
        }
        let kind = reason.get_type().name()?;
        let line =
            format!("websocket.close: the reason is a {kind}, not a str; closing without it");
        log_line(&self.exchange.server.py, WARNING, &line);
        Ok(String::new())
    }

    fn accept(&self, py: Python<'_>, message: &Bound<'_, PyAny>) -> PyResult<Py<PyAny>> {
        let subprotocol: Option<String> = match optional_field(message, intern!(py, "subprotocol"))?
        {
            Some(value) if !value.is_none() => Some(value.extract()?),
            _ => None,
        };
        let mut headers = parse_headers(py, message)?;
        let mut state = self.exchange.lock_state(Some(py));
        if state.phase == Phase::Closed && state.socket_ended.is_some() {
            return Err(client_gone());
        }
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
        // HTTP/2 (RFC 8441): a 200 on the stream, which has no connection-wide headers.
        let status = match &state.accept_key {
            Some(accept_key) => {
                let accept = HeaderValue::from_str(accept_key).expect("base64 is a header value");
                headers.insert(http::header::SEC_WEBSOCKET_ACCEPT, accept);
                headers.insert(http::header::UPGRADE, HeaderValue::from_static("websocket"));
                headers.insert(
                    http::header::CONNECTION,
                    HeaderValue::from_static("Upgrade"),
                );
                StatusCode::SWITCHING_PROTOCOLS
            }
            None => StatusCode::OK,
        };
        if let Some(extensions) = state.extensions.clone() {
            headers.insert(http::header::SEC_WEBSOCKET_EXTENSIONS, extensions);
        }
        self.exchange
            .server
            .settings
            .add_default_headers(&mut headers);
        let mut response = Response::new(Bytes::new());
        *response.status_mut() = status;
        *response.headers_mut() = headers;
        state.accepted = true;
        state.phase = Phase::Accepted;
        WsExchange::answer(&mut state, response);
        Ok(self.done(py))
    }

    /// The denial-response extension: an HTTP response instead of the WebSocket.
    fn deny(&self, py: Python<'_>, kind: &str, message: &Bound<'_, PyAny>) -> PyResult<Py<PyAny>> {
        let mut state = self.exchange.lock_state(Some(py));
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
                    let settings = &self.exchange.server.settings;
                    let response = denial_response(status, headers, body, settings);
                    state.phase = Phase::Closed;
                    WsExchange::answer(&mut state, response);
                }
            }
            ("websocket.http.response.start", Phase::Denying) => {
                return Err(PyRuntimeError::new_err(
                    "Expected ASGI message 'websocket.http.response.body' but got \
                     'websocket.http.response.start'.",
                ))
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
            let mut state = self.exchange.lock_state(Some(py));
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
