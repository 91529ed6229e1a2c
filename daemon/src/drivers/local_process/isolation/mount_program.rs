//! A sandbox's view as a list of system calls, prepared by the daemon and
//! run by the sandbox's first process (its clone child, in the new mount
//! namespace, as root) before the runner starts.
//!
//! Why prepared: that child is a `CLONE_VM` child running on the daemon's
//! memory (see `launch::clone_exec`), so it may not allocate, lock or
//! panic. Every path is a C string made here, every decision that needs a
//! look at the file system (is `/tmp` a directory, is a hidden path a file,
//! which mounts exist for the pre-5.12 fallback) is taken here; the child
//! only issues the calls, in order, and on a failure records which step
//! failed and its errno, which [`MountProgram::failure`] turns back into
//! the step's words and path for the daemon's error.
//!
//! Building the view in the clone child, rather than in an init exec'd for
//! the purpose, keeps the exec of the init (and its start-up) off the
//! caller's time: see BENCHMARKS.md, the private view's rows.

use std::cell::UnsafeCell;
use std::ffi::CString;
use std::io;
use std::path::PathBuf;
use std::sync::atomic::{AtomicI32, AtomicUsize, Ordering};

/// `mount_setattr(2)`'s `struct mount_attr`.
#[repr(C)]
pub struct MountAttr {
    pub attr_set: u64,
    pub attr_clr: u64,
    pub propagation: u64,
    pub userns_fd: u64,
}

pub const MOUNT_ATTR_RDONLY: u64 = 0x1;
pub const MOUNT_ATTR_NOSUID: u64 = 0x2;
pub const MOUNT_ATTR_NODEV: u64 = 0x4;
pub const OPEN_TREE_CLONE: libc::c_uint = 1;
pub const MOVE_MOUNT_F_EMPTY_PATH: libc::c_uint = 0x4;
const FSOPEN_CLOEXEC: libc::c_uint = 0x1;
const FSCONFIG_SET_STRING: libc::c_uint = 1;
const FSCONFIG_CMD_CREATE: libc::c_uint = 6;
const FSMOUNT_CLOEXEC: libc::c_uint = 0x1;

/// Room for `/proc/self/fd/<n>` and its NUL.
const FD_PATH_CAPACITY: usize = 32;
const FD_PATH_PREFIX: &[u8] = b"/proc/self/fd/";

/// One system call (or a small fixed group of them) of the view.
#[derive(Debug)]
pub enum Call {
    /// `mount(2)`; with `missing_is_fine`, `ENOENT` skips it (a path that
    /// is gone, or already out of sight under an earlier mount).
    Mount {
        source: Option<CString>,
        target: CString,
        fstype: Option<CString>,
        flags: libc::c_ulong,
        data: Option<CString>,
        missing_is_fine: bool,
    },
    /// `open(path, O_PATH)` into bind source `slot`, before anything hides
    /// the path.
    OpenSource { path: CString, slot: usize },
    /// `mount_setattr(path, AT_RECURSIVE)`; where the kernel has no such
    /// call (before 5.12) the `fallback` remounts instead, one per mount.
    SetAttr {
        path: CString,
        set: u64,
        clear: u64,
        fallback: Vec<(CString, libc::c_ulong)>,
    },
    /// `mkdir(path, 0755)`, an existing one is fine.
    MakeDir { path: CString },
    /// An empty file at `path` (a mount point for a file), an existing one
    /// is fine.
    MakeFile { path: CString },
    /// A recursive bind of source `slot` (through `/proc/self/fd`) on
    /// `target`, then a remount with `flags`.
    BindSource {
        slot: usize,
        target: CString,
        flags: libc::c_ulong,
    },
    /// The sandbox's one private tmpfs, made detached (`fsopen`,
    /// `fsconfig`, `fsmount`: Linux 5.2), `nosuid,nodev`, with `size`
    /// (the option's value); its root is kept open for the next calls.
    MakeTmpfs { size: CString },
    /// A directory `name` with `mode` made at the private tmpfs's root,
    /// and a copy of it (`open_tree`) attached at `target` (`move_mount`).
    /// With `missing_is_fine`, a `target` gone skips the attach.
    AttachTmpfsDir {
        name: CString,
        mode: libc::mode_t,
        target: CString,
        missing_is_fine: bool,
    },
    /// Closes the private tmpfs's root: only its attached directories are
    /// left of it, in the view.
    CloseTmpfs,
}

/// One step: its call, and how the daemon names it in an error.
#[derive(Debug)]
pub struct Step {
    pub call: Call,
    pub what: &'static str,
    pub path: PathBuf,
}

/// The whole view, ready for the child.
#[derive(Debug)]
pub struct MountProgram {
    steps: Vec<Step>,
    /// `/proc/self/fd/<n>` of each bind source, written by the child once
    /// it has opened them (it alone knows their numbers).
    fd_paths: Vec<UnsafeCell<[u8; FD_PATH_CAPACITY]>>,
    failed_step: AtomicUsize,
    failed_errno: AtomicI32,
    /// The private tmpfs's root while the child builds the view (see
    /// [`Call::MakeTmpfs`]), else -1.
    tmpfs: AtomicI32,
}

// SAFETY: `fd_paths` is written only by the clone child, while the thread
// that owns the program is suspended (CLONE_VFORK), and read by no one
// else; everything else is immutable or atomic.
unsafe impl Sync for MountProgram {}

const NO_FAILURE: usize = usize::MAX;

impl MountProgram {
    /// `steps` in order; `sources` bind sources are opened by them.
    pub fn new(steps: Vec<Step>, sources: usize) -> MountProgram {
        let mut prefix = [0u8; FD_PATH_CAPACITY];
        prefix[..FD_PATH_PREFIX.len()].copy_from_slice(FD_PATH_PREFIX);
        MountProgram {
            steps,
            fd_paths: (0..sources).map(|_| UnsafeCell::new(prefix)).collect(),
            failed_step: AtomicUsize::new(NO_FAILURE),
            failed_errno: AtomicI32::new(0),
            tmpfs: AtomicI32::new(-1),
        }
    }

    #[cfg(test)]
    pub fn steps(&self) -> &[Step] {
        &self.steps
    }

    /// Runs every step, in order; `false` (with the step and errno
    /// recorded) at the first that fails.
    ///
    /// # Safety
    /// Only for a sandbox's clone child, in its new mount namespace: it
    /// changes the mounts of the calling process's namespace and writes
    /// into `self` while its parent thread is suspended.
    pub unsafe fn run(&self) -> bool {
        for (index, step) in self.steps.iter().enumerate() {
            let errno = self.call(&step.call);
            if errno != 0 {
                self.failed_errno.store(errno, Ordering::Release);
                self.failed_step.store(index, Ordering::Release);
                return false;
            }
        }
        true
    }

    /// The failed step's words, path and error, once the child has run.
    pub fn failure(&self) -> Option<(String, io::Error)> {
        let index = self.failed_step.load(Ordering::Acquire);
        let step = self.steps.get(index)?;
        let errno = self.failed_errno.load(Ordering::Acquire);
        Some((
            format!("{} {}", step.what, step.path.display()),
            io::Error::from_raw_os_error(errno),
        ))
    }

    /// One call: 0, or the errno it failed with.
    ///
    /// # Safety
    /// As [`run`](Self::run).
    unsafe fn call(&self, call: &Call) -> i32 {
        match call {
            Call::Mount {
                source,
                target,
                fstype,
                flags,
                data,
                missing_is_fine,
            } => {
                let pointer = |value: &Option<CString>| {
                    value.as_ref().map_or(std::ptr::null(), |c| c.as_ptr())
                };
                if libc::mount(
                    pointer(source),
                    target.as_ptr(),
                    pointer(fstype),
                    *flags,
                    pointer(data).cast(),
                ) == 0
                {
                    return 0;
                }
                match errno() {
                    libc::ENOENT if *missing_is_fine => 0,
                    error => error,
                }
            }
            Call::OpenSource { path, slot } => {
                let fd = libc::open(path.as_ptr(), libc::O_PATH | libc::O_CLOEXEC);
                if fd < 0 {
                    return errno();
                }
                write_fd_path(&mut *self.fd_paths[*slot].get(), fd);
                0
            }
            Call::SetAttr {
                path,
                set,
                clear,
                fallback,
            } => {
                let attr = MountAttr {
                    attr_set: *set,
                    attr_clr: *clear,
                    propagation: 0,
                    userns_fd: 0,
                };
                let result = libc::syscall(
                    libc::SYS_mount_setattr,
                    libc::AT_FDCWD,
                    path.as_ptr(),
                    libc::AT_RECURSIVE,
                    &attr as *const MountAttr,
                    std::mem::size_of::<MountAttr>(),
                );
                match result {
                    0 => 0,
                    _ if errno() == libc::ENOSYS => {
                        for (mount_point, flags) in fallback {
                            let target = mount_point.as_ptr();
                            let null = std::ptr::null();
                            if libc::mount(null, target, null, *flags, null.cast()) < 0 {
                                return errno();
                            }
                        }
                        0
                    }
                    _ => errno(),
                }
            }
            Call::MakeDir { path } => match libc::mkdir(path.as_ptr(), 0o755) {
                0 => 0,
                _ if errno() == libc::EEXIST => 0,
                _ => errno(),
            },
            Call::MakeFile { path } => {
                let flags = libc::O_WRONLY | libc::O_CREAT | libc::O_EXCL | libc::O_CLOEXEC;
                let fd = libc::open(path.as_ptr(), flags, 0o644);
                if fd >= 0 {
                    libc::close(fd);
                    return 0;
                }
                match errno() {
                    libc::EEXIST => 0,
                    error => error,
                }
            }
            Call::BindSource {
                slot,
                target,
                flags,
            } => {
                let source = (*self.fd_paths[*slot].get()).as_ptr().cast();
                let null = std::ptr::null();
                let bind = libc::MS_BIND | libc::MS_REC;
                if libc::mount(source, target.as_ptr(), null, bind, null.cast()) < 0 {
                    return errno();
                }
                if libc::mount(null, target.as_ptr(), null, *flags, null.cast()) < 0 {
                    return errno();
                }
                0
            }
            Call::MakeTmpfs { size } => match make_tmpfs(size) {
                Ok(root) => {
                    self.tmpfs.store(root, Ordering::Relaxed);
                    0
                }
                Err(error) => error,
            },
            Call::AttachTmpfsDir {
                name,
                mode,
                target,
                missing_is_fine,
            } => {
                let root = self.tmpfs.load(Ordering::Relaxed);
                match attach_tmpfs_dir(root, name, *mode, target) {
                    Err(libc::ENOENT) if *missing_is_fine => 0,
                    Err(error) => error,
                    Ok(()) => 0,
                }
            }
            Call::CloseTmpfs => {
                libc::close(self.tmpfs.swap(-1, Ordering::Relaxed));
                0
            }
        }
    }
}

/// A new tmpfs of `size`, detached, `nosuid,nodev`: the descriptor of its
/// root mount, or the errno. Async-signal-safe.
///
/// # Safety
/// System calls only, on C strings that outlive them.
unsafe fn make_tmpfs(size: &std::ffi::CStr) -> Result<libc::c_int, i32> {
    let context = libc::syscall(libc::SYS_fsopen, c"tmpfs".as_ptr(), FSOPEN_CLOEXEC) as libc::c_int;
    if context < 0 {
        return Err(errno());
    }
    let config = |command: libc::c_uint, key: *const libc::c_char, value: *const libc::c_char| {
        libc::syscall(libc::SYS_fsconfig, context, command, key, value, 0)
    };
    let null = std::ptr::null();
    // Named `tmpfs` in mountinfo, as `mount -t tmpfs tmpfs` would be.
    let root = if config(FSCONFIG_SET_STRING, c"source".as_ptr(), c"tmpfs".as_ptr()) < 0
        || config(FSCONFIG_SET_STRING, c"size".as_ptr(), size.as_ptr()) < 0
        || config(FSCONFIG_CMD_CREATE, null, null) < 0
    {
        -1
    } else {
        let attributes = MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV;
        libc::syscall(libc::SYS_fsmount, context, FSMOUNT_CLOEXEC, attributes) as libc::c_int
    };
    let error = errno();
    libc::close(context);
    if root < 0 {
        return Err(error);
    }
    Ok(root)
}

/// `name` made (with exactly `mode`, whatever the umask) at the root of
/// the tmpfs whose root mount is `root`, and attached at `target`.
/// Async-signal-safe.
///
/// # Safety
/// System calls only, on C strings that outlive them.
unsafe fn attach_tmpfs_dir(
    root: libc::c_int,
    name: &CString,
    mode: libc::mode_t,
    target: &CString,
) -> Result<(), i32> {
    if libc::mkdirat(root, name.as_ptr(), mode) < 0
        || libc::fchmodat(root, name.as_ptr(), mode, 0) < 0
    {
        return Err(errno());
    }
    let flags = OPEN_TREE_CLONE | libc::O_CLOEXEC as libc::c_uint;
    let tree = libc::syscall(libc::SYS_open_tree, root, name.as_ptr(), flags) as libc::c_int;
    if tree < 0 {
        return Err(errno());
    }
    let moved = libc::syscall(
        libc::SYS_move_mount,
        tree,
        c"".as_ptr(),
        libc::AT_FDCWD,
        target.as_ptr(),
        MOVE_MOUNT_F_EMPTY_PATH,
    );
    let error = errno();
    libc::close(tree);
    if moved < 0 {
        return Err(error);
    }
    Ok(())
}

/// Appends `fd`'s decimal digits and a NUL to the `/proc/self/fd/` prefix.
fn write_fd_path(buffer: &mut [u8; FD_PATH_CAPACITY], fd: libc::c_int) {
    write_decimal(&mut buffer[FD_PATH_PREFIX.len()..], fd.unsigned_abs());
}

/// `value` in decimal and a NUL at the start of `buffer`, without
/// allocating (for clone children); cut short if `buffer` is too small.
pub fn write_decimal(buffer: &mut [u8], value: u32) {
    let mut digits = [0u8; 10];
    let mut len = 0;
    let mut rest = value;
    loop {
        digits[len] = b'0' + (rest % 10) as u8;
        len += 1;
        rest /= 10;
        if rest == 0 {
            break;
        }
    }
    let fit = len.min(buffer.len().saturating_sub(1));
    for (slot, digit) in buffer.iter_mut().zip(digits[..len].iter().rev().take(fit)) {
        *slot = *digit;
    }
    if let Some(end) = buffer.get_mut(fit) {
        *end = 0;
    }
}

fn errno() -> i32 {
    io::Error::last_os_error()
        .raw_os_error()
        .unwrap_or(libc::EIO)
}

/// Whether this daemon can make a detached tmpfs (`fsopen(2)` and
/// `fsmount(2)`, Linux 5.2, allowed by any seccomp filter it runs under):
/// tried for real (at the daemon's start, see `mounts::TmpfsLayout`).
/// Without it each private directory of a view is a tmpfs of its own.
pub fn can_make_detached_tmpfs() -> bool {
    // SAFETY: a C string of the size asked; the descriptor returned is
    // closed here.
    match unsafe { make_tmpfs(c"1m") } {
        Ok(root) => {
            // SAFETY: the descriptor just made, owned here.
            unsafe { libc::close(root) };
            true
        }
        Err(error) => {
            tracing::info!(error = %io::Error::from_raw_os_error(error), "cannot make a detached tmpfs (fsopen, fsmount): each private directory of a view is a tmpfs of its own");
            false
        }
    }
}

/// Whether this kernel has `mount_setattr(2)` (Linux 5.12): asked once
/// with an invalid descriptor, which it refuses with `EBADF` (or `EINVAL`)
/// when it has the call and `ENOSYS` when it does not.
pub fn kernel_has_mount_setattr() -> bool {
    static HAS: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *HAS.get_or_init(|| {
        // SAFETY: an invalid descriptor and null pointers: the kernel
        // refuses the call before reading anything.
        let result = unsafe {
            libc::syscall(
                libc::SYS_mount_setattr,
                -1,
                std::ptr::null::<libc::c_char>(),
                0,
                std::ptr::null::<MountAttr>(),
                0,
            )
        };
        !(result < 0 && errno() == libc::ENOSYS)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fd_paths_are_written_without_allocating() {
        let program = MountProgram::new(Vec::new(), 1);
        for fd in [0, 7, 42, 1_048_575] {
            // SAFETY: this test is the only user of the program.
            let buffer = unsafe { &mut *program.fd_paths[0].get() };
            write_fd_path(buffer, fd);
            let text = std::ffi::CStr::from_bytes_until_nul(buffer).unwrap();
            assert_eq!(text.to_str().unwrap(), format!("/proc/self/fd/{fd}"));
        }
    }

    #[test]
    fn a_failed_step_is_named_with_its_path_and_errno() {
        let steps = vec![Step {
            call: Call::MakeDir {
                path: CString::new("/nonexistent-parent-of-sandboxd-test/child").unwrap(),
            },
            what: "make a mount point at",
            path: "/nonexistent-parent-of-sandboxd-test/child".into(),
        }];
        let program = MountProgram::new(steps, 0);
        // SAFETY: mkdir of a path under a missing directory changes nothing.
        assert!(!unsafe { program.run() });
        let (step, error) = program.failure().unwrap();
        assert_eq!(
            step,
            "make a mount point at /nonexistent-parent-of-sandboxd-test/child"
        );
        assert_eq!(error.raw_os_error(), Some(libc::ENOENT));
    }

    #[test]
    fn a_root_daemon_on_linux_5_2_or_later_makes_a_detached_tmpfs() {
        let release = nix::sys::utsname::uname().unwrap();
        let release = release.release().to_string_lossy().into_owned();
        let mut numbers = release
            .split(['.', '-'])
            .map(|part| part.parse::<u32>().unwrap_or(0));
        let version = (numbers.next().unwrap_or(0), numbers.next().unwrap_or(0));
        if nix::unistd::geteuid().is_root() && version >= (5, 2) {
            assert!(can_make_detached_tmpfs(), "Linux {release}, as root");
        }
    }

    #[test]
    fn this_kernel_is_asked_once_for_mount_setattr() {
        // Linux 6.18 here; a kernel before 5.12 says no.
        let first = kernel_has_mount_setattr();
        assert_eq!(kernel_has_mount_setattr(), first);
    }
}
