//! The accept loop: peer credentials, a slot from [`Admission`], and one
//! task per connection.
//!
//! Everything a connection is refused for is decided here, from its peer
//! credentials, before a byte of it is read: a stranger is kept out of the
//! shared slots, a uid over its cap and a connection over the global cap
//! are closed at once, with one warning (within the uid's log budget) naming
//! the peer and the reason. Waiting instead would leave them in the
//! kernel's backlog with no answer until their deadline, and let a handful
//! of idle connections silently stall every other caller; closing gives the
//! caller an immediate error and the operator a log line. The one exception
//! is an owner (root, the daemon's uid) finding every slot busy: it waits a
//! little for one, in its connection's own task (see [`Admission`]).
//!
//! First of all, a process inside a sandbox is closed at once whatever its
//! uid: the driver tells (see [`crate::peer_origin`]); so is one in any
//! sandboxd's sandboxes cgroup tree or in another pid namespace (see
//! [`crate::foreign_peer`]).

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use futures::FutureExt as _;
use tokio::net::{UnixListener, UnixStream};
use tokio::task::JoinSet;
use tracing::Instrument;

use super::admission::{Admission, Pool, Refusal, OWNER_WAIT, STRANGER_LIFETIME};
use super::connection;
use super::self_wake::RepollOnSelfWake;
use super::service::{ConnectionService, DaemonState};
use super::timed_stream::Timeouts;
use super::warn_budget::WINDOW;
use crate::access::{Peer, Standing};
use crate::config::Config;
use crate::fd_limit;
use crate::peer_origin::PeerOrigin;

/// How long to pause after a failed accept (out of file descriptors, say),
/// so the loop does not spin while the condition lasts.
const ACCEPT_ERROR_PAUSE: Duration = Duration::from_millis(100);

/// The warning budget's key for peers whose credentials cannot be read.
const UNKNOWN_UID: u32 = u32::MAX;

/// The serving limits, from the configuration.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    pub max_connections: usize,
    pub max_requests_per_connection: usize,
    /// Slots of `max_connections` only root and the daemon's uid may take.
    pub reserve: usize,
    pub per_uid: usize,
    pub timeouts: Timeouts,
}

impl Limits {
    pub fn from_config(config: &Config) -> Limits {
        let connections = &config.connections;
        Limits {
            max_connections: config.max_connections,
            max_requests_per_connection: config.max_requests_per_connection,
            reserve: connections.reserve(config.max_connections),
            per_uid: connections.per_uid,
            timeouts: Timeouts {
                frame: connections.frame_timeout,
                idle: connections.idle_timeout,
            },
        }
    }
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
    let admission = Admission::new(limits.max_connections, limits.reserve, limits.per_uid);
    let mut connections = JoinSet::new();
    let mut summaries = tokio::time::interval(WINDOW);
    let mut spare = SpareDescriptor::open();
    tokio::pin!(stop);
    let stopped = loop {
        tokio::select! {
            stopped = &mut stop => break stopped,
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => admit(stream, &admission, &mut connections, &daemon, limits),
                Err(error) if fd_limit::is_exhaustion(&error) => {
                    spare.shed_one(&listener, &daemon, &error).await;
                }
                Err(error) => {
                    if daemon.warn_budget.allow(UNKNOWN_UID) {
                        tracing::warn!(%error, "accepting a connection failed");
                    }
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
            _ = summaries.tick() => daemon.warn_budget.flush(),
        }
    };
    // New callers now get "connection refused" instead of waiting in the backlog.
    drop(listener);
    daemon.warn_budget.flush();
    (stopped, OpenConnections(connections))
}

/// One descriptor held in reserve for the moment the daemon has none left.
///
/// Out of descriptors, `accept` fails with EMFILE and the connection stays
/// in the kernel's backlog: its caller would wait, unanswered, until its
/// deadline, and the loop would spin on it. So the spare is closed, the
/// waiting connection accepted with it and closed at once (its caller gets
/// an immediate error), and the spare taken again.
struct SpareDescriptor(Option<std::fs::File>);

impl SpareDescriptor {
    fn open() -> SpareDescriptor {
        SpareDescriptor(std::fs::File::open("/dev/null").ok())
    }

    async fn shed_one(
        &mut self,
        listener: &UnixListener,
        daemon: &DaemonState,
        error: &std::io::Error,
    ) {
        if daemon.warn_budget.allow(UNKNOWN_UID) {
            tracing::warn!(
                error = %fd_limit::describe(error),
                "out of file descriptors: closing new connections at once until some are free"
            );
        }
        self.0 = None;
        // Ready at once: the connection that failed is still waiting.
        if let Some(Ok((stream, _))) = listener.accept().now_or_never() {
            drop(stream);
        }
        *self = SpareDescriptor::open();
        if self.0.is_none() {
            // Still none free: do not spin.
            tokio::time::sleep(ACCEPT_ERROR_PAUSE).await;
        }
    }
}

/// Reads the peer's credentials, takes a connection slot, and spawns the
/// connection's task — or closes the connection, saying why.
fn admit(
    stream: UnixStream,
    admission: &Arc<Admission>,
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
            if daemon.warn_budget.allow(UNKNOWN_UID) {
                tracing::warn!(%error, "closing a connection whose peer credentials cannot be read");
            }
            return;
        }
    };
    if let Some(pid) = peer.pid {
        if let PeerOrigin::Sandbox { base_name, how } = daemon.driver.origin_of_peer(pid) {
            if daemon.warn_budget.allow(peer.uid) {
                tracing::warn!(
                    uid = peer.uid,
                    gid = peer.gid,
                    pid,
                    sandbox = %base_name,
                    seen_by = how,
                    "closing a connection from inside a sandbox: a sandbox may never call the daemon"
                );
            }
            return;
        }
    }
    if let Some(reason) = crate::foreign_peer::refusal(peer.pid) {
        if daemon.warn_budget.allow(peer.uid) {
            tracing::warn!(
                uid = peer.uid,
                gid = peer.gid,
                pid = peer.pid,
                "closing a connection from another sandboxd's sandbox or another pid namespace ({reason}): no sandbox, and nothing outside the daemon's pid namespace, may call the daemon"
            );
        }
        return;
    }
    let standing = daemon.access.standing(&peer);
    let slot = match admission.admit(&peer, standing) {
        Ok(slot) => Some(slot),
        // An owner waits for one in its own task (see `admission`).
        Err(Refusal::Full { .. }) if standing == Standing::Owner => None,
        Err(refusal) => {
            refuse(daemon, &peer, refusal);
            return;
        }
    };
    let span = tracing::info_span!("connection", uid = peer.uid, gid = peer.gid, pid = peer.pid);
    let service = ConnectionService::new(peer, daemon.clone());
    let daemon = daemon.clone();
    let admission = admission.clone();
    connections.spawn(RepollOnSelfWake::new(
        async move {
            let slot = match slot {
                Some(slot) => slot,
                None => match admission.admit_owner_waiting(&peer, OWNER_WAIT).await {
                    Ok(slot) => slot,
                    Err(refusal) => return refuse(&daemon, &peer, refusal),
                },
            };
            tracing::debug!(pool = ?slot.pool, "connection accepted");
            let serving = connection::serve(
                stream,
                service,
                limits.max_requests_per_connection,
                limits.timeouts,
                &daemon,
                peer.uid,
            );
            if slot.pool == Pool::Strangers {
                // Long enough to hear its refusal, never long enough to camp.
                if tokio::time::timeout(STRANGER_LIFETIME, serving)
                    .await
                    .is_err()
                {
                    tracing::debug!("closing a stranger's connection at the end of its lifetime");
                }
            } else {
                serving.await;
            }
            drop(slot);
        }
        .instrument(span),
    ));
}

/// Logs (within the uid's budget) why a new connection is closed unserved.
fn refuse(daemon: &DaemonState, peer: &Peer, refusal: Refusal) {
    if daemon.warn_budget.allow(peer.uid) {
        tracing::warn!(
            uid = peer.uid,
            gid = peer.gid,
            pid = peer.pid,
            reason = %refusal,
            "closing a new connection at once"
        );
    }
}
