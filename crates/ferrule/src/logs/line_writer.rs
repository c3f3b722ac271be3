//! `LineWriter`: lines written to a descriptor by a thread of their own, many to a `write(2)`,
//! so that whoever logs never makes a system call per line nor waits on a slow reader.

use std::fs::File;
use std::io::{ErrorKind, Write};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread;
use std::time::{Duration, Instant};

/// The most one `write(2)` carries: POSIX makes a pipe write of up to `PIPE_BUF` (4096 on
/// Linux and macOS) atomic, so workers sharing one pipe never split each other's lines.
pub const PIPE_BUF: usize = 4096;

/// How long the thread lets lines gather after the first one wakes it: at a high request rate
/// a write then carries a pipe buffer's worth rather than a line.
const GATHER: Duration = Duration::from_millis(5);

/// How often dropped lines are reported while lines go on being dropped.
const REPORT_EVERY: Duration = Duration::from_secs(10);

/// Lines waiting, and what the writing thread reports back.
struct State {
    pending: Vec<u8>,
    /// Lines refused since the last report because `pending` was full.
    dropped: u64,
    /// Bytes accepted so far, and bytes written (or given up on) so far: a flush waits for
    /// the second to reach what the first was when it began.
    accepted: u64,
    done: u64,
    /// The thread waits on `wake` (the next line must notify it).
    idle: bool,
    /// `flush` is waiting: write without letting lines gather.
    hurry: bool,
}

struct Shared {
    state: Mutex<State>,
    wake: Condvar,
    flushed: Condvar,
    /// The most bytes `pending` holds; a line past it is dropped and counted.
    limit: usize,
    dropped_total: AtomicU64,
    /// Turns the count of dropped lines and the limit into the line that reports them.
    report: fn(u64, usize) -> String,
}

/// A descriptor (owned) written by its own thread. Lines are whole: each ends with `\n`, and a
/// write carries whole lines only, at most `PIPE_BUF` bytes unless one line is longer.
pub struct LineWriter {
    shared: Arc<Shared>,
}

impl LineWriter {
    /// Starts the thread writing to `file`. At most `limit` bytes of lines wait while `file`
    /// does not take them (a pipe nobody reads); `report(n, limit)` is the line written once
    /// writing resumes after `n` lines were dropped.
    pub fn start(file: File, limit: usize, report: fn(u64, usize) -> String) -> Self {
        let shared = Arc::new(Shared {
            state: Mutex::new(State {
                pending: Vec::with_capacity(PIPE_BUF),
                dropped: 0,
                accepted: 0,
                done: 0,
                idle: false,
                hurry: false,
            }),
            wake: Condvar::new(),
            flushed: Condvar::new(),
            limit,
            dropped_total: AtomicU64::new(0),
            report,
        });
        let writing = shared.clone();
        thread::Builder::new()
            .name("ferrule-log".into())
            .spawn(move || write_lines(&writing, file))
            .expect("cannot start the log writer thread");
        Self { shared }
    }

    /// Adds the line `line` writes (it must end with `\n`); refused and counted when `limit`
    /// bytes are waiting already. No system call unless the thread was idle.
    pub fn push(&self, line: impl FnOnce(&mut Vec<u8>)) {
        let mut state = self.lock();
        let start = state.pending.len();
        line(&mut state.pending);
        let added = state.pending.len() - start;
        if start > 0 && state.pending.len() > self.shared.limit {
            state.pending.truncate(start);
            state.dropped += 1;
            self.shared.dropped_total.fetch_add(1, Ordering::Relaxed);
            return;
        }
        state.accepted += added as u64;
        let wake = std::mem::replace(&mut state.idle, false);
        drop(state);
        if wake {
            self.shared.wake.notify_one();
        }
    }

    /// Waits until every line added before the call is written, at most `timeout`; whether it
    /// was.
    pub fn flush(&self, timeout: Duration) -> bool {
        let deadline = Instant::now() + timeout;
        let mut state = self.lock();
        let target = state.accepted;
        state.hurry = true;
        if std::mem::replace(&mut state.idle, false) {
            self.shared.wake.notify_one();
        }
        while state.done < target {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return false;
            }
            state = self.shared.flushed.wait_timeout(state, left).unwrap().0;
        }
        true
    }

    /// Lines dropped so far because the limit was reached.
    pub fn dropped(&self) -> u64 {
        self.shared.dropped_total.load(Ordering::Relaxed)
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.shared.state.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// The thread: waits for lines, lets more gather, writes them. Dropped lines are reported in
/// one line once the writer has caught up (a write during which nothing was dropped), or every
/// `REPORT_EVERY` while dropping goes on.
fn write_lines(shared: &Shared, mut file: File) {
    let mut batch = Vec::with_capacity(PIPE_BUF);
    let mut unreported = 0;
    let mut dropping_since = None;
    loop {
        let mut state = shared.state.lock().unwrap_or_else(|e| e.into_inner());
        // Dropped lines not yet reported bring the thread round again, for the report.
        while state.pending.is_empty() && state.dropped == 0 && unreported == 0 {
            state.idle = true;
            state = shared.wake.wait(state).unwrap_or_else(|e| e.into_inner());
        }
        if !state.hurry && !state.pending.is_empty() {
            drop(state);
            thread::sleep(GATHER);
            state = shared.state.lock().unwrap_or_else(|e| e.into_inner());
        }
        state.hurry = false;
        std::mem::swap(&mut batch, &mut state.pending);
        let dropped = std::mem::take(&mut state.dropped);
        drop(state);
        let written = batch.len() as u64;
        write_whole_lines(&mut file, &batch);
        unreported += dropped;
        if dropped > 0 {
            dropping_since.get_or_insert_with(Instant::now);
        }
        let caught_up = dropped == 0 || dropping_since.is_some_and(|t| t.elapsed() >= REPORT_EVERY);
        if unreported > 0 && caught_up {
            let mut line = (shared.report)(unreported, shared.limit).into_bytes();
            line.push(b'\n');
            write_whole_lines(&mut file, &line);
            (unreported, dropping_since) = (0, None);
        }
        batch.clear();
        // Keep a buffer of a usual size, not the largest a stall ever made.
        batch.shrink_to(PIPE_BUF * 4);
        let mut state = shared.state.lock().unwrap_or_else(|e| e.into_inner());
        state.done += written;
        drop(state);
        shared.flushed.notify_all();
    }
}

/// Writes `bytes` (whole lines) in writes of at most `PIPE_BUF`, each ending at a line's end
/// (a longer line alone). A descriptor that fails (closed, no reader) loses the lines: a log
/// line is never worth stopping the server for.
fn write_whole_lines(file: &mut File, mut bytes: &[u8]) {
    while !bytes.is_empty() {
        let cut = chunk_end(bytes);
        if write_all(file, &bytes[..cut]).is_err() {
            return;
        }
        bytes = &bytes[cut..];
    }
}

/// Where the first write of `bytes` ends: after the last line that fits in `PIPE_BUF`, or
/// after the first line if even it does not.
fn chunk_end(bytes: &[u8]) -> usize {
    if bytes.len() <= PIPE_BUF {
        return bytes.len();
    }
    match bytes[..PIPE_BUF].iter().rposition(|&b| b == b'\n') {
        Some(newline) => newline + 1,
        None => bytes
            .iter()
            .position(|&b| b == b'\n')
            .map_or(bytes.len(), |newline| newline + 1),
    }
}

/// `write_all`, waiting out a descriptor someone made non-blocking.
fn write_all(file: &mut File, mut bytes: &[u8]) -> std::io::Result<()> {
    while !bytes.is_empty() {
        match file.write(bytes) {
            Ok(0) => return Err(ErrorKind::WriteZero.into()),
            Ok(n) => bytes = &bytes[n..],
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            Err(e) if e.kind() == ErrorKind::WouldBlock => thread::sleep(GATHER),
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Read;
    use std::os::fd::OwnedFd;
    use std::os::unix::net::UnixStream;

    /// A connected pair standing for a pipe (the writer only needs a descriptor to write).
    fn pipe() -> (File, File) {
        let (read, write) = UnixStream::pair().unwrap();
        (
            File::from(OwnedFd::from(read)),
            File::from(OwnedFd::from(write)),
        )
    }

    fn report(n: u64, limit: usize) -> String {
        format!("dropped {n} (limit {limit})")
    }

    fn line(i: usize) -> impl FnOnce(&mut Vec<u8>) {
        move |buf: &mut Vec<u8>| {
            buf.extend_from_slice(format!("line {i:05} {}\n", "x".repeat(50)).as_bytes())
        }
    }

    #[test]
    fn lines_come_out_whole_in_order_and_flush_waits_for_them() {
        let (mut read, write) = pipe();
        let writer = LineWriter::start(write, 1 << 20, report);
        for i in 0..1000 {
            writer.push(line(i));
        }
        assert!(writer.flush(Duration::from_secs(5)));
        drop(writer);
        let mut buf = vec![0; 1 << 20];
        let n = read.read(&mut buf).unwrap();
        let mut text = String::from_utf8(buf[..n].to_vec()).unwrap();
        while text.lines().count() < 1000 {
            let n = read.read(&mut buf).unwrap();
            text.push_str(std::str::from_utf8(&buf[..n]).unwrap());
        }
        for (i, got) in text.lines().enumerate() {
            assert_eq!(got, format!("line {i:05} {}", "x".repeat(50)));
        }
    }

    #[test]
    fn a_reader_that_stalls_bounds_what_waits_and_is_told_what_was_dropped() {
        let (mut read, write) = pipe();
        let writer = LineWriter::start(write, 8192, report);
        // Far more than a pipe's 64 KiB and the 8 KiB limit: the pushes never block.
        for i in 0..20_000 {
            writer.push(line(i));
        }
        let dropped = writer.dropped();
        assert!(dropped > 10_000, "{dropped}");
        // Read until every line is accounted for: written, or counted in a report.
        let (mut text, mut buf) = (Vec::new(), vec![0; 1 << 16]);
        let (mut kept, mut reported) = (0, 0);
        while kept + reported < 20_000 {
            let n = read.read(&mut buf).unwrap();
            text.extend_from_slice(&buf[..n]);
            let whole = text.iter().rposition(|&b| b == b'\n').map_or(0, |i| i + 1);
            for got in std::str::from_utf8(&text[..whole]).unwrap().lines() {
                match got.strip_prefix("dropped ") {
                    Some(rest) => {
                        assert!(rest.ends_with(" (limit 8192)"), "{got}");
                        reported += rest.split(' ').next().unwrap().parse::<u64>().unwrap();
                    }
                    None => kept += 1,
                }
            }
            text.drain(..whole);
        }
        assert_eq!(reported, dropped);
    }

    #[test]
    fn writes_end_at_line_ends() {
        let lines: Vec<u8> = (0..200)
            .flat_map(|i| format!("{i:>70}\n").into_bytes())
            .collect();
        let cut = chunk_end(&lines);
        assert!(cut <= PIPE_BUF && lines[cut - 1] == b'\n');
        let long = [vec![b'y'; 5000], b"\nz\n".to_vec()].concat();
        assert_eq!(chunk_end(&long), 5001);
    }
}
