//! `Accepted`: what a request's `Accept-Encoding` lets the server send (RFC 9110, 12.5.3).

use http::header::ACCEPT_ENCODING;
use http::{HeaderMap, HeaderValue};

use super::coding::{Coding, Compression};

/// The coding chosen for a request's response, if any, and whether the client refused the
/// uncompressed form (`identity;q=0`, or `*;q=0` without naming identity).
#[derive(Clone, Copy, PartialEq, Eq, Debug, Default)]
pub struct Accepted {
    pub chosen: Option<Compression>,
    pub identity_refused: bool,
}

/// A weight in thousandths, as `qvalue` allows three decimals.
type Weight = u16;

impl Accepted {
    /// Chooses among `offered` by a request's `Accept-Encoding` fields (`negotiate`).
    pub fn from_request(request: &HeaderMap, offered: &[Compression]) -> Accepted {
        let lines = request
            .get_all(ACCEPT_ENCODING)
            .iter()
            .map(HeaderValue::as_bytes);
        Accepted::negotiate(lines, offered)
    }

    /// Chooses among `offered` (the server's order breaks ties) by the request's
    /// `Accept-Encoding` field lines. No field: the response goes uncompressed, as clients
    /// that send none may not decode. An element whose weight is not a valid `qvalue` is
    /// ignored, so a malformed header never makes a response fail.
    pub fn negotiate<'a>(
        lines: impl Iterator<Item = &'a [u8]>,
        offered: &[Compression],
    ) -> Accepted {
        let mut weights: [Option<Weight>; Coding::ALL.len()] = [None; Coding::ALL.len()];
        let mut any = None;
        let mut identity = None;
        for line in lines {
            for element in line.split(|&b| b == b',') {
                let Some((name, weight)) = element_weight(element) else {
                    continue;
                };
                let slot = if name.eq_ignore_ascii_case(b"*") {
                    &mut any
                } else if name.eq_ignore_ascii_case(b"identity") {
                    &mut identity
                } else if let Some(coding) = coding_named(name) {
                    &mut weights[coding as usize]
                } else {
                    continue;
                };
                // Named twice: the higher weight stands.
                *slot = Some(slot.map_or(weight, |w: Weight| w.max(weight)));
            }
        }
        let mut chosen: Option<(Compression, Weight)> = None;
        for &compression in offered {
            let weight = weights[compression.coding as usize].or(any).unwrap_or(0);
            if weight > 0 && chosen.is_none_or(|(_, best)| weight > best) {
                chosen = Some((compression, weight));
            }
        }
        Accepted {
            chosen: chosen.map(|(compression, _)| compression),
            identity_refused: identity.or(any) == Some(0),
        }
    }
}

/// `x-gzip` is gzip (RFC 9110, 8.4.1.3); names are case-insensitive.
fn coding_named(name: &[u8]) -> Option<Coding> {
    if name.eq_ignore_ascii_case(b"x-gzip") {
        return Some(Coding::Gzip);
    }
    Coding::ALL
        .into_iter()
        .find(|coding| name.eq_ignore_ascii_case(coding.name().as_bytes()))
}

/// One list element, `name` or `name;q=0.5` (with optional spaces): its name and weight, or
/// `None` for an empty element or a weight that is not a `qvalue`.
fn element_weight(element: &[u8]) -> Option<(&[u8], Weight)> {
    let mut parts = element.split(|&b| b == b';');
    let name = parts.next().map(<[u8]>::trim_ascii)?;
    if name.is_empty() {
        return None;
    }
    let mut weight = 1000;
    for param in parts {
        let param = param.trim_ascii();
        // A parameter other than the weight (none are defined for codings) is passed over.
        let Some(value) = param
            .split_first_chunk::<2>()
            .filter(|(key, _)| key.eq_ignore_ascii_case(b"q="))
            .map(|(_, value)| value)
        else {
            continue;
        };
        weight = qvalue(value.trim_ascii())?;
    }
    Some((name, weight))
}

/// `qvalue = ( "0" [ "." 0*3DIGIT ] ) / ( "1" [ "." 0*3("0") ] )`, in thousandths.
fn qvalue(text: &[u8]) -> Option<Weight> {
    let (&first, rest) = text.split_first()?;
    let decimals = match rest {
        [] => &[][..],
        [b'.', decimals @ ..] if decimals.len() <= 3 => decimals,
        _ => return None,
    };
    if !decimals.iter().all(u8::is_ascii_digit) {
        return None;
    }
    let mut thousandths: Weight = 0;
    for i in 0..3 {
        let digit = decimals.get(i).map_or(0, |d| Weight::from(d - b'0'));
        thousandths = thousandths * 10 + digit;
    }
    match first {
        b'0' => Some(thousandths),
        b'1' if thousandths == 0 => Some(1000),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const ALL: [Compression; 3] = [
        Compression {
            coding: Coding::Zstd,
            level: 3,
        },
        Compression {
            coding: Coding::Br,
            level: 4,
        },
        Compression {
            coding: Coding::Gzip,
            level: 6,
        },
    ];

    fn chosen(header: &str, offered: &[Compression]) -> Option<&'static str> {
        let lines = [header.as_bytes()];
        let accepted = Accepted::negotiate(lines.into_iter(), offered);
        accepted.chosen.map(|c| c.coding.name())
    }

    #[test]
    fn the_heaviest_coding_wins_and_the_servers_order_breaks_ties() {
        assert_eq!(chosen("gzip, br", &ALL), Some("br"));
        assert_eq!(chosen("gzip;q=1, br;q=0.9", &ALL), Some("gzip"));
        assert_eq!(chosen("gzip, zstd;q=0.5, br;q=0.999", &ALL), Some("gzip"));
        assert_eq!(chosen("*", &ALL), Some("zstd"));
        assert_eq!(chosen("*;q=0.1, gzip;q=0.5", &ALL), Some("gzip"));
        assert_eq!(chosen("X-GZIP", &ALL), Some("gzip"));
        assert_eq!(chosen("Br ; Q=1.0", &ALL), Some("br"));
    }

    #[test]
    fn a_refused_or_unknown_coding_is_never_chosen() {
        assert_eq!(chosen("gzip;q=0", &ALL), None);
        assert_eq!(chosen("*, zstd;q=0, br;q=0", &ALL), Some("gzip"));
        assert_eq!(chosen("deflate, compress", &ALL), None);
        assert_eq!(chosen("", &ALL), None);
        assert_eq!(chosen("br", &ALL[2..]), None);
    }

    #[test]
    fn a_malformed_weight_drops_its_element_only() {
        assert_eq!(chosen("br;q=abc, gzip", &ALL), Some("gzip"));
        assert_eq!(chosen("br;q=2, gzip;q=0.5", &ALL), Some("gzip"));
        assert_eq!(chosen("br;q=0.0001, gzip;q=", &ALL), None);
        assert_eq!(chosen("br;q=1.5", &ALL), None);
        assert_eq!(chosen(",,;,gzip;;", &ALL), Some("gzip"));
    }

    #[test]
    fn identity_is_refused_by_name_or_by_star() {
        let refused = |header: &str| {
            let lines = [header.as_bytes()];
            Accepted::negotiate(lines.into_iter(), &ALL).identity_refused
        };
        assert!(refused("gzip, identity;q=0"));
        assert!(refused("gzip, *;q=0"));
        assert!(!refused("gzip, *;q=0, identity"));
        assert!(!refused("gzip"));
    }

    #[test]
    fn qvalues_parse_as_the_grammar_says() {
        assert_eq!(qvalue(b"0"), Some(0));
        assert_eq!(qvalue(b"0.5"), Some(500));
        assert_eq!(qvalue(b"0.125"), Some(125));
        assert_eq!(qvalue(b"1.000"), Some(1000));
        assert_eq!(qvalue(b"1."), Some(1000));
        assert_eq!(qvalue(b"1.001"), None);
        assert_eq!(qvalue(b"0.1234"), None);
        assert_eq!(qvalue(b".5"), None);
        assert_eq!(qvalue(b""), None);
    }
}
