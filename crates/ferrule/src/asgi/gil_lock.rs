//! `lock`: a mutex a request's Python callables and its tokio tasks share, taken so that the two
//! never wait for each other across the GIL.
//!
//! A holder of such a lock may let go of the GIL and wait to get it back (any Python call may;
//! so does the first use of an interned string), so a thread that held the GIL while it waited
//! for the lock would deadlock with it (I15 in `docs/design.md`).

use std::sync::{Mutex, MutexGuard};

use pyo3::sync::MutexExt;
use pyo3::Python;

/// Locks `mutex`; `py` when the caller holds the GIL, which it then lets go of while it waits
/// (a free lock costs what `Mutex::lock` does).
pub(crate) fn lock<'a, T>(mutex: &'a Mutex<T>, py: Option<Python<'_>>) -> MutexGuard<'a, T> {
    match py {
        Some(py) => mutex.lock_py_attached(py),
        None => mutex.lock(),
    }
    .unwrap()
}
