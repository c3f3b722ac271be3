//! The extension module `ferrule._ferrule`: registers the core's classes, nothing more.
use pyo3::prelude::*;

#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[pymodule(gil_used = true)]
fn _ferrule(module: &Bound<'_, PyModule>) -> PyResult<()> {
    module.add("__version__", env!("CARGO_PKG_VERSION"))?;
    ferrule::bridge::register(module)?;
    ferrule::http::register(module)
}
