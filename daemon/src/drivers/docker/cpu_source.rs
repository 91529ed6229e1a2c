//! Where the idle watcher reads a container's CPU time.
//!
//! From its cgroup when the daemon can see it (one small file per
//! container and tick, as on the process tier), found once per run:
//! first through `/proc/<State.Pid>/cgroup` of the container's init, the
//! kernel's own word on where it is, whatever the engine's cgroup driver;
//! else at the places the engine's drivers put a container: the systemd
//! driver's `system.slice/docker-<id>.scope`, cgroupfs's `docker/<id>`,
//! under v2's `/sys/fs/cgroup` (or `/sys/fs/cgroup/unified` on a hybrid
//! host) for `cpu.stat`, and under v1's `cpu,cpuacct` or `cpuacct`
//! hierarchy for `cpuacct.usage`. A directory counts only when its path
//! names the container's id: on a hybrid host with v1 containers, the
//! init's v2 line points at a shared parent whose `cpu.stat` is everyone's.
//!
//! When no file is found (a remote engine, another pid namespace), the
//! Engine's one-shot stats (`cpu_stats.cpu_usage.total_usage`) are read
//! instead: one API call per container and tick, which the log says.

use std::path::{Path, PathBuf};

use crate::drivers::cgroup_files::CpuUsage;

/// Where the cgroup hierarchies are mounted.
const CGROUP_ROOT: &str = "/sys/fs/cgroup";

/// The cgroup file of container `id` whose init is `pid`, if one is found.
pub fn find(id: &str, pid: Option<u32>) -> Option<CpuUsage> {
    find_under(Path::new(CGROUP_ROOT), Path::new("/proc"), id, pid)
}

fn find_under(root: &Path, proc: &Path, id: &str, pid: Option<u32>) -> Option<CpuUsage> {
    if id.is_empty() {
        return None;
    }
    let from_proc = pid
        .and_then(|pid| std::fs::read_to_string(proc.join(pid.to_string()).join("cgroup")).ok())
        .map(|text| candidates_from_proc(root, &text, id))
        .unwrap_or_default();
    from_proc
        .into_iter()
        .chain(conventional_candidates(root, id))
        .find(|usage| match usage {
            CpuUsage::V2(file) | CpuUsage::V1(file) => file.is_file(),
        })
}

/// The files `/proc/PID/cgroup`'s lines point at, where they name `id`.
fn candidates_from_proc(root: &Path, text: &str, id: &str) -> Vec<CpuUsage> {
    let mut found = Vec::new();
    for line in text.lines() {
        let mut fields = line.splitn(3, ':');
        let (Some(_), Some(controllers), Some(path)) =
            (fields.next(), fields.next(), fields.next())
        else {
            continue;
        };
        if !path.contains(id) {
            continue;
        }
        let relative = path.trim_start_matches('/');
        if controllers.is_empty() {
            for v2 in [root.to_path_buf(), root.join("unified")] {
                found.push(CpuUsage::V2(v2.join(relative).join("cpu.stat")));
            }
        } else if controllers.split(',').any(|name| name == "cpuacct") {
            for mount in [controllers, "cpuacct", "cpu,cpuacct"] {
                found.push(CpuUsage::V1(
                    root.join(mount).join(relative).join("cpuacct.usage"),
                ));
            }
        }
    }
    found
}

/// The places the engine's cgroup drivers put container `id`.
fn conventional_candidates(root: &Path, id: &str) -> Vec<CpuUsage> {
    let dirs: [PathBuf; 2] = [
        PathBuf::from(format!("system.slice/docker-{id}.scope")),
        PathBuf::from(format!("docker/{id}")),
    ];
    let mut found = Vec::new();
    for dir in &dirs {
        for v2 in [root.to_path_buf(), root.join("unified")] {
            found.push(CpuUsage::V2(v2.join(dir).join("cpu.stat")));
        }
    }
    for dir in &dirs {
        for mount in ["cpu,cpuacct", "cpuacct"] {
            found.push(CpuUsage::V1(
                root.join(mount).join(dir).join("cpuacct.usage"),
            ));
        }
    }
    found
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A scratch directory for one test, removed at the end.
    struct Scratch(PathBuf);

    impl Scratch {
        fn new(name: &str) -> Scratch {
            let dir = std::env::temp_dir()
                .join(format!("sandboxd-cpu-source-{name}-{}", std::process::id()));
            let _ = std::fs::remove_dir_all(&dir);
            std::fs::create_dir_all(&dir).unwrap();
            Scratch(dir)
        }

        fn file(&self, relative: &str, text: &str) -> PathBuf {
            let path = self.0.join(relative);
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::write(&path, text).unwrap();
            path
        }
    }

    impl Drop for Scratch {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }

    #[test]
    fn the_init_s_cgroup_line_wins_and_must_name_the_container() {
        let scratch = Scratch::new("proc");
        let root = scratch.0.join("cgroup");
        let proc = scratch.0.join("proc");
        // A hybrid host: the v2 line is a shared parent, v1 names the id.
        scratch.file(
            "proc/42/cgroup",
            "3:cpu:/docker/abc\n2:cpuacct:/docker/abc\n0::/\n",
        );
        scratch.file("cgroup/unified/cpu.stat", "usage_usec 999999\n");
        let v1 = scratch.file("cgroup/cpuacct/docker/abc/cpuacct.usage", "5000\n");
        let found = find_under(&root, &proc, "abc", Some(42)).unwrap();
        assert_eq!(found, CpuUsage::V1(v1));
        assert_eq!(found.read_usec(), Some(5));
        // Pure v2 with the systemd driver.
        scratch.file("proc/43/cgroup", "0::/system.slice/docker-def.scope\n");
        let v2 = scratch.file(
            "cgroup/system.slice/docker-def.scope/cpu.stat",
            "usage_usec 77\nuser_usec 70\n",
        );
        let found = find_under(&root, &proc, "def", Some(43)).unwrap();
        assert_eq!(found, CpuUsage::V2(v2));
        assert_eq!(found.read_usec(), Some(77));
    }

    #[test]
    fn without_the_init_the_drivers_places_are_tried_and_else_none() {
        let scratch = Scratch::new("places");
        let root = scratch.0.join("cgroup");
        let proc = scratch.0.join("proc");
        let v1 = scratch.file("cgroup/cpu,cpuacct/docker/ghi/cpuacct.usage", "1000\n");
        assert_eq!(
            find_under(&root, &proc, "ghi", Some(7)),
            Some(CpuUsage::V1(v1))
        );
        assert_eq!(find_under(&root, &proc, "nope", None), None);
        assert_eq!(find_under(&root, &proc, "", None), None);
    }
}
