//! One HTTP/3 request stream: the request handed to the shared request path (`http::handle`)
//! with its body read from the stream, and the response written back, trailers included.

use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use bytes::{Buf, Bytes, BytesMut};
use h3::server::{RequestResolver, RequestStream};
use http::header::{CONTENT_LENGTH, DATE};
use http::{HeaderValue, Response, StatusCode};
use http_body::{Body, Frame};
use http_body_util::BodyExt;
use tokio::sync::mpsc;

use crate::asgi::server::Server;
use crate::http::{early_hints_response, handle, BoxError, Connection, EarlyHints, IncomingBody};

type QuicConnection = h3_quinn::Connection;
type RecvStream = RequestStream<h3_quinn::RecvStream, Bytes>;

/// H3_INTERNAL_ERROR (RFC 9114 8.1): the stream a failed app left unfinished is reset with it.
const H3_INTERNAL_ERROR: h3::error::Code = h3::error::Code::H3_INTERNAL_ERROR;

/// H3_MESSAGE_ERROR (RFC 9114 8.1): a malformed request's stream is reset with it (4.1.2).
const H3_MESSAGE_ERROR: h3::error::Code = h3::error::Code::H3_MESSAGE_ERROR;

/// Serves one request stream, from its head to the response's end.
pub(super) async fn serve_request(
    resolver: RequestResolver<QuicConnection, Bytes>,
    conn: Arc<Connection>,
    server: Arc<Server>,
) {
    // A malformed head: the h3 crate has answered it (431 for one over the head limit) or
    // reset the stream.
    let Ok((request, mut stream)) = resolver.resolve_request().await else {
        return;
    };
    if has_padded_value(request.headers()) {
        stream.stop_sending(H3_MESSAGE_ERROR);
        stream.stop_stream(H3_MESSAGE_ERROR);
        return;
    }
    let (mut send, recv) = stream.split();
    let mut request = request.map(|()| {
        IncomingBody::Stream(Box::pin(StreamBody {
            stream: recv,
            after: None,
        }))
    });
    let (hints_tx, mut hints) = mpsc::unbounded_channel();
    request.extensions_mut().insert(EarlyHints::Http3(hints_tx));
    let head_request = request.method() == http::Method::HEAD;
    let date_header = server.settings.date_header;
    let response = handle(request, conn, server);
    tokio::pin!(response);
    // The app's 103s go out as they come, until its final head.
    let response = loop {
        tokio::select! {
            biased;
            Some(links) = hints.recv() => {
                if send.send_response(early_hints_response(links)).await.is_err() {
                    return;
                }
            }
            Ok(response) = &mut response => break response,
        }
    };
    // Sent before the head (`HttpSend::early_hint`), so here already if at all.
    while let Ok(links) = hints.try_recv() {
        if send
            .send_response(early_hints_response(links))
            .await
            .is_err()
        {
            return;
        }
    }
    let (mut parts, mut body) = response.into_parts();
    let has_body = !head_request
        && !matches!(
            parts.status,
            StatusCode::NO_CONTENT | StatusCode::NOT_MODIFIED
        );
    // What hyper adds over HTTP/1.1 and HTTP/2: the length of a body known whole, and the date.
    if has_body && !parts.headers.contains_key(CONTENT_LENGTH) {
        if let Some(length) = body.size_hint().exact() {
            parts
                .headers
                .insert(CONTENT_LENGTH, HeaderValue::from(length));
        }
    }
    if date_header && !parts.headers.contains_key(DATE) {
        parts.headers.insert(DATE, http_date());
    }
    // Connection-specific fields make an HTTP/3 message malformed (RFC 9114 4.2), and a client
    // closes the whole connection over one; hyper drops them from HTTP/2 responses likewise.
    // The refusals' `connection: close` is one of them.
    for name in CONNECTION_SPECIFIC {
        parts.headers.remove(name);
    }
    if send
        .send_response(Response::from_parts(parts, ()))
        .await
        .is_err()
    {
        return;
    }
    while let Some(frame) = body.frame().await {
        let Ok(frame) = frame else {
            // The app failed mid-body: the client must not take what it got for the whole.
            send.stop_stream(H3_INTERNAL_ERROR);
            return;
        };
        let sent = match frame.into_data() {
            Ok(data) if data.is_empty() => Ok(()),
            Ok(data) => send.send_data(data).await,
            Err(frame) => match frame.into_trailers() {
                Ok(trailers) => send.send_trailers(trailers).await,
                Err(_) => Ok(()),
            },
        };
        if sent.is_err() {
            // The client reset the stream or left: dropping the body tells the app.
            return;
        }
    }
    let _ = send.finish().await;
}

/// Whether a field value starts or ends with SP or HTAB: RFC 9110 5.5 leaves that whitespace
/// out of a value and RFC 9114 4.1.2 makes "invalid characters in field ... values" malformed
/// (as RFC 9113 8.2.1 does over HTTP/2). The h3 crate passes them, as `HeaderValue` allows.
fn has_padded_value(headers: &http::HeaderMap) -> bool {
    headers
        .values()
        .any(|value| matches!(value.as_bytes(), [b' ' | b'\t', ..] | [.., b' ' | b'\t']))
}

/// Fields that belong to one HTTP/1.1 connection, not to an HTTP/3 message.
const CONNECTION_SPECIFIC: [http::HeaderName; 5] = [
    http::header::CONNECTION,
    http::header::TRANSFER_ENCODING,
    http::header::UPGRADE,
    http::HeaderName::from_static("keep-alive"),
    http::HeaderName::from_static("proxy-connection"),
];

/// The `date` header's value now (RFC 9110 5.6.7).
fn http_date() -> HeaderValue {
    let now = chrono::Utc::now().format("%a, %d %b %Y %H:%M:%S GMT");
    HeaderValue::try_from(now.to_string()).expect("a date is a valid header value")
}

/// At most this much of the request body is gathered into one `http.request` message: QUIC
/// delivers a body in packet-sized pieces (about 1.2 KB), and a message per piece costs the
/// app a GIL acquisition each.
const GATHER_BYTES: usize = 64 * 1024;

/// The request body as read from the stream: the app's `receive()` reads it as it reads
/// hyper's, and QUIC's flow control holds the client back until it does. What has arrived is
/// gathered into one chunk (up to `GATHER_BYTES`); the end or an error after it is kept for
/// the next poll.
struct StreamBody {
    stream: RecvStream,
    after: Option<Option<BoxError>>,
}

impl Body for StreamBody {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        let this = self.get_mut();
        if this.after.is_some() {
            return Poll::Ready(this.end());
        }
        let mut gathered = BytesMut::new();
        while gathered.len() < GATHER_BYTES {
            match this.stream.poll_recv_data(cx) {
                Poll::Ready(Ok(Some(mut data))) => {
                    gathered.extend_from_slice(&data.copy_to_bytes(data.remaining()));
                }
                Poll::Ready(Ok(None)) => {
                    this.after = Some(None);
                    break;
                }
                Poll::Ready(Err(err)) => {
                    this.after = Some(Some(Box::new(err)));
                    break;
                }
                Poll::Pending if gathered.is_empty() => return Poll::Pending,
                Poll::Pending => break,
            }
        }
        if gathered.is_empty() {
            // Ended (or failed) with nothing more: say so now.
            return Poll::Ready(this.end());
        }
        Poll::Ready(Some(Ok(Frame::data(gathered.freeze()))))
    }

    fn is_end_stream(&self) -> bool {
        matches!(self.after, Some(None))
    }
}

impl StreamBody {
    /// What follows the data: the error once, if there was one, then the end for ever.
    fn end(&mut self) -> Option<Result<Frame<Bytes>, BoxError>> {
        self.after.replace(None).flatten().map(Err)
    }
}
