//! Options for a connection that differ from the defaults.
//!
//! Most callers want [`SandboxdClient::connect`] or
//! [`SandboxdClient::connect_default`]; the builder exists for the few that
//! need a longer deadline from the very first call (the handshake included).

use std::path::PathBuf;
use std::time::Duration;

use crate::deadline::DEFAULT_DEADLINE;
use crate::{default_socket_path, ClientError, SandboxdClient};

/// Builds a [`SandboxdClient`]; see [`SandboxdClient::builder`].
#[derive(Debug, Clone)]
pub struct ClientBuilder {
    socket: Option<PathBuf>,
    deadline: Duration,
}

impl Default for ClientBuilder {
    fn default() -> Self {
        ClientBuilder::new()
    }
}

impl ClientBuilder {
    /// The default socket path and the default 10 s per-call deadline.
    pub fn new() -> ClientBuilder {
        ClientBuilder {
            socket: None,
            deadline: DEFAULT_DEADLINE,
        }
    }

    /// Connect to this socket instead of [`default_socket_path`].
    pub fn socket(mut self, path: impl Into<PathBuf>) -> ClientBuilder {
        self.socket = Some(path.into());
        self
    }

    /// The per-call deadline, clamped to at most ten minutes.
    pub fn deadline(mut self, deadline: Duration) -> ClientBuilder {
        self.deadline = deadline;
        self
    }

    /// Connects and checks the daemon's protocol version.
    pub async fn connect(self) -> Result<SandboxdClient, ClientError> {
        let path = match self.socket {
            Some(path) => path,
            None => default_socket_path()?,
        };
        SandboxdClient::open(path, self.deadline).await
    }
}
