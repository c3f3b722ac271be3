//! The extension module `ferrule._ferrule`: registers the core's classes, and sets the allocator's one option.
use pyo3::prelude::*;

mod ffi;

/// The Rust side's allocations (hyper's buffers, tokio's tasks, the bridge's jobs): glibc's
/// malloc and free were 7% of a request's instructions, mimalloc's are about a third of that.
/// It costs about 7 MB more resident memory per worker, flat under load (`benches/soak.py`).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[pymodule(gil_used = true)]
fn _ferrule(module: &Bound<'_, PyModule>) -> PyResult<()> {
    ffi::purge_freed_memory_at_once();
    module.add("__version__", env!("CARGO_PKG_VERSION"))?;
    ferrule::bridge::register(module)?;
    ferrule::asgi::register(module)?;
    ferrule::metrics::register(module)?;
    ferrule::logs::register(module)?;
    ferrule::h3::register(module)?;
    ferrule::tcp::register(module)
}
