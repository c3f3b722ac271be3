//! HTTP/1.1 or HTTP/2, told by the client's first bytes (the HTTP/2 connection preface), and
//! `PrefixedIo`, which hands those bytes back to hyper before the rest of the stream.
//!
//! hyper-util's version sniffing hands its 24 bytes back alone, as hyper's first read; hyper
//! then finds the head incomplete and doubles its 8 KiB read buffer to 16 KiB, which every idle
//! keep-alive connection kept. `PrefixedIo` reads on behind the prefix in the same call, so the
//! first read holds the whole head and the buffer stays at 8 KiB.

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, ReadBuf};

const HTTP2_PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

/// Reads until the first bytes match the HTTP/2 preface whole (`true`) or differ from it
/// (`false`), and returns the stream with those bytes put back in front. A client that closes
/// first is taken for HTTP/1.1, which then sees the end of its stream as hyper would.
pub(super) async fn sniff<T: AsyncRead + Unpin>(mut io: T) -> io::Result<(bool, PrefixedIo<T>)> {
    let mut prefix = [0u8; HTTP2_PREFACE.len()];
    let mut filled = 0;
    let http2 = loop {
        let read = io.read(&mut prefix[filled..]).await?;
        if read == 0 {
            break false;
        }
        let seen = filled + read;
        if prefix[filled..seen] != HTTP2_PREFACE[filled..seen] {
            filled = seen;
            break false;
        }
        filled = seen;
        if filled == HTTP2_PREFACE.len() {
            break true;
        }
    };
    let io = PrefixedIo {
        inner: io,
        prefix,
        start: 0,
        end: filled,
    };
    Ok((http2, io))
}

/// A stream with bytes already read from it put back in front.
pub(super) struct PrefixedIo<T> {
    inner: T,
    prefix: [u8; HTTP2_PREFACE.len()],
    start: usize,
    end: usize,
}

impl<T> PrefixedIo<T> {
    /// `inner` with nothing put back: the version is known without reading.
    pub(super) fn new(inner: T) -> Self {
        Self {
            inner,
            prefix: [0; HTTP2_PREFACE.len()],
            start: 0,
            end: 0,
        }
    }
}

impl<T: AsyncRead + Unpin> AsyncRead for PrefixedIo<T> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        if this.start == this.end {
            return Pin::new(&mut this.inner).poll_read(cx, buf);
        }
        let n = (this.end - this.start).min(buf.remaining());
        buf.put_slice(&this.prefix[this.start..this.start + n]);
        this.start += n;
        if this.start == this.end && buf.remaining() > 0 {
            // Whatever else has arrived joins the prefix in this read. Pending or an error is
            // left for the next read to meet: the prefix alone is a good answer now.
            let _ = Pin::new(&mut this.inner).poll_read(cx, buf);
        }
        Poll::Ready(Ok(()))
    }
}

impl<T: AsyncWrite + Unpin> AsyncWrite for PrefixedIo<T> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().inner).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
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

#[cfg(test)]
mod tests {
    use super::*;

    async fn sniffed(chunks: &[&[u8]]) -> (bool, Vec<u8>) {
        let mut builder = tokio_test_io(chunks);
        let (http2, mut io) = sniff(&mut builder).await.unwrap();
        let mut all = Vec::new();
        io.read_to_end(&mut all).await.unwrap();
        (http2, all)
    }

    /// A reader that yields `chunks` one read at a time.
    fn tokio_test_io(chunks: &[&[u8]]) -> ChunkReader {
        ChunkReader(chunks.iter().map(|c| c.to_vec()).rev().collect())
    }

    struct ChunkReader(Vec<Vec<u8>>);

    impl AsyncRead for ChunkReader {
        fn poll_read(
            self: Pin<&mut Self>,
            _: &mut Context<'_>,
            buf: &mut ReadBuf<'_>,
        ) -> Poll<io::Result<()>> {
            if let Some(chunk) = self.get_mut().0.pop() {
                buf.put_slice(&chunk);
            }
            Poll::Ready(Ok(()))
        }
    }

    #[tokio::test]
    async fn http1_is_told_at_the_first_difference_and_nothing_is_lost() {
        let (http2, all) = sniffed(&[b"P", b"OST / HTTP/1.1\r\n\r\n"]).await;
        assert!(!http2);
        assert_eq!(all, b"POST / HTTP/1.1\r\n\r\n");
    }

    #[tokio::test]
    async fn the_http2_preface_split_anywhere_is_http2() {
        let (http2, all) = sniffed(&[&HTTP2_PREFACE[..5], &HTTP2_PREFACE[5..], b"frames"]).await;
        assert!(http2);
        assert_eq!(all, [HTTP2_PREFACE, b"frames"].concat());
    }

    #[tokio::test]
    async fn the_rest_of_the_head_joins_the_prefix_in_one_read() {
        let mut reader = tokio_test_io(&[b"GET / HTTP/1.1\r\n", b"Host: x\r\n\r\n"]);
        let (_, mut io) = sniff(&mut reader).await.unwrap();
        let mut buf = [0u8; 64];
        let n = io.read(&mut buf).await.unwrap();
        assert_eq!(&buf[..n], b"GET / HTTP/1.1\r\nHost: x\r\n\r\n");
    }

    #[tokio::test]
    async fn a_client_that_closes_at_once_is_http1_with_nothing() {
        let (http2, all) = sniffed(&[]).await;
        assert!(!http2);
        assert!(all.is_empty());
    }
}
