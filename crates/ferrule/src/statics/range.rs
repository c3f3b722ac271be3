//! `ByteRange`: what a `Range` header asks of a file (RFC 9110, 14.2), single ranges only.

/// The part of a file to send.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum ByteRange {
    /// No range, one that does not parse, or several (which the whole file answers, as RFC
    /// 9110 allows): 200.
    Whole,
    /// `start..=end` of the file: 206.
    Part(u64, u64),
    /// No byte of the range is in the file: 416.
    Unsatisfiable,
}

impl ByteRange {
    /// The range `header` asks of a file of `size` bytes; an end past the file is clipped.
    pub fn of(header: Option<&[u8]>, size: u64) -> ByteRange {
        let Some(spec) = header
            .and_then(|h| std::str::from_utf8(h).ok())
            .map(str::trim)
            .and_then(|h| {
                h.get(..6)
                    .filter(|unit| unit.eq_ignore_ascii_case("bytes="))
                    .map(|_| &h[6..])
            })
        else {
            return ByteRange::Whole;
        };
        if spec.contains(',') {
            return ByteRange::Whole;
        }
        let Some((first, last)) = spec.trim().split_once('-') else {
            return ByteRange::Whole;
        };
        let number = |text: &str| -> Option<u64> {
            let text = text.trim();
            (!text.is_empty() && text.bytes().all(|b| b.is_ascii_digit()))
                .then(|| text.parse().ok())
                .flatten()
        };
        match (first.trim().is_empty(), number(first), number(last)) {
            // `-N`: the last N bytes.
            (true, _, Some(suffix)) => {
                if suffix == 0 || size == 0 {
                    ByteRange::Unsatisfiable
                } else {
                    ByteRange::Part(size.saturating_sub(suffix), size - 1)
                }
            }
            (false, Some(start), end) if last.trim().is_empty() || end.is_some() => {
                if end.is_some_and(|end| end < start) {
                    return ByteRange::Whole; // invalid: ignored
                }
                if start >= size {
                    return ByteRange::Unsatisfiable;
                }
                ByteRange::Part(start, end.map_or(size - 1, |end| end.min(size - 1)))
            }
            _ => ByteRange::Whole,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn of(header: &str, size: u64) -> ByteRange {
        ByteRange::of(Some(header.as_bytes()), size)
    }

    #[test]
    fn single_ranges_are_read_and_clipped() {
        assert_eq!(of("bytes=0-99", 1000), ByteRange::Part(0, 99));
        assert_eq!(of("bytes=900-", 1000), ByteRange::Part(900, 999));
        assert_eq!(of("bytes=-100", 1000), ByteRange::Part(900, 999));
        assert_eq!(of("bytes=-5000", 1000), ByteRange::Part(0, 999));
        assert_eq!(of("Bytes= 10 - 20 ", 1000), ByteRange::Part(10, 20));
        assert_eq!(of("bytes=990-5000", 1000), ByteRange::Part(990, 999));
    }

    #[test]
    fn what_cannot_be_served_is_416_and_what_does_not_parse_is_ignored() {
        assert_eq!(of("bytes=1000-", 1000), ByteRange::Unsatisfiable);
        assert_eq!(of("bytes=-0", 1000), ByteRange::Unsatisfiable);
        assert_eq!(of("bytes=0-", 0), ByteRange::Unsatisfiable);
        for ignored in [
            "bytes=5-1",
            "bytes=a-b",
            "bytes=0-1,5-6",
            "items=0-1",
            "bytes=",
            "bytes=-",
            "bytes=+1-2",
            "bytes=99999999999999999999-",
        ] {
            assert_eq!(of(ignored, 1000), ByteRange::Whole, "{ignored}");
        }
        assert_eq!(ByteRange::of(None, 10), ByteRange::Whole);
    }
}
