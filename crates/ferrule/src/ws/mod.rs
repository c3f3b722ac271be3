//! WebSockets (ASGI websocket spec 2.4) over an HTTP/1.1 upgrade, laid out as `http/` is:
//! - `upgrade`: recognising an upgrade request, the scope, calling the app, the 101 or the denial;
//! - `exchange`: `WsExchange`, what a WebSocket's callables and its socket task share;
//! - `callables`: the `receive` / `send` callables (`WsReceive`, `WsSend`);
//! - `socket`: the task that owns the socket after the upgrade;
//! - `deflate_params`: the permessage-deflate parameters agreed in the handshake;
//! - `deflater`: compressing the app's messages;
//! - `inflating_stream`: inflating the client's, as a layer under tungstenite;
//! - `access_log`: the session's access lines (its handshake, its close).
//!
//! Framing, masking, fragmentation, UTF-8 checks, ping/pong and the close handshake are
//! tungstenite's; this module maps them onto ASGI messages and close codes, and adds
//! permessage-deflate (RFC 7692), which tungstenite lacks, on flate2. It builds on `asgi`
//! and `bridge` alone: `http` hands it the upgrade request.

mod access_log;
mod callables;
mod deflate_params;
mod deflater;
mod exchange;
mod inflating_stream;
mod socket;
mod upgrade;

pub use self::upgrade::upgrade;
