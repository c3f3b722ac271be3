//! Responses the server makes itself, without the app, in whichever body type the caller's
//! protocol answers with (anything made from `Bytes`).

use bytes::Bytes;
use http::{HeaderValue, Response, StatusCode};

use super::settings::Settings;

/// A response made by the server itself, without the app: `body` of `content_type`.
pub fn server_response<B: From<Bytes>>(
    status: StatusCode,
    content_type: &'static str,
    body: Bytes,
    settings: &Settings,
) -> Response<B> {
    let mut response = Response::new(B::from(body));
    *response.status_mut() = status;
    let headers = response.headers_mut();
    headers.insert(
        http::header::CONTENT_TYPE,
        HeaderValue::from_static(content_type),
    );
    settings.add_default_headers(headers);
    response
}

/// A small text response made by the server itself (500, 503).
pub fn plain_response<B: From<Bytes>>(status: StatusCode, settings: &Settings) -> Response<B> {
    let text = status.canonical_reason().unwrap_or("Error");
    let body = Bytes::from_static(text.as_bytes());
    server_response(status, "text/plain; charset=utf-8", body, settings)
}

/// A server-made response after which the connection closes (a refused request).
pub fn closing_response<B: From<Bytes>>(status: StatusCode, settings: &Settings) -> Response<B> {
    let mut response = plain_response(status, settings);
    response
        .headers_mut()
        .insert(http::header::CONNECTION, HeaderValue::from_static("close"));
    response
}
