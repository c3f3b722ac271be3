//! `Server`: what every connection and request of one server shares.

use std::sync::Arc;

use pyo3::prelude::*;

use crate::bridge;
use crate::metrics::WorkerMetrics;

use super::access_log::AccessLog;
use super::access_route::{AccessPath, AccessRoute};
use super::diagnostics::Diagnostics;
use super::handles::PyHandles;
use super::live::LiveState;
use super::settings::Settings;

/// One server: the bridge it runs on, its settings, the Python objects it uses, what changes
/// as it runs, and the benchmark's hooks. Shared (`Arc`) by every connection and request.
pub struct Server {
    pub bridge: Arc<bridge::Shared>,
    pub settings: Settings,
    pub py: PyHandles,
    pub state: LiveState,
    /// Which way access lines go, switched by Python as the logging setup changes.
    pub access: AccessRoute,
    pub diagnostics: Option<Diagnostics>,
    /// This process's metrics slot, with `--metrics`.
    pub metrics: Option<WorkerMetrics>,
}

impl Server {
    /// Where its access lines go; None when access logging is off, or INFO not taken.
    pub fn access_log(&self) -> Option<AccessLog<'_>> {
        let logger = self.py.access_logger.as_ref()?;
        let fast = match self.access.path() {
            AccessPath::Off => return None,
            AccessPath::Logging => None,
            AccessPath::Fast => self.access.fast(),
        };
        Some(AccessLog {
            logger,
            format: self.settings.access_log_format.as_ref(),
            fast,
            json: self.settings.log_json,
            headers: &self.settings.access_log_headers,
            fields: self.access.fields(),
        })
    }

    /// The graceful timeout has passed: every app coroutine still running is cancelled, and
    /// said so.
    pub fn cancel_running(&self) {
        Python::attach(|py| {
            let running = self.state.in_flight();
            if running > 0 {
                let line =
                    format!("Cancel {running} running task(s), timeout graceful shutdown exceeded");
                let _ = self
                    .py
                    .error_logger
                    .bind(py)
                    .call_method1(pyo3::intern!(py, "error"), (line,));
            }
            self.bridge.cancel_all(py);
        });
    }
}
