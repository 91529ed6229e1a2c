//! Finding runner processes by where they work.
//!
//! Every runner starts in its workspace under `<state dir>/sandboxes`, and
//! whatever it forks inherits that directory. So "a process whose current
//! directory is inside the sandboxes dir" identifies runner processes even
//! when no record of them exists — as when the daemon died between forking
//! a runner and writing it down (the intent-before-side-effect gap of
//! containerd#6860). Only the owner of the state directory (it holds the
//! lock) may act on this, so it never touches another daemon's runners.

use std::path::Path;

use nix::sys::signal::{kill, killpg, Signal};
use nix::unistd::{getpgrp, Pid};

use super::super::launch::proc_stat;

/// SIGKILLs every process working inside `sandboxes`, and its process
/// group. Returns how many such processes there were.
pub fn kill_processes_in(sandboxes: &Path) -> usize {
    let own_group = getpgrp().as_raw();
    let own_pid = std::process::id() as i32;
    let found = processes_in(sandboxes);
    for &(pid, pgid) in &found {
        if pgid > 1 && pgid != own_group {
            let _ = killpg(Pid::from_raw(pgid), Signal::SIGKILL);
        }
        if pid != own_pid {
            let _ = kill(Pid::from_raw(pid), Signal::SIGKILL);
        }
    }
    found.len()
}

/// (pid, pgid) of every live process whose cwd is inside `sandboxes`.
fn processes_in(sandboxes: &Path) -> Vec<(i32, i32)> {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .filter_map(|entry| entry.ok()?.file_name().to_str()?.parse::<i32>().ok())
        .filter(|pid| {
            std::fs::read_link(format!("/proc/{pid}/cwd"))
                .is_ok_and(|cwd| cwd.starts_with(sandboxes))
        })
        .filter_map(|pid| {
            let stat = proc_stat::read(pid)?;
            (stat.state != 'Z').then_some((pid, stat.pgid))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::process::CommandExt as _;

    #[test]
    fn finds_and_kills_a_process_by_its_working_directory() {
        let dir = std::env::temp_dir().join(format!("sandboxd-scan-{}", std::process::id()));
        let workspace = dir.join("sandboxes").join("sbx-ses-000000000000");
        std::fs::create_dir_all(&workspace).unwrap();
        let mut child = std::process::Command::new("sleep")
            .arg("30")
            .current_dir(&workspace)
            .process_group(0)
            .spawn()
            .unwrap();
        let pid = child.id() as i32;
        let sandboxes = dir.join("sandboxes");
        assert!(processes_in(&sandboxes)
            .iter()
            .any(|&(found, _)| found == pid));
        assert!(processes_in(&dir.join("elsewhere")).is_empty());
        assert!(kill_processes_in(&sandboxes) >= 1);
        let status = child.wait().unwrap();
        assert_eq!(
            std::os::unix::process::ExitStatusExt::signal(&status),
            Some(9)
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
