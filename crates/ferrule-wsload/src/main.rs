//! `ferrule-wsload`: the WebSocket load generator of `benches/ws_bench.py`.
//!
//!     ferrule-wsload --addr 127.0.0.1:8000 --mode echo --clients 16 [--deflate]
//!                    [--in-flight 1] [--warmup 1] [--duration 5]
//!
//! Modes: `echo` (each client sends 1 KiB JSON-like texts to /echo and awaits their echoes,
//! with `--in-flight` of them sent and not yet echoed at any time) and `receive` (each client joins /broadcast and counts what arrives). With
//! `--deflate` the clients offer permessage-deflate. All clients share one thread (a tokio
//! current-thread runtime), so the generator's CPU is one core at most and easy to read.
//!
//! It prints one JSON object a line on stdout, for ws_bench.py to time the server against:
//! `{"event":"connected","clients":N,"deflate":B}` once every client is upgraded (B: every
//! one of them agreed to permessage-deflate), `{"event":"start"}` after the warm-up, and
//! `{"event":"end","messages":M,"seconds":S,"cpu_seconds":C}` after the window: M messages
//! (an echo counts once, a broadcast once per client that received it) in S seconds, C being
//! the generator's own user + system CPU time over them. Then it exits.

mod handshake;
mod message;

use std::process::ExitCode;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use futures_util::{SinkExt, StreamExt};
use tokio::net::TcpStream;
use yawc::{CompressionLevel, DeflateOptions, Frame, OpCode, Options, Role, WebSocket};

#[derive(Clone, Copy, PartialEq)]
enum Mode {
    Echo,
    Receive,
}

struct Args {
    addr: String,
    mode: Mode,
    clients: usize,
    deflate: bool,
    in_flight: usize,
    warmup: f64,
    duration: f64,
}

fn parse_args() -> Result<Args, String> {
    let mut args = Args {
        addr: String::new(),
        mode: Mode::Echo,
        clients: 16,
        deflate: false,
        in_flight: 1,
        warmup: 1.0,
        duration: 5.0,
    };
    let mut argv = std::env::args().skip(1);
    while let Some(flag) = argv.next() {
        if flag == "--deflate" {
            args.deflate = true;
            continue;
        }
        let value = argv.next().ok_or(format!("{flag} needs a value"))?;
        let bad = format!("{flag}: bad value {value:?}");
        match flag.as_str() {
            "--addr" => args.addr = value.clone(),
            "--mode" => {
                args.mode = match value.as_str() {
                    "echo" => Mode::Echo,
                    "receive" => Mode::Receive,
                    _ => return Err(format!("--mode: echo or receive, not {value:?}")),
                }
            }
            "--clients" => args.clients = value.parse().map_err(|_| bad.clone())?,
            "--in-flight" => args.in_flight = value.parse().map_err(|_| bad.clone())?,
            "--warmup" => args.warmup = value.parse().map_err(|_| bad.clone())?,
            "--duration" => args.duration = value.parse().map_err(|_| bad.clone())?,
            _ => return Err(format!("unknown option {flag}")),
        }
    }
    if args.addr.is_empty() {
        return Err("--addr HOST:PORT is required".into());
    }
    Ok(args)
}

/// This process's user + system CPU time, in seconds, from /proc (no `unsafe` for getrusage).
fn cpu_seconds() -> f64 {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    // Fields 14 and 15, utime and stime, counted after the command name's closing parenthesis.
    let after_name = stat.rsplit_once(')').map_or("", |(_, rest)| rest);
    let mut fields = after_name.split_whitespace().skip(11);
    let mut ticks = || {
        fields
            .next()
            .and_then(|f| f.parse::<u64>().ok())
            .unwrap_or(0)
    };
    let total = ticks() + ticks();
    // USER_HZ: /proc counts in hundredths of a second on x86 and arm.
    total as f64 / 100.0
}

/// What every client shares: the messages counted and the first error, if any.
#[derive(Default)]
struct Tally {
    messages: AtomicU64,
    error: Mutex<Option<String>>,
}

impl Tally {
    fn fail(&self, error: String) {
        self.error.lock().unwrap().get_or_insert(error);
    }
}

async fn connect(args: &Args, path: &str) -> Result<(WebSocket<TcpStream>, bool), String> {
    let (stream, extensions) = handshake::open(&args.addr, path, args.deflate)
        .await
        .map_err(|e| format!("{path}: {e}"))?;
    let mut options = Options::default();
    if args.deflate {
        // Level 1: the client's own compressing is not what is measured.
        options.compression = Some(DeflateOptions {
            level: CompressionLevel::fast(),
            ..DeflateOptions::default()
        });
    }
    let agreed = extensions
        .as_deref()
        .is_some_and(|e| e.contains("permessage-deflate"));
    let ws = WebSocket::from_stream_with_extensions(
        stream,
        Role::Client,
        extensions.as_deref(),
        options,
    )
    .map_err(|e| format!("{path}: {e}"))?;
    Ok((ws, agreed))
}

/// The next data message's payload; control frames are skipped (yawc answers pings itself).
async fn next_message(ws: &mut WebSocket<TcpStream>) -> Result<Bytes, String> {
    loop {
        let frame = ws.next().await.ok_or("the server closed the connection")?;
        match frame.opcode() {
            OpCode::Text | OpCode::Binary => return Ok(frame.payload().clone()),
            OpCode::Close => return Err("the server closed the WebSocket".into()),
            _ => {}
        }
    }
}

async fn echo(
    mut ws: WebSocket<TcpStream>,
    index: usize,
    in_flight: usize,
    tally: Arc<Tally>,
) -> Result<(), String> {
    let messages: Vec<Bytes> = (0..message::PER_CLIENT)
        .map(|i| Bytes::from(message::json_like(index * message::PER_CLIENT + i)))
        .collect();
    let text = |i: usize| Frame::text(messages[i % messages.len()].clone());
    let ahead = in_flight.max(1) - 1;
    for i in 0..ahead {
        ws.send(text(i)).await.map_err(|e| e.to_string())?;
    }
    for i in ahead.. {
        ws.send(text(i)).await.map_err(|e| e.to_string())?;
        let echoed = next_message(&mut ws).await?;
        if echoed.len() != message::SIZE {
            return Err(format!("an echo came back with {} bytes", echoed.len()));
        }
        tally.messages.fetch_add(1, Ordering::Relaxed);
    }
    Ok(())
}

async fn receive(mut ws: WebSocket<TcpStream>, tally: Arc<Tally>) -> Result<(), String> {
    loop {
        next_message(&mut ws).await?;
        tally.messages.fetch_add(1, Ordering::Relaxed);
    }
}

async fn run(args: Args) -> Result<(), String> {
    let tally = Arc::new(Tally::default());
    let path = match args.mode {
        Mode::Echo => "/echo",
        Mode::Receive => "/broadcast",
    };
    let mut all_agreed = true;
    let mut sockets = Vec::with_capacity(args.clients);
    for _ in 0..args.clients {
        let (ws, agreed) = connect(&args, path).await?;
        all_agreed &= agreed;
        sockets.push(ws);
    }
    for (index, ws) in sockets.into_iter().enumerate() {
        let tally = tally.clone();
        tokio::spawn(async move {
            let done = match args.mode {
                Mode::Echo => echo(ws, index, args.in_flight, tally.clone()).await,
                Mode::Receive => receive(ws, tally.clone()).await,
            };
            if let Err(error) = done {
                tally.fail(error);
            }
        });
    }
    println!(
        r#"{{"event":"connected","clients":{},"deflate":{}}}"#,
        args.clients,
        all_agreed && args.deflate
    );
    let check = |tally: &Tally| match tally.error.lock().unwrap().clone() {
        Some(error) => Err(error),
        None => Ok(()),
    };
    tokio::time::sleep(Duration::from_secs_f64(args.warmup)).await;
    check(&tally)?;
    let (start, cpu_start, t_start) = (
        tally.messages.load(Ordering::Relaxed),
        cpu_seconds(),
        Instant::now(),
    );
    println!(r#"{{"event":"start"}}"#);
    tokio::time::sleep(Duration::from_secs_f64(args.duration)).await;
    let (end, cpu_end, elapsed) = (
        tally.messages.load(Ordering::Relaxed),
        cpu_seconds(),
        t_start.elapsed(),
    );
    check(&tally)?;
    println!(
        r#"{{"event":"end","messages":{},"seconds":{:.6},"cpu_seconds":{:.6}}}"#,
        end - start,
        elapsed.as_secs_f64(),
        cpu_end - cpu_start
    );
    Ok(())
}

fn main() -> ExitCode {
    let args = match parse_args() {
        Ok(args) => args,
        Err(error) => {
            eprintln!("ferrule-wsload: {error}");
            return ExitCode::from(2);
        }
    };
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a tokio runtime");
    match runtime.block_on(run(args)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("ferrule-wsload: {error}");
            ExitCode::FAILURE
        }
    }
}
