//! `ReadyQueue`: coroutines waiting to be driven on the loop thread, and the `tokio_driving` flag
//! that keeps the loop thread from driving while a tokio thread does.
//!
//! Only one thread may have a task entered at a time on 3.11-3.13 (invariant I1/I14). A tokio
//! thread sets `tokio_driving` (under the GIL) for the length of its drive; meanwhile resumes
//! that reach the loop thread are pushed here instead of driven inline, the drain does nothing,
//! and the tokio thread wakes the loop after clearing the flag if anything is queued.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Condvar, Mutex};

use pyo3::prelude::*;

use super::job::{Job, Resume};

/// Python work that must begin on the loop thread: a request's app call in loop-only mode.
pub type LoopStart = Box<dyn FnOnce(Python<'_>) + Send>;

#[derive(Default)]
pub struct ReadyQueue {
    items: Mutex<VecDeque<(Py<Job>, Resume)>>,
    starts: Mutex<Vec<LoopStart>>,
    tokio_driving: AtomicBool,
    /// Signalled when `tokio_driving` is cleared, for a loop thread waiting to leave `select`.
    /// The mutex counts the waiters: with none, ending a drive makes no `futex` call (the
    /// standard library's condvar makes one on every notify, waiters or not).
    drive_done: (Mutex<usize>, Condvar),
}

impl ReadyQueue {
    pub fn push(&self, job: Py<Job>, resume: Resume) {
        self.items.lock().unwrap().push_back((job, resume));
    }

    /// Everything queued now; later pushes wait for the next drain (they come with their own wake).
    pub fn take_all(&self) -> VecDeque<(Py<Job>, Resume)> {
        std::mem::take(&mut *self.items.lock().unwrap())
    }

    pub fn push_start(&self, start: LoopStart) {
        self.starts.lock().unwrap().push(start);
    }

    /// Every start queued now, oldest first.
    pub fn take_starts(&self) -> Vec<LoopStart> {
        std::mem::take(&mut *self.starts.lock().unwrap())
    }

    pub fn is_empty(&self) -> bool {
        self.items.lock().unwrap().is_empty() && self.starts.lock().unwrap().is_empty()
    }

    pub fn tokio_driving(&self) -> bool {
        self.tokio_driving.load(Ordering::Acquire)
    }

    /// Claims the single tokio drive slot. Call with the GIL held: the GIL makes the check and
    /// the store one step as seen by every other claimant and by the loop thread's checks.
    pub fn begin_tokio_drive(&self) -> bool {
        if self.tokio_driving.load(Ordering::Acquire) {
            return false;
        }
        self.tokio_driving.store(true, Ordering::Release);
        true
    }

    pub fn end_tokio_drive(&self) {
        self.tokio_driving.store(false, Ordering::Release);
        // A waiter counts itself and checks the flag under the lock, so taking the lock here
        // orders this store before its check: it either sees the flag cleared or is counted.
        let waiters = *self.drive_done.0.lock().unwrap();
        if waiters > 0 {
            self.drive_done.1.notify_all();
        }
    }

    /// Blocks until no tokio drive is in progress. Call without the GIL: the drive needs it.
    pub fn wait_tokio_drive_done(&self) {
        let mut waiters = self.drive_done.0.lock().unwrap();
        *waiters += 1;
        while self.tokio_driving.load(Ordering::Acquire) {
            waiters = self.drive_done.1.wait(waiters).unwrap();
        }
        *waiters -= 1;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use std::time::Duration;

    #[test]
    fn only_one_tokio_drive_at_a_time() {
        let queue = ReadyQueue::default();
        assert!(queue.begin_tokio_drive());
        assert!(queue.tokio_driving());
        assert!(
            !queue.begin_tokio_drive(),
            "a second claimant must hand off"
        );
        queue.end_tokio_drive();
        assert!(!queue.tokio_driving());
        assert!(queue.begin_tokio_drive());
    }

    #[test]
    fn waiter_wakes_when_the_drive_ends() {
        let queue = Arc::new(ReadyQueue::default());
        assert!(queue.begin_tokio_drive());
        let waiter = {
            let queue = queue.clone();
            std::thread::spawn(move || queue.wait_tokio_drive_done())
        };
        std::thread::sleep(Duration::from_millis(20));
        assert!(
            !waiter.is_finished(),
            "must wait while the drive is in progress"
        );
        queue.end_tokio_drive();
        waiter.join().unwrap();
    }

    #[test]
    fn waiting_with_no_drive_returns_at_once() {
        ReadyQueue::default().wait_tokio_drive_done();
    }
}
