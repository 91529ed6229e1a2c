//! Prepared sandboxes under `isolation = "gvisor"`: a `runsc run` parked
//! ahead with its sentry booted, whose stub execs the runner at the take.
//! A sandbox taken from the pool runs its runner under gVisor with the
//! contract's environment, its own uid and its workspace (the prepared
//! directory, renamed into place under the gofer); the pool refills; a
//! sandbox whose workspace is on disk already starts cold; and neither a
//! deprovision, a daemon's stop nor a killed daemon leaves a runsc process,
//! state or bundle of a prepared sandbox behind.

use std::os::unix::fs::MetadataExt;
use std::time::{Duration, Instant};

use sandboxd_protocol::{IsolationFeature, Scope};
use sandboxd_tests::procs::wait_until;
use sandboxd_tests::TestDaemon;

use super::{
    assert_runsc_gone, entries, gvisor_daemon, nothing_left, processes_naming, runsc_installed,
    runsc_root, start, PROBE_TIMEOUT, START_TIMEOUT,
};

const POOL_OF_ONE: &str = "[pool]\nsession = 1\nworkflow = 0\nconnect = 0\n";

async fn pool_feature(daemon: &TestDaemon) -> IsolationFeature {
    let status = daemon.client().await.status().await.unwrap();
    status
        .isolation
        .into_iter()
        .find(|feature| feature.name == "prepared-sandboxes")
        .expect("status lists the prepared sandboxes")
}

/// Waits until the session pool's line starts with `prefix`; the line.
async fn wait_for_pool(daemon: &TestDaemon, prefix: &str) -> String {
    let deadline = Instant::now() + START_TIMEOUT;
    loop {
        let pool = pool_feature(daemon).await;
        assert!(pool.in_force, "{pool:?}\n{}", daemon.log_text());
        if pool.detail.starts_with(prefix) {
            return pool.detail;
        }
        assert!(
            Instant::now() < deadline,
            "the pool never said {prefix:?}: {pool:?}\n{}",
            daemon.log_text()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// The bundles in `<state>/gvisor/bundles`.
fn bundles(daemon: &TestDaemon) -> Vec<String> {
    entries(&daemon.state_dir().join("gvisor").join("bundles"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_taken_sandbox_runs_its_runner_under_gvisor_as_a_cold_one_would() {
    if !runsc_installed() {
        return;
    }
    let mut daemon = gvisor_daemon(&["--serve-probes"], POOL_OF_ONE);
    let ready = wait_for_pool(&daemon, "session: 1 of 1 ready").await;
    assert!(ready.contains("parked under gVisor"), "{ready}");
    // Parked ahead: its runsc run, sentry and gofer are up, its bundle made.
    let root = runsc_root(&daemon).display().to_string();
    assert!(processes_naming(&root).len() >= 3, "no parked runsc");
    assert_eq!(bundles(&daemon), ["prepared-0"]);
    let parked: Vec<u32> = processes_naming("prepared-0")
        .into_iter()
        .filter(|pid| {
            std::fs::read_to_string(format!("/proc/{pid}/cmdline"))
                // This daemon's only: another test's daemon may park a
                // `prepared-0` of its own meanwhile.
                .is_ok_and(|line| line.contains("run\0--bundle") && line.contains(&root))
        })
        .collect();

    // The sandbox's leader is the parked `runsc run`: its runner was not
    // started cold after all.
    let leader = start(&daemon, "warm").await;
    assert_eq!(parked, [leader], "{}", daemon.log_text());
    let pool = wait_for_pool(&daemon, "session: 1 of 1 ready, 1 taken, 0 started cold").await;
    assert!(!pool.contains("problem"), "{pool}");
    let client = daemon.client().await;
    let put = client.put_file_from(Scope::Session, "warm", "from-host", 0o644, &b"hello"[..]);
    assert_eq!(put.await.unwrap(), 5);
    let seen = sandboxd_tests::runner::probe(
        &daemon,
        "warm",
        "echo version=$(head -n 1 /proc/version)\n\
         echo uid=$(id -u)\n\
         echo home=$HOME\n\
         echo root=$WORKSPACE_ROOT_DIR\n\
         echo queue=$STIGMER_TASK_QUEUE\n\
         echo token=$STIGMER_TOKEN\n\
         echo cwd=$(pwd)\n\
         echo put=$(cat $WORKSPACE_ROOT_DIR/from-host)\n\
         echo inside > $WORKSPACE_ROOT_DIR/from-inside && echo wrote=ok\n",
        PROBE_TIMEOUT,
    );
    let host_version = std::fs::read_to_string("/proc/version").unwrap();
    assert_ne!(seen["version"], host_version.trim(), "the host's kernel");
    assert_eq!(seen["home"], "/workspace", "{seen:?}");
    assert_eq!(seen["root"], "/workspace", "{seen:?}");
    assert_eq!(seen["cwd"], "/workspace", "{seen:?}");
    assert_eq!(seen["queue"], "q:warm", "{seen:?}");
    assert_eq!(seen["token"], "tok", "{seen:?}");
    assert_eq!(seen["put"], "hello", "a file put from the host is unseen");
    assert_eq!(seen["wrote"], "ok");
    // Its workspace on the host is the one it writes, owned by its uid.
    let workspace = daemon.workspace(Scope::Session, "warm");
    assert_eq!(
        std::fs::read_to_string(workspace.join("from-inside")).unwrap(),
        "inside\n"
    );
    let uid: u32 = seen["uid"].parse().unwrap();
    assert!(uid >= 2_000_000_000, "{seen:?}");
    assert_eq!(std::fs::metadata(&workspace).unwrap().uid(), uid);
    // Its runner's output reaches its log, past the stub's word.
    let log = std::fs::read_to_string(daemon.runner_log(Scope::Session, "warm")).unwrap();
    assert!(log.contains("runner-fixture"), "{log}");
    assert!(!log.contains("sandboxd-parked"), "{log}");

    // Deprovisioned: its runsc state and bundle go; the refilled one stays.
    client
        .deprovision(Scope::Session, "warm", false)
        .await
        .unwrap();
    assert!(
        wait_until(START_TIMEOUT, || bundles(&daemon) == ["prepared-1"]
            && entries(&runsc_root(&daemon))
                .iter()
                .all(|entry| entry.contains("prepared-1"))),
        "bundles {:?}, runsc state {:?}",
        bundles(&daemon),
        entries(&runsc_root(&daemon))
    );
    // The stop lets the parked one go: nothing is left.
    daemon.stop();
    let left = nothing_left(&daemon);
    assert!(left.is_ok(), "after a stop: {left:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_kept_workspace_starts_cold_and_a_killed_daemon_leaves_no_parked_runsc() {
    if !runsc_installed() {
        return;
    }
    let mut daemon = gvisor_daemon(&["--serve-probes"], POOL_OF_ONE);
    wait_for_pool(&daemon, "session: 1 of 1 ready").await;
    start(&daemon, "kept").await;
    let client = daemon.client().await;
    client
        .deprovision(Scope::Session, "kept", true)
        .await
        .unwrap();
    let workspace = daemon.workspace(Scope::Session, "kept");
    std::fs::remove_file(workspace.join("pid")).unwrap();
    wait_for_pool(&daemon, "session: 1 of 1 ready").await;
    // Its workspace is on disk: the parked sandbox (whose bundle binds
    // another directory) is not for it.
    start(&daemon, "kept").await;
    let pool = pool_feature(&daemon).await.detail;
    assert!(pool.contains("1 taken, 1 started cold"), "{pool}");
    let seen = sandboxd_tests::runner::probe(&daemon, "kept", "echo ok=yes\n", PROBE_TIMEOUT);
    assert_eq!(seen["ok"], "yes");

    daemon.kill();
    assert_runsc_gone(&daemon, "the daemon");
    daemon.launch();
    daemon.wait_ready();
    // The restarted daemon parks its own again, and lets it go at its stop.
    wait_for_pool(&daemon, "session: 1 of 1 ready").await;
    daemon.stop();
    let left = nothing_left(&daemon);
    assert!(left.is_ok(), "after a restart and a stop: {left:?}");
    assert!(
        entries(&daemon.state_dir().join("sandboxes").join(".prepared")).is_empty(),
        "a prepared workspace outlived the daemon"
    );
}
