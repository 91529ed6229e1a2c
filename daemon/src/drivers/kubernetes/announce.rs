//! The kubernetes tier's events, from watches on its Deployments and pods
//! (see `watch`): what changed between two looks at an object becomes
//! `created`, `adopted`, `changed`, `deprovisioned` (the Deployment),
//! `started` and `exited` (the pod's runner container, `exited` with the
//! reason its termination gives: `OOMKilled` is `out-of-memory`).
//!
//! | seen                                          | event          |
//! |-----------------------------------------------|----------------|
//! | a Deployment in the first list                | `adopted`      |
//! | a Deployment not seen before (watch, relist)  | `created`      |
//! | the same uid, generation, another token/queue | `changed`      |
//! | a Deployment deleted (or gone from a relist)  | `deprovisioned`|
//! | a runner container running since a new time   | `started`      |
//! | a new `state`/`lastState.terminated`          | `exited`       |
//! | the daemon's own stop (`stopped-for`)         | `exited`       |
//!
//! A generation the daemon stopped by itself (a `max_lifetime`: see
//! `lifetime`) is announced once, as `exited` with that reason, from the
//! Deployment's annotation written with the scale-down; the pod's
//! SIGTERM'd end that follows (the scale-down causes it, so its watch
//! event comes after) is not announced again.
//!
//! Pods in the first list are taken as they are (their runs were before
//! this daemon looked: adopted, not new). What was announced is kept per
//! live object only, so the memory is the cluster's size, not its history.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::Pod;
use sandboxd_protocol::naming::{
    LABEL_MANAGED_BY, LABEL_SANDBOX_ID, LABEL_SCOPE, MANAGED_BY_VALUE,
};
use sandboxd_protocol::{EventKind, ExitInfo, Scope};

use super::observe::{
    annotation, exit_of, generation_of, key_of, runner_status, stopped_for, uid_of,
};
use super::shapes::{object_name, ANNOTATION_TASK_QUEUE, ANNOTATION_TOKEN_SHA256};
use super::watch::Update;
use crate::events::EventHub;
use crate::instance::{Instance, LABEL_INSTANCE};
use crate::sandbox_key::SandboxKey;

/// What a Deployment said when last seen.
#[derive(Clone)]
struct Sandbox {
    key: SandboxKey,
    uid: String,
    generation: u64,
    task_queue: String,
    token_sha256: String,
    /// The daemon stopped this generation by itself: the proof.
    stopped: Option<ExitInfo>,
}

impl Sandbox {
    fn of(deployment: &Deployment) -> Option<Sandbox> {
        let text = |name| annotation(deployment, name).unwrap_or_default().to_string();
        Some(Sandbox {
            key: key_of(deployment)?,
            uid: uid_of(deployment),
            generation: generation_of(deployment),
            task_queue: text(ANNOTATION_TASK_QUEUE),
            token_sha256: text(ANNOTATION_TOKEN_SHA256),
            stopped: stopped_for(deployment),
        })
    }
}

/// What was announced of one pod's runner container.
struct Runs {
    key: SandboxKey,
    /// The incarnation the pod belongs to, as known when it was first seen.
    uid: String,
    generation: u64,
    started: HashSet<String>,
    ended: HashSet<String>,
}

pub struct Tracker {
    hub: Arc<EventHub>,
    /// By Deployment name.
    sandboxes: HashMap<String, Sandbox>,
    /// By pod uid.
    pods: HashMap<String, Runs>,
}

impl Tracker {
    pub fn new(hub: Arc<EventHub>) -> Tracker {
        Tracker {
            hub,
            sandboxes: HashMap::new(),
            pods: HashMap::new(),
        }
    }

    fn emit(&self, kind: EventKind, sandbox: &Sandbox, exit: Option<ExitInfo>) {
        tracing::debug!(%kind, scope = %sandbox.key.scope, id = %sandbox.key.id, generation = sandbox.generation, "kubernetes event");
        self.hub
            .emit(kind, &sandbox.key, &sandbox.uid, sandbox.generation, exit);
    }

    pub fn deployments(&mut self, update: Update<Deployment>) {
        match update {
            Update::Listed { items, first } => {
                let now: Vec<Sandbox> = items.iter().filter_map(Sandbox::of).collect();
                let names: HashSet<String> = now.iter().map(|s| object_name(&s.key)).collect();
                let gone: Vec<String> = self
                    .sandboxes
                    .keys()
                    .filter(|name| !names.contains(*name))
                    .cloned()
                    .collect();
                for name in gone {
                    if let Some(old) = self.sandboxes.remove(&name) {
                        self.emit(EventKind::Deprovisioned, &old, None);
                    }
                }
                for sandbox in now {
                    if first {
                        self.emit(EventKind::Adopted, &sandbox, None);
                        self.sandboxes.insert(object_name(&sandbox.key), sandbox);
                    } else {
                        self.applied(sandbox);
                    }
                }
            }
            Update::Applied(deployment) => {
                if let Some(sandbox) = Sandbox::of(&deployment) {
                    self.applied(sandbox);
                }
            }
            Update::Deleted(deployment) => {
                if let Some(key) = key_of(&deployment) {
                    let sandbox = self
                        .sandboxes
                        .remove(&object_name(&key))
                        .or_else(|| Sandbox::of(&deployment));
                    if let Some(sandbox) = sandbox {
                        self.emit(EventKind::Deprovisioned, &sandbox, None);
                    }
                }
            }
        }
    }

    fn applied(&mut self, now: Sandbox) {
        let name = object_name(&now.key);
        match self.sandboxes.get(&name) {
            None => self.emit(EventKind::Created, &now, None),
            Some(old) if old.uid != now.uid => {
                // Deleted and made again between two looks.
                self.emit(EventKind::Deprovisioned, &old.clone(), None);
                self.emit(EventKind::Created, &now, None);
            }
            Some(old)
                if old.generation == now.generation
                    && (old.task_queue != now.task_queue
                        || old.token_sha256 != now.token_sha256) =>
            {
                self.emit(EventKind::Changed, &now, None);
            }
            Some(_) => {}
        }
        let old_stop = self
            .sandboxes
            .get(&name)
            .and_then(|old| old.stopped.as_ref().map(|exit| exit.at_unix_ms));
        if let Some(exit) = now
            .stopped
            .as_ref()
            .filter(|exit| old_stop != Some(exit.at_unix_ms))
        {
            self.emit(EventKind::Exited, &now, Some(*exit));
        }
        self.sandboxes.insert(name, now);
    }

    pub fn pods(&mut self, update: Update<Pod>) {
        match update {
            Update::Listed { items, first } => {
                let uids: HashSet<String> = items
                    .iter()
                    .filter_map(|pod| pod.metadata.uid.clone())
                    .collect();
                self.pods.retain(|uid, _| uids.contains(uid));
                for pod in &items {
                    // The first list's runs happened before this daemon looked.
                    self.pod(pod, !first);
                }
            }
            Update::Applied(pod) => self.pod(&pod, true),
            Update::Deleted(pod) => {
                if let Some(uid) = &pod.metadata.uid {
                    self.pods.remove(uid);
                }
            }
        }
    }

    /// Takes in one look at a pod; `announce`: say what is new.
    fn pod(&mut self, pod: &Pod, announce: bool) {
        let (Some(uid), Some(key)) = (pod.metadata.uid.clone(), key_of_pod(pod)) else {
            return;
        };
        let Some(status) = runner_status(pod) else {
            return;
        };
        if !self.pods.contains_key(&uid) {
            let known = self.sandboxes.get(&object_name(&key));
            let runs = Runs {
                uid: known.map(|s| s.uid.clone()).unwrap_or_default(),
                generation: known.map_or(0, |s| s.generation),
                key,
                started: HashSet::new(),
                ended: HashSet::new(),
            };
            self.pods.insert(uid.clone(), runs);
        }
        let Some(runs) = self.pods.get_mut(&uid) else {
            return;
        };
        if runs.uid.is_empty() {
            // First seen before its Deployment was: take the incarnation now.
            if let Some(known) = self.sandboxes.get(&object_name(&runs.key)) {
                runs.uid = known.uid.clone();
                runs.generation = known.generation;
            }
        }
        let sandbox = Sandbox {
            key: runs.key.clone(),
            uid: runs.uid.clone(),
            generation: runs.generation,
            task_queue: String::new(),
            token_sha256: String::new(),
            stopped: None,
        };
        // This generation's end was announced as the daemon's stop.
        let stopped_by_us = self
            .sandboxes
            .get(&object_name(&runs.key))
            .is_some_and(|known| known.stopped.is_some() && known.generation == runs.generation);
        let mut news = Vec::new();
        // The older end first: the last state, then the current one.
        let ends = [status.last_state.as_ref(), status.state.as_ref()];
        for terminated in ends
            .into_iter()
            .flatten()
            .filter_map(|state| state.terminated.as_ref())
        {
            let id = format!(
                "{}/{}",
                terminated.container_id.as_deref().unwrap_or_default(),
                terminated
                    .finished_at
                    .as_ref()
                    .map(|time| time.0.to_string())
                    .unwrap_or_default()
            );
            if runs.ended.insert(id) && !stopped_by_us {
                news.push((EventKind::Exited, Some(exit_of(terminated))));
            }
        }
        if let Some(running) = status
            .state
            .as_ref()
            .and_then(|state| state.running.as_ref())
        {
            let id = format!(
                "{}/{}",
                status.restart_count,
                running
                    .started_at
                    .as_ref()
                    .map(|time| time.0.to_string())
                    .unwrap_or_default()
            );
            if runs.started.insert(id) {
                news.push((EventKind::Started, None));
            }
        }
        if announce {
            for (kind, exit) in news {
                self.emit(kind, &sandbox, exit);
            }
        }
    }
}

/// The sandbox a pod's labels name, when it is ours and this instance's.
pub(super) fn key_of_pod(pod: &Pod) -> Option<SandboxKey> {
    let labels = pod.metadata.labels.as_ref()?;
    if labels.get(LABEL_MANAGED_BY).map(String::as_str) != Some(MANAGED_BY_VALUE)
        || !Instance::current().owns_label(labels.get(LABEL_INSTANCE).map(String::as_str))
    {
        return None;
    }
    let scope: Scope = labels.get(LABEL_SCOPE)?.parse().ok()?;
    Some(SandboxKey::new(
        scope,
        labels.get(LABEL_SANDBOX_ID)?.clone(),
    ))
}
