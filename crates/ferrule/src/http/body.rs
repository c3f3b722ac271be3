//! `ResponseBody`: the response body hyper polls, whole or streamed from the app.

use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};

use bytes::{Bytes, BytesMut};
use http::HeaderMap;
use http_body::{Body, Frame, SizeHint};
use tokio::sync::{mpsc, Notify};

use super::encoded_body::EncodedBody;
use super::file_body::FileBody;
use super::streams::OpenStream;

/// Chunks smaller than this that wait in the channel together are joined into one frame:
/// hyper writes an HTTP/1.1 body out every 16 frames, so 1 KiB chunks cost a system call per
/// 16 KiB. Larger chunks go as they are, uncopied.
pub(super) const JOIN_BELOW: usize = 4 * 1024;
/// The most a joined frame holds (HTTP/2's default frame size).
const JOINED_MAX: usize = 16 * 1024;

/// The response body hyper polls: all at once, streamed from the app through a channel, a
/// static file read as hyper takes it, or any of them compressed on the way (`--compress`).
pub enum ResponseBody {
    Full(Option<Bytes>),
    Stream(StreamBody),
    File(FileBody),
    Encoded(Box<EncodedBody<ResponseBody>>),
}

/// Where a streamed body comes from (the request's exchange): what the two sides share, and
/// who to tell when hyper lets go of the body before its end.
pub(super) trait BodySource: Send + Sync {
    fn queue(&self) -> &BodyQueue;

    /// hyper dropped the body before its end: `whole` when the declared Content-Length was
    /// all out (hyper drops the body then, which is not the client leaving).
    fn released_early(&self, whole: bool);
}

/// What a streamed body and the app's `send()` share.
#[derive(Default)]
pub(super) struct BodyQueue {
    /// Set when the app failed after streaming began: the body ends in an error, so hyper
    /// closes the connection instead of finishing the response as if it were whole.
    pub(super) aborted: AtomicBool,
    /// The response's trailer fields, for the body to send once its data has ended.
    pub(super) trailers: Mutex<Option<HeaderMap>>,
    /// Body bytes in the channel to hyper (`BODY_QUEUE_BYTES`), and the signal that hyper took
    /// some, passed some on, or let go of the body.
    pub(super) queued: AtomicUsize,
    pub(super) drained: Notify,
    /// The last frame hyper took, until it polls again: HTTP/2 holds a frame until the peer's
    /// window lets it out, and HTTP/1.1 until its write buffer has room, so a poll says the
    /// frame before it has gone on.
    pub(super) outstanding: AtomicUsize,
    /// Body bytes hyper has passed on so far: how much the peer lets through, which is what
    /// the queue may grow to (`Exchange::has_room_for`).
    pub(super) passed_on: AtomicUsize,
}

impl BodyQueue {
    /// hyper polls the body again: the frame it took before has gone on.
    fn polled(&self) {
        let outstanding = self.outstanding.swap(0, Ordering::AcqRel);
        if outstanding > 0 {
            self.passed_on.fetch_add(outstanding, Ordering::AcqRel);
            self.drained.notify_one();
        }
    }
}

pub struct StreamBody {
    rx: mpsc::Receiver<Bytes>,
    /// Held so that hyper dropping the body before its end tells the app the client is gone.
    source: Arc<dyn BodySource>,
    ended: bool,
    /// The response's Content-Length, if it declared one, and the bytes handed to hyper: hyper
    /// drops a body as soon as the declared length is out, which is not the client leaving.
    declared: Option<u64>,
    sent: u64,
    /// A request counts as in progress until its body ends (`OpenStreams`).
    open_stream: Option<OpenStream>,
    /// The app failed mid-body and hyper was given a chance to flush first (`poll_frame`).
    flushed_before_abort: bool,
    /// A chunk taken from the channel that did not fit the frame being joined: the next frame
    /// (counted in `BodyQueue::queued` until then).
    held: Option<Bytes>,
}

impl ResponseBody {
    pub fn full(body: Bytes) -> Self {
        ResponseBody::Full(Some(body))
    }

    /// Whether the body goes out in chunks as the app sends them, of no length known ahead.
    pub fn is_streamed(&self) -> bool {
        matches!(self, ResponseBody::Stream(_) | ResponseBody::Encoded(_))
    }

    /// Keeps `open_stream` until a streamed or file body ends (a whole one is out at once).
    pub fn hold(&mut self, open_stream: OpenStream) {
        match self {
            ResponseBody::Stream(stream) => stream.open_stream = Some(open_stream),
            ResponseBody::File(file) => file.hold(open_stream),
            ResponseBody::Encoded(encoded) => encoded.inner_mut().hold(open_stream),
            ResponseBody::Full(_) => {}
        }
    }

    pub(super) fn stream(
        rx: mpsc::Receiver<Bytes>,
        source: Arc<dyn BodySource>,
        declared: Option<u64>,
    ) -> Self {
        ResponseBody::Stream(StreamBody {
            rx,
            source,
            ended: false,
            declared,
            sent: 0,
            open_stream: None,
            flushed_before_abort: false,
            held: None,
        })
    }
}

impl From<Bytes> for ResponseBody {
    fn from(body: Bytes) -> Self {
        ResponseBody::full(body)
    }
}

/// The error a stream ends with when the app failed mid-response: hyper closes the connection.
#[derive(Debug)]
pub struct ResponseAborted;

impl std::fmt::Display for ResponseAborted {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("the ASGI app failed after the response started")
    }
}

impl std::error::Error for ResponseAborted {}

/// A compressor (`EncodedBody`) or a file's read (`FileBody`) that failed mid-body ends it as
/// an app failing would: hyper closes the connection.
impl From<std::io::Error> for ResponseAborted {
    fn from(_: std::io::Error) -> Self {
        ResponseAborted
    }
}

impl Body for ResponseBody {
    type Data = Bytes;
    type Error = ResponseAborted;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, ResponseAborted>>> {
        match self.get_mut() {
            ResponseBody::Full(body) => Poll::Ready(
                body.take()
                    .filter(|b| !b.is_empty())
                    .map(|b| Ok(Frame::data(b))),
            ),
            ResponseBody::Stream(stream) => match stream.next_chunk(cx) {
                Poll::Ready(Some(chunk)) => {
                    let chunk = stream.join_queued(chunk);
                    stream.sent += chunk.len() as u64;
                    let queue = stream.source.queue();
                    queue.outstanding.store(chunk.len(), Ordering::Release);
                    Poll::Ready(Some(Ok(Frame::data(chunk))))
                }
                Poll::Ready(None) => {
                    let queue = stream.source.queue();
                    let trailers = queue.trailers.lock().unwrap().take();
                    if let Some(trailers) = trailers {
                        return Poll::Ready(Some(Ok(Frame::trailers(trailers))));
                    }
                    if !queue.aborted.load(Ordering::Acquire) {
                        stream.ended = true;
                        return Poll::Ready(None);
                    }
                    if !stream.flushed_before_abort {
                        // hyper drops the connection at a body error without flushing what
                        // it holds, which may be the head and every chunk: once more round
                        // its loop (it flushes when the body is pending), then the error.
                        stream.flushed_before_abort = true;
                        cx.waker().wake_by_ref();
                        return Poll::Pending;
                    }
                    stream.ended = true;
                    Poll::Ready(Some(Err(ResponseAborted)))
                }
                Poll::Pending => Poll::Pending,
            },
            ResponseBody::File(file) => Poll::Ready(
                file.next_chunk()
                    .map(|frame| frame.map_err(ResponseAborted::from)),
            ),
            ResponseBody::Encoded(encoded) => Pin::new(encoded.as_mut()).poll_frame(cx),
        }
    }

    fn is_end_stream(&self) -> bool {
        match self {
            ResponseBody::Full(body) => body.as_ref().is_none_or(Bytes::is_empty),
            ResponseBody::Stream(stream) => stream.ended,
            ResponseBody::File(file) => file.remaining() == 0,
            ResponseBody::Encoded(encoded) => encoded.is_end_stream(),
        }
    }

    fn size_hint(&self) -> SizeHint {
        match self {
            ResponseBody::Full(body) => {
                SizeHint::with_exact(body.as_ref().map_or(0, |b| b.len() as u64))
            }
            ResponseBody::File(file) => SizeHint::with_exact(file.remaining()),
            ResponseBody::Stream(_) | ResponseBody::Encoded(_) => SizeHint::default(),
        }
    }
}

impl StreamBody {
    /// The next chunk the app sent, taken out of the channel (which makes room for `send()`).
    fn next_chunk(&mut self, cx: &mut Context<'_>) -> Poll<Option<Bytes>> {
        self.source.queue().polled();
        if let Some(chunk) = self.held.take() {
            self.taken(chunk.len());
            return Poll::Ready(Some(chunk));
        }
        let chunk = std::task::ready!(self.rx.poll_recv(cx));
        if let Some(chunk) = &chunk {
            self.taken(chunk.len());
        }
        Poll::Ready(chunk)
    }

    /// `first` with the small chunks queued behind it, up to `JOINED_MAX`: what has already
    /// arrived, never a wait for more.
    fn join_queued(&mut self, first: Bytes) -> Bytes {
        if first.len() >= JOIN_BELOW {
            return first;
        }
        let mut joined: Option<BytesMut> = None;
        while let Ok(next) = self.rx.try_recv() {
            let len = joined.as_ref().map_or(first.len(), BytesMut::len);
            if next.len() >= JOIN_BELOW || len + next.len() > JOINED_MAX {
                // Still counted as queued until it is handed out.
                self.held = Some(next);
                break;
            }
            self.taken(next.len());
            joined
                .get_or_insert_with(|| {
                    // What is queued now is at most what the frame will hold: no room to spare
                    // for a stream that then stalls with it.
                    let queued = self.source.queue().queued.load(Ordering::Acquire);
                    let mut buf = BytesMut::with_capacity(JOINED_MAX.min(len + queued));
                    buf.extend_from_slice(&first);
                    buf
                })
                .extend_from_slice(&next);
        }
        joined.map_or(first, BytesMut::freeze)
    }

    /// `len` bytes left the channel: room for the app's next `send()`.
    fn taken(&self, len: usize) {
        let queue = self.source.queue();
        queue.queued.fetch_sub(len, Ordering::AcqRel);
        queue.drained.notify_one();
    }
}

impl Drop for StreamBody {
    fn drop(&mut self) {
        // A `send()` waiting for room: the channel is closed now, its wait is over.
        self.rx.close();
        self.source.queue().drained.notify_one();
        if self.ended {
            return;
        }
        let whole = self.declared.is_some_and(|declared| self.sent >= declared);
        self.source.released_early(whole);
    }
}
