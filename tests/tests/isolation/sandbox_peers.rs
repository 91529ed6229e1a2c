//! A sandbox must never call the daemon, whatever its uid: a runner that
//! runs `sandboxctl deprovision` on its own sandbox is refused before any
//! call — under a root daemon, with the runner's uid on the mutate list,
//! and under a non-root daemon, whose runners run as the daemon's own uid.

use std::fs;
use std::path::Path;
use std::time::Duration;

use sandboxd_client::{ProbeState, Scope};
use sandboxd_protocol::naming;
use sandboxd_tests::procs::wait_until;
use sandboxd_tests::{binaries, make_test_dir, sandbox_env, Options, TestDaemon, NOBODY};

/// A runner that calls `sandboxctl deprovision session s1` on its own
/// sandbox, writes what it printed to `out` and its exit code to `rc` in
/// its workspace, then stays up until stopped.
fn write_calling_runner(dir: &Path, socket: &Path) -> String {
    let ctl = dir.join("sandboxctl");
    sandboxd_tests::executables::copy_executable(&binaries::sandboxctl(), &ctl, 0o755);
    let script = dir.join("calling-runner");
    sandboxd_tests::executables::write_executable(
        &script,
        &format!(
            "#!/bin/sh\n\
             cd \"$WORKSPACE_ROOT_DIR\" || exit 99\n\
             SANDBOXD_SOCKET='{socket}' '{ctl}' deprovision session s1 > out 2>&1\n\
             echo $? > rc.tmp && mv rc.tmp rc\n\
             exec sleep 600\n",
            socket = socket.display(),
            ctl = ctl.display(),
        ),
        0o755,
    );
    script.display().to_string()
}

async fn a_runner_calling_the_daemon_is_refused(daemon_uid: Option<u32>) {
    let dir = make_test_dir();
    let socket = dir.join("run").join("sandboxd.sock");
    let daemon = TestDaemon::start(Options {
        runner_command: Some(write_calling_runner(&dir, &socket)),
        socket: Some(socket),
        // nobody may reach the socket, and may mutate: only its being a
        // sandbox stands between it and the deprovision.
        // Under a root daemon every runner runs as nobody (`run_as`), so its
        // uid is one the socket lets in. A daemon that is not root cannot
        // install egress rules, so it runs with none.
        // `isolation = "uid-cgroup"`: under "full" the socket's directory is
        // out of the runner's sight (private_view.rs checks that), and this
        // test is about the daemon's own check behind the socket.
        extra_toml: match daemon_uid {
            None => "socket_group = \"nogroup\"\nrun_as = \"nobody:nogroup\"\nisolation = \"uid-cgroup\"\n".into(),
            Some(_) => "socket_group = \"nogroup\"\nisolation = \"uid-cgroup\"\n".into(),
        },
        egress: daemon_uid.map(|_| "none".to_string()),
        access_toml: Some(format!("mutate_uids = [{NOBODY}]")),
        daemon_uid,
        ..Options::default()
    });
    let client = daemon.client().await;
    client
        .ensure_session_sandbox("s1", &sandbox_env("session:s1", "tok"))
        .await
        .unwrap();
    let workspace = daemon.workspace(Scope::Session, "s1");
    let rc_file = workspace.join("rc");
    // Had the call gone through, the runner would be gone (its own
    // deprovision kills it before it can write `rc`).
    wait_until(Duration::from_secs(30), || {
        rc_file.exists() || !workspace.exists()
    });
    assert_eq!(
        client.probe(Scope::Session, "s1").await.unwrap(),
        ProbeState::Running,
        "the runner deprovisioned its own sandbox; log:\n{}",
        daemon.log_text()
    );
    let rc = fs::read_to_string(&rc_file).unwrap_or_else(|error| {
        panic!(
            "the runner's sandboxctl never finished ({error}); log:\n{}",
            daemon.log_text()
        )
    });
    let out = fs::read_to_string(workspace.join("out")).unwrap_or_default();
    assert_ne!(rc.trim(), "0", "the runner's deprovision must fail: {out}");
    let base = naming::base_name(Scope::Session, "s1");
    assert!(
        wait_until(Duration::from_secs(5), || daemon.log_text().lines().any(
            |line| { line.contains("a sandbox may never call the daemon") && line.contains(&base) }
        )),
        "the daemon must log the refusal, naming the sandbox; log:\n{}",
        daemon.log_text()
    );
    // Root is still served, and may deprovision.
    assert!(
        client
            .deprovision(Scope::Session, "s1", false)
            .await
            .unwrap()
            .was_present
    );
    drop(daemon);
    let _ = fs::remove_dir_all(&dir);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_runner_calling_the_daemon_is_refused_under_a_root_daemon() {
    a_runner_calling_the_daemon_is_refused(None).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_runner_calling_the_daemon_is_refused_under_a_non_root_daemon() {
    // The daemon runs as nobody, so its runners do too: the daemon's own
    // uid, which the allow-lists let do everything.
    a_runner_calling_the_daemon_is_refused(Some(NOBODY)).await;
}

/// A runner is cloned into its sandbox's cgroup and may call before the
/// daemon has recorded its start (seen under load: the call went through).
/// So a process in any cgroup of the daemon's sandboxes directory is
/// refused, recorded or not: here one the test puts in a sandbox cgroup
/// that no record names.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_process_in_a_sandbox_cgroup_not_yet_recorded_is_refused() {
    let daemon = TestDaemon::start(Options {
        extra_toml: "isolation = \"uid-cgroup\"\n".into(),
        egress: Some("none".to_string()),
        ..Options::default()
    });
    let log = daemon.log_text();
    let Some(sandboxes) = log
        .split("containment=cgroup v2 ")
        .nth(1)
        .and_then(|rest| rest.split_whitespace().next())
    else {
        eprintln!("skipped: the daemon runs without cgroups here; log:\n{log}");
        return;
    };
    let base = "sbx-ses-notrecorded00";
    let cgroup = Path::new(sandboxes).join(base);
    /// Removes the test's cgroup, passed or failed (its one process is gone by then).
    struct Made(std::path::PathBuf);
    impl Drop for Made {
        fn drop(&mut self) {
            let _ = fs::remove_dir(&self.0);
        }
    }
    fs::create_dir(&cgroup).unwrap();
    let _made = Made(cgroup.clone());
    let output = std::process::Command::new("sh")
        .args([
            "-c",
            "echo $$ > \"$1/cgroup.procs\" && exec \"$2\" --socket \"$3\" list",
            "sh",
        ])
        .arg(&cgroup)
        .arg(binaries::sandboxctl())
        .arg(daemon.socket())
        .output()
        .unwrap();
    assert!(
        !output.status.success(),
        "a process in a sandbox cgroup was served: {}",
        String::from_utf8_lossy(&output.stdout)
    );
    assert!(
        wait_until(Duration::from_secs(5), || daemon.log_text().lines().any(
            |line| line.contains("a sandbox may never call the daemon") && line.contains(base)
        )),
        "the daemon must log the refusal, naming the cgroup's sandbox; log:\n{}",
        daemon.log_text()
    );
    // Root outside any sandbox is still served.
    assert!(daemon.sandboxctl(&["list"]).status.success());
}
