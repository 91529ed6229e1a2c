//! The docker tier's own network, the one the egress rules hold.
//!
//! With a posture configured, runner containers join this bridge network
//! instead of Docker's default one. Its bridge interface has a name the
//! daemon chooses, so the nftables rules (see `crate::egress`) can match
//! it by name before the network exists and after it is recreated.

use std::collections::HashMap;

use bollard::models::NetworkCreateRequest;
use bollard::query_parameters::InspectNetworkOptions;
use sandboxd_protocol::naming::{LABEL_MANAGED_BY, MANAGED_BY_VALUE};
use sandboxd_protocol::SandboxError;

use crate::digest::sha256_hex;

use super::engine::{Engine, READ_TIMEOUT, WRITE_TIMEOUT};
use crate::instance::Instance;

/// The default instance's network and bridge; a named instance's are its own
/// (see [`network`] and [`bridge`]), so two daemons on one engine never share
/// a network, a bridge or the egress table that matches it.
const DEFAULT_NETWORK: &str = "sandboxd-egress";
const DEFAULT_BRIDGE: &str = "sbxd-egress";

/// The network runner containers join under a posture: `sandboxd-egress`,
/// or `<instance>-sandboxd-egress`.
pub fn network() -> String {
    Instance::current().object_name(DEFAULT_NETWORK)
}

/// Its bridge interface, at most 15 characters (the kernel's limit):
/// `sbxd-egress`, or `sbxd-` and 10 hex digits of the instance name's
/// SHA-256 for a named instance.
pub fn bridge() -> String {
    match Instance::current().label() {
        None => DEFAULT_BRIDGE.to_string(),
        Some((_, name)) => {
            format!("sbxd-{}", sha256_hex(name.as_bytes(), 5))
        }
    }
}
/// The network option that names the bridge interface.
const BRIDGE_OPTION: &str = "com.docker.network.bridge.name";

/// Creates the network unless it exists: an inspect, and a create when
/// there is none. Engines before API 1.44 accept a second network of the
/// same name, so the name is looked up rather than left to a conflict; a
/// create that loses a race is settled by looking again.
pub async fn ensure(engine: &Engine) -> Result<(), SandboxError> {
    if exists(engine).await? {
        return Ok(());
    }
    let request = NetworkCreateRequest {
        name: network(),
        driver: Some("bridge".to_string()),
        options: Some(HashMap::from([(BRIDGE_OPTION.to_string(), bridge())])),
        labels: Some(HashMap::from([(
            LABEL_MANAGED_BY.to_string(),
            MANAGED_BY_VALUE.to_string(),
        )])),
        ..NetworkCreateRequest::default()
    };
    let created = engine
        .call(WRITE_TIMEOUT, |docker| async move {
            docker.create_network(request).await
        })
        .await;
    match created {
        Ok(_) => Ok(()),
        Err(_) if exists(engine).await? => Ok(()),
        Err(error) => Err(error.into_sandbox_error(&format!(
            "cannot create the sandboxes' network {}",
            network()
        ))),
    }
}

async fn exists(engine: &Engine) -> Result<bool, SandboxError> {
    let inspected = engine
        .call(READ_TIMEOUT, |docker| async move {
            docker
                .inspect_network(&network(), None::<InspectNetworkOptions>)
                .await
        })
        .await;
    match inspected {
        Ok(found) => {
            // A network of that name whose bridge is another interface is
            // not one the rules hold: fail closed rather than run on it.
            let bridge = found
                .options
                .as_ref()
                .and_then(|options| options.get(BRIDGE_OPTION));
            let wanted = self::bridge();
            if bridge != Some(&wanted) {
                return Err(SandboxError::Unavailable(format!(
                    "the network {} exists with bridge {} instead of {wanted}, so the egress rules cannot hold it; remove it and ensure again",
                    network(),
                    bridge.map_or("(unnamed)", String::as_str)
                )));
            }
            Ok(true)
        }
        Err(error) if error.is_not_found() => Ok(false),
        Err(error) => Err(error.into_sandbox_error(&format!(
            "cannot inspect the sandboxes' network {}",
            network()
        ))),
    }
}
