//! Ensure on the docker tier, against the real engine on this machine: the
//! real `sandboxd --driver docker`, a runner image built from the runner
//! fixture (`.ci/build-test-image.sh`, from local files only), and the
//! docker CLI to look at — and to break — containers from outside. The
//! container a new sandbox gets (labels, env, limits, workspace, no
//! privileges), the fast path, the repair of a container stopped, killed,
//! removed or paused from outside, a token change, races within one daemon
//! and across two, and a container that is not ours, left alone.
//!
//! Without an engine every test prints a loud SKIPPED line and passes;
//! with `SANDBOXD_REQUIRE_DOCKER=1` (as `.ci/run` sets) a missing engine
//! fails instead. Every test uses ids of its own and removes what it made,
//! by label, even when it fails.

use std::path::PathBuf;
use std::time::{Duration, SystemTime};

use sandboxd_client::{
    ClientError, EnsureReport, ProbeState, SandboxEnv, SandboxError, SandboxInfo, SandboxdClient,
    Scope,
};
use sandboxd_protocol::naming::base_name;
use sandboxd_tests::docker_image::{
    container_events, container_status, containers_of, docker_ok, docker_options, inspect,
    volume_dir, volumes_of, Cleanup, TEST_IMAGE,
};
use sandboxd_tests::{procs, runner_env, sandbox_env, TestDaemon};
use serde_json::Value;

use crate::docker_support::{
    container_id, engine_and_fresh_ids, wait_for_probe, wait_for_runner_files, workspace_volume,
    CONNECT_SANDBOXES,
};

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

/// A line of `/proc/<pid>/status`, such as `NoNewPrivs` or `CapEff`.
fn proc_status(pid: u32, field: &str) -> Option<String> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let line = status
        .lines()
        .find(|line| line.starts_with(&format!("{field}:")))?;
    Some(line[field.len() + 1..].trim().to_string())
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
