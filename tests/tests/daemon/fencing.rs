//! Fenced calls on the process tier, end to end: an incarnation's uid is
//! new at each create and kept across respawns and daemon restarts, and a
//! caller that names an old incarnation is refused with `conflict` while
//! the one running now goes on untouched.

use std::time::Duration;

use sandboxd_client::{ClientError, Expectation, ProbeState, SandboxError, Scope};
use sandboxd_tests::{eventually, pid_is_gone, sandbox_env, start_session, Options, TestDaemon};

const TIMEOUT: Duration = Duration::from_secs(30);

fn expect(uid: &str, generation: Option<u64>) -> Expectation {
    Expectation {
        uid: Some(uid.to_string()),
        generation,
    }
}

fn conflict<T: std::fmt::Debug>(result: Result<T, ClientError>) -> String {
    match result {
        Err(ClientError::Sandbox(SandboxError::Conflict(message))) => message,
        other => panic!("expected a conflict, got {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stale_replicas_deprovision_is_refused_and_the_new_sandbox_keeps_running() {
    let daemon = TestDaemon::start(Options::default());
    let client = daemon.client().await;
    let env = sandbox_env("session:fence", "tok");
    let old = client.ensure(Scope::Session, "fence", &env).await.unwrap();
    assert_eq!(old.uid.len(), 32, "{old:?}");
    // Another replica deprovisions it and makes it anew: a new incarnation.
    client
        .deprovision(Scope::Session, "fence", false)
        .await
        .unwrap();
    let new = client.ensure(Scope::Session, "fence", &env).await.unwrap();
    assert!(new.created);
    assert_ne!(new.uid, old.uid, "a new incarnation gets a new uid");
    assert_eq!(
        new.generation, 1,
        "the generation starts again: only the uid tells them apart"
    );
    let pid = new.pid.unwrap();

    // The stale replica still believes in the old one.
    let message = conflict(
        client
            .deprovision_fenced(Scope::Session, "fence", false, &expect(&old.uid, Some(1)))
            .await,
    );
    assert!(
        message.contains(&old.uid) && message.contains(&new.uid),
        "names expected and actual: {message}"
    );
    let message = conflict(
        client
            .ensure_fenced(Scope::Session, "fence", &env, &expect(&old.uid, None))
            .await,
    );
    assert!(message.contains("nothing was changed"), "{message}");
    // A generation that is not the current one is refused as well.
    let stale_generation = Expectation {
        uid: None,
        generation: Some(7),
    };
    let message = conflict(
        client
            .deprovision_fenced(Scope::Session, "fence", false, &stale_generation)
            .await,
    );
    assert!(message.contains("generation 7"), "{message}");
    // The CLI says the same, exit 1.
    let cli = daemon.sandboxctl(&["deprovision", "session", "fence", "--expect-uid", &old.uid]);
    assert_eq!(cli.status.code(), Some(1), "{cli:?}");
    assert!(
        String::from_utf8_lossy(&cli.stderr).contains("conflict"),
        "{cli:?}"
    );
    // Nothing changed: the same runner runs, same uid and generation.
    let info = client.describe(Scope::Session, "fence").await.unwrap();
    assert_eq!(info.state, ProbeState::Running);
    assert_eq!(
        (info.pid, info.uid.as_str(), info.generation),
        (Some(pid), new.uid.as_str(), 1)
    );
    assert!(!pid_is_gone(pid));

    // The replica that saw the new one may deprovision it, from the CLI too.
    let cli = daemon.sandboxctl(&[
        "deprovision",
        "session",
        "fence",
        "--expect-uid",
        &new.uid,
        "--expect-generation",
        "1",
    ]);
    assert!(cli.status.success(), "{cli:?}\n{}", daemon.log_text());
    assert!(
        eventually(TIMEOUT, || async { pid_is_gone(pid) }).await,
        "the runner must be gone"
    );
    // Gone is a valid outcome of an expectation: a resend succeeds.
    let again = client
        .deprovision_fenced(Scope::Session, "fence", false, &expect(&new.uid, Some(1)))
        .await
        .unwrap();
    assert!(!again.was_present);
    // But ensuring an incarnation that is gone is a conflict, and makes none.
    let message = conflict(
        client
            .ensure_fenced(Scope::Session, "fence", &env, &expect(&new.uid, None))
            .await,
    );
    assert!(message.contains("does not exist"), "{message}");
    assert_eq!(
        client.probe(Scope::Session, "fence").await.unwrap(),
        ProbeState::Absent
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_uid_is_kept_across_a_respawn_and_a_daemon_restart() {
    let mut daemon = TestDaemon::start(Options::default());
    let client = daemon.client().await;
    let pid = start_session(&daemon, "keep").await;
    let first = client.describe(Scope::Session, "keep").await.unwrap();
    assert_eq!(first.uid.len(), 32);
    // The runner dies; the next ensure respawns the same incarnation.
    sandboxd_tests::procs::signal_pid(pid, nix::sys::signal::Signal::SIGKILL);
    assert!(
        eventually(TIMEOUT, || async {
            client.probe(Scope::Session, "keep").await.unwrap() == ProbeState::Absent
        })
        .await
    );
    let env = sandbox_env("q:keep", "tok");
    let respawned = client
        .ensure_fenced(
            Scope::Session,
            "keep",
            &env,
            &expect(&first.uid, Some(first.generation)),
        )
        .await
        .unwrap();
    assert!(respawned.created);
    assert_eq!(respawned.generation, 2);
    assert_eq!(respawned.uid, first.uid, "a respawn keeps the uid");
    // The daemon restarts (its runners stop with it; the workspace stays).
    drop(client);
    assert!(daemon.stop().success(), "{}", daemon.log_text());
    daemon.launch();
    daemon.wait_ready();
    let client = daemon.client().await;
    let after = client.ensure(Scope::Session, "keep", &env).await.unwrap();
    assert!(after.created);
    assert_eq!(after.uid, first.uid, "a daemon restart keeps the uid");
    let json = daemon.sandboxctl(&["--json", "describe", "session", "keep"]);
    let value: serde_json::Value = serde_json::from_slice(&json.stdout).unwrap();
    assert_eq!(value["uid"], first.uid.as_str(), "{value}");
    assert!(value["generation"].is_u64(), "{value}");
    client
        .deprovision(Scope::Session, "keep", false)
        .await
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_expected_uid_that_is_not_one_is_refused_before_anything() {
    let daemon = TestDaemon::start(Options::default());
    let client = daemon.client().await;
    let result = client
        .deprovision_fenced(Scope::Workflow, "w", false, &expect("not-a-uid", None))
        .await;
    match result {
        Err(ClientError::Sandbox(SandboxError::InvalidArgument(message))) => {
            assert!(message.contains("not-a-uid"), "{message}")
        }
        other => panic!("expected invalid argument, got {other:?}"),
    }
}
