//! Commands in a sandbox (protocol 10; see [`sandboxd_protocol::commands`]):
//! the calls as the daemon serves them. [`crate::exec`] builds handles
//! and the control plane's `run_command` on top.

use std::time::Duration;

use sandboxd_protocol::commands::MAX_COMMAND_WAIT_MS;
use sandboxd_protocol::{
    validate, validate_command, CommandInfo, CommandOutput, CommandRef, ExecRequest, ExecStarted,
    OutputRead, OutputStream, Scope,
};

use crate::calls::id_field;
use crate::client::Resend;
use crate::{ClientError, SandboxdClient};

/// What a long-poll may take beyond its wait before the client gives up.
const LONG_POLL_MARGIN: Duration = Duration::from_secs(10);

impl SandboxdClient {
    /// Starts a command in a running sandbox and answers at once with its
    /// id and pid. Never re-sent after a broken connection (the lost
    /// attempt may have started it): retry with the same tag, which a live
    /// command keeps, to find it instead of starting it twice.
    pub async fn exec(
        &self,
        scope: Scope,
        id: &str,
        request: &ExecRequest,
    ) -> Result<ExecStarted, ClientError> {
        validate::sandbox_id(id_field(scope), id)?;
        validate_command::exec_request(request)?;
        self.call(Resend::Never, |rpc, ctx| {
            let (id, request) = (id.to_string(), request.clone());
            async move { rpc.exec(ctx, scope, id, request).await }
        })
        .await
    }

    /// At most `max_bytes` of a command's `stream` from `offset`, waiting
    /// up to `wait` for bytes or its end.
    #[allow(clippy::too_many_arguments)] // the call's own fields, spelled out
    pub async fn command_output(
        &self,
        scope: Scope,
        id: &str,
        command: &CommandRef,
        stream: OutputStream,
        offset: u64,
        max_bytes: u32,
        wait: Duration,
    ) -> Result<CommandOutput, ClientError> {
        validate::sandbox_id(id_field(scope), id)?;
        validate_command::command_ref(command)?;
        let read = OutputRead {
            stream,
            offset,
            max_bytes,
            wait_ms: wait_ms(wait),
        };
        self.call_within(self.long_poll(wait), Resend::Once, |rpc, ctx| {
            let (id, command) = (id.to_string(), command.clone());
            async move { rpc.command_output(ctx, scope, id, command, read).await }
        })
        .await
    }

    /// The command, once it has ended or `wait` has passed: its proof is
    /// set when it has ended.
    pub async fn command_wait(
        &self,
        scope: Scope,
        id: &str,
        command: &CommandRef,
        wait: Duration,
    ) -> Result<CommandInfo, ClientError> {
        validate::sandbox_id(id_field(scope), id)?;
        validate_command::command_ref(command)?;
        let wait_ms = wait_ms(wait);
        self.call_within(self.long_poll(wait), Resend::Once, |rpc, ctx| {
            let (id, command) = (id.to_string(), command.clone());
            async move { rpc.command_wait(ctx, scope, id, command, wait_ms).await }
        })
        .await
    }

    /// Writes `data` to the command's stdin, and closes it when `close`.
    /// Never re-sent (bytes written twice are not the same input).
    pub async fn command_input(
        &self,
        scope: Scope,
        id: &str,
        command: &CommandRef,
        data: &[u8],
        close: bool,
    ) -> Result<(), ClientError> {
        validate::sandbox_id(id_field(scope), id)?;
        validate_command::command_ref(command)?;
        validate_command::input(data)?;
        self.call(Resend::Never, |rpc, ctx| {
            let (id, command) = (id.to_string(), command.clone());
            let data = sandboxd_protocol::ByteBuf::from(data.to_vec());
            async move {
                rpc.command_input(ctx, scope, id, command, data, close)
                    .await
            }
        })
        .await
    }

    /// Sends `signal` to the command's process group.
    pub async fn command_signal(
        &self,
        scope: Scope,
        id: &str,
        command: &CommandRef,
        signal: i32,
    ) -> Result<(), ClientError> {
        validate::sandbox_id(id_field(scope), id)?;
        validate_command::command_ref(command)?;
        validate_command::signal(signal)?;
        self.call(Resend::Once, |rpc, ctx| {
            let (id, command) = (id.to_string(), command.clone());
            async move { rpc.command_signal(ctx, scope, id, command, signal).await }
        })
        .await
    }

    /// Resizes the command's terminal.
    pub async fn command_resize(
        &self,
        scope: Scope,
        id: &str,
        command: &CommandRef,
        rows: u16,
        cols: u16,
    ) -> Result<(), ClientError> {
        validate::sandbox_id(id_field(scope), id)?;
        validate_command::command_ref(command)?;
        self.call(Resend::Once, |rpc, ctx| {
            let (id, command) = (id.to_string(), command.clone());
            async move {
                rpc.command_resize(ctx, scope, id, command, rows, cols)
                    .await
            }
        })
        .await
    }

    /// The sandbox's commands: live ones and the proofs still kept, oldest
    /// first.
    pub async fn commands(&self, scope: Scope, id: &str) -> Result<Vec<CommandInfo>, ClientError> {
        validate::sandbox_id(id_field(scope), id)?;
        self.call(Resend::Once, |rpc, ctx| {
            let id = id.to_string();
            async move { rpc.commands(ctx, scope, id).await }
        })
        .await
    }

    /// The deadline of a call that waits up to `wait` at the daemon.
    fn long_poll(&self, wait: Duration) -> Duration {
        (wait + LONG_POLL_MARGIN).max(self.deadline())
    }
}

fn wait_ms(wait: Duration) -> u32 {
    wait.as_millis().min(u128::from(MAX_COMMAND_WAIT_MS)) as u32
}
