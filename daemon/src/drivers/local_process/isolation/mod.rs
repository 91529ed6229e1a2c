//! What keeps a process-tier sandbox apart from the host and from the
//! other sandboxes, beyond its uid ([`super::users`]) and its cgroup
//! ([`super::cgroup`]): each mechanism is a module with a parent-side plan
//! (allocates, unit-testable) and a child-side step that allocates
//! nothing, called in one commented order by [`super::launch`].
//!
//! [`features`] is what `status` and `describe` list: every mechanism,
//! in force or not, with how or why not.

pub mod clean_start;
pub mod devpts;
pub mod init_binary;
pub mod kernel_filters;
pub mod keyring;
pub mod landlock;
pub mod mount_program;
pub mod mounts;
pub mod namespaces;
mod network;
mod own_loopback;
pub mod passwd_entry;
pub mod private_network;
pub mod relay;
pub mod seccomp;
pub mod workspace_mount;

use std::path::Path;
use std::sync::Arc;

use sandboxd_protocol::IsolationFeature;

use super::cgroup::Containment;
use super::disk_limit::DiskLimit;
use super::users::identity::{RunnerIdentity, RunnerUsers};
use crate::config::{Config, IsolationMode};
use crate::egress::Egress;
use init_binary::InitBinary;
use kernel_filters::KernelFilters;
use namespaces::View;

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
    pub mode: IsolationMode,
    /// `Some` when sandboxes get their own namespaces.
    pub view: Option<&'a View>,
    /// Why not, when `isolation = "full"` asked for them.
    pub view_problem: Option<&'a str>,
    /// What runs as each sandbox's init, holder and parked runner.
    pub init_binary: &'a InitBinary,
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
    features.push(facts.init_binary.feature());
    features.extend(namespace_features(
        facts.mode,
        facts.view,
        facts.view_problem,
    ));
    features.push(network::namespace_feature(facts.view));
    features.push(at_home_feature(facts.view));
    features.push(devpts::feature(
        facts.view.map(|view| view.settings.devpts()),
    ));
    features.sort_by(|a, b| a.name.cmp(&b.name));
    features
}

/// Under `isolation = "full"`, the view every sandbox gets, when this
/// daemon can make namespaces (tried at start, see [`namespaces::probe`]);
/// else `None` and why (logged: sandboxes then run as under `uid-cgroup`,
/// and `status` says so).
pub async fn set_up_view(
    config: &Config,
    exits_dir: &Path,
    init_binary: &Arc<InitBinary>,
) -> (Option<Arc<View>>, Option<String>) {
    if config.isolation != IsolationMode::Full {
        return (None, None);
    }
    let probed = tokio::task::spawn_blocking(namespaces::probe)
        .await
        .unwrap_or_else(|error| Err(format!("the namespace probe failed: {error}")));
    if let Err(problem) = probed {
        tracing::warn!(%problem, "isolation = \"full\" but this daemon cannot make namespaces: sandboxes see the host's file system, processes and IPC");
        return (None, Some(problem));
    }
    let settings = mounts::ViewSettings::new(
        &config.view,
        config.limits.memory,
        &config.state_dir,
        &config.socket,
    )
    .with_devpts(devpts::set_up(config.limits.ptys).await)
    .with_workspace_at(
        workspace_mount::workspace_mount_point().inspect_err(|problem| {
            tracing::warn!(%problem, "views mount each workspace at its host path");
        }),
    );
    let network = network::set_up(config).await;
    (
        Some(Arc::new(View::new(
            settings,
            exits_dir.to_path_buf(),
            config.state_dir.join("identities"),
            init_binary.clone(),
            network,
        ))),
        None,
    )
}

/// `mount-namespace`, `pid-namespace`, `ipc-namespace`.
fn namespace_features(
    mode: IsolationMode,
    view: Option<&View>,
    problem: Option<&str>,
) -> [IsolationFeature; 3] {
    let Some(view) = view else {
        let why = match (mode, problem) {
            (IsolationMode::UidCgroup, _) => {
                "isolation = \"uid-cgroup\": runners share the host's".to_string()
            }
            (IsolationMode::Gvisor, _) => {
                "isolation = \"gvisor\": see the gvisor feature; not the host's".to_string()
            }
            (IsolationMode::Full, problem) => format!(
                "isolation = \"full\" but namespaces cannot be made here ({}): runners share the host's",
                problem.unwrap_or("unknown")
            ),
        };
        return [
            IsolationFeature::not_in_force("mount-namespace", format!("{why} file system")),
            IsolationFeature::not_in_force("pid-namespace", format!("{why} processes")),
            IsolationFeature::not_in_force(
                "ipc-namespace",
                format!("{why} System V and POSIX IPC"),
            ),
        ];
    };
    let hidden: Vec<String> = view
        .settings
        .hidden()
        .map(|path| path.display().to_string())
        .collect();
    let mib = view.settings.tmp_size() >> 20;
    let tmpfs = match view.settings.tmpfs_layout() {
        mounts::TmpfsLayout::Shared => format!("one tmpfs of {mib} MiB for the three"),
        mounts::TmpfsLayout::PerPath => {
            format!("a tmpfs of {mib} MiB each: this daemon cannot make a detached one")
        }
    };
    [
        IsolationFeature::in_force(
            "mount-namespace",
            format!(
                "system read-only; private /tmp, /var/tmp, /dev/shm ({tmpfs}, charged to the sandbox's memory); hidden: {}; own workspace writable",
                hidden.join(", ")
            ),
        ),
        IsolationFeature::in_force(
            "pid-namespace",
            "own /proc: only the sandbox's processes; PID 1 is sandboxd's init (reaps, forwards signals) or, in a view prepared ahead, its holder (reaps; signals go to the runner's group directly); the pid reported is the runner's host pid",
        ),
        IsolationFeature::in_force(
            "ipc-namespace",
            "System V and POSIX IPC private, gone with the sandbox",
        ),
    ]
}

/// `at-home`: the workspace at `/workspace` and a passwd entry for the
/// sandbox's uid, in its view (see `workspace_mount`, `passwd_entry`).
fn at_home_feature(view: Option<&View>) -> IsolationFeature {
    const NAME: &str = "at-home";
    let Some(view) = view else {
        return IsolationFeature::not_in_force(
            NAME,
            "no view: the workspace at its host path, the sandbox's uid without a passwd entry",
        );
    };
    let passwd =
        "a passwd and group entry for the sandbox's uid (home its workspace), over the host's";
    match view.settings.workspace_at() {
        Ok(inside) => IsolationFeature::in_force(
            NAME,
            format!(
                "workspace at {} (HOME, WORKSPACE_ROOT_DIR); {passwd}",
                inside.display()
            ),
        ),
        Err(problem) => IsolationFeature::not_in_force(
            NAME,
            format!("workspace at its host path ({problem}); {passwd}"),
        ),
    }
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
