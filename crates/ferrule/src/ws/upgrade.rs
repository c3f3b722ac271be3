//! A WebSocket from its upgrade request to the socket task: the checks, the scope, the app's
//! coroutine on the bridge, and the HTTP answer it decides on.

use std::sync::Arc;

use bytes::Bytes;
use http::{HeaderValue, Method, Request, Response, StatusCode, Version};
use hyper::body::Incoming;
use pyo3::intern;
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList, PyString};
use tokio_tungstenite::tungstenite::handshake::derive_accept_key;

use crate::asgi::access_format::AccessFormat;
use crate::asgi::access_log::{AccessEntry, Outcome};
use crate::asgi::conn::ConnInfo;
use crate::asgi::handles::PyHandles;
use crate::asgi::levels::{ERROR, INFO, TRACE};
use crate::asgi::logging::{log_app_exception, log_line};
use crate::asgi::proxy::Forwarded;
use crate::asgi::raw_head::RawHead;
use crate::asgi::responses::{closing_response, plain_response, server_response};
use crate::asgi::scope::{add_tls_extension, build_scope};
use crate::asgi::server::Server;
use crate::bridge::Completion;

use super::access_log::{log_close, log_handshake};
use super::callables::{WsReceive, WsSend};
use super::deflate_params::negotiate;
use super::exchange::WsExchange;
use super::socket::run_socket;

/// Whether `key` is what RFC 6455 4.1 asks of `Sec-WebSocket-Key`: 16 bytes in base64, so 22
/// base64 characters and `==`. A server "MUST" refuse a handshake with anything else (4.2.1).
fn is_handshake_key(key: &[u8]) -> bool {
    let key = key.trim_ascii();
    key.len() == 24
        && key.ends_with(b"==")
        && key[..22]
            .iter()
            .all(|&b| b.is_ascii_alphanumeric() || b == b'+' || b == b'/')
}

/// What makes `request` no valid opening handshake (RFC 6455 4.2.1), as the 400's text.
fn handshake_problem(request: &Request<Incoming>) -> Option<&'static str> {
    let headers = request.headers();
    if request.version() == Version::HTTP_2 {
        // RFC 8441 5: no key (the stream is the handshake), the version as on HTTP/1.1.
        return match headers.get(http::header::SEC_WEBSOCKET_VERSION) {
            None => Some("Missing Sec-WebSocket-Version header"),
            Some(version) if version.as_bytes() != b"13" => {
                Some("Unsupported Sec-WebSocket-Version: this server speaks 13")
            }
            Some(_) => None,
        };
    }
    if request.method() != Method::GET {
        return Some("WebSocket handshake needs the GET method");
    }
    let Some(key) = headers.get(http::header::SEC_WEBSOCKET_KEY) else {
        return Some("Missing Sec-WebSocket-Key header");
    };
    if !is_handshake_key(key.as_bytes()) {
        return Some("Invalid Sec-WebSocket-Key header");
    }
    match headers.get(http::header::SEC_WEBSOCKET_VERSION) {
        None => Some("Missing Sec-WebSocket-Version header"),
        Some(version) if version.as_bytes() != b"13" => {
            Some("Unsupported Sec-WebSocket-Version: this server speaks 13")
        }
        Some(_) => None,
    }
}

/// Serves one upgrade request: the app decides the answer, and a 101 hands the connection to
/// the socket task. The caller has counted the request in flight; the app's end uncounts it.
pub async fn upgrade(
    mut request: Request<Incoming>,
    raw_head: Option<RawHead>,
    conn: &ConnInfo,
    server: Arc<Server>,
) -> Response<Bytes> {
    let trace = server
        .settings
        .trace_connections
        .then(|| conn.client_prefix());
    if let Some(client) = &trace {
        log_line(
            &server.py,
            TRACE,
            &format!("{client}Upgrading to WebSocket"),
        );
    }
    if let Some(problem) = handshake_problem(&request) {
        server.state.request_finished();
        let body = Bytes::from_static(problem.as_bytes());
        let mut refused = server_response(
            StatusCode::BAD_REQUEST,
            "text/plain; charset=utf-8",
            body,
            &server.settings,
        );
        let headers = refused.headers_mut();
        if request.version() != Version::HTTP_2 {
            headers.insert(http::header::CONNECTION, HeaderValue::from_static("close"));
        }
        headers.insert(
            http::header::SEC_WEBSOCKET_VERSION,
            HeaderValue::from_static("13"),
        );
        return refused;
    }
    // The `Sec-WebSocket-Accept` of an HTTP/1.1 handshake; HTTP/2 has none (RFC 8441 5).
    let accept_key = request
        .headers()
        .get(http::header::SEC_WEBSOCKET_KEY)
        .filter(|_| request.version() != Version::HTTP_2)
        .map(|key| derive_accept_key(key.as_bytes()));
    let on_upgrade = hyper::upgrade::on(&mut request);
    let (parts, _body) = request.into_parts();
    let forwarded = conn.forwarded(&parts.headers, &server.settings);
    let access_log = server.access_log();
    let access = access_log.map(|log| AccessEntry::new(&parts, conn, &forwarded, &log));
    // RFC 8441 keeps Sec-WebSocket-Extensions: HTTP/2 negotiates as HTTP/1.1 does.
    let deflate = match server.settings.ws_per_message_deflate {
        true => negotiate(
            parts
                .headers
                .get_all(http::header::SEC_WEBSOCKET_EXTENSIONS),
        ),
        false => None,
    };
    let (deflate, extensions) = deflate.unzip();
    let (exchange, answer, ends) = WsExchange::new(server.clone(), accept_key, extensions);
    // Ended by `on_app_done`, which runs exactly once however the app ends.
    server.state.ws_sessions.send_modify(|open| *open += 1);
    Python::attach(|py| {
        let head = (&parts, raw_head.as_ref(), &forwarded);
        if let Err(err) = start_app(py, &exchange, head, conn) {
            on_app_done(py, &exchange, Err(err));
        }
    });
    // A shutdown does not wait for an app that never answers the handshake: 503, and the app
    // hears the client is gone (1006), as from uvicorn.
    let mut stopping = server.state.stopping();
    let response = tokio::select! {
        answer = answer => answer.unwrap_or_else(|_| {
            plain_response(StatusCode::INTERNAL_SERVER_ERROR, &server.settings)
        }),
        _ = stopping.wait_for(Option::is_some) => {
            exchange.abandon();
            closing_response(StatusCode::SERVICE_UNAVAILABLE, &server.settings)
        }
    };
    let accepted = exchange.accepted();
    let response_headers = match access_log.and_then(|log| log.format) {
        Some(format) => AccessFormat::pick(&format.response_headers, response.headers()),
        None => Vec::new(),
    };
    // 101, or 200 for a session on an HTTP/2 stream (RFC 8441).
    let status = response.status().as_u16();
    if let (Some(access), Some(log)) = (&access, access_log) {
        let body_bytes = response.body().len() as u64;
        let outcome = Outcome {
            status,
            body_bytes,
            close_code: None,
            response_headers: &response_headers,
        };
        log_handshake(log, access, accepted, &outcome);
    }
    if accepted {
        log_line(&server.py, INFO, "connection open");
        tokio::spawn(async move {
            let py = &exchange.server.py;
            match on_upgrade.await {
                Ok(upgraded) => {
                    if let Some(client) = &trace {
                        log_line(py, TRACE, &format!("{client}WebSocket connection made"));
                    }
                    run_socket(upgraded, exchange.clone(), ends, deflate).await;
                    if let Some(client) = &trace {
                        log_line(py, TRACE, &format!("{client}WebSocket connection lost"));
                    }
                }
                Err(_) => exchange.mark_closed(1006, None),
            }
            log_line(&exchange.server.py, INFO, "connection closed");
            if let (Some(access), Some(log)) = (&access, exchange.server.access_log()) {
                let code = exchange.close_code();
                let outcome = Outcome {
                    status,
                    body_bytes: 0,
                    close_code: Some(code),
                    response_headers: &response_headers,
                };
                log_close(log, access, &outcome);
            }
        });
    }
    response
}

fn start_app(
    py: Python<'_>,
    exchange: &Arc<WsExchange>,
    head: (&http::request::Parts, Option<&RawHead>, &Forwarded),
    conn: &ConnInfo,
) -> PyResult<()> {
    let server = &exchange.server;
    let scope = websocket_scope(py, head, conn, &server.py)?;
    let receive = Py::new(
        py,
        WsReceive {
            exchange: exchange.clone(),
        },
    )?;
    let send = Py::new(
        py,
        WsSend {
            exchange: exchange.clone(),
        },
    )?;
    let app = server.py.app.bind(py);
    let (coro, context) = server
        .py
        .request_context
        .run(py, || app.call1((scope, receive, send)))?;
    let finishing = exchange.clone();
    let completion = Completion::Callback(Box::new(move |py, result| {
        on_app_done(py, &finishing, result)
    }));
    // WebSocket sessions are not traced: the trace times requests.
    server.bridge.start(py, &coro, completion, context, 0)
}

/// The HTTP scope of the upgrade request, made a `websocket` one (ASGI websocket spec 2.4).
fn websocket_scope<'py>(
    py: Python<'py>,
    (parts, raw_head, forwarded): (&http::request::Parts, Option<&RawHead>, &Forwarded),
    conn: &ConnInfo,
    handles: &PyHandles,
) -> PyResult<Bound<'py, PyDict>> {
    let scope = build_scope(
        py,
        (parts, raw_head),
        conn,
        forwarded,
        &handles.scope_template,
        false,
    )?;
    scope.set_item(intern!(py, "type"), intern!(py, "websocket"))?;
    scope.del_item(intern!(py, "method"))?;
    let scheme: String = scope
        .get_item(intern!(py, "scheme"))?
        .map_or(Ok("http".to_owned()), |s| s.extract())?;
    let scheme = match scheme.as_str() {
        "https" | "wss" => "wss",
        _ => "ws",
    };
    scope.set_item(intern!(py, "scheme"), PyString::new(py, scheme))?;
    let subprotocols = PyList::empty(py);
    for value in parts.headers.get_all(http::header::SEC_WEBSOCKET_PROTOCOL) {
        for name in value.to_str().unwrap_or("").split(',') {
            let name = name.trim();
            if !name.is_empty() {
                subprotocols.append(name)?;
            }
        }
    }
    scope.set_item(intern!(py, "subprotocols"), subprotocols)?;
    let extensions = PyDict::new(py);
    extensions.set_item("websocket.http.response", PyDict::new(py))?;
    add_tls_extension(py, &extensions, conn)?;
    scope.set_item(intern!(py, "extensions"), extensions)?;
    Ok(scope)
}

fn on_app_done(py: Python<'_>, exchange: &Arc<WsExchange>, result: PyResult<Py<PyAny>>) {
    let server = &exchange.server;
    server.state.request_finished();
    server.state.ws_sessions.send_modify(|open| *open -= 1);
    // A value returned is an app error, as uvicorn has it: the ASGI callable returns None.
    let returned = match &result {
        Ok(value) if !value.is_none(py) => Some(format!(
            "ASGI callable should return None, but returned '{}'.",
            value.bind(py)
        )),
        _ => None,
    };
    let failed = result.is_err() || returned.is_some();
    if let Some(problem) = exchange.finish_app(py, failed) {
        log_line(&server.py, ERROR, problem);
    }
    if let Some(returned) = returned {
        log_line(&server.py, ERROR, &returned);
    }
    if let Err(error) = result {
        log_app_exception(py, &server.py, error);
    }
}
