//! `InterimQueue`: HTTP/1.1 informational responses (103 Early Hints) on their way to a
//! connection's socket, beside hyper, whose server has no way to send them.
//!
//! The socket's wrapper (`tcp::RecordingIo`) writes the queued bytes when hyper flushes: hyper
//! flushes the socket only once its own buffer is empty, so every byte of the responses before
//! is out by then. The request that queued them holds its final head back until they are
//! written (`written`), so the head cannot get in front of them.

use std::future::poll_fn;
use std::io;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;
use std::task::{Context, Poll, Waker};

use futures_util::task::AtomicWaker;
use http::HeaderValue;
use tokio::io::AsyncWrite;

/// One connection's informational responses not yet written, and who waits on them.
#[derive(Default)]
pub struct InterimQueue {
    /// Whether `bytes` holds anything: the socket's flush looks here first, without the lock.
    queued: AtomicBool,
    state: Mutex<Queued>,
    /// The connection's task, as it last flushed: woken when bytes are queued.
    flusher: AtomicWaker,
}

#[derive(Default)]
struct Queued {
    bytes: Vec<u8>,
    /// The request waiting for them to be written before its final head (`written`).
    waiter: Option<Waker>,
}

impl InterimQueue {
    /// Queues a `103 Early Hints` with a `link` field per link, and wakes the connection.
    pub(crate) fn push_early_hints(&self, links: &[HeaderValue]) {
        let mut state = self.state.lock().unwrap();
        state
            .bytes
            .extend_from_slice(b"HTTP/1.1 103 Early Hints\r\n");
        for link in links {
            state.bytes.extend_from_slice(b"link: ");
            state.bytes.extend_from_slice(link.as_bytes());
            state.bytes.extend_from_slice(b"\r\n");
        }
        state.bytes.extend_from_slice(b"\r\n");
        self.queued.store(true, Ordering::Release);
        drop(state);
        self.flusher.wake();
    }

    /// For the socket's flush: writes what is queued to `io` before anything else is flushed.
    /// Ready once nothing is queued (at once, and without a lock, when nothing was).
    pub(crate) fn poll_write_to<W: AsyncWrite + Unpin>(
        &self,
        cx: &mut Context<'_>,
        io: &mut W,
    ) -> Poll<io::Result<()>> {
        self.flusher.register(cx.waker());
        if !self.queued.load(Ordering::Acquire) {
            return Poll::Ready(Ok(()));
        }
        let mut state = self.state.lock().unwrap();
        while !state.bytes.is_empty() {
            match Pin::new(&mut *io).poll_write(cx, &state.bytes) {
                Poll::Ready(Ok(0)) => return Poll::Ready(Err(io::ErrorKind::WriteZero.into())),
                Poll::Ready(Ok(written)) => drop(state.bytes.drain(..written)),
                Poll::Ready(Err(err)) => return Poll::Ready(Err(err)),
                Poll::Pending => return Poll::Pending,
            }
        }
        self.queued.store(false, Ordering::Release);
        if let Some(waiter) = state.waiter.take() {
            waiter.wake();
        }
        Poll::Ready(Ok(()))
    }

    /// Waits until what is queued now has been written (or the connection is gone, when the
    /// caller's future is dropped with it).
    pub(crate) async fn written(&self) {
        poll_fn(|cx| {
            let mut state = self.state.lock().unwrap();
            if state.bytes.is_empty() {
                return Poll::Ready(());
            }
            state.waiter = Some(cx.waker().clone());
            Poll::Pending
        })
        .await;
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::task::Wake;

    use super::*;

    struct Counted(std::sync::atomic::AtomicUsize);

    impl Wake for Counted {
        fn wake(self: Arc<Self>) {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
    }

    #[test]
    fn queued_hints_are_written_in_order_and_wake_the_connection() {
        let queue = InterimQueue::default();
        let wakes = Arc::new(Counted(Default::default()));
        let waker = Waker::from(wakes.clone());
        let mut cx = Context::from_waker(&waker);
        let mut out = Vec::new();
        // Nothing queued: ready at once, and the flusher is now known.
        assert!(matches!(
            queue.poll_write_to(&mut cx, &mut out),
            Poll::Ready(Ok(()))
        ));
        queue.push_early_hints(&[HeaderValue::from_static("</a.css>; rel=preload")]);
        queue.push_early_hints(&[
            HeaderValue::from_static("</b.js>; rel=preload"),
            HeaderValue::from_static("</c.png>; rel=preload"),
        ]);
        // Woken once: the second finds the wake taken, the connection not yet flushed again.
        assert_eq!(wakes.0.load(Ordering::SeqCst), 1);
        assert!(matches!(
            queue.poll_write_to(&mut cx, &mut out),
            Poll::Ready(Ok(()))
        ));
        assert_eq!(
            out,
            b"HTTP/1.1 103 Early Hints\r\nlink: </a.css>; rel=preload\r\n\r\n\
              HTTP/1.1 103 Early Hints\r\nlink: </b.js>; rel=preload\r\n\
              link: </c.png>; rel=preload\r\n\r\n"
        );
    }
}
