//! One connection: frames → tarpc channel → the service, in one task.
//!
//! All of a connection's requests run inside its one task, polled
//! concurrently, so a connection costs one task however many calls it has
//! in flight, and closing the connection cancels all of them.
//!
//! Concurrency per connection is capped by tarpc's `max_concurrent_requests`:
//! a request over the cap is answered at once with tarpc's "server throttled
//! the request" error rather than queued. The stream of requests itself is polled without
//! a second cap, because it also writes the responses and expires deadlines:
//! a `for_each_concurrent` limit would stop polling it exactly when the
//! handlers wait for their responses to be written.
//!
//! The bytes pass through a [`TimedStream`]: a frame must arrive whole
//! within `frame_timeout`, and a connection with nothing in flight is closed
//! after `idle_timeout`. Warnings about a broken peer go through the
//! daemon's per-uid [`WarnBudget`](super::warn_budget::WarnBudget).
//!
//! A peer that sends garbage, an oversized frame (the length header is
//! checked against the 1 MiB limit before any buffer is reserved), or a
//! frame bincode cannot decode ends the request stream with an error: that
//! connection closes, nobody else notices.

use std::error::Error;
use std::io;
use std::sync::Arc;

use futures::future::ready;
use futures::StreamExt;
use sandboxd_protocol::service::{SandboxdRequest, SandboxdResponse};
use sandboxd_protocol::{wire, Sandboxd};
use tarpc::server::{BaseChannel, Channel};
use tokio::net::UnixStream;
use tokio_util::codec::Framed;

use super::deadline::ClampDeadline;
use super::service::{ConnectionService, DaemonState};
use super::timed_stream::{InFlight, TimedStream, Timeouts};

/// Serves every request of one connection until the peer leaves, breaks
/// the protocol, is too slow sending a frame, or stays idle too long.
pub async fn serve(
    stream: UnixStream,
    service: ConnectionService,
    max_requests: usize,
    timeouts: Timeouts,
    daemon: &DaemonState,
    uid: u32,
) {
    let in_flight = InFlight::default();
    let stream = TimedStream::new(stream, timeouts, in_flight.clone());
    let framed = Framed::new(stream, wire::frame_codec());
    let transport = tarpc::serde_transport::new(framed, ClampDeadline::new(wire::body_codec()));
    let channel: BaseChannel<SandboxdRequest, SandboxdResponse, _> =
        BaseChannel::with_defaults(transport);
    let serve = service.serve();
    channel
        .max_concurrent_requests(max_requests)
        .requests()
        .take_while(|next| {
            if let Err(error) = next {
                log_broken(error, daemon, uid);
            }
            ready(next.is_ok())
        })
        .filter_map(|next| ready(next.ok()))
        .for_each_concurrent(None, |request| {
            let call = in_flight.enter();
            let running = request.execute(serve.clone());
            async move {
                running.await;
                drop(call);
            }
        })
        .await;
    tracing::debug!("connection closed");
}

/// A peer that hung up mid-way is routine (debug); one that sent bytes we
/// cannot read is worth an operator's attention (warn, within the uid's
/// budget).
fn log_broken(error: &(dyn Error + 'static), daemon: &DaemonState, uid: u32) {
    let chain = error_chain(error);
    if is_hang_up(error) {
        tracing::debug!(error = %chain, "connection ended by the peer");
    } else if daemon.warn_budget.allow(uid) {
        tracing::warn!(error = %chain, "closing a connection that broke the protocol");
    }
}

/// The error and its sources on one line, `: `-separated (tarpc's wrappers
/// say little on their own: "could not read from the transport"; some of
/// bincode's messages span several lines).
fn error_chain(error: &(dyn Error + 'static)) -> String {
    let mut parts = Vec::new();
    let mut current = Some(error);
    while let Some(error) = current {
        parts.push(
            error
                .to_string()
                .split_whitespace()
                .collect::<Vec<_>>()
                .join(" "),
        );
        current = error.source();
    }
    parts.join(": ")
}

/// True when the error, at any depth, is the peer going away. tarpc wraps
/// the transport's `io::Error` in an `Arc`, and serde_transport wraps the
/// socket's in `io::Error::other`, which `source()` does not walk into.
fn is_hang_up(error: &(dyn Error + 'static)) -> bool {
    let mut current = Some(error);
    while let Some(error) = current {
        let io_error = error
            .downcast_ref::<io::Error>()
            .or_else(|| error.downcast_ref::<Arc<io::Error>>().map(Arc::as_ref));
        if let Some(io_error) = io_error {
            if matches!(
                io_error.kind(),
                io::ErrorKind::ConnectionReset
                    | io::ErrorKind::BrokenPipe
                    | io::ErrorKind::UnexpectedEof
            ) {
                return true;
            }
            if let Some(wrapped) = io_error.get_ref() {
                if is_hang_up(wrapped) {
                    return true;
                }
            }
        }
        current = error.source();
    }
    false
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An error shaped as a failed read reaches us: the socket's or codec's
    /// `io::Error`, wrapped by serde_transport, wrapped by tarpc.
    fn read_error(cause: io::Error) -> tarpc::ChannelError<io::Error> {
        tarpc::ChannelError::Read(Arc::new(io::Error::other(cause)))
    }

    #[test]
    fn error_chains_are_one_line() {
        let garbage = read_error(io::Error::new(
            io::ErrorKind::InvalidData,
            "\nByte 255 is\n  reserved",
        ));
        let chain = error_chain(&garbage);
        assert_eq!(
            chain,
            "could not read from the transport: Byte 255 is reserved"
        );
    }

    #[test]
    fn hang_ups_are_told_apart_from_garbage() {
        assert!(is_hang_up(&read_error(
            io::ErrorKind::ConnectionReset.into()
        )));
        assert!(is_hang_up(&read_error(io::ErrorKind::BrokenPipe.into())));
        assert!(!is_hang_up(&read_error(io::Error::new(
            io::ErrorKind::InvalidData,
            "frame size too big"
        ))));
    }
}
