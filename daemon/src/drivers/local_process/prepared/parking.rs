//! What a prepared sandbox has parked in it, as the tier's launcher parks
//! it (see `launcher`): the init binary's parked runner (in its cgroups,
//! as its uid, its filters applied, see [`parked_runner`]), or under
//! `isolation = "gvisor"` a `runsc run` of a stub with its sentry booted
//! (see `gvisor::prepared`).
//!
//! [`parked_runner`]: super::parked_runner

use std::path::Path;
use std::sync::Arc;

use super::super::gvisor::prepared::{GvisorParker, ParkedGvisor, QUIET_AFTER_A_START};
use super::parked_runner::{ParkedRunner, RunnerParker};
use super::quiet::Quiet;

/// How every prepared sandbox gets its runner parked.
pub enum Parker {
    Runner(Arc<RunnerParker>),
    Gvisor(Arc<GvisorParker>),
}

/// A runner parked in a prepared sandbox and not yet started: dropped, it
/// is ended.
pub enum Parked {
    Runner(ParkedRunner),
    Gvisor(ParkedGvisor),
}

impl Parked {
    /// The runner program it was made for, when it holds one already (a
    /// gVisor sandbox's bundle binds it); a take of another program has
    /// no use for it.
    pub fn program(&self) -> Option<&Path> {
        match self {
            Parked::Runner(_) => None,
            Parked::Gvisor(parked) => Some(parked.program()),
        }
    }

    /// True when it holds its prepared workspace bound (gVisor's): of no
    /// use to a sandbox that keeps a workspace of its own.
    pub fn binds_its_workspace(&self) -> bool {
        matches!(self, Parked::Gvisor(_))
    }
}

impl Parker {
    /// How long after a start the pool waits before it prepares the next
    /// sandbox (see [`super::quiet`]): a gVisor sandbox's boot holds a
    /// CPU longer than a parked runner's start.
    pub fn quiet(&self) -> Quiet {
        match self {
            Parker::Runner(_) => Quiet::default(),
            Parker::Gvisor(_) => Quiet::lasting(QUIET_AFTER_A_START),
        }
    }

    /// What `status` says of the runners parked.
    pub fn describe(&self, parking_failed: bool) -> &'static str {
        match (self, parking_failed) {
            (Parker::Gvisor(_), _) => {
                "each with its runner parked under gVisor (runsc run of a stub, its sentry booted, in its cgroups, under its uid, its workspace bound)"
            }
            (Parker::Runner(_), false) => {
                "each with its runner parked (in its cgroups, under its uid, filters applied)"
            }
            (Parker::Runner(_), true) => "runners started at the take (parking one failed)",
        }
    }
}
