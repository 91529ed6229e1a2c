//! `[limits]`: what each sandbox's cgroup is given, as the files to write.
//!
//! The values are rendered once at start, so a new sandbox costs only the
//! writes. A limit of 0 (unlimited) writes nothing: a new cgroup starts
//! unlimited.

use super::layout::Controller;

/// The configured limits; 0 means unlimited.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Limits {
    /// Bytes of memory (RAM and swap together).
    pub memory: u64,
    /// Processes and threads.
    pub pids: u64,
    /// CPUs (fractions allowed).
    pub cpu: f64,
}

/// The scheduling period the cpu quota is a share of (the kernel's default).
pub const CPU_PERIOD_US: u64 = 100_000;

/// One file to write in a sandbox's cgroup directory of `controller`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LimitFile {
    pub controller: Controller,
    pub name: &'static str,
    pub value: String,
    /// A file that may be missing (swap accounting off): skipped then.
    pub optional: bool,
}

impl Limits {
    /// The files for `controller` in the hierarchy it lives in, in the
    /// order they must be written.
    pub fn files(&self, controller: Controller, v2: bool) -> Vec<LimitFile> {
        let file = |name: &'static str, value: String, optional: bool| LimitFile {
            controller,
            name,
            value,
            optional,
        };
        match (controller, v2) {
            (Controller::Memory, _) if self.memory == 0 => Vec::new(),
            (Controller::Memory, true) => vec![
                file("memory.max", self.memory.to_string(), false),
                // No swap beyond the limit: the limit is the whole bound.
                file("memory.swap.max", "0".to_string(), true),
            ],
            (Controller::Memory, false) => vec![
                file("memory.limit_in_bytes", self.memory.to_string(), false),
                // memsw counts memory plus swap; it must not be below the first.
                file("memory.memsw.limit_in_bytes", self.memory.to_string(), true),
            ],
            (Controller::Pids, _) if self.pids == 0 => Vec::new(),
            (Controller::Pids, _) => vec![file("pids.max", self.pids.to_string(), false)],
            (Controller::Cpu, _) if self.cpu == 0.0 => Vec::new(),
            (Controller::Cpu, true) => vec![file(
                "cpu.max",
                format!("{} {CPU_PERIOD_US}", self.quota_us()),
                false,
            )],
            (Controller::Cpu, false) => {
                vec![file("cpu.cfs_quota_us", self.quota_us().to_string(), false)]
            }
            (Controller::Freezer, _) => Vec::new(),
        }
    }

    fn quota_us(&self) -> u64 {
        (self.cpu * CPU_PERIOD_US as f64).round() as u64
    }

    /// The controllers a limit is set for.
    pub fn needed(&self) -> Vec<Controller> {
        let mut needed = Vec::new();
        if self.memory > 0 {
            needed.push(Controller::Memory);
        }
        if self.pids > 0 {
            needed.push(Controller::Pids);
        }
        if self.cpu > 0.0 {
            needed.push(Controller::Cpu);
        }
        needed
    }
}

pub use sandboxd_protocol::show_bytes;

#[cfg(test)]
mod tests {
    use super::*;

    const DEFAULTS: Limits = Limits {
        memory: 2 << 30,
        pids: 512,
        cpu: 2.0,
    };

    fn written(files: Vec<LimitFile>) -> Vec<(&'static str, String)> {
        files
            .into_iter()
            .map(|file| (file.name, file.value))
            .collect()
    }

    #[test]
    fn v2_and_v1_files_for_the_defaults() {
        assert_eq!(
            written(DEFAULTS.files(Controller::Memory, true)),
            [
                ("memory.max", "2147483648".to_string()),
                ("memory.swap.max", "0".to_string())
            ]
        );
        assert_eq!(
            written(DEFAULTS.files(Controller::Memory, false)),
            [
                ("memory.limit_in_bytes", "2147483648".to_string()),
                ("memory.memsw.limit_in_bytes", "2147483648".to_string())
            ]
        );
        assert_eq!(
            written(DEFAULTS.files(Controller::Cpu, true)),
            [("cpu.max", "200000 100000".to_string())]
        );
        assert_eq!(
            written(DEFAULTS.files(Controller::Cpu, false)),
            [("cpu.cfs_quota_us", "200000".to_string())]
        );
        for v2 in [true, false] {
            assert_eq!(
                written(DEFAULTS.files(Controller::Pids, v2)),
                [("pids.max", "512".to_string())]
            );
        }
        assert_eq!(
            DEFAULTS.needed(),
            [Controller::Memory, Controller::Pids, Controller::Cpu]
        );
    }

    #[test]
    fn zero_is_unlimited_and_writes_nothing() {
        let none = Limits {
            memory: 0,
            pids: 0,
            cpu: 0.0,
        };
        for controller in Controller::ALL {
            assert!(none.files(controller, true).is_empty());
            assert!(none.files(controller, false).is_empty());
        }
        assert!(none.needed().is_empty());
    }

    #[test]
    fn bytes_are_shown_in_the_largest_exact_unit() {
        assert_eq!(show_bytes(2 << 30), "2 GiB");
        assert_eq!(show_bytes(64 << 20), "64 MiB");
        assert_eq!(show_bytes(1536 << 20), "1536 MiB");
        assert_eq!(show_bytes(1000), "1000 bytes");
    }
}
