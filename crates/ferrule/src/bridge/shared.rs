//! `Shared`: the state every object of one bridge shares, and what needs only it: the jobs in
//! flight, handing a job to the loop thread, finishing a job. Driving one is `driver`'s.

use std::cell::Cell;
use std::collections::{HashMap, VecDeque};
use std::hash::{BuildHasherDefault, Hasher};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::ThreadId;

use pyo3::intern;
use pyo3::prelude::*;
use pyo3::types::PyDict;

use super::asyncio::{AsyncioApi, TaskSlot};
use super::counters::{bump, Counters};
use super::gate::LoopGate;
use super::job::{Completion, Job, Resume};
use super::outbox::{Handoff, Outbox};
use super::queue::{LoopStart, ReadyQueue};
use super::trace::Trace;
use super::waker::LoopWaker;

/// How tokio threads get the right to drive: gated only on a selector loop, and only when asked
/// (`Bridge(mode=...)`, "auto" gates whatever loop can be gated).
///
/// 3.14's per-thread current task removes the task collision, but not the other reason for
/// exclusion: a driven coroutine runs asyncio code (`call_soon`, `call_later`'s heap push, whose
/// comparisons are Python code the GIL can switch out of) that must not interleave with the loop
/// thread's `_run_once`, and on uvloop must not run off the loop thread at all (libuv is not
/// thread-safe). So the Python version does not choose the mode.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Mode {
    /// Selector loop: a tokio thread drives only while the loop thread is blocked in `select`.
    Gated,
    /// Every drive is handed to the loop thread: uvloop (no selector to gate), or any loop
    /// when asked.
    LoopOnly,
}

impl Mode {
    pub fn name(self) -> &'static str {
        match self {
            Mode::Gated => "gated",
            Mode::LoopOnly => "loop-only",
        }
    }
}

/// State shared by every object of one bridge; all of it usable from any thread.
pub struct Shared {
    pub event_loop: Py<PyAny>,
    pub(super) loop_thread: ThreadId,
    pub mode: Mode,
    pub budget: u32,
    pub(crate) api: AsyncioApi,
    /// `loop._ready` and `loop._scheduled`, where the loop has them (not uvloop).
    pub(super) ready: Option<Py<PyAny>>,
    pub(super) scheduled: Option<Py<PyAny>>,
    /// The loop's ready callbacks: `ready`, or uvloop's where they could be found (see the
    /// `ready` module); read for whether anything waits for the loop.
    pub(super) ready_callbacks: Option<Py<PyAny>>,
    pub(crate) queue: ReadyQueue,
    pub(crate) gate: LoopGate,
    pub(crate) waker: Arc<LoopWaker>,
    pub(super) outbox: Arc<Outbox>,
    pub counters: Arc<Counters>,
    pub trace: Trace,
    pub(super) jobs: Mutex<HashMap<u64, Py<Job>, BuildHasherDefault<JobIdHasher>>>,
    /// The task factory's jobs, apart: no request waits on them, and shutdown leaves them to
    /// the loop's own cancellation of its tasks (they are in `all_tasks()`).
    pub(super) app_tasks: Mutex<HashMap<u64, Py<Job>, BuildHasherDefault<JobIdHasher>>>,
    /// App-made tasks whose first drive follows the drives of the current tokio drive or loop
    /// callback on its thread, in the order they were made (see `Shared::schedule_first_drive`).
    pub(super) next_first_drives: Mutex<VecDeque<Py<Job>>>,
    /// A `KeyboardInterrupt` or `SystemExit` an app-made task ended with: the loop thread's
    /// next bridge callback raises it out of the loop, as `Task.__step` does.
    pub(super) loop_exit: Mutex<Option<PyErr>>,
    /// Whether `loop_exit` holds one: every loop-thread callback looks, without the lock.
    pub(super) loop_exit_set: AtomicBool,
    pub(super) next_id: AtomicU64,
    pub handle: tokio::runtime::Handle,
    pub(super) runtime: Mutex<Option<tokio::runtime::Runtime>>,
    pub(super) closed: AtomicBool,
}

/// Hashes job ids, which are unique and come from a counter: one multiply spreads them over
/// the table. The default SipHash cost 300 instructions a request (an insert and a remove).
#[derive(Default)]
pub(super) struct JobIdHasher(u64);

impl Hasher for JobIdHasher {
    fn write(&mut self, bytes: &[u8]) {
        for &byte in bytes {
            self.0 = (self.0 << 8 | u64::from(byte)).wrapping_mul(0x9e37_79b9_7f4a_7c15);
        }
    }

    fn write_u64(&mut self, id: u64) {
        self.0 = id.wrapping_mul(0x9e37_79b9_7f4a_7c15);
    }

    fn finish(&self) -> u64 {
        self.0
    }
}

thread_local! {
    /// The loop this thread last made its running loop (by address), so it is set once.
    static RUNNING_LOOP: Cell<usize> = const { Cell::new(0) };
}

impl Shared {
    pub(super) fn next_job_id(&self) -> u64 {
        self.next_id.fetch_add(1, Ordering::Relaxed)
    }

    /// Where a request's Python work should start. In loop-only mode every drive happens on the
    /// loop thread anyway, so a tokio thread taking the GIL to build the scope and call the
    /// app would only add a GIL handoff per request: it queues the whole start instead.
    pub fn starts_on_loop(&self) -> bool {
        self.mode == Mode::LoopOnly
    }

    /// Runs `start` on the loop thread, in the next drain, with the GIL (for `starts_on_loop`).
    pub fn start_on_loop(&self, start: LoopStart) {
        bump(&self.counters.handoffs);
        self.queue.push_start(start);
        self.wake();
    }

    pub(crate) fn remember_job(&self, job: &Bound<'_, Job>) {
        bump(&self.counters.spawned);
        self.jobs
            .lock()
            .unwrap()
            .insert(job.get().id, job.clone().unbind());
    }

    pub(crate) fn remember_app_task(&self, job: &Bound<'_, Job>) {
        self.app_tasks
            .lock()
            .unwrap()
            .insert(job.get().id, job.clone().unbind());
    }

    pub(super) fn forget_job(&self, id: u64) {
        let job = self.jobs.lock().unwrap().remove(&id);
        if job.is_some() {
            bump(&self.counters.completed);
        }
    }

    /// Marks `job` finished and hands its result to its completion. Idempotent.
    pub fn finish(&self, job: &Bound<'_, Job>, result: PyResult<Py<PyAny>>) {
        let py = job.py();
        let this = job.get();
        let Some((completion, slot)) = this.end() else {
            return;
        };
        if this.app_task {
            let job = self.app_tasks.lock().unwrap().remove(&this.id);
            drop(job);
        } else {
            self.forget_job(this.id);
        }
        if let Some(TaskSlot {
            task,
            must_finish,
            reusable,
        }) = slot
        {
            // Break the task -> job reference cycle, and on 3.11 (where the sentinel never ran)
            // mark the task done so nothing waits on it forever.
            let bound = task.task.bind(py);
            let _ = bound.setattr(intern!(py, "_ferrule_job"), py.None());
            if must_finish {
                let _ = self
                    .api
                    .future_set_result
                    .bind(py)
                    .call1((bound, py.None()));
            }
            if reusable {
                self.api.recycle(py, task);
            }
        }
        match completion {
            Some(Completion::Future(future)) => {
                if let Err(err) = deliver_to_future(py, future.bind(py), result, self) {
                    err.write_unraisable(py, Some(future.bind(py)));
                }
            }
            Some(Completion::Callback(callback)) => callback(py, result),
            Some(Completion::Task(task)) => {
                let cancel = this.take_undelivered_cancel();
                if let Err(err) = deliver_to_task(py, task.bind(py), result, cancel, self) {
                    err.write_unraisable(py, Some(task.bind(py)));
                }
            }
            None => {}
        }
    }

    /// Ends an app-made task's job without ending the task, which `Task` steps from now on;
    /// returns the task.
    pub(super) fn retire_app_task(&self, job: &Bound<'_, Job>) -> Option<Py<PyAny>> {
        let py = job.py();
        let this = job.get();
        let (completion, slot) = this.end()?;
        let held = self.app_tasks.lock().unwrap().remove(&this.id);
        drop((completion, held));
        let task = slot?.task.task;
        let _ = task
            .bind(py)
            .setattr(intern!(py, "_ferrule_job"), py.None());
        Some(task)
    }

    /// Cancels every unfinished coroutine, as `Task.cancel` would (graceful shutdown's end).
    pub fn cancel_all(&self, py: Python<'_>) {
        let jobs: Vec<Py<Job>> = self
            .jobs
            .lock()
            .unwrap()
            .values()
            .map(|j| j.clone_ref(py))
            .collect();
        for job in jobs {
            if let Err(err) = job.get().cancel(py, None) {
                err.write_unraisable(py, None);
            }
        }
    }

    pub fn in_flight(&self) -> usize {
        self.jobs.lock().unwrap().len()
    }

    pub(super) fn on_loop_thread(&self) -> bool {
        std::thread::current().id() == self.loop_thread
    }

    /// Sizes of `_ready` and `_scheduled`: a drive that grew either left the loop work it will
    /// not see while blocked in `select` with the timeout it computed before (I4).
    /// (Gated mode has both; a drive adds to them and never takes away.)
    pub(super) fn loop_queue_marks(&self, py: Python<'_>) -> (usize, usize) {
        let len = |queue: &Option<Py<PyAny>>| queue.as_ref().and_then(|q| q.bind(py).len().ok());
        (
            len(&self.ready).unwrap_or(0),
            len(&self.scheduled).unwrap_or(0),
        )
    }

    /// Raises, out of a loop-thread callback, what an app-made task ended with that must stop
    /// the loop (see `loop_exit`).
    pub(super) fn raise_loop_exit(&self) -> PyResult<()> {
        if !self.loop_exit_set.load(Ordering::Acquire) {
            return Ok(());
        }
        self.loop_exit_set.store(false, Ordering::Release);
        match self.loop_exit.lock().unwrap().take() {
            Some(error) => Err(error),
            None => Ok(()),
        }
    }

    /// Wakes the loop thread: from a tokio worker, once it runs out of work (see `waker`).
    pub(super) fn wake(&self) {
        self.waker.wake_soon();
    }

    /// Runs `handoff` (which wakes a tokio task) on a tokio thread: from the loop thread, held
    /// until the loop's next pass with the pass's others (see `outbox`); from any other
    /// thread, now.
    pub fn hand_to_tokio(&self, py: Python<'_>, handoff: Handoff) {
        if self.on_loop_thread() {
            self.outbox.hold(py, self.api.call_soon.bind(py), handoff);
        } else {
            handoff();
        }
    }

    /// Queues a drive for the loop thread and wakes it.
    pub(super) fn handoff(&self, job: Py<Job>, resume: Resume) {
        bump(&self.counters.handoffs);
        job.get().mark_resumable(self.trace.mark());
        self.queue.push(job, resume);
        self.wake();
    }

    /// `loop.call_soon(callback, arg, context=...)`, thread-safe when off the loop thread.
    pub(super) fn call_soon_any_thread(
        &self,
        py: Python<'_>,
        callback: &Bound<'_, PyAny>,
        arg: &Bound<'_, PyAny>,
        context: Option<Py<PyAny>>,
    ) -> PyResult<()> {
        let schedule = if self.on_loop_thread() {
            &self.api.call_soon
        } else {
            &self.api.call_soon_threadsafe
        };
        schedule
            .bind(py)
            .call((callback, arg), context_kwargs(py, context)?.as_ref())?;
        Ok(())
    }

    /// Makes the bridge's loop this thread's running loop, once (I11; required on 3.14).
    pub(super) fn ensure_running_loop(&self, py: Python<'_>) -> PyResult<()> {
        let address = self.event_loop.as_ptr() as usize;
        if RUNNING_LOOP.with(Cell::get) != address {
            self.api
                .set_running_loop
                .bind(py)
                .call1((&self.event_loop,))?;
            RUNNING_LOOP.with(|cell| cell.set(address));
        }
        Ok(())
    }

    /// Claims the drive slot for this tokio thread if the mode allows it now. GIL held.
    pub(super) fn try_begin_tokio_drive(&self) -> bool {
        match self.mode {
            Mode::LoopOnly => false,
            Mode::Gated => self.gate.loop_in_select() && self.queue.begin_tokio_drive(),
        }
    }

    /// Nothing waits in the loop's ready callbacks or in the ready queue (false on a loop whose
    /// ready callbacks could not be found).
    pub(crate) fn loop_has_nothing_ready(&self, py: Python<'_>) -> bool {
        let ready_empty = match &self.ready_callbacks {
            Some(ready) => ready.bind(py).len().is_ok_and(|n| n == 0),
            None => false,
        };
        ready_empty && self.queue.is_empty()
    }
}

fn deliver_to_future(
    py: Python<'_>,
    future: &Bound<'_, PyAny>,
    result: PyResult<Py<PyAny>>,
    shared: &Shared,
) -> PyResult<()> {
    if future.call_method0(intern!(py, "done"))?.is_truthy()? {
        return Ok(()); // the caller cancelled it; nobody wants the result
    }
    match result {
        Ok(value) => future.call_method1(intern!(py, "set_result"), (value,))?,
        Err(error) if error.is_instance(py, shared.api.cancelled_error.bind(py)) => {
            future.call_method0(intern!(py, "cancel"))?
        }
        Err(error) => future.call_method1(intern!(py, "set_exception"), (error.into_value(py),))?,
    };
    Ok(())
}

/// Ends an app-made task's future state as `Task.__step` does: the coroutine's return value,
/// its exception, or cancelled (with the message of the `CancelledError` it raised, or of a
/// cancellation requested during its last step).
fn deliver_to_task(
    py: Python<'_>,
    task: &Bound<'_, PyAny>,
    result: PyResult<Py<PyAny>>,
    undelivered_cancel: Option<Option<Py<PyAny>>>,
    shared: &Shared,
) -> PyResult<()> {
    let api = &shared.api;
    match (result, undelivered_cancel) {
        (Ok(_), Some(msg)) => {
            api.future_cancel.bind(py).call1((task, msg))?;
        }
        (Ok(value), None) => {
            api.future_set_result.bind(py).call1((task, value))?;
        }
        (Err(error), _) if error.is_instance(py, api.cancelled_error.bind(py)) => {
            let args = error.value(py).getattr(intern!(py, "args"))?;
            let msg = args.get_item(0).ok();
            api.future_cancel.bind(py).call1((task, msg))?;
        }
        (Err(error), _) => {
            let exits_loop = error.is_instance_of::<pyo3::exceptions::PyKeyboardInterrupt>(py)
                || error.is_instance_of::<pyo3::exceptions::PySystemExit>(py);
            if exits_loop {
                *shared.loop_exit.lock().unwrap() = Some(error.clone_ref(py));
                shared.loop_exit_set.store(true, Ordering::Release);
            }
            api.future_set_exception
                .bind(py)
                .call1((task, error.into_value(py)))?;
        }
    }
    Ok(())
}

/// Keyword arguments for `call_soon(..., context=ctx)`, or none without a context.
fn context_kwargs<'py>(
    py: Python<'py>,
    context: Option<Py<PyAny>>,
) -> PyResult<Option<Bound<'py, PyDict>>> {
    let Some(context) = context else {
        return Ok(None);
    };
    let kwargs = PyDict::new(py);
    kwargs.set_item("context", context)?;
    Ok(Some(kwargs))
}
