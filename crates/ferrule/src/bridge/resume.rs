//! `ResumeCallback`: how the loop thread resumes a job, from an asyncio future's done callback
//! or a `call_soon`; `FirstDrive`, how it starts an app-made task's job.

use std::sync::Arc;

use pyo3::prelude::*;

use super::counters::bump;
use super::job::{Job, Resume};
use super::shared::Shared;

/// A loop-thread callback that resumes a job: as an asyncio future's done callback (called with
/// the future) or scheduled with `call_soon` (called with nothing: the job holds the input).
/// One per job, made at its first wait (`of_job`).
#[pyclass(frozen, module = "ferrule._ferrule")]
pub struct ResumeCallback {
    shared: Arc<Shared>,
    job: Py<Job>,
}

impl ResumeCallback {
    /// `job`'s callback, made the first time and kept in the job until it ends: one object
    /// for all its waits, not one made and freed for each. With `resume`, what the callback
    /// puts in when `call_soon` calls it.
    pub(super) fn of_job<'py>(
        shared: &Arc<Shared>,
        job: &Bound<'py, Job>,
        resume: Option<Resume>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let py = job.py();
        job.get().resumer(py, resume, || {
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
    #[pyo3(signature = (future=None))]
    fn __call__(&self, py: Python<'_>, future: Option<Bound<'_, PyAny>>) -> PyResult<()> {
        let job = self.job.bind(py);
        let shared = &self.shared;
        bump(&shared.counters.gil_acquisitions);
        let resume = match future {
            // The future's iterator hands the coroutine its result when sent None.
            Some(_future) => {
                bump(&shared.counters.resumes_inline);
                job.get().clear_waiting();
                Resume::Send(py.None())
            }
            None => match job.get().take_pending_resume() {
                Some(resume) => resume,
                None => return Ok(()),
            },
        };
        shared.drive_in_loop_callback(py, job, resume);
        shared.raise_loop_exit()
    }
}

/// The loop-thread callback, one per task factory, that gives an app-made task's job its first
/// drive: `call_soon(first_drive.drive, job)`, in place of the `__step` `Task.__init__`
/// schedules. A task that finishes in that drive, as most do, then never needs a
/// `ResumeCallback` of its own.
#[pyclass(frozen, module = "ferrule._ferrule")]
pub struct FirstDrive {
    shared: Arc<Shared>,
}

impl FirstDrive {
    /// The bound `drive` that `call_soon` is given.
    pub(super) fn callable(py: Python<'_>, shared: Arc<Shared>) -> PyResult<Py<PyAny>> {
        let first_drive = Bound::new(py, Self { shared })?;
        Ok(first_drive.getattr(pyo3::intern!(py, "drive"))?.unbind())
    }
}

#[pymethods]
impl FirstDrive {
    fn drive(&self, py: Python<'_>, job: Bound<'_, Job>) -> PyResult<()> {
        let shared = &self.shared;
        bump(&shared.counters.gil_acquisitions);
        shared.drive_in_loop_callback(py, &job, Resume::Send(py.None()));
        shared.raise_loop_exit()
    }
}
