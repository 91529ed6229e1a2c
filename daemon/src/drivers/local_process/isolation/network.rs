//! The `network` feature: whether the daemon's nftables table keeps the
//! sandboxes apart (no TCP or UDP from one sandbox to another's sockets,
//! on any address of the host). The rules live with the egress posture's,
//! in one table ([`crate::egress`]); this says what `status` shows.

use sandboxd_protocol::IsolationFeature;

use crate::egress::Egress;

/// In force with how, or not with why (no nft, no cgroup v2, a kernel
/// that cannot load the rules, the table gone).
pub fn network_feature(egress: &Egress) -> IsolationFeature {
    match egress.separation() {
        Ok(how) => IsolationFeature::in_force("network", how),
        Err(why) => IsolationFeature::not_in_force("network", why),
    }
}
