//! The trust boundary: peer credentials against the allow-lists, and the
//! runner token, which reaches the runner and nothing else.

use std::path::Path;
use std::process::Output;
use std::time::Duration;

use sandboxd_client::Scope;
use sandboxd_tests::procs::wait_until;
use sandboxd_tests::{runner_env, sandbox_env, wait_for_runner, Options, TestDaemon};

fn text(output: &Output) -> (String, String) {
    (
        String::from_utf8_lossy(&output.stdout).into_owned(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

#[track_caller]
fn assert_refused(output: &Output, what: &str) {
    let (stdout, stderr) = text(output);
    assert_eq!(
        output.status.code(),
        Some(1),
        "{what}: exit code; stdout {stdout:?} stderr {stderr:?}"
    );
    let lower = stderr.to_lowercase();
    assert!(
        lower.contains("permission denied"),
        "{what}: stderr must say permission denied: {stderr:?}"
    );
    assert!(
        stderr.contains("65534"),
        "{what}: stderr must name the refused uid: {stderr:?}"
    );
    assert!(
        !lower.contains("is this user in the socket's group"),
        "{what}: refused by the socket file, not the daemon: {stderr:?}"
    );
}

/// Runs each `sandboxctl` call (its arguments, and what to call it in a
/// failure) as nobody, in order, and asserts the daemon refuses every one.
#[track_caller]
fn assert_refused_as_nobody(daemon: &TestDaemon, calls: &[(&[&str], &str)]) {
    for (args, what) in calls {
        assert_refused(&daemon.sandboxctl_as_nobody(args), what);
    }
}

#[track_caller]
fn assert_ok(output: &Output, what: &str) -> String {
    let (stdout, stderr) = text(output);
    assert_eq!(
        output.status.code(),
        Some(0),
        "{what}: stdout {stdout:?} stderr {stderr:?}"
    );
    stdout
}

fn nogroup_socket(access: Option<&str>) -> Options {
    Options {
        extra_toml: "socket_group = \"nogroup\"\n".into(),
        access_toml: access.map(str::to_string),
        ..Options::default()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_uid_outside_the_allow_lists_is_refused() {
    let daemon = TestDaemon::start(nogroup_socket(None));
    assert_refused_as_nobody(
        &daemon,
        &[
            (&["status"], "status as nobody"),
            (&["probe", "session", "s1"], "probe as nobody"),
            (
                &["ensure", "session", "s1", "--task-queue", "session:s1"],
                "ensure as nobody",
            ),
        ],
    );
    assert!(
        daemon.workspaces().is_empty(),
        "a refused ensure created a workspace"
    );
    assert!(daemon.leftover_processes().is_empty());
    assert!(
        wait_until(Duration::from_secs(5), || daemon
            .log_text()
            .contains("65534")),
        "the daemon's log must name the refused uid:\n{}",
        daemon.log_text()
    );
    // Root may still do everything.
    assert_ok(&daemon.sandboxctl(&["status"]), "status as root");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn read_access_allows_probing_but_not_mutating() {
    let daemon = TestDaemon::start(nogroup_socket(Some("read_uids = [65534]")));
    let client = daemon.client().await;
    let pid = client
        .ensure_session_sandbox("s1", &sandbox_env("session:s1", "tok"))
        .await
        .unwrap()
        .pid
        .unwrap();
    wait_for_runner(&daemon.workspace(Scope::Session, "s1"), pid);

    assert_eq!(
        assert_ok(
            &daemon.sandboxctl_as_nobody(&["probe", "session", "s1"]),
            "probe"
        ),
        "running\n"
    );
    assert_ok(&daemon.sandboxctl_as_nobody(&["status"]), "status");
    assert_ok(&daemon.sandboxctl_as_nobody(&["list"]), "list");
    assert_ok(
        &daemon.sandboxctl_as_nobody(&["describe", "session", "s1"]),
        "describe",
    );

    assert_refused_as_nobody(
        &daemon,
        &[
            (
                &["ensure", "session", "s2", "--task-queue", "session:s2"],
                "ensure with read access",
            ),
            (
                &["deprovision", "session", "s1"],
                "deprovision with read access",
            ),
            (
                &["connect", "create", "r1", "--task-queue", "mcp:r1"],
                "connect create with read access",
            ),
            (&["connect", "deprovision", "r1"], "connect deprovision"),
        ],
    );
    assert_eq!(daemon.workspaces().len(), 1, "only s1 exists");
    assert_eq!(daemon.leftover_processes(), vec![pid], "s1 was not touched");
    assert!(
        wait_until(Duration::from_secs(5), || daemon
            .log_text()
            .contains("65534")),
        "the daemon's log must name the refused uid"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_gid_on_the_mutate_list_may_ensure() {
    let daemon = TestDaemon::start(nogroup_socket(Some("mutate_gids = [65534]")));
    let stdout = assert_ok(
        &daemon.sandboxctl_as_nobody(&[
            "ensure",
            "session",
            "g1",
            "--task-queue",
            "session:g1",
            "--json",
        ]),
        "ensure by gid",
    );
    let report: serde_json::Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(report["created"], true);
    assert_ok(
        &daemon.sandboxctl_as_nobody(&["deprovision", "session", "g1"]),
        "deprovision by gid",
    );
}

/// Every file under `dir`, skipping `skip`.
fn files_under(dir: &Path, skip: &Path, out: &mut Vec<std::path::PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        if path == skip {
            continue;
        }
        if path.is_dir() {
            files_under(&path, skip, out);
        } else {
            out.push(path);
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_token_reaches_the_runner_and_nothing_else() {
    const TOKEN: &str = "tok-SECRET-5b1f9c2e77";
    let daemon = TestDaemon::start(Options::default());
    let client = daemon.client().await;
    let session = client
        .ensure_session_sandbox("t1", &sandbox_env("session:t1", TOKEN))
        .await
        .unwrap();
    let connect_id = client
        .create_connect_sandbox("req-t", &sandbox_env("mcp:req-t", TOKEN))
        .await
        .unwrap();
    let token_env = [("SBX_TEST_TOKEN", TOKEN)];
    let cli_ensure = daemon.sandboxctl_with_env(
        &[
            "ensure",
            "workflow",
            "w1",
            "--task-queue",
            "wfexec:w1",
            "--token-env",
            "SBX_TEST_TOKEN",
            "--json",
        ],
        &token_env,
    );
    let cli_report: serde_json::Value =
        serde_json::from_str(&assert_ok(&cli_ensure, "ensure via sandboxctl")).unwrap();

    // Delivered: each runner has it.
    let session_ws = daemon.workspace(Scope::Session, "t1");
    wait_for_runner(&session_ws, session.pid.unwrap());
    assert_eq!(runner_env(&session_ws)["STIGMER_TOKEN"], TOKEN);
    let workflow_ws = daemon.workspace(Scope::Workflow, "w1");
    wait_for_runner(&workflow_ws, cli_report["pid"].as_u64().unwrap() as u32);
    assert_eq!(
        runner_env(&workflow_ws)["STIGMER_TOKEN"],
        TOKEN,
        "sandboxctl --token-env delivers the token"
    );
    let connect_pid = client
        .describe(Scope::Connect, &connect_id)
        .await
        .unwrap()
        .pid
        .unwrap();
    assert_eq!(
        sandboxd_tests::procs::env_after_exec(connect_pid, "STIGMER_TOKEN").as_deref(),
        Some(TOKEN),
        "the connect runner has the token"
    );
    for pid in [session.pid.unwrap(), connect_pid] {
        let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap();
        assert!(
            !String::from_utf8_lossy(&cmdline).contains(TOKEN),
            "the token is in the runner's argv"
        );
    }

    // Nowhere else: not in what the daemon answers...
    let answers = format!(
        "{:?}{:?}{:?}{:?}",
        client.list(None).await.unwrap(),
        client.describe(Scope::Session, "t1").await.unwrap(),
        client.describe(Scope::Connect, &connect_id).await.unwrap(),
        client.status().await.unwrap()
    );
    assert!(
        !answers.contains(TOKEN),
        "the daemon returned the token: {answers}"
    );
    let mut outputs = vec![cli_ensure];
    for args in [
        &["list"][..],
        &["list", "--json"],
        &["describe", "session", "t1"],
        &["describe", "session", "t1", "--json"],
        &["describe", "workflow", "w1", "--json"],
        &["describe", "connect", &connect_id, "--json"],
        &["status"],
        &["status", "--json"],
        &["probe", "session", "t1", "--json"],
        &[
            "ensure",
            "session",
            "t1",
            "--task-queue",
            "session:t1",
            "--token-env",
            "SBX_TEST_TOKEN",
        ],
        &[
            "ensure",
            "session",
            "t1",
            "--task-queue",
            "session:t1",
            "--token-env",
            "SBX_TEST_TOKEN",
            "--json",
        ],
    ] {
        let output = daemon.sandboxctl_with_env(args, &token_env);
        assert_ok(&output, &format!("{args:?}"));
        outputs.push(output);
    }
    for output in &outputs {
        let (stdout, stderr) = text(output);
        assert!(
            !stdout.contains(TOKEN) && !stderr.contains(TOKEN),
            "sandboxctl printed the token:\n{stdout}\n{stderr}"
        );
    }
    let list: serde_json::Value = serde_json::from_slice(&outputs[2].stdout).unwrap();
    assert_eq!(list.as_array().map(Vec::len), Some(3), "{list}");

    // ...not in its log (at debug level), and not in any file it keeps
    // outside the runners' own workspaces.
    client.deprovision_session_sandbox("t1").await.unwrap();
    client
        .deprovision_connect_sandbox(&connect_id)
        .await
        .unwrap();
    let log = daemon.log_text();
    assert!(!log.is_empty(), "the daemon logs something at debug level");
    assert!(
        !log.contains(TOKEN),
        "the token is in the daemon's log:\n{log}"
    );
    let mut files = Vec::new();
    files_under(
        daemon.state_dir(),
        &daemon.state_dir().join("sandboxes"),
        &mut files,
    );
    for file in files {
        let contents = std::fs::read(&file).unwrap_or_default();
        assert!(
            !String::from_utf8_lossy(&contents).contains(TOKEN),
            "the token is in {}",
            file.display()
        );
    }
}
