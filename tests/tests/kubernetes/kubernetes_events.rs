//! The kubernetes tier's event stream, from the daemon's watches on its
//! Deployments and pods: a sandbox's creation, its runner's start, an
//! OOM kill (the pod's `lastState.terminated.reason: OOMKilled`), an exit
//! with code 3, its deprovision, adoption by a restarted daemon, and a
//! watch that the API server expires (410) relisting without a gap, and
//! a pod stopped at its scope's `max_lifetime` announced once, as
//! `exited` with the reason `lifetime`.
//! Against the stand-in API server, or a real cluster with
//! `SANDBOXD_TEST_KUBECONFIG` (as kubernetes_support.rs; it needs a controller
//! manager). No kubelet runs pods here: the test writes the pod's status
//! through the `status` subresource as the kubelet would, on the stand-in
//! onto a pod it inserts, on a real cluster onto the pod the ReplicaSet
//! controller made (so a real OOM kill, which needs a kubelet and a
//! runtime, is not shown: what the daemon makes of the kubelet's report
//! of one is). Output to read needs a kubelet too: those checks run on
//! the stand-in only.

use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, ListParams, Patch, PatchParams};
use sandboxd_client::{EventKind, ExitReason, Scope};
use sandboxd_protocol::naming::{base_name, LABEL_SANDBOX_ID};
use sandboxd_tests::events::{events_now, wait_for_event};
use sandboxd_tests::k8s::TestCluster;
use sandboxd_tests::{eventually, sandbox_env, TestDaemon};
use serde_json::json;

/// The sandbox's pod: inserted on the stand-in (no controllers there), the
/// ReplicaSet controller's on a real cluster (waited for).
async fn the_pod(cluster: &TestCluster, scope: &str, id: &str) -> String {
    the_pod_besides(cluster, scope, id, None).await
}

/// The sandbox's pod other than `old` (the one before a scale-up, which a
/// real cluster's ReplicaSet controller deletes; pods being deleted are
/// never the one).
async fn the_pod_besides(
    cluster: &TestCluster,
    scope: &str,
    id: &str,
    old: Option<&str>,
) -> String {
    if let Some(standin) = cluster.standin_quietly() {
        let number = if old.is_some() { 2 } else { 1 };
        let name = format!("{}-pod-{number}", base_name(scope.parse().unwrap(), id));
        let pod = json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "labels": {
                "stigmer.ai/managed-by": "stigmer-server",
                "stigmer.ai/scope": scope,
                "stigmer.ai/sandbox-id": id,
            }},
            "spec": {"containers": [{"name": "runner", "image": sandboxd_tests::k8s::TEST_IMAGE}]},
            "status": {"phase": "Pending"},
        });
        standin.insert_pod(&cluster.namespace, pod, b"");
        return name;
    }
    let pods: Api<Pod> = cluster.api();
    let params = ListParams::default().labels(&format!("{LABEL_SANDBOX_ID}={id}"));
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    loop {
        let list = pods.list(&params).await.expect("list pods");
        let current = list.items.iter().find(|pod| {
            pod.metadata.name.as_deref() != old && pod.metadata.deletion_timestamp.is_none()
        });
        if let Some(name) = current.and_then(|pod| pod.metadata.name.clone()) {
            return name;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the ReplicaSet controller made no pod for {id} (besides {old:?})"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Writes the runner container's status as the kubelet would.
async fn write_status(cluster: &TestCluster, pod: &str, status: serde_json::Value) {
    let pods: Api<Pod> = cluster.api();
    pods.patch_status(
        pod,
        &PatchParams::default(),
        &Patch::Merge(json!({ "status": status })),
    )
    .await
    .unwrap_or_else(|error| panic!("write the status of pod {pod}: {error}"));
}

fn runner_status(
    restarts: i32,
    state: serde_json::Value,
    last: serde_json::Value,
) -> serde_json::Value {
    json!({
        "phase": "Running",
        "containerStatuses": [{
            "name": "runner", "image": sandboxd_tests::k8s::TEST_IMAGE, "imageID": "",
            "ready": state.get("running").is_some(), "restartCount": restarts,
            "state": state, "lastState": last,
        }],
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sandboxs_creation_start_oom_kill_and_deprovision_are_events() {
    let cluster = TestCluster::start("events-life").await;
    let daemon = TestDaemon::start(cluster.daemon_options(""));
    let client = daemon.client().await;
    cluster.wait_for_watches(&daemon).await;
    let since = events_now(&client).await;
    let id = "ses-life";
    let ensured = client
        .ensure_session_sandbox(id, &sandbox_env("session:life", "tok-life"))
        .await
        .unwrap();
    let is = |kind: EventKind| {
        let uid = ensured.uid.clone();
        move |event: &sandboxd_client::Event| {
            event.kind == kind
                && event.id == id
                && event.scope == Scope::Session
                && event.uid == uid
        }
    };
    let (created, _) = wait_for_event(&client, Some(since.clone()), is(EventKind::Created)).await;
    assert_eq!(created.generation, 1, "{created:?}");
    assert_eq!(created.name, base_name(Scope::Session, id));

    let pod = the_pod(&cluster, "session", id).await;
    write_status(
        &cluster,
        &pod,
        runner_status(
            0,
            json!({"running": {"startedAt": "2026-01-01T00:01:00Z"}}),
            json!({}),
        ),
    )
    .await;
    let (started, _) = wait_for_event(&client, Some(since.clone()), is(EventKind::Started)).await;
    assert_eq!(started.generation, 1, "{started:?}");

    // The OOM killer ends it; the kubelet restarts it.
    write_status(
        &cluster,
        &pod,
        runner_status(
            1,
            json!({"running": {"startedAt": "2026-01-01T00:02:01Z"}}),
            json!({"terminated": {"exitCode": 137, "reason": "OOMKilled",
                   "startedAt": "2026-01-01T00:01:00Z", "finishedAt": "2026-01-01T00:02:00Z",
                   "containerID": "containerd://0123abcd"}}),
        ),
    )
    .await;
    let (exited, before) =
        wait_for_event(&client, Some(since.clone()), is(EventKind::Exited)).await;
    let exit = exited.exit.expect("an exited event carries its exit");
    assert_eq!(
        exit.reason,
        ExitReason::OutOfMemory { limit_bytes: None },
        "{exited:?}"
    );
    assert!(exit.oom_killed);
    assert_eq!(exit.code, Some(137));
    // Started again after the kill: a second started, after the exit.
    let (restarted, between) =
        wait_for_event(&client, Some(exited.cursor.clone()), is(EventKind::Started)).await;
    assert!(
        between.iter().all(|event| event.kind != EventKind::Exited),
        "{between:?}"
    );
    assert_eq!(
        before
            .iter()
            .filter(|event| event.kind == EventKind::Started)
            .count(),
        1,
        "{before:?}"
    );

    // The runner then exits 3 by itself (the kubelet's `Error`): an exit with its code.
    write_status(
        &cluster,
        &pod,
        runner_status(
            1,
            json!({"terminated": {"exitCode": 3, "reason": "Error",
                   "startedAt": "2026-01-01T00:02:01Z", "finishedAt": "2026-01-01T00:03:00Z",
                   "containerID": "containerd://4567cdef"}}),
            json!({"terminated": {"exitCode": 137, "reason": "OOMKilled",
                   "startedAt": "2026-01-01T00:01:00Z", "finishedAt": "2026-01-01T00:02:00Z",
                   "containerID": "containerd://0123abcd"}}),
        ),
    )
    .await;
    let (exited_3, between) =
        wait_for_event(&client, Some(restarted.cursor), is(EventKind::Exited)).await;
    let exit = exited_3.exit.expect("an exited event carries its exit");
    assert_eq!(exit.reason, ExitReason::Exited { code: 3 }, "{exited_3:?}");
    assert_eq!(exit.code, Some(3));
    assert!(!exit.oom_killed);
    assert!(
        between.iter().all(|event| event.id != id),
        "the OOM kill is not announced twice: {between:?}"
    );

    client.deprovision_session_sandbox(id).await.unwrap();
    let (gone, _) = wait_for_event(&client, Some(since), is(EventKind::Deprovisioned)).await;
    assert_eq!(gone.generation, 1, "{gone:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restarted_daemon_adopts_what_the_cluster_holds_and_sees_what_changed_meanwhile() {
    let cluster = TestCluster::start("events-adopt").await;
    let mut daemon = TestDaemon::start(cluster.daemon_options(""));
    let client = daemon.client().await;
    let kept = client
        .ensure_session_sandbox("ses-kept", &sandbox_env("session:kept", ""))
        .await
        .unwrap();
    daemon.stop();
    daemon.launch();
    daemon.wait_ready();
    let client = daemon.client().await;
    let (adopted, _) = wait_for_event(&client, None, |event| {
        event.kind == EventKind::Adopted && event.id == "ses-kept"
    })
    .await;
    assert_eq!(
        (adopted.uid.as_str(), adopted.generation),
        (kept.uid.as_str(), 1)
    );
    cluster.wait_for_watches(&daemon).await;
    // The adopted sandbox's runner starting is announced with the uid it kept.
    let pod = the_pod(&cluster, "session", "ses-kept").await;
    let since = events_now(&client).await;
    write_status(
        &cluster,
        &pod,
        runner_status(
            0,
            json!({"running": {"startedAt": "2026-01-01T00:01:00Z"}}),
            json!({}),
        ),
    )
    .await;
    let (started, seen) = wait_for_event(&client, Some(since), |event| {
        event.kind == EventKind::Started && event.id == "ses-kept"
    })
    .await;
    assert_eq!(started.uid, kept.uid);
    assert!(seen.is_empty(), "{seen:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_watch_the_api_server_expires_is_relisted_and_misses_nothing() {
    let cluster = TestCluster::start("events-expired").await;
    let daemon = TestDaemon::start(cluster.daemon_options(""));
    let client = daemon.client().await;
    cluster.wait_for_watches(&daemon).await;
    let Some(standin) = cluster.standin("expiring a watch (etcd's compaction)") else {
        return;
    };
    let since = events_now(&client).await;
    standin.expire_watches();
    let relisted = eventually(Duration::from_secs(60), || {
        let text = daemon.log_text();
        async move {
            text.contains("deployments watch's version is too old; listing again")
                && text.contains("pods watch's version is too old; listing again")
        }
    })
    .await;
    assert!(
        relisted,
        "the daemon did not list again after 410: {}",
        daemon.log_text()
    );
    let made = client
        .ensure_session_sandbox("ses-after", &sandbox_env("session:after", ""))
        .await
        .unwrap();
    let (created, seen) = wait_for_event(&client, Some(since), |event| {
        event.kind == EventKind::Created && event.id == "ses-after"
    })
    .await;
    assert_eq!(created.uid, made.uid);
    assert!(seen.is_empty(), "nothing else happened: {seen:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn logs_of_a_pending_pod_say_why_it_waits_and_exit_1() {
    let cluster = TestCluster::start("logs-pending").await;
    let daemon = TestDaemon::start(cluster.daemon_options(""));
    let client = daemon.client().await;
    let id = "ses-pending";
    client
        .ensure_session_sandbox(id, &sandbox_env("session:pending", "tok-pending"))
        .await
        .unwrap();
    // Pending, as every pod is without a scheduler and a kubelet.
    let pod = the_pod(&cluster, "session", id).await;
    let output = daemon.sandboxctl(&["logs", "session", id]);
    let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
    assert_eq!(output.status.code(), Some(1), "{output:?}");
    assert!(
        stderr.contains(&format!("pod {pod} is Pending: ")),
        "{stderr}"
    );
    // The scheduler's word, as an event about the pod: the newest warning is named.
    let events: Api<k8s_openapi::api::core::v1::Event> = cluster.api();
    let event: k8s_openapi::api::core::v1::Event = serde_json::from_value(json!({
        "metadata": {"name": format!("{pod}.sched"), "namespace": cluster.namespace},
        "involvedObject": {"kind": "Pod", "name": pod, "namespace": cluster.namespace, "apiVersion": "v1"},
        "reason": "FailedScheduling", "type": "Warning",
        "message": "0/3 nodes are available: 3 Insufficient memory.",
        "firstTimestamp": "2026-01-01T00:00:00Z", "lastTimestamp": "2026-01-01T00:00:00Z",
        "source": {"component": "default-scheduler"},
    }))
    .unwrap();
    events
        .create(&kube::api::PostParams::default(), &event)
        .await
        .expect("create the scheduler's event");
    let output = daemon.sandboxctl(&["logs", "session", id]);
    let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
    assert_eq!(output.status.code(), Some(1), "{output:?}");
    assert!(
        stderr.contains(
            "newest warning: FailedScheduling: 0/3 nodes are available: 3 Insufficient memory."
        ),
        "{stderr}"
    );
    assert!(!stderr.contains("tok-pending"), "{stderr}");
    // `describe` says the same (why a pod is Pending).
    let info = client.describe(Scope::Session, id).await.unwrap();
    let pending = info
        .cluster
        .and_then(|cluster| cluster.pending_reason)
        .expect("describe says why the pod is Pending");
    assert!(
        pending.contains("FailedScheduling: 0/3 nodes are available"),
        "{pending}"
    );
    let output = daemon.sandboxctl(&["describe", "session", id]);
    let text = String::from_utf8_lossy(&output.stdout).into_owned();
    assert!(
        text.contains("pending:") && text.contains("FailedScheduling"),
        "{text}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn logs_follow_ends_with_the_generation_it_follows_naming_how() {
    let cluster = TestCluster::start("logs-follow-end").await;
    let daemon = TestDaemon::start(cluster.daemon_options(""));
    let client = daemon.client().await;
    let id = "ses-follow";
    client
        .ensure_session_sandbox(id, &sandbox_env("session:follow", ""))
        .await
        .unwrap();
    // The pod's output needs a kubelet: the stand-in's inserted pod has some.
    let Some(standin) = cluster.standin("a pod with output (no kubelet)") else {
        return;
    };
    let pod = format!("{}-pod-out", base_name(Scope::Session, id));
    standin.insert_pod(
        &cluster.namespace,
        json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": pod, "labels": {
                "stigmer.ai/managed-by": "stigmer-server",
                "stigmer.ai/scope": "session", "stigmer.ai/sandbox-id": id,
            }},
            "spec": {"containers": [{"name": "runner", "image": sandboxd_tests::k8s::TEST_IMAGE}]},
            "status": runner_status(0, json!({"running": {"startedAt": "2026-01-01T00:01:00Z"}}), json!({})),
        }),
        b"one\ntwo\n",
    );
    // It exits 3: a follower reads it all, then ends, saying how.
    write_status(
        &cluster,
        &pod,
        runner_status(
            0,
            json!({"terminated": {"exitCode": 3, "reason": "Error",
                   "startedAt": "2026-01-01T00:01:00Z", "finishedAt": "2026-01-01T00:02:00Z"}}),
            json!({}),
        ),
    )
    .await;
    let output = daemon.sandboxctl(&["logs", "--follow", "session", id]);
    let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
    assert!(output.status.success(), "{output:?}");
    assert_eq!(output.stdout, b"one\ntwo\n");
    assert!(
        stderr.contains("generation 1: the runner exited (code 3); its output ends here"),
        "{stderr}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_queue_changed_within_a_generation_is_a_changed_event() {
    let cluster = TestCluster::start("events-changed").await;
    let daemon = TestDaemon::start(cluster.daemon_options(""));
    let client = daemon.client().await;
    cluster.wait_for_watches(&daemon).await;
    let id = "ses-changed";
    let made = client
        .ensure_session_sandbox(id, &sandbox_env("session:one", ""))
        .await
        .unwrap();
    let (created, _) = wait_for_event(&client, None, |event| {
        event.kind == EventKind::Created && event.id == id
    })
    .await;
    // Another writer (a second replica of the control plane's daemon, an
    // operator) moves the runner to another queue without a new generation.
    let deployments: Api<k8s_openapi::api::apps::v1::Deployment> = cluster.api();
    deployments
        .patch(
            &base_name(Scope::Session, id),
            &PatchParams::default(),
            &Patch::Merge(
                json!({"metadata": {"annotations": {"stigmer.ai/task-queue": "session:two"}}}),
            ),
        )
        .await
        .expect("patch the queue annotation");
    let (changed, between) = wait_for_event(&client, Some(created.cursor), |event| {
        event.kind == EventKind::Changed && event.id == id
    })
    .await;
    assert_eq!(
        (changed.uid.as_str(), changed.generation),
        (made.uid.as_str(), 1)
    );
    assert!(between.iter().all(|event| event.id != id), "{between:?}");
}

/// Now, as the API server writes times (RFC 3339, whole seconds).
fn now_as_kubernetes_time() -> serde_json::Value {
    let now =
        k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(k8s_openapi::jiff::Timestamp::now());
    serde_json::to_value(now).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn max_lifetime_stops_a_pod_that_ran_too_long_once_with_the_reason_lifetime() {
    let cluster = TestCluster::start("events-lifetime").await;
    // Sessions may run 3 s; workflows have no limit.
    let daemon =
        TestDaemon::start(cluster.daemon_options("[lifecycle.session]\nmax_lifetime = \"3s\"\n"));
    let client = daemon.client().await;
    cluster.wait_for_watches(&daemon).await;
    let since = events_now(&client).await;
    let (id, unlimited) = ("ses-lifetime", "wfl-unlimited");
    let ensured = client
        .ensure_session_sandbox(id, &sandbox_env("session:lifetime", "tok-l"))
        .await
        .unwrap();
    client
        .ensure_workflow_sandbox(unlimited, &sandbox_env("workflow:unlimited", "tok-u"))
        .await
        .unwrap();
    // The workflow's runner has run for most of a year: no limit, not stopped.
    let old_pod = the_pod(&cluster, "workflow", unlimited).await;
    let mut old_status = runner_status(
        0,
        json!({"running": {"startedAt": "2026-01-01T00:01:00Z"}}),
        json!({}),
    );
    old_status["startTime"] = json!("2026-01-01T00:00:00Z");
    write_status(&cluster, &old_pod, old_status).await;
    // The session's starts now, and is stopped once it has run 3 s.
    let pod = the_pod(&cluster, "session", id).await;
    let started_at = now_as_kubernetes_time();
    let mut status = runner_status(0, json!({"running": {"startedAt": started_at}}), json!({}));
    status["startTime"] = started_at.clone();
    write_status(&cluster, &pod, status).await;
    let (exited, _) = wait_for_event(&client, Some(since.clone()), |event| {
        event.kind == EventKind::Exited && event.id == id
    })
    .await;
    let exit = exited.exit.expect("an exited event carries its exit");
    assert_eq!(exit.reason, ExitReason::Lifetime, "{exited:?}");
    assert_eq!(
        (exited.uid.as_str(), exited.generation),
        (ensured.uid.as_str(), 1)
    );
    assert_eq!(
        client.probe(Scope::Session, id).await.unwrap(),
        sandboxd_client::ProbeState::Stopped
    );
    let described = client.describe(Scope::Session, id).await.unwrap();
    assert_eq!(
        described.last_exit.map(|exit| exit.reason),
        Some(ExitReason::Lifetime),
        "{described:?}"
    );
    let text = String::from_utf8_lossy(&daemon.sandboxctl(&["describe", "session", id]).stdout)
        .into_owned();
    assert!(text.contains("stopped: lifetime"), "{text}");
    assert!(
        daemon
            .log_text()
            .contains("stopped the sandbox at its max_lifetime"),
        "{}",
        daemon.log_text()
    );

    // The pod's SIGTERM'd end that follows (the kubelet's report; no
    // kubelet here, so the stand-in's test writes it, then removes the pod
    // as the ReplicaSet controller would) is not a second exit.
    if cluster.standin_quietly().is_some() {
        write_status(
            &cluster,
            &pod,
            runner_status(
                0,
                json!({"terminated": {"exitCode": 143, "reason": "Error",
                       "startedAt": started_at, "finishedAt": now_as_kubernetes_time(),
                       "containerID": "containerd://89abcdef"}}),
                json!({}),
            ),
        )
        .await;
        let pods: Api<Pod> = cluster.api();
        pods.delete(&pod, &Default::default())
            .await
            .expect("delete the stopped pod");
    }
    // The next ensure starts generation 2, a new pod; its start is the
    // barrier after which nothing of generation 1 can still come.
    let again = client
        .ensure_session_sandbox(id, &sandbox_env("session:lifetime", "tok-l"))
        .await
        .unwrap();
    assert!(again.created, "{again:?}");
    assert_eq!(again.generation, 2);
    let next_pod = the_pod_besides(&cluster, "session", id, Some(&pod)).await;
    let started_at = now_as_kubernetes_time();
    let mut status = runner_status(0, json!({"running": {"startedAt": started_at}}), json!({}));
    status["startTime"] = started_at;
    write_status(&cluster, &next_pod, status).await;
    let (_, between) = wait_for_event(&client, Some(exited.cursor.clone()), |event| {
        event.kind == EventKind::Started && event.id == id
    })
    .await;
    assert!(
        between
            .iter()
            .all(|event| !(event.id == id && event.kind == EventKind::Exited)),
        "generation 1's end is announced once: {between:?}"
    );
    // Every tick since saw the year-old workflow runner: it still runs.
    assert_eq!(
        client.probe(Scope::Workflow, unlimited).await.unwrap(),
        sandboxd_client::ProbeState::Running
    );
    let (_, all) = wait_for_event(&client, Some(since), |event| {
        event.kind == EventKind::Started && event.id == id && event.generation == 2
    })
    .await;
    assert!(
        all.iter()
            .all(|event| !(event.id == unlimited && event.kind == EventKind::Exited)),
        "{all:?}"
    );
}
