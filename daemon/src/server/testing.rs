//! A recording stand-in driver for the server's in-process tests.
//!
//! The real process tier re-executes the current binary as its group
//! reaper, and inside a test harness that binary is the harness: so these
//! tests, which are about sockets, framing, limits and access, talk to this
//! fake. The real daemon binary with the real driver is exercised by the
//! end-to-end tests in `tests/`.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use async_trait::async_trait;
use sandboxd_protocol::{
    DeprovisionReport, EgressStatus, EnsureReport, LogChunk, LogCursor, LogStart, ProbeState,
    SandboxEnv, SandboxError, SandboxInfo, Scope,
};
use tokio::sync::Semaphore;

use super::service::DaemonState;
use crate::access::AccessPolicy;
use crate::config::AccessConfig;
use crate::provisioner::{Driver, SandboxKey};

/// Keeps a table of "running" sandboxes and a log of every call it got.
#[derive(Default)]
pub struct FakeDriver {
    running: Mutex<HashMap<SandboxKey, u64>>,
    calls: Mutex<Vec<String>>,
    /// When set, `probe` waits for a permit: lets a test hold calls in flight.
    probe_gate: Option<Arc<Semaphore>>,
}

impl FakeDriver {
    /// A driver whose `probe` waits for a permit of `gate`.
    pub fn with_probe_gate(gate: Arc<Semaphore>) -> Self {
        FakeDriver {
            probe_gate: Some(gate),
            ..FakeDriver::default()
        }
    }

    /// A driver already running `count` session sandboxes with long ids:
    /// enough of them make a `list` reply larger than a request may be.
    pub fn running_many(count: usize) -> Self {
        let driver = FakeDriver::default();
        driver.running.lock().unwrap().extend(
            (0..count).map(|n| (SandboxKey::new(Scope::Session, format!("ses_{n:0>100}")), 1)),
        );
        driver
    }

    /// Every driver call so far, as `verb scope id`.
    pub fn calls(&self) -> Vec<String> {
        self.calls.lock().unwrap().clone()
    }

    fn record(&self, verb: &str, key: &SandboxKey) {
        self.calls
            .lock()
            .unwrap()
            .push(format!("{verb} {} {}", key.scope, key.id));
    }
}

#[async_trait]
impl Driver for FakeDriver {
    fn name(&self) -> &'static str {
        "fake"
    }

    fn health(&self) -> String {
        "always fine".to_string()
    }

    async fn ensure(
        &self,
        key: &SandboxKey,
        _env: &SandboxEnv,
    ) -> Result<EnsureReport, SandboxError> {
        self.record("ensure", key);
        let mut running = self.running.lock().unwrap();
        let created = !running.contains_key(key);
        let generation = *running.entry(key.clone()).or_insert(1);
        Ok(EnsureReport {
            state: ProbeState::Running,
            created,
            generation,
            pid: Some(4242),
            differs: Vec::new(),
            // The base name's hash, padded: one uid per key, as a real
            // incarnation keeps its own.
            uid: format!("{:0>32}", key.base_name.rsplit('-').next().unwrap_or("0")),
        })
    }

    async fn deprovision(
        &self,
        key: &SandboxKey,
        _keep_workspace: bool,
    ) -> Result<DeprovisionReport, SandboxError> {
        self.record("deprovision", key);
        let was_present = self.running.lock().unwrap().remove(key).is_some();
        Ok(DeprovisionReport {
            was_present,
            forced: false,
        })
    }

    /// The server's unit tests run no commands: refused by name.
    async fn exec(
        &self,
        key: &SandboxKey,
        _spec: &crate::started_command::CommandSpec,
    ) -> Result<crate::started_command::StartedCommand, SandboxError> {
        self.record("exec", key);
        Err(SandboxError::FailedPrecondition(
            "the fake driver runs no commands".into(),
        ))
    }

    /// The server's unit tests move no files: refused by name.
    async fn put_file(
        &self,
        _key: &SandboxKey,
        _chunk: &sandboxd_protocol::PutChunk,
    ) -> Result<sandboxd_protocol::PutReport, SandboxError> {
        Err(crate::provisioner::files_not_on("fake", "put_file"))
    }

    async fn get_file(
        &self,
        _key: &SandboxKey,
        _path: &str,
        _offset: u64,
        _max: u32,
    ) -> Result<sandboxd_protocol::FileChunk, SandboxError> {
        Err(crate::provisioner::files_not_on("fake", "get_file"))
    }

    async fn stat_file(
        &self,
        _key: &SandboxKey,
        _path: &str,
    ) -> Result<sandboxd_protocol::FileStat, SandboxError> {
        Err(crate::provisioner::files_not_on("fake", "stat_file"))
    }

    async fn list_files(
        &self,
        _key: &SandboxKey,
        _path: &str,
    ) -> Result<sandboxd_protocol::FileList, SandboxError> {
        Err(crate::provisioner::files_not_on("fake", "list_files"))
    }

    async fn remove_file(
        &self,
        _key: &SandboxKey,
        _path: &str,
        _recursive: bool,
    ) -> Result<(), SandboxError> {
        Err(crate::provisioner::files_not_on("fake", "remove_file"))
    }

    async fn put_tar(
        &self,
        _key: &SandboxKey,
        _chunk: &sandboxd_protocol::PutChunk,
    ) -> Result<sandboxd_protocol::PutReport, SandboxError> {
        Err(crate::provisioner::files_not_on("fake", "put_tar"))
    }

    async fn get_tar(
        &self,
        _key: &SandboxKey,
        _path: &str,
        _offset: u64,
        _max: u32,
    ) -> Result<sandboxd_protocol::FileChunk, SandboxError> {
        Err(crate::provisioner::files_not_on("fake", "get_tar"))
    }

    async fn recovered_commands(&self) -> Vec<crate::started_command::RecoveredCommand> {
        Vec::new()
    }

    async fn workspaces(
        &self,
        _scope: Option<Scope>,
    ) -> Result<Vec<sandboxd_protocol::WorkspaceInfo>, SandboxError> {
        Err(crate::provisioner::no_host_workspaces("fake"))
    }

    async fn usage(
        &self,
        _key: &SandboxKey,
        _with_disk: bool,
    ) -> Result<Option<sandboxd_protocol::Usage>, SandboxError> {
        Ok(None)
    }

    /// The server's unit tests pause nothing: refused as a tier that
    /// cannot would.
    async fn pause(
        &self,
        _key: &SandboxKey,
    ) -> Result<sandboxd_protocol::PauseReport, SandboxError> {
        Err(SandboxError::FailedPrecondition(
            "the fake tier cannot pause a sandbox".into(),
        ))
    }

    async fn resume(
        &self,
        _key: &SandboxKey,
    ) -> Result<sandboxd_protocol::PauseReport, SandboxError> {
        Err(SandboxError::FailedPrecondition(
            "the fake tier cannot pause or resume a sandbox".into(),
        ))
    }

    async fn probe(&self, key: &SandboxKey) -> Result<ProbeState, SandboxError> {
        self.record("probe", key);
        if let Some(gate) = &self.probe_gate {
            let _permit = gate.acquire().await.expect("gate open");
        }
        let running = self.running.lock().unwrap().contains_key(key);
        Ok(if running {
            ProbeState::Running
        } else {
            ProbeState::Absent
        })
    }

    async fn describe(&self, key: &SandboxKey) -> Result<SandboxInfo, SandboxError> {
        self.record("describe", key);
        let state = self.probe(key).await?;
        Ok(info(key.scope, &key.id, state))
    }

    async fn list(&self, scope: Option<Scope>) -> Result<Vec<SandboxInfo>, SandboxError> {
        let running = self.running.lock().unwrap();
        let mut all: Vec<SandboxInfo> = running
            .keys()
            .filter(|key| scope.is_none_or(|scope| key.scope == scope))
            .map(|key| info(key.scope, &key.id, ProbeState::Running))
            .collect();
        all.sort_by(|a, b| a.name.cmp(&b.name));
        Ok(all)
    }

    /// Records the size asked of it, and answers that many bytes of `x`.
    async fn logs(
        &self,
        key: &SandboxKey,
        _start: LogStart,
        max_bytes: u32,
    ) -> Result<LogChunk, SandboxError> {
        self.record(&format!("logs {max_bytes}"), key);
        Ok(LogChunk {
            data: vec![b'x'; max_bytes as usize],
            next: LogCursor {
                epoch: 1,
                offset: u64::from(max_bytes),
            },
            gap: false,
            at_end: true,
            ended: None,
        })
    }

    async fn shutdown(&self) {}

    fn egress(&self) -> EgressStatus {
        EgressStatus {
            posture: "none".to_string(),
            enforced: false,
            mechanism: "the stand-in driver runs nothing".to_string(),
        }
    }
}

fn info(scope: Scope, id: &str, state: ProbeState) -> SandboxInfo {
    SandboxInfo {
        state,
        pid: (state == ProbeState::Running).then_some(4242),
        task_queue: "q".to_string(),
        caller_class: "user".to_string(),
        ..SandboxInfo::absent(scope, id, 1, None)
    }
}

/// The shared state of a daemon serving `driver`, with these allow-lists
/// and a daemon uid that no test peer has.
pub fn daemon_state(driver: Arc<FakeDriver>, lists: AccessConfig) -> Arc<DaemonState> {
    Arc::new(DaemonState {
        driver,
        access: AccessPolicy::new(lists, 990),
        started: Instant::now(),
        socket_path: PathBuf::from("/run/test/sandboxd.sock"),
        state_dir: PathBuf::from("/var/lib/test"),
        warn_budget: Default::default(),
        differences: Default::default(),
        commands: crate::commands::CommandTable::new(
            Default::default(),
            crate::events::EventHub::new(64),
        ),
        events: crate::events::EventHub::new(64),
        fence_locks: crate::drivers::key_lock::KeyLocks::new(),
        runner_endpoints: Default::default(),
        metrics: None,
        metrics_address: None,
        stop_grace: std::time::Duration::from_secs(10),
    })
}

pub fn env() -> SandboxEnv {
    SandboxEnv {
        task_queue: "session:abc".to_string(),
        stigmer_token: sandboxd_protocol::Token::new("secret-token"),
        caller_class: "user".to_string(),
    }
}
