//! `[lifecycle.*]` on the process tier, end to end: a quiet runner is
//! stopped (or paused) once idle for the window, with the reason in
//! `describe`, the log's end line and the event stream, while runners that
//! compute or print are left alone; `max_lifetime` ends a busy runner; a
//! paused runner uses no CPU, keeps its memory and workspace, and `ensure`
//! resumes it with the same pid and generation; time paused does not count
//! toward the lifetime.
//!
//! Every wait is for a condition. "Not stopped" is shown against a clock
//! the daemon itself keeps: the quiet runner of the same daemon is stopped
//! for idleness again and again, each time only after a whole window, while
//! the busy ones keep their pid and generation.

use std::time::Duration;

use sandboxd_client::{EventKind, ExitReason, ProbeState, Scope};
use sandboxd_tests::events::{events_now, wait_for_event};
use sandboxd_tests::procs::{cpu_ticks, start_time};
use sandboxd_tests::{sandbox_env, start_session, Options, TestDaemon};

/// Generous: the machine is busy; nothing here measures time.
const TIMEOUT: Duration = Duration::from_secs(60);

fn daemon_with(lifecycle: &str) -> TestDaemon {
    TestDaemon::start(Options {
        runner_args: vec!["--work-by-queue".into()],
        extra_toml: lifecycle.to_string(),
        ..Options::default()
    })
}

/// Ensures the session `id`, its task queue naming its work (`busy`,
/// `lines`, or neither: quiet); returns the runner's pid.
async fn start(daemon: &TestDaemon, id: &str) -> u32 {
    start_session(daemon, id).await
}

async fn probe(daemon: &TestDaemon, id: &str) -> ProbeState {
    daemon
        .client()
        .await
        .probe(Scope::Session, id)
        .await
        .unwrap()
}

/// The pid and generation `describe` reports for a running `id`.
async fn incarnation(daemon: &TestDaemon, id: &str) -> (Option<u32>, u64) {
    let info = daemon
        .client()
        .await
        .describe(Scope::Session, id)
        .await
        .unwrap();
    (info.pid, info.generation)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_quiet_runner_is_stopped_for_idleness_and_busy_ones_are_not() {
    let daemon = daemon_with("[lifecycle.session]\nidle = \"2s\"");
    let client = daemon.client().await;
    let cursor = events_now(&client).await;
    start(&daemon, "busy-cpu").await;
    start(&daemon, "lines-out").await;
    let busy = incarnation(&daemon, "busy-cpu").await;
    let printing = incarnation(&daemon, "lines-out").await;

    // Four windows or more, each ended by the quiet runner's idle stop.
    let mut since = cursor;
    for round in 1..=4u64 {
        start(&daemon, "quiet").await;
        std::fs::write(daemon.workspace(Scope::Session, "quiet").join("kept"), "x").unwrap();
        let (event, _) = wait_for_event(&client, Some(since.clone()), |event| {
            event.kind == EventKind::Exited && event.id == "quiet"
        })
        .await;
        since = event.cursor.clone();
        let exit = event.exit.expect("an exit on the event");
        assert_eq!(exit.reason, ExitReason::Idle, "round {round}: {exit:?}");
        assert_eq!(event.generation, round);
        let info = client.describe(Scope::Session, "quiet").await.unwrap();
        assert_eq!(info.state, ProbeState::Absent);
        assert_eq!(
            info.last_exit.map(|exit| exit.reason),
            Some(ExitReason::Idle)
        );
        assert_eq!(info.generation, round);
        assert!(
            daemon
                .workspace(Scope::Session, "quiet")
                .join("kept")
                .exists(),
            "the workspace is kept"
        );
        // The log's end line: a follow of the ended generation ends at
        // once, saying why.
        let follow = daemon.sandboxctl(&["logs", "session", "quiet", "--follow"]);
        let said = String::from_utf8_lossy(&follow.stderr).into_owned();
        assert!(
            said.contains(&format!(
                "generation {round}: the runner exited (stopped: idle)"
            )),
            "{said}"
        );
        let described = daemon.sandboxctl(&["describe", "session", "quiet"]);
        let described = String::from_utf8_lossy(&described.stdout).into_owned();
        assert!(described.contains("stopped: idle"), "{described}");
        // Still the same runners, all along.
        assert_eq!(
            probe(&daemon, "busy-cpu").await,
            ProbeState::Running,
            "round {round}; log:\n{}",
            daemon.log_text()
        );
        assert_eq!(incarnation(&daemon, "busy-cpu").await, busy);
        assert_eq!(
            probe(&daemon, "lines-out").await,
            ProbeState::Running,
            "round {round}"
        );
        assert_eq!(incarnation(&daemon, "lines-out").await, printing);
    }
    assert!(daemon
        .log_text()
        .contains("stopping the runner for its [lifecycle] limit"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_idle_pause_pauses_and_ensure_resumes_the_same_runner() {
    let daemon = daemon_with("[lifecycle.session]\nidle = \"2s\"\non_idle = \"pause\"");
    let client = daemon.client().await;
    let cursor = events_now(&client).await;
    let pid = start(&daemon, "quiet").await;
    let (paused, _) = wait_for_event(&client, Some(cursor), |event| {
        event.kind == EventKind::Paused && event.id == "quiet"
    })
    .await;
    assert_eq!(paused.generation, 1);
    assert_eq!(probe(&daemon, "quiet").await, ProbeState::Stopped);
    let info = client.describe(Scope::Session, "quiet").await.unwrap();
    assert_eq!(info.state, ProbeState::Stopped);
    assert!(info.paused_since_unix_ms.is_some(), "{info:?}");
    assert_eq!(info.pid, Some(pid));
    let listed = daemon.sandboxctl(&["list"]);
    let listed = String::from_utf8_lossy(&listed.stdout).into_owned();
    assert!(listed.contains("paused"), "{listed}");
    let described = daemon.sandboxctl(&["describe", "session", "quiet"]);
    let described = String::from_utf8_lossy(&described.stdout).into_owned();
    assert!(described.contains("paused since"), "{described}");

    let report = client
        .ensure(Scope::Session, "quiet", &sandbox_env("q:quiet", "tok"))
        .await
        .unwrap();
    assert!(!report.created, "resumed, not started: {report:?}");
    assert_eq!((report.pid, report.generation), (Some(pid), 1));
    assert_eq!(report.state, ProbeState::Running);
    assert_eq!(probe(&daemon, "quiet").await, ProbeState::Running);
    let info = client.describe(Scope::Session, "quiet").await.unwrap();
    assert_eq!(info.paused_since_unix_ms, None);
    let (resumed, _) = wait_for_event(&client, Some(paused.cursor), |event| {
        event.kind == EventKind::Resumed && event.id == "quiet"
    })
    .await;
    assert_eq!(resumed.generation, 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn max_lifetime_ends_a_busy_runner() {
    let daemon = daemon_with("[lifecycle.session]\nmax_lifetime = \"2s\"");
    let client = daemon.client().await;
    let cursor = events_now(&client).await;
    start(&daemon, "busy").await;
    let (event, _) = wait_for_event(&client, Some(cursor), |event| {
        event.kind == EventKind::Exited && event.id == "busy"
    })
    .await;
    assert_eq!(
        event.exit.map(|exit| exit.reason),
        Some(ExitReason::Lifetime)
    );
    let info = client.describe(Scope::Session, "busy").await.unwrap();
    assert_eq!(
        info.last_exit.map(|exit| exit.reason),
        Some(ExitReason::Lifetime)
    );
    // The next ensure starts it again, as after a crash.
    let report = client
        .ensure(Scope::Session, "busy", &sandbox_env("q:busy", "tok"))
        .await
        .unwrap();
    assert!(report.created);
    assert_eq!(report.generation, 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_paused_runner_uses_no_cpu_keeps_its_memory_and_workspace() {
    let daemon = TestDaemon::start(Options {
        runner_args: vec![
            "--work-by-queue".into(),
            "--allocate-mib".into(),
            "32".into(),
        ],
        ..Options::default()
    });
    let client = daemon.client().await;
    let pid = start(&daemon, "busy-paused").await;
    let clock = start(&daemon, "busy-clock").await;
    let started = start_time(pid);
    std::fs::write(
        daemon.workspace(Scope::Session, "busy-paused").join("kept"),
        "x",
    )
    .unwrap();

    let out = daemon.sandboxctl(&["pause", "session", "busy-paused"]);
    assert!(out.status.success(), "{out:?}");
    let said = String::from_utf8_lossy(&out.stdout).into_owned();
    assert_eq!(
        said,
        format!("session busy-paused: paused (generation 1, pid {pid})\n")
    );
    let again = client.pause(Scope::Session, "busy-paused").await.unwrap();
    assert!(!again.changed, "idempotent: {again:?}");
    assert_eq!(probe(&daemon, "busy-paused").await, ProbeState::Stopped);
    // `status` counts from the driver's table (not its list): the paused
    // runner is stopped there too, as `list` says.
    let counts = client.status().await.unwrap().counts;
    assert_eq!(
        (counts.session, counts.running, counts.stopped),
        (2, 1, 1),
        "{counts:?}"
    );
    let listed = client.list(None).await.unwrap();
    let stopped: Vec<_> = listed
        .iter()
        .filter(|sandbox| sandbox.state == ProbeState::Stopped)
        .map(|sandbox| sandbox.id.as_str())
        .collect();
    assert_eq!(stopped, ["busy-paused"], "{listed:?}");
    assert_eq!(
        open_freezer_files(&daemon),
        1,
        "a paused sandbox keeps its freezer file open for the resume"
    );

    // While the other runner computes for a while, the paused one does not.
    let frozen_at = cpu_ticks(pid).unwrap();
    let clock_at = cpu_ticks(clock).unwrap();
    assert!(
        sandboxd_tests::wait_until(TIMEOUT, || cpu_ticks(clock).unwrap() >= clock_at + 20),
        "the unpaused runner computes"
    );
    assert_eq!(
        cpu_ticks(pid),
        Some(frozen_at),
        "a paused runner uses no CPU"
    );
    assert!(resident_mib(pid) >= 32, "its memory is kept while paused");

    let report = client
        .ensure(
            Scope::Session,
            "busy-paused",
            &sandbox_env("q:busy-paused", "tok"),
        )
        .await
        .unwrap();
    assert_eq!(
        (report.created, report.pid, report.generation),
        (false, Some(pid), 1)
    );
    assert_eq!(start_time(pid), started, "the same process");
    assert!(
        sandboxd_tests::wait_until(TIMEOUT, || cpu_ticks(pid).unwrap() > frozen_at),
        "resumed, it computes again"
    );
    assert!(resident_mib(pid) >= 32);
    assert!(daemon
        .workspace(Scope::Session, "busy-paused")
        .join("kept")
        .exists());
    let resumed = client.resume(Scope::Session, "busy-paused").await.unwrap();
    assert!(!resumed.changed, "resume of a running one changes nothing");
    assert_eq!(open_freezer_files(&daemon), 0, "closed once resumed");

    // Pausing needs a running runner; a paused one deprovisions cleanly.
    let error = client
        .pause(Scope::Session, "never-started")
        .await
        .unwrap_err();
    assert!(error.to_string().contains("no running runner"), "{error}");
    client.pause(Scope::Session, "busy-paused").await.unwrap();
    let gone = client
        .deprovision(Scope::Session, "busy-paused", false)
        .await
        .unwrap();
    assert!(gone.was_present && !gone.forced, "{gone:?}");
    assert!(sandboxd_tests::wait_until(TIMEOUT, || {
        sandboxd_tests::pid_is_gone(pid)
    }));
    assert_eq!(open_freezer_files(&daemon), 0, "closed once deprovisioned");
}

/// How many `cgroup.freeze` (or v1 `freezer.state`) files the daemon has
/// open.
fn open_freezer_files(daemon: &TestDaemon) -> usize {
    let pid = daemon.pid().expect("the daemon runs");
    std::fs::read_dir(format!("/proc/{pid}/fd"))
        .unwrap()
        .filter_map(|entry| std::fs::read_link(entry.ok()?.path()).ok())
        .filter(|target| target.ends_with("cgroup.freeze") || target.ends_with("freezer.state"))
        .count()
}

/// `VmRSS` of `pid`, in MiB (0 when unreadable).
fn resident_mib(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap_or_default()
        .lines()
        .find_map(|line| line.strip_prefix("VmRSS:"))
        .and_then(|rest| {
            rest.trim()
                .trim_end_matches("kB")
                .trim()
                .parse::<u64>()
                .ok()
        })
        .map_or(0, |kib| kib / 1024)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn time_paused_does_not_count_toward_the_lifetime() {
    let daemon = daemon_with("[lifecycle.session]\nmax_lifetime = \"3s\"");
    let client = daemon.client().await;
    let cursor = events_now(&client).await;
    let paused = start(&daemon, "busy-paused").await;
    client.pause(Scope::Session, "busy-paused").await.unwrap();
    // Started after the paused one, so its lifetime ends after the paused
    // one's would have, were pauses counted.
    start(&daemon, "busy-clock").await;
    let (event, _) = wait_for_event(&client, Some(cursor.clone()), |event| {
        event.kind == EventKind::Exited && event.id == "busy-clock"
    })
    .await;
    assert_eq!(
        event.exit.map(|exit| exit.reason),
        Some(ExitReason::Lifetime)
    );
    assert_eq!(
        probe(&daemon, "busy-paused").await,
        ProbeState::Stopped,
        "still paused, not ended; log:\n{}",
        daemon.log_text()
    );
    assert_eq!(incarnation(&daemon, "busy-paused").await, (Some(paused), 1));
    // Resumed, its clock runs again and ends it.
    client.resume(Scope::Session, "busy-paused").await.unwrap();
    let (event, _) = wait_for_event(&client, Some(cursor), |event| {
        event.kind == EventKind::Exited && event.id == "busy-paused"
    })
    .await;
    assert_eq!(
        event.exit.map(|exit| exit.reason),
        Some(ExitReason::Lifetime)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_lifecycle_values_are_refused_naming_the_key() {
    for (toml, words) in [
        (
            "[lifecycle.session]\nidle = \"soon\"",
            "[lifecycle.session] idle 'soon'",
        ),
        (
            "[lifecycle.connect]\nttl = \"30m\"\n[docker]\nconnect_ttl = \"1h\"",
            "[docker] connect_ttl",
        ),
    ] {
        let mut daemon = TestDaemon::prepare(Options {
            extra_toml: toml.to_string(),
            ..Options::default()
        });
        daemon.launch();
        let status = daemon
            .wait_exit(TIMEOUT)
            .expect("the daemon refuses to start");
        assert!(!status.success());
        assert!(
            daemon.log_text().contains(words),
            "{toml}: {}",
            daemon.log_text()
        );
    }
}
