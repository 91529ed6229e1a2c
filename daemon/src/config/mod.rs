//! The daemon's configuration: one struct, from file, environment and flags,
//! validated once at start.
//!
//! Precedence: flags beat environment, environment beats the file, the file
//! beats the defaults. Unknown keys in the file are an error, so a typo in
//! an operator's config is reported instead of silently ignored.
//!
//! `file` is the file's model, one module per table beside it (`docker`,
//! `limits`, `view`, …) with its defaults and its checks; `resolve` takes
//! each key from the first source that gives it and checks the whole;
//! `defaults` and `values` hold what the tables share.

mod access;
mod commands;
mod defaults;
mod docker;
mod driver_name;
mod file;
mod kubernetes;
mod lifecycle;
mod limits;
mod modes;
mod network;
mod pool;
mod resolve;
mod runner_env;
mod state_reserve;
mod values;
mod view;

use std::path::{Path, PathBuf};
use std::time::Duration;

pub use crate::connection_limits::ConnectionsConfig;
pub use crate::duration::parse_duration;
use crate::egress::EgressSetting;
use crate::instance::Instance;
pub use access::AccessConfig;
pub use commands::CommandsConfig;
pub use defaults::DEFAULT_CONFIG_FILE;
pub use docker::{DockerConfig, DEFAULT_DOCKER_HOST};
pub use driver_name::UnknownDriver;
use file::FileConfig;
pub use kubernetes::KubernetesConfig;
#[cfg(test)]
pub use lifecycle::ScopeLimits;
pub use lifecycle::{LifecycleConfig, OnIdle, DEFAULT_CONNECT_TTL};
pub use limits::LimitsConfig;
pub use modes::{ContainmentMode, IsolationMode};
pub use network::{NetworkConfig, NetworkMode};
pub use pool::PoolConfig;
pub use runner_env::LIMIT_VARIABLES;
pub use state_reserve::StateReserve;
pub use values::parse_memory;
pub use view::ViewConfig;

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

impl Config {
    /// File, then environment, then flags, then validation.
    pub fn load(flags: &Flags) -> anyhow::Result<Config> {
        let (file, source_file) = match &flags.config {
            Some(path) => (file::read_file(path)?, Some(path.clone())),
            None if Path::new(DEFAULT_CONFIG_FILE).exists() => {
                let path = PathBuf::from(DEFAULT_CONFIG_FILE);
                (file::read_file(&path)?, Some(path))
            }
            None => (FileConfig::default(), None),
        };
        Self::resolve(file, source_file, resolve::env_var, flags)
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
        defaults::default_state_dir(true).is_ok_and(|default| default == self.state_dir)
    }
}

#[cfg(test)]
mod tests;
