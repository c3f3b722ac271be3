//! `RequestContext`: the `contextvars` context each request's coroutine runs in.

use pyo3::prelude::*;

use super::ffi;

/// What every request starts from: a copy of the context the server was made in (so, as under
/// uvicorn and granian, a variable set when the app module was imported is seen by every
/// request, on either loop), or an empty one (`reset_contextvars`, uvicorn's
/// `--reset-contextvars`). Each request gets its own copy: what one sets, no other sees.
pub struct RequestContext {
    base: Py<PyAny>,
}

impl RequestContext {
    pub fn new(py: Python<'_>, reset: bool) -> PyResult<Self> {
        let base = if reset {
            py.import("contextvars")?.getattr("Context")?.call0()?
        } else {
            ffi::copy_current_context(py)?
        };
        Ok(Self {
            base: base.unbind(),
        })
    }

    /// Runs `call` (calling the app, which may run code before its first `await`) in a new
    /// copy of the base, and returns that copy too: the request's coroutine goes on in it.
    pub fn run<'py, T>(
        &self,
        py: Python<'py>,
        call: impl FnOnce() -> PyResult<T>,
    ) -> PyResult<(T, Bound<'py, PyAny>)> {
        let context = ffi::copy_context(self.base.bind(py))?;
        ffi::enter_context(&context)?;
        let called = call();
        let exited = ffi::exit_context(&context);
        let called = called?;
        exited?;
        Ok((called, context))
    }
}
