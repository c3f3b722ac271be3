//! WebSockets (ASGI websocket spec 2.4) over an HTTP/1.1 upgrade, laid out as `http/` is:
//! - `upgrade`: recognising an upgrade request, the scope, calling the app, the 101 or the denial;
//! - `exchange`: `WsExchange`, what a WebSocket's callables and its socket task share;
//! - `callables`: the `receive` / `send` callables (`WsReceive`, `WsSend`);
//! - `socket`: the task that owns the socket after the upgrade.
//!
//! Framing, masking, fragmentation, UTF-8 checks, ping/pong and the close handshake are
//! tungstenite's; this module maps them onto ASGI messages and close codes. It builds on `asgi`
//! and `bridge` alone: `http` hands it the upgrade request.

mod callables;
mod exchange;
mod socket;
mod upgrade;

pub use self::upgrade::{is_upgrade, upgrade};
