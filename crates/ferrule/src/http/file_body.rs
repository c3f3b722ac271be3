//! `FileBody`: a static file's bytes (or a range of them), read as hyper takes them.

use std::fs::File;
use std::io::{Read, Seek, SeekFrom};
use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::Bytes;
use http_body::{Body, Frame, SizeHint};

use super::streams::OpenStream;

/// One read's size: large enough that a big file costs few reads (and hyper few writes), small
/// enough that a slow client's transfer holds little (hyper keeps one chunk until it is out).
const CHUNK: u64 = 256 * 1024;

/// Read in the connection's task when hyper asks for the next chunk, as nginx reads without
/// its thread pool: from the page cache a read is a copy, cheaper than handing it to another
/// thread and back. A file that ends early (truncated while served) ends the body in an
/// error: hyper closes the connection rather than send less than the Content-Length said.
pub struct FileBody {
    file: File,
    /// Bytes not yet handed to hyper.
    remaining: u64,
    /// The request counts as in progress until the last byte is handed over: an HTTP/2
    /// connection downloading a large file is not idle.
    open_stream: Option<OpenStream>,
}

impl FileBody {
    /// `length` bytes of `file` from `start`.
    pub(super) fn new(mut file: File, start: u64, length: u64) -> std::io::Result<FileBody> {
        if start > 0 {
            file.seek(SeekFrom::Start(start))?;
        }
        Ok(FileBody {
            file,
            remaining: length,
            open_stream: None,
        })
    }

    /// Keeps `open_stream` until the last chunk is read.
    pub(super) fn hold(&mut self, open_stream: OpenStream) {
        if self.remaining > 0 {
            self.open_stream = Some(open_stream);
        }
    }

    /// The next chunk, or `None` at the end.
    pub(super) fn next_chunk(&mut self) -> Option<std::io::Result<Frame<Bytes>>> {
        if self.remaining == 0 {
            return None;
        }
        let chunk = self.read(self.remaining.min(CHUNK));
        if self.remaining == 0 || chunk.is_err() {
            self.open_stream = None;
        }
        Some(chunk.map(Frame::data))
    }

    /// All that is left, in one piece (a small file, read before the response goes out).
    pub(super) fn whole(mut self) -> std::io::Result<Bytes> {
        if self.remaining == 0 {
            return Ok(Bytes::new()); // an empty file
        }
        let whole = self.read(self.remaining)?;
        match self.remaining {
            0 => Ok(whole),
            _ => Err(std::io::ErrorKind::UnexpectedEof.into()),
        }
    }

    /// Up to `want` bytes: what one pass of reads gives, an error if the file has ended.
    fn read(&mut self, want: u64) -> std::io::Result<Bytes> {
        // `take` stops the read at `want`, and `read_to_end` fills the buffer's spare room
        // without clearing it first.
        let mut chunk = Vec::with_capacity(want as usize);
        match (&mut self.file).take(want).read_to_end(&mut chunk)? {
            0 => Err(std::io::ErrorKind::UnexpectedEof.into()),
            read => {
                self.remaining -= read as u64;
                Ok(Bytes::from(chunk))
            }
        }
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
        _cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, std::io::Error>>> {
        Poll::Ready(self.get_mut().next_chunk())
    }

    fn is_end_stream(&self) -> bool {
        self.remaining == 0
    }

    fn size_hint(&self) -> SizeHint {
        SizeHint::with_exact(self.remaining)
    }
}
