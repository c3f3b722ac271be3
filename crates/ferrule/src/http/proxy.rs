//! `--proxy-headers`: the client address and scheme taken from `X-Forwarded-For` and
//! `X-Forwarded-Proto` when the peer is a trusted proxy (`--forwarded-allow-ips`), as uvicorn
//! does. Done here rather than in a Python middleware because it runs on every request and
//! costs an extra coroutine frame and a dict of the headers there.

use http::{HeaderMap, HeaderName};

static X_FORWARDED_PROTO: HeaderName = HeaderName::from_static("x-forwarded-proto");
static X_FORWARDED_FOR: HeaderName = HeaderName::from_static("x-forwarded-for");

/// Which peers may set the forwarded headers.
pub enum TrustedProxies {
    /// `--no-proxy-headers`: the headers are ignored.
    Off,
    /// `--forwarded-allow-ips '*'`.
    All,
    /// A handful of addresses in practice: a scan compares fewer bytes than hashing one.
    Hosts(Vec<String>),
}

/// What the forwarded headers change in the scope.
#[derive(Default, Debug, PartialEq, Eq)]
pub struct Forwarded {
    pub scheme: Option<&'static str>,
    pub client: Option<String>,
}

impl TrustedProxies {
    /// `None` turns proxy headers off; `"*"` among the hosts trusts every peer.
    pub fn new(hosts: Option<Vec<String>>) -> Self {
        match hosts {
            None => TrustedProxies::Off,
            Some(hosts) if hosts.iter().any(|h| h == "*") => TrustedProxies::All,
            Some(hosts) => TrustedProxies::Hosts(hosts),
        }
    }

    fn trusts(&self, host: Option<&str>) -> bool {
        match self {
            TrustedProxies::Off => false,
            TrustedProxies::All => true,
            TrustedProxies::Hosts(hosts) => host.is_some_and(|h| hosts.iter().any(|t| t == h)),
        }
    }

    /// The scheme and client a trusted `peer` forwarded, if any. The last header line of each
    /// name counts; in `X-Forwarded-For` the nearest untrusted hop is the client (the first
    /// one when every hop is trusted).
    pub fn forwarded(&self, peer: Option<&str>, headers: &HeaderMap, websocket: bool) -> Forwarded {
        let mut found = Forwarded::default();
        if !self.trusts(peer) {
            return found;
        }
        if let Some(proto) = last_value(headers, &X_FORWARDED_PROTO) {
            found.scheme = match proto.trim().to_ascii_lowercase().as_str() {
                "http" | "ws" if websocket => Some("ws"),
                "https" | "wss" if websocket => Some("wss"),
                "http" => Some("http"),
                "https" => Some("https"),
                "ws" => Some("ws"),
                "wss" => Some("wss"),
                _ => None,
            };
        }
        if let Some(chain) = last_value(headers, &X_FORWARDED_FOR) {
            let hops: Vec<&str> = chain.split(',').map(str::trim).collect();
            let client = hops
                .iter()
                .rev()
                .find(|hop| !self.trusts(Some(hop)))
                .unwrap_or(&hops[0]);
            found.client = Some((*client).to_owned());
        }
        found
    }
}

/// The last line of header `name`, decoded as latin-1 (every byte a char).
fn last_value(headers: &HeaderMap, name: &HeaderName) -> Option<String> {
    let value = headers.get_all(name).iter().next_back()?;
    Some(value.as_bytes().iter().map(|&b| b as char).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(pairs: &[(&str, &str)]) -> HeaderMap {
        let mut map = HeaderMap::new();
        for (name, value) in pairs {
            map.append(
                http::HeaderName::from_bytes(name.as_bytes()).unwrap(),
                value.parse().unwrap(),
            );
        }
        map
    }

    fn trusted(hosts: &[&str]) -> TrustedProxies {
        TrustedProxies::new(Some(hosts.iter().map(|h| h.to_string()).collect()))
    }

    #[test]
    fn untrusted_peer_or_off_changes_nothing() {
        let h = headers(&[
            ("x-forwarded-for", "1.2.3.4"),
            ("x-forwarded-proto", "https"),
        ]);
        let none = Forwarded::default();
        assert_eq!(
            trusted(&["10.0.0.1"]).forwarded(Some("127.0.0.1"), &h, false),
            none
        );
        assert_eq!(
            TrustedProxies::new(None).forwarded(Some("1.1.1.1"), &h, false),
            none
        );
        assert_eq!(trusted(&["127.0.0.1"]).forwarded(None, &h, false), none);
    }

    #[test]
    fn nearest_untrusted_hop_is_the_client() {
        let h = headers(&[("x-forwarded-for", "203.0.113.7, 10.0.0.2 ,127.0.0.1")]);
        let proxies = trusted(&["127.0.0.1", "10.0.0.2"]);
        let got = proxies.forwarded(Some("127.0.0.1"), &h, false);
        assert_eq!(got.client.as_deref(), Some("203.0.113.7"));
        let all = trusted(&["*"]).forwarded(Some("9.9.9.9"), &h, false);
        assert_eq!(all.client.as_deref(), Some("203.0.113.7"));
    }

    #[test]
    fn scheme_is_checked_and_follows_the_protocol() {
        let proxies = trusted(&["127.0.0.1"]);
        let https = headers(&[("x-forwarded-proto", " HTTPS ")]);
        assert_eq!(
            proxies.forwarded(Some("127.0.0.1"), &https, false).scheme,
            Some("https")
        );
        assert_eq!(
            proxies.forwarded(Some("127.0.0.1"), &https, true).scheme,
            Some("wss")
        );
        let bogus = headers(&[("x-forwarded-proto", "gopher")]);
        assert_eq!(
            proxies.forwarded(Some("127.0.0.1"), &bogus, false).scheme,
            None
        );
        let last_wins = headers(&[
            ("x-forwarded-proto", "http"),
            ("x-forwarded-proto", "https"),
        ]);
        assert_eq!(
            proxies
                .forwarded(Some("127.0.0.1"), &last_wins, false)
                .scheme,
            Some("https")
        );
    }
}
