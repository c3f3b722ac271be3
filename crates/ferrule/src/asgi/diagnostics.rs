//! `Diagnostics`: the benchmark's hooks, paths the server answers from Rust without the app.

use bytes::Bytes;
use http::{Response, StatusCode};
use pyo3::prelude::*;

use crate::bridge::{self, trace};

use super::responses::server_response;
use super::settings::Settings;

/// The paths answered without calling the app, read from the `Config` attributes of the same
/// names.
#[derive(FromPyObject)]
pub struct Diagnostics {
    /// Answered "Hello, world!": the benchmark's ceiling for the HTTP stack alone
    /// (`--rust-hello-route`).
    pub rust_hello_route: Option<String>,
    /// Answered with the bridge's counters as JSON (`--stats-route`), for the benchmark's
    /// GIL-relay figures.
    pub stats_route: Option<String>,
}

impl Diagnostics {
    /// The hooks `config` asks for; None when it asks for neither, so that a request pays one
    /// check for them all.
    pub fn from_config(config: &Bound<'_, PyAny>) -> PyResult<Option<Self>> {
        let diagnostics: Self = config.extract()?;
        let any = diagnostics.rust_hello_route.is_some() || diagnostics.stats_route.is_some();
        Ok(any.then_some(diagnostics))
    }

    /// The server's own answer for `path`, when it is one of the hooks'.
    pub fn answer<B: From<Bytes>>(
        &self,
        path: &str,
        bridge: &bridge::Shared,
        settings: &Settings,
    ) -> Option<Response<B>> {
        if self.rust_hello_route.as_deref() == Some(path) {
            return Some(rust_hello(settings));
        }
        if self.stats_route.as_deref() == Some(path) {
            return Some(bridge_stats(bridge, settings));
        }
        None
    }
}

/// What the benchmark app's `/hello` answers, made without Python.
fn rust_hello<B: From<Bytes>>(settings: &Settings) -> Response<B> {
    let body = Bytes::from_static(b"Hello, world!");
    server_response(StatusCode::OK, "text/plain", body, settings)
}

/// The bridge's counters as a JSON object, made without Python (so reading them moves none).
fn bridge_stats<B: From<Bytes>>(bridge: &bridge::Shared, settings: &Settings) -> Response<B> {
    let mut fields: Vec<String> = bridge
        .counters
        .snapshot()
        .into_iter()
        .map(|(name, value)| format!("\"{name}\": {value}"))
        .collect();
    let trace = &bridge.trace;
    if trace.enabled() {
        let list = |values: Vec<u64>| {
            let items: Vec<String> = values.iter().map(u64::to_string).collect();
            format!("[{}]", items.join(","))
        };
        let bounds = trace::bucket_upper_bounds();
        let mut histograms = vec![format!("\"bucket_upper_ns\": {}", list(bounds))];
        for (name, counts) in trace.snapshot() {
            histograms.push(format!("\"{name}\": {}", list(counts)));
        }
        fields.push(format!("\"trace\": {{{}}}", histograms.join(", ")));
    }
    let body = format!("{{{}}}", fields.join(", "));
    server_response(StatusCode::OK, "application/json", body.into(), settings)
}
