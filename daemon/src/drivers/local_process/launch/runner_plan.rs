//! What a runner is started with — program, arguments, environment,
//! working directory, privileges — as one value, and the one way an
//! [`ExecPlan`] is built from it.
//!
//! Both starts go through [`RunnerLaunch::exec_plan`]: the daemon's clone
//! child (under `isolation = "uid-cgroup"`) and a sandbox's first process
//! (under `"full"`, see `launch::clone_exec`'s `view_child`). So every
//! step the clone child takes for a runner — privileges, user switch, the
//! kernel filters — is the same whichever process starts it.

use std::ffi::OsString;
use std::os::fd::OwnedFd;
use std::path::PathBuf;
use std::sync::Arc;

use super::super::isolation::kernel_filters::KernelFilters;
use super::clone_exec::{ExecPlan, Privileges};

/// A runner's start, before any descriptor exists. Holds the token (in
/// `env`): never logged.
#[derive(Clone)]
pub struct RunnerLaunch {
    /// Absolute: no `PATH` search happens at exec.
    pub program: PathBuf,
    pub args: Vec<String>,
    pub env: Vec<(OsString, OsString)>,
    /// The workspace as the runner sees it: `/workspace` in a view.
    pub cwd: PathBuf,
    /// The workspace's path on the host (what a view mounts at `cwd`).
    pub workspace: PathBuf,
    pub privileges: Privileges,
}

impl std::fmt::Debug for RunnerLaunch {
    /// Names only: the environment holds the token.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RunnerLaunch")
            .field("program", &self.program)
            .field("cwd", &self.cwd)
            .field("privileges", &self.privileges)
            .finish_non_exhaustive()
    }
}

impl RunnerLaunch {
    /// The plan of this runner with `stdio` as its descriptors 0, 1 and 2,
    /// under `filters` (the daemon's, prepared at start).
    pub fn exec_plan(
        &self,
        stdio: [OwnedFd; 3],
        filters: Arc<KernelFilters>,
    ) -> Result<ExecPlan, String> {
        Ok(ExecPlan::new(
            self.program.as_os_str(),
            &self.args,
            self.env.iter().map(|(name, value)| (name, value)),
            self.cwd.as_os_str(),
            stdio,
            self.privileges,
        )?
        .with_filters(filters))
    }
}
