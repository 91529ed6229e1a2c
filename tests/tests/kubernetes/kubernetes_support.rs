//! The kubernetes tier through the real `sandboxd --driver kubernetes`,
//! against the in-process STAND-IN API server (`sandboxd_tests::k8s_standin`),
//! or against a real cluster when `SANDBOXD_TEST_KUBECONFIG` names one
//! (each test in a namespace of its own; each test prints which it used).
//! The test's own client looks at — and breaks — the objects from outside,
//! as an operator's kubectl would.
//!
//! Shared by the modules of objects, drift, lifecycle, describe, health
//! and network policy: the test's cluster, daemon and client, the objects
//! read back as JSON, and readers of what sandboxd wrote to an object.

use std::collections::BTreeMap;

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{PersistentVolumeClaim, Secret};
use k8s_openapi::api::networking::v1::NetworkPolicy;
use kube::api::{Api, Patch, PatchParams};
use sandboxd_client::{SandboxdClient, Scope};
use sandboxd_protocol::naming::base_name;
use sandboxd_tests::k8s::TestCluster;
use sandboxd_tests::TestDaemon;
use serde_json::{json, Value};

pub(crate) const TOKEN: &str = "tok-k8s-secret-4f2a9c";

pub(crate) struct Setup {
    pub(crate) cluster: TestCluster,
    pub(crate) daemon: TestDaemon,
    pub(crate) client: SandboxdClient,
}

pub(crate) async fn setup(test: &str, kubernetes_toml: &str) -> Setup {
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

pub(crate) fn labels_of(id: &str, scope: &str) -> Value {
    json!({
        "stigmer.ai/managed-by": "stigmer-server",
        "stigmer.ai/scope": scope,
        "stigmer.ai/sandbox-id": id,
    })
}

impl Setup {
    pub(crate) async fn get<K>(&self, name: &str) -> Option<Value>
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

    pub(crate) async fn deployment(&self, scope: Scope, id: &str) -> Option<Value> {
        self.get::<Deployment>(&base_name(scope, id)).await
    }

    pub(crate) async fn secret(&self, scope: Scope, id: &str) -> Option<Value> {
        self.get::<Secret>(&format!("{}-env", base_name(scope, id)))
            .await
    }

    pub(crate) async fn claim(&self, scope: Scope, id: &str) -> Option<Value> {
        self.get::<PersistentVolumeClaim>(&format!("{}-workspace", base_name(scope, id)))
            .await
    }

    pub(crate) async fn policy(&self, scope: Scope, id: &str) -> Option<Value> {
        self.get::<NetworkPolicy>(&format!("{}-egress", base_name(scope, id)))
            .await
    }

    /// Scales the Deployment as `kubectl scale` does: through the scale
    /// subresource, as a manager of its own.
    pub(crate) async fn kubectl_scale(&self, scope: Scope, id: &str, replicas: i32) {
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

    pub(crate) fn status_text(&self) -> String {
        let output = self.daemon.sandboxctl(&["status"]);
        assert!(output.status.success(), "{output:?}");
        String::from_utf8_lossy(&output.stdout).into_owned()
    }
}

pub(crate) fn resource_version(object: &Value) -> u64 {
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
pub(crate) fn written_by_sandboxd(object: &Value) -> Value {
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

pub(crate) fn env_vars(deployment: &Value) -> BTreeMap<String, Value> {
    deployment["spec"]["template"]["spec"]["containers"][0]["env"]
        .as_array()
        .expect("env")
        .iter()
        .map(|var| (var["name"].as_str().unwrap().to_string(), var.clone()))
        .collect()
}

pub(crate) fn applied_by_sandboxd(object: &Value) -> bool {
    object["metadata"]["managedFields"]
        .as_array()
        .is_some_and(|entries| {
            entries
                .iter()
                .any(|entry| entry["manager"] == "sandboxd" && entry["operation"] == "Apply")
        })
}
