//! The docker tier against the real engine on this machine: the real
//! `sandboxd --driver docker`, a runner image built from the runner fixture
//! (`.ci/build-test-image.sh`, from local files only), and the docker CLI
//! to look at — and to break — containers from outside.
//!
//! Without an engine every test prints a loud SKIPPED line and passes;
//! with `SANDBOXD_REQUIRE_DOCKER=1` (as `.ci/run` sets) a missing engine
//! fails instead. Every test uses ids of its own and removes what it made,
//! by label, even when it fails.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant, SystemTime};

use sandboxd_client::{
    ClientError, EnsureReport, LogCursor, LogStart, ProbeState, SandboxEnv, SandboxError,
    SandboxInfo, SandboxdClient, Scope, MAX_LOG_CHUNK,
};
use sandboxd_protocol::naming::base_name;
use sandboxd_tests::docker_image::{
    container_events, container_status, containers_of, docker_ok, docker_options, engine_ready,
    inspect, unique_id, volume_dir, volumes_of, Cleanup, EngineProxy, TEST_IMAGE,
};
use sandboxd_tests::logs::{fixture_line_numbers, read_all_logs};
use sandboxd_tests::{
    eventually, make_test_dir, procs, runner_env, sandbox_env, wait_until, TestDaemon,
};
use serde_json::Value;

/// How long a runner gets to write its files after a (re)start.
const RUNNER_WRITES: Duration = Duration::from_secs(20);

/// Held by the tests that make connect sandboxes: the reaper test's daemon
/// has a TTL of seconds and would remove another test's connect sandbox.
static CONNECT_SANDBOXES: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

fn workspace_volume(scope: Scope, id: &str) -> String {
    format!("{}-workspace", base_name(scope, id))
}

/// Waits until the runner (re)started in this workspace has written its
/// `pid` file, removed beforehand by the caller when a restart is awaited.
fn wait_for_runner_files(workspace: &Path) {
    assert!(
        wait_until(RUNNER_WRITES, || workspace.join("pid").is_file()),
        "the runner wrote no pid file in {} within {RUNNER_WRITES:?}",
        workspace.display()
    );
}

/// The container's full id, or a panic naming the sandbox.
fn container_id(name: &str) -> String {
    let value = inspect("container", name).unwrap_or_else(|| panic!("no container {name}"));
    value["Id"]
        .as_str()
        .expect("a container has an id")
        .to_string()
}

fn labels(container: &Value) -> &serde_json::Map<String, Value> {
    container["Config"]["Labels"].as_object().expect("labels")
}

fn env_list(container: &Value) -> Vec<String> {
    container["Config"]["Env"]
        .as_array()
        .expect("env")
        .iter()
        .map(|var| var.as_str().expect("env entries are strings").to_string())
        .collect()
}

async fn wait_for_probe(client: &SandboxdClient, scope: Scope, id: &str, want: ProbeState) {
    let mut last = None;
    let reached = eventually(Duration::from_secs(15), || {
        let client = client.clone();
        let id = id.to_string();
        async move { client.probe(scope, &id).await.ok() == Some(want) }
    })
    .await;
    if !reached {
        last = client.probe(scope, id).await.ok();
    }
    assert!(
        reached,
        "{scope} '{id}' did not become {want} (last probe: {last:?})"
    );
}

fn unavailable_message(result: Result<impl std::fmt::Debug, ClientError>) -> String {
    match result {
        Err(ClientError::Sandbox(SandboxError::Unavailable(message))) => message,
        other => panic!("expected unavailable, got {other:?}"),
    }
}

/// A line of `/proc/<pid>/status`, such as `NoNewPrivs` or `CapEff`.
fn proc_status(pid: u32, field: &str) -> Option<String> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let line = status
        .lines()
        .find(|line| line.starts_with(&format!("{field}:")))?;
    Some(line[field.len() + 1..].trim().to_string())
}

/// `None` (after a loud SKIPPED line) when no engine answers; else a fresh
/// sandbox id for each prefix, with the guard that removes whatever the
/// engine holds for them when the test ends, however it ends.
fn engine_and_fresh_ids<const N: usize>(
    test: &str,
    prefixes: [&str; N],
) -> Option<([String; N], Cleanup)> {
    if !engine_ready(test) {
        return None;
    }
    let ids = prefixes.map(unique_id);
    let cleanup = Cleanup::new(&ids.each_ref().map(String::as_str));
    Some((ids, cleanup))
}

/// One daemon and one sandbox it has just started: the setup of the tests
/// that then break the sandbox from outside. Fields drop in order: the
/// daemon first, then everything on the engine labelled with the id.
struct Started {
    daemon: TestDaemon,
    client: SandboxdClient,
    scope: Scope,
    id: String,
    env: SandboxEnv,
    /// The container's name (the base name) and id.
    name: String,
    container: String,
    _cleanup: Cleanup,
}

/// `None` (after a loud SKIPPED line) when no engine answers.
async fn start_one(test: &str, scope: Scope, token: &str) -> Option<Started> {
    let ([id], cleanup) = engine_and_fresh_ids(test, [test])?;
    let daemon = TestDaemon::start(docker_options(""));
    let client = daemon.client().await;
    let env = sandbox_env(&format!("{}:{id}", scope.as_str()), token);
    let report = client.ensure(scope, &id, &env).await.unwrap();
    assert!(report.created && report.generation == 1, "{report:?}");
    let name = base_name(scope, &id);
    let container = container_id(&name);
    Some(Started {
        daemon,
        client,
        scope,
        id,
        env,
        name,
        container,
        _cleanup: cleanup,
    })
}

impl Started {
    async fn ensure(&self) -> EnsureReport {
        self.client
            .ensure(self.scope, &self.id, &self.env)
            .await
            .unwrap()
    }

    async fn probe(&self) -> ProbeState {
        self.client.probe(self.scope, &self.id).await.unwrap()
    }

    async fn describe(&self) -> SandboxInfo {
        self.client.describe(self.scope, &self.id).await.unwrap()
    }

    /// The workspace volume's directory on this host.
    fn workspace(&self) -> PathBuf {
        volume_dir(&workspace_volume(self.scope, &self.id))
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_sandbox_has_the_contract_labels_env_limits_and_workspace() {
    let test = "a_new_sandbox_has_the_contract_labels_env_limits_and_workspace";
    // Taken first so that it is released last, after the cleanup.
    let _connect = CONNECT_SANDBOXES.lock().await;
    let Some(([id, request], _cleanup)) = engine_and_fresh_ids(test, ["new", "new-mcp"]) else {
        return;
    };
    let mut options = docker_options("memory = \"256m\"\ncpus = 0.5\npids_limit = 100");
    options.extra_toml = format!(
        "backend_endpoint = \"http://backend:8080\"\ntemporal_address = \"temporal:7233\"\n{}",
        options.extra_toml
    );
    let daemon = TestDaemon::start(options);
    let client = daemon.client().await;
    let token = format!("tok-new-{id}");
    let env = sandbox_env(&format!("session:{id}"), &token);

    let report = client.ensure_session_sandbox(&id, &env).await.unwrap();
    assert!(report.created, "{report:?}");
    assert_eq!((report.state, report.generation), (ProbeState::Running, 1));

    let name = base_name(Scope::Session, &id);
    let container = inspect("container", &name).expect("the container is named by the base name");
    let labels = labels(&container);
    assert_eq!(labels["stigmer.ai/managed-by"], "stigmer-server");
    assert_eq!(labels["stigmer.ai/scope"], "session");
    assert_eq!(labels["stigmer.ai/sandbox-id"], id.as_str());
    assert_eq!(labels["stigmer.ai/generation"], "1");
    let digest = labels["stigmer.ai/token-sha256"].as_str().unwrap();
    assert!(
        digest.len() == 64 && digest.bytes().all(|b| b.is_ascii_hexdigit()),
        "{digest}"
    );
    assert!(
        !labels
            .values()
            .any(|value| value.as_str().unwrap().contains(&token)),
        "no label holds the token"
    );

    let env_vars = env_list(&container);
    for expected in [
        "MODE=local".to_string(),
        format!("STIGMER_TASK_QUEUE=session:{id}"),
        "WORKSPACE_ROOT_DIR=/workspace".to_string(),
        format!("STIGMER_TOKEN={token}"),
        "STIGMER_BACKEND_ENDPOINT=http://backend:8080".to_string(),
        "TEMPORAL_SERVICE_ADDRESS=temporal:7233".to_string(),
    ] {
        assert!(
            env_vars.contains(&expected),
            "{expected} missing from {env_vars:?}"
        );
    }
    assert_eq!(container["Config"]["Image"], TEST_IMAGE);
    assert_eq!(container["Config"]["User"], "65534:65534");

    let host = &container["HostConfig"];
    assert_eq!(host["Init"], true, "an init reaps zombies");
    assert_eq!(host["CapDrop"], serde_json::json!(["ALL"]));
    assert!(host["SecurityOpt"]
        .as_array()
        .unwrap()
        .iter()
        .any(|opt| opt == "no-new-privileges"));
    assert_eq!(host["Memory"], 256 << 20);
    assert_eq!(host["NanoCpus"], 500_000_000);
    assert_eq!(host["PidsLimit"], 100);
    assert_eq!(
        host["RestartPolicy"]["Name"], "no",
        "the repair arm is ensure, not the engine"
    );
    assert_eq!(
        host["NetworkMode"], "sandboxd-egress",
        "under the default posture (relaxed) runners join the daemon's own network"
    );

    let mounts = container["Mounts"].as_array().unwrap();
    assert_eq!(mounts.len(), 1, "{mounts:?}");
    let volume = workspace_volume(Scope::Session, &id);
    assert_eq!(mounts[0]["Type"], "volume");
    assert_eq!(mounts[0]["Name"], volume.as_str());
    assert_eq!(mounts[0]["Destination"], "/workspace");
    assert_eq!(mounts[0]["RW"], true);
    let volume_labels = inspect("volume", &volume).unwrap()["Labels"].clone();
    assert_eq!(volume_labels["stigmer.ai/managed-by"], "stigmer-server");
    assert_eq!(volume_labels["stigmer.ai/sandbox-id"], id.as_str());

    // The runner, unprivileged and without capabilities, could write its workspace.
    let workspace = volume_dir(&volume);
    wait_for_runner_files(&workspace);
    let recorded = runner_env(&workspace);
    assert_eq!(recorded["WORKSPACE_ROOT_DIR"], "/workspace");
    assert_eq!(recorded["STIGMER_TOKEN"], token);
    let init_pid = container["State"]["Pid"].as_u64().unwrap() as u32;
    assert_eq!(procs::uid_of(init_pid), Some(65534));
    assert_eq!(proc_status(init_pid, "NoNewPrivs").as_deref(), Some("1"));
    assert_eq!(
        proc_status(init_pid, "CapEff").as_deref(),
        Some("0000000000000000")
    );

    let info = client.describe(Scope::Session, &id).await.unwrap();
    assert_eq!(info.container_id.as_deref(), container["Id"].as_str());
    assert_eq!(info.image.as_deref(), container["Config"]["Image"].as_str());
    assert_eq!(
        (info.state, info.generation, info.restarts),
        (ProbeState::Running, 1, 0)
    );
    assert_eq!(
        (info.task_queue.as_str(), info.caller_class.as_str()),
        (env.task_queue.as_str(), "user")
    );
    assert!(info.started_at_unix_ms.is_some());
    assert!(
        !daemon.log_text().contains(&token),
        "the token never reaches the log"
    );

    // A connect sandbox gets a scratch workspace that goes with it.
    let connect_env = sandbox_env(&format!("mcp:{request}"), "");
    assert_eq!(
        client
            .create_connect_sandbox(&request, &connect_env)
            .await
            .unwrap(),
        request
    );
    let connect = inspect("container", &base_name(Scope::Connect, &request)).unwrap();
    let scratch = &connect["Mounts"][0];
    assert_eq!(
        (scratch["Type"].as_str(), scratch["Destination"].as_str()),
        (Some("volume"), Some("/workspace"))
    );
    assert_ne!(
        scratch["Name"],
        workspace_volume(Scope::Connect, &request).as_str(),
        "scratch is anonymous"
    );
    assert!(
        !env_list(&connect)
            .iter()
            .any(|var| var.starts_with("STIGMER_TOKEN=")),
        "tokenless: no variable"
    );
    assert_eq!(
        volumes_of(&request).len(),
        1,
        "the scratch volume carries the labels"
    );
    match client.create_connect_sandbox(&request, &connect_env).await {
        Err(ClientError::Sandbox(SandboxError::FailedPrecondition(_))) => {}
        other => panic!("a second create of one connect request must fail, got {other:?}"),
    }
    let report = client.deprovision_connect_sandbox(&request).await.unwrap();
    assert!(report.was_present);
    assert!(
        containers_of(&request).is_empty() && volumes_of(&request).is_empty(),
        "scratch goes with it"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_running_sandbox_takes_the_fast_path_with_no_engine_write() {
    let before = SystemTime::now() - Duration::from_secs(1);
    let test = "a_running_sandbox_takes_the_fast_path_with_no_engine_write";
    let Some(sandbox) = start_one(test, Scope::Session, "tok-fast").await else {
        return;
    };
    let started_at = inspect("container", &sandbox.name).unwrap()["State"]["StartedAt"].clone();
    for _ in 0..5 {
        let again = sandbox.ensure().await;
        assert!(!again.created, "{again:?}");
        assert_eq!((again.state, again.generation), (ProbeState::Running, 1));
    }
    assert_eq!(
        inspect("container", &sandbox.name).unwrap()["State"]["StartedAt"],
        started_at
    );
    let events = container_events(&sandbox.container, before);
    assert_eq!(
        events,
        ["create", "start"],
        "the container's whole life: one create, one start"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_container_stopped_from_outside_is_probed_stopped_and_started_again() {
    let test = "a_container_stopped_from_outside_is_probed_stopped_and_started_again";
    let Some(sandbox) = start_one(test, Scope::Workflow, "tok-stop").await else {
        return;
    };
    let workspace = sandbox.workspace();
    wait_for_runner_files(&workspace);

    std::fs::remove_file(workspace.join("pid")).unwrap();
    docker_ok(&["stop", "-t", "10", &sandbox.name]);
    assert_eq!(sandbox.probe().await, ProbeState::Stopped);
    let info = sandbox.describe().await;
    assert_eq!(info.state, ProbeState::Stopped);
    let exit = info.last_exit.expect("the exit is known");
    assert_eq!(
        (exit.code, exit.signal),
        (Some(0), None),
        "the fixture exits 0 on SIGTERM"
    );

    let report = sandbox.ensure().await;
    assert!(report.created, "{report:?}");
    assert_eq!((report.state, report.generation), (ProbeState::Running, 2));
    assert_eq!(
        container_id(&sandbox.name),
        sandbox.container,
        "started, not recreated"
    );
    assert_eq!(container_status(&sandbox.name).as_deref(), Some("running"));
    wait_for_runner_files(&workspace);
    let info = sandbox.describe().await;
    assert_eq!(info.restarts, 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_container_is_restarted_by_the_next_ensure() {
    let test = "a_killed_container_is_restarted_by_the_next_ensure";
    let Some(sandbox) = start_one(test, Scope::Session, "tok-kill").await else {
        return;
    };

    docker_ok(&["kill", &sandbox.name]);
    wait_for_probe(
        &sandbox.client,
        sandbox.scope,
        &sandbox.id,
        ProbeState::Stopped,
    )
    .await;
    let info = sandbox.describe().await;
    let exit = info.last_exit.expect("the exit is recorded");
    assert_eq!((exit.code, exit.signal), (Some(137), Some(9)), "{exit:?}");
    assert!(!exit.oom_killed, "a docker kill is not an OOM kill");

    let report = sandbox.ensure().await;
    assert!(report.created && report.generation == 2, "{report:?}");
    assert_eq!(container_id(&sandbox.name), sandbox.container);
    assert_eq!(container_status(&sandbox.name).as_deref(), Some("running"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_removed_container_is_recreated_and_its_workspace_kept() {
    let test = "a_removed_container_is_recreated_and_its_workspace_kept";
    let Some(sandbox) = start_one(test, Scope::Session, "tok-rm").await else {
        return;
    };
    let workspace = sandbox.workspace();
    wait_for_runner_files(&workspace);

    // Written through the container, into its /workspace.
    let marker = sandbox.daemon.dir().join("marker.txt");
    std::fs::write(&marker, "kept across recreation\n").unwrap();
    let destination = format!("{}:/workspace/marker.txt", sandbox.name);
    docker_ok(&["cp", marker.to_str().unwrap(), &destination]);
    std::fs::remove_file(workspace.join("pid")).unwrap();

    docker_ok(&["rm", "-f", &sandbox.name]);
    assert_eq!(sandbox.probe().await, ProbeState::Absent);
    let report = sandbox.ensure().await;
    assert!(report.created, "{report:?}");
    assert_eq!(
        report.generation, 2,
        "the count of runners goes on across the recreation"
    );
    let second = container_id(&sandbox.name);
    assert_ne!(second, sandbox.container, "a new container");
    assert_eq!(containers_of(&sandbox.id), [second]);
    wait_for_runner_files(&workspace);
    let kept = std::fs::read_to_string(workspace.join("marker.txt")).unwrap();
    assert_eq!(kept, "kept across recreation\n");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_paused_container_is_probed_stopped_and_unpaused_by_ensure() {
    let test = "a_paused_container_is_probed_stopped_and_unpaused_by_ensure";
    let Some(sandbox) = start_one(test, Scope::Session, "tok-pause").await else {
        return;
    };

    docker_ok(&["pause", &sandbox.name]);
    assert_eq!(sandbox.probe().await, ProbeState::Stopped);
    let report = sandbox.ensure().await;
    assert_eq!(report.state, ProbeState::Running);
    assert_eq!(
        (report.created, report.generation),
        (false, 1),
        "the same runner, resumed"
    );
    assert_eq!(container_status(&sandbox.name).as_deref(), Some("running"));
    assert_eq!(container_id(&sandbox.name), sandbox.container);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn twenty_concurrent_ensures_of_one_id_make_one_container() {
    let test = "twenty_concurrent_ensures_of_one_id_make_one_container";
    let Some(([id], _cleanup)) = engine_and_fresh_ids(test, ["race"]) else {
        return;
    };
    let daemon = TestDaemon::start(docker_options(""));
    let env = sandbox_env(&format!("session:{id}"), "tok-race");
    let mut clients = Vec::new();
    for _ in 0..4 {
        clients.push(daemon.client().await);
    }
    let before = SystemTime::now() - Duration::from_secs(1);
    let ensures = (0..20).map(|n| clients[n % clients.len()].ensure_session_sandbox(&id, &env));
    let reports: Vec<_> = futures::future::join_all(ensures)
        .await
        .into_iter()
        .map(Result::unwrap)
        .collect();

    assert_eq!(
        reports.iter().filter(|report| report.created).count(),
        1,
        "{reports:?}"
    );
    assert!(reports
        .iter()
        .all(|report| report.generation == 1 && report.state == ProbeState::Running));
    let containers = containers_of(&id);
    assert_eq!(containers.len(), 1, "{containers:?}");
    assert_eq!(
        container_events(&containers[0], before),
        ["create", "start"]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn containers_outlive_a_killed_daemon_and_the_next_one_serves_them() {
    let test = "containers_outlive_a_killed_daemon_and_the_next_one_serves_them";
    let Some(([session, workflow], _cleanup)) = engine_and_fresh_ids(test, ["adopt-s", "adopt-w"])
    else {
        return;
    };
    let mut daemon = TestDaemon::start(docker_options(""));
    let client = daemon.client().await;
    let session_env = sandbox_env(&format!("session:{session}"), "tok-adopt");
    let workflow_env = sandbox_env(&format!("wfexec:{workflow}"), "tok-adopt");
    client
        .ensure_session_sandbox(&session, &session_env)
        .await
        .unwrap();
    client
        .ensure_workflow_sandbox(&workflow, &workflow_env)
        .await
        .unwrap();
    // One restart before the daemon dies, so its generation is 2.
    let session_name = base_name(Scope::Session, &session);
    docker_ok(&["stop", &session_name]);
    assert_eq!(
        client
            .ensure_session_sandbox(&session, &session_env)
            .await
            .unwrap()
            .generation,
        2
    );
    let session_container = container_id(&session_name);
    let workflow_container = container_id(&base_name(Scope::Workflow, &workflow));
    drop(client);

    daemon.kill();
    assert_eq!(
        container_status(&session_container).as_deref(),
        Some("running"),
        "containers outlive the daemon"
    );
    assert_eq!(
        container_status(&workflow_container).as_deref(),
        Some("running")
    );

    daemon.launch();
    daemon.wait_ready();
    let client = daemon.client().await;
    assert_eq!(
        client.probe(Scope::Session, &session).await.unwrap(),
        ProbeState::Running
    );
    assert_eq!(
        client.probe(Scope::Workflow, &workflow).await.unwrap(),
        ProbeState::Running
    );
    let again = client
        .ensure_session_sandbox(&session, &session_env)
        .await
        .unwrap();
    assert_eq!(
        (again.created, again.generation),
        (false, 2),
        "fast path, generation continued"
    );
    let again = client
        .ensure_workflow_sandbox(&workflow, &workflow_env)
        .await
        .unwrap();
    assert_eq!((again.created, again.generation), (false, 1));

    let listed = client.list(None).await.unwrap();
    let ours: Vec<_> = listed
        .iter()
        .filter(|info| info.id == session || info.id == workflow)
        .collect();
    assert_eq!(ours.len(), 2, "{listed:?}");
    for info in ours {
        assert_eq!(info.state, ProbeState::Running);
        let expected = if info.scope == Scope::Session {
            &session_container
        } else {
            &workflow_container
        };
        assert_eq!(info.container_id.as_ref(), Some(expected));
    }
    assert_eq!(
        containers_of(&session),
        std::slice::from_ref(&session_container),
        "no duplicate"
    );
    assert_eq!(
        containers_of(&workflow),
        std::slice::from_ref(&workflow_container),
        "no duplicate"
    );

    // A clean stop (SIGTERM) leaves them running too.
    drop(client);
    assert!(daemon.stop().success(), "log:\n{}", daemon.log_text());
    assert_eq!(
        container_status(&session_container).as_deref(),
        Some("running")
    );
    assert_eq!(
        container_status(&workflow_container).as_deref(),
        Some("running")
    );
    daemon.launch();
    daemon.wait_ready();
    let client = daemon.client().await;
    let again = client
        .ensure_session_sandbox(&session, &session_env)
        .await
        .unwrap();
    assert_eq!((again.created, again.generation), (false, 2));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deprovision_is_idempotent_and_removes_container_and_volume() {
    let test = "deprovision_is_idempotent_and_removes_container_and_volume";
    let Some(([id, kept], _cleanup)) = engine_and_fresh_ids(test, ["deprov", "deprov-keep"]) else {
        return;
    };
    // The runner ignores SIGTERM: every stop runs out the 1 s grace.
    let mut options = docker_options("command = [\"--ignore-term\"]");
    options.stop_grace = "1s".to_string();
    let daemon = TestDaemon::start(options);
    let client = daemon.client().await;
    let env = sandbox_env(&format!("session:{id}"), "tok-deprov");
    client.ensure_session_sandbox(&id, &env).await.unwrap();
    wait_for_runner_files(&volume_dir(&workspace_volume(Scope::Session, &id)));

    let started = Instant::now();
    let report = client.deprovision_session_sandbox(&id).await.unwrap();
    assert!(report.was_present && report.forced, "{report:?}");
    assert!(
        started.elapsed() >= Duration::from_secs(1),
        "SIGKILL only after the grace"
    );
    assert!(containers_of(&id).is_empty(), "container gone");
    assert!(volumes_of(&id).is_empty(), "volume gone");
    let again = client.deprovision_session_sandbox(&id).await.unwrap();
    assert!(!again.was_present && !again.forced, "{again:?}");
    assert_eq!(
        client.probe(Scope::Session, &id).await.unwrap(),
        ProbeState::Absent
    );

    // --keep-workspace keeps the volume, and the next runner finds its files.
    let kept_env = sandbox_env(&format!("wfexec:{kept}"), "");
    client
        .ensure_workflow_sandbox(&kept, &kept_env)
        .await
        .unwrap();
    let volume = workspace_volume(Scope::Workflow, &kept);
    let workspace = volume_dir(&volume);
    wait_for_runner_files(&workspace);
    assert!(
        client
            .deprovision(Scope::Workflow, &kept, true)
            .await
            .unwrap()
            .was_present
    );
    assert!(containers_of(&kept).is_empty());
    assert_eq!(volumes_of(&kept), std::slice::from_ref(&volume));
    assert!(workspace.join("env.json").is_file());
    assert!(
        client
            .deprovision(Scope::Workflow, &kept, false)
            .await
            .unwrap()
            .was_present
    );
    assert!(volumes_of(&kept).is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unreachable_engine_is_unavailable_quickly_and_the_driver_reconnects() {
    let test = "an_unreachable_engine_is_unavailable_quickly_and_the_driver_reconnects";
    let Some(([id], _cleanup)) = engine_and_fresh_ids(test, ["away"]) else {
        return;
    };
    let engine_dir = make_test_dir();
    let engine_socket: PathBuf = engine_dir.join("engine.sock");
    let address = format!("unix://{}", engine_socket.display());
    let daemon = TestDaemon::start(docker_options(&format!("host = \"{address}\"")));
    let client = daemon.client().await;
    let env = sandbox_env(&format!("session:{id}"), "tok-away");

    // Nothing at the address: the daemon serves, the engine's calls fail fast.
    let started = Instant::now();
    let message = unavailable_message(client.ensure_session_sandbox(&id, &env).await);
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "took {:?}",
        started.elapsed()
    );
    assert!(message.contains(&address), "{message}");
    let started = Instant::now();
    assert!(unavailable_message(client.probe(Scope::Session, &id).await).contains(&address));
    assert!(started.elapsed() < Duration::from_secs(2));
    let started = Instant::now();
    let tail = LogStart::Tail { lines: 10 };
    let logs = client.logs(Scope::Session, &id, tail, 1024).await;
    assert!(unavailable_message(logs).contains(&address));
    assert!(started.elapsed() < Duration::from_secs(2));
    let status = client
        .status()
        .await
        .expect("the daemon's own facts are served without the engine");
    assert!(
        status.driver_health.contains("UNREACHABLE") && status.driver_health.contains(&address),
        "{}",
        status.driver_health
    );

    // The engine comes back: the driver reconnects by itself.
    let proxy = EngineProxy::start(&engine_socket);
    let reconnected = eventually(Duration::from_secs(15), || {
        let (client, id, env) = (client.clone(), id.clone(), env.clone());
        async move { client.ensure_session_sandbox(&id, &env).await.is_ok() }
    })
    .await;
    assert!(
        reconnected,
        "no ensure succeeded after the engine came back; log:\n{}",
        daemon.log_text()
    );
    assert_eq!(
        client.probe(Scope::Session, &id).await.unwrap(),
        ProbeState::Running
    );

    // And goes away again.
    drop(proxy);
    let started = Instant::now();
    assert!(unavailable_message(client.probe(Scope::Session, &id).await).contains(&address));
    assert!(started.elapsed() < Duration::from_secs(2));
    let _ = std::fs::remove_dir_all(&engine_dir);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_token_change_recreates_a_stopped_container_and_keeps_the_workspace() {
    let test = "a_token_change_recreates_a_stopped_container_and_keeps_the_workspace";
    let old_token = format!("tok-old-{}", std::process::id());
    let Some(sandbox) = start_one(test, Scope::Session, &old_token).await else {
        return;
    };
    let new_token = format!("tok-new-{}", sandbox.id);
    let new_env = sandbox_env(&sandbox.env.task_queue, &new_token);
    let ensure_new = || sandbox.client.ensure(sandbox.scope, &sandbox.id, &new_env);
    let workspace = sandbox.workspace();
    wait_for_runner_files(&workspace);
    std::fs::write(workspace.join("marker.txt"), "work in progress\n").unwrap();

    // Running: the runner keeps its credential until it next starts.
    let report = ensure_new().await.unwrap();
    assert_eq!((report.created, report.generation), (false, 1));
    assert_eq!(container_id(&sandbox.name), sandbox.container);
    assert_eq!(runner_env(&workspace)["STIGMER_TOKEN"], old_token);

    // Stopped: recreated with the new token, workspace kept.
    docker_ok(&["stop", &sandbox.name]);
    std::fs::remove_file(workspace.join("pid")).unwrap();
    let report = ensure_new().await.unwrap();
    assert_eq!((report.created, report.generation), (true, 2), "{report:?}");
    let second = container_id(&sandbox.name);
    assert_ne!(
        second, sandbox.container,
        "recreated, not restarted with a stale token"
    );
    let container = inspect("container", &sandbox.name).unwrap();
    assert!(env_list(&container).contains(&format!("STIGMER_TOKEN={new_token}")));
    wait_for_runner_files(&workspace);
    assert_eq!(runner_env(&workspace)["STIGMER_TOKEN"], new_token);
    let kept = std::fs::read_to_string(workspace.join("marker.txt")).unwrap();
    assert_eq!(kept, "work in progress\n");

    // Stopped with the same token: a plain start of the same container.
    docker_ok(&["stop", &sandbox.name]);
    let report = ensure_new().await.unwrap();
    assert_eq!((report.created, report.generation), (true, 3));
    assert_eq!(container_id(&sandbox.name), second);
    let log = sandbox.daemon.log_text();
    assert!(
        !log.contains(&old_token) && !log.contains(&new_token),
        "tokens never reach the log"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leaked_connect_sandbox_is_reaped_after_its_ttl() {
    let test = "a_leaked_connect_sandbox_is_reaped_after_its_ttl";
    // Taken first so that it is released last, after the cleanup.
    let _connect = CONNECT_SANDBOXES.lock().await;
    let Some(([request, session], _cleanup)) = engine_and_fresh_ids(test, ["leak", "leak-s"])
    else {
        return;
    };
    let daemon = TestDaemon::start(docker_options(
        "connect_ttl = \"2s\"\nconnect_creation_grace = \"1s\"",
    ));
    let client = daemon.client().await;
    client
        .ensure_session_sandbox(&session, &sandbox_env(&format!("session:{session}"), ""))
        .await
        .unwrap();
    let created = Instant::now();
    client
        .create_connect_sandbox(&request, &sandbox_env(&format!("mcp:{request}"), ""))
        .await
        .unwrap();
    assert_eq!(
        client.probe(Scope::Connect, &request).await.unwrap(),
        ProbeState::Running
    );

    let reaped = wait_until(Duration::from_secs(20), || {
        containers_of(&request).is_empty()
    });
    assert!(
        reaped,
        "the leaked connect sandbox is still there; log:\n{}",
        daemon.log_text()
    );
    assert!(
        created.elapsed() >= Duration::from_secs(2),
        "reaped before its TTL"
    );
    assert!(
        volumes_of(&request).is_empty(),
        "its scratch volume went with it"
    );
    let log = daemon.log_text();
    let line = log
        .lines()
        .find(|line| line.contains("removed a leaked connect sandbox"));
    assert!(
        line.is_some_and(|line| line.contains(&request)),
        "a log line names it:\n{log}"
    );
    assert_eq!(
        client.probe(Scope::Connect, &request).await.unwrap(),
        ProbeState::Absent
    );
    assert_eq!(
        client.probe(Scope::Session, &session).await.unwrap(),
        ProbeState::Running,
        "only connect sandboxes expire"
    );
}

#[test]
fn start_up_fails_clearly_without_a_runner_image() {
    // No engine needed: the configuration is refused before it is contacted.
    let mut options = docker_options("");
    options.extra_toml = options
        .extra_toml
        .replace(&format!("runner_image = \"{TEST_IMAGE}\"\n"), "");
    let mut daemon = TestDaemon::prepare(options);
    daemon.launch();
    let status = daemon
        .wait_exit(Duration::from_secs(20))
        .expect("sandboxd exits");
    assert!(!status.success(), "{status}");
    let log = daemon.log_text();
    assert!(
        log.contains("runner image") && log.contains("STIGMER_SANDBOX_RUNNER_IMAGE"),
        "the error names what to set:\n{log}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_daemons_racing_on_one_engine_make_one_container() {
    let test = "two_daemons_racing_on_one_engine_make_one_container";
    let Some(([id], _cleanup)) = engine_and_fresh_ids(test, ["duel"]) else {
        return;
    };
    // Per-key locks serialize one daemon; across daemons the engine's 409
    // name conflict is the arbiter, and the loser goes on with the winner's.
    let (first, second) = (
        TestDaemon::start(docker_options("")),
        TestDaemon::start(docker_options("")),
    );
    let (a, b) = (first.client().await, second.client().await);
    let env = sandbox_env(&format!("session:{id}"), "tok-duel");
    let ensures = (0..10)
        .map(|n| if n % 2 == 0 { &a } else { &b })
        .map(|client| client.ensure_session_sandbox(&id, &env));
    for result in futures::future::join_all(ensures).await {
        let report = result.expect("every racing ensure succeeds");
        assert_eq!(report.state, ProbeState::Running);
    }
    assert_eq!(containers_of(&id).len(), 1, "one container, whoever won");
    assert_eq!(
        container_status(&base_name(Scope::Session, &id)).as_deref(),
        Some("running")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_container_that_is_not_ours_is_never_touched() {
    let test = "a_container_that_is_not_ours_is_never_touched";
    let Some(([id], _cleanup)) = engine_and_fresh_ids(test, ["foreign"]) else {
        return;
    };
    let name = base_name(Scope::Session, &id);
    // Someone else's container under the name this sandbox would take.
    let foreign = docker_ok(&[
        "create",
        "--name",
        &name,
        "--label",
        &format!("stigmer.ai/sandbox-id={id}"),
        TEST_IMAGE,
    ]);
    let daemon = TestDaemon::start(docker_options(""));
    let client = daemon.client().await;

    match client
        .ensure_session_sandbox(&id, &sandbox_env(&format!("session:{id}"), ""))
        .await
    {
        Err(ClientError::Sandbox(SandboxError::FailedPrecondition(message))) => {
            assert!(message.contains(&name), "{message}")
        }
        other => panic!("ensure must refuse a container it does not own, got {other:?}"),
    }
    assert_eq!(
        client.probe(Scope::Session, &id).await.unwrap(),
        ProbeState::Absent
    );
    assert!(
        !client
            .deprovision_session_sandbox(&id)
            .await
            .unwrap()
            .was_present
    );
    assert_eq!(container_id(&name), foreign, "still there, untouched");
    assert_eq!(container_status(&name).as_deref(), Some("created"));
}

fn stdout(output: &std::process::Output) -> String {
    String::from_utf8_lossy(&output.stdout).into_owned()
}

fn stderr(output: &std::process::Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}

/// What one reader gets by asking from `start` until the daemon says it is
/// at the end, `max_bytes` at a time: the text, whether any chunk reported
/// a gap, and the cursor to go on from.
async fn read_to_end(
    client: &SandboxdClient,
    scope: Scope,
    id: &str,
    mut start: LogStart,
    max_bytes: u32,
) -> (String, bool, LogCursor) {
    let (mut data, mut gap) = (Vec::new(), false);
    loop {
        let chunk = client.logs(scope, id, start, max_bytes).await.unwrap();
        assert!(chunk.data.len() <= max_bytes as usize, "{chunk:?}");
        data.extend_from_slice(&chunk.data);
        gap |= chunk.gap;
        start = LogStart::After(chunk.next);
        if chunk.at_end {
            return (String::from_utf8(data).unwrap(), gap, chunk.next);
        }
    }
}

/// Waits until the engine's log of the sandbox has `lines` lines. The
/// engine reads a runner's pipes in its own time: a runner done writing
/// is not yet a log done growing.
async fn wait_for_logged(client: &SandboxdClient, scope: Scope, id: &str, lines: usize) {
    let logged = eventually(Duration::from_secs(20), || async {
        let (text, _, _) = read_to_end(client, scope, id, LogStart::Beginning, MAX_LOG_CHUNK).await;
        text.lines().count() >= lines
    })
    .await;
    assert!(
        logged,
        "the engine never logged {lines} lines of {scope} '{id}'"
    );
}

/// What one run of `runner-fixture --print-lines 20` writes: its start line
/// on stderr and the twenty on stdout, each stream in order. The engine
/// reads the two pipes separately, so where the stderr line lands among
/// the others is the engine's to say (the process tier's one file keeps
/// the order written).
fn assert_one_run(text: &str) {
    let (started, printed): (Vec<&str>, Vec<&str>) = text
        .lines()
        .partition(|line| line.starts_with("runner-fixture: pid "));
    assert!(
        started.len() == 1 && started[0].contains("starting"),
        "stderr is in the log too: {text}"
    );
    let expected: Vec<String> = (1..=20)
        .map(|n| format!("runner-fixture line {n}"))
        .collect();
    assert_eq!(printed, expected, "{text}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn container_output_is_read_from_the_engine_with_tail_and_a_cursor_across_restarts() {
    let test = "container_output_is_read_from_the_engine_with_tail_and_a_cursor_across_restarts";
    let Some(([id], _cleanup)) = engine_and_fresh_ids(test, ["logs"]) else {
        return;
    };
    // Never ensured, so nothing on the engine to clean up.
    let never = unique_id("logs-never");
    let daemon = TestDaemon::start(docker_options("command = [\"--print-lines\", \"20\"]"));
    let client = daemon.client().await;
    let env = sandbox_env(&format!("session:{id}"), "tok-logs");
    client.ensure_session_sandbox(&id, &env).await.unwrap();
    let name = base_name(Scope::Session, &id);
    let first = container_id(&name);
    let workspace = volume_dir(&workspace_volume(Scope::Session, &id));
    // The fixture writes its pid file after printing its lines.
    wait_for_runner_files(&workspace);
    wait_for_logged(&client, Scope::Session, &id, 21).await;

    let all = daemon.sandboxctl(&["logs", "session", &id]);
    assert_eq!(all.status.code(), Some(0), "{}", stderr(&all));
    let text = stdout(&all);
    assert_one_run(&text);
    let tail = daemon.sandboxctl(&["logs", "session", &id, "--tail", "3"]);
    assert_eq!(tail.status.code(), Some(0), "{}", stderr(&tail));
    let last_three: Vec<&str> = text.lines().skip(18).collect();
    assert_eq!(stdout(&tail), format!("{}\n", last_three.join("\n")));

    // Chunks far smaller than a line: each within the bound, none lost or repeated.
    let (small, gap, end) = read_to_end(&client, Scope::Session, &id, LogStart::Beginning, 7).await;
    assert_eq!((small.as_str(), gap), (text.as_str(), false));

    // Killed and started again (the same container, so the same log): a
    // follower from the end ends with the run it follows, saying how, and
    // never reads into the next one; a cursor reads on.
    let mut follower =
        daemon.spawn_sandboxctl(&["logs", "session", &id, "--tail", "1", "--follow"]);
    let (lines, followed) = std::sync::mpsc::channel();
    let output = follower.stdout.take().unwrap();
    std::thread::spawn(move || {
        for line in BufReader::new(output).lines().map_while(Result::ok) {
            if lines.send(line).is_err() {
                break;
            }
        }
    });
    let next_line = || followed.recv_timeout(Duration::from_secs(20));
    // Its first line shows it is following before the restart.
    assert_eq!(next_line().ok().as_deref(), text.lines().last());
    std::fs::remove_file(workspace.join("pid")).unwrap();
    docker_ok(&["kill", &name]);
    wait_for_probe(&client, Scope::Session, &id, ProbeState::Stopped).await;
    let report = client.ensure_session_sandbox(&id, &env).await.unwrap();
    assert_eq!((report.created, report.generation), (true, 2), "{report:?}");
    assert_eq!(container_id(&name), first, "started again, not recreated");
    assert!(
        sandboxd_tests::wait_until(Duration::from_secs(30), || follower
            .try_wait()
            .unwrap()
            .is_some()),
        "--follow did not end with the run it followed"
    );
    let crossed: Vec<String> = std::iter::from_fn(|| next_line().ok()).collect();
    assert!(crossed.is_empty(), "crossed into the next run: {crossed:?}");
    let errors = stderr(&follower.wait_with_output().unwrap());
    assert!(
        errors.contains(&format!("session {id}: generation 1: the runner"))
            && errors.contains("its output ends here"),
        "{errors}"
    );
    assert!(!errors.contains("lost"), "{errors}");
    wait_for_runner_files(&workspace);
    let (second, gap, end) =
        read_to_end(&client, Scope::Session, &id, LogStart::After(end), 4096).await;
    assert_one_run(&second);
    assert!(!gap, "a restart loses nothing");
    let all = stdout(&daemon.sandboxctl(&["logs", "session", &id]));
    assert_eq!(all, format!("{text}{second}"), "both runs, in order");

    // Removed and recreated: a new log. The cursor into the old one goes on
    // from the new one's start, and says output may have been lost.
    std::fs::remove_file(workspace.join("pid")).unwrap();
    docker_ok(&["rm", "-f", &name]);
    let report = client.ensure_session_sandbox(&id, &env).await.unwrap();
    assert!(report.created, "{report:?}");
    assert_ne!(container_id(&name), first, "a new container");
    wait_for_runner_files(&workspace);
    wait_for_logged(&client, Scope::Session, &id, 21).await;
    let (third, gap, _) =
        read_to_end(&client, Scope::Session, &id, LogStart::After(end), 4096).await;
    assert_one_run(&third);
    assert!(gap, "the old container's unread output went with it");

    // A sandbox that never ran has no output, as in the process tier.
    let absent = daemon.sandboxctl(&["logs", "workflow", &never]);
    assert_eq!(absent.status.code(), Some(1));
    assert!(
        stderr(&absent).contains(&format!("workflow '{never}' has no output to show")),
        "{}",
        stderr(&absent)
    );
}

/// Follows `id` with `sandboxctl logs --follow` until it ends by itself
/// (once `then` has run): its stdout and stderr.
async fn follow_until_it_ends(
    daemon: &TestDaemon,
    id: &str,
    wait_for: &str,
    then: impl std::future::Future<Output = ()>,
) -> (String, String) {
    let mut follower = daemon.spawn_sandboxctl(&["logs", "session", id, "--follow"]);
    let (lines, followed) = std::sync::mpsc::channel();
    let output = follower.stdout.take().unwrap();
    std::thread::spawn(move || {
        for line in BufReader::new(output).lines().map_while(Result::ok) {
            if lines.send(line).is_err() {
                break;
            }
        }
    });
    let mut seen = Vec::new();
    while !seen.iter().any(|line: &String| line.contains(wait_for)) {
        match followed.recv_timeout(Duration::from_secs(30)) {
            Ok(line) => seen.push(line),
            Err(_) => {
                let _ = follower.kill();
                panic!("the follower never printed {wait_for:?}: {seen:?}");
            }
        }
    }
    then.await;
    let ended = sandboxd_tests::wait_until(Duration::from_secs(30), || {
        follower.try_wait().unwrap().is_some()
    });
    if !ended {
        let _ = follower.kill();
    }
    seen.extend(std::iter::from_fn(|| {
        followed.recv_timeout(Duration::from_secs(5)).ok()
    }));
    let errors = stderr(&follower.wait_with_output().unwrap());
    assert!(
        ended,
        "--follow did not end with its generation: {seen:?}\n{errors}"
    );
    let mut text = seen.join("\n");
    text.push('\n');
    (text, errors)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_docker_follow_ends_after_the_last_line_at_a_deprovision_with_or_without_the_workspace() {
    let test = "a_docker_follow_ends_after_the_last_line_at_a_deprovision";
    let Some(([kept, gone], _cleanup)) = engine_and_fresh_ids(test, ["follow-kept", "follow-gone"])
    else {
        return;
    };
    let daemon = TestDaemon::start(docker_options("command = [\"--print-lines\", \"3\"]"));
    let client = daemon.client().await;
    for (id, keep_workspace) in [(&kept, true), (&gone, false)] {
        let env = sandbox_env(&format!("session:{id}"), "tok-follow");
        client.ensure_session_sandbox(id, &env).await.unwrap();
        let deprovision = async {
            let mut args = vec!["deprovision", "session", id.as_str()];
            if keep_workspace {
                args.push("--keep-workspace");
            }
            let output = daemon.sandboxctl(&args);
            assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
        };
        let (text, errors) =
            follow_until_it_ends(&daemon, id, "runner-fixture line 3", deprovision).await;
        // The runner's last words, written at SIGTERM, came before the end.
        assert!(
            text.ends_with("runner-fixture: got SIGTERM, exiting\n"),
            "keep_workspace={keep_workspace}: {text}"
        );
        // The follower's read may land between the container's stop and
        // its removal: then the run reads as over with the daemon's own
        // stop as its exit, which names the deprovision too.
        let named = [
            "the runner was stopped (sandbox deprovisioned)",
            "the runner exited (stopped: deprovisioned)",
        ]
        .iter()
        .any(|how| {
            errors.contains(&format!(
                "session {id}: generation 1: {how}; its output ends here"
            ))
        });
        assert!(named, "keep_workspace={keep_workspace}: {errors}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_docker_follow_ends_when_its_runner_exits_saying_how() {
    let test = "a_docker_follow_ends_when_its_runner_exits_saying_how";
    let Some(([id], _cleanup)) = engine_and_fresh_ids(test, ["follow-exit"]) else {
        return;
    };
    let daemon = TestDaemon::start(docker_options(
        "command = [\"--print-lines\", \"3\", \"--exit-code\", \"3\"]",
    ));
    let client = daemon.client().await;
    let env = sandbox_env(&format!("session:{id}"), "tok-exit");
    client.ensure_session_sandbox(&id, &env).await.unwrap();
    let (text, errors) = follow_until_it_ends(&daemon, &id, "runner-fixture: pid", async {}).await;
    assert!(text.contains("runner-fixture: pid"), "{text}");
    assert!(
        errors.contains(&format!(
            "session {id}: generation 1: the runner exited (code 3); its output ends here"
        )),
        "{errors}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_long_container_log_comes_in_bounded_chunks_in_order() {
    let test = "a_long_container_log_comes_in_bounded_chunks_in_order";
    let Some(([id], _cleanup)) = engine_and_fresh_ids(test, ["logs-long"]) else {
        return;
    };
    let lines = 30_000;
    let daemon = TestDaemon::start(docker_options(&format!(
        "command = [\"--print-lines\", \"{lines}\"]"
    )));
    let client = daemon.client().await;
    client
        .ensure_workflow_sandbox(&id, &sandbox_env(&format!("wfexec:{id}"), ""))
        .await
        .unwrap();
    wait_for_runner_files(&volume_dir(&workspace_volume(Scope::Workflow, &id)));
    wait_for_logged(&client, Scope::Workflow, &id, lines as usize + 1).await;

    // Each chunk after the first starts from a cursor far behind the
    // newest entries, so it is read past the engine's recent ones.
    let (data, chunks) = read_all_logs(&client, Scope::Workflow, &id).await;
    assert!(chunks >= 3, "{chunks} chunks");
    let text = String::from_utf8(data).unwrap();
    assert_eq!(
        fixture_line_numbers(&text),
        (1..=lines).collect::<Vec<u32>>()
    );
    assert_eq!(
        stdout(&daemon.sandboxctl(&["logs", "workflow", &id])),
        text,
        "sandboxctl reads the same"
    );
}

/// The runner allocates only once the test says so, after ensure returned:
/// this engine (Docker 20.10, containerd 1.6's runc shim, cgroup v1)
/// starts watching a container's cgroup for OOM kills only after its
/// process has started, so a runner killed within its first milliseconds
/// is reported as a plain exit 137 with `OOMKilled` false
/// (containerd#8180, #8893; the shim watches from creation since
/// containerd#12405). Allocating at once, about one run in thirty here
/// loses the flag, more under load. Real runners take seconds to grow.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_runner_over_its_memory_limit_is_oom_killed_and_describe_says_so() {
    let test = "a_runner_over_its_memory_limit_is_oom_killed_and_describe_says_so";
    let Some(([over, under], _cleanup)) = engine_and_fresh_ids(test, ["oom", "oom-under"]) else {
        return;
    };
    // 32 MiB and no swap (the driver sets memory_swap to the limit).
    let limited = |args: &str| docker_options(&format!("memory = \"32m\"\ncommand = [{args}]"));

    // Under the limit the runner holds its memory and lives (its pid file
    // comes once it does): the limit alone kills nothing.
    let daemon = TestDaemon::start(limited(r#""--allocate-mib", "8""#));
    let client = daemon.client().await;
    let env = sandbox_env(&format!("session:{under}"), "");
    client.ensure_session_sandbox(&under, &env).await.unwrap();
    wait_for_runner_files(&volume_dir(&workspace_volume(Scope::Session, &under)));
    let container = inspect("container", &base_name(Scope::Session, &under)).unwrap();
    assert_eq!(container["HostConfig"]["Memory"], 32 << 20);
    assert_eq!(container["HostConfig"]["MemorySwap"], 32 << 20);
    assert_eq!(
        client.probe(Scope::Session, &under).await.unwrap(),
        ProbeState::Running
    );
    drop(client);
    drop(daemon);

    // Over it: the kernel's OOM killer ends the runner, and the engine
    // reports it as such.
    let daemon = TestDaemon::start(limited(
        r#""--allocate-mib", "128", "--allocate-when", "allocate-now""#,
    ));
    let client = daemon.client().await;
    let env = sandbox_env(&format!("session:{over}"), "");
    client.ensure_session_sandbox(&over, &env).await.unwrap();
    let workspace = volume_dir(&workspace_volume(Scope::Session, &over));
    wait_for_runner_files(&workspace);
    // A follower ends with the OOM kill, naming it.
    let allocate = async { std::fs::write(workspace.join("allocate-now"), "").unwrap() };
    let (_, errors) = follow_until_it_ends(&daemon, &over, "runner-fixture: pid", allocate).await;
    assert!(
        errors.contains(&format!(
            "session {over}: generation 1: the runner exited ("
        )) && errors.contains("OOM-killed")
            && errors.contains("its output ends here"),
        "{errors}"
    );
    wait_for_probe(&client, Scope::Session, &over, ProbeState::Stopped).await;
    let name = base_name(Scope::Session, &over);
    let state = inspect("container", &name).unwrap()["State"].clone();
    assert_eq!(state["OOMKilled"], true, "{state}");
    let info = client.describe(Scope::Session, &over).await.unwrap();
    let exit = info.last_exit.expect("the exit is known");
    assert!(exit.oom_killed, "{exit:?}");
    assert_eq!((exit.code, exit.signal), (Some(137), Some(9)), "{exit:?}");
    assert!(exit.to_string().contains("OOM-killed"), "{exit}");
    let logged = wait_until(Duration::from_secs(10), || {
        daemon.log_text().contains("runner ran out of memory")
    });
    assert!(
        logged,
        "the engine's oom event reached the daemon:\n{}",
        daemon.log_text()
    );
    // Its output is still there to read.
    let (output, _, _) = read_to_end(
        &client,
        Scope::Session,
        &over,
        LogStart::Tail { lines: 5 },
        4096,
    )
    .await;
    assert!(output.contains("allocate_mib: 128"), "{output}");
}
