//! An in-process stand-in for the daemon, shared by the client's tests.
//!
//! It speaks the real wire contract (same service, same codecs) but its
//! answers are canned: what is under test is the client's transport
//! behaviour and the CLI's output, not sandbox semantics (the end-to-end
//! suite runs the real daemon).

#![allow(dead_code)] // each test file uses a different part of it

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::StreamExt;
use sandboxd_client::{
    DaemonStatus, DeprovisionReport, EnsureReport, ExitInfo, LogChunk, LogCursor, LogStart,
    ProbeState, SandboxEnv, SandboxError, SandboxInfo, Scope, Token, WorkspaceInfo,
    PROTOCOL_VERSION,
};
use sandboxd_protocol::{naming, wire, Sandboxd};
use tarpc::context::Context;
use tarpc::server::{BaseChannel, Channel};
use tokio::net::UnixListener;
use tokio::task::JoinSet;
use tokio_util::codec::Framed;

/// What the stand-in does; shared by every instance on one path so counts
/// survive a restart.
#[derive(Default)]
pub struct Behaviour {
    pub version: AtomicU32,
    pub ensures: AtomicUsize,
    pub creates: AtomicUsize,
    /// Calls to ensure/create_connect hang (never answer) while this is set.
    pub hang: AtomicBool,
    /// How long `status` takes, in milliseconds.
    pub status_delay_ms: AtomicU32,
    /// The token the last ensure or create_connect carried.
    pub last_token: Mutex<String>,
}

#[derive(Clone)]
pub struct FakeDaemon(Arc<Behaviour>);

impl FakeDaemon {
    async fn maybe_hang(&self) {
        if self.0.hang.load(Ordering::SeqCst) {
            futures::future::pending::<()>().await;
        }
    }
}

impl Sandboxd for FakeDaemon {
    async fn protocol_version(self, _: Context) -> u32 {
        self.0.version.load(Ordering::SeqCst)
    }

    async fn ensure(
        self,
        _: Context,
        _scope: Scope,
        _id: String,
        env: SandboxEnv,
    ) -> Result<EnsureReport, SandboxError> {
        *self.0.last_token.lock().unwrap() = env.stigmer_token.expose().to_string();
        let call = self.0.ensures.fetch_add(1, Ordering::SeqCst) + 1;
        self.maybe_hang().await;
        Ok(EnsureReport {
            state: ProbeState::Running,
            created: call == 1,
            generation: 1,
            pid: Some(100),
            differs: Vec::new(),
            uid: "0123456789abcdef0123456789abcdef".into(),
        })
    }

    async fn deprovision(
        self,
        _: Context,
        _scope: Scope,
        _id: String,
        _keep_workspace: bool,
    ) -> Result<DeprovisionReport, SandboxError> {
        Ok(DeprovisionReport {
            was_present: false,
            forced: false,
        })
    }

    async fn create_connect(
        self,
        _: Context,
        request_id: String,
        env: SandboxEnv,
    ) -> Result<String, SandboxError> {
        *self.0.last_token.lock().unwrap() = env.stigmer_token.expose().to_string();
        self.0.creates.fetch_add(1, Ordering::SeqCst);
        self.maybe_hang().await;
        Ok(format!("connect-{request_id}"))
    }

    async fn deprovision_connect(
        self,
        _: Context,
        _sandbox_id: String,
    ) -> Result<DeprovisionReport, SandboxError> {
        Err(SandboxError::Unavailable("engine down".into()))
    }

    async fn probe(
        self,
        _: Context,
        _scope: Scope,
        _id: String,
    ) -> Result<ProbeState, SandboxError> {
        Ok(ProbeState::Stopped)
    }

    async fn describe(
        self,
        _: Context,
        scope: Scope,
        id: String,
    ) -> Result<SandboxInfo, SandboxError> {
        Ok(SandboxInfo {
            name: naming::base_name(scope, &id),
            scope,
            id,
            state: ProbeState::Running,
            pid: Some(100),
            container_id: None,
            image: None,
            generation: 2,
            started_at_unix_ms: Some(1_714_566_896_000),
            restarts: 1,
            last_exit: Some(ExitInfo {
                code: Some(3),
                signal: None,
                at_unix_ms: 1_714_566_895_000,
                oom_killed: false,
                oom_limit_bytes: None,
                pids_refused: 0,
                pids_limit: None,
                disk_limit_bytes: None,
                reason: sandboxd_protocol::ExitReason::Exited { code: 3 },
            }),
            task_queue: "session:abc".into(),
            caller_class: "user".into(),
            egress: Some(stand_in_egress()),
            cluster: None,
            isolation: Vec::new(),
            uid: String::new(),
            usage: None,
            paused_since_unix_ms: None,
            view: Vec::new(),
        })
    }

    async fn list(
        self,
        _: Context,
        _scope: Option<Scope>,
    ) -> Result<Vec<SandboxInfo>, SandboxError> {
        Ok(Vec::new())
    }

    async fn status(self, _: Context) -> Result<DaemonStatus, SandboxError> {
        let delay = self.0.status_delay_ms.load(Ordering::SeqCst);
        tokio::time::sleep(Duration::from_millis(u64::from(delay))).await;
        Ok(DaemonStatus {
            version: "test".into(),
            protocol_version: PROTOCOL_VERSION,
            driver: "stand-in".into(),
            driver_health: "ok".into(),
            uptime_secs: 1,
            counts: Default::default(),
            socket_path: String::new(),
            state_dir: String::new(),
            containment: String::new(),
            health: sandboxd_protocol::Health::healthy(),
            egress: stand_in_egress(),
            isolation_mode: String::new(),
            runner_endpoints: Default::default(),
            metrics: None,
            isolation: Vec::new(),
            pools: Vec::new(),
            stop_grace_ms: 0,
            view: Vec::new(),
        })
    }

    /// A fixed output, [`LOG_LINES`], served one line per call so a reader
    /// must follow the cursor; the id `gone` has none.
    async fn logs(
        self,
        _: Context,
        scope: Scope,
        id: String,
        start: LogStart,
        _max_bytes: u32,
    ) -> Result<LogChunk, SandboxError> {
        if id == "gone" {
            return Err(SandboxError::FailedPrecondition(format!(
                "{scope} 'gone' has no output to show"
            )));
        }
        let line = |index: usize| {
            let offset = LOG_LINES[..index]
                .iter()
                .map(|line| line.len())
                .sum::<usize>() as u64;
            (offset, LOG_LINES.get(index).copied())
        };
        let index = match start {
            LogStart::Beginning => 0,
            LogStart::Tail { lines } => LOG_LINES.len().saturating_sub(lines as usize),
            LogStart::After(cursor) | LogStart::Generation(cursor) => (0..=LOG_LINES.len())
                .find(|&index| line(index).0 >= cursor.offset)
                .unwrap_or(LOG_LINES.len()),
        };
        if let LogStart::Tail { .. } = start {
            let data = LOG_LINES[index..].concat().into_bytes();
            let offset = line(LOG_LINES.len()).0;
            return Ok(LogChunk {
                data,
                next: LogCursor { epoch: 1, offset },
                gap: false,
                at_end: true,
                ended: None,
            });
        }
        let (offset, text) = line(index);
        let data = text.unwrap_or_default().as_bytes().to_vec();
        let next = offset + data.len() as u64;
        Ok(LogChunk {
            data,
            next: LogCursor {
                epoch: 1,
                offset: next,
            },
            gap: false,
            at_end: index + 1 >= LOG_LINES.len(),
            ended: None,
        })
    }

    async fn workspaces(
        self,
        _: Context,
        scope: Option<Scope>,
    ) -> Result<Vec<WorkspaceInfo>, SandboxError> {
        // One kept session workspace; none of the other scopes.
        let kept = WorkspaceInfo {
            name: naming::base_name(Scope::Session, "kept"),
            scope: Scope::Session,
            id: Some("kept".to_string()),
            size_bytes: 2048,
            last_run_unix_ms: Some(1_714_566_896_000),
            running: false,
            expires_at_unix_ms: None,
            host_path: "/var/lib/sandboxd/sandboxes/kept".to_string(),
        };
        Ok(Vec::from_iter(
            scope
                .is_none_or(|scope| scope == Scope::Session)
                .then_some(kept),
        ))
    }

    async fn ensure_fenced(
        self,
        _: Context,
        _scope: Scope,
        _id: String,
        _env: sandboxd_protocol::SandboxEnv,
        _expect: sandboxd_protocol::Expectation,
    ) -> Result<sandboxd_protocol::EnsureReport, SandboxError> {
        Err(not_served("ensure_fenced"))
    }

    async fn deprovision_fenced(
        self,
        _: Context,
        _scope: Scope,
        _id: String,
        _keep_workspace: bool,
        _expect: sandboxd_protocol::Expectation,
    ) -> Result<sandboxd_protocol::DeprovisionReport, SandboxError> {
        Err(not_served("deprovision_fenced"))
    }

    async fn deprovision_connect_fenced(
        self,
        _: Context,
        _sandbox_id: String,
        _expect: sandboxd_protocol::Expectation,
    ) -> Result<sandboxd_protocol::DeprovisionReport, SandboxError> {
        Err(not_served("deprovision_connect_fenced"))
    }

    async fn events(
        self,
        _: Context,
        _since: Option<sandboxd_protocol::EventCursor>,
        _max: u32,
        _wait_ms: u32,
    ) -> Result<sandboxd_protocol::EventsReply, SandboxError> {
        Err(not_served("events"))
    }

    async fn usage(
        self,
        _: Context,
        _scope: Option<sandboxd_protocol::Scope>,
    ) -> Result<Vec<sandboxd_protocol::SandboxUsage>, SandboxError> {
        Err(not_served("usage"))
    }

    async fn pause(
        self,
        _: Context,
        _scope: Scope,
        _id: String,
    ) -> Result<sandboxd_protocol::PauseReport, SandboxError> {
        Err(not_served("pause"))
    }

    async fn resume(
        self,
        _: Context,
        _scope: Scope,
        _id: String,
    ) -> Result<sandboxd_protocol::PauseReport, SandboxError> {
        Err(not_served("resume"))
    }

    async fn exec(
        self,
        _: Context,
        _scope: Scope,
        _id: String,
        _request: sandboxd_protocol::ExecRequest,
    ) -> Result<sandboxd_protocol::ExecStarted, SandboxError> {
        Err(not_served("exec"))
    }

    async fn command_output(
        self,
        _: Context,
        _scope: Scope,
        _id: String,
        _command: sandboxd_protocol::CommandRef,
        _read: sandboxd_protocol::OutputRead,
    ) -> Result<sandboxd_protocol::CommandOutput, SandboxError> {
        Err(not_served("command_output"))
    }

    async fn command_wait(
        self,
        _: Context,
        _scope: Scope,
        _id: String,
        _command: sandboxd_protocol::CommandRef,
        _wait_ms: u32,
    ) -> Result<sandboxd_protocol::CommandInfo, SandboxError> {
        Err(not_served("command_wait"))
    }

    async fn command_input(
        self,
        _: Context,
        _scope: Scope,
        _id: String,
        _command: sandboxd_protocol::CommandRef,
        _data: sandboxd_protocol::ByteBuf,
        _close: bool,
    ) -> Result<(), SandboxError> {
        Err(not_served("command_input"))
    }

    async fn command_signal(
        self,
        _: Context,
        _scope: Scope,
        _id: String,
        _command: sandboxd_protocol::CommandRef,
        _signal: i32,
    ) -> Result<(), SandboxError> {
        Err(not_served("command_signal"))
    }

    async fn command_resize(
        self,
        _: Context,
        _scope: Scope,
        _id: String,
        _command: sandboxd_protocol::CommandRef,
        _rows: u16,
        _cols: u16,
    ) -> Result<(), SandboxError> {
        Err(not_served("command_resize"))
    }

    async fn commands(
        self,
        _: Context,
        _scope: Scope,
        _id: String,
    ) -> Result<Vec<sandboxd_protocol::CommandInfo>, SandboxError> {
        Err(not_served("commands"))
    }

    async fn put_file(
        self,
        _: Context,
        _scope: Scope,
        _id: String,
        _chunk: sandboxd_protocol::PutChunk,
    ) -> Result<sandboxd_protocol::PutReport, SandboxError> {
        Err(not_served("put_file"))
    }

    async fn get_file(
        self,
        _: Context,
        _scope: Scope,
        _id: String,
        _path: String,
        _offset: u64,
        _max: u32,
    ) -> Result<sandboxd_protocol::FileChunk, SandboxError> {
        Err(not_served("get_file"))
    }

    async fn stat_file(
        self,
        _: Context,
        _scope: Scope,
        _id: String,
        _path: String,
    ) -> Result<sandboxd_protocol::FileStat, SandboxError> {
        Err(not_served("stat_file"))
    }

    async fn list_files(
        self,
        _: Context,
        _scope: Scope,
        _id: String,
        _path: String,
    ) -> Result<sandboxd_protocol::FileList, SandboxError> {
        Err(not_served("list_files"))
    }

    async fn remove_file(
        self,
        _: Context,
        _scope: Scope,
        _id: String,
        _path: String,
        _recursive: bool,
    ) -> Result<(), SandboxError> {
        Err(not_served("remove_file"))
    }

    async fn put_tar(
        self,
        _: Context,
        _scope: Scope,
        _id: String,
        _chunk: sandboxd_protocol::PutChunk,
    ) -> Result<sandboxd_protocol::PutReport, SandboxError> {
        Err(not_served("put_tar"))
    }

    async fn get_tar(
        self,
        _: Context,
        _scope: Scope,
        _id: String,
        _path: String,
        _offset: u64,
        _max: u32,
    ) -> Result<sandboxd_protocol::FileChunk, SandboxError> {
        Err(not_served("get_tar"))
    }
}

/// The stand-in serves the calls its tests use; the daemon's own tests
/// (tests/tests/daemon/fencing.rs, events.rs) cover the rest.
fn not_served(call: &str) -> SandboxError {
    SandboxError::FailedPrecondition(format!("the stand-in daemon does not serve {call}"))
}

/// What the stand-in's `logs` serves, a line per call.
pub const LOG_LINES: [&str; 3] = ["first line\n", "second \u{1b}[31mred\u{1b}[0m\n", "third\n"];

/// One running instance: stopping it aborts the accept loop and every
/// connection, closing their sockets as a crashed daemon would.
pub struct Instance {
    tasks: JoinSet<()>,
}

pub fn start(path: &Path, behaviour: &Arc<Behaviour>) -> Instance {
    let _ = std::fs::remove_file(path);
    let listener = UnixListener::bind(path).expect("bind the test socket");
    let daemon = FakeDaemon(behaviour.clone());
    let mut tasks = JoinSet::new();
    tasks.spawn(async move {
        let mut connections = JoinSet::new();
        loop {
            let Ok((stream, _)) = listener.accept().await else {
                return;
            };
            let framed = Framed::new(stream, wire::frame_codec());
            let transport = tarpc::serde_transport::new(framed, wire::body_codec());
            let daemon = daemon.clone();
            connections.spawn(async move {
                let mut handlers = JoinSet::new();
                let mut requests =
                    std::pin::pin!(BaseChannel::with_defaults(transport).execute(daemon.serve()));
                while let Some(handler) = requests.next().await {
                    handlers.spawn(handler);
                }
            });
        }
    });
    Instance { tasks }
}

impl Instance {
    pub async fn stop(mut self) {
        self.tasks.shutdown().await;
    }
}

/// A fresh, short socket path (Unix socket paths are limited to 107 bytes)
/// in a directory of its own, removed with it: a test leaves nothing in
/// the temporary directory.
pub fn socket_path() -> SocketPath {
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    let dir = std::env::temp_dir().join(format!(
        "sbxc-{}-{}",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::SeqCst)
    ));
    std::fs::create_dir_all(&dir).expect("create the test directory");
    SocketPath {
        path: dir.join("d.sock"),
        dir,
    }
}

/// A test's socket path; its directory goes when this is dropped.
pub struct SocketPath {
    dir: PathBuf,
    path: PathBuf,
}

impl std::ops::Deref for SocketPath {
    type Target = Path;

    fn deref(&self) -> &Path {
        &self.path
    }
}

impl AsRef<Path> for SocketPath {
    fn as_ref(&self) -> &Path {
        &self.path
    }
}

impl Drop for SocketPath {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

pub fn behaviour() -> Arc<Behaviour> {
    let behaviour = Behaviour::default();
    behaviour.version.store(PROTOCOL_VERSION, Ordering::SeqCst);
    Arc::new(behaviour)
}

pub fn env() -> SandboxEnv {
    SandboxEnv {
        task_queue: "session:abc".into(),
        stigmer_token: Token::new("s3cr3t"),
        caller_class: "user".into(),
    }
}

/// What the stand-in says of its egress posture.
fn stand_in_egress() -> sandboxd_client::EgressStatus {
    sandboxd_client::EgressStatus {
        posture: "strict".into(),
        enforced: true,
        mechanism: "stand-in rules".into(),
    }
}
