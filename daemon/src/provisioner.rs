//! The driver seam: what every isolation tier implements (the tier is
//! chosen above it, in [`crate::drivers::select`]).
//!
//! Server code never knows which tier it talks to, and a driver never knows
//! about sockets, peers or tarpc. Inputs reaching a driver are already
//! validated.

use async_trait::async_trait;
use sandboxd_protocol::{
    DeprovisionReport, EgressStatus, EnsureReport, Expectation, FileChunk, FileList, FileStat,
    LogChunk, LogStart, PauseReport, ProbeState, PutChunk, PutReport, SandboxEnv, SandboxError,
    SandboxInfo, Scope, WorkspaceInfo,
};

pub use crate::sandbox_key::SandboxKey;

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

    /// Each path every sandbox's view adds over the host's tree, and what
    /// put it there, for `status`; empty where the tier builds no view of
    /// its own (a container's is the runtime's).
    fn view(&self) -> Vec<sandboxd_protocol::ViewEntry> {
        Vec::new()
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
    /// kubernetes tier, without a metrics API). `with_disk`
    /// asks for the workspace's size too, which may cost a walk of it.
    async fn usage(
        &self,
        key: &SandboxKey,
        with_disk: bool,
    ) -> Result<Option<sandboxd_protocol::Usage>, SandboxError>;

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

    /// One chunk of a tar stream for `key`'s workspace (see
    /// [`sandboxd_protocol::files`]): kept as an upload is, unpacked into
    /// the directory `chunk.path` after the last chunk, as the sandbox's
    /// user beneath its workspace, all or nothing.
    async fn put_tar(&self, key: &SandboxKey, chunk: &PutChunk) -> Result<PutReport, SandboxError>;

    /// At most `max` bytes (already clamped) of a tar stream of `path` in
    /// the workspace, from `offset`, read as the sandbox's user.
    async fn get_tar(
        &self,
        key: &SandboxKey,
        path: &str,
        offset: u64,
        max: u32,
    ) -> Result<FileChunk, SandboxError>;

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
    /// (Docker volumes, a cluster) refuse with [`no_host_workspaces`].
    async fn workspaces(&self, scope: Option<Scope>) -> Result<Vec<WorkspaceInfo>, SandboxError>;

    /// Freezes the sandbox's runner where it stands (see
    /// [`sandboxd_protocol::lifecycle`]); one already paused is success, one
    /// with no running runner a failed precondition.
    async fn pause(&self, key: &SandboxKey) -> Result<PauseReport, SandboxError>;

    /// Thaws a paused sandbox's runner (same pid and generation); one not
    /// paused is success.
    async fn resume(&self, key: &SandboxKey) -> Result<PauseReport, SandboxError>;
}

/// The refusal of `workspaces` by a tier whose workspaces are not on this
/// host's disk.
pub fn no_host_workspaces(tier: &str) -> SandboxError {
    SandboxError::FailedPrecondition(format!(
        "the {tier} tier keeps no workspaces on this host's disk; workspaces are listed for the local-process tier"
    ))
}

/// The refusal of a file call by a driver that does not move files (every
/// tier does; the server's test driver does not).
#[cfg(test)]
pub fn files_not_on(tier: &str, call: &str) -> SandboxError {
    SandboxError::FailedPrecondition(format!(
        "{call} is not on the {tier} tier: files move in and out of sandboxes of the local-process, docker and kubernetes tiers"
    ))
}

/// The uid and generation of the incarnation `info` describes, or `None`
/// when there is none (absent, and nothing remembered of it).
pub fn incarnation(info: &SandboxInfo) -> Option<(&str, u64)> {
    (info.state != ProbeState::Absent || !info.uid.is_empty())
        .then_some((info.uid.as_str(), info.generation))
}
