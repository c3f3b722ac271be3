//! `Settings`: what the server was configured with, read once from ferrule's Python `Config`
//! and plain Rust values from then on.

use std::time::Duration;

use http::{HeaderMap, HeaderName, HeaderValue};
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;

use crate::compress::Policy;
use crate::statics::StaticFiles;

use super::access_format::AccessFormat;
use super::proxy::{Forwarded, TrustedProxies};

/// The server's settings: each field is the `Config` attribute of the same name, read as its
/// type says, or by the function of the same name in `read` where it needs checking or
/// converting. Adding a setting is adding a field (and the `Config` attribute).
#[derive(FromPyObject)]
pub struct Settings {
    /// Given as the scope's `root_path`, and prepended to its `path`.
    pub root_path: String,
    /// How long a connection may stay idle: between HTTP/1.1 requests, with no HTTP/2 stream in
    /// progress (and a PING unanswered), and for a request head to arrive (at least 1 s).
    #[pyo3(from_py_with = read::timeout_keep_alive)]
    pub timeout_keep_alive: Duration,
    /// Requests in progress at once; past it the client gets 503.
    pub limit_concurrency: Option<usize>,
    /// Largest request body accepted, in bytes: past it the client gets 413.
    pub limit_request_body: Option<u64>,
    /// Largest request line plus headers, in bytes: past it the client gets 431 (or 414).
    #[pyo3(from_py_with = read::max_head_size)]
    pub max_head_size: usize,
    /// Open connections allowed at once; accepting waits for one to close past it.
    #[pyo3(from_py_with = read::connection_limit)]
    pub connection_limit: usize,
    /// Whether connections and WebSockets are logged as they open and close (`--log-level
    /// trace`, uvicorn's "HTTP connection made" lines).
    #[pyo3(attribute("log_level_number"), from_py_with = read::at_trace)]
    pub trace_connections: bool,
    /// Whether each request is logged on `ferrule.access` (when INFO is enabled there).
    pub access_log: bool,
    /// `--access-log-format`: the access line's atoms; `None`, uvicorn's line.
    #[pyo3(from_py_with = read::access_log_format)]
    pub access_log_format: Option<AccessFormat>,
    /// `--log-format json`: access lines are JSON objects (`log_format` is "text" or "json").
    #[pyo3(attribute("log_format"), from_py_with = read::is_json)]
    pub log_json: bool,
    /// `--access-log-headers`: the request headers each JSON access line names.
    #[pyo3(from_py_with = read::access_log_headers)]
    pub access_log_headers: Vec<HeaderName>,
    /// Whether responses say `server: ferrule` (unless the app set a `server` header).
    pub server_header: bool,
    /// `--compress` and its companions: which responses are compressed, and with what;
    /// `None` when it is off. `Config.compression` gathers the three settings.
    #[pyo3(from_py_with = read::compression)]
    pub compression: Option<Policy>,
    /// `--static-path-*`: the directories served before the app; `None` when none is mounted.
    /// `Config.static_files` gathers the settings.
    #[pyo3(from_py_with = read::static_files)]
    pub static_files: Option<StaticFiles>,
    /// Whether hyper adds a `date` header to responses that lack one.
    pub date_header: bool,
    /// `--header NAME:VALUE`: added to every response.
    #[pyo3(from_py_with = read::headers)]
    pub headers: Vec<(HeaderName, HeaderValue)>,
    /// Whether `X-Forwarded-For` / `X-Forwarded-Proto` from a trusted proxy change the scope.
    pub proxy_headers: bool,
    /// The peers whose forwarded headers are obeyed, when `proxy_headers` is on.
    #[pyo3(from_py_with = read::trusted_proxies)]
    pub trusted_proxies: TrustedProxies,
    /// Whether each TCP connection begins with a PROXY protocol header, and which versions.
    #[pyo3(from_py_with = read::proxy_protocol)]
    pub proxy_protocol: ProxyProtocol,
    /// The HTTP versions served.
    #[pyo3(from_py_with = read::http)]
    pub http: HttpVersions,
    /// Whether WebSocket upgrades are served.
    pub websockets: bool,
    /// The largest WebSocket message, in bytes.
    pub ws_max_size: usize,
    /// Client messages queued for the app's `receive()` before the socket stops being read.
    #[pyo3(from_py_with = read::ws_max_queue)]
    pub ws_max_queue: usize,
    /// Time between the server's pings on each WebSocket; `None` (0 in `Config`): no pings. A
    /// peer that stops answering is closed with 1011.
    #[pyo3(from_py_with = read::ws_ping_interval)]
    pub ws_ping_interval: Option<Duration>,
    /// How long a ping may go unanswered; `None` (0 in `Config`): forever.
    #[pyo3(from_py_with = read::ws_ping_timeout)]
    pub ws_ping_timeout: Option<Duration>,
    /// Whether permessage-deflate is agreed with clients that offer it.
    pub ws_per_message_deflate: bool,
    /// Requests to serve before the server stops itself (`--limit-max-requests` with its jitter).
    pub max_requests: Option<u64>,
    /// Whether the server stops itself at `max_requests`; a supervisor's worker instead asks
    /// to be replaced, and serves on until its successor does.
    pub max_requests_stops: bool,
    /// HTTP/2 streams one connection may have open at once.
    pub http2_max_concurrent_streams: u32,
    /// Whether HTTP/3 is served on UDP beside the TLS listener (and advertised by Alt-Svc).
    pub http3: bool,
    /// How long shutdown waits for requests in progress before cancelling them; `None`: forever.
    #[pyo3(from_py_with = read::timeout_graceful_shutdown)]
    pub timeout_graceful_shutdown: Option<Duration>,
    /// Whether each request runs in an empty contextvars context rather than a copy of the
    /// server's.
    pub reset_contextvars: bool,
}

/// The `server` header's value.
static SERVER: HeaderValue = HeaderValue::from_static("ferrule");

impl Settings {
    /// Reads ferrule's `Config`.
    pub fn from_config(config: &Bound<'_, PyAny>) -> PyResult<Self> {
        config.extract().map_err(|err: PyErr| {
            // PyO3 reports a field's error as a TypeError naming the field, caused by the
            // field's own error: a ValueError from `read` names the setting already, and is
            // what Python's own checks raise, so it is raised as it is.
            let py = config.py();
            match err.cause(py) {
                Some(cause) if cause.is_instance_of::<PyValueError>(py) => cause,
                _ => err,
            }
        })
    }

    /// The headers every response gets: `server: ferrule` unless it is off, the app set one,
    /// or `--header` gives one (which replaces it, as uvicorn's does); then the `--header`
    /// ones, added after the app's (as uvicorn does, a name may then repeat).
    pub fn add_default_headers(&self, headers: &mut HeaderMap) {
        if self.server_header
            && !self
                .headers
                .iter()
                .any(|(name, _)| name == http::header::SERVER)
        {
            headers
                .entry(http::header::SERVER)
                .or_insert_with(|| SERVER.clone());
        }
        for (name, value) in &self.headers {
            headers.append(name.clone(), value.clone());
        }
    }

    /// How long a client may take to send a request head: the keep-alive timeout, at least 1 s.
    pub fn header_read_timeout(&self) -> Duration {
        self.timeout_keep_alive.max(Duration::from_secs(1))
    }

    /// What a trusted proxy's headers say of a request from `peer` (nothing when proxy headers
    /// are off or the peer is not trusted).
    pub fn forwarded(&self, peer: Option<&str>, headers: &HeaderMap) -> Forwarded {
        if !self.proxy_headers {
            return Forwarded::default();
        }
        self.trusted_proxies.forwarded(peer, headers)
    }
}

/// Checks `--compress-types` as the server will read it: a ValueError naming the entry that is
/// not a media type pattern.
#[pyfunction]
pub fn check_compress_types(types: Vec<String>) -> PyResult<()> {
    crate::compress::MediaTypes::parse(&types)
        .map(drop)
        .map_err(PyValueError::new_err)
}

/// The smallest request head limit: hyper's read buffer (twice the limit) cannot be smaller
/// than 8 KiB.
pub const MIN_HEAD_SIZE: usize = 4096;

/// What `--http` may say: HTTP/1.1 and HTTP/2, HTTP/1.1 alone, HTTP/2 alone (Python's aliases
/// for uvicorn's names map onto these).
pub const HTTP_VERSIONS: [&str; 3] = ["auto", "1", "2"];

/// `--proxy-protocol`: the PROXY protocol header versions a connection may begin with.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum ProxyProtocol {
    Off,
    V1,
    V2,
    /// Either version.
    Auto,
}

/// The HTTP versions `--http` allows.
#[derive(Clone, Copy)]
pub struct HttpVersions {
    pub h1: bool,
    pub h2: bool,
}

impl HttpVersions {
    fn from_option(http: &str) -> PyResult<Self> {
        match http {
            "auto" => Ok(Self { h1: true, h2: true }),
            "1" => Ok(Self {
                h1: true,
                h2: false,
            }),
            "2" => Ok(Self {
                h1: false,
                h2: true,
            }),
            _ => Err(PyValueError::new_err(format!(
                "http must be one of {HTTP_VERSIONS:?}, not {http:?}"
            ))),
        }
    }
}

/// A timeout given from Python in seconds, `None` meaning none: refused if negative or not finite.
pub(crate) fn optional_seconds(seconds: Option<f64>, name: &str) -> PyResult<Option<Duration>> {
    seconds
        .map(Duration::try_from_secs_f64)
        .transpose()
        .map_err(|_| PyValueError::new_err(format!("{name} must be a number >= 0")))
}

/// The fields of `Settings` that are checked or converted as they are read, each from its
/// `Config` attribute. A refused value raises ValueError, naming the setting.
mod read {
    use std::time::Duration;

    use http::{HeaderName, HeaderValue};
    use pyo3::exceptions::PyValueError;
    use pyo3::prelude::*;

    use super::{optional_seconds, AccessFormat, HttpVersions, ProxyProtocol, MIN_HEAD_SIZE};
    use crate::asgi::levels::TRACE;
    use crate::asgi::proxy::TrustedProxies;
    use crate::compress::{Coding, Compression, MediaTypes, Policy};
    use crate::statics::{Mount, StaticFiles};

    /// `log_level_number`: whether it is at or below uvicorn's TRACE.
    pub fn at_trace(value: &Bound<'_, PyAny>) -> PyResult<bool> {
        Ok(value.extract::<i64>()? <= i64::from(TRACE))
    }

    pub fn timeout_keep_alive(value: &Bound<'_, PyAny>) -> PyResult<Duration> {
        Duration::try_from_secs_f64(value.extract()?)
            .map_err(|_| PyValueError::new_err("timeout_keep_alive must be a number >= 0"))
    }

    pub fn max_head_size(value: &Bound<'_, PyAny>) -> PyResult<usize> {
        let size: usize = value.extract()?;
        if size < MIN_HEAD_SIZE {
            return Err(PyValueError::new_err(format!(
                "the request head limit must be at least {MIN_HEAD_SIZE} bytes, not {size}"
            )));
        }
        Ok(size)
    }

    pub fn connection_limit(value: &Bound<'_, PyAny>) -> PyResult<usize> {
        at_least_one(value, "max_connections")
    }

    pub fn headers(value: &Bound<'_, PyAny>) -> PyResult<Vec<(HeaderName, HeaderValue)>> {
        let headers: Vec<(String, String)> = value.extract()?;
        headers
            .into_iter()
            .map(|(name, value)| {
                let parsed = HeaderName::from_bytes(name.trim().as_bytes())
                    .ok()
                    .zip(HeaderValue::from_str(value.trim()).ok());
                parsed.ok_or_else(|| {
                    PyValueError::new_err(format!("not a valid header: {name:?}: {value:?}"))
                })
            })
            .collect()
    }

    pub fn is_json(value: &Bound<'_, PyAny>) -> PyResult<bool> {
        match value.extract::<String>()?.as_str() {
            "text" => Ok(false),
            "json" => Ok(true),
            other => Err(PyValueError::new_err(format!(
                "log_format: 'text' or 'json', not {other:?}"
            ))),
        }
    }

    pub fn access_log_headers(value: &Bound<'_, PyAny>) -> PyResult<Vec<HeaderName>> {
        let names: Vec<String> = value.extract()?;
        names
            .iter()
            .map(|name| {
                HeaderName::from_bytes(name.trim().as_bytes()).map_err(|_| {
                    PyValueError::new_err(format!(
                        "access_log_headers: not a header name: {name:?}"
                    ))
                })
            })
            .collect()
    }

    pub fn access_log_format(value: &Bound<'_, PyAny>) -> PyResult<Option<AccessFormat>> {
        let format: Option<String> = value.extract()?;
        format
            .map(|format| AccessFormat::parse(&format))
            .transpose()
            .map_err(|problem| PyValueError::new_err(format!("access_log_format: {problem}")))
    }

    pub fn trusted_proxies(value: &Bound<'_, PyAny>) -> PyResult<TrustedProxies> {
        Ok(TrustedProxies::new(value.extract()?))
    }

    pub fn proxy_protocol(value: &Bound<'_, PyAny>) -> PyResult<ProxyProtocol> {
        match value.extract::<String>()?.as_str() {
            "off" => Ok(ProxyProtocol::Off),
            "v1" => Ok(ProxyProtocol::V1),
            "v2" => Ok(ProxyProtocol::V2),
            "auto" => Ok(ProxyProtocol::Auto),
            other => Err(PyValueError::new_err(format!(
                "proxy_protocol must be one of off, v1, v2, auto, not {other:?}"
            ))),
        }
    }

    /// `None`, or the codings (name, level), the minimum size and the content types.
    pub fn compression(value: &Bound<'_, PyAny>) -> PyResult<Option<Policy>> {
        type Given = (Vec<(String, u32)>, u64, Vec<String>);
        let Some((codings, min_size, types)) = value.extract::<Option<Given>>()? else {
            return Ok(None);
        };
        let codings = codings
            .into_iter()
            .map(|(name, level)| {
                let coding = Coding::from_name(&name).ok_or_else(|| {
                    PyValueError::new_err(format!("compress: unknown coding {name:?}"))
                })?;
                let (low, high, _) = coding.levels();
                if !(low..=high).contains(&level) {
                    return Err(PyValueError::new_err(format!(
                        "compress: {name}'s level must be {low} to {high}, not {level}"
                    )));
                }
                Ok(Compression { coding, level })
            })
            .collect::<PyResult<Vec<_>>>()?;
        let types = MediaTypes::parse(&types)
            .map_err(|problem| PyValueError::new_err(format!("compress_types: {problem}")))?;
        Ok(Some(Policy {
            codings,
            min_size,
            types,
        })
        .filter(|policy| !policy.codings.is_empty()))
    }

    /// `None`, or the (route, directory) pairs, the directory's file, the max-age (0: none),
    /// and the precompressed and fall-through switches.
    pub fn static_files(value: &Bound<'_, PyAny>) -> PyResult<Option<StaticFiles>> {
        type Given = (
            Vec<(String, std::path::PathBuf)>,
            Option<String>,
            u64,
            bool,
            bool,
        );
        let Some((mounts, dir_to_file, max_age, precompressed, fallthrough)) =
            value.extract::<Option<Given>>()?
        else {
            return Ok(None);
        };
        let mounts = mounts
            .iter()
            .map(|(route, dir)| Mount::new(route, dir))
            .collect::<Result<Vec<_>, _>>()
            .map_err(|problem| PyValueError::new_err(format!("static_path_mount: {problem}")))?;
        Ok(Some(StaticFiles {
            mounts,
            dir_to_file,
            max_age: Some(max_age).filter(|&age| age > 0),
            precompressed,
            fallthrough,
        }))
    }

    pub fn http(value: &Bound<'_, PyAny>) -> PyResult<HttpVersions> {
        HttpVersions::from_option(&value.extract::<String>()?)
    }

    pub fn ws_max_queue(value: &Bound<'_, PyAny>) -> PyResult<usize> {
        at_least_one(value, "ws_max_queue")
    }

    pub fn ws_ping_interval(value: &Bound<'_, PyAny>) -> PyResult<Option<Duration>> {
        zero_is_none(value, "ws_ping_interval")
    }

    pub fn ws_ping_timeout(value: &Bound<'_, PyAny>) -> PyResult<Option<Duration>> {
        zero_is_none(value, "ws_ping_timeout")
    }

    pub fn timeout_graceful_shutdown(value: &Bound<'_, PyAny>) -> PyResult<Option<Duration>> {
        optional_seconds(value.extract()?, "timeout_graceful_shutdown")
    }

    fn at_least_one(value: &Bound<'_, PyAny>, name: &str) -> PyResult<usize> {
        let count: usize = value.extract()?;
        if count == 0 {
            return Err(PyValueError::new_err(format!("{name} must be at least 1")));
        }
        Ok(count)
    }

    /// Seconds, `None` or 0 meaning none (as uvicorn reads its WebSocket ping options); a
    /// time too short to measure is refused rather than taken for none.
    fn zero_is_none(value: &Bound<'_, PyAny>, name: &str) -> PyResult<Option<Duration>> {
        let seconds: Option<f64> = value.extract()?;
        match seconds {
            None | Some(0.0) => Ok(None),
            Some(seconds) => Duration::try_from_secs_f64(seconds)
                .ok()
                .filter(|duration| !duration.is_zero())
                .map(Some)
                .ok_or_else(|| {
                    PyValueError::new_err(format!("{name} must be a number > 0, or 0 for none"))
                }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::compress::{Coding, Compression};
    use pyo3::exceptions::PyTypeError;
    use pyo3::types::PyDict;

    /// A stand-in for ferrule's `Config`, its attributes set to `changes` over a valid base.
    fn config<'py>(py: Python<'py>, changes: &str) -> Bound<'py, PyAny> {
        let globals = PyDict::new(py);
        let code = format!(
            r#"
import types
settings = dict(
    root_path="/api", timeout_keep_alive=5.0, limit_concurrency=None, limit_request_body=10,
    max_head_size=65536, connection_limit=100, access_log=True, access_log_format=None,
    log_format="text", access_log_headers=[],
    server_header=True,
    date_header=False, headers=[(" x-a ", " 1 ")], proxy_headers=True,
    trusted_proxies=["127.0.0.1"], http="1", websockets=True, ws_max_size=1024,
    ws_max_queue=32, ws_ping_interval=20.0, ws_ping_timeout=0, ws_per_message_deflate=True,
    max_requests=None, max_requests_stops=True, timeout_graceful_shutdown=None,
    reset_contextvars=False, http2_max_concurrent_streams=50, log_level_number=20,
    http3=False, proxy_protocol="v2", compression=None, static_files=None,
)
settings.update({changes})
config = types.SimpleNamespace(**settings)
"#
        );
        let code = std::ffi::CString::new(code).unwrap();
        py.run(&code, Some(&globals), None).unwrap();
        globals.get_item("config").unwrap().unwrap()
    }

    #[test]
    fn reads_each_attribute_of_the_config() {
        Python::attach(|py| {
            let settings = Settings::from_config(&config(py, "")).unwrap();
            assert_eq!(settings.root_path, "/api");
            assert_eq!(settings.http2_max_concurrent_streams, 50);
            assert_eq!(settings.timeout_keep_alive, Duration::from_secs(5));
            assert_eq!(settings.limit_request_body, Some(10));
            assert!(!settings.date_header);
            assert!(!settings.trace_connections);
            assert_eq!(settings.headers[0].0.as_str(), "x-a");
            assert_eq!(settings.headers[0].1, "1");
            assert!(settings.http.h1 && !settings.http.h2);
            assert_eq!(settings.proxy_protocol, ProxyProtocol::V2);
            assert!(settings.compression.is_none());
            let config = config(
                py,
                "compression=([('zstd', 3), ('gzip', 9)], 100, ['text/*'])",
            );
            let policy = Settings::from_config(&config).unwrap().compression.unwrap();
            assert_eq!(
                policy.codings[1],
                Compression {
                    coding: Coding::Gzip,
                    level: 9
                }
            );
            assert_eq!(policy.min_size, 100);
            assert!(policy.types.matches(b"text/css"));
            assert_eq!(settings.ws_ping_interval, Some(Duration::from_secs(20)));
            // 0 means none, as None does.
            assert_eq!(settings.ws_ping_timeout, None);
        });
    }

    #[test]
    fn proxy_headers_off_ignores_the_trusted_proxies() {
        Python::attach(|py| {
            let mut headers = HeaderMap::new();
            headers.insert("x-forwarded-proto", HeaderValue::from_static("https"));
            let on = Settings::from_config(&config(py, "")).unwrap();
            assert_eq!(
                on.forwarded(Some("127.0.0.1"), &headers).scheme,
                Some("https")
            );
            let off = Settings::from_config(&config(py, "proxy_headers=False")).unwrap();
            assert_eq!(
                off.forwarded(Some("127.0.0.1"), &headers),
                Forwarded::default()
            );
        });
    }

    #[test]
    fn a_refused_value_raises_value_error_naming_the_setting() {
        Python::attach(|py| {
            for (changes, message) in [
                ("ws_max_queue=0", "ws_max_queue must be at least 1"),
                ("connection_limit=0", "max_connections must be at least 1"),
                (
                    "http='3'",
                    r#"http must be one of ["auto", "1", "2"], not "3""#,
                ),
                (
                    "ws_ping_interval=-1.0",
                    "ws_ping_interval must be a number > 0",
                ),
                (
                    "timeout_keep_alive=-1.0",
                    "timeout_keep_alive must be a number >= 0",
                ),
                ("headers=[('a b', '1')]", "not a valid header"),
                (
                    "proxy_protocol='v3'",
                    r#"proxy_protocol must be one of off, v1, v2, auto, not "v3""#,
                ),
                (
                    "access_log_format='%(zz)s'",
                    "access_log_format: unknown atom %(zz)s",
                ),
                (
                    "compression=([('lz4', 1)], 500, [])",
                    r#"compress: unknown coding "lz4""#,
                ),
                (
                    "compression=([('gzip', 12)], 500, [])",
                    "compress: gzip's level must be 1 to 9, not 12",
                ),
                (
                    "compression=([('br', 4)], 500, ['json'])",
                    "compress_types: \"json\" is not a media type",
                ),
                (
                    "max_head_size=100",
                    "the request head limit must be at least 4096",
                ),
            ] {
                let err = Settings::from_config(&config(py, changes)).err().unwrap();
                assert!(err.is_instance_of::<PyValueError>(py), "{changes}: {err}");
                assert!(err.to_string().contains(message), "{changes}: {err}");
            }
        });
    }

    #[test]
    fn a_value_of_the_wrong_type_raises_type_error_naming_the_field() {
        Python::attach(|py| {
            let err = Settings::from_config(&config(py, "ws_max_size='big'"))
                .err()
                .unwrap();
            assert!(err.is_instance_of::<PyTypeError>(py));
            assert!(err.to_string().contains("Settings.ws_max_size"), "{err}");
        });
    }
}
