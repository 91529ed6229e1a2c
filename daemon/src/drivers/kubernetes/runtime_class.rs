//! `[kubernetes] runtime_class`: the RuntimeClass (node.k8s.io/v1) every
//! runner pod names in `runtimeClassName`, such as one whose handler is
//! gVisor's `runsc`, so the runner gets a kernel of its own.
//!
//! A pod naming a class the cluster lacks is refused by the API server's
//! admission, and a Deployment's pods then never appear: every ensure
//! would hang on a sandbox that never starts. So the daemon asks at start
//! and refuses to start without the class, naming the classes the cluster
//! has when it may list them. RuntimeClasses are cluster-wide: the daemon's
//! identity needs `get` (and, for the names, `list`) on
//! `runtimeclasses.node.k8s.io` in a ClusterRole. An API server that does
//! not answer now is not checked (the daemon starts either way, as for
//! everything else on this tier).

use k8s_openapi::api::node::v1::RuntimeClass;
use kube::Api;

use super::config::Cluster;
use super::errors::CallError;

/// Checks that the class `name` exists on `cluster`.
pub async fn check(cluster: &Cluster, name: &str) -> anyhow::Result<()> {
    let classes: Api<RuntimeClass> = Api::all(cluster.client.clone());
    let server = &cluster.server;
    match cluster.call(classes.get(name)).await {
        Ok(class) => {
            tracing::info!(runtime_class = %name, handler = %class.handler, "[kubernetes] runtime_class exists: every runner pod names it");
            Ok(())
        }
        Err(error) if error.is_not_found() => {
            let have = match cluster.call(classes.list(&Default::default())).await {
                Ok(list) if list.items.is_empty() => "it has none".to_string(),
                Ok(list) => format!(
                    "it has {}",
                    list.items
                        .iter()
                        .filter_map(|class| class.metadata.name.as_deref())
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
                Err(_) => "kubectl get runtimeclasses lists those it has".to_string(),
            };
            anyhow::bail!(
                "[kubernetes] runtime_class '{name}': the cluster at {server} has no RuntimeClass of that name \
                 ({have}); create one whose handler is the nodes' runtime (runsc for gVisor), or leave the key \
                 out for the cluster's default runtime"
            )
        }
        Err(CallError::Api(status)) if matches!(status.code, 401 | 403) => anyhow::bail!(
            "[kubernetes] runtime_class '{name}' cannot be checked: the API server at {server} refused get \
             runtimeclasses.node.k8s.io ({}); grant get and list on it in a ClusterRole (RuntimeClasses are cluster-wide)",
            status.message
        ),
        Err(CallError::Unreachable(why)) => {
            tracing::warn!(runtime_class = %name, %server, %why, "cannot reach the API server: [kubernetes] runtime_class is not checked; a pod naming a class the cluster lacks is refused by it");
            Ok(())
        }
        Err(CallError::Api(status)) => anyhow::bail!(
            "cannot check [kubernetes] runtime_class '{name}' at {server}: {} {}",
            status.code,
            status.message
        ),
        Err(CallError::Other(why)) => {
            anyhow::bail!("cannot check [kubernetes] runtime_class '{name}' at {server}: {why}")
        }
    }
}
