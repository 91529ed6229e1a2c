//! The rules a sandbox's own network namespace is given (see
//! [`super::divert`]), and the nft that loads them there.

use super::nft::Nft;
use super::ruleset::{Matched, Ruleset};
use super::EgressSetting;

/// The rules one sandbox namespace gets, and the nft that loads them.
#[derive(Debug)]
pub struct NamespaceRules {
    nft: Nft,
    script: String,
}

impl NamespaceRules {
    /// The rules for `setting`, with `endpoint_ports` (the runner's
    /// endpoints on the host's loopback) carried to the host.
    pub fn new(setting: &EgressSetting, endpoint_ports: &[u16]) -> Result<NamespaceRules, String> {
        let nft = Nft::find()?;
        let posture = setting.posture();
        let ruleset = Ruleset::new(posture, Matched::Namespace(endpoint_ports.to_vec()));
        Ok(NamespaceRules {
            nft,
            script: ruleset.declaration(),
        })
    }

    /// Loads the rules into the network namespace of the calling thread
    /// (nft, its child, starts in it). Blocking.
    pub fn load_here(&self) -> std::io::Result<()> {
        self.nft.apply_keeping_errno(&self.script)
    }
}
