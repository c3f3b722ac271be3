//! `Deflater`: compresses the app's messages into permessage-deflate frames (RFC 7692 7.2.1).

use bytes::Bytes;
use tokio_tungstenite::tungstenite::protocol::frame::coding::{Data, OpCode};
use tokio_tungstenite::tungstenite::protocol::frame::Frame;
use tokio_tungstenite::tungstenite::Message;
use zlib_rs::{Deflate, DeflateConfig, DeflateFlush};

use super::deflate_params::DeflateParams;

/// The empty stored block a sync flush ends with; 7.2.1 has the sender drop it.
const SYNC_TAIL: [u8; 4] = [0x00, 0x00, 0xff, 0xff];
/// Level 1: each message ends a block, and above level 1 zlib builds Huffman trees for every
/// block, which costs several times more than a small message gains (measured in benches/).
const LEVEL: i32 = 1;
/// zlib's memLevel sizes the buffer of symbols a block collects (2^(memLevel + 6) of them):
/// 5 as the `websockets` library has, 14 KiB instead of the default's 112 KiB, at no cost in
/// speed or size for messages that end a block every few KiB anyway.
const MEM_LEVEL: i32 = 5;

/// The server's compression context for one WebSocket.
pub struct Deflater {
    /// Made for the first message: a compressor holds about 160 KiB, which a socket the app
    /// never sends on need not.
    compress: Option<Deflate>,
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
        let compress = self.compress.get_or_insert_with(|| {
            Deflate::new_with_config(DeflateConfig {
                level: LEVEL,
                // Negative: raw deflate, no zlib header.
                window_bits: -i32::from(window_bits),
                mem_level: MEM_LEVEL,
                ..DeflateConfig::default()
            })
        });
        let mut out = vec![0; data.len() / 2 + 64];
        let mut written = 0;
        let start = compress.total_in();
        loop {
            let consumed = (compress.total_in() - start) as usize;
            let before = compress.total_out();
            compress
                .compress(
                    &data[consumed..],
                    &mut out[written..],
                    DeflateFlush::SyncFlush,
                )
                .expect("deflate accepts any input");
            written += (compress.total_out() - before) as usize;
            let done = (compress.total_in() - start) as usize == data.len();
            // A flush that filled the buffer may have more to write.
            if done && written < out.len() {
                break;
            }
            out.resize(out.len() * 2, 0);
        }
        out.truncate(written);
        if out.ends_with(&SYNC_TAIL) {
            out.truncate(out.len() - SYNC_TAIL.len());
        }
        if self.no_context_takeover {
            compress.reset();
        }
        out
    }
}
