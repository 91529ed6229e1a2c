//! `[docker]`: how the docker tier reaches the engine and shapes each
//! runner container.

use std::time::Duration;

use anyhow::bail;
use serde::Deserialize;

use super::values::{deserialize_duration, deserialize_memory, deserialize_optional_duration};

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
    pub(super) const MIN_MEMORY: u64 = 6 * 1024 * 1024;

    pub(super) fn validate(&self) -> anyhow::Result<()> {
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
