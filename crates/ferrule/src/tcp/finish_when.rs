//! `FinishWhen`: when a connection is asked to finish, and when an idle HTTP/1.1 connection
//! is set aside.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::Poll;
use std::time::Duration;

use tokio::sync::watch;

use super::listener::IoStream;
use super::recording_io::RecordingIo;
use super::woken_only::WokenOnly;
use crate::http::Connection;

/// How long an HTTP/1.1 connection stays quiet between requests before hyper's connection
/// (its 8 KiB buffers and state, about 20 KiB in all) is dropped, leaving the socket and 24
/// bytes to hold the client's next bytes: a new hyper connection starts when they come. Long
/// enough that a busy connection never pays for the restart, which costs a few microseconds.
pub(super) const SET_ASIDE_AFTER: Duration = Duration::from_secs(1);

/// When a connection is asked to finish (hyper's `graceful_shutdown`: requests in progress are
/// answered, then HTTP/1.1 closes and HTTP/2 says GOAWAY): when the server stops, or when an
/// HTTP/2 connection has had no stream in progress for the keep-alive timeout, as an HTTP/1.1
/// connection is closed between requests.
pub(super) struct FinishWhen {
    /// Held until the connection ends: the server's drain waits for every receiver to go.
    pub(super) stopping: watch::Receiver<bool>,
    pub(super) conn: Arc<Connection>,
    pub(super) idle_timeout: Duration,
}

/// How a connection's hyper side ended.
pub(super) enum Driven<T> {
    /// It ended (closed, failed or upgraded), with hyper's result.
    Ended(T),
    /// Idle between requests and asked to finish, hyper let go of the socket, still open.
    AtRest(tokio::time::Instant),
}

/// What woke `FinishWhen::drive`.
enum Woken<T> {
    Ended(T),
    Stopped,
    Idle,
    AtRest(tokio::time::Instant),
}

impl FinishWhen {
    /// Drives `connection` until it ends; with `rest_after` (HTTP/1.1: the requests counted
    /// when it started), also until it has served one and rested for `SET_ASIDE_AFTER`.
    pub(super) async fn drive<C: Future<Output = Result<(), E>> + ?Sized, E>(
        &mut self,
        mut connection: Pin<&mut C>,
        graceful_shutdown: impl Fn(Pin<&mut C>),
        rest_after: Option<u64>,
    ) -> Driven<C::Output> {
        let conn = &*self.conn;
        let idle = async {
            // Pending until the client's preface has said HTTP/2 (HTTP/1.1 has hyper's own
            // timeout between requests). No wake-up of its own is needed: the preface is read
            // while the connection is polled, in this task, just before this is polled again;
            // and an atomic load is all an HTTP/1.1 connection pays for it.
            std::future::poll_fn(|_| {
                if conn.heads.http2() {
                    Poll::Ready(())
                } else {
                    Poll::Pending
                }
            })
            .await;
            WokenOnly::new(conn.streams.idle_for(self.idle_timeout)).await;
        };
        let at_rest = async {
            let Some(requests_before) = rest_after else {
                return std::future::pending().await;
            };
            loop {
                let since = conn.streams.quiet_for(SET_ASIDE_AFTER).await;
                // hyper is idle only once it has answered a request, and has nothing to finish
                // only when no part of the next one is in and its writes are out.
                if conn.heads.requests() > requests_before && conn.heads.at_rest() {
                    return since;
                }
                tokio::time::sleep(SET_ASIDE_AFTER).await;
            }
        };
        // The side branches are polled only on their own wakes, not on hyper's (`WokenOnly`);
        // `idle`'s first wait needs no wake of its own (above), so only its second is wrapped.
        let stopping = WokenOnly::new(self.stopping.wait_for(|stop| *stop));
        let woken = tokio::select! {
            biased;
            output = connection.as_mut() => Woken::Ended(output),
            // An error is the server gone without draining: finish all the same.
            _ = stopping => Woken::Stopped,
            () = idle => Woken::Idle,
            since = WokenOnly::new(at_rest) => Woken::AtRest(since),
        };
        let stopped = match woken {
            Woken::Ended(output) => return Driven::Ended(output),
            Woken::Stopped => true,
            Woken::Idle => false,
            Woken::AtRest(since) => {
                // hyper, idle, closes at once when asked to finish, and its shutdown of the
                // socket leaves it open; busy after all, it closes after this exchange.
                conn.heads.set_aside(true);
                graceful_shutdown(connection.as_mut());
                let polled =
                    std::future::poll_fn(|cx| Poll::Ready(connection.as_mut().poll(cx))).await;
                return match polled {
                    Poll::Ready(Ok(())) => Driven::AtRest(since),
                    Poll::Ready(failed) => Driven::Ended(failed),
                    Poll::Pending => {
                        conn.heads.set_aside(false);
                        Driven::Ended(connection.await)
                    }
                };
            }
        };
        if stopped && !conn.heads.http2() {
            // HTTP/1.1 cannot tell a client that its next request will not be read, so one on
            // its way as an idle connection closes is reset: a moment to let it in (a new
            // connection's first request too), answered with `connection: close`. HTTP/2's
            // GOAWAY says which streams were left, for the client to send again. No wake-up is
            // needed for the count: it grows while the connection is polled, in this task.
            let before = conn.heads.requests();
            let next_request = std::future::poll_fn(|_| {
                if conn.heads.requests() > before {
                    Poll::Ready(())
                } else {
                    Poll::Pending
                }
            });
            tokio::select! {
                biased;
                output = connection.as_mut() => return Driven::Ended(output),
                () = next_request => {}
                () = tokio::time::sleep(NEXT_REQUEST_GRACE) => {}
            }
        }
        graceful_shutdown(connection.as_mut());
        if conn.heads.http2() {
            // hyper's HTTP/2 shutdown sends GOAWAY and a PING, and its last GOAWAY only once
            // the PING is answered: a client that reads only while it has a request out (a
            // pooled connection) never answers. Once no stream has been in progress for a
            // moment, no request can be lost by closing.
            tokio::select! {
                biased;
                output = connection.as_mut() => return Driven::Ended(output),
                () = conn.streams.idle_for(GOAWAY_GRACE) => return Driven::Ended(Ok(())),
            }
        }
        Driven::Ended(connection.await)
    }

    /// Waits, with hyper gone, for the next bytes of a connection set aside: `false` if the
    /// client closes, or sends nothing until `idle_until` (the keep-alive timeout), or within
    /// `NEXT_REQUEST_GRACE` once the server stops.
    pub(super) async fn next_request_arrives(
        &mut self,
        io: &mut RecordingIo<Box<dyn IoStream>>,
        idle_until: tokio::time::Instant,
    ) -> bool {
        tokio::select! {
            arrived = io.next_bytes_arrive() => return matches!(arrived, Ok(true)),
            () = tokio::time::sleep_until(idle_until) => return false,
            _ = self.stopping.wait_for(|stop| *stop) => {}
        }
        let arrived = tokio::time::timeout(NEXT_REQUEST_GRACE, io.next_bytes_arrive()).await;
        matches!(arrived, Ok(Ok(true)))
    }
}

/// How long an HTTP/2 connection told to finish waits for its client's answer with no stream
/// in progress: a stream the client opened before it read the GOAWAY arrives within it.
const GOAWAY_GRACE: Duration = Duration::from_secs(1);

/// How long an HTTP/1.1 connection may still deliver its next request (a new one its first)
/// once the server stops: uvicorn notices its stop at most 0.1 s late, and serves what arrives
/// meanwhile; a client busy on a keep-alive connection sends more often than that.
const NEXT_REQUEST_GRACE: Duration = Duration::from_millis(100);
