//! A running sandbox's live figures, read from its cgroup when `describe`
//! or `usage` asks (never polled): memory now and at its peak, tasks,
//! CPU time, forks refused and OOM kills.
//!
//! Each controller's files are read where the [`layout`](super::layout)
//! put it: on a pure v2 host all in the sandbox's v2 directory; on a
//! hybrid host memory and pids in their v1 hierarchies, whose files are
//! named differently (`memory.usage_in_bytes` for `memory.current`). CPU
//! time comes from v2's `cpu.stat`, which every v2 cgroup has whether or
//! not the cpu controller is enabled (the kernel's own accounting), so
//! it is there on both kinds of host (else v1's `cpuacct.usage`, in
//! nanoseconds, where the sandbox has a cpu,cpuacct directory: see
//! [`CpuUsage`], which the idle watcher reads too, one small file per
//! sandbox and sample). A file that cannot be read leaves
//! its figure `None`: a kernel without `memory.peak` (before 5.19) shows
//! no peak rather than a wrong one.

use std::path::{Path, PathBuf};

use super::kill::Dirs;
pub use crate::drivers::cgroup_files::{event_value, CpuUsage};

/// Where one sandbox's figures are (see [`super::CgroupTree::figure_dirs`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FigureDirs {
    /// The v2 directory: every process (its threads counted where no pids
    /// controller is).
    pub v2: PathBuf,
    /// The memory controller's directory, and whether it is v2.
    pub memory: Option<(PathBuf, bool)>,
    /// The pids controller's directory, and whether it is v2.
    pub pids: Option<(PathBuf, bool)>,
    /// Where its CPU time is read.
    pub cpu: Option<CpuUsage>,
}

/// What the cgroup counted, read now.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CgroupFigures {
    pub memory_bytes: Option<u64>,
    pub memory_peak_bytes: Option<u64>,
    pub tasks: Option<u64>,
    pub cpu_usec: Option<u64>,
    pub forks_refused: Option<u64>,
    pub oom_kills: Option<u64>,
}

impl FigureDirs {
    /// Reads every figure. Blocking (a few small sysfs reads).
    pub fn read(&self) -> CgroupFigures {
        let memory = self.memory.as_ref();
        let pids = self.pids.as_ref();
        let in_memory = |v2: &str, v1: &str| {
            memory.and_then(|(dir, is_v2)| number(&dir.join(if *is_v2 { v2 } else { v1 })))
        };
        let tasks = pids
            .and_then(|(dir, _)| number(&dir.join("pids.current")))
            // No pids controller here: count the threads v2 holds.
            .or_else(|| lines(&self.v2.join("cgroup.threads")));
        CgroupFigures {
            memory_bytes: in_memory("memory.current", "memory.usage_in_bytes"),
            memory_peak_bytes: in_memory("memory.peak", "memory.max_usage_in_bytes"),
            tasks,
            cpu_usec: self.cpu.as_ref().and_then(CpuUsage::read_usec),
            forks_refused: pids.and_then(|(dir, _)| keyed(&dir.join("pids.events"), "max")),
            oom_kills: memory.and_then(|(dir, is_v2)| {
                let file = if *is_v2 {
                    "memory.events"
                } else {
                    "memory.oom_control"
                };
                keyed(&dir.join(file), "oom_kill")
            }),
        }
    }
}

/// Where `dirs`' CPU use is read, or `None` where no file says it.
pub fn cpu_usage_of(dirs: &Dirs) -> Option<CpuUsage> {
    let stat = dirs.v2.join("cpu.stat");
    if stat.exists() {
        return Some(CpuUsage::V2(stat));
    }
    dirs.v1
        .iter()
        .map(|dir| dir.join("cpuacct.usage"))
        .find(|file| file.exists())
        .map(CpuUsage::V1)
}

/// A file holding one number (`max` is no number: `None`).
fn number(path: &Path) -> Option<u64> {
    std::fs::read_to_string(path).ok()?.trim().parse().ok()
}

/// The value of `key` in a file of `key value` lines.
fn keyed(path: &Path, key: &str) -> Option<u64> {
    event_value(&std::fs::read_to_string(path).ok()?, key)
}

/// How many lines a file has.
fn lines(path: &Path) -> Option<u64> {
    Some(std::fs::read_to_string(path).ok()?.lines().count() as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scratch(name: &str) -> PathBuf {
        let dir =
            std::env::temp_dir().join(format!("sandboxd-usage-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    #[test]
    fn v2_files_are_read_where_v2_holds_the_controllers() {
        let dir = scratch("v2");
        for (file, text) in [
            ("memory.current", "4096\n"),
            ("memory.peak", "8192\n"),
            ("memory.events", "low 0\nhigh 0\nmax 3\noom 1\noom_kill 1\n"),
            ("pids.current", "3\n"),
            ("pids.events", "max 2\n"),
            ("cpu.stat", "usage_usec 1234567\nuser_usec 1000000\n"),
        ] {
            std::fs::write(dir.join(file), text).unwrap();
        }
        let figures = FigureDirs {
            v2: dir.clone(),
            memory: Some((dir.clone(), true)),
            pids: Some((dir.clone(), true)),
            cpu: Some(CpuUsage::V2(dir.join("cpu.stat"))),
        }
        .read();
        assert_eq!(
            figures,
            CgroupFigures {
                memory_bytes: Some(4096),
                memory_peak_bytes: Some(8192),
                tasks: Some(3),
                cpu_usec: Some(1_234_567),
                forks_refused: Some(2),
                oom_kills: Some(1),
            }
        );
        std::fs::remove_dir_all(dir).unwrap();
    }

    #[test]
    fn v1_files_are_read_on_a_hybrid_host_and_missing_ones_stay_unknown() {
        let dir = scratch("v1");
        let (v2, memory) = (dir.join("unified"), dir.join("memory"));
        std::fs::create_dir_all(&v2).unwrap();
        std::fs::create_dir_all(&memory).unwrap();
        std::fs::write(memory.join("memory.usage_in_bytes"), "100\n").unwrap();
        std::fs::write(
            memory.join("memory.oom_control"),
            "oom_kill_disable 0\nunder_oom 0\noom_kill 0\n",
        )
        .unwrap();
        std::fs::write(v2.join("cgroup.threads"), "10\n11\n").unwrap();
        let figures = FigureDirs {
            v2,
            memory: Some((memory, false)),
            pids: None,
            cpu: None,
        }
        .read();
        assert_eq!(
            figures,
            CgroupFigures {
                memory_bytes: Some(100),
                memory_peak_bytes: None,
                tasks: Some(2),
                cpu_usec: None,
                forks_refused: None,
                oom_kills: Some(0),
            }
        );
        std::fs::remove_dir_all(dir).unwrap();
    }
}
