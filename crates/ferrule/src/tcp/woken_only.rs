//! `WokenOnly`: a future polled only when its own waker has fired.
//!
//! A connection's task waits on hyper and, beside it, on the server's stop, its timers and the
//! idle check. `tokio::select!` polls every branch each time the task wakes, and hyper wakes it
//! for every read and every response: the side branches then cost more than a thousand
//! instructions a request (re-registering a watch receiver, re-arming a timer) and are almost
//! never ready. Wrapped, a branch sleeps through the wakes that are not its own.

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll, Wake, Waker};

use futures_util::task::AtomicWaker;

/// Wraps `future` (boxed once, here) so that it is polled at first and then only after it has
/// woken its waker; every other poll answers `Pending` at the cost of a waker comparison.
pub(super) struct WokenOnly<F> {
    future: Pin<Box<F>>,
    signal: Arc<Signal>,
    /// `signal` as a waker, made once.
    waker: Waker,
}

/// Whether the wrapped future's waker has fired since its last poll, and the task to wake.
struct Signal {
    woken: AtomicBool,
    task: AtomicWaker,
}

impl Wake for Signal {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        self.woken.store(true, Ordering::Release);
        self.task.wake();
    }
}

impl<F: Future> WokenOnly<F> {
    pub(super) fn new(future: F) -> Self {
        let signal = Arc::new(Signal {
            woken: AtomicBool::new(true),
            task: AtomicWaker::new(),
        });
        Self {
            future: Box::pin(future),
            waker: Waker::from(signal.clone()),
            signal,
        }
    }
}

impl<F: Future> Future for WokenOnly<F> {
    type Output = F::Output;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<F::Output> {
        let this = self.get_mut();
        // Registered before the flag is read: a wake in between finds this task.
        this.signal.task.register(cx.waker());
        if !this.signal.woken.swap(false, Ordering::AcqRel) {
            return Poll::Pending;
        }
        this.future
            .as_mut()
            .poll(&mut Context::from_waker(&this.waker))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicUsize;

    /// Seen failing with the flag never cleared (every poll reached the inner future) and with
    /// the wake not setting it (the sent value was never seen).
    #[test]
    fn polls_the_inner_future_only_after_its_own_wake() {
        let polls = Arc::new(AtomicUsize::new(0));
        let counted = polls.clone();
        let (tx, mut rx) = tokio::sync::oneshot::channel::<u8>();
        let inner = std::future::poll_fn(move |cx| {
            counted.fetch_add(1, Ordering::Relaxed);
            Pin::new(&mut rx).poll(cx)
        });
        let mut wrapped = WokenOnly::new(inner);
        let waker = futures_util::task::noop_waker();
        let mut cx = Context::from_waker(&waker);
        for _ in 0..5 {
            assert!(Pin::new(&mut wrapped).poll(&mut cx).is_pending());
        }
        assert_eq!(
            polls.load(Ordering::Relaxed),
            1,
            "polled on wakes not its own"
        );
        tx.send(7).unwrap();
        assert_eq!(Pin::new(&mut wrapped).poll(&mut cx), Poll::Ready(Ok(7)));
        assert_eq!(polls.load(Ordering::Relaxed), 2);
    }
}
