//! `Policy`: which responses are compressed (`--compress`, `--compress-min-size`,
//! `--compress-types`), and what a compressed response's headers become.

use http::header::{
    ACCEPT_RANGES, CACHE_CONTROL, CONTENT_ENCODING, CONTENT_LENGTH, CONTENT_TYPE, ETAG, VARY,
};
use http::{HeaderMap, HeaderValue, StatusCode};

use super::accept::Accepted;
use super::coding::Compression;
use super::media_types::MediaTypes;

pub struct Policy {
    /// The codings offered, in the server's order of preference.
    pub codings: Vec<Compression>,
    /// Bodies shorter than this go as they are: compressing them saves less than it costs.
    pub min_size: u64,
    pub types: MediaTypes,
}

/// What becomes of one response.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Verdict {
    /// Sent as it is: not a response compression applies to.
    Keep,
    /// Sent as it is to this client, which takes none of the codings, though another would
    /// get it compressed: a cache must know it varies.
    Vary,
    Compress(Compression),
}

impl Policy {
    /// What the request's `Accept-Encoding` lets this server send.
    pub fn accepted(&self, request: &HeaderMap) -> Accepted {
        Accepted::from_request(request, &self.codings)
    }

    /// Whether a response is compressed. `length`: its body's length, if known (the
    /// Content-Length the app gave, else a body sent in one message); a body of unknown length
    /// is streamed, and compressed. Never a status without content (1xx, 204, 304) or a part
    /// of one (206), a body the app encoded itself (any `Content-Encoding`), a type not
    /// listed, or a response that says `Cache-Control: no-transform`.
    pub fn verdict(
        &self,
        accepted: Accepted,
        status: StatusCode,
        headers: &HeaderMap,
        length: Option<u64>,
    ) -> Verdict {
        let without_content = status.is_informational()
            || matches!(
                status,
                StatusCode::NO_CONTENT | StatusCode::NOT_MODIFIED | StatusCode::PARTIAL_CONTENT
            );
        let small = length.is_some_and(|length| length < self.min_size);
        if without_content
            || (small && !accepted.identity_refused)
            || headers.contains_key(CONTENT_ENCODING)
            || !headers
                .get(CONTENT_TYPE)
                .is_some_and(|value| self.types.matches(value.as_bytes()))
            || no_transform(headers)
        {
            return Verdict::Keep;
        }
        match accepted.chosen {
            Some(compression) => Verdict::Compress(compression),
            None => Verdict::Vary,
        }
    }
}

fn no_transform(headers: &HeaderMap) -> bool {
    headers.get_all(CACHE_CONTROL).iter().any(|value| {
        value
            .as_bytes()
            .split(|&b| b == b',')
            .any(|directive| directive.trim_ascii().eq_ignore_ascii_case(b"no-transform"))
    })
}

/// Adds `Accept-Encoding` to the response's `Vary` (unless it says `*` or names it already).
pub fn add_vary(headers: &mut HeaderMap) {
    let listed = headers.get_all(VARY).iter().any(|value| {
        value.as_bytes().split(|&b| b == b',').any(|name| {
            let name = name.trim_ascii();
            name == b"*" || name.eq_ignore_ascii_case(b"accept-encoding")
        })
    });
    if !listed {
        headers.append(VARY, HeaderValue::from_static("accept-encoding"));
    }
}

/// A compressed response's headers: its coding, no length (the body's is recomputed, or it is
/// streamed), no ranges (they would count the compressed bytes), a weak ETag (the bytes
/// differ from the identity response's, while what they stand for does not), and `Vary`.
pub fn compressed_headers(headers: &mut HeaderMap, compression: Compression) {
    headers.insert(CONTENT_ENCODING, compression.coding.header_value());
    headers.remove(CONTENT_LENGTH);
    headers.remove(ACCEPT_RANGES);
    if let Some(etag) = headers.get_mut(ETAG) {
        if etag.as_bytes().starts_with(b"\"") {
            let mut weak = b"W/".to_vec();
            weak.extend_from_slice(etag.as_bytes());
            if let Ok(weak) = HeaderValue::from_bytes(&weak) {
                *etag = weak;
            }
        }
    }
    add_vary(headers);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::compress::Coding;

    fn policy() -> Policy {
        Policy {
            codings: vec![Compression {
                coding: Coding::Gzip,
                level: 6,
            }],
            min_size: 500,
            types: MediaTypes::parse(&["application/json", "text/*"]).unwrap(),
        }
    }

    fn headers(pairs: &[(&'static str, &'static str)]) -> HeaderMap {
        let mut map = HeaderMap::new();
        for (name, value) in pairs {
            map.append(*name, HeaderValue::from_static(value));
        }
        map
    }

    const GZIP: Compression = Compression {
        coding: Coding::Gzip,
        level: 6,
    };
    const WANTS_GZIP: Accepted = Accepted {
        chosen: Some(GZIP),
        identity_refused: false,
    };

    #[test]
    fn a_listed_type_of_the_minimum_size_is_compressed() {
        let json = headers(&[("content-type", "application/json")]);
        let p = policy();
        let ok = StatusCode::OK;
        assert_eq!(
            p.verdict(WANTS_GZIP, ok, &json, Some(500)),
            Verdict::Compress(GZIP)
        );
        assert_eq!(
            p.verdict(WANTS_GZIP, ok, &json, None),
            Verdict::Compress(GZIP)
        );
        assert_eq!(p.verdict(WANTS_GZIP, ok, &json, Some(499)), Verdict::Keep);
        let refusing = Accepted {
            identity_refused: true,
            ..WANTS_GZIP
        };
        assert_eq!(
            p.verdict(refusing, ok, &json, Some(10)),
            Verdict::Compress(GZIP)
        );
        assert_eq!(
            p.verdict(Accepted::default(), ok, &json, Some(500)),
            Verdict::Vary
        );
    }

    #[test]
    fn what_must_not_be_compressed_is_kept() {
        let p = policy();
        let ok = StatusCode::OK;
        let keep = |status, pairs: &[(&'static str, &'static str)]| {
            p.verdict(WANTS_GZIP, status, &headers(pairs), None) == Verdict::Keep
        };
        let json = ("content-type", "application/json");
        assert!(keep(ok, &[("content-type", "image/png")]));
        assert!(keep(ok, &[]));
        assert!(keep(ok, &[json, ("content-encoding", "identity")]));
        assert!(keep(ok, &[json, ("cache-control", "public, No-Transform")]));
        assert!(keep(StatusCode::NO_CONTENT, &[json]));
        assert!(keep(StatusCode::NOT_MODIFIED, &[json]));
        assert!(keep(StatusCode::PARTIAL_CONTENT, &[json]));
        assert!(!keep(StatusCode::NOT_FOUND, &[json]));
    }

    #[test]
    fn compressed_headers_weaken_the_etag_and_merge_vary() {
        let mut map = headers(&[
            ("content-length", "900"),
            ("accept-ranges", "bytes"),
            ("etag", "\"v1\""),
            ("vary", "Origin"),
        ]);
        compressed_headers(&mut map, GZIP);
        assert_eq!(map["content-encoding"], "gzip");
        assert!(!map.contains_key("content-length") && !map.contains_key("accept-ranges"));
        assert_eq!(map["etag"], "W/\"v1\"");
        let vary: Vec<_> = map.get_all("vary").iter().collect();
        assert_eq!(vary, ["Origin", "accept-encoding"]);

        let mut map = headers(&[("etag", "W/\"v1\""), ("vary", "origin, Accept-Encoding")]);
        compressed_headers(&mut map, GZIP);
        assert_eq!(map["etag"], "W/\"v1\"");
        assert_eq!(map.get_all("vary").iter().count(), 1);

        let mut map = headers(&[("vary", "*")]);
        add_vary(&mut map);
        assert_eq!(map.get_all("vary").iter().count(), 1);
    }
}
