//! The client's opening handshake (RFC 6455 4.1), written here rather than by yawc's builder
//! because the bench must know whether the server agreed to permessage-deflate, which yawc's
//! builder keeps to itself: the agreed `Sec-WebSocket-Extensions` value goes to
//! `WebSocket::from_stream_with_extensions`.

use std::io;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// What the client offers, as browsers do: its own window left to the server.
pub const DEFLATE_OFFER: &str = "permessage-deflate; client_max_window_bits";
/// Any 16 bytes, base64: the bench does not check the server's accept key.
const KEY: &str = "dGhlIHNhbXBsZSBub25jZQ==";
const MAX_RESPONSE: usize = 16 * 1024;

/// Connects to `addr` and upgrades `path`; returns the socket and the extensions the server
/// agreed to, if any.
pub async fn open(
    addr: &str,
    path: &str,
    deflate: bool,
) -> io::Result<(TcpStream, Option<String>)> {
    let mut stream = TcpStream::connect(addr).await?;
    stream.set_nodelay(true)?;
    let offer = match deflate {
        true => format!("Sec-WebSocket-Extensions: {DEFLATE_OFFER}\r\n"),
        false => String::new(),
    };
    let request = format!(
        "GET {path} HTTP/1.1\r\nHost: {addr}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\
         Sec-WebSocket-Key: {KEY}\r\nSec-WebSocket-Version: 13\r\n{offer}\r\n"
    );
    stream.write_all(request.as_bytes()).await?;
    // A byte at a time: a broadcast may follow the response at once, and what is read past
    // the response's end would be lost to the WebSocket.
    let mut head = Vec::with_capacity(512);
    while !head.ends_with(b"\r\n\r\n") {
        if head.len() > MAX_RESPONSE {
            return Err(io::Error::other("handshake response too long"));
        }
        head.push(stream.read_u8().await?);
    }
    let mut headers = [httparse::EMPTY_HEADER; 32];
    let mut response = httparse::Response::new(&mut headers);
    response
        .parse(&head)
        .map_err(|e| io::Error::other(format!("bad handshake response: {e}")))?;
    if response.code != Some(101) {
        return Err(io::Error::other(format!(
            "handshake answered {:?}, not 101",
            response.code
        )));
    }
    let extensions = response
        .headers
        .iter()
        .find(|h| h.name.eq_ignore_ascii_case("sec-websocket-extensions"))
        .map(|h| String::from_utf8_lossy(h.value).into_owned());
    Ok((stream, extensions))
}
