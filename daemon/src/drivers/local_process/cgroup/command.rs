//! A command's own cgroup, for limits of its own inside its sandbox's: a
//! child of the sandbox's cgroup in each hierarchy where the command has a
//! limit (memory, cpu), the sandbox's own cgroup in the others, so the
//! sandbox's limits still bound the command and its own bound it further.
//!
//! Only where that controller lives in a cgroup v1 hierarchy (a hybrid
//! host): in cgroup v2 the sandbox's cgroup holds its runner, and a cgroup
//! with processes may not give controllers to children (the "no internal
//! processes" rule), so a command there cannot have limits of its own
//! without moving the runner into a leaf first. The start says so, by
//! name, rather than starting the command unbounded.
//!
//! The cgroup ends with the command: whatever it left in it is killed and
//! the directories are removed, so the sandbox's own removal never meets
//! a child in the way.

use std::io;
use std::path::PathBuf;

use super::kill;
use super::limits::CPU_PERIOD_US;
use super::tree::CgroupTree;
use crate::drivers::local_process::launch::clone_exec::CgroupPlacement;

/// A command's directories, removed by [`CommandCgroup::remove`].
pub struct CommandCgroup {
    dirs: Vec<PathBuf>,
    memory: Option<PathBuf>,
    /// Its own memory limit, when it has one.
    pub memory_limit: Option<u64>,
}

/// What a command asks for, for itself.
#[derive(Debug, Clone, Copy)]
pub struct CommandLimits {
    pub memory_bytes: Option<u64>,
    pub cpu_millis: Option<u32>,
}

impl CgroupTree {
    /// Makes `name` under `base_name`'s cgroup with `limits`, and opens
    /// what the clone needs to start the command in it. `Err` says why
    /// not, for the caller.
    pub fn command_cgroup(
        &self,
        base_name: &str,
        name: &str,
        limits: CommandLimits,
    ) -> Result<(CgroupPlacement, CommandCgroup), String> {
        let sandbox = self.dirs(base_name);
        let memory = self.v1_index_of_memory("memory", limits.memory_bytes.is_some())?;
        let cpu = self.v1_index_of_cpu("cpu", limits.cpu_millis.is_some())?;
        if let (Some(asked), Some(limit)) = (limits.memory_bytes, self.memory_limit()) {
            if asked > limit {
                return Err(format!(
                    "limits.memory_bytes = {asked} is above its sandbox's memory limit ({limit}): a command's own limit can only be lower"
                ));
            }
        }
        let mut made = CommandCgroup {
            dirs: Vec::new(),
            memory: None,
            memory_limit: limits.memory_bytes,
        };
        let mut files: Vec<(usize, &str, String)> = Vec::new();
        if let (Some(index), Some(bytes)) = (memory, limits.memory_bytes) {
            files.push((index, "memory.limit_in_bytes", bytes.to_string()));
            files.push((index, "memory.memsw.limit_in_bytes", bytes.to_string()));
        }
        if let (Some(index), Some(millis)) = (cpu, limits.cpu_millis) {
            let quota = u64::from(millis) * CPU_PERIOD_US / 1000;
            files.push((index, "cpu.cfs_quota_us", quota.to_string()));
        }
        let mut procs = Vec::new();
        for (index, dir) in sandbox.v1.iter().enumerate() {
            let own = [memory, cpu].contains(&Some(index));
            let dir = if own {
                let child = dir.join(name);
                std::fs::create_dir(&child)
                    .map_err(|error| format!("mkdir {}: {error}", child.display()))?;
                made.dirs.push(child.clone());
                if memory == Some(index) {
                    made.memory = Some(child.clone());
                }
                child
            } else {
                dir.clone()
            };
            for (_, file, value) in files.iter().filter(|(at, ..)| *at == index) {
                let path = dir.join(file);
                match kill::write_file(&path, value) {
                    Ok(()) => {}
                    // No swap accounting: the memory limit alone holds.
                    Err(error)
                        if file.contains("memsw") && error.kind() == io::ErrorKind::NotFound => {}
                    Err(error) => return Err(format!("{} = {value}: {error}", path.display())),
                }
            }
            procs.push(dir.join(super::tree::V1_JOIN));
        }
        let placement = super::tree::open_placement_at(&sandbox.v2, &procs)
            .map_err(|error| format!("open the command's cgroup: {error}"))?;
        Ok((self.on_cpus(placement, &self.cgroup_name(base_name)), made))
    }
}

impl CommandCgroup {
    /// The OOM kills in its memory cgroup (0 without one of its own).
    pub fn oom_kills(&self) -> u64 {
        let Some(dir) = &self.memory else { return 0 };
        std::fs::read_to_string(dir.join("memory.oom_control"))
            .ok()
            .and_then(|text| kill::event_value(&text, "oom_kill"))
            .unwrap_or(0)
    }

    /// Kills what the command left in its cgroups and removes them.
    pub fn remove(self) {
        for dir in &self.dirs {
            let procs = std::fs::read_to_string(dir.join("cgroup.procs")).unwrap_or_default();
            for pid in procs
                .lines()
                .filter_map(|line| line.trim().parse::<i32>().ok())
            {
                // SAFETY: kill with a pid read from the cgroup and a plain signal.
                unsafe { libc::kill(pid, libc::SIGKILL) };
            }
        }
        for dir in self.dirs {
            if let Err(error) = remove_when_empty(&dir) {
                tracing::warn!(cgroup = %dir.display(), %error, "cannot remove a command's cgroup");
            }
        }
    }
}

/// Removes `dir` once its killed processes are gone (a moment).
fn remove_when_empty(dir: &std::path::Path) -> io::Result<()> {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    loop {
        match std::fs::remove_dir(dir) {
            Ok(()) => return Ok(()),
            Err(error) if error.kind() == io::ErrorKind::NotFound => return Ok(()),
            Err(error) if std::time::Instant::now() >= deadline => return Err(error),
            Err(_) => std::thread::sleep(std::time::Duration::from_millis(10)),
        }
    }
}
