//! The egress posture on the cluster, and no road between sandboxes: one
//! NetworkPolicy per sandbox, `<base>-egress`, selecting the sandbox's pod
//! by its labels.
//!
//! Ingress, on every posture (`none` included: then the policy is
//! ingress-only): no rule, so no pod and no address may open a connection
//! to a sandbox's pod — another sandbox's pod least of all. A runner is a client (it polls its queue); nothing needs to reach
//! it, and the process tier refuses the host's connections to a sandbox
//! likewise. Its replies to its own connections are not ingress.
//!
//! It allows egress to `0.0.0.0/0` and `::/0` except the posture's ranges,
//! built from the protocol crate's one table
//! ([`sandboxd_protocol::egress`]), never a copy of it, plus cluster DNS:
//! UDP and TCP port 53 to the `k8s-app=kube-dns` pods of `kube-system`
//! (by namespace and pod selector). DNS is allowed by selector rather than
//! to port 53 anywhere, so that under `strict` a runner cannot reach a
//! resolver (or anything else listening on 53) inside the refused ranges
//! other than the cluster's own. Under `strict` the refused `10.0.0.0/8`
//! etc. include the cluster's own pod and service networks: that is the
//! point — a runner reaches the control plane's public endpoints, not the
//! cluster's internal services. A cluster whose DNS runs elsewhere (for
//! example NodeLocal DNSCache on a link-local address, which both postures
//! refuse) needs its own policy beside this one.
//!
//! Enforcement is the cluster's network plugin's: a plugin without
//! NetworkPolicy support (flannel alone, for one) accepts the object and
//! enforces nothing. `status` and `describe` say so.
//!
//! Life cycle: applied with the sandbox, after the Secret and the claim and
//! before the Deployment, so no runner pod exists without it; applied again
//! before every scale-up (a policy deleted behind the daemon's back, or a
//! posture changed between daemon runs, is put right before a runner
//! starts); deleted on deprovision after the Deployment and before the
//! Secret (a pod still terminating within its grace may outlive it by that
//! grace). Under `egress = "none"` the policy has no egress part: applying
//! it replaces one an earlier daemon made under a posture (server-side
//! apply drops the fields this manager no longer sets), so `none` means
//! what `status` says.

use std::collections::BTreeMap;

use k8s_openapi::api::networking::v1::{
    IPBlock, NetworkPolicy, NetworkPolicyEgressRule, NetworkPolicyPeer, NetworkPolicyPort,
    NetworkPolicySpec,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::api::{DeleteParams, Patch, PatchParams};
use sandboxd_protocol::egress::Posture;

use super::errors::{Action, CallError};
use super::shapes::{labels, FIELD_MANAGER};
use super::Inner;
use crate::sandbox_key::SandboxKey;

pub const APPLY_POLICY: Action = Action::new("patch", "networkpolicies");
pub const DELETE_POLICY: Action = Action::new("delete", "networkpolicies");

/// The namespace and pod labels of the cluster's DNS (kube-dns or CoreDNS
/// as kubeadm, kops, GKE, EKS and most distributions deploy it).
const DNS_NAMESPACE: (&str, &str) = ("kubernetes.io/metadata.name", "kube-system");
const DNS_POD: (&str, &str) = ("k8s-app", "kube-dns");
const DNS_PORT: i32 = 53;

/// What `status` and `describe` say about the posture on this tier.
pub fn mechanism(posture: Posture) -> String {
    format!(
        "a NetworkPolicy per sandbox (<name>-egress) refusing {}, DNS to kube-system/kube-dns \
         allowed; enforced only if the cluster's network plugin enforces NetworkPolicies",
        refused(posture, Family::V4)
            .into_iter()
            .chain(refused(posture, Family::V6))
            .collect::<Vec<_>>()
            .join(", ")
    )
}

pub fn policy_name(key: &SandboxKey) -> String {
    format!("{}-egress", super::shapes::object_name(key))
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Family {
    V4,
    V6,
}

/// The posture's refused ranges of one family, from the protocol's table.
fn refused(posture: Posture, family: Family) -> Vec<String> {
    posture
        .refused_ranges()
        .filter(|range| range.network.is_ipv4() == (family == Family::V4))
        .map(|range| range.to_string())
        .collect()
}

/// What the `network` isolation feature says on this tier.
pub const SEPARATION: &str = "a NetworkPolicy per sandbox (<name>-egress) admits no ingress: no pod, another sandbox's included, may open a connection to a sandbox's pod; enforced only if the cluster's network plugin enforces NetworkPolicies";

/// The sandbox's NetworkPolicy: no ingress, and under a posture the
/// posture's egress (`None`: `egress = "none"`, no egress part).
pub fn policy(key: &SandboxKey, namespace: &str, posture: Option<Posture>) -> NetworkPolicy {
    let mut policy_types = vec!["Ingress".to_string()];
    let egress = posture.map(|posture| {
        policy_types.push("Egress".to_string());
        egress_rules(posture)
    });
    NetworkPolicy {
        metadata: ObjectMeta {
            name: Some(policy_name(key)),
            namespace: Some(namespace.to_string()),
            labels: Some(labels(key)),
            ..ObjectMeta::default()
        },
        spec: Some(NetworkPolicySpec {
            pod_selector: Some(LabelSelector {
                match_labels: Some(labels(key)),
                match_expressions: None,
            }),
            policy_types: Some(policy_types),
            egress,
            // No rule: nothing is admitted.
            ingress: Some(Vec::new()),
        }),
    }
}

/// Everything but the posture's ranges, and cluster DNS.
fn egress_rules(posture: Posture) -> Vec<NetworkPolicyEgressRule> {
    let everything_but = |cidr: &str, family| NetworkPolicyPeer {
        ip_block: Some(IPBlock {
            cidr: cidr.to_string(),
            except: Some(refused(posture, family)),
        }),
        ..NetworkPolicyPeer::default()
    };
    let selector = |(name, value): (&str, &str)| LabelSelector {
        match_labels: Some(BTreeMap::from([(name.to_string(), value.to_string())])),
        match_expressions: None,
    };
    let dns_port = |protocol: &str| NetworkPolicyPort {
        protocol: Some(protocol.to_string()),
        port: Some(IntOrString::Int(DNS_PORT)),
        end_port: None,
    };
    vec![
        NetworkPolicyEgressRule {
            to: Some(vec![
                everything_but("0.0.0.0/0", Family::V4),
                everything_but("::/0", Family::V6),
            ]),
            ports: None,
        },
        NetworkPolicyEgressRule {
            to: Some(vec![NetworkPolicyPeer {
                namespace_selector: Some(selector(DNS_NAMESPACE)),
                pod_selector: Some(selector(DNS_POD)),
                ip_block: None,
            }]),
            ports: Some(vec![dns_port("UDP"), dns_port("TCP")]),
        },
    ]
}

/// Puts the sandbox's policy in force before a runner starts, on every
/// posture. `Ok(None)` on a 409.
pub async fn ensure(inner: &Inner, key: &SandboxKey) -> Result<Option<()>, (Action, CallError)> {
    let policy = policy(key, &inner.cluster.namespace, inner.egress.posture());
    let params = PatchParams::apply(FIELD_MANAGER).force();
    match inner
        .cluster
        .call(
            inner
                .policies()
                .patch(&policy_name(key), &params, &Patch::Apply(&policy)),
        )
        .await
    {
        Ok(_) => Ok(Some(())),
        Err(error) if error.is_conflict() => Ok(None),
        Err(error) => Err((APPLY_POLICY, error)),
    }
}

/// Deletes the sandbox's policy; `Ok(false)` when there was none.
pub async fn delete(inner: &Inner, key: &SandboxKey) -> Result<bool, CallError> {
    match inner
        .cluster
        .call(
            inner
                .policies()
                .delete(&policy_name(key), &DeleteParams::default()),
        )
        .await
    {
        Ok(_) => Ok(true),
        Err(error) if error.is_not_found() => Ok(false),
        Err(error) => Err(error),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use sandboxd_protocol::Scope;

    #[test]
    fn the_policy_refuses_exactly_the_postures_ranges_of_the_one_table() {
        let key = SandboxKey::new(Scope::Session, "s");
        for posture in Posture::ALL {
            let policy = serde_json::to_value(policy(&key, "ns", Some(posture))).unwrap();
            assert_eq!(
                policy["spec"]["policyTypes"],
                serde_json::json!(["Ingress", "Egress"])
            );
            assert_eq!(policy["spec"]["ingress"], serde_json::json!([]));
            let blocks = &policy["spec"]["egress"][0]["to"];
            let mut except: Vec<String> = [0, 1]
                .iter()
                .flat_map(|i| blocks[i]["ipBlock"]["except"].as_array().unwrap().clone())
                .map(|cidr| cidr.as_str().unwrap().to_string())
                .collect();
            let mut table: Vec<String> = posture.refused_ranges().map(|r| r.to_string()).collect();
            except.sort();
            table.sort();
            assert_eq!(except, table, "{posture}");
        }
        let relaxed = mechanism(Posture::Relaxed);
        for range in [
            "169.254.0.0/16",
            "fe80::/10",
            "fd00:ec2::254/128",
            "64:ff9b::a9fe:0/112",
        ] {
            assert!(relaxed.contains(range), "{relaxed}");
        }
    }

    #[test]
    fn under_none_the_policy_only_refuses_ingress() {
        let key = SandboxKey::new(Scope::Session, "s");
        let policy = serde_json::to_value(policy(&key, "ns", None)).unwrap();
        assert_eq!(
            policy["spec"]["policyTypes"],
            serde_json::json!(["Ingress"])
        );
        assert_eq!(policy["spec"]["ingress"], serde_json::json!([]));
        assert!(policy["spec"].get("egress").is_none(), "{policy}");
    }
}
