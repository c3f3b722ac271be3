//! `Outbox`: what the loop thread hands to the tokio threads (a response head, mostly), sent
//! once per pass of the loop rather than one by one.
//!
//! Handing a tokio task something wakes the tokio worker when it is parked, and the kernel
//! lets the woken worker preempt the loop thread at once when both share a core, SCHED_BATCH
//! or not: for an app that waits on a database, the loop thread was preempted at the wake's
//! `write` for about one request in two, the worker wrote that one response, parked, and the
//! loop thread went on to the next. Held until the loop's next pass (`call_soon`), the pass's
//! handoffs cost the worker one wake and the loop thread one preemption at most. Inside the
//! drain of new requests, itself a batch, they go when the drain ends, with no `call_soon`.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use pyo3::prelude::*;
use tokio::sync::mpsc;

/// One handoff: a closure the tokio thread runs (it sends a head down a oneshot, mostly).
pub type Handoff = Box<dyn FnOnce() + Send>;

pub struct Outbox {
    held: Mutex<Vec<Handoff>>,
    tx: mpsc::UnboundedSender<Vec<Handoff>>,
    /// Inside a batch that flushes when it ends (`batch`): no flush to schedule.
    in_batch: AtomicBool,
}

impl Outbox {
    /// An outbox whose batches a task on `handle` runs, in the order they were held.
    pub fn new(handle: &tokio::runtime::Handle) -> Arc<Self> {
        let (tx, mut rx) = mpsc::unbounded_channel::<Vec<Handoff>>();
        handle.spawn(async move {
            while let Some(batch) = rx.recv().await {
                for handoff in batch {
                    handoff();
                }
            }
        });
        Arc::new(Self {
            held: Mutex::new(Vec::new()),
            tx,
            in_batch: AtomicBool::new(false),
        })
    }

    /// Holds `handoff` until the loop's next pass; the first one held schedules the flush with
    /// `call_soon` (given here bound to the loop). If that fails (the loop is closed), every
    /// handoff held goes at once.
    pub fn hold(self: &Arc<Self>, py: Python<'_>, call_soon: &Bound<'_, PyAny>, handoff: Handoff) {
        let first = {
            let mut held = self.held.lock().unwrap();
            held.push(handoff);
            held.len() == 1
        };
        if !first || self.in_batch.load(Ordering::Relaxed) {
            return;
        }
        let flush = Py::new(
            py,
            FlushOutbox {
                outbox: self.clone(),
            },
        );
        if flush.and_then(|flush| call_soon.call1((flush,))).is_err() {
            self.flush();
        }
    }

    /// Until the returned guard is dropped, what is held waits for its end rather than for a
    /// flush of its own; dropped, even by a panic unwinding, it flushes.
    pub fn batch(&self) -> Batch<'_> {
        self.in_batch.store(true, Ordering::Relaxed);
        Batch(self)
    }

    /// Sends what is held to the tokio task in one message: one wake for the batch.
    pub fn flush(&self) {
        let batch = std::mem::take(&mut *self.held.lock().unwrap());
        if batch.is_empty() {
            return;
        }
        if let Err(mpsc::error::SendError(batch)) = self.tx.send(batch) {
            // The runtime is gone (the server has stopped): nothing waits on a tokio thread.
            for handoff in batch {
                handoff();
            }
        }
    }
}

/// A pass that flushes its outbox when it ends (`Outbox::batch`).
pub struct Batch<'a>(&'a Outbox);

impl Drop for Batch<'_> {
    fn drop(&mut self) {
        self.0.in_batch.store(false, Ordering::Relaxed);
        self.0.flush();
    }
}

/// The loop-thread callback that flushes an `Outbox`.
#[pyclass(frozen, module = "ferrule._ferrule")]
pub struct FlushOutbox {
    outbox: Arc<Outbox>,
}

#[pymethods]
impl FlushOutbox {
    fn __call__(&self) {
        self.outbox.flush();
    }
}
