//! The address table: every range a posture may refuse, with the seed's
//! words for it and where the range comes from.
//!
//! [`RANGES`] holds the ranges as written; [`super::embedded`] adds, for
//! every IPv4 range here, the IPv6 networks that carry it (NAT64, 6to4,
//! …), so an IPv4 address written inside IPv6 meets the same verdict.

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
    /// A cloud's metadata (or host agent) address outside link-local:
    /// refused under every posture, like link-local.
    CloudMetadata,
    /// `100.64.0.0/10` (RFC 6598): carrier-grade NAT, and where some
    /// clouds put internal services.
    SharedAddressSpace,
    /// `fec0::/10` (RFC 3879): deprecated, still routed on some networks.
    SiteLocal,
    /// `192.0.0.0/24` (RFC 6890).
    ProtocolAssignments,
    /// `198.18.0.0/15` (RFC 2544), used inside some providers' networks.
    Benchmarking,
    /// An IPv6 prefix that carries IPv4 where no fixed rule can find it
    /// (Teredo's obfuscated client, local-use NAT64's free layout):
    /// refused whole under `strict`.
    Translation,
}

impl RangeKind {
    /// The seed's words, exactly (SPEC §9), and words of the same style
    /// for the kinds added since.
    pub fn reason(self) -> &'static str {
        match self {
            RangeKind::Loopback => "loopback",
            RangeKind::Private => "private (RFC 1918)",
            RangeKind::LinkLocal => "link-local (cloud metadata)",
            RangeKind::Unspecified => "unspecified",
            RangeKind::CloudMetadata => "cloud metadata",
            RangeKind::SharedAddressSpace => "shared address space (RFC 6598)",
            RangeKind::SiteLocal => "site-local (RFC 3879)",
            RangeKind::ProtocolAssignments => "IETF protocol assignments (RFC 6890)",
            RangeKind::Benchmarking => "benchmarking (RFC 2544)",
            RangeKind::Translation => "IPv4 translation prefix (embedded IPv4 not checkable)",
        }
    }
}

/// One network of the table: `network/prefix_len`, of one kind.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Range {
    pub network: IpAddr,
    pub prefix_len: u8,
    pub kind: RangeKind,
    /// Where the range is defined: an RFC, or a cloud's documentation.
    pub source: &'static str,
}

impl Range {
    const fn v4(octets: [u8; 4], prefix_len: u8, kind: RangeKind, source: &'static str) -> Range {
        let [a, b, c, d] = octets;
        Range {
            network: IpAddr::V4(Ipv4Addr::new(a, b, c, d)),
            prefix_len,
            kind,
            source,
        }
    }

    pub(super) const fn v6(
        network: Ipv6Addr,
        prefix_len: u8,
        kind: RangeKind,
        source: &'static str,
    ) -> Range {
        Range {
            network: IpAddr::V6(network),
            prefix_len,
            kind,
            source,
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

    /// True when every address of `other` lies in this range.
    pub fn covers(&self, other: &Range) -> bool {
        self.prefix_len <= other.prefix_len && self.contains(other.network)
    }
}

impl fmt::Display for Range {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.network, self.prefix_len)
    }
}

const fn v6(segments: [u16; 8]) -> Ipv6Addr {
    let [a, b, c, d, e, f, g, h] = segments;
    Ipv6Addr::new(a, b, c, d, e, f, g, h)
}

use RangeKind::*;

/// Every range either posture can refuse, as written. Ranges may nest (a
/// metadata address inside a range only `strict` refuses): an address is
/// judged by the most specific range its posture refuses.
pub const RANGES: [Range; 21] = [
    Range::v4([127, 0, 0, 0], 8, Loopback, "RFC 1122"),
    Range::v4([10, 0, 0, 0], 8, Private, "RFC 1918"),
    Range::v4([172, 16, 0, 0], 12, Private, "RFC 1918"),
    Range::v4([192, 168, 0, 0], 16, Private, "RFC 1918"),
    Range::v4(
        [169, 254, 0, 0],
        16,
        LinkLocal,
        "RFC 3927; AWS, GCP, Azure, Oracle, OpenStack metadata at 169.254.169.254",
    ),
    Range::v4([0, 0, 0, 0], 8, Unspecified, "RFC 1122"),
    Range::v4([100, 64, 0, 0], 10, SharedAddressSpace, "RFC 6598"),
    Range::v4([192, 0, 0, 0], 24, ProtocolAssignments, "RFC 6890"),
    Range::v4([198, 18, 0, 0], 15, Benchmarking, "RFC 2544"),
    Range::v4(
        [100, 100, 100, 200],
        32,
        CloudMetadata,
        "Alibaba Cloud ECS instance metadata",
    ),
    Range::v4(
        [168, 63, 129, 16],
        32,
        CloudMetadata,
        "Azure WireServer (host agent, platform DNS)",
    ),
    Range::v4(
        [192, 0, 0, 192],
        32,
        CloudMetadata,
        "Oracle Cloud Classic instance metadata",
    ),
    Range::v6(Ipv6Addr::LOCALHOST, 128, Loopback, "RFC 4291"),
    Range::v6(v6([0xfc00, 0, 0, 0, 0, 0, 0, 0]), 7, Private, "RFC 4193"),
    Range::v6(v6([0xfe80, 0, 0, 0, 0, 0, 0, 0]), 10, LinkLocal, "RFC 4291"),
    Range::v6(Ipv6Addr::UNSPECIFIED, 128, Unspecified, "RFC 4291"),
    Range::v6(v6([0xfec0, 0, 0, 0, 0, 0, 0, 0]), 10, SiteLocal, "RFC 3879"),
    Range::v6(
        v6([0xfd00, 0xec2, 0, 0, 0, 0, 0, 0x254]),
        128,
        CloudMetadata,
        "AWS EC2 instance metadata (IPv6, Nitro)",
    ),
    Range::v6(
        v6([0xfd20, 0xce, 0, 0, 0, 0, 0, 0x254]),
        128,
        CloudMetadata,
        "GCP metadata server (IPv6)",
    ),
    // Where IPv4 sits in them varies, so no fixed rule can find it (see
    // `super::embedded`).
    Range::v6(
        v6([0x2001, 0, 0, 0, 0, 0, 0, 0]),
        32,
        Translation,
        "RFC 4380 (Teredo)",
    ),
    Range::v6(
        v6([0x64, 0xff9b, 1, 0, 0, 0, 0, 0]),
        48,
        Translation,
        "RFC 8215 (local-use NAT64)",
    ),
];
