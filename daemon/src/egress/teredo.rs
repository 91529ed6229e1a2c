//! Teredo destinations judged by the IPv4 client they carry.
//!
//! A Teredo address (`2001::/32`, RFC 4380) ends with its client's IPv4
//! address, inverted: a packet to it leaves through a Teredo relay that
//! carries it on to that client. No IPv6 prefix picks those bits out (a
//! server address, flags and a port that vary sit before them), so the
//! address sets cannot hold them. The table matches the address's last 32
//! bits instead (`@nh,288,32`: the destination starts 24 bytes into the
//! IPv6 header) against a set of the posture's IPv4 ranges, each inverted.
//! Inverting every bit of an address maps a prefix to a prefix of the same
//! length (its network bits inverted, the free bits still free), so the set
//! holds the same number of intervals as the IPv4 set.
//!
//! `strict` refuses all of `2001::/32` as well; the rules here are what
//! keeps `relaxed` from reaching a metadata or link-local address as a
//! Teredo client, as the protocol's judge already decides for a caller.

use std::collections::BTreeSet;
use std::net::IpAddr;

use sandboxd_protocol::egress::Range;

use super::nft;

/// The set of inverted IPv4 ranges, as the table names it.
pub const SET: &str = "refused_teredo";

/// The set's declaration, elements given (nft's `typeof` of a raw
/// payload: the key is the 32 bits themselves).
pub fn declaration(ipv4: impl Iterator<Item = Range>) -> String {
    let elements: Vec<String> = inverted(ipv4)
        .map(|(first, _, prefix_len)| format!("0x{first:08x}/{prefix_len}"))
        .collect();
    format!(
        "set {SET} {{ typeof @nh,288,32; flags interval; elements = {{ {} }} }}",
        elements.join(", ")
    )
}

/// The chain rules that refuse a Teredo destination whose client is
/// refused: a reset for TCP, a drop for the rest, as the address sets get.
pub fn rules() -> [&'static str; 2] {
    [
        "ip6 daddr 2001::/32 @nh,288,32 @refused_teredo meta l4proto tcp reject with tcp reset",
        "ip6 daddr 2001::/32 @nh,288,32 @refused_teredo drop",
    ]
}

/// Whether the set in a whitespace-flattened listing holds exactly the
/// inverted `ipv4` ranges (nft lists `0xfirst-0xlast`, or `0xaddress` for
/// a single one).
pub fn verify(flat: &str, ipv4: impl Iterator<Item = Range>) -> Result<(), String> {
    let listed =
        listed_intervals(flat).ok_or_else(|| format!("its set {SET} is missing or unreadable"))?;
    let wanted: BTreeSet<(u32, u32)> = inverted(ipv4)
        .map(|(first, last, _)| (first, last))
        .collect();
    if listed != wanted {
        return Err(format!(
            "its set {SET} holds {listed:x?}, not the inverted IPv4 ranges {wanted:x?}"
        ));
    }
    Ok(())
}

/// Each IPv4 range inverted: `(first, last, prefix length)`.
pub(super) fn inverted(ipv4: impl Iterator<Item = Range>) -> impl Iterator<Item = (u32, u32, u8)> {
    ipv4.filter_map(|range| match range.network {
        IpAddr::V4(network) => Some((u32::from(network), range.prefix_len)),
        IpAddr::V6(_) => None,
    })
    .map(|(network, prefix_len)| {
        let free = u32::MAX.checked_shr(u32::from(prefix_len)).unwrap_or(0);
        let first = !network & !free;
        (first, first | free, prefix_len)
    })
}

fn listed_intervals(flat: &str) -> Option<BTreeSet<(u32, u32)>> {
    let elements = nft::listed_elements(flat, SET)?;
    let hex = |text: &str| u32::from_str_radix(text.trim().strip_prefix("0x")?, 16).ok();
    elements
        .split(',')
        .map(|element| match element.split_once('-') {
            Some((first, last)) => Some((hex(first)?, hex(last)?)),
            None => hex(element).map(|single| (single, single)),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use std::net::Ipv4Addr;

    use sandboxd_protocol::egress::{teredo_client, Posture};

    use super::*;

    fn relaxed_ipv4() -> Vec<Range> {
        Posture::Relaxed
            .refused_ranges()
            .filter(|range| range.network.is_ipv4())
            .collect()
    }

    #[test]
    fn a_refused_client_falls_in_the_set_and_an_allowed_one_does_not() {
        let ranges = relaxed_ipv4();
        let intervals: Vec<(u32, u32, u8)> = inverted(ranges.iter().copied()).collect();
        let in_set = |teredo: &str| {
            let bits = u128::from(teredo.parse::<std::net::Ipv6Addr>().unwrap()) as u32;
            intervals
                .iter()
                .any(|(first, last, _)| (*first..=*last).contains(&bits))
        };
        // 169.254.0.161 and 100.100.100.200 as Teredo clients.
        for teredo in [
            "2001:0:4136:e378:8000:63bf:5601:ff5e",
            "2001:0:1:2:3:4:9b9b:9b37",
        ] {
            let client = teredo_client(teredo.parse().unwrap()).unwrap();
            assert!(in_set(teredo), "{teredo} ({client}) is not in the set");
        }
        // 192.0.2.45, a documentation address relaxed allows.
        let allowed = "2001:0:4136:e378:8000:63bf:3fff:fdd2";
        assert_eq!(
            teredo_client(allowed.parse().unwrap()),
            Some(Ipv4Addr::new(192, 0, 2, 45))
        );
        assert!(!in_set(allowed));
    }

    #[test]
    fn the_declaration_lists_each_range_inverted() {
        let ranges = relaxed_ipv4();
        let declaration = declaration(ranges.iter().copied());
        // 169.254.0.0/16 inverted is 86.1.0.0/16.
        assert!(declaration.contains("0x56010000/16"), "{declaration}");
        assert!(declaration.starts_with("set refused_teredo { typeof @nh,288,32;"));
    }

    #[test]
    fn a_listing_is_checked_interval_for_interval() {
        let ranges = [Range {
            network: IpAddr::V4(Ipv4Addr::new(169, 254, 0, 0)),
            prefix_len: 16,
            ..relaxed_ipv4()[0]
        }];
        let listing = "set refused_teredo { typeof @nh,288,32 flags interval \
                       elements = { 0x56010000-0x5601ffff } }";
        assert_eq!(verify(listing, ranges.iter().copied()), Ok(()));
        let other = listing.replace("0x5601ffff", "0x5601fffe");
        assert!(verify(&other, ranges.iter().copied()).is_err());
        assert!(verify("", ranges.iter().copied()).is_err());
        let single = Range {
            network: IpAddr::V4(Ipv4Addr::new(100, 100, 100, 200)),
            prefix_len: 32,
            ..ranges[0]
        };
        let listing = "set refused_teredo { elements = { 0x9b9b9b37 } }";
        assert_eq!(verify(listing, [single].into_iter()), Ok(()));
    }
}
