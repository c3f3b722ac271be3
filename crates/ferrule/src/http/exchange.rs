//! `Exchange`: what hyper's side and the app's side share for one request, and where the
//! response stands.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use bytes::Bytes;
use http::{HeaderMap, HeaderValue, Response, StatusCode};
use http_body::Body;
use http_body_util::BodyExt;
use pyo3::intern;
use pyo3::prelude::*;
use pyo3::types::PyDict;
use tokio::sync::{mpsc, oneshot};

use crate::asgi::access_format::AccessFormat;
use crate::asgi::gil_lock;
use crate::asgi::proxy::Forwarded;
use crate::asgi::raw_head::RawHead;
use crate::asgi::responses::{closing_response, plain_response};
use crate::asgi::server::Server;
use crate::asgi::settings::Settings;
use crate::bridge::{self, NativeFuture, ResumeVia};
use crate::metrics::Protocol;

use super::app_calls::AppCall;
use super::body::{BodyQueue, BodySource, ResponseBody};
use super::early_hints::EarlyHints;
use super::incoming::IncomingBody;

/// Body chunks in flight to hyper, per response: above the drive budget (128 steps), so one
/// drive can never fill the channel while holding the GIL (invariant I13).
pub const BODY_CHANNEL_CAPACITY: usize = 256;

/// Body bytes of one response the app may have queued for hyper: past it, `send()` waits until
/// hyper takes some. Twice the benchmark's 256 x 1 KiB stream, which thus never waits.
const BODY_QUEUE_BYTES: usize = 512 * 1024;

/// What an HTTP/2 or HTTP/3 stream's queue may hold before the peer has taken anything: the
/// queue grows from it to `BODY_QUEUE_BYTES` as fast as hyper passes bytes on. A client that
/// never opens its flow-control window thus costs this per stream (plus the one frame hyper
/// holds), not the whole queue: 200 such streams held 112 MiB with a fixed 512 KiB.
const BODY_QUEUE_FLOOR: usize = 8 * 1024;

/// Request body bytes an HTTP/1.1 connection reads and throws away once the app is done
/// without reading them all (`discard_unread`); past it, the connection is closed instead.
const DISCARD_LIMIT: u64 = 64 * 1024 * 1024;

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(super) enum Phase {
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

pub(super) enum RequestBody {
    Unread(IncomingBody),
    Reading,
    Done,
}

/// A request's head, what the app's scope is built from: hyper's parts, the lines as the client
/// sent them (HTTP/1.1), and what trusted proxy headers say of the client.
pub(super) struct RequestHead {
    pub(super) parts: http::request::Parts,
    pub(super) raw: Option<RawHead>,
    pub(super) forwarded: Forwarded,
}

pub(super) struct ExchangeState {
    pub(super) phase: Phase,
    head_tx: Option<oneshot::Sender<Response<ResponseBody>>>,
    pub(super) head: Option<(StatusCode, HeaderMap)>,
    pub(super) body_tx: Option<mpsc::Sender<Bytes>>,
    pub(super) body: RequestBody,
    pub(super) disconnected: bool,
    /// hyper has sent every byte of the declared Content-Length and let go of the body: the
    /// response is whole on the wire, though the app may still end it with an empty message.
    pub(super) length_reached: bool,
    /// Request body bytes handed to the app so far (for `limit_request_body`).
    pub(super) body_read: u64,
    /// The Content-Length the app's response head declared, while the body is held to it (not
    /// for HEAD or a status without a body, where the body is never sent), and the body bytes
    /// the app has sent so far.
    pub(super) declared: Option<u64>,
    pub(super) body_sent: u64,
    pub(super) status: u16,
    /// `receive()` calls waiting for `http.disconnect`.
    pub(super) disconnect_waiters: Vec<Py<NativeFuture>>,
    /// The start message said `trailers: True`: the body stays open for them.
    pub(super) expects_trailers: bool,
    /// Trailer fields gathered from `http.response.trailers` messages so far.
    pub(super) trailers: HeaderMap,
    /// The response headers `--access-log-format` names, taken as the head goes out.
    pub(super) logged_headers: Vec<Option<HeaderValue>>,
    /// The request's head once the scope is built from it, for the request's task to drop
    /// (`Exchange::keep_spent_head`).
    spent_head: Option<Box<RequestHead>>,
    /// Counts the app's call against its connection's limit until it ends (`app_done`).
    app_call: Option<AppCall>,
}

impl ExchangeState {
    /// The app's coroutine has ended: a body it left unread is discarded, not kept for it.
    pub(super) fn app_done(&self) -> bool {
        self.app_call.is_none()
    }

    /// Answers `status` and closes, if the response has not started (else nothing to do).
    pub(super) fn refuse(&mut self, status: StatusCode, settings: &Settings) {
        if let Some(head_tx) = self.head_tx.take() {
            let response = closing_response(status, settings);
            self.body_sent = body_length(&response);
            let _ = head_tx.send(response);
            self.status = status.as_u16();
        }
    }
}

/// A response head made under the state lock, sent once the lock is released
/// (`Exchange::send_head`).
pub(super) struct HeadOut {
    tx: Option<oneshot::Sender<Response<ResponseBody>>>,
    response: Response<ResponseBody>,
}

impl HeadOut {
    /// Hands the head to hyper, through the bridge's outbox when on the loop thread (see
    /// `bridge::Shared::hand_to_tokio`); if hyper no longer waits for it, the response is
    /// dropped on the tokio thread.
    pub(super) fn send(self, py: Python<'_>, bridge: &bridge::Shared) {
        if let Some(tx) = self.tx {
            let response = self.response;
            bridge.hand_to_tokio(
                py,
                Box::new(move || {
                    let _ = tx.send(response);
                }),
            );
        }
    }
}

/// What hyper's side and the app's side share for one request.
pub struct Exchange {
    pub server: Arc<Server>,
    pub(super) head_request: bool,
    /// The request asked `Expect: 100-continue` before sending its body (see `send_head`).
    expects_continue: bool,
    state: Mutex<ExchangeState>,
    /// What the response body, once streamed, shares with `send()`.
    pub(super) body: BodyQueue,
    /// What the request came over, and when its head was read (`trace::now_mark`; 0 when
    /// neither the metrics nor the trace time it).
    pub(super) started: (Protocol, u64),
    /// How 103 Early Hints reach the client; None where they cannot (HTTP/1.0).
    pub(super) hints: Option<EarlyHints>,
    /// The app has sent one: the final head waits until it is on its way (`EarlyHints::sent`).
    pub(super) hinted: AtomicBool,
}

impl Exchange {
    /// `head_request`: a HEAD request, whose response has no body whatever its Content-Length.
    /// `expects_continue`: it asked `Expect: 100-continue` and has a body to come. `hints`:
    /// how its 103 Early Hints go out, if they can.
    pub fn new(
        server: Arc<Server>,
        head_tx: oneshot::Sender<Response<ResponseBody>>,
        body: IncomingBody,
        head_request: bool,
        expects_continue: bool,
        started: (Protocol, u64),
        (app_call, hints): (AppCall, Option<EarlyHints>),
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
                logged_headers: Vec::new(),
                spent_head: None,
                app_call: Some(app_call),
            }),
            body: BodyQueue::default(),
            started,
            hints,
            hinted: AtomicBool::new(false),
        }
    }

    /// Keeps the request's head, its scope built on the loop's thread (`--loop uvloop` starts
    /// apps there), for the tokio thread to drop when the response head is out
    /// (`take_spent_head`). Its header values share hyper's read buffer, and freed on the
    /// loop's thread the buffer's memory went back to the system and was faulted in again, a
    /// page every few requests. Kept before the app runs, so it is here when the response
    /// head is.
    pub(super) fn keep_spent_head(&self, py: Python<'_>, head: Box<RequestHead>) {
        self.lock_state(Some(py)).spent_head = Some(head);
    }

    /// Locks the request's state; `py` when the caller holds the GIL (see `gil_lock`).
    pub(super) fn lock_state(&self, py: Option<Python<'_>>) -> MutexGuard<'_, ExchangeState> {
        gil_lock::lock(&self.state, py)
    }

    pub(super) fn take_spent_head(&self) -> Option<Box<RequestHead>> {
        self.lock_state(None).spent_head.take()
    }

    /// Whether `len` more body bytes fit the queue's bound, which follows what hyper has passed
    /// on (`BODY_QUEUE_FLOOR`). A chunk larger than the bound goes once the queue is empty and
    /// hyper has passed on the last frame it took, so a stalled stream holds one such chunk.
    /// HTTP/1.1 has one response at a time per connection, whose queue starts whole: a stream
    /// of small chunks then never waits for hyper's first frames.
    pub(super) fn has_room_for(&self, len: usize) -> bool {
        let queue = &self.body;
        let queued = queue.queued.load(Ordering::Acquire);
        let floor = match self.started.0 {
            Protocol::Http1 => BODY_QUEUE_BYTES,
            _ => BODY_QUEUE_FLOOR,
        };
        let passed_on = queue.passed_on.load(Ordering::Acquire);
        let bound = floor
            .saturating_add(passed_on.saturating_mul(2))
            .min(BODY_QUEUE_BYTES);
        queued + len <= bound || (queued == 0 && queue.outstanding.load(Ordering::Acquire) == 0)
    }

    /// Waits until `len` more body bytes fit, or hyper has let go of the body (`tx` closed).
    pub(super) async fn room_for(&self, len: usize, tx: &mpsc::Sender<Bytes>) {
        loop {
            let drained = self.body.drained.notified();
            tokio::pin!(drained);
            drained.as_mut().enable();
            if self.has_room_for(len) || tx.is_closed() {
                return;
            }
            drained.await;
        }
    }

    /// Makes the response head the app started, with `body` as its body, for the caller to
    /// send (`HeadOut::send`) once it has released the state lock. Sending wakes the tokio
    /// thread, whose first step is to take that lock: woken under it, the thread was seen
    /// blocking on it (a futex wait and wake) for one request in ten on `/db`-like apps. And
    /// a response hyper no longer waits for is dropped there too: dropping a streamed body
    /// tells this exchange the client is gone, which takes the lock, and it is not reentrant.
    #[must_use = "send the head after releasing the state lock"]
    pub(super) fn send_head(&self, state: &mut ExchangeState, body: ResponseBody) -> HeadOut {
        let (status, headers) = state.head.take().expect("a pending head");
        let mut response = Response::new(body);
        *response.status_mut() = status;
        *response.headers_mut() = headers;
        let settings = &self.server.settings;
        settings.add_default_headers(response.headers_mut());
        if let Some(format) = self.server.access_log().and_then(|log| log.format) {
            state.logged_headers = AccessFormat::pick(&format.response_headers, response.headers());
        }
        if self.expects_continue && matches!(state.body, RequestBody::Unread(_)) {
            // The app answers without reading the body, so no `100 Continue` went out and the
            // client may not have sent it: hyper closes the connection, having no way to tell
            // where the next request starts. Say so, or the client reuses a dead connection
            // (and a POST is not retried).
            response
                .headers_mut()
                .insert(http::header::CONNECTION, HeaderValue::from_static("close"));
        }
        HeadOut {
            tx: state.head_tx.take(),
            response,
        }
    }

    /// The client is gone: every later `receive()` says so, every `send()` raises.
    pub fn mark_disconnected(&self, py: Python<'_>) {
        let waiters = {
            let mut state = self.lock_state(Some(py));
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
        let mut state = self.lock_state(None);
        state.length_reached = true;
        state.body_tx = None;
    }

    pub(super) fn resolve_disconnect_waiters(
        &self,
        py: Python<'_>,
        waiters: Vec<Py<NativeFuture>>,
    ) {
        for waiter in waiters {
            let message = disconnect_message(py).map(Bound::unbind);
            NativeFuture::settle(waiter.bind(py), message, ResumeVia::Schedule);
        }
    }

    /// The app's coroutine finished (`Ok`) or raised (`Err`): make sure the client gets an
    /// answer, and report what the access log needs. Returns the status sent (0 if none).
    pub fn finish_app(&self, py: Python<'_>, failed: bool) -> (u16, Option<&'static str>) {
        let (status, problem, waiters, discard) = {
            let mut state = self.lock_state(Some(py));
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
                        let response = plain_response(
                            StatusCode::INTERNAL_SERVER_ERROR,
                            &self.server.settings,
                        );
                        state.body_sent = body_length(&response);
                        let _ = head_tx.send(response);
                        state.status = 500;
                    }
                    Some(unfinished)
                }
                Phase::Streaming => {
                    self.body.aborted.store(true, Ordering::Release);
                    state.body_tx = None;
                    Some(unfinished)
                }
            };
            state.phase = Phase::Complete;
            state.app_call = None;
            // A body being read now is discarded by its reader when the read ends.
            let unread = match std::mem::replace(&mut state.body, RequestBody::Done) {
                RequestBody::Unread(body) => Some(body),
                RequestBody::Reading => {
                    state.body = RequestBody::Reading;
                    None
                }
                RequestBody::Done => None,
            };
            // Polling a body the client was told nothing about sends `100 Continue`, after the
            // response: never. Such a response closes the connection already (`send_head`).
            let discard = unread.filter(|_| !(self.expects_continue && state.body_read == 0));
            (
                state.status,
                problem,
                std::mem::take(&mut state.disconnect_waiters),
                discard,
            )
        };
        self.resolve_disconnect_waiters(py, waiters);
        if let Some(body) = discard {
            self.discard_unread(body);
        }
        (status, problem.filter(|p| !p.is_empty()))
    }

    /// A request body the app left unread when it was done. HTTP/1.1 reads and drops it, up to
    /// `DISCARD_LIMIT`: a client that sends its whole body before reading (httpx, curl) then
    /// gets the response, and the connection serves the next request. HTTP/2 and HTTP/3 drop
    /// it, which resets only that stream.
    pub(super) fn discard_unread(&self, mut body: IncomingBody) {
        if self.started.0 != Protocol::Http1 || body.is_end_stream() {
            return;
        }
        self.server.bridge.handle.spawn(async move {
            let mut read = 0;
            while let Some(Ok(frame)) = body.frame().await {
                if let Some(data) = frame.data_ref() {
                    read += data.len() as u64;
                }
                if read > DISCARD_LIMIT {
                    break; // dropped unfinished: hyper closes the connection
                }
            }
        });
    }
}

impl BodySource for Exchange {
    fn queue(&self) -> &BodyQueue {
        &self.body
    }

    fn released_early(&self, whole: bool) {
        if whole {
            self.mark_length_reached();
        } else {
            Python::attach(|py| self.mark_disconnected(py));
        }
    }
}

/// The length of a response the server made itself (its body is whole), for the access log.
fn body_length(response: &Response<ResponseBody>) -> u64 {
    http_body::Body::size_hint(response.body())
        .exact()
        .unwrap_or(0)
}

pub(super) fn disconnect_message(py: Python<'_>) -> PyResult<Bound<'_, PyAny>> {
    let message = PyDict::new(py);
    message.set_item(intern!(py, "type"), intern!(py, "http.disconnect"))?;
    Ok(message.into_any())
}
