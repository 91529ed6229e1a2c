//! The table inside a sandbox's own network namespace (`[network] mode =
//! "private"`): the posture judged on the way out, as the host's table
//! judges a shared-network sandbox, and everything else that leaves for
//! an address outside the namespace diverted to the daemon's relay there.
//!
//! Two chains on the namespace's output hook:
//! - `output` (priority `mangle`, before the address is rewritten): the
//!   namespace's own addresses pass; then the posture's sets refuse (TCP
//!   with a reset, so a refused connect fails with ECONNREFUSED at once;
//!   anything else dropped, EPERM to the sender); then whatever is neither
//!   TCP nor a DNS query is dropped: the relay carries only those.
//! - `divert` (nat, `dstnat`): DNS queries to any address go to the
//!   relay's UDP sockets on port 53, the runner's endpoints on the
//!   loopback (when the posture lets the loopback be reached) and every
//!   TCP connection to an address outside the namespace go to the relay's
//!   listener on [`RELAY_PORT`]. The relay reads where each was going
//!   (`SO_ORIGINAL_DST`) and dials it from the host.
//!
//! Nothing inside can change it: the namespace belongs to the host's user
//! namespace and a sandbox never holds CAP_NET_ADMIN there.

use std::net::{IpAddr, Ipv4Addr};

use sandboxd_protocol::egress::{blocked_reason_ip, Posture};

/// The relay's TCP port in every sandbox's namespace: below 1024, so the
/// sandbox (never root, never with a capability) cannot bind it itself.
pub const RELAY_PORT: u16 = 1;

/// The relay's DNS port in every sandbox's namespace, on 127.0.0.1 and ::1.
pub const DNS_PORT: u16 = 53;

/// Whether `posture` lets a sandbox reach `ip` (`None`: anything goes).
pub fn allows(posture: Option<Posture>, ip: IpAddr) -> bool {
    posture.is_none_or(|posture| blocked_reason_ip(posture, ip).is_none())
}

/// The `output` chain's rules after the posture's jump (when there is one).
pub(super) fn judge_rules(posture: Option<Posture>) -> Vec<String> {
    let mut rules = vec!["fib daddr type local accept".to_string()];
    if posture.is_some() {
        rules.push("jump sandboxes".to_string());
    }
    rules.push(format!("udp dport != {DNS_PORT} drop"));
    rules.push("meta l4proto != { tcp, udp } drop".to_string());
    rules
}

/// The `divert` chain's rules: DNS, the endpoints, then all other TCP.
pub(super) fn divert_rules(posture: Option<Posture>, endpoint_ports: &[u16]) -> Vec<String> {
    let mut rules = vec![format!(
        "meta l4proto udp udp dport {DNS_PORT} redirect to :{DNS_PORT}"
    )];
    if !endpoint_ports.is_empty() && allows(posture, IpAddr::V4(Ipv4Addr::LOCALHOST)) {
        let ports = endpoint_ports
            .iter()
            .map(u16::to_string)
            .collect::<Vec<_>>()
            .join(", ");
        rules.push(format!(
            "ip daddr 127.0.0.0/8 tcp dport {{ {ports} }} redirect to :{RELAY_PORT}"
        ));
        rules.push(format!(
            "ip6 daddr ::1 tcp dport {{ {ports} }} redirect to :{RELAY_PORT}"
        ));
    }
    rules.push("fib daddr type local return".to_string());
    rules.push(format!("meta l4proto tcp redirect to :{RELAY_PORT}"));
    rules
}

/// The `output` and `divert` chains' first lines.
pub(super) const JUDGE_HOOK: &str = "type filter hook output priority mangle; policy accept;";
pub(super) const DIVERT_HOOK: &str = "type nat hook output priority -100; policy accept;";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn strict_keeps_the_endpoints_on_the_namespaces_own_loopback() {
        let relaxed = divert_rules(Some(Posture::Relaxed), &[8080]).join("\n");
        assert!(
            relaxed.contains("tcp dport { 8080 } redirect to :1"),
            "{relaxed}"
        );
        let strict = divert_rules(Some(Posture::Strict), &[8080]).join("\n");
        assert!(!strict.contains("8080"), "{strict}");
        assert!(
            strict.ends_with("meta l4proto tcp redirect to :1"),
            "{strict}"
        );
    }

    #[test]
    fn the_posture_is_judged_only_when_there_is_one() {
        assert!(judge_rules(Some(Posture::Strict)).contains(&"jump sandboxes".to_string()));
        assert!(!judge_rules(None).contains(&"jump sandboxes".to_string()));
        assert!(allows(None, IpAddr::V4(Ipv4Addr::new(169, 254, 169, 254))));
        assert!(!allows(
            Some(Posture::Relaxed),
            IpAddr::V4(Ipv4Addr::new(169, 254, 169, 254))
        ));
    }
}
