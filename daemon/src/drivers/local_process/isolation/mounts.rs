//! A sandbox's own view of the file system, in the shape of systemd's
//! `PrivateTmp=` + `ProtectSystem=strict` + `ProtectHome=`: everything the
//! host has, read-only; private size-bounded tmpfs on `/tmp`, `/var/tmp`
//! and `/dev/shm` (and a fresh `/dev/mqueue`); `/root`, `/home`,
//! `/run/user`, the daemon's state and socket directories hidden — so no
//! other sandbox's workspace is in sight — and the sandbox's own workspace
//! bound back, writable, at the very path `WORKSPACE_ROOT_DIR` names.
//!
//! [`ViewSettings`] is built once from the config; [`MountPlan`] is one
//! sandbox's, made by the daemon (serialisable, unit-testable without
//! root) and applied by the sandbox's init ([`MountPlan::apply`]) in its
//! new mount namespace, as root, before the runner starts. Init is an
//! ordinary process, not the clone child, so it may allocate.
//!
//! Order of [`MountPlan::apply`], each step named in its error:
//! 1. every mount a slave (`MS_REC|MS_SLAVE`): nothing propagates back;
//! 2. an `O_PATH` descriptor of each path to bind back (the workspace, the
//!    runner program, `[view]` paths), opened before anything hides them;
//! 3. the whole tree read-only (`mount_setattr(AT_RECURSIVE)`, Linux 5.12;
//!    else a remount of each mount in `/proc/self/mountinfo`), `/dev`
//!    writable again (device nodes; `/dev/shm` gets its own tmpfs);
//! 4. the private tmpfs mounts (`nosuid,nodev`; their pages are charged to
//!    the memory cgroup of whoever writes them — the sandbox — and freed
//!    when the namespace, its last user gone, is torn down);
//! 5. the hidden paths: an empty tmpfs over a directory, `/dev/null` over a
//!    file;
//! 6. the binds back, on mount points made inside the tmpfs that covers
//!    them, then each hiding tmpfs remounted read-only.

use std::ffi::CString;
use std::fs::File;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::config::ViewConfig;

/// The private tmpfs mounts every sandbox gets (those that exist here).
const PRIVATE_TMP: [&str; 3] = ["/tmp", "/var/tmp", "/dev/shm"];
/// Hidden in every sandbox (with the state and socket directories).
const DEFAULT_HIDDEN: [&str; 3] = ["/root", "/home", "/run/user"];
/// Directories too shared to hide whole for the socket: the socket itself
/// is hidden instead.
const SHARED_DIRS: [&str; 5] = ["/", "/run", "/var/run", "/tmp", "/var/tmp"];

/// The view every sandbox started now gets, from the config.
#[derive(Debug, Clone, PartialEq)]
pub struct ViewSettings {
    hidden: Vec<PathBuf>,
    read_only: Vec<PathBuf>,
    read_write: Vec<PathBuf>,
    tmp_size: u64,
}

/// One path bound back into the view.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Bind {
    pub path: PathBuf,
    pub writable: bool,
}

/// One sandbox's view, made by the daemon and applied by its init.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MountPlan {
    /// Bytes each private tmpfs may hold.
    pub tmp_size: u64,
    /// Covered by an empty read-only tmpfs (a directory) or `/dev/null`.
    pub hidden: Vec<PathBuf>,
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
        let mut hidden: Vec<PathBuf> = DEFAULT_HIDDEN.iter().map(PathBuf::from).collect();
        hidden.push(state_dir.to_path_buf());
        match socket.parent() {
            Some(dir) if !SHARED_DIRS.iter().any(|shared| dir == Path::new(shared)) => {
                hidden.push(dir.to_path_buf())
            }
            _ => hidden.push(socket.to_path_buf()),
        }
        hidden.extend(view.hidden.iter().cloned());
        hidden.sort();
        hidden.dedup();
        ViewSettings {
            hidden,
            read_only: view.read_only.clone(),
            read_write: view.read_write.clone(),
            tmp_size: view.tmp_size(memory_limit),
        }
    }

    /// The paths hidden from every sandbox, for `status`.
    pub fn hidden(&self) -> &[PathBuf] {
        &self.hidden
    }

    pub fn tmp_size(&self) -> u64 {
        self.tmp_size
    }

    /// The plan of a sandbox whose workspace is `workspace` and whose
    /// runner is `program`: both always in its view, the workspace writable.
    pub fn plan(&self, workspace: &Path, program: &Path) -> MountPlan {
        let mut binds = vec![Bind {
            path: program.to_path_buf(),
            writable: false,
        }];
        binds.extend(self.read_only.iter().map(|path| Bind {
            path: path.clone(),
            writable: false,
        }));
        binds.extend(self.read_write.iter().map(|path| Bind {
            path: path.clone(),
            writable: true,
        }));
        binds.push(Bind {
            path: workspace.to_path_buf(),
            writable: true,
        });
        MountPlan {
            tmp_size: self.tmp_size,
            hidden: self.hidden.clone(),
            binds,
        }
    }
}

impl MountPlan {
    /// Builds the view in this process's (new) mount namespace. For a
    /// sandbox's init only, as root, before the runner starts.
    pub fn apply(&self) -> Result<(), MountError> {
        let root = Path::new("/");
        mount(None, root, None, libc::MS_REC | libc::MS_SLAVE, None)
            .map_err(fails("make every mount a slave", root))?;
        let sources = self
            .binds
            .iter()
            .map(|bind| open_path(&bind.path).map_err(fails("open", &bind.path)))
            .collect::<Result<Vec<OwnedFd>, MountError>>()?;
        make_read_only(root).map_err(fails("make the system read-only", root))?;
        let dev = Path::new("/dev");
        set_writable(dev).map_err(fails("make writable", dev))?;
        let mut covers: Vec<(&Path, bool)> = Vec::new();
        let size = format!("size={},mode=1777", self.tmp_size);
        for tmp in PRIVATE_TMP
            .iter()
            .map(Path::new)
            .filter(|path| path.is_dir())
        {
            mount(
                Some("tmpfs"),
                tmp,
                Some("tmpfs"),
                libc::MS_NOSUID | libc::MS_NODEV,
                Some(&size),
            )
            .map_err(fails("mount a private tmpfs on", tmp))?;
            covers.push((tmp, true));
        }
        let mqueue = Path::new("/dev/mqueue");
        if mqueue.is_dir() {
            let flags = libc::MS_NOSUID | libc::MS_NODEV | libc::MS_NOEXEC;
            mount(Some("mqueue"), mqueue, Some("mqueue"), flags, None)
                .map_err(fails("mount a fresh mqueue on", mqueue))?;
        }
        for path in &self.hidden {
            match std::fs::symlink_metadata(path) {
                // Gone, or already out of sight under a private tmpfs.
                Err(_) => {}
                Ok(meta) if meta.is_dir() => {
                    let flags = libc::MS_NOSUID | libc::MS_NODEV | libc::MS_NOEXEC;
                    mount(Some("tmpfs"), path, Some("tmpfs"), flags, Some("mode=0755"))
                        .map_err(fails("hide", path))?;
                    covers.push((path, false));
                }
                Ok(_) => bind(Path::new("/dev/null"), path, false).map_err(fails("hide", path))?,
            }
        }
        for (bind_back, source) in self.binds.iter().zip(&sources) {
            let path = &bind_back.path;
            if covers.iter().any(|(cover, _)| path.starts_with(cover)) {
                make_mount_point(path, source).map_err(fails("make a mount point at", path))?;
            }
            bind(&fd_path(source), path, bind_back.writable).map_err(fails("bind back", path))?;
        }
        for (cover, _) in covers.iter().filter(|(_, writable)| !writable) {
            let flags = libc::MS_REMOUNT
                | libc::MS_RDONLY
                | libc::MS_NOSUID
                | libc::MS_NODEV
                | libc::MS_NOEXEC;
            mount(None, cover, None, flags, Some("mode=0755"))
                .map_err(fails("make read-only", cover))?;
        }
        Ok(())
    }
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

/// `mount(2)`.
fn mount(
    source: Option<&str>,
    target: &Path,
    fstype: Option<&str>,
    flags: libc::c_ulong,
    data: Option<&str>,
) -> io::Result<()> {
    let text = |value: Option<&str>| value.map(|text| CString::new(text).unwrap_or_default());
    let (source, fstype, data) = (text(source), text(fstype), text(data));
    let target = c_path(target)?;
    let pointer = |value: &Option<CString>| value.as_ref().map_or(std::ptr::null(), |c| c.as_ptr());
    // SAFETY: every pointer is a live C string or null, as mount(2) allows.
    let result = unsafe {
        libc::mount(
            pointer(&source),
            target.as_ptr(),
            pointer(&fstype),
            flags,
            pointer(&data).cast(),
        )
    };
    if result < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// A bind mount of `source` on `target`, then its flags: read-only unless
/// `writable`; `nosuid,nodev` always.
fn bind(source: &Path, target: &Path, writable: bool) -> io::Result<()> {
    mount(
        Some(&source.to_string_lossy()),
        target,
        None,
        libc::MS_BIND | libc::MS_REC,
        None,
    )?;
    let mut flags = libc::MS_BIND | libc::MS_REMOUNT | libc::MS_NOSUID | libc::MS_NODEV;
    if !writable {
        flags |= libc::MS_RDONLY;
    }
    mount(None, target, None, flags, None)
}

fn open_path(path: &Path) -> io::Result<OwnedFd> {
    let c = c_path(path)?;
    // SAFETY: a live C string; O_PATH opens nothing but the name.
    let fd = unsafe { libc::open(c.as_ptr(), libc::O_PATH | libc::O_CLOEXEC) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: a descriptor open just returned, owned by no one else.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// The descriptor's path in `/proc`, which mount(2) follows to the object
/// itself even once its own path is hidden.
fn fd_path(fd: &OwnedFd) -> PathBuf {
    PathBuf::from(format!("/proc/self/fd/{}", fd.as_raw_fd()))
}

/// An empty directory (or file, for a file `source`) at `path`, with its
/// missing parents, inside a fresh tmpfs.
fn make_mount_point(path: &Path, source: &OwnedFd) -> io::Result<()> {
    let source_is_dir = std::fs::metadata(fd_path(source))?.is_dir();
    if source_is_dir {
        return std::fs::create_dir_all(path);
    }
    if let Some(parent) = path.parent() {
        std::fs::create_dir_all(parent)?;
    }
    match File::options().write(true).create_new(true).open(path) {
        Err(error) if error.kind() != io::ErrorKind::AlreadyExists => Err(error),
        _ => Ok(()),
    }
}

/// `mount_setattr(2)`'s `struct mount_attr`.
#[repr(C)]
struct MountAttr {
    attr_set: u64,
    attr_clr: u64,
    propagation: u64,
    userns_fd: u64,
}

const MOUNT_ATTR_RDONLY: u64 = 0x1;

/// `mount_setattr(path, AT_RECURSIVE)` setting and clearing attributes.
fn mount_setattr(path: &Path, set: u64, clear: u64) -> io::Result<()> {
    let c = c_path(path)?;
    let attr = MountAttr {
        attr_set: set,
        attr_clr: clear,
        propagation: 0,
        userns_fd: 0,
    };
    // SAFETY: a live C string and a mount_attr of the size given.
    let result = unsafe {
        libc::syscall(
            libc::SYS_mount_setattr,
            libc::AT_FDCWD,
            c.as_ptr(),
            libc::AT_RECURSIVE,
            &attr as *const MountAttr,
            std::mem::size_of::<MountAttr>(),
        )
    };
    if result < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Every mount at or below `root` read-only: one `mount_setattr` (Linux
/// 5.12), else a remount of each mount listed in `/proc/self/mountinfo`.
fn make_read_only(root: &Path) -> io::Result<()> {
    match mount_setattr(root, MOUNT_ATTR_RDONLY, 0) {
        Err(error) if error.raw_os_error() == Some(libc::ENOSYS) => {}
        result => return result,
    }
    let mountinfo = std::fs::read_to_string("/proc/self/mountinfo")?;
    for mount_point in mount_points(&mountinfo).filter(|point| point.starts_with(root)) {
        remount_keeping_flags(&mount_point, true)?;
    }
    Ok(())
}

/// `path` and every mount below it writable again.
fn set_writable(path: &Path) -> io::Result<()> {
    match mount_setattr(path, 0, MOUNT_ATTR_RDONLY) {
        Err(error) if error.raw_os_error() == Some(libc::ENOSYS) => {}
        result => return result,
    }
    let mountinfo = std::fs::read_to_string("/proc/self/mountinfo")?;
    for mount_point in mount_points(&mountinfo).filter(|point| point.starts_with(path)) {
        remount_keeping_flags(&mount_point, false)?;
    }
    Ok(())
}

/// A bind remount of `mount_point`, read-only or not, keeping its
/// `nosuid`, `nodev` and `noexec` (read back with `statvfs`).
fn remount_keeping_flags(mount_point: &Path, read_only: bool) -> io::Result<()> {
    let c = c_path(mount_point)?;
    // SAFETY: statvfs is plain data, filled by the call.
    let mut stat: libc::statvfs = unsafe { std::mem::zeroed() };
    // SAFETY: a live C string and a writable statvfs.
    if unsafe { libc::statvfs(c.as_ptr(), &mut stat) } < 0 {
        // A mount point this process cannot reach (hidden under another).
        return Ok(());
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
    mount(None, mount_point, None, flags, None)
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
                Bind {
                    path: "/root/bin/runner".into(),
                    writable: false
                },
                Bind {
                    path: "/var/lib/sandboxd/sandboxes/sbx-a".into(),
                    writable: true
                },
            ]
        );
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
    fn a_plan_survives_its_trip_to_init() {
        let plan = settings(ViewConfig::default()).plan(Path::new("/w"), Path::new("/r"));
        let text = serde_json::to_string(&plan).unwrap();
        assert_eq!(serde_json::from_str::<MountPlan>(&text).unwrap(), plan);
    }

    #[test]
    fn mount_points_are_unescaped() {
        let mountinfo = "22 1 8:1 / / rw - ext4 /dev/sda1 rw\n\
                         23 22 0:5 / /mnt/a\\040b rw - tmpfs tmpfs rw\n";
        let points: Vec<PathBuf> = mount_points(mountinfo).collect();
        assert_eq!(points, [PathBuf::from("/"), PathBuf::from("/mnt/a b")]);
    }
}
