//! The `kubernetes` tier: each sandbox is a Secret, a workspace claim
//! (session and workflow only) and a one-replica Deployment in one
//! namespace, through the Kubernetes API (`kube` + `k8s-openapi`).
//!
//! The cluster is the state: nothing is kept in the daemon but uploads
//! not yet whole (see `files`). A sandbox's
//! Deployment is found by its name (the base name) and proven ours by its
//! labels; `list` is a label selector, so a restarted daemon, or a second
//! one, sees every sandbox at once.
//!
//! Rooms: `config` (finding the API server; the one client), `shapes` (the
//! three objects), `network_policy` (the egress posture, one NetworkPolicy
//! per sandbox), `ensure` (the state machine), `deprovision`, `observe`
//! (probe, describe, list), `logs` (the pod's log), `reaper` (leaked
//! connect sandboxes), `lifetime` (`max_lifetime`: a pod that ran too
//! long is scaled to 0), `permissions` (the start-up access review),
//! `errors` (what a failed call means for the caller), `exec` (commands,
//! through pods/exec), `files` (the file calls, through `tar` and friends
//! in pods/exec), `watch` (list and
//! watch, resumed and relisted), `announce` (the event stream, from
//! those watches) and `pending` (why a pod has not started).

mod announce;
mod config;
mod deprovision;
mod ensure;
mod errors;
mod exec;
mod files;
mod lifetime;
mod limit_env;
mod logs;
mod network_policy;
mod observe;
mod pause;
mod pending;
mod permissions;
mod reaper;
mod runtime_class;
mod shapes;
mod watch;

use std::sync::{Arc, Mutex};

use anyhow::Context as _;
use async_trait::async_trait;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{PersistentVolumeClaim, Pod, Secret};
use k8s_openapi::api::networking::v1::NetworkPolicy;
use kube::Api;
use sandboxd_protocol::{
    DeprovisionReport, EgressStatus, EnsureReport, Health, HealthVerdict, LogChunk, LogStart,
    ProbeState, SandboxEnv, SandboxError, SandboxInfo, Scope,
};
use tokio::task::JoinHandle;

use crate::config::Config;
use crate::drivers::key_lock::KeyLocks;
use crate::drivers::run_to_completion;
use crate::egress::{Egress, EgressSetting};
use crate::provisioner::{Driver, SandboxKey};
use config::Cluster;
use observe::{differs_from, generation_of, state_of, Lookup};
use permissions::Permissions;
use reaper::ReaperSettings;
use shapes::RunnerShape;

/// How long a stopping daemon waits for the store to settle the commands
/// it stops following.
const COMMANDS_SETTLE: std::time::Duration = std::time::Duration::from_secs(2);

pub struct KubernetesDriver {
    inner: Arc<Inner>,
    permissions: Permissions,
    /// The egress posture, enforced by a NetworkPolicy per sandbox (see
    /// `network_policy`): for `status` and `describe`.
    egress: Egress,
    /// The reaper and the permission check; stopped with the driver.
    tasks: Mutex<Vec<JoinHandle<()>>>,
    /// The commands followed; at shutdown each ends `daemon-stopped` (it
    /// goes on in its pod).
    follows: exec::Follows,
    /// Uploads kept until their last chunk, downloads under way.
    files: files::Files,
}

/// What every operation shares.
struct Inner {
    cluster: Cluster,
    shape: RunnerShape,
    /// The configured posture, which every sandbox's NetworkPolicy holds.
    egress: EgressSetting,
    key_locks: KeyLocks<SandboxKey>,
}

impl Inner {
    fn deployments(&self) -> Api<Deployment> {
        Api::namespaced(self.cluster.client.clone(), &self.cluster.namespace)
    }

    fn secrets(&self) -> Api<Secret> {
        Api::namespaced(self.cluster.client.clone(), &self.cluster.namespace)
    }

    fn claims(&self) -> Api<PersistentVolumeClaim> {
        Api::namespaced(self.cluster.client.clone(), &self.cluster.namespace)
    }

    fn policies(&self) -> Api<NetworkPolicy> {
        Api::namespaced(self.cluster.client.clone(), &self.cluster.namespace)
    }

    fn pods_api(&self) -> Api<Pod> {
        Api::namespaced(self.cluster.client.clone(), &self.cluster.namespace)
    }
}

impl KubernetesDriver {
    /// Checks the configuration and finds the API server (without calling
    /// it: the daemon starts whether or not it answers), then starts the
    /// permission check, the connect reaper and the watches that feed the
    /// event stream (see `announce`).
    pub async fn start(
        config: &Config,
        events: Arc<crate::events::EventHub>,
    ) -> anyhow::Result<KubernetesDriver> {
        let shape = RunnerShape::from_config(config).map_err(anyhow::Error::msg)?;
        let cluster = Cluster::connect(&config.kubernetes).await?;
        if let Some(class) = &config.kubernetes.runtime_class {
            runtime_class::check(&cluster, class).await?;
        }
        tracing::info!(server = %cluster.server, namespace = %cluster.namespace, image = %shape.image, timeout = ?cluster.timeout, "kubernetes driver ready");
        let inner = Arc::new(Inner {
            cluster,
            shape,
            egress: config.egress,
            key_locks: KeyLocks::new(),
        });
        let permissions = Permissions::new();
        let reaper = ReaperSettings {
            ttl: config
                .kubernetes
                .connect_ttl
                .unwrap_or(crate::config::DEFAULT_CONNECT_TTL),
            creation_grace: config.kubernetes.connect_creation_grace,
        };
        let tracker = Arc::new(Mutex::new(announce::Tracker::new(events)));
        let ours = observe::selector(&[(
            sandboxd_protocol::naming::LABEL_MANAGED_BY,
            sandboxd_protocol::naming::MANAGED_BY_VALUE,
        )]);
        let follow_deployments = {
            let tracker = tracker.clone();
            watch::follow::<Deployment>(
                inner.cluster.clone(),
                ours.clone(),
                "deployments",
                move |update| {
                    tracker
                        .lock()
                        .unwrap_or_else(|poison| poison.into_inner())
                        .deployments(update)
                },
            )
        };
        let follow_pods =
            watch::follow::<Pod>(inner.cluster.clone(), ours, "pods", move |update| {
                tracker
                    .lock()
                    .unwrap_or_else(|poison| poison.into_inner())
                    .pods(update)
            });
        let mut tasks = vec![
            tokio::spawn(permissions.clone().check(inner.cluster.clone())),
            tokio::spawn(reaper::run(inner.clone(), reaper)),
            tokio::spawn(follow_deployments),
            tokio::spawn(follow_pods),
        ];
        // Only when some scope has a `max_lifetime`.
        if config.lifecycle.any_max_lifetime() {
            tasks.push(tokio::spawn(lifetime::run(inner.clone(), config.lifecycle)));
        }
        let mechanism = match config.egress {
            EgressSetting::Enforced(posture) => network_policy::mechanism(posture),
            EgressSetting::Unrestricted => String::new(),
        };
        let egress = Egress::by_runtime(config.egress, mechanism);
        let files = files::Files::prepare(&config.state_dir)
            .with_context(|| format!("cannot prepare {}/kubernetes", config.state_dir.display()))?;
        Ok(KubernetesDriver {
            inner,
            permissions,
            egress,
            tasks: Mutex::new(tasks),
            follows: exec::Follows::new(),
            files,
        })
    }
}

#[async_trait]
impl Driver for KubernetesDriver {
    fn name(&self) -> &'static str {
        "kubernetes"
    }

    fn egress(&self) -> EgressStatus {
        self.egress.status()
    }

    fn isolation(&self) -> (String, Vec<sandboxd_protocol::IsolationFeature>) {
        use sandboxd_protocol::IsolationFeature;
        (
            "the runtime's own".to_string(),
            vec![
                IsolationFeature::in_force("network", network_policy::SEPARATION),
                IsolationFeature::in_force(
                    "runtime",
                    match &self.inner.shape.runtime_class {
                        Some(class) => format!("each sandbox is a pod of the cluster under [kubernetes] runtime_class '{class}' (its runtimeClassName), with its own namespaces"),
                        None => "each sandbox is a pod of the cluster, under the cluster's default runtime, with its own namespaces".to_string(),
                    },
                ),
            ],
        )
    }

    /// Unhealthy when the API server did not answer the last call or the
    /// permission check failed; degraded when verbs are missing. (Status
    /// lists the sandboxes too, a live call that adds its own failure.)
    async fn health_verdict(&self) -> Health {
        let mut health = Health::healthy();
        if let Some(why) = self.inner.cluster.unanswered() {
            health.add(
                HealthVerdict::Unhealthy,
                format!(
                    "the Kubernetes API server at {} did not answer: {why}",
                    self.inner.cluster.server
                ),
            );
        }
        self.permissions.judge(&mut health);
        health
    }

    fn health(&self) -> String {
        format!(
            "API server {}; namespace {}; {}; runner image {}",
            self.inner.cluster.server,
            self.inner.cluster.namespace,
            self.permissions.summary(),
            self.inner.shape.image
        )
    }

    async fn ensure(
        &self,
        key: &SandboxKey,
        env: &SandboxEnv,
    ) -> Result<EnsureReport, SandboxError> {
        // The fast path: one GET, no lock, no write.
        let first = self.inner.lookup(key).await?;
        if let Lookup::Ours(deployment) = &first {
            if state_of(deployment) == ProbeState::Running {
                return Ok(EnsureReport {
                    state: ProbeState::Running,
                    created: false,
                    generation: generation_of(deployment),
                    pid: None,
                    differs: differs_from(deployment, env),
                    uid: observe::uid_of(deployment),
                });
            }
        }
        // Nothing is created or started without the posture: every path
        // that makes or starts a runner applies its NetworkPolicy first.
        self.egress.check()?;
        let absent = matches!(first, Lookup::Absent);
        // In a task of its own: a caller that stops waiting must not leave
        // a Secret applied and its Deployment never made.
        let (inner, key, env) = (self.inner.clone(), key.clone(), env.clone());
        run_to_completion("ensure", async move {
            let _guard = inner.key_locks.lock(&key).await;
            ensure::ensure(&inner, &key, &env, absent).await
        })
        .await
    }

    async fn deprovision(
        &self,
        key: &SandboxKey,
        keep_workspace: bool,
    ) -> Result<DeprovisionReport, SandboxError> {
        let (inner, key) = (self.inner.clone(), key.clone());
        run_to_completion("deprovision", async move {
            let _guard = inner.key_locks.lock(&key).await;
            deprovision::deprovision(&inner, &key, keep_workspace).await
        })
        .await
    }

    /// Through pods/exec, in the runner container (see [`exec`]).
    async fn exec(
        &self,
        key: &SandboxKey,
        spec: &crate::started_command::CommandSpec,
    ) -> Result<crate::started_command::StartedCommand, SandboxError> {
        exec::start(&self.inner, key, spec, &self.follows).await
    }

    /// Through pods/exec of the image's own `tar`, `dd`, `stat` and `rm`
    /// in the runner container, as `kubectl cp` does (see [`files`]).
    async fn put_file(
        &self,
        key: &SandboxKey,
        chunk: &sandboxd_protocol::PutChunk,
    ) -> Result<sandboxd_protocol::PutReport, SandboxError> {
        self.files.put_file(&self.inner, key, chunk).await
    }

    async fn get_file(
        &self,
        key: &SandboxKey,
        path: &str,
        offset: u64,
        max: u32,
    ) -> Result<sandboxd_protocol::FileChunk, SandboxError> {
        self.files
            .get_file(&self.inner, key, path, offset, max)
            .await
    }

    async fn stat_file(
        &self,
        key: &SandboxKey,
        path: &str,
    ) -> Result<sandboxd_protocol::FileStat, SandboxError> {
        self.files.stat_file(&self.inner, key, path).await
    }

    async fn list_files(
        &self,
        key: &SandboxKey,
        path: &str,
    ) -> Result<sandboxd_protocol::FileList, SandboxError> {
        self.files.list_files(&self.inner, key, path).await
    }

    async fn remove_file(
        &self,
        key: &SandboxKey,
        path: &str,
        recursive: bool,
    ) -> Result<(), SandboxError> {
        self.files
            .remove_file(&self.inner, key, path, recursive)
            .await
    }

    async fn put_tar(
        &self,
        key: &SandboxKey,
        chunk: &sandboxd_protocol::PutChunk,
    ) -> Result<sandboxd_protocol::PutReport, SandboxError> {
        self.files.put_tar(&self.inner, key, chunk).await
    }

    async fn get_tar(
        &self,
        key: &SandboxKey,
        path: &str,
        offset: u64,
        max: u32,
    ) -> Result<sandboxd_protocol::FileChunk, SandboxError> {
        self.files
            .get_tar(&self.inner, key, path, offset, max)
            .await
    }

    /// None: a command here is followed over its exec's stream, which
    /// ends with the daemon that opened it (its proof then says
    /// `daemon-stopped`); a later daemon has nothing to follow it by.
    async fn recovered_commands(&self) -> Vec<crate::started_command::RecoveredCommand> {
        Vec::new()
    }

    async fn workspaces(
        &self,
        _scope: Option<Scope>,
    ) -> Result<Vec<sandboxd_protocol::WorkspaceInfo>, SandboxError> {
        Err(crate::provisioner::no_host_workspaces("kubernetes"))
    }

    /// None: without a metrics API this tier has no live figures of a pod.
    async fn usage(
        &self,
        _key: &SandboxKey,
        _with_disk: bool,
    ) -> Result<Option<sandboxd_protocol::Usage>, SandboxError> {
        Ok(None)
    }

    /// A stop here: the Deployment scaled to 0 (see [`pause`]).
    async fn pause(
        &self,
        key: &SandboxKey,
    ) -> Result<sandboxd_protocol::PauseReport, SandboxError> {
        let (inner, key) = (self.inner.clone(), key.clone());
        run_to_completion("pause", async move { inner.scale_to_zero(&key).await }).await
    }

    async fn resume(
        &self,
        key: &SandboxKey,
    ) -> Result<sandboxd_protocol::PauseReport, SandboxError> {
        Err(pause::no_resume(key))
    }

    async fn probe(&self, key: &SandboxKey) -> Result<ProbeState, SandboxError> {
        self.inner.probe(key).await
    }

    async fn describe(&self, key: &SandboxKey) -> Result<SandboxInfo, SandboxError> {
        self.inner.describe(key).await
    }

    async fn list(&self, scope: Option<Scope>) -> Result<Vec<SandboxInfo>, SandboxError> {
        self.inner.list(scope).await
    }

    async fn logs(
        &self,
        key: &SandboxKey,
        start: LogStart,
        max_bytes: u32,
    ) -> Result<LogChunk, SandboxError> {
        logs::read(&self.inner, key, start, max_bytes).await
    }

    async fn shutdown(&self) {
        // Their proofs are the store's to give before the daemon exits.
        self.follows.stop(COMMANDS_SETTLE).await;
        for task in self
            .tasks
            .lock()
            .unwrap_or_else(|poison| poison.into_inner())
            .drain(..)
        {
            task.abort();
        }
        tracing::info!(server = %self.inner.cluster.server, "leaving the sandboxes' Deployments in place: the next sandboxd serves them");
    }
}
