//! `Validators`: a file's `ETag` and `Last-Modified`, and the conditional request headers
//! (RFC 9110, 13) checked against them.

use std::time::{SystemTime, UNIX_EPOCH};

use http::HeaderValue;

/// What identifies one version of a file: its modification time and size, as nginx's ETag
/// is made (`"mtime-size"` in hex), with a tag for a precompressed variant.
pub struct Validators {
    pub etag: HeaderValue,
    pub last_modified: HeaderValue,
    /// The modification time in whole seconds, as HTTP dates count.
    modified: u64,
}

impl Validators {
    pub fn new(modified: SystemTime, size: u64, variant: &str) -> Validators {
        let modified = modified
            .duration_since(UNIX_EPOCH)
            .map_or(0, |since| since.as_secs());
        let etag = format!("\"{modified:x}-{size:x}{variant}\"");
        let date = httpdate::fmt_http_date(UNIX_EPOCH + std::time::Duration::from_secs(modified));
        Validators {
            etag: HeaderValue::from_str(&etag).expect("hex digits and a coding name"),
            last_modified: HeaderValue::from_str(&date).expect("an HTTP date"),
            modified,
        }
    }

    /// Whether a GET or HEAD with these headers is answered 304: `If-None-Match` names the
    /// ETag (weakly compared, or `*`); else, without it, `If-Modified-Since` is not older
    /// than the file.
    pub fn not_modified(
        &self,
        if_none_match: Option<&[u8]>,
        if_modified_since: Option<&[u8]>,
    ) -> bool {
        if let Some(list) = if_none_match {
            return list.split(|&b| b == b',').any(|tag| {
                let tag = tag.trim_ascii();
                tag == b"*" || weak(tag) == weak(self.etag.as_bytes())
            });
        }
        if_modified_since
            .and_then(|since| httpdate::parse_http_date(std::str::from_utf8(since).ok()?).ok())
            .and_then(|since| since.duration_since(UNIX_EPOCH).ok())
            .is_some_and(|since| self.modified <= since.as_secs())
    }

    /// Whether a `Range` is honoured under `If-Range`: only if it names this version, by a
    /// strong ETag or the exact Last-Modified date (else the whole file is sent).
    pub fn range_applies(&self, if_range: Option<&[u8]>) -> bool {
        let Some(condition) = if_range.map(<[u8]>::trim_ascii) else {
            return true;
        };
        if condition.starts_with(b"\"") {
            return condition == self.etag.as_bytes();
        }
        if condition.starts_with(b"W/") {
            return false;
        }
        std::str::from_utf8(condition)
            .ok()
            .and_then(|date| httpdate::parse_http_date(date).ok())
            .and_then(|date| date.duration_since(UNIX_EPOCH).ok())
            .is_some_and(|date| date.as_secs() == self.modified)
    }
}

/// An entity tag without its weakness indicator, for the weak comparison.
fn weak(tag: &[u8]) -> &[u8] {
    tag.strip_prefix(b"W/").unwrap_or(tag)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn conditions_compare_as_the_rfc_says() {
        let at = UNIX_EPOCH + std::time::Duration::from_secs(1_700_000_000);
        let v = Validators::new(at, 1234, "");
        assert_eq!(v.etag, "\"6553f100-4d2\"");
        assert_eq!(v.last_modified, "Tue, 14 Nov 2023 22:13:20 GMT");
        let tag = v.etag.as_bytes().to_vec();
        assert!(v.not_modified(Some(&tag), None));
        assert!(v.not_modified(Some(b"\"x\", W/\"6553f100-4d2\""), None));
        assert!(v.not_modified(Some(b"*"), None));
        assert!(!v.not_modified(Some(b"\"x\""), Some(b"Tue, 14 Nov 2023 22:13:20 GMT")));
        assert!(v.not_modified(None, Some(b"Tue, 14 Nov 2023 22:13:20 GMT")));
        assert!(!v.not_modified(None, Some(b"Tue, 14 Nov 2023 22:13:19 GMT")));
        assert!(!v.not_modified(None, Some(b"yesterday")));
        assert!(v.range_applies(None));
        assert!(v.range_applies(Some(&tag)));
        assert!(!v.range_applies(Some(b"W/\"6553f100-4d2\"")));
        assert!(v.range_applies(Some(b"Tue, 14 Nov 2023 22:13:20 GMT")));
        assert!(!v.range_applies(Some(b"Tue, 14 Nov 2023 22:13:21 GMT")));
        assert_ne!(Validators::new(at, 1234, "-br").etag, v.etag);
    }
}
