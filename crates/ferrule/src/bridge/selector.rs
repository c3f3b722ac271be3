//! `GatedSelector`: wraps a selector event loop's `_selector` so a tokio thread drives only while
//! the loop thread is blocked in `select`, and the loop thread runs no callback until that drive
//! is over. This closes the check-then-act window the `tokio_driving` flag alone leaves on
//! 3.11-3.13, where one current-task table per loop is shared by all threads.
//!
//! Both sides change state only with the GIL held and with no Python bytecode between check and
//! set, so the GIL makes each check-and-set atomic:
//! - the loop thread marks `in_select` before calling the real `select`, and on return clears it
//!   (no new tokio drive can start) and then waits, without the GIL, for a drive in progress;
//! - a tokio thread claims the drive slot only if `in_select` is set (`Shared::try_begin_tokio_drive`).
//!
//! The Python code the real selector runs after `poll` returns can interleave with a tokio drive,
//! but it never enters a task, which is the one thing that collides.

use std::sync::Arc;

use pyo3::prelude::*;
use pyo3::types::PyString;

use super::shared::Shared;

#[pyclass(frozen, module = "ferrule._ferrule")]
pub struct GatedSelector {
    pub(crate) inner: Py<PyAny>,
    pub(crate) shared: Arc<Shared>,
}

#[pymethods]
impl GatedSelector {
    #[pyo3(signature = (timeout=None))]
    fn select(&self, py: Python<'_>, timeout: Option<Bound<'_, PyAny>>) -> PyResult<Py<PyAny>> {
        let gate = &self.shared.gate;
        gate.set_in_select(true);
        let events = self.inner.call_method1(py, "select", (timeout,));
        gate.set_in_select(false);
        let queue = &self.shared.queue;
        if queue.tokio_driving() {
            py.detach(|| queue.wait_tokio_drive_done());
        }
        events
    }

    /// Everything else (`register`, `modify`, `get_key`, `close`, ...) is the real selector's.
    fn __getattr__(&self, py: Python<'_>, name: Bound<'_, PyString>) -> PyResult<Py<PyAny>> {
        Ok(self.inner.bind(py).getattr(name)?.unbind())
    }
}
