//! The commands an earlier daemon started, followed again at start from
//! their records ([`super::record`]): each is watched through the engine
//! to its end as if this daemon had started it, with its signals and its
//! timeout, and settles with its proof. Its output up to now went with the
//! daemon that started it (the engine gives an exec's streams once); from
//! here on it has none to read either.

use std::sync::atomic::{AtomicBool, AtomicI32};
use std::sync::Arc;

use tokio::sync::watch;

use super::super::containers;
use super::super::observed::Lookup;
use super::super::Inner;
use super::record::CommandRecord;
use super::{control, end};
use crate::sandbox_key::SandboxKey;
use crate::started_command::{OutputReader, RecoveredCommand, StartedCommand};

impl Inner {
    /// Every command whose record an earlier daemon left, oldest first.
    pub(in super::super) async fn recovered_commands(self: &Arc<Self>) -> Vec<RecoveredCommand> {
        let mut found = Vec::new();
        for record in self.command_records.read_all() {
            found.push(self.recover(record).await);
        }
        found
    }

    async fn recover(self: &Arc<Self>, record: CommandRecord) -> RecoveredCommand {
        let key = SandboxKey::new(record.scope, record.sandbox_id.clone());
        // The init's pid tells a host that shows the container's processes
        // from one that does not (see `control::Host`).
        let init_pid = match containers::inspect(&self.engine, &key).await {
            Ok(Lookup::Ours(observed)) if observed.id == record.container => observed.pid,
            _ => None,
        };
        let exited = Arc::new(AtomicBool::new(false));
        let sent = Arc::new(AtomicI32::new(0));
        // No stream to wait for: the end is read from the exec at once.
        let (_, done) = watch::channel(true);
        let watch = end::EndWatch {
            inner: Arc::downgrade(self),
            key: key.clone(),
            container: record.container.clone(),
            exec_id: record.exec_id.clone(),
            done,
            known_code: None,
            sent: sent.clone(),
            exited: exited.clone(),
            stop: self.commands_stop.subscribe(),
            record: Some((self.command_records.clone(), record.id.clone())),
        };
        let nothing = || Box::pin(tokio::io::empty()) as OutputReader;
        let command = StartedCommand {
            pid: record.pid,
            uid: record.uid.clone(),
            generation: record.generation,
            stdout: nothing(),
            stderr: (!record.pty).then(nothing),
            stdin: None,
            control: Box::new(control::ExecControl {
                engine: self.engine.clone(),
                exec_id: record.exec_id.clone(),
                pid: record.pid,
                host: control::Host::find(record.pid, init_pid, &record.container),
                tty: record.pty,
                exited,
                sent,
            }),
            end: Box::pin(watch.wait()),
        };
        tracing::info!(scope = %key.scope, id = %key.shown_id(), command = %record.id, exec = %record.exec_id, "found a command an earlier daemon started");
        RecoveredCommand {
            id: record.id,
            key,
            tag: record.tag,
            argv: record.argv,
            pty: record.pty,
            started_at_unix_ms: record.started_at_unix_ms,
            timeout_ms: record.timeout_ms,
            command,
        }
    }
}
