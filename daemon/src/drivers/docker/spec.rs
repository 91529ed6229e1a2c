//! What a runner container looks like: image, command, environment, labels,
//! workspace mount, limits and security options — all from the daemon's
//! configuration and the request, nothing from the caller's whims.

use std::collections::HashMap;

use bollard::models::{
    ContainerCreateBody, HostConfig, Mount, MountType, MountVolumeOptions, RestartPolicy,
    RestartPolicyNameEnum,
};
use sandboxd_protocol::{naming, SandboxEnv, Scope};

use crate::drivers::differs::token_digest;

use crate::config::Config;
use crate::instance::Instance;
use crate::sandbox_key::SandboxKey;

/// The generation the container was created at (starts after that are
/// counted in the [generation file](super::generation)).
pub const LABEL_GENERATION: &str = "stigmer.ai/generation";
/// SHA-256 of the token the container was created with — never the token.
/// A stopped container whose digest differs is recreated, so a runner
/// never restarts with a stale credential.
pub const LABEL_TOKEN_SHA256: &str = "stigmer.ai/token-sha256";
/// The task queue baked into the container's environment.
pub const LABEL_TASK_QUEUE: &str = "stigmer.ai/task-queue";
/// The class of caller that provisioned it (recorded, not acted on).
pub const LABEL_CALLER_CLASS: &str = "stigmer.ai/caller-class";
/// The incarnation's uid: kept on the container, so a daemon restart
/// re-adopts it with the same uid, and carried over when ensure recreates
/// the container (a changed token, a dead container).
pub const LABEL_UID: &str = "stigmer.ai/uid";

/// Where the workspace is mounted in every runner container.
pub const WORKSPACE: &str = "/workspace";

/// The runner-shaping part of the configuration, resolved once.
#[derive(Debug, Clone)]
pub struct RunnerSpec {
    pub image: String,
    pub command: Option<Vec<String>>,
    pub user: String,
    pub network: String,
    pub memory: i64,
    pub nano_cpus: i64,
    pub pids_limit: i64,
    /// `[docker] runtime`: `HostConfig.Runtime` of every container; `None`
    /// is the engine's default.
    pub runtime: Option<String>,
    /// `[limits] disk`: the container's root file system's size, where the
    /// engine's storage driver honours one (see [`super::engine_support`]);
    /// 0 = unlimited.
    pub disk: u64,
    /// The grace `docker stop` from outside gets too, in whole seconds.
    pub stop_grace_secs: i64,
    pub backend_endpoint: String,
    pub temporal_address: String,
    /// `[runner] env`: after the contract's, for every runner and command.
    pub extra_env: Vec<(String, String)>,
}

impl RunnerSpec {
    /// Fails with a clear message when no runner image is configured.
    pub fn from_config(config: &Config) -> Result<RunnerSpec, String> {
        let image = config.required_runner_image("docker")?;
        let docker = &config.docker;
        Ok(RunnerSpec {
            image,
            command: docker.command.clone(),
            user: docker.user.clone(),
            network: docker.network.clone(),
            memory: i64::try_from(docker.memory).unwrap_or(i64::MAX),
            nano_cpus: (docker.cpus * 1e9).round() as i64,
            pids_limit: docker.pids_limit,
            runtime: docker.runtime.clone(),
            disk: config.limits.disk,
            stop_grace_secs: config.stop_grace.as_secs_f64().ceil() as i64,
            backend_endpoint: config.backend_endpoint.clone(),
            temporal_address: config.temporal_address.clone(),
            extra_env: config.runner_env.clone(),
        })
    }

    /// The create request for this sandbox's container at `generation`.
    pub fn container(
        &self,
        key: &SandboxKey,
        env: &SandboxEnv,
        generation: u64,
        uid: &str,
    ) -> ContainerCreateBody {
        let mut labels = container_labels(key, env, generation);
        labels.insert(LABEL_UID.to_string(), uid.to_string());
        ContainerCreateBody {
            image: Some(self.image.clone()),
            cmd: self.command.clone(),
            env: Some(self.runner_env(env)),
            labels: Some(labels),
            user: Some(self.user.clone()),
            hostname: Some(key.base_name.clone()),
            working_dir: Some(WORKSPACE.to_string()),
            stop_signal: Some("SIGTERM".to_string()),
            stop_timeout: Some(self.stop_grace_secs),
            attach_stdin: Some(false),
            attach_stdout: Some(false),
            attach_stderr: Some(false),
            open_stdin: Some(false),
            tty: Some(false),
            host_config: Some(self.host_config(key)),
            ..Default::default()
        }
    }

    /// The runner's environment contract (SPEC §5), with the container's
    /// own workspace (the token only when `env` has one: a command's
    /// environment is this without it).
    pub fn runner_env(&self, env: &SandboxEnv) -> Vec<String> {
        let mut vars = vec![
            "MODE=local".to_string(),
            format!("STIGMER_TASK_QUEUE={}", env.task_queue),
            format!("WORKSPACE_ROOT_DIR={WORKSPACE}"),
            format!("HOME={WORKSPACE}"),
        ];
        if !self.backend_endpoint.is_empty() {
            vars.push(format!(
                "STIGMER_BACKEND_ENDPOINT={}",
                self.backend_endpoint
            ));
        }
        if !self.temporal_address.is_empty() {
            vars.push(format!(
                "TEMPORAL_SERVICE_ADDRESS={}",
                self.temporal_address
            ));
        }
        if !env.stigmer_token.is_empty() {
            vars.push(format!("STIGMER_TOKEN={}", env.stigmer_token.expose()));
        }
        vars.extend(self.limit_env());
        vars.extend(
            self.extra_env
                .iter()
                .map(|(name, value)| format!("{name}={value}")),
        );
        vars
    }

    /// The container's limits, as the process tier tells its sandboxes
    /// theirs (`free` in a container shows the host's memory too); each
    /// only when set. The disk limit is left out: whether the storage
    /// driver holds it is known only to the engine.
    fn limit_env(&self) -> Vec<String> {
        let [memory, cpu, pids, _] = crate::config::LIMIT_VARIABLES;
        let cpus = self.nano_cpus as f64 / 1e9;
        [
            (memory, (self.memory > 0).then(|| self.memory.to_string())),
            (cpu, (self.nano_cpus > 0).then(|| cpus.to_string())),
            (
                pids,
                (self.pids_limit > 0).then(|| self.pids_limit.to_string()),
            ),
        ]
        .into_iter()
        .filter_map(|(name, value)| Some(format!("{name}={}", value?)))
        .collect()
    }

    fn host_config(&self, key: &SandboxKey) -> HostConfig {
        HostConfig {
            // An init as PID 1 reaps the orphans a runner leaves (containerd#5708).
            init: Some(true),
            cap_drop: Some(vec!["ALL".to_string()]),
            // The daemon's own seccomp profile, not the engine's default.
            security_opt: Some(vec![
                "no-new-privileges".to_string(),
                super::seccomp_profile::security_option().to_string(),
            ]),
            memory: Some(self.memory),
            // No swap beyond the memory limit.
            memory_swap: Some(self.memory),
            nano_cpus: Some(self.nano_cpus),
            pids_limit: Some(self.pids_limit),
            network_mode: Some(self.network.clone()),
            // The repair arm is ensure, not the engine: a runner that exits stays exited.
            restart_policy: Some(RestartPolicy {
                name: Some(RestartPolicyNameEnum::NO),
                maximum_retry_count: None,
            }),
            mounts: Some(vec![workspace_mount(key)]),
            runtime: self.runtime.clone(),
            ..Default::default()
        }
    }
}

/// Limits the container's root file system to `[limits] disk`, when the
/// engine honours a size (`honoured`) and a limit is set: asked of an
/// engine that does not, the create fails.
pub fn limit_root_size(body: &mut ContainerCreateBody, disk: u64, honoured: bool) {
    if !honoured || disk == 0 {
        return;
    }
    if let Some(host) = body.host_config.as_mut() {
        host.storage_opt = Some(HashMap::from([("size".to_string(), disk.to_string())]));
    }
}

/// The workspace volume's name for session and workflow sandboxes;
/// connect sandboxes have none (their scratch volume is anonymous).
pub fn workspace_volume(key: &SandboxKey) -> Option<String> {
    match key.scope {
        Scope::Session | Scope::Workflow => Some(format!(
            "{}-workspace",
            Instance::current().object_name(&key.base_name)
        )),
        Scope::Connect => None,
    }
}

/// `/workspace`: the named volume (created by the engine on first use,
/// labelled like the container, kept across recreations), or for connect
/// sandboxes an anonymous one that goes with the container. Either way the
/// engine copies the image's `/workspace` (its ownership too) into a new
/// volume, which is how an unprivileged runner gets a writable workspace.
fn workspace_mount(key: &SandboxKey) -> Mount {
    Mount {
        target: Some(WORKSPACE.to_string()),
        source: workspace_volume(key),
        typ: Some(MountType::VOLUME),
        read_only: Some(false),
        volume_options: Some(MountVolumeOptions {
            no_copy: Some(false),
            labels: Some(sandbox_labels(key)),
            ..Default::default()
        }),
        ..Default::default()
    }
}

/// The three labels every runtime object of the sandbox carries, and the
/// instance label when this daemon has a named instance.
pub fn sandbox_labels(key: &SandboxKey) -> HashMap<String, String> {
    naming::labels(key.scope, &key.id)
        .into_iter()
        .chain(Instance::current().label())
        .map(|(name, value)| (name.to_string(), value))
        .collect()
}

/// The container's labels: the three, plus what ensure compares and describe shows.
fn container_labels(
    key: &SandboxKey,
    env: &SandboxEnv,
    generation: u64,
) -> HashMap<String, String> {
    let mut labels = sandbox_labels(key);
    labels.insert(LABEL_GENERATION.to_string(), generation.to_string());
    labels.insert(
        LABEL_TOKEN_SHA256.to_string(),
        token_digest(&env.stigmer_token),
    );
    labels.insert(LABEL_TASK_QUEUE.to_string(), env.task_queue.clone());
    labels.insert(LABEL_CALLER_CLASS.to_string(), env.caller_class.clone());
    labels
}

#[cfg(test)]
mod tests {
    use sandboxd_protocol::Token;

    use super::*;

    fn spec() -> RunnerSpec {
        RunnerSpec {
            image: "runner:1".into(),
            command: None,
            user: "65534:65534".into(),
            network: "bridge".into(),
            memory: 2 << 30,
            nano_cpus: 2_000_000_000,
            pids_limit: 512,
            runtime: None,
            disk: 1 << 30,
            stop_grace_secs: 10,
            backend_endpoint: String::new(),
            temporal_address: "temporal:7233".into(),
            extra_env: vec![("EMAIL".into(), "dev@example.com".into())],
        }
    }

    fn env(token: &str) -> SandboxEnv {
        SandboxEnv {
            task_queue: "session:s1".into(),
            stigmer_token: Token::new(token),
            caller_class: "user".into(),
        }
    }

    #[test]
    fn session_container_has_labels_env_mount_and_limits() {
        let key = SandboxKey::new(Scope::Session, "s1");
        let body = spec().container(&key, &env("hunter2"), 3, "0123456789abcdef0123456789abcdef");
        let labels = body.labels.as_ref().unwrap();
        assert_eq!(labels["stigmer.ai/managed-by"], "stigmer-server");
        assert_eq!(labels["stigmer.ai/scope"], "session");
        assert_eq!(labels["stigmer.ai/sandbox-id"], "s1");
        assert_eq!(labels[LABEL_GENERATION], "3");
        assert_eq!(labels[LABEL_TOKEN_SHA256].len(), 64);
        assert!(
            !labels.values().any(|value| value.contains("hunter2")),
            "the token is never a label"
        );
        let vars = body.env.as_ref().unwrap();
        assert!(vars.contains(&"STIGMER_TOKEN=hunter2".to_string()));
        assert!(vars.contains(&"WORKSPACE_ROOT_DIR=/workspace".to_string()));
        assert!(vars.contains(&"TEMPORAL_SERVICE_ADDRESS=temporal:7233".to_string()));
        for told in [
            "SANDBOXD_MEMORY_LIMIT_BYTES=2147483648",
            "SANDBOXD_CPU_QUOTA=2",
            "SANDBOXD_PIDS_LIMIT=512",
            "EMAIL=dev@example.com",
        ] {
            assert!(vars.contains(&told.to_string()), "{told}: {vars:?}");
        }
        assert!(
            !vars
                .iter()
                .any(|var| var.starts_with("STIGMER_BACKEND_ENDPOINT=")),
            "empty means unset"
        );
        let host = body.host_config.as_ref().unwrap();
        assert_eq!(host.init, Some(true));
        assert_eq!(host.cap_drop.as_deref(), Some(&["ALL".to_string()][..]));
        let security = host.security_opt.as_ref().unwrap();
        assert!(security
            .iter()
            .any(|option| option.starts_with("seccomp={")));
        assert_eq!(host.storage_opt, None, "only where the engine honours it");
        assert_eq!(host.runtime, None, "the engine's default unless configured");
        let mount = &host.mounts.as_ref().unwrap()[0];
        assert_eq!(
            mount.source.as_deref(),
            Some(format!("{}-workspace", key.base_name).as_str())
        );
        assert_eq!(mount.target.as_deref(), Some("/workspace"));
    }

    #[test]
    fn a_configured_runtime_is_every_containers() {
        let key = SandboxKey::new(Scope::Connect, "c1");
        let spec = RunnerSpec {
            runtime: Some("runsc".into()),
            ..spec()
        };
        let body = spec.container(&key, &env(""), 1, "0123456789abcdef0123456789abcdef");
        assert_eq!(body.host_config.unwrap().runtime.as_deref(), Some("runsc"));
    }

    #[test]
    fn connect_scratch_is_anonymous_and_tokenless_env_has_no_token() {
        let key = SandboxKey::new(Scope::Connect, "req-1");
        let body = spec().container(&key, &env(""), 1, "0123456789abcdef0123456789abcdef");
        assert!(!body
            .env
            .unwrap()
            .iter()
            .any(|var| var.starts_with("STIGMER_TOKEN")));
        let mount = &body.host_config.unwrap().mounts.unwrap()[0];
        assert_eq!(mount.source, None);
        assert_eq!(workspace_volume(&key), None);
    }

    #[test]
    fn the_root_size_is_asked_only_where_honoured_and_set() {
        let key = SandboxKey::new(Scope::Session, "s1");
        let body = || spec().container(&key, &env("t"), 1, "0123456789abcdef0123456789abcdef");
        let mut limited = body();
        limit_root_size(&mut limited, 1 << 30, true);
        let size = limited.host_config.unwrap().storage_opt.unwrap();
        assert_eq!(size["size"], (1_u64 << 30).to_string());
        for (disk, honoured) in [(1 << 30, false), (0, true)] {
            let mut body = body();
            limit_root_size(&mut body, disk, honoured);
            assert_eq!(body.host_config.unwrap().storage_opt, None);
        }
    }

    #[test]
    fn token_digests_differ_by_token() {
        // sha256("") is a known vector.
        assert_eq!(
            token_digest(&Token::new("")),
            "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
        );
        assert_ne!(
            token_digest(&Token::new("a")),
            token_digest(&Token::new("b"))
        );
    }
}
