//! No road between sandboxes: a connection to a sandbox's socket is
//! accepted only from a socket of the same sandbox (issue 16, item 6).
//!
//! Every sandbox has a cgroup of its own one level below the sandboxes
//! cgroup, and a socket keeps the cgroup of the process that made it. On
//! its way out, every packet that opens a connection (conntrack state
//! `new`: a TCP SYN, a UDP flow's first datagrams) from a sandbox's socket
//! records the pair (conntrack id, sender's sandbox cgroup) in the
//! dynamic set `conn_owner`. On its way in, a `new` packet whose receiving
//! socket (nft looks it up by the packet's addresses) lies under the
//! sandboxes cgroup is refused unless (its conntrack id, the receiver's
//! sandbox cgroup) is in the set: only the receiver's own sandbox made
//! that pair. TCP gets a reset (ECONNREFUSED at once), UDP an ICMP port
//! unreachable (ECONNREFUSED on a connected socket).
//!
//! Every address the host answers on is covered — 127.0.0.1, ::1, and any
//! other address of the host — since a packet to a local address always
//! passes the input hook. Replies (state `established`) are never looked
//! at, so a sandbox's own outbound connections are untouched.
//!
//! What this decides for the host: a host process, or another machine,
//! opening a connection to a sandbox's socket is refused too (no pair is
//! recorded for it). A sandbox is a client of the host's services, never
//! a server to anyone but itself.
//!
//! Why a set with a short timeout: the pair is needed only between the
//! packet's output and input hooks on the same host (microseconds on
//! loopback); a retransmitted SYN or datagram, still `new`, refreshes it.
//! A conntrack entry lives at least 10 s after its last packet (a refused
//! TCP connection's CLOSE state), longer than the timeout, so an expired
//! pair can never meet a conntrack id reused for another connection. A
//! full set fails closed: the opening packet records nothing and its own
//! sandbox's connection is refused, never another's accepted.

use super::cgroup_target::CgroupTarget;

/// The set's name in the table.
pub const SET: &str = "conn_owner";

/// How long a recorded pair lives after the last packet that refreshed it.
const PAIR_TIMEOUT: &str = "2s";

/// The most pairs at once: 32,768 new connections a second from all the
/// sandboxes together at [`PAIR_TIMEOUT`]. About 100 bytes each, allocated
/// only as pairs are recorded.
const MAX_PAIRS: u32 = 65_536;

/// The rules that keep the sandboxes under `target` apart.
#[derive(Debug, Clone, Copy)]
pub struct Separation<'a> {
    pub target: &'a CgroupTarget,
}

impl Separation<'_> {
    /// The depth of a sandbox's own cgroup: one below the sandboxes cgroup.
    fn sandbox_level(&self) -> usize {
        self.target.level + 1
    }

    /// The dynamic set's declaration.
    pub fn set_declaration(&self) -> String {
        format!(
            "set {SET} {{ typeof ct id . socket cgroupv2 level {}; flags dynamic,timeout; timeout {PAIR_TIMEOUT}; size {MAX_PAIRS}; }}",
            self.sandbox_level()
        )
    }

    /// The output-hook rule: a sandbox's opening packet records its pair.
    /// It runs after the posture's refusals, so a refused packet records
    /// nothing.
    pub fn record_rule(&self) -> String {
        format!(
            "{} ct state new update @{SET} {{ ct id . socket cgroupv2 level {} }}",
            self.under_sandboxes(),
            self.sandbox_level()
        )
    }

    /// The input-hook rules: an opening packet to a sandbox's socket whose
    /// pair was not recorded by that same sandbox goes to `foreign`.
    pub fn input_rules(&self) -> Vec<String> {
        vec![format!(
            "ct state new {} ct id . socket cgroupv2 level {} != @{SET} jump foreign",
            self.under_sandboxes(),
            self.sandbox_level()
        )]
    }

    /// The `foreign` chain: how a refused opening packet is answered.
    pub fn foreign_rules() -> Vec<String> {
        vec![
            "meta l4proto tcp reject with tcp reset".to_string(),
            "reject".to_string(),
        ]
    }

    /// What the rules do, for `status`.
    pub fn describe(&self, table: &str) -> String {
        format!(
            "nftables table {table} accepts a connection to a sandbox's socket (TCP or UDP, IPv4 or IPv6, on any address of the host) only from a socket of the same sandbox: other sandboxes, host processes and other machines are refused"
        )
    }

    /// The match on a socket made under the sandboxes cgroup.
    fn under_sandboxes(&self) -> String {
        format!(
            "socket cgroupv2 level {} \"{}\"",
            self.target.level, self.target.nft_path
        )
    }
}

/// True when `flat` (a whitespace-flattened listing) declares the set as
/// [`Separation::set_declaration`] does. nft 1.0.6 lists a `typeof`'s
/// cgroup level as 0 whatever was loaded, so the level is not compared;
/// the rules that use the set are, word for word.
pub fn set_is_declared(flat: &str) -> bool {
    let Some(start) = flat.find(&format!("set {SET} {{")) else {
        return false;
    };
    let set = &flat[start..];
    let set = &set[..set.find('}').unwrap_or(set.len())];
    set.contains("typeof ct id . socket cgroupv2 level")
        && set.contains("flags dynamic,timeout")
        && set.contains(&format!("timeout {PAIR_TIMEOUT}"))
        && set.contains(&format!("size {MAX_PAIRS}"))
}
