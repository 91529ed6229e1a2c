//! Pausing a sandbox: freezing its cgroup.
//!
//! A frozen cgroup's processes stay where they are — same pids, memory
//! kept — but none of them runs until it is thawed, and none can fork.
//! v2's `cgroup.freeze` exists in every non-root v2 cgroup (Linux 5.2),
//! also on a hybrid host whose v2 hierarchy holds no controller; the
//! freeze is done once `cgroup.events` says `frozen 1`. Where it is
//! missing, the v1 freezer's `freezer.state`, done once it reads `FROZEN`.
//!
//! A freeze hands back the file it wrote, open ([`Frozen`]): the paused
//! sandbox keeps it, so its resume — an `ensure` on the fast path — is the
//! one write that thaws, with no lookup, open or close on the caller's
//! time. A paused sandbox holds one descriptor until it is resumed or
//! stopped.

use std::fs::File;
use std::io;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::kill::{self, Dirs};

/// How long a freeze may take to hold before the pause is refused (and
/// undone). A task in an uninterruptible sleep (disk I/O, a page fault on
/// a slow file system) freezes only once it wakes.
pub const FREEZE_TIMEOUT: Duration = Duration::from_secs(5);

/// The file that freezes one sandbox's cgroup.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Freezer {
    /// `cgroup.freeze` in this v2 directory.
    V2(PathBuf),
    /// `freezer.state` in this v1 freezer directory.
    V1(PathBuf),
}

impl Freezer {
    /// The freezer of `dirs`, or `None` where neither exists.
    pub fn of(dirs: &Dirs) -> Option<Freezer> {
        if dirs.v2.join("cgroup.freeze").exists() {
            return Some(Freezer::V2(dirs.v2.clone()));
        }
        dirs.v1
            .iter()
            .find(|dir| dir.join("freezer.state").exists())
            .map(|dir| Freezer::V1(dir.clone()))
    }

    /// Freezes the cgroup and returns once every process in it is frozen,
    /// with the file that thaws it; undone (thawed again) when that takes
    /// longer than `timeout`.
    pub fn freeze(&self, timeout: Duration) -> io::Result<Frozen> {
        let (file, thawed) = match self {
            Freezer::V2(dir) => (dir.join("cgroup.freeze"), "0"),
            Freezer::V1(dir) => (dir.join("freezer.state"), "THAWED"),
        };
        let control = Frozen {
            file: Arc::new(File::options().write(true).open(file)?),
            thawed,
        };
        let frozen = match self {
            Freezer::V2(dir) => {
                control.file.write_all_at(b"1", 0)?;
                kill::wait_for_event(dir, "frozen", 1, timeout)?
            }
            Freezer::V1(dir) => {
                let state = dir.join("freezer.state");
                control.file.write_all_at(b"FROZEN", 0)?;
                let deadline = Instant::now() + timeout;
                loop {
                    if std::fs::read_to_string(&state)?.trim() == "FROZEN" {
                        break true;
                    }
                    if Instant::now() >= deadline {
                        break false;
                    }
                    // FREEZING: the kernel offers no event for the end.
                    std::thread::sleep(Duration::from_millis(2));
                }
            }
        };
        if frozen {
            return Ok(control);
        }
        let _ = control.thaw();
        Err(io::Error::new(
            io::ErrorKind::TimedOut,
            format!(
                "{} did not freeze within {timeout:?} (a process in an uninterruptible sleep?)",
                self.path().display()
            ),
        ))
    }

    fn path(&self) -> &Path {
        match self {
            Freezer::V2(dir) | Freezer::V1(dir) => dir,
        }
    }
}

/// A frozen cgroup's freezer file, kept open: its thaw is one write.
/// Cloned out of the sandbox's record, so that write is made outside the
/// records' lock.
#[derive(Debug, Clone)]
pub struct Frozen {
    file: Arc<File>,
    thawed: &'static str,
}

impl Frozen {
    /// Thaws the cgroup: one write, in force at once.
    pub fn thaw(&self) -> io::Result<()> {
        self.file.write_all_at(self.thawed.as_bytes(), 0)
    }
}

#[cfg(test)]
mod tests {
    use super::super::usage::CpuUsage;
    use super::*;

    /// A v2 cgroup of this test's own holding a busy shell; skipped when
    /// not root or without cgroup v2.
    fn busy_cgroup(name: &str) -> Option<(Dirs, std::process::Child)> {
        if !nix::unistd::geteuid().is_root() {
            eprintln!("skipped: needs root to make cgroups");
            return None;
        }
        let layout = super::super::layout::Layout::detect();
        let v2 = layout.v2.as_ref()?.mount.join(name);
        std::fs::create_dir(&v2).ok()?;
        let child = std::process::Command::new("sh")
            .args(["-c", "while :; do :; done"])
            .spawn()
            .ok()?;
        kill::write_file(&v2.join("cgroup.procs"), &child.id().to_string()).ok()?;
        Some((Dirs { v2, v1: Vec::new() }, child))
    }

    #[test]
    fn a_frozen_cgroup_uses_no_cpu_and_runs_again_once_thawed() {
        let Some((dirs, mut child)) =
            busy_cgroup(&format!("sandboxd-freeze-test-{}", std::process::id()))
        else {
            return;
        };
        let freezer = Freezer::of(&dirs).expect("cgroup.freeze in a v2 cgroup");
        let cpu = crate::drivers::local_process::cgroup::usage::cpu_usage_of(&dirs)
            .expect("cpu.stat in a v2 cgroup");
        let busy = |cpu: &CpuUsage| {
            let before = cpu.read_usec().unwrap();
            std::thread::sleep(Duration::from_millis(200));
            cpu.read_usec().unwrap() - before
        };
        assert!(busy(&cpu) > 10_000, "the loop runs");
        let frozen = freezer.freeze(FREEZE_TIMEOUT).unwrap();
        assert_eq!(busy(&cpu), 0, "frozen: no CPU");
        frozen.thaw().unwrap();
        assert!(busy(&cpu) > 10_000, "thawed: runs again");
        // Closing the kept file thaws nothing; a later freeze's file thaws.
        let frozen = freezer.freeze(FREEZE_TIMEOUT).unwrap();
        assert_eq!(busy(&cpu), 0, "frozen again: no CPU");
        drop(frozen);
        assert_eq!(busy(&cpu), 0, "closing the file thaws nothing");
        freezer.freeze(FREEZE_TIMEOUT).unwrap().thaw().unwrap();
        assert!(busy(&cpu) > 10_000, "thawed again: runs again");
        let _ = child.kill();
        let _ = child.wait();
        let _ = kill::remove(&dirs);
    }
}
