//! `MetricsRegion`, the Python class over a region: the parent claims and releases slots and
//! encodes a scrape; a worker hands its slot to `HttpServer`.

use std::collections::HashMap;
use std::os::fd::RawFd;
use std::sync::Arc;

use pyo3::exceptions::{PyRuntimeError, PyValueError};
use pyo3::prelude::*;

use crate::bridge::take_fd;

use super::exposition::{encode, Process};
use super::layout::SLOT_BYTES;
use super::region::Region;

#[pyclass(frozen, module = "ferrule._ferrule")]
pub struct MetricsRegion {
    pub(crate) region: Arc<Region>,
}

#[pymethods]
impl MetricsRegion {
    /// Maps the memfd `fd` (ownership passes to the region; the mapping outlives it), whose
    /// size is `MetricsRegion.size_for(slots)`.
    #[new]
    fn new(fd: RawFd) -> PyResult<Self> {
        let file: std::fs::File = take_fd(fd)?;
        let region = Region::new(file).map_err(|err| PyValueError::new_err(err.to_string()))?;
        Ok(Self {
            region: Arc::new(region),
        })
    }

    /// The bytes a region of `slots` slots takes.
    #[staticmethod]
    fn size_for(slots: usize) -> usize {
        slots * SLOT_BYTES
    }

    /// The `Content-Type` of `encode`'s text: Prometheus text format 0.0.4.
    #[classattr]
    const CONTENT_TYPE: &'static str = prometheus_client::encoding::prometheus_text::CONTENT_TYPE;

    #[getter]
    fn slots(&self) -> usize {
        self.region.slots()
    }

    /// A free slot for a worker about to start, or None if every slot is taken.
    fn claim(&self) -> Option<usize> {
        self.region.claim()
    }

    /// Frees the slot of a worker that has exited; its counts stay in the totals.
    fn release(&self, slot: usize) {
        self.region.release(slot);
    }

    /// The pids of the workers attached to a claimed slot.
    fn pids(&self) -> Vec<u32> {
        self.region.totals().pids
    }

    /// The scrape: every slot summed, with `processes` (pid, resident bytes, open descriptors)
    /// and `restarts` (reason to count), as Prometheus text.
    fn encode(
        &self,
        py: Python<'_>,
        processes: Vec<(u32, u64, u64)>,
        restarts: HashMap<String, u64>,
    ) -> PyResult<String> {
        let processes: Vec<Process> = processes
            .into_iter()
            .map(|(pid, rss_bytes, open_fds)| Process {
                pid,
                rss_bytes,
                open_fds,
            })
            .collect();
        let mut restarts: Vec<(String, u64)> = restarts.into_iter().collect();
        restarts.sort();
        let region = &self.region;
        py.detach(|| encode(&region.totals(), &processes, &restarts))
            .map_err(|_| PyRuntimeError::new_err("encoding the metrics failed"))
    }
}
