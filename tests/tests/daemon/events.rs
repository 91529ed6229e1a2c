//! The event stream on the process tier, end to end: each exit with its
//! reason, a deprovision, a follower woken by a new event, and a cursor
//! from before a daemon restart refused as expired.

use std::time::Duration;

use futures::StreamExt;
use sandboxd_client::{Event, EventKind, EventsReply, ExitReason, Scope, StreamItem};
use sandboxd_tests::events::{events_now as now, wait_for_event, EVENT_TIMEOUT as TIMEOUT};
use sandboxd_tests::{sandbox_env, start_session, wait_for_runner, Options, TestDaemon};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_runner_that_exits_3_is_an_exited_event_with_its_code() {
    let daemon = TestDaemon::start(Options::with_runner_args(&["--exit-code", "3"]));
    let client = daemon.client().await;
    let since = now(&client).await;
    let report = client
        .ensure(Scope::Workflow, "three", &sandbox_env("wfexec:three", ""))
        .await
        .unwrap();
    let (exited, before) = wait_for_event(&client, Some(since), |event| {
        event.kind == EventKind::Exited && event.id == "three"
    })
    .await;
    let exit = exited.exit.expect("an exit carries its proof");
    assert_eq!(exit.reason, ExitReason::Exited { code: 3 }, "{exit:?}");
    assert_eq!((exit.code, exit.signal), (Some(3), None));
    assert_eq!(exited.uid, report.uid);
    assert_eq!(exited.generation, report.generation);
    assert_eq!(exited.scope, Scope::Workflow);
    // Created and started came first, in order.
    let kinds: Vec<EventKind> = before
        .iter()
        .filter(|event| event.id == "three")
        .map(|event| event.kind)
        .collect();
    assert_eq!(kinds, [EventKind::Created, EventKind::Started]);
    // The CLI prints it as one line, and as JSON with the exit object.
    let text = daemon.sandboxctl(&["events", "--id", "three"]);
    let text = String::from_utf8_lossy(&text.stdout).to_string();
    assert!(
        text.lines()
            .any(|line| line.contains("workflow exited three")
                && line.contains("reason=exited, code=3")),
        "{text}"
    );
    let json = daemon.sandboxctl(&["--json", "events", "--scope", "workflow"]);
    let exited_line = String::from_utf8_lossy(&json.stdout)
        .lines()
        .map(|line| serde_json::from_str::<serde_json::Value>(line).unwrap())
        .find(|value| value["kind"] == "exited")
        .expect("an exited line");
    assert_eq!(exited_line["exit"]["code"], 3, "{exited_line}");
    assert_eq!(exited_line["exit"]["reason"], "exited", "{exited_line}");
    assert_eq!(exited_line["uid"], report.uid.as_str());
    assert!(exited_line["cursor"].is_string() && exited_line["time"].is_string());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_oom_kill_is_an_exited_event_with_the_limit() {
    let daemon = TestDaemon::start(Options::past_the_memory_limit());
    let client = daemon.client().await;
    let since = now(&client).await;
    let report = client
        .ensure(Scope::Session, "oom", &sandbox_env("session:oom", "tok"))
        .await
        .unwrap();
    let workspace = daemon.workspace(Scope::Session, "oom");
    wait_for_runner(&workspace, report.pid.unwrap());
    std::fs::write(workspace.join("go"), "").unwrap();
    let (exited, _) = wait_for_event(&client, Some(since), |event| {
        event.kind == EventKind::Exited && event.id == "oom"
    })
    .await;
    assert_eq!(
        exited.exit.map(|exit| exit.reason),
        Some(ExitReason::OutOfMemory {
            limit_bytes: Some(64 << 20)
        }),
        "{}",
        daemon.log_text()
    );
    let described = daemon.sandboxctl(&["describe", "session", "oom"]);
    let text = String::from_utf8_lossy(&described.stdout);
    assert!(text.contains("out-of-memory (limit 64 MiB)"), "{text}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deprovision_is_an_exit_by_deprovision_then_deprovisioned() {
    let daemon = TestDaemon::start(Options::default());
    let client = daemon.client().await;
    start_session(&daemon, "gone").await;
    let uid = client.describe(Scope::Session, "gone").await.unwrap().uid;
    let since = now(&client).await;
    client
        .deprovision(Scope::Session, "gone", false)
        .await
        .unwrap();
    let (deprovisioned, before) = wait_for_event(&client, Some(since), |event| {
        event.kind == EventKind::Deprovisioned
    })
    .await;
    assert_eq!(
        (deprovisioned.id.as_str(), deprovisioned.uid.as_str()),
        ("gone", uid.as_str())
    );
    let exited: Vec<&Event> = before
        .iter()
        .filter(|event| event.kind == EventKind::Exited)
        .collect();
    assert_eq!(exited.len(), 1, "one exit, by the deprovision: {before:#?}");
    assert_eq!(
        exited[0].exit.map(|exit| exit.reason),
        Some(ExitReason::Deprovisioned)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_follower_is_woken_by_the_next_event() {
    let daemon = TestDaemon::start(Options::default());
    let client = daemon.client().await;
    let since = now(&client).await;
    let follower = daemon.client().await;
    let (tx, rx) = tokio::sync::oneshot::channel();
    let follow = tokio::spawn(async move {
        let mut stream = Box::pin(follower.event_stream(Some(since)));
        let _ = tx.send(());
        loop {
            match stream.next().await {
                Some(Ok(StreamItem::Event(event))) if event.kind == EventKind::Started => {
                    return event
                }
                Some(Ok(_)) => {}
                Some(Err(error)) => panic!("{error}"),
                None => panic!("the stream ended"),
            }
        }
    });
    rx.await.unwrap();
    let report = client
        .ensure(Scope::Session, "wake", &sandbox_env("session:wake", "tok"))
        .await
        .unwrap();
    let event = tokio::time::timeout(TIMEOUT, follow)
        .await
        .expect("the follower saw the event")
        .unwrap();
    assert_eq!(
        (event.id.as_str(), event.uid.as_str()),
        ("wake", report.uid.as_str())
    );
    assert_eq!(event.generation, 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cursor_from_before_a_restart_is_expired() {
    let mut daemon = TestDaemon::start(Options::default());
    let client = daemon.client().await;
    start_session(&daemon, "before").await;
    let old = now(&client).await;
    drop(client);
    assert!(daemon.stop().success(), "{}", daemon.log_text());
    daemon.launch();
    daemon.wait_ready();
    let client = daemon.client().await;
    match client.events(Some(&old), 10, Duration::ZERO).await.unwrap() {
        EventsReply::Expired { reason, now } => {
            assert!(reason.contains("another daemon boot"), "{reason}");
            assert_ne!(now.boot_id, old.boot_id);
        }
        other => panic!("expected expired, got {other:?}"),
    }
    let cli = daemon.sandboxctl(&["events", "--since", &old.to_string()]);
    assert_eq!(cli.status.code(), Some(1), "{cli:?}");
    assert!(
        String::from_utf8_lossy(&cli.stderr).contains("expired"),
        "{cli:?}"
    );
    // A cursor that is not one is a usage error naming it.
    let cli = daemon.sandboxctl(&["events", "--since", "nonsense"]);
    assert_eq!(cli.status.code(), Some(2), "{cli:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_runner_that_ended_while_the_daemon_was_down_is_exited_lost_at_start() {
    let mut daemon = TestDaemon::start(Options::default());
    let client = daemon.client().await;
    let report = client
        .ensure(Scope::Session, "gone", &sandbox_env("session:gone", ""))
        .await
        .unwrap();
    let pid = report
        .pid
        .expect("the process tier reports the runner's pid");
    // A crash: no daemon sees the runner end (its reaper kills the tree).
    daemon.kill();
    assert!(
        sandboxd_tests::wait_until(TIMEOUT, || sandboxd_tests::pid_is_gone(pid)),
        "the runner outlived the daemon's SIGKILL"
    );
    daemon.launch();
    daemon.wait_ready();
    let client = daemon.client().await;
    let (exited, _) = wait_for_event(&client, None, |event| {
        event.kind == EventKind::Exited && event.id == "gone"
    })
    .await;
    let exit = exited.exit.expect("an exit carries its proof");
    assert_eq!(exit.reason, ExitReason::Lost, "{exited:?}");
    assert_eq!(
        exited.uid, report.uid,
        "the workspace catalog keeps the uid"
    );
    assert_eq!(exited.scope, Scope::Session);
}
