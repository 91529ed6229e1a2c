//! No sandboxd serves another sandboxd's sandbox, nor a process of
//! another pid namespace, whatever its uid: a runner of daemon X that
//! reaches daemon Y's socket (Y lets its uid in and mutate) cannot
//! deprovision Y's sandbox, and neither can root from inside
//! `unshare --pid --fork`. Ordinary callers, root and the allow-listed
//! uid from outside any sandbox, are still served.

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use sandboxd_client::{CommandRef, OutputStream, ProbeState, Scope};
use sandboxd_tests::commands::{read_all, request};
use sandboxd_tests::{
    binaries, make_test_dir, run_with_timeout, start_session, wait_until, Options, TestDaemon,
    NOBODY,
};

/// Daemon Y: its socket in a directory anyone may traverse, group
/// `nogroup`, and `nobody` may mutate — only the peer check stands
/// between a caller running as nobody and a deprovision.
fn daemon_y(dir: &Path) -> TestDaemon {
    TestDaemon::start(Options {
        socket: Some(dir.join("run").join("sandboxd.sock")),
        extra_toml: "socket_group = \"nogroup\"\n".into(),
        access_toml: Some(format!("mutate_uids = [{NOBODY}]")),
        ..Options::default()
    })
}

/// Waits for a line of Y's log that names the refusal and `reason`.
fn assert_logged_refusal(daemon: &TestDaemon, reason: &str) {
    assert!(
        wait_until(Duration::from_secs(10), || daemon.log_text().lines().any(
            |line| line.contains(
                "closing a connection from another sandboxd's sandbox or another pid namespace"
            ) && line.contains(reason)
        )),
        "Y must log the refusal with {reason:?}; log:\n{}",
        daemon.log_text()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_runner_of_another_daemon_is_refused_and_admins_are_served() {
    let dir = make_test_dir();
    let y = daemon_y(&dir);
    let y_client = y.client().await;
    start_session(&y, "victim").await;
    // X's runners run as nobody (the uid Y lets mutate), in X's cgroup
    // tree, with the host's file system in view (Y's socket included).
    let x = TestDaemon::start(Options {
        extra_toml: "run_as = \"nobody:nogroup\"\nisolation = \"uid-cgroup\"\n".into(),
        egress: Some("none".to_string()),
        ..Options::default()
    });
    start_session(&x, "attacker").await;
    let ctl = dir.join("sandboxctl");
    sandboxd_tests::executables::copy_executable(&binaries::sandboxctl(), &ctl, 0o755);
    let script = format!(
        "SANDBOXD_SOCKET='{}' '{}' deprovision session victim 2>&1; echo rc=$?",
        y.socket().display(),
        ctl.display()
    );
    let x_client = x.client().await;
    let started = x_client
        .exec(Scope::Session, "attacker", &request(&["sh", "-c", &script]))
        .await
        .unwrap_or_else(|error| panic!("exec: {error}\n{}", x.log_text()));
    let command = CommandRef::Id(started.command_id);
    let wait = Duration::from_secs(60);
    let (out, _) = read_all(&x_client, "attacker", &command, OutputStream::Stdout, wait).await;
    let out = String::from_utf8_lossy(&out).into_owned();
    assert!(
        out.contains("rc=") && !out.contains("rc=0"),
        "X's runner got through to Y: {out}"
    );
    assert_eq!(
        y_client.probe(Scope::Session, "victim").await.unwrap(),
        ProbeState::Running,
        "X's runner deprovisioned Y's sandbox: {out}"
    );
    assert_logged_refusal(&y, "lies in a sandboxd's sandboxes tree");
    // The same uid from outside any sandbox is still served, and root too.
    let listed = y.sandboxctl_as_nobody(&["list"]);
    assert!(
        listed.status.success(),
        "nobody, outside any sandbox, was refused: {}",
        String::from_utf8_lossy(&listed.stderr)
    );
    assert!(
        y_client
            .deprovision(Scope::Session, "victim", false)
            .await
            .unwrap()
            .was_present
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_caller_in_another_pid_namespace_is_refused() {
    let dir = make_test_dir();
    let y = daemon_y(&dir);
    let mut nested = Command::new("unshare");
    nested
        .args(["--pid", "--fork", "--kill-child"])
        .arg(binaries::sandboxctl())
        .arg("list")
        .env(sandboxd_client::SOCKET_ENV, y.socket())
        .env_remove("RUST_LOG");
    let output = run_with_timeout(nested, Duration::from_secs(60));
    let stderr = String::from_utf8_lossy(&output.stderr);
    if stderr.contains("unshare failed") || stderr.contains("Operation not permitted") {
        eprintln!("skipped: cannot make a pid namespace here: {stderr}");
        return;
    }
    assert!(
        !output.status.success(),
        "root in another pid namespace was served: {stderr}"
    );
    assert_logged_refusal(&y, "pid namespace");
    // Root in the daemon's own pid namespace is served.
    let listed = y.sandboxctl(&["list"]);
    assert!(
        listed.status.success(),
        "root was refused: {}",
        String::from_utf8_lossy(&listed.stderr)
    );
}
