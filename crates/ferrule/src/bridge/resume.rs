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
    pub(super) fn on_future(shared: Arc<Shared>, job: Py<Job>) -> Self {
        Self {
            shared,
            job,
            resume: Mutex::new(None),
        }
    }

    pub(super) fn with_resume(shared: Arc<Shared>, job: Py<Job>, resume: Resume) -> Self {
        Self {
            shared,
            job,
            resume: Mutex::new(Some(resume)),
        }
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
