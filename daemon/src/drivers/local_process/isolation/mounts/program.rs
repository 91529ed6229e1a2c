//! How a sandbox's [`MountPlan`] is written down as the system calls
//! that build it (a [`MountProgram`], which its clone child runs), in the
//! order the module docs of `mounts` give, each step named for its error.

use std::ffi::CString;
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use super::super::mount_program::{
    kernel_has_mount_setattr, Call, MountProgram, Step, MOUNT_ATTR_RDONLY,
};
use super::{MountError, MountPlan, TmpfsLayout, PRIVATE_TMP, READ_ONLY_COVER};

impl MountPlan {
    /// The view as the system calls that build it (see
    /// [`MountProgram`]), for a sandbox's clone child to run in its new
    /// mount namespace, as root, before the runner starts; `/proc` of the
    /// sandbox's PID namespace last. Looks at the host's file system for
    /// what exists (the child's namespace starts as its copy).
    pub fn prepare(&self) -> Result<MountProgram, MountError> {
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
        // Each path covered so far, and whether it stays writable.
        let mut covers: Vec<(&Path, bool)> = Vec::new();
        let mut tmpfs_dirs = 0;
        self.private_tmp(&mut steps, &mut covers, &mut tmpfs_dirs)?;
        self.hide(&mut steps, &mut covers, &mut tmpfs_dirs)?;
        if self.tmpfs == TmpfsLayout::Shared {
            steps.push("let go of the private tmpfs", root, Call::CloseTmpfs);
        }
        self.bind_back(&mut steps, &covers)?;
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

    /// Step 4: the private tmpfs on each of [`PRIVATE_TMP`] there is, a
    /// fresh mqueue, and the view's own devpts.
    fn private_tmp(
        &self,
        steps: &mut Steps,
        covers: &mut Vec<(&Path, bool)>,
        tmpfs_dirs: &mut usize,
    ) -> Result<(), MountError> {
        let layout = self.tmpfs;
        if layout == TmpfsLayout::Shared {
            let size = CString::new(self.tmp_size.to_string()).unwrap_or_default();
            steps.push(
                "make the private tmpfs",
                Path::new("/"),
                Call::MakeTmpfs { size },
            );
        }
        let size = format!("size={},mode=1777", self.tmp_size);
        for tmp in PRIVATE_TMP
            .iter()
            .map(Path::new)
            .filter(|path| path.is_dir())
        {
            match layout {
                TmpfsLayout::Shared => {
                    steps.attach_tmpfs_dir("mount the private tmpfs on", tmp, tmpfs_dirs, 0o1777)?
                }
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
        Ok(())
    }

    /// Step 5: the hidden paths, an empty directory over a directory and
    /// `/dev/null` over a file.
    fn hide<'a>(
        &'a self,
        steps: &mut Steps,
        covers: &mut Vec<(&'a Path, bool)>,
        tmpfs_dirs: &mut usize,
    ) -> Result<(), MountError> {
        for path in &self.hidden {
            // Gone, or already out of sight under a private tmpfs: nothing
            // to hide (and a mount there would fail with ENOENT).
            if covers.iter().any(|(cover, _)| path.starts_with(cover)) {
                continue;
            }
            match std::fs::symlink_metadata(path) {
                Err(_) => {}
                Ok(meta) if meta.is_dir() => {
                    match self.tmpfs {
                        TmpfsLayout::Shared => {
                            steps.attach_tmpfs_dir("hide", path, tmpfs_dirs, 0o755)?;
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
        Ok(())
    }

    /// Step 6: the binds back, each on a mount point made inside the
    /// directory that covers it.
    fn bind_back(&self, steps: &mut Steps, covers: &[(&Path, bool)]) -> Result<(), MountError> {
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
        Ok(())
    }

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

pub(super) fn c_path(path: &Path) -> io::Result<CString> {
    CString::new(path.as_os_str().as_bytes())
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "a NUL byte in the path"))
}

/// The mount points (field 5) of a `/proc/self/mountinfo`, unescaped
/// (the kernel writes space, tab, newline and backslash as `\ooo`).
pub(super) fn mount_points(mountinfo: &str) -> impl Iterator<Item = PathBuf> + '_ {
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
