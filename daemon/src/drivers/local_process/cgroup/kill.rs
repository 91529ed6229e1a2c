//! Killing everything in a cgroup, waiting until it is empty, removing it.
//!
//! `cgroup.kill` (Linux 5.14) SIGKILLs every process of a cgroup and of its
//! descendants in one write, including those forked while it runs; no
//! `setsid`, double fork, `chdir` or closed descriptor escapes it. Where it
//! is missing, the classic loop: freeze the cgroup (v2's `cgroup.freeze`,
//! else the v1 freezer), SIGKILL every pid in `cgroup.procs`, thaw (a
//! frozen v1 task dies only once thawed), and again until it is empty —
//! frozen, nothing can fork between the read and the kill.
//!
//! Emptiness is v2's `cgroup.events` `populated 0`, waited for with poll:
//! the kernel flags the file (POLLPRI) whenever it changes.

use std::fs::File;
use std::io::{self, Read, Seek, Write};
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

pub use crate::drivers::cgroup_files::event_value;

/// One cgroup in every hierarchy it has a directory in.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Dirs {
    /// Its cgroup v2 directory: the one that holds every process.
    pub v2: PathBuf,
    /// Its directories in v1 hierarchies (memory, pids, cpu, freezer).
    pub v1: Vec<PathBuf>,
}

impl Dirs {
    /// The child cgroup `name` of each directory.
    pub fn child(&self, name: &str) -> Dirs {
        Dirs {
            v2: self.v2.join(name),
            v1: self.v1.iter().map(|dir| dir.join(name)).collect(),
        }
    }
}

/// How the frozen-loop fallback stops a cgroup from forking.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Freezer {
    /// `cgroup.freeze` in this v2 directory (Linux 5.2).
    V2(PathBuf),
    /// `freezer.state` in this v1 freezer directory.
    V1(PathBuf),
    /// Nothing to freeze with: kill and look again until empty.
    None,
}

/// How many freeze–kill–thaw rounds before giving up on a cgroup.
const MAX_ROUNDS: usize = 200;
/// How long one round waits for a freeze to take hold.
const FREEZE_WAIT: Duration = Duration::from_millis(100);

/// SIGKILLs every process in `dirs` and below. Returns once the kill is
/// sent (`cgroup.kill`) or, in the fallback, once the loop emptied it.
pub fn kill(dirs: &Dirs) -> io::Result<()> {
    match write_file(&dirs.v2.join("cgroup.kill"), "1") {
        Ok(()) => return Ok(()),
        // No such cgroup: nothing left to kill.
        Err(error) if error.kind() == io::ErrorKind::NotFound && !dirs.v2.exists() => return Ok(()),
        // No cgroup.kill (before Linux 5.14): the loop.
        Err(error) if error.kind() == io::ErrorKind::NotFound => {}
        Err(error) => return Err(error),
    }
    kill_tree_frozen(dirs, &freezer_of)
}

/// The freezer the fallback uses for `dirs`.
fn freezer_of(dirs: &Dirs) -> Freezer {
    if dirs.v2.join("cgroup.freeze").exists() {
        return Freezer::V2(dirs.v2.clone());
    }
    dirs.v1
        .iter()
        .find(|dir| dir.join("freezer.state").exists())
        .map_or(Freezer::None, |dir| Freezer::V1(dir.clone()))
}

/// The fallback for `dirs` and every cgroup below it: `cgroup.procs` lists
/// only a cgroup's own processes, so each level is emptied in turn.
pub(super) fn kill_tree_frozen(dirs: &Dirs, freezer: &dyn Fn(&Dirs) -> Freezer) -> io::Result<()> {
    for name in child_names(&dirs.v2) {
        kill_tree_frozen(&dirs.child(&name), freezer)?;
    }
    kill_frozen(&dirs.v2, &freezer(dirs))
}

/// Freeze, SIGKILL every listed pid, thaw, until `cgroup.procs` is empty.
pub(super) fn kill_frozen(v2: &Path, freezer: &Freezer) -> io::Result<()> {
    for _ in 0..MAX_ROUNDS {
        freeze(freezer, true)?;
        let pids = read_pids(&v2.join("cgroup.procs"))?;
        for &pid in &pids {
            // SAFETY: kill has no memory preconditions; a pid gone is ESRCH.
            unsafe { libc::kill(pid, libc::SIGKILL) };
        }
        freeze(freezer, false)?;
        if pids.is_empty() {
            return Ok(());
        }
        // Killed processes leave the list as they die.
        wait_empty(v2, Duration::from_millis(10))?;
    }
    Err(io::Error::other(format!(
        "{} still has processes after {MAX_ROUNDS} kill rounds",
        v2.display()
    )))
}

fn freeze(freezer: &Freezer, frozen: bool) -> io::Result<()> {
    match freezer {
        Freezer::V2(dir) => {
            write_file(&dir.join("cgroup.freeze"), if frozen { "1" } else { "0" })?;
            if frozen {
                wait_for_event(dir, "frozen", 1, FREEZE_WAIT)?;
            }
            Ok(())
        }
        Freezer::V1(dir) => {
            let state = dir.join("freezer.state");
            write_file(&state, if frozen { "FROZEN" } else { "THAWED" })?;
            // FREEZING until every task has stopped; THAWED is immediate.
            let deadline = Instant::now() + FREEZE_WAIT;
            while frozen && std::fs::read_to_string(&state)?.trim() != "FROZEN" {
                if Instant::now() >= deadline {
                    break;
                }
                std::thread::sleep(Duration::from_millis(1));
            }
            Ok(())
        }
        Freezer::None => Ok(()),
    }
}

/// True while any process is in `v2` or below (`cgroup.events` `populated`).
pub fn populated(v2: &Path) -> io::Result<bool> {
    let text = std::fs::read_to_string(v2.join("cgroup.events"))?;
    Ok(event_value(&text, "populated") != Some(0))
}

/// Waits until `v2` and its descendants hold no process. True when empty,
/// false when `timeout` passed first; a cgroup already removed is empty.
pub fn wait_empty(v2: &Path, timeout: Duration) -> io::Result<bool> {
    match wait_for_event(v2, "populated", 0, timeout) {
        Err(error) if error.kind() == io::ErrorKind::NotFound => Ok(true),
        result => result,
    }
}

/// The first wait between two reads of `cgroup.events` when no change is
/// flagged, doubled after each up to [`LONGEST_RECHECK`].
const FIRST_RECHECK: Duration = Duration::from_micros(50);

/// The kernel flags a change of `cgroup.events` at most once per 10 ms
/// (`CGROUP_FILE_NOTIFY_MIN_INTV`, a jiffy or more): a freeze right after a
/// thaw, or an exit right after a start, is flagged up to a timer tick
/// late. So the file is read again at least this often, whatever poll says.
const LONGEST_RECHECK: Duration = Duration::from_millis(10);

/// Waits until `key` in `dir/cgroup.events` has `value`, reading it again
/// each time the kernel flags a change, and at growing intervals (50 µs up
/// to 10 ms) besides, since the kernel's flag may come a tick late.
pub(super) fn wait_for_event(
    dir: &Path,
    key: &str,
    value: u64,
    timeout: Duration,
) -> io::Result<bool> {
    let mut events = File::open(dir.join("cgroup.events"))?;
    let deadline = Instant::now() + timeout;
    let mut text = String::new();
    let mut recheck = FIRST_RECHECK;
    loop {
        text.clear();
        events.rewind()?;
        events.read_to_string(&mut text)?;
        if event_value(&text, key) == Some(value) {
            return Ok(true);
        }
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Ok(false);
        }
        let wait = left.min(recheck);
        recheck = (recheck * 2).min(LONGEST_RECHECK);
        let mut changed = libc::pollfd {
            fd: events.as_raw_fd(),
            events: libc::POLLPRI,
            revents: 0,
        };
        let wait = libc::timespec {
            tv_sec: wait.as_secs() as libc::time_t,
            tv_nsec: wait.subsec_nanos() as libc::c_long,
        };
        // SAFETY: one valid pollfd for the open file, a valid timespec, no
        // signal mask.
        unsafe { libc::ppoll(&mut changed, 1, &wait, std::ptr::null()) };
    }
}

/// Removes the cgroup in every hierarchy; one already gone is fine. A
/// cgroup whose last process is still on its way out is busy for a moment:
/// that is retried for up to [`BUSY_WAIT`].
pub fn remove(dirs: &Dirs) -> io::Result<()> {
    remove_waiting(dirs, BUSY_WAIT)
}

/// Removes `dirs` without waiting: `Ok(false)` when one of them is busy
/// (still populated, or not yet released by the kernel) and was left.
pub fn try_remove(dirs: &Dirs) -> io::Result<bool> {
    match remove_waiting(dirs, Duration::ZERO) {
        Ok(()) => Ok(true),
        Err(error) if error.kind() == io::ErrorKind::ResourceBusy => Ok(false),
        Err(error) => Err(error),
    }
}

/// How long a removal retries a busy cgroup.
const BUSY_WAIT: Duration = Duration::from_secs(1);

/// [`remove`], retrying a busy cgroup for up to `busy_wait`. Every
/// hierarchy is tried; the first error is returned, naming its directory.
fn remove_waiting(dirs: &Dirs, busy_wait: Duration) -> io::Result<()> {
    let mut first_error = None;
    for dir in std::iter::once(&dirs.v2).chain(&dirs.v1) {
        match remove_dir_when_idle(dir, busy_wait) {
            Ok(()) => {}
            Err(error) if error.kind() == io::ErrorKind::NotFound => {}
            Err(error) => {
                first_error.get_or_insert_with(|| {
                    io::Error::new(error.kind(), format!("{}: {error}", dir.display()))
                });
            }
        }
    }
    first_error.map_or(Ok(()), Err)
}

fn remove_dir_when_idle(dir: &Path, busy_wait: Duration) -> io::Result<()> {
    let deadline = Instant::now() + busy_wait;
    loop {
        match std::fs::remove_dir(dir) {
            Err(error)
                if error.raw_os_error() == Some(libc::EBUSY) && Instant::now() < deadline =>
            {
                std::thread::sleep(Duration::from_millis(5));
            }
            result => return result,
        }
    }
}

/// Removes `dirs`, then their parents when empty: the root the daemon
/// made goes too, and a root that still holds anything (the daemon's own
/// cgroup, with the `daemon` leaf) stays, since only an empty cgroup can
/// be removed.
pub fn remove_with_parents(dirs: &Dirs) {
    let _ = remove(dirs);
    for dir in std::iter::once(&dirs.v2).chain(&dirs.v1) {
        if let Some(parent) = dir.parent() {
            let _ = std::fs::remove_dir(parent);
        }
    }
}

/// Kills every sandbox cgroup under `parent` (one write with
/// `cgroup.kill`, which reaches all descendants), waits up to `timeout`,
/// and removes them (a removal that fails is logged). Returns the names
/// it found; an error only when the kill itself failed.
pub fn kill_children_and_remove(parent: &Dirs, timeout: Duration) -> io::Result<Vec<String>> {
    let names = child_names(&parent.v2);
    let in_v2: std::collections::HashSet<&String> = names.iter().collect();
    let mut v1_only: Vec<String> = parent.v1.iter().flat_map(|dir| child_names(dir)).collect();
    v1_only.retain(|name| !in_v2.contains(name));
    v1_only.sort_unstable();
    v1_only.dedup();
    if !names.is_empty() {
        kill(parent)?;
        wait_empty(&parent.v2, timeout)?;
    }
    for name in names.iter().chain(&v1_only) {
        if let Err(error) = remove(&parent.child(name)) {
            tracing::warn!(%error, "cannot remove a sandbox cgroup");
        }
    }
    Ok(names)
}

/// The names of the child cgroups (subdirectories) of `dir`.
pub fn child_names(dir: &Path) -> Vec<String> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    entries
        .flatten()
        .filter(|entry| entry.file_type().is_ok_and(|kind| kind.is_dir()))
        .filter_map(|entry| entry.file_name().into_string().ok())
        .collect()
}

fn read_pids(procs: &Path) -> io::Result<Vec<i32>> {
    Ok(std::fs::read_to_string(procs)?
        .lines()
        .filter_map(|line| line.trim().parse().ok())
        .collect())
}

/// One write of `value`, as cgroup files want it.
pub fn write_file(path: &Path, value: &str) -> io::Result<()> {
    File::options()
        .write(true)
        .open(path)?
        .write_all(value.as_bytes())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn event_values_are_read_by_key() {
        let text = "populated 1\nfrozen 0\n";
        assert_eq!(event_value(text, "populated"), Some(1));
        assert_eq!(event_value(text, "frozen"), Some(0));
        assert_eq!(event_value(text, "missing"), None);
        let oom = "oom_kill_disable 0\nunder_oom 0\noom_kill 3\n";
        assert_eq!(event_value(oom, "oom_kill"), Some(3));
    }
}

#[cfg(test)]
mod loop_tests {
    use super::super::layout::{Controller, Layout};
    use super::*;
    use std::os::unix::process::CommandExt;

    /// A cgroup of this test's own in v2, and in the v1 freezer when there
    /// is one, holding a shell whose children setsid and double-fork away.
    fn populated_cgroup(name: &str) -> Option<(Dirs, Option<PathBuf>)> {
        if !nix::unistd::geteuid().is_root() {
            eprintln!("skipped: needs root to make cgroups");
            return None;
        }
        let layout = Layout::detect();
        let v2 = layout
            .v2
            .as_ref()?
            .mount
            .join(format!("sandboxd-kill-{}-{name}", std::process::id()));
        std::fs::create_dir(&v2).unwrap();
        let freezer = layout.v1_of(Controller::Freezer).map(|hierarchy| {
            hierarchy
                .own_dir()
                .join(format!("sandboxd-kill-{}-{name}", std::process::id()))
        });
        let mut v1 = Vec::new();
        if let Some(dir) = &freezer {
            std::fs::create_dir(dir).unwrap();
            v1.push(dir.clone());
        }
        let dirs = Dirs { v2, v1 };
        let procs: Vec<PathBuf> = std::iter::once(&dirs.v2)
            .chain(&dirs.v1)
            .map(|dir| dir.join("cgroup.procs"))
            .collect();
        let script = "(setsid sleep 300 &); (cd / && setsid sh -c 'trap \"\" TERM; sleep 300 &' &); exec sleep 300";
        let mut command = std::process::Command::new("/bin/sh");
        command.args(["-c", script]);
        // SAFETY: only writes to files (async-signal-safe) before exec.
        unsafe {
            command.pre_exec(move || {
                for procs in &procs {
                    std::fs::write(procs, "0")?;
                }
                Ok(())
            });
        }
        let mut child = command.spawn().unwrap();
        std::thread::spawn(move || child.wait());
        // The shell (exec'd into a sleep), the setsid sleep and the
        // double-forked one: all three sleeping, the shells between gone.
        let deadline = Instant::now() + Duration::from_secs(30);
        while sleepers(&dirs.v2) < 3 || read_pids(&dirs.v2.join("cgroup.procs")).unwrap().len() > 3
        {
            assert!(
                Instant::now() < deadline,
                "the test's three sleeps never settled in {}",
                dirs.v2.display()
            );
            std::thread::sleep(Duration::from_millis(10));
        }
        Some((dirs, freezer))
    }

    /// How many processes in `v2` run `sleep`.
    fn sleepers(v2: &Path) -> usize {
        read_pids(&v2.join("cgroup.procs"))
            .unwrap()
            .iter()
            .filter(|pid| {
                std::fs::read_to_string(format!("/proc/{pid}/comm"))
                    .is_ok_and(|comm| comm.trim() == "sleep")
            })
            .count()
    }

    /// The cgroups a test made, killed and removed when it ends, passed or
    /// failed (nothing is left in the hierarchy either way): the deepest,
    /// pushed last, first.
    struct Made(Vec<Dirs>);

    impl Drop for Made {
        fn drop(&mut self) {
            for dirs in self.0.iter().rev() {
                let _ = kill(dirs);
                let _ = wait_empty(&dirs.v2, Duration::from_secs(30));
                if let Err(error) = remove(dirs) {
                    eprintln!(
                        "cannot remove the test's cgroup {}: {error}",
                        dirs.v2.display()
                    );
                }
            }
        }
    }

    fn check_emptied(dirs: &Dirs) {
        assert!(wait_empty(&dirs.v2, Duration::from_secs(10)).unwrap());
        for dir in &dirs.v1 {
            assert!(read_pids(&dir.join("cgroup.procs")).unwrap().is_empty());
        }
        remove(dirs).unwrap();
        assert!(!dirs.v2.exists());
    }

    #[test]
    fn the_v1_freezer_loop_kills_escapees_where_cgroup_kill_is_missing() {
        let Some((dirs, freezer)) = populated_cgroup("v1") else {
            return;
        };
        let _made = Made(vec![dirs.clone()]);
        let Some(freezer) = freezer else {
            remove(&dirs).unwrap();
            eprintln!("skipped: no v1 freezer here");
            return;
        };
        assert!(populated(&dirs.v2).unwrap());
        kill_tree_frozen(&dirs, &|_| Freezer::V1(freezer.clone())).unwrap();
        check_emptied(&dirs);
    }

    #[test]
    fn the_v2_freezer_loop_kills_escapees_too() {
        let Some((dirs, _)) = populated_cgroup("v2") else {
            return;
        };
        let _made = Made(vec![dirs.clone()]);
        assert!(populated(&dirs.v2).unwrap());
        kill_tree_frozen(&dirs, &|dirs| Freezer::V2(dirs.v2.clone())).unwrap();
        check_emptied(&dirs);
    }

    #[test]
    fn cgroup_kill_empties_a_whole_tree_in_one_write() {
        let Some((dirs, _)) = populated_cgroup("tree") else {
            return;
        };
        let mut made = Made(vec![dirs.clone()]);
        // The populated cgroup becomes one child of a parent.
        let parent = Dirs {
            v2: dirs.v2.with_extension("parent"),
            v1: dirs
                .v1
                .iter()
                .map(|dir| dir.with_extension("parent"))
                .collect(),
        };
        made.0.insert(0, parent.clone());
        std::fs::create_dir(&parent.v2).unwrap();
        for dir in &parent.v1 {
            std::fs::create_dir(dir).unwrap();
        }
        let child = parent.child("sbx-ses-000000000001");
        made.0.insert(1, child.clone());
        std::fs::create_dir(&child.v2).unwrap();
        for dir in &child.v1 {
            std::fs::create_dir(dir).unwrap();
        }
        for pid in read_pids(&dirs.v2.join("cgroup.procs")).unwrap() {
            for to in std::iter::once(&child.v2).chain(&child.v1) {
                write_file(&to.join("cgroup.procs"), &pid.to_string()).unwrap();
            }
        }
        // Removable once the kernel says it holds nothing (a removal tried
        // before that fails with EBUSY, as it did under load).
        assert!(wait_empty(&dirs.v2, Duration::from_secs(30)).unwrap());
        remove(&dirs).unwrap();
        let names = kill_children_and_remove(&parent, Duration::from_secs(10)).unwrap();
        assert_eq!(names, ["sbx-ses-000000000001"]);
        assert!(!child.v2.exists());
        remove(&parent).unwrap();
    }
}
