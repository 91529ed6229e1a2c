//! One cgroup per sandbox: what contains a runner and everything it forks.
//!
//! A runner is cloned straight into its sandbox's cgroup (see
//! [`clone_exec`](super::launch::clone_exec)), so no process of it ever exists
//! outside; tearing a sandbox down kills the cgroup ([`kill`]), which no
//! `setsid`, double fork, `chdir("/")` or closed descriptor escapes. The
//! [`layout`] of the host decides where each controller lives (v2, or a v1
//! hierarchy on a hybrid host), the [`tree`] is set up once at start, and
//! [`limits`] are written into every new sandbox's cgroup.
//!
//! Where no writable cgroup v2 exists (not root and nothing delegated, no
//! v2 mounted) the tier falls back to process groups: a runner leads its
//! own group, and teardown signals that group, which a descendant that
//! calls `setsid` leaves. `status` says which one is in force.

pub mod command;
pub mod cpus;
pub mod freeze;
pub mod kill;
pub mod label;
pub mod layout;
pub mod limits;
pub mod procs;
pub mod setup;
pub mod tree;
pub mod usage;

use std::sync::Arc;

pub use tree::CgroupTree;

/// How the tier contains its runners.
#[derive(Debug, Clone)]
pub enum Containment {
    /// A cgroup per sandbox.
    Cgroups(Arc<CgroupTree>),
    /// The fallback: each runner's process group, and why.
    ProcessGroups { reason: String },
}

impl Containment {
    /// The tree, when cgroups are in force.
    pub fn tree(&self) -> Option<&Arc<CgroupTree>> {
        match self {
            Containment::Cgroups(tree) => Some(tree),
            Containment::ProcessGroups { .. } => None,
        }
    }

    /// One line for `status`.
    pub fn describe(&self) -> String {
        match self {
            Containment::Cgroups(tree) => tree.summary().to_string(),
            Containment::ProcessGroups { reason } => format!(
                "process groups (fallback: {reason}; a descendant that calls setsid can outlive \
                 its sandbox, and no limits are enforced)"
            ),
        }
    }
}
