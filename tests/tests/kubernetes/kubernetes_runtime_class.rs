//! `[kubernetes] runtime_class` through the real `sandboxd --driver
//! kubernetes`: a class the cluster lacks stops the daemon at start, naming
//! it; one it has is named in every runner pod's `runtimeClassName`.
//!
//! Against the in-process STAND-IN API server (it serves node.k8s.io/v1
//! RuntimeClasses as the real one does: see `k8s_standin::runtime_class`),
//! or a real cluster when `SANDBOXD_TEST_KUBECONFIG` names one. No pod runs
//! under the class here: whether a node's runtime (runsc) takes the pod is
//! the cluster's, and the docker tier's gVisor test runs one for real.

use std::time::Duration;

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::node::v1::RuntimeClass;
use kube::api::{Api, DeleteParams, PostParams};
use sandboxd_client::Scope;
use sandboxd_tests::k8s::TestCluster;
use sandboxd_tests::{sandbox_env, TestDaemon};

/// The cluster-wide class of this test, removed when dropped (a real
/// cluster keeps it otherwise: RuntimeClasses are not in the namespace).
struct Class {
    api: Api<RuntimeClass>,
    name: String,
}

impl Class {
    async fn create(cluster: &TestCluster, name: &str) -> Class {
        let api: Api<RuntimeClass> = Api::all(cluster.admin.clone());
        let class: RuntimeClass = serde_json::from_value(serde_json::json!({
            "apiVersion": "node.k8s.io/v1", "kind": "RuntimeClass",
            "metadata": {"name": name}, "handler": "runsc",
        }))
        .expect("a RuntimeClass");
        api.create(&PostParams::default(), &class)
            .await
            .unwrap_or_else(|error| panic!("create RuntimeClass {name}: {error}"));
        Class {
            api,
            name: name.to_string(),
        }
    }
}

impl Drop for Class {
    fn drop(&mut self) {
        let (api, name) = (self.api.clone(), self.name.clone());
        sandboxd_tests::k8s::clean_up_from_drop(async move {
            let _ = api.delete(&name, &DeleteParams::default()).await;
        });
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_missing_runtime_class_stops_the_daemon_and_an_existing_one_is_in_every_pod() {
    let cluster = TestCluster::start("runtime-class").await;
    // The namespace's name is this run's own: so is the class's.
    let name = format!("{}-gvisor", cluster.namespace);

    let mut refused =
        TestDaemon::prepare(cluster.daemon_options(&format!("runtime_class = \"{name}-absent\"")));
    refused.launch();
    let status = refused
        .wait_exit(Duration::from_secs(30))
        .expect("a daemon whose RuntimeClass is missing exits, not serves");
    assert!(!status.success(), "it exited with {status}");
    let log = refused.log_since_launch();
    assert!(
        log.contains(&format!("runtime_class '{name}-absent'"))
            && log.contains("has no RuntimeClass of that name"),
        "the start-up error names the missing class:\n{log}"
    );

    let _class = Class::create(&cluster, &name).await;
    let daemon = TestDaemon::start(cluster.daemon_options(&format!("runtime_class = \"{name}\"")));
    let client = daemon.client().await;
    let status = client.status().await.expect("status");
    let runtime = status
        .isolation
        .iter()
        .find(|feature| feature.name == "runtime")
        .expect("a runtime feature");
    assert!(
        runtime.detail.contains(&format!("runtime_class '{name}'")),
        "status names the class in force: {runtime:?}"
    );
    for (scope, id) in [
        (Scope::Session, "ses-gvisor"),
        (Scope::Workflow, "wf-gvisor"),
    ] {
        let env = sandbox_env(&format!("{scope}:{id}"), "tok-runtime-class");
        let report = client
            .ensure(scope, id, &env)
            .await
            .unwrap_or_else(|error| panic!("ensure {scope} '{id}': {error}"));
        assert!(report.created, "{report:?}");
        let deployments: Api<Deployment> = cluster.api();
        let deployment = deployments
            .get(&sandboxd_protocol::naming::base_name(scope, id))
            .await
            .expect("the Deployment");
        let pod = deployment.spec.template.spec.expect("a pod template");
        assert_eq!(
            pod.runtime_class_name.as_deref(),
            Some(name.as_str()),
            "{scope} '{id}'s pods name the class"
        );
        let info = client.describe(scope, id).await.expect("describe");
        assert!(
            info.isolation
                .iter()
                .any(|feature| feature.name == "runtime"
                    && feature.detail.contains(&format!("RuntimeClass '{name}'"))),
            "describe names the pods' class: {:?}",
            info.isolation
        );
    }
}
