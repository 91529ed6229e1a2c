//! `sandboxctl events`: the daemon's event stream, one line per event as
//! `docker events` prints them, or one JSON object per line.
//!
//! Without `--follow` it reads until the daemon has nothing newer and
//! exits; with it, it long-polls (the daemon answers as soon as an event
//! comes). An expired cursor is an error without `--follow` (the caller
//! asked for a continuation that cannot be given); a follower says so on
//! stderr and goes on from the daemon's present.

use std::io::{self, Write};
use std::time::Duration;

use clap::Args;
use sandboxd_client::{
    ClientError, Event, EventCursor, EventsReply, SandboxError, SandboxdClient, Scope, Shown,
};
use sandboxd_protocol::validate;

use super::{Context, Run};
use crate::args::{any_scope, id_name};
use crate::failure::Failure;
use crate::time::rfc3339_utc;

/// How long one follow call waits for an event.
const FOLLOW_WAIT: Duration = Duration::from_secs(25);
const BATCH: u32 = 500;

/// Print what happened to sandboxes (created, started, exited with its
/// reason, deprovisioned, adopted, changed, paused, resumed), one line
/// per event, oldest first.
/// Exits at the newest event unless --follow.
#[derive(Debug, Args)]
pub struct EventsArgs {
    /// Only the events after this cursor (printed with --json) [default:
    /// from the oldest the daemon keeps]. A cursor from before a daemon
    /// restart, or older than the daemon keeps, is refused as expired.
    #[arg(long, value_name = "CURSOR")]
    pub since: Option<EventCursor>,
    /// Keep printing events as they happen, until interrupted.
    #[arg(long, short = 'f')]
    pub follow: bool,
    /// Only events of this scope.
    #[arg(long, value_name = "SCOPE", value_parser = any_scope())]
    pub scope: Option<Scope>,
    /// Only events of this sandbox id.
    #[arg(long, value_name = "ID")]
    pub id: Option<String>,
}

impl Run for EventsArgs {
    fn check(&self) -> Result<(), SandboxError> {
        match (self.scope, &self.id) {
            (Some(scope), Some(id)) => validate::sandbox_id(id_name(scope), id),
            (None, Some(id)) => validate::sandbox_id("--id", id),
            _ => Ok(()),
        }
    }

    /// Streams the events as they come rather than returning them.
    async fn run(self, context: &Context) -> Result<String, Failure> {
        print(&context.connect().await?, &self, context.json).await?;
        Ok(String::new())
    }
}

impl EventsArgs {
    /// True when `--scope` and `--id` let `event` through.
    fn admits(&self, event: &Event) -> bool {
        self.scope.is_none_or(|scope| scope == event.scope)
            && self.id.as_deref().is_none_or(|id| id == event.id)
    }
}

async fn print(client: &SandboxdClient, args: &EventsArgs, json: bool) -> Result<(), Failure> {
    let (mut since, follow) = (args.since.clone(), args.follow);
    let mut out = io::stdout().lock();
    loop {
        let wait = if follow { FOLLOW_WAIT } else { Duration::ZERO };
        match client.events(since.as_ref(), BATCH, wait).await? {
            EventsReply::Events { events, next } => {
                let done = events.is_empty() && !follow;
                for event in events.iter().filter(|event| args.admits(event)) {
                    let line = if json { json_line(event) } else { line(event) };
                    match writeln!(out, "{line}").and_then(|()| out.flush()) {
                        Ok(()) => {}
                        Err(error) if error.kind() == io::ErrorKind::BrokenPipe => return Ok(()),
                        Err(error) => {
                            return Err(Failure::Output(format!(
                                "cannot write the output: {error}"
                            )))
                        }
                    }
                }
                since = Some(next);
                if done {
                    return Ok(());
                }
            }
            EventsReply::Expired { reason, now } if follow => {
                eprintln!("sandboxctl: events missed ({reason}); following from {now}");
                since = Some(now);
            }
            EventsReply::Expired { reason, now } => {
                return Err(Failure::Call(ClientError::Sandbox(
                    SandboxError::FailedPrecondition(format!(
                        "expired: {reason}; the daemon's present cursor is {now}"
                    )),
                )))
            }
        }
    }
}

/// `2026-12-01T21:00:00.123Z session exited ses_1 (name=…, uid=…, generation=2, reason=exited, code=3)`;
/// a command's events add `command_id=…` and `tag=…` (when it has one).
fn line(event: &Event) -> String {
    let mut attributes = vec![
        format!("name={}", event.name),
        format!("uid={}", event.uid),
        format!("generation={}", event.generation),
    ];
    if let Some(command) = &event.command {
        attributes.push(format!("command_id={}", Shown(&command.command_id)));
        if let Some(tag) = &command.tag {
            attributes.push(format!("tag={}", Shown(tag)));
        }
    }
    if let Some(exit) = &event.exit {
        attributes.push(format!("reason={}", exit.reason.as_str()));
        if let Some(code) = exit.code {
            attributes.push(format!("code={code}"));
        }
        if let Some(signal) = exit.signal {
            attributes.push(format!("signal={signal}"));
        }
    }
    format!(
        "{} {} {} {} ({})",
        rfc3339_utc(event.at_unix_ms),
        event.scope,
        event.kind,
        Shown(&event.id),
        attributes.join(", ")
    )
}

/// One JSON object: cursor, time, kind, scope, id, name, uid, generation,
/// for a command's event `command_id` and `tag`, and for an exit (a
/// runner's or a command's) `exit` with code, signal and reason.
fn json_line(event: &Event) -> String {
    let exit = event.exit.as_ref().map(|exit| {
        serde_json::json!({
            "code": exit.code,
            "signal": exit.signal,
            "reason": exit.reason.as_str(),
            "detail": exit.reason.to_string(),
            "at_unix_ms": exit.at_unix_ms,
        })
    });
    let mut object = serde_json::json!({
        "cursor": event.cursor.to_string(),
        "time": rfc3339_utc(event.at_unix_ms),
        "at_unix_ms": event.at_unix_ms,
        "kind": event.kind.as_str(),
        "scope": event.scope,
        "id": event.id,
        "name": event.name,
        "uid": event.uid,
        "generation": event.generation,
    });
    if let Some(command) = &event.command {
        object["command_id"] = command.command_id.clone().into();
        object["tag"] = command.tag.clone().into();
    }
    if let Some(exit) = exit {
        object["exit"] = exit;
    }
    object.to_string()
}
