//! Waking the loop thread without the GIL: an eventfd registered once with `loop.add_reader`.
//!
//! Any thread can write to it with no GIL, on asyncio and uvloop alike; `pending` coalesces
//! wakes so a burst of handoffs costs one write. The reader callback, `DrainOnLoop`, drives
//! whatever the `ReadyQueue` holds.

use std::os::fd::{AsRawFd, OwnedFd};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use pyo3::prelude::*;

use super::counters::bump;
use super::driver::{drive, Place};
use super::{ffi, runtime, Shared};

pub struct LoopWaker {
    fd: OwnedFd,
    pending: AtomicBool,
}

impl LoopWaker {
    pub fn new() -> std::io::Result<Self> {
        Ok(Self {
            fd: ffi::new_eventfd()?,
            pending: AtomicBool::new(false),
        })
    }

    pub fn raw_fd(&self) -> i32 {
        self.fd.as_raw_fd()
    }

    /// Makes the loop run `DrainOnLoop` soon. Returns false if a wake was already pending.
    pub fn wake(&self) -> bool {
        if self.pending.swap(true, Ordering::AcqRel) {
            return false;
        }
        ffi::eventfd_signal(&self.fd);
        true
    }

    /// Called by the drain before it looks at the queue, so a push after this point wakes again.
    /// The eventfd is emptied first and `pending` re-armed second: the other order lets a wake
    /// land in between, write the eventfd and have that write consumed, leaving `pending` set
    /// with nothing readable, so every later wake is coalesced away and the queue stalls.
    fn clear(&self) {
        ffi::eventfd_clear(&self.fd);
        self.pending.store(false, Ordering::Release);
    }
}

/// The eventfd's reader callback on the loop thread: drives every queued coroutine.
#[pyclass(frozen, module = "ferrule._ferrule")]
pub struct DrainOnLoop {
    pub(crate) shared: Arc<Shared>,
}

#[pymethods]
impl DrainOnLoop {
    fn __call__(&self, py: Python<'_>) {
        let shared = &self.shared;
        runtime::set_current(&shared.handle);
        shared.waker.clear();
        if shared.queue.tokio_driving() {
            // The tokio thread wakes the loop again after its drive if the queue is not empty.
            return;
        }
        // Resumes of coroutines already running go before new requests.
        for (job, resume) in shared.queue.take_all() {
            bump(&shared.counters.gil_acquisitions);
            drive(py, job.bind(py), resume, Place::Loop);
        }
        for start in shared.queue.take_starts() {
            bump(&shared.counters.gil_acquisitions);
            start(py);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn readable(fd: i32) -> bool {
        ffi::is_readable(fd)
    }

    /// A producer pushes and wakes while a consumer waits for the eventfd, clears and takes: no
    /// push may ever be left with nothing readable. Seen failing (the consumer timing out with
    /// items queued) with `clear()` re-arming `pending` before emptying the eventfd.
    #[test]
    fn no_wake_is_lost_when_wakes_race_the_drain() {
        use std::sync::atomic::AtomicUsize;
        use std::sync::Arc;
        use std::time::{Duration, Instant};

        const PUSHES: usize = 200_000;
        let waker = Arc::new(LoopWaker::new().unwrap());
        let pushed = Arc::new(AtomicUsize::new(0));
        let producer = {
            let (waker, pushed) = (waker.clone(), pushed.clone());
            std::thread::spawn(move || {
                for _ in 0..PUSHES {
                    pushed.fetch_add(1, Ordering::AcqRel);
                    waker.wake();
                }
            })
        };
        let mut taken = 0;
        while taken < PUSHES {
            let deadline = Instant::now() + Duration::from_secs(2);
            while !readable(waker.raw_fd()) {
                assert!(
                    Instant::now() < deadline,
                    "lost wake-up: {} pushed, {taken} taken, nothing readable",
                    pushed.load(Ordering::Acquire)
                );
                std::hint::spin_loop();
            }
            waker.clear();
            taken = pushed.load(Ordering::Acquire);
        }
        producer.join().unwrap();
    }

    #[test]
    fn wakes_coalesce_until_cleared() {
        let waker = LoopWaker::new().unwrap();
        assert!(!readable(waker.raw_fd()));
        assert!(waker.wake(), "first wake writes");
        assert!(!waker.wake(), "second wake is coalesced");
        assert!(readable(waker.raw_fd()));
        waker.clear();
        assert!(!readable(waker.raw_fd()));
        assert!(waker.wake(), "after a clear the next wake writes again");
    }
}
