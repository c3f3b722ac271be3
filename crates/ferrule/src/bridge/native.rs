//! `NativeFuture`: ferrule's own awaitable, resolved from Rust.
//!
//! A driven coroutine that awaits one suspends without the asyncio loop taking part: the driver
//! recognises the type, registers the job as its waiter, and whoever resolves the future resumes
//! the job directly. Plain asyncio tasks (a Starlette task group, `asyncio.wait_for`) may await it
//! too, so it also speaks the asyncio future protocol (`_asyncio_future_blocking`,
//! `add_done_callback`, `result`, `cancel`, `get_loop`).

use std::sync::{Arc, Mutex};

use pyo3::exceptions::{PyStopIteration, PyValueError};
use pyo3::prelude::*;

use super::job::{Job, Resume};
use super::shared::Shared;

/// How a resolved future gets its waiting job going again.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum ResumeVia {
    /// Drive it now: the caller is a tokio task at top level, no coroutine is being driven here.
    DriveNow,
    /// Schedule it: the caller may be inside another coroutine's drive (a `cancel()` from Python).
    Schedule,
}

enum Waiter {
    Nobody,
    Job(Py<Job>),
    Callbacks(Vec<(Py<PyAny>, Option<Py<PyAny>>)>),
}

/// `Ok(value)` or `Err(exception)`.
type Outcome = Result<Py<PyAny>, Py<PyAny>>;

struct NativeState {
    /// Set once resolved.
    outcome: Option<Outcome>,
    cancelled: bool,
    waiter: Waiter,
    blocking: bool,
}

#[pyclass(frozen, module = "ferrule._ferrule")]
pub struct NativeFuture {
    shared: Arc<Shared>,
    state: Mutex<NativeState>,
}

impl NativeFuture {
    pub fn new(shared: Arc<Shared>) -> Self {
        Self {
            shared,
            state: Mutex::new(NativeState {
                outcome: None,
                cancelled: false,
                waiter: Waiter::Nobody,
                blocking: false,
            }),
        }
    }

    /// The outcome, if set, and whether it is a cancellation: cloned, so that no Python runs
    /// under the lock (see `bridge`'s index on locks and the GIL).
    fn outcome(&self, py: Python<'_>) -> (Option<Outcome>, bool) {
        let state = self.state.lock().unwrap();
        let outcome = state.outcome.as_ref().map(|outcome| {
            outcome
                .as_ref()
                .map(|v| v.clone_ref(py))
                .map_err(|e| e.clone_ref(py))
        });
        (outcome, state.cancelled)
    }

    pub fn resolved(shared: Arc<Shared>, value: Py<PyAny>) -> Self {
        let future = Self::new(shared);
        future.state.lock().unwrap().outcome = Some(Ok(value));
        future
    }

    /// For the driver: true if resolved, else `job` becomes the waiter. Either way the job's
    /// next input is `None`: the coroutine re-enters `__next__`, which returns or raises the
    /// outcome, as asyncio's future iterator does.
    pub fn ready_or_wait(&self, job: &Bound<'_, Job>) -> bool {
        let mut state = self.state.lock().unwrap();
        state.blocking = false;
        if state.outcome.is_some() {
            return true;
        }
        state.waiter = Waiter::Job(job.clone().unbind());
        false
    }

    /// Sets the outcome (first call wins) and resumes whoever waits. Returns false if already set.
    pub fn resolve(
        slf: &Bound<'_, Self>,
        outcome: Result<Py<PyAny>, Py<PyAny>>,
        cancelled: bool,
        via: ResumeVia,
    ) -> PyResult<bool> {
        let py = slf.py();
        let this = slf.get();
        let waiter = {
            let mut state = this.state.lock().unwrap();
            if state.outcome.is_some() {
                return Ok(false);
            }
            state.outcome = Some(
                outcome
                    .as_ref()
                    .map(|v| v.clone_ref(py))
                    .map_err(|e| e.clone_ref(py)),
            );
            state.cancelled = cancelled;
            std::mem::replace(&mut state.waiter, Waiter::Nobody)
        };
        let shared = &this.shared;
        match waiter {
            Waiter::Nobody => {}
            Waiter::Job(job) => {
                let resume = Resume::Send(py.None());
                job.get().clear_waiting();
                job.get().mark_resumable(shared.trace.mark());
                match via {
                    ResumeVia::DriveNow => shared.drive_from_tokio(py, job.bind(py), resume),
                    ResumeVia::Schedule => shared.resume_later(py, job, resume)?,
                }
            }
            Waiter::Callbacks(callbacks) => {
                for (callback, context) in callbacks {
                    shared.call_soon_any_thread(py, callback.bind(py), slf.as_any(), context)?;
                }
            }
        }
        Ok(true)
    }

    /// `resolve` for callers that cannot propagate an error (tokio tasks, waiters resolved in
    /// passing): `Err` in `result` becomes the exception the awaiter sees, and a failure to
    /// resume the waiter is reported through `sys.unraisablehook`.
    pub fn settle(slf: &Bound<'_, Self>, result: PyResult<Py<PyAny>>, via: ResumeVia) {
        let py = slf.py();
        let outcome = result.map_err(|err| err.into_value(py).into_any());
        if let Err(err) = Self::resolve(slf, outcome, false, via) {
            err.write_unraisable(py, None);
        }
    }

    pub fn cancel_with(slf: &Bound<'_, Self>, msg: Option<Py<PyAny>>) -> PyResult<bool> {
        let py = slf.py();
        let error = slf
            .get()
            .shared
            .api
            .cancelled_error(py, msg.as_ref())
            .unbind();
        Self::resolve(slf, Err(error), true, ResumeVia::Schedule)
    }
}

#[pymethods]
impl NativeFuture {
    fn __await__(slf: Bound<'_, Self>) -> Bound<'_, Self> {
        slf
    }

    fn __iter__(slf: Bound<'_, Self>) -> Bound<'_, Self> {
        slf
    }

    /// `send(value)` as on asyncio's future iterator: the value is ignored.
    fn send(slf: &Bound<'_, Self>, _value: Bound<'_, PyAny>) -> PyResult<Py<PyAny>> {
        Self::__next__(slf)
    }

    /// Raises the thrown exception where the awaiting coroutine is suspended.
    #[pyo3(signature = (exception, _value=None, _traceback=None))]
    fn throw(
        &self,
        exception: Bound<'_, PyAny>,
        _value: Option<Bound<'_, PyAny>>,
        _traceback: Option<Bound<'_, PyAny>>,
    ) -> PyResult<()> {
        let exception = if exception.is_instance_of::<pyo3::types::PyType>() {
            exception.call0()?
        } else {
            exception
        };
        Err(PyErr::from_value(exception))
    }

    /// Yields itself until resolved, then returns the value (as `StopIteration`) or raises.
    fn __next__(slf: &Bound<'_, Self>) -> PyResult<Py<PyAny>> {
        let py = slf.py();
        let mut state = slf.get().state.lock().unwrap();
        match &state.outcome {
            None => {
                state.blocking = true;
                Ok(slf.clone().into_any().unbind())
            }
            Some(Ok(value)) => Err(PyStopIteration::new_err((value.clone_ref(py),))),
            Some(Err(error)) => Err(PyErr::from_value(error.bind(py).clone())),
        }
    }

    #[getter(_asyncio_future_blocking)]
    fn asyncio_future_blocking(&self) -> bool {
        self.state.lock().unwrap().blocking
    }

    #[setter(_asyncio_future_blocking)]
    fn set_asyncio_future_blocking(&self, value: bool) -> PyResult<()> {
        if value {
            return Err(PyValueError::new_err(
                "_asyncio_future_blocking can only be set to False",
            ));
        }
        self.state.lock().unwrap().blocking = false;
        Ok(())
    }

    fn done(&self) -> bool {
        self.state.lock().unwrap().outcome.is_some()
    }

    fn cancelled(&self) -> bool {
        self.state.lock().unwrap().cancelled
    }

    fn result(&self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        match self.outcome(py).0 {
            Some(Ok(value)) => Ok(value),
            Some(Err(error)) => Err(PyErr::from_value(error.into_bound(py))),
            None => Err(PyErr::from_value(
                self.shared
                    .api
                    .invalid_state_error
                    .bind(py)
                    .call1(("Result is not set.",))?,
            )),
        }
    }

    fn exception(&self, py: Python<'_>) -> PyResult<Option<Py<PyAny>>> {
        let (outcome, cancelled) = self.outcome(py);
        match outcome {
            Some(Ok(_)) => Ok(None),
            Some(Err(error)) if cancelled => Err(PyErr::from_value(error.into_bound(py))),
            Some(Err(error)) => Ok(Some(error)),
            None => Err(PyErr::from_value(
                self.shared
                    .api
                    .invalid_state_error
                    .bind(py)
                    .call1(("Exception is not set.",))?,
            )),
        }
    }

    #[pyo3(signature = (msg=None))]
    fn cancel(slf: &Bound<'_, Self>, msg: Option<Py<PyAny>>) -> PyResult<bool> {
        Self::cancel_with(slf, msg)
    }

    fn get_loop(&self, py: Python<'_>) -> Py<PyAny> {
        self.shared.event_loop.clone_ref(py)
    }

    #[pyo3(signature = (fn_, *, context=None))]
    fn add_done_callback(
        slf: &Bound<'_, Self>,
        fn_: Py<PyAny>,
        context: Option<Py<PyAny>>,
    ) -> PyResult<()> {
        let py = slf.py();
        let this = slf.get();
        {
            let mut state = this.state.lock().unwrap();
            if state.outcome.is_none() {
                match &mut state.waiter {
                    Waiter::Callbacks(callbacks) => callbacks.push((fn_, context)),
                    Waiter::Nobody => state.waiter = Waiter::Callbacks(vec![(fn_, context)]),
                    Waiter::Job(_) => {
                        return Err(pyo3::exceptions::PyRuntimeError::new_err(
                            "a NativeFuture awaited by a driven coroutine takes no callbacks",
                        ))
                    }
                }
                return Ok(());
            }
        }
        this.shared
            .call_soon_any_thread(py, fn_.bind(py), slf.as_any(), context)
    }

    fn remove_done_callback(&self, py: Python<'_>, fn_: Bound<'_, PyAny>) -> PyResult<usize> {
        // Compared outside the lock (`==` may run Python), then removed by identity.
        let listed: Vec<Py<PyAny>> = match &self.state.lock().unwrap().waiter {
            Waiter::Callbacks(callbacks) => {
                callbacks.iter().map(|(c, _)| c.clone_ref(py)).collect()
            }
            _ => return Ok(0),
        };
        let mut equal = Vec::new();
        for callback in &listed {
            if callback.bind(py).eq(&fn_)? {
                equal.push(callback.as_ptr());
            }
        }
        if equal.is_empty() {
            return Ok(0);
        }
        let mut state = self.state.lock().unwrap();
        let Waiter::Callbacks(callbacks) = &mut state.waiter else {
            return Ok(0);
        };
        let before = callbacks.len();
        callbacks.retain(|(callback, _)| !equal.contains(&callback.as_ptr()));
        Ok(before - callbacks.len())
    }

    fn __repr__(&self) -> String {
        let state = self.state.lock().unwrap();
        let status = match (&state.outcome, state.cancelled) {
            (None, _) => "pending",
            (Some(_), true) => "cancelled",
            (Some(Ok(_)), false) => "finished",
            (Some(Err(_)), false) => "failed",
        };
        format!("<NativeFuture {status}>")
    }
}
