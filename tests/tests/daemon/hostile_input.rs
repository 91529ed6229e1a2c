//! Hostile input on the socket: path-like and NUL ids, garbage bytes, a
//! huge length header, absurd deadlines. Each must be refused or contained
//! with nothing created, and the daemon must go on serving everyone else.

use std::time::{Duration, Instant};

use sandboxd_client::{ClientError, ProbeState, SandboxError, Scope};
use sandboxd_protocol::naming;
use sandboxd_protocol::service::{SandboxdRequest, SandboxdResponse};
use sandboxd_tests::{
    context, dir_entries, read_response, request_frame, runner_env, sandbox_env, tarpc_client,
    wait_for_runner, Options, TestDaemon,
};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::UnixStream;

const CALL: Duration = Duration::from_secs(20);

/// Asserts nothing was created: no workspace, log, ledger record or process.
fn assert_nothing_created(daemon: &TestDaemon) {
    assert!(
        daemon.workspaces().is_empty(),
        "workspaces: {:?}",
        daemon.workspaces()
    );
    assert!(
        daemon.trash_entries().is_empty(),
        "trash: {:?}",
        daemon.trash_entries()
    );
    let logs = daemon.log_files();
    assert!(logs.is_empty(), "logs/ holds {logs:?}");
    // The journal exists from start-up; no record may ever have reached it.
    let journal = std::fs::read_to_string(daemon.ledger_journal()).unwrap();
    assert!(journal.is_empty(), "the ledger journal holds:\n{journal}");
    assert!(
        daemon.leftover_processes().is_empty(),
        "processes were started: {:?}",
        daemon.leftover_processes()
    );
}

fn expect_invalid<T: std::fmt::Debug>(what: &str, result: Result<T, SandboxError>) -> String {
    match result {
        Err(SandboxError::InvalidArgument(message)) => message,
        other => panic!("{what}: expected invalid argument, got {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn path_nul_control_empty_and_overlong_ids_are_rejected_by_the_daemon_with_nothing_created() {
    let daemon = TestDaemon::start(Options::default());
    // The bare tarpc stub skips the client library's own checks, so these reach the daemon.
    let rpc = tarpc_client(daemon.socket()).await;
    let env = sandbox_env("session:x", "tok");
    let long = "a".repeat(254);
    for id in [
        "../../x",
        "..",
        "a\0b",
        "\0",
        "",
        "line\nbreak",
        "tab\there",
        long.as_str(),
    ] {
        let shown = format!("{id:?}");
        let message = expect_invalid(
            &shown,
            rpc.ensure(context(CALL), Scope::Session, id.into(), env.clone())
                .await
                .unwrap(),
        );
        assert!(
            message.contains("id"),
            "the error names the field: {message}"
        );
        expect_invalid(
            &shown,
            rpc.ensure(context(CALL), Scope::Workflow, id.into(), env.clone())
                .await
                .unwrap(),
        );
        expect_invalid(
            &shown,
            rpc.create_connect(context(CALL), id.into(), env.clone())
                .await
                .unwrap(),
        );
        expect_invalid(
            &shown,
            rpc.deprovision(context(CALL), Scope::Session, id.into(), false)
                .await
                .unwrap(),
        );
        expect_invalid(
            &shown,
            rpc.deprovision_connect(context(CALL), id.into())
                .await
                .unwrap(),
        );
        expect_invalid(
            &shown,
            rpc.probe(context(CALL), Scope::Session, id.into())
                .await
                .unwrap(),
        );
        expect_invalid(
            &shown,
            rpc.describe(context(CALL), Scope::Session, id.into())
                .await
                .unwrap(),
        );
    }
    // A bad environment is refused the same way.
    let bad_envs = [
        sandboxd_protocol::SandboxEnv {
            task_queue: String::new(),
            ..env.clone()
        },
        sandboxd_protocol::SandboxEnv {
            task_queue: "q\0".into(),
            ..env.clone()
        },
        sandboxd_protocol::SandboxEnv {
            caller_class: "User Class".into(),
            ..env.clone()
        },
        sandboxd_protocol::SandboxEnv {
            caller_class: String::new(),
            ..env.clone()
        },
        sandboxd_protocol::SandboxEnv {
            stigmer_token: sandboxd_protocol::Token::new("tok\0en"),
            ..env.clone()
        },
    ];
    for bad in bad_envs {
        let what = format!("{bad:?}");
        expect_invalid(
            &what,
            rpc.ensure(context(CALL), Scope::Session, "ok-id".into(), bad.clone())
                .await
                .unwrap(),
        );
        expect_invalid(
            &what,
            rpc.create_connect(context(CALL), "ok-req".into(), bad)
                .await
                .unwrap(),
        );
    }
    assert_nothing_created(&daemon);

    // The client library refuses them before sending, with the same kind.
    let client = daemon.client().await;
    match client.ensure_session_sandbox("a\0b", &env).await {
        Err(ClientError::Sandbox(SandboxError::InvalidArgument(message))) => {
            assert!(
                message.contains("session_id") && message.contains("NUL"),
                "{message}"
            )
        }
        other => panic!("expected invalid argument, got {other:?}"),
    }
    assert!(matches!(
        client.create_connect_sandbox("r\0", &env).await,
        Err(ClientError::Sandbox(SandboxError::InvalidArgument(_)))
    ));
    assert_nothing_created(&daemon);
    assert!(client.status().await.is_ok());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn path_like_ids_never_escape_the_state_dir() {
    let daemon = TestDaemon::start(Options::default());
    let client = daemon.client().await;
    let before = dir_entries(daemon.dir());
    // Anything path-like is refused before any side effect.
    for id in [
        "../../x",
        "../x",
        "..",
        ".",
        "/etc/passwd",
        "a/../../b",
        "x/y",
    ] {
        match client
            .ensure_session_sandbox(id, &sandbox_env("session:path", ""))
            .await
        {
            Err(ClientError::Sandbox(SandboxError::InvalidArgument(message))) => {
                assert!(message.contains("session_id"), "{id:?}: {message}");
                assert!(!daemon.workspace(Scope::Session, id).exists());
            }
            other => panic!("ensure {id:?} must be refused, got {other:?}"),
        }
    }
    // Dots that are not a path component are fine, and still only ever
    // become a hashed base name on disk.
    let ids = ["..x", "a..b", ".hidden"];
    for id in ids {
        let report = client
            .ensure_session_sandbox(id, &sandbox_env("session:path", ""))
            .await
            .unwrap_or_else(|error| panic!("ensure {id:?}: {error}"));
        let workspace = daemon.workspace(Scope::Session, id);
        wait_for_runner(&workspace, report.pid.unwrap());
        assert_eq!(runner_env(&workspace)["WORKSPACE_ROOT_DIR"], "/workspace");
        let info = client.describe(Scope::Session, id).await.unwrap();
        assert_eq!(info.id, id, "the full id is kept");
        assert_eq!(info.name, naming::base_name(Scope::Session, id));
    }
    assert_eq!(
        dir_entries(daemon.dir()),
        before,
        "something was created outside the state dir"
    );
    for escaped in ["x", "b", "etc", "y", "passwd"] {
        assert!(
            !daemon.state_dir().join(escaped).exists(),
            "{escaped} escaped into the state dir"
        );
    }
    for name in daemon.log_files() {
        assert!(
            name.starts_with("sbx-ses-") && name.ends_with(".log"),
            "a log not named by its base name: {name:?}"
        );
    }
    for name in daemon.workspaces() {
        let ok = name.len() == 20
            && name.starts_with("sbx-ses-")
            && name[8..].bytes().all(|b| b.is_ascii_hexdigit());
        assert!(ok, "a workspace not named by its base name: {name:?}");
    }
    for id in ids {
        client.deprovision_session_sandbox(id).await.unwrap();
    }
    // A deprovision answers at the kill; the workspaces go right after.
    assert!(
        sandboxd_tests::wait_until(std::time::Duration::from_secs(30), || daemon
            .workspaces()
            .is_empty()),
        "{:?}",
        daemon.workspaces()
    );
    assert!(std::path::Path::new("/etc/passwd").exists());
}

/// Reads until the daemon closes the connection; panics if it does not
/// within 15 s. Returns what it sent first (nothing is expected).
async fn expect_closed(stream: &mut UnixStream, what: &str) -> Vec<u8> {
    let mut received = Vec::new();
    let mut buffer = [0u8; 4096];
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        match tokio::time::timeout(left, stream.read(&mut buffer)).await {
            Err(_) => panic!("{what}: the daemon kept the connection open for 15 s"),
            Ok(Ok(0)) | Ok(Err(_)) => return received,
            Ok(Ok(n)) => received.extend_from_slice(&buffer[..n]),
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn garbage_and_oversized_frames_drop_that_connection_only() {
    let daemon = TestDaemon::start(Options::default());
    let bystander = daemon.client().await;
    let report = bystander
        .ensure_session_sandbox("bystander", &sandbox_env("session:b", ""))
        .await
        .unwrap();

    let mut body = vec![0xffu8; 64];
    body.extend_from_slice(b"\x00\x01garbage\xde\xad\xbe\xef");
    let mut framed_garbage = (body.len() as u32).to_be_bytes().to_vec();
    framed_garbage.extend_from_slice(&body);
    let mut hundred_mib = (100u32 * 1024 * 1024).to_be_bytes().to_vec();
    hundred_mib.extend_from_slice(&[0x5a; 4096]);
    let cases: [(&str, Vec<u8>); 4] = [
        ("a frame of garbage", framed_garbage),
        (
            "an HTTP request",
            b"GET / HTTP/1.1\r\nHost: sandboxd\r\n\r\n".to_vec(),
        ),
        ("a 100 MiB length header", hundred_mib),
        (
            "a 4 GiB length header",
            vec![0xff, 0xff, 0xff, 0xff, 1, 2, 3],
        ),
    ];
    for (what, bytes) in cases {
        let mut stream = UnixStream::connect(daemon.socket()).await.unwrap();
        // The daemon may close before it has read everything: a failed write is fine.
        let _ = stream.write_all(&bytes).await;
        let _ = stream.flush().await;
        let answer = expect_closed(&mut stream, what).await;
        assert!(
            answer.len() < 1024,
            "{what}: the daemon answered {} bytes",
            answer.len()
        );

        // The next client is served, and so is the one connected all along.
        let next = daemon.client().await;
        assert_eq!(
            next.probe(Scope::Session, "bystander").await.unwrap(),
            ProbeState::Running,
            "after {what}"
        );
        assert!(bystander.status().await.is_ok(), "after {what}");
    }
    let again = bystander
        .ensure_session_sandbox("bystander", &sandbox_env("session:b", ""))
        .await
        .unwrap();
    assert_eq!(
        (again.created, again.pid),
        (false, report.pid),
        "the runner was untouched"
    );
}

/// Sends one request with a deadline of `secs` seconds on a fresh
/// connection and returns the answer (`None`: the connection was dropped).
async fn call_with_deadline(
    daemon: &TestDaemon,
    secs: u64,
    request: SandboxdRequest,
) -> Option<SandboxdResponse> {
    let mut stream = UnixStream::connect(daemon.socket()).await.unwrap();
    stream
        .write_all(&request_frame(7, secs, request))
        .await
        .unwrap();
    let response = tokio::time::timeout(Duration::from_secs(30), read_response(&mut stream))
        .await
        .expect("the daemon neither answered nor closed the connection within 30 s")?;
    assert_eq!(response.request_id, 7);
    Some(
        response
            .message
            .unwrap_or_else(|error| panic!("the daemon aborted the call: {error:?}")),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_with_a_hundred_year_deadline_is_served() {
    // What `ctx.deadline = Instant::now() + 100 years` puts on the wire (a
    // tarpc client cannot send it itself: its own deadline queue panics).
    const CENTURY: u64 = 100 * 365 * 86400;
    let mut daemon = TestDaemon::start(Options::default());
    match call_with_deadline(&daemon, CENTURY, SandboxdRequest::Status {}).await {
        Some(SandboxdResponse::Status(Ok(status))) => assert_eq!(status.driver, "local-process"),
        other => panic!("status with a 100-year deadline: {other:?}"),
    }
    let env = sandbox_env("session:forever", "");
    let request = SandboxdRequest::Ensure {
        scope: Scope::Session,
        id: "forever".into(),
        env,
    };
    match call_with_deadline(&daemon, CENTURY, request).await {
        Some(SandboxdResponse::Ensure(Ok(report))) => assert!(report.created, "{report:?}"),
        other => panic!("ensure with a 100-year deadline: {other:?}"),
    }
    let request = SandboxdRequest::Deprovision {
        scope: Scope::Session,
        id: "forever".into(),
        keep_workspace: false,
    };
    match call_with_deadline(&daemon, CENTURY, request).await {
        Some(SandboxdResponse::Deprovision(Ok(report))) => {
            assert!(report.was_present, "{report:?}")
        }
        other => panic!("deprovision with a 100-year deadline: {other:?}"),
    }
    assert!(daemon.is_running());
    assert!(
        daemon.client().await.status().await.is_ok(),
        "still serving everyone"
    );
    let log = daemon.log_text();
    assert!(
        !log.contains("panicked"),
        "the daemon panicked on a long deadline:\n{log}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deadline_beyond_any_clock_does_not_take_the_daemon_down() {
    let mut daemon = TestDaemon::start(Options::default());
    for secs in [u64::MAX, u64::MAX / 2, u64::from(u32::MAX)] {
        // Answered (the deadline clamped) or dropped are both acceptable.
        let answer = call_with_deadline(&daemon, secs, SandboxdRequest::Status {}).await;
        assert!(
            matches!(answer, None | Some(SandboxdResponse::Status(Ok(_)))),
            "deadline of {secs} s: {answer:?}"
        );
        assert!(
            daemon.is_running(),
            "the daemon died on a deadline of {secs} s; log:\n{}",
            daemon.log_text()
        );
        assert!(
            daemon.client().await.status().await.is_ok(),
            "the next client is served"
        );
    }
    let report = daemon
        .client()
        .await
        .ensure_session_sandbox("after", &sandbox_env("session:after", ""))
        .await
        .unwrap();
    assert!(report.created);
    let log = daemon.log_text();
    assert!(
        !log.contains("panicked"),
        "the daemon panicked on a huge deadline:\n{log}"
    );
}
