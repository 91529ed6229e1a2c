//! A session keyring of its own for every sandbox.
//!
//! A process inherits its parent's session keyring and *possesses* it:
//! every key in it with possessor permissions is readable, whatever its
//! owner. So a runner started as-is reads the daemon's session keys (and
//! those of whoever started the daemon), and a key one runner adds to its
//! session keyring is another's. After the user switch the child joins a
//! session keyring of the sandbox's uid instead.
//!
//! Where each sandbox has a uid of its own, the runner and every command
//! run in its sandbox join one keyring by name
//! (`KEYCTL_JOIN_SESSION_KEYRING` with [`SessionNames::of_uid`]): one key
//! of the uid's quota (`kernel.keys.maxkeys`) for the whole sandbox, not
//! one per command, so a thousand commands at once start. The kernel finds
//! a keyring by name only if the joiner may search it, so the first joiner
//! sets it to `possessor: all, user: search` (the default gives its user
//! no search, and each command would make a keyring of its own): its own
//! uid finds it, no other uid ever does (a join by another uid makes a new
//! keyring of that uid), and no other uid sees its name. The name is a
//! digest of the uid under a secret the daemon draws at its start, so a
//! sandbox that reads its own keyring's name learns nothing of another
//! uid's and cannot make one in its place. The kernel frees it with the
//! last process holding it, and a uid is handed out again only once none
//! is left (see `users::uid_pool`), with its user keyrings cleared (see
//! `users::uid_keyrings`).
//!
//! Where runners share a uid (`run_as`, or the daemon's own), each runner
//! and each command joins a new anonymous keyring of its own: a name of
//! the uid would be every sandbox's.

use sha2::{Digest, Sha256};

/// `KEY_POS_ALL | KEY_USR_SEARCH` (keyctl(2)): the sandbox's processes
/// possess the keyring and may do anything with it; other processes of its
/// uid may only find it by name; nobody else may do anything.
const SESSION_PERM: libc::c_ulong = 0x3f00_0000 | 0x0008_0000;

/// `sandboxd-session-`, 32 hex digits and a NUL.
pub const SESSION_NAME_CAPACITY: usize = 17 + 32 + 1;

/// The names of the sandboxes' session keyrings, one per uid.
pub struct SessionNames {
    secret: [u8; 32],
}

impl std::fmt::Debug for SessionNames {
    /// Not the secret.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("SessionNames")
    }
}

impl SessionNames {
    /// Names under a secret drawn now, from the OS-seeded thread RNG.
    pub fn new() -> SessionNames {
        let mut secret = [0u8; 32];
        secret[..16].copy_from_slice(&rand::random::<u128>().to_le_bytes());
        secret[16..].copy_from_slice(&rand::random::<u128>().to_le_bytes());
        SessionNames { secret }
    }

    /// The NUL-terminated name of `uid`'s sandbox's session keyring:
    /// 128 bits of SHA-256 over the secret and the uid.
    pub fn of_uid(&self, uid: u32) -> [u8; SESSION_NAME_CAPACITY] {
        let digest = Sha256::new()
            .chain_update(self.secret)
            .chain_update(uid.to_le_bytes())
            .finalize();
        let mut name = [0u8; SESSION_NAME_CAPACITY];
        let prefix = b"sandboxd-session-";
        name[..prefix.len()].copy_from_slice(prefix);
        const HEX: &[u8; 16] = b"0123456789abcdef";
        for (i, byte) in digest[..16].iter().enumerate() {
            name[prefix.len() + 2 * i] = HEX[usize::from(byte >> 4)];
            name[prefix.len() + 2 * i + 1] = HEX[usize::from(byte & 0xf)];
        }
        name
    }
}

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

/// Joins the session keyring named `name` (NUL-terminated), made if there
/// is none, and makes it findable by its uid alone (see the module's doc).
/// Child side: allocates nothing. Returns false with `errno` set when
/// refused.
///
/// # Safety
/// Only for the clone child, after its user switch (it replaces the
/// calling thread's keyring); `name` must be NUL-terminated.
pub unsafe fn join_named_session(name: *const libc::c_char) -> bool {
    let id = libc::syscall(libc::SYS_keyctl, libc::KEYCTL_JOIN_SESSION_KEYRING, name);
    if id < 0 {
        return false;
    }
    // Refused only if the sandbox changed it itself: it then made the
    // keyring unfindable for its own later commands, nobody else's.
    libc::syscall(libc::SYS_keyctl, libc::KEYCTL_SETPERM, id, SESSION_PERM);
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn session_names_differ_by_uid_and_by_secret_and_end_in_nul() {
        let (names, others) = (SessionNames::new(), SessionNames::new());
        let name = names.of_uid(1000);
        assert_eq!(name[SESSION_NAME_CAPACITY - 1], 0);
        let text = std::str::from_utf8(&name[..SESSION_NAME_CAPACITY - 1]).unwrap();
        assert!(text.starts_with("sandboxd-session-"), "{text}");
        assert!(!text.contains('\0'));
        assert_eq!(names.of_uid(1000), name);
        assert_ne!(names.of_uid(1001), name);
        assert_ne!(others.of_uid(1000), name);
    }
}
