//! uvloop's queue of ready callbacks, read only for its length: whether anything waits to run
//! before a callback scheduled now would. asyncio's selector loop names it `loop._ready`; uvloop
//! keeps the same kind of deque, which Python cannot name, among the objects the loop holds.

use pyo3::intern;
use pyo3::prelude::*;
use pyo3::types::PyList;

/// The deque of ready callbacks of a loop without `_ready` (uvloop), or `None` if it cannot be
/// found for sure.
///
/// The loop is asked for what it references (`gc.get_referents`, its own traversal); the one
/// deque there that a `call_soon` appends to is its queue. The probe's handle is taken out
/// again at once, so nothing of it runs.
pub fn hidden_ready_queue<'py>(
    event_loop: &Bound<'py, PyAny>,
) -> PyResult<Option<Bound<'py, PyAny>>> {
    let py = event_loop.py();
    let deque = py.import("collections")?.getattr("deque")?;
    let referents = py
        .import("gc")?
        .call_method1("get_referents", (event_loop,))?
        .cast_into::<PyList>()?;
    let mut candidates = Vec::new();
    for referent in referents.iter() {
        if referent.is_instance(&deque)? {
            let len = referent.len()?;
            candidates.push((referent, len));
        }
    }
    if candidates.is_empty() {
        return Ok(None);
    }
    let noop = py.import("builtins")?.getattr("len")?;
    let handle = event_loop.call_method1(intern!(py, "call_soon"), (noop, ()))?;
    let mut found = None;
    for (candidate, len) in candidates {
        let grew = candidate.len()? == len + 1;
        if grew && candidate.get_item(-1)?.is(&handle) {
            candidate.call_method0(intern!(py, "pop"))?;
            found = Some(candidate);
            break;
        }
    }
    handle.call_method0(intern!(py, "cancel"))?;
    Ok(found)
}
