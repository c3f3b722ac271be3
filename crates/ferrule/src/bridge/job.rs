//! `Job`: one coroutine handed to the bridge, with everything needed to drive it from any thread:
//! its copied context, its task identity, what it waits on, and where its result goes.

use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::Mutex;

use pyo3::intern;
use pyo3::prelude::*;

use super::asyncio::{AsyncioApi, TaskSlot};
use super::counters::Counters;
use super::ffi;

/// What to put into the coroutine at its next step.
pub enum Resume {
    Send(Py<PyAny>),
    Throw(Py<PyAny>),
}

/// A Rust continuation that receives a finished coroutine's result, with the GIL held.
pub type ResultCallback = Box<dyn FnOnce(Python<'_>, PyResult<Py<PyAny>>) + Send>;

/// Where a finished coroutine's result goes.
pub enum Completion {
    /// An asyncio future of the bridge's loop (the Python API's `spawn`).
    Future(Py<PyAny>),
    /// A Rust continuation (the HTTP server's request handling).
    Callback(ResultCallback),
    /// The app-made `Task` that stands for the coroutine (`factory`): its own future state.
    Task(Py<PyAny>),
}

/// What a suspended coroutine waits on, so cancelling it can cancel that.
pub enum Waiting {
    Nothing,
    Future(Py<PyAny>),
    /// A `NativeFuture` (cancelled through its `cancel`, as any future).
    Native(Py<PyAny>),
}

struct JobState {
    waiting: Waiting,
    /// `Some(msg)`: throw `CancelledError(msg)` in at the next step (asyncio's `_must_cancel`).
    must_cancel: Option<Option<Py<PyAny>>>,
    cancels: u32,
    completion: Option<Completion>,
    finished: bool,
    /// The job's `ResumeCallback`, made at its first wait and used for every one after it;
    /// dropped when the job ends, which breaks the cycle through the callback's `job`.
    resumer: Option<Py<PyAny>>,
    /// What the resumer puts in when `call_soon` calls it (a job waits on one thing at a time,
    /// so at most one such resume is outstanding).
    pending_resume: Option<Resume>,
}

#[pyclass(frozen, module = "ferrule._ferrule")]
pub struct Job {
    pub(crate) id: u64,
    pub(crate) coro: Py<PyAny>,
    pub(crate) context: Py<PyAny>,
    /// The `DriverTask`, made (or taken from the idle ones) at the first drive and given back
    /// when the job finishes.
    task: Mutex<Option<TaskSlot>>,
    pub(crate) drives: AtomicU32,
    /// Made by the task factory: its task is the app's, its first drive no request's.
    pub(crate) app_task: bool,
    /// An app-made task's own `__step` (kept from `Task.__init__`): a task asked to cancel is
    /// handed back to it (see `driver::hand_back`).
    own_step: Mutex<Option<Py<PyAny>>>,
    /// Trace mark (see `trace`) of when the coroutine last became ready to go on; 0 for none.
    resumable_since: AtomicU64,
    state: Mutex<JobState>,
}

impl Job {
    /// A job for `awaitable` that runs in `context`, or (`None`) in a copy of the calling
    /// thread's context, as `create_task` does.
    pub fn new(
        py: Python<'_>,
        id: u64,
        awaitable: &Bound<'_, PyAny>,
        completion: Completion,
        context: Option<Bound<'_, PyAny>>,
    ) -> PyResult<Self> {
        let context = match context {
            Some(context) => context,
            None => ffi::copy_current_context(py)?,
        };
        // Any awaitable, as ASGI asks: an object whose `__await__` gives the iterator to drive
        // (a class-based app's instance, which may well have a `send` attribute of its own),
        // else one that is driven as it is (a coroutine-like object with `send`).
        let coro = if ffi::is_native_coroutine(awaitable) {
            awaitable.clone()
        } else if awaitable.hasattr(intern!(py, "__await__"))? {
            awaitable.call_method0(intern!(py, "__await__"))?
        } else {
            awaitable.clone()
        };
        Ok(Self {
            id,
            coro: coro.unbind(),
            context: context.unbind(),
            task: Mutex::new(None),
            drives: AtomicU32::new(0),
            app_task: false,
            own_step: Mutex::new(None),
            resumable_since: AtomicU64::new(0),
            state: Mutex::new(JobState {
                waiting: Waiting::Nothing,
                must_cancel: None,
                cancels: 0,
                completion: Some(completion),
                finished: false,
                resumer: None,
                pending_resume: None,
            }),
        })
    }

    /// A job for an app-made `task` over `coro`, run in `context` (the task's own).
    pub fn for_app_task(
        py: Python<'_>,
        id: u64,
        coro: &Bound<'_, PyAny>,
        task: &Bound<'_, PyAny>,
        own_step: Option<Py<PyAny>>,
        context: Bound<'_, PyAny>,
    ) -> PyResult<Self> {
        let completion = Completion::Task(task.clone().unbind());
        let mut job = Self::new(py, id, coro, completion, Some(context))?;
        job.task = Mutex::new(Some(TaskSlot::app_task(task.clone().unbind())));
        job.app_task = true;
        job.own_step = Mutex::new(own_step);
        Ok(job)
    }

    /// The task's own step, if it was asked to cancel since it was made: the caller hands
    /// the task back to it.
    pub fn take_own_step_if_cancelled(&self) -> Option<Py<PyAny>> {
        if self.state.lock().unwrap().cancels == 0 {
            return None;
        }
        self.own_step.lock().unwrap().take()
    }

    /// What a task handed back to `Task` must carry: the cancellation not yet thrown in (its
    /// message), and how many cancellations were counted.
    pub fn take_cancel_state(&self) -> (Option<Option<Py<PyAny>>>, u32) {
        let mut state = self.state.lock().unwrap();
        (state.must_cancel.take(), state.cancels)
    }

    /// The cancellation requested and not yet delivered when the coroutine ended: a task
    /// cancelled during its last step ends cancelled, as `Task.__step` has it.
    pub fn take_undelivered_cancel(&self) -> Option<Option<Py<PyAny>>> {
        self.state.lock().unwrap().must_cancel.take()
    }

    /// The job's `DriverTask`, made on first use (by `api`, with the loop's `ready` queue, which
    /// the loop may not have). Call with the right to drive held.
    pub fn task<'py>(
        slf: &Bound<'py, Self>,
        api: &AsyncioApi,
        ready: Option<&Py<PyAny>>,
        counters: &Counters,
    ) -> PyResult<Bound<'py, PyAny>> {
        let py = slf.py();
        let this = slf.get();
        if let Some(slot) = this.task.lock().unwrap().as_ref() {
            return Ok(slot.task.task.bind(py).clone());
        }
        // Made outside the lock, as no Python runs under the bridge's locks; the right to
        // drive keeps another thread from making one meanwhile.
        let ready = ready.map(|r| r.bind(py));
        let made = api.driver_task(py, ready, counters)?;
        let task = made.task.task.bind(py).clone();
        task.setattr(intern!(py, "_ferrule_job"), slf)?;
        *this.task.lock().unwrap() = Some(made);
        Ok(task)
    }

    /// The job's resumer (see `JobState::resumer`), made by `make` the first time; with
    /// `resume`, what it is to put in when next called with no future.
    pub(super) fn resumer<'py>(
        &self,
        py: Python<'py>,
        resume: Option<Resume>,
        make: impl FnOnce() -> PyResult<Py<PyAny>>,
    ) -> PyResult<Bound<'py, PyAny>> {
        {
            let mut state = self.state.lock().unwrap();
            if resume.is_some() {
                state.pending_resume = resume;
            }
            if let Some(resumer) = &state.resumer {
                return Ok(resumer.bind(py).clone());
            }
        }
        // Made outside the lock; should another thread have set one meanwhile, that one stays,
        // and `made` is dropped after the lock is released.
        let made = make()?.into_bound(py);
        let mut state = self.state.lock().unwrap();
        let resumer = state.resumer.get_or_insert_with(|| made.clone().unbind());
        Ok(resumer.bind(py).clone())
    }

    /// The resume `resumer` was given for its `call_soon`, if it has not been taken.
    pub(super) fn take_pending_resume(&self) -> Option<Resume> {
        self.state.lock().unwrap().pending_resume.take()
    }

    pub fn set_waiting(&self, waiting: Waiting) {
        self.state.lock().unwrap().waiting = waiting;
    }

    pub fn clear_waiting(&self) {
        self.state.lock().unwrap().waiting = Waiting::Nothing;
    }

    /// The pending cancellation, if any, as the exception to throw in now.
    pub fn take_must_cancel(&self, py: Python<'_>, api: &AsyncioApi) -> Option<Py<PyAny>> {
        let msg = self.state.lock().unwrap().must_cancel.take()?;
        Some(api.cancelled_error(py, msg.as_ref()).unbind())
    }

    /// Called right after the coroutine suspended on `waiting`: a cancellation requested during
    /// the step that just ran cancels what it now waits on, as `Task.__step` does.
    pub fn cancel_new_wait(&self, py: Python<'_>) -> PyResult<()> {
        let (msg, waiting) = {
            let state = self.state.lock().unwrap();
            let Some(msg) = &state.must_cancel else {
                return Ok(());
            };
            let msg = msg.as_ref().map(|m| m.clone_ref(py));
            let waiting = match &state.waiting {
                Waiting::Nothing => return Ok(()),
                Waiting::Future(f) => Waiting::Future(f.clone_ref(py)),
                Waiting::Native(n) => Waiting::Native(n.clone_ref(py)),
            };
            (msg, waiting)
        };
        if cancel_waiting(py, &waiting, msg)? {
            self.state.lock().unwrap().must_cancel = None;
        }
        Ok(())
    }

    /// Marks the job finished; what its end hands on (its completion, and its task to put
    /// back), or None if it had finished already. `Shared::finish` does the rest.
    pub(crate) fn end(&self) -> Option<(Option<Completion>, Option<TaskSlot>)> {
        let (completion, resumer) = {
            let mut state = self.state.lock().unwrap();
            if state.finished {
                return None;
            }
            state.finished = true;
            state.waiting = Waiting::Nothing;
            (state.completion.take(), state.resumer.take())
        };
        drop(resumer);
        let own_step = self.own_step.lock().unwrap().take();
        drop(own_step);
        Some((completion, self.task.lock().unwrap().take()))
    }
}

#[pymethods]
impl Job {
    /// `Task.cancel` for the job's `DriverTask`.
    #[pyo3(signature = (msg=None))]
    pub fn cancel(&self, py: Python<'_>, msg: Option<Py<PyAny>>) -> PyResult<bool> {
        let waiting = {
            let mut state = self.state.lock().unwrap();
            if state.finished {
                return Ok(false);
            }
            state.cancels += 1;
            match &state.waiting {
                Waiting::Nothing => {
                    state.must_cancel = Some(msg);
                    return Ok(true);
                }
                Waiting::Future(f) => Waiting::Future(f.clone_ref(py)),
                Waiting::Native(n) => Waiting::Native(n.clone_ref(py)),
            }
        };
        let msg_again = msg.as_ref().map(|m| m.clone_ref(py));
        if !cancel_waiting(py, &waiting, msg)? {
            self.state.lock().unwrap().must_cancel = Some(msg_again);
        }
        Ok(true)
    }

    fn cancelling(&self) -> u32 {
        self.state.lock().unwrap().cancels
    }

    /// With `withdraws` (3.13+), down to zero withdraws a cancellation not yet thrown in.
    #[pyo3(signature = (withdraws=false))]
    fn uncancel(&self, withdraws: bool) -> u32 {
        let mut state = self.state.lock().unwrap();
        state.cancels = state.cancels.saturating_sub(1);
        if withdraws && state.cancels == 0 {
            state.must_cancel = None;
        }
        state.cancels
    }

    /// The coroutine (or awaitable's iterator) being driven, for `DriverTask.get_coro()`.
    #[getter(coro)]
    fn coro_object(&self, py: Python<'_>) -> Py<PyAny> {
        self.coro.clone_ref(py)
    }

    #[getter]
    fn finished(&self) -> bool {
        self.state.lock().unwrap().finished
    }
}

/// Done callback on the future `Bridge.spawn` returns: cancelling that future (say, by
/// `asyncio.wait_for` timing out) cancels the coroutine, as cancelling a `Task` does.
#[pyclass(frozen, module = "ferrule._ferrule")]
pub struct CancelJobWithFuture {
    pub(crate) job: Py<Job>,
}

#[pymethods]
impl CancelJobWithFuture {
    fn __call__(&self, py: Python<'_>, future: Bound<'_, PyAny>) -> PyResult<()> {
        if future.call_method0(intern!(py, "cancelled"))?.is_truthy()? {
            self.job.get().cancel(py, None)?;
        }
        Ok(())
    }
}

/// Cancels what a job waits on; its done callback or waiter entry then resumes the job with
/// `CancelledError`. Returns whether the cancellation took.
fn cancel_waiting(py: Python<'_>, waiting: &Waiting, msg: Option<Py<PyAny>>) -> PyResult<bool> {
    match waiting {
        Waiting::Nothing => Ok(false),
        Waiting::Future(future) => {
            let kwargs = pyo3::types::PyDict::new(py);
            kwargs.set_item("msg", msg)?;
            future
                .bind(py)
                .call_method(intern!(py, "cancel"), (), Some(&kwargs))?
                .is_truthy()
        }
        Waiting::Native(native) => native
            .bind(py)
            .call_method1(intern!(py, "cancel"), (msg,))?
            .is_truthy(),
    }
}

impl Job {
    pub fn drive_count(&self) -> u32 {
        self.drives.fetch_add(1, Ordering::Relaxed) + 1
    }

    /// Notes `mark` as when the coroutine became ready to go on, unless a mark is pending: a
    /// resume that passes through several queues is timed from the first.
    pub fn mark_resumable(&self, mark: u64) {
        if mark != 0 {
            let _ = self.resumable_since.compare_exchange(
                0,
                mark,
                Ordering::Relaxed,
                Ordering::Relaxed,
            );
        }
    }

    /// Takes the pending mark (0 if none).
    pub fn take_resumable_mark(&self) -> u64 {
        self.resumable_since.swap(0, Ordering::Relaxed)
    }
}

impl Job {
    /// The task's repr for error messages.
    pub fn task_repr(&self, py: Python<'_>) -> String {
        let task = self
            .task
            .lock()
            .unwrap()
            .as_ref()
            .map(|slot| slot.task.task.clone_ref(py));
        task.and_then(|task| task.bind(py).repr().ok())
            .map(|repr| repr.to_string())
            .unwrap_or_else(|| "<ferrule task>".to_owned())
    }
}
