//! `pause` on the kubernetes tier: the Deployment scaled to 0. That is a
//! stop, not a pause — the runner's pod is terminated and its memory is
//! gone; only the workspace claim is kept — because a pod cannot be frozen
//! through the API. `probe` and `describe` then say `stopped` (never
//! `paused`), and the next `ensure` starts a new pod (generation + 1), as
//! for any stopped sandbox. `resume` is refused with that explanation:
//! without the caller's token the daemon must not start a runner.

use kube::api::Patch;
use sandboxd_protocol::{PauseReport, ProbeState, SandboxError};

use super::errors::Action;
use super::observe::{generation_of, state_of, Lookup};
use super::shapes::{merge_params, object_name};
use super::Inner;
use crate::sandbox_key::SandboxKey;

const SCALE: Action = Action::new("patch", "deployments/scale");

impl Inner {
    /// Scales `key`'s Deployment to 0; one already at 0 is success.
    pub(super) async fn scale_to_zero(
        &self,
        key: &SandboxKey,
    ) -> Result<PauseReport, SandboxError> {
        let _guard = self.key_locks.lock(key).await;
        let Lookup::Ours(deployment) = self.lookup(key).await? else {
            return Err(SandboxError::FailedPrecondition(format!(
                "{} has no running runner to pause (ensure starts one)",
                key.what()
            )));
        };
        let generation = generation_of(&deployment);
        let report = |changed| PauseReport {
            changed,
            generation,
            pid: None,
            paused_since_unix_ms: None,
        };
        if state_of(&deployment) == ProbeState::Stopped {
            return Ok(report(false));
        }
        let scale = serde_json::json!({ "spec": { "replicas": 0 } });
        self.cluster
            .call(self.deployments().patch_scale(
                &object_name(key),
                &merge_params(),
                &Patch::Merge(&scale),
            ))
            .await
            .map_err(|error| {
                let context = format!(
                    "cannot pause (scale to 0) {} in namespace '{}'",
                    key.what(),
                    self.cluster.namespace
                );
                self.cluster.error(&context, SCALE, error)
            })?;
        tracing::info!(scope = %key.scope, id = %key.shown_id(), generation, "scaled the sandbox to 0 for a pause (on kubernetes a stop: the next ensure starts a new pod)");
        Ok(report(true))
    }
}

/// Why `resume` is refused on this tier.
pub fn no_resume(key: &SandboxKey) -> SandboxError {
    SandboxError::FailedPrecondition(format!(
        "{}: on the kubernetes tier a pause is a stop (the Deployment scaled to 0); ensure starts it again, with a new pod (generation + 1)",
        key.what()
    ))
}
