//! `Shared`: the state every object of one bridge shares, and how a job is started, driven
//! from a tokio thread or handed to the loop thread.

use std::cell::Cell;
use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::ThreadId;

use pyo3::prelude::*;

use super::asyncio::AsyncioApi;
use super::counters::{bump, Counters};
use super::driver::{drive, Place};
use super::gate::LoopGate;
use super::job::{Completion, Job, Resume};
use super::native::context_kwargs;
use super::queue::{LoopStart, ReadyQueue};
use super::resume::ResumeCallback;
use super::trace::Trace;
use super::waker::LoopWaker;

/// How tokio threads get the right to drive, chosen from the loop.
///
/// 3.14's per-thread current task removes the task collision, but not the other reason for
/// exclusion: a driven coroutine runs asyncio code (`call_soon`, `call_later`'s heap push, whose
/// comparisons are Python code the GIL can switch out of) that must not interleave with the loop
/// thread's `_run_once`, and on uvloop must not run off the loop thread at all (libuv is not
/// thread-safe). So the mode depends on the loop alone.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Mode {
    /// Selector loop: a tokio thread drives only while the loop thread is blocked in `select`.
    Gated,
    /// No selector to gate (uvloop): every drive is handed to the loop thread.
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
    pub(crate) queue: ReadyQueue,
    pub(crate) gate: LoopGate,
    pub(crate) waker: Arc<LoopWaker>,
    pub counters: Arc<Counters>,
    pub trace: Trace,
    pub(super) jobs: Mutex<HashMap<u64, Py<Job>, BuildHasherDefault<JobIdHasher>>>,
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

    /// Makes `coro` a job whose result goes to `completion`, and gives it its first drive on
    /// this thread: how the server starts every app coroutine, on a tokio thread or (see
    /// `start_on_loop`) on the loop thread. It runs in `context`, which nothing else may enter.
    /// `received` is the trace mark of the request's arrival (0 when not traced): its first
    /// drive records the wait.
    pub fn start(
        self: &Arc<Self>,
        py: Python<'_>,
        coro: &Bound<'_, PyAny>,
        completion: Completion,
        context: Bound<'_, PyAny>,
        received: u64,
    ) -> PyResult<()> {
        let job = Bound::new(py, Job::new(py, self, coro, completion, Some(context))?)?;
        job.get().mark_resumable(received);
        self.remember_job(&job);
        if self.on_loop_thread() {
            self.drive_on_loop(py, &job, Resume::Send(py.None()));
        } else {
            self.drive_from_tokio(py, &job, Resume::Send(py.None()));
        }
        Ok(())
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

    pub(super) fn forget_job(&self, id: u64) {
        let job = self.jobs.lock().unwrap().remove(&id);
        if job.is_some() {
            bump(&self.counters.completed);
        }
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

    fn on_loop_thread(&self) -> bool {
        std::thread::current().id() == self.loop_thread
    }

    /// Sizes of `_ready` and `_scheduled`: a drive that grew either left the loop work it will
    /// not see while blocked in `select` with the timeout it computed before (I4).
    /// (Gated mode has both; a drive adds to them and never takes away.)
    fn loop_queue_marks(&self, py: Python<'_>) -> (usize, usize) {
        let len = |queue: &Option<Py<PyAny>>| queue.as_ref().and_then(|q| q.bind(py).len().ok());
        (
            len(&self.ready).unwrap_or(0),
            len(&self.scheduled).unwrap_or(0),
        )
    }

    /// Wakes the loop thread: from a tokio worker, once it runs out of work (see `waker`).
    fn wake(&self) {
        self.waker.wake_soon();
    }

    /// Queues a drive for the loop thread and wakes it.
    pub(super) fn handoff(&self, job: Py<Job>, resume: Resume) {
        bump(&self.counters.handoffs);
        job.get().mark_resumable(self.trace.mark());
        self.queue.push(job, resume);
        self.wake();
    }

    /// On the loop thread: run the job's next step in a later loop iteration.
    pub(super) fn resume_soon_on_loop(
        &self,
        py: Python<'_>,
        job: Py<Job>,
        resume: Resume,
    ) -> PyResult<()> {
        job.get().mark_resumable(self.trace.mark());
        let callback = Py::new(py, ResumeCallback::with_resume(job, resume))?;
        self.api.call_soon.bind(py).call1((callback,))?;
        Ok(())
    }

    /// Resumes `job` soon from a caller that may itself be inside a drive.
    pub(super) fn resume_later(
        &self,
        py: Python<'_>,
        job: Py<Job>,
        resume: Resume,
    ) -> PyResult<()> {
        if self.on_loop_thread() {
            self.resume_soon_on_loop(py, job, resume)
        } else {
            self.handoff(job, resume);
            Ok(())
        }
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
    fn ensure_running_loop(&self, py: Python<'_>) -> PyResult<()> {
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
    fn try_begin_tokio_drive(&self) -> bool {
        match self.mode {
            Mode::LoopOnly => false,
            Mode::Gated => self.gate.loop_in_select() && self.queue.begin_tokio_drive(),
        }
    }

    /// A tokio thread, holding the GIL and no drive, wants to drive `job`: drive it here if it
    /// can have exclusive use, else hand it to the loop thread.
    pub fn drive_from_tokio(&self, py: Python<'_>, job: &Bound<'_, Job>, resume: Resume) {
        bump(&self.counters.gil_acquisitions);
        if self.closed.load(Ordering::Acquire) {
            return;
        }
        if let Err(err) = self.ensure_running_loop(py) {
            Job::finish(job, Err(err));
            return;
        }
        if !self.try_begin_tokio_drive() {
            self.handoff(job.clone().unbind(), resume);
            return;
        }
        // The task is made before measuring: on 3.11 making it pushes and pops a handle.
        if let Err(err) = Job::task(job) {
            self.queue.end_tokio_drive();
            Job::finish(job, Err(err));
            return;
        }
        let (ready_before, scheduled_before) = self.loop_queue_marks(py);
        drive(py, job, resume, Place::Tokio);
        let (ready_after, scheduled_after) = self.loop_queue_marks(py);
        self.queue.end_tokio_drive();
        // A coroutine that completed without touching asyncio leaves both unchanged: no wake.
        // Completing a spawn future does schedule its callbacks, and that is seen here too.
        let loop_has_new_work = ready_after > ready_before || scheduled_after > scheduled_before;
        if loop_has_new_work || !self.queue.is_empty() {
            self.wake();
        }
    }

    /// Nothing waits in `loop._ready` or in the ready queue (false on a loop without `_ready`).
    pub(crate) fn loop_has_nothing_ready(&self, py: Python<'_>) -> bool {
        let ready_empty = match &self.ready {
            Some(ready) => ready.bind(py).len().is_ok_and(|n| n == 0),
            None => false,
        };
        ready_empty && self.queue.is_empty()
    }

    /// The loop thread wants to drive `job` from one of the bridge's callbacks.
    pub(super) fn drive_on_loop(&self, py: Python<'_>, job: &Bound<'_, Job>, resume: Resume) {
        if self.queue.tokio_driving() {
            bump(&self.counters.deferred_resumes);
            job.get().mark_resumable(self.trace.mark());
            self.queue.push(job.clone().unbind(), resume);
            return;
        }
        drive(py, job, resume, Place::Loop);
    }
}
