//! How the driver uses its [cgroups](super::super::cgroup): choosing them at start,
//! the start-up and stop sweeps, and the end of one runner's run.

use std::sync::Arc;
use std::time::Duration;

use anyhow::bail;
use sandboxd_protocol::ExitInfo;

use super::super::cgroup::kill;
use super::super::cgroup::layout::Layout;
use super::super::cgroup::limits::Limits;
use super::super::cgroup::tree::{CgroupTree, TreeSettings};
use super::super::cgroup::Containment;
use crate::config::{Config, ContainmentMode};
use crate::sandbox_key::SandboxKey;

/// How long a killed cgroup may take to empty.
const EMPTY_WAIT: Duration = Duration::from_secs(30);

/// Sets up a cgroup per sandbox, or says why the process-group fallback
/// is in force (an error only when the config insists on cgroups).
pub fn set_up(config: &Config) -> anyhow::Result<Containment> {
    if config.containment == ContainmentMode::ProcessGroup {
        return Ok(Containment::ProcessGroups {
            reason: "containment = \"process-group\" in the config".to_string(),
        });
    }
    let settings = TreeSettings {
        root: config.cgroup_root.as_deref(),
        limits: Limits {
            memory: config.limits.memory,
            pids: config.limits.pids,
            cpu: config.limits.cpu,
        },
        state_dir: &config.state_dir,
        default_state_dir: config.has_default_state_dir(),
    };
    match CgroupTree::set_up(&Layout::detect(), &settings) {
        Ok(tree) => Ok(Containment::Cgroups(Arc::new(tree))),
        Err(error) if config.containment == ContainmentMode::Cgroup => {
            bail!("containment = \"cgroup\", but no writable cgroup v2 is here: {error}")
        }
        Err(error) => {
            tracing::warn!(%error, "no writable cgroup v2: runners are contained by process groups only (a descendant that calls setsid can escape, and [limits] are not enforced)");
            Ok(Containment::ProcessGroups {
                reason: format!("no writable cgroup v2: {error}"),
            })
        }
    }
}

/// Kills and removes every sandbox cgroup left under `sandboxes/` (by an
/// earlier instance at start, by the records' gaps at stop). Blocking.
/// Returns how many there were.
pub fn sweep(tree: &CgroupTree) -> usize {
    match kill::kill_children_and_remove(tree.sandboxes(), EMPTY_WAIT) {
        Ok(names) => names.len(),
        Err(error) => {
            tracing::error!(%error, "cannot empty the sandboxes' cgroups");
            0
        }
    }
}

/// During a stop, removes each sandbox's cgroups as soon as its runner is
/// gone, on one thread, while the other runners are still stopping.
///
/// Why one thread, and why not each runner's watcher as outside a stop:
/// every cgroup removal (and the kernel's own offlining work after it)
/// takes the kernel's one `cgroup_mutex`, so removals cannot run in
/// parallel; made by thousands of watchers at once they spent the stop
/// spinning on that mutex on every worker thread. A cgroup still populated
/// (a process that escaped its runner) is left to the stop sweep, which
/// kills the whole tree at once.
pub struct StopRemover {
    queue: std::sync::mpsc::Sender<String>,
    thread: std::thread::JoinHandle<()>,
}

impl StopRemover {
    pub fn start(tree: Arc<CgroupTree>) -> std::io::Result<StopRemover> {
        let (queue, bases) = std::sync::mpsc::channel::<String>();
        let thread = std::thread::Builder::new()
            .name("cgroup-remover".into())
            .spawn(move || {
                let started = std::time::Instant::now();
                // No check first: a populated cgroup refuses the rmdir
                // (EBUSY), which is the check.
                let remove = |base: &String| match kill::try_remove(&tree.dirs(base)) {
                    Ok(removed) => removed,
                    Err(error) => {
                        tracing::debug!(%error, "a stopped runner's cgroup is left to the stop sweep");
                        false
                    }
                };
                let busy: Vec<String> = bases.into_iter().filter(|base| !remove(base)).collect();
                // Busy a moment ago: a v1 cgroup can stay busy briefly after
                // its last process was reaped. Once more, then the sweep.
                let left = busy.iter().filter(|base| !remove(base)).count();
                tracing::debug!(left, elapsed = ?started.elapsed(), "the stop's cgroup removals are done");
            })?;
        Ok(StopRemover { queue, thread })
    }

    /// `base`'s runner is gone.
    pub fn remove(&self, base: &str) {
        let _ = self.queue.send(base.to_string());
    }

    /// Waits until every removal queued has been made. Blocking.
    pub fn finish(self) {
        drop(self.queue);
        let _ = self.thread.join();
    }
}

/// After a runner's leader exited: kills what is left in its cgroup, waits
/// until it is empty, notes in `exit` what its limits did, and removes it.
pub async fn end_of_run(tree: &Arc<CgroupTree>, key: &SandboxKey, exit: &mut ExitInfo) {
    let dirs = tree.dirs(&key.base_name);
    // Usually already empty (the runner forked nothing that outlived it):
    // then this is one read, here, and no trip to the blocking pool.
    if kill::populated(&dirs.v2).unwrap_or(false) {
        let pending = dirs.clone();
        let emptied = tokio::task::spawn_blocking(move || {
            kill::kill(&pending)?;
            kill::wait_empty(&pending.v2, EMPTY_WAIT)
        })
        .await;
        match emptied {
            Ok(Ok(true)) => {}
            Ok(Ok(false)) => {
                tracing::error!(scope = %key.scope, id = %key.id, cgroup = %dirs.v2.display(), "processes of an ended runner did not die within {EMPTY_WAIT:?} of the kill")
            }
            Ok(Err(error)) => {
                tracing::error!(scope = %key.scope, id = %key.id, %error, "cannot kill what an ended runner left")
            }
            Err(error) => tracing::error!(%error, "the cgroup kill task failed"),
        }
    }
    let facts = tree.exit_facts(&key.base_name);
    exit.oom_killed = facts.oom_kills > 0 && exit.signal == Some(libc::SIGKILL);
    if exit.oom_killed {
        exit.oom_limit_bytes = tree.memory_limit();
    }
    exit.pids_refused = facts.pids_refused;
    if facts.pids_refused > 0 {
        exit.pids_limit = tree.pids_limit();
    }
    if let Err(error) = tree.remove_sandbox(&key.base_name) {
        tracing::warn!(scope = %key.scope, id = %key.id, %error, "cannot remove an ended runner's cgroup");
    }
}
