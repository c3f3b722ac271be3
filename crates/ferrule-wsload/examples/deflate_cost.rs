//! What permessage-deflate costs the server per 1 KiB JSON-like message, and what it saves,
//! for each compression level, window and memLevel: one context per socket kept from message
//! to message (no context takeover flags), a sync flush after each message, as the server
//! does, with the messages dealt out to SOCKETS contexts in turn so that, as in a server, the
//! contexts do not all stay in the CPU's caches.
//!
//!     cargo run --release -p ferrule-wsload --example deflate_cost
//!
//! Prints, per setting: compressed size over original, nanoseconds to compress and to inflate
//! a message (the median of 5 rounds of N messages), and the compressor's allocation.

use std::time::Instant;

use zlib_rs::{Deflate, DeflateConfig, DeflateFlush, Inflate, InflateFlush};

// The load generator's messages; the study leaves the rest of that module unused.
#[allow(dead_code)]
#[path = "../src/message.rs"]
mod message;

const MESSAGES: usize = 4000;
const SOCKETS: usize = 16;

fn compress_all(config: DeflateConfig, messages: &[String]) -> (Vec<Vec<u8>>, f64) {
    let mut deflates: Vec<Deflate> = (0..SOCKETS)
        .map(|_| Deflate::new_with_config(config))
        .collect();
    let mut out = Vec::with_capacity(messages.len());
    let start = Instant::now();
    for (at, message) in messages.iter().enumerate() {
        let deflate = &mut deflates[at % SOCKETS];
        let mut buf = vec![0u8; message.len() + 64];
        let (before_in, before_out) = (deflate.total_in(), deflate.total_out());
        deflate
            .compress(message.as_bytes(), &mut buf, DeflateFlush::SyncFlush)
            .expect("compresses");
        assert_eq!((deflate.total_in() - before_in) as usize, message.len());
        buf.truncate((deflate.total_out() - before_out) as usize - 4);
        out.push(buf);
    }
    let ns = start.elapsed().as_nanos() as f64 / messages.len() as f64;
    (out, ns)
}

fn inflate_all(window_bits: u8, compressed: &[Vec<u8>]) -> f64 {
    let mut inflates: Vec<Inflate> = (0..SOCKETS)
        .map(|_| Inflate::new(false, window_bits))
        .collect();
    let mut out = vec![0u8; 4096];
    let mut input = Vec::new();
    let start = Instant::now();
    for (at, message) in compressed.iter().enumerate() {
        let inflate = &mut inflates[at % SOCKETS];
        input.clear();
        input.extend_from_slice(message);
        input.extend_from_slice(&[0, 0, 0xff, 0xff]);
        let before = inflate.total_out();
        inflate
            .decompress(&input, &mut out, InflateFlush::SyncFlush)
            .expect("inflates");
        assert_eq!(inflate.total_out() - before, message::SIZE as u64);
    }
    start.elapsed().as_nanos() as f64 / compressed.len() as f64
}

fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    values[values.len() / 2]
}

fn main() {
    // Each socket's messages differ from one another, as each echo client's do.
    let messages: Vec<String> = (0..MESSAGES).map(message::json_like).collect();
    let original: usize = messages.iter().map(String::len).sum();
    println!(
        "{MESSAGES} distinct messages of {} bytes over {SOCKETS} contexts",
        message::SIZE
    );
    println!("| level | window bits | memLevel | size | compress ns/msg | inflate ns/msg |");
    println!("| ---: | ---: | ---: | ---: | ---: | ---: |");
    for level in [1, 2] {
        for window_bits in [15, 14, 13, 12] {
            for mem_level in [8, 5] {
                let config = DeflateConfig {
                    level,
                    window_bits: -window_bits,
                    mem_level,
                    ..DeflateConfig::default()
                };
                let mut compress_ns = Vec::new();
                let mut inflate_ns = Vec::new();
                let mut size = 0;
                for _ in 0..5 {
                    let (compressed, ns) = compress_all(config, &messages);
                    compress_ns.push(ns);
                    inflate_ns.push(inflate_all(window_bits as u8, &compressed));
                    size = compressed.iter().map(Vec::len).sum();
                }
                println!(
                    "| {level} | {window_bits} | {mem_level} | {:.1}% | {:.0} | {:.0} |",
                    size as f64 / original as f64 * 100.0,
                    median(compress_ns),
                    median(inflate_ns),
                );
            }
        }
    }
}
