//! The accept loop: peer credentials, the global connection cap, and one
//! task per connection.
//!
//! Over the cap (`max_connections`), a new connection is accepted and closed
//! at once, with a warning naming the peer. Waiting instead would leave it
//! in the kernel's backlog with no answer until its deadline, and let a
//! handful of idle connections silently stall every other caller; closing
//! it gives the caller an immediate error and the operator a log line.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use tokio::net::{UnixListener, UnixStream};
use tokio::sync::Semaphore;
use tokio::task::JoinSet;
use tracing::Instrument;

use super::connection;
use super::service::{ConnectionService, DaemonState};
use crate::access::Peer;

/// How long to pause after a failed accept (out of file descriptors, say),
/// so the loop does not spin while the condition lasts.
const ACCEPT_ERROR_PAUSE: Duration = Duration::from_millis(100);

/// The serving limits, from the configuration.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    pub max_connections: usize,
    pub max_requests_per_connection: usize,
}

/// The connections still open when accepting stopped.
pub struct OpenConnections(JoinSet<()>);

impl OpenConnections {
    /// Cancels every open connection, and the calls in flight on it (driver
    /// calls are cancellation-safe), and waits until they are gone.
    pub async fn close(mut self) {
        let open = self.0.len();
        if open > 0 {
            tracing::info!(open, "closing the open connections");
        }
        self.0.shutdown().await;
    }
}

/// Serves connections until `stop` resolves; then closes the listener and
/// returns what `stop` resolved to, with the connections still open.
pub async fn serve_until<S>(
    listener: UnixListener,
    daemon: Arc<DaemonState>,
    limits: Limits,
    stop: impl Future<Output = S>,
) -> (S, OpenConnections) {
    let slots = Arc::new(Semaphore::new(limits.max_connections));
    let mut connections = JoinSet::new();
    tokio::pin!(stop);
    let stopped = loop {
        tokio::select! {
            stopped = &mut stop => break stopped,
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => admit(stream, &slots, &mut connections, &daemon, limits),
                Err(error) => {
                    tracing::warn!(%error, "accepting a connection failed");
                    tokio::time::sleep(ACCEPT_ERROR_PAUSE).await;
                }
            },
            Some(finished) = connections.join_next() => {
                if let Err(error) = finished {
                    if error.is_panic() {
                        tracing::error!(%error, "a connection task panicked");
                    }
                }
            }
        }
    };
    // New callers now get "connection refused" instead of waiting in the backlog.
    drop(listener);
    (stopped, OpenConnections(connections))
}

/// Reads the peer's credentials, takes a connection slot, and spawns the
/// connection's task — or closes the connection, saying why.
fn admit(
    stream: UnixStream,
    slots: &Arc<Semaphore>,
    connections: &mut JoinSet<()>,
    daemon: &Arc<DaemonState>,
    limits: Limits,
) {
    let peer = match stream.peer_cred() {
        Ok(cred) => Peer {
            uid: cred.uid(),
            gid: cred.gid(),
            pid: cred.pid(),
        },
        Err(error) => {
            tracing::warn!(%error, "closing a connection whose peer credentials cannot be read");
            return;
        }
    };
    let Ok(slot) = slots.clone().try_acquire_owned() else {
        tracing::warn!(
            uid = peer.uid,
            gid = peer.gid,
            pid = peer.pid,
            max_connections = limits.max_connections,
            "connection limit reached: closing the new connection"
        );
        return;
    };
    tracing::debug!(
        uid = peer.uid,
        gid = peer.gid,
        pid = peer.pid,
        "connection accepted"
    );
    let span = tracing::info_span!("connection", uid = peer.uid, gid = peer.gid, pid = peer.pid);
    let service = ConnectionService::new(peer, daemon.clone());
    let max_requests = limits.max_requests_per_connection;
    connections.spawn(
        async move {
            connection::serve(stream, service, max_requests).await;
            drop(slot);
        }
        .instrument(span),
    );
}
