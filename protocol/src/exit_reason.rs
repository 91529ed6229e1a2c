//! Why a runner ended: one typed reason, the same on every tier.
//!
//! A control plane settles a retained process only with a terminal proof
//! (outcome, code, reason). Before this, the reason was spread over
//! [`crate::ExitInfo`]'s booleans and counters, differently per tier; now
//! every tier names one of these.

use std::fmt;

use serde::{Deserialize, Serialize};

/// Why a runner ended. New variants go at the end (bincode encodes the
/// position).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum ExitReason {
    /// It exited by itself with this code.
    Exited { code: i32 },
    /// A signal ended it (not one the daemon sent to stop it).
    Signaled { signal: i32 },
    /// The kernel's OOM killer ended it, at this memory limit when known.
    OutOfMemory { limit_bytes: Option<u64> },
    /// A deprovision stopped it.
    Deprovisioned,
    /// The daemon stopped it because the daemon itself was stopping.
    DaemonStopped,
    /// It was gone when the daemon started, with no record of how it ended
    /// (it ended while the daemon was down).
    Lost,
    /// Stopped for being idle too long (lifecycle work).
    Idle,
    /// Stopped at the end of its allowed lifetime (lifecycle work).
    Lifetime,
    /// Stopped because its workspace outgrew `[limits] disk`.
    DiskLimit { limit_bytes: u64 },
    /// The runtime did not say how it ended.
    Unknown,
    /// A command killed at its timeout (milliseconds). Added in protocol 10.
    TimedOut { limit_ms: u64 },
    /// A command ended because its sandbox did (deprovisioned, stopped by
    /// a lifecycle limit, its runner gone). Added in protocol 10.
    SandboxEnded,
    /// Stopped because the state directory's file system fell below the
    /// daemon's reserve (`[limits] state_reserve`) while it was writing.
    /// Added in protocol 11.
    DiskFull,
    /// Stopped because its workspace held more files and directories than
    /// `[limits] disk_inodes`. Added in protocol 11.
    DiskInodeLimit { limit_inodes: u64 },
}

impl ExitReason {
    /// The short, stable name (`exited`, `out-of-memory`, …) for `--json`
    /// and event lines.
    pub fn as_str(&self) -> &'static str {
        match self {
            ExitReason::Exited { .. } => "exited",
            ExitReason::Signaled { .. } => "signaled",
            ExitReason::OutOfMemory { .. } => "out-of-memory",
            ExitReason::Deprovisioned => "deprovisioned",
            ExitReason::DaemonStopped => "daemon-stopped",
            ExitReason::Lost => "lost",
            ExitReason::Idle => "idle",
            ExitReason::Lifetime => "lifetime",
            ExitReason::DiskLimit { .. } => "disk-limit",
            ExitReason::Unknown => "unknown",
            ExitReason::TimedOut { .. } => "timed-out",
            ExitReason::SandboxEnded => "sandbox-ended",
            ExitReason::DiskFull => "disk-full",
            ExitReason::DiskInodeLimit { .. } => "disk-inodes",
        }
    }

    /// The reason a runtime's raw facts add up to: the disk limit and the
    /// OOM killer first (they end a run with a signal or a code of their
    /// own), then the signal, then the code.
    pub fn from_facts(
        code: Option<i32>,
        signal: Option<i32>,
        oom_killed: bool,
        oom_limit_bytes: Option<u64>,
        disk_limit_bytes: Option<u64>,
    ) -> ExitReason {
        if let Some(limit_bytes) = disk_limit_bytes {
            return ExitReason::DiskLimit { limit_bytes };
        }
        if oom_killed {
            return ExitReason::OutOfMemory {
                limit_bytes: oom_limit_bytes,
            };
        }
        match (signal, code) {
            (Some(signal), _) => ExitReason::Signaled { signal },
            (None, Some(code)) => ExitReason::Exited { code },
            (None, None) => ExitReason::Unknown,
        }
    }
}

impl fmt::Display for ExitReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ExitReason::Exited { code } => write!(f, "exited (code {code})"),
            ExitReason::Signaled { signal } => write!(f, "signaled (signal {signal})"),
            ExitReason::OutOfMemory {
                limit_bytes: Some(limit),
            } => write!(f, "out-of-memory (limit {})", crate::show_bytes(*limit)),
            ExitReason::DiskLimit { limit_bytes } => {
                write!(f, "disk-limit ({})", crate::show_bytes(*limit_bytes))
            }
            ExitReason::TimedOut { limit_ms } => write!(f, "timed-out (after {limit_ms} ms)"),
            ExitReason::DiskInodeLimit { limit_inodes } => {
                write!(f, "disk-inodes (limit {limit_inodes} files)")
            }
            other => f.write_str(other.as_str()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn limits_come_before_signals_and_signals_before_codes() {
        assert_eq!(
            ExitReason::from_facts(Some(3), None, false, None, None),
            ExitReason::Exited { code: 3 }
        );
        assert_eq!(
            ExitReason::from_facts(None, Some(9), true, Some(1 << 20), None),
            ExitReason::OutOfMemory {
                limit_bytes: Some(1 << 20)
            }
        );
        assert_eq!(
            ExitReason::from_facts(None, Some(9), false, None, Some(5)),
            ExitReason::DiskLimit { limit_bytes: 5 }
        );
        assert_eq!(
            ExitReason::from_facts(None, Some(15), false, None, None).as_str(),
            "signaled"
        );
        assert_eq!(
            ExitReason::from_facts(None, None, false, None, None),
            ExitReason::Unknown
        );
    }

    #[test]
    fn the_disk_watchers_reasons_have_names_of_their_own() {
        assert_eq!(ExitReason::DiskFull.to_string(), "disk-full");
        let inodes = ExitReason::DiskInodeLimit { limit_inodes: 7 };
        assert_eq!(inodes.as_str(), "disk-inodes");
        assert_eq!(inodes.to_string(), "disk-inodes (limit 7 files)");
    }
}
