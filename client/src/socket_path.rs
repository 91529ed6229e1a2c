//! Where the daemon's socket is when nobody says.
//!
//! The rule mirrors the daemon's own default, so a client and a daemon
//! started by the same user with no flags find each other: root uses the
//! system path, anyone else their runtime directory — unless no daemon of
//! theirs listens there and the system daemon's socket exists: then that
//! one, so a member of the system daemon's group (docs/install.md's access
//! model) needs no `--socket` on every call. `SANDBOXD_SOCKET` overrides
//! all of it, for tests and unusual layouts.

use std::ffi::OsString;
use std::path::{Path, PathBuf};

use crate::ClientError;

/// The environment variable that overrides the default socket path.
pub const SOCKET_ENV: &str = "SANDBOXD_SOCKET";

/// The system daemon's socket (the daemon runs as root).
pub const SYSTEM_SOCKET: &str = "/run/stigmer/sandboxd.sock";

/// The socket's path relative to `$XDG_RUNTIME_DIR` for a per-user daemon.
pub const USER_SOCKET_SUFFIX: &str = "stigmer/sandboxd.sock";

/// `$SANDBOXD_SOCKET`, else [`SYSTEM_SOCKET`] when the effective uid is 0,
/// else `$XDG_RUNTIME_DIR/stigmer/sandboxd.sock` when it exists, else
/// [`SYSTEM_SOCKET`] when that exists, else the runtime directory's path
/// (so the error names where a per-user daemon would be). Empty variables
/// count as unset.
pub fn default_socket_path() -> Result<PathBuf, ClientError> {
    // SAFETY: geteuid has no preconditions and cannot fail.
    let euid = unsafe { libc::geteuid() };
    resolve(
        std::env::var_os(SOCKET_ENV),
        euid == 0,
        std::env::var_os("XDG_RUNTIME_DIR"),
        |path| path.exists(),
    )
}

fn resolve(
    explicit: Option<OsString>,
    is_root: bool,
    runtime_dir: Option<OsString>,
    exists: impl Fn(&Path) -> bool,
) -> Result<PathBuf, ClientError> {
    if let Some(path) = explicit.filter(|value| !value.is_empty()) {
        return Ok(PathBuf::from(path));
    }
    let system = PathBuf::from(SYSTEM_SOCKET);
    if is_root {
        return Ok(system);
    }
    let own = runtime_dir
        .filter(|value| !value.is_empty())
        .map(|dir| PathBuf::from(dir).join(USER_SOCKET_SUFFIX));
    match own {
        Some(own) if exists(&own) || !exists(&system) => Ok(own),
        _ if exists(&system) => Ok(system),
        _ => Err(ClientError::NoSocketPath(format!(
            "XDG_RUNTIME_DIR is not set and the system daemon's socket {SYSTEM_SOCKET} does \
             not exist; set {SOCKET_ENV} or pass the socket path"
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn some(value: &str) -> Option<OsString> {
        Some(OsString::from(value))
    }

    fn nothing(_: &Path) -> bool {
        false
    }

    fn only_system(path: &Path) -> bool {
        path == Path::new(SYSTEM_SOCKET)
    }

    #[test]
    fn the_environment_override_wins() {
        let path = resolve(some("/tmp/s.sock"), true, some("/run/user/1000"), nothing).unwrap();
        assert_eq!(path, PathBuf::from("/tmp/s.sock"));
    }

    #[test]
    fn root_uses_the_system_socket() {
        assert_eq!(
            resolve(None, true, some("/run/user/0"), nothing).unwrap(),
            PathBuf::from("/run/stigmer/sandboxd.sock")
        );
    }

    #[test]
    fn users_use_their_runtime_dir() {
        assert_eq!(
            resolve(None, false, some("/run/user/1000"), nothing).unwrap(),
            PathBuf::from("/run/user/1000/stigmer/sandboxd.sock")
        );
        // Theirs wins when both exist.
        assert_eq!(
            resolve(None, false, some("/run/user/1000"), |_| true).unwrap(),
            PathBuf::from("/run/user/1000/stigmer/sandboxd.sock")
        );
    }

    #[test]
    fn a_user_without_a_daemon_of_their_own_falls_back_to_the_system_socket() {
        for runtime_dir in [some("/run/user/1000"), None] {
            assert_eq!(
                resolve(None, false, runtime_dir, only_system).unwrap(),
                PathBuf::from(SYSTEM_SOCKET)
            );
        }
    }

    #[test]
    fn empty_variables_count_as_unset() {
        assert_eq!(
            resolve(some(""), false, some("/run/user/1000"), nothing).unwrap(),
            PathBuf::from("/run/user/1000/stigmer/sandboxd.sock")
        );
        let error = resolve(some(""), false, some(""), nothing).unwrap_err();
        assert!(matches!(error, ClientError::NoSocketPath(_)));
        assert!(error.to_string().contains("XDG_RUNTIME_DIR"));
        assert!(error.to_string().contains("SANDBOXD_SOCKET"));
    }
}
