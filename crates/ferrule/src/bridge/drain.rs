//! `DrainOnLoop`: the loop waker's reader callback on the loop thread, which drives what the
//! `ReadyQueue` holds: resumes first, then new requests' starts.

use std::sync::Arc;

use pyo3::prelude::*;

use super::counters::bump;
use super::driver::{drive, Place};
use super::shared::Shared;

/// The wake descriptor's reader callback on the loop thread: drives every queued coroutine.
#[pyclass(frozen, module = "ferrule._ferrule")]
pub struct DrainOnLoop {
    pub(crate) shared: Arc<Shared>,
}

#[pymethods]
impl DrainOnLoop {
    fn __call__(&self, py: Python<'_>) -> PyResult<()> {
        let shared = &self.shared;
        shared.waker.clear();
        if shared.queue.tokio_driving() {
            // The tokio thread wakes the loop again after its drive if the queue is not empty.
            return Ok(());
        }
        {
            let _batch = shared.outbox.batch();
            shared.with_first_drives(py, Place::Loop, || {
                // Resumes of coroutines already running go before new requests.
                for (job, resume) in shared.queue.take_all() {
                    bump(&shared.counters.gil_acquisitions);
                    drive(py, shared, job.bind(py), resume, Place::Loop);
                }
                for start in shared.queue.take_starts() {
                    bump(&shared.counters.gil_acquisitions);
                    start(py);
                }
            });
        }
        shared.raise_loop_exit()
    }
}
