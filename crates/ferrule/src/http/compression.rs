//! `compress`: `--compress` applied to a response on its way to hyper, on the tokio side, never
//! the loop's thread: a whole body here and now, a streamed one as hyper polls it
//! (`EncodedBody`).

use bytes::Bytes;
use http::header::CONTENT_LENGTH;
use http::Response;

use crate::compress::{add_vary, compressed_headers, Accepted, Encoder, Policy, Verdict};

use super::body::ResponseBody;
use super::encoded_body::EncodedBody;

/// The largest body compressed at once, here: a larger one is compressed as hyper takes it,
/// a slice at a time, so that no connection's task holds its thread for long.
const WHOLE_MAX: usize = 1024 * 1024;

/// Compresses `response` if `policy` says so for the request that `accepted` describes.
pub(super) fn compress(
    response: &mut Response<ResponseBody>,
    policy: &Policy,
    accepted: Accepted,
    head_request: bool,
) {
    let headers = response.headers();
    let declared = headers
        .get(CONTENT_LENGTH)
        .and_then(|value| value.to_str().ok()?.parse::<u64>().ok());
    let length = declared.or(match response.body() {
        ResponseBody::Full(body) if !head_request => {
            Some(body.as_ref().map_or(0, |body| body.len() as u64))
        }
        _ => None,
    });
    let compression = match policy.verdict(accepted, response.status(), headers, length) {
        Verdict::Keep => return,
        Verdict::Vary => return add_vary(response.headers_mut()),
        Verdict::Compress(compression) => compression,
    };
    let body = response.body_mut();
    match body {
        // A HEAD response has the headers GET's would, and no body.
        _ if head_request => {}
        ResponseBody::Full(whole) if whole.as_ref().is_none_or(|b| b.len() <= WHOLE_MAX) => {
            let whole = whole.take().unwrap_or_default();
            let Ok(packed) = Encoder::whole(compression, &whole) else {
                // Compressing into memory fails only where memory does: sent as it is.
                *body = ResponseBody::full(whole);
                return;
            };
            *body = ResponseBody::full(Bytes::from(packed));
        }
        _ => {
            let length = length.and_then(|length| usize::try_from(length).ok());
            let Ok(encoder) = Encoder::new(compression, length) else {
                return;
            };
            let inner = std::mem::replace(body, ResponseBody::full(Bytes::new()));
            let streamed = inner.is_streamed();
            *body = ResponseBody::Encoded(Box::new(EncodedBody::new(inner, streamed, encoder)));
        }
    }
    compressed_headers(response.headers_mut(), compression);
}
