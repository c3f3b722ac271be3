//! WebSockets (ASGI websocket spec 2.4) over an HTTP/1.1 upgrade, laid out as `http/` is:
//! - `serve`: recognising an upgrade request, the scope, calling the app, the 101 or the denial;
//! - `io`: the `receive` / `send` callables and the task that owns the socket after the upgrade.
//!
//! Framing, masking, fragmentation, UTF-8 checks, ping/pong and the close handshake are
//! tungstenite's; this module maps them onto ASGI messages and close codes.

mod io;
mod serve;

pub use self::serve::{is_upgrade, upgrade};
