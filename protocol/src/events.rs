//! The event stream: what happened to sandboxes, in order, without polling.
//!
//! The daemon keeps the latest events in a bounded ring in memory. A caller
//! long-polls `events(since, max, wait)` and gets the events after its
//! cursor and the cursor to pass next. A cursor names the daemon boot it
//! came from: one from before a restart, or older than the ring, gets
//! [`EventsReply::Expired`] — relist and start again, as Kubernetes' 410
//! Gone — never a silent gap.

use std::fmt;

use serde::{Deserialize, Serialize};

use crate::{ExitInfo, Scope};

/// The most events one `events` call returns.
pub const MAX_EVENTS_PER_CALL: u32 = 1000;
/// The longest one `events` call waits for an event (milliseconds).
pub const MAX_EVENTS_WAIT_MS: u32 = 60_000;

/// A position in the stream: the daemon boot it belongs to and the
/// sequence number of the event it points after. Written `BOOT-SEQ`.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct EventCursor {
    /// The daemon's boot id (random at each start).
    pub boot_id: String,
    /// The sequence number of the last event seen (0: none yet).
    pub seq: u64,
}

impl fmt::Display for EventCursor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}-{}", self.boot_id, self.seq)
    }
}

impl std::str::FromStr for EventCursor {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        let bad = || {
            format!("'{text}' is not an event cursor (BOOT-SEQ, as printed by `sandboxctl events`)")
        };
        let (boot_id, seq) = text.rsplit_once('-').ok_or_else(bad)?;
        let seq = seq.parse().map_err(|_| bad())?;
        if boot_id.is_empty() || !boot_id.bytes().all(|byte| byte.is_ascii_hexdigit()) {
            return Err(bad());
        }
        Ok(EventCursor {
            boot_id: boot_id.to_string(),
            seq,
        })
    }
}

/// What happened. New kinds go at the end.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum EventKind {
    /// A new incarnation was made (a new uid).
    Created,
    /// A runner started (every start, the first included).
    Started,
    /// A runner ended; the event carries its [`ExitInfo`] with the reason.
    Exited,
    /// The sandbox was torn down.
    Deprovisioned,
    /// Found again at daemon start (a container tier's container).
    Adopted,
    /// Its token or queue was refreshed.
    Changed,
    /// Its runner was paused (frozen); added in protocol 8.
    Paused,
    /// Its paused runner was resumed; added in protocol 8.
    Resumed,
    /// A command started in it (`exec`); added in protocol 10.
    #[serde(rename = "command-started")]
    CommandStarted,
    /// A command in it ended; the event carries its proof's outcome as
    /// `exit`. Added in protocol 10.
    #[serde(rename = "command-exited")]
    CommandExited,
}

impl EventKind {
    pub fn as_str(self) -> &'static str {
        match self {
            EventKind::Created => "created",
            EventKind::Started => "started",
            EventKind::Exited => "exited",
            EventKind::Deprovisioned => "deprovisioned",
            EventKind::Adopted => "adopted",
            EventKind::Changed => "changed",
            EventKind::Paused => "paused",
            EventKind::Resumed => "resumed",
            EventKind::CommandStarted => "command-started",
            EventKind::CommandExited => "command-exited",
        }
    }
}

impl fmt::Display for EventKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One event.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Event {
    /// Its place in the stream; pass it as `since` to get what follows.
    pub cursor: EventCursor,
    /// When it happened, in milliseconds since the Unix epoch.
    pub at_unix_ms: u64,
    pub kind: EventKind,
    pub scope: Scope,
    pub id: String,
    /// The base name (`sbx-<code>-<hex12>`).
    pub name: String,
    /// The incarnation's uid (empty when the tier could not tell).
    pub uid: String,
    pub generation: u64,
    /// How the runner ended, for `exited` (and `deprovisioned` when a
    /// runner was stopped).
    pub exit: Option<ExitInfo>,
    /// The command, for `command-started` and `command-exited`. Added in
    /// protocol 10.
    #[serde(default)]
    pub command: Option<Box<EventCommand>>,
}

/// Which command an event is about.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct EventCommand {
    pub command_id: String,
    pub tag: Option<String>,
}

/// What an `events` call answers.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum EventsReply {
    /// The events after the cursor (possibly none, after the wait), and the
    /// cursor to pass next.
    Events {
        events: Vec<Event>,
        next: EventCursor,
    },
    /// The cursor is from another daemon boot, or older than the oldest
    /// event kept: events were missed. Relist, then follow from `now`.
    Expired { reason: String, now: EventCursor },
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_kind_is_named_in_json_as_its_as_str() {
        for kind in [
            EventKind::Created,
            EventKind::Started,
            EventKind::Exited,
            EventKind::Deprovisioned,
            EventKind::Adopted,
            EventKind::Changed,
            EventKind::Paused,
            EventKind::Resumed,
            EventKind::CommandStarted,
            EventKind::CommandExited,
        ] {
            let json = serde_json::to_string(&kind).unwrap();
            assert_eq!(json, format!("\"{}\"", kind.as_str()));
        }
    }
}
