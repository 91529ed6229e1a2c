//! `max_lifetime` on the kubernetes tier: a sandbox whose pod has run
//! longer than its scope allows is stopped as a pause is here, by scaling
//! its Deployment to 0 (the workspace claim is kept; the next `ensure`
//! starts a new pod, generation + 1), and the stop says why: the scale-down
//! writes [`ANNOTATION_STOPPED_FOR`] (`lifetime <generation> <ms>`) in the
//! same patch, which `describe` shows as `last exit: stopped: lifetime` and
//! the event stream announces as an `exited` event with that reason.
//!
//! A pod's lifetime runs from its `status.startTime` (the kubelet took it
//! on), else its runner's `running.startedAt`: one pod is one generation
//! (a scale-up makes a new pod), and the kubelet's restarts of a crashed
//! runner inside it count as the process tier's respawns do not: the
//! sandbox has run all along. There is no paused time to leave out: a
//! pause here is a stop too, and its pod is gone.
//!
//! `idle` is not applied on this tier: without a metrics API there is no
//! per-pod CPU figure, and idleness judged by output alone would stop a
//! runner that computes quietly. The daemon says so at start.
//!
//! One list of the instance's pods per tick (a quarter of the shortest
//! `max_lifetime`, within the shared bounds); each stop takes the
//! sandbox's lock and looks again (the same Deployment uid, still running)
//! and patches with the looked-at `resourceVersion` as a precondition, so
//! it never races an ensure, a deprovision or another daemon's stop.

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{ListParams, Patch};
use sandboxd_protocol::naming::{LABEL_MANAGED_BY, MANAGED_BY_VALUE};
use sandboxd_protocol::{ExitReason, ProbeState};

use super::errors::Action;
use super::observe::{
    generation_of, runner_status, selector, state_of, stopped_for_value, unix_ms, Lookup,
};
use super::shapes::{merge_params, object_name, ANNOTATION_STOPPED_FOR};
use super::Inner;
use crate::config::LifecycleConfig;
use crate::sandbox_key::SandboxKey;
use crate::unix_time::now_unix_ms;

const STOP: Action = Action::new("patch", "deployments");

/// When `pod` started running, in ms since the Unix epoch: its
/// `startTime`, else its runner's start. `None` for a pod being deleted
/// (its generation is over) or one not started yet.
fn started_unix_ms(pod: &Pod) -> Option<u64> {
    if pod.metadata.deletion_timestamp.is_some() {
        return None;
    }
    let runner_started = || {
        runner_status(pod)?
            .state
            .as_ref()?
            .running
            .as_ref()?
            .started_at
            .as_ref()
    };
    let time = pod
        .status
        .as_ref()?
        .start_time
        .as_ref()
        .or_else(runner_started)?;
    Some(unix_ms(time))
}

/// The sandbox `pod` runs, and how long it has run at `now_unix_ms`.
fn lifetime_of(pod: &Pod, now_unix_ms: u64) -> Option<(SandboxKey, Duration)> {
    let key = super::announce::key_of_pod(pod)?;
    let started = started_unix_ms(pod)?;
    Some((
        key,
        Duration::from_millis(now_unix_ms.saturating_sub(started)),
    ))
}

/// Looks every tick, for as long as the daemon runs.
pub async fn run(inner: Arc<Inner>, limits: LifecycleConfig) {
    let mut ticks = tokio::time::interval(crate::drivers::lifecycle::tick(&limits));
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let params = ListParams::default().labels(&selector(&[(LABEL_MANAGED_BY, MANAGED_BY_VALUE)]));
    loop {
        ticks.tick().await;
        // An unreachable API server is reported by the calls that need it.
        let Ok(pods) = inner.cluster.call(inner.pods_api().list(&params)).await else {
            continue;
        };
        let now = now_unix_ms();
        for (key, lifetime) in pods.items.iter().filter_map(|pod| lifetime_of(pod, now)) {
            let Some(max) = limits.of(key.scope).max_lifetime else {
                continue;
            };
            if lifetime >= max {
                stop_for_lifetime(&inner, &key, lifetime).await;
            }
        }
    }
}

/// Scales `key`'s Deployment to 0 with the reason, if it still runs.
async fn stop_for_lifetime(inner: &Inner, key: &SandboxKey, lifetime: Duration) {
    let _guard = inner.key_locks.lock(key).await;
    let Ok(Lookup::Ours(deployment)) = inner.lookup(key).await else {
        return;
    };
    if state_of(&deployment) != ProbeState::Running {
        return;
    }
    let generation = generation_of(&deployment);
    match patch_stop(inner, key, &deployment, generation).await {
        Ok(()) => tracing::info!(
            scope = %key.scope,
            id = %key.shown_id(),
            generation,
            lifetime_ms = lifetime.as_millis() as u64,
            "stopped the sandbox at its max_lifetime (scaled to 0; the next ensure starts a new pod)"
        ),
        Err(error) if error.is_conflict() || error.is_not_found() => {
            tracing::debug!(scope = %key.scope, id = %key.shown_id(), "changed since the look: the lifetime stop is left to the next tick");
        }
        Err(error) => {
            let error = inner.cluster.error(
                &format!("cannot stop {} at its max_lifetime", key.what()),
                STOP,
                error,
            );
            tracing::warn!(scope = %key.scope, id = %key.shown_id(), %error, "lifetime stop failed; trying again at the next tick");
        }
    }
}

/// One merge patch: the reason and `replicas: 0`, on the version looked at.
async fn patch_stop(
    inner: &Inner,
    key: &SandboxKey,
    deployment: &Deployment,
    generation: u64,
) -> Result<(), super::errors::CallError> {
    let reason = stopped_for_value(ExitReason::Lifetime, generation, now_unix_ms());
    let patch = serde_json::json!({
        "metadata": {
            "resourceVersion": deployment.metadata.resource_version,
            "annotations": { ANNOTATION_STOPPED_FOR: reason },
        },
        "spec": { "replicas": 0 },
    });
    inner
        .cluster
        .call(
            inner
                .deployments()
                .patch(&object_name(key), &merge_params(), &Patch::Merge(&patch)),
        )
        .await
        .map(|_| ())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn pod(status: serde_json::Value, deleted: bool) -> Pod {
        let mut metadata = json!({"name": "p", "labels": {
            "stigmer.ai/managed-by": "stigmer-server",
            "stigmer.ai/scope": "session",
            "stigmer.ai/sandbox-id": "s1",
        }});
        if deleted {
            metadata["deletionTimestamp"] = json!("2026-01-01T00:10:00Z");
        }
        serde_json::from_value(json!({"metadata": metadata, "status": status})).unwrap()
    }

    #[test]
    fn a_pods_lifetime_runs_from_its_start_time_else_its_runners_start() {
        let at = |text: &str| {
            let time: k8s_openapi::apimachinery::pkg::apis::meta::v1::Time =
                serde_json::from_value(json!(text)).unwrap();
            u64::try_from(time.0.as_millisecond()).unwrap()
        };
        let now = at("2026-01-01T01:00:00Z");
        let by_start_time = pod(json!({"startTime": "2026-01-01T00:00:00Z"}), false);
        let (key, lifetime) = lifetime_of(&by_start_time, now).unwrap();
        assert_eq!(key.id, "s1");
        assert_eq!(lifetime, Duration::from_secs(3600));
        let by_runner = pod(
            json!({"containerStatuses": [{"name": "runner", "image": "i", "imageID": "",
                "ready": true, "restartCount": 0,
                "state": {"running": {"startedAt": "2026-01-01T00:30:00Z"}}}]}),
            false,
        );
        assert_eq!(
            lifetime_of(&by_runner, now).unwrap().1,
            Duration::from_secs(1800)
        );
        assert!(lifetime_of(&pod(json!({"phase": "Pending"}), false), now).is_none());
        let going = pod(json!({"startTime": "2026-01-01T00:00:00Z"}), true);
        assert!(
            lifetime_of(&going, now).is_none(),
            "a pod being deleted is its generation's end"
        );
    }
}
