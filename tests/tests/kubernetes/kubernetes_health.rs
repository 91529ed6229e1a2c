//! What the kubernetes tier says when it cannot do its work: `status` and
//! the health verdict naming the API server, the namespace and missing
//! permissions (a Role without a verb), an API server that is down or never
//! answers, a missing namespace, and an id that is no label value — each a
//! clear error naming what was wrong, with the daemon serving on.

use std::time::Duration;

use sandboxd_client::{ClientError, HealthVerdict, ProbeState, SandboxError, Scope};
use sandboxd_tests::k8s::TestCluster;
use sandboxd_tests::k8s_standin::Rule;
use sandboxd_tests::{eventually, sandbox_env, TestDaemon};

use crate::kubernetes_support::{setup, Setup, TOKEN};

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
