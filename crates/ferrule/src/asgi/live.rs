//! `LiveState`: what changes while the server runs: requests in flight, the stop signal,
//! WebSocket sessions.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
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
    /// `--limit-max-requests`: requests still to accept before the server stops itself, and
    /// the graceful timeout it stops with.
    requests_left: Option<(AtomicU64, Option<Duration>)>,
    /// Becomes `Some(timeout)` when shutdown starts (WebSockets then close with 1012).
    stop: watch::Sender<Stop>,
    /// WebSocket sessions whose app has not returned. Upgraded connections leave hyper's
    /// graceful shutdown, so shutdown waits for this to reach 0 as well.
    pub ws_sessions: watch::Sender<usize>,
}

impl LiveState {
    pub fn new(settings: &Settings) -> Self {
        Self {
            in_flight: AtomicUsize::new(0),
            requests_left: settings
                .max_requests
                .map(|limit| (AtomicU64::new(limit), settings.timeout_graceful_shutdown)),
            stop: watch::Sender::new(None),
            ws_sessions: watch::Sender::new(0),
        }
    }

    /// Counts one request against `--limit-max-requests`; the one that reaches it starts a
    /// graceful shutdown (this request and those in flight are still answered), and is told
    /// so (true).
    pub fn count_request(&self) -> bool {
        if let Some((left, graceful)) = &self.requests_left {
            let before =
                left.fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| n.checked_sub(1));
            if before == Ok(1) {
                return self.stop.send_if_modified(|stop| {
                    let starting = stop.is_none();
                    if starting {
                        *stop = Some(*graceful);
                    }
                    starting
                });
            }
        }
        false
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
        self.stop.send_replace(Some(timeout));
    }

    /// Told when the server is asked to stop.
    pub fn stopping(&self) -> watch::Receiver<Stop> {
        self.stop.subscribe()
    }
}
