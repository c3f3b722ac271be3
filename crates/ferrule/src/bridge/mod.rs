//! The bridge: drives Python coroutines from Rust, on tokio threads and the asyncio loop thread,
//! with one GIL acquisition for a coroutine that never suspends and two for one resumed by an
//! asyncio future. `docs/design.md` lists the mechanisms and the invariants (I1, I2, ...) the
//! comments refer to.
//!
//! - `shared`: `Shared`, the state of one bridge, and how a job starts and is handed around.
//! - `class`: `Bridge`, the Python class that makes one bridge and owns its tokio runtime.
//! - `driver`: the step loop and classification of yields.
//! - `resume`: `ResumeCallback`, the loop-thread callback that resumes a job.
//! - `job`: one driven coroutine (context, task identity, what it waits on, its completion).
//! - `asyncio`: cached asyncio callables and the per-coroutine `DriverTask`.
//! - `native`: `NativeFuture`, the awaitable resolved from Rust.
//! - `context`: `RequestContext`, the contextvars each request runs in.
//! - `queue`: `ReadyQueue` and the `tokio_driving` flag.
//! - `gate`: `GatedSelector`, exclusive drives for tokio threads on selector loops.
//! - `waker`: the eventfd that wakes the loop thread without the GIL.
//! - `counters`: what the bridge counts; `ffi`: the only `unsafe`.

mod asyncio;
mod class;
mod context;
mod counters;
mod driver;
mod ffi;
mod gate;
mod job;
mod native;
mod queue;
mod resume;
mod shared;
pub mod trace;
pub mod waker;

use pyo3::prelude::*;

pub use self::asyncio::TaskPath;
pub use self::class::Bridge;
pub use self::context::RequestContext;
pub use self::counters::Counters;
pub use self::ffi::{take_fd, SharedWords};
pub use self::job::{Completion, Job, Resume};
pub use self::native::NativeFuture;
pub use self::native::ResumeVia;
pub use self::queue::LoopStart;
pub use self::shared::{Mode, Shared};

/// Registers the bridge's classes and constants on `module`.
pub fn register(module: &Bound<'_, PyModule>) -> PyResult<()> {
    module.add_class::<Bridge>()?;
    module.add_class::<NativeFuture>()?;
    module.add(
        "COUNTERS",
        pyo3::types::PyTuple::new(module.py(), Counters::NAMES)?,
    )?;
    Ok(())
}
