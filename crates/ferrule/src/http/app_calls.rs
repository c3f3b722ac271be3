//! `AppCalls`: the app calls running for one connection, at most as many as it may have
//! streams open.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use tokio::sync::Notify;

/// The app calls running for one connection. A stream the client makes the server reset ends
/// for HTTP/2 while its app call goes on; without a count of its own, one connection could
/// run any number of app calls at once (1,001 against an announced limit of 200 were seen).
pub(crate) struct AppCalls {
    running: AtomicUsize,
    limit: usize,
    /// Told each time an app call ends, for a request waiting for one (`start`).
    ended: Notify,
}

/// One app call running, counted in its connection's [`AppCalls`] until dropped.
pub struct AppCall(Arc<AppCalls>);

impl AppCalls {
    pub(crate) fn new(limit: usize) -> Self {
        Self {
            running: AtomicUsize::new(0),
            limit,
            ended: Notify::new(),
        }
    }

    /// One more app call, if fewer than the limit run.
    pub(crate) fn try_start(self: &Arc<Self>) -> Option<AppCall> {
        self.running
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |running| {
                (running < self.limit).then_some(running + 1)
            })
            .ok()
            .map(|_| AppCall(self.clone()))
    }

    /// One more app call, once fewer than the limit run.
    pub(crate) async fn start(self: &Arc<Self>) -> AppCall {
        loop {
            // Registered before the count is read: an end in between still wakes it.
            let ended = self.ended.notified();
            tokio::pin!(ended);
            ended.as_mut().enable();
            if let Some(call) = self.try_start() {
                return call;
            }
            ended.await;
        }
    }
}

impl Drop for AppCall {
    fn drop(&mut self) {
        self.0.running.fetch_sub(1, Ordering::AcqRel);
        self.0.ended.notify_one();
    }
}
