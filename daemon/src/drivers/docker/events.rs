//! Runner exits, learnt from the engine's event stream rather than by polling.
//!
//! One task follows `/events` for our containers' `die` and `oom` events,
//! logs each exit, and keeps the last one per sandbox: describe falls back
//! to it when the container itself is gone (removed from outside), when
//! the engine no longer has the facts. The same task is the driver's
//! reconnect loop: when the stream breaks, the engine is marked down and
//! the task keeps trying until it answers again, then resubscribes from
//! where it left off so nothing that died meanwhile goes unrecorded.
//! Each new exit is also announced on the daemon's event stream, with its
//! reason: `out-of-memory` after an `oom` event, `deprovisioned` for a
//! container the daemon itself was stopping, else the exit code's.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::SystemTime;

use bollard::models::EventMessage;
use bollard::query_parameters::EventsOptionsBuilder;
use futures::StreamExt;
use sandboxd_protocol::naming::{
    LABEL_MANAGED_BY, LABEL_SANDBOX_ID, LABEL_SCOPE, MANAGED_BY_VALUE,
};
use sandboxd_protocol::{EventKind, ExitInfo, ExitReason};

use super::engine::Engine;
use super::observed::exit_info;
use super::spec::{LABEL_GENERATION, LABEL_UID};
use crate::events::EventHub;
use crate::sandbox_key::SandboxKey;

/// An exit the engine reported.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RecordedExit {
    pub exit: ExitInfo,
    pub oom_killed: bool,
    /// The event's time in ns, to drop a replayed duplicate after a resubscribe.
    time_nano: i64,
}

/// The last exit of each sandbox, by base name.
#[derive(Default)]
pub struct Exits {
    table: Mutex<HashMap<String, RecordedExit>>,
    /// Containers whose `oom` event came and whose `die` has not yet.
    oom_pending: Mutex<HashSet<String>>,
    /// Containers the daemon is stopping, until their `die`, and why (a
    /// deprovision, or a `[lifecycle]` limit).
    stopping: Mutex<HashMap<String, ExitReason>>,
}

/// A new exit, to announce: whose, which incarnation, and how it ended.
pub struct NewExit {
    pub key: SandboxKey,
    pub uid: String,
    pub generation: u64,
    pub exit: ExitInfo,
}

impl Exits {
    fn table(&self) -> MutexGuard<'_, HashMap<String, RecordedExit>> {
        self.table
            .lock()
            .unwrap_or_else(|poison| poison.into_inner())
    }

    pub fn last(&self, key: &SandboxKey) -> Option<RecordedExit> {
        self.table().get(&key.base_name).copied()
    }

    /// Notes that the daemon is about to stop `container` (a deprovision).
    pub fn stopping(&self, container: &str) {
        self.stopping_for(container, ExitReason::Deprovisioned);
    }

    /// Notes that the daemon is about to stop `container` for `reason`:
    /// its `die` is announced with it.
    pub fn stopping_for(&self, container: &str, reason: ExitReason) {
        self.stopping
            .lock()
            .unwrap_or_else(|poison| poison.into_inner())
            .insert(container.to_string(), reason);
    }

    pub fn forget(&self, key: &SandboxKey) {
        self.table().remove(&key.base_name);
    }

    /// Takes `container`'s `oom` event that no `die` has followed: a
    /// command in it was the OOM killer's pick and its runner lives on, so
    /// the runner's next exit must not read as out of memory.
    pub fn take_oom(&self, container: &str) -> bool {
        self.oom_pending
            .lock()
            .unwrap_or_else(|poison| poison.into_inner())
            .remove(container)
    }

    /// Takes in one event; the exit, when it was a new one.
    fn record(&self, event: &EventMessage) -> Option<NewExit> {
        let actor = event.actor.as_ref()?;
        let attributes = actor.attributes.clone().unwrap_or_default();
        let container = actor.id.clone().unwrap_or_default();
        if attributes.get(LABEL_MANAGED_BY).map(String::as_str) != Some(MANAGED_BY_VALUE)
            || !crate::instance::Instance::current().owns(&attributes)
        {
            return None;
        }
        match event.action.as_deref() {
            Some("oom") => {
                self.oom_pending
                    .lock()
                    .unwrap_or_else(|poison| poison.into_inner())
                    .insert(container.clone());
                tracing::warn!(
                    scope = attributes.get(LABEL_SCOPE).map(String::as_str),
                    id = attributes.get(LABEL_SANDBOX_ID).map(String::as_str),
                    container = %short(&container),
                    "runner ran out of memory"
                );
                None
            }
            Some("die") => {
                // Kept by the sandbox's base name, which describe looks it
                // up by (the container's name has the instance's prefix).
                let scope = attributes.get(LABEL_SCOPE)?.parse().ok()?;
                let key = SandboxKey::new(scope, attributes.get(LABEL_SANDBOX_ID)?.clone());
                let name = &key.base_name;
                let time_nano = event
                    .time_nano
                    .unwrap_or_else(|| event.time.unwrap_or_default() * 1_000_000_000);
                let code = attributes
                    .get("exitCode")
                    .and_then(|code| code.parse().ok())
                    .unwrap_or(-1);
                let oom_killed = self
                    .oom_pending
                    .lock()
                    .unwrap_or_else(|poison| poison.into_inner())
                    .remove(&container);
                let ours = self
                    .stopping
                    .lock()
                    .unwrap_or_else(|poison| poison.into_inner())
                    .remove(&container);
                let mut exit = exit_info(
                    code,
                    u64::try_from(time_nano / 1_000_000).unwrap_or_default(),
                    oom_killed,
                );
                if let Some(reason) = ours.filter(|_| !oom_killed) {
                    exit.reason = reason;
                }
                let recorded = RecordedExit {
                    exit,
                    oom_killed,
                    time_nano,
                };
                let mut table = self.table();
                if table
                    .get(name)
                    .is_some_and(|last| last.time_nano >= time_nano)
                {
                    return None;
                }
                table.insert(name.clone(), recorded);
                drop(table);
                tracing::info!(
                    scope = attributes.get(LABEL_SCOPE).map(String::as_str),
                    id = attributes.get(LABEL_SANDBOX_ID).map(String::as_str),
                    container = %short(&container),
                    exit = %recorded.exit,
                    oom_killed,
                    "runner exited"
                );
                Some(NewExit {
                    key,
                    uid: attributes.get(LABEL_UID).cloned().unwrap_or_default(),
                    generation: attributes
                        .get(LABEL_GENERATION)
                        .and_then(|value| value.parse().ok())
                        .unwrap_or(0),
                    exit: recorded.exit,
                })
            }
            _ => None,
        }
    }
}

/// The 12-character form operators see in `docker ps`.
pub fn short(container: &str) -> &str {
    container.get(..12).unwrap_or(container)
}

/// Follows the engine's events for as long as the daemon runs.
///
/// An exit is announced with the sandbox's generation: the larger of the
/// container's label (which generation created it) and what
/// `generations` counted since (its starts after a stop).
pub async fn watch(
    engine: Arc<Engine>,
    exits: Arc<Exits>,
    hub: Arc<EventHub>,
    generations: Arc<super::generation::Generations>,
) {
    let mut reconnect = super::engine::Reconnect::new();
    // Where a resubscription resumes: the end of what the last stream covered.
    let mut since: Option<SystemTime> = None;
    loop {
        let docker = reconnect.docker(&engine).await;
        let filters = HashMap::from([
            ("type", vec!["container".to_string()]),
            ("event", vec!["die".to_string(), "oom".to_string()]),
            (
                "label",
                vec![format!("{LABEL_MANAGED_BY}={MANAGED_BY_VALUE}")],
            ),
        ]);
        let mut options = EventsOptionsBuilder::new().filters(&filters);
        let resume = since.map(unix_seconds);
        if let Some(resume) = &resume {
            options = options.since(resume);
        }
        tracing::debug!(engine = %engine.address(), since = resume.as_deref(), "following the engine's events");
        let mut stream = docker.events(Some(options.build()));
        let ended = loop {
            match stream.next().await {
                Some(Ok(event)) => {
                    if let Some(new) = exits.record(&event) {
                        let generation = new.generation.max(generations.read(&new.key));
                        hub.emit(
                            EventKind::Exited,
                            &new.key,
                            &new.uid,
                            generation,
                            Some(new.exit),
                        );
                    }
                    since = Some(SystemTime::now());
                }
                Some(Err(error)) => break engine.classify(error).to_string(),
                None => break "the event stream ended".to_string(),
            }
        };
        since = Some(since.unwrap_or_else(SystemTime::now));
        engine.lost(&ended);
        reconnect.pause().await;
    }
}

/// `seconds.nanoseconds` since the epoch, as `/events?since=` takes it.
fn unix_seconds(time: SystemTime) -> String {
    let since = time
        .duration_since(SystemTime::UNIX_EPOCH)
        .unwrap_or_default();
    format!("{}.{:09}", since.as_secs(), since.subsec_nanos())
}

#[cfg(test)]
mod tests {
    use bollard::models::EventActor;

    use super::*;

    fn event(action: &str, container: &str, exit_code: &str, time_nano: i64) -> EventMessage {
        let attributes = HashMap::from([
            ("name".to_string(), "sbx-ses-0123456789ab".to_string()),
            ("exitCode".to_string(), exit_code.to_string()),
            (LABEL_MANAGED_BY.to_string(), MANAGED_BY_VALUE.to_string()),
            (LABEL_SCOPE.to_string(), "session".to_string()),
            (LABEL_SANDBOX_ID.to_string(), "s1".to_string()),
        ]);
        EventMessage {
            action: Some(action.to_string()),
            actor: Some(EventActor {
                id: Some(container.to_string()),
                attributes: Some(attributes),
            }),
            time_nano: Some(time_nano),
            ..Default::default()
        }
    }

    #[test]
    fn die_events_record_the_last_exit_once_and_oom_marks_it() {
        let exits = Exits::default();
        let key = crate::sandbox_key::SandboxKey::new(sandboxd_protocol::Scope::Session, "s1");
        let new = exits
            .record(&event("die", "c1", "3", 5_000_000_000))
            .unwrap();
        assert_eq!(new.exit.reason, ExitReason::Exited { code: 3 });
        assert_eq!((new.key.id.as_str(), new.generation), ("s1", 0));
        assert!(
            exits
                .record(&event("die", "c1", "3", 5_000_000_000))
                .is_none(),
            "a replayed event is not new"
        );
        let last = exits.last(&key).unwrap();
        assert_eq!(
            (last.exit.code, last.exit.signal, last.exit.at_unix_ms),
            (Some(3), None, 5_000)
        );
        assert!(!last.oom_killed);
        assert!(exits
            .record(&event("oom", "c1", "", 6_000_000_000))
            .is_none());
        let new = exits
            .record(&event("die", "c1", "137", 6_000_000_001))
            .unwrap();
        assert_eq!(
            new.exit.reason,
            ExitReason::OutOfMemory { limit_bytes: None }
        );
        let last = exits.last(&key).unwrap();
        assert!(last.oom_killed);
        assert_eq!(last.exit.signal, Some(9));
        // A container the daemon stops itself dies by deprovision, or by
        // the limit it was stopped for.
        exits.stopping("c1");
        let new = exits
            .record(&event("die", "c1", "143", 6_000_000_002))
            .unwrap();
        assert_eq!(new.exit.reason, ExitReason::Deprovisioned);
        exits.stopping_for("c1", ExitReason::Idle);
        let new = exits
            .record(&event("die", "c1", "143", 6_000_000_003))
            .unwrap();
        assert_eq!(new.exit.reason, ExitReason::Idle);
        assert_eq!(exits.last(&key).unwrap().exit.reason, ExitReason::Idle);
        exits.forget(&key);
        assert_eq!(exits.last(&key), None);
    }

    #[test]
    fn since_format() {
        let time = SystemTime::UNIX_EPOCH + std::time::Duration::new(1_700_000_000, 42);
        assert_eq!(unix_seconds(time), "1700000000.000000042");
    }
}
