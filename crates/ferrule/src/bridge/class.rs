//! `Bridge`, the Python class: one bridge per asyncio loop, its tokio runtime, and what Python
//! asks of it (spawn, sleep, counters, close).

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use pyo3::exceptions::{PyRuntimeError, PyValueError};
use pyo3::intern;
use pyo3::prelude::*;
use pyo3::types::PyDict;

use super::asyncio::AsyncioApi;
use super::counters::{bump, Counters};
use super::drain::DrainOnLoop;
use super::factory::TaskFactory;
use super::ffi;
use super::gate::LoopGate;
use super::job::{CancelJobWithFuture, Completion, Job, Resume};
use super::native::{NativeFuture, ResumeVia};
use super::outbox::Outbox;
use super::queue::ReadyQueue;
use super::ready;
use super::selector::GatedSelector;
use super::shared::{Mode, Shared};
use super::trace::{self, Trace};
use super::waker::{self, LoopWaker};

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
            self.shared.next_job_id(),
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
    #[pyo3(signature = (event_loop, *, budget=128, worker_threads=1, trace=false, mode="auto"))]
    fn new(
        py: Python<'_>,
        event_loop: Bound<'_, PyAny>,
        budget: u32,
        worker_threads: usize,
        trace: bool,
        mode: &str,
    ) -> PyResult<Self> {
        if budget == 0 {
            return Err(PyValueError::new_err("budget must be at least 1"));
        }
        if worker_threads == 0 {
            return Err(PyValueError::new_err("worker_threads must be at least 1"));
        }
        let api = AsyncioApi::new(py, &event_loop)?;
        let ready = event_loop.getattr_opt(intern!(py, "_ready"))?;
        // Only ever read to take a shortcut that is taken only when it is known to be safe: a
        // loop whose queue cannot be probed goes without it.
        let ready_callbacks = match &ready {
            Some(ready) => Some(ready.clone()),
            None => ready::hidden_ready_queue(&event_loop).ok().flatten(),
        };
        let scheduled = event_loop.getattr_opt(intern!(py, "_scheduled"))?;
        let selector = event_loop.getattr_opt(intern!(py, "_selector"))?;
        let gateable = selector.is_some() && ready.is_some() && scheduled.is_some();
        let mode =
            match (mode, gateable) {
                ("auto" | "gated", true) => Mode::Gated,
                ("auto", false) | ("loop-only", _) => Mode::LoopOnly,
                ("gated", false) => return Err(PyValueError::new_err(
                    "gated mode needs asyncio's selector event loop (this loop has no selector)",
                )),
                (other, _) => {
                    return Err(PyValueError::new_err(format!(
                        "mode must be 'auto', 'gated' or 'loop-only', not {other:?}"
                    )))
                }
            };
        // In loop-only mode the tokio threads only do I/O for the loop thread, which must not
        // be preempted each time it hands them a response: they run as batch threads. Not in
        // gated mode, where a tokio thread drives the coroutines itself (asyncio's task
        // scenario lost a quarter of its requests/s that way). FERRULE_IO_SCHED=normal opts out.
        let batch = mode == Mode::LoopOnly
            && std::env::var("FERRULE_IO_SCHED").map_or(true, |policy| policy != "normal");
        let counters = Arc::new(Counters::default());
        let waker = Arc::new(LoopWaker::new(counters.clone()).map_err(|err| {
            PyRuntimeError::new_err(format!(
                "cannot create the loop thread's wake descriptor: {err}"
            ))
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
            ready_callbacks: ready_callbacks.map(Bound::unbind),
            ready: ready.map(Bound::unbind),
            scheduled: scheduled.map(Bound::unbind),
            queue: ReadyQueue::default(),
            gate: LoopGate::default(),
            waker,
            outbox: Outbox::new(runtime.handle()),
            counters,
            trace: Trace::new(trace),
            jobs: Mutex::new(HashMap::default()),
            app_tasks: Mutex::new(HashMap::default()),
            next_first_drives: Mutex::new(std::collections::VecDeque::new()),
            loop_exit: Mutex::new(None),
            loop_exit_set: AtomicBool::new(false),
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

    /// A task factory for `loop.set_task_factory`: the app's tasks on this bridge's loop are
    /// driven by the bridge (see `factory`). A bound method of a `TaskFactory`.
    fn task_factory<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        TaskFactory::callable(py, self.shared.clone())
    }

    /// App-made tasks the bridge drives that have not finished.
    #[getter]
    fn app_tasks(&self) -> usize {
        self.shared.app_tasks.lock().unwrap().len()
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
            shared.finish(job.bind(py), Err(PyErr::from_value(cancelled)));
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bridge::register;
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
