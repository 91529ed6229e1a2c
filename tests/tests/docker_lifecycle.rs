//! Pause and resume on the docker tier: the Engine's pause and unpause.
//! A paused container is `paused` to the engine, `stopped` to `probe`, and
//! `describe` says since when; `ensure` resumes the same container with
//! the same generation; a paused one deprovisions cleanly. Skipped loudly
//! without an engine, as the other docker tests are.

use sandboxd_client::{EventKind, ProbeState, Scope};
use sandboxd_protocol::naming::base_name;
use sandboxd_tests::docker_image::{
    container_status, docker_options, engine_ready, unique_id, Cleanup,
};
use sandboxd_tests::events::{events_now, wait_for_event};
use sandboxd_tests::{sandbox_env, TestDaemon};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_paused_container_is_stopped_to_probe_and_ensure_resumes_it() {
    let test = "a_paused_container_is_stopped_to_probe_and_ensure_resumes_it";
    if !engine_ready(test) {
        return;
    }
    let id = unique_id("pause");
    let _cleanup = Cleanup::new(&[&id]);
    let name = base_name(Scope::Session, &id);
    let env = sandbox_env(&format!("session:{id}"), "tok");
    let daemon = TestDaemon::start(docker_options(""));
    let client = daemon.client().await;
    let first = client.ensure(Scope::Session, &id, &env).await.unwrap();
    assert!(first.created);
    let container = client
        .describe(Scope::Session, &id)
        .await
        .unwrap()
        .container_id;
    let cursor = events_now(&client).await;

    let paused = client.pause(Scope::Session, &id).await.unwrap();
    assert!(
        paused.changed && paused.paused_since_unix_ms.is_some(),
        "{paused:?}"
    );
    assert_eq!(paused.generation, first.generation);
    assert_eq!(container_status(&name).as_deref(), Some("paused"));
    assert_eq!(
        client.probe(Scope::Session, &id).await.unwrap(),
        ProbeState::Stopped
    );
    let info = client.describe(Scope::Session, &id).await.unwrap();
    assert_eq!(info.paused_since_unix_ms, paused.paused_since_unix_ms);
    assert!(
        !client.pause(Scope::Session, &id).await.unwrap().changed,
        "idempotent"
    );
    let described = daemon.sandboxctl(&["describe", "session", &id]);
    assert!(String::from_utf8_lossy(&described.stdout).contains("paused since"));
    wait_for_event(&client, Some(cursor.clone()), |event| {
        event.kind == EventKind::Paused && event.id == id
    })
    .await;

    let resumed = client.ensure(Scope::Session, &id, &env).await.unwrap();
    assert!(!resumed.created, "{resumed:?}");
    assert_eq!(resumed.generation, first.generation);
    assert_eq!(container_status(&name).as_deref(), Some("running"));
    let info = client.describe(Scope::Session, &id).await.unwrap();
    assert_eq!(info.container_id, container, "the same container");
    assert_eq!(info.paused_since_unix_ms, None);
    wait_for_event(&client, Some(cursor), |event| {
        event.kind == EventKind::Resumed && event.id == id
    })
    .await;

    // Through the CLI, and a paused container's deprovision.
    let out = daemon.sandboxctl(&["pause", "session", &id]);
    assert!(out.status.success(), "{out:?}");
    let out = daemon.sandboxctl(&["resume", "session", &id]);
    assert!(out.status.success(), "{out:?}");
    assert_eq!(container_status(&name).as_deref(), Some("running"));
    client.pause(Scope::Session, &id).await.unwrap();
    assert!(
        client
            .deprovision(Scope::Session, &id, false)
            .await
            .unwrap()
            .was_present
    );
    assert_eq!(container_status(&name), None);
    let error = client.resume(Scope::Session, &id).await.unwrap_err();
    assert!(error.to_string().contains("no running runner"), "{error}");
}
