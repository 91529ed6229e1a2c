//! The bench's own cgroups, made as the daemon makes a sandbox's: a root
//! of the bench's in cgroup v2 and in each v1 hierarchy holding a limited
//! controller (a hybrid host), one cgroup per runner below it with the
//! `[limits]` defaults written, joined by the runner before its exec. The
//! raw baselines and the peers' "bubblewrap in cgroups" row use them, so
//! what they measure is the kernel's share of a sandbox's cgroups with no
//! daemon in between.

use std::fs::File;
use std::io::{self, Write};
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};

/// A bench-owned cgroup root, `<name>-<pid>`, in cgroup v2 and in each v1
/// hierarchy holding a limited controller, each with a `sandboxes/` below
/// it as the daemon has. Removed, with whatever is left in it, on drop.
pub struct BenchTree {
    layout: CgroupLayout,
    /// The v2 root first, then each v1 root with its controller.
    roots: Vec<(Option<&'static str>, PathBuf)>,
}

impl BenchTree {
    /// `None` without a writable cgroup v2.
    pub fn create(name: &str) -> anyhow::Result<Option<BenchTree>> {
        let Some(layout) = CgroupLayout::detect() else {
            return Ok(None);
        };
        let name = format!("{name}-{}", std::process::id());
        let roots: Vec<(Option<&'static str>, PathBuf)> =
            std::iter::once((None, layout.v2.join(&name)))
                .chain(
                    layout
                        .v1
                        .iter()
                        .map(|(controller, own)| (Some(*controller), own.join(&name))),
                )
                .collect();
        if std::fs::create_dir_all(roots[0].1.join("sandboxes")).is_err() {
            return Ok(None);
        }
        let tree = BenchTree { layout, roots };
        // On a pure-v2 host the limited controllers must reach the
        // sandboxes' cgroups, as the daemon enables them.
        let enable: Vec<String> = tree
            .layout
            .v2_controllers
            .iter()
            .map(|controller| format!("+{controller}"))
            .collect();
        if !enable.is_empty() {
            let (root, line) = (&tree.roots[0].1, enable.join(" "));
            write_if_present(root.join("cgroup.subtree_control"), &line)?;
            write_if_present(root.join("sandboxes").join("cgroup.subtree_control"), &line)?;
        }
        for (_, root) in &tree.roots[1..] {
            std::fs::create_dir_all(root.join("sandboxes"))?;
        }
        Ok(Some(tree))
    }

    /// Makes `base`'s cgroup in every root, with the `[limits]` defaults
    /// written. Returns its directories, v2 first.
    pub fn make_limited(&self, base: &str) -> io::Result<Vec<PathBuf>> {
        let mut dirs = Vec::with_capacity(self.roots.len());
        for (controller, root) in &self.roots {
            let dir = root.join("sandboxes").join(base);
            std::fs::create_dir(&dir)?;
            let limited = match controller {
                None => self.layout.v2_controllers.clone(),
                Some(controller) => vec![*controller],
            };
            for limited in limited {
                for (file, value) in limit_files(limited, controller.is_none()) {
                    write_if_present(dir.join(file), value)?;
                }
            }
            dirs.push(dir);
        }
        Ok(dirs)
    }
}

impl Drop for BenchTree {
    fn drop(&mut self) {
        for (_, root) in &self.roots {
            let sandboxes = root.join("sandboxes");
            for entry in std::fs::read_dir(&sandboxes)
                .into_iter()
                .flatten()
                .flatten()
            {
                let _ = std::fs::remove_dir(entry.path());
            }
            let _ = std::fs::remove_dir(sandboxes);
            let _ = std::fs::remove_dir(root);
        }
    }
}

/// Removes each of `dirs`.
pub fn remove_all(dirs: &[PathBuf]) -> io::Result<()> {
    dirs.iter().try_for_each(std::fs::remove_dir)
}

/// Removes each of `dirs` once its last process has left it, waiting
/// while it is busy (`EBUSY`) until `deadline`: a process that exited may
/// still be leaving, as a PID namespace's init does after a tool that
/// reported its program's exit (bubblewrap) has itself exited.
pub async fn remove_once_empty(dirs: &[PathBuf], deadline: tokio::time::Instant) -> io::Result<()> {
    for dir in dirs {
        loop {
            match std::fs::remove_dir(dir) {
                Ok(()) => break,
                Err(error)
                    if error.raw_os_error() == Some(libc::EBUSY)
                        && tokio::time::Instant::now() < deadline =>
                {
                    tokio::time::sleep(std::time::Duration::from_micros(200)).await
                }
                Err(error) => return Err(error),
            }
        }
    }
    Ok(())
}

/// The `[limits]` defaults' files and values for `controller`, in v2 or v1.
fn limit_files(controller: &str, v2: bool) -> Vec<(&'static str, &'static str)> {
    match (controller, v2) {
        ("memory", true) => vec![("memory.max", "2147483648"), ("memory.swap.max", "0")],
        ("memory", false) => vec![
            ("memory.limit_in_bytes", "2147483648"),
            ("memory.memsw.limit_in_bytes", "2147483648"),
        ],
        ("pids", _) => vec![("pids.max", "512")],
        ("cpu", true) => vec![("cpu.max", "200000 100000")],
        ("cpu", false) => vec![("cpu.cfs_quota_us", "200000")],
        _ => Vec::new(),
    }
}

/// The files a runner joins `dirs` through (as [`BenchTree::make_limited`]
/// returns them, v2 first), opened for writing: v2's `cgroup.procs`, and
/// each v1 directory's `tasks`, as the daemon joins v1. A write of `0` to
/// `tasks` moves the one thread without the kernel's global threadgroup
/// lock, whose first writer after a pause waits for an RCU grace period;
/// the daemon clones into its v2 cgroup (`CLONE_INTO_CGROUP`), which std
/// cannot, so here v2's write still takes that lock.
pub fn open_joins(dirs: &[PathBuf]) -> io::Result<Vec<File>> {
    let Some((v2, v1)) = dirs.split_first() else {
        return Ok(Vec::new());
    };
    let mut joins = vec![open_for_writing(&v2.join("cgroup.procs"))?];
    joins.extend(open_v1_joins(v1)?);
    Ok(joins)
}

/// Each v1 directory's `tasks`, opened for writing (see [`open_joins`]).
pub fn open_v1_joins(v1_dirs: &[PathBuf]) -> io::Result<Vec<File>> {
    v1_dirs
        .iter()
        .map(|dir| open_for_writing(&dir.join("tasks")))
        .collect()
}

fn open_for_writing(path: &Path) -> io::Result<File> {
    std::fs::OpenOptions::new().write(true).open(path)
}

/// Has `command`'s child join the cgroups whose files are open in `joins`
/// ([`open_joins`]) before it execs, as a sandbox's runner joins its own.
/// `joins` must stay open until the spawn returns.
pub fn join_before_exec(command: &mut std::process::Command, joins: &[File]) {
    use std::os::unix::process::CommandExt;
    let fds: Vec<i32> = joins.iter().map(AsRawFd::as_raw_fd).collect();
    // SAFETY: the hook only calls write(2), async-signal-safe, on
    // descriptors the caller keeps open until spawn returns.
    unsafe {
        command.pre_exec(move || {
            for fd in &fds {
                if libc::write(*fd, b"0".as_ptr().cast(), 1) != 1 {
                    return Err(io::Error::last_os_error());
                }
            }
            Ok(())
        });
    }
}

/// Writes `value` to `path`; a file this kernel lacks is skipped.
fn write_if_present(path: PathBuf, value: &str) -> io::Result<()> {
    match open_for_writing(&path) {
        Ok(mut file) => file.write_all(value.as_bytes()),
        Err(error) if error.kind() == io::ErrorKind::NotFound => Ok(()),
        Err(error) => Err(error),
    }
}

/// Where this host's cgroups are, as the daemon reads it: the v2 mount,
/// the limited controllers v2 holds, and (for the rest) the daemon's own
/// cgroup in each v1 hierarchy that holds one.
struct CgroupLayout {
    v2: PathBuf,
    v2_controllers: Vec<&'static str>,
    v1: Vec<(&'static str, PathBuf)>,
}

impl CgroupLayout {
    fn detect() -> Option<CgroupLayout> {
        let mountinfo = std::fs::read_to_string("/proc/self/mountinfo").ok()?;
        let own = std::fs::read_to_string("/proc/self/cgroup").unwrap_or_default();
        let mounts: Vec<(String, String, String)> = mountinfo
            .lines()
            .filter_map(|line| {
                let (before, after) = line.split_once(" - ")?;
                let mut after = after.split(' ');
                let (fs_type, _, options) = (after.next()?, after.next()?, after.next()?);
                let point = before.split(' ').nth(4)?;
                Some((fs_type.to_string(), point.to_string(), options.to_string()))
            })
            .collect();
        let v2 = mounts
            .iter()
            .find(|(fs_type, _, _)| fs_type == "cgroup2")
            .map(|(_, point, _)| PathBuf::from(point))?;
        let listed = std::fs::read_to_string(v2.join("cgroup.controllers")).unwrap_or_default();
        let mut v2_controllers = Vec::new();
        let mut v1 = Vec::new();
        for controller in ["memory", "pids", "cpu"] {
            if listed.split_whitespace().any(|name| name == controller) {
                v2_controllers.push(controller);
                continue;
            }
            let Some((_, point, _)) = mounts.iter().find(|(fs_type, _, options)| {
                fs_type == "cgroup" && options.split(',').any(|option| option == controller)
            }) else {
                continue;
            };
            let own_path = own
                .lines()
                .find_map(|line| {
                    let mut parts = line.splitn(3, ':');
                    let (_, names, path) = (parts.next()?, parts.next()?, parts.next()?);
                    names
                        .split(',')
                        .any(|name| name == controller)
                        .then(|| path.trim_start_matches('/').to_string())
                })
                .unwrap_or_default();
            v1.push((controller, PathBuf::from(point).join(own_path)));
        }
        Some(CgroupLayout {
            v2,
            v2_controllers,
            v1,
        })
    }
}
