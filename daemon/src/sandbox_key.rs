//! A sandbox's identity, as every layer names it: the server, the tiers,
//! the events and the commands. A leaf, so each of them can import it
//! without importing the seam the tiers implement.

use sandboxd_protocol::{naming, Scope};

/// One sandbox's identity: scope, full id, and the base name derived from them.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct SandboxKey {
    pub scope: Scope,
    pub id: String,
    /// `sbx-<code>-<hex12>`: the only id-derived string used in paths and names.
    pub base_name: String,
}

impl SandboxKey {
    /// The id as a person should read it, for logs: see [`sandboxd_protocol::Shown`].
    pub fn shown_id(&self) -> sandboxd_protocol::Shown<'_> {
        sandboxd_protocol::Shown(&self.id)
    }

    /// `session 'ses_1' (sbx-ses-…)`, for messages.
    pub fn what(&self) -> String {
        format!("{} '{}' ({})", self.scope, self.shown_id(), self.base_name)
    }

    pub fn new(scope: Scope, id: impl Into<String>) -> Self {
        let id = id.into();
        let base_name = naming::base_name(scope, &id);
        SandboxKey {
            scope,
            id,
            base_name,
        }
    }
}
