//! `LiveState`: what changes while the server runs: requests in flight, the stop signal,
//! WebSocket sessions.

use std::future::Future;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::time::Duration;

use tokio::sync::watch;

use super::settings::Settings;

/// A request to stop: `Some(timeout)` once shutdown starts, the graceful timeout it was given
/// (`None`: wait for ever).
pub type Stop = Option<Option<Duration>>;

/// What every connection and request of one server updates as it runs.
pub struct LiveState {
    /// Requests (and WebSocket sessions) whose app has not returned.
    in_flight: AtomicUsize,
    /// `--limit-max-requests`: requests still to accept before the limit is reached.
    requests_left: Option<RequestLimit>,
    /// Becomes `Some(timeout)` when shutdown starts (WebSockets then close with 1012).
    stop: watch::Sender<Stop>,
    /// Whether shutdown has started, read by every request (`is_stopping`).
    stopping: AtomicBool,
    /// Whether the caller's own descriptors of the listening sockets are closed: while one is
    /// open the kernel still queues connections, which would be reset when it closes.
    listeners_released: watch::Sender<bool>,
    /// WebSocket sessions whose app has not returned. Upgraded connections leave hyper's
    /// graceful shutdown, so shutdown waits for this to reach 0 as well.
    pub ws_sessions: watch::Sender<usize>,
}

impl LiveState {
    pub fn new(settings: &Settings) -> Self {
        Self {
            in_flight: AtomicUsize::new(0),
            requests_left: settings.max_requests.map(|limit| RequestLimit {
                left: AtomicU64::new(limit),
                reached: AtomicBool::new(false),
                stops: settings.max_requests_stops,
                graceful: settings.timeout_graceful_shutdown,
            }),
            stop: watch::Sender::new(None),
            stopping: AtomicBool::new(false),
            listeners_released: watch::Sender::new(false),
            ws_sessions: watch::Sender::new(0),
        }
    }

    /// Counts one request against `--limit-max-requests`; the one that reaches it starts a
    /// graceful shutdown (this request and those in flight are still answered), unless the
    /// server's supervisor replaces it instead (`max_requests_reached` tells it to ask). True
    /// for the request that starts that shutdown.
    pub fn count_request(&self) -> bool {
        if let Some(limit) = &self.requests_left {
            let before = limit
                .left
                .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| n.checked_sub(1));
            if before == Ok(1) {
                limit.reached.store(true, Ordering::Release);
                if limit.stops {
                    return self.stop.send_if_modified(|stop| {
                        let starting = stop.is_none();
                        if starting {
                            *stop = Some(limit.graceful);
                            self.stopping.store(true, Ordering::Release);
                        }
                        starting
                    });
                }
            }
        }
        false
    }

    /// Whether `--limit-max-requests` requests have been counted.
    pub fn max_requests_reached(&self) -> bool {
        self.requests_left
            .as_ref()
            .is_some_and(|limit| limit.reached.load(Ordering::Acquire))
    }

    /// Counts a request in flight, unless `limit` are already (`--limit-concurrency`): then it
    /// is not counted, and the answer is false.
    pub fn start_request(&self, limit: Option<usize>) -> bool {
        let previous = self.in_flight.fetch_add(1, Ordering::AcqRel);
        if limit.is_some_and(|limit| previous >= limit) {
            self.request_finished();
            return false;
        }
        true
    }

    pub fn request_finished(&self) {
        self.in_flight.fetch_sub(1, Ordering::AcqRel);
    }

    pub fn in_flight(&self) -> usize {
        self.in_flight.load(Ordering::Acquire)
    }

    /// Stops the server: in-flight requests get `timeout` (for ever if `None`).
    pub fn stop(&self, timeout: Option<Duration>) {
        self.stopping.store(true, Ordering::Release);
        self.stop.send_replace(Some(timeout));
    }

    /// Whether shutdown has started.
    pub fn is_stopping(&self) -> bool {
        self.stopping.load(Ordering::Acquire)
    }

    /// Told when the server is asked to stop.
    pub fn stopping(&self) -> watch::Receiver<Stop> {
        self.stop.subscribe()
    }

    /// The caller has closed its own descriptors of the listening sockets.
    pub fn release_listeners(&self) {
        self.listeners_released.send_replace(true);
    }

    /// Told once the caller has closed its own descriptors of the listening sockets.
    pub fn listeners_released(&self) -> watch::Receiver<bool> {
        self.listeners_released.subscribe()
    }
}

/// `--limit-max-requests` of one server.
struct RequestLimit {
    /// Requests still to accept before the limit is reached.
    left: AtomicU64,
    /// Whether the limit has been reached.
    reached: AtomicBool,
    /// Whether reaching it stops the server (else a supervisor replaces it).
    stops: bool,
    /// The graceful timeout the server stops with.
    graceful: Option<Duration>,
}

/// Runs `drain` until it ends (true) or the graceful timeout passes (false). A later, shorter
/// timeout (a second Ctrl-C: `shutdown(0)`) cuts the wait short; a longer one never extends it.
pub async fn drain_within(
    drain: impl Future<Output = ()>,
    stop: &mut watch::Receiver<Stop>,
) -> bool {
    let started = tokio::time::Instant::now();
    let deadline_of = |stop: &Stop| stop.flatten().map(|timeout| started + timeout);
    let mut deadline = deadline_of(&stop.borrow_and_update());
    let mut watching = true;
    tokio::pin!(drain);
    loop {
        let expired = async {
            match deadline {
                Some(deadline) => tokio::time::sleep_until(deadline).await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            () = &mut drain => return true,
            () = expired => return false,
            changed = stop.changed(), if watching => {
                if changed.is_err() {
                    watching = false; // the server is gone: no shorter timeout can come
                    continue;
                }
                if let Some(new) = deadline_of(&stop.borrow_and_update()) {
                    deadline = Some(deadline.map_or(new, |old| old.min(new)));
                }
            }
        }
    }
}
