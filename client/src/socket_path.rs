//! Where the daemon's socket is when nobody says.
//!
//! The rule mirrors the daemon's own default, so a client and a daemon
//! started by the same user with no flags find each other: root uses the
//! system path, anyone else their runtime directory. `SANDBOXD_SOCKET`
//! overrides both, for tests and unusual layouts.

use std::ffi::OsString;
use std::path::PathBuf;

use crate::ClientError;

/// The environment variable that overrides the default socket path.
pub const SOCKET_ENV: &str = "SANDBOXD_SOCKET";

/// The system daemon's socket (the daemon runs as root).
pub const SYSTEM_SOCKET: &str = "/run/stigmer/sandboxd.sock";

/// The socket's path relative to `$XDG_RUNTIME_DIR` for a per-user daemon.
pub const USER_SOCKET_SUFFIX: &str = "stigmer/sandboxd.sock";

/// `$SANDBOXD_SOCKET`, else [`SYSTEM_SOCKET`] when the effective uid is 0,
/// else `$XDG_RUNTIME_DIR/stigmer/sandboxd.sock`. Empty variables count as unset.
pub fn default_socket_path() -> Result<PathBuf, ClientError> {
    // SAFETY: geteuid has no preconditions and cannot fail.
    let euid = unsafe { libc::geteuid() };
    resolve(
        std::env::var_os(SOCKET_ENV),
        euid == 0,
        std::env::var_os("XDG_RUNTIME_DIR"),
    )
}

fn resolve(
    explicit: Option<OsString>,
    is_root: bool,
    runtime_dir: Option<OsString>,
) -> Result<PathBuf, ClientError> {
    if let Some(path) = explicit.filter(|value| !value.is_empty()) {
        return Ok(PathBuf::from(path));
    }
    if is_root {
        return Ok(PathBuf::from(SYSTEM_SOCKET));
    }
    match runtime_dir.filter(|value| !value.is_empty()) {
        Some(dir) => Ok(PathBuf::from(dir).join(USER_SOCKET_SUFFIX)),
        None => Err(ClientError::NoSocketPath(format!(
            "XDG_RUNTIME_DIR is not set; set {SOCKET_ENV} or pass the socket path"
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn some(value: &str) -> Option<OsString> {
        Some(OsString::from(value))
    }

    #[test]
    fn the_environment_override_wins() {
        let path = resolve(some("/tmp/s.sock"), true, some("/run/user/1000")).unwrap();
        assert_eq!(path, PathBuf::from("/tmp/s.sock"));
    }

    #[test]
    fn root_uses_the_system_socket() {
        assert_eq!(
            resolve(None, true, some("/run/user/0")).unwrap(),
            PathBuf::from("/run/stigmer/sandboxd.sock")
        );
    }

    #[test]
    fn users_use_their_runtime_dir() {
        assert_eq!(
            resolve(None, false, some("/run/user/1000")).unwrap(),
            PathBuf::from("/run/user/1000/stigmer/sandboxd.sock")
        );
    }

    #[test]
    fn empty_variables_count_as_unset() {
        assert_eq!(
            resolve(some(""), false, some("/run/user/1000")).unwrap(),
            PathBuf::from("/run/user/1000/stigmer/sandboxd.sock")
        );
        let error = resolve(some(""), false, some("")).unwrap_err();
        assert!(matches!(error, ClientError::NoSocketPath(_)));
        assert!(error.to_string().contains("XDG_RUNTIME_DIR"));
        assert!(error.to_string().contains("SANDBOXD_SOCKET"));
    }
}
