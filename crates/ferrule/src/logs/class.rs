//! `AccessWriter`, the Python class: the one `LineWriter` of a process's access lines, made
//! by Python's logging setup and handed to each server that takes the fast path.

use std::fs::File;
use std::os::fd::RawFd;
use std::sync::Arc;
use std::time::Duration;

use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;

use crate::bridge::take_fd;

use super::json_line::JsonLine;
use super::line_writer::{LineWriter, PIPE_BUF};

#[pyclass(frozen, module = "ferrule._ferrule")]
pub struct AccessWriter {
    pub writer: Arc<LineWriter>,
}

#[pymethods]
impl AccessWriter {
    /// Writes to `fd` (ownership passes here: give it a duplicate), holding at most `limit`
    /// bytes of lines while nobody reads; `json`: the line reporting dropped lines is a JSON
    /// object, as the others.
    #[new]
    #[pyo3(signature = (fd, limit, *, json=false))]
    fn new(fd: RawFd, limit: usize, json: bool) -> PyResult<Self> {
        if limit < PIPE_BUF {
            return Err(PyValueError::new_err(format!(
                "access_log_buffer: at least {PIPE_BUF} bytes, not {limit}"
            )));
        }
        let file: File = take_fd(fd)?;
        let report = if json { dropped_json } else { dropped_text };
        Ok(Self {
            writer: Arc::new(LineWriter::start(file, limit, report)),
        })
    }

    /// Waits (without the GIL) until every line added so far is written, at most `timeout`
    /// seconds; whether it was.
    fn flush(&self, py: Python<'_>, timeout: f64) -> bool {
        let timeout = Duration::try_from_secs_f64(timeout).unwrap_or(Duration::ZERO);
        py.detach(|| self.writer.flush(timeout))
    }

    /// Lines dropped so far because `limit` bytes were waiting.
    #[getter]
    fn dropped(&self) -> u64 {
        self.writer.dropped()
    }
}

fn dropped_text(count: u64, limit: usize) -> String {
    format!(
        "WARNING:  {count} access log lines dropped: standard output was not being read \
         (--access-log-buffer {limit} bytes)"
    )
}

fn dropped_json(count: u64, limit: usize) -> String {
    let text = dropped_text(count, limit);
    let mut buf = Vec::new();
    let mut line = JsonLine::start(&mut buf, "WARNING", "uvicorn.access");
    line.string("message", &text["WARNING:  ".len()..]);
    line.number("dropped", count);
    line.end();
    buf.pop(); // the writer ends the line
    String::from_utf8(buf).unwrap_or(text)
}
