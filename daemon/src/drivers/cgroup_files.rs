//! What the tiers read from a cgroup's files: a sandbox's CPU use (the
//! local-process tier's own cgroups, and the cgroup the docker engine made
//! for a container), and `key value` lines. Here, above both tiers, so
//! neither imports the other.

use std::io::Read as _;
use std::path::PathBuf;

/// Where one sandbox's CPU use is read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CpuUsage {
    /// `cpu.stat` (`usage_usec`) in this v2 directory.
    V2(PathBuf),
    /// `cpuacct.usage` (nanoseconds) in this v1 directory.
    V1(PathBuf),
}

impl CpuUsage {
    /// The CPU time used so far, in microseconds; `None` when it cannot
    /// be read (the cgroup is gone).
    pub fn read_usec(&self) -> Option<u64> {
        // One open and one read into the stack: no size lookup, no
        // allocation (this runs for every watched runner at every tick).
        let mut buffer = [0u8; 512];
        let path = match self {
            CpuUsage::V2(file) | CpuUsage::V1(file) => file,
        };
        let read = std::fs::File::open(path)
            .and_then(|mut file| file.read(&mut buffer))
            .ok()?;
        let text = std::str::from_utf8(&buffer[..read]).ok()?;
        match self {
            CpuUsage::V2(_) => event_value(text, "usage_usec"),
            CpuUsage::V1(_) => text.trim().parse::<u64>().ok().map(|nanos| nanos / 1000),
        }
    }
}

/// The number after `key` in a `key value` per line file.
pub fn event_value(text: &str, key: &str) -> Option<u64> {
    text.lines().find_map(|line| {
        let (name, value) = line.split_once(' ')?;
        (name == key).then(|| value.trim().parse().ok())?
    })
}
