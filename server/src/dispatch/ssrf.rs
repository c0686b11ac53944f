//! Which addresses a destination may make us call (docs §2.11): the blocked
//! networks (private, loopback, link-local, CGNAT, multicast, reserved; IPv4 and
//! IPv6, including IPv4 embedded in IPv6), the operator's allow list, a reqwest
//! resolver that checks every resolved address before we connect (no DNS-rebinding
//! gap), and the check of IP-literal URLs, which reqwest never resolves.

use std::error::Error as StdError;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::sync::Arc;

use ipnet::IpNet;
use reqwest::dns::{Addrs, Name, Resolve, Resolving};

/// The operator's allow list (setting `allow_networks`): networks that may be called
/// even though they are blocked by default, e.g. a self-hosted install's LAN or a
/// test's loopback receiver. The default allows nothing extra.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct NetworkPolicy {
    allow: Vec<IpNet>,
    /// Whole URLs that may be called though their address is blocked: the demo
    /// receiver's (docs D17), exactly as written, with an IP-literal host.
    exact: Vec<url::Url>,
}

/// An address we refuse to call, and which blocked network it is in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("address {ip} is in {reason}")]
pub struct Blocked {
    pub ip: IpAddr,
    /// A phrase naming the network, e.g. "a private network (10.0.0.0/8)".
    pub reason: &'static str,
}

/// The error [`GuardedResolver`] fails with when a name resolves to a blocked address.
/// reqwest wraps it; find it again with [`find_blocked`] (or by walking `source()`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct BlockedAddress(pub Blocked);

/// Why a destination URL may not be called.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum UrlRejected {
    /// Not an http(s) URL with a host.
    #[error("{0}")]
    Invalid(String),
    /// The host is an IP literal in a blocked network.
    #[error(transparent)]
    Blocked(#[from] Blocked),
}

impl NetworkPolicy {
    /// Reads a comma-separated list of CIDRs (`"10.0.0.0/8, ::1/128"`); a bare IP means
    /// that address alone; an empty string (or empty entries) allow nothing.
    /// A bad entry is an error naming it.
    pub fn parse(allow_networks: &str) -> Result<Self, String> {
        let allow = allow_networks
            .split(',')
            .map(str::trim)
            .filter(|entry| !entry.is_empty())
            .map(|entry| {
                entry
                    .parse::<IpNet>()
                    .map(|net| net.trunc())
                    .or_else(|_| entry.parse::<IpAddr>().map(IpNet::from))
                    .map_err(|_| {
                        format!(
                            "invalid network {entry:?} in the allow list; \
                             expected a CIDR like 10.0.0.0/8 or an IP address"
                        )
                    })
            })
            .collect::<Result<Vec<_>, _>>()?;
        Ok(NetworkPolicy {
            allow,
            exact: Vec::new(),
        })
    }

    /// The policy that also lets exactly `urls` be called (scheme, IP-literal host,
    /// port, path and query as written; nothing else at that address): the built-in
    /// demo receiver (docs D17). A URL with a host name is refused, since a name could
    /// later resolve elsewhere.
    pub fn with_exact_urls(mut self, urls: Vec<url::Url>) -> Result<Self, String> {
        for url in &urls {
            if !matches!(url.host(), Some(url::Host::Ipv4(_) | url::Host::Ipv6(_))) {
                return Err(format!("{url} does not name its host by IP address"));
            }
        }
        self.exact = urls;
        Ok(self)
    }

    /// Whether `url` is one of the exactly allowed URLs.
    pub fn allows_exactly(&self, url: &url::Url) -> bool {
        self.exact.iter().any(|allowed| allowed == url)
    }

    /// The networks the operator opened.
    pub fn allowed(&self) -> &[IpNet] {
        &self.allow
    }

    /// Whether we may connect to `ip`: allowed networks pass, then the blocked ranges refuse.
    ///
    /// IPv4 embedded in IPv6 (mapped `::ffff:a.b.c.d`, NAT64 `64:ff9b::/96`, 6to4
    /// `2002::/16`) is checked by the IPv4 rules; the allow list applies to the mapped
    /// form's IPv4 too, since that is the same host.
    pub fn check(&self, ip: IpAddr) -> Result<(), Blocked> {
        if self.allows(ip) {
            return Ok(());
        }
        let reason = match ip {
            IpAddr::V4(v4) => blocked_v4(v4),
            IpAddr::V6(v6) => match ipv4_mapped(v6) {
                Some(v4) if self.allows(IpAddr::V4(v4)) => None,
                Some(v4) => blocked_v4(v4),
                None => blocked_v6(v6),
            },
        };
        match reason {
            Some(reason) => Err(Blocked { ip, reason }),
            None => Ok(()),
        }
    }

    fn allows(&self, ip: IpAddr) -> bool {
        self.allow.iter().any(|net| net.contains(&ip))
    }
}

/// Finds the [`Blocked`] address behind an error, however deeply reqwest wrapped it.
pub fn find_blocked<'a>(err: &'a (dyn StdError + 'static)) -> Option<&'a Blocked> {
    let mut current = Some(err);
    while let Some(e) = current {
        if let Some(BlockedAddress(blocked)) = e.downcast_ref::<BlockedAddress>() {
            return Some(blocked);
        }
        if let Some(blocked) = e.downcast_ref::<Blocked>() {
            return Some(blocked);
        }
        current = e.source();
    }
    None
}

/// Checks a destination URL before it is used: only http(s) with a host, and an
/// IP-literal host (reqwest connects to those without asking the resolver) must not
/// be blocked. Host names are left to [`GuardedResolver`].
pub fn check_url(url: &url::Url, policy: &NetworkPolicy) -> Result<(), UrlRejected> {
    if !matches!(url.scheme(), "http" | "https") {
        return Err(UrlRejected::Invalid(format!(
            "only http and https URLs can be called, not {}:",
            url.scheme()
        )));
    }
    if policy.allows_exactly(url) {
        return Ok(());
    }
    let ip = match url.host() {
        None => return Err(UrlRejected::Invalid("the URL has no host".to_owned())),
        Some(url::Host::Ipv4(v4)) => IpAddr::V4(v4),
        Some(url::Host::Ipv6(v6)) => IpAddr::V6(v6),
        Some(url::Host::Domain(name)) => match name.trim_end_matches('.').parse::<IpAddr>() {
            Ok(ip) => ip,
            Err(_) => return Ok(()),
        },
    };
    policy.check(ip)?;
    Ok(())
}

/// A reqwest DNS resolver that resolves with the system resolver and refuses the
/// whole name when any of its addresses is blocked; otherwise it hands reqwest exactly
/// the addresses it checked, so a second lookup cannot swap in another (DNS rebinding).
///
/// Failures: a lookup failure is the `io::Error` from the system resolver (a DNS
/// failure); a blocked address is a [`BlockedAddress`].
#[derive(Debug, Clone)]
pub struct GuardedResolver {
    policy: Arc<NetworkPolicy>,
}

impl GuardedResolver {
    pub fn new(policy: Arc<NetworkPolicy>) -> Self {
        GuardedResolver { policy }
    }
}

impl Resolve for GuardedResolver {
    fn resolve(&self, name: Name) -> Resolving {
        let policy = Arc::clone(&self.policy);
        let host = name.as_str().to_owned();
        Box::pin(async move {
            let addrs: Vec<SocketAddr> =
                tokio::net::lookup_host((host.as_str(), 0)).await?.collect();
            if addrs.is_empty() {
                return Err(std::io::Error::new(
                    std::io::ErrorKind::NotFound,
                    "the name resolved to no addresses",
                )
                .into());
            }
            for addr in &addrs {
                policy.check(addr.ip()).map_err(BlockedAddress)?;
            }
            let addrs: Addrs = Box::new(addrs.into_iter());
            Ok(addrs)
        })
    }
}

/// A blocked IPv4 network.
struct Net4 {
    net: Ipv4Addr,
    prefix: u32,
    reason: &'static str,
}

/// A blocked IPv6 network.
struct Net6 {
    net: Ipv6Addr,
    prefix: u32,
    reason: &'static str,
}

const fn net4(net: Ipv4Addr, prefix: u32, reason: &'static str) -> Net4 {
    Net4 {
        net,
        prefix,
        reason,
    }
}

const fn net6(net: Ipv6Addr, prefix: u32, reason: &'static str) -> Net6 {
    Net6 {
        net,
        prefix,
        reason,
    }
}

#[rustfmt::skip]
const BLOCKED_V4: &[Net4] = &[
    net4(Ipv4Addr::new(0, 0, 0, 0), 8, "the \"this network\" range (0.0.0.0/8)"),
    net4(Ipv4Addr::new(10, 0, 0, 0), 8, "a private network (10.0.0.0/8)"),
    net4(Ipv4Addr::new(100, 64, 0, 0), 10, "the carrier-grade NAT range (100.64.0.0/10)"),
    net4(Ipv4Addr::new(127, 0, 0, 0), 8, "the loopback network (127.0.0.0/8)"),
    net4(Ipv4Addr::new(169, 254, 0, 0), 16, "the link-local network (169.254.0.0/16)"),
    net4(Ipv4Addr::new(172, 16, 0, 0), 12, "a private network (172.16.0.0/12)"),
    net4(Ipv4Addr::new(192, 0, 0, 0), 24, "the IETF protocol assignments range (192.0.0.0/24)"),
    net4(Ipv4Addr::new(192, 0, 2, 0), 24, "a documentation range (192.0.2.0/24)"),
    net4(Ipv4Addr::new(192, 88, 99, 0), 24, "the 6to4 relay anycast range (192.88.99.0/24)"),
    net4(Ipv4Addr::new(192, 168, 0, 0), 16, "a private network (192.168.0.0/16)"),
    net4(Ipv4Addr::new(198, 18, 0, 0), 15, "the benchmarking range (198.18.0.0/15)"),
    net4(Ipv4Addr::new(198, 51, 100, 0), 24, "a documentation range (198.51.100.0/24)"),
    net4(Ipv4Addr::new(203, 0, 113, 0), 24, "a documentation range (203.0.113.0/24)"),
    net4(Ipv4Addr::new(224, 0, 0, 0), 4, "the multicast range (224.0.0.0/4)"),
    net4(Ipv4Addr::new(240, 0, 0, 0), 4, "the reserved range (240.0.0.0/4)"),
];

/// Checked in order: the first match names the range. The forms that embed an IPv4
/// address (mapped, NAT64, 6to4) are handled before this table.
#[rustfmt::skip]
const BLOCKED_V6: &[Net6] = &[
    net6(Ipv6Addr::UNSPECIFIED, 128, "the unspecified address (::/128)"),
    net6(Ipv6Addr::LOCALHOST, 128, "the loopback address (::1/128)"),
    net6(Ipv6Addr::new(0, 0, 0, 0, 0, 0, 0, 0), 96, "the deprecated IPv4-compatible range (::/96)"),
    net6(Ipv6Addr::new(0x64, 0xff9b, 1, 0, 0, 0, 0, 0), 48, "the local-use NAT64 range (64:ff9b:1::/48)"),
    net6(Ipv6Addr::new(0x100, 0, 0, 0, 0, 0, 0, 0), 64, "the discard range (100::/64)"),
    net6(Ipv6Addr::new(0x2001, 0, 0, 0, 0, 0, 0, 0), 32, "the Teredo range (2001::/32)"),
    net6(Ipv6Addr::new(0x2001, 0, 0, 0, 0, 0, 0, 0), 23, "the IETF protocol assignments range (2001::/23)"),
    net6(Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 0, 0), 32, "a documentation range (2001:db8::/32)"),
    net6(Ipv6Addr::new(0xfc00, 0, 0, 0, 0, 0, 0, 0), 7, "the unique local range (fc00::/7)"),
    net6(Ipv6Addr::new(0xfe80, 0, 0, 0, 0, 0, 0, 0), 10, "the link-local range (fe80::/10)"),
    net6(Ipv6Addr::new(0xfec0, 0, 0, 0, 0, 0, 0, 0), 10, "the deprecated site-local range (fec0::/10)"),
    net6(Ipv6Addr::new(0xff00, 0, 0, 0, 0, 0, 0, 0), 8, "the multicast range (ff00::/8)"),
];

fn blocked_v4(ip: Ipv4Addr) -> Option<&'static str> {
    let bits = u32::from(ip);
    BLOCKED_V4
        .iter()
        .find(|n| {
            let mask = u32::MAX.checked_shl(32 - n.prefix).unwrap_or(0);
            bits & mask == u32::from(n.net)
        })
        .map(|n| n.reason)
}

fn blocked_v6(ip: Ipv6Addr) -> Option<&'static str> {
    if let Some(v4) = nat64(ip).or_else(|| six_to_four(ip)) {
        return blocked_v4(v4);
    }
    let bits = u128::from(ip);
    BLOCKED_V6
        .iter()
        .find(|n| {
            let mask = u128::MAX.checked_shl(128 - n.prefix).unwrap_or(0);
            bits & mask == u128::from(n.net)
        })
        .map(|n| n.reason)
}

/// `::ffff:a.b.c.d`
fn ipv4_mapped(ip: Ipv6Addr) -> Option<Ipv4Addr> {
    match ip.segments() {
        [0, 0, 0, 0, 0, 0xffff, _, _] => Some(low_v4(ip)),
        _ => None,
    }
}

/// `64:ff9b::a.b.c.d` (RFC 6052 well-known prefix)
fn nat64(ip: Ipv6Addr) -> Option<Ipv4Addr> {
    match ip.segments() {
        [0x64, 0xff9b, 0, 0, 0, 0, _, _] => Some(low_v4(ip)),
        _ => None,
    }
}

/// `2002:aabb:ccdd::/48` carries a.b.c.d in bits 16..48 (RFC 3056).
fn six_to_four(ip: Ipv6Addr) -> Option<Ipv4Addr> {
    match ip.segments() {
        [0x2002, high, low, ..] => Some(Ipv4Addr::from((u32::from(high) << 16) | u32::from(low))),
        _ => None,
    }
}

fn low_v4(ip: Ipv6Addr) -> Ipv4Addr {
    Ipv4Addr::from(u128::from(ip) as u32)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_exactly_allowed_url_passes_and_nothing_else_at_its_address_does() {
        let demo = url::Url::parse("http://127.0.0.1:3000/_demo/receiver/healthy").unwrap();
        let policy = none().with_exact_urls(vec![demo.clone()]).unwrap();
        assert_eq!(check_url(&demo, &policy), Ok(()));
        for other in [
            "http://127.0.0.1:3000/_demo/receiver/healthy?x=1",
            "http://127.0.0.1:3000/_demo/receiver/other",
            "http://127.0.0.1:3000/_demo/receiver/healthy/",
            "http://127.0.0.1:3000/v1/projects",
            "http://127.0.0.1:3001/_demo/receiver/healthy",
            "https://127.0.0.1:3000/_demo/receiver/healthy",
            "http://127.0.0.2:3000/_demo/receiver/healthy",
            "http://[::1]:3000/_demo/receiver/healthy",
        ] {
            let url = url::Url::parse(other).unwrap();
            assert!(
                matches!(check_url(&url, &policy), Err(UrlRejected::Blocked(_))),
                "{other}"
            );
        }
        let named = url::Url::parse("http://localhost:3000/_demo/receiver/healthy").unwrap();
        assert!(
            none().with_exact_urls(vec![named]).is_err(),
            "a host name could resolve elsewhere"
        );
    }

    fn none() -> NetworkPolicy {
        NetworkPolicy::default()
    }

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    fn assert_blocked(policy: &NetworkPolicy, addr: &str, range: &str) {
        match policy.check(ip(addr)) {
            Err(b) => assert!(
                b.reason.contains(range),
                "{addr}: {:?} is not {range}",
                b.reason
            ),
            Ok(()) => panic!("{addr} should be blocked ({range})"),
        }
    }

    fn assert_allowed(policy: &NetworkPolicy, addr: &str) {
        assert_eq!(policy.check(ip(addr)), Ok(()), "{addr} should be allowed");
    }

    #[test]
    fn every_blocked_ipv4_range_blocks_its_edges_and_not_its_neighbours() {
        #[rustfmt::skip]
        let cases = [
            ("0.0.0.0", "0.255.255.255", "0.0.0.0/8", None, Some("1.0.0.0")),
            ("10.0.0.0", "10.255.255.255", "10.0.0.0/8", Some("9.255.255.255"), Some("11.0.0.0")),
            ("100.64.0.0", "100.127.255.255", "100.64.0.0/10", Some("100.63.255.255"), Some("100.128.0.0")),
            ("127.0.0.0", "127.255.255.255", "127.0.0.0/8", Some("126.255.255.255"), Some("128.0.0.0")),
            ("169.254.0.0", "169.254.255.255", "169.254.0.0/16", Some("169.253.255.255"), Some("169.255.0.0")),
            ("172.16.0.0", "172.31.255.255", "172.16.0.0/12", Some("172.15.255.255"), Some("172.32.0.0")),
            ("192.0.0.0", "192.0.0.255", "192.0.0.0/24", Some("191.255.255.255"), Some("192.0.1.0")),
            ("192.0.2.0", "192.0.2.255", "192.0.2.0/24", Some("192.0.1.255"), Some("192.0.3.0")),
            ("192.88.99.0", "192.88.99.255", "192.88.99.0/24", Some("192.88.98.255"), Some("192.88.100.0")),
            ("192.168.0.0", "192.168.255.255", "192.168.0.0/16", Some("192.167.255.255"), Some("192.169.0.0")),
            ("198.18.0.0", "198.19.255.255", "198.18.0.0/15", Some("198.17.255.255"), Some("198.20.0.0")),
            ("198.51.100.0", "198.51.100.255", "198.51.100.0/24", Some("198.51.99.255"), Some("198.51.101.0")),
            ("203.0.113.0", "203.0.113.255", "203.0.113.0/24", Some("203.0.112.255"), Some("203.0.114.0")),
            ("224.0.0.0", "239.255.255.255", "224.0.0.0/4", Some("223.255.255.255"), None),
            ("240.0.0.0", "255.255.255.255", "240.0.0.0/4", None, None),
        ];
        let p = none();
        for (first, last, range, before, after) in cases {
            assert_blocked(&p, first, range);
            assert_blocked(&p, last, range);
            for outside in [before, after].into_iter().flatten() {
                assert_allowed(&p, outside);
            }
        }
    }

    #[test]
    fn every_blocked_ipv6_range_blocks_its_edges_and_not_its_neighbours() {
        #[rustfmt::skip]
        let cases = [
            ("::", "::", "::/128", None, None),
            ("::1", "::1", "::1/128", None, None),
            ("::2", "::ffff:ffff", "::/96", None, Some("::1:0:0:0")),
            ("64:ff9b:1::", "64:ff9b:1:ffff:ffff:ffff:ffff:ffff", "64:ff9b:1::/48", Some("64:ff9b:0:ffff::"), Some("64:ff9b:2::")),
            ("100::", "100::ffff:ffff:ffff:ffff", "100::/64", Some("ff:ffff:ffff:ffff:ffff:ffff:ffff:ffff"), Some("100:0:0:1::")),
            ("2001::", "2001:0:ffff:ffff:ffff:ffff:ffff:ffff", "2001::/32", None, None),
            ("2001:1::", "2001:1ff:ffff:ffff:ffff:ffff:ffff:ffff", "2001::/23", Some("2000:ffff:ffff:ffff:ffff:ffff:ffff:ffff"), Some("2001:200::")),
            ("2001:db8::", "2001:db8:ffff:ffff:ffff:ffff:ffff:ffff", "2001:db8::/32", Some("2001:db7:ffff:ffff:ffff:ffff:ffff:ffff"), Some("2001:db9::")),
            ("fc00::", "fdff:ffff:ffff:ffff:ffff:ffff:ffff:ffff", "fc00::/7", Some("fbff:ffff:ffff:ffff:ffff:ffff:ffff:ffff"), None),
            ("fe80::", "febf:ffff:ffff:ffff:ffff:ffff:ffff:ffff", "fe80::/10", Some("fe7f:ffff:ffff:ffff:ffff:ffff:ffff:ffff"), None),
            ("fec0::", "feff:ffff:ffff:ffff:ffff:ffff:ffff:ffff", "fec0::/10", None, None),
            ("ff00::", "ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff", "ff00::/8", None, None),
        ];
        let p = none();
        for (first, last, range, before, after) in cases {
            assert_blocked(&p, first, range);
            assert_blocked(&p, last, range);
            for outside in [before, after].into_iter().flatten() {
                assert_allowed(&p, outside);
            }
        }
    }

    #[test]
    fn public_addresses_pass() {
        let p = none();
        for addr in [
            "93.184.216.34",
            "1.1.1.1",
            "8.8.8.8",
            "2606:4700::1111",
            "2a00:1450:4001:82b::200e",
        ] {
            assert_allowed(&p, addr);
        }
    }

    #[test]
    fn ipv4_mapped_nat64_and_6to4_forms_of_private_addresses_are_blocked() {
        let p = none();
        for addr in [
            "::ffff:127.0.0.1",
            "64:ff9b::127.0.0.1",
            "2002:7f00:1::",
            "2002:7f00:1:ffff::1",
        ] {
            assert_blocked(&p, addr, "127.0.0.0/8");
        }
        for addr in ["::ffff:10.0.0.1", "64:ff9b::a00:1", "2002:a00:1::1"] {
            assert_blocked(&p, addr, "10.0.0.0/8");
        }
        assert_blocked(&p, "::ffff:169.254.169.254", "169.254.0.0/16");
    }

    #[test]
    fn ipv4_mapped_nat64_and_6to4_forms_of_a_public_address_pass() {
        let p = none();
        for addr in [
            "::ffff:93.184.216.34",
            "64:ff9b::93.184.216.34",
            "2002:5db8:d822::1",
        ] {
            assert_allowed(&p, addr);
        }
    }

    #[test]
    fn an_ipv4_compatible_address_is_blocked_even_when_its_ipv4_is_public() {
        assert_blocked(&none(), "::93.184.216.34", "::/96");
    }

    #[test]
    fn the_message_names_the_address_and_the_network() {
        let err = none().check(ip("10.0.0.1")).unwrap_err();
        assert_eq!(
            err.to_string(),
            "address 10.0.0.1 is in a private network (10.0.0.0/8)"
        );
        let err = none().check(ip("::ffff:127.0.0.1")).unwrap_err();
        assert_eq!(
            err.to_string(),
            "address ::ffff:127.0.0.1 is in the loopback network (127.0.0.0/8)"
        );
    }

    #[test]
    fn the_allow_list_opens_loopback_for_ipv4_ipv6_and_the_mapped_form() {
        let p = NetworkPolicy::parse("127.0.0.0/8, ::1/128").unwrap();
        assert_allowed(&p, "127.0.0.1");
        assert_allowed(&p, "127.1.2.3");
        assert_allowed(&p, "::1");
        assert_allowed(&p, "::ffff:127.0.0.1");
        assert_blocked(&p, "10.0.0.1", "10.0.0.0/8");
        assert_blocked(&p, "::2", "::/96");
        assert_blocked(&p, "fe80::1", "fe80::/10");
    }

    #[test]
    fn a_bare_ip_in_the_allow_list_opens_that_address_only() {
        let p = NetworkPolicy::parse("10.1.2.3,fd00::5").unwrap();
        assert_allowed(&p, "10.1.2.3");
        assert_blocked(&p, "10.1.2.4", "10.0.0.0/8");
        assert_allowed(&p, "fd00::5");
        assert_blocked(&p, "fd00::6", "fc00::/7");
        assert_eq!(p.allowed().len(), 2);
        assert_eq!(p.allowed()[0].to_string(), "10.1.2.3/32");
        assert_eq!(p.allowed()[1].to_string(), "fd00::5/128");
    }

    #[test]
    fn an_empty_allow_list_allows_nothing_extra() {
        for text in ["", "  ", " , ,"] {
            let p = NetworkPolicy::parse(text).unwrap();
            assert!(p.allowed().is_empty());
            assert_eq!(p, NetworkPolicy::default());
        }
    }

    #[test]
    fn an_allow_list_cidr_with_host_bits_means_its_network() {
        let p = NetworkPolicy::parse(" 192.168.1.77/24 ").unwrap();
        assert_eq!(p.allowed()[0].to_string(), "192.168.1.0/24");
        assert_allowed(&p, "192.168.1.200");
        assert_blocked(&p, "192.168.2.1", "192.168.0.0/16");
    }

    #[test]
    fn a_bad_allow_list_entry_is_an_error_naming_it() {
        for (text, bad) in [
            ("10.0.0.0/8, localhost", "localhost"),
            ("10.0.0.0/33", "10.0.0.0/33"),
            ("10.0.0/8", "10.0.0/8"),
            ("::1/129", "::1/129"),
            ("10.0.0.0/8;127.0.0.1", "10.0.0.0/8;127.0.0.1"),
        ] {
            let err = NetworkPolicy::parse(text).unwrap_err();
            assert!(err.contains(&format!("{bad:?}")), "{err}");
        }
    }

    fn url(s: &str) -> url::Url {
        url::Url::parse(s).unwrap()
    }

    #[test]
    fn check_url_blocks_private_ip_literals_in_every_spelling() {
        let p = none();
        for u in [
            "http://127.0.0.1/hook",
            "https://10.0.0.1:8443/",
            "http://[::1]:8080/",
            "http://[::ffff:127.0.0.1]/",
            "http://[::ffff:7f00:1]/",
            "http://[64:ff9b::a00:1]/",
            "http://[fe80::1]/",
            "http://2130706433/",
            "http://127.1/",
            "http://0x7f.0.0.1/",
            "http://127.0.0.1./",
            "http://169.254.169.254/latest/meta-data/",
        ] {
            assert!(
                matches!(check_url(&url(u), &p), Err(UrlRejected::Blocked(_))),
                "{u}"
            );
        }
    }

    #[test]
    fn check_url_passes_public_literals_and_leaves_names_to_the_resolver() {
        let p = none();
        for u in [
            "https://93.184.216.34/hook",
            "http://[2606:4700::1111]/",
            "https://example.com/hooks",
            "http://localhost:3000/",
        ] {
            assert_eq!(check_url(&url(u), &p), Ok(()), "{u}");
        }
    }

    #[test]
    fn check_url_follows_the_allow_list() {
        let p = NetworkPolicy::parse("127.0.0.0/8,::1/128").unwrap();
        assert_eq!(check_url(&url("http://127.0.0.1:9000/"), &p), Ok(()));
        assert_eq!(check_url(&url("http://[::1]:9000/"), &p), Ok(()));
    }

    #[test]
    fn check_url_refuses_other_schemes_and_hostless_urls_as_invalid() {
        let p = none();
        for u in [
            "ftp://example.com/",
            "file:///etc/passwd",
            "mailto:a@example.com",
            "data:text/plain,hi",
        ] {
            assert!(
                matches!(check_url(&url(u), &p), Err(UrlRejected::Invalid(_))),
                "{u}"
            );
        }
        let err = check_url(&url("ftp://example.com/"), &p).unwrap_err();
        assert_eq!(
            err.to_string(),
            "only http and https URLs can be called, not ftp:"
        );
    }

    #[test]
    fn find_blocked_digs_through_wrapping_errors() {
        #[derive(Debug, thiserror::Error)]
        #[error("outer")]
        struct Outer(#[source] Box<dyn StdError + Send + Sync>);

        let blocked = Blocked {
            ip: ip("10.0.0.1"),
            reason: "a private network (10.0.0.0/8)",
        };
        let err = Outer(Box::new(BlockedAddress(blocked)));
        assert_eq!(find_blocked(&err), Some(&blocked));
        let plain = Outer(Box::new(std::io::Error::other("nope")));
        assert_eq!(find_blocked(&plain), None);
    }

    async fn resolve(policy: NetworkPolicy, name: &str) -> Result<Vec<SocketAddr>, String> {
        let resolver = GuardedResolver::new(Arc::new(policy));
        match resolver.resolve(name.parse().unwrap()).await {
            Ok(addrs) => Ok(addrs.collect()),
            Err(e) => {
                assert!(e.downcast_ref::<BlockedAddress>().is_some(), "{e:?}");
                Err(e.to_string())
            }
        }
    }

    #[tokio::test]
    async fn the_resolver_refuses_localhost_by_default() {
        let err = resolve(none(), "localhost").await.unwrap_err();
        assert!(err.contains("loopback"), "{err}");
    }

    #[tokio::test]
    async fn the_resolver_gives_the_checked_addresses_when_loopback_is_allowed() {
        let policy = NetworkPolicy::parse("127.0.0.0/8,::1/128").unwrap();
        let addrs = resolve(policy, "localhost").await.unwrap();
        assert!(!addrs.is_empty());
        assert!(addrs.iter().all(|a| a.ip().is_loopback()), "{addrs:?}");
    }

    #[tokio::test]
    async fn a_name_that_does_not_resolve_is_an_io_error_not_a_blocked_one() {
        let resolver = GuardedResolver::new(Arc::new(none()));
        let err = match resolver
            .resolve(crate::testkit::UNRESOLVABLE_HOST.parse().unwrap())
            .await
        {
            Ok(addrs) => panic!("resolved to {:?}", addrs.collect::<Vec<_>>()),
            Err(e) => e,
        };
        assert!(err.downcast_ref::<std::io::Error>().is_some(), "{err:?}");
        assert!(find_blocked(&*err).is_none());
    }
}
