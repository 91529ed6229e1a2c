//! The daemon's nftables table: rendered from the shared address table,
//! and checked against what the kernel lists back.
//!
//! One table of the daemon's own (`inet`, so IPv4 and IPv6 in one place),
//! never touching anyone else's. On the process tier its output-hook chain
//! sends every packet whose socket belongs to a process under the
//! sandboxes cgroup to a chain that refuses the posture's ranges; on a
//! container tier its forward- and input-hook chains do the same for every
//! packet arriving from the daemon's own bridge (and under `strict` the
//! input chain refuses the host itself, whatever its addresses). TCP gets
//! a reset (the connect fails at once with ECONNREFUSED instead of
//! hanging), everything else is dropped (a UDP send from the host fails
//! with EPERM). The check is by destination address on every packet, so a
//! host name that resolves to a refused address is refused whatever DNS
//! said.
//!
//! On the process tier the same table also keeps the sandboxes apart
//! ([`super::separation`]), on every posture: under `egress = "none"` it
//! holds only those rules.

use std::collections::BTreeSet;
use std::fmt::Write as _;
use std::net::IpAddr;

use sandboxd_protocol::egress::{Posture, Range};

use super::cgroup_target::CgroupTarget;
use super::divert;
use super::nft;
use super::separation::{self, Separation};
use super::teredo;

/// Whose traffic the rules hold.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Matched {
    /// Every socket made under this cgroup (the process tier).
    Cgroup(CgroupTarget),
    /// Every packet arriving from this bridge interface (a container
    /// tier's own network). Matched by name, so the rules hold before the
    /// bridge exists and whenever it is recreated.
    Bridge(String),
    /// Every packet leaving a sandbox's own network namespace, where the
    /// table also diverts what leaves to the daemon's relay (these TCP
    /// ports of the loopback are the runner's endpoints on the host's).
    Namespace(Vec<u16>),
}

impl Matched {
    /// What the table's name is derived from.
    fn key(&self) -> String {
        match self {
            Matched::Cgroup(target) => target.nft_path.clone(),
            Matched::Bridge(bridge) => format!("bridge:{bridge}"),
            Matched::Namespace(_) => "namespace".to_string(),
        }
    }
}

/// The rules for one posture on one sandboxes cgroup or bridge.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Ruleset {
    /// `None`: `egress = "none"`, no range is refused.
    pub posture: Option<Posture>,
    /// Whether the table keeps the sandboxes apart (process tier only: a
    /// container tier's network does that itself).
    pub separate: bool,
    pub matched: Matched,
    /// `sandboxd_<12 hex>`: one per sandboxes cgroup (or bridge), so
    /// several daemons on one host each own a table and never touch
    /// another's.
    pub table: String,
}

impl Ruleset {
    /// The posture's rules, and on a cgroup the separation's too.
    pub fn new(posture: Option<Posture>, matched: Matched) -> Ruleset {
        let hex = crate::digest::sha256_hex(matched.key().as_bytes(), 6);
        Ruleset {
            posture,
            separate: matches!(matched, Matched::Cgroup(_)),
            matched,
            table: format!("sandboxd_{hex}"),
        }
    }

    /// The same without the separation's rules: the fallback for a kernel
    /// or nft that cannot load them.
    pub fn without_separation(self) -> Ruleset {
        Ruleset {
            separate: false,
            ..self
        }
    }

    /// True when there is nothing to load.
    pub fn is_empty(&self) -> bool {
        self.posture.is_none() && !self.separate
    }

    /// `inet sandboxd_…`, as nft commands name it.
    pub fn table_spec(&self) -> String {
        format!("inet {}", self.table)
    }

    /// One nft script that replaces the table atomically: nft applies a
    /// file as one transaction, so an existing table (a restarted daemon's)
    /// stays in force until the new one takes its place, with no window.
    pub fn script(&self) -> String {
        let table = &self.table;
        let mut script = String::new();
        // Creating it first makes the delete succeed on a fresh host.
        let _ = writeln!(script, "table inet {table} {{}}");
        let _ = writeln!(script, "delete table inet {table}");
        script + &self.declaration()
    }

    /// The table alone, for a network namespace that has none yet: no
    /// delete to commit, which costs the kernel a grace period (8 ms of a
    /// 15 ms load, measured in a new namespace).
    pub fn declaration(&self) -> String {
        let table = &self.table;
        let mut script = String::new();
        let _ = writeln!(script, "table inet {table} {{");
        for (name, family) in self.refused_sets() {
            let elements: Vec<String> = self
                .refused(name == "refused_ipv6")
                .map(|range| range.to_string())
                .collect();
            let _ = writeln!(
                script,
                "    set {name} {{ type {family}; flags interval; elements = {{ {} }} }}",
                elements.join(", ")
            );
        }
        if self.posture.is_some() {
            let _ = writeln!(script, "    {}", teredo::declaration(self.refused(false)));
        }
        for declaration in self
            .separation()
            .iter()
            .flat_map(Separation::set_declarations)
        {
            let _ = writeln!(script, "    {declaration}");
        }
        for chain in self.chains() {
            let _ = writeln!(script, "    chain {} {{", chain.name);
            for line in chain.lines() {
                let _ = writeln!(script, "        {line}");
            }
            let _ = writeln!(script, "    }}");
        }
        let _ = writeln!(script, "}}");
        script
    }

    /// Checks `listing` (`nft list table inet …`) holds exactly these rules:
    /// every chain rule for rule, both sets element for element, and the
    /// cgroup still resolving to its path (nft lists a bare id once the
    /// cgroup it was loaded for is gone, and then nothing matches).
    pub fn verify(&self, listing: &str) -> Result<(), String> {
        let flat = listing.split_whitespace().collect::<Vec<_>>().join(" ");
        for chain in self.chains() {
            let wanted = format!("chain {} {{ {} }}", chain.name, chain.lines().join(" "));
            if !flat.contains(&wanted) {
                let hint = match &self.matched {
                    Matched::Cgroup(target) => {
                        format!(" (is the cgroup {} still there?)", target.dir.display())
                    }
                    Matched::Bridge(_) | Matched::Namespace(_) => String::new(),
                };
                return Err(format!(
                    "its {} chain is not `{}`{hint}",
                    chain.name,
                    chain.rules.join("; ")
                ));
            }
        }
        if self.separate {
            separation::sets_are_declared(&flat)?;
        }
        for (name, _) in self.refused_sets() {
            let v6 = name == "refused_ipv6";
            let listed = set_elements(&flat, name)
                .ok_or_else(|| format!("its set {name} is missing or unreadable"))?;
            let wanted: BTreeSet<(IpAddr, u8)> = self
                .refused(v6)
                .map(|range| (range.network, range.prefix_len))
                .collect();
            if listed != wanted {
                return Err(format!(
                    "its set {name} holds {listed:?}, not the {} posture's {wanted:?}",
                    self.posture.map_or("none", Posture::as_str)
                ));
            }
        }
        if self.posture.is_some() {
            teredo::verify(&flat, self.refused(false))?;
        }
        Ok(())
    }

    /// What the posture's rules hold, for `status`.
    pub fn describe(&self) -> String {
        if self.posture.is_none() {
            return format!(
                "nftables table {} refuses no destination (egress = \"none\")",
                self.table_spec()
            );
        }
        match &self.matched {
            Matched::Cgroup(target) => format!(
                "nftables table {} refuses the posture's ranges to every socket under cgroup {}",
                self.table_spec(),
                target.dir.display()
            ),
            Matched::Bridge(bridge) => format!(
                "nftables table {} refuses the posture's ranges{} to every packet from bridge {bridge}",
                self.table_spec(),
                if self.posture == Some(Posture::Strict) {
                    ", and the host itself,"
                } else {
                    ""
                }
            ),
            Matched::Namespace(_) => format!(
                "nftables table {} in each sandbox's network namespace refuses the posture's ranges",
                self.table_spec()
            ),
        }
    }

    /// What the separation's rules hold, for `status`, when loaded.
    pub fn describe_separation(&self) -> Option<String> {
        self.separation()
            .map(|_| Separation::describe(&self.table_spec()))
    }

    /// The separation's rules, when this table holds them.
    fn separation(&self) -> Option<Separation<'_>> {
        match &self.matched {
            Matched::Cgroup(target) if self.separate => Some(Separation { target }),
            _ => None,
        }
    }

    /// The posture's address sets, and their nft types.
    fn refused_sets(&self) -> Vec<(&'static str, &'static str)> {
        if self.posture.is_none() {
            return Vec::new();
        }
        vec![("refused_ipv4", "ipv4_addr"), ("refused_ipv6", "ipv6_addr")]
    }

    /// The table's chains, the hooked ones first.
    fn chains(&self) -> Vec<Chain> {
        let sandboxes = Chain {
            name: "sandboxes",
            head: None,
            rules: SANDBOX_RULES
                .iter()
                .chain(&teredo::rules())
                .map(|rule| rule.to_string())
                .collect(),
        };
        match (&self.matched, self.posture) {
            (Matched::Namespace(endpoint_ports), posture) => {
                namespace_chains(posture, endpoint_ports, sandboxes)
            }
            (_, None) => self.cgroup_chains(None),
            (Matched::Cgroup(_), Some(_)) => self.cgroup_chains(Some(sandboxes)),
            (Matched::Bridge(bridge), Some(posture)) => bridge_chains(bridge, posture, sandboxes),
        }
    }

    /// A cgroup's chains: the posture's (`sandboxes`, when given) on the
    /// way out, then the separation's; none for a bridge.
    fn cgroup_chains(&self, sandboxes: Option<Chain>) -> Vec<Chain> {
        let Matched::Cgroup(target) = &self.matched else {
            return Vec::new();
        };
        let mut output = Vec::new();
        if sandboxes.is_some() {
            output.push(format!(
                "socket cgroupv2 level {} \"{}\" jump sandboxes",
                target.level, target.nft_path
            ));
        }
        let separation = self.separation();
        output.extend(separation.iter().flat_map(Separation::record_rules));
        let mut chains = Vec::new();
        if !output.is_empty() {
            chains.push(Chain {
                name: "output",
                head: Some(hook("output")),
                rules: output,
            });
        }
        if let Some(separation) = separation {
            chains.push(Chain {
                name: "input",
                head: Some(hook("input")),
                rules: separation.input_rules(),
            });
            chains.push(Chain {
                name: "opening",
                head: None,
                rules: separation.opening_rules(),
            });
            chains.push(Chain {
                name: "foreign",
                head: None,
                rules: Separation::foreign_rules(),
            });
        }
        chains.extend(sandboxes);
        chains
    }

    fn refused(&self, v6: bool) -> impl Iterator<Item = Range> {
        self.posture
            .into_iter()
            .flat_map(|posture| posture.refused_ranges())
            .filter(move |range| range.network.is_ipv6() == v6)
    }
}

/// A bridge's chains: the posture's on what it forwards, and the host
/// itself held to it (or refused whole under `strict`).
fn bridge_chains(bridge: &str, posture: Posture, sandboxes: Chain) -> Vec<Chain> {
    let host = match posture {
        // Whatever address the host answers on, the host is not
        // for sandboxes (IPv6 neighbour discovery excepted).
        Posture::Strict => vec![
            "meta l4proto tcp reject with tcp reset".to_string(),
            "meta l4proto != ipv6-icmp drop".to_string(),
        ],
        Posture::Relaxed => vec!["jump sandboxes".to_string()],
    };
    vec![
        Chain {
            name: "forward",
            head: Some(hook("forward")),
            rules: vec![format!("iifname \"{bridge}\" jump sandboxes")],
        },
        Chain {
            name: "input",
            head: Some(hook("input")),
            rules: vec![format!("iifname \"{bridge}\" jump host")],
        },
        Chain {
            name: "host",
            head: None,
            rules: host,
        },
        sandboxes,
    ]
}

/// A sandbox namespace's chains (see [`divert`]): the judge, the
/// diversion to the relay, and the posture's when there is one.
fn namespace_chains(
    posture: Option<Posture>,
    endpoint_ports: &[u16],
    sandboxes: Chain,
) -> Vec<Chain> {
    let mut chains = vec![
        Chain {
            name: "output",
            head: Some(divert::JUDGE_HOOK.to_string()),
            rules: divert::judge_rules(posture),
        },
        Chain {
            name: "divert",
            head: Some(divert::DIVERT_HOOK.to_string()),
            rules: divert::divert_rules(posture, endpoint_ports),
        },
    ];
    chains.extend(posture.map(|_| sandboxes));
    chains
}

/// One chain: its hook line (base chains only), then its rules.
struct Chain {
    name: &'static str,
    head: Option<String>,
    rules: Vec<String>,
}

impl Chain {
    fn lines(&self) -> Vec<&str> {
        self.head
            .iter()
            .chain(&self.rules)
            .map(String::as_str)
            .collect()
    }
}

/// A base chain's first line: it sees every packet of `hook`, accepting
/// what no rule refuses (other tables' chains still have their say).
fn hook(hook: &str) -> String {
    format!("type filter hook {hook} priority filter; policy accept;")
}

const SANDBOX_RULES: [&str; 4] = [
    "ip daddr @refused_ipv4 meta l4proto tcp reject with tcp reset",
    "ip daddr @refused_ipv4 drop",
    "ip6 daddr @refused_ipv6 meta l4proto tcp reject with tcp reset",
    "ip6 daddr @refused_ipv6 drop",
];

/// The elements of set `name` in a whitespace-flattened listing, as
/// `(network, prefix)`; a bare address is a full-length prefix.
fn set_elements(flat: &str, name: &str) -> Option<BTreeSet<(IpAddr, u8)>> {
    nft::listed_elements(flat, name)?
        .split(',')
        .map(|element| {
            let element = element.trim();
            let (address, prefix) = match element.split_once('/') {
                Some((address, prefix)) => (address, Some(prefix.parse::<u8>().ok()?)),
                None => (element, None),
            };
            let ip: IpAddr = address.parse().ok()?;
            let full = if ip.is_ipv4() { 32 } else { 128 };
            Some((ip, prefix.unwrap_or(full)))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::*;

    fn ruleset(posture: Posture) -> Ruleset {
        let target = CgroupTarget::new(
            Path::new("/sys/fs/cgroup/unified"),
            Path::new("d/sandboxes"),
        )
        .unwrap();
        Ruleset::new(Some(posture), Matched::Cgroup(target)).without_separation()
    }

    /// What nft 1.0.6 lists back for the strict script (its own layout).
    const STRICT_LISTING: &str = r#"table inet TABLE {
	set refused_ipv4 {
		type ipv4_addr
		flags interval
		elements = { @V4@ }
	}

	set refused_ipv6 {
		type ipv6_addr
		flags interval
		elements = { @V6@ }
	}

	set refused_teredo {
		typeof @nh,288,32
		flags interval
		elements = { @T4@ }
	}

	chain output {
		type filter hook output priority filter; policy accept;
		socket cgroupv2 level 2 "unified/d/sandboxes" jump sandboxes
	}

	chain sandboxes {
		ip daddr @refused_ipv4 meta l4proto tcp reject with tcp reset
		ip daddr @refused_ipv4 drop
		ip6 daddr @refused_ipv6 meta l4proto tcp reject with tcp reset
		ip6 daddr @refused_ipv6 drop
		ip6 daddr 2001::/32 @nh,288,32 @refused_teredo meta l4proto tcp reject with tcp reset
		ip6 daddr 2001::/32 @nh,288,32 @refused_teredo drop
	}
}
"#;

    /// `template` with `posture`'s sets as nft lists them (one element a
    /// line, a bare address for a /32 or /128): the ranges come from the
    /// protocol's table, which its own tests check.
    fn listed(template: &str, posture: Posture) -> String {
        let elements = |v6: bool| {
            posture
                .refused_ranges()
                .filter(|range| range.network.is_ipv6() == v6)
                .map(|range| match (range.network, range.prefix_len) {
                    (IpAddr::V4(ip), 32) => ip.to_string(),
                    (IpAddr::V6(ip), 128) => ip.to_string(),
                    _ => range.to_string(),
                })
                .collect::<Vec<_>>()
                .join(",\n\t\t\t     ")
        };
        // Each IPv4 range inverted, as nft lists an interval of a raw
        // payload's set.
        let teredo = teredo::inverted(posture.refused_ranges())
            .map(|(first, last, _)| match first == last {
                true => format!("0x{first:08x}"),
                false => format!("0x{first:08x}-0x{last:08x}"),
            })
            .collect::<Vec<_>>()
            .join(", ");
        template
            .replace("@V4@", &elements(false))
            .replace("@V6@", &elements(true))
            .replace("@T4@", &teredo)
    }

    #[test]
    fn a_sandbox_namespace_gets_its_table_without_the_replace_prelude() {
        let ruleset = Ruleset::new(Some(Posture::Relaxed), Matched::Namespace(vec![7233]));
        let declared = ruleset.declaration();
        assert!(!declared.contains("delete table"), "{declared}");
        for part in [
            "chain output",
            "jump sandboxes",
            "chain divert",
            "tcp dport { 7233 } redirect to :1",
            "set refused_teredo",
        ] {
            assert!(declared.contains(part), "no `{part}` in {declared}");
        }
        assert!(ruleset.script().ends_with(&declared));
        assert!(ruleset.script().contains("delete table"));
    }

    #[test]
    fn the_script_is_built_from_the_shared_table() {
        let script = ruleset(Posture::Relaxed).script();
        for range in [
            "set refused_ipv4 { type ipv4_addr; flags interval; elements = { 169.254.0.0/16, ",
            "set refused_ipv6 { type ipv6_addr; flags interval; elements = { fe80::/10, ",
            "100.100.100.200/32",
            "fd00:ec2::254/128",
            "64:ff9b::a9fe:0/112",
            "2002:a9fe::/32",
        ] {
            assert!(script.contains(range), "{range}: {script}");
        }
        assert!(script.contains("socket cgroupv2 level 2 \"unified/d/sandboxes\" jump sandboxes"));
        let strict = ruleset(Posture::Strict).script();
        for range in [
            "127.0.0.0/8",
            "10.0.0.0/8",
            "172.16.0.0/12",
            "192.168.0.0/16",
            "0.0.0.0/8",
        ] {
            assert!(strict.contains(range), "{range}");
        }
        // `::` and `::1` lie in `::/104` (IPv4-compatible 0.0.0.0/8).
        for range in ["::/104", "fc00::/7", "fe80::/10", "fec0::/10", "2001::/32"] {
            assert!(strict.contains(range), "{range}");
        }
    }

    #[test]
    fn a_listing_of_the_same_rules_verifies() {
        let listing = listed(STRICT_LISTING, Posture::Strict);
        assert_eq!(ruleset(Posture::Strict).verify(&listing), Ok(()));
    }

    #[test]
    fn a_listing_that_differs_is_named() {
        let strict_listing = listed(STRICT_LISTING, Posture::Strict);
        // Relaxed's sets are smaller than what is listed.
        let error = ruleset(Posture::Relaxed)
            .verify(&strict_listing)
            .unwrap_err();
        assert!(error.contains("refused_ipv4"), "{error}");
        // The cgroup was removed after loading: nft lists its id.
        let stale = strict_listing.replace("\"unified/d/sandboxes\"", "405");
        let error = ruleset(Posture::Strict).verify(&stale).unwrap_err();
        assert!(error.contains("output chain"), "{error}");
        assert!(error.contains("is the cgroup"), "{error}");
        // Someone added a rule to our output chain.
        let added = strict_listing.replace("jump sandboxes\n", "jump sandboxes\n\t\taccept\n");
        assert!(ruleset(Posture::Strict).verify(&added).is_err());
        let gutted = strict_listing.replace("\t\tip daddr @refused_ipv4 drop\n", "");
        assert!(ruleset(Posture::Strict).verify(&gutted).is_err());
        assert!(ruleset(Posture::Strict).verify("").is_err());
    }

    fn separated(posture: Option<Posture>) -> Ruleset {
        let target = CgroupTarget::new(
            Path::new("/sys/fs/cgroup/unified"),
            Path::new("nettest/sandboxes"),
        )
        .unwrap();
        Ruleset::new(posture, Matched::Cgroup(target))
    }

    /// What nft 1.0.6 lists back for the relaxed script with the
    /// separation's rules (it lists the set's `typeof` level as 0).
    const SEPARATED_LISTING: &str = r#"table inet TABLE {
	set refused_ipv4 {
		type ipv4_addr
		flags interval
		elements = { @V4@ }
	}

	set refused_ipv6 {
		type ipv6_addr
		flags interval
		elements = { @V6@ }
	}

	set refused_teredo {
		typeof @nh,288,32
		flags interval
		elements = { @T4@ }
	}

	set syn_owner {
		typeof ct id . tcp sequence . socket cgroupv2 level 0
		size 65536
		flags dynamic,timeout
		timeout 2s
	}

	set syn_sent {
		typeof ct id . tcp sequence
		size 65536
		flags dynamic,timeout
		timeout 2s
	}

	set udp_owner {
		typeof ct id . socket cgroupv2 level 0
		size 65536
		flags dynamic,timeout
		timeout 2s
	}

	set served_ports {
		typeof tcp sport
		size 65536
		flags dynamic,timeout
		timeout 1m30s
	}

	chain output {
		type filter hook output priority filter; policy accept;
		socket cgroupv2 level 2 "unified/nettest/sandboxes" jump sandboxes
		socket cgroupv2 level 2 "unified/nettest/sandboxes" tcp flags syn / syn,ack update @syn_owner { ct id . tcp sequence . socket cgroupv2 level 3 } update @syn_sent { ct id . tcp sequence }
		socket cgroupv2 level 2 "unified/nettest/sandboxes" ct direction reply update @served_ports { tcp sport }
		socket cgroupv2 level 2 "unified/nettest/sandboxes" meta l4proto udp ct direction original update @udp_owner { ct id . socket cgroupv2 level 3 }
	}

	chain input {
		type filter hook input priority filter; policy accept;
		tcp flags syn / syn,ack jump opening
		socket cgroupv2 level 2 "unified/nettest/sandboxes" meta l4proto udp ct direction original ct id . socket cgroupv2 level 3 != @udp_owner jump foreign
	}

	chain opening {
		socket cgroupv2 level 2 "unified/nettest/sandboxes" ct id . tcp sequence . socket cgroupv2 level 3 != @syn_owner jump foreign
		socket wildcard { 0, 1 } return
		socket transparent { 0, 1 } ct id . tcp sequence @syn_sent tcp dport @served_ports jump foreign
	}

	chain foreign {
		meta l4proto tcp reject with tcp reset
		reject
	}

	chain sandboxes {
		ip daddr @refused_ipv4 meta l4proto tcp reject with tcp reset
		ip daddr @refused_ipv4 drop
		ip6 daddr @refused_ipv6 meta l4proto tcp reject with tcp reset
		ip6 daddr @refused_ipv6 drop
		ip6 daddr 2001::/32 @nh,288,32 @refused_teredo meta l4proto tcp reject with tcp reset
		ip6 daddr 2001::/32 @nh,288,32 @refused_teredo drop
	}
}
"#;

    #[test]
    fn the_separation_rides_with_every_posture_and_alone_under_none() {
        let relaxed = separated(Some(Posture::Relaxed));
        let separated_listing = listed(SEPARATED_LISTING, Posture::Relaxed);
        assert_eq!(relaxed.verify(&separated_listing), Ok(()));
        let script = relaxed.script();
        assert!(script.contains("set syn_owner { typeof ct id . tcp sequence . socket cgroupv2 level 3; flags dynamic,timeout; timeout 2s; size 65536; }"), "{script}");
        // The posture refuses first; only what it lets out is recorded.
        let jump = script.find("jump sandboxes").unwrap();
        let record = script.find("update @syn_owner").unwrap();
        assert!(jump < record, "{script}");

        let none = separated(None);
        assert!(!none.is_empty());
        let script = none.script();
        assert!(!script.contains("refused_ipv4") && !script.contains("jump sandboxes"));
        assert!(script.contains("jump foreign"), "{script}");
        let listing = separated_listing.replace(
            "\t\tsocket cgroupv2 level 2 \"unified/nettest/sandboxes\" jump sandboxes\n",
            "",
        );
        assert_eq!(none.verify(&listing), Ok(()));
        let error = none.verify(&separated_listing).unwrap_err();
        assert!(error.contains("output chain"), "{error}");
        assert!(none.clone().without_separation().is_empty());
        // Bridges are kept apart by their network, not this table.
        assert!(!Ruleset::new(Some(Posture::Strict), Matched::Bridge("b".into())).separate);
    }

    #[test]
    fn a_separation_altered_or_gone_is_named() {
        let relaxed = separated(Some(Posture::Relaxed));
        let separated_listing = listed(SEPARATED_LISTING, Posture::Relaxed);
        let gutted = separated_listing.replace("\t\treject\n", "");
        let error = relaxed.verify(&gutted).unwrap_err();
        assert!(error.contains("foreign chain"), "{error}");
        let shrunk = separated_listing.replacen("size 65536", "size 2", 1);
        let error = relaxed.verify(&shrunk).unwrap_err();
        assert!(error.contains("syn_owner"), "{error}");
        let unchecked =
            separated_listing.replace(" tcp dport @served_ports jump foreign", " accept");
        let error = relaxed.verify(&unchecked).unwrap_err();
        assert!(error.contains("opening chain"), "{error}");
        let opened = separated_listing.replace(" jump foreign", " accept");
        assert!(relaxed.verify(&opened).is_err());
    }

    #[test]
    fn each_sandboxes_cgroup_gets_a_table_of_its_own() {
        let other =
            CgroupTarget::new(Path::new("/sys/fs/cgroup"), Path::new("e/sandboxes")).unwrap();
        let a = ruleset(Posture::Strict).table;
        let b = Ruleset::new(Some(Posture::Strict), Matched::Cgroup(other)).table;
        let c = Ruleset::new(Some(Posture::Strict), Matched::Bridge("d/sandboxes".into())).table;
        assert_ne!(a, c);
        assert_ne!(a, b);
        assert!(a.starts_with("sandboxd_") && a.len() == "sandboxd_".len() + 12);
    }

    #[test]
    fn a_bridge_is_held_on_forward_and_input_and_strict_refuses_the_host() {
        let relaxed =
            Ruleset::new(Some(Posture::Relaxed), Matched::Bridge("sbxd0".into())).script();
        assert!(relaxed.contains("chain forward {\n        type filter hook forward priority filter; policy accept;\n        iifname \"sbxd0\" jump sandboxes\n"), "{relaxed}");
        assert!(relaxed.contains("iifname \"sbxd0\" jump host"), "{relaxed}");
        assert!(
            relaxed.contains("chain host {\n        jump sandboxes\n"),
            "{relaxed}"
        );
        let strict = Ruleset::new(Some(Posture::Strict), Matched::Bridge("sbxd0".into())).script();
        assert!(strict.contains("chain host {\n        meta l4proto tcp reject with tcp reset\n        meta l4proto != ipv6-icmp drop\n"), "{strict}");
    }
}
