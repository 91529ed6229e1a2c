//! `[pool]`: the sandboxes the process tier keeps prepared per scope.

use serde::Deserialize;

/// `[pool]`: how many sandboxes the process tier keeps prepared per scope
/// (see `drivers/local_process/prepared/`): cgroups made with their
/// limits, a uid claimed, a workspace owned by it, and under
/// `isolation = "full"` the namespaces made and the view built, ahead of
/// demand, so a new sandbox only renames its workspace into place and
/// starts its runner. 0 turns a scope's pool off.
///
/// `park_runners` (default true): each prepared sandbox also holds its
/// runner, started as far as it can be without the sandbox's environment
/// (in the cgroups, under the uid, every filter applied) and waiting for
/// it, so the take is one message and the runner's exec.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct PoolConfig {
    pub session: usize,
    pub workflow: usize,
    pub connect: usize,
    pub park_runners: bool,
}

/// The most views one scope's pool may keep prepared: each is a process
/// and three namespaces held while nothing uses them.
pub const MAX_POOL_SIZE: usize = 256;

impl Default for PoolConfig {
    fn default() -> Self {
        PoolConfig {
            session: 4,
            workflow: 2,
            connect: 0,
            park_runners: true,
        }
    }
}
