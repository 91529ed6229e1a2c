//! `[network]`: whether a process-tier sandbox gets a network namespace of
//! its own (`mode = "private"`, the default under `isolation = "full"`) or
//! shares the host's (`"host"`, the opt-out).
//!
//! Private: the sandbox has its own loopback, its own ports and its own
//! `/proc/net`; its TCP connections and DNS queries leave through the
//! daemon's relay, with the egress posture judged inside the namespace
//! (see `isolation::private_network`). `host`: the sandbox binds the
//! host's ports and sees every socket of the host.

use std::net::{IpAddr, SocketAddr};

use anyhow::{bail, Context};
use serde::Deserialize;

use super::modes::IsolationMode;

/// How many connections (and DNS queries) the relay carries at once for
/// one sandbox, unless `relayed_connections` says otherwise.
const DEFAULT_RELAYED_CONNECTIONS: usize = 1024;

/// The bound on `relayed_connections`: each holds two of the daemon's
/// descriptors.
const MAX_RELAYED_CONNECTIONS: usize = 65_536;

/// The `[network]` table as written.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct NetworkFile {
    mode: Option<NetworkMode>,
    resolvers: Option<Vec<String>>,
    relayed_connections: Option<usize>,
}

/// `[network]`, resolved.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NetworkConfig {
    pub mode: NetworkMode,
    /// Where the relay sends a private sandbox's DNS queries; empty: the
    /// host's `/etc/resolv.conf` nameservers, read at each query.
    pub resolvers: Vec<SocketAddr>,
    /// Connections and queries the relay carries at once per sandbox.
    pub relayed_connections: usize,
}

impl Default for NetworkConfig {
    fn default() -> Self {
        NetworkConfig {
            mode: NetworkMode::Host,
            resolvers: Vec::new(),
            relayed_connections: DEFAULT_RELAYED_CONNECTIONS,
        }
    }
}

/// `[network] mode`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum NetworkMode {
    /// The host's network namespace: the sandbox binds the host's ports
    /// and sees every socket of the host in `/proc/net`.
    Host,
    /// A network namespace per sandbox, its way out through the relay.
    Private,
}

impl NetworkFile {
    /// The table with its defaults: `private` under `isolation = "full"`
    /// (a network namespace is part of the private view), else `host`.
    pub fn resolve(self, isolation: IsolationMode) -> anyhow::Result<NetworkConfig> {
        let mode = self.mode.unwrap_or(match isolation {
            IsolationMode::Full => NetworkMode::Private,
            IsolationMode::UidCgroup | IsolationMode::Gvisor => NetworkMode::Host,
        });
        let relayed_connections = self
            .relayed_connections
            .unwrap_or(DEFAULT_RELAYED_CONNECTIONS);
        if relayed_connections == 0 || relayed_connections > MAX_RELAYED_CONNECTIONS {
            bail!("[network] relayed_connections must be 1 to {MAX_RELAYED_CONNECTIONS}; it is {relayed_connections}");
        }
        let resolvers = self
            .resolvers
            .unwrap_or_default()
            .iter()
            .map(|resolver| parse_resolver(resolver))
            .collect::<anyhow::Result<Vec<_>>>()?;
        Ok(NetworkConfig {
            mode,
            resolvers,
            relayed_connections,
        })
    }
}

/// `"192.0.2.53"`, `"192.0.2.53:5353"`, `"2001:db8::53"` or
/// `"[2001:db8::53]:5353"`; port 53 unless one is given.
fn parse_resolver(text: &str) -> anyhow::Result<SocketAddr> {
    if let Ok(address) = text.parse::<SocketAddr>() {
        return Ok(address);
    }
    text.parse::<IpAddr>()
        .map(|ip| SocketAddr::new(ip, 53))
        .with_context(|| {
            format!("[network] resolvers: '{text}' is not an IP address (with an optional :port)")
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Deserialize)]
    struct File {
        network: NetworkFile,
    }

    fn parse(text: &str, isolation: IsolationMode) -> Result<NetworkConfig, String> {
        toml::from_str::<File>(text)
            .map_err(|error| error.to_string())
            .and_then(|file| {
                file.network
                    .resolve(isolation)
                    .map_err(|error| format!("{error:#}"))
            })
    }

    #[test]
    fn modes_parse_and_a_wrong_one_is_named() {
        let full = IsolationMode::Full;
        assert_eq!(
            parse("[network]\nmode = \"private\"", full).unwrap().mode,
            NetworkMode::Private
        );
        assert_eq!(
            parse("[network]\nmode = \"host\"", full).unwrap().mode,
            NetworkMode::Host
        );
        let error = parse("[network]\nmode = \"bridge\"", full).unwrap_err();
        assert!(
            error.contains("bridge") && error.contains("private"),
            "{error}"
        );
        let error = parse("[network]\nmodes = \"host\"", full).unwrap_err();
        assert!(error.contains("modes"), "{error}");
    }

    #[test]
    fn private_is_the_default_only_under_full_isolation() {
        assert_eq!(
            parse("[network]", IsolationMode::Full).unwrap().mode,
            NetworkMode::Private
        );
        for isolation in [IsolationMode::UidCgroup, IsolationMode::Gvisor] {
            assert_eq!(
                parse("[network]", isolation).unwrap().mode,
                NetworkMode::Host
            );
        }
    }

    #[test]
    fn resolvers_and_the_connection_bound_are_checked() {
        let full = IsolationMode::Full;
        let config = parse(
            "[network]\nresolvers = [\"192.0.2.53\", \"[2001:db8::53]:5353\"]",
            full,
        )
        .unwrap();
        assert_eq!(
            config.resolvers,
            vec![
                "192.0.2.53:53".parse().unwrap(),
                "[2001:db8::53]:5353".parse().unwrap()
            ]
        );
        let error = parse("[network]\nresolvers = [\"dns.example\"]", full).unwrap_err();
        assert!(error.contains("'dns.example'"), "{error}");
        let error = parse("[network]\nrelayed_connections = 0", full).unwrap_err();
        assert!(error.contains("relayed_connections"), "{error}");
    }
}
