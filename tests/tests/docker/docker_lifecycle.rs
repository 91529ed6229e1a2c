//! Pause and resume on the docker tier: the Engine's pause and unpause.
//! A paused container is `paused` to the engine, `stopped` to `probe`, and
//! `describe` says since when; `ensure` resumes the same container with
//! the same generation; a paused one deprovisions cleanly. And
//! `[lifecycle.*]` on docker: a quiet container is stopped (or paused) once
//! idle for the window, with the reason, while busy and printing ones are
//! left alone; `max_lifetime` ends a busy one, time paused not counted.
//! Every wait is for a condition (an event), never for a duration.
//! Skipped loudly without an engine, as the other docker tests are.

use sandboxd_client::{EventKind, ExitReason, ProbeState, Scope};
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

/// `[lifecycle.session]` `LIMITS` on the docker tier, the runner's work
/// named by its task queue (`busy`, `lines`, else quiet).
///
/// Each daemon is an instance of its own (`lc-TAG-PID`): a watcher acts on
/// every container of its instance, so one test's limits must not reach
/// the containers of another test's daemon running at the same time.
/// `limits` may go on with other `[lifecycle.*]` tables.
fn lifecycle_daemon(tag: &str, limits: &str) -> (TestDaemon, String) {
    let instance = format!("lc-{tag}-{}", std::process::id());
    let mut options = docker_options(&format!(
        "command = [\"--work-by-queue\"]\n[lifecycle.session]\n{limits}"
    ));
    options.extra_toml = format!("instance = \"{instance}\"\n{}", options.extra_toml);
    (TestDaemon::start(options), instance)
}

/// The container name of session `id` in `instance`.
fn container_name(instance: &str, scope: Scope, id: &str) -> String {
    format!("{instance}-{}", base_name(scope, id))
}

/// Ensures session `id` with the task queue `queue`; its generation.
async fn ensure_with(daemon: &TestDaemon, id: &str, queue: &str) -> u64 {
    let client = daemon.client().await;
    client
        .ensure(Scope::Session, id, &sandbox_env(queue, "tok"))
        .await
        .unwrap()
        .generation
}

/// The container id and generation `describe` says for a running `id`.
async fn running_incarnation(daemon: &TestDaemon, id: &str) -> (Option<String>, u64) {
    let info = daemon
        .client()
        .await
        .describe(Scope::Session, id)
        .await
        .unwrap();
    assert_eq!(info.state, ProbeState::Running, "{id}: {info:?}");
    (info.container_id, info.generation)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_quiet_container_is_stopped_for_idleness_and_busy_ones_are_not() {
    let test = "a_quiet_container_is_stopped_for_idleness_and_busy_ones_are_not";
    if !engine_ready(test) {
        return;
    }
    let (quiet, busy, lines) = (
        unique_id("idle-quiet"),
        unique_id("idle-busy"),
        unique_id("idle-lines"),
    );
    let _cleanup = Cleanup::new(&[&quiet, &busy, &lines]);
    let (daemon, instance) = lifecycle_daemon("idle", "idle = \"2s\"");
    let client = daemon.client().await;
    ensure_with(&daemon, &busy, "q:busy").await;
    ensure_with(&daemon, &lines, "q:lines").await;
    let busy_run = running_incarnation(&daemon, &busy).await;
    let lines_run = running_incarnation(&daemon, &lines).await;
    let volume = format!(
        "{}-workspace",
        container_name(&instance, Scope::Session, &quiet)
    );

    // Three windows or more, each ended by the quiet one's idle stop.
    let mut since = events_now(&client).await;
    for round in 1..=3u64 {
        assert_eq!(ensure_with(&daemon, &quiet, "q:quiet").await, round);
        let (event, _) = wait_for_event(&client, Some(since.clone()), |event| {
            event.kind == EventKind::Exited && event.id == quiet
        })
        .await;
        since = event.cursor.clone();
        let exit = event.exit.expect("an exit on the event");
        assert_eq!(exit.reason, ExitReason::Idle, "round {round}: {exit:?}");
        assert_eq!(event.generation, round);
        let info = client.describe(Scope::Session, &quiet).await.unwrap();
        assert_eq!(info.state, ProbeState::Stopped, "kept, stopped: {info:?}");
        assert_eq!(
            info.last_exit.map(|exit| exit.reason),
            Some(ExitReason::Idle),
            "{info:?}"
        );
        assert_eq!(
            container_status(&container_name(&instance, Scope::Session, &quiet)).as_deref(),
            Some("exited")
        );
        assert!(
            sandboxd_tests::docker_image::inspect("volume", &volume).is_some(),
            "the workspace volume {volume} is kept"
        );
        let follow = daemon.sandboxctl(&["logs", "session", &quiet, "--follow"]);
        let said = String::from_utf8_lossy(&follow.stderr).into_owned();
        assert!(
            said.contains(&format!(
                "generation {round}: the runner exited (stopped: idle)"
            )),
            "{said}"
        );
        let described = daemon.sandboxctl(&["describe", "session", &quiet]);
        let described = String::from_utf8_lossy(&described.stdout).into_owned();
        assert!(described.contains("stopped: idle"), "{described}");
        // The busy ones are the same runs all along.
        assert_eq!(
            running_incarnation(&daemon, &busy).await,
            busy_run,
            "round {round}"
        );
        assert_eq!(
            running_incarnation(&daemon, &lines).await,
            lines_run,
            "round {round}"
        );
    }
    let log = daemon.log_text();
    assert!(
        log.contains("stopping the runner for its [lifecycle] limit"),
        "{log}"
    );
    assert!(
        !log.contains("ignores them"),
        "no start-up warning on docker: {log}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_idle_pause_pauses_a_quiet_container_and_ensure_resumes_it() {
    let test = "on_idle_pause_pauses_a_quiet_container_and_ensure_resumes_it";
    if !engine_ready(test) {
        return;
    }
    let id = unique_id("idle-pause");
    let _cleanup = Cleanup::new(&[&id]);
    let (daemon, instance) = lifecycle_daemon("pause", "idle = \"2s\"\non_idle = \"pause\"");
    let client = daemon.client().await;
    let cursor = events_now(&client).await;
    let generation = ensure_with(&daemon, &id, "q:quiet").await;
    let (container, _) = running_incarnation(&daemon, &id).await;
    let (paused, _) = wait_for_event(&client, Some(cursor), |event| {
        event.kind == EventKind::Paused && event.id == id
    })
    .await;
    assert_eq!(paused.generation, generation);
    assert_eq!(
        container_status(&container_name(&instance, Scope::Session, &id)).as_deref(),
        Some("paused")
    );
    assert_eq!(
        client.probe(Scope::Session, &id).await.unwrap(),
        ProbeState::Stopped
    );
    let info = client.describe(Scope::Session, &id).await.unwrap();
    assert!(info.paused_since_unix_ms.is_some(), "{info:?}");
    assert_eq!(info.last_exit, None, "paused, not stopped: {info:?}");

    let report = client
        .ensure(Scope::Session, &id, &sandbox_env("q:quiet", "tok"))
        .await
        .unwrap();
    assert!(!report.created, "resumed, not started: {report:?}");
    assert_eq!(report.generation, generation);
    assert_eq!(
        running_incarnation(&daemon, &id).await,
        (container, generation)
    );
    // Idle again, it is paused again: the window started over at the resume.
    wait_for_event(&client, Some(paused.cursor), |event| {
        event.kind == EventKind::Paused && event.id == id
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn max_lifetime_ends_a_busy_container_and_paused_time_does_not_count() {
    let test = "max_lifetime_ends_a_busy_container_and_paused_time_does_not_count";
    if !engine_ready(test) {
        return;
    }
    let (paused_id, clock_id, short_id) = (
        unique_id("life-paused"),
        unique_id("life-clock"),
        unique_id("life-short"),
    );
    let _cleanup = Cleanup::new(&[&paused_id, &clock_id, &short_id]);
    // Workflows live 2 s: the clock that shows the resumed session's
    // lifetime was not used up while it was paused.
    let (daemon, instance) = lifecycle_daemon(
        "life",
        "max_lifetime = \"6s\"\n[lifecycle.workflow]\nmax_lifetime = \"2s\"",
    );
    let client = daemon.client().await;
    let cursor = events_now(&client).await;
    ensure_with(&daemon, &paused_id, "q:busy").await;
    client.pause(Scope::Session, &paused_id).await.unwrap();
    // Started after the paused one, so its lifetime ends after the paused
    // one's would have, were pauses counted.
    ensure_with(&daemon, &clock_id, "q:busy").await;
    let (event, _) = wait_for_event(&client, Some(cursor.clone()), |event| {
        event.kind == EventKind::Exited && event.id == clock_id
    })
    .await;
    assert_eq!(
        event.exit.map(|exit| exit.reason),
        Some(ExitReason::Lifetime),
        "{event:?}"
    );
    let info = client.describe(Scope::Session, &clock_id).await.unwrap();
    assert_eq!(
        info.last_exit.map(|exit| exit.reason),
        Some(ExitReason::Lifetime),
        "{info:?}"
    );
    assert_eq!(
        container_status(&container_name(&instance, Scope::Session, &paused_id)).as_deref(),
        Some("paused"),
        "still paused, not ended; log:\n{}",
        daemon.log_text()
    );
    // The next ensure starts the ended one again, as after a crash.
    assert_eq!(ensure_with(&daemon, &clock_id, "q:busy").await, 2);

    // Resumed, the paused one has most of its 6 s left: a workflow started
    // after the resume, with 2 s, ends first. Were its pause counted, it
    // would end at the watcher's next tick (half a second).
    let resumed_at = events_now(&client).await;
    client.resume(Scope::Session, &paused_id).await.unwrap();
    client
        .ensure(Scope::Workflow, &short_id, &sandbox_env("q:busy", "tok"))
        .await
        .unwrap();
    let (first, _) = wait_for_event(&client, Some(resumed_at.clone()), |event| {
        event.kind == EventKind::Exited && (event.id == paused_id || event.id == short_id)
    })
    .await;
    assert_eq!(first.id, short_id, "the resumed one ended first: {first:?}");
    assert_eq!(
        first.exit.map(|exit| exit.reason),
        Some(ExitReason::Lifetime)
    );
    let (event, _) = wait_for_event(&client, Some(resumed_at), |event| {
        event.kind == EventKind::Exited && event.id == paused_id
    })
    .await;
    assert_eq!(
        event.exit.map(|exit| exit.reason),
        Some(ExitReason::Lifetime)
    );
}
