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
use pyo3::types::PyDict;

use super::ffi;
use super::job::Job;
use super::shared::Shared;

#[pyclass(frozen, module = "ferrule._ferrule")]
pub struct TaskFactory {
    shared: Arc<Shared>,
}

impl TaskFactory {
    pub fn new(shared: Arc<Shared>) -> Self {
        Self { shared }
    }
}

#[pymethods]
impl TaskFactory {
    /// `factory(loop, coro, **kwargs)`, as `loop.create_task` calls it: `name`, `context`,
    /// and on 3.14 `eager_start`.
    #[pyo3(signature = (event_loop, coro, **kwargs))]
    fn __call__<'py>(
        &self,
        py: Python<'py>,
        event_loop: Bound<'py, PyAny>,
        coro: Bound<'py, PyAny>,
        kwargs: Option<Bound<'py, PyDict>>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let shared = &self.shared;
        let task_kwargs = match &kwargs {
            Some(kwargs) => kwargs.copy()?,
            None => PyDict::new(py),
        };
        task_kwargs.set_item(intern!(py, "loop"), &event_loop)?;
        let eager = match task_kwargs.get_item(intern!(py, "eager_start"))? {
            Some(eager) => eager.is_truthy()?,
            None => false,
        };
        if !event_loop.is(&shared.event_loop) || eager {
            // Another loop's task, or one asked to start eagerly: asyncio's own.
            return shared.api.stock_task(&coro, Some(&task_kwargs));
        }
        // The task and the job share one context, as a task's steps all run in its own.
        let context = match task_kwargs.get_item(intern!(py, "context"))? {
            Some(context) if !context.is_none() => context,
            _ => {
                let copied = ffi::copy_current_context(py)?;
                task_kwargs.set_item(intern!(py, "context"), &copied)?;
                copied
            }
        };
        let Some((task, own_step)) = shared.api.app_task(py, &coro, &task_kwargs)? else {
            return shared.api.stock_task(&coro, Some(&task_kwargs));
        };
        let job = Job::for_app_task(py, shared.next_job_id(), &coro, &task, own_step, context)?;
        let job = Bound::new(py, job)?;
        task.setattr(intern!(py, "_ferrule_job"), &job)?;
        shared.remember_app_task(&job);
        shared.schedule_first_drive(py, job)?;
        Ok(task)
    }
}
