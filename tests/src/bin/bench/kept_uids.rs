//! Frees the user keyrings of the uids a bench daemon kept.
//!
//! A daemon's stop keeps its sandboxes' uids for its restart, and with them
//! each uid's user and user-session keyrings (`_uid.N`, `_uid_ses.N`),
//! which the kernel keeps until reboot. The bench then deletes that
//! daemon's state and claims, so no daemon will hand those uids out again
//! and free them. Each is a named keyring, and every later session-keyring
//! join (each runner's start, each command) walks them all: after the scale
//! rows had left 19,700 of them, a cold start in the peers rows took
//! 9.5–12.1 ms; with them freed, 4.0–4.6 ms. So the bench frees them itself
//! once its daemon is gone, as the daemon does at a uid's release.

use std::path::Path;

use nix::sys::wait::{waitpid, WaitStatus};
use nix::unistd::{fork, ForkResult};

/// `keyctl(2)` operations and special keyring ids (`linux/keyctl.h`).
const KEYCTL_GET_KEYRING_ID: libc::c_long = 0;
const KEYCTL_INVALIDATE: libc::c_long = 21;
const KEY_SPEC_USER_KEYRING: libc::c_long = -4;
const KEY_SPEC_USER_SESSION_KEYRING: libc::c_long = -5;

/// Frees the user keyrings of every uid still claimed in `claims_dir` (a
/// claim file is named after its uid). Needs root; does nothing otherwise.
pub fn free_keyrings_of_kept(claims_dir: &Path) {
    let uids: Vec<u32> = std::fs::read_dir(claims_dir)
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|entry| entry.file_name().to_str()?.parse().ok())
        .collect();
    if uids.is_empty() || !nix::unistd::geteuid().is_root() {
        return;
    }
    if let Err(error) = free_in_a_child(&uids) {
        eprintln!(
            "bench: warning: the user keyrings of {} kept uids were not freed: {error}",
            uids.len()
        );
    }
}

/// One forked child goes through every uid: this process has threads, and
/// a uid change by glibc would switch them all. Its exit code is how many
/// uids it could not switch to (at most 255).
fn free_in_a_child(uids: &[u32]) -> Result<(), String> {
    // SAFETY: the child makes raw system calls only, on memory allocated
    // before the fork, and leaves by `_exit`.
    match unsafe { fork() }.map_err(|error| format!("fork: {error}"))? {
        ForkResult::Child => {
            let failed = uids.iter().filter(|&&uid| !free_as(uid)).count();
            // SAFETY: ends the child without running the parent's exit handlers.
            unsafe { libc::_exit(failed.min(255) as i32) }
        }
        ForkResult::Parent { child } => match waitpid(child, None) {
            Ok(WaitStatus::Exited(_, 0)) => Ok(()),
            Ok(WaitStatus::Exited(_, failed)) => {
                Err(format!("{failed} of them could not be switched to"))
            }
            Ok(status) => Err(format!("the freeing child ended with {status:?}")),
            Err(error) => Err(format!("waitpid: {error}")),
        },
    }
}

/// Becomes `uid` (keeping root as the saved uid, to come back), invalidates
/// its user and user-session keyrings (the kernel then frees them), and
/// becomes root again. False when a uid change failed.
fn free_as(uid: u32) -> bool {
    // SAFETY: raw system calls with integer arguments; `setresuid` changes
    // this single-threaded child's credentials only.
    unsafe {
        if libc::syscall(libc::SYS_setresuid, uid, uid, 0) != 0 {
            return false;
        }
        // Both looked up before either is invalidated: a lookup of either
        // finds the user keyring first, and once that is invalidated every
        // lookup says ENOKEY until the kernel's collector has run.
        let ids = [KEY_SPEC_USER_KEYRING, KEY_SPEC_USER_SESSION_KEYRING]
            .map(|keyring| libc::syscall(libc::SYS_keyctl, KEYCTL_GET_KEYRING_ID, keyring, 0));
        for id in ids.into_iter().filter(|&id| id > 0) {
            libc::syscall(libc::SYS_keyctl, KEYCTL_INVALIDATE, id);
        }
        libc::syscall(libc::SYS_setresuid, 0, 0, 0) == 0
    }
}
