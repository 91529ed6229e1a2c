//! The private view's rows: row (c) with `isolation = "full"`
//! against `"uid-cgroup"`, both daemons of this binary taking new sandboxes
//! in turn (`bench/compare.rs`), so each sees the same neighbours; then the
//! same pair again with 200 more mounts on the host, since a new mount
//! namespace starts as a copy of the host's mount table; and what each
//! namespace costs on its own, raw: a forked child that `unshare`s one
//! namespace and exits, against one that only exits.

use std::path::{Path, PathBuf};
use std::time::Instant;

use anyhow::{bail, Context};

use crate::compare::{self, Contender, Plan};
use crate::report::{Goal, Row};
use crate::setup::Binaries;
use crate::stats::Samples;

/// The settings, in the order every list here keeps: the default (a full
/// view, with views prepared ahead), the full view started cold (no
/// pool), and the opt-out: each a top-level key and a table.
const SETTINGS: [(&str, &str, &str); 3] = [
    ("full", "", ""),
    (
        "full-cold",
        "",
        "[pool]\nsession = 0\nworkflow = 0\nconnect = 0\n",
    ),
    ("uid-cgroup", "isolation = \"uid-cgroup\"\n", ""),
];

/// How many mounts the second pair runs with, beyond the host's own.
pub const EXTRA_MOUNTS: usize = 200;

pub struct IsolationFigures {
    /// New sandboxes on the host's mounts, in [`SETTINGS`] order.
    pub new: Vec<Contender>,
    /// The same with [`EXTRA_MOUNTS`] more mounts.
    pub new_many_mounts: Vec<Contender>,
    /// Lines of `/proc/self/mountinfo` in each case.
    pub mounts: (usize, usize),
    /// fork + `unshare(flag)` + exit + wait, per namespace, and the bare
    /// fork + exit + wait baseline.
    pub unshare: Vec<(&'static str, Samples)>,
    pub fork_baseline: Samples,
}

/// Both pairs of `count` new sandboxes each, and `raw` unshares of each kind.
pub async fn measure(
    dir: &Path,
    binaries: &Binaries,
    count: usize,
    raw: usize,
) -> anyhow::Result<IsolationFigures> {
    let before = mount_count();
    let new = compare::interleave(dir, plans(binaries), count).await?;
    let mounts = ExtraMounts::make(&dir.join("extra-mounts"), EXTRA_MOUNTS)?;
    let during = mount_count();
    let new_many_mounts = compare::interleave(dir, plans(binaries), count).await;
    drop(mounts);
    let new_many_mounts = new_many_mounts?;
    let (fork_baseline, unshare) =
        tokio::task::spawn_blocking(move || unshare_costs(raw)).await??;
    Ok(IsolationFigures {
        new,
        new_many_mounts,
        mounts: (before, during),
        unshare,
        fork_baseline,
    })
}

fn plans(binaries: &Binaries) -> Vec<Plan<'_>> {
    SETTINGS
        .iter()
        .map(|&(name, key, table)| Plan {
            name,
            binaries,
            driver_toml: format!("driver = \"local-process\"\n{key}"),
            tables_toml: table.to_string(),
        })
        .collect()
}

pub fn rows(figures: &IsolationFigures) -> Vec<Row> {
    let mut rows = Vec::new();
    let ms = |contender: &Contender| contender.ensures.p50() / 1e3;
    for (new, mounts) in [
        (&figures.new, figures.mounts.0),
        (&figures.new_many_mounts, figures.mounts.1),
    ] {
        let [full, cold, uid_cgroup] = &new[..] else {
            continue;
        };
        rows.push(Row {
            row: "c/view",
            what: format!(
                "ensure new sandbox p50, isolation = full (prepared views), {mounts} host mounts, in turn"
            ),
            unit: "ms",
            value: ms(full),
            baseline_what: "isolation = uid-cgroup, in turn".into(),
            baseline: Some(ms(uid_cgroup)),
            goal: Goal::RatioAtMost(1.2),
        });
        rows.push(Row {
            row: "c/view",
            what: format!(
                "ensure new sandbox p50, isolation = full started cold (no pool), {mounts} host mounts, in turn"
            ),
            unit: "ms",
            value: ms(cold),
            baseline_what: "isolation = uid-cgroup, in turn".into(),
            baseline: Some(ms(uid_cgroup)),
            goal: Goal::Info,
        });
        rows.push(Row {
            row: "c/view",
            what: format!("deprovision p50, isolation = full, {mounts} host mounts"),
            unit: "ms",
            value: full.deprovisions.p50() / 1e3,
            baseline_what: "isolation = uid-cgroup".into(),
            baseline: Some(uid_cgroup.deprovisions.p50() / 1e3),
            goal: Goal::Info,
        });
    }
    for (name, samples) in &figures.unshare {
        rows.push(Row {
            row: "c/view",
            what: format!("raw fork + unshare({name}) + exit + wait p50"),
            unit: "ms",
            value: samples.p50() / 1e3,
            baseline_what: "fork + exit + wait".into(),
            baseline: Some(figures.fork_baseline.p50() / 1e3),
            goal: Goal::Info,
        });
    }
    rows
}

pub fn info(figures: &IsolationFigures) -> String {
    format!(
        "view: {} new sandboxes on each of full, full started cold and uid-cgroup in turn, with {} and then {} \
         host mounts; {} raw unshares of each namespace",
        figures.new.first().map_or(0, |c| c.ensures.len()),
        figures.mounts.0,
        figures.mounts.1,
        figures.fork_baseline.len()
    )
}

fn mount_count() -> usize {
    std::fs::read_to_string("/proc/self/mountinfo").map_or(0, |text| text.lines().count())
}

/// `count` small tmpfs mounts under `dir`, unmounted and removed on drop.
struct ExtraMounts {
    dir: PathBuf,
    mounted: Vec<(PathBuf, std::ffi::CString)>,
}

impl ExtraMounts {
    fn make(dir: &Path, count: usize) -> anyhow::Result<ExtraMounts> {
        std::fs::create_dir_all(dir).with_context(|| format!("create {}", dir.display()))?;
        let mut mounts = ExtraMounts {
            dir: dir.to_path_buf(),
            mounted: Vec::with_capacity(count),
        };
        for n in 0..count {
            let target = dir.join(format!("m{n}"));
            std::fs::create_dir(&target)?;
            let path = std::ffi::CString::new(target.as_os_str().as_encoded_bytes())?;
            // SAFETY: mount(2) with NUL-terminated strings that outlive the call.
            let mounted = unsafe {
                libc::mount(
                    c"sandboxd-bench".as_ptr(),
                    path.as_ptr(),
                    c"tmpfs".as_ptr(),
                    libc::MS_NOSUID | libc::MS_NODEV,
                    c"size=64k".as_ptr().cast(),
                )
            };
            if mounted != 0 {
                bail!(
                    "mount a tmpfs on {}: {}",
                    target.display(),
                    std::io::Error::last_os_error()
                );
            }
            mounts.mounted.push((target, path));
        }
        Ok(mounts)
    }
}

impl Drop for ExtraMounts {
    fn drop(&mut self) {
        for (_, path) in self.mounted.drain(..) {
            // SAFETY: umount2(2) with a NUL-terminated path.
            unsafe { libc::umount2(path.as_ptr(), libc::MNT_DETACH) };
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// The namespaces a `full` sandbox gets, by `unshare` flag.
const NAMESPACES: [(&str, libc::c_int); 3] = [
    ("CLONE_NEWNS", libc::CLONE_NEWNS),
    ("CLONE_NEWPID", libc::CLONE_NEWPID),
    ("CLONE_NEWIPC", libc::CLONE_NEWIPC),
];

/// Times `count` forks of a child that exits at once, then `count` of one
/// that unshares each namespace first. The namespace's teardown happens
/// at the child's exit, inside the timed span, as it does for a sandbox.
fn unshare_costs(count: usize) -> anyhow::Result<(Samples, Vec<(&'static str, Samples)>)> {
    let baseline = fork_wait(count, 0)?;
    let mut costs = Vec::new();
    for (name, flag) in NAMESPACES {
        costs.push((name, fork_wait(count, flag)?));
    }
    Ok((baseline, costs))
}

fn fork_wait(count: usize, flag: libc::c_int) -> anyhow::Result<Samples> {
    let mut samples = Samples::with_capacity(count);
    for _ in 0..count {
        let start = Instant::now();
        // SAFETY: the child makes only async-signal-safe calls (unshare,
        // _exit) before it ends, as fork in a threaded process requires.
        let pid = unsafe { libc::fork() };
        if pid == 0 {
            // SAFETY: in the child; see above.
            unsafe {
                let failed = flag != 0 && libc::unshare(flag) != 0;
                libc::_exit(i32::from(failed));
            }
        }
        if pid < 0 {
            bail!("fork: {}", std::io::Error::last_os_error());
        }
        let mut status = 0;
        // SAFETY: waits for the child just forked.
        if unsafe { libc::waitpid(pid, &mut status, 0) } != pid {
            bail!("waitpid: {}", std::io::Error::last_os_error());
        }
        samples.push(start.elapsed());
        if !libc::WIFEXITED(status) || libc::WEXITSTATUS(status) != 0 {
            bail!("unshare({flag:#x}) failed in the child (status {status})");
        }
    }
    Ok(samples)
}
