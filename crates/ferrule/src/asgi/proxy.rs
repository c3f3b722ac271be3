//! `--proxy-headers`: the client address and scheme taken from `X-Forwarded-For` and
//! `X-Forwarded-Proto` when the peer is a trusted proxy (`--forwarded-allow-ips`), as uvicorn
//! does. Done here rather than in a Python middleware because it runs on every request and
//! costs an extra coroutine frame and a dict of the headers there.

use std::net::IpAddr;

use http::{HeaderMap, HeaderName};

static X_FORWARDED_PROTO: HeaderName = HeaderName::from_static("x-forwarded-proto");
static X_FORWARDED_FOR: HeaderName = HeaderName::from_static("x-forwarded-for");

/// Which peers may set the forwarded headers (`Settings::forwarded` ignores them all when
/// `--no-proxy-headers` turns them off).
pub enum TrustedProxies {
    /// `--forwarded-allow-ips '*'`.
    All,
    Listed(Trusted),
}

/// `--forwarded-allow-ips` entries, read as uvicorn reads them: an IP address (matched however
/// it is written), a network (`10.0.0.0/8`, `fd00::/8`), or else a literal compared as written
/// (a Unix socket's peer name, say).
#[derive(Default)]
pub struct Trusted {
    /// The literals, and each address as Rust writes it (as the peer's address is written), so
    /// the usual peer is found by comparing a few bytes, without parsing it.
    literals: Vec<String>,
    addresses: Vec<IpAddr>,
    networks: Vec<Network>,
}

/// An IP network: its address and prefix length, host bits zero.
#[derive(Debug, PartialEq, Eq)]
struct Network {
    address: IpAddr,
    prefix: u8,
}

impl Network {
    /// `address/prefix` with no host bits set, as Python's `ip_network` (strict) accepts.
    fn parse(text: &str) -> Option<Self> {
        let (address, prefix) = text.split_once('/')?;
        let address: IpAddr = address.parse().ok()?;
        let prefix: u8 = prefix.parse().ok()?;
        let network = Network { address, prefix };
        let bits = match address {
            IpAddr::V4(_) => 32,
            IpAddr::V6(_) => 128,
        };
        (prefix <= bits && network.contains(address) && network.host_bits_zero()).then_some(network)
    }

    fn host_bits_zero(&self) -> bool {
        match self.address {
            IpAddr::V4(v4) => u32::from(v4) & !mask32(self.prefix) == 0,
            IpAddr::V6(v6) => u128::from(v6) & !mask128(self.prefix) == 0,
        }
    }

    fn contains(&self, address: IpAddr) -> bool {
        match (self.address, address) {
            (IpAddr::V4(net), IpAddr::V4(ip)) => {
                (u32::from(net) ^ u32::from(ip)) & mask32(self.prefix) == 0
            }
            (IpAddr::V6(net), IpAddr::V6(ip)) => {
                (u128::from(net) ^ u128::from(ip)) & mask128(self.prefix) == 0
            }
            _ => false,
        }
    }
}

fn mask32(prefix: u8) -> u32 {
    u32::MAX.checked_shl(32 - u32::from(prefix)).unwrap_or(0)
}

fn mask128(prefix: u8) -> u128 {
    u128::MAX.checked_shl(128 - u32::from(prefix)).unwrap_or(0)
}

impl Trusted {
    fn new(entries: Vec<String>) -> Self {
        let mut trusted = Trusted::default();
        for entry in entries {
            if entry.contains('/') {
                match Network::parse(&entry) {
                    Some(network) => trusted.networks.push(network),
                    None => trusted.literals.push(entry),
                }
            } else if let Ok(address) = entry.parse::<IpAddr>() {
                trusted.literals.push(address.to_string());
                trusted.addresses.push(address);
            } else {
                trusted.literals.push(entry);
            }
        }
        trusted
    }

    fn contains(&self, host: &str) -> bool {
        if self.literals.iter().any(|literal| literal == host) {
            return true;
        }
        if self.addresses.is_empty() && self.networks.is_empty() {
            return false;
        }
        host.parse::<IpAddr>().is_ok_and(|address| {
            self.addresses.contains(&address)
                || self
                    .networks
                    .iter()
                    .any(|network| network.contains(address))
        })
    }
}

/// What the forwarded headers change in the scope.
#[derive(Default, Debug, PartialEq, Eq)]
pub struct Forwarded {
    pub scheme: Option<&'static str>,
    /// The client's host and port (0 when the header gives none), as uvicorn reports them.
    pub client: Option<(String, u16)>,
}

impl TrustedProxies {
    /// `"*"` among the hosts trusts every peer.
    pub fn new(hosts: Vec<String>) -> Self {
        if hosts.iter().any(|h| h == "*") {
            TrustedProxies::All
        } else {
            TrustedProxies::Listed(Trusted::new(hosts))
        }
    }

    pub(crate) fn trusts(&self, host: Option<&str>) -> bool {
        match self {
            TrustedProxies::All => true,
            TrustedProxies::Listed(trusted) => host.is_some_and(|h| trusted.contains(h)),
        }
    }

    /// The scheme and client a trusted `peer` forwarded, if any. The last `X-Forwarded-Proto`
    /// line counts; the `X-Forwarded-For` lines are one list, in which the nearest untrusted
    /// hop is the client (the first one when every hop is trusted). An empty hop is no client.
    /// (A WebSocket scope maps the scheme to ws/wss itself: `ws::upgrade::websocket_scope`.)
    pub fn forwarded(&self, peer: Option<&str>, headers: &HeaderMap) -> Forwarded {
        let mut found = Forwarded::default();
        if !self.trusts(peer) {
            return found;
        }
        // One pass over the lines, cheaper than two lookups (each hashes its name).
        let mut last_proto = None;
        let mut lines: Vec<String> = Vec::new();
        for (name, value) in headers {
            if name == X_FORWARDED_PROTO {
                last_proto = Some(value);
            } else if name == X_FORWARDED_FOR {
                lines.push(latin1(value.as_bytes()));
            }
        }
        if let Some(proto) = last_proto {
            found.scheme = match latin1(proto.as_bytes())
                .trim()
                .to_ascii_lowercase()
                .as_str()
            {
                "http" => Some("http"),
                "https" => Some("https"),
                "ws" => Some("ws"),
                "wss" => Some("wss"),
                _ => None,
            };
        }
        if lines.is_empty() {
            return found;
        }
        let chain = lines.join(", ");
        let hops: Vec<(&str, u16)> = chain
            .split(',')
            .map(|hop| host_and_port(hop.trim()))
            .collect();
        let client = hops
            .iter()
            .rev()
            .find(|(host, _)| !self.trusts(Some(host)))
            .unwrap_or(&hops[0]);
        if !client.0.is_empty() {
            found.client = Some((client.0.to_owned(), client.1));
        }
        found
    }
}

/// A header value decoded as latin-1 (every byte a char).
fn latin1(bytes: &[u8]) -> String {
    bytes.iter().map(|&b| b as char).collect()
}

/// One `X-Forwarded-For` hop: `host`, `ipv4:port` or `[ipv6]:port`. Anything else is a host
/// with no port, kept as written so that it matches no trusted address by accident.
fn host_and_port(hop: &str) -> (&str, u16) {
    if let Some(rest) = hop.strip_prefix('[') {
        let Some((host, after)) = rest.split_once(']') else {
            return (hop, 0);
        };
        return match after.strip_prefix(':') {
            None if after.is_empty() => (host, 0),
            None => (hop, 0),
            Some(port) => (host, port.parse().unwrap_or(0)),
        };
    }
    match hop.split_once(':') {
        Some((host, port)) if !port.contains(':') => match port.parse() {
            Ok(port) => (host, port),
            Err(_) => (hop, 0),
        },
        _ => (hop, 0),
    }
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
        TrustedProxies::new(hosts.iter().map(|h| h.to_string()).collect())
    }

    #[test]
    fn untrusted_peer_changes_nothing() {
        let h = headers(&[
            ("x-forwarded-for", "1.2.3.4"),
            ("x-forwarded-proto", "https"),
        ]);
        let none = Forwarded::default();
        assert_eq!(
            trusted(&["10.0.0.1"]).forwarded(Some("127.0.0.1"), &h),
            none
        );
        assert_eq!(trusted(&["127.0.0.1"]).forwarded(None, &h), none);
    }

    #[test]
    fn nearest_untrusted_hop_is_the_client() {
        let h = headers(&[("x-forwarded-for", "203.0.113.7, 10.0.0.2 ,127.0.0.1")]);
        let proxies = trusted(&["127.0.0.1", "10.0.0.2"]);
        let got = proxies.forwarded(Some("127.0.0.1"), &h);
        assert_eq!(got.client, Some(("203.0.113.7".to_owned(), 0)));
        let all = trusted(&["*"]).forwarded(Some("9.9.9.9"), &h);
        assert_eq!(all.client, Some(("203.0.113.7".to_owned(), 0)));
    }

    #[test]
    fn scheme_is_checked_and_the_last_line_wins() {
        let proxies = trusted(&["127.0.0.1"]);
        let https = headers(&[("x-forwarded-proto", " HTTPS ")]);
        assert_eq!(
            proxies.forwarded(Some("127.0.0.1"), &https).scheme,
            Some("https")
        );
        let bogus = headers(&[("x-forwarded-proto", "gopher")]);
        assert_eq!(proxies.forwarded(Some("127.0.0.1"), &bogus).scheme, None);
        let last_wins = headers(&[
            ("x-forwarded-proto", "http"),
            ("x-forwarded-proto", "https"),
        ]);
        assert_eq!(
            proxies.forwarded(Some("127.0.0.1"), &last_wins).scheme,
            Some("https")
        );
    }

    #[test]
    fn networks_and_addresses_match_however_written() {
        let proxies = trusted(&["10.0.0.0/8", "0:0:0:0:0:0:0:1", "fd00::/8", "sock"]);
        for peer in ["10.200.3.4", "::1", "fd12::5", "sock"] {
            assert!(proxies.trusts(Some(peer)), "{peer} is trusted");
        }
        for peer in ["11.0.0.1", "::2", "fe00::1", "::ffff:10.0.0.1"] {
            assert!(!proxies.trusts(Some(peer)), "{peer} is not trusted");
        }
        // Host bits set: as Python's ip_network, no network (a literal that matches nothing).
        let sloppy = trusted(&["10.1.2.3/8"]);
        assert!(!sloppy.trusts(Some("10.1.2.3")) && !sloppy.trusts(Some("10.0.0.1")));
        assert!(trusted(&["0.0.0.0/0"]).trusts(Some("203.0.113.7")));
        assert!(trusted(&["::/0"]).trusts(Some("2001:db8::1")));
        assert!(!trusted(&["10.0.0.0/33"]).trusts(Some("10.0.0.1")));
    }

    #[test]
    fn forwarded_for_lines_are_one_list_and_hops_may_have_ports() {
        let h = headers(&[
            ("x-forwarded-for", "203.0.113.7:4711"),
            ("x-forwarded-for", "10.0.0.2"),
        ]);
        let proxies = trusted(&["127.0.0.1", "10.0.0.0/8"]);
        let got = proxies.forwarded(Some("127.0.0.1"), &h);
        assert_eq!(got.client, Some(("203.0.113.7".to_owned(), 4711)));
        let v6 = headers(&[("x-forwarded-for", "[2001:db8::7]:8080")]);
        let got = proxies.forwarded(Some("127.0.0.1"), &v6);
        assert_eq!(got.client, Some(("2001:db8::7".to_owned(), 8080)));
        let empty = headers(&[("x-forwarded-for", "")]);
        assert_eq!(proxies.forwarded(Some("127.0.0.1"), &empty).client, None);
        assert_eq!(host_and_port("::1"), ("::1", 0));
        assert_eq!(host_and_port("[::1"), ("[::1", 0));
        assert_eq!(host_and_port("1.2.3.4:x"), ("1.2.3.4:x", 0));
    }
}
