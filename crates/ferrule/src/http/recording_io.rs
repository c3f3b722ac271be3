//! `RecordingIo`: the connection's socket as hyper reads it, with a [`Recorder`] following
//! every request head on the way (see `heads`).

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

use super::heads::Recorder;

/// A connection's stream with a [`Recorder`] watching what hyper reads from it.
pub struct RecordingIo<T> {
    inner: T,
    recorder: Recorder,
}

impl<T> RecordingIo<T> {
    pub fn new(inner: T, recorder: Recorder) -> Self {
        Self { inner, recorder }
    }
}

// Each read and write also lets a busy tokio worker send the loop wakes it holds once they are
// due (`bridge::waker`): connections are what keeps a worker from parking.
impl<T: AsyncRead + Unpin> AsyncRead for RecordingIo<T> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        crate::bridge::waker::send_held_wakes_if_due();
        let this = self.get_mut();
        let before = buf.filled().len();
        let polled = Pin::new(&mut this.inner).poll_read(cx, buf);
        if let Poll::Ready(Ok(())) = polled {
            this.recorder.feed(&buf.filled()[before..]);
            if this.recorder.refused() {
                return Poll::Ready(Err(io::Error::new(
                    io::ErrorKind::InvalidData,
                    "HTTP/2 is turned off (--http 1)",
                )));
            }
        }
        polled
    }
}

impl<T: AsyncWrite + Unpin> AsyncWrite for RecordingIo<T> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        crate::bridge::waker::send_held_wakes_if_due();
        Pin::new(&mut self.get_mut().inner).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        crate::bridge::waker::send_held_wakes_if_due();
        Pin::new(&mut self.get_mut().inner).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_shutdown(cx)
    }
}
