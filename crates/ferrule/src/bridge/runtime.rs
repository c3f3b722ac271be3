//! The tokio runtime handle as a thread-local the bridge sets itself.
//!
//! Loop-thread callbacks run inside asyncio's `_run_once`, outside any tokio context, yet code
//! they drive (a native awaitable's timer, a body channel's backpressure) must spawn tokio tasks.
//! Every loop-thread entry point calls `set_current` first (invariant I12) instead of relying on
//! `Handle::enter` guards whose lifetime is easy to get wrong.

use std::cell::RefCell;

use pyo3::exceptions::PyRuntimeError;
use pyo3::PyResult;
use tokio::runtime::Handle;

thread_local! {
    static CURRENT: RefCell<Option<Handle>> = const { RefCell::new(None) };
}

/// Makes `handle` this thread's runtime for `spawn`. Idempotent and cheap.
pub fn set_current(handle: &Handle) {
    CURRENT.with(|current| {
        let mut current = current.borrow_mut();
        let same = current.as_ref().is_some_and(|h| h.id() == handle.id());
        if !same {
            *current = Some(handle.clone());
        }
    });
}

/// Spawns `future` on this thread's runtime: the one set with `set_current`, else the tokio
/// runtime whose worker this is.
pub fn spawn<F>(future: F) -> PyResult<()>
where
    F: std::future::Future<Output = ()> + Send + 'static,
{
    let handle = CURRENT
        .with(|current| current.borrow().clone())
        .or_else(|| Handle::try_current().ok())
        .ok_or_else(|| PyRuntimeError::new_err("ferrule: no tokio runtime on this thread"))?;
    handle.spawn(future);
    Ok(())
}
