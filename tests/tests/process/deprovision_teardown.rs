//! Deprovision answers at the kill; the teardown follows.
//!
//! The answer goes once the runner's leader has exited on SIGTERM (or its
//! cgroup's kill was sent after the grace); emptying and removing its
//! cgroup, moving the workspace to the trash and releasing the uid come
//! after it, still under the sandbox's key. These tests hold the daemon to
//! what that must not lose: an ensure of the same id right after the answer
//! waits for all of it (a clean workspace, no process of the old
//! generation), many deprovisions in a row all finish, and a daemon stopped
//! with teardowns under way finishes them before it exits.

use std::time::Duration;

use sandboxd_client::{ProbeState, Scope};
use sandboxd_tests::procs::{self, pid_is_gone, wait_until};
use sandboxd_tests::runner::{read_grandchild_pid, wait_for_runner};
use sandboxd_tests::{sandbox_env, Options, TestDaemon};

/// A bounded wait for what follows an answer, on a loaded machine.
const TEARDOWN_WAIT: Duration = Duration::from_secs(20);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_ensure_right_after_a_deprovision_waits_for_the_teardown() {
    let daemon = TestDaemon::start(Options::with_runner_args(&["--fork-grandchild"]));
    let client = daemon.client().await;
    let env = sandbox_env("session:again", "tok");
    let workspace = daemon.workspace(Scope::Session, "again");
    for round in 0..5 {
        let first = client.ensure_session_sandbox("again", &env).await.unwrap();
        assert!(first.created, "round {round}: {first:?}");
        let pid = first.pid.unwrap();
        wait_for_runner(&workspace, pid);
        let grandchild = read_grandchild_pid(&workspace).unwrap();
        std::fs::write(workspace.join("old-generation"), "left").unwrap();

        let down = client.deprovision_session_sandbox("again").await.unwrap();
        assert!(down.was_present && !down.forced, "round {round}: {down:?}");
        // At once, with the teardown still going on.
        let second = client.ensure_session_sandbox("again", &env).await.unwrap();
        // Checked the moment the ensure answered: nothing of the old
        // generation may be left by then.
        let old_left: Vec<u32> = [pid, grandchild]
            .into_iter()
            .filter(|&pid| !pid_is_gone(pid))
            .collect();
        let marker_left = workspace.join("old-generation").exists();
        assert!(
            old_left.is_empty(),
            "round {round}: the old generation's {} still ran when the new one started",
            procs::describe(&old_left)
        );
        assert!(
            second.created && second.uid != first.uid,
            "round {round}: a new incarnation: {second:?} after {first:?}"
        );
        assert!(
            !marker_left,
            "round {round}: the new runner got the old workspace"
        );
        wait_for_runner(&workspace, second.pid.unwrap());
        let down = client.deprovision_session_sandbox("again").await.unwrap();
        assert!(down.was_present, "round {round}: {down:?}");
    }

    // Kept: the same workspace, files and all, for the next runner (of a
    // new incarnation: a deprovision ends it either way).
    let kept = client.ensure_session_sandbox("again", &env).await.unwrap();
    wait_for_runner(&workspace, kept.pid.unwrap());
    std::fs::write(workspace.join("kept"), "yes").unwrap();
    client
        .deprovision(Scope::Session, "again", true)
        .await
        .unwrap();
    let after = client.ensure_session_sandbox("again", &env).await.unwrap();
    assert!(after.created && after.uid != kept.uid, "{after:?} {kept:?}");
    assert!(!pid_is_gone(after.pid.unwrap()));
    assert_eq!(
        std::fs::read_to_string(workspace.join("kept")).unwrap(),
        "yes"
    );
    assert!(
        pid_is_gone(kept.pid.unwrap()),
        "the kept workspace's old runner"
    );
    client.deprovision_session_sandbox("again").await.unwrap();
    assert!(
        wait_until(TEARDOWN_WAIT, || daemon.leftover_processes().is_empty()
            && !workspace.exists()
            && daemon.trash_entries().is_empty()),
        "left: {:?}, workspace {}, trash {:?}",
        daemon.leftover_processes(),
        workspace.exists(),
        daemon.trash_entries()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn many_deprovisions_in_a_row_all_tear_down() {
    const COUNT: usize = 24;
    let daemon = TestDaemon::start(Options::with_runner_args(&["--fork-grandchild"]));
    let client = daemon.client().await;
    let ids: Vec<String> = (0..COUNT).map(|n| format!("row-{n}")).collect();
    let mut pids = Vec::new();
    for id in &ids {
        let env = sandbox_env(&format!("session:{id}"), "tok");
        let report = client.ensure_session_sandbox(id, &env).await.unwrap();
        let pid = report.pid.unwrap();
        let workspace = daemon.workspace(Scope::Session, id);
        wait_for_runner(&workspace, pid);
        pids.push((pid, read_grandchild_pid(&workspace).unwrap()));
    }
    for id in &ids {
        let down = client.deprovision_session_sandbox(id).await.unwrap();
        assert!(down.was_present && !down.forced, "{id}: {down:?}");
        assert_eq!(
            client.probe(Scope::Session, id).await.unwrap(),
            ProbeState::Absent
        );
    }
    // Half of them again at once: each waits for its own teardown only.
    for id in ids.iter().step_by(2) {
        let env = sandbox_env(&format!("session:{id}"), "tok");
        let report = client.ensure_session_sandbox(id, &env).await.unwrap();
        assert!(report.created && report.generation == 1, "{id}: {report:?}");
    }
    for id in ids.iter().step_by(2) {
        client.deprovision_session_sandbox(id).await.unwrap();
    }
    assert!(
        wait_until(TEARDOWN_WAIT, || pids.iter().all(
            |&(pid, grandchild)| pid_is_gone(pid) && pid_is_gone(grandchild)
        ) && daemon
            .leftover_processes()
            .is_empty()),
        "left: {}",
        procs::describe(&daemon.leftover_processes())
    );
    assert!(
        wait_until(TEARDOWN_WAIT, || daemon.workspaces().is_empty()
            && daemon.trash_entries().is_empty()
            && daemon.ledger_live_records().is_empty()),
        "workspaces {:?}, trash {:?}, ledger {:?}",
        daemon.workspaces(),
        daemon.trash_entries(),
        daemon.ledger_live_records()
    );
    let status = client.status().await.unwrap();
    assert_eq!(status.counts.running, 0, "{:?}", status.counts);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_daemon_stop_finishes_the_teardowns_under_way() {
    const COUNT: usize = 32;
    let mut daemon = TestDaemon::start(Options::with_runner_args(&["--fork-grandchild"]));
    let client = daemon.client().await;
    let ids: Vec<String> = (0..COUNT).map(|n| format!("stop-{n}")).collect();
    for id in &ids {
        let env = sandbox_env(&format!("session:{id}"), "tok");
        let report = client.ensure_session_sandbox(id, &env).await.unwrap();
        wait_for_runner(&daemon.workspace(Scope::Session, id), report.pid.unwrap());
    }
    // All at once, and the daemon's SIGTERM the moment the first answers:
    // the others are still stopping or tearing down.
    let (answered, mut first) = tokio::sync::mpsc::unbounded_channel();
    let calls: Vec<_> = ids
        .iter()
        .map(|id| {
            let (client, id, answered) = (client.clone(), id.clone(), answered.clone());
            tokio::spawn(async move {
                let down = client.deprovision(Scope::Session, &id, false).await;
                let _ = answered.send(());
                down
            })
        })
        .collect();
    first.recv().await.unwrap();
    procs::signal_pid(daemon.pid().unwrap(), nix::sys::signal::Signal::SIGTERM);
    let mut deprovisioned = Vec::new();
    for (id, call) in ids.iter().zip(calls) {
        // The stop may refuse or cut off the calls it came before.
        if let Ok(down) = call.await.unwrap() {
            assert!(down.was_present, "{id}: {down:?}");
            deprovisioned.push(id.clone());
        }
    }
    drop(client);
    let status = daemon
        .wait_exit(TEARDOWN_WAIT)
        .expect("the daemon exits after its stop");
    assert!(status.success(), "the daemon's stop: {status}");
    assert!(!deprovisioned.is_empty());
    // Nothing waits: the daemon has exited, so what it left is final.
    assert!(
        daemon.leftover_processes().is_empty(),
        "{}",
        procs::describe(&daemon.leftover_processes())
    );
    let left: Vec<&String> = deprovisioned
        .iter()
        .filter(|id| daemon.workspace(Scope::Session, id).exists())
        .collect();
    assert!(
        left.is_empty(),
        "deprovisions answered, but their workspaces were left in place: {left:?}"
    );
    // Each answered deprovision's teardown ran to its end (its line).
    let log = daemon.log_text();
    let finished = log
        .lines()
        .filter(|line| {
            line.contains("sandbox deprovisioned") && line.contains("keep_workspace=false")
        })
        .count();
    assert!(
        finished >= deprovisioned.len(),
        "{finished} teardowns logged as done for {} answers:\n{log}",
        deprovisioned.len()
    );
}

/// What the operator reads: one info line per deprovision — the tier's,
/// once its teardown is done, for a sandbox that was there; the server's
/// for one that was not (no tier logs a deprovision of nothing).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deprovision_is_one_info_line() {
    let daemon = TestDaemon::start(Options::default());
    sandboxd_tests::start_session(&daemon, "logged").await;
    let client = daemon.client().await;
    let down = client.deprovision_session_sandbox("logged").await.unwrap();
    assert!(down.was_present, "{down:?}");
    let absent = client.deprovision_session_sandbox("never").await.unwrap();
    assert!(!absent.was_present, "{absent:?}");
    let info_lines = |id: &str, message: &str| {
        let needle = format!("id={id}");
        daemon
            .log_text()
            .lines()
            .filter(|line| line.contains(" INFO ") && line.contains(message))
            .filter(|line| line.split_whitespace().any(|field| field == needle))
            .count()
    };
    let logged_once = || info_lines("logged", "sandbox deprovisioned") == 1;
    assert!(
        wait_until(TEARDOWN_WAIT, logged_once),
        "{}",
        daemon.log_text()
    );
    assert_eq!(info_lines("never", "sandbox deprovisioned"), 0);
    assert_eq!(
        info_lines("never", "nothing to deprovision"),
        1,
        "{}",
        daemon.log_text()
    );
}
