//! Commands and file calls on a kubernetes-tier sandbox whose pod no
//! kubelet runs, as a user meets them: a clear refusal at once naming
//! why, never a hang or an API server's bare 4xx. Three ways: the pod is
//! Pending (nothing placed it on a node: a control plane without a
//! scheduler or a kubelet leaves every pod so); it is reported Running
//! but has no node (the API server refuses its exec: `does not have a
//! host assigned`); and, on a real API server only (the stand-in has no
//! nodes), it is on a Node whose kubelet does not answer. On the stand-in
//! the pod is inserted as the controllers would make it; on a real
//! cluster it is the ReplicaSet controller's, and its status is written
//! through the `status` subresource as a kubelet would.

use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use sandboxd_client::{ClientError, SandboxError, Scope};
use sandboxd_protocol::naming::base_name;
use sandboxd_tests::commands::request;
use sandboxd_tests::sandbox_env;
use serde_json::json;

use crate::kubernetes_commands::{setup, Setup};

/// The sandbox's pod, Pending with no node: inserted on the stand-in, the
/// ReplicaSet controller's (waited for) on a real cluster.
async fn pending_pod(setup: &Setup, id: &str) -> String {
    if let Some(standin) = setup.cluster.standin_quietly() {
        let name = format!("{}-pod", base_name(Scope::Session, id));
        let pod = json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "labels": {
                "stigmer.ai/managed-by": "stigmer-server",
                "stigmer.ai/scope": "session",
                "stigmer.ai/sandbox-id": id,
            }},
            "spec": {"containers": [{"name": "runner", "image": sandboxd_tests::k8s::TEST_IMAGE}]},
            "status": {"phase": "Pending"},
        });
        standin.insert_pod(&setup.cluster.namespace, pod, b"");
        return name;
    }
    let made = sandboxd_tests::eventually(Duration::from_secs(60), || async {
        let info = setup.client.describe(Scope::Session, id).await.unwrap();
        info.container_id.is_some()
    })
    .await;
    assert!(made, "the ReplicaSet controller made no pod for {id}");
    let info = setup.client.describe(Scope::Session, id).await.unwrap();
    info.container_id.expect("the pod's name")
}

fn refusal<T: std::fmt::Debug>(result: Result<T, ClientError>) -> SandboxError {
    match result {
        Err(ClientError::Sandbox(error)) => error,
        other => panic!("expected the daemon's refusal, got {other:?}"),
    }
}

/// `sandboxctl args` fails within a few seconds, saying all of `words`.
fn sandboxctl_refuses(setup: &Setup, args: &[&str], words: &[&str]) {
    let began = Instant::now();
    let output = setup.daemon.sandboxctl(args);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(!output.status.success(), "sandboxctl {args:?}: {output:?}");
    for word in words {
        assert!(stderr.contains(word), "sandboxctl {args:?}: {stderr}");
    }
    assert!(
        began.elapsed() < Duration::from_secs(30),
        "sandboxctl {args:?} took {:?}",
        began.elapsed()
    );
}

/// On a sandbox whose pod is Pending: a command and each file call are
/// refused at once (`failed precondition`) naming the pod, that it is
/// Pending and that no node is assigned, through the client and through
/// `sandboxctl`. The running-sandbox helper checks it too where it skips.
/// The pod's name.
pub(crate) async fn pending_is_refused(setup: &Setup, id: &str) -> String {
    let pod = pending_pod(setup, id).await;
    let pending = format!("its pod {pod} is Pending");
    let words = [pending.as_str(), "no node"];
    let precondition = |error: &SandboxError| matches!(error, SandboxError::FailedPrecondition(_));
    refused_naming(setup, id, precondition, &words).await;
    sandboxctl_refuses(setup, &["exec", "session", id, "--", "true"], &words);
    sandboxctl_refuses(setup, &["ls", "session", id], &words);
    let target = format!("session:{id}:x");
    sandboxctl_refuses(setup, &["cp", "/etc/hostname", &target], &words);
    pod
}

/// Writes the runner container's status as a kubelet would: running.
async fn report_running(setup: &Setup, pod: &str) {
    let pods: Api<Pod> = setup.cluster.api();
    let status = json!({"status": {
        "phase": "Running",
        "containerStatuses": [{
            "name": "runner", "image": sandboxd_tests::k8s::TEST_IMAGE, "imageID": "",
            "ready": true, "restartCount": 0,
            "state": {"running": {"startedAt": "2026-01-01T00:01:00Z"}},
        }],
    }});
    pods.patch_status(pod, &PatchParams::default(), &Patch::Merge(status))
        .await
        .unwrap_or_else(|error| panic!("write the status of pod {pod}: {error}"));
}

/// A command and a file call on `id` are refused naming all of `words`
/// with an error `kind` accepts.
async fn refused_naming(setup: &Setup, id: &str, kind: fn(&SandboxError) -> bool, words: &[&str]) {
    let exec = refusal(
        setup
            .client
            .exec(Scope::Session, id, &request(&["true"]))
            .await,
    );
    let listed = refusal(setup.client.list_files(Scope::Session, id, "").await);
    for error in [&exec, &listed] {
        let text = error.to_string();
        assert!(
            kind(error) && words.iter().all(|word| text.contains(word)),
            "{error:?}"
        );
        assert!(!text.contains("tok-nokubelet"), "{text}");
    }
    assert!(setup
        .client
        .commands(Scope::Session, id)
        .await
        .unwrap()
        .is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pod_no_kubelet_runs_refuses_commands_and_files_naming_why() {
    let setup = setup("no-kubelet").await;
    if setup.cluster.standin_quietly().is_none() && setup.cluster.no_kubelet().await.is_none() {
        sandboxd_tests::k8s::skipped(&format!(
            "on {}: this test needs pods no kubelet runs, and the cluster has a Ready node",
            setup.cluster.description
        ));
        return;
    }
    let id = "k-nokubelet";
    setup
        .client
        .ensure_session_sandbox(id, &sandbox_env("session:nokubelet", "tok-nokubelet"))
        .await
        .expect("ensure");
    let pod = pending_is_refused(&setup, id).await;

    // Reported running, but on no node: the API server has no kubelet to
    // send the exec to.
    report_running(&setup, &pod).await;
    let failed = |e: &SandboxError| matches!(e, SandboxError::FailedPrecondition(_));
    refused_naming(&setup, id, failed, &[&pod, "no node", "no kubelet"]).await;

    // On a Node whose kubelet does not answer.
    if setup.cluster.standin_quietly().is_some() {
        sandboxd_tests::k8s::skipped(&format!(
            "part of {}: a Node whose kubelet does not answer needs a real API server (the \
             stand-in has no nodes)",
            "kubernetes_no_kubelet::a_pod_no_kubelet_runs_refuses_commands_and_files_naming_why"
        ));
        return;
    }
    let node = DeadNode::create(&setup).await;
    bind(&setup, &pod, &node.name).await;
    report_running(&setup, &pod).await;
    let unavailable = |e: &SandboxError| matches!(e, SandboxError::Unavailable(_));
    let on = format!("node {}", node.name);
    refused_naming(&setup, id, unavailable, &[&pod, &on, "no kubelet answered"]).await;
    let words = [pod.as_str(), on.as_str(), "no kubelet answered"];
    sandboxctl_refuses(&setup, &["exec", "session", id, "--", "true"], &words);
    // The API server quotes the kubelet's exec URL, argv and environment
    // in its query: none of it is shown.
    let mut secret = request(&["echo", "argv-secret-1"]);
    secret.env = vec![("K".into(), "env-secret-2".into())];
    let error = refusal(setup.client.exec(Scope::Session, id, &secret).await);
    let text = error.to_string();
    assert!(
        text.contains("no kubelet answered") && !text.contains("secret-"),
        "{text}"
    );
}

/// Places `pod` on `node`, as a scheduler does (the `binding` subresource).
async fn bind(setup: &Setup, pod: &str, node: &str) {
    let pods: Api<Pod> = setup.cluster.api();
    let binding = json!({
        "apiVersion": "v1", "kind": "Binding",
        "metadata": {"name": pod},
        "target": {"apiVersion": "v1", "kind": "Node", "name": node},
    });
    pods.create_subresource::<_, serde_json::Value>(
        "binding",
        pod,
        &PostParams::default(),
        &binding,
    )
    .await
    .unwrap_or_else(|error| panic!("bind pod {pod} to node {node}: {error}"));
}

/// A Node of this test whose kubelet endpoint is a loopback port nothing
/// listens on (one this test bound and let go); deleted when dropped, and
/// the pods on it at once (a pod on a node waits for its kubelet to say
/// it ended, which no kubelet here ever does).
struct DeadNode {
    name: String,
    client: kube::Client,
}

impl DeadNode {
    async fn create(setup: &Setup) -> DeadNode {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|listener| listener.local_addr())
            .expect("a loopback port")
            .port();
        let name = format!("{}-node", setup.cluster.namespace);
        let nodes: Api<Node> = Api::all(setup.cluster.admin.clone());
        let node: Node = serde_json::from_value(json!({
            "apiVersion": "v1", "kind": "Node", "metadata": {"name": name},
        }))
        .unwrap();
        nodes
            .create(&PostParams::default(), &node)
            .await
            .unwrap_or_else(|error| panic!("create node {name}: {error}"));
        let dead = DeadNode {
            name: name.clone(),
            client: setup.cluster.admin.clone(),
        };
        let status = json!({"status": {
            "addresses": [{"type": "InternalIP", "address": "127.0.0.1"}],
            "daemonEndpoints": {"kubeletEndpoint": {"Port": port}},
        }});
        nodes
            .patch_status(&name, &PatchParams::default(), &Patch::Merge(status))
            .await
            .unwrap_or_else(|error| panic!("write the status of node {name}: {error}"));
        dead
    }
}

impl Drop for DeadNode {
    fn drop(&mut self) {
        let (client, name) = (self.client.clone(), self.name.clone());
        sandboxd_tests::k8s::clean_up_from_drop(async move {
            let pods: Api<Pod> = Api::all(client.clone());
            let on = ListParams::default().fields(&format!("spec.nodeName={name}"));
            let now = DeleteParams::default().grace_period(0);
            for pod in pods
                .list(&on)
                .await
                .map(|list| list.items)
                .unwrap_or_default()
            {
                let namespace = pod.metadata.namespace.unwrap_or_default();
                let pod_name = pod.metadata.name.unwrap_or_default();
                let pods: Api<Pod> = Api::namespaced(client.clone(), &namespace);
                let _ = pods.delete(&pod_name, &now).await;
            }
            let nodes: Api<Node> = Api::all(client);
            let _ = nodes.delete(&name, &DeleteParams::default()).await;
        });
    }
}
