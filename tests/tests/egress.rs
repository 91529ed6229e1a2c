//! The egress posture through the real daemon: what status and describe
//! say, and failing closed — a posture whose rules cannot be installed
//! refuses every ensure, naming why, and starts nothing.
//!
//! The kernel rules themselves (strict refusing loopback, link-local
//! refused in a namespace of the test's own) are exercised against real
//! sockets in the daemon's `egress::tests`.

use sandboxd_client::{ClientError, ProbeState, SandboxError, Scope};
use sandboxd_tests::{sandbox_env, Options, TestDaemon};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_posture_that_cannot_be_installed_refuses_every_ensure_naming_why() {
    // The daemon's PATH holds no nft: the rules cannot be installed.
    let daemon = TestDaemon::start(Options {
        egress: Some("strict".to_string()),
        env: vec![(
            "PATH".to_string(),
            "/nonexistent/sandboxd-egress-test".to_string(),
        )],
        ..Options::default()
    });
    let client = daemon.client().await;

    let env = sandbox_env("session:closed-1", "tok-closed");
    let error = client
        .ensure_session_sandbox("closed-1", &env)
        .await
        .unwrap_err();
    let ClientError::Sandbox(SandboxError::Unavailable(message)) = &error else {
        panic!("not unavailable: {error:?}")
    };
    assert!(
        message.contains("egress posture 'strict' is not in force, so no sandbox may start"),
        "{message}"
    );
    assert!(message.contains("nft"), "{message}");
    assert_eq!(
        client.probe(Scope::Session, "closed-1").await.unwrap(),
        ProbeState::Absent,
        "a refused ensure starts nothing"
    );
    assert!(daemon.workspaces().is_empty(), "{:?}", daemon.workspaces());

    // The daemon keeps serving, and says why.
    let status = client.status().await.unwrap();
    assert_eq!(status.egress.posture, "strict");
    assert!(!status.egress.enforced);
    assert!(
        status.egress.mechanism.starts_with("NOT ENFORCED"),
        "{:?}",
        status.egress
    );
    let text = String::from_utf8_lossy(&daemon.sandboxctl(&["status"]).stdout).into_owned();
    assert!(text.contains("egress:    strict (NOT ENFORCED"), "{text}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn egress_none_is_said_to_be_unrestricted() {
    let daemon = TestDaemon::start(Options::default());
    let client = daemon.client().await;
    let status = client.status().await.unwrap();
    assert_eq!(status.egress.posture, "none");
    assert!(!status.egress.enforced);
    assert!(
        status.egress.mechanism.starts_with("unrestricted"),
        "{:?}",
        status.egress
    );

    let env = sandbox_env("session:open-1", "tok-open");
    client.ensure_session_sandbox("open-1", &env).await.unwrap();
    let info = client.describe(Scope::Session, "open-1").await.unwrap();
    assert_eq!(info.egress.as_ref(), Some(&status.egress));
    let text =
        String::from_utf8_lossy(&daemon.sandboxctl(&["describe", "session", "open-1"]).stdout)
            .into_owned();
    assert!(text.contains("egress:       none (unrestricted"), "{text}");
}
