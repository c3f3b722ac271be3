//! `ResumeCallback`: how the loop thread resumes a job, from an asyncio future's done callback
//! or a `call_soon`.

use std::sync::{Arc, Mutex};

use pyo3::prelude::*;

use super::counters::bump;
use super::job::{Job, Resume};
use super::shared::Shared;

/// A loop-thread callback that resumes a job: as an asyncio future's done callback (called with
/// the future) or scheduled with `call_soon` (called with nothing, carrying its own input).
#[pyclass(frozen, module = "ferrule._ferrule")]
pub struct ResumeCallback {
    shared: Arc<Shared>,
    job: Py<Job>,
    resume: Mutex<Option<Resume>>,
}

impl ResumeCallback {
    /// `job`'s callback, made at its first wait and kept in the job until it ends: one object
    /// for all its waits, not one made and freed for each. With `resume`, the callback carries
    /// it for a `call_soon` (a job has at most one resume outstanding: it waits on one thing).
    pub(super) fn of_job<'py>(
        shared: &Arc<Shared>,
        job: &Bound<'py, Job>,
        resume: Option<Resume>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let py = job.py();
        let mut slot = job.get().resumer.lock().unwrap();
        if let Some(callback) = slot.as_ref() {
            let callback = callback.bind(py).clone();
            if resume.is_some() {
                let this = callback.cast::<ResumeCallback>()?.get();
                *this.resume.lock().unwrap() = resume;
            }
            return Ok(callback);
        }
        let callback = Bound::new(
            py,
            Self {
                shared: shared.clone(),
                job: job.clone().unbind(),
                resume: Mutex::new(resume),
            },
        )?
        .into_any();
        *slot = Some(callback.clone().unbind());
        Ok(callback)
    }
}

#[pymethods]
impl ResumeCallback {
    #[pyo3(signature = (future=None))]
    fn __call__(&self, py: Python<'_>, future: Option<Bound<'_, PyAny>>) {
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
            None => match self.resume.lock().unwrap().take() {
                Some(resume) => resume,
                None => return,
            },
        };
        shared.drive_on_loop(py, job, resume);
    }
}
