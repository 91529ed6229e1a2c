//! One connection to the daemon: open, handshake, and know when it died.
//!
//! The dispatch task that drives the connection is spawned here rather than
//! by tarpc's `NewClient::spawn`, because its `JoinHandle` is the only
//! reliable sign that the connection is gone: once the task has finished,
//! a call on this connection can never have reached the daemon, so opening
//! a fresh one first is safe even for the non-idempotent create-connect.

use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Instant;

use futures::TryFutureExt;
use sandboxd_protocol::{wire, PROTOCOL_VERSION};
use tokio::net::UnixStream;
use tokio::task::JoinHandle;
use tokio_util::codec::Framed;

use crate::deadline::context_until;
use crate::ClientError;

/// The tarpc-generated stub for the `Sandboxd` service.
pub(crate) type RpcClient = sandboxd_protocol::SandboxdClient;

pub(crate) struct Connection {
    rpc: RpcClient,
    dispatch: JoinHandle<()>,
    /// Set when a call on this connection saw it break, before the
    /// dispatch task has necessarily finished.
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
        let framed = Framed::new(stream, wire::frame_codec());
        let transport = tarpc::serde_transport::new(framed, wire::body_codec());
        let new_client = RpcClient::new(tarpc::client::Config::default(), transport);
        // The error is the connection's end; callers learn of it from their
        // own calls, so there is nothing more to do with it here.
        let dispatch = tokio::spawn(new_client.dispatch.unwrap_or_else(|_| ()));
        let connection = Connection {
            rpc: new_client.client,
            dispatch,
            broken: AtomicBool::new(false),
        };

        let daemon = connection
            .rpc
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
        self.rpc.clone()
    }

    /// False once the connection is known to be gone.
    pub(crate) fn is_usable(&self) -> bool {
        !self.broken.load(Ordering::Acquire) && !self.dispatch.is_finished()
    }

    /// Records that a call saw this connection break.
    pub(crate) fn mark_broken(&self) {
        self.broken.store(true, Ordering::Release);
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
