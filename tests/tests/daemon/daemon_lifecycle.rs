//! The daemon's own life: a process-tier sandbox never outlives it (clean
//! stop, SIGKILL), leftovers of an earlier instance are swept at start, one
//! daemon per socket, and start-up failures are loud.

use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use nix::sys::signal::Signal;
use sandboxd_client::{ClientError, ProbeState, SandboxError, Scope};
use sandboxd_tests::procs::{self, process_group};
use sandboxd_tests::{
    pid_is_gone, read_grandchild_pid, read_runner_pid, sandbox_env, start_time, wait_for_runner,
    wait_until, Options, TestDaemon, RUNNER_TIMEOUT,
};

const UNKNOWN_DRIVER: &str =
    "unknown sandbox provisioner type 'x' — known types: 'docker', 'kubernetes', 'local-process'";

/// Starts three runners (two sessions, one workflow) and returns every pid
/// of theirs: leaders and grandchildren.
async fn start_three_runners(daemon: &TestDaemon) -> Vec<u32> {
    let client = daemon.client().await;
    let mut pids = Vec::new();
    for (scope, id) in [
        (Scope::Session, "a"),
        (Scope::Session, "b"),
        (Scope::Workflow, "c"),
    ] {
        let report = client
            .ensure(scope, id, &sandbox_env(&format!("q:{id}"), "tok"))
            .await
            .unwrap();
        let pid = report.pid.unwrap();
        let workspace = daemon.workspace(scope, id);
        wait_for_runner(&workspace, pid);
        pids.push(pid);
        pids.push(read_grandchild_pid(&workspace).expect("the fixture forked a grandchild"));
    }
    assert_eq!(
        daemon.leftover_processes().len(),
        6,
        "three runners with a grandchild each"
    );
    pids
}

fn all_gone(pids: &[u32]) -> bool {
    pids.iter().all(|&pid| pid_is_gone(pid))
}

/// Starts a daemon with `options` and three runners under it, stops it with
/// SIGTERM and asserts that it exits 0 and takes every runner process with
/// it. Returns the stopped daemon for any further checks.
async fn stop_cleanly_with_three_runners(options: Options) -> TestDaemon {
    let mut daemon = TestDaemon::start(options);
    let pids = start_three_runners(&daemon).await;
    let status = daemon.stop();
    assert!(status.success(), "a clean stop exits 0, got {status}");
    assert!(
        all_gone(&pids),
        "runners survived the daemon's clean stop: {:?}",
        daemon.leftover_processes()
    );
    daemon
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_to_the_daemon_stops_every_runner() {
    let daemon =
        stop_cleanly_with_three_runners(Options::with_runner_args(&["--fork-grandchild"])).await;
    assert!(
        daemon.leftover_processes().is_empty(),
        "{:?}",
        daemon.leftover_processes()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_to_the_daemon_forces_runners_that_ignore_sigterm() {
    let mut options = Options::with_runner_args(&["--ignore-term", "--fork-grandchild"]);
    options.stop_grace = "1s".into();
    stop_cleanly_with_three_runners(options).await;
}

/// A stop sends every running runner its SIGTERM at once, and a paused one
/// its SIGTERM once thawed: both end on it, far sooner than the grace that
/// would force them (a frozen process acts on no signal: a paused runner
/// never thawed would be left to the kill).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_to_the_daemon_ends_running_and_paused_runners_on_sigterm() {
    let mut daemon = TestDaemon::start(Options {
        stop_grace: "120s".into(),
        ..Options::default()
    });
    let client = daemon.client().await;
    let mut pids = Vec::new();
    for id in ["running", "paused"] {
        let report = client
            .ensure(Scope::Session, id, &sandbox_env(&format!("q:{id}"), "tok"))
            .await
            .unwrap();
        let pid = report.pid.unwrap();
        wait_for_runner(&daemon.workspace(Scope::Session, id), pid);
        pids.push(pid);
    }
    client.pause(Scope::Session, "paused").await.unwrap();
    drop(client);
    let stopping = Instant::now();
    let status = daemon.stop();
    let took = stopping.elapsed();
    assert!(status.success(), "a clean stop exits 0, got {status}");
    assert!(all_gone(&pids), "{:?}", daemon.leftover_processes());
    assert!(
        took < Duration::from_secs(60),
        "the stop took {took:?}: a runner was left to the 120 s grace"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigkill_to_the_daemon_leaves_nothing_within_two_seconds() {
    let daemon_options = Options::with_runner_args(&["--ignore-term", "--fork-grandchild"]);
    let mut daemon = TestDaemon::start(daemon_options);
    let pids = start_three_runners(&daemon).await;
    let daemon_pid = daemon.pid().unwrap();
    procs::signal_pid(daemon_pid, Signal::SIGKILL);
    let killed_at = Instant::now();
    let gone = wait_until(Duration::from_secs(2), || all_gone(&pids));
    let took = killed_at.elapsed();
    daemon.kill(); // reap it
    assert!(
        gone,
        "{took:?} after SIGKILL of the daemon these runner processes still live:\n{}",
        procs::describe(
            &pids
                .iter()
                .copied()
                .filter(|&pid| !pid_is_gone(pid))
                .collect::<Vec<_>>()
        )
    );
    assert!(
        daemon.leftover_processes().is_empty(),
        "{:?}",
        daemon.leftover_processes()
    );

    // The next instance starts clean on the same state dir and serves.
    daemon.launch();
    daemon.wait_ready();
    let client = daemon.client().await;
    assert_eq!(
        client.probe(Scope::Session, "a").await.unwrap(),
        ProbeState::Absent
    );
    let report = client
        .ensure_session_sandbox("a", &sandbox_env("q:a", "tok"))
        .await
        .unwrap();
    assert!(report.created);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sigkill_in_the_middle_of_a_burst_of_ensures_leaves_nothing() {
    let mut daemon = TestDaemon::start(Options::with_runner_args(&["--fork-grandchild"]));
    let client = daemon.client().await;
    let calls: Vec<_> = (0..20)
        .map(|n| {
            let client = client.clone();
            tokio::spawn(async move {
                let id = format!("burst-{n}");
                client
                    .ensure_session_sandbox(&id, &sandbox_env(&format!("session:{id}"), ""))
                    .await
            })
        })
        .collect();
    // Wait for the first runners to exist, so the kill lands mid-burst.
    assert!(wait_until(Duration::from_secs(20), || !daemon
        .leftover_processes()
        .is_empty()));
    procs::signal_pid(daemon.pid().unwrap(), Signal::SIGKILL);
    let killed_at = Instant::now();
    for call in calls {
        let _ = call.await; // some succeeded, the rest lost their connection
    }
    let gone = wait_until(Duration::from_secs(2), || {
        daemon.leftover_processes().is_empty()
    });
    let took = killed_at.elapsed();
    daemon.kill();
    let survivors = procs::describe(&daemon.leftover_processes());
    assert!(
        gone,
        "{took:?} after SIGKILL of the daemon mid-burst these runner processes survive:\n{survivors}\nledger: {:?}",
        daemon.ledger_live_records()
    );

    daemon.launch();
    daemon.wait_ready();
    let client = daemon.client().await;
    for n in 0..20 {
        let id = format!("burst-{n}");
        assert_eq!(
            client.probe(Scope::Session, &id).await.unwrap(),
            ProbeState::Absent,
            "{id}"
        );
    }
    assert!(daemon.leftover_processes().is_empty());
}

/// Starts the fixture directly, as an earlier daemon would have: its own
/// process group, a grandchild, SIGTERM ignored.
fn start_orphan_group(fixture: &Path, workspace: &Path) -> (Child, u32, u32) {
    std::fs::create_dir_all(workspace).unwrap();
    let child = procs::spawn(
        Command::new(fixture)
            .args(["--ignore-term", "--fork-grandchild"])
            .env_clear()
            .env("WORKSPACE_ROOT_DIR", workspace)
            .process_group(0)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null()),
    )
    .expect("start the fixture");
    let pid = child.id();
    assert!(
        wait_until(RUNNER_TIMEOUT, || read_runner_pid(workspace) == Some(pid)),
        "fixture did not start"
    );
    let grandchild = read_grandchild_pid(workspace).unwrap();
    assert_eq!(process_group(pid), Some(pid));
    assert_eq!(process_group(grandchild), Some(pid));
    (child, pid, grandchild)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_group_left_by_an_earlier_instance_is_swept_at_start_but_a_reused_pid_is_not_killed() {
    let mut daemon = TestDaemon::prepare(Options::default());
    let ledger = daemon.state_dir().join("ledger");
    std::fs::create_dir_all(&ledger).unwrap();

    // A group an earlier sandboxd left behind, recorded with its true start time.
    let (mut leftover, leftover_pid, leftover_grandchild) =
        start_orphan_group(daemon.fixture(), &daemon.dir().join("leftover"));
    let record = format!("{leftover_pid} {}\n", start_time(leftover_pid).unwrap());
    std::fs::write(ledger.join("sbx-ses-000000000001.pid"), record).unwrap();

    // A record whose pid now belongs to an unrelated process (another start time).
    let (mut unrelated, unrelated_pid, unrelated_grandchild) =
        start_orphan_group(daemon.fixture(), &daemon.dir().join("unrelated"));
    let wrong_start = start_time(unrelated_pid).unwrap().saturating_sub(1000);
    std::fs::write(
        ledger.join("sbx-ses-000000000002.pid"),
        format!("{unrelated_pid} {wrong_start}\n"),
    )
    .unwrap();

    daemon.launch();
    daemon.wait_ready();
    let status = daemon.client().await.status().await.expect("status");
    assert_eq!(status.driver, "local-process");

    // By the time the daemon answers, the leftover group is dead.
    let leftover_gone = pid_is_gone(leftover_pid) && pid_is_gone(leftover_grandchild);
    let unrelated_alive = !pid_is_gone(unrelated_pid) && !pid_is_gone(unrelated_grandchild);
    procs::signal_group(unrelated_pid, Signal::SIGKILL);
    procs::signal_group(leftover_pid, Signal::SIGKILL);
    let _ = leftover.wait();
    let _ = unrelated.wait();
    assert!(
        leftover_gone,
        "the group an earlier instance left (leader {leftover_pid}, grandchild {leftover_grandchild}) survived the start-up sweep"
    );
    assert!(
        unrelated_alive,
        "the sweep killed a process whose start time does not match its ledger record (pid reuse)"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_journal_is_replayed_at_start_a_live_record_swept_a_forgotten_or_reused_one_not() {
    let mut daemon = TestDaemon::prepare(Options::default());
    let ledger = daemon.state_dir().join("ledger");
    std::fs::create_dir_all(&ledger).unwrap();

    // A group an earlier sandboxd left behind, recorded with its true start time.
    let (mut leftover, leftover_pid, leftover_grandchild) =
        start_orphan_group(daemon.fixture(), &daemon.dir().join("leftover"));
    let leftover_start = start_time(leftover_pid).unwrap();
    // A group the earlier instance recorded and then forgot: not its to kill.
    let (mut forgotten, forgotten_pid, forgotten_grandchild) =
        start_orphan_group(daemon.fixture(), &daemon.dir().join("forgotten"));
    let forgotten_start = start_time(forgotten_pid).unwrap();
    // A record whose pid now belongs to an unrelated process (another start time).
    let (mut unrelated, unrelated_pid, unrelated_grandchild) =
        start_orphan_group(daemon.fixture(), &daemon.dir().join("unrelated"));
    let wrong_start = start_time(unrelated_pid).unwrap().saturating_sub(1000);
    let journal = format!(
        "+ {forgotten_pid} {forgotten_start} sbx-ses-000000000002\n\
         not a ledger line\n\
         + {leftover_pid} {leftover_start} sbx-ses-000000000001\n\
         - {forgotten_pid} {forgotten_start} sbx-ses-000000000002\n\
         + {unrelated_pid} {wrong_start} sbx-ses-000000000003\n"
    );
    std::fs::write(daemon.ledger_journal(), journal).unwrap();

    daemon.launch();
    daemon.wait_ready();
    let status = daemon.client().await.status().await.expect("status");
    assert_eq!(status.driver, "local-process");

    // By the time the daemon answers, the leftover group is dead.
    let leftover_gone = pid_is_gone(leftover_pid) && pid_is_gone(leftover_grandchild);
    let forgotten_alive = !pid_is_gone(forgotten_pid) && !pid_is_gone(forgotten_grandchild);
    let unrelated_alive = !pid_is_gone(unrelated_pid) && !pid_is_gone(unrelated_grandchild);
    for (child, pid) in [
        (&mut leftover, leftover_pid),
        (&mut forgotten, forgotten_pid),
        (&mut unrelated, unrelated_pid),
    ] {
        procs::signal_group(pid, Signal::SIGKILL);
        let _ = child.wait();
    }
    assert!(
        leftover_gone,
        "the group the journal left live (leader {leftover_pid}, grandchild {leftover_grandchild}) survived the start-up sweep"
    );
    assert!(
        forgotten_alive,
        "the sweep killed a group whose journal record was cancelled by a `-` line"
    );
    assert!(
        unrelated_alive,
        "the sweep killed a process whose start time does not match its journal record (pid reuse)"
    );
    let journal = std::fs::read_to_string(daemon.ledger_journal()).unwrap();
    assert!(
        journal.is_empty(),
        "the new instance starts with an empty journal, not:\n{journal}"
    );
    let log = daemon.log_text();
    let journal_path = daemon.ledger_journal().display().to_string();
    assert!(
        log.lines().any(|line| line.contains("malformed")
            && line.contains(&journal_path)
            && line.contains("line=2")),
        "the malformed line is named in a warning; the daemon said:\n{log}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_daemon_on_a_served_socket_refuses_to_start() {
    let first = TestDaemon::start(Options::default());
    let client = first.client().await;
    let report = client
        .ensure_session_sandbox("mine", &sandbox_env("q:mine", ""))
        .await
        .unwrap();
    wait_for_runner(
        &first.workspace(Scope::Session, "mine"),
        report.pid.unwrap(),
    );

    let mut second = TestDaemon::prepare(Options {
        socket: Some(first.socket().to_path_buf()),
        ..Options::default()
    });
    second.launch();
    let status = second
        .wait_exit(Duration::from_secs(20))
        .expect("the second daemon must exit, not serve");
    assert!(!status.success(), "the second daemon exited with {status}");
    let log = second.log_text();
    assert!(
        log.contains(&first.socket().display().to_string()),
        "the refusal names the socket; the second daemon said:\n{log}"
    );

    // The first daemon's socket still works, for old and new clients.
    assert!(
        first.socket().exists(),
        "the second daemon removed the first one's socket"
    );
    assert_eq!(
        client.probe(Scope::Session, "mine").await.unwrap(),
        ProbeState::Running
    );
    let fresh = first.client().await;
    assert_eq!(
        fresh.probe(Scope::Session, "mine").await.unwrap(),
        ProbeState::Running
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_daemon_on_the_same_state_dir_refuses_and_kills_nothing() {
    let first = TestDaemon::start(Options::default());
    let client = first.client().await;
    let pid = client
        .ensure_session_sandbox("mine", &sandbox_env("q:mine", ""))
        .await
        .unwrap()
        .pid
        .unwrap();
    wait_for_runner(&first.workspace(Scope::Session, "mine"), pid);

    let mut second = TestDaemon::prepare(Options {
        args: vec![
            "--state-dir".into(),
            first.state_dir().display().to_string(),
        ],
        ..Options::default()
    });
    second.launch();
    let status = second
        .wait_exit(Duration::from_secs(20))
        .expect("the second daemon must exit, not serve");
    assert!(!status.success(), "{status}");
    assert!(
        !pid_is_gone(pid),
        "the second daemon killed the first one's runner"
    );
    assert_eq!(
        first.ledger_record(Scope::Session, "mine"),
        Some((
            sandboxd_tests::procs::sandbox_leader(pid),
            start_time(sandboxd_tests::procs::sandbox_leader(pid)).unwrap()
        )),
        "the second daemon swept the first one's ledger"
    );
    assert_eq!(
        client.probe(Scope::Session, "mine").await.unwrap(),
        ProbeState::Running
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stale_socket_file_is_replaced() {
    let mut daemon = TestDaemon::prepare(Options::default());
    let socket = daemon.socket().to_path_buf();
    std::fs::create_dir_all(socket.parent().unwrap()).unwrap();
    drop(std::os::unix::net::UnixListener::bind(&socket).unwrap());
    assert!(socket.exists(), "a stale socket file, nobody listening");
    assert!(std::os::unix::net::UnixStream::connect(&socket).is_err());

    daemon.launch();
    daemon.wait_ready();
    let status = daemon.client().await.status().await.expect("status");
    assert_eq!(status.socket_path, socket.display().to_string());
}

#[test]
fn an_unknown_driver_is_a_loud_start_failure() {
    let by_flag = Options {
        args: vec!["--driver".into(), "x".into()],
        ..Options::default()
    };
    let by_env = Options {
        env: vec![("SANDBOX_PROVISIONER_TYPE".into(), "x".into())],
        ..Options::default()
    };
    let by_file = Options {
        extra_toml: String::new(),
        ..Options::default()
    };
    for (how, options) in [
        ("flag", by_flag),
        ("environment", by_env),
        ("file", by_file),
    ] {
        let mut daemon = TestDaemon::prepare(options);
        if how == "file" {
            let config = std::fs::read_to_string(daemon.config_path()).unwrap();
            let config = config.replace("driver = \"local-process\"", "driver = \"x\"");
            std::fs::write(daemon.config_path(), config).unwrap();
        }
        daemon.launch();
        let status = daemon
            .wait_exit(Duration::from_secs(20))
            .expect("sandboxd must exit on an unknown driver");
        // A usage error, found with the configuration: before anything starts.
        assert_eq!(
            status.code(),
            Some(2),
            "unknown driver by {how}: exited with {status}"
        );
        let log = daemon.log_text();
        assert_eq!(
            log.matches(UNKNOWN_DRIVER).count(),
            1,
            "unknown driver by {how}: said once, in:\n{log}"
        );
        assert!(
            log.contains(UNKNOWN_DRIVER),
            "unknown driver by {how}: the message is missing from:\n{log}"
        );
        assert!(
            std::os::unix::net::UnixStream::connect(daemon.socket()).is_err(),
            "nothing may be served"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_missing_runner_command_fails_ensure_clearly_and_the_daemon_keeps_serving() {
    // Besides a missing command: one that is not executable, and one only
    // root may execute (runners run as nobody).
    let extra = sandboxd_tests::make_test_dir();
    let not_executable = extra.join("stigmer-runner-noexec");
    std::fs::write(&not_executable, "#!/bin/sh\nexit 0\n").unwrap();
    std::fs::set_permissions(&not_executable, std::fs::Permissions::from_mode(0o644)).unwrap();
    let root_only = extra.join("stigmer-runner-rootonly");
    sandboxd_tests::executables::copy_executable(
        &sandboxd_tests::binaries::runner_fixture(),
        &root_only,
        0o700,
    );
    let commands = [
        "/nonexistent/stigmer-runner-xyz".to_string(),
        "stigmer-runner-not-in-path-xyz".to_string(),
        not_executable.display().to_string(),
        root_only.display().to_string(),
    ];
    for command in commands {
        let mut daemon = TestDaemon::start(Options {
            runner_command: Some(command.clone()),
            ..Options::default()
        });
        let client = daemon.client().await;
        for attempt in 0..2 {
            match client.ensure_session_sandbox("s1", &sandbox_env("session:s1", "")).await {
                Err(ClientError::Sandbox(error)) => {
                    let message = error.to_string();
                    assert!(message.contains("stigmer-runner"), "the error names the command: {message}");
                    assert!(
                        matches!(error, SandboxError::Unavailable(_) | SandboxError::FailedPrecondition(_)),
                        "{error:?}"
                    );
                }
                other => panic!("ensure with runner command {command} (attempt {attempt}) must fail, got {other:?}"),
            }
        }
        assert_eq!(
            client.probe(Scope::Session, "s1").await.unwrap(),
            ProbeState::Absent,
            "{command}"
        );
        assert!(client.status().await.is_ok(), "the daemon keeps serving");
        assert!(daemon.is_running());
        assert!(daemon.leftover_processes().is_empty());
        assert_eq!(
            std::fs::read_to_string(daemon.ledger_journal()).unwrap(),
            "",
            "nothing recorded"
        );
    }
    let _ = std::fs::remove_dir_all(extra);
}
