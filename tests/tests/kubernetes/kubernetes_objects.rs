//! The kubernetes tier's three objects per sandbox (Deployment, Secret,
//! workspace claim) as the contract shapes them and makes them, in order;
//! a tokenless and a connect sandbox's variants; and the fast path, one
//! GET for a running sandbox, that says which fields differ and writes
//! nothing. Runs as `kubernetes_support` says: the stand-in API server,
//! or a real cluster with `SANDBOXD_TEST_KUBECONFIG`.

use sandboxd_client::{ClientError, ProbeState, SandboxEnv, SandboxError, Scope};
use sandboxd_protocol::naming::base_name;
use sandboxd_tests::sandbox_env;
use serde_json::json;

use crate::kubernetes_support::{
    applied_by_sandboxd, env_vars, labels_of, resource_version, setup, written_by_sandboxd, TOKEN,
};

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
