//! `Server`: what every connection and request of one server shares.

use std::sync::Arc;

use crate::bridge;
use crate::metrics::WorkerMetrics;

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
    pub diagnostics: Diagnostics,
    /// This process's metrics slot, with `--metrics`.
    pub metrics: Option<WorkerMetrics>,
}
