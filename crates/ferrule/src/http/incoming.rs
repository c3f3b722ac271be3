//! `IncomingBody`: a request's body as `receive()` reads it, from hyper (HTTP/1.1, HTTP/2) or
//! from another protocol's stream (HTTP/3), so that every request shares one request path.

use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::Bytes;
use http_body::{Body, Frame, SizeHint};
use hyper::body::Incoming;

pub type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// A request's body: hyper's, or one read from a stream hyper does not serve.
pub enum IncomingBody {
    Hyper(Incoming),
    Stream(Pin<Box<dyn Body<Data = Bytes, Error = BoxError> + Send>>),
}

/// Why a request body could not be read.
#[derive(Debug)]
pub enum IncomingError {
    Hyper(hyper::Error),
    Stream(BoxError),
}

impl IncomingError {
    /// Whether the body stopped short (the client went away or reset its stream), rather than
    /// being malformed (which is answered 400).
    pub fn is_incomplete(&self) -> bool {
        match self {
            IncomingError::Hyper(err) => err.is_incomplete_message(),
            IncomingError::Stream(_) => true,
        }
    }
}

impl Body for IncomingBody {
    type Data = Bytes;
    type Error = IncomingError;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, IncomingError>>> {
        match self.get_mut() {
            IncomingBody::Hyper(body) => Pin::new(body)
                .poll_frame(cx)
                .map(|frame| frame.map(|frame| frame.map_err(IncomingError::Hyper))),
            IncomingBody::Stream(body) => body
                .as_mut()
                .poll_frame(cx)
                .map(|frame| frame.map(|frame| frame.map_err(IncomingError::Stream))),
        }
    }

    fn is_end_stream(&self) -> bool {
        match self {
            IncomingBody::Hyper(body) => body.is_end_stream(),
            IncomingBody::Stream(body) => body.is_end_stream(),
        }
    }

    fn size_hint(&self) -> SizeHint {
        match self {
            IncomingBody::Hyper(body) => body.size_hint(),
            IncomingBody::Stream(body) => body.size_hint(),
        }
    }
}
