//! sandboxd as a peer among the others: the same static program as the
//! runner (`runner_command`), started by an ensure of a new session
//! sandbox under `isolation = "full"` with the host's network (`[network]
//! mode = "host"`, as every other peer runs), three ways — through the
//! client library with no pool (cold), through it with a warm pool of
//! prepared views and parked runners (prepared: the pool is full again
//! before every timed start, as in the prepared rows), and through
//! `sandboxctl ensure` on a prepared daemon of its own; then cold with the
//! default private network (what a namespace, its table and its relay add,
//! and with `--compare OLD` the same of the older binary beside it); then
//! under `isolation = "gvisor"`, cold and prepared.
//!
//! The program writes its clock to its sandbox's output, which the daemon
//! keeps in `<state>/logs/<base>.log`; that file is read (untimed), at each
//! change in its directory, until the line is there, then the sandbox is
//! deprovisioned (untimed).

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant, SystemTime};

use anyhow::{bail, Context};
use sandboxd_client::{SandboxdClient, Scope};

use crate::dir_changes::DirChanges;
use crate::peers_program;
use crate::prepared::wait_for_pool;
use crate::rows::{connect, sandbox_env};
use crate::setup::{Binaries, Daemon};

/// The isolation settings the peers run under.
const FULL: &str = "full";
const GVISOR: &str = "gvisor";

/// The network settings the peers run under: the host's, as every other
/// peer, and the default private network (a namespace and relay each).
const HOST: &str = "host";
const PRIVATE: &str = "private";

/// The cold peers with the default private network: this binary's, and
/// the `--compare` binary's.
const OWN_NET: &str = "sandboxd cold, own net";
const COMPARED_OWN_NET: &str = "compared cold, own net";

/// The pool a prepared daemon keeps for sessions.
pub const POOL: u32 = 4;
/// Longest the program's line may take to reach its log.
const LOG_TIMEOUT: Duration = Duration::from_secs(60);
/// Longest a read of the log waits for a change in its directory before
/// looking again.
const CHANGE_WAIT: Duration = Duration::from_millis(20);

/// How a sandboxd peer is called.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Via {
    Library,
    Sandboxctl,
}

/// One daemon and how it is called.
pub struct SandboxdPeer {
    pub name: String,
    pub how: String,
    via: Via,
    pool: u32,
    daemon: Daemon,
    client: SandboxdClient,
    logs: PathBuf,
    /// Changes in `logs`, which wake the reads of the program's line.
    log_changes: DirChanges,
    sandboxctl: PathBuf,
}

/// `sandboxctl`, built next to `sandboxd`.
pub fn sandboxctl(binaries: &Binaries) -> PathBuf {
    binaries.sandboxd.with_file_name("sandboxctl")
}

/// The sandboxd peers: cold, prepared, cold with the default private
/// network (and the same of the `compared` binary, when given), gVisor,
/// and through `sandboxctl` (not measured when `sandboxctl` is not built
/// next to `sandboxd`). `dir` is theirs alone: the daemons' runner copy
/// is named there.
pub async fn start_all(
    dir: &Path,
    binaries: &Binaries,
    program: &Path,
    compared: Option<&Path>,
) -> anyhow::Result<Vec<Result<SandboxdPeer, (String, String)>>> {
    std::fs::create_dir_all(dir)?;
    crate::setup::set_mode(dir, 0o755)?;
    // The daemons run `<dir>/bin/bench-runner`, which is this copy of the
    // program (the setup copies `runner` there under that name).
    let binaries = Binaries {
        runner: program.to_path_buf(),
        ..binaries.clone()
    };
    let sandboxctl = sandboxctl(&binaries);
    let mut peers = vec![
        Ok(
            SandboxdPeer::start(dir, &binaries, "sandboxd cold", 0, Via::Library, FULL, HOST)
                .await?,
        ),
        Ok(SandboxdPeer::start(
            dir,
            &binaries,
            "sandboxd prepared",
            POOL,
            Via::Library,
            FULL,
            HOST,
        )
        .await?),
        Ok(SandboxdPeer::start(dir, &binaries, OWN_NET, 0, Via::Library, FULL, PRIVATE).await?),
    ];
    if let Some(other) = compared {
        // The daemon before a change, beside this one under the same load.
        let other = binaries.with_other_daemon(other);
        let peer = SandboxdPeer::start(
            dir,
            &other,
            COMPARED_OWN_NET,
            0,
            Via::Library,
            FULL,
            PRIVATE,
        );
        peers.push(Ok(peer.await?));
    }
    // Beside `runsc do`: the same program under `isolation = "gvisor"`,
    // cold, and prepared (a `runsc run` parked ahead, its sentry booted).
    for (gvisor, pool) in [
        ("sandboxd gvisor cold", 0),
        ("sandboxd gvisor prepared", POOL),
    ] {
        match SandboxdPeer::start(dir, &binaries, gvisor, pool, Via::Library, GVISOR, HOST).await {
            Ok(peer) => peers.push(Ok(peer)),
            Err(error) => peers.push(Err((
                gvisor.to_string(),
                format!("not measured: {error:#}"),
            ))),
        }
    }
    let ctl_name = "sandboxctl prepared".to_string();
    if sandboxctl.is_file() {
        let peer =
            SandboxdPeer::start(dir, &binaries, &ctl_name, POOL, Via::Sandboxctl, FULL, HOST)
                .await?;
        peers.push(Ok(peer));
    } else {
        let reason = format!("not built ({} is missing)", sandboxctl.display());
        peers.push(Err((ctl_name, reason)));
    }
    Ok(peers)
}

impl SandboxdPeer {
    async fn start(
        dir: &Path,
        binaries: &Binaries,
        name: &str,
        pool: u32,
        via: Via,
        isolation: &str,
        network: &str,
    ) -> anyhow::Result<SandboxdPeer> {
        let prefix = format!("{}-", name.replace([' ', ','], "-"));
        let tables = format!(
            "[pool]\nsession = {pool}\nworkflow = 0\nconnect = 0\n[network]\nmode = \"{network}\"\n"
        );
        let driver = format!("driver = \"local-process\"\nisolation = \"{isolation}\"\n");
        let daemon = Daemon::start_with_tables(dir, &prefix, binaries, &driver, &tables)
            .with_context(|| format!("{name}: start the daemon"))?;
        let client = connect(&daemon.socket).await?;
        let how = match (via, pool) {
            (Via::Library, 0) if isolation != FULL => {
                format!("client library ensure, isolation = \"{isolation}\", [pool] session = 0")
            }
            (Via::Library, 0) => "client library ensure, [pool] session = 0".to_string(),
            (Via::Library, _) if isolation != FULL => format!(
                "client library ensure, isolation = \"{isolation}\", [pool] session = {pool}, full before each serial start"
            ),
            (Via::Library, _) => format!(
                "client library ensure, [pool] session = {pool}, full before each serial start"
            ),
            (Via::Sandboxctl, _) => format!(
                "sandboxctl --socket S ensure session ID --task-queue Q, [pool] session = {pool}"
            ),
        };
        let how = match network {
            HOST => how,
            _ => format!(
                "{how}, [network] mode = \"{network}\" (the default), {}",
                binaries.sandboxd.display()
            ),
        };
        let logs = dir.join(format!("{prefix}state/logs"));
        let log_changes =
            DirChanges::watch(&logs).with_context(|| format!("{name}: watch its logs"))?;
        Ok(SandboxdPeer {
            name: name.to_string(),
            how,
            via,
            pool,
            logs,
            log_changes,
            daemon,
            client,
            sandboxctl: sandboxctl(binaries),
        })
    }

    /// Its daemon's socket.
    pub fn socket(&self) -> &Path {
        &self.daemon.socket
    }

    /// Waits (untimed) until the pool is full, so a serial start finds it
    /// as a quiet daemon would.
    pub async fn quiesce(&self) -> anyhow::Result<()> {
        if self.pool > 0 {
            wait_for_pool(&self.client, self.pool).await?;
        }
        Ok(())
    }

    /// One new sandbox, named `id`: the time from just before the call to
    /// the program's first instruction; then it is deprovisioned.
    pub async fn start_one(&self, id: &str) -> anyhow::Result<Duration> {
        let started = SystemTime::now();
        match self.via {
            Via::Library => {
                let report = self
                    .client
                    .ensure_session_sandbox(id, &sandbox_env(id))
                    .await
                    .with_context(|| format!("{}: ensure {id}", self.name))?;
                if !report.created {
                    bail!(
                        "{}: ensure of new sandbox {id} took the fast path",
                        self.name
                    );
                }
            }
            Via::Sandboxctl => self.ensure_with_sandboxctl(id).await?,
        }
        let latency = self.read_clock(id, started).await?;
        self.client
            .deprovision(Scope::Session, id, false)
            .await
            .with_context(|| format!("{}: deprovision {id}", self.name))?;
        Ok(latency)
    }

    async fn ensure_with_sandboxctl(&self, id: &str) -> anyhow::Result<()> {
        let output = tokio::process::Command::new(&self.sandboxctl)
            .arg("--socket")
            .arg(&self.daemon.socket)
            .args(["ensure", "session", id, "--task-queue"])
            .arg(format!("session:{id}"))
            .args(["--caller-class", "user"])
            .stdin(Stdio::null())
            .kill_on_drop(true)
            .output()
            .await
            .with_context(|| format!("run {}", self.sandboxctl.display()))?;
        if !output.status.success() {
            bail!(
                "sandboxctl ensure session {id} failed ({}): {}",
                output.status,
                String::from_utf8_lossy(&output.stderr).trim()
            );
        }
        Ok(())
    }

    /// Reads the sandbox's output until the program's line is in it, woken
    /// by the daemon's writes to its logs directory (as the other peers'
    /// readers are by their pipes), not by a timer: a poll every
    /// millisecond held each start up to a millisecond longer.
    async fn read_clock(&self, id: &str, started: SystemTime) -> anyhow::Result<Duration> {
        let base = sandboxd_protocol::naming::base_name(Scope::Session, id);
        let log = self.logs.join(format!("{base}.log"));
        let deadline = Instant::now() + LOG_TIMEOUT;
        loop {
            // Subscribed before the look, so a write after it wakes the wait.
            let mut changes = self.log_changes.subscribe();
            let text = std::fs::read(&log).unwrap_or_default();
            if peers_program::has_line(&text) {
                return peers_program::latency(started, &text)
                    .with_context(|| format!("{}: {}", self.name, log.display()));
            }
            if Instant::now() > deadline {
                bail!(
                    "{}: the program's line did not reach {} within {LOG_TIMEOUT:?} \
                     (it holds {:?}); the daemon's log:\n{}",
                    self.name,
                    log.display(),
                    String::from_utf8_lossy(&text),
                    self.daemon.log_text()
                );
            }
            // A bound, should the watch's queue overflow and a change be lost.
            let _ = tokio::time::timeout(CHANGE_WAIT, changes.changed()).await;
        }
    }

    /// Stops the daemon (its sandboxes are all deprovisioned by then).
    pub fn finish(mut self) -> anyhow::Result<()> {
        drop(self.client);
        self.daemon
            .stop()
            .with_context(|| format!("{}: stop the daemon", self.name))
    }
}
