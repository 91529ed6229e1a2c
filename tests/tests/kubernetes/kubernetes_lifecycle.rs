//! A kubernetes sandbox's life after its first ensure: scaled to zero and
//! back, paused, deprovisioned (its objects deleted in order), listed again
//! by a restarted daemon from the cluster alone, reaped when a leaked
//! connect sandbox outlives its TTL, and kept apart from a second daemon
//! instance in the same namespace.

use std::time::Duration;

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{PersistentVolumeClaim, Secret};
use k8s_openapi::api::networking::v1::NetworkPolicy;
use sandboxd_client::{ProbeState, SandboxEnv, Scope};
use sandboxd_protocol::naming::base_name;
use sandboxd_tests::k8s::TestCluster;
use sandboxd_tests::{eventually, sandbox_env, TestDaemon};
use serde_json::json;

use crate::kubernetes_support::{env_vars, labels_of, setup, Setup, TOKEN};

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
