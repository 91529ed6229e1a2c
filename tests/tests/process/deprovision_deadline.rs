//! A deprovision waits as long as the daemon may take to stop a runner:
//! a runner that ignores SIGTERM is given the whole `stop_grace` before
//! the SIGKILL, and the daemon answers after it. A client deadline shorter
//! than that used to report a failure that did not happen (the sandbox
//! went all the same); the client library, and so `sandboxctl` and the
//! Node package, now wait at least the grace and a margin, learned from
//! `status`.

use std::time::{Duration, Instant};

use sandboxd_client::{ProbeState, Scope};
use sandboxd_tests::procs::wait_until;
use sandboxd_tests::runner::read_runner_pid;
use sandboxd_tests::{sandbox_env, Options, TestDaemon};

/// Longer than the deadlines the callers below set.
const GRACE: Duration = Duration::from_secs(3);

fn daemon() -> TestDaemon {
    let mut options = Options::with_runner_args(&["--ignore-term"]);
    options.stop_grace = format!("{}s", GRACE.as_secs());
    TestDaemon::start(options)
}

/// Waits until the runner has written its pid: it ignores SIGTERM by then.
fn wait_for_stubborn(daemon: &TestDaemon) {
    let workspace = daemon.workspace(Scope::Session, "stubborn");
    assert!(
        wait_until(Duration::from_secs(30), || read_runner_pid(&workspace)
            .is_some()),
        "the runner never wrote its pid\n{}",
        daemon.log_text()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deprovision_outlasting_the_clients_deadline_still_succeeds() {
    let daemon = daemon();
    let client = daemon.client().await.with_deadline(Duration::from_secs(1));
    client
        .ensure(
            Scope::Session,
            "stubborn",
            &sandbox_env("session:stubborn", ""),
        )
        .await
        .expect("ensure");
    wait_for_stubborn(&daemon);
    let started = Instant::now();
    let report = client
        .deprovision(Scope::Session, "stubborn", false)
        .await
        .unwrap_or_else(|error| panic!("deprovision: {error}\n{}", daemon.log_text()));
    assert!(started.elapsed() >= GRACE, "answered before the grace");
    assert!(report.forced, "{report:?}");
    let state = client.probe(Scope::Session, "stubborn").await.unwrap();
    assert_eq!(state, ProbeState::Absent);
    // Other calls keep the deadline they were given.
    assert_eq!(client.deadline(), Duration::from_secs(1));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sandboxctl_waits_out_the_grace_and_says_so_in_status() {
    let daemon = daemon();
    let status = daemon.sandboxctl(&["status"]);
    let text = String::from_utf8_lossy(&status.stdout);
    assert!(
        text.contains(&format!(
            "grace:     {} s from SIGTERM to SIGKILL",
            GRACE.as_secs()
        )),
        "{text}"
    );
    let ensured = daemon.sandboxctl(&[
        "ensure",
        "--timeout",
        "1s",
        "--task-queue",
        "session:stubborn",
        "session",
        "stubborn",
    ]);
    assert!(ensured.status.success(), "{ensured:?}");
    wait_for_stubborn(&daemon);
    let gone = daemon.sandboxctl(&["deprovision", "--timeout", "1s", "session", "stubborn"]);
    let said = String::from_utf8_lossy(&gone.stdout);
    assert!(gone.status.success(), "{gone:?}\n{}", daemon.log_text());
    assert!(said.contains("killed"), "{said}");
    assert!(
        !daemon.log_text().contains("ERROR"),
        "the daemon logged an error for a deprovision that worked:\n{}",
        daemon.log_text()
    );

    let bad = daemon.sandboxctl(&["pause", "--timeout", "0s", "session", "stubborn"]);
    let why = String::from_utf8_lossy(&bad.stderr);
    assert_eq!(bad.status.code(), Some(2), "{bad:?}");
    assert!(why.contains("'0s' is out of range"), "{why}");
}
