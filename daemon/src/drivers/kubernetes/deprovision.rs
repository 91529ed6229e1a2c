//! Tear-down: the Deployment, then the NetworkPolicy, then the Secret, then
//! the claim (its pods go with the Deployment, by the cluster's garbage
//! collector). The policy goes right after the Deployment: it must outlive
//! every runner the daemon could still start, and nothing of the sandbox
//! needs it once its Deployment is gone (a pod still in its termination
//! grace may outlive it by that grace). It is deleted whatever the
//! posture, so one left by an earlier daemon under a posture goes too. Not-found is
//! success at every step, so a repeated or interrupted deprovision finishes
//! the work. The claim goes only here, never on a scale-down, and stays
//! when the caller asks to keep the workspace.

use kube::api::{DeleteParams, PropagationPolicy};
use sandboxd_protocol::{DeprovisionReport, SandboxError};

use super::errors::Action;
use super::observe::Lookup;
use super::shapes::{claim_name, has_claim, secret_name};
use super::Inner;
use crate::sandbox_key::SandboxKey;

const DELETE_DEPLOYMENT: Action = Action::new("delete", "deployments");
const DELETE_SECRET: Action = Action::new("delete", "secrets");
const DELETE_CLAIM: Action = Action::new("delete", "persistentvolumeclaims");

/// Deletes the sandbox's objects. The caller holds the key's lock.
pub async fn deprovision(
    inner: &Inner,
    key: &SandboxKey,
    keep_workspace: bool,
) -> Result<DeprovisionReport, SandboxError> {
    if let Lookup::Foreign = inner.lookup(key).await? {
        return Err(SandboxError::FailedPrecondition(format!(
            "the Deployment named {} in namespace '{}' lacks sandboxd's labels for {} '{}': \
             sandboxd will not delete it",
            super::shapes::object_name(key),
            inner.cluster.namespace,
            key.scope,
            key.id
        )));
    }
    let params = DeleteParams {
        propagation_policy: Some(PropagationPolicy::Background),
        ..DeleteParams::default()
    };
    let context = format!(
        "cannot deprovision {} '{}' ({}) in namespace '{}'",
        key.scope, key.id, key.base_name, inner.cluster.namespace
    );
    let mut was_present = false;
    let gone = |action: Action, result| match result {
        Ok(_) => Ok(true),
        Err(error) if super::errors::CallError::is_not_found(&error) => Ok(false),
        Err(error) => Err(inner.cluster.error(&context, action, error)),
    };
    was_present |= gone(
        DELETE_DEPLOYMENT,
        inner
            .cluster
            .call(
                inner
                    .deployments()
                    .delete(&super::shapes::object_name(key), &params),
            )
            .await
            .map(|_| ()),
    )?;
    // The policy alone does not make a sandbox present.
    gone(
        super::network_policy::DELETE_POLICY,
        super::network_policy::delete(inner, key).await.map(|_| ()),
    )?;
    was_present |= gone(
        DELETE_SECRET,
        inner
            .cluster
            .call(inner.secrets().delete(&secret_name(key), &params))
            .await
            .map(|_| ()),
    )?;
    if has_claim(key.scope) && !keep_workspace {
        was_present |= gone(
            DELETE_CLAIM,
            inner
                .cluster
                .call(inner.claims().delete(&claim_name(key), &params))
                .await
                .map(|_| ()),
        )?;
    }
    // Only what was there: the server logs a deprovision of nothing.
    if was_present {
        tracing::info!(scope = %key.scope, id = %key.shown_id(), keep_workspace, "sandbox deprovisioned");
    }
    Ok(DeprovisionReport {
        was_present,
        forced: false,
    })
}
