//! The one error type the client returns.
//!
//! A caller needs to tell apart three situations: the daemon answered with
//! one of the protocol's five error kinds (act on the kind), the daemon could
//! not be reached at all (start it, fix the path, get access), or the call
//! got lost on the way (retry later). Daemon answers are wrapped
//! transparently, so `ClientError::Sandbox(SandboxError::InvalidArgument(_))`
//! is matched exactly as the daemon sent it, and client-side validation
//! produces the very same values.

use std::io;
use std::path::{Path, PathBuf};

use sandboxd_protocol::SandboxError;
use tarpc::client::RpcError;

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ClientError {
    /// The daemon (or the client's own input check) rejected the call with
    /// one of the protocol's five kinds.
    #[error(transparent)]
    Sandbox(#[from] SandboxError),

    /// Nothing is listening: the socket file is absent or refuses connections.
    #[error("daemon not running at {}", .path.display())]
    NotRunning { path: PathBuf },

    /// The socket exists but this user may not open it (EACCES/EPERM).
    #[error(
        "permission denied connecting to the daemon socket at {} (is this user in the socket's group?)",
        .path.display()
    )]
    SocketPermissionDenied { path: PathBuf },

    /// Any other failure to open the socket (not a socket, path too long, …).
    #[error("cannot connect to the daemon socket at {}: {reason}", .path.display())]
    ConnectFailed { path: PathBuf, reason: String },

    /// No socket path was given and none could be derived from the environment.
    #[error("no daemon socket path: {0}")]
    NoSocketPath(String),

    /// The daemon speaks another protocol version; talking on would
    /// produce decode errors instead of answers.
    #[error("daemon speaks protocol {daemon}, this client speaks {client}")]
    ProtocolMismatch { daemon: u32, client: u32 },

    /// The call was lost between client and daemon (connection closed or
    /// broken, request could not be sent, daemon aborted it).
    #[error("transport error: {0}")]
    Transport(String),

    /// The call did not finish within the client's per-call deadline.
    #[error("the call did not complete within its deadline")]
    DeadlineExceeded,
}

impl ClientError {
    /// The daemon's answer, when the failure is one of the protocol's kinds.
    pub fn sandbox_error(&self) -> Option<&SandboxError> {
        match self {
            ClientError::Sandbox(error) => Some(error),
            _ => None,
        }
    }

    /// Classifies a failure to open the socket. Absent socket and refused
    /// connection both mean "no daemon here", which is what an operator
    /// needs to hear, rather than the raw errno.
    pub(crate) fn from_connect(path: &Path, error: io::Error) -> Self {
        use std::os::unix::fs::FileTypeExt as _;
        // A file that is no socket refuses a connect too: say what it is.
        if let Ok(metadata) = std::fs::metadata(path) {
            if !metadata.file_type().is_socket() {
                let what = if metadata.is_dir() {
                    "a directory"
                } else if metadata.is_file() {
                    "a regular file"
                } else {
                    "another kind of file"
                };
                return ClientError::ConnectFailed {
                    path: path.to_path_buf(),
                    reason: format!("not a socket ({what})"),
                };
            }
        }
        let path = path.to_path_buf();
        match error.kind() {
            io::ErrorKind::NotFound | io::ErrorKind::ConnectionRefused => {
                ClientError::NotRunning { path }
            }
            io::ErrorKind::PermissionDenied => ClientError::SocketPermissionDenied { path },
            _ => ClientError::ConnectFailed {
                path,
                reason: error.to_string(),
            },
        }
    }

    /// Maps a tarpc failure, keeping the underlying cause in the message
    /// (tarpc's own messages alone, such as "could not read from the
    /// transport", do not say why).
    pub(crate) fn from_rpc(error: RpcError) -> Self {
        match error {
            RpcError::DeadlineExceeded => ClientError::DeadlineExceeded,
            RpcError::Server(server) if server.kind == io::ErrorKind::TimedOut => {
                ClientError::DeadlineExceeded
            }
            RpcError::Server(server) => {
                ClientError::Transport(format!("the daemon aborted the call: {}", server.detail))
            }
            RpcError::Shutdown => {
                ClientError::Transport("the connection to the daemon was closed".to_string())
            }
            other => ClientError::Transport(with_causes(&other)),
        }
    }
}

/// True when the failure means the connection itself is gone, so a fresh
/// connection could succeed where this one cannot.
pub(crate) fn breaks_connection(error: &RpcError) -> bool {
    matches!(
        error,
        RpcError::Shutdown | RpcError::Channel(_) | RpcError::Send(_)
    )
}

/// "outer: inner: innermost", skipping a cause that repeats its parent.
fn with_causes(error: &dyn std::error::Error) -> String {
    let mut message = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        let text = cause.to_string();
        if !message.ends_with(&text) {
            message.push_str(": ");
            message.push_str(&text);
        }
        source = cause.source();
    }
    message
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_path_that_is_no_socket_is_named_for_what_it_is() {
        let error = ClientError::from_connect(
            Path::new("/etc/passwd"),
            io::Error::from(io::ErrorKind::ConnectionRefused),
        );
        assert_eq!(
            error.to_string(),
            "cannot connect to the daemon socket at /etc/passwd: not a socket (a regular file)"
        );
        let error = ClientError::from_connect(
            Path::new("/"),
            io::Error::from(io::ErrorKind::ConnectionRefused),
        );
        assert!(
            error.to_string().ends_with("not a socket (a directory)"),
            "{error}"
        );
    }

    #[test]
    fn not_running_names_the_path() {
        let path = Path::new("/run/stigmer/sandboxd.sock");
        for kind in [io::ErrorKind::NotFound, io::ErrorKind::ConnectionRefused] {
            let error = ClientError::from_connect(path, io::Error::from(kind));
            assert_eq!(error, ClientError::NotRunning { path: path.into() });
            assert_eq!(
                error.to_string(),
                "daemon not running at /run/stigmer/sandboxd.sock"
            );
        }
    }

    #[test]
    fn permission_denied_says_so_and_names_the_path() {
        let path = Path::new("/run/stigmer/sandboxd.sock");
        let error = ClientError::from_connect(path, io::Error::from_raw_os_error(libc::EACCES));
        assert_eq!(
            error,
            ClientError::SocketPermissionDenied { path: path.into() }
        );
        let message = error.to_string();
        assert!(message.contains("permission denied"), "{message}");
        assert!(message.contains("/run/stigmer/sandboxd.sock"), "{message}");
    }

    #[test]
    fn other_connect_errors_keep_the_reason() {
        let path = Path::new("/tmp/not-a-socket");
        let error = ClientError::from_connect(path, io::Error::from_raw_os_error(libc::ENOTSOCK));
        let message = error.to_string();
        assert!(message.starts_with("cannot connect to the daemon socket at /tmp/not-a-socket: "));
    }

    #[test]
    fn protocol_mismatch_names_both_versions() {
        let error = ClientError::ProtocolMismatch {
            daemon: 2,
            client: 1,
        };
        assert_eq!(
            error.to_string(),
            "daemon speaks protocol 2, this client speaks 1"
        );
    }

    #[test]
    fn sandbox_errors_pass_through_unchanged() {
        let inner = SandboxError::FailedPrecondition("connect sandbox exists".into());
        let error = ClientError::from(inner.clone());
        assert_eq!(error.to_string(), inner.to_string());
        assert_eq!(error.sandbox_error(), Some(&inner));
        assert!(matches!(
            error,
            ClientError::Sandbox(SandboxError::FailedPrecondition(_))
        ));
    }

    #[test]
    fn rpc_failures_are_classified() {
        assert_eq!(
            ClientError::from_rpc(RpcError::DeadlineExceeded),
            ClientError::DeadlineExceeded
        );
        assert!(breaks_connection(&RpcError::Shutdown));
        assert!(!breaks_connection(&RpcError::DeadlineExceeded));
        let shutdown = ClientError::from_rpc(RpcError::Shutdown).to_string();
        assert_eq!(
            shutdown,
            "transport error: the connection to the daemon was closed"
        );
    }
}
