//! `Listeners`: the listening sockets Python hands over, and what accepting from them gives.

use std::future::poll_fn;
use std::os::fd::RawFd;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::task::Poll;

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

/// Every socket one server accepts on: one as a rule, several under systemd's socket
/// activation or `Server.serve(sockets=...)`.
pub(super) struct Listeners {
    all: Vec<Listener>,
    /// Where the next accept starts looking, so that a busy socket cannot starve the others.
    next: AtomicUsize,
}

impl Listeners {
    pub(super) fn new(all: Vec<Listener>) -> Self {
        Self {
            all,
            next: AtomicUsize::new(0),
        }
    }

    /// The first TCP socket's port, which HTTP/3 is served beside, and its index.
    pub(super) fn first_tcp_port(&self) -> Option<(usize, u16)> {
        self.all
            .iter()
            .enumerate()
            .find_map(|(i, listener)| match listener {
                Listener::Tcp(tcp) => tcp.local_addr().ok().map(|addr| (i, addr.port())),
                Listener::Unix(..) => None,
            })
    }

    /// The next connection on any of the sockets, with the index of the one it came to.
    pub(super) async fn accept(&self) -> std::io::Result<(Accepted, usize)> {
        let count = self.all.len();
        poll_fn(|cx| {
            let start = self.next.load(Ordering::Relaxed);
            for offset in 0..count {
                let i = (start + offset) % count;
                if let Poll::Ready(accepted) = poll_accept(&self.all[i], cx) {
                    self.next.store((i + 1) % count, Ordering::Relaxed);
                    return Poll::Ready(accepted.map(|accepted| (accepted, i)));
                }
            }
            Poll::Pending
        })
        .await
    }
}

fn poll_accept(
    listener: &Listener,
    cx: &mut std::task::Context<'_>,
) -> Poll<std::io::Result<Accepted>> {
    match listener {
        Listener::Tcp(listener) => listener.poll_accept(cx).map(|accepted| {
            let (stream, peer) = accepted?;
            let _ = stream.set_nodelay(true);
            let local = stream.local_addr()?;
            let conn = ConnInfo::new(
                Some((peer.ip().to_string(), peer.port())),
                (local.ip().to_string(), Some(local.port())),
            );
            Ok((Box::new(stream) as Box<dyn IoStream>, conn))
        }),
        Listener::Unix(listener, path) => listener.poll_accept(cx).map(|accepted| {
            let (stream, _) = accepted?;
            let conn = ConnInfo::new(None, (path.clone(), None));
            Ok((Box::new(stream) as Box<dyn IoStream>, conn))
        }),
    }
}
