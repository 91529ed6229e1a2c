//! How many sandboxes a driver owns, by scope and state: what `status`,
//! the systemd `STATUS=` line and the metrics gauge report.
//!
//! Counted apart from `list` because those three only need the numbers:
//! a list builds every sandbox's facts (names, task queue, uid, isolation
//! facts), several KiB each, and at 10,000 sandboxes a `status` that
//! listed them held tens of MiB for the call, and the `STATUS=` line did
//! the same every ten seconds. A driver that can count without building
//! them (the process tier, from its table) says so through
//! [`crate::provisioner::Provisioner::census`]; the others count their list.

use sandboxd_protocol::{ProbeState, SandboxCounts, SandboxInfo, Scope};

const STATES: [ProbeState; 3] = [ProbeState::Absent, ProbeState::Stopped, ProbeState::Running];

/// Sandboxes counted by scope and state.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Census {
    counts: [[u64; STATES.len()]; Scope::ALL.len()],
}

impl Census {
    /// The census of a list.
    pub fn of(sandboxes: &[SandboxInfo]) -> Census {
        let mut census = Census::default();
        for sandbox in sandboxes {
            census.add(sandbox.scope, sandbox.state);
        }
        census
    }

    pub fn add(&mut self, scope: Scope, state: ProbeState) {
        self.counts[scope_index(scope)][state_index(state)] += 1;
    }

    /// Every sandbox counted, whatever its state.
    pub fn total(&self) -> u64 {
        self.counts.iter().flatten().sum()
    }

    pub fn in_state(&self, state: ProbeState) -> u64 {
        self.counts.iter().map(|row| row[state_index(state)]).sum()
    }

    fn in_scope(&self, scope: Scope) -> u64 {
        self.counts[scope_index(scope)].iter().sum()
    }

    /// The counts `status` answers with.
    pub fn counts(&self) -> SandboxCounts {
        SandboxCounts {
            session: self.in_scope(Scope::Session),
            workflow: self.in_scope(Scope::Workflow),
            connect: self.in_scope(Scope::Connect),
            running: self.in_state(ProbeState::Running),
            stopped: self.in_state(ProbeState::Stopped),
        }
    }

    /// Each scope and state that has sandboxes, with how many.
    pub fn present(&self) -> impl Iterator<Item = (Scope, ProbeState, u64)> + '_ {
        Scope::ALL.into_iter().flat_map(move |scope| {
            STATES.into_iter().filter_map(move |state| {
                let count = self.counts[scope_index(scope)][state_index(state)];
                (count > 0).then_some((scope, state, count))
            })
        })
    }
}

fn scope_index(scope: Scope) -> usize {
    match scope {
        Scope::Session => 0,
        Scope::Workflow => 1,
        Scope::Connect => 2,
    }
}

fn state_index(state: ProbeState) -> usize {
    match state {
        ProbeState::Absent => 0,
        ProbeState::Stopped => 1,
        ProbeState::Running => 2,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn info(scope: Scope, state: ProbeState) -> SandboxInfo {
        SandboxInfo {
            state,
            ..SandboxInfo::absent(scope, "x", 1, None)
        }
    }

    #[test]
    fn counts_by_scope_and_by_state() {
        let census = Census::of(&[
            info(Scope::Session, ProbeState::Running),
            info(Scope::Session, ProbeState::Stopped),
            info(Scope::Workflow, ProbeState::Running),
            info(Scope::Connect, ProbeState::Absent),
        ]);
        assert_eq!(
            census.counts(),
            SandboxCounts {
                session: 2,
                workflow: 1,
                connect: 1,
                running: 2,
                stopped: 1,
            }
        );
        assert_eq!(census.total(), 4);
        assert_eq!(census.in_state(ProbeState::Running), 2);
        assert_eq!(census.in_state(ProbeState::Absent), 1);
    }

    #[test]
    fn present_names_only_what_has_sandboxes() {
        let mut census = Census::default();
        assert_eq!(census.present().count(), 0);
        census.add(Scope::Workflow, ProbeState::Running);
        census.add(Scope::Workflow, ProbeState::Running);
        census.add(Scope::Session, ProbeState::Stopped);
        assert_eq!(
            census.present().collect::<Vec<_>>(),
            [
                (Scope::Session, ProbeState::Stopped, 1),
                (Scope::Workflow, ProbeState::Running, 2),
            ]
        );
    }
}
