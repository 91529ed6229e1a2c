//! The child table's entries: what the daemon knows of each sandbox
//! ([`Record`]) and of its live runner ([`Running`]).

use std::sync::Arc;

use sandboxd_protocol::{ExitInfo, ProbeState};

use super::{deprovision, lifecycle};

/// What the daemon knows of one sandbox. Never holds the token.
pub(super) struct Record {
    pub(super) task_queue: String,
    pub(super) caller_class: String,
    /// SHA-256 of the runner's token, to tell a caller that asks for another
    /// one that it did not take (see [`crate::drivers::differs`]).
    pub(super) token_sha256: [u8; 32],
    /// How many runners this sandbox has had.
    pub(super) generation: u64,
    /// The incarnation's uid (kept in the workspace catalog, so it
    /// outlives a daemon restart with the workspace).
    pub(super) uid: String,
    /// Boxed: most records never hold one, and every record is a slot of
    /// a table sized for thousands.
    pub(super) last_exit: Option<Box<ExitInfo>>,
    /// The live runner, if any; cleared by its own watcher when it exits.
    pub(super) running: Option<Running>,
}

impl Record {
    /// Its state as `probe`, `list` and `status` report it: a paused
    /// runner is stopped, and a record without one is absent.
    pub(super) fn state(&self) -> ProbeState {
        match &self.running {
            Some(running) if running.life.is_paused() => ProbeState::Stopped,
            Some(_) => ProbeState::Running,
            None => ProbeState::Absent,
        }
    }
}

pub(super) struct Running {
    /// The runner's host pid, as reported.
    pub(super) pid: u32,
    /// The sandbox's group leader, signalled at a stop: the runner itself,
    /// or its init under `isolation = "full"`.
    pub(super) leader: u32,
    /// What kept it apart, as it was started (one list shared by all).
    pub(super) isolation: Arc<[sandboxd_protocol::IsolationFeature]>,
    pub(super) generation: u64,
    pub(super) started_at_unix_ms: u64,
    /// Resolve at its leader's exit and once its whole group is gone and
    /// forgotten (oneshots: their one waiter is the deprovision that takes
    /// the record).
    pub(super) ends: deprovision::EndWaits,
    /// Set when the disk watcher stops it (a disk limit, `disk-full`): its
    /// exit says so.
    pub(super) disk_stop: Option<sandboxd_protocol::ExitReason>,
    /// Sent its SIGTERM by the daemon's stop, with every other runner at
    /// once (see `Inner::signal_every_runner`): its deprovision only
    /// waits.
    pub(super) signalled_at_stop: bool,
    /// Paused or not, idle or not, being stopped for a limit or not (see
    /// [`lifecycle`]).
    pub(super) life: lifecycle::RunState,
}
