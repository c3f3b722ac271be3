//! Reading the app's ASGI messages: optional fields and flags, and headers.

use http::{HeaderMap, HeaderName, HeaderValue};
use pyo3::exceptions::{PyKeyError, PyTypeError, PyValueError};
use pyo3::intern;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict, PyList, PyString, PyTuple};

/// `message[key]`, or `None` when the key is missing. A plain dict is read without raising
/// (and catching) a `KeyError`, which costs more than the rest of a small `send()`.
pub(crate) fn optional_field<'py>(
    message: &Bound<'py, PyAny>,
    key: &Bound<'py, PyString>,
) -> PyResult<Option<Bound<'py, PyAny>>> {
    if let Ok(dict) = message.cast_exact::<PyDict>() {
        return dict.get_item(key);
    }
    match message.get_item(key) {
        Ok(value) => Ok(Some(value)),
        Err(err) if err.is_instance_of::<PyKeyError>(message.py()) => Ok(None),
        Err(err) => Err(err),
    }
}

/// `message[key]`, raising `KeyError` when it is missing, as indexing does; a plain dict is read
/// directly, without dispatching `__getitem__`.
pub(crate) fn required_field<'py>(
    message: &Bound<'py, PyAny>,
    key: &Bound<'py, PyString>,
) -> PyResult<Bound<'py, PyAny>> {
    if let Ok(dict) = message.cast_exact::<PyDict>() {
        return dict
            .get_item(key)?
            .ok_or_else(|| PyKeyError::new_err(key.clone().unbind()));
    }
    message.get_item(key)
}

/// `message[key]` read as a flag: false when the key is missing.
pub(crate) fn optional_flag<'py>(
    message: &Bound<'py, PyAny>,
    key: &Bound<'py, PyString>,
) -> PyResult<bool> {
    optional_field(message, key)?.map_or(Ok(false), |value| value.is_truthy())
}

/// One response header: any two-item sequence (the spec's own examples use lists), but not
/// bytes or str.
fn header_pair<'py>(item: &Bound<'py, PyAny>) -> PyResult<[Bound<'py, PyAny>; 2]> {
    if let Ok(tuple) = item.cast_exact::<PyTuple>() {
        if tuple.len() == 2 {
            return Ok([tuple.get_item(0)?, tuple.get_item(1)?]);
        }
    }
    let pair: Vec<Bound<'py, PyAny>> = item
        .extract()
        .ok()
        .filter(|pair: &Vec<Bound<'py, PyAny>>| pair.len() == 2)
        .ok_or_else(|| PyTypeError::new_err("each response header must be a (name, value) pair"))?;
    Ok(pair.try_into().expect("two items"))
}

pub(crate) fn parse_headers(py: Python<'_>, message: &Bound<'_, PyAny>) -> PyResult<HeaderMap> {
    parse_headers_into(py, message, &mut DeclaredLength::default())
}

/// `parse_headers`, reading the Content-Length on the way (no second lookup in the map).
pub(crate) fn parse_headers_into(
    py: Python<'_>,
    message: &Bound<'_, PyAny>,
    declared: &mut DeclaredLength,
) -> PyResult<HeaderMap> {
    let Some(items) = optional_field(message, intern!(py, "headers"))? else {
        return Ok(HeaderMap::new());
    };
    // Room for the app's headers and the server's own (`server`): the map grows no more.
    let mut headers = HeaderMap::with_capacity(items.len().unwrap_or(0) + 2);
    // A list, as apps almost always give, is read by index: no iterator object to make.
    if let Ok(list) = items.cast_exact::<PyList>() {
        for item in list.iter() {
            add_header(&mut headers, &item, declared)?;
        }
        return Ok(headers);
    }
    for item in items.try_iter()? {
        add_header(&mut headers, &item?, declared)?;
    }
    Ok(headers)
}

/// One `(name, value)` of the app's headers into `headers`.
fn add_header(
    headers: &mut HeaderMap,
    item: &Bound<'_, PyAny>,
    declared: &mut DeclaredLength,
) -> PyResult<()> {
    let [name, value] = header_pair(item)?;
    let name = name
        .cast::<PyBytes>()
        .map_err(|_| PyTypeError::new_err("response header names must be bytes"))?
        .as_bytes();
    let value = value
        .cast::<PyBytes>()
        .map_err(|_| PyTypeError::new_err("response header values must be bytes"))?
        .as_bytes();
    let name = HeaderName::from_bytes(name).map_err(|_| {
        PyValueError::new_err(format!(
            "invalid response header name {:?}",
            String::from_utf8_lossy(name)
        ))
    })?;
    let value = HeaderValue::from_bytes(value)
        .map_err(|_| PyValueError::new_err(format!("invalid value for response header {name}")))?;
    if name == http::header::CONTENT_LENGTH {
        declared.add(value.as_bytes())?;
    }
    headers.append(name, value);
    Ok(())
}

/// The links of an `http.response.early_hint` message: an iterable of `bytes`, each a
/// `link` field's value.
pub(crate) fn parse_links(
    py: Python<'_>,
    message: &Bound<'_, PyAny>,
) -> PyResult<Vec<HeaderValue>> {
    let items = required_field(message, intern!(py, "links"))?;
    let mut links = Vec::new();
    for item in items.try_iter()? {
        let item = item?;
        let link = item.cast::<PyBytes>().map_err(|_| {
            PyTypeError::new_err("http.response.early_hint 'links' must hold bytes")
        })?;
        let link = HeaderValue::from_bytes(link.as_bytes().trim_ascii()).map_err(|_| {
            PyValueError::new_err(format!(
                "invalid link in http.response.early_hint: {:?}",
                String::from_utf8_lossy(link.as_bytes())
            ))
        })?;
        links.push(link);
    }
    Ok(links)
}

/// The Content-Length a response head declares, if any. Not a number, or two that differ, is
/// the app's error: hyper would send it as is, and no client could tell where the body ends.
#[derive(Default)]
pub(crate) struct DeclaredLength {
    pub(crate) length: Option<u64>,
}

impl DeclaredLength {
    fn add(&mut self, value: &[u8]) -> PyResult<()> {
        let digits = value.trim_ascii();
        let length = (!digits.is_empty() && digits.len() <= 19)
            .then(|| {
                digits.iter().try_fold(0u64, |n, &b| {
                    b.is_ascii_digit().then(|| n * 10 + u64::from(b - b'0'))
                })
            })
            .flatten()
            .ok_or_else(|| {
                PyValueError::new_err(format!(
                    "invalid Content-Length response header {:?}",
                    String::from_utf8_lossy(value)
                ))
            })?;
        if self.length.is_some_and(|first| first != length) {
            return Err(PyValueError::new_err(
                "the response headers give two different Content-Lengths",
            ));
        }
        self.length = Some(length);
        Ok(())
    }
}
