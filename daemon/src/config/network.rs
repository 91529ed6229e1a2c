//! `[network]`: whether a process-tier sandbox gets a network namespace of
//! its own (`mode = "private"`) or shares the host's (`"host"`).
//!
//! Private (under `isolation = "full"`): the sandbox has its own loopback,
//! its own ports and its own `/proc/net`; its outbound traffic leaves
//! through a `pasta` process in the sandbox's own cgroup, so the egress
//! rules still hold it (see `isolation::private_network`). `host` is the
//! opt-out: the sandbox binds the host's ports and sees every socket of
//! the host.

use serde::Deserialize;

/// The `[network]` table.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct NetworkConfig {
    pub mode: NetworkMode,
}

/// `[network] mode`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum NetworkMode {
    /// The host's network namespace: the sandbox binds the host's ports
    /// and sees every socket of the host in `/proc/net`.
    #[default]
    Host,
    /// A network namespace per sandbox, connected out through `pasta`.
    Private,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Deserialize)]
    struct File {
        network: NetworkConfig,
    }

    fn parse(text: &str) -> Result<NetworkConfig, String> {
        toml::from_str::<File>(text)
            .map(|file| file.network)
            .map_err(|error| error.to_string())
    }

    #[test]
    fn modes_parse_and_a_wrong_one_is_named() {
        assert_eq!(
            parse("[network]\nmode = \"private\"").unwrap().mode,
            NetworkMode::Private
        );
        assert_eq!(
            parse("[network]\nmode = \"host\"").unwrap().mode,
            NetworkMode::Host
        );
        assert_eq!(parse("[network]").unwrap().mode, NetworkMode::Host);
        let error = parse("[network]\nmode = \"bridge\"").unwrap_err();
        assert!(
            error.contains("bridge") && error.contains("private"),
            "{error}"
        );
        let error = parse("[network]\nmodes = \"host\"").unwrap_err();
        assert!(error.contains("modes"), "{error}");
    }
}
