//! `serve_static`: a request under a `--static-path-route`, answered from its mount before the
//! app is called (never entering Python).

use bytes::Bytes;
use http::header::{
    ACCEPT_RANGES, ALLOW, CACHE_CONTROL, CONTENT_ENCODING, CONTENT_LENGTH, CONTENT_RANGE,
    CONTENT_TYPE, ETAG, IF_MODIFIED_SINCE, IF_NONE_MATCH, IF_RANGE, LAST_MODIFIED, RANGE, VARY,
};
use http::{HeaderMap, HeaderValue, Method, Request, Response, StatusCode};

use crate::asgi::responses::plain_response;
use crate::asgi::settings::Settings;
use crate::compress::{Accepted, Coding, Compression};
use crate::statics::{media_type, ByteRange, Lookup, Opened, StaticFiles, Validators};

use super::body::ResponseBody;
use super::compression::compress;
use super::file_body::FileBody;
use super::incoming::IncomingBody;

/// Files (or ranges) up to this size are read at once, here; larger ones a chunk at a time as
/// hyper sends them (`FileBody`).
const READ_AT_ONCE: u64 = 128 * 1024;

/// The precompressed variants looked for beside a file, in the order preferred when the
/// client weighs them alike (the levels are the files' own: none is asked for).
const VARIANTS: [Compression; 3] = [
    Compression {
        coding: Coding::Br,
        level: 0,
    },
    Compression {
        coding: Coding::Zstd,
        level: 0,
    },
    Compression {
        coding: Coding::Gzip,
        level: 0,
    },
];

/// The answer to a request under a static route, or `None` for the app's (not under one, or
/// not found with `--static-path-fallthrough`).
pub(super) fn serve_static(
    request: &Request<IncomingBody>,
    files: &StaticFiles,
    settings: &Settings,
) -> Option<Response<ResponseBody>> {
    let opened = match files.lookup(request.uri().path()) {
        Lookup::NotStatic => return None,
        Lookup::Refused => return Some(plain_response(StatusCode::BAD_REQUEST, settings)),
        Lookup::Missing if files.fallthrough => return None,
        Lookup::Missing => return Some(plain_response(StatusCode::NOT_FOUND, settings)),
        Lookup::Found(opened) => *opened,
    };
    let head = request.method() == Method::HEAD;
    if !head && request.method() != Method::GET {
        if files.fallthrough {
            return None;
        }
        let mut response = plain_response(StatusCode::METHOD_NOT_ALLOWED, settings);
        response
            .headers_mut()
            .insert(ALLOW, HeaderValue::from_static("GET, HEAD"));
        return Some(response);
    }
    let asked = request.headers();
    let content_type = media_type(opened.name());
    let (opened, coding) = if files.precompressed {
        precompressed(files, opened, asked)
    } else {
        (opened, None)
    };
    let size = opened.meta.len();
    let modified = opened.meta.modified().unwrap_or(std::time::UNIX_EPOCH);
    let tag = coding.map_or(String::new(), |coding| format!("-{}", coding.name()));
    let validators = Validators::new(modified, size, &tag);

    let mut headers = HeaderMap::with_capacity(10);
    headers.insert(ETAG, validators.etag.clone());
    headers.insert(LAST_MODIFIED, validators.last_modified.clone());
    if let Some(max_age) = files.max_age {
        let value = format!("public, max-age={max_age}");
        headers.insert(
            CACHE_CONTROL,
            HeaderValue::from_str(&value).expect("digits"),
        );
    }
    if files.precompressed {
        headers.insert(VARY, HeaderValue::from_static("accept-encoding"));
    }
    if let Some(coding) = coding {
        headers.insert(CONTENT_ENCODING, coding.header_value());
    }
    let not_modified = validators.not_modified(
        asked.get(IF_NONE_MATCH).map(HeaderValue::as_bytes),
        asked.get(IF_MODIFIED_SINCE).map(HeaderValue::as_bytes),
    );
    if not_modified {
        return Some(answer(
            StatusCode::NOT_MODIFIED,
            headers,
            ResponseBody::full(Bytes::new()),
            settings,
        ));
    }
    headers.insert(CONTENT_TYPE, content_type);
    headers.insert(ACCEPT_RANGES, HeaderValue::from_static("bytes"));
    let range = if !head && validators.range_applies(asked.get(IF_RANGE).map(HeaderValue::as_bytes))
    {
        ByteRange::of(asked.get(RANGE).map(HeaderValue::as_bytes), size)
    } else {
        ByteRange::Whole
    };
    let (status, start, length) = match range {
        ByteRange::Whole => (StatusCode::OK, 0, size),
        ByteRange::Part(start, end) => {
            let value = format!("bytes {start}-{end}/{size}");
            headers.insert(
                CONTENT_RANGE,
                HeaderValue::from_str(&value).expect("digits"),
            );
            (StatusCode::PARTIAL_CONTENT, start, end - start + 1)
        }
        ByteRange::Unsatisfiable => {
            let value = format!("bytes */{size}");
            let mut response = plain_response(StatusCode::RANGE_NOT_SATISFIABLE, settings);
            let headers = response.headers_mut();
            headers.insert(
                CONTENT_RANGE,
                HeaderValue::from_str(&value).expect("digits"),
            );
            return Some(response);
        }
    };
    headers.insert(CONTENT_LENGTH, HeaderValue::from(length));
    let body = if head {
        ResponseBody::full(Bytes::new())
    } else {
        let file = FileBody::new(opened.file, start, length);
        let read = if length <= READ_AT_ONCE {
            file.and_then(FileBody::whole).map(ResponseBody::full)
        } else {
            file.map(ResponseBody::File)
        };
        match read {
            Ok(body) => body,
            Err(_) => return Some(plain_response(StatusCode::INTERNAL_SERVER_ERROR, settings)),
        }
    };
    let mut response = answer(status, headers, body, settings);
    if let Some(policy) = settings.compression.as_ref().filter(|_| coding.is_none()) {
        let accepted = policy.accepted(asked);
        compress(&mut response, policy, accepted, head);
    }
    Some(response)
}

fn answer(
    status: StatusCode,
    headers: HeaderMap,
    body: ResponseBody,
    settings: &Settings,
) -> Response<ResponseBody> {
    let mut response = Response::new(body);
    *response.status_mut() = status;
    *response.headers_mut() = headers;
    settings.add_default_headers(response.headers_mut());
    response
}

/// The precompressed variant the client takes, if one is beside the file: the one it weighs
/// most, then the next when that file is not there.
fn precompressed(
    files: &StaticFiles,
    opened: Opened,
    asked: &HeaderMap,
) -> (Opened, Option<Coding>) {
    let mut offered = VARIANTS.to_vec();
    while let Some(chosen) = Accepted::from_request(asked, &offered).chosen {
        if let Some(variant) = files.variant(&opened, chosen.coding.file_suffix()) {
            return (variant, Some(chosen.coding));
        }
        offered.retain(|c| *c != chosen);
    }
    (opened, None)
}
