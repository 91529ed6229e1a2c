//! From the file, the environment and the flags to one checked [`Config`]:
//! each key from the first source that gives it, then the whole checked.
//!
//! The steps run in a fixed order (the tier tables, the driver, then the
//! keys in the struct's order, then the checks), so a config with two
//! mistakes always names the same one first.

use std::path::PathBuf;
use std::time::Duration;

use anyhow::{bail, Context};

use super::defaults::{
    default_socket, default_state_dir, DEFAULT_RUNNER_LOG_MAX_SIZE, DEFAULT_RUNNER_PATH,
    DEFAULT_UID_CLAIMS_DIR, DEFAULT_WORKSPACE_TTL, MIN_RUNNER_LOG_MAX_SIZE,
};
use super::docker::{DockerConfig, DEFAULT_DOCKER_HOST};
use super::file::FileConfig;
use super::kubernetes::KubernetesConfig;
use super::lifecycle::{self, LifecycleConfig, LifecycleFile};
use super::modes::IsolationMode;
use super::network::NetworkMode;
use super::pool::MAX_POOL_SIZE;
use super::values::parse_ttl;
use super::{driver_name, Config, Flags};
use crate::duration::parse_duration;
use crate::instance::Instance;

/// Reads one environment variable; unset and empty are both "not given".
pub(super) fn env_var(name: &str) -> Option<String> {
    std::env::var(name).ok().filter(|value| !value.is_empty())
}

impl Config {
    /// Every key from the first of flags, environment, file and default
    /// that gives it, then [`Config::validate`].
    pub(super) fn resolve(
        file: FileConfig,
        source_file: Option<PathBuf>,
        env: impl Fn(&str) -> Option<String>,
        flags: &Flags,
    ) -> anyhow::Result<Config> {
        let is_root = nix::unistd::geteuid().is_root();
        let stop_grace = stop_grace(flags.stop_grace.clone().or(file.stop_grace))?;
        let (docker, kubernetes, lifecycle) =
            tier_tables(file.docker, file.kubernetes, file.lifecycle, &env)?;
        let driver = driver(flags, &env, file.driver)?;
        let socket = flags.socket.clone().or(file.socket);
        let state_dir = flags.state_dir.clone().or(file.state_dir);
        let isolation = file.isolation.unwrap_or_default();
        let config = Config {
            source_file,
            driver,
            socket: socket.map_or_else(|| default_socket(is_root), Ok)?,
            socket_group: file.socket_group,
            state_dir: state_dir.map_or_else(|| default_state_dir(is_root), Ok)?,
            stop_grace,
            runner_command: runner_command(flags, &env, file.runner_command),
            runner_args: file.runner_args.unwrap_or_default(),
            runner_path: file
                .runner_path
                .unwrap_or_else(|| DEFAULT_RUNNER_PATH.to_string()),
            runner_image: env("STIGMER_SANDBOX_RUNNER_IMAGE").or(file.runner_image),
            backend_endpoint: env("STIGMER_SANDBOX_BACKEND_ENDPOINT")
                .or(file.backend_endpoint)
                .unwrap_or_default(),
            temporal_address: env("STIGMER_SANDBOX_TEMPORAL_ADDRESS")
                .or(file.temporal_address)
                .unwrap_or_default(),
            run_as: file.run_as,
            allow_root_runners: file.allow_root_runners.unwrap_or(false),
            max_connections: file.max_connections.unwrap_or(256),
            max_requests_per_connection: file.max_requests_per_connection.unwrap_or(64),
            events_ring: file.events_ring.unwrap_or(4096),
            metrics_listen: file
                .metrics_listen
                .as_deref()
                .map(parse_metrics_listen)
                .transpose()?,
            log_level: file.log_level,
            runner_log_max_size: file
                .runner_log_max_size
                .unwrap_or(DEFAULT_RUNNER_LOG_MAX_SIZE),
            runner_oom_score_adj: file.runner_oom_score_adj.unwrap_or(0),
            workspace_ttl: workspace_ttl(file.workspace_ttl)?,
            runner_uid_range: file.runner_uid_range,
            uid_claims_dir: file
                .uid_claims_dir
                .unwrap_or_else(|| DEFAULT_UID_CLAIMS_DIR.into()),
            access: file.access.unwrap_or_default(),
            docker,
            cgroup_root: file.cgroup_root,
            containment: file.containment.unwrap_or_default(),
            limits: file.limits.unwrap_or_default(),
            connections: file.connections.unwrap_or_default(),
            instance: Instance::from_config(file.instance.as_deref())?,
            egress: file.egress.unwrap_or_default(),
            kubernetes,
            isolation,
            view: file.view.unwrap_or_default(),
            network: file.network.unwrap_or_default().resolve(isolation)?,
            pool: file.pool.unwrap_or_default(),
            commands: file.commands.unwrap_or_default().checked()?,
            lifecycle,
            runner_env: file.runner.unwrap_or_default().checked()?,
        };
        config.validate()?;
        Ok(config)
    }

    /// Every key's bounds, then each table's own checks.
    fn validate(&self) -> anyhow::Result<()> {
        self.validate_places_and_runner()?;
        self.validate_counts()?;
        self.validate_host_dirs()?;
        self.limits.validate()?;
        self.view.validate()?;
        if self.network.mode == NetworkMode::Private && self.isolation != IsolationMode::Full {
            bail!(
                "[network] mode = \"private\" needs isolation = \"full\" (a sandbox's network namespace is part of its view); isolation is \"{}\"",
                self.isolation.as_str()
            );
        }
        if self.isolation == IsolationMode::Gvisor && self.driver != "local-process" {
            bail!(
                "isolation = \"gvisor\" is the local-process tier's; driver is '{}' (its gVisor is [docker] runtime = \"runsc\" or [kubernetes] runtime_class)",
                self.driver
            );
        }
        self.docker.validate()?;
        self.connections.validate(self.max_connections)?;
        self.kubernetes.validate()
    }

    /// The socket and the state directory are absolute; the runner is named
    /// and its `PATH` holds absolute directories only.
    fn validate_places_and_runner(&self) -> anyhow::Result<()> {
        if !self.socket.is_absolute() {
            bail!("socket path '{}' must be absolute", self.socket.display());
        }
        if !self.state_dir.is_absolute() {
            bail!("state_dir '{}' must be absolute", self.state_dir.display());
        }
        if self.runner_command.is_empty() {
            bail!("runner_command must not be empty");
        }
        validate_runner_path(&self.runner_path)
    }

    /// The sizes, counts and times, each within its range.
    fn validate_counts(&self) -> anyhow::Result<()> {
        for (scope, size) in [
            ("session", self.pool.session),
            ("workflow", self.pool.workflow),
            ("connect", self.pool.connect),
        ] {
            if size > MAX_POOL_SIZE {
                bail!("[pool] {scope} = {size} is more than the {MAX_POOL_SIZE} views a scope may keep prepared");
            }
        }
        if self.max_connections == 0 {
            bail!("max_connections must be at least 1");
        }
        if self.max_requests_per_connection == 0 {
            bail!("max_requests_per_connection must be at least 1");
        }
        if !(16..=1_000_000).contains(&self.events_ring) {
            bail!(
                "events_ring must be between 16 and 1000000 events, not {}",
                self.events_ring
            );
        }
        if self.runner_log_max_size < MIN_RUNNER_LOG_MAX_SIZE {
            bail!(
                "runner_log_max_size {} bytes is below the minimum of {MIN_RUNNER_LOG_MAX_SIZE}",
                self.runner_log_max_size
            );
        }
        if !(-1000..=1000).contains(&self.runner_oom_score_adj) {
            bail!(
                "runner_oom_score_adj {} is outside the kernel's range -1000..=1000",
                self.runner_oom_score_adj
            );
        }
        if self.stop_grace > Duration::from_secs(3600) {
            bail!(
                "stop_grace {:?} is longer than the limit of 1h",
                self.stop_grace
            );
        }
        Ok(())
    }

    /// The host directories named (uid claims, cgroup root) are absolute.
    fn validate_host_dirs(&self) -> anyhow::Result<()> {
        if !self.uid_claims_dir.is_absolute() {
            bail!(
                "uid_claims_dir '{}' must be absolute",
                self.uid_claims_dir.display()
            );
        }
        if let Some(root) = &self.cgroup_root {
            if !root.is_absolute() {
                bail!("cgroup_root '{}' must be absolute", root.display());
            }
        }
        Ok(())
    }
}

/// `driver` (flag, `SANDBOX_PROVISIONER_TYPE`, file), `local-process`
/// when none gives it; a name no tier has is refused here.
fn driver(
    flags: &Flags,
    env: &impl Fn(&str) -> Option<String>,
    file: Option<String>,
) -> anyhow::Result<String> {
    let driver = flags
        .driver
        .clone()
        .or_else(|| env("SANDBOX_PROVISIONER_TYPE"))
        .or(file)
        .unwrap_or_else(|| "local-process".to_string());
    driver_name::check(&driver)?;
    Ok(driver)
}

/// `runner_command` (flag, `STIGMER_SANDBOX_RUNNER_COMMAND`, file),
/// `stigmer-runner` when none gives it.
fn runner_command(
    flags: &Flags,
    env: &impl Fn(&str) -> Option<String>,
    file: Option<String>,
) -> String {
    flags
        .runner_command
        .clone()
        .or_else(|| env("STIGMER_SANDBOX_RUNNER_COMMAND"))
        .or(file)
        .unwrap_or_else(|| "stigmer-runner".to_string())
}

/// `stop_grace` (flag or file), 10s when neither gives it.
fn stop_grace(text: Option<String>) -> anyhow::Result<Duration> {
    match text {
        Some(text) => parse_duration(&text).with_context(|| format!("stop_grace '{text}'")),
        None => Ok(Duration::from_secs(10)),
    }
}

/// The `[docker]`, `[kubernetes]` and `[lifecycle.*]` tables, with what the
/// environment says of them (`DOCKER_HOST`, `STIGMER_SANDBOX_K8S_NAMESPACE`)
/// and the one connect TTL in force written into both tiers' tables.
fn tier_tables(
    docker: Option<DockerConfig>,
    kubernetes: Option<KubernetesConfig>,
    lifecycle: Option<LifecycleFile>,
    env: &impl Fn(&str) -> Option<String>,
) -> anyhow::Result<(DockerConfig, KubernetesConfig, LifecycleConfig)> {
    let mut docker = docker.unwrap_or_default();
    if docker.host.is_none() {
        docker.host = Some(env("DOCKER_HOST").unwrap_or_else(|| DEFAULT_DOCKER_HOST.to_string()));
    }
    let mut kubernetes = kubernetes.unwrap_or_default();
    let (lifecycle, connect_ttl) = lifecycle.unwrap_or_default().resolve()?;
    docker.connect_ttl = Some(lifecycle::connect_ttl(
        connect_ttl,
        docker.connect_ttl,
        "[docker] connect_ttl",
    )?);
    kubernetes.connect_ttl = Some(lifecycle::connect_ttl(
        connect_ttl,
        kubernetes.connect_ttl,
        "[kubernetes] connect_ttl",
    )?);
    if let Some(namespace) = env("STIGMER_SANDBOX_K8S_NAMESPACE") {
        kubernetes.namespace = namespace;
    }
    Ok((docker, kubernetes, lifecycle))
}

/// `workspace_ttl`, a week when the file leaves it out.
fn workspace_ttl(text: Option<String>) -> anyhow::Result<Option<Duration>> {
    match text {
        Some(text) => parse_ttl(&text).with_context(|| format!("workspace_ttl '{text}'")),
        None => Ok(Some(DEFAULT_WORKSPACE_TTL)),
    }
}

/// `metrics_listen`: an IP address and port (`127.0.0.1:9464`,
/// `[::1]:9464`); a host name is refused, so the endpoint is never bound
/// to whatever a resolver says.
fn parse_metrics_listen(text: &str) -> anyhow::Result<std::net::SocketAddr> {
    text.parse().map_err(|_| {
        anyhow::anyhow!(
            "metrics_listen '{text}' is not an IP address and port (e.g. \"127.0.0.1:9464\")"
        )
    })
}

/// `runner_path`: absolute directories separated by `:`. A relative entry
/// (or an empty one, which means the working directory) would look
/// programs up in the runner's own writable workspace.
fn validate_runner_path(path: &str) -> anyhow::Result<()> {
    if path.contains('\0') {
        bail!("runner_path {path:?} contains a NUL byte");
    }
    if let Some(entry) = path.split(':').find(|entry| !entry.starts_with('/')) {
        bail!("runner_path '{path}': entry '{entry}' is not an absolute directory");
    }
    Ok(())
}
