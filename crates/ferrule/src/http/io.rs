//! One request/response exchange between hyper and the app: the ASGI `receive` and `send`
//! callables, and the response body hyper streams to the client.
//!
//! Both callables return `NativeFuture`s: a message that is ready (or a send with room in the
//! body channel) returns one that is resolved already, and awaiting it never suspends; otherwise
//! a tokio task resolves it, and the driver resumes the coroutine without the asyncio loop.

use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};

use bytes::Bytes;
use http::{HeaderMap, HeaderName, HeaderValue, Response, StatusCode};
use http_body::{Body, Frame, SizeHint};
use http_body_util::BodyExt;
use hyper::body::Incoming;
use pyo3::exceptions::{PyKeyError, PyOSError, PyRuntimeError, PyTypeError, PyValueError};
use pyo3::intern;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict, PyString, PyTuple};
use tokio::sync::{mpsc, oneshot, Notify};

use crate::bridge::{NativeFuture, ResumeVia};

use super::shared::ServerShared;
use super::types::OpenStream;

pyo3::create_exception!(
    ferrule,
    ClientDisconnected,
    PyOSError,
    "The client went away: raised by send() so the app stops producing."
);

/// What `send()` raises once the client has gone.
pub(crate) fn client_gone() -> PyErr {
    ClientDisconnected::new_err("the client disconnected")
}

/// Body chunks in flight to hyper, per response: above the drive budget (128 steps), so one
/// drive can never fill the channel while holding the GIL (invariant I13).
pub const BODY_CHANNEL_CAPACITY: usize = 256;
/// Body bytes of one response the app may have queued for hyper: past it, `send()` waits until
/// hyper takes some. Without it a client that never opens its HTTP/2 flow-control window held
/// 256 chunks per stream (4 MiB of 16 KiB chunks, times 200 streams a connection). Twice the
/// benchmark's 256 x 1 KiB stream, which thus never waits.
const BODY_QUEUE_BYTES: usize = 512 * 1024;
/// How much of a file `http.response.pathsend` reads at a time.
const PATHSEND_CHUNK: usize = 64 * 1024;

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Phase {
    /// No `http.response.start` yet.
    Waiting,
    /// Started; the head waits for the first body message, so a one-message body gets an
    /// exact Content-Length.
    HeadPending,
    Streaming,
    /// The last body message went out; the `http.response.trailers` promised in the start
    /// message have not all come yet.
    AwaitingTrailers,
    Complete,
}

enum RequestBody {
    Unread(Incoming),
    Reading,
    Done,
}

struct ExchangeState {
    phase: Phase,
    head_tx: Option<oneshot::Sender<Response<ResponseBody>>>,
    head: Option<(StatusCode, HeaderMap)>,
    body_tx: Option<mpsc::Sender<Bytes>>,
    body: RequestBody,
    disconnected: bool,
    /// hyper has sent every byte of the declared Content-Length and let go of the body: the
    /// response is whole on the wire, though the app may still end it with an empty message.
    length_reached: bool,
    /// Request body bytes handed to the app so far (for `limit_request_body`).
    body_read: u64,
    /// The Content-Length the app's response head declared, while the body is held to it (not
    /// for HEAD or a status without a body, where the body is never sent), and the body bytes
    /// the app has sent so far.
    declared: Option<u64>,
    body_sent: u64,
    status: u16,
    /// `receive()` calls waiting for `http.disconnect`.
    disconnect_waiters: Vec<Py<NativeFuture>>,
    /// The start message said `trailers: True`: the body stays open for them.
    expects_trailers: bool,
    /// Trailer fields gathered from `http.response.trailers` messages so far.
    trailers: HeaderMap,
}

impl ExchangeState {
    /// Answers `status` and closes, if the response has not started (else nothing to do).
    fn refuse(&mut self, status: StatusCode, server: &ServerShared) {
        if let Some(head_tx) = self.head_tx.take() {
            let _ = head_tx.send(closing_response(status, server));
            self.status = status.as_u16();
        }
    }
}

/// What hyper's side and the app's side share for one request.
pub struct Exchange {
    pub server: Arc<ServerShared>,
    head_request: bool,
    /// The request asked `Expect: 100-continue` before sending its body (see `send_head`).
    expects_continue: bool,
    state: Mutex<ExchangeState>,
    /// Set when the app failed after streaming began: the body ends in an error, so hyper
    /// closes the connection instead of finishing the response as if it were whole.
    aborted: Arc<AtomicBool>,
    /// The response's trailer fields, for the body to send once its data has ended.
    trailers: Mutex<Option<HeaderMap>>,
    /// Body bytes in the channel to hyper (`BODY_QUEUE_BYTES`), and the signal that hyper took
    /// some or let go of the body.
    queued: AtomicUsize,
    drained: Notify,
}

impl Exchange {
    /// `head_request`: a HEAD request, whose response has no body whatever its Content-Length.
    /// `expects_continue`: it asked `Expect: 100-continue` and has a body to come.
    pub fn new(
        server: Arc<ServerShared>,
        head_tx: oneshot::Sender<Response<ResponseBody>>,
        body: Incoming,
        head_request: bool,
        expects_continue: bool,
    ) -> Self {
        Self {
            server,
            head_request,
            expects_continue,
            state: Mutex::new(ExchangeState {
                phase: Phase::Waiting,
                head_tx: Some(head_tx),
                head: None,
                body_tx: None,
                body: RequestBody::Unread(body),
                disconnected: false,
                length_reached: false,
                body_read: 0,
                declared: None,
                body_sent: 0,
                status: 0,
                disconnect_waiters: Vec::new(),
                expects_trailers: false,
                trailers: HeaderMap::new(),
            }),
            aborted: Arc::new(AtomicBool::new(false)),
            queued: AtomicUsize::new(0),
            drained: Notify::new(),
            trailers: Mutex::new(None),
        }
    }

    /// Whether `len` more body bytes fit in `BODY_QUEUE_BYTES` (any chunk does in an empty
    /// queue, so one larger than the bound still goes).
    fn has_room_for(&self, len: usize) -> bool {
        let queued = self.queued.load(Ordering::Acquire);
        queued == 0 || queued + len <= BODY_QUEUE_BYTES
    }

    /// Waits until `len` more body bytes fit, or hyper has let go of the body (`tx` closed).
    async fn room_for(&self, len: usize, tx: &mpsc::Sender<Bytes>) {
        loop {
            let drained = self.drained.notified();
            tokio::pin!(drained);
            drained.as_mut().enable();
            if self.has_room_for(len) || tx.is_closed() {
                return;
            }
            drained.await;
        }
    }

    /// Sends the response head the app started, with `body` as its body. Returns the response
    /// when hyper no longer waits for it (the client went away), for the caller to drop once
    /// it has released the state lock: dropping a streamed body tells this exchange the client
    /// is gone, which takes that lock, and the lock is not reentrant.
    #[must_use = "drop the unsent response after releasing the state lock"]
    fn send_head(
        &self,
        state: &mut ExchangeState,
        body: ResponseBody,
    ) -> Option<Response<ResponseBody>> {
        let (status, headers) = state.head.take().expect("a pending head");
        let mut response = Response::new(body);
        *response.status_mut() = status;
        *response.headers_mut() = headers;
        self.server.add_default_headers(response.headers_mut());
        if self.expects_continue && matches!(state.body, RequestBody::Unread(_)) {
            // The app answers without reading the body, so no `100 Continue` went out and the
            // client may not have sent it: hyper closes the connection, having no way to tell
            // where the next request starts. Say so, or the client reuses a dead connection
            // (and a POST is not retried).
            response
                .headers_mut()
                .insert(http::header::CONNECTION, HeaderValue::from_static("close"));
        }
        match state.head_tx.take() {
            Some(head_tx) => head_tx.send(response).err(),
            None => Some(response),
        }
    }

    /// The client is gone: every later `receive()` says so, every `send()` raises.
    pub fn mark_disconnected(&self, py: Python<'_>) {
        let waiters = {
            let mut state = self.state.lock().unwrap();
            if state.phase == Phase::Complete || state.disconnected {
                return;
            }
            state.disconnected = true;
            state.body_tx = None;
            std::mem::take(&mut state.disconnect_waiters)
        };
        self.resolve_disconnect_waiters(py, waiters);
    }

    /// hyper let go of the streamed body once the declared length was out (see `StreamBody`).
    fn mark_length_reached(&self) {
        let mut state = self.state.lock().unwrap();
        state.length_reached = true;
        state.body_tx = None;
    }

    fn resolve_disconnect_waiters(&self, py: Python<'_>, waiters: Vec<Py<NativeFuture>>) {
        for waiter in waiters {
            let message = disconnect_message(py).map(Bound::unbind);
            NativeFuture::settle(waiter.bind(py), message, ResumeVia::Schedule);
        }
    }

    /// The app's coroutine finished (`Ok`) or raised (`Err`): make sure the client gets an
    /// answer, and report what the access log needs. Returns the status sent (0 if none).
    pub fn finish_app(&self, py: Python<'_>, failed: bool) -> (u16, Option<&'static str>) {
        let (status, problem, waiters) = {
            let mut state = self.state.lock().unwrap();
            // An app that stops once the client has gone (it heard `http.disconnect` or `send()`
            // raised) did what the spec asks: nothing to report.
            let unfinished = if failed || state.disconnected {
                ""
            } else {
                "ASGI callable returned without completing response."
            };
            let problem = match state.phase {
                Phase::Complete => None,
                // Trailers promised but not (all) sent: the body simply ends without them.
                Phase::AwaitingTrailers => {
                    state.body_tx = None;
                    None
                }
                Phase::Waiting | Phase::HeadPending => {
                    if let Some(head_tx) = state.head_tx.take() {
                        let _ = head_tx.send(plain_response(
                            StatusCode::INTERNAL_SERVER_ERROR,
                            &self.server,
                        ));
                        state.status = 500;
                    }
                    Some(unfinished)
                }
                Phase::Streaming => {
                    self.aborted.store(true, Ordering::Release);
                    state.body_tx = None;
                    Some(unfinished)
                }
            };
            state.phase = Phase::Complete;
            (
                state.status,
                problem,
                std::mem::take(&mut state.disconnect_waiters),
            )
        };
        self.resolve_disconnect_waiters(py, waiters);
        (status, problem.filter(|p| !p.is_empty()))
    }
}

fn disconnect_message(py: Python<'_>) -> PyResult<Bound<'_, PyAny>> {
    let message = PyDict::new(py);
    message.set_item(intern!(py, "type"), intern!(py, "http.disconnect"))?;
    Ok(message.into_any())
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

/// A response made by the server itself, without the app: `body` of `content_type`.
pub fn server_response(
    status: StatusCode,
    content_type: &'static str,
    body: Bytes,
    server: &ServerShared,
) -> Response<ResponseBody> {
    let mut response = Response::new(ResponseBody::full(body));
    *response.status_mut() = status;
    let headers = response.headers_mut();
    headers.insert(
        http::header::CONTENT_TYPE,
        HeaderValue::from_static(content_type),
    );
    server.add_default_headers(headers);
    response
}

/// A small text response made by the server itself (500, 503).
pub fn plain_response(status: StatusCode, server: &ServerShared) -> Response<ResponseBody> {
    let text = status.canonical_reason().unwrap_or("Error");
    let body = Bytes::from_static(text.as_bytes());
    server_response(status, "text/plain; charset=utf-8", body, server)
}

/// A server-made response after which the connection closes (a refused request).
pub fn closing_response(status: StatusCode, server: &ServerShared) -> Response<ResponseBody> {
    let mut response = plain_response(status, server);
    response
        .headers_mut()
        .insert(http::header::CONNECTION, HeaderValue::from_static("close"));
    response
}

/// The ASGI `receive` callable of one request.
#[pyclass(frozen, module = "ferrule._ferrule")]
pub struct Receive {
    pub exchange: Arc<Exchange>,
}

#[pymethods]
impl Receive {
    fn __call__(&self, py: Python<'_>) -> PyResult<Py<NativeFuture>> {
        let exchange = &self.exchange;
        let bridge = exchange.server.bridge.clone();
        let mut state = exchange.state.lock().unwrap();
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
    mut incoming: Incoming,
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
            let mut state = exchange.state.lock().unwrap();
            match chunk {
                Ok((data, finished)) => {
                    state.body_read += data.len() as u64;
                    let limit = exchange.server.limit_request_body;
                    if limit.is_some_and(|limit| state.body_read > limit) {
                        // A body without Content-Length that grew past the limit: answer 413 if
                        // the response has not started, and the app hears the client is gone.
                        state.body = RequestBody::Done;
                        state.refuse(StatusCode::PAYLOAD_TOO_LARGE, &exchange.server);
                        drop(state);
                        exchange.mark_disconnected(py);
                        disconnect_message(py)
                    } else {
                        state.body = if finished {
                            RequestBody::Done
                        } else {
                            RequestBody::Unread(incoming)
                        };
                        drop(state);
                        request_message(py, &data, !finished)
                    }
                }
                Err(err) => {
                    // A malformed body (bad chunk framing) gets 400 if the response has not
                    // started; either way the app hears the client is gone.
                    state.body = RequestBody::Done;
                    if !err.is_incomplete_message() {
                        state.refuse(StatusCode::BAD_REQUEST, &exchange.server);
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
pub struct Send {
    pub exchange: Arc<Exchange>,
}

#[pymethods]
impl Send {
    fn __call__(&self, py: Python<'_>, message: Bound<'_, PyAny>) -> PyResult<Py<PyAny>> {
        let kind = message.get_item(intern!(py, "type"))?;
        let kind = kind
            .cast::<pyo3::types::PyString>()
            .map_err(|_| PyTypeError::new_err("ASGI message 'type' must be a str"))?;
        match kind.to_str()? {
            "http.response.start" => self.start(py, &message),
            "http.response.body" => self.body(py, &message),
            "http.response.pathsend" => self.pathsend(py, &message),
            "http.response.trailers" => self.trailers(py, &message),
            other => Err(PyValueError::new_err(format!(
                "Unexpected ASGI message type '{other}'"
            ))),
        }
    }
}

impl Send {
    fn done(&self, py: Python<'_>) -> Py<PyAny> {
        self.exchange.server.done_future.clone_ref(py)
    }

    fn start(&self, py: Python<'_>, message: &Bound<'_, PyAny>) -> PyResult<Py<PyAny>> {
        let status: u16 = message
            .get_item(intern!(py, "status"))?
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
        let mut state = self.exchange.state.lock().unwrap();
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

    /// `http.response.trailers`, after the last body message of a response started with
    /// `trailers: True`; sent once `more_trailers` is false (HTTP/2, or HTTP/1.1 chunked to a
    /// client that sent `TE: trailers`; hyper drops them otherwise).
    fn trailers(&self, py: Python<'_>, message: &Bound<'_, PyAny>) -> PyResult<Py<PyAny>> {
        let headers = parse_headers(py, message)?;
        let more = optional_flag(message, intern!(py, "more_trailers"))?;
        let exchange = &self.exchange;
        let mut state = exchange.state.lock().unwrap();
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
            *exchange.trailers.lock().unwrap() = Some(trailers);
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
        let mut state = exchange.state.lock().unwrap();
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
        state.phase = Phase::Complete;
        // Complete already: hyper dropping this body early is nothing the app must hear of.
        let body = ResponseBody::stream(rx, exchange.clone(), None);
        let unsent = exchange.send_head(&mut state, body);
        let waiters = std::mem::take(&mut state.disconnect_waiters);
        drop(state);
        drop(unsent);
        exchange.resolve_disconnect_waiters(py, waiters);
        let aborted = exchange.aborted.clone();
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
                        aborted.store(true, Ordering::Release);
                        break;
                    }
                }
            }
        });
        Ok(self.done(py))
    }

    fn body(&self, py: Python<'_>, message: &Bound<'_, PyAny>) -> PyResult<Py<PyAny>> {
        let body = match optional_field(message, intern!(py, "body"))? {
            Some(body) => Bytes::copy_from_slice(
                body.cast::<PyBytes>()
                    .map_err(|_| PyTypeError::new_err("http.response.body 'body' must be bytes"))?
                    .as_bytes(),
            ),
            None => Bytes::new(),
        };
        let more_body = optional_flag(message, intern!(py, "more_body"))?;
        let exchange = &self.exchange;
        let mut state = exchange.state.lock().unwrap();
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
                        exchange.queued.fetch_add(body.len(), Ordering::AcqRel);
                        let _ = tx.try_send(body);
                    }
                    state.body_tx = Some(tx);
                    state.phase = if more_body { Phase::Streaming } else { Phase::AwaitingTrailers };
                    ResponseBody::stream(rx, exchange.clone(), state.declared)
                } else {
                    state.phase = Phase::Complete;
                    ResponseBody::full(body)
                };
                let unsent = exchange.send_head(&mut state, response_body);
                let waiters = if more_body { Vec::new() } else { std::mem::take(&mut state.disconnect_waiters) };
                drop(state);
                drop(unsent);
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
                    exchange.queued.fetch_add(body.len(), Ordering::AcqRel);
                    match tx.try_send(body) {
                        Ok(()) => return Ok(self.done(py)),
                        Err(mpsc::error::TrySendError::Closed(_)) => return Err(client_gone()),
                        Err(mpsc::error::TrySendError::Full(body)) => {
                            exchange.queued.fetch_sub(body.len(), Ordering::AcqRel);
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
                    exchange.queued.fetch_add(body.len(), Ordering::AcqRel);
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

/// `message[key]`, or `None` when the key is missing. A plain dict is read without raising
/// (and catching) a `KeyError`, which costs more than the rest of a small `send()`.
pub(crate) fn optional_field<'py>(
    message: &Bound<'py, PyAny>,
    key: &Bound<'py, PyString>,
) -> PyResult<Option<Bound<'py, PyAny>>> {
    if let Ok(dict) = message.cast_exact::<PyDict>() {
        return dict.get_item(key);
    }
    match message.get_item(key) {
        Ok(value) => Ok(Some(value)),
        Err(err) if err.is_instance_of::<PyKeyError>(message.py()) => Ok(None),
        Err(err) => Err(err),
    }
}

/// `message[key]` read as a flag: false when the key is missing.
pub(crate) fn optional_flag<'py>(
    message: &Bound<'py, PyAny>,
    key: &Bound<'py, PyString>,
) -> PyResult<bool> {
    optional_field(message, key)?.map_or(Ok(false), |value| value.is_truthy())
}

/// One response header: any two-item sequence (the spec's own examples use lists), but not
/// bytes or str.
fn header_pair<'py>(item: &Bound<'py, PyAny>) -> PyResult<[Bound<'py, PyAny>; 2]> {
    if let Ok(tuple) = item.cast_exact::<PyTuple>() {
        if tuple.len() == 2 {
            return Ok([tuple.get_item(0)?, tuple.get_item(1)?]);
        }
    }
    let pair: Vec<Bound<'py, PyAny>> = item
        .extract()
        .ok()
        .filter(|pair: &Vec<Bound<'py, PyAny>>| pair.len() == 2)
        .ok_or_else(|| PyTypeError::new_err("each response header must be a (name, value) pair"))?;
    Ok(pair.try_into().expect("two items"))
}

pub(crate) fn parse_headers(py: Python<'_>, message: &Bound<'_, PyAny>) -> PyResult<HeaderMap> {
    parse_headers_into(py, message, &mut DeclaredLength::default())
}

/// `parse_headers`, reading the Content-Length on the way (no second lookup in the map).
fn parse_headers_into(
    py: Python<'_>,
    message: &Bound<'_, PyAny>,
    declared: &mut DeclaredLength,
) -> PyResult<HeaderMap> {
    let mut headers = HeaderMap::new();
    let Some(items) = optional_field(message, intern!(py, "headers"))? else {
        return Ok(headers);
    };
    for item in items.try_iter()? {
        let item = item?;
        let [name, value] = header_pair(&item)?;
        let name = name
            .cast::<PyBytes>()
            .map_err(|_| PyTypeError::new_err("response header names must be bytes"))?
            .as_bytes();
        let value = value
            .cast::<PyBytes>()
            .map_err(|_| PyTypeError::new_err("response header values must be bytes"))?
            .as_bytes();
        let name = HeaderName::from_bytes(name).map_err(|_| {
            PyValueError::new_err(format!(
                "invalid response header name {:?}",
                String::from_utf8_lossy(name)
            ))
        })?;
        let value = HeaderValue::from_bytes(value).map_err(|_| {
            PyValueError::new_err(format!("invalid value for response header {name}"))
        })?;
        if name == http::header::CONTENT_LENGTH {
            declared.add(value.as_bytes())?;
        }
        headers.append(name, value);
    }
    Ok(headers)
}

/// The Content-Length a response head declares, if any. Not a number, or two that differ, is
/// the app's error: hyper would send it as is, and no client could tell where the body ends.
#[derive(Default)]
struct DeclaredLength {
    length: Option<u64>,
}

impl DeclaredLength {
    fn add(&mut self, value: &[u8]) -> PyResult<()> {
        let digits = value.trim_ascii();
        let length = (!digits.is_empty() && digits.len() <= 19)
            .then(|| {
                digits.iter().try_fold(0u64, |n, &b| {
                    b.is_ascii_digit().then(|| n * 10 + u64::from(b - b'0'))
                })
            })
            .flatten()
            .ok_or_else(|| {
                PyValueError::new_err(format!(
                    "invalid Content-Length response header {:?}",
                    String::from_utf8_lossy(value)
                ))
            })?;
        if self.length.is_some_and(|first| first != length) {
            return Err(PyValueError::new_err(
                "the response headers give two different Content-Lengths",
            ));
        }
        self.length = Some(length);
        Ok(())
    }
}

/// The response body hyper polls: all at once, or streamed from the app through a channel.
pub enum ResponseBody {
    Full(Option<Bytes>),
    Stream(StreamBody),
}

pub struct StreamBody {
    rx: mpsc::Receiver<Bytes>,
    aborted: Arc<AtomicBool>,
    /// Held so that hyper dropping the body before its end tells the app the client is gone.
    exchange: Arc<Exchange>,
    ended: bool,
    /// The response's Content-Length, if it declared one, and the bytes handed to hyper: hyper
    /// drops a body as soon as the declared length is out, which is not the client leaving.
    declared: Option<u64>,
    sent: u64,
    /// An HTTP/2 stream counts as in progress until its body ends (`OpenStreams`).
    open_stream: Option<OpenStream>,
    /// The app failed mid-body and hyper was given a chance to flush first (`poll_frame`).
    flushed_before_abort: bool,
}

impl ResponseBody {
    pub fn full(body: Bytes) -> Self {
        ResponseBody::Full(Some(body))
    }

    /// Whether the body comes from the app in chunks (not all at once).
    pub fn is_streamed(&self) -> bool {
        matches!(self, ResponseBody::Stream(_))
    }

    /// Keeps `open_stream` until a streamed body ends (a whole one is out at once).
    pub fn hold(&mut self, open_stream: OpenStream) {
        if let ResponseBody::Stream(stream) = self {
            stream.open_stream = Some(open_stream);
        }
    }

    fn stream(rx: mpsc::Receiver<Bytes>, exchange: Arc<Exchange>, declared: Option<u64>) -> Self {
        let aborted = exchange.aborted.clone();
        ResponseBody::Stream(StreamBody {
            rx,
            aborted,
            exchange,
            ended: false,
            declared,
            sent: 0,
            open_stream: None,
            flushed_before_abort: false,
        })
    }
}

/// The error a stream ends with when the app failed mid-response: hyper closes the connection.
#[derive(Debug)]
pub struct ResponseAborted;

impl std::fmt::Display for ResponseAborted {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("the ASGI app failed after the response started")
    }
}

impl std::error::Error for ResponseAborted {}

impl Body for ResponseBody {
    type Data = Bytes;
    type Error = ResponseAborted;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, ResponseAborted>>> {
        match self.get_mut() {
            ResponseBody::Full(body) => Poll::Ready(
                body.take()
                    .filter(|b| !b.is_empty())
                    .map(|b| Ok(Frame::data(b))),
            ),
            ResponseBody::Stream(stream) => match stream.rx.poll_recv(cx) {
                Poll::Ready(Some(chunk)) => {
                    stream.sent += chunk.len() as u64;
                    let exchange = &stream.exchange;
                    exchange.queued.fetch_sub(chunk.len(), Ordering::AcqRel);
                    exchange.drained.notify_one();
                    Poll::Ready(Some(Ok(Frame::data(chunk))))
                }
                Poll::Ready(None) => {
                    let trailers = stream.exchange.trailers.lock().unwrap().take();
                    if let Some(trailers) = trailers {
                        return Poll::Ready(Some(Ok(Frame::trailers(trailers))));
                    }
                    if !stream.aborted.load(Ordering::Acquire) {
                        stream.ended = true;
                        return Poll::Ready(None);
                    }
                    if !stream.flushed_before_abort {
                        // hyper drops the connection at a body error without flushing what
                        // it holds, which may be the head and every chunk: once more round
                        // its loop (it flushes when the body is pending), then the error.
                        stream.flushed_before_abort = true;
                        cx.waker().wake_by_ref();
                        return Poll::Pending;
                    }
                    stream.ended = true;
                    Poll::Ready(Some(Err(ResponseAborted)))
                }
                Poll::Pending => Poll::Pending,
            },
        }
    }

    fn is_end_stream(&self) -> bool {
        match self {
            ResponseBody::Full(body) => body.as_ref().is_none_or(Bytes::is_empty),
            ResponseBody::Stream(stream) => stream.ended,
        }
    }

    fn size_hint(&self) -> SizeHint {
        match self {
            ResponseBody::Full(body) => {
                SizeHint::with_exact(body.as_ref().map_or(0, |b| b.len() as u64))
            }
            ResponseBody::Stream(_) => SizeHint::default(),
        }
    }
}

impl Drop for StreamBody {
    fn drop(&mut self) {
        // A `send()` waiting for room: the channel is closed now, its wait is over.
        self.rx.close();
        self.exchange.drained.notify_one();
        if self.ended {
            return;
        }
        if self.declared.is_some_and(|declared| self.sent >= declared) {
            self.exchange.mark_length_reached();
        } else {
            let exchange = self.exchange.clone();
            Python::attach(|py| exchange.mark_disconnected(py));
        }
    }
}
