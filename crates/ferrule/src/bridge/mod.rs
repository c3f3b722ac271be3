//! The bridge: drives Python coroutines from Rust, on tokio threads and the asyncio loop thread,
//! with one GIL acquisition for a coroutine that never suspends and two for one resumed by an
//! asyncio future. See `../../../../DESIGN.md` in the shared notes for the mechanism list.
//!
//! - `driver`: the step loop and classification of yields.
//! - `job`: one driven coroutine (context, task identity, what it waits on, its completion).
//! - `asyncio`: cached asyncio callables and the per-coroutine `DriverTask`.
//! - `native`: `NativeFuture`, the awaitable resolved from Rust.
//! - `context`: `RequestContext`, the contextvars each request runs in.
//! - `queue`: `ReadyQueue` and the `tokio_driving` flag.
//! - `gate`: `GatedSelector`, exclusive drives for tokio threads on selector loops.
//! - `waker`: the eventfd that wakes the loop thread without the GIL.
//! - `counters`: what the bridge counts; `ffi`: the only `unsafe`.

mod asyncio;
mod context;
mod counters;
mod driver;
mod ffi;
mod gate;
mod job;
mod native;
mod queue;
pub mod trace;
pub mod waker;

use std::cell::Cell;
use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::ThreadId;
use std::time::Duration;

use pyo3::exceptions::{PyRuntimeError, PyValueError};
use pyo3::intern;
use pyo3::prelude::*;
use pyo3::types::PyDict;

use self::asyncio::AsyncioApi;
pub use self::asyncio::TaskPath;
pub use self::context::RequestContext;
use self::counters::bump;
pub use self::counters::Counters;
use self::driver::{drive, Place};
use self::gate::{GatedSelector, LoopGate};
use self::job::CancelJobWithFuture;
pub use self::job::{Completion, Job, Resume};
use self::native::context_kwargs;
pub use self::native::NativeFuture;
pub use self::native::ResumeVia;
pub use self::queue::LoopStart;
use self::queue::ReadyQueue;
use self::trace::Trace;
use self::waker::{DrainOnLoop, LoopWaker};

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
    loop_thread: ThreadId,
    pub mode: Mode,
    pub budget: u32,
    pub(crate) api: AsyncioApi,
    /// `loop._ready` and `loop._scheduled`, where the loop has them (not uvloop).
    ready: Option<Py<PyAny>>,
    scheduled: Option<Py<PyAny>>,
    pub(crate) queue: ReadyQueue,
    pub(crate) gate: LoopGate,
    pub(crate) waker: Arc<LoopWaker>,
    pub counters: Arc<Counters>,
    pub trace: Trace,
    jobs: Mutex<HashMap<u64, Py<Job>, BuildHasherDefault<JobIdHasher>>>,
    next_id: AtomicU64,
    pub handle: tokio::runtime::Handle,
    runtime: Mutex<Option<tokio::runtime::Runtime>>,
    closed: AtomicBool,
}

/// Hashes job ids, which are unique and come from a counter: one multiply spreads them over
/// the table. The default SipHash cost 300 instructions a request (an insert and a remove).
#[derive(Default)]
struct JobIdHasher(u64);

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
    fn next_job_id(&self) -> u64 {
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

    fn forget_job(&self, id: u64) {
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
    fn handoff(&self, job: Py<Job>, resume: Resume) {
        bump(&self.counters.handoffs);
        job.get().mark_resumable(self.trace.mark());
        self.queue.push(job, resume);
        self.wake();
    }

    /// On the loop thread: run the job's next step in a later loop iteration.
    fn resume_soon_on_loop(&self, py: Python<'_>, job: Py<Job>, resume: Resume) -> PyResult<()> {
        job.get().mark_resumable(self.trace.mark());
        let callback = Py::new(py, ResumeCallback::with_resume(job, resume))?;
        self.api.call_soon.bind(py).call1((callback,))?;
        Ok(())
    }

    /// Resumes `job` soon from a caller that may itself be inside a drive.
    fn resume_later(&self, py: Python<'_>, job: Py<Job>, resume: Resume) -> PyResult<()> {
        if self.on_loop_thread() {
            self.resume_soon_on_loop(py, job, resume)
        } else {
            self.handoff(job, resume);
            Ok(())
        }
    }

    /// `loop.call_soon(callback, arg, context=...)`, thread-safe when off the loop thread.
    fn call_soon_any_thread(
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
    fn drive_on_loop(&self, py: Python<'_>, job: &Bound<'_, Job>, resume: Resume) {
        if self.queue.tokio_driving() {
            bump(&self.counters.deferred_resumes);
            job.get().mark_resumable(self.trace.mark());
            self.queue.push(job.clone().unbind(), resume);
            return;
        }
        drive(py, job, resume, Place::Loop);
    }
}

/// A loop-thread callback that resumes a job: as an asyncio future's done callback (called with
/// the future) or scheduled with `call_soon` (called with nothing, carrying its own input).
#[pyclass(frozen, module = "ferrule._ferrule")]
pub struct ResumeCallback {
    job: Py<Job>,
    resume: Mutex<Option<Resume>>,
}

impl ResumeCallback {
    fn on_future(job: Py<Job>) -> Self {
        Self {
            job,
            resume: Mutex::new(None),
        }
    }

    fn with_resume(job: Py<Job>, resume: Resume) -> Self {
        Self {
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
        let shared = &job.get().shared;
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

/// Drives coroutines for one asyncio loop (see the `.pyi` stub for the Python contract).
#[pyclass(frozen, module = "ferrule._ferrule")]
pub struct Bridge {
    shared: Arc<Shared>,
}

impl Bridge {
    pub fn shared(&self) -> &Arc<Shared> {
        &self.shared
    }

    fn new_job<'py>(
        &self,
        py: Python<'py>,
        coro: &Bound<'py, PyAny>,
    ) -> PyResult<(Bound<'py, Job>, Bound<'py, PyAny>)> {
        if self.shared.closed.load(Ordering::Acquire) {
            return Err(PyRuntimeError::new_err("the bridge is closed"));
        }
        let future = self
            .shared
            .event_loop
            .bind(py)
            .call_method0(intern!(py, "create_future"))?;
        let job = Job::new(
            py,
            &self.shared,
            coro,
            Completion::Future(future.clone().unbind()),
            None,
        )?;
        let job = Bound::new(py, job)?;
        let cancel = CancelJobWithFuture {
            job: job.clone().unbind(),
        };
        future.call_method1(intern!(py, "add_done_callback"), (cancel,))?;
        self.shared.remember_job(&job);
        Ok((job, future))
    }
}

#[pymethods]
impl Bridge {
    #[new]
    #[pyo3(signature = (event_loop, *, budget=128, worker_threads=1, trace=false))]
    fn new(
        py: Python<'_>,
        event_loop: Bound<'_, PyAny>,
        budget: u32,
        worker_threads: usize,
        trace: bool,
    ) -> PyResult<Self> {
        if budget == 0 {
            return Err(PyValueError::new_err("budget must be at least 1"));
        }
        if worker_threads == 0 {
            return Err(PyValueError::new_err("worker_threads must be at least 1"));
        }
        let api = AsyncioApi::new(py, &event_loop)?;
        let ready = event_loop.getattr_opt(intern!(py, "_ready"))?;
        let scheduled = event_loop.getattr_opt(intern!(py, "_scheduled"))?;
        let selector = event_loop.getattr_opt(intern!(py, "_selector"))?;
        let mode = if selector.is_some() && ready.is_some() && scheduled.is_some() {
            Mode::Gated
        } else {
            Mode::LoopOnly
        };
        // In loop-only mode the tokio threads only do I/O for the loop thread, which must not
        // be preempted each time it hands them a response: they run as batch threads. Not in
        // gated mode, where a tokio thread drives the coroutines itself (asyncio's task
        // scenario lost a quarter of its requests/s that way). FERRULE_IO_SCHED=normal opts out.
        let batch = mode == Mode::LoopOnly
            && std::env::var("FERRULE_IO_SCHED").map_or(true, |policy| policy != "normal");
        let counters = Arc::new(Counters::default());
        let waker =
            Arc::new(LoopWaker::new(counters.clone()).map_err(|err| {
                PyRuntimeError::new_err(format!("cannot create an eventfd: {err}"))
            })?);
        let adopted = waker.clone();
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(worker_threads)
            .thread_name("ferrule-tokio")
            .on_thread_start(move || {
                ffi::keep_thread_state();
                waker::adopt_waker(adopted.clone());
                if batch {
                    // Best effort: a system that refuses only costs the switches it saves.
                    let _ = ffi::schedule_this_thread_as_batch();
                }
            })
            .on_thread_park(waker::on_worker_park)
            .on_thread_stop(|| {
                waker::on_worker_park();
                ffi::release_thread_state();
            })
            .enable_all()
            .build()
            .map_err(|err| PyRuntimeError::new_err(format!("cannot start tokio: {err}")))?;
        let shared = Arc::new(Shared {
            event_loop: event_loop.clone().unbind(),
            loop_thread: std::thread::current().id(),
            mode,
            budget,
            api,
            ready: ready.map(Bound::unbind),
            scheduled: scheduled.map(Bound::unbind),
            queue: ReadyQueue::default(),
            gate: LoopGate::default(),
            waker,
            counters,
            trace: Trace::new(trace),
            jobs: Mutex::new(HashMap::default()),
            next_id: AtomicU64::new(1),
            handle: runtime.handle().clone(),
            runtime: Mutex::new(Some(runtime)),
            closed: AtomicBool::new(false),
        });
        let drain = Py::new(
            py,
            DrainOnLoop {
                shared: shared.clone(),
            },
        )?;
        event_loop.call_method1(intern!(py, "add_reader"), (shared.waker.raw_fd(), drain))?;
        if let (Mode::Gated, Some(selector)) = (mode, selector) {
            let gated = GatedSelector {
                inner: selector.unbind(),
                shared: shared.clone(),
            };
            event_loop.setattr(intern!(py, "_selector"), Py::new(py, gated)?)?;
        }
        Ok(Self { shared })
    }

    #[getter(r#loop)]
    fn event_loop(&self, py: Python<'_>) -> Py<PyAny> {
        self.shared.event_loop.clone_ref(py)
    }

    #[getter]
    fn budget(&self) -> u32 {
        self.shared.budget
    }

    #[getter]
    fn mode(&self) -> &'static str {
        self.shared.mode.name()
    }

    #[getter]
    fn task_path(&self) -> &'static str {
        self.shared.api.task_path.name()
    }

    #[getter]
    fn in_flight(&self) -> usize {
        self.shared.in_flight()
    }

    /// Hands `coro` to the bridge; its first drive runs on a tokio thread.
    fn spawn<'py>(&self, py: Python<'py>, coro: Bound<'py, PyAny>) -> PyResult<Bound<'py, PyAny>> {
        let (job, future) = self.new_job(py, &coro)?;
        let job = job.unbind();
        if self.shared.mode == Mode::LoopOnly {
            // No tokio thread may drive: skip the round trip through one.
            bump(&self.shared.counters.handoffs);
            self.shared
                .resume_soon_on_loop(py, job, Resume::Send(py.None()))?;
            return Ok(future);
        }
        let shared = self.shared.clone();
        self.shared.handle.spawn(async move {
            Python::attach(|py| shared.drive_from_tokio(py, job.bind(py), Resume::Send(py.None())));
        });
        Ok(future)
    }

    /// Hands `coro` to the bridge; its first drive runs on the loop thread, in the next iteration.
    fn spawn_on_loop<'py>(
        &self,
        py: Python<'py>,
        coro: Bound<'py, PyAny>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let (job, future) = self.new_job(py, &coro)?;
        self.shared
            .resume_soon_on_loop(py, job.unbind(), Resume::Send(py.None()))?;
        Ok(future)
    }

    /// A native awaitable a tokio timer resolves with `value` after `seconds`.
    #[pyo3(signature = (seconds, value=None))]
    fn sleep(
        &self,
        py: Python<'_>,
        seconds: f64,
        value: Option<Py<PyAny>>,
    ) -> PyResult<Py<NativeFuture>> {
        let delay = Duration::try_from_secs_f64(seconds)
            .map_err(|_| PyValueError::new_err("seconds must be a finite number >= 0"))?;
        let future = Py::new(py, NativeFuture::new(self.shared.clone()))?;
        let resolving = future.clone_ref(py);
        let value = value.unwrap_or_else(|| py.None());
        self.shared.handle.spawn(async move {
            tokio::time::sleep(delay).await;
            Python::attach(|py| {
                NativeFuture::settle(resolving.bind(py), Ok(value), ResumeVia::DriveNow)
            });
        });
        Ok(future)
    }

    /// A native awaitable that is resolved already.
    #[pyo3(signature = (value=None))]
    fn ready(&self, py: Python<'_>, value: Option<Py<PyAny>>) -> PyResult<Py<NativeFuture>> {
        Py::new(
            py,
            NativeFuture::resolved(self.shared.clone(), value.unwrap_or_else(|| py.None())),
        )
    }

    fn counters<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let counters = PyDict::new(py);
        for (name, value) in self.shared.counters.snapshot() {
            counters.set_item(name, value)?;
        }
        Ok(counters)
    }

    /// The trace's histograms (bucket counts by name, and the buckets' upper bounds in ns), or
    /// None when the bridge was made without `trace=True`.
    fn trace<'py>(&self, py: Python<'py>) -> PyResult<Option<Bound<'py, PyDict>>> {
        let trace = &self.shared.trace;
        if !trace.enabled() {
            return Ok(None);
        }
        let histograms = PyDict::new(py);
        histograms.set_item("bucket_upper_ns", trace::bucket_upper_bounds())?;
        for (name, counts) in trace.snapshot() {
            histograms.set_item(name, counts)?;
        }
        Ok(Some(histograms))
    }

    fn reset_counters(&self) {
        self.shared.counters.reset();
    }

    /// Unhooks the bridge from the loop, closes unfinished coroutines, stops tokio. Idempotent.
    fn close(&self, py: Python<'_>) -> PyResult<()> {
        let shared = &self.shared;
        if shared.closed.swap(true, Ordering::AcqRel) {
            return Ok(());
        }
        let event_loop = shared.event_loop.bind(py);
        let loop_open = !event_loop
            .call_method0(intern!(py, "is_closed"))?
            .is_truthy()?;
        if loop_open {
            event_loop.call_method1(intern!(py, "remove_reader"), (shared.waker.raw_fd(),))?;
            if let Some(selector) = event_loop.getattr_opt(intern!(py, "_selector"))? {
                if let Ok(gated) = selector.cast::<GatedSelector>() {
                    event_loop
                        .setattr(intern!(py, "_selector"), gated.get().inner.clone_ref(py))?;
                }
            }
        }
        let unfinished: Vec<Py<Job>> = shared
            .jobs
            .lock()
            .unwrap()
            .drain()
            .map(|(_, job)| job)
            .collect();
        for job in unfinished {
            let _ = job.get().coro.bind(py).call_method0(intern!(py, "close"));
            let cancelled = shared.api.cancelled_error(py, None);
            Job::finish(job.bind(py), Err(PyErr::from_value(cancelled)));
        }
        shared.api.clear_idle_tasks();
        if let Some(runtime) = shared.runtime.lock().unwrap().take() {
            // Wait (without the GIL: tasks being dropped may need it) for tokio's threads to
            // stop, so none of them touches Python after the interpreter starts finalising.
            py.detach(|| runtime.shutdown_timeout(Duration::from_secs(5)));
        }
        Ok(())
    }
}

/// Takes ownership of a descriptor handed over from Python (see `ffi::take_fd`).
pub fn ffi_take_fd<T: std::os::fd::FromRawFd>(fd: std::os::fd::RawFd) -> PyResult<T> {
    Ok(ffi::take_fd(fd)?)
}

/// Registers the bridge's classes and constants on `module`.
pub fn register(module: &Bound<'_, PyModule>) -> PyResult<()> {
    module.add_class::<Bridge>()?;
    module.add_class::<NativeFuture>()?;
    module.add(
        "COUNTERS",
        pyo3::types::PyTuple::new(module.py(), Counters::NAMES)?,
    )?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use pyo3::types::PyModule;

    /// Drives real coroutines through an embedded interpreter: one that completes inline on a
    /// tokio thread and one resumed by an asyncio future on the loop thread.
    #[test]
    fn drives_coroutines_on_an_embedded_interpreter() {
        Python::attach(|py| {
            let module = PyModule::new(py, "ferrule_test").unwrap();
            register(&module).unwrap();
            let globals = PyDict::new(py);
            globals.set_item("ferrule", module).unwrap();
            py.run(
                cr#"
import asyncio

async def inline():
    return 41 + 1

async def through_loop():
    await asyncio.sleep(0.001)
    return asyncio.current_task() is not None

async def main():
    bridge = ferrule.Bridge(asyncio.get_running_loop())
    try:
        results = (await bridge.spawn(inline()), await bridge.spawn(through_loop()))
        return results, bridge.counters(), bridge.mode
    finally:
        bridge.close()

results, counters, mode = asyncio.run(main())
"#,
                Some(&globals),
                None,
            )
            .unwrap();
            let results: (i64, bool) = globals
                .get_item("results")
                .unwrap()
                .unwrap()
                .extract()
                .unwrap();
            assert_eq!(results, (42, true));
            let counters = globals.get_item("counters").unwrap().unwrap();
            let count = |name: &str| -> u64 { counters.get_item(name).unwrap().extract().unwrap() };
            assert_eq!(count("completed"), 2);
            assert_eq!(count("inline_completions"), 1);
            assert_eq!(count("resumes_inline"), 1);
            assert_eq!(count("collisions"), 0);
        });
    }
}
