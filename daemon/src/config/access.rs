//! `[access]`: who may call what, by the peer credentials of the connection.

use serde::Deserialize;

/// Who may call what, by the peer credentials of the connection.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct AccessConfig {
    /// Uids allowed to ensure, deprovision and create (and to read).
    pub mutate_uids: Vec<u32>,
    /// Gids (primary group of the peer) allowed to ensure, deprovision and create.
    pub mutate_gids: Vec<u32>,
    /// Uids allowed to probe, describe, list, workspaces and status.
    pub read_uids: Vec<u32>,
    /// Gids allowed to probe, describe, list, workspaces and status.
    pub read_gids: Vec<u32>,
}
