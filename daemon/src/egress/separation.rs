//! No road between sandboxes: a connection to a sandbox's socket is
//! accepted only from a socket of the same sandbox.
//!
//! Every sandbox has a cgroup of its own one level below the sandboxes
//! cgroup, and a socket keeps the cgroup of the process that made it. On
//! the way out (output hook), every TCP SYN a sandbox's socket sends
//! records (conntrack id, sequence number, sender's sandbox cgroup) in
//! `syn_owner` and (conntrack id, sequence number) in `syn_sent`; every
//! UDP datagram in a flow's original direction records (conntrack id,
//! sender's sandbox cgroup) in `udp_owner`. On the way in (input hook), nft
//! looks the receiving socket up by the packet's addresses; a SYN or an
//! original-direction datagram to a socket under the sandboxes cgroup is
//! refused unless the receiver's own sandbox recorded it. TCP gets a reset
//! (ECONNREFUSED at once), UDP an ICMP port unreachable (ECONNREFUSED on a
//! connected socket).
//!
//! Why these keys, measured: a conntrack id alone is not enough. A new
//! connection that reuses the 4-tuple of one that ended (the kernel hands
//! the same ephemeral port out again quickly on loopback) gets a conntrack
//! entry with the same id, or is even taken for a packet of the old entry
//! (`ct state established`); B then met A's fresh pair and 1-30 % of its
//! connects to A got through. The SYN's sequence number is the kernel's
//! random initial one, never the same twice. And a SYN that meets a
//! TIME_WAIT socket of the same 4-tuple (nft's lookup finds that, not the
//! listener, and TCP then hands the SYN to the listener) belongs to no
//! known sandbox: when a sandbox sent it (`syn_sent`) to a port a sandbox
//! served TCP from in the last 90 s (`served_ports`, recorded from every
//! reply-direction packet of a sandbox's socket), it is refused.
//!
//! Every address the host answers on is covered — 127.0.0.1, ::1, and any
//! other address of the host — since a packet to a local address always
//! passes the input hook. Replies to a sandbox's own connections (SYN-ACK,
//! reply-direction datagrams) are not looked at, so its outbound traffic
//! is untouched.
//!
//! What this decides for the host: a host process, or another machine,
//! opening a connection to a sandbox's socket is refused too (nothing is
//! recorded for it): a sandbox is a client of the host's services, never
//! a server to anyone but itself. This is not a boundary against the host
//! (its processes are trusted): a host SYN that meets a TIME_WAIT socket
//! passes.
//!
//! What it costs a sandbox: its own SYN that meets a TIME_WAIT socket on
//! a port a sandbox served from is refused too (whose the socket was
//! cannot be told), so a sandbox that opens connections in a tight loop
//! to its own server that closes first sees some refused once its ports
//! come round again (measured: 50-65 % of 5,000 connects in 0.5 s). Its
//! connects to the host's services are not affected (20,000 in 2.5 s, none
//! refused, at the rate without the rules). Not covered:
//! a UDP datagram from B that reuses the exact 4-tuple of A's flow to A's
//! own socket within [`PAIR_TIMEOUT`] of A's last datagram on it (B must
//! bind the source port A's closed socket held), and one B sends from an
//! address and port it bound that A's flow was sent to (a reply-direction
//! datagram, which is not looked at; B must bind the port after A's own
//! server there closed).
//!
//! Why sets with a short timeout: a pair is needed only between a packet's
//! output and input hooks on the same host (microseconds on loopback); a
//! retransmitted SYN or datagram refreshes it. A full set fails closed:
//! the packet records nothing, and its own sandbox's connection is
//! refused, never another's accepted.

use super::cgroup_target::CgroupTarget;

/// The dynamic sets: name, what each key is made of, and how long an
/// element lives.
const SETS: [(&str, &str, &str); 4] = [
    (
        "syn_owner",
        "ct id . tcp sequence . socket cgroupv2 level {L}",
        PAIR_TIMEOUT,
    ),
    ("syn_sent", "ct id . tcp sequence", PAIR_TIMEOUT),
    (
        "udp_owner",
        "ct id . socket cgroupv2 level {L}",
        PAIR_TIMEOUT,
    ),
    ("served_ports", "tcp sport", SERVED_TIMEOUT),
];

/// How long a recorded pair lives after the last packet that refreshed it.
const PAIR_TIMEOUT: &str = "2s";

/// How long a TCP port a sandbox served from is remembered: longer than
/// the 60 s a TIME_WAIT socket lives (written as nft lists it).
const SERVED_TIMEOUT: &str = "1m30s";

/// The most pairs per set at once: 32,768 opening packets a second from
/// all the sandboxes together at [`PAIR_TIMEOUT`] (about 11,000 were
/// live under one runner's loop of 8,000 connects a second). About 100
/// bytes each, allocated only as pairs are recorded.
const MAX_PAIRS: u32 = 65_536;

/// A SYN (no ACK): the packet that opens a TCP connection.
const SYN: &str = "tcp flags syn / syn,ack";

/// The rules that keep the sandboxes under `target` apart.
#[derive(Debug, Clone, Copy)]
pub struct Separation<'a> {
    pub target: &'a CgroupTarget,
}

impl Separation<'_> {
    /// The sets' declarations.
    pub fn set_declarations(&self) -> Vec<String> {
        SETS.iter()
            .map(|(name, key, timeout)| {
                format!(
                    "set {name} {{ typeof {}; flags dynamic,timeout; timeout {timeout}; size {MAX_PAIRS}; }}",
                    self.key(key)
                )
            })
            .collect()
    }

    /// The output-hook rules: a sandbox's opening packets record their
    /// pairs. They run after the posture's refusals, so a refused packet
    /// records nothing.
    pub fn record_rules(&self) -> Vec<String> {
        let under = self.under_sandboxes();
        vec![
            format!(
                "{under} {SYN} update @syn_owner {{ {} }} update @syn_sent {{ {} }}",
                self.key(SETS[0].1),
                self.key(SETS[1].1)
            ),
            // Every packet a sandbox's TCP socket sends as the server.
            format!("{under} ct direction reply update @served_ports {{ tcp sport }}"),
            format!(
                "{under} meta l4proto udp ct direction original update @udp_owner {{ {} }}",
                self.key(SETS[2].1)
            ),
        ]
    }

    /// The input-hook rules: SYNs go to `opening`; a datagram to a
    /// sandbox's socket not recorded by that sandbox goes to `foreign`.
    pub fn input_rules(&self) -> Vec<String> {
        vec![
            format!("{SYN} jump opening"),
            format!(
                "{} meta l4proto udp ct direction original {} != @udp_owner jump foreign",
                self.under_sandboxes(),
                self.key(SETS[2].1)
            ),
        ]
    }

    /// The `opening` chain, for every SYN: to a sandbox's socket, only from
    /// that sandbox; to any other full socket, on its way; to a TIME_WAIT
    /// socket (whose owner nft cannot see), refused when a sandbox sent it
    /// to a port a sandbox served from lately.
    pub fn opening_rules(&self) -> Vec<String> {
        vec![
            format!(
                "{} {} != @syn_owner jump foreign",
                self.under_sandboxes(),
                self.key(SETS[0].1)
            ),
            "socket wildcard { 0, 1 } return".to_string(),
            format!(
                "socket transparent {{ 0, 1 }} {} @syn_sent tcp dport @served_ports jump foreign",
                self.key(SETS[1].1)
            ),
        ]
    }

    /// The `foreign` chain: how a refused opening packet is answered.
    pub fn foreign_rules() -> Vec<String> {
        vec![
            "meta l4proto tcp reject with tcp reset".to_string(),
            "reject".to_string(),
        ]
    }

    /// What the rules do, for `status`.
    pub fn describe(table: &str) -> String {
        format!(
            "nftables table {table} accepts a connection to a sandbox's socket (TCP or UDP, IPv4 or IPv6, on any address of the host) only from a socket of the same sandbox: other sandboxes, host processes and other machines are refused"
        )
    }

    /// A set's key with the sandbox level filled in.
    fn key(&self, key: &str) -> String {
        // A sandbox's own cgroup: one below the sandboxes cgroup.
        key.replace("{L}", &(self.target.level + 1).to_string())
    }

    /// The match on a socket made under the sandboxes cgroup.
    fn under_sandboxes(&self) -> String {
        format!(
            "socket cgroupv2 level {} \"{}\"",
            self.target.level, self.target.nft_path
        )
    }
}

/// True when `flat` (a whitespace-flattened listing) declares every set
/// as [`Separation::set_declarations`] does. nft 1.0.6 lists a `typeof`'s
/// cgroup level as 0 whatever was loaded, so keys are not compared; the
/// rules that use the sets are, word for word.
pub fn sets_are_declared(flat: &str) -> Result<(), String> {
    for (name, _, timeout) in SETS {
        let Some(start) = flat.find(&format!("set {name} {{")) else {
            return Err(format!("its set {name} is missing"));
        };
        let set = &flat[start..];
        let set = &set[..set.find('}').unwrap_or(set.len())];
        let declared = set.contains("typeof ")
            && set.contains("flags dynamic,timeout")
            && set.contains(&format!("timeout {timeout}"))
            && set.contains(&format!("size {MAX_PAIRS}"));
        if !declared {
            return Err(format!("its set {name} is altered: `{set}`"));
        }
    }
    Ok(())
}
