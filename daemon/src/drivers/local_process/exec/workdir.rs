//! A command's working directory, resolved beneath its workspace the way
//! `openat2(RESOLVE_BENEATH)` resolves it: no `..` above it, no absolute
//! symlink, no magic link, so a link the sandbox planted cannot lead the
//! command (or the daemon's check) out of its workspace.

use std::ffi::CString;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use sandboxd_protocol::SandboxError;

/// `RESOLVE_NO_MAGICLINKS | RESOLVE_BENEATH` (linux/openat2.h).
const RESOLVE: u64 = 0x02 | 0x08;

/// The directory `relative` names under `workspace` (the workspace for
/// `None`), checked to be a directory beneath it.
pub fn resolve(workspace: &Path, relative: Option<&str>) -> Result<PathBuf, SandboxError> {
    let Some(relative) = relative.filter(|dir| !dir.is_empty() && *dir != ".") else {
        return Ok(workspace.to_path_buf());
    };
    let invalid =
        |why: String| SandboxError::InvalidArgument(format!("workdir '{relative}' {why}"));
    let root = open_dir(workspace).map_err(|error| {
        SandboxError::Unavailable(format!(
            "cannot open the workspace {}: {error}",
            workspace.display()
        ))
    })?;
    match open_beneath(&root, relative) {
        Ok(_) => Ok(workspace.join(relative)),
        Err(error) => Err(invalid(match error.raw_os_error() {
            Some(libc::ENOENT) => "does not exist in the workspace".to_string(),
            Some(libc::ENOTDIR) => "is not a directory".to_string(),
            Some(libc::EXDEV) | Some(libc::ELOOP) => {
                "leads out of the workspace (through a symlink or a mount)".to_string()
            }
            _ => format!("cannot be resolved in the workspace: {error}"),
        })),
    }
}

fn open_dir(path: &Path) -> io::Result<OwnedFd> {
    let path = CString::new(path.as_os_str().as_bytes())?;
    // SAFETY: open of a NUL-terminated path with plain flags.
    let fd = unsafe {
        libc::open(
            path.as_ptr(),
            libc::O_PATH | libc::O_DIRECTORY | libc::O_CLOEXEC,
        )
    };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: a descriptor the kernel just returned, owned by no one else.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// `struct open_how` (linux/openat2.h; libc's is non-exhaustive).
#[repr(C)]
struct OpenHow {
    flags: u64,
    mode: u64,
    resolve: u64,
}

/// `relative`, opened as a directory beneath `root` (`openat2`).
fn open_beneath(root: &OwnedFd, relative: &str) -> io::Result<OwnedFd> {
    let path = CString::new(relative)?;
    let how = OpenHow {
        flags: (libc::O_PATH | libc::O_DIRECTORY | libc::O_CLOEXEC) as u64,
        mode: 0,
        resolve: RESOLVE,
    };
    // SAFETY: openat2 with a live directory descriptor, a NUL-terminated
    // path and an open_how of the size passed.
    let fd = unsafe {
        libc::syscall(
            libc::SYS_openat2,
            root.as_raw_fd(),
            path.as_ptr(),
            &how as *const OpenHow,
            std::mem::size_of::<OpenHow>(),
        )
    };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: a descriptor the kernel just returned, owned by no one else.
    Ok(unsafe { OwnedFd::from_raw_fd(fd as libc::c_int) })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_link_out_of_the_workspace_is_refused_and_a_directory_in_it_is_found() {
        let dir = crate::test_dir::TestDir::new("exec-workdir");
        let workspace = dir.0.join("ws");
        std::fs::create_dir_all(workspace.join("sub/deeper")).unwrap();
        std::os::unix::fs::symlink("/etc", workspace.join("out")).unwrap();
        std::os::unix::fs::symlink("sub", workspace.join("in")).unwrap();
        std::fs::write(workspace.join("file"), b"").unwrap();
        assert_eq!(resolve(&workspace, None).unwrap(), workspace);
        assert_eq!(
            resolve(&workspace, Some("sub/deeper")).unwrap(),
            workspace.join("sub/deeper")
        );
        assert!(resolve(&workspace, Some("in/deeper")).is_ok());
        let refused = |relative: &str| match resolve(&workspace, Some(relative)) {
            Err(SandboxError::InvalidArgument(message)) => message,
            other => panic!("{relative}: {other:?}"),
        };
        assert!(refused("out").contains("leads out"));
        assert!(refused("missing").contains("does not exist"));
        assert!(refused("file").contains("not a directory"));
    }
}
