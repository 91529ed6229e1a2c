//! The client's connection behaviour against an in-process stand-in for the
//! daemon: handshake, version mismatch, "not running", deadlines, sharing
//! one connection, and the reconnect rule across a daemon restart.

mod fake_daemon;

use std::future::Future;
use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use fake_daemon::{behaviour, env, socket_path, start, Behaviour, Instance};
use sandboxd_client::{
    ClientError, ProbeState, SandboxEnv, SandboxError, SandboxdClient, Scope, PROTOCOL_VERSION,
};

#[tokio::test]
async fn calls_round_trip_and_daemon_errors_keep_their_kind() {
    let path = socket_path();
    let behaviour = behaviour();
    let instance = start(&path, &behaviour);
    let client = SandboxdClient::connect(&path).await.unwrap();

    assert_eq!(client.socket_path(), &*path);
    assert_eq!(
        client.probe(Scope::Session, "abc").await.unwrap(),
        ProbeState::Stopped
    );
    let report = client.ensure_session_sandbox("abc", &env()).await.unwrap();
    assert!(report.created);
    assert_eq!(
        client.create_connect_sandbox("r1", &env()).await.unwrap(),
        "connect-r1"
    );
    assert!(matches!(
        client.deprovision_connect_sandbox("connect-r1").await,
        Err(ClientError::Sandbox(SandboxError::Unavailable(_)))
    ));
    assert!(client.list(None).await.unwrap().is_empty());
    instance.stop().await;
}

#[tokio::test]
async fn a_version_mismatch_is_refused_naming_both_versions() {
    let path = socket_path();
    let behaviour = behaviour();
    behaviour
        .version
        .store(PROTOCOL_VERSION + 1, Ordering::SeqCst);
    let instance = start(&path, &behaviour);
    let error = SandboxdClient::connect(&path).await.unwrap_err();
    assert_eq!(
        error,
        ClientError::ProtocolMismatch {
            daemon: PROTOCOL_VERSION + 1,
            client: PROTOCOL_VERSION
        }
    );
    assert_eq!(
        error.to_string(),
        format!(
            "daemon speaks protocol {}, this client speaks {PROTOCOL_VERSION}",
            PROTOCOL_VERSION + 1
        )
    );
    instance.stop().await;
}

#[tokio::test]
async fn no_daemon_is_reported_as_not_running() {
    let path = socket_path();
    let error = SandboxdClient::connect(&path).await.unwrap_err();
    assert_eq!(
        error,
        ClientError::NotRunning {
            path: path.to_path_buf()
        }
    );

    // A stale socket file with nobody listening behind it.
    drop(std::os::unix::net::UnixListener::bind(&path).unwrap());
    let error = SandboxdClient::connect(&path).await.unwrap_err();
    assert_eq!(
        error.to_string(),
        format!("daemon not running at {}", path.display())
    );
}

#[tokio::test]
async fn inputs_are_checked_before_sending() {
    let path = socket_path();
    let behaviour = behaviour();
    let instance = start(&path, &behaviour);
    let client = SandboxdClient::connect(&path).await.unwrap();

    let error = client.ensure_session_sandbox("", &env()).await.unwrap_err();
    assert!(
        matches!(&error, ClientError::Sandbox(SandboxError::InvalidArgument(m)) if m.contains("session_id")),
        "{error}"
    );
    let bad_class = SandboxEnv {
        caller_class: "Not Valid".into(),
        ..env()
    };
    let error = client
        .ensure_workflow_sandbox("wf", &bad_class)
        .await
        .unwrap_err();
    assert!(error.to_string().contains("caller_class"), "{error}");
    let error = client
        .ensure(Scope::Connect, "r1", &env())
        .await
        .unwrap_err();
    assert!(error.to_string().contains("create_connect"), "{error}");
    let error = client
        .create_connect_sandbox("a\0b", &env())
        .await
        .unwrap_err();
    assert!(error.to_string().contains("request_id"), "{error}");
    assert_eq!(behaviour.ensures.load(Ordering::SeqCst), 0);
    assert_eq!(behaviour.creates.load(Ordering::SeqCst), 0);
    instance.stop().await;
}

#[tokio::test]
async fn calls_share_one_connection_and_run_concurrently() {
    let path = socket_path();
    let behaviour = behaviour();
    behaviour.status_delay_ms.store(300, Ordering::SeqCst);
    let instance = start(&path, &behaviour);
    let client = SandboxdClient::connect(&path).await.unwrap();

    let started = Instant::now();
    let calls = (0..10).map(|_| {
        let client = client.clone();
        async move { client.status().await }
    });
    for result in futures::future::join_all(calls).await {
        result.unwrap();
    }
    assert!(
        started.elapsed() < Duration::from_millis(1500),
        "10 × 300 ms calls took {:?}: they did not overlap",
        started.elapsed()
    );
    instance.stop().await;
}

#[tokio::test]
async fn a_slow_call_hits_the_deadline() {
    let path = socket_path();
    let behaviour = behaviour();
    behaviour.status_delay_ms.store(5_000, Ordering::SeqCst);
    let instance = start(&path, &behaviour);
    let client = SandboxdClient::connect(&path)
        .await
        .unwrap()
        .with_deadline(Duration::from_millis(200));
    assert_eq!(client.deadline(), Duration::from_millis(200));

    let started = Instant::now();
    assert_eq!(
        client.status().await.unwrap_err(),
        ClientError::DeadlineExceeded
    );
    assert!(started.elapsed() < Duration::from_secs(2));
    instance.stop().await;
}

#[tokio::test]
async fn deadlines_are_clamped_to_ten_minutes() {
    let path = socket_path();
    let behaviour = behaviour();
    let instance = start(&path, &behaviour);
    let client = SandboxdClient::builder()
        .socket(path.to_path_buf())
        .deadline(Duration::from_secs(3600))
        .connect()
        .await
        .unwrap();
    assert_eq!(client.deadline(), Duration::from_secs(600));
    instance.stop().await;
}

#[tokio::test]
async fn idle_connections_are_replaced_after_a_restart() {
    let path = socket_path();
    let behaviour = behaviour();
    let instance = start(&path, &behaviour);
    let client = SandboxdClient::connect(&path).await.unwrap();
    client.status().await.unwrap();

    instance.stop().await;
    let instance = start(&path, &behaviour);
    // Idempotent and non-idempotent calls alike: nothing was sent on the
    // dead connection, so opening a fresh one first is safe for both.
    client.status().await.unwrap();
    instance.stop().await;
    let instance = start(&path, &behaviour);
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert_eq!(
        client.create_connect_sandbox("r2", &env()).await.unwrap(),
        "connect-r2"
    );
    assert_eq!(behaviour.creates.load(Ordering::SeqCst), 1);
    instance.stop().await;
}

/// Makes `call` on a fresh connection to a stand-in that hangs it, waits
/// until `received` shows the daemon got it, then "crashes" the daemon with
/// the call in flight and brings it back. Returns the restarted instance,
/// the client and the call's outcome, so each test can judge the resend
/// rule for its kind of call.
async fn call_lost_in_a_crash<T, Call, Outcome>(
    path: &Path,
    behaviour: &Arc<Behaviour>,
    received: fn(&Behaviour) -> &AtomicUsize,
    call: Call,
) -> (Instance, SandboxdClient, T)
where
    Call: FnOnce(SandboxdClient) -> Outcome,
    Outcome: Future<Output = T> + Send + 'static,
    T: Send + 'static,
{
    behaviour.hang.store(true, Ordering::SeqCst);
    let instance = start(path, behaviour);
    let client = SandboxdClient::connect(path).await.unwrap();

    let call = tokio::spawn(call(client.clone()));
    while received(behaviour).load(Ordering::SeqCst) == 0 {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    behaviour.hang.store(false, Ordering::SeqCst);
    instance.stop().await;
    let instance = start(path, behaviour);

    (instance, client, call.await.unwrap())
}

#[tokio::test]
async fn an_idempotent_call_lost_in_flight_is_resent_once() {
    let path = socket_path();
    let behaviour = behaviour();
    let (instance, _client, result) = call_lost_in_a_crash(
        &path,
        &behaviour,
        |behaviour| &behaviour.ensures,
        |client| async move { client.ensure_session_sandbox("abc", &env()).await },
    )
    .await;

    let report = result.unwrap();
    assert_eq!(report.state, ProbeState::Running);
    assert_eq!(
        behaviour.ensures.load(Ordering::SeqCst),
        2,
        "sent once, resent once"
    );
    instance.stop().await;
}

#[tokio::test]
async fn create_connect_lost_in_flight_is_never_resent() {
    let path = socket_path();
    let behaviour = behaviour();
    let (instance, client, result) = call_lost_in_a_crash(
        &path,
        &behaviour,
        |behaviour| &behaviour.creates,
        |client| async move { client.create_connect_sandbox("r3", &env()).await },
    )
    .await;

    let error = result.unwrap_err();
    assert!(matches!(error, ClientError::Transport(_)), "{error:?}");
    assert_eq!(behaviour.creates.load(Ordering::SeqCst), 1, "never resent");
    // The next call reconnects on its own.
    assert_eq!(
        client.probe(Scope::Connect, "r3").await.unwrap(),
        ProbeState::Stopped
    );
    instance.stop().await;
}

#[tokio::test]
async fn a_daemon_that_stays_down_is_reported_as_not_running() {
    let path = socket_path();
    let behaviour = behaviour();
    let instance = start(&path, &behaviour);
    let client = SandboxdClient::connect(&path).await.unwrap();
    instance.stop().await;
    std::fs::remove_file(&path).unwrap();

    let error = client.status().await.unwrap_err();
    assert_eq!(
        error,
        ClientError::NotRunning {
            path: path.to_path_buf()
        }
    );
}
