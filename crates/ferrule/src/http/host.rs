//! Whether a `Host` value is one RFC 9112 3.2 lets a server serve: `uri-host [":" port]` of
//! RFC 9110 7.2 and RFC 3986, with no userinfo, path or whitespace (empty is allowed: a target
//! without an authority has an empty Host).

/// Whether `value` is `uri-host [":" port]`.
pub(super) fn valid_host(value: &[u8]) -> bool {
    let (host, port) = match value.first() {
        // IP-literal: "[" ( IPv6address / IPvFuture ) "]"
        Some(b'[') => match value.iter().position(|&b| b == b']') {
            Some(end) => {
                let literal = &value[1..end];
                if literal.is_empty() || !literal.iter().all(|&b| literal_byte(b)) {
                    return false;
                }
                (&value[..=end], &value[end + 1..])
            }
            None => return false,
        },
        // IPv4address / reg-name, neither of which holds a colon.
        _ => match value.iter().rposition(|&b| b == b':') {
            Some(colon) => (&value[..colon], &value[colon..]),
            None => (value, &value[value.len()..]),
        },
    };
    let port_ok = match port.split_first() {
        None => true,
        Some((b':', digits)) => digits.iter().all(u8::is_ascii_digit),
        Some(_) => false,
    };
    let host_ok = host.first() == Some(&b'[') || host.iter().all(|&b| reg_name_byte(b));
    port_ok && host_ok
}

/// unreserved / pct-encoded / sub-delims, as reg-name takes them (the `%` without its digits
/// checked: a malformed escape is no smuggling vector).
fn reg_name_byte(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b"-._~%!$&'()*+,;=".contains(&b)
}

/// What an IPv6 address or an IPvFuture may hold between the brackets.
fn literal_byte(b: u8) -> bool {
    reg_name_byte(b) || b == b':'
}

#[cfg(test)]
mod tests {
    use super::valid_host;

    #[test]
    fn hosts_rfc_9110_allows() {
        for host in [
            "",
            "example.com",
            "example.com:8000",
            "example.com:",
            "127.0.0.1:80",
            "[::1]",
            "[::1]:8443",
            "[v1.fe80::a+en1]",
            "xn--bcher-kva.example",
            "under_score.example",
        ] {
            assert!(valid_host(host.as_bytes()), "{host:?}");
        }
    }

    #[test]
    fn hosts_rfc_9112_refuses() {
        for host in [
            "host invalid",
            "host/invalid",
            "user@host",
            "host:http",
            "host:80:80",
            "[::1",
            "[]",
            "[::1]x",
            "[::1]:8o",
            "host\tname",
            "host?q",
            "host#f",
        ] {
            assert!(!valid_host(host.as_bytes()), "{host:?}");
        }
    }
}
