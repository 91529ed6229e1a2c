//! The process tier's state machine, end to end: ensure (provision, fast
//! path, respawn), deprovision (idempotent, forced, keep-workspace) and
//! connect sandboxes, against the real daemon and real runner processes.

use std::collections::HashSet;
use std::os::unix::fs::MetadataExt;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use nix::sys::signal::Signal;
use sandboxd_client::{ClientError, EnsureReport, ProbeState, SandboxError, Scope};
use sandboxd_tests::procs::{self, process_group};
use sandboxd_tests::{
    eventually, pid_is_gone, read_grandchild_pid, runner_env, sandbox_env, start_time,
    wait_for_runner, wait_until, Options, TestDaemon, NOBODY, RUNNER_TIMEOUT, RUNNER_UIDS,
};

const GONE_TIMEOUT: Duration = Duration::from_secs(15);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ensure_provisions_once_then_takes_the_fast_path() {
    let daemon = TestDaemon::start(Options::default());
    let client = daemon.client().await;
    let env = sandbox_env("session:fast-1", "tok-fast");

    assert_eq!(
        client.probe(Scope::Session, "fast-1").await.unwrap(),
        ProbeState::Absent
    );
    let first = client.ensure_session_sandbox("fast-1", &env).await.unwrap();
    assert!(first.created, "{first:?}");
    assert_eq!(first.state, ProbeState::Running);
    assert_eq!(first.generation, 1);
    let pid = first
        .pid
        .expect("the process tier reports the runner's pid");
    let workspace = daemon.workspace(Scope::Session, "fast-1");
    wait_for_runner(&workspace, pid);

    // The runner leads its own process group and runs as its sandbox's
    // own uid, which owns its workspace and which the ledger records.
    assert_eq!(
        process_group(pid),
        Some(pid),
        "the runner must lead its own process group"
    );
    let uid = procs::uid_of(pid).expect("the runner's uid");
    assert!(
        RUNNER_UIDS.contains(&uid) && uid != NOBODY,
        "a root daemon runs each sandbox as a uid of runner_uid_range, not {uid}"
    );
    assert_eq!(daemon.ledger_uid(Scope::Session, "fast-1"), Some(uid));
    let meta = std::fs::metadata(&workspace).unwrap();
    assert_eq!(meta.mode() & 0o777, 0o700, "workspace mode");
    assert_eq!((meta.uid(), meta.gid()), (uid, uid), "workspace owner");

    // The ledger records the sandbox's leader (the runner, or its init
    // under `isolation = "full"`) with its start time.
    let leader = procs::sandbox_leader(pid);
    assert_eq!(
        daemon.ledger_record(Scope::Session, "fast-1"),
        Some((leader, start_time(leader).unwrap())),
        "ledger record"
    );

    // The fast path: same runner, no side effect.
    for _ in 0..3 {
        let again = client.ensure_session_sandbox("fast-1", &env).await.unwrap();
        assert!(!again.created, "{again:?}");
        assert_eq!(again.state, ProbeState::Running);
        assert_eq!(again.generation, 1);
        assert_eq!(again.pid, Some(pid));
    }
    assert_eq!(
        client.probe(Scope::Session, "fast-1").await.unwrap(),
        ProbeState::Running
    );
    assert!(!pid_is_gone(pid));

    let info = client.describe(Scope::Session, "fast-1").await.unwrap();
    assert_eq!(
        info.name,
        sandboxd_protocol::naming::base_name(Scope::Session, "fast-1")
    );
    assert_eq!((info.scope, info.id.as_str()), (Scope::Session, "fast-1"));
    assert_eq!(info.state, ProbeState::Running);
    assert_eq!(info.pid, Some(pid));
    assert_eq!(info.generation, 1);
    assert_eq!(info.restarts, 0);
    assert_eq!(info.task_queue, "session:fast-1");
    assert_eq!(info.caller_class, "user");
    assert!(info.started_at_unix_ms.is_some());

    // Workflow sandboxes follow the same state machine, in their own namespace.
    let wf_env = sandbox_env("wfexec:fast-1", "");
    let wf = client
        .ensure_workflow_sandbox("fast-1", &wf_env)
        .await
        .unwrap();
    assert!(wf.created);
    assert_ne!(
        wf.pid,
        Some(pid),
        "the workflow sandbox with the same id is another runner"
    );
    let wf_again = client
        .ensure(Scope::Workflow, "fast-1", &wf_env)
        .await
        .unwrap();
    assert_eq!((wf_again.created, wf_again.pid), (false, wf.pid));
    assert_eq!(client.list(Some(Scope::Workflow)).await.unwrap().len(), 1);
    assert_eq!(client.list(None).await.unwrap().len(), 2);
    // A runner's environment shows in /proc once it has exec'd: wait for it.
    wait_until(RUNNER_TIMEOUT, || daemon.leftover_processes().len() == 2);
    assert_eq!(daemon.leftover_processes().len(), 2, "exactly two runners");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn fifty_concurrent_ensures_of_one_id_start_one_runner() {
    let daemon = TestDaemon::start(Options::default());
    // Ten connections, five calls each, all at once.
    let mut clients = Vec::new();
    for _ in 0..10 {
        clients.push(daemon.client().await);
    }
    let env = sandbox_env("session:herd", "tok-herd");
    let calls = (0..50).map(|n| {
        let client = clients[n % clients.len()].clone();
        let env = env.clone();
        tokio::spawn(async move { client.ensure_session_sandbox("herd", &env).await })
    });
    let reports: Vec<_> = futures::future::join_all(calls)
        .await
        .into_iter()
        .map(|joined| joined.expect("task").expect("ensure"))
        .collect();

    let created = reports.iter().filter(|report| report.created).count();
    assert_eq!(
        created, 1,
        "exactly one ensure may start the runner: {reports:?}"
    );
    let pids: HashSet<_> = reports.iter().map(|report| report.pid).collect();
    assert_eq!(
        pids.len(),
        1,
        "every ensure must report the same runner: {pids:?}"
    );
    assert!(reports
        .iter()
        .all(|report| report.generation == 1 && report.state == ProbeState::Running));

    let pid = reports[0].pid.unwrap();
    wait_for_runner(&daemon.workspace(Scope::Session, "herd"), pid);
    // Let any double spawn show itself before counting.
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(
        daemon.leftover_processes(),
        vec![pid],
        "one runner process and nothing else"
    );
    assert_eq!(
        daemon
            .client()
            .await
            .describe(Scope::Session, "herd")
            .await
            .unwrap()
            .generation,
        1
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_runner_is_absent_and_the_next_ensure_respawns_it() {
    let daemon = TestDaemon::start(Options::default());
    let client = daemon.client().await;
    let env = sandbox_env("session:phoenix", "tok-1");
    let first = client
        .ensure_session_sandbox("phoenix", &env)
        .await
        .unwrap();
    let old_pid = first.pid.unwrap();
    let workspace = daemon.workspace(Scope::Session, "phoenix");
    wait_for_runner(&workspace, old_pid);
    std::fs::write(workspace.join("marker"), "kept").unwrap();

    procs::signal_pid(old_pid, Signal::SIGKILL);
    assert!(
        eventually(GONE_TIMEOUT, || async {
            client.probe(Scope::Session, "phoenix").await.unwrap() == ProbeState::Absent
        })
        .await,
        "a dead runner must probe absent, not a cached belief"
    );
    assert!(wait_until(GONE_TIMEOUT, || pid_is_gone(old_pid)));
    let info = client.describe(Scope::Session, "phoenix").await.unwrap();
    assert_eq!(info.state, ProbeState::Absent);
    assert_eq!(info.pid, None);
    let exit = info.last_exit.expect("the runner's exit is recorded");
    assert_eq!(exit.signal, Some(libc::SIGKILL), "{exit:?}");

    let second = client
        .ensure_session_sandbox("phoenix", &env)
        .await
        .unwrap();
    assert!(second.created, "{second:?}");
    assert_eq!(second.generation, first.generation + 1);
    let new_pid = second.pid.unwrap();
    assert_ne!(new_pid, old_pid);
    wait_for_runner(&workspace, new_pid);
    assert_eq!(
        std::fs::read_to_string(workspace.join("marker")).unwrap(),
        "kept",
        "the workspace is kept across respawns"
    );
    assert_eq!(
        client.probe(Scope::Session, "phoenix").await.unwrap(),
        ProbeState::Running
    );
    let info = client.describe(Scope::Session, "phoenix").await.unwrap();
    assert_eq!(
        (info.generation, info.restarts, info.pid),
        (2, 1, Some(new_pid))
    );
    assert_eq!(
        daemon
            .ledger_record(Scope::Session, "phoenix")
            .map(|(pid, _)| pid),
        Some(procs::sandbox_leader(new_pid)),
        "the ledger records the new runner, and no longer the old one"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_runner_that_exits_at_once_is_seen_and_recorded() {
    let daemon = TestDaemon::start(Options::with_runner_args(&["--exit-code", "3"]));
    let client = daemon.client().await;
    let env = sandbox_env("wfexec:brief", "");
    let first = client.ensure_workflow_sandbox("brief", &env).await.unwrap();
    assert!(first.created);
    let workspace = daemon.workspace(Scope::Workflow, "brief");
    assert!(
        eventually(GONE_TIMEOUT, || async {
            client.probe(Scope::Workflow, "brief").await.unwrap() == ProbeState::Absent
        })
        .await,
        "a runner that exited must probe absent"
    );
    // Gone, so its pid cannot be mapped: under `isolation = "full"` it wrote
    // the pid it had in its sandbox, as the init's first child.
    assert_eq!(
        sandboxd_tests::procs::read_pid_file(&workspace.join("pid")),
        Some(sandboxd_tests::runner::RUNNER_PID_IN_SANDBOX),
        "the runner did run"
    );
    let second = client.ensure_workflow_sandbox("brief", &env).await.unwrap();
    assert_eq!(second.generation, first.generation + 1);
    let exited_with_3 = eventually(GONE_TIMEOUT, || async {
        let info = client.describe(Scope::Workflow, "brief").await.unwrap();
        info.last_exit
            .is_some_and(|exit| exit.code == Some(3) && exit.signal.is_none())
    })
    .await;
    assert!(
        exited_with_3,
        "describe reports the exit code: {:?}",
        client.describe(Scope::Workflow, "brief").await
    );
    let log =
        std::fs::read_to_string(daemon.runner_log(Scope::Workflow, "brief")).unwrap_or_default();
    assert!(
        log.contains("runner-fixture"),
        "the runner's stderr goes to its log file: {log:?}"
    );
}

/// Waits for the runner `report` names to write its pid in its workspace,
/// and reads the pid of the grandchild it forked (`--fork-grandchild`):
/// a teardown must take both. Returns (runner pid, workspace, grandchild pid).
fn runner_and_grandchild(
    daemon: &TestDaemon,
    scope: Scope,
    id: &str,
    report: &EnsureReport,
) -> (u32, PathBuf, u32) {
    let pid = report.pid.unwrap();
    let workspace = daemon.workspace(scope, id);
    wait_for_runner(&workspace, pid);
    let grandchild = read_grandchild_pid(&workspace).unwrap();
    (pid, workspace, grandchild)
}

/// Asserts that a deprovision took the whole group: the runner and the
/// grandchild it forked are both gone within [`GONE_TIMEOUT`].
#[track_caller]
fn assert_runner_and_grandchild_gone(pid: u32, grandchild: u32) {
    assert!(
        wait_until(GONE_TIMEOUT, || pid_is_gone(pid)),
        "runner {pid} still alive"
    );
    assert!(
        wait_until(GONE_TIMEOUT, || pid_is_gone(grandchild)),
        "grandchild {grandchild} still alive"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deprovision_tears_down_and_is_idempotent() {
    let daemon = TestDaemon::start(Options::with_runner_args(&["--fork-grandchild"]));
    let client = daemon.client().await;
    let report = client
        .ensure_session_sandbox("gone-1", &sandbox_env("session:gone-1", "t"))
        .await
        .unwrap();
    let (pid, workspace, grandchild) =
        runner_and_grandchild(&daemon, Scope::Session, "gone-1", &report);
    assert_eq!(
        process_group(grandchild),
        Some(pid),
        "the grandchild shares the runner's group"
    );

    let down = client.deprovision_session_sandbox("gone-1").await.unwrap();
    assert!(down.was_present, "{down:?}");
    assert!(!down.forced, "the fixture exits on SIGTERM: {down:?}");
    assert_runner_and_grandchild_gone(pid, grandchild);
    // The teardown follows the answer (see `deprovision_teardown.rs`).
    assert!(
        wait_until(GONE_TIMEOUT, || !workspace.exists()),
        "a plain deprovision removes the workspace"
    );
    assert!(
        wait_until(GONE_TIMEOUT, || !daemon
            .runner_log(Scope::Session, "gone-1")
            .exists()),
        "and the runner's output file"
    );
    assert!(
        wait_until(GONE_TIMEOUT, || daemon.trash_entries().is_empty()),
        "what was moved to the trash is deleted: {:?}",
        daemon.trash_entries()
    );
    assert_eq!(
        daemon.ledger_record(Scope::Session, "gone-1"),
        None,
        "the ledger record is removed"
    );
    assert_eq!(
        client.probe(Scope::Session, "gone-1").await.unwrap(),
        ProbeState::Absent
    );

    let again = client.deprovision_session_sandbox("gone-1").await.unwrap();
    assert!(!again.was_present && !again.forced, "{again:?}");
    let never = client
        .deprovision_workflow_sandbox("never-existed")
        .await
        .unwrap();
    assert!(!never.was_present, "{never:?}");
    assert!(daemon.leftover_processes().is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deprovision_forces_a_runner_that_ignores_sigterm_after_the_grace() {
    let mut options = Options::with_runner_args(&["--ignore-term", "--fork-grandchild"]);
    options.stop_grace = "1s".to_string();
    let daemon = TestDaemon::start(options);
    let client = daemon.client().await;
    let report = client
        .ensure_workflow_sandbox("stubborn", &sandbox_env("wfexec:stubborn", ""))
        .await
        .unwrap();
    let (pid, _workspace, grandchild) =
        runner_and_grandchild(&daemon, Scope::Workflow, "stubborn", &report);

    let started = Instant::now();
    let down = client
        .deprovision_workflow_sandbox("stubborn")
        .await
        .unwrap();
    let took = started.elapsed();
    assert!(
        down.was_present && down.forced,
        "a runner that ignores SIGTERM is killed and reported forced: {down:?}"
    );
    assert!(
        took >= Duration::from_millis(900),
        "SIGKILL came before the 1 s grace: after {took:?}"
    );
    assert_runner_and_grandchild_gone(pid, grandchild);
    assert!(
        daemon.leftover_processes().is_empty(),
        "{:?}",
        daemon.leftover_processes()
    );
    assert_eq!(
        client.probe(Scope::Workflow, "stubborn").await.unwrap(),
        ProbeState::Absent
    );
}

/// Deprovision moves a workspace out of the way and answers; the tree is
/// deleted in the background, and what an interrupted deletion left is
/// deleted at the next start.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_big_workspace_is_moved_out_then_deleted_and_leftover_trash_goes_at_start() {
    let mut daemon = TestDaemon::prepare(Options::default());
    let leftover = daemon
        .state_dir()
        .join("sandboxes/.trash/sbx-ses-000000000009.0.0.workspace/deep");
    std::fs::create_dir_all(&leftover).unwrap();
    std::fs::write(leftover.join("file"), "left by an earlier instance").unwrap();
    daemon.launch();
    daemon.wait_ready();
    assert!(
        wait_until(GONE_TIMEOUT, || daemon.trash_entries().is_empty()),
        "leftover trash survives a start: {:?}",
        daemon.trash_entries()
    );

    let client = daemon.client().await;
    let env = sandbox_env("session:big", "");
    let pid = client
        .ensure(Scope::Session, "big", &env)
        .await
        .unwrap()
        .pid
        .unwrap();
    let workspace = daemon.workspace(Scope::Session, "big");
    wait_for_runner(&workspace, pid);
    for dir in 0..20 {
        let dir = workspace.join(format!("tree/{dir}"));
        std::fs::create_dir_all(&dir).unwrap();
        for file in 0..50 {
            std::fs::write(dir.join(format!("{file}.txt")), "contents").unwrap();
        }
    }

    let down = client
        .deprovision(Scope::Session, "big", false)
        .await
        .unwrap();
    assert!(down.was_present && !down.forced, "{down:?}");
    // Moved out right after the answer, whatever its size.
    assert!(
        wait_until(GONE_TIMEOUT, || !workspace.exists()),
        "the workspace is not moved out"
    );
    assert!(wait_until(GONE_TIMEOUT, || !daemon
        .runner_log(Scope::Session, "big")
        .exists()));
    assert!(
        wait_until(GONE_TIMEOUT, || daemon.trash_entries().is_empty()),
        "the moved tree is never deleted: {:?}",
        daemon.trash_entries()
    );

    // The same sandbox again starts from an empty workspace.
    let pid = client
        .ensure(Scope::Session, "big", &env)
        .await
        .unwrap()
        .pid
        .unwrap();
    wait_for_runner(&workspace, pid);
    assert!(!workspace.join("tree").exists(), "the old tree came back");
    client
        .deprovision(Scope::Session, "big", false)
        .await
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keep_workspace_keeps_it_and_a_plain_deprovision_removes_it() {
    let daemon = TestDaemon::start(Options::default());
    let client = daemon.client().await;
    let env = sandbox_env("session:keep", "");
    let pid = client
        .ensure(Scope::Session, "keep", &env)
        .await
        .unwrap()
        .pid
        .unwrap();
    let workspace = daemon.workspace(Scope::Session, "keep");
    wait_for_runner(&workspace, pid);

    let down = client
        .deprovision(Scope::Session, "keep", true)
        .await
        .unwrap();
    assert!(down.was_present);
    assert!(wait_until(GONE_TIMEOUT, || pid_is_gone(pid)));
    assert!(
        workspace.join("env.json").is_file(),
        "--keep-workspace keeps the workspace and its files"
    );
    assert_eq!(
        client.probe(Scope::Session, "keep").await.unwrap(),
        ProbeState::Absent
    );

    // A kept workspace is reused by the next runner.
    let pid = client
        .ensure(Scope::Session, "keep", &env)
        .await
        .unwrap()
        .pid
        .unwrap();
    wait_for_runner(&workspace, pid);
    let down = client
        .deprovision(Scope::Session, "keep", false)
        .await
        .unwrap();
    assert!(down.was_present);
    assert!(
        wait_until(GONE_TIMEOUT, || !workspace.exists()),
        "a plain deprovision removes the workspace"
    );
    assert!(wait_until(GONE_TIMEOUT, || pid_is_gone(pid)));

    // A workspace kept with no runner left still counts as present, and goes.
    let pid = client
        .ensure(Scope::Session, "keep", &env)
        .await
        .unwrap()
        .pid
        .unwrap();
    wait_for_runner(&workspace, pid);
    client
        .deprovision(Scope::Session, "keep", true)
        .await
        .unwrap();
    assert!(workspace.exists());
    let down = client
        .deprovision(Scope::Session, "keep", false)
        .await
        .unwrap();
    assert!(
        down.was_present,
        "a kept workspace is something to tear down: {down:?}"
    );
    assert!(!workspace.exists());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connect_sandboxes_are_created_once_and_deprovisioned_idempotently() {
    let daemon = TestDaemon::start(Options::default());
    let client = daemon.client().await;
    let env = sandbox_env("mcp:req-7", "tok-connect");
    let sandbox_id = client.create_connect_sandbox("req-7", &env).await.unwrap();
    assert!(!sandbox_id.is_empty());
    assert_eq!(
        client.probe(Scope::Connect, &sandbox_id).await.unwrap(),
        ProbeState::Running
    );
    let info = client.describe(Scope::Connect, &sandbox_id).await.unwrap();
    let pid = info.pid.expect("a running connect sandbox has a pid");
    assert_eq!(
        procs::env_after_exec(pid, "WORKSPACE_ROOT_DIR").as_deref(),
        Some("/workspace"),
        "its view's path"
    );
    let workspace = daemon.state_dir().join("sandboxes").join(&info.name);
    assert!(workspace.is_dir(), "{}", workspace.display());
    assert!(
        workspace.starts_with(daemon.state_dir().join("sandboxes")),
        "{}",
        workspace.display()
    );
    assert!(
        workspace
            .file_name()
            .unwrap()
            .to_string_lossy()
            .starts_with("sbx-mcp-"),
        "a connect sandbox's workspace is named sbx-mcp-…: {}",
        workspace.display()
    );
    wait_for_runner(&workspace, pid);
    assert_eq!(
        runner_env(&workspace)
            .get("STIGMER_TASK_QUEUE")
            .map(String::as_str),
        Some("mcp:req-7")
    );

    // NOT idempotent: a second create of the same request fails.
    match client.create_connect_sandbox("req-7", &env).await {
        Err(ClientError::Sandbox(SandboxError::FailedPrecondition(message))) => {
            assert!(
                message.contains("req-7"),
                "the error names the request: {message}"
            );
        }
        other => panic!(
            "a second create of the same request must fail with failed precondition, got {other:?}"
        ),
    }
    assert_eq!(
        daemon.leftover_processes(),
        vec![pid],
        "the failed create started nothing"
    );

    let down = client
        .deprovision_connect_sandbox(&sandbox_id)
        .await
        .unwrap();
    assert!(down.was_present, "{down:?}");
    assert!(wait_until(GONE_TIMEOUT, || pid_is_gone(pid)));
    assert_eq!(
        client.probe(Scope::Connect, &sandbox_id).await.unwrap(),
        ProbeState::Absent
    );
    let again = client
        .deprovision_connect_sandbox(&sandbox_id)
        .await
        .unwrap();
    assert!(!again.was_present, "{again:?}");
    assert!(daemon.leftover_processes().is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_ensure_racing_a_slow_deprovision_gets_a_runner_that_stays() {
    // The old runner ignores SIGTERM, so its deprovision takes the whole
    // grace; its late exit must not remove the replacement from the table.
    let mut options = Options::with_runner_args(&["--ignore-term"]);
    options.stop_grace = "1s".to_string();
    let daemon = TestDaemon::start(options);
    let client = daemon.client().await;
    let env = sandbox_env("session:race", "");
    let old = client.ensure_session_sandbox("race", &env).await.unwrap();
    let old_pid = old.pid.unwrap();
    let workspace = daemon.workspace(Scope::Session, "race");
    wait_for_runner(&workspace, old_pid);

    let deprovision = {
        let client = client.clone();
        tokio::spawn(async move { client.deprovision(Scope::Session, "race", true).await })
    };
    // The deprovision has taken the sandbox's record (under its key lock,
    // which it holds through the grace): probe reads the records without
    // that lock. A fixed pause was not always enough on a loaded machine.
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while client.probe(Scope::Session, "race").await.unwrap() == ProbeState::Running {
        assert!(
            std::time::Instant::now() < deadline,
            "the deprovision never began"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let new = client.ensure_session_sandbox("race", &env).await.unwrap();
    let down = deprovision.await.unwrap().unwrap();
    assert!(down.was_present && down.forced, "{down:?}");
    assert!(
        new.created,
        "the ensure after the deprovision starts a new runner: {new:?}"
    );
    let new_pid = new.pid.unwrap();
    assert_ne!(new_pid, old_pid);
    assert!(wait_until(GONE_TIMEOUT, || pid_is_gone(old_pid)));
    wait_for_runner(&workspace, new_pid);

    // Give a wrongly attributed exit every chance to show.
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(
        client.probe(Scope::Session, "race").await.unwrap(),
        ProbeState::Running
    );
    let again = client.ensure_session_sandbox("race", &env).await.unwrap();
    assert_eq!(
        (again.created, again.pid),
        (false, Some(new_pid)),
        "the replacement was forgotten"
    );
    assert!(!pid_is_gone(new_pid));
    assert_eq!(daemon.leftover_processes(), vec![new_pid]);
}

/// `PR_SET_PDEATHSIG` fires when the *thread* that forked a runner exits,
/// and tokio retires idle blocking-pool threads after 10 s. A runner must
/// outlive every thread the daemon may retire: it is still running after
/// the daemon has been idle well past that.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_runner_outlives_the_daemons_idle_threads() {
    let daemon = TestDaemon::start(Options::default());
    let client = daemon.client().await;
    let report = client
        .ensure_session_sandbox("idle", &sandbox_env("session:idle", ""))
        .await
        .unwrap();
    let pid = report.pid.unwrap();
    wait_for_runner(&daemon.workspace(Scope::Session, "idle"), pid);
    // Make the daemon use its blocking pool (a deprovision's workspace
    // removal runs there), then leave it idle past the pool's 10 s keep-alive.
    client
        .ensure_workflow_sandbox("idle-other", &sandbox_env("wfexec:idle-other", ""))
        .await
        .unwrap();
    client
        .deprovision_workflow_sandbox("idle-other")
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_secs(13)).await;
    assert!(!pid_is_gone(pid), "the runner died with an idle thread");
    assert_eq!(
        client.probe(Scope::Session, "idle").await.unwrap(),
        ProbeState::Running
    );
}
