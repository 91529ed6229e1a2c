//! The kubernetes tier through the real `sandboxd --driver kubernetes`,
//! against the in-process STAND-IN API server (`sandboxd_tests::k8s_standin`),
//! or against a real cluster when `SANDBOXD_TEST_KUBECONFIG` names one
//! (each test in a namespace of its own; each test prints which it used).
//! The test's own client looks at — and breaks — the objects from outside,
//! as an operator's kubectl would.

use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{PersistentVolumeClaim, Secret};
use k8s_openapi::api::networking::v1::NetworkPolicy;
use kube::api::{Api, DeleteParams, Patch, PatchParams};
use sandboxd_client::{
    ClientError, ClusterState, HealthVerdict, LogStart, ProbeState, SandboxEnv, SandboxError,
    SandboxdClient, Scope,
};
use sandboxd_protocol::naming::base_name;
use sandboxd_tests::k8s::TestCluster;
use sandboxd_tests::k8s_standin::Rule;
use sandboxd_tests::{eventually, sandbox_env, TestDaemon};
use serde_json::{json, Value};

const TOKEN: &str = "tok-k8s-secret-4f2a9c";

struct Setup {
    cluster: TestCluster,
    daemon: TestDaemon,
    client: SandboxdClient,
}

async fn setup(test: &str, kubernetes_toml: &str) -> Setup {
    let cluster = TestCluster::start(test).await;
    let daemon = TestDaemon::start(cluster.daemon_options(kubernetes_toml));
    let client = daemon.client().await;
    cluster.wait_for_watches(&daemon).await;
    Setup {
        cluster,
        daemon,
        client,
    }
}

fn labels_of(id: &str, scope: &str) -> Value {
    json!({
        "stigmer.ai/managed-by": "stigmer-server",
        "stigmer.ai/scope": scope,
        "stigmer.ai/sandbox-id": id,
    })
}

impl Setup {
    async fn get<K>(&self, name: &str) -> Option<Value>
    where
        K: kube::Resource<Scope = k8s_openapi::NamespaceResourceScope>
            + Clone
            + serde::de::DeserializeOwned
            + serde::Serialize
            + std::fmt::Debug,
        <K as kube::Resource>::DynamicType: Default,
    {
        let api: Api<K> = self.cluster.api();
        api.get_opt(name)
            .await
            .unwrap_or_else(|error| panic!("get {name}: {error}"))
            .map(|object| serde_json::to_value(object).expect("json"))
    }

    async fn deployment(&self, scope: Scope, id: &str) -> Option<Value> {
        self.get::<Deployment>(&base_name(scope, id)).await
    }

    async fn secret(&self, scope: Scope, id: &str) -> Option<Value> {
        self.get::<Secret>(&format!("{}-env", base_name(scope, id)))
            .await
    }

    async fn claim(&self, scope: Scope, id: &str) -> Option<Value> {
        self.get::<PersistentVolumeClaim>(&format!("{}-workspace", base_name(scope, id)))
            .await
    }

    async fn policy(&self, scope: Scope, id: &str) -> Option<Value> {
        self.get::<NetworkPolicy>(&format!("{}-egress", base_name(scope, id)))
            .await
    }

    /// Scales the Deployment as `kubectl scale` does: through the scale
    /// subresource, as a manager of its own.
    async fn kubectl_scale(&self, scope: Scope, id: &str, replicas: i32) {
        let api: Api<Deployment> = self.cluster.api();
        let params = PatchParams {
            field_manager: Some("kubectl".to_string()),
            ..PatchParams::default()
        };
        api.patch_scale(
            &base_name(scope, id),
            &params,
            &Patch::Merge(json!({"spec": {"replicas": replicas}})),
        )
        .await
        .expect("kubectl scale");
    }

    fn status_text(&self) -> String {
        let output = self.daemon.sandboxctl(&["status"]);
        assert!(output.status.success(), "{output:?}");
        String::from_utf8_lossy(&output.stdout).into_owned()
    }
}

fn resource_version(object: &Value) -> u64 {
    object["metadata"]["resourceVersion"]
        .as_str()
        .and_then(|rv| rv.parse().ok())
        .expect("a numeric resourceVersion (etcd's revision)")
}

/// What sandboxd itself wrote to an object: its `metadata.generation`
/// (which only spec writes bump) and sandboxd's own `managedFields` entries
/// (fields and time of its last apply or update). Unlike `resourceVersion`,
/// it stays put when a cluster's controllers write status, so "no write"
/// holds on a real cluster with a controller manager, not only on the
/// stand-in and a bare API server.
fn written_by_sandboxd(object: &Value) -> Value {
    let ours: Vec<Value> = object["metadata"]["managedFields"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|entry| entry["manager"] == "sandboxd")
        .cloned()
        .collect();
    assert!(!ours.is_empty(), "sandboxd manages fields of {object}");
    serde_json::json!({
        "generation": object["metadata"]["generation"],
        "managedFields": ours,
    })
}

fn env_vars(deployment: &Value) -> BTreeMap<String, Value> {
    deployment["spec"]["template"]["spec"]["containers"][0]["env"]
        .as_array()
        .expect("env")
        .iter()
        .map(|var| (var["name"].as_str().unwrap().to_string(), var.clone()))
        .collect()
}

fn applied_by_sandboxd(object: &Value) -> bool {
    object["metadata"]["managedFields"]
        .as_array()
        .is_some_and(|entries| {
            entries
                .iter()
                .any(|entry| entry["manager"] == "sandboxd" && entry["operation"] == "Apply")
        })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_three_objects_are_shaped_as_the_contract_says_and_made_in_order() {
    let setup = setup("shapes", "").await;
    let id = "ses-shapes";
    let report = setup
        .client
        .ensure_session_sandbox(id, &sandbox_env("session:ses-shapes", TOKEN))
        .await
        .expect("ensure");
    assert!(report.created, "{report:?}");
    assert_eq!((report.state, report.generation), (ProbeState::Running, 1));
    let base = base_name(Scope::Session, id);
    let labels = labels_of(id, "session");

    let secret = setup.secret(Scope::Session, id).await.expect("the Secret");
    assert_eq!(secret["metadata"]["labels"], labels);
    assert_eq!(secret["type"], "Opaque");
    let token_b64 = secret["data"]["STIGMER_TOKEN"]
        .as_str()
        .expect("the token key");
    let decoded: k8s_openapi::ByteString =
        serde_json::from_value(json!(token_b64)).expect("base64");
    assert_eq!(decoded.0, TOKEN.as_bytes());
    assert!(applied_by_sandboxd(&secret), "{secret}");

    let claim = setup.claim(Scope::Session, id).await.expect("the claim");
    assert_eq!(claim["metadata"]["labels"], labels);
    assert_eq!(claim["spec"]["accessModes"], json!(["ReadWriteOnce"]));
    assert_eq!(claim["spec"]["resources"]["requests"]["storage"], "10Gi");

    let deployment = setup
        .deployment(Scope::Session, id)
        .await
        .expect("the Deployment");
    assert_eq!(deployment["metadata"]["name"], base.as_str());
    assert_eq!(deployment["metadata"]["labels"], labels);
    assert!(applied_by_sandboxd(&deployment), "{deployment}");
    let spec = &deployment["spec"];
    assert_eq!(spec["replicas"], 1);
    assert_eq!(spec["strategy"]["type"], "Recreate");
    assert_eq!(spec["selector"]["matchLabels"], labels);
    assert_eq!(spec["template"]["metadata"]["labels"], labels);
    let pod = &spec["template"]["spec"];
    assert_eq!(pod["automountServiceAccountToken"], false);
    let containers = pod["containers"].as_array().expect("containers");
    assert_eq!(containers.len(), 1, "one runner container");
    let runner = &containers[0];
    assert_eq!(runner["image"], sandboxd_tests::k8s::TEST_IMAGE);
    assert_eq!(
        runner["resources"],
        json!({"requests": {"cpu": "500m", "memory": "512Mi"}, "limits": {"cpu": "2", "memory": "2Gi"}})
    );
    assert_eq!(runner["securityContext"]["allowPrivilegeEscalation"], false);
    assert_eq!(
        runner["securityContext"]["capabilities"]["drop"],
        json!(["ALL"])
    );
    assert_eq!(
        runner["volumeMounts"],
        json!([{"name": "workspace", "mountPath": "/workspace"}])
    );
    assert_eq!(
        pod["volumes"],
        json!([{"name": "workspace", "persistentVolumeClaim": {"claimName": format!("{base}-workspace")}}])
    );
    let env = env_vars(&deployment);
    let plain = |name: &str| env.get(name).map(|var| var["value"].clone());
    assert_eq!(plain("MODE"), Some(json!("local")));
    assert_eq!(
        plain("STIGMER_TASK_QUEUE"),
        Some(json!("session:ses-shapes"))
    );
    assert_eq!(plain("WORKSPACE_ROOT_DIR"), Some(json!("/workspace")));
    assert_eq!(
        plain("STIGMER_BACKEND_ENDPOINT"),
        Some(json!("http://backend.test:7080"))
    );
    assert!(
        !env.contains_key("TEMPORAL_SERVICE_ADDRESS"),
        "empty means unset"
    );
    assert_eq!(
        env["STIGMER_TOKEN"]["valueFrom"]["secretKeyRef"],
        json!({"name": format!("{base}-env"), "key": "STIGMER_TOKEN", "optional": false})
    );
    assert!(env["STIGMER_TOKEN"].get("value").is_none());

    // Made in the contract's order: etcd's revision orders them.
    assert!(resource_version(&secret) < resource_version(&claim));
    if let Some(standin) = setup.cluster.standin("the exact request sequence") {
        let writes: Vec<(String, String)> = standin
            .seen()
            .into_iter()
            .filter(|seen| {
                seen.user.contains("sandboxd")
                    && !["get", "list", "watch"].contains(&seen.verb.as_str())
            })
            .filter(|seen| seen.resource != "selfsubjectaccessreviews")
            .map(|seen| (seen.verb, seen.resource))
            .collect();
        let expected = [
            ("patch", "secrets"),
            ("create", "persistentvolumeclaims"),
            ("patch", "networkpolicies"),
            ("patch", "deployments"),
        ]
        .map(|(verb, resource)| (verb.to_string(), resource.to_string()));
        assert_eq!(writes, expected);
        assert!(resource_version(&claim) < resource_version(&deployment));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_running_sandbox_is_the_fast_path_of_one_get() {
    let setup = setup("fast-path", "").await;
    let env = sandbox_env("session:fast", TOKEN);
    setup
        .client
        .ensure_session_sandbox("fast", &env)
        .await
        .unwrap();
    let before = setup.deployment(Scope::Session, "fast").await.unwrap();
    if let Some(standin) = setup.cluster.standin("counting the requests") {
        standin.clear_seen();
    }
    let again = setup
        .client
        .ensure_session_sandbox("fast", &env)
        .await
        .unwrap();
    assert!(!again.created, "{again:?}");
    assert_eq!((again.state, again.generation), (ProbeState::Running, 1));
    // The incarnation's uid is the Deployment's metadata.uid, dashes dropped.
    let uid = before["metadata"]["uid"].as_str().unwrap().replace('-', "");
    assert_eq!(again.uid, uid);
    assert_eq!(uid.len(), 32, "{uid}");
    let after = setup.deployment(Scope::Session, "fast").await.unwrap();
    assert_eq!(
        written_by_sandboxd(&before),
        written_by_sandboxd(&after),
        "no write"
    );
    if let Some(standin) = setup.cluster.standin("counting the requests") {
        let daemon: Vec<_> = standin
            .seen()
            .into_iter()
            .filter(|seen| {
                seen.user.contains("sandboxd") && seen.resource != "selfsubjectaccessreviews"
            })
            .map(|seen| (seen.verb, seen.resource))
            .collect();
        assert_eq!(daemon, [("get".to_string(), "deployments".to_string())]);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scaled_to_zero_is_stopped_and_ensure_scales_the_same_deployment_back_with_the_new_token() {
    let setup = setup("scale-zero", "").await;
    let id = "ses-scale";
    setup
        .client
        .ensure_session_sandbox(id, &sandbox_env("session:one", TOKEN))
        .await
        .unwrap();
    let uid = setup.deployment(Scope::Session, id).await.unwrap()["metadata"]["uid"].clone();
    setup.kubectl_scale(Scope::Session, id, 0).await;
    assert_eq!(
        setup.client.probe(Scope::Session, id).await.unwrap(),
        ProbeState::Stopped
    );
    let stopped = setup.client.describe(Scope::Session, id).await.unwrap();
    assert_eq!(
        stopped.cluster.map(|cluster| cluster.desired_replicas),
        Some(0)
    );
    let report = setup
        .client
        .ensure_session_sandbox(id, &sandbox_env("session:two", "tok-new-77"))
        .await
        .expect("ensure of a stopped sandbox");
    assert!(report.created, "{report:?}");
    assert_eq!((report.state, report.generation), (ProbeState::Running, 2));
    let deployment = setup.deployment(Scope::Session, id).await.unwrap();
    assert_eq!(deployment["metadata"]["uid"], uid, "the same Deployment");
    assert_eq!(deployment["spec"]["replicas"], 1);
    assert_eq!(
        env_vars(&deployment)["STIGMER_TASK_QUEUE"]["value"],
        "session:two",
        "the new queue before the scale-up"
    );
    let secret = setup.secret(Scope::Session, id).await.unwrap();
    let token: k8s_openapi::ByteString =
        serde_json::from_value(secret["data"]["STIGMER_TOKEN"].clone()).unwrap();
    assert_eq!(token.0, b"tok-new-77", "the new token before the scale-up");
    assert_eq!(
        setup.client.probe(Scope::Session, id).await.unwrap(),
        ProbeState::Running
    );
    let describe = setup.client.describe(Scope::Session, id).await.unwrap();
    assert_eq!((describe.generation, describe.restarts), (2, 1));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pause_scales_to_zero_a_stop_and_resume_is_refused_for_ensure() {
    let setup = setup("pause-zero", "").await;
    let id = "ses-pause";
    setup
        .client
        .ensure_session_sandbox(id, &sandbox_env("session:one", TOKEN))
        .await
        .unwrap();
    let paused = setup.client.pause(Scope::Session, id).await.unwrap();
    assert!(
        paused.changed && paused.paused_since_unix_ms.is_none(),
        "{paused:?}"
    );
    assert_eq!(paused.generation, 1);
    assert_eq!(
        setup.deployment(Scope::Session, id).await.unwrap()["spec"]["replicas"],
        0
    );
    assert_eq!(
        setup.client.probe(Scope::Session, id).await.unwrap(),
        ProbeState::Stopped
    );
    let info = setup.client.describe(Scope::Session, id).await.unwrap();
    assert_eq!(
        info.paused_since_unix_ms, None,
        "a stop, never shown as paused"
    );
    assert!(
        !setup
            .client
            .pause(Scope::Session, id)
            .await
            .unwrap()
            .changed
    );
    let refused = setup.client.resume(Scope::Session, id).await.unwrap_err();
    assert!(
        refused.to_string().contains("a pause is a stop"),
        "{refused}"
    );
    let report = setup
        .client
        .ensure_session_sandbox(id, &sandbox_env("session:one", TOKEN))
        .await
        .unwrap();
    assert!(report.created && report.generation == 2, "{report:?}");
    let missing = setup
        .client
        .pause(Scope::Session, "ses-never")
        .await
        .unwrap_err();
    assert!(
        missing.to_string().contains("no running runner"),
        "{missing}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deployment_deleted_behind_the_daemons_back_is_absent_then_recreated_keeping_the_claim() {
    let setup = setup("deleted", "").await;
    let id = "wfx-deleted";
    let env = sandbox_env("wfexec:wfx-deleted", TOKEN);
    setup
        .client
        .ensure_workflow_sandbox(id, &env)
        .await
        .unwrap();
    let claim_uid = setup.claim(Scope::Workflow, id).await.unwrap()["metadata"]["uid"].clone();
    let old_uid = setup.deployment(Scope::Workflow, id).await.unwrap()["metadata"]["uid"].clone();
    let api: Api<Deployment> = setup.cluster.api();
    api.delete(&base_name(Scope::Workflow, id), &DeleteParams::default())
        .await
        .expect("kubectl delete deployment");
    assert!(
        eventually(Duration::from_secs(30), || async {
            setup.client.probe(Scope::Workflow, id).await.ok() == Some(ProbeState::Absent)
        })
        .await
    );
    let report = setup
        .client
        .ensure_workflow_sandbox(id, &env)
        .await
        .unwrap();
    assert!(report.created, "{report:?}");
    let new_uid = setup.deployment(Scope::Workflow, id).await.unwrap()["metadata"]["uid"].clone();
    assert_ne!(new_uid, old_uid, "a new Deployment");
    assert_eq!(
        setup.claim(Scope::Workflow, id).await.unwrap()["metadata"]["uid"],
        claim_uid,
        "the same claim: the workspace is kept"
    );
}

/// A Deployment someone deletes while a finalizer holds it (on a real
/// cluster `foregroundDeletion`, until the garbage collector has removed
/// its pods; here the test's own, so it lasts): stopped, and ensure waits
/// for it to go rather than answer for a sandbox about to vanish.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deployment_being_deleted_is_stopped_and_ensure_says_so_until_it_is_gone() {
    let setup = setup("deployment-terminating", "").await;
    let id = "ses-going";
    let env = sandbox_env("session:going", TOKEN);
    let made = setup.client.ensure_session_sandbox(id, &env).await.unwrap();
    let name = base_name(Scope::Session, id);
    let api: Api<Deployment> = setup.cluster.api();
    let hold = PatchParams {
        field_manager: Some("test-hold".to_string()),
        ..PatchParams::default()
    };
    api.patch(
        &name,
        &hold,
        &Patch::Merge(json!({"metadata": {"finalizers": ["test.sandboxd/hold"]}})),
    )
    .await
    .unwrap();
    api.delete(&name, &DeleteParams::default())
        .await
        .expect("kubectl delete deployment");
    let held = setup.deployment(Scope::Session, id).await.expect("held");
    assert!(held["metadata"]["deletionTimestamp"].is_string(), "{held}");
    assert_eq!(
        setup.client.probe(Scope::Session, id).await.unwrap(),
        ProbeState::Stopped
    );
    let refused = setup.client.ensure_session_sandbox(id, &env).await;
    match &refused {
        Err(ClientError::Sandbox(SandboxError::Unavailable(message))) => assert!(
            message.contains("still being deleted") && message.contains(&name),
            "{message}"
        ),
        other => panic!("ensure beside a Deployment being deleted: {other:?}"),
    }
    assert_eq!(
        written_by_sandboxd(&held),
        written_by_sandboxd(&setup.deployment(Scope::Session, id).await.unwrap()),
        "nothing written"
    );
    api.patch(
        &name,
        &hold,
        &Patch::Merge(json!({"metadata": {"finalizers": null}})),
    )
    .await
    .unwrap();
    assert!(
        eventually(Duration::from_secs(60), || async {
            setup.client.probe(Scope::Session, id).await.ok() == Some(ProbeState::Absent)
        })
        .await,
        "the Deployment goes once its finalizer does"
    );
    // Gone, by someone else's delete: the event stream says so, once.
    let (gone, before) = sandboxd_tests::events::wait_for_event(&setup.client, None, |event| {
        event.kind == sandboxd_client::EventKind::Deprovisioned && event.id == id
    })
    .await;
    assert_eq!((gone.uid.as_str(), gone.generation), (made.uid.as_str(), 1));
    assert!(
        before
            .iter()
            .all(|event| event.id != id || event.kind == sandboxd_client::EventKind::Created),
        "the held delete is no event of its own: {before:?}"
    );
    let again = setup.client.ensure_session_sandbox(id, &env).await.unwrap();
    assert!(again.created, "{again:?}");
    assert_ne!(again.uid, made.uid, "a new incarnation");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tokenless_sandbox_has_an_empty_secret_and_no_token_variable() {
    let setup = setup("tokenless", "").await;
    let id = "ses-tokenless";
    setup
        .client
        .ensure_session_sandbox(id, &sandbox_env("session:t", ""))
        .await
        .unwrap();
    let secret = setup
        .secret(Scope::Session, id)
        .await
        .expect("always created");
    assert!(
        secret
            .get("data")
            .is_none_or(|data| data.as_object().is_none_or(|d| d.is_empty())),
        "{secret}"
    );
    let deployment = setup.deployment(Scope::Session, id).await.unwrap();
    assert!(!env_vars(&deployment).contains_key("STIGMER_TOKEN"));
    // A token given later reaches the Secret on the next start, and a
    // token taken away leaves it again.
    setup.kubectl_scale(Scope::Session, id, 0).await;
    setup
        .client
        .ensure_session_sandbox(id, &sandbox_env("session:t", TOKEN))
        .await
        .unwrap();
    let deployment = setup.deployment(Scope::Session, id).await.unwrap();
    assert!(env_vars(&deployment).contains_key("STIGMER_TOKEN"));
    setup.kubectl_scale(Scope::Session, id, 0).await;
    setup
        .client
        .ensure_session_sandbox(id, &sandbox_env("session:t", ""))
        .await
        .unwrap();
    let secret = setup.secret(Scope::Session, id).await.unwrap();
    assert!(
        secret
            .get("data")
            .is_none_or(|data| data.as_object().is_none_or(|d| d.is_empty())),
        "the token is gone from the Secret: {secret}"
    );
    assert!(
        !env_vars(&setup.deployment(Scope::Session, id).await.unwrap())
            .contains_key("STIGMER_TOKEN")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_connect_sandbox_gets_an_empty_dir_and_no_claim() {
    let setup = setup("connect", "").await;
    let env = sandbox_env("session:c", TOKEN);
    let id = setup
        .client
        .create_connect_sandbox("req-connect", &env)
        .await
        .unwrap();
    let deployment = setup.deployment(Scope::Connect, &id).await.unwrap();
    assert_eq!(
        deployment["spec"]["template"]["spec"]["volumes"],
        json!([{"name": "workspace", "emptyDir": {}}])
    );
    assert_eq!(deployment["metadata"]["labels"], labels_of(&id, "connect"));
    assert!(setup.claim(Scope::Connect, &id).await.is_none());
    assert!(setup.secret(Scope::Connect, &id).await.is_some());
    let again = setup
        .client
        .create_connect_sandbox("req-connect", &env)
        .await;
    assert!(
        matches!(
            again,
            Err(ClientError::Sandbox(SandboxError::FailedPrecondition(_)))
        ),
        "not idempotent: {again:?}"
    );
    setup.client.deprovision_connect_sandbox(&id).await.unwrap();
    assert!(setup.deployment(Scope::Connect, &id).await.is_none());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deprovision_deletes_deployment_secret_claim_in_order_and_again_is_success() {
    let setup = setup("deprovision", "").await;
    let id = "ses-deprov";
    setup
        .client
        .ensure_session_sandbox(id, &sandbox_env("session:d", TOKEN))
        .await
        .unwrap();
    // Scale-down keeps everything, the claim included.
    setup.kubectl_scale(Scope::Session, id, 0).await;
    assert!(setup.claim(Scope::Session, id).await.is_some());
    if let Some(standin) = setup.cluster.standin("the order of the deletes") {
        standin.clear_seen();
    }
    let report = setup.client.deprovision_session_sandbox(id).await.unwrap();
    assert!(report.was_present, "{report:?}");
    assert!(setup.deployment(Scope::Session, id).await.is_none());
    assert!(setup.policy(Scope::Session, id).await.is_none());
    assert!(setup.secret(Scope::Session, id).await.is_none());
    // On a real cluster pvc-protection holds the claim until its controller
    // (the controller manager's) sees no scheduled pod using it: gone, or
    // on its way out, and gone within a deadline.
    let claim = setup.claim(Scope::Session, id).await;
    assert!(
        claim
            .as_ref()
            .is_none_or(|claim| claim["metadata"]["deletionTimestamp"].is_string()),
        "{claim:?}"
    );
    let finished = eventually(Duration::from_secs(60), || async {
        setup.claim(Scope::Session, id).await.is_none()
    })
    .await;
    assert!(
        finished,
        "the claim's deletion never finished: {:?}",
        setup.claim(Scope::Session, id).await
    );
    if let Some(standin) = setup.cluster.standin("the order of the deletes") {
        let deletes: Vec<String> = standin
            .seen()
            .into_iter()
            .filter(|seen| seen.verb == "delete")
            .map(|seen| seen.resource)
            .collect();
        assert_eq!(
            deletes,
            [
                "deployments",
                "networkpolicies",
                "secrets",
                "persistentvolumeclaims"
            ]
        );
    }
    let again = setup.client.deprovision_session_sandbox(id).await.unwrap();
    assert!(!again.was_present, "{again:?}");
    assert_eq!(
        setup.client.probe(Scope::Session, id).await.unwrap(),
        ProbeState::Absent
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restarted_daemon_lists_every_sandbox_from_the_cluster() {
    let mut setup = setup("restart-list", "").await;
    for id in ["ses-a", "ses-b"] {
        setup
            .client
            .ensure_session_sandbox(id, &sandbox_env(&format!("session:{id}"), TOKEN))
            .await
            .unwrap();
    }
    setup
        .client
        .ensure_workflow_sandbox("wfx-c", &sandbox_env("wfexec:wfx-c", TOKEN))
        .await
        .unwrap();
    setup.kubectl_scale(Scope::Session, "ses-b", 0).await;
    setup.daemon.stop();
    setup.daemon.launch();
    setup.daemon.wait_ready();
    let client = setup.daemon.client().await;
    let mut listed: Vec<(Scope, String, ProbeState)> = client
        .list(None)
        .await
        .unwrap()
        .into_iter()
        .map(|info| (info.scope, info.id, info.state))
        .collect();
    listed.sort_by(|a, b| (a.0, &a.1).cmp(&(b.0, &b.1)));
    assert_eq!(
        listed,
        [
            (Scope::Session, "ses-a".to_string(), ProbeState::Running),
            (Scope::Session, "ses-b".to_string(), ProbeState::Stopped),
            (Scope::Workflow, "wfx-c".to_string(), ProbeState::Running),
        ]
    );
    let workflows = client.list(Some(Scope::Workflow)).await.unwrap();
    assert_eq!(workflows.len(), 1);
    assert_eq!(workflows[0].task_queue, "wfexec:wfx-c");
    assert_eq!(workflows[0].caller_class, "user");
    setup.client = client;
}

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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn status_names_the_api_server_the_namespace_and_whether_permissions_suffice() {
    let setup = setup("status", "").await;
    let namespace = setup.cluster.namespace.clone();
    let mut text = String::new();
    let checked = eventually(Duration::from_secs(30), || {
        text = setup.status_text();
        let done = text.contains("permissions sufficient");
        async move { done }
    })
    .await;
    assert!(checked, "{text}");
    assert!(text.contains("kubernetes"), "{text}");
    assert!(text.contains(&namespace), "{text}");
    if let Some(standin) = setup.cluster.standin("the server's address") {
        assert!(text.contains(&standin.url()), "{text}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_role_without_deployments_scale_is_permission_denied_naming_it() {
    let mut cluster = TestCluster::start("forbidden-scale").await;
    let all_but_scale = vec![
        Rule::new(&["secrets"], &["create", "patch", "delete"]),
        Rule::new(&["persistentvolumeclaims"], &["get", "create", "delete"]),
        Rule::new(
            &["deployments"],
            &["get", "list", "watch", "create", "patch", "delete"],
        ),
        Rule::new(&["networkpolicies"], &["create", "patch", "delete"]),
        Rule::new(&["pods"], &["list", "watch"]),
        Rule::new(&["pods/log"], &["get"]),
        Rule::new(&["pods/exec"], &["create"]),
        Rule::new(&["events"], &["list"]),
    ];
    cluster.restrict(Some(all_but_scale)).await;
    let daemon = TestDaemon::start(cluster.daemon_options(""));
    let client = daemon.client().await;
    let mut text = String::new();
    let reviewed = eventually(Duration::from_secs(30), || {
        let output = daemon.sandboxctl(&["status"]);
        text = String::from_utf8_lossy(&output.stdout).into_owned();
        let done = text.contains("MISSING");
        async move { done }
    })
    .await;
    assert!(reviewed, "{text}");
    assert!(text.contains("patch deployments/scale"), "{text}");
    let env = sandbox_env("session:f", TOKEN);
    client
        .ensure_session_sandbox("ses-f", &env)
        .await
        .expect("creating needs no scale");
    let setup = Setup {
        cluster,
        daemon,
        client,
    };
    setup.kubectl_scale(Scope::Session, "ses-f", 0).await;
    let denied = setup.client.ensure_session_sandbox("ses-f", &env).await;
    match &denied {
        Err(ClientError::Sandbox(SandboxError::PermissionDenied(message))) => {
            assert!(message.contains("patch deployments/scale"), "{message}")
        }
        other => panic!("scale without the permission: {other:?}"),
    }
    // The daemon keeps serving.
    assert_eq!(
        setup.client.probe(Scope::Session, "ses-f").await.unwrap(),
        ProbeState::Stopped
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_api_server_that_is_down_is_unavailable_naming_it_and_the_daemon_keeps_serving() {
    let mut setup = setup("server-down", "").await;
    setup
        .client
        .ensure_session_sandbox("ses-up", &sandbox_env("session:u", TOKEN))
        .await
        .unwrap();
    let Some(standin) = setup.cluster.standin_mut() else {
        eprintln!("SKIPPED on a real cluster: stopping the API server needs the stand-in");
        return;
    };
    let url = standin.url();
    standin.stop();
    for result in [
        setup
            .client
            .ensure_session_sandbox("ses-up", &sandbox_env("session:u", TOKEN))
            .await
            .map(|_| ()),
        setup
            .client
            .probe(Scope::Session, "ses-up")
            .await
            .map(|_| ()),
        setup.client.list(None).await.map(|_| ()),
    ] {
        match result {
            Err(ClientError::Sandbox(SandboxError::Unavailable(message))) => {
                assert!(message.contains(&url), "names the server: {message}")
            }
            other => panic!("with the API server down: {other:?}"),
        }
    }
    let status = setup.client.status().await.expect("status still answers");
    assert_eq!(status.driver, "kubernetes");
    assert!(setup.daemon.is_running());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_missing_namespace_is_a_failed_precondition_naming_it() {
    let cluster = TestCluster::start("no-namespace").await;
    let mut options = cluster.daemon_options("");
    let missing = format!("{}-missing", cluster.namespace);
    options
        .env
        .push(("STIGMER_SANDBOX_K8S_NAMESPACE".to_string(), missing.clone()));
    let daemon = TestDaemon::start(options);
    let client = daemon.client().await;
    let result = client
        .ensure_session_sandbox("ses-nowhere", &sandbox_env("session:n", TOKEN))
        .await;
    match result {
        Err(ClientError::Sandbox(SandboxError::FailedPrecondition(message))) => {
            assert!(message.contains(&missing), "{message}")
        }
        other => panic!("ensure into a missing namespace: {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_id_that_is_no_label_value_is_an_invalid_argument_naming_the_field() {
    let setup = setup("bad-label", "").await;
    // Valid for sandboxd (bounded, no NUL, no '/'), too long for a label value (63).
    let id = &"s".repeat(80);
    let result = setup
        .client
        .ensure_session_sandbox(id, &sandbox_env("session:x", TOKEN))
        .await;
    match result {
        Err(ClientError::Sandbox(SandboxError::InvalidArgument(message))) => {
            assert!(message.contains("metadata.labels"), "{message}")
        }
        other => panic!("an id the API server refuses as a label: {other:?}"),
    }
    assert!(
        setup.secret(Scope::Session, id).await.is_none(),
        "nothing made"
    );
    assert!(setup.deployment(Scope::Session, id).await.is_none());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn leaked_connect_sandboxes_are_reaped_and_sessions_are_not() {
    let setup = setup(
        "reaper",
        "connect_ttl = \"2s\"\nconnect_creation_grace = \"1s\"",
    )
    .await;
    let env: SandboxEnv = sandbox_env("session:r", TOKEN);
    let id = setup
        .client
        .create_connect_sandbox("req-leak", &env)
        .await
        .unwrap();
    setup
        .client
        .ensure_session_sandbox("ses-keep", &env)
        .await
        .unwrap();
    let reaped = eventually(Duration::from_secs(60), || async {
        setup.client.probe(Scope::Connect, &id).await.ok() == Some(ProbeState::Absent)
    })
    .await;
    assert!(reaped, "the leaked connect sandbox is still there");
    // The Secret goes after the Deployment (a real cluster's garbage
    // collector may take a moment more): waited for, with a deadline.
    let secret_gone = eventually(Duration::from_secs(60), || async {
        setup.secret(Scope::Connect, &id).await.is_none()
    })
    .await;
    assert!(
        secret_gone,
        "the reaped connect sandbox's Secret is still there"
    );
    assert_eq!(
        setup
            .client
            .probe(Scope::Session, "ses-keep")
            .await
            .unwrap(),
        ProbeState::Running
    );
    assert!(setup
        .daemon
        .log_text()
        .contains("removed a leaked connect sandbox"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_api_server_that_never_answers_is_unavailable_within_the_request_timeout() {
    let setup = setup("server-frozen", "").await;
    let Some(standin) = setup.cluster.standin("freezing the API server") else {
        return;
    };
    standin.freeze();
    let result = setup.client.probe(Scope::Session, "ses-frozen").await;
    match result {
        Err(ClientError::Sandbox(SandboxError::Unavailable(message))) => {
            assert!(
                message.contains(&standin.url()) && message.contains("request timeout"),
                "{message}"
            )
        }
        other => panic!("with the API server frozen: {other:?}"),
    }
    // Status counts the sandboxes too: it answers once that listing times out.
    assert!(
        setup.client.status().await.is_ok(),
        "the daemon keeps serving"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_existing_claim_is_kept_and_never_replaced() {
    let setup = setup("claim-kept", "").await;
    let id = "ses-claim";
    let name = format!("{}-workspace", base_name(Scope::Session, id));
    let claim: PersistentVolumeClaim = serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "PersistentVolumeClaim",
        "metadata": {"name": name, "labels": labels_of(id, "session")},
        "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "3Gi"}}},
    }))
    .unwrap();
    let api: Api<PersistentVolumeClaim> = setup.cluster.api();
    let made = api
        .create(&Default::default(), &claim)
        .await
        .expect("an operator's claim");
    setup
        .client
        .ensure_session_sandbox(id, &sandbox_env("session:k", TOKEN))
        .await
        .expect("ensure beside an existing claim");
    let kept = setup.claim(Scope::Session, id).await.unwrap();
    assert_eq!(kept["metadata"]["uid"], json!(made.metadata.uid));
    assert_eq!(kept["spec"]["resources"]["requests"]["storage"], "3Gi");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_humans_label_stays_and_sandboxds_own_fields_are_restored() {
    let setup = setup("managers", "").await;
    let id = "ses-managers";
    let env = sandbox_env("session:m", TOKEN);
    setup.client.ensure_session_sandbox(id, &env).await.unwrap();
    let api: Api<Deployment> = setup.cluster.api();
    let name = base_name(Scope::Session, id);
    let as_manager = |manager: &str| PatchParams {
        field_manager: Some(manager.to_string()),
        ..PatchParams::default()
    };
    // `kubectl label`, and a human's `kubectl set image`.
    api.patch(
        &name,
        &as_manager("kubectl-label"),
        &Patch::Merge(json!({"metadata": {"labels": {"team": "infra"}}})),
    )
    .await
    .unwrap();
    let mut edited = setup.deployment(Scope::Session, id).await.unwrap();
    edited["spec"]["template"]["spec"]["containers"][0]["image"] = json!("someone-else:latest");
    api.patch(
        &name,
        &as_manager("kubectl-set"),
        &Patch::Merge(json!({"spec": {"template": {"spec": {"containers": edited["spec"]["template"]["spec"]["containers"]}}}})),
    )
    .await
    .unwrap();
    setup.kubectl_scale(Scope::Session, id, 0).await;
    setup
        .client
        .ensure_session_sandbox(id, &env)
        .await
        .expect("no conflict with other managers");
    let deployment = setup.deployment(Scope::Session, id).await.unwrap();
    assert_eq!(
        deployment["metadata"]["labels"]["team"], "infra",
        "the human's label stays"
    );
    assert_eq!(
        deployment["spec"]["template"]["spec"]["containers"][0]["image"],
        sandboxd_tests::k8s::TEST_IMAGE,
        "sandboxd's image is restored"
    );
    assert_eq!(deployment["spec"]["replicas"], 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_ensure_cut_short_after_the_secret_is_finished_by_the_next_one() {
    let mut cluster = TestCluster::start("half-made").await;
    cluster
        .restrict(Some(vec![
            Rule::new(&["secrets"], &["create", "patch", "delete"]),
            Rule::new(&["persistentvolumeclaims"], &["get", "create", "delete"]),
            Rule::new(&["networkpolicies"], &["create", "patch", "delete"]),
            Rule::new(&["deployments"], &["get", "list", "watch"]),
        ]))
        .await;
    let daemon = TestDaemon::start(cluster.daemon_options(""));
    let client = daemon.client().await;
    let mut setup = Setup {
        cluster,
        daemon,
        client,
    };
    let id = "ses-half";
    let env = sandbox_env("session:h", TOKEN);
    let refused = setup.client.ensure_session_sandbox(id, &env).await;
    match &refused {
        Err(ClientError::Sandbox(SandboxError::PermissionDenied(message))) => {
            assert!(message.contains("deployments"), "{message}")
        }
        other => panic!("a Deployment the daemon may not make: {other:?}"),
    }
    assert!(
        setup.secret(Scope::Session, id).await.is_some(),
        "the Secret was made"
    );
    assert_eq!(
        setup.client.probe(Scope::Session, id).await.unwrap(),
        ProbeState::Absent
    );
    setup.cluster.restrict(None).await;
    let report = setup.client.ensure_session_sandbox(id, &env).await.unwrap();
    assert!(report.created);
    assert!(setup.claim(Scope::Session, id).await.is_some());
    assert!(setup.deployment(Scope::Session, id).await.is_some());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_claim_still_being_deleted_is_not_reused_and_ensure_says_so() {
    let setup = setup("claim-terminating", "").await;
    let id = "ses-term";
    let env = sandbox_env("session:term", TOKEN);
    setup.client.ensure_session_sandbox(id, &env).await.unwrap();
    let name = format!("{}-workspace", base_name(Scope::Session, id));
    let claims: Api<PersistentVolumeClaim> = setup.cluster.api();
    // A finalizer holds the claim, as pvc-protection does while a pod uses it.
    let hold = PatchParams {
        field_manager: Some("test-hold".to_string()),
        ..PatchParams::default()
    };
    claims
        .patch(
            &name,
            &hold,
            &Patch::Merge(json!({"metadata": {"finalizers": ["test.sandboxd/hold"]}})),
        )
        .await
        .unwrap();
    setup.client.deprovision_session_sandbox(id).await.unwrap();
    let held = setup
        .claim(Scope::Session, id)
        .await
        .expect("held by its finalizer");
    assert!(held["metadata"]["deletionTimestamp"].is_string(), "{held}");
    let refused = setup.client.ensure_session_sandbox(id, &env).await;
    match &refused {
        Err(ClientError::Sandbox(SandboxError::Unavailable(message))) => {
            assert!(
                message.contains("still being deleted") && message.contains(&name),
                "{message}"
            )
        }
        other => panic!("ensure beside a claim being deleted: {other:?}"),
    }
    claims
        .patch(
            &name,
            &hold,
            &Patch::Merge(json!({"metadata": {"finalizers": null}})),
        )
        .await
        .unwrap();
    assert!(
        eventually(Duration::from_secs(30), || async {
            setup.claim(Scope::Session, id).await.is_none()
        })
        .await,
        "the claim goes once its finalizer does"
    );
    let report = setup.client.ensure_session_sandbox(id, &env).await.unwrap();
    assert!(report.created);
    let fresh = setup.claim(Scope::Session, id).await.expect("a new claim");
    assert!(fresh["metadata"]
        .get("deletionTimestamp")
        .is_none_or(Value::is_null));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_secret_deleted_behind_the_daemons_back_is_put_back_before_a_scale_up() {
    let setup = setup("secret-deleted", "").await;
    let id = "ses-nosecret";
    let env = sandbox_env("session:ns", TOKEN);
    setup.client.ensure_session_sandbox(id, &env).await.unwrap();
    setup.kubectl_scale(Scope::Session, id, 0).await;
    let secrets: Api<Secret> = setup.cluster.api();
    secrets
        .delete(
            &format!("{}-env", base_name(Scope::Session, id)),
            &DeleteParams::default(),
        )
        .await
        .unwrap();
    setup.client.ensure_session_sandbox(id, &env).await.unwrap();
    let secret = setup.secret(Scope::Session, id).await.expect("put back");
    let token: k8s_openapi::ByteString =
        serde_json::from_value(secret["data"]["STIGMER_TOKEN"].clone()).unwrap();
    assert_eq!(token.0, TOKEN.as_bytes());
}

/// A daemon under `egress` (`None`: the default, `relaxed`).
async fn setup_with_egress(test: &str, egress: Option<&str>) -> Setup {
    let cluster = TestCluster::start(test).await;
    let mut options = cluster.daemon_options("");
    options.egress = egress.map(str::to_string);
    let daemon = TestDaemon::start(options);
    let client = daemon.client().await;
    Setup {
        cluster,
        daemon,
        client,
    }
}

/// The ranges SPEC §9 gives each posture, written out here independently
/// of the daemon (which builds them from the protocol crate's table).
/// No ingress rule: `ingress: []` as applied, or no `ingress` at all as a
/// real API server stores it (it drops empty lists), the same policy.
fn no_ingress_rule(spec: &Value) -> bool {
    spec.get("ingress")
        .is_none_or(|ingress| ingress.is_null() || *ingress == json!([]))
}

fn refused_by(posture: &str) -> (Value, Value) {
    let posture: sandboxd_protocol::egress::Posture = posture.parse().expect("a posture");
    let family = |v4: bool| {
        let ranges: Vec<String> = posture
            .refused_ranges()
            .filter(|range| range.network.is_ipv4() == v4)
            .map(|range| range.to_string())
            .collect();
        ranges
    };
    let (v4, v6) = (family(true), family(false));
    // The table is the protocol's (tested there); a few anchors here, so
    // a policy that lost the metadata addresses cannot pass (under strict
    // they lie in wider refused ranges, which stand for them).
    let (v4_anchors, v6_anchors): (&[&str], &[&str]) = match posture.as_str() {
        "strict" => (
            &["10.0.0.0/8", "100.64.0.0/10", "169.254.0.0/16"],
            &["fc00::/7", "fe80::/10"],
        ),
        _ => (
            &["169.254.0.0/16", "100.100.100.200/32"],
            &["fe80::/10", "fd00:ec2::254/128", "64:ff9b::a9fe:0/112"],
        ),
    };
    for anchor in v4_anchors {
        assert!(v4.iter().any(|range| range == anchor), "{posture}: {v4:?}");
    }
    for anchor in v6_anchors {
        assert!(v6.iter().any(|range| range == anchor), "{posture}: {v6:?}");
    }
    (json!(v4), json!(v6))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_network_policy_holds_the_posture_field_by_field_under_relaxed_and_strict() {
    for (posture, egress) in [("relaxed", None), ("strict", Some("strict"))] {
        let setup = setup_with_egress(&format!("policy-{posture}"), egress).await;
        let id = "ses-policy";
        setup
            .client
            .ensure_session_sandbox(id, &sandbox_env("session:p", TOKEN))
            .await
            .expect("ensure under a posture");
        let base = base_name(Scope::Session, id);
        let labels = labels_of(id, "session");
        let policy = setup
            .policy(Scope::Session, id)
            .await
            .unwrap_or_else(|| panic!("{posture}: the NetworkPolicy {base}-egress"));
        assert_eq!(policy["metadata"]["name"], format!("{base}-egress"));
        assert_eq!(policy["metadata"]["labels"], labels, "{posture}");
        assert!(applied_by_sandboxd(&policy), "{policy}");
        let spec = &policy["spec"];
        assert_eq!(spec["podSelector"], json!({"matchLabels": labels}));
        // No ingress rule: no pod, another sandbox's least of all, may
        // open a connection to a sandbox's pod.
        assert_eq!(spec["policyTypes"], json!(["Ingress", "Egress"]));
        assert!(no_ingress_rule(spec), "{spec}");
        let (v4, v6) = refused_by(posture);
        assert_eq!(
            spec["egress"],
            json!([
                {"to": [
                    {"ipBlock": {"cidr": "0.0.0.0/0", "except": v4}},
                    {"ipBlock": {"cidr": "::/0", "except": v6}},
                ]},
                {"to": [{
                    "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "kube-system"}},
                    "podSelector": {"matchLabels": {"k8s-app": "kube-dns"}},
                }],
                 "ports": [{"protocol": "UDP", "port": 53}, {"protocol": "TCP", "port": 53}]},
            ]),
            "{posture}"
        );
        // Made before the Deployment: no runner pod exists without it.
        let deployment = setup.deployment(Scope::Session, id).await.unwrap();
        assert!(resource_version(&policy) < resource_version(&deployment));
        // status and describe say the posture, the mechanism, and its caveat.
        let status = setup.client.status().await.unwrap();
        assert_eq!(status.egress.posture, posture);
        assert!(status.egress.enforced, "{:?}", status.egress);
        assert!(
            status.egress.mechanism.contains("NetworkPolicy")
                && status.egress.mechanism.contains("network plugin"),
            "{:?}",
            status.egress
        );
        let described = setup.client.describe(Scope::Session, id).await.unwrap();
        assert_eq!(described.egress.as_ref(), Some(&status.egress));
        let text = setup.status_text();
        assert!(
            text.contains(posture) && text.contains("network plugin"),
            "{text}"
        );
        let network = status
            .isolation
            .iter()
            .find(|feature| feature.name == "network")
            .unwrap_or_else(|| panic!("no network feature: {:?}", status.isolation));
        assert!(
            network.in_force && network.detail.contains("admits no ingress"),
            "{network:?}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_policy_deleted_behind_the_daemons_back_is_put_back_before_a_scale_up() {
    let setup = setup("policy-deleted", "").await;
    let id = "ses-nopolicy";
    let env = sandbox_env("session:np", TOKEN);
    setup.client.ensure_session_sandbox(id, &env).await.unwrap();
    setup.kubectl_scale(Scope::Session, id, 0).await;
    let policies: Api<NetworkPolicy> = setup.cluster.api();
    policies
        .delete(
            &format!("{}-egress", base_name(Scope::Session, id)),
            &DeleteParams::default(),
        )
        .await
        .unwrap();
    setup.client.ensure_session_sandbox(id, &env).await.unwrap();
    let policy = setup.policy(Scope::Session, id).await.expect("put back");
    let deployment = setup.deployment(Scope::Session, id).await.unwrap();
    assert!(resource_version(&policy) < resource_version(&deployment));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn egress_none_makes_an_ingress_only_policy_and_drops_a_leftovers_egress() {
    let cluster = TestCluster::start("policy-none").await;
    let id = "ses-none";
    let env = sandbox_env("session:none", TOKEN);
    // An earlier daemon under the default posture made the sandbox and its policy.
    let earlier = TestDaemon::start(cluster.daemon_options(""));
    earlier
        .client()
        .await
        .ensure_session_sandbox(id, &env)
        .await
        .unwrap();
    drop(earlier);
    let mut options = cluster.daemon_options("");
    options.egress = Some("none".to_string());
    let daemon = TestDaemon::start(options);
    let client = daemon.client().await;
    let setup = Setup {
        cluster,
        daemon,
        client,
    };
    let leftover = setup
        .policy(Scope::Session, id)
        .await
        .expect("the leftover");
    assert_eq!(
        leftover["spec"]["policyTypes"],
        json!(["Ingress", "Egress"])
    );
    let status = setup.client.status().await.unwrap();
    assert_eq!(status.egress.posture, "none");
    assert!(!status.egress.enforced);
    let ingress_only = |policy: &Value| {
        policy["spec"]["policyTypes"] == json!(["Ingress"])
            && no_ingress_rule(&policy["spec"])
            && policy["spec"].get("egress").is_none_or(Value::is_null)
    };
    // A new sandbox gets a policy that refuses ingress only.
    setup
        .client
        .ensure_session_sandbox("ses-fresh", &env)
        .await
        .unwrap();
    assert!(setup
        .deployment(Scope::Session, "ses-fresh")
        .await
        .is_some());
    let fresh = setup
        .policy(Scope::Session, "ses-fresh")
        .await
        .expect("a policy");
    assert!(ingress_only(&fresh), "{fresh}");
    // Starting the old one again drops the egress `none` no longer means.
    setup.kubectl_scale(Scope::Session, id, 0).await;
    setup.client.ensure_session_sandbox(id, &env).await.unwrap();
    let replaced = setup.policy(Scope::Session, id).await.expect("a policy");
    assert!(ingress_only(&replaced), "{replaced}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_instances_in_one_namespace_never_see_or_touch_each_others_objects() {
    let cluster = TestCluster::start("instances").await;
    let id = "ses-twice";
    let env = sandbox_env("session:twice", TOKEN);
    let default_name = base_name(Scope::Session, id);
    let blue_name = format!("blue-{default_name}");
    // The default instance reaps connect sandboxes quickly; blue does not.
    let first = TestDaemon::start(
        cluster.daemon_options("connect_ttl = \"2s\"\nconnect_creation_grace = \"1s\""),
    );
    let mut blue_options = cluster.daemon_options("");
    blue_options.extra_toml = format!("instance = \"blue\"\n{}", blue_options.extra_toml);
    let blue = TestDaemon::start(blue_options);
    let (a, b) = (first.client().await, blue.client().await);
    let setup = Setup {
        cluster,
        daemon: first,
        client: a,
    };

    // The default instance: today's names, no instance label.
    assert!(
        setup
            .client
            .ensure_session_sandbox(id, &env)
            .await
            .unwrap()
            .created
    );
    let deployment = setup.get::<Deployment>(&default_name).await.unwrap();
    assert_eq!(deployment["metadata"]["labels"], labels_of(id, "session"));
    // Blue neither sees nor adopts it, and makes its own beside it.
    assert_eq!(
        b.probe(Scope::Session, id).await.unwrap(),
        ProbeState::Absent
    );
    assert!(b.list(None).await.unwrap().is_empty());
    assert!(b.ensure_session_sandbox(id, &env).await.unwrap().created);
    let mut blue_labels = labels_of(id, "session");
    blue_labels["stigmer.ai/instance"] = json!("blue");
    let blue_deployment = setup
        .get::<Deployment>(&blue_name)
        .await
        .expect("blue's Deployment");
    assert_eq!(blue_deployment["metadata"]["labels"], blue_labels);
    assert_eq!(
        blue_deployment["spec"]["selector"]["matchLabels"],
        blue_labels
    );
    assert_eq!(
        blue_deployment["spec"]["template"]["spec"]["volumes"][0]["persistentVolumeClaim"]
            ["claimName"],
        format!("{blue_name}-workspace")
    );
    for name in [
        format!("{blue_name}-env"),
        format!("{blue_name}-workspace"),
        format!("{blue_name}-egress"),
    ] {
        let object = match name.rsplit('-').next() {
            Some("env") => setup.get::<Secret>(&name).await,
            Some("workspace") => setup.get::<PersistentVolumeClaim>(&name).await,
            _ => setup.get::<NetworkPolicy>(&name).await,
        };
        let object = object.unwrap_or_else(|| panic!("blue's {name}"));
        assert_eq!(object["metadata"]["labels"], blue_labels, "{name}");
    }
    let policy = setup
        .get::<NetworkPolicy>(&format!("{blue_name}-egress"))
        .await
        .unwrap();
    assert_eq!(policy["spec"]["podSelector"]["matchLabels"], blue_labels);
    // Each lists only its own.
    for client in [&setup.client, &b] {
        let listed = client.list(None).await.unwrap();
        assert_eq!(listed.len(), 1, "{listed:?}");
        assert_eq!(listed[0].id, id);
    }

    // The default instance's reaper removes its own leaked connect sandbox
    // and never blue's.
    let blue_connect = b.create_connect_sandbox("req-blue", &env).await.unwrap();
    let own_connect = setup
        .client
        .create_connect_sandbox("req-default", &env)
        .await
        .unwrap();
    let reaped = eventually(Duration::from_secs(60), || async {
        setup.client.probe(Scope::Connect, &own_connect).await.ok() == Some(ProbeState::Absent)
    })
    .await;
    assert!(
        reaped,
        "the default instance's leaked connect sandbox is still there"
    );
    assert_eq!(
        b.probe(Scope::Connect, &blue_connect).await.unwrap(),
        ProbeState::Running,
        "blue's connect sandbox is not the default instance's to reap"
    );

    // The default instance's deprovision leaves blue's objects alone.
    setup.client.deprovision_session_sandbox(id).await.unwrap();
    assert!(setup.get::<Deployment>(&default_name).await.is_none());
    assert!(setup.get::<Deployment>(&blue_name).await.is_some());
    assert!(setup
        .get::<Secret>(&format!("{blue_name}-env"))
        .await
        .is_some());
    assert!(setup
        .get::<NetworkPolicy>(&format!("{blue_name}-egress"))
        .await
        .is_some());
    assert_eq!(
        b.probe(Scope::Session, id).await.unwrap(),
        ProbeState::Running
    );
    // And blue's removes its own.
    b.deprovision_session_sandbox(id).await.unwrap();
    assert!(setup.get::<Deployment>(&blue_name).await.is_none());
    assert!(setup
        .get::<Secret>(&format!("{blue_name}-env"))
        .await
        .is_none());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_fast_path_says_which_fields_differ_and_changes_nothing() {
    let setup = setup("differs", "").await;
    let id = "ses-differs";
    let env = sandbox_env("session:differs", TOKEN);
    setup.client.ensure_session_sandbox(id, &env).await.unwrap();
    let before = setup.deployment(Scope::Session, id).await.unwrap();
    let same = setup.client.ensure_session_sandbox(id, &env).await.unwrap();
    assert!(same.differs.is_empty(), "{same:?}");
    let other = SandboxEnv {
        task_queue: "session:elsewhere".to_string(),
        stigmer_token: sandboxd_client::Token::new("tok-other-91"),
        caller_class: "internal".to_string(),
    };
    for _ in 0..2 {
        let report = setup
            .client
            .ensure_session_sandbox(id, &other)
            .await
            .unwrap();
        assert!(!report.created, "{report:?}");
        assert_eq!(report.differs, ["task_queue", "caller_class", "token"]);
    }
    let only_token = SandboxEnv {
        stigmer_token: sandboxd_client::Token::new("tok-other-91"),
        ..env.clone()
    };
    let report = setup
        .client
        .ensure_session_sandbox(id, &only_token)
        .await
        .unwrap();
    assert_eq!(report.differs, ["token"]);
    let after = setup.deployment(Scope::Session, id).await.unwrap();
    assert_eq!(
        written_by_sandboxd(&before),
        written_by_sandboxd(&after),
        "no write"
    );
    assert!(!after.to_string().contains("tok-other-91"));
    let logged = setup
        .daemon
        .log_text()
        .matches("already running with other settings")
        .count();
    assert_eq!(logged, 2, "once per difference, not per call");
    // The same through sandboxctl, in --json.
    let output = setup.daemon.sandboxctl(&[
        "--json",
        "ensure",
        "session",
        id,
        "--task-queue",
        "session:elsewhere",
    ]);
    let text = String::from_utf8_lossy(&output.stdout);
    assert!(
        text.contains("\"differs\"") && text.contains("task_queue"),
        "{output:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_health_verdict_is_degraded_for_missing_verbs_and_unhealthy_without_an_answer() {
    // All the tier needs: healthy.
    let setup = setup("health", "").await;
    let healthy = eventually(Duration::from_secs(30), || async {
        let status = setup.client.status().await.unwrap();
        status.driver_health.contains("permissions sufficient")
    })
    .await;
    assert!(healthy);
    let status = setup.client.status().await.unwrap();
    assert_eq!(
        status.health.verdict,
        HealthVerdict::Healthy,
        "{:?}",
        status.health
    );

    // A Role without deployments/scale: degraded, naming the verb.
    let mut cluster = TestCluster::start("health-degraded").await;
    cluster
        .restrict(Some(vec![
            Rule::new(&["secrets"], &["create", "patch", "delete"]),
            Rule::new(&["persistentvolumeclaims"], &["get", "create", "delete"]),
            Rule::new(&["networkpolicies"], &["create", "patch", "delete"]),
            Rule::new(
                &["deployments"],
                &["get", "list", "watch", "create", "patch", "delete"],
            ),
            Rule::new(&["pods"], &["list", "watch"]),
            Rule::new(&["pods/log"], &["get"]),
            Rule::new(&["pods/exec"], &["create"]),
            Rule::new(&["pods/exec"], &["create"]),
            Rule::new(&["events"], &["list"]),
        ]))
        .await;
    let daemon = TestDaemon::start(cluster.daemon_options(""));
    let client = daemon.client().await;
    let degraded = eventually(Duration::from_secs(30), || async {
        client.status().await.unwrap().health.verdict == HealthVerdict::Degraded
    })
    .await;
    let status = client.status().await.unwrap();
    assert!(degraded, "{:?}", status.health);
    assert!(
        status
            .health
            .reasons
            .iter()
            .any(|reason| reason.contains("patch deployments/scale")),
        "{:?}",
        status.health
    );
    let check = daemon.sandboxctl(&["status", "--check"]);
    assert_eq!(check.status.code(), Some(3), "{check:?}");

    // The API server stops answering: unhealthy, naming it.
    let mut setup = setup;
    let Some(standin) = setup.cluster.standin_mut() else {
        eprintln!("SKIPPED on a real cluster: stopping the API server needs the stand-in");
        return;
    };
    let url = standin.url();
    standin.stop();
    let _ = setup.client.probe(Scope::Session, "ses-any").await;
    let status = setup.client.status().await.unwrap();
    assert_eq!(status.health.verdict, HealthVerdict::Unhealthy);
    assert!(
        status
            .health
            .reasons
            .iter()
            .any(|reason| reason.contains(&url) && reason.contains("did not answer")),
        "{:?}",
        status.health
    );
    let check = setup.daemon.sandboxctl(&["status", "--check"]);
    assert_eq!(check.status.code(), Some(4), "{check:?}");

    // A daemon whose permission check cannot run: unhealthy, saying so.
    let late = TestDaemon::start(setup.cluster.daemon_options(""));
    let late_client = late.client().await;
    let failed = eventually(Duration::from_secs(30), || async {
        late_client.status().await.is_ok_and(|status| {
            status
                .health
                .reasons
                .iter()
                .any(|reason| reason.contains("permission check failed"))
        })
    })
    .await;
    assert!(failed, "{:?}", late_client.status().await.map(|s| s.health));
}
