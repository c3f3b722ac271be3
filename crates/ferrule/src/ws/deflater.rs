//! `Deflater`: compresses the app's messages into permessage-deflate frames (RFC 7692 7.2.1).

use bytes::Bytes;
use flate2::{Compress, Compression, FlushCompress};
use tokio_tungstenite::tungstenite::protocol::frame::coding::{Data, OpCode};
use tokio_tungstenite::tungstenite::protocol::frame::Frame;
use tokio_tungstenite::tungstenite::Message;

use super::deflate_params::DeflateParams;

/// The empty stored block a sync flush ends with; 7.2.1 has the sender drop it.
const SYNC_TAIL: [u8; 4] = [0x00, 0x00, 0xff, 0xff];

/// The server's compression context for one WebSocket.
pub struct Deflater {
    /// Made for the first message: a compressor holds a few hundred KiB, which a socket the
    /// app never sends on need not.
    compress: Option<Compress>,
    window_bits: u8,
    no_context_takeover: bool,
}

impl Deflater {
    pub fn new(params: &DeflateParams) -> Self {
        Self {
            compress: None,
            window_bits: params.server_max_window_bits,
            no_context_takeover: params.server_no_context_takeover,
        }
    }

    /// `message` as it goes out: data messages compressed into one frame with RSV1 set, control
    /// messages unchanged (7.2: control frames are never compressed).
    pub fn message(&mut self, message: Message) -> Message {
        let (opcode, data) = match message {
            Message::Text(text) => (Data::Text, Bytes::from(text)),
            Message::Binary(data) => (Data::Binary, data),
            other => return other,
        };
        let mut frame = Frame::message(self.compress(&data), OpCode::Data(opcode), true);
        frame.header_mut().rsv1 = true;
        Message::Frame(frame)
    }

    fn compress(&mut self, data: &[u8]) -> Vec<u8> {
        // zlib skips a flush that repeats the last one with no input in between, yet the peer
        // needs the empty block's header byte before the tail it appends (7.2.3.6).
        if data.is_empty() {
            return vec![0x00];
        }
        let window_bits = self.window_bits;
        // Level 1: each message ends a block, and above level 1 zlib builds Huffman trees for
        // every block, which costs more than a small message gains (measured in benches/).
        let compress = self.compress.get_or_insert_with(|| {
            Compress::new_with_window_bits(Compression::fast(), false, window_bits)
        });
        let mut out = Vec::with_capacity(data.len() / 2 + 64);
        let start = compress.total_in();
        loop {
            let consumed = (compress.total_in() - start) as usize;
            compress
                .compress_vec(&data[consumed..], &mut out, FlushCompress::Sync)
                .expect("deflate accepts any input");
            let done = (compress.total_in() - start) as usize == data.len();
            // A flush that filled the buffer may have more to write.
            if done && out.len() < out.capacity() {
                break;
            }
            out.reserve(out.capacity().max(64));
        }
        if out.ends_with(&SYNC_TAIL) {
            out.truncate(out.len() - SYNC_TAIL.len());
        }
        if self.no_context_takeover {
            compress.reset();
        }
        out
    }
}
