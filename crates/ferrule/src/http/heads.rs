//! `Recorder` and `HeadLog`: every request head a connection carries, recorded as hyper reads
//! it (through `recording_io`), in order, as the client sent it.
//!
//! hyper's `HeaderMap` groups lines by name (the ASGI scope wants the client's order) and, as
//! RFC 9112 allows, quietly settles framing that two parsers could read differently: a repeated
//! identical `Content-Length` is merged, `Content-Length` beside `Transfer-Encoding` is dropped.
//! A server facing the internet refuses those with 400, so it needs the raw lines.
//!
//! The recorder follows request boundaries itself (head, then a body of `Content-Length` bytes
//! or chunked), parsing each head with httparse, the parser hyper uses. It records one
//! [`RawHead`] per request into the connection's [`HeadLog`]; the service takes them in the
//! same order as hyper hands it requests. On anything it cannot follow (a head hyper will
//! reject, an upgrade, a malformed chunk) it stops recording, and requests from then on are
//! served from hyper's `HeaderMap` alone.

use std::collections::VecDeque;
use std::mem::MaybeUninit;
use std::ops::Range;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use crate::asgi::raw_head::RawHead;

/// As many header lines as hyper accepts (its default).
const MAX_HEADERS: usize = 100;

/// The heads recorded on one connection and not yet taken by the service.
#[derive(Default)]
pub struct HeadLog {
    heads: Mutex<VecDeque<RawHead>>,
    /// The requests that arrived: whole HTTP/1 heads recorded, or 1 for the HTTP/2 preface.
    requests: AtomicU64,
    /// The client sent the HTTP/2 preface.
    http2: AtomicBool,
    /// No part of a request head or body is waiting to be read whole (the recorder's place).
    between_requests: AtomicBool,
    /// hyper's last write or flush was pending: its buffer holds bytes the client has not taken.
    write_waiting: AtomicBool,
    /// hyper is being stopped to put the connection aside: its shutdown leaves the socket open.
    setting_aside: AtomicBool,
}

impl HeadLog {
    /// The next request's head, if it was recorded.
    pub fn take(&self) -> Option<RawHead> {
        self.heads.lock().unwrap().pop_front()
    }

    /// Whether the client has sent a whole first request head (or the HTTP/2 preface): until
    /// then nothing in hyper times the connection out while it tells HTTP/1 from HTTP/2.
    pub fn first_request_seen(&self) -> bool {
        self.requests() > 0
    }

    /// How many requests have arrived (see `requests`): heads recorded, not yet all answered.
    pub fn requests(&self) -> u64 {
        self.requests.load(Ordering::Acquire)
    }

    /// Whether the connection speaks HTTP/2 (known once the client's first bytes are in).
    pub fn http2(&self) -> bool {
        self.http2.load(Ordering::Acquire)
    }

    /// Whether hyper can be stopped with nothing lost: it holds no part of a request and no
    /// bytes to write (see `finish_when`, which decides when an idle HTTP/1.1 connection is set aside).
    pub fn at_rest(&self) -> bool {
        self.between_requests.load(Ordering::Acquire) && !self.write_waiting.load(Ordering::Acquire)
    }

    pub(crate) fn set_write_waiting(&self, waiting: bool) {
        self.write_waiting.store(waiting, Ordering::Release);
    }

    /// Makes hyper's shutdown of the socket (`RecordingIo::poll_shutdown`) leave it open.
    pub fn set_aside(&self, aside: bool) {
        self.setting_aside.store(aside, Ordering::Release);
    }

    pub(crate) fn setting_aside(&self) -> bool {
        self.setting_aside.load(Ordering::Acquire)
    }

    fn push(&self, head: RawHead) {
        self.heads.lock().unwrap().push_back(head);
        self.requests.fetch_add(1, Ordering::AcqRel);
    }
}

/// How an HTTP/2 connection with prior knowledge starts (RFC 9113, 3.4).
pub(crate) const HTTP2_PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

/// Where the recorder is in the inbound byte stream.
enum Position {
    /// Collecting a request head (`pending` holds what has arrived of it).
    Head,
    /// Inside a body with this many bytes to go.
    Body(u64),
    Chunked(Chunk),
    /// Not following any more (see the module comment).
    Stopped,
}

enum Chunk {
    /// Reading a chunk-size line.
    Size,
    Data(u64),
    /// The CRLF after a chunk's data.
    DataEnd,
    /// Trailer lines after the last chunk, up to an empty line.
    Trailers,
}

pub struct Recorder {
    position: Position,
    /// The current head, or chunk-size / trailer line, so far.
    pending: Vec<u8>,
    log: Arc<HeadLog>,
    max_head: usize,
    /// `--http 1`: an HTTP/2 preface fails the read that brings it, closing the connection.
    refuse_http2: bool,
    refused: bool,
}

impl Recorder {
    pub fn new(log: Arc<HeadLog>, max_head: usize) -> Self {
        Self {
            position: Position::Head,
            pending: Vec::new(),
            log,
            max_head,
            refuse_http2: false,
            refused: false,
        }
    }

    pub fn refusing_http2(mut self) -> Self {
        self.refuse_http2 = true;
        self
    }

    /// `--http 1` and the client sent the HTTP/2 preface.
    pub fn refused(&self) -> bool {
        self.refused
    }

    /// Follows `data`, the next bytes the client sent.
    pub fn feed(&mut self, mut data: &[u8]) {
        while !data.is_empty() {
            data = match self.position {
                Position::Stopped => break,
                Position::Head => self.head(data),
                Position::Body(left) => {
                    let used = left.min(data.len() as u64);
                    self.position = match left - used {
                        0 => Position::Head,
                        left => Position::Body(left),
                    };
                    &data[used as usize..]
                }
                Position::Chunked(Chunk::Data(left)) => {
                    let used = left.min(data.len() as u64);
                    self.position = Position::Chunked(match left - used {
                        0 => Chunk::DataEnd,
                        left => Chunk::Data(left),
                    });
                    &data[used as usize..]
                }
                Position::Chunked(_) => self.chunk_line(data),
            };
        }
        let between = matches!(self.position, Position::Head) && self.pending.is_empty();
        self.log.between_requests.store(between, Ordering::Release);
    }

    /// The connection's log, which the socket's owner shares.
    pub fn log(&self) -> &HeadLog {
        &self.log
    }

    fn stop(&mut self) {
        self.position = Position::Stopped;
        self.pending = Vec::new();
    }

    /// Takes `data` up to the end of the current line into `pending`; returns the rest and
    /// whether the line is complete.
    fn line<'a>(&mut self, data: &'a [u8]) -> (&'a [u8], bool) {
        match data.iter().position(|&b| b == b'\n') {
            Some(end) => {
                self.pending.extend_from_slice(&data[..=end]);
                (&data[end + 1..], true)
            }
            None => {
                self.pending.extend_from_slice(data);
                (&[], false)
            }
        }
    }

    fn head<'a>(&mut self, data: &'a [u8]) -> &'a [u8] {
        let before = self.pending.len();
        if before > 0 {
            self.pending.extend_from_slice(data);
            // Parsed only once a blank line may have arrived: a head sent a byte at a time must
            // not cost a parse per byte.
            if !may_end_head(&self.pending[before.saturating_sub(3)..]) {
                if self.pending.len() > self.max_head {
                    self.stop(); // hyper answers 431
                }
                return &[];
            }
        }
        // A head that starts in this read is parsed where it lies, and only its own bytes are
        // copied: copied along with it, the requests pipelined behind it made each head hold
        // all the bytes that followed (66 MiB for 5,000 pipelined requests).
        let parsed = parse_head(if before > 0 { &self.pending } else { data });
        let (fields, framing, mut bytes) = match parsed {
            Parsed::Head {
                fields,
                framing,
                bytes,
            } => (fields, framing, bytes),
            Parsed::Incomplete | Parsed::PrefacePart => {
                if before == 0 {
                    self.pending.extend_from_slice(data);
                }
                if self.pending.len() > self.max_head {
                    self.stop(); // hyper answers 431
                }
                return &[];
            }
            Parsed::Preface => {
                self.refused = self.refuse_http2;
                self.log.http2.store(true, Ordering::Release);
                self.log.requests.fetch_add(1, Ordering::AcqRel);
                self.stop(); // HTTP/2: hyper's HeaderMap is all there is
                return &[];
            }
            Parsed::Invalid => {
                self.stop(); // hyper answers 400 and closes
                return &[];
            }
        };
        if before > 0 {
            self.pending = Vec::new();
        }
        let Some(rest_start) = bytes.len().checked_sub(before) else {
            self.stop(); // a head that ended in bytes already seen: not one we follow
            return &[];
        };
        for (name, _) in &fields {
            bytes[name.clone()].make_ascii_lowercase();
        }
        let ambiguous = framing.ambiguous();
        self.position = if ambiguous || framing.upgrade {
            Position::Stopped
        } else if framing.chunked {
            Position::Chunked(Chunk::Size)
        } else {
            match framing.length {
                Some(0) | None => Position::Head,
                Some(length) => Position::Body(length),
            }
        };
        self.log.push(RawHead {
            bytes,
            fields,
            ambiguous,
        });
        &data[rest_start..]
    }

    fn chunk_line<'a>(&mut self, data: &'a [u8]) -> &'a [u8] {
        let (rest, complete) = self.line(data);
        if !complete {
            if self.pending.len() > 4096 {
                self.stop(); // no sane chunk-size or trailer line is this long
            }
            return rest;
        }
        let line = std::mem::take(&mut self.pending);
        let line = line.strip_suffix(b"\n").unwrap_or(&line);
        let line = line.strip_suffix(b"\r").unwrap_or(line);
        let Position::Chunked(chunk) = &self.position else {
            unreachable!("chunk_line outside a chunked body")
        };
        self.position = match chunk {
            Chunk::Size => match chunk_size(line) {
                Some(0) => Position::Chunked(Chunk::Trailers),
                Some(size) => Position::Chunked(Chunk::Data(size)),
                None => Position::Stopped,
            },
            Chunk::DataEnd if line.is_empty() => Position::Chunked(Chunk::Size),
            Chunk::DataEnd => Position::Stopped,
            Chunk::Trailers if line.is_empty() => Position::Head,
            Chunk::Trailers => Position::Chunked(Chunk::Trailers),
            Chunk::Data(_) => unreachable!("data is not read by lines"),
        };
        rest
    }
}

/// What a request head's bytes so far make.
enum Parsed {
    /// A whole head: a copy of its bytes, its fields (ranges in `bytes`), its framing.
    Head {
        fields: Vec<(Range<usize>, Range<usize>)>,
        framing: Framing,
        bytes: Vec<u8>,
    },
    Incomplete,
    /// HTTP/2's preface, whole or begun.
    Preface,
    PrefacePart,
    /// A head hyper rejects.
    Invalid,
}

/// Parses the head at the start of `buf` (httparse, as hyper does).
fn parse_head(buf: &[u8]) -> Parsed {
    if buf.starts_with(HTTP2_PREFACE) {
        return Parsed::Preface;
    }
    if HTTP2_PREFACE.starts_with(buf) {
        return Parsed::PrefacePart;
    }
    // Left uninitialised: httparse writes the slots it uses, and filling all 100 first cost
    // more than parsing a small head.
    let mut slots = [const { MaybeUninit::uninit() }; MAX_HEADERS];
    let mut request = httparse::Request::new(&mut []);
    let len = match request.parse_with_uninit_headers(buf, &mut slots) {
        Ok(httparse::Status::Complete(len)) => len,
        Ok(httparse::Status::Partial) => return Parsed::Incomplete,
        Err(_) => return Parsed::Invalid,
    };
    let base = buf.as_ptr() as usize;
    let offset = |s: &[u8]| s.as_ptr() as usize - base;
    let mut fields = Vec::with_capacity(request.headers.len());
    let mut framing = Framing::default();
    for header in request.headers.iter() {
        let name = offset(header.name.as_bytes());
        let value = offset(header.value);
        framing.note(header.name.as_bytes(), header.value);
        fields.push((
            name..name + header.name.len(),
            value..value + header.value.len(),
        ));
    }
    framing.upgrade |= request.method == Some("CONNECT");
    Parsed::Head {
        fields,
        framing,
        bytes: buf[..len].to_vec(),
    }
}

/// Whether `data` (the new bytes, with the 3 before them) holds a blank line, so a head may be
/// complete. The usual request arrives whole and ends with one: checked first, before scanning.
fn may_end_head(data: &[u8]) -> bool {
    if data.ends_with(b"\n\r\n") || data.ends_with(b"\n\n") {
        return true;
    }
    data.iter()
        .enumerate()
        .any(|(i, &b)| b == b'\n' && matches!(&data[i + 1..], [b'\n', ..] | [b'\r', b'\n', ..]))
}

/// A chunk-size line's size (extensions after `;` ignored), if it is valid hex that fits.
fn chunk_size(line: &[u8]) -> Option<u64> {
    let digits = line.split(|&b| b == b';').next()?.trim_ascii();
    if digits.is_empty() || digits.len() > 15 {
        return None;
    }
    u64::from_str_radix(std::str::from_utf8(digits).ok()?, 16).ok()
}

/// What a head's framing headers say.
#[derive(Default)]
struct Framing {
    lengths: usize,
    length: Option<u64>,
    bad_length: bool,
    encodings: usize,
    chunked: bool,
    upgrade: bool,
}

impl Framing {
    fn note(&mut self, name: &[u8], value: &[u8]) {
        if name.eq_ignore_ascii_case(b"content-length") {
            self.lengths += 1;
            let digits = value.trim_ascii();
            let parsed = std::str::from_utf8(digits)
                .ok()
                .filter(|d| !d.is_empty() && d.bytes().all(|b| b.is_ascii_digit()))
                .and_then(|d| d.parse().ok());
            self.bad_length |= parsed.is_none();
            self.length = parsed;
        } else if name.eq_ignore_ascii_case(b"transfer-encoding") {
            self.encodings += 1;
            self.chunked = value.trim_ascii().eq_ignore_ascii_case(b"chunked");
        } else if name.eq_ignore_ascii_case(b"upgrade") {
            self.upgrade = true;
        }
    }

    /// `Content-Length` more than once (even with equal values) or not a plain number, more
    /// than one `Transfer-Encoding` line or one that is not just `chunked`, or both headers.
    fn ambiguous(&self) -> bool {
        self.lengths > 1
            || self.encodings > 1
            || (self.lengths > 0 && self.encodings > 0)
            || (self.encodings == 1 && !self.chunked)
            || (self.lengths == 1 && self.bad_length)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(chunks: &[&[u8]]) -> Vec<RawHead> {
        let log = Arc::new(HeadLog::default());
        let mut recorder = Recorder::new(log.clone(), 64 * 1024);
        for chunk in chunks {
            recorder.feed(chunk);
        }
        std::iter::from_fn(|| log.take()).collect()
    }

    fn names(head: &RawHead) -> Vec<String> {
        head.headers()
            .map(|(n, v)| {
                format!(
                    "{}={}",
                    String::from_utf8_lossy(n),
                    String::from_utf8_lossy(v)
                )
            })
            .collect()
    }

    #[test]
    fn between_requests_only_once_a_head_and_its_body_are_in_whole() {
        let log = Arc::new(HeadLog::default());
        let mut recorder = Recorder::new(log.clone(), 64 * 1024);
        let mut fed = |data: &[u8]| {
            recorder.feed(data);
            log.at_rest()
        };
        assert!(!fed(b"POST / HTTP/1.1\r\nContent-"));
        assert!(!fed(b"Length: 4\r\n\r\nab"));
        assert!(fed(b"cd"));
        assert!(!fed(b"G"));
        assert!(fed(b"ET / HTTP/1.1\r\n\r\n"));
        log.set_write_waiting(true);
        assert!(!log.at_rest());
        log.set_write_waiting(false);
        // An upgrade stops the recorder: never at rest again.
        assert!(!fed(
            b"GET / HTTP/1.1\r\nUpgrade: websocket\r\nConnection: upgrade\r\n\r\n"
        ));
    }

    #[test]
    fn keeps_order_and_lowercases_names() {
        let heads = record(&[b"GET / HTTP/1.1\r\nB: 1\r\nA: 2\r\nb: 3\r\n\r\n"]);
        assert_eq!(heads.len(), 1);
        assert_eq!(names(&heads[0]), ["b=1", "a=2", "b=3"]);
        assert!(!heads[0].ambiguous);
    }

    #[test]
    fn follows_bodies_and_pipelining_byte_by_byte() {
        let stream: &[u8] = b"POST /a HTTP/1.1\r\nContent-Length: 5\r\n\r\nGET /\r\n\
POST /b HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n3;x=y\r\nGET\r\n0\r\nT: 1\r\n\r\n\
GET /c HTTP/1.1\r\nX: last\r\n\r\n";
        let whole = record(&[stream]);
        let bytes: Vec<&[u8]> = stream.chunks(1).collect();
        let split = record(&bytes);
        for heads in [whole, split] {
            let all: Vec<Vec<String>> = heads.iter().map(names).collect();
            assert_eq!(
                all,
                [
                    vec!["content-length=5".to_owned()],
                    vec!["transfer-encoding=chunked".to_owned()],
                    vec!["x=last".to_owned()],
                ]
            );
        }
    }

    #[test]
    fn ambiguous_framing_is_flagged_and_stops_recording() {
        for head in [
            &b"POST / HTTP/1.1\r\nContent-Length: 3\r\nContent-Length: 3\r\n\r\n"[..],
            b"POST / HTTP/1.1\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n",
            b"POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\nContent-Length: 3\r\n\r\n",
            b"POST / HTTP/1.1\r\nTransfer-Encoding: gzip\r\n\r\n",
            b"POST / HTTP/1.1\r\nContent-Length: 3, 3\r\n\r\n",
            b"POST / HTTP/1.1\r\nContent-Length: +3\r\n\r\n",
        ] {
            let mut stream = head.to_vec();
            stream.extend_from_slice(b"abcGET / HTTP/1.1\r\n\r\n");
            let heads = record(&[&stream]);
            assert_eq!(heads.len(), 1, "{}", String::from_utf8_lossy(head));
            assert!(heads[0].ambiguous, "{}", String::from_utf8_lossy(head));
        }
    }

    #[test]
    fn http2_preface_counts_as_a_first_request_even_split() {
        let log = Arc::new(HeadLog::default());
        let mut recorder = Recorder::new(log.clone(), 64 * 1024);
        recorder.feed(&HTTP2_PREFACE[..18]);
        assert!(!log.first_request_seen());
        recorder.feed(&HTTP2_PREFACE[18..]);
        assert!(log.first_request_seen());
        assert!(log.take().is_none());
    }

    #[test]
    fn stops_on_what_hyper_rejects() {
        assert!(
            record(&[b"GET / HTTP/1.1\r\nBad Header: x\r\n\r\nGET / HTTP/1.1\r\n\r\n"]).is_empty()
        );
        let huge = vec![b'a'; 70 * 1024];
        assert!(record(&[b"GET / HTTP/1.1\r\nX: ", &huge]).is_empty());
    }

    #[test]
    fn a_blank_line_is_found_wherever_it_falls() {
        assert!(may_end_head(b"GET / HTTP/1.1\r\n\r\n"));
        assert!(may_end_head(b"GET / HTTP/1.1\n\n"));
        assert!(may_end_head(b"\r\n\r\nGET / HT"));
        assert!(may_end_head(b"a\n\nb"));
        assert!(!may_end_head(b"GET / HTTP/1.1\r\nHost: x\r\n"));
        assert!(!may_end_head(b"\r\n\r"));
        assert!(!may_end_head(b""));
    }

    #[test]
    fn pipelined_heads_hold_only_themselves() {
        let one = b"GET /ok HTTP/1.1\r\nHost: test\r\n\r\n";
        let heads = record(&[&one.repeat(1000)]);
        assert_eq!(heads.len(), 1000);
        assert!(heads
            .iter()
            .all(|head| head.bytes.capacity() <= 2 * one.len()));
    }
}
