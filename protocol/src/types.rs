//! The values the calls carry.

use std::fmt;

use serde::{Deserialize, Serialize};

/// Which kind of owner a sandbox belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Scope {
    /// One long-lived sandbox per agent session (code `ses`).
    Session,
    /// One sandbox per workflow execution (code `wfx`).
    Workflow,
    /// One request-scoped sandbox per connect request (code `mcp`).
    Connect,
}

impl Scope {
    pub const ALL: [Scope; 3] = [Scope::Session, Scope::Workflow, Scope::Connect];

    /// The word used on the wire, in labels and on the command line.
    pub fn as_str(self) -> &'static str {
        match self {
            Scope::Session => "session",
            Scope::Workflow => "workflow",
            Scope::Connect => "connect",
        }
    }

    /// The three-letter code used in base names (kept from the seed's Java naming).
    pub fn code(self) -> &'static str {
        match self {
            Scope::Session => "ses",
            Scope::Workflow => "wfx",
            Scope::Connect => "mcp",
        }
    }
}

impl fmt::Display for Scope {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl std::str::FromStr for Scope {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Scope::ALL
            .into_iter()
            .find(|scope| scope.as_str() == s)
            .ok_or_else(|| {
                format!("unknown scope '{s}' — known scopes: session, workflow, connect")
            })
    }
}

/// The runner credential. A secret: it travels to the daemon and into the
/// runner's environment, and nowhere else. `Debug` and `Display` print
/// `<redacted>` so a stray `{:?}` in a log line cannot leak it.
#[derive(Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct Token(String);

impl Token {
    pub fn new(secret: impl Into<String>) -> Self {
        Token(secret.into())
    }

    /// The secret itself. Call only where it is handed to the runner.
    pub fn expose(&self) -> &str {
        &self.0
    }

    /// Empty means none was minted: the runner starts without `STIGMER_TOKEN`.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

impl fmt::Debug for Token {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("<redacted>")
    }
}

impl fmt::Display for Token {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("<redacted>")
    }
}

/// What is true about one provisioning request (the seed's `SandboxEnvironment`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SandboxEnv {
    /// The task queue the runner polls (`session:<id>`, `wfexec:<id>`).
    pub task_queue: String,
    /// The runner credential; empty when none was minted.
    pub stigmer_token: Token,
    /// The class of caller whose request provisioned it (`user`, `internal`, …).
    pub caller_class: String,
}

/// A sandbox's live state, read from the runtime.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ProbeState {
    Absent,
    Stopped,
    Running,
}

impl ProbeState {
    pub fn as_str(self) -> &'static str {
        match self {
            ProbeState::Absent => "absent",
            ProbeState::Stopped => "stopped",
            ProbeState::Running => "running",
        }
    }
}

impl fmt::Display for ProbeState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What an ensure did.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct EnsureReport {
    /// The state after the call (normally `running`).
    pub state: ProbeState,
    /// True when this call started a runner; false on the fast path.
    pub created: bool,
    /// Counts the runners this sandbox has had; +1 on every (re)start.
    pub generation: u64,
    /// The runner's pid (process tier).
    pub pid: Option<u32>,
    /// On the fast path, the requested fields that differ from what the
    /// running sandbox runs with (`task_queue`, `caller_class`, `token`):
    /// the call changed nothing, and says so. Empty otherwise.
    #[serde(default)]
    pub differs: Vec<String>,
    /// The incarnation's uid: random, new at each create, kept across
    /// respawns and daemon restarts. Added in protocol 5.
    #[serde(default)]
    pub uid: String,
}

/// What a deprovision did.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct DeprovisionReport {
    /// False when there was nothing to tear down (still a success).
    pub was_present: bool,
    /// True when the runner ignored SIGTERM for the whole grace and was killed.
    pub forced: bool,
}

/// How a runner last ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct ExitInfo {
    /// The exit code, when it exited by itself.
    pub code: Option<i32>,
    /// The signal number, when a signal ended it.
    pub signal: Option<i32>,
    /// When the exit was observed, in milliseconds since the Unix epoch.
    pub at_unix_ms: u64,
    /// True when the kernel's OOM killer ended it (container tiers report it).
    pub oom_killed: bool,
    /// The memory limit it was killed at, in bytes, when known (process tier).
    pub oom_limit_bytes: Option<u64>,
    /// Forks refused at the pids limit during the run (process tier).
    pub pids_refused: u64,
    /// The pids limit those forks hit.
    pub pids_limit: Option<u64>,
    /// Set when the daemon stopped the runner because its workspace
    /// outgrew `[limits] disk`: the limit, in bytes (process tier).
    pub disk_limit_bytes: Option<u64>,
    /// Why it ended, as one typed reason (the same on every tier). Added
    /// in protocol 5.
    pub reason: crate::ExitReason,
}

impl ExitInfo {
    /// An exit known by these facts, its reason the one they add up to;
    /// the limits and counters are the tier's to add (then
    /// [`ExitInfo::derive_reason`] again).
    pub fn from_facts(
        code: Option<i32>,
        signal: Option<i32>,
        at_unix_ms: u64,
        oom_killed: bool,
    ) -> ExitInfo {
        let mut exit = ExitInfo {
            code,
            signal,
            at_unix_ms,
            oom_killed,
            oom_limit_bytes: None,
            pids_refused: 0,
            pids_limit: None,
            disk_limit_bytes: None,
            reason: crate::ExitReason::Unknown,
        };
        exit.derive_reason();
        exit
    }

    /// Sets [`ExitInfo::reason`] to what the facts add up to.
    pub fn derive_reason(&mut self) {
        self.reason = crate::ExitReason::from_facts(
            self.code,
            self.signal,
            self.oom_killed,
            self.oom_limit_bytes,
            self.disk_limit_bytes,
        );
    }
}

impl fmt::Display for ExitInfo {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match (self.code, self.signal, self.oom_limit_bytes) {
            _ if matches!(
                self.reason,
                crate::ExitReason::Deprovisioned
                    | crate::ExitReason::DaemonStopped
                    | crate::ExitReason::Lost
                    | crate::ExitReason::Idle
                    | crate::ExitReason::Lifetime
                    | crate::ExitReason::DiskFull
                    | crate::ExitReason::DiskInodeLimit { .. }
            ) =>
            {
                write!(f, "stopped: {}", self.reason)?
            }
            _ if self.disk_limit_bytes.is_some() => write!(
                f,
                "stopped: disk limit ({})",
                crate::types::show_bytes(self.disk_limit_bytes.unwrap_or_default())
            )?,
            (_, _, Some(limit)) if self.oom_killed => write!(
                f,
                "killed: out of memory (limit {})",
                crate::types::show_bytes(limit)
            )?,
            (_, Some(signal), _) => write!(f, "signal {signal}")?,
            (Some(code), None, _) => write!(f, "code {code}")?,
            (None, None, _) => f.write_str("unknown")?,
        }
        if self.oom_killed && self.oom_limit_bytes.is_none() {
            f.write_str(" (OOM-killed)")?;
        }
        if self.pids_refused > 0 {
            write!(
                f,
                "; {} fork(s) refused at the pids limit",
                self.pids_refused
            )?;
            if let Some(limit) = self.pids_limit {
                write!(f, " ({limit})")?;
            }
        }
        Ok(())
    }
}

/// `2 GiB`, `512 MiB`, `1000 bytes`: a size in its largest exact unit.
pub fn show_bytes(bytes: u64) -> String {
    const UNITS: [(u32, &str); 4] = [(40, "TiB"), (30, "GiB"), (20, "MiB"), (10, "KiB")];
    for (shift, unit) in UNITS {
        if bytes >= 1 << shift && bytes.is_multiple_of(1 << shift) {
            return format!("{} {unit}", bytes >> shift);
        }
    }
    format!("{bytes} bytes")
}

/// One sandbox's facts, for admins. Never carries the token.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SandboxInfo {
    /// The base name (`sbx-<code>-<hex12>`), also the runtime object's name.
    pub name: String,
    pub scope: Scope,
    pub id: String,
    pub state: ProbeState,
    /// The runner's pid (process tier), when running.
    pub pid: Option<u32>,
    /// The container id (container tiers).
    pub container_id: Option<String>,
    /// The image the container runs (container tiers).
    pub image: Option<String>,
    pub generation: u64,
    /// When the current runner started, in milliseconds since the Unix epoch.
    pub started_at_unix_ms: Option<u64>,
    /// How many times a runner was started after the first.
    pub restarts: u64,
    pub last_exit: Option<ExitInfo>,
    pub task_queue: String,
    pub caller_class: String,
    /// The egress posture this sandbox runs under, and how it is enforced
    /// (the daemon's, filled in by `describe`).
    pub egress: Option<EgressStatus>,
    /// What the cluster says of the sandbox's runner beyond the above
    /// (kubernetes tier; `None` on the others). Added in protocol 3.
    #[serde(default)]
    pub cluster: Option<ClusterState>,
    /// What keeps this sandbox apart from the host and from the others,
    /// mechanism by mechanism (filled in by `describe`; empty in `list`).
    /// Added in protocol 4.
    #[serde(default)]
    pub isolation: Vec<IsolationFeature>,
    /// The incarnation's uid (see [`EnsureReport::uid`]); empty for an
    /// absent sandbox. Added in protocol 5.
    #[serde(default)]
    pub uid: String,
    /// Live figures (memory, tasks, CPU time, disk, …), read by
    /// `describe` of a running sandbox; `None` in `list`, for a sandbox
    /// not running, and on a tier that has no figures. Added in protocol 8.
    #[serde(default)]
    pub usage: Option<crate::Usage>,
    /// Set while the sandbox is paused: since when, in milliseconds since
    /// the Unix epoch (`state` then says `stopped`, as `probe` does; see
    /// [`crate::lifecycle`]). Added in protocol 8.
    #[serde(default)]
    pub paused_since_unix_ms: Option<u64>,
    /// Each path the sandbox's view adds over the host's tree, and what
    /// put it there, its workspace with its host path (filled in by
    /// `describe` on the process tier under `isolation = "full"`; empty
    /// in `list` and elsewhere).
    #[serde(default)]
    pub view: Vec<crate::ViewEntry>,
}

/// One mechanism that keeps sandboxes apart (a uid of its own, a cgroup,
/// a mount, PID or IPC namespace, a keyring, a seccomp filter, the network
/// rules, the disk limit), and whether it is in force. `status` lists the
/// daemon's, `describe` a sandbox's; a mechanism the host cannot give is
/// listed as not in force, with the reason, never left out.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct IsolationFeature {
    /// A short, stable name: `uid`, `cgroup`, `mount-namespace`,
    /// `pid-namespace`, `ipc-namespace`, `keyring`, `seccomp`,
    /// `no-new-namespaces`, `network`, `abstract-sockets`, `disk-limit`,
    /// `clean-start`, `uid-claims`, …
    pub name: String,
    /// True when every sandbox started now gets it.
    pub in_force: bool,
    /// How it is enforced, or why it is not.
    pub detail: String,
}

impl IsolationFeature {
    pub fn in_force(name: &str, detail: impl Into<String>) -> IsolationFeature {
        IsolationFeature {
            name: name.to_string(),
            in_force: true,
            detail: detail.into(),
        }
    }

    pub fn not_in_force(name: &str, why: impl Into<String>) -> IsolationFeature {
        IsolationFeature {
            name: name.to_string(),
            in_force: false,
            detail: why.into(),
        }
    }
}

/// The kubernetes tier's view of a sandbox: its Deployment's replicas and
/// its newest pod.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ClusterState {
    /// The replicas the Deployment asks for (0: stopped).
    pub desired_replicas: u32,
    /// The replicas whose pod is ready.
    pub ready_replicas: u32,
    /// The newest pod's phase (`Pending`, `Running`, `Succeeded`,
    /// `Failed`, `Unknown`); `None` when no pod exists.
    pub pod_phase: Option<String>,
    /// Why the runner container last terminated (`OOMKilled`, `Error`,
    /// `Completed`, …), when it has.
    pub last_termination_reason: Option<String>,
    /// Why the newest pod is still Pending (its runner's waiting reason, the
    /// conditions that are not true, the newest warning event), when it
    /// is; only `describe` looks (`list` does not fetch events). Added in
    /// protocol 7.
    #[serde(default)]
    pub pending_reason: Option<String>,
}

impl SandboxInfo {
    /// A sandbox the runtime has no trace of, with what the daemon remembers
    /// of its history (generation and last exit).
    pub fn absent(
        scope: Scope,
        id: &str,
        generation: u64,
        last_exit: Option<ExitInfo>,
    ) -> SandboxInfo {
        SandboxInfo {
            name: crate::naming::base_name(scope, id),
            scope,
            id: id.to_string(),
            state: ProbeState::Absent,
            pid: None,
            container_id: None,
            image: None,
            generation,
            started_at_unix_ms: None,
            restarts: generation.saturating_sub(1),
            last_exit,
            task_queue: String::new(),
            caller_class: String::new(),
            egress: None,
            cluster: None,
            isolation: Vec::new(),
            uid: String::new(),
            usage: None,
            paused_since_unix_ms: None,
            view: Vec::new(),
        }
    }
}

/// Sandbox counts by scope and state.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SandboxCounts {
    pub session: u64,
    pub workflow: u64,
    pub connect: u64,
    pub running: u64,
    pub stopped: u64,
}

/// Facts about the daemon itself.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DaemonStatus {
    /// The daemon's crate version.
    pub version: String,
    pub protocol_version: u32,
    /// The driver name (`local-process`, `docker`, `kubernetes`).
    pub driver: String,
    /// One line on the driver's health (e.g. "engine reachable").
    pub driver_health: String,
    pub uptime_secs: u64,
    pub counts: SandboxCounts,
    pub socket_path: String,
    pub state_dir: String,
    /// How the driver contains its sandboxes' processes (e.g. "cgroup v2 …
    /// (kill: cgroup.kill; …)" or the process-group fallback and why).
    pub containment: String,
    /// The verdict on the daemon's health, with its reasons.
    pub health: Health,
    /// The egress posture in force on every sandbox, and how.
    pub egress: EgressStatus,
    /// The isolation setting (`full` or `uid-cgroup` on the process tier;
    /// the runtime's own on the container tiers). Added in protocol 4.
    #[serde(default)]
    pub isolation_mode: String,
    /// Each isolation mechanism, and whether it is in force here.
    #[serde(default)]
    pub isolation: Vec<IsolationFeature>,
    /// What every runner is given as `STIGMER_BACKEND_ENDPOINT` and
    /// `TEMPORAL_SERVICE_ADDRESS` (empty: not given), so a control plane
    /// can see that the daemon's values, not its own, reach the runners.
    /// Added in protocol 6.
    #[serde(default)]
    pub runner_endpoints: RunnerEndpoints,
    /// Where the Prometheus endpoint is served (`http://127.0.0.1:9464/metrics`);
    /// `None` when `metrics_listen` is not set. Added in protocol 8.
    #[serde(default)]
    pub metrics: Option<String>,
    /// Each scope's pool of sandboxes prepared ahead (`[pool]`, process
    /// tier): empty where the driver keeps none. Added in protocol 9.
    #[serde(default)]
    pub pools: Vec<PoolStatus>,
    /// How long a runner is given between SIGTERM and SIGKILL
    /// (`stop_grace`): a deprovision may take that long, so a client's
    /// deadline for it follows. Added in protocol 11.
    #[serde(default)]
    pub stop_grace_ms: u64,
    /// Each path every sandbox's view adds over the host's tree, and what
    /// put it there (process tier, `isolation = "full"`; empty where
    /// sandboxes have no view of their own).
    #[serde(default)]
    pub view: Vec<crate::ViewEntry>,
}

/// One scope's pool of sandboxes prepared ahead of demand.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PoolStatus {
    pub scope: Scope,
    /// `[pool]`'s size for the scope (0: off).
    pub size: u32,
    /// Prepared and not yet taken, now.
    pub ready: u32,
    /// New sandboxes that took a prepared one, since the daemon started.
    pub hits: u64,
    /// New sandboxes that started cold because none was ready.
    pub misses: u64,
}

/// The endpoints the daemon hands its runners (addresses, never secrets).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RunnerEndpoints {
    pub backend_endpoint: String,
    pub temporal_address: String,
}

/// How well the daemon can serve, from what it checks itself (the runner
/// command, the runner image, the engine, its reaper).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum HealthVerdict {
    /// Everything it checks is in order.
    Healthy,
    /// It serves, but something is wrong that may fail some calls.
    Degraded,
    /// Calls that create or start sandboxes will fail until it is fixed.
    Unhealthy,
}

impl HealthVerdict {
    pub fn as_str(self) -> &'static str {
        match self {
            HealthVerdict::Healthy => "healthy",
            HealthVerdict::Degraded => "degraded",
            HealthVerdict::Unhealthy => "unhealthy",
        }
    }
}

impl fmt::Display for HealthVerdict {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A verdict and the reasons for it (empty when healthy).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Health {
    pub verdict: HealthVerdict,
    pub reasons: Vec<String>,
}

impl Health {
    pub fn healthy() -> Health {
        Health {
            verdict: HealthVerdict::Healthy,
            reasons: Vec::new(),
        }
    }

    /// Adds a reason; the verdict becomes the worse of the two.
    pub fn add(&mut self, verdict: HealthVerdict, reason: impl Into<String>) {
        self.verdict = self.verdict.max(verdict);
        self.reasons.push(reason.into());
    }
}

/// The egress posture a daemon holds its sandboxes to (SPEC §9).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct EgressStatus {
    /// `relaxed`, `strict`, or `none` (unrestricted, only when configured so).
    pub posture: String,
    /// True when the kernel's rules are verified in force. While a posture
    /// is configured but not enforced, every ensure is refused.
    pub enforced: bool,
    /// How it is enforced (e.g. the nftables table and the cgroup it
    /// matches), or why it is not.
    pub mechanism: String,
}

/// The most bytes one `logs` call returns. A chunk travels in one frame,
/// so it stays well below 1 MiB whatever the encoding's overhead: the
/// reply limit of clients built before replies could be
/// [`crate::wire::MAX_REPLY_LEN`].
pub const MAX_LOG_CHUNK: u32 = 256 * 1024;

/// A position in a sandbox's output, handed back by every [`LogChunk`].
/// Callers treat it as opaque and pass it to the next call unchanged: its
/// meaning is the driver's (the process tier counts rotations in `epoch`
/// and bytes in `offset`; a container tier may use timestamps).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct LogCursor {
    /// Which incarnation of the log `offset` counts in; changes whenever
    /// the log is rotated or replaced, so a stale offset is never misread.
    pub epoch: u64,
    pub offset: u64,
}

/// Where a `logs` call starts reading.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum LogStart {
    /// Everything still kept, oldest first.
    Beginning,
    /// The last `lines` lines; 0 starts at the end (follow new output only).
    Tail { lines: u32 },
    /// Right after the chunk that returned this cursor.
    After(LogCursor),
    /// Right after this cursor, but only up to the end of the runner
    /// generation that wrote the byte before it: the chunk that reaches
    /// that end carries [`LogChunk::ended`], and nothing of the next
    /// generation is ever returned. What `logs --follow` asks once it has
    /// caught up. Drivers that do not know generation ends read as for
    /// [`LogStart::After`]. Added in protocol 6.
    Generation(LogCursor),
}

/// One bounded piece of a sandbox's output (stdout and stderr, interleaved
/// as written).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LogChunk {
    /// The bytes, as the runner wrote them: not necessarily UTF-8, and not
    /// necessarily ending at a line break. One run of bytes on the wire
    /// (see [`crate::CommandOutput::data`]).
    #[serde(with = "serde_bytes")]
    pub data: Vec<u8>,
    /// Where the next call continues.
    pub next: LogCursor,
    /// True when output was lost between the cursor asked for and `data`
    /// (it was rotated away, or went with a removed container, before it
    /// was read): a reader should say so.
    pub gap: bool,
    /// True when `data` reaches the end of what is written so far: a
    /// follower waits before asking again; anyone else stops.
    pub at_end: bool,
    /// Set (for [`LogStart::Generation`]) when `data` reaches the last byte
    /// the followed generation wrote and that generation has ended: how it
    /// ended, one line ("generation 2: the runner exited (code 0)"). A
    /// follower prints it and stops. Added in protocol 6.
    #[serde(default)]
    pub ended: Option<String>,
}

/// One workspace the process tier keeps on the daemon's disk, running or
/// not: what `workspaces` lists, so that none left by an unclean stop is
/// ever nameless. Added in protocol 3.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct WorkspaceInfo {
    /// The directory's name under `<state_dir>/sandboxes` (the base name).
    pub name: String,
    pub scope: Scope,
    /// The sandbox id, from the daemon's workspace records; `None` for a
    /// directory no record names (left by a sandboxd before those records):
    /// it cannot be removed by id, but `workspace_ttl` still removes it.
    pub id: Option<String>,
    /// Bytes the workspace and the sandbox's output files take on disk.
    pub size_bytes: u64,
    /// When a runner of it last started or ended, or last wrote output,
    /// in milliseconds since the Unix epoch; `None` when unknown.
    pub last_run_unix_ms: Option<u64>,
    /// A runner of it is running now.
    pub running: bool,
    /// When `workspace_ttl` removes it if it stays unused; `None` when it
    /// is running or the TTL is off.
    pub expires_at_unix_ms: Option<u64>,
    /// Where it is on the host (a sandbox sees it at `/workspace`). Added
    /// in protocol 12.
    #[serde(default)]
    pub host_path: String,
}
