//! One connection to the daemon: open, handshake, and know when it died.
//!
//! Calls go through a [`Multiplexer`] (each caller writes its own request,
//! one reader task reads the answers). The reader task's `JoinHandle` is
//! the reliable sign that the connection is gone: once the task has
//! finished, or a write has failed, a call on this connection can never
//! reach the daemon, so opening a fresh one first is safe even for the
//! non-idempotent create-connect.

use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Instant;

use sandboxd_protocol::PROTOCOL_VERSION;
use tokio::net::UnixStream;
use tokio::task::JoinHandle;

use crate::deadline::context_until;
use crate::multiplex::Multiplexer;
use crate::ClientError;

/// The tarpc-generated stub for the `Sandboxd` service, over this crate's
/// own multiplexer.
pub(crate) type RpcClient = sandboxd_protocol::SandboxdClient<Multiplexer>;

pub(crate) struct Connection {
    calls: Multiplexer,
    reader: JoinHandle<()>,
    /// Set when a call on this connection saw it break, before the
    /// reader task has necessarily finished.
    broken: AtomicBool,
}

impl Connection {
    /// Connects to `path`, then asks the daemon's protocol version and
    /// refuses a mismatch. Must finish by `deadline`.
    pub(crate) async fn open(path: &Path, deadline: Instant) -> Result<Connection, ClientError> {
        let opening = Self::open_unbounded(path, deadline);
        tokio::time::timeout_at(deadline.into(), opening)
            .await
            .unwrap_or(Err(ClientError::DeadlineExceeded))
    }

    async fn open_unbounded(path: &Path, deadline: Instant) -> Result<Connection, ClientError> {
        let stream = UnixStream::connect(path)
            .await
            .map_err(|error| ClientError::from_connect(path, error))?;
        let (calls, reader) = Multiplexer::start(stream);
        let connection = Connection {
            calls,
            reader,
            broken: AtomicBool::new(false),
        };

        let daemon = connection
            .rpc()
            .protocol_version(context_until(deadline))
            .await
            .map_err(|error| handshake_error(path, error))?;
        if daemon != PROTOCOL_VERSION {
            return Err(ClientError::ProtocolMismatch {
                daemon,
                client: PROTOCOL_VERSION,
            });
        }
        Ok(connection)
    }

    /// A handle for one call; clones share the connection.
    pub(crate) fn rpc(&self) -> RpcClient {
        RpcClient::from(self.calls.clone())
    }

    /// False once the connection is known to be gone.
    pub(crate) fn is_usable(&self) -> bool {
        !self.broken.load(Ordering::Acquire)
            && !self.reader.is_finished()
            && !self.calls.has_ended()
    }

    /// Records that a call saw this connection break.
    pub(crate) fn mark_broken(&self) {
        self.broken.store(true, Ordering::Release);
    }
}

impl Drop for Connection {
    /// The reader task holds the socket's read half: stopping it closes the
    /// socket once the last call on it is over.
    fn drop(&mut self) {
        self.reader.abort();
    }
}

/// A failed handshake says where it failed, since the generic transport
/// message alone does not tell an operator which socket misbehaved.
fn handshake_error(path: &Path, error: tarpc::client::RpcError) -> ClientError {
    match ClientError::from_rpc(error) {
        ClientError::Transport(message) => ClientError::Transport(format!(
            "protocol handshake with the daemon at {} failed: {message}",
            path.display()
        )),
        other => other,
    }
}
