//! Waking the loop thread without the GIL: a descriptor (`ffi::WakeFd`: an eventfd on Linux, a
//! pipe elsewhere) registered once with `loop.add_reader`.
//!
//! Any thread can write to it with no GIL, on asyncio and uvloop alike; `pending` coalesces
//! wakes so a burst of handoffs costs one write. The reader callback, `DrainOnLoop` (`drain`),
//! drives whatever the `ReadyQueue` holds.
//!
//! A tokio worker *holds* the wakes it asks for (`wake_soon`) and sends them when it runs out
//! of work and parks, or once `HOLD_AT_MOST` has passed or `HOLD_AT_MOST_WAKES` have piled up.
//! Woken at once, the loop thread preempted the worker for every request on a shared core
//! (0.55 to 0.6 context switches per request on uvloop's hello, 0.9 on asyncio's task
//! scenario); held, it takes the work of one pass over the ready connections in one go.

use std::cell::RefCell;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::counters::{bump, Counters};
use super::ffi;

/// The longest a worker holds a wake while it keeps busy with other connections: about one
/// pass over 50 busy connections (uvloop's hello: 0.07 context switches a request; 0.18 with
/// 100 µs, which cut each pass in three), and little beside a network's latency.
const HOLD_AT_MOST: Duration = Duration::from_micros(300);
/// Past this many held wakes, the worker sends them at once.
const HOLD_AT_MOST_WAKES: usize = 64;
/// How many reads and writes pass between two looks at the clock while wakes are held: a
/// pass is a few microseconds of a busy worker, so `HOLD_AT_MOST` is overrun by little.
const CLOCK_EVERY: u32 = 4;

pub struct LoopWaker {
    fd: ffi::WakeFd,
    pending: AtomicBool,
    counters: Arc<Counters>,
}

impl LoopWaker {
    pub fn new(counters: Arc<Counters>) -> std::io::Result<Self> {
        Ok(Self {
            fd: ffi::WakeFd::new()?,
            pending: AtomicBool::new(false),
            counters,
        })
    }

    pub fn raw_fd(&self) -> i32 {
        self.fd.raw_fd()
    }

    /// Makes the loop run `DrainOnLoop` soon. Returns false if a wake was already pending.
    pub fn wake(&self) -> bool {
        if self.pending.swap(true, Ordering::AcqRel) {
            return false;
        }
        self.fd.signal();
        bump(&self.counters.wakes);
        true
    }

    /// As `wake`, but on a worker of this waker's runtime that has parked before, held until
    /// it parks again (see the module notes).
    pub fn wake_soon(self: &Arc<Self>) {
        let held = HELD.with(|held| {
            let mut held = held.borrow_mut();
            if !held.parks || !held.waker.as_ref().is_some_and(|w| Arc::ptr_eq(w, self)) {
                return false;
            }
            held.count += 1;
            if held.count == 1 {
                held.since = Some(Instant::now());
                held.passes = 0;
            }
            true
        });
        if !held {
            self.wake();
        } else if HELD.with(|held| held.borrow().count >= HOLD_AT_MOST_WAKES) {
            send_held_wakes();
        }
    }

    /// Called by the drain before it looks at the queue, so a push after this point wakes again.
    /// The descriptor is emptied first and `pending` re-armed second: the other order lets a wake
    /// land in between, write the descriptor and have that write consumed, leaving `pending` set
    /// with nothing readable, so every later wake is coalesced away and the queue stalls.
    pub(super) fn clear(&self) {
        self.fd.clear();
        self.pending.store(false, Ordering::Release);
    }
}

/// What one tokio worker holds for its loop.
#[derive(Default)]
struct Held {
    /// The waker of the bridge whose runtime this thread works for.
    waker: Option<Arc<LoopWaker>>,
    /// Whether this thread has parked: only a worker that parks may hold wakes (the
    /// runtime's blocking-pool threads never do).
    parks: bool,
    count: usize,
    since: Option<Instant>,
    /// Reads and writes since the wakes began to be held (see `send_held_wakes_if_due`).
    passes: u32,
}

thread_local! {
    static HELD: RefCell<Held> = RefCell::default();
}

/// On each of a runtime's threads as it starts: the waker it holds wakes for.
pub fn adopt_waker(waker: Arc<LoopWaker>) {
    HELD.with(|held| held.borrow_mut().waker = Some(waker));
}

/// A worker about to park (or stop): it sends what it holds, and may hold from now on.
pub fn on_worker_park() {
    HELD.with(|held| held.borrow_mut().parks = true);
    send_held_wakes();
}

/// Sends this thread's held wakes if it has held them for `HOLD_AT_MOST`: called where a busy
/// worker passes often (every read and write of a connection), so no request waits on a
/// worker that never runs out of work. One thread-local read when nothing is held; the clock
/// is read at every `CLOCK_EVERY`th pass only, since wakes are held for most passes and a read
/// of it costs more than the rest of the check.
pub fn send_held_wakes_if_due() {
    let due = HELD.with(|held| {
        let mut held = held.borrow_mut();
        if held.count == 0 {
            return false;
        }
        held.passes = held.passes.wrapping_add(1);
        held.passes % CLOCK_EVERY == 0
            && held
                .since
                .is_some_and(|since| since.elapsed() >= HOLD_AT_MOST)
    });
    if due {
        send_held_wakes();
    }
}

fn send_held_wakes() {
    let waker = HELD.with(|held| {
        let mut held = held.borrow_mut();
        if held.count == 0 {
            return None;
        }
        held.count = 0;
        held.since = None;
        held.waker.clone()
    });
    if let Some(waker) = waker {
        waker.wake();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn readable(fd: i32) -> bool {
        ffi::is_readable(fd)
    }

    /// A producer pushes and wakes while a consumer waits for the descriptor, clears and takes: no
    /// push may ever be left with nothing readable. Seen failing (the consumer timing out with
    /// items queued) with `clear()` re-arming `pending` before emptying the descriptor.
    #[test]
    fn no_wake_is_lost_when_wakes_race_the_drain() {
        use std::sync::atomic::AtomicUsize;
        use std::sync::Arc;
        use std::time::{Duration, Instant};

        const PUSHES: usize = 200_000;
        let waker = Arc::new(LoopWaker::new(Arc::default()).unwrap());
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
        let waker = LoopWaker::new(Arc::default()).unwrap();
        assert!(!readable(waker.raw_fd()));
        assert!(waker.wake(), "first wake writes");
        assert!(!waker.wake(), "second wake is coalesced");
        assert!(readable(waker.raw_fd()));
        waker.clear();
        assert!(!readable(waker.raw_fd()));
        assert!(waker.wake(), "after a clear the next wake writes again");
    }
}
