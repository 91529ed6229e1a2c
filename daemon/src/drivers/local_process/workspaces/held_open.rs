//! Space a sandbox holds that no walk of its workspace can see: files it
//! unlinked but keeps open (or mapped). Their blocks stay allocated until
//! the last descriptor closes, so a runner could otherwise write a file,
//! unlink it, and go on writing to it without ever being counted.
//!
//! The sandbox's processes are known from its cgroup (every `cgroup.procs`
//! of its v2 directory and below), or, without cgroups, from its process
//! group. Each descriptor in `/proc/<pid>/fd` and each mapping in
//! `/proc/<pid>/map_files` is `stat`ed through its magic link (that is the
//! open file itself, whatever its name was); one with no link left that
//! lives on the workspace's file system counts, once however many hold it.
//! Blocking; the daemon is root, which reading another user's `fd` and
//! `map_files` needs.

use std::collections::HashSet;
use std::os::unix::fs::MetadataExt;
use std::path::Path;

/// How deep below a sandbox's cgroup its processes are looked for (its
/// commands' cgroups are one level down).
const MAX_CGROUP_DEPTH: usize = 8;

/// The pids in the cgroup v2 directory `v2` and the cgroups below it.
pub fn pids_in_cgroup(v2: &Path) -> Vec<i32> {
    let mut pids = Vec::new();
    let mut pending = vec![(v2.to_path_buf(), 0)];
    while let Some((dir, depth)) = pending.pop() {
        if let Ok(text) = std::fs::read_to_string(dir.join("cgroup.procs")) {
            pids.extend(
                text.lines()
                    .filter_map(|line| line.trim().parse::<i32>().ok()),
            );
        }
        if depth >= MAX_CGROUP_DEPTH {
            continue;
        }
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        for entry in entries.flatten() {
            if entry.file_type().is_ok_and(|kind| kind.is_dir()) {
                pending.push((entry.path(), depth + 1));
            }
        }
    }
    pids
}

/// The pids of process group `pgid` (the fallback without cgroups).
pub fn pids_in_group(pgid: i32) -> Vec<i32> {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .filter_map(|entry| entry.ok()?.file_name().to_str()?.parse::<i32>().ok())
        .filter(|&pid| {
            super::super::launch::proc_stat::read(pid).is_some_and(|stat| stat.pgid == pgid)
        })
        .collect()
}

/// Allocated bytes of the files `pids` hold open or mapped that have no
/// name left and live on file system `device`.
pub fn unlinked_bytes(pids: &[i32], device: u64) -> u64 {
    let mut seen = HashSet::new();
    let mut total = 0;
    for pid in pids {
        for listing in ["fd", "map_files"] {
            let Ok(entries) = std::fs::read_dir(format!("/proc/{pid}/{listing}")) else {
                continue;
            };
            for entry in entries.flatten() {
                // `metadata` follows the magic link to the open file.
                let Ok(file) = std::fs::metadata(entry.path()) else {
                    continue;
                };
                let unlinked = file.nlink() == 0 && file.dev() == device && file.is_file();
                if unlinked && seen.insert(file.ino()) {
                    total += file.blocks() * 512;
                }
            }
        }
    }
    total
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    #[test]
    fn an_unlinked_open_file_counts_once_and_a_named_one_not_at_all() {
        let dir = std::env::temp_dir().join(format!("sandboxd-held-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let device = std::fs::metadata(&dir).unwrap().dev();
        let mut hidden = std::fs::File::create(dir.join("hidden")).unwrap();
        hidden.write_all(&vec![1u8; 1 << 20]).unwrap();
        hidden.sync_all().unwrap();
        let _again = std::fs::File::open(dir.join("hidden")).unwrap();
        let mut named = std::fs::File::create(dir.join("named")).unwrap();
        named.write_all(&vec![1u8; 1 << 20]).unwrap();
        let me = [std::process::id() as i32];
        let before = unlinked_bytes(&me, device);
        std::fs::remove_file(dir.join("hidden")).unwrap();
        let after = unlinked_bytes(&me, device);
        assert!(
            after - before >= 1 << 20 && after - before < 2 << 20,
            "{before} {after}"
        );
        drop(hidden);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
