//! The rules a sandbox's own network namespace is given (see
//! [`super::divert`]), and what loads them there: nftables' library in the
//! helper process ([`super::nft_helper`]), else the `nft` tool.

use std::io;
use std::os::fd::BorrowedFd;
use std::path::PathBuf;

use super::nft::Nft;
use super::nft_helper_client::{Load, NftHelper};
use super::ruleset::{Matched, Ruleset};
use super::EgressSetting;

/// The rules one sandbox namespace gets, and what loads them.
#[derive(Debug)]
pub struct NamespaceRules {
    helper: NftHelper,
    nft: Nft,
    /// The table, for a namespace that has none yet.
    script: String,
    /// The same replacing whatever table of that name is there (after a
    /// helper failed during a load).
    replacing: String,
}

impl NamespaceRules {
    /// The rules for `setting`, with `endpoint_ports` (the runner's
    /// endpoints on the host's loopback) carried to the host, loaded by
    /// a helper run as `helper_program` (this daemon's binary) when given.
    pub fn new(
        setting: &EgressSetting,
        endpoint_ports: &[u16],
        helper_program: Option<PathBuf>,
    ) -> Result<NamespaceRules, String> {
        let nft = Nft::find()?;
        let posture = setting.posture();
        let ruleset = Ruleset::new(posture, Matched::Namespace(endpoint_ports.to_vec()));
        Ok(NamespaceRules {
            helper: NftHelper::new(helper_program),
            nft,
            script: ruleset.declaration(),
            replacing: ruleset.script(),
        })
    }

    /// Starts the helper if it is not running. Call from a thread still in
    /// the daemon's network namespace (the helper starts in it). Blocking.
    pub fn prepare(&self) {
        self.helper.prepare();
    }

    /// Loads the rules into `netns`, the namespace the calling thread is
    /// in (an nft process, when one is used, starts in it). Blocking.
    pub fn load_into(&self, netns: BorrowedFd<'_>) -> io::Result<()> {
        match self.helper.load(netns, &self.script) {
            Load::Loaded => Ok(()),
            Load::NotLoaded(why) => {
                tracing::debug!(%why, "a namespace's table is loaded by an nft process");
                self.nft.apply_keeping_errno(&self.script)
            }
            Load::Unknown(_) => self.nft.apply_keeping_errno(&self.replacing),
        }
    }

    /// How the tables are loaded, for `status`.
    pub fn describe(&self) -> String {
        self.helper.describe()
    }
}
