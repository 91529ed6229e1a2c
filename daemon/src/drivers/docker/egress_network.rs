//! The docker tier's own network, the one the egress rules hold, and the
//! one that keeps containers apart.
//!
//! Runner containers join this bridge network instead of Docker's default
//! one (on every posture, `none` included, unless `[docker] network` names
//! another). Its bridge interface has a name the daemon chooses, so the
//! nftables rules (see `crate::egress`) can match it by name before the
//! network exists and after it is recreated. It is created with
//! inter-container communication off (`enable_icc=false`: Docker then
//! drops every packet from one port of the bridge to another), so no
//! container of the daemon reaches another over it;
//! each still reaches the host and the outside as the posture allows. A
//! network an older daemon made with it on is recreated once no container
//! uses it; until then [`Icc::OnInUse`] says so, and `status` with it.

use std::collections::HashMap;

use bollard::models::NetworkCreateRequest;
use bollard::query_parameters::{InspectNetworkOptions, ListNetworksOptionsBuilder};
use sandboxd_protocol::naming::{LABEL_MANAGED_BY, MANAGED_BY_VALUE};
use sandboxd_protocol::SandboxError;

use crate::digest::sha256_hex;
use crate::holders::{self, Held, Probe};

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

/// The network option that turns inter-container communication off.
const ICC_OPTION: &str = "com.docker.network.bridge.enable_icc";

/// Whether the network keeps its containers apart.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Icc {
    /// Inter-container communication is off.
    Off,
    /// An older daemon's network, with it on, that `containers` containers
    /// still use: it cannot be recreated under them.
    OnInUse { containers: usize },
}

impl Icc {
    /// For `status`'s `network` feature: how, or why not.
    pub fn describe(&self) -> Result<String, String> {
        match self {
            Icc::Off => Ok(format!(
                "containers join the daemon's network {} with inter-container communication off ({ICC_OPTION}=false): no container reaches another over it",
                network()
            )),
            Icc::OnInUse { containers } => Err(format!(
                "the network {} was made by an older sandboxd with inter-container communication on, and {containers} container(s) still use it: it is recreated without once none does",
                network()
            )),
        }
    }
}

/// What was found under the network's name.
enum Found {
    Absent,
    Present(Icc),
}

/// How many times [`ensure`] looks, creates and looks again before it
/// gives up on a network that keeps appearing and going.
const ENSURE_TRIES: u32 = 5;

/// Creates the network unless it exists: an inspect, and a create when
/// there is none. Engines before API 1.44 accept a second network of the
/// same name, so the name is looked up rather than left to a conflict; a
/// create that loses a race is settled by looking again. One with
/// inter-container communication on and no container is removed first.
///
/// Other daemons of the instance make the network and, the last of them
/// at its stop, remove it; so a create can fail on a network another
/// daemon just made ("same bridge name") which is gone again by the next
/// look. That is tried again, a few times, rather than failing the
/// caller's ensure on someone else's churn (a suite run under load: three
/// test daemons of one instance starting and stopping together).
pub async fn ensure(engine: &Engine) -> Result<Icc, SandboxError> {
    let mut tries = 1;
    loop {
        match create_unless_present(engine).await? {
            Attempt::Ready(icc) => return Ok(icc),
            Attempt::Raced(error) if tries < ENSURE_TRIES => {
                tracing::debug!(network = %network(), tries, %error, "the sandboxes' network came and went during its create: looking again");
                // The other daemon's create or removal is a call or two away.
                tokio::time::sleep(std::time::Duration::from_millis(50 * u64::from(tries))).await;
                tries += 1;
            }
            Attempt::Raced(error) => return Err(error),
        }
    }
}

/// What one look, create and look again came to.
enum Attempt {
    Ready(Icc),
    /// The create failed and the look after it found no network either:
    /// it came and went meanwhile, so trying again may succeed.
    Raced(SandboxError),
}

/// One look and, when there is nothing, one create; `Err` for what trying
/// again cannot change (an inspect that fails, a network on another
/// bridge).
async fn create_unless_present(engine: &Engine) -> Result<Attempt, SandboxError> {
    match inspect(engine).await? {
        Found::Present(Icc::OnInUse { containers: 0 }) => remove(engine).await?,
        Found::Present(icc) => return Ok(Attempt::Ready(icc)),
        Found::Absent => {}
    }
    let request = NetworkCreateRequest {
        name: network(),
        driver: Some("bridge".to_string()),
        options: Some(HashMap::from([
            (BRIDGE_OPTION.to_string(), bridge()),
            (ICC_OPTION.to_string(), "false".to_string()),
        ])),
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
    Ok(match created {
        Ok(_) => Attempt::Ready(Icc::Off),
        Err(error) => match inspect(engine).await? {
            Found::Present(icc) => Attempt::Ready(icc),
            Found::Absent => Attempt::Raced(error.into_sandbox_error(&format!(
                "cannot create the sandboxes' network {}",
                network()
            ))),
        },
    })
}

/// Removes the network (none of its containers is left); one already gone
/// is fine.
async fn remove(engine: &Engine) -> Result<(), SandboxError> {
    tracing::info!(network = %network(), "recreating the sandboxes' network with inter-container communication off");
    let removed = engine
        .call(WRITE_TIMEOUT, |docker| async move {
            docker.remove_network(&network()).await
        })
        .await;
    match removed {
        Ok(()) => Ok(()),
        Err(error) if error.is_not_found() => Ok(()),
        Err(error) => Err(error.into_sandbox_error(&format!(
            "cannot remove the sandboxes' network {} to recreate it without inter-container communication",
            network()
        ))),
    }
}

/// At a clean stop with no container of this instance left: removes the
/// network, so a stopped daemon leaves nothing on the engine. One already
/// gone is fine; one a container joined meanwhile stays (the engine
/// refuses), and the reason is logged.
pub async fn remove_at_stop(engine: &Engine) {
    let removed = engine
        .call(WRITE_TIMEOUT, |docker| async move {
            docker.remove_network(&network()).await
        })
        .await;
    match removed {
        Ok(()) => {
            tracing::info!(network = %network(), "removed the sandboxes' network: no sandbox of this instance is left")
        }
        Err(error) if error.is_not_found() => {}
        Err(error) => {
            tracing::warn!(network = %network(), "the sandboxes' network is left in place: {}", error.into_sandbox_error("cannot remove it"))
        }
    }
}

/// Holds the instance network's name (see [`crate::holders`]) for the
/// daemon's life; `None` (logged) when the lock cannot be taken.
pub fn hold() -> Option<Held> {
    let name = network();
    Held::take(&name)
        .inspect_err(|error| tracing::warn!(network = %name, "the network's holder lock cannot be taken, so another daemon may take this instance for gone: {error}"))
        .ok()
}

/// Removes the networks (and their egress tables) of other instances
/// whose daemons are all gone and which no container uses: each
/// `sandboxd-egress` or `<instance>-sandboxd-egress` network sandboxd
/// made (by its label) whose holder lock is free. One with no holder file
/// (made by a sandboxd from before holder locks) is left alone: nothing
/// proves its daemons gone. Every engine call is bounded; logged.
pub async fn sweep_gone_instances(engine: &Engine) {
    let filters = HashMap::from([(
        "label".to_string(),
        vec![format!("{LABEL_MANAGED_BY}={MANAGED_BY_VALUE}")],
    )]);
    let options = ListNetworksOptionsBuilder::new().filters(&filters).build();
    let listed = engine
        .call(READ_TIMEOUT, |docker| async move {
            docker.list_networks(Some(options)).await
        })
        .await;
    let networks = match listed {
        Ok(networks) => networks,
        Err(error) => {
            tracing::warn!(
                "the sweep of gone instances' networks cannot list them: {}",
                error.into_sandbox_error("cannot list networks")
            );
            return;
        }
    };
    let own = network();
    for name in networks.into_iter().filter_map(|found| found.name) {
        let ours = name == DEFAULT_NETWORK || name.ends_with(&format!("-{DEFAULT_NETWORK}"));
        if name == own || !ours {
            continue;
        }
        if let Probe::Free(gone) = holders::probe(&name) {
            sweep_one(engine, &name, gone).await;
        }
    }
}

/// One network whose daemons are gone: removed with its table unless a
/// container still uses it or a daemon still holds its table.
async fn sweep_one(engine: &Engine, name: &str, gone: holders::Gone) {
    let inspected = engine
        .call(READ_TIMEOUT, |docker| {
            let name = name.to_string();
            async move {
                docker
                    .inspect_network(&name, None::<InspectNetworkOptions>)
                    .await
            }
        })
        .await;
    let Ok(found) = inspected else {
        return;
    };
    let containers = found.containers.as_ref().map_or(0, HashMap::len);
    if containers > 0 {
        tracing::info!(network = %name, containers, holder = gone.about(), "kept a gone instance's network: containers still use it");
        return;
    }
    let bridge = found
        .options
        .as_ref()
        .and_then(|options| options.get(BRIDGE_OPTION))
        .cloned();
    let table = bridge.as_deref().map(crate::egress::bridge_table);
    let table_gone = match table.as_deref().map(holders::probe) {
        Some(Probe::Held(about)) => {
            tracing::info!(network = %name, "kept a gone instance's network: a live sandboxd holds its egress table ({about})");
            return;
        }
        Some(Probe::BeingRemoved(about)) => {
            tracing::info!(network = %name, "left a gone instance's network alone: another sandboxd is removing its egress table (it was held by {about})");
            return;
        }
        Some(Probe::Free(table_gone)) => Some(table_gone),
        Some(Probe::NoFile) | None => None,
    };
    let removed = engine
        .call(WRITE_TIMEOUT, |docker| {
            let name = name.to_string();
            async move { docker.remove_network(&name).await }
        })
        .await;
    match removed {
        Ok(()) => {}
        Err(error) if error.is_not_found() => {}
        Err(error) => {
            tracing::warn!(network = %name, "cannot remove a gone instance's network: {}", error.into_sandbox_error("cannot remove it"));
            return;
        }
    }
    tracing::info!(network = %name, holder = gone.about(), "removed another instance's network: its holder lock {} was free, so every sandboxd of that instance is gone, and no container uses it", gone.path().display());
    gone.forget();
    if let Some(table) = table {
        let removed = tokio::task::spawn_blocking({
            let table = table.clone();
            move || crate::egress::remove_table(&table)
        })
        .await;
        match removed {
            Ok(Ok(true)) => {
                tracing::info!(table = %format!("inet {table}"), network = %name, "removed the egress table of that instance's network")
            }
            Ok(Ok(false)) => {}
            Ok(Err(error)) => {
                tracing::warn!(table = %format!("inet {table}"), "cannot remove the egress table of a gone instance's network: {error}")
            }
            Err(_) => {}
        }
        if let Some(table_gone) = table_gone {
            table_gone.forget();
        }
    }
}

async fn inspect(engine: &Engine) -> Result<Found, SandboxError> {
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
            let icc_off = found
                .options
                .as_ref()
                .and_then(|options| options.get(ICC_OPTION))
                .is_some_and(|value| value == "false");
            let containers = found.containers.as_ref().map_or(0, HashMap::len);
            Ok(Found::Present(if icc_off {
                Icc::Off
            } else {
                Icc::OnInUse { containers }
            }))
        }
        Err(error) if error.is_not_found() => Ok(Found::Absent),
        Err(error) => Err(error.into_sandbox_error(&format!(
            "cannot inspect the sandboxes' network {}",
            network()
        ))),
    }
}
