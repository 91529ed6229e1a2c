//! The disk limit enforced by the file system: a project quota per
//! workspace (ext4 made with `-O quota,project` and mounted `prjquota`, or
//! XFS mounted `prjquota`).
//!
//! The workspace directory gets a project id — the sandbox's uid, which no
//! other daemon on the host hands out (see `users/uid_claims.rs`), so two
//! daemons never share a project — and `FS_XFLAG_PROJINHERIT`, so all that
//! is created inside inherits it; the project gets a hard block limit
//! (`Q_SETQUOTA`). A write past it fails with `EDQUOT` in the runner, which
//! keeps running. Both calls go through descriptors (`FS_IOC_FSSETXATTR`,
//! `quotactl_fd` of Linux 5.14), so the block device is never looked up.
//! Every call here is blocking.

use std::fs::File;
use std::os::fd::AsRawFd;
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;

/// `PRJQUOTA` of `<linux/quota.h>`.
const PRJQUOTA: u32 = 2;
/// `Q_SETQUOTA` of `<linux/quota.h>`.
const Q_SETQUOTA: u32 = 0x80_0008;
/// `Q_XGETQSTATV` of `<linux/dqblk_xfs.h>`: `XQM_CMD(8)`.
const Q_XGETQSTATV: u32 = ((b'X' as u32) << 8) + 8;
/// `FS_QUOTA_PDQ_ACCT` and `FS_QUOTA_PDQ_ENFD`: project usage is counted
/// and its limits enforced.
const PROJECT_ACCOUNTED: u16 = 1 << 4;
const PROJECT_ENFORCED: u16 = 1 << 5;
/// Quota block limits are in units of 1 KiB (`QIF_DQBLKSIZE`).
const QUOTA_BLOCK: u64 = 1024;
/// `FS_XFLAG_PROJINHERIT` of `<linux/fs.h>`.
const FS_XFLAG_PROJINHERIT: u32 = 0x200;

/// `struct fsxattr` of `<linux/fs.h>`.
#[repr(C)]
#[derive(Debug, Default, Clone, Copy)]
struct FsXattr {
    xflags: u32,
    extsize: u32,
    nextents: u32,
    projid: u32,
    cowextsize: u32,
    pad: [u8; 8],
}

/// `_IOR('X', 31, struct fsxattr)` and `_IOW('X', 32, struct fsxattr)`.
const FS_IOC_FSGETXATTR: libc::c_ulong = ioc(2, 31);
const FS_IOC_FSSETXATTR: libc::c_ulong = ioc(1, 32);

const fn ioc(direction: libc::c_ulong, number: libc::c_ulong) -> libc::c_ulong {
    (direction << 30)
        | ((std::mem::size_of::<FsXattr>() as libc::c_ulong) << 16)
        | ((b'X' as libc::c_ulong) << 8)
        | number
}

/// `struct fs_qfilestatv` of `<linux/dqblk_xfs.h>`.
#[repr(C)]
#[derive(Default)]
struct QuotaFileStat {
    ino: u64,
    blocks: u64,
    extents: u32,
    pad: u32,
}

/// `struct fs_quota_statv` of `<linux/dqblk_xfs.h>`, version 1.
#[repr(C)]
#[derive(Default)]
struct QuotaStat {
    version: i8,
    pad1: u8,
    flags: u16,
    incore_dquots: u32,
    user: QuotaFileStat,
    group: QuotaFileStat,
    project: QuotaFileStat,
    block_time_limit: i32,
    inode_time_limit: i32,
    rt_block_time_limit: i32,
    block_warn_limit: u16,
    inode_warn_limit: u16,
    rt_block_warn_limit: u16,
    pad3: u16,
    pad4: u32,
    pad2: [u64; 7],
}

/// `QCMD(command, PRJQUOTA)`.
fn project_command(command: u32) -> libc::c_uint {
    (command << 8) | PRJQUOTA
}

/// `quotactl_fd(fd, QCMD(command, PRJQUOTA), id, data)`.
fn quotactl_fd<T>(dir: &File, command: u32, id: u32, data: &mut T) -> std::io::Result<()> {
    // SAFETY: `dir` is an open descriptor and `data` points to a live
    // value of the type the command reads or writes.
    let result = unsafe {
        libc::syscall(
            libc::SYS_quotactl_fd,
            dir.as_raw_fd() as libc::c_uint,
            project_command(command),
            id,
            std::ptr::from_mut(data),
        )
    };
    if result < 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

fn open_dir(path: &Path) -> std::io::Result<File> {
    std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_DIRECTORY | libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(path)
}

/// `Ok` when the file system of `dir` counts project usage and enforces
/// project limits; else why not, for `status`.
pub fn enforced_on(dir: &Path) -> Result<(), String> {
    let handle =
        open_dir(dir).map_err(|error| format!("cannot open {}: {error}", dir.display()))?;
    let mut stat = QuotaStat {
        version: 1,
        ..QuotaStat::default()
    };
    match quotactl_fd(&handle, Q_XGETQSTATV, 0, &mut stat) {
        Ok(()) => {}
        Err(error) if error.raw_os_error() == Some(libc::ENOSYS) => {
            return Err("this kernel has no quota support (quotactl_fd: ENOSYS)".to_string())
        }
        Err(error) => {
            return Err(format!(
                "the file system of {} reports no quotas ({error})",
                dir.display()
            ))
        }
    }
    let wanted = PROJECT_ACCOUNTED | PROJECT_ENFORCED;
    if stat.flags & wanted != wanted {
        return Err(format!(
            "project quotas are not enforced on the file system of {} (ext4 needs -O quota,project and the prjquota mount option, XFS prjquota)",
            dir.display()
        ));
    }
    Ok(())
}

/// Gives `workspace` (and, when it had another project, everything in it)
/// the project `project`, inherited by what is created inside, and limits
/// the project to `limit` bytes. Before the runner starts.
pub fn apply(workspace: &Path, project: u32, limit: u64) -> std::io::Result<()> {
    let dir = open_dir(workspace)?;
    set_limit(&dir, project, limit)?;
    if set_project(&dir, project, true)? {
        // Files made before (a workspace older than the limit) keep their
        // project otherwise, and would not count.
        give_tree_to(workspace, project);
    }
    Ok(())
}

/// Lifts the limit of `project` (its workspace is gone). `dir`: any
/// directory on the file system (the sandboxes' directory).
pub fn clear(dir: &Path, project: u32) -> std::io::Result<()> {
    set_limit(&open_dir(dir)?, project, 0)
}

fn set_limit(on: &File, project: u32, limit: u64) -> std::io::Result<()> {
    let blocks = limit.div_ceil(QUOTA_BLOCK);
    // SAFETY: `dqblk` is plain integers; all zeros is a valid value.
    let mut quota: libc::dqblk = unsafe { std::mem::zeroed() };
    quota.dqb_bhardlimit = blocks;
    quota.dqb_bsoftlimit = blocks;
    quota.dqb_valid = libc::QIF_BLIMITS;
    quotactl_fd(on, Q_SETQUOTA, project, &mut quota)
}

/// Sets the project of the open file (and `PROJINHERIT` on a directory);
/// true when it had another.
fn set_project(file: &File, project: u32, directory: bool) -> std::io::Result<bool> {
    let mut attributes = FsXattr::default();
    // SAFETY: the ioctl writes one `struct fsxattr` into `attributes`.
    if unsafe { libc::ioctl(file.as_raw_fd(), FS_IOC_FSGETXATTR, &mut attributes) } < 0 {
        return Err(std::io::Error::last_os_error());
    }
    let inherits = !directory || attributes.xflags & FS_XFLAG_PROJINHERIT != 0;
    if attributes.projid == project && inherits {
        return Ok(false);
    }
    let changed = attributes.projid != project;
    attributes.projid = project;
    if directory {
        attributes.xflags |= FS_XFLAG_PROJINHERIT;
    }
    // SAFETY: the ioctl reads one `struct fsxattr` from `attributes`.
    if unsafe { libc::ioctl(file.as_raw_fd(), FS_IOC_FSSETXATTR, &attributes) } < 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(changed)
}

/// Sets the project of every file and directory under `root` (symbolic
/// links cannot be opened, and are left; they take next to nothing).
fn give_tree_to(root: &Path, project: u32) {
    let mut pending = vec![root.to_path_buf()];
    while let Some(dir) = pending.pop() {
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        for entry in entries.flatten() {
            let Ok(kind) = entry.file_type() else {
                continue;
            };
            let path = entry.path();
            let opened = if kind.is_dir() {
                open_dir(&path)
            } else if kind.is_file() {
                std::fs::OpenOptions::new()
                    .read(true)
                    .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC | libc::O_NONBLOCK)
                    .open(&path)
            } else {
                continue;
            };
            let Ok(file) = opened else { continue };
            if let Err(error) = set_project(&file, project, kind.is_dir()) {
                tracing::debug!(path = %path.display(), %error, "cannot set a file's project");
            }
            if kind.is_dir() {
                pending.push(path);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_kernel_structures_have_their_c_sizes_and_the_ioctls_their_numbers() {
        assert_eq!(std::mem::size_of::<FsXattr>(), 28);
        assert_eq!(std::mem::size_of::<QuotaStat>(), 160);
        assert_eq!(FS_IOC_FSGETXATTR, 0x801c_581f);
        assert_eq!(FS_IOC_FSSETXATTR, 0x401c_5820);
        assert_eq!(project_command(Q_SETQUOTA), 0x8000_0802);
        assert_eq!(project_command(Q_XGETQSTATV), 0x0058_0802);
    }

    #[test]
    fn a_file_system_without_enforced_project_quotas_is_named_as_such() {
        // /proc has no quotas on any kernel.
        let problem = enforced_on(Path::new("/proc")).unwrap_err();
        assert!(
            problem.contains("no quota") || problem.contains("not enforced"),
            "{problem}"
        );
    }
}
