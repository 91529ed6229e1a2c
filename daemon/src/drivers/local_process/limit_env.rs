//! The sandbox's limits, told to its runner and every command in it as
//! environment variables ([`LIMIT_VARIABLES`]): where the kernel cannot
//! make a program's own questions answer truthfully. `/proc/meminfo`,
//! `free` and `sysinfo` show the host's memory (no FUSE layer such as
//! lxcfs stands in front of them), so a program that sizes a heap or a
//! cache from them is told the real bound here. Each variable is set only
//! where its limit is in force: absent means unlimited (or, on the
//! process-group fallback, not enforced).

use crate::config::LIMIT_VARIABLES;

use super::cgroup::CgroupTree;

/// The variables for a sandbox under `tree`'s limits and a workspace of
/// at most `disk` bytes (`None`: no disk limit).
pub fn limit_env(tree: Option<&CgroupTree>, disk: Option<u64>) -> Vec<(String, String)> {
    let [memory, cpu, pids, disk_name] = LIMIT_VARIABLES;
    let figures = [
        (
            memory,
            tree.and_then(CgroupTree::memory_limit)
                .map(|bytes| bytes.to_string()),
        ),
        (
            cpu,
            tree.and_then(CgroupTree::cpu_limit)
                .map(|cpus| cpus.to_string()),
        ),
        (
            pids,
            tree.and_then(CgroupTree::pids_limit)
                .map(|pids| pids.to_string()),
        ),
        (disk_name, disk.map(|bytes| bytes.to_string())),
    ];
    figures
        .into_iter()
        .filter_map(|(name, value)| Some((name.to_string(), value?)))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn without_cgroups_only_the_disk_limit_is_told() {
        assert_eq!(
            limit_env(None, Some(10 << 30)),
            [(
                "SANDBOXD_DISK_LIMIT_BYTES".to_string(),
                "10737418240".to_string()
            )]
        );
        assert!(limit_env(None, None).is_empty());
    }
}
