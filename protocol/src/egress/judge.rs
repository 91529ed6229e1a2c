//! Judging addresses against a posture.

use std::net::{IpAddr, Ipv6Addr};

use super::embedded::{every_range, teredo_client};
use super::posture::Posture;
use super::table::UNRECOGNIZED;

/// Why `posture` refuses `address`, or `None` when it may be dialled.
///
/// `address` is an IP address as text: IPv4 dotted-quad, IPv6 (IPv4
/// written inside it is judged as that IPv4, see [`blocked_reason_ip`]),
/// optionally in brackets
/// (`[::1]`) and, for IPv6, with a zone (`fe80::1%eth0`, the zone ignored).
/// Anything else — a host name, a port, a shorthand like `127.1` — is
/// refused as `"unrecognized"`: this judges addresses, not names.
pub fn blocked_reason(posture: Posture, address: &str) -> Option<&'static str> {
    match parse_address(address) {
        Some(ip) => blocked_reason_ip(posture, ip),
        None => Some(UNRECOGNIZED),
    }
}

/// Why `posture` refuses `ip`, or `None` when it may be dialled.
///
/// Judged by the most specific range of the whole table (see
/// [`super::embedded`]) that the posture refuses and `ip` lies in, so
/// `64:ff9b::a9fe:a9fe` is refused as `169.254.169.254` is. An
/// IPv4-mapped address is judged as the IPv4 inside, and a Teredo
/// address by its client's IPv4 too (as the daemon's kernel rules do;
/// `strict` refuses all of Teredo as well).
pub fn blocked_reason_ip(posture: Posture, ip: IpAddr) -> Option<&'static str> {
    let ip = unmapped(ip);
    most_specific(posture, ip).or_else(|| match ip {
        IpAddr::V6(v6) => most_specific(posture, IpAddr::V4(teredo_client(v6)?)),
        IpAddr::V4(_) => None,
    })
}

/// The words of the longest refused range holding `ip`.
fn most_specific(posture: Posture, ip: IpAddr) -> Option<&'static str> {
    every_range()
        .iter()
        .filter(|range| posture.refuses(range.kind) && range.contains(ip))
        .max_by_key(|range| range.prefix_len)
        .map(|range| range.kind.reason())
}

/// Why `posture` refuses a host whose name resolved to `addresses`, or
/// `None` when every one of them may be dialled.
///
/// A name is refused when any of its addresses is, with that address's
/// reason (the first refused one in the list), so a name with one public
/// and one private record cannot be used to reach the private one. A name
/// that resolved to nothing has no address to judge and is refused as
/// `"unrecognized"` rather than waved through.
pub fn host_blocked_reason<S: AsRef<str>>(
    posture: Posture,
    addresses: &[S],
) -> Option<&'static str> {
    if addresses.is_empty() {
        return Some(UNRECOGNIZED);
    }
    addresses
        .iter()
        .find_map(|address| blocked_reason(posture, address.as_ref()))
}

/// The IP address `text` spells, after the brackets and zone a URL or a
/// resolver may carry; `None` when it spells none.
pub fn parse_address(text: &str) -> Option<IpAddr> {
    let inner = text
        .strip_prefix('[')
        .and_then(|rest| rest.strip_suffix(']'))
        .unwrap_or(text);
    match inner.split_once('%') {
        // Only IPv6 has zones, and an empty one is not a zone.
        Some((address, zone)) if !zone.is_empty() => {
            address.parse::<Ipv6Addr>().ok().map(IpAddr::V6)
        }
        Some(_) => None,
        None => inner.parse::<IpAddr>().ok(),
    }
}

/// An IPv4-mapped IPv6 address (`::ffff:a.b.c.d`) as the IPv4 it carries:
/// that is where a connect to it goes.
fn unmapped(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(ip, IpAddr::V4),
        IpAddr::V4(_) => ip,
    }
}
