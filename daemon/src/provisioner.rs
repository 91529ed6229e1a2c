//! The driver seam: what every isolation tier implements, and selection by name.
//!
//! Server code never knows which tier it talks to, and a driver never knows
//! about sockets, peers or tarpc. Inputs reaching a driver are already
//! validated.

use std::sync::Arc;

use async_trait::async_trait;
use sandboxd_protocol::{
    naming, DeprovisionReport, EgressStatus, EnsureReport, Expectation, FileChunk, FileList,
    FileStat, LogChunk, LogStart, PauseReport, ProbeState, PutChunk, PutReport, SandboxEnv,
    SandboxError, SandboxInfo, Scope, WorkspaceInfo,
};

use crate::config::Config;
use crate::events::EventHub;

/// One sandbox's identity: scope, full id, and the base name derived from them.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct SandboxKey {
    pub scope: Scope,
    pub id: String,
    /// `sbx-<code>-<hex12>`: the only id-derived string used in paths and names.
    pub base_name: String,
}

impl SandboxKey {
    /// The id as a person should read it, for logs: see [`sandboxd_protocol::Shown`].
    pub fn shown_id(&self) -> sandboxd_protocol::Shown<'_> {
        sandboxd_protocol::Shown(&self.id)
    }

    /// `session 'ses_1' (sbx-ses-…)`, for messages.
    pub fn what(&self) -> String {
        format!("{} '{}' ({})", self.scope, self.shown_id(), self.base_name)
    }

    pub fn new(scope: Scope, id: impl Into<String>) -> Self {
        let id = id.into();
        let base_name = naming::base_name(scope, &id);
        SandboxKey {
            scope,
            id,
            base_name,
        }
    }
}

/// An isolation tier.
///
/// Every method must be cancellation-safe: the server drops the future when
/// the caller's deadline passes. Work that must not be lost once begun (a
/// spawn's bookkeeping, a kill's escalation to SIGKILL) either happens with
/// no `.await` in between or runs in a task of its own.
#[async_trait]
pub trait Driver: Send + Sync + 'static {
    /// The driver's configured name (`local-process`, `docker`, `kubernetes`).
    fn name(&self) -> &'static str;

    /// One short line on the runtime's health, for `status`.
    fn health(&self) -> String;

    /// How the tier contains its sandboxes' processes, for `status`.
    fn containment(&self) -> String {
        "the runtime's own (containers)".to_string()
    }

    /// Each scope's pool of sandboxes prepared ahead, for `status`: none
    /// unless the driver keeps one.
    fn pools(&self) -> Vec<sandboxd_protocol::PoolStatus> {
        Vec::new()
    }

    /// The isolation setting and each mechanism that keeps this tier's
    /// sandboxes apart, in force or not (with why), for `status`. The
    /// default is a container tier's: the runtime isolates.
    fn isolation(&self) -> (String, Vec<sandboxd_protocol::IsolationFeature>) {
        (
            "the runtime's own".to_string(),
            vec![sandboxd_protocol::IsolationFeature::in_force(
                "runtime",
                "each sandbox is a container of the runtime, with its own namespaces",
            )],
        )
    }

    /// The verdict on the runtime's health, with reasons, for `status`
    /// (the runner command missing, the image absent, the engine down).
    /// The default has nothing to check.
    async fn health_verdict(&self) -> sandboxd_protocol::Health {
        sandboxd_protocol::Health::healthy()
    }

    /// Where the connecting process `pid` comes from: one of this driver's
    /// sandboxes, or not (see [`crate::peer_origin`]). Asked at accept,
    /// before the peer gets a slot, so it must be quick and must not block.
    /// The default cannot tell: right for a tier whose sandboxes cannot
    /// reach the socket (it is never mounted into a container).
    fn origin_of_peer(&self, _pid: i32) -> crate::peer_origin::PeerOrigin {
        crate::peer_origin::PeerOrigin::Unknown
    }

    /// The egress posture this tier holds its sandboxes to, and how (or
    /// why not), for `status` and `describe`. A tier that cannot enforce
    /// the configured posture refuses every ensure (SPEC §9: fail closed).
    fn egress(&self) -> EgressStatus;

    /// Absent → provision; stopped → start; running → fast path.
    async fn ensure(
        &self,
        key: &SandboxKey,
        env: &SandboxEnv,
    ) -> Result<EnsureReport, SandboxError>;

    /// Tear down; missing is success.
    async fn deprovision(
        &self,
        key: &SandboxKey,
        keep_workspace: bool,
    ) -> Result<DeprovisionReport, SandboxError>;

    /// Live state, read from the runtime.
    async fn probe(&self, key: &SandboxKey) -> Result<ProbeState, SandboxError>;

    /// One sandbox's facts. A sandbox the driver knows nothing of is
    /// reported `absent` with generation 0, not as an error.
    async fn describe(&self, key: &SandboxKey) -> Result<SandboxInfo, SandboxError>;

    /// The live figures of `key`'s runner (memory, tasks, CPU time, …),
    /// read now; `None` when it is not running or the tier has none (the
    /// default: the kubernetes tier without a metrics API). `with_disk`
    /// asks for the workspace's size too, which may cost a walk of it.
    async fn usage(
        &self,
        _key: &SandboxKey,
        _with_disk: bool,
    ) -> Result<Option<sandboxd_protocol::Usage>, SandboxError> {
        Ok(None)
    }

    /// Every sandbox the driver owns, optionally of one scope, in any order.
    async fn list(&self, scope: Option<Scope>) -> Result<Vec<SandboxInfo>, SandboxError>;

    /// How many sandboxes the driver owns, by scope and state, as `list`
    /// would show them. The default counts the list; a driver that can
    /// count without building every sandbox's facts should (see
    /// [`crate::census`]).
    async fn census(&self) -> Result<crate::census::Census, SandboxError> {
        Ok(crate::census::Census::of(&self.list(None).await?))
    }

    /// The socket serves: start, in the background, the start-up work
    /// that must never delay serving (the sweep of other daemons'
    /// leftovers). Must return at once. The default has
    /// none.
    fn serving(&self) {}

    /// The daemon is stopping: tear down what must not outlive it (the
    /// process tier's runners) and leave the rest (containers) running.
    async fn shutdown(&self);

    /// At most `max_bytes` (already clamped to 1..=`MAX_LOG_CHUNK`) of the
    /// sandbox's output, from `start`. The cursor in the chunk is the
    /// driver's own; a sandbox with no output to read is a failed
    /// precondition that says why, never an empty answer, so an admin is
    /// never left staring at an empty follow.
    async fn logs(
        &self,
        key: &SandboxKey,
        start: LogStart,
        max_bytes: u32,
    ) -> Result<LogChunk, SandboxError>;

    /// Starts a command in `key`'s running sandbox with exactly its
    /// isolation (see [`crate::started_command`]), and answers once it
    /// runs. A sandbox not running is a failed precondition (never
    /// started for it); one that is another incarnation than `spec.expect`
    /// names is a conflict, with nothing started. A tier that cannot run
    /// commands says so here, by name.
    async fn exec(
        &self,
        key: &SandboxKey,
        spec: &crate::started_command::CommandSpec,
    ) -> Result<crate::started_command::StartedCommand, SandboxError>;

    /// One chunk of an upload into `key`'s workspace (see
    /// [`sandboxd_protocol::files`]), written as the sandbox's user beneath
    /// its workspace; the file takes its place after the last chunk. A
    /// tier that cannot move files says so here, by name.
    async fn put_file(&self, key: &SandboxKey, chunk: &PutChunk)
        -> Result<PutReport, SandboxError>;

    /// At most `max` bytes (already clamped) of a file in the workspace,
    /// from `offset`, read as the sandbox's user.
    async fn get_file(
        &self,
        key: &SandboxKey,
        path: &str,
        offset: u64,
        max: u32,
    ) -> Result<FileChunk, SandboxError>;

    /// One file's facts in the workspace, its last symlink not followed.
    async fn stat_file(&self, key: &SandboxKey, path: &str) -> Result<FileStat, SandboxError>;

    /// A directory's entries in the workspace.
    async fn list_files(&self, key: &SandboxKey, path: &str) -> Result<FileList, SandboxError>;

    /// Removes a file, symlink or directory in the workspace.
    async fn remove_file(
        &self,
        key: &SandboxKey,
        path: &str,
        recursive: bool,
    ) -> Result<(), SandboxError>;

    /// Commands an earlier daemon started that this tier can follow
    /// again (read once, at start, before the socket serves). A tier whose
    /// commands end with the daemon that started them has none, and says
    /// so in its implementation.
    async fn recovered_commands(&self) -> Vec<crate::started_command::RecoveredCommand>;

    /// `ensure`, unless the sandbox is another incarnation than `expect`
    /// names. This default checks `describe` first, then ensures: a tier
    /// whose own lock can hold both (the process tier) overrides it, so no
    /// other call can come in between; here the server serializes the
    /// fenced calls of one key, but an unfenced call may still interleave.
    async fn ensure_fenced(
        &self,
        key: &SandboxKey,
        env: &SandboxEnv,
        expect: &Expectation,
    ) -> Result<EnsureReport, SandboxError> {
        let info = self.describe(key).await?;
        expect.check(&key.what(), incarnation(&info))?;
        self.ensure(key, env).await
    }

    /// `deprovision`, unless the sandbox is another incarnation than
    /// `expect` names; one already gone is success. The default checks
    /// `describe` first (see [`Driver::ensure_fenced`]).
    async fn deprovision_fenced(
        &self,
        key: &SandboxKey,
        keep_workspace: bool,
        expect: &Expectation,
    ) -> Result<DeprovisionReport, SandboxError> {
        let info = self.describe(key).await?;
        if incarnation(&info).is_some() {
            expect.check(&key.what(), incarnation(&info))?;
        }
        self.deprovision(key, keep_workspace).await
    }

    /// Every workspace the tier keeps on this host's disk, optionally of
    /// one scope, running or not. Tiers whose workspaces live elsewhere
    /// (Docker volumes, a cluster) keep the default: a clear refusal.
    async fn workspaces(&self, _scope: Option<Scope>) -> Result<Vec<WorkspaceInfo>, SandboxError> {
        Err(SandboxError::FailedPrecondition(format!(
            "the {} tier keeps no workspaces on this host's disk; workspaces are listed for the local-process tier",
            self.name()
        )))
    }

    /// Freezes the sandbox's runner where it stands (see
    /// [`sandboxd_protocol::lifecycle`]); one already paused is success, one
    /// with no running runner a failed precondition. A tier that cannot
    /// pause keeps the default: a clear refusal.
    async fn pause(&self, _key: &SandboxKey) -> Result<PauseReport, SandboxError> {
        Err(SandboxError::FailedPrecondition(format!(
            "the {} tier cannot pause a sandbox",
            self.name()
        )))
    }

    /// Thaws a paused sandbox's runner (same pid and generation); one not
    /// paused is success.
    async fn resume(&self, _key: &SandboxKey) -> Result<PauseReport, SandboxError> {
        Err(SandboxError::FailedPrecondition(format!(
            "the {} tier cannot pause or resume a sandbox",
            self.name()
        )))
    }
}

/// The refusal of a file call by a tier that does not move files yet.
pub fn files_not_on(tier: &str, call: &str) -> SandboxError {
    SandboxError::FailedPrecondition(format!(
        "{call} is not yet on the {tier} tier: files move in and out of sandboxes of the local-process tier only"
    ))
}

/// The uid and generation of the incarnation `info` describes, or `None`
/// when there is none (absent, and nothing remembered of it).
pub fn incarnation(info: &SandboxInfo) -> Option<(&str, u64)> {
    (info.state != ProbeState::Absent || !info.uid.is_empty())
        .then_some((info.uid.as_str(), info.generation))
}

/// Every driver name, built or not, in the order the error message lists them.
pub const KNOWN_DRIVERS: [&str; 3] = ["docker", "kubernetes", "local-process"];

/// `'docker', 'kubernetes', 'local-process'`, for the unknown-driver error.
fn known_drivers() -> String {
    KNOWN_DRIVERS.map(|name| format!("'{name}'")).join(", ")
}

/// ` (did you mean 'docker'?)` for a name a typo or two away from a known
/// one, else nothing.
fn suggestion(name: &str) -> String {
    KNOWN_DRIVERS
        .iter()
        .map(|known| (edit_distance(name, known), known))
        .filter(|(distance, _)| *distance <= 2)
        .min()
        .map_or_else(String::new, |(_, known)| {
            format!(" (did you mean '{known}'?)")
        })
}

/// Levenshtein distance over characters (the names are a few bytes long).
fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut previous: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut current = vec![i + 1];
        for (j, cb) in b.iter().enumerate() {
            let substitution = previous[j] + usize::from(ca != *cb);
            current.push(substitution.min(previous[j + 1] + 1).min(current[j] + 1));
        }
        previous = current;
    }
    previous[b.len()]
}

/// The configuration's check of a driver name: an unknown one is refused
/// before anything starts, with the known names and the likely intended one.
pub fn check_driver_name(name: &str) -> Result<(), SelectError> {
    if KNOWN_DRIVERS.contains(&name) {
        Ok(())
    } else {
        Err(SelectError::Unknown(name.to_string()))
    }
}

/// Why no driver could be built.
#[derive(Debug, thiserror::Error)]
pub enum SelectError {
    #[error("unknown sandbox provisioner type '{0}'{hint} — known types: {known}", hint = suggestion(.0), known = known_drivers())]
    Unknown(String),
    #[error("{0}")]
    Setup(String),
}

/// Builds the driver the configuration names. Never falls back to another
/// tier: a typo must not silently run unisolated.
pub async fn select(
    config: &Config,
    events: Arc<EventHub>,
) -> Result<Arc<dyn Driver>, SelectError> {
    if config.lifecycle.any_idle() && config.driver == "kubernetes" {
        tracing::warn!(driver = %config.driver, "[lifecycle] idle is applied by the local-process and docker tiers only: without a metrics API the kubernetes tier has no per-pod CPU figure, so it ignores idle (max_lifetime is applied; pause, a scale to 0, still works on request)");
    }
    match config.driver.as_str() {
        "local-process" => {
            let driver = crate::drivers::local_process::LocalProcessDriver::start(config, events)
                .await
                .map_err(|error| SelectError::Setup(format!("{error:#}")))?;
            Ok(Arc::new(driver))
        }
        "docker" => {
            let driver = crate::drivers::docker::DockerDriver::start(config, events)
                .await
                .map_err(|error| SelectError::Setup(format!("{error:#}")))?;
            Ok(Arc::new(driver))
        }
        "kubernetes" => {
            let driver = crate::drivers::kubernetes::KubernetesDriver::start(config, events)
                .await
                .map_err(|error| SelectError::Setup(format!("{error:#}")))?;
            Ok(Arc::new(driver))
        }
        other => Err(SelectError::Unknown(other.to_string())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unknown_driver_names_every_known_type_and_the_likely_one() {
        assert_eq!(
            SelectError::Unknown("lcoal-process".into()).to_string(),
            "unknown sandbox provisioner type 'lcoal-process' (did you mean 'local-process'?) — known types: 'docker', 'kubernetes', 'local-process'"
        );
        assert_eq!(
            check_driver_name("dokcer").unwrap_err().to_string(),
            "unknown sandbox provisioner type 'dokcer' (did you mean 'docker'?) — known types: 'docker', 'kubernetes', 'local-process'"
        );
        assert_eq!(
            SelectError::Unknown("podman".into()).to_string(),
            "unknown sandbox provisioner type 'podman' — known types: 'docker', 'kubernetes', 'local-process'"
        );
        assert!(check_driver_name("kubernetes").is_ok());
    }
}
