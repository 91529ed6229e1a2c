//! The process that holds a sandbox's view open while its runner lives
//! (and the sandbox's relay, under a private network): made by a prepared
//! view or a cold start, ended when the runner's exit is known.

use std::os::fd::OwnedFd;

use super::super::isolation::relay::Relay;

/// A taken view's holder, ended (and with it the view's PID namespace and
/// every process left in it) when this is dropped: when its runner's exit
/// is known, or when the runner's start failed.
///
/// Why the holder stays out of the sandbox's cgroups rather than ending
/// with them: moving a process between cgroups (a `cgroup.procs` write per
/// hierarchy, five on a hybrid host) is the slowest step of a warm start,
/// while the runner itself is cloned straight into them
/// (`CLONE_INTO_CGROUP`). The holder only reaps; it runs no sandbox code.
///
/// Under `[network] mode = "private"` it also holds the sandbox's relay,
/// ended with it (a cold sandbox's holder is only that).
pub struct Holder {
    pidfd: Option<OwnedFd>,
    /// Held for its drop, which ends it.
    _relay: Option<Relay>,
}

impl Holder {
    /// A prepared view's: its holder process, and its relay if it has one.
    pub fn of_view(pidfd: OwnedFd, relay: Option<Relay>) -> Holder {
        Holder {
            pidfd: Some(pidfd),
            _relay: relay,
        }
    }

    /// The holder process's pidfd (a cold sandbox's holder has none).
    pub fn pidfd(&self) -> Option<&OwnedFd> {
        self.pidfd.as_ref()
    }

    /// A cold sandbox's: only its relay (its init is its leader).
    pub fn of_network(relay: Relay) -> Holder {
        Holder {
            pidfd: None,
            _relay: Some(relay),
        }
    }
}

impl Drop for Holder {
    /// SIGKILL by its pidfd (gone already is fine); the relay drops after.
    fn drop(&mut self) {
        let Some(pidfd) = &self.pidfd else {
            return;
        };
        crate::drivers::local_process::pidfd::kill(pidfd);
    }
}
