//! `TaskFactory`: `loop.set_task_factory`'s callable, which makes the app's own tasks
//! (`create_task`, `ensure_future`, task groups, `gather`) jobs the bridge drives.
//!
//! Each is a real `Task` over the app's coroutine (a subclass, `Task` by name), so everything
//! asyncio and libraries read of a task is `Task`'s own: its future state, result, callbacks,
//! name, context, repr, `get_coro()`, `all_tasks()`. Only its steps are the bridge's: the first
//! `__step` that `Task.__init__` schedules is caught before it reaches the loop, and the
//! bridge schedules the job's first drive in its place, with `call_soon` as `Task` does.

use std::sync::Arc;

use pyo3::intern;
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyString};

use super::ffi;
use super::job::Job;
use super::resume::FirstDrive;
use super::shared::Shared;

#[pyclass(frozen, module = "ferrule._ferrule")]
pub struct TaskFactory {
    shared: Arc<Shared>,
    /// A `FirstDrive`'s bound `drive`, which `call_soon` is given for each task.
    first_drive: Py<PyAny>,
}

impl TaskFactory {
    /// What `loop.set_task_factory` is given: the bound `create`, a builtin method, which
    /// Python calls with its arguments as they are; a `__call__` would be handed them packed
    /// into a new tuple and dict on every task.
    pub fn callable(py: Python<'_>, shared: Arc<Shared>) -> PyResult<Bound<'_, PyAny>> {
        let first_drive = FirstDrive::callable(py, shared.clone())?;
        let factory = Self {
            shared,
            first_drive,
        };
        Bound::new(py, factory)?.getattr(intern!(py, "create"))
    }
}

#[pymethods]
impl TaskFactory {
    /// `factory(loop, coro, **kwargs)`, as `loop.create_task` calls it: `name`, `context`,
    /// and on 3.13+ `eager_start`, which are all `Task` takes. Named, not `**kwargs`: with
    /// those, PyO3 would have Python pack every call's arguments into a tuple and a dict.
    #[pyo3(signature = (event_loop, coro, *, name=None, context=None, eager_start=None))]
    fn create<'py>(
        &self,
        py: Python<'py>,
        event_loop: Bound<'py, PyAny>,
        coro: Bound<'py, PyAny>,
        name: Option<Bound<'py, PyAny>>,
        context: Option<Bound<'py, PyAny>>,
        eager_start: Option<Bound<'py, PyAny>>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let shared = &self.shared;
        let eager = match &eager_start {
            Some(eager) => eager.is_truthy()?,
            None => false,
        };
        if !event_loop.is(&shared.event_loop) || eager {
            // Another loop's task, or one asked to start eagerly: asyncio's own, given what
            // came.
            let kwargs = task_kwargs(
                &event_loop,
                [
                    (intern!(py, "name"), name),
                    (intern!(py, "context"), context),
                    (intern!(py, "eager_start"), eager_start),
                ],
            )?;
            return shared.api.stock_task(&coro, Some(&kwargs));
        }
        // The task and the job share one context, as a task's steps all run in its own.
        let context = match context {
            Some(context) => context,
            None => ffi::copy_current_context(py)?,
        };
        let kwargs = task_kwargs(
            &event_loop,
            [
                (intern!(py, "name"), name),
                (intern!(py, "context"), Some(context.clone())),
            ],
        )?;
        let Some((task, own_step)) = shared.api.app_task(py, &coro, &kwargs)? else {
            return shared.api.stock_task(&coro, Some(&kwargs));
        };
        let job = Job::for_app_task(py, shared.next_job_id(), &coro, &task, own_step, context)?;
        let job = Bound::new(py, job)?;
        task.setattr(intern!(py, "_ferrule_job"), &job)?;
        shared.remember_app_task(&job);
        shared.schedule_first_drive(py, job, self.first_drive.bind(py))?;
        Ok(task)
    }
}

/// `Task`'s keywords: the loop, and those of `given` that came.
fn task_kwargs<'py, const N: usize>(
    event_loop: &Bound<'py, PyAny>,
    given: [(&Bound<'py, PyString>, Option<Bound<'py, PyAny>>); N],
) -> PyResult<Bound<'py, PyDict>> {
    let py = event_loop.py();
    let kwargs = PyDict::new(py);
    kwargs.set_item(intern!(py, "loop"), event_loop)?;
    for (key, value) in given {
        if let Some(value) = value {
            kwargs.set_item(key, value)?;
        }
    }
    Ok(kwargs)
}
