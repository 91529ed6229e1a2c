//! Live figures of a running sandbox: what `systemctl status` and
//! `docker stats` show (memory, tasks, CPU time, forks refused, OOM kills,
//! workspace size), read from the runtime when asked, never kept.
//!
//! Every figure is optional: a tier, or a host, that cannot tell one
//! leaves it `None` and the client shows a dash, never a made-up zero.
//! Added in protocol 8.

use serde::{Deserialize, Serialize};

use crate::Scope;

/// One sandbox's figures, read at `sampled_at_unix_ms`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Usage {
    /// When the figures were read, in milliseconds since the Unix epoch
    /// (two samples give a CPU percentage).
    pub sampled_at_unix_ms: u64,
    /// Memory charged to the sandbox now, in bytes.
    pub memory_bytes: Option<u64>,
    /// The most memory it was charged at once (this cgroup's life).
    pub memory_peak_bytes: Option<u64>,
    /// The memory limit in force, in bytes; `None`: unlimited or unknown.
    pub memory_limit_bytes: Option<u64>,
    /// Tasks (processes and threads) in the sandbox now.
    pub tasks: Option<u64>,
    /// The pids limit in force; `None`: unlimited or unknown.
    pub tasks_limit: Option<u64>,
    /// CPU time used since the runner started, in microseconds.
    pub cpu_usec: Option<u64>,
    /// Forks refused at the pids limit so far.
    pub forks_refused: Option<u64>,
    /// Processes the kernel's OOM killer ended so far.
    pub oom_kills: Option<u64>,
    /// Bytes the workspace takes on disk.
    pub workspace_bytes: Option<u64>,
    /// `[limits] disk`, in bytes; `None`: unlimited or unknown.
    pub disk_limit_bytes: Option<u64>,
    /// The Unix uid the runner runs as, when the tier knows it.
    pub unix_uid: Option<u32>,
    /// Where the figures come from: the cgroup's path (process tier), the
    /// container (docker).
    pub cgroup: Option<String>,
}

/// One running sandbox and its figures, as `usage` returns them.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SandboxUsage {
    /// The base name (`sbx-<code>-<hex12>`).
    pub name: String,
    pub scope: Scope,
    pub id: String,
    pub usage: Usage,
}

/// The CPU share used between two samples of one sandbox, in percent of
/// one core (200 % is two cores busy), as `top` and `docker stats` show
/// it; `None` when either sample lacks CPU time or they are not in order.
pub fn cpu_percent(earlier: &Usage, later: &Usage) -> Option<f64> {
    let used = later.cpu_usec?.checked_sub(earlier.cpu_usec?)?;
    let elapsed_ms = later
        .sampled_at_unix_ms
        .checked_sub(earlier.sampled_at_unix_ms)?;
    (elapsed_ms > 0).then(|| used as f64 / (elapsed_ms as f64 * 1000.0) * 100.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpu_percent_is_cpu_time_over_wall_time() {
        let earlier = Usage {
            sampled_at_unix_ms: 1_000,
            cpu_usec: Some(5_000_000),
            ..Usage::default()
        };
        let later = Usage {
            sampled_at_unix_ms: 2_000,
            cpu_usec: Some(5_500_000),
            ..Usage::default()
        };
        assert_eq!(cpu_percent(&earlier, &later), Some(50.0));
        assert_eq!(cpu_percent(&later, &earlier), None, "out of order");
        let unknown = Usage {
            cpu_usec: None,
            ..later.clone()
        };
        assert_eq!(cpu_percent(&earlier, &unknown), None);
        assert_eq!(cpu_percent(&earlier, &earlier), None, "no time passed");
    }
}
