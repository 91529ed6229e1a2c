//! The kubernetes tier when its objects changed outside the daemon: a
//! Deployment, Secret or claim deleted (or still being deleted) behind its
//! back, an ensure cut short halfway, a claim that already existed, a
//! human's label next to sandboxd's own fields — each put back, kept or
//! refused with a reason, as ensure's contract says.

use std::time::Duration;

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{PersistentVolumeClaim, Secret};
use kube::api::{Api, DeleteParams, Patch, PatchParams};
use sandboxd_client::{ClientError, ProbeState, SandboxError, Scope};
use sandboxd_protocol::naming::base_name;
use sandboxd_tests::k8s::TestCluster;
use sandboxd_tests::k8s_standin::Rule;
use sandboxd_tests::{eventually, sandbox_env, TestDaemon};
use serde_json::{json, Value};

use crate::kubernetes_support::{labels_of, setup, written_by_sandboxd, Setup, TOKEN};

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
