//! The `network` feature: whether the daemon's nftables table keeps the
//! sandboxes apart (no TCP or UDP from one sandbox to another's sockets,
//! on any address of the host). The rules live with the egress posture's,
//! in one table ([`crate::egress`]); this says what `status` shows.
//!
//! And the `network-namespace` feature: whether each sandbox has a
//! network namespace of its own ([`super::private_network`]).

use std::sync::Arc;

use sandboxd_protocol::IsolationFeature;

use super::namespaces::View;
use super::private_network::PrivateNetwork;
use crate::config::{Config, NetworkMode};
use crate::egress::Egress;

/// In force with how, or not with why (no nft, no cgroup v2, a kernel
/// that cannot load the rules, the table gone).
pub fn network_feature(egress: &Egress) -> IsolationFeature {
    match egress.separation() {
        Ok(how) => IsolationFeature::in_force("network", how),
        Err(why) => IsolationFeature::not_in_force("network", why),
    }
}

/// `network-namespace`: whether each sandbox has its own (`[network] mode
/// = "private"` with a view), and if not, why it shares the host's.
pub fn namespace_feature(view: Option<&View>) -> IsolationFeature {
    const NAME: &str = "network-namespace";
    const SHARED: &str = "sandboxes share the host's network namespace (they bind the host's ports and see every socket of the host in /proc/net)";
    match view.map(|view| &view.network) {
        Some(Ok(private)) => IsolationFeature::in_force(NAME, private.describe()),
        Some(Err(why)) => IsolationFeature::not_in_force(NAME, format!("{SHARED}: {why}")),
        None => IsolationFeature::not_in_force(
            NAME,
            format!("{SHARED}: no namespaces here (see mount-namespace)"),
        ),
    }
}

/// Under `[network] mode = "private"`, private networking when it works
/// here (tried for real, see [`PrivateNetwork::probe`]); else why not,
/// logged, and sandboxes share the host's network.
pub async fn set_up(config: &Config) -> Result<Arc<PrivateNetwork>, String> {
    if config.network.mode == NetworkMode::Host {
        return Err("[network] mode = \"host\"".to_string());
    }
    let egress = config.egress;
    let network = config.network.clone();
    let endpoints = [
        config.backend_endpoint.clone(),
        config.temporal_address.clone(),
    ];
    let runtime = tokio::runtime::Handle::current();
    let probed = tokio::task::spawn_blocking(move || {
        let endpoints: Vec<&str> = endpoints.iter().map(String::as_str).collect();
        // This daemon's own binary is the nft helper.
        let nft_helper = std::env::current_exe().ok();
        PrivateNetwork::probe(&egress, &network, &endpoints, runtime, nft_helper)
    })
    .await
    .unwrap_or_else(|error| Err(format!("the trial namespace failed: {error}")));
    match probed {
        Ok(private) => Ok(Arc::new(private)),
        Err(problem) => {
            tracing::warn!(%problem, "[network] mode = \"private\" but this daemon cannot give sandboxes a network namespace: they share the host's");
            Err(format!(
                "[network] mode = \"private\" but it cannot be had here: {problem}"
            ))
        }
    }
}
