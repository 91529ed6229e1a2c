//! No workspace is ever invisible: after an unclean stop every workspace on
//! disk is listed with its sandbox's id and removable by it, and
//! `workspace_ttl` removes the ones left unused — kept ones and ones no
//! record names alike — but never a running sandbox's.

use std::time::Duration;

use sandboxd_client::Scope;
use sandboxd_protocol::naming;
use sandboxd_tests::{sandbox_env, wait_for_runner, wait_until, Options, TestDaemon};

fn stdout(output: &std::process::Output) -> String {
    String::from_utf8_lossy(&output.stdout).into_owned()
}

/// `sandboxctl --json workspaces`, parsed.
fn listed(daemon: &TestDaemon) -> Vec<serde_json::Value> {
    let output = daemon.sandboxctl(&["--json", "workspaces"]);
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    serde_json::from_str(&stdout(&output)).expect("workspaces --json is a JSON array")
}

fn listed_as(daemon: &TestDaemon, name: &str) -> Option<serde_json::Value> {
    listed(daemon)
        .into_iter()
        .find(|workspace| workspace["name"] == name)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_workspace_left_by_a_sigkilled_daemon_is_listed_with_its_id_and_removed_by_it() {
    let mut daemon = TestDaemon::start(Options::with_runner_args(&["--print-lines", "5"]));
    let client = daemon.client().await;
    let id = "left behind";
    let report = client
        .ensure_session_sandbox(id, &sandbox_env("session:left", "tok"))
        .await
        .unwrap();
    let workspace = daemon.workspace(Scope::Session, id);
    wait_for_runner(&workspace, report.pid.unwrap());
    std::fs::write(workspace.join("notes"), vec![b'n'; 100_000]).unwrap();
    drop(client);

    daemon.kill();
    daemon.launch();
    daemon.wait_ready();
    assert!(workspace.exists(), "the restart removed the workspace");

    let name = naming::base_name(Scope::Session, id);
    let entry = listed_as(&daemon, &name)
        .unwrap_or_else(|| panic!("{name} is not listed: {:?}", listed(&daemon)));
    assert_eq!(entry["id"], id);
    assert_eq!(entry["scope"], "session");
    assert_eq!(entry["running"], false);
    assert!(entry["size_bytes"].as_u64().unwrap() >= 100_000, "{entry}");
    assert!(entry["last_run_unix_ms"].as_u64().unwrap() > 0, "{entry}");
    // The default TTL applies: it will expire, a week after its last use.
    let week_ms = 7 * 24 * 3600 * 1000;
    assert_eq!(
        entry["expires_at_unix_ms"].as_u64().unwrap() - entry["last_run_unix_ms"].as_u64().unwrap(),
        week_ms,
        "{entry}"
    );
    let table = stdout(&daemon.sandboxctl(&["workspaces", "--scope", "session"]));
    assert!(table.contains(id) && table.contains("stopped"), "{table}");
    let wide = stdout(&daemon.sandboxctl(&["workspaces", "--scope", "session", "-o", "wide"]));
    assert!(
        wide.contains(&name) && wide.contains(id) && wide.contains("stopped"),
        "{wide}"
    );

    let removed = daemon.sandboxctl(&["deprovision", "session", id]);
    assert!(
        removed.status.success(),
        "{}",
        String::from_utf8_lossy(&removed.stderr)
    );
    assert!(!workspace.exists(), "deprovision left the workspace");
    assert!(
        !daemon.runner_log(Scope::Session, id).exists(),
        "deprovision left the output file"
    );
    assert_eq!(listed_as(&daemon, &name), None);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn workspace_ttl_removes_kept_and_nameless_workspaces_but_not_a_running_one() {
    let mut daemon = TestDaemon::prepare(Options {
        extra_toml: "workspace_ttl = \"2s\"\n".to_string(),
        ..Options::default()
    });
    // A workspace no record names, as a sandboxd before the catalog left it.
    let nameless = daemon.workspace(Scope::Workflow, "from an older sandboxd");
    std::fs::create_dir_all(&nameless).unwrap();
    std::fs::write(nameless.join("file"), "old").unwrap();
    daemon.launch();
    daemon.wait_ready();
    let client = daemon.client().await;

    // Started first, so it is the oldest in use; it keeps running.
    let running = client
        .ensure_session_sandbox("running", &sandbox_env("session:running", "tok"))
        .await
        .unwrap();
    let running_workspace = daemon.workspace(Scope::Session, "running");
    wait_for_runner(&running_workspace, running.pid.unwrap());
    let kept = client
        .ensure_session_sandbox("kept", &sandbox_env("session:kept", "tok"))
        .await
        .unwrap();
    let kept_workspace = daemon.workspace(Scope::Session, "kept");
    wait_for_runner(&kept_workspace, kept.pid.unwrap());
    client
        .deprovision(Scope::Session, "kept", true)
        .await
        .unwrap();
    assert!(kept_workspace.exists(), "keep_workspace did not keep it");
    let nameless_name = naming::base_name(Scope::Workflow, "from an older sandboxd");
    if let Some(entry) = listed_as(&daemon, &nameless_name) {
        // Listed until the TTL takes it, by name and scope, without an id.
        assert_eq!(entry["id"], serde_json::Value::Null);
        assert_eq!(entry["scope"], "workflow");
    }

    // The runner's log goes right behind its workspace, in the same removal.
    let both_gone = wait_until(Duration::from_secs(60), || {
        !kept_workspace.exists()
            && !nameless.exists()
            && !daemon.runner_log(Scope::Session, "kept").exists()
    });
    assert!(
        both_gone,
        "left: {:?}\n{}",
        daemon.workspaces(),
        daemon.log_text()
    );
    assert!(!daemon.runner_log(Scope::Session, "kept").exists());
    // Older than the TTL by now, but running.
    assert!(
        running_workspace.exists(),
        "a running sandbox's workspace was removed"
    );
    assert_eq!(
        client.probe(Scope::Session, "running").await.unwrap(),
        sandboxd_client::ProbeState::Running
    );
    let names: Vec<String> = listed(&daemon)
        .iter()
        .map(|entry| entry["name"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(names, vec![naming::base_name(Scope::Session, "running")]);
}
