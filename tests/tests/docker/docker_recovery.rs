//! What outlives what on the docker tier, against the real engine:
//! containers outlive a killed or stopped daemon and the next one serves
//! them; deprovision removes container and volume (or keeps the
//! workspace), and again is a no-op; an unreachable engine is answered as
//! unavailable quickly and the driver reconnects by itself; a leaked
//! connect sandbox is reaped after its TTL; and start-up without a runner
//! image fails, naming what to set. Skipped loudly without an engine, as
//! the other docker tests are.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use sandboxd_client::{ClientError, LogStart, ProbeState, SandboxError, Scope};
use sandboxd_protocol::naming::base_name;
use sandboxd_tests::docker_image::{
    container_status, containers_of, docker_ok, docker_options, volume_dir, volumes_of,
    EngineProxy, TEST_IMAGE,
};
use sandboxd_tests::{eventually, make_test_dir, sandbox_env, wait_until, TestDaemon};

use crate::docker_support::{
    container_id, engine_and_fresh_ids, wait_for_runner_files, workspace_volume, CONNECT_SANDBOXES,
};

fn unavailable_message(result: Result<impl std::fmt::Debug, ClientError>) -> String {
    match result {
        Err(ClientError::Sandbox(SandboxError::Unavailable(message))) => message,
        other => panic!("expected unavailable, got {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn containers_outlive_a_killed_daemon_and_the_next_one_serves_them() {
    let test = "containers_outlive_a_killed_daemon_and_the_next_one_serves_them";
    let Some(([session, workflow], _cleanup)) = engine_and_fresh_ids(test, ["adopt-s", "adopt-w"])
    else {
        return;
    };
    let mut daemon = TestDaemon::start(docker_options(""));
    let client = daemon.client().await;
    let session_env = sandbox_env(&format!("session:{session}"), "tok-adopt");
    let workflow_env = sandbox_env(&format!("wfexec:{workflow}"), "tok-adopt");
    client
        .ensure_session_sandbox(&session, &session_env)
        .await
        .unwrap();
    client
        .ensure_workflow_sandbox(&workflow, &workflow_env)
        .await
        .unwrap();
    // One restart before the daemon dies, so its generation is 2.
    let session_name = base_name(Scope::Session, &session);
    docker_ok(&["stop", &session_name]);
    assert_eq!(
        client
            .ensure_session_sandbox(&session, &session_env)
            .await
            .unwrap()
            .generation,
        2
    );
    let session_container = container_id(&session_name);
    let workflow_container = container_id(&base_name(Scope::Workflow, &workflow));
    drop(client);

    daemon.kill();
    assert_eq!(
        container_status(&session_container).as_deref(),
        Some("running"),
        "containers outlive the daemon"
    );
    assert_eq!(
        container_status(&workflow_container).as_deref(),
        Some("running")
    );

    daemon.launch();
    daemon.wait_ready();
    let client = daemon.client().await;
    assert_eq!(
        client.probe(Scope::Session, &session).await.unwrap(),
        ProbeState::Running
    );
    assert_eq!(
        client.probe(Scope::Workflow, &workflow).await.unwrap(),
        ProbeState::Running
    );
    let again = client
        .ensure_session_sandbox(&session, &session_env)
        .await
        .unwrap();
    assert_eq!(
        (again.created, again.generation),
        (false, 2),
        "fast path, generation continued"
    );
    let again = client
        .ensure_workflow_sandbox(&workflow, &workflow_env)
        .await
        .unwrap();
    assert_eq!((again.created, again.generation), (false, 1));

    let listed = client.list(None).await.unwrap();
    let ours: Vec<_> = listed
        .iter()
        .filter(|info| info.id == session || info.id == workflow)
        .collect();
    assert_eq!(ours.len(), 2, "{listed:?}");
    for info in ours {
        assert_eq!(info.state, ProbeState::Running);
        let expected = if info.scope == Scope::Session {
            &session_container
        } else {
            &workflow_container
        };
        assert_eq!(info.container_id.as_ref(), Some(expected));
    }
    assert_eq!(
        containers_of(&session),
        std::slice::from_ref(&session_container),
        "no duplicate"
    );
    assert_eq!(
        containers_of(&workflow),
        std::slice::from_ref(&workflow_container),
        "no duplicate"
    );

    // A clean stop (SIGTERM) leaves them running too.
    drop(client);
    assert!(daemon.stop().success(), "log:\n{}", daemon.log_text());
    assert_eq!(
        container_status(&session_container).as_deref(),
        Some("running")
    );
    assert_eq!(
        container_status(&workflow_container).as_deref(),
        Some("running")
    );
    daemon.launch();
    daemon.wait_ready();
    let client = daemon.client().await;
    let again = client
        .ensure_session_sandbox(&session, &session_env)
        .await
        .unwrap();
    assert_eq!((again.created, again.generation), (false, 2));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deprovision_is_idempotent_and_removes_container_and_volume() {
    let test = "deprovision_is_idempotent_and_removes_container_and_volume";
    let Some(([id, kept], _cleanup)) = engine_and_fresh_ids(test, ["deprov", "deprov-keep"]) else {
        return;
    };
    // The runner ignores SIGTERM: every stop runs out the 1 s grace.
    let mut options = docker_options("command = [\"--ignore-term\"]");
    options.stop_grace = "1s".to_string();
    let daemon = TestDaemon::start(options);
    let client = daemon.client().await;
    let env = sandbox_env(&format!("session:{id}"), "tok-deprov");
    client.ensure_session_sandbox(&id, &env).await.unwrap();
    wait_for_runner_files(&volume_dir(&workspace_volume(Scope::Session, &id)));

    let started = Instant::now();
    let report = client.deprovision_session_sandbox(&id).await.unwrap();
    assert!(report.was_present && report.forced, "{report:?}");
    assert!(
        started.elapsed() >= Duration::from_secs(1),
        "SIGKILL only after the grace"
    );
    assert!(containers_of(&id).is_empty(), "container gone");
    assert!(volumes_of(&id).is_empty(), "volume gone");
    let again = client.deprovision_session_sandbox(&id).await.unwrap();
    assert!(!again.was_present && !again.forced, "{again:?}");
    assert_eq!(
        client.probe(Scope::Session, &id).await.unwrap(),
        ProbeState::Absent
    );

    // --keep-workspace keeps the volume, and the next runner finds its files.
    let kept_env = sandbox_env(&format!("wfexec:{kept}"), "");
    client
        .ensure_workflow_sandbox(&kept, &kept_env)
        .await
        .unwrap();
    let volume = workspace_volume(Scope::Workflow, &kept);
    let workspace = volume_dir(&volume);
    wait_for_runner_files(&workspace);
    assert!(
        client
            .deprovision(Scope::Workflow, &kept, true)
            .await
            .unwrap()
            .was_present
    );
    assert!(containers_of(&kept).is_empty());
    assert_eq!(volumes_of(&kept), std::slice::from_ref(&volume));
    assert!(workspace.join("env.json").is_file());
    assert!(
        client
            .deprovision(Scope::Workflow, &kept, false)
            .await
            .unwrap()
            .was_present
    );
    assert!(volumes_of(&kept).is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unreachable_engine_is_unavailable_quickly_and_the_driver_reconnects() {
    let test = "an_unreachable_engine_is_unavailable_quickly_and_the_driver_reconnects";
    let Some(([id], _cleanup)) = engine_and_fresh_ids(test, ["away"]) else {
        return;
    };
    let engine_dir = make_test_dir();
    let engine_socket: PathBuf = engine_dir.join("engine.sock");
    let address = format!("unix://{}", engine_socket.display());
    let daemon = TestDaemon::start(docker_options(&format!("host = \"{address}\"")));
    let client = daemon.client().await;
    let env = sandbox_env(&format!("session:{id}"), "tok-away");

    // Nothing at the address: the daemon serves, the engine's calls fail fast.
    let started = Instant::now();
    let message = unavailable_message(client.ensure_session_sandbox(&id, &env).await);
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "took {:?}",
        started.elapsed()
    );
    assert!(message.contains(&address), "{message}");
    let started = Instant::now();
    assert!(unavailable_message(client.probe(Scope::Session, &id).await).contains(&address));
    assert!(started.elapsed() < Duration::from_secs(2));
    let started = Instant::now();
    let tail = LogStart::Tail { lines: 10 };
    let logs = client.logs(Scope::Session, &id, tail, 1024).await;
    assert!(unavailable_message(logs).contains(&address));
    assert!(started.elapsed() < Duration::from_secs(2));
    let status = client
        .status()
        .await
        .expect("the daemon's own facts are served without the engine");
    assert!(
        status.driver_health.contains("UNREACHABLE") && status.driver_health.contains(&address),
        "{}",
        status.driver_health
    );

    // The engine comes back: the driver reconnects by itself.
    let proxy = EngineProxy::start(&engine_socket);
    let reconnected = eventually(Duration::from_secs(15), || {
        let (client, id, env) = (client.clone(), id.clone(), env.clone());
        async move { client.ensure_session_sandbox(&id, &env).await.is_ok() }
    })
    .await;
    assert!(
        reconnected,
        "no ensure succeeded after the engine came back; log:\n{}",
        daemon.log_text()
    );
    assert_eq!(
        client.probe(Scope::Session, &id).await.unwrap(),
        ProbeState::Running
    );

    // And goes away again.
    drop(proxy);
    let started = Instant::now();
    assert!(unavailable_message(client.probe(Scope::Session, &id).await).contains(&address));
    assert!(started.elapsed() < Duration::from_secs(2));
    let _ = std::fs::remove_dir_all(&engine_dir);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leaked_connect_sandbox_is_reaped_after_its_ttl() {
    let test = "a_leaked_connect_sandbox_is_reaped_after_its_ttl";
    // Taken first so that it is released last, after the cleanup.
    let _connect = CONNECT_SANDBOXES.lock().await;
    let Some(([request, session], _cleanup)) = engine_and_fresh_ids(test, ["leak", "leak-s"])
    else {
        return;
    };
    let daemon = TestDaemon::start(docker_options(
        "connect_ttl = \"2s\"\nconnect_creation_grace = \"1s\"",
    ));
    let client = daemon.client().await;
    client
        .ensure_session_sandbox(&session, &sandbox_env(&format!("session:{session}"), ""))
        .await
        .unwrap();
    let created = Instant::now();
    client
        .create_connect_sandbox(&request, &sandbox_env(&format!("mcp:{request}"), ""))
        .await
        .unwrap();
    assert_eq!(
        client.probe(Scope::Connect, &request).await.unwrap(),
        ProbeState::Running
    );

    let reaped = wait_until(Duration::from_secs(20), || {
        containers_of(&request).is_empty()
    });
    assert!(
        reaped,
        "the leaked connect sandbox is still there; log:\n{}",
        daemon.log_text()
    );
    assert!(
        created.elapsed() >= Duration::from_secs(2),
        "reaped before its TTL"
    );
    assert!(
        volumes_of(&request).is_empty(),
        "its scratch volume went with it"
    );
    let log = daemon.log_text();
    let line = log
        .lines()
        .find(|line| line.contains("removed a leaked connect sandbox"));
    assert!(
        line.is_some_and(|line| line.contains(&request)),
        "a log line names it:\n{log}"
    );
    assert_eq!(
        client.probe(Scope::Connect, &request).await.unwrap(),
        ProbeState::Absent
    );
    assert_eq!(
        client.probe(Scope::Session, &session).await.unwrap(),
        ProbeState::Running,
        "only connect sandboxes expire"
    );
}

#[test]
fn start_up_fails_clearly_without_a_runner_image() {
    // No engine needed: the configuration is refused before it is contacted.
    let mut options = docker_options("");
    options.extra_toml = options
        .extra_toml
        .replace(&format!("runner_image = \"{TEST_IMAGE}\"\n"), "");
    let mut daemon = TestDaemon::prepare(options);
    daemon.launch();
    let status = daemon
        .wait_exit(Duration::from_secs(20))
        .expect("sandboxd exits");
    assert!(!status.success(), "{status}");
    let log = daemon.log_text();
    assert!(
        log.contains("runner image") && log.contains("STIGMER_SANDBOX_RUNNER_IMAGE"),
        "the error names what to set:\n{log}"
    );
}
