//! Log lines written without Python: the access log's fast path writes through here when the
//! access logger is as ferrule configured it (see `asgi::access_route`). Nothing of the server
//! in it:
//! - `line_writer`: `LineWriter`, lines written to a descriptor by a thread of their own,
//!   many to a write, a bounded number waiting when nobody reads;
//! - `json_line`: `JsonLine`, one JSON object a line, its strings escaped by `serde_json`;
//! - `class`: `AccessWriter`, the Python class over a process's `LineWriter`.

mod class;
mod json_line;
mod line_writer;

use pyo3::prelude::*;

pub use self::class::AccessWriter;
pub use self::json_line::JsonLine;
pub use self::line_writer::LineWriter;

/// Registers `AccessWriter` on `module`.
pub fn register(module: &Bound<'_, PyModule>) -> PyResult<()> {
    module.add_class::<AccessWriter>()
}
