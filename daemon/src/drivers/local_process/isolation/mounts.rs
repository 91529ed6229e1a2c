//! A sandbox's own view of the file system, in the shape of systemd's
//! `PrivateTmp=` + `ProtectSystem=strict` + `ProtectHome=`: everything the
//! host has, read-only; a private size-bounded tmpfs on `/tmp`, `/var/tmp`
//! and `/dev/shm` (and a fresh `/dev/mqueue`); `/root`, `/home`,
//! `/run/user`, the daemon's state and socket directories hidden — so no
//! other sandbox's workspace is in sight — and the sandbox's own workspace
//! bound back, writable, at [`WORKSPACE`] (what `WORKSPACE_ROOT_DIR` and
//! `HOME` name, as on the container tiers: a short path, so Unix sockets
//! under it fit their 108 bytes), or at its host path where `/workspace`
//! cannot be made on the host; and the view's own `/etc/passwd` and
//! `/etc/group` with an entry for the sandbox's uid (see
//! [`super::passwd_entry`]).
//!
//! [`ViewSettings`] is built once from the config; [`MountPlan`] is one
//! sandbox's, made by the daemon (serialisable, unit-testable without
//! root) and applied by the sandbox's init ([`MountPlan::apply`]) in its
//! new mount namespace, as root, before the runner starts. Init is an
//! ordinary process, not the clone child, so it may allocate.
//!
//! Order of [`MountPlan::apply`], each step named in its error:
//! 1. every mount private (`MS_REC|MS_PRIVATE`): nothing propagates back,
//!    and nothing the host mounts later propagates in (as a slave it would,
//!    writable, past the read-only tree: a long-lived sandbox, or a view
//!    prepared ahead, would then see new host mounts such as a container's
//!    overlay with write access);
//! 2. an `O_PATH` descriptor of each path to bind back (the workspace, the
//!    runner program, `[view]` paths), opened before anything hides them;
//! 3. the whole tree read-only (`mount_setattr(AT_RECURSIVE)`, Linux 5.12;
//!    else a remount of each mount in `/proc/self/mountinfo`), `/dev`
//!    writable again (device nodes; `/dev/shm` gets its own tmpfs);
//! 4. the private tmpfs (`nosuid,nodev`; its pages are charged to the
//!    memory cgroup of whoever writes them — the sandbox — and freed when
//!    the namespace, its last user gone, is torn down): one per sandbox,
//!    a directory of it on each of those paths (see [`TmpfsLayout`]); a
//!    fresh mqueue; and, where the daemon can, a devpts of its own on
//!    `/dev/pts` with its `ptmx` bound on `/dev/ptmx` (see
//!    [`super::devpts`]: only mounts, the host's `/dev` is not changed);
//! 5. the hidden paths: an empty directory of the same tmpfs over a
//!    directory, `/dev/null` over a file;
//! 6. the binds back, on mount points made inside the directory that
//!    covers them, then each hiding mount made read-only.

use std::io;
use std::path::{Path, PathBuf};

use super::devpts::PrivateDevpts;
use super::passwd_entry::{IdentityFiles, GROUP, PASSWD};
use crate::config::ViewConfig;

/// Where a sandbox sees its workspace, when the host has (or the daemon
/// could make) this empty directory to mount it on.
pub const WORKSPACE: &str = "/workspace";

/// The private tmpfs mounts every sandbox gets (those that exist here).
const PRIVATE_TMP: [&str; 3] = ["/tmp", "/var/tmp", "/dev/shm"];
/// Hidden in every sandbox (with the state and socket directories).
const DEFAULT_HIDDEN: [&str; 3] = ["/root", "/home", "/run/user"];
/// Directories too shared to hide whole for the socket: the socket itself
/// is hidden instead.
const SHARED_DIRS: [&str; 5] = ["/", "/run", "/var/run", "/tmp", "/var/tmp"];

/// A hidden directory's cover made read-only: the mount (a bind remount),
/// so a file system shared with writable mounts stays writable there.
pub const READ_ONLY_COVER: libc::c_ulong = libc::MS_BIND
    | libc::MS_REMOUNT
    | libc::MS_RDONLY
    | libc::MS_NOSUID
    | libc::MS_NODEV
    | libc::MS_NOEXEC;

/// How a view's private and hidden directories get their tmpfs.
///
/// Why it matters: every file system instance (a superblock) registers a
/// memory-cgroup-aware shrinker and two list_lrus, and the kernel walks all
/// of them, host-wide, whenever any memory cgroup goes offline or is freed
/// (`memcg_reparent_list_lrus`, `reparent_shrinker_deferred`,
/// `free_shrinker_info`), besides tearing each down at the view's end.
/// With a tmpfs per path (5 to 9 per sandbox), a stop of 2,000 sandboxes
/// spent a third of its CPU there (BENCHMARKS.md, "Stop at scale").
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TmpfsLayout {
    /// One tmpfs per sandbox, made detached (`fsopen`, Linux 5.2), with a
    /// directory of it attached on each path: `/tmp`, `/var/tmp` and
    /// `/dev/shm` share its `tmp_size`.
    Shared,
    /// A tmpfs on each path, each of `tmp_size` (kernels before 5.2, or a
    /// seccomp filter that refuses `fsopen`).
    PerPath,
}

impl TmpfsLayout {
    /// The layout this daemon can make: tried for real (see
    /// `mount_program::can_make_detached_tmpfs`).
    pub fn detect() -> TmpfsLayout {
        if super::mount_program::can_make_detached_tmpfs() {
            TmpfsLayout::Shared
        } else {
            TmpfsLayout::PerPath
        }
    }
}

mod listing;
mod program;

/// The view every sandbox started now gets, from the config.
#[derive(Debug, Clone, PartialEq)]
pub struct ViewSettings {
    /// Each hidden path with the setting that hid it (`status` lists it).
    hidden: Vec<(PathBuf, &'static str)>,
    read_only: Vec<PathBuf>,
    read_write: Vec<PathBuf>,
    tmp_size: u64,
    /// Decided once, when the daemon starts: every view and `status`
    /// follow it.
    tmpfs: TmpfsLayout,
    /// The devpts of its own each view gets, or why none (probed once,
    /// see [`with_devpts`](Self::with_devpts)).
    devpts: Result<PrivateDevpts, String>,
    /// Where every view mounts its workspace: [`WORKSPACE`], or why not
    /// (then at its host path).
    workspace_inside: Result<PathBuf, String>,
}

/// One path of the host bound into the view.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Bind {
    /// The host's path, opened before anything is hidden.
    pub path: PathBuf,
    /// Where it is mounted in the view (mostly `path` itself).
    pub target: PathBuf,
    pub writable: bool,
}

impl Bind {
    /// `path` bound back at the same path.
    pub fn back(path: &Path, writable: bool) -> Bind {
        Bind {
            path: path.to_path_buf(),
            target: path.to_path_buf(),
            writable,
        }
    }
}

/// The mount that covers a path in every view: a private tmpfs (writable)
/// or a hiding one (read-only once the view is built).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Cover {
    pub path: PathBuf,
    pub writable: bool,
}

/// The mount under which `path` lies in a view with `covers` (see
/// [`ViewSettings::covers`]): the first private tmpfs, else the first
/// hidden directory, that holds it. `None`: it is in the host's tree
/// (read-only, where no mount point can be made).
pub fn cover_in(covers: &[Cover], path: &Path) -> Option<Cover> {
    covers
        .iter()
        .find(|cover| path.starts_with(&cover.path))
        .cloned()
}

/// One sandbox's view, made by the daemon and applied by its init.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MountPlan {
    /// Bytes the private tmpfs may hold (each, in the per-path layout).
    pub tmp_size: u64,
    pub tmpfs: TmpfsLayout,
    /// Covered by an empty read-only tmpfs (a directory) or `/dev/null`.
    pub hidden: Vec<PathBuf>,
    /// The mount options of the view's own devpts; `None`: the host's.
    pub devpts: Option<String>,
    /// Bound back, in order, after the hiding.
    pub binds: Vec<Bind>,
}

/// A step of [`MountPlan::apply`] that failed, and the path it failed on.
#[derive(Debug, thiserror::Error)]
#[error("{step} {}: {error}", path.display())]
pub struct MountError {
    pub step: &'static str,
    pub path: PathBuf,
    #[source]
    pub error: io::Error,
}

impl ViewSettings {
    /// The config's `[view]` with the defaults and the daemon's own
    /// directories added to the hidden paths.
    pub fn new(
        view: &ViewConfig,
        memory_limit: u64,
        state_dir: &Path,
        socket: &Path,
    ) -> ViewSettings {
        let mut hidden: Vec<(PathBuf, &'static str)> = DEFAULT_HIDDEN
            .iter()
            .map(|path| (PathBuf::from(path), listing::BUILT_IN))
            .collect();
        hidden.push((state_dir.to_path_buf(), "state_dir"));
        match socket.parent() {
            Some(dir) if !SHARED_DIRS.iter().any(|shared| dir == Path::new(shared)) => {
                hidden.push((dir.to_path_buf(), "socket"))
            }
            _ => hidden.push((socket.to_path_buf(), "socket")),
        }
        hidden.extend(
            view.hidden
                .iter()
                .map(|path| (path.clone(), "[view] hidden")),
        );
        // Stable: a path named twice keeps the first setting that named it.
        hidden.sort_by(|a, b| a.0.cmp(&b.0));
        hidden.dedup_by(|later, first| later.0 == first.0);
        ViewSettings {
            hidden,
            read_only: view.read_only.clone(),
            read_write: view.read_write.clone(),
            tmp_size: view.tmp_size(memory_limit),
            tmpfs: TmpfsLayout::detect(),
            devpts: Err("not asked for".to_string()),
            workspace_inside: Err("not asked for".to_string()),
        }
    }

    /// Every view built from now on mounts its workspace at `inside`
    /// (see `workspace_mount`), or at its host path, for the reason given.
    pub fn with_workspace_at(mut self, inside: Result<PathBuf, String>) -> ViewSettings {
        self.workspace_inside = inside;
        self
    }

    /// Where every view mounts its workspace, or why at its host path.
    pub fn workspace_at(&self) -> &Result<PathBuf, String> {
        &self.workspace_inside
    }

    /// Where a sandbox whose workspace is `host` on the host sees it.
    pub fn workspace_inside(&self, host: &Path) -> PathBuf {
        match &self.workspace_inside {
            Ok(inside) => inside.clone(),
            Err(_) => host.to_path_buf(),
        }
    }

    /// Every view built from now on gets `devpts` (once [`super::devpts::probe`]
    /// said this daemon can mount it), or keeps the host's, for the reason
    /// given.
    pub fn with_devpts(mut self, devpts: Result<PrivateDevpts, String>) -> ViewSettings {
        self.devpts = devpts;
        self
    }

    /// The devpts of its own each view gets, or why none, for `status`.
    pub fn devpts(&self) -> &Result<PrivateDevpts, String> {
        &self.devpts
    }

    /// The paths hidden from every sandbox, for `status`.
    pub fn hidden(&self) -> impl Iterator<Item = &Path> {
        self.hidden.iter().map(|(path, _)| path.as_path())
    }

    pub fn tmp_size(&self) -> u64 {
        self.tmp_size
    }

    pub fn tmpfs_layout(&self) -> TmpfsLayout {
        self.tmpfs
    }

    /// The plan of a view prepared before its sandbox is known (see
    /// `prepared`): [`plan`](Self::plan) without the workspace, which the
    /// sandbox that takes it mounts in.
    pub fn plan_prepared(&self, program: &Path) -> MountPlan {
        let mut plan = self.plan(Path::new("/"), program);
        plan.binds.pop();
        plan
    }

    /// The mounts that cover a part of the host's tree in a view built
    /// now, as [`MountPlan::prepare`] makes them: the private tmpfs
    /// first, then the hidden directories (see [`cover_in`]). A few
    /// `stat`s: a view prepared ahead keeps the list it was built with,
    /// and its take looks there (see `prepared::parked::ParkedView::cover_of`).
    pub fn covers(&self) -> Vec<Cover> {
        let mut covers: Vec<Cover> = PRIVATE_TMP
            .iter()
            .map(Path::new)
            .filter(|tmp| tmp.is_dir())
            .map(|tmp| Cover {
                path: tmp.to_path_buf(),
                writable: true,
            })
            .collect();
        for hidden in self.hidden() {
            if covers.iter().any(|cover| hidden.starts_with(&cover.path)) {
                continue;
            }
            if std::fs::symlink_metadata(hidden).is_ok_and(|meta| meta.is_dir()) {
                covers.push(Cover {
                    path: hidden.to_path_buf(),
                    writable: false,
                });
            }
        }
        covers
    }

    /// The plan of a sandbox whose workspace is `workspace` and whose
    /// runner is `program`: both always in its view, the workspace writable.
    pub fn plan(&self, workspace: &Path, program: &Path) -> MountPlan {
        let mut binds = vec![Bind::back(program, false)];
        binds.extend(self.read_only.iter().map(|path| Bind::back(path, false)));
        binds.extend(self.read_write.iter().map(|path| Bind::back(path, true)));
        binds.push(Bind {
            path: workspace.to_path_buf(),
            target: self.workspace_inside(workspace),
            writable: true,
        });
        MountPlan {
            tmp_size: self.tmp_size,
            tmpfs: self.tmpfs,
            hidden: self.hidden().map(Path::to_path_buf).collect(),
            devpts: self.devpts.as_ref().ok().map(PrivateDevpts::mount_options),
            binds,
        }
    }
}

impl MountPlan {
    /// This plan with `files` bound read-only over the view's
    /// `/etc/passwd` and `/etc/group`.
    pub fn with_identity(mut self, files: &IdentityFiles) -> MountPlan {
        for (path, target) in [(&files.passwd, PASSWD), (&files.group, GROUP)] {
            self.binds.push(Bind {
                path: path.clone(),
                target: PathBuf::from(target),
                writable: false,
            });
        }
        self
    }
}

#[cfg(test)]
mod tests;
