//! `describe` and `logs` of a kubernetes sandbox, read from its pod (one
//! the test inserts on the stand-in, the ReplicaSet controller's pending
//! one on a real cluster), and never showing the sandbox's token.

use std::time::Duration;

use sandboxd_client::{ClientError, ClusterState, LogStart, SandboxError, Scope};
use sandboxd_protocol::naming::base_name;
use sandboxd_tests::{eventually, sandbox_env};
use serde_json::{json, Value};

use crate::kubernetes_support::{labels_of, setup, Setup, TOKEN};

/// A pod of the sandbox's Deployment, as its ReplicaSet and the kubelet
/// would make it, whose runner was OOM-killed once and runs again.
fn runner_pod(id: &str, scope: &str, name: &str) -> Value {
    json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "labels": labels_of(id, scope), "creationTimestamp": "2026-01-01T00:00:00Z"},
        "spec": {"containers": [{"name": "runner", "image": sandboxd_tests::k8s::TEST_IMAGE}]},
        "status": {"phase": "Running", "containerStatuses": [{
            "name": "runner", "image": sandboxd_tests::k8s::TEST_IMAGE, "imageID": "", "ready": true,
            "restartCount": 1,
            "state": {"running": {"startedAt": "2026-01-01T00:01:00Z"}},
            "lastState": {"terminated": {"exitCode": 137, "reason": "OOMKilled", "finishedAt": "2026-01-01T00:00:59Z"}},
        }]},
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn describe_and_logs_read_the_pod_and_never_show_the_token() {
    let setup = setup("describe-logs", "").await;
    let id = "ses-logs";
    setup
        .client
        .ensure_session_sandbox(id, &sandbox_env("session:l", TOKEN))
        .await
        .unwrap();
    // A real cluster's controller manager makes the pod at once, so "no
    // pod yet" is only certain on the stand-in (which runs no controllers),
    // and a pod with output needs a kubelet: on a real cluster without one
    // the ReplicaSet controller's pod stays Pending, and describe and logs
    // say so, never showing the token either.
    let Some(standin) = setup
        .cluster
        .standin("a pod with output (no kubelet; its Pending pod is checked instead)")
    else {
        describe_and_logs_of_the_controllers_pending_pod(&setup, id).await;
        return;
    };
    let no_pod = setup
        .client
        .logs(Scope::Session, id, LogStart::Beginning, 1024)
        .await;
    match &no_pod {
        Err(ClientError::Sandbox(SandboxError::FailedPrecondition(message))) => {
            assert!(
                message.contains(id) && message.contains("no pod"),
                "{message}"
            )
        }
        other => panic!("logs with no pod: {other:?}"),
    }
    let before_pod = setup.client.describe(Scope::Session, id).await.unwrap();
    assert_eq!(
        before_pod.cluster,
        Some(ClusterState {
            desired_replicas: 1,
            ready_replicas: 0,
            pod_phase: None,
            last_termination_reason: None,
            pending_reason: None,
        })
    );
    let pod_name = format!("{}-7d9f-abcde", base_name(Scope::Session, id));
    standin.insert_pod(
        &setup.cluster.namespace,
        runner_pod(id, "session", &pod_name),
        b"line 1\nline 2\nline 3\n",
    );
    let info = setup.client.describe(Scope::Session, id).await.unwrap();
    assert_eq!(info.container_id.as_deref(), Some(pod_name.as_str()));
    assert_eq!(info.image.as_deref(), Some(sandboxd_tests::k8s::TEST_IMAGE));
    assert_eq!(info.restarts, 1, "the container's restart");
    let exit = info.last_exit.expect("the last termination");
    assert!(exit.oom_killed && exit.code == Some(137), "{exit:?}");
    assert_eq!(
        exit.reason,
        sandboxd_client::ExitReason::OutOfMemory { limit_bytes: None },
        "the pod's lastState.terminated says OOMKilled"
    );
    assert!(info.started_at_unix_ms.is_some());
    // No controller on the stand-in updates the Deployment's status: 0 ready.
    assert_eq!(
        info.cluster,
        Some(ClusterState {
            desired_replicas: 1,
            ready_replicas: 0,
            pod_phase: Some("Running".to_string()),
            last_termination_reason: Some("OOMKilled".to_string()),
            pending_reason: None,
        })
    );
    let text = setup.daemon.sandboxctl(&["describe", "session", id]);
    let text = String::from_utf8_lossy(&text.stdout).into_owned();
    assert!(
        text.contains("1 desired, 0 ready") && text.contains("Running, last terminated: OOMKilled"),
        "{text}"
    );
    // No metrics API to ask: no figures, and a running one says so.
    assert_eq!(info.usage, None, "figures on the kubernetes tier");
    assert_eq!(
        text.lines().any(
            |line| line.starts_with("figures:") && line.ends_with("not available on this tier")
        ),
        info.state == sandboxd_client::ProbeState::Running,
        "{text}"
    );
    let json_text = setup
        .daemon
        .sandboxctl(&["--json", "describe", "session", id]);
    let described: Value = serde_json::from_slice(&json_text.stdout).expect("describe --json");
    assert_eq!(described["cluster"]["pod_phase"], "Running", "{described}");
    assert_eq!(described["cluster"]["desired_replicas"], 1, "{described}");
    let all = setup
        .client
        .logs(Scope::Session, id, LogStart::Beginning, 1024)
        .await
        .unwrap();
    assert_eq!(all.data, b"line 1\nline 2\nline 3\n");
    assert!(all.at_end && !all.gap);
    let first = setup
        .client
        .logs(Scope::Session, id, LogStart::Beginning, 7)
        .await
        .unwrap();
    assert_eq!(first.data, b"line 1\n");
    assert!(!first.at_end);
    let rest = setup
        .client
        .logs(Scope::Session, id, LogStart::After(first.next), 1024)
        .await
        .unwrap();
    assert_eq!(rest.data, b"line 2\nline 3\n");
    let tail = setup
        .client
        .logs(Scope::Session, id, LogStart::Tail { lines: 1 }, 1024)
        .await
        .unwrap();
    assert_eq!(tail.data, b"line 3\n");

    // The token: never in the Deployment, list, describe, logs, or the daemon's log.
    let deployment = setup
        .deployment(Scope::Session, id)
        .await
        .unwrap()
        .to_string();
    assert!(!deployment.contains(TOKEN));
    let listed = format!("{:?}", setup.client.list(None).await.unwrap());
    assert!(!listed.contains(TOKEN) && listed.contains(id));
    assert!(!format!("{info:?}").contains(TOKEN));
    for args in [
        ["describe", "session", id].as_slice(),
        ["list"].as_slice(),
        ["logs", "session", id].as_slice(),
    ] {
        let output = setup.daemon.sandboxctl(args);
        let text = format!(
            "{}{}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        );
        assert!(!text.contains(TOKEN), "sandboxctl {args:?}: {text}");
    }
    assert!(!setup.daemon.log_text().contains(TOKEN));
}

/// On a real cluster with a controller manager and no kubelet: the
/// ReplicaSet controller's pod, waited for, is what describe names, and
/// it is Pending; `logs` says why instead of printing nothing (exit 1).
async fn describe_and_logs_of_the_controllers_pending_pod(setup: &Setup, id: &str) {
    let made = eventually(Duration::from_secs(60), || async {
        let info = setup.client.describe(Scope::Session, id).await.unwrap();
        info.container_id.is_some()
    })
    .await;
    assert!(made, "the ReplicaSet controller made no pod for {id}");
    let info = setup.client.describe(Scope::Session, id).await.unwrap();
    let pod = info.container_id.clone().expect("the pod's name");
    assert!(
        pod.starts_with(&format!("{}-", base_name(Scope::Session, id))),
        "{pod}"
    );
    let cluster = info.cluster.clone().expect("the cluster's facts");
    assert_eq!(cluster.desired_replicas, 1, "{cluster:?}");
    assert_eq!(cluster.ready_replicas, 0, "{cluster:?}");
    assert_eq!(cluster.pod_phase.as_deref(), Some("Pending"), "{cluster:?}");
    assert!(
        cluster
            .pending_reason
            .as_ref()
            .is_some_and(|why| !why.is_empty()),
        "{cluster:?}"
    );
    match setup
        .client
        .logs(Scope::Session, id, LogStart::Beginning, 1024)
        .await
    {
        Err(ClientError::Sandbox(SandboxError::FailedPrecondition(message))) => assert!(
            message.contains(&format!("pod {pod} is Pending: ")),
            "{message}"
        ),
        other => panic!("logs of a Pending pod: {other:?}"),
    }
    let output = setup.daemon.sandboxctl(&["logs", "session", id]);
    assert_eq!(output.status.code(), Some(1), "{output:?}");
    assert!(
        String::from_utf8_lossy(&output.stderr).contains(&format!("pod {pod} is Pending: ")),
        "{output:?}"
    );
    assert!(!format!("{info:?}").contains(TOKEN), "{info:?}");
    for args in [
        ["describe", "session", id].as_slice(),
        ["list"].as_slice(),
        ["logs", "session", id].as_slice(),
    ] {
        let output = setup.daemon.sandboxctl(args);
        let text = format!(
            "{}{}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        );
        assert!(!text.contains(TOKEN), "sandboxctl {args:?}: {text}");
    }
    assert!(!setup.daemon.log_text().contains(TOKEN));
}
