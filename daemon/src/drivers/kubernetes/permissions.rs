//! Whether the daemon's identity may do what the tier does, asked of the
//! API server at start (one `SelfSubjectAccessReview` per verb and
//! resource) and again every few minutes, so a Role fixed later shows, for
//! `sandboxctl status`. The answer is advice: each call is
//! still authorized by the API server, and a denied one says which verb
//! and resource it lacked.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use k8s_openapi::api::authorization::v1::{
    ResourceAttributes, SelfSubjectAccessReview, SelfSubjectAccessReviewSpec,
};
use kube::api::{Api, PostParams};
use sandboxd_protocol::{Health, HealthVerdict};

use super::config::Cluster;
use super::errors::CallError;

/// Every (verb, group, resource, subresource) the tier uses, and no more:
/// the same list as deploy/kubernetes/rbac.yaml.
pub const NEEDED: [(&str, &str, &str, &str); 21] = [
    ("create", "", "secrets", ""),
    ("patch", "", "secrets", ""),
    ("delete", "", "secrets", ""),
    ("get", "", "persistentvolumeclaims", ""),
    ("create", "", "persistentvolumeclaims", ""),
    ("delete", "", "persistentvolumeclaims", ""),
    ("get", "apps", "deployments", ""),
    ("list", "apps", "deployments", ""),
    ("watch", "apps", "deployments", ""),
    ("create", "apps", "deployments", ""),
    ("patch", "apps", "deployments", ""),
    ("delete", "apps", "deployments", ""),
    ("patch", "apps", "deployments", "scale"),
    ("create", "networking.k8s.io", "networkpolicies", ""),
    ("patch", "networking.k8s.io", "networkpolicies", ""),
    ("delete", "networking.k8s.io", "networkpolicies", ""),
    ("list", "", "pods", ""),
    ("watch", "", "pods", ""),
    ("get", "", "pods", "log"),
    ("create", "", "pods", "exec"),
    ("list", "", "events", ""),
];

/// How long to wait between tries while the API server does not answer.
const RETRY: Duration = Duration::from_secs(10);
/// How long an answer stands before it is asked again.
const RECHECK: Duration = Duration::from_secs(300);

/// What the last check found.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Found {
    NotChecked,
    Sufficient,
    /// `verb resource[/subresource]` of each denied permission.
    Missing(Vec<String>),
    /// The check itself failed (the API server did not answer, or refused
    /// the review): why.
    Failed(String),
}

impl Found {
    fn summary(&self) -> String {
        match self {
            Found::NotChecked => "permissions not checked yet".to_string(),
            Found::Sufficient => "permissions sufficient".to_string(),
            Found::Missing(missing) => format!("permissions MISSING: {}", missing.join(", ")),
            Found::Failed(why) => format!("permissions unknown: {why}"),
        }
    }
}

/// What `status` says about the daemon's permissions.
#[derive(Clone)]
pub struct Permissions(Arc<Mutex<Found>>);

impl Permissions {
    pub fn new() -> Permissions {
        Permissions(Arc::new(Mutex::new(Found::NotChecked)))
    }

    fn found(&self) -> Found {
        self.0
            .lock()
            .unwrap_or_else(|poison| poison.into_inner())
            .clone()
    }

    pub fn summary(&self) -> String {
        self.found().summary()
    }

    /// Adds the check's verdict: unhealthy when it failed, degraded when
    /// verbs are missing (the calls needing them fail, the rest serve).
    pub fn judge(&self, health: &mut Health) {
        match self.found() {
            Found::NotChecked | Found::Sufficient => {}
            Found::Missing(missing) => health.add(
                HealthVerdict::Degraded,
                format!(
                    "the daemon may not {} (deploy/kubernetes/rbac.yaml grants them)",
                    missing.join(", ")
                ),
            ),
            Found::Failed(why) => health.add(
                HealthVerdict::Unhealthy,
                format!("the permission check failed: {why}"),
            ),
        }
    }

    fn set(&self, found: Found) {
        *self.0.lock().unwrap_or_else(|poison| poison.into_inner()) = found;
    }

    /// Asks for as long as the daemon runs: every [`RETRY`] until the API
    /// server answers, then every [`RECHECK`]. Logs only changes.
    pub async fn check(self, cluster: Cluster) {
        loop {
            let (found, wait) = match review_all(&cluster).await {
                Ok(missing) if missing.is_empty() => (Found::Sufficient, RECHECK),
                Ok(missing) => (Found::Missing(missing), RECHECK),
                Err(error) => (Found::Failed(error), RETRY),
            };
            if found != self.found() {
                let summary = found.summary();
                if matches!(found, Found::Missing(_)) {
                    tracing::error!(server = %cluster.server, namespace = %cluster.namespace, %summary, "the daemon lacks permissions the kubernetes tier needs (deploy/kubernetes/rbac.yaml)");
                } else {
                    tracing::info!(server = %cluster.server, namespace = %cluster.namespace, %summary, "the daemon's permissions");
                }
                self.set(found);
            }
            tokio::time::sleep(wait).await;
        }
    }
}

/// `verb resource[/subresource]` of every needed permission the server denies.
async fn review_all(cluster: &Cluster) -> Result<Vec<String>, String> {
    let api: Api<SelfSubjectAccessReview> = Api::all(cluster.client.clone());
    let mut missing = Vec::new();
    for (verb, group, resource, subresource) in NEEDED {
        let review = SelfSubjectAccessReview {
            spec: SelfSubjectAccessReviewSpec {
                resource_attributes: Some(ResourceAttributes {
                    namespace: Some(cluster.namespace.clone()),
                    verb: Some(verb.to_string()),
                    group: Some(group.to_string()),
                    resource: Some(resource.to_string()),
                    subresource: (!subresource.is_empty()).then(|| subresource.to_string()),
                    ..ResourceAttributes::default()
                }),
                ..SelfSubjectAccessReviewSpec::default()
            },
            ..SelfSubjectAccessReview::default()
        };
        let answer = cluster
            .call(api.create(&PostParams::default(), &review))
            .await
            .map_err(|error| match error {
                CallError::Unreachable(why) => {
                    format!("the API server at {} is unreachable: {why}", cluster.server)
                }
                CallError::Api(status) => format!("{} ({})", status.message, status.code),
                CallError::Other(why) => why,
            })?;
        if !answer.status.is_some_and(|status| status.allowed) {
            let name = if subresource.is_empty() {
                resource.to_string()
            } else {
                format!("{resource}/{subresource}")
            };
            missing.push(format!("{verb} {name}"));
        }
    }
    Ok(missing)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeSet;

    /// `["a", "b"]` → a, b.
    fn list(text: &str) -> Vec<String> {
        text.trim()
            .trim_start_matches('[')
            .trim_end_matches(']')
            .split(',')
            .map(|item| item.trim().trim_matches('"').to_string())
            .filter(|item| !item.is_empty())
            .collect()
    }

    #[test]
    fn the_shipped_role_grants_exactly_what_the_tier_asks_for() {
        let role = include_str!("../../../../deploy/kubernetes/rbac.yaml");
        let mut granted = BTreeSet::new();
        let mut resources = Vec::new();
        for line in role.lines().map(str::trim) {
            if let Some(rest) = line.strip_prefix("resources:") {
                resources = list(rest);
            } else if let Some(rest) = line.strip_prefix("verbs:") {
                for resource in &resources {
                    for verb in list(rest) {
                        granted.insert(format!("{verb} {resource}"));
                    }
                }
            }
        }
        let needed: BTreeSet<String> = NEEDED
            .iter()
            .map(|(verb, _, resource, subresource)| {
                if subresource.is_empty() {
                    format!("{verb} {resource}")
                } else {
                    format!("{verb} {resource}/{subresource}")
                }
            })
            .collect();
        assert_eq!(granted, needed);
    }
}
