//! Where the stand-in's "kubelet" runs an exec's argv: NOT a container,
//! a local process of the test, but one that sees the pod's workspace
//! where a runner container sees it, and can write nowhere else on the
//! host. Before the program runs, the child (the tests run as root):
//!
//! - enters a private mount namespace (nothing it mounts is seen outside,
//!   and everything goes when its last process ends);
//! - builds a root on a tmpfs mounted over `<exec dir>/.kubelet-root`:
//!   every directory at the host's `/` bound there read-only (recursively:
//!   mounts below them keep their own flags, `/proc` and `/dev` work),
//!   the host's top-level symlinks (`/bin -> usr/bin`) made again, `/tmp`
//!   a fresh tmpfs, and the pod's workspace — `<exec dir>/<pod>`, a
//!   directory of the test — bound read-write at `/workspace`;
//! - `chroot`s there and starts in `/workspace`, the runner container's
//!   working directory.
//!
//! So a command, or a `tar` the daemon runs through pods/exec, writes only
//! in the test's directory (or a tmpfs that dies with it), whatever paths
//! it is given. It keeps the test's uid, its pid namespace (a pid it says
//! is one `kill` reaches), network and environment: it is no isolation
//! boundary, only a fence for writes.

use std::ffi::CString;
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

/// A top-level entry of the host's `/`, made again in the new root.
enum Top {
    /// A directory: bound read-only at the same name.
    Dir { host: CString, inside: CString },
    /// A symbolic link: made again with the same target.
    Link { target: CString, inside: CString },
}

/// Everything the child needs, made before the fork: after it, only
/// system calls on these strings run (no allocation).
pub struct Fence {
    root: CString,
    tops: Vec<Top>,
    tmp: CString,
    workspace: CString,
    inside_workspace: CString,
}

/// The workspace of `pod` under the stand-in's exec directory.
pub fn workspace_of(exec_dir: &Path, pod: &str) -> PathBuf {
    exec_dir.join(pod)
}

fn c_path(path: &Path) -> io::Result<CString> {
    CString::new(path.as_os_str().as_bytes())
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "a NUL in a path"))
}

impl Fence {
    /// Prepares the fence of `pod`'s execs: its workspace and the new
    /// root's mount point are made in `exec_dir` (the test's directory).
    pub fn prepare(exec_dir: &Path, pod: &str) -> io::Result<Fence> {
        let workspace = workspace_of(exec_dir, pod);
        std::fs::create_dir_all(&workspace)?;
        let root = exec_dir.join(".kubelet-root");
        std::fs::create_dir_all(&root)?;
        let mut tops = Vec::new();
        for entry in std::fs::read_dir("/")? {
            let entry = entry?;
            let name = entry.file_name();
            if name == "tmp" || name == "workspace" {
                continue;
            }
            let kind = entry.file_type()?;
            let inside = c_path(&root.join(&name))?;
            if kind.is_symlink() {
                let target = std::fs::read_link(entry.path())?;
                tops.push(Top::Link {
                    target: c_path(&target)?,
                    inside,
                });
            } else if kind.is_dir() {
                tops.push(Top::Dir {
                    host: c_path(&entry.path())?,
                    inside,
                });
            }
        }
        Ok(Fence {
            tmp: c_path(&root.join("tmp"))?,
            inside_workspace: c_path(&root.join("workspace"))?,
            root: c_path(&root)?,
            tops,
            workspace: c_path(&workspace)?,
        })
    }

    /// Puts the calling process behind the fence (see the module doc).
    /// Runs in the child between fork and exec: system calls only.
    pub fn enter(&self) -> io::Result<()> {
        let none = std::ptr::null::<libc::c_char>();
        // SAFETY: every pointer is a NUL-terminated string of `self` (or
        // null where the call allows it), alive for the whole call; these
        // calls only change the child's own mount namespace and root.
        unsafe {
            check(libc::unshare(libc::CLONE_NEWNS))?;
            let slash = c"/".as_ptr();
            check(libc::mount(
                none,
                slash,
                none,
                libc::MS_REC | libc::MS_PRIVATE,
                std::ptr::null(),
            ))?;
            let tmpfs = c"tmpfs".as_ptr();
            check(libc::mount(
                tmpfs,
                self.root.as_ptr(),
                tmpfs,
                0,
                std::ptr::null(),
            ))?;
            for top in &self.tops {
                match top {
                    Top::Dir { host, inside } => {
                        check(libc::mkdir(inside.as_ptr(), 0o755))?;
                        let bind = libc::MS_BIND | libc::MS_REC;
                        check(libc::mount(
                            host.as_ptr(),
                            inside.as_ptr(),
                            none,
                            bind,
                            std::ptr::null(),
                        ))?;
                        let read_only = libc::MS_BIND | libc::MS_REMOUNT | libc::MS_RDONLY;
                        let kept = kept_flags(inside)?;
                        check(libc::mount(
                            none,
                            inside.as_ptr(),
                            none,
                            read_only | kept,
                            std::ptr::null(),
                        ))?;
                    }
                    Top::Link { target, inside } => {
                        check(libc::symlink(target.as_ptr(), inside.as_ptr()))?;
                    }
                }
            }
            check(libc::mkdir(self.tmp.as_ptr(), 0o1777))?;
            check(libc::mount(
                tmpfs,
                self.tmp.as_ptr(),
                tmpfs,
                0,
                std::ptr::null(),
            ))?;
            check(libc::mkdir(self.inside_workspace.as_ptr(), 0o755))?;
            let bind = libc::MS_BIND;
            check(libc::mount(
                self.workspace.as_ptr(),
                self.inside_workspace.as_ptr(),
                none,
                bind,
                std::ptr::null(),
            ))?;
            check(libc::chroot(self.root.as_ptr()))?;
            check(libc::chdir(c"/workspace".as_ptr()))?;
        }
        Ok(())
    }
}

/// The flags of the mount at `path` a read-only remount must keep (one
/// that drops them is refused where they are locked).
///
/// # Safety
/// Between fork and exec: a system call on `path` only.
unsafe fn kept_flags(path: &CString) -> io::Result<libc::c_ulong> {
    // SAFETY: `statvfs` is plain old data, zero is a valid value of it.
    let mut stat: libc::statvfs = unsafe { std::mem::zeroed() };
    // SAFETY: `path` is NUL-terminated and `stat` is ours to write.
    check(unsafe { libc::statvfs(path.as_ptr(), &mut stat) })?;
    let pairs = [
        (libc::ST_NOSUID, libc::MS_NOSUID),
        (libc::ST_NODEV, libc::MS_NODEV),
        (libc::ST_NOEXEC, libc::MS_NOEXEC),
        (libc::ST_NOATIME, libc::MS_NOATIME),
        (libc::ST_NODIRATIME, libc::MS_NODIRATIME),
        (libc::ST_RELATIME, libc::MS_RELATIME),
    ];
    Ok(pairs
        .iter()
        .filter(|(st, _)| stat.f_flag & st == *st)
        .fold(0, |flags, (_, ms)| flags | ms))
}

fn check(result: libc::c_int) -> io::Result<()> {
    match result {
        -1 => Err(io::Error::last_os_error()),
        _ => Ok(()),
    }
}
