//! `RecordingIo`: the connection's socket as hyper reads it, with a [`Recorder`] following
//! every request head on the way (see `heads`), and the client's first bytes, read to tell
//! HTTP/1.1 from HTTP/2, held back for hyper's first read.
//!
//! Held-back bytes are handed on together with whatever has arrived behind them, in one read:
//! handed back alone, hyper would find the head incomplete and double its 8 KiB read buffer to
//! 16 KiB, which every idle keep-alive connection would keep.
//!
//! On HTTP/1.1 it writes the 103 Early Hints hyper cannot send (`http::InterimQueue`) when
//! hyper flushes.
//!
//! On HTTP/2 it also gathers writes: each round of them waits once for the tasks already
//! runnable (`coalesce_writes`), so the responses they finish go out together.

use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{ready, Context, Poll};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

use crate::http::{InterimQueue, Recorder, HTTP2_PREFACE};

/// A connection's stream with a [`Recorder`] watching what hyper reads from it.
pub struct RecordingIo<T> {
    inner: T,
    recorder: Recorder,
    /// The bytes read by `starts_with_http2_preface`; `held[start..end]` are not handed on yet.
    held: [u8; HTTP2_PREFACE.len()],
    start: u8,
    end: u8,
    /// Whether writes wait for the tasks already runnable before going out (`coalesce_writes`).
    coalescing: bool,
    /// Whether this round of writes has waited once already; a flush ends the round.
    yielded: bool,
    /// The connection's informational responses, written first when hyper flushes.
    interim: Option<Arc<InterimQueue>>,
}

impl<T> RecordingIo<T> {
    pub fn new(inner: T, recorder: Recorder) -> Self {
        Self {
            inner,
            recorder,
            held: [0; HTTP2_PREFACE.len()],
            start: 0,
            end: 0,
            coalescing: false,
            yielded: false,
            interim: None,
        }
    }

    /// Writes the informational responses queued in `interim` when hyper flushes, which it
    /// does only with its own buffer empty: they go out between its responses, never inside one.
    pub fn with_interim(mut self, interim: Option<Arc<InterimQueue>>) -> Self {
        self.interim = interim;
        self
    }

    /// Makes each round of writes wait once for the tasks already runnable, for HTTP/2. Its
    /// streams' responses come one task at a time (from the loop's thread with uvloop), and
    /// each wakes the connection, which tokio runs next: without the wait every response went
    /// out in a write of its own.
    pub fn coalesce_writes(&mut self) {
        self.coalescing = true;
    }

    /// Whether this write waits: once a round, the task asks to be polled again after the
    /// tasks already runnable, whose responses then join this one in the write.
    fn waits_for_others(&mut self, cx: &Context<'_>) -> bool {
        if !self.coalescing || self.yielded {
            return false;
        }
        self.yielded = true;
        cx.waker().wake_by_ref();
        self.note_write(true);
        true
    }
}

impl<T: AsyncRead + Unpin> RecordingIo<T> {
    /// Reads until the client's first bytes match the HTTP/2 preface whole (`true`) or differ
    /// from it (`false`), and holds them for hyper. A client that closes first is taken for
    /// HTTP/1.1, which then sees the end of its stream as hyper would.
    pub async fn starts_with_http2_preface(&mut self) -> io::Result<bool> {
        loop {
            let filled = usize::from(self.end);
            let read = self.read_into_held().await?;
            if read == 0 {
                return Ok(false);
            }
            let seen = filled + read;
            if self.held[filled..seen] != HTTP2_PREFACE[filled..seen] {
                return Ok(false);
            }
            if seen == HTTP2_PREFACE.len() {
                return Ok(true);
            }
        }
    }

    /// Waits for the client's next bytes and holds them for hyper's next read: `false` if the
    /// client closed instead. For a connection put aside between requests, with hyper gone.
    pub async fn next_bytes_arrive(&mut self) -> io::Result<bool> {
        debug_assert_eq!(self.start, self.end, "held bytes not handed on");
        (self.start, self.end) = (0, 0);
        Ok(self.read_into_held().await? > 0)
    }

    /// Reads what has come into the free end of `held`: how many bytes (0 at the end of the
    /// stream).
    async fn read_into_held(&mut self) -> io::Result<usize> {
        let filled = usize::from(self.end);
        let read = std::future::poll_fn(|cx| {
            let mut buf = ReadBuf::new(&mut self.held[filled..]);
            ready!(read_recorded(
                &mut self.inner,
                &mut self.recorder,
                cx,
                &mut buf
            ))?;
            Poll::Ready(Ok::<_, io::Error>(buf.filled().len()))
        })
        .await?;
        self.end = (filled + read) as u8;
        Ok(read)
    }
}

/// Reads from `inner` into `buf` and shows the recorder what came.
fn read_recorded<T: AsyncRead + Unpin>(
    inner: &mut T,
    recorder: &mut Recorder,
    cx: &mut Context<'_>,
    buf: &mut ReadBuf<'_>,
) -> Poll<io::Result<()>> {
    let before = buf.filled().len();
    ready!(Pin::new(inner).poll_read(cx, buf))?;
    recorder.feed(&buf.filled()[before..]);
    if recorder.refused() {
        return Poll::Ready(Err(io::Error::new(
            io::ErrorKind::InvalidData,
            "HTTP/2 is turned off (--http 1)",
        )));
    }
    Poll::Ready(Ok(()))
}

// Each read and write also lets a busy tokio worker send the loop wakes it holds once they are
// due (`bridge::send_held_wakes_if_due`): connections are what keeps a worker from parking.
impl<T: AsyncRead + Unpin> AsyncRead for RecordingIo<T> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        crate::bridge::send_held_wakes_if_due();
        let this = self.get_mut();
        if this.start == this.end {
            return read_recorded(&mut this.inner, &mut this.recorder, cx, buf);
        }
        let (start, end) = (usize::from(this.start), usize::from(this.end));
        let n = (end - start).min(buf.remaining());
        buf.put_slice(&this.held[start..start + n]);
        this.start += n as u8;
        if this.start == this.end && buf.remaining() > 0 {
            // Whatever else has arrived joins the held bytes in this read. Pending or an error
            // is left for the next read to meet: the held bytes alone are a good answer now.
            let _ = read_recorded(&mut this.inner, &mut this.recorder, cx, buf);
        }
        Poll::Ready(Ok(()))
    }
}

impl<T: AsyncWrite + Unpin> AsyncWrite for RecordingIo<T> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        crate::bridge::send_held_wakes_if_due();
        let this = self.get_mut();
        if this.waits_for_others(cx) {
            return Poll::Pending;
        }
        let written = Pin::new(&mut this.inner).poll_write(cx, buf);
        this.note_write(written.is_pending());
        written
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        crate::bridge::send_held_wakes_if_due();
        let this = self.get_mut();
        if this.waits_for_others(cx) {
            return Poll::Pending;
        }
        let written = Pin::new(&mut this.inner).poll_write_vectored(cx, bufs);
        this.note_write(written.is_pending());
        written
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        this.yielded = false;
        if let Some(interim) = &this.interim {
            let written = interim.poll_write_to(cx, &mut this.inner);
            if !matches!(written, Poll::Ready(Ok(()))) {
                this.note_write(written.is_pending());
                return written;
            }
        }
        let flushed = Pin::new(&mut this.inner).poll_flush(cx);
        this.note_write(flushed.is_pending());
        flushed
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        if this.recorder.log().setting_aside() {
            return Poll::Ready(Ok(())); // hyper goes, the connection stays (`finish_when`)
        }
        Pin::new(&mut this.inner).poll_shutdown(cx)
    }
}

impl<T> RecordingIo<T> {
    /// hyper writes until its buffer is empty or a write is pending, so the last write's
    /// outcome tells whether bytes wait in it.
    fn note_write(&self, pending: bool) {
        self.recorder.log().set_write_waiting(pending);
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use tokio::io::AsyncReadExt;

    use super::*;
    use crate::http::HeadLog;

    /// A reader that yields `chunks` one read at a time.
    struct ChunkReader(Vec<Vec<u8>>);

    impl ChunkReader {
        fn new(chunks: &[&[u8]]) -> Self {
            Self(chunks.iter().map(|c| c.to_vec()).rev().collect())
        }
    }

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

    fn recording(chunks: &[&[u8]]) -> (RecordingIo<ChunkReader>, Arc<HeadLog>) {
        let log = Arc::new(HeadLog::default());
        let recorder = Recorder::new(log.clone(), 64 * 1024);
        (RecordingIo::new(ChunkReader::new(chunks), recorder), log)
    }

    async fn sniffed(chunks: &[&[u8]]) -> (bool, Vec<u8>) {
        let (mut io, _) = recording(chunks);
        let http2 = io.starts_with_http2_preface().await.unwrap();
        let mut all = Vec::new();
        io.read_to_end(&mut all).await.unwrap();
        (http2, all)
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
    async fn the_rest_of_the_head_joins_the_held_bytes_in_one_read_and_is_recorded_once() {
        let (mut io, log) = recording(&[b"GET / HTTP/1.1\r\n", b"Host: x\r\n\r\n"]);
        assert!(!io.starts_with_http2_preface().await.unwrap());
        let mut buf = [0u8; 64];
        let n = io.read(&mut buf).await.unwrap();
        assert_eq!(&buf[..n], b"GET / HTTP/1.1\r\nHost: x\r\n\r\n");
        assert!(log.take().is_some());
        assert!(log.take().is_none());
    }

    #[tokio::test]
    async fn bytes_read_while_set_aside_reach_the_next_read_with_what_follows() {
        let (mut io, log) = recording(&[b"G", b"ET /b HTTP/1.1\r\n\r\n"]);
        assert!(io.next_bytes_arrive().await.unwrap());
        let mut buf = [0u8; 64];
        let n = io.read(&mut buf).await.unwrap();
        assert_eq!(&buf[..n], b"GET /b HTTP/1.1\r\n\r\n");
        assert_eq!(log.requests(), 1, "recorded once");
        assert!(
            !io.next_bytes_arrive().await.unwrap(),
            "the end of the stream"
        );
    }

    #[tokio::test]
    async fn a_client_that_closes_at_once_is_http1_with_nothing() {
        let (http2, all) = sniffed(&[]).await;
        assert!(!http2);
        assert!(all.is_empty());
    }

    /// A writer that counts the writes reaching it.
    #[derive(Default)]
    struct CountingWriter(usize);

    impl AsyncWrite for CountingWriter {
        fn poll_write(
            self: Pin<&mut Self>,
            _: &mut Context<'_>,
            buf: &[u8],
        ) -> Poll<io::Result<usize>> {
            self.get_mut().0 += 1;
            Poll::Ready(Ok(buf.len()))
        }

        fn poll_flush(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
            Poll::Ready(Ok(()))
        }

        fn poll_shutdown(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
            Poll::Ready(Ok(()))
        }
    }

    /// Counts its wakes.
    #[derive(Default)]
    struct Wakes(std::sync::atomic::AtomicUsize);

    impl std::task::Wake for Wakes {
        fn wake(self: Arc<Self>) {
            self.0.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        }
    }

    /// Seen failing with `waits_for_others` returning `false` always: the first write of each
    /// round went straight to the socket, and nothing asked for the task to be polled again.
    #[test]
    fn coalesced_writes_wait_once_a_round_and_ask_to_be_polled_again() {
        let log = Arc::new(HeadLog::default());
        let mut io = RecordingIo::new(CountingWriter::default(), Recorder::new(log, 1024));
        io.coalesce_writes();
        let wakes = Arc::new(Wakes::default());
        let waker = std::task::Waker::from(wakes.clone());
        let mut cx = Context::from_waker(&waker);
        let mut io = Pin::new(&mut io);
        for round in 1..=2 {
            assert!(io.as_mut().poll_write(&mut cx, b"ab").is_pending());
            assert_eq!(wakes.0.load(std::sync::atomic::Ordering::Relaxed), round);
            assert!(matches!(
                io.as_mut().poll_write(&mut cx, b"ab"),
                Poll::Ready(Ok(2))
            ));
            assert!(matches!(
                io.as_mut().poll_write(&mut cx, b"cd"),
                Poll::Ready(Ok(2))
            ));
            assert!(io.as_mut().poll_flush(&mut cx).is_ready());
            assert_eq!(
                io.inner.0,
                2 * round,
                "the writes after the wait go through"
            );
        }
    }

    #[test]
    fn writes_go_straight_through_unless_coalescing() {
        let log = Arc::new(HeadLog::default());
        let mut io = RecordingIo::new(CountingWriter::default(), Recorder::new(log, 1024));
        let waker = std::task::Waker::from(Arc::new(Wakes::default()));
        let mut cx = Context::from_waker(&waker);
        assert!(Pin::new(&mut io).poll_write(&mut cx, b"ab").is_ready());
        assert_eq!(io.inner.0, 1);
    }
}
