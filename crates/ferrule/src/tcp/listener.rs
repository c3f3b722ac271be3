//! `Listener`: the listening sockets Python hands over, and what accepting from them gives.

use std::os::fd::RawFd;

use pyo3::prelude::*;
use tokio::io::{AsyncRead, AsyncWrite};

use crate::asgi::conn::ConnInfo;

/// Listening sockets handed over from Python (which binds them, for clear errors and for
/// sharing one socket between worker processes).
pub(super) enum Listener {
    Tcp(tokio::net::TcpListener),
    Unix(tokio::net::UnixListener, String),
}

pub(super) fn std_tcp_listener(fd: RawFd) -> PyResult<std::net::TcpListener> {
    let listener = crate::bridge::take_fd::<std::net::TcpListener>(fd)?;
    listener.set_nonblocking(true)?;
    Ok(listener)
}

pub(super) fn std_unix_listener(fd: RawFd) -> PyResult<std::os::unix::net::UnixListener> {
    let listener = crate::bridge::take_fd::<std::os::unix::net::UnixListener>(fd)?;
    listener.set_nonblocking(true)?;
    Ok(listener)
}

pub(super) trait IoStream: AsyncRead + AsyncWrite + Unpin + Send {}

impl<T: AsyncRead + AsyncWrite + Unpin + Send> IoStream for T {}

pub(super) type Accepted = (Box<dyn IoStream>, ConnInfo);

pub(super) async fn accept(listener: &Listener) -> std::io::Result<Accepted> {
    match listener {
        Listener::Tcp(listener) => {
            let (stream, peer) = listener.accept().await?;
            let _ = stream.set_nodelay(true);
            let local = stream.local_addr()?;
            let conn = ConnInfo::new(
                Some((peer.ip().to_string(), peer.port())),
                (local.ip().to_string(), Some(local.port())),
            );
            Ok((Box::new(stream), conn))
        }
        Listener::Unix(listener, path) => {
            let (stream, _) = listener.accept().await?;
            Ok((Box::new(stream), ConnInfo::new(None, (path.clone(), None))))
        }
    }
}
