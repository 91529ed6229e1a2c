//! The client handle: one shared connection, per-call deadlines, and the
//! reconnect rule.
//!
//! Calls are multiplexed over one connection (tarpc's wire, this crate's
//! own call path: see `crate::multiplex`), so every clone of a
//! [`SandboxdClient`] shares a single connection and calls run
//! concurrently: the lock around the live connection is held only to copy
//! a pointer, never across a call.
//!
//! When the daemon restarts, the connection breaks. An idempotent call
//! (everything except create-connect) then reconnects and is sent again,
//! once: sending it twice is harmless by definition. Create-connect is
//! never re-sent, because the first attempt may have created the sandbox
//! and a second would fail (or, worse, be mistaken for the first). A
//! connection already known to be dead is replaced before any call,
//! create-connect included, because nothing was sent on it.

use std::future::Future;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use sandboxd_protocol::SandboxError;
use tarpc::client::RpcError;
use tarpc::context::Context;

use crate::connection::{Connection, RpcClient};
use crate::deadline::{clamp, context_until, DEFAULT_DEADLINE};
use crate::error::breaks_connection;
use crate::{default_socket_path, ClientBuilder, ClientError};

/// A connection to `sandboxd`. Cheap to clone; clones share the connection.
#[derive(Clone)]
pub struct SandboxdClient {
    shared: Arc<Shared>,
    deadline: Duration,
}

/// Whether a call may be sent again on a fresh connection after the
/// connection broke under it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Resend {
    /// Idempotent: sending it twice has the effect of sending it once.
    Once,
    /// Not idempotent (create-connect): a lost call is reported, never re-sent.
    Never,
}

pub(crate) struct Shared {
    path: PathBuf,
    /// The live connection. A std mutex: held only to clone or swap the
    /// pointer, never across an `.await`.
    live: Mutex<Arc<Connection>>,
    /// Serialises reconnects, so calls that fail together open one
    /// connection between them rather than one each.
    reconnecting: tokio::sync::Mutex<()>,
    /// The daemon's `stop_grace`, once asked (see [`crate::stop_wait`]).
    pub(crate) stop_grace: tokio::sync::OnceCell<Duration>,
}

impl SandboxdClient {
    /// Connects to the daemon at `path` with the default deadline.
    pub async fn connect(path: impl AsRef<Path>) -> Result<SandboxdClient, ClientError> {
        Self::open(path.as_ref().to_path_buf(), DEFAULT_DEADLINE).await
    }

    /// Connects to the daemon at [`default_socket_path`].
    pub async fn connect_default() -> Result<SandboxdClient, ClientError> {
        Self::open(default_socket_path()?, DEFAULT_DEADLINE).await
    }

    /// A builder for a non-default socket path or deadline.
    pub fn builder() -> ClientBuilder {
        ClientBuilder::new()
    }

    /// Opens the first connection (handshake included) within `deadline`.
    pub(crate) async fn open(
        path: PathBuf,
        deadline: Duration,
    ) -> Result<SandboxdClient, ClientError> {
        let deadline = clamp(deadline);
        let connection = Connection::open(&path, Instant::now() + deadline).await?;
        Ok(SandboxdClient {
            shared: Arc::new(Shared {
                path,
                live: Mutex::new(Arc::new(connection)),
                reconnecting: tokio::sync::Mutex::new(()),
                stop_grace: tokio::sync::OnceCell::new(),
            }),
            deadline,
        })
    }

    /// This handle with another per-call deadline (clamped to at most ten
    /// minutes). The connection stays shared with the original.
    pub fn with_deadline(mut self, deadline: Duration) -> SandboxdClient {
        self.deadline = clamp(deadline);
        self
    }

    /// The per-call deadline.
    pub fn deadline(&self) -> Duration {
        self.deadline
    }

    pub(crate) fn shared(&self) -> &Shared {
        &self.shared
    }

    /// The socket this client talks to.
    pub fn socket_path(&self) -> &Path {
        &self.shared.path
    }

    /// Runs one call within the deadline, applying the reconnect rule.
    /// `call` is invoked once, or twice when the connection broke and
    /// `resend` allows it.
    pub(crate) async fn call<T, F, Fut>(&self, resend: Resend, call: F) -> Result<T, ClientError>
    where
        F: Fn(RpcClient, Context) -> Fut,
        Fut: Future<Output = Result<Result<T, SandboxError>, RpcError>>,
    {
        self.call_within(self.deadline, resend, call).await
    }

    /// [`Self::call`] with a deadline of its own (a long-poll waits longer
    /// than the client's usual deadline).
    pub(crate) async fn call_within<T, F, Fut>(
        &self,
        within: Duration,
        resend: Resend,
        call: F,
    ) -> Result<T, ClientError>
    where
        F: Fn(RpcClient, Context) -> Fut,
        Fut: Future<Output = Result<Result<T, SandboxError>, RpcError>>,
    {
        // The connection's reader fails the call at its deadline (one timer
        // per connection, not one per call: see `crate::multiplex`); a
        // reconnect is bounded on its own, in `Shared::replace`.
        let deadline = Instant::now() + within;
        self.call_until(deadline, resend, call).await
    }

    async fn call_until<T, F, Fut>(
        &self,
        deadline: Instant,
        resend: Resend,
        call: F,
    ) -> Result<T, ClientError>
    where
        F: Fn(RpcClient, Context) -> Fut,
        Fut: Future<Output = Result<Result<T, SandboxError>, RpcError>>,
    {
        let connection = self.shared.usable_connection(deadline).await?;
        match call(connection.rpc(), context_until(deadline)).await {
            Ok(answer) => answer.map_err(ClientError::Sandbox),
            Err(error) if breaks_connection(&error) => {
                connection.mark_broken();
                if resend == Resend::Never {
                    return Err(ClientError::from_rpc(error));
                }
                let fresh = self.shared.replace(&connection, deadline).await?;
                match call(fresh.rpc(), context_until(deadline)).await {
                    Ok(answer) => answer.map_err(ClientError::Sandbox),
                    Err(error) => {
                        if breaks_connection(&error) {
                            fresh.mark_broken();
                        }
                        Err(ClientError::from_rpc(error))
                    }
                }
            }
            Err(error) => Err(ClientError::from_rpc(error)),
        }
    }
}

impl Shared {
    fn current(&self) -> Arc<Connection> {
        self.live
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// The live connection, replaced first if it is known to be dead.
    async fn usable_connection(&self, deadline: Instant) -> Result<Arc<Connection>, ClientError> {
        let current = self.current();
        if current.is_usable() {
            return Ok(current);
        }
        self.replace(&current, deadline).await
    }

    /// Replaces `stale` with a fresh connection, unless another call already
    /// did, in which case that call's connection is used. Gives up at
    /// `deadline`, waiting for another call's reconnect included.
    async fn replace(
        &self,
        stale: &Arc<Connection>,
        deadline: Instant,
    ) -> Result<Arc<Connection>, ClientError> {
        let replacing = self.replace_unbounded(stale, deadline);
        tokio::time::timeout_at(deadline.into(), replacing)
            .await
            .unwrap_or(Err(ClientError::DeadlineExceeded))
    }

    async fn replace_unbounded(
        &self,
        stale: &Arc<Connection>,
        deadline: Instant,
    ) -> Result<Arc<Connection>, ClientError> {
        let _one_at_a_time = self.reconnecting.lock().await;
        let current = self.current();
        if !Arc::ptr_eq(&current, stale) && current.is_usable() {
            return Ok(current);
        }
        let fresh = Arc::new(Connection::open(&self.path, deadline).await?);
        *self.live.lock().unwrap_or_else(PoisonError::into_inner) = fresh.clone();
        Ok(fresh)
    }
}

impl std::fmt::Debug for SandboxdClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SandboxdClient")
            .field("socket_path", &self.shared.path)
            .field("deadline", &self.deadline)
            .finish_non_exhaustive()
    }
}
