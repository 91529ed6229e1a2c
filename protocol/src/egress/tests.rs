//! The seed's vectors, every boundary of every range in both families, and
//! the parsing edges.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use super::*;

const LOOPBACK: &str = "loopback";
const PRIVATE: &str = "private (RFC 1918)";
const LINK_LOCAL: &str = "link-local (cloud metadata)";
const UNSPECIFIED: &str = "unspecified";

/// The seed's own test (outbound-egress-points.test.ts), word for word.
#[test]
fn the_seed_vectors() {
    let relaxed = Posture::Relaxed;
    assert_eq!(relaxed.as_str(), "relaxed");
    assert_eq!(blocked_reason(relaxed, "127.0.0.1"), None);
    assert_eq!(blocked_reason(relaxed, "10.0.0.1"), None);
    assert_eq!(blocked_reason(relaxed, "169.254.169.254"), Some(LINK_LOCAL));

    let strict = Posture::Strict;
    assert_eq!(strict.as_str(), "strict");
    assert_eq!(blocked_reason(strict, "127.0.0.1"), Some(LOOPBACK));
    assert_eq!(blocked_reason(strict, "10.0.0.1"), Some(PRIVATE));
    assert_eq!(blocked_reason(strict, "169.254.169.254"), Some(LINK_LOCAL));
    assert_eq!(blocked_reason(strict, "0.0.0.0"), Some(UNSPECIFIED));
    assert_eq!(blocked_reason(strict, "104.16.0.1"), None);
}

/// `(address, the kind it is, if any)`: the first and last address of
/// every range, and the addresses just outside each end.
const BOUNDARIES: &[(&str, Option<RangeKind>)] = &[
    // 0.0.0.0/8 (it starts the address space: nothing below it)
    ("0.0.0.0", Some(RangeKind::Unspecified)),
    ("0.255.255.255", Some(RangeKind::Unspecified)),
    ("1.0.0.0", None),
    // 10.0.0.0/8
    ("9.255.255.255", None),
    ("10.0.0.0", Some(RangeKind::Private)),
    ("10.255.255.255", Some(RangeKind::Private)),
    ("11.0.0.0", None),
    // 127.0.0.0/8
    ("126.255.255.255", None),
    ("127.0.0.0", Some(RangeKind::Loopback)),
    ("127.255.255.255", Some(RangeKind::Loopback)),
    ("128.0.0.0", None),
    // 169.254.0.0/16
    ("169.253.255.255", None),
    ("169.254.0.0", Some(RangeKind::LinkLocal)),
    ("169.254.255.255", Some(RangeKind::LinkLocal)),
    ("169.255.0.0", None),
    // 172.16.0.0/12
    ("172.15.255.255", None),
    ("172.16.0.0", Some(RangeKind::Private)),
    ("172.31.255.255", Some(RangeKind::Private)),
    ("172.32.0.0", None),
    // 192.168.0.0/16
    ("192.167.255.255", None),
    ("192.168.0.0", Some(RangeKind::Private)),
    ("192.168.255.255", Some(RangeKind::Private)),
    ("192.169.0.0", None),
    // the top of the IPv4 space
    ("255.255.255.255", None),
    // :: and ::1 (single addresses, side by side)
    ("::", Some(RangeKind::Unspecified)),
    ("::1", Some(RangeKind::Loopback)),
    // ::2 is IPv4-compatible 0.0.0.2 (see `address_tests`)
    ("::2", Some(RangeKind::Unspecified)),
    // fc00::/7
    ("fbff:ffff:ffff:ffff:ffff:ffff:ffff:ffff", None),
    ("fc00::", Some(RangeKind::Private)),
    (
        "fdff:ffff:ffff:ffff:ffff:ffff:ffff:ffff",
        Some(RangeKind::Private),
    ),
    ("fe00::", None),
    // fe80::/10
    ("fe7f:ffff:ffff:ffff:ffff:ffff:ffff:ffff", None),
    ("fe80::", Some(RangeKind::LinkLocal)),
    (
        "febf:ffff:ffff:ffff:ffff:ffff:ffff:ffff",
        Some(RangeKind::LinkLocal),
    ),
    // site-local starts here (see `address_tests`)
    ("fec0::", Some(RangeKind::SiteLocal)),
    // the top of the IPv6 space, and a public address
    ("ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff", None),
    ("2606:4700::1", None),
];

#[test]
fn every_boundary_of_every_range_in_both_postures() {
    for &(address, kind) in BOUNDARIES {
        assert_eq!(
            blocked_reason(Posture::Strict, address),
            kind.map(RangeKind::reason),
            "strict, {address}"
        );
        let relaxed = kind.filter(|kind| Posture::Relaxed.refuses(*kind));
        assert_eq!(
            blocked_reason(Posture::Relaxed, address),
            relaxed.map(RangeKind::reason),
            "relaxed, {address}"
        );
    }
}

#[test]
fn the_boundaries_cover_every_seed_range_at_both_ends() {
    let seed = |range: &&Range| {
        matches!(
            range.kind,
            RangeKind::Loopback
                | RangeKind::Private
                | RangeKind::LinkLocal
                | RangeKind::Unspecified
        )
    };
    for range in RANGES.iter().filter(seed) {
        let ends: Vec<IpAddr> = BOUNDARIES
            .iter()
            .filter_map(|(address, _)| address.parse().ok())
            .filter(|ip| range.contains(*ip))
            .collect();
        let want = if range.prefix_len == 128 { 1 } else { 2 };
        assert_eq!(ends.len(), want, "{range}: {ends:?}");
    }
}

#[test]
fn ipv4_mapped_ipv6_is_judged_as_the_ipv4_inside() {
    for (mapped, reason) in [
        ("::ffff:127.0.0.1", Some(LOOPBACK)),
        ("::ffff:7f00:1", Some(LOOPBACK)),
        ("::ffff:10.1.2.3", Some(PRIVATE)),
        ("[::ffff:169.254.169.254]", Some(LINK_LOCAL)),
        ("::ffff:0.0.0.0", Some(UNSPECIFIED)),
        ("::ffff:104.16.0.1", None),
    ] {
        assert_eq!(blocked_reason(Posture::Strict, mapped), reason, "{mapped}");
    }
    assert_eq!(blocked_reason(Posture::Relaxed, "::ffff:127.0.0.1"), None);
}

#[test]
fn brackets_and_zones_are_accepted() {
    assert_eq!(blocked_reason(Posture::Strict, "[::1]"), Some(LOOPBACK));
    assert_eq!(
        blocked_reason(Posture::Strict, "[127.0.0.1]"),
        Some(LOOPBACK)
    );
    assert_eq!(
        blocked_reason(Posture::Relaxed, "fe80::1%eth0"),
        Some(LINK_LOCAL)
    );
    assert_eq!(
        blocked_reason(Posture::Relaxed, "[fe80::1%25eth0]"),
        Some(LINK_LOCAL)
    );
    assert_eq!(blocked_reason(Posture::Strict, "2606:4700::1%eth0"), None);
}

#[test]
fn anything_that_is_not_an_address_is_unrecognized() {
    for text in [
        "",
        "localhost",
        "example.com",
        "127.1",
        "0x7f000001",
        "2130706433",
        "01.2.3.4",
        "1.2.3.4:80",
        "[::1]:80",
        " 127.0.0.1",
        "127.0.0.1 ",
        "[::1",
        "::1]",
        "[]",
        "127.0.0.1%eth0",
        "fe80::1%",
        "1.2.3.4.5",
        "256.0.0.1",
        "\0",
    ] {
        for posture in Posture::ALL {
            assert_eq!(
                blocked_reason(posture, text),
                Some(UNRECOGNIZED),
                "{posture}, {text:?}"
            );
        }
    }
}

#[test]
fn a_host_is_refused_when_any_of_its_addresses_is() {
    let mixed = ["104.16.0.1", "2606:4700::1", "10.0.0.1", "127.0.0.1"];
    assert_eq!(host_blocked_reason(Posture::Strict, &mixed), Some(PRIVATE));
    assert_eq!(host_blocked_reason(Posture::Relaxed, &mixed), None);

    let metadata = vec!["104.16.0.1".to_string(), "169.254.169.254".to_string()];
    assert_eq!(
        host_blocked_reason(Posture::Relaxed, &metadata),
        Some(LINK_LOCAL)
    );
    assert_eq!(
        host_blocked_reason(Posture::Relaxed, &["104.16.0.1", "not-an-address"]),
        Some(UNRECOGNIZED)
    );
    assert_eq!(
        host_blocked_reason(Posture::Strict, &["104.16.0.1", "2606:4700::1"]),
        None
    );
}

#[test]
fn a_host_with_no_addresses_is_refused() {
    let none: [&str; 0] = [];
    for posture in Posture::ALL {
        assert_eq!(host_blocked_reason(posture, &none), Some(UNRECOGNIZED));
    }
}

#[test]
fn postures_parse_from_their_names_only() {
    assert_eq!("relaxed".parse(), Ok(Posture::Relaxed));
    assert_eq!("strict".parse(), Ok(Posture::Strict));
    for bad in ["", "Strict", "none", " relaxed", "lax"] {
        let error = bad.parse::<Posture>().unwrap_err();
        assert_eq!(error, UnknownPosture(bad.to_string()));
        let message = error.to_string();
        assert!(message.contains("relaxed, strict"), "{message}");
        assert!(message.contains(&format!("'{bad}'")), "{message}");
    }
    let hostile = "\u{1b}[2J".parse::<Posture>().unwrap_err().to_string();
    assert!(!hostile.contains('\u{1b}'), "{hostile}");
}

#[test]
fn relaxed_refuses_only_link_local_and_metadata_and_strict_every_range() {
    let relaxed: Vec<_> = Posture::Relaxed.refused_ranges().collect();
    assert!(relaxed
        .iter()
        .all(|r| matches!(r.kind, RangeKind::LinkLocal | RangeKind::CloudMetadata)));
    let strict: Vec<_> = Posture::Strict.refused_ranges().collect();
    for range in every_range() {
        assert!(strict.iter().any(|wider| wider.covers(range)), "{range}");
    }
}

#[test]
fn ip_and_text_judgements_agree() {
    let ip = IpAddr::V4(Ipv4Addr::new(172, 20, 1, 1));
    assert_eq!(blocked_reason_ip(Posture::Strict, ip), Some(PRIVATE));
    let mapped = IpAddr::V6(Ipv4Addr::new(169, 254, 1, 1).to_ipv6_mapped());
    assert_eq!(
        blocked_reason_ip(Posture::Relaxed, mapped),
        Some(LINK_LOCAL)
    );
    assert_eq!(
        blocked_reason_ip(Posture::Strict, IpAddr::V6(Ipv6Addr::UNSPECIFIED)),
        Some(UNSPECIFIED)
    );
}

mod properties {
    use proptest::prelude::*;

    use super::*;

    proptest! {
        /// Total: any string at all gets an answer, never a panic.
        #[test]
        fn never_panics_on_any_string(text in any::<String>()) {
            for posture in Posture::ALL {
                let _ = blocked_reason(posture, &text);
                let _ = host_blocked_reason(posture, &[text.as_str(), "10.0.0.1"]);
            }
        }

        /// Strings shaped like addresses, brackets and zones included.
        #[test]
        fn never_panics_on_address_shaped_strings(text in r"\[?[0-9a-fA-F:.%]{0,48}[a-z0-9]{0,4}\]?") {
            for posture in Posture::ALL {
                let _ = blocked_reason(posture, &text);
            }
        }

        /// An IPv4 address, written out, mapped into IPv6 or not, gets one verdict.
        #[test]
        fn ipv4_text_ip_and_mapped_forms_agree(bits in any::<u32>()) {
            let v4 = Ipv4Addr::from(bits);
            for posture in Posture::ALL {
                let verdict = blocked_reason_ip(posture, IpAddr::V4(v4));
                prop_assert_eq!(blocked_reason(posture, &v4.to_string()), verdict);
                prop_assert_eq!(blocked_reason(posture, &v4.to_ipv6_mapped().to_string()), verdict);
            }
        }

        /// Any IPv6 address is judged the same as text and in brackets.
        #[test]
        fn ipv6_text_and_bracketed_forms_agree(bits in any::<u128>()) {
            let v6 = Ipv6Addr::from(bits);
            for posture in Posture::ALL {
                let verdict = blocked_reason_ip(posture, IpAddr::V6(v6));
                prop_assert_eq!(blocked_reason(posture, &v6.to_string()), verdict);
                prop_assert_eq!(blocked_reason(posture, &format!("[{v6}]")), verdict);
            }
        }
    }
}
