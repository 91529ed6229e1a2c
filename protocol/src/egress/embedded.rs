//! IPv4 written inside IPv6: the prefixes that carry an IPv4 address at a
//! fixed place, and the table they make of the IPv4 ranges.
//!
//! A sandbox that may not dial `169.254.169.254` must not reach it as
//! `64:ff9b::a9fe:a9fe` either: a NAT64 gateway, a 6to4 relay or a host's
//! own translation would carry the packet to the IPv4 address. So for
//! every IPv4 range of [`RANGES`] and every embedding below, the IPv6
//! network whose embedded bits fall in that range is refused as that
//! range is, with its words: one prefix each, which nftables matches like
//! any other.
//!
//! Not here:
//! - IPv4-mapped `::ffff:0:0/96`: a connect to it leaves as IPv4 and meets
//!   the IPv4 rules; [`super::judge`] unwraps it the same way.
//! - Teredo `2001::/32` (the client's IPv4 is the inverted last 32 bits,
//!   after a server address, flags and port that vary) and local-use NAT64
//!   `64:ff9b:1::/48` laid out at /56 or longer (the operator's subnet
//!   bits come first): no prefix matches them, so `strict` refuses both
//!   prefixes whole ([`RangeKind::Translation`]). `relaxed` refuses
//!   local-use NAT64 in its /48 layout only. [`super::judge`] decodes
//!   Teredo's client for a caller that judges an address itself, and the
//!   daemon's kernel rules match it by the address's last 32 bits.

use std::net::{Ipv4Addr, Ipv6Addr};
use std::sync::LazyLock;

use super::table::{Range, RANGES};

/// Where in an IPv6 address the IPv4 address sits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Layout {
    /// The 32 bits from this bit on.
    Bits(u8),
    /// RFC 6052's /48 layout: the first 16 bits at bits 48–63, the
    /// reserved "u" octet (zero), the last 16 at bits 72–87.
    Rfc6052At48,
}

/// One IPv6 prefix that carries IPv4 at a fixed place.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Embedding {
    pub prefix: Ipv6Addr,
    pub prefix_len: u8,
    pub layout: Layout,
    /// What it is and where it is defined.
    pub source: &'static str,
}

const fn prefix(a: u16, b: u16, c: u16) -> Ipv6Addr {
    Ipv6Addr::new(a, b, c, 0, 0, 0, 0, 0)
}

/// Every embedding at a fixed place (see the module's notes for those
/// that have none).
pub const EMBEDDINGS: [Embedding; 5] = [
    Embedding {
        prefix: prefix(0x64, 0xff9b, 0),
        prefix_len: 96,
        layout: Layout::Bits(96),
        source: "RFC 6052 (NAT64 well-known prefix)",
    },
    Embedding {
        prefix: prefix(0x64, 0xff9b, 1),
        prefix_len: 48,
        layout: Layout::Rfc6052At48,
        source: "RFC 8215 (local-use NAT64, /48 layout)",
    },
    Embedding {
        prefix: prefix(0x2002, 0, 0),
        prefix_len: 16,
        layout: Layout::Bits(16),
        source: "RFC 3056 (6to4)",
    },
    Embedding {
        prefix: Ipv6Addr::new(0, 0, 0, 0, 0xffff, 0, 0, 0),
        prefix_len: 96,
        layout: Layout::Bits(96),
        source: "RFC 2765 (IPv4-translated)",
    },
    Embedding {
        prefix: Ipv6Addr::UNSPECIFIED,
        prefix_len: 96,
        layout: Layout::Bits(96),
        source: "RFC 4291 (IPv4-compatible, deprecated)",
    },
];

impl Embedding {
    /// The IPv6 network that carries `range` (an IPv4 one) here.
    pub fn carrying(&self, range: &Range) -> Option<Range> {
        let std::net::IpAddr::V4(network) = range.network else {
            return None;
        };
        let bits = u128::from(u32::from(network));
        let base = u128::from(self.prefix);
        let (network, prefix_len) = match self.layout {
            Layout::Bits(start) => (
                base | bits << (96 - u32::from(start)),
                start + range.prefix_len,
            ),
            Layout::Rfc6052At48 => {
                let (high, low) = (bits >> 16, bits & 0xffff);
                let len = range.prefix_len;
                (
                    base | high << 64 | low << 40,
                    if len <= 16 { 48 + len } else { 56 + len },
                )
            }
        };
        Some(Range::v6(
            Ipv6Addr::from(network),
            prefix_len,
            range.kind,
            self.source,
        ))
    }
}

/// [`RANGES`] and, for every IPv4 range of it, the network that carries
/// it in every embedding: the whole table both postures read.
pub fn every_range() -> &'static [Range] {
    static EVERY: LazyLock<Vec<Range>> = LazyLock::new(|| {
        let carried = EMBEDDINGS
            .iter()
            .flat_map(|embedding| RANGES.iter().filter_map(|range| embedding.carrying(range)));
        RANGES.iter().copied().chain(carried).collect()
    });
    &EVERY
}

/// Teredo's client address (RFC 4380: the last 32 bits, inverted), when
/// `ip` is a Teredo address.
pub fn teredo_client(ip: Ipv6Addr) -> Option<Ipv4Addr> {
    let bits = u128::from(ip);
    (bits >> 96 == 0x2001_0000).then(|| Ipv4Addr::from(!(bits as u32)))
}
