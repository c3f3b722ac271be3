//! quinn's settings for the HTTP/3 endpoint: TLS 1.3 with ALPN `h3` on the TLS listener's
//! certificate, the idle timeout, and how many streams a client may open.

use std::sync::Arc;

use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use quinn::crypto::rustls::QuicServerConfig;
use quinn::{IdleTimeout, TransportConfig, VarInt};

use crate::asgi::settings::Settings;
use crate::tcp::TlsFiles;

/// Request streams one connection may have open at once (HTTP/2's usual limit).
pub(super) const MAX_REQUEST_STREAMS: u32 = 100;
/// Request body bytes one connection, and one stream, may have in before the app reads them.
const RECEIVE_WINDOW: u32 = 2 * 1024 * 1024;
const STREAM_RECEIVE_WINDOW: u32 = 1024 * 1024;

/// Unidirectional streams a client may open: HTTP/3's control stream and QPACK's two, with
/// room for grease streams, which clients may send and servers ignore.
const MAX_UNI_STREAMS: u32 = 8;

/// The endpoint's settings, from the TLS files and the server's settings.
pub(super) fn server_config(
    tls: &TlsFiles<'_>,
    settings: &Settings,
) -> PyResult<quinn::ServerConfig> {
    let rustls = tls.server_config(vec![b"h3".to_vec()])?;
    let crypto = QuicServerConfig::try_from(Arc::new(rustls))
        .map_err(|err| PyValueError::new_err(format!("TLS setup for HTTP/3: {err}")))?;
    let mut config = quinn::ServerConfig::with_crypto(Arc::new(crypto));
    let mut transport = TransportConfig::default();
    // The keep-alive timeout is QUIC's idle timeout: a connection silent that long is gone.
    let idle = IdleTimeout::try_from(settings.header_read_timeout())
        .map_err(|_| PyValueError::new_err("timeout_keep_alive is too long for QUIC"))?;
    transport
        .max_idle_timeout(Some(idle))
        // What a client may send before the app reads, per connection and per stream, as
        // HTTP/2's windows: quinn's default has no connection window, so 100 streams of
        // uploads the app never read parked 125 MB on one connection.
        .receive_window(VarInt::from_u32(RECEIVE_WINDOW))
        .stream_receive_window(VarInt::from_u32(STREAM_RECEIVE_WINDOW))
        .max_concurrent_bidi_streams(VarInt::from_u32(MAX_REQUEST_STREAMS))
        .max_concurrent_uni_streams(VarInt::from_u32(MAX_UNI_STREAMS));
    config.transport_config(Arc::new(transport));
    Ok(config)
}
