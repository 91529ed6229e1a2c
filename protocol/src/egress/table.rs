//! The address table: every range a posture may refuse, with the seed's
//! words for it.

use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// The reason given for an address that does not parse.
pub const UNRECOGNIZED: &str = "unrecognized";

/// What a range is, which is also why it is refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum RangeKind {
    /// `127.0.0.0/8`, `::1`.
    Loopback,
    /// `10/8`, `172.16/12`, `192.168/16`, `fc00::/7`.
    Private,
    /// `169.254/16`, `fe80::/10`: where the cloud metadata endpoint lives.
    LinkLocal,
    /// `0.0.0.0/8`, `::`.
    Unspecified,
}

impl RangeKind {
    /// The seed's words, exactly (SPEC §9).
    pub fn reason(self) -> &'static str {
        match self {
            RangeKind::Loopback => "loopback",
            RangeKind::Private => "private (RFC 1918)",
            RangeKind::LinkLocal => "link-local (cloud metadata)",
            RangeKind::Unspecified => "unspecified",
        }
    }
}

/// One network of the table: `network/prefix_len`, of one kind.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Range {
    pub network: IpAddr,
    pub prefix_len: u8,
    pub kind: RangeKind,
}

impl Range {
    const fn v4(a: u8, b: u8, c: u8, d: u8, prefix_len: u8, kind: RangeKind) -> Range {
        Range {
            network: IpAddr::V4(Ipv4Addr::new(a, b, c, d)),
            prefix_len,
            kind,
        }
    }

    const fn v6(network: Ipv6Addr, prefix_len: u8, kind: RangeKind) -> Range {
        Range {
            network: IpAddr::V6(network),
            prefix_len,
            kind,
        }
    }

    /// True when `ip` lies in this range. Families never mix: an
    /// IPv4-mapped IPv6 address is unwrapped by the caller first.
    pub fn contains(&self, ip: IpAddr) -> bool {
        match (self.network, ip) {
            (IpAddr::V4(network), IpAddr::V4(ip)) => {
                let mask = u32::MAX
                    .checked_shl(32 - u32::from(self.prefix_len.min(32)))
                    .unwrap_or(0);
                u32::from(network) & mask == u32::from(ip) & mask
            }
            (IpAddr::V6(network), IpAddr::V6(ip)) => {
                let mask = u128::MAX
                    .checked_shl(128 - u32::from(self.prefix_len.min(128)))
                    .unwrap_or(0);
                u128::from(network) & mask == u128::from(ip) & mask
            }
            _ => false,
        }
    }
}

impl fmt::Display for Range {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.network, self.prefix_len)
    }
}

/// Every range either posture can refuse. The ranges do not overlap, so
/// an address has at most one kind.
pub const RANGES: [Range; 10] = [
    Range::v4(127, 0, 0, 0, 8, RangeKind::Loopback),
    Range::v4(10, 0, 0, 0, 8, RangeKind::Private),
    Range::v4(172, 16, 0, 0, 12, RangeKind::Private),
    Range::v4(192, 168, 0, 0, 16, RangeKind::Private),
    Range::v4(169, 254, 0, 0, 16, RangeKind::LinkLocal),
    Range::v4(0, 0, 0, 0, 8, RangeKind::Unspecified),
    Range::v6(Ipv6Addr::LOCALHOST, 128, RangeKind::Loopback),
    Range::v6(
        Ipv6Addr::new(0xfc00, 0, 0, 0, 0, 0, 0, 0),
        7,
        RangeKind::Private,
    ),
    Range::v6(
        Ipv6Addr::new(0xfe80, 0, 0, 0, 0, 0, 0, 0),
        10,
        RangeKind::LinkLocal,
    ),
    Range::v6(Ipv6Addr::UNSPECIFIED, 128, RangeKind::Unspecified),
];
