//! The daemon's configuration: one struct, from file, environment and flags,
//! validated once at start.
//!
//! Precedence: flags beat environment, environment beats the file, the file
//! beats the defaults. Unknown keys in the file are an error, so a typo in
//! an operator's config is reported instead of silently ignored.

mod commands;
mod driver_name;
mod lifecycle;
mod network;
mod runner_env;
mod state_reserve;

use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{bail, Context};
use serde::Deserialize;

pub use crate::connection_limits::ConnectionsConfig;
pub use crate::duration::parse_duration;
use crate::duration::split_number;
use crate::egress::EgressSetting;
use crate::instance::Instance;
pub use commands::CommandsConfig;
pub use driver_name::UnknownDriver;
#[cfg(test)]
pub use lifecycle::ScopeLimits;
pub use lifecycle::{LifecycleConfig, OnIdle, DEFAULT_CONNECT_TTL};
pub use network::{NetworkConfig, NetworkMode};
pub use runner_env::LIMIT_VARIABLES;
pub use state_reserve::StateReserve;

/// Where the file is read from when `--config` is not given (and it exists).
pub const DEFAULT_CONFIG_FILE: &str = "/etc/stigmer/sandboxd.toml";

/// Command-line flags; each beats its environment variable and file key.
#[derive(Debug, Default, Clone, clap::Args)]
pub struct Flags {
    /// The TOML configuration file (default: /etc/stigmer/sandboxd.toml when it exists).
    #[arg(long, value_name = "PATH")]
    pub config: Option<PathBuf>,
    /// The Unix socket to serve on.
    #[arg(long, value_name = "PATH")]
    pub socket: Option<PathBuf>,
    /// The isolation tier: local-process, docker or kubernetes.
    #[arg(long, value_name = "NAME")]
    pub driver: Option<String>,
    /// The runner executable of the process tier (a name looked up in PATH, or a path).
    #[arg(long, value_name = "COMMAND")]
    pub runner_command: Option<String>,
    /// Where workspaces, runner logs and the spawn ledger live.
    #[arg(long, value_name = "PATH")]
    pub state_dir: Option<PathBuf>,
    /// How long a runner gets between SIGTERM and SIGKILL (e.g. 10s, 500ms).
    #[arg(long, value_name = "DURATION")]
    pub stop_grace: Option<String>,
}

/// Who may call what, by the peer credentials of the connection.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct AccessConfig {
    /// Uids allowed to ensure, deprovision and create (and to read).
    pub mutate_uids: Vec<u32>,
    /// Gids (primary group of the peer) allowed to ensure, deprovision and create.
    pub mutate_gids: Vec<u32>,
    /// Uids allowed to probe, describe, list, workspaces and status.
    pub read_uids: Vec<u32>,
    /// Gids allowed to probe, describe, list, workspaces and status.
    pub read_gids: Vec<u32>,
}

/// The default cap on one runner's output on disk (16 MiB): the live file
/// and the one rotated file together.
pub const DEFAULT_RUNNER_LOG_MAX_SIZE: u64 = 16 * 1024 * 1024;
/// The `PATH` runners start with unless `runner_path` says otherwise:
/// systemd's default for the services it starts, not the daemon's own.
pub const DEFAULT_RUNNER_PATH: &str =
    "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";
/// The smallest cap allowed: below a few lines, rotation would be constant.
pub const MIN_RUNNER_LOG_MAX_SIZE: u64 = 1024;

/// Where the uid claims of every sandboxd on the host are: under `/run`
/// (emptied at boot, when each daemon claims its ledger's uids again), in
/// the directory the packaged units already let the daemon write.
pub const DEFAULT_UID_CLAIMS_DIR: &str = "/run/stigmer/uids";

/// Where the docker tier finds the engine when neither `[docker] host` nor
/// `DOCKER_HOST` says.
pub const DEFAULT_DOCKER_HOST: &str = "unix:///var/run/docker.sock";

/// The `[docker]` table: how the docker tier reaches the engine and shapes
/// each runner container. Every key has a default; unknown keys are an error.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct DockerConfig {
    /// The engine's address (`unix:///…`, `tcp://…`, `http://…`). When the
    /// file leaves it out, `DOCKER_HOST`, else [`DEFAULT_DOCKER_HOST`].
    pub host: Option<String>,
    /// The runner's command line; `None` runs the image's own CMD.
    pub command: Option<Vec<String>>,
    /// `uid[:gid]` (or a name the image knows) the runner runs as.
    pub user: String,
    /// The container's network mode (`bridge`, `none`, a network's name).
    pub network: String,
    /// Memory limit in bytes; written in the file as `"2g"`, `"512m"` or a number.
    #[serde(deserialize_with = "deserialize_memory")]
    pub memory: u64,
    /// How many CPUs the runner may use (fractions allowed).
    pub cpus: f64,
    /// The most processes and threads the container may hold.
    pub pids_limit: i64,
    /// A connect sandbox older than this is a leak and is removed. The old
    /// key: `[lifecycle.connect] ttl` is the one to write now (see
    /// [`lifecycle`]); resolved, this is always set, to the TTL in force.
    #[serde(deserialize_with = "deserialize_optional_duration")]
    pub connect_ttl: Option<Duration>,
    /// A connect container that never started is left alone this long:
    /// it may be one this daemon is creating right now.
    #[serde(deserialize_with = "deserialize_duration")]
    pub connect_creation_grace: Duration,
    /// The OCI runtime of every runner container (`runsc` for gVisor, a
    /// kernel of its own between the runner and the host's); `None` is the
    /// engine's default. Checked at start against the engine's runtimes.
    pub runtime: Option<String>,
}

impl Default for DockerConfig {
    fn default() -> Self {
        DockerConfig {
            host: None,
            command: None,
            user: "65534:65534".to_string(),
            network: "bridge".to_string(),
            memory: 2 * 1024 * 1024 * 1024,
            cpus: 2.0,
            pids_limit: 512,
            connect_ttl: None,
            connect_creation_grace: Duration::from_secs(120),
            runtime: None,
        }
    }
}

impl DockerConfig {
    /// The smallest memory limit the engine accepts (6 MiB).
    const MIN_MEMORY: u64 = 6 * 1024 * 1024;

    fn validate(&self) -> anyhow::Result<()> {
        if self.host.as_deref().is_some_and(str::is_empty) {
            bail!("[docker] host must not be empty");
        }
        if let Some(command) = &self.command {
            if command.first().is_none_or(String::is_empty) {
                bail!("[docker] command {command:?} must name a program first");
            }
        }
        if self.user.is_empty() {
            bail!("[docker] user must not be empty");
        }
        if self.network.is_empty() {
            bail!("[docker] network must not be empty");
        }
        if self.memory < Self::MIN_MEMORY {
            bail!(
                "[docker] memory {} bytes is below the engine's minimum of 6 MiB",
                self.memory
            );
        }
        if !(self.cpus.is_finite() && self.cpus >= 0.01) {
            bail!(
                "[docker] cpus {} must be a number of at least 0.01",
                self.cpus
            );
        }
        if self.pids_limit < 1 {
            bail!("[docker] pids_limit {} must be at least 1", self.pids_limit);
        }
        if self.connect_ttl.is_some_and(|ttl| ttl.is_zero()) {
            bail!("[docker] connect_ttl must be longer than 0");
        }
        if self.runtime.as_deref().is_some_and(str::is_empty) {
            bail!("[docker] runtime must not be empty (leave it out for the engine's default)");
        }
        Ok(())
    }
}

/// The `[limits]` table: what every process-tier sandbox's cgroup gets.
/// Same words and defaults as the docker tier's; 0 = unlimited, and only
/// when written explicitly (an absent key is the default).
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct LimitsConfig {
    /// Memory (RAM and swap together) in bytes; `"2g"`, `"512m"` or a number.
    #[serde(deserialize_with = "deserialize_memory")]
    pub memory: u64,
    /// The most processes and threads a sandbox may hold.
    pub pids: u64,
    /// How many CPUs a sandbox may use (fractions allowed).
    pub cpu: f64,
    /// How much a sandbox's workspace may hold on disk, in bytes: the
    /// kubernetes tier's claim size by default.
    #[serde(deserialize_with = "deserialize_memory")]
    pub disk: u64,
    /// How many files and directories a sandbox's workspace may hold; 0 =
    /// no limit.
    pub disk_inodes: u64,
    /// Free space kept on the state directory's file system: below it, new
    /// sandboxes are refused and writing ones stopped.
    pub state_reserve: StateReserve,
    /// The most pseudo-terminals a sandbox may hold at once, in the
    /// devpts of its own its view gets (`isolation = "full"`); 0 = no
    /// limit of its own (the kernel's `pty.max` less `pty.reserve`, shared
    /// by all sandboxes, still applies).
    pub ptys: u32,
}

impl Default for LimitsConfig {
    fn default() -> Self {
        LimitsConfig {
            memory: 2 * 1024 * 1024 * 1024,
            pids: 512,
            cpu: 2.0,
            disk: DEFAULT_DISK_LIMIT,
            disk_inodes: DEFAULT_DISK_INODES,
            state_reserve: StateReserve::default(),
            ptys: DEFAULT_PTYS,
        }
    }
}

/// `[pool]`: how many sandboxes the process tier keeps prepared per scope
/// (see `drivers/local_process/prepared/`): cgroups made with their
/// limits, a uid claimed, a workspace owned by it, and under
/// `isolation = "full"` the namespaces made and the view built, ahead of
/// demand, so a new sandbox only renames its workspace into place and
/// starts its runner. 0 turns a scope's pool off.
///
/// `park_runners` (default true): each prepared sandbox also holds its
/// runner, started as far as it can be without the sandbox's environment
/// (in the cgroups, under the uid, every filter applied) and waiting for
/// it, so the take is one message and the runner's exec.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct PoolConfig {
    pub session: usize,
    pub workflow: usize,
    pub connect: usize,
    pub park_runners: bool,
}

/// The most views one scope's pool may keep prepared: each is a process
/// and three namespaces held while nothing uses them.
pub const MAX_POOL_SIZE: usize = 256;

impl Default for PoolConfig {
    fn default() -> Self {
        PoolConfig {
            session: 4,
            workflow: 2,
            connect: 0,
            park_runners: true,
        }
    }
}

/// `isolation`: how far apart the process tier keeps its sandboxes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum IsolationMode {
    /// A uid and a cgroup, and a private view: its own mount, PID and IPC
    /// namespaces (where the daemon can make them; `status` says).
    #[default]
    Full,
    /// A uid and a cgroup only: the runner sees the host's file system,
    /// processes and IPC (the opt-out for runners that need the host's view).
    UidCgroup,
}

impl IsolationMode {
    /// The word the config file and `status` use.
    pub fn as_str(self) -> &'static str {
        match self {
            IsolationMode::Full => "full",
            IsolationMode::UidCgroup => "uid-cgroup",
        }
    }
}

/// The `[view]` table: what a sandbox sees of the host's file system under
/// `isolation = "full"`, beyond the defaults (the system read-only; `/root`,
/// `/home`, `/run/user`, the state and socket directories hidden; private
/// `/tmp`, `/var/tmp` and `/dev/shm`).
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ViewConfig {
    /// Visible read-only, even under a hidden path (a toolchain in `/root`).
    pub read_only: Vec<PathBuf>,
    /// Writable (a shared cache), even under a hidden path.
    pub read_write: Vec<PathBuf>,
    /// Out of sight: an empty read-only directory (or, over a file,
    /// `/dev/null` on a `nodev` mount, which cannot be opened).
    pub hidden: Vec<PathBuf>,
    /// The size of each private tmpfs (`/tmp`, `/var/tmp`, `/dev/shm`);
    /// default `[limits] memory` (or 2 GiB when that is unlimited). Their
    /// pages are charged to the sandbox's memory limit either way.
    #[serde(deserialize_with = "deserialize_optional_memory")]
    pub tmp_size: Option<u64>,
}

impl ViewConfig {
    /// The tmpfs size when `[limits] memory` is 0 (unlimited).
    const UNLIMITED_MEMORY_TMP_SIZE: u64 = 2 * 1024 * 1024 * 1024;
    /// The smallest tmpfs size accepted (1 MiB).
    const MIN_TMP_SIZE: u64 = 1024 * 1024;

    /// Each private tmpfs's size in bytes, given the memory limit.
    pub fn tmp_size(&self, memory_limit: u64) -> u64 {
        self.tmp_size.unwrap_or(if memory_limit == 0 {
            Self::UNLIMITED_MEMORY_TMP_SIZE
        } else {
            memory_limit
        })
    }

    /// Every path must be absolute, plain (no `.` or `..`), not `/`, and
    /// exist; the size at least 1 MiB.
    fn validate(&self) -> anyhow::Result<()> {
        for (key, paths) in [
            ("read_only", &self.read_only),
            ("read_write", &self.read_write),
            ("hidden", &self.hidden),
        ] {
            for path in paths {
                validate_view_path(key, path)?;
            }
        }
        if let Some(size) = self.tmp_size {
            if size < Self::MIN_TMP_SIZE {
                bail!("[view] tmp_size {size} bytes is below the minimum of 1 MiB");
            }
        }
        Ok(())
    }
}

/// One `[view]` path: absolute, plain, not `/`, existing.
fn validate_view_path(key: &str, path: &Path) -> anyhow::Result<()> {
    use std::path::Component;
    if !path.is_absolute() {
        bail!("[view] {key} path '{}' must be absolute", path.display());
    }
    if path
        .components()
        .any(|part| matches!(part, Component::CurDir | Component::ParentDir))
    {
        bail!(
            "[view] {key} path '{}' must not contain '.' or '..'",
            path.display()
        );
    }
    if path.parent().is_none() {
        bail!("[view] {key} path '/' is not allowed: name a directory or file below it");
    }
    if let Err(error) = std::fs::symlink_metadata(path) {
        bail!("[view] {key} path '{}': {error}", path.display());
    }
    Ok(())
}

/// Where the kubernetes tier puts its objects when neither
/// `STIGMER_SANDBOX_K8S_NAMESPACE` nor `[kubernetes] namespace` says.
pub const DEFAULT_K8S_NAMESPACE: &str = "stigmer-sandboxes";

/// The `[kubernetes]` table: how the kubernetes tier reaches the API server
/// and shapes each runner's objects. Every key has a default; unknown keys
/// are an error.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct KubernetesConfig {
    /// A kubeconfig file; unset means what every Kubernetes tool does:
    /// `KUBECONFIG`, then `~/.kube/config`, then the pod's service account.
    pub kubeconfig: Option<PathBuf>,
    /// The kubeconfig context to use; unset means its current context.
    pub context: Option<String>,
    /// Where the sandboxes' objects live. `STIGMER_SANDBOX_K8S_NAMESPACE`
    /// beats it; default [`DEFAULT_K8S_NAMESPACE`].
    pub namespace: String,
    /// The longest one call to the API server may take.
    #[serde(deserialize_with = "deserialize_duration")]
    pub request_timeout: Duration,
    /// The runner's command line; `None` runs the image's own entrypoint.
    pub command: Option<Vec<String>>,
    /// The runner container's resources, as Kubernetes quantities.
    pub cpu_request: String,
    pub memory_request: String,
    pub cpu_limit: String,
    pub memory_limit: String,
    /// The size of a session's or workflow's workspace claim.
    pub workspace_size: String,
    /// The claim's storage class; unset means the cluster's default.
    pub storage_class: Option<String>,
    /// `Always`, `IfNotPresent` or `Never`.
    pub image_pull_policy: String,
    /// Names of docker-registry Secrets in the namespace for pulling the image.
    pub image_pull_secrets: Vec<String>,
    /// A connect sandbox older than this is a leak and is removed. The old
    /// key: `[lifecycle.connect] ttl` is the one to write now (see
    /// [`lifecycle`]); resolved, this is always set, to the TTL in force.
    #[serde(deserialize_with = "deserialize_optional_duration")]
    pub connect_ttl: Option<Duration>,
    /// A connect sandbox younger than this is never touched by the reaper.
    #[serde(deserialize_with = "deserialize_duration")]
    pub connect_creation_grace: Duration,
    /// The RuntimeClass (node.k8s.io/v1) every runner pod names in
    /// `runtimeClassName` (one whose handler is gVisor's `runsc`, say);
    /// `None` is the cluster's default runtime. Checked at start.
    pub runtime_class: Option<String>,
}

impl Default for KubernetesConfig {
    fn default() -> Self {
        KubernetesConfig {
            kubeconfig: None,
            context: None,
            namespace: DEFAULT_K8S_NAMESPACE.to_string(),
            request_timeout: Duration::from_secs(5),
            command: None,
            cpu_request: "500m".to_string(),
            memory_request: "512Mi".to_string(),
            cpu_limit: "2".to_string(),
            memory_limit: "2Gi".to_string(),
            workspace_size: "10Gi".to_string(),
            storage_class: None,
            image_pull_policy: "IfNotPresent".to_string(),
            image_pull_secrets: Vec::new(),
            connect_ttl: None,
            connect_creation_grace: Duration::from_secs(120),
            runtime_class: None,
        }
    }
}

/// `[limits] disk` when not written: 10 GiB, the size of the kubernetes
/// tier's workspace claim.
pub const DEFAULT_DISK_LIMIT: u64 = 10 << 30;
/// The smallest disk limit allowed (0 aside).
const MIN_DISK_LIMIT: u64 = 1 << 20;
/// `[limits] disk_inodes` when not written: a million, far more than a
/// checkout with its dependencies needs.
pub const DEFAULT_DISK_INODES: u64 = 1_000_000;
/// The smallest `disk_inodes` allowed (0 aside): a runner needs a few.
const MIN_DISK_INODES: u64 = 100;
/// `[limits] ptys` when not written.
pub const DEFAULT_PTYS: u32 = 64;
/// The most `[limits] ptys` may be: the kernel's own cap on a devpts
/// (`NR_UNIX98_PTY_MAX`).
pub const MAX_PTYS: u32 = 1 << 20;

impl LimitsConfig {
    fn validate(&self) -> anyhow::Result<()> {
        if self.disk != 0 && self.disk < MIN_DISK_LIMIT {
            bail!(
                "[limits] disk {} bytes is below the minimum of 1 MiB (0 = unlimited)",
                self.disk
            );
        }
        if self.disk_inodes != 0 && self.disk_inodes < MIN_DISK_INODES {
            bail!(
                "[limits] disk_inodes {} is below the minimum of {MIN_DISK_INODES} files (0 = unlimited)",
                self.disk_inodes
            );
        }
        if self.memory != 0 && self.memory < DockerConfig::MIN_MEMORY {
            bail!(
                "[limits] memory {} bytes is below the minimum of 6 MiB (0 = unlimited)",
                self.memory
            );
        }
        if !(self.cpu == 0.0 || (self.cpu.is_finite() && self.cpu >= 0.01)) {
            bail!(
                "[limits] cpu {} must be 0 (unlimited) or a number of at least 0.01",
                self.cpu
            );
        }
        if self.ptys > MAX_PTYS {
            bail!(
                "[limits] ptys {} is above the kernel's most of {MAX_PTYS} per devpts (0 = no limit of its own)",
                self.ptys
            );
        }
        Ok(())
    }
}

impl KubernetesConfig {
    fn validate(&self) -> anyhow::Result<()> {
        if self.namespace.is_empty() {
            bail!("[kubernetes] namespace must not be empty");
        }
        if self.request_timeout.is_zero() || self.request_timeout > Duration::from_secs(300) {
            bail!(
                "[kubernetes] request_timeout {:?} must be longer than 0 and at most 5m",
                self.request_timeout
            );
        }
        if let Some(command) = &self.command {
            if command.first().is_none_or(String::is_empty) {
                bail!("[kubernetes] command {command:?} must name a program first");
            }
        }
        for (key, value) in [
            ("cpu_request", &self.cpu_request),
            ("memory_request", &self.memory_request),
            ("cpu_limit", &self.cpu_limit),
            ("memory_limit", &self.memory_limit),
            ("workspace_size", &self.workspace_size),
        ] {
            if value.is_empty() {
                bail!("[kubernetes] {key} must not be empty");
            }
        }
        if !["Always", "IfNotPresent", "Never"].contains(&self.image_pull_policy.as_str()) {
            bail!(
                "[kubernetes] image_pull_policy '{}' must be Always, IfNotPresent or Never",
                self.image_pull_policy
            );
        }
        if self.connect_ttl.is_some_and(|ttl| ttl.is_zero()) {
            bail!("[kubernetes] connect_ttl must be longer than 0");
        }
        if let Some(class) = &self.runtime_class {
            if !is_dns_subdomain(class) {
                bail!(
                    "[kubernetes] runtime_class '{class}' is not a RuntimeClass name: at most 253 \
                     lower-case letters, digits, '-' and '.', starting and ending with a letter or digit"
                );
            }
        }
        Ok(())
    }
}

/// A Kubernetes object name (RFC 1123 subdomain), as the API server checks
/// a RuntimeClass's: said at start rather than by a refused pod.
fn is_dns_subdomain(name: &str) -> bool {
    let edge = |c: Option<char>| c.is_some_and(|c| c.is_ascii_lowercase() || c.is_ascii_digit());
    name.len() <= 253
        && edge(name.chars().next())
        && edge(name.chars().last())
        && name
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-' || c == '.')
}

/// `containment`: how the process tier contains its runners.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum ContainmentMode {
    /// A cgroup per sandbox where a writable cgroup v2 exists, else
    /// process groups (with a warning).
    #[default]
    Auto,
    /// A cgroup per sandbox, or the daemon does not start.
    Cgroup,
    /// Process groups only (weaker: `setsid` escapes, no limits).
    ProcessGroup,
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

/// The file's shape. Every key is optional; unknown keys are an error.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct FileConfig {
    driver: Option<String>,
    socket: Option<PathBuf>,
    socket_group: Option<String>,
    state_dir: Option<PathBuf>,
    stop_grace: Option<String>,
    runner_command: Option<String>,
    runner_args: Option<Vec<String>>,
    runner_path: Option<String>,
    runner: Option<runner_env::RunnerFile>,
    runner_image: Option<String>,
    backend_endpoint: Option<String>,
    temporal_address: Option<String>,
    run_as: Option<String>,
    allow_root_runners: Option<bool>,
    max_connections: Option<usize>,
    max_requests_per_connection: Option<usize>,
    events_ring: Option<usize>,
    metrics_listen: Option<String>,
    log_level: Option<String>,
    #[serde(default, deserialize_with = "deserialize_optional_memory")]
    runner_log_max_size: Option<u64>,
    runner_oom_score_adj: Option<i32>,
    workspace_ttl: Option<String>,
    runner_uid_range: Option<String>,
    uid_claims_dir: Option<PathBuf>,
    access: Option<AccessConfig>,
    docker: Option<DockerConfig>,
    cgroup_root: Option<PathBuf>,
    containment: Option<ContainmentMode>,
    limits: Option<LimitsConfig>,
    connections: Option<ConnectionsConfig>,
    instance: Option<String>,
    egress: Option<EgressSetting>,
    kubernetes: Option<KubernetesConfig>,
    isolation: Option<IsolationMode>,
    view: Option<ViewConfig>,
    network: Option<NetworkConfig>,
    pool: Option<PoolConfig>,
    lifecycle: Option<lifecycle::LifecycleFile>,
    commands: Option<CommandsConfig>,
}

/// The resolved configuration.
#[derive(Debug, Clone)]
pub struct Config {
    /// Which file was read, if any.
    pub source_file: Option<PathBuf>,
    pub driver: String,
    pub socket: PathBuf,
    /// The group the socket (and its directory) is chowned to, by name or number.
    pub socket_group: Option<String>,
    pub state_dir: PathBuf,
    pub stop_grace: Duration,
    pub runner_command: String,
    pub runner_args: Vec<String>,
    /// The `PATH` every process-tier runner starts with (not the daemon's:
    /// the runner command itself is still looked up in the daemon's).
    pub runner_path: String,
    pub runner_image: Option<String>,
    pub backend_endpoint: String,
    pub temporal_address: String,
    /// `user[:group]` the process tier's runners run as.
    pub run_as: Option<String>,
    pub allow_root_runners: bool,
    pub max_connections: usize,
    pub max_requests_per_connection: usize,
    /// How many events the daemon keeps in memory for `events` callers
    /// (`events_ring`, default 4096): a follower further behind than that
    /// gets `expired` and relists.
    pub events_ring: usize,
    /// `metrics_listen`: where the Prometheus endpoint is served
    /// (`GET /metrics`, plain HTTP); `None`, the default, serves none.
    pub metrics_listen: Option<std::net::SocketAddr>,
    pub log_level: Option<String>,
    /// The process tier's cap on one runner's output on disk, in bytes: the
    /// live file and one rotated file, at most half of it each.
    pub runner_log_max_size: u64,
    /// The process tier's runners get this `oom_score_adj`, so a daemon
    /// shielded from the OOM killer does not pass the shield on.
    pub runner_oom_score_adj: i32,
    /// A process-tier workspace unused this long is removed (with its
    /// output files); `None` keeps workspaces until deprovisioned.
    pub workspace_ttl: Option<Duration>,
    /// `FIRST-LAST`: the uids the process tier's sandboxes get, one each
    /// (parsed and checked against the host's users by that driver).
    pub runner_uid_range: Option<String>,
    /// Where every daemon on the host claims the uids its sandboxes hold
    /// (see `users/uid_claims.rs`); all of them must share it.
    pub uid_claims_dir: PathBuf,
    pub access: AccessConfig,
    /// The docker tier's settings; `host` is always set once resolved.
    pub docker: DockerConfig,
    /// The cgroup v2 directory the process tier puts `sandboxes/` in;
    /// `None`: the daemon's own when delegated, else `sandboxd` under the v2 mount.
    pub cgroup_root: Option<PathBuf>,
    pub containment: ContainmentMode,
    /// The process tier's per-sandbox limits.
    pub limits: LimitsConfig,
    /// How the socket shares its slots out and bounds slow or idle peers.
    pub connections: ConnectionsConfig,
    /// This daemon's instance on a shared runtime (see [`crate::instance`]).
    pub instance: Instance,
    /// The egress posture every sandbox is held to: `relaxed` unless the
    /// file says otherwise; `none` only when written.
    pub egress: EgressSetting,
    /// The kubernetes tier's settings; `namespace` is always resolved.
    pub kubernetes: KubernetesConfig,
    /// How far apart the process tier keeps its sandboxes (default `full`).
    pub isolation: IsolationMode,
    /// What a sandbox sees under `isolation = "full"`.
    pub view: ViewConfig,
    /// `[network]`: a network namespace per sandbox, or the host's.
    pub network: NetworkConfig,
    /// The views kept prepared per scope under `isolation = "full"`.
    pub pool: PoolConfig,
    /// `[lifecycle.*]`: idle and lifetime limits per scope (unset: never).
    pub lifecycle: LifecycleConfig,
    /// `[commands]`: the bounds of the commands' output store.
    pub commands: CommandsConfig,
    /// `[runner] env`: given to every process-tier runner and command.
    pub runner_env: Vec<(String, String)>,
}

/// Reads one environment variable; unset and empty are both "not given".
fn env_var(name: &str) -> Option<String> {
    std::env::var(name).ok().filter(|value| !value.is_empty())
}

impl Config {
    /// File, then environment, then flags, then validation.
    pub fn load(flags: &Flags) -> anyhow::Result<Config> {
        let (file, source_file) = match &flags.config {
            Some(path) => (read_file(path)?, Some(path.clone())),
            None if Path::new(DEFAULT_CONFIG_FILE).exists() => {
                let path = PathBuf::from(DEFAULT_CONFIG_FILE);
                (read_file(&path)?, Some(path))
            }
            None => (FileConfig::default(), None),
        };
        Self::resolve(file, source_file, env_var, flags)
    }

    fn resolve(
        file: FileConfig,
        source_file: Option<PathBuf>,
        env: impl Fn(&str) -> Option<String>,
        flags: &Flags,
    ) -> anyhow::Result<Config> {
        let is_root = nix::unistd::geteuid().is_root();
        let stop_grace_text = flags.stop_grace.clone().or(file.stop_grace);
        let stop_grace = match stop_grace_text {
            Some(text) => parse_duration(&text).with_context(|| format!("stop_grace '{text}'"))?,
            None => Duration::from_secs(10),
        };
        let mut docker = file.docker.unwrap_or_default();
        if docker.host.is_none() {
            docker.host =
                Some(env("DOCKER_HOST").unwrap_or_else(|| DEFAULT_DOCKER_HOST.to_string()));
        }
        let mut kubernetes = file.kubernetes.unwrap_or_default();
        let (lifecycle, connect_ttl) = file.lifecycle.unwrap_or_default().resolve()?;
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
        let driver = flags
            .driver
            .clone()
            .or_else(|| env("SANDBOX_PROVISIONER_TYPE"))
            .or(file.driver)
            .unwrap_or_else(|| "local-process".to_string());
        driver_name::check(&driver)?;
        let config = Config {
            source_file,
            driver,
            socket: match flags.socket.clone().or(file.socket) {
                Some(path) => path,
                None => default_socket(is_root)?,
            },
            socket_group: file.socket_group,
            state_dir: match flags.state_dir.clone().or(file.state_dir) {
                Some(path) => path,
                None => default_state_dir(is_root)?,
            },
            stop_grace,
            runner_command: flags
                .runner_command
                .clone()
                .or_else(|| env("STIGMER_SANDBOX_RUNNER_COMMAND"))
                .or(file.runner_command)
                .unwrap_or_else(|| "stigmer-runner".to_string()),
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
            metrics_listen: match file.metrics_listen {
                Some(text) => Some(parse_metrics_listen(&text)?),
                None => None,
            },
            log_level: file.log_level,
            runner_log_max_size: file
                .runner_log_max_size
                .unwrap_or(DEFAULT_RUNNER_LOG_MAX_SIZE),
            runner_oom_score_adj: file.runner_oom_score_adj.unwrap_or(0),
            workspace_ttl: match file.workspace_ttl {
                Some(text) => {
                    parse_ttl(&text).with_context(|| format!("workspace_ttl '{text}'"))?
                }
                None => Some(DEFAULT_WORKSPACE_TTL),
            },
            runner_uid_range: file.runner_uid_range,
            uid_claims_dir: file
                .uid_claims_dir
                .unwrap_or_else(|| PathBuf::from(DEFAULT_UID_CLAIMS_DIR)),
            access: file.access.unwrap_or_default(),
            docker,
            cgroup_root: file.cgroup_root,
            containment: file.containment.unwrap_or_default(),
            limits: file.limits.unwrap_or_default(),
            connections: file.connections.unwrap_or_default(),
            instance: Instance::from_config(file.instance.as_deref())?,
            egress: file.egress.unwrap_or_default(),
            kubernetes,
            isolation: file.isolation.unwrap_or_default(),
            view: file.view.unwrap_or_default(),
            network: file.network.unwrap_or_default(),
            pool: file.pool.unwrap_or_default(),
            commands: file.commands.unwrap_or_default().checked()?,
            lifecycle,
            runner_env: file.runner.unwrap_or_default().checked()?,
        };
        config.validate()?;
        Ok(config)
    }

    fn validate(&self) -> anyhow::Result<()> {
        if !self.socket.is_absolute() {
            bail!("socket path '{}' must be absolute", self.socket.display());
        }
        if !self.state_dir.is_absolute() {
            bail!("state_dir '{}' must be absolute", self.state_dir.display());
        }
        if self.runner_command.is_empty() {
            bail!("runner_command must not be empty");
        }
        validate_runner_path(&self.runner_path)?;
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
        self.limits.validate()?;
        self.view.validate()?;
        if self.network.mode == NetworkMode::Private && self.isolation != IsolationMode::Full {
            bail!(
                "[network] mode = \"private\" needs isolation = \"full\" (a sandbox's network namespace is part of its view); isolation is \"{}\"",
                self.isolation.as_str()
            );
        }
        self.docker.validate()?;
        self.connections.validate(self.max_connections)?;
        self.kubernetes.validate()
    }

    /// The container tiers' runner image, which they cannot run without.
    pub fn required_runner_image(&self, driver: &str) -> Result<String, String> {
        self.runner_image
            .clone()
            .filter(|image| !image.is_empty())
            .ok_or_else(|| {
                format!(
                    "the {driver} driver needs a runner image: set runner_image in the config \
                     file or STIGMER_SANDBOX_RUNNER_IMAGE"
                )
            })
    }

    /// True when `state_dir` is the default of a root daemon.
    pub fn has_default_state_dir(&self) -> bool {
        default_state_dir(true).is_ok_and(|default| default == self.state_dir)
    }
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

fn read_file(path: &Path) -> anyhow::Result<FileConfig> {
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("cannot read config file '{}'", path.display()))?;
    toml::from_str(&text).with_context(|| format!("invalid config file '{}'", path.display()))
}

fn default_socket(is_root: bool) -> anyhow::Result<PathBuf> {
    if is_root {
        return Ok(PathBuf::from("/run/stigmer/sandboxd.sock"));
    }
    let runtime = dirs::runtime_dir()
        .context("XDG_RUNTIME_DIR is not set: pass --socket or set it in the config file")?;
    Ok(runtime.join("stigmer").join("sandboxd.sock"))
}

fn default_state_dir(is_root: bool) -> anyhow::Result<PathBuf> {
    if is_root {
        return Ok(PathBuf::from("/var/lib/stigmer/sandboxd"));
    }
    let data = dirs::data_dir().context(
        "no data directory for this user: pass --state-dir or set it in the config file",
    )?;
    Ok(data.join("stigmer").join("sandboxd"))
}

/// The default `workspace_ttl`: a week.
pub const DEFAULT_WORKSPACE_TTL: Duration = Duration::from_secs(7 * 24 * 3600);

/// A `workspace_ttl`: `off` or `0` (never expire), else a duration as for
/// [`parse_duration`] or a number of days (`7d`). At least a second.
pub fn parse_ttl(text: &str) -> anyhow::Result<Option<Duration>> {
    let trimmed = text.trim();
    if trimmed.eq_ignore_ascii_case("off") || trimmed == "0" {
        return Ok(None);
    }
    let ttl = match trimmed.strip_suffix('d') {
        Some(days) => {
            let days: u64 = days
                .trim()
                .parse()
                .with_context(|| format!("'{text}' is not a number of days like 7d"))?;
            Duration::from_secs(days.saturating_mul(86_400))
        }
        None => parse_duration(trimmed)?,
    };
    if ttl < Duration::from_secs(1) {
        bail!("'{text}' is shorter than a second: write 'off' to keep workspaces forever");
    }
    Ok(Some(ttl))
}

/// `2g`, `512m`, `1024k`, `1gb`, `2GiB` (binary multiples) or a bare number
/// of bytes, as the docker CLI writes memory sizes.
pub fn parse_memory(text: &str) -> anyhow::Result<u64> {
    let (text, number, unit) = split_number(text);
    let value: u64 = number
        .parse()
        .with_context(|| format!("'{text}' is not a memory size like 2g, 512m or 1073741824"))?;
    let unit = unit.trim().to_ascii_lowercase();
    let unit = unit
        .strip_suffix("ib")
        .or_else(|| unit.strip_suffix('b'))
        .unwrap_or(&unit);
    let shift = match unit {
        "" => 0,
        "k" => 10,
        "m" => 20,
        "g" => 30,
        "t" => 40,
        _ => bail!("unknown memory unit in '{text}': use k, m, g or t"),
    };
    value
        .checked_mul(1 << shift)
        .with_context(|| format!("memory size '{text}' is too large"))
}

/// A duration key: a string for [`parse_duration`].
fn deserialize_duration<'de, D: serde::Deserializer<'de>>(
    deserializer: D,
) -> Result<Duration, D::Error> {
    let text = String::deserialize(deserializer)?;
    parse_duration(&text).map_err(|error| serde::de::Error::custom(format!("{error:#}")))
}

/// An optional duration key, written as for [`deserialize_duration`].
fn deserialize_optional_duration<'de, D: serde::Deserializer<'de>>(
    deserializer: D,
) -> Result<Option<Duration>, D::Error> {
    deserialize_duration(deserializer).map(Some)
}

/// An optional size key (`runner_log_max_size`), written as for [`deserialize_memory`].
fn deserialize_optional_memory<'de, D: serde::Deserializer<'de>>(
    deserializer: D,
) -> Result<Option<u64>, D::Error> {
    deserialize_memory(deserializer).map(Some)
}

/// A memory key: a number of bytes, or a string for [`parse_memory`].
fn deserialize_memory<'de, D: serde::Deserializer<'de>>(deserializer: D) -> Result<u64, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum Memory {
        Bytes(u64),
        Text(String),
    }
    match Memory::deserialize(deserializer)? {
        Memory::Bytes(bytes) => Ok(bytes),
        Memory::Text(text) => {
            parse_memory(&text).map_err(|error| serde::de::Error::custom(format!("{error:#}")))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn resolve(file: &str, env: &[(&str, &str)], flags: Flags) -> anyhow::Result<Config> {
        let file: FileConfig = toml::from_str(file)?;
        let env: Vec<(String, String)> = env
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        let lookup = move |name: &str| env.iter().find(|(k, _)| k == name).map(|(_, v)| v.clone());
        let flags = Flags {
            socket: flags.socket.or(Some("/tmp/s.sock".into())),
            state_dir: flags.state_dir.or(Some("/tmp/state".into())),
            ..flags
        };
        Config::resolve(file, None, lookup, &flags)
    }

    #[test]
    fn the_pool_has_defaults_per_scope_and_its_sizes_are_checked() {
        let config = resolve("", &[], Flags::default()).unwrap();
        assert_eq!(config.pool, PoolConfig::default());
        assert_eq!(
            (
                config.pool.session,
                config.pool.workflow,
                config.pool.connect
            ),
            (4, 2, 0)
        );
        let off = resolve("[pool]\nsession = 0", &[], Flags::default()).unwrap();
        assert_eq!((off.pool.session, off.pool.workflow), (0, 2));
        for (file, words) in [
            (
                "[pool]\nsession = 257",
                "[pool] session = 257 is more than the 256",
            ),
            ("[pool]\nworkflow = -1", "workflow"),
            ("[pool]\nsessions = 4", "unknown field"),
        ] {
            let error = format!("{:#}", resolve(file, &[], Flags::default()).unwrap_err());
            assert!(error.contains(words), "{file}: {error}");
        }
    }

    #[test]
    fn isolation_is_full_by_default_and_view_paths_are_checked() {
        let config = resolve("", &[], Flags::default()).unwrap();
        assert_eq!(config.isolation, IsolationMode::Full);
        assert_eq!(config.view.tmp_size(config.limits.memory), 2 << 30);
        let opt_out = resolve("isolation = \"uid-cgroup\"", &[], Flags::default()).unwrap();
        assert_eq!(opt_out.isolation, IsolationMode::UidCgroup);
        let sized = resolve("[view]\ntmp_size = \"64m\"", &[], Flags::default()).unwrap();
        assert_eq!(sized.view.tmp_size(0), 64 << 20);
        for (file, words) in [
            ("[view]\nhidden = [\"relative/dir\"]", "must be absolute"),
            ("[view]\nread_only = [\"/\"]", "'/' is not allowed"),
            ("[view]\nread_write = [\"/usr/../etc\"]", "'..'"),
            (
                "[view]\nhidden = [\"/nonexistent/sandboxd-view\"]",
                "/nonexistent/sandboxd-view",
            ),
            ("[view]\ntmp_size = \"4k\"", "below the minimum"),
            ("[view]\nshown = [\"/usr\"]", "unknown field"),
            ("isolation = \"none\"", "unknown variant"),
        ] {
            let error = format!("{:#}", resolve(file, &[], Flags::default()).unwrap_err());
            assert!(error.contains(words), "{file}: {error}");
        }
    }

    #[test]
    fn defaults() {
        let config = resolve("", &[], Flags::default()).unwrap();
        assert_eq!(config.driver, "local-process");
        assert_eq!(config.stop_grace, Duration::from_secs(10));
        assert_eq!(config.runner_command, "stigmer-runner");
        assert_eq!(config.access, AccessConfig::default());
    }

    #[test]
    fn runner_path_defaults_to_systemds_and_must_be_absolute_directories() {
        let config = resolve("", &[], Flags::default()).unwrap();
        assert_eq!(config.runner_path, DEFAULT_RUNNER_PATH);
        let config = resolve(
            "runner_path = \"/opt/tools/bin:/usr/bin\"",
            &[],
            Flags::default(),
        );
        assert_eq!(config.unwrap().runner_path, "/opt/tools/bin:/usr/bin");
        for bad in ["bin:/usr/bin", "/usr/bin::/bin", ""] {
            let error = resolve(&format!("runner_path = {bad:?}"), &[], Flags::default())
                .err()
                .unwrap_or_else(|| panic!("runner_path {bad:?} was accepted"));
            assert!(format!("{error:#}").contains("runner_path"), "{error:#}");
        }
    }

    #[test]
    fn flags_beat_env_beat_file() {
        let file =
            "driver = \"docker\"\nrunner_command = \"/file/runner\"\nbackend_endpoint = \"file:1\"";
        let env = [
            ("SANDBOX_PROVISIONER_TYPE", "kubernetes"),
            ("STIGMER_SANDBOX_RUNNER_COMMAND", "/env/runner"),
        ];
        let config = resolve(file, &env, Flags::default()).unwrap();
        assert_eq!(config.driver, "kubernetes");
        assert_eq!(config.runner_command, "/env/runner");
        assert_eq!(config.backend_endpoint, "file:1");
        let flags = Flags {
            driver: Some("local-process".into()),
            ..Flags::default()
        };
        assert_eq!(resolve(file, &env, flags).unwrap().driver, "local-process");
    }

    #[test]
    fn unknown_keys_are_errors() {
        let error = toml::from_str::<FileConfig>("drvier = \"docker\"").unwrap_err();
        assert!(error.to_string().contains("drvier"), "{error}");
        let error = toml::from_str::<FileConfig>("[access]\nmutate_uid = [1]").unwrap_err();
        assert!(error.to_string().contains("mutate_uid"), "{error}");
    }

    #[test]
    fn egress_defaults_to_relaxed_and_none_must_be_written() {
        use sandboxd_protocol::egress::Posture;
        let config = resolve("", &[], Flags::default()).unwrap();
        assert_eq!(config.egress, EgressSetting::Enforced(Posture::Relaxed));
        let strict = resolve("egress = \"strict\"", &[], Flags::default()).unwrap();
        assert_eq!(strict.egress, EgressSetting::Enforced(Posture::Strict));
        let none = resolve("egress = \"none\"", &[], Flags::default()).unwrap();
        assert_eq!(none.egress, EgressSetting::Unrestricted);
        let error = resolve("egress = \"off\"", &[], Flags::default()).unwrap_err();
        assert!(
            error.to_string().contains("known: relaxed, strict, none"),
            "{error}"
        );
    }

    #[test]
    fn durations() {
        assert_eq!(parse_duration("10s").unwrap(), Duration::from_secs(10));
        assert_eq!(parse_duration("250ms").unwrap(), Duration::from_millis(250));
        assert_eq!(parse_duration("2m").unwrap(), Duration::from_secs(120));
        assert_eq!(parse_duration("3").unwrap(), Duration::from_secs(3));
        assert_eq!(parse_duration("1h").unwrap(), Duration::from_secs(3600));
        assert!(parse_duration("ten").is_err());
        assert!(parse_duration("5d").is_err());
    }

    #[test]
    fn docker_table_defaults_and_keys() {
        let config = resolve(
            "",
            &[("DOCKER_HOST", "tcp://10.0.0.1:2375")],
            Flags::default(),
        )
        .unwrap();
        assert_eq!(
            config.docker.host.as_deref(),
            Some("tcp://10.0.0.1:2375"),
            "DOCKER_HOST is the default"
        );
        assert_eq!(config.docker.user, "65534:65534");
        assert_eq!(config.docker.network, "bridge");
        assert_eq!(config.docker.memory, 2 << 30);
        assert_eq!(config.docker.cpus, 2.0);
        assert_eq!(config.docker.pids_limit, 512);
        assert_eq!(config.docker.connect_ttl, Some(Duration::from_secs(3600)));
        assert_eq!(
            config.docker.connect_creation_grace,
            Duration::from_secs(120)
        );
        assert_eq!(config.docker.command, None);
        let defaults = resolve("", &[], Flags::default()).unwrap();
        assert_eq!(defaults.docker.host.as_deref(), Some(DEFAULT_DOCKER_HOST));

        let file = "[docker]\nhost = \"unix:///run/d.sock\"\ncommand = [\"/runner\", \"--x\"]\n\
                    memory = \"512m\"\ncpus = 0.5\npids_limit = 64\nconnect_ttl = \"30s\"\n\
                    connect_creation_grace = \"5s\"\nuser = \"1000:1000\"\nnetwork = \"none\"";
        let config = resolve(
            file,
            &[("DOCKER_HOST", "tcp://ignored:1")],
            Flags::default(),
        )
        .unwrap();
        assert_eq!(
            config.docker.host.as_deref(),
            Some("unix:///run/d.sock"),
            "the file's host wins"
        );
        assert_eq!(
            config.docker.command,
            Some(vec!["/runner".to_string(), "--x".to_string()])
        );
        assert_eq!(config.docker.memory, 512 << 20);
        assert_eq!((config.docker.cpus, config.docker.pids_limit), (0.5, 64));
        assert_eq!(config.docker.connect_ttl, Some(Duration::from_secs(30)));
        assert_eq!(config.docker.connect_creation_grace, Duration::from_secs(5));
        assert_eq!(
            (config.docker.user.as_str(), config.docker.network.as_str()),
            ("1000:1000", "none")
        );
        assert_eq!(
            resolve("[docker]\nmemory = 104857600", &[], Flags::default())
                .unwrap()
                .docker
                .memory,
            100 << 20
        );

        let error = toml::from_str::<FileConfig>("[docker]\nmemroy = \"1g\"").unwrap_err();
        assert!(error.to_string().contains("memroy"), "{error}");
        let error = toml::from_str::<FileConfig>("[docker]\nmemory = \"2x\"").unwrap_err();
        assert!(error.to_string().contains("2x"), "{error}");
        let error = resolve("[docker]\nmemory = \"1k\"", &[], Flags::default()).unwrap_err();
        assert!(error.to_string().contains("minimum"), "{error}");
        let error = resolve("[docker]\ncommand = []", &[], Flags::default()).unwrap_err();
        assert!(error.to_string().contains("command"), "{error}");
    }

    #[test]
    fn runtime_keys_default_to_the_engines_and_the_clusters_own() {
        let config = resolve("", &[], Flags::default()).unwrap();
        assert_eq!(config.docker.runtime, None);
        assert_eq!(config.kubernetes.runtime_class, None);
        let file = "[docker]\nruntime = \"runsc\"\n[kubernetes]\nruntime_class = \"gvisor\"";
        let config = resolve(file, &[], Flags::default()).unwrap();
        assert_eq!(config.docker.runtime.as_deref(), Some("runsc"));
        assert_eq!(config.kubernetes.runtime_class.as_deref(), Some("gvisor"));

        let error = resolve("[docker]\nruntime = \"\"", &[], Flags::default()).unwrap_err();
        assert!(error.to_string().contains("[docker] runtime"), "{error}");
        for bad in ["", "gVisor", "-gvisor", "g_visor", &"a".repeat(254)] {
            let file = format!("[kubernetes]\nruntime_class = \"{bad}\"");
            let error = resolve(&file, &[], Flags::default()).unwrap_err();
            assert!(
                error.to_string().contains("[kubernetes] runtime_class"),
                "{bad}: {error}"
            );
        }
        let file = "[kubernetes]\nruntime_class = \"gvisor.runsc-1\"";
        assert!(resolve(file, &[], Flags::default()).is_ok());
    }

    #[test]
    fn runner_log_max_size_defaults_parses_and_has_a_floor() {
        let config = resolve("", &[], Flags::default()).unwrap();
        assert_eq!(config.runner_log_max_size, 16 << 20);
        let config = resolve("runner_log_max_size = \"4k\"", &[], Flags::default()).unwrap();
        assert_eq!(config.runner_log_max_size, 4096);
        let config = resolve("runner_log_max_size = 2048", &[], Flags::default()).unwrap();
        assert_eq!(config.runner_log_max_size, 2048);
        let error = resolve("runner_log_max_size = 100", &[], Flags::default()).unwrap_err();
        assert!(
            error.to_string().contains("runner_log_max_size 100"),
            "{error}"
        );
    }

    /// The keys serde knows for a table, read from its unknown-field error
    /// ("unknown field `x`, expected one of `a`, `b`, …"), so this test
    /// follows every key added later without being edited.
    fn known_keys(table: &str) -> Vec<String> {
        let probe = if table.is_empty() {
            "zz_not_a_key = 1".to_string()
        } else {
            format!("[{table}]\nzz_not_a_key = 1")
        };
        let error = toml::from_str::<FileConfig>(&probe)
            .unwrap_err()
            .to_string();
        // serde says "expected one of `a`, `b`, `c`", or "expected `a` or `b`".
        let expected = error
            .split("expected one of ")
            .nth(1)
            .or_else(|| error.split("expected ").nth(1))
            .unwrap_or_else(|| panic!("no key list in: {error}"));
        let list = expected.lines().next().unwrap();
        list.split(", ")
            .flat_map(|keys| keys.split(" or "))
            .map(|key| key.trim_matches('`').to_string())
            .collect()
    }

    #[test]
    fn private_networking_needs_the_full_isolation() {
        let config = resolve("[network]\nmode = \"private\"", &[], Flags::default()).unwrap();
        assert_eq!(config.network.mode, NetworkMode::Private);
        let error = resolve(
            "isolation = \"uid-cgroup\"\n[network]\nmode = \"private\"",
            &[],
            Flags::default(),
        )
        .unwrap_err()
        .to_string();
        assert!(
            error.contains("[network] mode") && error.contains("uid-cgroup"),
            "{error}"
        );
    }

    #[test]
    fn the_example_config_parses_and_shows_every_key() {
        let text = include_str!("../../systemd/sandboxd.toml");
        let file: FileConfig = toml::from_str(text).expect("the example parses");
        let config = Config::resolve(file, None, |_| None, &Flags::default()).unwrap();
        // Each sandbox its own uid; run_as (one user for all) is the opt-out.
        assert_eq!(config.run_as, None);
        assert_eq!(
            config.runner_uid_range.as_deref(),
            Some("2000000000-2000065535")
        );
        assert_eq!(config.socket_group.as_deref(), Some("stigmer"));
        assert_eq!(config.runner_log_max_size, DEFAULT_RUNNER_LOG_MAX_SIZE);

        let shown = |table: &str, key: &str| {
            let mut current = String::new();
            text.lines().any(|line| {
                if let Some(name) = line.strip_prefix('[') {
                    current = name.trim_end_matches(']').to_string();
                }
                let line = line.trim_start_matches("# ");
                current == table && line.starts_with(&format!("{key} = "))
            })
        };
        let top = known_keys("");
        assert!(top.contains(&"driver".to_string()), "{top:?}");
        for key in &top {
            if key == "access"
                || key == "docker"
                || key == "limits"
                || key == "connections"
                || key == "kubernetes"
                || key == "view"
                || key == "network"
                || key == "pool"
                || key == "commands"
                || key == "runner"
            {
                assert!(text.contains(&format!("\n[{key}]\n")), "no [{key}] table");
                continue;
            }
            if key == "lifecycle" {
                for scope in ["session", "workflow", "connect"] {
                    assert!(
                        text.contains(&format!("\n[lifecycle.{scope}]\n")),
                        "no [lifecycle.{scope}] table"
                    );
                }
                continue;
            }
            assert!(shown("", key), "the example config does not show `{key}`");
        }
        for table in [
            "access",
            "docker",
            "limits",
            "connections",
            "kubernetes",
            "view",
            "network",
            "pool",
            "commands",
            "lifecycle.session",
            "lifecycle.workflow",
            "lifecycle.connect",
        ] {
            let keys = known_keys(table);
            let least = match table {
                "limits" | "pool" | "lifecycle.session" | "lifecycle.workflow" => 3,
                "commands" => 2,
                "network" => 1,
                _ => 4,
            };
            assert!(keys.len() >= least, "[{table}]: {keys:?}");
            for key in keys {
                assert!(
                    shown(table, &key),
                    "the example config does not show [{table}] `{key}`"
                );
            }
        }
    }

    #[test]
    fn limits_default_like_docker_and_zero_means_unlimited_only_when_written() {
        let config = resolve("", &[], Flags::default()).unwrap();
        assert_eq!(
            (config.limits.memory, config.limits.pids, config.limits.cpu),
            (2 << 30, 512, 2.0)
        );
        assert_eq!(config.limits.disk, 10 << 30);
        assert_eq!(config.uid_claims_dir, PathBuf::from("/run/stigmer/uids"));
        assert_eq!(config.containment, ContainmentMode::Auto);
        assert_eq!(config.cgroup_root, None);
        let config = resolve("[limits]\nmemory = \"64m\"", &[], Flags::default()).unwrap();
        assert_eq!(
            (config.limits.memory, config.limits.pids, config.limits.cpu),
            (64 << 20, 512, 2.0),
            "an absent key keeps its default"
        );
        let file = "containment = \"process-group\"\ncgroup_root = \"/sys/fs/cgroup/x\"\n\
                    [limits]\nmemory = 0\npids = 0\ncpu = 0.0\ndisk = 0";
        let config = resolve(file, &[], Flags::default()).unwrap();
        assert_eq!(
            (config.limits.memory, config.limits.pids, config.limits.cpu),
            (0, 0, 0.0)
        );
        assert_eq!(config.limits.disk, 0);
        assert_eq!(config.containment, ContainmentMode::ProcessGroup);
        assert_eq!(config.cgroup_root, Some(PathBuf::from("/sys/fs/cgroup/x")));
        for (bad, named) in [
            ("[limits]\nmemory = \"1k\"", "memory"),
            ("[limits]\ncpu = 0.001", "cpu"),
            ("[limits]\ncpu = -1.0", "cpu"),
            ("[limits]\ndisk = \"512k\"", "disk"),
            ("[limits]\ndisk_inodes = 5", "disk_inodes"),
            ("[limits]\nstate_reserve = \"100%\"", "state_reserve"),
            ("uid_claims_dir = \"run/uids\"", "uid_claims_dir"),
            ("cgroup_root = \"relative\"", "cgroup_root"),
        ] {
            let error = resolve(bad, &[], Flags::default()).unwrap_err();
            assert!(error.to_string().contains(named), "{bad}: {error}");
        }
        let error = toml::from_str::<FileConfig>("containment = \"jail\"").unwrap_err();
        assert!(error.to_string().contains("jail"), "{error}");
        let error = toml::from_str::<FileConfig>("[limits]\nmemroy = 1").unwrap_err();
        assert!(error.to_string().contains("memroy"), "{error}");
    }

    #[test]
    fn ptys_default_to_64_and_a_bad_count_is_named() {
        let config = resolve("", &[], Flags::default()).unwrap();
        assert_eq!(config.limits.ptys, 64);
        let config = resolve("[limits]\nptys = 0", &[], Flags::default()).unwrap();
        assert_eq!(config.limits.ptys, 0, "0: no limit of its own");
        for bad in [
            "[limits]\nptys = 2000000",
            "[limits]\nptys = -1",
            "[limits]\nptys = \"many\"",
        ] {
            let error = format!("{:#}", resolve(bad, &[], Flags::default()).unwrap_err());
            assert!(error.contains("ptys"), "{bad}: {error}");
        }
    }

    #[test]
    fn kubernetes_table_defaults_env_and_keys() {
        let config = resolve("", &[], Flags::default()).unwrap();
        assert_eq!(config.kubernetes.namespace, "stigmer-sandboxes");
        assert_eq!(config.kubernetes.request_timeout, Duration::from_secs(5));
        assert_eq!(config.kubernetes.image_pull_policy, "IfNotPresent");
        let file = "[kubernetes]\nnamespace = \"file-ns\"\nrequest_timeout = \"2s\"\n\
                    image_pull_secrets = [\"regcred\"]\ncontext = \"kind\"";
        let config = resolve(file, &[], Flags::default()).unwrap();
        assert_eq!(config.kubernetes.namespace, "file-ns");
        assert_eq!(config.kubernetes.request_timeout, Duration::from_secs(2));
        assert_eq!(config.kubernetes.image_pull_secrets, vec!["regcred"]);
        assert_eq!(config.kubernetes.context.as_deref(), Some("kind"));
        let config = resolve(
            file,
            &[("STIGMER_SANDBOX_K8S_NAMESPACE", "env-ns")],
            Flags::default(),
        )
        .unwrap();
        assert_eq!(config.kubernetes.namespace, "env-ns", "the variable wins");
        let error = toml::from_str::<FileConfig>("[kubernetes]\nnamespase = \"x\"").unwrap_err();
        assert!(error.to_string().contains("namespase"), "{error}");
        let error = resolve(
            "[kubernetes]\nimage_pull_policy = \"Sometimes\"",
            &[],
            Flags::default(),
        )
        .unwrap_err();
        assert!(error.to_string().contains("Sometimes"), "{error}");
    }

    #[test]
    fn memory_sizes() {
        assert_eq!(parse_memory("2g").unwrap(), 2 << 30);
        assert_eq!(parse_memory("2GiB").unwrap(), 2 << 30);
        assert_eq!(parse_memory("512mb").unwrap(), 512 << 20);
        assert_eq!(parse_memory("1024").unwrap(), 1024);
        assert!(parse_memory("g").is_err());
        assert!(parse_memory("1q").is_err());
        assert!(parse_memory("99999999999t").is_err());
    }

    #[test]
    fn workspace_ttl_defaults_to_a_week_and_takes_days_durations_and_off() {
        let week = Duration::from_secs(7 * 86_400);
        assert_eq!(
            resolve("", &[], Flags::default()).unwrap().workspace_ttl,
            Some(week)
        );
        let ttl = |text: &str| {
            resolve(
                &format!("workspace_ttl = \"{text}\""),
                &[],
                Flags::default(),
            )
            .map(|config| config.workspace_ttl)
        };
        assert_eq!(ttl("7d").unwrap(), Some(week));
        assert_eq!(ttl("90m").unwrap(), Some(Duration::from_secs(5400)));
        assert_eq!(ttl("2s").unwrap(), Some(Duration::from_secs(2)));
        assert_eq!(ttl("off").unwrap(), None);
        assert_eq!(ttl("0").unwrap(), None);
        let error = format!("{:#}", ttl("soon").unwrap_err());
        assert!(error.contains("workspace_ttl 'soon'"), "{error}");
        assert!(ttl("500ms").is_err(), "shorter than a second");
    }
}
