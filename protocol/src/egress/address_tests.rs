//! Every address the table lists, judged under both postures: the
//! clouds' metadata addresses, the ranges only `strict` refuses, and IPv4
//! written inside IPv6 in every form the table knows.

use std::net::{IpAddr, Ipv4Addr};

use super::*;

const LOOPBACK: Option<&str> = Some("loopback");
const PRIVATE: Option<&str> = Some("private (RFC 1918)");
const LINK_LOCAL: Option<&str> = Some("link-local (cloud metadata)");
const UNSPECIFIED: Option<&str> = Some("unspecified");
const METADATA: Option<&str> = Some("cloud metadata");
const SHARED: Option<&str> = Some("shared address space (RFC 6598)");
const SITE_LOCAL: Option<&str> = Some("site-local (RFC 3879)");
const ASSIGNMENTS: Option<&str> = Some("IETF protocol assignments (RFC 6890)");
const BENCHMARKING: Option<&str> = Some("benchmarking (RFC 2544)");
const TRANSLATION: Option<&str> = Some("IPv4 translation prefix (embedded IPv4 not checkable)");

/// `(address, relaxed's verdict, strict's verdict)`.
const VECTORS: &[(&str, Option<&str>, Option<&str>)] = &[
    // The clouds' metadata endpoints, refused under both postures.
    ("169.254.169.254", LINK_LOCAL, LINK_LOCAL), // AWS, GCP, Azure, Oracle, OpenStack
    ("169.254.170.2", LINK_LOCAL, LINK_LOCAL),   // AWS ECS task metadata
    ("169.254.0.23", LINK_LOCAL, LINK_LOCAL),    // Tencent Cloud
    ("fd00:ec2::254", METADATA, METADATA),       // AWS over IPv6
    ("[fd00:ec2::254]", METADATA, METADATA),
    ("fd20:ce::254", METADATA, METADATA),        // GCP over IPv6
    ("100.100.100.200", METADATA, METADATA),     // Alibaba Cloud
    ("168.63.129.16", METADATA, METADATA),       // Azure WireServer
    ("192.0.0.192", METADATA, METADATA),         // Oracle Cloud Classic
    ("fe80::a9fe:a9fe", LINK_LOCAL, LINK_LOCAL), // OpenStack over IPv6
    // Their neighbours are only what their ranges are.
    ("fd00:ec2::253", None, PRIVATE), // AWS's resolver
    ("fd00:ec2::255", None, PRIVATE),
    ("100.100.100.199", None, SHARED),
    ("100.100.100.201", None, SHARED),
    ("168.63.129.15", None, None),
    ("168.63.129.17", None, None),
    ("192.0.0.191", None, ASSIGNMENTS),
    ("192.0.0.193", None, ASSIGNMENTS),
    // Refused by strict only, at both ends and just outside.
    ("100.63.255.255", None, None),
    ("100.64.0.0", None, SHARED),
    ("100.127.255.255", None, SHARED),
    ("100.128.0.0", None, None),
    ("191.255.255.255", None, None),
    ("192.0.0.0", None, ASSIGNMENTS),
    ("192.0.0.255", None, ASSIGNMENTS),
    ("192.0.1.0", None, None),
    ("198.17.255.255", None, None),
    ("198.18.0.0", None, BENCHMARKING),
    ("198.19.255.255", None, BENCHMARKING),
    ("198.20.0.0", None, None),
    (
        "febf:ffff:ffff:ffff:ffff:ffff:ffff:ffff",
        LINK_LOCAL,
        LINK_LOCAL,
    ),
    ("fec0::", None, SITE_LOCAL),
    ("feff:ffff:ffff:ffff:ffff:ffff:ffff:ffff", None, SITE_LOCAL),
    ("ff00::", None, None),
    // NAT64's well-known prefix: the last 32 bits.
    ("64:ff9b::a9fe:a9fe", LINK_LOCAL, LINK_LOCAL),
    ("64:ff9b::169.254.169.254", LINK_LOCAL, LINK_LOCAL),
    ("64:ff9b::6464:64c8", METADATA, METADATA),
    ("64:ff9b::a83f:8110", METADATA, METADATA),
    ("64:ff9b::7f00:1", None, LOOPBACK),
    ("64:ff9b::a00:1", None, PRIVATE),
    ("64:ff9b::6440:1", None, SHARED),
    ("64:ff9b::6810:1", None, None), // 104.16.0.1
    // Local-use NAT64 in its /48 layout (the u octet between the halves);
    // strict refuses the rest of the prefix.
    ("64:ff9b:1:a9fe:a9:fe00::", LINK_LOCAL, LINK_LOCAL),
    ("64:ff9b:1:6464:64:c800::", METADATA, METADATA),
    ("64:ff9b:1:6810:0:100::", None, TRANSLATION),
    ("64:ff9b:1:ffff:ffff::a9fe:a9fe", None, TRANSLATION),
    // 6to4: bits 16 to 47, whatever follows.
    ("2002:a9fe:a9fe::", LINK_LOCAL, LINK_LOCAL),
    ("2002:a9fe:a9fe:1234::1", LINK_LOCAL, LINK_LOCAL),
    ("2002:6464:64c8::1", METADATA, METADATA),
    ("2002:7f00:1::", None, LOOPBACK),
    ("2002:c0a8:101::", None, PRIVATE),
    ("2002:6810:1::", None, None),
    // IPv4-translated (SIIT) and IPv4-compatible: the last 32 bits.
    ("::ffff:0:a9fe:a9fe", LINK_LOCAL, LINK_LOCAL),
    ("::ffff:0:6464:64c8", METADATA, METADATA),
    ("::ffff:0:a00:1", None, PRIVATE),
    ("::ffff:0:6810:1", None, None),
    ("::a9fe:a9fe", LINK_LOCAL, LINK_LOCAL),
    ("::7f00:1", None, LOOPBACK),
    ("::6810:1", None, None),
    ("::1", None, LOOPBACK),
    ("::", None, UNSPECIFIED),
    // IPv4-mapped: leaves as IPv4.
    ("::ffff:169.254.169.254", LINK_LOCAL, LINK_LOCAL),
    ("::ffff:100.100.100.200", METADATA, METADATA),
    // Teredo: the client is the inverted last 32 bits (judged as that
    // IPv4 address); strict also refuses the whole prefix.
    (
        "2001:0:4136:e378:8000:63bf:5601:5601",
        LINK_LOCAL,
        TRANSLATION,
    ),
    ("2001:0:4136:e378:8000:63bf:3fff:fdd2", None, TRANSLATION),
    ("2001:db8::1", None, None), // documentation: outside 2001::/32
    // The public internet stays open.
    ("104.16.0.1", None, None),
    ("2606:4700::1", None, None),
];

#[test]
fn every_listed_address_is_judged_under_both_postures() {
    for &(address, relaxed, strict) in VECTORS {
        assert_eq!(
            blocked_reason(Posture::Relaxed, address),
            relaxed,
            "relaxed, {address}"
        );
        assert_eq!(
            blocked_reason(Posture::Strict, address),
            strict,
            "strict, {address}"
        );
    }
}

#[test]
fn every_metadata_address_is_refused_by_both_postures() {
    let metadata = every_range()
        .iter()
        .filter(|range| range.kind == RangeKind::CloudMetadata);
    for range in metadata {
        for posture in Posture::ALL {
            assert_eq!(
                blocked_reason_ip(posture, range.network),
                METADATA,
                "{posture}, {range} ({})",
                range.source
            );
        }
    }
}

/// The kernel's list: what each posture refuses, as nftables and a
/// NetworkPolicy get it.
#[test]
fn the_refused_networks_name_the_embedded_forms_and_never_nest() {
    let relaxed: Vec<String> = Posture::Relaxed
        .refused_ranges()
        .map(|range| range.to_string())
        .collect();
    for wanted in [
        "169.254.0.0/16",
        "100.100.100.200/32",
        "168.63.129.16/32",
        "192.0.0.192/32",
        "fe80::/10",
        "fd00:ec2::254/128",
        "fd20:ce::254/128",
        "64:ff9b::a9fe:0/112",
        "64:ff9b::6464:64c8/128",
        "2002:a9fe::/32",
        "::ffff:0:a9fe:0/112",
        "::a9fe:0/112",
        "64:ff9b:1:a9fe::/64",
    ] {
        assert!(
            relaxed.contains(&wanted.to_string()),
            "relaxed: {wanted} in {relaxed:?}"
        );
    }
    assert!(!relaxed.iter().any(|range| range.starts_with("100.64.")));
    let strict: Vec<String> = Posture::Strict
        .refused_ranges()
        .map(|range| range.to_string())
        .collect();
    for wanted in [
        "100.64.0.0/10",
        "192.0.0.0/24",
        "198.18.0.0/15",
        "fec0::/10",
        "2001::/32",
        "64:ff9b:1::/48",
        "::/104",
        "64:ff9b::6440:0/106",
    ] {
        assert!(
            strict.contains(&wanted.to_string()),
            "strict: {wanted} in {strict:?}"
        );
    }
    // Covered by a wider range: left out, so the sets never overlap.
    for covered in ["100.100.100.200/32", "::1/128", "fd00:ec2::254/128"] {
        assert!(!strict.contains(&covered.to_string()), "{covered}");
    }
    for posture in Posture::ALL {
        let ranges: Vec<Range> = posture.refused_ranges().collect();
        for (i, a) in ranges.iter().enumerate() {
            for b in &ranges[i + 1..] {
                assert!(
                    !a.covers(b) && !b.covers(a),
                    "{posture}: {a} and {b} overlap"
                );
            }
        }
    }
}

/// `ip` written in `embedding`'s place.
fn embed(embedding: &Embedding, ip: Ipv4Addr) -> IpAddr {
    let exact = Range {
        network: IpAddr::V4(ip),
        prefix_len: 32,
        kind: RangeKind::Loopback,
        source: "",
    };
    embedding.carrying(&exact).unwrap().network
}

mod properties {
    use proptest::prelude::*;

    use super::*;

    proptest! {
        /// Any IPv4 address written inside IPv6 meets the IPv4's verdict
        /// (strict refusing local-use NAT64 whole is the one difference).
        #[test]
        fn an_embedded_ipv4_is_judged_as_the_ipv4(bits in any::<u32>()) {
            let v4 = Ipv4Addr::from(bits);
            for embedding in &EMBEDDINGS {
                let v6 = embed(embedding, v4);
                // `::` and `::1` are IPv4-compatible 0.0.0.0/0.0.0.1 too,
                // and keep their own words.
                if embedding.prefix_len == 96 && embedding.prefix.is_unspecified() && bits < 2 {
                    continue;
                }
                for posture in Posture::ALL {
                    let mut want = blocked_reason_ip(posture, IpAddr::V4(v4));
                    if want.is_none() && posture == Posture::Strict && embedding.prefix_len == 48 {
                        want = TRANSLATION;
                    }
                    prop_assert_eq!(blocked_reason_ip(posture, v6), want, "{} {}", posture, v6);
                }
            }
        }
    }
}
