//! The accept loop and each connection it serves: the TLS handshake, hyper's connection
//! settings, and when a connection is asked to finish.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use hyper::server::conn::{http1, http2};
use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use tokio::sync::{watch, OwnedSemaphorePermit, Semaphore};

use crate::asgi::conn::ConnInfo;
use crate::asgi::levels::{TRACE, WARNING};
use crate::asgi::live::{drain_within, Stop};
use crate::asgi::logging::log_line;
use crate::asgi::server::Server;
use crate::asgi::settings::{HttpVersions, ProxyProtocol, Settings};
use crate::asgi::tls_scope::TlsScope;
use crate::http::{handle, Connection, IncomingBody, InterimQueue, Recorder, Upgrader};
use crate::ws;

use super::finish_when::{Driven, FinishWhen};
use super::header_timer::HeaderTimer;
use super::listener::{IoStream, Listeners};
use super::proxy_protocol::read_header;
use super::recording_io::RecordingIo;
use super::tls::TlsServing;
use super::woken_only::WokenOnly;

/// How every connection of one server is served: hyper's settings for each version, and TLS
/// if it is on.
struct ConnectionSetup {
    http1: http1::Builder,
    http2: http2::Builder<TokioExecutor>,
    tls: Option<TlsServing>,
    /// `h3=":PORT"`, for the responses of every connection to the socket HTTP/3 is served
    /// beside (the first TCP one, at that index), when it is served beside TLS.
    alt_svc: Option<(usize, http::HeaderValue)>,
}

/// Accepts connections until the server is asked to stop, then drains them: each finishes
/// what it has in progress within the graceful timeout, or is cancelled and closed.
pub(super) async fn accept_loop(
    listeners: Listeners,
    server: Arc<Server>,
    tls: Option<TlsServing>,
    mut stop: watch::Receiver<Stop>,
) {
    // Each connection holds a receiver until it ends: told `true`, it finishes gracefully,
    // and once every receiver is gone every connection has ended.
    let (stopping, _) = watch::channel(false);
    let (abort_tx, abort_rx) = watch::channel(false);
    let tls_on = tls.is_some();
    let alt_svc = match tls_on && server.settings.http3 {
        true => listeners.first_tcp_port().and_then(|(index, port)| {
            let value = http::HeaderValue::try_from(format!("h3=\":{port}\"")).ok()?;
            Some((index, value))
        }),
        false => None,
    };
    let setup = Arc::new(ConnectionSetup {
        http1: http1_builder(&server.settings),
        http2: http2_builder(&server.settings),
        tls,
        alt_svc,
    });
    let publisher = server.metrics.is_some().then(|| {
        let server = server.clone();
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(METRICS_PUBLISH_INTERVAL);
            loop {
                tick.tick().await;
                publish_metrics(&server);
            }
        })
    });
    let permits = Arc::new(Semaphore::new(server.settings.connection_limit));
    let spawn_connection = |(stream, conn, permit, index): Accepted| {
        let open = OpenConnection::new(&server);
        let (server, setup, stopping) = (server.clone(), setup.clone(), stopping.subscribe());
        let served = async move {
            let Some((stream, conn)) = after_proxy_header(stream, conn, &server).await else {
                return;
            };
            let max_streams = server.settings.http2_max_concurrent_streams as usize;
            let alt_svc = match &setup.alt_svc {
                Some((h3_index, value)) if *h3_index == index => Some(value.clone()),
                _ => None,
            };
            let conn = Connection::new(conn, max_streams, Some(WEBSOCKETS))
                .announcing(alt_svc)
                .with_interim(Arc::new(InterimQueue::default()));
            serve_connection(stream, conn, server, setup, stopping).await;
        };
        let mut abort = abort_rx.clone();
        tokio::spawn(async move {
            tokio::select! {
                _ = served => {}
                _ = WokenOnly::new(abort.wait_for(|aborted| *aborted)) => {}
            }
            drop(permit);
            drop(open);
        });
    };
    loop {
        let accepted = tokio::select! {
            biased;
            _ = stop.wait_for(Option::is_some) => break,
            accepted = accept_with_permit(&listeners, &permits, tls_on) => accepted,
        };
        match accepted {
            Ok(accepted) => spawn_connection(accepted),
            // Out of descriptors or a connection reset before accept: keep serving.
            Err(_) => tokio::time::sleep(Duration::from_millis(10)).await,
        }
    }
    // Connections the kernel has already accepted into the listen backlog would be reset when
    // the listener closes: those, and any that come within a moment, are taken and their first
    // request answered (`finish_when`), unless the stop is forced. They are taken until the
    // caller has closed its own descriptors of the sockets too, since the kernel queues
    // connections while any is open: a caller that asks for the stop has closed them already,
    // one told of a stop the server made itself (`--limit-max-requests`) closes them now.
    let forced = matches!(*stop.borrow(), Some(Some(timeout)) if timeout.is_zero());
    if !forced {
        let grace_over = tokio::time::Instant::now() + ACCEPT_GRACE;
        let mut released = server.state.listeners_released();
        let closed = async move {
            let released = released.wait_for(|released| *released);
            let _ = tokio::time::timeout(RELEASE_WAIT, released).await;
            tokio::time::sleep_until(grace_over).await;
        };
        tokio::pin!(closed);
        loop {
            let accepted = tokio::select! {
                biased;
                accepted = accept_with_permit(&listeners, &permits, tls_on) => accepted,
                () = &mut closed => break,
            };
            match accepted {
                Ok(accepted) => spawn_connection(accepted),
                Err(_) => break,
            }
        }
    }
    drop(listeners);
    let mut ws_sessions = server.state.ws_sessions.subscribe();
    let drain = async {
        stopping.send_replace(true);
        stopping.closed().await;
        // Each session has been sent 1012; its app returns once it hears the disconnect.
        let _ = ws_sessions.wait_for(|open| *open == 0).await;
    };
    if !drain_within(drain, &mut stop).await {
        server.cancel_running();
        let _ = abort_tx.send(true);
    }
    if let Some(publisher) = publisher {
        publisher.abort();
    }
    publish_metrics(&server);
}

/// The `Upgrader` of a TCP connection: its WebSocket upgrades served by `ws`.
const WEBSOCKETS: Upgrader =
    |request, raw_head, conn, server| Box::pin(ws::upgrade(request, raw_head, conn, server));

/// How often a worker copies its bridge counters, GIL-wait trace and WebSocket gauge into its
/// metrics slot (requests and connections are counted there as they happen).
const METRICS_PUBLISH_INTERVAL: Duration = Duration::from_millis(500);

fn publish_metrics(server: &Server) {
    if let Some(metrics) = &server.metrics {
        let websockets = *server.state.ws_sessions.borrow();
        metrics.publish(&server.bridge, websockets, server.access.dropped());
    }
}

/// A connection counted in `ferrule_connections_active` until dropped.
struct OpenConnection(Option<Arc<Server>>);

impl OpenConnection {
    fn new(server: &Arc<Server>) -> Self {
        let counted = server.metrics.as_ref().map(|metrics| {
            metrics.connection_opened();
            server.clone()
        });
        Self(counted)
    }
}

impl Drop for OpenConnection {
    fn drop(&mut self) {
        if let Some(metrics) = self.0.as_ref().and_then(|server| server.metrics.as_ref()) {
            metrics.connection_closed();
        }
    }
}

/// How long the listener still accepts once the server stops: as long as uvicorn can take to
/// notice a stop, and time enough for the kernel's backlog to be taken.
const ACCEPT_GRACE: Duration = Duration::from_millis(100);

/// How long a stopping server accepts at most while it waits for its caller to close its own
/// descriptors of the sockets (a caller told of the stop looks every 0.1 s).
const RELEASE_WAIT: Duration = Duration::from_secs(5);

/// A connection accepted, with its slot of the connection limit (`--max-connections`) and the
/// index of the socket it came to.
type Accepted = (Box<dyn IoStream>, ConnInfo, OwnedSemaphorePermit, usize);

/// Waits for a connection slot, then for a connection.
async fn accept_with_permit(
    listeners: &Listeners,
    permits: &Arc<Semaphore>,
    tls: bool,
) -> std::io::Result<Accepted> {
    let permit = permits
        .clone()
        .acquire_owned()
        .await
        .expect("the semaphore is never closed");
    let ((stream, mut conn), index) = listeners.accept().await?;
    conn.tls = tls;
    Ok((stream, conn, permit, index))
}

/// The connection past its PROXY protocol header (`--proxy-protocol`), its ends as the header
/// gives them; as it is when the option is off. None if it is to be closed: its peer is not a
/// trusted proxy, or its header is missing, malformed or late (each logged).
async fn after_proxy_header(
    stream: Box<dyn IoStream>,
    mut conn: ConnInfo,
    server: &Server,
) -> Option<(Box<dyn IoStream>, ConnInfo)> {
    let settings = &server.settings;
    if settings.proxy_protocol == ProxyProtocol::Off {
        return Some((stream, conn));
    }
    let peer = conn.peer();
    let refused = |why: &str| {
        let from = peer.unwrap_or("a Unix socket");
        let line = format!("PROXY protocol: {why} from {from}; connection closed");
        log_line(&server.py, WARNING, &line);
        None
    };
    // As for the proxy headers: a Unix socket's peer has no address, and only `*` trusts it.
    if !settings.trusted_proxies.trusts(peer) {
        return refused("a connection not in --forwarded-allow-ips");
    }
    let timeout = settings.header_read_timeout();
    let header = read_header(stream, settings.proxy_protocol);
    match tokio::time::timeout(timeout, header).await {
        Ok(Ok((addresses, stream))) => {
            if let Some((client, local)) = addresses {
                conn.client = Some((client.ip().to_string(), client.port()));
                conn.server = (local.ip().to_string(), Some(local.port()));
            }
            Some((stream, conn))
        }
        Ok(Err(why)) => refused(&why),
        Err(_) => refused(&format!("no header within {} s", timeout.as_secs_f64())),
    }
}

/// hyper's HTTP/1.1 settings (on the runtime: its header timer starts a sweeping task).
fn http1_builder(settings: &Settings) -> http1::Builder {
    let mut builder = http1::Builder::new();
    builder
        .timer(HeaderTimer::start())
        .header_read_timeout(settings.header_read_timeout())
        .auto_date_header(settings.date_header)
        // The request line and headers must fit in `max_head_size`. hyper's buffer is twice
        // that, so a head a little over the limit is still parsed whole: a long request line
        // then gets 414 from hyper (it only tells URI length on a complete parse), long headers
        // 431 from `refusal`. Past the buffer hyper answers 431 and closes.
        .max_buf_size(2 * settings.max_head_size);
    builder
}

/// hyper's HTTP/2 settings.
fn http2_builder(settings: &Settings) -> http2::Builder<TokioExecutor> {
    let mut builder = http2::Builder::new(TokioExecutor::new());
    builder
        .timer(TokioTimer::new())
        .max_header_list_size(u32::try_from(settings.max_head_size).unwrap_or(u32::MAX))
        .max_concurrent_streams(settings.http2_max_concurrent_streams)
        // A peer silent for the keep-alive timeout is PINGed, and dropped if it does not answer
        // within as long again: a client gone without a FIN (a NAT that forgot it, a machine
        // switched off) would otherwise keep its connection slot for ever. A live client that
        // answers PINGs but opens no stream is sent GOAWAY after as long (`FinishWhen`).
        .keep_alive_interval(settings.header_read_timeout())
        .keep_alive_timeout(settings.header_read_timeout())
        .auto_date_header(settings.date_header);
    if settings.websockets {
        // SETTINGS_ENABLE_CONNECT_PROTOCOL: WebSockets over HTTP/2 streams (RFC 8441).
        builder.enable_connect_protocol();
    }
    builder
}

/// How long a client may take over the TLS handshake.
const TLS_HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// One connection, from the TLS handshake (if any) to its close.
async fn serve_connection(
    stream: Box<dyn IoStream>,
    mut conn: Connection,
    server: Arc<Server>,
    setup: Arc<ConnectionSetup>,
    stopping: watch::Receiver<bool>,
) {
    let stream = match &setup.tls {
        None => stream,
        Some(tls) => match tls_handshake(stream, tls).await {
            Some((stream, scope)) => {
                conn.info.tls_scope = Some(scope);
                stream
            }
            None => return,
        },
    };
    let conn = Arc::new(conn);
    let _traced = ConnectionTrace::start(&server, &conn.info);
    let settings = &server.settings;
    let mut io = recording(stream, &conn, settings);
    let heads = conn.heads.clone();
    let first_request_timeout = settings.header_read_timeout();
    let versions = settings.http;
    let finish_when = FinishWhen {
        stopping,
        conn: conn.clone(),
        idle_timeout: first_request_timeout,
    };
    // The request's future is not boxed (hyper keeps room for it in the connection; `handle`
    // keeps it small): freeing a box that is alone in its page hands the page back to the
    // system (purge delay 0), a `madvise` and page faults per request.
    let service = service_fn(move |request: http::Request<hyper::body::Incoming>| {
        handle(
            request.map(IncomingBody::Hyper),
            conn.clone(),
            server.clone(),
        )
    });
    // hyper times out slow heads only once it knows the protocol: a client that sends less
    // than tells HTTP/1 from HTTP/2 and goes silent is closed here instead, as is one whose
    // first request is not in within the keep-alive timeout.
    let started = tokio::time::Instant::now();
    let first_request_due = started + first_request_timeout;
    let Some(http2) = speaks_http2(&mut io, versions, first_request_due).await else {
        return;
    };
    let serving = async move {
        let mut finish_when = finish_when;
        if http2 {
            io.coalesce_writes();
            // HTTP/2's WebSockets are streams (extended CONNECT): no HTTP/1.1 upgrade to allow.
            // Boxed: kept in the task, its room would be taken by every HTTP/1.1 connection too.
            let mut connection = Box::pin(setup.http2.serve_connection(TokioIo::new(io), service));
            let connection = connection.as_mut();
            finish_when
                .drive(connection, |c| c.graceful_shutdown(), None)
                .await;
            return;
        }
        serve_http1(io, service, &setup, &mut finish_when).await;
    };
    tokio::pin!(serving);
    tokio::select! {
        _ = &mut serving => return,
        _ = WokenOnly::new(tokio::time::sleep_until(first_request_due)) => {
            if !heads.first_request_seen() {
                return;
            }
        }
    }
    serving.await;
}

/// The TLS handshake, within `TLS_HANDSHAKE_TIMEOUT`, and the scope's TLS extension for the
/// connection; None if it failed or was abandoned (rustls has sent its alert, if any).
async fn tls_handshake(
    stream: Box<dyn IoStream>,
    tls: &TlsServing,
) -> Option<(Box<dyn IoStream>, Box<TlsScope>)> {
    // Boxed: the handshake's state is large, and the connection's task would otherwise keep
    // room for it as long as the connection lives.
    let handshake = Box::pin(tokio::time::timeout(
        TLS_HANDSHAKE_TIMEOUT,
        tls.acceptor.accept(stream),
    ));
    match handshake.await {
        Ok(Ok(stream)) => {
            let server_cert = Some(tls.server_cert.clone());
            let scope = TlsScope::of_connection(server_cert, stream.get_ref().1);
            Some((Box::new(stream), Box::new(scope)))
        }
        _ => None,
    }
}

/// The socket as hyper will read it: through the record of request heads, which sees the
/// bytes after TLS, as hyper does.
fn recording(
    stream: Box<dyn IoStream>,
    conn: &Connection,
    settings: &Settings,
) -> RecordingIo<Box<dyn IoStream>> {
    let mut recorder = Recorder::new(conn.heads.clone(), settings.max_head_size);
    if !settings.http.h2 {
        recorder = recorder.refusing_http2();
    }
    RecordingIo::new(stream, recorder).with_interim(conn.interim.clone())
}

/// Whether the client speaks HTTP/2: by its first bytes when both versions are on; None if
/// it told neither by `due` or left.
async fn speaks_http2(
    io: &mut RecordingIo<Box<dyn IoStream>>,
    versions: HttpVersions,
    due: tokio::time::Instant,
) -> Option<bool> {
    match (versions.h1, versions.h2) {
        // With HTTP/2 off its preface goes to HTTP/1.1, whose head recorder refuses it.
        (true, true) => {
            let told = io.starts_with_http2_preface();
            match tokio::time::timeout_at(due, told).await {
                Ok(Ok(http2)) => Some(http2),
                _ => None,
            }
        }
        (h1, _) => Some(!h1),
    }
}

/// HTTP/1.1: one hyper connection while requests come, none while the connection is
/// idle (`finish_when::SET_ASIDE_AFTER`), until either side closes it or it is idle
/// past the keep-alive timeout.
async fn serve_http1<S>(
    mut io: RecordingIo<Box<dyn IoStream>>,
    service: S,
    setup: &ConnectionSetup,
    finish_when: &mut FinishWhen,
) where
    S: hyper::service::HttpService<hyper::body::Incoming, ResBody = crate::http::ResponseBody>
        + Clone
        + Send
        + Unpin
        + 'static,
    S::Future: Send + 'static,
    S::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    loop {
        let requests_before = finish_when.conn.heads.requests();
        let connection = setup
            .http1
            .serve_connection(TokioIo::new(io), service.clone());
        // Boxed, so that its memory goes back while the connection is set aside.
        let mut connection: Box<dyn Http1Connection> = Box::new(connection.with_upgrades());
        let driven = finish_when
            .drive(
                Pin::new(&mut *connection),
                |c| c.graceful_shutdown(),
                Some(requests_before),
            )
            .await;
        let Driven::AtRest(quiet_since) = driven else {
            return;
        };
        finish_when.conn.heads.set_aside(false);
        let Some(socket) = connection.into_socket() else {
            return; // not at rest after all; cannot happen while the recorder follows hyper
        };
        io = socket;
        let idle_until = quiet_since + finish_when.idle_timeout;
        if !finish_when.next_request_arrives(&mut io, idle_until).await {
            let _ = tokio::io::AsyncWriteExt::shutdown(&mut io).await;
            return;
        }
    }
}

/// hyper's HTTP/1.1 connection, with what `serve_connection` needs of it. A trait object: the
/// compiler cannot prove the connection's future `Send` with hyper's type kept across awaits.
trait Http1Connection: Future<Output = hyper::Result<()>> + Send + Unpin {
    fn graceful_shutdown(self: Pin<&mut Self>);

    /// The socket, once hyper has let go of it between requests; `None` if it was upgraded,
    /// or if hyper held part of a request.
    fn into_socket(self: Box<Self>) -> Option<RecordingIo<Box<dyn IoStream>>>;
}

impl<S> Http1Connection for http1::UpgradeableConnection<TokioIo<RecordingIo<Box<dyn IoStream>>>, S>
where
    S: hyper::service::HttpService<hyper::body::Incoming, ResBody = crate::http::ResponseBody>
        + Send
        + Unpin,
    S::Future: Send + 'static,
    S::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
    Self: Future<Output = hyper::Result<()>> + Send + Unpin,
{
    fn graceful_shutdown(self: Pin<&mut Self>) {
        http1::UpgradeableConnection::graceful_shutdown(self);
    }

    fn into_socket(self: Box<Self>) -> Option<RecordingIo<Box<dyn IoStream>>> {
        let parts = (*self).into_parts()?;
        parts.read_buf.is_empty().then(|| parts.io.into_inner())
    }
}

/// `--log-level trace`: "HTTP connection made" once a connection is set up (after TLS), and
/// "HTTP connection lost" when it ends however it ends, as uvicorn logs them.
struct ConnectionTrace {
    server: Arc<Server>,
    client: String,
}

impl ConnectionTrace {
    fn start(server: &Arc<Server>, info: &ConnInfo) -> Option<Self> {
        if !server.settings.trace_connections {
            return None;
        }
        let client = info.client_prefix();
        log_line(&server.py, TRACE, &format!("{client}HTTP connection made"));
        Some(Self {
            server: server.clone(),
            client,
        })
    }
}

impl Drop for ConnectionTrace {
    fn drop(&mut self) {
        let line = format!("{}HTTP connection lost", self.client);
        log_line(&self.server.py, TRACE, &line);
    }
}
