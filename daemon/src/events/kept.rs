//! One event as the ring keeps it: the facts of a [`Event`], without its
//! cursor's boot id (the hub's own) and with the rarely present exit
//! boxed. The ring holds thousands of them for the daemon's life, so each
//! is about a third of an `Event`'s size (88 bytes against 232, plus its
//! strings), and the full `Event` is built only for a reader.

use sandboxd_protocol::{Event, EventCommand, EventCursor, EventKind, ExitInfo, Scope};

use crate::sandbox_key::SandboxKey;

pub struct Kept {
    pub seq: u64,
    at_unix_ms: u64,
    generation: u64,
    kind: EventKind,
    scope: Scope,
    id: Box<str>,
    name: Box<str>,
    uid: Box<str>,
    exit: Option<Box<ExitInfo>>,
    /// Set for a command's events.
    pub command: Option<Box<EventCommand>>,
}

impl Kept {
    /// What happened to `key`'s sandbox at `at_unix_ms`; its place in the
    /// stream (`seq`) is the hub's to set.
    pub fn new(
        at_unix_ms: u64,
        kind: EventKind,
        key: &SandboxKey,
        uid: &str,
        generation: u64,
        exit: Option<ExitInfo>,
    ) -> Kept {
        Kept {
            seq: 0,
            at_unix_ms,
            generation,
            kind,
            scope: key.scope,
            id: key.id.as_str().into(),
            name: key.base_name.as_str().into(),
            uid: uid.into(),
            exit: exit.map(Box::new),
            command: None,
        }
    }

    /// The event as the protocol gives it, its cursor in `boot_id`'s stream.
    pub fn to_event(&self, boot_id: &str) -> Event {
        Event {
            cursor: EventCursor {
                boot_id: boot_id.to_string(),
                seq: self.seq,
            },
            at_unix_ms: self.at_unix_ms,
            kind: self.kind,
            scope: self.scope,
            id: self.id.to_string(),
            name: self.name.to_string(),
            uid: self.uid.to_string(),
            generation: self.generation,
            exit: self.exit.as_deref().copied(),
            command: self.command.clone(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_event_comes_back_as_it_was_emitted() {
        let exit = ExitInfo::from_facts(Some(3), None, 5, false);
        let key = SandboxKey::new(Scope::Workflow, "w-1");
        let mut kept = Kept::new(11, EventKind::Exited, &key, "u-1", 2, Some(exit));
        kept.seq = 7;
        let event = kept.to_event("boot");
        assert_eq!(
            event,
            Event {
                cursor: EventCursor {
                    boot_id: "boot".into(),
                    seq: 7
                },
                at_unix_ms: 11,
                kind: EventKind::Exited,
                scope: Scope::Workflow,
                id: "w-1".into(),
                name: key.base_name.clone(),
                uid: "u-1".into(),
                generation: 2,
                exit: Some(exit),
                command: None,
            }
        );
        // What makes a ring of thousands small.
        assert!(std::mem::size_of::<Kept>() <= 96);
    }
}
