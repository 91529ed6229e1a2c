//! The tarpc service: one method per call.
//!
//! bincode encodes a request by the method's position, so `protocol_version`
//! stays first forever: a client of any version can ask it and get an
//! answer it can decode, and refuse a mismatch with a clear message instead
//! of a decode error. New methods are appended at the end, for the same
//! reason: the positions of the ones before them never change.

use crate::{
    CommandInfo, CommandOutput, CommandRef, DaemonStatus, DeprovisionReport, EnsureReport,
    EventCursor, EventsReply, ExecRequest, ExecStarted, Expectation, FileChunk, FileList, FileStat,
    LogChunk, LogStart, OutputRead, PauseReport, ProbeState, PutChunk, PutReport, SandboxEnv,
    SandboxError, SandboxInfo, SandboxUsage, Scope, WorkspaceInfo,
};

/// Bump on any change to the service or the types it carries.
pub const PROTOCOL_VERSION: u32 = 12;

#[tarpc::service]
pub trait Sandboxd {
    /// The daemon's [`PROTOCOL_VERSION`]. Always the first method.
    async fn protocol_version() -> u32;

    /// Idempotent state machine: absent → provision; stopped → start; running → fast path.
    async fn ensure(
        scope: Scope,
        id: String,
        env: SandboxEnv,
    ) -> Result<EnsureReport, SandboxError>;

    /// Tear down; missing is success. `keep_workspace` keeps the workspace for debugging.
    async fn deprovision(
        scope: Scope,
        id: String,
        keep_workspace: bool,
    ) -> Result<DeprovisionReport, SandboxError>;

    /// Request-scoped and NOT idempotent: fails when the request's sandbox
    /// already exists. Returns the sandbox id to deprovision it by.
    async fn create_connect(request_id: String, env: SandboxEnv) -> Result<String, SandboxError>;

    /// Tear down a connect sandbox; missing is success.
    async fn deprovision_connect(sandbox_id: String) -> Result<DeprovisionReport, SandboxError>;

    /// Live state, read from the runtime.
    async fn probe(scope: Scope, id: String) -> Result<ProbeState, SandboxError>;

    /// One sandbox's facts (never the token).
    async fn describe(scope: Scope, id: String) -> Result<SandboxInfo, SandboxError>;

    /// Every sandbox the driver owns, optionally of one scope.
    async fn list(scope: Option<Scope>) -> Result<Vec<SandboxInfo>, SandboxError>;

    /// Facts about the daemon.
    async fn status() -> Result<DaemonStatus, SandboxError>;

    /// A bounded piece of a sandbox's output: at most `max_bytes` (clamped
    /// to [`crate::MAX_LOG_CHUNK`]) from `start`. Added in protocol 2.
    async fn logs(
        scope: Scope,
        id: String,
        start: LogStart,
        max_bytes: u32,
    ) -> Result<LogChunk, SandboxError>;

    /// Every workspace kept on the daemon's disk (process tier), optionally
    /// of one scope: running or not, with its id where known, its size and
    /// when it was last used. A stopped sandbox's workspace is removed with
    /// `deprovision` of its id. Added in protocol 3.
    async fn workspaces(scope: Option<Scope>) -> Result<Vec<WorkspaceInfo>, SandboxError>;

    /// `ensure`, fenced: refused with `conflict`, changing nothing, unless
    /// the sandbox is the incarnation `expect` names (see
    /// [`crate::fence`]). Added in protocol 5.
    async fn ensure_fenced(
        scope: Scope,
        id: String,
        env: SandboxEnv,
        expect: Expectation,
    ) -> Result<EnsureReport, SandboxError>;

    /// `deprovision`, fenced: refused with `conflict`, changing nothing,
    /// unless the sandbox is the incarnation `expect` names; a sandbox that
    /// is already gone is still success. Added in protocol 5.
    async fn deprovision_fenced(
        scope: Scope,
        id: String,
        keep_workspace: bool,
        expect: Expectation,
    ) -> Result<DeprovisionReport, SandboxError>;

    /// `deprovision_connect`, fenced like `deprovision_fenced`. Added in
    /// protocol 5.
    async fn deprovision_connect_fenced(
        sandbox_id: String,
        expect: Expectation,
    ) -> Result<DeprovisionReport, SandboxError>;

    /// The events after `since` (`None`: from the oldest kept), at most
    /// `max`, waiting up to `wait_ms` when there are none yet (see
    /// [`crate::events`]). Added in protocol 5.
    async fn events(
        since: Option<EventCursor>,
        max: u32,
        wait_ms: u32,
    ) -> Result<EventsReply, SandboxError>;

    /// The live figures of every running sandbox, optionally of one
    /// scope, read at once (what `sandboxctl top` samples every second,
    /// so it need not describe each). Added in protocol 8.
    async fn usage(scope: Option<Scope>) -> Result<Vec<SandboxUsage>, SandboxError>;

    /// Freezes the sandbox's runner where it stands (see
    /// [`crate::lifecycle`]); one already paused is success. Refused for a
    /// sandbox with no running runner. Added in protocol 8.
    async fn pause(scope: Scope, id: String) -> Result<PauseReport, SandboxError>;

    /// Thaws a paused sandbox's runner (same pid and generation); one not
    /// paused is success. Refused for a sandbox with no running runner.
    /// Added in protocol 8.
    async fn resume(scope: Scope, id: String) -> Result<PauseReport, SandboxError>;

    /// Starts a command inside a running sandbox, with exactly its
    /// isolation (see [`crate::commands`]); answers at once. A sandbox not
    /// running is a failed precondition. Added in protocol 10.
    async fn exec(
        scope: Scope,
        id: String,
        request: ExecRequest,
    ) -> Result<ExecStarted, SandboxError>;

    /// A bounded piece of one of a command's streams (see
    /// [`OutputRead`]), waiting when there is nothing there yet and the
    /// command has not ended. Added in protocol 10.
    async fn command_output(
        scope: Scope,
        id: String,
        command: CommandRef,
        read: OutputRead,
    ) -> Result<CommandOutput, SandboxError>;

    /// The command, once it has ended or `wait_ms` has passed (0: at once):
    /// its proof is set when it has ended. Added in protocol 10.
    async fn command_wait(
        scope: Scope,
        id: String,
        command: CommandRef,
        wait_ms: u32,
    ) -> Result<CommandInfo, SandboxError>;

    /// Writes `data` to the command's stdin, then closes it when `close`.
    /// Added in protocol 10.
    async fn command_input(
        scope: Scope,
        id: String,
        command: CommandRef,
        data: serde_bytes::ByteBuf,
        close: bool,
    ) -> Result<(), SandboxError>;

    /// Sends `signal` to the command (its process group). Added in
    /// protocol 10.
    async fn command_signal(
        scope: Scope,
        id: String,
        command: CommandRef,
        signal: i32,
    ) -> Result<(), SandboxError>;

    /// Resizes the command's terminal. Added in protocol 10.
    async fn command_resize(
        scope: Scope,
        id: String,
        command: CommandRef,
        rows: u16,
        cols: u16,
    ) -> Result<(), SandboxError>;

    /// The sandbox's commands: live ones and the proofs still kept, oldest
    /// first. Added in protocol 10.
    async fn commands(scope: Scope, id: String) -> Result<Vec<CommandInfo>, SandboxError>;
    /// One chunk of an upload of one file into the sandbox's workspace
    /// (see [`crate::files`]), written as the sandbox's user. Added in
    /// protocol 11.
    async fn put_file(scope: Scope, id: String, chunk: PutChunk)
        -> Result<PutReport, SandboxError>;

    /// At most `max` bytes (clamped to [`crate::files::MAX_FILE_CHUNK`])
    /// of a file in the workspace, from `offset`, read as the sandbox's
    /// user. Added in protocol 11.
    async fn get_file(
        scope: Scope,
        id: String,
        path: String,
        offset: u64,
        max: u32,
    ) -> Result<FileChunk, SandboxError>;

    /// One file's facts (a symlink is not followed). Added in protocol 11.
    async fn stat_file(scope: Scope, id: String, path: String) -> Result<FileStat, SandboxError>;

    /// A directory's entries (`""` or `.`: the workspace). Added in
    /// protocol 11.
    async fn list_files(scope: Scope, id: String, path: String) -> Result<FileList, SandboxError>;

    /// Removes a file, a symlink (never what it points at), or a directory
    /// (with everything in it when `recursive`). Added in protocol 11.
    async fn remove_file(
        scope: Scope,
        id: String,
        path: String,
        recursive: bool,
    ) -> Result<(), SandboxError>;

    /// One chunk of a tar stream unpacked into the workspace directory
    /// `chunk.path` (`""`: the workspace) after its last chunk, as the
    /// sandbox's user (see [`crate::files`]; `chunk.mode` is unused: modes
    /// come from the archive). Added in protocol 12.
    async fn put_tar(scope: Scope, id: String, chunk: PutChunk) -> Result<PutReport, SandboxError>;

    /// At most `max` bytes (clamped to [`crate::files::MAX_FILE_CHUNK`])
    /// of a tar stream of `path` (a file or a directory with everything in
    /// it; `""`: the whole workspace), from `offset`, read as the
    /// sandbox's user. Added in protocol 12.
    async fn get_tar(
        scope: Scope,
        id: String,
        path: String,
        offset: u64,
        max: u32,
    ) -> Result<FileChunk, SandboxError>;
}
