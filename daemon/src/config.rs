//! The daemon's configuration: one struct, from file, environment and flags,
//! validated once at start.
//!
//! Precedence: flags beat environment, environment beats the file, the file
//! beats the defaults. Unknown keys in the file are an error, so a typo in
//! an operator's config is reported instead of silently ignored.

use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{bail, Context};
use serde::Deserialize;

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
    /// Uids allowed to probe, describe, list and status.
    pub read_uids: Vec<u32>,
    /// Gids allowed to probe, describe, list and status.
    pub read_gids: Vec<u32>,
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
    runner_image: Option<String>,
    backend_endpoint: Option<String>,
    temporal_address: Option<String>,
    k8s_namespace: Option<String>,
    run_as: Option<String>,
    allow_root_runners: Option<bool>,
    max_connections: Option<usize>,
    max_requests_per_connection: Option<usize>,
    log_level: Option<String>,
    access: Option<AccessConfig>,
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
    pub runner_image: Option<String>,
    pub backend_endpoint: String,
    pub temporal_address: String,
    pub k8s_namespace: String,
    /// `user[:group]` the process tier's runners run as.
    pub run_as: Option<String>,
    pub allow_root_runners: bool,
    pub max_connections: usize,
    pub max_requests_per_connection: usize,
    pub log_level: Option<String>,
    pub access: AccessConfig,
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
        let config = Config {
            source_file,
            driver: flags
                .driver
                .clone()
                .or_else(|| env("SANDBOX_PROVISIONER_TYPE"))
                .or(file.driver)
                .unwrap_or_else(|| "local-process".to_string()),
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
            runner_image: env("STIGMER_SANDBOX_RUNNER_IMAGE").or(file.runner_image),
            backend_endpoint: env("STIGMER_SANDBOX_BACKEND_ENDPOINT")
                .or(file.backend_endpoint)
                .unwrap_or_default(),
            temporal_address: env("STIGMER_SANDBOX_TEMPORAL_ADDRESS")
                .or(file.temporal_address)
                .unwrap_or_default(),
            k8s_namespace: env("STIGMER_SANDBOX_K8S_NAMESPACE")
                .or(file.k8s_namespace)
                .unwrap_or_else(|| "stigmer-sandboxes".to_string()),
            run_as: file.run_as,
            allow_root_runners: file.allow_root_runners.unwrap_or(false),
            max_connections: file.max_connections.unwrap_or(256),
            max_requests_per_connection: file.max_requests_per_connection.unwrap_or(64),
            log_level: file.log_level,
            access: file.access.unwrap_or_default(),
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
        if self.max_connections == 0 {
            bail!("max_connections must be at least 1");
        }
        if self.max_requests_per_connection == 0 {
            bail!("max_requests_per_connection must be at least 1");
        }
        if self.stop_grace > Duration::from_secs(3600) {
            bail!("stop_grace {:?} is longer than the limit of 1h", self.stop_grace);
        }
        Ok(())
    }
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
    let data = dirs::data_dir()
        .context("no data directory for this user: pass --state-dir or set it in the config file")?;
    Ok(data.join("stigmer").join("sandboxd"))
}

/// `10s`, `500ms`, `2m`, or a bare number of seconds.
pub fn parse_duration(text: &str) -> anyhow::Result<Duration> {
    let text = text.trim();
    let split = text.find(|c: char| !c.is_ascii_digit()).unwrap_or(text.len());
    let (number, unit) = text.split_at(split);
    let value: u64 = number
        .parse()
        .with_context(|| format!("'{text}' is not a duration like 10s, 500ms or 2m"))?;
    Ok(match unit {
        "" | "s" => Duration::from_secs(value),
        "ms" => Duration::from_millis(value),
        "m" => Duration::from_secs(value.saturating_mul(60)),
        other => bail!("unknown duration unit '{other}' in '{text}': use ms, s or m"),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn resolve(file: &str, env: &[(&str, &str)], flags: Flags) -> anyhow::Result<Config> {
        let file: FileConfig = toml::from_str(file)?;
        let env: Vec<(String, String)> =
            env.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
        let lookup = move |name: &str| env.iter().find(|(k, _)| k == name).map(|(_, v)| v.clone());
        let flags = Flags {
            socket: flags.socket.or(Some("/tmp/s.sock".into())),
            state_dir: flags.state_dir.or(Some("/tmp/state".into())),
            ..flags
        };
        Config::resolve(file, None, lookup, &flags)
    }

    #[test]
    fn defaults() {
        let config = resolve("", &[], Flags::default()).unwrap();
        assert_eq!(config.driver, "local-process");
        assert_eq!(config.stop_grace, Duration::from_secs(10));
        assert_eq!(config.runner_command, "stigmer-runner");
        assert_eq!(config.k8s_namespace, "stigmer-sandboxes");
        assert_eq!(config.access, AccessConfig::default());
    }

    #[test]
    fn flags_beat_env_beat_file() {
        let file = "driver = \"docker\"\nrunner_command = \"/file/runner\"\nbackend_endpoint = \"file:1\"";
        let env = [("SANDBOX_PROVISIONER_TYPE", "kubernetes"), ("STIGMER_SANDBOX_RUNNER_COMMAND", "/env/runner")];
        let config = resolve(file, &env, Flags::default()).unwrap();
        assert_eq!(config.driver, "kubernetes");
        assert_eq!(config.runner_command, "/env/runner");
        assert_eq!(config.backend_endpoint, "file:1");
        let flags = Flags { driver: Some("local-process".into()), ..Flags::default() };
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
    fn durations() {
        assert_eq!(parse_duration("10s").unwrap(), Duration::from_secs(10));
        assert_eq!(parse_duration("250ms").unwrap(), Duration::from_millis(250));
        assert_eq!(parse_duration("2m").unwrap(), Duration::from_secs(120));
        assert_eq!(parse_duration("3").unwrap(), Duration::from_secs(3));
        assert!(parse_duration("ten").is_err());
        assert!(parse_duration("5h").is_err());
    }
}
