//! `[limits]`: what every process-tier sandbox's cgroup gets, and the
//! bounds each key is held to.

use anyhow::bail;
use serde::Deserialize;

use super::docker::DockerConfig;
use super::state_reserve::StateReserve;
use super::values::deserialize_memory;

/// The `[limits]` table: what every process-tier sandbox's cgroup gets.
/// Same words and defaults as the docker tier's; 0 = unlimited, and only
/// when written explicitly (an absent key is the default).
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct LimitsConfig {
    /// Memory (RAM and swap together) in bytes; `"2g"`, `"512m"` or a number.
    #[serde(deserialize_with = "deserialize_memory")]
    pub memory: u64,
    /// The most processes and threads a sandbox may hold.
    pub pids: u64,
    /// How many CPUs a sandbox may use (fractions allowed).
    pub cpu: f64,
    /// How much a sandbox's workspace may hold on disk, in bytes: the
    /// kubernetes tier's claim size by default.
    #[serde(deserialize_with = "deserialize_memory")]
    pub disk: u64,
    /// How many files and directories a sandbox's workspace may hold; 0 =
    /// no limit.
    pub disk_inodes: u64,
    /// Free space kept on the state directory's file system: below it, new
    /// sandboxes are refused and writing ones stopped.
    pub state_reserve: StateReserve,
    /// The most pseudo-terminals a sandbox may hold at once, in the
    /// devpts of its own its view gets (`isolation = "full"`); 0 = no
    /// limit of its own (the kernel's `pty.max` less `pty.reserve`, shared
    /// by all sandboxes, still applies).
    pub ptys: u32,
}

impl Default for LimitsConfig {
    fn default() -> Self {
        LimitsConfig {
            memory: 2 * 1024 * 1024 * 1024,
            pids: 512,
            cpu: 2.0,
            disk: DEFAULT_DISK_LIMIT,
            disk_inodes: DEFAULT_DISK_INODES,
            state_reserve: StateReserve::default(),
            ptys: DEFAULT_PTYS,
        }
    }
}

/// `[limits] disk` when not written: 10 GiB, the size of the kubernetes
/// tier's workspace claim.
pub const DEFAULT_DISK_LIMIT: u64 = 10 << 30;
/// The smallest disk limit allowed (0 aside).
const MIN_DISK_LIMIT: u64 = 1 << 20;
/// `[limits] disk_inodes` when not written: a million, far more than a
/// checkout with its dependencies needs.
pub const DEFAULT_DISK_INODES: u64 = 1_000_000;
/// The smallest `disk_inodes` allowed (0 aside): a runner needs a few.
const MIN_DISK_INODES: u64 = 100;
/// `[limits] ptys` when not written.
pub const DEFAULT_PTYS: u32 = 64;
/// The most `[limits] ptys` may be: the kernel's own cap on a devpts
/// (`NR_UNIX98_PTY_MAX`).
pub const MAX_PTYS: u32 = 1 << 20;

impl LimitsConfig {
    pub(super) fn validate(&self) -> anyhow::Result<()> {
        if self.disk != 0 && self.disk < MIN_DISK_LIMIT {
            bail!(
                "[limits] disk {} bytes is below the minimum of 1 MiB (0 = unlimited)",
                self.disk
            );
        }
        if self.disk_inodes != 0 && self.disk_inodes < MIN_DISK_INODES {
            bail!(
                "[limits] disk_inodes {} is below the minimum of {MIN_DISK_INODES} files (0 = unlimited)",
                self.disk_inodes
            );
        }
        if self.memory != 0 && self.memory < DockerConfig::MIN_MEMORY {
            bail!(
                "[limits] memory {} bytes is below the minimum of 6 MiB (0 = unlimited)",
                self.memory
            );
        }
        if !(self.cpu == 0.0 || (self.cpu.is_finite() && self.cpu >= 0.01)) {
            bail!(
                "[limits] cpu {} must be 0 (unlimited) or a number of at least 0.01",
                self.cpu
            );
        }
        if self.ptys > MAX_PTYS {
            bail!(
                "[limits] ptys {} is above the kernel's most of {MAX_PTYS} per devpts (0 = no limit of its own)",
                self.ptys
            );
        }
        Ok(())
    }
}
