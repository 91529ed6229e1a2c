//! The disk limits where the file system cannot hold them, and the state
//! reserve: every running sandbox is measured (the allocated blocks and
//! the inodes of its workspace's tree, walked by descriptor, plus the
//! deleted files its processes hold open: see [`walk`] and
//! [`held_open`]), and a runner over `[limits] disk` or
//! `[limits] disk_inodes` is stopped — its whole cgroup (or group)
//! killed, as the kernel's OOM killer would — with the limit recorded as
//! the reason of its exit. While the state directory's file system is
//! below the [reserve](super::reserve), a runner whose sandbox grew since
//! the last look is stopped too, for `disk-full`.
//!
//! Every [`TICK`] the watcher reads the file system's free space (one
//! `statvfs`), every [`LIMITED_TICK`] while a sandbox runs under a limit
//! it holds. A pass — one thread walking the sandboxes one after
//! another, on the blocking pool, the ones that grew most last time first,
//! each stopped as soon as it is found over — starts:
//! - every [`INTERVAL`], or four times as long as the last pass took if
//!   that is longer (at most a fifth of one core however many sandboxes
//!   run: a thousand workspaces of a thousand files each is about a
//!   million `fstatat`s, a second or two);
//! - sooner while the file system fills: once its used space grew by
//!   [`trigger_bytes`] since the last pass started, or while it is below
//!   the reserve, as soon as twice the last pass's time has gone by (at
//!   most a third of a core while something writes fast). A runner writing
//!   as fast as the disk takes it thus overshoots its limit by about a
//!   short tick and a pass of writing, not five seconds of it.
//!
//! [`walk`]: super::super::workspaces::walk
//! [`held_open`]: super::super::workspaces::held_open

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use sandboxd_protocol::ExitReason;

use super::super::workspaces::disk::MAX_ENTRIES_SIZED;
use super::super::workspaces::{held_open, walk};
use super::super::Inner;
use super::reserve::{space_of, Space};
use super::verdict::{self, Limits, Usage};
use crate::sandbox_key::SandboxKey;

/// The longest time between two passes while anything is limited.
pub const INTERVAL: Duration = Duration::from_secs(5);
/// How often the file system's free space is read.
pub const TICK: Duration = Duration::from_millis(100);
/// How often it is read while a sandbox runs under a byte or inode limit:
/// a writer at page-cache speed (7.5 GB/s measured on the development
/// host) writes 750 MiB in a [`TICK`], 75 MiB in this. One `statvfs` a
/// tick: about 2 µs.
pub const LIMITED_TICK: Duration = Duration::from_millis(10);

/// Growth of the file system's used space that starts a pass early: a
/// quarter of the byte limit, within [4 MiB, 256 MiB].
pub fn trigger_bytes(limit: Option<u64>) -> u64 {
    limit
        .map_or(64 << 20, |limit| limit / 4)
        .clamp(4 << 20, 256 << 20)
}

/// One running sandbox to look at.
struct Look {
    key: SandboxKey,
    generation: u64,
    workspace: PathBuf,
    processes: Processes,
}

/// Where a sandbox's processes are listed.
enum Processes {
    /// Its cgroup v2 directory.
    Cgroup(PathBuf),
    /// Its process group (without cgroups).
    Group(i32),
}

/// What the last look at a sandbox found.
#[derive(Debug, Clone, Copy)]
struct Seen {
    generation: u64,
    bytes: u64,
    grew: u64,
}

/// Watches until the driver is gone, on a thread of its own: a tick is a
/// `statvfs` and a sleep, with no runtime woken (the runtime's timer and
/// blocking pool cost about 90 µs a tick, 0.9 % of a core at
/// [`LIMITED_TICK`]); a pass runs on `runtime`.
pub fn keep_watching(inner: Weak<Inner>, runtime: tokio::runtime::Handle) {
    let mut seen: HashMap<SandboxKey, Seen> = HashMap::new();
    let mut last_pass = Instant::now();
    let mut cost = Duration::ZERO;
    let mut used_at_last_pass: Option<u64> = None;
    let mut tick = TICK;
    let Some(bell) = inner
        .upgrade()
        .map(|inner| inner.disk_limit.runner_started.clone())
    else {
        return;
    };
    loop {
        bell.wait(tick);
        let Some(inner) = inner.upgrade() else { return };
        let space: Option<Space> = space_of(&inner.settings.sandboxes_dir);
        let short = match (&inner.disk_limit.reserve, space) {
            (Some(reserve), Some(space)) => reserve.shortfall_in(space),
            _ => None,
        };
        let limits = Limits {
            bytes: inner.disk_limit.watched(),
            inodes: inner.disk_limit.watched_inodes(),
        };
        // Growth since the last pass started (or since the first look).
        let grown = space.map_or(0, |space| {
            let since = *used_at_last_pass.get_or_insert(space.used);
            space.used.saturating_sub(since)
        });
        let since = last_pass.elapsed();
        let limited = limits.bytes.is_some() || limits.inodes.is_some();
        tick = tick_for(limited && inner.runs_any());
        let routine = limited && since >= INTERVAL.max(cost * 4);
        let filling = (limited && grown >= trigger_bytes(limits.bytes)) || short.is_some();
        let early = filling && since >= cost * 2;
        if !(routine || early) {
            continue;
        }
        used_at_last_pass = space.map(|space| space.used);
        let started = Instant::now();
        runtime.block_on(inner.pass(limits, short, &mut seen));
        cost = started.elapsed();
        last_pass = Instant::now();
    }
}

/// A runner's start, told to the watcher's thread so it looks at once,
/// at its shorter tick, instead of a long tick later.
#[derive(Debug, Default)]
pub struct StartBell {
    rung: std::sync::Mutex<bool>,
    bell: std::sync::Condvar,
}

impl StartBell {
    pub fn ring(&self) {
        *self.rung.lock().unwrap_or_else(|e| e.into_inner()) = true;
        self.bell.notify_one();
    }

    /// Until rung (then unrung) or `timeout`.
    fn wait(&self, timeout: Duration) {
        let rung = self.rung.lock().unwrap_or_else(|e| e.into_inner());
        let (mut rung, _) = self
            .bell
            .wait_timeout_while(rung, timeout, |rung| !*rung)
            .unwrap_or_else(|e| e.into_inner());
        *rung = false;
    }
}

/// [`LIMITED_TICK`] while a sandbox runs under a limit the watcher holds,
/// else [`TICK`] (the reserve alone, or nothing running).
fn tick_for(limited_and_running: bool) -> Duration {
    match limited_and_running {
        true => LIMITED_TICK,
        false => TICK,
    }
}

impl Inner {
    /// One pass over the running sandboxes; stops those over a limit, and
    /// while `short` (below the reserve) those that grew.
    async fn pass(
        self: &Arc<Self>,
        limits: Limits,
        short: Option<String>,
        seen: &mut HashMap<SandboxKey, Seen>,
    ) {
        let mut looks = self.running_looks();
        looks.sort_by_key(|look| std::cmp::Reverse(seen.get(&look.key).map_or(0, |s| s.grew)));
        let max_entries = limits.inodes.unwrap_or(MAX_ENTRIES_SIZED);
        let (found_tx, mut found) = tokio::sync::mpsc::unbounded_channel();
        tokio::task::spawn_blocking(move || {
            for look in looks {
                let usage = measure(&look, max_entries);
                if found_tx.send((look, usage)).is_err() {
                    return;
                }
            }
        });
        let mut now_seen = HashMap::new();
        while let Some((look, usage)) = found.recv().await {
            let before = seen
                .get(&look.key)
                .filter(|before| before.generation == look.generation)
                .map(|before| before.bytes);
            let grew = before.map_or(0, |before| usage.bytes().saturating_sub(before));
            now_seen.insert(
                look.key.clone(),
                Seen {
                    generation: look.generation,
                    bytes: usage.bytes(),
                    grew,
                },
            );
            let reason = verdict::over(usage, limits).or_else(|| {
                short
                    .as_ref()
                    .filter(|_| grew > 0)
                    .map(|_| ExitReason::DiskFull)
            });
            if let Some(reason) = reason {
                let why = match (&reason, &short) {
                    (ExitReason::DiskFull, Some(short)) => {
                        format!("{short}; it grew by {grew} bytes since the last look")
                    }
                    _ => String::new(),
                };
                self.stop_for_disk(&look.key, look.generation, reason, usage, why)
                    .await;
            }
        }
        *seen = now_seen;
    }

    /// Whether any sandbox has a runner now.
    fn runs_any(&self) -> bool {
        self.records()
            .values()
            .any(|record| record.running.is_some())
    }

    /// Every running sandbox, with where its files and processes are.
    fn running_looks(&self) -> Vec<Look> {
        let tree = self.containment.tree();
        self.records()
            .iter()
            .filter_map(|(key, record)| {
                let running = record.running.as_ref()?;
                let processes = match tree {
                    Some(tree) => Processes::Cgroup(tree.dirs(&key.base_name).v2),
                    None => Processes::Group(running.leader as i32),
                };
                Some(Look {
                    key: key.clone(),
                    generation: running.generation,
                    workspace: self.settings.workspace(key),
                    processes,
                })
            })
            .collect()
    }
}

/// What a sandbox takes now. Blocking.
fn measure(look: &Look, max_entries: u64) -> Usage {
    let tree = walk::measure(&look.workspace, max_entries);
    let device = nix::sys::stat::lstat(&look.workspace).map(|stat| stat.st_dev);
    let unlinked_bytes = match device {
        Ok(device) => {
            let pids = match &look.processes {
                Processes::Cgroup(v2) => held_open::pids_in_cgroup(v2),
                Processes::Group(pgid) => held_open::pids_in_group(*pgid),
            };
            held_open::unlinked_bytes(&pids, device)
        }
        Err(_) => 0,
    };
    Usage {
        tree,
        unlinked_bytes,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_tick_is_short_only_while_a_limited_sandbox_runs() {
        assert_eq!(tick_for(true), LIMITED_TICK);
        assert_eq!(tick_for(false), TICK);
    }

    #[test]
    fn a_pass_starts_early_after_a_quarter_of_the_limit_was_written() {
        assert_eq!(trigger_bytes(Some(64 << 20)), 16 << 20);
        assert_eq!(trigger_bytes(Some(1 << 20)), 4 << 20);
        assert_eq!(trigger_bytes(Some(10 << 30)), 256 << 20);
        assert_eq!(trigger_bytes(None), 64 << 20);
    }
}
