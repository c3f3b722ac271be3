//! One request: what is refused before the app sees it, the benchmark routes, the WebSocket
//! hand-over (to the connection's `Upgrader`), and calling the app.

use std::convert::Infallible;
use std::future::Future;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use http::header::{CONNECTION, CONTENT_LENGTH};
use http::{HeaderValue, Request, Response, StatusCode};
use pyo3::prelude::*;
use tokio::sync::oneshot;

use crate::asgi::access_log::AccessEntry;
use crate::asgi::conn::ConnInfo;
use crate::asgi::levels::WARNING;
use crate::asgi::logging::log_line;
use crate::asgi::raw_head::RawHead;
use crate::asgi::responses::{closing_response, plain_response};
use crate::asgi::scope::build_scope;
use crate::asgi::server::Server;
use crate::asgi::settings::Settings;
use crate::bridge::{trace, Completion};
use crate::compress::Accepted;
use crate::metrics::{Protocol, WorkerMetrics};

use super::access_log::log_answered;
use super::app_calls::AppCall;
use super::app_done::on_app_done;
use super::body::ResponseBody;
use super::callables::{HttpReceive, HttpSend};
use super::compression::compress;
use super::connection::Connection;
use super::early_hints::EarlyHints;
use super::exchange::{Exchange, RequestHead};
use super::host::valid_host;
use super::incoming::IncomingBody;
use super::static_files::serve_static;
use super::streams::OpenStream;
use super::upgrade::{is_upgrade, Upgrader};

/// Tells the app the client is gone if hyper drops the request before the response head.
struct DisconnectOnDrop(Option<Arc<Exchange>>);

impl Drop for DisconnectOnDrop {
    fn drop(&mut self) {
        if let Some(exchange) = self.0.take() {
            Python::attach(|py| exchange.mark_disconnected(py));
        }
    }
}

/// One request, from its head to the response's head (a streamed body goes on after): hyper's
/// service, and what an HTTP/3 stream is handed to. Everything up to the app's start runs here,
/// when hyper hands the request over; the future returned only waits for the response head.
/// hyper moves that future several times (HTTP/2 spawns a task per stream with it) and keeps
/// room for it in every HTTP/1.1 connection, so it holds little: the request, the app's start
/// and their locals live on this function's stack instead (3.8 KB as one async fn).
pub(crate) fn handle(
    request: Request<IncomingBody>,
    conn: Arc<Connection>,
    server: Arc<Server>,
) -> impl Future<Output = Result<Response<ResponseBody>, Infallible>> + Send {
    let http1 = request.version() < http::Version::HTTP_2;
    let begun = match conn.app_calls.try_start() {
        Some(app_call) => Ok(begin(request, &conn, &server, app_call)),
        // As many app calls run as the connection may have streams (streams it reset while
        // their app ran): this one waits for one of them to end.
        None => Err(Box::new(request)),
    };
    async move {
        let begun = match begun {
            Ok(begun) => begun,
            Err(request) => {
                let app_call = Box::pin(conn.app_calls.start()).await;
                begin(*request, &conn, &server, app_call)
            }
        };
        let mut response = match begun {
            Begun::Answered(response) => *response,
            Begun::Upgrade(upgrade) => {
                let Upgrade {
                    upgrader,
                    request,
                    raw_head,
                    received,
                    open_stream,
                } = *upgrade;
                // Boxed (`Upgrader`): held across its await, it would make every request's
                // future larger.
                let answer = upgrader(request, raw_head, &conn.info, server.clone()).await;
                let answer = answered(server.metrics.as_ref(), Protocol::Ws, received, answer);
                drop(open_stream);
                return Ok(with_alt_svc(answer.map(ResponseBody::full), &conn));
            }
            Begun::Started(started) => started.response(&server.settings).await,
        };
        if http1 && server.state.is_stopping() {
            // hyper adds this only when told to finish before the response is made, which a
            // stop does not always manage (the app may answer within the same poll).
            let close = HeaderValue::from_static("close");
            response.headers_mut().insert(CONNECTION, close);
        }
        Ok(with_alt_svc(response, &conn))
    }
}

/// Adds the connection's Alt-Svc (`--http3`) to a response that has none.
fn with_alt_svc(mut response: Response<ResponseBody>, conn: &Connection) -> Response<ResponseBody> {
    if let Some(alt_svc) = &conn.alt_svc {
        // The app's own Alt-Svc, if it set one, wins.
        let headers = response.headers_mut();
        headers
            .entry(http::header::ALT_SVC)
            .or_insert_with(|| alt_svc.clone());
    }
    response
}

/// What became of a request by the time the app has been started.
enum Begun {
    /// Answered without the app: refused, or a diagnostics route. Boxed: a response is five
    /// times the size of the other variants, and `handle`'s future holds and moves a `Begun`.
    Answered(Box<Response<ResponseBody>>),
    /// A WebSocket handshake, for the connection's `Upgrader` (boxed: rare, and large).
    Upgrade(Box<Upgrade>),
    /// The app is running; its response head is to come.
    Started(Started),
}

struct Upgrade {
    upgrader: Upgrader,
    request: Request<hyper::body::Incoming>,
    raw_head: Option<RawHead>,
    received: u64,
    /// Until the app has accepted or denied the WebSocket.
    open_stream: OpenStream,
}

/// A request whose app has started, waiting for the response head.
struct Started {
    head_rx: oneshot::Receiver<Response<ResponseBody>>,
    exchange: Arc<Exchange>,
    /// Tells the app the client is gone if hyper drops the request before the head.
    guard: DisconnectOnDrop,
    /// Until the response's last byte: a streamed body takes it over.
    open_stream: OpenStream,
    http10: bool,
    /// What the request's `Accept-Encoding` allows, when `--compress` is on.
    accepted: Option<Accepted>,
}

impl Started {
    async fn response(mut self, settings: &Settings) -> Response<ResponseBody> {
        let mut response = (&mut self.head_rx)
            .await
            .unwrap_or_else(|_| plain_response(StatusCode::INTERNAL_SERVER_ERROR, settings));
        self.guard.0 = None;
        drop(self.exchange.take_spent_head());
        if self.exchange.hinted.load(Ordering::Acquire) {
            if let Some(hints) = &self.exchange.hints {
                hints.sent().await;
            }
        }
        if let Some((policy, accepted)) = settings.compression.as_ref().zip(self.accepted) {
            compress(&mut response, policy, accepted, self.exchange.head_request);
        }
        if self.http10
            && response.body().is_streamed()
            && !response.headers().contains_key(CONTENT_LENGTH)
        {
            // HTTP/1.0 has no chunks: this body ends at the close. Said as HTTP/1.0, the
            // response closes the connection; said as HTTP/1.1 (hyper's default), hyper would
            // add `connection: keep-alive` to a keep-alive request's answer and close all the
            // same.
            *response.version_mut() = http::Version::HTTP_10;
        }
        response.body_mut().hold(self.open_stream);
        response
    }
}

/// Refuses the request, answers it, hands it to the connection's `Upgrader`, or starts the
/// app on it, which then holds `app_call` until it ends. Inlined, as its steps are: it returns
/// a large value, which `handle`'s future would otherwise copy.
#[inline(always)]
fn begin(
    request: Request<IncomingBody>,
    conn: &Arc<Connection>,
    server: &Arc<Server>,
    app_call: AppCall,
) -> Begun {
    // The metrics time every request; the trace alone marks only when it is on.
    let received = if server.metrics.is_some() {
        trace::now_mark()
    } else {
        server.bridge.trace.mark()
    };
    let protocol = match request.version() {
        http::Version::HTTP_2 => Protocol::H2,
        http::Version::HTTP_3 => Protocol::H3,
        _ => Protocol::Http1,
    };
    // Taken first, whatever happens to the request, to stay in step with hyper's order.
    let raw_head = conn.heads.take();
    let open_stream = conn.streams.open();
    // WebSockets are served where they are on and the transport can upgrade.
    let upgrader = conn.upgrader.filter(|_| server.settings.websockets);
    let answer = |response| {
        let metrics = server.metrics.as_ref();
        Begun::Answered(Box::new(answered(metrics, protocol, received, response)))
    };
    if let Some(response) = server_answer(&request, raw_head.as_ref(), upgrader.is_some(), server) {
        return answer(response);
    }
    if let Some(files) = &server.settings.static_files {
        if let Some(mut response) = serve_static(&request, files, &server.settings) {
            response.body_mut().hold(open_stream);
            server.state.request_finished();
            let (parts, _) = request.into_parts();
            log_answered(server, &conn.info, &parts, &response);
            return answer(response);
        }
    }
    if let Some(upgrader) = upgrader.filter(|_| is_upgrade(&request)) {
        // An upgrade is HTTP/1.1's or HTTP/2's (`is_upgrade`): hyper's body, always.
        let (parts, IncomingBody::Hyper(body)) = request.into_parts() else {
            server.state.request_finished();
            return answer(plain_response(
                StatusCode::NOT_IMPLEMENTED,
                &server.settings,
            ));
        };
        return Begun::Upgrade(Box::new(Upgrade {
            upgrader,
            request: Request::from_parts(parts, body),
            raw_head,
            received,
            open_stream,
        }));
    }
    let started = (protocol, received);
    Begun::Started(start(
        request,
        raw_head,
        open_stream,
        conn,
        server,
        app_call,
        started,
    ))
}

/// What the server answers itself, before the app: 503 past `--limit-concurrency`, a refused
/// request (`refusal`), a benchmark route. Otherwise the request is counted in flight, and
/// `--limit-max-requests` is counted (and said, once reached).
#[inline(always)]
fn server_answer(
    request: &Request<IncomingBody>,
    raw_head: Option<&RawHead>,
    websockets: bool,
    server: &Server,
) -> Option<Response<ResponseBody>> {
    let settings = &server.settings;
    let state = &server.state;
    if state.count_request() {
        let limit = settings.max_requests.unwrap_or_default();
        let line = format!("Maximum request limit of {limit} exceeded. Terminating process.");
        log_line(&server.py, WARNING, &line);
    }
    if !state.start_request(settings.limit_concurrency) {
        return Some(plain_response(StatusCode::SERVICE_UNAVAILABLE, settings));
    }
    let refused = if raw_head.is_some_and(|head| head.ambiguous) {
        Some(StatusCode::BAD_REQUEST)
    } else {
        refusal(request, raw_head.is_some(), websockets, settings)
    };
    if let Some(status) = refused {
        state.request_finished();
        return Some(closing_response(status, settings));
    }
    if let Some(diagnostics) = &server.diagnostics {
        let path = request.uri().path();
        if let Some(response) = diagnostics.answer(path, &server.bridge, settings) {
            state.request_finished();
            return Some(response);
        }
    }
    None
}

/// Starts the app on the request: its exchange, and the app called with the GIL (here, or on
/// the loop's thread when the bridge starts coroutines there).
#[inline(always)]
fn start(
    request: Request<IncomingBody>,
    raw_head: Option<RawHead>,
    open_stream: OpenStream,
    conn: &Arc<Connection>,
    server: &Arc<Server>,
    app_call: AppCall,
    (protocol, received): (Protocol, u64),
) -> Started {
    let settings = &server.settings;
    let (mut parts, body) = request.into_parts();
    let http10 = parts.version == http::Version::HTTP_10;
    let hints = early_hints(&mut parts, conn);
    let (head_tx, head_rx) = oneshot::channel();
    let head_request = parts.method == http::Method::HEAD;
    // As hyper decides when to send `100 Continue` (HTTP/1.1, a body to come).
    let expects_continue = parts.version == http::Version::HTTP_11
        && !http_body::Body::is_end_stream(&body)
        && parts
            .headers
            .get(http::header::EXPECT)
            .is_some_and(|value| value.as_bytes().eq_ignore_ascii_case(b"100-continue"));
    // Here, without the GIL: the scope and the access line both need it.
    let forwarded = conn.info.forwarded(&parts.headers, settings);
    let accepted = settings
        .compression
        .as_ref()
        .map(|policy| policy.accepted(&parts.headers));
    let exchange = Arc::new(Exchange::new(
        server.clone(),
        head_tx,
        body,
        head_request,
        expects_continue,
        (protocol, received),
        (app_call, hints),
    ));
    // Built only when an access log line will be written: it costs two allocations (and
    // what `--access-log-format` asks for).
    let mut access = server
        .access_log()
        .map(|log| AccessEntry::new(&parts, &conn.info, &forwarded, &log));
    let guard = DisconnectOnDrop(Some(exchange.clone()));
    // Boxed: it moves to the loop's thread and back into the exchange (`keep_spent_head`).
    let head = Box::new(RequestHead {
        parts,
        raw: raw_head,
        forwarded,
    });
    let start = {
        let exchange = exchange.clone();
        let conn = conn.clone();
        move |py: Python<'_>| {
            if let Err(err) = start_app(py, &exchange, head, &conn.info, &mut access, received) {
                // Calling the app raised before there was a coroutine (say, a sync callable):
                // the same 500 and logged traceback as an exception inside it.
                on_app_done(py, &exchange, access.as_ref(), Err(err));
            }
        }
    };
    let bridge = &server.bridge;
    if bridge.starts_on_loop() {
        // The wait for the loop thread is this mode's GIL wait: the start runs there, with it.
        let queued = bridge.trace.mark();
        let waiting = server.clone();
        bridge.start_on_loop(Box::new(move |py| {
            let trace = &waiting.bridge.trace;
            trace.record_since(&trace.gil_wait, queued);
            start(py);
        }));
    } else {
        let asked_for_gil = bridge.trace.mark();
        Python::attach(|py| {
            bridge
                .trace
                .record_since(&bridge.trace.gil_wait, asked_for_gil);
            start(py);
        });
    }
    Started {
        head_rx,
        exchange,
        guard,
        open_stream,
        http10,
        accepted,
    }
}

/// How the request's 103 Early Hints reach its client: beside hyper over HTTP/1.1, as the
/// transport says in the request otherwise; none over HTTP/1.0, which has no informational
/// responses.
fn early_hints(parts: &mut http::request::Parts, conn: &Connection) -> Option<EarlyHints> {
    match parts.version {
        http::Version::HTTP_11 => conn.interim.clone().map(EarlyHints::Http1),
        http::Version::HTTP_09 | http::Version::HTTP_10 => None,
        http::Version::HTTP_2 => EarlyHints::of_http2(&mut parts.extensions),
        _ => parts.extensions.remove::<EarlyHints>(),
    }
}

/// Counts a response the server made without the app (a refusal, a diagnostics route, a
/// WebSocket handshake's answer) in the metrics.
fn answered<B>(
    metrics: Option<&WorkerMetrics>,
    protocol: Protocol,
    received: u64,
    response: Response<B>,
) -> Response<B> {
    if let Some(metrics) = metrics {
        let nanos = trace::now_mark().saturating_sub(received);
        metrics.record_request(protocol, response.status().as_u16(), Some(nanos));
    }
    response
}

/// A request refused before the app sees it: headers over `max_head_size` in all (hyper
/// enforces its buffer limit only when a head arrives in several reads), a request no ASGI app
/// can be handed (`unservable`), or a declared body over `limit_request_body` (hyper has
/// already rejected malformed Content-Lengths). A `recorded` head's framing was checked
/// already, on the raw lines (`RawHead::ambiguous`).
fn refusal(
    request: &Request<IncomingBody>,
    recorded: bool,
    websockets: bool,
    settings: &Settings,
) -> Option<StatusCode> {
    // One pass over the lines for their size and the Host lines: a lookup would hash.
    let headers = request.headers();
    let (mut head_bytes, mut hosts, mut hosts_valid) = (0, 0, true);
    for (name, value) in headers {
        head_bytes += name.as_str().len() + value.len() + 4;
        if name == http::header::HOST {
            hosts += 1;
            hosts_valid &= valid_host(value.as_bytes());
        }
    }
    if !hosts_valid {
        return Some(StatusCode::BAD_REQUEST);
    }
    if let Some(status) = unservable(request, hosts, websockets) {
        return Some(status);
    }
    // The request line counts against the same limit; past it alone, the target is too long.
    let target = request
        .uri()
        .path_and_query()
        .map_or(0, |target| target.as_str().len());
    if target > settings.max_head_size {
        return Some(StatusCode::URI_TOO_LONG);
    }
    if head_bytes + target > settings.max_head_size {
        return Some(StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE);
    }
    if !recorded && ambiguous_framing(headers) {
        return Some(StatusCode::BAD_REQUEST);
    }
    let limit = settings.limit_request_body?;
    let length: u64 = headers
        .get(http::header::CONTENT_LENGTH)?
        .to_str()
        .ok()?
        .parse()
        .ok()?;
    (length > limit).then_some(StatusCode::PAYLOAD_TOO_LARGE)
}

/// What RFC 9112 says a server must refuse, or what no ASGI app can serve:
/// - CONNECT asks for a tunnel, which an ASGI server has none of (hyper would take the app's
///   2xx for the start of one and drop the connection with no response sent): 501, unless it
///   is HTTP/2's extended CONNECT for a WebSocket (RFC 8441) and WebSockets are on;
/// - a request-target other than a path (or `*` for OPTIONS), such as `GET example.com:80`,
///   would reach the app with an empty path: 400 (RFC 9112 3.2);
/// - a request with two Host lines, or (checked before this) a Host value that is not
///   `uri-host [":" port]`: 400 (RFC 9112 3.2), a host-confusion vector, a proxy routing on one
///   and the app reading the other. An HTTP/1.1 request with none is served, as
///   uvicorn's default parser (httptools) serves it: RFC 9112 says refuse it, but clients that
///   omit it exist (a wrk script formatting requests before wrk knows the host) and work with
///   uvicorn.
fn unservable(
    request: &Request<IncomingBody>,
    hosts: usize,
    websockets: bool,
) -> Option<StatusCode> {
    if request.method() == http::Method::CONNECT && !(websockets && is_upgrade(request)) {
        return Some(StatusCode::NOT_IMPLEMENTED);
    }
    let path = request.uri().path();
    let asterisk = path == "*" && request.method() == http::Method::OPTIONS;
    if !path.starts_with('/') && !asterisk {
        return Some(StatusCode::BAD_REQUEST);
    }
    (hosts > 1).then_some(StatusCode::BAD_REQUEST)
}

/// Body framing two parsers could read differently, the raw material of request smuggling:
/// Content-Length given more than once or together with Transfer-Encoding, or any
/// Transfer-Encoding but a single `chunked`. hyper tolerates some of these (as RFC 9112 allows);
/// a server facing the internet refuses them all.
fn ambiguous_framing(headers: &http::HeaderMap) -> bool {
    let lengths = headers.get_all(http::header::CONTENT_LENGTH).iter().count();
    let mut encodings = headers.get_all(http::header::TRANSFER_ENCODING).iter();
    let encoding = encodings.next();
    if encodings.next().is_some() || lengths > 1 {
        return true;
    }
    match encoding {
        None => false,
        Some(encoding) => {
            lengths > 0
                || !encoding
                    .as_bytes()
                    .trim_ascii()
                    .eq_ignore_ascii_case(b"chunked")
        }
    }
}

/// Calls the app and hands its coroutine to the bridge, which drives it right here.
fn start_app(
    py: Python<'_>,
    exchange: &Arc<Exchange>,
    head: Box<RequestHead>,
    conn: &ConnInfo,
    access: &mut Option<AccessEntry>,
    received: u64,
) -> PyResult<()> {
    let server = &exchange.server;
    let called = server
        .py
        .request_context
        .run(py, || call_app(py, exchange, &head, conn));
    if server.bridge.starts_on_loop() {
        exchange.keep_spent_head(py, head);
    } else {
        // On the tokio thread already: the head goes here, before hyper reads on (it reads
        // while a request is in progress, to notice the client leaving). Its header values
        // share hyper's read buffer, which hyper would otherwise replace with a new one.
        drop(head);
    }
    let (coro, context) = called?;
    // From here the completion owns the access info; if making the job fails, the caller's
    // fallback logs the error without an access line.
    let access = access.take();
    let finishing = exchange.clone();
    let completion = Completion::Callback(Box::new(move |py, result| {
        on_app_done(py, &finishing, access.as_ref(), result)
    }));
    server
        .bridge
        .start(py, &coro, completion, context, received)
}

/// `app(scope, receive, send)`: the coroutine to drive.
fn call_app<'py>(
    py: Python<'py>,
    exchange: &Arc<Exchange>,
    head: &RequestHead,
    conn: &ConnInfo,
) -> PyResult<Bound<'py, PyAny>> {
    let handles = &exchange.server.py;
    let scope = build_scope(
        py,
        (&head.parts, head.raw.as_ref()),
        conn,
        &head.forwarded,
        &handles.scope_template,
        exchange.hints.is_some(),
    )?;
    let receive = Py::new(
        py,
        HttpReceive {
            exchange: exchange.clone(),
        },
    )?;
    let send = Py::new(
        py,
        HttpSend {
            exchange: exchange.clone(),
        },
    )?;
    handles.app.bind(py).call1((scope, receive, send))
}
