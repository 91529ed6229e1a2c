//! What keeps a process-tier sandbox apart from the host and from the
//! other sandboxes, beyond its uid ([`super::users`]) and its cgroup
//! ([`super::cgroup`]): each mechanism is a module with a parent-side plan
//! (allocates, unit-testable) and a child-side step that allocates
//! nothing, called in one commented order by [`super::launch`].
//!
//! [`features`] is what `status` and `describe` list: every mechanism,
//! in force or not, with how or why not.

pub mod clean_start;
pub mod kernel_filters;
pub mod keyring;
pub mod landlock;
mod network;
pub mod seccomp;

use std::path::Path;

use sandboxd_protocol::IsolationFeature;

use super::cgroup::Containment;
use super::disk_limit::DiskLimit;
use super::users::identity::{RunnerIdentity, RunnerUsers};
use crate::egress::Egress;
use kernel_filters::KernelFilters;

/// What the list is made from: the driver's parts that isolate.
pub struct Facts<'a> {
    pub identity: &'a RunnerIdentity,
    pub containment: &'a Containment,
    pub egress: &'a Egress,
    /// Where the sandboxes' uids are claimed host-wide, when each sandbox
    /// has its own.
    pub uid_claims: Option<&'a Path>,
    pub disk_limit: &'a DiskLimit,
    pub filters: &'a KernelFilters,
}

/// The mechanisms every sandbox started now gets, in force or not.
pub fn features(facts: &Facts<'_>) -> Vec<IsolationFeature> {
    let mut features = vec![
        uid_feature(facts.identity),
        uid_claims_feature(facts.uid_claims),
        cgroup_feature(facts.containment),
        network::network_feature(facts.egress),
        facts.disk_limit.feature(),
    ];
    features.extend(facts.filters.features());
    features.sort_by(|a, b| a.name.cmp(&b.name));
    features
}

fn uid_feature(identity: &RunnerIdentity) -> IsolationFeature {
    match identity.users {
        RunnerUsers::PerSandbox(_) => IsolationFeature::in_force("uid", identity.display.clone()),
        RunnerUsers::Shared { .. } | RunnerUsers::DaemonsOwn => {
            IsolationFeature::not_in_force("uid", identity.display.clone())
        }
    }
}

fn uid_claims_feature(uid_claims: Option<&Path>) -> IsolationFeature {
    match uid_claims {
        Some(dir) => IsolationFeature::in_force(
            "uid-claims",
            format!(
                "each sandbox's uid is claimed host-wide in {}: no other sandboxd sharing it hands out a uid this one holds",
                dir.display()
            ),
        ),
        None => IsolationFeature::not_in_force(
            "uid-claims",
            "sandboxes have no uid of their own to claim (run_as, or a daemon that is not root)",
        ),
    }
}

fn cgroup_feature(containment: &Containment) -> IsolationFeature {
    match containment {
        Containment::Cgroups(_) => IsolationFeature::in_force("cgroup", containment.describe()),
        Containment::ProcessGroups { .. } => {
            IsolationFeature::not_in_force("cgroup", containment.describe())
        }
    }
}
