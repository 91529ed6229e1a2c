//! `[network] mode = "private"` (the default under `isolation = "full"`):
//! a network namespace per sandbox, its way out through the daemon's relay.
//!
//! Inside, the sandbox has its own loopback, its own ports and its own
//! `/proc/net` and sock_diag: it binds any port without taking it from
//! the host or another sandbox, and sees no socket but its own. Its one
//! link is the loopback ([`super::own_loopback`]); the namespace's table
//! ([`crate::egress::divert`]) judges the posture on the way out and
//! diverts every TCP connection and DNS query for an address outside the
//! namespace to the relay ([`super::relay`]), which dials it from the
//! host. Nothing comes in: no one outside can open a connection to a
//! sandbox.
//!
//! The runner's endpoints (`backend_endpoint`, `temporal_address`) on the
//! host's loopback stay reachable at the same address: their TCP ports on
//! the namespace's loopback are carried to the host's, and nothing else
//! of the host's loopback is.
//!
//! A namespace is made on a thread of its own (no daemon thread is ever
//! left in it): unshare, the loopback set up, the table loaded (by the
//! daemon's nft helper, given the namespace by descriptor, else by an nft
//! process started from that thread), the relay's sockets bound. A few are made
//! ahead ([`stock`]), so a cold start takes one ready; without one it
//! overlaps the making with the view's plan. A prepared view pays it
//! ahead, off the ensure path.

mod apart;
mod stock;

use std::fs::File;
use std::io;
use std::os::fd::{AsFd, AsRawFd, OwnedFd, RawFd};
use std::path::PathBuf;
use std::sync::Arc;

use tokio::runtime::Handle;

use self::apart::{spawn_apart, Apart};
use self::stock::NamespaceStock;
use super::own_loopback;
use super::relay::{Relay, RelaySettings, RelaySockets};
use crate::config::NetworkConfig;
use crate::egress::namespace_rules::NamespaceRules;
use crate::egress::EgressSetting;

/// Sandboxes get a network namespace each, with the relay as their way out.
pub struct PrivateNetwork {
    rules: Arc<NamespaceRules>,
    settings: Arc<RelaySettings>,
    runtime: Handle,
    stock: Arc<NamespaceStock>,
}

impl std::fmt::Debug for PrivateNetwork {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PrivateNetwork")
            .field("settings", &self.settings)
            .field("stocked", &self.stock.ready())
            .finish()
    }
}

/// A namespace, set up, and its relay's sockets in it.
type Made = (OwnedFd, RelaySockets);

/// A step of a sandbox's network that failed.
#[derive(Debug)]
pub struct NetworkError {
    pub step: String,
    pub error: io::Error,
}

impl NetworkError {
    fn at(step: impl Into<String>) -> impl FnOnce(io::Error) -> NetworkError {
        let step = step.into();
        move |error| NetworkError { step, error }
    }
}

impl std::fmt::Display for NetworkError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.step, self.error)
    }
}

impl PrivateNetwork {
    /// The private network for this configuration, tried for real: a
    /// namespace made, set up and ended. `Err` says why sandboxes cannot
    /// have one here. Blocking; `runtime` serves the relays. The tables are
    /// loaded by a helper run as `nft_helper` (this daemon's binary) when
    /// given, else by the nft tool.
    pub fn probe(
        egress: &EgressSetting,
        network: &NetworkConfig,
        endpoints: &[&str],
        runtime: Handle,
        nft_helper: Option<PathBuf>,
    ) -> Result<PrivateNetwork, String> {
        let mut endpoint_ports: Vec<u16> = endpoints
            .iter()
            .filter_map(|endpoint| loopback_port(endpoint))
            .collect();
        endpoint_ports.sort_unstable();
        endpoint_ports.dedup();
        let rules = NamespaceRules::new(egress, &endpoint_ports, nft_helper)?;
        let settings = RelaySettings {
            posture: egress.posture(),
            endpoint_ports,
            resolvers: network.resolvers.clone(),
            connections: network.relayed_connections,
        };
        let rules = Arc::new(rules);
        let tried = make_on_own_thread(&rules)
            .map_err(|error| format!("a trial namespace failed: {error}"))?;
        drop(tried);
        let stock = NamespaceStock::new(rules.clone());
        stock.fill_here();
        Ok(PrivateNetwork {
            rules,
            settings: Arc::new(settings),
            runtime,
            stock,
        })
    }

    /// What `status` says of it.
    pub fn describe(&self) -> String {
        let forwarded = match self.settings.endpoint_ports.as_slice() {
            [] => "no endpoint on the host's loopback to carry".to_string(),
            ports => format!(
                "the endpoints' TCP ports {} carried to the host's loopback, nothing else of it reachable",
                ports.iter().map(u16::to_string).collect::<Vec<_>>().join(",")
            ),
        };
        format!(
            "each sandbox its own network namespace: own loopback, ports and /proc/net; TCP and DNS out through the daemon's relay, the egress posture judged inside the namespace; UDP other than DNS and ICMP refused; {forwarded}; at most {} relayed connections per sandbox; {} namespaces kept ready for cold starts; their tables {}",
            self.settings.connections,
            stock::STOCK,
            self.rules.describe()
        )
    }

    /// A new namespace: one of the stock's, else one being set up on a
    /// thread of its own. Call [`Starting::ready`] before anything runs
    /// in it.
    pub fn start(&self) -> Starting {
        let making = match self.stock.take() {
            Some(made) => Making::Stocked(made),
            None => Making::Thread(spawn_making(self.rules.clone())),
        };
        Starting {
            making,
            settings: self.settings.clone(),
            runtime: self.runtime.clone(),
        }
    }
}

/// A thread making a namespace (see [`make_namespace`]), apart from the
/// caller's file system context (see [`apart`]).
fn spawn_making(rules: Arc<NamespaceRules>) -> io::Result<Apart<Result<Made, NetworkError>>> {
    spawn_apart("sandbox-netns", move || make_namespace(&rules))
}

/// The namespace a [`spawn_making`] thread made.
fn join_making(
    thread: io::Result<Apart<Result<Made, NetworkError>>>,
) -> Result<Made, NetworkError> {
    thread
        .map_err(NetworkError::at("start the namespace's thread"))?
        .join()
        .unwrap_or_else(|| {
            Err(NetworkError::at("the namespace's thread")(
                io::Error::other("it panicked"),
            ))
        })
}

/// A namespace made on a thread of its own, waited for.
fn make_on_own_thread(rules: &Arc<NamespaceRules>) -> Result<Made, NetworkError> {
    join_making(spawn_making(rules.clone()))
}

/// The namespace, set up, and the relay's sockets in it. Only ever on a
/// thread of its own that ends right after ([`spawn_making`]): the
/// unshare moves the calling thread into the new namespace for good.
fn make_namespace(rules: &NamespaceRules) -> Result<Made, NetworkError> {
    // Still in the daemon's namespace: a helper started now starts there.
    rules.prepare();
    // SAFETY: unshare with a plain flag; it affects this thread only.
    if unsafe { libc::unshare(libc::CLONE_NEWNET) } < 0 {
        return Err(NetworkError::at("unshare(CLONE_NEWNET)")(
            io::Error::last_os_error(),
        ));
    }
    let netns = File::open("/proc/thread-self/ns/net")
        .map(OwnedFd::from)
        .map_err(NetworkError::at("open the new network namespace"))?;
    own_loopback::set_up().map_err(NetworkError::at("set up the namespace's loopback"))?;
    rules
        .load_into(netns.as_fd())
        .map_err(NetworkError::at("load the namespace's nftables table"))?;
    let sockets =
        RelaySockets::bind_here().map_err(NetworkError::at("bind the relay's sockets"))?;
    Ok((netns, sockets))
}

/// A namespace on its way up.
pub struct Starting {
    making: Making,
    settings: Arc<RelaySettings>,
    runtime: Handle,
}

/// Where a starting namespace comes from.
enum Making {
    Stocked(Made),
    Thread(io::Result<Apart<Result<Made, NetworkError>>>),
}

impl Starting {
    /// Waits until the namespace is set up, and serves its relay.
    pub fn ready(self) -> Result<SandboxNetwork, NetworkError> {
        let (netns, sockets) = match self.making {
            Making::Stocked(made) => made,
            Making::Thread(thread) => join_making(thread)?,
        };
        let relay = Relay::start(&self.runtime, self.settings, sockets);
        Ok(SandboxNetwork { netns, relay })
    }
}

/// A sandbox's network namespace, ready, and its relay.
pub struct SandboxNetwork {
    netns: OwnedFd,
    relay: Relay,
}

impl SandboxNetwork {
    /// Moves this thread into the namespace, so what it clones next starts
    /// there; back in the daemon's when the returned value is dropped.
    pub fn enter(&self) -> Result<InsideNetwork, NetworkError> {
        let host = File::open("/proc/thread-self/ns/net")
            .map_err(NetworkError::at("open this thread's network namespace"))?;
        setns_net(self.netns.as_raw_fd()).map_err(NetworkError::at(
            "setns into the sandbox's network namespace",
        ))?;
        Ok(InsideNetwork {
            host: OwnedFd::from(host),
        })
    }

    /// Its relay, which ends the way out when dropped (the namespace
    /// itself lives as long as a process is in it).
    pub fn into_relay(self) -> Relay {
        self.relay
    }
}

/// A thread inside a sandbox's network namespace, until dropped.
pub struct InsideNetwork {
    host: OwnedFd,
}

impl Drop for InsideNetwork {
    fn drop(&mut self) {
        if let Err(error) = setns_net(self.host.as_raw_fd()) {
            tracing::error!(%error, "a thread cannot return from a sandbox's network namespace to the daemon's: aborting rather than starting sandboxes in the wrong one");
            std::process::abort();
        }
    }
}

fn setns_net(fd: RawFd) -> io::Result<()> {
    // SAFETY: setns with a descriptor the caller holds open.
    if unsafe { libc::setns(fd, libc::CLONE_NEWNET) } < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// The port of `endpoint` (`host:port`, `scheme://host:port/…`,
/// `[::1]:port`) when its host is `localhost`, 127.0.0.1 or ::1 (the
/// addresses whose ports are carried to the host's); `None` otherwise.
pub fn loopback_port(endpoint: &str) -> Option<u16> {
    let rest = endpoint
        .split_once("://")
        .map_or(endpoint, |(_, rest)| rest);
    let authority = rest.split('/').next()?;
    let authority = authority
        .rsplit_once('@')
        .map_or(authority, |(_, host)| host);
    let (host, port) = authority.rsplit_once(':')?;
    let host = host.trim_start_matches('[').trim_end_matches(']');
    let loopback = host.eq_ignore_ascii_case("localhost") || host == "127.0.0.1" || host == "::1";
    loopback.then(|| port.parse().ok()).flatten()
}

#[cfg(test)]
mod tests;
