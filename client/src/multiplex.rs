//! Calls multiplexed over one connection, without a dispatch task between
//! the caller and the socket.
//!
//! tarpc's own client passes every request through a channel to a task
//! that owns the socket, and passes the answer back through another. On a
//! multi-thread runtime each of those hand-offs can wake another thread,
//! and on a small VM a wake-up across CPUs costs tens of µs: more than the
//! daemon's whole answer to a probe. Here the calling task encodes and
//! writes its own request (see [`crate::outgoing`]) and one reader task per
//! connection reads the answers, completing each call's oneshot.
//!
//! The wire is tarpc's, byte for byte, so the daemon's tarpc server is
//! unchanged: length-delimited bincode `ClientMessage`s out and `Response`s
//! in, a fresh id per request, and a `Cancel` for a call dropped before its
//! answer, as tarpc's client sends. The generated `SandboxdClient` accepts
//! any [`Stub`], so the typed methods stay tarpc's own.
//!
//! A call's deadline travels to the daemon in its context, and the reader
//! task fails the call when it passes, as tarpc's dispatch does. One timer
//! per connection, set to the earliest deadline and moved only when it
//! rings or an earlier deadline arrives, stands in for a timer per call:
//! registering a timer can wake the thread parked in the I/O driver, a
//! wake-up per call that the answer alone does not need.

use std::collections::HashMap;
use std::io;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Instant;

use futures::StreamExt;
use sandboxd_protocol::service::{SandboxdRequest, SandboxdResponse};
use sandboxd_protocol::wire;
use tarpc::client::stub::Stub;
use tarpc::client::RpcError;
use tarpc::{context, trace, ChannelError, ClientMessage, Request, Response};
use tokio::net::unix::OwnedReadHalf;
use tokio::net::UnixStream;
use tokio::runtime::Handle;
use tokio::sync::{oneshot, Notify};
use tokio::task::JoinHandle;
use tokio_serde::{Deserializer, Serializer};
use tokio_util::bytes::BytesMut;
use tokio_util::codec::{Encoder, FramedRead};

use crate::outgoing::{Outgoing, Sent};

type Answer = Result<SandboxdResponse, RpcError>;

/// One connection's calls. Clones share the connection.
#[derive(Clone)]
pub(crate) struct Multiplexer {
    inner: Arc<Inner>,
}

struct Inner {
    outgoing: Outgoing,
    calls: Mutex<Calls>,
    next_id: AtomicU64,
    /// Tells the reader task that [`Calls::alarm`] moved earlier.
    alarm_moved: Notify,
    /// Where a flush of a full socket runs (see [`crate::outgoing`]).
    runtime: Handle,
}

/// The calls sent and not yet answered, until the connection ends.
#[derive(Default)]
struct Calls {
    waiting: HashMap<u64, Waiting>,
    /// Why the connection ended, once it has: every later call fails so.
    ended: Option<Ended>,
    /// When the reader task's timer rings, if it is set: never later than
    /// the earliest deadline of [`Calls::waiting`].
    alarm: Option<Instant>,
}

struct Waiting {
    answer: oneshot::Sender<Answer>,
    deadline: Instant,
}

#[derive(Clone)]
enum Ended {
    /// The daemon closed the connection.
    Closed,
    Read(Arc<io::Error>),
    Write(Arc<io::Error>),
}

impl Ended {
    /// The error tarpc's client gives its calls for the same end.
    fn error(&self) -> RpcError {
        match self {
            Ended::Closed => RpcError::Shutdown,
            Ended::Read(error) => RpcError::Channel(ChannelError::Read(error.clone())),
            Ended::Write(error) => RpcError::Channel(ChannelError::Write(error.clone())),
        }
    }
}

impl Multiplexer {
    /// Takes `stream` over. The reader task's end is the connection's.
    pub(crate) fn start(stream: UnixStream) -> (Multiplexer, JoinHandle<()>) {
        let (read, write) = stream.into_split();
        let inner = Arc::new(Inner {
            outgoing: Outgoing::new(write),
            calls: Mutex::default(),
            next_id: AtomicU64::new(0),
            alarm_moved: Notify::new(),
            runtime: Handle::current(),
        });
        let reader = tokio::spawn(read_answers(read, inner.clone()));
        (Multiplexer { inner }, reader)
    }

    /// True once the connection has failed or closed.
    pub(crate) fn has_ended(&self) -> bool {
        self.inner.calls().ended.is_some()
    }
}

impl Stub for Multiplexer {
    type Req = SandboxdRequest;
    type Resp = SandboxdResponse;

    async fn call(&self, ctx: context::Context, request: SandboxdRequest) -> Answer {
        let inner = &self.inner;
        let id = inner.next_id.fetch_add(1, Ordering::Relaxed);
        let (trace, deadline) = (ctx.trace_context, ctx.deadline);
        let frame = encode(&ClientMessage::Request(Request {
            context: ctx,
            id,
            message: request,
        }))
        .map_err(|error| RpcError::Send(Box::new(error)))?;
        let (answer, answered) = oneshot::channel();
        inner.register(id, Waiting { answer, deadline })?;
        let mut pending = Pending {
            inner,
            id,
            trace,
            answered: false,
        };
        inner.send(frame)?;
        let answer = answered.await;
        pending.answered = true;
        // The sender is dropped unanswered only with the connection.
        answer.unwrap_or(Err(RpcError::Shutdown))
    }
}

/// A call sent and not yet answered: dropped early (its caller gave up,
/// or its deadline passed), it tells the daemon to stop working on it.
struct Pending<'a> {
    inner: &'a Arc<Inner>,
    id: u64,
    trace: trace::Context,
    answered: bool,
}

impl Drop for Pending<'_> {
    fn drop(&mut self) {
        if self.answered || self.inner.calls().waiting.remove(&self.id).is_none() {
            return;
        }
        let cancel = ClientMessage::Cancel {
            trace_context: self.trace,
            request_id: self.id,
        };
        // Best effort, as tarpc's: a connection that cannot take it is
        // ending, and with it the call.
        if let Ok(frame) = encode(&cancel) {
            let _ = self.inner.send(frame);
        }
    }
}

impl Inner {
    fn calls(&self) -> MutexGuard<'_, Calls> {
        self.calls.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Records that call `id` waits for its answer, and moves the alarm
    /// if this deadline is the earliest.
    fn register(&self, id: u64, waiting: Waiting) -> Result<(), RpcError> {
        let mut calls = self.calls();
        if let Some(ended) = &calls.ended {
            return Err(ended.error());
        }
        let deadline = waiting.deadline;
        calls.waiting.insert(id, waiting);
        if calls.alarm.is_none_or(|alarm| deadline < alarm) {
            calls.alarm = Some(deadline);
            drop(calls);
            self.alarm_moved.notify_one();
        }
        Ok(())
    }

    /// Fails the calls whose deadline has passed by `now`; returns when the
    /// alarm should ring next.
    fn expire(&self, now: Instant) -> Option<Instant> {
        let (late, alarm) = {
            let mut calls = self.calls();
            let due: Vec<u64> = (calls.waiting.iter())
                .filter(|(_, waiting)| waiting.deadline <= now)
                .map(|(id, _)| *id)
                .collect();
            let late: Vec<Waiting> = (due.iter())
                .filter_map(|id| calls.waiting.remove(id))
                .collect();
            calls.alarm = calls.waiting.values().map(|waiting| waiting.deadline).min();
            (late, calls.alarm)
        };
        for waiting in late {
            let _ = waiting.answer.send(Err(RpcError::DeadlineExceeded));
        }
        alarm
    }

    /// Writes `frame`, or queues it and makes sure a flush runs.
    fn send(self: &Arc<Self>, frame: BytesMut) -> Result<(), RpcError> {
        match self.outgoing.send(frame) {
            Ok(Sent::Written | Sent::Queued) => Ok(()),
            Ok(Sent::QueuedFlushNeeded) => {
                let inner = self.clone();
                self.runtime.spawn(async move {
                    if let Err(error) = inner.outgoing.flush().await {
                        inner.end(Ended::Write(Arc::new(error)));
                    }
                });
                Ok(())
            }
            Err(error) => {
                let ended = Ended::Write(Arc::new(error));
                self.end(ended.clone());
                Err(ended.error())
            }
        }
    }

    /// Hands an answer to its call, unless the call was given up on.
    fn complete(&self, response: Response<SandboxdResponse>) {
        let waiting = self.calls().waiting.remove(&response.request_id);
        if let Some(waiting) = waiting {
            let answer = response.message.map_err(RpcError::Server);
            let _ = waiting.answer.send(answer);
        }
    }

    /// Ends the connection: every waiting call fails, and so will every
    /// later one. The first reason stays.
    fn end(&self, why: Ended) {
        let (waiting, ended) = {
            let mut calls = self.calls();
            let ended = calls.ended.get_or_insert(why).clone();
            (std::mem::take(&mut calls.waiting), ended)
        };
        for waiting in waiting.into_values() {
            let _ = waiting.answer.send(Err(ended.error()));
        }
    }
}

/// The reader task: answers in, and calls past their deadline failed,
/// until the connection ends.
async fn read_answers(read: OwnedReadHalf, inner: Arc<Inner>) {
    let mut exit = EndOnExit {
        inner: inner.clone(),
        why: Ended::Closed,
    };
    exit.why = read_until_end(read, &inner).await;
}

/// Ends the connection however the reader task ends (the connection's
/// end, an abort when the connection is dropped, a panic): the calls still
/// waiting would otherwise wait for an answer nobody reads.
struct EndOnExit {
    inner: Arc<Inner>,
    why: Ended,
}

impl Drop for EndOnExit {
    fn drop(&mut self) {
        self.inner.end(self.why.clone());
    }
}

async fn read_until_end(read: OwnedReadHalf, inner: &Inner) -> Ended {
    let mut frames = FramedRead::new(read, wire::frame_codec());
    let mut codec = wire::body_codec::<Response<SandboxdResponse>, ()>();
    let alarm = tokio::time::sleep_until(tokio::time::Instant::now());
    tokio::pin!(alarm);
    let mut armed = false;
    loop {
        tokio::select! {
            biased;
            frame = frames.next() => {
                let frame = match frame {
                    None => break Ended::Closed,
                    Some(Err(error)) => break Ended::Read(Arc::new(error)),
                    Some(Ok(frame)) => frame,
                };
                match Deserializer::deserialize(Pin::new(&mut codec), &frame) {
                    Ok(response) => inner.complete(response),
                    Err(error) => break Ended::Read(Arc::new(error)),
                }
            }
            () = inner.alarm_moved.notified() => {
                let next = inner.calls().alarm;
                armed = set_alarm(alarm.as_mut(), next);
            }
            () = &mut alarm, if armed => {
                let next = inner.expire(Instant::now());
                armed = set_alarm(alarm.as_mut(), next);
            }
        }
    }
}

/// Sets the reader's timer to `at`; false when there is nothing to time.
fn set_alarm(alarm: Pin<&mut tokio::time::Sleep>, at: Option<Instant>) -> bool {
    match at {
        Some(at) => {
            alarm.reset(at.into());
            true
        }
        None => false,
    }
}

/// One message as a frame: its length, then its bincode body.
fn encode(message: &ClientMessage<SandboxdRequest>) -> io::Result<BytesMut> {
    let mut codec = wire::body_codec::<(), ClientMessage<SandboxdRequest>>();
    let body = Serializer::serialize(Pin::new(&mut codec), message)?;
    let mut frame = BytesMut::with_capacity(4 + body.len());
    wire::frame_codec().encode(body, &mut frame)?;
    Ok(frame)
}

#[cfg(test)]
mod tests {
    use std::future::Future;
    use std::time::Duration;

    use futures::SinkExt;
    use tokio_util::codec::{Framed, LengthDelimitedCodec};

    use super::*;

    /// The daemon's end of the connection, frame by frame.
    type Peer = Framed<UnixStream, LengthDelimitedCodec>;

    fn connected() -> (Multiplexer, JoinHandle<()>, Peer) {
        let (ours, theirs) = UnixStream::pair().unwrap();
        let (calls, reader) = Multiplexer::start(ours);
        (calls, reader, Framed::new(theirs, wire::frame_codec()))
    }

    async fn next_message(peer: &mut Peer) -> ClientMessage<SandboxdRequest> {
        let frame = peer.next().await.unwrap().unwrap();
        let mut codec = wire::body_codec::<ClientMessage<SandboxdRequest>, ()>();
        Deserializer::deserialize(Pin::new(&mut codec), &frame).unwrap()
    }

    async fn next_request_id(peer: &mut Peer) -> u64 {
        match next_message(peer).await {
            ClientMessage::Request(request) => request.id,
            other => panic!("not a request: {other:?}"),
        }
    }

    async fn answer(peer: &mut Peer, request_id: u64, version: u32) {
        let response = Response {
            request_id,
            message: Ok(SandboxdResponse::ProtocolVersion(version)),
        };
        let mut codec = wire::body_codec::<(), Response<SandboxdResponse>>();
        let body = Serializer::serialize(Pin::new(&mut codec), &response).unwrap();
        peer.send(body).await.unwrap();
    }

    fn context(within: Duration) -> context::Context {
        let mut ctx = context::current();
        ctx.deadline = Instant::now() + within;
        ctx
    }

    fn ask_version(calls: &Multiplexer, within: Duration) -> impl Future<Output = Answer> + '_ {
        calls.call(context(within), SandboxdRequest::ProtocolVersion {})
    }

    fn version(answer: Answer) -> u32 {
        match answer {
            Ok(SandboxdResponse::ProtocolVersion(version)) => version,
            other => panic!("not a version: {other:?}"),
        }
    }

    #[tokio::test]
    async fn answers_reach_their_own_calls_in_any_order() {
        let (calls, _reader, mut peer) = connected();
        let long = Duration::from_secs(60);
        let first = tokio::spawn({
            let calls = calls.clone();
            async move { ask_version(&calls, long).await }
        });
        let first_id = next_request_id(&mut peer).await;
        let second = tokio::spawn({
            let calls = calls.clone();
            async move { ask_version(&calls, long).await }
        });
        let second_id = next_request_id(&mut peer).await;
        assert_ne!(first_id, second_id);
        answer(&mut peer, second_id, 2).await;
        answer(&mut peer, first_id, 1).await;
        assert_eq!(version(first.await.unwrap()), 1);
        assert_eq!(version(second.await.unwrap()), 2);
    }

    #[tokio::test]
    async fn a_call_given_up_on_is_cancelled_at_the_daemon() {
        let (calls, _reader, mut peer) = connected();
        let mut call = Box::pin(ask_version(&calls, Duration::from_secs(60)));
        assert!(futures::poll!(call.as_mut()).is_pending());
        let id = next_request_id(&mut peer).await;
        drop(call);
        match next_message(&mut peer).await {
            ClientMessage::Cancel { request_id, .. } => assert_eq!(request_id, id),
            other => panic!("not a cancel: {other:?}"),
        }
        // A late answer to it is dropped; the connection goes on.
        answer(&mut peer, id, 1).await;
        let next = tokio::spawn({
            let calls = calls.clone();
            async move { ask_version(&calls, Duration::from_secs(60)).await }
        });
        let next_id = next_request_id(&mut peer).await;
        answer(&mut peer, next_id, 3).await;
        assert_eq!(version(next.await.unwrap()), 3);
    }

    #[tokio::test]
    async fn a_call_past_its_deadline_fails_and_later_ones_are_timed_too() {
        let (calls, _reader, mut peer) = connected();
        // A long deadline first sets the alarm late; the short one after it
        // must move it earlier.
        let patient = tokio::spawn({
            let calls = calls.clone();
            async move { ask_version(&calls, Duration::from_secs(60)).await }
        });
        let patient_id = next_request_id(&mut peer).await;
        let hasty = ask_version(&calls, Duration::from_millis(50)).await;
        assert!(
            matches!(hasty, Err(RpcError::DeadlineExceeded)),
            "{hasty:?}"
        );
        answer(&mut peer, patient_id, 7).await;
        assert_eq!(version(patient.await.unwrap()), 7);
        let late = ask_version(&calls, Duration::ZERO).await;
        assert!(matches!(late, Err(RpcError::DeadlineExceeded)), "{late:?}");
    }

    #[tokio::test]
    async fn the_daemon_closing_fails_waiting_and_later_calls() {
        let (calls, reader, mut peer) = connected();
        let waiting = tokio::spawn({
            let calls = calls.clone();
            async move { ask_version(&calls, Duration::from_secs(60)).await }
        });
        next_request_id(&mut peer).await;
        drop(peer);
        assert!(matches!(waiting.await.unwrap(), Err(RpcError::Shutdown)));
        reader.await.unwrap();
        assert!(calls.has_ended());
        let later = ask_version(&calls, Duration::from_secs(60)).await;
        assert!(matches!(later, Err(RpcError::Shutdown)), "{later:?}");
    }
}
