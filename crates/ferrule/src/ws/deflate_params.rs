//! `DeflateParams`: the permessage-deflate parameters agreed with a client (RFC 7692 7.1), and
//! choosing them from the offers in its `Sec-WebSocket-Extensions` headers.

use http::header::GetAll;
use http::HeaderValue;

/// The largest LZ77 window the server takes for either direction, in bits: 4 KiB, as the
/// `websockets` library has. A 15-bit window costs 112 KiB more per compressor and 28 KiB more
/// per decompressor, and compresses 1 KiB JSON-like messages to 16.1% instead of 17.2%.
pub const MAX_WINDOW_BITS: u8 = 12;

/// What the server agreed to in its 101 response.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DeflateParams {
    /// The server starts a fresh compression context for each message it sends.
    pub server_no_context_takeover: bool,
    /// The client starts a fresh compression context for each message it sends.
    pub client_no_context_takeover: bool,
    /// The LZ77 window the server's compressor may use, in bits (9 to 15).
    pub server_max_window_bits: u8,
    /// The client's window, when the server answered with one (only if the client offered
    /// `client_max_window_bits`); without it the client may use 15 bits.
    pub client_max_window_bits: Option<u8>,
}

impl DeflateParams {
    /// The `Sec-WebSocket-Extensions` value of the response. It always names
    /// `server_max_window_bits`, which 7.1.2.1 allows even when the offer had none, and
    /// `client_max_window_bits` only when the offer had it, as 7.1.2.2 requires.
    pub fn response_header(&self) -> HeaderValue {
        let mut value = String::from("permessage-deflate");
        if self.server_no_context_takeover {
            value.push_str("; server_no_context_takeover");
        }
        if self.client_no_context_takeover {
            value.push_str("; client_no_context_takeover");
        }
        value.push_str(&format!(
            "; server_max_window_bits={}",
            self.server_max_window_bits
        ));
        if let Some(bits) = self.client_max_window_bits {
            value.push_str(&format!("; client_max_window_bits={bits}"));
        }
        HeaderValue::from_str(&value).expect("ASCII is a header value")
    }
}

/// The first permessage-deflate offer the server can honour, with its response header; `None`
/// declines the extension (the handshake goes on without it).
pub fn negotiate(headers: GetAll<'_, HeaderValue>) -> Option<(DeflateParams, HeaderValue)> {
    headers
        .iter()
        .filter_map(|value| value.to_str().ok())
        .flat_map(split_outside_quotes::<','>)
        .find_map(|offer| {
            let mut parts = split_outside_quotes::<';'>(offer).into_iter();
            let name = parts.next()?.trim();
            if !name.eq_ignore_ascii_case("permessage-deflate") {
                return None;
            }
            accept_offer(parts)
        })
}

/// The agreement for one offer's parameters, or `None` if any of them cannot be honoured: an
/// unknown or repeated parameter, a bad value, or a server window of 8 bits (zlib's raw deflate
/// needs at least 9; 7.1.2.1 lets the server decline instead).
fn accept_offer<'a>(params: impl Iterator<Item = &'a str>) -> Option<(DeflateParams, HeaderValue)> {
    let mut server_no_context_takeover = false;
    let mut client_no_context_takeover = false;
    let mut server_bits: Option<u8> = None;
    // Offered without a value: Some(None).
    let mut client_bits: Option<Option<u8>> = None;
    for param in params {
        let (name, value) = match param.split_once('=') {
            Some((name, value)) => (name.trim(), Some(unquote(value.trim())?)),
            None => (param.trim(), None),
        };
        match (name.to_ascii_lowercase().as_str(), value) {
            ("server_no_context_takeover", None) if !server_no_context_takeover => {
                server_no_context_takeover = true;
            }
            ("client_no_context_takeover", None) if !client_no_context_takeover => {
                client_no_context_takeover = true;
            }
            ("server_max_window_bits", Some(value)) if server_bits.is_none() => {
                server_bits = Some(window_bits(value).filter(|&bits| bits >= 9)?);
            }
            ("client_max_window_bits", value) if client_bits.is_none() => {
                client_bits = Some(match value {
                    Some(value) => Some(window_bits(value)?),
                    None => None,
                });
            }
            _ => return None,
        }
    }
    let params = DeflateParams {
        server_no_context_takeover,
        client_no_context_takeover,
        server_max_window_bits: server_bits.unwrap_or(15).min(MAX_WINDOW_BITS),
        // Offered, with or without a value: the server may cap the client's window.
        client_max_window_bits: client_bits.map(|bits| bits.unwrap_or(15).min(MAX_WINDOW_BITS)),
    };
    let header = params.response_header();
    Some((params, header))
}

/// A window size as 7.1.2 writes it: a decimal integer from 8 to 15, no leading zeros.
fn window_bits(value: &str) -> Option<u8> {
    let valid =
        !value.is_empty() && value.bytes().all(|b| b.is_ascii_digit()) && !value.starts_with('0');
    let bits: u8 = value.parse().ok().filter(|_| valid)?;
    (8..=15).contains(&bits).then_some(bits)
}

/// A parameter value as a token or a quoted string (RFC 6455 9.1); `None` if the quotes do not
/// pair up.
fn unquote(value: &str) -> Option<&str> {
    match value.strip_prefix('"') {
        Some(rest) => rest.strip_suffix('"').filter(|inner| !inner.contains('"')),
        None => (!value.contains('"')).then_some(value),
    }
}

/// `text` split at each `SEP` outside double quotes.
fn split_outside_quotes<const SEP: char>(text: &str) -> Vec<&str> {
    let mut parts = Vec::new();
    let mut quoted = false;
    let mut start = 0;
    for (at, c) in text.char_indices() {
        match c {
            '"' => quoted = !quoted,
            c if c == SEP && !quoted => {
                parts.push(&text[start..at]);
                start = at + 1;
            }
            _ => {}
        }
    }
    parts.push(&text[start..]);
    parts
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::HeaderMap;

    fn answer(offers: &[&str]) -> Option<String> {
        let mut headers = HeaderMap::new();
        for offer in offers {
            headers.append(
                http::header::SEC_WEBSOCKET_EXTENSIONS,
                HeaderValue::from_str(offer).unwrap(),
            );
        }
        negotiate(headers.get_all(http::header::SEC_WEBSOCKET_EXTENSIONS))
            .map(|(_, header)| header.to_str().unwrap().to_owned())
    }

    #[test]
    fn accepts_the_first_offer_it_can_honour() {
        assert_eq!(
            answer(&["permessage-deflate"]).as_deref(),
            Some("permessage-deflate; server_max_window_bits=12")
        );
        assert_eq!(
            answer(&["permessage-deflate; client_max_window_bits"]).as_deref(),
            Some("permessage-deflate; server_max_window_bits=12; client_max_window_bits=12")
        );
        assert_eq!(
            answer(&["permessage-deflate; server_max_window_bits=15; client_max_window_bits=8"])
                .as_deref(),
            Some("permessage-deflate; server_max_window_bits=12; client_max_window_bits=8")
        );
        assert_eq!(
            answer(&[
                "x-webkit-deflate-frame, permessage-deflate; server_max_window_bits=8, \
                 permessage-deflate; server_max_window_bits=\"10\"; client_no_context_takeover"
            ])
            .as_deref(),
            Some("permessage-deflate; client_no_context_takeover; server_max_window_bits=10")
        );
        assert_eq!(
            answer(&[
                "foo",
                "permessage-deflate;server_no_context_takeover;client_max_window_bits=9"
            ])
            .as_deref(),
            Some(
                "permessage-deflate; server_no_context_takeover; server_max_window_bits=12; \
                 client_max_window_bits=9"
            )
        );
    }

    #[test]
    fn declines_offers_it_cannot_honour() {
        for offer in [
            "permessage-deflate; server_max_window_bits",
            "permessage-deflate; server_max_window_bits=16",
            "permessage-deflate; server_max_window_bits=010",
            "permessage-deflate; client_max_window_bits=7",
            "permessage-deflate; server_no_context_takeover=1",
            "permessage-deflate; server_no_context_takeover; server_no_context_takeover",
            "permessage-deflate; mystery",
            "permessage-deflate; client_max_window_bits=\"10",
            "deflate-frame",
        ] {
            assert_eq!(answer(&[offer]), None, "{offer}");
        }
    }
}
