//! The HTTP/3 accept loop and each connection it serves: the QUIC handshake, the request
//! streams, GOAWAY when the server stops, and the graceful drain.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use rustls::pki_types::CertificateDer;
use tokio::sync::{watch, OwnedSemaphorePermit, Semaphore};
use tokio::task::JoinSet;

use crate::asgi::conn::ConnInfo;
use crate::asgi::live::{drain_within, Stop};
use crate::asgi::server::Server;
use crate::asgi::tls_scope::TlsScope;
use crate::http::Connection;

use super::endpoint::MAX_REQUEST_STREAMS;
use super::stream::serve_request;

/// How long a client may take over the QUIC handshake (as over TCP's TLS handshake).
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// Handshakes in progress past which a client whose address is not yet proven is sent a
/// Retry first: a flood of Initial packets from spoofed or throw-away source addresses then
/// costs the server one stateless packet each instead of a connection's state.
const HANDSHAKES_BEFORE_RETRY: usize = 32;

/// HTTP/3's "no error" (RFC 9114 8.1), the code a connection closes with once it is done.
const H3_NO_ERROR: quinn::VarInt = quinn::VarInt::from_u32(0x100);

/// How long closing the endpoint waits for the clients to hear CONNECTION_CLOSE.
const CLOSE_WAIT: Duration = Duration::from_secs(1);

/// Accepts connections until the server is asked to stop, then sends each GOAWAY and lets
/// the requests in progress finish within the graceful timeout before closing the endpoint.
pub(super) async fn serve(
    endpoint: quinn::Endpoint,
    server: Arc<Server>,
    server_cert: Arc<str>,
    mut stop: watch::Receiver<Stop>,
) {
    // As over TCP: each connection holds a receiver until it ends; `true` asks it to finish.
    let (stopping, _) = watch::channel(false);
    let (abort_tx, abort_rx) = watch::channel(false);
    let permits = Arc::new(Semaphore::new(server.settings.connection_limit));
    let handshaking = Arc::new(AtomicUsize::new(0));
    let local = endpoint.local_addr().ok();
    loop {
        let incoming = tokio::select! {
            biased;
            _ = stop.wait_for(Option::is_some) => break,
            incoming = endpoint.accept() => incoming,
        };
        let Some(incoming) = incoming else { break };
        // Past the connection limit a new client is refused at once (CONNECTION_REFUSED), not
        // kept waiting as a TCP client in the backlog is: its Initial holds no place in a queue.
        let Ok(permit) = permits.clone().try_acquire_owned() else {
            incoming.refuse();
            continue;
        };
        if handshaking.load(Ordering::Relaxed) >= HANDSHAKES_BEFORE_RETRY
            && !incoming.remote_address_validated()
            && incoming.may_retry()
        {
            let _ = incoming.retry();
            continue;
        }
        let handshake = Handshake::start(&handshaking);
        let served = serve_connection(
            incoming,
            (local, server_cert.clone()),
            handshake,
            server.clone(),
            stopping.subscribe(),
            permit,
        );
        let mut abort = abort_rx.clone();
        tokio::spawn(async move {
            tokio::select! {
                _ = served => {}
                _ = abort.wait_for(|aborted| *aborted) => {}
            }
        });
    }
    // New connections are refused from here on; those open are told GOAWAY and drain.
    endpoint.set_server_config(None);
    let drain = async {
        stopping.send_replace(true);
        stopping.closed().await;
    };
    if !drain_within(drain, &mut stop).await {
        // The TCP side does the same at the same deadline when it has connections to drain;
        // a second call finds nothing left to cancel.
        server.cancel_running();
        let _ = abort_tx.send(true);
    }
    endpoint.close(H3_NO_ERROR, b"");
    let _ = tokio::time::timeout(CLOSE_WAIT, endpoint.wait_idle()).await;
}

/// A handshake in progress, counted until it ends however it ends.
struct Handshake(Arc<AtomicUsize>);

impl Handshake {
    fn start(count: &Arc<AtomicUsize>) -> Self {
        count.fetch_add(1, Ordering::Relaxed);
        Self(count.clone())
    }
}

impl Drop for Handshake {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

/// One connection, from the QUIC handshake to its close.
async fn serve_connection(
    incoming: quinn::Incoming,
    (local, server_cert): (Option<SocketAddr>, Arc<str>),
    handshake: Handshake,
    server: Arc<Server>,
    mut stopping: watch::Receiver<bool>,
    _permit: OwnedSemaphorePermit,
) {
    let Ok(connecting) = incoming.accept() else {
        return;
    };
    let quic = match tokio::time::timeout(HANDSHAKE_TIMEOUT, connecting).await {
        Ok(Ok(quic)) => quic,
        // A failed or abandoned handshake: quinn has closed it.
        _ => return,
    };
    drop(handshake);
    let remote = quic.remote_address();
    // On a wildcard address the socket's own says nothing: the address the client reached
    // is the packets' destination (quinn reads it where the platform tells).
    let server_addr = match local {
        Some(local) => {
            let ip = quic.local_ip().unwrap_or(local.ip()).to_canonical();
            (ip.to_string(), Some(local.port()))
        }
        None => (String::new(), None),
    };
    let mut info = ConnInfo::new(
        Some((remote.ip().to_canonical().to_string(), remote.port())),
        server_addr,
    );
    info.tls = true;
    info.tls_scope = Some(Box::new(tls_scope(&quic, server_cert)));
    let conn = Arc::new(Connection::new(info, MAX_REQUEST_STREAMS as usize, None));
    let settings = &server.settings;
    let built = h3::server::builder()
        // The request head's limit, as over HTTP/1.1 and HTTP/2: past it the h3 crate answers
        // 431 and the request never reaches the app.
        .max_field_section_size(settings.max_head_size as u64)
        .build::<_, Bytes>(h3_quinn::Connection::new(quic.clone()))
        .await;
    let Ok(mut h3) = built else {
        return;
    };
    let mut requests = JoinSet::new();
    let mut finishing = false;
    loop {
        tokio::select! {
            accepted = h3.accept(), if !finishing || !requests.is_empty() => match accepted {
                Ok(Some(resolver)) => {
                    requests.spawn(serve_request(resolver, conn.clone(), server.clone()));
                }
                // The client said GOAWAY and its requests are done, or the connection is gone.
                Ok(None) | Err(_) => break,
            },
            Some(_) = requests.join_next(), if !requests.is_empty() => {}
            // An error is the server gone without draining: finish all the same.
            _ = async { stopping.wait_for(|stop| *stop).await.map(|_| ()) }, if !finishing => {
                finishing = true;
                // GOAWAY: no stream after those in progress will be served.
                let _ = h3.shutdown(0).await;
            }
            else => break,
        }
        if finishing && requests.is_empty() {
            break;
        }
    }
    if finishing {
        // Closing drops what quinn has not yet delivered: the last responses must land first.
        settled(&quic).await;
    }
    // Requests still running when the client went: their streams are gone with it.
    requests.abort_all();
    quic.close(H3_NO_ERROR, b"");
}

/// The scope's TLS extension for a QUIC connection: always TLS 1.3 (RFC 9001), the client's
/// certificates as quinn hands them over; quinn does not tell the cipher suite.
fn tls_scope(quic: &quinn::Connection, server_cert: Arc<str>) -> TlsScope {
    let client_certs = quic
        .peer_identity()
        .and_then(|identity| identity.downcast::<Vec<CertificateDer<'static>>>().ok());
    let client_certs = client_certs.as_deref().map_or(&[][..], Vec::as_slice);
    let tls13 = u16::from(rustls::ProtocolVersion::TLSv1_3);
    TlsScope::new(Some(server_cert), client_certs, Some(tls13), None)
}

/// The longest a finished connection waits for its last bytes to be acknowledged.
const SETTLE_LIMIT: Duration = Duration::from_secs(2);

/// Waits until what was sent on `quic` has reached the client (or the client has closed).
/// quinn has no call for it, but it resends unacknowledged data within a probe timeout (about
/// an RTT plus the peer's ACK delay): once nothing has been sent for a few of those, nothing
/// is in flight.
async fn settled(quic: &quinn::Connection) {
    let started = tokio::time::Instant::now();
    loop {
        let stats = quic.stats();
        let quiet = 6 * stats.path.rtt + Duration::from_millis(50);
        let sent = stats.udp_tx.datagrams;
        tokio::select! {
            _ = quic.closed() => return,
            () = tokio::time::sleep(quiet) => {}
        }
        if quic.stats().udp_tx.datagrams == sent || started.elapsed() >= SETTLE_LIMIT {
            return;
        }
    }
}
