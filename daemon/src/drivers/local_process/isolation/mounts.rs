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

use std::ffi::CString;
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use super::devpts::PrivateDevpts;
use super::mount_program::{kernel_has_mount_setattr, Call, MountProgram, Step, MOUNT_ATTR_RDONLY};
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
    /// A hidden path inside a path bound back (`[view] hidden =
    /// ["/root/.cargo/credentials.toml"]` with `[view] read_only =
    /// ["/root/.cargo"]`) came back with the bind, which brings the host's
    /// tree beneath it: it is hidden again, on top of the bind.
    fn hide_again_under_binds<'a>(
        &'a self,
        steps: &mut Steps,
        covers: &mut Vec<(&'a Path, bool)>,
    ) -> Result<(), MountError> {
        for path in &self.hidden {
            let under_a_bind = self
                .binds
                .iter()
                .any(|bind| path != &bind.target && path.starts_with(&bind.target));
            if !under_a_bind {
                continue;
            }
            match std::fs::symlink_metadata(path) {
                Err(_) => {}
                Ok(meta) if meta.is_dir() => {
                    steps.hide_dir(path, libc::MS_NOSUID | libc::MS_NODEV | libc::MS_NOEXEC)?;
                    covers.push((path, false));
                }
                Ok(_) => steps.hide_file(path)?,
            }
        }
        Ok(())
    }

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

    /// The view as the system calls that build it (see
    /// [`MountProgram`]), for a sandbox's clone child to run in its new
    /// mount namespace, as root, before the runner starts; `/proc` of the
    /// sandbox's PID namespace last. Looks at the host's file system for
    /// what exists (the child's namespace starts as its copy).
    pub fn prepare(&self) -> Result<MountProgram, MountError> {
        let layout = self.tmpfs;
        let mut steps = Steps::default();
        let root = Path::new("/");
        steps.mount(
            "make every mount private",
            root,
            None,
            None,
            libc::MS_REC | libc::MS_PRIVATE,
            None,
        )?;
        for (slot, bind) in self.binds.iter().enumerate() {
            let path = c_path(&bind.path).map_err(fails("open", &bind.path))?;
            steps.push("open", &bind.path, Call::OpenSource { path, slot });
        }
        steps.set_attr("make the system read-only", root, MOUNT_ATTR_RDONLY, 0)?;
        steps.set_attr("make writable", Path::new("/dev"), 0, MOUNT_ATTR_RDONLY)?;
        let mut covers: Vec<(&Path, bool)> = Vec::new();
        let mut tmpfs_dirs = 0;
        if layout == TmpfsLayout::Shared {
            let size = CString::new(self.tmp_size.to_string()).unwrap_or_default();
            steps.push("make the private tmpfs", root, Call::MakeTmpfs { size });
        }
        let size = format!("size={},mode=1777", self.tmp_size);
        for tmp in PRIVATE_TMP
            .iter()
            .map(Path::new)
            .filter(|path| path.is_dir())
        {
            match layout {
                TmpfsLayout::Shared => steps.attach_tmpfs_dir(
                    "mount the private tmpfs on",
                    tmp,
                    &mut tmpfs_dirs,
                    0o1777,
                )?,
                TmpfsLayout::PerPath => steps.mount(
                    "mount the private tmpfs on",
                    tmp,
                    Some("tmpfs"),
                    Some("tmpfs"),
                    libc::MS_NOSUID | libc::MS_NODEV,
                    Some(&size),
                )?,
            }
            covers.push((tmp, true));
        }
        let mqueue = Path::new("/dev/mqueue");
        if mqueue.is_dir() {
            let flags = libc::MS_NOSUID | libc::MS_NODEV | libc::MS_NOEXEC;
            steps.mount(
                "mount a fresh mqueue on",
                mqueue,
                Some("mqueue"),
                Some("mqueue"),
                flags,
                None,
            )?;
        }
        if let Some(options) = &self.devpts {
            steps.private_devpts(options)?;
        }
        for path in &self.hidden {
            // Gone, or already out of sight under a private tmpfs: nothing
            // to hide (and a mount there would fail with ENOENT).
            if covers.iter().any(|(cover, _)| path.starts_with(cover)) {
                continue;
            }
            match std::fs::symlink_metadata(path) {
                Err(_) => {}
                Ok(meta) if meta.is_dir() => {
                    match layout {
                        TmpfsLayout::Shared => {
                            steps.attach_tmpfs_dir("hide", path, &mut tmpfs_dirs, 0o755)?;
                            steps.mark_missing_as_fine();
                        }
                        TmpfsLayout::PerPath => {
                            let flags = libc::MS_NOSUID | libc::MS_NODEV | libc::MS_NOEXEC;
                            steps.hide_dir(path, flags)?;
                        }
                    }
                    covers.push((path, false));
                }
                Ok(_) => steps.hide_file(path)?,
            }
        }
        if layout == TmpfsLayout::Shared {
            steps.push("let go of the private tmpfs", root, Call::CloseTmpfs);
        }
        for (slot, bind_back) in self.binds.iter().enumerate() {
            let path = &bind_back.target;
            if let Some((cover, _)) = covers.iter().find(|(cover, _)| path.starts_with(cover)) {
                let source_is_dir = std::fs::metadata(&bind_back.path)
                    .map_err(fails("make a mount point at", path))?
                    .is_dir();
                steps.mount_point(cover, path, source_is_dir)?;
            }
            let mut flags = libc::MS_BIND | libc::MS_REMOUNT | libc::MS_NOSUID | libc::MS_NODEV;
            if !bind_back.writable {
                flags |= libc::MS_RDONLY;
            }
            let target = c_path(path).map_err(fails("bind back", path))?;
            steps.push(
                "bind back",
                path,
                Call::BindSource {
                    slot,
                    target,
                    flags,
                },
            );
        }
        self.hide_again_under_binds(&mut steps, &mut covers)?;
        // The mount read-only, not its file system: with the shared
        // layout the same tmpfs is the sandbox's writable /tmp.
        for (cover, _) in covers.iter().filter(|(_, writable)| !writable) {
            steps.mount("make read-only", cover, None, None, READ_ONLY_COVER, None)?;
        }
        steps.mount(
            "mount",
            Path::new("/proc"),
            Some("proc"),
            Some("proc"),
            libc::MS_NOSUID | libc::MS_NODEV | libc::MS_NOEXEC,
            None,
        )?;
        Ok(MountProgram::new(steps.0, self.binds.len()))
    }
}

/// The steps of a [`MountProgram`] as they are written down.
#[derive(Default)]
struct Steps(Vec<Step>);

impl Steps {
    fn push(&mut self, what: &'static str, path: &Path, call: Call) {
        self.0.push(Step {
            call,
            what,
            path: path.to_path_buf(),
        });
    }

    fn mount(
        &mut self,
        what: &'static str,
        target: &Path,
        source: Option<&str>,
        fstype: Option<&str>,
        flags: libc::c_ulong,
        data: Option<&str>,
    ) -> Result<(), MountError> {
        let text = |value: Option<&str>| value.map(|text| CString::new(text).unwrap_or_default());
        let call = Call::Mount {
            source: text(source),
            target: c_path(target).map_err(fails(what, target))?,
            fstype: text(fstype),
            flags,
            data: text(data),
            missing_is_fine: false,
        };
        self.push(what, target, call);
        Ok(())
    }

    /// A new directory of the sandbox's private tmpfs (the `n`th, with
    /// `mode`) attached on `path`.
    fn attach_tmpfs_dir(
        &mut self,
        what: &'static str,
        path: &Path,
        n: &mut usize,
        mode: libc::mode_t,
    ) -> Result<(), MountError> {
        let call = Call::AttachTmpfsDir {
            name: CString::new(n.to_string()).unwrap_or_default(),
            mode,
            target: c_path(path).map_err(fails(what, path))?,
            missing_is_fine: false,
        };
        *n += 1;
        self.push(what, path, call);
        Ok(())
    }

    /// An empty tmpfs over the directory `path`.
    fn hide_dir(&mut self, path: &Path, flags: libc::c_ulong) -> Result<(), MountError> {
        self.mount(
            "hide",
            path,
            Some("tmpfs"),
            Some("tmpfs"),
            flags,
            Some("mode=0755"),
        )?;
        self.mark_missing_as_fine();
        Ok(())
    }

    /// A new devpts instance with `options` on `/dev/pts`, and its `ptmx`
    /// bound on `/dev/ptmx` when that is a device node (a symbolic link
    /// to `pts/ptmx` already leads there). On the host's `/dev`, which the
    /// view shares, only mounts: nothing there is made or changed.
    fn private_devpts(&mut self, options: &str) -> Result<(), MountError> {
        let pts = Path::new("/dev/pts");
        if !pts.is_dir() {
            return Ok(());
        }
        let flags = libc::MS_NOSUID | libc::MS_NOEXEC;
        let devpts = Some("devpts");
        let what = "mount a devpts of its own on";
        self.mount(what, pts, devpts, devpts, flags, Some(options))?;
        let ptmx = Path::new("/dev/ptmx");
        let is_device = std::fs::symlink_metadata(ptmx)
            .is_ok_and(|meta| std::os::unix::fs::FileTypeExt::is_char_device(&meta.file_type()));
        if is_device {
            let source = Some("/dev/pts/ptmx");
            self.mount("bind its ptmx on", ptmx, source, None, libc::MS_BIND, None)?;
        }
        Ok(())
    }

    /// `/dev/null` over the file `path`, read-only.
    fn hide_file(&mut self, path: &Path) -> Result<(), MountError> {
        let target = || c_path(path).map_err(fails("hide", path));
        self.push(
            "hide",
            path,
            Call::Mount {
                source: Some(c"/dev/null".to_owned()),
                target: target()?,
                fstype: None,
                flags: libc::MS_BIND,
                data: None,
                missing_is_fine: true,
            },
        );
        let flags =
            libc::MS_BIND | libc::MS_REMOUNT | libc::MS_RDONLY | libc::MS_NOSUID | libc::MS_NODEV;
        self.mount("hide", path, None, None, flags, None)?;
        self.mark_missing_as_fine();
        Ok(())
    }

    /// The step just pushed skips a path that is gone in the sandbox's
    /// namespace: under a hidden directory hidden first, say.
    fn mark_missing_as_fine(&mut self) {
        if let Some(Step {
            call:
                Call::Mount {
                    missing_is_fine, ..
                }
                | Call::AttachTmpfsDir {
                    missing_is_fine, ..
                },
            ..
        }) = self.0.last_mut()
        {
            *missing_is_fine = true;
        }
    }

    /// `mount_setattr(AT_RECURSIVE)` on `path`, with the pre-5.12 fallback
    /// (a remount of each mount at or below it, keeping its flags) written
    /// out only where the kernel lacks the call.
    fn set_attr(
        &mut self,
        what: &'static str,
        path: &Path,
        set: u64,
        clear: u64,
    ) -> Result<(), MountError> {
        let fallback = if kernel_has_mount_setattr() {
            Vec::new()
        } else {
            remounts_below(path, set & MOUNT_ATTR_RDONLY != 0).map_err(fails(what, path))?
        };
        let call = Call::SetAttr {
            path: c_path(path).map_err(fails(what, path))?,
            set,
            clear,
            fallback,
        };
        self.push(what, path, call);
        Ok(())
    }

    /// The directories (and for a file, the file) a bind on `path` needs
    /// inside the fresh tmpfs `cover`, from the top down.
    fn mount_point(&mut self, cover: &Path, path: &Path, is_dir: bool) -> Result<(), MountError> {
        let what = "make a mount point at";
        let mut missing: Vec<&Path> = path
            .ancestors()
            .skip(usize::from(!is_dir))
            .take_while(|dir| *dir != cover && dir.starts_with(cover))
            .collect();
        missing.reverse();
        for dir in missing {
            let call = Call::MakeDir {
                path: c_path(dir).map_err(fails(what, dir))?,
            };
            self.push(what, dir, call);
        }
        if !is_dir {
            let call = Call::MakeFile {
                path: c_path(path).map_err(fails(what, path))?,
            };
            self.push(what, path, call);
        }
        Ok(())
    }
}

/// Where `mount_setattr` is missing: a bind remount of each mount at or
/// below `root` (from `/proc/self/mountinfo`), read-only or not, keeping
/// its `nosuid`, `nodev` and `noexec` (read back with `statvfs`). A mount
/// point this process cannot reach (hidden under another) is left out.
fn remounts_below(root: &Path, read_only: bool) -> io::Result<Vec<(CString, libc::c_ulong)>> {
    let mountinfo = std::fs::read_to_string("/proc/self/mountinfo")?;
    let mut remounts = Vec::new();
    for mount_point in mount_points(&mountinfo).filter(|point| point.starts_with(root)) {
        let c = c_path(&mount_point)?;
        // SAFETY: statvfs is plain data, filled by the call.
        let mut stat: libc::statvfs = unsafe { std::mem::zeroed() };
        // SAFETY: a live C string and a writable statvfs.
        if unsafe { libc::statvfs(c.as_ptr(), &mut stat) } < 0 {
            continue;
        }
        let mut flags = libc::MS_BIND | libc::MS_REMOUNT;
        for (kept, flag) in [
            (libc::ST_NOSUID, libc::MS_NOSUID),
            (libc::ST_NODEV, libc::MS_NODEV),
            (libc::ST_NOEXEC, libc::MS_NOEXEC),
        ] {
            if stat.f_flag & kept != 0 {
                flags |= flag;
            }
        }
        if read_only {
            flags |= libc::MS_RDONLY;
        }
        remounts.push((c, flags));
    }
    Ok(remounts)
}

/// The error of `step` on `path`.
fn fails<'a>(step: &'static str, path: &'a Path) -> impl Fn(io::Error) -> MountError + 'a {
    move |error| MountError {
        step,
        path: path.to_path_buf(),
        error,
    }
}

fn c_path(path: &Path) -> io::Result<CString> {
    CString::new(path.as_os_str().as_bytes())
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "a NUL byte in the path"))
}

/// The mount points (field 5) of a `/proc/self/mountinfo`, unescaped
/// (the kernel writes space, tab, newline and backslash as `\ooo`).
fn mount_points(mountinfo: &str) -> impl Iterator<Item = PathBuf> + '_ {
    mountinfo
        .lines()
        .filter_map(|line| line.split(' ').nth(4))
        .map(|field| {
            PathBuf::from(
                <std::ffi::OsString as std::os::unix::ffi::OsStringExt>::from_vec(unescape(field)),
            )
        })
}

fn unescape(field: &str) -> Vec<u8> {
    let bytes = field.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let octal = bytes.get(i + 1..i + 4).filter(|digits| {
            bytes[i] == b'\\' && digits.iter().all(|digit| (b'0'..=b'7').contains(digit))
        });
        match octal {
            Some(digits) => {
                out.push(
                    digits
                        .iter()
                        .fold(0u8, |value, digit| value * 8 + (digit - b'0')),
                );
                i += 4;
            }
            None => {
                out.push(bytes[i]);
                i += 1;
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn settings(view: ViewConfig) -> ViewSettings {
        ViewSettings::new(
            &view,
            512 << 20,
            Path::new("/var/lib/sandboxd"),
            Path::new("/run/sandboxd/sandboxd.sock"),
        )
    }

    #[test]
    fn hides_homes_and_the_daemons_directories_and_binds_the_workspace_back() {
        let plan = settings(ViewConfig::default()).plan(
            Path::new("/var/lib/sandboxd/sandboxes/sbx-a"),
            Path::new("/root/bin/runner"),
        );
        assert_eq!(plan.tmp_size, 512 << 20);
        let hidden: Vec<&str> = plan.hidden.iter().map(|p| p.to_str().unwrap()).collect();
        assert_eq!(
            hidden,
            [
                "/home",
                "/root",
                "/run/sandboxd",
                "/run/user",
                "/var/lib/sandboxd"
            ]
        );
        assert_eq!(
            plan.binds,
            [
                Bind::back(Path::new("/root/bin/runner"), false),
                Bind::back(Path::new("/var/lib/sandboxd/sandboxes/sbx-a"), true),
            ]
        );
    }

    #[test]
    fn the_workspace_goes_to_workspace_and_the_identity_over_etc() {
        let settings = settings(ViewConfig::default()).with_workspace_at(Ok(WORKSPACE.into()));
        let host = Path::new("/var/lib/sandboxd/sandboxes/sbx-a");
        let files = IdentityFiles {
            passwd: "/var/lib/sandboxd/identities/7.passwd".into(),
            group: "/var/lib/sandboxd/identities/7.group".into(),
        };
        let plan = settings.plan(host, Path::new("/usr/bin/runner"));
        let binds = plan.with_identity(&files).binds;
        let target = |path: &str| binds.iter().find(|bind| bind.path == Path::new(path));
        let workspace = target(host.to_str().unwrap()).unwrap();
        assert_eq!(
            (workspace.target.to_str(), workspace.writable),
            (Some(WORKSPACE), true)
        );
        let passwd = target("/var/lib/sandboxd/identities/7.passwd").unwrap();
        assert_eq!(
            (passwd.target.to_str(), passwd.writable),
            (Some(PASSWD), false)
        );
        let group = target("/var/lib/sandboxd/identities/7.group").unwrap();
        assert_eq!(group.target, Path::new(GROUP));
        assert_eq!(settings.workspace_inside(host), Path::new(WORKSPACE));
    }

    #[test]
    fn a_prepared_view_is_the_plan_without_the_workspace_whose_cover_is_found() {
        let dir = std::env::temp_dir().join(format!("sandboxd-cover-{}", std::process::id()));
        let state = dir.join("state");
        std::fs::create_dir_all(state.join("sandboxes")).unwrap();
        let settings = ViewSettings::new(
            &ViewConfig::default(),
            512 << 20,
            &state,
            Path::new("/run/sandboxd/sandboxd.sock"),
        );
        let workspace = state.join("sandboxes/sbx-a");
        let program = Path::new("/usr/bin/runner");
        let mut whole = settings.plan(&workspace, program);
        let prepared = settings.plan_prepared(program);
        assert_eq!(
            whole.binds.pop().map(|bind| bind.path),
            Some(workspace.clone())
        );
        assert_eq!(prepared, whole);
        // Under /tmp (as the tests' state directories are) the private
        // tmpfs covers it, writable; elsewhere the hidden state directory,
        // read-only once built.
        let cover = cover_in(&settings.covers(), &workspace);
        if dir.starts_with("/tmp") && Path::new("/tmp").is_dir() {
            assert_eq!(
                cover,
                Some(Cover {
                    path: "/tmp".into(),
                    writable: true
                })
            );
        } else {
            assert_eq!(
                cover,
                Some(Cover {
                    path: state.clone(),
                    writable: false
                })
            );
        }
        assert_eq!(cover_in(&settings.covers(), Path::new("/usr/share")), None);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn operators_paths_join_the_plan_and_a_socket_in_a_shared_dir_is_hidden_alone() {
        let view = ViewConfig {
            read_only: vec!["/root/.cargo".into()],
            read_write: vec!["/srv/cache".into()],
            hidden: vec!["/opt/secrets".into(), "/home".into()],
            tmp_size: Some(64 << 20),
        };
        let settings = ViewSettings::new(
            &view,
            0,
            Path::new("/var/lib/sandboxd"),
            Path::new("/run/sandboxd.sock"),
        );
        let plan = settings.plan(Path::new("/w"), Path::new("/usr/bin/runner"));
        assert_eq!(plan.tmp_size, 64 << 20);
        assert!(plan.hidden.contains(&PathBuf::from("/opt/secrets")));
        assert!(plan.hidden.contains(&PathBuf::from("/run/sandboxd.sock")));
        assert!(!plan.hidden.contains(&PathBuf::from("/run")));
        assert_eq!(
            plan.hidden.iter().filter(|p| p.ends_with("home")).count(),
            1
        );
        let writable: Vec<(&str, bool)> = plan
            .binds
            .iter()
            .map(|bind| (bind.path.to_str().unwrap(), bind.writable))
            .collect();
        assert_eq!(
            writable,
            [
                ("/usr/bin/runner", false),
                ("/root/.cargo", false),
                ("/srv/cache", true),
                ("/w", true)
            ]
        );
    }

    #[test]
    fn the_prepared_view_binds_back_on_mount_points_under_its_covers_and_mounts_proc_last() {
        let dir = crate::test_dir::TestDir::new("view-plan");
        let dir = &dir.0;
        let state = dir.join("state");
        let workspace = state.join("sandboxes").join("sbx-a");
        std::fs::create_dir_all(&workspace).unwrap();
        let socket = dir.join("run").join("sandboxd.sock");
        let settings = ViewSettings::new(&ViewConfig::default(), 64 << 20, &state, &socket);
        for layout in [TmpfsLayout::Shared, TmpfsLayout::PerPath] {
            let plan = settings.plan(&workspace, Path::new("/bin/sh"));
            let program = prepared_as(plan, layout);
            let words = step_words(&program);
            let position = |wanted: &str| {
                words
                    .iter()
                    .position(|words| words == wanted)
                    .unwrap_or_else(|| panic!("no step {wanted:?} in {words:#?}"))
            };
            assert_eq!(words[0], "make every mount private /");
            assert!(position("open /bin/sh") < position("make the system read-only /"));
            // The state directory is under /tmp here: its private tmpfs
            // hides it, and the workspace is bound back on a mount point
            // made there.
            let private_tmp = position("mount the private tmpfs on /tmp");
            let mount_point = position(&format!("make a mount point at {}", workspace.display()));
            let bind_back = position(&format!("bind back {}", workspace.display()));
            assert!(private_tmp < mount_point && mount_point < bind_back);
            assert!(!words.contains(&format!("hide {}", state.display())));
            assert!(position("hide /root") < position("make read-only /root"));
            assert_eq!(words.last().unwrap(), "mount /proc");
        }
    }

    /// `plan` prepared with its tmpfs laid out as `layout`, whatever this
    /// daemon would make.
    #[test]
    fn a_hidden_path_inside_a_bound_back_one_is_hidden_again_after_the_bind() {
        let dir = crate::test_dir::TestDir::new("view-hidden-in-bind");
        let tool = dir.0.join("tool");
        std::fs::create_dir_all(tool.join("keys")).unwrap();
        std::fs::write(tool.join("credentials"), "secret").unwrap();
        let view = ViewConfig {
            read_only: vec![tool.clone()],
            hidden: vec![tool.join("credentials"), tool.join("keys")],
            ..ViewConfig::default()
        };
        let settings = ViewSettings::new(
            &view,
            0,
            Path::new("/var/lib/sx"),
            Path::new("/run/sx.sock"),
        );
        for layout in [TmpfsLayout::Shared, TmpfsLayout::PerPath] {
            let plan = settings.plan(Path::new("/w"), Path::new("/bin/sh"));
            let words = step_words(&prepared_as(plan, layout));
            let at = |wanted: String| {
                words
                    .iter()
                    .rposition(|words| *words == wanted)
                    .unwrap_or_else(|| panic!("no step {wanted:?} in {words:#?}"))
            };
            let bind = at(format!("bind back {}", tool.display()));
            assert!(bind < at(format!("hide {}", tool.join("credentials").display())));
            assert!(bind < at(format!("hide {}", tool.join("keys").display())));
        }
    }

    fn prepared_as(mut plan: MountPlan, layout: TmpfsLayout) -> MountProgram {
        plan.tmpfs = layout;
        plan.prepare().unwrap()
    }

    fn step_words(program: &MountProgram) -> Vec<String> {
        program
            .steps()
            .iter()
            .map(|step| format!("{} {}", step.what, step.path.display()))
            .collect()
    }

    #[test]
    fn the_shared_layout_makes_one_tmpfs_and_makes_only_mounts_read_only() {
        let dir = crate::test_dir::TestDir::new("view-layout");
        let state = dir.0.join("state");
        std::fs::create_dir_all(&state).unwrap();
        let settings = ViewSettings::new(&ViewConfig::default(), 64 << 20, &state, &dir.0);
        let plan = settings.plan(&state, Path::new("/bin/sh"));
        let count = |program: &MountProgram, matches: fn(&Call) -> bool| {
            program
                .steps()
                .iter()
                .filter(|step| matches(&step.call))
                .count()
        };
        let new_tmpfs = |call: &Call| match call {
            Call::MakeTmpfs { .. } => true,
            Call::Mount { fstype, .. } => fstype.as_deref() == Some(c"tmpfs"),
            _ => false,
        };
        let shared = prepared_as(plan.clone(), TmpfsLayout::Shared);
        let per_path = prepared_as(plan, TmpfsLayout::PerPath);
        // /root exists on every host the tests run on, /tmp too.
        assert_eq!(count(&shared, new_tmpfs), 1, "{:#?}", step_words(&shared));
        assert!(
            count(&per_path, new_tmpfs) >= 2,
            "{:#?}",
            step_words(&per_path)
        );
        // Every directory of the one tmpfs is attached before it is let go.
        let words = step_words(&shared);
        let let_go = words
            .iter()
            .position(|words| words == "let go of the private tmpfs /")
            .unwrap();
        let last_attach = shared
            .steps()
            .iter()
            .rposition(|step| matches!(step.call, Call::AttachTmpfsDir { .. }))
            .unwrap();
        assert!(last_attach < let_go);
        // A read-only cover is a bind remount: the same tmpfs stays
        // writable on /tmp.
        for program in [&shared, &per_path] {
            for step in program
                .steps()
                .iter()
                .filter(|step| step.what == "make read-only")
            {
                let Call::Mount { flags, .. } = &step.call else {
                    panic!("{step:?}")
                };
                assert_eq!(*flags, READ_ONLY_COVER);
                assert_ne!(flags & libc::MS_BIND, 0);
            }
        }
    }

    /// What a child that built the view finds, as its exit code: 0 when
    /// all is as `layout` says, else the number of the first check that
    /// failed. Allocates nothing (it runs in a fork of a threaded test).
    ///
    /// # Safety
    /// Only in a forked child, in its own mount namespace.
    unsafe fn check_view(layout: TmpfsLayout, in_workspace: &CString) -> i32 {
        let device = |path: &std::ffi::CStr| {
            let mut stat: libc::stat = std::mem::zeroed();
            match libc::stat(path.as_ptr(), &mut stat) {
                0 => Some(stat.st_dev),
                _ => None,
            }
        };
        let (tmp, var_tmp, shm) = (device(c"/tmp"), device(c"/var/tmp"), device(c"/dev/shm"));
        let (Some(tmp), Some(var_tmp), Some(shm)) = (tmp, var_tmp, shm) else {
            return 1;
        };
        let shared = tmp == var_tmp && var_tmp == shm;
        let apart = tmp != var_tmp && var_tmp != shm && tmp != shm;
        match layout {
            TmpfsLayout::Shared if !shared => return 2,
            TmpfsLayout::PerPath if !apart => return 3,
            _ => {}
        }
        let mut fs: libc::statfs = std::mem::zeroed();
        if libc::statfs(c"/tmp".as_ptr(), &mut fs) != 0 || fs.f_type != libc::TMPFS_MAGIC {
            return 4;
        }
        let create = |path: *const libc::c_char| {
            let fd = libc::open(
                path,
                libc::O_CREAT | libc::O_WRONLY | libc::O_CLOEXEC,
                0o600,
            );
            if fd >= 0 {
                libc::close(fd);
            }
            fd >= 0
        };
        if !create(c"/tmp/probe".as_ptr()) || !create(c"/dev/shm/probe".as_ptr()) {
            return 5;
        }
        // Apart even when shared: a directory each.
        if libc::access(c"/var/tmp/probe".as_ptr(), libc::F_OK) == 0 {
            return 6;
        }
        if libc::mkdir(c"/root/probe".as_ptr(), 0o700) == 0
            || std::io::Error::last_os_error().raw_os_error() != Some(libc::EROFS)
        {
            return 7;
        }
        if !create(in_workspace.as_ptr()) {
            return 8;
        }
        0
    }

    #[test]
    fn both_layouts_build_a_view_that_a_process_finds_as_planned() {
        if !nix::unistd::geteuid().is_root() || !Path::new("/root").is_dir() {
            return;
        }
        let dir = crate::test_dir::TestDir::new("view-built");
        let workspace = dir.0.join("state").join("sandboxes").join("sbx-a");
        std::fs::create_dir_all(&workspace).unwrap();
        let settings = ViewSettings::new(
            &ViewConfig::default(),
            64 << 20,
            &dir.0.join("state"),
            &dir.0,
        );
        let in_workspace = c_path(&workspace.join("mine")).unwrap();
        let mut layouts = vec![TmpfsLayout::PerPath];
        if settings.tmpfs_layout() == TmpfsLayout::Shared {
            layouts.push(TmpfsLayout::Shared);
        }
        for layout in layouts {
            let program = prepared_as(settings.plan(&workspace, Path::new("/bin/sh")), layout);
            // SAFETY: the child makes system calls only (the program and
            // the checks allocate nothing) and leaves by _exit.
            let child = unsafe { libc::fork() };
            assert!(child >= 0, "fork: {}", std::io::Error::last_os_error());
            if child == 0 {
                // SAFETY: this is the forked child, in a mount namespace
                // of its own before the program runs.
                unsafe {
                    if libc::unshare(libc::CLONE_NEWNS) != 0 {
                        libc::_exit(100);
                    }
                    if !program.run() {
                        libc::_exit(101);
                    }
                    libc::_exit(check_view(layout, &in_workspace));
                }
            }
            let mut status = 0;
            // SAFETY: waits for the child just forked.
            assert_eq!(unsafe { libc::waitpid(child, &mut status, 0) }, child);
            assert!(
                libc::WIFEXITED(status),
                "{layout:?}: the child ended with {status:#x}"
            );
            assert_eq!(libc::WEXITSTATUS(status), 0, "{layout:?}: check failed");
            assert!(
                workspace.join("mine").exists(),
                "{layout:?}: not the workspace"
            );
            std::fs::remove_file(workspace.join("mine")).unwrap();
        }
    }

    #[test]
    fn mount_points_are_unescaped() {
        let mountinfo = "22 1 8:1 / / rw - ext4 /dev/sda1 rw\n\
                         23 22 0:5 / /mnt/a\\040b rw - tmpfs tmpfs rw\n";
        let points: Vec<PathBuf> = mount_points(mountinfo).collect();
        assert_eq!(points, [PathBuf::from("/"), PathBuf::from("/mnt/a b")]);
    }
}
