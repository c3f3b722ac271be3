//! `OpenStreams`: the requests (HTTP/2 streams) in progress on one connection, for its idle
//! timeout and for putting an idle HTTP/1.1 connection aside.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::Notify;
use tokio::time::Instant;

/// The requests in progress on one connection: each from its head until its response's last
/// byte is handed to hyper. hyper's HTTP/2 server has no idle timeout, and a client that
/// answers its PINGs would otherwise hold the connection for ever; an HTTP/1.1 connection
/// quiet for long enough gives its buffers back (`finish_when`).
pub struct OpenStreams {
    open: AtomicUsize,
    /// Told each time a request ends or starts: `idle_for` waits on it.
    changed: Notify,
    created: Instant,
    /// When the last request ended, in nanoseconds after `created`.
    last_closed: AtomicU64,
}

impl Default for OpenStreams {
    fn default() -> Self {
        Self {
            open: AtomicUsize::new(0),
            changed: Notify::new(),
            created: Instant::now(),
            last_closed: AtomicU64::new(0),
        }
    }
}

impl OpenStreams {
    /// Counts a request as in progress until the returned guard is dropped.
    pub fn open(self: &Arc<Self>) -> OpenStream {
        self.open.fetch_add(1, Ordering::AcqRel);
        self.changed.notify_waiters();
        OpenStream(self.clone())
    }

    /// Returns once no stream has been open for `timeout`.
    pub async fn idle_for(&self, timeout: Duration) {
        loop {
            // Registered before the count is read: a change in between still wakes it.
            let changed = self.changed.notified();
            tokio::pin!(changed);
            changed.as_mut().enable();
            if self.open.load(Ordering::Acquire) > 0 {
                changed.await;
            } else if tokio::time::timeout(timeout, changed).await.is_err() {
                return;
            }
        }
    }

    /// Returns once no request has been in progress for `quiet`, and says since when. Unlike
    /// `idle_for` it looks on a timer: requests cost the connection's task no wake-up.
    pub async fn quiet_for(&self, quiet: Duration) -> Instant {
        loop {
            let now = Instant::now();
            let due = match self.quiet_since() {
                Some(since) if since + quiet <= now => return since,
                Some(since) => since + quiet,
                None => now + quiet,
            };
            tokio::time::sleep_until(due).await;
        }
    }

    /// Since when no request has been in progress, if none is.
    fn quiet_since(&self) -> Option<Instant> {
        if self.open.load(Ordering::Acquire) > 0 {
            return None;
        }
        let after = Duration::from_nanos(self.last_closed.load(Ordering::Acquire));
        Some(self.created + after)
    }
}

/// One request in progress (see [`OpenStreams`]).
pub struct OpenStream(Arc<OpenStreams>);

impl Drop for OpenStream {
    fn drop(&mut self) {
        let streams = &self.0;
        let after = streams.created.elapsed().as_nanos();
        let after = u64::try_from(after).unwrap_or(u64::MAX);
        streams.last_closed.store(after, Ordering::Release);
        streams.open.fetch_sub(1, Ordering::AcqRel);
        streams.changed.notify_waiters();
    }
}
