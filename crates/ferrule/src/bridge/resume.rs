//! The loop-thread callbacks that resume jobs: `ResumeCallback`, an asyncio future's done
//! callback, and `RunSoon`, which drives the jobs of a `SoonBatch`.

use std::sync::{Arc, Weak};

use pyo3::prelude::*;

use super::counters::bump;
use super::job::{Job, Resume};
use super::shared::Shared;

/// An asyncio future's done callback that resumes the job waiting on it. One per job, made at
/// its first wait and kept in the job until it ends (`of_job`), not one made and freed per wait.
#[pyclass(frozen, module = "ferrule._ferrule")]
pub struct ResumeCallback {
    shared: Arc<Shared>,
    job: Py<Job>,
}

impl ResumeCallback {
    pub(super) fn of_job<'py>(
        shared: &Arc<Shared>,
        job: &Bound<'py, Job>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let py = job.py();
        job.get().resumer(py, || {
            let callback = Self {
                shared: shared.clone(),
                job: job.clone().unbind(),
            };
            Ok(Py::new(py, callback)?.into_any())
        })
    }
}

#[pymethods]
impl ResumeCallback {
    /// Called with the future, now done: the future's iterator hands the coroutine its result
    /// when sent None.
    fn __call__(&self, py: Python<'_>, _future: Bound<'_, PyAny>) {
        let job = self.job.bind(py);
        let shared = &self.shared;
        bump(&shared.counters.gil_acquisitions);
        bump(&shared.counters.resumes_inline);
        job.get().clear_waiting();
        shared.drive_on_loop(py, job, Resume::Send(py.None()));
    }
}

/// The `call_soon` callback of a bridge's `SoonBatch`: drives every job in it, oldest first.
/// It holds the bridge weakly: the bridge keeps it, made once, in its batch.
#[pyclass(frozen, module = "ferrule._ferrule")]
pub struct RunSoon {
    pub(super) shared: Weak<Shared>,
}

#[pymethods]
impl RunSoon {
    fn __call__(&self, py: Python<'_>) {
        let Some(shared) = self.shared.upgrade() else {
            return;
        };
        bump(&shared.counters.gil_acquisitions);
        for (job, resume) in shared.soon.take() {
            shared.drive_on_loop(py, job.bind(py), resume);
        }
    }
}
