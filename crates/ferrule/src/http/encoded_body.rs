//! `EncodedBody`: a response body compressed as hyper polls it (`--compress`).

use std::pin::Pin;
use std::task::{ready, Context, Poll};

use bytes::Bytes;
use http::HeaderMap;
use http_body::{Body, Frame};

use crate::compress::Encoder;

/// The most of one frame compressed per poll: a large whole body goes out a slice at a time.
const SLICE: usize = 64 * 1024;

/// The app's body (whole or streamed), compressed frame by frame. Each chunk the app streams
/// is flushed as it is compressed, so the client can decode everything sent so far: a stream
/// (server-sent events, a progress log) is never held back waiting for more.
pub struct EncodedBody<B> {
    inner: B,
    /// Whether `inner` is streamed from the app, whose chunks are then each flushed.
    streamed: bool,
    /// `None` once the stream has been finished.
    encoder: Option<Encoder>,
    /// Taken from `inner`, not yet compressed.
    input: Bytes,
    /// The app's trailers, sent after the compressed stream's end.
    trailers: Option<HeaderMap>,
}

impl<B> EncodedBody<B> {
    pub(super) fn new(inner: B, streamed: bool, encoder: Encoder) -> Self {
        Self {
            inner,
            streamed,
            encoder: Some(encoder),
            input: Bytes::new(),
            trailers: None,
        }
    }

    pub(super) fn inner_mut(&mut self) -> &mut B {
        &mut self.inner
    }

    /// Compresses the next slice of input, then (at the end of a streamed chunk) flushes: the
    /// output made, which may be none yet.
    fn compress_slice(&mut self) -> std::io::Result<Bytes> {
        let encoder = self.encoder.as_mut().expect("input only before the end");
        let slice = self.input.split_to(self.input.len().min(SLICE));
        encoder.write(&slice)?;
        if self.input.is_empty() && self.streamed {
            encoder.flush()?;
        }
        Ok(Bytes::from(encoder.take()))
    }

    /// Ends the compressed stream: the last of its output.
    fn finish(&mut self) -> std::io::Result<Bytes> {
        match self.encoder.take() {
            Some(encoder) => encoder.finish().map(Bytes::from),
            None => Ok(Bytes::new()),
        }
    }
}

/// A compressor's failure (only ever for want of memory) ends the body as the inner body's
/// own errors do.
impl<B> Body for EncodedBody<B>
where
    B: Body<Data = Bytes> + Unpin,
    B::Error: From<std::io::Error>,
{
    type Data = Bytes;
    type Error = B::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, B::Error>>> {
        let this = self.get_mut();
        loop {
            if !this.input.is_empty() {
                let output = this.compress_slice().map_err(B::Error::from)?;
                if !output.is_empty() {
                    return Poll::Ready(Some(Ok(Frame::data(output))));
                }
                continue;
            }
            if this.encoder.is_none() {
                return Poll::Ready(this.trailers.take().map(|t| Ok(Frame::trailers(t))));
            }
            match ready!(Pin::new(&mut this.inner).poll_frame(cx)) {
                Some(Ok(frame)) => match frame.into_data() {
                    Ok(data) => {
                        this.input = data;
                        continue;
                    }
                    Err(frame) => this.trailers = frame.into_trailers().ok(),
                },
                Some(Err(aborted)) => return Poll::Ready(Some(Err(aborted))),
                None => {}
            }
            // The app's body has ended (its trailers, if any, kept for after): so does the
            // compressed stream.
            let output = this.finish().map_err(B::Error::from)?;
            if !output.is_empty() {
                return Poll::Ready(Some(Ok(Frame::data(output))));
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        self.encoder.is_none() && self.trailers.is_none()
    }
}
