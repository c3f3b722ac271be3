//! HTTP/1.1 and HTTP/2 exchanges on the bridge, one file per concern (as granian lays out
//! protocols); HTTP/3 shares the request path (`handle`):
//! - `connection`: `Connection`, one connection as its requests see it;
//! - `app_calls`: `AppCalls`, the app calls running for a connection, up to its stream limit;
//! - `request`: one request, from the checks before the app to the app's coroutine;
//! - `streams`: `OpenStreams`, the requests (HTTP/2 streams) in progress on a connection;
//! - `heads`: the raw request heads, recorded as hyper reads them (header order, framing);
//! - `host`: whether a `Host` value is one RFC 9112 lets a server serve;
//! - `exchange`: `Exchange`, what hyper's side and the app's side share for one request;
//! - `callables`: the ASGI `receive` / `send` callables (`HttpReceive`, `HttpSend`);
//! - `early_hints`: `EarlyHints`, how a request's 103 Early Hints reach its client;
//! - `interim`: `InterimQueue`, HTTP/1.1's 103s on their way to the socket beside hyper;
//! - `incoming`: `IncomingBody`, a request body from hyper or from an HTTP/3 stream;
//! - `body`: `ResponseBody`, the response body hyper polls (fed through `BodySource`);
//! - `compression`: `--compress` applied to a response on its way to hyper;
//! - `encoded_body`: `EncodedBody`, a response body compressed as hyper polls it;
//! - `static_files`: a request under a static route, answered from its mount before the app;
//! - `file_body`: `FileBody`, a static file's bytes, read as hyper takes them;
//! - `upgrade`: whether a request asks to become a WebSocket, and `Upgrader`, the transport's
//!   way to serve it;
//! - `app_done`: what happens when the app's coroutine finishes;
//! - `access_log`: the access log line.
//!
//! It builds on `asgi`, `compress`, `statics` and `bridge`; an upgrade request goes to the connection's `Upgrader`.

mod access_log;
mod app_calls;
mod app_done;
mod body;
mod callables;
mod compression;
mod connection;
mod early_hints;
mod encoded_body;
mod exchange;
mod file_body;
mod heads;
mod host;
mod incoming;
mod interim;
mod request;
mod static_files;
mod streams;
mod upgrade;

// What the transports use: the request path, a connection, the bodies, the head recorder.
pub(crate) use self::body::ResponseBody;
pub(crate) use self::connection::Connection;
pub(crate) use self::early_hints::{response as early_hints_response, EarlyHints};
#[cfg(test)]
pub(crate) use self::heads::HeadLog;
pub(crate) use self::heads::{Recorder, HTTP2_PREFACE};
pub(crate) use self::incoming::{BoxError, IncomingBody};
pub(crate) use self::interim::InterimQueue;
pub(crate) use self::request::handle;
pub(crate) use self::upgrade::Upgrader;
