//! The calls on commands in sandboxes (`exec` and the rest), as the
//! service's methods call them: authorize → validate → the tier (for a
//! start) or the command table → reply.

use std::time::Duration;

use sandboxd_protocol::commands::{MAX_COMMAND_CHUNK, MAX_COMMAND_WAIT_MS};
use sandboxd_protocol::validate_command;
use sandboxd_protocol::{
    CommandInfo, CommandOutput, CommandRef, ExecRequest, ExecStarted, OutputRead, PtySize,
    SandboxError, Scope,
};

use super::service::ConnectionService;
use crate::access::Call;
use crate::commands::Command;
use crate::sandbox_key::SandboxKey;
use crate::started_command::CommandSpec;

impl ConnectionService {
    pub(super) async fn exec_call(
        &self,
        scope: Scope,
        id: String,
        request: ExecRequest,
    ) -> Result<ExecStarted, SandboxError> {
        let _timer = self.authorize(Call::Exec)?;
        let key = super::service::key(scope, super::service::id_field(scope), id)?;
        validate_command::exec_request(&request)?;
        let table = self.daemon.commands.clone();
        let claim = table.claim_tag(&key, request.tag.as_deref())?;
        let driver = self.daemon.driver.clone();
        let spec = CommandSpec {
            id: claim.id().to_string(),
            tag: request.tag.clone(),
            timeout_ms: request.timeout_ms,
            argv: request.argv.clone(),
            env: request.env.clone(),
            workdir: request.workdir.clone(),
            stdin: request.stdin,
            pty: request.pty,
            limits: request.limits,
            expect: request.expect.clone(),
        };
        let task_key = key.clone();
        // Once begun, a start is finished and its command taken into the
        // table whether or not the caller still waits: never a process
        // nobody supervises.
        let result = crate::drivers::run_to_completion("exec", async move {
            let started = driver.exec(&task_key, &spec).await?;
            Ok(table.adopt(claim, &request, started))
        })
        .await;
        if let Err(error) = &result {
            tracing::warn!(call = "exec", scope = %key.scope, id = %key.shown_id(), kind = error.kind(), %error, "exec refused");
        }
        result
    }

    /// The command `which` names, after the access check and validation.
    fn command(
        &self,
        call: Call,
        scope: Scope,
        id: String,
        which: &CommandRef,
    ) -> Result<
        (
            crate::server::service::CallTimer<'_>,
            std::sync::Arc<Command>,
        ),
        SandboxError,
    > {
        let timer = self.authorize(call)?;
        let key: SandboxKey = super::service::key(scope, super::service::id_field(scope), id)?;
        validate_command::command_ref(which)?;
        let command = self.daemon.commands.find(&key, which)?;
        Ok((timer, command))
    }

    pub(super) async fn command_output_call(
        &self,
        scope: Scope,
        id: String,
        which: CommandRef,
        asked: OutputRead,
    ) -> Result<CommandOutput, SandboxError> {
        let (_timer, command) = self.command(Call::CommandOutput, scope, id, &which)?;
        let max = asked.max_bytes.clamp(1, MAX_COMMAND_CHUNK) as usize;
        let wait = Duration::from_millis(u64::from(asked.wait_ms.min(MAX_COMMAND_WAIT_MS)));
        let (store, offset) = (command.output(asked.stream), asked.offset);
        let mut read = store.read(offset, max);
        if read.data.is_empty() && !read.at_closed_end && !wait.is_zero() {
            let _ = tokio::time::timeout(wait, store.wait_past(offset)).await;
            read = store.read(offset, max);
        }
        let proof = if read.at_closed_end {
            // The stores close just before the proof is given.
            command.wait_settled(wait.max(Duration::from_secs(1))).await;
            command.proof()
        } else {
            None
        };
        Ok(CommandOutput {
            next: read.start + read.data.len() as u64,
            start: read.start,
            dropped: read.dropped,
            data: read.data,
            proof,
        })
    }

    pub(super) async fn command_wait_call(
        &self,
        scope: Scope,
        id: String,
        which: CommandRef,
        wait_ms: u32,
    ) -> Result<CommandInfo, SandboxError> {
        let (_timer, command) = self.command(Call::CommandWait, scope, id, &which)?;
        let wait = Duration::from_millis(u64::from(wait_ms.min(MAX_COMMAND_WAIT_MS)));
        if !wait.is_zero() {
            command.wait_settled(wait).await;
        }
        Ok(command.info())
    }

    pub(super) async fn command_input_call(
        &self,
        scope: Scope,
        id: String,
        which: CommandRef,
        data: Vec<u8>,
        close: bool,
    ) -> Result<(), SandboxError> {
        validate_command::input(&data)?;
        let (_timer, command) = self.command(Call::CommandInput, scope, id, &which)?;
        command.write_input(&data, close).await
    }

    pub(super) async fn command_signal_call(
        &self,
        scope: Scope,
        id: String,
        which: CommandRef,
        signal: i32,
    ) -> Result<(), SandboxError> {
        validate_command::signal(signal)?;
        let (_timer, command) = self.command(Call::CommandSignal, scope, id, &which)?;
        if !command.is_live() {
            return Err(SandboxError::FailedPrecondition(format!(
                "command {} has ended already: nothing to signal",
                command.started.id
            )));
        }
        tracing::info!(command = %command.started.id, signal, "command signalled");
        command.control.signal(signal).await
    }

    pub(super) async fn command_resize_call(
        &self,
        scope: Scope,
        id: String,
        which: CommandRef,
        rows: u16,
        cols: u16,
    ) -> Result<(), SandboxError> {
        if rows == 0 || cols == 0 {
            return Err(SandboxError::InvalidArgument(format!(
                "pty of {rows} rows and {cols} columns: both must be at least 1"
            )));
        }
        let (_timer, command) = self.command(Call::CommandResize, scope, id, &which)?;
        if !command.is_live() {
            return Ok(());
        }
        command.control.resize(PtySize { rows, cols }).await
    }

    pub(super) async fn commands_call(
        &self,
        scope: Scope,
        id: String,
    ) -> Result<Vec<CommandInfo>, SandboxError> {
        let _timer = self.authorize(Call::Commands)?;
        let key = super::service::key(scope, super::service::id_field(scope), id)?;
        Ok(self.daemon.commands.list(&key))
    }
}
