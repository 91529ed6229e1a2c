//! Commands in sandboxes, above every tier: the one store of their output
//! and proofs, found by sandbox and by id or tag.
//!
//! A tier starts a command (see [`crate::started_command`]); from there
//! the command is the table's: a task per command pumps its output into
//! two bounded stores ([`output`]), waits for its end, kills it at its
//! timeout and settles it with its proof exactly once ([`settle`]), and
//! the event stream carries its start and its end. A caller may leave and
//! come back by id or tag; the command and its output live on without it.
//! The proofs of ended commands are kept (the latest
//! `[commands] kept_ended` per sandbox) until the sandbox is
//! deprovisioned.

mod command;
mod forget;
pub mod output;
mod settle;

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use sandboxd_protocol::{
    CommandInfo, CommandProof, CommandRef, EventCommand, EventKind, ExecRequest, ExecStarted,
    ExitInfo, ExitReason, SandboxError,
};

use crate::config::CommandsConfig;
use crate::events::EventHub;
use crate::sandbox_key::SandboxKey;
use crate::started_command::{RecoveredCommand, StartedCommand};
use crate::unix_time::now_unix_ms;
pub use command::Command;

pub struct CommandTable {
    /// The store's bounds (`[commands]`).
    settings: CommandsConfig,
    events: Arc<EventHub>,
    sandboxes: Mutex<HashMap<SandboxKey, SandboxCommands>>,
}

/// One sandbox's commands, oldest first, and the tags taken.
#[derive(Default)]
struct SandboxCommands {
    commands: VecDeque<Arc<Command>>,
    /// Tags of live commands, and of starts under way.
    live_tags: HashMap<String, Option<String>>,
}

/// How a command came to the table.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Arrival {
    /// Started now, by an `exec`.
    Started,
    /// Started by an earlier daemon, `already` ago.
    Recovered { already: Duration },
}

/// A tag held while a start is under way; given back if it fails.
pub struct TagClaim {
    /// The id the command will have (128 random bits, never reused).
    id: String,
    table: Arc<CommandTable>,
    key: SandboxKey,
    tag: Option<String>,
    kept: bool,
}

impl TagClaim {
    pub fn id(&self) -> &str {
        &self.id
    }
}

impl Drop for TagClaim {
    fn drop(&mut self) {
        if let (Some(tag), false) = (&self.tag, self.kept) {
            if let Some(sandbox) = self.table.sandboxes().get_mut(&self.key) {
                sandbox.live_tags.remove(tag);
            }
        }
    }
}

impl CommandTable {
    /// The table, and its follower of `events` that lets a sandbox's
    /// commands go when it is deprovisioned (see [`forget`]). Call within
    /// the runtime.
    pub fn new(settings: CommandsConfig, events: Arc<EventHub>) -> Arc<CommandTable> {
        let table = Arc::new(CommandTable {
            settings,
            events: events.clone(),
            sandboxes: Mutex::new(HashMap::new()),
        });
        tokio::spawn(forget::on_deprovision(Arc::downgrade(&table), events));
        table
    }

    fn sandboxes(&self) -> MutexGuard<'_, HashMap<SandboxKey, SandboxCommands>> {
        self.sandboxes
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// Holds `tag` for a start, refused when a live command has it.
    pub fn claim_tag(
        self: &Arc<Self>,
        key: &SandboxKey,
        tag: Option<&str>,
    ) -> Result<TagClaim, SandboxError> {
        if let Some(tag) = tag {
            let mut sandboxes = self.sandboxes();
            let sandbox = sandboxes.entry(key.clone()).or_default();
            if let Some(holder) = sandbox.live_tags.get(tag) {
                let by = holder
                    .as_deref()
                    .map_or("a start under way".to_string(), |id| {
                        format!("command {id}")
                    });
                return Err(SandboxError::FailedPrecondition(format!(
                    "tag '{tag}' is in use in {} by {by}: a tag names one live command (a retry of the same start finds it by its tag)",
                    key.what()
                )));
            }
            sandbox.live_tags.insert(tag.to_string(), None);
        }
        Ok(TagClaim {
            id: format!("{:032x}", rand::random::<u128>()),
            table: self.clone(),
            key: key.clone(),
            tag: tag.map(str::to_string),
            kept: false,
        })
    }

    /// Takes a command `claim`'s tier has started into the table, starts
    /// its life, and announces it.
    pub fn adopt(
        self: &Arc<Self>,
        mut claim: TagClaim,
        request: &ExecRequest,
        started: StartedCommand,
    ) -> ExecStarted {
        let reply = ExecStarted {
            command_id: claim.id.clone(),
            pid: started.pid,
            uid: started.uid.clone(),
            generation: started.generation,
        };
        let about = command::Started {
            id: claim.id.clone(),
            key: claim.key.clone(),
            tag: request.tag.clone(),
            argv: request.argv.clone(),
            pid: started.pid,
            uid: started.uid.clone(),
            generation: started.generation,
            started_at_unix_ms: now_unix_ms(),
            pty: request.pty.is_some(),
        };
        claim.kept = true;
        let timeout = request.timeout_ms.map(Duration::from_millis);
        self.take(about, started, timeout, Arrival::Started);
        reply
    }

    /// Takes in the commands an earlier daemon started that the tier
    /// follows again: each goes on to its proof (its timeout counted from
    /// its start), without the output it wrote before now. Their
    /// `command-started` events were the earlier daemon's, so none is sent.
    pub fn readopt(self: &Arc<Self>, recovered: Vec<RecoveredCommand>) {
        for found in recovered {
            let about = command::Started {
                id: found.id,
                key: found.key,
                tag: found.tag,
                argv: found.argv,
                pid: found.command.pid,
                uid: found.command.uid.clone(),
                generation: found.command.generation,
                started_at_unix_ms: found.started_at_unix_ms,
                pty: found.pty,
            };
            let already =
                Duration::from_millis(now_unix_ms().saturating_sub(about.started_at_unix_ms));
            tracing::info!(scope = %about.key.scope, id = %about.key.shown_id(), command = %about.id, pid = about.pid, "following a command an earlier daemon started (its output until now is not kept)");
            let timeout = found.timeout_ms.map(Duration::from_millis);
            self.take(
                about,
                found.command,
                timeout,
                Arrival::Recovered { already },
            );
        }
    }

    /// Puts a started command in its sandbox's list and spawns its life.
    fn take(
        self: &Arc<Self>,
        about: command::Started,
        started: StartedCommand,
        timeout: Option<Duration>,
        arrival: Arrival,
    ) {
        let StartedCommand {
            stdout,
            stderr,
            stdin,
            control,
            end,
            ..
        } = started;
        let already = match arrival {
            Arrival::Started => Duration::ZERO,
            Arrival::Recovered { already } => already,
        };
        let (key, tag) = (about.key.clone(), about.tag.clone());
        let command = Arc::new(Command::new(
            about,
            self.settings.output_bytes as usize,
            stdin,
            control,
        ));
        {
            let mut sandboxes = self.sandboxes();
            let sandbox = sandboxes.entry(key.clone()).or_default();
            if let Some(tag) = tag {
                sandbox
                    .live_tags
                    .insert(tag, Some(command.started.id.clone()));
            }
            sandbox.commands.push_back(command.clone());
        }
        if arrival == Arrival::Started {
            self.announce(&command, EventKind::CommandStarted, None);
            let started = &command.started;
            tracing::info!(scope = %key.scope, id = %key.shown_id(), command = %started.id, pid = started.pid, tag = ?started.tag, "command started");
        }
        let life = settle::Life {
            stdout,
            stderr,
            end,
            timeout,
            already,
        };
        let table = self.clone();
        tokio::spawn(async move {
            let proof = settle::run(command.clone(), life).await;
            table.settled_one(&command, &proof);
        });
    }

    /// Announces `command`'s end and lets its tag go.
    fn settled_one(&self, command: &Command, proof: &CommandProof) {
        let exit = ExitInfo {
            code: proof.exit_code,
            signal: proof.signal,
            at_unix_ms: proof.ended_at_unix_ms,
            oom_killed: matches!(proof.reason, ExitReason::OutOfMemory { .. }),
            oom_limit_bytes: None,
            pids_refused: 0,
            pids_limit: None,
            disk_limit_bytes: None,
            reason: proof.reason,
        };
        tracing::info!(command = %command.started.id, reason = %proof.reason, "command ended");
        self.announce(command, EventKind::CommandExited, Some(exit));
        self.ended(command);
    }

    fn announce(&self, command: &Command, kind: EventKind, exit: Option<ExitInfo>) {
        let started = &command.started;
        self.events.emit_command(
            kind,
            &started.key,
            &started.uid,
            started.generation,
            EventCommand {
                command_id: started.id.clone(),
                tag: started.tag.clone(),
            },
            exit,
        );
    }

    /// Its tag is free again; the oldest ended commands beyond the bound go.
    fn ended(&self, command: &Command) {
        let mut sandboxes = self.sandboxes();
        let Some(sandbox) = sandboxes.get_mut(&command.started.key) else {
            return;
        };
        if let Some(tag) = &command.started.tag {
            if sandbox.live_tags.get(tag).and_then(Option::as_deref) == Some(&command.started.id) {
                sandbox.live_tags.remove(tag);
            }
        }
        let mut ended = sandbox.commands.iter().filter(|c| !c.is_live()).count();
        while ended > self.settings.kept_ended {
            match sandbox.commands.iter().position(|c| !c.is_live()) {
                Some(oldest) => {
                    sandbox.commands.remove(oldest);
                    ended -= 1;
                }
                None => break,
            }
        }
    }

    /// Waits, at most `bound`, until every command has its proof: after
    /// the tiers' shutdown, so the proofs of the commands it ended
    /// (`daemon-stopped`, `sandbox-ended`) are logged before the daemon
    /// exits.
    pub async fn settled(&self, bound: Duration) {
        let live: Vec<Arc<Command>> = self
            .sandboxes()
            .values()
            .flat_map(|sandbox| sandbox.commands.iter())
            .filter(|command| command.is_live())
            .cloned()
            .collect();
        let deadline = tokio::time::Instant::now() + bound;
        for command in live {
            let left = deadline.saturating_duration_since(tokio::time::Instant::now());
            command.wait_settled(left).await;
        }
    }

    /// The command `which` names in `key`'s sandbox: by id, or by tag (the
    /// live one, else the latest that had it).
    pub fn find(&self, key: &SandboxKey, which: &CommandRef) -> Result<Arc<Command>, SandboxError> {
        let sandboxes = self.sandboxes();
        let found = sandboxes.get(key).and_then(|sandbox| {
            sandbox
                .commands
                .iter()
                .rev()
                .find(|command| match which {
                    CommandRef::Id(id) => &command.started.id == id,
                    CommandRef::Tag(tag) => command.started.tag.as_deref() == Some(tag),
                })
                .cloned()
        });
        found.ok_or_else(|| {
            SandboxError::NotFound(format!(
                "{which} in {}: no such command (it never ran there, or its sandbox was deprovisioned, or it ended long enough ago that its proof was let go)",
                key.what()
            ))
        })
    }

    /// `key`'s commands, oldest first.
    pub fn list(&self, key: &SandboxKey) -> Vec<CommandInfo> {
        self.sandboxes()
            .get(key)
            .map(|sandbox| {
                sandbox
                    .commands
                    .iter()
                    .map(|command| command.info())
                    .collect()
            })
            .unwrap_or_default()
    }

    /// `key`'s incarnation `uid` was deprovisioned: its commands and
    /// proofs go (a caller waiting on one still gets its proof); a newer
    /// incarnation's stay.
    pub fn forget_incarnation(&self, key: &SandboxKey, uid: &str) {
        let mut sandboxes = self.sandboxes();
        let Some(sandbox) = sandboxes.get_mut(key) else {
            return;
        };
        let gone: Vec<Arc<Command>> = sandbox
            .commands
            .iter()
            .filter(|command| command.started.uid == uid)
            .cloned()
            .collect();
        sandbox
            .commands
            .retain(|command| command.started.uid != uid);
        if sandbox.commands.is_empty() && sandbox.live_tags.is_empty() {
            sandboxes.remove(key);
        }
        drop(sandboxes);
        drop(gone);
    }
}
