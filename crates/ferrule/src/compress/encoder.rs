//! `Encoder`: one response's compressor, writing into a buffer the body takes its frames from.

use std::io::{self, Write};

use super::coding::{Coding, Compression};
use super::recycling_alloc::{Recycled, RecyclingAlloc};

type BrotliWriter =
    brotli::enc::writer::CompressorWriterCustomAlloc<Vec<u8>, Recycled<u8>, RecyclingAlloc>;

/// The window a streamed body (its length unknown) is compressed with, as a power of two:
/// 512 KiB, for brotli and zstd, whose own defaults (4 MiB, 2 MiB at zstd's level 3) would be
/// held by every compressed stream in progress. gzip's is 32 KiB whatever the level.
const STREAM_WINDOW_LOG: u32 = 19;
/// brotli's and zstd's largest window for a body of known length (brotli's default).
const MAX_WINDOW_LOG: u32 = 22;

/// Compresses one body: `write` its chunks, `flush` to make what was written so far decodable
/// at the other end (a streamed response's chunk goes out at once), and `take` the output.
pub struct Encoder(Inner);

enum Inner {
    Gzip(flate2::write::GzEncoder<Vec<u8>>),
    Br(Box<BrotliWriter>),
    Zstd(zstd::stream::write::Encoder<'static, Vec<u8>>),
}

impl Encoder {
    /// `length`: the body's length when known, which sizes brotli's and zstd's window to it.
    pub fn new(compression: Compression, length: Option<usize>) -> io::Result<Encoder> {
        let level = compression.level;
        let window_log = match length {
            // The smallest power of two that holds the body, within the codings' bounds.
            Some(length) => (usize::BITS - length.max(1).leading_zeros()).clamp(10, MAX_WINDOW_LOG),
            None => STREAM_WINDOW_LOG,
        };
        let inner = match compression.coding {
            Coding::Gzip => Inner::Gzip(flate2::write::GzEncoder::new(
                Vec::new(),
                flate2::Compression::new(level),
            )),
            Coding::Br => {
                let buffer =
                    brotli::Allocator::<u8>::alloc_cell(&mut RecyclingAlloc, BROTLI_BUFFER);
                Inner::Br(Box::new(BrotliWriter::new(
                    Vec::new(),
                    buffer,
                    RecyclingAlloc,
                    level,
                    window_log,
                )))
            }
            Coding::Zstd => {
                let mut encoder = zstd::stream::write::Encoder::new(Vec::new(), level as i32)?;
                encoder.window_log(window_log)?;
                match length {
                    Some(length) => encoder.set_pledged_src_size(Some(length as u64))?,
                    // Sized for the window: a level's own tables for an unknown length are made
                    // for any length (80 MiB a stream at 19, where 512 KiB of window uses few).
                    None => encoder.set_parameter(zstd::zstd_safe::CParameter::SrcSizeHint(
                        1 << STREAM_WINDOW_LOG,
                    ))?,
                }
                Inner::Zstd(encoder)
            }
        };
        Ok(Encoder(inner))
    }

    /// Compresses a whole body at once. gzip and zstd reuse their thread's compressor (reset,
    /// not made anew): its tables are a few hundred KiB, which the server's allocator hands
    /// back to the system as soon as they are freed, so a new one per response is faulted in
    /// again each time. brotli's encoder cannot be reset; its buffers are recycled instead
    /// (`RecyclingAlloc`).
    pub fn whole(compression: Compression, body: &[u8]) -> io::Result<Vec<u8>> {
        match compression.coding {
            Coding::Gzip => DEFLATE.with_borrow_mut(|kept| {
                let deflate = match kept {
                    Some((level, deflate)) if *level == compression.level => {
                        deflate.reset();
                        deflate
                    }
                    _ => {
                        let level = flate2::Compression::new(compression.level);
                        &mut kept
                            .insert((compression.level, flate2::Compress::new_gzip(level, 15)))
                            .1
                    }
                };
                let mut out = Vec::with_capacity(body.len() / 4 + 64);
                loop {
                    let consumed = deflate.total_in() as usize;
                    let status = deflate
                        .compress_vec(&body[consumed..], &mut out, flate2::FlushCompress::Finish)
                        .map_err(io::Error::other)?;
                    if status == flate2::Status::StreamEnd {
                        return Ok(out);
                    }
                    out.reserve(out.capacity().max(64));
                }
            }),
            Coding::Zstd => ZSTD.with_borrow_mut(|kept| {
                let compressor = match kept {
                    Some((level, compressor)) if *level == compression.level => compressor,
                    _ => {
                        let compressor = zstd::bulk::Compressor::new(compression.level as i32)?;
                        &mut kept.insert((compression.level, compressor)).1
                    }
                };
                compressor.compress(body)
            }),
            Coding::Br => {
                let mut encoder = Encoder::new(compression, Some(body.len()))?;
                encoder.write(body)?;
                encoder.finish()
            }
        }
    }

    pub fn write(&mut self, data: &[u8]) -> io::Result<()> {
        match &mut self.0 {
            Inner::Gzip(encoder) => encoder.write_all(data),
            Inner::Br(encoder) => encoder.write_all(data),
            Inner::Zstd(encoder) => encoder.write_all(data),
        }
    }

    /// Ends the compressed data written so far on a boundary the decoder can read up to
    /// (zlib's sync flush, brotli's and zstd's flush), without ending the stream.
    pub fn flush(&mut self) -> io::Result<()> {
        match &mut self.0 {
            Inner::Gzip(encoder) => encoder.flush(),
            Inner::Br(encoder) => encoder.flush(),
            Inner::Zstd(encoder) => encoder.flush(),
        }
    }

    /// The compressed bytes made since the last `take`.
    pub fn take(&mut self) -> Vec<u8> {
        std::mem::take(match &mut self.0 {
            Inner::Gzip(encoder) => encoder.get_mut(),
            Inner::Br(encoder) => encoder.get_mut(),
            Inner::Zstd(encoder) => encoder.get_mut(),
        })
    }

    /// Ends the stream: the compressed bytes not yet taken, and the coding's trailer.
    pub fn finish(self) -> io::Result<Vec<u8>> {
        match self.0 {
            Inner::Gzip(encoder) => encoder.finish(),
            Inner::Br(encoder) => Ok(encoder.into_inner()),
            Inner::Zstd(encoder) => encoder.finish(),
        }
    }
}

thread_local! {
    /// The thread's gzip compressor for whole bodies, and its level.
    static DEFLATE: std::cell::RefCell<Option<(u32, flate2::Compress)>> =
        const { std::cell::RefCell::new(None) };
    /// The thread's zstd compressor for whole bodies, and its level.
    static ZSTD: std::cell::RefCell<Option<(u32, zstd::bulk::Compressor<'static>)>> =
        const { std::cell::RefCell::new(None) };
}

/// brotli's output buffer, copied into the `Vec` as it fills.
const BROTLI_BUFFER: usize = 4096;

#[cfg(test)]
mod tests {
    use std::io::Read;

    use super::*;

    fn decode(coding: Coding, data: &[u8]) -> Vec<u8> {
        let mut out = Vec::new();
        match coding {
            Coding::Gzip => {
                flate2::read::GzDecoder::new(data)
                    .read_to_end(&mut out)
                    .unwrap();
            }
            Coding::Br => {
                brotli::Decompressor::new(data, 4096)
                    .read_to_end(&mut out)
                    .unwrap();
            }
            Coding::Zstd => out = zstd::stream::decode_all(data).unwrap(),
        }
        out
    }

    fn text(len: usize) -> Vec<u8> {
        let words = b"ferrule compresses responses off the event loop's thread, ";
        words.iter().copied().cycle().take(len).collect()
    }

    #[test]
    fn a_whole_body_round_trips_in_each_coding() {
        for coding in Coding::ALL {
            let (low, high, default) = coding.levels();
            for level in [low, default, high] {
                for len in [0, 1, 500, 100_000] {
                    let body = text(len);
                    let packed = Encoder::whole(Compression { coding, level }, &body).unwrap();
                    assert_eq!(decode(coding, &packed), body, "{coding:?} {level} {len}");
                    if len == 100_000 {
                        assert!(packed.len() < len / 10, "{coding:?} {level}");
                    }
                }
            }
        }
    }

    #[test]
    fn each_flush_makes_what_was_written_decodable() {
        for coding in Coding::ALL {
            let compression = Compression {
                coding,
                level: coding.levels().2,
            };
            let mut encoder = Encoder::new(compression, None).unwrap();
            let mut sent = Vec::new();
            let mut written = Vec::new();
            for chunk in [&b"data: one\n\n"[..], b"data: two\n\n", b"data: three\n\n"] {
                encoder.write(chunk).unwrap();
                encoder.flush().unwrap();
                written.extend_from_slice(chunk);
                sent.extend(encoder.take());
                // What the client has so far decodes to every chunk written.
                assert_eq!(decode_prefix(coding, &sent), written, "{coding:?}");
            }
            sent.extend(encoder.finish().unwrap());
            assert_eq!(decode(coding, &sent), written);
        }
    }

    /// Decodes a stream that has not ended, as far as it goes.
    fn decode_prefix(coding: Coding, data: &[u8]) -> Vec<u8> {
        let mut out = Vec::new();
        let mut buf = [0; 4096];
        let mut read = |reader: &mut dyn Read| loop {
            match reader.read(&mut buf) {
                Ok(0) | Err(_) => break,
                Ok(n) => out.extend_from_slice(&buf[..n]),
            }
        };
        match coding {
            Coding::Gzip => read(&mut flate2::read::GzDecoder::new(data)),
            Coding::Br => read(&mut brotli::Decompressor::new(data, 4096)),
            Coding::Zstd => read(&mut zstd::stream::read::Decoder::new(data).unwrap()),
        }
        out
    }
}
