//! The bridge: drives Python coroutines from Rust, on tokio threads and the asyncio loop thread,
//! with one GIL acquisition for a coroutine that never suspends and two for one resumed by an
//! asyncio future. `docs/design.md` lists the mechanisms and the invariants (I1, I2, ...) the
//! comments refer to.
//!
//! In layers, each file using only those above it in this list:
//! - `ffi`: the only `unsafe`; `counters`: what the bridge counts; `trace`: its latency
//!   histograms; `context`: `RequestContext`, the contextvars each request runs in; `ready`:
//!   finding uvloop's queue of ready callbacks, which Python cannot name; `outbox`: `Outbox`,
//!   the loop thread's handoffs to tokio, sent once per pass of the loop;
//! - `asyncio`: cached asyncio callables and the per-coroutine `DriverTask`;
//! - `job`: one driven coroutine (context, task identity, what it waits on, its completion);
//! - `queue`: `ReadyQueue` and the `tokio_driving` flag; `gate`: `LoopGate`, whether the loop
//!   thread is in `select`; `waker`: the descriptor that wakes the loop thread without the GIL;
//! - `shared`: `Shared`, the state of one bridge, and what needs only it (the jobs in flight,
//!   handing a job to the loop thread, finishing one);
//! - `native`: `NativeFuture`, the awaitable resolved from Rust; `resume`: `ResumeCallback`,
//!   the loop-thread callback that resumes a job, and `FirstDrive`, which starts an app-made
//!   task's; both resume through `Shared`'s driving methods, which `driver` defines;
//! - `driver`: the step loop, classification of yields, and starting and driving jobs on
//!   either thread;
//! - `factory`: `TaskFactory`, `loop.set_task_factory`'s callable, which makes the app's own
//!   tasks jobs;
//! - `drain`: `DrainOnLoop`, the waker's reader on the loop thread; `selector`:
//!   `GatedSelector`, exclusive drives for tokio threads on selector loops;
//! - `class`: `Bridge`, the Python class that makes one bridge and owns its tokio runtime.
//!
//! No Python runs under the bridge's locks (I15): a Python call may let go of the GIL, and a
//! thread holding the GIL may be waiting for the same lock.

mod asyncio;
mod class;
mod context;
mod counters;
mod drain;
mod driver;
mod factory;
mod ffi;
mod gate;
mod job;
mod native;
mod outbox;
mod queue;
mod ready;
mod resume;
mod selector;
mod shared;
pub mod trace;
mod waker;

use pyo3::prelude::*;

pub use self::asyncio::TaskPath;
pub use self::class::Bridge;
pub use self::context::RequestContext;
pub use self::counters::Counters;
pub use self::ffi::{local_utc_offset, open_beneath, take_fd, SharedWords};
pub use self::job::{Completion, Job, Resume};
pub use self::native::NativeFuture;
pub use self::native::ResumeVia;
pub use self::outbox::Handoff;
pub use self::queue::LoopStart;
pub use self::shared::{Mode, Shared};
pub use self::waker::send_held_wakes_if_due;

/// Registers the bridge's classes and constants on `module`.
pub fn register(module: &Bound<'_, PyModule>) -> PyResult<()> {
    module.add_class::<Bridge>()?;
    module.add_class::<NativeFuture>()?;
    module.add_class::<factory::TaskFactory>()?;
    module.add(
        "COUNTERS",
        pyo3::types::PyTuple::new(module.py(), Counters::NAMES)?,
    )?;
    // Whether the tokio threads can run under SCHED_BATCH (Linux only): Python logs its absence.
    module.add("BATCH_POLICY", ffi::HAS_BATCH_POLICY)?;
    Ok(())
}
