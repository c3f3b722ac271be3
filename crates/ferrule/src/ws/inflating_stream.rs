//! `InflatingStream`: the client's side of permessage-deflate (RFC 7692 7.2.2), as a layer
//! under tungstenite, which rejects any frame with RSV1 set and has no extension hook.
//!
//! The layer reads the client's frames and rewrites each compressed message as uncompressed
//! frames of at most a bounded chunk each (one frame for most messages). Every other frame (control frames, uncompressed messages, anything malformed)
//! passes through byte for byte, so tungstenite still checks framing, masking, fragmentation and
//! UTF-8, and fails RSV1 where permessage-deflate gives it no meaning. Inflating a chunk at a
//! time, only as tungstenite reads, keeps a decompression bomb from ever being held whole: the
//! message fails with 1009 as soon as its inflated size passes `--ws-max-size`.

use std::io::{self, Cursor};
use std::pin::Pin;
use std::task::{ready, Context, Poll};

use bytes::{Buf, BytesMut};
use flate2::{Decompress, FlushDecompress, Status};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio_tungstenite::tungstenite::protocol::frame::coding::{Data, OpCode};
use tokio_tungstenite::tungstenite::protocol::frame::FrameHeader;

use super::deflate_params::DeflateParams;

/// The most inflated bytes handed to tungstenite in one frame.
const CHUNK: usize = 16 * 1024;
/// How much is read from the socket at a time.
const READ_SIZE: usize = 16 * 1024;
/// What 7.2.2 has the receiver append to a message before inflating it.
const SYNC_TAIL: [u8; 4] = [0x00, 0x00, 0xff, 0xff];
/// Frames made here are masked, as tungstenite requires of a client's, with a key that leaves
/// the payload as it is.
const NO_MASK: [u8; 4] = [0; 4];

/// Why the layer failed the connection: the close code the server sends.
#[derive(Debug)]
pub struct CloseWith(pub u16);

impl std::fmt::Display for CloseWith {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "permessage-deflate: closing with {}", self.0)
    }
}

impl std::error::Error for CloseWith {}

fn close_with(code: u16) -> io::Error {
    io::Error::other(CloseWith(code))
}

enum ReadState {
    /// Waiting for a frame header.
    Header,
    /// Passing `remaining` bytes of a frame's payload through.
    Raw { remaining: u64 },
    /// Reading a compressed frame's payload.
    Compressed {
        remaining: u64,
        mask: [u8; 4],
        offset: usize,
        is_final: bool,
    },
    /// Passing everything through: tungstenite fails the connection on what comes.
    Opaque,
}

/// The compressed message being read.
struct Message {
    opcode: OpCode,
    /// Whether a frame of it went to tungstenite.
    started: bool,
    /// Inflated bytes not yet handed on, held until it is known whether more follow, so that a
    /// message that fits one chunk makes one frame.
    held: Vec<u8>,
    /// Inflated bytes so far.
    size: usize,
    /// Unmasked compressed bytes not yet inflated.
    pending: BytesMut,
    tail_fed: bool,
    /// The client ended its deflate stream (a final block): the rest of the message is ignored.
    stream_ended: bool,
}

struct Inflater {
    decompress: Decompress,
    no_context_takeover: bool,
    max_size: usize,
    state: ReadState,
    message: Option<Message>,
    /// Bytes read from the client and not yet looked at.
    input: BytesMut,
    /// Bytes ready for tungstenite.
    output: BytesMut,
    scratch: Vec<u8>,
    /// Where reads from the socket land, kept to not zero a new one for each read.
    read: Vec<u8>,
    eof: bool,
}

enum Step {
    Progress,
    NeedInput,
}

/// The upgraded connection, inflating the client's compressed messages when permessage-deflate
/// was agreed and passing everything through otherwise.
pub struct InflatingStream<S> {
    inner: S,
    inflater: Option<Box<Inflater>>,
}

impl<S> InflatingStream<S> {
    pub fn new(inner: S, params: Option<&DeflateParams>, max_size: usize) -> Self {
        let inflater = params.map(|params| {
            Box::new(Inflater {
                // The window the client agreed to, or 15 bits, the most it may use; zlib's
                // raw inflate takes no less than 9 bits, which inflates an 8-bit stream too.
                decompress: Decompress::new_with_window_bits(
                    false,
                    params.client_max_window_bits.unwrap_or(15).max(9),
                ),
                no_context_takeover: params.client_no_context_takeover,
                max_size,
                state: ReadState::Header,
                message: None,
                input: BytesMut::new(),
                output: BytesMut::new(),
                scratch: Vec::new(),
                read: vec![0; READ_SIZE],
                eof: false,
            })
        });
        Self { inner, inflater }
    }

    /// The connection itself, for reading past the layer.
    pub fn inner_mut(&mut self) -> &mut S {
        &mut self.inner
    }
}

impl Inflater {
    /// Makes what progress the bytes already read allow.
    fn step(&mut self) -> io::Result<Step> {
        match self.state {
            ReadState::Opaque => {
                if self.input.is_empty() {
                    return Ok(Step::NeedInput);
                }
                let all = self.input.split();
                self.output.unsplit(all);
                Ok(Step::Progress)
            }
            ReadState::Raw { remaining } => {
                if remaining == 0 {
                    self.state = ReadState::Header;
                    return Ok(Step::Progress);
                }
                if self.input.is_empty() {
                    return Ok(Step::NeedInput);
                }
                let take = remaining.min(self.input.len() as u64);
                let bytes = self.input.split_to(take as usize);
                self.output.extend_from_slice(&bytes);
                self.state = ReadState::Raw {
                    remaining: remaining - take,
                };
                Ok(Step::Progress)
            }
            ReadState::Header => self.header(),
            ReadState::Compressed { .. } => self.inflate(),
        }
    }

    fn header(&mut self) -> io::Result<Step> {
        let mut cursor = Cursor::new(&self.input[..]);
        let (header, length) = match FrameHeader::parse(&mut cursor) {
            Ok(Some(parsed)) => parsed,
            Ok(None) => return Ok(Step::NeedInput),
            Err(_) => {
                self.state = ReadState::Opaque;
                return Ok(Step::Progress);
            }
        };
        let header_len = cursor.position() as usize;
        let in_message = self.message.is_some();
        // tungstenite may not know of the message yet (nothing of it handed on), so a new data
        // frame inside it is caught here.
        if in_message && matches!(header.opcode, OpCode::Data(Data::Text | Data::Binary)) {
            return Err(close_with(1002));
        }
        let plain = !header.rsv2 && !header.rsv3;
        let mask = header.mask.filter(|_| plain);
        let compressed = match (header.opcode, mask) {
            (OpCode::Data(Data::Text | Data::Binary), Some(mask)) if header.rsv1 && !in_message => {
                Some(mask)
            }
            (OpCode::Data(Data::Continue), Some(mask)) if !header.rsv1 && in_message => Some(mask),
            _ => None,
        };
        let Some(mask) = compressed else {
            let raw = self.input.split_to(header_len);
            self.output.extend_from_slice(&raw);
            self.state = ReadState::Raw { remaining: length };
            return Ok(Step::Progress);
        };
        self.input.advance(header_len);
        // A compressed frame is held to the same limit as any other frame.
        if length > self.max_size as u64 {
            return Err(close_with(1009));
        }
        if !in_message {
            self.message = Some(Message {
                opcode: header.opcode,
                started: false,
                held: Vec::new(),
                size: 0,
                pending: BytesMut::new(),
                tail_fed: false,
                stream_ended: false,
            });
        }
        self.state = ReadState::Compressed {
            remaining: length,
            mask,
            offset: 0,
            is_final: header.is_final,
        };
        Ok(Step::Progress)
    }

    fn inflate(&mut self) -> io::Result<Step> {
        let ReadState::Compressed {
            remaining,
            mask,
            offset,
            is_final,
        } = self.state
        else {
            unreachable!("inflate runs on a compressed frame")
        };
        let message = self.message.as_mut().expect("a compressed message");
        let take = remaining.min(self.input.len() as u64) as usize;
        if take > 0 {
            let mut bytes = self.input.split_to(take);
            unmask(&mut bytes, mask, offset);
            if !message.stream_ended {
                message.pending.unsplit(bytes);
            }
            self.state = ReadState::Compressed {
                remaining: remaining - take as u64,
                mask,
                offset: offset + take,
                is_final,
            };
        }
        let remaining = remaining - take as u64;
        self.scratch.resize(CHUNK, 0);
        let (before_in, before_out) = (self.decompress.total_in(), self.decompress.total_out());
        let status = match message.stream_ended {
            true => Status::BufError,
            false => self
                .decompress
                .decompress(&message.pending, &mut self.scratch, FlushDecompress::Sync)
                .map_err(|_| close_with(1002))?,
        };
        let consumed = (self.decompress.total_in() - before_in) as usize;
        let produced = (self.decompress.total_out() - before_out) as usize;
        message.pending.advance(consumed);
        if status == Status::StreamEnd {
            message.stream_ended = true;
            message.pending.clear();
        }
        if produced > 0 {
            message.size += produced;
            if message.size > self.max_size {
                return Err(close_with(1009));
            }
            if !message.held.is_empty() {
                emit(
                    &mut self.output,
                    message.next_opcode(),
                    false,
                    &message.held,
                );
                message.held.clear();
            }
            message.held.extend_from_slice(&self.scratch[..produced]);
            return Ok(Step::Progress);
        }
        if consumed > 0 || status == Status::StreamEnd {
            return Ok(Step::Progress);
        }
        if remaining > 0 {
            return Ok(Step::NeedInput);
        }
        if !is_final {
            self.state = ReadState::Header;
            return Ok(Step::Progress);
        }
        if !message.tail_fed && !message.stream_ended {
            message.tail_fed = true;
            message.pending.extend_from_slice(&SYNC_TAIL);
            return Ok(Step::Progress);
        }
        if !message.pending.is_empty() {
            // Input the inflater will not take: not a deflate stream.
            return Err(close_with(1002));
        }
        emit(&mut self.output, message.next_opcode(), true, &message.held);
        let stream_ended = message.stream_ended;
        self.message = None;
        self.state = ReadState::Header;
        if self.no_context_takeover || stream_ended {
            self.decompress.reset(false);
        }
        Ok(Step::Progress)
    }
}

impl Message {
    /// The opcode of the message's next frame, which is then started.
    fn next_opcode(&mut self) -> OpCode {
        match std::mem::replace(&mut self.started, true) {
            false => self.opcode,
            true => OpCode::Data(Data::Continue),
        }
    }
}

/// XORs `bytes`, which start `offset` bytes into a payload, with the payload's `mask`, eight
/// bytes at a time (byte by byte cost as much as inflating them).
fn unmask(bytes: &mut [u8], mask: [u8; 4], offset: usize) {
    let key: [u8; 8] = std::array::from_fn(|at| mask[(offset + at) & 3]);
    let word_key = u64::from_ne_bytes(key);
    let mut words = bytes.chunks_exact_mut(8);
    for word in &mut words {
        let value = u64::from_ne_bytes((&*word).try_into().expect("eight bytes")) ^ word_key;
        word.copy_from_slice(&value.to_ne_bytes());
    }
    for (byte, key) in words.into_remainder().iter_mut().zip(key) {
        *byte ^= key;
    }
}

/// Queues an unmasked-in-effect frame for tungstenite.
fn emit(output: &mut BytesMut, opcode: OpCode, is_final: bool, payload: &[u8]) {
    let header = FrameHeader {
        is_final,
        opcode,
        mask: Some(NO_MASK),
        ..FrameHeader::default()
    };
    let mut head = Vec::with_capacity(14);
    header
        .format(payload.len() as u64, &mut head)
        .expect("a Vec takes any header");
    output.extend_from_slice(&head);
    output.extend_from_slice(payload);
}

impl<S: AsyncRead + Unpin> AsyncRead for InflatingStream<S> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        let Some(inflater) = this.inflater.as_mut() else {
            return Pin::new(&mut this.inner).poll_read(cx, buf);
        };
        loop {
            if !inflater.output.is_empty() {
                let n = inflater.output.len().min(buf.remaining());
                buf.put_slice(&inflater.output[..n]);
                inflater.output.advance(n);
                return Poll::Ready(Ok(()));
            }
            if let Step::Progress = inflater.step()? {
                continue;
            }
            if inflater.eof {
                // Whatever is left is an incomplete frame: tungstenite reports it.
                if inflater.input.is_empty() {
                    return Poll::Ready(Ok(()));
                }
                inflater.state = ReadState::Opaque;
                continue;
            }
            let mut read_buf = ReadBuf::new(&mut inflater.read);
            ready!(Pin::new(&mut this.inner).poll_read(cx, &mut read_buf))?;
            let filled = read_buf.filled().len();
            inflater.eof = filled == 0;
            inflater.input.extend_from_slice(&inflater.read[..filled]);
        }
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for InflatingStream<S> {
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
    use super::unmask;

    #[test]
    fn unmasks_word_wise_as_byte_by_byte() {
        let mask = [0x12, 0x34, 0x56, 0x78];
        let payload: Vec<u8> = (0..=255u8).cycle().take(1000).collect();
        for offset in 0..4 {
            for len in [0, 1, 7, 8, 9, 1000 - offset] {
                let mut bytes = payload[..len].to_vec();
                unmask(&mut bytes, mask, offset);
                let expected: Vec<u8> = payload[..len]
                    .iter()
                    .enumerate()
                    .map(|(at, byte)| byte ^ mask[(offset + at) & 3])
                    .collect();
                assert_eq!(bytes, expected, "offset {offset}, {len} bytes");
            }
        }
    }
}
