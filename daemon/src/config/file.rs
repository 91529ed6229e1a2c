//! The file's model: every key the TOML file may hold, each optional.

use std::path::{Path, PathBuf};

use anyhow::Context;
use serde::Deserialize;

use super::access::AccessConfig;
use super::commands::CommandsConfig;
use super::docker::DockerConfig;
use super::kubernetes::KubernetesConfig;
use super::limits::LimitsConfig;
use super::modes::{ContainmentMode, IsolationMode};
use super::network::NetworkFile;
use super::pool::PoolConfig;
use super::values::deserialize_optional_memory;
use super::view::ViewConfig;
use super::{lifecycle, runner_env};
use crate::connection_limits::ConnectionsConfig;
use crate::egress::EgressSetting;

/// The file's shape. Every key is optional; unknown keys are an error.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct FileConfig {
    pub(super) driver: Option<String>,
    pub(super) socket: Option<PathBuf>,
    pub(super) socket_group: Option<String>,
    pub(super) state_dir: Option<PathBuf>,
    pub(super) stop_grace: Option<String>,
    pub(super) runner_command: Option<String>,
    pub(super) runner_args: Option<Vec<String>>,
    pub(super) runner_path: Option<String>,
    pub(super) runner: Option<runner_env::RunnerFile>,
    pub(super) runner_image: Option<String>,
    pub(super) backend_endpoint: Option<String>,
    pub(super) temporal_address: Option<String>,
    pub(super) run_as: Option<String>,
    pub(super) allow_root_runners: Option<bool>,
    pub(super) max_connections: Option<usize>,
    pub(super) max_requests_per_connection: Option<usize>,
    pub(super) events_ring: Option<usize>,
    pub(super) metrics_listen: Option<String>,
    pub(super) log_level: Option<String>,
    #[serde(default, deserialize_with = "deserialize_optional_memory")]
    pub(super) runner_log_max_size: Option<u64>,
    pub(super) runner_oom_score_adj: Option<i32>,
    pub(super) workspace_ttl: Option<String>,
    pub(super) runner_uid_range: Option<String>,
    pub(super) uid_claims_dir: Option<PathBuf>,
    pub(super) access: Option<AccessConfig>,
    pub(super) docker: Option<DockerConfig>,
    pub(super) cgroup_root: Option<PathBuf>,
    pub(super) containment: Option<ContainmentMode>,
    pub(super) limits: Option<LimitsConfig>,
    pub(super) connections: Option<ConnectionsConfig>,
    pub(super) instance: Option<String>,
    pub(super) egress: Option<EgressSetting>,
    pub(super) kubernetes: Option<KubernetesConfig>,
    pub(super) isolation: Option<IsolationMode>,
    pub(super) view: Option<ViewConfig>,
    pub(super) network: Option<NetworkFile>,
    pub(super) pool: Option<PoolConfig>,
    pub(super) lifecycle: Option<lifecycle::LifecycleFile>,
    pub(super) commands: Option<CommandsConfig>,
}

pub(super) fn read_file(path: &Path) -> anyhow::Result<FileConfig> {
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("cannot read config file '{}'", path.display()))?;
    toml::from_str(&text).with_context(|| format!("invalid config file '{}'", path.display()))
}
