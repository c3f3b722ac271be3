//! `MediaTypes`: the content types whose responses are worth compressing (`--compress-types`).

/// A list of media types: `type/subtype`, `type/*` (any subtype), `type/*+suffix` (a
/// structured syntax suffix, as `application/*+json`) or `*/*`. Kept lowercase.
#[derive(Clone, Debug, Default)]
pub struct MediaTypes(Vec<Pattern>);

#[derive(Clone, Debug, PartialEq)]
enum Pattern {
    Exact(String),
    AnySubtype(String),
    Suffix(String, String),
    Any,
}

impl MediaTypes {
    /// Reads `--compress-types`' entries, or says which one is not a media type pattern.
    pub fn parse<S: AsRef<str>>(entries: &[S]) -> Result<MediaTypes, String> {
        entries
            .iter()
            .map(|entry| pattern(entry.as_ref()))
            .collect::<Result<_, _>>()
            .map(MediaTypes)
    }

    /// Whether a `Content-Type` value's media type (its parameters left aside) is listed.
    pub fn matches(&self, content_type: &[u8]) -> bool {
        let Ok(text) = std::str::from_utf8(content_type) else {
            return false;
        };
        let essence = text.split(';').next().unwrap_or("").trim();
        let Some((kind, subtype)) = essence.split_once('/') else {
            return false;
        };
        self.0.iter().any(|pattern| match pattern {
            Pattern::Exact(exact) => essence.eq_ignore_ascii_case(exact),
            Pattern::AnySubtype(listed) => kind.eq_ignore_ascii_case(listed),
            Pattern::Suffix(listed, suffix) => {
                kind.eq_ignore_ascii_case(listed)
                    && subtype.len() > suffix.len()
                    && subtype.as_bytes()[subtype.len() - suffix.len()..]
                        .eq_ignore_ascii_case(suffix.as_bytes())
            }
            Pattern::Any => true,
        })
    }
}

fn pattern(entry: &str) -> Result<Pattern, String> {
    let lower = entry.trim().to_ascii_lowercase();
    let token = |s: &str| {
        !s.is_empty()
            && s.bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"!#$&-^_.+".contains(&b))
    };
    let invalid = || {
        Err(format!(
            "{entry:?} is not a media type (type/subtype, type/*, type/*+suffix)"
        ))
    };
    let Some((kind, subtype)) = lower.split_once('/') else {
        return invalid();
    };
    if kind == "*" && subtype == "*" {
        return Ok(Pattern::Any);
    }
    if !token(kind) {
        return invalid();
    }
    if subtype == "*" {
        return Ok(Pattern::AnySubtype(kind.to_owned()));
    }
    if let Some(suffix) = subtype.strip_prefix("*+") {
        if token(suffix) {
            return Ok(Pattern::Suffix(kind.to_owned(), format!("+{suffix}")));
        }
        return invalid();
    }
    if !token(subtype) {
        return invalid();
    }
    Ok(Pattern::Exact(lower))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_pattern_matches_what_it_names() {
        let types =
            MediaTypes::parse(&["text/*", "application/json", "application/*+xml"]).unwrap();
        assert!(types.matches(b"text/html; charset=utf-8"));
        assert!(types.matches(b"TEXT/Event-Stream"));
        assert!(types.matches(b"application/json"));
        assert!(types.matches(b" Application/JSON ;charset=utf-8"));
        assert!(types.matches(b"application/atom+xml"));
        assert!(!types.matches(b"application/+xml"));
        assert!(!types.matches(b"application/problem+json"));
        assert!(!types.matches(b"image/png"));
        assert!(!types.matches(b"text"));
        assert!(!types.matches(b""));
        assert!(MediaTypes::parse(&["*/*"]).unwrap().matches(b"image/png"));
    }

    #[test]
    fn what_is_not_a_pattern_is_refused() {
        for bad in [
            "json", "text/", "/json", "*/json", "text/*+", "a b/c", "text/**",
        ] {
            assert!(MediaTypes::parse(&[bad]).is_err(), "{bad}");
        }
    }
}
