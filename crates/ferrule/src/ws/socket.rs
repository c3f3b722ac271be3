//! `run_socket`, the tokio task that owns a WebSocket's connection after the upgrade: frames
//! from the client go to the app through a bounded channel (a slow app stops the reading), the
//! app's messages go out through another (a slow client suspends `send()` on a native future),
//! as for HTTP bodies; pings and the close handshake.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use futures_util::{SinkExt, StreamExt};
use hyper::upgrade::Upgraded;
use hyper_util::rt::TokioIo;
use tokio::io::AsyncReadExt;
use tokio_tungstenite::tungstenite::error::{Error as WsError, ProtocolError};
use tokio_tungstenite::tungstenite::protocol::{Role, WebSocketConfig};
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::WebSocketStream;

use super::deflate_params::DeflateParams;
use super::deflater::Deflater;
use super::exchange::{close_message, Inbound, SocketEnds, WsExchange};
use super::inflating_stream::{CloseWith, InflatingStream};

/// How long the server waits for the client's half of a close handshake it started.
const CLOSE_TIMEOUT: Duration = Duration::from_secs(5);
/// How much tungstenite reads from the socket at a time. It zeroes that much of its buffer
/// before every read, even one that finds nothing: its default of 128 KiB cost a quarter of
/// the server's CPU on an echo of 1 KiB messages, and kept 128 KiB resident per socket. At
/// 4 KiB an idle socket holds less than uvicorn's (18.5 KiB against 19.8; 8 KiB: 22.6); a
/// larger message grows the buffer while it arrives.
const READ_BUFFER: usize = 4 * 1024;
/// At most how many of the app's queued messages go out in one write: each one written alone
/// was a system call per message (a broadcaster's burst to a socket), and a bound keeps one
/// socket's turn on the tokio thread short.
const WRITE_BATCH: usize = 32;

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
        WsError::Io(err) => err
            .get_ref()
            .and_then(|inner| inner.downcast_ref::<CloseWith>())
            .map(|close| close.0),
        _ => None,
    }
}

/// Owns the upgraded connection until the WebSocket is over.
pub async fn run_socket(
    upgraded: Upgraded,
    exchange: Arc<WsExchange>,
    ends: SocketEnds,
    deflate: Option<DeflateParams>,
) {
    let settings = &exchange.server.settings;
    let max_size = settings.ws_max_size;
    let SocketEnds {
        inbound_tx,
        mut outbound_rx,
    } = ends;
    let config = WebSocketConfig::default()
        .read_buffer_size(READ_BUFFER)
        .max_message_size(Some(max_size))
        .max_frame_size(Some(max_size));
    let io = InflatingStream::new(TokioIo::new(upgraded), deflate.as_ref(), max_size);
    let mut deflater = deflate.as_ref().map(Deflater::new);
    let socket = WebSocketStream::from_raw_socket(io, Role::Server, Some(config)).await;
    let (mut sink, mut stream) = socket.split();
    let mut stopping = exchange.server.state.stopping();
    // The close code the app hears, once known.
    let mut ended: Option<(u16, Option<String>)> = None;
    let mut close_deadline: Option<tokio::time::Instant> = None;
    let mut app_done = false;
    // The server has closed for a message over the size limit (see `drain`).
    let mut draining = false;
    let ping_timeout = settings.ws_ping_timeout;
    let mut pings = settings.ws_ping_interval.map(|every| {
        let mut pings = tokio::time::interval_at(tokio::time::Instant::now() + every, every);
        pings.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        pings
    });
    // When the oldest unanswered ping times out (any pong answers it, as RFC 6455 allows).
    let mut pong_due: Option<tokio::time::Instant> = None;
    // The peer stopped taking what is written: the socket is dropped without a close frame,
    // which would wait on it for ever.
    let mut stuck = false;
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
                    // tungstenite queues the pong in its write buffer, which has no bound: a peer
                    // that pings without reading would grow it for ever. So the pong goes out
                    // before anything more is read, and a peer that does not take it in time
                    // is dropped.
                    Some(Ok(Message::Ping(_))) => {
                        let wait = ping_timeout.unwrap_or(CLOSE_TIMEOUT);
                        match tokio::time::timeout(wait, sink.flush()).await {
                            Ok(Ok(())) => {}
                            Ok(Err(_)) => break,
                            Err(_) => {
                                stuck = true;
                                break;
                            }
                        }
                    }
                    Some(Ok(Message::Frame(_))) => {}
                    Some(Ok(Message::Pong(_))) => pong_due = None,
                    Some(Ok(Message::Close(frame))) => {
                        // tungstenite answers the close; the app hears the client's code.
                        let (code, reason) = frame
                            .map(|f| (u16::from(f.code), Some(f.reason.as_str().to_owned())))
                            .unwrap_or((1005, None));
                        ended.get_or_insert((code, reason));
                        // Flush tungstenite's reply to the close.
                        let _ = sink.flush().await;
                        break;
                    }
                    Some(Err(err)) => {
                        if let Some(code) = error_close_code(&err) {
                            let _ = sink.send(close_message(code, "")).await;
                            ended.get_or_insert((code, None));
                            // Too big: the client may still be sending the rest of it.
                            draining = code == 1009;
                        }
                        break;
                    }
                    None => break,
                }
            }
            out = outbound_rx.recv(), if !app_done => {
                match out {
                    Some(message) => {
                        // What else the app has queued by now goes out in the same write.
                        let mut next = Some(message);
                        let mut batched = 0;
                        let mut failed = false;
                        while let Some(message) = next.take() {
                            let closing = matches!(message, Message::Close(_));
                            if let Message::Close(Some(frame)) = &message {
                                ended = Some((u16::from(frame.code), Some(frame.reason.as_str().to_owned())));
                            }
                            let message = match deflater.as_mut() {
                                Some(deflater) => deflater.message(message),
                                None => message,
                            };
                            if sink.feed(message).await.is_err() {
                                failed = true;
                                break;
                            }
                            if closing {
                                app_done = true;
                                close_deadline = Some(tokio::time::Instant::now() + CLOSE_TIMEOUT);
                                break;
                            }
                            batched += 1;
                            if batched < WRITE_BATCH {
                                next = outbound_rx.try_recv().ok();
                            }
                        }
                        if failed || sink.flush().await.is_err() {
                            break;
                        }
                    }
                    None => {
                        // Every sender is gone without a close (finish_app sends one normally).
                        app_done = true;
                        if ended.is_none() {
                            let _ = sink.send(close_message(1000, "")).await;
                            ended = Some((1000, None));
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
                if let (None, Some(timeout)) = (pong_due, ping_timeout) {
                    pong_due = Some(tokio::time::Instant::now() + timeout);
                }
            }
            _ = pong_overdue, if close_deadline.is_none() => {
                // The peer is gone or stuck: 1011, as the websockets library (uvicorn) sends.
                ended.get_or_insert((1011, None));
                let closing = sink.send(close_message(1011, "keepalive ping timeout"));
                stuck = tokio::time::timeout(CLOSE_TIMEOUT, closing).await.is_err();
                break;
            }
            // The server is shutting down: 1012 (service restart), as uvicorn sends.
            _ = async { stopping.wait_for(Option::is_some).await.is_ok() }, if close_deadline.is_none() => {
                ended.get_or_insert((1012, None));
                let _ = sink.send(close_message(1012, "server shutting down")).await;
                close_deadline = Some(tokio::time::Instant::now() + CLOSE_TIMEOUT);
            }
        }
    }
    let (code, reason) = ended.unwrap_or((1006, None));
    exchange.mark_closed(code, reason);
    drop(inbound_tx); // receive() reports the end once the queued messages are read
    if !stuck {
        // Bounded: a peer that stops reading now would hold the socket for ever.
        let _ = tokio::time::timeout(CLOSE_TIMEOUT, sink.close()).await;
    }
    if draining {
        if let Ok(mut socket) = stream.reunite(sink) {
            // Past the inflating layer: what is left is only dropped.
            drain(socket.get_mut().inner_mut()).await;
        }
    }
}

/// Reads and drops what the client still sends after the server closed for a message over the
/// size limit, until it goes quiet: a socket closed with bytes unread is reset, and the reset
/// can make the client's side drop the close frame before the client reads it. Quiet is half a
/// second, several times a loaded machine's stall; the client, done sending, waits that long
/// for the close. Shutting the write side at once and reading to the end would need no quiet
/// rule, but a client still writing when it sees the end can fail its own close (websockets
/// on asyncio's transports).
async fn drain(io: &mut TokioIo<Upgraded>) {
    const QUIET: Duration = Duration::from_millis(500);
    let deadline = tokio::time::Instant::now() + CLOSE_TIMEOUT;
    let mut buffer = vec![0; 16 * 1024];
    while tokio::time::Instant::now() < deadline {
        let until = deadline.min(tokio::time::Instant::now() + QUIET);
        match tokio::time::timeout_at(until, io.read(&mut buffer)).await {
            Ok(Ok(read)) if read > 0 => {}
            _ => break,
        }
    }
}
