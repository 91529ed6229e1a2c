//! The event stream and fenced calls on the docker tier, against the real
//! engine: exits learnt from the engine's `/events` with their reason (a
//! code, the OOM killer, a deprovision), adoption after a daemon restart
//! with the uid kept on the container's label, and a stale deprovision
//! refused. Without an engine every test prints SKIPPED and passes (as
//! docker_ensure.rs; `SANDBOXD_REQUIRE_DOCKER=1` makes that a failure).

use sandboxd_client::{ClientError, EventKind, ExitReason, Expectation, SandboxError, Scope};
use sandboxd_protocol::naming::base_name;
use sandboxd_tests::docker_image::{
    container_status, docker_options, engine_ready, inspect, unique_id, volume_dir, Cleanup,
};
use sandboxd_tests::events::{events_now, wait_for_event};
use sandboxd_tests::{sandbox_env, wait_until, TestDaemon};

fn fresh(test: &str, prefix: &str) -> Option<(String, Cleanup)> {
    if !engine_ready(test) {
        return None;
    }
    let id = unique_id(prefix);
    let cleanup = Cleanup::new(&[id.as_str()]);
    Some((id, cleanup))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_container_that_exits_3_is_an_exited_event_from_the_engine() {
    let Some((id, _cleanup)) = fresh("docker_exit_3_event", "ev3") else {
        return;
    };
    let daemon = TestDaemon::start(docker_options(r#"command = ["--exit-code", "3"]"#));
    let client = daemon.client().await;
    let since = events_now(&client).await;
    let report = client
        .ensure(
            Scope::Workflow,
            &id,
            &sandbox_env(&format!("wfexec:{id}"), ""),
        )
        .await
        .unwrap();
    assert_eq!(report.uid.len(), 32, "{report:?}");
    let name = base_name(Scope::Workflow, &id);
    let container = inspect("container", &name).unwrap();
    assert_eq!(
        container["Config"]["Labels"]["stigmer.ai/uid"],
        report.uid.as_str(),
        "the uid is on the container's label"
    );
    let (exited, before) = wait_for_event(&client, Some(since), |event| {
        event.kind == EventKind::Exited && event.id == id
    })
    .await;
    assert_eq!(
        exited.exit.map(|exit| exit.reason),
        Some(ExitReason::Exited { code: 3 }),
        "{}",
        daemon.log_text()
    );
    assert_eq!(
        (exited.uid.as_str(), exited.generation),
        (report.uid.as_str(), 1)
    );
    assert!(
        before
            .iter()
            .any(|event| event.kind == EventKind::Started && event.id == id),
        "{before:#?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_oom_killed_container_is_an_out_of_memory_event() {
    let Some((id, _cleanup)) = fresh("docker_oom_event", "evoom") else {
        return;
    };
    let daemon = TestDaemon::start(docker_options(
        r#"memory = "32m"
command = ["--allocate-mib", "128", "--allocate-when", "allocate-now"]"#,
    ));
    let client = daemon.client().await;
    let since = events_now(&client).await;
    client
        .ensure(
            Scope::Session,
            &id,
            &sandbox_env(&format!("session:{id}"), ""),
        )
        .await
        .unwrap();
    let workspace = volume_dir(&format!("{}-workspace", base_name(Scope::Session, &id)));
    assert!(
        wait_until(std::time::Duration::from_secs(20), || workspace
            .join("pid")
            .is_file()),
        "the runner started"
    );
    std::fs::write(workspace.join("allocate-now"), "").unwrap();
    let (exited, _) = wait_for_event(&client, Some(since), |event| {
        event.kind == EventKind::Exited && event.id == id
    })
    .await;
    let exit = exited.exit.expect("an exit carries its proof");
    assert_eq!(
        exit.reason,
        ExitReason::OutOfMemory { limit_bytes: None },
        "{exit:?}\n{}",
        daemon.log_text()
    );
    assert_eq!(exit.code, Some(137));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deprovision_is_announced_and_a_stale_one_refused() {
    let Some((id, _cleanup)) = fresh("docker_deprovision_event", "evdep") else {
        return;
    };
    let daemon = TestDaemon::start(docker_options(""));
    let client = daemon.client().await;
    let env = sandbox_env(&format!("session:{id}"), "tok");
    let old = client.ensure(Scope::Session, &id, &env).await.unwrap();
    client
        .deprovision(Scope::Session, &id, false)
        .await
        .unwrap();
    let new = client.ensure(Scope::Session, &id, &env).await.unwrap();
    assert_ne!(old.uid, new.uid, "a new incarnation");
    let stale = Expectation {
        uid: Some(old.uid.clone()),
        generation: None,
    };
    match client
        .deprovision_fenced(Scope::Session, &id, false, &stale)
        .await
    {
        Err(ClientError::Sandbox(SandboxError::Conflict(message))) => {
            assert!(message.contains(&new.uid), "{message}")
        }
        other => panic!("expected a conflict, got {other:?}"),
    }
    let name = base_name(Scope::Session, &id);
    assert_eq!(
        inspect("container", &name)
            .and_then(|c| c["Id"].as_str().map(String::from))
            .as_deref()
            .and_then(container_status)
            .as_deref(),
        Some("running"),
        "the new sandbox keeps running"
    );
    let since = events_now(&client).await;
    let current = Expectation {
        uid: Some(new.uid.clone()),
        generation: Some(new.generation),
    };
    client
        .deprovision_fenced(Scope::Session, &id, false, &current)
        .await
        .unwrap();
    let (_, before) = wait_for_event(&client, Some(since.clone()), |event| {
        event.kind == EventKind::Deprovisioned && event.id == id
    })
    .await;
    drop(before);
    let (exited, _) = wait_for_event(&client, Some(since), |event| {
        event.kind == EventKind::Exited && event.id == id
    })
    .await;
    assert_eq!(
        exited.exit.map(|exit| exit.reason),
        Some(ExitReason::Deprovisioned),
        "the engine's die of a container the daemon stopped"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_container_found_after_a_restart_is_adopted_with_its_uid() {
    let Some((id, _cleanup)) = fresh("docker_adopted_event", "evadopt") else {
        return;
    };
    let mut daemon = TestDaemon::start(docker_options(""));
    let client = daemon.client().await;
    let report = client
        .ensure(
            Scope::Session,
            &id,
            &sandbox_env(&format!("session:{id}"), "tok"),
        )
        .await
        .unwrap();
    drop(client);
    daemon.kill();
    daemon.launch();
    daemon.wait_ready();
    let client = daemon.client().await;
    let (adopted, _) = wait_for_event(&client, None, |event| {
        event.kind == EventKind::Adopted && event.id == id
    })
    .await;
    assert_eq!(
        (adopted.uid.as_str(), adopted.generation),
        (report.uid.as_str(), 1)
    );
    let again = client
        .ensure(
            Scope::Session,
            &id,
            &sandbox_env(&format!("session:{id}"), "tok"),
        )
        .await
        .unwrap();
    assert!(!again.created);
    assert_eq!(again.uid, report.uid, "re-adoption keeps the uid");
    client
        .deprovision(Scope::Session, &id, false)
        .await
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_container_that_ended_while_the_daemon_was_down_is_adopted_then_exited() {
    let Some((id, _cleanup)) = fresh("docker_ended_meanwhile_event", "evgone") else {
        return;
    };
    let mut daemon = TestDaemon::start(docker_options(""));
    let client = daemon.client().await;
    let report = client
        .ensure(
            Scope::Session,
            &id,
            &sandbox_env(&format!("session:{id}"), ""),
        )
        .await
        .unwrap();
    drop(client);
    daemon.kill();
    // Killed from outside while no daemon follows the engine's events.
    let container = base_name(Scope::Session, &id);
    sandboxd_tests::docker_image::docker_ok(&["kill", "--signal", "KILL", &container]);
    daemon.launch();
    daemon.wait_ready();
    let client = daemon.client().await;
    let (exited, before) = wait_for_event(&client, None, |event| {
        event.kind == EventKind::Exited && event.id == id
    })
    .await;
    assert!(
        before
            .iter()
            .any(|event| event.kind == EventKind::Adopted && event.id == id),
        "adopted first: {before:?}"
    );
    assert_eq!(exited.uid, report.uid);
    assert_eq!(
        exited.exit.map(|exit| exit.reason),
        Some(ExitReason::Signaled { signal: 9 }),
        "{exited:?}"
    );
    client
        .deprovision(Scope::Session, &id, false)
        .await
        .unwrap();
}

/// A stopped container started again with a new token is made anew for
/// the same incarnation: one `changed` event (same uid, the next
/// generation), and no `created`; started again with the same token it is
/// only `started`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_token_refreshed_on_a_stopped_container_is_a_changed_event() {
    let Some((id, _cleanup)) = fresh("docker_changed_event", "evchg") else {
        return;
    };
    let daemon = TestDaemon::start(docker_options(""));
    let client = daemon.client().await;
    let queue = format!("session:{id}");
    let first = client
        .ensure(Scope::Session, &id, &sandbox_env(&queue, "tok-old"))
        .await
        .unwrap();
    let name = base_name(Scope::Session, &id);
    sandboxd_tests::docker_image::docker_ok(&["stop", &name]);
    let since = events_now(&client).await;
    let refreshed_env = sandbox_env(&queue, "tok-new");
    let refreshed = client
        .ensure(Scope::Session, &id, &refreshed_env)
        .await
        .unwrap();
    assert_eq!(
        (refreshed.uid.as_str(), refreshed.generation),
        (first.uid.as_str(), 2),
        "the same incarnation, its next generation"
    );
    let (changed, before) = wait_for_event(&client, Some(since.clone()), |event| {
        event.kind == EventKind::Changed && event.id == id
    })
    .await;
    assert_eq!(
        (changed.uid.as_str(), changed.generation),
        (first.uid.as_str(), 2)
    );
    assert!(
        !before
            .iter()
            .any(|event| event.kind == EventKind::Created && event.id == id),
        "a refresh is not a new sandbox: {before:#?}"
    );

    sandboxd_tests::docker_image::docker_ok(&["stop", &name]);
    let since = events_now(&client).await;
    let restarted = client
        .ensure(Scope::Session, &id, &refreshed_env)
        .await
        .unwrap();
    assert_eq!(restarted.generation, 3);
    let (_, before) = wait_for_event(&client, Some(since), |event| {
        event.kind == EventKind::Started && event.id == id && event.generation == 3
    })
    .await;
    assert!(
        !before
            .iter()
            .any(|event| event.kind == EventKind::Changed && event.id == id),
        "the same token: a plain start, {before:#?}"
    );
}
