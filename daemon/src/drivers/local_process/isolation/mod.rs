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
pub mod seccomp;

use sandboxd_protocol::IsolationFeature;

use super::cgroup::Containment;
use super::users::identity::{RunnerIdentity, RunnerUsers};
use kernel_filters::KernelFilters;

/// The mechanisms every sandbox started now gets, in force or not.
pub fn features(
    identity: &RunnerIdentity,
    containment: &Containment,
    filters: &KernelFilters,
) -> Vec<IsolationFeature> {
    let mut features = vec![uid_feature(identity), cgroup_feature(containment)];
    features.extend(filters.features());
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

fn cgroup_feature(containment: &Containment) -> IsolationFeature {
    match containment {
        Containment::Cgroups(_) => IsolationFeature::in_force("cgroup", containment.describe()),
        Containment::ProcessGroups { .. } => {
            IsolationFeature::not_in_force("cgroup", containment.describe())
        }
    }
}
