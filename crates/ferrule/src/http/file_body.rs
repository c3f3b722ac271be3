//! `FileBody`: a static file's bytes (or a range of them), read by a tokio task as hyper
//! takes them.

use std::io::{Seek, SeekFrom};
use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::{Bytes, BytesMut};
use http_body::{Body, Frame, SizeHint};
use tokio::io::AsyncReadExt;
use tokio::sync::mpsc;

/// One read's size: large enough that a big file costs few reads (and hyper few writes),
/// small enough that a slow client's transfer holds little (two chunks: one in the channel,
/// one being read).
const CHUNK: usize = 128 * 1024;

pub struct FileBody {
    rx: mpsc::Receiver<std::io::Result<Bytes>>,
    /// Bytes not yet handed to hyper.
    remaining: u64,
}

impl FileBody {
    /// `length` bytes of `file` from `start`, read on `handle`'s blocking threads (tokio's
    /// file reads) one chunk ahead of hyper. A file that ends early (truncated while served)
    /// ends the body in an error: hyper closes the connection rather than send less than the
    /// Content-Length said.
    pub(super) fn spawn(
        mut file: std::fs::File,
        start: u64,
        length: u64,
        handle: &tokio::runtime::Handle,
    ) -> FileBody {
        let (tx, rx) = mpsc::channel(1);
        handle.spawn(async move {
            if let Err(err) = file.seek(SeekFrom::Start(start)) {
                let _ = tx.send(Err(err)).await;
                return;
            }
            let mut file = tokio::fs::File::from_std(file).take(length);
            let mut left = length;
            while left > 0 {
                let mut chunk = BytesMut::with_capacity(CHUNK.min(left as usize));
                let read = match file.read_buf(&mut chunk).await {
                    Ok(0) => Err(std::io::ErrorKind::UnexpectedEof.into()),
                    Ok(read) => Ok(read),
                    Err(err) => Err(err),
                };
                let Ok(read) = read else {
                    let _ = tx.send(read.map(|_| Bytes::new())).await;
                    return;
                };
                left -= read as u64;
                if tx.send(Ok(chunk.freeze())).await.is_err() {
                    return; // the client went away
                }
            }
        });
        FileBody {
            rx,
            remaining: length,
        }
    }

    pub(super) fn poll_chunk(
        &mut self,
        cx: &mut Context<'_>,
    ) -> Poll<Option<std::io::Result<Frame<Bytes>>>> {
        if self.remaining == 0 {
            return Poll::Ready(None);
        }
        let chunk = std::task::ready!(self.rx.poll_recv(cx));
        Poll::Ready(Some(match chunk {
            Some(Ok(chunk)) => {
                self.remaining = self.remaining.saturating_sub(chunk.len() as u64);
                Ok(Frame::data(chunk))
            }
            Some(Err(err)) => Err(err),
            None => Err(std::io::ErrorKind::UnexpectedEof.into()),
        }))
    }

    pub(super) fn remaining(&self) -> u64 {
        self.remaining
    }
}

impl Body for FileBody {
    type Data = Bytes;
    type Error = std::io::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, std::io::Error>>> {
        self.get_mut().poll_chunk(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.remaining == 0
    }

    fn size_hint(&self) -> SizeHint {
        SizeHint::with_exact(self.remaining)
    }
}
