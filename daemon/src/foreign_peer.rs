//! Peers no sandboxd serves, whichever daemon's sandbox they come from.
//!
//! The driver's own check ([`crate::peer_origin`]) knows this daemon's
//! sandboxes by name. A runner of another sandboxd on the host is none of
//! them, yet whatever it reaches is the work of a sandbox: a daemon that
//! allow-listed its uid would serve it. So every connection is also
//! refused, whatever its uid, when its process:
//!
//! - runs in another pid namespace than the daemon's: a container's, or
//!   a sandbox's own (its `/proc/<pid>/ns/pid` is another namespace; a
//!   peer the daemon's namespace cannot see at all gets pid 0 from
//!   `SO_PEERCRED`); or
//! - lies in a cgroup below a `sandboxes` directory, in any hierarchy
//!   (`/proc/<pid>/cgroup`): every sandboxd keeps its sandboxes' cgroups
//!   in `<root>/sandboxes/<name>` (see the process tier's cgroup tree),
//!   whatever its root and whatever it names them (a base name, a
//!   prepared `prepared-<n>`), so the rule names no daemon's sandboxes.
//!
//! Reading `/proc` races with the peer exiting; a peer whose facts cannot
//! be read is refused (it is gone, or hidden from the daemon).

use std::os::unix::fs::MetadataExt as _;

use crate::peer_origin::{cgroup_paths, SANDBOXES_CGROUP_DIR};

/// Why a connecting process is refused, or `None` when it is neither in
/// another pid namespace nor in any sandboxd's sandboxes tree. `pid` is
/// `SO_PEERCRED`'s.
pub fn refusal(pid: Option<i32>) -> Option<String> {
    let pid = match pid {
        Some(pid) if pid > 0 => pid,
        _ => {
            return Some(
                "its pid is not visible from the daemon's pid namespace (SO_PEERCRED gave none): it runs in another pid namespace".to_string(),
            )
        }
    };
    if let Some(reason) = other_pid_namespace(pid) {
        return Some(reason);
    }
    cgroup_paths(pid)
        .into_iter()
        .find(|path| in_a_sandboxes_tree(path))
        .map(|path| format!("its cgroup {path} lies in a sandboxd's sandboxes tree"))
}

/// Why `pid` is taken for a process of another pid namespace, if it is.
fn other_pid_namespace(pid: i32) -> Option<String> {
    let own = match namespace_of("self") {
        Ok(own) => own,
        // Nothing to compare with: the cgroup rule still holds.
        Err(_) => return None,
    };
    match namespace_of(&pid.to_string()) {
        Ok(theirs) if theirs == own => None,
        Ok(_) => Some("it runs in another pid namespace than the daemon's".to_string()),
        // A daemon that is not root may not read another uid's namespace
        // links; `NSpid` in its status, readable by all, lists one pid per
        // namespace from /proc's down to its own.
        Err(error) if error.kind() == std::io::ErrorKind::PermissionDenied => {
            match nested_pid_namespaces(pid) {
                Some(1) => None,
                Some(_) => Some("it runs in a pid namespace nested in the daemon's".to_string()),
                None => Some("its process cannot be inspected (gone?)".to_string()),
            }
        }
        Err(_) => Some("its process cannot be inspected (gone?)".to_string()),
    }
}

/// The pid namespace of `/proc/<process>`, as its link's device and inode.
fn namespace_of(process: &str) -> std::io::Result<(u64, u64)> {
    let metadata = std::fs::metadata(format!("/proc/{process}/ns/pid"))?;
    Ok((metadata.dev(), metadata.ino()))
}

/// How many pid namespaces `pid` has a pid in (`NSpid:` of its status).
fn nested_pid_namespaces(pid: i32) -> Option<usize> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    parse_nspid(&status)
}

fn parse_nspid(status: &str) -> Option<usize> {
    let line = status
        .lines()
        .find_map(|line| line.strip_prefix("NSpid:"))?;
    Some(line.split_ascii_whitespace().count()).filter(|count| *count > 0)
}

/// True when `path` (one line's path of `/proc/<pid>/cgroup`) lies below
/// a `sandboxes` directory: a sandbox's cgroup of some sandboxd.
fn in_a_sandboxes_tree(path: &str) -> bool {
    let mut components = path.split('/').filter(|part| !part.is_empty());
    components.any(|part| part == SANDBOXES_CGROUP_DIR) && components.next().is_some()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn any_daemons_sandboxes_tree_is_recognized_whatever_its_names() {
        for path in [
            "/sandboxd/sandboxes/sbx-ses-0123456789ab",
            "/sandboxd-1a2b3c/sandboxes/prepared-3",
            "/system.slice/other.service/sandboxes/anything/inner",
            "/custom/root/sandboxes/x",
        ] {
            assert!(in_a_sandboxes_tree(path), "{path}");
        }
        for path in [
            "/",
            "/user.slice/user-0.slice/session-1.scope",
            "/sandboxd/daemon",
            "/sandboxd/sandboxes",
            "/system.slice/sandboxes-not.service",
        ] {
            assert!(!in_a_sandboxes_tree(path), "{path}");
        }
    }

    #[test]
    fn this_process_is_not_foreign_and_pid_zero_is() {
        assert_eq!(refusal(Some(std::process::id() as i32)), None);
        for pid in [None, Some(0)] {
            let reason = refusal(pid).unwrap();
            assert!(reason.contains("pid namespace"), "{reason}");
        }
    }

    #[test]
    fn nspid_counts_the_namespaces() {
        assert_eq!(parse_nspid("Name:\tsh\nNSpid:\t4242\n"), Some(1));
        assert_eq!(parse_nspid("NSpid:\t4242\t7\t1\n"), Some(3));
        assert_eq!(parse_nspid("Name:\tsh\n"), None);
    }

    /// A child in a pid namespace of its own (`unshare --pid --fork`),
    /// where the host has `unshare` and lets root make one.
    #[test]
    fn a_process_in_another_pid_namespace_is_refused() {
        let Ok(mut child) = std::process::Command::new("unshare")
            .args(["--pid", "--fork", "--kill-child", "sleep", "30"])
            .spawn()
        else {
            eprintln!("skipped: no unshare here");
            return;
        };
        // `unshare` forks the sleep into the new namespace: find it.
        let parent = child.id();
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        let inner = loop {
            let children =
                std::fs::read_to_string(format!("/proc/{parent}/task/{parent}/children"))
                    .unwrap_or_default();
            if let Some(pid) = children.split_whitespace().next() {
                break pid.parse::<i32>().ok();
            }
            if std::time::Instant::now() > deadline {
                break None;
            }
            std::thread::sleep(std::time::Duration::from_millis(10));
        };
        let verdict = inner.map(|pid| refusal(Some(pid)));
        let _ = child.kill();
        let _ = child.wait();
        let Some(verdict) = verdict else {
            eprintln!("skipped: unshare made no child (no permission?)");
            return;
        };
        let reason = verdict.expect("a process of another pid namespace is refused");
        assert!(reason.contains("another pid namespace"), "{reason}");
    }
}
