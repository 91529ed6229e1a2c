//! What the cluster says about a sandbox, in the daemon's terms: probe from
//! the Deployment's desired replicas, describe and list from the
//! Deployment and its newest pod. Nothing is kept in the daemon: `list` is
//! one label-selected listing of Deployments and one of pods, so a
//! restarted daemon sees every sandbox at once.

use std::collections::BTreeMap;

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{ContainerStateTerminated, ContainerStatus, Pod};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::api::ListParams;
use sandboxd_protocol::naming::{
    LABEL_MANAGED_BY, LABEL_SANDBOX_ID, LABEL_SCOPE, MANAGED_BY_VALUE,
};
use sandboxd_protocol::{
    ClusterState, ExitInfo, ExitReason, ProbeState, SandboxEnv, SandboxError, SandboxInfo, Scope,
};

use super::errors::Action;
use super::shapes::object_name;
use super::shapes::{
    ANNOTATION_CALLER_CLASS, ANNOTATION_GENERATION, ANNOTATION_STOPPED_FOR, ANNOTATION_TASK_QUEUE,
    ANNOTATION_TOKEN_SHA256, CONTAINER,
};
use super::Inner;
use crate::drivers::differs::{differing_fields, RunsWith, TokenDigest};
use crate::instance::{Instance, LABEL_INSTANCE};
use crate::sandbox_key::SandboxKey;

const GET_DEPLOYMENT: Action = Action::new("get", "deployments");
const LIST_DEPLOYMENTS: Action = Action::new("list", "deployments");
const LIST_PODS: Action = Action::new("list", "pods");

/// The sandbox's Deployment, as far as it concerns us.
pub enum Lookup {
    Absent,
    /// An object by our name without our labels: never touched.
    Foreign,
    Ours(Box<Deployment>),
}

/// The sandbox a Deployment belongs to, from its labels and name: `None`
/// unless it is ours and this daemon's instance's (another instance's
/// Deployment is never adopted, listed, reaped or removed).
pub fn key_of(deployment: &Deployment) -> Option<SandboxKey> {
    let labels = deployment.metadata.labels.as_ref()?;
    if labels.get(LABEL_MANAGED_BY).map(String::as_str) != Some(MANAGED_BY_VALUE) {
        return None;
    }
    if !Instance::current().owns_label(labels.get(LABEL_INSTANCE).map(String::as_str)) {
        return None;
    }
    let scope: Scope = labels.get(LABEL_SCOPE)?.parse().ok()?;
    let key = SandboxKey::new(scope, labels.get(LABEL_SANDBOX_ID)?.clone());
    (deployment.metadata.name.as_deref() == Some(object_name(&key).as_str())).then_some(key)
}

/// The replicas the Deployment asks for (the API server defaults it to 1).
pub fn desired_replicas(deployment: &Deployment) -> i32 {
    deployment.spec.replicas.unwrap_or(1)
}

/// Running when it asks for a replica; a Deployment being deleted (held
/// by a finalizer, e.g. `foregroundDeletion` while the garbage collector
/// removes its pods) is stopped whatever it asks: its runner is going.
pub fn state_of(deployment: &Deployment) -> ProbeState {
    if desired_replicas(deployment) > 0 && !is_being_deleted(deployment) {
        ProbeState::Running
    } else {
        ProbeState::Stopped
    }
}

/// True once a delete was asked for and finalizers still hold the object.
pub fn is_being_deleted(deployment: &Deployment) -> bool {
    deployment.metadata.deletion_timestamp.is_some()
}

pub fn annotation<'a>(deployment: &'a Deployment, name: &str) -> Option<&'a str> {
    deployment
        .metadata
        .annotations
        .as_ref()?
        .get(name)
        .map(String::as_str)
}

/// The fields of `requested` the Deployment's runner does not run with,
/// from its annotations (the token by its SHA-256: the Deployment never
/// holds the token).
pub fn differs_from(deployment: &Deployment, requested: &SandboxEnv) -> Vec<String> {
    let runs_with = RunsWith {
        task_queue: annotation(deployment, ANNOTATION_TASK_QUEUE).unwrap_or_default(),
        caller_class: annotation(deployment, ANNOTATION_CALLER_CLASS).unwrap_or_default(),
        token_sha256: annotation(deployment, ANNOTATION_TOKEN_SHA256).map(TokenDigest::Hex),
    };
    differing_fields(requested, &runs_with)
}

/// The incarnation's uid: the Deployment's own `metadata.uid` (the API
/// server's random 128-bit id, new at each create, kept while the object
/// lives: across scale-downs, respawns and daemon restarts), without its
/// dashes, as the other tiers write theirs.
pub fn uid_of(deployment: &Deployment) -> String {
    deployment
        .metadata
        .uid
        .as_deref()
        .unwrap_or_default()
        .replace('-', "")
}

/// The exit proof of a generation the daemon stopped by itself (see
/// [`ANNOTATION_STOPPED_FOR`]): `Some` only while the Deployment is
/// stopped at that same generation.
pub fn stopped_for(deployment: &Deployment) -> Option<ExitInfo> {
    let text = annotation(deployment, ANNOTATION_STOPPED_FOR)?;
    let mut words = text.split(' ');
    let reason = match words.next()? {
        "lifetime" => ExitReason::Lifetime,
        _ => return None,
    };
    let generation: u64 = words.next()?.parse().ok()?;
    let at_unix_ms: u64 = words.next()?.parse().ok()?;
    if generation != generation_of(deployment) || state_of(deployment) != ProbeState::Stopped {
        return None;
    }
    let mut exit = ExitInfo::from_facts(None, None, at_unix_ms, false);
    exit.reason = reason;
    Some(exit)
}

/// The [`ANNOTATION_STOPPED_FOR`] value for `generation` stopped now.
pub fn stopped_for_value(reason: ExitReason, generation: u64, at_unix_ms: u64) -> String {
    format!("{} {generation} {at_unix_ms}", reason.as_str())
}

pub fn generation_of(deployment: &Deployment) -> u64 {
    annotation(deployment, ANNOTATION_GENERATION)
        .and_then(|text| text.parse().ok())
        .unwrap_or(1)
}

/// `a=b,c=d` for these labels, and this daemon's instance's term (see
/// [`Instance::selector_term`]): every listing the tier makes is of its
/// own instance's objects only.
pub fn selector(labels: &[(&str, &str)]) -> String {
    labels
        .iter()
        .map(|(name, value)| format!("{name}={value}"))
        .chain([Instance::current().selector_term()])
        .collect::<Vec<_>>()
        .join(",")
}

impl Inner {
    fn context(key: &SandboxKey, what: &str) -> String {
        format!(
            "cannot {what} {} '{}' ({})",
            key.scope, key.id, key.base_name
        )
    }

    /// One GET of the sandbox's Deployment.
    pub async fn lookup(&self, key: &SandboxKey) -> Result<Lookup, SandboxError> {
        let found = self
            .cluster
            .call(self.deployments().get_opt(&object_name(key)))
            .await
            .map_err(|error| {
                self.cluster
                    .error(&Self::context(key, "look up"), GET_DEPLOYMENT, error)
            })?;
        Ok(match found {
            None => Lookup::Absent,
            Some(deployment) if key_of(&deployment).as_ref() == Some(key) => {
                Lookup::Ours(Box::new(deployment))
            }
            Some(_) => Lookup::Foreign,
        })
    }

    pub async fn probe(&self, key: &SandboxKey) -> Result<ProbeState, SandboxError> {
        Ok(match self.lookup(key).await? {
            Lookup::Ours(deployment) => state_of(&deployment),
            Lookup::Absent | Lookup::Foreign => ProbeState::Absent,
        })
    }

    /// `key`'s pods (this daemon's), newest first (see [`Self::pods`]).
    pub async fn sandbox_pods(
        &self,
        key: &SandboxKey,
        context: &str,
    ) -> Result<Vec<Pod>, SandboxError> {
        let labels = [
            (LABEL_SANDBOX_ID, key.id.as_str()),
            (LABEL_MANAGED_BY, MANAGED_BY_VALUE),
        ];
        self.pods(&labels, context).await
    }

    /// The pods carrying these labels, newest first.
    pub async fn pods(
        &self,
        labels: &[(&str, &str)],
        context: &str,
    ) -> Result<Vec<Pod>, SandboxError> {
        let params = ListParams::default().labels(&selector(labels));
        let mut pods = self
            .cluster
            .call(self.pods_api().list(&params))
            .await
            .map_err(|error| self.cluster.error(context, LIST_PODS, error))?
            .items;
        pods.sort_by(|a, b| {
            let created = |pod: &Pod| pod.metadata.creation_timestamp.clone().map(|time| time.0);
            created(b).cmp(&created(a))
        });
        Ok(pods)
    }

    pub async fn describe(&self, key: &SandboxKey) -> Result<SandboxInfo, SandboxError> {
        let Lookup::Ours(deployment) = self.lookup(key).await? else {
            return Ok(SandboxInfo::absent(key.scope, &key.id, 0, None));
        };
        let context = Self::context(key, "describe");
        let pods = self.sandbox_pods(key, &context).await?;
        let mut info = info(key, &deployment, pods.first());
        info.isolation.push(runtime_of(&deployment));
        if let (Some(pod), Some(cluster)) = (pods.first(), info.cluster.as_mut()) {
            if super::pending::is_pending(pod) {
                cluster.pending_reason = Some(super::pending::why(self, pod).await);
            }
        }
        Ok(info)
    }

    pub async fn list(&self, scope: Option<Scope>) -> Result<Vec<SandboxInfo>, SandboxError> {
        let mut labels = vec![(LABEL_MANAGED_BY, MANAGED_BY_VALUE)];
        if let Some(scope) = scope {
            labels.push((LABEL_SCOPE, scope.as_str()));
        }
        let context = "cannot list the sandboxes";
        let params = ListParams::default().labels(&selector(&labels));
        let deployments = self
            .cluster
            .call(self.deployments().list(&params))
            .await
            .map_err(|error| self.cluster.error(context, LIST_DEPLOYMENTS, error))?
            .items;
        // Newest first, so the first pod seen of a sandbox is its newest.
        let mut newest: BTreeMap<String, Pod> = BTreeMap::new();
        for pod in self.pods(&labels, context).await? {
            let id = pod
                .metadata
                .labels
                .as_ref()
                .and_then(|labels| labels.get(LABEL_SANDBOX_ID))
                .cloned();
            if let Some(id) = id {
                newest.entry(id).or_insert(pod);
            }
        }
        Ok(deployments
            .iter()
            .filter_map(|deployment| {
                let key = key_of(deployment)?;
                let pod = newest.get(&key.id);
                Some(info(&key, deployment, pod))
            })
            .collect())
    }
}

pub fn unix_ms(time: &Time) -> u64 {
    u64::try_from(time.0.as_millisecond()).unwrap_or_default()
}

/// The runner container's status in `pod`, once the kubelet wrote one.
pub fn runner_status(pod: &Pod) -> Option<&ContainerStatus> {
    pod.status
        .as_ref()?
        .container_statuses
        .as_ref()?
        .iter()
        .find(|status| status.name == CONTAINER)
}

/// How the runner container last ended, from a terminated state.
pub fn exit_of(terminated: &ContainerStateTerminated) -> ExitInfo {
    let at_unix_ms = terminated
        .finished_at
        .as_ref()
        .map(unix_ms)
        .unwrap_or_default();
    ExitInfo::from_facts(
        (terminated.signal.is_none()).then_some(terminated.exit_code),
        terminated.signal,
        at_unix_ms,
        // `OOMKilled`, `Error`, `Completed`: the kubelet's reasons.
        terminated.reason.as_deref() == Some("OOMKilled"),
    )
}

/// describe's answer: the Deployment's facts and its newest pod's.
///
/// The pod stands where the container tiers put their container: its name
/// in `container_id`, its runner's start, restarts and last termination;
/// `cluster` adds the desired and ready replicas, the pod's phase and the
/// last termination's reason.
/// describe's `runtime`: the RuntimeClass the Deployment's pods name,
/// which may predate `[kubernetes] runtime_class`.
fn runtime_of(deployment: &Deployment) -> sandboxd_protocol::IsolationFeature {
    let class = deployment
        .spec
        .template
        .spec
        .as_ref()
        .and_then(|pod| pod.runtime_class_name.as_deref());
    sandboxd_protocol::IsolationFeature::in_force(
        "runtime",
        match class {
            Some(class) => format!("the sandbox's pods name RuntimeClass '{class}'"),
            None => {
                "the sandbox's pods name no RuntimeClass: the cluster's default runtime".to_string()
            }
        },
    )
}

pub fn info(key: &SandboxKey, deployment: &Deployment, pod: Option<&Pod>) -> SandboxInfo {
    let generation = generation_of(deployment);
    let image = deployment
        .spec
        .template
        .spec
        .as_ref()
        .and_then(|pod| pod.containers.first())
        .and_then(|container| container.image.clone());
    let status = pod.and_then(runner_status);
    let started_at_unix_ms = status
        .and_then(|status| status.state.as_ref())
        .and_then(|state| state.running.as_ref())
        .and_then(|running| running.started_at.as_ref())
        .map(unix_ms);
    let terminated = status.and_then(|status| {
        let now = status
            .state
            .as_ref()
            .and_then(|state| state.terminated.as_ref());
        let last = status
            .last_state
            .as_ref()
            .and_then(|state| state.terminated.as_ref());
        now.or(last)
    });
    let container_restarts =
        status.map_or(0, |status| u64::try_from(status.restart_count).unwrap_or(0));
    SandboxInfo {
        name: key.base_name.clone(),
        scope: key.scope,
        id: key.id.clone(),
        state: state_of(deployment),
        pid: None,
        container_id: pod.and_then(|pod| pod.metadata.name.clone()),
        image,
        generation,
        started_at_unix_ms,
        restarts: generation.saturating_sub(1) + container_restarts,
        // A stop the daemon made (a lifetime) says so, not the pod's
        // SIGTERM.
        last_exit: stopped_for(deployment).or_else(|| terminated.map(exit_of)),
        task_queue: annotation(deployment, ANNOTATION_TASK_QUEUE)
            .unwrap_or_default()
            .to_string(),
        caller_class: annotation(deployment, ANNOTATION_CALLER_CLASS)
            .unwrap_or_default()
            .to_string(),
        egress: None,
        isolation: Vec::new(),
        cluster: Some(ClusterState {
            desired_replicas: u32::try_from(desired_replicas(deployment)).unwrap_or(0),
            ready_replicas: deployment
                .status
                .as_ref()
                .and_then(|status| status.ready_replicas)
                .and_then(|ready| u32::try_from(ready).ok())
                .unwrap_or(0),
            pod_phase: pod
                .and_then(|pod| pod.status.as_ref())
                .and_then(|status| status.phase.clone()),
            last_termination_reason: terminated.and_then(|terminated| terminated.reason.clone()),
            pending_reason: None,
        }),
        uid: uid_of(deployment),
        usage: None,
        paused_since_unix_ms: None,
        view: Vec::new(),
    }
}
