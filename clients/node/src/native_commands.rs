//! Commands in a sandbox (protocol 10): the client library's raw calls
//! (`exec`, `command_output`, `command_wait`, `command_input`,
//! `command_signal`, `command_resize`, `commands`) as promises. The
//! following, buffering and decoding are JavaScript's (`lib/commands.js`);
//! this side only converts values.
//!
//! Reports cross as JSON in their serde shape (snake_case), as the other
//! calls' do. Output and input bytes cross as Node `Buffer`s: they are not
//! necessarily UTF-8, and a Buffer is one copy where base64 would be two
//! and a third larger. A proof gains three derived fields so JavaScript
//! need not restate the protocol's rules: `outcome` (the reason's short
//! name), `shell_code` (`CommandProof::shell_code`) and `description` (the
//! reason as the daemon's log writes it, `timed-out (after 300 ms)`).

use std::time::Duration;

use napi::bindgen_prelude::Buffer;
use napi_derive::napi;
use sandboxd_client::{CommandInfo, CommandProof, CommandRef, ExecRequest, OutputStream};

use crate::error::{invalid_argument, to_napi};
use crate::native_client::{json, scope_of, NativeClient};

/// Which command a call is about: `{ commandId }` or `{ tag }`, exactly one.
#[napi(object)]
pub struct CommandTarget {
    pub command_id: Option<String>,
    pub tag: Option<String>,
}

/// A piece of one output stream (`CommandOutput`), its bytes as a Buffer.
/// Offsets cross as numbers: exact up to 2^53 bytes, far beyond any
/// stream's life.
#[napi(object)]
pub struct OutputChunk {
    pub data: Buffer,
    /// The stream offset of `data`'s first byte.
    pub start: i64,
    /// Where the next read continues.
    pub next: i64,
    /// Bytes lost between the offset asked for and `start`.
    pub dropped: i64,
    /// Set once the command has ended and `data` reaches its last byte.
    pub proof: Option<serde_json::Value>,
}

fn command_ref(target: CommandTarget) -> napi::Result<CommandRef> {
    match (target.command_id, target.tag) {
        (Some(id), None) => Ok(CommandRef::Id(id)),
        (None, Some(tag)) => Ok(CommandRef::Tag(tag)),
        (Some(_), Some(_)) => Err(invalid_argument(
            "command: give commandId or tag, not both".to_string(),
        )),
        (None, None) => Err(invalid_argument(
            "command: give its commandId or its tag".to_string(),
        )),
    }
}

fn stream_of(stream: &str) -> napi::Result<OutputStream> {
    match stream {
        "stdout" => Ok(OutputStream::Stdout),
        "stderr" => Ok(OutputStream::Stderr),
        other => Err(invalid_argument(format!(
            "stream must be stdout or stderr, not {other:?}"
        ))),
    }
}

pub(crate) fn offset_of(offset: i64) -> napi::Result<u64> {
    u64::try_from(offset)
        .map_err(|_| invalid_argument(format!("offset must be 0 or more, not {offset}")))
}

fn terminal_side(what: &str, value: u32) -> napi::Result<u16> {
    u16::try_from(value)
        .map_err(|_| invalid_argument(format!("{what} must be at most {}, not {value}", u16::MAX)))
}

/// A count as a JavaScript number (saturating; never reached in practice).
pub(crate) fn number(value: u64) -> i64 {
    i64::try_from(value).unwrap_or(i64::MAX)
}

/// A proof in its serde shape plus `outcome`, `shell_code` and `description`.
fn proof_json(proof: &CommandProof) -> napi::Result<serde_json::Value> {
    let mut value = json(proof)?;
    value["outcome"] = proof.outcome().into();
    value["shell_code"] = proof.shell_code().into();
    value["description"] = proof.reason.to_string().into();
    Ok(value)
}

fn info_json(info: &CommandInfo) -> napi::Result<serde_json::Value> {
    let mut value = json(info)?;
    if let Some(proof) = &info.proof {
        value["proof"] = proof_json(proof)?;
    }
    Ok(value)
}

#[napi]
impl NativeClient {
    /// Starts a command in a running sandbox; `request` is an `ExecRequest`
    /// in its serde shape. Resolves to `ExecStarted` at once. Never re-sent
    /// after a lost call (retry with the same tag instead).
    #[napi]
    pub async fn exec(
        &self,
        scope: String,
        id: String,
        request: serde_json::Value,
    ) -> napi::Result<serde_json::Value> {
        let scope = scope_of(&scope)?;
        let request: ExecRequest = serde_json::from_value(request)
            .map_err(|error| invalid_argument(format!("exec request: {error}")))?;
        let started = self.client.exec(scope, &id, &request).await;
        json(&started.map_err(to_napi)?)
    }

    /// At most `max_bytes` of one stream from `offset`, waiting up to
    /// `wait_ms` for bytes or the command's end.
    #[napi]
    #[allow(clippy::too_many_arguments)] // the call's own fields, spelled out
    pub async fn command_output(
        &self,
        scope: String,
        id: String,
        command: CommandTarget,
        stream: String,
        offset: i64,
        max_bytes: u32,
        wait_ms: u32,
    ) -> napi::Result<OutputChunk> {
        let scope = scope_of(&scope)?;
        let command = command_ref(command)?;
        let (stream, offset) = (stream_of(&stream)?, offset_of(offset)?);
        let wait = Duration::from_millis(u64::from(wait_ms));
        let output = self
            .client
            .command_output(scope, &id, &command, stream, offset, max_bytes, wait)
            .await
            .map_err(to_napi)?;
        Ok(OutputChunk {
            start: number(output.start),
            next: number(output.next),
            dropped: number(output.dropped),
            proof: output.proof.as_ref().map(proof_json).transpose()?,
            data: output.data.into(),
        })
    }

    /// The command (`CommandInfo`) once it has ended or `wait_ms` passed;
    /// its `proof` is set when it has ended.
    #[napi]
    pub async fn command_wait(
        &self,
        scope: String,
        id: String,
        command: CommandTarget,
        wait_ms: u32,
    ) -> napi::Result<serde_json::Value> {
        let scope = scope_of(&scope)?;
        let command = command_ref(command)?;
        let wait = Duration::from_millis(u64::from(wait_ms));
        let info = self.client.command_wait(scope, &id, &command, wait).await;
        info_json(&info.map_err(to_napi)?)
    }

    /// Writes `data` to the command's stdin, then closes it when `close`.
    /// `data` must be a Buffer no JavaScript code writes to while the call
    /// runs (`lib/commands.js` passes a private copy): the bytes are read
    /// on the runtime's thread.
    #[napi]
    pub async fn command_input(
        &self,
        scope: String,
        id: String,
        command: CommandTarget,
        data: Buffer,
        close: bool,
    ) -> napi::Result<()> {
        let scope = scope_of(&scope)?;
        let command = command_ref(command)?;
        self.client
            .command_input(scope, &id, &command, &data, close)
            .await
            .map_err(to_napi)
    }

    /// Sends signal number `signal` to the command's process group.
    #[napi]
    pub async fn command_signal(
        &self,
        scope: String,
        id: String,
        command: CommandTarget,
        signal: i32,
    ) -> napi::Result<()> {
        let scope = scope_of(&scope)?;
        let command = command_ref(command)?;
        self.client
            .command_signal(scope, &id, &command, signal)
            .await
            .map_err(to_napi)
    }

    /// Resizes the command's terminal.
    #[napi]
    pub async fn command_resize(
        &self,
        scope: String,
        id: String,
        command: CommandTarget,
        rows: u32,
        cols: u32,
    ) -> napi::Result<()> {
        let scope = scope_of(&scope)?;
        let command = command_ref(command)?;
        let (rows, cols) = (terminal_side("rows", rows)?, terminal_side("cols", cols)?);
        self.client
            .command_resize(scope, &id, &command, rows, cols)
            .await
            .map_err(to_napi)
    }

    /// The sandbox's commands (`CommandInfo`s): live ones and the proofs
    /// still kept, oldest first.
    #[napi]
    pub async fn commands(&self, scope: String, id: String) -> napi::Result<serde_json::Value> {
        let scope = scope_of(&scope)?;
        let list = self.client.commands(scope, &id).await.map_err(to_napi)?;
        let list = list
            .iter()
            .map(info_json)
            .collect::<napi::Result<Vec<_>>>()?;
        Ok(serde_json::Value::Array(list))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use sandboxd_client::{ExitReason, StreamFigures};

    #[test]
    fn a_proof_carries_its_outcome_shell_code_and_description() {
        let proof = CommandProof {
            reason: ExitReason::TimedOut { limit_ms: 300 },
            exit_code: None,
            signal: Some(9),
            started_at_unix_ms: 1,
            ended_at_unix_ms: 2,
            stdout: StreamFigures::default(),
            stderr: StreamFigures::default(),
        };
        let value = proof_json(&proof).unwrap();
        assert_eq!(value["outcome"], "timed-out");
        assert_eq!(value["shell_code"], 124);
        assert_eq!(value["description"], "timed-out (after 300 ms)");
        assert_eq!(value["reason"]["timed-out"]["limit_ms"], 300);
    }

    #[test]
    fn a_command_is_named_by_exactly_one_of_id_and_tag() {
        let both = CommandTarget {
            command_id: Some("a".into()),
            tag: Some("b".into()),
        };
        assert!(command_ref(both).is_err());
        let none = CommandTarget {
            command_id: None,
            tag: None,
        };
        assert!(command_ref(none).is_err());
        let tag = CommandTarget {
            command_id: None,
            tag: Some("build".into()),
        };
        assert_eq!(command_ref(tag).unwrap(), CommandRef::Tag("build".into()));
        assert!(stream_of("stdin").is_err());
        assert!(offset_of(-1).is_err());
        assert!(terminal_side("rows", 70_000).is_err());
    }
}
