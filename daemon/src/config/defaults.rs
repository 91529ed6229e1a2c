//! The defaults of the top-level keys that are not one word: where the
//! file, the socket and the state live, and the runners' output cap, `PATH`
//! and uid claims.

use std::path::PathBuf;
use std::time::Duration;

use anyhow::Context;

/// Where the file is read from when `--config` is not given (and it exists).
pub const DEFAULT_CONFIG_FILE: &str = "/etc/stigmer/sandboxd.toml";

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

/// The default `workspace_ttl`: a week.
pub const DEFAULT_WORKSPACE_TTL: Duration = Duration::from_secs(7 * 24 * 3600);

pub(super) fn default_socket(is_root: bool) -> anyhow::Result<PathBuf> {
    if is_root {
        return Ok(PathBuf::from("/run/stigmer/sandboxd.sock"));
    }
    let runtime = dirs::runtime_dir()
        .context("XDG_RUNTIME_DIR is not set: pass --socket or set it in the config file")?;
    Ok(runtime.join("stigmer").join("sandboxd.sock"))
}

pub(super) fn default_state_dir(is_root: bool) -> anyhow::Result<PathBuf> {
    if is_root {
        return Ok(PathBuf::from("/var/lib/stigmer/sandboxd"));
    }
    let data = dirs::data_dir().context(
        "no data directory for this user: pass --state-dir or set it in the config file",
    )?;
    Ok(data.join("stigmer").join("sandboxd"))
}
