//! The ASGI `receive` and `send` callables of one request.
//!
//! Both return `NativeFuture`s: a message that is ready (or a send with room in the body
//! channel) returns one that is resolved already, and awaiting it never suspends; otherwise a
//! tokio task resolves it, and the driver resumes the coroutine without the asyncio loop.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use bytes::Bytes;
use http::{HeaderValue, StatusCode};
use http_body::Body;
use http_body_util::BodyExt;
use pyo3::exceptions::{PyRuntimeError, PyTypeError, PyValueError};
use pyo3::intern;
use pyo3::prelude::*;
use pyo3::pybacked::PyBackedBytes;
use pyo3::types::{PyBytes, PyDict};
use tokio::sync::mpsc;

use crate::asgi::disconnected::client_gone;
use crate::asgi::messages::{
    optional_field, optional_flag, parse_headers, parse_headers_into, parse_links, required_field,
    DeclaredLength,
};
use crate::bridge::{NativeFuture, ResumeVia};

use super::body::{ResponseBody, JOIN_BELOW};
use super::exchange::{disconnect_message, Exchange, Phase, RequestBody, BODY_CHANNEL_CAPACITY};
use super::incoming::IncomingBody;

/// How much of a file `http.response.pathsend` reads at a time.
const PATHSEND_CHUNK: usize = 64 * 1024;

/// The bytes of a body message. Chunks small enough to be joined into one frame
/// (`JOIN_BELOW`) are copied; larger ones are not: the `Bytes` hyper writes from holds the
/// app's `bytes` object (immutable), whose memory the app holds anyway while `send()` waits.
/// A stalled stream then costs no second copy of its chunk, and a large body no `memcpy`.
fn body_bytes(body: &Bound<'_, PyBytes>) -> Bytes {
    if body.as_bytes().len() < JOIN_BELOW {
        Bytes::copy_from_slice(body.as_bytes())
    } else {
        Bytes::from_owner(PyBackedBytes::from(body.clone()))
    }
}

fn request_message<'py>(
    py: Python<'py>,
    body: &[u8],
    more_body: bool,
) -> PyResult<Bound<'py, PyAny>> {
    let message = PyDict::new(py);
    message.set_item(intern!(py, "type"), intern!(py, "http.request"))?;
    message.set_item(intern!(py, "body"), PyBytes::new(py, body))?;
    message.set_item(intern!(py, "more_body"), more_body)?;
    Ok(message.into_any())
}

/// The ASGI `receive` callable of one request.
#[pyclass(frozen, module = "ferrule._ferrule")]
pub struct HttpReceive {
    pub exchange: Arc<Exchange>,
}

#[pymethods]
impl HttpReceive {
    fn __call__(&self, py: Python<'_>) -> PyResult<Py<NativeFuture>> {
        let exchange = &self.exchange;
        let bridge = exchange.server.bridge.clone();
        let mut state = exchange.lock_state(Some(py));
        if state.disconnected || state.phase == Phase::Complete {
            drop(state);
            return Py::new(
                py,
                NativeFuture::resolved(bridge, disconnect_message(py)?.unbind()),
            );
        }
        match std::mem::replace(&mut state.body, RequestBody::Reading) {
            RequestBody::Done => {
                state.body = RequestBody::Done;
                let waiter = Py::new(py, NativeFuture::new(bridge))?;
                state.disconnect_waiters.push(waiter.clone_ref(py));
                Ok(waiter)
            }
            RequestBody::Reading => Err(PyRuntimeError::new_err(
                "receive() called while a previous receive() is still waiting for the body",
            )),
            RequestBody::Unread(incoming) if incoming.is_end_stream() => {
                state.body = RequestBody::Done;
                drop(state);
                Py::new(
                    py,
                    NativeFuture::resolved(bridge, request_message(py, b"", false)?.unbind()),
                )
            }
            RequestBody::Unread(incoming) => {
                drop(state);
                let future = Py::new(py, NativeFuture::new(bridge))?;
                let resolving = future.clone_ref(py);
                let reading = read_body_chunk(exchange.clone(), incoming, resolving);
                exchange.server.bridge.handle.spawn(reading);
                Ok(future)
            }
        }
    }
}

/// Reads the next data frame of the request body and hands it to the waiting `receive()`.
async fn read_body_chunk(
    exchange: Arc<Exchange>,
    mut incoming: IncomingBody,
    future: Py<NativeFuture>,
) {
    // `Ok((data, finished))`; a chunked body is known to be finished only once the frame after
    // the last data comes back empty, hence the second element.
    let chunk = loop {
        match incoming.frame().await {
            Some(Ok(frame)) => match frame.into_data() {
                Ok(data) => break Ok((data, incoming.is_end_stream())),
                Err(_trailers) => continue,
            },
            Some(Err(err)) => break Err(err),
            None => break Ok((Bytes::new(), true)),
        }
    };
    Python::attach(|py| {
        let message = {
            let mut state = exchange.lock_state(Some(py));
            match chunk {
                Ok((data, finished)) => {
                    state.body_read += data.len() as u64;
                    let limit = exchange.server.settings.limit_request_body;
                    if limit.is_some_and(|limit| state.body_read > limit) {
                        // A body without Content-Length that grew past the limit: answer 413 if
                        // the response has not started, and the app hears the client is gone.
                        state.body = RequestBody::Done;
                        state.refuse(StatusCode::PAYLOAD_TOO_LARGE, &exchange.server.settings);
                        drop(state);
                        exchange.mark_disconnected(py);
                        disconnect_message(py)
                    } else if finished {
                        state.body = RequestBody::Done;
                        drop(state);
                        request_message(py, &data, false)
                    } else if state.app_done() {
                        // The app ended while this read was under way (it cancelled its
                        // `receive()`): no one will read on.
                        state.body = RequestBody::Done;
                        drop(state);
                        exchange.discard_unread(incoming);
                        request_message(py, &data, true)
                    } else {
                        state.body = RequestBody::Unread(incoming);
                        drop(state);
                        request_message(py, &data, true)
                    }
                }
                Err(err) => {
                    // A malformed body (bad chunk framing) gets 400 if the response has not
                    // started; either way the app hears the client is gone.
                    state.body = RequestBody::Done;
                    if !err.is_incomplete() {
                        state.refuse(StatusCode::BAD_REQUEST, &exchange.server.settings);
                    }
                    drop(state);
                    exchange.mark_disconnected(py);
                    disconnect_message(py)
                }
            }
        };
        NativeFuture::settle(
            future.bind(py),
            message.map(Bound::unbind),
            ResumeVia::DriveNow,
        );
    });
}

/// The ASGI `send` callable of one request.
#[pyclass(frozen, module = "ferrule._ferrule")]
pub struct HttpSend {
    pub exchange: Arc<Exchange>,
}

#[pymethods]
impl HttpSend {
    fn __call__(&self, py: Python<'_>, message: Bound<'_, PyAny>) -> PyResult<Py<PyAny>> {
        let kind = required_field(&message, intern!(py, "type"))?;
        let kind = kind
            .cast::<pyo3::types::PyString>()
            .map_err(|_| PyTypeError::new_err("ASGI message 'type' must be a str"))?;
        match kind.to_str()? {
            "http.response.start" => self.start(py, &message),
            "http.response.body" => self.body(py, &message),
            "http.response.pathsend" => self.pathsend(py, &message),
            "http.response.trailers" => self.trailers(py, &message),
            "http.response.early_hint" => self.early_hint(py, &message),
            other => Err(PyValueError::new_err(format!(
                "Unexpected ASGI message type '{other}'"
            ))),
        }
    }
}

impl HttpSend {
    fn done(&self, py: Python<'_>) -> Py<PyAny> {
        self.exchange.server.py.done_future.clone_ref(py)
    }

    fn start(&self, py: Python<'_>, message: &Bound<'_, PyAny>) -> PyResult<Py<PyAny>> {
        let status: u16 = required_field(message, intern!(py, "status"))?
            .extract()
            .map_err(|_| PyTypeError::new_err("http.response.start 'status' must be an int"))?;
        let status = StatusCode::from_u16(status)
            .ok()
            // A 1xx is not a final response: hyper would send it (101 even as an upgrade) and
            // leave the client waiting for one that never comes.
            .filter(|s| (200..600).contains(&s.as_u16()))
            .ok_or_else(|| PyValueError::new_err(format!("invalid HTTP status code {status}")))?;
        let mut declared = DeclaredLength::default();
        let headers = parse_headers_into(py, message, &mut declared)?;
        let declared = declared.length;
        let has_body = !self.exchange.head_request
            && !matches!(status, StatusCode::NO_CONTENT | StatusCode::NOT_MODIFIED);
        let mut state = self.exchange.lock_state(Some(py));
        if state.disconnected {
            return Err(client_gone());
        }
        if state.phase != Phase::Waiting {
            return Err(PyRuntimeError::new_err(
                "Unexpected ASGI message 'http.response.start': the response has already started",
            ));
        }
        state.declared = declared.filter(|_| has_body);
        state.expects_trailers = optional_flag(message, intern!(py, "trailers"))?;
        state.head = Some((status, headers));
        state.status = status.as_u16();
        state.phase = Phase::HeadPending;
        Ok(self.done(py))
    }

    /// `http.response.early_hint`: a 103 with a `link` field per link, while the final head
    /// is not yet on its way (until the first body message); ignored after it, as hypercorn
    /// ignores it, and where the client cannot take a 103 (HTTP/1.0: the scope does not offer
    /// the extension there).
    fn early_hint(&self, py: Python<'_>, message: &Bound<'_, PyAny>) -> PyResult<Py<PyAny>> {
        let links = parse_links(py, message)?;
        let exchange = &self.exchange;
        let state = exchange.lock_state(Some(py));
        if state.disconnected {
            return Err(client_gone());
        }
        if let Some(hints) = &exchange.hints {
            if matches!(state.phase, Phase::Waiting | Phase::HeadPending) {
                // Under the lock, while the phase allows it: the head goes only after the phase
                // has moved on, so it cannot overtake the hint.
                hints.send(links);
                exchange.hinted.store(true, Ordering::Release);
            }
        }
        Ok(self.done(py))
    }

    /// `http.response.trailers`, after the last body message of a response started with
    /// `trailers: True`; sent once `more_trailers` is false (HTTP/2, or HTTP/1.1 chunked to a
    /// client that sent `TE: trailers`; hyper drops them otherwise).
    fn trailers(&self, py: Python<'_>, message: &Bound<'_, PyAny>) -> PyResult<Py<PyAny>> {
        let headers = parse_headers(py, message)?;
        let more = optional_flag(message, intern!(py, "more_trailers"))?;
        let exchange = &self.exchange;
        let mut state = exchange.lock_state(Some(py));
        if state.disconnected {
            return Err(client_gone());
        }
        if state.phase != Phase::AwaitingTrailers {
            return Err(PyRuntimeError::new_err(
                "Unexpected ASGI message 'http.response.trailers': it must follow the last \
                 body message of a response started with 'trailers': True",
            ));
        }
        for (name, value) in headers.iter() {
            state.trailers.append(name.clone(), value.clone());
        }
        if !more {
            let trailers = std::mem::take(&mut state.trailers);
            *exchange.body.trailers.lock().unwrap() = Some(trailers);
            // Closing the channel ends the data; the body then sends the trailers.
            state.body_tx = None;
            state.phase = Phase::Complete;
        }
        Ok(self.done(py))
    }

    /// `http.response.pathsend`: the server sends the file at `path` as the whole body (with a
    /// Content-Length unless the app gave one), read by a tokio task, never by Python.
    fn pathsend(&self, py: Python<'_>, message: &Bound<'_, PyAny>) -> PyResult<Py<PyAny>> {
        let path: std::path::PathBuf = message.get_item(intern!(py, "path"))?.extract()?;
        let file = std::fs::File::open(&path)?;
        let length = file.metadata()?.len();
        let exchange = &self.exchange;
        let mut state = exchange.lock_state(Some(py));
        if state.disconnected {
            return Err(client_gone());
        }
        if state.phase != Phase::HeadPending {
            return Err(PyRuntimeError::new_err(
                "Unexpected ASGI message 'http.response.pathsend': it must follow \
                 'http.response.start' and replaces the body messages",
            ));
        }
        if let Some((_, headers)) = state.head.as_mut() {
            headers
                .entry(http::header::CONTENT_LENGTH)
                .or_insert_with(|| HeaderValue::from(length));
        }
        let (tx, rx) = mpsc::channel(4);
        state.body_sent = length;
        state.phase = Phase::Complete;
        // Complete already: hyper dropping this body early is nothing the app must hear of.
        let body = ResponseBody::stream(rx, exchange.clone(), None);
        let head = exchange.send_head(&mut state, body);
        let waiters = std::mem::take(&mut state.disconnect_waiters);
        drop(state);
        head.send(py, &exchange.server.bridge);
        exchange.resolve_disconnect_waiters(py, waiters);
        if exchange.head_request {
            return Ok(self.done(py)); // the head alone: the channel closes with `tx`
        }
        let reading = exchange.clone();
        exchange.server.bridge.handle.spawn(async move {
            use tokio::io::AsyncReadExt;
            let mut file = tokio::fs::File::from_std(file);
            loop {
                let mut chunk = bytes::BytesMut::with_capacity(PATHSEND_CHUNK);
                match file.read_buf(&mut chunk).await {
                    Ok(0) => break,
                    Ok(_) => {
                        if tx.send(chunk.freeze()).await.is_err() {
                            break; // the client went away
                        }
                    }
                    Err(_) => {
                        // The body ends in an error: hyper closes instead of a short response.
                        reading.body.aborted.store(true, Ordering::Release);
                        break;
                    }
                }
            }
        });
        Ok(self.done(py))
    }

    fn body(&self, py: Python<'_>, message: &Bound<'_, PyAny>) -> PyResult<Py<PyAny>> {
        let body = match optional_field(message, intern!(py, "body"))? {
            Some(body) => {
                let body = body
                    .cast::<PyBytes>()
                    .map_err(|_| PyTypeError::new_err("http.response.body 'body' must be bytes"))?;
                // A HEAD response has GET's headers and no content: hyper drops it over
                // HTTP/1.1, but would send it in DATA frames over HTTP/2, which the client
                // takes for an error.
                if self.exchange.head_request {
                    Bytes::new()
                } else {
                    body_bytes(body)
                }
            }
            None => Bytes::new(),
        };
        let more_body = optional_flag(message, intern!(py, "more_body"))?;
        let exchange = &self.exchange;
        let mut state = exchange.lock_state(Some(py));
        if state.disconnected {
            return Err(client_gone());
        }
        if matches!(state.phase, Phase::HeadPending | Phase::Streaming) {
            // As uvicorn (h11) refuses it. Before the head is out this makes the response a 500;
            // after, the connection is closed: never a body framed otherwise than its head says.
            let sent = state.body_sent + body.len() as u64;
            if let Some(declared) = state.declared {
                if sent > declared {
                    return Err(PyRuntimeError::new_err(
                        "Response content longer than Content-Length",
                    ));
                }
                if !more_body && sent < declared {
                    return Err(PyRuntimeError::new_err(
                        "Response content shorter than Content-Length",
                    ));
                }
            }
            state.body_sent = sent;
        }
        match state.phase {
            Phase::Waiting => Err(PyRuntimeError::new_err(
                "Expected ASGI message 'http.response.start', but got 'http.response.body'",
            )),
            Phase::Complete | Phase::AwaitingTrailers => Err(PyRuntimeError::new_err(
                "Unexpected ASGI message 'http.response.body' sent, after response already completed",
            )),
            Phase::HeadPending => {
                // Trailers follow the body, so a body that expects them is streamed.
                let response_body = if more_body || state.expects_trailers {
                    let (tx, rx) = mpsc::channel(BODY_CHANNEL_CAPACITY);
                    if !body.is_empty() {
                        exchange.body.queued.fetch_add(body.len(), Ordering::AcqRel);
                        let _ = tx.try_send(body);
                    }
                    state.body_tx = Some(tx);
                    state.phase = if more_body { Phase::Streaming } else { Phase::AwaitingTrailers };
                    ResponseBody::stream(rx, exchange.clone(), state.declared)
                } else {
                    state.phase = Phase::Complete;
                    ResponseBody::full(body)
                };
                let head = exchange.send_head(&mut state, response_body);
                let waiters = if more_body { Vec::new() } else { std::mem::take(&mut state.disconnect_waiters) };
                drop(state);
                head.send(py, &exchange.server.bridge);
                exchange.resolve_disconnect_waiters(py, waiters);
                Ok(self.done(py))
            }
            Phase::Streaming if state.length_reached => {
                // The response is already whole on the wire (more bytes were refused above).
                if !more_body {
                    state.phase = Phase::Complete;
                    let waiters = std::mem::take(&mut state.disconnect_waiters);
                    drop(state);
                    exchange.resolve_disconnect_waiters(py, waiters);
                }
                Ok(self.done(py))
            }
            Phase::Streaming => {
                let keep_open = more_body || state.expects_trailers;
                let tx = if keep_open { state.body_tx.clone() } else { state.body_tx.take() };
                let waiters = if more_body {
                    Vec::new()
                } else {
                    state.phase = if state.expects_trailers {
                        Phase::AwaitingTrailers
                    } else {
                        Phase::Complete
                    };
                    std::mem::take(&mut state.disconnect_waiters)
                };
                drop(state);
                exchange.resolve_disconnect_waiters(py, waiters);
                let Some(tx) = tx else {
                    return Err(client_gone());
                };
                if body.is_empty() {
                    return Ok(self.done(py));
                }
                let body = if exchange.has_room_for(body.len()) {
                    exchange.body.queued.fetch_add(body.len(), Ordering::AcqRel);
                    match tx.try_send(body) {
                        Ok(()) => return Ok(self.done(py)),
                        Err(mpsc::error::TrySendError::Closed(_)) => return Err(client_gone()),
                        Err(mpsc::error::TrySendError::Full(body)) => {
                            exchange.body.queued.fetch_sub(body.len(), Ordering::AcqRel);
                            body
                        }
                    }
                } else {
                    body
                };
                // Backpressure: suspend the coroutine on a native future that a tokio task
                // resolves once hyper has taken enough of the body. No thread blocks.
                let future = Py::new(py, NativeFuture::new(exchange.server.bridge.clone()))?;
                let resolving = future.clone_ref(py);
                let exchange = exchange.clone();
                exchange.server.bridge.handle.clone().spawn(async move {
                    exchange.room_for(body.len(), &tx).await;
                    exchange.body.queued.fetch_add(body.len(), Ordering::AcqRel);
                    let sent = tx.send(body).await;
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
