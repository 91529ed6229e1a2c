//! The serving path in-process: a real socket, real tarpc clients and raw
//! hostile peers, against the recording driver of [`super::testing`].

use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use sandboxd_protocol::service::{SandboxdRequest, SandboxdResponse};
use sandboxd_protocol::{wire, SandboxInfo, SandboxdClient, Scope, PROTOCOL_VERSION};
use tarpc::{client, context, ClientMessage, Request, Response};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::UnixStream;
use tokio::sync::{oneshot, Semaphore};
use tokio::task::JoinHandle;
use tokio_serde::{Deserializer, Serializer};
use tokio_util::bytes::BytesMut;
use tokio_util::codec::Framed;

use super::accept::{serve_until, Limits, OpenConnections};
use super::socket;
use super::testing::{daemon_state, FakeDriver};
use super::timed_stream::Timeouts;
use crate::config::AccessConfig;

const PATIENCE: Duration = Duration::from_secs(5);

/// A daemon serving on a fresh socket until dropped or stopped.
struct TestDaemon {
    dir: PathBuf,
    path: PathBuf,
    stop: Option<oneshot::Sender<()>>,
    serving: Option<JoinHandle<((), OpenConnections)>>,
}

impl TestDaemon {
    fn start(driver: FakeDriver, limits: Limits) -> TestDaemon {
        static NEXT: AtomicUsize = AtomicUsize::new(0);
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let dir = std::env::temp_dir().join(format!("sandboxd-serve-{}-{n}", std::process::id()));
        let path = dir.join("s.sock");
        let obtained = socket::bind(&path, None).unwrap();
        // The file is removed with the directory.
        std::mem::forget(obtained.socket_file);
        let listener = tokio::net::UnixListener::from_std(obtained.listener).unwrap();
        let daemon = daemon_state(Arc::new(driver), AccessConfig::default());
        let (stop, stopped) = oneshot::channel();
        let serving = tokio::spawn(serve_until(listener, daemon, limits, async move {
            let _ = stopped.await;
        }));
        TestDaemon {
            dir,
            path,
            stop: Some(stop),
            serving: Some(serving),
        }
    }

    async fn stop(&mut self) {
        self.stop.take().unwrap().send(()).unwrap();
        let ((), connections) = self.serving.take().unwrap().await.unwrap();
        tokio::time::timeout(PATIENCE, connections.close())
            .await
            .expect("connections close");
    }
}

impl Drop for TestDaemon {
    fn drop(&mut self) {
        if let Some(serving) = &self.serving {
            serving.abort();
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn limits(max_connections: usize, max_requests_per_connection: usize) -> Limits {
    Limits {
        max_connections,
        max_requests_per_connection,
        // The peers of these tests are root, an owner: no reserve, so the
        // cap is exactly `max_connections` for them.
        reserve: 0,
        per_uid: max_connections,
        timeouts: Timeouts {
            frame: Duration::from_secs(30),
            idle: Duration::from_secs(300),
        },
    }
}

async fn connect(path: &Path) -> SandboxdClient {
    let stream = UnixStream::connect(path).await.unwrap();
    let transport =
        tarpc::serde_transport::new(Framed::new(stream, wire::frame_codec()), wire::body_codec());
    SandboxdClient::new(client::Config::default(), transport).spawn()
}

async fn version(client: &SandboxdClient) -> Result<u32, tarpc::client::RpcError> {
    tokio::time::timeout(PATIENCE, client.protocol_version(context::current()))
        .await
        .expect("answered in time")
}

/// Waits until the daemon closes this raw connection (EOF or reset).
async fn closed_by_daemon(stream: &mut UnixStream) {
    closed_by_daemon_within(stream, PATIENCE).await
}

/// The same, for up to `patience`.
async fn closed_by_daemon_within(stream: &mut UnixStream, patience: Duration) {
    let mut buffer = [0u8; 64];
    let read = tokio::time::timeout(patience, stream.read(&mut buffer)).await;
    match read.expect("the daemon closes the connection in time") {
        Ok(0) | Err(_) => {}
        Ok(n) => panic!("expected the connection to close, got {n} bytes"),
    }
}

#[tokio::test]
async fn serves_calls_over_the_socket() {
    let daemon = TestDaemon::start(FakeDriver::default(), limits(8, 8));
    let client = connect(&daemon.path).await;
    assert_eq!(version(&client).await.unwrap(), PROTOCOL_VERSION);
    let status = client.status(context::current()).await.unwrap().unwrap();
    assert_eq!(status.driver, "fake");
    let state = client
        .probe(context::current(), Scope::Session, "ses_1".into())
        .await
        .unwrap();
    assert_eq!(state, Ok(sandboxd_protocol::ProbeState::Absent));
}

#[tokio::test]
async fn garbage_closes_only_that_connection() {
    let daemon = TestDaemon::start(FakeDriver::default(), limits(8, 8));
    let good = connect(&daemon.path).await;
    assert_eq!(version(&good).await.unwrap(), PROTOCOL_VERSION);

    let mut garbage = UnixStream::connect(&daemon.path).await.unwrap();
    garbage
        .write_all(&[0, 0, 0, 8, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff])
        .await
        .unwrap();
    closed_by_daemon(&mut garbage).await;

    assert_eq!(
        version(&good).await.unwrap(),
        PROTOCOL_VERSION,
        "the other peer is unaffected"
    );
}

/// A `list` reply above the 1 MiB a request may be is sent whole: a daemon
/// of a few thousand sandboxes used to close the connection of whoever
/// listed them ("frame size too big" in its log).
#[tokio::test]
async fn a_list_larger_than_a_request_may_be_is_answered() {
    let count = 8_000;
    let daemon = TestDaemon::start(FakeDriver::running_many(count), limits(8, 8));
    let client = connect(&daemon.path).await;
    let all = client
        .list(context::current(), None)
        .await
        .expect("answered, not disconnected")
        .unwrap();
    assert_eq!(all.len(), count);
    let mut codec = wire::body_codec::<(), Vec<SandboxInfo>>();
    let bytes = Pin::new(&mut codec).serialize(&all).unwrap().len();
    assert!(
        bytes > wire::MAX_REQUEST_LEN,
        "the reply ({bytes} bytes) must be larger than a request may be"
    );
    assert_eq!(version(&client).await.unwrap(), PROTOCOL_VERSION);
}

#[tokio::test]
async fn an_oversized_frame_closes_only_that_connection() {
    let daemon = TestDaemon::start(FakeDriver::default(), limits(8, 8));
    let good = connect(&daemon.path).await;
    assert_eq!(version(&good).await.unwrap(), PROTOCOL_VERSION);

    // Over what a reply may be, and over what a request may be only.
    for size in [100 * 1024 * 1024, wire::MAX_REQUEST_LEN as u32 + 1] {
        let mut huge = UnixStream::connect(&daemon.path).await.unwrap();
        huge.write_all(&size.to_be_bytes()).await.unwrap();
        huge.write_all(&[0u8; 1024]).await.unwrap();
        closed_by_daemon(&mut huge).await;
    }

    assert_eq!(
        version(&good).await.unwrap(),
        PROTOCOL_VERSION,
        "the other peer is unaffected"
    );
}

#[tokio::test]
async fn a_centuries_long_deadline_is_served() {
    let daemon = TestDaemon::start(FakeDriver::default(), limits(8, 8));
    let stream = UnixStream::connect(&daemon.path).await.unwrap();
    let mut framed = Framed::new(stream, wire::frame_codec());

    let mut context = context::current();
    context.deadline = Instant::now() + Duration::from_secs(300 * 365 * 24 * 3600);
    let request: ClientMessage<SandboxdRequest> = ClientMessage::Request(Request {
        context,
        id: 1,
        message: SandboxdRequest::ProtocolVersion {},
    });
    let mut codec =
        wire::body_codec::<Response<SandboxdResponse>, ClientMessage<SandboxdRequest>>();
    let body = Pin::new(&mut codec).serialize(&request).unwrap();
    futures::SinkExt::send(&mut framed, body).await.unwrap();

    let frame: BytesMut = tokio::time::timeout(PATIENCE, futures::StreamExt::next(&mut framed))
        .await
        .expect("answered in time")
        .expect("a response frame")
        .unwrap();
    let response = Pin::new(&mut codec).deserialize(&frame).unwrap();
    assert_eq!(response.request_id, 1);
    match response.message {
        Ok(SandboxdResponse::ProtocolVersion(version)) => assert_eq!(version, PROTOCOL_VERSION),
        other => panic!("unexpected response {other:?}"),
    }
}

#[tokio::test]
async fn over_the_connection_cap_new_connections_are_closed() {
    let daemon = TestDaemon::start(FakeDriver::default(), limits(1, 8));
    let first = connect(&daemon.path).await;
    assert_eq!(version(&first).await.unwrap(), PROTOCOL_VERSION);

    // These peers are root, an owner: its connection over the cap waits
    // for a slot (`OWNER_WAIT`), then is closed unserved.
    let mut second = UnixStream::connect(&daemon.path).await.unwrap();
    closed_by_daemon_within(&mut second, super::admission::OWNER_WAIT + PATIENCE).await;

    // Once the first leaves, its slot is free again.
    drop(first);
    let deadline = Instant::now() + PATIENCE;
    loop {
        let third = connect(&daemon.path).await;
        let answer = tokio::time::timeout(
            Duration::from_millis(500),
            third.protocol_version(context::current()),
        )
        .await;
        if let Ok(Ok(version)) = answer {
            assert_eq!(version, PROTOCOL_VERSION);
            break;
        }
        assert!(Instant::now() < deadline, "the freed slot was never reused");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test]
async fn calls_over_the_per_connection_limit_are_refused() {
    let gate = Arc::new(Semaphore::new(0));
    let driver = FakeDriver::with_probe_gate(gate.clone());
    let daemon = TestDaemon::start(driver, limits(8, 1));
    let client = connect(&daemon.path).await;

    let held = {
        let client = client.clone();
        tokio::spawn(async move {
            client
                .probe(context::current(), Scope::Session, "ses_1".into())
                .await
        })
    };
    // Give the first call time to reach the driver and hold the only slot.
    tokio::time::sleep(Duration::from_millis(200)).await;
    match client
        .probe(context::current(), Scope::Session, "ses_2".into())
        .await
    {
        Err(tarpc::client::RpcError::Server(error)) => {
            assert!(error.detail.contains("throttled"), "{error:?}");
        }
        other => panic!("expected the second call to be refused, got {other:?}"),
    }
    gate.add_permits(1);
    let first = tokio::time::timeout(PATIENCE, held).await.unwrap().unwrap();
    assert!(first.is_ok(), "{first:?}");
}

#[tokio::test]
async fn stopping_closes_the_listener_and_the_connections() {
    let mut daemon = TestDaemon::start(FakeDriver::default(), limits(8, 8));
    let client = connect(&daemon.path).await;
    assert_eq!(version(&client).await.unwrap(), PROTOCOL_VERSION);

    daemon.stop().await;

    assert!(
        version(&client).await.is_err(),
        "the open connection was closed"
    );
    let refused = UnixStream::connect(&daemon.path).await;
    assert!(refused.is_err(), "nobody listens any more");
}
