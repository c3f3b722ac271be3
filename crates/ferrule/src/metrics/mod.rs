//! Prometheus metrics (`--metrics`), summed over every worker process with no IPC at scrape
//! time: the parent maps one shared region with a fixed-layout slot per worker; each worker
//! adds to its own slot with relaxed atomics; the parent sums the slots and encodes them.
//!
//! - `layout`: where each figure sits in a slot, and the histograms' buckets;
//! - `region`: `Region`, the mapped slots, which ones are handed out, and the counts of
//!   workers gone;
//! - `recorder`: `WorkerMetrics`, what a worker's server writes into its slot;
//! - `exposition`: the summed slots in the Prometheus text format (`prometheus-client`);
//! - `class`: `MetricsRegion`, the Python class over a region.
//!
//! It builds on `bridge` alone (its counters and trace); `asgi` and `http` record into it.

mod class;
mod exposition;
mod layout;
mod recorder;
mod region;

use pyo3::prelude::*;

pub use self::class::MetricsRegion;
pub use self::layout::Protocol;
pub use self::recorder::WorkerMetrics;

/// Registers `MetricsRegion` on `module`.
pub fn register(module: &Bound<'_, PyModule>) -> PyResult<()> {
    module.add_class::<MetricsRegion>()
}
