//! A fresh session keyring for every runner.
//!
//! A process inherits its parent's session keyring and *possesses* it:
//! every key in it with possessor permissions is readable, whatever its
//! owner. So a runner started as-is reads the daemon's session keys (and
//! those of whoever started the daemon), and a key one runner adds to its
//! session keyring is another's. After the user switch the child joins a
//! new anonymous session keyring (`KEYCTL_JOIN_SESSION_KEYRING` with no
//! name), owned by the sandbox's uid; the kernel frees it with the last
//! process holding it. The user keyrings (`@u`, `@us`) are per uid: per
//! sandbox, unless runners share a uid (`run_as`).

/// Whether the kernel has keyrings at all (`CONFIG_KEYS`): without, there
/// is nothing to share and nothing to join.
pub fn kernel_has_keyrings() -> Result<(), std::io::Error> {
    // SAFETY: asks for this process's session keyring id, creating nothing.
    let id = unsafe {
        libc::syscall(
            libc::SYS_keyctl,
            libc::KEYCTL_GET_KEYRING_ID,
            libc::KEY_SPEC_SESSION_KEYRING,
            0,
        )
    };
    if id < 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

/// Joins a new anonymous session keyring. Child side: allocates nothing.
/// Returns false with `errno` set when refused.
///
/// # Safety
/// Only for the clone child (it replaces the calling thread's keyring).
pub unsafe fn join_fresh_session() -> bool {
    libc::syscall(
        libc::SYS_keyctl,
        libc::KEYCTL_JOIN_SESSION_KEYRING,
        std::ptr::null::<libc::c_char>(),
    ) >= 0
}
