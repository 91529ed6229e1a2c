//! The `[connections]` table: how the socket holds up against a peer that
//! floods it, stalls it or never speaks.
//!
//! `max_connections` (top level) is the global cap. These keys share it out
//! so no one peer can take it all: a cap per uid, a reserve that only root
//! and the daemon's own uid may use, a bound on how long one frame may take
//! to arrive (a peer sending a byte a second holds its slot for at most
//! that), and an idle timeout after which a connection with nothing in
//! flight is closed (clients reconnect on their next call).

use std::time::Duration;

use anyhow::bail;
use serde::Deserialize;

/// The `[connections]` table, every key optional.
#[derive(Debug, Clone, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields, default)]
pub struct ConnectionsConfig {
    /// Connections one uid (other than root and the daemon's own) may hold at once.
    pub per_uid: usize,
    /// Slots of `max_connections` that only root and the daemon's own uid
    /// may take. Unset: a sixteenth of `max_connections`, 1 to 16.
    pub reserved_for_owners: Option<usize>,
    /// Once a frame's first byte arrived, the whole frame must arrive within this.
    #[serde(deserialize_with = "deserialize_duration")]
    pub frame_timeout: Duration,
    /// A connection with no call in flight and no byte either way for this long is closed.
    #[serde(deserialize_with = "deserialize_duration")]
    pub idle_timeout: Duration,
}

impl Default for ConnectionsConfig {
    fn default() -> Self {
        ConnectionsConfig {
            per_uid: 64,
            reserved_for_owners: None,
            frame_timeout: Duration::from_secs(10),
            idle_timeout: Duration::from_secs(300),
        }
    }
}

impl ConnectionsConfig {
    /// The owners' reserve out of `max_connections`.
    pub fn reserve(&self, max_connections: usize) -> usize {
        self.reserved_for_owners.unwrap_or(if max_connections > 1 {
            (max_connections / 16).clamp(1, 16)
        } else {
            0
        })
    }

    /// Checked against the global cap, which the reserve is carved out of.
    pub fn validate(&self, max_connections: usize) -> anyhow::Result<()> {
        if self.per_uid == 0 {
            bail!("[connections] per_uid must be at least 1");
        }
        let reserve = self.reserve(max_connections);
        if reserve >= max_connections && max_connections > 1 {
            bail!(
                "[connections] reserved_for_owners ({reserve}) must be below max_connections \
                 ({max_connections}), or nobody but root could connect"
            );
        }
        if self.frame_timeout.is_zero() {
            bail!("[connections] frame_timeout must be longer than 0");
        }
        if self.idle_timeout.is_zero() {
            bail!("[connections] idle_timeout must be longer than 0");
        }
        Ok(())
    }
}

fn deserialize_duration<'de, D: serde::Deserializer<'de>>(
    deserializer: D,
) -> Result<Duration, D::Error> {
    let text = String::deserialize(deserializer)?;
    crate::duration::parse_duration(&text)
        .map_err(|error| serde::de::Error::custom(format!("{error:#}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_every_key_and_refuses_a_reserve_as_big_as_the_cap() {
        let parsed: ConnectionsConfig = toml::from_str(
            "per_uid = 4\nreserved_for_owners = 2\nframe_timeout = \"2s\"\nidle_timeout = \"1m\"",
        )
        .unwrap();
        assert_eq!(
            parsed,
            ConnectionsConfig {
                per_uid: 4,
                reserved_for_owners: Some(2),
                frame_timeout: Duration::from_secs(2),
                idle_timeout: Duration::from_secs(60),
            }
        );
        parsed.validate(8).unwrap();
        let error = parsed.validate(2).unwrap_err().to_string();
        assert!(error.contains("reserved_for_owners (2)"), "{error}");
        assert!(toml::from_str::<ConnectionsConfig>("per_uids = 1").is_err());
        let default = ConnectionsConfig::default();
        assert_eq!(default.reserve(256), 16);
        assert_eq!(default.reserve(8), 1);
        assert_eq!(default.reserve(1), 0);
        default.validate(1).unwrap();
    }
}
