//! File work done as the sandbox's user, so a file it writes is its own
//! and a file it could not read is not read (a hard link it made to a
//! root-owned file, say).
//!
//! Linux keeps credentials per thread: the raw `setfsuid`, `setfsgid` and
//! `setgroups` system calls change only the calling thread (glibc's
//! `setgroups` wrapper would broadcast to every thread; the raw call does
//! not). Moving the file-system uid off 0 also drops the thread's file
//! capabilities (`CAP_DAC_OVERRIDE`, `CAP_FOWNER`, …). So the work runs on
//! a thread of its own that takes the sandbox's uid, gid and no
//! supplementary groups, and ends after it: nothing has to be restored,
//! and no other thread ever holds those credentials.

use sandboxd_protocol::SandboxError;

/// Who the work runs as: `None` keeps the daemon's own (its runners run as
/// the daemon too).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Owner {
    pub uid: u32,
    pub gid: u32,
}

/// Runs `work` on a new thread with `owner`'s file-system credentials, and
/// answers its result.
pub async fn run_as<T, F>(owner: Option<Owner>, work: F) -> Result<T, SandboxError>
where
    T: Send + 'static,
    F: FnOnce() -> Result<T, SandboxError> + Send + 'static,
{
    let (answer, answered) = tokio::sync::oneshot::channel();
    std::thread::Builder::new()
        .name("sandboxd-files".into())
        .spawn(move || {
            let result = match owner {
                Some(owner) => become_owner(owner).and_then(|()| work()),
                None => work(),
            };
            let _ = answer.send(result);
        })
        .map_err(|error| {
            SandboxError::Unavailable(format!("cannot start a file thread: {error}"))
        })?;
    answered
        .await
        .map_err(|_| SandboxError::Internal("the file thread ended without an answer".into()))?
}

/// This thread's file-system credentials become `owner`'s, checked.
pub(super) fn become_owner(owner: Owner) -> Result<(), SandboxError> {
    let failed = |what: &str, error: std::io::Error| {
        SandboxError::Internal(format!(
            "cannot take uid {} gid {} for file work ({what}): {error}",
            owner.uid, owner.gid
        ))
    };
    // SAFETY: setgroups(0, NULL) on this thread only (the raw call).
    if unsafe { libc::syscall(libc::SYS_setgroups, 0, std::ptr::null::<libc::gid_t>()) } != 0 {
        return Err(failed("setgroups", std::io::Error::last_os_error()));
    }
    // SAFETY: setfsgid and setfsuid take a plain id and change this
    // thread's credentials only; they answer the previous id.
    unsafe {
        libc::syscall(libc::SYS_setfsgid, libc::c_long::from(owner.gid));
        libc::syscall(libc::SYS_setfsuid, libc::c_long::from(owner.uid));
    }
    // Neither call reports failure: an invalid id (-1) changes nothing and
    // answers the id in force, which is how the switch is checked.
    // SAFETY: as above, with an id that changes nothing.
    let (fsuid, fsgid) = unsafe {
        (
            libc::syscall(libc::SYS_setfsuid, libc::c_long::from(u32::MAX)) as u32,
            libc::syscall(libc::SYS_setfsgid, libc::c_long::from(u32::MAX)) as u32,
        )
    };
    if fsuid != owner.uid || fsgid != owner.gid {
        return Err(failed(
            "setfsuid",
            std::io::Error::other(format!("the thread holds fsuid {fsuid} fsgid {fsgid}")),
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fsuid() -> u32 {
        // SAFETY: an id that changes nothing; answers the id in force.
        unsafe { libc::syscall(libc::SYS_setfsuid, libc::c_long::from(u32::MAX)) as u32 }
    }

    #[tokio::test]
    async fn the_switch_stays_on_the_file_thread() {
        if !nix::unistd::Uid::effective().is_root() {
            return;
        }
        let owner = Owner {
            uid: 64_999,
            gid: 64_999,
        };
        let seen = run_as(Some(owner), || Ok(fsuid())).await.unwrap();
        assert_eq!(seen, 64_999);
        assert_eq!(fsuid(), 0, "the calling thread keeps root");
        let unreadable = run_as(Some(owner), || {
            Ok(std::fs::read("/etc/shadow").map_err(|error| error.kind()))
        })
        .await
        .unwrap();
        assert_eq!(unreadable, Err(std::io::ErrorKind::PermissionDenied));
    }
}
