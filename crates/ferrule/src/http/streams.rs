//! `OpenStreams`: the HTTP/2 streams in progress on one connection, for its idle timeout.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;

/// The HTTP/2 streams in progress on one connection: a request from its head until its
/// response's last byte is handed to hyper. hyper's HTTP/2 server has no idle timeout, and a
/// client that answers its PINGs would otherwise hold the connection for ever.
pub struct OpenStreams(watch::Sender<usize>);

impl Default for OpenStreams {
    fn default() -> Self {
        Self(watch::Sender::new(0))
    }
}

impl OpenStreams {
    /// Counts a stream as open until the returned guard is dropped.
    pub fn open(self: &Arc<Self>) -> OpenStream {
        self.0.send_modify(|open| *open += 1);
        OpenStream(self.clone())
    }

    /// Returns once no stream has been open for `timeout`.
    pub async fn idle_for(&self, timeout: Duration) {
        let mut open = self.0.subscribe();
        loop {
            // The sender lives in `self`, borrowed here: neither wait can fail.
            let _ = open.wait_for(|open| *open == 0).await;
            if tokio::time::timeout(timeout, open.changed()).await.is_err() {
                return;
            }
        }
    }
}

/// One stream in progress (see [`OpenStreams`]).
pub struct OpenStream(Arc<OpenStreams>);

impl Drop for OpenStream {
    fn drop(&mut self) {
        self.0 .0.send_modify(|open| *open -= 1);
    }
}
