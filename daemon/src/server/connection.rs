//! One connection: frames → tarpc channel → the service, in one task.
//!
//! All of a connection's requests run inside its one task, polled
//! concurrently, so a connection costs one task however many calls it has
//! in flight, and closing the connection cancels all of them.
//!
//! Concurrency per connection is capped by tarpc's `max_concurrent_requests`:
//! a request over the cap is answered at once with a "would block" server
//! error rather than queued. The stream of requests itself is polled without
//! a second cap, because it also writes the responses and expires deadlines:
//! a `for_each_concurrent` limit would stop polling it exactly when the
//! handlers wait for their responses to be written.
//!
//! A peer that sends garbage, an oversized frame (the length header is
//! checked against the 1 MiB limit before any buffer is reserved), or a
//! frame bincode cannot decode ends the request stream with an error: that
//! connection closes, nobody else notices.

use std::error::Error;
use std::io;

use futures::future::ready;
use futures::StreamExt;
use sandboxd_protocol::service::{SandboxdRequest, SandboxdResponse};
use sandboxd_protocol::{wire, Sandboxd};
use tarpc::server::{BaseChannel, Channel};
use tokio::net::UnixStream;
use tokio_util::codec::Framed;

use super::deadline::ClampDeadline;
use super::service::ConnectionService;

/// Serves every request of one connection until the peer leaves or breaks
/// the protocol.
pub async fn serve(stream: UnixStream, service: ConnectionService, max_requests: usize) {
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
                log_broken(error);
            }
            ready(next.is_ok())
        })
        .filter_map(|next| ready(next.ok()))
        .for_each_concurrent(None, |request| request.execute(serve.clone()))
        .await;
    tracing::debug!("connection closed");
}

/// A peer that hung up mid-way is routine (debug); one that sent bytes we
/// cannot read is worth an operator's attention (warn).
fn log_broken(error: &(dyn Error + 'static)) {
    let chain = error_chain(error);
    if is_hang_up(error) {
        tracing::debug!(error = %chain, "connection ended by the peer");
    } else {
        tracing::warn!(error = %chain, "closing a connection that broke the protocol");
    }
}

/// The error and its sources, `: `-separated (tarpc's wrappers say little
/// on their own: "could not read from the transport").
fn error_chain(error: &(dyn Error + 'static)) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
}

fn is_hang_up(error: &(dyn Error + 'static)) -> bool {
    let mut current = Some(error);
    while let Some(error) = current {
        if let Some(io_error) = error.downcast_ref::<io::Error>() {
            if matches!(
                io_error.kind(),
                io::ErrorKind::ConnectionReset | io::ErrorKind::BrokenPipe | io::ErrorKind::UnexpectedEof
            ) {
                return true;
            }
        }
        current = error.source();
    }
    false
}
