//! `SoonBatch`: the jobs the loop thread resumes in its next iteration, behind one `call_soon`.
//!
//! A job that yields on the loop thread (`asyncio.sleep(0)`, a spent step budget, a native
//! future resolved from Python) must let the loop run a cycle before its next step. One
//! `call_soon` per job cost uvloop a handle made, run and freed and the callback a pyo3 call:
//! about as much as the rest of the continuation. Every job that yields before the batch runs
//! joins it; the batch is taken whole when it runs, so a job that yields again during the run
//! goes to the next batch, a loop iteration later, as with `call_soon`.

use std::sync::{Mutex, OnceLock};

use pyo3::prelude::*;

use super::job::{Job, Resume};

#[derive(Default)]
pub struct SoonBatch {
    state: Mutex<Batch>,
    /// The callback `call_soon` is given for each batch (`resume::RunSoon`), made once.
    pub(super) runner: OnceLock<Py<PyAny>>,
}

#[derive(Default)]
struct Batch {
    jobs: Vec<(Py<Job>, Resume)>,
    /// A `call_soon` of the runner is pending: later jobs join its batch.
    scheduled: bool,
}

impl SoonBatch {
    /// Adds `job` to the batch; true if the caller must schedule the runner (no run pending).
    pub fn push(&self, job: Py<Job>, resume: Resume) -> bool {
        let mut batch = self.state.lock().unwrap();
        batch.jobs.push((job, resume));
        !std::mem::replace(&mut batch.scheduled, true)
    }

    /// The batch, oldest first, leaving an empty one that no run is pending for.
    pub fn take(&self) -> Vec<(Py<Job>, Resume)> {
        let mut batch = self.state.lock().unwrap();
        batch.scheduled = false;
        std::mem::take(&mut batch.jobs)
    }
}
