//! The ensure state machine, driven by the Deployment's desired replicas.
//!
//! | the cluster says        | ensure does                                          |
//! |-------------------------|------------------------------------------------------|
//! | replicas ≥ 1            | nothing (fast path: one GET, no write)               |
//! | replicas 0              | apply the Secret, the NetworkPolicy and the          |
//! |                         | Deployment (the token, the queue), then scale to 1   |
//! |                         | through `deployments/scale`                          |
//! | no such Deployment      | apply Secret, create the claim, apply the            |
//! |                         | NetworkPolicy, apply the Deployment                  |
//!
//! No readiness wait: a runner that never polls shows up upstream as a
//! schedule-to-start timeout. Every write is a server-side apply (or a
//! create) with field manager `sandboxd`, so a repeated ensure finishes
//! whatever an interrupted one left half-made: the next one sees no
//! Deployment and applies all three again, keeping the claim. A 409 means
//! the object changed under us: look again.

use k8s_openapi::api::apps::v1::Deployment;
use kube::api::{Patch, PatchParams, PostParams};
use sandboxd_protocol::{EnsureReport, ProbeState, SandboxEnv, SandboxError, Scope};

use super::errors::{Action, CallError};
use super::observe::{annotation, differs_from, generation_of, state_of, Lookup};
use super::shapes::{has_claim, secret_name, ANNOTATION_TOKEN_SHA256, FIELD_MANAGER};
use super::Inner;
use crate::drivers::differs::token_digest;
use crate::sandbox_key::SandboxKey;

/// How many looks at the Deployment one ensure takes before giving up on
/// one that keeps changing under it.
const MAX_STEPS: usize = 5;

const APPLY_SECRET: Action = Action::new("patch", "secrets");
const CREATE_CLAIM: Action = Action::new("create", "persistentvolumeclaims");
const GET_CLAIM: Action = Action::new("get", "persistentvolumeclaims");
const APPLY_DEPLOYMENT: Action = Action::new("patch", "deployments");
const SCALE: Action = Action::new("patch", "deployments/scale");

/// A write that lost a race and should be retried after a fresh look.
enum Step {
    Done(EnsureReport),
    LookAgain,
}

fn apply_params() -> PatchParams {
    PatchParams::apply(FIELD_MANAGER).force()
}

/// Brings the sandbox to running. The caller holds the key's lock.
///
/// `absent` says the caller's own look, just before it took the lock, found
/// no Deployment: that look stands in for the first one here. Provisioning
/// is idempotent (applies, and a create whose conflict keeps the claim), so
/// even if a concurrent ensure made the sandbox in between, repeating its
/// writes changes nothing. Any other state is looked at again under the lock.
pub async fn ensure(
    inner: &Inner,
    key: &SandboxKey,
    env: &SandboxEnv,
    mut absent: bool,
) -> Result<EnsureReport, SandboxError> {
    for _ in 0..MAX_STEPS {
        let lookup = if std::mem::take(&mut absent) {
            Lookup::Absent
        } else {
            inner.lookup(key).await?
        };
        let step =
            match lookup {
                Lookup::Absent => provision(inner, key, env).await?,
                Lookup::Foreign => {
                    return Err(SandboxError::FailedPrecondition(format!(
                    "a Deployment named {} exists in namespace '{}' without sandboxd's labels for \
                     {} '{}': sandboxd will not touch it; remove or rename it",
                    super::shapes::object_name(key), inner.cluster.namespace, key.scope, key.id
                )))
                }
                Lookup::Ours(deployment) => existing(inner, key, env, &deployment).await?,
            };
        if let Step::Done(report) = step {
            return Ok(report);
        }
    }
    Err(SandboxError::Unavailable(format!(
        "the Deployment of {} '{}' ({}) kept changing while ensuring it; try again",
        key.scope, key.id, key.base_name
    )))
}

fn failure(inner: &Inner, key: &SandboxKey, action: Action, error: CallError) -> SandboxError {
    let context = format!(
        "cannot ensure {} '{}' ({}) in namespace '{}'",
        key.scope, key.id, key.base_name, inner.cluster.namespace
    );
    inner.cluster.error(&context, action, error)
}

/// `Ok(LookAgain)` on a 409, the caller's error otherwise.
fn or_look_again<T>(
    inner: &Inner,
    key: &SandboxKey,
    action: Action,
    result: Result<T, CallError>,
) -> Result<Option<T>, SandboxError> {
    match result {
        Ok(value) => Ok(Some(value)),
        Err(error) if error.is_conflict() => {
            tracing::info!(scope = %key.scope, id = %key.id, %action, "conflict; looking again");
            Ok(None)
        }
        Err(error) => Err(failure(inner, key, action, error)),
    }
}

/// The sandbox's NetworkPolicy, before any runner of it starts.
async fn apply_policy(inner: &Inner, key: &SandboxKey) -> Result<Option<()>, SandboxError> {
    match super::network_policy::ensure(inner, key).await {
        Ok(done) => Ok(done),
        Err((action, error)) => Err(failure(inner, key, action, error)),
    }
}

/// No Deployment: Secret, claim, NetworkPolicy, Deployment, in that order.
async fn provision(
    inner: &Inner,
    key: &SandboxKey,
    env: &SandboxEnv,
) -> Result<Step, SandboxError> {
    if apply_secret(inner, key, env).await?.is_none() {
        return Ok(Step::LookAgain);
    }
    if has_claim(key.scope) {
        let claim = inner.shape.claim(key);
        let params = PostParams {
            field_manager: Some(FIELD_MANAGER.to_string()),
            ..PostParams::default()
        };
        match inner
            .cluster
            .call(inner.claims().create(&params, &claim))
            .await
        {
            Ok(_) => tracing::info!(scope = %key.scope, id = %key.id, "workspace claim created"),
            // An existing claim is kept, never replaced: it holds the workspace.
            Err(error) if error.is_conflict() => existing_claim(inner, key).await?,
            Err(error) => return Err(failure(inner, key, CREATE_CLAIM, error)),
        }
    }
    if apply_policy(inner, key).await?.is_none() {
        return Ok(Step::LookAgain);
    }
    let generation = 1;
    let deployment = inner.shape.deployment(key, env, generation, Some(1));
    let result = inner
        .cluster
        .call(inner.deployments().patch(
            &super::shapes::object_name(key),
            &apply_params(),
            &Patch::Apply(&deployment),
        ))
        .await;
    let Some(applied) = or_look_again(inner, key, APPLY_DEPLOYMENT, result)? else {
        return Ok(Step::LookAgain);
    };
    tracing::info!(scope = %key.scope, id = %key.id, namespace = %inner.cluster.namespace, generation, "sandbox provisioned");
    Ok(Step::Done(EnsureReport {
        state: state_of(&applied),
        created: true,
        generation,
        pid: None,
        differs: Vec::new(),
        uid: super::observe::uid_of(&applied),
    }))
}

/// The claim exists: keep it, unless it is on its way out (a deprovision's
/// delete waits on `kubernetes.io/pvc-protection` until no pod uses it). A
/// Deployment made now would wait for a claim that is about to vanish.
async fn existing_claim(inner: &Inner, key: &SandboxKey) -> Result<(), SandboxError> {
    let name = super::shapes::claim_name(key);
    let claim = inner
        .cluster
        .call(inner.claims().get_opt(&name))
        .await
        .map_err(|error| failure(inner, key, GET_CLAIM, error))?;
    if claim.is_some_and(|claim| claim.metadata.deletion_timestamp.is_some()) {
        return Err(SandboxError::Unavailable(format!(
            "the workspace claim {name} of {} '{}' is still being deleted (a deprovision waits for \
             its pods to go); try again",
            key.scope, key.id
        )));
    }
    tracing::info!(scope = %key.scope, id = %key.id, "keeping the existing workspace claim");
    Ok(())
}

async fn apply_secret(
    inner: &Inner,
    key: &SandboxKey,
    env: &SandboxEnv,
) -> Result<Option<()>, SandboxError> {
    let secret = inner.shape.secret(key, env);
    let result = inner
        .cluster
        .call(
            inner
                .secrets()
                .patch(&secret_name(key), &apply_params(), &Patch::Apply(&secret)),
        )
        .await;
    Ok(or_look_again(inner, key, APPLY_SECRET, result)?.map(|_| ()))
}

/// A Deployment of ours exists.
async fn existing(
    inner: &Inner,
    key: &SandboxKey,
    env: &SandboxEnv,
    deployment: &Deployment,
) -> Result<Step, SandboxError> {
    if super::observe::is_being_deleted(deployment) {
        // Scaling it up, or calling it running, would answer for a sandbox
        // the cluster is about to remove; a new one needs the name free.
        return Err(SandboxError::Unavailable(format!(
            "the Deployment {} of {} '{}' is still being deleted (finalizers: {}); try again \
             once it is gone",
            super::shapes::object_name(key),
            key.scope,
            key.id,
            deployment
                .metadata
                .finalizers
                .as_deref()
                .unwrap_or_default()
                .join(", ")
        )));
    }
    let generation = generation_of(deployment);
    let state = state_of(deployment);
    // A connect sandbox is request-scoped: create_connect refuses one that
    // exists, whatever its state.
    if state == ProbeState::Running || key.scope == Scope::Connect {
        return Ok(Step::Done(EnsureReport {
            state,
            created: false,
            generation,
            pid: None,
            differs: differs_from(deployment, env),
            uid: super::observe::uid_of(deployment),
        }));
    }
    // Stopped. The new runner must not start with a stale token or queue:
    // the Secret first (always: applying an unchanged one changes nothing,
    // and it puts back one deleted behind our back), then the NetworkPolicy
    // (the same: put back, or brought to the posture now configured), then
    // the Deployment (its annotations, environment and the next
    // generation), then the scale.
    if annotation(deployment, ANNOTATION_TOKEN_SHA256)
        != Some(token_digest(&env.stigmer_token).as_str())
    {
        tracing::info!(scope = %key.scope, id = %key.id, "the token changed: updating the Secret before scaling up");
    }
    if apply_secret(inner, key, env).await?.is_none() {
        return Ok(Step::LookAgain);
    }
    if apply_policy(inner, key).await?.is_none() {
        return Ok(Step::LookAgain);
    }
    let next = generation + 1;
    let updated = inner.shape.deployment(key, env, next, None);
    let result = inner
        .cluster
        .call(inner.deployments().patch(
            &super::shapes::object_name(key),
            &apply_params(),
            &Patch::Apply(&updated),
        ))
        .await;
    if or_look_again(inner, key, APPLY_DEPLOYMENT, result)?.is_none() {
        return Ok(Step::LookAgain);
    }
    let scale = serde_json::json!({ "spec": { "replicas": 1 } });
    let result = inner
        .cluster
        .call(inner.deployments().patch_scale(
            &super::shapes::object_name(key),
            &super::shapes::merge_params(),
            &Patch::Merge(&scale),
        ))
        .await;
    match result {
        Ok(_) => {}
        // Deleted since the look: provision it anew.
        Err(error) if error.is_not_found() => return Ok(Step::LookAgain),
        Err(error) if error.is_conflict() => return Ok(Step::LookAgain),
        Err(error) => return Err(failure(inner, key, SCALE, error)),
    }
    tracing::info!(scope = %key.scope, id = %key.id, generation = next, "scaled the stopped sandbox to 1");
    Ok(Step::Done(EnsureReport {
        state: ProbeState::Running,
        created: true,
        generation: next,
        pid: None,
        differs: Vec::new(),
        uid: super::observe::uid_of(deployment),
    }))
}
