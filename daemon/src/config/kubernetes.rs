//! `[kubernetes]`: how the kubernetes tier reaches the API server and
//! shapes each runner's objects.

use std::path::PathBuf;
use std::time::Duration;

use anyhow::bail;
use serde::Deserialize;

use super::values::{deserialize_duration, deserialize_optional_duration};

/// Where the kubernetes tier puts its objects when neither
/// `STIGMER_SANDBOX_K8S_NAMESPACE` nor `[kubernetes] namespace` says.
pub const DEFAULT_K8S_NAMESPACE: &str = "stigmer-sandboxes";

/// The `[kubernetes]` table: how the kubernetes tier reaches the API server
/// and shapes each runner's objects. Every key has a default; unknown keys
/// are an error.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct KubernetesConfig {
    /// A kubeconfig file; unset means what every Kubernetes tool does:
    /// `KUBECONFIG`, then `~/.kube/config`, then the pod's service account.
    pub kubeconfig: Option<PathBuf>,
    /// The kubeconfig context to use; unset means its current context.
    pub context: Option<String>,
    /// Where the sandboxes' objects live. `STIGMER_SANDBOX_K8S_NAMESPACE`
    /// beats it; default [`DEFAULT_K8S_NAMESPACE`].
    pub namespace: String,
    /// The longest one call to the API server may take.
    #[serde(deserialize_with = "deserialize_duration")]
    pub request_timeout: Duration,
    /// The runner's command line; `None` runs the image's own entrypoint.
    pub command: Option<Vec<String>>,
    /// The runner container's resources, as Kubernetes quantities.
    pub cpu_request: String,
    pub memory_request: String,
    pub cpu_limit: String,
    pub memory_limit: String,
    /// The size of a session's or workflow's workspace claim.
    pub workspace_size: String,
    /// The claim's storage class; unset means the cluster's default.
    pub storage_class: Option<String>,
    /// `Always`, `IfNotPresent` or `Never`.
    pub image_pull_policy: String,
    /// Names of docker-registry Secrets in the namespace for pulling the image.
    pub image_pull_secrets: Vec<String>,
    /// A connect sandbox older than this is a leak and is removed. The old
    /// key: `[lifecycle.connect] ttl` is the one to write now (see
    /// [`lifecycle`]); resolved, this is always set, to the TTL in force.
    #[serde(deserialize_with = "deserialize_optional_duration")]
    pub connect_ttl: Option<Duration>,
    /// A connect sandbox younger than this is never touched by the reaper.
    #[serde(deserialize_with = "deserialize_duration")]
    pub connect_creation_grace: Duration,
    /// The RuntimeClass (node.k8s.io/v1) every runner pod names in
    /// `runtimeClassName` (one whose handler is gVisor's `runsc`, say);
    /// `None` is the cluster's default runtime. Checked at start.
    pub runtime_class: Option<String>,
}

impl Default for KubernetesConfig {
    fn default() -> Self {
        KubernetesConfig {
            kubeconfig: None,
            context: None,
            namespace: DEFAULT_K8S_NAMESPACE.to_string(),
            request_timeout: Duration::from_secs(5),
            command: None,
            cpu_request: "500m".to_string(),
            memory_request: "512Mi".to_string(),
            cpu_limit: "2".to_string(),
            memory_limit: "2Gi".to_string(),
            workspace_size: "10Gi".to_string(),
            storage_class: None,
            image_pull_policy: "IfNotPresent".to_string(),
            image_pull_secrets: Vec::new(),
            connect_ttl: None,
            connect_creation_grace: Duration::from_secs(120),
            runtime_class: None,
        }
    }
}

impl KubernetesConfig {
    pub(super) fn validate(&self) -> anyhow::Result<()> {
        if self.namespace.is_empty() {
            bail!("[kubernetes] namespace must not be empty");
        }
        if self.request_timeout.is_zero() || self.request_timeout > Duration::from_secs(300) {
            bail!(
                "[kubernetes] request_timeout {:?} must be longer than 0 and at most 5m",
                self.request_timeout
            );
        }
        if let Some(command) = &self.command {
            if command.first().is_none_or(String::is_empty) {
                bail!("[kubernetes] command {command:?} must name a program first");
            }
        }
        for (key, value) in [
            ("cpu_request", &self.cpu_request),
            ("memory_request", &self.memory_request),
            ("cpu_limit", &self.cpu_limit),
            ("memory_limit", &self.memory_limit),
            ("workspace_size", &self.workspace_size),
        ] {
            if value.is_empty() {
                bail!("[kubernetes] {key} must not be empty");
            }
        }
        if !["Always", "IfNotPresent", "Never"].contains(&self.image_pull_policy.as_str()) {
            bail!(
                "[kubernetes] image_pull_policy '{}' must be Always, IfNotPresent or Never",
                self.image_pull_policy
            );
        }
        if self.connect_ttl.is_some_and(|ttl| ttl.is_zero()) {
            bail!("[kubernetes] connect_ttl must be longer than 0");
        }
        if let Some(class) = &self.runtime_class {
            if !is_dns_subdomain(class) {
                bail!(
                    "[kubernetes] runtime_class '{class}' is not a RuntimeClass name: at most 253 \
                     lower-case letters, digits, '-' and '.', starting and ending with a letter or digit"
                );
            }
        }
        Ok(())
    }
}

/// A Kubernetes object name (RFC 1123 subdomain), as the API server checks
/// a RuntimeClass's: said at start rather than by a refused pod.
fn is_dns_subdomain(name: &str) -> bool {
    let edge = |c: Option<char>| c.is_some_and(|c| c.is_ascii_lowercase() || c.is_ascii_digit());
    name.len() <= 253
        && edge(name.chars().next())
        && edge(name.chars().last())
        && name
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-' || c == '.')
}
