//! A kubernetes sandbox's NetworkPolicy: the egress posture (relaxed,
//! strict, none) written out field by field, no ingress, and a policy
//! deleted behind the daemon's back put back before a scale-up.

use k8s_openapi::api::networking::v1::NetworkPolicy;
use kube::api::{Api, DeleteParams};
use sandboxd_client::Scope;
use sandboxd_protocol::naming::base_name;
use sandboxd_tests::k8s::TestCluster;
use sandboxd_tests::{sandbox_env, TestDaemon};
use serde_json::{json, Value};

use crate::kubernetes_support::{
    applied_by_sandboxd, labels_of, resource_version, setup, Setup, TOKEN,
};

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

/// No ingress rule: `ingress: []` as applied, or no `ingress` at all as a
/// real API server stores it (it drops empty lists), the same policy.
fn no_ingress_rule(spec: &Value) -> bool {
    spec.get("ingress")
        .is_none_or(|ingress| ingress.is_null() || *ingress == json!([]))
}

/// The ranges SPEC §9 gives each posture, written out here independently
/// of the daemon (which builds them from the protocol crate's table).
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
